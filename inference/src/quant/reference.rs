//! The scalar products, one weight row against one row of activations, in the order the
//! SIMD path keeps: for each block an exact integer sum in each of eight lanes, then
//! `acc[lane] = (d_w·d_x)·sum + acc[lane]` (a fused multiply-add), and at the end one fixed
//! horizontal sum ([`super::hsum8`]). Which products fall in which lane follows the AVX2
//! instructions: lane `l` holds bytes `4l..4l+4` of each 32-byte vector of values.
//!
//! - Q8_0/Q4_0: even and odd blocks in two sets of lanes (two dependency chains), added
//!   lane by lane before the horizontal sum.
//! - Q4_K: lane `l` of block sub-block pair `j` is `sc[2j]·Σ q·x` over values `64j+4l..+4`
//!   plus `sc[2j+1]·Σ q·x` over `64j+32+4l..+4`; the mins term `Σ m[j]·(16-sums of
//!   sub-block j)` is one exact integer per block, summed by `dmin·d_x` in its own scalar
//!   accumulator and subtracted at the end.
//! - Q6_K: values taken as unsigned `q` (0–63); lane `l` of half `h`, vector `v` holds
//!   `sc·Σ q·x` over values `128h+32v+4l..+4`, and lane `l` also carries
//!   `−32·(sc[2l]·s[2l] + sc[2l+1]·s[2l+1])` with `s` the 16-value sums: the `q − 32`
//!   offset, applied once per block.

use super::{Kind, QK, QK_K, f16_at, hsum8};

/// One block of 32 activations, as candle's `BlockQ8_0::from_float` computes it; returns
/// the scale (its f16 value).
pub(super) fn quantize_q8_0(x: &[f32], q: &mut [i8]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
    }
    half::f16::from_f32(d).to_f32()
}

/// One block of 256 activations, as candle's `BlockQ8K::from_float` computes it (the
/// value of largest magnitude, the first of equals, maps to −127); writes the sixteen
/// 16-value sums, returns the scale.
pub(super) fn quantize_q8_k(x: &[f32], q: &mut [i8], bsums: &mut [i16]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    if amax == 0.0 {
        q.fill(0);
        bsums[..QK_K / 16].fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (iscale * v).round().clamp(-128.0, 127.0) as i8;
    }
    for (s, q) in bsums.iter_mut().zip(q.chunks_exact(16)) {
        *s = q.iter().map(|v| i16::from(*v)).sum();
    }
    1.0 / iscale
}

