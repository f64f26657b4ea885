//! Bridging with standard relays (`fleetmesh_relay::bridge`) against rust-nostr's
//! `LocalRelay` (nostr-relay-builder 0.44, an independent relay): REQ pages in and EVENTs
//! out, NIP-77 where the relay speaks it, and the fallback when it refuses NEG-OPEN (the
//! same LocalRelay behind a front that answers NEG-* with a NOTICE, as relays without
//! NIP-77 do).

use std::time::Duration;

use fleetmesh_proto::{Event, NodeKeys};
use fleetmesh_relay::bridge::{PAGE, Via, bridge};
use fleetmesh_relay::store::{EventStore as _, Store};
use fleetmesh_relay::sync::{SyncOptions, publish, query};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use super::signed;

async fn local_relay() -> (nostr_relay_builder::prelude::LocalRelay, String) {
    use nostr_relay_builder::prelude::*;
    let builder = RelayBuilder::default()
        .addr(std::net::IpAddr::from([127, 0, 0, 1]))
        .rate_limit(RateLimit {
            max_reqs: 100_000,
            notes_per_minute: u32::MAX,
        });
    let local = LocalRelay::new(builder);
    local.run().await.unwrap();
    let url = local.url().await.to_string();
    (local, url)
}

/// A front for the relay at `upstream` that speaks NIP-01 only: NEG-* messages get a
/// NOTICE, everything else is passed through both ways.
async fn nip01_only(upstream: String) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(client) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                let Ok((relay, _)) = tokio_tungstenite::connect_async(&upstream).await else {
                    return;
                };
                let (mut c_tx, mut c_rx) = client.split();
                let (mut r_tx, mut r_rx) = relay.split();
                let (notice_tx, mut notice_rx) = tokio::sync::mpsc::channel::<Message>(8);
                let up = async move {
                    while let Some(Ok(m)) = c_rx.next().await {
                        if m.to_text().is_ok_and(|t| t.starts_with("[\"NEG-")) {
                            let notice = json!(["NOTICE", "unsupported: NEG-OPEN"]).to_string();
                            let _ = notice_tx.send(Message::Text(notice.into())).await;
                        } else if r_tx.send(m).await.is_err() {
                            break;
                        }
                    }
                };
                let down = async move {
                    loop {
                        let m = tokio::select! {
                            m = r_rx.next() => match m { Some(Ok(m)) => m, _ => break },
                            Some(m) = notice_rx.recv() => m,
                        };
                        if c_tx.send(m).await.is_err() {
                            break;
                        }
                    }
                };
                tokio::join!(up, down);
            });
        }
    });
    format!("ws://{addr}")
}

fn notes(keys: &NodeKeys, n: usize, base: u64, tag: &str) -> Vec<Event> {
    (0..n)
        .map(|i| {
            signed(
                keys,
                1,
                base + i as u64,
                &[&["t", tag]],
                &format!("{tag} {i}"),
            )
        })
        .collect()
}

fn opts(tag: &str) -> SyncOptions {
    SyncOptions {
        filter: json!({"kinds": [1], "#t": [tag]}),
        timeout: Duration::from_secs(30),
        ..SyncOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_relay_is_bridged_by_req_pages_by_nip77_and_by_the_fallback() {
    let (_local, url) = local_relay().await;
    let keys = NodeKeys::generate().unwrap();
    // theirs: more than two pages, one second apart; ours: a few
    let theirs = notes(&keys, 2 * PAGE + 200, 1_700_000_000, "bridge");
    for chunk in theirs.chunks(250) {
        let verdicts = publish(&url, chunk, None, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(verdicts.iter().all(|v| v.1), "{verdicts:?}");
    }
    let ours = notes(&keys, 30, 1_710_000_000, "bridge");
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::create(&dir.path().join("s.db")).unwrap();
    let json: Vec<String> = ours.iter().map(Event::to_json).collect();
    let refs: Vec<_> = ours
        .iter()
        .zip(&json)
        .map(|(e, j)| (e, j.as_str()))
        .collect();
    store.insert_batch(&refs).unwrap();
    // NIP-01 alone: three REQ pages in (the newest first), our thirty out
    let (r, via) = bridge(&mut store, &url, &opts("bridge"), Via::Req)
        .await
        .unwrap();
    assert_eq!(via, "req");
    assert_eq!(
        (r.fetched, r.fetch_failed, r.pushed, r.push_refused),
        (theirs.len(), 0, 30, 0),
        "{r:?}"
    );
    assert!(r.rounds >= 3, "{r:?}");
    let there = query(
        &url,
        &json!({"kinds": [1], "#t": ["bridge"], "since": 1_710_000_000}),
        None,
        Duration::from_secs(30),
        100,
    )
    .await
    .unwrap();
    assert_eq!(there.len(), 30);
    // LocalRelay speaks NIP-77: auto uses it, and finds nothing left to move
    let (r, via) = bridge(&mut store, &url, &opts("bridge"), Via::Auto)
        .await
        .unwrap();
    assert_eq!((via, r.need, r.have), ("nip77", 0, 0), "{r:?}");
    // the same relay behind a NIP-01-only front: auto falls back to REQ pages
    let more = notes(&keys, 20, 1_720_000_000, "late");
    publish(&url, &more, None, Duration::from_secs(30))
        .await
        .unwrap();
    let front = nip01_only(url.clone()).await;
    let err = bridge(&mut store, &front, &opts("late"), Via::Nip77)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NOTICE"), "{err}");
    let (r, via) = bridge(&mut store, &front, &opts("late"), Via::Auto)
        .await
        .unwrap();
    assert_eq!((via, r.fetched), ("req", 20), "{r:?}");
    let f =
        fleetmesh_proto::filter::Filter::from_value(&json!({"#t": ["late"]}), Default::default())
            .unwrap();
    assert_eq!(store.query(&[f], 100, u64::MAX - 1).unwrap().len(), 20);
}
