//! `groth16-verify`: N proofs under one key, `ark-groth16`'s verifier in a loop (the
//! baseline) against our batch verification (one multi-Miller loop of N + 2 pairs, one
//! final exponentiation), in the same run on the same proofs; with `--backend`, the
//! weights on a GPU against the CPU batch verifier.
//!
//! `groth16-prove`: one proof of a circom circuit, ours against ark-groth16 with the
//! circom reduction (with and without its constraint synthesis) and snarkjs, on the same
//! key and witness.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use ark_bn254::{Bn254, Fr};
use ark_ec::{AffineRepr, CurveGroup};
use ark_ff::{PrimeField, UniformRand};
use ark_groth16::r1cs_to_qap::{LibsnarkReduction, R1CSToQAP, evaluate_constraint};
use ark_groth16::{Groth16, prepare_verifying_key};
use ark_poly::EvaluationDomain;
use ark_relations::gr1cs::{
    ConstraintSynthesizer, ConstraintSystemRef, LinearCombination, Matrix, SynthesisError, Variable,
};
use fleetmesh_bench::{compare, report};
use fleetmesh_kernels::ops::Cpu;
use fleetmesh_prover::KeyTables;
use fleetmesh_prover::setup::setup_with_rng;
use fleetmesh_prover::testing::setup;
use fleetmesh_prover::witness::WitnessCalculator;
use fleetmesh_prover::{PreparedVk, ProvingKey, R1cs, batch_verify, batch_verify_on};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rayon::prelude::*;

/// `groth16-verify [N] [--backend B]...`: the comparison over N proofs (default 64); with
/// GPU backends named, instead, for each our batch verifier with the weights on it
/// against the same on the CPU (after checking that it names a tampered proof and passes
/// the rest).
pub fn verify_cmd(args: &[String]) {
    let (n, _, chosen) = k_rounds_backends(args, 64);
    let n = (n as usize).max(1);
    let gpus: Vec<String> = chosen.into_iter().filter(|c| c != "cpu").collect();
    if gpus.is_empty() {
        return verify(n);
    }
    println!("groth16-verify: {n} proofs (BN254, 2 public inputs), weights on a GPU");
    let (pk, vk, mut rng) = setup(42);
    let mut items: Vec<_> = (0..n)
        .map(|_| fleetmesh_prover::testing::prove(&pk, &mut rng))
        .collect();
    let ours = PreparedVk::new(&vk);
    for (name, b) in backends(&gpus) {
        // a tampered proof in the middle must be named, the others pass
        let bad = n / 2;
        let honest = items[bad].0.a;
        items[bad].0.a = (honest + ark_bn254::G1Affine::generator()).into_affine();
        let v = batch_verify_on(b.as_ref(), &ours, &items).expect("batch verify on the GPU");
        assert!(
            v.iter().enumerate().all(|(i, ok)| *ok == (i != bad)),
            "{name}: the tampered proof {bad} is not the one named invalid"
        );
        items[bad].0.a = honest;
        let c = compare(
            7,
            n as u64,
            || {
                let v = batch_verify_on(b.as_ref(), &ours, &items).expect("GPU");
                assert!(v.iter().all(|ok| *ok));
                v.len() as u64
            },
            || batch_verify(&ours, &items).expect("random source").len() as u64,
        );
        report(&format!("batch verify {n} on {name}"), "cpu batch", &c);
    }
}

/// Runs the comparison over `n` proofs.
pub fn verify(n: usize) {
    let (pk, vk, mut rng) = setup(42);
    let items: Vec<_> = (0..n)
        .map(|_| fleetmesh_prover::testing::prove(&pk, &mut rng))
        .collect();
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
    // what the IFMA lanes (Miller loop, weights) buy: the same batch in arkworks' code
    #[cfg(target_arch = "x86_64")]
    if fleetmesh_kernels::ifma::active() {
        let c = compare(
            7,
            n as u64,
            || batch_verify(&ours, &items).expect("random source").len() as u64,
            || {
                fleetmesh_kernels::ifma::set_enabled(false);
                let v = batch_verify(&ours, &items).expect("random source");
                fleetmesh_kernels::ifma::set_enabled(true);
                v.len() as u64
            },
        );
        report("batch verify, IFMA lanes", "lanes off", &c);
    }
}

