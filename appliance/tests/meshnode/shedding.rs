//! Load shedding across a running cluster: a node pinned at rung 2 serves its granted peer
//! within the grant (on its face and in its own rounds) and nobody else; a node at rung 1
//! pauses its rounds with peers it grants nothing until it grants them.

use super::cluster::{peers_of, start};
use super::ledger::ledger_of;
use super::peering::{note, wait_until};
use super::*;

/// `["AUTH", event]` (NIP-42) for `challenge` at `relay`, signed by `keys`.
fn auth_message(keys: &fleetmesh_proto::NodeKeys, challenge: &str, relay: &str) -> String {
    fleetmesh_relay::sync::auth_message(keys.nostr(), relay, challenge).unwrap()
}

#[test]
fn a_node_shedding_at_rung_2_serves_its_granted_peer_within_the_grant_and_nobody_else() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let args = [
        "--nodes",
        "2",
        "--grants",
        "5",
        "--window",
        "3",
        "--interval-secs",
        "1",
    ];
    // node 0 pinned at rung 2 by its operator, then the cluster started again
    let (_stop, nodes) = start_pinned(&dir, &args, "rung2");
    let peer = nodes.key(1);
    wait_until("node 0 grants node 1", || {
        ledger_of(&nodes.url(0))["peers"][&peer]["grant_out"].is_string()
    });
    let ws = nodes.ws(0);
    let writer = fleetmesh_proto::NodeKeys::generate().unwrap();
    let peer_keys = fleetmesh_proto::NodeKeys::load(&dir.join("node-1").join("keys")).unwrap();
    let stranger = fleetmesh_proto::NodeKeys::generate().unwrap();
    runtime().block_on(async {
        // publishes `n` notes on `c`; the OKs' messages, and the challenge if one came
        async fn publish(
            c: &mut Ws,
            keys: &fleetmesh_proto::NodeKeys,
            n: usize,
            tag: &str,
        ) -> (Vec<(bool, String)>, Option<String>) {
            for k in 0..n {
                let e = note(keys, &format!("{tag} {k}"));
                c.send(WsMessage::Text(
                    format!("[\"EVENT\",{}]", e.to_json()).into(),
                ))
                .await
                .unwrap();
            }
            let (mut oks, mut challenge) = (Vec::new(), None);
            while oks.len() < n {
                let v = next_json(c).await;
                match v[0].as_str() {
                    Some("AUTH") => challenge = v[1].as_str().map(str::to_owned),
                    Some("OK") => oks.push((v[2] == true, v[3].as_str().unwrap().to_owned())),
                    _ => panic!("unexpected {v}"),
                }
            }
            (oks, challenge)
        }
        // anonymous: challenged and refused
        let (mut c, _) = tokio_tungstenite::connect_async(&ws).await.unwrap();
        let (oks, challenge) = publish(&mut c, &writer, 1, "anonymous").await;
        assert!(
            !oks[0].0 && oks[0].1.starts_with("auth-required:"),
            "{oks:?}"
        );
        let challenge = challenge.expect("a NIP-42 challenge");
        // as the granted peer: within its grant (capacity ≤ 5 a window), then refused
        c.send(WsMessage::Text(
            auth_message(&peer_keys, &challenge, &ws).into(),
        ))
        .await
        .unwrap();
        let v = next_json(&mut c).await;
        assert_eq!(
            (&v[0], &v[2]),
            (&Value::from("OK"), &Value::from(true)),
            "{v}"
        );
        let (oks, _) = publish(&mut c, &writer, 30, "granted").await;
        let taken = oks.iter().filter(|(ok, _)| *ok).count();
        assert!((1..=10).contains(&taken), "{oks:?}");
        assert!(
            oks.iter().any(|(ok, why)| !ok && why.contains("is spent")),
            "{oks:?}"
        );
        // as a stranger: authenticated, but not granted
        let (mut s, _) = tokio_tungstenite::connect_async(&ws).await.unwrap();
        let (_, challenge) = publish(&mut s, &writer, 1, "stranger").await;
        s.send(WsMessage::Text(
            auth_message(&stranger, &challenge.unwrap(), &ws).into(),
        ))
        .await
        .unwrap();
        assert_eq!(next_json(&mut s).await[2], true);
        let (oks, _) = publish(&mut s, &writer, 1, "stranger again").await;
        assert!(oks[0].1.starts_with("rate-limited:"), "{oks:?}");
        // the granted peer's link is served all along: node 1's events reach node 0,
        // where the granted peer's connection may still read
        let e = note(&writer, "over the link");
        publish_all(&nodes.ws(1), std::slice::from_ref(&e)).await;
        let req = serde_json::json!(["REQ", "q", {"ids": [e.id_hex()]}]).to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            c.send(WsMessage::Text(req.clone().into())).await.unwrap();
            let mut found = false;
            loop {
                let v = next_json(&mut c).await;
                match v[0].as_str() {
                    Some("EVENT") => found = true,
                    Some("EOSE") => break,
                    _ => panic!("unexpected {v}"),
                }
            }
            if found {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "node 0 never got node 1's event"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    // node 0's own rounds take from node 1 within its grant too: of 40 events at node 1,
    // a window brings at most the grant's 5 pulled and 5 pushed — never all at once
    let burst: Vec<_> = (0..40)
        .map(|k| note(&writer, &format!("burst {k}")))
        .collect();
    runtime().block_on(publish_all(&nodes.ws(1), &burst));
    let conn = rusqlite::Connection::open(dir.join("node-0").join("fleetmesh.db")).unwrap();
    let arrived = || {
        burst
            .iter()
            .filter(|e| {
                conn.query_row(
                    "SELECT 1 FROM events WHERE id = ?1",
                    [e.id.to_vec()],
                    |_| Ok(()),
                )
                .is_ok()
            })
            .count()
    };
    wait_until("node 1's burst starts reaching node 0", || arrived() > 0);
    let first = arrived();
    assert!(first <= 20, "{first} of 40 arrived at once");
    // the peers view shows the rung and the strain; watch and the metrics too
    let p = peers_of(&nodes.url(0));
    assert_eq!(p["shedding_rung"], 2, "{p}");
    assert!(p["strain"]["ip:127.0.0.1"].as_u64() >= Some(2), "{p}");
    assert_eq!(p["strain"][stranger.nostr_pubkey_hex()], 1, "{p}");
    let o = run(&["watch", "--node", &nodes.url(0)]);
    assert!(stdout(&o).contains("rung 2"), "{}", stdout(&o));
}

#[test]
fn a_shedding_node_pauses_rounds_with_peers_it_grants_nothing_until_it_grants_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let args = ["--nodes", "2", "--interval-secs", "1"];
    // node 0 pinned at rung 1 by its operator, with no grant to node 1
    let (_stop, nodes) = start_pinned(&dir, &args, "rung1");
    let peer = nodes.key(1);
    let link = |want: &str| {
        peers_of(&nodes.url(0))["peers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"] == peer.as_str() && p["link"] == want)
    };
    wait_until("node 0 pauses its rounds with node 1", || {
        link("paused (shedding)")
    });
    // an event at node 1 stays there: node 0 refuses node 1's pushes at rung 1 and does not
    // pull from it (which would take the writer from the peers it grants)
    let e = note(
        &fleetmesh_proto::NodeKeys::generate().unwrap(),
        "while shedding",
    );
    runtime().block_on(publish_all(&nodes.ws(1), std::slice::from_ref(&e)));
    let db = dir.join("node-0").join("fleetmesh.db");
    let stored = || {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.query_row(
            "SELECT COUNT(*) FROM events WHERE id = ?1",
            [e.id.to_vec()],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
            == 1
    };
    std::thread::sleep(Duration::from_secs(5));
    assert!(!stored(), "node 0 took the event while shedding");
    assert!(link("paused (shedding)"));
    // granted, node 1 is served again: the rounds resume and the event arrives
    let node0 = dir.join("node-0");
    let o = run(&[
        "grant",
        "issue",
        &peer,
        "--events",
        "100",
        "--dir",
        node0.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_until("the event reaches node 0", stored);
    wait_until("node 0's rounds with node 1 resume", || link("up"));
}

/// Makes the cluster of `args` in `dir`, stops it, pins node 0's relay at `rung`
/// (`[relay] shedding`, as its operator would) and starts the cluster again.
fn start_pinned<'a>(
    dir: &'a Path,
    args: &[&str],
    rung: &str,
) -> (super::cluster::Stop<'a>, super::cluster::Nodes) {
    {
        let (_stop, _) = start(dir, args);
    }
    let config = dir.join("node-0").join("meshnode.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("\nshedding = \"auto\"\n"), "{text}");
    let pinned = format!("\nshedding = \"{rung}\"\n");
    std::fs::write(
        &config,
        text.replacen("\nshedding = \"auto\"\n", &pinned, 1),
    )
    .unwrap();
    start(dir, args)
}
