//! A Llama-family decoder on candle tensors (F32, CPU), loaded from a Hugging Face model
//! directory: `config.json` + `model.safetensors`.
//!
//! The forward pass is Hugging Face transformers' `LlamaForCausalLM`: RMSNorm before
//! attention and MLP, rotary embeddings in the half-split layout (`rotate_half`),
//! grouped-query attention with a causal mask, SwiGLU MLP, a final RMSNorm and the output
//! projection (tied to the embeddings when the config says so). A [`KvCache`] keeps each
//! layer's keys and values so decoding one more token costs one position.

use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::LlamaConfig;
use crate::error::{CandleContext, Error, Result};

struct Layer {
    attn_norm: Tensor,
    /// The query, key and value projections stacked (q rows, then k, then v): one matrix
    /// product for all three.
    wqkv: Tensor,
    wo: Tensor,
    ffn_norm: Tensor,
    /// The gate and up projections stacked: one matrix product for both.
    w_gate_up: Tensor,
    w_down: Tensor,
}

/// A loaded model.
pub struct Llama {
    config: LlamaConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Tensor,
    /// cos and sin of every position's rotary angles, (max positions, head width).
    cos: Tensor,
    sin: Tensor,
    device: Device,
}

impl std::fmt::Debug for Llama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llama")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Keys and values of the positions already seen, per layer.
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been seen yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Llama {
    /// Loads `dir/config.json` and `dir/model.safetensors` in F32 on the CPU.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Model`] naming the file and the tensor that is missing or
    /// has the wrong shape.
    pub fn load_dir(dir: &Path) -> Result<Llama> {
        let config = LlamaConfig::read(&dir.join("config.json"))?;
        let path = dir.join("model.safetensors");
        if !path.exists() {
            return Err(Error::Io {
                path,
                source: std::io::ErrorKind::NotFound.into(),
            });
        }
        let tensors =
            candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| Error::Model {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        Llama::from_tensors(config, tensors, &path, |name| name.to_owned(), |t, _| Ok(t))
    }

    /// [`Llama::load_dir`]'s weights from the bytes of a `model.safetensors` (the same
    /// parser, without the file), in the shape `config` gives; `path` names them in errors.
    ///
    /// # Errors
    /// [`Error::Model`] for an inconsistent config, a header that does not parse, or a
    /// tensor that is missing or has the wrong shape.
    pub fn from_safetensors_bytes(config: LlamaConfig, data: &[u8], path: &Path) -> Result<Llama> {
        config.check().map_err(|reason| Error::Model {
            path: path.into(),
            reason,
        })?;
        let tensors = candle_core::safetensors::load_buffer(data, &Device::Cpu).map_err(|e| {
            Error::Model {
                path: path.into(),
                reason: e.to_string(),
            }
        })?;
        Llama::from_tensors(config, tensors, path, |name| name.to_owned(), |t, _| Ok(t))
    }

    /// Loads a GGUF file (llama architecture; F32, F16 or quantized tensors, dequantized to
    /// F32), its shape from the `llama.*` metadata. llama.cpp's converter stores the query
    /// and key projections with each head's rows interleaved for its RoPE; they are put
    /// back in Hugging Face's half-split order, so both formats run the same forward pass.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::Model`] naming the metadata key or tensor at fault.
    pub fn load_gguf(path: &Path) -> Result<Llama> {
        let mut file = std::fs::File::open(path).map_err(|source| Error::Io {
            path: path.into(),
            source,
        })?;
        Llama::read_gguf(&mut file, path)
    }

    /// [`Llama::load_gguf`] from a reader over the file's bytes (a file, or a
    /// `std::io::Cursor` over bytes in memory); `path` names it in errors.
    ///
    /// # Errors
    /// [`Error::Io`] when reading fails, [`Error::Model`] naming the metadata key or
    /// tensor at fault.
    pub fn read_gguf<R: std::io::Read + std::io::Seek>(
        reader: &mut R,
        path: &Path,
    ) -> Result<Llama> {
        let model_err = |reason: String| Error::Model {
            path: path.into(),
            reason,
        };
        let content = read_gguf_header(reader, path)?;
        let meta = |key: &str| {
            content
                .metadata
                .get(key)
                .ok_or_else(|| model_err(format!("no metadata {key}")))
        };
        let arch = meta("general.architecture")?
            .to_string()
            .map_err(|e| model_err(e.to_string()))?;
        if arch != "llama" {
            return Err(model_err(format!("architecture {arch:?} is not llama")));
        }
        let int = |key: &str| -> Result<usize> {
            let v = meta(key)?;
            v.to_u32()
                .map(|v| v as usize)
                .or_else(|_| v.to_u64().map(|v| v as usize))
                .map_err(|e| model_err(format!("{key}: {e}")))
        };
        let float = |key: &str, default: f32| -> Result<f32> {
            match content.metadata.get(key) {
                Some(v) => v.to_f32().map_err(|e| model_err(format!("{key}: {e}"))),
                None => Ok(default),
            }
        };
        let embd = content
            .tensor_infos
            .get("token_embd.weight")
            .ok_or_else(|| model_err("no tensor token_embd.weight".into()))?;
        let vocab_size = *embd
            .shape
            .dims()
            .first()
            .ok_or_else(|| model_err("token_embd.weight has no dimensions".into()))?;
        let heads = int("llama.attention.head_count")?;
        let config = LlamaConfig {
            hidden_size: int("llama.embedding_length")?,
            intermediate_size: int("llama.feed_forward_length")?,
            vocab_size,
            num_hidden_layers: int("llama.block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: Some(int("llama.attention.head_count_kv").unwrap_or(heads)),
            rms_norm_eps: f64::from(float("llama.attention.layer_norm_rms_epsilon", 1e-5)?),
            rope_theta: f64::from(float("llama.rope.freq_base", 10_000.0)?),
            max_position_embeddings: int("llama.context_length")?,
            tie_word_embeddings: !content.tensor_infos.contains_key("output.weight"),
            bos_token_id: None,
            eos_token_id: match content.metadata.get("tokenizer.ggml.eos_token_id") {
                Some(v) => vec![v.to_u32().map_err(|e| model_err(format!("eos: {e}")))?],
                None => Vec::new(),
            },
        };
        config.check().map_err(model_err)?;
        let mut tensors = std::collections::HashMap::new();
        for (name, info) in &content.tensor_infos {
            // candle multiplies the dimensions (and then by up to 8 bytes an element)
            // unchecked, so a crafted shape overflows there; and it views an empty
            // tensor's data through a misaligned pointer (undefined behaviour). Weights
            // are never empty.
            let elements = info
                .shape
                .dims()
                .iter()
                .try_fold(1usize, |n, d| n.checked_mul(*d));
            if elements.is_none_or(|n| n == 0 || n > usize::MAX / 8) {
                return Err(model_err(format!(
                    "{name}: shape {:?} has no elements, or more than any file holds",
                    info.shape.dims()
                )));
            }
            let t = content
                .tensor(reader, name, &Device::Cpu)
                .and_then(|q| q.dequantize(&Device::Cpu))
                .map_err(|e| model_err(format!("{name}: {e}")))?;
            tensors.insert(name.clone(), t);
        }
        let (nh, kv) = (config.num_attention_heads, config.kv_heads());
        Llama::from_tensors(config, tensors, path, gguf_name, |t, name| {
            if name.ends_with(".attn_q.weight") {
                unpermute(&t, nh)
            } else if name.ends_with(".attn_k.weight") {
                unpermute(&t, kv)
            } else {
                Ok(t)
            }
        })
    }

    /// Builds the model from named tensors: `rename` maps a Hugging Face tensor name to the
    /// file's, `fix` adjusts a tensor after it is found (given the file's name).
    fn from_tensors(
        config: LlamaConfig,
        mut tensors: std::collections::HashMap<String, Tensor>,
        path: &Path,
        rename: impl Fn(&str) -> String,
        fix: impl Fn(Tensor, &str) -> Result<Tensor>,
    ) -> Result<Llama> {
        let device = Device::Cpu;
        let n_tensors = tensors.len();
        let (h, kv, hd) = (config.hidden_size, config.kv_heads(), config.head_dim());
        let mut take = |hf: String, shape: &[usize]| -> Result<Tensor> {
            let name = rename(&hf);
            let t = tensors.remove(&name).ok_or_else(|| Error::Model {
                path: path.into(),
                reason: format!("no tensor {name}"),
            })?;
            if t.dims() != shape {
                return Err(Error::Model {
                    path: path.into(),
                    reason: format!("{name} has shape {:?}, expected {shape:?}", t.dims()),
                });
            }
            fix(t.to_dtype(DType::F32).op("load")?, &name)
        };
        let embed = take("model.embed_tokens.weight".into(), &[config.vocab_size, h])?;
        // the count comes from the file: reserve no more layers than it has tensors for
        let mut layers = Vec::with_capacity(config.num_hidden_layers.min(n_tensors));
        for i in 0..config.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let i_ = config.intermediate_size;
            let attn_norm = take(format!("{p}.input_layernorm.weight"), &[h])?;
            let wq = take(format!("{p}.self_attn.q_proj.weight"), &[h, h])?;
            let wk = take(format!("{p}.self_attn.k_proj.weight"), &[kv * hd, h])?;
            let wv = take(format!("{p}.self_attn.v_proj.weight"), &[kv * hd, h])?;
            let wo = take(format!("{p}.self_attn.o_proj.weight"), &[h, h])?;
            let ffn_norm = take(format!("{p}.post_attention_layernorm.weight"), &[h])?;
            let w_gate = take(format!("{p}.mlp.gate_proj.weight"), &[i_, h])?;
            let w_up = take(format!("{p}.mlp.up_proj.weight"), &[i_, h])?;
            let w_down = take(format!("{p}.mlp.down_proj.weight"), &[h, i_])?;
            layers.push(Layer {
                attn_norm,
                wqkv: Tensor::cat(&[&wq, &wk, &wv], 0).op("stack q, k, v")?,
                wo,
                ffn_norm,
                w_gate_up: Tensor::cat(&[&w_gate, &w_up], 0).op("stack gate, up")?,
                w_down,
            });
        }
        let norm = take("model.norm.weight".into(), &[h])?;
        let lm_head = if config.tie_word_embeddings {
            embed.clone()
        } else {
            take("lm_head.weight".into(), &[config.vocab_size, h])?
        };
        let (cos, sin) = rope_tables(&config, &device)?;
        Ok(Llama {
            config,
            embed,
            layers,
            norm,
            lm_head,
            cos,
            sin,
            device,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The model with its weights moved to `device` (a CUDA GPU needs this crate's `cuda`
    /// feature). The KV caches of a moved model live there too.
    ///
    /// # Errors
    /// [`Error::Candle`] when a tensor cannot be moved (out of device memory).
    pub fn to_device(self, device: &Device) -> Result<Llama> {
        if self.device.same_device(device) {
            return Ok(self);
        }
        let mv = |t: Tensor| t.to_device(device).op("to device");
        let layers = self
            .layers
            .into_iter()
            .map(|l| {
                Ok(Layer {
                    attn_norm: mv(l.attn_norm)?,
                    wqkv: mv(l.wqkv)?,
                    wo: mv(l.wo)?,
                    ffn_norm: mv(l.ffn_norm)?,
                    w_gate_up: mv(l.w_gate_up)?,
                    w_down: mv(l.w_down)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Llama {
            config: self.config,
            embed: mv(self.embed)?,
            layers,
            norm: mv(self.norm)?,
            lm_head: mv(self.lm_head)?,
            cos: mv(self.cos)?,
            sin: mv(self.sin)?,
            device: device.clone(),
        })
    }

    /// Runs `tokens` at the positions after those in `cache` (which it extends) and returns
    /// the logits that predict the token after the last one.
    ///
    /// # Errors
    /// [`Error::Request`] for no tokens, an id outside the vocabulary or a context past
    /// `max_position_embeddings`; [`Error::Candle`] if a tensor operation fails.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>> {
        let mut out = self.forward_batch(&mut [(tokens, cache)])?;
        Ok(out.pop().expect("one sequence in, one out"))
    }

    /// How many tokens a generation after a prompt of `prompt_len` tokens can take before
    /// the context is full (what [`Llama::has_room`] allows).
    pub fn room(&self, prompt_len: usize) -> usize {
        self.config
            .max_position_embeddings
            .saturating_sub(prompt_len)
    }

    /// Whether a generation may go on after `cache`'s positions and the token just chosen
    /// from them: prompt plus output stay within the context, as Hugging Face's
    /// `max_length` counts them.
    pub fn has_room(&self, cache: &KvCache) -> bool {
        cache.len + 1 < self.config.max_position_embeddings
    }

    /// Checks that `tokens` can run after the `past` positions already seen: at least one
    /// token, every id in the vocabulary, the context not overrun.
    ///
    /// # Errors
    /// [`Error::Request`] saying which.
    pub fn check_tokens(&self, tokens: &[u32], past: usize) -> Result<()> {
        let c = &self.config;
        if tokens.is_empty() {
            return Err(Error::Request("no tokens to run".into()));
        }
        if let Some(t) = tokens.iter().find(|t| **t as usize >= c.vocab_size) {
            return Err(Error::Request(format!(
                "token id {t} is outside the vocabulary (size {})",
                c.vocab_size
            )));
        }
        if past + tokens.len() > c.max_position_embeddings {
            return Err(Error::Request(format!(
                "{} positions exceed the model's context of {}",
                past + tokens.len(),
                c.max_position_embeddings
            )));
        }
        Ok(())
    }

    /// [`Llama::forward`] for several sequences at once, each with its own cache and any
    /// number of new tokens (a prompt being prefilled beside others being decoded). The
    /// rows of every sequence go through the projections and the MLP as one matrix, so the
    /// weights are read once per step for the whole batch; attention runs per sequence over
    /// its own cache. Returns each sequence's next-token logits, in order.
    ///
    /// # Errors
    /// As [`Llama::forward`], for the first sequence at fault; no cache is touched then.
    pub fn forward_batch(&self, batch: &mut [(&[u32], &mut KvCache)]) -> Result<Vec<Vec<f32>>> {
        let c = &self.config;
        for (tokens, cache) in batch.iter() {
            self.check_tokens(tokens, cache.len)?;
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let (nh, kv, hd) = (c.num_attention_heads, c.kv_heads(), c.head_dim());
        let mut all = Vec::new();
        let mut positions = Vec::new();
        let mut spans = Vec::with_capacity(batch.len());
        for (tokens, cache) in batch.iter_mut() {
            if cache.layers.len() != self.layers.len() {
                cache.layers = (0..self.layers.len()).map(|_| None).collect();
            }
            spans.push((all.len(), tokens.len(), cache.len));
            all.extend_from_slice(tokens);
            positions.extend((cache.len..cache.len + tokens.len()).map(|p| p as u32));
        }
        let n = all.len();
        let ids = Tensor::new(all.as_slice(), &self.device).op("ids")?;
        let mut x = self.embed.index_select(&ids, 0).op("embedding")?;
        let pos = Tensor::new(positions.as_slice(), &self.device).op("positions")?;
        // (rows, head width): broadcast over the heads, the leading axis
        let cos = self.cos.index_select(&pos, 0).op("rope")?;
        let sin = self.sin.index_select(&pos, 0).op("rope")?;
        let masks = spans
            .iter()
            .map(|(_, seq, past)| causal_mask(*past, *seq, &self.device))
            .collect::<Result<Vec<_>>>()?;
        let scale = 1.0 / (hd as f64).sqrt();
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.attn_norm, c.rms_norm_eps)?;
            let qkv = h.matmul(&layer.wqkv.t().op("t")?).op("projection")?;
            // (heads, rows, head width) from columns [from, from + heads·hd) of qkv
            let rows = |from: usize, heads: usize| -> Result<Tensor> {
                qkv.narrow(1, from, heads * hd)
                    .and_then(|t| t.reshape((n, heads, hd)))
                    .and_then(|t| t.transpose(0, 1))
                    .and_then(|t| t.contiguous())
                    .op("projection")
            };
            let q = rope(&rows(0, nh)?, &cos, &sin)?;
            let k = rope(&rows(nh * hd, kv)?, &cos, &sin)?;
            let v = rows((nh + kv) * hd, kv)?;
            let mut outs = Vec::with_capacity(batch.len());
            for (((start, seq, past), (_, cache)), mask) in
                spans.iter().zip(batch.iter_mut()).zip(&masks)
            {
                // (heads, seq, head width)
                let heads = |t: &Tensor| -> Result<Tensor> {
                    t.narrow(1, *start, *seq)
                        .and_then(|t| t.contiguous())
                        .op("heads")
                };
                let (k, v) = (heads(&k)?, heads(&v)?);
                let slot = &mut cache.layers[l];
                let (k, v) = match slot.take() {
                    Some((pk, pv)) => (
                        Tensor::cat(&[&pk, &k], 1).op("cache")?,
                        Tensor::cat(&[&pv, &v], 1).op("cache")?,
                    ),
                    None => (k, v),
                };
                *slot = Some((k.clone(), v.clone()));
                let total = past + seq;
                // grouped-query attention without copying the key/value heads: the query
                // heads sharing key/value head j (HF's `repeat_kv`: heads j·g … j·g + g − 1)
                // become g·seq rows of one (kv, g·seq, head width) batch
                let group = nh / kv;
                let q = heads(&q)?
                    .reshape((kv, group * seq, hd))
                    .op("grouped-query heads")?;
                let mut scores = q
                    .matmul(&k.t().op("t")?)
                    .and_then(|s| s * scale)
                    .op("attention scores")?;
                if *seq > 1 {
                    // one new position sees every cached one: no mask needed then
                    scores = scores
                        .reshape((kv, group, *seq, total))
                        .and_then(|s| s.broadcast_add(mask))
                        .and_then(|s| s.reshape((kv, group * seq, total)))
                        .op("attention mask")?;
                }
                let probs = softmax_last(&scores)?;
                outs.push(
                    probs
                        .matmul(&v)
                        .and_then(|a| a.reshape((nh, *seq, hd)))
                        .and_then(|a| a.transpose(0, 1))
                        .and_then(|a| a.contiguous())
                        .and_then(|a| a.reshape((*seq, nh * hd)))
                        .op("attention")?,
                );
            }
            let attn = if outs.len() == 1 {
                outs.pop().expect("one")
            } else {
                Tensor::cat(&outs, 0).op("attention")?
            };
            let attn = attn.matmul(&layer.wo.t().op("t")?).op("attention output")?;
            x = (x + attn).op("residual")?;
            let h = rms_norm(&x, &layer.ffn_norm, c.rms_norm_eps)?;
            let gate_up = h.matmul(&layer.w_gate_up.t().op("t")?).op("mlp gate")?;
            let i_ = c.intermediate_size;
            let gate = gate_up.narrow(1, 0, i_).op("mlp gate")?;
            let up = gate_up.narrow(1, i_, i_).op("mlp up")?;
            let mlp = (silu(&gate)? * up)
                .and_then(|m| m.matmul(&layer.w_down.t()?))
                .op("mlp down")?;
            x = (x + mlp).op("residual")?;
        }
        for ((_, seq, past), (_, cache)) in spans.iter().zip(batch.iter_mut()) {
            cache.len = past + seq;
        }
        let last: Vec<u32> = spans
            .iter()
            .map(|(s, seq, _)| (s + seq - 1) as u32)
            .collect();
        let last = Tensor::new(last.as_slice(), &self.device).op("last positions")?;
        let last = x.index_select(&last, 0).op("last positions")?;
        let last = rms_norm(&last, &self.norm, c.rms_norm_eps)?;
        last.matmul(&self.lm_head.t().op("t")?)
            .and_then(|l| l.to_vec2::<f32>())
            .op("output projection")
    }
}

/// Opens a GGUF file and reads its header (metadata and tensor index); the file is left
/// open for reading tensors.
///
/// # Errors
/// [`Error::Io`] when it cannot be opened, [`Error::Model`] when the header does not parse.
pub fn open_gguf(
    path: &Path,
) -> Result<(std::fs::File, candle_core::quantized::gguf_file::Content)> {
    let mut file = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    let content = read_gguf_header(&mut file, path)?;
    Ok((file, content))
}

/// Reads a GGUF header (metadata and tensor index) from `reader`, left where the header
/// ends; `path` names the file in errors.
///
/// # Errors
/// [`Error::Model`] when the header does not parse.
pub fn read_gguf_header<R: std::io::Read + std::io::Seek>(
    reader: &mut R,
    path: &Path,
) -> Result<candle_core::quantized::gguf_file::Content> {
    candle_core::quantized::gguf_file::Content::read(reader).map_err(|e| Error::Model {
        path: path.into(),
        reason: e.to_string(),
    })
}

/// The GGUF (llama.cpp) name of a Hugging Face Llama tensor.
pub fn gguf_name(hf: &str) -> String {
    let map = [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.norm.weight", "output_norm.weight"),
        ("lm_head.weight", "output.weight"),
    ];
    if let Some((_, g)) = map.iter().find(|(h, _)| *h == hf) {
        return (*g).to_owned();
    }
    let Some(rest) = hf.strip_prefix("model.layers.") else {
        return hf.to_owned();
    };
    let (layer, part) = rest.split_once('.').unwrap_or((rest, ""));
    let part = match part {
        "input_layernorm.weight" => "attn_norm.weight",
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        other => other,
    };
    format!("blk.{layer}.{part}")
}

/// llama.cpp's converter's permutation of a query/key projection (rows of each head
/// reordered from half-split to interleaved): `reshape(heads, 2, hd/2, cols)`, swap the
/// two middle axes.
pub fn permute_for_gguf(w: &Tensor, heads: usize) -> Result<Tensor> {
    let (rows, cols) = w.dims2().op("permute")?;
    w.reshape((heads, 2, rows / heads / 2, cols))
        .and_then(|t| t.transpose(1, 2))
        .and_then(|t| t.contiguous())
        .and_then(|t| t.reshape((rows, cols)))
        .op("permute")
}

/// The inverse of [`permute_for_gguf`].
fn unpermute(w: &Tensor, heads: usize) -> Result<Tensor> {
    let (rows, cols) = w.dims2().op("permute")?;
    w.reshape((heads, rows / heads / 2, 2, cols))
        .and_then(|t| t.transpose(1, 2))
        .and_then(|t| t.contiguous())
        .and_then(|t| t.reshape((rows, cols)))
        .op("permute")
}

fn rope_tables(c: &LlamaConfig, device: &Device) -> Result<(Tensor, Tensor)> {
    let hd = c.head_dim();
    let half = hd / 2;
    let mut cos = Vec::with_capacity(c.max_position_embeddings * half);
    let mut sin = Vec::with_capacity(c.max_position_embeddings * half);
    for p in 0..c.max_position_embeddings {
        // θ_0 … θ_{half−1}: candle's fused `rope` applies them in the half-split layout of
        // transformers' rotate_half
        for i in 0..half {
            let inv_freq = 1.0 / c.rope_theta.powf((2 * i) as f64 / hd as f64);
            let angle = p as f64 * inv_freq;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    let shape = (c.max_position_embeddings, half);
    Ok((
        Tensor::from_vec(cos, shape, device).op("rope table")?,
        Tensor::from_vec(sin, shape, device).op("rope table")?,
    ))
}

/// `x·cos + rotate_half(x)·sin` (candle's fused kernel) for x of shape (heads, seq, head
/// width).
fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    // x is (heads, rows, head width); cos and sin (rows, head width / 2), one row per
    // position
    x.unsqueeze(0)
        .and_then(|x| candle_nn::rotary_emb::rope(&x, cos, sin))
        .and_then(|x| x.squeeze(0))
        .op("rope")
}

/// (seq, past + seq): 0 where query i may see key j (j ≤ past + i), −∞ elsewhere.
fn causal_mask(past: usize, seq: usize, device: &Device) -> Result<Tensor> {
    let total = past + seq;
    let m: Vec<f32> = (0..seq)
        .flat_map(|i| (0..total).map(move |j| if j > past + i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(m, (seq, total), device).op("mask")
}

fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    candle_nn::ops::rms_norm(x, w, eps as f32).op("rms norm")
}

fn softmax_last(x: &Tensor) -> Result<Tensor> {
    candle_nn::ops::softmax_last_dim(x).op("softmax")
}

fn silu(x: &Tensor) -> Result<Tensor> {
    x.silu().op("silu")
}

/// The model digest: SHA-256 over the weight files, as transcripts and receipts name the
/// model — for a model directory every `*.safetensors` in name order, each file's bytes in
/// full; for a file (a GGUF) its bytes.
///
/// # Errors
/// [`Error::Io`] when the directory or a file cannot be read, [`Error::Model`] when it holds
/// no weight file.
pub fn model_digest(dir: &Path) -> Result<[u8; 32]> {
    // `dir` is a model directory or a weights file
    use sha2::{Digest, Sha256};
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    let mut files: Vec<std::path::PathBuf> = if dir.is_file() {
        vec![dir.to_path_buf()]
    } else {
        std::fs::read_dir(dir)
            .map_err(io(dir))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect()
    };
    files.sort();
    if files.is_empty() {
        return Err(Error::Model {
            path: dir.into(),
            reason: "no *.safetensors weight file".into(),
        });
    }
    let mut h = Sha256::new();
    for f in &files {
        let mut file = std::fs::File::open(f).map_err(io(f))?;
        std::io::copy(&mut file, &mut h).map_err(io(f))?;
    }
    Ok(h.finalize().into())
}

/// The device named by `choice`: `cpu`, `cuda:N`, or `auto` (CUDA device 0 when this build
/// has the `cuda` feature and a GPU answers, else the CPU).
///
/// # Errors
/// [`Error::Request`] for another name, or a CUDA device this build or machine cannot open
/// (saying which).
pub fn device(choice: &str) -> Result<Device> {
    match choice {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(Device::cuda_if_available(0).unwrap_or(Device::Cpu)),
        other => {
            let n = other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    Error::Request(format!("device {other:?} is not auto, cpu or cuda:N"))
                })?;
            if !cfg!(feature = "cuda") {
                return Err(Error::Request(format!(
                    "device cuda:{n}: this build has no CUDA runtime (build fleetmesh-inference \
                     with the `cuda` feature, which needs the CUDA toolkit)"
                )));
            }
            Device::new_cuda(n).map_err(|e| Error::Request(format!("device cuda:{n}: {e}")))
        }
    }
}

/// The engine name executors report for a model on `device`: the runtime and where it runs
/// (`fleetmesh-candle/cpu`, `fleetmesh-candle/cuda`), since a GPU's F32 arithmetic is not
/// the CPU's.
pub fn engine_name(device: &Device) -> String {
    let place = if device.is_cuda() { "cuda" } else { "cpu" };
    format!("{}/{place}", crate::executor::ENGINE)
}

/// The CUDA ordinal of `device` (None on the CPU): which GPU's evidence covers a job.
pub fn gpu_index(device: &Device) -> Option<u32> {
    match device.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => Some(gpu_id as u32),
        _ => None,
    }
}

/// The id of the largest logit, the lowest id among equal ones.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in logits.iter().enumerate() {
        if *v > logits[best] {
            best = i;
        }
    }
    best as u32
}
