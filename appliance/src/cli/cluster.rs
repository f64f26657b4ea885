//! `meshnode cluster start|status|stop`: a local cluster of nodes on loopback, for trying
//! the federation and testing it. With `--transport quic` (the default) each node gossips
//! on loopback, bootstrapped from its neighbours in the topology, finds the others by
//! gossip and peers with each over QUIC (`[peering] quic_listen`, `gossip_listen`,
//! `bootstrap`); with `--transport ws` each node names its neighbours' relay faces in
//! `[[peering.peers]]` and reconciles over WebSocket. Each
//! node is a `meshnode run` in its own directory under `--dir` (its log in
//! `node-I/meshnode.log`), in its own process group so that a Ctrl-C at the terminal
//! leaves it running; `DIR/cluster.json` records them for `status` and `stop`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Args, Subcommand, ValueEnum};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::cli::Outcome;

/// The file that records a cluster.
const FILE: &str = "cluster.json";

/// `meshnode cluster …`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Start N nodes on loopback, peered in a topology; prints each node's index, URL and
    /// DID as JSON lines once every one answers /healthz.
    Start(StartArgs),
    /// Each recorded node's health, as JSON lines; exit 0 when all answer, 2 otherwise.
    Status(DirArgs),
    /// Stop every node (SIGTERM, then wait); the node directories stay.
    Stop(DirArgs),
}

/// How the nodes peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topology {
    /// Every node with every other.
    Full,
    /// Every node with node 0.
    Star,
    /// Node i with node i + 1.
    Line,
    /// No one: nodes that do not peer (a baseline of hand-run `meshnode sync`).
    None,
}

/// How the nodes reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// Gossip discovery from the topology's neighbours, then QUIC links with every node found.
    Quic,
    /// `[[peering.peers]]` relay faces of the topology's neighbours, over WebSocket.
    Ws,
}

/// `meshnode cluster start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// How many nodes (1 to 32).
    #[arg(long, value_name = "N")]
    pub nodes: usize,
    /// Where the nodes' directories and the cluster's record go.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// How they peer.
    #[arg(long, value_enum, default_value = "full")]
    pub topology: Topology,
    /// Seconds between two peering rounds (and between two heartbeats).
    #[arg(long, value_name = "SECS", default_value_t = 2)]
    pub interval_secs: u64,
    /// How they reach each other.
    #[arg(long, value_enum, default_value = "quic")]
    pub transport: Transport,
    /// With --transport quic: node 0 serves an iroh relay (HTTPS on loopback, certified
    /// by a CA made for the cluster, `DIR/iroh-relay-ca.pem`), every node homes its QUIC
    /// endpoint there, and the other nodes advertise no direct address: they are reached
    /// through the relay only, iroh punching a direct path from there.
    #[arg(long)]
    pub iroh_relay: bool,
    /// With --transport quic: every peered pair grants each other this many events per
    /// window (`[ledger] grant_events`), so the ledger meters, receipts and judges their
    /// traffic; publishing more at one node than that is an overrun its peers answer.
    #[arg(long, value_name = "EVENTS_PER_WINDOW")]
    pub grants: Option<u64>,
    /// The ledger's window with --grants, seconds (`[ledger] window_secs`; the
    /// projections, `[ledger] publish_secs`, are published as often).
    #[arg(long, value_name = "SECS", default_value_t = 10, requires = "grants")]
    pub window: u64,
    /// With --grants: a shard the grants cover, a NIP-01 filter as JSON (`[ledger]
    /// grant_shards`; repeatable): receipts count per shard, pushes outside them are S3.
    #[arg(long, value_name = "FILTER", requires = "grants")]
    pub grant_shard: Vec<String>,
    /// Sets one configuration key on every node, after the cluster's own settings:
    /// `SECTION.KEY=VALUE`, the value as TOML (a number, `true`, `"text"`, `[1, 2]`) or
    /// else as text; e.g. `--set ledger.evidence_max_bytes=65536`. Repeatable; checked as
    /// `meshnode run` checks the file.
    #[arg(long, value_name = "SECTION.KEY=VALUE")]
    pub set: Vec<String>,
    /// With --grants: node I misbehaves on purpose (`[ledger] fault`), so that its peers'
    /// remedies can be watched: `I=understate` (receipts claim a quarter of what it sent:
    /// probation and a report), `I=corrupt-chain` (wrong links from its third receipt:
    /// revoked). Repeatable.
    #[arg(long, value_name = "I=KIND", requires = "grants", value_parser = fault)]
    pub fault: Vec<(usize, crate::config::Fault)>,
}

