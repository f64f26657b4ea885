//! `meshnode infer`: one generation on the local runtime — or, with `--verify
//! quasi-deterministic`, on the local runtime and remote executors under the quorum —
//! printed as a JSON line with its transcript (and verdict).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleetmesh_inference::executor::{ExecRequest, Executor, LocalExecutor};
use fleetmesh_inference::model::model_digest;
use fleetmesh_inference::quorum::{QuorumConfig, run_quorum};
use fleetmesh_inference::remote::{RemoteConfig, RemoteExecutor};
use fleetmesh_inference::{Batcher, Llama, Sampling, TextTokenizer, generate};

use crate::Outcome;
use crate::config::Verification;

/// A model and its tokenizer, from a model directory (`config.json`, `model.safetensors`,
/// `tokenizer.json`) or a GGUF file (`tokenizer.json` beside it), on `device` (`auto`,
/// `cpu`, `cuda:N`).
pub fn load(path: &Path, device: &str) -> anyhow::Result<(Llama, TextTokenizer, [u8; 32])> {
    let on = fleetmesh_inference::model::device(device)?;
    let (model, tokenizer_path) = if path.is_dir() {
        (Llama::load_dir(path)?, path.join("tokenizer.json"))
    } else if path.extension().is_some_and(|e| e == "gguf") {
        let beside = path
            .parent()
            .unwrap_or(Path::new("."))
            .join("tokenizer.json");
        (Llama::load_gguf(path)?, beside)
    } else {
        anyhow::bail!("{}: not a model directory or a .gguf file", path.display());
    };
    let tokenizer = TextTokenizer::load(&tokenizer_path)
        .with_context(|| format!("the model's tokenizer ({})", tokenizer_path.display()))?;
    let digest = model_digest(path)?;
    Ok((model.to_device(&on)?, tokenizer, digest))
}

/// What `meshnode infer` was asked.
pub struct InferArgs {
    /// Model directory or GGUF file.
    pub model: PathBuf,
    /// Prompt text.
    pub prompt: String,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// Sampling (temperature 0 is greedy).
    pub sampling: Sampling,
    /// The verification mode.
    pub verify: Verification,
    /// Remote executors' base URLs, for the quorum.
    pub executors: Vec<String>,
    /// The model's id on the remote executors (default: the local model's name).
    pub remote_model: Option<String>,
    /// How long a remote executor may take.
    pub executor_timeout: Duration,
    /// Where the model runs: auto, cpu, cuda:N.
    pub device: String,
}

/// Runs one generation and prints it; exit 1 when the quorum accepts no output.
pub fn run(args: &InferArgs) -> anyhow::Result<Outcome> {
    let (model, tokenizer, digest) = load(&args.model, &args.device)?;
    let prompt = tokenizer.encode(&args.prompt)?;
    let model_name = args
        .model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = serde_json::json!({
        "model": args.model.display().to_string(),
        "model_digest": hex::encode(digest),
        "prompt_token_ids": prompt,
    });
    let eos = model.config().eos_token_id.clone();
    let (steps, transcript_digest) = match args.verify {
        Verification::None => {
            if !args.executors.is_empty() {
                anyhow::bail!("--executor is for --verify quasi-deterministic");
            }
            let t = generate(
                &model,
                digest,
                &prompt,
                args.max_tokens,
                &eos,
                &args.sampling,
            )?;
            let d = t.digest();
            (t.steps, d)
        }
        Verification::TeeAttestation => {
            anyhow::bail!("--verify tee-attestation is served by the node's API (meshnode run)")
        }
        Verification::QuasiDeterministic => {
            if args.sampling.temperature != 0.0 {
                anyhow::bail!(
                    "quasi-deterministic verification decodes greedily: drop --temperature"
                );
            }
            let batcher = Arc::new(Batcher::new(Arc::new(model), digest, 1));
            let local = LocalExecutor::new("local", batcher);
            let remotes = args
                .executors
                .iter()
                .enumerate()
                .map(|(i, url)| {
                    let mut c = RemoteConfig::new(
                        format!("remote-{}", i + 1),
                        url.clone(),
                        args.remote_model
                            .clone()
                            .unwrap_or_else(|| model_name.clone()),
                    );
                    c.timeout = args.executor_timeout;
                    RemoteExecutor::new(c)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut executors: Vec<&dyn Executor> = vec![&local];
            executors.extend(remotes.iter().map(|r| r as &dyn Executor));
            let req = ExecRequest {
                prompt: prompt.clone(),
                max_tokens: args.max_tokens,
                stop_ids: eos,
            };
            let v = run_quorum(&executors, &req, &QuorumConfig::default())?;
            out["verdict"] = v.to_json();
            match v.output {
                Some(e) => {
                    let d = e.transcript_digest(&prompt);
                    (e.steps, d)
                }
                None => {
                    println!("{out}");
                    eprintln!("meshnode: no two executors agreed; no output is accepted");
                    return Ok(Outcome::Negative);
                }
            }
        }
    };
    let ids: Vec<u32> = steps.iter().map(|s| s.id).collect();
    out["token_ids"] = serde_json::json!(ids);
    out["text"] = serde_json::json!(tokenizer.decode(&ids)?);
    out["logprobs"] = serde_json::json!(steps.iter().map(|s| s.logprob).collect::<Vec<_>>());
    out["margins"] = serde_json::json!(steps.iter().map(|s| s.margin).collect::<Vec<_>>());
    out["transcript_digest"] = serde_json::json!(hex::encode(transcript_digest));
    println!("{out}");
    Ok(Outcome::Ok)
}
