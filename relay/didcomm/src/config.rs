//! `[didcomm]` of a node's `meshnode.toml`: whether it mediates, the mediator's bounds,
//! and the mediator it picks its own messages up from.

use serde::{Deserialize, Serialize};

/// `[didcomm]`: the node takes DIDComm v2 messages at `POST /didcomm` (compute/1.0 jobs
/// by DID, see [`crate::DidComm`]); it may hold messages for others (a mediator), and it
/// may itself be reached only through a mediator it picks its messages up from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Hold forwarded messages for other DIDs until each picks them up (Message Pickup
    /// 3.0, a request signed by the DID's key): a mediator for firewalled nodes and for
    /// buyers. Held in `DIR/mediator.sqlite`, so a restart keeps them. Default false; true
    /// suits a backbone node.
    pub mediate: bool,
    /// Messages held per DID; past it a new message for that DID is refused (HTTP 429
    /// `queue_full`, with `Retry-After`) — nothing held is dropped for a newcomer. 1 to
    /// 100 000. Default 256.
    pub hold_per_did: usize,
    /// Bytes held for all DIDs together; past it a new message is refused (HTTP 507
    /// `full`). 1 MiB to 4 GiB. Default 64 MiB.
    pub hold_bytes: u64,
    /// Messages one source may have waiting at once, for all DIDs together (a message
    /// counts until its DID picks it up or it expires after `hold_secs`); past it the
    /// source's next forward is refused (HTTP 429 `source_quota`, with `Retry-After`). A
    /// source is the client's address (an IPv6 client's /64), or the peer over a QUIC
    /// link; a forward whose sender signed it (its hop envelope's first hop, or a signed
    /// forward) also counts against that key. Behind a reverse proxy every client has the
    /// proxy's address and so shares one quota. 1 to 100 000, less than `hold_per_did`
    /// (one stranger cannot fill a DID's queue). Default 64.
    pub source_messages: usize,
    /// Bytes one source may have waiting at once (as `source_messages`). 64 KiB to
    /// 4 GiB, less than `hold_bytes` (one stranger cannot fill the node's budget). Default
    /// 8 MiB.
    pub source_bytes: u64,
    /// Seconds a held message waits for its pickup. 60 to 604 800. Default 86 400.
    pub hold_secs: u64,
    /// The mediator this node picks its messages up from (`did:nostr:HEX`), for a node
    /// others cannot reach: give `[node] endpoints` a `didcomm=did:nostr:HEX` so that
    /// senders route through it. Reached at `mediator_url`, or without one over the node's
    /// QUIC link to it (found by gossip: needs `[peering] quic_listen` and
    /// `gossip_listen`) — how a node nobody can dial uses a backbone. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mediator: Option<String>,
    /// The mediator's base URL (`https://mediator.example/`): its DID document is read
    /// from `/.well-known/did.json` there and must be `mediator`'s. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mediator_url: Option<String>,
    /// Seconds between pickups from the mediator. 1 to 3600. Default 2.
    pub pickup_secs: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mediate: false,
            hold_per_did: 256,
            hold_bytes: 64 << 20,
            source_messages: 64,
            source_bytes: 8 << 20,
            hold_secs: 86_400,
            mediator: None,
            mediator_url: None,
            pickup_secs: 2,
        }
    }
}
