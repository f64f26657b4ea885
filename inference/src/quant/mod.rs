//! Our CPU products with GGML block-quantized weights (Q8_0, Q4_0, Q4_K, Q6_K), `x · Wᵀ`,
//! used in place of candle's wherever the CPU has AVX2, FMA and F16C ([`active`]); other
//! block types, other CPUs and GPUs keep candle's kernels.
//!
//! Why they exist: candle 0.11.1's AVX2 block dot converts each block's f16 scales through
//! a call it cannot inline (60 % of a Q8_0 decode's product time under `perf`); without
//! AVX-512 VNNI it has no Q8_0 kernel that reads a weight block once for several rows; its
//! AVX2 Q4_K kernel reads a repacked copy of the weights a third larger than the file's
//! blocks (scales expanded to f32), and it quantizes activations to Q8_K with a scalar
//! rounding call. Here a weight block's scales are converted inline (F16C), each block is
//! loaded once for up to four rows of activations, K-quant blocks are read as the file
//! stores them, and activations are quantized with SIMD.
//!
//! The arithmetic is candle's (and llama.cpp's) but for the order of the float sums. Each
//! row of activations is quantized as candle's `from_float` does it — to Q8_0 blocks of 32
//! for Q8_0/Q4_0 weights (scale `amax/127` kept as f16), to Q8_K blocks of 256 for K-quant
//! weights (scale `max/-127` as f32, the sums of each 16 values kept) — values rounded half
//! away from zero. Every block's integer dot product is exact; the float sum runs in eight
//! lanes, `acc += (d_w·d_x)·q` per block, then one fixed horizontal sum (module
//! [`reference`] spells the order out). The AVX2 path and the scalar [`matmul_reference`]
//! agree bit for bit; tests check both, against candle's kernels and against a float64
//! product of the dequantized weights.

// SIMD intrinsics (AVX2) and the raw writes of disjoint output columns from the pool's
// threads; each unsafe block says what it relies on.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::quantized::GgmlDType;
use half::f16;

use crate::error::{Error, Result};

#[cfg(target_arch = "x86_64")]
mod avx2;
mod reference;
#[cfg(test)]
mod tests;

/// Values per Q8_0/Q4_0 block (and per block of the activations' Q8_0).
pub const QK: usize = 32;
/// Values per K-quant super-block (and per block of the activations' Q8_K).
pub const QK_K: usize = 256;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns these kernels off (candle's run instead) or back on for the whole process: for
/// measuring what they buy. On by default wherever the CPU can run them.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether quantized products run here now (enabled, and the CPU has AVX2, FMA and F16C).
pub fn active() -> bool {
    ENABLED.load(Ordering::Relaxed) && cpu_has_avx2()
}

fn cpu_has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether candle's own Q8_0 products on this CPU take its repacked VNNI kernels (AVX-512
/// VNNI or AVX-VNNI, unless `MISTRALRS_FORCE_AVX2=1`), which quantize the activations to
/// Q8_K blocks of 256 with an f32 scale — another arithmetic than llama.cpp's Q8_0 × Q8_0,
/// which these kernels (and candle's standard ones) follow. Tests that compare with
/// candle's kernels need them off (`.ci/test` sets `MISTRALRS_FORCE_AVX2=1`); the node
/// never runs candle's Q8_0 products where these kernels are [`active`].
pub fn candle_repacks_q8_0() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let vnni = (std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512vnni"))
            || std::is_x86_feature_detected!("avxvnni");
        vnni && std::env::var("MISTRALRS_FORCE_AVX2").as_deref() != Ok("1")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The weight block types these kernels multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An f16 scale and 32 signed bytes.
    Q8_0,
    /// An f16 scale and 32 nibbles (value − 8): bytes 0–15 hold values 0–15 in their low
    /// nibbles and values 16–31 in their high ones.
    Q4_0,
    /// 256 values in eight sub-blocks of 32: f16 `d` and `dmin`, twelve bytes of 6-bit
    /// scales and mins, 128 bytes of nibbles; value = `d·sc·q − dmin·m`. Bytes
    /// `32j..32j+32` hold sub-block `2j` in their low nibbles and `2j+1` in their high ones.
    Q4K,
    /// 256 values in sixteen sub-blocks of 16: 128 bytes of low nibbles, 64 bytes of high
    /// bit pairs, sixteen i8 scales, f16 `d`; value = `d·sc·(q − 32)`.
    Q6K,
}

impl Kind {
    /// The kernel for a GGML type, if there is one.
    pub(crate) fn of(t: GgmlDType) -> Option<Kind> {
        match t {
            GgmlDType::Q8_0 => Some(Kind::Q8_0),
            GgmlDType::Q4_0 => Some(Kind::Q4_0),
            GgmlDType::Q4K => Some(Kind::Q4K),
            GgmlDType::Q6K => Some(Kind::Q6K),
            _ => None,
        }
    }

    /// Values per block.
    pub(crate) const fn block_len(self) -> usize {
        match self {
            Kind::Q8_0 | Kind::Q4_0 => QK,
            Kind::Q4K | Kind::Q6K => QK_K,
        }
    }

    /// Bytes per block.
    pub(crate) const fn block_bytes(self) -> usize {
        match self {
            Kind::Q8_0 => 2 + QK,
            Kind::Q4_0 => 2 + QK / 2,
            Kind::Q4K => 4 + 12 + QK_K / 2,
            Kind::Q6K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
        }
    }
}

/// An f16 at `bytes[0..2]`, as f32.
fn f16_at(bytes: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[0], bytes[1]])).to_f32()
}

