//! The node against a stranger on the internet: silent and slow sockets, too many
//! connections, a stop with clients hanging on, browser pages on other sites, missing
//! tokens, settings that used to panic later, and directories others can write to.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use super::*;

/// A fresh node with `edits` to its config.
fn node_with(edits: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("n");
    assert!(init(&node, &[]).status.success());
    edit_config(&node, edits);
    dir
}

fn node_dir(d: &tempfile::TempDir) -> PathBuf {
    d.path().join("n")
}

/// `meshnode run` on the node of `d`, on an ephemeral port, not started yet.
fn run_cmd(d: &tempfile::TempDir) -> Command {
    let mut cmd = meshnode();
    cmd.args([
        "run",
        node_dir(d).to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    cmd
}

/// `meshnode run` on the node of `d`, to its end (for start-ups that must fail).
fn run_dir(d: &tempfile::TempDir) -> Output {
    run_cmd(d).output().expect("meshnode runs")
}

/// Whether the server closes `s` within `secs` (reads EOF or a reset).
fn closed_within(s: &mut TcpStream, secs: u64) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a response (e.g. 408) before the close
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn silent_and_half_sent_requests_are_closed_and_connection_caps_hold() {
    let dir = node_with(&[("header_timeout_secs = 10", "header_timeout_secs = 1")]);
    let d = run_node(&node_dir(&dir));
    let addr = d.addr.clone();
    // a socket that sends nothing, and one that never finishes its request head
    let mut silent = TcpStream::connect(&addr).unwrap();
    let mut half = TcpStream::connect(&addr).unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    assert!(closed_within(&mut silent, 5), "a silent socket is closed");
    assert!(closed_within(&mut half, 5), "a half-sent head is closed");
    drop(d);
    // four from one address are served; a fifth is closed at once (the head timeout is
    // the default 10 s here, so within 5 s only the cap can close it). Loopback is exempt
    // by default (a reverse proxy's clients all arrive from it): not here.
    let exempt = "per_ip_exempt = [\n    \"127.0.0.1\",\n    \"::1\",\n]";
    let dir = node_with(&[
        ("max_connections_per_ip = 64", "max_connections_per_ip = 4"),
        (exempt, "per_ip_exempt = []"),
    ]);
    let d = run_node(&node_dir(&dir));
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(&d.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = TcpStream::connect(&d.addr).unwrap();
    assert!(closed_within(&mut fifth, 5), "the fifth is closed");
    // the four are still served
    held[0]
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    held[0].read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // once they go, others get in
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    runtime().block_on(async {
        assert_eq!(status(&http_client(), d.url("/healthz")).await, 200);
    });
    drop(d);
    // with the default exemption, a proxy on loopback holds more than the per-IP cap
    let dir = node_with(&[("max_connections_per_ip = 64", "max_connections_per_ip = 4")]);
    let d = run_node(&node_dir(&dir));
    let held: Vec<TcpStream> = (0..6)
        .map(|_| TcpStream::connect(&d.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for mut s in held {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

#[test]
fn stop_has_a_deadline_with_clients_hanging_on_and_commits_queued_events() {
    let dir = node_with(&[("shutdown_secs = 10", "shutdown_secs = 1")]);
    let node = node_dir(&dir);
    let d = run_node(&node);
    // an idle keep-alive HTTP connection and an idle WebSocket that never reads
    let mut keep = TcpStream::connect(&d.addr).unwrap();
    keep.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let ev = keys
        .sign(fleetmesh_proto::UnsignedEvent {
            created_at: 1_700_000_000,
            kind: 1,
            tags: vec![],
            content: "kept".into(),
        })
        .unwrap();
    let ws_url = format!("ws://{}/", d.addr);
    let rt = runtime();
    let _ws = rt.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(&ws_url).await.unwrap();
        ws.send(WsMessage::Text(
            format!("[\"EVENT\",{}]", ev.to_json()).into(),
        ))
        .await
        .unwrap();
        let ok = next_json(&mut ws).await;
        assert_eq!(ok[2], true, "{ok}");
        ws
    });
    let t = Instant::now();
    assert!(d.stop("-TERM").success());
    assert!(
        t.elapsed() < Duration::from_secs(8),
        "stopped in {:?}",
        t.elapsed()
    );
    // the event is there after a restart
    let d2 = run_node(&node);
    let got = rt.block_on(req_events(
        &format!("ws://{}/", d2.addr),
        serde_json::json!({"ids": [ev.id_hex()]}),
    ));
    assert_eq!(got.len(), 1);
}

#[test]
fn settings_out_of_range_and_open_directories_stop_the_node_naming_them() {
    for (from, to, says) in [
        (
            "max_limit = 500",
            "max_limit = 9223372036854775807",
            "[relay] max_limit",
        ),
        (
            "max_queued_bytes = 4194304",
            "max_queued_bytes = 10",
            "[relay] max_queued_bytes",
        ),
        (
            "events_per_second = 500.0",
            "events_per_second = nan",
            "[relay] events_per_second",
        ),
        (
            "max_connections = 512",
            "max_connections = 0",
            "[face] max_connections",
        ),
        (
            "header_timeout_secs = 10",
            "header_timeout_secs = 0",
            "[face] header_timeout_secs",
        ),
        ("max_batch = 8", "max_batch = 0", "[inference] max_batch"),
    ] {
        let dir = node_with(&[(from, to)]);
        let o = run_dir(&dir);
        assert_usage_error(&o, says);
    }
    // a node directory others may write to, a key directory others may enter
    for (sub, m) in [("", 0o777), ("", 0o720), ("keys", 0o755)] {
        let dir = node_with(&[]);
        let p = node_dir(&dir).join(sub);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(m)).unwrap();
        let o = run_dir(&dir);
        assert_usage_error(&o, &format!("mode {m:04o}"));
    }
    // a public address needs a token
    let dir = node_with(&[]);
    let o = run(&[
        "run",
        node_dir(&dir).to_str().unwrap(),
        "--listen",
        "0.0.0.0:0",
    ]);
    assert_usage_error(&o, "[api] token");
}

/// POSTs `body` to `url` with `headers`; the status and the answer's headers and body.
async fn post(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut r = http.post(url).body(body.to_owned());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let r = r.send().await.unwrap();
    let (s, h) = (r.status().as_u16(), r.headers().clone());
    (s, h, r.text().await.unwrap())
}

#[test]
fn web_pages_on_other_sites_cannot_drive_the_apis_and_tokens_are_checked_first() {
    let dir = node_with(&[
        (
            "allowed_origins = []",
            "allowed_origins = [\"https://app.example\"]\ntoken = \"t0ken-of-the-operator\"",
        ),
        (
            "websocket_origins = [\"*\"]",
            "websocket_origins = [\"https://nostr.example\"]",
        ),
    ]);
    let d = run_node(&node_dir(&dir));
    let fixtures = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("../prover/tests/fixtures/circom");
    let read = |f: &str| std::fs::read_to_string(fixtures.join(f)).unwrap();
    let body = format!(
        "{{\"vk\": {}, \"proof\": {}, \"public\": {}}}",
        read("tiny_vk.json"),
        read("tiny_proof.json"),
        read("tiny_public.json")
    );
    let auth = ("authorization", "Bearer t0ken-of-the-operator");
    let json = ("content-type", "application/json");
    runtime().block_on(async {
        let http = http_client();
        let url = d.url("/v1/proofs/verify");
        for (headers, want, code) in [
            // the attack as found: another site, a "simple" content type, no preflight
            (
                vec![
                    ("origin", "http://evil.example"),
                    ("content-type", "text/plain"),
                    auth,
                ],
                403,
                "cross_site",
            ),
            (
                vec![("sec-fetch-site", "cross-site"), json, auth],
                403,
                "cross_site",
            ),
            (vec![("origin", "null"), json, auth], 403, "cross_site"),
            // not JSON
            (
                vec![("content-type", "text/plain"), auth],
                415,
                "unsupported_media_type",
            ),
            (vec![auth], 415, "unsupported_media_type"),
            // no token, a wrong one
            (vec![json], 401, "unauthorized"),
            (
                vec![json, ("authorization", "Bearer nope")],
                401,
                "unauthorized",
            ),
        ] {
            let (status, h, text) = post(&http, &url, &headers, &body).await;
            assert_eq!(status, want, "{headers:?}: {text}");
            assert!(text.contains(code), "{headers:?}: {text}");
            if want == 401 {
                assert!(h.get("www-authenticate").is_some());
            }
        }
        // the node's own origin, an allowed one (with CORS headers), and a plain client
        for extra in [vec![], vec![("origin", "https://app.example")]] {
            let own = format!("http://{}", d.addr);
            let mut headers = vec![json, auth];
            headers.extend(extra.iter().copied());
            if extra.is_empty() {
                headers.push(("origin", own.as_str()));
            }
            let (status, h, text) = post(&http, &url, &headers, &body).await;
            assert_eq!(status, 200, "{headers:?}: {text}");
            assert!(text.contains("\"valid\":true"), "{text}");
            if !extra.is_empty() {
                assert_eq!(h["access-control-allow-origin"], "https://app.example");
            }
        }
        // preflights: answered for the allowed origin only
        let pre = |origin: &'static str| {
            http.request(reqwest::Method::OPTIONS, d.url("/v1/completions"))
                .header("origin", origin)
                .header("access-control-request-method", "POST")
                .send()
        };
        let ok = pre("https://app.example").await.unwrap();
        assert_eq!(ok.status().as_u16(), 204);
        assert_eq!(
            ok.headers()["access-control-allow-origin"],
            "https://app.example"
        );
        assert_eq!(
            pre("http://evil.example").await.unwrap().status().as_u16(),
            403
        );
        // every state-changing API is behind the same guard
        for path in [
            "/v1/completions",
            "/v1/chat/completions",
            "/v1/proofs/prove",
            "/v1/jobs",
        ] {
            let (status, _, text) = post(
                &http,
                &d.url(path),
                &[
                    ("origin", "http://evil.example"),
                    ("content-type", "text/plain"),
                ],
                "{}",
            )
            .await;
            assert_eq!(status, 403, "{path}: {text}");
        }
    });
    // the relay's WebSocket: browsers from the listed origins, and clients without Origin
    runtime().block_on(async {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let ws = format!("ws://{}/", d.addr);
        let with = |origin: &str| {
            let mut r = ws.as_str().into_client_request().unwrap();
            r.headers_mut().insert("origin", origin.parse().unwrap());
            r
        };
        assert!(
            tokio_tungstenite::connect_async(with("https://nostr.example"))
                .await
                .is_ok()
        );
        assert!(tokio_tungstenite::connect_async(ws.as_str()).await.is_ok());
        let refused = tokio_tungstenite::connect_async(with("http://evil.example")).await;
        match refused {
            Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
                assert_eq!(r.status().as_u16(), 403)
            }
            other => panic!("expected 403, got {:?}", other.map(|_| ())),
        }
    });
}

/// A model slow enough that a long generation is still running when its client leaves:
/// the tiny shape, wider, with a 4096-token context.
fn slow_model(dir: &Path) {
    let c = fleetmesh_inference::LlamaConfig {
        hidden_size: 256,
        intermediate_size: 688,
        num_hidden_layers: 4,
        max_position_embeddings: 4096,
        ..fleetmesh_inference::tiny::tiny_config()
    };
    fleetmesh_inference::tiny::make_model(dir, &c, 5).unwrap();
}

fn daemon_pid_threads(d: &Daemon) -> usize {
    std::fs::read_dir(format!("/proc/{}/task", d.child.id()))
        .unwrap()
        .count()
}

#[test]
fn generations_stop_when_their_clients_leave_and_the_queue_is_bounded() {
    let models = tempfile::tempdir().unwrap();
    let slow = models.path().join("slow");
    slow_model(&slow);
    let dir = node_with(&[("max_queue = 64", "max_queue = 8")]);
    let mut cmd = run_cmd(&dir);
    cmd.args(["--model", slow.to_str().unwrap()]);
    let d = Daemon::start(cmd);
    let long =
        serde_json::json!({"model": "slow", "prompt": "x", "max_tokens": 4000, "ignore_eos": true});
    let stats = |http: reqwest::Client, url: String| async move {
        let v = get_json(&http, url).await;
        let f = v["data"][0]["fleetmesh"].clone();
        (
            f["requests_in_flight"].as_u64().unwrap(),
            f["tokens_generated"].as_u64().unwrap(),
        )
    };
    runtime().block_on(async {
        let http = http_client();
        let models_url = d.url("/v1/models");
        let threads_before = daemon_pid_threads(&d);
        // six clients send a long generation each and leave without reading the answer
        let mut raw = Vec::new();
        for _ in 0..6 {
            let mut s = tokio::net::TcpStream::connect(&d.addr).await.unwrap();
            let body = long.to_string();
            let req = format!("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
            tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes()).await.unwrap();
            raw.push(s);
        }
        for _ in 0..200 {
            if stats(http.clone(), models_url.clone()).await.0 == 6 { break; }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(stats(http.clone(), models_url.clone()).await.0, 6, "all six admitted");
        // waiting requests hold no thread each
        assert!(daemon_pid_threads(&d) <= threads_before + 4, "{} threads, {threads_before} before", daemon_pid_threads(&d));
        // two more fill the queue of 8; a ninth is turned away with Retry-After
        let mut streams = Vec::new();
        for _ in 0..2 {
            let mut b = long.clone();
            b["stream"] = true.into();
            let r = http.post(d.url("/v1/completions")).header("content-type", "application/json")
                .body(b.to_string()).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            streams.push(r);
        }
        let r = http.post(d.url("/v1/completions")).header("content-type", "application/json")
            .body(long.to_string()).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 503);
        assert_eq!(r.headers()["retry-after"], "1");
        // every client leaves; every generation stops well short of its 4000 tokens
        drop(raw);
        drop(streams);
        let mut last = (u64::MAX, 0);
        for _ in 0..600 {
            last = stats(http.clone(), models_url.clone()).await;
            if last.0 == 0 { break; }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(last.0, 0, "nothing in flight once the clients left");
        assert!(last.1 < 8 * 4000, "{} tokens generated for 8 abandoned requests of 4000", last.1);
        // and a normal request is answered
        let (status, r) = post_json(&http, &d.url("/v1/completions"),
            serde_json::json!({"model": "slow", "prompt": "hi", "max_tokens": 4})).await;
        assert_eq!(status, 200, "{r}");
    });
}

/// `n` signed kind-1 events published to the node at `addr` (each acknowledged).
fn publish_many(addr: &str, n: u64) -> Vec<String> {
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    runtime().block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/"))
            .await
            .unwrap();
        let mut ids = Vec::new();
        for i in 0..n {
            let ev = keys
                .sign(fleetmesh_proto::UnsignedEvent {
                    created_at: 1_700_000_000 + i,
                    kind: 1,
                    tags: vec![vec!["t".into(), format!("tag{i}")]],
                    content: format!("event {i} {}", "x".repeat(200)),
                })
                .unwrap();
            ws.send(WsMessage::Text(
                format!("[\"EVENT\",{}]", ev.to_json()).into(),
            ))
            .await
            .unwrap();
            let ok = next_json(&mut ws).await;
            ids.push(ok[3].as_str().unwrap_or_default().to_owned());
            assert_eq!(ok[0], "OK");
        }
        ids
    })
}

#[test]
fn damaged_stores_are_refused_never_recreated_and_store_errors_turn_health_red() {
    // an empty event store: refused, left as it is
    let dir = node_with(&[]);
    let db = node_dir(&dir).join("fleetmesh.db");
    std::fs::write(&db, b"").unwrap();
    let o = run_dir(&dir);
    assert_usage_error(&o, "fleetmesh.db");
    assert!(stderr(&o).contains("empty"), "{}", stderr(&o));
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "not recreated");
    // not a database at all
    std::fs::write(&db, vec![7u8; 4096]).unwrap();
    let o = run_dir(&dir);
    assert_usage_error(&o, "not a SQLite database");

    // 64 KiB of random bytes in the middle of a store that holds events
    let dir = node_with(&[]);
    let node = node_dir(&dir);
    let d = run_node(&node);
    publish_many(&d.addr, 600);
    assert!(d.stop("-TERM").success());
    let db = node.join("fleetmesh.db");
    let mut bytes = std::fs::read(&db).unwrap();
    assert!(bytes.len() > 200 << 10, "{} bytes", bytes.len());
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in &mut bytes[64 << 10..128 << 10] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(&db, &bytes).unwrap();
    let o = run(&["run", node.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert_usage_error(&o, "fleetmesh.db");
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "left as it was");

    // the job store too
    let dir = node_with(&[]);
    let jobs = node_dir(&dir).join("jobs.sqlite");
    std::fs::write(&jobs, b"").unwrap();
    let o = run_dir(&dir);
    assert_usage_error(&o, "jobs.sqlite");

    // a store that fails while the node runs: the event is refused with `error:` and
    // /healthz says 503 with the reason
    let dir = node_with(&[]);
    let d = run_node(&node_dir(&dir));
    runtime().block_on(async {
        assert_eq!(status(&http_client(), d.url("/healthz")).await, 200);
    });
    let conn = rusqlite::Connection::open(node_dir(&dir).join("fleetmesh.db")).unwrap();
    conn.execute_batch("DROP TABLE tags").unwrap();
    drop(conn);
    let said = publish_many(&d.addr, 1);
    assert!(said[0].starts_with("error:"), "{said:?}");
    runtime().block_on(async {
        let http = http_client();
        let r = http.get(d.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 503);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["status"], "degraded", "{v}");
        assert!(
            v["store"]["last_error"].as_str().unwrap().contains("tags"),
            "{v}"
        );
        let metrics = http
            .get(d.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            metrics.contains("fleetmesh_relay_store_errors_total 1"),
            "{metrics}"
        );
    });
}

