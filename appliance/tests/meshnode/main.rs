//! `meshnode` end to end: the binary as an operator runs it, a real SQLite file, a real
//! listener, and the `nostr` crate as an independent verifier. One test binary (each links
//! a large debug build), a module per area.

mod blossom;
mod cli;
mod cluster;
mod daemon;
mod did;
mod didcomm;
mod docs;
mod exposure;
mod first_run;
mod gateway;
mod giftwrap;
mod hostile;
mod house;
mod inference;
mod init;
mod jobs;
mod keys;
mod l402;
mod ledger;
mod ledger_torn;
mod lightning_double;
mod llm_jobs;
mod mailbox;
mod market;
mod mediator;
mod nutzaps;
mod nwc;
mod paid_jobs;
mod peering;
mod proof;
mod prover_api;
mod quorum;
mod reconcile;
mod routing;
mod schema;
mod settle;
mod shedding;
mod status_page;
mod wallet;
mod wasi;
mod watch;

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

/// Runs `cmd` with `input` on its standard input; its output.
fn with_stdin(mut cmd: Command, input: &[u8]) -> Output {
    use std::io::Write as _;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
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

/// The repository root (every fixture a test reads lives inside it).
fn repo() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("..")
}

/// The python of the virtual environment `appliance/tests/meshnode/SCRIPT` (a pinned
/// PyPI package's installer) prints; `None`, with a message naming `what` is skipped,
/// only where python3 cannot make a venv and `CI` is not `true`.
fn venv_python(script: &str, what: &str) -> Option<PathBuf> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let venv = Command::new("python3").args(["-c", "import venv"]).output();
    if !venv.is_ok_and(|o| o.status.success()) {
        assert!(!ci, "CI=true but python3 cannot make a venv");
        eprintln!("SKIPPED {what}: python3 has no venv module");
        return None;
    }
    let o = Command::new(repo().join("appliance/tests/meshnode").join(script))
        .output()
        .unwrap();
    assert!(o.status.success(), "{script}: {}", stderr(&o));
    Some(PathBuf::from(stdout(&o).trim()))
}

/// The npm directory `appliance/tests/meshnode/DIR/tools.sh` installs a pinned package
/// into (when node is here and the package is not); `None`, with a message naming `what`
/// is skipped, only where node is absent and `CI` is not `true`.
fn node_tool(dir: &str, what: &str) -> Option<PathBuf> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        assert!(
            !ci,
            "CI=true but node is not installed (.ci/test installs it)"
        );
        eprintln!("SKIPPED {what}: node is not installed");
        return None;
    }
    let here = repo().join("appliance/tests/meshnode").join(dir);
    let o = Command::new(here.join("tools.sh")).output().unwrap();
    assert!(o.status.success(), "{dir}/tools.sh: {}", stderr(&o));
    Some(PathBuf::from(stdout(&o).trim()))
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

