//! The radix-2 NTT over BN254's Fr in AVX-512 IFMA lanes: what [`crate::ops::Cpu`] runs
//! for the prover's witness map (three inverse NTTs, three on a coset, 2^16 points and
//! more) where the CPU has the lanes; arkworks' `Radix2EvaluationDomain` elsewhere.
//!
//! The values are loaded once into lanes (eight consecutive elements a vector, each
//! multiplied by its power of the coset's shift on the way in), transformed by
//! decimation in frequency — natural order in, bit-reversed out, so the coset's powers
//! are applied in natural order — and stored back (each multiplied by `1/n` on the way
//! out for an inverse), then put in natural order. Stages whose butterflies span at least
//! eight elements pair whole vectors, with one vector of twiddles per pair; the last three
//! (spans 4, 2, 1) pair lanes inside a vector by a permutation. Every stage is split
//! across the cores. The result equals arkworks' bit for bit (the same field values).
#![allow(unsafe_code)]

use crate::ifma::{Fr8, Lanes, active};
use ark_bn254::Fr;
use ark_ff::{Field, One};
use rayon::prelude::*;
use std::arch::x86_64::{__m512i, _mm512_loadu_si512};

/// Vector pairs a task takes at least (smaller stages' work is not worth a thread).
const MIN_PAIRS: usize = 256;

/// The eight powers `x^0 … x^7` of `x`.
fn powers8(x: Fr) -> [Fr; 8] {
    let mut p = [Fr::one(); 8];
    for k in 1..8 {
        p[k] = p[k - 1] * x;
    }
    p
}

/// `[x^(8j) · x^0 … x^(8j+7)]` for `j` in `0..count`: a stage's twiddles (or a coset's
/// powers), in lanes.
#[target_feature(enable = "avx512f,avx512ifma")]
fn power_vectors(x: Fr, start: u64, count: usize) -> Vec<Fr8> {
    let first = powers8(x).map(|p| p * x.pow([start]));
    let step = unsafe { Fr8::load(&[x.pow([8]); 8]) };
    let mut v = unsafe { Fr8::load(&first) };
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(v);
        v = unsafe { v.mul(step) };
    }
    out
}

/// One decimation-in-frequency stage whose butterflies span `h ≥ 8` elements (`h/8`
/// vectors): `(a, b) ← (a + b, (a − b)·w^j)`.
#[target_feature(enable = "avx512f,avx512ifma")]
fn wide_stage(v: &mut [Fr8], h: usize, twiddles: &[Fr8]) {
    let span = h / 8;
    let butterflies = |lo: &mut [Fr8], hi: &mut [Fr8], tw: &[Fr8]| {
        for ((a, b), w) in lo.iter_mut().zip(hi.iter_mut()).zip(tw) {
            // SAFETY: the caller checked the lanes (`active`).
            unsafe {
                let (x, y) = (*a, *b);
                *a = x.add(y);
                *b = x.sub(y).mul(*w);
            }
        }
    };
    if span >= MIN_PAIRS {
        // few, large groups: split each group's pairs
        for group in v.chunks_mut(2 * span) {
            let (lo, hi) = group.split_at_mut(span);
            lo.par_chunks_mut(MIN_PAIRS)
                .zip(hi.par_chunks_mut(MIN_PAIRS))
                .zip(twiddles.par_chunks(MIN_PAIRS))
                .for_each(|((lo, hi), tw)| butterflies(lo, hi, tw));
        }
    } else {
        let per_task = (MIN_PAIRS / span).max(1) * 2 * span;
        v.par_chunks_mut(per_task).for_each(|groups| {
            for group in groups.chunks_mut(2 * span) {
                let (lo, hi) = group.split_at_mut(span);
                butterflies(lo, hi, twiddles);
            }
        });
    }
}

/// The last three stages (spans 4, 2, 1) inside each vector; `w4` and `w2` are the
/// twiddles of the first two as lanes (1 in the lanes that take a sum).
#[target_feature(enable = "avx512f,avx512ifma")]
fn narrow_stages(v: &mut [Fr8], w4: Fr8, w2: Fr8) {
    let swap = |h: u64| -> __m512i {
        let idx: [u64; 8] = core::array::from_fn(|k| k as u64 ^ h);
        // SAFETY: eight u64, 64 bytes; an unaligned load.
        unsafe { _mm512_loadu_si512(idx.as_ptr() as *const __m512i) }
    };
    let (s4, s2, s1) = (swap(4), swap(2), swap(1));
    // the lanes whose bit h is set take (a − b)·w; the others a + b
    let upper = |h: u8| -> u8 { (0..8u8).filter(|k| k & h != 0).fold(0, |m, k| m | 1 << k) };
    let (u4, u2, u1) = (upper(4), upper(2), upper(1));
    v.par_chunks_mut(MIN_PAIRS).for_each(|chunk| {
        for x in chunk {
            // SAFETY: the caller checked the lanes (`active`).
            unsafe {
                let step = |x: Fr8, s: __m512i, mask: u8, w: Option<Fr8>| -> Fr8 {
                    let p = x.permute(s);
                    let sum = x.add(p);
                    let diff = p.sub(x);
                    let diff = match w {
                        Some(w) => diff.mul(w),
                        None => diff,
                    };
                    sum.blend(mask, diff)
                };
                let y = step(*x, s4, u4, Some(w4));
                let y = step(y, s2, u2, Some(w2));
                *x = step(y, s1, u1, None);
            }
        }
    });
}

