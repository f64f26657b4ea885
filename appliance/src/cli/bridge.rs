//! `meshnode bridge sync`: one exchange with a standard Nostr relay — NIP-77 where it speaks
//! it, REQ pages (walking `until` back from now) and EVENTs where it does not
//! ([`fleetmesh_relay::bridge`]), both ways by default. The same run as `meshnode sync`
//! with `--via auto`; a continuous bridge is a `[[peering.peers]]` entry with `via = "auto"`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::cli::{Outcome, SyncArgs};

/// `meshnode bridge …`.
#[derive(Debug, Subcommand)]
pub enum BridgeCommand {
    /// Exchange the events of a filter with a standard relay now (history included):
    /// NIP-77 where it speaks it, REQ pages and EVENTs where it does not.
    Sync(BridgeSyncArgs),
}

/// `meshnode bridge sync`.
#[derive(Debug, Args)]
pub struct BridgeSyncArgs {
    /// The node directory [default: $MESHNODE_HOME or the platform data directory].
    pub dir: Option<PathBuf>,
    /// The relay: ws://HOST:PORT or wss://HOST[:PORT].
    #[arg(long, value_name = "URL")]
    pub relay: String,
    /// The NIP-01 filter of the events exchanged, as JSON.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub filter: String,
    /// Only events created since TIME: Unix seconds, or an age such as 30m, 24h, 7d.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// pull: fetch what the relay has; push: send ours; both.
    #[arg(long, value_name = "pull|push|both", default_value = "both")]
    pub direction: fleetmesh_relay::sync::Direction,
    /// auto: NIP-77, then REQ pages when the relay refuses or ignores it; nip77; req.
    #[arg(long, value_name = "auto|nip77|req", default_value = "auto")]
    pub via: fleetmesh_relay::bridge::Via,
    /// For a wss:// relay: also trust the CA certificate(s) in this PEM file.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Say what would move, move nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `meshnode bridge …`.
pub fn run(cmd: BridgeCommand) -> anyhow::Result<Outcome> {
    let BridgeCommand::Sync(a) = cmd;
    crate::cli::sync::run(SyncArgs {
        dir: crate::node::dir_or_home(a.dir)?,
        peer: a.relay,
        filter: a.filter,
        direction: a.direction,
        dry_run: a.dry_run,
        since: a.since,
        via: a.via,
        ca: a.ca,
        metrics_file: None,
    })
}