/// The config edit that says no proxy is in front of a node (`[face] per_ip_exempt = []`):
/// on a node without a token, a loopback client is then its operator (reads every job).
const NO_PROXY: (&str, &str) = (
    "per_ip_exempt = [\n    \"127.0.0.1\",\n    \"::1\",\n]",
    "per_ip_exempt = []",
);

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
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
        let Some(Ok(line)) = lines.next() else {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err);
            panic!("the daemon did not say where it listens: {err}");
        };
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

    /// `GET /metrics`, read by an independent parser of the Prometheus text format.
    fn scrape(&self) -> Scrape {
        let text = runtime().block_on(async {
            let r = http_client()
                .get(self.url("/metrics"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            r.text().await.unwrap()
        });
        let parsed =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
        // every metric is described: a name recorded without its description (a typo in
        // a library, say) has no HELP line
        for typed in text.lines().filter_map(|l| l.strip_prefix("# TYPE ")) {
            let name = typed.split(' ').next().unwrap_or_default();
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "{name} has no HELP:\n{text}"
            );
        }
        Scrape { text, parsed }
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

/// One scrape of a node's `/metrics`.
struct Scrape {
    text: String,
    parsed: prometheus_parse::Scrape,
}

impl Scrape {
    /// The sum over the samples of `name` whose labels include `labels`: a counter's or
    /// gauge's value, a histogram's observation count; `None` when there is no such sample.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        use prometheus_parse::Value as V;
        let mut found = None;
        for s in &self.parsed.samples {
            if s.metric != name || labels.iter().any(|(k, v)| s.labels.get(k) != Some(*v)) {
                continue;
            }
            let v = match &s.value {
                V::Counter(v) | V::Gauge(v) | V::Untyped(v) => *v,
                V::Histogram(buckets) => buckets
                    .iter()
                    .find(|b| b.less_than.is_infinite())
                    .map_or(0.0, |b| b.count),
                V::Summary(_) => panic!("{name} is a summary: the node exports histograms"),
            };
            *found.get_or_insert(0.0) += v;
        }
        found
    }

    /// [`Scrape::value`], which must exist.
    fn must(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.value(name, labels)
            .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{}", self.text))
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

/// `meshnode run DIR` on an ephemeral port.
fn run_node(dir: &Path) -> Daemon {
    let mut cmd = meshnode();
    cmd.args(["run", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    Daemon::start(cmd)
}

/// The stored events matching `filter` on the relay at `url`, up to EOSE.
async fn req_events(url: &str, filter: Value) -> Vec<Value> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let req = serde_json::json!(["REQ", "q", filter]).to_string();
    ws.send(WsMessage::Text(req.into())).await.unwrap();
    let mut out = Vec::new();
    loop {
        let v = next_json(&mut ws).await;
        match v[0].as_str() {
            Some("EVENT") => out.push(v[2].clone()),
            Some("EOSE") => return out,
            _ => panic!("unexpected {v}"),
        }
    }
}

/// Unix seconds now.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// `keys` revoking its own Nostr key from `revoked_at` (kind 11802, signed at
/// `created_at`), naming `successor` when it hands over to another key.
fn self_revocation(
    keys: &fleetmesh_proto::NodeKeys,
    revoked_at: u64,
    created_at: u64,
    successor: Option<String>,
) -> fleetmesh_proto::Event {
    use fleetmesh_proto::noun::Noun as _;
    let reason = if successor.is_some() {
        fleetmesh_proto::RevocationReason::Superseded
    } else {
        fleetmesh_proto::RevocationReason::Compromised
    };
    fleetmesh_proto::nodes::Revocation {
        revoked: vec![fleetmesh_proto::nodes::RevokedKey {
            key_type: fleetmesh_proto::KeyType::Secp256k1,
            public: keys.nostr_pubkey_hex(),
            revoked_at,
            reason,
            replacement: successor.clone(),
        }],
        successor,
    }
    .sign(keys, created_at)
    .unwrap()
}

/// Publishes `events` on `url` and waits for every OK true.
async fn publish_all(url: &str, events: &[fleetmesh_proto::Event]) {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    for e in events {
        ws.send(WsMessage::Text(
            format!("[\"EVENT\",{}]", e.to_json()).into(),
        ))
        .await
        .unwrap();
    }
    for _ in events {
        let v = next_json(&mut ws).await;
        assert_eq!(
            (&v[0], &v[2]),
            (&Value::from("OK"), &Value::from(true)),
            "{v}"
        );
    }
}

/// GETs `url`: the status code.
async fn status(http: &reqwest::Client, url: String) -> u16 {
    http.get(url).send().await.unwrap().status().as_u16()
}

/// The NIP-11 document of the node `d`.
async fn nip11(d: &Daemon) -> Value {
    http_client()
        .get(d.url("/"))
        .header("accept", "application/nostr+json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `meshnode infer --model MODEL --prompt PROMPT` and `extra` arguments.
fn infer(model: &Path, prompt: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "infer",
        "--model",
        model.to_str().unwrap(),
        "--prompt",
        prompt,
    ];
    args.extend_from_slice(extra);
    run(&args)
}

/// GETs `url`: the JSON body.
async fn get_json(http: &reqwest::Client, url: String) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

/// POSTs `body` as JSON text; the status and the JSON answer.
async fn post_json(http: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    let r = http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json::<Value>().await.unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An HTTP client. The workspace builds reqwest with rustls and no default crypto
/// provider (the node installs ring at start-up), so the tests install it too.
fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A delivery-mode WASI job that upper-cases `input`, written into `dir` (the module, the
/// input, the job file named `name`): the job file's path.
/// A wasm module that loops forever: a job that runs until a limit stops it.
const SPIN_WAT: &str = "(module (func (export \"_start\") (loop $l (br $l))))";

/// A job of [`SPIN_WAT`] under `limits`, written into `dir` (its module `spin.wat`, the job
/// file `<name>.json`): the job file's path.
fn spin_job(dir: &Path, name: &str, limits: Value) -> PathBuf {
    std::fs::write(dir.join("spin.wat"), SPIN_WAT).unwrap();
    let file = dir.join(format!("{name}.json"));
    let job = serde_json::json!({"module": "spin.wat", "name": name, "limits": limits});
    std::fs::write(&file, job.to_string()).unwrap();
    file
}

fn upper_job(dir: &Path, input: &str, name: &str) -> PathBuf {
    std::fs::write(dir.join("upper.wat"), include_str!("../../demo/upper.wat")).unwrap();
    std::fs::write(dir.join("in.txt"), input).unwrap();
    let file = dir.join("upper.json");
    let job = serde_json::json!({"engine": "wasm", "mode": "delivery", "module": "upper.wat",
        "input": "in.txt", "limits": {"fuel": 10_000_000}, "name": name});
    std::fs::write(&file, job.to_string()).unwrap();
    file
}
