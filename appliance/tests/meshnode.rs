//! `meshnode` end to end: the binary as an operator runs it, a real SQLite file, a real
//! listener, and the `nostr` crate as an independent verifier.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use fleetmesh_schemas::SchemaSet;
use futures_util::{SinkExt as _, StreamExt as _};
use nostr::JsonUtil as _;
use serde_json::Value;
use tokio_tungstenite::tungstenite::Message as WsMessage;

fn meshnode() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_meshnode"));
    c.env_remove("MESHNODE_HOME").env("MESHNODE_LOG", "warn");
    c
}

fn run(args: &[&str]) -> Output {
    meshnode().args(args).output().expect("meshnode runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code and the one-line error contract for code 2.
fn assert_usage_error(o: &Output, mentions: &str) {
    assert_eq!(
        o.status.code(),
        Some(2),
        "stdout {} stderr {}",
        stdout(o),
        stderr(o)
    );
    let err = stderr(o);
    assert!(
        err.contains(mentions),
        "stderr {err:?} should mention {mentions:?}"
    );
}

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn init(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["init", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    run(&args)
}

/// Rewrites lines of a node's meshnode.toml (init writes every key with its default).
fn edit_config(dir: &Path, edits: &[(&str, &str)]) {
    let path = dir.join("meshnode.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "{from:?} not in {text}");
        text = text.replace(from, to);
    }
    std::fs::write(&path, text).unwrap();
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn init_creates_a_private_node_with_a_descriptor_others_can_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let op = "ab".repeat(32);
    let o = init(
        &dir,
        &[
            "--operator",
            &op,
            "--class",
            "backbone",
            "--relay",
            "wss://r1.example/",
            "--relay",
            "ws://127.0.0.1:9/",
            "--endpoint",
            "wss=wss://n.example/",
            "--face-port",
            "17001",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);

    // Key files 0600 in a 0700 directory, node directory 0700.
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&dir.join("keys")), 0o700);
    for f in ["nostr.sec", "ed25519.sec", "x25519.sec"] {
        assert_eq!(mode(&dir.join("keys").join(f)), 0o600, "{f}");
        assert_eq!(
            std::fs::read_to_string(dir.join("keys").join(f))
                .unwrap()
                .trim()
                .len(),
            64
        );
    }
    // A real SQLite database.
    let header = std::fs::read(dir.join("fleetmesh.db")).unwrap();
    assert!(header.starts_with(b"SQLite format 3\0"));

    // The descriptor verifies under the nostr crate, and is what init announced.
    let json = std::fs::read_to_string(dir.join("descriptor.json")).unwrap();
    let theirs = nostr::prelude::Event::from_json(&json).unwrap();
    theirs
        .verify()
        .expect("the nostr crate verifies our descriptor");
    assert_eq!(theirs.kind.as_u16(), 11801);
    let pubkey = theirs.pubkey.to_hex();
    assert!(out.contains(&format!("pubkey:     {pubkey}")), "{out}");
    assert!(
        out.contains(&format!("did:        did:nostr:{pubkey}")),
        "{out}"
    );
    assert!(out.contains(&theirs.id.to_hex()));
    // Its content carries the settings and the protocol digest, and matches its schema.
    let ev: Value = serde_json::from_str(&json).unwrap();
    SchemaSet::embedded()
        .validate(&fleetmesh_schemas::SchemaKey::Event(11801), &ev)
        .unwrap();
    let content: Value = serde_json::from_str(ev["content"].as_str().unwrap()).unwrap();
    assert_eq!(content["class"], "backbone");
    assert_eq!(content["operator"], op);
    assert_eq!(content["relays"][1], "ws://127.0.0.1:9/");
    assert_eq!(content["endpoints"][0]["url"], "wss://n.example/");
    assert_eq!(
        content["protocol_digest"],
        SchemaSet::embedded().digest().to_hex()
    );
    let ours = fleetmesh_relay::Event::from_json(&json).unwrap();
    fleetmesh_relay::identity::verify_descriptor(&ours).expect("ed25519 proof and keys hold");

    // The store holds the same descriptor (doctor reads it from there).
    let o = run(&["doctor", dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(report["node"]["pubkey"], pubkey);
    assert_eq!(report["node"]["descriptor"], theirs.id.to_hex());
    assert_eq!(report["node"]["events"], 1);

    // The config records the face port.
    let config = std::fs::read_to_string(dir.join("meshnode.toml")).unwrap();
    assert!(config.contains("listen = \"127.0.0.1:17001\""), "{config}");
}

#[test]
fn init_refuses_to_overwrite_a_node_or_a_non_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    assert!(init(&dir, &[]).status.success());
    let key_before = std::fs::read(dir.join("keys/nostr.sec")).unwrap();
    let db_before = std::fs::read(dir.join("fleetmesh.db")).unwrap();
    let o = init(&dir, &["--class", "leaf"]);
    assert_usage_error(&o, "already holds a node");
    assert_eq!(stderr(&o).lines().count(), 1, "one line on stderr");
    assert_eq!(
        std::fs::read(dir.join("keys/nostr.sec")).unwrap(),
        key_before
    );
    assert_eq!(std::fs::read(dir.join("fleetmesh.db")).unwrap(), db_before);

    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    assert_usage_error(&init(&other, &[]), "not empty");
    assert_eq!(
        std::fs::read_to_string(other.join("notes.txt")).unwrap(),
        "mine"
    );
    // An existing empty directory is fine.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(init(&empty, &[]).status.success());
    // No staging directories are left behind.
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn init_rejects_bad_flags_naming_the_flag() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert_usage_error(&init(&dir, &["--operator", "xyz"]), "--operator");
    assert_usage_error(&init(&dir, &["--operator", &"AB".repeat(32)]), "--operator");
    assert_usage_error(&init(&dir, &["--face-port", "70000"]), "--face-port");
    assert_usage_error(&init(&dir, &["--face-port", "0"]), "--face-port");
    assert_usage_error(&init(&dir, &["--relay", "https://x.example"]), "--relay");
    assert_usage_error(&init(&dir, &["--endpoint", "wss://x"]), "SCHEME=URL");
    assert_usage_error(&init(&dir, &["--class", "core"]), "class");
    assert!(!dir.exists(), "a refused init leaves nothing behind");
}

#[test]
fn init_from_a_mesh_node_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("node.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: fleetmesh.org/v1alpha1\nkind: MeshNode\nmetadata:\n  name: edge-7\nspec:\n  class: leaf\n  relays: [\"wss://r.example/\"]\n  endpoints:\n    - scheme: iroh\n      url: iroh://abc\n  facePort: 17002\n",
    )
    .unwrap();
    let dir = tmp.path().join("n");
    let o = init(&dir, &["--manifest", manifest.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let config = std::fs::read_to_string(dir.join("meshnode.toml")).unwrap();
    assert!(config.contains("class = \"leaf\""), "{config}");
    assert!(config.contains("scheme = \"iroh\""), "{config}");
    assert!(config.contains("127.0.0.1:17002"), "{config}");

    // A typo in the spec is named by its path, and nothing is created.
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: fleetmesh.org/v1alpha1\nkind: MeshNode\nmetadata: {name: x}\nspec:\n  clas: leaf\n",
    )
    .unwrap();
    let dir2 = tmp.path().join("n2");
    let o = init(&dir2, &["--manifest", bad.to_str().unwrap()]);
    assert_usage_error(&o, "/spec");
    assert!(stderr(&o).contains("clas"), "{}", stderr(&o));
    assert!(!dir2.exists());
    // Not YAML at all.
    std::fs::write(&bad, "spec: [unclosed").unwrap();
    assert_usage_error(&init(&dir2, &["--manifest", bad.to_str().unwrap()]), "YAML");
    // Flags and a manifest do not mix.
    let o = init(
        &dir2,
        &["--manifest", manifest.to_str().unwrap(), "--class", "edge"],
    );
    assert_eq!(o.status.code(), Some(2));
}

/// A running `meshnode`, killed on drop.
struct Daemon {
    child: Child,
    addr: String,
}

impl Daemon {
    fn start(mut cmd: Command) -> Daemon {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines
            .next()
            .expect("the daemon prints where it listens")
            .unwrap();
        let addr = line
            .strip_prefix("meshnode listening on http://")
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Daemon { child, addr }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends `signal` and waits for a clean exit.
    fn stop(mut self, signal: &str) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args([signal, &pid])
                .status()
                .unwrap()
                .success()
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not stop on {signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The next text message, parsed; panics after 10 s.
async fn next_json(ws: &mut Ws) -> Value {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a message within 10 s")
            .expect("open")
            .expect("a message");
        if let WsMessage::Text(t) = msg {
            return serde_json::from_str(t.as_str()).unwrap();
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

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
    let mut cmd = meshnode();
    cmd.args(["run", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    let daemon = Daemon::start(cmd);

    runtime().block_on(async {
        let http = reqwest::Client::new();
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
        assert_eq!(doc["supported_nips"], serde_json::json!([1, 9, 11, 40]));
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

        // The relay WebSocket on the same listener: our descriptor is there.
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/", daemon.addr))
            .await
            .unwrap();
        let req = serde_json::json!(["REQ", "d", {"kinds": [11801]}]).to_string();
        ws.send(WsMessage::Text(req.into())).await.unwrap();
        let first = next_json(&mut ws).await;
        assert_eq!(first[0], "EVENT");
        assert_eq!(first[2]["id"], descriptor["id"]);
        assert_eq!(next_json(&mut ws).await, serde_json::json!(["EOSE", "d"]));
        drop(ws);

        let metrics = http.get(daemon.url("/metrics")).send().await.unwrap();
        assert_eq!(metrics.status(), 200);
        let metrics = metrics.text().await.unwrap();
        assert!(metrics.contains("fleetmesh_store_events 1\n"), "{metrics}");
        assert!(
            metrics.contains("fleetmesh_relay_reqs_total 1\n"),
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
    assert!(daemon.stop("-TERM").success(), "SIGTERM exits 0");

    // SIGINT too, and the node reopens with the same identity afterwards.
    let mut cmd = meshnode();
    cmd.args(["run", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    let daemon = Daemon::start(cmd);
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
            reqwest::get(d.url("/healthz"))
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
    // An impossible explicit backend is reported, not fatal.
    let o = run(&["doctor", "--json", "--backend", "cuda:7"]);
    let report: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(report["backend"]["error"].is_string(), "{report}");
    assert_usage_error(&run(&["doctor", "--backend", "tpu"]), "tpu");
}

#[test]
fn schema_digest_is_stable_and_follows_the_files() {
    let a = run(&["schema", "digest"]);
    let b = run(&["schema", "digest"]);
    assert!(a.status.success());
    let hex = stdout(&a).trim().to_owned();
    assert_eq!(hex.len(), 64);
    assert!(
        hex.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert_eq!(stdout(&a), stdout(&b));
    assert_eq!(hex, SchemaSet::embedded().digest().to_hex());

    // The same digest from the source files on disk; a changed copy gives another.
    let src = shared().join("schemas/json");
    let o = run(&["schema", "digest", "--dir", src.to_str().unwrap()]);
    assert_eq!(stdout(&o).trim(), hex);
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(src.join("events")).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
    }
    for sub in ["manifests", "payloads"] {
        for entry in std::fs::read_dir(src.join(sub)).unwrap() {
            let p = entry.unwrap().path();
            std::fs::copy(&p, tmp.path().join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(src.join("common.json"), tmp.path().join("zz-common.json")).unwrap();
    let o = run(&["schema", "digest", "--dir", tmp.path().to_str().unwrap()]);
    assert_eq!(stdout(&o).trim(), hex, "flattened and renamed: same digest");
    let f = tmp.path().join("kind-30810.json");
    let text = std::fs::read_to_string(&f).unwrap();
    std::fs::write(&f, text.replacen("\"title\": \"", "\"title\": \"x", 1)).unwrap();
    let o = run(&["schema", "digest", "--dir", tmp.path().to_str().unwrap()]);
    assert!(o.status.success());
    assert_ne!(stdout(&o).trim(), hex);
    std::fs::write(&f, "{").unwrap();
    assert_usage_error(
        &run(&["schema", "digest", "--dir", tmp.path().to_str().unwrap()]),
        "kind-30810.json",
    );
}

#[test]
fn schema_validate_gives_verdicts_and_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let examples: Value = serde_json::from_str(
        &std::fs::read_to_string(shared().join("schemas/examples/events/kind-30810.json")).unwrap(),
    )
    .unwrap();
    let good = tmp.path().join("good.json");
    std::fs::write(&good, examples["valid"][0].to_string()).unwrap();
    let o = run(&["schema", "validate", "30810", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let case = &examples["invalid"][0];
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, case["instance"].to_string()).unwrap();
    let o = run(&["schema", "validate", "kind-30810", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "a negative verdict");
    let want = format!("invalid: {}: ", case["path"].as_str().unwrap());
    assert!(
        stderr(&o).contains(&want),
        "{} should contain {want}",
        stderr(&o)
    );

    // YAML manifests, from standard input.
    let mut child = meshnode()
        .args(["schema", "validate", "MeshNode", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"apiVersion: fleetmesh.org/v1alpha1\nkind: MeshNode\nmetadata: {name: a}\nspec: {facePort: 99999}\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("/spec/facePort"), "{}", stderr(&o));

    // Payloads by protocol id.
    let payload: Value = serde_json::from_str(
        &std::fs::read_to_string(shared().join("schemas/examples/payloads/compute-1.0.json"))
            .unwrap(),
    )
    .unwrap();
    std::fs::write(&good, payload["valid"][0].to_string()).unwrap();
    assert_eq!(
        run(&["schema", "validate", "compute/1.0", good.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );

    // Bad input: exit 2.
    assert_usage_error(
        &run(&["schema", "validate", "1", good.to_str().unwrap()]),
        "no schema for event kind 1",
    );
    assert_usage_error(
        &run(&["schema", "validate", "Mesh Node", good.to_str().unwrap()]),
        "not a schema key",
    );
    assert_usage_error(
        &run(&["schema", "validate", "30810", "/no/such/file.json"]),
        "/no/such/file.json",
    );
    std::fs::write(&bad, "{\"kind\": ").unwrap();
    assert_usage_error(
        &run(&["schema", "validate", "30810", bad.to_str().unwrap()]),
        "not valid JSON",
    );

    let o = run(&["schema", "list"]);
    assert!(o.status.success());
    assert_eq!(
        stdout(&o).lines().count(),
        SchemaSet::embedded().keys().count()
    );
}

#[test]
fn every_subcommand_has_help() {
    for args in [
        &["--help"][..],
        &["init", "--help"],
        &["run", "--help"],
        &["up", "--help"],
        &["doctor", "--help"],
        &["schema", "--help"],
        &["schema", "digest", "--help"],
        &["schema", "validate", "--help"],
        &["schema", "list", "--help"],
    ] {
        let o = run(args);
        assert!(o.status.success(), "{args:?}");
        assert!(
            stdout(&o).contains("Usage: meshnode"),
            "{args:?}: {}",
            stdout(&o)
        );
    }
    assert_eq!(run(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(run(&[]).status.code(), Some(2));
}

#[test]
fn every_acknowledged_event_survives_kill_dash_nine() {
    use fleetmesh_relay::{NodeKeys, UnsignedEvent};
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
    let mut cmd = meshnode();
    cmd.args(["run", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    let mut daemon = Daemon::start(cmd);
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
    let mut cmd = meshnode();
    cmd.args(["run", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    let daemon = Daemon::start(cmd);
    let url = format!("ws://{}/", daemon.addr);
    let stored: HashSet<String> = rt.block_on(async {
        let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
        let ids: Vec<String> = acked.iter().cloned().collect();
        let mut found = HashSet::new();
        for (n, chunk) in ids.chunks(500).enumerate() {
            let req = serde_json::json!(["REQ", format!("c{n}"), {"ids": chunk}]).to_string();
            ws.send(WsMessage::Text(req.into())).await.unwrap();
            loop {
                let v = next_json(&mut ws).await;
                match v[0].as_str() {
                    Some("EVENT") => {
                        found.insert(v[2]["id"].as_str().unwrap().to_owned());
                    }
                    Some("EOSE") => break,
                    _ => panic!("{v}"),
                }
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
