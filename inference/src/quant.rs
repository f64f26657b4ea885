//! Our CPU products with GGML Q8_0 and Q4_0 weights, `x · Wᵀ`, used in place of candle's
//! wherever the CPU has AVX2, FMA and F16C ([`active`]); other block types, other CPUs and
//! GPUs keep candle's kernels.
//!
//! Why they exist: candle 0.11.1's AVX2 block dot converts each block's two f16 scales
//! through a call it cannot inline (60 % of a Q8_0 decode's product time under `perf`),
//! and without AVX-512 VNNI it has no kernel that reads a weight block once for several
//! rows, so a prefill or a batch pays one pass over the weights per row. Here a weight
//! block's scale is converted inline (F16C), and each block is loaded once for up to four
//! rows of activations.
//!
//! The arithmetic is candle's (and llama.cpp's) but for the order of the float sums: each
//! row of activations is quantized to Q8_0 blocks as candle's `BlockQ8_0::from_float` does
//! (scale `amax/127` kept as f16, values `round(x / scale)` half away from zero), each
//! block pair's integer dot product is exact, and the f32 sum runs in eight lanes,
//! `acc += (d_w·d_x)·q`, even and odd blocks in separate accumulators (two dependency
//! chains instead of one), added lane by lane, then one fixed horizontal sum. The AVX2
//! path and the scalar `matmul_reference` (the same order) agree bit for bit; tests
//! check both, against candle's kernel and against a float64 product of the dequantized
//! weights.

// SIMD intrinsics (AVX2) and the raw writes of disjoint output columns from the pool's
// threads; each unsafe block says what it relies on.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::quantized::GgmlDType;
use half::f16;

use crate::error::{Error, Result};

/// Values per block (Q8_0, Q4_0 and the activations' Q8_0).
pub const QK: usize = 32;

static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns these kernels off (candle's run instead) or back on for the whole process: for
/// measuring what they buy. On by default wherever the CPU can run them.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether Q8_0 and Q4_0 products run here now (enabled, and the CPU has AVX2, FMA and
/// F16C).
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

/// The weight block types these kernels multiply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An f16 scale and 32 signed bytes.
    Q8_0,
    /// An f16 scale and 32 nibbles (value − 8): bytes 0–15 hold values 0–15 in their low
    /// nibbles and values 16–31 in their high ones.
    Q4_0,
}

impl Kind {
    /// The kernel for a GGML type, if there is one.
    pub(crate) fn of(t: GgmlDType) -> Option<Kind> {
        match t {
            GgmlDType::Q8_0 => Some(Kind::Q8_0),
            GgmlDType::Q4_0 => Some(Kind::Q4_0),
            _ => None,
        }
    }

    /// Bytes per block of 32 values.
    pub(crate) const fn block_bytes(self) -> usize {
        match self {
            Kind::Q8_0 => 2 + QK,
            Kind::Q4_0 => 2 + QK / 2,
        }
    }

    /// A block's 32 values (without the scale).
    fn values(self, block: &[u8]) -> [i8; QK] {
        let mut v = [0i8; QK];
        match self {
            Kind::Q8_0 => {
                for (v, b) in v.iter_mut().zip(&block[2..2 + QK]) {
                    *v = *b as i8;
                }
            }
            Kind::Q4_0 => {
                for (j, b) in block[2..2 + QK / 2].iter().enumerate() {
                    v[j] = (b & 0x0f) as i8 - 8;
                    v[j + QK / 2] = (b >> 4) as i8 - 8;
                }
            }
        }
        v
    }
}

fn scale_of(block: &[u8]) -> f32 {
    f16::from_bits(u16::from_le_bytes([block[0], block[1]])).to_f32()
}

/// Rows of activations as Q8_0 blocks: values row-major, one scale per block.
struct Acts {
    qs: Vec<i8>,
    d: Vec<f32>,
}

/// One block of activations, as candle's `BlockQ8_0::from_float` computes it; returns the
/// scale (its f16 value).
fn quantize_block_scalar(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    f16::from_f32(d).to_f32()
}

