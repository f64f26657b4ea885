//! The WebSocket face, driven by an independent client (rust-nostr's `nostr-sdk`) and by a
//! raw WebSocket client for the exact wire behaviour: prefixes, NOTICEs, limits, ordering.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent};
use fleetmesh_relay::limits::Limits;
use fleetmesh_relay::metrics::Rejection;
use fleetmesh_relay::{Relay, RelayConfig, Store};
use futures_util::{SinkExt as _, StreamExt as _};
use nostr_sdk::prelude as sdk;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// A relay on 127.0.0.1:0 with its own store, stopped on drop.
pub(crate) struct TestRelay {
    pub(crate) url: String,
    pub(crate) relay: Arc<Relay>,
    /// The relay's database file.
    pub(crate) db: std::path::PathBuf,
    _dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.relay.close_all();
        self.server.abort();
    }
}

pub(crate) async fn start(limits: Limits) -> TestRelay {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("relay.db");
    drop(Store::create(&db).unwrap());
    let (relay, _writer) = Relay::start(
        &db,
        RelayConfig {
            limits,
            ..Default::default()
        },
    )
    .unwrap();
    let (addr, server) = relay
        .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap();
    TestRelay {
        url: format!("ws://{addr}"),
        relay,
        db,
        _dir: dir,
        server,
    }
}

/// A client WebSocket.
pub(crate) type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A raw NIP-01 client.
pub(crate) struct Raw {
    pub(crate) ws: Ws,
}

impl Raw {
    pub(crate) async fn connect(url: &str) -> Raw {
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Raw { ws }
    }

    pub(crate) async fn send(&mut self, text: impl Into<String>) {
        self.ws
            .send(Message::Text(text.into().into()))
            .await
            .unwrap();
    }

    pub(crate) async fn send_json(&mut self, v: Value) {
        self.send(v.to_string()).await;
    }

    /// The next text message, parsed; panics after 5 s.
    pub(crate) async fn recv(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(5), self.ws.next())
                .await
                .expect("a message within 5 s")
                .expect("the connection is open")
                .expect("a websocket message");
            if let Message::Text(t) = msg {
                return serde_json::from_str(t.as_str()).unwrap();
            }
        }
    }

    /// Nothing arrives within `ms`.
    pub(crate) async fn silent_for(&mut self, ms: u64) -> bool {
        tokio::time::timeout(Duration::from_millis(ms), self.ws.next())
            .await
            .is_err()
    }

    pub(crate) async fn publish(&mut self, e: &Event) -> (bool, String) {
        self.send(format!("[\"EVENT\",{}]", e.to_json())).await;
        let v = self.recv().await;
        assert_eq!(v[0], "OK", "{v}");
        assert_eq!(v[1], e.id_hex(), "{v}");
        (v[2].as_bool().unwrap(), v[3].as_str().unwrap().to_owned())
    }

    /// Sends a REQ and returns the events before EOSE.
    pub(crate) async fn req(&mut self, subid: &str, filters: &[Value]) -> Vec<Value> {
        let mut msg = vec![json!("REQ"), json!(subid)];
        msg.extend(filters.iter().cloned());
        self.send_json(Value::Array(msg)).await;
        let mut events = Vec::new();
        loop {
            let v = self.recv().await;
            match v[0].as_str() {
                Some("EVENT") if v[1] == subid => events.push(v[2].clone()),
                Some("EOSE") if v[1] == subid => return events,
                _ => panic!("unexpected {v} while waiting for EOSE of {subid}"),
            }
        }
    }
}

use super::signed as note;

fn now() -> u64 {
    fleetmesh_proto::unix_now()
}

/// rust-nostr's client on `url` signing as `keys`, answering NIP-42 challenges by itself
/// (and retrying what `auth-required:` refused), connected.
pub(crate) async fn sdk_client_as(keys: &sdk::Keys, url: &str) -> sdk::Client {
    let client = sdk::Client::builder()
        .signer(keys.clone())
        .opts(sdk::ClientOptions::new().automatic_authentication(true))
        .build();
    client.add_relay(url).await.unwrap();
    client.connect().await;
    client
        .wait_for_connection(std::time::Duration::from_secs(5))
        .await;
    client
}

