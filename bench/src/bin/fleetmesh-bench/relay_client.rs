//! The relay bench's load generator, run as a child process so that its CPU time is
//! reported apart from the relay's. It signs every event before its clock starts and reads
//! answers by prefix instead of parsing them, so the relay and not the client is measured.
//!
//! ```text
//! fleetmesh-bench relay-client fill URL COUNT CONNS
//! fleetmesh-bench relay-client round URL EVENTS CONNS WINDOW REQS PREFILLED
//! ```
//!
//! `fill` stores COUNT older events (1 000 authors, `t` and `p` tags, created in the 30 days
//! before now) through the normal path, as fast as the relay takes them; `round` times
//! EVENTS new events over CONNS connections with at most WINDOW in flight on each, then REQs
//! by author, by kind and tag, and by time range (over the filled events when PREFILLED > 0),
//! one at a time per connection. Both print one JSON report on stdout.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fleetmesh_proto::{NodeKeys, UnsignedEvent};
use futures_util::{SinkExt as _, StreamExt as _};
use rayon::prelude::*;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// The filled events span the 30 days before now.
pub const FILL_SPAN_SECS: u64 = 30 * 86_400;
const FILL_AUTHORS: usize = 1_000;
const FILL_WINDOW: usize = 64;
const FILL_PER_CONNECTION: usize = 2_000;

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

fn num(s: &str) -> usize {
    s.parse().unwrap_or_else(|_| {
        eprintln!("relay-client: {s} is not a number");
        std::process::exit(2)
    })
}

