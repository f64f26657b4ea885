//! The batch verifier's random weights, and their products with G1 points.
//!
//! A batch check ([`crate::verify`]) multiplies each proof's `A` and `C` by a fresh weight
//! `r_j`. The weights come in two kinds, each uniform over 2¹²⁸ distinct residues mod `q`,
//! so a batch holding an invalid proof passes with probability at most 2⁻¹²⁸ either way:
//!
//! - **plain**: a 128-bit integer, where the products run in AVX-512 IFMA lanes
//!   ([`fleetmesh_kernels::scalar`]) or on a GPU ([`MsmNtt::scale_g1`]), whose kernels take
//!   those;
//! - **split**, everywhere else: `r = r₁ + λ·r₂ mod q` with 64-bit `r₁, r₂` and `λ` the
//!   eigenvalue of BN254's G1 endomorphism `φ(x, y) = (βx, y) = λ·(x, y)`. Then
//!   `r·P = r₁·P + r₂·φ(P)`: one pass over the 64 bits of both, with `P`, `φ(P)` and
//!   `P + φ(P)` at hand — 64 doublings and ~48 mixed additions, where arkworks' GLV
//!   multiplication of a 128-bit weight runs 127 doublings and ~95 projective additions
//!   (its decomposition of any scalar has ~127-bit halves). And `Σ r_j·C_j` is one MSM of
//!   64-bit scalars over the `C_j` and `φ(C_j)`.
//!
//! Split weights are distinct: `r₁ + λr₂ ≡ r₁' + λr₂'` would give `d₁ + λd₂ ≡ 0` with
//! `|d₁|, |d₂| < 2⁶⁴` not both zero, so `d₂ ≠ 0` and `λ ≡ −d₁/d₂`; since `λ² + λ + 1 ≡ 0`
//! (a cube root of unity), `d₁² − d₁d₂ + d₂² ≡ 0 mod q`, but that integer lies in
//! `(0, 3·2¹²⁸)`, below `q`.

use std::ops::Range;

use ark_bn254::{Fr, G1Affine, G1Projective, g1::Config as G1Config};
use ark_ec::scalar_mul::glv::GLVConfig;
use ark_ec::{AdditiveGroup, CurveGroup, VariableBaseMSM};
use fleetmesh_kernels::ops::{Cpu, MsmNtt};

use crate::error::{Error, Result};

/// A batch's weights, one per proof.
pub(crate) enum Weights {
    /// 128-bit integers.
    Plain(Vec<u128>),
    /// `(r₁, r₂)` standing for `r₁ + λ·r₂`.
    Split(Vec<(u64, u64)>),
}

