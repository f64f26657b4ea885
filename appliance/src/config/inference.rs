//! `[inference]`: the OpenAI-compatible endpoint's models, its quorum and the remote
//! executors it routes to or takes quorum members from.

use fleetmesh_proto::Mode;
use serde::{Deserialize, Serialize};

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

impl InferenceSection {
    /// `models`, their paths resolved against the node directory `dir`, with `extra`
    /// (`meshnode run --model`) after.
    pub fn models_in(
        &self,
        dir: &std::path::Path,
        extra: &[std::path::PathBuf],
    ) -> Vec<ModelEntry> {
        self.models
            .iter()
            .map(|m| m.resolved(dir))
            .chain(extra.iter().cloned().map(ModelEntry::Path))
            .collect()
    }
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
        /// The model these weights were converted from (quantized, rounded to f16 …), as
        /// the hex SHA-256 `model_digest` of the original's weights: the quorum treats this
        /// file as a build of that model (near-ties forgiven between its builds, any other
        /// model refused as `wrong-model`). Default: this file's own digest.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base_model_digest: Option<String>,
    },
}

impl ModelEntry {
    /// The weights' path.
    pub fn path(&self) -> &std::path::Path {
        match self {
            ModelEntry::Path(p) | ModelEntry::Named { path: p, .. } => p,
        }
    }

    /// The base model digest it states, as written (hex), if it states one.
    pub fn base_model_digest(&self) -> Option<&str> {
        match self {
            ModelEntry::Named {
                base_model_digest: Some(d),
                ..
            } => Some(d),
            _ => None,
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
            ModelEntry::Named {
                id,
                path,
                base_model_digest,
            } => ModelEntry::Named {
                id: id.clone(),
                path: dir.join(path),
                base_model_digest: base_model_digest.clone(),
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
    /// Both margins (nats) below this at a divergence between different builds of the same
    /// model make it a near-tie, not fraud. Default 0.1.
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
    /// The library's form. The quorum's model is the first executor's, the local model
    /// (its base digest).
    pub fn to_config(&self) -> fleetmesh_inference::quorum::QuorumConfig {
        fleetmesh_inference::quorum::QuorumConfig {
            near_tie_epsilon: self.near_tie_epsilon,
            logprob_tolerance: (self.logprob_tolerance > 0.0).then_some(self.logprob_tolerance),
            base_digest: None,
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
    /// Its model digest (hex SHA-256 of the weights), pinned: an answer stating another
    /// one makes it `wrong-model` (flagged) in the quorum. Default: what the server reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_digest: Option<String>,
    /// The model it serves across conversions (hex SHA-256 of the original weights: the
    /// local model's `base_model_digest`), pinned the same way; for a server that states
    /// none (vLLM), this is what grants it the near-tie allowance of a build of the same
    /// model. Default: what the server reports (fleetmesh nodes do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_model_digest: Option<String>,
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
            base_model_digest: None,
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
