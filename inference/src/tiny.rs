//! A deterministic tiny Llama for demos and tests, so a fresh machine can run inference
//! with no download: [`make_tiny`] writes `config.json` and `model.safetensors` (F32) from
//! a fixed seed — the same bytes on every machine.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};

use crate::LlamaConfig;
use crate::error::{CandleContext, Error, Result};

/// The tiny model's shape: byte-level vocabulary (256 ids), 2 layers, 4 query heads sharing
/// 2 key/value heads (so grouped-query attention is exercised), width 64.
pub fn tiny_config() -> LlamaConfig {
    LlamaConfig {
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
        eos_token_id: None,
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
    let c = tiny_config();
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.into(),
        source,
    })?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let mut put = |name: String, rows: usize, cols: usize, norm: bool| -> Result<()> {
        let bound = (3.0 / cols as f32).sqrt();
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| {
                if norm {
                    1.0 + rng.gen_range(-0.1f32..0.1)
                } else {
                    rng.gen_range(-bound..bound)
                }
            })
            .collect();
        let t = if norm {
            Tensor::from_vec(v, cols, &Device::Cpu)
        } else {
            Tensor::from_vec(v, (rows, cols), &Device::Cpu)
        }
        .op("tiny weights")?;
        tensors.insert(name, t);
        Ok(())
    };
    let (h, i, v) = (c.hidden_size, c.intermediate_size, c.vocab_size);
    let kvd = c.kv_heads() * c.head_dim();
    put("model.embed_tokens.weight".into(), v, h, false)?;
    for l in 0..c.num_hidden_layers {
        let p = format!("model.layers.{l}");
        put(format!("{p}.input_layernorm.weight"), 1, h, true)?;
        put(format!("{p}.self_attn.q_proj.weight"), h, h, false)?;
        put(format!("{p}.self_attn.k_proj.weight"), kvd, h, false)?;
        put(format!("{p}.self_attn.v_proj.weight"), kvd, h, false)?;
        put(format!("{p}.self_attn.o_proj.weight"), h, h, false)?;
        put(format!("{p}.post_attention_layernorm.weight"), 1, h, true)?;
        put(format!("{p}.mlp.gate_proj.weight"), i, h, false)?;
        put(format!("{p}.mlp.up_proj.weight"), i, h, false)?;
        put(format!("{p}.mlp.down_proj.weight"), h, i, false)?;
    }
    put("model.norm.weight".into(), 1, h, true)?;
    put("lm_head.weight".into(), v, h, false)?;
    let path = dir.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &path).map_err(|e| Error::Model {
        path: path.clone(),
        reason: e.to_string(),
    })?;
    let config = serde_json::to_vec_pretty(&c).expect("a config serializes");
    let path = dir.join("config.json");
    std::fs::write(&path, config).map_err(|source| Error::Io { path, source })?;
    Ok(c)
}
