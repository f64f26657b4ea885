//! The arguments that say which provider a job goes to and how — a node's HTTP API
//! ([`JobNode`]), a key ([`ByKey`]), the market ([`RouteArgs`]) — and those of `meshnode
//! market`, beside [`super::args`].

use std::path::PathBuf;

use clap::{Args, Subcommand};
use fleetmesh_proto::Mode;

/// Which node, and who is asking.
#[derive(Debug, Args)]
pub struct JobNode {
    /// The node's base URL [default: http://127.0.0.1:7777].
    #[arg(long = "node", value_name = "URL")]
    pub given_node: Option<String>,
    /// The buyer's key directory (a node directory made by `meshnode init` will do)
    /// [default: the buyer identity in `buyer/` under $MESHNODE_HOME or the platform data
    /// directory, e.g. ~/.local/share/fleetmesh/buyer, created on first use].
    #[arg(long, value_name = "DIR")]
    pub key_dir: Option<PathBuf>,
    /// The node's API token (its `[api] token`): requests then come from the operator,
    /// who sees every job. Without it they are signed by the buyer's key (NIP-98), and the
    /// node shows the buyer its own jobs only.
    #[arg(
        long,
        env = "MESHNODE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

impl JobNode {
    /// The node's base URL.
    pub fn node(&self) -> &str {
        self.given_node
            .as_deref()
            .unwrap_or("http://127.0.0.1:7777")
    }
}

/// How `job submit` reaches a provider known by its key.
#[derive(Debug, Args)]
pub struct ByKey {
    /// The provider: did:nostr:HEX or its key (HEX); with --via http, --node's key.
    #[arg(long = "to", value_name = "DID|HEX")]
    pub provider: Option<String>,
    /// http: POST to --node. giftwrap: a NIP-59 gift wrap to --to through --relay, and
    /// its answer (status, result, receipt) wrapped back the same way. didcomm: DIDComm v2
    /// to the endpoint --to's DID document names (resolved through --relay), directly or
    /// through its mediator, the answer back the same way. iroh: the same DIDComm
    /// messages over a QUIC peer link to the iroh endpoint --to's DID document names
    /// ([peering] quic_listen), the link's hello checking both ends' descriptors.
    /// [default: auto with --to and without --node: didcomm when the provider's DID
    /// document names a DIDComm endpoint, else giftwrap through the relays it names and
    /// --relay; http otherwise]
    #[arg(long, value_name = "auto|http|giftwrap|didcomm|iroh")]
    pub via: Option<String>,
    /// giftwrap: a relay the provider reads (its own, or one its descriptor names), where
    /// the wrap is sent and the answer awaited. didcomm, iroh: a relay holding the
    /// provider's (and its mediator's) descriptor. Repeatable.
    #[arg(long = "relay", value_name = "URL")]
    pub relays: Vec<String>,
    /// iroh: a PEM file of CA certificates trusted for the provider's iroh relay servers
    /// (beside the web's roots), for a provider reached through one.
    #[arg(long = "iroh-relay-ca", value_name = "FILE")]
    pub iroh_relay_ca: Option<PathBuf>,
    /// giftwrap, didcomm, iroh: seconds to wait for the final answer.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub wait_secs: u64,
    /// giftwrap, didcomm, iroh: where to write the result's files (as `job result --out`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// How a submitted job finds its provider.
#[derive(Debug, Args)]
pub struct RouteArgs {
    /// `auto`: publish the ask on the relays (`--relay`, and the relay face of `--node`
    /// when given or when no --relay is), take offers for `--offer-secs`, send the job to
    /// the best (verification mode, then price, then standing), and the next when one fails.
    /// `did:nostr:…`: that provider (as --to). An http(s) URL: that node (as --node).
    #[arg(long, value_name = "auto|DID|URL")]
    pub route: Option<String>,
    /// With --route auto: the most seconds to gather offers (less once every provider
    /// whose terms sell the ask within its bid has offered).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub offer_secs: u64,
    /// With --route auto: only providers whose terms name this region (their `[node]
    /// regions`). Repeatable: any of them.
    #[arg(long = "region", value_name = "REGION")]
    pub regions: Vec<String>,
}

/// `meshnode market …`: what the relays hold of the market.
#[derive(Debug, Args)]
pub struct MarketArgs {
    /// What to show.
    #[command(subcommand)]
    pub what: MarketCommand,
    /// The node whose relay face to read [default: http://127.0.0.1:7777, unless --relay
    /// is given].
    #[arg(long = "node", value_name = "URL", global = true)]
    pub node: Option<String>,
    /// Another relay to read. Repeatable.
    #[arg(long = "relay", value_name = "URL", global = true)]
    pub relays: Vec<String>,
    /// Only what concerns this verification mode.
    #[arg(long, value_name = "MODE", global = true)]
    pub mode: Option<Mode>,
    /// Only providers whose terms name this region. Repeatable: any of them.
    #[arg(long = "region", value_name = "REGION", global = true)]
    pub regions: Vec<String>,
    /// One JSON array instead of a line each.
    #[arg(long, global = true)]
    pub json: bool,
}

/// `meshnode market asks|offers|providers`.
#[derive(Debug, Subcommand)]
pub enum MarketCommand {
    /// Open asks (kind 30810) not yet expired: buyer, engine, mode, bid, limits.
    Asks,
    /// Providers' terms (kind 30812): engines, modes, prices, limits, mints.
    Providers,
    /// Offers gift-wrapped to this key for its asks (read for `--secs`).
    Offers {
        /// The key directory whose offers to read [default: the buyer identity].
        #[arg(long, value_name = "DIR")]
        key_dir: Option<PathBuf>,
        /// Seconds to listen.
        #[arg(long, default_value_t = 3)]
        secs: u64,
    },
}