/// The circom (snarkjs) reduction for ark-groth16, so its prover can use a snarkjs key:
/// (A·B − C) evaluated on the odd coset of the 2n-th roots of unity, as `ark-circom` and
/// snarkjs do. `instance_map_with_evaluation` and `h_query_scalars` are only used by
/// ark-groth16's own setup, which this benchmark does not run.
pub struct CircomReduction;

impl R1CSToQAP for CircomReduction {
    fn instance_map_with_evaluation<F: PrimeField, D: EvaluationDomain<F>>(
        cs: ConstraintSystemRef<F>,
        t: &F,
    ) -> Result<(Vec<F>, Vec<F>, Vec<F>, F, usize, usize), SynthesisError> {
        LibsnarkReduction::instance_map_with_evaluation::<F, D>(cs, t)
    }

    fn witness_map_from_matrices<F: PrimeField, D: EvaluationDomain<F>>(
        matrices: &[Matrix<F>],
        num_inputs: usize,
        num_constraints: usize,
        full_assignment: &[F],
    ) -> Result<Vec<F>, SynthesisError> {
        let domain =
            D::new(num_constraints + num_inputs).ok_or(SynthesisError::PolynomialDegreeTooLarge)?;
        let n = domain.size();
        let mut a = vec![F::zero(); n];
        let mut b = vec![F::zero(); n];
        a[..num_constraints]
            .par_iter_mut()
            .zip(&mut b[..num_constraints])
            .zip(&matrices[0])
            .zip(&matrices[1])
            .for_each(|(((a, b), at), bt)| {
                *a = evaluate_constraint(at, full_assignment);
                *b = evaluate_constraint(bt, full_assignment);
            });
        a[num_constraints..num_constraints + num_inputs]
            .clone_from_slice(&full_assignment[..num_inputs]);
        let mut c: Vec<F> = a.par_iter().zip(&b).map(|(x, y)| *x * y).collect();
        let g = D::new(2 * n)
            .ok_or(SynthesisError::PolynomialDegreeTooLarge)?
            .element(1);
        for v in [&mut a, &mut b, &mut c] {
            domain.ifft_in_place(v);
            D::distribute_powers_and_mul_by_const(v, g, F::one());
            domain.fft_in_place(v);
        }
        Ok(a.par_iter()
            .zip(&b)
            .zip(&c)
            .map(|((x, y), z)| *x * y - z)
            .collect())
    }

    fn h_query_scalars<F: PrimeField, D: EvaluationDomain<F>>(
        _max_power: usize,
        _t: F,
        _zt: F,
        _delta_inverse: F,
    ) -> Result<Vec<F>, SynthesisError> {
        unimplemented!("the benchmark uses keys from fleetmesh's setup")
    }
}

/// A circom R1CS with its witness as an arkworks circuit (instance = wire 0 and the public
/// signals, witness = the rest: the same order as circom's wires).
#[derive(Clone)]
struct Circuit<'a> {
    r1cs: &'a R1cs,
    witness: &'a [Fr],
}

