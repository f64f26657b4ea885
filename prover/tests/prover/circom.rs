//! circom/snarkjs binary formats, witness generation, setup and proving, against fixtures
//! made by circom 2.2.3 and snarkjs 0.7.6 (`tests/fixtures/circom/gen.sh`).

use ark_bn254::{Bn254, Fr};
use ark_ff::{BigInteger, One, PrimeField};
use fleetmesh_kernels::ops::{Cpu, Reference};
use fleetmesh_prover::prove::prove_with;
use fleetmesh_prover::setup::setup_with_rng;
use fleetmesh_prover::snarkjs::{parse_proof, parse_public, parse_vk};
use fleetmesh_prover::tables::{self, KeyTables};
use fleetmesh_prover::witness::WitnessCalculator;
use fleetmesh_prover::{Error, PreparedVk, ProvingKey, R1cs, prove, verify, wtns};
use rand::SeedableRng;
use serde_json::{Value, json};

use crate::{fixture, fixture_json};

fn ark_verify(
    vk: &ark_groth16::VerifyingKey<Bn254>,
    p: &ark_groth16::Proof<Bn254>,
    x: &[Fr],
) -> bool {
    let pvk = ark_groth16::prepare_verifying_key(vk);
    ark_groth16::Groth16::<Bn254>::verify_proof(&pvk, p, x).unwrap()
}

#[test]
fn tiny_r1cs_and_witness_read_and_round_trip_byte_for_byte() {
    let bytes = fixture("tiny.r1cs");
    let r1cs = R1cs::from_bytes(&bytes).unwrap();
    assert_eq!((r1cs.n_pub_out, r1cs.n_pub_in, r1cs.n_prv_in), (1, 2, 1));
    assert!(
        r1cs.to_bytes() == bytes,
        "r1cs writer differs from circom's"
    );

    let wbytes = fixture("tiny.wtns");
    let w = wtns::from_bytes(&wbytes).unwrap();
    assert!(
        wtns::to_bytes(&w) == wbytes,
        "wtns writer differs from snarkjs's"
    );
    assert_eq!(w.len(), r1cs.n_wires as usize);
    r1cs.check_witness(&w).unwrap();
    // public signals are wires 1..=3 and match snarkjs's public.json
    let public = parse_public(&fixture_json("tiny_public.json")).unwrap();
    assert_eq!(&w[1..=3], &public[..]);
    // a witness with one wire changed fails a constraint
    let mut bad = w.clone();
    bad[4] += Fr::one();
    assert!(matches!(r1cs.check_witness(&bad), Err(Error::Witness(_))));
}

#[test]
fn snarkjs_zkey_reads_with_the_vk_snarkjs_exported_and_round_trips() {
    let pk = ProvingKey::from_bytes(&fixture("tiny.zkey")).unwrap();
    let vk = parse_vk(&fixture_json("tiny_vk.json")).unwrap();
    assert_eq!(
        pk.vk, vk,
        "zkey's embedded vk differs from verification_key.json"
    );
    let r1cs = R1cs::from_bytes(&fixture("tiny.r1cs")).unwrap();
    assert_eq!(pk.n_vars, r1cs.n_wires as usize);
    assert_eq!(pk.n_public, r1cs.n_public());
    // the coefficient section is A's entries, the public-binding rows, then B's:
    let a_entries: usize = r1cs.constraints.iter().map(|c| c.a.len()).sum();
    let b_entries: usize = r1cs.constraints.iter().map(|c| c.b.len()).sum();
    assert_eq!(pk.coeffs.len(), a_entries + pk.n_public + 1 + b_entries);
    let again = ProvingKey::from_bytes(&pk.to_bytes()).unwrap();
    assert_eq!(again, pk);
}

