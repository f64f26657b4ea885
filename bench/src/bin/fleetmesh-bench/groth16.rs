//! `groth16-verify`: N proofs under one key, `ark-groth16`'s verifier in a loop (the
//! baseline) against our batch verification (one multi-Miller loop of N + 2 pairs, one
//! final exponentiation), in the same run on the same proofs.

use ark_bn254::Bn254;
use ark_groth16::{Groth16, prepare_verifying_key};
use fleetmesh_bench::{compare, report};
use fleetmesh_prover::testing::{prove, setup};
use fleetmesh_prover::{PreparedVk, batch_verify};

/// Runs the comparison over `n` proofs.
pub fn verify(n: usize) {
    let (pk, vk, mut rng) = setup(42);
    let items: Vec<_> = (0..n).map(|_| prove(&pk, &mut rng)).collect();
    let ours = PreparedVk::new(&vk);
    let theirs = prepare_verifying_key(&vk);
    println!("groth16-verify: {n} proofs (BN254, 2 public inputs) under one key");
    let c = compare(
        7,
        n as u64,
        || {
            let v = batch_verify(&ours, &items).expect("random source");
            assert!(v.iter().all(|b| *b));
            v.len() as u64
        },
        || {
            items
                .iter()
                .map(|(p, x)| {
                    let ok = Groth16::<Bn254>::verify_proof(&theirs, p, x).expect("well-formed");
                    assert!(ok);
                    u64::from(ok)
                })
                .sum()
        },
    );
    report("batch verify (per proof)", "ark-groth16 loop", &c);
}
