//! The Groth16 prover: a full witness and a snarkjs proving key in, a proof out.
//!
//! The pipeline is witness → the A and B evaluations ([`crate::qap::evaluations`]) → five
//! MSMs (A and B₁ in G1, B₂ in G2, C's private-wire term in G1) and the quotient's H term
//! ([`MsmNtt::quotient_msm`]: six NTTs, then an MSM over the H bases; on a GPU all on the
//! device), all through an [`MsmNtt`] backend so a GPU can take them. Each phase is timed
//! at DEBUG level (`prove.phase`), so `RUST_LOG=fleetmesh_prover=debug` shows where the
//! time goes, and into the `fleetmesh_prover_phase_seconds{phase}` histogram
//! (`witness_map`: the evaluations; `msm_a_b1`, `msm_b2`, `msm_c_h`: the C MSM and the
//! quotient, NTTs included; `self_check`) of whatever `metrics` recorder the program
//! installed.
//!
//! With a key's prepared [`KeyTables`] (see [`crate::tables`]: the CPU's precomputed
//! copies, or bases kept on a GPU) the backend's MSMs use them; the proof is the same with
//! or without.
//!
//! The proof is checked against the key's own verifying key before it is returned: a
//! witness that does not satisfy the circuit (which the key alone cannot detect earlier)
//! is reported as [`Error::Witness`] instead of handing out an invalid proof.

use std::time::Instant;

use ark_bn254::{Bn254, Fr, G1Affine, G1Projective, G2Projective, g1};
use ark_ec::CurveGroup;
use ark_ff::{One, UniformRand};
use ark_groth16::Proof;

use fleetmesh_kernels::fixed::Fixed;
use fleetmesh_kernels::ops::QuotientMsm;

use crate::tables::KeyTables;
use crate::verify::{PreparedVk, verify};
use crate::zkey::ProvingKey;
use crate::{Error, MsmNtt, Result, qap};

/// A proof with the public signals it proves (`witness[1..=n_public]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Proven {
    /// The proof.
    pub proof: Proof<Bn254>,
    /// The public signals, outputs first, as snarkjs's `public.json` lists them.
    pub public: Vec<Fr>,
}

/// Runs one phase of a proof, timed: a DEBUG event (`prove.phase`) and the
/// `fleetmesh_prover_phase_seconds{phase}` histogram.
fn phase<T>(name: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let out = f()?;
    let secs = t.elapsed().as_secs_f64();
    tracing::debug!(target: "prove.phase", phase = name, ms = secs * 1e3);
    metrics::histogram!("fleetmesh_prover_phase_seconds", "phase" => name).record(secs);
    Ok(out)
}

/// Proves with a fresh random `r, s` from the operating system.
///
/// # Errors
/// [`Error::Witness`] for a witness of the wrong length, whose wire 0 is not 1, or that
/// does not satisfy the circuit; [`Error::Random`]; a backend failure.
pub fn prove(pk: &ProvingKey, witness: &[Fr], backend: &dyn MsmNtt) -> Result<Proven> {
    prove_checked(pk, None, &PreparedVk::new(&pk.vk), witness, backend)
}

/// [`prove`] with the key's verifying key already prepared (`pvk` must be
/// `PreparedVk::new(&pk.vk)`) and its tables if it has them (made by
/// [`KeyTables::build`] from this key): what a service proving many times with one key
/// calls, so the self-check does not prepare the key (a pairing) for every proof.
///
/// # Errors
/// As [`prove`].
pub fn prove_checked(
    pk: &ProvingKey,
    tables: Option<&KeyTables>,
    pvk: &PreparedVk,
    witness: &[Fr],
    backend: &dyn MsmNtt,
) -> Result<Proven> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| Error::Random(e.to_string()))?;
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::from_seed(seed);
    let r = Fr::rand(&mut rng);
    let s = Fr::rand(&mut rng);
    let proven = prove_with(pk, tables, witness, backend, r, s)?;
    if !phase("self_check", || verify(pvk, &proven.proof, &proven.public))? {
        return Err(Error::Witness(
            "the witness does not satisfy the circuit (the proof does not verify)".into(),
        ));
    }
    Ok(proven)
}

