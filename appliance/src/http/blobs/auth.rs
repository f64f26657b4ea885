//! BUD-01's authorization: a signed kind-24242 Nostr event, base64 in the `Authorization:
//! Nostr …` header. A pure function of the header's value and the clock (no other part of
//! the appliance), so the fuzz harnesses compile this file as it is.

use fleetmesh_proto::Event;

/// Who authorized, and the blob hashes the event lists (`x` tags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorized {
    /// The signer's public key, hex.
    pub pubkey: String,
    /// The hashes in its `x` tags.
    pub x: Vec<String>,
}

/// Checks an `Authorization` header value for `verb` (`upload`, `delete`, …) and, when
/// given, blob `hash`, at Unix time `now`: the scheme is `Nostr`, the event decodes,
/// verifies, is kind 24242, was not made in the future, has an `expiration` still ahead,
/// a `t` tag naming `verb`, and lists `hash` in an `x` tag. The signer and the hashes, or
/// why not.
///
/// # Errors
/// The first check that failed, in words (the caller answers 401 with it).
pub fn check_authorization(
    value: &str,
    verb: &str,
    hash: Option<&str>,
    now: u64,
) -> Result<Authorized, String> {
    let ev = Event::from_authorization(value)?;
    if ev.kind != 24242 {
        return Err(format!("authorization kind {} (24242 expected)", ev.kind));
    }
    if ev.created_at > now.saturating_add(60) {
        return Err("the authorization is created in the future".into());
    }
    match ev.expiration() {
        Some(t) if t > now => {}
        _ => return Err("the authorization has expired (or no expiration)".into()),
    }
    if ev.tag_value("t") != Some(verb) {
        return Err(format!("the authorization is not for {verb}"));
    }
    let x: Vec<String> = ev
        .tags
        .iter()
        .filter(|t| t.first().map(String::as_str) == Some("x"))
        .filter_map(|t| t.get(1).cloned())
        .collect();
    if let Some(h) = hash
        && !x.iter().any(|l| l == h)
    {
        return Err(format!("the authorization does not list blob {h}"));
    }
    Ok(Authorized {
        pubkey: hex::encode(ev.pubkey),
        x,
    })
}
