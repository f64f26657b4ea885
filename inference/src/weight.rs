//! A projection's weights as the forward pass multiplies them, in the dtype they were
//! stored in: dense F32, dense F16/BF16 (kept at half the memory; the activations are
//! rounded to the weight's dtype for the product and the result widened back), or GGML
//! block-quantized (Q8_0, Q4_0, Q4_K, Q6_K, …), multiplied by our kernels for Q8_0, Q4_0,
//! Q4_K and Q6_K on AVX2 CPUs ([`crate::quant`]) and candle's quantized kernels otherwise
//! (activations quantized to the matching dot-product blocks, as llama.cpp does) without
//! ever expanding the weights to F32.
//!
//! [`Weight::stack`] joins projections that read the same input (query, key and value;
//! gate and up) into one product when their storage allows it: dense weights of one dtype
//! are concatenated, quantized ones of one block type have their rows' bytes appended.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Tensor};

use crate::error::{CandleContext, Result};
use crate::pool::Pool;

/// One matrix of shape (out, in), applied as `x · Wᵀ`.
#[derive(Clone, Debug)]
pub(crate) enum Weight {
    /// A dense tensor (F32, F16 or BF16).
    Dense(Tensor),
    /// GGML blocks along each row.
    Quant(Arc<QTensor>),
}

impl Weight {
    /// The threads a product with this weight runs on, where the work around it should
    /// run too: candle's barrier pool for quantized blocks (ours and candle's kernels),
    /// rayon's for dense weights (candle's gemm).
    pub(crate) fn pool(&self) -> Pool {
        match self {
            Weight::Dense(_) => Pool::Rayon,
            Weight::Quant(_) => Pool::Candle,
        }
    }

    /// `x · Wᵀ` for `x` of shape (rows, in), in F32.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Weight::Dense(w) if w.dtype() == DType::F32 => {
                x.matmul(&w.t().op("t")?).op("projection")
            }
            Weight::Dense(w) => x
                .to_dtype(w.dtype())
                .and_then(|x| x.matmul(&w.t()?))
                .and_then(|y| y.to_dtype(DType::F32))
                .op("projection"),
            Weight::Quant(q) => {
                if let Some(kind) = crate::quant::Kind::of(q.dtype())
                    .filter(|_| x.device().is_cpu() && crate::quant::active())
                {
                    let (m, k) = x.dims2().op("quantized projection")?;
                    let n = q.shape().dims()[0];
                    let xs = x
                        .flatten_all()
                        .and_then(|x| x.to_vec1::<f32>())
                        .op("quantized projection")?;
                    let data = q.data().op("quantized projection")?;
                    let blocks = crate::quant::Blocks::new(kind, &data, n, k)?;
                    let out = crate::quant::matmul(&blocks, &xs, m)?;
                    return Tensor::from_vec(out, (m, n), x.device()).op("quantized projection");
                }
                x.contiguous()
                    .and_then(|x| x.apply_op1_no_bwd(q.as_ref()))
                    .op("quantized projection")
            }
        }
    }

    /// The rows of `ids` (an embedding lookup), in F32.
    pub fn rows(&self, ids: &Tensor) -> Result<Tensor> {
        match self {
            Weight::Dense(w) => w
                .index_select(ids, 0)
                .and_then(|t| t.to_dtype(DType::F32))
                .op("embedding"),
            Weight::Quant(q) => q.embedding(ids).op("embedding"),
        }
    }

    /// (out, in).
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Weight::Dense(w) => w.dims().to_vec(),
            Weight::Quant(q) => q.shape().dims().to_vec(),
        }
    }

    /// The stored dtype as llama.cpp names it, lower case: `f32`, `f16`, `bf16`, `q8_0`,
    /// `q4_k` …
    pub fn dtype_name(&self) -> String {
        match self {
            Weight::Dense(w) => match w.dtype() {
                DType::F16 => "f16".into(),
                DType::BF16 => "bf16".into(),
                _ => "f32".into(),
            },
            Weight::Quant(q) => ggml_name(q.dtype()),
        }
    }

    /// Bytes the weights take in memory.
    pub fn bytes(&self) -> usize {
        match self {
            Weight::Dense(w) => w.elem_count() * w.dtype().size_in_bytes(),
            Weight::Quant(q) => q.storage_size_in_bytes(),
        }
    }

    /// The weights on `device`.
    pub fn to_device(&self, device: &Device) -> Result<Weight> {
        Ok(match self {
            Weight::Dense(w) => Weight::Dense(w.to_device(device).op("to device")?),
            Weight::Quant(q) => {
                let data = q.data().op("to device")?;
                let storage = QStorage::from_data(data, device, q.dtype()).op("to device")?;
                Weight::Quant(Arc::new(
                    QTensor::new(storage, q.shape().clone()).op("to device")?,
                ))
            }
        })
    }

    /// `parts` stacked along the rows into one weight, when they share a storage (dense
    /// of one dtype, or quantized of one block type); `None` otherwise.
    pub fn stack(parts: &[&Weight]) -> Result<Option<Weight>> {
        match parts {
            [] => Ok(None),
            [one] => Ok(Some((*one).clone())),
            _ => {
                if let Some(dense) = parts
                    .iter()
                    .map(|w| match w {
                        Weight::Dense(t) => Some(t),
                        Weight::Quant(_) => None,
                    })
                    .collect::<Option<Vec<&Tensor>>>()
                {
                    if dense.iter().any(|t| t.dtype() != dense[0].dtype()) {
                        return Ok(None);
                    }
                    return Ok(Some(Weight::Dense(Tensor::cat(&dense, 0).op("stack")?)));
                }
                let Some(quant) = parts
                    .iter()
                    .map(|w| match w {
                        Weight::Quant(q) => Some(q),
                        Weight::Dense(_) => None,
                    })
                    .collect::<Option<Vec<_>>>()
                else {
                    return Ok(None);
                };
                let dtype = quant[0].dtype();
                let cols = quant[0].shape().dims()[1];
                if quant
                    .iter()
                    .any(|q| q.dtype() != dtype || q.shape().dims()[1] != cols)
                {
                    return Ok(None);
                }
                let mut rows = 0;
                let mut bytes = Vec::new();
                for q in &quant {
                    rows += q.shape().dims()[0];
                    bytes.extend_from_slice(&q.data().op("stack")?);
                }
                Ok(Some(quantized(&bytes, dtype, (rows, cols))?))
            }
        }
    }

    /// The weight with its rows reordered: row `i` of the result is row `order[i]` of
    /// `self` (a permutation of whole rows, so quantized blocks move intact).
    pub fn reorder_rows(&self, order: &[usize]) -> Result<Weight> {
        match self {
            Weight::Dense(w) => {
                let idx: Vec<u32> = order.iter().map(|i| *i as u32).collect();
                let idx = Tensor::new(idx.as_slice(), w.device()).op("reorder")?;
                Ok(Weight::Dense(w.index_select(&idx, 0).op("reorder")?))
            }
            Weight::Quant(q) => {
                let (rows, cols) = q.shape().dims2().op("reorder")?;
                let data = q.data().op("reorder")?;
                let row = data.len() / rows.max(1);
                let mut out = Vec::with_capacity(data.len());
                for &i in order {
                    out.extend_from_slice(&data[i * row..(i + 1) * row]);
                }
                quantized(&out, q.dtype(), (order.len(), cols))
            }
        }
    }
}

