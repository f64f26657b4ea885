//! Keys revoked by their owners (kind 11802): the relay refuses a revoked key's events
//! created at or after the revocation (`blocked:`), keeps its earlier ones, ignores a
//! revocation of another's key, and still knows after a restart.

use fleetmesh_proto::nodes::{Revocation, RevokedKey};
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::{KeyType, NodeKeys, RevocationReason};
use fleetmesh_relay::face::{Relay, RelayConfig};

use super::face::{Raw, start};
use super::signed;

fn revocation(by: &NodeKeys, key: &str, at: u64, created_at: u64) -> fleetmesh_proto::Event {
    Revocation {
        revoked: vec![RevokedKey {
            key_type: KeyType::Secp256k1,
            public: key.to_owned(),
            revoked_at: at,
            reason: RevocationReason::Compromised,
            replacement: None,
        }],
        successor: None,
    }
    .sign(by, created_at)
    .unwrap()
}

#[tokio::test]
async fn a_revoked_key_cannot_publish_after_its_revocation_even_after_a_restart() {
    let r = start(Default::default()).await;
    let mut raw = Raw::connect(&r.url).await;
    let (leaked, other) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let t = 1_780_000_000;
    // another key cannot revoke this one
    let by_other = revocation(&other, &leaked.nostr_pubkey_hex(), t, t);
    assert!(raw.publish(&by_other).await.0);
    assert!(
        raw.publish(&signed(&leaked, 1, t + 10, &[], "still mine"))
            .await
            .0
    );
    // the key revokes itself from t + 100
    assert!(
        raw.publish(&revocation(
            &leaked,
            &leaked.nostr_pubkey_hex(),
            t + 100,
            t + 50
        ))
        .await
        .0
    );
    assert_eq!(
        r.relay.revoked().since(&leaked.nostr_pubkey()),
        Some(t + 100)
    );
    assert!(
        raw.publish(&signed(&leaked, 1, t + 99, &[], "before"))
            .await
            .0
    );
    let (accepted, why) = raw
        .publish(&signed(&leaked, 1, t + 100, &[], "after"))
        .await;
    assert!(
        !accepted && why.starts_with("blocked:") && why.contains("revoked"),
        "{why}"
    );
    // nor may it take the revocation back with a newer one
    let undo = Revocation {
        revoked: vec![],
        successor: None,
    }
    .sign(&leaked, t + 200)
    .unwrap();
    assert!(!raw.publish(&undo).await.0);
    // the node's own publishing path refuses it too
    let refused = r.relay.publish(signed(&leaked, 1, t + 300, &[], "x")).await;
    assert!(refused.unwrap_err().starts_with("blocked:"));
    // a restarted relay reads the revocation back from its store
    let (again, _writer) = Relay::start(&r.db, RelayConfig::default()).unwrap();
    assert_eq!(again.revoked().since(&leaked.nostr_pubkey()), Some(t + 100));
    assert_eq!(again.revoked().len(), 1);
}

#[tokio::test]
async fn a_sync_does_not_take_a_revoked_keys_later_events_from_a_peer() {
    use fleetmesh_relay::store::{EventStore, Store};
    use fleetmesh_relay::sync::{SyncOptions, sync};
    let r = start(Default::default()).await;
    let mut raw = Raw::connect(&r.url).await;
    let leaked = NodeKeys::generate().unwrap();
    let t = 1_780_000_000;
    // the peer got the late event before it learnt of the revocation
    let (early, late) = (
        signed(&leaked, 1, t + 10, &[], "early"),
        signed(&leaked, 1, t + 200, &[], "late"),
    );
    let revoke = revocation(&leaked, &leaked.nostr_pubkey_hex(), t + 100, t + 50);
    for e in [&early, &late, &revoke] {
        assert!(raw.publish(e).await.0);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut local = Store::create(&dir.path().join("local.db")).unwrap();
    let report = sync(&mut local, &r.url, &SyncOptions::default(), |_| {})
        .await
        .unwrap();
    assert_eq!(report.fetch_failed, 1, "{report:?}");
    let have = |e: &fleetmesh_proto::Event| !local.events_by_id(&[e.id]).unwrap().is_empty();
    assert!(have(&early) && have(&revoke) && !have(&late));
}
