//! snarkjs formats and verification against proofs made by an independent prover
//! (`ark-groth16`), including invalid proofs of every kind the formats can carry.

use ark_bn254::{Bn254, Fq, Fq2, Fr, G1Affine, G2Affine};
use ark_ec::{AffineRepr, CurveGroup};
use ark_ff::PrimeField;
use ark_groth16::Proof;
use fleetmesh_prover::snarkjs::{
    parse_proof, parse_public, parse_vk, proof_to_json, public_to_json, vk_to_json,
};
use fleetmesh_prover::{
    Error, PreparedVk, batch_verify, batch_verify_grouped, batch_verify_grouped_on,
    batch_verify_on, verify,
};
use serde_json::{Value, json};

use fleetmesh_prover::testing::{prove, setup};

#[test]
fn snarkjs_json_round_trips_and_valid_proofs_verify() {
    let (pk, vk, mut rng) = setup(1);
    let vk_json = vk_to_json(&vk);
    assert_eq!(vk_json["nPublic"], 2);
    assert_eq!(vk_json["curve"], "bn128");
    let parsed = parse_vk(&vk_json).unwrap();
    assert_eq!(parsed, vk);
    let pvk = PreparedVk::new(&parsed);
    for _ in 0..4 {
        let (proof, public) = prove(&pk, &mut rng);
        let p = parse_proof(&proof_to_json(&proof)).unwrap();
        let x = parse_public(&public_to_json(&public)).unwrap();
        assert_eq!((p.clone(), x.clone()), (proof, public.clone()));
        assert!(verify(&pvk, &p, &x).unwrap());
        let mut wrong = x.clone();
        wrong[1] += Fr::from(1u8);
        assert!(
            !verify(&pvk, &p, &wrong).unwrap(),
            "a wrong public value fails"
        );
    }
}

#[test]
fn batch_names_exactly_the_bad_proofs() {
    let (pk, vk, mut rng) = setup(2);
    let pvk = PreparedVk::new(&vk);
    let mut items: Vec<_> = (0..16).map(|_| prove(&pk, &mut rng)).collect();
    assert_eq!(batch_verify(&pvk, &items).unwrap(), vec![true; 16]);
    // A wrong public value, a tampered but on-curve A, a proof from another key.
    items[3].1[0] += Fr::from(7u8);
    items[8].0.a = (items[8].0.a + G1Affine::generator()).into_affine();
    let (other_pk, _, mut other_rng) = setup(3);
    items[13] = prove(&other_pk, &mut other_rng);
    // The wrong number of public inputs.
    items[15].1.push(Fr::from(1u8));
    let got = batch_verify(&pvk, &items).unwrap();
    let bad: Vec<usize> = got
        .iter()
        .enumerate()
        .filter(|(_, v)| !**v)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(bad, vec![3, 8, 13, 15]);
    // Each agrees with single verification.
    for (i, (p, x)) in items.iter().enumerate() {
        let single = verify(&pvk, p, x).unwrap_or(false);
        assert_eq!(single, got[i], "item {i}");
    }
}

/// A GPU double (no GPU needed): says it takes every batch's weights, computes them with
/// arkworks' reference and counts the points it was given, so the verifier's GPU path
/// (all weights in one call, split back across the Miller-loop threads) runs anywhere.
/// The real GPUs run the same path in `meshnode proof batch-verify --backend wgpu` (CI:
/// lavapipe) and `fleetmesh-bench groth16-verify N --backend …` (bench/gpu/run.sh).
#[derive(Default)]
struct GpuDouble(std::sync::atomic::AtomicUsize);

impl fleetmesh_kernels::MsmNtt for GpuDouble {
    fn describe(&self) -> String {
        "gpu double".into()
    }

    fn scales_on_gpu(&self, _points: usize) -> bool {
        true
    }

    fn scale_g1(
        &self,
        points: &[G1Affine],
        weights: &[u128],
    ) -> fleetmesh_kernels::Result<Vec<G1Affine>> {
        self.0
            .fetch_add(points.len(), std::sync::atomic::Ordering::Relaxed);
        fleetmesh_kernels::ops::Reference.scale_g1(points, weights)
    }
}

