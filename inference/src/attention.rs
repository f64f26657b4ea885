//! Attention on the CPU over a KV cache in host memory: what [`crate::Llama`] runs for a
//! model on the CPU. Each layer's keys and values are kept position-major
//! (`[position][kv head][head width]`, the layout the projection writes them in), so a step
//! appends its rows in place instead of concatenating the whole cache again. A decoded
//! row (one new token) is attended here directly — dot products, softmax and the weighted
//! sum over its cache, no tensor operations, every head of every decoded row a work item
//! on the thread pool the layer's products use ([`crate::pool::Pool`]);
//! prompt rows (several new tokens) go through
//! candle's matrix products with a causal mask, their keys and values read from the cache.
//! The rotary tables and the masks (with a sliding window) are built here for both the
//! host path and the GPU's tensor path; [`tensor_layer`] is that path: the same attention
//! as candle operations over a [`TensorKv`] cache on the model's device.

use candle_core::{Device, Tensor};

use crate::error::{CandleContext, Result};
use crate::pool::Pool;

/// One layer's keys and values, position-major.
#[derive(Debug, Default, Clone)]
pub(crate) struct HostKv {
    pub k: Vec<f32>,
    pub v: Vec<f32>,
}

/// One layer's cached keys and values as tensors on the model's device (a GPU's memory):
/// (kv heads, positions, head width) each, grown by concatenation.
#[derive(Debug, Default)]
pub(crate) struct TensorKv(Option<(Tensor, Tensor)>);

impl TensorKv {
    /// The cache with `k` and `v` (kv heads, new positions, head width) appended.
    fn append(&mut self, k: Tensor, v: Tensor) -> Result<(Tensor, Tensor)> {
        let (k, v) = match self.0.take() {
            Some((pk, pv)) => (
                Tensor::cat(&[&pk, &k], 1).op("cache")?,
                Tensor::cat(&[&pv, &v], 1).op("cache")?,
            ),
            None => (k, v),
        };
        self.0 = Some((k.clone(), v.clone()));
        Ok((k, v))
    }
}

/// The heads of a layer: query heads, key/value heads, head width.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Heads {
    pub q: usize,
    pub kv: usize,
    pub width: usize,
}

impl Heads {
    /// Floats of one row of the stacked q, k, v projection.
    fn row(self) -> usize {
        (self.q + 2 * self.kv) * self.width
    }
}

