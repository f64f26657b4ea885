//! A CPU multi-scalar multiplication with batch-affine bucket accumulation, for
//! short-Weierstrass curves (BN254 G1 and G2).
//!
//! Pippenger with signed window digits; within a window, points are added into affine
//! buckets in batches that share one field inversion (Montgomery's trick), so an addition
//! costs about 5 multiplications and a squaring instead of the ~10 of a mixed projective
//! addition. A bucket hit twice in one batch, or a point with the bucket's x coordinate
//! (a doubling or a cancellation), goes to a projective side bucket instead. Windows run in
//! parallel (rayon). [`crate::ops::Cpu`] uses this; the arkworks MSM (the trait's default)
//! is the reference it is tested against.

use ark_ec::short_weierstrass::{Affine, Projective, SWCurveConfig};
use ark_ec::{AdditiveGroup, AffineRepr};
use ark_ff::{Field, PrimeField, Zero};
use rayon::prelude::*;

/// Below this many points the arkworks MSM is used (the batching does not pay off).
const SMALL: usize = 64;
/// Additions gathered before one shared inversion.
const BATCH: usize = 512;

/// The window width for `n` points.
fn window_bits(n: usize) -> usize {
    let log = usize::BITS as usize - n.leading_zeros() as usize;
    // Measured on 2^14 points (G1 and G2): log2(n) − 2 and − 3 are best, − 1 and − 4
    // are 10–35 % slower.
    log.saturating_sub(3).clamp(4, 16)
}

/// Bits `[start, start + len)` of a little-endian limb array (len ≤ 32).
fn bits(limbs: &[u64], start: usize, len: usize) -> u32 {
    let (limb, shift) = (start / 64, start % 64);
    if limb >= limbs.len() {
        return 0;
    }
    let mut v = limbs[limb] >> shift;
    if shift + len > 64 && limb + 1 < limbs.len() {
        v |= limbs[limb + 1] << (64 - shift);
    }
    (v & ((1u64 << len) - 1)) as u32
}

/// Signed digits of every scalar, scalar-major: `digits[i * windows + w]` is scalar i's
/// digit in window w, in `[-2^(c-1), 2^(c-1)]`. One allocation, filled in parallel.
pub(crate) fn signed_digits<F: PrimeField>(scalars: &[F], c: usize, windows: usize) -> Vec<i32> {
    let mut digits = vec![0i32; windows * scalars.len()];
    digits
        .par_chunks_mut(windows.max(1))
        .zip(scalars.par_iter())
        .for_each(|(out, s)| {
            let b = s.into_bigint();
            let limbs = b.as_ref();
            let mut carry = 0i64;
            for (w, o) in out.iter_mut().enumerate() {
                let d = i64::from(bits(limbs, w * c, c)) + carry;
                if d >= 1 << (c - 1) {
                    *o = (d - (1 << c)) as i32;
                    carry = 1;
                } else {
                    *o = d as i32;
                    carry = 0;
                }
            }
            debug_assert_eq!(carry, 0);
        });
    digits
}

/// Applies the pending `pairs` (bucket index, point) to the affine buckets with one
/// shared inversion.
fn flush<P: SWCurveConfig>(
    acc: &mut [Affine<P>],
    pending: &mut [bool],
    pairs: &mut Vec<(u32, Affine<P>)>,
    scratch: &mut Vec<P::BaseField>,
) {
    scratch.clear();
    scratch.extend(pairs.iter().map(|(b, p)| p.x - acc[*b as usize].x));
    ark_ff::batch_inversion(scratch);
    for ((b, p), inv) in pairs.iter().zip(scratch.iter()) {
        let q = &mut acc[*b as usize];
        let lambda = (p.y - q.y) * inv;
        let x3 = lambda.square() - q.x - p.x;
        let y3 = lambda * (q.x - x3) - q.y;
        *q = Affine::new_unchecked(x3, y3);
        pending[*b as usize] = false;
    }
    pairs.clear();
}