/// `config` with `SECTION.KEY=VALUE` set (`--set`), checked.
fn set(config: &crate::config::Config, assignment: &str) -> anyhow::Result<crate::config::Config> {
    let (path, text) = assignment
        .split_once('=')
        .with_context(|| format!("--set {assignment}: not SECTION.KEY=VALUE"))?;
    let value = toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_owned()));
    let mut doc: toml::Table = toml::from_str(&config.to_toml())?;
    let keys: Vec<&str> = path.split('.').collect();
    let (last, sections) = keys.split_last().expect("split yields one");
    let mut at = &mut doc;
    for k in sections {
        at = at
            .entry(*k)
            .or_insert_with(|| toml::Value::Table(Default::default()))
            .as_table_mut()
            .with_context(|| format!("--set {assignment}: {k} is not a section"))?;
    }
    at.insert((*last).to_owned(), value);
    let out: crate::config::Config =
        toml::from_str(&toml::to_string(&doc)?).with_context(|| format!("--set {assignment}"))?;
    out.check()
        .map_err(|e| anyhow::anyhow!("--set {assignment}: {e}"))?;
    Ok(out)
}

fn fault(s: &str) -> Result<(usize, crate::config::Fault), String> {
    use clap::ValueEnum as _;
    let (i, kind) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected I=KIND, e.g. 0=understate"))?;
    let i = i.parse().map_err(|_| format!("{i:?}: not a node number"))?;
    let kind = crate::config::Fault::from_str(kind, false)
        .map_err(|_| format!("{kind:?}: not one of none, understate, corrupt-chain"))?;
    Ok((i, kind))
}

/// `meshnode cluster status|stop`.
#[derive(Debug, Args)]
pub struct DirArgs {
    /// The cluster's directory.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
struct Member {
    index: usize,
    url: String,
    did: String,
    dir: PathBuf,
    pid: u32,
}

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    topology: Topology,
    nodes: Vec<Member>,
}