/// Proves several witnesses of one key together, each with fresh random `r, s`, and
/// checks all the proofs at once with one batch verification (bisected, so a witness
/// that does not satisfy the circuit is named by its own [`Error::Witness`] while the
/// others' proofs stand). On a backend whose MSMs run on the CPU
/// ([`MsmNtt::runs_on_cpu`]) the proofs run side by side, so one proof's serial stretches
/// (window combination, the NTTs' bookkeeping) overlap another's parallel work; on a GPU
/// they run back to back over the key's kept bases. `pvk` and `tables` as for
/// [`prove_checked`].
///
/// # Errors
/// The outer error only for [`Error::Random`]; each witness gets its own result.
pub fn prove_batch(
    pk: &ProvingKey,
    tables: Option<&KeyTables>,
    pvk: &PreparedVk,
    witnesses: &[Vec<Fr>],
    backend: &dyn MsmNtt,
) -> Result<Vec<Result<Proven>>> {
    use rayon::prelude::*;
    let mut rng = {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| Error::Random(e.to_string()))?;
        <rand::rngs::StdRng as rand::SeedableRng>::from_seed(seed)
    };
    let blinding: Vec<(Fr, Fr)> = witnesses
        .iter()
        .map(|_| (Fr::rand(&mut rng), Fr::rand(&mut rng)))
        .collect();
    let one = |(w, (r, s)): (&Vec<Fr>, &(Fr, Fr))| prove_with(pk, tables, w, backend, *r, *s);
    let mut out: Vec<Result<Proven>> = if backend.runs_on_cpu() {
        witnesses.par_iter().zip(&blinding).map(one).collect()
    } else {
        witnesses.iter().zip(&blinding).map(one).collect()
    };
    let made: Vec<usize> = (0..out.len()).filter(|&i| out[i].is_ok()).collect();
    let items: Vec<crate::verify::Item> = made
        .iter()
        .filter_map(|&i| out[i].as_ref().ok())
        .map(|p| (p.proof.clone(), p.public.clone()))
        .collect();
    let valid = phase("self_check", || crate::verify::batch_verify(pvk, &items))?;
    for (i, ok) in made.into_iter().zip(valid) {
        if !ok {
            out[i] = Err(Error::Witness(
                "the witness does not satisfy the circuit (the proof does not verify)".into(),
            ));
        }
    }
    Ok(out)
}

/// Proves with the given blinding `r, s` (and the key's tables, if given) and does not
/// check the result. Deterministic: for tests and for comparing backends. Use [`prove`]
/// otherwise.
///
/// # Errors
/// As [`prove`], except that an unsatisfying witness is not detected.
pub fn prove_with(
    pk: &ProvingKey,
    tables: Option<&KeyTables>,
    witness: &[Fr],
    backend: &dyn MsmNtt,
    r: Fr,
    s: Fr,
) -> Result<Proven> {
    if witness.len() != pk.n_vars {
        return Err(Error::Witness(format!(
            "the witness has {} values, the proving key {} wires",
            witness.len(),
            pk.n_vars
        )));
    }
    if !witness[0].is_one() {
        return Err(Error::Witness(
            "witness[0] (the constant wire) is not 1".into(),
        ));
    }
    let (ea, eb) = phase("witness_map", || {
        Ok(qap::evaluations(&pk.coeffs, witness, pk.domain_size))
    })?;
    let private = &witness[pk.n_public + 1..];
    let g1 = |bases: &[G1Affine], fixed: Option<&Fixed<g1::Config>>, scalars: &[Fr]| match fixed {
        Some(f) => backend.msm_g1_fixed(bases, f, scalars),
        None => backend.msm_g1(bases, scalars),
    };
    let (a, b1) = phase("msm_a_b1", || {
        Ok((
            g1(&pk.a, tables.and_then(|t| t.a.as_ref()), witness)?,
            g1(&pk.b_g1, tables.and_then(|t| t.b_g1.as_ref()), witness)?,
        ))
    })?;
    let b2 = phase("msm_b2", || {
        Ok(match tables.and_then(|t| t.b_g2.as_ref()) {
            Some(f) => backend.msm_g2_fixed(&pk.b_g2, f, witness)?,
            None => backend.msm_g2(&pk.b_g2, witness)?,
        })
    })?;
    let (c, hz) = phase("msm_c_h", || {
        let h_fixed = tables.and_then(|t| t.h.as_ref());
        let shift = qap::odd_coset_shift(pk.domain_size);
        Ok((
            g1(&pk.c, tables.and_then(|t| t.c.as_ref()), private)?,
            backend.quotient_msm(QuotientMsm {
                bases: &pk.h,
                fixed: h_fixed,
                a: ea,
                b: eb,
                shift,
            })?,
        ))
    })?;

    let delta1 = G1Projective::from(pk.delta_g1);
    let pi_a = G1Projective::from(pk.vk.alpha_g1) + a + delta1 * r;
    let pi_b = G2Projective::from(pk.vk.beta_g2) + b2 + G2Projective::from(pk.vk.delta_g2) * s;
    let b1 = G1Projective::from(pk.beta_g1) + b1 + delta1 * s;
    let pi_c = c + hz + pi_a * s + b1 * r - delta1 * (r * s);
    Ok(Proven {
        proof: Proof {
            a: pi_a.into_affine(),
            b: pi_b.into_affine(),
            c: pi_c.into_affine(),
        },
        public: witness[1..=pk.n_public].to_vec(),
    })
}