/// Rotates `x` (consecutive heads of `width`) in the half-split layout of transformers'
/// `rotate_half` — the arithmetic of candle's fused `rope` kernel — by one position's
/// `cos`/`sin` (width / 2 each).
fn rope(x: &mut [f32], width: usize, cos: &[f32], sin: &[f32]) {
    let half = width / 2;
    for head in x.chunks_exact_mut(width) {
        let (a, b) = head.split_at_mut(half);
        for i in 0..half {
            let (x1, x2) = (a[i], b[i]);
            a[i] = x1 * cos[i] - x2 * sin[i];
            b[i] = x1 * sin[i] + x2 * cos[i];
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // eight running sums, so the loop vectorizes
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// One layer's attention for every sequence of a batch. `qkv` is the stacked projection,
/// (rows, (q + 2·kv)·width), the sequences' rows one after another as `spans` gives them
/// (first row, new rows, positions already cached); `cos`/`sin` are the rotary tables
/// (position-major, width / 2 per position); `masks` the causal masks of the spans with
/// more than one row (the sliding window in them), `window` the model's sliding window
/// for the decoded rows; `pool` the threads the decoded rows run on. The new keys and
/// values are appended to each sequence's `kv`. Returns the attention output,
/// (rows, q·width).
#[allow(clippy::too_many_arguments)]
pub(crate) fn layer(
    qkv: &Tensor,
    spans: &[(usize, usize, usize)],
    kvs: &mut [&mut HostKv],
    h: Heads,
    (cos, sin): (&[f32], &[f32]),
    masks: &[Option<Tensor>],
    window: Option<usize>,
    pool: Pool,
) -> Result<Tensor> {
    let mut rows: Vec<f32> = qkv.flatten_all().and_then(|t| t.to_vec1()).op("qkv")?;
    let (qw, kw) = (h.q * h.width, h.kv * h.width);
    let half = h.width / 2;
    let n = rows.len() / h.row();
    let mut out = vec![0f32; n * qw];
    let scale = 1.0 / (h.width as f32).sqrt();
    for ((start, seq, past), kv) in spans.iter().zip(kvs.iter_mut()) {
        for r in 0..*seq {
            let pos = past + r;
            let (c, s) = (&cos[pos * half..][..half], &sin[pos * half..][..half]);
            let row = &mut rows[(start + r) * h.row()..][..h.row()];
            // q and k rotate; k and v join the cache
            rope(&mut row[..qw + kw], h.width, c, s);
            kv.k.extend_from_slice(&row[qw..qw + kw]);
            kv.v.extend_from_slice(&row[qw + kw..]);
        }
    }
    // prompts through candle's products (parallel inside); decoded rows side by side
    let mut decoded = Vec::new();
    let mut rest: &mut [f32] = &mut out;
    for (((start, seq, past), kv), mask) in spans.iter().zip(kvs.iter()).zip(masks) {
        let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(seq * qw);
        rest = tail;
        let total = past + seq;
        if let Some(mask) = mask {
            let q = (0..*seq).flat_map(|r| rows[(start + r) * h.row()..][..qw].iter().copied());
            prompt_rows(q.collect(), kv, *seq, total, h, mask, chunk)?;
        } else {
            decoded.push((&rows[start * h.row()..][..qw], &**kv, total, chunk));
        }
    }
    // each (decoded row, query head) is one work item on the pool the products run on
    let mut heads: Vec<_> = decoded
        .into_iter()
        .flat_map(|(q, kv, total, out)| {
            // a position sees itself and the window − 1 before it
            let seen = window.map_or(0, |w| total.saturating_sub(w))..total;
            out.chunks_exact_mut(h.width)
                .enumerate()
                .map(move |(head, o)| (q, kv, seen.clone(), head, o))
        })
        .collect();
    // two multiply-adds per position and width: the scores and the weighted sum
    let work: usize = heads
        .iter()
        .map(|(_, _, seen, ..)| 2 * seen.len() * h.width)
        .sum();
    pool.each(&mut heads, work, |(q, kv, seen, head, out)| {
        decode_head(q, kv, seen.clone(), h, *head, scale, out)
    });
    Tensor::from_vec(out, (n, qw), &Device::Cpu).op("attention")
}

/// Query head `head` of one new row (`q`: every query head) over the cached positions
/// `seen`, into `out` (one head's width, zeroed).
fn decode_head(
    q: &[f32],
    kv: &HostKv,
    seen: std::ops::Range<usize>,
    h: Heads,
    head: usize,
    scale: f32,
    out: &mut [f32],
) {
    let kw = h.kv * h.width;
    let g = head / (h.q / h.kv);
    let first = seen.start;
    let qh = &q[head * h.width..][..h.width];
    let mut scores = vec![0f32; seen.len()];
    let mut max = f32::NEG_INFINITY;
    for (t, s) in scores.iter_mut().enumerate() {
        let t = first + t;
        *s = dot(qh, &kv.k[t * kw + g * h.width..][..h.width]) * scale;
        max = max.max(*s);
    }
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    for (t, p) in scores.iter().enumerate() {
        let t = first + t;
        let v = &kv.v[t * kw + g * h.width..][..h.width];
        for (o, v) in out.iter_mut().zip(v) {
            *o += p * v;
        }
    }
    for o in out.iter_mut() {
        *o /= sum;
    }
}

/// Attention of `seq` new rows (`q`: row-major, every query head) over the `total` cached
/// positions (theirs last) with candle's matrix products and the causal `mask` (which
/// carries the sliding window).
fn prompt_rows(
    q: Vec<f32>,
    kv: &HostKv,
    seq: usize,
    total: usize,
    h: Heads,
    mask: &Tensor,
    out: &mut [f32],
) -> Result<()> {
    let dev = Device::Cpu;
    let group = h.q / h.kv;
    // (kv, positions, width) from the position-major cache
    let heads = |data: &[f32]| -> Result<Tensor> {
        Tensor::from_slice(
            &data[..total * h.kv * h.width],
            (total, h.kv, h.width),
            &dev,
        )
        .and_then(|t| t.transpose(0, 1))
        .and_then(|t| t.contiguous())
        .op("cached heads")
    };
    let (k, v) = (heads(&kv.k)?, heads(&kv.v)?);
    // grouped-query attention without copying the key/value heads: the query heads sharing
    // key/value head j (HF's `repeat_kv`: heads j·g … j·g + g − 1) become g·seq rows of
    // one (kv, g·seq, width) batch
    let q = Tensor::from_vec(q, (seq, h.q, h.width), &dev)
        .and_then(|t| t.transpose(0, 1))
        .and_then(|t| t.contiguous())
        .and_then(|t| t.reshape((h.kv, group * seq, h.width)))
        .op("grouped-query heads")?;
    let scale = 1.0 / (h.width as f64).sqrt();
    let scores = q
        .matmul(&k.t().op("t")?)
        .and_then(|s| s * scale)
        .and_then(|s| s.reshape((h.kv, group, seq, total)))
        .and_then(|s| s.broadcast_add(mask))
        .and_then(|s| s.reshape((h.kv, group * seq, total)))
        .op("attention scores")?;
    let probs = candle_nn::ops::softmax_last_dim(&scores).op("softmax")?;
    let a: Vec<f32> = probs
        .matmul(&v)
        .and_then(|a| a.reshape((h.q, seq, h.width)))
        .and_then(|a| a.transpose(0, 1))
        .and_then(|a| a.contiguous())
        .and_then(|a| a.flatten_all())
        .and_then(|a| a.to_vec1())
        .op("attention")?;
    out.copy_from_slice(&a);
    Ok(())
}

/// The rotary tables, (max positions, head width / 2): as tensors and in host memory;
/// `divisors` are llama.cpp's `rope_freqs` (each frequency divided by its factor).
#[allow(clippy::type_complexity)]
pub(crate) fn rope_tables(
    c: &crate::LlamaConfig,
    divisors: Option<&[f32]>,
    device: &Device,
) -> Result<((Tensor, Tensor), (Vec<f32>, Vec<f32>))> {
    // θ_0 … θ_{half−1}: candle's fused `rope` applies them in the half-split layout of
    // transformers' rotate_half
    let mut inv_freq = c.inv_freq();
    if let Some(d) = divisors {
        for (f, d) in inv_freq.iter_mut().zip(d) {
            *f /= f64::from(*d);
        }
    }
    let half = inv_freq.len();
    let mut cos = Vec::with_capacity(c.max_position_embeddings * half);
    let mut sin = Vec::with_capacity(c.max_position_embeddings * half);
    for p in 0..c.max_position_embeddings {
        for f in &inv_freq {
            let angle = p as f64 * f;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    let shape = (c.max_position_embeddings, half);
    Ok((
        (
            Tensor::from_slice(&cos, shape, device).op("rope table")?,
            Tensor::from_slice(&sin, shape, device).op("rope table")?,
        ),
        (cos, sin),
    ))
}

/// `x·cos + rotate_half(x)·sin` (candle's fused kernel) for x of shape (heads, seq, head
/// width).
pub(crate) fn rope_tensor(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    // x is (heads, rows, head width); cos and sin (rows, head width / 2), one row per
    // position
    x.unsqueeze(0)
        .and_then(|x| candle_nn::rotary_emb::rope(&x, cos, sin))
        .and_then(|x| x.squeeze(0))
        .op("rope")
}

/// (seq, past + seq): 0 where query i (position past + i) may see key j — j ≤ past + i,
/// and within `window` positions of it when there is one — −∞ elsewhere.
pub(crate) fn causal_mask(
    past: usize,
    seq: usize,
    window: Option<usize>,
    device: &Device,
) -> Result<Tensor> {
    let total = past + seq;
    let m: Vec<f32> = (0..seq)
        .flat_map(|i| {
            (0..total).map(move |j| {
                let p = past + i;
                if j > p || window.is_some_and(|w| p - j >= w) {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
        })
        .collect();
    Tensor::from_vec(m, (seq, total), device).op("mask")
}

/// [`layer`] as candle tensor operations on the model's device (a GPU; the CPU on the
/// tensor path): the new keys and values concatenated to each sequence's cached tensors,
/// the scores and weighted sums as candle operations. `cos`/`sin` are each row's rotary
/// angles (rows, width / 2); `masks` as for [`layer`], a decoded row's too where the window
/// cuts it off. Returns (rows, q·width).
pub(crate) fn tensor_layer(
    qkv: &Tensor,
    spans: &[(usize, usize, usize)],
    kvs: &mut [&mut TensorKv],
    h: Heads,
    (cos, sin): (&Tensor, &Tensor),
    masks: &[Option<Tensor>],
) -> Result<Tensor> {
    let (nh, kv, hd) = (h.q, h.kv, h.width);
    let n = qkv.dim(0).op("projection")?;
    let scale = 1.0 / (hd as f64).sqrt();
    // (heads, rows, head width) from columns [from, from + heads·hd) of qkv
    let rows = |from: usize, heads: usize| -> Result<Tensor> {
        qkv.narrow(1, from, heads * hd)
            .and_then(|t| t.reshape((n, heads, hd)))
            .and_then(|t| t.transpose(0, 1))
            .and_then(|t| t.contiguous())
            .op("projection")
    };
    let q = rope_tensor(&rows(0, nh)?, cos, sin)?;
    let k = rope_tensor(&rows(nh * hd, kv)?, cos, sin)?;
    let v = rows((nh + kv) * hd, kv)?;
    let mut outs = Vec::with_capacity(spans.len());
    for (((start, seq, past), cache), mask) in spans.iter().zip(kvs.iter_mut()).zip(masks) {
        // (heads, seq, head width)
        let heads = |t: &Tensor| -> Result<Tensor> {
            t.narrow(1, *start, *seq)
                .and_then(|t| t.contiguous())
                .op("heads")
        };
        let (k, v) = cache.append(heads(&k)?, heads(&v)?)?;
        let total = past + seq;
        // grouped-query attention without copying the key/value heads: the query heads
        // sharing key/value head j (HF's `repeat_kv`: heads j·g … j·g + g − 1) become g·seq
        // rows of one (kv, g·seq, head width) batch
        let group = nh / kv;
        let q = heads(&q)?
            .reshape((kv, group * seq, hd))
            .op("grouped-query heads")?;
        let mut scores = q
            .matmul(&k.t().op("t")?)
            .and_then(|s| s * scale)
            .op("attention scores")?;
        if let Some(mask) = mask {
            scores = scores
                .reshape((kv, group, *seq, total))
                .and_then(|s| s.broadcast_add(mask))
                .and_then(|s| s.reshape((kv, group * seq, total)))
                .op("attention mask")?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores).op("softmax")?;
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
    if outs.len() == 1 {
        return Ok(outs.pop().expect("one"));
    }
    Tensor::cat(&outs, 0).op("attention")
}