#[test]
fn proofs_from_the_snarkjs_zkey_verify_under_snarkjs_vk_ours_and_ark_groth16() {
    let pk = ProvingKey::from_bytes(&fixture("tiny.zkey")).unwrap();
    let w = wtns::from_bytes(&fixture("tiny.wtns")).unwrap();
    let vk = parse_vk(&fixture_json("tiny_vk.json")).unwrap();
    let proven = prove(&pk, &w, &Cpu).unwrap();
    assert_eq!(
        proven.public,
        parse_public(&fixture_json("tiny_public.json")).unwrap()
    );
    assert!(verify(&PreparedVk::new(&vk), &proven.proof, &proven.public).unwrap());
    assert!(ark_verify(&vk, &proven.proof, &proven.public));
    // and not for other public values
    let mut wrong = proven.public.clone();
    wrong[0] += Fr::one();
    assert!(!ark_verify(&vk, &proven.proof, &wrong));
    // fresh blinding each time
    let again = prove(&pk, &w, &Cpu).unwrap();
    assert_ne!(again.proof, proven.proof);
    // the snarkjs-made proof also verifies here (sanity of the fixture)
    let theirs = parse_proof(&fixture_json("tiny_proof.json")).unwrap();
    assert!(ark_verify(&vk, &theirs, &proven.public));
}

#[test]
fn a_witness_that_does_not_satisfy_the_circuit_gets_no_proof() {
    let pk = ProvingKey::from_bytes(&fixture("tiny.zkey")).unwrap();
    let w = wtns::from_bytes(&fixture("tiny.wtns")).unwrap();
    let mut bad = w.clone();
    bad[5] += Fr::one();
    let e = prove(&pk, &bad, &Cpu).unwrap_err();
    assert!(
        matches!(e, Error::Witness(ref m) if m.contains("does not satisfy")),
        "{e}"
    );
    let e = prove(&pk, &w[..w.len() - 1], &Cpu).unwrap_err();
    assert!(
        matches!(e, Error::Witness(ref m) if m.contains("values")),
        "{e}"
    );
    let mut zero = w.clone();
    zero[0] = Fr::from(0u64);
    assert!(matches!(prove(&pk, &zero, &Cpu), Err(Error::Witness(_))));
}

#[test]
fn a_batch_proves_each_witness_and_names_the_ones_that_do_not_satisfy_the_circuit() {
    use fleetmesh_prover::prove::prove_batch;
    let pk = ProvingKey::from_bytes(&fixture("tiny.zkey")).unwrap();
    let pvk = PreparedVk::new(&pk.vk);
    let vk = parse_vk(&fixture_json("tiny_vk.json")).unwrap();
    let w = wtns::from_bytes(&fixture("tiny.wtns")).unwrap();
    let mut bad = w.clone();
    bad[5] += Fr::one();
    let batch = vec![
        w.clone(),
        bad,
        w.clone(),
        w[..w.len() - 1].to_vec(),
        w.clone(),
    ];
    // side by side (the CPU) and back to back (a backend that says it is not the CPU)
    struct BackToBack;
    impl fleetmesh_kernels::MsmNtt for BackToBack {
        fn describe(&self) -> String {
            "back to back".into()
        }
        fn runs_on_cpu(&self) -> bool {
            false
        }
    }
    for backend in [&Cpu as &dyn fleetmesh_kernels::MsmNtt, &BackToBack] {
        let out = prove_batch(&pk, None, &pvk, &batch, backend).unwrap();
        assert_eq!(out.len(), 5);
        for i in [0, 2, 4] {
            let p = out[i].as_ref().unwrap();
            assert!(
                ark_verify(&vk, &p.proof, &p.public),
                "{}",
                backend.describe()
            );
        }
        // fresh blinding for each proof
        assert_ne!(
            out[0].as_ref().unwrap().proof,
            out[2].as_ref().unwrap().proof
        );
        assert!(
            matches!(&out[1], Err(Error::Witness(m)) if m.contains("does not satisfy")),
            "{:?}",
            out[1]
        );
        assert!(matches!(&out[3], Err(Error::Witness(m)) if m.contains("values")));
    }
    assert!(prove_batch(&pk, None, &pvk, &[], &Cpu).unwrap().is_empty());
}

