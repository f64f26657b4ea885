//! The two operations a Groth16 prover spends its time in — multi-scalar multiplication
//! (MSM) over BN254 G1/G2 and the number-theoretic transform (NTT) over Fr — behind one
//! trait, [`MsmNtt`], so the prover does not care where they run.
//!
//! Every method has a correct CPU default (arkworks, spread over all cores by rayon); a GPU
//! backend overrides only what it accelerates, and is checked against these defaults.
//! [`Cpu`] is the reference backend and uses the defaults as they are;
//! [`crate::route::select`] turns a choice into a boxed backend.
//!
//! ```
//! use ark_ec::{CurveGroup, PrimeGroup};
//! use fleetmesh_kernels::ops::{Cpu, MsmNtt, NttDirection};
//! use ark_bn254::{Fr, G1Projective};
//!
//! let g = G1Projective::generator();
//! let bases = [g.into_affine(), (g + g).into_affine()];
//! // 3·g + 4·(2g) = 11·g
//! let r = Cpu.msm_g1(&bases, &[Fr::from(3u64), Fr::from(4u64)]).unwrap();
//! assert_eq!(r, g * Fr::from(11u64));
//!
//! let mut v = vec![Fr::from(1u64), Fr::from(2u64), Fr::from(3u64), Fr::from(4u64)];
//! let orig = v.clone();
//! Cpu.ntt(&mut v, NttDirection::Forward).unwrap();
//! Cpu.ntt(&mut v, NttDirection::Inverse).unwrap();
//! assert_eq!(v, orig);
//! ```

use ark_bn254::{Fr, G1Affine, G1Projective, G2Affine, G2Projective, g1, g2};
use ark_ec::{CurveGroup, VariableBaseMSM};
use ark_ff::FftField;
use ark_poly::{EvaluationDomain, Radix2EvaluationDomain};

use crate::fixed::{Fixed, Kept};
use crate::{Error, Result};

/// Which way an [`MsmNtt::ntt`] goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NttDirection {
    /// Coefficients → evaluations on the `n`-th roots of unity.
    Forward,
    /// Evaluations on the `n`-th roots of unity → coefficients (scaled by `1/n`).
    Inverse,
}

/// The largest NTT BN254's scalar field supports: its two-adicity is 28.
pub const MAX_NTT_LOG2: u32 = <Fr as FftField>::TWO_ADICITY;

pub(crate) fn domain(len: usize) -> Result<Radix2EvaluationDomain<Fr>> {
    if !len.is_power_of_two() || len.trailing_zeros() > MAX_NTT_LOG2 {
        return Err(Error::Arith {
            op: "ntt",
            reason: format!("length {len} is not a power of two ≤ 2^{MAX_NTT_LOG2}"),
        });
    }
    Radix2EvaluationDomain::new(len).ok_or_else(|| Error::Arith {
        op: "ntt",
        reason: format!("no radix-2 domain of size {len}"),
    })
}

pub(crate) fn same_len(op: &'static str, bases: usize, scalars: usize) -> Result<()> {
    if bases == scalars {
        Ok(())
    } else {
        Err(Error::Arith {
            op,
            reason: format!("{bases} bases but {scalars} scalars"),
        })
    }
}

/// MSM and NTT over BN254. Implementations must give bit-identical results to the
/// defaults (group elements compare equal; field elements are exact).
pub trait MsmNtt: Send + Sync {
    /// A short description for logs and benchmarks, e.g. `cpu (rayon, 16 threads)`.
    fn describe(&self) -> String;

    /// `Σ scalars[i] · bases[i]` in G1.
    ///
    /// # Errors
    /// [`Error::Arith`] when the lengths differ; a device failure for GPU backends.
    fn msm_g1(&self, bases: &[G1Affine], scalars: &[Fr]) -> Result<G1Projective> {
        same_len("msm_g1", bases.len(), scalars.len())?;
        Ok(G1Projective::msm_unchecked(bases, scalars))
    }

    /// `Σ scalars[i] · bases[i]` in G2.
    ///
    /// # Errors
    /// As [`MsmNtt::msm_g1`].
    fn msm_g2(&self, bases: &[G2Affine], scalars: &[Fr]) -> Result<G2Projective> {
        same_len("msm_g2", bases.len(), scalars.len())?;
        Ok(G2Projective::msm_unchecked(bases, scalars))
    }

