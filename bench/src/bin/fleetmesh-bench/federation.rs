//! `federation`: how fast a local federation (`meshnode cluster`) finds itself and converges,
//! against the same nodes synced by hand with `meshnode sync`, in the same run.
//!
//! ```text
//! fleetmesh-bench federation [--meshnode PATH] [--nodes 3,5,10] [--topologies line,full]
//!                            [--events N] [--interval-secs S]
//! ```
//!
//! For each node count and topology:
//! - **federation**: `meshnode cluster start` (gossip bootstrapped from the topology's
//!   neighbours, QUIC links with every node found); *discovery* is the time from the cluster
//!   answering `/healthz` until every node lists every other with its link up (gossip
//!   propagation of each descriptor, then the QUIC hello); then N signed events are
//!   published at node 0 and *converge* is the time from node 0 holding them (every OK
//!   back) until every node's store holds them
//!   (`fleetmesh_store_events`), with the bytes the peering rounds moved
//!   (`fleetmesh_peering_bytes_total`, all nodes) per event;
//! - **by hand**: the same nodes not peered (`--topology none --transport ws`), the same
//!   events published at node 0, then `meshnode sync --direction pull` run one after the
//!   other along the topology (line: node i from node i − 1; full: every node from node 0),
//!   as an operator's script would; *converge* is the time from node 0 holding the events
//!   until the last sync finished.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message;

struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    urls: Vec<String>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(&self.bin)
            .args(["cluster", "stop", "--dir"])
            .arg(&self.dir)
            .output();
    }
}

fn start(
    bin: &Path,
    dir: &Path,
    n: usize,
    topology: &str,
    transport: &str,
    interval: u64,
) -> Cluster {
    let o = Command::new(bin)
        .args([
            "cluster",
            "start",
            "--nodes",
            &n.to_string(),
            "--topology",
            topology,
        ])
        .args([
            "--transport",
            transport,
            "--interval-secs",
            &interval.to_string(),
            "--dir",
        ])
        .arg(dir)
        .output()
        .expect("meshnode cluster start");
    assert!(
        o.status.success(),
        "cluster start: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let urls = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("a JSON line")["url"]
                .as_str()
                .expect("url")
                .to_owned()
        })
        .collect();
    Cluster {
        bin: bin.to_owned(),
        dir: dir.to_owned(),
        urls,
    }
}