impl ConstraintSynthesizer<Fr> for Circuit<'_> {
    fn generate_constraints(self, cs: ConstraintSystemRef<Fr>) -> Result<(), SynthesisError> {
        let n_inputs = self.r1cs.n_public() + 1;
        for w in &self.witness[1..n_inputs] {
            let _ = cs.new_input_variable(|| Ok(*w))?;
        }
        for w in &self.witness[n_inputs..] {
            let _ = cs.new_witness_variable(|| Ok(*w))?;
        }
        let var = |i: u32| {
            let i = i as usize;
            if i < n_inputs {
                Variable::instance(i)
            } else {
                Variable::witness(i - n_inputs)
            }
        };
        let lc = |terms: &[(u32, Fr)]| {
            LinearCombination(terms.iter().map(|(i, c)| (*c, var(*i))).collect())
        };
        for c in &self.r1cs.constraints {
            let (a, b, cc) = (lc(&c.a), lc(&c.b), lc(&c.c));
            cs.enforce_r1cs_constraint(|| a, || b, || cc)?;
        }
        Ok(())
    }
}

fn ark_pk(pk: &ProvingKey) -> ark_groth16::ProvingKey<Bn254> {
    ark_groth16::ProvingKey {
        vk: pk.vk.clone(),
        beta_g1: pk.beta_g1,
        delta_g1: pk.delta_g1,
        a_query: pk.a.clone(),
        b_g1_query: pk.b_g1.clone(),
        b_g2_query: pk.b_g2.clone(),
        h_query: pk.h.clone(),
        l_query: pk.c.clone(),
    }
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../prover/tests/fixtures/circom")
}

fn npm_dir() -> PathBuf {
    std::env::var_os("FLEETMESH_NPM_DIR").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/fleetmesh/npm"),
        PathBuf::from,
    )
}

/// The chain circuit for a 2^k domain: the committed one for k = 14, else built by the
/// fixture script (needs node).
fn chain(k: u32, work: &Path) -> (Vec<u8>, Vec<u8>, serde_json::Value) {
    // a prebuilt circuit (bench/gpu/run.sh --prepare writes one for machines without npm)
    let prebuilt = std::env::var_os("FLEETMESH_CHAIN_DIR")
        .map(PathBuf::from)
        .map(|d| d.join(format!("chain{k}")))
        .filter(|d| d.join("chain.r1cs").exists());
    let dir = if k == 14 {
        fixtures()
    } else if let Some(d) = prebuilt {
        d
    } else {
        println!("building the chain circuit for 2^{k} with circom (gen.sh chain {k}) …");
        let st = Command::new(fixtures().join("gen.sh"))
            .args(["chain", &k.to_string()])
            .arg(work)
            .status()
            .expect("run gen.sh (needs bash, node and npm)");
        assert!(st.success(), "gen.sh chain {k} failed");
        work.to_path_buf()
    };
    let read = |n: &str| std::fs::read(dir.join(n)).unwrap_or_else(|e| panic!("{n}: {e}"));
    (
        read("chain.r1cs"),
        read("chain.wasm"),
        serde_json::from_slice(&read("chain_input.json")).expect("input json"),
    )
}

/// The chain circuit for a 2^k domain and its witness.
pub(crate) fn chain_witness(k: u32, work: &Path) -> (R1cs, Vec<Fr>) {
    let (r1cs, wasm, input) = chain(k, work);
    let r1cs = R1cs::from_bytes(&r1cs).expect("chain.r1cs");
    let witness = WitnessCalculator::new(&wasm)
        .and_then(|c| c.calculate(&input))
        .expect("witness");
    (r1cs, witness)
}