#[test]
fn batch_verify_with_the_weights_on_a_gpu_double_names_exactly_the_bad_proofs() {
    let (pk, vk, mut rng) = setup(9);
    let pvk = PreparedVk::new(&vk);
    let gpu = GpuDouble::default();
    // enough proofs for several Miller-loop threads, each taking its slice of the products
    let mut items: Vec<_> = (0..40).map(|_| prove(&pk, &mut rng)).collect();
    assert_eq!(batch_verify_on(&gpu, &pvk, &items).unwrap(), vec![true; 40]);
    assert_eq!(
        gpu.0.load(std::sync::atomic::Ordering::Relaxed),
        80,
        "A and C of each"
    );
    items[5].0.c = (items[5].0.c + G1Affine::generator()).into_affine();
    items[33].0.a = (items[33].0.a + G1Affine::generator()).into_affine();
    items[21].1[1] += Fr::from(1u8);
    let got = batch_verify_on(&gpu, &pvk, &items).unwrap();
    assert_eq!(got, batch_verify(&pvk, &items).unwrap());
    let bad: Vec<usize> = (0..40).filter(|&i| !got[i]).collect();
    assert_eq!(bad, vec![5, 21, 33]);
    // grouped under two keys, the same verdicts as on the CPU
    let (pk2, vk2, mut rng2) = setup(10);
    let keys = [PreparedVk::new(&vk), PreparedVk::new(&vk2)];
    let mut grouped: Vec<(usize, _)> = items.iter().cloned().map(|it| (0, it)).collect();
    grouped.extend((0..3).map(|_| (1, prove(&pk2, &mut rng2))));
    assert_eq!(
        batch_verify_grouped_on(&gpu, &keys, &grouped).unwrap(),
        batch_verify_grouped(&keys, &grouped).unwrap()
    );
}

#[test]
fn two_invalid_proofs_that_cancel_under_equal_weights_are_caught() {
    let (pk, vk, mut rng) = setup(4);
    let pvk = PreparedVk::new(&vk);
    let (proof, public) = prove(&pk, &mut rng);
    // (A+P, B, C) and (A−P, B, C): with weights 1 and 1 the products cancel exactly.
    let p = (G1Affine::generator() * Fr::from(12345u32)).into_affine();
    let mut plus = proof.clone();
    plus.a = (proof.a + p).into_affine();
    let mut minus = proof.clone();
    minus.a = (proof.a.into_group() - p).into_affine();
    let equal_weights_would_pass = {
        use ark_ec::pairing::Pairing;
        Bn254::pairing(plus.a, plus.b) + Bn254::pairing(minus.a, minus.b)
            == Bn254::pairing(proof.a, proof.b) + Bn254::pairing(proof.a, proof.b)
    };
    assert!(equal_weights_would_pass, "the pair really cancels");
    let got = batch_verify(
        &pvk,
        &[
            (plus, public.clone()),
            (minus, public.clone()),
            (proof, public),
        ],
    )
    .unwrap();
    assert_eq!(got, vec![false, false, true]);
}

#[test]
fn proofs_under_several_keys_are_grouped() {
    let (pk1, vk1, mut r1) = setup(5);
    let (pk2, vk2, mut r2) = setup(6);
    let keys = vec![
        PreparedVk::new(&vk1),
        PreparedVk::new(&vk2),
        PreparedVk::new(&vk1),
    ];
    let mut items = Vec::new();
    for i in 0..6 {
        items.push((
            i % 3,
            if i % 3 == 1 {
                prove(&pk2, &mut r2)
            } else {
                prove(&pk1, &mut r1)
            },
        ));
    }
    // One proof filed under the wrong key.
    let stray = prove(&pk2, &mut r2);
    items.push((0, stray));
    let got = batch_verify_grouped(&keys, &items).unwrap();
    assert_eq!(got, vec![true, true, true, true, true, true, false]);
}

fn p_plus(x: &Value) -> String {
    let n: num_bigint::BigUint = x.as_str().unwrap().parse().unwrap();
    (n + num_bigint::BigUint::from(Fq::MODULUS)).to_string()
}

