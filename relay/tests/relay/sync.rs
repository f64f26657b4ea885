//! NIP-77 sync: our client against our relay, rust-nostr's client (`nostr-sdk`'s
//! negentropy sync) against our relay, and the relay's answers to bad NEG messages.

use std::collections::HashSet;

use fleetmesh_proto::{Event, NodeKeys};
use fleetmesh_relay::limits::Limits;
use fleetmesh_relay::store::Store;
use fleetmesh_relay::store::{EventStore, MemoryStore};
use fleetmesh_relay::sync::{Direction, SyncOptions, sync};
use nostr_sdk::prelude as sdk;
use serde_json::json;

use super::face::{Raw, start};
use super::signed;

/// `n` kind-1 events by one author, created from `base`.
fn events(n: usize, base: u64, tag: &str) -> Vec<Event> {
    let keys = NodeKeys::generate().unwrap();
    (0..n)
        .map(|i| {
            signed(
                &keys,
                1,
                base + i as u64,
                &[&["t", tag]],
                &format!("{tag} {i}"),
            )
        })
        .collect()
}

fn fill(store: &mut dyn EventStore, events: &[Event]) {
    let json: Vec<String> = events.iter().map(Event::to_json).collect();
    let refs: Vec<(&Event, &str)> = events
        .iter()
        .zip(&json)
        .map(|(e, j)| (e, j.as_str()))
        .collect();
    store.insert_batch(&refs).unwrap();
}

fn ids_of(store: &dyn EventStore) -> HashSet<[u8; 32]> {
    store
        .negentropy_items(&[Default::default()], usize::MAX - 1, u64::MAX - 1)
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|(_, id)| id)
        .collect()
}

fn local_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::create(&dir.path().join("local.db")).unwrap();
    (dir, s)
}