/// `groth16-prove`: one proof of the squaring-chain circuit with a 2^k domain; ours
/// against ark-groth16 (circom reduction) on the same key and witness, and snarkjs when
/// node is present.
pub fn prove(k: u32, rounds: usize) {
    let work = tempfile::tempdir().expect("tempdir");
    let (r1cs, witness) = chain_witness(k, work.path());
    let t = Instant::now();
    let pk = setup_with_rng(&r1cs, &mut StdRng::seed_from_u64(1)).expect("setup");
    println!(
        "groth16-prove: chain circuit, {} constraints, {} wires, domain 2^{} (dev setup {:.1} s, {} threads)",
        r1cs.constraints.len(),
        pk.n_vars,
        pk.domain_size.trailing_zeros(),
        t.elapsed().as_secs_f64(),
        rayon::current_num_threads()
    );
    let apk = ark_pk(&pk);
    let pvk = PreparedVk::new(&pk.vk);
    let public = witness[1..=pk.n_public].to_vec();
    let matrices: Vec<Matrix<Fr>> = [0, 1, 2]
        .iter()
        .map(|m| {
            r1cs.constraints
                .iter()
                .map(|c| {
                    let lc = [&c.a, &c.b, &c.c][*m];
                    lc.iter().map(|(i, v)| (*v, *i as usize)).collect()
                })
                .collect()
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(2);
    let check = |p: &ark_groth16::Proof<Bn254>| {
        assert!(
            fleetmesh_prover::verify(&pvk, p, &public).expect("verify"),
            "a proof did not verify"
        );
        1u64
    };
    let ours = || {
        check(
            &fleetmesh_prover::prove(&pk, &witness, &Cpu)
                .expect("prove")
                .proof,
        )
    };
    let mut circom_rng = StdRng::seed_from_u64(3);
    let mut ark_circom = || {
        let circuit = Circuit {
            r1cs: &r1cs,
            witness: &witness,
        };
        let (r, s) = (Fr::rand(&mut circom_rng), Fr::rand(&mut circom_rng));
        check(
            &Groth16::<Bn254, CircomReduction>::create_proof_with_reduction(circuit, &apk, r, s)
                .expect("ark prove"),
        )
    };
    let c = compare(rounds, 1, &ours, &mut ark_circom);
    report("prove (per proof)", "ark-groth16+circom", &c);
    let c = compare(rounds, 1, &ours, || {
        let (r, s) = (Fr::rand(&mut rng), Fr::rand(&mut rng));
        check(
            &Groth16::<Bn254, CircomReduction>::create_proof_with_reduction_and_matrices(
                &apk,
                r,
                s,
                &matrices,
                pk.n_public + 1,
                r1cs.constraints.len(),
                &witness,
            )
            .expect("ark prove"),
        )
    });
    report("prove (per proof)", "ark, no synthesis", &c);
    // a node proving with a loaded key: its precomputed MSM tables, unbounded here
    let t = Instant::now();
    let tables = KeyTables::build(&pk, usize::MAX).expect("tables");
    println!(
        "tables: {:.0} MiB, {} copies, built in {:.1} s (once per key, in the background)",
        tables.bytes() as f64 / (1u64 << 20) as f64,
        tables.copies(),
        t.elapsed().as_secs_f64()
    );
    phases(&pk, &witness, &tables, rounds);
    let pvk_tabled = PreparedVk::new(&pk.vk);
    let tabled = || {
        let p =
            fleetmesh_prover::prove::prove_checked(&pk, Some(&tables), &pvk_tabled, &witness, &Cpu)
                .expect("prove");
        check(&p.proof)
    };
    let c = compare(rounds, 1, &tabled, &ours);
    report("prove, tables (per proof)", "ours without", &c);
    let c = compare(rounds, 1, &tabled, &mut ark_circom);
    report("prove, tables (per proof)", "ark-groth16+circom", &c);
    snarkjs_prove(&pk, &witness, work.path(), rounds, &pvk, &public, &tabled);
}

/// Each phase of a proof alone (median of `rounds`), without and with the key's tables:
/// where the time goes.
fn phases(pk: &ProvingKey, witness: &[Fr], tables: &KeyTables, rounds: usize) {
    use fleetmesh_kernels::MsmNtt;
    let median = |f: &dyn Fn()| {
        f();
        let mut v: Vec<f64> = (0..rounds.max(1))
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let h = fleetmesh_prover::qap::witness_map(&Cpu, &pk.coeffs, witness, pk.domain_size)
        .expect("witness map");
    let private = &witness[pk.n_public + 1..];
    let ntt = median(&|| {
        fleetmesh_prover::qap::witness_map(&Cpu, &pk.coeffs, witness, pk.domain_size)
            .expect("witness map");
    });
    #[cfg(target_arch = "x86_64")]
    let lanes = fleetmesh_kernels::ifma::active();
    #[cfg(not(target_arch = "x86_64"))]
    let lanes = false;
    // the last column: with tables, the chord additions (and the NTTs) in scalar arkworks
    // arithmetic
    let scalar = |f: &dyn Fn()| -> String {
        if !lanes {
            return "(no AVX-512 IFMA)".into();
        }
        #[cfg(target_arch = "x86_64")]
        fleetmesh_kernels::ifma::set_enabled(false);
        let ms = median(f);
        #[cfg(target_arch = "x86_64")]
        fleetmesh_kernels::ifma::set_enabled(true);
        format!("{ms:>8.1} ms")
    };
    println!(
        "chord additions: {}",
        if lanes {
            "AVX-512 IFMA, 8 lanes"
        } else {
            "scalar (arkworks)"
        }
    );
    println!("phase        without tables   with tables   tables, scalar");
    let ntt_scalar = scalar(&|| {
        fleetmesh_prover::qap::witness_map(&Cpu, &pk.coeffs, witness, pk.domain_size)
            .expect("witness map");
    });
    println!("witness_map  {ntt:>11.1} ms   (the same)    {ntt_scalar}");
    let g1 = |name: &str,
              bases: &[ark_bn254::G1Affine],
              t: &Option<fleetmesh_kernels::fixed::Fixed<ark_bn254::g1::Config>>,
              sc: &[Fr]| {
        let t = t.as_ref().expect("CPU tables for every vector");
        let a = median(&|| {
            let _ = std::hint::black_box(Cpu.msm_g1(bases, sc).expect("msm"));
        });
        let fixed = || {
            let _ = std::hint::black_box(Cpu.msm_g1_fixed(bases, t, sc).expect("msm"));
        };
        let b = median(&fixed);
        let s = scalar(&fixed);
        println!(
            "{name:<12} {a:>11.1} ms   {b:>8.1} ms   {s}   {:?}",
            t.shifted().map(|t| t.plan())
        );
    };
    g1("msm A", &pk.a, &tables.a, witness);
    g1("msm B1", &pk.b_g1, &tables.b_g1, witness);
    let a = median(&|| {
        let _ = std::hint::black_box(Cpu.msm_g2(&pk.b_g2, witness).expect("msm"));
    });
    let b_g2 = tables.b_g2.as_ref().expect("CPU tables for every vector");
    let fixed = || {
        let _ = std::hint::black_box(Cpu.msm_g2_fixed(&pk.b_g2, b_g2, witness).expect("msm"));
    };
    let b = median(&fixed);
    let s = scalar(&fixed);
    println!(
        "msm B2 (G2)  {a:>11.1} ms   {b:>8.1} ms   {s}   {:?}",
        b_g2.shifted().map(|t| t.plan())
    );
    g1("msm C", &pk.c, &tables.c, private);
    g1("msm H", &pk.h, &tables.h, &h);
}

/// snarkjs's `groth16 prove` on the same key and witness (files written by us), timed as
/// a whole command, against ours timed as `meshnode proof prove` would run it in-process.
fn snarkjs_prove(
    pk: &ProvingKey,
    witness: &[Fr],
    work: &Path,
    rounds: usize,
    pvk: &PreparedVk,
    public: &[Fr],
    tabled: &dyn Fn() -> u64,
) {
    let bin = npm_dir().join("node_modules/.bin/snarkjs");
    if Command::new("node").arg("--version").output().is_err() || !bin.exists() {
        println!(
            "snarkjs: skipped (node or {} missing; run gen.sh tools)",
            bin.display()
        );
        return;
    }
    let (zkey, wtns) = (work.join("c.zkey"), work.join("c.wtns"));
    std::fs::write(&zkey, pk.to_bytes()).expect("write zkey");
    std::fs::write(&wtns, fleetmesh_prover::wtns::to_bytes(witness)).expect("write wtns");
    let (proof, publ) = (work.join("proof.json"), work.join("public.json"));
    let snarkjs = || {
        let st = Command::new(&bin)
            .args(["groth16", "prove"])
            .args([&zkey, &wtns, &proof, &publ])
            .status()
            .expect("snarkjs");
        assert!(st.success());
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&proof).expect("proof")).expect("json");
        let p = fleetmesh_prover::snarkjs::parse_proof(&v).expect("snarkjs proof");
        u64::from(fleetmesh_prover::verify(pvk, &p, public).expect("verify"))
    };
    let c = compare(
        rounds.min(3),
        1,
        || {
            let pk = ProvingKey::from_bytes(&std::fs::read(&zkey).expect("zkey")).expect("zkey");
            let w = fleetmesh_prover::wtns::from_bytes(&std::fs::read(&wtns).expect("wtns"))
                .expect("wtns");
            let p = fleetmesh_prover::prove(&pk, &w, &Cpu).expect("prove");
            u64::from(fleetmesh_prover::verify(pvk, &p.proof, public).expect("verify"))
        },
        snarkjs,
    );
    report("prove incl. reading files", "snarkjs 0.7.6", &c);
    // a node's proof: the key loaded once with its tables, the witness given
    let c = compare(rounds.min(3), 1, tabled, snarkjs);
    report("prove, key loaded, tables", "snarkjs 0.7.6", &c);
}

/// `ntt`: forward NTTs of 2^12…2^max_log elements on the CPU reference and on wgpu's
/// first adapter (results compared every round). On lavapipe the ratio is about
/// correctness, not speed.
/// The backends named in `chosen` (`cpu`, `wgpu` for every adapter, `cuda:N`), or when it
/// is empty every one this machine has (cpu, each wgpu adapter, cuda:0). A backend that
/// cannot be opened is reported and left out.
pub(crate) fn backends(chosen: &[String]) -> Vec<(String, Box<dyn fleetmesh_kernels::MsmNtt>)> {
    use fleetmesh_kernels::ops::Cpu;
    use fleetmesh_kernels::{BackendChoice, CudaBackend, MsmNtt, WgpuBackend};
    let mut backends: Vec<(String, Box<dyn MsmNtt>)> = Vec::new();
    let wanted = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    if wanted("cpu") {
        backends.push(("cpu".into(), Box::new(Cpu)));
    }
    if wanted("wgpu") {
        let adapters = fleetmesh_kernels::probe::probe().wgpu.unwrap_or_default();
        for (i, a) in adapters.iter().enumerate() {
            match WgpuBackend::new(i) {
                Ok(b) => backends.push((format!("wgpu:{i}"), Box::new(b))),
                Err(e) => println!("backend wgpu adapter {i} ({}): {e}", a.name),
            }
        }
    }
    let mut cuda: Vec<String> = chosen
        .iter()
        .filter(|c| c.starts_with("cuda"))
        .cloned()
        .collect();
    if chosen.is_empty() {
        cuda.push("cuda:0".into());
    }
    for c in cuda {
        let Ok(BackendChoice::Cuda(n)) = c.parse() else {
            super::usage()
        };
        match CudaBackend::new(n) {
            Ok(b) => backends.push((c, Box::new(b))),
            Err(e) => println!("backend {c}: {e}"),
        }
    }
    backends
}

/// `[K] [ROUNDS] [--backend B]...` as `prove-backends` and `prove-batch` take them: K
/// (default `k`), ROUNDS (default 3) and the backends named.
pub(crate) fn k_rounds_backends(args: &[String], k: u32) -> (u32, usize, Vec<String>) {
    let mut nums = Vec::new();
    let mut chosen = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--backend" {
            chosen.push(it.next().cloned().unwrap_or_else(|| super::usage()));
        } else {
            nums.push(a.parse::<usize>().unwrap_or_else(|_| super::usage()));
        }
    }
    let k = nums.first().map_or(k, |k| *k as u32);
    (k, nums.get(1).copied().unwrap_or(3), chosen)
}

