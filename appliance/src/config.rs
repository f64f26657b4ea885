//! The node's configuration file, `meshnode.toml` in the node directory.
//!
//! Every key has a default, so a file with only `[node]` is complete. Unknown keys are
//! refused so that a typo never silently falls back to a default.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;
use fleetmesh_kernels::BackendChoice;
use fleetmesh_proto::{Endpoint, Mode, NodeClass};
use serde::{Deserialize, Serialize};

mod api;
mod ledger;
mod peering;
mod settlement;
pub use api::ApiSection;
pub use ledger::{Fault, LedgerSection};
#[cfg(feature = "federation")]
pub(crate) use peering::pem_certs;
pub use peering::{PeerSection, PeeringSection, ShardSection};
pub use settlement::{Backend, SettlementSection};

/// File name of the configuration inside a node directory.
pub const FILE: &str = "meshnode.toml";

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Who this node is in the federation.
    pub node: NodeSection,
    /// The node's one listener.
    pub face: FaceSection,
    /// The relay face's limits and rate limits (advertised in NIP-11).
    pub relay: fleetmesh_relay::limits::Limits,
    /// The store.
    pub store: StoreSection,
    /// Where MSM/NTT run.
    pub compute: ComputeSection,
    /// The models served on the OpenAI-compatible API.
    pub inference: InferenceSection,
    /// Who may call the HTTP APIs.
    pub api: ApiSection,
    /// How the node runs market jobs.
    pub jobs: JobsSection,
    /// The Blossom blob store.
    pub blobs: BlobsSection,
    /// A directory of manifests the daemon applies itself.
    pub manifests: ManifestsSection,
    /// DIDComm Messaging v2 at `POST /didcomm`: mediation, and the node's own mediator.
    pub didcomm: DidcommSection,
    /// Peers whose stores the node keeps reconciled with its own.
    pub peering: PeeringSection,
    /// The accountability ledger: windows, and the grant every linked peer gets.
    pub ledger: LedgerSection,
    /// How the node is paid: the Cashu mints its wallet trusts.
    pub settlement: SettlementSection,
}

/// `[didcomm]`: the node takes DIDComm v2 messages at `POST /didcomm` (compute/1.0 jobs
/// by DID, see [`crate::didcomm`]); it may hold messages for others (a mediator), and it
/// may itself be reached only through a mediator it picks its messages up from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DidcommSection {
    /// Hold forwarded messages for other DIDs until each picks them up (Message Pickup
    /// 3.0, a request signed by the DID's key): a mediator for firewalled nodes and for
    /// buyers. Held in `DIR/mediator.sqlite`, so a restart keeps them. Default false; true
    /// suits a backbone node.
    pub mediate: bool,
    /// Messages held per DID; past it the oldest is dropped. 1 to 100 000. Default 256.
    pub hold_per_did: usize,
    /// Bytes held for all DIDs together; past it a new message is refused (HTTP 507).
    /// 1 MiB to 4 GiB. Default 64 MiB.
    pub hold_bytes: u64,
    /// Seconds a held message waits for its pickup. 60 to 604 800. Default 86 400.
    pub hold_secs: u64,
    /// The mediator this node picks its messages up from (`did:nostr:HEX`), for a node
    /// others cannot reach: give `[node] endpoints` a `didcomm=did:nostr:HEX` so that
    /// senders route through it. Reached at `mediator_url`, or without one over the node's
    /// QUIC link to it (found by gossip: needs `[peering] quic_listen` and
    /// `gossip_listen`) — how a node nobody can dial uses a backbone. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mediator: Option<String>,
    /// The mediator's base URL (`https://mediator.example/`): its DID document is read
    /// from `/.well-known/did.json` there and must be `mediator`'s. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mediator_url: Option<String>,
    /// Seconds between pickups from the mediator. 1 to 3600. Default 2.
    pub pickup_secs: u64,
}

impl Default for DidcommSection {
    fn default() -> Self {
        DidcommSection {
            mediate: false,
            hold_per_did: 256,
            hold_bytes: 64 << 20,
            hold_secs: 86_400,
            mediator: None,
            mediator_url: None,
            pickup_secs: 2,
        }
    }
}

