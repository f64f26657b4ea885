//! Real iroh endpoints and libp2p swarms on loopback, real relays on SQLite files.

use std::sync::Arc;

use fleetmesh_proto::event::{Event, UnsignedEvent};
use fleetmesh_proto::identity::{DescriptorInfo, Endpoint, NodeClass, NodeKeys, Software};
use fleetmesh_relay::face::{Relay, RelayConfig};
use fleetmesh_relay::store::{EventStore as _, Store};
use fleetmesh_relay::sync::{SyncOptions, sync_over};
use fleetmesh_schemas::{ProtocolDigest, SchemaSet};
use tokio::sync::mpsc;

use crate::link::{Quic, Seen};
use crate::relays::RelayServers;

pub(crate) fn now() -> u64 {
    fleetmesh_proto::unix_now()
}

pub(crate) fn descriptor(
    keys: &NodeKeys,
    digest: &ProtocolDigest,
    endpoints: Vec<Endpoint>,
) -> Event {
    let info = DescriptorInfo {
        software: Software {
            name: "fleetmesh".into(),
            version: "0.1.0".into(),
        },
        class: NodeClass::Edge,
        operator: None,
        relays: vec![],
        endpoints,
        protocol_digest: digest.to_hex(),
        predecessor: None,
    };
    keys.descriptor(&info, now()).unwrap()
}

pub(crate) fn note(keys: &NodeKeys, text: &str) -> Event {
    keys.sign(UnsignedEvent {
        created_at: now(),
        kind: 1,
        tags: vec![],
        content: text.into(),
    })
    .unwrap()
}

struct Node {
    keys: NodeKeys,
    db: std::path::PathBuf,
    relay: Arc<Relay>,
    quic: Quic,
    seen: mpsc::UnboundedReceiver<Seen>,
}

async fn node(dir: &std::path::Path, name: &str) -> Node {
    let keys = NodeKeys::generate().unwrap();
    node_as(dir, name, keys, None, SchemaSet::embedded().digest()).await
}

/// A node whose endpoint key is `keys`' unless `endpoint_keys` says otherwise, announcing
/// `digest`.
async fn node_as(
    dir: &std::path::Path,
    name: &str,
    keys: NodeKeys,
    endpoint_keys: Option<&NodeKeys>,
    digest: ProtocolDigest,
) -> Node {
    let db = dir.join(format!("{name}.sqlite"));
    Store::create(&db).unwrap();
    let (relay, _) = Relay::start(&db, RelayConfig::default()).unwrap();
    let secret = endpoint_keys.unwrap_or(&keys).ed25519_secret();
    let quic = Quic::bind(
        &secret,
        "127.0.0.1:0".parse().unwrap(),
        &descriptor(&keys, &digest, vec![]),
        SchemaSet::embedded().digest(),
    )
    .await
    .unwrap();
    let (tx, seen) = mpsc::unbounded_channel();
    quic.serve(relay.clone(), tx, crate::link::open_sessions());
    Node {
        keys,
        db,
        relay,
        quic,
        seen,
    }
}

/// A relay on a fresh SQLite file in `dir`, and an endpoint on loopback for a new key,
/// not serving yet.
async fn endpoint(dir: &std::path::Path) -> (Arc<Relay>, NodeKeys, Quic) {
    let (relay, keys, quic, _) = endpoint_at(dir, "a", &RelayServers::default()).await;
    (relay, keys, quic)
}

/// As [`endpoint`], its store `dir/NAME.sqlite` (also returned), homed on `relays`.
async fn endpoint_at(
    dir: &std::path::Path,
    name: &str,
    relays: &RelayServers,
) -> (Arc<Relay>, NodeKeys, Quic, std::path::PathBuf) {
    let db = dir.join(format!("{name}.sqlite"));
    Store::create(&db).unwrap();
    let (relay, _) = Relay::start(&db, RelayConfig::default()).unwrap();
    let keys = NodeKeys::generate().unwrap();
    let digest = SchemaSet::embedded().digest();
    let quic = Quic::bind_with(
        &keys.ed25519_secret(),
        "127.0.0.1:0".parse().unwrap(),
        &descriptor(&keys, &digest, vec![]),
        digest,
        relays,
    )
    .await
    .unwrap();
    (relay, keys, quic, db)
}

