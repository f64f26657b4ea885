//! The holes of the last attack round, each as a stranger used it: a `pattern` that ate the
//! machine, DIDComm bodies without a node-wide budget, anonymous job reads on a node without
//! a token (also through a proxy on the box), an ask expired before it was sent and a
//! control request past the socket's limit. Memory is the daemon's own VmRSS, sampled while
//! the attack runs (never a time).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::inference::make_tiny;
use super::jobs::{job, wait_final};
use super::*;
use serde_json::json;

/// The daemon's resident memory, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The daemon's peak VmRSS while it runs, sampled every 20 ms on a thread.
struct Peak {
    stop: Arc<AtomicBool>,
    sampler: std::thread::JoinHandle<u64>,
}

impl Peak {
    fn watch(d: &Daemon) -> Peak {
        let (stop, pid) = (Arc::new(AtomicBool::new(false)), d.child.id());
        let flag = stop.clone();
        let sampler = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(rss_kib(pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        Peak { stop, sampler }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.sampler.join().unwrap()
    }
}

#[test]
fn hostile_patterns_are_refused_with_400_in_bounded_memory() {
    let models = tempfile::tempdir().unwrap();
    let tiny = models.path().join("tiny");
    make_tiny(&tiny, 7);
    let (_node, d) = super::inference::serve(&[&tiny], "");
    let before = rss_kib(d.child.id());
    let peak = Peak::watch(&d);
    let long = "a".repeat(1 << 20);
    let hostile: Vec<(&str, &str)> = vec![
        ("a{1000000000}", "counted repetition of 1000000000"),
        ("a{100000000}", "counted repetition of 100000000"),
        (
            "(a{1000}){1000}",
            "cannot be compiled to an automaton within",
        ),
        (r"\p{L}{10000}", "counted repetition of 10000"),
        (r"(a)\1", "cannot be compiled"),
        (r"(?<n>a)\k<n>", "cannot be compiled"),
        (&long, "past the bound of 4096"),
    ];
    runtime().block_on(async {
        let http = http_client();
        let url = d.url("/v1/completions");
        // all at once, twice over, unauthenticated (a node without a token)
        let mut asks = Vec::new();
        for (pattern, says) in hostile.iter().chain(hostile.iter()) {
            let body = json!({"model": "tiny", "prompt": "x", "max_tokens": 8,
                "response_format": {"type": "json_schema", "json_schema": {"name": "x",
                    "schema": {"type": "string", "pattern": pattern}}}});
            let (http, url, says) = (http.clone(), url.clone(), says.to_string());
            asks.push(tokio::spawn(async move {
                let (status, r) = post_json(&http, &url, body).await;
                (status, r, says)
            }));
        }
        for a in asks {
            let (status, r, says) = a.await.unwrap();
            assert_eq!(status, 400, "{r}");
            assert_eq!(r["error"]["code"], "unsupported_schema", "{r}");
            let message = r["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("`pattern`") && message.contains(&says),
                "{r}"
            );
        }
        // the node still serves, a schema within the bounds too
        assert_eq!(status(&http, d.url("/healthz")).await, 200);
        let (status, r) = post_json(
            &http,
            &url,
            json!({"model": "tiny", "prompt": "x",
            "max_tokens": 8, "response_format": {"type": "json_schema", "json_schema": {
                "name": "x", "schema": {"type": "string", "pattern": "^[a-z]{2}$"}}}}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let text = r["choices"][0]["text"].as_str().unwrap().trim();
        assert!(text.len() == 4 && text.starts_with('"'), "{text}");
    });
    let peak = peak.stop();
    eprintln!("hostile patterns: RSS {before} KiB before, {peak} KiB at the peak");
    // the unbounded compiler reached 6.2 GiB on `a{100000000}` alone within 4 s
    assert!(
        peak < before + 256 * 1024,
        "RSS {before} KiB before, {peak} KiB at the peak"
    );
}

#[test]
fn request_bodies_share_one_node_wide_budget() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let d = run_node(dir.path());
    let before = rss_kib(d.child.id());
    let peak = Peak::watch(&d);
    // 4 MiB less a little of `[0,0,…]`: JSON, but no DIDComm message
    let zeros: &'static [u8] = {
        let n = (4 << 20) / 2 - 8;
        let mut b = Vec::with_capacity(2 * n + 2);
        b.push(b'[');
        for i in 0..n {
            if i > 0 {
                b.push(b',');
            }
            b.push(b'0');
        }
        b.push(b']');
        Box::leak(b.into_boxed_slice())
    };
    runtime().block_on(async {
        let http = http_client();
        let url = d.url("/didcomm");
        let posts: Vec<_> = (0..128)
            .map(|_| {
                let (http, url, body) = (http.clone(), url.clone(), zeros);
                tokio::spawn(async move {
                    let r = http
                        .post(url)
                        .header("content-type", "application/didcomm-encrypted+json")
                        .body(body)
                        .send()
                        .await
                        .unwrap();
                    (r.status().as_u16(), r.headers().contains_key("retry-after"))
                })
            })
            .collect();
        let mut seen = std::collections::BTreeMap::new();
        for p in posts {
            let (status, retry) = p.await.unwrap();
            assert!(status == 400 || (status == 503 && retry), "{status}");
            *seen.entry(status).or_insert(0) += 1;
        }
        eprintln!("128 posts of 4 MiB: {seen:?}");
        // a normal request still answers
        assert_eq!(status(&http, d.url("/healthz")).await, 200);
        let r = http
            .post(d.url("/didcomm"))
            .header("content-type", "application/didcomm-encrypted+json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400);
    });
    let peak = peak.stop();
    eprintln!("4 MiB bodies: RSS {before} KiB before, {peak} KiB at the peak");
    // every body held and parsed at once reached 2 170 MiB
    assert!(
        peak < before + 300 * 1024,
        "RSS {before} KiB before, {peak} KiB at the peak"
    );
}

/// Status of an anonymous `GET url` with `headers`.
async fn anonymous_get(http: &reqwest::Client, url: String, headers: &[(&str, &str)]) -> u16 {
    let mut r = http.get(url);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap().status().as_u16()
}

#[test]
fn anonymous_clients_are_never_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("n");
    assert!(init(&node, &[]).status.success());
    let work = tempfile::tempdir().unwrap();
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    let file = upper_job(work.path(), "hello", "upper-anon");
    let d = run_node(&node);
    let (o, v) = job(&["submit", file.to_str().unwrap()], &d, buyer.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let id = v["job"].as_str().unwrap().to_owned();
    // the buyer reads its job by NIP-98
    let (code, st) = wait_final(&id, &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
    let routes =
        |d: &Daemon| ["", "/result", "/receipt"].map(|p| d.url(&format!("/v1/jobs/{id}{p}")));
    let proxied: &[&[(&str, &str)]] = &[
        &[("x-forwarded-for", "203.0.113.7")],
        &[("forwarded", "for=203.0.113.7")],
        &[("x-real-ip", "203.0.113.7")],
    ];
    runtime().block_on(async {
        let http = http_client();
        // a node without a token, a reverse proxy possible on loopback (the default
        // per_ip_exempt): nobody is the operator
        for url in routes(&d) {
            assert_eq!(anonymous_get(&http, url.clone(), &[]).await, 401, "{url}");
            for h in proxied {
                assert_eq!(
                    anonymous_get(&http, url.clone(), h).await,
                    401,
                    "{url} {h:?}"
                );
            }
        }
        // anyone who reaches it may still compute
        let (status, r) = post_json(&http, &d.url("/v1/proofs/verify"), json!({})).await;
        assert_eq!(status, 400, "{r}");
    });
    drop(d);
    // no proxy in front (per_ip_exempt = []): a loopback client is the operator, unless a
    // proxy header says it passes another's request on
    edit_config(&node, &[NO_PROXY]);
    let d = run_node(&node);
    runtime().block_on(async {
        let http = http_client();
        for url in routes(&d) {
            assert_eq!(anonymous_get(&http, url.clone(), &[]).await, 200, "{url}");
            for h in proxied {
                assert_eq!(
                    anonymous_get(&http, url.clone(), h).await,
                    401,
                    "{url} {h:?}"
                );
            }
        }
    });
    // an ask that has expired before it is sent is refused
    let spec: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let mut expired = spec.clone();
    expired["expires_in"] = json!(-100);
    expired["name"] = json!("upper-expired");
    let late = work.path().join("expired.json");
    std::fs::write(&late, expired.to_string()).unwrap();
    let (o, _) = job(&["submit", late.to_str().unwrap()], &d, buyer.path());
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("expired"), "{}", stderr(&o));
}

#[test]
fn a_control_request_past_the_sockets_limit_says_so() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let _d = run_node(dir.path());
    // a 50 MB document
    let doc = dir.path().join("big.json");
    let big = json!({"apiVersion": "fleetmesh.org/v1alpha1", "kind": "MeshNode",
        "metadata": {"name": "big"}, "spec": {"note": "x".repeat(50 << 20)}});
    std::fs::write(&doc, big.to_string()).unwrap();
    let o = run(&[
        "apply",
        dir.path().to_str().unwrap(),
        "-f",
        doc.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("the control socket takes requests of at most 1048576 bytes"),
        "{err}"
    );
    assert!(!err.contains("Broken pipe"), "{err}");
}

#[test]
fn up_with_token_makes_one_and_job_on_the_box_reads_it_from_the_node_home() {
    let home = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut cmd = meshnode();
    cmd.env("MESHNODE_HOME", home.path()).args([
        "up",
        "--token",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]);
    let d = Daemon::start(cmd);
    // on loopback, yet with a token: kept owner-only
    let config = home.path().join("meshnode.toml");
    assert_eq!(mode(&config) & 0o777, 0o600);
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.lines().any(|l| l.starts_with("token = ")), "{text}");
    runtime().block_on(async {
        let (status, r) = post_json(&http_client(), &d.url("/v1/proofs/verify"), json!({})).await;
        assert_eq!(status, 401, "anonymous is nobody here: {r}");
    });
    // a buyer's job, then read by a stranger's key: with the node home's token (the
    // operator, on the box) it is there; elsewhere the stranger's key sees nothing
    let (work, buyer, stranger) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    for k in [&buyer, &stranger] {
        assert!(init(k.path(), &[]).status.success());
    }
    let file = upper_job(work.path(), "hello", "upper-token");
    let (o, v) = job(&["submit", file.to_str().unwrap()], &d, buyer.path());
    assert!(o.status.success(), "{}", stderr(&o));
    let id = v["job"].as_str().unwrap();
    let status = |home: &Path| {
        let mut cmd = meshnode();
        cmd.env("MESHNODE_HOME", home)
            .env_remove("MESHNODE_TOKEN")
            .args([
                "job",
                "status",
                id,
                "--node",
                &url,
                "--key-dir",
                stranger.path().to_str().unwrap(),
            ]);
        cmd.output().unwrap()
    };
    let o = status(home.path());
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap_or(Value::Null);
    assert_eq!(v["id"], id, "the operator sees the job: {}", stdout(&o));
    let elsewhere = tempfile::tempdir().unwrap();
    let o = status(elsewhere.path());
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stdout(&o).contains("not_found"), "{}", stdout(&o));
}

#[test]
fn a_stalled_body_holds_the_budget_only_until_its_time_is_up() {
    use std::io::{Read as _, Write as _};
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    // the smallest budget (one largest body), bodies given 5 s to arrive (past the 2 s a
    // request waits for the budget)
    edit_config(
        dir.path(),
        &[(
            "body_bytes_total = 67108864\nbody_timeout_secs = 30",
            "body_bytes_total = 4194304\nbody_timeout_secs = 5",
        )],
    );
    let d = run_node(dir.path());
    // a stranger declares 4 MiB and sends 1 KiB of it
    let mut stall = std::net::TcpStream::connect(&d.addr).unwrap();
    write!(
        stall,
        "POST /didcomm HTTP/1.1\r\nHost: x\r\nContent-Type: application/didcomm-encrypted+json\r\nContent-Length: 4194304\r\n\r\n"
    )
    .unwrap();
    stall.write_all(&[b' '; 1024]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // meanwhile another client finds the budget spent: 503 with Retry-After
    let _ = rustls::crypto::ring::default_provider().install_default();
    let other = reqwest::blocking::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let post = || {
        other
            .post(d.url("/didcomm"))
            .header("content-type", "application/didcomm-encrypted+json")
            .body("{}")
            .send()
            .unwrap()
    };
    let r = post();
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert!(r.text().unwrap().contains("\"busy\""));
    // the stalled body is cut off (408) and gives its bytes back
    stall
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = vec![0u8; 12];
    stall.read_exact(&mut answer).unwrap();
    assert_eq!(
        &answer,
        b"HTTP/1.1 408",
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert_eq!(post().status().as_u16(), 400, "the budget is free again");
}

/// Sends `head` and then `body` on `s`, and reads the answer's status line and headers.
fn exchange(s: &mut std::net::TcpStream, head: &str, body: &[u8]) -> String {
    use std::io::{Read as _, Write as _};
    s.write_all(head.as_bytes()).unwrap();
    // a refusal may come before the body is sent, and the socket close after it
    let _ = s.write_all(body);
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut byte).unwrap(),
            1,
            "closed before the head: {got:?}"
        );
        got.push(byte[0]);
    }
    let head = String::from_utf8(got).unwrap().to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .map_or(0, |n| n.trim().parse().unwrap());
    let mut rest = vec![0u8; length];
    s.read_exact(&mut rest).unwrap();
    head
}

