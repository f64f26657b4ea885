//! The daemon's prover over HTTP: installed circuits proved through the one proving
//! queue, and proofs verified in batches by the gatherer.

use super::*;

#[test]
fn the_daemon_verifies_proofs_over_http_in_batches() {
    use fleetmesh_prover::snarkjs::{proof_to_json, public_to_json, vk_to_json};
    use fleetmesh_prover::testing::{prove, setup};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert!(init(&dir, &[]).status.success());
    let daemon = run_node(&dir);
    let (pk, vk, mut rng) = setup(21);
    let (pk2, vk2, mut rng2) = setup(22);
    let body = |vk: &Value,
                p: &(
        fleetmesh_prover::Proof<fleetmesh_prover::Bn254>,
        Vec<fleetmesh_prover::Fr>,
    )| {
        serde_json::json!({"vk": vk, "proof": proof_to_json(&p.0), "public": public_to_json(&p.1)})
    };
    let (vj, vj2) = (vk_to_json(&vk), vk_to_json(&vk2));
    let url = daemon.url("/v1/proofs/verify");
    runtime().block_on(async {
        let http = http_client();
        let post = |b: Value| post_json(&http, &url, b);
        // One valid, one with a wrong public value.
        let good = prove(&pk, &mut rng);
        assert_eq!(
            post(body(&vj, &good)).await,
            (200, serde_json::json!({"valid": true}))
        );
        let mut wrong = good.clone();
        wrong.1[0] += fleetmesh_prover::Fr::from(1u8);
        let (status, v) = post(body(&vj, &wrong)).await;
        assert_eq!((status, &v["valid"]), (200, &Value::from(false)), "{v}");
        // Malformed: 400 naming the field.
        let mut bad = body(&vj, &good);
        bad["proof"]["pi_a"][1] = Value::from("1");
        let (status, v) = post(bad).await;
        assert_eq!(status, 400);
        assert_eq!(v["error"]["code"], "malformed");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("proof.pi_a: not on the BN254 G1 curve"),
            "{v}"
        );
        let (status, _) = post(Value::from("not an object")).await;
        assert_eq!(status, 400);
        let too_many = serde_json::json!({"items": vec![serde_json::json!({}); 1025]});
        let (status, v) = post(too_many).await;
        assert_eq!(status, 400);
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("at most 1024"),
            "{v}"
        );
        // Many at once, two keys, some bad: each answered correctly (batched server-side).
        let mut expected = Vec::new();
        let mut requests = Vec::new();
        for i in 0..24 {
            let (k, p) = if i % 2 == 0 {
                (&vj, prove(&pk, &mut rng))
            } else {
                (&vj2, prove(&pk2, &mut rng2))
            };
            let mut p = p;
            let ok = i % 7 != 3;
            if !ok {
                p.1[1] += fleetmesh_prover::Fr::from(2u8);
            }
            expected.push(ok);
            requests.push(post(body(k, &p)));
        }
        let answers = futures_util::future::join_all(requests).await;
        let got: Vec<bool> = answers
            .iter()
            .map(|(s, v)| {
                assert_eq!(*s, 200);
                v["valid"].as_bool().unwrap()
            })
            .collect();
        assert_eq!(got, expected);
        // The items form.
        let items =
            serde_json::json!({"items": [body(&vj, &good), body(&vj2, &good), body(&vj, &wrong)]});
        let (status, v) = post(items).await;
        assert_eq!(status, 200);
        let valid: Vec<&Value> = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["valid"])
            .collect();
        assert_eq!(
            valid,
            vec![&Value::from(true), &Value::from(false), &Value::from(false)]
        );
    });
    assert!(daemon.stop("-TERM").success());
}

