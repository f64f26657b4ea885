//! The AVX2 path: activations quantized eight values at a time, and per weight row a tile
//! of up to four rows of activations, each weight block loaded once for all of them. The
//! lanes and the order of the float sums are [`super::reference`]'s.

use std::arch::x86_64::*;

use super::{Acts, Blocks, Kind, QK, QK_K};

/// How far ahead of the block being multiplied its row is prefetched, in bytes.
const PREFETCH: usize = 1536;

/// `round(v · s)` half away from zero, NaN as 0 (as `f32 as i8` makes it), in i32 lanes.
///
/// # Safety
/// AVX2.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn round_scaled(v: __m256, s: __m256) -> __m256i {
    let sign = _mm256_set1_ps(-0.0);
    let s = _mm256_mul_ps(v, s);
    let s = _mm256_and_ps(s, _mm256_cmp_ps::<_CMP_ORD_Q>(s, s));
    let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(s);
    let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(s, t));
    let away = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, _mm256_set1_ps(0.5));
    let step = _mm256_or_ps(_mm256_and_ps(s, sign), _mm256_set1_ps(1.0));
    _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(away, step)))
}

/// 32 values at `x` scaled by `s`, rounded, saturated to i8 and stored in order at `q`;
/// returns them.
///
/// # Safety
/// AVX2; 32 values readable at `x`, writable at `q`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn round_32(x: *const f32, s: __m256, q: *mut i8) -> __m256i {
    unsafe {
        let r = |i: usize| round_scaled(_mm256_loadu_ps(x.add(8 * i)), s);
        let a = _mm256_packs_epi32(r(0), r(1));
        let b = _mm256_packs_epi32(r(2), r(3));
        let packed = _mm256_packs_epi16(a, b);
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let v = _mm256_permutevar8x32_epi32(packed, order);
        _mm256_storeu_si256(q as *mut __m256i, v);
        v
    }
}

/// The largest magnitude of `n` values at `x` (NaN skipped, as `f32::max` does).
///
/// # Safety
/// AVX2; `n` (a multiple of 8) values readable at `x`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn amax(x: *const f32, n: usize) -> f32 {
    unsafe {
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_setzero_ps();
        for i in (0..n).step_by(8) {
            // max(|v|, m) keeps m where |v| is NaN
            m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x.add(i))), m);
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        _mm_cvtss_f32(_mm_max_ss(m2, _mm_movehdup_ps(m2)))
    }
}

/// One block of 32 activations quantized as `reference::quantize_q8_0` does, to the bit.
///
/// # Safety
/// AVX2, FMA and F16C; `x` and `q` hold 32 values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_0(x: *const f32, q: *mut i8) -> f32 {
    unsafe {
        let d = amax(x, QK) / 127.0;
        round_32(x, _mm256_set1_ps(if d != 0.0 { 1.0 / d } else { 0.0 }), q);
        half::f16::from_f32(d).to_f32()
    }
}

/// One block of 256 activations quantized as `reference::quantize_q8_k` does, to the bit.
///
/// # Safety
/// AVX2, FMA and F16C; `x` and `q` hold 256 values, `bsums` at least 16.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_k(x: *const f32, q: *mut i8, bsums: &mut [i16]) -> f32 {
    unsafe {
        let amax = amax(x, QK_K);
        if amax == 0.0 {
            std::ptr::write_bytes(q, 0, QK_K);
            bsums[..16].fill(0);
            return 0.0;
        }
        // the first value of that magnitude keeps its sign
        let (sign, target) = (_mm256_set1_ps(-0.0), _mm256_set1_ps(amax));
        let mut max = amax;
        for i in (0..QK_K).step_by(8) {
            let a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x.add(i)));
            let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(a, target));
            if hit != 0 {
                max = *x.add(i + hit.trailing_zeros() as usize);
                break;
            }
        }
        let iscale = -127.0 / max;
        let s = _mm256_set1_ps(iscale);
        let (bias, zero) = (_mm256_set1_epi8(-128), _mm256_setzero_si256());
        for g in 0..QK_K / 32 {
            let v = round_32(x.add(32 * g), s, q.add(32 * g));
            // sums of each 8 bytes, offset by 128 each to make them unsigned
            let sad = _mm256_sad_epu8(_mm256_xor_si256(v, bias), zero);
            let mut e = [0i64; 4];
            _mm256_storeu_si256(e.as_mut_ptr() as *mut __m256i, sad);
            bsums[2 * g] = (e[0] + e[1] - 16 * 128) as i16;
            bsums[2 * g + 1] = (e[2] + e[3] - 16 * 128) as i16;
        }
        1.0 / iscale
    }
}