/// Child entry point.
pub fn client(args: &[String]) {
    let report = match args {
        [mode, url, count, conns] if mode == "fill" => fill(url, num(count), num(conns)),
        [mode, url, n, k, w, m, p] if mode == "round" => {
            round(url, num(n), num(k), num(w), num(m), num(p))
        }
        _ => {
            eprintln!(
                "relay-client fill URL COUNT CONNS | round URL EVENTS CONNS WINDOW REQS PREFILLED"
            );
            std::process::exit(2)
        }
    };
    println!("{report}");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn connect(url: &str, k: usize) -> Vec<Ws> {
    let mut sockets = Vec::with_capacity(k);
    for _ in 0..k {
        // TCP_NODELAY on the client too: with Nagle and delayed ACKs a request/response
        // exchange waits ~40 ms, whichever relay is on the other end.
        let (ws, _) = tokio_tungstenite::connect_async_with_config(url, None, true)
            .await
            .expect("connect");
        sockets.push(ws);
    }
    sockets
}

/// `["OK","<id>",true...` → (id, accepted), without a JSON parse. Relays write these
/// compactly (all measured here do); anything else is skipped.
fn parse_ok(t: &str) -> Option<(&str, bool)> {
    let rest = t.strip_prefix("[\"OK\",\"")?;
    let (id, rest) = rest.split_at_checked(64)?;
    let rest = rest.strip_prefix("\",")?;
    Some((id, rest.starts_with("true")))
}

/// Signs events `0..n`, made by `make(i)`, on every core; `(id, EVENT message)` each.
fn sign_all(
    n: usize,
    keys: &[NodeKeys],
    make: impl Fn(usize) -> UnsignedEvent + Sync,
) -> Vec<(String, String)> {
    (0..n)
        .into_par_iter()
        .map(|i| {
            let e = keys[i % keys.len()].sign(make(i)).expect("sign");
            (e.id_hex(), format!("[\"EVENT\",{}]", e.to_json()))
        })
        .collect()
}

fn deal<T>(items: Vec<T>, k: usize) -> Vec<Vec<T>> {
    let mut per: Vec<Vec<T>> = (0..k).map(|_| Vec::new()).collect();
    for (i, item) in items.into_iter().enumerate() {
        per[i % k].push(item);
    }
    per
}

fn fill(url: &str, count: usize, k: usize) -> Value {
    let k = k.max(1);
    let keys: Vec<NodeKeys> = (0..FILL_AUTHORS)
        .map(|_| NodeKeys::generate().expect("keys"))
        .collect();
    let tagged: Vec<String> = keys.iter().map(NodeKeys::nostr_pubkey_hex).collect();
    let base = fleetmesh_proto::unix_now() - FILL_SPAN_SECS;
    let step = (FILL_SPAN_SECS as f64 / count.max(1) as f64).max(f64::MIN_POSITIVE);
    let events = sign_all(count, &keys, |i| UnsignedEvent {
        created_at: base + (i as f64 * step) as u64,
        kind: 1,
        tags: vec![
            vec!["t".into(), format!("topic{}", i % 50)],
            vec!["p".into(), tagged[(i * 7 + 3) % FILL_AUTHORS].clone()],
        ],
        content: format!("filled note {i}: a sentence of ordinary length, as people write."),
    });
    let rt = runtime();
    rt.block_on(async move {
        let start = Instant::now();
        let mut accepted = 0;
        // Fresh connections for every 2 000 events each: LocalRelay 0.45.1 resets a
        // connection that sends several thousand events in a row.
        let mut events = events.into_iter();
        loop {
            let chunk: Vec<_> = events.by_ref().take(FILL_PER_CONNECTION * k).collect();
            if chunk.is_empty() {
                break;
            }
            let sockets = connect(url, k).await;
            let tasks: Vec<_> = sockets
                .into_iter()
                .zip(deal(chunk, k))
                .map(|(ws, ev)| tokio::spawn(ingest(ws, ev, FILL_WINDOW)))
                .collect();
            for t in tasks {
                let (mut ws, _, ok) = t.await.expect("fill task");
                accepted += ok;
                let _ = ws.close(None).await;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        json!({"events": count, "accepted": accepted, "secs": secs,
               "events_per_sec": count as f64 / secs})
    })
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

fn round(url: &str, n: usize, k: usize, window: usize, m: usize, prefilled: usize) -> Value {
    let k = k.max(1);
    let keys: Vec<NodeKeys> = (0..k).map(|_| NodeKeys::generate().unwrap()).collect();
    let base = fleetmesh_proto::unix_now() - n as u64;
    let events = sign_all(n, &keys, |i| UnsignedEvent {
        created_at: base + i as u64,
        kind: 1,
        tags: vec![vec!["t".into(), format!("bench{}", i % 10)]],
        content: format!("benchmark event {i}: a sentence of ordinary length to carry."),
    });
    // Time ranges of an hour: over the filled events when there are some (each hour holds
    // prefilled / 720 of them), else over this round's own.
    let (t0, span) = if prefilled > 0 {
        (
            fleetmesh_proto::unix_now() - FILL_SPAN_SECS,
            FILL_SPAN_SECS - 3600,
        )
    } else {
        (base, (n as u64).saturating_sub(3600).max(1))
    };
    let authors: Vec<String> = keys.iter().map(NodeKeys::nostr_pubkey_hex).collect();
    let filter = |i: usize| match i % 3 {
        0 => json!({"authors": [authors[i % k]], "limit": 100}),
        1 => json!({"kinds": [1], "#t": [format!("bench{}", i % 10)], "limit": 100}),
        _ => {
            let since = t0 + (i as u64 * 7919) % span;
            json!({"since": since, "until": since + 3600, "limit": 100})
        }
    };
    let rt = runtime();
    rt.block_on(async move {
        let sockets = connect(url, k).await;
        // Phase 1: ingest.
        let start = Instant::now();
        let tasks: Vec<_> = sockets
            .into_iter()
            .zip(deal(events, k))
            .map(|(ws, ev)| tokio::spawn(ingest(ws, ev, window)))
            .collect();
        let (mut latencies, mut accepted, mut sockets) = (Vec::with_capacity(n), 0, Vec::new());
        for t in tasks {
            let (ws, lat, ok) = t.await.expect("ingest task");
            latencies.extend(lat);
            accepted += ok;
            sockets.push(ws);
        }
        let ingest_secs = start.elapsed().as_secs_f64();
        latencies.sort();
        // Phase 2: queries, one at a time per connection.
        let tasks: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(c, ws)| {
                let filters: Vec<(usize, Value)> = (0..m)
                    .filter(|i| i % k == c)
                    .map(|i| (i % 3, filter(i)))
                    .collect();
                tokio::spawn(queries(ws, filters))
            })
            .collect();
        let mut eose: [Vec<Duration>; 3] = Default::default();
        let (mut req_events, mut empty_reqs) = (0usize, 0usize);
        for t in tasks {
            let (lat, got, empty) = t.await.expect("query task");
            for (shape, d) in lat {
                eose[shape].push(d);
            }
            req_events += got;
            empty_reqs += empty;
        }
        let mut all: Vec<Duration> = eose.iter().flatten().copied().collect();
        all.sort();
        for v in &mut eose {
            v.sort();
        }
        let shape = |v: &Vec<Duration>| json!([percentile(v, 0.5), percentile(v, 0.99)]);
        json!({
            "events": n,
            "accepted": accepted,
            "events_per_sec": n as f64 / ingest_secs,
            "ok_p50_ms": percentile(&latencies, 0.50),
            "ok_p99_ms": percentile(&latencies, 0.99),
            "reqs": m,
            "req_events": req_events,
            "empty_reqs": empty_reqs,
            "eose_p50_ms": percentile(&all, 0.50),
            "eose_p99_ms": percentile(&all, 0.99),
            "eose_author_ms": shape(&eose[0]),
            "eose_tag_ms": shape(&eose[1]),
            "eose_range_ms": shape(&eose[2]),
        })
    })
}

async fn ingest(
    ws: Ws,
    events: Vec<(String, String)>,
    window: usize,
) -> (Ws, Vec<Duration>, usize) {
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
        while next < events.len() && next - done < window.max(1) {
            sent_at[next] = Some(Instant::now());
            tx.feed(Message::Text(events[next].1.clone().into()))
                .await
                .expect("send");
            next += 1;
        }
        tx.flush().await.expect("flush");
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

async fn queries(
    mut ws: Ws,
    filters: Vec<(usize, Value)>,
) -> (Vec<(usize, Duration)>, usize, usize) {
    let mut latencies = Vec::with_capacity(filters.len());
    let (mut total, mut empty) = (0, 0);
    for (i, (shape, f)) in filters.into_iter().enumerate() {
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
        latencies.push((shape, start.elapsed()));
        // (an empty answer is counted, not refused: a relay that evicts old events, as
        // LocalRelay's in-memory store does past 75 000, answers time ranges with nothing)
        empty += usize::from(got == 0);
        total += got;
        ws.send(Message::Text(json!(["CLOSE", sub]).to_string().into()))
            .await
            .expect("send");
    }
    (latencies, total, empty)
}
