//! BN254 G1 points times 128-bit scalars, eight at a time in AVX-512 IFMA lanes: the
//! random weights of a batch verification (`r_j·A_j` and `r_j·C_j` in
//! fleetmesh-prover's `verify`), where arkworks spends ~45 µs on each.
//!
//! Each lane holds its own point in homogeneous projective coordinates and runs the same
//! sequence: a table of `0·P … 15·P`, then per 4-bit window of the scalar (from the top)
//! four doublings and the addition of the table's entry that lane's digit picks (a blend
//! over the sixteen entries: no data-dependent branch or address). The formulas are the
//! complete ones of Renes, Costello and Batina (ePrint 2015/1060, algorithms 7 and 9 for
//! `a = 0`), so the point at infinity and equal points need no special case. The results
//! are brought to affine coordinates with one shared inversion.
//!
//! [`mul_u128`] answers `None` where the lanes are off (see [`crate::ifma::active`]).
#![allow(unsafe_code)]

use crate::ifma::{Fq8, Lanes, active};
use ark_bn254::{Fq, G1Affine};
use ark_ec::AffineRepr;
use ark_ff::{AdditiveGroup, Field};
use std::arch::x86_64::{__m512i, _mm512_cmpeq_epi64_mask, _mm512_loadu_si512, _mm512_set1_epi64};

/// Eight G1 points `(X : Y : Z)`, the affine point `(X/Z, Y/Z)`; infinity is `(0 : 1 : 0)`.
#[derive(Clone, Copy)]
struct G1x8 {
    x: Fq8,
    y: Fq8,
    z: Fq8,
}

/// `9·a` (`3b` for BN254's `b = 3`).
#[inline]
#[target_feature(enable = "avx512f,avx512ifma")]
fn times9(a: Fq8) -> Fq8 {
    unsafe {
        let a2 = a.add(a);
        let a8 = a2.add(a2);
        let a8 = a8.add(a8);
        a8.add(a)
    }
}

impl G1x8 {
    /// Algorithm 7 of RCB 2015 (`a = 0`): complete addition, 12 products.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn add(self, o: G1x8) -> G1x8 {
        unsafe {
            let (x1, y1, z1, x2, y2, z2) = (self.x, self.y, self.z, o.x, o.y, o.z);
            let t0 = x1.mul(x2);
            let t1 = y1.mul(y2);
            let t2 = z1.mul(z2);
            let t3 = x1.add(y1).mul(x2.add(y2)).sub(t0.add(t1));
            let t4 = y1.add(z1).mul(y2.add(z2)).sub(t1.add(t2));
            let y3 = x1.add(z1).mul(x2.add(z2)).sub(t0.add(t2));
            let t0 = t0.add(t0).add(t0);
            let t2 = times9(t2);
            let z3 = t1.add(t2);
            let t1 = t1.sub(t2);
            let y3 = times9(y3);
            let x3 = t3.mul(t1).sub(t4.mul(y3));
            let y3 = t1.mul(z3).add(y3.mul(t0));
            let z3 = z3.mul(t4).add(t0.mul(t3));
            G1x8 {
                x: x3,
                y: y3,
                z: z3,
            }
        }
    }

    /// Algorithm 9 of RCB 2015 (`a = 0`): complete doubling, 8 products.
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn double(self) -> G1x8 {
        unsafe {
            let (x, y, z) = (self.x, self.y, self.z);
            let t0 = y.square();
            let z8 = t0.add(t0);
            let z8 = z8.add(z8);
            let z8 = z8.add(z8);
            let t1 = y.mul(z);
            let t2 = times9(z.square());
            let x3 = t2.mul(z8);
            let y3 = t0.add(t2);
            let z3 = t1.mul(z8);
            let t2 = t2.add(t2).add(t2);
            let t0 = t0.sub(t2);
            let y3 = x3.add(t0.mul(y3));
            let x3 = t0.mul(x.mul(y));
            G1x8 {
                x: x3.add(x3),
                y: y3,
                z: z3,
            }
        }
    }

    /// `entries[d_k]` in each lane `k` (`digits[k] < entries.len()`).
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn pick(entries: &[G1x8], digits: __m512i) -> G1x8 {
        let mut out = entries[0];
        for (d, e) in entries.iter().enumerate().skip(1) {
            let m = _mm512_cmpeq_epi64_mask(digits, _mm512_set1_epi64(d as i64));
            out = G1x8 {
                x: out.x.blend(m, e.x),
                y: out.y.blend(m, e.y),
                z: out.z.blend(m, e.z),
            };
        }
        out
    }
}

/// Bits per window of the scalars.
const WINDOW: u32 = 4;

