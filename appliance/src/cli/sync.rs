//! `meshnode sync`: NIP-77 sync of the node's store with a peer relay, its progress on
//! stderr (bars on a terminal, [`crate::cli::progress`]), and with `--metrics-file` its
//! outcome as Prometheus text for node_exporter's textfile collector
//! ([`fleetmesh_relay::sync::textfile`]): a sync run from a timer is monitored like the
//! daemon.

use anyhow::Context as _;

use crate::cli::progress::Progress;
use crate::cli::{Outcome, SyncArgs};

/// Runs `meshnode sync`.
pub fn run(args: SyncArgs) -> anyhow::Result<Outcome> {
    use fleetmesh_relay::sync::{SyncOptions, SyncProgress, sync};
    let mut filter: serde_json::Value =
        serde_json::from_str(&args.filter).context("--filter is not JSON")?;
    if let Some(since) = &args.since {
        let since = parse_since(since, fleetmesh_proto::unix_now())?;
        let obj = filter
            .as_object_mut()
            .context("--filter is not a JSON object")?;
        let given = obj
            .get("since")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        obj.insert("since".into(), since.max(given).into());
    }
    if !(args.peer.starts_with("ws://") || args.peer.starts_with("wss://")) {
        anyhow::bail!("--peer must be a ws:// or wss:// URL, not {:?}", args.peer);
    }
    let ca_pem = crate::cli::read_ca(args.ca.as_deref())?;
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
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    eprintln!("sync: with {}", args.peer);
    let mut shown = Progress::new("sync");
    let via = args.via;
    let report = runtime.block_on(async {
        if via != fleetmesh_relay::bridge::Via::Nip77 {
            let r = fleetmesh_relay::bridge::bridge(&mut store, &args.peer, &opts, via).await;
            return r.map(|(report, used)| {
                eprintln!("sync: by {used}");
                report
            });
        }
        sync(&mut store, &args.peer, &opts, |p| match p {
            SyncProgress::Fetched { done, total } => {
                shown.say("fetching");
                shown.set(*done as u64, *total as u64);
            }
            SyncProgress::Pushed { done, total } => {
                shown.say("pushing");
                shown.set(*done as u64, *total as u64);
            }
            other => shown.say(&other.to_string()),
        })
        .await
    });
    if let Some(path) = &args.metrics_file {
        let text = fleetmesh_relay::sync::textfile::render(
            &args.peer,
            unix,
            started.elapsed(),
            report.as_ref().ok(),
        );
        crate::node::replace_file(path, text.as_bytes(), false)
            .with_context(|| format!("--metrics-file {}", path.display()))?;
    }
    let report = report?;
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

/// `--since`: Unix seconds, or an age (`30m`, `24h`, `7d`, `90s`) before `now`.
fn parse_since(text: &str, now: u64) -> anyhow::Result<u64> {
    if let Ok(t) = text.parse::<u64>() {
        return Ok(t);
    }
    let (n, unit) = text.split_at(text.len().saturating_sub(1));
    let per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => 0,
    };
    match n.parse::<u64>() {
        Ok(n) if per > 0 => Ok(now.saturating_sub(n.saturating_mul(per))),
        _ => anyhow::bail!("--since {text:?}: Unix seconds, or an age such as 30m, 24h, 7d"),
    }
}
