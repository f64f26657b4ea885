//! # fleetmesh-relay
//!
//! The Nostr side of a fleetmesh node:
//!
//! - [`event`]: NIP-01 events — canonical serialization, ids, BIP-340 signatures
//!   (libsecp256k1 through the `secp256k1` crate), parsing that says what it checks;
//! - [`identity`]: the node's three key pairs, their 0600 files, `did:nostr`, and the
//!   self-signed multi-key node descriptor (kind 11801);
//! - [`store`]: the SQLite (WAL) store in the node directory, its one [`store::writer`]
//!   thread (group commits) and its [`store::readers`];
//! - [`nip44`]: NIP-44 v2 payload encryption between two keys; [`hkdf`]: RFC 5869 and the
//!   pair-blinded tags receipts use;
//! - [`filter`]: NIP-01 filters; [`face`]: the NIP-01 WebSocket face ([`Relay`]) with
//!   [`limits`] and [`metrics`].
//!
//! NIP-77 sync, gift wraps, the ledger and the transports land here in later issues (see
//! `docs/architecture.md`).

pub mod error;
pub mod event;
pub mod face;
pub mod filter;
pub mod hkdf;
pub mod identity;
pub mod limits;
pub mod message;
pub mod metrics;
pub mod nip44;
pub mod store;
pub mod sync;

pub use error::{Error, Result};
pub use event::{Event, UnsignedEvent};
pub use face::{Relay, RelayConfig};
pub use identity::{DescriptorInfo, Endpoint, NodeClass, NodeKeys};
pub use store::Store;
