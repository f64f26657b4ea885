//! Loading llama.cpp's GGUF files: the `llama.*` metadata as a [`LlamaConfig`], tensor
//! names mapped to Hugging Face's, and the query/key rows put back in Hugging Face's order.
//! Quantized tensors stay quantized (`weight.rs`); F16 and BF16 stay half width.
//! Use [`Llama::load_gguf`]; the helpers here also serve the tiny model's writer and the
//! chat template reader.

use std::path::Path;

use candle_core::quantized::GgmlDType;
use candle_core::{DType, Device, Tensor};

use crate::error::{CandleContext, Error, Result};
use crate::weight::{Weight, file_type_name};
use crate::{Llama, LlamaConfig};

impl Llama {
    /// Loads a GGUF file (llama architecture), its shape from the `llama.*` metadata.
    /// Quantized matrices (Q8_0, Q4_0, Q4_K, Q6_K and the other GGML block types) stay
    /// quantized and are multiplied as such; F16 and BF16 matrices stay half width; norms
    /// are widened to F32. [`Llama::dtype`] then names the file type (`general.file_type`,
    /// e.g. `q4_k_m`). llama.cpp's converter stores the query
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
        if !GGUF_ARCHS.contains(&arch.as_str()) {
            return Err(model_err(format!(
                "architecture {arch:?} is not one of {}",
                GGUF_ARCHS.join(", ")
            )));
        }
        // the metadata keys are named after the architecture: llama.block_count …
        let key = |k: &str| format!("{arch}.{k}");
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
        let heads = int(&key("attention.head_count"))?;
        // absent, or 0: no window; present and not a count: refused like any other key
        let window = match content.metadata.get(&key("attention.sliding_window")) {
            None => None,
            Some(_) => Some(int(&key("attention.sliding_window"))?).filter(|w| *w > 0),
        };
        // linear scaling is stated in the metadata; Llama 3's as per-frequency factors
        // (the `rope_freqs` tensor, which `Llama::from_tensors` applies)
        let rope_scaling = match content.metadata.get(&key("rope.scaling.type")) {
            None => None,
            Some(t) => match t
                .to_string()
                .map_err(|e| model_err(e.to_string()))?
                .as_str()
            {
                "none" => None,
                "linear" => Some(serde_json::json!({
                    "rope_type": "linear",
                    "factor": float(&key("rope.scaling.factor"), 1.0)?,
                })),
                other => {
                    return Err(model_err(format!(
                        "{}: {other:?} is not supported (none, linear)",
                        key("rope.scaling.type")
                    )));
                }
            },
        };
        let config = LlamaConfig {
            // a llama file that states a sliding window (as `write_gguf` stores a windowed
            // Mistral) runs as a Mistral
            model_type: match arch.as_str() {
                "llama" if window.is_some() => "mistral".into(),
                _ => arch.clone(),
            },
            sliding_window: window,
            use_sliding_window: false,
            rope_scaling,
            partial_rotary_factor: None,
            head_dim: None,
            attention_bias: false,
            mlp_bias: false,
            hidden_size: int(&key("embedding_length"))?,
            intermediate_size: int(&key("feed_forward_length"))?,
            vocab_size,
            num_hidden_layers: int(&key("block_count"))?,
            num_attention_heads: heads,
            num_key_value_heads: Some(int(&key("attention.head_count_kv")).unwrap_or(heads)),
            rms_norm_eps: f64::from(float(&key("attention.layer_norm_rms_epsilon"), 1e-5)?),
            rope_theta: f64::from(float(&key("rope.freq_base"), 10_000.0)?),
            max_position_embeddings: int(&key("context_length"))?,
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
            let q = content
                .tensor(reader, name, &Device::Cpu)
                .map_err(|e| model_err(format!("{name}: {e}")))?;
            let weight = match q.dtype() {
                GgmlDType::F16 | GgmlDType::BF16 => {
                    let dtype = if q.dtype() == GgmlDType::F16 {
                        DType::F16
                    } else {
                        DType::BF16
                    };
                    let data = q.data().map_err(|e| model_err(format!("{name}: {e}")))?;
                    Weight::Dense(
                        Tensor::from_raw_buffer(&data, dtype, q.shape().dims(), &Device::Cpu)
                            .map_err(|e| model_err(format!("{name}: {e}")))?,
                    )
                }
                // matrices stay in their blocks; anything else (norms) is widened
                t if t != GgmlDType::F32 && q.shape().rank() == 2 => {
                    Weight::Quant(std::sync::Arc::new(q))
                }
                _ => Weight::Dense(
                    q.dequantize(&Device::Cpu)
                        .map_err(|e| model_err(format!("{name}: {e}")))?,
                ),
            };
            tensors.insert(name.clone(), weight);
        }
        let label = content
            .metadata
            .get("general.file_type")
            .and_then(|v| v.to_u32().ok())
            .and_then(file_type_name)
            .map(str::to_owned);
        let (nh, kv) = (config.num_attention_heads, config.kv_heads());
        // llama.cpp's converter interleaves the query/key rows of Llamas only (Qwen2 and
        // Phi-3 keep the half-split order: their rope type is NEOX)
        let permuted = arch == "llama";
        Llama::from_tensors(config, tensors, path, label, gguf_name, |w, name| {
            if !permuted {
                Ok(w)
            } else if name.ends_with(".attn_q.weight") {
                w.reorder_rows(&half_split_order(w.dims()[0], nh))
            } else if name.ends_with(".attn_k.weight") {
                w.reorder_rows(&half_split_order(w.dims()[0], kv))
            } else {
                Ok(w)
            }
        })
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

/// The GGUF architectures read (a Mistral is a `llama` to llama.cpp).
const GGUF_ARCHS: [&str; 3] = ["llama", "qwen2", "phi3"];

/// The GGUF (llama.cpp) name of a Hugging Face Llama, Qwen2, Mistral or Phi-3 tensor.
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
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.qkv_proj.weight" => "attn_qkv.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        // Phi-3's gate and up rows, fused as llama.cpp keeps them
        "mlp.gate_up_proj.weight" => "ffn_up.weight",
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

/// The row order that undoes [`permute_for_gguf`] on a projection of `rows` rows in
/// `heads` heads: row `i` of the result is row `order[i]` of the file's (whole rows, so
/// quantized blocks move intact).
fn half_split_order(rows: usize, heads: usize) -> Vec<usize> {
    let hd = rows / heads.max(1);
    let half = hd / 2;
    (0..rows)
        .map(|i| {
            let (head, r) = (i / hd.max(1), i % hd.max(1));
            let (a, b) = (r / half.max(1), r % half.max(1));
            head * hd + 2 * b + a
        })
        .collect()
}

/// A GGUF file type as llama.cpp's `quantize` tool names it: how [`write_gguf`] stores
/// each matrix. Norms are always F32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileType {
    /// Every matrix F32.
    F32,
    /// Every matrix F16.
    F16,
    /// Every matrix Q8_0 (32-value blocks, 8-bit).
    Q8_0,
    /// Every matrix Q4_0 (32-value blocks, 4-bit).
    Q4_0,
    /// llama.cpp's `Q4_K_M` mix: Q4_K, with Q6_K for the output projection and for the
    /// value and down projections of the first and last eighth of the layers and every
    /// third one between (its `use_more_bits`).
    Q4KM,
    /// Every matrix Q6_K.
    Q6K,
}

