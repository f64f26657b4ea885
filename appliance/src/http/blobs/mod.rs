//! A Blossom blob store on the node's listener (BUD-01, BUD-02, BUD-06): content-addressed
//! blobs (SHA-256) for job inputs and outputs.
//!
//! - `GET /<sha256>[.ext]` and `HEAD /<sha256>[.ext]`: the blob (anyone may read), streamed
//!   from disk with its media type, `Accept-Ranges: bytes` and single `Range`s (`bytes=a-b`,
//!   `bytes=a-`, `bytes=-n`: 206 with `Content-Range`; 416 when none of it exists). Every
//!   blob is served with `X-Content-Type-Options: nosniff` and `Content-Security-Policy:
//!   default-src 'none'; sandbox`, and as `Content-Disposition: attachment` unless its type
//!   is on a short list of passive ones (see [`media::passive`]), so an uploaded page or SVG never
//!   runs as the node's origin.
//! - `PUT /upload`: stores the body; needs `Authorization: Nostr <base64 event>`, a kind
//!   24242 event with `["t", "upload"]`, an `expiration` in the future, a `created_at` not
//!   in the future and an `["x", <sha256>]` tag for the declared hash: BUD-06's `X-SHA-256`
//!   header when sent, else any of the event's `x` tags. The authorization and
//!   `Content-Length` are checked before a byte of the body is read; the body then goes to
//!   a temporary file in the blob directory while it is hashed (never whole in memory). An
//!   upload is cut off, its file removed, when it passes [`MAX_BLOB`] (413), sends nothing
//!   for `[blobs] body_timeout_secs` (408), or hashes to something not declared (400 against
//!   `X-SHA-256`, 401 against the event's `x` tags); else the file is renamed into place
//!   and the blob descriptor `{url, sha256, size, type, uploaded}` is the answer.
//! - `HEAD /upload` (BUD-06): whether an upload of `X-SHA-256`, `X-Content-Length` and
//!   `X-Content-Type` with this Authorization would be accepted; 200, or the status the
//!   upload would get (400, 401, 411, 413).
//! - `DELETE /<sha256>`: the same authorization with `["t", "delete"]` and the blob's `x`;
//!   removes the signer's claim, and the blob once nobody claims it.
//! - `GET /list/<pubkey>`: the descriptors of the blobs a key uploaded.
//! - `GET /v1/blobs/served`: bytes served per peer (the authorizing key when a read carries
//!   one, else the remote address), for the operator only: with `[api] token` set it needs
//!   `Authorization: Bearer TOKEN` (401 without), else only loopback clients are answered
//!   (403). At most `[blobs] served_peers` peers are kept; a new peer at the cap takes the
//!   place of the one with the fewest bytes (the heavy readers stay in view, a stream of
//!   throwaway keys only replaces itself). A federation peer's key has its uploads and
//!   reads counted in its ledger tally too (`blob_in`, `blob_out` of the window's
//!   measurement). `/metrics` has the totals
//!   (`fleetmesh_blobs_bytes_total{direction="in"|"out"}`) but no peer: it is public, and
//!   who reads what is the operator's to know.
//!
//! Errors carry BUD-01's `X-Reason` header and a JSON body with a code; every response
//! allows any origin, and `OPTIONS` answers the CORS preflight.
//!
//! The blobs and their index are `fleetmesh_market::blobs::BlobStore` (shared with the job
//! engines); this module is its HTTP face.

use std::collections::HashMap;
use std::io::SeekFrom;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWriteExt as _};

use fleetmesh_market::blobs::{BlobStore, Released, Upload, is_hash};

use crate::config::BlobsSection;
use fleetmesh_proto::unix_now;

mod auth;
mod http;
mod media;
#[cfg(test)]
mod tests;

pub use http::{cors, delete, get_blob, list, preflight, served, upload, upload_check};
use media::{Span, blob_headers, clean_media, digits, span};

/// Largest blob accepted, bytes.
pub const MAX_BLOB: usize = 64 << 20;

/// Bytes read from disk per chunk of a served blob.
const CHUNK: usize = 64 << 10;