#[test]
fn a_request_refused_before_its_body_is_read_is_answered_connection_close() {
    use std::io::Read as _;
    let (_dir, d) = super::blossom::node_with(&[]);
    let connect = || {
        let s = std::net::TcpStream::connect(&d.addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s
    };
    let big = vec![b'x'; 256 << 10];
    // refused by Blossom's authorization, before a byte of the body is read
    let mut s = connect();
    let head = exchange(
        &mut s,
        &format!(
            "PUT /upload HTTP/1.1\r\nhost: {}\r\nauthorization: Nostr e30=\r\n\
             content-length: {}\r\n\r\n",
            d.addr,
            big.len()
        ),
        &big,
    );
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    // and the node closes it
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    // refused by the API guard (not JSON), before the body
    let mut s = connect();
    let head = exchange(
        &mut s,
        &format!(
            "POST /v1/proofs/verify HTTP/1.1\r\nhost: {}\r\ncontent-type: text/plain\r\n\
             content-length: {}\r\n\r\n",
            d.addr,
            big.len()
        ),
        &big,
    );
    assert!(head.starts_with("http/1.1 415"), "{head}");
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    // a body that was read keeps the connection: a second request goes on the same one
    let mut s = connect();
    let body = br#"{"circuit": "none-such", "input": {}}"#;
    let ask = format!(
        "POST /v1/proofs/prove HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        d.addr,
        body.len()
    );
    let first = exchange(&mut s, &ask, body);
    assert!(!first.contains("connection: close"), "{first}");
    let second = exchange(&mut s, &ask, body);
    assert!(second.starts_with("http/1.1 4"), "{second}");
}