impl FileType {
    /// Every file type, in the order `meshnode model quantize --help` lists them.
    pub const ALL: [FileType; 6] = [
        FileType::F32,
        FileType::F16,
        FileType::Q8_0,
        FileType::Q4_0,
        FileType::Q4KM,
        FileType::Q6K,
    ];

    /// llama.cpp's lower-case name (`q4_k_m`).
    pub fn name(self) -> &'static str {
        match self {
            FileType::F32 => "f32",
            FileType::F16 => "f16",
            FileType::Q8_0 => "q8_0",
            FileType::Q4_0 => "q4_0",
            FileType::Q4KM => "q4_k_m",
            FileType::Q6K => "q6_k",
        }
    }

    /// The file type named `name` (either case).
    pub fn parse(name: &str) -> Option<FileType> {
        let name = name.to_ascii_lowercase();
        FileType::ALL.into_iter().find(|t| t.name() == name)
    }

    /// llama.cpp's `llama_ftype` number, written as `general.file_type`.
    fn number(self) -> u32 {
        match self {
            FileType::F32 => 0,
            FileType::F16 => 1,
            FileType::Q4_0 => 2,
            FileType::Q8_0 => 7,
            FileType::Q4KM => 15,
            FileType::Q6K => 18,
        }
    }

    /// The storage of the GGUF tensor `name` (layer `layer` of `layers`) with `cols`
    /// columns: the type's own, or Q8_0 (then F32) where a row is not whole blocks of it,
    /// as llama.cpp falls back.
    fn tensor_type(
        self,
        name: &str,
        layer: Option<usize>,
        layers: usize,
        cols: usize,
    ) -> GgmlDType {
        let more_bits =
            |i: usize| i < layers / 8 || i >= 7 * layers / 8 || (i - layers / 8) % 3 == 2;
        let want = match self {
            FileType::F32 => GgmlDType::F32,
            FileType::F16 => GgmlDType::F16,
            FileType::Q8_0 => GgmlDType::Q8_0,
            FileType::Q4_0 => GgmlDType::Q4_0,
            FileType::Q6K => GgmlDType::Q6K,
            FileType::Q4KM => {
                let down_or_v =
                    name.ends_with("attn_v.weight") || name.ends_with("ffn_down.weight");
                if name == "output.weight" || (down_or_v && layer.is_some_and(more_bits)) {
                    GgmlDType::Q6K
                } else if name.ends_with("attn_qkv.weight") {
                    // llama.cpp's rule for a fused query/key/value projection
                    GgmlDType::Q5K
                } else {
                    GgmlDType::Q4K
                }
            }
        };
        [want, GgmlDType::Q8_0, GgmlDType::F32]
            .into_iter()
            .find(|t| cols.is_multiple_of(t.block_size()))
            .unwrap_or(GgmlDType::F32)
    }
}

