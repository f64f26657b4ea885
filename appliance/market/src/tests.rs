//! Asks, the job store and receipts, on a real SQLite file, the protocol's schemas, and the
//! `nostr` crate as an independent verifier of what we sign.

use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::receipt::blinded_job_id;
use fleetmesh_proto::{NodeKeys, UnsignedEvent};
use fleetmesh_schemas::SchemaSet;
use serde_json::{Value, json};

use super::Refusal;
use super::blobs::{BLOBS_DIR, BlobStore, INDEX_FILE, MIGRATIONS, Released};
use super::jobs::{JobStore, State};
use super::receipt::{Finished, sign_receipt};
use rusqlite::{Connection, params};

const NOW: u64 = 1_767_225_700;

fn ask_event(keys: &NodeKeys, d: &str, tags: &[(&str, &str)], content: Value) -> String {
    let mut t = vec![vec!["d".to_string(), d.to_string()]];
    t.extend(tags.iter().map(|(k, v)| vec![k.to_string(), v.to_string()]));
    keys.sign(UnsignedEvent {
        created_at: NOW - 10,
        kind: 30810,
        tags: t,
        content: content.to_string(),
    })
    .unwrap()
    .to_json()
}

fn wasm_ask(keys: &NodeKeys, d: &str, fuel: u64) -> String {
    ask_event(
        keys,
        d,
        &[
            ("engine", "wasm"),
            ("mode", "delivery"),
            ("expiration", "1767226200"),
        ],
        json!({"engine": "wasm", "mode": "delivery", "limits": {"fuel": fuel},
               "bid": {"amount": 2000, "unit": "msat"}}),
    )
}

#[test]
fn asks_are_checked_signature_schema_tags_and_expiry() {
    let buyer = NodeKeys::generate().unwrap();
    let ask = Ask::parse(&wasm_ask(&buyer, "a-1", 50_000), NOW).unwrap();
    assert_eq!(
        (ask.engine.as_str(), ask.mode.as_str()),
        ("wasm", "delivery")
    );
    assert_eq!(
        ask.address(),
        format!("30810:{}:a-1", buyer.nostr_pubkey_hex())
    );
    let refused = |json: String, now: u64| Refusal::from(Ask::parse(&json, now).unwrap_err()).code;
    // a wasm ask without fuel, an unknown engine: the schema
    let no_fuel = ask_event(
        &buyer,
        "a-2",
        &[
            ("engine", "wasm"),
            ("mode", "delivery"),
            ("expiration", "1767226200"),
        ],
        json!({"engine": "wasm", "mode": "delivery", "limits": {"wall_secs": 5},
               "bid": {"amount": 1, "unit": "msat"}}),
    );
    assert_eq!(refused(no_fuel, NOW), "schema");
    // tags that disagree with the content
    let mismatch = ask_event(
        &buyer,
        "a-3",
        &[
            ("engine", "wasm"),
            ("mode", "proof"),
            ("expiration", "1767226200"),
        ],
        json!({"engine": "wasm", "mode": "delivery", "limits": {"fuel": 5},
               "bid": {"amount": 1, "unit": "msat"}}),
    );
    assert_eq!(refused(mismatch, NOW), "mismatch");
    assert_eq!(
        refused(wasm_ask(&buyer, "a-4", 5), 1_767_226_200),
        "expired"
    );
    // tampered content, not JSON, another kind
    let tampered = wasm_ask(&buyer, "a-5", 5).replace("2000", "1");
    assert_eq!(refused(tampered, NOW), "invalid_event");
    assert_eq!(refused("{".into(), NOW), "invalid_event");
    let note = buyer
        .sign(UnsignedEvent {
            created_at: NOW,
            kind: 1,
            tags: vec![],
            content: "hi".into(),
        })
        .unwrap()
        .to_json();
    assert_eq!(refused(note, NOW), "invalid_event");
}

