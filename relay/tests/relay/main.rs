//! The relay crate's integration tests, in one binary (each test binary links a large
//! debug build): events and identity, the protocol's typed nouns, the store's NIP-01 semantics, and the WebSocket face
//! driven by independent clients.

mod bridge;
mod crypto;
mod face;
mod giftwrap;
mod hostile;
mod nostr_core;
mod nouns;
mod port;
mod private;
mod revocation;
mod shedding;
mod store;
mod sync;

use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent};

/// An event signed by `keys`.
fn signed(keys: &NodeKeys, kind: u16, created_at: u64, tags: &[&[&str]], content: &str) -> Event {
    keys.sign(UnsignedEvent {
        created_at,
        kind,
        tags: tags
            .iter()
            .map(|t| t.iter().map(|s| s.to_string()).collect())
            .collect(),
        content: content.into(),
    })
    .unwrap()
}
