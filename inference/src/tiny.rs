//! A deterministic tiny Llama for demos and tests, so a fresh machine can run inference
//! with no download: [`make_tiny`] writes `config.json` and `model.safetensors` (F32) from
//! a fixed seed — the same bytes on every machine with this lockfile's `rand` — and the same
//! weights as `model.gguf` (F32, laid out as llama.cpp's converter writes them; other file
//! types with [`crate::gguf::convert_dir`]), with a
//! byte-level `tokenizer.json` (id = byte) and a `tokenizer_config.json` with the family's
//! chat template (ChatML for Llama and Qwen2, see [`crate::chat::family_template`]).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};

use crate::LlamaConfig;
use crate::error::{CandleContext, Error, Result};

/// How [`make_model`] draws a tensor.
#[derive(Clone, Copy)]
enum Init {
    /// Uniform in ±√(3/fan-in).
    Matrix,
    /// Around 1 (±0.1).
    Norm,
    /// Uniform in ±0.5, large enough to matter.
    Bias,
}

/// The tiny model's shape: byte-level vocabulary (256 ids), 2 layers, 4 query heads sharing
/// 2 key/value heads (so grouped-query attention is exercised), width 64.
pub fn tiny_config() -> LlamaConfig {
    LlamaConfig {
        model_type: "llama".into(),
        sliding_window: None,
        use_sliding_window: false,
        rope_scaling: None,
        partial_rotary_factor: None,
        head_dim: None,
        attention_bias: false,
        mlp_bias: false,
        hidden_size: 64,
        intermediate_size: 172,
        vocab_size: 256,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: Some(2),
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        max_position_embeddings: 512,
        tie_word_embeddings: false,
        bos_token_id: None,
        eos_token_id: Vec::new(),
    }
}

/// Writes the tiny model into `dir` (created if needed): `config.json` and
/// `model.safetensors` with Hugging Face's tensor names, weights drawn uniformly from
/// ±√(3/fan-in) (unit variance per output) by `rand`'s `StdRng` seeded with `seed`,
/// norms around 1.
///
/// # Errors
/// [`Error::Io`] when `dir` cannot be written.
pub fn make_tiny(dir: &Path, seed: u64) -> Result<LlamaConfig> {
    make_model(dir, &tiny_config(), seed)?;
    Ok(tiny_config())
}

/// The tiny shape as architecture `arch`: `llama` ([`tiny_config`]), `qwen2` (biased
/// query/key/value projections and tied embeddings, as Qwen2's small models have),
/// `mistral` (a sliding window of [`TINY_WINDOW`] positions, so a test's prompt and output
/// outrun it) or `phi3` (fused `qkv_proj` and `gate_up_proj`).
///
/// # Errors
/// [`Error::Model`] naming an architecture this runtime does not run.
pub fn tiny_config_for(arch: &str) -> Result<LlamaConfig> {
    match arch {
        "llama" => Ok(tiny_config()),
        "qwen2" => Ok(LlamaConfig {
            model_type: "qwen2".into(),
            tie_word_embeddings: true,
            rope_theta: 1_000_000.0,
            ..tiny_config()
        }),
        "mistral" => Ok(LlamaConfig {
            model_type: "mistral".into(),
            sliding_window: Some(TINY_WINDOW),
            ..tiny_config()
        }),
        "phi3" => Ok(LlamaConfig {
            model_type: "phi3".into(),
            ..tiny_config()
        }),
        other => Err(Error::Model {
            path: "config.json".into(),
            reason: format!("architecture {other:?} is not one of {}", ARCHS.join(", ")),
        }),
    }
}

/// The architectures [`tiny_config_for`] makes: every family the runtime runs.
pub const ARCHS: [&str; 4] = crate::config::FAMILIES;

/// The tiny Mistral's sliding window.
pub const TINY_WINDOW: usize = 16;