/// A Q4_K block's eight 6-bit scales and eight 6-bit mins (GGML's `get_scale_min_k4`).
pub(super) fn q4k_scales(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..8 {
        (sc[j], mn[j]) = if j < 4 {
            (s[j] & 63, s[j + 4] & 63)
        } else {
            (
                (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
                (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
            )
        };
    }
    (sc, mn)
}

/// A Q6_K block's 256 unsigned values (0–63, the stored `q`; the value is `q − 32`).
pub(super) fn q6k_values(block: &[u8]) -> [u8; QK_K] {
    let (ql, qh) = (&block[..128], &block[128..192]);
    let mut v = [0u8; QK_K];
    for h in 0..2 {
        for l in 0..32 {
            let (lo, hi, bits) = (ql[64 * h + l], ql[64 * h + 32 + l], qh[32 * h + l]);
            let y = &mut v[128 * h..];
            y[l] = (lo & 15) | ((bits & 3) << 4);
            y[l + 32] = (hi & 15) | (((bits >> 2) & 3) << 4);
            y[l + 64] = (lo >> 4) | (((bits >> 4) & 3) << 4);
            y[l + 96] = (hi >> 4) | (((bits >> 6) & 3) << 4);
        }
    }
    v
}

/// A Q8_0/Q4_0 block's 32 values (without the scale).
pub(super) fn q8_values(kind: Kind, block: &[u8]) -> [i8; QK] {
    let mut v = [0i8; QK];
    if kind == Kind::Q8_0 {
        for (v, b) in v.iter_mut().zip(&block[2..2 + QK]) {
            *v = *b as i8;
        }
    } else {
        for (j, b) in block[2..2 + QK / 2].iter().enumerate() {
            v[j] = (b & 0x0f) as i8 - 8;
            v[j + QK / 2] = (b >> 4) as i8 - 8;
        }
    }
    v
}

/// Weight row `w` (blocks of `kind`) against one row of activations quantized for it.
pub(super) fn dot(kind: Kind, w: &[u8], xq: &[i8], xd: &[f32], bsums: &[i16]) -> f32 {
    let blocks = w
        .chunks_exact(kind.block_bytes())
        .zip(xq.chunks_exact(kind.block_len()));
    // an integer of four products of values at `i..i+4` (weights, activations)
    let quad = |w: &dyn Fn(usize) -> i32, x: &[i8], i: usize| -> i32 {
        (i..i + 4).map(|j| w(j) * i32::from(x[j])).sum()
    };
    match kind {
        Kind::Q8_0 | Kind::Q4_0 => {
            let mut acc = [[0f32; 8]; 2];
            for (b, (block, xq)) in blocks.enumerate() {
                let wv = q8_values(kind, block);
                let d = f16_at(block) * xd[b];
                for (lane, acc) in acc[b % 2].iter_mut().enumerate() {
                    let s = quad(&|j| i32::from(wv[j]), xq, 4 * lane);
                    *acc = d.mul_add(s as f32, *acc);
                }
            }
            hsum8(std::array::from_fn(|l| acc[0][l] + acc[1][l]))
        }
        Kind::Q4K => {
            let (mut acc, mut accm) = ([0f32; 8], 0f32);
            for (b, (block, xq)) in blocks.enumerate() {
                let (sc, mn) = q4k_scales(&block[4..16]);
                let qs = &block[16..];
                let nib =
                    |j: usize| i32::from(qs[j % 32 + 32 * (j / 64)] >> (4 * (j / 32 % 2)) & 15);
                for (lane, acc) in acc.iter_mut().enumerate() {
                    let s: i32 = (0..4)
                        .map(|j| {
                            i32::from(sc[2 * j]) * quad(&nib, xq, 64 * j + 4 * lane)
                                + i32::from(sc[2 * j + 1]) * quad(&nib, xq, 64 * j + 32 + 4 * lane)
                        })
                        .sum();
                    *acc = (f16_at(block) * xd[b]).mul_add(s as f32, *acc);
                }
                let sums = &bsums[16 * b..];
                let m: i32 = (0..8)
                    .map(|j| {
                        i32::from(mn[j]) * (i32::from(sums[2 * j]) + i32::from(sums[2 * j + 1]))
                    })
                    .sum();
                accm = (f16_at(&block[2..]) * xd[b]).mul_add(m as f32, accm);
            }
            hsum8(acc) - accm
        }
        Kind::Q6K => {
            let mut acc = [0f32; 8];
            for (b, (block, xq)) in blocks.enumerate() {
                let v = q6k_values(block);
                let sc = |i: usize| i32::from(block[192 + i] as i8);
                let sums = &bsums[16 * b..];
                for (lane, acc) in acc.iter_mut().enumerate() {
                    let mut s = -32
                        * (sc(2 * lane) * i32::from(sums[2 * lane])
                            + sc(2 * lane + 1) * i32::from(sums[2 * lane + 1]));
                    for h in 0..2 {
                        for vec in 0..4 {
                            let i = 128 * h + 32 * vec + 4 * lane;
                            // values 0..16 of a vector take one scale, 16..32 the next
                            s += sc(8 * h + 2 * vec + lane / 4) * quad(&|j| i32::from(v[j]), xq, i);
                        }
                    }
                    *acc = (f16_at(&block[208..]) * xd[b]).mul_add(s as f32, *acc);
                }
            }
            hsum8(acc)
        }
    }
}
