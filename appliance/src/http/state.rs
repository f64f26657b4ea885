//! What the relay face, the status page and `/metrics` share: the node's identity and the
//! relay ([`RelayState`]), and what the status page shows of the services
//! ([`Status`]), gathered when the router is built.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use fleetmesh_relay::face::Relay;

/// What the relay face's handlers share.
pub struct RelayState {
    /// The NIP-11 document, serialized; replaced when `[jobs]` changes live.
    pub nip11: Arc<std::sync::RwLock<String>>,
    /// The node's Nostr key, hex.
    pub pubkey: String,
    /// When the node started.
    pub started: Instant,
    /// The relay.
    pub relay: Arc<Relay>,
    /// `[face] websocket_origins`.
    pub websocket_origins: Vec<String>,
    /// What the status page shows.
    pub status: Status,
    /// The node's DID document, serialized at start-up from its descriptor.
    pub did_document: String,
}

/// What the page shows besides the relay's state, gathered at start-up.
pub struct Status {
    /// `[node] name`, or the default name NIP-11 gives.
    pub name: String,
    /// `did:key:…`.
    pub did: String,
    /// `[node] class`.
    pub class: String,
    /// The embedded schemas' digest.
    pub protocol_digest: String,
    /// The descriptor event's id.
    pub descriptor: String,
    /// The prover backend and why it was chosen.
    pub backend: String,
    /// The devices the hardware probe saw.
    pub devices: String,
    /// Where circuits are installed.
    pub circuits: PathBuf,
    /// The models served.
    pub inference: Arc<crate::http::inference::InferenceService>,
    /// Recent jobs.
    pub jobs: Arc<fleetmesh_market::service::JobService>,
}

impl Status {
    /// What the page shows of the node the services `s` serve.
    pub fn of(s: &crate::daemon::Services) -> Status {
        Status {
            name: s.node.name(),
            did: s.node.keys.did(),
            class: s.node.config.node.class.to_string(),
            protocol_digest: fleetmesh_schemas::SchemaSet::embedded().digest().to_hex(),
            descriptor: s.descriptor.id_hex(),
            backend: format!("{} ({})", s.backend, s.backend_reason),
            devices: s.devices.clone(),
            circuits: s.node.dir.join(crate::node::CIRCUITS_DIR),
            inference: s.inference.clone(),
            jobs: s.jobs.clone(),
        }
    }
}