/// `[manifests]`: a directory of manifests (YAML or JSON, as `meshnode apply -f` reads
/// them) the daemon applies itself, e.g. one a configuration-management tool or a
/// Kubernetes ConfigMap mount keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ManifestsSection {
    /// Apply every `.yaml`, `.yml` and `.json` file in `dir` when the daemon starts and
    /// whenever one of them changes, as one `meshnode apply`: a bad file changes nothing
    /// and is logged and counted (`fleetmesh_manifest_applies_total{source="watch"}`). A
    /// file taken out of `dir` leaves its manifest applied. Default false.
    pub watch: bool,
    /// The directory; a relative path is taken from the node directory. Default
    /// `manifests.d`.
    pub dir: std::path::PathBuf,
    /// Seconds between looks at `dir`. 1 to 3600. Default 2.
    pub interval_secs: u64,
}

impl Default for ManifestsSection {
    fn default() -> Self {
        ManifestsSection {
            watch: false,
            dir: "manifests.d".into(),
            interval_secs: 2,
        }
    }
}

/// `[blobs]`: the Blossom blob store (`PUT /upload`, `GET /<sha256>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BlobsSection {
    /// Seconds an upload may go without sending a body byte; then it is cut off and its
    /// partial file removed. 1 to 3600. Default 30. Lower frees stalled uploads' disk space
    /// and connections sooner, and cuts off clients on slow links sooner too.
    pub body_timeout_secs: u64,
    /// Most peers `GET /v1/blobs/served` keeps a byte count for; past it the peer with the
    /// fewest bytes is dropped to make room. 1 to 1 000 000. Default 1024.
    pub served_peers: usize,
    /// Most bytes of blobs one key may hold (its uploads, each counted whole whoever else
    /// uploaded it too); an upload past it is refused 413 `quota` before its body is read
    /// when its length is declared, else when it is in. 1 MiB to 1 TiB. Default 1 GiB.
    pub per_key_bytes: u64,
}

impl Default for BlobsSection {
    fn default() -> Self {
        BlobsSection {
            body_timeout_secs: 30,
            served_peers: 1024,
            per_key_bytes: 1 << 30,
        }
    }
}

/// `[jobs]`: how many market jobs run at once and the most any may use
/// (`fleetmesh_market::service::JobLimits`). A job's limits are cut to these (never refused
/// for asking more); NIP-11 advertises them under `fleetmesh.jobs`, so buyers know.
pub use fleetmesh_market::service::JobLimits as JobsSection;

/// `[inference]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InferenceSection {
    /// Model directories or .gguf files to serve, each a path (served under its directory
    /// or file name) or `{ id = "NAME", path = "…" }`; relative paths are taken from the
    /// node directory. Default: none. `meshnode run --model PATH` and an InferenceRouter
    /// manifest add to them. Live: `meshnode ctl reload` loads added models and stops
    /// serving removed ones (requests in flight finish).
    pub models: Vec<ModelEntry>,
    /// Where models run: `auto` (default: a CUDA GPU when the build has candle's CUDA
    /// backend and one answers, else the CPU), `cpu`, `cuda:N`.
    pub device: String,
    /// Most generations of one model decoded together (continuous batching). Default 8.
    /// Larger raises throughput under load and each request's latency with it.
    pub max_batch: usize,
    /// Most requests per model admitted at once, generating or waiting; more get 503 with
    /// `Retry-After`. 1 to 100 000. Default 64.
    pub max_queue: usize,
    /// The verification mode of a request that names none: `none` (default) or
    /// `quasi-deterministic` (needs two remote executors for the model).
    pub verification: Verification,
    /// The quasi-deterministic quorum's thresholds.
    pub quorum: QuorumSection,
    /// Remote OpenAI-compatible executors, each standing in for one served model in the
    /// quorum (the local runtime runs first, then these in order). Default: none.
    pub executors: Vec<ExecutorSection>,
}

impl Default for InferenceSection {
    fn default() -> Self {
        InferenceSection {
            models: Vec::new(),
            device: "auto".into(),
            max_batch: 8,
            max_queue: 64,
            verification: Verification::None,
            quorum: QuorumSection::default(),
            executors: Vec::new(),
        }
    }
}

/// One served model: its path, served under the directory or file name, or a table naming
/// the id it is served under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ModelEntry {
    /// `"models/tiny"`.
    Path(std::path::PathBuf),
    /// `{ id = "tiny-demo", path = "models/tiny" }`.
    Named {
        /// The name buyers and clients ask for.
        id: String,
        /// Weights: a safetensors directory or a .gguf file.
        path: std::path::PathBuf,
    },
}

impl ModelEntry {
    /// The weights' path.
    pub fn path(&self) -> &std::path::Path {
        match self {
            ModelEntry::Path(p) | ModelEntry::Named { path: p, .. } => p,
        }
    }

