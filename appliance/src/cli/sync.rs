//! `meshnode sync`: NIP-77 sync of the node's store with a peer relay, its progress on
//! stderr (bars on a terminal, [`crate::cli::progress`]).

use anyhow::Context as _;

use crate::cli::progress::Progress;
use crate::cli::{Outcome, SyncArgs};

/// Runs `meshnode sync`.
pub fn run(args: SyncArgs) -> anyhow::Result<Outcome> {
    use fleetmesh_relay::sync::{SyncOptions, SyncProgress, sync};
    let filter: serde_json::Value =
        serde_json::from_str(&args.filter).context("--filter is not JSON")?;
    if !(args.peer.starts_with("ws://") || args.peer.starts_with("wss://")) {
        anyhow::bail!("--peer must be a ws:// or wss:// URL, not {:?}", args.peer);
    }
    let ca_pem = match &args.ca {
        Some(p) => Some(std::fs::read(p).with_context(|| format!("--ca {}", p.display()))?),
        None => None,
    };
    let node = crate::node::Node::open(&args.dir)?;
    let mut store = node.store;
    let opts = SyncOptions {
        filter,
        direction: args.direction,
        dry_run: args.dry_run,
        ca_pem,
        ..SyncOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let started = std::time::Instant::now();
    eprintln!("sync: with {}", args.peer);
    let mut shown = Progress::new("sync");
    let report = runtime.block_on(sync(&mut store, &args.peer, &opts, |p| match p {
        SyncProgress::Fetched { done, total } => {
            shown.say("fetching");
            shown.set(*done as u64, *total as u64);
        }
        SyncProgress::Pushed { done, total } => {
            shown.say("pushing");
            shown.set(*done as u64, *total as u64);
        }
        other => shown.say(&other.to_string()),
    }))?;
    shown.finish("sync: done");
    if args.dry_run {
        println!(
            "sync (dry run): {} rounds, {} bytes up, {} bytes down (negentropy); {} missing here, {} missing there",
            report.rounds, report.neg_bytes_up, report.neg_bytes_down, report.need, report.have
        );
        return Ok(Outcome::Ok);
    }
    println!(
        "sync: {} rounds, {} bytes up, {} bytes down (negentropy); fetched {} of {} missing here, pushed {} of {} missing there; {:.2}s",
        report.rounds,
        report.neg_bytes_up,
        report.neg_bytes_down,
        report.fetched,
        report.need,
        report.pushed,
        report.have,
        started.elapsed().as_secs_f64()
    );
    if report.fetch_failed + report.push_refused > 0 {
        eprintln!(
            "meshnode: sync: {} fetched events failed verification or were not returned, {} pushed events were refused",
            report.fetch_failed, report.push_refused
        );
        return Ok(Outcome::Negative);
    }
    Ok(Outcome::Ok)
}
