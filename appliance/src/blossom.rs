//! A Blossom blob store on the node's listener (BUD-01, BUD-02): content-addressed blobs
//! (SHA-256) for job inputs and outputs.
//!
//! - `GET /<sha256>[.ext]` and `HEAD /<sha256>[.ext]`: the blob (anyone may read), with
//!   its media type; bytes served are counted per peer (the authorizing key when a request
//!   carries one, else the remote address) and reported at `GET /v1/blobs/served`.
//! - `PUT /upload`: stores the body; needs `Authorization: Nostr <base64 event>`, a kind
//!   24242 event with `["t", "upload"]`, an `["x", <sha256 of the body>]` tag, an
//!   `expiration` in the future and a `created_at` not in the future; answers the blob
//!   descriptor `{url, sha256, size, type, uploaded}`.
//! - `DELETE /<sha256>`: the same authorization with `["t", "delete"]` and the blob's `x`;
//!   removes the signer's claim, and the blob once nobody claims it.
//! - `GET /list/<pubkey>`: the descriptors of the blobs a key uploaded.
//!
//! Errors carry BUD-01's `X-Reason` header and a JSON body with a code; every response
//! allows any origin, and `OPTIONS` answers the CORS preflight.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{ConnectInfo, Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use fleetmesh_relay::Event;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::{Value, json};

use crate::node::unix_now;
use sha2::{Digest, Sha256};

/// The blob directory and its index, in the node directory.
pub const BLOBS_DIR: &str = "blobs";

/// Largest blob accepted, bytes.
pub const MAX_BLOB: usize = 64 << 20;

/// The store.
pub struct Blossom {
    dir: PathBuf,
    db: Mutex<Connection>,
    served: Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for Blossom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blossom")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
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

/// `<sha256>` or `<sha256>.<ext>` → the hash.
fn hash_of(name: &str) -> Option<String> {
    let h = name.split('.').next()?;
    (h.len() == 64
        && h.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
    .then(|| h.to_string())
}

impl Blossom {
    /// Opens (or creates) the store under `node_dir`.
    ///
    /// # Errors
    /// The directory or the index cannot be opened.
    pub fn open(node_dir: &std::path::Path) -> anyhow::Result<Arc<Blossom>> {
        let dir = node_dir.join(BLOBS_DIR);
        std::fs::create_dir_all(&dir)?;
        let db = Connection::open(dir.join("index.sqlite"))?;
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE IF NOT EXISTS blobs (
                 sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, type TEXT NOT NULL,
                 uploaded INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS owners (
                 sha256 TEXT NOT NULL, pubkey TEXT NOT NULL, PRIMARY KEY (sha256, pubkey));",
        )?;
        Ok(Arc::new(Blossom {
            dir,
            db: Mutex::new(db),
            served: Mutex::new(HashMap::new()),
        }))
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.db
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn descriptor(&self, base: &str, hash: &str) -> Option<Value> {
        self.db()
            .query_row(
                "SELECT size, type, uploaded FROM blobs WHERE sha256 = ?1",
                params![hash],
                |r| {
                    Ok(json!({
                        "url": format!("{base}/{hash}"),
                        "sha256": hash,
                        "size": r.get::<_, i64>(0)?,
                        "type": r.get::<_, String>(1)?,
                        "uploaded": r.get::<_, i64>(2)?,
                    }))
                },
            )
            .optional()
            .ok()
            .flatten()
    }

    /// Stores `bytes` as a blob claimed by `owner` (the node's own outputs); its hash.
    ///
    /// # Errors
    /// The file or the index cannot be written.
    pub fn put(&self, bytes: &[u8], media: &str, owner: &str) -> std::io::Result<String> {
        let hash = hex::encode(Sha256::digest(bytes));
        let path = self.dir.join(&hash);
        if !path.exists() {
            let tmp = self.dir.join(format!("{hash}.part"));
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(&tmp, &path)?;
        }
        let db = self.db();
        db.execute(
            "INSERT OR IGNORE INTO blobs (sha256, size, type, uploaded) VALUES (?1, ?2, ?3, ?4)",
            params![hash, bytes.len() as i64, media, unix_now() as i64],
        )
        .and_then(|_| {
            db.execute(
                "INSERT OR IGNORE INTO owners (sha256, pubkey) VALUES (?1, ?2)",
                params![hash, owner],
            )
        })
        .map_err(std::io::Error::other)?;
        Ok(hash)
    }

    /// Bytes of blob `hash`, if stored.
    pub fn get(&self, hash: &str) -> Option<Vec<u8>> {
        std::fs::read(self.dir.join(hash)).ok()
    }

    fn count(&self, peer: String, n: u64) {
        *self
            .served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(peer)
            .or_default() += n;
    }
}

/// Checks a `Nostr <base64 event>` authorization for `verb` (and blob `hash`, when given);
/// the signer's key, or why not (answered as 401).
fn authorize(headers: &HeaderMap, verb: &str, hash: Option<&str>) -> Result<String, String> {
    let unauthorized = |why: String| why;
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| unauthorized("an Authorization: Nostr header is required".into()))?;
    let b64 = value
        .strip_prefix("Nostr ")
        .ok_or_else(|| unauthorized("the Authorization scheme must be Nostr".into()))?;
    let json = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| unauthorized(format!("the authorization is not base64: {e}")))?;
    let ev = Event::from_json(&String::from_utf8_lossy(&json))
        .map_err(|e| unauthorized(format!("the authorization is not an event: {e}")))?;
    ev.verify()
        .map_err(|e| unauthorized(format!("the authorization does not verify: {e}")))?;
    let now = unix_now();
    if ev.kind != 24242 {
        return Err(unauthorized(format!(
            "authorization kind {} (24242 expected)",
            ev.kind
        )));
    }
    if ev.created_at > now + 60 {
        return Err(unauthorized(
            "the authorization is created in the future".into(),
        ));
    }
    match ev.expiration() {
        Some(t) if t > now => {}
        _ => {
            return Err(unauthorized(
                "the authorization has expired (or no expiration)".into(),
            ));
        }
    }
    if ev.tag_value("t") != Some(verb) {
        return Err(unauthorized(format!("the authorization is not for {verb}")));
    }
    if let Some(h) = hash {
        let listed = ev.tags.iter().any(|t| {
            t.first().map(String::as_str) == Some("x") && t.get(1).map(String::as_str) == Some(h)
        });
        if !listed {
            return Err(unauthorized(format!(
                "the authorization does not list blob {h}"
            )));
        }
    }
    Ok(hex::encode(ev.pubkey))
}

fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// BUD-01: every response carries `Access-Control-Allow-Origin: *` (browser clients).
pub async fn cors(mut r: Response) -> Response {
    r.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    r
}

/// BUD-01: the preflight answer for the blob routes.
pub async fn preflight() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    crate::server::cors(r.headers_mut(), "GET, HEAD, PUT, DELETE, OPTIONS");
    r.headers_mut().insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    r
}

