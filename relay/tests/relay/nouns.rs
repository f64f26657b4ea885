//! The compute market's typed nouns (`fleetmesh_proto::ask`, `receipt`, `mode`) against
//! the protocol's own examples in `schemas/examples/events/` and its `common.json`: every
//! valid example parses into fields that agree with its tags, every invalid one is refused
//! naming what failed. The examples' ids and signatures are placeholders, so each is signed
//! again with a test key (its kind, time, tags and content kept).

use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::receipt::{Receipt, ReceiptBody, blinded_job_id};
use fleetmesh_proto::{Engine, Error, Event, Mode, NodeKeys, UnsignedEvent};
use serde_json::{Value, json};

fn schemas_dir() -> std::path::PathBuf {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    std::path::Path::new(&dir).join("../schemas")
}

fn examples(kind: u16) -> Value {
    let path = schemas_dir().join(format!("examples/events/kind-{kind}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn tag<'a>(v: &'a Value, name: &str) -> Option<&'a str> {
    v["tags"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t[0] == name)
        .and_then(|t| t[1].as_str())
}

/// The instance's kind, time, tags and content, signed again by `keys`.
fn resigned(keys: &NodeKeys, v: &Value) -> Event {
    keys.sign(UnsignedEvent {
        created_at: v["created_at"].as_u64().unwrap(),
        kind: u16::try_from(v["kind"].as_u64().unwrap()).unwrap(),
        tags: serde_json::from_value(v["tags"].clone()).unwrap(),
        content: v["content"].as_str().unwrap().to_owned(),
    })
    .unwrap()
}

#[test]
fn modes_and_engines_are_the_schemas_words_and_nothing_else() {
    let path = schemas_dir().join("json/common.json");
    let common: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let words = |def: &str| -> Vec<String> {
        serde_json::from_value(common["$defs"][def]["enum"].clone()).unwrap()
    };
    let modes: Vec<String> = Mode::ALL.iter().map(|m| m.to_string()).collect();
    let engines: Vec<String> = Engine::ALL.iter().map(|e| e.to_string()).collect();
    assert_eq!(modes, words("verificationMode"));
    assert_eq!(engines, words("engine"));
    for m in Mode::ALL {
        assert_eq!(m.as_str().parse::<Mode>().unwrap(), *m);
        assert_eq!(serde_json::to_value(m).unwrap(), json!(m.as_str()));
    }
    for e in Engine::ALL {
        assert_eq!(e.as_str().parse::<Engine>().unwrap(), *e);
    }
    match "Proof".parse::<Mode>() {
        Err(Error::UnknownWord { what, found, .. }) => {
            assert_eq!((what, found.as_str()), ("verification mode", "Proof"));
        }
        other => panic!("{other:?}"),
    }
    assert!("cuda".parse::<Engine>().is_err());
}

#[test]
fn the_protocols_example_asks_parse_and_its_bad_ones_are_refused() {
    let ex = examples(30810);
    let keys = NodeKeys::generate().unwrap();
    for v in ex["valid"].as_array().unwrap() {
        let event = resigned(&keys, v);
        let now = event.created_at;
        let ask = Ask::from_event(event.clone(), now).unwrap();
        // By the system clock (`TryFrom`) the examples, which expire in January 2026, have.
        assert!(matches!(Ask::try_from(&event), Err(Error::Expired { .. })));
        assert_eq!(ask.engine.as_str(), tag(v, "engine").unwrap());
        assert_eq!(ask.mode.as_str(), tag(v, "mode").unwrap());
        assert_eq!(ask.d, tag(v, "d").unwrap());
        assert_eq!(
            ask.address(),
            format!("30810:{}:{}", keys.nostr_pubkey_hex(), ask.d)
        );
        let expires: u64 = tag(v, "expiration").unwrap().parse().unwrap();
        assert_eq!(ask.expires_at, expires);
        match Ask::from_event(event, expires) {
            Err(Error::Expired {
                expired_at, now, ..
            }) => assert_eq!((expired_at, now), (expires, expires)),
            other => panic!("an ask at its expiration: {other:?}"),
        }
    }
    for bad in ex["invalid"].as_array().unwrap() {
        let why = bad["why"].as_str().unwrap();
        let event = resigned(&keys, &bad["instance"]);
        let now = event.created_at;
        match Ask::from_event(event, now) {
            Err(Error::Schema(_)) => {}
            other => panic!("{why}: {other:?}"),
        }
    }
}

#[test]
fn an_asks_tags_must_agree_with_its_content_and_it_must_be_an_ask() {
    let keys = NodeKeys::generate().unwrap();
    let v = &examples(30810)["valid"][0];
    let mut lying = v.clone();
    lying["tags"][2] = json!(["mode", "proof"]);
    match Ask::from_event(resigned(&keys, &lying), 0) {
        Err(Error::Mismatch { field, tag, .. }) => {
            assert_eq!((field, tag.as_str()), ("mode", "proof"));
        }
        other => panic!("{other:?}"),
    }
    let mut note = v.clone();
    note["kind"] = json!(1);
    match Ask::from_event(resigned(&keys, &note), 0) {
        Err(Error::WrongKind {
            expected, found, ..
        }) => assert_eq!((expected, found), (30810, 1)),
        other => panic!("{other:?}"),
    }
    // A signature that does not match is refused before anything else is read.
    let mut forged = v.clone();
    forged["content"] = json!(v["content"].as_str().unwrap().replace("2000", "1"));
    let forged = Event::from_json(&forged.to_string()).unwrap();
    assert!(matches!(
        Ask::from_event(forged, 0),
        Err(Error::InvalidEvent { .. })
    ));
}

#[test]
fn the_protocols_example_receipts_parse_and_its_bad_ones_are_refused() {
    let ex = examples(30811);
    let keys = NodeKeys::generate().unwrap();
    for v in ex["valid"].as_array().unwrap() {
        let r = Receipt::try_from(&resigned(&keys, v)).unwrap();
        assert_eq!(r.job, tag(v, "d").unwrap());
        assert_eq!(r.ask, tag(v, "e").unwrap());
        assert_eq!(r.mode.as_str(), tag(v, "mode").unwrap());
        let content: Value = serde_json::from_str(v["content"].as_str().unwrap()).unwrap();
        assert_eq!(r.engine.as_str(), content["engine"]);
        assert_eq!(r.output_digest, content["output_digest"]);
    }
    for bad in ex["invalid"].as_array().unwrap() {
        let why = bad["why"].as_str().unwrap();
        match Receipt::try_from(&resigned(&keys, &bad["instance"])) {
            Err(Error::Schema(_)) => {}
            other => panic!("{why}: {other:?}"),
        }
    }
}

#[test]
fn a_signed_receipt_reads_back_and_a_tag_that_lies_is_named() {
    let executor = NodeKeys::generate().unwrap();
    let buyer = NodeKeys::generate().unwrap();
    let job_id = "ab".repeat(16);
    let job = blinded_job_id(
        &executor.nostr().secret_key(),
        &buyer.nostr_pubkey_hex(),
        &job_id,
    )
    .unwrap();
    // The buyer finds the same blinded id from its side of the pair.
    assert_eq!(
        blinded_job_id(
            &buyer.nostr().secret_key(),
            &executor.nostr_pubkey_hex(),
            &job_id
        )
        .unwrap(),
        job
    );
    let body = ReceiptBody {
        job: job.clone(),
        ask: "cd".repeat(32),
        engine: Engine::Wasm,
        mode: Mode::Delivery,
        output_digest: "ef".repeat(32),
        metered: json!({"fuel": 1234, "wall_ms": 5}),
        verdict: json!({"mode": "delivery", "preimage_hash": "ef".repeat(32), "delivered": true}),
        started_at: 1_767_225_000,
        finished_at: 1_767_225_600,
    };
    let event = body.sign(&executor).unwrap();
    let r = Receipt::from_event(event.clone()).unwrap();
    assert_eq!(
        (r.job.as_str(), r.ask.as_str(), r.engine, r.mode),
        (
            job.as_str(),
            body.ask.as_str(),
            Engine::Wasm,
            Mode::Delivery
        )
    );
    assert_eq!(r.event.pubkey, executor.nostr_pubkey());
    assert!(
        blinded_job_id(
            &executor.nostr().secret_key(),
            &buyer.nostr_pubkey_hex(),
            "zz"
        )
        .is_err()
    );
    // The d tag says another job than the content: named.
    let mut v = event.to_value();
    v["tags"][0][1] = json!("00".repeat(32));
    match Receipt::from_event(resigned(&executor, &v)) {
        Err(Error::Mismatch { field, .. }) => assert_eq!(field, "d"),
        other => panic!("{other:?}"),
    }
}

/// Every valid example of `kind` (re-signed) reads, and signs back into an event that
/// reads the same; every invalid one is refused by the kind's schema (or, for the example
/// of another kind, as one).
fn examples_hold<T: PartialEq + std::fmt::Debug>(
    kind: u16,
    read: impl Fn(&Event) -> Result<T, Error>,
    sign: impl Fn(&T, &NodeKeys, u64) -> Result<Event, Error>,
) {
    let ex = examples(kind);
    let keys = NodeKeys::generate().unwrap();
    let valid = ex["valid"].as_array().unwrap();
    assert!(!valid.is_empty());
    for v in valid {
        let event = resigned(&keys, v);
        let noun = read(&event).unwrap_or_else(|e| panic!("kind {kind}: {v}: {e}"));
        let again = sign(&noun, &keys, event.created_at).unwrap();
        assert_eq!(again.kind, kind);
        assert_eq!(read(&again).unwrap(), noun, "kind {kind}: signed back");
    }
    for bad in ex["invalid"].as_array().unwrap() {
        let why = bad["why"].as_str().unwrap();
        match read(&resigned(&keys, &bad["instance"])) {
            Err(Error::Schema(_)) => {}
            Err(Error::WrongKind { expected, .. }) if expected == kind => {}
            other => panic!("kind {kind}: {why}: {other:?}"),
        }
    }
}

#[test]
fn every_fleetmesh_kind_reads_from_its_examples_and_signs_back() {
    use fleetmesh_proto::ledger::{Grant, Report};
    use fleetmesh_proto::nodes::{Heartbeat, Revocation, Shard};
    use fleetmesh_proto::noun::Noun;
    use fleetmesh_proto::projection::{Assertion, RelayMonitor};
    examples_hold(30801, Grant::from_event, Grant::sign);
    examples_hold(30802, Report::from_event, Report::sign);
    examples_hold(11802, Revocation::from_event, Revocation::sign);
    examples_hold(21801, Heartbeat::from_event, Heartbeat::sign);
    examples_hold(30803, Shard::from_event, Shard::sign);
    examples_hold(30385, Assertion::from_event, Assertion::sign);
    examples_hold(30166, RelayMonitor::from_event, RelayMonitor::sign);
    // Each refuses the others' kinds, naming both.
    let keys = NodeKeys::generate().unwrap();
    let budget = resigned(&keys, &examples(30801)["valid"][0]);
    match Report::try_from(&budget) {
        Err(Error::WrongKind {
            expected, found, ..
        }) => assert_eq!((expected, found), (30802, 30801)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        Assertion::try_from(&budget),
        Err(Error::WrongKind { .. })
    ));
}

/// `v` with its tag `i` replaced by `tag`, signed by `keys`.
fn with_tag(keys: &NodeKeys, v: &Value, i: usize, tag: Value) -> Event {
    let mut v = v.clone();
    match v["tags"].as_array_mut().unwrap() {
        tags if i < tags.len() => tags[i] = tag,
        tags => tags.push(tag),
    }
    resigned(keys, &v)
}

fn mismatch_on<T: std::fmt::Debug>(r: Result<T, Error>) -> &'static str {
    match r {
        Err(Error::Mismatch { field, .. }) => field,
        other => panic!("not a mismatch: {other:?}"),
    }
}

#[test]
fn tags_that_disagree_with_the_content_are_named() {
    use fleetmesh_proto::ledger::Report;
    use fleetmesh_proto::nodes::{Heartbeat, Revocation, Shard};
    let keys = NodeKeys::generate().unwrap();
    let other = json!("00".repeat(32));
    let report = &examples(30802)["valid"][0];
    let e = with_tag(&keys, report, 99, json!(["rung", "S3"]));
    assert_eq!(mismatch_on(Report::try_from(&e)), "rung");
    let revocation = &examples(11802)["valid"][0];
    let e = with_tag(&keys, revocation, 0, json!(["revoked", "ed25519", other]));
    assert_eq!(mismatch_on(Revocation::try_from(&e)), "revoked");
    let e = with_tag(&keys, revocation, 99, json!(["p", other]));
    assert_eq!(mismatch_on(Revocation::try_from(&e)), "p");
    let heartbeat = &examples(21801)["valid"][0];
    let e = with_tag(&keys, heartbeat, 0, json!(["protocol", other]));
    assert_eq!(mismatch_on(Heartbeat::try_from(&e)), "protocol");
    let shard = &examples(30803)["valid"][0];
    let e = with_tag(&keys, shard, 1, json!(["x", other]));
    assert_eq!(mismatch_on(Shard::try_from(&e)), "x");
    let e = with_tag(&keys, shard, 99, json!(["p", other]));
    assert_eq!(mismatch_on(Shard::try_from(&e)), "p");
}

#[test]
fn a_node_descriptor_reads_from_its_event_and_its_tags_must_repeat_the_content() {
    use fleetmesh_proto::identity::{DescriptorContent, DescriptorInfo, Software};
    let keys = NodeKeys::generate().unwrap();
    let info = DescriptorInfo {
        software: Software {
            name: "meshnode".into(),
            version: "0.1.0".into(),
        },
        class: fleetmesh_proto::NodeClass::Edge,
        operator: None,
        relays: vec![],
        endpoints: vec![],
        protocol_digest: "da".repeat(32),
        predecessor: None,
    };
    let event = keys.descriptor(&info, 1_767_225_600).unwrap();
    let d = DescriptorContent::try_from(&event).unwrap();
    assert_eq!(d.protocol_digest, "da".repeat(32));
    assert_eq!(d.did, keys.did());
    // the same event with a protocol tag that says something else, signed again
    let mut v = event.to_value();
    for tag in v["tags"].as_array_mut().unwrap() {
        if tag[0] == "protocol" {
            tag[1] = json!("00".repeat(32));
        }
    }
    assert_eq!(
        mismatch_on(DescriptorContent::try_from(&resigned(&keys, &v))),
        "protocol"
    );
}

#[test]
fn an_ask_signed_by_its_body_reads_back() {
    use fleetmesh_proto::ask::AskBody;
    let buyer = NodeKeys::generate().unwrap();
    let body = AskBody {
        d: "ask-9".into(),
        engine: Engine::Llm,
        mode: Mode::QuasiDeterministic,
        content: json!({"limits": {"tokens": 64}, "bid": {"amount": 10, "unit": "msat"},
                        "model": "tiny", "quorum": {"n": 3, "k": 2}}),
        expires_at: 2_000_000_000,
        provider: Some("7f".repeat(32)),
    };
    let event = body.sign(&buyer, 1_767_225_600).unwrap();
    let ask = Ask::from_event(event, 1_767_225_600).unwrap();
    assert_eq!(
        (ask.d.as_str(), ask.engine, ask.mode, ask.expires_at),
        (
            "ask-9",
            Engine::Llm,
            Mode::QuasiDeterministic,
            2_000_000_000
        )
    );
    assert_eq!(ask.content["model"], "tiny");
    assert_eq!(ask.event.tag_value("p"), Some("7f".repeat(32).as_str()));
}

#[test]
fn a_grant_names_its_pair_only_by_the_blinded_id_and_holds_its_schedule_in_order() {
    use fleetmesh_proto::ledger::{Grant, pair_id};
    use fleetmesh_proto::noun::Noun as _;
    let (a, b) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let ab = pair_id(&a.nostr().secret_key(), &b.nostr_pubkey_hex()).unwrap();
    let ba = pair_id(&b.nostr().secret_key(), &a.nostr_pubkey_hex()).unwrap();
    assert_eq!(ab, ba, "both sides compute the same pair id");
    let c = NodeKeys::generate().unwrap();
    assert_ne!(
        ab,
        pair_id(&a.nostr().secret_key(), &c.nostr_pubkey_hex()).unwrap()
    );
    let mut v = examples(30801)["valid"][0].clone();
    v["tags"][0][1] = json!(ab);
    let g = Grant::from_event(&resigned(&a, &v)).unwrap();
    assert_eq!(g.pair, ab);
    assert_eq!(g.bytes_at(g.events), g.bytes);
    assert_eq!(g.bytes_at(g.events / 2), g.bytes / 2);
    // A schedule that starts below its floor is refused by the noun (a schema cannot).
    let mut terms: Value = serde_json::from_str(v["content"].as_str().unwrap()).unwrap();
    terms["aimd"]["initial"] = json!(10);
    terms["aimd"]["min"] = json!(20);
    v["content"] = json!(terms.to_string());
    match Grant::from_event(&resigned(&a, &v)) {
        Err(Error::Schema(why)) => assert!(why.contains("floor"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_budget_receipt_is_canonical_json_signed_by_its_sender_and_chained_by_hash() {
    use fleetmesh_proto::ledger::{BudgetReceipt, Moved, ZERO};
    let keys = NodeKeys::generate().unwrap();
    let me = keys.nostr_pubkey_hex();
    let moved = |events, bytes| Moved { events, bytes };
    let first = BudgetReceipt::new(
        me.clone(),
        ZERO.into(),
        29_470_426,
        60,
        0,
        ZERO.into(),
        moved(120, 48_211),
        moved(0, 1_733),
        1_768_225_605,
    )
    .sign(&keys)
    .unwrap();
    assert!(first.verify());
    // Our serialization is RFC 8785's, by an independent canonicalizer.
    let v = serde_json::to_value(&first).unwrap();
    assert_eq!(
        serde_json::to_string(&first).unwrap(),
        serde_json_canonicalizer::to_string(&v).unwrap()
    );
    use sha2::Digest as _;
    assert_eq!(
        first.hash(),
        hex::encode(sha2::Sha256::digest(
            serde_json_canonicalizer::to_vec(&v).unwrap()
        ))
    );
    // It reads back through the schema; the next one links to it.
    assert_eq!(BudgetReceipt::from_value(&v).unwrap(), first);
    let next = BudgetReceipt::new(
        me.clone(),
        ZERO.into(),
        29_470_427,
        60,
        1,
        first.hash(),
        moved(3, 900),
        moved(1, 300),
        1_768_225_665,
    )
    .sign(&keys)
    .unwrap();
    assert_eq!(next.prev, first.hash());
    // A changed count breaks the signature; another key cannot sign for it.
    let mut lied = first.clone();
    lied.sent.events = 60;
    assert!(!lied.verify());
    let other = NodeKeys::generate().unwrap();
    assert!(first.clone().sign(&other).is_err());
    // Unknown fields and a receipt without a signature are refused by the schema.
    let mut extra = v.clone();
    extra["amount"] = json!(5);
    assert!(matches!(
        BudgetReceipt::from_value(&extra),
        Err(Error::Schema(_))
    ));
    let mut unsigned = v;
    unsigned.as_object_mut().unwrap().remove("sig");
    assert!(matches!(
        BudgetReceipt::from_value(&unsigned),
        Err(Error::Schema(_))
    ));
}

/// A replayed report (kind 30802, one per subject and reporter: addressable by the
/// subject) maps to a refusal with its reason, never to a stored or acted-on report: an
/// older version of a report is refused `duplicate:` naming the newer one kept, the same
/// one again is a duplicate, and the relay still serves the newest alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_report_is_refused_and_the_newest_stays() {
    use fleetmesh_proto::ledger::Report;
    use fleetmesh_proto::noun::Noun as _;
    let r = super::face::start(fleetmesh_relay::limits::Limits::default()).await;
    let keys = NodeKeys::generate().unwrap();
    let example = &examples(30802)["valid"][0];
    let report = Report::from_event(&resigned(&keys, example)).unwrap();
    let now = fleetmesh_proto::unix_now();
    let (older, newer) = (
        report.sign(&keys, now - 60).unwrap(),
        report.sign(&keys, now).unwrap(),
    );
    let mut c = super::face::Raw::connect(&r.url).await;
    assert_eq!(c.publish(&newer).await, (true, String::new()));
    let (ok, why) = c.publish(&older).await;
    assert!(
        !ok && why.starts_with("duplicate: a newer version"),
        "{why}"
    );
    let (ok, why) = c.publish(&newer).await;
    assert!(ok && why.starts_with("duplicate:"), "{why}");
    let stored = c
        .req(
            "r",
            &[json!({"kinds": [30802], "authors": [keys.nostr_pubkey_hex()]})],
        )
        .await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0]["id"], newer.id_hex());
}
