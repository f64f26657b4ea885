//! The node's DIDComm v2 endpoint (`POST /didcomm`): compute/1.0 jobs from buyers who know
//! the node only by its DID, and — with `[didcomm] mediate` — a mediator that holds
//! messages for DIDs that cannot be reached and hands them over when their owner asks.
//!
//! What it takes ([`fleetmesh_proto::didcomm::unpack`] checks every layer first):
//! - [`SUBMIT`] (body: what `POST /v1/jobs` takes, `{"ask", "payload"}`) and [`STATUS`]
//!   (body `{"job": ID}`): signed by the buyer's key (a did:nostr key verifies from the DID
//!   alone), the ask's buyer the signer; answered with [`ANSWER`] (`{"job", "result",
//!   "receipt"}` as the gift-wrap mailbox answers) or a problem report, authcrypted to
//!   the buyer's document, which the message carries as its signed descriptor (an
//!   attachment with id [`DESCRIPTOR`]);
//! - `forward` (routing 2.0), for a mediator: the message inside — which must be a
//!   DIDComm encrypted message (a JWE) to a key agreement key of its next hop, else 400
//!   `not_encrypted` or `not_for_next_hop` — is held for that hop, at most
//!   `source_messages` and `source_bytes` waiting from one [`Source`] (and from the key
//!   that signed the forward) at once, `hold_per_did` per DID, `hold_bytes` in all, for
//!   `hold_secs`, in `DIR/mediator.sqlite` ([`held`]); past a bound the newcomer is
//!   refused (429 `source_quota` or `queue_full`, 507 `full`, with `Retry-After`) and
//!   nothing held is dropped for it;
//! - Message Pickup 3.0 `delivery-request` and `messages-received`, signed by the DID
//!   whose messages they ask for.
//!
//! A reply travels back as the HTTP response (`return_route: all`), or — for a message
//! the node picked up from its own mediator (`[didcomm] mediator`, see [`DidComm::spawn_pickup`]) —
//! forwarded to that mediator for the sender to pick up. Every outcome is counted in
//! `fleetmesh_didcomm_total{outcome}`; what does not open, is unsigned or is not the
//! sender's, or whose sender's key is revoked (kind 11802, as the node's relay knows),
//! runs nothing.
//!
//! The daemon builds one [`DidComm`] and hands it every message: the HTTP face's
//! `POST /didcomm`, the federation's peer links, and the pickup loop. Ledger messages
//! (budget/1.0, complaint/1.0) go to the ledger's inbox ([`DidComm::set_ledger`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use fleetmesh_market::service::JobService;
use fleetmesh_port::RelayPort;
use fleetmesh_proto::didcomm::{self, Message, Pack, PeerDoc, SignWith, Unpacked};
use fleetmesh_proto::hop::{self, Envelope};
use fleetmesh_proto::{Event, NodeKeys, did, identity};
use serde_json::{Value, json};

mod carrier;
mod config;
mod error;
pub mod held;
mod inbox;
mod mediate;

pub use carrier::{Carrier, exchange};
#[cfg(feature = "links")]
pub use carrier::{Links, exchange_over};
pub use config::Config;
pub use error::{DidcommError, Result};
pub use inbox::{Knows, LEDGER_TYPES};
pub use mediate::Source;

/// Submit a job: the body is what `POST /v1/jobs` takes.
pub const SUBMIT: &str = "https://fleetmesh.org/compute/1.0/submit";
/// Ask about a job: `{"job": ID}`.
pub const STATUS: &str = "https://fleetmesh.org/compute/1.0/status";
/// The node's answer about a job.
pub const ANSWER: &str = "https://fleetmesh.org/compute/1.0/answer";
/// A refusal (report-problem 2.0): `{"code", "comment"}`.
pub const PROBLEM: &str = "https://didcomm.org/report-problem/2.0/problem-report";
/// Message Pickup 3.0.
pub const DELIVERY_REQUEST: &str = "https://didcomm.org/messagepickup/3.0/delivery-request";
/// Message Pickup 3.0: the held messages, as attachments.
pub const DELIVERY: &str = "https://didcomm.org/messagepickup/3.0/delivery";
/// Message Pickup 3.0: what is held (`message_count`).
pub const PICKUP_STATUS: &str = "https://didcomm.org/messagepickup/3.0/status";
/// Message Pickup 3.0: these are taken, drop them.
pub const RECEIVED: &str = "https://didcomm.org/messagepickup/3.0/messages-received";
/// The id of the attachment carrying the sender's signed node descriptor (kind 11801).
pub const DESCRIPTOR: &str = "descriptor";
/// Most messages one delivery carries.
const DELIVERY_LIMIT: usize = 32;
/// The largest message a mediator holds: a delivery carrying it (encrypted, so a third
/// larger) still fits in one message ([`didcomm::MAX_MESSAGE_BYTES`]).
const MAX_HELD: u64 = 2 << 20;
/// Bytes of held messages one delivery carries (at least one message).
const DELIVERY_BYTES: u64 = 5 << 19;
/// Hop envelope ids remembered to refuse replays.
const SEEN: usize = 4096;

