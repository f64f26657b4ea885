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