/// [`make_tiny`] for any shape (benchmarks use a ~100M-parameter one). The tokenizer is the
/// byte-level one, so only ids below 256 have text.
///
/// # Errors
/// As [`make_tiny`], and [`Error::Model`] for an inconsistent `c`.
pub fn make_model(dir: &Path, c: &LlamaConfig, seed: u64) -> Result<()> {
    c.check().map_err(|reason| Error::Model {
        path: dir.join("config.json"),
        reason,
    })?;
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.into(),
        source,
    })?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let mut put = |name: String, rows: usize, cols: usize, init: Init| -> Result<()> {
        let bound = (3.0 / cols as f32).sqrt();
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| match init {
                Init::Norm => 1.0 + rng.gen_range(-0.1f32..0.1),
                Init::Matrix => rng.gen_range(-bound..bound),
                Init::Bias => rng.gen_range(-0.5f32..0.5),
            })
            .collect();
        let t = if matches!(init, Init::Matrix) {
            Tensor::from_vec(v, (rows, cols), &Device::Cpu)
        } else {
            Tensor::from_vec(v, cols, &Device::Cpu)
        }
        .op("tiny weights")?;
        tensors.insert(name, t);
        Ok(())
    };
    let (h, i, v) = (c.hidden_size, c.intermediate_size, c.vocab_size);
    let kvd = c.kv_heads() * c.head_dim();
    put("model.embed_tokens.weight".into(), v, h, Init::Matrix)?;
    for l in 0..c.num_hidden_layers {
        let p = format!("model.layers.{l}");
        put(format!("{p}.input_layernorm.weight"), 1, h, Init::Norm)?;
        if c.fused_projections() {
            put(
                format!("{p}.self_attn.qkv_proj.weight"),
                h + 2 * kvd,
                h,
                Init::Matrix,
            )?;
        } else {
            put(format!("{p}.self_attn.q_proj.weight"), h, h, Init::Matrix)?;
            put(format!("{p}.self_attn.k_proj.weight"), kvd, h, Init::Matrix)?;
            put(format!("{p}.self_attn.v_proj.weight"), kvd, h, Init::Matrix)?;
        }
        if c.qkv_bias() {
            put(format!("{p}.self_attn.q_proj.bias"), 1, h, Init::Bias)?;
            put(format!("{p}.self_attn.k_proj.bias"), 1, kvd, Init::Bias)?;
            put(format!("{p}.self_attn.v_proj.bias"), 1, kvd, Init::Bias)?;
        }
        put(format!("{p}.self_attn.o_proj.weight"), h, h, Init::Matrix)?;
        put(
            format!("{p}.post_attention_layernorm.weight"),
            1,
            h,
            Init::Norm,
        )?;
        if c.fused_projections() {
            put(
                format!("{p}.mlp.gate_up_proj.weight"),
                2 * i,
                h,
                Init::Matrix,
            )?;
        } else {
            put(format!("{p}.mlp.gate_proj.weight"), i, h, Init::Matrix)?;
            put(format!("{p}.mlp.up_proj.weight"), i, h, Init::Matrix)?;
        }
        put(format!("{p}.mlp.down_proj.weight"), h, i, Init::Matrix)?;
    }
    put("model.norm.weight".into(), 1, h, Init::Norm)?;
    if !c.tie_word_embeddings {
        put("lm_head.weight".into(), v, h, Init::Matrix)?;
    }
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &path).map_err(|e| Error::Model {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    crate::gguf::write_gguf(
        c,
        &tensors,
        crate::gguf::FileType::F32,
        &dir.join("model.gguf"),
    )?;
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, crate::tokenizer::byte_level_tokenizer_json())
        .map_err(|source| Error::Io { path, source })?;
    let (template, eos) = crate::chat::family_template(&c.model_type);
    let tok_config = serde_json::json!({
        "chat_template": template,
        "bos_token": null,
        "eos_token": eos,
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    let path = dir.join("tokenizer_config.json");
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&tok_config).expect("JSON serializes"),
    )
    .map_err(|source| Error::Io { path, source })?;
    let config = serde_json::to_vec_pretty(c).expect("a config serializes");
    let path = dir.join("config.json");
    std::fs::write(&path, config).map_err(|source| Error::Io { path, source })?;
    Ok(())
}

/// The tiny model with a Llama-style tokenizer: ids 0–255 the bytes, 256 `<s>` and 257
/// `</s>` (special added tokens), and a `TemplateProcessing` post-processor that puts `<s>`
/// before every text, as Llama 2's and Mistral's tokenizer.json do — for checking that text
/// prompts are encoded as transformers and vLLM encode them (with the BOS) and chat
/// templates are not given a second one. `tokenizer_class` is the generic
/// `PreTrainedTokenizerFast`, so the post-processor is the rule.
///
/// # Errors
/// As [`make_tiny`].
pub fn make_tiny_with_bos(dir: &Path, seed: u64) -> Result<LlamaConfig> {
    let c = LlamaConfig {
        vocab_size: 258,
        bos_token_id: Some(256),
        eos_token_id: vec![257],
        ..tiny_config()
    };
    make_model(dir, &c, seed)?;
    let mut tok: serde_json::Value =
        serde_json::from_str(&crate::tokenizer::byte_level_tokenizer_json()).expect("JSON");
    let added = |id: u32, content: &str| {
        serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                           "rstrip": false, "normalized": false, "special": true})
    };
    tok["added_tokens"] = serde_json::json!([added(256, "<s>"), added(257, "</s>")]);
    tok["post_processor"] = serde_json::json!({
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<s>", "type_id": 1}},
                 {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [256], "tokens": ["<s>"]}}
    });
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tok.to_string()).map_err(|source| Error::Io { path, source })?;
    let tok_config = serde_json::json!({
        "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": true,
        "tokenizer_class": "PreTrainedTokenizerFast",
    });
    let path = dir.join("tokenizer_config.json");
    std::fs::write(&path, tok_config.to_string()).map_err(|source| Error::Io { path, source })?;
    Ok(c)
}
