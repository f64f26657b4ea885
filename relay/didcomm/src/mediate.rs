//! The mediator's side of the DIDComm endpoint (`[didcomm] mediate`): what a forward must
//! be to be held (a JWE to a key agreement key of its next hop, within its sender's and the
//! node's bounds, [`held`]), where it came from ([`Source`]), and Message Pickup 3.0 for the
//! DIDs it holds messages for. [`super::DidComm`] calls it for every `forward` and pickup.

use fleetmesh_proto::didcomm::{self, Message, Unpacked};
use fleetmesh_proto::hop::Envelope;
use serde_json::{Value, json};

use super::{
    DELIVERY, DELIVERY_BYTES, DELIVERY_LIMIT, DELIVERY_REQUEST, DidComm, MAX_HELD, Outcome,
    PICKUP_STATUS, RECEIVED, count, held, not_a_mediator, signer,
};

/// Where a message came from, as far as its carrier knows: what a mediator's quotas count
/// the forwards it holds against (besides the key that signed a forward, if one did).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An HTTP client's address (behind a reverse proxy: the proxy's, shared by all).
    Addr(std::net::IpAddr),
    /// A node over a QUIC peer link, or the mediator a message was picked up from: its
    /// Nostr key (hex).
    Peer(String),
    /// Not known (a request without its client's address).
    Unknown,
}

impl Source {
    /// The quota's name for it: `ip:A.B.C.D`, `ip6:A:B:C:D::/64` (an IPv6 client's /64,
    /// which one subscriber usually holds whole), `key:HEX`, `unknown`.
    pub fn quota_key(&self) -> String {
        match self {
            Source::Addr(ip) => match ip.to_canonical() {
                std::net::IpAddr::V4(v4) => format!("ip:{v4}"),
                std::net::IpAddr::V6(v6) => {
                    let s = v6.segments();
                    format!("ip6:{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
                }
            },
            Source::Peer(key) => format!("key:{key}"),
            Source::Unknown => "unknown".to_owned(),
        }
    }
}

/// Whether `kid` is a key agreement key of `did` as this node resolves DIDs: a
/// `did:nostr` document names exactly one, `DID#x25519` ([`did::document`]); of another
/// DID the node has no document, and takes any key id under it (`DID#…`).
pub(super) fn agreement_key_of(did: &str, kid: &str) -> bool {
    if did.starts_with("did:nostr:") {
        return kid.strip_prefix(did) == Some("#x25519");
    }
    kid.strip_prefix(did)
        .is_some_and(|f| f.len() > 1 && f.starts_with('#'))
}

/// Whether `message` is a DIDComm encrypted message (a JWE) to a key agreement key of
/// `next`, from its header alone; the refusal when not.
fn sealed_for(message: &[u8], next: &str) -> Result<(), Outcome> {
    let kids = didcomm::encrypted_to(message).map_err(|e| {
        Outcome::Refused(
            400,
            "not_encrypted",
            format!(
                "a mediator holds only a DIDComm encrypted message (a JWE) for the next hop: {e}"
            ),
        )
    })?;
    if kids.iter().any(|k| agreement_key_of(next, k)) {
        return Ok(());
    }
    Err(Outcome::Refused(
        400,
        "not_for_next_hop",
        format!(
            "the message is encrypted to {}, none of them a key agreement key of {next}",
            kids.join(", ")
        ),
    ))
}

impl DidComm {
    /// Holds a forwarded message for its next hop (a mediator's work): only a DIDComm
    /// encrypted message to that hop, and only while its sender — `source`, and the key
    /// that signed it, if one did — its next hop and the node have room.
    pub(super) fn hold(&self, u: &Unpacked, source: &Source, now: u64) -> Outcome {
        let m = &u.message;
        let Some(held) = &self.held else {
            count("refused");
            return not_a_mediator();
        };
        let (next, inner) = match didcomm::forwarded(m) {
            Ok(f) => f,
            Err(e) => {
                count("refused");
                return Outcome::Refused(400, "bad_forward", e.to_string());
            }
        };
        let next = didcomm::did_of(&next).to_owned();
        let enveloped = match self.opened(&inner, now) {
            Ok(e) => e,
            Err(why) => {
                count("refused");
                return Outcome::Refused(400, "bad_path", why);
            }
        };
        if next == self.keys.did() {
            // a forward to us: open what it carries
            return match enveloped {
                Some((payload, origin)) => self.handle_from(&payload, source, Some(&origin)),
                None => self.handle(inner.to_string().as_bytes(), source),
            };
        }
        let packed = inner.to_string();
        let size = packed.len() as u64;
        let most = MAX_HELD.min(self.config.source_bytes);
        if size > most {
            count("refused");
            return Outcome::Refused(
                413,
                "too_big",
                format!("a held message is at most {most} bytes, this is {size}"),
            );
        }
        // holding needs the sender's cryptography: a JWE (in the hop envelope, if any)
        // whose recipients include the next hop, its header checked, nothing decrypted
        let message = enveloped.as_ref().map_or(packed.as_bytes(), |(p, _)| p);
        if let Err(refused) = sealed_for(message, &next) {
            count("refused");
            return refused;
        }
        let source = source.quota_key();
        let signer = match &enveloped {
            Some((_, origin)) => Some(format!("key:{origin}")),
            None => signer(u).map(|k| format!("key:{k}")),
        };
        let from = held::Sender {
            source: &source,
            signer: signer.as_deref(),
        };
        match held.hold(&next, &m.id, &packed, from, now) {
            Ok(()) => {}
            Err(held::Refused::Store(e)) => {
                tracing::warn!(error = %e, "holding a message");
                return Outcome::Refused(500, "store", e);
            }
            Err(r) => {
                count("refused");
                return self.refusal(r, &next);
            }
        }
        count("held");
        gauge(held.waiting(&next).1);
        tracing::debug!(next = %next, bytes = size, %source, "holding a forwarded message");
        Outcome::Accepted
    }

