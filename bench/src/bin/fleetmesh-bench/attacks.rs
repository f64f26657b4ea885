//! `attacks`: replays, against a running `meshnode` (a release build), the attacks of the
//! hardening issue, and reports the node's resident memory (VmRSS, sampled every 50 ms
//! from /proc) and what became of each attacking connection, beside the bound each must
//! stay under.
//!
//! ```text
//! bench/attacks.sh            # builds release meshnode and fleetmesh-bench, then this
//! fleetmesh-bench attacks --meshnode target/release/meshnode
//! ```
//!
//! Attacks, in order, each on a fresh node (defaults unless said):
//! 1. big-req-unread: 600 stored events of 60 KiB; 6 connections each send one REQ of 10
//!    filters × limit 500 and never read;
//! 2. same-id-reqs: one connection sends 12 such REQs on one subscription id and reads
//!    everything;
//! 3. slowloris: 300 silent TCP connections and 300 idle WebSockets (connection caps raised
//!    so that all are accepted and only the timeouts close them); how many are still open
//!    after 65 s;
//! 4. sigterm: SIGTERM with 50 idle keep-alive HTTP connections and 20 idle WebSockets
//!    open; seconds until the process is gone;
//! 5. dropped-completions: 150 completions of 400 tokens (a 4-layer, 256-wide model),
//!    each abandoned 30 ms after it was sent; the node's threads at the peak, and how long a
//!    4-token completion then takes;
//! 6. unauthenticated-uploads: 4 `PUT /upload` declaring 64 MiB without authorization,
//!    sending 1 MiB and stalling.
//!
//! Then attacks 7 to 11 of the next round (`attacks_exposure.rs`): hostile `pattern`s,
//! DIDComm bodies, a mediator flood, anonymous job reads, a torn evidence log.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fleetmesh_proto::{NodeKeys, UnsignedEvent};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

/// A node under attack: its process, address and directory.
pub(crate) struct Node {
    pub(crate) child: Child,
    pub(crate) addr: String,
    /// The node directory.
    pub(crate) node: PathBuf,
    /// The temporary directory holding it, removed with the node unless taken.
    dir: Option<tempfile::TempDir>,
}

