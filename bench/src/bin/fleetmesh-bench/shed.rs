//! `shed`: a granted peer's write latency while ungranted connections flood the relay,
//! with load shedding (`[relay] shedding = "auto"`) against none (`off`): the same flood,
//! the same granted writer, in one run.
//!
//! ```text
//! fleetmesh-bench shed [--flood-conns K] [--secs S] [--rate R] [--pool N]
//! ```
//!
//! Each mode starts a fresh relay (its own SQLite file, rate limits raised so that only
//! load limits the flood) in a runtime of its own, grants one key, and for S seconds runs
//! K flooding connections (pre-signed unique events, sent as fast as the relay reads them)
//! beside one granted connection writing R events a second. The granted writer answers a
//! NIP-42 challenge when one comes and re-sends what was refused `auth-required:` or
//! `rate-limited:`; its
//! latency is from the first send to the `OK true` (one still unanswered at the end counts
//! at its age then). Reported: the granted writes' p50, p99
//! and worst latency, how many were taken, the flood's taken and refused, the highest
//! rung — and p99 without shedding over p99 with it. `SHED_TRACE=1` prints the rung and the
//! pressure (scheduling lag, writer sojourn, writer backlog, ms) every 20 ms on stderr.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use fleetmesh_proto::{NodeKeys, UnsignedEvent};
use fleetmesh_relay::face::{Allowance, Shedding};
use fleetmesh_relay::limits::Limits;
use fleetmesh_relay::{Relay, RelayConfig, Store};
use futures_util::{SinkExt as _, StreamExt as _};
use rayon::prelude::*;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

fn flag(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| {
            v.parse().unwrap_or_else(|_| {
                eprintln!("shed: {name} {v}: not a number");
                std::process::exit(2)
            })
        })
}

/// `n` unique notes, signed in parallel before any clock starts.
fn presign(n: usize, tag: &str) -> Vec<String> {
    let keys: Vec<NodeKeys> = (0..16).map(|_| NodeKeys::generate().unwrap()).collect();
    let now = fleetmesh_proto::unix_now();
    (0..n)
        .into_par_iter()
        .map(|i| {
            keys[i % keys.len()]
                .sign(UnsignedEvent {
                    created_at: now,
                    kind: 1,
                    tags: vec![vec!["t".into(), tag.into()]],
                    content: format!("{tag} {i}"),
                })
                .unwrap()
                .to_json()
        })
        .collect()
}