/// Writes `tensors` (Hugging Face names, F32) as a llama GGUF file of type `ft`: llama.cpp's
/// tensor names, its query/key row order, its `llama.*` metadata and a vocabulary llama.cpp
/// loads (`<0xNN>` byte pieces for the first 256 ids, then placeholder pieces: fleetmesh's
/// tokenizer is the `tokenizer.json` beside the file).
///
/// # Errors
/// [`Error::Io`] or [`Error::Model`] when the file cannot be written or a tensor not
/// quantized.
pub fn write_gguf(
    c: &LlamaConfig,
    tensors: &std::collections::HashMap<String, Tensor>,
    ft: FileType,
    path: &Path,
) -> Result<()> {
    use candle_core::quantized::{QTensor, gguf_file::Value};
    let model_err = |e: candle_core::Error| Error::Model {
        path: path.into(),
        reason: e.to_string(),
    };
    let u = |v: usize| Value::U32(v as u32);
    let pieces: Vec<Value> = (0..c.vocab_size)
        .map(|i| {
            Value::String(if i < 256 {
                format!("<0x{i:02X}>")
            } else {
                format!("<fleetmesh-{i}>")
            })
        })
        .collect();
    // llama.cpp's token types: 6 a byte piece, 1 a normal one
    let kinds: Vec<Value> = (0..c.vocab_size)
        .map(|i| Value::I32(if i < 256 { 6 } else { 1 }))
        .collect();
    // a Mistral is a llama to llama.cpp
    let arch = match c.model_type.as_str() {
        "qwen2" => "qwen2",
        "phi3" => "phi3",
        _ => "llama",
    };
    let permuted = arch == "llama";
    let key = |k: &str| format!("{arch}.{k}");
    let mut tensors = tensors.clone();
    if let Some(factors) = rope_freqs(c) {
        let n = factors.len();
        let t = Tensor::from_vec(factors, n, &Device::Cpu).op("rope_freqs")?;
        tensors.insert("rope_freqs.weight".into(), t);
    }
    let mut metadata = vec![
        (
            "general.architecture".to_owned(),
            Value::String(arch.into()),
        ),
        (
            "general.name".to_owned(),
            Value::String("fleetmesh tiny".into()),
        ),
        ("general.file_type".to_owned(), Value::U32(ft.number())),
        (key("block_count"), u(c.num_hidden_layers)),
        (key("embedding_length"), u(c.hidden_size)),
        (key("feed_forward_length"), u(c.intermediate_size)),
        (key("attention.head_count"), u(c.num_attention_heads)),
        (key("attention.head_count_kv"), u(c.kv_heads())),
        (
            key("attention.layer_norm_rms_epsilon"),
            Value::F32(c.rms_norm_eps as f32),
        ),
        (key("rope.freq_base"), Value::F32(c.rope_theta as f32)),
        (key("rope.dimension_count"), u(c.head_dim())),
        (key("context_length"), u(c.max_position_embeddings)),
        (key("vocab_size"), u(c.vocab_size)),
        (
            "tokenizer.ggml.model".to_owned(),
            Value::String("llama".into()),
        ),
        ("tokenizer.ggml.tokens".to_owned(), Value::Array(pieces)),
        (
            "tokenizer.ggml.scores".to_owned(),
            Value::Array(vec![Value::F32(0.0); c.vocab_size]),
        ),
        ("tokenizer.ggml.token_type".to_owned(), Value::Array(kinds)),
        (
            "tokenizer.ggml.add_bos_token".to_owned(),
            Value::Bool(false),
        ),
        (
            "tokenizer.chat_template".to_owned(),
            Value::String(crate::chat::family_template(&c.model_type).0.into()),
        ),
    ];
    if let Some(w) = c.window() {
        metadata.push((key("attention.sliding_window"), u(w)));
    }
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut q = Vec::with_capacity(names.len());
    for hf in names {
        let mut t = tensors[hf].to_dtype(DType::F32).op("write gguf")?;
        if permuted && hf.ends_with("self_attn.q_proj.weight") {
            t = permute_for_gguf(&t, c.num_attention_heads)?;
        } else if permuted && hf.ends_with("self_attn.k_proj.weight") {
            t = permute_for_gguf(&t, c.kv_heads())?;
        }
        let name = gguf_name(hf);
        let dtype = if t.rank() == 2 {
            let layer = hf
                .strip_prefix("model.layers.")
                .and_then(|r| r.split('.').next())
                .and_then(|l| l.parse().ok());
            ft.tensor_type(&name, layer, c.num_hidden_layers, t.dims()[1])
        } else {
            GgmlDType::F32
        };
        let qt = QTensor::quantize(&t, dtype).map_err(model_err)?;
        q.push((name, qt));
    }
    let meta: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tens: Vec<(&str, &QTensor)> = q.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path).map_err(|source| Error::Io {
        path: path.into(),
        source,
    })?;
    candle_core::quantized::gguf_file::write(&mut file, &meta, &tens).map_err(model_err)
}

