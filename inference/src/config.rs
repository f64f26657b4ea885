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
    /// key and value projections) or `mistral` (Llama's shape; its sliding window must
    /// cover the whole context). Any other is refused rather than run as a Llama.
    #[serde(default = "default_model_type")]
    pub model_type: String,
    /// Mistral's and Qwen2's attention window; `None` when the config has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<usize>,
    /// Whether Qwen2 uses its sliding window (it ships with `false`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_sliding_window: bool,
    /// transformers' Llama option of biases on all four attention projections, and on the
    /// MLP's: not run here, so a config that sets either is refused rather than run
    /// without them.
    #[serde(default, skip_serializing)]
    pub attention_bias: bool,
    /// See `attention_bias`.
    #[serde(default, skip_serializing)]
    pub mlp_bias: bool,
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
        if !["llama", "qwen2", "mistral"].contains(&self.model_type.as_str()) {
            return Err(format!(
                "model_type {:?} is not supported (llama, qwen2, mistral)",
                self.model_type
            ));
        }
        if self.attention_bias || self.mlp_bias {
            return Err(
                "attention_bias/mlp_bias (biases on every attention or MLP projection) are not \
                 supported"
                    .into(),
            );
        }
        let windowed = self.model_type == "mistral" || self.use_sliding_window;
        if let Some(w) = self
            .sliding_window
            .filter(|w| windowed && *w < self.max_position_embeddings)
        {
            return Err(format!(
                "sliding_window {w} is shorter than max_position_embeddings {}: sliding-window \
                 attention is not supported (a context of at most {w} is)",
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