    /// The name it is served under: its id, else the file or directory name.
    pub fn id(&self) -> Option<String> {
        match self {
            ModelEntry::Named { id, .. } => Some(id.clone()),
            ModelEntry::Path(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()),
        }
    }

    /// The same entry with its path taken from `dir` when relative.
    pub fn resolved(&self, dir: &std::path::Path) -> ModelEntry {
        match self {
            ModelEntry::Path(p) => ModelEntry::Path(dir.join(p)),
            ModelEntry::Named { id, path } => ModelEntry::Named {
                id: id.clone(),
                path: dir.join(path),
            },
        }
    }
}

/// A verification mode of the inference API: none, or one of the protocol's [`Mode`]s that
/// an answer can carry (its spellings are the protocol's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(try_from = "String", into = "String")]
pub enum Verification {
    /// The local runtime's output as it is.
    #[default]
    None,
    /// Greedy decoding on two executors, a third on disagreement; the output two agree on.
    QuasiDeterministic,
    /// The output with this host's TEE report bound to it (SEV-SNP through configfs-tsm).
    TeeAttestation,
    /// The output constrained to the request's JSON Schema and validated against it.
    SchemaBounds,
}

impl Verification {
    /// The protocol's mode, for all but `None`.
    pub fn mode(self) -> Option<Mode> {
        match self {
            Verification::None => None,
            Verification::QuasiDeterministic => Some(Mode::QuasiDeterministic),
            Verification::TeeAttestation => Some(Mode::TeeAttestation),
            Verification::SchemaBounds => Some(Mode::SchemaBounds),
        }
    }

    /// As written in configuration and requests.
    pub fn as_str(self) -> &'static str {
        self.mode().map_or("none", Mode::as_str)
    }
}

impl std::str::FromStr for Verification {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match (s, s.parse::<Mode>()) {
            ("none", _) => Ok(Verification::None),
            (_, Ok(Mode::QuasiDeterministic)) => Ok(Verification::QuasiDeterministic),
            (_, Ok(Mode::TeeAttestation)) => Ok(Verification::TeeAttestation),
            (_, Ok(Mode::SchemaBounds)) => Ok(Verification::SchemaBounds),
            (other, _) => Err(format!(
                "verification {other:?} is not one of none, quasi-deterministic, \
                 tee-attestation, schema-bounds"
            )),
        }
    }
}

impl TryFrom<String> for Verification {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Verification> for String {
    fn from(v: Verification) -> String {
        v.as_str().to_owned()
    }
}

/// `[inference.quorum]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QuorumSection {
    /// Both margins (nats) below this at a divergence between different builds make it a
    /// near-tie, not fraud. Default 0.1.
    pub near_tie_epsilon: f64,
    /// Most logprob difference (nats) between same-dtype executors of one token; 0 turns
    /// the check off. Default 0.001.
    pub logprob_tolerance: f64,
}

impl Default for QuorumSection {
    fn default() -> Self {
        let d = fleetmesh_inference::quorum::QuorumConfig::default();
        QuorumSection {
            near_tie_epsilon: d.near_tie_epsilon,
            logprob_tolerance: d.logprob_tolerance.unwrap_or(0.0),
        }
    }
}

impl QuorumSection {
    /// The library's form.
    pub fn to_config(&self) -> fleetmesh_inference::quorum::QuorumConfig {
        fleetmesh_inference::quorum::QuorumConfig {
            near_tie_epsilon: self.near_tie_epsilon,
            logprob_tolerance: (self.logprob_tolerance > 0.0).then_some(self.logprob_tolerance),
        }
    }
}

/// `[[inference.executors]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecutorSection {
    /// The name the verdict uses. Required.
    pub name: String,
    /// The server's base URL (`http://host:port`, `https://…`). Required.
    pub url: String,
    /// The model (its id on this node) this executor runs. Required. When a local model
    /// has that id the executor stands in for it in the quorum; otherwise the id is a
    /// **routed** model: requests for it are forwarded to its executors (those answering
    /// best first), unverified.
    pub serves: String,
    /// The API it speaks: `openai` (vLLM, another fleetmesh node, any OpenAI-compatible
    /// server; `vllm` is the same) or `ollama` (its native `/api/generate` in the quorum,
    /// its OpenAI layer when routed). Default `openai`.
    #[serde(default, skip_serializing_if = "ExecutorKind::is_default")]
    pub kind: ExecutorKind,
    /// The model id on the remote server. Default: the same as `serves`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Its engine (`vllm`, `fleetmesh-candle` …). Default: what the server reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Its dtype (`bf16`, `f32` …). Default: what the server reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    /// Its model digest (hex SHA-256 of the weights). Default: what the server reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_digest: Option<String>,
    /// Bearer token for the server. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Seconds a generation may take there. Default 120.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
    /// Seconds to wait for the connection. Default 5.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_s: u64,
}