/// Whether this CPU multiplies plain weights in IFMA lanes.
fn lanes_active() -> bool {
    #[cfg(target_arch = "x86_64")]
    return fleetmesh_kernels::ifma::active();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

impl Weights {
    /// `n` fresh weights from the OS: plain where `on_gpu` or IFMA lanes will multiply
    /// them, else split.
    pub(crate) fn fresh(n: usize, on_gpu: bool) -> Result<Weights> {
        let mut bytes = vec![0u8; 16 * n];
        getrandom::fill(&mut bytes).map_err(|e| Error::Random(e.to_string()))?;
        let halves = bytes.chunks_exact(16).map(|c| {
            let (lo, hi) = c.split_at(8);
            (
                u64::from_le_bytes(lo.try_into().expect("8 bytes")),
                u64::from_le_bytes(hi.try_into().expect("8 bytes")),
            )
        });
        Ok(if on_gpu || lanes_active() {
            Weights::Plain(
                halves
                    .map(|(lo, hi)| u128::from(lo) | (u128::from(hi) << 64))
                    .collect(),
            )
        } else {
            Weights::Split(halves.collect())
        })
    }

    /// `r_j` as a scalar.
    pub(crate) fn scalar(&self, j: usize) -> Fr {
        match self {
            Weights::Plain(r) => Fr::from(r[j]),
            Weights::Split(r) => Fr::from(r[j].0) + G1Config::LAMBDA * Fr::from(r[j].1),
        }
    }

    /// The plain weights (for a GPU), if these are.
    pub(crate) fn plain(&self) -> Option<&[u128]> {
        match self {
            Weights::Plain(r) => Some(r),
            Weights::Split(_) => None,
        }
    }

    /// `r_j·P` for the weights `range` and their `points`, in affine coordinates, on this
    /// thread.
    pub(crate) fn scale(&self, range: Range<usize>, points: &[G1Affine]) -> Vec<G1Affine> {
        match self {
            Weights::Plain(r) => Cpu
                .scale_g1(points, &r[range])
                .expect("a weight for each point"),
            Weights::Split(r) => split_scale(points, &r[range]),
        }
    }

    /// `Σ r_j·P_j` over all the weights.
    pub(crate) fn sum(&self, points: &[G1Affine]) -> G1Projective {
        match self {
            Weights::Plain(_) => self.scale(0..points.len(), points).iter().sum(),
            Weights::Split(r) => {
                let bases: Vec<G1Affine> = points
                    .iter()
                    .copied()
                    .chain(points.iter().map(G1Config::endomorphism_affine))
                    .collect();
                let scalars: Vec<u64> =
                    r.iter().map(|w| w.0).chain(r.iter().map(|w| w.1)).collect();
                G1Projective::msm_u64(&bases, &scalars)
            }
        }
    }
}

/// `(r₁ + λr₂)·P` for each point: both halves' bits in one pass (Shamir's trick).
fn split_scale(points: &[G1Affine], weights: &[(u64, u64)]) -> Vec<G1Affine> {
    let phis: Vec<G1Affine> = points.iter().map(G1Config::endomorphism_affine).collect();
    // P + φ(P) = −λ²·P: never the identity for P ≠ O
    let both = G1Projective::normalize_batch(
        &points
            .iter()
            .zip(&phis)
            .map(|(p, phi)| *p + phi)
            .collect::<Vec<_>>(),
    );
    let out: Vec<G1Projective> = points
        .iter()
        .zip(&phis)
        .zip(&both)
        .zip(weights)
        .map(|(((p, phi), pq), &(r1, r2))| {
            let mut acc = G1Projective::ZERO;
            for i in (0..64 - (r1 | r2).leading_zeros()).rev() {
                acc.double_in_place();
                match ((r1 >> i) & 1, (r2 >> i) & 1) {
                    (1, 0) => acc += p,
                    (0, 1) => acc += phi,
                    (1, 1) => acc += pq,
                    _ => {}
                }
            }
            acc
        })
        .collect();
    G1Projective::normalize_batch(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ark_ff::{Field, UniformRand};
    use rand::SeedableRng;

    #[test]
    fn lambda_is_a_cube_root_of_unity_so_split_weights_are_distinct() {
        let l = G1Config::LAMBDA;
        assert_eq!(l.square() + l + Fr::ONE, Fr::ZERO);
    }

    #[test]
    fn split_products_and_sums_equal_arkworks_with_the_weight_as_a_scalar() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut points: Vec<G1Affine> = (0..20).map(|_| G1Affine::rand(&mut rng)).collect();
        points.push(G1Affine::identity());
        let mut pairs: Vec<(u64, u64)> = (0..points.len())
            .map(|_| (u64::rand(&mut rng), u64::rand(&mut rng)))
            .collect();
        pairs[..5].copy_from_slice(&[(0, 0), (1, 0), (0, 1), (u64::MAX, u64::MAX), (3, u64::MAX)]);
        let w = Weights::Split(pairs);
        let scaled = w.scale(0..points.len(), &points);
        for (j, (p, s)) in points.iter().zip(&scaled).enumerate() {
            assert_eq!(*s, (*p * w.scalar(j)).into_affine(), "weight {j}");
        }
        let expected: G1Projective = scaled.iter().sum();
        assert_eq!(w.sum(&points), expected);
        // a part of the batch, as a thread scales it
        assert_eq!(w.scale(5..9, &points[5..9]), scaled[5..9]);
    }

    #[test]
    fn fresh_weights_are_plain_for_a_gpu_and_differ() {
        let w = Weights::fresh(4, true).unwrap();
        let r = w.plain().expect("plain for a GPU").to_vec();
        assert!(r.windows(2).all(|p| p[0] != p[1]), "fresh each: {r:?}");
        assert_eq!(w.scalar(2), Fr::from(r[2]));
        let w = Weights::fresh(4, false).unwrap();
        assert_eq!(w.plain().is_some(), lanes_active());
    }
}