/// `fleetmesh-bench prove-backends [K] [ROUNDS] [--backend B]...`: one proof of the chain
/// circuit (2^K domain) on each backend; each backend's proof with fixed r, s must equal the
/// CPU's and verify, then it is timed against our CPU backend in the same run.
pub fn prove_backends(args: &[String]) {
    let (k, rounds, chosen) = k_rounds_backends(args, 14);
    let work = tempfile::tempdir().expect("tempdir");
    let (r1cs, witness) = chain_witness(k, work.path());
    let pk = setup_with_rng(&r1cs, &mut StdRng::seed_from_u64(1)).expect("setup");
    let pvk = PreparedVk::new(&pk.vk);
    let public = witness[1..=pk.n_public].to_vec();
    println!(
        "prove-backends: chain circuit, {} constraints, domain 2^{}",
        r1cs.constraints.len(),
        pk.domain_size.trailing_zeros()
    );
    let (r, s) = (Fr::from(11u64), Fr::from(13u64));
    let reference = fleetmesh_prover::prove::prove_with(&pk, None, &witness, &Cpu, r, s)
        .expect("prove")
        .proof;
    let cpu_tables = std::sync::OnceLock::new();
    for (name, b) in backends(&chosen) {
        let p = fleetmesh_prover::prove::prove_with(&pk, None, &witness, b.as_ref(), r, s)
            .expect("prove")
            .proof;
        assert!(p == reference, "{name}: proof differs from the CPU's");
        assert!(
            fleetmesh_prover::verify(&pvk, &p, &public).expect("verify"),
            "{name}: proof does not verify"
        );
        let run = |m: &dyn fleetmesh_kernels::MsmNtt, t: Option<&KeyTables>| {
            u64::from(fleetmesh_prover::prove::prove_checked(&pk, t, &pvk, &witness, m).is_ok())
        };
        let c = compare(rounds, 1, || run(b.as_ref(), None), || run(&Cpu, None));
        report(&format!("prove 2^{k} {name}"), "our cpu", &c);
        // a GPU keeps a loaded circuit's bases: the same proof, without their upload
        let Some(kept) = KeyTables::keep(&pk, b.as_ref()).expect("keep the bases") else {
            continue;
        };
        let p = fleetmesh_prover::prove::prove_with(&pk, Some(&kept), &witness, b.as_ref(), r, s)
            .expect("prove")
            .proof;
        assert!(
            p == reference,
            "{name}: proof with kept bases differs from the CPU's"
        );
        let c = compare(
            rounds,
            1,
            || run(b.as_ref(), Some(&kept)),
            || run(b.as_ref(), None),
        );
        report(&format!("prove 2^{k} {name} kept"), "uploading", &c);
        // against the CPU at its best: with the key's tables (the node's default budget)
        let tables = cpu_tables.get_or_init(|| KeyTables::build(&pk, 1 << 30));
        let c = compare(
            rounds,
            1,
            || run(b.as_ref(), Some(&kept)),
            || run(&Cpu, tables.as_ref()),
        );
        report(&format!("prove 2^{k} {name} kept"), "cpu+tables", &c);
    }
}

