//! A Llama-family decoder (Llama, Qwen2, Mistral, Phi-3) on candle tensors, loaded from a
//! Hugging Face model directory (`config.json` + `model.safetensors`, F32, F16 or BF16) or
//! a GGUF file (see
//! [`crate::gguf`]; quantized weights stay quantized). Activations, norms and attention
//! run in F32; each projection multiplies in its weights' stored dtype
//! ([`Llama::dtype`] names it).
//!
//! The forward pass is Hugging Face transformers' `LlamaForCausalLM`: RMSNorm before
//! attention and MLP, rotary embeddings in the half-split layout (`rotate_half`, with
//! `rope_scaling`'s linear or Llama 3 frequencies), grouped-query attention with a causal
//! mask (and a sliding window for Mistral and Phi-3), SwiGLU MLP, a final RMSNorm and the output
//! projection (tied to the embeddings when the config says so). A [`KvCache`] keeps each
//! layer's keys and values so decoding one more token costs one position: on the CPU in
//! host memory, appended in place, a decoded row attended without tensor operations
//! (`attention.rs`); on a GPU as tensors.

use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::LlamaConfig;
use crate::attention::{Heads, HostKv, TensorKv, causal_mask, rope_tables};
use crate::error::{CandleContext, Error, Result};
use crate::pool::Pool;
use crate::weight::Weight;

pub use crate::gguf::{gguf_name, open_gguf, permute_for_gguf, read_gguf_header};
pub use crate::placement::{
    FIT_CONTEXT, Placement, check_fits, cuda_libraries, device, device_fault, device_memory,
    engine_name, gpu_index, place,
};

struct Layer {
    attn_norm: Tensor,
    /// The query, key and value projections (q rows, then k, then v), stacked into one
    /// matrix product when their dtypes agree ([`Weight::stack`]).
    wqkv: Vec<Weight>,
    /// Qwen2's query, key and value biases, stacked as `wqkv`'s outputs are.
    bqkv: Option<Tensor>,
    wo: Weight,
    ffn_norm: Tensor,
    /// The gate and up projections, stacked like `wqkv`.
    w_gate_up: Vec<Weight>,
    w_down: Weight,
}

/// `x` through projections that read it, their outputs side by side (columns).
fn project(x: &Tensor, parts: &[Weight]) -> Result<Tensor> {
    match parts {
        [one] => one.forward(x),
        _ => {
            let outs = parts
                .iter()
                .map(|w| w.forward(x))
                .collect::<Result<Vec<_>>>()?;
            Tensor::cat(&outs, 1).op("projection")
        }
    }
}

/// `parts` with each run of neighbours that share a storage stacked into one weight (all
/// three of q, k, v when their dtypes agree; q and k when a Q4_K_M file stores v as Q6_K).
fn stacked(parts: &[&Weight]) -> Result<Vec<Weight>> {
    let mut out: Vec<Weight> = Vec::with_capacity(parts.len());
    for p in parts {
        if let Some(last) = out.last_mut()
            && let Some(w) = Weight::stack(&[&*last, p])?
        {
            *last = w;
            continue;
        }
        out.push((*p).clone());
    }
    Ok(out)
}

/// A loaded model.
pub struct Llama {
    config: LlamaConfig,
    embed: Weight,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Weight,
    /// What [`Llama::dtype`] reports.
    dtype: String,
    /// cos and sin of every position's rotary angles, (max positions, head width / 2).
    cos: Tensor,
    sin: Tensor,
    /// The same tables in host memory, for attention on the CPU.
    rope_host: (Vec<f32>, Vec<f32>),
    device: Device,
    /// Runs attention and the MLP's activation as candle tensor operations, as on a GPU,
    /// even on the CPU ([`Llama::with_tensor_path`]): how the GPU's path is tested here.
    tensor_path: bool,
}

impl std::fmt::Debug for Llama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llama")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Keys and values of the positions already seen, per layer: in host memory, grown in
/// place, for a model on the CPU (`attention.rs`); as tensors on the model's GPU.
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<LayerKv>,
    len: usize,
}

