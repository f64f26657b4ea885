//! The relay as the node's services see it through the port (`fleetmesh_port::RelayPort`),
//! and the inbox built on it: an announcement stored here and published on a remote relay;
//! every event of the inbox's kind `p`-tagging the node — already stored, arriving live,
//! arriving on the remote relay — handed to the service exactly once, and nothing else.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetmesh_port::inbox::{Inbox, announce_and_read};
use fleetmesh_port::{InsertOutcome, RelayPort};
use fleetmesh_proto::NodeKeys;
use fleetmesh_proto::filter::{Filter, FilterLimits};
use serde_json::json;
use tokio::sync::broadcast;

use super::face::start;
use super::signed;

const KIND: u16 = 23194;
const ANNOUNCE: u16 = 13194;

#[tokio::test]
async fn an_inbox_reads_the_backlog_the_live_relay_and_a_remote_relay_once_each() {
    let (here, remote) = (
        start(Default::default()).await,
        start(Default::default()).await,
    );
    let port: Arc<dyn RelayPort> = here.relay.clone();
    let (node, buyer) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let me = node.nostr_pubkey_hex();
    let t = fleetmesh_proto::unix_now();
    let to_me = |c: &str, at: u64| signed(&buyer, KIND, at, &[&["p", &me]], c);

    // stored before the service starts: read from the backlog
    let held = to_me("held", t - 5);
    assert_eq!(
        port.publish(held.clone()).await.unwrap(),
        InsertOutcome::Stored
    );
    assert_eq!(
        port.publish(held.clone()).await.unwrap(),
        InsertOutcome::Duplicate
    );
    // not for the service: another kind, another recipient
    let other_kind = signed(&buyer, 1, t - 4, &[&["p", &me]], "a note");
    let other_key = signed(
        &buyer,
        KIND,
        t - 3,
        &[&["p", &buyer.nostr_pubkey_hex()]],
        "not me",
    );
    for e in [&other_kind, &other_key] {
        port.publish(e.clone()).await.unwrap();
    }

    let handled = Arc::new(Mutex::new(Vec::new()));
    let h = handled.clone();
    let announce = signed(&node, ANNOUNCE, t, &[], "here");
    let (out, _) = broadcast::channel(16);
    let inbox = Inbox {
        kind: KIND,
        me: (me.clone(), *node.nostr()),
        since: || 0,
        backlog: true,
        who: "test",
    };
    let tasks = announce_and_read(
        &port,
        std::slice::from_ref(&remote.url),
        announce.clone(),
        inbox,
        &out,
        move |e| h.lock().unwrap().push(e.content.clone()),
    )
    .await;

    // live on the node's relay, and on the remote relay (once there, once on both)
    let live = to_me("live", t + 1);
    port.publish(live.clone()).await.unwrap();
    let far = to_me("far", t + 2);
    let both = to_me("both", t + 3);
    let sent = port
        .publish_to(
            &remote.url,
            vec![far.clone(), both.clone()],
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert!(sent.iter().all(|(_, ok, _)| *ok), "{sent:?}");
    port.publish(both.clone()).await.unwrap();

    let want = ["both", "far", "held", "live"];
    for _ in 0..100 {
        if handled.lock().unwrap().len() >= want.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut got = handled.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, want, "each event once, and only the inbox's");

    // the announcement is stored here and on the remote relay
    let filter =
        Filter::from_value(&json!({"kinds": [ANNOUNCE]}), FilterLimits::default()).unwrap();
    let remote_port: Arc<dyn RelayPort> = remote.relay.clone();
    for p in [&port, &remote_port] {
        let found = p.stored(filter.clone(), 10).await.unwrap();
        assert_eq!(
            found.iter().map(|e| e.id).collect::<Vec<_>>(),
            vec![announce.id]
        );
    }
    assert_eq!(port.revoked_at(&node.nostr_pubkey(), t), None);
    // a refusal comes back as the relay's message
    let mut forged = to_me("forged", t);
    forged.content.push('!');
    let refused = port.publish(forged).await.unwrap_err();
    assert!(refused.to_string().starts_with("invalid:"), "{refused}");
    fleetmesh_port::Tasks(tasks).stop().await;
}