/// `fleetmesh-bench kernels [--min-log L] [--max-log M] [--backend B]... [--rounds R]`:
/// G1 MSM and NTT per backend at 2^L … 2^M (every even power by default), each result first
/// checked equal to the arkworks reference, then timed against it in the same run (medians
/// of alternating rounds). Backends default to every one this machine has: our CPU backend,
/// each wgpu adapter and CUDA device 0.
pub fn kernels(args: &[String]) {
    use ark_bn254::G1Projective;
    use ark_ec::{CurveGroup, PrimeGroup};
    use fleetmesh_kernels::ops::{MsmNtt, NttDirection, Reference};
    let (mut min_log, mut max_log, mut rounds) = (12u32, 20u32, 3usize);
    let mut chosen: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().unwrap_or_else(|| super::usage());
        match a.as_str() {
            "--min-log" => min_log = val().parse().unwrap_or_else(|_| super::usage()),
            "--max-log" => max_log = val().parse().unwrap_or_else(|_| super::usage()),
            "--rounds" => rounds = val().parse().unwrap_or_else(|_| super::usage()),
            "--backend" => chosen.push(val()),
            _ => super::usage(),
        }
    }
    let backends = backends(&chosen);
    println!("kernels: baseline {}", Reference.describe());
    for (name, b) in &backends {
        println!("kernels: {name} = {}", b.describe());
    }
    let mut rng = StdRng::seed_from_u64(9);
    let g = G1Projective::generator();
    let mut log = min_log;
    while log <= max_log {
        let n = 1usize << log;
        let scalars: Vec<Fr> = (0..n).map(|_| Fr::rand(&mut rng)).collect();
        // distinct random bases without n scalar multiplications: a random walk
        let mut walk = Vec::with_capacity(n);
        let mut p = g * Fr::rand(&mut rng);
        let step = g * Fr::rand(&mut rng);
        for _ in 0..n {
            walk.push(p);
            p += step;
        }
        let bases = G1Projective::normalize_batch(&walk);
        let want = Reference.msm_g1(&bases, &scalars).expect("msm");
        let g2 = ark_bn254::G2Projective::generator();
        let (mut p2, step2) = (g2 * Fr::rand(&mut rng), g2 * Fr::rand(&mut rng));
        let walk2: Vec<_> = (0..n)
            .map(|_| {
                p2 += step2;
                p2
            })
            .collect();
        let bases2 = ark_bn254::G2Projective::normalize_batch(&walk2);
        let want2 = Reference.msm_g2(&bases2, &scalars).expect("msm");
        let mut ntt_want = scalars.clone();
        Reference
            .ntt(&mut ntt_want, NttDirection::Forward)
            .expect("ntt");
        for (name, b) in &backends {
            let got = b.msm_g1(&bases, &scalars).expect("msm");
            assert!(
                got == want,
                "{name}: G1 MSM differs from arkworks at 2^{log}"
            );
            let c = compare(
                rounds,
                1,
                || u64::from(b.msm_g1(&bases, &scalars).is_ok()),
                || u64::from(Reference.msm_g1(&bases, &scalars).is_ok()),
            );
            report(&format!("msm_g1 2^{log} {name}"), "arkworks", &c);
            let got = b.msm_g2(&bases2, &scalars).expect("msm");
            assert!(
                got == want2,
                "{name}: G2 MSM differs from arkworks at 2^{log}"
            );
            let c = compare(
                rounds,
                1,
                || u64::from(b.msm_g2(&bases2, &scalars).is_ok()),
                || u64::from(Reference.msm_g2(&bases2, &scalars).is_ok()),
            );
            report(&format!("msm_g2 2^{log} {name}"), "arkworks", &c);
            let mut v = scalars.clone();
            b.ntt(&mut v, NttDirection::Forward).expect("ntt");
            assert!(
                v == ntt_want,
                "{name}: NTT differs from arkworks at 2^{log}"
            );
            let run = |m: &dyn MsmNtt| {
                let mut v = scalars.clone();
                m.ntt(&mut v, NttDirection::Forward).expect("ntt");
                v.len() as u64
            };
            let c = compare(rounds, 1, || run(b.as_ref()), || run(&Reference));
            report(&format!("ntt 2^{log} {name}"), "arkworks", &c);
        }
        log += 2;
    }
}