/// A CPU quantized weight from its blocks' bytes, copied into 8-byte-aligned memory (the
/// block types are read in place).
fn quantized(bytes: &[u8], dtype: GgmlDType, shape: (usize, usize)) -> Result<Weight> {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    let aligned: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
    aligned[..bytes.len()].copy_from_slice(bytes);
    let storage = QStorage::from_data(Cow::Borrowed(&aligned[..bytes.len()]), &Device::Cpu, dtype)
        .op("quantized weight")?;
    Ok(Weight::Quant(Arc::new(
        QTensor::new(storage, shape).op("quantized weight")?,
    )))
}

/// llama.cpp's lower-case name of a GGML type (`q4_k`, `q8_0`, `f16` …).
pub(crate) fn ggml_name(t: GgmlDType) -> String {
    match t {
        GgmlDType::F32 => "f32",
        GgmlDType::F16 => "f16",
        GgmlDType::BF16 => "bf16",
        GgmlDType::Q4_0 => "q4_0",
        GgmlDType::Q4_1 => "q4_1",
        GgmlDType::Q5_0 => "q5_0",
        GgmlDType::Q5_1 => "q5_1",
        GgmlDType::Q8_0 => "q8_0",
        GgmlDType::Q8_1 => "q8_1",
        GgmlDType::Q2K => "q2_k",
        GgmlDType::Q3K => "q3_k",
        GgmlDType::Q4K => "q4_k",
        GgmlDType::Q5K => "q5_k",
        GgmlDType::Q6K => "q6_k",
        GgmlDType::Q8K => "q8_k",
    }
    .into()
}

/// The name llama.cpp gives a GGUF's `general.file_type` (its `llama_ftype`), lower case:
/// `q4_k_m`, `q8_0` …; `None` for a number it does not define.
pub(crate) fn file_type_name(ftype: u32) -> Option<&'static str> {
    Some(match ftype {
        0 => "f32",
        1 => "f16",
        2 => "q4_0",
        3 => "q4_1",
        7 => "q8_0",
        8 => "q5_0",
        9 => "q5_1",
        10 => "q2_k",
        11 => "q3_k_s",
        12 => "q3_k_m",
        13 => "q3_k_l",
        14 => "q4_k_s",
        15 => "q4_k_m",
        16 => "q5_k_s",
        17 => "q5_k_m",
        18 => "q6_k",
        32 => "bf16",
        _ => return None,
    })
}
