//! Private kinds on the face: gift wraps are served only to the key they are addressed to,
//! authenticated by NIP-42 — never to an anonymous `{}` subscription, live or stored, nor
//! in a NIP-77 reconciliation — and rust-nostr's client reads its own by authenticating
//! by itself.

use std::time::Duration;

use fleetmesh_proto::{Event, NodeKeys, UnsignedEvent, nip59};
use fleetmesh_relay::limits::Limits;
use fleetmesh_relay::store::{EventStore as _, MemoryStore};
use fleetmesh_relay::sync::{Direction, SyncOptions, auth_message, sync};
use fleetmesh_schemas::constants::kind;
use nostr_sdk::prelude as sdk;
use serde_json::{Value, json};

use super::face::{Raw, start};
use super::signed;

/// A gift wrap from a fresh sender to `to`.
fn wrap_to(to: &NodeKeys, text: &str) -> Event {
    let sender = NodeKeys::generate().unwrap();
    let message = UnsignedEvent {
        created_at: fleetmesh_proto::unix_now(),
        kind: 14,
        tags: vec![],
        content: text.into(),
    };
    let now = fleetmesh_proto::unix_now();
    nip59::wrap(
        sender.nostr(),
        &to.nostr_pubkey_hex(),
        message,
        kind::GIFT_WRAP,
        now,
    )
    .unwrap()
}

/// Sends a REQ; the events before EOSE, or the CLOSED reason (an AUTH challenge that
/// comes first is returned beside it).
async fn ask(
    c: &mut Raw,
    subid: &str,
    filter: Value,
) -> (Vec<Value>, Option<String>, Option<String>) {
    c.send_json(json!(["REQ", subid, filter])).await;
    let (mut events, mut challenge) = (Vec::new(), None);
    loop {
        let v = c.recv().await;
        match v[0].as_str() {
            Some("AUTH") => challenge = v[1].as_str().map(str::to_owned),
            Some("EVENT") if v[1] == subid => events.push(v[2].clone()),
            Some("EOSE") if v[1] == subid => return (events, None, challenge),
            Some("CLOSED") if v[1] == subid => {
                return (events, v[2].as_str().map(str::to_owned), challenge);
            }
            _ => panic!("unexpected {v}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gift_wraps_reach_only_their_authenticated_recipient() {
    let r = start(Limits::default()).await;
    let (bob, carol) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let (to_bob, to_carol) = (wrap_to(&bob, "for bob"), wrap_to(&carol, "for carol"));
    let note = signed(&carol, 1, fleetmesh_proto::unix_now(), &[], "public");
    let mut c = Raw::connect(&r.url).await;
    for e in [&to_bob, &to_carol, &note] {
        assert!(c.publish(e).await.0);
    }
    // anonymous: everything but the wraps; asking for them is challenged and refused
    let (all, closed, _) = ask(&mut c, "all", json!({})).await;
    assert_eq!((all.len(), closed), (1, None), "{all:?}");
    assert_eq!(all[0]["id"], note.id_hex());
    let by_p = json!({"kinds": [1059], "#p": [bob.nostr_pubkey_hex()]});
    let (got, closed, challenge) = ask(&mut c, "mine", by_p.clone()).await;
    assert!(got.is_empty());
    assert!(closed.unwrap().starts_with("auth-required:"));
    let challenge = challenge.expect("a NIP-42 challenge");
    // live too: an anonymous `{}` subscription is not sent a new wrap
    let mut watcher = Raw::connect(&r.url).await;
    watcher.send_json(json!(["REQ", "live", {}])).await;
    assert_eq!(watcher.recv().await[2]["id"], note.id_hex());
    assert_eq!(watcher.recv().await[0], "EOSE");
    // authenticated as bob: bob's wraps, by #p, and nobody else's
    c.send(auth_message(bob.nostr(), &r.url, &challenge).unwrap())
        .await;
    assert_eq!(c.recv().await[2], true);
    let (got, closed, _) = ask(&mut c, "mine", by_p).await;
    assert_eq!(closed, None);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["id"], to_bob.id_hex());
    for other in [
        json!({"kinds": [1059], "#p": [carol.nostr_pubkey_hex()]}),
        json!({"kinds": [1059]}),
        json!({"kinds": [1059], "#p": [bob.nostr_pubkey_hex(), carol.nostr_pubkey_hex()]}),
    ] {
        let (got, closed, _) = ask(&mut c, "theirs", other.clone()).await;
        assert!(got.is_empty(), "{other}");
        assert!(closed.unwrap().starts_with("restricted:"), "{other}");
    }
    let later = wrap_to(&bob, "later");
    let public = signed(&carol, 1, fleetmesh_proto::unix_now(), &[], "later, public");
    let mut publisher = Raw::connect(&r.url).await;
    assert!(publisher.publish(&later).await.0);
    assert!(publisher.publish(&public).await.0);
    // bob's own subscription is sent bob's new wrap live
    let v = c.recv().await;
    assert_eq!(
        (&v[1], &v[2]["id"]),
        (&json!("mine"), &json!(later.id_hex()))
    );
    // the watcher sees the note published after the wrap, and not the wrap
    let v = watcher.recv().await;
    assert_eq!(v[2]["id"], public.id_hex(), "{v}");
    // a NIP-77 reconciliation of everything leaves the wraps out
    let mut local = MemoryStore::new();
    let opts = SyncOptions {
        direction: Direction::Pull,
        ..Default::default()
    };
    let report = sync(&mut local, &r.url, &opts, |_| {}).await.unwrap();
    assert_eq!((report.need, report.fetched), (2, 2), "{report:?}");
    let stored = local
        .query_keys(&[Default::default()], 100, u64::MAX - 1)
        .unwrap();
    assert_eq!(stored.len(), 2);
    // rust-nostr's client, as bob: authenticates when asked and reads bob's wraps
    let keys = sdk::Keys::parse(&hex::encode(bob.nostr().to_secret_bytes())).unwrap();
    let client = super::face::sdk_client_as(&keys, &r.url).await;
    let got = client
        .fetch_events(
            sdk::Filter::new()
                .kind(sdk::Kind::GiftWrap)
                .pubkey(keys.public_key()),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    let ids: std::collections::HashSet<String> = got.iter().map(|e| e.id.to_hex()).collect();
    assert_eq!(
        ids,
        [to_bob.id_hex(), later.id_hex()].into_iter().collect(),
        "{got:?}"
    );
}