#[test]
fn the_daemon_proves_installed_circuits_over_http() {
    use fleetmesh_prover::snarkjs::{parse_proof, parse_public, parse_vk};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n");
    assert!(init(&dir, &[]).status.success());
    edit_config(&dir, &[("backend = \"auto\"", "backend = \"cpu\"")]);
    let fixtures =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("../prover/tests/fixtures/circom");
    let circuit = dir.join("circuits/tiny");
    std::fs::create_dir_all(&circuit).unwrap();
    std::fs::copy(fixtures.join("tiny.zkey"), circuit.join("circuit.zkey")).unwrap();
    std::fs::copy(fixtures.join("tiny.wasm"), circuit.join("circuit.wasm")).unwrap();
    let read = |n: &str| -> Value {
        serde_json::from_slice(&std::fs::read(fixtures.join(n)).unwrap()).unwrap()
    };
    let vk = parse_vk(&read("tiny_vk.json")).unwrap();
    let pvk = fleetmesh_prover::PreparedVk::new(&vk);
    let daemon = run_node(&dir);
    let url = daemon.url("/v1/proofs/prove");
    runtime().block_on(async {
        let http = http_client();
        let post = |b: Value| post_json(&http, &url, b);
        // from inputs
        let (status, v) = post(serde_json::json!({"circuit": "tiny", "input": read("tiny_input.json")})).await;
        assert_eq!(status, 200, "{v}");
        let proof = parse_proof(&v["proof"]).unwrap();
        let public = parse_public(&v["public"]).unwrap();
        assert_eq!(v["public"], read("tiny_public.json"));
        assert!(fleetmesh_prover::verify(&pvk, &proof, &public).unwrap());
        // from a full witness
        let w = fleetmesh_prover::wtns::from_bytes(&std::fs::read(fixtures.join("tiny.wtns")).unwrap()).unwrap();
        let (status, v) = post(serde_json::json!({"circuit": "tiny", "witness": fleetmesh_prover::snarkjs::public_to_json(&w)})).await;
        assert_eq!(status, 200, "{v}");
        let proof = parse_proof(&v["proof"]).unwrap();
        assert!(fleetmesh_prover::verify(&pvk, &proof, &public).unwrap());
        // a witness that does not satisfy the circuit
        let mut bad = w.clone();
        bad[5] += fleetmesh_prover::Fr::from(1u8);
        let (status, v) = post(serde_json::json!({"circuit": "tiny", "witness": fleetmesh_prover::snarkjs::public_to_json(&bad)})).await;
        assert_eq!((status, v["error"]["code"].as_str()), (422, Some("unsatisfied")), "{v}");
        // a witness entry that is not a canonical number, and a witness that is no array
        let mut bad_entry = fleetmesh_prover::snarkjs::public_to_json(&w);
        bad_entry[2] = Value::from("x");
        let (status, v) = post(serde_json::json!({"circuit": "tiny", "witness": bad_entry})).await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().starts_with("witness[2]: "), "{v}");
        let (status, v) = post(serde_json::json!({"circuit": "tiny", "witness": "1"})).await;
        assert_eq!(status, 400, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().starts_with("witness: "), "{v}");
        // an input that fails an assert
        let (status, v) = post(serde_json::json!({"circuit": "tiny", "input": {"a": "1000", "b": "0", "w": "1"}})).await;
        assert_eq!((status, v["error"]["code"].as_str()), (422, Some("unsatisfied")), "{v}");
        // unknown signal, unknown circuit, bad name, both sources, not JSON
        let (status, v) = post(serde_json::json!({"circuit": "tiny", "input": {"q": "1"}})).await;
        assert_eq!((status, v["error"]["code"].as_str()), (400, Some("malformed")), "{v}");
        let (status, v) = post(serde_json::json!({"circuit": "nope", "input": {}})).await;
        assert_eq!((status, v["error"]["code"].as_str()), (404, Some("unknown_circuit")), "{v}");
        let (status, v) = post(serde_json::json!({"circuit": "../n", "input": {}})).await;
        assert_eq!((status, v["error"]["code"].as_str()), (400, Some("malformed")), "{v}");
        let (status, _) = post(serde_json::json!({"circuit": "tiny", "input": {}, "witness": []})).await;
        assert_eq!(status, 400);
        let r = http.post(&url).header("content-type", "application/json").body("{").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400);
        // six at once: each answered with its own verifying proof; those that waited
        // together were proved as one batch, and every answer says the size of its batch
        let answers = futures_util::future::join_all((0..6).map(|_| {
            post(serde_json::json!({"circuit": "tiny", "input": read("tiny_input.json")}))
        }))
        .await;
        let mut sizes = std::collections::BTreeMap::<u64, u64>::new();
        for (status, v) in &answers {
            assert_eq!(*status, 200, "{v}");
            let proof = parse_proof(&v["proof"]).unwrap();
            assert!(fleetmesh_prover::verify(&pvk, &proof, &public).unwrap());
            *sizes.entry(v["batch"].as_u64().unwrap()).or_default() += 1;
        }
        for (size, answered) in sizes {
            assert!(size >= 1 && answered % size == 0, "{answered} answers of batches of {size}");
        }
        // the daemon is still healthy
        let r = http.get(daemon.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
    });
}
