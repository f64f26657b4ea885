//! # fleetmesh-relay
//!
//! The relay of a fleetmesh node, over the protocol's nouns in `fleetmesh_proto` (events,
//! filters, keys):
//!
//! - [`store`]: the SQLite (WAL) store in the node directory, its one [`store::writer`]
//!   thread (group commits, with a checkpointer beside it) and its [`store::readers`];
//! - [`face`]: the NIP-01 WebSocket face ([`Relay`]) with NIP-77 negentropy, [`limits`] and
//!   [`metrics`]; [`message`]: the relay-to-client messages it writes;
//! - [`sync`]: NIP-77 sync with a peer relay (`meshnode sync`).
//!
//! Gift wraps, the ledger and the transports are crates of their own beside this one (see
//! `docs/architecture.md`).

pub mod bridge;
pub mod error;
pub mod face;
pub mod limits;
pub mod message;
pub mod metrics;
mod port;
pub use port::Client;
pub mod revoked;
pub mod store;
pub mod sync;

pub use error::{Error, Result};
pub use face::{Relay, RelayConfig};
pub use store::Store;
#[cfg(feature = "test-utils")]
pub mod testing;