/// `j` with its lowest `bits` bits reversed.
fn bit_reverse(j: usize, bits: u32) -> usize {
    j.reverse_bits() >> (usize::BITS - bits)
}

/// `values ← NTT_ω(values · shift^i) · scale`: the evaluations at `ω^i` of the polynomial
/// with coefficients `values[i]·shift^i`, each times `scale`, in natural order (`ω` a
/// primitive `n`-th root of unity, `n = values.len()` a power of two). `false` (nothing
/// done) where the lanes are off or `n < 8`.
pub(crate) fn ntt(values: &mut [Fr], omega: Fr, shift: Option<Fr>, scale: Option<Fr>) -> bool {
    let n = values.len();
    if !active() || n < 8 || !n.is_power_of_two() {
        return false;
    }
    // SAFETY: `active` checked avx512f and avx512ifma on this CPU.
    unsafe { transform(values, omega, shift, scale) };
    true
}

#[target_feature(enable = "avx512f,avx512ifma")]
fn transform(values: &mut [Fr], omega: Fr, shift: Option<Fr>, scale: Option<Fr>) {
    let n = values.len();
    let blocks = n / 8;
    // in: eight elements a vector, times their coset powers
    let mut v: Vec<Fr8> = values
        .par_chunks_exact(8 * MIN_PAIRS.min(blocks))
        .enumerate()
        .flat_map_iter(|(c, chunk)| {
            let start = c * chunk.len();
            let powers = shift.map(|s| power_vectors(s, start as u64, chunk.len() / 8));
            chunk.chunks_exact(8).enumerate().map(move |(b, e)| {
                // SAFETY: the lanes were checked (`active`).
                let x = unsafe { Fr8::load(e.try_into().expect("eight elements")) };
                match &powers {
                    Some(p) => unsafe { x.mul(p[b]) },
                    None => x,
                }
            })
        })
        .collect();
    // the stages: spans n/2 … 8 over whole vectors, then 4, 2, 1 inside them
    let mut h = n / 2;
    while h >= 8 {
        let w = omega.pow([(n / (2 * h)) as u64]);
        wide_stage(&mut v, h, &power_vectors(w, 0, h / 8));
        h /= 2;
    }
    let lanes_of = |w: Fr, h: usize| -> Fr8 {
        let t: [Fr; 8] = core::array::from_fn(|k| {
            if k & h == 0 {
                Fr::one()
            } else {
                w.pow([(k % h) as u64])
            }
        });
        // SAFETY: the lanes were checked (`active`).
        unsafe { Fr8::load(&t) }
    };
    let w4 = lanes_of(omega.pow([(n / 8) as u64]), 4);
    let w2 = lanes_of(omega.pow([(n / 4) as u64]), 2);
    narrow_stages(&mut v, w4, w2);
    // out: times the scale, then from bit-reversed to natural order
    let scale = scale.map(|s| unsafe { Fr8::load(&[s; 8]) });
    values
        .par_chunks_exact_mut(8)
        .zip(v.par_iter())
        .for_each(|(out, x)| {
            // SAFETY: the lanes were checked (`active`).
            let x = match scale {
                Some(s) => unsafe { x.mul(s) },
                None => *x,
            };
            out.copy_from_slice(&unsafe { x.store() });
        });
    let bits = n.trailing_zeros();
    for j in 0..n {
        let r = bit_reverse(j, bits);
        if j < r {
            values.swap(j, r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_ff::UniformRand;
    use ark_poly::{EvaluationDomain, Radix2EvaluationDomain};
    use ark_std::rand::SeedableRng;

    #[test]
    fn lane_ntt_equals_arkworks_forward_inverse_and_on_a_coset() {
        if !crate::ifma::testable() {
            return;
        }
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(16);
        for log in [3u32, 4, 6, 11, 12] {
            let n = 1usize << log;
            let d = Radix2EvaluationDomain::<Fr>::new(n).unwrap();
            let coeffs: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            let mut want = coeffs.clone();
            d.fft_in_place(&mut want);
            let mut got = coeffs.clone();
            assert!(ntt(&mut got, d.group_gen, None, None));
            assert_eq!(got, want, "forward, n = {n}");
            let mut want = coeffs.clone();
            d.ifft_in_place(&mut want);
            let mut got = coeffs.clone();
            assert!(ntt(&mut got, d.group_gen_inv, None, Some(d.size_inv)));
            assert_eq!(got, want, "inverse, n = {n}");
            let shift = Fr::rand(&mut rng);
            let mut want = coeffs.clone();
            Radix2EvaluationDomain::distribute_powers_and_mul_by_const(&mut want, shift, Fr::one());
            d.fft_in_place(&mut want);
            let mut got = coeffs;
            assert!(ntt(&mut got, d.group_gen, Some(shift), None));
            assert_eq!(got, want, "coset, n = {n}");
        }
        assert!(!ntt(&mut [Fr::one(); 4], Fr::one(), None, None), "n < 8");
    }
}
