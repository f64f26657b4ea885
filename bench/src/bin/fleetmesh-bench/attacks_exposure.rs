//! The second round of attacks (`fleetmesh-bench attacks`, after the first six): the five
//! holes of the hardening issue that followed it, each replayed as the issue describes it.
//!
//! 7. hostile-pattern: `response_format` patterns `a{1000000000}`, `a{100000000}`,
//!    `(a{1000}){1000}` and `\p{L}{10000}`, four of each at once, unauthenticated; what they
//!    were answered and whether `/healthz` answered meanwhile;
//! 8. didcomm-bodies: 128 concurrent `POST /didcomm` of 4 MiB of `[0,0,…]`;
//! 9. mediator-flood: with `[didcomm] mediate = true`, a victim's message held, then 260
//!    small forwards to the victim's DID from one address and 31 of 2 MiB from another
//!    (real JWEs, anoncrypted by a stranger), a legitimate forward from a third address and
//!    a plaintext forward; how many were held;
//! 10. anonymous-job-read: `GET /v1/jobs/{id}` (`/result`, `/receipt`) without a token or a
//!     signature on a node without a token, directly and through a proxy's
//!     `X-Forwarded-For`;
//! 11. torn-evidence: the evidence log cut mid-line, the node restarted, stopped, and the
//!     log replayed.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::json;

use super::attacks::{Peak, mib, row, rss_kib, run_in, start, stop};

/// `method path` with `headers` and `body` on a fresh connection: the status code (0 when
/// the node closed the connection without an answer).
fn request(addr: &str, head: &str, body: &[u8]) -> u16 {
    match TcpStream::connect(addr) {
        Ok(s) => exchange(s, head, body),
        Err(_) => 0,
    }
}

/// Sends `head` (the request line and headers, without `Host`, `Connection` and
/// `Content-Length`) and `body` on `s`: the answer's status code, 0 without one.
fn exchange(mut s: TcpStream, head: &str, body: &[u8]) -> u16 {
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let head = format!(
        "{head}\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    // the node may answer (and close) before it reads the whole body
    let _ = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Runs `n` copies of `f` on threads at once; their answers.
fn at_once(n: usize, f: impl Fn(usize) -> u16 + Send + Sync) -> Vec<u16> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..n).map(|i| s.spawn(move || f(i))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    })
}