#[test]
fn a_buyer_holds_at_most_per_buyer_unfinished_jobs_and_others_are_not_held_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::open(&dir.path().join("jobs.sqlite"), NOW).unwrap();
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let ask = |k: &NodeKeys, d: &str| Ask::parse(&wasm_ask(k, d, 1000), NOW).unwrap();
    let (first, _) = store
        .submit(&ask(&a, "a-1"), &"a1".repeat(32), "s", NOW, 2)
        .unwrap();
    store
        .submit(&ask(&a, "a-2"), &"a2".repeat(32), "s", NOW, 2)
        .unwrap();
    // the third unfinished job of a: refused, naming the quota; b is not held back
    let r = store
        .submit(&ask(&a, "a-3"), &"a3".repeat(32), "s", NOW, 2)
        .unwrap_err();
    assert_eq!(r.code, "quota", "{}", r.message);
    assert!(r.message.contains("per_buyer"), "{}", r.message);
    store
        .submit(&ask(&b, "b-1"), &"b1".repeat(32), "s", NOW, 2)
        .unwrap();
    // the same job again is not a new one, so it is answered at the quota too
    assert!(
        !store
            .submit(&ask(&a, "a-2"), &"a2".repeat(32), "s", NOW, 2)
            .unwrap()
            .1
    );
    // once one of a's jobs is final, a may submit again; a running job still counts
    store
        .transition(&first.id, State::Running, None, NOW + 1)
        .unwrap();
    assert_eq!(
        store
            .submit(&ask(&a, "a-3"), &"a3".repeat(32), "s", NOW + 1, 2)
            .unwrap_err()
            .code,
        "quota"
    );
    store
        .transition(&first.id, State::Failed, Some("test"), NOW + 2)
        .unwrap();
    assert!(
        store
            .submit(&ask(&a, "a-3"), &"a3".repeat(32), "s", NOW + 2, 2)
            .unwrap()
            .1
    );
}

#[test]
fn jobs_are_idempotent_follow_their_states_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sqlite");
    let buyer = NodeKeys::generate().unwrap();
    let ask = Ask::parse(&wasm_ask(&buyer, "job-a", 1000), NOW).unwrap();
    let store = JobStore::open(&path, NOW).unwrap();
    let id = "11".repeat(32);
    let (job, new) = store.submit(&ask, &id, "sealed", NOW, 16).unwrap();
    assert!(new);
    assert_eq!(job.state, State::Accepted);
    assert_eq!(job.payload, "sealed");
    // the same job again is that job, also from a re-signed ask at the same address
    let (again, new) = store.submit(&ask, &id, "sealed", NOW + 5, 16).unwrap();
    assert!(!new);
    assert_eq!(again, job);
    let replacement = Ask::parse(&wasm_ask(&buyer, "job-a", 2000), NOW).unwrap();
    assert_eq!(
        store.submit(&replacement, &id, "x", NOW, 16).unwrap().0,
        job
    );
    // another job for that ask, or that job id for another ask: conflicts
    let other_id = "22".repeat(32);
    assert_eq!(
        store
            .submit(&ask, &other_id, "x", NOW, 16)
            .unwrap_err()
            .code,
        "conflict"
    );
    let elsewhere = Ask::parse(&wasm_ask(&buyer, "job-z", 1000), NOW).unwrap();
    assert_eq!(
        store
            .submit(&elsewhere, &id, "x", NOW, 16)
            .unwrap_err()
            .code,
        "conflict"
    );
    // states
    store
        .transition(&job.id, State::Running, None, NOW + 1)
        .unwrap();
    assert_eq!(
        store
            .transition(&job.id, State::Accepted, None, NOW + 2)
            .unwrap_err()
            .code,
        "bad_transition"
    );
    assert_eq!(
        store
            .transition("00", State::Running, None, NOW)
            .unwrap_err()
            .code,
        "not_found"
    );
    // a restart while running: accepted again, saying so
    drop(store);
    let store = JobStore::open(&path, NOW + 10).unwrap();
    let back = store.get(&job.id).unwrap().unwrap();
    assert_eq!(back.state, State::Accepted);
    assert_eq!(back.reason.as_deref(), Some("resumed after a restart"));
    store
        .transition(&job.id, State::Running, None, NOW + 11)
        .unwrap();
    let finished = Finished {
        output_digest: "ab".repeat(32),
        metered: json!({"fuel": 77, "wall_ms": 3}),
        verdict: json!({"mode": "delivery", "preimage_hash": "00".repeat(32)}),
        started_at: NOW + 11,
        finished_at: NOW + 12,
    };
    let done = store
        .finish(&job.id, None, &finished, ("{}", "result"), NOW + 12)
        .unwrap();
    assert_eq!(done.result.as_deref(), Some("result"));
    assert_eq!(done.state, State::Verified);
    assert_eq!(done.metered.as_ref().unwrap()["fuel"], 77);
    assert_eq!(
        store
            .transition(&job.id, State::Failed, Some("late"), NOW + 13)
            .unwrap_err()
            .code,
        "bad_transition"
    );
    // expiry of unfinished jobs only
    let other = Ask::parse(&wasm_ask(&buyer, "job-b", 1000), NOW).unwrap();
    let (b, _) = store
        .submit(&other, &"33".repeat(32), "sealed", NOW, 16)
        .unwrap();
    assert!(store.expire_due(NOW + 1).unwrap().is_empty());
    assert_eq!(store.expire_due(1_767_226_200).unwrap(), vec![b.id.clone()]);
    assert_eq!(store.get(&b.id).unwrap().unwrap().state, State::Expired);
    assert_eq!(store.get(&job.id).unwrap().unwrap().state, State::Verified);
    assert_eq!(store.in_state(State::Expired).unwrap().len(), 1);
    // a file that is not a job store is refused, and left as it was
    let junk = dir.path().join("junk.sqlite");
    std::fs::write(&junk, b"not sqlite at all, not at all").unwrap();
    assert_eq!(JobStore::open(&junk, NOW).unwrap_err().code, "storage");
    assert_eq!(
        std::fs::read(&junk).unwrap(),
        b"not sqlite at all, not at all"
    );
}

