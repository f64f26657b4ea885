//! One-shot client operations on a peer relay, beside sync: read what matches a filter up
//! to EOSE ([`query`]), publish and await the OKs ([`publish`]), hold a subscription open
//! while publishing on the same connection ([`subscribe`]).

use super::*;

/// The stored events of the relay at `peer` that match `filter` (a NIP-01 filter), up to
/// its EOSE: each checked (id, signature) and matched against the filter here too, at most
/// `max` of them; each answer awaited at most `timeout`. What `meshnode did resolve` reads
/// descriptors and revocations with.
///
/// # Errors
/// [`Error::Sync`] when the peer cannot be reached, closes the subscription, sends an
/// event that does not verify or match, more than `max`, or is silent past `timeout`.
pub async fn query(
    peer: &str,
    filter: &Value,
    ca_pem: Option<&[u8]>,
    timeout: Duration,
    max: usize,
) -> Result<Vec<Event>> {
    let parsed = parse_filter(peer, filter)?;
    let mut p = Peer::connect(peer, ca_pem, timeout).await?;
    let subid = "fleetmesh-query";
    p.send(json!(["REQ", subid, filter]).to_string()).await?;
    let mut out = Vec::new();
    loop {
        let (v, _) = p.recv().await?;
        match (v[0].as_str(), v[1].as_str()) {
            (Some("EVENT"), Some(s)) if s == subid => {
                let event = Event::from_value(&v[2])
                    .and_then(|e| e.verify().map(|()| e))
                    .map_err(|e| p.err(format!("an event that does not verify: {e}")))?;
                if !parsed.matches(&event) {
                    return Err(p.err(format!(
                        "event {} does not match the filter",
                        event.id_hex()
                    )));
                }
                if out.len() == max {
                    return Err(p.err(format!("more than {max} events")));
                }
                out.push(event);
            }
            (Some("EOSE"), Some(s)) if s == subid => break,
            (Some("CLOSED"), Some(s)) if s == subid => {
                return Err(p.err(format!("CLOSED: {}", v[2].as_str().unwrap_or(""))));
            }
            _ => {}
        }
    }
    let _ = p.send(json!(["CLOSE", subid]).to_string()).await;
    p.close().await;
    Ok(out)
}

/// Publishes `events` on `peer` and waits for each one's `OK`: the relay's verdict per
/// event, in the order the OKs came (id hex, accepted, message).
///
/// # Errors
/// [`Error::Sync`] when the peer cannot be reached, or an OK does not come within
/// `timeout`.
pub async fn publish(
    peer: &str,
    events: &[Event],
    ca_pem: Option<&[u8]>,
    timeout: Duration,
) -> Result<Vec<(String, bool, String)>> {
    let mut p = Peer::connect(peer, ca_pem, timeout).await?;
    for e in events {
        p.send(json!(["EVENT", e.to_value()]).to_string()).await?;
    }
    let mut verdicts = Vec::with_capacity(events.len());
    while verdicts.len() < events.len() {
        let (v, _) = p.recv().await?;
        if v[0] == "OK" {
            let text = |i: usize| v[i].as_str().unwrap_or_default().to_owned();
            verdicts.push((text(1), v[2].as_bool().unwrap_or(false), text(3)));
        }
    }
    Ok(verdicts)
}

/// The NIP-42 answer to `challenge` from the relay at `peer`, signed by `key` (a Nostr
/// key pair).
///
/// # Errors
/// [`Error::Sync`] when it cannot be signed (no randomness).
pub fn auth_message(key: &secp256k1::Keypair, peer: &str, challenge: &str) -> Result<String> {
    let e = fleetmesh_proto::UnsignedEvent {
        created_at: fleetmesh_proto::unix_now(),
        kind: crate::face::AUTH_KIND,
        tags: vec![
            vec!["relay".into(), peer.into()],
            vec!["challenge".into(), challenge.into()],
        ],
        content: String::new(),
    }
    .sign(key)
    .map_err(|e| Error::Sync {
        peer: peer.into(),
        reason: format!("signing the NIP-42 answer: {e}"),
    })?;
    Ok(json!(["AUTH", e.to_value()]).to_string())
}

/// Holds a subscription with `filter` open on `peer` until the connection ends or
/// `incoming`'s receiver is gone: each event that verifies and matches goes to `incoming`,
/// and each event from `outgoing` is published on the same connection (its OK is not
/// awaited). With `auth`, a NIP-42 challenge is answered as that key, and a subscription
/// closed `auth-required:` is asked again once (a relay that serves gift wraps only to
/// their recipients). The node's mailbox reads gift wraps this way; `meshnode job submit
/// --via giftwrap` waits for its answer this way.
///
/// # Errors
/// [`Error::Sync`] when the peer cannot be reached, closes the subscription or the
/// connection breaks.
pub async fn subscribe(
    peer: &str,
    filter: &Value,
    (ca_pem, auth): (Option<&[u8]>, Option<secp256k1::Keypair>),
    incoming: &tokio::sync::mpsc::Sender<Event>,
    outgoing: &mut tokio::sync::broadcast::Receiver<Event>,
) -> Result<()> {
    let parsed = parse_filter(peer, filter)?;
    let mut p = Peer::connect(peer, ca_pem, Duration::from_secs(30)).await?;
    let subid = "fleetmesh-subscribe";
    let req = json!(["REQ", subid, filter]).to_string();
    p.send(req.clone()).await?;
    let (mut authed, mut asked_again) = (false, false);
    loop {
        tokio::select! {
            msg = p.next_text() => {
                let t = msg.ok_or_else(|| p.err("the connection closed"))??;
                let Ok(v) = serde_json::from_str::<Value>(&t) else { continue };
                match (v[0].as_str(), v[1].as_str()) {
                    (Some("EVENT"), Some(s)) if s == subid => {
                        let event = Event::from_value(&v[2]).and_then(|e| e.verify().map(|()| e));
                        if let Ok(e) = event
                            && parsed.matches(&e)
                            && incoming.send(e).await.is_err()
                        {
                            return Ok(());
                        }
                    }
                    (Some("AUTH"), Some(challenge)) => {
                        if let Some(key) = &auth {
                            p.send(auth_message(key, peer, challenge)?).await?;
                            authed = true;
                        }
                    }
                    (Some("CLOSED"), Some(s)) if s == subid => {
                        let why = v[2].as_str().unwrap_or("");
                        if authed && !asked_again && why.starts_with("auth-required:") {
                            // the AUTH went first on this connection: asked again, once
                            asked_again = true;
                            p.send(req.clone()).await?;
                            continue;
                        }
                        return Err(p.err(format!("CLOSED: {why}")));
                    }
                    _ => {}
                }
            }
            out = outgoing.recv() => match out {
                Ok(e) => {
                    p.send(json!(["EVENT", e.to_value()]).to_string()).await?;
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(peer, skipped = n, "events to publish were dropped");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            },
        }
    }
}