/// The store.
pub struct Blossom {
    /// The blobs and their index (`fleetmesh_market::blobs`), shared with the job engines.
    store: Arc<BlobStore>,
    served: Mutex<Served>,
    /// `[blobs] body_timeout_secs`.
    body_timeout: Duration,
    /// SHA-256 of `[api] token`, when one is set.
    operator_token: Option<[u8; 32]>,
    /// `[face] per_ip_exempt`: where a reverse proxy on the box sits.
    proxies: Vec<std::net::IpAddr>,
    /// `[blobs] per_key_bytes`.
    per_key_bytes: u64,
    /// The federation's peers: a peer key's transfers count in its tally.
    peers: std::sync::OnceLock<Arc<crate::peers::Peers>>,
}

impl std::fmt::Debug for Blossom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blossom")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Bytes served per peer, for at most `cap` peers.
#[derive(Debug)]
struct Served {
    bytes: HashMap<String, u64>,
    cap: usize,
    /// Peers dropped to keep under `cap`.
    evicted: u64,
}

impl Served {
    fn new(cap: usize) -> Served {
        Served {
            bytes: HashMap::new(),
            cap: cap.max(1),
            evicted: 0,
        }
    }

    /// Counts `n` more bytes for `peer`; a new peer at the cap replaces the one with the
    /// fewest bytes (ties: the smallest name).
    fn add(&mut self, peer: &str, n: u64) {
        if let Some(v) = self.bytes.get_mut(peer) {
            *v = v.saturating_add(n);
            return;
        }
        if self.bytes.len() >= self.cap {
            let least = self
                .bytes
                .iter()
                .min_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)))
                .map(|(k, _)| k.clone());
            if let Some(k) = least {
                self.bytes.remove(&k);
                self.evicted += 1;
            }
        }
        self.bytes.insert(peer.to_string(), n);
    }
}

fn fail(status: StatusCode, code: &str, reason: impl Into<String>) -> Response {
    let reason = reason.into();
    let mut r = (
        status,
        axum::Json(json!({"error": {"code": code, "message": reason}})),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&reason.replace(['\r', '\n'], " ")) {
        r.headers_mut().insert("x-reason", v);
    }
    r
}

/// Whether `h` is a blob name: 64 lowercase hex digits.
/// `<sha256>` or `<sha256>.<ext>` → the hash.
fn hash_of(name: &str) -> Option<String> {
    let h = name.split('.').next()?;
    is_hash(h).then(|| h.to_string())
}

/// A refusal: the status, a code and the reason (answered by [`fail`]).
#[derive(Debug)]
struct Refusal {
    status: StatusCode,
    code: &'static str,
    reason: String,
}

impl Refusal {
    fn new(status: StatusCode, code: &'static str, reason: impl Into<String>) -> Refusal {
        Refusal {
            status,
            code,
            reason: reason.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let mut r = fail(self.status, self.code, self.reason);
        if self.status == StatusCode::UNAUTHORIZED && self.code == "operator_only" {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"fleetmesh\""),
            );
        }
        r
    }
}

impl Blossom {
    /// Blossom over `store`, with `[blobs]` and the operator's `[api] token`.
    pub fn new(
        store: Arc<BlobStore>,
        config: &BlobsSection,
        operator_token: Option<&str>,
        proxies: &[std::net::IpAddr],
    ) -> Arc<Blossom> {
        Arc::new(Blossom {
            store,
            served: Mutex::new(Served::new(config.served_peers)),
            body_timeout: Duration::from_secs(config.body_timeout_secs),
            operator_token: operator_token.map(|t| Sha256::digest(t.as_bytes()).into()),
            proxies: proxies.to_vec(),
            per_key_bytes: config.per_key_bytes,
            peers: std::sync::OnceLock::new(),
        })
    }

    /// Counts the transfers of the federation's peer keys in their tallies (the ledger's
    /// Blossom measurements), from now on.
    pub fn meter_peers(&self, peers: Arc<crate::peers::Peers>) {
        let _ = self.peers.set(peers);
    }

