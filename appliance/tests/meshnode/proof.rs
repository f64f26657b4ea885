//! `meshnode proof verify` and `batch-verify` on snarkjs JSON files of proofs made by an
//! independent prover (`ark-groth16`).

use ark_ec::{AffineRepr, CurveGroup};
use fleetmesh_prover::snarkjs::{proof_to_json, public_to_json, vk_to_json};
use fleetmesh_prover::testing::{prove, setup};

use super::*;

fn write(path: &Path, v: &Value) {
    std::fs::write(path, v.to_string()).unwrap();
}

fn lines(o: &Output) -> Vec<Value> {
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn verify_gives_a_json_verdict_and_the_exit_code() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (pk, vk, mut rng) = setup(11);
    let (proof, public) = prove(&pk, &mut rng);
    write(&d.join("vk.json"), &vk_to_json(&vk));
    write(&d.join("proof.json"), &proof_to_json(&proof));
    write(&d.join("public.json"), &public_to_json(&public));
    let args = |p: &str, x: &str| {
        vec![
            "proof".to_owned(),
            "verify".into(),
            "--vk".into(),
            d.join("vk.json").display().to_string(),
            "--proof".into(),
            d.join(p).display().to_string(),
            "--public".into(),
            d.join(x).display().to_string(),
        ]
    };
    let call = |a: Vec<String>| meshnode().args(a).output().unwrap();

    let o = call(args("proof.json", "public.json"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(lines(&o), vec![serde_json::json!({"valid": true})]);

    // A wrong public value: invalid, exit 1.
    let mut wrong = public_to_json(&public);
    wrong[0] = Value::from("5");
    write(&d.join("wrong.json"), &wrong);
    let o = call(args("proof.json", "wrong.json"));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(lines(&o)[0]["valid"], false);

    // Off-curve A: malformed, exit 2, the field named.
    let mut bad = proof_to_json(&proof);
    bad["pi_a"][1] = Value::from("1");
    write(&d.join("bad.json"), &bad);
    let o = call(args("bad.json", "public.json"));
    assert_eq!(o.status.code(), Some(2));
    let v = &lines(&o)[0];
    assert_eq!(v["valid"], false);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("pi_a: not on the BN254 G1 curve"),
        "{v}"
    );
    // Too few public inputs: malformed.
    write(
        &d.join("short.json"),
        &serde_json::json!([public_to_json(&public)[0]]),
    );
    let o = call(args("proof.json", "short.json"));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        lines(&o)[0]["error"]
            .as_str()
            .unwrap()
            .contains("takes 2, got 1")
    );
    // A missing file.
    assert_eq!(
        call(args("nope.json", "public.json")).status.code(),
        Some(2)
    );
}