/// One window: Σ digit_i · base_i over the window's digits (`digits` yields scalar i's digit
/// of this window at step i).
fn window_sum<P: SWCurveConfig>(
    bases: &[Affine<P>],
    digits: impl Iterator<Item = i32>,
    c: usize,
) -> Projective<P> {
    let nb = 1usize << (c - 1);
    let mut acc = vec![Affine::<P>::identity(); nb];
    let mut side = vec![Projective::<P>::zero(); nb];
    let mut pending = vec![false; nb];
    let mut pairs = Vec::with_capacity(BATCH);
    let mut scratch = Vec::with_capacity(BATCH);
    for (base, d) in bases.iter().zip(digits) {
        if d == 0 || base.is_zero() {
            continue;
        }
        let b = (d.unsigned_abs() - 1) as usize;
        let p = if d < 0 { -*base } else { *base };
        if pending[b] {
            side[b] += p;
        } else if acc[b].is_zero() {
            acc[b] = p;
        } else if acc[b].x == p.x {
            // doubling or cancellation: not an affine chord
            side[b] += p;
        } else {
            pending[b] = true;
            pairs.push((b as u32, p));
            if pairs.len() == BATCH {
                flush(&mut acc, &mut pending, &mut pairs, &mut scratch);
            }
        }
    }
    flush(&mut acc, &mut pending, &mut pairs, &mut scratch);
    // Σ (b+1)·bucket_b by running sums, from the top bucket down.
    let mut running = Projective::<P>::zero();
    let mut sum = Projective::<P>::zero();
    for (a, s) in acc.iter().zip(side).rev() {
        running += s;
        running += a;
        sum += running;
    }
    sum
}

/// `Σ scalars[i] · bases[i]`. Lengths must be equal (the caller checks).
pub fn msm<P: SWCurveConfig>(bases: &[Affine<P>], scalars: &[P::ScalarField]) -> Projective<P> {
    use ark_ec::VariableBaseMSM;
    debug_assert_eq!(bases.len(), scalars.len());
    let n = bases.len().min(scalars.len());
    if n < SMALL {
        return Projective::<P>::msm_unchecked(&bases[..n], &scalars[..n]);
    }
    let c = window_bits(n);
    let num_bits = P::ScalarField::MODULUS_BIT_SIZE as usize;
    let windows = (num_bits + 1).div_ceil(c);
    let digits = signed_digits(&scalars[..n], c, windows);
    let sums: Vec<Projective<P>> = (0..windows)
        .into_par_iter()
        .map(|w| {
            let column = digits.iter().skip(w).step_by(windows).copied();
            window_sum(&bases[..n], column, c)
        })
        .collect();
    let mut total = Projective::<P>::zero();
    for s in sums.iter().rev() {
        for _ in 0..c {
            total.double_in_place();
        }
        total += s;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_bn254::{Fr, G1Affine, G1Projective, G2Affine, G2Projective};
    use ark_ec::{CurveGroup, PrimeGroup, VariableBaseMSM};
    use ark_ff::UniformRand;
    use ark_std::rand::SeedableRng;

    fn check<P: SWCurveConfig>(bases: &[Affine<P>], scalars: &[P::ScalarField]) {
        let reference = Projective::<P>::msm_unchecked(bases, scalars);
        assert_eq!(msm(bases, scalars), reference, "n = {}", bases.len());
    }

    #[test]
    fn digits_recompose_to_the_scalar() {
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(1);
        let s: Vec<Fr> = (0..50)
            .map(|_| Fr::rand(&mut rng))
            .chain([-Fr::from(1u64)])
            .collect();
        for c in [4, 7, 13, 16] {
            let windows = 255usize.div_ceil(c);
            let d = signed_digits(&s, c, windows);
            for (i, x) in s.iter().enumerate() {
                let mut acc = Fr::from(0u64);
                for w in (0..windows).rev() {
                    acc *= Fr::from(1u64 << c);
                    let v = d[i * windows + w];
                    acc += if v < 0 {
                        -Fr::from(v.unsigned_abs())
                    } else {
                        Fr::from(v as u32)
                    };
                    assert!(v.unsigned_abs() <= 1 << (c - 1));
                }
                assert_eq!(acc, *x, "c = {c}");
            }
        }
    }

    #[test]
    fn matches_arkworks_on_g1_and_g2_including_edge_cases() {
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(7);
        for n in [0usize, 1, 63, 64, 100, 1000, 5000] {
            let mut bases: Vec<G1Affine> = (0..n)
                .map(|_| (G1Projective::generator() * Fr::rand(&mut rng)).into_affine())
                .collect();
            let mut scalars: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            if n >= 100 {
                // repeated and opposite points (doubling and cancellation in a bucket),
                // the point at infinity, zero and -1 scalars, small scalars
                for i in 0..20 {
                    bases[i + 20] = bases[i];
                    scalars[i + 20] = scalars[i];
                    bases[i + 40] = -bases[i];
                    scalars[i + 40] = scalars[i];
                }
                bases[60] = G1Affine::identity();
                scalars[61] = Fr::from(0u64);
                scalars[62] = -Fr::from(1u64);
                for s in scalars.iter_mut().skip(70).take(20) {
                    *s = Fr::from(3u64);
                }
            }
            check(&bases, &scalars);
        }
        for n in [70usize, 700] {
            let bases: Vec<G2Affine> = (0..n)
                .map(|_| (G2Projective::generator() * Fr::rand(&mut rng)).into_affine())
                .collect();
            let scalars: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
            check(&bases, &scalars);
        }
    }
}