/// How many of `codes` are each code, as `400×12, 503×4`.
fn tally(codes: &[u16]) -> String {
    let mut seen = std::collections::BTreeMap::new();
    for c in codes {
        *seen.entry(*c).or_insert(0) += 1;
    }
    seen.iter()
        .map(|(c, n)| format!("{c}×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs attacks 7–11 with `bin`.
pub fn run(bin: &Path) {
    hostile_patterns(bin);
    didcomm_bodies(bin);
    mediator_flood(bin);
    anonymous_job_reads(bin);
    torn_evidence(bin);
}

fn hostile_patterns(bin: &Path) {
    let models = tempfile::tempdir().unwrap();
    let dir = models.path().join("tiny");
    fleetmesh_inference::tiny::make_model(&dir, &fleetmesh_inference::tiny::tiny_config(), 7)
        .unwrap();
    let n = start(bin, &[], &["--model", dir.to_str().unwrap()]);
    let before = mib(rss_kib(n.child.id()));
    let peak = Peak::watch(n.child.id());
    let patterns = [
        "a{1000000000}",
        "a{100000000}",
        "(a{1000}){1000}",
        r"\p{L}{10000}",
    ];
    let health = std::sync::atomic::AtomicU32::new(0);
    let codes = at_once(17, |i| {
        if i == 16 {
            // /healthz while they are compiled
            std::thread::sleep(Duration::from_millis(50));
            let code = request(&n.addr, "GET /healthz HTTP/1.1", b"");
            health.store(u32::from(code), std::sync::atomic::Ordering::Relaxed);
            return code;
        }
        let body = json!({"model": "tiny", "prompt": "x", "max_tokens": 8,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                "schema": {"type": "string", "pattern": patterns[i % 4]}}}});
        request(
            &n.addr,
            "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json",
            body.to_string().as_bytes(),
        )
    });
    let p = peak.mib();
    let health = health.load(std::sync::atomic::Ordering::Relaxed);
    let refused = codes[..16].iter().all(|c| *c == 400);
    row(
        "7 16 completions with hostile `pattern`s at once (4 each of a{10^9}, a{10^8}, (a{1000}){1000}, \\p{L}{10000})",
        before,
        p,
        &format!("{}; /healthz {health} meanwhile", tally(&codes[..16])),
        "all 400; < before + 256 MiB",
        refused && health == 200 && p < before + 256.0,
    );
    stop(n);
}

fn didcomm_bodies(bin: &Path) {
    let n = start(bin, &[], &[]);
    let before = mib(rss_kib(n.child.id()));
    let peak = Peak::watch(n.child.id());
    let count = (4 << 20) / 2 - 8;
    let mut zeros = Vec::with_capacity(2 * count + 2);
    zeros.push(b'[');
    for i in 0..count {
        if i > 0 {
            zeros.push(b',');
        }
        zeros.push(b'0');
    }
    zeros.push(b']');
    let codes = at_once(128, |_| {
        request(
            &n.addr,
            "POST /didcomm HTTP/1.1\r\nContent-Type: application/didcomm-encrypted+json",
            &zeros,
        )
    });
    let health = request(&n.addr, "GET /healthz HTTP/1.1", b"");
    let p = peak.mib();
    row(
        "8 128 concurrent POST /didcomm of 4 MiB `[0,0,…]`",
        before,
        p,
        &format!("{}; then /healthz {health}", tally(&codes)),
        "400 or 503; < before + 300 MiB",
        codes.iter().all(|c| [400, 503].contains(c)) && health == 200 && p < before + 300.0,
    );
    stop(n);
}

fn anonymous_job_reads(bin: &Path) {
    let n = start(bin, &[], &[]);
    let before = mib(rss_kib(n.child.id()));
    let id = "ab".repeat(32);
    let mut codes = Vec::new();
    for path in ["", "/result", "/receipt"] {
        for via in ["", "\r\nX-Forwarded-For: 203.0.113.7"] {
            codes.push(request(
                &n.addr,
                &format!("GET /v1/jobs/{id}{path} HTTP/1.1{via}"),
                b"",
            ));
        }
    }
    row(
        "10 anonymous GET /v1/jobs/{id} (/result, /receipt) on a node without a token, direct and with X-Forwarded-For",
        before,
        mib(rss_kib(n.child.id())),
        &tally(&codes),
        "all 401",
        codes.iter().all(|c| *c == 401),
    );
    stop(n);
}

fn torn_evidence(bin: &Path) {
    let mut n = start(bin, &[], &[]);
    let (dir, _keep) = (n.node.clone(), n.take_dir());
    let log = dir.join("ledger").join("evidence.jsonl");
    let before = mib(rss_kib(n.child.id()));
    stop(n);
    let len = std::fs::metadata(&log).map_or(0, |m| m.len());
    let outcome = if len < 8 {
        "no evidence log was written".to_owned()
    } else {
        let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        f.set_len(len - 5).unwrap();
        drop(f);
        stop(run_in(bin, &dir, &[]));
        let replay = Command::new(bin)
            .args(["ledger", "replay", log.to_str().unwrap()])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&replay.stdout);
        let torn = std::fs::read_dir(dir.join("ledger"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().contains(".torn-"))
                    .count()
            })
            .unwrap_or(0);
        format!(
            "replay exit {}; {torn} torn tail moved aside; replay says: {}",
            replay.status.code().unwrap_or(-1),
            out.lines()
                .find(|l| l.contains("cut"))
                .unwrap_or("(no cut named)")
        )
    };
    let ok = outcome.starts_with("replay exit 0; 1 torn") && !outcome.ends_with("(no cut named)");
    row(
        "11 evidence.jsonl cut mid-line, node restarted, log replayed",
        before,
        before,
        &outcome,
        "replay succeeds naming the cut",
        ok,
    );
}