fn stored(db: &std::path::Path) -> usize {
    let f = fleetmesh_proto::filter::Filter::from_value(
        &serde_json::json!({"kinds": [1]}),
        Default::default(),
    )
    .unwrap();
    Store::open(db)
        .unwrap()
        .query(&[f], 1000, now())
        .unwrap()
        .len()
}

/// One sync round over a new session of `link`.
async fn round(
    store: &mut Store,
    link: &crate::link::PeerLink,
) -> fleetmesh_relay::sync::SyncReport {
    let session = link.session().await.unwrap();
    sync_over(store, "a", session, &SyncOptions::default(), |_| {})
        .await
        .unwrap()
}

#[tokio::test]
async fn iroh_link_checks_both_descriptors_then_syncs_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = node(dir.path(), "a").await;
    let b = node(dir.path(), "b").await;
    for i in 0..3 {
        a.relay
            .publish(note(&a.keys, &format!("a{i}")))
            .await
            .unwrap();
    }
    for i in 0..2 {
        b.relay
            .publish(note(&b.keys, &format!("b{i}")))
            .await
            .unwrap();
    }
    let link = b
        .quic
        .dial(&a.keys.ed25519_public(), &a.quic.local_addrs())
        .await
        .unwrap();
    assert_eq!(link.content.did, a.keys.did());
    match a.seen.recv().await.unwrap() {
        Seen::Peered {
            descriptor,
            content,
        } => {
            assert_eq!(descriptor.pubkey, b.keys.nostr_pubkey());
            assert_eq!(content.did, b.keys.did());
        }
        other => panic!("{other:?}"),
    }
    let mut store = Store::open(&b.db).unwrap();
    let report = round(&mut store, &link).await;
    assert_eq!(
        (report.fetched, report.pushed, report.fetch_failed),
        (3, 2, 0),
        "{report:?}"
    );
    assert_eq!(stored(&b.db), 5);
    assert_eq!(stored(&a.db), 5);
    // a second session on the same link finds nothing left to move
    let again = round(&mut store, &link).await;
    assert_eq!((again.fetched, again.pushed), (0, 0));
    b.quic.close().await;
    a.quic.close().await;
}

