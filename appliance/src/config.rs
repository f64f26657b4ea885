//! The node's configuration file, `meshnode.toml` in the node directory.
//!
//! Every key has a default, so a file with only `[node]` is complete. Unknown keys are
//! refused so that a typo never silently falls back to a default.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context as _;
use fleetmesh_kernels::BackendChoice;
use fleetmesh_relay::{Endpoint, NodeClass};
use serde::{Deserialize, Serialize};

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
}

/// `[inference]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InferenceSection {
    /// Model directories or .gguf files to serve (each under its directory or file name);
    /// relative paths are taken from the node directory. Default: none. `meshnode run
    /// --model PATH` adds to them.
    pub models: Vec<std::path::PathBuf>,
    /// Where models run: `auto` (default: a CUDA GPU when the build has candle's CUDA
    /// backend and one answers, else the CPU), `cpu`, `cuda:N`.
    pub device: String,
    /// Most generations of one model decoded together (continuous batching). Default 8.
    /// Larger raises throughput under load and each request's latency with it.
    pub max_batch: usize,
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
            verification: Verification::None,
            quorum: QuorumSection::default(),
            executors: Vec::new(),
        }
    }
}

/// A verification mode of the inference API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
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

impl std::str::FromStr for Verification {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Verification::None),
            "quasi-deterministic" => Ok(Verification::QuasiDeterministic),
            "tee-attestation" => Ok(Verification::TeeAttestation),
            "schema-bounds" => Ok(Verification::SchemaBounds),
            other => Err(format!(
                "verification {other:?} is not one of none, quasi-deterministic, \
                 tee-attestation, schema-bounds"
            )),
        }
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
    /// The served model (its id on this node) this executor runs. Required.
    pub serves: String,
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
    /// backbone, edge or leaf. Default: edge.
    pub class: NodeClass,
    /// The operator's Nostr public key (hex). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// Relays this node publishes to. Default: none.
    pub relays: Vec<String>,
    /// Endpoints this node is reachable at. Default: none.
    pub endpoints: Vec<Endpoint>,
}

/// `[face]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaceSection {
    /// Address of the one listener (NIP-11, health, and later the relay WebSocket, HTTP
    /// APIs and metrics). Default: 127.0.0.1:7777. Not reloadable: restart to change.
    pub listen: SocketAddr,
}

/// The default listener address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7777";

impl Default for FaceSection {
    fn default() -> Self {
        FaceSection {
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
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
    /// Reads and parses `DIR/meshnode.toml`.
    pub fn load(dir: &Path) -> anyhow::Result<Config> {
        let path = dir.join(FILE);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// The file's text, with a header comment.
    pub fn to_toml(&self) -> String {
        format!(
            "{HEADER}\n{}",
            toml::to_string_pretty(self).expect("config serializes")
        )
    }
}