#[test]
fn wasm_witness_matches_snarkjs_wtns_for_both_circuits() {
    for name in ["tiny", "chain"] {
        let calc = WitnessCalculator::new(&fixture(&format!("{name}.wasm"))).unwrap();
        let input = fixture_json(&format!("{name}_input.json"));
        let ours = calc.calculate(&input).unwrap();
        let theirs = wtns::from_bytes(&fixture(&format!("{name}.wtns"))).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{name}");
        assert!(ours == theirs, "{name}: witness differs from snarkjs's");
    }
}

#[test]
fn bad_inputs_to_the_witness_calculator_are_named() {
    let calc = WitnessCalculator::new(&fixture("tiny.wasm")).unwrap();
    let cases: [(Value, &str, &str); 6] = [
        (
            json!({"a": "3", "b": "11", "w": "5", "nope": "1"}),
            "nope",
            "no input signal",
        ),
        (
            json!({"a": ["3", "4"], "b": "11", "w": "5"}),
            "a",
            "expects 1 value",
        ),
        (
            json!({"a": "x3", "b": "11", "w": "5"}),
            "a",
            "not a decimal",
        ),
        (
            json!({"a": 1.5, "b": "11", "w": "5"}),
            "a",
            "not an integer",
        ),
        (
            json!({"a": "3", "b": "11"}),
            "",
            "only 2 of the circuit's 3",
        ),
        (json!(["3"]), "", "JSON object"),
    ];
    for (input, signal, needle) in cases {
        match calc.calculate(&input) {
            Err(Error::Input { signal: s, reason }) => {
                assert_eq!(s, signal, "{input}");
                assert!(reason.contains(needle), "{input}: {reason}");
            }
            other => panic!("{input}: {other:?}"),
        }
    }
    // LessThan(8) asserts its 9-bit decomposition: a - b + 256 must fit in 9 bits.
    let e = calc
        .calculate(&json!({"a": "1000", "b": "0", "w": "1"}))
        .unwrap_err();
    assert!(
        matches!(e, Error::Witness(ref m) if m.contains("assert")),
        "{e}"
    );
    // the calculator still works after a failed input
    assert!(calc.calculate(&fixture_json("tiny_input.json")).is_ok());
    // negative and hex inputs reduce mod r like snarkjs
    let w = calc
        .calculate(&json!({"a": "0x3", "b": 11, "w": "-5"}))
        .unwrap();
    assert_eq!(w[1], Fr::from(86u64));
    assert!(matches!(
        WitnessCalculator::new(b"not wasm"),
        Err(Error::Witness(_))
    ));
}

