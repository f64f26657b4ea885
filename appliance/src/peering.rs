//! Peering over the relay faces: the daemon keeps its store reconciled with each peer of
//! `[peering]` by NIP-77 (`fleetmesh_relay::sync`, both ways, every fetched event verified
//! and a revoked key's later events left out), one round per peer every `interval_secs`,
//! the wait doubling after a failed round up to ten times that; new events here start a
//! round at once ([`Peers::kick_all`]). This is the WebSocket transport of the federation
//! (`ws://`, `wss://` with the web's roots and the peer's `ca`), the fallback beside the
//! QUIC links of [`crate::federation`], on the same schedule. Each round runs on a blocking
//! thread with its own store connection; what it moved is logged, counted
//! (`fleetmesh_peering_rounds_total{peer,outcome}`, `fleetmesh_peering_events_total{peer,direction}`)
//! and kept in the [`Peers`] table.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::PeeringSection;
use crate::peers::Peers;

/// Whom a round is with.
pub(crate) enum Target {
    /// A relay face, `ws://` or `wss://`, reached `via`; for REQ pages, only events since
    /// `since`.
    Url {
        url: String,
        via: fleetmesh_relay::bridge::Via,
        since: Option<u64>,
    },
    /// A peer link of another transport (QUIC), named for errors, moving events `direction`;
    /// ids the node's other rounds are fetching (`in_flight`) are left to them; at most
    /// `max_fetch` events are fetched.
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    Link {
        name: String,
        link: fleetmesh_relay::sync::Link,
        direction: fleetmesh_relay::sync::Direction,
        in_flight: std::sync::Arc<fleetmesh_relay::sync::InFlight>,
        max_fetch: usize,
        /// The shards of the peer's grant to us: all we push it (empty: anything).
        push_only: std::sync::Arc<Vec<fleetmesh_proto::filter::Filter>>,
    },
}