    /// A held item as handed to `did`: a hop envelope gets this node's hop to it.
    fn passed_on(&self, held: &Value, did: &str, now: u64) -> Value {
        let Ok(mut env) = serde_json::from_value::<Envelope>(held.clone()) else {
            return held.clone();
        };
        let to = did.strip_prefix("did:nostr:").unwrap_or_default();
        match env.extend(self.keys.nostr(), to, now) {
            Ok(()) => serde_json::to_value(&env).unwrap_or_else(|_| held.clone()),
            Err(e) => {
                tracing::warn!(error = %e, "a held envelope could not be extended");
                held.clone()
            }
        }
    }

    /// The answer to a forward the mediator's bounds refused ([`held::Refused`] other than
    /// a store error).
    fn refusal(&self, r: held::Refused, next: &str) -> Outcome {
        let c = &self.config;
        match r {
            held::Refused::Source {
                source,
                waiting,
                bytes,
                retry,
            } => Outcome::Later(
                429,
                "source_quota",
                format!(
                    "{source} has {waiting} messages ({bytes} bytes) waiting here; one \
                     source may have {} ({} bytes) at once",
                    c.source_messages, c.source_bytes
                ),
                retry,
            ),
            held::Refused::Queue { waiting, retry } => Outcome::Later(
                429,
                "queue_full",
                format!("{next} has {waiting} messages waiting, as many as are held for one DID"),
                retry,
            ),
            held::Refused::Full { held, retry } => {
                Outcome::Later(507, "full", format!("holding {held} bytes already"), retry)
            }
            held::Refused::Store(e) => Outcome::Refused(500, "store", e),
        }
    }

    /// Message Pickup 3.0 for the (signed) sender of `m`.
    pub(super) fn pickup(&self, held: &held::Held, m: &Message, now: u64) -> (&'static str, Value) {
        let did = m.from.clone().unwrap_or_default();
        if m.type_ == RECEIVED {
            let ids: Vec<&str> = m.body["message_id_list"]
                .as_array()
                .map(|l| l.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            held.received(&did, &ids);
        }
        if m.type_ == DELIVERY_REQUEST {
            let limit = m.body["limit"]
                .as_u64()
                .map_or(DELIVERY_LIMIT, |l| (l as usize).clamp(1, DELIVERY_LIMIT));
            // a delivery is itself one message: it stays under what a message may be
            let messages = held.deliver(&did, limit, DELIVERY_BYTES, now);
            if !messages.is_empty() {
                let attachments: Vec<Value> = messages
                    .iter()
                    .map(|(id, packed)| {
                        json!({"id": id, "data": {"json": self.passed_on(packed, &did, now)}})
                    })
                    .collect();
                count("delivered");
                return (
                    DELIVERY,
                    json!({"recipient_did": did, "attachments": attachments}),
                );
            }
        }
        let (waiting, all) = held.waiting(&did);
        gauge(all);
        (
            PICKUP_STATUS,
            json!({"recipient_did": did, "message_count": waiting}),
        )
    }
}

fn gauge(held: usize) {
    metrics::gauge!("fleetmesh_didcomm_held_messages").set(held as f64);
}