/// What one mode measured.
struct Outcome {
    latencies: Vec<Duration>,
    granted_taken: u64,
    /// Granted writes still unanswered at the end (counted in the latencies at their age).
    unanswered: usize,
    flood_taken: u64,
    flood_refused: u64,
    max_rung: u8,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Starts a relay in its own runtime; its URL, the relay and the runtime.
fn relay(
    shedding: Shedding,
    granted: String,
) -> (
    String,
    Arc<Relay>,
    tokio::runtime::Runtime,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("relay.db");
    drop(Store::create(&db).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let limits = Limits {
        shedding,
        events_per_second: 1e9,
        event_burst: 1e9,
        max_queued_bytes_total: 1 << 30,
        ..Limits::default()
    };
    let (r, _writer) = Relay::start(
        &db,
        RelayConfig {
            limits,
            ..Default::default()
        },
    )
    .unwrap();
    r.set_granted(Arc::new(move |k: &str| {
        (k == granted).then(|| Allowance {
            events: u64::MAX / 2,
            window_secs: 60,
            shards: Default::default(),
        })
    }));
    let addr = rt.block_on(async {
        let _ = r.spawn_shedder();
        r.listen(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap()
            .0
    });
    (format!("ws://{addr}"), r, rt, dir)
}

fn one(
    mode: Shedding,
    conns: usize,
    secs: u64,
    rate: usize,
    pool: &[String],
    granted: &[String],
) -> Outcome {
    let key = NodeKeys::generate().unwrap();
    let (url, r, relay_rt, _dir) = relay(mode, key.nostr_pubkey_hex());
    let flood_taken = Arc::new(AtomicU64::new(0));
    let flood_refused = Arc::new(AtomicU64::new(0));
    let max_rung = Arc::new(AtomicU8::new(0));
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // the granted peer on a thread and runtime of its own (a peer elsewhere, not starved by
    // the flood's client tasks), connected before the flood begins as its link would be
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<Instant>();
    let granted_thread = {
        let (url, granted) = (url.clone(), granted.to_vec());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let (ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
                ready_tx.send(()).unwrap();
                let deadline = go_rx.recv().unwrap();
                granted_writer(ws, &url, &key, rate, &granted, deadline).await
            })
        })
    };
    ready_rx.recv().unwrap();
    let out = clients.block_on(async {
        // every connection is open before the flood begins, so that the clock measures
        // the flood, not the handshakes
        let mut flooders = Vec::with_capacity(conns);
        for _ in 0..conns {
            flooders.push(tokio_tungstenite::connect_async(&url).await.unwrap().0);
        }
        let deadline = Instant::now() + Duration::from_secs(secs);
        go_tx.send(deadline).unwrap();
        let mut tasks = Vec::new();
        for (c, ws) in flooders.into_iter().enumerate() {
            let (mut tx, mut rx) = ws.split();
            let mine: Vec<String> = pool.iter().skip(c).step_by(conns).cloned().collect();
            tasks.push(tokio::spawn(async move {
                // round and round the slice: after the first pass they are duplicates,
                // which cost the relay the same checks
                for e in mine.iter().cycle() {
                    if Instant::now() >= deadline {
                        break;
                    }
                    if tx
                        .send(Message::Text(format!("[\"EVENT\",{e}]").into()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }));
            let (taken, refused) = (flood_taken.clone(), flood_refused.clone());
            tasks.push(tokio::spawn(async move {
                while let Ok(Some(Ok(m))) =
                    tokio::time::timeout_at(deadline.into(), rx.next()).await
                {
                    if let Message::Text(t) = m
                        && t.starts_with("[\"OK\"")
                    {
                        if t.contains(",true,") {
                            taken.fetch_add(1, Relaxed);
                        } else {
                            refused.fetch_add(1, Relaxed);
                        }
                    }
                }
            }));
        }
        let watcher = {
            let (r, max_rung) = (r.clone(), max_rung.clone());
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    max_rung.fetch_max(r.shedding_rung(), Relaxed);
                    if std::env::var_os("SHED_TRACE").is_some() {
                        eprintln!("rung {} pressure {:?}", r.shedding_rung(), r.pressure());
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let measured = tokio::task::spawn_blocking(move || granted_thread.join().unwrap())
            .await
            .unwrap();
        for t in tasks {
            t.abort();
        }
        watcher.abort();
        measured
    });
    r.close_all();
    drop(relay_rt);
    let (mut latencies, granted_taken, unanswered) = out;
    latencies.sort();
    Outcome {
        latencies,
        granted_taken,
        unanswered,
        flood_taken: flood_taken.load(Relaxed),
        flood_refused: flood_refused.load(Relaxed),
        max_rung: max_rung.load(Relaxed),
    }
}

/// The granted peer: `rate` events a second until `deadline`, authenticating when
/// challenged; the latency of each taken event from its first send.
async fn granted_writer(
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    url: &str,
    key: &NodeKeys,
    rate: usize,
    events: &[String],
    deadline: Instant,
) -> (Vec<Duration>, u64, usize) {
    let (mut tx, mut rx) = ws.split();
    let every = Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let mut tick = tokio::time::interval(every);
    let mut sent: HashMap<String, (Instant, String)> = HashMap::new();
    let mut latencies = Vec::new();
    let mut next = events.iter();
    let mut taken = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if Instant::now() >= deadline {
                    break;
                }
                let Some(e) = next.next() else { break };
                let id = serde_json::from_str::<Value>(e).unwrap()["id"].as_str().unwrap().to_owned();
                sent.insert(id, (Instant::now(), e.clone()));
                let _ = tx.send(Message::Text(format!("[\"EVENT\",{e}]").into())).await;
            }
            m = rx.next() => {
                let Some(Ok(Message::Text(t))) = m else { continue };
                let v: Value = serde_json::from_str(t.as_str()).unwrap_or_default();
                match v[0].as_str() {
                    Some("AUTH") => {
                        let challenge = v[1].as_str().unwrap_or("");
                        let auth = fleetmesh_relay::sync::auth_message(key.nostr(), url, challenge).unwrap();
                        let _ = tx.send(Message::Text(auth.into())).await;
                    }
                    Some("OK") => {
                        let id = v[1].as_str().unwrap_or("").to_owned();
                        if let Some((at, e)) = sent.get(&id).cloned() {
                            if v[2] == true {
                                latencies.push(at.elapsed());
                                taken += 1;
                                sent.remove(&id);
                            } else if v[3].as_str().is_some_and(|m| {
                                m.starts_with("auth-required:") || m.starts_with("rate-limited:")
                            }) {
                                let _ = tx.send(Message::Text(format!("[\"EVENT\",{e}]").into())).await;
                            } else {
                                sent.remove(&id);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    // what is still unanswered at the end waited at least this long
    let unanswered = sent.len();
    latencies.extend(sent.values().map(|(at, _)| at.elapsed()));
    (latencies, taken, unanswered)
}

/// `fleetmesh-bench shed …`.
pub fn run(args: &[String]) {
    let conns = flag(args, "--flood-conns", 32);
    let secs = flag(args, "--secs", 10) as u64;
    let rate = flag(args, "--rate", 50);
    let pool = flag(args, "--pool", 200_000);
    eprintln!(
        "shed: signing {pool} flood events and {} granted ones",
        rate * secs as usize * 2
    );
    let flood = presign(pool, "flood");
    let granted = presign(rate * secs as usize * 2, "granted");
    println!(
        "| shedding | granted p50 | granted p99 | granted worst | granted taken | unanswered at the end | flood taken | flood refused | highest rung |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut p99 = Vec::new();
    for (name, mode) in [("off", Shedding::Off), ("auto", Shedding::Auto)] {
        let o = one(mode, conns, secs, rate, &flood, &granted);
        let (p50, p, worst) = (
            pct(&o.latencies, 0.5),
            pct(&o.latencies, 0.99),
            o.latencies.last().copied().unwrap_or_default(),
        );
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {} | {} | {} | {} | {} |",
            p50.as_secs_f64() * 1e3,
            p.as_secs_f64() * 1e3,
            worst.as_secs_f64() * 1e3,
            o.granted_taken,
            o.unanswered,
            o.flood_taken,
            o.flood_refused,
            o.max_rung
        );
        p99.push(p.as_secs_f64());
    }
    println!(
        "\ngranted p99 without shedding / with it: ×{:.2} ({conns} flooding connections, {rate} granted events/s, {secs} s)",
        p99[0] / p99[1].max(1e-9)
    );
}
