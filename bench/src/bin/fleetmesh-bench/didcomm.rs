//! `didcomm`: DIDComm v2 messages packed and unpacked, fleetmesh-proto against PyPI didcomm
//! 0.3.2 (SICPA's didcomm-python, the independent implementation of the interop test, run
//! by `appliance/tests/meshnode/didcomm/peer.py bench` in its own venv). Two ways: authcrypt
//! (ECDH-1PU+A256KW, A256CBC-HS512) and what a buyer sends a provider, anoncrypt around an
//! ES256K signature. Each side packs and opens its own messages of about 300 bytes; rounds
//! alternate, the Python side timing itself (its start-up excluded).

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fleetmesh_bench::{Comparison, report};
use fleetmesh_proto::NodeKeys;
use fleetmesh_proto::didcomm::{self, Message, Pack, PeerDoc, SignWith};
use serde_json::json;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Packs and opens `n` messages from `a` to `b`, `how`.
fn ours(a: &NodeKeys, b: &NodeKeys, n: usize, how: Pack) -> u64 {
    let (docs, to) = (vec![PeerDoc::of(a)], PeerDoc::of(b));
    let mut opened = 0;
    for i in 0..n {
        let body = json!({"protocol": "compute/1.0", "type": "job", "x": "x".repeat(240), "n": i});
        let mut m = Message::new("https://fleetmesh.org/test/1.0/ping", body).unwrap();
        m.from = Some(a.did());
        m.to = vec![b.did()];
        let packed = didcomm::pack_encrypted(&m, a, &to, how).unwrap();
        let u = didcomm::unpack(packed.to_string().as_bytes(), b, &docs, 0).unwrap();
        opened += u.message.body["n"].as_u64().unwrap_or_default();
    }
    opened
}

/// Runs the DIDComm benchmark: `didcomm [N] [--rounds R] [--python PATH]`.
pub fn run(args: &[String]) {
    let mut n = 200;
    let mut rounds = 5;
    let mut python: Option<String> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" => rounds = it.next().and_then(|v| v.parse().ok()).expect("--rounds R"),
            "--python" => python = it.next().cloned(),
            v => n = v.parse().expect("N messages"),
        }
    }
    let python = python.unwrap_or_else(|| {
        let o = Command::new(repo().join("appliance/tests/meshnode/didcomm/peer.sh"))
            .output()
            .expect("peer.sh installs the pinned didcomm");
        assert!(
            o.status.success(),
            "peer.sh: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap().trim().to_owned()
    });
    let mut peer = Command::new(&python)
        .arg(repo().join("appliance/tests/meshnode/didcomm/peer.py"))
        .args(["bench", &n.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut to_peer = peer.stdin.take().unwrap();
    let mut from_peer = BufReader::new(peer.stdout.take().unwrap()).lines();
    let mut theirs = |mode: &str| -> Duration {
        writeln!(to_peer, "{mode}").unwrap();
        let ns: u64 = from_peer
            .next()
            .expect("a timing")
            .unwrap()
            .parse()
            .unwrap();
        Duration::from_nanos(ns)
    };
    let key = |s: u8| NodeKeys::from_secret_bytes([s; 32], [s + 1; 32], [s + 2; 32]).unwrap();
    let (a, b) = (key(3), key(13));
    println!("didcomm: {n} messages of ~300 bytes packed and opened per round, {rounds} rounds");
    let ways = [
        (
            "authcrypt",
            "authcrypt (ECDH-1PU, A256CBC-HS512)",
            Pack::default(),
        ),
        (
            "anon-signed",
            "anoncrypt + ES256K signature",
            Pack {
                auth: false,
                sign: Some(SignWith::Secp256k1),
                ..Pack::default()
            },
        ),
    ];
    for (mode, name, how) in ways {
        std::hint::black_box(ours(&a, &b, n.min(10), how));
        theirs(mode);
        let (mut us, mut them) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            std::hint::black_box(ours(&a, &b, n, how));
            us.push(t.elapsed());
            them.push(theirs(mode));
        }
        let ops = n as u64;
        let c = Comparison::of_rounds(us, them, ops);
        report(name, "didcomm 0.3.2", &c);
    }
    drop(to_peer);
    let _ = peer.wait();
}
