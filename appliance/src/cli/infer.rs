//! `meshnode infer`: one generation on the local runtime — or, with `--verify
//! quasi-deterministic`, on the local runtime and remote executors under the quorum; with
//! `--schema`, constrained to a JSON Schema here or on one remote executor and validated —
//! printed as a JSON line with its transcript (and verdict).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fleetmesh_inference::batch::Job;
use fleetmesh_inference::executor::{ExecRequest, Executor, LocalExecutor};
use fleetmesh_inference::quorum::{QuorumConfig, run_quorum};
use fleetmesh_inference::remote::{RemoteConfig, RemoteExecutor};
use fleetmesh_inference::schema::{Constraint, Grammar, TokenVocab, Whitespace};
use fleetmesh_inference::{Batcher, Llama, Sampling, Step, TextTokenizer, generate};

use crate::cli::Outcome;
use crate::config::Verification;

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
    /// Remote executors' base URLs, for the quorum (or one, for `--schema`).
    pub executors: Vec<String>,
    /// A JSON Schema file the output must be valid under.
    pub schema: Option<PathBuf>,
    /// Whitespace the constrained local model may write between tokens.
    pub whitespace: Whitespace,
    /// The model's id on the remote executors (default: the local model's name).
    pub remote_model: Option<String>,
    /// How long a remote executor may take.
    pub executor_timeout: Duration,
    /// The quorum's model: the digest of the weights this file was converted from
    /// (default: its own digest).
    pub base_model_digest: Option<[u8; 32]>,
    /// Where the model runs: auto, cpu, cuda:N.
    pub device: String,
}

impl InferArgs {
    /// What the flags of `meshnode infer` ask.
    ///
    /// # Errors
    /// An unknown `--verify` mode, or a `--base-model-digest` that is not 64 hex digits.
    pub fn from_flags(a: crate::cli::InferArgs) -> anyhow::Result<InferArgs> {
        Ok(InferArgs {
            verify: a.verify.parse().map_err(|e: String| anyhow::anyhow!(e))?,
            model: a.model,
            prompt: a.prompt,
            max_tokens: a.max_tokens,
            sampling: Sampling {
                temperature: a.temperature,
                top_p: a.top_p,
                top_k: a.top_k,
                seed: a.seed,
            },
            executors: a.executor,
            schema: a.schema,
            whitespace: match a.whitespace.as_str() {
                "any" => Whitespace::Any,
                "none" => Whitespace::None,
                _ => Whitespace::Compact,
            },
            remote_model: a.remote_model,
            executor_timeout: Duration::from_secs(a.executor_timeout.max(1)),
            base_model_digest: a
                .base_model_digest
                .map(|h| crate::models::digest_hex(&h, "--base-model-digest"))
                .transpose()?,
            device: a.device,
        })
    }
}

/// Runs one generation and prints it; exit 1 when the quorum accepts no output.
pub fn run(args: &InferArgs) -> anyhow::Result<Outcome> {
    if args.base_model_digest.is_some() && args.verify != Verification::QuasiDeterministic {
        anyhow::bail!("--base-model-digest is for --verify quasi-deterministic");
    }
    let verify = match (&args.schema, args.verify) {
        (Some(_), Verification::None | Verification::SchemaBounds) => Verification::SchemaBounds,
        (Some(_), other) => anyhow::bail!("--schema is schema-bounds verification, not {other:?}"),
        (None, Verification::SchemaBounds) => {
            anyhow::bail!("--verify schema-bounds needs --schema FILE")
        }
        (None, other) => other,
    };
    let (model, loaded) = Loaded::new(args)?;
    let mut out = serde_json::json!({
        "model": args.model.display().to_string(),
        "model_digest": hex::encode(loaded.digest),
        "dtype": model.dtype(),
        "prompt_token_ids": loaded.prompt,
    });
    let generated = match verify {
        Verification::SchemaBounds => schema_bounds(args, model, &loaded, &mut out)?,
        Verification::None => {
            if !args.executors.is_empty() {
                anyhow::bail!("--executor is for --verify quasi-deterministic");
            }
            let t = generate(
                &model,
                loaded.digest,
                &loaded.prompt,
                args.max_tokens,
                &loaded.eos,
                &args.sampling,
            )?;
            let d = t.digest();
            Some((t.steps, d))
        }
        Verification::TeeAttestation => {
            anyhow::bail!("--verify tee-attestation is served by the node's API (meshnode run)")
        }
        Verification::QuasiDeterministic => quorum(args, model, &loaded, &mut out)?,
    };
    let Some((steps, transcript_digest)) = generated else {
        return Ok(Outcome::Negative);
    };
    let ids: Vec<u32> = steps.iter().map(|s| s.id).collect();
    out["token_ids"] = serde_json::json!(ids);
    out["text"] = serde_json::json!(loaded.tokenizer.decode(&ids)?);
    out["logprobs"] = serde_json::json!(steps.iter().map(|s| s.logprob).collect::<Vec<_>>());
    out["margins"] = serde_json::json!(steps.iter().map(|s| s.margin).collect::<Vec<_>>());
    out["transcript_digest"] = serde_json::json!(hex::encode(transcript_digest));
    println!("{out}");
    Ok(Outcome::Ok)
}

