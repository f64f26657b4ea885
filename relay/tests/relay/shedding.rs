//! Load shedding and NIP-42 on the face: at rung 1 only granted peers write and open
//! subscriptions, at rung 2 each within its grant; an anonymous client is challenged and
//! refused `auth-required:`, then served once it authenticates as a granted key — by
//! rust-nostr's own client, which answers the challenge and retries by itself; every bad
//! AUTH is refused, naming what failed; refusals are counted per key as strain.

use std::sync::Arc;
use std::time::Duration;

use fleetmesh_relay::face::{Allowance, Shedding, next_rung};

use fleetmesh_relay::limits::Limits;
use nostr_sdk::prelude as sdk;
use serde_json::{Value, json};

use super::face::{Raw, TestRelay, start};

/// A relay pinned at `rung`, granting `granted` (hex) 3 events per minute of the shard
/// of kind 1.
async fn shedding(rung: Shedding, granted: String) -> TestRelay {
    let r = start(Limits {
        shedding: rung,
        ..Limits::default()
    })
    .await;
    let notes =
        fleetmesh_proto::filter::Filter::from_value(&json!({"kinds": [1]}), Default::default())
            .unwrap();
    let shards = Arc::new(vec![notes]);
    r.relay.set_granted(Arc::new(move |key: &str| {
        (key == granted).then(|| Allowance {
            events: 3,
            window_secs: 60,
            shards: shards.clone(),
        })
    }));
    r
}

fn note(keys: &sdk::Keys, text: &str) -> Value {
    use nostr::JsonUtil as _;
    let e = sdk::EventBuilder::text_note(text)
        .sign_with_keys(keys)
        .unwrap();
    serde_json::from_str(&e.as_json()).unwrap()
}

/// `["AUTH", event]` for `challenge` at `relay_url`, built by the nostr crate, edited by
/// `edit` (then re-signed).
fn auth(
    keys: &sdk::Keys,
    challenge: &str,
    relay_url: &str,
    edit: impl FnOnce(&mut Value),
) -> Value {
    use nostr::JsonUtil as _;
    let url = sdk::RelayUrl::parse(relay_url).unwrap();
    let e = sdk::EventBuilder::auth(challenge, url)
        .sign_with_keys(keys)
        .unwrap();
    let mut v: Value = serde_json::from_str(&e.as_json()).unwrap();
    edit(&mut v);
    if v["id"] == e.id.to_hex() && v != serde_json::from_str::<Value>(&e.as_json()).unwrap() {
        // re-sign the edited fields with the same key
        let unsigned = sdk::UnsignedEvent::new(
            keys.public_key(),
            sdk::Timestamp::from(v["created_at"].as_u64().unwrap()),
            sdk::Kind::from(u16::try_from(v["kind"].as_u64().unwrap()).unwrap()),
            v["tags"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| {
                    let parts: Vec<String> = t
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|s| s.as_str().unwrap().to_owned())
                        .collect();
                    sdk::Tag::parse(parts).unwrap()
                })
                .collect::<Vec<_>>(),
            v["content"].as_str().unwrap(),
        );
        let e = unsigned.sign_with_keys(keys).unwrap();
        v = serde_json::from_str(&e.as_json()).unwrap();
    }
    json!(["AUTH", v])
}

/// Sends EVENT `e`; the OK's (accepted, message), skipping an AUTH challenge (returned).
async fn publish(c: &mut Raw, e: &Value) -> (bool, String, Option<String>) {
    c.send_json(json!(["EVENT", e])).await;
    let mut challenge = None;
    loop {
        let v = c.recv().await;
        match v[0].as_str() {
            Some("AUTH") => challenge = v[1].as_str().map(str::to_owned),
            Some("OK") => {
                assert_eq!(v[1], e["id"], "{v}");
                return (v[2] == true, v[3].as_str().unwrap().to_owned(), challenge);
            }
            _ => panic!("unexpected {v}"),
        }
    }
}

