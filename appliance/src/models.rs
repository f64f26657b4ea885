//! The model files a node serves: a Hugging Face model directory or a GGUF file, loaded
//! with its tokenizer and its digest, for `meshnode infer` and the inference API alike.

use std::path::Path;

use anyhow::Context as _;
use fleetmesh_inference::Llama;
use fleetmesh_inference::model::model_digest;
use fleetmesh_inference::tokenizer::TextTokenizer;

/// A model and its tokenizer, from a model directory (`config.json`, `model.safetensors`,
/// `tokenizer.json`) or a GGUF file (`tokenizer.json` beside it), on `device` (`auto`,
/// `cpu`, `cuda:N`).
pub fn load(path: &Path, device: &str) -> anyhow::Result<(Llama, TextTokenizer, [u8; 32])> {
    let placement = fleetmesh_inference::model::place(device)?;
    tracing::info!(model = %path.display(), device = %fleetmesh_inference::model::engine_name(&placement.device), reason = %placement.reason, "where the model runs");
    let on = placement.device;
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

/// A SHA-256 digest written as 64 hex digits (either case), as `model_digest` and
/// `base_model_digest` are; `what` names the setting in the error.
pub fn digest_hex(h: &str, what: &str) -> anyhow::Result<[u8; 32]> {
    hex::decode(h)
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or_else(|| anyhow::anyhow!("{what} is not 64 hex digits"))
}
