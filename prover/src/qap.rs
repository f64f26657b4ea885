//! The circom (snarkjs) R1CS→QAP reduction. Proofs made with libsnark's reduction (the
//! arkworks default) do not verify against snarkjs keys, so everything here follows
//! snarkjs.
//!
//! The domain `H` has `n = domainSize` points, the smallest power of two holding the
//! constraints plus one extra A-row per public signal and the constant wire
//! (`A[nConstraints + i][i] = 1` for `i in 0..=nPublic`), which binds the public inputs.
//!
//! The prover evaluates `A·w` and `B·w` on `H`, takes `C·w = (A·w)∘(B·w)` there (valid for
//! a satisfying witness), moves all three to the odd coset `g·H` (`g` a primitive `2n`-th
//! root of unity) by an inverse NTT and a coset NTT, and multiplies pointwise:
//! `h_i = A(gωⁱ)·B(gωⁱ) − C(gωⁱ)`. These `h_i` are scalars for the zkey's H bases, which
//! are `L_{2i+1}(τ)/δ` — the odd-indexed Lagrange polynomials of the `2n`-point domain.
//! Since `Z(x) = xⁿ − 1` is `−2` on the odd coset, the factor is folded into those bases.

use ark_bn254::Fr;
use ark_ff::{FftField, Field, One, Zero};

use crate::zkey::{Coeff, Matrix};
use crate::{Error, MsmNtt, Result};

/// Largest supported domain: BN254's Fr has two-adicity 28 and the reduction needs `2n`.
pub const MAX_LOG2: u32 = <Fr as FftField>::TWO_ADICITY - 1;

/// The domain size snarkjs picks for `n_constraints` constraints and `n_public` public
/// signals.
///
/// # Errors
/// [`Error::Setup`] when the circuit needs more than 2^[`MAX_LOG2`] rows.
pub fn domain_size(n_constraints: usize, n_public: usize) -> Result<usize> {
    let rows = n_constraints + n_public + 1;
    let n = rows.next_power_of_two();
    if n.trailing_zeros() > MAX_LOG2 {
        return Err(Error::Setup(format!(
            "{rows} rows need a domain of 2^{}, BN254 supports up to 2^{MAX_LOG2}",
            n.trailing_zeros()
        )));
    }
    Ok(n)
}

/// `g`, the primitive `2n`-th root of unity that shifts `H` to its odd coset.
pub fn odd_coset_shift(n: usize) -> Fr {
    Fr::get_root_of_unity(2 * n as u64).expect("2n divides 2^28, checked by domain_size")
}

/// The A and B matrices times the witness, evaluated on the `n`-point domain: what
/// [`fleetmesh_kernels::ops::quotient`] (and a backend's
/// [`MsmNtt::quotient_msm`](fleetmesh_kernels::MsmNtt::quotient_msm)) takes.
///
/// `witness` is the full assignment (`witness[0] = 1`); `coeffs` the A and B entries.
#[must_use]
pub fn evaluations(coeffs: &[Coeff], witness: &[Fr], n: usize) -> (Vec<Fr>, Vec<Fr>) {
    let mut a = vec![Fr::zero(); n];
    let mut b = vec![Fr::zero(); n];
    for c in coeffs {
        let target = match c.matrix {
            Matrix::A => &mut a,
            Matrix::B => &mut b,
        };
        let w = witness[c.signal as usize];
        if !w.is_zero() {
            target[c.constraint as usize] += c.value * w;
        }
    }
    (a, b)
}

/// The prover's half of the reduction: the `n` scalars for the H bases
/// ([`evaluations`], then the six NTTs of [`fleetmesh_kernels::ops::quotient`] on
/// `backend`).
///
/// # Errors
/// A backend failure.
pub fn witness_map(
    backend: &dyn MsmNtt,
    coeffs: &[Coeff],
    witness: &[Fr],
    n: usize,
) -> Result<Vec<Fr>> {
    let (a, b) = evaluations(coeffs, witness, n);
    Ok(fleetmesh_kernels::ops::quotient(
        backend,
        a,
        b,
        odd_coset_shift(n),
    )?)
}

/// `L_j(τ)` for every `j` on the `m`-point radix-2 domain:
/// `L_j(τ) = (τᵐ − 1)/m · ωʲ/(τ − ωʲ)`.
///
/// # Errors
/// [`Error::Setup`] if `τ` is a point of the domain (probability ~m/r; the caller draws
/// again).
pub fn lagrange_at(tau: Fr, m: usize) -> Result<Vec<Fr>> {
    let omega = Fr::get_root_of_unity(m as u64)
        .ok_or_else(|| Error::Setup(format!("no {m}-point radix-2 domain")))?;
    let z = tau.pow([m as u64]) - Fr::one();
    if z.is_zero() {
        return Err(Error::Setup("τ lies on the evaluation domain".into()));
    }
    let scale = z * Fr::from(m as u64).inverse().expect("m < r");
    let mut powers = Vec::with_capacity(m);
    let mut w = Fr::one();
    for _ in 0..m {
        powers.push(w);
        w *= omega;
    }
    let mut denom: Vec<Fr> = powers.iter().map(|w| tau - w).collect();
    ark_ff::batch_inversion(&mut denom);
    Ok(powers
        .iter()
        .zip(denom)
        .map(|(w, d)| scale * w * d)
        .collect())
}