/// `GET /<sha256>` and `HEAD /<sha256>`.
pub async fn get_blob(
    State(s): State<Arc<Blossom>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    UrlPath(name): UrlPath<String>,
    method: axum::http::Method,
    headers: HeaderMap,
) -> Response {
    let Some(hash) = hash_of(&name) else {
        return fail(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such endpoint or blob",
        );
    };
    let Some(desc) = s.descriptor(&base_url(&headers), &hash) else {
        return fail(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no blob {hash}"),
        );
    };
    let size = desc["size"].as_u64().unwrap_or(0);
    let media = desc["type"]
        .as_str()
        .unwrap_or("application/octet-stream")
        .to_string();
    let mut h = HeaderMap::new();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&media)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("none"));
    if method == axum::http::Method::HEAD {
        return (StatusCode::OK, h).into_response();
    }
    let Some(bytes) = s.get(&hash) else {
        return fail(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("blob {hash} is gone"),
        );
    };
    // the peer: the key that authorized the read, if any, else the address
    let who = authorize(&headers, "get", None).unwrap_or_else(|_| peer.ip().to_string());
    s.count(who, bytes.len() as u64);
    (StatusCode::OK, h, bytes).into_response()
}

/// `PUT /upload`.
pub async fn upload(
    State(s): State<Arc<Blossom>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if body.len() > MAX_BLOB {
        return fail(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("blobs are at most {MAX_BLOB} bytes"),
        );
    }
    let hash = hex::encode(Sha256::digest(&body));
    let owner = match authorize(&headers, "upload", Some(&hash)) {
        Ok(k) => k,
        Err(why) => return fail(StatusCode::UNAUTHORIZED, "unauthorized", why),
    };
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_string();
    if let Err(e) = s.put(&body, &media, &owner) {
        return fail(StatusCode::INTERNAL_SERVER_ERROR, "storage", e.to_string());
    }
    match s.descriptor(&base_url(&headers), &hash) {
        Some(d) => axum::Json(d).into_response(),
        None => fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            "storage",
            "the blob vanished",
        ),
    }
}

/// `DELETE /<sha256>`.
pub async fn delete(
    State(s): State<Arc<Blossom>>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let Some(hash) = hash_of(&name) else {
        return fail(StatusCode::NOT_FOUND, "not_found", "no such blob");
    };
    let owner = match authorize(&headers, "delete", Some(&hash)) {
        Ok(k) => k,
        Err(why) => return fail(StatusCode::UNAUTHORIZED, "unauthorized", why),
    };
    let db = s.db();
    let removed = db
        .execute(
            "DELETE FROM owners WHERE sha256 = ?1 AND pubkey = ?2",
            params![hash, owner],
        )
        .unwrap_or(0);
    if removed == 0 {
        return fail(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("{owner} did not upload {hash}"),
        );
    }
    let left: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM owners WHERE sha256 = ?1",
            params![hash],
            |r| r.get(0),
        )
        .unwrap_or(1);
    if left == 0 {
        let _ = db.execute("DELETE FROM blobs WHERE sha256 = ?1", params![hash]);
        let _ = std::fs::remove_file(s.dir.join(&hash));
    }
    axum::Json(json!({"deleted": hash})).into_response()
}

/// `GET /list/<pubkey>`.
pub async fn list(
    State(s): State<Arc<Blossom>>,
    UrlPath(pubkey): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let hashes: Vec<String> = {
        let db = s.db();
        let Ok(mut q) = db.prepare("SELECT sha256 FROM owners WHERE pubkey = ?1 ORDER BY sha256")
        else {
            return fail(StatusCode::INTERNAL_SERVER_ERROR, "storage", "listing");
        };
        q.query_map(params![pubkey], |r| r.get(0))
            .map(|rows| rows.flatten().collect())
            .unwrap_or_default()
    };
    let base = base_url(&headers);
    let out: Vec<Value> = hashes
        .iter()
        .filter_map(|h| s.descriptor(&base, h))
        .collect();
    axum::Json(out).into_response()
}

/// `GET /v1/blobs/served`: bytes served per peer.
pub async fn served(State(s): State<Arc<Blossom>>) -> Response {
    let map = s
        .served
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    axum::Json(json!({"bytes_served": map})).into_response()
}