#[test]
fn dev_setup_on_the_2_14_chain_proves_and_round_trips() {
    let r1cs = R1cs::from_bytes(&fixture("chain.r1cs")).unwrap();
    assert!(r1cs.constraints.len() >= 1 << 13);
    let pk = setup_with_rng(&r1cs, &mut rand::rngs::StdRng::seed_from_u64(7)).unwrap();
    assert_eq!(pk.domain_size, 1 << 14);
    let again = ProvingKey::from_bytes(&pk.to_bytes()).unwrap();
    assert!(again == pk, "zkey round trip");
    let w = wtns::from_bytes(&fixture("chain.wtns")).unwrap();
    // snarkjs's own setup and proof of this circuit agree on the public signals
    let snark_vk = parse_vk(&fixture_json("chain_vk.json")).unwrap();
    let snark_public = parse_public(&fixture_json("chain_public.json")).unwrap();
    assert_eq!(&w[1..=2], &snark_public[..]);
    let snark_proof = parse_proof(&fixture_json("chain_proof.json")).unwrap();
    assert!(ark_verify(&snark_vk, &snark_proof, &snark_public));
    let proven = prove(&pk, &w, &Cpu).unwrap();
    assert!(ark_verify(&pk.vk, &proven.proof, &proven.public));
    // a different key does not accept it
    let other = setup_with_rng(&r1cs, &mut rand::rngs::StdRng::seed_from_u64(8)).unwrap();
    assert!(!ark_verify(&other.vk, &proven.proof, &proven.public));
    // deterministic blinding gives deterministic proofs, and the CPU backend's own MSM
    // gives exactly what the arkworks reference gives
    let (r, s) = (Fr::from(3u64), Fr::from(5u64));
    let ours = prove_with(&pk, None, &w, &Cpu, r, s).unwrap().proof;
    assert_eq!(
        ours,
        prove_with(&again, None, &w, &Cpu, r, s).unwrap().proof
    );
    assert_eq!(
        ours,
        prove_with(&pk, None, &w, &Reference, r, s).unwrap().proof
    );
    // the key's MSM tables, some copies or all the MSMs can use, change nothing
    let per_copy = tables::bytes_per_copy(&pk);
    for budget in [2 * per_copy, usize::MAX] {
        let t = KeyTables::build(&pk, budget).unwrap();
        assert!(
            t.bytes() > 0 && t.bytes() <= budget,
            "{} > {budget}",
            t.bytes()
        );
        if budget == usize::MAX {
            // every window of a scalar in one bucket pass
            let b_g2 = t.b_g2.as_ref().and_then(|f| f.shifted()).unwrap();
            assert_eq!(b_g2.plan().rounds, 1, "{:?}", b_g2.plan());
        } else {
            assert_eq!(t.copies(), 3);
        }
        assert_eq!(
            ours,
            prove_with(&pk, Some(&t), &w, &Cpu, r, s).unwrap().proof
        );
    }
    assert!(KeyTables::build(&pk, per_copy - 1).is_none());
    // tables made for another key of the same size are never used for this one's
    let t = KeyTables::build(&other, 2 * per_copy).unwrap();
    assert_eq!(
        ours,
        prove_with(&pk, Some(&t), &w, &Cpu, r, s).unwrap().proof
    );
    // and a key too small for tables gets none
    let tiny = ProvingKey::from_bytes(&fixture("tiny.zkey")).unwrap();
    assert!(KeyTables::build(&tiny, usize::MAX).is_none());
}

/// Flips bytes in a copy of `data`.
fn patched(data: &[u8], at: usize, bytes: &[u8]) -> Vec<u8> {
    let mut d = data.to_vec();
    d[at..at + bytes.len()].copy_from_slice(bytes);
    d
}

/// Byte offset of section `id`'s data in an iden3 binary file.
fn section(data: &[u8], id: u32) -> usize {
    let n = u32::from_le_bytes(data[8..12].try_into().unwrap());
    let mut off = 12;
    for _ in 0..n {
        let sid = u32::from_le_bytes(data[off..off + 4].try_into().unwrap());
        let len = u64::from_le_bytes(data[off + 4..off + 12].try_into().unwrap()) as usize;
        if sid == id {
            return off + 12;
        }
        off += 12 + len;
    }
    panic!("no section {id}");
}

fn format_error(r: Result<impl std::fmt::Debug, Error>, kind: &str, needle: &str) {
    match r {
        Err(Error::Format { kind: k, reason }) => {
            assert_eq!(k, kind);
            assert!(reason.contains(needle), "{reason:?} lacks {needle:?}");
        }
        other => panic!("expected a {kind} format error with {needle:?}, got {other:?}"),
    }
}