#[test]
fn batch_verify_names_bad_items_by_directory_and_by_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (pk, vk, mut rng) = setup(12);
    let (pk2, vk2, mut rng2) = setup(13);
    write(&d.join("vk.json"), &vk_to_json(&vk));
    write(&d.join("vk2.json"), &vk_to_json(&vk2));
    let mut dirs = Vec::new();
    for i in 0..8 {
        let (mut proof, mut public) = prove(&pk, &mut rng);
        if i == 2 {
            public[1] += fleetmesh_prover::Fr::from(1u8); // wrong value
        }
        if i == 5 {
            proof.c = (proof.c + ark_bn254::G1Affine::generator()).into_affine(); // tampered, on curve
        }
        let dir = d.join(format!("p{i}"));
        std::fs::create_dir(&dir).unwrap();
        write(&dir.join("proof.json"), &proof_to_json(&proof));
        write(&dir.join("public.json"), &public_to_json(&public));
        dirs.push(dir);
    }
    let mut args = vec![
        "proof".to_owned(),
        "batch-verify".into(),
        "--vk".into(),
        d.join("vk.json").display().to_string(),
    ];
    args.extend(dirs.iter().map(|p| p.display().to_string()));
    let o = meshnode().args(&args).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = lines(&o);
    assert_eq!(out.len(), 9);
    let bad: Vec<u64> = out[..8]
        .iter()
        .filter(|v| v["valid"] == false)
        .map(|v| v["index"].as_u64().unwrap())
        .collect();
    assert_eq!(bad, vec![2, 5]);
    assert_eq!(
        out[8],
        serde_json::json!({"total": 8, "valid": 6, "invalid": 2, "malformed": 0, "keys": 1})
    );
    // the same batch with its weights on a GPU: the same verdicts (CI: lavapipe)
    let o = meshnode()
        .args(&args)
        .args(["--backend", "wgpu"])
        .output()
        .unwrap();
    if o.status.code() == Some(1) {
        assert_eq!(lines(&o), out, "{}", stderr(&o));
        assert!(stderr(&o).contains("backend wgpu ("), "{}", stderr(&o));
    } else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but batch-verify --backend wgpu failed: {}",
            stderr(&o)
        );
        eprintln!("SKIPPED wgpu batch verify: {}", stderr(&o));
    }
    // a GPU that exists nowhere: refused by name, never a quiet CPU run
    let o = meshnode()
        .args(&args)
        .args(["--backend", "cuda:9"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cuda:9"), "{}", stderr(&o));

    // A manifest with two keys; one item malformed (exit 2), the others still judged.
    let (p2, x2) = prove(&pk2, &mut rng2);
    let dir = d.join("k2");
    std::fs::create_dir(&dir).unwrap();
    write(&dir.join("proof.json"), &proof_to_json(&p2));
    write(&dir.join("public.json"), &public_to_json(&x2));
    std::fs::write(d.join("broken.json"), "{").unwrap();
    let manifest = serde_json::json!({"items": [
        {"vk": "vk.json", "proof": "p0/proof.json", "public": "p0/public.json"},
        {"vk": "vk2.json", "proof": "k2/proof.json", "public": "k2/public.json"},
        {"vk": "vk.json", "proof": "k2/proof.json", "public": "k2/public.json"},
        {"vk": "vk.json", "proof": "broken.json", "public": "p1/public.json"},
    ]});
    write(&d.join("batch.json"), &manifest);
    let o = meshnode()
        .args([
            "proof",
            "batch-verify",
            "--manifest",
            d.join("batch.json").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let out = lines(&o);
    let valid: Vec<&Value> = out[..4].iter().map(|v| &v["valid"]).collect();
    assert_eq!(
        valid,
        vec![
            &Value::from(true),
            &Value::from(true),
            &Value::from(false),
            &Value::from(false)
        ]
    );
    assert!(
        out[3]["reason"].as_str().unwrap().starts_with("malformed:"),
        "{}",
        out[3]
    );
    assert_eq!(out[4]["keys"], 2);

    // Usage errors.
    assert_eq!(
        meshnode()
            .args(["proof", "batch-verify"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(2)
    );
}

/// The prover's circom/snarkjs fixtures.
fn circom(name: &str) -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("../prover/tests/fixtures/circom")
        .join(name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `meshnode proof prove --zkey ZKEY WITNESS… --backend cpu`, writing proof.json and
/// public.json into `out`.
fn prove_cli(zkey: &Path, witness: &[&str], out: &Path) -> Output {
    prove_cli_on(zkey, witness, out, "cpu")
}

/// [`prove_cli`] on `backend`.
fn prove_cli_on(zkey: &Path, witness: &[&str], out: &Path, backend: &str) -> Output {
    let (proof, public) = (out.join("proof.json"), out.join("public.json"));
    let mut args = vec!["proof", "prove", "--zkey", s(zkey)];
    args.extend(witness);
    args.extend([
        "--proof",
        s(&proof),
        "--public",
        s(&public),
        "--backend",
        backend,
    ]);
    run(&args)
}

/// `meshnode proof verify` of `out`'s proof.json and public.json under `vk`.
fn verify_cli(vk: &Path, out: &Path) -> Output {
    let (proof, public) = (out.join("proof.json"), out.join("public.json"));
    run(&[
        "proof",
        "verify",
        "--vk",
        s(vk),
        "--proof",
        s(&proof),
        "--public",
        s(&public),
    ])
}

#[test]
fn setup_then_prove_from_wasm_and_from_wtns_then_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let (zkey, vk) = (d.join("c.zkey"), d.join("vk.json"));
    let o = run(&[
        "proof",
        "setup",
        "--r1cs",
        s(&circom("tiny.r1cs")),
        "--zkey",
        s(&zkey),
        "--vk",
        s(&vk),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("Never use this key in production"));
    let summary = &lines(&o)[0];
    assert_eq!(
        (summary["ok"].as_bool(), summary["public"].as_u64()),
        (Some(true), Some(3))
    );

    let (wasm, input) = (circom("tiny.wasm"), circom("tiny_input.json"));
    let o = prove_cli(&zkey, &["--wasm", s(&wasm), "--input", s(&input)], d);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(lines(&o)[0]["ok"], true);
    let expected: Value =
        serde_json::from_slice(&std::fs::read(circom("tiny_public.json")).unwrap()).unwrap();
    let got: Value =
        serde_json::from_slice(&std::fs::read(d.join("public.json")).unwrap()).unwrap();
    assert_eq!(got, expected);
    let o = verify_cli(&vk, d);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));

    // the snarkjs-made key and witness, too; the proof verifies under snarkjs's vk
    let wtns = circom("tiny.wtns");
    let o = prove_cli(&circom("tiny.zkey"), &["--wtns", s(&wtns)], d);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = verify_cli(&circom("tiny_vk.json"), d);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
}

#[test]
fn prove_exit_codes_separate_unsatisfied_inputs_from_malformed_files() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let proof = d.join("proof.json");
    let wasm = circom("tiny.wasm");
    let prove =
        |zkey: &Path, input: &Path| prove_cli(zkey, &["--wasm", s(&wasm), "--input", s(input)], d);
    // fails LessThan's range assert: exit 1, nothing written
    let bad_input = d.join("bad.json");
    std::fs::write(&bad_input, r#"{"a": "1000", "b": "0", "w": "1"}"#).unwrap();
    let o = prove(&circom("tiny.zkey"), &bad_input);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        lines(&o)[0]["reason"]
            .as_str()
            .unwrap()
            .contains("assert failed")
    );
    assert!(!proof.exists());
    // an unknown signal: exit 2, named
    std::fs::write(&bad_input, r#"{"a": "3", "b": "11", "w": "5", "z": "1"}"#).unwrap();
    let o = prove(&circom("tiny.zkey"), &bad_input);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        lines(&o)[0]["error"].as_str().unwrap().contains("\"z\""),
        "{}",
        stdout(&o)
    );
    // a truncated zkey: exit 2, named
    let z = d.join("cut.zkey");
    let bytes = std::fs::read(circom("tiny.zkey")).unwrap();
    std::fs::write(&z, &bytes[..bytes.len() / 2]).unwrap();
    let o = prove(&z, &circom("tiny_input.json"));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        lines(&o)[0]["error"]
            .as_str()
            .unwrap()
            .contains("zkey file"),
        "{}",
        stdout(&o)
    );
    // neither witness source
    let o = run(&[
        "proof", "prove", "--zkey", "x", "--proof", "p", "--public", "q",
    ]);
    assert_eq!(o.status.code(), Some(2));
    // an r1cs that is not one
    let o = run(&[
        "proof",
        "setup",
        "--r1cs",
        s(&circom("tiny.zkey")),
        "--zkey",
        s(&z),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        lines(&o)[0]["error"]
            .as_str()
            .unwrap()
            .contains("not a .r1cs")
    );
}

#[test]
fn prove_on_wgpu_verifies_and_an_absent_cuda_is_refused_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let wtns = circom("tiny.wtns");
    let o = prove_cli_on(&circom("tiny.zkey"), &["--wtns", s(&wtns)], d, "wgpu");
    if o.status.success() {
        assert_eq!(lines(&o)[0]["ok"], true);
        let o = verify_cli(&circom("tiny_vk.json"), d);
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    } else {
        // only without any wgpu adapter; CI installs lavapipe, so there it must prove
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but --backend wgpu failed: {}",
            stderr(&o)
        );
        eprintln!("SKIPPED wgpu prove: {}", stderr(&o));
    }
    // cuda:9 exists nowhere: a clear refusal (exit 2, named), never a crash
    let o = prove_cli_on(&circom("tiny.zkey"), &["--wtns", s(&wtns)], d, "cuda:9");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("cuda:9"), "{}", stderr(&o));
}

