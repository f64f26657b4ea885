//! The relay face under the clients that broke it: one that asks for hundreds of MiB and
//! never reads, one that replaces its subscription again and again, two large REQs beside
//! a reader that does read, connections that fill the node's output budget, silent and
//! idle sockets, oversized and non-UTF-8 frames. Memory is measured as the bytes queued
//! for output, which the relay bounds; RSS under these attacks is in bench/RESULTS.md.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use fleetmesh_proto::NodeKeys;
use fleetmesh_relay::limits::Limits;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

use super::face::{Raw, TestRelay, start};
use super::signed;

/// `n` kind-1 events of `size` bytes of content each, stored before the relay starts.
async fn relay_with(n: u64, size: usize, limits: Limits) -> TestRelay {
    let r = start(limits).await;
    let keys = NodeKeys::generate().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let body = "x".repeat(size);
    let mut c = Raw::connect(&r.url).await;
    for i in 0..n {
        let e = signed(&keys, 1, now - 10_000 + i, &[], &format!("{i} {body}"));
        c.send(format!("[\"EVENT\",{}]", e.to_json())).await;
        let v = c.recv().await;
        assert_eq!(v[2], true, "{v}");
    }
    r
}

/// Ten filters over every event, each with `limit`.
fn big_req(subid: &str, limit: u64) -> Value {
    let mut m = vec![json!("REQ"), json!(subid)];
    m.extend((0..10).map(|i| json!({"kinds": [1], "limit": limit, "since": i})));
    Value::Array(m)
}

fn limits(per_conn: usize) -> Limits {
    Limits {
        max_queued_bytes: per_conn,
        ..Limits::default()
    }
}