fn quantize(x: &[f32], simd: bool) -> Acts {
    let mut qs = vec![0i8; x.len()];
    let mut d = vec![0f32; x.len() / QK];
    for ((x, q), d) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)).zip(&mut d) {
        *d = if simd {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `simd` is only set where `cpu_has_avx2()` holds; both blocks hold 32.
            unsafe {
                avx2::quantize_block(x.as_ptr(), q.as_mut_ptr())
            }
            #[cfg(not(target_arch = "x86_64"))]
            unreachable!("no SIMD path on this architecture")
        } else {
            quantize_block_scalar(x, q)
        };
    }
    Acts { qs, d }
}

/// The eight-lane horizontal sum in the order both paths use.
fn hsum8(a: [f32; 8]) -> f32 {
    ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]))
}

/// One weight row against one row of activations, scalar, in the SIMD path's order: eight
/// lanes, even and odd blocks in separate accumulators (two dependency chains), added lane
/// by lane at the end.
fn dot_scalar(kind: Kind, w: &[u8], xq: &[i8], xd: &[f32]) -> f32 {
    let mut acc = [[0f32; 8]; 2];
    for (b, ((block, xq), xd)) in w
        .chunks_exact(kind.block_bytes())
        .zip(xq.chunks_exact(QK))
        .zip(xd)
        .enumerate()
    {
        let wv = kind.values(block);
        let d = scale_of(block) * xd;
        for (lane, acc) in acc[b % 2].iter_mut().enumerate() {
            let s: i32 = (4 * lane..4 * lane + 4)
                .map(|j| i32::from(wv[j]) * i32::from(xq[j]))
                .sum();
            *acc = d.mul_add(s as f32, *acc);
        }
    }
    hsum8(std::array::from_fn(|l| acc[0][l] + acc[1][l]))
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
        if !cols.is_multiple_of(QK) || bytes.len() != rows * (cols / QK) * kind.block_bytes() {
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
        let len = self.cols / QK * self.kind.block_bytes();
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
        let (n, k) = (w.rows, w.cols);
        let acts = quantize(x, true);
        let mut out = vec![0f32; m * n];
        let out_ptr = out.as_mut_ptr() as usize;
        candle_core::utils::barrier_pool().execute_chunked(n, |cols| {
            for c in cols {
                // SAFETY: the CPU has AVX2/FMA/F16C; a row holds `k/32` blocks; each
                // (row, c) of `out` is written by this work item only.
                unsafe { avx2::column(w.kind, w.row(c), &acts, m, k, out_ptr as *mut f32, n, c) };
            }
        });
        return Ok(out);
    }
    matmul_reference(w, x, m)
}