impl Default for ExecutorSection {
    /// No name, URL or model; the default kind and timeouts.
    fn default() -> Self {
        ExecutorSection {
            name: String::new(),
            url: String::new(),
            serves: String::new(),
            kind: ExecutorKind::default(),
            model: None,
            engine: None,
            dtype: None,
            model_digest: None,
            api_key: None,
            timeout_s: default_timeout(),
            connect_timeout_s: default_connect_timeout(),
        }
    }
}

/// What a remote executor speaks (`[[inference.executors]] kind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// OpenAI's API with vLLM's extensions.
    #[default]
    #[serde(alias = "vllm")]
    Openai,
    /// Ollama.
    Ollama,
}

impl ExecutorKind {
    #[allow(clippy::trivially_copy_pass_by_ref)]
    fn is_default(&self) -> bool {
        *self == ExecutorKind::Openai
    }

    /// The library's form.
    pub fn remote_kind(self) -> fleetmesh_inference::remote::RemoteKind {
        match self {
            ExecutorKind::Openai => fleetmesh_inference::remote::RemoteKind::OpenAi,
            ExecutorKind::Ollama => fleetmesh_inference::remote::RemoteKind::Ollama,
        }
    }
}

fn default_timeout() -> u64 {
    120
}

fn default_connect_timeout() -> u64 {
    5
}

/// `[store]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct StoreSection {
    /// `process` (default): a committed event survives the process being killed, and the
    /// last commits may be lost on power failure (SQLite WAL, synchronous=NORMAL).
    /// `power`: every commit is fsynced (synchronous=FULL); slower ingest.
    pub durability: fleetmesh_relay::store::Durability,
}

/// `[node]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSection {
    /// A human-readable name, served in NIP-11. Default: `fleetmesh node <pubkey prefix>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// backbone, community (holds `[[peering.shards]]`), edge or leaf. Default: edge.
    pub class: NodeClass,
    /// The operator's Nostr public key (hex). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Relays this node publishes to. Default: none.
    pub relays: Vec<String>,
    /// Endpoints this node is reachable at. Default: none.
    pub endpoints: Vec<Endpoint>,
}

/// `[face]`: the one listener. None of it is reloadable: restart to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaceSection {
    /// Address of the one listener (the relay WebSocket, NIP-11, the HTTP APIs, health
    /// and metrics). Default: 127.0.0.1:7777.
    pub listen: SocketAddr,
    /// Seconds a connection may take to send a complete request head; also how long an
    /// idle keep-alive connection is kept. 1 to 300. Default 10.
    pub header_timeout_secs: u64,
    /// Most connections open at once (WebSockets included); more are closed on accept.
    /// Keep it under the process's file limit (`ulimit -n`). 1 to 1 000 000. Default 512.
    pub max_connections: usize,
    /// Most connections open at once from one IP address. 1 to `max_connections`.
    /// Default 64.
    pub max_connections_per_ip: usize,
    /// Addresses `max_connections_per_ip` does not apply to (they still count under
    /// `max_connections`): a reverse proxy on the box, whose clients all arrive from its
    /// address (Caddy on the disk image). Default `["127.0.0.1", "::1"]`; add a container
    /// bridge's gateway when a published port's clients arrive from it, or set `[]` to cap
    /// loopback clients too.
    pub per_ip_exempt: Vec<std::net::IpAddr>,
    /// Seconds requests in flight may take to finish once a stop is asked for; then the
    /// rest are closed (queued events are committed either way). 0 to 3600. Default 10.
    pub shutdown_secs: u64,
    /// Origins whose web pages may open the relay's WebSocket (browser Nostr clients);
    /// `"*"` for any. Clients that send no `Origin` (not browsers) are always served.
    /// Default `["*"]`.
    pub websocket_origins: Vec<String>,
}

/// The default listener address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7777";

impl Default for FaceSection {
    fn default() -> Self {
        FaceSection {
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            header_timeout_secs: 10,
            max_connections: 512,
            max_connections_per_ip: 64,
            per_ip_exempt: vec![
                std::net::Ipv4Addr::LOCALHOST.into(),
                std::net::Ipv6Addr::LOCALHOST.into(),
            ],
            shutdown_secs: 10,
            websocket_origins: vec!["*".into()],
        }
    }
}