/// Waits until `f` holds (checked every 50 ms), at most 10 s.
async fn eventually(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_req_that_is_never_read_pins_at_most_its_queue() {
    let cap = 512 << 10;
    let r = relay_with(300, 32 << 10, limits(cap)).await;
    // 10 filters × limit 500 over 300 events of 32 KiB: ~10 MiB of answer
    let mut c = Raw::connect(&r.url).await;
    c.send_json(big_req("all", 500)).await;
    // the answer stalls once the socket buffers and half the queue are full
    assert!(
        eventually(|| r.relay.queued_output_bytes() > 0).await,
        "something is queued"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let queued = r.relay.queued_output_bytes();
    assert!(
        queued <= cap / 2 + (33 << 10),
        "{queued} bytes queued; the connection's budget is {cap}"
    );
    // the rest of the relay answers meanwhile
    let mut other = Raw::connect(&r.url).await;
    assert_eq!(other.req("one", &[json!({"limit": 1})]).await.len(), 1);
    // and when the slow client finally reads, it gets the whole answer, in order
    let mut got = Vec::new();
    loop {
        let v = c.recv().await;
        if v[0] == "EOSE" {
            break;
        }
        got.push(v[2]["created_at"].as_u64().unwrap());
    }
    assert_eq!(got.len(), 300);
    assert!(got.windows(2).all(|w| w[0] >= w[1]), "newest first");
    drop(c);
    assert!(eventually(|| r.relay.queued_output_bytes() == 0).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_or_closed_subscription_stops_its_query() {
    let cap = 256 << 10;
    let r = relay_with(300, 32 << 10, limits(cap)).await;
    let mut c = Raw::connect(&r.url).await;
    // twelve REQs on one id, never read, then CLOSE
    for _ in 0..12 {
        c.send_json(big_req("same", 500)).await;
    }
    c.send_json(json!(["CLOSE", "same"])).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(r.relay.queued_output_bytes() <= cap / 2 + (33 << 10));
    // reading now: what was already queued arrives, then nothing more for "same" — no
    // EOSE, and far fewer than one answer's 300 events — and the next REQ is answered
    c.send_json(json!(["REQ", "next", {"limit": 2}])).await;
    let mut stale = 0;
    loop {
        let v = c.recv().await;
        match (v[0].as_str(), v[1].as_str()) {
            (Some("EVENT"), Some("same")) => stale += 1,
            (Some("EOSE"), Some("same")) => panic!("a closed subscription finished its query"),
            (Some("EOSE"), Some("next")) => break,
            _ => {}
        }
    }
    assert!(
        stale < 300,
        "{stale} events of a closed subscription were sent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_reads_gets_two_large_answers_and_live_events() {
    let r = relay_with(200, 16 << 10, limits(128 << 10)).await;
    let mut c = Raw::connect(&r.url).await;
    c.send_json(big_req("a", 500)).await;
    c.send_json(big_req("b", 500)).await;
    // live events published meanwhile by another client
    let keys = NodeKeys::generate().unwrap();
    let mut w = Raw::connect(&r.url).await;
    for i in 0..20 {
        let e = signed(&keys, 1, 1_000 + i, &[], "live");
        w.send(format!("[\"EVENT\",{}]", e.to_json())).await;
        assert_eq!(w.recv().await[2], true);
    }
    // Every stored event reaches each subscription exactly once, the live ones included:
    // those committed before a query's snapshot inside its answer, those committed after
    // it after its EOSE. The kernel's socket buffers can take a whole answer before this
    // client reads, so a query may finish while live events are still being published and
    // its held-back live events follow its EOSE — possibly after the other's EOSE too. So
    // read until both answers ended and both sets are whole, then for a quiet while.
    let mut got: HashMap<String, Vec<String>> = HashMap::new();
    let mut eose = HashSet::new();
    let whole = |got: &HashMap<String, Vec<String>>| {
        ["a", "b"]
            .iter()
            .all(|s| got.get(*s).is_some_and(|v| v.len() >= 220))
    };
    while eose.len() < 2 || !whole(&got) {
        let v = c.recv().await; // panics after 5 s without a message: an event was lost
        match (v[0].as_str(), v[1].as_str()) {
            (Some("EVENT"), Some(s @ ("a" | "b"))) => got
                .entry(s.to_owned())
                .or_default()
                .push(v[2]["id"].as_str().unwrap().to_owned()),
            (Some("EOSE"), Some(s @ ("a" | "b"))) => assert!(eose.insert(s.to_owned()), "{v}"),
            _ => panic!("unexpected {v}"),
        }
    }
    assert!(c.silent_for(300).await, "more than every event was sent");
    for (sub, ids) in &got {
        let distinct: HashSet<_> = ids.iter().collect();
        assert_eq!(
            (ids.len(), distinct.len()),
            (220, 220),
            "subscription {sub}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_that_overflows_the_nodes_budget_is_closed_not_its_neighbour() {
    let cap = 256 << 10;
    let r = relay_with(
        300,
        60 << 10,
        Limits {
            max_queued_bytes: cap,
            max_queued_bytes_total: cap,
            ..Limits::default()
        },
    )
    .await;
    // two readers that do not read yet fill most of the node's budget (each at most half
    // its own, two 60 KiB events)
    let mut first = Raw::connect(&r.url).await;
    first.send_json(big_req("x", 500)).await;
    let mut second = Raw::connect(&r.url).await;
    second.send_json(big_req("y", 500)).await;
    assert!(eventually(|| r.relay.queued_output_bytes() >= cap * 3 / 4).await);
    let mut third = Raw::connect(&r.url).await;
    third.send_json(big_req("z", 500)).await;
    // the third cannot queue past the node's budget: closed
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match third.ws.next().await {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the overflowing connection was closed");
    // the others still get their whole answers
    for c in [&mut first, &mut second] {
        let mut n = 0;
        loop {
            let v = c.recv().await;
            if v[0] == "EOSE" {
                break;
            }
            n += 1;
        }
        assert_eq!(n, 300);
    }
}

/// The close frame's code, or `None` when the connection ended without one; panics after
/// 10 s.
async fn close_code(ws: &mut super::face::Ws) -> Option<u16> {
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .expect("the connection ends within 10 s")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_silent_websockets_are_closed() {
    let r = start(Limits {
        ping_interval_secs: 1,
        idle_timeout_secs: 1,
        ..Limits::default()
    })
    .await;
    // nothing open, nothing said: closed as idle
    let mut idle = Raw::connect(&r.url).await;
    assert_eq!(close_code(&mut idle.ws).await, Some(1000));
    // a subscriber that answers pings (its client reads) stays past several intervals
    let mut alive = Raw::connect(&r.url).await;
    assert!(alive.req("s", &[json!({"limit": 1})]).await.is_empty());
    // (pings arrive and are answered while it reads; nothing else does)
    let quiet = tokio::time::timeout(Duration::from_millis(3500), async {
        loop {
            match alive.ws.next().await {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                other => return other.map(|m| m.map(|m| m.to_string())),
            }
        }
    })
    .await;
    assert!(quiet.is_err(), "no close while it answers pings: {quiet:?}");
    assert!(alive.req("again", &[json!({"limit": 1})]).await.is_empty());
    drop(alive);
    assert!(eventually(|| r.relay.metrics().connections_open.load(Relaxed) == 0).await);
    // a subscriber that never answers (never polls its socket): the relay closes it once
    // it has been silent for three intervals (by about 4 s). Reading it afterwards may
    // end on the close frame or on the error of answering the pings queued before it,
    // so the relay's own count says whether it is closed.
    let mut mute = Raw::connect(&r.url).await;
    mute.send_json(json!(["REQ", "s", {"limit": 1}])).await;
    assert!(eventually(|| r.relay.metrics().connections_open.load(Relaxed) == 1).await);
    tokio::time::sleep(Duration::from_millis(6000)).await;
    assert_eq!(r.relay.metrics().connections_open.load(Relaxed), 0);
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match mute.ws.next().await {
                Some(Ok(Message::Close(f))) => return f.map(|f| u16::from(f.code)),
                None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(matches!(ended, Ok(Some(1001) | None)), "{ended:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_frames_close_with_1009_and_invalid_utf8_with_1007() {
    let r = start(Limits {
        max_message_length: 4096,
        ..Limits::default()
    })
    .await;
    let mut big = Raw::connect(&r.url).await;
    let _ = big.ws.send(Message::Text("x".repeat(2 << 20).into())).await;
    assert_eq!(close_code(&mut big.ws).await, Some(1009));
    let mut bad = Raw::connect(&r.url).await;
    let frame = Frame::message(vec![b'[', 0xff, 0xfe, b']'], OpCode::Data(Data::Text), true);
    bad.ws.send(Message::Frame(frame)).await.unwrap();
    assert_eq!(close_code(&mut bad.ws).await, Some(1007));
    // and the relay goes on
    let mut c = Raw::connect(&r.url).await;
    assert!(c.req("ok", &[json!({"limit": 1})]).await.is_empty());
}