#[tokio::test]
async fn iroh_hello_refuses_a_foreign_digest_and_a_borrowed_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = node(dir.path(), "a").await;
    // a node that speaks another protocol
    let other = node_as(
        dir.path(),
        "c",
        NodeKeys::generate().unwrap(),
        None,
        ProtocolDigest([7; 32]),
    )
    .await;
    let err = other
        .quic
        .dial(&a.keys.ed25519_public(), &a.quic.local_addrs())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("hello refused") && err.to_string().contains("protocol"),
        "{err}"
    );
    match a.seen.recv().await.unwrap() {
        Seen::Refused { remote, reason } => {
            assert_eq!(remote, hex::encode(other.keys.ed25519_public()));
            assert!(reason.contains("protocol"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // a node presenting someone else's (valid) descriptor over its own endpoint key
    let thief = NodeKeys::generate().unwrap();
    let victim = NodeKeys::generate().unwrap();
    let d = node_as(
        dir.path(),
        "d",
        victim,
        Some(&thief),
        SchemaSet::embedded().digest(),
    )
    .await;
    let err = d
        .quic
        .dial(&a.keys.ed25519_public(), &a.quic.local_addrs())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("not the key this connection was made with"),
        "{err}"
    );
    assert!(matches!(a.seen.recv().await.unwrap(), Seen::Refused { .. }));
    // dialling the right address with the wrong key never reaches the hello
    let b = node(dir.path(), "b").await;
    let err = b
        .quic
        .dial(&thief.ed25519_public(), &a.quic.local_addrs())
        .await
        .unwrap_err();
    assert!(matches!(err, crate::Error::Connect { .. }), "{err}");
    for n in [&a, &b, &other, &d] {
        n.quic.close().await;
    }
}

#[tokio::test]
async fn an_address_past_its_connection_cap_is_refused_before_the_hello() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, keys, a) = endpoint(dir.path()).await;
    let a = a.with_limits(256, 1, vec![]);
    let (tx, mut seen) = mpsc::unbounded_channel();
    a.serve(relay, tx, crate::link::open_sessions());
    let b = node(dir.path(), "b").await;
    let c = node(dir.path(), "c").await;
    // one connection from 127.0.0.1 is served; a second one from there is refused
    let first = b
        .quic
        .dial(&keys.ed25519_public(), &a.local_addrs())
        .await
        .unwrap();
    assert!(matches!(seen.recv().await.unwrap(), Seen::Peered { .. }));
    let err = c
        .quic
        .dial(&keys.ed25519_public(), &a.local_addrs())
        .await
        .unwrap_err();
    assert!(matches!(err, crate::Error::Connect { .. }), "{err}");
    match seen.recv().await.unwrap() {
        Seen::Refused { remote, reason } => {
            assert_eq!(remote, "127.0.0.1");
            assert!(reason.contains("1 connections from 127.0.0.1"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // once the first is gone, there is room again
    first.close();
    drop(first);
    let mut again = None;
    for _ in 0..100 {
        match c.quic.dial(&keys.ed25519_public(), &a.local_addrs()).await {
            Ok(l) => {
                again = Some(l);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
        }
    }
    let again = again.expect("room again once the first link closed");
    assert_eq!(again.content.did, keys.did());
    for q in [&a, &b.quic, &c.quic] {
        q.close().await;
    }
}

#[tokio::test]
async fn a_peers_sessions_are_held_to_the_agreed_shards_and_its_traffic_is_counted() {
    use fleetmesh_relay::face::{PeerSession, Tally, TallyCounts};
    let dir = tempfile::tempdir().unwrap();
    let (relay, keys, a) = endpoint(dir.path()).await;
    // the agreement with every peer: kind 1 only, four events and then one an hour
    let tally = Arc::new(Tally::default());
    let kinds_1 = fleetmesh_proto::filter::Filter::from_value(
        &serde_json::json!({"kinds": [1]}),
        Default::default(),
    )
    .unwrap();
    // counted per window, and per shard of the grants both ways: kind 1
    tally.set_window(3600);
    tally.set_shards(vec![kinds_1.clone()], vec![kinds_1.clone()]);
    let window = now() / 3600;
    let (t, f) = (tally.clone(), Arc::new(vec![kinds_1]));
    let who = Arc::new(std::sync::Mutex::new(Vec::new()));
    let w = who.clone();
    let sessions: crate::link::Sessions = Arc::new(
        move |d: &Event, c: &fleetmesh_proto::identity::DescriptorContent| {
            w.lock()
                .unwrap()
                .push((hex::encode(d.pubkey), c.did.clone()));
            PeerSession {
                name: hex::encode(d.pubkey),
                filters: Some(f.clone()),
                rate: Some((1.0 / 3600.0, 4.0)),
                tally: t.clone(),
            }
        },
    );
    let (tx, _seen) = mpsc::unbounded_channel();
    a.serve(relay.clone(), tx, sessions);
    let b = node(dir.path(), "b").await;
    let link = b
        .quic
        .dial(&keys.ed25519_public(), &a.local_addrs())
        .await
        .unwrap();
    let mut s = link.session().await.unwrap();
    let good = note(&b.keys, "in the shard");
    let outside = b
        .keys
        .sign(UnsignedEvent {
            created_at: now(),
            kind: 7,
            tags: vec![],
            content: "+".into(),
        })
        .unwrap();
    let mut forged = note(&b.keys, "signed by someone else").to_value();
    let sig = forged["sig"].as_str().unwrap().to_owned();
    let flipped = if sig.ends_with('0') { "1" } else { "0" };
    forged["sig"] = format!("{}{flipped}", &sig[..sig.len() - 1]).into();
    let late = note(&b.keys, "one too many");
    let sent = [
        serde_json::json!(["EVENT", good.to_value()]).to_string(),
        serde_json::json!(["EVENT", outside.to_value()]).to_string(),
        serde_json::json!(["EVENT", forged]).to_string(),
        serde_json::json!(["EVENT", {"id": "ab", "kind": "one"}]).to_string(),
        "hello?".to_owned(),
        serde_json::json!(["EVENT", late.to_value()]).to_string(),
    ];
    for m in &sent {
        s.tx.send(m.clone()).await.unwrap();
    }
    let mut answers = Vec::new();
    while answers.len() < sent.len() {
        let v: serde_json::Value = serde_json::from_str(&s.rx.recv().await.unwrap()).unwrap();
        answers.push(v);
    }
    // by id: a stored event's OK comes after its commit, a refusal's at once
    let oks: std::collections::HashMap<String, (bool, String)> = answers
        .iter()
        .filter(|v| v[0] == "OK")
        .map(|v| {
            let id = v[1].as_str().unwrap().to_owned();
            (
                id,
                (v[2].as_bool().unwrap(), v[3].as_str().unwrap().to_owned()),
            )
        })
        .collect();
    assert_eq!(oks.len(), 5, "{answers:?}");
    let ok = |id: &str| oks[id].clone();
    assert_eq!(ok(&good.id_hex()), (true, String::new()));
    let (taken, why) = ok(&outside.id_hex());
    assert!(
        !taken && why.starts_with("blocked: outside the shard"),
        "{why}"
    );
    let forged_id = forged["id"].as_str().unwrap();
    assert_eq!(ok(forged_id), (false, "invalid: bad signature".to_owned()));
    let (taken, why) = ok("ab");
    assert!(!taken && why.starts_with("invalid:"), "{why}");
    let (taken, why) = ok(&late.id_hex());
    assert!(!taken && why.starts_with("rate-limited:"), "{why}");
    let inbound: usize = sent.iter().map(String::len).sum();
    let counts = tally.counts();
    assert_eq!(
        TallyCounts {
            bytes_out: 0,
            ..counts
        },
        TallyCounts {
            events_in: 5,
            bytes_in: inbound as u64,
            events_out: 0,
            bytes_out: 0,
            out_of_filter: 1,
            malformed: 2,
            forged: 1,
            invalid: 0,
            rate_limited: 1,
            blob_in: 0,
            blob_out: 0,
        }
    );
    // every answer above counts as sent; the event read back counts as one event out
    let before = counts.bytes_out;
    assert!(before > 0);
    s.tx.send(serde_json::json!(["REQ", "r", {"kinds": [1]}]).to_string())
        .await
        .unwrap();
    let mut back = 0;
    loop {
        let m = s.rx.recv().await.unwrap();
        back += m.len();
        if m.starts_with("[\"EOSE\"") {
            break;
        }
    }
    let after = tally.counts();
    assert_eq!(after.events_out, 1);
    assert_eq!(after.bytes_out, before + back as u64);
    // per shard: every kind 1 EVENT message each way, taken or not (the forged one too);
    // the kind 7 and the malformed one in no shard
    if now() / 3600 == window {
        let shards = tally.window_shards(window);
        let kind_1: Vec<&String> = [0, 2, 5].iter().map(|&i| &sent[i]).collect();
        assert_eq!(
            shards.inbound,
            vec![fleetmesh_proto::ledger::Moved {
                events: 3,
                bytes: kind_1.iter().map(|m| m.len() as u64).sum(),
            }]
        );
        assert_eq!(shards.outbound.len(), 1);
        assert_eq!(shards.outbound[0].events, 1);
    }
    // asked once per session, with the peer the hello checked
    assert_eq!(
        *who.lock().unwrap(),
        vec![(b.keys.nostr_pubkey_hex(), b.keys.did())]
    );
    for q in [&a, &b.quic] {
        q.close().await;
    }
}

#[tokio::test]
async fn a_message_over_a_link_is_answered_by_the_handler_with_the_checked_sender() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, keys, a) = endpoint(dir.path()).await;
    let handler: crate::link::Messages = Arc::new(|text: String, from: Arc<Event>| {
        Box::pin(async move { format!("{} said {text}", hex::encode(from.pubkey)) })
    });
    let a = a.with_messages(handler);
    let (tx, _seen) = mpsc::unbounded_channel();
    a.serve(relay, tx, crate::link::open_sessions());
    let b = node(dir.path(), "b").await;
    let link = b
        .quic
        .dial(&keys.ed25519_public(), &a.local_addrs())
        .await
        .unwrap();
    // a counted link counts the bytes of the message and of its answer, as they cross
    let tally = Arc::new(fleetmesh_relay::face::Tally::default());
    let link = link.counted(tally.clone());
    let answer = link.message("hello".into()).await.unwrap();
    assert_eq!(answer, format!("{} said hello", b.keys.nostr_pubkey_hex()));
    let c = tally.counts();
    assert_eq!((c.events_out, c.bytes_out), (0, 5));
    assert_eq!((c.events_in, c.bytes_in), (0, answer.len() as u64));
    // a node that takes no messages resets the stream: an error, not a hang
    let back = node(dir.path(), "c").await;
    let to_c = b
        .quic
        .dial(&back.keys.ed25519_public(), &back.quic.local_addrs())
        .await
        .unwrap();
    let err = to_c.message("anyone?".into()).await.unwrap_err();
    assert!(matches!(err, crate::Error::Connect { .. }), "{err}");
    for q in [&a, &b.quic, &back.quic] {
        q.close().await;
    }
}

#[tokio::test]
async fn peers_reach_each_other_through_a_relay_server_of_their_own() {
    use crate::relays::{Admission, Members, RelayServer};
    let certs = fleetmesh_relay::testing::LoopbackCert::generate();
    let loopback = "127.0.0.1:0".parse().unwrap();
    // a certificate with another's key is refused
    let other = fleetmesh_relay::testing::LoopbackCert::generate();
    let err = RelayServer::spawn(
        loopback,
        vec![certs.cert.clone()],
        other.key.clone(),
        1 << 20,
        Admission::Anyone,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, crate::Error::Bind { .. }), "{err}");
    // the relay serves the federation's nodes only: those it was told of
    let members = Members::new(2);
    let server = RelayServer::spawn(
        loopback,
        vec![certs.cert.clone()],
        certs.key.clone(),
        1 << 20,
        Admission::Members(members.clone()),
    )
    .await
    .unwrap();
    let url = format!("https://127.0.0.1:{}", server.addr().unwrap().port());
    let relays = RelayServers {
        urls: vec![url.clone()],
        roots: vec![certs.ca.clone()],
    };
    let dir = tempfile::tempdir().unwrap();
    let homed = |name: &'static str| {
        let (dir, relays) = (dir.path().to_path_buf(), relays.clone());
        async move {
            let (relay, keys, quic, db) = endpoint_at(&dir, name, &relays).await;
            let (tx, _seen) = mpsc::unbounded_channel();
            quic.serve(relay.clone(), tx, crate::link::open_sessions());
            (keys, db, relay, quic)
        }
    };
    let (a_keys, _, a_relay, a) = homed("a").await;
    let (b_keys, b_db, _, b) = homed("b").await;
    a_relay
        .publish(note(&a_keys, "through the relay"))
        .await
        .unwrap();
    assert!(members.admit(b_keys.ed25519_public()));
    // a is not admitted: it cannot home there, so b cannot reach it through the relay
    assert!(
        b.dial_at(&a_keys.ed25519_public(), &[], std::slice::from_ref(&url))
            .await
            .is_err()
    );
    assert!(members.admit(a_keys.ed25519_public()));
    // the set is bounded
    assert!(!members.admit(NodeKeys::generate().unwrap().ed25519_public()));
    assert!(members.admit(a_keys.ed25519_public()), "a member stays one");
    // b knows a's key and a's relay only, no address: it reaches a through the relay
    // (once a is homed there)
    let mut link = None;
    for _ in 0..40 {
        match b
            .dial_at(&a_keys.ed25519_public(), &[], std::slice::from_ref(&url))
            .await
        {
            Ok(l) => {
                link = Some(l);
                break;
            }
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(250)).await,
        }
    }
    let link = link.expect("b reaches a through the relay server");
    assert_eq!(link.content.did, a_keys.did());
    // from there iroh punches a direct path (on loopback, nothing is in the way)
    let mut route = link.route();
    for _ in 0..100 {
        if route == "direct" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        route = link.route();
    }
    assert_eq!(route, "direct");
    let mut b_store = Store::open(&b_db).unwrap();
    let report = round(&mut b_store, &link).await;
    assert_eq!(report.fetched, 1, "{report:?}");
    // an endpoint without relays, given no address, reaches nobody
    let c = node(dir.path(), "c").await;
    assert!(c.quic.dial(&a_keys.ed25519_public(), &[]).await.is_err());
    // a relay URL that is not one is refused at bind time
    let bad = RelayServers {
        urls: vec!["not a url".into()],
        roots: vec![],
    };
    let keys = NodeKeys::generate().unwrap();
    let digest = SchemaSet::embedded().digest();
    let err = Quic::bind_with(
        &keys.ed25519_secret(),
        loopback,
        &descriptor(&keys, &digest, vec![]),
        digest,
        &bad,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("not a url"), "{err}");
    for q in [&a, &b, &c.quic] {
        q.close().await;
    }
    server.stop().await;
}