#[test]
fn receipts_verify_with_nostr_pass_the_schema_and_blind_the_job_for_the_pair_only() {
    use nostr::JsonUtil as _;
    let schemas = SchemaSet::embedded();
    let dir = tempfile::tempdir().unwrap();
    let (buyer, provider, stranger) = (
        NodeKeys::generate().unwrap(),
        NodeKeys::generate().unwrap(),
        NodeKeys::generate().unwrap(),
    );
    let ask = Ask::parse(&wasm_ask(&buyer, "r-1", 1000), NOW).unwrap();
    let store = JobStore::open(&dir.path().join("jobs.sqlite"), NOW).unwrap();
    let (job, _) = store
        .submit(&ask, &"44".repeat(32), "sealed", NOW, 16)
        .unwrap();
    let done = Finished {
        output_digest: "cd".repeat(32),
        metered: json!({"fuel": 1234, "wall_ms": 5}),
        verdict: json!({"mode": "delivery", "preimage_hash": "ef".repeat(32), "delivered": true}),
        started_at: NOW + 1,
        finished_at: NOW + 2,
    };
    let receipt = sign_receipt(&provider, &job, &done).unwrap();
    assert!(schemas.validate_event(&receipt.to_value()).unwrap());
    // and it reads back as the protocol's receipt, tags agreeing with the content
    let read = fleetmesh_proto::receipt::Receipt::try_from(&receipt).unwrap();
    assert_eq!(
        (read.ask.as_str(), read.mode),
        (ask.event.id_hex().as_str(), ask.mode)
    );
    let theirs = nostr::Event::from_json(receipt.to_json()).unwrap();
    theirs.verify().unwrap();
    assert_eq!(theirs.pubkey.to_hex(), provider.nostr_pubkey_hex());
    let blinded = receipt.tag_value("d").unwrap().to_string();
    let content: Value = serde_json::from_str(&receipt.content).unwrap();
    assert_eq!(content["job"], blinded.as_str());
    assert_eq!(content["ask"], ask.event.id_hex());
    // the buyer recomputes it from its side; a stranger, with either public key, cannot
    let by_buyer = blinded_job_id(
        &buyer.nostr().secret_key(),
        &provider.nostr_pubkey_hex(),
        &job.id,
    )
    .unwrap();
    assert_eq!(by_buyer, blinded);
    for peer in [buyer.nostr_pubkey_hex(), provider.nostr_pubkey_hex()] {
        let guess = blinded_job_id(&stranger.nostr().secret_key(), &peer, &job.id).unwrap();
        assert_ne!(guess, blinded);
    }
    assert_ne!(blinded, job.id, "the job id itself never appears");
    assert!(!receipt.to_json().contains(&job.id));
}

