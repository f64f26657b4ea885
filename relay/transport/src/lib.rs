//! The federation's transports: how fleetmesh nodes find each other and keep their stores
//! in sync without an operator running `meshnode sync`.
//!
//! - [`link`]: iroh QUIC peer links (ALPN `fleetmesh/1`, the node's Ed25519 key as its
//!   endpoint identity, both ends checked against each other's descriptor), carrying NIP-77
//!   sync sessions with the peer's relay face and DIDComm messages for its handler.
//! - [`gossip`]: libp2p gossipsub discovery on `/fleetmesh/announce/1` — signed descriptors
//!   (kind 11801) and heartbeats (kind 21801), validated before they are passed on, and the
//!   protocol digest gate.
//! - [`frame`]: the relay's messages framed over a QUIC stream.
//! - [`relays`]: iroh relay servers of the federation's own, which endpoints home on and
//!   punch holes from (only those the operator names), and the server a backbone runs.
//!
//! The appliance's peer manager (`meshnode up`) puts them together; this crate holds no
//! policy about whom to peer with.

pub mod frame;
pub mod gossip;
pub mod link;
pub mod relays;

pub use libp2p::{Multiaddr, PeerId, multiaddr};

/// Everything that can go wrong in the transports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An endpoint could not be bound.
    #[error("binding {addr}: {reason}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// A peer could not be reached, or its connection broke.
    #[error("peer {peer}: {reason}")]
    Connect {
        /// The peer's key (hex).
        peer: String,
        /// Why.
        reason: String,
    },
    /// The hello failed: one side refused the other's descriptor.
    #[error("peer {peer}: hello refused: {reason}")]
    Hello {
        /// The peer's key (hex).
        peer: String,
        /// Why.
        reason: String,
    },
    /// The gossip layer failed to start.
    #[error("gossip: {0}")]
    Gossip(String),
}

/// The crate's result.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests;