mod gossip {
    use super::*;
    use crate::gossip::{Gossip, Heard};
    use fleetmesh_proto::nodes::{Heartbeat, Load};
    use fleetmesh_proto::noun::Noun as _;

    async fn swarm(
        keys: &NodeKeys,
        bootstrap: Vec<libp2p::Multiaddr>,
        digest: ProtocolDigest,
    ) -> (Gossip, mpsc::Receiver<Heard>) {
        let (tx, rx) = mpsc::channel(crate::gossip::HEARD_QUEUE);
        let (g, _task) = Gossip::start(
            &keys.ed25519_secret(),
            &"/ip4/127.0.0.1/tcp/0".parse().unwrap(),
            bootstrap,
            digest,
            tx,
        )
        .await
        .unwrap();
        (g, rx)
    }

    /// The next thing heard that is not about `skip`'s own announcements.
    async fn next(rx: &mut mpsc::Receiver<Heard>) -> Heard {
        tokio::time::timeout(std::time::Duration::from_secs(60), rx.recv())
            .await
            .expect("heard nothing")
            .unwrap()
    }

    fn heartbeat(keys: &NodeKeys, digest: &ProtocolDigest, at: u64) -> Event {
        Heartbeat {
            uptime_secs: 5,
            load: Load {
                cpu: 0.5,
                mem: 0.1,
                gpu: None,
                queue_depth: 0,
                jobs_running: None,
            },
            backends: vec![],
            protocol_digest: digest.to_hex(),
            version: None,
            seq: Some(1),
            class: None,
            to: vec![],
        }
        .sign(keys, at)
        .unwrap()
    }