    /// `weights[i] · points[i]` for each i, in affine form: the random weights a batch
    /// verifier multiplies each proof's points by (fleetmesh-prover's `verify`). The
    /// default (arkworks) runs on the calling thread: a batch verifier splits its proofs
    /// across threads itself.
    ///
    /// # Errors
    /// [`Error::Arith`] when the lengths differ; a device failure for GPU backends.
    fn scale_g1(&self, points: &[G1Affine], weights: &[u128]) -> Result<Vec<G1Affine>> {
        same_len("scale_g1", points.len(), weights.len())?;
        Ok(G1Projective::normalize_batch(
            &points
                .iter()
                .zip(weights)
                .map(|(p, r)| *p * Fr::from(*r))
                .collect::<Vec<_>>(),
        ))
    }

    /// Whether [`MsmNtt::scale_g1`] of `points` points runs on a GPU, so that a batch
    /// verifier hands it all of a batch's points in one call. Default: no.
    fn scales_on_gpu(&self, points: usize) -> bool {
        let _ = points;
        false
    }

    /// Whether its MSMs run on the CPU (so several proofs at once share the cores well),
    /// rather than on one GPU (where they are best run back to back). Default: yes.
    fn runs_on_cpu(&self) -> bool {
        true
    }

    /// Whether [`MsmNtt::msm_g1_fixed`] and [`MsmNtt::msm_g2_fixed`] use the precomputed
    /// copies for MSMs of `points` points (so building a key's is worth its memory).
    /// Default: no.
    fn uses_tables(&self, points: usize) -> bool {
        let _ = points;
        false
    }

    /// Keeps a copy of `bases` (a proving key's, fixed across proofs) in this backend's
    /// device memory for [`MsmNtt::msm_g1_fixed`], so later MSMs over them upload only
    /// their scalars; `None` where the backend keeps nothing (the CPU, the default).
    ///
    /// # Errors
    /// A device failure (e.g. out of memory).
    fn keep_g1(&self, bases: &[G1Affine]) -> Result<Option<Kept<g1::Config>>> {
        let _ = bases;
        Ok(None)
    }

    /// [`MsmNtt::keep_g1`] for G2 bases.
    ///
    /// # Errors
    /// As [`MsmNtt::keep_g1`].
    fn keep_g2(&self, bases: &[G2Affine]) -> Result<Option<Kept<g2::Config>>> {
        let _ = bases;
        Ok(None)
    }

    /// [`MsmNtt::msm_g1`] over bases that `fixed` was prepared from (a proving key's
    /// precomputed copies for the CPU, or a copy kept on this GPU). The default ignores
    /// it; what a backend did not make, or was made from other bases, is ignored too.
    ///
    /// # Errors
    /// As [`MsmNtt::msm_g1`].
    fn msm_g1_fixed(
        &self,
        bases: &[G1Affine],
        fixed: &Fixed<g1::Config>,
        scalars: &[Fr],
    ) -> Result<G1Projective> {
        let _ = fixed;
        self.msm_g1(bases, scalars)
    }

    /// [`MsmNtt::msm_g2`] with prepared bases, as [`MsmNtt::msm_g1_fixed`].
    ///
    /// # Errors
    /// As [`MsmNtt::msm_g1`].
    fn msm_g2_fixed(
        &self,
        bases: &[G2Affine],
        fixed: &Fixed<g2::Config>,
        scalars: &[Fr],
    ) -> Result<G2Projective> {
        let _ = fixed;
        self.msm_g2(bases, scalars)
    }

    /// An in-place radix-2 NTT of `values`, whose length must be a power of two no larger
    /// than 2^[`MAX_NTT_LOG2`].
    ///
    /// # Errors
    /// [`Error::Arith`] for a length that is not a supported power of two.
    fn ntt(&self, values: &mut Vec<Fr>, direction: NttDirection) -> Result<()> {
        let d = domain(values.len())?;
        match direction {
            NttDirection::Forward => d.fft_in_place(values),
            NttDirection::Inverse => d.ifft_in_place(values),
        }
        Ok(())
    }