#[test]
fn corrupt_binary_files_are_refused_naming_the_place() {
    let z = fixture("tiny.zkey");
    format_error(
        ProvingKey::from_bytes(&z[..z.len() - 1]),
        "zkey",
        "past the end",
    );
    format_error(
        ProvingKey::from_bytes(&patched(&z, 0, b"zkex")),
        "zkey",
        "not a .zkey",
    );
    format_error(
        ProvingKey::from_bytes(&fixture("tiny.r1cs")),
        "zkey",
        "not a .zkey",
    );
    format_error(
        ProvingKey::from_bytes(&patched(&z, 4, &[9, 0, 0, 0])),
        "zkey",
        "version 9",
    );
    // protocol 2 (PLONK)
    let p = section(&z, 1);
    format_error(
        ProvingKey::from_bytes(&patched(&z, p, &[2, 0, 0, 0])),
        "zkey",
        "not Groth16",
    );
    // alpha_1's x coordinate: +1 in its low byte leaves the curve
    let h = section(&z, 2);
    let alpha_x = h + 4 + 32 + 4 + 32 + 12;
    let mut bumped = z.clone();
    bumped[alpha_x] ^= 1;
    format_error(
        ProvingKey::from_bytes(&bumped),
        "zkey",
        "alpha_1: G1 point is not on the curve",
    );
    // a coordinate ≥ p (all ones)
    format_error(
        ProvingKey::from_bytes(&patched(&z, alpha_x, &[0xff; 32])),
        "zkey",
        "alpha_1: Montgomery value is not below the modulus",
    );
    // a coefficient whose signal is out of range
    let c = section(&z, 4);
    format_error(
        ProvingKey::from_bytes(&patched(&z, c + 4 + 8, &[0xff, 0xff, 0, 0])),
        "zkey",
        "outside",
    );
    // a B2 point moved off the twist
    let b2 = section(&z, 7);
    let mut off = z.clone();
    off[b2 + 128 + 3] ^= 0x10;
    format_error(ProvingKey::from_bytes(&off), "zkey", "B2[1]");

    let r = fixture("tiny.r1cs");
    format_error(R1cs::from_bytes(&r[..40]), "r1cs", "past the end");
    // the prime in the header: change its lowest byte
    let rh = section(&r, 1);
    format_error(
        R1cs::from_bytes(&patched(&r, rh + 4, &[0])),
        "r1cs",
        "not BN254",
    );
    // a wire index past n_wires in the first term of the first constraint
    let rc = section(&r, 2);
    format_error(
        R1cs::from_bytes(&patched(&r, rc + 4, &[0xff, 0xff, 0xff, 0x7f])),
        "r1cs",
        "out of range",
    );
    // a term count that cannot fit
    format_error(
        R1cs::from_bytes(&patched(&r, rc, &[0xff, 0xff, 0xff, 0xff])),
        "r1cs",
        "cannot fit",
    );

    let w = fixture("tiny.wtns");
    let ws = section(&w, 2);
    format_error(
        wtns::from_bytes(&patched(&w, ws + 32, &[0xff; 32])),
        "wtns",
        "witness[1]",
    );
    format_error(wtns::from_bytes(&w[..w.len() - 32]), "wtns", "past the end");
    let mut not_one = w.clone();
    not_one[ws] = 2;
    format_error(wtns::from_bytes(&not_one), "wtns", "witness[0]");
    // the crate's r modulus is what the files carry
    assert_eq!(
        &w[section(&w, 1) + 4..section(&w, 1) + 36],
        &Fr::MODULUS.to_bytes_le()[..]
    );
}