/// # Safety
/// F16C; two readable bytes at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(p: *const u8) -> f32 {
    unsafe {
        let bits = i32::from(u16::from_le_bytes([*p, *p.add(1)]));
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
    }
}

/// Hints the `bytes` of a block `PREFETCH` ahead of `p` into L1 (never faults).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn prefetch(p: *const u8, bytes: usize) {
    for o in (0..bytes).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PREFETCH + o) as *const i8);
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

/// # Safety
/// AVX2; one whole Q8_0 (or Q4_0 where `Q4`) block at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q8_values<const Q4: bool>(p: *const u8) -> __m256i {
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

/// Where rows `r0..r0 + R` of the activations start: values and scales.
struct Rows {
    xq: *const i8,
    xd: *const f32,
    sums: *const i16,
    /// Values a row.
    k: usize,
    /// Blocks a row.
    nb: usize,
}

impl Rows {
    fn new(acts: &Acts, r0: usize, k: usize) -> Rows {
        let (nb, sums) = acts.per_row(k);
        Rows {
            // r0 < m: inside each buffer (wrapping_add only keeps this function safe)
            xq: acts.qs.as_ptr().wrapping_add(r0 * k),
            xd: acts.d.as_ptr().wrapping_add(r0 * nb),
            sums: acts.bsums.as_ptr().wrapping_add(r0 * sums),
            k,
            nb,
        }
    }
}

/// Block `b` of a Q8_0/Q4_0 weight row against `R` rows of activations, into `acc`.
///
/// # Safety
/// AVX2, FMA and F16C; block `b` lies within `w`; `x` holds `R` rows of `k` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_q8<const R: usize, const Q4: bool>(
    w: &[u8],
    bytes: usize,
    x: &Rows,
    b: usize,
    acc: &mut [__m256; R],
) {
    unsafe {
        let p = w.as_ptr().add(b * bytes);
        prefetch(p, 1);
        let dw = f16_at(p);
        let wv = q8_values::<Q4>(p);
        let aw = _mm256_sign_epi8(wv, wv);
        for (r, acc) in acc.iter_mut().enumerate() {
            let y = _mm256_loadu_si256(x.xq.add(r * x.k + b * QK) as *const __m256i);
            let sy = _mm256_sign_epi8(y, wv);
            let dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sy), _mm256_set1_epi16(1));
            let d = _mm256_set1_ps(dw * *x.xd.add(r * x.nb + b));
            *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot), *acc);
        }
    }
}

/// `R` rows of Q8_0 activations against one Q8_0/Q4_0 weight row.
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds `k/32` blocks of the kind; `x` `R` rows of `k` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q8<const R: usize, const Q4: bool>(w: &[u8], bytes: usize, x: &Rows) -> [f32; R] {
    unsafe {
        // even and odd blocks in separate accumulators: two FMA dependency chains, which a
        // single row would otherwise wait on; each named, so that both stay in registers
        let mut even = [_mm256_setzero_ps(); R];
        let mut odd = [_mm256_setzero_ps(); R];
        let mut b = 0;
        while b + 1 < x.nb {
            block_q8::<R, Q4>(w, bytes, x, b, &mut even);
            block_q8::<R, Q4>(w, bytes, x, b + 1, &mut odd);
            b += 2;
        }
        if b < x.nb {
            block_q8::<R, Q4>(w, bytes, x, b, &mut even);
        }
        std::array::from_fn(|r| hsum(_mm256_add_ps(even[r], odd[r])))
    }
}

/// An i16 shuffle control that repeats element `e` of each 128-bit half.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn pick16(e: usize) -> __m256i {
    _mm256_set1_epi16(((2 * e) | ((2 * e + 1) << 8)) as i16)
}