/// Sends `msg` (an AUTH) and returns its OK's (accepted, message).
async fn answer(c: &mut Raw, msg: Value) -> (bool, String) {
    c.send_json(msg).await;
    let v = c.recv().await;
    assert_eq!(v[0], "OK", "{v}");
    (v[2] == true, v[3].as_str().unwrap().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_rung_1_only_authenticated_granted_peers_write_and_subscribe() {
    let granted = sdk::Keys::generate();
    let r = shedding(Shedding::Rung1, granted.public_key().to_hex()).await;
    assert_eq!(r.relay.shedding_rung(), 1);
    let mut c = Raw::connect(&r.url).await;
    // anonymous: challenged, refused auth-required, and its REQ closed the same way
    let (ok, why, challenge) = publish(&mut c, &note(&granted, "before auth")).await;
    assert!(!ok && why.starts_with("auth-required:"), "{why}");
    let challenge = challenge.expect("an AUTH challenge before the refusal");
    c.send_json(json!(["REQ", "s", {"kinds": [1]}])).await;
    let v = c.recv().await;
    assert_eq!((&v[0], &v[1]), (&json!("CLOSED"), &json!("s")), "{v}");
    assert!(v[2].as_str().unwrap().starts_with("auth-required:"), "{v}");
    // bad AUTHs, each named
    let host = r.url.clone();
    let stranger = sdk::Keys::generate();
    for (msg, want) in [
        (
            auth(&granted, "not-the-challenge", &host, |_| {}),
            "challenge",
        ),
        (
            auth(&granted, &challenge, "wss://other.example", |_| {}),
            "another relay",
        ),
        (
            auth(&granted, &challenge, &host, |v| {
                v["created_at"] = json!(1_000_000)
            }),
            "created_at",
        ),
        (
            auth(&granted, &challenge, &host, |v| v["kind"] = json!(1)),
            "kind 22242",
        ),
        (
            auth(&granted, &challenge, &host, |v| {
                v["tags"] = json!([["challenge", challenge.clone()]])
            }),
            "relay tag",
        ),
    ] {
        let (ok, why) = answer(&mut c, msg).await;
        assert!(
            !ok && why.contains(want) && why.starts_with("invalid:"),
            "{want}: {why}"
        );
    }
    let mut forged = auth(&granted, &challenge, &host, |_| {});
    forged[1]["sig"] = json!("00".repeat(64));
    let (ok, why) = answer(&mut c, forged).await;
    assert!(!ok && why.starts_with("invalid:"), "{why}");
    // a stranger authenticates, but is not granted: rate-limited
    let mut s = Raw::connect(&r.url).await;
    let (_, _, ch) = publish(&mut s, &note(&stranger, "x")).await;
    let (ok, why) = answer(&mut s, auth(&stranger, &ch.unwrap(), &host, |_| {})).await;
    assert!(ok, "{why}");
    let (ok, why, _) = publish(&mut s, &note(&stranger, "y")).await;
    assert!(!ok && why.starts_with("rate-limited:"), "{why}");
    // the granted key authenticates: served, writes and subscriptions
    let (ok, why) = answer(&mut c, auth(&granted, &challenge, &host, |_| {})).await;
    assert!(ok, "{why}");
    let e = note(&granted, "after auth");
    let (ok, why, _) = publish(&mut c, &e).await;
    assert!(ok, "{why}");
    let got = c.req("t", &[json!({"ids": [e["id"]]})]).await;
    assert_eq!(got.len(), 1);
    // the strain ledger: the anonymous address and the stranger's key
    let strain = r.relay.strain();
    assert!(strain.get("ip:127.0.0.1").copied() >= Some(2), "{strain:?}");
    assert_eq!(
        strain.get(&stranger.public_key().to_hex()),
        Some(&1),
        "{strain:?}"
    );
    assert!(
        !strain.contains_key(&granted.public_key().to_hex()),
        "{strain:?}"
    );
    let text = r.relay.render_metrics().await.unwrap();
    assert!(text.contains("fleetmesh_relay_shedding_rung 1"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_rung_2_a_granted_peer_writes_within_its_grant_and_rust_nostr_authenticates_by_itself() {
    let granted = sdk::Keys::generate();
    let r = shedding(Shedding::Rung2, granted.public_key().to_hex()).await;
    // nostr-sdk answers the challenge and retries on `auth-required:` by itself
    let client = super::face::sdk_client_as(&granted, &r.url).await;
    // outside the grant's shard (kind 1): refused, and the grant not spent by it
    let reaction = sdk::EventBuilder::new(sdk::Kind::Reaction, "+")
        .sign_with_keys(&granted)
        .unwrap();
    let out = client.send_event(&reaction).await.unwrap();
    let why = out
        .failed
        .values()
        .next()
        .expect("a reaction is outside the shard");
    assert!(why.contains("within its grant's shards"), "{why}");
    let mut sent = Vec::new();
    for i in 0..3 {
        let e = sdk::EventBuilder::text_note(format!("granted {i}"))
            .sign_with_keys(&granted)
            .unwrap();
        let out = client.send_event(&e).await.unwrap();
        assert!(out.failed.is_empty() && out.success.len() == 1, "{out:?}");
        sent.push(e.id);
    }
    // the grant's 3 events this window are spent
    let e = sdk::EventBuilder::text_note("one more")
        .sign_with_keys(&granted)
        .unwrap();
    let out = client.send_event(&e).await.unwrap();
    let why = out.failed.values().next().expect("the fourth is refused");
    assert!(why.contains("grant of 3 events per 60 s is spent"), "{why}");
    let got = client
        .fetch_events(
            sdk::Filter::new().author(granted.public_key()),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 3);
}

#[test]
fn the_rung_rises_at_once_and_steps_down_one_rung_after_a_calm_spell() {
    let calm = fleetmesh_relay::face::CALM;
    let busy = Duration::ZERO;
    assert_eq!(next_rung(0, 10, 0, busy), 0);
    assert_eq!(next_rung(0, 60, 0, busy), 1);
    assert_eq!(next_rung(0, 300, 0, busy), 2, "straight to 2");
    assert_eq!(next_rung(0, 0, 55, busy), 1, "the output budget half spent");
    assert_eq!(next_rung(1, 0, 85, busy), 2);
    assert_eq!(next_rung(2, 0, 0, busy), 2, "not calm long enough");
    assert_eq!(next_rung(2, 0, 0, calm), 1, "one rung at a time");
    assert_eq!(next_rung(1, 0, 0, calm), 0);
    assert_eq!(next_rung(2, 100, 0, calm), 1);
}

#[test]
fn while_shedding_the_writer_refuses_what_waited_too_long_but_never_the_priority_lane() {
    use fleetmesh_relay::store::writer::Writer;
    use fleetmesh_relay::store::{InsertOutcome, Store};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.db");
    drop(Store::create(&path).unwrap());
    let (w, thread) = Writer::start(&path, Default::default(), 64, 16).unwrap();
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let insert = |text: &str, priority: bool| {
        let e = Arc::new(super::signed(
            &keys,
            1,
            fleetmesh_proto::unix_now(),
            &[],
            text,
        ));
        let json: Arc<str> = e.to_json().into();
        let (tx, rx) = std::sync::mpsc::channel();
        let done = Box::new(move |o| tx.send(o).unwrap());
        if priority {
            w.insert_priority(e, json, done).unwrap();
        } else {
            w.insert(e, json, done).unwrap();
        }
        rx.recv_timeout(Duration::from_secs(5)).unwrap().unwrap()
    };
    assert_eq!(insert("before", false), InsertOutcome::Stored);
    // anything that waited at all is past a nanosecond
    w.set_shed_after(Some(Duration::from_nanos(1)));
    assert_eq!(insert("shed", false), InsertOutcome::Shed);
    assert_eq!(insert("granted", true), InsertOutcome::Stored);
    w.set_shed_after(None);
    assert_eq!(insert("after", false), InsertOutcome::Stored);
    w.stop();
    drop(w);
    thread.join().unwrap();
    let store = Store::open_read_only(&path).unwrap();
    assert_eq!(
        fleetmesh_relay::store::EventStore::event_count(&store).unwrap(),
        3
    );
}
