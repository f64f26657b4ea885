//! `meshnode run`, `up` and `doctor`: the listener, the relay, signals, durability, sync.

use super::*;

#[test]
fn run_serves_nip11_and_health_and_stops_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert!(
        init(&dir, &["--operator", &"cd".repeat(32)])
            .status
            .success()
    );
    let descriptor: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("descriptor.json")).unwrap())
            .unwrap();
    edit_config(&dir, &[("max_subscriptions = 32", "max_subscriptions = 7")]);
    let daemon = run_node(&dir);

    runtime().block_on(async {
        let http = http_client();
        let r = http
            .get(daemon.url("/"))
            .header("Accept", "application/nostr+json")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "application/nostr+json");
        assert_eq!(r.headers()["access-control-allow-origin"], "*");
        let doc: Value = r.json().await.unwrap();
        assert_eq!(doc["software"], "https://github.com/fleetmesh/fleetmesh");
        assert_eq!(doc["version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(
            doc["supported_nips"],
            serde_json::json!([1, 9, 11, 40, 42, 77])
        );
        // The limits advertised are the configured ones (enforcement is tested in the
        // relay crate's face tests).
        assert_eq!(doc["limitation"]["max_subscriptions"], 7);
        assert_eq!(doc["limitation"]["max_limit"], 500);
        assert_eq!(doc["self"], descriptor["pubkey"]);
        assert_eq!(
            doc["pubkey"],
            "cd".repeat(32),
            "NIP-11 pubkey is the operator"
        );
        assert_eq!(doc["fleetmesh"]["descriptor"], descriptor["id"]);
        assert_eq!(
            doc["fleetmesh"]["protocol_digest"],
            SchemaSet::embedded().digest().to_hex()
        );

        // Without the NIP-11 Accept header: a plain answer, not the document.
        let r = http.get(daemon.url("/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.text().await.unwrap().contains("application/nostr+json"));

        let health: Value = http
            .get(daemon.url("/healthz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(health["status"], "ok");
        assert_eq!(health["pubkey"], descriptor["pubkey"]);
        // no GPU has failed a forward pass
        assert!(health["inference"]["device_fault"].is_null(), "{health}");

        // The relay WebSocket on the same listener: our descriptor is there.
        let url = format!("ws://{}/", daemon.addr);
        let stored = req_events(&url, serde_json::json!({"kinds": [11801]})).await;
        assert_eq!(stored.len(), 1);
        assert_eq!(stored[0]["id"], descriptor["id"]);
        // and its terms (kind 30812): what it sells, by default every engine, free
        let terms = req_events(&url, serde_json::json!({"kinds": [30812]})).await;
        assert_eq!(terms.len(), 1, "{terms:?}");
        assert_eq!(terms[0]["pubkey"], descriptor["pubkey"]);
        let sells: Value = serde_json::from_str(terms[0]["content"].as_str().unwrap()).unwrap();
        assert_eq!(sells["engines"].as_array().unwrap().len(), 5, "{sells}");
        assert_eq!(sells["prices"], serde_json::json!({}), "{sells}");

        let metrics = http.get(daemon.url("/metrics")).send().await.unwrap();
        assert_eq!(metrics.status(), 200);
        let metrics = metrics.text().await.unwrap();
        assert!(metrics.contains("fleetmesh_store_events 2\n"), "{metrics}");
        assert!(
            metrics.contains("fleetmesh_relay_reqs_total 2\n"),
            "{metrics}"
        );
        assert!(
            metrics.contains("# TYPE fleetmesh_relay_events_rejected_total counter"),
            "{metrics}"
        );

        let r = http.get(daemon.url("/no/such/thing")).send().await.unwrap();
        assert_eq!(r.status(), 404);
        let err: Value = r.json().await.unwrap();
        assert_eq!(err["error"]["code"], "not_found");
    });
    // which build runs, and on what
    let m = daemon.scrape();
    let version = ("version", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        m.must("fleetmesh_build_info", &[version, ("profile", "debug")]),
        1.0
    );
    let sample = m
        .parsed
        .samples
        .iter()
        .find(|s| s.metric == "fleetmesh_build_info");
    let labels = &sample.unwrap().labels;
    assert_eq!(labels.get("features"), Some("wgpu+cuda"), "{}", m.text);
    assert!(
        !labels.get("backend").unwrap_or("").is_empty(),
        "{}",
        m.text
    );
    // every described metric with a help text, every one the node has recorded so far typed
    assert!(
        m.text.contains("# HELP fleetmesh_build_info "),
        "{}",
        m.text
    );
    assert!(daemon.stop("-TERM").success(), "SIGTERM exits 0");

    // SIGINT too, and the node reopens with the same identity afterwards.
    let daemon = run_node(&dir);
    assert!(daemon.stop("-INT").success(), "SIGINT exits 0");
}

#[test]
fn run_refuses_a_missing_node_and_exposed_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert_usage_error(&run(&["run", dir.to_str().unwrap()]), "meshnode init");
    assert!(init(&dir, &[]).status.success());
    let key = dir.join("keys/nostr.sec");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_usage_error(
        &run(&["run", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]),
        "chmod 600",
    );
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // A config typo is refused rather than ignored.
    let cfg = dir.join("meshnode.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("[face]", "[face]\nlisten_port = 1")).unwrap();
    assert_usage_error(&run(&["run", dir.to_str().unwrap()]), "listen_port");
    // A device for its models that this build or machine cannot open stops it at start,
    // saying why (without `cuda-inference`: the build; with it, here: the driver).
    crate::inference::make_tiny(&dir.join("tiny"), 3);
    std::fs::write(
        &cfg,
        text.replace("device = \"auto\"", "device = \"cuda:7\"")
            .replace("models = []", "models = [\"tiny\"]"),
    )
    .unwrap();
    let o = run(&["run", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert_usage_error(&o, "device cuda:7: ");
    assert!(
        stderr(&o).contains("no CUDA runtime") || stderr(&o).contains("cannot be loaded"),
        "{}",
        stderr(&o)
    );
    // A port already taken is a clear error.
    std::fs::write(&cfg, &text).unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    assert_usage_error(
        &run(&["run", dir.to_str().unwrap(), "--listen", &addr]),
        &addr,
    );
}

#[test]
fn up_creates_a_node_once_and_reuses_it() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let start = || {
        let mut cmd = meshnode();
        cmd.env("MESHNODE_HOME", &home)
            .args(["up", "--listen", "127.0.0.1:0"]);
        Daemon::start(cmd)
    };
    let first = start();
    assert!(home.join("meshnode.toml").exists());
    let pubkey = |d: &Daemon| -> Value {
        runtime().block_on(async {
            http_client()
                .get(d.url("/healthz"))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()["pubkey"]
                .clone()
        })
    };
    let pk = pubkey(&first);
    assert!(first.stop("-TERM").success());
    let second = start();
    assert_eq!(pubkey(&second), pk, "up reuses the node it made");
    assert!(second.stop("-TERM").success());
}

#[test]
fn doctor_reports_the_box_and_the_digest() {
    let o = run(&["doctor"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let digest = stdout(&run(&["schema", "digest"])).trim().to_owned();
    assert!(
        text.contains(&format!("protocol digest: {digest}")),
        "{text}"
    );
    assert!(text.contains("cpu:"), "{text}");
    assert!(text.contains("cuda:"), "{text}");

    let o = run(&["doctor", "--json"]);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["protocol_digest"], digest);
    assert!(report["cpu"]["threads"].as_u64().unwrap() >= 1);
    // auto says why it chose what it chose, and the prover's operations follow it: here
    // (no CUDA; wgpu, even on hardware, is left alone by auto) everything runs on the CPU
    let reason = report["backend"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("auto:"), "{report}");
    if report["backend"]["backend"] == "cpu" {
        assert!(
            reason.contains("no hardware GPU adapter") || reason.contains("ask for `wgpu`"),
            "{report}"
        );
        for op in ["ntt", "msm_g1", "msm_g2", "verify"] {
            assert_eq!(report["prover"][op], "cpu", "{report}");
        }
        // the CPU MSM's precomputed tables, within the default budget
        assert_eq!(report["prover"]["tables_mib"], 1024, "{report}");
        assert!(text.contains("MSM tables up to 1024 MiB"), "{text}");
        assert!(text.contains("CPU MSM in "), "{text}");
    } else {
        // auto on CUDA: each operation from the size measured to pay
        let device = report["backend"]["backend"].as_str().unwrap();
        let from = format!("{device} from 16384 points, cpu below");
        assert_eq!(report["prover"]["msm_g1"], from, "{report}");
        assert_eq!(report["prover"]["msm_g2"], from, "{report}");
        assert_eq!(
            report["prover"]["ntt"],
            format!("{device} from 131072 elements, cpu below"),
            "{report}"
        );
        // batch verification's weights: from 4096 proofs (two points each)
        assert_eq!(
            report["prover"]["verify"],
            format!("{device} from 8192 points, cpu below"),
            "{report}"
        );
    }
    // asked for, a GPU backend runs every operation (CI has lavapipe)
    let o = run(&["doctor", "--json", "--backend", "wgpu"]);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    if let Some(device) = report["backend"]["backend"].as_str() {
        for op in ["ntt", "msm_g1", "msm_g2", "verify"] {
            assert_eq!(report["prover"][op], device, "{report}");
        }
        assert_eq!(report["prover"]["tables_mib"], 0, "{report}");
    } else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI has lavapipe: {report}"
        );
    }
    let o = run(&["doctor", "--json", "--backend", "cpu"]);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["prover"]["msm_g1"], "cpu", "{report}");
    assert_eq!(report["prover"]["tables_mib"], 1024, "{report}");
    // the CPU MSM adds in AVX-512 IFMA lanes exactly where this CPU has them
    #[cfg(target_arch = "x86_64")]
    let lanes = std::is_x86_feature_detected!("avx512ifma");
    #[cfg(not(target_arch = "x86_64"))]
    let lanes = false;
    let arithmetic = if lanes { "avx512ifma" } else { "scalar" };
    assert_eq!(
        report["prover"]["cpu_msm_arithmetic"], arithmetic,
        "{report}"
    );
    let adapters = report["gpu"]["wgpu"]["adapters"].as_array();
    if std::env::var("CI").as_deref() == Ok("true") {
        // CI installs lavapipe: the software Vulkan driver must be seen.
        let adapters = adapters.expect("CI builds with wgpu");
        assert!(
            adapters.iter().any(|a| a["backend"] == "vulkan"),
            "CI=true but wgpu sees no Vulkan adapter: {report}"
        );
    } else if adapters.is_none_or(|a| a.is_empty()) {
        eprintln!(
            "SKIPPED (no GPU adapter here): wgpu adapter listing; CI=true runs it on lavapipe"
        );
    }
    // Without a CUDA driver, doctor says so and does not crash.
    if report["gpu"]["cuda"]["status"] == "unavailable" {
        assert!(!report["gpu"]["cuda"]["reason"].as_str().unwrap().is_empty());
    }
    // Where inference runs and why: a build without `cuda-inference` names what is
    // missing and opens no CUDA library; with it (CI's image check runs that build) the
    // libraries are listed.
    let inference = &report["inference"];
    assert_eq!(inference["choice"], "auto", "{inference}");
    if cfg!(feature = "cuda-inference") {
        // every library it would open is listed, found or not
        let libs = inference["cuda_libraries"].as_object().unwrap();
        for name in ["driver", "cublas", "cublaslt", "curand", "nvrtc"] {
            assert!(libs.contains_key(name), "{inference}");
        }
    } else {
        assert_eq!(inference["device"], "cpu", "{inference}");
        let reason = inference["reason"].as_str().unwrap();
        assert!(
            reason.contains("no CUDA runtime") && reason.contains("cuda-inference"),
            "{reason}"
        );
        assert_eq!(
            inference["cuda_libraries"],
            serde_json::json!({}),
            "{inference}"
        );
        assert!(
            text.contains("inference: cpu (auto: no CUDA device"),
            "{text}"
        );
    }
    // An impossible explicit backend is reported, not fatal.
    let o = run(&["doctor", "--json", "--backend", "cuda:7"]);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(report["backend"]["error"].is_string(), "{report}");
    assert!(report["prover"]["error"].is_string(), "{report}");
    assert_usage_error(&run(&["doctor", "--backend", "tpu"]), "tpu");
}

#[test]
fn every_acknowledged_event_survives_kill_dash_nine() {
    use fleetmesh_proto::{NodeKeys, UnsignedEvent};
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert!(init(&dir, &[]).status.success());
    // Generous rate limits: this test is about durability.
    edit_config(
        &dir,
        &[
            ("events_per_second = 500.0", "events_per_second = 100000.0"),
            ("event_burst = 1000.0", "event_burst = 100000.0"),
        ],
    );
    let mut daemon = run_node(&dir);
    let url = format!("ws://{}/", daemon.addr);

    // Four connections publish as fast as they can; each records the ids acknowledged
    // with OK true. The daemon is killed with SIGKILL while they are still sending.
    let acked: Arc<Mutex<HashSet<String>>> = Arc::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let writers: Vec<_> = (0..4)
        .map(|c| {
            let url = url.clone();
            let acked = acked.clone();
            rt.spawn(async move {
                let keys = NodeKeys::generate().unwrap();
                let (ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
                let (mut tx, mut rx) = ws.split();
                let reader = tokio::spawn(async move {
                    while let Some(Ok(msg)) = rx.next().await {
                        if let WsMessage::Text(t) = msg {
                            let v: Value = serde_json::from_str(t.as_str()).unwrap();
                            if v[0] == "OK" && v[2] == true {
                                acked
                                    .lock()
                                    .unwrap()
                                    .insert(v[1].as_str().unwrap().to_owned());
                            }
                        }
                    }
                });
                for i in 0..20_000u64 {
                    let e = keys
                        .sign(UnsignedEvent {
                            created_at: 1_700_000_000 + i,
                            kind: 1,
                            tags: vec![],
                            content: format!("connection {c} event {i}"),
                        })
                        .unwrap();
                    if tx
                        .send(WsMessage::Text(
                            format!("[\"EVENT\",{}]", e.to_json()).into(),
                        ))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                let _ = reader.await;
            })
        })
        .collect();
    // Let acknowledgements pile up, then kill mid-stream.
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 2000 {
        assert!(Instant::now() < deadline, "no acknowledgements");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = daemon.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = daemon.child.wait().unwrap();
    assert!(!status.success(), "killed, not exited");
    for w in writers {
        let _ = rt.block_on(w);
    }
    let acked: HashSet<String> = acked.lock().unwrap().clone();
    assert!(acked.len() >= 2000);

    // Restart on the same directory: every acknowledged id is stored.
    let daemon = run_node(&dir);
    let url = format!("ws://{}/", daemon.addr);
    let stored: HashSet<String> = rt.block_on(async {
        let ids: Vec<String> = acked.iter().cloned().collect();
        let mut found = HashSet::new();
        for chunk in ids.chunks(500) {
            for e in req_events(&url, serde_json::json!({"ids": chunk})).await {
                found.insert(e["id"].as_str().unwrap().to_owned());
            }
        }
        found
    });
    let missing = acked.difference(&stored).count();
    eprintln!(
        "kill -9 after {} acknowledged events: {} found after restart",
        acked.len(),
        stored.len()
    );
    assert_eq!(
        missing,
        0,
        "{missing} of {} acknowledged events were lost",
        acked.len()
    );
    assert!(daemon.stop("-TERM").success());
}

/// The ids of the kind-1 events stored behind `url`.
async fn note_ids(url: &str) -> std::collections::BTreeSet<String> {
    req_events(url, serde_json::json!({"kinds": [1], "limit": 500}))
        .await
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The gauges of a `meshnode sync --metrics-file` file for `peer`, read by an independent
/// parser of the Prometheus text format (every metric with its HELP).
fn prom_file(path: &Path, peer: &str) -> impl Fn(&str, &[(&str, &str)]) -> Option<f64> {
    let text = std::fs::read_to_string(path).unwrap();
    for typed in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
        let name = typed.split(' ').next().unwrap_or_default();
        assert!(text.contains(&format!("# HELP {name} ")), "{text}");
    }
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    let peer = peer.to_owned();
    move |name, labels| {
        scrape
            .samples
            .iter()
            .find(|s| {
                s.metric == name
                    && s.labels.get("peer") == Some(peer.as_str())
                    && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
            })
            .map(|s| match s.value {
                prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("{name} is {other:?}, not a gauge"),
            })
    }
}

#[test]
fn sync_between_two_running_nodes_converges_both_stores() {
    use fleetmesh_proto::{NodeKeys, UnsignedEvent};
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    assert!(init(&a, &[]).status.success());
    assert!(init(&b, &[]).status.success());
    let (da, db) = (run_node(&a), run_node(&b));
    let (ua, ub) = (format!("ws://{}/", da.addr), format!("ws://{}/", db.addr));
    let keys = NodeKeys::generate().unwrap();
    let note = |i: u64| {
        keys.sign(UnsignedEvent {
            created_at: 1_700_000_000 + i,
            kind: 1,
            tags: vec![],
            content: format!("note {i}"),
        })
        .unwrap()
    };
    let all: Vec<_> = (0..60).map(note).collect();
    let rt = runtime();
    rt.block_on(async {
        publish_all(&ua, &all[..40]).await; // a: 0..40
        publish_all(&ub, &all[20..]).await; // b: 20..60
    });

    let prom = tmp.path().join("sync.prom");
    let o = run(&[
        "sync",
        a.to_str().unwrap(),
        "--peer",
        &ub,
        "--filter",
        r#"{"kinds":[1]}"#,
        "--metrics-file",
        prom.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let last = stdout(&o);
    assert!(
        last.contains("fetched 20 of 20 missing here, pushed 20 of 20 missing there"),
        "{last}"
    );
    // the same figures for node_exporter's textfile collector
    let m = prom_file(&prom, &ub);
    assert_eq!(m("fleetmesh_sync_success", &[]), Some(1.0));
    assert_eq!(
        m("fleetmesh_sync_events", &[("outcome", "fetched")]),
        Some(20.0)
    );
    assert_eq!(
        m("fleetmesh_sync_events", &[("outcome", "pushed")]),
        Some(20.0)
    );
    assert_eq!(
        m("fleetmesh_sync_missing", &[("side", "there")]),
        Some(20.0)
    );
    assert!(m("fleetmesh_sync_rounds", &[]).unwrap() >= 1.0);
    assert!(m("fleetmesh_sync_last_run_timestamp_seconds", &[]).unwrap() > 1.7e9);
    assert!(
        stderr(&o).contains("sync: reconciled"),
        "progress on stderr: {}",
        stderr(&o)
    );

    let want: std::collections::BTreeSet<String> = all.iter().map(|e| e.id_hex()).collect();
    rt.block_on(async {
        assert_eq!(note_ids(&ua).await, want, "a has the union");
        assert_eq!(note_ids(&ub).await, want, "b has the union");
    });
    // Without a filter the two node descriptors (kind 11801) and terms (kind 30812) cross
    // too; then nothing is left to do.
    let o = run(&["sync", a.to_str().unwrap(), "--peer", &ub]);
    assert!(
        stdout(&o).contains("fetched 2 of 2 missing here, pushed 2 of 2"),
        "{}",
        stdout(&o)
    );
    let o = run(&[
        "sync",
        a.to_str().unwrap(),
        "--peer",
        &ub,
        "--direction",
        "pull",
    ]);
    assert!(
        stdout(&o).contains("fetched 0 of 0 missing here"),
        "{}",
        stdout(&o)
    );

    // A peer that does not answer: the file says the run failed, and nothing else
    let failed = tmp.path().join("failed.prom");
    let o = run(&[
        "sync",
        a.to_str().unwrap(),
        "--peer",
        "ws://127.0.0.1:9/",
        "--metrics-file",
        failed.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let m = prom_file(&failed, "ws://127.0.0.1:9/");
    assert_eq!(m("fleetmesh_sync_success", &[]), Some(0.0));
    assert!(m("fleetmesh_sync_duration_seconds", &[]).is_some());
    assert_eq!(m("fleetmesh_sync_events", &[("outcome", "fetched")]), None);

    // Bad input: exit 2 with one line.
    assert_usage_error(
        &run(&["sync", a.to_str().unwrap(), "--peer", "http://x"]),
        "ws://",
    );
    assert_usage_error(
        &run(&["sync", a.to_str().unwrap(), "--peer", &ub, "--filter", "{"]),
        "--filter",
    );
    assert_usage_error(
        &run(&[
            "sync",
            a.to_str().unwrap(),
            "--peer",
            &ub,
            "--direction",
            "sideways",
        ]),
        "sideways",
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    assert_usage_error(
        &run(&[
            "sync",
            a.to_str().unwrap(),
            "--peer",
            &format!("ws://{closed}/"),
        ]),
        "connect",
    );
    // wss:// goes over TLS (the library's test runs a whole sync through a TLS relay
    // with a test CA): a plain peer fails the handshake; a --ca without a certificate is
    // refused before connecting
    let tls_to_plain = ub.replacen("ws://", "wss://", 1);
    let o = run(&["sync", a.to_str().unwrap(), "--peer", &tls_to_plain]);
    assert_usage_error(&o, "connect");
    let junk = tmp.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    let o = run(&[
        "sync",
        a.to_str().unwrap(),
        "--peer",
        &tls_to_plain,
        "--ca",
        junk.to_str().unwrap(),
    ]);
    assert_usage_error(&o, "--ca");
    assert!(da.stop("-TERM").success());
    assert!(db.stop("-TERM").success());
}

#[test]
fn nip11_lists_77_only_when_negentropy_is_enabled() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert!(init(&dir, &[]).status.success());
    edit_config(&dir, &[("negentropy = true", "negentropy = false")]);
    let daemon = run_node(&dir);
    let doc = runtime().block_on(nip11(&daemon));
    assert_eq!(doc["supported_nips"], serde_json::json!([1, 9, 11, 40, 42]));
    assert!(daemon.stop("-TERM").success());
}

#[test]
fn a_reissued_descriptor_replaces_the_stored_one_even_after_the_clock_went_back() {
    use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent};
    use fleetmesh_relay::Store;
    use fleetmesh_relay::store::EventStore as _;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert!(init(&dir, &[]).status.success());
    // A descriptor dated ten days ahead, as if the clock had been wrong when it was made.
    let keys = NodeKeys::load(&dir.join("keys")).unwrap();
    let first =
        Event::from_json(&std::fs::read_to_string(dir.join("descriptor.json")).unwrap()).unwrap();
    let future = first.created_at + 10 * 86_400;
    let ahead = keys
        .sign(UnsignedEvent {
            created_at: future,
            kind: first.kind,
            tags: first.tags.clone(),
            content: first.content.clone(),
        })
        .unwrap();
    Store::open(&dir.join("fleetmesh.db"))
        .unwrap()
        .insert_event(&ahead)
        .unwrap();
    // The configuration changes, so the node must issue a new descriptor on start.
    edit_config(&dir, &[("class = \"edge\"", "class = \"leaf\"")]);
    let daemon = run_node(&dir);
    let url = format!("ws://{}/", daemon.addr);
    let stored = runtime().block_on(req_events(&url, serde_json::json!({"kinds": [11801]})));
    assert_eq!(stored.len(), 1, "one descriptor per node");
    assert_eq!(stored[0]["created_at"], future + 1);
    let content: Value = serde_json::from_str(stored[0]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["class"], "leaf");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("descriptor.json")).unwrap())
            .unwrap();
    assert_eq!(
        file["id"], stored[0]["id"],
        "descriptor.json is the stored one"
    );
    assert!(daemon.stop("-TERM").success());
}