/// The neighbours node `i` of `n` names (dials, bootstraps from), by index.
fn peers_of(topology: Topology, i: usize, n: usize) -> Vec<usize> {
    match topology {
        Topology::Full => (i + 1..n).collect(),
        Topology::Star if i > 0 => vec![0],
        Topology::Star => Vec::new(),
        Topology::Line => (i + 1 < n).then_some(i + 1).into_iter().collect(),
        Topology::None => Vec::new(),
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn healthy(client: &reqwest::blocking::Client, url: &str) -> bool {
    client
        .get(format!("{url}/healthz"))
        .send()
        .is_ok_and(|r| r.status().is_success())
}

fn read_record(dir: &Path) -> anyhow::Result<Record> {
    let path = dir.join(FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{}: no cluster here (start one first)", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))
}

fn client() -> anyhow::Result<reqwest::blocking::Client> {
    Ok(reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?)
}

/// `meshnode cluster start`.
pub fn start(args: &StartArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(
        (1..=32).contains(&args.nodes),
        "--nodes {}: 1 to 32",
        args.nodes
    );
    anyhow::ensure!(
        (1..=86_400).contains(&args.interval_secs),
        "--interval-secs {}: 1 to 86 400",
        args.interval_secs
    );
    if let Some((i, _)) = args.fault.iter().find(|(i, _)| *i >= args.nodes) {
        anyhow::bail!("--fault {i}=…: there is no node {i} of {}", args.nodes);
    }
    if let Ok(r) = read_record(&args.dir) {
        anyhow::ensure!(
            !r.nodes.iter().any(|m| alive(m.pid)),
            "{} holds a running cluster; `meshnode cluster stop --dir {0}` first",
            args.dir.display()
        );
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    #[cfg(not(feature = "federation"))]
    anyhow::ensure!(
        args.transport == Transport::Ws,
        "--transport quic: this meshnode was built without the federation feature; use --transport ws"
    );
    let me = std::env::current_exe().context("finding the meshnode binary")?;
    anyhow::ensure!(
        !args.iroh_relay || args.transport == Transport::Quic,
        "--iroh-relay needs --transport quic"
    );
    let dirs: Vec<PathBuf> = (0..args.nodes)
        .map(|i| args.dir.join(format!("node-{i}")))
        .collect();
    for dir in &dirs {
        if !dir.join(crate::config::FILE).exists() {
            let o = std::process::Command::new(&me)
                .arg("init")
                .arg(dir)
                .output()
                .context("running meshnode init")?;
            anyhow::ensure!(
                o.status.success(),
                "meshnode init {}: {}",
                dir.display(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    let keys = dirs
        .iter()
        .map(|d| fleetmesh_proto::NodeKeys::load(&d.join(crate::node::KEYS_DIR)))
        .collect::<Result<Vec<_>, _>>()?;
    let client = client()?;
    // a port is free when chosen and bound by the node a moment later: another process
    // may take it in between, so a node that could not bind is retried on other ports
    let mut attempt = 1;
    let record = loop {
        let ports = free_ports(args.nodes).context("choosing free ports")?;
        match launch(args, &me, &dirs, &ports, &keys, &client) {
            Ok(record) => break record,
            Err(e) if attempt < 3 && e.downcast_ref::<PortTaken>().is_some() => {
                eprintln!("meshnode: {e:#}; starting again on other ports");
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    for m in &record.nodes {
        println!(
            "{}",
            json!({"index": m.index, "url": m.url, "did": m.did, "dir": m.dir, "pid": m.pid})
        );
    }
    Ok(Outcome::Ok)
}

/// For each of `n` nodes a free loopback port for its face and its gossip (TCP), and for
/// QUIC (UDP).
fn free_ports(n: usize) -> std::io::Result<Vec<(u16, u16, u16)>> {
    let tcp = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
    };
    let udp = || {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
    };
    (0..n).map(|_| Ok((tcp()?, tcp()?, udp()?))).collect()
}

/// A node of the cluster exited because a port chosen for it was taken.
#[derive(Debug)]
struct PortTaken(String);

impl std::fmt::Display for PortTaken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PortTaken {}

/// Configures the nodes in `dirs` for `ports` and starts them, recorded in `DIR/cluster.json`
/// as each starts; returns once every one answers `/healthz`. When one does not, every node
/// this call started is stopped again and the error says why (`PortTaken` when it lost a
/// port), with the end of its log.
fn launch(
    args: &StartArgs,
    me: &Path,
    dirs: &[PathBuf],
    ports: &[(u16, u16, u16)],
    keys: &[fleetmesh_proto::NodeKeys],
    client: &reqwest::blocking::Client,
) -> anyhow::Result<Record> {
    let relay = if args.iroh_relay {
        let port = free_ports(1).context("choosing a free port")?[0].0;
        Some(relay_for(&args.dir, &dirs[0], port)?)
    } else {
        None
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut record = Record {
        topology: args.topology,
        nodes: Vec::with_capacity(args.nodes),
    };
    let mut children = Vec::with_capacity(args.nodes);
    let started = (|| {
        for (i, dir) in dirs.iter().enumerate() {
            let config = node_config(args, i, dir, ports, keys, relay.as_ref())?;
            fleetmesh_proto::identity::write_private(
                &dir.join(crate::config::FILE).with_extension("toml.tmp"),
                config.to_toml().as_bytes(),
            )?;
            std::fs::rename(
                dir.join(crate::config::FILE).with_extension("toml.tmp"),
                dir.join(crate::config::FILE),
            )?;
            let log = std::fs::File::create(dir.join("meshnode.log"))?;
            let child = {
                use std::os::unix::process::CommandExt as _;
                std::process::Command::new(me)
                    .arg("run")
                    .arg(dir)
                    .stdin(std::process::Stdio::null())
                    .stdout(log.try_clone()?)
                    .stderr(log)
                    .process_group(0)
                    .spawn()
                    .context("starting meshnode run")?
            };
            record.nodes.push(Member {
                index: i,
                url: format!("http://127.0.0.1:{}", ports[i].0),
                did: keys[i].did(),
                dir: dir.clone(),
                pid: child.id(),
            });
            children.push(child);
            std::fs::write(args.dir.join(FILE), serde_json::to_vec_pretty(&record)?)?;
            // the relay's host first: the others home on its relay as they start
            if i == 0 && relay.is_some() {
                wait_healthy(client, &record.nodes[0], &mut children[0], deadline)?;
            }
        }
        for (m, child) in record.nodes.iter().zip(&mut children) {
            wait_healthy(client, m, child, deadline)?;
        }
        anyhow::Ok(())
    })();
    if let Err(e) = started {
        for child in &mut children {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        for child in &mut children {
            let _ = child.wait();
        }
        let _ = std::fs::remove_file(args.dir.join(FILE));
        return Err(e);
    }
    Ok(record)
}

/// Node `i`'s configuration in the cluster: its own ports, its neighbours in the topology,
/// the ledger settings and `--set`.
fn node_config(
    args: &StartArgs,
    i: usize,
    dir: &Path,
    ports: &[(u16, u16, u16)],
    keys: &[fleetmesh_proto::NodeKeys],
    relay: Option<&ClusterRelay>,
) -> anyhow::Result<crate::config::Config> {
    let (port, gossip, quic) = ports[i];
    let mut config = crate::config::Config::load(dir)?;
    config.face.listen.set_port(port);
    config.peering.interval_secs = args.interval_secs;
    if let Some(events) = args.grants {
        config.ledger.grant_events = events;
        config.ledger.window_secs = args.window;
        config.ledger.publish_secs = args.window;
        config.ledger.grant_shards = args.grant_shard.clone();
        if let Some((_, f)) = args.fault.iter().rev().find(|(j, _)| *j == i) {
            config.ledger.fault = *f;
        }
    }
    let neighbours = peers_of(args.topology, i, args.nodes);
    match args.transport {
        Transport::Ws => {
            config.peering.peers = neighbours
                .into_iter()
                .map(|j| crate::config::PeerSection {
                    url: format!("ws://127.0.0.1:{}/", ports[j].0),
                    filter: "{}".into(),
                    ca: None,
                    via: fleetmesh_relay::bridge::Via::Nip77,
                })
                .collect();
        }
        Transport::Quic => {
            config.peering.peers = Vec::new();
            config.peering.quic_listen = Some(([127, 0, 0, 1], quic).into());
            config.peering.gossip_listen = Some(format!("/ip4/127.0.0.1/tcp/{gossip}"));
            config.peering.heartbeat_secs = args.interval_secs.min(3600);
            config.peering.announce_secs = 10;
            config.peering.bootstrap = neighbours
                .into_iter()
                .map(|j| bootstrap_addr(ports[j].1, &keys[j]))
                .collect::<anyhow::Result<_>>()?;
            if let Some(r) = relay {
                config.peering.iroh_relays = vec![r.url.clone()];
                config.peering.iroh_relay_ca = Some(r.ca.clone());
                if i == 0 {
                    config.peering.iroh_relay_listen = Some(r.listen);
                    config.peering.iroh_relay_cert = Some(r.cert.clone());
                    config.peering.iroh_relay_key = Some(r.key.clone());
                } else {
                    // port 0 is not advertised: reached through the relay only
                    config.peering.quic_listen = Some(([127, 0, 0, 1], 0).into());
                }
            }
        }
    }
    for assignment in &args.set {
        config = set(&config, assignment)?;
    }
    Ok(config)
}

/// Waits until `m` (started as `child`) answers `/healthz`; when it exits first, or does
/// not answer by `deadline`, the error ends with the end of its log.
fn wait_healthy(
    client: &reqwest::blocking::Client,
    m: &Member,
    child: &mut std::process::Child,
    deadline: Instant,
) -> anyhow::Result<()> {
    let log = m.dir.join("meshnode.log");
    while !healthy(client, &m.url) {
        let exited = child.try_wait()?;
        if exited.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            continue;
        }
        let tail = log_tail(&log);
        let why = match exited {
            Some(status) => format!("node {} exited ({status}) before it answered", m.index),
            None => format!("node {} did not answer /healthz within 120 s", m.index),
        };
        let message = format!("{why}; the end of {}:\n{tail}", log.display());
        if exited.is_some() && tail.contains("Address already in use") {
            return Err(PortTaken(message).into());
        }
        anyhow::bail!(message);
    }
    Ok(())
}

/// The last 20 lines of the log at `path` (at most 4 KiB of it).
fn log_tail(path: &Path) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text[text.len().saturating_sub(4096)..]).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The cluster's iroh relay: node 0 serves it at `listen` with `cert` and `key`, every
/// node trusts `ca` and homes at `url`.
#[cfg_attr(not(feature = "federation"), allow(dead_code))]
struct ClusterRelay {
    listen: std::net::SocketAddr,
    url: String,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// A CA for the cluster (`dir/iroh-relay-ca.pem`) and node 0's relay certificate for
/// loopback signed by it (in `node0`), the relay to listen on `port`.
#[cfg(feature = "federation")]
fn relay_for(dir: &Path, node0: &Path, port: u16) -> anyhow::Result<ClusterRelay> {
    let (ca, cert, key) = loopback_certificate().context("making the cluster's relay CA")?;
    let r = ClusterRelay {
        listen: ([127, 0, 0, 1], port).into(),
        url: format!("https://127.0.0.1:{port}"),
        ca: dir.join("iroh-relay-ca.pem"),
        cert: node0.join("iroh-relay-cert.pem"),
        key: node0.join("iroh-relay-key.pem"),
    };
    std::fs::write(&r.ca, ca)?;
    std::fs::write(&r.cert, cert)?;
    // each launch makes a new CA and certificate: the key of an earlier one (a retry on
    // other ports, the cluster started again in this directory) goes with them
    match std::fs::remove_file(&r.key) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(anyhow::Error::new(e).context(format!("removing {}", r.key.display())));
        }
        _ => {}
    }
    fleetmesh_proto::identity::write_private(&r.key, key.as_bytes())?;
    Ok(r)
}

/// A new CA, and a certificate for `127.0.0.1` and `localhost` signed by it, with the
/// certificate's key: PEM, in that order. The CA's key is dropped here, so nothing else is
/// ever signed by it.
#[cfg(feature = "federation")]
fn loopback_certificate() -> Result<(String, String, String), rcgen::Error> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?
        .signed_by(&key, &Issuer::from_params(&ca_params, &ca_key))?;
    Ok((ca.pem(), cert.pem(), key.serialize_pem()))
}

#[cfg(not(feature = "federation"))]
fn relay_for(_: &Path, _: &Path, _: u16) -> anyhow::Result<ClusterRelay> {
    anyhow::bail!("--iroh-relay: this meshnode was built without the federation feature")
}

/// Node `keys`' gossip address on loopback at `port`.
#[cfg(feature = "federation")]
fn bootstrap_addr(port: u16, keys: &fleetmesh_proto::NodeKeys) -> anyhow::Result<String> {
    let id = fleetmesh_transport::gossip::peer_id_of(&keys.ed25519_public())?;
    Ok(format!("/ip4/127.0.0.1/tcp/{port}/p2p/{id}"))
}

#[cfg(not(feature = "federation"))]
fn bootstrap_addr(_: u16, _: &fleetmesh_proto::NodeKeys) -> anyhow::Result<String> {
    anyhow::bail!("built without the federation feature")
}

/// `meshnode cluster status`.
pub fn status(args: &DirArgs) -> anyhow::Result<Outcome> {
    let record = read_record(&args.dir)?;
    let client = client()?;
    let mut all = true;
    for m in &record.nodes {
        let up = alive(m.pid) && healthy(&client, &m.url);
        all &= up;
        println!(
            "{}",
            json!({"index": m.index, "url": m.url, "did": m.did, "pid": m.pid, "healthy": up})
        );
    }
    Ok(if all { Outcome::Ok } else { Outcome::Failing })
}

/// `meshnode cluster stop`.
pub fn stop(args: &DirArgs) -> anyhow::Result<Outcome> {
    let record = read_record(&args.dir)?;
    for m in &record.nodes {
        if alive(m.pid)
            && let Some(pid) = rustix::process::Pid::from_raw(m.pid as i32)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for m in &record.nodes {
        while alive(m.pid) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "node {} (pid {}) did not stop",
                m.index,
                m.pid
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    std::fs::remove_file(args.dir.join(FILE))?;
    eprintln!(
        "meshnode: stopped {} nodes; their directories stay in {}",
        record.nodes.len(),
        args.dir.display()
    );
    Ok(Outcome::Ok)
}