#[test]
fn a_proof_made_on_wgpu_is_the_cpu_proof_and_verifies() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let mut gpu = match fleetmesh_kernels::WgpuBackend::new(0) {
        Ok(g) => g,
        Err(e) => {
            assert!(!ci, "CI=true but the wgpu backend cannot run: {e}");
            eprintln!("SKIPPED wgpu proof: {e}");
            return;
        }
    };
    // the whole proof on the GPU: its small G2 MSM too (by default it would be the CPU's)
    gpu.set_g2_gpu_from(0);
    let pk = ProvingKey::from_bytes(&fixture("tiny.zkey")).unwrap();
    let w = wtns::from_bytes(&fixture("tiny.wtns")).unwrap();
    let vk = parse_vk(&fixture_json("tiny_vk.json")).unwrap();
    let (r, s) = (Fr::from(11u64), Fr::from(13u64));
    let on_gpu = prove_with(&pk, None, &w, &gpu, r, s).unwrap();
    assert_eq!(
        on_gpu.proof,
        prove_with(&pk, None, &w, &Cpu, r, s).unwrap().proof
    );
    assert!(ark_verify(&vk, &on_gpu.proof, &on_gpu.public));
    let fresh = prove(&pk, &w, &gpu).unwrap();
    assert!(ark_verify(&vk, &fresh.proof, &fresh.public));
    // the key's bases kept in device memory: the same proof, twice
    let kept = KeyTables::keep(&pk, &gpu)
        .unwrap()
        .expect("a GPU keeps the bases");
    assert!(kept.on_device());
    let bases = pk.a.len() + pk.b_g1.len() + pk.c.len() + pk.h.len();
    assert_eq!(kept.bytes(), bases * 64 + pk.b_g2.len() * 128);
    for _ in 0..2 {
        assert_eq!(
            on_gpu.proof,
            prove_with(&pk, Some(&kept), &w, &gpu, r, s).unwrap().proof
        );
    }
    // the CPU keeps nothing
    assert!(KeyTables::keep(&pk, &Cpu).unwrap().is_none());
}

/// A hand-written module with circom 2's witness-calculator interface whose `init` body is
/// `init_body`, and which reports BN254's prime.
fn calculator_module(init_body: &str, extra_exports: &str) -> String {
    let prime: String = Fr::MODULUS
        .to_bytes_le()
        .iter()
        .map(|b| format!("\\{b:02x}"))
        .collect();
    format!(
        r#"(module
  (import "runtime" "exceptionHandler" (func (param i32)))
  (import "runtime" "printErrorMessage" (func))
  (import "runtime" "writeBufferMessage" (func))
  (import "runtime" "showSharedRWMemory" (func))
  (memory (export "memory") 1)
  (data (i32.const 0) "{prime}")
  (func (export "getFieldNumLen32") (result i32) i32.const 8)
  (func (export "getRawPrime"))
  (func (export "readSharedRWMemory") (param i32) (result i32)
    local.get 0 i32.const 4 i32.mul i32.load)
  (func (export "writeSharedRWMemory") (param i32 i32))
  (func (export "init") (param i32) {init_body})
  (func (export "getWitnessSize") (result i32) i32.const 1)
  (func (export "getInputSize") (result i32) i32.const 0)
  (func (export "setInputSignal") (param i32 i32 i32))
  (func (export "getInputSignalSize") (param i32 i32) (result i32) i32.const 0)
  {extra_exports})"#
    )
}

#[test]
fn a_calculator_that_never_ends_is_stopped_and_a_foreign_module_is_named() {
    use std::time::Duration;
    let endless = calculator_module(
        "(loop $l (br $l))",
        r#"(func (export "getWitness") (param i32))"#,
    );
    let calc = WitnessCalculator::new(endless.as_bytes()).unwrap();
    let e = calc
        .calculate_with_limit(&json!({}), Duration::from_millis(200))
        .unwrap_err();
    assert!(
        matches!(e, Error::Witness(ref m) if m.contains("ran past")),
        "{e}"
    );
    // with a finishing init it runs to the end; its one "wire" reads back as the prime
    // itself (this module's shared memory), which is refused as not canonical
    let ends = calculator_module("", r#"(func (export "getWitness") (param i32))"#);
    let e = WitnessCalculator::new(ends.as_bytes())
        .unwrap()
        .calculate(&json!({}))
        .unwrap_err();
    assert!(
        matches!(e, Error::Witness(ref m) if m.contains("witness[0]") && m.contains("not below r")),
        "{e}"
    );
    // without getWitness it is not a circom 2 calculator, and says what is missing
    let partial = calculator_module("", "");
    let e = WitnessCalculator::new(partial.as_bytes())
        .unwrap()
        .calculate(&json!({}))
        .unwrap_err();
    assert!(
        matches!(e, Error::Witness(ref m) if m.contains("getWitness")),
        "{e}"
    );
}
