//! The prover's readers: snarkjs's JSON (verifying key, proof, public signals) and the
//! iden3 binary files (`.zkey`, `.r1cs`, `.wtns`).

use fleetmesh_prover::{R1cs, snarkjs, wtns, zkey::ProvingKey};
use serde_json::Value;

/// A JSON document read as a verifying key, a proof and public signals (whichever it
/// is); what parses is written back and must read back the same. When a key, a proof and
/// signals all come out of one document (`{"vk": …, "proof": …, "public": …}`), the
/// proof is verified.
pub fn snarkjs(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let docs = [
        &v,
        v.get("vk").unwrap_or(&Value::Null),
        v.get("proof").unwrap_or(&Value::Null),
        v.get("public").unwrap_or(&Value::Null),
    ];
    let (mut vk, mut proof, mut public) = (None, None, None);
    for d in docs {
        if let Ok(k) = snarkjs::parse_vk(d) {
            let back = snarkjs::parse_vk(&snarkjs::vk_to_json(&k)).expect("a written key reads");
            assert_eq!(back, k);
            vk.get_or_insert(k);
        }
        if let Ok(p) = snarkjs::parse_proof(d) {
            let back =
                snarkjs::parse_proof(&snarkjs::proof_to_json(&p)).expect("a written proof reads");
            assert_eq!(back, p);
            proof.get_or_insert(p);
        }
        if let Ok(s) = snarkjs::parse_public(d) {
            let back =
                snarkjs::parse_public(&snarkjs::public_to_json(&s)).expect("written signals read");
            assert_eq!(back, s);
            public.get_or_insert(s);
        }
    }
    if let (Some(vk), Some(proof), Some(public)) = (vk, proof, public)
        && snarkjs::check_public_count(&vk, &public).is_ok()
    {
        let pvk = fleetmesh_prover::PreparedVk::new(&vk);
        let _ = fleetmesh_prover::verify(&pvk, &proof, &public);
    }
}

/// A `.zkey`; one that parses must write out and read back the same.
pub fn zkey(data: &[u8]) {
    if let Ok(pk) = ProvingKey::from_bytes(data) {
        let back = ProvingKey::from_bytes(&pk.to_bytes()).expect("a written zkey reads");
        assert!(back == pk, "the zkey round trip changed the key");
    }
}

/// A `.r1cs`; one that parses must write out and read back the same, and checking a
/// witness of the right length must not fail other than by saying so.
pub fn r1cs(data: &[u8]) {
    if let Ok(r) = R1cs::from_bytes(data) {
        let back = R1cs::from_bytes(&r.to_bytes()).expect("a written r1cs reads");
        assert_eq!(back, r);
        if r.n_wires <= 1 << 12 {
            let w = vec![fleetmesh_prover::Fr::from(1u8); r.n_wires as usize];
            let _ = r.check_witness(&w);
        }
    }
}

/// A `.wtns`; one that parses must write out and read back the same.
pub fn wtns(data: &[u8]) {
    if let Ok(w) = wtns::from_bytes(data) {
        assert_eq!(
            wtns::from_bytes(&wtns::to_bytes(&w)).expect("a written wtns reads"),
            w
        );
    }
}
