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

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
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
    quic.serve(relay.clone(), tx);
    Node {
        keys,
        db,
        relay,
        quic,
        seen,
    }
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
    let db = dir.path().join("a.sqlite");
    Store::create(&db).unwrap();
    let (relay, _) = Relay::start(&db, RelayConfig::default()).unwrap();
    let keys = NodeKeys::generate().unwrap();
    let digest = SchemaSet::embedded().digest();
    let a = Quic::bind(
        &keys.ed25519_secret(),
        "127.0.0.1:0".parse().unwrap(),
        &descriptor(&keys, &digest, vec![]),
        digest,
    )
    .await
    .unwrap()
    .with_limits(256, 1, vec![]);
    let (tx, mut seen) = mpsc::unbounded_channel();
    a.serve(relay, tx);
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