/// `POST /didcomm` of `body` to `addr` from the client address `from` (a loopback
/// address of its own): the status code.
fn post_from(from: &str, addr: &str, body: &[u8]) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Ok(stream) = rt.block_on(async {
        let s = tokio::net::TcpSocket::new_v4()?;
        s.bind(format!("{from}:0").parse().unwrap())?;
        s.connect(addr.parse().unwrap()).await
    }) else {
        return 0;
    };
    let Ok(s) = stream.into_std() else {
        return 0;
    };
    let _ = s.set_nonblocking(false);
    exchange(
        s,
        "POST /didcomm HTTP/1.1\r\nContent-Type: application/didcomm-encrypted+json",
        body,
    )
}

fn mediator_flood(bin: &Path) {
    use fleetmesh_proto::didcomm::{self, Message, Pack, PeerDoc, forward};
    let n = start(bin, &[("mediate = false", "mediate = true")], &[]);
    let before = mib(rss_kib(n.child.id()));
    let peak = Peak::watch(n.child.id());
    // the mediator's document, and a victim's: a DID whose messages it holds
    let m_doc = get_json(&n.addr, "/.well-known/did.json");
    let m_doc = PeerDoc::parse(&m_doc).expect("the mediator's DID document");
    let m_did = m_doc.did.clone();
    let victim = tempfile::tempdir().unwrap();
    let v_dir = victim.path().join("v");
    assert!(
        Command::new(bin)
            .args(["init", v_dir.to_str().unwrap()])
            .output()
            .unwrap()
            .status
            .success()
    );
    let shown = Command::new(bin)
        .args(["did", "show", v_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let v_doc = PeerDoc::parse(&serde_json::from_slice(&shown.stdout).unwrap()).unwrap();
    let stranger = fleetmesh_proto::NodeKeys::generate().unwrap();
    let sealed = |n: usize| {
        let mut msg = Message::new(
            "https://didcomm.org/basicmessage/2.0/message",
            json!({ "content": "x".repeat(n) }),
        )
        .unwrap();
        msg.to = vec![v_doc.did.clone()];
        let anon = Pack {
            auth: false,
            ..Pack::default()
        };
        didcomm::pack_encrypted(&msg, &stranger, &v_doc, anon).unwrap()
    };
    let routing = format!("{m_did}#x25519");
    let to_victim = |item: &serde_json::Value| {
        forward(item, &v_doc.did, &m_doc, &routing)
            .unwrap()
            .to_string()
            .into_bytes()
    };
    // the victim's real message, from its own sender's address
    let first = post_from("127.0.0.5", &n.addr, &to_victim(&sealed(100)));
    // 260 small forwards from one address, then 31 of 2 MiB from another
    let small = to_victim(&sealed(10));
    let flood: Vec<u16> = (0..260)
        .map(|_| post_from("127.0.0.1", &n.addr, &small))
        .collect();
    let big = to_victim(&sealed(1_400_000));
    let heavy: Vec<u16> = (0..31)
        .map(|_| post_from("127.0.0.3", &n.addr, &big))
        .collect();
    // a legitimate sender elsewhere; a plaintext forward
    let other = post_from("127.0.0.2", &n.addr, &to_victim(&sealed(2000)));
    let plain = json!({"id": "p1", "type": didcomm::FORWARD, "body": {"next": v_doc.did},
        "attachments": [{"data": {"json": {"content": "plaintext"}}}]});
    let plain = post_from("127.0.0.4", &n.addr, plain.to_string().as_bytes());
    let p = peak.mib();
    let held = |c: &[u16]| c.iter().filter(|c| **c == 202).count();
    row(
        "9 mediator: 260 small forwards to one DID from one address, 31 of 2 MiB from another, a plaintext forward",
        before,
        p,
        &format!(
            "the victim's first: {first}; small flood {} held ({}); big flood {} held ({}); another address: {other}; plaintext: {plain}",
            held(&flood),
            tally(&flood),
            held(&heavy),
            tally(&heavy)
        ),
        "victim's and another's held; each flood stops at its source's quota; plaintext 400",
        first == 202 && other == 202 && plain == 400 && held(&flood) < 260 && held(&heavy) < 31,
    );
    stop(n);
}

/// `GET path` of the node at `addr`, its body as JSON.
fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
}