/// A generation's steps and transcript digest, or `None` when its verdict refused it (the
/// answer and the reason already printed).
type Generated = Option<(Vec<Step>, [u8; 32])>;

/// What one run uses beside the model: its tokenizer, digest, the prompt encoded and the
/// end-of-sequence ids.
struct Loaded {
    tokenizer: TextTokenizer,
    digest: [u8; 32],
    prompt: Vec<u32>,
    eos: Vec<u32>,
    /// The model file's name: its id on remote executors unless `--remote-model` says.
    name: String,
}

impl Loaded {
    /// The model in `--model`, loaded on `--device`, and what goes with it.
    fn new(args: &InferArgs) -> anyhow::Result<(Llama, Loaded)> {
        let loading = crate::cli::progress::Progress::new("meshnode: infer");
        loading.say(&format!("meshnode: loading {}", args.model.display()));
        let (model, tokenizer, digest) = crate::models::load(&args.model, &args.device)?;
        loading.finish(&format!(
            "meshnode: model {} loaded ({}, {:.1} MiB of weights)",
            hex::encode(digest),
            model.dtype(),
            model.weight_bytes() as f64 / (1 << 20) as f64
        ));
        // as transformers' tokenizer(prompt) and vLLM: with the special tokens (a Llama's BOS)
        let prompt = tokenizer.encode_with(&args.prompt, true)?;
        let eos = model.config().eos_token_id.clone();
        let name = args
            .model
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok((
            model,
            Loaded {
                tokenizer,
                digest,
                prompt,
                eos,
                name,
            },
        ))
    }

    /// A remote executor named `name` at `url`, asked for this model.
    fn remote(&self, args: &InferArgs, name: String, url: &str) -> anyhow::Result<RemoteExecutor> {
        let model = args
            .remote_model
            .clone()
            .unwrap_or_else(|| self.name.clone());
        let mut c = RemoteConfig::new(name, url.to_owned(), model);
        c.timeout = args.executor_timeout;
        Ok(RemoteExecutor::new(c)?)
    }
}