/// `R` rows of Q8_K activations against one Q4_K weight row.
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds `k/256` Q4_K blocks; `x` `R` rows of `k` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q4k<const R: usize>(w: &[u8], x: &Rows) -> [f32; R] {
    const K1: u32 = 0x3f3f_3f3f;
    const K2: u32 = 0x0f0f_0f0f;
    const K3: u32 = 0x0303_0303;
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut accm = [0f32; R];
        for b in 0..x.nb {
            let p = w.as_ptr().add(b * Kind::Q4K.block_bytes());
            prefetch(p, Kind::Q4K.block_bytes());
            let (d, dmin) = (f16_at(p), f16_at(p.add(2)));
            // the twelve bytes of 6-bit fields as eight scales then eight mins (GGML's
            // unpacking, four at a time)
            let mut u = [0u32; 4];
            std::ptr::copy_nonoverlapping(p.add(4), u.as_mut_ptr() as *mut u8, 12);
            u[3] = ((u[2] >> 4) & K2) | (((u[1] >> 6) & K3) << 4);
            let mins_lo = u[1] & K1;
            u[1] = (u[2] & K2) | (((u[0] >> 6) & K3) << 4);
            u[2] = mins_lo;
            u[0] &= K1;
            let scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi32(
                0,
                0,
                u[1] as i32,
                u[0] as i32,
            )));
            let mut sumi = [_mm256_setzero_si256(); R];
            for j in 0..4 {
                let bits = _mm256_loadu_si256(p.add(16 + 32 * j) as *const __m256i);
                let lo = _mm256_and_si256(bits, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
                let sl = _mm256_shuffle_epi8(scales, pick16(2 * j));
                let sh = _mm256_shuffle_epi8(scales, pick16(2 * j + 1));
                for (r, sumi) in sumi.iter_mut().enumerate() {
                    let xq = x.xq.add(r * x.k + b * QK_K + 64 * j);
                    let pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(xq as *const __m256i));
                    let ph =
                        _mm256_maddubs_epi16(hi, _mm256_loadu_si256(xq.add(32) as *const __m256i));
                    let s = _mm256_add_epi32(_mm256_madd_epi16(sl, pl), _mm256_madd_epi16(sh, ph));
                    *sumi = _mm256_add_epi32(*sumi, s);
                }
            }
            let mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, u[3] as i32, u[2] as i32));
            for r in 0..R {
                let dx = *x.xd.add(r * x.nb + b);
                acc[r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                // Σ m[j]·(sums 2j and 2j + 1): exact in i32
                let sums = _mm256_loadu_si256(x.sums.add(r * x.nb * 16 + b * 16) as *const __m256i);
                let pairs = _mm_hadd_epi16(
                    _mm256_castsi256_si128(sums),
                    _mm256_extracti128_si256::<1>(sums),
                );
                let p4 = _mm_madd_epi16(mins, pairs);
                let p2 = _mm_add_epi32(p4, _mm_unpackhi_epi64(p4, p4));
                let m = _mm_cvtsi128_si32(_mm_add_epi32(p2, _mm_shuffle_epi32::<1>(p2)));
                accm[r] = (dmin * dx).mul_add(m as f32, accm[r]);
            }
        }
        std::array::from_fn(|r| hsum(acc[r]) - accm[r])
    }
}

