//! NIP-42 on the relay face, and what the shedding rung refuses a connection.
//!
//! The relay sends `["AUTH", challenge]` when it first refuses an unauthenticated
//! connection for shedding (NIP-42 lets a relay send it at any time); the client answers
//! with a signed kind 22242 event naming the challenge and this relay, and is then known
//! by its key. A federation link's session is known by its link key without AUTH.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use fleetmesh_proto::event::Event;
use serde_json::Value;
use tokio::time::Instant;
use tracing::debug;

use super::connection::Connection;
use super::peer::PeerRefusal;
use super::shed::Allowance;
use crate::message;

/// The kind of a NIP-42 authentication event.
pub const AUTH_KIND: u16 = 22242;
/// How long a connection keeps the answer to "is this key granted?".
const GRANT_CACHE: Duration = Duration::from_secs(1);
/// How far an AUTH event's `created_at` may be from now, seconds.
const AUTH_WINDOW: u64 = 600;

/// What a connection asks for that the shedding rung may refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    /// A write.
    Event,
    /// A new subscription (REQ or NEG-OPEN).
    Subscribe,
}

/// The `host[:port]` of a relay URL, lower-cased.
fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split(['/', '?', '#'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase()
}

impl Connection {
    /// The key this connection speaks for: its NIP-42 key, or its link's.
    pub(super) fn key(&self) -> Option<&str> {
        self.authed
            .as_deref()
            .or(self.session.as_ref().map(|s| s.name.as_str()))
    }

    /// This connection's key's allowance, when it is a granted peer's: asked of the node
    /// at most once a second (the answer takes the ledger's lock), and again at once after
    /// an AUTH.
    pub(super) fn allowance(&mut self) -> Option<Allowance> {
        if let Some((at, a)) = &self.granted
            && at.elapsed() < GRANT_CACHE
        {
            return a.clone();
        }
        let a = self.key().and_then(|k| self.relay.shed.allowance(k));
        self.granted = Some((Instant::now(), a.clone()));
        a
    }

    /// At rung 2, why `event` of a granted key lies outside its grant's shards (`None`:
    /// within them, or not shedding that far). Counted as the key's inbound strain.
    pub(super) fn outside_grant(&mut self, event: &Event) -> Option<&'static str> {
        if self.relay.shed.rung() < 2 {
            return None;
        }
        let a = self.allowance()?;
        if a.shards.is_empty() || a.shards.iter().any(|f| f.matches(event)) {
            return None;
        }
        let key = self.key().unwrap_or_default().to_owned();
        self.relay.shed.strained_inbound(&key);
        self.count(PeerRefusal::OutOfFilter);
        Some(
            "blocked: the relay is shedding load and takes this peer's events within its grant's shards only",
        )
    }

    /// Sends this connection's NIP-42 challenge, once.
    pub(super) fn challenge(&mut self) -> bool {
        if self.challenge.is_some() {
            return true;
        }
        let mut c = [0u8; 16];
        if getrandom::fill(&mut c).is_err() {
            return true;
        }
        let c = hex::encode(c);
        self.challenge = Some(c.clone());
        self.send(serde_json::json!(["AUTH", c]).to_string())
    }

    /// Why the shedding rung refuses `ask` from this connection, or `None` (served); an
    /// empty reason when the connection could not even be sent its challenge (too slow: it
    /// closes). Counts the refusal as the key's inbound strain; an unauthenticated
    /// connection is sent a challenge first.
    pub(super) fn shed(&mut self, ask: Ask) -> Option<String> {
        let relay = self.relay.clone();
        let rung = relay.shed.rung();
        if rung == 0 {
            return None;
        }
        let allowance = self.allowance();
        let why = match allowance {
            Some(a) if rung >= 2 && ask == Ask::Event => {
                let key = self.key().unwrap_or_default().to_owned();
                if relay.shed.take(&key, &a) {
                    return None;
                }
                format!(
                    "rate-limited: the relay is shedding load and this peer's grant of {} events per {} s is spent",
                    a.events, a.window_secs
                )
            }
            Some(_) => return None,
            None if self.key().is_none() => {
                if !self.challenge() {
                    return Some(String::new());
                }
                format!(
                    "auth-required: the relay is shedding load (rung {rung}); it serves granted peers only, who authenticate (NIP-42)"
                )
            }
            None => format!(
                "rate-limited: the relay is shedding load (rung {rung}); it serves granted peers only"
            ),
        };
        let key = self
            .key()
            .map_or_else(|| format!("ip:{}", self.peer.ip()), str::to_owned);
        relay.shed.strained_inbound(&key);
        self.count(PeerRefusal::RateLimited);
        relay.metrics.shed.fetch_add(1, Relaxed);
        Some(why)
    }

    /// Whether this connection's subscriptions are still served at the current rung
    /// (rung 2 serves granted peers only).
    pub(super) fn served_live(&mut self) -> bool {
        self.relay.shed.rung() < 2 || self.allowance().is_some()
    }

    /// `["AUTH", event]`: checks the event (signature, kind 22242, this connection's
    /// challenge, this relay, a recent `created_at`) and answers `OK`.
    pub(super) fn on_auth(&mut self, arr: &[Value]) -> bool {
        let [_, raw] = arr else {
            return self.malformed("invalid: AUTH takes exactly one event");
        };
        let claimed = raw
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let event = match Event::from_value(raw).and_then(|e| e.verify().map(|()| e)) {
            Ok(e) => e,
            Err(e) => return self.send(message::ok(&claimed, false, &format!("invalid: {e}"))),
        };
        let id = event.id_hex();
        let why = if event.kind != AUTH_KIND {
            Some(format!("invalid: AUTH takes a kind {AUTH_KIND} event"))
        } else if self.challenge.is_none() {
            Some("invalid: no challenge was sent on this connection".into())
        } else if event.tag_value("challenge") != self.challenge.as_deref() {
            Some("invalid: the challenge is not this connection's".into())
        } else if fleetmesh_proto::unix_now().abs_diff(event.created_at) > AUTH_WINDOW {
            Some(format!(
                "invalid: created_at is more than {AUTH_WINDOW} s from now"
            ))
        } else if let (Some(host), relay) = (&self.host, event.tag_value("relay").unwrap_or(""))
            && host_of(relay) != host.to_ascii_lowercase()
        {
            Some(format!(
                "invalid: the relay tag {relay:?} names another relay than {host}"
            ))
        } else if event.tag_value("relay").is_none_or(str::is_empty) {
            Some("invalid: the relay tag is missing".into())
        } else {
            None
        };
        if let Some(why) = why {
            return self.send(message::ok(&id, false, &why));
        }
        let key = hex::encode(event.pubkey);
        debug!(peer = %self.peer, %key, "authenticated (NIP-42)");
        self.authed = Some(key);
        self.granted = None;
        self.send(message::ok(&id, true, ""))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn hosts_of_relay_urls() {
        for (url, host) in [
            ("wss://Relay.Example.com/", "relay.example.com"),
            ("ws://127.0.0.1:7777", "127.0.0.1:7777"),
            ("ws://[::1]:80/path?q", "[::1]:80"),
            ("relay.example.com", "relay.example.com"),
        ] {
            assert_eq!(super::host_of(url), host);
        }
    }
}