    #[tokio::test]
    async fn gossip_spreads_valid_announcements_down_a_line_and_stops_the_rest() {
        let ours = SchemaSet::embedded().digest();
        let (ka, kb, kc) = (
            NodeKeys::generate().unwrap(),
            NodeKeys::generate().unwrap(),
            NodeKeys::generate().unwrap(),
        );
        let (a, mut ha) = swarm(&ka, vec![], ours).await;
        let (b, mut hb) = swarm(&kb, a.listen_addrs().await, ours).await;
        let (c, mut hc) = swarm(&kc, b.listen_addrs().await, ours).await;
        // c hears a's descriptor through b; announcements go out again as peers subscribe,
        // so keep announcing until the line is up
        let da = descriptor(&ka, &ours, vec![]);
        let heard = loop {
            a.announce(&da).await;
            match tokio::time::timeout(std::time::Duration::from_millis(500), hc.recv()).await {
                Ok(Some(h)) => break h,
                _ => continue,
            }
        };
        match heard {
            Heard::Descriptor { event, content, .. } => {
                assert_eq!(event.id, da.id);
                assert_eq!(content.did, ka.did());
            }
            other => panic!("{other:?}"),
        }
        // garbage, a foreign digest, a descriptor not announced by its own key: b refuses
        // each, c never hears them; the valid heartbeat after them is what c hears next
        a.publish_bytes(b"not an event").await;
        let foreign = NodeKeys::generate().unwrap();
        a.announce(&heartbeat(&foreign, &ProtocolDigest([7; 32]), now()))
            .await;
        a.publish_bytes(descriptor(&kb, &ours, vec![]).to_json().as_bytes())
            .await;
        a.announce(&heartbeat(&ka, &ours, now() - 3600)).await;
        a.announce(&heartbeat(&ka, &ours, now())).await;
        let mut seen_by_b = Vec::new();
        while seen_by_b.len() < 5 {
            match next(&mut hb).await {
                Heard::Descriptor { event, .. } if event.id == da.id => {}
                h => seen_by_b.push(h),
            }
        }
        assert!(
            matches!(&seen_by_b[0], Heard::Invalid { reason, .. } if reason.starts_with("not an event")),
            "{seen_by_b:?}"
        );
        assert!(
            matches!(&seen_by_b[1], Heard::Foreign { theirs, .. } if *theirs == "07".repeat(32)),
            "{seen_by_b:?}"
        );
        assert!(
            matches!(&seen_by_b[2], Heard::Invalid { reason, .. } if reason.contains("other than its own")),
            "{seen_by_b:?}"
        );
        assert!(
            matches!(&seen_by_b[3], Heard::Invalid { reason, .. } if reason.contains("s away")),
            "{seen_by_b:?}"
        );
        assert!(
            matches!(&seen_by_b[4], Heard::Heartbeat { .. }),
            "{seen_by_b:?}"
        );
        loop {
            match next(&mut hc).await {
                Heard::Descriptor { event, .. } if event.id == da.id => {}
                Heard::Heartbeat { event, .. } => {
                    assert_eq!(event.pubkey, ka.nostr_pubkey());
                    break;
                }
                other => panic!("c heard what b refused: {other:?}"),
            }
        }
        drop(ha.try_recv());
        drop((a, b, c));
    }
}
