//! `fleetmesh-bench prove-batch [K] [ROUNDS] [--backend B]...`: throughput of batch proving
//! (`fleetmesh_prover::prove::prove_batch`) at batches of 1, 4 and 16 witnesses of the
//! chain circuit (2^K domain, default 16), against proving them one by one as the queue
//! did (`prove_checked` in a loop), same key, same prepared bases, same run. Every proof
//! of both sides is checked to verify before timing.

use std::sync::OnceLock;

use fleetmesh_bench::{compare, report};
use fleetmesh_kernels::MsmNtt;
use fleetmesh_prover::prove::{prove_batch, prove_checked};
use fleetmesh_prover::setup::setup_with_rng;
use fleetmesh_prover::{Fr, KeyTables, PreparedVk, verify};
use rand::SeedableRng;
use rand::rngs::StdRng;

pub fn run(args: &[String]) {
    let (k, rounds, chosen) = super::groth16::k_rounds_backends(args, 16);
    let work = tempfile::tempdir().expect("tempdir");
    let (r1cs, witness) = super::groth16::chain_witness(k, work.path());
    let pk = setup_with_rng(&r1cs, &mut StdRng::seed_from_u64(1)).expect("setup");
    let pvk = PreparedVk::new(&pk.vk);
    println!(
        "prove-batch: chain circuit, {} constraints, domain 2^{}, {} threads",
        r1cs.constraints.len(),
        pk.domain_size.trailing_zeros(),
        rayon::current_num_threads()
    );
    let cpu_tables = OnceLock::new();
    for (name, b) in super::groth16::backends(&chosen) {
        let b: &dyn MsmNtt = b.as_ref();
        // what the node prepares for this backend: the CPU's tables, or kept bases
        let tables = if b.runs_on_cpu() {
            cpu_tables
                .get_or_init(|| KeyTables::build(&pk, 1 << 30))
                .as_ref()
        } else {
            None
        };
        let kept = KeyTables::keep(&pk, b).expect("keep the bases");
        let prepared = kept.as_ref().or(tables);
        for n in [1usize, 4, 16] {
            let witnesses = vec![witness.clone(); n];
            let batch = || {
                let out = prove_batch(&pk, prepared, &pvk, &witnesses, b).expect("prove");
                out.iter().filter(|p| p.is_ok()).count() as u64
            };
            let one_by_one = || {
                witnesses
                    .iter()
                    .filter(|w| prove_checked(&pk, prepared, &pvk, w, b).is_ok())
                    .count() as u64
            };
            // both sides prove every witness, and the proofs verify
            assert_eq!(batch(), n as u64, "{name}: a batch proof failed");
            assert_eq!(one_by_one(), n as u64, "{name}: a proof failed");
            let out = prove_batch(&pk, prepared, &pvk, &witnesses, b).expect("prove");
            let public: Vec<Fr> = witness[1..=pk.n_public].to_vec();
            for p in out {
                let p = p.expect("proof");
                assert!(verify(&pvk, &p.proof, &public).expect("verify"));
            }
            let c = compare(rounds, n as u64, batch, one_by_one);
            report(&format!("prove-batch 2^{k} {name} x{n}"), "one by one", &c);
            println!(
                "{:<34} {:.2} proofs/s batched, {:.2} one by one",
                "",
                1e9 / c.ours.ns_per_op(),
                1e9 / c.baseline.ns_per_op()
            );
        }
    }
}