/// llama.cpp's per-frequency divisors (`rope_freqs.weight`) for a config whose
/// `rope_scaling` changes the frequencies: θᵢ unscaled over θᵢ scaled.
fn rope_freqs(c: &LlamaConfig) -> Option<Vec<f32>> {
    c.rope_scaling.as_ref().filter(|v| !v.is_null())?;
    let plain = LlamaConfig {
        rope_scaling: None,
        ..c.clone()
    };
    let factors: Vec<f32> = plain
        .inv_freq()
        .iter()
        .zip(c.inv_freq())
        .map(|(a, b)| (a / b) as f32)
        .collect();
    factors.iter().any(|f| *f != 1.0).then_some(factors)
}

/// Converts a Hugging Face Llama directory (`config.json`, `model.safetensors`) into a GGUF
/// file of type `ft` at `out` (what `meshnode model quantize` runs): the weights widened to
/// F32, then stored as [`write_gguf`] stores them.
///
/// # Errors
/// [`Error::Io`] or [`Error::Model`] for a directory that does not load or a file that
/// cannot be written.
pub fn convert_dir(dir: &Path, ft: FileType, out: &Path) -> Result<()> {
    let config = LlamaConfig::read(&dir.join("config.json"))?;
    let path = dir.join("model.safetensors");
    let tensors =
        candle_core::safetensors::load(&path, &Device::Cpu).map_err(|e| Error::Model {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    config.check().map_err(|reason| Error::Model {
        path: dir.join("config.json"),
        reason,
    })?;
    write_gguf(&config, &tensors, ft, out)
}
