//! # fleetmesh-proto
//!
//! The protocol's nouns, below every crate that speaks it (the relay, and the transports,
//! ledger and market that come after it). No I/O beyond the node's own key files and the
//! append-only line logs crates above keep ([`linelog`]), no async, no storage:
//!
//! - [`event`]: NIP-01 events — canonical serialization, ids, BIP-340 signatures
//!   (libsecp256k1 through the `secp256k1` crate), parsing that says what it checks;
//! - [`filter`]: NIP-01 filters, parsed with bounds and matched against events;
//! - [`nip44`]: NIP-44 v2 payload encryption between two keys; [`nip59`]: gift wrap on it
//!   (rumor, seal, wrap); [`hkdf`]: RFC 5869 and the pair-blinded tags receipts use;
//! - [`identity`]: the node's three key pairs, their 0600 files, `did:nostr`, and the
//!   self-signed multi-key node descriptor (kind 11801); [`did`]: its DID document;
//!   [`didcomm`]: DIDComm Messaging v2 (signed, anoncrypt, authcrypt, forward) by it;
//!   [`hop`]: signed hop envelopes, the path a payload took across nodes;
//! - a typed noun for every fleetmesh kind: [`ask::Ask`] (30810), [`receipt::Receipt`]
//!   (30811) and [`provider::Terms`] (30812) of the market; [`ledger::Grant`] (30801), [`ledger::BudgetReceipt`] (budget/1.0) and [`ledger::Report`] (30802);
//!   [`nodes::Revocation`] (11802), [`nodes::Heartbeat`] (21801) and [`nodes::Shard`]
//!   (30803); the projections [`projection::Assertion`] (NIP-85, 30385) and
//!   [`projection::RelayMonitor`] (NIP-66, 30166); the descriptor (11801) is [`identity`]'s.
//!   Each parses from an event (`TryFrom<&Event>`: signature, the kind's JSON Schema, tags
//!   agreeing with the content) into typed fields, with an [`Error`] that names what failed,
//!   and builds its signed event ([`noun::Noun`] for the kinds whose content is an object);
//! - [`linelog`]: append-only line logs — one write per record, and a torn last line moved
//!   aside (never appended onto, never deleted) when the log is opened;
//! - [`words`]: the closed vocabularies ([`Mode`], [`Engine`], [`Rung`], [`Unit`], …).
//!
//! Kind numbers live in `fleetmesh_schemas::constants::kind`, nowhere else.

pub mod ask;
pub mod did;
pub mod didcomm;
pub mod error;
pub mod event;
pub mod filter;
pub mod hkdf;
pub mod hop;
pub mod identity;
pub mod ledger;
pub mod linelog;
pub mod nip19;
pub mod nip44;
pub mod nip59;
pub mod nip98;
pub mod nodes;
pub mod noun;
pub mod projection;
pub mod provider;
pub mod receipt;
pub mod words;

pub use error::{Error, Result};
pub use event::{Event, UnsignedEvent};
pub use identity::{DescriptorInfo, Endpoint, NodeClass, NodeKeys};
pub use words::{Engine, KeyType, Mode, Remedy, RevocationReason, Rung, Unit};

/// Unix seconds by the system clock (0 before 1970): the one clock helper of the
/// workspace; every crate that reads the time for protocol purposes reads it here.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
