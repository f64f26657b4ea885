//! The relay crate's integration tests, in one binary (each test binary links a large
//! debug build): events and identity, the store's NIP-01 semantics, and the WebSocket face
//! driven by independent clients.

mod face;
mod nostr_core;
mod store;