/// One round with `target`: the store at `db` reconciled with it over `filter` (JSON);
/// `ca` adds trust anchors for a `wss://` peer.
pub(crate) fn round(
    db: &std::path::Path,
    durability: fleetmesh_relay::store::Durability,
    filter: &str,
    ca: Option<&std::path::Path>,
    target: Target,
) -> anyhow::Result<fleetmesh_relay::sync::SyncReport> {
    use anyhow::Context as _;
    let mut store = fleetmesh_relay::store::Store::open_durable(db, durability)?;
    let ca_pem = match ca {
        Some(path) => {
            Some(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?)
        }
        None => None,
    };
    let mut filter: serde_json::Value =
        serde_json::from_str(filter).context("the peer's filter")?;
    if let Target::Url {
        since: Some(t),
        via,
        ..
    } = &target
        && *via != fleetmesh_relay::bridge::Via::Nip77
        && let Some(f) = filter.as_object_mut()
    {
        let given = f
            .get("since")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        f.insert("since".into(), (*t).max(given).into());
    }
    let opts = fleetmesh_relay::sync::SyncOptions {
        filter,
        ca_pem,
        // a QUIC link keeps itself alive: silence past its idle timeout is a dead peer
        timeout: match target {
            Target::Link { .. } => Duration::from_secs(10),
            Target::Url { .. } => Duration::from_secs(30),
        },
        direction: match &target {
            Target::Link { direction, .. } => *direction,
            Target::Url { .. } => fleetmesh_relay::sync::Direction::Both,
        },
        in_flight: match &target {
            Target::Link { in_flight, .. } => Some(in_flight.clone()),
            Target::Url { .. } => None,
        },
        max_fetch: match &target {
            Target::Link { max_fetch, .. } => *max_fetch,
            Target::Url { .. } => usize::MAX,
        },
        push_only: match &target {
            Target::Link { push_only, .. } => push_only.clone(),
            Target::Url { .. } => Default::default(),
        },
        ..Default::default()
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    Ok(runtime.block_on(async {
        match target {
            Target::Url { url, via, .. } => {
                fleetmesh_relay::bridge::bridge(&mut store, &url, &opts, via)
                    .await
                    .map(|(report, _)| report)
            }
            Target::Link { name, link, .. } => {
                fleetmesh_relay::sync::sync_over(&mut store, &name, link, &opts, |_| {}).await
            }
        }
    })?)
}

/// Records a finished round with `peer` (its URL or key, as labelled) in the metrics, the
/// log and `table`; the wait before the next round (`every`, or `wait` doubled after a
/// failure, up to ten times `every`). `live`: as [`Peers::round`].
pub(crate) fn record(
    table: &Peers,
    peer: &str,
    outcome: anyhow::Result<fleetmesh_relay::sync::SyncReport>,
    every: Duration,
    wait: Duration,
    live: bool,
) -> Duration {
    match outcome {
        Ok(r) => {
            metrics::counter!("fleetmesh_peering_rounds_total", "peer" => peer.to_owned(), "outcome" => "ok").increment(1);
            let bytes =
                r.neg_bytes_up + r.neg_bytes_down + r.transfer_bytes_up + r.transfer_bytes_down;
            metrics::counter!("fleetmesh_peering_bytes_total", "peer" => peer.to_owned())
                .increment(bytes as u64);
            for (direction, n) in [
                ("fetched", r.fetched),
                ("sent", r.pushed),
                ("refused", r.fetch_failed + r.push_refused),
            ] {
                metrics::counter!("fleetmesh_peering_events_total", "peer" => peer.to_owned(), "direction" => direction).increment(n as u64);
            }
            if r.fetched + r.pushed + r.fetch_failed + r.push_refused > 0 {
                tracing::info!(%peer, fetched = r.fetched, sent = r.pushed, refused = r.fetch_failed + r.push_refused, "peering round");
            }
            table.round(peer, Ok(&r), live);
            every
        }
        Err(e) => {
            let next = (wait * 2).min(every * 10);
            metrics::counter!("fleetmesh_peering_rounds_total", "peer" => peer.to_owned(), "outcome" => "failed").increment(1);
            tracing::warn!(%peer, error = %format!("{e:#}"), next_secs = next.as_secs(), "peering round failed");
            table.round(peer, Err(format!("{e:#}")), live);
            next
        }
    }
}

/// Starts a task per peer of `config` on the store at `db`, committing with the node's
/// `durability`; each round is recorded in `table`.
pub fn start(
    db: PathBuf,
    config: &PeeringSection,
    durability: fleetmesh_relay::store::Durability,
    table: std::sync::Arc<Peers>,
) -> fleetmesh_port::Tasks {
    let every = Duration::from_secs(config.interval_secs);
    let tasks = config
        .peers
        .iter()
        .cloned()
        .map(|peer| {
            let db = db.clone();
            let table = table.clone();
            let kick = table.kick();
            table.update(&peer.url, |v| {
                v.transport = Some(peer.url.split("://").next().unwrap_or("ws").to_owned());
                v.addrs = vec![peer.url.clone()];
            });
            tokio::spawn(async move {
                let mut wait = every;
                let mut last_ok: Option<u64> = None;
                loop {
                    // new events here start a round early (not while backing off)
                    if wait > every {
                        tokio::time::sleep(wait).await;
                    } else {
                        let _ = tokio::time::timeout(wait, kick.notified()).await;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let (d, p) = (db.clone(), peer.clone());
                    // REQ pages after the first good round: since it began, with ten
                    // minutes for clocks and late publishers
                    let since = last_ok.map(|t: u64| t.saturating_sub(600));
                    let began = fleetmesh_proto::unix_now();
                    let target = Target::Url {
                        url: p.url.clone(),
                        via: p.via,
                        since,
                    };
                    let Ok(done) = tokio::task::spawn_blocking(move || {
                        round(&d, durability, &p.filter, p.ca.as_deref(), target)
                    })
                    .await
                    else {
                        return;
                    };
                    let fetched = done.as_ref().is_ok_and(|r| r.fetched > 0);
                    if done.is_ok() {
                        last_ok = Some(began);
                    }
                    wait = record(&table, &peer.url, done, every, wait, false);
                    if fetched {
                        table.kick_all();
                    }
                }
            })
        })
        .collect();
    fleetmesh_port::Tasks(tasks)
}
