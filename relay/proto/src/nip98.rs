//! NIP-98 HTTP authorization: a request signed by a Nostr key — a kind-27235 event, base64
//! in `Authorization: Nostr …`, naming the request's absolute URL (`u`), its method
//! (`method`) and, for a request with a body, the body's SHA-256 (`payload`). It is how an
//! API client says which key it is, so that the node can keep each key's jobs to that key
//! (the appliance's HTTP guard checks it with [`check`]).
//!
//! A pure function of the header's value, the request line and the clock; [`sign`] makes
//! the header (for `meshnode job`). Fuzzed by `bench/fuzz` (`nip98_authorization`).

use crate::event::UnsignedEvent;
use crate::{Event, NodeKeys};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};

/// The event kind of NIP-98.
pub const KIND: u16 = 27235;
/// How far (seconds) an authorization's `created_at` may be from the node's clock, either
/// way (NIP-98 suggests a minute).
pub const SKEW_SECS: u64 = 60;
/// The longest header value read (a signed event with a few tags is well under 1 KiB).
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// A checked authorization: who signed, and the body digest it commits to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The signer's public key, hex.
    pub pubkey: String,
    /// Its `payload` tag: the SHA-256 (lowercase hex) of the request body, if it names one.
    pub payload: Option<String>,
}

impl Signed {
    /// Whether `body` is what the authorization was signed for: its `payload` tag equals
    /// the body's SHA-256 (a request with a body must name it, so that the authorization
    /// cannot be replayed with another body within its minute).
    pub fn covers(&self, body: &[u8]) -> bool {
        self.payload.as_deref() == Some(hex::encode(Sha256::digest(body)).as_str())
    }
}

/// Checks `value` (an `Authorization` header) for a `method` request to `host` (the `Host`
/// header) at `path_and_query`, at Unix time `now`: the scheme is `Nostr`, the event
/// decodes, verifies, is kind 27235, was made within [`SKEW_SECS`] of `now`, and its `u`
/// tag is an `http` or `https` URL of this host, path and query (the scheme is not
/// compared: a TLS-terminating proxy may stand in front), its `method` tag this method.
///
/// # Errors
/// The first check that failed, in words (the caller answers 401 with it).
pub fn check(
    value: &str,
    method: &str,
    host: &str,
    path_and_query: &str,
    now: u64,
) -> Result<Signed, String> {
    if value.len() > MAX_HEADER_BYTES {
        return Err(format!(
            "the authorization is over {MAX_HEADER_BYTES} bytes"
        ));
    }
    let ev = Event::from_authorization(value)?;
    if ev.kind != KIND {
        return Err(format!("authorization kind {} ({KIND} expected)", ev.kind));
    }
    if ev.created_at.abs_diff(now) > SKEW_SECS {
        return Err(format!(
            "the authorization was made at {}, more than {SKEW_SECS} s from the node's clock ({now})",
            ev.created_at
        ));
    }
    let u = ev.tag_value("u").unwrap_or_default();
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"))
        .ok_or_else(|| format!("the authorization's u tag {u:?} is not an http(s) URL"))?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
    if !authority.eq_ignore_ascii_case(host) || path != path_and_query {
        return Err(format!(
            "the authorization is for {u}, not for {host}{path_and_query}"
        ));
    }
    if !ev
        .tag_value("method")
        .is_some_and(|m| m.eq_ignore_ascii_case(method))
    {
        return Err(format!("the authorization is not for {method}"));
    }
    let payload = ev.tag_value("payload").map(str::to_ascii_lowercase);
    Ok(Signed {
        pubkey: hex::encode(ev.pubkey),
        payload,
    })
}

/// An `Authorization` header value signing a `method` request to `url` (absolute) with
/// `keys` at Unix time `now`, committing to `body` when there is one.
///
/// # Errors
/// When the OS random source fails (signing).
pub fn sign(
    keys: &NodeKeys,
    method: &str,
    url: &str,
    body: Option<&[u8]>,
    now: u64,
) -> crate::Result<String> {
    let mut tags = vec![
        vec!["u".to_string(), url.to_string()],
        vec!["method".to_string(), method.to_string()],
    ];
    if let Some(b) = body {
        tags.push(vec!["payload".into(), hex::encode(Sha256::digest(b))]);
    }
    let ev = keys.sign(UnsignedEvent {
        created_at: now,
        kind: KIND,
        tags,
        content: String::new(),
    })?;
    Ok(format!(
        "Nostr {}",
        base64::engine::general_purpose::STANDARD.encode(ev.to_json())
    ))
}
