//! `relay`: our relay face against rust-nostr's `nostr-relay-builder` `LocalRelay`, in the
//! same run, driven by the same load.
//!
//! The load generator runs in a child process (`relay-client`) so that its CPU time can be
//! reported apart from the relay's, and it signs every event before the clock starts, so
//! the relay and not the client is what is measured. Phases:
//!
//! 1. ingest: N events over K connections, at most 128 in flight per connection; events/s
//!    from the first send to the last `OK`, and the `OK` latency per event;
//! 2. queries: M REQs spread over the K connections (by author, and by kind and tag, each
//!    with results), REQ → EOSE latency.
//!
//! Our relay runs with its defaults (SQLite in WAL mode, `OK` after commit) except for the
//! per-connection rate limits, raised for both relays so that neither throttles the load.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleetmesh_relay::limits::Limits;
use fleetmesh_relay::{NodeKeys, Relay, RelayConfig, Store, UnsignedEvent};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

struct Opts {
    events: usize,
    conns: usize,
    reqs: usize,
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        events: 20_000,
        conns: 8,
        reqs: 400,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let v = it.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("relay: {a} needs a number");
            std::process::exit(2)
        });
        match a.as_str() {
            "--events" => o.events = v,
            "--conns" => o.conns = v,
            "--reqs" => o.reqs = v,
            _ => {
                eprintln!("relay: unknown option {a}");
                std::process::exit(2)
            }
        }
    }
    o.conns = o.conns.max(1);
    o
}

fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_CHILDREN covers waited-for children.
    #[allow(unsafe_code)]
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Runs the client process against `url`; returns its report and its CPU time.
fn drive(url: &str, o: &Opts) -> (Value, Duration) {
    let before = children_cpu();
    let out = std::process::Command::new(std::env::current_exe().expect("own path"))
        .args([
            "relay-client",
            url,
            &o.events.to_string(),
            &o.conns.to_string(),
            &o.reqs.to_string(),
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("the client runs");
    assert!(out.status.success(), "the load generator failed");
    let report: Value = serde_json::from_slice(&out.stdout).expect("the client prints JSON");
    (report, children_cpu() - before)
}

async fn start_ours(dir: &std::path::Path) -> (Arc<Relay>, String, tokio::task::JoinHandle<()>) {
    let db = dir.join("bench.db");
    drop(Store::create(&db).expect("a fresh store"));
    let limits = Limits {
        events_per_second: 1e9,
        event_burst: 1e9,
        reqs_per_second: 1e9,
        req_burst: 1e9,
        ..Limits::default()
    };
    serve(&db, limits).await
}

/// Our relay on the store at `db` with `limits`, listening on 127.0.0.1:0: the relay, its
/// `ws://` URL and the server task.
pub async fn serve(
    db: &std::path::Path,
    limits: Limits,
) -> (Arc<Relay>, String, tokio::task::JoinHandle<()>) {
    let (relay, _writer) = Relay::start(
        db,
        RelayConfig {
            limits,
            ..Default::default()
        },
    )
    .expect("relay starts");
    let (addr, server) = relay
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind");
    (relay, format!("ws://{addr}/"), server)
}

/// Parent: runs both relays in turn and prints the comparison.
pub fn run(args: &[String]) {
    let o = parse(args);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    println!(
        "relay: {} events over {} connections, then {} REQs; load generator in a child process",
        o.events, o.conns, o.reqs
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let (relay, url, server) = rt.block_on(start_ours(dir.path()));
    let (ours, ours_cpu) = drive(&url, &o);
    relay.close_all();
    server.abort();
    drop(relay);

    let (theirs, theirs_cpu) = rt.block_on(async {
        use nostr_relay_builder::prelude::*;
        let builder = RelayBuilder::default()
            .addr(std::net::IpAddr::from([127, 0, 0, 1]))
            .rate_limit(RateLimit {
                max_reqs: 100_000,
                notes_per_minute: u32::MAX,
            });
        let local = LocalRelay::new(builder);
        local.run().await.expect("LocalRelay starts");
        let url = local.url().await.to_string();
        let r = tokio::task::spawn_blocking({
            let o = Opts { ..o };
            move || drive(&url, &o)
        })
        .await
        .expect("client");
        local.shutdown();
        r
    });

    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let row = |name: &str, key: &str, higher_is_better: bool| {
        let (a, b) = (f(&ours, key), f(&theirs, key));
        let ratio = if higher_is_better { a / b } else { b / a };
        println!("{name:<22} {a:>12.2} {b:>14.2}   x{ratio:.2}");
    };
    println!(
        "{:<22} {:>12} {:>14}   advantage",
        "", "fleetmesh", "LocalRelay"
    );
    row("ingest events/s", "events_per_sec", true);
    row("OK p50 ms", "ok_p50_ms", false);
    row("OK p99 ms", "ok_p99_ms", false);
    row("REQ->EOSE p50 ms", "eose_p50_ms", false);
    row("REQ->EOSE p99 ms", "eose_p99_ms", false);
    println!(
        "{:<22} {:>12} {:>14}",
        "events accepted", ours["accepted"], theirs["accepted"]
    );
    println!(
        "{:<22} {:>12} {:>14}",
        "events per REQ",
        f(&ours, "req_events") / o.reqs as f64,
        f(&theirs, "req_events") / o.reqs as f64
    );
    println!(
        "{:<22} {:>12.2} {:>14.2}",
        "client CPU s",
        ours_cpu.as_secs_f64(),
        theirs_cpu.as_secs_f64()
    );
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// `["OK","<id>",true...` → (id, accepted), without a JSON parse. Relays write these
/// compactly (both measured here do); anything else is skipped.
fn parse_ok(t: &str) -> Option<(&str, bool)> {
    let rest = t.strip_prefix("[\"OK\",\"")?;
    let (id, rest) = rest.split_at_checked(64)?;
    let rest = rest.strip_prefix("\",")?;
    Some((id, rest.starts_with("true")))
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

const WINDOW: usize = 128;

/// Child: the load generator. Prints one JSON report on stdout.
pub fn client(args: &[String]) {
    let [url, n, k, m] = args else {
        eprintln!("relay-client URL EVENTS CONNS REQS");
        std::process::exit(2)
    };
    let (n, k, m): (usize, usize, usize) =
        (n.parse().unwrap(), k.parse().unwrap(), m.parse().unwrap());
    // Everything signed before the clock starts.
    let keys: Vec<NodeKeys> = (0..k).map(|_| NodeKeys::generate().unwrap()).collect();
    let base = fleetmesh_relay::store::now() - n as u64;
    let mut per_conn: Vec<Vec<(String, String)>> = vec![Vec::new(); k];
    for i in 0..n {
        let e = keys[i % k]
            .sign(UnsignedEvent {
                created_at: base + i as u64,
                kind: 1,
                tags: vec![vec!["t".into(), format!("bench{}", i % 10)]],
                content: format!("benchmark event {i}: a sentence of ordinary length to carry."),
            })
            .unwrap();
        per_conn[i % k].push((e.id_hex(), format!("[\"EVENT\",{}]", e.to_json())));
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(async move {
        let mut sockets = Vec::new();
        for _ in 0..k {
            // TCP_NODELAY on the client too: with Nagle and delayed ACKs a request/response
            // exchange waits ~40 ms, whichever relay is on the other end.
            let (ws, _) = tokio_tungstenite::connect_async_with_config(url.as_str(), None, true)
                .await
                .expect("connect");
            sockets.push(ws);
        }
        // Phase 1: ingest.
        let start = Instant::now();
        let tasks: Vec<_> = sockets
            .into_iter()
            .zip(per_conn)
            .map(|(ws, events)| tokio::spawn(ingest(ws, events)))
            .collect();
        let mut latencies = Vec::with_capacity(n);
        let mut accepted = 0usize;
        let mut sockets = Vec::new();
        for t in tasks {
            let (ws, lat, ok) = t.await.unwrap();
            latencies.extend(lat);
            accepted += ok;
            sockets.push(ws);
        }
        let ingest = start.elapsed();
        latencies.sort();
        // Phase 2: queries, one at a time per connection.
        let authors: Vec<String> = keys.iter().map(NodeKeys::nostr_pubkey_hex).collect();
        let tasks: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(c, ws)| {
                let filters: Vec<Value> = (0..m)
                    .filter(|i| i % k == c)
                    .map(|i| {
                        if i % 2 == 0 {
                            json!({"authors": [authors[i % k]], "limit": 100})
                        } else {
                            json!({"kinds": [1], "#t": [format!("bench{}", i % 10)], "limit": 100})
                        }
                    })
                    .collect();
                tokio::spawn(queries(ws, filters))
            })
            .collect();
        let mut eose = Vec::with_capacity(m);
        let mut req_events = 0usize;
        for t in tasks {
            let (lat, got) = t.await.unwrap();
            eose.extend(lat);
            req_events += got;
        }
        eose.sort();
        json!({
            "events": n,
            "accepted": accepted,
            "ingest_secs": ingest.as_secs_f64(),
            "events_per_sec": n as f64 / ingest.as_secs_f64(),
            "ok_p50_ms": percentile(&latencies, 0.50),
            "ok_p99_ms": percentile(&latencies, 0.99),
            "reqs": m,
            "req_events": req_events,
            "eose_p50_ms": percentile(&eose, 0.50),
            "eose_p99_ms": percentile(&eose, 0.99),
        })
    });
    println!("{report}");
}

async fn ingest(ws: Ws, events: Vec<(String, String)>) -> (Ws, Vec<Duration>, usize) {
    let (mut tx, mut rx) = ws.split();
    let index: HashMap<String, usize> = events
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.clone(), i))
        .collect();
    let mut sent_at: Vec<Option<Instant>> = vec![None; events.len()];
    let mut latencies = Vec::with_capacity(events.len());
    let (mut next, mut done, mut accepted) = (0usize, 0usize, 0usize);
    while done < events.len() {
        while next < events.len() && next - done < WINDOW {
            sent_at[next] = Some(Instant::now());
            tx.send(Message::Text(events[next].1.clone().into()))
                .await
                .expect("send");
            next += 1;
        }
        let Some(Ok(Message::Text(t))) = rx.next().await else {
            panic!("connection lost during ingest");
        };
        // The generator reads only what it needs: `["OK","<64 hex>",true|false,...`.
        let Some((id, accepted_flag)) = parse_ok(t.as_str()) else {
            continue;
        };
        if let Some(&i) = index.get(id)
            && let Some(at) = sent_at[i].take()
        {
            latencies.push(at.elapsed());
            done += 1;
            if accepted_flag {
                accepted += 1;
            }
        }
    }
    (tx.reunite(rx).expect("same socket"), latencies, accepted)
}

async fn queries(mut ws: Ws, filters: Vec<Value>) -> (Vec<Duration>, usize) {
    let mut latencies = Vec::with_capacity(filters.len());
    let mut total = 0;
    for (i, f) in filters.into_iter().enumerate() {
        let sub = format!("q{i}");
        let start = Instant::now();
        ws.send(Message::Text(json!(["REQ", sub, f]).to_string().into()))
            .await
            .expect("send");
        let mut got = 0;
        // Matched by prefix, not parsed: the generator must not be the bottleneck.
        let event_prefix = format!("[\"EVENT\",\"{sub}\",");
        let eose = format!("[\"EOSE\",\"{sub}\"]");
        loop {
            let Some(Ok(Message::Text(t))) = ws.next().await else {
                panic!("connection lost during queries");
            };
            let t = t.as_str();
            if t.starts_with(&event_prefix) {
                got += 1;
            } else if t == eose {
                break;
            }
        }
        latencies.push(start.elapsed());
        assert!(got > 0, "every benchmark REQ has results");
        total += got;
        ws.send(Message::Text(json!(["CLOSE", sub]).to_string().into()))
            .await
            .expect("send");
    }
    (latencies, total)
}