/// `k_i·P_i` for eight points, projective, as three lanes of coordinates.
#[target_feature(enable = "avx512f,avx512ifma")]
fn eight(points: &[G1Affine; 8], scalars: &[u128; 8]) -> [[Fq; 8]; 3] {
    let (zero, one) = unsafe { (Fq8::load(&[Fq::ZERO; 8]), Fq8::load(&[Fq::ONE; 8])) };
    let coords = |f: fn(&G1Affine) -> Fq| unsafe { Fq8::load(&points.each_ref().map(f)) };
    let p = G1x8 {
        x: coords(|p| p.x),
        y: coords(|p| p.y),
        z: one,
    };
    let mut table = vec![
        G1x8 {
            x: zero,
            y: one,
            z: zero,
        },
        p,
    ];
    for d in 2..1usize << WINDOW {
        let next = table[d - 1].add(p);
        table.push(next);
    }
    let digits = |w: u32| -> __m512i {
        let d = scalars.map(|k| ((k >> (w * WINDOW)) & ((1 << WINDOW) - 1)) as u64);
        // SAFETY: eight u64, 64 bytes; an unaligned load.
        unsafe { _mm512_loadu_si512(d.as_ptr() as *const __m512i) }
    };
    let windows = u128::BITS / WINDOW;
    let mut acc = G1x8::pick(&table, digits(windows - 1));
    for w in (0..windows - 1).rev() {
        for _ in 0..WINDOW {
            acc = acc.double();
        }
        acc = acc.add(G1x8::pick(&table, digits(w)));
    }
    unsafe { [acc.x.store(), acc.y.store(), acc.z.store()] }
}

/// `scalars[i]·points[i]` for each `i`, in affine coordinates; `None` where the IFMA
/// lanes are off here (then use arkworks' scalar multiplication).
///
/// # Panics
/// If the two slices differ in length.
pub fn mul_u128(points: &[G1Affine], scalars: &[u128]) -> Option<Vec<G1Affine>> {
    assert_eq!(points.len(), scalars.len(), "a scalar for each point");
    if !active() {
        return None;
    }
    let mut xs = Vec::with_capacity(points.len());
    let mut ys = Vec::with_capacity(points.len());
    let mut zs = Vec::with_capacity(points.len());
    for (ps, ks) in points.chunks(8).zip(scalars.chunks(8)) {
        // lanes past the end (and points at infinity) take the generator, results dropped
        let lane = |i: usize| match ps.get(i) {
            Some(p) if !p.is_zero() => *p,
            _ => G1Affine::generator(),
        };
        let p: [G1Affine; 8] = core::array::from_fn(lane);
        let k: [u128; 8] = core::array::from_fn(|i| ks.get(i).copied().unwrap_or(0));
        // SAFETY: `active` checked avx512f and avx512ifma on this CPU.
        let [x, y, z] = unsafe { eight(&p, &k) };
        for i in 0..ps.len() {
            let z = if ps[i].is_zero() { Fq::ZERO } else { z[i] };
            xs.push(x[i]);
            ys.push(y[i]);
            zs.push(z);
        }
    }
    // one inversion for all (a zero Z, the point at infinity, stays zero)
    ark_ff::batch_inversion(&mut zs);
    Some(
        xs.into_iter()
            .zip(ys)
            .zip(zs)
            .map(|((x, y), z_inv)| {
                if z_inv == Fq::ZERO {
                    G1Affine::zero()
                } else {
                    G1Affine::new_unchecked(x * z_inv, y * z_inv)
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_bn254::{Fr, G1Projective};
    use ark_ec::{CurveGroup, PrimeGroup};
    use ark_std::UniformRand;
    use ark_std::rand::{Rng, SeedableRng};

    #[test]
    fn lane_scalar_multiplication_equals_arkworks() {
        if !crate::ifma::testable() {
            return;
        }
        let mut rng = ark_std::rand::rngs::StdRng::seed_from_u64(7);
        for n in [1usize, 8, 13] {
            let mut points: Vec<G1Affine> = (0..n)
                .map(|_| (G1Projective::generator() * Fr::rand(&mut rng)).into_affine())
                .collect();
            let mut scalars: Vec<u128> = (0..n).map(|_| rng.r#gen()).collect();
            if n == 13 {
                // the edges: infinity, zero and one and the largest scalar, equal points
                points[1] = G1Affine::zero();
                (scalars[2], scalars[3], scalars[4]) = (0, 1, u128::MAX);
                points[6] = points[5];
                scalars[6] = scalars[5];
            }
            let ours = mul_u128(&points, &scalars).expect("the lanes are on");
            for ((p, k), got) in points.iter().zip(&scalars).zip(ours) {
                assert_eq!(got, (*p * Fr::from(*k)).into_affine(), "{k}·{p}");
            }
        }
    }
}