impl Node {
    /// The temporary directory holding the node, kept after the node stops.
    pub(crate) fn take_dir(&mut self) -> Option<tempfile::TempDir> {
        self.dir.take()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh node with `edits` to its config, run with `extra` arguments.
pub(crate) fn start(bin: &Path, edits: &[(&str, &str)], extra: &[&str]) -> Node {
    let dir = tempfile::tempdir().expect("tempdir");
    let node = dir.path().join("n");
    let ok = Command::new(bin)
        .args(["init", node.to_str().unwrap()])
        .stdout(Stdio::null())
        .status()
        .expect("meshnode init");
    assert!(ok.success());
    let cfg = node.join("meshnode.toml");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{from} not in the config");
        text = text.replace(from, to);
    }
    std::fs::write(&cfg, text).unwrap();
    let mut n = run_in(bin, &node, extra);
    n.dir = Some(dir);
    n
}

/// `meshnode run` on the node directory `node`, with `extra` arguments.
pub(crate) fn run_in(bin: &Path, node: &Path, extra: &[&str]) -> Node {
    let mut child = Command::new(bin)
        .args(["run", node.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .args(extra)
        .env("MESHNODE_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("meshnode run");
    let mut out = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while out.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    let addr = line
        .strip_prefix("meshnode listening on http://")
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("unexpected {line:?}"))
        .to_owned();
    Node {
        child,
        addr,
        node: node.to_path_buf(),
        dir: None,
    }
}

/// Stops `n` with SIGTERM and waits for it.
pub(crate) fn stop(mut n: Node) {
    let _ = Command::new("kill")
        .args(["-TERM", &n.child.id().to_string()])
        .status();
    let _ = n.child.wait();
}

pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Samples the node's RSS every 50 ms until dropped; the peak.
pub(crate) struct Peak {
    max: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Peak {
    pub(crate) fn watch(pid: u32) -> Peak {
        let (max, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (m, s) = (max.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                m.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Peak { max, stop }
    }

    pub(crate) fn mib(&self) -> f64 {
        self.max.load(Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for Peak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// One row of the report.
pub(crate) fn row(attack: &str, before: f64, peak: f64, outcome: &str, bound: &str, ok: bool) {
    println!(
        "| {attack} | {before:.0} | {peak:.0} | {outcome} | {bound} | {} |",
        if ok { "yes" } else { "NO" }
    );
}

async fn ws(
    addr: &str,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    tokio_tungstenite::connect_async(format!("ws://{addr}/"))
        .await
        .expect("websocket")
        .0
}

/// Stores `n` events of `size` bytes of content through the relay.
async fn fill(addr: &str, n: u64, size: usize) {
    let keys = NodeKeys::generate().unwrap();
    let mut c = ws(addr).await;
    let body = "x".repeat(size);
    for i in 0..n {
        let e = keys
            .sign(UnsignedEvent {
                created_at: 1_700_000_000 + i,
                kind: 1,
                tags: vec![],
                content: format!("{i} {body}"),
            })
            .unwrap();
        c.send(Message::Text(format!("[\"EVENT\",{}]", e.to_json()).into()))
            .await
            .unwrap();
        loop {
            if let Some(Ok(Message::Text(t))) = c.next().await
                && t.starts_with("[\"OK\"")
            {
                break;
            }
        }
    }
}

fn big_req(subid: &str) -> String {
    let mut m = vec![json!("REQ"), json!(subid)];
    m.extend((0..10).map(|i| json!({"kinds": [1], "limit": 500, "since": i})));
    serde_json::Value::Array(m).to_string()
}

/// Whether the server has closed `s` (a read returns 0 or fails at once).
fn server_closed(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 4096];
    let mut r = s;
    let closed = loop {
        match r.read(&mut b) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    s.set_nonblocking(false).unwrap();
    closed
}

fn http_request(addr: &str, req: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Runs every attack and prints the table.
pub fn run(args: &[String]) {
    let mut bin = PathBuf::from("target/release/meshnode");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--meshnode" => bin = PathBuf::from(it.next().expect("--meshnode PATH")),
            other => {
                eprintln!("attacks: unknown option {other}");
                std::process::exit(2)
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("| attack | RSS before MiB | peak RSS MiB | outcome | bound | within |");
    println!("|---|---|---|---|---|---|");

    // 1. six connections, one huge REQ each, never read
    {
        let n = start(&bin, &[], &[]);
        rt.block_on(fill(&n.addr, 600, 60 << 10));
        let before = mib(rss_kib(n.child.id()));
        let peak = Peak::watch(n.child.id());
        let held: Vec<_> = rt.block_on(async {
            let mut v = Vec::new();
            for i in 0..6 {
                let mut c = ws(&n.addr).await;
                c.send(Message::Text(big_req(&format!("s{i}")).into()))
                    .await
                    .unwrap();
                v.push(c);
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
            v
        });
        let p = peak.mib();
        // 4 MiB of queue each, plus socket buffers and page-sized reads
        let bound = before + 6.0 * 8.0 + 32.0;
        row(
            "1 big REQ × 6, never read",
            before,
            p,
            "answers stall at half the queue",
            &format!("< before + 80 MiB ({bound:.0})"),
            p < bound,
        );
        drop(held);
    }
    // 2. twelve REQs on one id, read eagerly
    {
        let n = start(&bin, &[], &[]);
        rt.block_on(fill(&n.addr, 600, 60 << 10));
        let before = mib(rss_kib(n.child.id()));
        let peak = Peak::watch(n.child.id());
        let (events, eose) = rt.block_on(async {
            let mut c = ws(&n.addr).await;
            for _ in 0..12 {
                c.send(Message::Text(big_req("same").into())).await.unwrap();
            }
            let (mut events, mut eose) = (0, 0);
            while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(5), c.next()).await
            {
                if let Message::Text(t) = m {
                    if t.starts_with("[\"EVENT\"") {
                        events += 1;
                    } else if t.starts_with("[\"EOSE\"") {
                        eose += 1;
                    }
                }
            }
            (events, eose)
        });
        let p = peak.mib();
        let bound = before + 48.0;
        row(
            "2 12 REQs on one id, read",
            before,
            p,
            &format!("{events} events, {eose} EOSE (replaced queries cancelled)"),
            &format!("< before + 48 MiB ({bound:.0})"),
            p < bound,
        );
    }
    // the caps per address would refuse most of these at once (all come from 127.0.0.1);
    // raised, so that the timeouts are what closes them
    let many = [
        ("max_connections = 512", "max_connections = 2000"),
        (
            "max_connections_per_ip = 64",
            "max_connections_per_ip = 2000",
        ),
    ];
    // 3. slowloris
    {
        let n = start(&bin, &many, &[]);
        let before = mib(rss_kib(n.child.id()));
        let peak = Peak::watch(n.child.id());
        let silent: Vec<TcpStream> = (0..300)
            .filter_map(|_| TcpStream::connect(&n.addr).ok())
            .collect();
        let idle = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..300 {
                if let Ok(Ok((c, _))) = tokio::time::timeout(
                    Duration::from_secs(2),
                    tokio_tungstenite::connect_async(format!("ws://{}/", n.addr)),
                )
                .await
                {
                    v.push(c);
                }
            }
            v
        });
        let accepted_ws = idle.len();
        std::thread::sleep(Duration::from_secs(65));
        let open_tcp = silent.iter().filter(|s| !server_closed(s)).count();
        let open_ws = rt.block_on(async {
            let mut open = 0;
            for mut c in idle {
                let closed = matches!(
                    tokio::time::timeout(Duration::from_millis(50), async {
                        loop {
                            match c.next().await {
                                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                                Some(Ok(_)) => {}
                            }
                        }
                    })
                    .await,
                    Ok(())
                );
                if !closed {
                    open += 1;
                }
            }
            open
        });
        // a fresh client still gets in
        let fresh = http_request(
            &n.addr,
            "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        let p = peak.mib();
        row(
            "3 300 silent TCP + 300 idle WebSockets",
            before,
            p,
            &format!(
                "after 65 s open: {open_tcp} TCP, {open_ws} of {accepted_ws} upgraded WS; healthz {}",
                fresh.split_whitespace().nth(1).unwrap_or("-")
            ),
            "0 open",
            open_tcp == 0 && open_ws == 0 && fresh.starts_with("HTTP/1.1 200"),
        );
    }
    // 4. SIGTERM with clients hanging on
    {
        let mut n = start(&bin, &many, &[]);
        let before = mib(rss_kib(n.child.id()));
        let mut keep: Vec<TcpStream> = Vec::new();
        for _ in 0..50 {
            let mut s = TcpStream::connect(&n.addr).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            keep.push(s);
        }
        let socks = rt.block_on(async {
            let mut v = Vec::new();
            for _ in 0..20 {
                v.push(ws(&n.addr).await);
            }
            v
        });
        let t = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &n.child.id().to_string()])
            .status();
        let _ = n.child.wait();
        let secs = t.elapsed().as_secs_f64();
        row(
            "4 SIGTERM, 50 keep-alive + 20 WebSockets open",
            before,
            before,
            &format!("exited in {secs:.1} s"),
            "≤ shutdown_secs (10) + 2 s",
            secs <= 12.0,
        );
        drop((keep, socks));
    }
    // 5. abandoned completions
    {
        let models = tempfile::tempdir().unwrap();
        let dir = models.path().join("slow");
        let c = fleetmesh_inference::LlamaConfig {
            hidden_size: 256,
            intermediate_size: 688,
            num_hidden_layers: 4,
            max_position_embeddings: 1024,
            ..fleetmesh_inference::tiny::tiny_config()
        };
        fleetmesh_inference::tiny::make_model(&dir, &c, 5).unwrap();
        let n = start(&bin, &[], &["--model", dir.to_str().unwrap()]);
        let pid = n.child.id();
        let before = mib(rss_kib(pid));
        let peak = Peak::watch(pid);
        let threads_before = threads(pid);
        let mut peak_threads = threads_before;
        let body = json!({"model": "slow", "prompt": "x", "max_tokens": 400, "ignore_eos": true})
            .to_string();
        let mut refused = 0;
        for _ in 0..150 {
            let mut s = TcpStream::connect(&n.addr).unwrap();
            let req = format!(
                "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(30));
            if server_closed(&s) {
                refused += 1;
            }
            drop(s);
            peak_threads = peak_threads.max(threads(pid));
        }
        let t = Instant::now();
        let answer = http_request(
            &n.addr,
            &format!(
                "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
                json!({"model": "slow", "prompt": "hi", "max_tokens": 4})
                    .to_string()
                    .len(),
                json!({"model": "slow", "prompt": "hi", "max_tokens": 4})
            ),
        );
        let secs = t.elapsed().as_secs_f64();
        let p = peak.mib();
        row(
            "5 150 completions abandoned after 30 ms",
            before,
            p,
            &format!(
                "threads {threads_before} → peak {peak_threads}; then a 4-token completion in {secs:.2} s ({}); {refused} turned away",
                answer.split_whitespace().nth(1).unwrap_or("-")
            ),
            "threads ≤ before + 16; answered",
            peak_threads <= threads_before + 16 && answer.starts_with("HTTP/1.1 200"),
        );
    }
    // 6. unauthenticated uploads that stall
    {
        let n = start(&bin, &[], &[]);
        let before = mib(rss_kib(n.child.id()));
        let peak = Peak::watch(n.child.id());
        let mut socks = Vec::new();
        let mut answered = 0;
        for _ in 0..4 {
            let mut s = TcpStream::connect(&n.addr).unwrap();
            let head = format!(
                "PUT /upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                64 << 20
            );
            s.write_all(head.as_bytes()).unwrap();
            let chunk = vec![0u8; 64 << 10];
            for _ in 0..16 {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut b = [0u8; 12];
            if s.read(&mut b).is_ok_and(|n| n > 0) && b.starts_with(b"HTTP/1.1 401") {
                answered += 1;
            }
            socks.push(s);
        }
        std::thread::sleep(Duration::from_secs(3));
        let p = peak.mib();
        let bound = before + 16.0;
        row(
            "6 4 unauthenticated 64 MiB uploads, stalled",
            before,
            p,
            &format!("{answered} of 4 answered 401 before the body"),
            &format!("< before + 16 MiB ({bound:.0})"),
            p < bound && answered == 4,
        );
        drop(socks);
    }
    super::attacks_exposure::run(&bin);
}
