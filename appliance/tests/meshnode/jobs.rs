//! The compute market through `meshnode run`: a buyer submits WASI jobs with `meshnode
//! job`, follows them, fetches the decrypted result and the receipt — which verifies with
//! the `nostr` crate, is on the node's relay, and carries a job id only the two parties
//! can link — while runaway and malformed jobs fail cleanly and the node keeps serving,
//! also across a restart.

use super::*;
use fleetmesh_proto::NodeKeys;

/// The demo job module (`meshnode up --demo` ships it): upper-cases stdin into stdout and
/// `/outputs/out.txt`.
const UPPER: &str = include_str!("../../demo/upper.wat");

pub(super) fn job(args: &[&str], node: &Daemon, buyer: &Path) -> (Output, Value) {
    let mut all = vec!["job"];
    all.extend_from_slice(args);
    let url = node.url("");
    all.extend(["--node", &url, "--key-dir", buyer.to_str().unwrap()]);
    let o = run(&all);
    let v = serde_json::from_str(stdout(&o).trim()).unwrap_or(Value::Null);
    (o, v)
}

/// Polls `job status` until the job is final; its exit code and state.
pub(super) fn wait_final(id: &str, node: &Daemon, buyer: &Path) -> (Option<i32>, Value) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (o, v) = job(&["status", id], node, buyer);
        if o.status.code() != Some(3) {
            return (o.status.code(), v);
        }
        assert!(Instant::now() < deadline, "job {id} never finished: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `job receipt ID`: the receipt event, checked — a BIP-340 signature the `nostr` crate
/// accepts, valid under the protocol's kind-30811 schema — and its parsed content.
pub(super) fn receipt_of(id: &str, node: &Daemon, buyer: &Path) -> (Value, Value) {
    use nostr::JsonUtil as _;
    let (o, r) = job(&["receipt", id], node, buyer);
    assert!(o.status.success(), "{r}");
    nostr::Event::from_json(r.to_string())
        .unwrap()
        .verify()
        .unwrap();
    assert!(SchemaSet::embedded().validate_event(&r).unwrap(), "{r}");
    let content = serde_json::from_str(r["content"].as_str().unwrap()).unwrap();
    (r, content)
}

/// Writes `spec` as `<name>.json` in `work`, submits it and waits for the job to finish:
/// the job id, the status command's exit code and the state.
pub(super) fn submit_and_wait(
    spec: &Value,
    work: &Path,
    node: &Daemon,
    buyer: &Path,
) -> (String, Option<i32>, Value) {
    let file = work.join(format!("{}.json", spec["name"].as_str().unwrap()));
    std::fs::write(&file, spec.to_string()).unwrap();
    let (o, sub) = job(&["submit", file.to_str().unwrap()], node, buyer);
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    let id = sub["job"].as_str().unwrap().to_string();
    let (code, st) = wait_final(&id, node, buyer);
    (id, code, st)
}

#[test]
fn wasi_jobs_run_end_to_end_with_verifiable_receipts() {
    // read as the operator below: no proxy in front
    let (node_dir, d) = super::inference::serve_edited(&[], "", &[NO_PROXY]);
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("upper.wat"), UPPER).unwrap();
    std::fs::write(work.path().join("in.txt"), "hello, market").unwrap();
    let file = work.path().join("upper.json");
    std::fs::write(
        &file,
        serde_json::json!({"engine": "wasm", "mode": "delivery", "module": "upper.wat",
            "input": "in.txt", "limits": {"fuel": 10_000_000}, "name": "upper-1"})
        .to_string(),
    )
    .unwrap();
    let (o, sub) = job(&["submit", file.to_str().unwrap()], &d, buyer.path());
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert_eq!(sub["new"], true);
    let id = sub["job"].as_str().unwrap().to_string();
    let (code, st) = wait_final(&id, &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
    assert_eq!(st["state"], "verified");
    assert!(st["metered"]["fuel"].as_u64().unwrap() > 0);
    // the same file again is the same job
    let (_, again) = job(&["submit", file.to_str().unwrap()], &d, buyer.path());
    assert_eq!(
        (again["job"].as_str(), again["new"].as_bool()),
        (Some(id.as_str()), Some(false))
    );
    // the result, decrypted by the buyer
    let out = tempfile::tempdir().unwrap();
    let (o, res) = job(
        &["result", &id, "--out", out.path().to_str().unwrap()],
        &d,
        buyer.path(),
    );
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert_eq!(
        std::fs::read_to_string(out.path().join("stdout")).unwrap(),
        "HELLO, MARKET"
    );
    assert_eq!(
        std::fs::read_to_string(out.path().join("out.txt")).unwrap(),
        "HELLO, MARKET"
    );
    assert_eq!(res["verdict"]["delivered"], true);
    // the sealed result is a content-addressed blob on the node's Blossom store too
    runtime().block_on(async {
        let http = http_client();
        let r = get_json(&http, d.url(&format!("/v1/jobs/{id}/result"))).await;
        let hash = r["blob"]["sha256"].as_str().unwrap();
        let blob = http
            .get(d.url(&format!("/{hash}")))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert_eq!(blob, r["payload"].as_str().unwrap());
        assert_eq!(r["blob"]["size"], blob.len());
    });
    // the receipt: signed by the node, valid under the protocol, on its relay, blinded
    let (o, receipt) = job(&["receipt", &id], &d, buyer.path());
    assert!(o.status.success());
    use nostr::JsonUtil as _;
    let ev = nostr::Event::from_json(receipt.to_string()).unwrap();
    ev.verify().unwrap();
    assert_eq!(ev.kind.as_u16(), 30811);
    assert!(SchemaSet::embedded().validate_event(&receipt).unwrap());
    let content: Value = serde_json::from_str(&ev.content).unwrap();
    assert_eq!(content["metered"]["fuel"], st["metered"]["fuel"]);
    assert_eq!(content["output_digest"], res["output_digest"]);
    let node_keys = NodeKeys::load(&node_dir.path().join("keys")).unwrap();
    assert_eq!(ev.pubkey.to_hex(), node_keys.nostr_pubkey_hex());
    let buyer_keys = NodeKeys::load(&buyer.path().join("keys")).unwrap();
    let blinded = fleetmesh_proto::hkdf::blinded_tag(
        &buyer_keys.nostr().secret_key(),
        &node_keys.nostr_pubkey_hex(),
        &hex::decode(&id).unwrap(),
    )
    .unwrap();
    assert_eq!(content["job"], hex::encode(blinded));
    assert!(
        !receipt.to_string().contains(&id),
        "the job id itself stays private"
    );
    let stored = runtime().block_on(req_events(
        &format!("ws://{}", d.addr),
        serde_json::json!({"kinds": [30811]}),
    ));
    assert!(
        stored.iter().any(|e| e["id"] == receipt["id"]),
        "{stored:?}"
    );

    // a job that runs out of fuel fails cleanly, with a receipt saying so
    let spin = super::spin_job(work.path(), "spin-1", serde_json::json!({"fuel": 20_000}));
    let (o, sub) = job(&["submit", spin.to_str().unwrap()], &d, buyer.path());
    assert!(o.status.success(), "{}", stdout(&o));
    let spin_id = sub["job"].as_str().unwrap().to_string();
    let (code, st) = wait_final(&spin_id, &d, buyer.path());
    assert_eq!(code, Some(1), "{st}");
    assert_eq!(
        (st["state"].as_str(), st["reason"].as_str()),
        (Some("failed"), Some("out-of-fuel"))
    );
    assert_eq!(st["metered"]["fuel"], 20_000);
    let (_, c) = receipt_of(&spin_id, &d, buyer.path());
    assert_eq!(c["verdict"]["delivered"], false);

    // with fuel to spare, the wall clock stops it; memory past the limit ends it too
    let slow = work.path().join("slow.json");
    std::fs::write(
        &slow,
        serde_json::json!({"module": "spin.wat", "name": "slow-1",
        "limits": {"fuel": 1_000_000_000_000u64, "wall_secs": 1}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        work.path().join("grow.wat"),
        "(module (memory 1) (func (export \"_start\") (drop (memory.grow (i32.const 1000)))))",
    )
    .unwrap();
    let grow = work.path().join("grow.json");
    std::fs::write(
        &grow,
        serde_json::json!({"module": "grow.wat", "name": "grow-1",
        "limits": {"fuel": 1_000_000, "memory_bytes": 1_048_576}})
        .to_string(),
    )
    .unwrap();
    for (f, reason) in [(&slow, "timeout"), (&grow, "out-of-memory")] {
        let (_, sub) = job(&["submit", f.to_str().unwrap()], &d, buyer.path());
        let (code, st) = wait_final(sub["job"].as_str().unwrap(), &d, buyer.path());
        assert_eq!(
            (code, st["reason"].as_str()),
            (Some(1), Some(reason)),
            "{st}"
        );
    }

    // malformed submissions are refused with a code; the node keeps serving
    runtime().block_on(async {
        let http = http_client();
        let (status, r) = post_json(&http, &d.url("/v1/jobs"), serde_json::json!({"ask": 1})).await;
        assert_eq!(status, 400, "{r}");
        assert_eq!(r["error"]["code"], "invalid_event");
        let (status, r) = post_json(&http, &d.url("/v1/jobs"), serde_json::json!("junk")).await;
        assert_eq!(status, 400, "{r}");
        let r = http
            .get(d.url(&format!("/v1/jobs/{}", "00".repeat(32))))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404);
        for path in ["result", "receipt"] {
            let url = d.url(&format!("/v1/jobs/{}/{path}", "00".repeat(32)));
            assert_eq!(super::status(&http, url).await, 404);
        }
        // a well-formed ask whose job message is sealed to another key, or names another ask
        let keys = NodeKeys::load(&buyer.path().join("keys")).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let ask = keys
            .sign(fleetmesh_proto::UnsignedEvent {
                created_at: now,
                kind: 30810,
                tags: vec![
                    vec!["d".into(), "sealed-wrong".into()],
                    vec!["engine".into(), "wasm".into()],
                    vec!["mode".into(), "delivery".into()],
                    vec!["expiration".into(), (now + 600).to_string()],
                ],
                content: serde_json::json!({"engine": "wasm", "mode": "delivery",
                    "limits": {"fuel": 1000}, "bid": {"amount": 1, "unit": "msat"}})
                .to_string(),
            })
            .unwrap();
        let node_pub = NodeKeys::load(&node_dir.path().join("keys"))
            .unwrap()
            .nostr_pubkey_hex();
        let message = |ask_id: &str| {
            serde_json::json!({"protocol": "compute/1.0", "type": "job", "job_id": "55".repeat(32),
                "ask": ask_id, "engine": "wasm", "mode": "delivery", "input": {"inline": ""},
                "limits": {"fuel": 1000}, "params": {"module": {"inline": ""}}})
            .to_string()
        };
        let seal = |to: &str, text: String| {
            let key =
                fleetmesh_proto::nip44::conversation_key(&keys.nostr().secret_key(), to).unwrap();
            fleetmesh_proto::nip44::encrypt(&key, text.as_bytes()).unwrap()
        };
        let stranger = NodeKeys::generate().unwrap().nostr_pubkey_hex();
        for (payload, code, says) in [
            (
                seal(&stranger, message(&ask.id_hex())),
                "bad_request",
                "does not open",
            ),
            (
                seal(&node_pub, message(&"66".repeat(32))),
                "mismatch",
                "the job's ask",
            ),
            (
                seal(&node_pub, "{not json".into()),
                "bad_request",
                "not JSON",
            ),
        ] {
            let body = serde_json::json!({"ask": ask.to_value(), "payload": payload});
            let (status, r) = post_json(&http, &d.url("/v1/jobs"), body).await;
            assert_eq!(status, 400, "{r}");
            assert_eq!(r["error"]["code"], code, "{r}");
            assert!(
                r["error"]["message"].as_str().unwrap().contains(says),
                "{r}"
            );
        }
        let r = http.get(d.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
    });
    // an unknown job: status exits 2
    let (o, _) = job(&["status", &"00".repeat(32)], &d, buyer.path());
    assert_eq!(o.status.code(), Some(2));
    // a module that is not WebAssembly: the job fails with the reason
    std::fs::write(work.path().join("junk.wasm"), b"\0asm\x01\0\0\0junk").unwrap();
    let junk = work.path().join("junk.json");
    std::fs::write(
        &junk,
        serde_json::json!({"module": "junk.wasm", "limits": {"fuel": 1000}, "name": "junk-1"})
            .to_string(),
    )
    .unwrap();
    let (_, sub) = job(&["submit", junk.to_str().unwrap()], &d, buyer.path());
    let (code, st) = wait_final(sub["job"].as_str().unwrap(), &d, buyer.path());
    assert_eq!(code, Some(1), "{st}");
    assert!(
        st["reason"]
            .as_str()
            .unwrap()
            .contains("not a valid WebAssembly module"),
        "{st}"
    );

    // input from the node's Blossom store, by hash; a blob the node lacks fails the job
    let blob = b"from a blob".to_vec();
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&blob));
    let buyer_keys2 = NodeKeys::load(&buyer.path().join("keys")).unwrap();
    runtime().block_on(async {
        let r = http_client()
            .put(d.url("/upload"))
            .header(
                "authorization",
                super::blossom::auth(&buyer_keys2, "upload", &hash, 60),
            )
            .body(blob.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    });
    for (name, hash, want) in [
        ("blob-1", hash.as_str(), Some("FROM A BLOB")),
        ("blob-2", &*"cd".repeat(32), None),
    ] {
        let f = work.path().join(format!("{name}.json"));
        std::fs::write(
            &f,
            serde_json::json!({"module": "upper.wat", "name": name,
            "input_blobs": [{"sha256": hash, "size": blob.len()}], "limits": {"fuel": 10_000_000}})
            .to_string(),
        )
        .unwrap();
        let (_, sub) = job(&["submit", f.to_str().unwrap()], &d, buyer.path());
        let jid = sub["job"].as_str().unwrap().to_string();
        let (code, st) = wait_final(&jid, &d, buyer.path());
        match want {
            Some(text) => {
                assert_eq!(code, Some(0), "{st}");
                let o = tempfile::tempdir().unwrap();
                job(
                    &["result", &jid, "--out", o.path().to_str().unwrap()],
                    &d,
                    buyer.path(),
                );
                assert_eq!(
                    std::fs::read_to_string(o.path().join("out.txt")).unwrap(),
                    text
                );
            }
            None => {
                assert_eq!(code, Some(1), "{st}");
                assert!(
                    st["reason"].as_str().unwrap().contains("not on this node"),
                    "{st}"
                );
            }
        }
    }

    // a Bacalhau spec from the vendored vectors: its inline Rust WASI module runs here
    let vectors = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("market/tests/vectors/bacalhau");
    let (o, sub) = job(
        &["submit", vectors.join("wasm.yaml").to_str().unwrap()],
        &d,
        buyer.path(),
    );
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    let bac = sub["job"].as_str().unwrap().to_string();
    let (code, st) = wait_final(&bac, &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
    let bout = tempfile::tempdir().unwrap();
    job(
        &["result", &bac, "--out", bout.path().to_str().unwrap()],
        &d,
        buyer.path(),
    );
    assert_eq!(
        std::fs::read_to_string(bout.path().join("stdout")).unwrap(),
        "Hello, world!\n"
    );
    // Bacalhau users re-run spec files: the same file is the same job, an edited file with
    // the same Name a new one (not a conflict); an explicit idempotency key pins the job
    let submit = |file: &Path, extra: &[&str]| {
        let mut args = vec!["submit", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        job(&args, &d, buyer.path())
    };
    let (_, again) = submit(&vectors.join("wasm.yaml"), &[]);
    assert_eq!(
        (again["job"].as_str(), again["new"].as_bool()),
        (Some(bac.as_str()), Some(false))
    );
    let edited = work.path().join("wasm-edited.yaml");
    let mut spec = std::fs::read_to_string(vectors.join("wasm.yaml")).unwrap();
    spec.push_str("\n# run it once more\n");
    std::fs::write(&edited, &spec).unwrap();
    let (o, second) = submit(&edited, &[]);
    assert!(o.status.success(), "{second} {}", stderr(&o));
    assert_eq!(second["new"], true, "{second}");
    assert_ne!(second["job"].as_str(), Some(bac.as_str()));
    assert_eq!(
        wait_final(second["job"].as_str().unwrap(), &d, buyer.path()).0,
        Some(0)
    );
    let (o, keyed) = submit(
        &vectors.join("wasm.yaml"),
        &["--idempotency-key", "nightly-1"],
    );
    assert!(o.status.success(), "{keyed} {}", stderr(&o));
    assert_eq!(keyed["new"], true, "{keyed}");
    let (o, clash) = submit(&edited, &["--idempotency-key", "nightly-1"]);
    assert_eq!(o.status.code(), Some(2), "{clash}");
    assert_eq!(clash["error"]["code"], "conflict", "{clash}");
    let (o, _) = submit(&edited, &["--idempotency-key", "not a key"]);
    assert_usage_error(&o, "--idempotency-key");
    // and one it cannot run is refused before anything is sent
    let (o, v) = job(
        &["submit", vectors.join("docker.yaml").to_str().unwrap()],
        &d,
        buyer.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{v}");
    assert_eq!(v["error"]["code"], "bacalhau");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("engine docker"),
        "{v}"
    );

    // after a restart the jobs are still there
    assert!(d.stop("-TERM").success());
    let mut cmd = meshnode();
    cmd.args([
        "run",
        node_dir.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    let d2 = Daemon::start(cmd);
    let (code, st) = job(&["status", &id], &d2, buyer.path());
    assert_eq!(code.status.code(), Some(0), "{st}");
    assert_eq!(st["state"], "verified");
}

#[test]
fn groth16_prove_jobs_return_a_proof_that_proof_verify_accepts() {
    let (node_dir, d) = super::inference::serve(&[], "");
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    let fixtures = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("../prover/tests/fixtures/circom");
    // the operator installs the circuit; the buyer names it by its zkey's digest
    let circuit = node_dir.path().join("circuits/tiny");
    std::fs::create_dir_all(&circuit).unwrap();
    std::fs::copy(fixtures.join("tiny.zkey"), circuit.join("circuit.zkey")).unwrap();
    std::fs::copy(fixtures.join("tiny.wasm"), circuit.join("circuit.wasm")).unwrap();
    // the node's terms (kind 30812) list it by that digest, as buyers name it
    let zkey = std::fs::read(fixtures.join("tiny.zkey")).unwrap();
    let listed = serde_json::json!([{"id": "tiny", "zkey": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(zkey))}]);
    super::market::wait_for("the circuit in the node's terms", || {
        super::market::market(&["providers"], &d)
            .iter()
            .any(|p| p["circuits"] == listed)
    });
    let work = tempfile::tempdir().unwrap();
    let prove = serde_json::json!({"engine": "groth16-prove", "zkey": fixtures.join("tiny.zkey"),
        "input": fixtures.join("tiny_input.json"), "limits": {"proofs": 1}, "name": "prove-1"});
    let (id, code, st) = submit_and_wait(&prove, work.path(), &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
    assert_eq!(st["metered"]["proofs"], 1);
    let out = tempfile::tempdir().unwrap();
    let (o, res) = job(
        &["result", &id, "--out", out.path().to_str().unwrap()],
        &d,
        buyer.path(),
    );
    assert!(o.status.success(), "{}", stdout(&o));
    // an independent check: `meshnode proof verify` on what came back
    let f = |n: &str| out.path().join(n).to_str().unwrap().to_string();
    let v = run(&[
        "proof",
        "verify",
        "--vk",
        &f("verification_key.json"),
        "--proof",
        &f("proof.json"),
        "--public",
        &f("public.json"),
    ]);
    assert!(v.status.success(), "{}", stdout(&v));
    // the receipt's verdict names that proof, public input and key by digest
    let (receipt, c) = receipt_of(&id, &d, buyer.path());
    let sha = |n: &str| {
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
            std::fs::read(out.path().join(n)).unwrap(),
        ))
    };
    assert_eq!(c["verdict"]["mode"], "proof");
    assert_eq!(c["verdict"]["valid"], true);
    assert_eq!(c["verdict"]["proof_digest"], sha("proof.json"));
    assert_eq!(c["verdict"]["public_inputs_digest"], sha("public.json"));
    assert_eq!(c["verdict"]["vkey_digest"], sha("verification_key.json"));
    assert_eq!(c["verdict"], res["verdict"]);
    assert!(SchemaSet::embedded().validate_event(&receipt).unwrap());
    // a verify job: the proof the prove job returned checks out; a wrong public input not
    let f = |n: &str| out.path().join(n);
    let verify = serde_json::json!({"engine": "groth16-verify", "vkey": f("verification_key.json"),
        "proof": f("proof.json"), "public": f("public.json"), "name": "verify-1"});
    let (vid, code, st) = submit_and_wait(&verify, work.path(), &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
    assert_eq!(st["metered"]["proofs"], 1);
    let (_, c) = receipt_of(&vid, &d, buyer.path());
    assert_eq!(
        (c["engine"].as_str(), c["verdict"]["valid"].as_bool()),
        (Some("groth16-verify"), Some(true))
    );
    let mut wrong: Value =
        serde_json::from_slice(&std::fs::read(f("public.json")).unwrap()).unwrap();
    wrong[0] = Value::from("12345");
    std::fs::write(work.path().join("wrong_public.json"), wrong.to_string()).unwrap();
    let mut bad = verify.clone();
    bad["public"] = work
        .path()
        .join("wrong_public.json")
        .to_str()
        .unwrap()
        .into();
    bad["name"] = "verify-2".into();
    let (vid, code, st) = submit_and_wait(&bad, work.path(), &d, buyer.path());
    assert_eq!(
        (code, st["reason"].as_str()),
        (Some(1), Some("invalid proofs: [0]")),
        "{st}"
    );
    let (_, c) = receipt_of(&vid, &d, buyer.path());
    assert_eq!(c["verdict"]["valid"], false);

    // an input the circuit rejects, and a circuit the node lacks: failed, with the reason
    std::fs::write(work.path().join("bad.json"), r#"{"a": "x"}"#).unwrap();
    for (name, extra, says) in [
        (
            "prove-2",
            serde_json::json!({"input": "bad.json"}),
            "bad_request",
        ),
        (
            "prove-3",
            serde_json::json!({"circuit": "ab".repeat(32)}),
            "no circuit",
        ),
    ] {
        let mut spec = serde_json::json!({"engine": "groth16-prove", "zkey": fixtures.join("tiny.zkey"),
            "input": fixtures.join("tiny_input.json"), "limits": {"proofs": 1}, "name": name});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let (_, code, st) = submit_and_wait(&spec, work.path(), &d, buyer.path());
        assert_eq!(code, Some(1), "{st}");
        assert!(st["reason"].as_str().unwrap().contains(says), "{st}");
    }

    // the node's metrics saw each proof, each check and each job
    let m = d.scrape();
    let proofs = [("circuit", "tiny"), ("outcome", "ok")];
    assert_eq!(m.must("fleetmesh_prover_proofs_total", &proofs), 1.0);
    assert_eq!(m.must("fleetmesh_prover_proof_seconds", &[]), 1.0);
    for phase in [
        "witness",
        "witness_map",
        "msm_a_b1",
        "msm_b2",
        "msm_c_h",
        "self_check",
    ] {
        let n = m.must("fleetmesh_prover_phase_seconds", &[("phase", phase)]);
        assert_eq!(n, 1.0, "{phase}");
    }
    assert_eq!(m.must("fleetmesh_prover_queue_depth", &[]), 0.0);
    let verdict = |v: &str| m.must("fleetmesh_verifier_proofs_total", &[("verdict", v)]);
    assert_eq!((verdict("valid"), verdict("invalid")), (1.0, 1.0));
    assert_eq!(m.must("fleetmesh_verifier_batch_size", &[]), 2.0);
    let jobs = |engine: &str, state: &str| {
        m.value(
            "fleetmesh_jobs_total",
            &[("engine", engine), ("state", state)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(jobs("groth16-prove", "accepted"), 3.0);
    assert_eq!(jobs("groth16-prove", "verified"), 1.0);
    assert_eq!(jobs("groth16-prove", "failed"), 2.0);
    assert_eq!(jobs("groth16-verify", "accepted"), 2.0);
    assert_eq!(jobs("groth16-verify", "verified"), 1.0);
    assert_eq!(jobs("groth16-verify", "failed"), 1.0);
}

#[test]
fn a_job_asking_for_everything_gets_the_nodes_maxima_and_the_next_job_still_runs() {
    let node = tempfile::tempdir().unwrap();
    assert!(init(node.path(), &[]).status.success());
    edit_config(
        node.path(),
        &[
            ("workers = 2", "workers = 1"),
            ("max_wall_secs = 300", "max_wall_secs = 2"),
        ],
    );
    let d = run_node(node.path());
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    // the node says what a job may use
    let doc = runtime().block_on(nip11(&d));
    assert_eq!(doc["fleetmesh"]["jobs"]["max_wall_secs"], 2, "{doc}");
    assert_eq!(doc["fleetmesh"]["jobs"]["workers"], 1, "{doc}");
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("spin.wat"), super::SPIN_WAT).unwrap();
    std::fs::write(work.path().join("upper.wat"), UPPER).unwrap();
    std::fs::write(work.path().join("in.txt"), "after").unwrap();
    // fuel u64::MAX and a year of wall time, on the only worker
    let greedy = serde_json::json!({"module": "spin.wat", "name": "greedy",
        "limits": {"fuel": u64::MAX, "wall_secs": 31_536_000u64}});
    let after = serde_json::json!({"module": "upper.wat", "input": "in.txt", "name": "after",
        "limits": {"fuel": 10_000_000}});
    let mut ids = Vec::new();
    for (name, spec) in [("greedy", &greedy), ("after", &after)] {
        let f = work.path().join(format!("{name}.json"));
        std::fs::write(&f, spec.to_string()).unwrap();
        let (o, sub) = job(&["submit", f.to_str().unwrap()], &d, buyer.path());
        assert!(o.status.success(), "{sub} {}", stderr(&o));
        ids.push(sub["job"].as_str().unwrap().to_string());
    }
    let (code, st) = wait_final(&ids[0], &d, buyer.path());
    assert_eq!(
        (code, st["reason"].as_str()),
        (Some(1), Some("timeout")),
        "{st}"
    );
    assert!(
        st["metered"]["wall_ms"].as_u64().unwrap() < 10_000,
        "cut to the node's 2 s: {st}"
    );
    let (code, st) = wait_final(&ids[1], &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
}