#[test]
fn malformed_documents_are_refused_naming_the_field() {
    let (pk, vk, mut rng) = setup(7);
    let (proof, public) = prove(&pk, &mut rng);
    let pj = proof_to_json(&proof);
    let vj = vk_to_json(&vk);
    let xj = public_to_json(&public);
    let expect = |r: Result<Proof<Bn254>, Error>, field: &str, reason: &str| match r {
        Err(Error::Malformed {
            field: f,
            reason: why,
        }) => {
            assert_eq!(f, field, "{why}");
            assert!(
                why.contains(reason),
                "{field}: {why:?} should say {reason:?}"
            );
        }
        other => panic!("{field}: expected a refusal, got {other:?}"),
    };
    // Non-canonical coordinate: x + p is the same residue, and must be refused.
    let mut j = pj.clone();
    j["pi_a"][0] = Value::from(p_plus(&pj["pi_a"][0]));
    expect(parse_proof(&j), "pi_a[0]", "not below the field modulus p");
    // Leading zeros, signs, non-strings.
    for bad in [
        json!("0123"),
        json!("-1"),
        json!("+1"),
        json!(""),
        json!(5),
        json!("1e3"),
    ] {
        let mut j = pj.clone();
        j["pi_c"][1] = bad.clone();
        expect(
            parse_proof(&j),
            "pi_c[1]",
            if bad.is_string() {
                "canonical decimal"
            } else {
                "decimal string"
            },
        );
    }
    // Off the curve.
    let mut j = pj.clone();
    let y: num_bigint::BigUint = pj["pi_a"][1].as_str().unwrap().parse().unwrap();
    j["pi_a"][1] = Value::from((y + 1u8).to_string());
    expect(parse_proof(&j), "pi_a", "not on the BN254 G1 curve");
    // Swapped G2 coordinate halves.
    let mut j = pj.clone();
    let x0 = j["pi_b"][0][0].clone();
    j["pi_b"][0][0] = j["pi_b"][0][1].clone();
    j["pi_b"][0][1] = x0;
    expect(parse_proof(&j), "pi_b", "not on the BN254 G2 curve");
    // On the G2 curve but outside the prime-order subgroup.
    let outside = (1u64..)
        .find_map(|i| {
            G2Affine::get_point_from_x_unchecked(Fq2::new(Fq::from(i), Fq::from(1u8)), false)
                .filter(|p| !p.is_in_correct_subgroup_assuming_on_curve())
        })
        .unwrap();
    let mut j = pj.clone();
    let mut fake = proof.clone();
    fake.b = outside;
    j["pi_b"] = proof_to_json(&fake)["pi_b"].clone();
    expect(parse_proof(&j), "pi_b", "not in the prime-order subgroup");
    // The point at infinity where the protocol forbids it.
    let mut j = pj.clone();
    j["pi_c"] = json!(["0", "1", "0"]);
    expect(parse_proof(&j), "pi_c", "infinity is not allowed");
    // z other than 1.
    let mut j = pj.clone();
    j["pi_a"][2] = json!("2");
    expect(parse_proof(&j), "pi_a[2]", "z must be");
    // Wrong curve or protocol.
    let mut j = pj.clone();
    j["curve"] = json!("bls12381");
    expect(parse_proof(&j), "curve", "bn128");
    // Public inputs: ≥ r refused, count checked against the key.
    let mut x = xj.clone();
    let r: num_bigint::BigUint = Fr::MODULUS.into();
    x[0] = Value::from(r.to_string());
    match parse_public(&x) {
        Err(Error::Malformed { field, reason }) => {
            assert_eq!(field, "public[0]");
            assert!(reason.contains("modulus r"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let pvk = PreparedVk::new(&vk);
    assert!(matches!(
        verify(&pvk, &proof, &public[..1]),
        Err(Error::PublicCount {
            expected: 2,
            got: 1
        })
    ));
    // Verifying keys: IC count must match nPublic; α must not be infinity.
    let mut v = vj.clone();
    v["nPublic"] = json!(3);
    assert!(parse_vk(&v).unwrap_err().to_string().starts_with("IC:"));
    // A crafted nPublic cannot overflow, and a key needs at least IC[0].
    let mut v = vj.clone();
    v["nPublic"] = json!(u64::MAX);
    assert!(
        parse_vk(&v)
            .unwrap_err()
            .to_string()
            .starts_with("nPublic:")
    );
    let mut v = vj.clone();
    v["nPublic"] = json!(0);
    v["IC"] = json!([]);
    assert!(parse_vk(&v).unwrap_err().to_string().starts_with("IC:"));
    let mut v = vj.clone();
    v["vk_alpha_1"] = json!(["0", "1", "0"]);
    assert!(
        parse_vk(&v)
            .unwrap_err()
            .to_string()
            .starts_with("vk_alpha_1:")
    );
    let mut v = vj;
    v["vk_delta_2"][1][0] = Value::from(p_plus(&v["vk_delta_2"][1][0]));
    assert!(
        parse_vk(&v)
            .unwrap_err()
            .to_string()
            .starts_with("vk_delta_2[1][0]:")
    );
}