async fn sdk_client(url: &str) -> sdk::Client {
    let client = sdk::Client::new(sdk::Keys::generate());
    client.add_relay(url).await.unwrap();
    client.connect().await;
    client.wait_for_connection(Duration::from_secs(5)).await;
    client
}

fn sdk_ids(events: &sdk::Events) -> Vec<String> {
    let mut v: Vec<_> = events
        .iter()
        .map(|e| (e.created_at, e.id.to_hex()))
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    v.into_iter().map(|(_, id)| id).collect()
}

const T: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nostr_sdk_publishes_replaces_deletes_and_queries() {
    let r = start(Limits::default()).await;
    let client = sdk_client(&r.url).await;
    let keys = sdk::Keys::generate();

    // Publish, and publish again: the duplicate is acknowledged, not stored twice.
    let hello = sdk::EventBuilder::text_note("hello")
        .sign_with_keys(&keys)
        .unwrap();
    let out = client.send_event(&hello).await.unwrap();
    assert!(out.failed.is_empty() && out.success.len() == 1, "{out:?}");
    let out = client.send_event(&hello).await.unwrap();
    assert!(out.failed.is_empty(), "a duplicate is OK true: {out:?}");
    let got = client
        .fetch_events(sdk::Filter::new().id(hello.id), T)
        .await
        .unwrap();
    assert_eq!(sdk_ids(&got), vec![hello.id.to_hex()]);

    // Replaceable: the newest metadata wins; an older one is refused with duplicate:.
    let t0 = sdk::Timestamp::now().as_secs() - 100;
    let meta = |name: &str, at: u64| {
        sdk::EventBuilder::metadata(&sdk::Metadata::new().name(name))
            .custom_created_at(sdk::Timestamp::from(at))
            .sign_with_keys(&keys)
            .unwrap()
    };
    let (m1, m2, m0) = (meta("one", t0), meta("two", t0 + 10), meta("zero", t0 - 10));
    client.send_event(&m1).await.unwrap();
    client.send_event(&m2).await.unwrap();
    let out = client.send_event(&m0).await.unwrap();
    let why = out
        .failed
        .values()
        .next()
        .expect("an older version is refused");
    assert!(why.starts_with("duplicate:"), "{why}");
    let got = client
        .fetch_events(
            sdk::Filter::new()
                .author(keys.public_key())
                .kind(sdk::Kind::Metadata),
            T,
        )
        .await
        .unwrap();
    assert_eq!(sdk_ids(&got), vec![m2.id.to_hex()]);

    // Addressable: one per d tag.
    let addr = |d: &str, content: &str, at: u64| {
        sdk::EventBuilder::new(sdk::Kind::Custom(30023), content)
            .tag(sdk::Tag::identifier(d))
            .custom_created_at(sdk::Timestamp::from(at))
            .sign_with_keys(&keys)
            .unwrap()
    };
    let (a1, a2, b1) = (
        addr("a", "a1", t0),
        addr("a", "a2", t0 + 1),
        addr("b", "b1", t0),
    );
    for e in [&a1, &a2, &b1] {
        assert!(client.send_event(e).await.unwrap().failed.is_empty());
    }
    let got = client
        .fetch_events(sdk::Filter::new().kind(sdk::Kind::Custom(30023)), T)
        .await
        .unwrap();
    assert_eq!(sdk_ids(&got), vec![a2.id.to_hex(), b1.id.to_hex()]);
    let got = client
        .fetch_events(
            sdk::Filter::new()
                .kind(sdk::Kind::Custom(30023))
                .identifier("a"),
            T,
        )
        .await
        .unwrap();
    assert_eq!(sdk_ids(&got), vec![a2.id.to_hex()]);

    // Deletion (NIP-09): gone, and refused when sent again.
    let del = sdk::EventBuilder::delete(sdk::EventDeletionRequest::new().id(hello.id))
        .sign_with_keys(&keys)
        .unwrap();
    assert!(client.send_event(&del).await.unwrap().failed.is_empty());
    let got = client
        .fetch_events(sdk::Filter::new().id(hello.id), T)
        .await
        .unwrap();
    assert!(got.is_empty(), "deleted");
    let out = client.send_event(&hello).await.unwrap();
    let why = out
        .failed
        .values()
        .next()
        .expect("a deleted event is refused");
    assert!(why.starts_with("blocked:"), "{why}");

    // Expiration (NIP-40): an expired event is invalid; a future one is stored.
    let expired = sdk::EventBuilder::text_note("old news")
        .tag(sdk::Tag::expiration(sdk::Timestamp::from(t0)))
        .sign_with_keys(&keys)
        .unwrap();
    let out = client.send_event(&expired).await.unwrap();
    assert!(
        out.failed.values().next().unwrap().starts_with("invalid:"),
        "{out:?}"
    );
    let later = sdk::EventBuilder::text_note("for a while")
        .tag(sdk::Tag::expiration(sdk::Timestamp::from(t0 + 10_000)))
        .sign_with_keys(&keys)
        .unwrap();
    assert!(client.send_event(&later).await.unwrap().failed.is_empty());
    assert_eq!(
        client
            .fetch_events(sdk::Filter::new().id(later.id), T)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nostr_sdk_live_subscription_receives_new_events() {
    let r = start(Limits::default()).await;
    let reader = sdk_client(&r.url).await;
    let writer = sdk_client(&r.url).await;
    let keys = sdk::Keys::generate();
    let mut notes = reader.notifications();
    let sub = reader
        .subscribe(
            sdk::Filter::new()
                .author(keys.public_key())
                .kind(sdk::Kind::TextNote),
            None,
        )
        .await
        .unwrap();
    assert!(sub.failed.is_empty(), "{sub:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let e = sdk::EventBuilder::text_note("live")
        .sign_with_keys(&keys)
        .unwrap();
    let other = sdk::EventBuilder::text_note("someone else")
        .sign_with_keys(&sdk::Keys::generate())
        .unwrap();
    writer.send_event(&other).await.unwrap();
    writer.send_event(&e).await.unwrap();
    let got = tokio::time::timeout(T, async {
        loop {
            if let Ok(sdk::RelayPoolNotification::Event {
                subscription_id,
                event,
                ..
            }) = notes.recv().await
                && subscription_id == sub.val
            {
                return event;
            }
        }
    })
    .await
    .expect("the live event arrives");
    assert_eq!(got.id, e.id, "only the matching event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nostr_sdk_filters_cover_every_field() {
    let r = start(Limits::default()).await;
    let client = sdk_client(&r.url).await;
    let (a, b) = (sdk::Keys::generate(), sdk::Keys::generate());
    let base = sdk::Timestamp::now().as_secs() - 1000;
    let mk = |keys: &sdk::Keys, kind: u16, at: u64, tags: Vec<sdk::Tag>| {
        sdk::EventBuilder::new(sdk::Kind::Custom(kind), format!("{kind}@{at}"))
            .tags(tags)
            .custom_created_at(sdk::Timestamp::from(base + at))
            .sign_with_keys(keys)
            .unwrap()
    };
    let e1 = mk(&a, 1, 1, vec![sdk::Tag::hashtag("rust")]);
    let e2 = mk(&a, 7, 2, vec![sdk::Tag::hashtag("nostr")]);
    let e3 = mk(
        &b,
        1,
        3,
        vec![
            sdk::Tag::hashtag("rust"),
            sdk::Tag::public_key(a.public_key()),
        ],
    );
    let e4 = mk(&b, 1, 4, vec![]);
    for e in [&e1, &e2, &e3, &e4] {
        assert!(client.send_event(e).await.unwrap().failed.is_empty());
    }
    let id = |e: &sdk::Event| e.id.to_hex();
    let cases: Vec<(sdk::Filter, Vec<String>)> = vec![
        (
            sdk::Filter::new().ids([e1.id, e4.id]),
            vec![id(&e4), id(&e1)],
        ),
        (
            sdk::Filter::new().author(a.public_key()),
            vec![id(&e2), id(&e1)],
        ),
        (sdk::Filter::new().kind(sdk::Kind::Custom(7)), vec![id(&e2)]),
        (sdk::Filter::new().hashtag("rust"), vec![id(&e3), id(&e1)]),
        (sdk::Filter::new().pubkey(a.public_key()), vec![id(&e3)]),
        (
            sdk::Filter::new()
                .author(b.public_key())
                .since(sdk::Timestamp::from(base + 4)),
            vec![id(&e4)],
        ),
        (
            sdk::Filter::new()
                .author(a.public_key())
                .until(sdk::Timestamp::from(base + 1)),
            vec![id(&e1)],
        ),
        (
            sdk::Filter::new()
                .authors([a.public_key(), b.public_key()])
                .limit(2),
            vec![id(&e4), id(&e3)],
        ),
        (
            sdk::Filter::new()
                .kind(sdk::Kind::Custom(1))
                .hashtag("rust")
                .author(b.public_key()),
            vec![id(&e3)],
        ),
    ];
    for (filter, want) in cases {
        let got = client.fetch_events(filter.clone(), T).await.unwrap();
        assert_eq!(sdk_ids(&got), want, "{filter:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_then_eose_then_live_and_close_stops_delivery() {
    let r = start(Limits::default()).await;
    let keys = NodeKeys::generate().unwrap();
    let t = now() - 100;
    let old = [
        note(&keys, 1, t, &[], "a"),
        note(&keys, 1, t + 1, &[], "b"),
        note(&keys, 1, t + 2, &[], "c"),
    ];
    let mut publisher = Raw::connect(&r.url).await;
    for e in &old {
        assert_eq!(publisher.publish(e).await, (true, String::new()));
    }
    let mut sub = Raw::connect(&r.url).await;
    let got = sub.req("s1", &[json!({"kinds": [1]})]).await;
    let got: Vec<&str> = got.iter().map(|e| e["id"].as_str().unwrap()).collect();
    let want: Vec<String> = old.iter().rev().map(Event::id_hex).collect();
    assert_eq!(got, want, "newest first, then EOSE");

    // Live: a new matching event arrives after EOSE; a non-matching one does not.
    let live = note(&keys, 1, now(), &[], "live");
    let other = note(&keys, 2, now(), &[], "other kind");
    assert!(publisher.publish(&other).await.0);
    assert!(publisher.publish(&live).await.0);
    let v = sub.recv().await;
    assert_eq!(v, json!(["EVENT", "s1", live.to_value()]));
    // Ephemeral: delivered live, never stored.
    let eph = note(&keys, 20001, now(), &[], "ephemeral");
    sub.send_json(json!(["REQ", "eph", {"kinds": [20001]}]))
        .await;
    assert_eq!(sub.recv().await, json!(["EOSE", "eph"]));
    assert_eq!(publisher.publish(&eph).await, (true, String::new()));
    assert_eq!(sub.recv().await, json!(["EVENT", "eph", eph.to_value()]));
    assert!(
        sub.req("eph2", &[json!({"kinds": [20001]})])
            .await
            .is_empty(),
        "not stored"
    );

    // CLOSE: nothing more for s1.
    sub.send_json(json!(["CLOSE", "s1"])).await;
    sub.send_json(json!(["CLOSE", "eph"])).await;
    sub.send_json(json!(["CLOSE", "eph2"])).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        publisher
            .publish(&note(&keys, 1, now(), &[], "after close"))
            .await
            .0
    );
    assert!(sub.silent_for(300).await, "no delivery after CLOSE");
    // A REQ with the same id replaces the old subscription: afterwards only the new
    // filter's live events arrive under that id.
    sub.send_json(json!(["REQ", "x", {"kinds": [1], "limit": 0}]))
        .await;
    sub.send_json(json!(["REQ", "x", {"kinds": [2], "limit": 0}]))
        .await;
    while sub.recv().await[0] != "EOSE" {}
    while !sub.silent_for(200).await {}
    let k1 = note(&keys, 1, now(), &[], "kind 1 after replace");
    let k2 = note(&keys, 2, now(), &[], "kind 2 after replace");
    assert!(publisher.publish(&k1).await.0);
    assert!(publisher.publish(&k2).await.0);
    assert_eq!(sub.recv().await, json!(["EVENT", "x", k2.to_value()]));
    assert!(sub.silent_for(300).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_get_machine_readable_rejections() {
    let r = start(Limits {
        max_event_tags: 8,
        max_content_length: 100,
        ..Limits::default()
    })
    .await;
    let keys = NodeKeys::generate().unwrap();
    let mut c = Raw::connect(&r.url).await;
    let good = note(&keys, 1, now(), &[], "fine");

    // Bad id: content changed after signing.
    let mut v = good.to_value();
    v["content"] = json!("tampered");
    c.send_json(json!(["EVENT", v])).await;
    let ok = c.recv().await;
    assert_eq!(ok[2], false);
    assert!(
        ok[3].as_str().unwrap().starts_with("invalid: event id"),
        "{ok}"
    );
    // Bad signature.
    let mut v = good.to_value();
    let sig = v["sig"].as_str().unwrap().to_owned();
    v["sig"] = json!(format!(
        "{}{}",
        if sig.starts_with('0') { "1" } else { "0" },
        &sig[1..]
    ));
    c.send_json(json!(["EVENT", v])).await;
    let ok = c.recv().await;
    assert_eq!(
        ok,
        json!(["OK", good.id_hex(), false, "invalid: bad signature"])
    );
    // Malformed fields name the field.
    let mut v = good.to_value();
    v["pubkey"] = json!("xyz");
    c.send_json(json!(["EVENT", v])).await;
    let ok = c.recv().await;
    assert!(
        ok[3].as_str().unwrap().starts_with("invalid: pubkey"),
        "{ok}"
    );
    // Limits.
    let nine: Vec<[&str; 2]> = vec![["t", "x"]; 9];
    let nine: Vec<&[&str]> = nine.iter().map(|t| &t[..]).collect();
    let many_tags = note(&keys, 1, now(), &nine, "");
    let (ok, msg) = c.publish(&many_tags).await;
    assert!(
        !ok && msg.starts_with("invalid: 9 tags, the most allowed is 8"),
        "{msg}"
    );
    let long = note(&keys, 1, now(), &[], &"x".repeat(101));
    let (ok, msg) = c.publish(&long).await;
    assert!(
        !ok && msg.starts_with("invalid: content of 101 bytes"),
        "{msg}"
    );
    let future = note(&keys, 1, now() + 3600, &[], "from the future");
    assert_eq!(
        c.publish(&future).await,
        (false, "invalid: created_at is too far in the future".into())
    );
    // fleetmesh kinds must satisfy their schema: a compute ask without its tags.
    let ask = note(&keys, 30810, now(), &[&["d", "job-1"]], "{}");
    let (ok, msg) = c.publish(&ask).await;
    assert!(!ok && msg.starts_with("invalid: /"), "{msg}");
    // ... and a valid one, re-signed from the schema examples, is stored.
    let example: Value = serde_json::from_str(include_str!(
        "../../../schemas/examples/events/kind-30810.json"
    ))
    .unwrap();
    let ex = &example["valid"][0];
    let tags: Vec<Vec<String>> = serde_json::from_value(ex["tags"].clone()).unwrap();
    let valid_ask = keys
        .sign(UnsignedEvent {
            created_at: now(),
            kind: 30810,
            tags: tags
                .into_iter()
                .map(|t| {
                    if t[0] == "expiration" {
                        vec![t[0].clone(), (now() + 3600).to_string()]
                    } else {
                        t
                    }
                })
                .collect(),
            content: ex["content"].as_str().unwrap().into(),
        })
        .unwrap();
    assert_eq!(c.publish(&valid_ask).await, (true, String::new()));
    // The good event, after all that, is accepted on the same connection.
    assert_eq!(c.publish(&good).await, (true, String::new()));
    assert_eq!(
        c.publish(&good).await,
        (true, "duplicate: already have this event".into())
    );
    assert!(r.relay.metrics().rejected(Rejection::Invalid) >= 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_messages_get_notices_and_the_connection_survives() {
    let r = start(Limits {
        max_message_length: 4096,
        ..Limits::default()
    })
    .await;
    let mut c = Raw::connect(&r.url).await;
    for (bad, want) in [
        ("{not json", "invalid: message is not JSON"),
        ("{\"a\": 1}", "invalid: a message must be a JSON array"),
        ("[]", "invalid: a message must start with its type"),
        ("[\"HELLO\"]", "invalid: unknown message type \"HELLO\""),
        ("[\"EVENT\"]", "invalid: EVENT takes exactly one event"),
        ("[\"EVENT\", 5]", "invalid: event"),
        ("[\"REQ\"]", "invalid: REQ needs a subscription id"),
        ("[\"CLOSE\", 3]", "invalid: CLOSE needs a subscription id"),
    ] {
        c.send(bad).await;
        let v = c.recv().await;
        assert_eq!(v[0], "NOTICE", "{bad}: {v}");
        assert!(v[1].as_str().unwrap().starts_with(want), "{bad}: {v}");
    }
    c.ws.send(Message::Binary(vec![1, 2, 3].into()))
        .await
        .unwrap();
    assert!(c.recv().await[1].as_str().unwrap().contains("binary"));
    // Over the advertised limit: a NOTICE, and the connection stays.
    c.send(format!(
        "[\"REQ\",\"big\",{{\"#t\":[\"{}\"]}}]",
        "x".repeat(5000)
    ))
    .await;
    let v = c.recv().await;
    assert!(
        v[1].as_str().unwrap().contains("exceeds the limit of 4096"),
        "{v}"
    );
    assert!(c.req("still-here", &[json!({"limit": 1})]).await.is_empty());
    // Far over it (2 MiB): the connection is closed, the relay is not.
    let _ = c.ws.send(Message::Text("x".repeat(2 << 20).into())).await;
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match c.ws.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the oversized connection was closed");
    let mut again = Raw::connect(&r.url).await;
    assert!(again.req("alive", &[json!({"limit": 1})]).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_filter_and_rate_limits_are_enforced() {
    let r = start(Limits {
        max_subscriptions: 2,
        max_filters: 2,
        max_limit: 3,
        max_subid_length: 8,
        events_per_second: 0.001,
        event_burst: 5.0,
        reqs_per_second: 0.001,
        req_burst: 8.0,
        ..Limits::default()
    })
    .await;
    let keys = NodeKeys::generate().unwrap();
    let mut c = Raw::connect(&r.url).await;
    // Five events fit the burst; the sixth is rate-limited.
    for i in 0..5 {
        assert!(
            c.publish(&note(&keys, 1, now() - 10 + i, &[], &format!("{i}")))
                .await
                .0
        );
    }
    let (ok, msg) = c.publish(&note(&keys, 1, now(), &[], "one too many")).await;
    assert!(!ok && msg.starts_with("rate-limited:"), "{msg}");
    // The limit is capped at max_limit.
    assert_eq!(c.req("a", &[json!({"limit": 100})]).await.len(), 3);
    assert_eq!(
        c.req("b", &[json!({})]).await.len(),
        3,
        "max_limit is the default limit"
    );
    // Too many filters.
    c.send_json(json!(["REQ", "c", {}, {}, {}])).await;
    let v = c.recv().await;
    assert_eq!(v[0], "CLOSED");
    assert!(
        v[2].as_str().unwrap().starts_with("invalid: 3 filters"),
        "{v}"
    );
    // Too many subscriptions (a and b are open).
    c.send_json(json!(["REQ", "d", {}])).await;
    let v = c.recv().await;
    assert!(
        v[0] == "CLOSED"
            && v[2]
                .as_str()
                .unwrap()
                .starts_with("blocked: too many open subscriptions"),
        "{v}"
    );
    // Closing one makes room.
    c.send_json(json!(["CLOSE", "a"])).await;
    assert_eq!(c.req("e", &[json!({"limit": 1})]).await.len(), 1);
    // Subscription id too long, bad filter.
    c.send_json(json!(["REQ", "123456789", {}])).await;
    assert!(
        c.recv().await[1]
            .as_str()
            .unwrap()
            .contains("subscription ids are 1 to 8")
    );
    c.send_json(json!(["REQ", "b", {"kinds": ["one"]}])).await;
    let v = c.recv().await;
    assert!(
        v[0] == "CLOSED" && v[2].as_str().unwrap().starts_with("invalid: kinds"),
        "{v}"
    );
    // REQ rate: the burst of 8 is spent now (a, b, c, d, e, 123456789 did not count, b).
    let mut limited = false;
    for i in 0..10 {
        c.send_json(json!(["REQ", format!("r{i}"), {"limit": 0}]))
            .await;
        let v = c.recv().await;
        if v[0] == "CLOSED" && v[2].as_str().unwrap().starts_with("rate-limited:") {
            limited = true;
            break;
        }
        c.send_json(json!(["CLOSE", format!("r{i}")])).await;
    }
    assert!(limited, "REQs are rate-limited");
    let text = r.relay.render_metrics().await.unwrap();
    assert!(
        text.contains("fleetmesh_relay_events_rejected_total{reason=\"rate-limited\"} 1"),
        "{text}"
    );
    assert!(text.contains("fleetmesh_store_events 5"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_result_sets_arrive_whole_and_in_order() {
    let r = start(Limits::default()).await;
    let keys = NodeKeys::generate().unwrap();
    let mut c = Raw::connect(&r.url).await;
    let base = now() - 10_000;
    // Pipelined: more messages than one write batch, OKs included.
    let events: Vec<Event> = (0..700)
        .map(|i| note(&keys, 1, base + i, &[], &format!("{i}")))
        .collect();
    for e in &events {
        c.send(format!("[\"EVENT\",{}]", e.to_json())).await;
    }
    let mut oks = std::collections::HashSet::new();
    while oks.len() < events.len() {
        let v = c.recv().await;
        assert_eq!((&v[0], &v[2]), (&json!("OK"), &json!(true)), "{v}");
        oks.insert(v[1].as_str().unwrap().to_owned());
    }
    let got = c.req("all", &[json!({"kinds": [1], "limit": 500})]).await;
    let want: Vec<String> = events.iter().rev().take(500).map(Event::id_hex).collect();
    let got: Vec<String> = got
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got, want, "all 500, newest first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_events_disappear_and_are_purged_from_disk() {
    let r = start(Limits::default()).await;
    r.relay.spawn_expiry_purge(Duration::from_millis(200));
    let keys = NodeKeys::generate().unwrap();
    let mut c = Raw::connect(&r.url).await;
    let soon = (now() + 2).to_string();
    let e = note(&keys, 1, now(), &[&["expiration", &soon]], "short-lived");
    let keep = note(&keys, 1, now(), &[], "stays");
    assert!(c.publish(&e).await.0);
    assert!(c.publish(&keep).await.0);
    assert_eq!(c.req("before", &[json!({"kinds": [1]})]).await.len(), 2);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(
        c.req("after", &[json!({"kinds": [1]})]).await.len(),
        1,
        "never served once expired"
    );
    let text = r.relay.render_metrics().await.unwrap();
    assert!(
        text.contains("fleetmesh_store_events 1\n"),
        "purged from the store: {text}"
    );
}