#[test]
fn silent_sockets_past_the_file_limit_do_not_lock_other_clients_out() {
    let dir = node_with(&[("header_timeout_secs = 10", "header_timeout_secs = 1")]);
    // the node with 64 file descriptors: the silent sockets below exhaust them
    let node = node_dir(&dir);
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!(
            "ulimit -n 64 && exec {} run {} --listen 127.0.0.1:0",
            env!("CARGO_BIN_EXE_meshnode"),
            node.display()
        ),
    ])
    .env_remove("MESHNODE_HOME")
    .env("MESHNODE_LOG", "warn");
    let d = Daemon::start(cmd);
    let silent: Vec<TcpStream> = (0..120)
        .filter_map(|_| TcpStream::connect(&d.addr).ok())
        .collect();
    assert!(silent.len() > 64, "{} connected", silent.len());
    // they are closed by the head timeout as they are accepted; then anyone gets in
    std::thread::sleep(Duration::from_secs(4));
    let mut fresh = TcpStream::connect(&d.addr).unwrap();
    fresh
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    fresh
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    fresh.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop(silent);
}

#[test]
fn a_flood_of_refused_events_is_summarised_not_logged_line_by_line() {
    let dir = node_with(&[
        ("events_per_second = 500.0", "events_per_second = 1.0"),
        ("event_burst = 1000.0", "event_burst = 1.0"),
    ]);
    let mut cmd = run_cmd(&dir);
    cmd.env("MESHNODE_LOG", "info");
    let mut d = Daemon::start(cmd);
    let mut err = d.child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let said = publish_many(&d.addr, 200);
    let limited = said
        .iter()
        .filter(|m| m.starts_with("rate-limited:"))
        .count();
    assert!(limited > 150, "{limited} of 200 were rate-limited");
    assert!(d.stop("-TERM").success());
    let log = log.join().unwrap();
    let lines = log.lines().filter(|l| l.contains("rate-limited")).count();
    assert!(
        lines <= 1,
        "{lines} log lines for {limited} refusals:\n{log}"
    );
}