#[test]
fn bacalhau_specs_are_accepted_or_refused_as_each_should_be() {
    use super::bacalhau::{is_spec, parse};
    let dir = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    )
    .join("tests/vectors/bacalhau");
    let no_download = |u: &str| -> Result<Vec<u8>, String> { Err(format!("no network: {u}")) };
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    // the wasm sample: its inline module, entry point _start
    let spec = parse(&read("wasm.yaml"), &dir, &no_download).unwrap();
    assert_eq!(spec.name.as_deref(), Some("Wasm Job"));
    assert_eq!(&spec.module[..4], b"\0asm");
    assert_eq!(spec.module.len(), 82_086);
    assert!(spec.files.is_empty() && spec.args.is_empty());
    // every other sample is refused, each for its own reason
    for (file, says) in [
        ("docker.yaml", "engine docker"),
        ("docker-hello.yaml", "engine docker"),
        ("docker-output.yaml", "engine docker"),
        ("docker-output.json", "engine docker"),
        ("docker-s3.yaml", "engine docker"),
        ("noop.yaml", "engine noop"),
        ("nameless.yaml", "engine noop"),
        ("custom-task-type.yaml", "engine flibble"),
        ("unsupported_engine_type.yml", "engine vroomvroom"),
        ("19-basic-daemon-job-v2.yml", "Type daemon"),
        ("19-basic-hello-world-v2.yml", "Count 2"),
        ("empty.yaml", "empty"),
    ] {
        let e = parse(&read(file), &dir, &no_download).unwrap_err();
        assert_eq!(e.code, "bacalhau", "{file}");
        assert!(e.message.contains(says), "{file}: {}", e.message);
    }
    // the JSON and YAML forms of one job read alike; lower-case keys work
    assert!(is_spec(&read("docker-output.json")) && is_spec(&read("docker-hello.yaml")));
    assert!(!is_spec(r#"{"engine": "wasm", "module": "x.wat"}"#));
    // the other source types and the limits, on a spec written here
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("data.txt"), "local bytes").unwrap();
    let spec_text = r#"
Type: batch
Tasks:
  - Name: main
    Engine:
      Type: wasm
      Params: {EntryModule: main.wasm, Parameters: ["-v", 3]}
    InputSources:
      - {Target: /main.wasm, Source: {Type: inline, Params: {URL: "data:application/wasm;base64,AGFzbQEAAAA="}}}
      - {Target: /inputs/data.txt, Source: {Type: local, Params: {SourcePath: data.txt}}}
      - {Target: /inputs/remote.bin, Source: {Type: urlDownload, Params: {URL: "http://x/y"}}}
      - {Target: /inputs/note.txt, Source: {Type: inline, Params: {URL: "plain text"}}}
    Resources: {Memory: 32Mb, CPU: 500m}
    Timeouts: {ExecutionTimeout: 7}
    ResultPaths: [{Name: out, Path: /outputs}]
"#;
    let fetch = |u: &str| -> Result<Vec<u8>, String> { Ok(format!("from {u}").into_bytes()) };
    let s = parse(spec_text, work.path(), &fetch).unwrap();
    assert_eq!(s.module, b"\0asm\x01\0\0\0");
    assert_eq!(s.args, ["-v", "3"]);
    assert_eq!(
        s.files,
        vec![
            ("data.txt".to_string(), b"local bytes".to_vec()),
            ("remote.bin".to_string(), b"from http://x/y".to_vec()),
            ("note.txt".to_string(), b"plain text".to_vec()),
        ]
    );
    assert_eq!((s.memory_bytes, s.wall_secs), (Some(32_000_000), Some(7)));
    for (change, says) in [
        (
            (
                "Type: inline, Params: {URL: \"plain",
                "Type: s3, Params: {URL: \"plain",
            ),
            "\"s3\"",
        ),
        (
            ("Path: /outputs", "Path: /output_custom"),
            "ResultPath /output_custom",
        ),
        (
            ("EntryModule: main.wasm", "EntryModule: other.wasm"),
            "EntryModule other.wasm",
        ),
        (("Type: batch", "Type: service"), "Type service"),
        (("Timeouts:", "Env: {A: b}\n    Timeouts:"), "environment"),
    ] {
        let e = parse(&spec_text.replace(change.0, change.1), work.path(), &fetch).unwrap_err();
        assert!(e.message.contains(says), "{says}: {}", e.message);
    }
    let e = parse(spec_text, work.path(), &no_download).unwrap_err();
    assert!(
        e.message.contains("downloading http://x/y"),
        "{}",
        e.message
    );
}