/// The body of `GET path` on the node at `url` (`http://HOST:PORT`).
fn get(url: &str, path: &str) -> String {
    let host = url.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(host).expect("the node answers");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .expect("a request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("an answer");
    out.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// The sum of a metric's samples on the node at `url`.
fn metric(url: &str, name: &str) -> f64 {
    get(url, "/metrics")
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn all_linked(urls: &[String]) -> bool {
    urls.iter().all(|u| {
        let body = get(u, "/v1/peers");
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["peers"]
            .as_array()
            .is_some_and(|p| p.len() == urls.len() - 1 && p.iter().all(|x| x["link"] == "up"))
    })
}

fn wait(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    t.elapsed()
}

fn events(n: usize) -> Vec<Event> {
    let keys = NodeKeys::generate().expect("keys");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock")
        .as_secs();
    (0..n)
        .map(|i| {
            keys.sign(UnsignedEvent {
                created_at: now - (n - i) as u64,
                kind: 1,
                tags: vec![vec!["t".into(), "federation-bench".into()]],
                content: format!("federation bench event {i}"),
            })
            .expect("signing")
        })
        .collect()
}

/// Publishes `events` at the node at `url` and waits for every OK: a thousand per
/// connection, the connections at once (the relay's per-connection burst is 1 000).
fn publish(url: &str, events: &[Event]) {
    let ws = url.replace("http://", "ws://") + "/";
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(futures_util::future::join_all(
        events.chunks(1000).map(|chunk| publish_one(&ws, chunk)),
    ));
}

async fn publish_one(ws: &str, events: &[Event]) {
    let (socket, _) = tokio_tungstenite::connect_async(ws)
        .await
        .expect("the relay");
    let (mut tx, mut rx) = socket.split();
    let send = async {
        for e in events {
            let msg = format!("[\"EVENT\",{}]", e.to_json());
            tx.send(Message::Text(msg.into())).await.expect("send");
        }
    };
    let recv = async {
        let mut ok = 0;
        while ok < events.len() {
            match rx.next().await {
                Some(Ok(Message::Text(t))) if t.starts_with("[\"OK\"") => {
                    assert!(t.contains(",true,"), "refused: {t}");
                    ok += 1;
                }
                Some(Ok(_)) => {}
                other => panic!("the relay closed: {other:?}"),
            }
        }
    };
    tokio::join!(send, recv);
    let _ = tx.close().await;
}

struct Row {
    nodes: usize,
    topology: String,
    discovery: Duration,
    converge: Duration,
    bytes_per_event: f64,
    by_hand: Duration,
}

fn federation(
    bin: &Path,
    n: usize,
    topology: &str,
    events: &[Event],
    interval: u64,
) -> (Duration, Duration, f64) {
    let tmp = tempfile::tempdir().expect("a directory");
    let c = start(bin, &tmp.path().join("c"), n, topology, "quic", interval);
    let discovery = wait(
        "every node linked with every other",
        Duration::from_secs(300),
        || all_linked(&c.urls),
    );
    let base: Vec<f64> = c
        .urls
        .iter()
        .map(|u| metric(u, "fleetmesh_store_events"))
        .collect();
    let bytes0: f64 = c
        .urls
        .iter()
        .map(|u| metric(u, "fleetmesh_peering_bytes_total"))
        .sum();
    publish(&c.urls[0], events);
    let t = Instant::now();
    let want = events.len() as f64;
    wait(
        "every node holds the events",
        Duration::from_secs(600),
        || {
            c.urls
                .iter()
                .zip(&base)
                .all(|(u, b)| metric(u, "fleetmesh_store_events") >= b + want)
        },
    );
    let converge = t.elapsed();
    // the rounds that carried the last events are counted when they end
    std::thread::sleep(Duration::from_secs(interval + 1));
    let bytes: f64 = c
        .urls
        .iter()
        .map(|u| metric(u, "fleetmesh_peering_bytes_total"))
        .sum::<f64>()
        - bytes0;
    (discovery, converge, bytes / want)
}

fn by_hand(bin: &Path, n: usize, topology: &str, events: &[Event]) -> Duration {
    let tmp = tempfile::tempdir().expect("a directory");
    let c = start(bin, &tmp.path().join("c"), n, "none", "ws", 86_400);
    publish(&c.urls[0], events);
    let t = Instant::now();
    for i in 1..n {
        let from = if topology == "line" { i - 1 } else { 0 };
        let peer = c.urls[from].replace("http://", "ws://") + "/";
        let o = Command::new(bin)
            .arg("sync")
            .arg(c.dir.join(format!("node-{i}")))
            .args(["--peer", &peer, "--direction", "pull"])
            .output()
            .expect("meshnode sync");
        assert!(
            o.status.success(),
            "sync: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    t.elapsed()
}

/// `fleetmesh-bench federation …`.
pub fn run(args: &[String]) {
    let mut bin = PathBuf::from("target/release/meshnode");
    let mut nodes = vec![3usize, 5, 10];
    let mut topologies = vec!["line".to_owned(), "full".to_owned()];
    let mut n_events = 10_000usize;
    let mut interval = 2u64;
    let mut it = args.iter();
    let list = |s: Option<&String>| {
        s.expect("a value")
            .split(',')
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--meshnode" => bin = PathBuf::from(it.next().expect("--meshnode PATH")),
            "--nodes" => {
                nodes = list(it.next())
                    .iter()
                    .map(|s| s.parse().expect("a count"))
                    .collect()
            }
            "--topologies" => topologies = list(it.next()),
            "--events" => n_events = it.next().and_then(|s| s.parse().ok()).expect("--events N"),
            "--interval-secs" => {
                interval = it
                    .next()
                    .and_then(|s| s.parse().ok())
                    .expect("--interval-secs S")
            }
            _ => crate::usage(),
        }
    }
    assert!(
        bin.exists(),
        "{}: build it with cargo build --release -p fleetmesh-appliance",
        bin.display()
    );
    let events = events(n_events);
    let mut rows = Vec::new();
    for &n in &nodes {
        for topology in &topologies {
            let (discovery, converge, bytes_per_event) =
                federation(&bin, n, topology, &events, interval);
            let by_hand = by_hand(&bin, n, topology, &events);
            eprintln!(
                "federation: {n} nodes {topology}: discovery {:.2} s, converge {:.2} s, {bytes_per_event:.0} B/event; by hand {:.2} s",
                discovery.as_secs_f64(),
                converge.as_secs_f64(),
                by_hand.as_secs_f64()
            );
            rows.push(Row {
                nodes: n,
                topology: topology.clone(),
                discovery,
                converge,
                bytes_per_event,
                by_hand,
            });
        }
    }
    println!(
        "| nodes | topology | discovery s | federation: converge s | bytes/event | by hand: converge s | ×by hand |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.0} | {:.2} | ×{:.2} |",
            r.nodes,
            r.topology,
            r.discovery.as_secs_f64(),
            r.converge.as_secs_f64(),
            r.bytes_per_event,
            r.by_hand.as_secs_f64(),
            r.by_hand.as_secs_f64() / r.converge.as_secs_f64()
        );
    }
}