    /// Evaluates the polynomial with coefficients `values` on the coset `shift·H` (H the
    /// `n`-th roots of unity), in place: `values[i] ← p(shift·ωⁱ)`.
    ///
    /// # Errors
    /// As [`MsmNtt::ntt`].
    fn coset_ntt(&self, values: &mut Vec<Fr>, shift: Fr) -> Result<()> {
        let d = domain(values.len())?;
        Radix2EvaluationDomain::distribute_powers_and_mul_by_const(values, shift, Fr::from(1u64));
        d.fft_in_place(values);
        Ok(())
    }

    /// A Groth16 proof's quotient term ([`QuotientMsm`]): `Σ hᵢ · bases[i]` in G1, with
    /// `h` = [`quotient`]`(a, b, shift)` — six NTTs, then the MSM over the key's H bases.
    /// The default runs those steps through this backend's own methods
    /// ([`quotient_msm_by_steps`]); a GPU backend runs them on the device with nothing
    /// copied back between them.
    ///
    /// # Errors
    /// [`Error::Arith`] for unequal lengths or a length that is not a supported power of
    /// two; a device failure for GPU backends.
    fn quotient_msm(&self, job: QuotientMsm<'_>) -> Result<G1Projective> {
        quotient_msm_by_steps(self, job)
    }
}

/// What [`MsmNtt::quotient_msm`] takes: the key's H bases (and what the backend prepared
/// from them, as for [`MsmNtt::msm_g1_fixed`]), the A and B matrices times the witness
/// evaluated on the n-point domain, and the coset's shift.
#[derive(Debug)]
pub struct QuotientMsm<'a> {
    /// The proving key's H bases, `n` of them.
    pub bases: &'a [G1Affine],
    /// What this backend prepared from `bases`, if anything.
    pub fixed: Option<&'a Fixed<g1::Config>>,
    /// A times the witness on the domain.
    pub a: Vec<Fr>,
    /// B times the witness on the domain.
    pub b: Vec<Fr>,
    /// The coset `shift·H` the quotient is evaluated on.
    pub shift: Fr,
}

/// The QAP quotient's evaluations on the coset `shift·H` from `a` and `b`, the A and B
/// matrices times the witness evaluated on H (n points): with `c = a∘b`, each of `a`, `b`,
/// `c` is interpolated ([`MsmNtt::ntt`], inverse) and evaluated on the coset
/// ([`MsmNtt::coset_ntt`]), then `h = a·b − c` pointwise.
///
/// # Errors
/// [`Error::Arith`] for unequal lengths or a length that is not a supported power of two.
pub fn quotient<B: MsmNtt + ?Sized>(
    backend: &B,
    mut a: Vec<Fr>,
    mut b: Vec<Fr>,
    shift: Fr,
) -> Result<Vec<Fr>> {
    same_len("quotient", a.len(), b.len())?;
    let mut c: Vec<Fr> = a.iter().zip(&b).map(|(x, y)| *x * y).collect();
    for v in [&mut a, &mut b, &mut c] {
        backend.ntt(v, NttDirection::Inverse)?;
        backend.coset_ntt(v, shift)?;
    }
    Ok(a.iter()
        .zip(&b)
        .zip(&c)
        .map(|((x, y), z)| *x * y - z)
        .collect())
}

/// [`MsmNtt::quotient_msm`] one step at a time through `backend`'s methods: [`quotient`],
/// then [`MsmNtt::msm_g1_fixed`] (or [`MsmNtt::msm_g1`] without `job.fixed`).
///
/// # Errors
/// As [`MsmNtt::quotient_msm`].
pub fn quotient_msm_by_steps<B: MsmNtt + ?Sized>(
    backend: &B,
    job: QuotientMsm<'_>,
) -> Result<G1Projective> {
    let h = quotient(backend, job.a, job.b, job.shift)?;
    match job.fixed {
        Some(f) => backend.msm_g1_fixed(job.bases, f, &h),
        None => backend.msm_g1(job.bases, &h),
    }
}

/// The CPU backend: a radix-2 NTT ([`crate::ntt`] in IFMA lanes where the CPU has them,
/// else arkworks') and a batch-affine Pippenger MSM ([`crate::msm`], with a proving key's
/// precomputed copies when it has them), on all cores. The trait's default methods (plain arkworks) are the
/// reference it is tested against.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