#[test]
fn the_watchdog_fails_running_jobs_past_their_wall_limit_and_no_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = JobStore::open(&dir.path().join("jobs.sqlite"), NOW).unwrap();
    let buyer = NodeKeys::generate().unwrap();
    let mut ids = Vec::new();
    for (d, fill) in [("slow", "aa"), ("quick", "bb"), ("waiting", "cc")] {
        let ask = Ask::parse(&wasm_ask(&buyer, d, 1000), NOW).unwrap();
        let (job, _) = store
            .submit(&ask, &fill.repeat(32), "sealed", NOW, 16)
            .unwrap();
        ids.push(job.id);
    }
    // two start running at NOW; the third stays accepted
    for id in &ids[..2] {
        store.transition(id, State::Running, None, NOW).unwrap();
    }
    // a wall limit of 10 s for "slow", 100 s for "quick" (read from the ask's d tag here)
    let wall = |ask: &Value| -> u64 {
        let slow = ask["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t[0] == "d" && t[1] == "slow");
        if slow { 10 } else { 100 }
    };
    // within the limit and its grace (10 + 1 + 1): nothing
    assert!(store.fail_overdue(NOW + 12, wall).unwrap().is_empty());
    let failed = store.fail_overdue(NOW + 13, wall).unwrap();
    assert_eq!(failed, vec![(ids[0].clone(), 10)]);
    let slow = store.get(&ids[0]).unwrap().unwrap();
    assert_eq!(slow.state, State::Failed);
    assert!(slow.reason.unwrap().contains("wall limit of 10 s"));
    assert_eq!(store.get(&ids[1]).unwrap().unwrap().state, State::Running);
    assert_eq!(store.get(&ids[2]).unwrap().unwrap().state, State::Accepted);
    // again later: only the quick one, once it too is past its limit
    assert_eq!(
        store.fail_overdue(NOW + 200, wall).unwrap(),
        vec![(ids[1].clone(), 100)]
    );
    assert_eq!(store.get(&ids[2]).unwrap().unwrap().state, State::Accepted);
}

#[test]
fn a_job_is_finished_with_its_receipt_in_one_write_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jobs.sqlite");
    let store = JobStore::open(&path, NOW).unwrap();
    let buyer = NodeKeys::generate().unwrap();
    let ask = Ask::parse(&wasm_ask(&buyer, "atomic", 1000), NOW).unwrap();
    let (job, _) = store
        .submit(&ask, &"dd".repeat(32), "sealed", NOW, 16)
        .unwrap();
    store
        .transition(&job.id, State::Running, None, NOW)
        .unwrap();
    let finished = Finished {
        output_digest: "ab".repeat(32),
        metered: json!({"fuel": 20_000, "wall_ms": 3}),
        verdict: json!({"mode": "delivery"}),
        started_at: NOW,
        finished_at: NOW + 1,
    };
    // the receipt's write fails (a full disk, say): the job must not be left final without it
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER no_receipt BEFORE UPDATE OF receipt ON jobs
             BEGIN SELECT RAISE(ABORT, 'disk full'); END;",
        )
        .unwrap();
    assert!(
        store
            .finish(
                &job.id,
                Some("out-of-fuel"),
                &finished,
                ("{}", "r"),
                NOW + 1
            )
            .is_err()
    );
    let still = store.get(&job.id).unwrap().unwrap();
    assert_eq!(
        (still.state, still.metered.is_none()),
        (State::Running, true)
    );
    other.execute_batch("DROP TRIGGER no_receipt").unwrap();
    let done = store
        .finish(
            &job.id,
            Some("out-of-fuel"),
            &finished,
            ("{}", "r"),
            NOW + 2,
        )
        .unwrap();
    assert_eq!(done.state, State::Failed);
    assert_eq!(done.metered.unwrap()["fuel"], 20_000);
}