/// `R` rows of Q8_K activations against one Q6_K weight row.
///
/// # Safety
/// AVX2, FMA and F16C; `w` holds `k/256` Q6_K blocks; `x` `R` rows of `k` values.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_q6k<const R: usize>(w: &[u8], x: &Rows) -> [f32; R] {
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let m3 = _mm256_set1_epi8(0x03);
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..x.nb {
            let p = w.as_ptr().add(b * Kind::Q6K.block_bytes());
            prefetch(p, Kind::Q6K.block_bytes());
            let d = f16_at(p.add(208));
            let sc8 = _mm_loadu_si128(p.add(192) as *const __m128i);
            // the q − 32 offset: −32 · Σ sc·(16-value sums), lane by lane
            let sc16 = _mm256_cvtepi8_epi16(sc8);
            let mut sumi: [__m256i; R] = std::array::from_fn(|r| {
                let sums = x.sums.add(r * x.nb * 16 + b * 16) as *const __m256i;
                let off = _mm256_madd_epi16(sc16, _mm256_loadu_si256(sums));
                _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(off))
            });
            for h in 0..2 {
                let qh = _mm256_loadu_si256(p.add(128 + 32 * h) as *const __m256i);
                let ql1 = _mm256_loadu_si256(p.add(64 * h) as *const __m256i);
                let ql2 = _mm256_loadu_si256(p.add(64 * h + 32) as *const __m256i);
                for v in 0..4 {
                    let q = match v {
                        0 => _mm256_or_si256(
                            _mm256_and_si256(ql1, m4),
                            _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m3)),
                        ),
                        1 => _mm256_or_si256(
                            _mm256_and_si256(ql2, m4),
                            _mm256_slli_epi16::<2>(_mm256_and_si256(
                                qh,
                                _mm256_slli_epi16::<2>(m3),
                            )),
                        ),
                        2 => _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                            _mm256_and_si256(qh, _mm256_slli_epi16::<4>(m3)),
                        ),
                        _ => _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(ql2), m4),
                            _mm256_srli_epi16::<2>(_mm256_and_si256(
                                qh,
                                _mm256_slli_epi16::<6>(m3),
                            )),
                        ),
                    };
                    // eight lanes of scale i, eight of scale i + 1
                    let i = (8 * h + 2 * v) as i64;
                    let pick =
                        _mm_set_epi64x((i + 1) * 0x0101_0101_0101_0101, i * 0x0101_0101_0101_0101);
                    let s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, pick));
                    for (r, sumi) in sumi.iter_mut().enumerate() {
                        let xq = x.xq.add(r * x.k + b * QK_K + 128 * h + 32 * v);
                        let prod =
                            _mm256_maddubs_epi16(q, _mm256_loadu_si256(xq as *const __m256i));
                        *sumi = _mm256_add_epi32(*sumi, _mm256_madd_epi16(s, prod));
                    }
                }
            }
            for r in 0..R {
                let dx = *x.xd.add(r * x.nb + b);
                acc[r] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d * dx), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
            }
        }
        std::array::from_fn(|r| hsum(acc[r]))
    }
}

/// `R` rows of activations (from the start of `x`) against one weight row of `kind`.
///
/// # Safety
/// As the tile functions.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const R: usize>(kind: Kind, w: &[u8], x: &Rows) -> [f32; R] {
    unsafe {
        match kind {
            Kind::Q8_0 => tile_q8::<R, false>(w, kind.block_bytes(), x),
            Kind::Q4_0 => tile_q8::<R, true>(w, kind.block_bytes(), x),
            Kind::Q4K => tile_q4k::<R>(w, x),
            Kind::Q6K => tile_q6k::<R>(w, x),
        }
    }
}

/// Every row of `acts` against weight rows `cols` of `w`, into those columns of `out`
/// (`m × w.rows`).
///
/// # Safety
/// AVX2, FMA and F16C; `acts` holds `m` rows of `w.cols` values quantized for `w.kind`;
/// `out` holds `m × w.rows` values; `cols` lies within `0..w.rows`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn columns(
    w: &Blocks<'_>,
    acts: &Acts,
    m: usize,
    out: *mut f32,
    cols: std::ops::Range<usize>,
) {
    unsafe {
        let (k, n) = (w.cols, w.rows);
        let row_bytes = k / w.kind.block_len() * w.kind.block_bytes();
        // the tiles of up to four rows of activations, worked out once for every column
        let tiles: Vec<(usize, usize, Rows)> = (0..m)
            .step_by(4)
            .map(|r0| (r0, (m - r0).min(4), Rows::new(acts, r0, k)))
            .collect();
        for c in cols {
            let row = w.bytes.get_unchecked(c * row_bytes..(c + 1) * row_bytes);
            for (r0, rows, x) in &tiles {
                let put = |vals: &[f32]| {
                    for (i, v) in vals.iter().enumerate() {
                        *out.add((r0 + i) * n + c) = *v;
                    }
                };
                match rows {
                    4 => put(&tile::<4>(w.kind, row, x)),
                    3 => put(&tile::<3>(w.kind, row, x)),
                    2 => put(&tile::<2>(w.kind, row, x)),
                    _ => put(&tile::<1>(w.kind, row, x)),
                }
            }
        }
    }
}
