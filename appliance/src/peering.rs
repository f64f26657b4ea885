//! Peering over the relay faces: the daemon keeps its store reconciled with each peer of
//! `[peering]` by NIP-77 (`fleetmesh_relay::sync`, both ways, every fetched event verified
//! and a revoked key's later events left out), one round per peer every `interval_secs`,
//! the wait doubling after a failed round up to ten times that. This is the WebSocket
//! transport of the federation (`ws://`, `wss://`), the fallback the QUIC and gossip
//! transports will share the schedule with. Each round runs on a blocking thread with its
//! own store connection; what it moved is logged and counted
//! (`fleetmesh_peering_rounds_total{peer,outcome}`, `fleetmesh_peering_events_total{peer,direction}`).

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{PeerSection, PeeringSection};

/// One round with `peer`: the store at `db` reconciled with it.
fn round(
    db: &std::path::Path,
    durability: fleetmesh_relay::store::Durability,
    peer: &PeerSection,
) -> anyhow::Result<fleetmesh_relay::sync::SyncReport> {
    use anyhow::Context as _;
    let mut store = fleetmesh_relay::store::Store::open_durable(db, durability)?;
    let opts = fleetmesh_relay::sync::SyncOptions {
        filter: serde_json::from_str(&peer.filter).context("the peer's filter")?,
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    Ok(runtime.block_on(fleetmesh_relay::sync::sync(
        &mut store,
        &peer.url,
        &opts,
        |_| {},
    ))?)
}

/// Starts a task per peer of `config` on the store at `db`, committing with the node's
/// `durability`.
pub fn start(
    db: PathBuf,
    config: &PeeringSection,
    durability: fleetmesh_relay::store::Durability,
) -> crate::tasks::Tasks {
    let every = Duration::from_secs(config.interval_secs);
    let tasks = config
        .peers
        .iter()
        .cloned()
        .map(|peer| {
            let db = db.clone();
            tokio::spawn(async move {
                let mut wait = every;
                loop {
                    tokio::time::sleep(wait).await;
                    let (d, p) = (db.clone(), peer.clone());
                    let done = tokio::task::spawn_blocking(move || round(&d, durability, &p)).await;
                    let url = peer.url.clone();
                    match done {
                        Ok(Ok(r)) => {
                            wait = every;
                            metrics::counter!("fleetmesh_peering_rounds_total", "peer" => url.clone(), "outcome" => "ok").increment(1);
                            for (direction, n) in [("fetched", r.fetched), ("sent", r.pushed), ("refused", r.fetch_failed + r.push_refused)] {
                                metrics::counter!("fleetmesh_peering_events_total", "peer" => url.clone(), "direction" => direction).increment(n as u64);
                            }
                            tracing::info!(peer = %url, fetched = r.fetched, sent = r.pushed, refused = r.fetch_failed + r.push_refused, "peering round");
                        }
                        Ok(Err(e)) => {
                            wait = (wait * 2).min(every * 10);
                            metrics::counter!("fleetmesh_peering_rounds_total", "peer" => url.clone(), "outcome" => "failed").increment(1);
                            tracing::warn!(peer = %url, error = %format!("{e:#}"), next_secs = wait.as_secs(), "peering round failed");
                        }
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    crate::tasks::Tasks(tasks)
}
