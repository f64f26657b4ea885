//! The invalid-proof fixtures made by `make_invalid.js` from the snarkjs tiny proof: every
//! one is refused by single and by batch verification, and a batch that holds one still
//! accepts its valid proofs.

use fleetmesh_prover::snarkjs::{parse_proof, parse_public, parse_vk};
use fleetmesh_prover::{Bn254, Error, Fr, PreparedVk, Proof, batch_verify, verify};

use crate::fixture_json;

/// Kinds that are malformed (refused while parsing) and the field each error must name.
const MALFORMED: [(&str, &str, &str); 6] = [
    ("off_curve_a", "pi_a", "not on the BN254 G1 curve"),
    ("off_curve_b", "pi_b", "not on the BN254 G2 curve"),
    (
        "wrong_subgroup_b",
        "pi_b",
        "not in the prime-order subgroup of G2",
    ),
    ("noncanonical_a", "pi_a[0]", "not canonical"),
    ("noncanonical_public", "public[", "not canonical"),
    ("infinity_a", "pi_a", "the point at infinity is not allowed"),
];

/// Kinds that are well-formed but false.
const FALSE: [&str; 5] = [
    "tampered_a",
    "tampered_c",
    "wrong_public",
    "swapped_b",
    "other_vk",
];

type Parsed = (Result<Proof<Bn254>, Error>, Result<Vec<Fr>, Error>);

fn load(kind: &str) -> Parsed {
    let proof = fixture_json(&format!("invalid/{kind}/proof.json"));
    let public = fixture_json(&format!("invalid/{kind}/public.json"));
    (parse_proof(&proof), parse_public(&public))
}

#[test]
fn every_invalid_fixture_is_refused_by_single_and_batch_verify() {
    let vk = parse_vk(&fixture_json("tiny_vk.json")).unwrap();
    let pvk = PreparedVk::new(&vk);
    let good = parse_proof(&fixture_json("tiny_proof.json")).unwrap();
    let good_public = parse_public(&fixture_json("tiny_public.json")).unwrap();
    assert!(
        verify(&pvk, &good, &good_public).unwrap(),
        "the valid fixture must verify"
    );

    for (kind, field, reason) in MALFORMED {
        let (proof, public) = load(kind);
        let err = proof
            .err()
            .or(public.err())
            .unwrap_or_else(|| panic!("{kind} parsed"));
        match err {
            Error::Malformed {
                field: f,
                reason: r,
            } => {
                assert!(f.starts_with(field), "{kind}: field {f}");
                assert!(r.contains(reason), "{kind}: {r}");
            }
            other => panic!("{kind}: {other}"),
        }
    }

    for kind in FALSE {
        let (proof, public) = load(kind);
        let (proof, public) = match (proof, public) {
            (Ok(p), Ok(x)) => (p, x),
            // swapping G2 halves usually leaves the twist; refusing it at parse is fine
            (Err(Error::Malformed { field, .. }), _) if kind == "swapped_b" => {
                assert!(field.starts_with("pi_b"));
                continue;
            }
            other => panic!("{kind}: {other:?}"),
        };
        assert!(!verify(&pvk, &proof, &public).unwrap(), "{kind} verified");
        let batch = vec![
            (good.clone(), good_public.clone()),
            (proof, public),
            (good.clone(), good_public.clone()),
        ];
        assert_eq!(
            batch_verify(&pvk, &batch).unwrap(),
            [true, false, true],
            "{kind}"
        );
    }

    let (proof, public) = load("wrong_public_count");
    let (proof, public) = (proof.unwrap(), public.unwrap());
    assert!(matches!(
        verify(&pvk, &proof, &public),
        Err(Error::PublicCount {
            expected: 3,
            got: 2
        })
    ));
    assert_eq!(
        batch_verify(
            &pvk,
            &[(good.clone(), good_public.clone()), (proof, public)]
        )
        .unwrap(),
        [true, false]
    );
}