/// Rows of activations quantized for one kind of weights: values row-major, one scale
/// per block (of 32 for Q8_0/Q4_0 weights, of 256 for K-quants), and for K-quants the
/// sum of each 16 values.
pub(crate) struct Acts {
    qs: Vec<i8>,
    d: Vec<f32>,
    bsums: Vec<i16>,
    /// Values per block.
    block: usize,
}

impl Acts {
    /// Quantizes `x` for weights of `kind` (`x.len()` a multiple of its block length).
    fn new(x: &[f32], kind: Kind, simd: bool) -> Acts {
        let block = kind.block_len();
        let mut acts = Acts {
            qs: vec![0i8; x.len()],
            d: vec![0f32; x.len() / block],
            bsums: vec![0i16; if block == QK_K { x.len() / 16 } else { 0 }],
            block,
        };
        for (i, (x, q)) in x
            .chunks_exact(block)
            .zip(acts.qs.chunks_exact_mut(block))
            .enumerate()
        {
            acts.d[i] = match (block == QK_K, simd) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `simd` is only set where `cpu_has_avx2()` holds; `x`, `q` hold 32
                // values, and 256 with 16 sums for a Q8_K block.
                (false, true) => unsafe { avx2::quantize_q8_0(x.as_ptr(), q.as_mut_ptr()) },
                #[cfg(target_arch = "x86_64")]
                (true, true) => unsafe {
                    avx2::quantize_q8_k(x.as_ptr(), q.as_mut_ptr(), &mut acts.bsums[i * 16..])
                },
                #[cfg(not(target_arch = "x86_64"))]
                (_, true) => unreachable!("no SIMD path on this architecture"),
                (false, false) => reference::quantize_q8_0(x, q),
                (true, false) => reference::quantize_q8_k(x, q, &mut acts.bsums[i * 16..]),
            };
        }
        acts
    }

    /// Scales and 16-value sums a row of `k` values has.
    fn per_row(&self, k: usize) -> (usize, usize) {
        (
            k / self.block,
            if self.bsums.is_empty() { 0 } else { k / 16 },
        )
    }

    /// Row `r`'s values, scales and 16-value sums (`k` values a row).
    fn row(&self, r: usize, k: usize) -> (&[i8], &[f32], &[i16]) {
        let (nb, sums) = self.per_row(k);
        (
            &self.qs[r * k..(r + 1) * k],
            &self.d[r * nb..(r + 1) * nb],
            &self.bsums[r * sums..(r + 1) * sums],
        )
    }
}

/// The eight-lane horizontal sum in the order both paths use.
fn hsum8(a: [f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

/// A `rows × cols` matrix of GGML blocks of one kind, its size checked.
pub(crate) struct Blocks<'a> {
    kind: Kind,
    bytes: &'a [u8],
    rows: usize,
    cols: usize,
}

impl<'a> Blocks<'a> {
    pub(crate) fn new(kind: Kind, bytes: &'a [u8], rows: usize, cols: usize) -> Result<Self> {
        let len = kind.block_len();
        if !cols.is_multiple_of(len) || bytes.len() != rows * (cols / len) * kind.block_bytes() {
            return Err(size_error(format!(
                "{kind:?}: {rows}×{cols} weights in {} bytes",
                bytes.len()
            )));
        }
        Ok(Blocks {
            kind,
            bytes,
            rows,
            cols,
        })
    }

    /// Row `c`'s blocks.
    fn row(&self, c: usize) -> &'a [u8] {
        let len = self.cols / self.kind.block_len() * self.kind.block_bytes();
        &self.bytes[c * len..(c + 1) * len]
    }

    /// Refuses activations that are not `m` rows as wide as the matrix.
    fn check(&self, x: &[f32], m: usize) -> Result<()> {
        if x.len() != m * self.cols {
            return Err(size_error(format!(
                "{} activations for {m} rows of {}",
                x.len(),
                self.cols
            )));
        }
        Ok(())
    }
}

fn size_error(msg: String) -> Error {
    Error::Candle {
        op: "quantized projection",
        source: candle_core::Error::Msg(msg),
    }
}

/// `x · Wᵀ` (`m` rows of activations as wide as `w`), on every core of candle's pool;
/// row-major `m × rows`. Callers check [`active`].
pub(crate) fn matmul(w: &Blocks<'_>, x: &[f32], m: usize) -> Result<Vec<f32>> {
    w.check(x, m)?;
    #[cfg(target_arch = "x86_64")]
    if cpu_has_avx2() {
        let n = w.rows;
        let acts = Acts::new(x, w.kind, true);
        let mut out = vec![0f32; m * n];
        let out_ptr = out.as_mut_ptr() as usize;
        // SAFETY: the CPU has AVX2/FMA/F16C; `acts` holds `m` rows as wide as `w`; `out`
        // holds `m × n`; each column range is given to one work item only, which alone
        // writes those columns.
        let run = |cols| unsafe { avx2::columns(w, &acts, m, out_ptr as *mut f32, cols) };
        candle_core::utils::barrier_pool().execute_chunked(n, run);
        return Ok(out);
    }
    matmul_reference(w, x, m)
}

/// [`matmul`] in scalar code, one product at a time: the reference the SIMD path equals
/// bit for bit (and the path of CPUs without AVX2).
pub(crate) fn matmul_reference(w: &Blocks<'_>, x: &[f32], m: usize) -> Result<Vec<f32>> {
    w.check(x, m)?;
    let (n, k) = (w.rows, w.cols);
    let acts = Acts::new(x, w.kind, false);
    let mut out = vec![0f32; m * n];
    for r in 0..m {
        let (xq, xd, sums) = acts.row(r, k);
        for c in 0..n {
            out[r * n + c] = reference::dot(w.kind, w.row(c), xq, xd, sums);
        }
    }
    Ok(out)
}