/// [`matmul`] in scalar code, one product at a time: the reference the SIMD path equals
/// bit for bit (and the path of CPUs without AVX2).
pub(crate) fn matmul_reference(w: &Blocks<'_>, x: &[f32], m: usize) -> Result<Vec<f32>> {
    w.check(x, m)?;
    let (n, k) = (w.rows, w.cols);
    let acts = quantize(x, false);
    let nb = k / QK;
    let mut out = vec![0f32; m * n];
    for r in 0..m {
        for c in 0..n {
            out[r * n + c] = dot_scalar(
                w.kind,
                w.row(c),
                &acts.qs[r * k..(r + 1) * k],
                &acts.d[r * nb..(r + 1) * nb],
            );
        }
    }
    Ok(out)
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Acts, Kind, QK};

    /// How far ahead of the block being multiplied its row is prefetched, in bytes.
    const PREFETCH: usize = 512;

    /// One block of activations quantized as `quantize_block_scalar` does, to the bit.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `x` and `q` hold 32 values.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn quantize_block(x: *const f32, q: *mut i8) -> f32 {
        unsafe {
            let sign = _mm256_set1_ps(-0.0);
            let v = [
                _mm256_loadu_ps(x),
                _mm256_loadu_ps(x.add(8)),
                _mm256_loadu_ps(x.add(16)),
                _mm256_loadu_ps(x.add(24)),
            ];
            // max(|v|, m) keeps m where |v| is NaN, as f32::max does
            let mut m = _mm256_setzero_ps();
            for v in v {
                m = _mm256_max_ps(_mm256_andnot_ps(sign, v), m);
            }
            let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
            let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)));
            let d = amax / 127.0;
            let id = _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 });
            let half = _mm256_set1_ps(0.5);
            let one = _mm256_set1_ps(1.0);
            let round = |v: __m256| {
                let s = _mm256_mul_ps(v, id);
                // NaN becomes 0, as `f32 as i8` makes it
                let s = _mm256_and_ps(s, _mm256_cmp_ps::<_CMP_ORD_Q>(s, s));
                let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(s);
                let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(s, t));
                let away = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, half);
                let step = _mm256_or_ps(_mm256_and_ps(s, sign), one);
                _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(away, step)))
            };
            let a = _mm256_packs_epi32(round(v[0]), round(v[1]));
            let b = _mm256_packs_epi32(round(v[2]), round(v[3]));
            let packed = _mm256_packs_epi16(a, b);
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            _mm256_storeu_si256(
                q as *mut __m256i,
                _mm256_permutevar8x32_epi32(packed, order),
            );
            half::f16::from_f32(d).to_f32()
        }
    }

    /// # Safety
    /// F16C; two readable bytes at `p`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scale(p: *const u8) -> f32 {
        unsafe {
            let bits = i32::from(u16::from_le_bytes([*p, *p.add(1)]));
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
        }
    }

    /// # Safety
    /// AVX2; one whole block at `p`.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn values<const Q4: bool>(p: *const u8) -> __m256i {
        unsafe {
            if Q4 {
                let t = _mm_loadu_si128(p.add(2) as *const __m128i);
                let both = _mm256_set_m128i(_mm_srli_epi16::<4>(t), t);
                let nibbles = _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
                _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8))
            } else {
                _mm256_loadu_si256(p.add(2) as *const __m256i)
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let mut a = [0f32; 8];
        // SAFETY: eight f32s.
        unsafe { _mm256_storeu_ps(a.as_mut_ptr(), v) };
        super::hsum8(a)
    }

    /// `R` rows of activations (from row `r0`) against one weight row.
    ///
    /// # Safety
    /// AVX2, FMA and F16C; `w` holds `k/32` blocks of the kind; `acts` holds rows
    /// `r0..r0 + R` of `k` values.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const R: usize, const Q4: bool>(
        w: &[u8],
        bytes: usize,
        acts: &Acts,
        r0: usize,
        k: usize,
    ) -> [f32; R] {
        unsafe {
            let nb = k / QK;
            let ones = _mm256_set1_epi16(1);
            // even and odd blocks in separate accumulators: two FMA dependency chains,
            // which a single row would otherwise wait on
            let mut acc = [[_mm256_setzero_ps(); R]; 2];
            let xq = acts.qs.as_ptr().add(r0 * k);
            let xd = acts.d.as_ptr().add(r0 * nb);
            let wp = w.as_ptr();
            for b in 0..nb {
                let p = wp.add(b * bytes);
                // the weight row ahead, into L1 before it is needed (a hint: never faults)
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH) as *const i8);
                let dw = scale(p);
                let wv = values::<Q4>(p);
                let aw = _mm256_sign_epi8(wv, wv);
                for (r, acc) in acc[b % 2].iter_mut().enumerate() {
                    let y = _mm256_loadu_si256(xq.add(r * k + b * QK) as *const __m256i);
                    let sy = _mm256_sign_epi8(y, wv);
                    let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), ones);
                    let d = _mm256_set1_ps(dw * *xd.add(r * nb + b));
                    *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot), *acc);
                }
            }
            let [even, odd] = acc;
            std::array::from_fn(|r| hsum(_mm256_add_ps(even[r], odd[r])))
        }
    }

    /// Every row of `acts` against weight row `c`, into column `c` of `out` (`m × n`).
    ///
    /// # Safety
    /// As [`tile`], for all `m` rows; `out` holds `m × n` values.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn column(
        kind: Kind,
        w: &[u8],
        acts: &Acts,
        m: usize,
        k: usize,
        out: *mut f32,
        n: usize,
        c: usize,
    ) {
        unsafe {
            let bytes = kind.block_bytes();
            let q4 = kind == Kind::Q4_0;
            let mut r0 = 0;
            while r0 < m {
                let rows = (m - r0).min(4);
                let put = |vals: &[f32]| {
                    for (i, v) in vals.iter().enumerate() {
                        *out.add((r0 + i) * n + c) = *v;
                    }
                };
                match (rows, q4) {
                    (4, false) => put(&tile::<4, false>(w, bytes, acts, r0, k)),
                    (3, false) => put(&tile::<3, false>(w, bytes, acts, r0, k)),
                    (2, false) => put(&tile::<2, false>(w, bytes, acts, r0, k)),
                    (_, false) => put(&tile::<1, false>(w, bytes, acts, r0, k)),
                    (4, true) => put(&tile::<4, true>(w, bytes, acts, r0, k)),
                    (3, true) => put(&tile::<3, true>(w, bytes, acts, r0, k)),
                    (2, true) => put(&tile::<2, true>(w, bytes, acts, r0, k)),
                    (_, true) => put(&tile::<1, true>(w, bytes, acts, r0, k)),
                }
                r0 += rows;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    /// `n` rows of `k` random weights as blocks of `kind`, and their values as f64.
    fn weights(kind: Kind, n: usize, k: usize, seed: &mut u64) -> (Vec<u8>, Vec<f64>) {
        let mut bytes = Vec::new();
        let mut deq = Vec::new();
        for _ in 0..n * k / QK {
            let d = f16::from_f32((lcg(seed) % 1000) as f32 / 50_000.0 + 1e-4);
            let start = bytes.len();
            bytes.extend_from_slice(&d.to_bits().to_le_bytes());
            match kind {
                // −128 included: its magnitude does not fit an i8 lane
                Kind::Q8_0 => bytes.extend((0..QK).map(|_| (lcg(seed) % 256) as u8)),
                Kind::Q4_0 => bytes.extend((0..QK / 2).map(|_| (lcg(seed) % 256) as u8)),
            }
            let vals = kind.values(&bytes[start..]);
            deq.extend(vals.iter().map(|v| f64::from(*v) * f64::from(d.to_f32())));
        }
        (bytes, deq)
    }

    fn acts(m: usize, k: usize, seed: &mut u64) -> Vec<f32> {
        (0..m * k)
            .map(|i| match i % 97 {
                // some zeros and repeated values among the random ones
                0 => 0.0,
                1 => -2.5,
                _ => (lcg(seed) % 20_001) as f32 / 1000.0 - 10.0,
            })
            .collect()
    }

    #[test]
    fn activations_quantize_as_candle_does_on_both_paths() {
        use candle_core::quantized::QTensor;
        use candle_core::{Device, Tensor};
        let mut seed = 3;
        let mut x = acts(4, 256, &mut seed);
        x[40] = f32::NAN;
        x[70..102].fill(0.0);
        x[130] = 1e30;
        // a block whose scale is exactly 1: every x.5 is a tie, rounded away from zero
        for (j, v) in x[160..192].iter_mut().enumerate() {
            *v = if j == 0 { 127.0 } else { j as f32 - 15.5 };
        }
        for simd in [false, true] {
            if simd && !cpu_has_avx2() {
                eprintln!("SKIPPED: the AVX2 quantizer (this CPU has no AVX2/FMA/F16C)");
                continue;
            }
            let ours = quantize(&x, simd);
            let t = Tensor::from_vec(x.clone(), (4, 256), &Device::Cpu).unwrap();
            let theirs = QTensor::quantize(&t, GgmlDType::Q8_0).unwrap();
            let bytes = theirs.data().unwrap();
            for (i, block) in bytes.chunks_exact(34).enumerate() {
                assert_eq!(
                    ours.d[i],
                    scale_of(block),
                    "scale of block {i}, simd {simd}"
                );
                let q: Vec<i8> = block[2..].iter().map(|b| *b as i8).collect();
                assert_eq!(
                    &ours.qs[i * QK..(i + 1) * QK],
                    &q[..],
                    "block {i}, simd {simd}"
                );
            }
        }
    }

    #[test]
    fn products_equal_the_reference_and_approach_float64() {
        let mut seed = 11;
        for kind in [Kind::Q8_0, Kind::Q4_0] {
            for (m, n, k) in [
                (1, 37, 64),
                (3, 8, 96),
                (4, 5, 32),
                (9, 17, 256),
                (128, 6, 64),
            ] {
                let (w, deq) = weights(kind, n, k, &mut seed);
                let x = acts(m, k, &mut seed);
                let blocks = Blocks::new(kind, &w, n, k).unwrap();
                let reference = matmul_reference(&blocks, &x, m).unwrap();
                let fast = matmul(&blocks, &x, m).unwrap();
                assert_eq!(
                    fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    reference.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{kind:?} {m}×{k} · {n}×{k}: SIMD and reference differ"
                );
                for r in 0..m {
                    let xr = &x[r * k..(r + 1) * k];
                    let amax = xr.iter().fold(0f64, |a, v| a.max(f64::from(v.abs())));
                    for c in 0..n {
                        let exact: f64 = (0..k).map(|j| deq[c * k + j] * f64::from(xr[j])).sum();
                        // the activations' rounding: half a step of amax/127 per value
                        let bound: f64 = (0..k)
                            .map(|j| deq[c * k + j].abs() * amax / 254.0)
                            .sum::<f64>()
                            * 1.01
                            + 1e-3;
                        let got = f64::from(reference[r * n + c]);
                        assert!(
                            (got - exact).abs() <= bound,
                            "{kind:?} ({r}, {c}): {got} against {exact} (bound {bound})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn products_equal_candles_kernel() {
        use candle_core::quantized::{QMatMul, QStorage, QTensor};
        use candle_core::{Device, Module, Tensor};
        let mut seed = 5;
        for (kind, dtype) in [(Kind::Q8_0, GgmlDType::Q8_0), (Kind::Q4_0, GgmlDType::Q4_0)] {
            let (m, n, k) = (3, 24, 128);
            let (w, deq) = weights(kind, n, k, &mut seed);
            let x = acts(m, k, &mut seed);
            let storage =
                QStorage::from_data(std::borrow::Cow::Borrowed(&w), &Device::Cpu, dtype).unwrap();
            let q = QMatMul::from_qtensor(QTensor::new(storage, (n, k)).unwrap()).unwrap();
            let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
            let theirs: Vec<f32> = q
                .forward(&xt)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let ours = matmul_reference(&Blocks::new(kind, &w, n, k).unwrap(), &x, m).unwrap();
            for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                // candle's summation order differs where its tiled kernels run (VNNI):
                // a few f32 roundings of the terms' magnitude
                let (r, c) = (i / n, i % n);
                let size: f64 = (0..k)
                    .map(|j| (deq[c * k + j] * f64::from(x[r * k + j])).abs())
                    .sum();
                assert!(
                    f64::from((a - b).abs()) <= 1e-5 * size.max(1.0),
                    "{kind:?} element {i}: ours {a}, candle {b}"
                );
            }
        }
    }

    #[test]
    fn mismatched_sizes_are_refused() {
        let w = vec![0u8; 34 * 2];
        let blocks = Blocks::new(Kind::Q8_0, &w, 2, 32).unwrap();
        assert!(matmul(&blocks, &[0.0; 32], 1).is_ok());
        assert!(matmul(&blocks, &[0.0; 31], 1).is_err());
        assert!(matmul(&blocks, &[0.0; 32], 2).is_err());
        assert!(Blocks::new(Kind::Q8_0, &w, 3, 32).is_err());
        assert!(Blocks::new(Kind::Q4_0, &w, 2, 48).is_err());
    }
}