/// One layer's cached keys and values.
#[derive(Debug, Default)]
enum LayerKv {
    #[default]
    Empty,
    Host(HostKv),
    Tensors(TensorKv),
}

impl LayerKv {
    /// The host cache, started if this layer had none.
    fn host(&mut self) -> &mut HostKv {
        if !matches!(self, LayerKv::Host(_)) {
            *self = LayerKv::Host(HostKv::default());
        }
        match self {
            LayerKv::Host(kv) => kv,
            _ => unreachable!("set just above"),
        }
    }

    /// The tensor cache (a GPU's, or the CPU's on the tensor path), started if this layer
    /// had none.
    fn tensors(&mut self) -> &mut TensorKv {
        if !matches!(self, LayerKv::Tensors(_)) {
            *self = LayerKv::Tensors(TensorKv::default());
        }
        match self {
            LayerKv::Tensors(kv) => kv,
            _ => unreachable!("set just above"),
        }
    }
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
        Llama::from_tensors(
            config,
            dense(tensors),
            &path,
            None,
            str::to_owned,
            |w, _| Ok(w),
        )
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
        Llama::from_tensors(config, dense(tensors), path, None, str::to_owned, |w, _| {
            Ok(w)
        })
    }

    /// Builds the model from named weights: `rename` maps a Hugging Face tensor name to the
    /// file's, `fix` adjusts a weight after it is found (given the file's name); `label`
    /// names the file's dtype when it states one (a GGUF's file type), else
    /// [`Llama::dtype`] is worked out from the weights.
    pub(crate) fn from_tensors(
        config: LlamaConfig,
        mut tensors: std::collections::HashMap<String, Weight>,
        path: &Path,
        label: Option<String>,
        rename: impl Fn(&str) -> String,
        fix: impl Fn(Weight, &str) -> Result<Weight>,
    ) -> Result<Llama> {
        let device = Device::Cpu;
        let n_tensors = tensors.len();
        let (h, kv, hd) = (config.hidden_size, config.kv_heads(), config.head_dim());
        let mut take = |hf: String, shape: &[usize]| -> Result<Weight> {
            let name = rename(&hf);
            let w = tensors.remove(&name).ok_or_else(|| Error::Model {
                path: path.into(),
                reason: format!("no tensor {name}"),
            })?;
            if w.dims() != shape {
                return Err(Error::Model {
                    path: path.into(),
                    reason: format!("{name} has shape {:?}, expected {shape:?}", w.dims()),
                });
            }
            let w = match w {
                // half widths stay as stored; anything else dense is computed in F32
                Weight::Dense(t) if !matches!(t.dtype(), DType::F16 | DType::BF16) => {
                    Weight::Dense(t.to_dtype(DType::F32).op("load")?)
                }
                w => w,
            };
            fix(w, &name)
        };
        let embed = take("model.embed_tokens.weight".into(), &[config.vocab_size, h])?;
        // the count comes from the file: reserve no more layers than it has tensors for
        let mut layers = Vec::with_capacity(config.num_hidden_layers.min(n_tensors));
        for i in 0..config.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let i_ = config.intermediate_size;
            let attn_norm = vector(take(format!("{p}.input_layernorm.weight"), &[h])?)?;
            let fused = config.fused_projections();
            let wqkv = if fused {
                // Phi-3 stores the three as one matrix, q rows then k then v
                let w = take(
                    format!("{p}.self_attn.qkv_proj.weight"),
                    &[h + 2 * kv * hd, h],
                )?;
                vec![w]
            } else {
                let wq = take(format!("{p}.self_attn.q_proj.weight"), &[h, h])?;
                let wk = take(format!("{p}.self_attn.k_proj.weight"), &[kv * hd, h])?;
                let wv = take(format!("{p}.self_attn.v_proj.weight"), &[kv * hd, h])?;
                stacked(&[&wq, &wk, &wv])?
            };
            let bqkv = if config.qkv_bias() {
                let mut b = Vec::with_capacity(3);
                for (name, len) in [("q", h), ("k", kv * hd), ("v", kv * hd)] {
                    b.push(vector(take(
                        format!("{p}.self_attn.{name}_proj.bias"),
                        &[len],
                    )?)?);
                }
                Some(Tensor::cat(&b, 0).op("stack biases")?)
            } else {
                None
            };
            let wo = take(format!("{p}.self_attn.o_proj.weight"), &[h, h])?;
            let ffn_norm = vector(take(format!("{p}.post_attention_layernorm.weight"), &[h])?)?;
            let w_gate_up = if fused {
                // gate rows, then up (transformers' Phi3MLP chunks it in that order)
                vec![take(format!("{p}.mlp.gate_up_proj.weight"), &[2 * i_, h])?]
            } else {
                let w_gate = take(format!("{p}.mlp.gate_proj.weight"), &[i_, h])?;
                let w_up = take(format!("{p}.mlp.up_proj.weight"), &[i_, h])?;
                stacked(&[&w_gate, &w_up])?
            };
            let w_down = take(format!("{p}.mlp.down_proj.weight"), &[h, i_])?;
            layers.push(Layer {
                attn_norm,
                wqkv,
                bqkv,
                wo,
                ffn_norm,
                w_gate_up,
                w_down,
            });
        }
        let norm = vector(take("model.norm.weight".into(), &[h])?)?;
        let lm_head = if config.tie_word_embeddings {
            embed.clone()
        } else {
            take("lm_head.weight".into(), &[config.vocab_size, h])?
        };
        // llama.cpp's per-frequency divisors (a Llama 3.1 GGUF's `rope_freqs`)
        let divisors = match tensors.remove(&rename("rope_freqs.weight")) {
            None => None,
            Some(w) => {
                let v: Vec<f32> = vector(w)?.to_vec1().op("rope_freqs")?;
                if v.len() != hd / 2 || v.iter().any(|f| !f.is_finite() || *f <= 0.0) {
                    return Err(Error::Model {
                        path: path.into(),
                        reason: format!(
                            "rope_freqs.weight: {} factors, expected {} positive ones",
                            v.len(),
                            hd / 2
                        ),
                    });
                }
                Some(v)
            }
        };
        let ((cos, sin), rope_host) = rope_tables(&config, divisors.as_deref(), &device)?;
        let dtype = label.unwrap_or_else(|| {
            let mut weights: Vec<&Weight> = vec![&embed, &lm_head];
            for l in &layers {
                weights.extend(l.wqkv.iter().chain(&l.w_gate_up));
                weights.extend([&l.wo, &l.w_down]);
            }
            dtype_summary(&weights)
        });
        Ok(Llama {
            config,
            embed,
            layers,
            norm,
            lm_head,
            dtype,
            cos,
            sin,
            rope_host,
            device,
            tensor_path: false,
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    /// The dtype its projections multiply in, as llama.cpp names it: a GGUF's file type
    /// (`q4_k_m`, `q8_0`, `f16` …) when the file states one, else the weights' stored
    /// types, most parameters first, joined by `+` (`f32`, `bf16`, `q4_k+q6_k`). Answers
    /// report it, and the quorum holds only executors of one dtype to identical ids.
    pub fn dtype(&self) -> &str {
        &self.dtype
    }

    /// Bytes the weights take in memory (what a quantized file saves).
    pub fn weight_bytes(&self) -> usize {
        let mut total = self.embed.bytes() + self.norm.elem_count() * 4;
        if !self.config.tie_word_embeddings {
            total += self.lm_head.bytes();
        }
        for l in &self.layers {
            total += l
                .wqkv
                .iter()
                .chain(&l.w_gate_up)
                .map(Weight::bytes)
                .sum::<usize>();
            total += l.wo.bytes() + l.w_down.bytes();
            total += (l.attn_norm.elem_count() + l.ffn_norm.elem_count()) * 4;
        }
        total
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The model running attention, its KV cache and the MLP's activation as candle tensor
    /// operations, as it does on a GPU, wherever it is: the CPU then runs the GPU's code
    /// path (with candle's CPU kernels), so that path is tested on machines without one.
    pub fn with_tensor_path(mut self) -> Llama {
        self.tensor_path = true;
        self
    }

    /// Bytes one token of context takes in the KV cache (keys and values of every layer,
    /// F32).
    pub fn kv_bytes_per_token(&self) -> usize {
        let c = &self.config;
        c.num_hidden_layers * 2 * c.kv_heads() * c.head_dim() * 4
    }

    /// The model with its weights moved to `device` (a CUDA GPU needs this crate's `cuda`
    /// feature). The KV caches of a moved model live there too.
    ///
    /// # Errors
    /// [`Error::Device`] when the weights and one sequence's KV cache do not fit in the
    /// device's free memory ([`check_fits`], checked before anything is copied);
    /// [`Error::Candle`] when a tensor cannot be moved.
    pub fn to_device(self, device: &Device) -> Result<Llama> {
        if self.device.same_device(device) {
            return Ok(self);
        }
        if let Some((free, _)) = device_memory(device)? {
            check_fits(
                self.weight_bytes(),
                self.kv_bytes_per_token(),
                self.config.max_position_embeddings,
                free,
            )?;
        }
        let mv = |t: Tensor| t.to_device(device).op("to device");
        let all = |ws: Vec<Weight>| -> Result<Vec<Weight>> {
            ws.iter().map(|w| w.to_device(device)).collect()
        };
        let layers = self
            .layers
            .into_iter()
            .map(|l| {
                Ok(Layer {
                    attn_norm: mv(l.attn_norm)?,
                    wqkv: all(l.wqkv)?,
                    bqkv: l.bqkv.map(mv).transpose()?,
                    wo: l.wo.to_device(device)?,
                    ffn_norm: mv(l.ffn_norm)?,
                    w_gate_up: all(l.w_gate_up)?,
                    w_down: l.w_down.to_device(device)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Llama {
            config: self.config,
            embed: self.embed.to_device(device)?,
            layers,
            norm: mv(self.norm)?,
            lm_head: self.lm_head.to_device(device)?,
            dtype: self.dtype,
            cos: mv(self.cos)?,
            sin: mv(self.sin)?,
            rope_host: self.rope_host,
            device: device.clone(),
            tensor_path: self.tensor_path,
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
                cache.layers = (0..self.layers.len()).map(|_| LayerKv::Empty).collect();
            }
            spans.push((all.len(), tokens.len(), cache.len));
            all.extend_from_slice(tokens);
            positions.extend((cache.len..cache.len + tokens.len()).map(|p| p as u32));
        }
        let ids = Tensor::new(all.as_slice(), &self.device).op("ids")?;
        let mut x = self.embed.rows(&ids)?;
        // the host's attention and activation on the CPU; candle's tensor operations on a
        // GPU (and on the CPU with `tensor_path`, to test them where there is no GPU)
        let cpu = self.device.is_cpu() && !self.tensor_path;
        // on a GPU, each row's rotary angles (rows, head width / 2), broadcast over the heads
        let rope_rows = if cpu {
            None
        } else {
            let pos = Tensor::new(positions.as_slice(), &self.device).op("positions")?;
            Some((
                self.cos.index_select(&pos, 0).op("rope")?,
                self.sin.index_select(&pos, 0).op("rope")?,
            ))
        };
        // one new position sees every cached one: only prompts need a mask, and on a GPU
        // a decoded row that the window cuts off from the oldest (the host attention
        // applies the window to a decoded row itself)
        let window = c.window();
        let masks = spans
            .iter()
            .map(|(_, seq, past)| {
                let cut = !cpu && window.is_some_and(|w| past + seq > w);
                (*seq > 1 || cut)
                    .then(|| causal_mask(*past, *seq, window, &self.device))
                    .transpose()
            })
            .collect::<Result<Vec<_>>>()?;
        for (l, layer) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &layer.attn_norm, c.rms_norm_eps)?;
            let mut qkv = project(&h, &layer.wqkv)?;
            if let Some(b) = &layer.bqkv {
                qkv = qkv.broadcast_add(b).op("projection bias")?;
            }
            let heads = Heads {
                q: nh,
                kv,
                width: hd,
            };
            let attn = if let Some((cos, sin)) = &rope_rows {
                let mut kvs: Vec<&mut TensorKv> = batch
                    .iter_mut()
                    .map(|(_, cache)| cache.layers[l].tensors())
                    .collect();
                crate::attention::tensor_layer(&qkv, &spans, &mut kvs, heads, (cos, sin), &masks)?
            } else {
                let mut kvs: Vec<&mut HostKv> = batch
                    .iter_mut()
                    .map(|(_, cache)| cache.layers[l].host())
                    .collect();
                crate::attention::layer(
                    &qkv,
                    &spans,
                    &mut kvs,
                    heads,
                    (&self.rope_host.0, &self.rope_host.1),
                    &masks,
                    window,
                    layer.w_down.pool(),
                )?
            };
            let attn = layer.wo.forward(&attn)?;
            x = (x + attn).op("residual")?;
            let h = rms_norm(&x, &layer.ffn_norm, c.rms_norm_eps)?;
            let gate_up = project(&h, &layer.w_gate_up)?;
            let i_ = c.intermediate_size;
            let act = if cpu {
                silu_mul_host(&gate_up, i_, layer.w_down.pool())?
            } else {
                let gate = gate_up.narrow(1, 0, i_).op("mlp gate")?;
                let up = gate_up.narrow(1, i_, i_).op("mlp up")?;
                (silu(&gate)? * up).op("mlp")?
            };
            let mlp = layer.w_down.forward(&act)?;
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
        self.lm_head
            .forward(&last)?
            .to_vec2::<f32>()
            .op("output projection")
    }
}

/// Named tensors as dense weights.
fn dense(
    tensors: std::collections::HashMap<String, Tensor>,
) -> std::collections::HashMap<String, Weight> {
    tensors
        .into_iter()
        .map(|(k, t)| (k, Weight::Dense(t)))
        .collect()
}

/// A norm's weight as one F32 vector.
fn vector(w: Weight) -> Result<Tensor> {
    match w {
        Weight::Dense(t) => t.to_dtype(DType::F32).op("load"),
        Weight::Quant(q) => q.dequantize(&Device::Cpu).op("load"),
    }
}

/// The stored types of `weights`, most parameters first, joined by `+`.
fn dtype_summary(weights: &[&Weight]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for w in weights {
        let n = w.dims().iter().product::<usize>();
        let name = w.dtype_name();
        match counts.iter_mut().find(|(k, _)| *k == name) {
            Some((_, c)) => *c += n,
            None => counts.push((name, n)),
        }
    }
    counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    counts
        .into_iter()
        .map(|(k, _)| k)
        .collect::<Vec<_>>()
        .join("+")
}

fn rms_norm(x: &Tensor, w: &Tensor, eps: f64) -> Result<Tensor> {
    candle_nn::ops::rms_norm(x, w, eps as f32).op("rms norm")
}

fn silu(x: &Tensor) -> Result<Tensor> {
    x.silu().op("silu")
}

/// `silu(gate) · up` from the rows of `[gate | up]` (each `2·width` wide), on the CPU in one
/// pass split over `pool`; the arithmetic of candle's `silu` then `mul`, to the bit.
fn silu_mul_host(gate_up: &Tensor, width: usize, pool: Pool) -> Result<Tensor> {
    let rows = gate_up.dim(0).op("mlp")?;
    let v: Vec<f32> = gate_up.flatten_all().and_then(|t| t.to_vec1()).op("mlp")?;
    let mut out = vec![0f32; rows * width];
    let piece = 1024.min(width);
    let mut pieces: Vec<(usize, &mut [f32])> = out
        .chunks_mut(piece)
        .enumerate()
        .map(|(i, o)| (i * piece, o))
        .collect();
    // an exp costs about sixteen multiply-adds
    pool.each(&mut pieces, 16 * rows * width, |(start, o)| {
        let (mut r, mut c) = (*start / width, *start % width);
        for o in o.iter_mut() {
            let g = v[r * 2 * width + c];
            *o = (g / (1.0 + (-g).exp())) * v[r * 2 * width + width + c];
            c += 1;
            if c == width {
                (r, c) = (r + 1, 0);
            }
        }
    });
    drop(pieces);
    Tensor::from_vec(out, (rows, width), gate_up.device()).op("mlp")
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
