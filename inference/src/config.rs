//! A Llama-family model's shape, as Hugging Face's `config.json` states it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The fields of `config.json` the runtime uses (others are ignored). Names and defaults
/// are Hugging Face's (`LlamaConfig` in transformers; `Qwen2Config` and `MistralConfig`
/// share them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    /// The architecture: `llama` (the default when absent), `qwen2` (biases on the query,
    /// key and value projections), `mistral` (Llama's shape with a sliding attention
    /// window) or `phi3` (Llama's arithmetic, the query/key/value projections stored as
    /// one `qkv_proj` and gate/up as one `gate_up_proj`; a sliding window too). Any other
    /// is refused rather than run as a Llama.
    #[serde(default = "default_model_type")]
    pub model_type: String,
    /// The attention window of Mistral, Phi-3 and Qwen2: a position attends to itself and
    /// the `sliding_window − 1` positions before it (transformers' and llama.cpp's
    /// convention). `None` when the config has none; see [`LlamaConfig::window`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// Whether Qwen2 uses its sliding window (it ships with `false`; a window shorter than
    /// the context is refused for Qwen2, whose `max_window_layers` is not run).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_sliding_window: bool,
    /// transformers' `rope_scaling`: `null`, `default`, `linear` (every frequency divided
    /// by `factor`) and `llama3` (Llama 3.1/3.2: low frequencies divided, a smooth band)
    /// are run; anything else (`dynamic`, `yarn`, `longrope`) is refused by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<serde_json::Value>,
    /// The share of each head's width that rotates (Phi-3.5/Phi-4-mini set 0.75): only
    /// 1.0 is run, anything else is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_rotary_factor: Option<f64>,
    /// transformers' Llama option of biases on all four attention projections, and on the
    /// MLP's: not run here, so a config that sets either is refused rather than run
    /// without them.
    #[serde(default, skip_serializing)]
    pub attention_bias: bool,
    /// See `attention_bias`.
    #[serde(default, skip_serializing)]
    pub mlp_bias: bool,
    /// Width of one head when the config states it (Mistral, Llama 3.2): it must be
    /// `hidden_size / num_attention_heads`, as it is for every family run here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the MLP's hidden layer.
    pub intermediate_size: usize,
    /// Number of token ids.
    pub vocab_size: usize,
    /// Number of transformer blocks.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention); defaults to the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// RMSNorm's epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base; defaults to 10 000.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// Longest context.
    pub max_position_embeddings: usize,
    /// Whether the output projection is the embedding matrix (no `lm_head.weight`).
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Beginning-of-sequence token.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence tokens: generation stops after any of them. `config.json` gives
    /// one id or a list (Llama 3 lists two).
    #[serde(
        default,
        deserialize_with = "one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub eos_token_id: Vec<u32>,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Vec<u32>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Ids {
        One(u32),
        Many(Vec<u32>),
        None(()),
    }
    Ok(match Ids::deserialize(d)? {
        Ids::One(i) => vec![i],
        Ids::Many(v) => v,
        Ids::None(()) => Vec::new(),
    })
}

/// Most rotary-table entries (positions × half the head width): 2²⁷, far above real
/// models (a 128k context with 128-wide heads takes 2²³).
const MAX_ROPE_ENTRIES: usize = 1 << 27;

/// The `model_type`s run.
pub(crate) const FAMILIES: [&str; 4] = ["llama", "qwen2", "mistral", "phi3"];

/// A `rope_scaling` that changes the frequencies.
enum RopeScaling {
    Linear {
        factor: f64,
    },
    Llama3 {
        factor: f64,
        low: f64,
        high: f64,
        original: f64,
    },
}

fn default_rope_theta() -> f64 {
    10_000.0
}

fn default_model_type() -> String {
    "llama".into()
}

