//! Groth16 verification on BN254: one proof with a prepared key, and batches.
//!
//! A batch of N proofs under one key is checked by a random linear combination: with fresh
//! random weights r_j (from the OS, uniform over 2¹²⁸ distinct values; see `weights.rs`
//! for their two kinds),
//!
//! ```text
//! Π_j e(r_j·A_j, B_j) · e(−Σ_j r_j·L_j, γ) · e(−Σ_j r_j·C_j, δ) = e(α, β)^(Σ_j r_j)
//! ```
//!
//! where L_j = IC_0 + Σ_i x_{j,i}·IC_i. That is one multi-Miller loop of N + 2 pairs and one
//! final exponentiation, instead of N of each; Σ_j r_j·L_j is a single MSM over the key's
//! IC points. Fresh weights matter: with equal (or predictable) weights two invalid proofs
//! can be made to cancel. When a batch fails, it is split in halves and each half checked
//! again, down to single proofs, so the bad ones are named and the good ones still pass.
//!
//! Where the CPU has AVX-512 IFMA, the weights' scalar multiplications and the proofs'
//! Miller loop run eight at a time in vector lanes ([`fleetmesh_kernels::scalar`],
//! [`fleetmesh_kernels::miller`]), computing the same values as arkworks' code, which
//! runs elsewhere. [`batch_verify_on`] takes a backend: where its
//! [`MsmNtt::scales_on_gpu`] says so for the batch (an explicit GPU choice, or `auto`
//! above its measured size), all of the batch's weight products r_j·A_j and r_j·C_j are
//! made on that GPU in one call, and the Σ r·L MSM runs on the backend too; the Miller
//! loops and the final exponentiation stay on the CPU. Elsewhere each weight is
//! `r₁ + λ·r₂` with 64-bit halves and `λ` the eigenvalue of G1's endomorphism, so its
//! products take half the doublings. The soundness bound is the same for every path: a
//! batch holding an invalid proof passes with probability at most 2⁻¹²⁸ per check, over
//! the fresh weights.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::Result;
use crate::snarkjs::check_public_count;
use crate::weights::Weights;
use ark_bn254::{Bn254, Fq12, Fr, G1Affine, G1Projective, G2Affine};
use ark_ec::pairing::{MillerLoopOutput, Pairing, PairingOutput};
use ark_ec::{CurveGroup, VariableBaseMSM};

use ark_groth16::{Groth16, PreparedVerifyingKey, Proof, VerifyingKey, prepare_verifying_key};
use fleetmesh_kernels::ops::{Cpu, MsmNtt};

/// A verifying key prepared for repeated verification.
#[derive(Clone)]
pub struct PreparedVk {
    pvk: PreparedVerifyingKey<Bn254>,
}

impl std::fmt::Debug for PreparedVk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedVk")
            .field("n_public", &self.n_public())
            .finish()
    }
}

impl PreparedVk {
    /// Prepares `vk` (precomputes e(α, β) and the G2 lines of −γ and −δ).
    pub fn new(vk: &VerifyingKey<Bn254>) -> PreparedVk {
        PreparedVk {
            pvk: prepare_verifying_key(vk),
        }
    }

    /// The number of public inputs the key takes.
    pub fn n_public(&self) -> usize {
        self.pvk.vk.gamma_abc_g1.len().saturating_sub(1)
    }

    /// The key.
    pub fn vk(&self) -> &VerifyingKey<Bn254> {
        &self.pvk.vk
    }
}

/// Verifies one proof.
///
/// # Errors
/// [`Error::PublicCount`] when `public` does not have the key's number of inputs.
pub fn verify(pvk: &PreparedVk, proof: &Proof<Bn254>, public: &[Fr]) -> Result<bool> {
    check_public_count(pvk.vk(), public)?;
    Ok(Groth16::<Bn254>::verify_proof(&pvk.pvk, proof, public).unwrap_or(false))
}