#[test]
fn the_blob_index_is_versioned_and_adopts_unversioned_files() {
    // an index from before versioning: the tables, user_version 0, a row
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join(BLOBS_DIR)).unwrap();
    let path = dir.path().join(BLOBS_DIR).join(INDEX_FILE);
    {
        let db = Connection::open(&path).unwrap();
        db.execute_batch(MIGRATIONS[0]).unwrap();
        db.execute(
            "INSERT INTO blobs VALUES (?1, 3, 'text/plain', 1)",
            params!["ab".repeat(32)],
        )
        .unwrap();
    }
    let s = BlobStore::open(dir.path()).unwrap();
    let version: i64 = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, MIGRATIONS.len() as i64);
    let schema_version = version;
    // the quota's lookup by key goes through an index, not a scan of every claim
    let plan: String = Connection::open(&path)
        .unwrap()
        .query_row(
            "EXPLAIN QUERY PLAN SELECT sha256 FROM owners WHERE pubkey = 'k'",
            [],
            |r| r.get(3),
        )
        .unwrap();
    assert!(plan.contains("owners_pubkey"), "{plan}");
    let b = s.info(&"ab".repeat(32)).unwrap();
    assert_eq!((b.size, b.media.as_str(), b.uploaded), (3, "text/plain", 1));
    drop(s);
    // a newer build's file is refused, by name, and left as it is
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", schema_version + 1)
        .unwrap();
    let e = BlobStore::open(dir.path()).unwrap_err().to_string();
    assert!(e.contains("newer") && e.contains(INDEX_FILE), "{e}");
    let version: i64 = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, schema_version + 1);
}

#[test]
fn blobs_are_read_by_name_only_and_go_with_their_last_claim() {
    let dir = tempfile::tempdir().unwrap();
    let s = BlobStore::open(dir.path()).unwrap();
    std::fs::write(dir.path().join("secret"), b"x").unwrap();
    let hash = s.put(b"hello", "text/plain", "me").unwrap();
    assert_eq!(s.get(&hash).as_deref(), Some(&b"hello"[..]));
    assert_eq!(s.get("../secret"), None);
    assert_eq!(s.get(INDEX_FILE), None);
    // claims: the blob stays while anyone claims it, and goes with the last claim
    assert_eq!(s.put(b"hello", "text/plain", "you").unwrap(), hash);
    assert_eq!(s.claimed_by("me").unwrap(), vec![hash.clone()]);
    assert_eq!(s.release(&hash, "nobody").unwrap(), Released::NotClaimed);
    assert_eq!(s.release(&hash, "me").unwrap(), Released::Kept);
    assert!(s.get(&hash).is_some());
    assert_eq!(s.release(&hash, "you").unwrap(), Released::Removed);
    assert_eq!((s.get(&hash), s.info(&hash)), (None, None));
    assert!(s.claimed_by("me").unwrap().is_empty());
}

#[test]
fn a_buyer_expects_offers_from_terms_that_sell_the_ask_within_its_bid() {
    use super::service::offers::terms_would_offer;
    use super::service::{JobLimits, Price};
    let keys = NodeKeys::generate().unwrap();
    // wasm under delivery, 1 000 000 fuel, a bid of 2 sat
    let ask = Ask::parse(&wasm_ask(&keys, "expect", 1_000_000), NOW).unwrap();
    let priced = |amount: u64, per: &str, quantity: u64| {
        let mut l = JobLimits::default();
        l.prices.insert(
            "wasm".into(),
            Price {
                amount,
                unit: fleetmesh_proto::Unit::Sat,
                per: per.into(),
                quantity,
            },
        );
        l.terms()
    };
    assert!(
        terms_would_offer(&JobLimits::default().terms(), &ask),
        "free"
    );
    assert!(terms_would_offer(&priced(2, "job", 1), &ask), "at the bid");
    assert!(
        !terms_would_offer(&priced(3, "job", 1), &ask),
        "above the bid"
    );
    // 1 sat per 500 000 fuel on the ask's 1 000 000: 2 sat
    assert!(terms_would_offer(&priced(1, "fuel", 500_000), &ask));
    assert!(!terms_would_offer(&priced(1, "fuel", 400_000), &ask));
    // a price on a measure the ask does not limit cannot be quoted: no offer
    assert!(!terms_would_offer(&priced(1, "token", 1), &ask));
    let mut other = JobLimits::default().terms();
    other
        .modes
        .retain(|m| *m != fleetmesh_proto::Mode::Delivery);
    assert!(!terms_would_offer(&other, &ask), "delivery not sold");
}
