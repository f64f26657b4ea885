//! The accountability ledger across a running cluster (`meshnode cluster start --grants`):
//! a peer that floods is halved then suspended, one that understates its receipts is put
//! on probation and reported, one that corrupts its receipt chain is revoked — and every
//! node's evidence log, replayed alone, prints exactly the decisions the node took.

use super::cluster::{Nodes, peers_of, start};
use super::peering::{note, wait_until};
use super::*;
use nostr::JsonUtil as _;

/// A node's ledger (`GET /v1/ledger`): standings and the decisions it recorded live.
pub(super) fn ledger_of(url: &str) -> Value {
    let o = run(&["ledger", "show", "--node", url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(stdout(&o).trim()).unwrap()
}

/// Node `i`'s decisions about `peer`, as (severity, remedy).
fn decided_about(url: &str, peer: &str) -> Vec<(String, String)> {
    ledger_of(url)["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["peer"] == peer)
        .map(|d| {
            (
                d["severity"].as_str().unwrap().to_owned(),
                d["remedy"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Each node's evidence log, copied to `elsewhere` and replayed there alone, prints exactly
/// the decisions the node recorded as it took them (`GET /v1/ledger`), as JSON and words.
fn replays_as_decided(dir: &Path, nodes: &Nodes, elsewhere: &Path) {
    for i in 0..nodes.len() {
        let live: Vec<Value> = ledger_of(&nodes.url(i))["decisions"]
            .as_array()
            .unwrap()
            .clone();
        // every segment, in order; the current one as `node-I.jsonl`
        let mut files = Vec::new();
        for (k, log) in segments(dir, i).iter().enumerate() {
            let moved = match log.file_name().unwrap().to_str().unwrap() {
                "evidence.jsonl" => elsewhere.join(format!("node-{i}.jsonl")),
                _ => elsewhere.join(format!("node-{i}-{k:03}.jsonl")),
            };
            std::fs::copy(log, &moved).unwrap();
            files.push(moved.to_str().unwrap().to_owned());
        }
        let mut args = vec!["ledger", "replay"];
        args.extend(files.iter().map(String::as_str));
        args.push("--json");
        let o = run(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        let replayed: Vec<Value> = stdout(&o)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // the live list may have grown since the copy: compare the copy's span
        assert!(!replayed.is_empty(), "node {i}");
        assert_eq!(replayed[..], live[..replayed.len()], "node {i}");
        let words = run(&args[..args.len() - 1]);
        assert!(stdout(&words).contains("window "), "{}", stdout(&words));
    }
}

#[test]
fn granted_peers_that_flood_are_halved_then_suspended_and_replay_takes_the_same_decisions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    // every pair grants 10 events per 4 s window (floor 2); rounds every second
    let (_stop, nodes) = start(
        &dir,
        &[
            "--nodes",
            "3",
            "--grants",
            "10",
            "--window",
            "4",
            "--interval-secs",
            "1",
        ],
    );
    let flooder = nodes.key(0);
    for i in 0..3 {
        wait_until(&format!("node {i} grants both others"), || {
            let l = ledger_of(&nodes.url(i));
            let peers = l["peers"].as_object().unwrap();
            peers.len() == 2 && peers.values().all(|s| s["grant_out"].is_string())
        });
    }
    // quiet windows are clean (S0) at every node: receipts and measurements agree
    wait_until("a clean window judged at node 1", || {
        decided_about(&nodes.url(1), &flooder)
            .iter()
            .any(|(s, r)| s == "S0" && r == "increase")
    });
    // node 0 floods: 60 events a window against 10 granted; its peers take them (from it,
    // or from each other) and halve, then suspend, whoever delivered them
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let mut suspended_by = None;
    for round in 0..8 {
        let batch: Vec<_> = (0..60)
            .map(|k| note(&keys, &format!("flood {round} {k}")))
            .collect();
        runtime().block_on(publish_all(&nodes.ws(0), &batch));
        let before: Vec<usize> = (1..3)
            .map(|i| {
                ledger_of(&nodes.url(i))["decisions"]
                    .as_array()
                    .unwrap()
                    .len()
            })
            .collect();
        // the next window is judged at both
        wait_until("the flood's window judged", || {
            (1..3).all(|i| {
                ledger_of(&nodes.url(i))["decisions"]
                    .as_array()
                    .unwrap()
                    .len()
                    > before[i - 1]
            })
        });
        suspended_by = (1..3).find(|&i| {
            decided_about(&nodes.url(i), &flooder)
                .iter()
                .any(|(s, r)| s == "S3" && r == "suspend")
        });
        if suspended_by.is_some() {
            break;
        }
    }
    let j = suspended_by.expect("node 0 suspended by a peer within 8 floods");
    let about = decided_about(&nodes.url(j), &flooder);
    let halved = about.iter().filter(|(_, r)| r == "halve").count();
    let first_halve = about.iter().position(|(_, r)| r == "halve").unwrap();
    let suspend = about.iter().position(|(_, r)| r == "suspend").unwrap();
    assert!(halved >= 2 && first_halve < suspend, "{about:?}");
    assert!(
        !about.iter().any(|(s, _)| s == "S2" || s == "S4"),
        "an honest flooder's receipts match: {about:?}"
    );
    let l = ledger_of(&nodes.url(j));
    let s = &l["peers"][&flooder];
    assert!(s["suspended_until"].as_u64() > Some(unix_now()), "{s}");
    assert_eq!(s["capacity"], 2, "halved to the floor: {s}");
    // the peers list shows it; its report (kind 30802) is on the node's relay
    wait_until("the suspension shows in the peers table", || {
        peers_of(&nodes.url(j))["peers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["id"] == flooder.as_str() && p["link"] == "suspended (ledger)")
    });
    let reports = runtime().block_on(req_events(
        &nodes.ws(j),
        serde_json::json!({"kinds": [30802], "#p": [flooder]}),
    ));
    assert!(
        reports.iter().any(|r| r["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t[0] == "rung" && t[1] == "S3")),
        "{reports:?}"
    );
    // every node's evidence log, replayed alone — and moved elsewhere — prints exactly the
    // decisions the node recorded as it took them
    let elsewhere = tempfile::tempdir().unwrap();
    replays_as_decided(&dir, &nodes, elsewhere.path());
    // the grants on the control socket: listed with their capacity, revoked, refused
    let node2 = dir.join("node-2");
    let o = run(&["grant", "list", "--dir", node2.to_str().unwrap()]);
    let grants: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(grants["grants"].as_array().unwrap().len(), 2, "{grants}");
    let other = nodes.key(1);
    let o = run(&["grant", "revoke", &other, "--dir", node2.to_str().unwrap()]);
    assert!(stdout(&o).contains("\"revoked\":true"), "{}", stdout(&o));
    let o = run(&[
        "grant",
        "issue",
        "zz",
        "--events",
        "5",
        "--dir",
        node2.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run(&[
        "grant",
        "issue",
        &other,
        "--events",
        "7",
        "--window",
        "4",
        "--dir",
        node2.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let l = ledger_of(&nodes.url(2));
    assert!(l["peers"][&other]["grant_out"].is_string(), "{l}");
    // a log line that does not parse is named, and the rest still replays
    let broken = elsewhere.path().join("node-1.jsonl");
    let mut text = std::fs::read_to_string(&broken).unwrap();
    text.push_str("{\"type\":\"measure\",\"at\":\n");
    std::fs::write(&broken, text).unwrap();
    let o = run(&["ledger", "replay", broken.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("line "), "{}", stderr(&o));
    assert!(!stdout(&o).is_empty());
}

/// Node `i`'s evidence log: its rotated segments, oldest first, then the current one.
fn segments(dir: &Path, i: usize) -> Vec<PathBuf> {
    let ledger = dir.join(format!("node-{i}/ledger"));
    let mut kept: Vec<PathBuf> = std::fs::read_dir(&ledger)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with("evidence-") && name.ends_with(".jsonl")
        })
        .collect();
    kept.sort();
    kept.push(ledger.join("evidence.jsonl"));
    kept
}

/// Node `i`'s evidence log lines of `type_` about `peer`, every segment.
fn logged(dir: &Path, i: usize, type_: &str, peer: &str) -> Vec<Value> {
    segments(dir, i)
        .iter()
        .flat_map(|log| {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect::<Vec<_>>()
        })
        .filter(|v| v["type"] == type_ && v["peer"] == peer)
        .collect()
}

/// The sum over `lines` of the number at `path` (absent: 0).
fn sum(lines: &[Value], path: &str) -> u64 {
    lines
        .iter()
        .map(|v| v.pointer(path).and_then(Value::as_u64).unwrap_or(0))
        .sum()
}

#[test]
fn grant_shards_are_metered_per_shard_on_both_sides_and_a_peers_blob_transfers_count() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (notes, reactions) = (r#"{"kinds":[1]}"#, r#"{"kinds":[7]}"#);
    // a setting out of range, or of no section, stops the cluster before any node runs
    for bad in ["ledger.evidence_max_bytes=5", "ledger.nonsense=1"] {
        let d = tmp.path().join("refused");
        let o = run(&[
            "cluster",
            "start",
            "--nodes",
            "1",
            "--dir",
            d.to_str().unwrap(),
            "--set",
            bad,
        ]);
        assert!(!o.status.success());
        assert!(stderr(&o).contains(bad), "{}", stderr(&o));
    }
    let (_stop, nodes) = start(
        &dir,
        &[
            "--nodes",
            "2",
            "--grants",
            "500",
            "--window",
            "3",
            "--interval-secs",
            "1",
            "--grant-shard",
            notes,
            "--grant-shard",
            reactions,
            "--set",
            "ledger.evidence_max_bytes=16384",
        ],
    );
    let (a, b) = (nodes.key(0), nodes.key(1));
    wait_until("the two grant each other", || {
        ledger_of(&nodes.url(0))["peers"][&b]["grant_out"].is_string()
            && ledger_of(&nodes.url(1))["peers"][&a]["grant_out"].is_string()
    });
    let o = run(&[
        "grant",
        "list",
        "--dir",
        dir.join("node-0").to_str().unwrap(),
    ]);
    let grants: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(
        grants["grants"][0]["shards"],
        serde_json::json!([{"kinds": [1]}, {"kinds": [7]}]),
        "{grants}"
    );
    // node 1 gets 5 notes, 3 reactions and 2 articles (outside both shards)
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let event = |kind: u16, i: usize| {
        keys.sign(fleetmesh_proto::UnsignedEvent {
            created_at: unix_now(),
            kind,
            tags: vec![vec!["d".into(), format!("{i}")]],
            content: format!("{kind} {i}"),
        })
        .unwrap()
    };
    let mut batch: Vec<_> = (0..5).map(|i| event(1, i)).collect();
    batch.extend((0..3).map(|i| event(7, i)));
    batch.extend((0..2).map(|i| event(30023, i)));
    runtime().block_on(publish_all(&nodes.ws(1), &batch));
    // all reach node 0: node 1 pushes only what the grant covers, node 0 pulls the rest
    wait_until("node 0 holds all ten", || {
        runtime()
            .block_on(req_events(
                &nodes.ws(0),
                serde_json::json!({"authors": [keys.nostr_pubkey_hex()]}),
            ))
            .len()
            == 10
    });
    // node 1's key uploads a blob to node 0's Blossom store
    let node1 = fleetmesh_proto::NodeKeys::load(&dir.join("node-1/keys")).unwrap();
    let body = super::blossom::bytes(5000, 3);
    let hash = super::blossom::sha256_hex(&body);
    let put = runtime().block_on(
        http_client()
            .put(format!("{}/upload", nodes.url(0)))
            .header(
                "authorization",
                super::blossom::auth(&node1, "upload", &hash, 60),
            )
            .body(body)
            .send(),
    );
    assert_eq!(put.unwrap().status(), 200);
    // node 0 measured node 1's deliveries per shard, and its blob bytes apart
    wait_until("node 0's measurements cover it all", || {
        let m = logged(&dir, 0, "measure", &b);
        sum(&m, "/counts/shards/0/events") >= 5
            && sum(&m, "/counts/shards/1/events") >= 3
            && sum(&m, "/counts/blob_in") == 5000
    });
    let measured = logged(&dir, 0, "measure", &b);
    // the articles count in the totals, in no shard
    assert!(
        sum(&measured, "/counts/events_in")
            >= sum(&measured, "/counts/shards/0/events")
                + sum(&measured, "/counts/shards/1/events")
                + 2,
        "{measured:?}"
    );
    // node 1's receipts say the same per shard, window by window: every window is clean
    let receipts = logged(&dir, 0, "receipt", &b);
    assert!(
        receipts.iter().any(
            |r| r["receipt"]["shards"].as_array().map(Vec::len) == Some(2)
                && r["receipt"]["shards"][0]["events"].as_u64() > Some(0)
        ),
        "{receipts:?}"
    );
    let sent = logged(&dir, 1, "sent", &a);
    for r in &receipts {
        assert!(
            sent.iter().any(|s| s["receipt"] == r["receipt"]),
            "what node 0 took is what node 1 signed: {r}"
        );
    }
    let about = decided_about(&nodes.url(0), &b);
    assert!(!about.is_empty());
    assert!(about.iter().all(|(s, _)| s == "S0"), "{about:?}");
    // past 16 KiB the log went on in a new segment that begins with a checkpoint, and
    // every segment together replays to what the node decided
    wait_until("node 0's log rotated", || segments(&dir, 0).len() > 1);
    let current = std::fs::read_to_string(dir.join("node-0/ledger/evidence.jsonl")).unwrap();
    let second: Value = serde_json::from_str(current.lines().nth(1).unwrap()).unwrap();
    assert_eq!(second["type"], "checkpoint", "{second}");
    let elsewhere = tempfile::tempdir().unwrap();
    replays_as_decided(&dir, &nodes, elsewhere.path());
}

/// `meshnode report list --relay WS --about KEY --json`: the reports on node `ws`'s relay
/// about `peer`, as (rung, remedy, evidence lines).
fn reports_about(ws: &str, peer: &str) -> Vec<(String, String, usize)> {
    let o = run(&["report", "list", "--relay", ws, "--about", peer, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .map(|l| {
            let r: Value = serde_json::from_str(l).unwrap();
            assert_eq!(r["subject"], peer, "{r}");
            (
                r["rung"].as_str().unwrap().to_owned(),
                r["remedy"].as_str().unwrap().to_owned(),
                r["evidence"].as_array().map_or(0, Vec::len),
            )
        })
        .collect()
}

#[test]
fn a_peer_that_understates_its_receipts_is_reported_and_one_that_corrupts_its_chain_is_revoked() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    // a generous grant (no overrun anywhere); node 0 lies in its receipts, node 1 breaks
    // its chain from its third receipt on; node 2 is honest
    let (_stop, nodes) = start(
        &dir,
        &[
            "--nodes",
            "3",
            "--grants",
            "1000",
            "--window",
            "3",
            "--interval-secs",
            "1",
            "--fault",
            "0=understate",
            "--fault",
            "1=corrupt-chain",
        ],
    );
    let (liar, corruptor) = (nodes.key(0), nodes.key(1));
    // the corruptor is revoked by both others on its first broken link: S4, its grant
    // deleted from their relays, its link closed and barred for good
    for i in [0, 2] {
        wait_until(&format!("node {i} revokes node 1"), || {
            decided_about(&nodes.url(i), &corruptor)
                .iter()
                .any(|(s, r)| s == "S4" && r == "revoke")
        });
        let s = &ledger_of(&nodes.url(i))["peers"][&corruptor];
        assert_eq!(s["revoked"], true, "{s}");
        wait_until("the revocation shows in the peers table", || {
            peers_of(&nodes.url(i))["peers"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["id"] == corruptor.as_str() && p["link"] == "revoked (ledger)")
        });
        wait_until("the revocation's report is listed", || {
            reports_about(&nodes.ws(i), &corruptor)
                .iter()
                .any(|(rung, remedy, evidence)| rung == "S4" && remedy == "revoke" && *evidence > 0)
        });
        // its grant to the corruptor is gone (NIP-09); the one to the honest peer stays
        // (issued at the close of a window once their link is up)
        let me = nodes.key(i);
        wait_until("one grant left: the honest peer's", || {
            runtime()
                .block_on(req_events(
                    &nodes.ws(i),
                    serde_json::json!({"kinds": [30801], "authors": [me]}),
                ))
                .len()
                == 1
        });
        assert!(ledger_of(&nodes.url(i))["peers"][&corruptor]["grant_out"].is_null());
    }
    assert!(
        !decided_about(&nodes.url(2), &liar)
            .iter()
            .any(|(s, _)| s == "S4"),
        "an understating peer's chain is sound"
    );
    // the liar moves real traffic within its grant and claims a quarter of it: whoever
    // takes it from the liar puts it on probation and reports it
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let mut reported_by = None;
    for round in 0..8 {
        let batch: Vec<_> = (0..80)
            .map(|k| note(&keys, &format!("traffic {round} {k}")))
            .collect();
        runtime().block_on(publish_all(&nodes.ws(0), &batch));
        let before = ledger_of(&nodes.url(2))["decisions"]
            .as_array()
            .unwrap()
            .len();
        wait_until("the traffic's window judged at node 2", || {
            ledger_of(&nodes.url(2))["decisions"]
                .as_array()
                .unwrap()
                .len()
                > before
        });
        reported_by = [2, 1].into_iter().find(|&i| {
            decided_about(&nodes.url(i), &liar)
                .iter()
                .any(|(s, r)| s == "S2" && r == "probation")
        });
        if reported_by.is_some() {
            break;
        }
    }
    let j = reported_by.expect("node 0 put on probation by a peer within 8 windows of traffic");
    let s = &ledger_of(&nodes.url(j))["peers"][&liar];
    assert_eq!(s["probation"], true, "{s}");
    assert_ne!(s["revoked"], true, "{s}");
    wait_until("the liar's report is listed", || {
        reports_about(&nodes.ws(j), &liar)
            .iter()
            .any(|(rung, remedy, evidence)| rung == "S2" && remedy == "probation" && *evidence > 0)
    });
    let o = run(&["report", "list", "--relay", &nodes.ws(j)]);
    assert!(
        stdout(&o).contains(&format!("about {liar}: S2 probation")),
        "{}",
        stdout(&o)
    );
    // the honest node is never reported by anyone
    for i in [0, 1] {
        assert!(
            decided_about(&nodes.url(i), &nodes.key(2))
                .iter()
                .all(|(s, _)| s == "S0"),
            "node {i} about node 2: {:?}",
            decided_about(&nodes.url(i), &nodes.key(2))
        );
    }
    // the projections for standard clients, as the `nostr` crate reads them: NIP-85
    // assertions (kind 30385) of the standing — the corruptor ranked 0 at S4, the liar at
    // most 40 at S2 — and NIP-66 (kind 30166) about the face, its NIP-11 document inside
    let assertion = |about: &str| {
        let found = runtime().block_on(req_events(
            &nodes.ws(j),
            serde_json::json!({"kinds": [30385], "authors": [nodes.key(j)], "#d": [format!("did:nostr:{about}")]}),
        ));
        let e = found.first()?;
        let theirs = nostr::Event::from_json(e.to_string()).unwrap();
        theirs.verify().unwrap();
        let tag = |name: &str| {
            theirs
                .tags
                .iter()
                .find(|t| t.kind().to_string() == name)
                .and_then(|t| t.content())
                .map(str::to_owned)
        };
        Some((tag("rank")?.parse::<u8>().unwrap(), tag("rung")?, tag("k")?))
    };
    wait_until("the liar's assertion says probation", || {
        assertion(&liar)
            .is_some_and(|(rank, rung, k)| rank <= 40 && rung == "S2" && k == "did:nostr")
    });
    if j == 2 {
        wait_until("the corruptor's assertion says revoked", || {
            assertion(&corruptor).is_some_and(|(rank, rung, _)| rank == 0 && rung == "S4")
        });
    }
    let monitor = runtime().block_on(req_events(
        &nodes.ws(j),
        serde_json::json!({"kinds": [30166], "authors": [nodes.key(j)]}),
    ));
    let m = nostr::Event::from_json(monitor[0].to_string()).unwrap();
    m.verify().unwrap();
    let tags: Vec<Vec<String>> = m.tags.iter().map(|t| t.clone().to_vec()).collect();
    assert!(tags.contains(&vec!["d".into(), nodes.ws(j)]), "{tags:?}");
    assert!(tags.contains(&vec!["N".into(), "11".into()]), "{tags:?}");
    assert!(
        tags.iter().any(|t| t[0] == "R" && t[1].ends_with("auth")),
        "{tags:?}"
    );
    let doc: Value = serde_json::from_str(&m.content).unwrap();
    assert_eq!(doc["self"], nodes.key(j), "{doc}");
    // a stranger's ledger message (signed, so its sender is known) is refused before it
    // reaches the evidence log
    let _ = rustls::crypto::ring::default_provider().install_default();
    let work = tempfile::tempdir().unwrap();
    let stranger = work.path().join("stranger");
    assert!(run(&["init", stranger.to_str().unwrap()]).status.success());
    let doc = work.path().join("node-2.json");
    let d: Value = reqwest::blocking::get(format!("{}/.well-known/did.json", nodes.url(2)))
        .unwrap()
        .json()
        .unwrap();
    std::fs::write(&doc, d.to_string()).unwrap();
    let receipt = "https://fleetmesh.org/budget/1.0/receipt";
    let (doc, key_dir) = (doc.to_str().unwrap(), stranger.to_str().unwrap());
    let o = run(&[
        "didcomm",
        "pack",
        "--to",
        doc,
        "--key-dir",
        key_dir,
        "--sign",
        "secp256k1",
        "--anon",
        "--type",
        receipt,
        "--body",
        "{}",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/didcomm", nodes.url(2)))
        .header("content-type", "application/didcomm-encrypted+json")
        .body(o.stdout)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    assert!(r.text().unwrap().contains("not_a_peer"));
    let elsewhere = tempfile::tempdir().unwrap();
    replays_as_decided(&dir, &nodes, elsewhere.path());
    // bad input to `report list` and `cluster start --fault` is refused, named
    let ws = nodes.ws(2);
    let start = ["cluster", "start", "--dir", "/nonexistent", "--nodes", "2"];
    for (args, why) in [
        (
            vec!["report", "list", "--relay", &ws, "--about", "zz"],
            "64 hex",
        ),
        (
            vec!["report", "list", "--relay", "ftp://x"],
            "ws:// or wss://",
        ),
        (
            [&start[..], &["--grants", "5", "--fault", "7=understate"]].concat(),
            "no node 7",
        ),
        (
            [&start[..], &["--grants", "5", "--fault", "0=lie"]].concat(),
            "\"lie\"",
        ),
        (
            [&start[..], &["--fault", "0=understate"]].concat(),
            "--grants",
        ),
    ] {
        let o = run(&args);
        assert!(
            !o.status.success() && stderr(&o).contains(why),
            "{args:?}: {}",
            stderr(&o)
        );
    }
}

#[test]
fn the_face_is_projected_as_nip66_on_the_configured_relays_on_schedule() {
    // B is any relay; A names it in [node] relays and publishes every second
    // (A advertises its face as a ws endpoint: a bare listener is not announced elsewhere)
    let node = |edits: &[(&str, &str)], advertised: bool| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("ws=ws://127.0.0.1:{port}/");
        let flags: &[&str] = if advertised {
            &["--endpoint", &endpoint]
        } else {
            &[]
        };
        assert!(init(dir.path(), flags).status.success());
        edit_config(dir.path(), edits);
        let mut cmd = meshnode();
        let listen = format!("127.0.0.1:{port}");
        cmd.args(["run", dir.path().to_str().unwrap(), "--listen", &listen]);
        (Daemon::start(cmd), dir)
    };
    let (b, _b_dir) = node(&[], true);
    let b_ws = b.url("/").replace("http://", "ws://");
    let relays = format!("\nrelays = [{b_ws:?}]");
    let edits = [
        ("\nrelays = []", relays.as_str()),
        ("publish_secs = 600", "publish_secs = 1"),
    ];
    let (a, a_dir) = node(&edits, true);
    // C names B too, but advertises no endpoint: its face stays on its own relay
    let (c, c_dir) = node(&edits, false);
    let a_key = fleetmesh_proto::NodeKeys::load(&a_dir.path().join("keys"))
        .unwrap()
        .nostr_pubkey_hex();
    let a_ws = a.url("/").replace("http://", "ws://");
    let mut seen = Vec::new();
    wait_until("A's NIP-66 event on B", || {
        seen = runtime().block_on(req_events(
            &b_ws,
            serde_json::json!({"kinds": [30166], "authors": [a_key]}),
        ));
        !seen.is_empty()
    });
    let m = nostr::Event::from_json(seen[0].to_string()).unwrap();
    m.verify().unwrap();
    let tags: Vec<Vec<String>> = m.tags.iter().map(|t| t.clone().to_vec()).collect();
    assert!(tags.contains(&vec!["d".into(), a_ws]), "{tags:?}");
    assert!(
        tags.contains(&vec!["n".into(), "clearnet".into()]),
        "{tags:?}"
    );
    for nip in ["1", "11"] {
        assert!(tags.contains(&vec!["N".into(), nip.into()]), "{tags:?}");
    }
    let doc: Value = serde_json::from_str(&m.content).unwrap();
    assert_eq!(doc["self"], a_key.as_str(), "{doc}");
    // no ledger here (no federation transports): nothing to assert about peers
    let none = runtime().block_on(req_events(
        &b_ws,
        serde_json::json!({"kinds": [30385], "authors": [a_key]}),
    ));
    assert!(none.is_empty(), "{none:?}");
    // and it is published again on schedule: a newer one replaces it
    let first = m.created_at.as_secs();
    wait_until("a newer NIP-66 event on B", || {
        runtime()
            .block_on(req_events(
                &b_ws,
                serde_json::json!({"kinds": [30166], "authors": [a_key]}),
            ))
            .iter()
            .any(|e| e["created_at"].as_u64() > Some(first))
    });
    let c_key = fleetmesh_proto::NodeKeys::load(&c_dir.path().join("keys"))
        .unwrap()
        .nostr_pubkey_hex();
    let c_ws = c.url("/").replace("http://", "ws://");
    let mut c_first = None;
    wait_until(
        "C published its NIP-66 event twice on its own relay",
        || {
            let got = runtime().block_on(req_events(
                &c_ws,
                serde_json::json!({"kinds": [30166], "authors": [c_key]}),
            ));
            let at = got.first().and_then(|e| e["created_at"].as_u64());
            if c_first.is_none() {
                c_first = at;
            }
            at.is_some() && at > c_first
        },
    );
    let on_b = runtime().block_on(req_events(
        &b_ws,
        serde_json::json!({"kinds": [30166], "authors": [c_key]}),
    ));
    assert!(on_b.is_empty(), "{on_b:?}");
}