/// `[compute]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct ComputeSection {
    /// auto, cpu, wgpu or cuda:N. Default: auto (CUDA, else a hardware GPU, else CPU).
    #[serde(with = "backend_str")]
    pub backend: BackendChoice,
}

mod backend_str {
    use fleetmesh_kernels::BackendChoice;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(b: &BackendChoice, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(b)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BackendChoice, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

const HEADER: &str = "\
# fleetmesh node configuration. Every key is optional; see docs/architecture.md.
# Changes take effect on the next `meshnode run`.
";

impl Config {
    /// Reads, parses and checks `DIR/meshnode.toml`.
    pub fn load(dir: &Path) -> anyhow::Result<Config> {
        let path = dir.join(FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let config: Config =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        config
            .check()
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        Ok(config)
    }

    /// Checks every numeric setting against the bound it really has, so a bad value stops
    /// the node at start-up, naming the key, rather than failing later.
    ///
    /// # Errors
    /// `[section] key = value: why` for the first setting out of range.
    pub fn check(&self) -> Result<(), String> {
        fn range(key: &str, v: u64, lo: u64, hi: u64) -> Result<(), String> {
            if v < lo || v > hi {
                return Err(format!("{key} = {v}: must be between {lo} and {hi}"));
            }
            Ok(())
        }
        self.relay.check().map_err(|e| format!("[relay] {e}"))?;
        let f = &self.face;
        range("[face] header_timeout_secs", f.header_timeout_secs, 1, 300)?;
        range(
            "[face] max_connections",
            f.max_connections as u64,
            1,
            1_000_000,
        )?;
        range(
            "[face] max_connections_per_ip",
            f.max_connections_per_ip as u64,
            1,
            f.max_connections as u64,
        )?;
        range("[face] shutdown_secs", f.shutdown_secs, 0, 3600)?;
        if let Some(t) = &self.api.token
            && (t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err("[api] token: must be at least 16 characters, without spaces".to_string());
        }
        let j = &self.jobs;
        range("[jobs] workers", j.workers as u64, 1, 64)?;
        range("[jobs] max_fuel", j.max_fuel, 1, 1_000_000_000_000_000)?;
        range("[jobs] max_wall_secs", j.max_wall_secs, 1, 86_400)?;
        range("[jobs] per_buyer", j.per_buyer, 1, 100_000)?;
        range(
            "[jobs] max_memory_bytes",
            j.max_memory_bytes,
            1 << 20,
            4 << 30,
        )?;
        range(
            "[jobs] max_output_bytes",
            j.max_output_bytes,
            1 << 10,
            1 << 30,
        )?;
        range("[jobs] max_tokens", j.max_tokens, 1, 1_000_000)?;
        range(
            "[jobs] max_input_bytes",
            j.max_input_bytes,
            1 << 10,
            1 << 30,
        )?;
        if j.engines.is_empty() || j.modes.is_empty() {
            return Err("[jobs] engines and modes: each names at least one".to_string());
        }
        for (engine, price) in &j.prices {
            if engine.parse::<fleetmesh_proto::Engine>().is_err() {
                return Err(format!(
                    "[jobs.prices] {engine:?}: not an engine (wasm, groth16-prove, \
                     groth16-verify, llm, data)"
                ));
            }
            if !fleetmesh_market::service::MEASURES.contains(&price.per.as_str()) {
                return Err(format!(
                    "[jobs.prices.{engine}] per = {:?}: one of {}",
                    price.per,
                    fleetmesh_market::service::MEASURES.join(", ")
                ));
            }
            if price.quantity == 0 {
                return Err(format!("[jobs.prices.{engine}] quantity: at least 1"));
            }
        }
        range(
            "[manifests] interval_secs",
            self.manifests.interval_secs,
            1,
            3600,
        )?;
        self.peering.check()?;
        self.ledger.check()?;
        self.settlement.check()?;
        self.api.check()?;
        if !self.api.prices.is_empty()
            && self.settlement.lightning.backend == Backend::Cashu
            && self.settlement.mints.is_empty()
        {
            return Err(
                "[api.prices] is set but nothing can issue its invoices: set [settlement] \
                 mints (the Cashu mint's invoices) or [settlement.lightning] backend = \
                 \"lnd\" or \"cln\""
                    .into(),
            );
        }
        if !self.jobs.prices.is_empty() && self.settlement.mints.is_empty() {
            return Err(
                "[jobs.prices] is set but [settlement] mints is empty: a priced job \
                        could never be paid"
                    .into(),
            );
        }
        let d = &self.didcomm;
        range("[didcomm] hold_per_did", d.hold_per_did as u64, 1, 100_000)?;
        range("[didcomm] hold_bytes", d.hold_bytes, 1 << 20, 4 << 30)?;
        range("[didcomm] hold_secs", d.hold_secs, 60, 604_800)?;
        range("[didcomm] pickup_secs", d.pickup_secs, 1, 3600)?;
        match (&d.mediator, &d.mediator_url) {
            (None, None) => {}
            (Some(m), Some(url)) => {
                fleetmesh_proto::did::parse_did(m)
                    .map_err(|e| format!("[didcomm] mediator: {e}"))?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "[didcomm] mediator_url = {url:?}: an http:// or https:// URL"
                    ));
                }
            }
            (Some(m), None) => {
                fleetmesh_proto::did::parse_did(m)
                    .map_err(|e| format!("[didcomm] mediator: {e}"))?;
                // picked up over the QUIC link to the mediator, found by gossip
                if !cfg!(feature = "federation")
                    || self.peering.quic_listen.is_none()
                    || self.peering.gossip_listen.is_none()
                {
                    return Err(
                        "[didcomm] mediator without mediator_url is reached over a QUIC \
                                link: it needs [peering] quic_listen and gossip_listen (or give \
                                mediator_url)"
                            .to_string(),
                    );
                }
            }
            (None, Some(_)) => {
                return Err("[didcomm] mediator_url needs mediator".to_string());
            }
        }
        if !self.peering.shards.is_empty() && self.node.class != NodeClass::Community {
            return Err(format!(
                "[[peering.shards]]: only a community node holds authoritative shards; this \
                 one is [node] class = \"{}\"",
                self.node.class.as_str()
            ));
        }
        range(
            "[blobs] body_timeout_secs",
            self.blobs.body_timeout_secs,
            1,
            3600,
        )?;
        range(
            "[blobs] served_peers",
            self.blobs.served_peers as u64,
            1,
            1_000_000,
        )?;
        range(
            "[blobs] per_key_bytes",
            self.blobs.per_key_bytes,
            1 << 20,
            1 << 40,
        )?;
        let i = &self.inference;
        range("[inference] max_batch", i.max_batch as u64, 1, 256)?;
        range("[inference] max_queue", i.max_queue as u64, 1, 100_000)?;
        for (key, v) in [
            (
                "[inference.quorum] near_tie_epsilon",
                i.quorum.near_tie_epsilon,
            ),
            (
                "[inference.quorum] logprob_tolerance",
                i.quorum.logprob_tolerance,
            ),
        ] {
            if !v.is_finite() || !(0.0..=100.0).contains(&v) {
                return Err(format!("{key} = {v}: must be a number between 0 and 100"));
            }
        }
        for e in &i.executors {
            range("[[inference.executors]] timeout_s", e.timeout_s, 1, 86_400)?;
            range(
                "[[inference.executors]] connect_timeout_s",
                e.connect_timeout_s,
                1,
                600,
            )?;
        }
        Ok(())
    }

    /// The file's text, with a header comment.
    pub fn to_toml(&self) -> String {
        format!(
            "{HEADER}\n{}",
            toml::to_string_pretty(self).expect("config serializes")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{InferenceSection, Verification};

    #[test]
    fn verification_is_none_or_a_protocol_mode_an_answer_can_carry() {
        for v in [
            Verification::None,
            Verification::QuasiDeterministic,
            Verification::TeeAttestation,
            Verification::SchemaBounds,
        ] {
            assert_eq!(v.as_str().parse(), Ok(v));
            let section: InferenceSection =
                toml::from_str(&format!("verification = {:?}", v.as_str())).unwrap();
            assert_eq!(section.verification, v);
            assert_eq!(
                v.mode().map(|m| m.as_str()),
                (v != Verification::None).then(|| v.as_str())
            );
        }
        // Modes of the protocol that no inference answer carries, and misspellings.
        for bad in ["proof", "delivery", "Quasi-Deterministic", ""] {
            assert!(bad.parse::<Verification>().is_err(), "{bad}");
        }
        let e = toml::from_str::<InferenceSection>("verification = \"proof\"").unwrap_err();
        assert!(e.to_string().contains("is not one of none"), "{e}");
    }
}
