//! `meshnode infer`: one generation on the local runtime, printed as a JSON line with its
//! transcript.

use std::path::{Path, PathBuf};

use anyhow::Context;
use fleetmesh_inference::model::model_digest;
use fleetmesh_inference::{Llama, Sampling, TextTokenizer, generate};

/// A model and its tokenizer, from a model directory (`config.json`, `model.safetensors`,
/// `tokenizer.json`) or a GGUF file (`tokenizer.json` beside it).
pub fn load(path: &Path) -> anyhow::Result<(Llama, TextTokenizer, [u8; 32])> {
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
    Ok((model, tokenizer, digest))
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
}

/// Runs one generation and prints it.
pub fn run(args: &InferArgs) -> anyhow::Result<()> {
    let (model, tokenizer, digest) = load(&args.model)?;
    let prompt = tokenizer.encode(&args.prompt)?;
    let t = generate(
        &model,
        digest,
        &prompt,
        args.max_tokens,
        &[],
        &args.sampling,
    )?;
    let ids = t.output_ids();
    println!(
        "{}",
        serde_json::json!({
            "model": args.model.display().to_string(),
            "model_digest": hex::encode(digest),
            "prompt_token_ids": prompt,
            "token_ids": ids,
            "text": tokenizer.decode(&ids)?,
            "logprobs": t.steps.iter().map(|s| s.logprob).collect::<Vec<_>>(),
            "margins": t.steps.iter().map(|s| s.margin).collect::<Vec<_>>(),
            "transcript_digest": hex::encode(t.digest()),
        })
    );
    Ok(())
}