#[test]
fn a_full_proving_queue_answers_503_with_retry_after_and_the_admitted_proofs_complete() {
    let tmp = tempfile::tempdir().unwrap();
    let node = tmp.path().join("n");
    assert!(init(&node, &[]).status.success());
    // a circuit of 2^14 constraints, slow enough that requests pile up behind one proof
    let circuit = node.join("circuits/chain");
    std::fs::create_dir_all(&circuit).unwrap();
    let o = run(&[
        "proof",
        "setup",
        "--r1cs",
        s(&circom("chain.r1cs")),
        "--zkey",
        s(&circuit.join("circuit.zkey")),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::copy(circom("chain.wasm"), circuit.join("circuit.wasm")).unwrap();
    let input: Value =
        serde_json::from_slice(&std::fs::read(circom("chain_input.json")).unwrap()).unwrap();
    let d = run_node(&node);
    let (ok, busy) = runtime().block_on(async {
        let http = http_client();
        let body = serde_json::json!({"circuit": "chain", "input": input}).to_string();
        let sends = (0..14).map(|_| {
            http.post(d.url("/v1/proofs/prove"))
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
        });
        let answers = futures_util::future::join_all(sends).await;
        let (mut ok, mut busy) = (0, 0);
        for r in answers {
            let r = r.unwrap();
            match r.status().as_u16() {
                200 => ok += 1,
                503 => {
                    assert_eq!(r.headers()["retry-after"], "2");
                    let v: Value = r.json().await.unwrap();
                    assert_eq!(v["error"]["code"], "busy", "{v}");
                    busy += 1;
                }
                other => panic!("status {other}: {}", r.text().await.unwrap()),
            }
        }
        (ok, busy)
    });
    // at most 8 admitted (one proving, the rest waiting), every admitted one proved
    assert!((1..=8).contains(&ok), "{ok} proved");
    assert_eq!(ok + busy, 14);
}