/// `--schema`: decoding constrained to the schema, on the local model or on one remote
/// executor, and the output validated (exit 1 when it is not valid).
fn schema_bounds(
    args: &InferArgs,
    model: Llama,
    loaded: &Loaded,
    out: &mut serde_json::Value,
) -> anyhow::Result<Generated> {
    let path = args.schema.as_ref().expect("schema-bounds has --schema");
    let schema: serde_json::Value = serde_json::from_slice(
        &std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
    )
    .with_context(|| format!("{}: not JSON", path.display()))?;
    let grammar = Arc::new(
        Grammar::compile(&schema)
            .with_context(|| format!("{}", path.display()))?
            .with_whitespace(args.whitespace),
    );
    let (prompt, eos, tokenizer) = (&loaded.prompt, &loaded.eos, &loaded.tokenizer);
    let (steps, digest, by) = match args.executors.as_slice() {
        [] => {
            let batcher = Batcher::new(Arc::new(model), loaded.digest, 1);
            let vocab = Arc::new(TokenVocab::new(&tokenizer.token_bytes()));
            // a vocabulary that cannot spell the schema is refused before generating
            vocab
                .writes(&grammar)
                .with_context(|| format!("{}", path.display()))?;
            let t = batcher.run(Job {
                prompt: prompt.clone(),
                max_tokens: args.max_tokens,
                sampling: args.sampling.clone(),
                top_logprobs: 0,
                on_step: None,
                constraint: Some(Constraint::new(grammar.clone(), vocab, eos.clone())),
            })?;
            let d = t.digest();
            (t.steps, d, "local")
        }
        [url] => {
            if args.sampling.temperature != 0.0 {
                anyhow::bail!("a remote executor decodes greedily: drop --temperature");
            }
            if args.whitespace != Whitespace::Compact {
                anyhow::bail!(
                    "--whitespace is for the local model (a remote executor is sent the \
                     schema alone): drop it with --executor"
                );
            }
            let e = loaded
                .remote(args, "remote".to_owned(), url)?
                .run(&ExecRequest {
                    schema: Some(schema),
                    prompt: prompt.clone(),
                    max_tokens: args.max_tokens,
                    stop_ids: eos.clone(),
                })?;
            let d = e.transcript_digest(prompt);
            (e.steps, d, "remote")
        }
        _ => anyhow::bail!("--schema runs on the local model or on one --executor"),
    };
    // the end-of-sequence id, if the model wrote one, is not part of the document
    let ids: Vec<u32> = steps
        .iter()
        .map(|s| s.id)
        .filter(|i| !eos.contains(i))
        .collect();
    let v = grammar.validate(&tokenizer.decode(&ids)?);
    out["verdict"] = serde_json::json!({
        "mode": fleetmesh_proto::Mode::SchemaBounds,
        "valid": v.valid,
        "errors": v.errors,
        "constrained": by,
    });
    if !v.valid {
        out["token_ids"] = serde_json::json!(ids);
        out["text"] = serde_json::json!(tokenizer.decode(&ids)?);
        println!("{out}");
        eprintln!("meshnode: the output is not valid under {}", path.display());
        return Ok(None);
    }
    Ok(Some((steps, digest)))
}

/// `--verify quasi-deterministic`: greedy decoding on the local model and the remote
/// executors under the 2-of-3 quorum (exit 1 when no two agree).
fn quorum(
    args: &InferArgs,
    model: Llama,
    loaded: &Loaded,
    out: &mut serde_json::Value,
) -> anyhow::Result<Generated> {
    if args.sampling.temperature != 0.0 {
        anyhow::bail!("quasi-deterministic verification decodes greedily: drop --temperature");
    }
    let remotes = args
        .executors
        .iter()
        .enumerate()
        .map(|(i, url)| loaded.remote(args, format!("remote-{}", i + 1), url))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let batcher = Arc::new(Batcher::new(Arc::new(model), loaded.digest, 1));
    let local = LocalExecutor::new("local", batcher)
        .with_base_digest(args.base_model_digest.unwrap_or(loaded.digest));
    let mut executors: Vec<&dyn Executor> = vec![&local];
    executors.extend(remotes.iter().map(|r| r as &dyn Executor));
    let req = ExecRequest {
        schema: None,
        prompt: loaded.prompt.clone(),
        max_tokens: args.max_tokens,
        stop_ids: loaded.eos.clone(),
    };
    let v = run_quorum(&executors, &req, &QuorumConfig::default())?;
    out["verdict"] = v.to_json();
    match v.output {
        Some(e) => {
            let d = e.transcript_digest(&loaded.prompt);
            Ok(Some((e.steps, d)))
        }
        None => {
            println!("{out}");
            eprintln!("meshnode: no two executors agreed; no output is accepted");
            Ok(None)
        }
    }
}