fn count(outcome: &'static str) {
    metrics::counter!("fleetmesh_didcomm_total", "outcome" => outcome).increment(1);
}

/// What `POST /didcomm` answers.
#[derive(Debug)]
pub enum Outcome {
    /// A packed reply for the sender (its DID).
    Reply(String, Value),
    /// Taken, no reply (held for another DID, or no route back).
    Accepted,
    /// Refused before anything ran: HTTP status, code, why.
    Refused(u16, &'static str, String),
    /// Refused for now, nothing run: HTTP status, code, why, and the seconds after which
    /// there will be room (`Retry-After`; room may come sooner).
    Later(u16, &'static str, String, u64),
}

/// The node's DIDComm side.
pub struct DidComm {
    keys: NodeKeys,
    descriptor: Event,
    jobs: Arc<JobService>,
    config: Config,
    /// The mediator's held messages, with `[didcomm] mediate`.
    held: Option<held::Held>,
    seen: Mutex<VecDeque<String>>,
    relay: Arc<dyn RelayPort>,
    /// `[api] jobs_by_key`.
    by_key: bool,
    /// Where ledger messages (budget/1.0, complaint/1.0) go, once the ledger runs.
    ledger: Mutex<Option<inbox::LedgerInbox>>,
}

/// A message of `type_` from `keys` to `to`, in the thread of `thid`.
fn message(
    keys: &NodeKeys,
    type_: &str,
    to: &str,
    body: Value,
) -> fleetmesh_proto::Result<Message> {
    let mut m = Message::new(type_, body)?;
    m.from = Some(keys.did());
    m.to = vec![to.to_owned()];
    Ok(m)
}

/// A request from `keys` (buyer or node) to `to`: signed with the Nostr key, anoncrypted
/// to `to`'s document, carrying `descriptor` so the answer can be encrypted back, asking
/// for the answer on the same connection. `meshnode job submit --via didcomm` and the
/// pickup loop use it.
///
/// # Errors
/// As [`didcomm::pack_encrypted`].
pub fn request(
    keys: &NodeKeys,
    descriptor: &Event,
    to: &PeerDoc,
    type_: &str,
    body: Value,
) -> fleetmesh_proto::Result<Value> {
    let mut m = message(keys, type_, &to.did, body)?;
    m.extra.insert("return_route".into(), json!("all"));
    m.attachments = vec![json!({
        "id": DESCRIPTOR,
        "media_type": "application/nostr+json",
        "data": {"json": descriptor.to_value()},
    })];
    let how = Pack {
        auth: false,
        sign: Some(SignWith::Secp256k1),
        ..Pack::default()
    };
    didcomm::pack_encrypted(&m, keys, to, how)
}

/// The document of a message's sender, from the signed descriptor it carries (not
/// expired at `now`).
fn sender_doc(m: &Message, now: u64) -> Option<PeerDoc> {
    let event = m
        .attachments
        .iter()
        .find(|a| a["id"] == DESCRIPTOR)
        .and_then(|a| Event::from_value(&a["data"]["json"]).ok())?;
    if event.expiration().is_some_and(|x| x <= now) {
        return None;
    }
    let content = identity::verify_descriptor(&event).ok()?;
    if Some(content.did.as_str()) != m.from.as_deref() {
        return None;
    }
    PeerDoc::parse(&did::document(&content)).ok()
}

/// The did:nostr key (hex) of a message signed by its sender.
fn signer(u: &Unpacked) -> Option<String> {
    let from = u.message.from.as_deref()?;
    let signed_by = u.meta.sign_from.as_deref().map(didcomm::did_of);
    (u.meta.non_repudiation && signed_by == Some(from))
        .then(|| from.strip_prefix("did:nostr:").map(str::to_owned))
        .flatten()
}

impl DidComm {
    /// The endpoint of the node with `keys` and its current `descriptor`; `held`, the
    /// mediator's store ([`held::Held::open`]), when it mediates; `relay`, the node's
    /// relay, which knows the revoked keys.
    pub fn new(
        keys: NodeKeys,
        descriptor: Event,
        jobs: Arc<JobService>,
        config: Config,
        held: Option<held::Held>,
        relay: Arc<dyn RelayPort>,
        by_key: bool,
    ) -> DidComm {
        DidComm {
            keys,
            descriptor,
            jobs,
            config,
            held,
            seen: Mutex::default(),
            relay,
            by_key,
            ledger: Mutex::default(),
        }
    }

    /// Handles one packed message from `source`.
    pub fn handle(&self, packed: &[u8], source: &Source) -> Outcome {
        self.handle_from(packed, source, None)
    }

    /// Handles one packed message from `source` that arrived along a checked hop path
    /// beginning at `origin` (x-only, hex), when it did: its signer must be that origin.
    fn handle_from(&self, packed: &[u8], source: &Source, origin: Option<&str>) -> Outcome {
        let now = fleetmesh_proto::unix_now();
        // a plaintext is told apart by its head, its body never read: nothing here takes
        // one (compute, pickup and ledger messages are signed, a forward is encrypted)
        match didcomm::outer(packed) {
            Err(e) => {
                count("unopened");
                return Outcome::Refused(400, "unopened", e.to_string());
            }
            Ok(didcomm::Outer::Plain(type_)) => {
                count("refused");
                return match type_.as_str() {
                    didcomm::FORWARD if self.held.is_none() => not_a_mediator(),
                    didcomm::FORWARD => Outcome::Refused(
                        400,
                        "not_encrypted",
                        "a forward must be encrypted to the mediator (a JWE), and what it \
                         carries encrypted to its next hop: this one is plaintext"
                            .into(),
                    ),
                    _ => unsigned(),
                };
            }
            Ok(_) => {}
        }
        let u = match didcomm::unpack(packed, &self.keys, &Vec::new(), now) {
            Ok(u) => u,
            Err(e) => {
                count("unopened");
                return Outcome::Refused(400, "unopened", e.to_string());
            }
        };
        if u.message.type_ == didcomm::FORWARD {
            return self.hold(&u, source, now);
        }
        let Some(sender) = signer(&u) else {
            count("refused");
            return unsigned();
        };
        let revoked_at = <[u8; 32]>::try_from(hex::decode(&sender).unwrap_or_default().as_slice())
            .ok()
            .and_then(|k| self.relay.revoked_at(&k, now));
        if let Some(at) = revoked_at {
            count("refused");
            return Outcome::Refused(
                403,
                "revoked",
                format!("the key of {sender} was revoked at {at}"),
            );
        }
        if let Some(origin) = origin
            && origin != sender
        {
            count("refused");
            return Outcome::Refused(
                403,
                "bad_path",
                format!("the hop path begins at {origin} but the message is from {sender}"),
            );
        }
        if LEDGER_TYPES.contains(&u.message.type_.as_str()) {
            return self.to_ledger(sender, &u.message);
        }
        let Some(doc) = sender_doc(&u.message, now) else {
            count("refused");
            return Outcome::Refused(
                400,
                "no_descriptor",
                format!(
                    "the message carries no valid, unexpired descriptor of {} to answer to",
                    sender
                ),
            );
        };
        let m = &u.message;
        let (type_, mut body) = match m.type_.as_str() {
            SUBMIT => match fleetmesh_market::mailbox::submit_from(
                &self.jobs,
                self.by_key,
                &sender,
                m.body.to_string().as_bytes(),
            ) {
                Ok((rec, _)) => {
                    count("accepted");
                    tracing::info!(job = %rec.id, buyer = %sender, "job by DIDComm");
                    (ANSWER, fleetmesh_market::mailbox::answer(&rec))
                }
                Err(r) => {
                    count("refused");
                    (PROBLEM, json!({"code": r.code, "comment": r.message}))
                }
            },
            STATUS => {
                let id = m.body["job"].as_str().unwrap_or_default();
                match self.jobs.job(id) {
                    Ok(Some(rec)) if rec.buyer == sender => {
                        count("answered");
                        (ANSWER, fleetmesh_market::mailbox::answer(&rec))
                    }
                    _ => {
                        count("refused");
                        (
                            PROBLEM,
                            json!({"code": "not_found", "comment": format!("no job {id} of yours")}),
                        )
                    }
                }
            }
            DELIVERY_REQUEST | RECEIVED if self.held.is_some() => {
                let held = self.held.as_ref().expect("checked");
                self.pickup(held, m, now)
            }
            other => {
                count("other");
                return Outcome::Refused(400, "unknown_type", format!("{other} is not taken here"));
            }
        };
        let mut reply = match message(&self.keys, type_, &doc.did, body.clone()) {
            Ok(r) => r,
            Err(e) => return Outcome::Refused(500, "internal", e.to_string()),
        };
        reply.thid = Some(m.thid.clone().unwrap_or_else(|| m.id.clone()));
        if let Some(Value::Array(attached)) =
            body.as_object_mut().and_then(|b| b.remove("attachments"))
        {
            reply.body = body;
            reply.attachments = attached;
        }
        match didcomm::pack_encrypted(&reply, &self.keys, &doc, Pack::default()) {
            Ok(packed) => Outcome::Reply(doc.did, packed),
            Err(e) => Outcome::Refused(400, "no_route_back", e.to_string()),
        }
    }

    /// A forwarded item that is a hop envelope, checked (its path ending here, its id not
    /// seen before): its payload and the path's origin; `None` for a bare DIDComm message.
    ///
    /// # Errors
    /// Why the path does not hold, or that the envelope is a replay.
    fn opened(
        &self,
        item: &Value,
        now: u64,
    ) -> std::result::Result<Option<(Vec<u8>, String)>, String> {
        let me = self.keys.nostr_pubkey_hex();
        let opened = open_item(item, &me, now, self.config.hold_secs)?;
        if let Some(id) = item["id"].as_str().filter(|_| opened.is_some()) {
            let mut seen = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if seen.contains(&id.to_owned()) {
                return Err(format!("hop envelope {id} was seen before (replayed)"));
            }
            seen.push_back(id.to_owned());
            if seen.len() > SEEN {
                seen.pop_front();
            }
        }
        Ok(opened)
    }
}

fn not_a_mediator() -> Outcome {
    Outcome::Refused(
        403,
        "not_a_mediator",
        "this node does not mediate ([didcomm] mediate)".into(),
    )
}

fn unsigned() -> Outcome {
    Outcome::Refused(
        403,
        "unsigned",
        "compute and pickup messages must be signed by their sender's key".into(),
    )
}

/// A forwarded item, checked as received by `me` (x-only, hex) at `now`: a hop envelope's
/// payload and the path's origin, or `None` for a bare DIDComm message (from agents that
/// do not sign hops).
///
/// # Errors
/// Why an envelope's path does not hold.
pub fn open_item(
    item: &Value,
    me: &str,
    now: u64,
    max_age: u64,
) -> std::result::Result<Option<(Vec<u8>, String)>, String> {
    if item["protocol"] != hop::PROTOCOL {
        return Ok(None);
    }
    fleetmesh_schemas::SchemaSet::embedded()
        .validate(
            &fleetmesh_schemas::SchemaKey::Payload(hop::PROTOCOL.into()),
            item,
        )
        .map_err(|e| format!("a hop envelope outside its schema: {e}"))?;
    let env: Envelope = serde_json::from_value(item.clone())
        .map_err(|e| format!("a malformed hop envelope: {e}"))?;
    env.check(me, now, max_age)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// `packed` (for `to`) in a hop envelope from `keys` to `mediator`, in a forward to it:
/// how a message goes through a mediator with its path signed.
///
/// # Errors
/// As [`Envelope::new`] and [`didcomm::forward`].
pub fn enveloped_forward(
    keys: &NodeKeys,
    packed: &Value,
    to: &str,
    mediator: &PeerDoc,
    routing_key: &str,
) -> fleetmesh_proto::Result<Value> {
    let mediator_key = mediator.did.strip_prefix("did:nostr:").unwrap_or_default();
    let env = Envelope::new(
        keys.nostr(),
        mediator_key,
        packed.to_string().as_bytes(),
        fleetmesh_proto::unix_now(),
    )?;
    let env = serde_json::to_value(&env).expect("an envelope serializes");
    didcomm::forward(&env, to, mediator, routing_key)
}

/// Content type of an encrypted DIDComm message.
pub const ENCRYPTED: &str = "application/didcomm-encrypted+json";
/// Content type of a signed DIDComm message.
pub const SIGNED: &str = "application/didcomm-signed+json";
#[cfg(test)]
mod tests {
    use super::mediate::agreement_key_of;
    use super::*;

    #[test]
    fn a_source_is_its_address_an_ipv6_clients_64_or_a_peers_key() {
        let addr = |a: &str| Source::Addr(a.parse().unwrap()).quota_key();
        assert_eq!(addr("192.0.2.7"), "ip:192.0.2.7");
        assert_eq!(addr("::ffff:192.0.2.7"), "ip:192.0.2.7");
        assert_eq!(addr("2001:db8:1:2:3:4:5:6"), "ip6:2001:db8:1:2::/64");
        assert_eq!(addr("2001:db8:1:2:ffff::1"), addr("2001:db8:1:2::9"));
        assert_ne!(addr("2001:db8:1:3::1"), addr("2001:db8:1:2::1"));
        assert_eq!(Source::Peer("ab".into()).quota_key(), "key:ab");
        // the next hop's key agreement keys, as the node resolves them
        let did = format!("did:nostr:{}", "a".repeat(64));
        assert!(agreement_key_of(&did, &format!("{did}#x25519")));
        assert!(!agreement_key_of(&did, &format!("{did}#key-0")));
        assert!(!agreement_key_of(&did, &format!("{did}x#x25519")));
        assert!(agreement_key_of(
            "did:example:bob",
            "did:example:bob#key-x25519-1"
        ));
        assert!(!agreement_key_of("did:example:bob", "did:example:bob"));
        assert!(!agreement_key_of("did:example:bob", "did:example:bobby#k"));
    }

    #[test]
    fn a_sender_is_answered_only_by_its_own_unexpired_descriptor() {
        let keys = NodeKeys::generate().unwrap();
        let info = fleetmesh_proto::DescriptorInfo {
            software: fleetmesh_proto::identity::Software {
                name: "fleetmesh".into(),
                version: "test".into(),
            },
            class: fleetmesh_proto::NodeClass::Leaf,
            operator: None,
            relays: Vec::new(),
            endpoints: Vec::new(),
            protocol_digest: fleetmesh_schemas::SchemaSet::embedded().digest().to_hex(),
            predecessor: None,
        };
        let descriptor = keys.descriptor(&info, 1_000).unwrap();
        let with = |event: &Event, from: &str| {
            let mut m = Message::new("t", json!({})).unwrap();
            m.from = Some(from.to_owned());
            m.attachments = vec![json!({"id": DESCRIPTOR, "data": {"json": event.to_value()}})];
            m
        };
        assert!(sender_doc(&with(&descriptor, &keys.did()), 2_000).is_some());
        // another's DID
        let other = NodeKeys::generate().unwrap().did();
        assert!(sender_doc(&with(&descriptor, &other), 2_000).is_none());
        // the same descriptor with an expiration (NIP-40), re-signed: past it, refused
        let mut tags = descriptor.tags.clone();
        tags.push(vec!["expiration".into(), "1500".into()]);
        let expiring = keys
            .sign(fleetmesh_proto::UnsignedEvent {
                created_at: 1_000,
                kind: descriptor.kind,
                tags,
                content: descriptor.content.clone(),
            })
            .unwrap();
        assert!(sender_doc(&with(&expiring, &keys.did()), 1_400).is_some());
        assert!(sender_doc(&with(&expiring, &keys.did()), 1_500).is_none());
    }
}
