//! A circuit-specific Groth16 setup from an `.r1cs`, for development only.
//!
//! **Not for production.** One party draws τ, α, β, γ, δ from the operating system's
//! random source and forgets them; whoever learns them can forge proofs. A production key
//! comes from a powers-of-tau ceremony plus a phase-2 contribution (`snarkjs powersoftau`,
//! `snarkjs zkey contribute`); this exists so developers and tests can make a key in
//! seconds. The key it writes is an ordinary snarkjs `.zkey` that snarkjs can prove with.

use std::time::Instant;

use ark_bn254::{Fr, G1Projective, G2Projective};
use ark_ec::PrimeGroup;
use ark_ec::scalar_mul::BatchMulPreprocessing;
use ark_ff::{Field, UniformRand, Zero};
use ark_groth16::VerifyingKey;
use rand::{RngCore, SeedableRng};

use crate::r1cs::R1cs;
use crate::zkey::{Coeff, Matrix, ProvingKey};
use crate::{Error, Result, qap};

/// Runs the setup with secrets from the operating system's random source.
///
/// # Errors
/// [`Error::Setup`] for a circuit too large for BN254's NTT domain; [`Error::Random`].
pub fn setup(r1cs: &R1cs) -> Result<ProvingKey> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| Error::Random(e.to_string()))?;
    setup_with_rng(r1cs, &mut rand::rngs::StdRng::from_seed(seed))
}

/// Runs the setup with secrets drawn from `rng` (deterministic for a seeded rng: tests).
///
/// # Errors
/// As [`setup`].
pub fn setup_with_rng(r1cs: &R1cs, rng: &mut impl RngCore) -> Result<ProvingKey> {
    let t0 = Instant::now();
    let n_vars = r1cs.n_wires as usize;
    let n_public = r1cs.n_public();
    let n_constraints = r1cs.constraints.len();
    let n = qap::domain_size(n_constraints, n_public)?;

    // The A and B entries as snarkjs lays them out: the constraints' A entries, then the
    // public-binding rows, then the B entries.
    let mut coeffs = Vec::new();
    for (i, c) in r1cs.constraints.iter().enumerate() {
        for (s, v) in &c.a {
            coeffs.push(coeff(Matrix::A, i, *s, *v));
        }
    }
    for s in 0..=n_public {
        coeffs.push(coeff(
            Matrix::A,
            n_constraints + s,
            s as u32,
            Fr::from(1u64),
        ));
    }
    for (i, c) in r1cs.constraints.iter().enumerate() {
        for (s, v) in &c.b {
            coeffs.push(coeff(Matrix::B, i, *s, *v));
        }
    }

    let (tau, lag) = loop {
        let tau = Fr::rand(rng);
        if let Ok(l) = qap::lagrange_at(tau, n) {
            break (tau, l);
        }
    };
    let alpha = Fr::rand(rng);
    let beta = Fr::rand(rng);
    let gamma = Fr::rand(rng);
    let delta = Fr::rand(rng);
    let gamma_inv = gamma
        .inverse()
        .ok_or_else(|| Error::Setup("γ = 0".into()))?;
    let delta_inv = delta
        .inverse()
        .ok_or_else(|| Error::Setup("δ = 0".into()))?;

    // u_j(τ), v_j(τ), w_j(τ) per wire.
    let mut u = vec![Fr::zero(); n_vars];
    let mut v = vec![Fr::zero(); n_vars];
    let mut w = vec![Fr::zero(); n_vars];
    for (i, c) in r1cs.constraints.iter().enumerate() {
        for (poly, lc) in [(&mut u, &c.a), (&mut v, &c.b), (&mut w, &c.c)] {
            for (s, val) in lc {
                poly[*s as usize] += lag[i] * val;
            }
        }
    }
    for s in 0..=n_public {
        u[s] += lag[n_constraints + s];
    }
    let combo = |j: usize| beta * u[j] + alpha * v[j] + w[j];
    let ic: Vec<Fr> = (0..=n_public).map(|j| combo(j) * gamma_inv).collect();
    let c: Vec<Fr> = (n_public + 1..n_vars)
        .map(|j| combo(j) * delta_inv)
        .collect();
    let lag2 = qap::lagrange_at(tau, 2 * n)?;
    let h: Vec<Fr> = lag2
        .iter()
        .skip(1)
        .step_by(2)
        .map(|l| *l * delta_inv)
        .collect();
    tracing::debug!(target: "setup.phase", phase = "scalars", ms = t0.elapsed().as_secs_f64() * 1e3);

    let t1 = Instant::now();
    let g1 = G1Projective::generator();
    let g2 = G2Projective::generator();
    let total = n_vars * 3 + n + 8;
    let t1_table = BatchMulPreprocessing::new(g1, total);
    let t2_table = BatchMulPreprocessing::new(g2, n_vars + 4);
    let g1s = |s: &[Fr]| t1_table.batch_mul(s);
    let b_g2 = t2_table.batch_mul(&v);
    let e2 = t2_table.batch_mul(&[beta, gamma, delta]);
    let e1 = g1s(&[alpha, beta, delta]);
    let pk = ProvingKey {
        vk: VerifyingKey {
            alpha_g1: e1[0],
            beta_g2: e2[0],
            gamma_g2: e2[1],
            delta_g2: e2[2],
            gamma_abc_g1: g1s(&ic),
        },
        beta_g1: e1[1],
        delta_g1: e1[2],
        n_vars,
        n_public,
        domain_size: n,
        coeffs,
        a: g1s(&u),
        b_g1: g1s(&v),
        b_g2,
        c: g1s(&c),
        h: g1s(&h),
    };
    tracing::debug!(target: "setup.phase", phase = "points", ms = t1.elapsed().as_secs_f64() * 1e3);
    Ok(pk)
}

fn coeff(matrix: Matrix, constraint: usize, signal: u32, value: Fr) -> Coeff {
    Coeff {
        matrix,
        constraint: constraint as u32,
        signal,
        value,
    }
}
