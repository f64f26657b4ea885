//! Executors: whatever can run a greedy generation and hand back its record — the local
//! runtime ([`LocalExecutor`]) or a remote OpenAI-compatible endpoint
//! ([`crate::remote::RemoteExecutor`], feature `remote`). The quorum mode
//! ([`crate::quorum`]) compares what several of them return.

use std::sync::Arc;

use crate::batch::{Batcher, Job};
use crate::generate::{Sampling, Step, Transcript};
use crate::schema::{Constraint, Grammar, TokenVocab};
use crate::{Error, Result};

/// What an executor says it runs. Two executors with the same model digest, engine and
/// dtype must produce the same greedy ids; other builds of the same model (the same
/// [`Build::base_digest`]) may part at near-ties; builds of another model may not take
/// part at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    /// SHA-256 of the weight files, when the executor states it.
    pub model_digest: Option<[u8; 32]>,
    /// The model's identity across conversions: the digest of the weights this build was
    /// made from (its own digest for original weights, the original's for a quantized or
    /// rounded copy), when stated. An F32, a BF16 and a Q8 file of one model have three
    /// model digests and one base digest.
    pub base_digest: Option<[u8; 32]>,
    /// The inference engine, e.g. `fleetmesh-candle`, `vllm`, `ollama`.
    pub engine: String,
    /// The dtype of the forward pass, e.g. `f32`, `bf16`, `q4_k`.
    pub dtype: String,
}

impl Build {
    /// Whether `self` and `other` are the same build: both model digests known and equal,
    /// same engine, same dtype.
    pub fn same_as(&self, other: &Build) -> bool {
        self.model_digest.is_some()
            && self.model_digest == other.model_digest
            && self.engine == other.engine
            && self.dtype == other.dtype
    }

    /// Whether `self` and `other` are builds of one model: both base digests known and
    /// equal.
    pub fn same_model(&self, other: &Build) -> bool {
        self.base_digest.is_some() && self.base_digest == other.base_digest
    }
}

/// A digest in lowercase hex, as verdicts and answers write them.
pub(crate) fn hex32(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The name of this crate's runtime; [`crate::model::engine_name`] adds the device.
pub const ENGINE: &str = "fleetmesh-candle";

/// A greedy generation to run on each executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    /// The prompt's ids (every executor must share the tokenizer).
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Ids that end the generation once generated (e.g. end of sequence).
    pub stop_ids: Vec<u32>,
    /// A JSON Schema the output must be valid under (`schema-bounds`): the local runtime
    /// constrains its decoding to it, a remote executor gets it as OpenAI's
    /// `response_format`; either way the caller validates what comes back.
    pub schema: Option<serde_json::Value>,
}

/// What one executor returned.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The executor's name.
    pub executor: String,
    /// What it says it runs.
    pub build: Build,
    /// Each generated token with its logprob and top-1/top-2 margin.
    pub steps: Vec<Step>,
}

impl Execution {
    /// The generated ids.
    pub fn ids(&self) -> Vec<u32> {
        self.steps.iter().map(|s| s.id).collect()
    }

    /// The transcript digest over (model digest, prompt ids, output ids); the model digest
    /// counts as 32 zero bytes when the executor did not state one.
    pub fn transcript_digest(&self, prompt: &[u32]) -> [u8; 32] {
        Transcript {
            model_digest: self.build.model_digest.unwrap_or([0; 32]),
            prompt: prompt.to_vec(),
            steps: self.steps.clone(),
        }
        .digest()
    }
}

/// Runs greedy generations. Implementations must be callable from several threads at once
/// (the quorum runs two executors side by side).
pub trait Executor: Send + Sync {
    /// The name the verdict uses for this executor.
    fn name(&self) -> &str;

    /// What it says it runs.
    fn build(&self) -> Build;

    /// Runs `req` with greedy decoding (temperature 0, ties to the lowest id).
    ///
    /// # Errors
    /// Whatever stopped it: a refused request, an unreachable or failing endpoint, a
    /// timeout.
    fn run(&self, req: &ExecRequest) -> Result<Execution>;
}

/// The local runtime behind a [`Batcher`].
#[derive(Debug, Clone)]
pub struct LocalExecutor {
    name: String,
    batcher: Arc<Batcher>,
    dtype: String,
    base_digest: Option<[u8; 32]>,
    vocab: Option<Arc<TokenVocab>>,
}

impl LocalExecutor {
    /// An executor named `name` running on `batcher`'s model, reporting the model's dtype
    /// ([`crate::Llama::dtype`]: `f32`, `bf16`, `q4_k_m` …).
    pub fn new(name: impl Into<String>, batcher: Arc<Batcher>) -> LocalExecutor {
        LocalExecutor {
            name: name.into(),
            dtype: batcher.model().dtype().to_owned(),
            batcher,
            base_digest: None,
            vocab: None,
        }
    }
}

impl LocalExecutor {
    /// States `digest` as the model's base digest (the weights these were converted
    /// from) instead of the batcher's own model digest.
    pub fn with_base_digest(mut self, digest: [u8; 32]) -> LocalExecutor {
        self.base_digest = Some(digest);
        self
    }
}

impl LocalExecutor {
    /// Reports `dtype` instead of the model's: for weights converted before loading
    /// (rounded from f16 or bf16, dequantized from a GGUF quantization), which make it
    /// another build.
    pub fn with_dtype(mut self, dtype: impl Into<String>) -> LocalExecutor {
        self.dtype = dtype.into();
        self
    }
}

impl LocalExecutor {
    /// Lets it take requests with a schema: `vocab` holds the model's token bytes.
    pub fn with_vocab(mut self, vocab: Arc<TokenVocab>) -> LocalExecutor {
        self.vocab = Some(vocab);
        self
    }
}

impl Executor for LocalExecutor {
    fn name(&self) -> &str {
        &self.name
    }

    fn build(&self) -> Build {
        Build {
            model_digest: Some(self.batcher.model_digest()),
            base_digest: Some(
                self.base_digest
                    .unwrap_or_else(|| self.batcher.model_digest()),
            ),
            engine: crate::model::engine_name(self.batcher.model().device()),
            dtype: self.dtype.clone(),
        }
    }

    fn run(&self, req: &ExecRequest) -> Result<Execution> {
        let constraint = match (&req.schema, &self.vocab) {
            (None, _) => None,
            (Some(schema), Some(vocab)) => Some(Constraint::new(
                Arc::new(Grammar::compile(schema)?),
                vocab.clone(),
                req.stop_ids.clone(),
            )),
            (Some(_), None) => {
                return Err(Error::Executor {
                    executor: self.name.clone(),
                    reason: "constrained decoding needs the model's vocabulary (with_vocab)".into(),
                });
            }
        };
        let stop = req.stop_ids.clone();
        let t = self.batcher.run(Job {
            prompt: req.prompt.clone(),
            max_tokens: req.max_tokens,
            sampling: Sampling::default(),
            top_logprobs: 0,
            on_step: Some(Box::new(move |ids: &[u32]| {
                ids.last().is_some_and(|id| stop.contains(id))
            })),
            constraint,
        })?;
        Ok(Execution {
            executor: self.name.clone(),
            build: self.build(),
            steps: t.steps,
        })
    }
}