async fn run_sync(
    store: &mut dyn EventStore,
    url: &str,
    opts: SyncOptions,
) -> fleetmesh_relay::sync::SyncReport {
    sync(store, url, &opts, |_| {}).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_and_relay_converge_to_the_union_both_ways() {
    // The local side on disk, and in memory: sync takes any EventStore.
    let (_d, mut on_disk) = local_store();
    converge(&mut on_disk).await;
    converge(&mut MemoryStore::new()).await;
}

async fn converge(local: &mut dyn EventStore) {
    let r = start(Limits::default()).await;
    let common = events(20, 1_700_000_000, "common");
    let only_remote = events(50, 1_700_001_000, "remote");
    let only_local = events(30, 1_700_002_000, "local");
    {
        let mut remote = Store::open(&r.db).unwrap();
        fill(&mut remote, &common);
        fill(&mut remote, &only_remote);
    }
    fill(local, &common);
    fill(local, &only_local);

    let report = run_sync(local, &r.url, SyncOptions::default()).await;
    assert_eq!((report.need, report.have), (50, 30), "{report:?}");
    assert_eq!((report.fetched, report.pushed), (50, 30), "{report:?}");
    assert_eq!((report.fetch_failed, report.push_refused), (0, 0));
    let union: HashSet<[u8; 32]> = common
        .iter()
        .chain(&only_remote)
        .chain(&only_local)
        .map(|e| e.id)
        .collect();
    assert_eq!(ids_of(local), union);
    assert_eq!(ids_of(&Store::open(&r.db).unwrap()), union);

    // Again: nothing left to move, in a single round.
    let again = run_sync(local, &r.url, SyncOptions::default()).await;
    assert_eq!(
        (again.need, again.have, again.fetched, again.pushed),
        (0, 0, 0, 0),
        "{again:?}"
    );
    assert_eq!(again.rounds, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directions_filters_and_empty_sets() {
    let r = start(Limits::default()).await;
    let (_d, mut local) = local_store();
    // Both empty.
    let empty = run_sync(&mut local, &r.url, SyncOptions::default()).await;
    assert_eq!((empty.local_items, empty.need, empty.have), (0, 0, 0));
    let remote_events = events(10, 1_700_000_000, "a");
    let local_events = events(7, 1_700_000_100, "b");
    fill(&mut Store::open(&r.db).unwrap(), &remote_events);
    fill(&mut local, &local_events);
    // Pull only: we fetch, we do not push.
    let pull = run_sync(
        &mut local,
        &r.url,
        SyncOptions {
            direction: Direction::Pull,
            ..Default::default()
        },
    )
    .await;
    assert_eq!((pull.fetched, pull.pushed, pull.have), (10, 0, 7));
    assert_eq!(ids_of(&Store::open(&r.db).unwrap()).len(), 10);
    // A filter limits what is reconciled: only tag b goes up.
    let push = run_sync(
        &mut local,
        &r.url,
        SyncOptions {
            direction: Direction::Push,
            filter: json!({"#t": ["b"]}),
            ..Default::default()
        },
    )
    .await;
    assert_eq!((push.local_items, push.pushed, push.need), (7, 7, 0));
    assert_eq!(ids_of(&Store::open(&r.db).unwrap()).len(), 17);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_fetches_at_most_max_fetch_and_leaves_the_rest_for_the_next() {
    let r = start(Limits::default()).await;
    let (_d, mut local) = local_store();
    fill(
        &mut Store::open(&r.db).unwrap(),
        &events(10, 1_700_000_000, "r"),
    );
    let capped = || SyncOptions {
        direction: Direction::Pull,
        max_fetch: 4,
        ..Default::default()
    };
    let first = run_sync(&mut local, &r.url, capped()).await;
    assert_eq!(
        (first.need, first.fetched, first.held_back),
        (10, 4, 6),
        "{first:?}"
    );
    assert_eq!(ids_of(&local).len(), 4);
    let second = run_sync(&mut local, &r.url, capped()).await;
    assert_eq!(
        (second.need, second.fetched, second.held_back),
        (6, 4, 2),
        "{second:?}"
    );
    let last = run_sync(&mut local, &r.url, capped()).await;
    assert_eq!(
        (last.need, last.fetched, last.held_back),
        (2, 2, 0),
        "{last:?}"
    );
    assert_eq!(ids_of(&local).len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sets_larger_than_a_frame_take_several_rounds() {
    let r = start(Limits::default()).await;
    let (_d, mut local) = local_store();
    let remote_events = events(1500, 1_700_000_000, "r");
    let local_events = events(1500, 1_700_000_000, "l");
    fill(&mut Store::open(&r.db).unwrap(), &remote_events);
    fill(&mut local, &local_events);
    let report = run_sync(
        &mut local,
        &r.url,
        SyncOptions {
            frame_size: 4096,
            ..Default::default()
        },
    )
    .await;
    assert!(report.rounds > 1, "{report:?}");
    assert_eq!(
        (report.need, report.have, report.fetched, report.pushed),
        (1500, 1500, 1500, 1500)
    );
    assert_eq!(ids_of(&local).len(), 3000);
    assert_eq!(ids_of(&Store::open(&r.db).unwrap()).len(), 3000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nostr_sdk_negentropy_sync_against_our_relay() {
    let r = start(Limits::default()).await;
    let keys = sdk::Keys::generate();
    let db = sdk::MemoryDatabase::with_opts(sdk::MemoryDatabaseOptions {
        events: true,
        max_events: None,
    });
    let client = sdk::Client::builder().database(db).build();
    client.add_relay(&r.url).await.unwrap();
    client.connect().await;
    client
        .wait_for_connection(std::time::Duration::from_secs(5))
        .await;
    // The client holds 12 events, the relay 9 others and 3 in common.
    let mk = |i: u64| {
        sdk::EventBuilder::text_note(format!("note {i}"))
            .custom_created_at(sdk::Timestamp::from(1_700_000_000 + i))
            .sign_with_keys(&keys)
            .unwrap()
    };
    let (client_only, shared, relay_only): (Vec<_>, Vec<_>, Vec<_>) = (
        (0..12).map(mk).collect(),
        (12..15).map(mk).collect(),
        (15..24).map(mk).collect(),
    );
    for e in client_only.iter().chain(&shared) {
        client.database().save_event(e).await.unwrap();
    }
    {
        let mut remote = Store::open(&r.db).unwrap();
        for e in shared.iter().chain(&relay_only) {
            let ours = Event::from_json(&sdk::JsonUtil::as_json(e)).unwrap();
            remote.insert_event(&ours).unwrap();
        }
    }
    let opts = sdk::SyncOptions::default().direction(sdk::SyncDirection::Both);
    let out = client
        .sync(sdk::Filter::new().author(keys.public_key()), &opts)
        .await
        .unwrap();
    let rec = out.val;
    assert_eq!(
        rec.local.len(),
        12,
        "client-only ids found by reconciliation"
    );
    assert_eq!(
        rec.remote.len(),
        9,
        "relay-only ids found by reconciliation"
    );
    assert_eq!(rec.sent.len(), 12, "{:?}", rec.send_failures);
    assert_eq!(rec.received.len(), 9);
    // Both sides now hold all 24.
    assert_eq!(ids_of(&Store::open(&r.db).unwrap()).len(), 24);
    let held = client
        .database()
        .query(sdk::Filter::new().author(keys.public_key()))
        .await
        .unwrap();
    assert_eq!(held.len(), 24);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_negentropy_messages_get_neg_err_and_the_connection_survives() {
    let r = start(Limits {
        max_neg_sessions: 1,
        ..Limits::default()
    })
    .await;
    let mut c = Raw::connect(&r.url).await;
    // NEG-MSG without a session.
    c.send_json(json!(["NEG-MSG", "n1", "6100"])).await;
    let v = c.recv().await;
    assert_eq!(v[0], "NEG-ERR");
    assert!(v[2].as_str().unwrap().starts_with("closed:"), "{v}");
    // Not hex.
    c.send_json(json!(["NEG-OPEN", "n1", {}, "zz"])).await;
    let v = c.recv().await;
    assert!(
        v[0] == "NEG-ERR" && v[2].as_str().unwrap().starts_with("invalid:"),
        "{v}"
    );
    // A malformed negentropy message.
    c.send_json(json!(["NEG-OPEN", "n1", {}, "61000005"])).await;
    let v = c.recv().await;
    assert!(
        v[0] == "NEG-ERR" && v[2].as_str().unwrap().starts_with("invalid:"),
        "{v}"
    );
    // A bad filter.
    c.send_json(json!(["NEG-OPEN", "n1", {"kinds": "x"}, "6100"]))
        .await;
    let v = c.recv().await;
    assert!(
        v[0] == "NEG-ERR" && v[2].as_str().unwrap().starts_with("invalid: kinds"),
        "{v}"
    );
    // An unsupported protocol version: the answer is our highest, 0x61.
    c.send_json(json!(["NEG-OPEN", "v", {}, "62"])).await;
    assert_eq!(c.recv().await, json!(["NEG-MSG", "v", "61"]));
    // One session allowed: a second id is blocked.
    c.send_json(json!(["NEG-OPEN", "w", {}, "6100"])).await;
    let v = c.recv().await;
    assert!(
        v[0] == "NEG-ERR" && v[2].as_str().unwrap().starts_with("blocked:"),
        "{v}"
    );
    c.send_json(json!(["NEG-CLOSE", "v"])).await;
    // The connection still serves.
    assert!(c.req("alive", &[json!({"limit": 1})]).await.is_empty());
    c.send_json(json!(["NEG-OPEN", "w", {}, "6100"])).await;
    assert_eq!(c.recv().await[0], "NEG-MSG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn negentropy_can_be_switched_off() {
    let r = start(Limits {
        negentropy: false,
        ..Limits::default()
    })
    .await;
    let mut c = Raw::connect(&r.url).await;
    c.send_json(json!(["NEG-OPEN", "n", {}, "6100"])).await;
    let v = c.recv().await;
    assert_eq!(v[0], "NOTICE");
    let (_d, mut local) = local_store();
    let err = sync(&mut local, &r.url, &SyncOptions::default(), |_| {})
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NOTICE"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_descriptors_sync_by_the_same_path() {
    let r = start(Limits::default()).await;
    let (_d, mut local) = local_store();
    // A valid kind 30803 shard (from the schema examples, re-signed) on the relay, and a
    // note that the filter leaves out.
    let example: serde_json::Value = serde_json::from_str(include_str!(
        "../../../schemas/examples/events/kind-30803.json"
    ))
    .unwrap();
    let ex = &example["valid"][0];
    let keys = NodeKeys::generate().unwrap();
    let shard = keys
        .sign(fleetmesh_proto::UnsignedEvent {
            created_at: 1_700_000_000,
            kind: 30803,
            tags: serde_json::from_value(ex["tags"].clone()).unwrap(),
            content: ex["content"].as_str().unwrap().to_owned(),
        })
        .unwrap();
    let mut c = Raw::connect(&r.url).await;
    c.send(format!("[\"EVENT\",{}]", shard.to_json())).await;
    assert_eq!(c.recv().await[2], true, "the example shard is valid");
    fill(
        &mut Store::open(&r.db).unwrap(),
        &events(3, 1_700_000_000, "other"),
    );
    let report = run_sync(
        &mut local,
        &r.url,
        SyncOptions {
            filter: json!({"kinds": [30803]}),
            ..Default::default()
        },
    )
    .await;
    assert_eq!((report.need, report.fetched), (1, 1), "{report:?}");
    assert_eq!(ids_of(&local), HashSet::from([shard.id]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetched_events_are_verified_before_they_are_stored() {
    let r = start(Limits::default()).await;
    let (_d, mut local) = local_store();
    // The relay's store trusts its caller: plant an event with a broken signature there,
    // as a lying peer would serve it.
    let mut forged = events(1, 1_700_000_000, "forged").remove(0);
    forged.sig[5] ^= 1;
    let good = events(1, 1_700_000_001, "good");
    fill(
        &mut Store::open(&r.db).unwrap(),
        &[forged.clone(), good[0].clone()],
    );
    let report = run_sync(&mut local, &r.url, SyncOptions::default()).await;
    assert_eq!(
        (report.need, report.fetched, report.fetch_failed),
        (2, 1, 1),
        "{report:?}"
    );
    assert_eq!(ids_of(&local), HashSet::from([good[0].id]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_peers_are_reached_over_tls_with_a_given_ca_and_refused_without_it() {
    let r = start(Limits::default()).await;
    let remote = events(40, 1_700_000_000, "tls");
    fill(&mut Store::open(&r.db).unwrap(), &remote);
    let (url, ca, front) = fleetmesh_relay::testing::tls_front(&r.url).await;
    let (_d, mut local) = local_store();
    // the test CA is not among the web's roots: refused, naming the certificate
    let e = sync(&mut local, &url, &SyncOptions::default(), |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("certificate"), "{e}");
    // with it, the sync runs over TLS
    let opts = SyncOptions {
        ca_pem: Some(ca.into_bytes()),
        ..SyncOptions::default()
    };
    let report = run_sync(&mut local, &url, opts).await;
    assert_eq!(report.fetched, 40, "{report:?}");
    assert_eq!(ids_of(&local), remote.iter().map(|e| e.id).collect());
    // a --ca that holds no certificate is refused before connecting
    let junk = SyncOptions {
        ca_pem: Some(b"not a certificate".to_vec()),
        ..SyncOptions::default()
    };
    let e = sync(&mut local, &url, &junk, |_| {})
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("--ca"), "{e}");
    front.abort();
}

/// A peer over a [`Link`] that lies: its NIP-77 side holds `claimed` whatever the filter
/// says, and it answers a REQ by ids with those events.
async fn lying_peer(
    claimed: Vec<Event>,
    mut rx: tokio::sync::mpsc::Receiver<String>,
    tx: tokio::sync::mpsc::Sender<String>,
) {
    use negentropy::{Id, Negentropy, NegentropyStorageVector};
    let mut storage = NegentropyStorageVector::new();
    for e in &claimed {
        storage
            .insert(e.created_at, Id::from_byte_array(e.id))
            .unwrap();
    }
    storage.seal().unwrap();
    let mut neg = Negentropy::owned(storage, 0).unwrap();
    while let Some(text) = rx.recv().await {
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let answer = |sub: &serde_json::Value, msg: Vec<u8>| {
            json!(["NEG-MSG", sub, hex::encode(msg)]).to_string()
        };
        match v[0].as_str().unwrap() {
            "NEG-OPEN" => {
                let msg = hex::decode(v[3].as_str().unwrap()).unwrap();
                let reply = neg.reconcile(&msg).unwrap();
                tx.send(answer(&v[1], reply)).await.unwrap();
            }
            "NEG-MSG" => {
                let msg = hex::decode(v[2].as_str().unwrap()).unwrap();
                let reply = neg.reconcile(&msg).unwrap();
                tx.send(answer(&v[1], reply)).await.unwrap();
            }
            "REQ" => {
                for e in &claimed {
                    tx.send(json!(["EVENT", v[1], e.to_value()]).to_string())
                        .await
                        .unwrap();
                }
                tx.send(json!(["EOSE", v[1]]).to_string()).await.unwrap();
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn events_a_peer_reconciles_outside_the_filter_are_refused_and_counted() {
    use fleetmesh_relay::sync::{Link, sync_over};
    let keys = NodeKeys::generate().unwrap();
    // one event in the filter (kind 1), two outside it (kind 7)
    let claimed = vec![
        signed(&keys, 1, 1_700_000_000, &[], "in"),
        signed(&keys, 7, 1_700_000_001, &[], "out"),
        signed(&keys, 7, 1_700_000_002, &[], "out too"),
    ];
    let (to_peer, peer_rx) = tokio::sync::mpsc::channel(16);
    let (peer_tx, from_peer) = tokio::sync::mpsc::channel(16);
    tokio::spawn(lying_peer(claimed.clone(), peer_rx, peer_tx));
    let (_dir, mut store) = local_store();
    let opts = SyncOptions {
        filter: json!({"kinds": [1]}),
        direction: Direction::Pull,
        ..SyncOptions::default()
    };
    let link = Link {
        tx: to_peer,
        rx: from_peer,
    };
    let report = sync_over(&mut store, "liar", link, &opts, |_| {})
        .await
        .unwrap();
    assert_eq!(report.need, 3, "{report:?}");
    assert_eq!((report.fetched, report.fetch_failed), (1, 2), "{report:?}");
    // named as what they are: outside the filter, not forged
    assert_eq!((report.out_of_filter, report.forged), (2, 0), "{report:?}");
    assert_eq!(ids_of(&store), HashSet::from([claimed[0].id]));
}
