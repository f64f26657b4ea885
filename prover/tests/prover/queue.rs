//! The node's proving queue and verify gatherer (feature `service`): proofs asked for from
//! async code (the HTTP API) and from threads of their own (jobs) take turns in one queue,
//! and the gatherer's verdicts agree with the single checks.

use std::sync::Arc;

use fleetmesh_kernels::ops::Cpu;
use fleetmesh_prover::gather::Gatherer;
use fleetmesh_prover::queue::{ProveRequest, ProvingQueue, Witnessing};
use fleetmesh_prover::{Error, Fr, PreparedVk, verify};

use crate::{fixture, fixture_json};

/// A circuits folder with the `tiny` fixture installed.
fn installed() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tiny = dir.path().join("tiny");
    std::fs::create_dir(&tiny).unwrap();
    std::fs::write(tiny.join("circuit.zkey"), fixture("tiny.zkey")).unwrap();
    std::fs::write(tiny.join("circuit.wasm"), fixture("tiny.wasm")).unwrap();
    dir
}

fn request() -> ProveRequest {
    ProveRequest {
        circuit: "tiny".into(),
        witnessing: Witnessing::Input(fixture_json("tiny_input.json")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_and_job_proofs_take_turns_in_one_queue() {
    let dir = installed();
    let queue = ProvingQueue::new(dir.path().to_path_buf(), Arc::new(Cpu));
    let pvk = PreparedVk::new(&queue.verifying_key("tiny").unwrap());
    // three callers as the HTTP API is (async), three as job workers are (threads)
    let jobs: Vec<_> = (0..3)
        .map(|_| {
            let q = queue.clone();
            std::thread::spawn(move || q.prove_blocking(&request()))
        })
        .collect();
    let api: Vec<_> = (0..3)
        .map(|_| {
            let q = queue.clone();
            tokio::spawn(async move { q.prove(request()).await })
        })
        .collect();
    let mut proofs = Vec::new();
    for t in api {
        proofs.push(t.await.unwrap().unwrap());
    }
    for t in jobs {
        proofs.push(
            tokio::task::spawn_blocking(move || t.join().unwrap())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    for p in &proofs {
        assert!(verify(&pvk, &p.proven.proof, &p.proven.public).unwrap());
    }
    // six proofs, never two at once
    assert_eq!(queue.peak_concurrency(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_waiting_together_are_proved_as_one_batch_each_with_its_own_answer() {
    let dir = installed();
    let queue = ProvingQueue::new(dir.path().to_path_buf(), Arc::new(Cpu));
    let pvk = PreparedVk::new(&queue.verifying_key("tiny").unwrap());
    let w = fleetmesh_prover::wtns::from_bytes(&fixture("tiny.wtns")).unwrap();
    let mut bad = w.clone();
    bad[5] += Fr::from(1u64);
    let with = |witness: Vec<Fr>, circuit: &str| ProveRequest {
        circuit: circuit.into(),
        witnessing: Witnessing::Witness(witness),
    };
    // while a batch is being proved (the turn held), six requests arrive: four good ones
    // of "tiny" (by input and by witness), one that does not satisfy it, one for a
    // circuit that is not installed; one more caller gives up before its turn
    let turn = queue.hold_turn().await;
    let reqs = vec![
        request(),
        with(w.clone(), "tiny"),
        with(bad, "tiny"),
        with(w.clone(), "absent"),
        request(),
        with(w.clone(), "tiny"),
    ];
    let callers: Vec<_> = reqs
        .into_iter()
        .map(|r| {
            let q = queue.clone();
            tokio::spawn(async move { q.prove(r).await })
        })
        .collect();
    let q = queue.clone();
    let gone = tokio::spawn(async move { q.prove(request()).await });
    while queue.waiting() < 7 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    gone.abort();
    // the abort lands when the runtime next polls that task: wait until its request is
    // dropped, or the turn may pass while it still waits (a batch of six; seen in CI)
    assert!(gone.await.unwrap_err().is_cancelled());
    drop(turn);
    let mut answers = Vec::new();
    for c in callers {
        answers.push(c.await.unwrap());
    }
    for i in [0, 1, 4, 5] {
        let p = answers[i].as_ref().unwrap();
        assert!(verify(&pvk, &p.proven.proof, &p.proven.public).unwrap());
        // the five of "tiny" were proved together (the bad one among them)
        assert_eq!(p.batch, 5, "{i}");
        assert_eq!(p.to_json()["batch"], 5);
    }
    assert!(
        matches!(&answers[2], Err(Error::Witness(m)) if m.contains("does not satisfy")),
        "{:?}",
        answers[2]
    );
    assert!(matches!(&answers[3], Err(Error::UnknownCircuit(_))));
    assert_eq!(queue.peak_concurrency(), 1);
    assert_eq!(
        queue.waiting(),
        0,
        "the caller that went away was dropped unproved"
    );
    // alone, a proof is a batch of one
    assert_eq!(queue.prove(request()).await.unwrap().batch, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_names_what_is_wrong_with_a_request() {
    let dir = installed();
    let queue = ProvingQueue::new(dir.path().to_path_buf(), Arc::new(Cpu));
    let ask = |circuit: &str, witnessing: Witnessing| {
        let q = queue.clone();
        let req = ProveRequest {
            circuit: circuit.into(),
            witnessing,
        };
        async move { q.prove(req).await }
    };
    let input = fixture_json("tiny_input.json");
    assert!(matches!(
        ask("nope", Witnessing::Input(input.clone())).await,
        Err(Error::UnknownCircuit(n)) if n == "nope"
    ));
    assert!(matches!(
        ask("../x", Witnessing::Input(input)).await,
        Err(Error::Malformed { field, .. }) if field == "circuit"
    ));
    // an input that fails the circuit's assert is unsatisfiable, not malformed
    let failing = serde_json::json!({"a": "1000", "b": "0", "w": "1"});
    assert!(matches!(
        ask("tiny", Witnessing::Input(failing)).await,
        Err(Error::Witness(_))
    ));
    assert!(matches!(
        ask("tiny", Witnessing::Input(serde_json::json!({"q": "1"}))).await,
        Err(Error::Input { .. })
    ));
    assert!(matches!(
        ask("tiny", Witnessing::Witness(vec![])).await,
        Err(Error::Witness(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gatherer_batches_and_agrees_with_single_checks() {
    use fleetmesh_prover::snarkjs::{parse_proof, parse_public, parse_vk};
    let gatherer = Gatherer::start();
    let vk = parse_vk(&fixture_json("tiny_vk.json")).unwrap();
    let key = gatherer.prepared(&vk);
    // the same key again is the cached one
    assert!(Arc::ptr_eq(&key, &gatherer.prepared(&vk)));
    let proof = parse_proof(&fixture_json("tiny_proof.json")).unwrap();
    let public = parse_public(&fixture_json("tiny_public.json")).unwrap();
    let mut wrong = public.clone();
    wrong[0] += fleetmesh_prover::Fr::from(1u8);
    let items = vec![
        (key.clone(), (proof.clone(), public.clone())),
        (key.clone(), (proof.clone(), wrong.clone())),
        (key.clone(), (proof.clone(), public.clone())),
    ];
    let pending = gatherer.submit(items).unwrap();
    let mut got = Vec::new();
    for p in pending {
        got.push(p.wait().await.unwrap());
    }
    let single = |pubs: &[fleetmesh_prover::Fr]| verify(&key, &proof, pubs).unwrap();
    assert_eq!(got, vec![single(&public), single(&wrong), single(&public)]);
    assert_eq!(got, vec![true, false, true]);
    // from a thread of its own, as a job waits
    let pending = gatherer
        .submit(vec![(key.clone(), (proof, public))])
        .unwrap();
    let verdict = tokio::task::spawn_blocking(move || {
        pending
            .into_iter()
            .map(|p| p.wait_blocking())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(verdict, vec![Ok(true)]);
}

#[test]
fn a_queue_with_a_table_budget_builds_tables_in_the_background_and_proves_with_them() {
    use fleetmesh_prover::setup::setup_with_rng;
    use fleetmesh_prover::{R1cs, tables, wtns};
    use rand::SeedableRng;
    let r1cs = R1cs::from_bytes(&fixture("chain.r1cs")).unwrap();
    let pk = setup_with_rng(&r1cs, &mut rand::rngs::StdRng::seed_from_u64(7)).unwrap();
    let witness = wtns::from_bytes(&fixture("chain.wtns")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("chain")).unwrap();
    std::fs::write(dir.path().join("chain/circuit.zkey"), pk.to_bytes()).unwrap();
    let req = ProveRequest {
        circuit: "chain".into(),
        witnessing: Witnessing::Witness(witness),
    };
    let pvk = PreparedVk::new(&pk.vk);
    // two copies' worth: the first proof loads the key and starts the build
    let budget = 2 * tables::bytes_per_copy(&pk);
    let queue = ProvingQueue::with_tables(dir.path().to_path_buf(), Arc::new(Cpu), budget);
    let first = queue.prove_blocking(&req).unwrap();
    let bytes = queue.wait_for_tables("chain").expect("tables built");
    assert!(bytes > 0 && bytes <= budget, "{bytes} of {budget}");
    assert_eq!(queue.table_bytes(), bytes);
    let second = queue.prove_blocking(&req).unwrap();
    for p in [first, second] {
        assert!(verify(&pvk, &p.proven.proof, &p.proven.public).unwrap());
    }
    // a budget that fits no copy builds none, and proofs go on without
    let small = ProvingQueue::with_tables(dir.path().to_path_buf(), Arc::new(Cpu), budget / 3);
    let p = small.prove_blocking(&req).unwrap();
    assert_eq!(small.wait_for_tables("chain"), None);
    assert_eq!(small.table_bytes(), 0);
    assert!(verify(&pvk, &p.proven.proof, &p.proven.public).unwrap());
}