impl MsmNtt for Cpu {
    fn describe(&self) -> String {
        format!("cpu ({} threads)", rayon::current_num_threads())
    }

    fn msm_g1(&self, bases: &[G1Affine], scalars: &[Fr]) -> Result<G1Projective> {
        same_len("msm_g1", bases.len(), scalars.len())?;
        Ok(crate::msm::msm(bases, scalars))
    }

    fn msm_g2(&self, bases: &[G2Affine], scalars: &[Fr]) -> Result<G2Projective> {
        same_len("msm_g2", bases.len(), scalars.len())?;
        Ok(crate::msm::msm(bases, scalars))
    }

    fn uses_tables(&self, _points: usize) -> bool {
        true
    }

    /// Eight at a time in IFMA lanes where the CPU has them ([`crate::scalar`]), else
    /// arkworks'; on the calling thread.
    fn scale_g1(&self, points: &[G1Affine], weights: &[u128]) -> Result<Vec<G1Affine>> {
        same_len("scale_g1", points.len(), weights.len())?;
        match lane_scale(points, weights) {
            Some(scaled) => Ok(scaled),
            None => Reference.scale_g1(points, weights),
        }
    }

    /// In IFMA lanes where the CPU has them ([`crate::ntt`]), else arkworks'.
    fn ntt(&self, values: &mut Vec<Fr>, direction: NttDirection) -> Result<()> {
        let d = domain(values.len())?;
        let (omega, scale) = match direction {
            NttDirection::Forward => (d.group_gen, None),
            NttDirection::Inverse => (d.group_gen_inv, Some(d.size_inv)),
        };
        if lane_ntt(values, omega, None, scale) {
            Ok(())
        } else {
            Reference.ntt(values, direction)
        }
    }

    /// In IFMA lanes where the CPU has them ([`crate::ntt`]), else arkworks'.
    fn coset_ntt(&self, values: &mut Vec<Fr>, shift: Fr) -> Result<()> {
        let d = domain(values.len())?;
        if lane_ntt(values, d.group_gen, Some(shift), None) {
            Ok(())
        } else {
            Reference.coset_ntt(values, shift)
        }
    }

    fn msm_g1_fixed(
        &self,
        bases: &[G1Affine],
        fixed: &Fixed<g1::Config>,
        scalars: &[Fr],
    ) -> Result<G1Projective> {
        same_len("msm_g1", bases.len(), scalars.len())?;
        Ok(match fixed.shifted() {
            Some(shifted) => crate::msm::msm_shifted(bases, shifted, scalars),
            None => crate::msm::msm(bases, scalars),
        })
    }

    fn msm_g2_fixed(
        &self,
        bases: &[G2Affine],
        fixed: &Fixed<g2::Config>,
        scalars: &[Fr],
    ) -> Result<G2Projective> {
        same_len("msm_g2", bases.len(), scalars.len())?;
        Ok(match fixed.shifted() {
            Some(shifted) => crate::msm::msm_shifted(bases, shifted, scalars),
            None => crate::msm::msm(bases, scalars),
        })
    }
}

#[cfg(target_arch = "x86_64")]
fn lane_ntt(values: &mut [Fr], omega: Fr, shift: Option<Fr>, scale: Option<Fr>) -> bool {
    crate::ntt::ntt(values, omega, shift, scale)
}

#[cfg(target_arch = "x86_64")]
fn lane_scale(points: &[G1Affine], weights: &[u128]) -> Option<Vec<G1Affine>> {
    crate::scalar::mul_u128(points, weights)
}

#[cfg(not(target_arch = "x86_64"))]
fn lane_scale(_: &[G1Affine], _: &[u128]) -> Option<Vec<G1Affine>> {
    None
}

#[cfg(not(target_arch = "x86_64"))]
fn lane_ntt(_: &mut [Fr], _: Fr, _: Option<Fr>, _: Option<Fr>) -> bool {
    false
}

/// The arkworks reference for every operation (the trait's defaults, unchanged): what the
/// other backends are compared with in tests and benchmarks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reference;

impl MsmNtt for Reference {
    fn describe(&self) -> String {
        format!(
            "arkworks reference ({} threads)",
            rayon::current_num_threads()
        )
    }
}