/// Threads a batch check's Miller loop may use (the chunks it is cut into, each run by one
/// of rayon's workers): `FLEETMESH_VERIFY_THREADS` if set (≥ 1), else every core.
fn verify_threads() -> usize {
    std::env::var("FLEETMESH_VERIFY_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n >= 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Fewest proofs worth a thread of their own in a batch check.
const MIN_PAIRS_PER_THREAD: usize = 8;

/// One proof with its public inputs.
pub type Item = (Proof<Bn254>, Vec<Fr>);

/// The proofs' Miller loop in AVX-512 IFMA lanes where this CPU has them (`None` where it
/// has not: arkworks' code runs then). Both give arkworks' values.
#[cfg(target_arch = "x86_64")]
mod lanes {
    use ark_bn254::{Fq12, G1Affine, G2Affine};

    /// The proofs' multi-Miller loop ([`fleetmesh_kernels::miller`]).
    pub(super) fn miller_loop(pairs: &[(G1Affine, G2Affine)]) -> Option<Fq12> {
        fleetmesh_kernels::miller::multi_miller_loop(pairs)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod lanes {
    use ark_bn254::{Fq12, G1Affine, G2Affine};

    pub(super) fn miller_loop(_: &[(G1Affine, G2Affine)]) -> Option<Fq12> {
        None
    }
}

/// The random-linear-combination check of `items` (all with the right input count), the
/// weights' products on `backend`'s GPU where it takes a batch this size.
fn combined_check(pvk: &PreparedVk, items: &[&Item], backend: &dyn MsmNtt) -> Result<bool> {
    let vk = pvk.vk();
    if vk.gamma_abc_g1.is_empty() {
        return Ok(false); // not a usable key (the parser never builds one)
    }
    let on_gpu = backend.scales_on_gpu(2 * items.len());
    let w = Weights::fresh(items.len(), on_gpu)?;
    // Σ_j r_j·L_j = (Σ_j r_j)·IC_0 + Σ_i (Σ_j r_j·x_{j,i})·IC_i: one MSM over IC.
    let mut ic_scalars = vec![Fr::from(0u8); vk.gamma_abc_g1.len()];
    for (j, (_, public)) in items.iter().enumerate() {
        let rj = w.scalar(j);
        ic_scalars[0] += rj;
        for (s, x) in ic_scalars[1..].iter_mut().zip(public) {
            *s += rj * x;
        }
    }
    let sum_r = ic_scalars[0];
    let acc_l = if on_gpu {
        backend.msm_g1(&vk.gamma_abc_g1, &ic_scalars)?
    } else {
        G1Projective::msm(&vk.gamma_abc_g1, &ic_scalars).expect("equal lengths")
    };
    // Σ_j r_j·C_j: all at once on the GPU together with the r_j·A_j, else on the CPU
    // (each product eight at a time in lanes, or one MSM of the split weights' halves)
    let (scaled_a, acc_c): (Option<Vec<G1Affine>>, G1Projective) = match w.plain() {
        Some(r) if on_gpu => {
            let points: Vec<G1Affine> = items
                .iter()
                .map(|(p, _)| p.a)
                .chain(items.iter().map(|(p, _)| p.c))
                .collect();
            let weights: Vec<u128> = r.iter().chain(r).copied().collect();
            let mut scaled = backend.scale_g1(&points, &weights)?;
            let cs = scaled.split_off(items.len());
            (Some(scaled), cs.iter().sum())
        }
        _ => {
            let cs: Vec<G1Affine> = items.iter().map(|(p, _)| p.c).collect();
            (None, w.sum(&cs))
        }
    };
    // The proofs' pairs are split across the cores: each chunk's A_j are scaled (unless
    // the GPU did) and its pairs' multi-Miller loop run (in IFMA lanes where the CPU has
    // them, else with affine lines, `pairs.rs`); the partial results multiply together
    // (the Miller loop is a product), and one final exponentiation follows. On rayon's
    // workers, which arkworks' parallel loops wake anyway: threads of our own competed
    // with them for the cores.
    let threads = verify_threads()
        .min(items.len().div_ceil(MIN_PAIRS_PER_THREAD))
        .max(1);
    let chunk = items.len().div_ceil(threads);
    let miller = |t: usize, its: &[&Item]| -> Fq12 {
        let range = t * chunk..t * chunk + its.len();
        let scaled = match scaled_a.as_deref() {
            Some(all) => all[range].to_vec(),
            None => w.scale(range, &its.iter().map(|(p, _)| p.a).collect::<Vec<_>>()),
        };
        let pairs: Vec<(G1Affine, G2Affine)> = scaled
            .into_iter()
            .zip(its.iter().map(|(p, _)| p.b))
            .collect();
        lanes::miller_loop(&pairs).unwrap_or_else(|| crate::pairs::multi_miller_loop(&pairs))
    };
    let chunks: Vec<&[&Item]> = items.chunks(chunk).collect();
    // Every worker is asked to claim chunks until none are left (left to work stealing,
    // one worker sometimes ran both halves of a two-core machine's batch); a worker busy
    // with other work when the call comes finds them taken and returns at once.
    let next = AtomicUsize::new(0);
    let partials: Vec<Fq12> = rayon::broadcast(|_| {
        let mut acc = Fq12::from(1u8);
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            let Some(its) = chunks.get(t) else {
                return acc;
            };
            acc *= miller(t, its);
        }
    });
    let key_pairs = Bn254::multi_miller_loop(
        [acc_l.into_affine(), acc_c.into_affine()],
        [
            pvk.pvk.gamma_g2_neg_pc.clone(),
            pvk.pvk.delta_g2_neg_pc.clone(),
        ],
    );
    let product = partials.into_iter().fold(key_pairs.0, |acc, f| acc * f);
    let Some(PairingOutput(lhs)) = Bn254::final_exponentiation(MillerLoopOutput(product)) else {
        return Ok(false);
    };
    // e(α, β)^(Σ r_j) in GT, by cyclotomic exponentiation.
    Ok(PairingOutput(lhs) == PairingOutput::<Bn254>(pvk.pvk.alpha_g1_beta_g2) * sum_r)
}

fn bisect(
    pvk: &PreparedVk,
    items: &[Item],
    idx: &[usize],
    out: &mut [bool],
    backend: &dyn MsmNtt,
) -> Result<()> {
    if idx.len() == 1 {
        let (proof, public) = &items[idx[0]];
        out[idx[0]] = verify(pvk, proof, public)?;
        return Ok(());
    }
    let refs: Vec<&Item> = idx.iter().map(|&i| &items[i]).collect();
    if combined_check(pvk, &refs, backend)? {
        for &i in idx {
            out[i] = true;
        }
        return Ok(());
    }
    let (left, right) = idx.split_at(idx.len() / 2);
    bisect(pvk, items, left, out, backend)?;
    bisect(pvk, items, right, out, backend)
}

/// Verifies a batch of proofs under one key; the result says, for each, whether it is
/// valid. One check when all are valid; a failing batch is bisected to name the bad
/// proofs. An item with the wrong number of public inputs is invalid. On the CPU; see
/// [`batch_verify_on`] for a GPU.
///
/// # Errors
/// [`Error::Random`] if the OS random source fails.
pub fn batch_verify(pvk: &PreparedVk, items: &[Item]) -> Result<Vec<bool>> {
    batch_verify_on(&Cpu, pvk, items)
}

/// [`batch_verify`] with the weights' products and the Σ r·L MSM on `backend` where its
/// [`MsmNtt::scales_on_gpu`] takes the batch (else exactly [`batch_verify`]).
///
/// # Errors
/// [`Error::Random`] if the OS random source fails; [`Error::Backend`] if the GPU fails.
pub fn batch_verify_on(
    backend: &dyn MsmNtt,
    pvk: &PreparedVk,
    items: &[Item],
) -> Result<Vec<bool>> {
    let mut out = vec![false; items.len()];
    let idx: Vec<usize> = (0..items.len())
        .filter(|&i| check_public_count(pvk.vk(), &items[i].1).is_ok())
        .collect();
    if !idx.is_empty() {
        bisect(pvk, items, &idx, &mut out, backend)?;
    }
    Ok(out)
}

/// Verifies proofs under several keys: grouped per key, each group batch-verified.
/// `items[i].0` indexes into `keys`.
///
/// # Errors
/// [`Error::Random`] if the OS random source fails.
///
/// # Panics
/// If an item names a key index out of range.
pub fn batch_verify_grouped<K: std::borrow::Borrow<PreparedVk>>(
    keys: &[K],
    items: &[(usize, Item)],
) -> Result<Vec<bool>> {
    batch_verify_grouped_on(&Cpu, keys, items)
}

/// [`batch_verify_grouped`] with each group checked by [`batch_verify_on`] `backend`.
///
/// # Errors
/// As [`batch_verify_on`].
///
/// # Panics
/// If an item names a key index out of range.
pub fn batch_verify_grouped_on<K: std::borrow::Borrow<PreparedVk>>(
    backend: &dyn MsmNtt,
    keys: &[K],
    items: &[(usize, Item)],
) -> Result<Vec<bool>> {
    // Equal keys given twice share a batch: keys are compared by their coordinates.
    let mut canonical: HashMap<Vec<u8>, usize> = HashMap::new();
    let key_of: Vec<usize> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            *canonical
                .entry(crate::snarkjs::vk_id(k.borrow().vk()))
                .or_insert(i)
        })
        .collect();
    let mut groups: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, (k, _)) in items.iter().enumerate() {
        groups.entry(key_of[*k]).or_default().push(i);
    }
    let mut out = vec![false; items.len()];
    for (k, members) in groups {
        let batch: Vec<Item> = members.iter().map(|&i| items[i].1.clone()).collect();
        for (valid, i) in batch_verify_on(backend, keys[k].borrow(), &batch)?
            .into_iter()
            .zip(members)
        {
            out[i] = valid;
        }
    }
    Ok(out)
}