impl LlamaConfig {
    /// Reads and checks `config.json`.
    ///
    /// # Errors
    /// [`Error::Io`] when unreadable, [`Error::Model`] when malformed or inconsistent
    /// (heads that do not divide the width, key/value heads that do not divide the heads).
    pub fn read(path: &Path) -> Result<LlamaConfig> {
        let text = std::fs::read(path).map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        let c: LlamaConfig = serde_json::from_slice(&text).map_err(|e| Error::Model {
            path: path.into(),
            reason: e.to_string(),
        })?;
        c.check().map_err(|reason| Error::Model {
            path: path.into(),
            reason,
        })?;
        Ok(c)
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Whether the query, key and value projections carry biases (Qwen2).
    pub fn qkv_bias(&self) -> bool {
        self.model_type == "qwen2"
    }

    /// Whether the weights store q, k, v as one `qkv_proj` and gate, up as one
    /// `gate_up_proj` (Phi-3).
    pub fn fused_projections(&self) -> bool {
        self.model_type == "phi3"
    }

    /// The sliding attention window when it is shorter than the context (Mistral 7B v0.1's
    /// 4 096 of 32 768, Phi-3-mini-4k's 2 047 of 4 096): a position attends to itself and
    /// the `window − 1` before it. `None` when every position sees all before it.
    pub fn window(&self) -> Option<usize> {
        let windowed = matches!(self.model_type.as_str(), "mistral" | "phi3");
        self.sliding_window
            .filter(|w| windowed && *w < self.max_position_embeddings)
    }

    /// The rotary inverse frequencies θᵢ = base^(−2i/head width), i < head width / 2,
    /// adjusted by `rope_scaling` (checked by [`LlamaConfig::read`]).
    pub fn inv_freq(&self) -> Vec<f64> {
        let hd = self.head_dim();
        let base: Vec<f64> = (0..hd / 2)
            .map(|i| 1.0 / self.rope_theta.powf((2 * i) as f64 / hd as f64))
            .collect();
        match self.rope_scaling().ok().flatten() {
            None => base,
            Some(RopeScaling::Linear { factor }) => base.iter().map(|f| f / factor).collect(),
            Some(RopeScaling::Llama3 {
                factor,
                low,
                high,
                original,
            }) => {
                // transformers' `_compute_llama3_parameters`
                let (low_wavelen, high_wavelen) = (original / low, original / high);
                base.iter()
                    .map(|f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            *f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (original / wavelen - low) / (high - low);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }

    /// `rope_scaling` read: `None` for none or `default`.
    fn rope_scaling(&self) -> std::result::Result<Option<RopeScaling>, String> {
        let Some(v) = self.rope_scaling.as_ref().filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let kind = v
            .get("rope_type")
            .or_else(|| v.get("type"))
            .and_then(|t| t.as_str())
            .ok_or("rope_scaling has no rope_type")?;
        let num = |k: &str| -> std::result::Result<f64, String> {
            v.get(k)
                .and_then(serde_json::Value::as_f64)
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("rope_scaling {kind:?} needs a positive number {k}"))
        };
        match kind {
            "default" => Ok(None),
            "linear" => Ok(Some(RopeScaling::Linear {
                factor: num("factor")?,
            })),
            "llama3" => {
                let (low, high) = (num("low_freq_factor")?, num("high_freq_factor")?);
                if high <= low {
                    return Err(format!(
                        "rope_scaling llama3: high_freq_factor {high} is not above \
                         low_freq_factor {low}"
                    ));
                }
                Ok(Some(RopeScaling::Llama3 {
                    factor: num("factor")?,
                    low,
                    high,
                    original: num("original_max_position_embeddings")?,
                }))
            }
            other => Err(format!(
                "rope_scaling {other:?} is not supported (default, linear, llama3)"
            )),
        }
    }

    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        let positive = [
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("vocab_size", self.vocab_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("max_position_embeddings", self.max_position_embeddings),
        ];
        if let Some((k, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{k} must be positive"));
        }
        if !FAMILIES.contains(&self.model_type.as_str()) {
            return Err(format!(
                "model_type {:?} is not supported ({})",
                self.model_type,
                FAMILIES.join(", ")
            ));
        }
        self.rope_scaling()?;
        if let Some(f) = self.partial_rotary_factor.filter(|f| *f != 1.0) {
            return Err(format!(
                "partial_rotary_factor {f} (rotating part of each head) is not supported"
            ));
        }
        if self.sliding_window == Some(0) {
            return Err("sliding_window must be positive".into());
        }
        if self.attention_bias || self.mlp_bias {
            return Err(
                "attention_bias/mlp_bias (biases on every attention or MLP projection) are not \
                 supported"
                    .into(),
            );
        }
        let qwen_window = self.model_type == "qwen2" && self.use_sliding_window;
        if let Some(w) = self
            .sliding_window
            .filter(|w| qwen_window && *w < self.max_position_embeddings)
        {
            return Err(format!(
                "sliding_window {w} is shorter than max_position_embeddings {}: Qwen2's \
                 sliding-window attention (per max_window_layers) is not supported (a \
                 context of at most {w} is)",
                self.max_position_embeddings
            ));
        }
        if !self.hidden_size.is_multiple_of(self.num_attention_heads)
            || !self.head_dim().is_multiple_of(2)
        {
            return Err(format!(
                "hidden_size {} is not num_attention_heads {} × an even head width",
                self.hidden_size, self.num_attention_heads
            ));
        }
        // the rotary tables (cos and sin, f32) are built up front for every position
        let rope = self
            .max_position_embeddings
            .checked_mul(self.head_dim() / 2);
        if rope.is_none_or(|n| n > MAX_ROPE_ENTRIES) {
            return Err(format!(
                "max_position_embeddings {} × head width {} / 2 exceeds the {MAX_ROPE_ENTRIES} \
                 rotary entries (512 MiB a table) this runtime builds",
                self.max_position_embeddings,
                self.head_dim()
            ));
        }
        if let Some(d) = self.head_dim.filter(|d| *d != self.head_dim()) {
            return Err(format!(
                "head_dim {d} is not hidden_size {} / num_attention_heads {} (heads of \
                 another width than the residual stream's share are not supported)",
                self.hidden_size, self.num_attention_heads
            ));
        }
        let kv = self.kv_heads();
        if kv == 0 || !self.num_attention_heads.is_multiple_of(kv) {
            return Err(format!(
                "num_key_value_heads {kv} does not divide num_attention_heads {}",
                self.num_attention_heads
            ));
        }
        Ok(())
    }
}