    /// Counts Blossom bytes of `key` in its tally when it is a peer's.
    fn meter(&self, key: &str, uploaded: u64, served: u64) {
        if let Some(t) = self.peers.get().and_then(|p| p.tally_known(key)) {
            t.blobs(uploaded, served);
        }
    }

    /// BUD-02's blob descriptor of `hash`, with its URL under `base`.
    fn descriptor(&self, base: &str, hash: &str) -> Option<Value> {
        let b = self.store.info(hash)?;
        Some(json!({
            "url": format!("{base}/{hash}"),
            "sha256": hash,
            "size": b.size,
            "type": b.media,
            "uploaded": b.uploaded,
        }))
    }

    fn count(&self, peer: &str, n: u64) {
        metrics::counter!("fleetmesh_blobs_bytes_total", "direction" => "out").increment(n);
        self.meter(peer, 0, n);
        self.served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .add(peer, n);
    }

    /// Whether a request to the operator-only endpoints comes from the operator: with
    /// `[api] token` set, it carries `Authorization: Bearer TOKEN`; without one, it comes
    /// from this box with no proxy in front ([`crate::http::guard::local_operator`]). The
    /// refusal to answer otherwise.
    fn operator(&self, headers: &HeaderMap, peer: SocketAddr) -> Result<(), Refusal> {
        let Some(want) = &self.operator_token else {
            if crate::http::guard::local_operator(Some(peer.ip()), headers, &self.proxies) {
                return Ok(());
            }
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "operator_only",
                "without an [api] token only a loopback client with no proxy in front may \
                 read this (set [face] per_ip_exempt = [] where no proxy is)",
            ));
        };
        if crate::http::guard::bearer_matches(headers, want) {
            return Ok(());
        }
        Err(Refusal::new(
            StatusCode::UNAUTHORIZED,
            "operator_only",
            "this needs `Authorization: Bearer <[api] token>`",
        ))
    }

    /// Streams `body` into a temporary file while hashing it: the file, the hash and the
    /// size, or the answer refusing it (the file is removed when the [`Upload`] drops).
    async fn receive(&self, body: Body) -> Result<(Upload, String, u64), Refusal> {
        let storage = |e: std::io::Error| {
            Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage",
                format!("writing the upload: {e}"),
            )
        };
        let partial = self.store.new_upload().map_err(storage)?;
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(partial.path())
            .await
            .map_err(storage)?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut stream = body.into_data_stream();
        loop {
            let chunk = match tokio::time::timeout(self.body_timeout, stream.next()).await {
                Err(_) => {
                    return Err(Refusal::new(
                        StatusCode::REQUEST_TIMEOUT,
                        "body_timeout",
                        format!(
                            "no body bytes for {} s ([blobs] body_timeout_secs)",
                            self.body_timeout.as_secs()
                        ),
                    ));
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    return Err(Refusal::new(
                        StatusCode::BAD_REQUEST,
                        "bad_body",
                        format!("reading the body: {e}"),
                    ));
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            size += chunk.len() as u64;
            if size > MAX_BLOB as u64 {
                return Err(too_large());
            }
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(storage)?;
        }
        file.flush().await.map_err(storage)?;
        file.sync_all().await.map_err(storage)?;
        drop(file);
        Ok((partial, hex::encode(hasher.finalize()), size))
    }
}

impl Blossom {
    /// 413 `quota` when `owner` (who does not hold blob `hash` yet) cannot store `size`
    /// more bytes under `[blobs] per_key_bytes`.
    fn within_quota(&self, owner: &str, hash: Option<&str>, size: u64) -> Result<(), Refusal> {
        match self.store.over_quota(owner, hash, size, self.per_key_bytes) {
            Ok(None) => Ok(()),
            Ok(Some(why)) => Err(over_quota(why)),
            Err(r) => Err(Refusal::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage",
                r.message,
            )),
        }
    }
}

fn over_quota(why: String) -> Refusal {
    Refusal::new(StatusCode::PAYLOAD_TOO_LARGE, "quota", why)
}

fn too_large() -> Refusal {
    Refusal::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "too_large",
        format!("blobs are at most {MAX_BLOB} bytes"),
    )
}
