//! The command tree: [`Cli`] and every subcommand, each taking its arguments from
//! [`super::args`] or from its group's module.

use clap::{Parser, Subcommand};

use super::args::*;

/// meshnode — the fleetmesh node appliance: verifiable compute on a federation of Nostr
/// relays.
///
/// Exit codes: 0 ok; 1 a negative verdict (an invalid document, a failed check); 2 bad
/// input, bad usage, or an error that stopped the command (one line on stderr).
#[derive(Debug, Parser)]
#[command(
    name = "meshnode",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a node directory: fresh keys (0600), config, SQLite store, signed descriptor.
    Init(InitArgs),
    /// Run the node daemon on its one listener until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Init with defaults if there is no node yet, then run. The quickest way to a node.
    Up(UpArgs),
    /// Report what this machine offers: CPU, GPU adapters, CUDA, protocol digest, node id.
    Doctor(DoctorArgs),
    /// Audit a node for monitoring: files, databases, disk, keys, and the daemon's health
    /// and counters. Exit 0 healthy, 1 degraded, 2 failing or unreachable.
    Watch(WatchArgs),
    /// Talk to a running daemon over its control socket (DIR/meshnode.sock, owner only).
    #[command(subcommand)]
    Ctl(CtlCommand),
    /// Reconcile the node's store with a peer relay by NIP-77 negentropy and transfer only
    /// the missing events (verified before they are stored).
    Sync(SyncArgs),
    /// Work with the protocol's JSON Schemas.
    #[command(subcommand)]
    Schema(SchemaCommand),
    /// Apply manifests (YAML or JSON, several documents per file) to the running daemon
    /// through its control socket: all validated first, nothing applied if one is bad.
    Apply(ApplyArgs),
    /// The manifest kinds (MeshNode, Peering, GrantPolicy, ComputeProvider,
    /// InferenceRouter) for other tools.
    #[command(subcommand)]
    Manifest(ManifestCommand),
    /// Verify Groth16 proofs (BN254, snarkjs JSON formats).
    #[command(subcommand)]
    Proof(ProofCommand),
    /// LLM models: make the built-in tiny one.
    #[command(subcommand)]
    Model(ModelCommand),
    /// Hardware attestation evidence (AMD SEV-SNP reports).
    #[command(subcommand)]
    Attest(AttestCommand),
    /// Generate text with a local model; one JSON line (ids, text, logprobs, digest).
    Infer(InferArgs),
    /// WASI jobs: run a module under the job limits.
    #[command(subcommand)]
    Wasi(WasiCommand),
    /// Jobs on a node, as a buyer: submit, follow, fetch the result and the receipt.
    #[command(subcommand)]
    Job(JobCommand),
    /// did:nostr DID documents: this node's, or another's resolved from relays.
    #[command(subcommand)]
    Did(DidCommand),
    /// Gift-wrap a message for one key (NIP-59 on NIP-44 v2: an unsigned rumor, sealed by
    /// this key, wrapped by a one-time key); prints the wrap event to publish on any relay.
    Wrap(crate::cli::giftwrap::WrapArgs),
    /// Open a gift wrap addressed to this key: every layer checked; prints the rumor and
    /// the verified sender. Exit 2, naming the layer and the check, when it does not open.
    Unwrap(crate::cli::giftwrap::UnwrapArgs),
    /// A local cluster of nodes on loopback, peered in a topology: start, status, stop.
    #[command(subcommand)]
    Cluster(crate::cli::cluster::ClusterCommand),
    /// Standard Nostr relays: exchange a filter's events with one, NIP-77 or REQ pages.
    #[command(subcommand)]
    Bridge(crate::cli::bridge::BridgeCommand),
    /// The peers a running node sees: key, DID, class, transport, digest match, last
    /// heartbeat, last sync and what it moved (`GET /v1/peers`).
    Peers(crate::cli::peers::PeersArgs),
    /// The shards a running node knows (kind 30803: a community node's authoritative
    /// ones, its own) and its copy's state: in sync, behind, differs (`GET /v1/shards`).
    Shards(crate::cli::peers::PeersArgs),
    /// The accountability ledger: `replay FILE` recomputes the decisions from an evidence
    /// log alone; `show` prints each peer's standing.
    #[command(subcommand)]
    Ledger(crate::cli::ledger::LedgerCommand),
    /// The node's traffic grants (kind 30801) on its control socket: issue, list, revoke.
    #[command(subcommand)]
    Grant(crate::cli::ledger::GrantCommand),
    /// Standing reports (kind 30802) on a relay: who reported whom, rung, remedy, evidence.
    #[command(subcommand)]
    Report(crate::cli::ledger::ReportCommand),
    /// Settlement: `decode` a BOLT11 invoice; Nostr Wallet Connect (`nwc-…`), both sides.
    #[command(subcommand)]
    Settle(crate::cli::settle::SettleCommand),
    /// The node's Cashu wallet: balance, mint, send, receive, pay, check, history.
    Wallet(crate::cli::wallet::WalletArgs),
    /// The compute market on the relays: open asks, providers' terms, offers to this key.
    Market(MarketArgs),
    /// The node's keys: rotate them, or revoke one (kind 11802).
    #[command(subcommand)]
    Keys(crate::cli::keys::KeysCommand),
    /// DIDComm Messaging v2 with this node's keys: pack a message for a DID document
    /// (authcrypt, anoncrypt, signed), unpack one addressed to this node.
    #[command(subcommand)]
    Didcomm(crate::cli::didcomm::DidcommCommand),
}
