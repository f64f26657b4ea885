//! The normative constants of the fleetmesh protocol: event kinds, protocol ids, the gossip
//! topic and the manifest API group. Every other crate takes these names from here, never
//! from literals of its own.

/// Nostr event kinds used by fleetmesh, with the NIP-01 basics it relies on.
///
/// The ranges follow NIP-01: 10000–19999 replaceable, 20000–29999 ephemeral,
/// 30000–39999 addressable (keyed by kind, pubkey and `d` tag).
pub mod kind {
    /// NIP-01 user metadata (replaceable).
    pub const METADATA: u16 = 0;
    /// NIP-01 short text note.
    pub const TEXT_NOTE: u16 = 1;
    /// NIP-02 follow list (replaceable).
    pub const CONTACTS: u16 = 3;
    /// Signed bilateral budget a node grants a peer (addressable).
    pub const BUDGET: u16 = 30801;
    /// A node's periodic report about a peer: usage, receipt chain head, remedy rung.
    pub const REPORT: u16 = 30802;
    /// A replicated shard descriptor.
    pub const SHARD: u16 = 30803;
    /// Ephemeral liveness beacon.
    pub const HEARTBEAT: u16 = 21801;
    /// A buyer's compute ask: engine, limits, bid, verification mode, expiry.
    pub const COMPUTE_ASK: u16 = 30810;
    /// An executor-signed job receipt.
    pub const JOB_RECEIPT: u16 = 30811;
    /// What a provider sells (addressable, `d` = `compute`): engines, modes, prices,
    /// limits, mints, models, circuits.
    pub const COMPUTE_PROVIDER: u16 = 30812;
    /// NIP-85 trusted assertion about an external identifier, used to project reputation.
    pub const ASSERTION_PROJECTION: u16 = 30385;
    /// NIP-66 relay discovery / monitor event, used to project relay health.
    pub const RELAY_MONITOR_PROJECTION: u16 = 30166;
    /// NIP-59 seal: the sender's signed layer inside a gift wrap, never published alone.
    pub const SEAL: u16 = 13;
    /// A compute/1.0 message inside a NIP-59 gift wrap (a rumor, never published alone):
    /// a submission `{"ask", "payload"}` to a provider, or its answer.
    pub const COMPUTE_RUMOR: u16 = 23810;
    /// NIP-59 gift wrap.
    pub const GIFT_WRAP: u16 = 1059;
    /// Ephemeral gift wrap (never stored by relays).
    pub const EPHEMERAL_GIFT_WRAP: u16 = 21059;
    /// The multi-key node descriptor (replaceable).
    pub const NODE_DESCRIPTOR: u16 = 11801;
    /// Key revocation list (replaceable).
    pub const KEY_REVOCATION: u16 = 11802;

    /// Every kind whose events fleetmesh defines and checks against a schema.
    pub const FLEETMESH: &[u16] = &[
        BUDGET,
        REPORT,
        SHARD,
        HEARTBEAT,
        COMPUTE_ASK,
        JOB_RECEIPT,
        COMPUTE_PROVIDER,
        ASSERTION_PROJECTION,
        RELAY_MONITOR_PROJECTION,
        GIFT_WRAP,
        EPHEMERAL_GIFT_WRAP,
        NODE_DESCRIPTOR,
        KEY_REVOCATION,
    ];
}

/// Protocol identifiers of the encrypted payloads exchanged between nodes.
pub mod protocol {
    /// Budget receipts and window updates (hash-chained).
    pub const BUDGET_1_0: &str = "budget/1.0";
    /// Complaints and responses that drive the S0–S4 remedy ladder.
    pub const COMPLAINT_1_0: &str = "complaint/1.0";
    /// Job payloads and results.
    pub const COMPUTE_1_0: &str = "compute/1.0";
    /// compute/1.0 plus progress, cancellation and streamed chunks.
    pub const COMPUTE_1_1: &str = "compute/1.1";
    /// One hop of a relayed (onion-style) envelope.
    pub const HOP_1: &str = "fleetmesh/hop/1";

    /// Every protocol id, in a fixed order.
    pub const ALL: &[&str] = &[BUDGET_1_0, COMPLAINT_1_0, COMPUTE_1_0, COMPUTE_1_1, HOP_1];
}

/// The gossip topic on which nodes announce their descriptors.
pub const ANNOUNCE_TOPIC: &str = "/fleetmesh/announce/1";

/// The `apiVersion` of every fleetmesh manifest.
pub const API_VERSION: &str = "fleetmesh.org/v1alpha1";

/// Manifest kinds of [`API_VERSION`].
pub mod manifest {
    /// One node: class, operator, relays, endpoints, face port.
    pub const MESH_NODE: &str = "MeshNode";
    /// A direct peering with another node, with its budget.
    pub const PEERING: &str = "Peering";
    /// Who may use which engines and modes, within which limits.
    pub const GRANT_POLICY: &str = "GrantPolicy";
    /// What a node sells: engines, verification modes, backends, prices.
    pub const COMPUTE_PROVIDER: &str = "ComputeProvider";
    /// Which executors serve which models under which verification mode.
    pub const INFERENCE_ROUTER: &str = "InferenceRouter";

    /// Every manifest kind, in a fixed order.
    pub const ALL: &[&str] = &[
        MESH_NODE,
        PEERING,
        GRANT_POLICY,
        COMPUTE_PROVIDER,
        INFERENCE_ROUTER,
    ];
}
