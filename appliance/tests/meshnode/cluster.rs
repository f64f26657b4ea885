//! `meshnode cluster`: nodes on loopback converge on events published at any one of them
//! without anyone running `sync` — over QUIC links between nodes that found each other by
//! gossip, or over the relay faces of a topology; `meshnode peers` shows the links; garbage
//! on the gossip is refused and counted; status and stop; bad input refused.

use super::peering::{holds, note, wait_until};
use super::*;

/// Stops the cluster in `dir` when dropped (a failed test leaves no nodes running); when
/// the test failed, prints the end of each node's log first (what the nodes did is gone
/// with the test's directory).
pub(super) struct Stop<'a>(&'a Path);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for i in 0.. {
                let log = self.0.join(format!("node-{i}/meshnode.log"));
                let Ok(text) = std::fs::read_to_string(&log) else {
                    break;
                };
                let lines: Vec<&str> = text.lines().collect();
                let tail = &lines[lines.len().saturating_sub(300)..];
                eprintln!("--- the end of node {i}'s log ---\n{}", tail.join("\n"));
            }
        }
        let _ = run(&["cluster", "stop", "--dir", self.0.to_str().unwrap()]);
    }
}

/// The nodes `cluster start` printed.
pub(super) struct Nodes(Vec<Value>);

impl Nodes {
    pub(super) fn url(&self, i: usize) -> String {
        self.0[i]["url"].as_str().unwrap().to_owned()
    }

    pub(super) fn ws(&self, i: usize) -> String {
        self.url(i).replace("http://", "ws://") + "/"
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Node i's Nostr key (hex).
    pub(super) fn key(&self, i: usize) -> String {
        let did = self.0[i]["did"].as_str().unwrap();
        did.trim_start_matches("did:nostr:").to_owned()
    }
}

/// `meshnode cluster start --dir DIR ARGS…`: its stopper and the nodes it printed.
pub(super) fn start<'a>(dir: &'a Path, args: &[&str]) -> (Stop<'a>, Nodes) {
    let mut all = vec!["cluster", "start", "--dir", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    // the nodes log what they do with their peers (their logs are printed when a test fails)
    let o = meshnode()
        .args(&all)
        .env(
            "MESHNODE_LOG",
            "warn,meshnode::ledger=debug,meshnode::federation=info,meshnode::didcomm=debug",
        )
        .output()
        .expect("meshnode runs");
    let stop = Stop(dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let nodes = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (stop, Nodes(nodes))
}

#[test]
fn a_cluster_in_a_line_converges_reports_its_health_and_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let (_stop, nodes) = start(
        &dir,
        &[
            "--nodes",
            "3",
            "--topology",
            "line",
            "--interval-secs",
            "1",
            "--transport",
            "ws",
        ],
    );
    assert_eq!(nodes.0.len(), 3);
    for n in &nodes.0 {
        assert!(n["did"].as_str().unwrap().starts_with("did:nostr:"), "{n}");
    }
    // published at one end, held at the other: node 0 ↔ 1 ↔ 2
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let e = note(&keys, "from node 0");
    runtime().block_on(publish_all(&nodes.ws(0), std::slice::from_ref(&e)));
    wait_until("node 2 holds node 0's event", || {
        holds(&nodes.ws(2), &e.id_hex())
    });
    // status: all healthy; a second start is refused
    let o = run(&["cluster", "status", "--dir", d]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert_eq!(
        stdout(&o).matches("\"healthy\":true").count(),
        3,
        "{}",
        stdout(&o)
    );
    let o = run(&["cluster", "start", "--nodes", "2", "--dir", d]);
    assert_usage_error(&o, "holds a running cluster");
    // stop: every node ends; then there is no cluster to ask about
    let o = run(&["cluster", "stop", "--dir", d]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["cluster", "status", "--dir", d]);
    assert_usage_error(&o, "no cluster here");
    let o = run(&["cluster", "start", "--nodes", "0", "--dir", d]);
    assert_usage_error(&o, "1 to 32");
    // a node that cannot bind its port is tried again on other ports; one that never can
    // is reported with the end of its log, and no node of the cluster is left running
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = format!("face.listen={}", held.local_addr().unwrap());
    let o = run(&[
        "cluster",
        "start",
        "--nodes",
        "2",
        "--transport",
        "ws",
        "--dir",
        d,
        "--set",
        &listen,
    ]);
    assert!(!o.status.success(), "{}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(
        err.matches("starting again on other ports").count(),
        2,
        "{err}"
    );
    assert!(err.contains("node 0 exited"), "{err}");
    assert!(err.contains("Address already in use"), "{err}");
    assert!(!dir.join("cluster.json").exists());
}

/// `meshnode peers --node URL --json`.
pub(crate) fn peers_of(url: &str) -> Value {
    let o = run(&["peers", "--node", url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}

#[test]
fn five_nodes_find_each_other_by_gossip_peer_over_quic_and_converge() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    // bootstrapped in a line: each node knows only the next one's gossip address
    let (_stop, nodes) = start(&dir, &["--nodes", "5", "--topology", "line"]);
    let url = |i: usize| nodes.url(i);
    let ws = |i: usize| nodes.ws(i);
    let dids: Vec<&str> = nodes.0.iter().map(|n| n["did"].as_str().unwrap()).collect();
    // every node finds the four others by gossip and holds a QUIC link with each
    for i in 0..5 {
        wait_until(&format!("node {i} links with the four others"), || {
            let p = peers_of(&url(i));
            let peers = p["peers"].as_array().unwrap();
            peers.len() == 4
                && peers.iter().all(|x| {
                    x["link"] == "up"
                        && x["transport"] == "iroh"
                        && x["digest_match"] == true
                        && x["rounds_ok"].as_u64() > Some(0)
                })
        });
        let p = peers_of(&url(i));
        let mut found: Vec<&str> = p["peers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["did"].as_str().unwrap())
            .collect();
        found.sort_unstable();
        let mut others: Vec<&str> = dids.iter().copied().filter(|x| *x != dids[i]).collect();
        others.sort_unstable();
        assert_eq!(found, others, "node {i}");
    }
    // published at one end, then in the middle: every node holds both, nobody ran sync
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let (e4, e2) = (note(&keys, "from node 4"), note(&keys, "from node 2"));
    runtime().block_on(publish_all(&ws(4), std::slice::from_ref(&e4)));
    runtime().block_on(publish_all(&ws(2), std::slice::from_ref(&e2)));
    for i in 0..5 {
        wait_until(&format!("node {i} holds both events"), || {
            holds(&ws(i), &e4.id_hex()) && holds(&ws(i), &e2.id_hex())
        });
    }
    // heartbeats arrive; the human form names the transport
    wait_until("node 0 hears heartbeats", || {
        peers_of(&url(0))["peers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["last_heartbeat"].is_u64())
    });
    let o = run(&["peers", "--node", &url(0)]);
    assert_eq!(
        stdout(&o)
            .matches("transport=iroh (direct) digest=ours link=up")
            .count(),
        4,
        "{}",
        stdout(&o)
    );
    // garbage on the gossip topic is refused at the first node and counted against its sender
    let gossip = std::fs::read_to_string(dir.join("node-0").join(meshnode_config_file()))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("gossip_listen = ")
                .map(|v| v.trim_matches('"').to_owned())
        })
        .unwrap();
    let node0 = fleetmesh_proto::NodeKeys::load(&dir.join("node-0").join("keys")).unwrap();
    let boot = format!(
        "{gossip}/p2p/{}",
        fleetmesh_transport::gossip::peer_id_of(&node0.ed25519_public()).unwrap()
    );
    let rogue = fleetmesh_proto::NodeKeys::generate().unwrap();
    let rogue_id = fleetmesh_transport::gossip::peer_id_of(&rogue.ed25519_public())
        .unwrap()
        .to_string();
    // a runtime of its own, whose worker keeps the rogue's swarm going between calls
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (tx, _rx) = tokio::sync::mpsc::channel(16);
    let (g, _task) = rt
        .block_on(fleetmesh_transport::gossip::Gossip::start(
            &rogue.ed25519_secret(),
            &"/ip4/127.0.0.1/tcp/0".parse().unwrap(),
            vec![boot.parse().unwrap()],
            fleetmesh_schemas::SchemaSet::embedded().digest(),
            tx,
        ))
        .unwrap();
    wait_until("node 0 counts the rogue's garbage", || {
        rt.block_on(g.publish_bytes(b"{\"kind\": 11801, \"not\": \"an event\"}"));
        peers_of(&url(0))["gossip_refused"][&rogue_id]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    // … and not passed on: the other nodes never heard it
    for i in 1..5 {
        assert!(
            peers_of(&url(i))["gossip_refused"]
                .as_object()
                .unwrap()
                .is_empty(),
            "node {i}"
        );
    }
}

fn meshnode_config_file() -> &'static str {
    "meshnode.toml"
}

#[test]
fn a_node_killed_mid_federation_is_linked_again_when_it_returns_and_catches_up() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (_stop, nodes) = start(&dir, &["--nodes", "3", "--topology", "star"]);
    let url = |i: usize| nodes.url(i);
    let ws = |i: usize| nodes.ws(i);
    let key = |i: usize| nodes.key(i);
    let link_of = |i: usize, j: usize| {
        peers_of(&url(i))["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == key(j).as_str())
            .cloned()
            .unwrap_or(Value::Null)
    };
    wait_until("node 0 links with node 2", || link_of(0, 2)["link"] == "up");
    // node 2 dies without a word; node 0 takes an event meanwhile
    let pid = nodes.0[2]["pid"].as_u64().unwrap().to_string();
    assert!(
        Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let e = note(&keys, "while node 2 was down");
    runtime().block_on(publish_all(&ws(0), std::slice::from_ref(&e)));
    wait_until("node 0 sees the link to node 2 down", || {
        link_of(0, 2)["link"] == "down"
    });
    // it comes back on the same directory: dialled again (its heartbeat says it is alive),
    // and it catches up without anyone running sync
    let back = Command::new(env!("CARGO_BIN_EXE_meshnode"))
        .args(["run", dir.join("node-2").to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // killed on drop, also when an assertion below fails
    let _back = Daemon {
        child: back,
        addr: String::new(),
    };
    let addr = url(2).trim_start_matches("http://").to_owned();
    wait_until("node 2 listens again", || {
        std::net::TcpStream::connect(&addr).is_ok()
    });
    wait_until("node 2 holds the event", || holds(&ws(2), &e.id_hex()));
    wait_until("node 0 links with node 2 again", || {
        link_of(0, 2)["link"] == "up"
    });
}

#[test]
fn a_peering_manifest_bounds_what_a_link_carries_from_its_next_round() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (_stop, nodes) = start(&dir, &["--nodes", "2", "--interval-secs", "1"]);
    let url = |i: usize| nodes.url(i);
    let ws = |i: usize| nodes.ws(i);
    let key = |i: usize| nodes.key(i);
    let agree = |me: usize, other: usize, filter: Value| {
        let manifest = serde_json::json!({
            "apiVersion": "fleetmesh.org/v1alpha1",
            "kind": "Peering",
            "metadata": {"name": "the-other"},
            "spec": {"peer": key(other), "sync": {"intervalSecs": 1, "filters": [filter]}},
        });
        let file = tmp.path().join(format!("peering-{me}.json"));
        std::fs::write(&file, manifest.to_string()).unwrap();
        let node_dir = dir.join(format!("node-{me}"));
        let o = run(&[
            "apply",
            node_dir.to_str().unwrap(),
            "-f",
            file.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            stdout(&o).contains("follows it from its next round"),
            "{}",
            stdout(&o)
        );
    };
    // each node: with the other, only the shard tagged "a"
    for (me, other) in [(0, 1), (1, 0)] {
        agree(me, other, serde_json::json!({"kinds": [1], "#t": ["a"]}));
    }
    // at node 1: first an event of shard "b", then one of shard "a"; the "a" one crosses,
    // and by then the "b" one would have too, were it carried
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let tagged = |t: &str, text: &str| {
        keys.sign(fleetmesh_proto::UnsignedEvent {
            created_at: unix_now(),
            kind: 1,
            tags: vec![vec!["t".into(), t.into()]],
            content: text.into(),
        })
        .unwrap()
    };
    let (b, a) = (tagged("b", "shard b"), tagged("a", "shard a"));
    runtime().block_on(publish_all(&ws(1), std::slice::from_ref(&b)));
    runtime().block_on(publish_all(&ws(1), std::slice::from_ref(&a)));
    wait_until("node 0 holds the shard-a event", || {
        holds(&ws(0), &a.id_hex())
    });
    // one more round each way after it
    let rounds = |i: usize| {
        peers_of(&url(i))["peers"][0]["rounds_ok"]
            .as_u64()
            .unwrap_or(0)
    };
    let (r0, r1) = (rounds(0), rounds(1));
    wait_until("another round each way", || {
        rounds(0) > r0 && rounds(1) > r1
    });
    assert!(!holds(&ws(0), &b.id_hex()), "the shard-b event crossed");
    // node 1 widens its side to every shard; node 0 holds to the agreement: what node 1
    // pushes outside it is refused and counted against node 1, and nothing else is
    assert_eq!(peers_of(&url(0))["peers"][0]["traffic"]["out_of_filter"], 0);
    agree(1, 0, serde_json::json!({"kinds": [1]}));
    wait_until("node 0 refuses node 1's shard-b push", || {
        let t = &peers_of(&url(0))["peers"][0]["traffic"];
        t["out_of_filter"].as_u64().unwrap_or(0) >= 1
    });
    let p = &peers_of(&url(0))["peers"][0];
    assert_eq!(p["id"], key(1).as_str());
    let t = &p["traffic"];
    assert!(t["events_in"].as_u64().unwrap() >= 2, "{t}");
    assert!(t["bytes_in"].as_u64().unwrap() > 0, "{t}");
    for clean in ["malformed", "forged", "invalid", "rate_limited"] {
        assert_eq!(t[clean], 0, "{t}");
    }
    assert!(!holds(&ws(0), &b.id_hex()), "the shard-b event crossed");
}

/// `meshnode job submit FILE --via iroh --to TO` with the buyer's keys, the provider's
/// descriptor read at `relay`, the result's files to `out`.
fn submit_via_iroh(
    file: &Path,
    to: &str,
    buyer: &Path,
    relay: &str,
    out: &Path,
    more: &[&str],
) -> Output {
    let (file, buyer, out) = (
        file.to_str().unwrap(),
        buyer.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let mut args = vec![
        "job",
        "submit",
        file,
        "--to",
        to,
        "--key-dir",
        buyer,
        "--via",
        "iroh",
    ];
    args.extend(["--relay", relay, "--wait-secs", "60", "--out", out]);
    args.extend(more);
    run(&args)
}

#[test]
fn a_buyer_sends_a_job_over_a_quic_link_and_gets_its_answer_back_on_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (_stop, nodes) = start(&dir, &["--nodes", "1"]);
    let buyer = tmp.path().join("buyer");
    assert!(init(&buyer, &[]).status.success());
    let buyer_key = fleetmesh_proto::NodeKeys::load(&buyer.join("keys"))
        .unwrap()
        .nostr_pubkey_hex();
    let file = upper_job(tmp.path(), "over a peer link", "linked-1");
    let out = tmp.path().join("out");
    let submit = |to: &str, relay: &str| submit_via_iroh(&file, to, &buyer, relay, &out, &[]);
    let o = submit(&nodes.key(0), &nodes.ws(0));
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains(" at iroh://127.0.0.1:"),
        "{}",
        stderr(&o)
    );
    let answer: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(answer["job"]["state"], "verified", "{answer}");
    assert_eq!(answer["receipt"]["pubkey"], nodes.key(0).as_str());
    assert_eq!(
        std::fs::read_to_string(out.join("stdout")).unwrap(),
        "OVER A PEER LINK"
    );
    // the node saw the buyer dial in as a leaf, and counted what it sent
    let p = peers_of(&nodes.url(0));
    let b = p["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == buyer_key.as_str())
        .unwrap_or_else(|| panic!("the buyer is not among the peers: {p}"));
    assert_eq!(
        (&b["link"], &b["class"]),
        (&Value::from("inbound"), &Value::from("leaf"))
    );
    assert!(b["traffic"]["bytes_in"].as_u64().unwrap() > 0, "{b}");
    assert!(b["traffic"]["bytes_out"].as_u64().unwrap() > 0, "{b}");
    // a node whose descriptor names no iroh endpoint is refused, saying so
    let plain = tempfile::tempdir().unwrap();
    assert!(init(plain.path(), &[]).status.success());
    let d = run_node(plain.path());
    let plain_key = fleetmesh_proto::NodeKeys::load(&plain.path().join("keys"))
        .unwrap()
        .nostr_pubkey_hex();
    let o = submit(&plain_key, &format!("ws://{}/", d.addr));
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("names no iroh endpoint"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_cluster_with_its_own_iroh_relay_starts_again_in_its_directory() {
    // each start (and each retry on other ports after a lost port) makes the relay a new
    // certificate and key; the key of the last one is replaced, not refused
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let args = ["--nodes", "2", "--iroh-relay"];
    let (stop, _) = start(&dir, &args);
    drop(stop);
    let (_stop, nodes) = start(&dir, &args);
    assert_eq!(nodes.len(), 2);
}

#[test]
fn nodes_without_a_reachable_address_peer_through_the_clusters_own_iroh_relay() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (_stop, nodes) = start(
        &dir,
        &[
            "--nodes",
            "3",
            "--topology",
            "star",
            "--iroh-relay",
            "--interval-secs",
            "1",
        ],
    );
    // nodes 1 and 2 advertise no address, only node 0's relay: they find each other by
    // gossip and link through it
    let peer = |i: usize, j: usize| {
        let p = peers_of(&nodes.url(i));
        p["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == nodes.key(j).as_str())
            .cloned()
            .unwrap_or(Value::Null)
    };
    wait_until("node 1 links with node 2 through the relay", || {
        peer(1, 2)["link"] == "up"
    });
    let two = peer(1, 2);
    let addrs: Vec<&str> = two["addrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(addrs.len(), 1, "{two}");
    assert!(addrs[0].starts_with("via https://127.0.0.1:"), "{two}");
    assert_eq!(two["transport"], "iroh");
    // and iroh punched a direct path from there (on loopback nothing is in the way)
    wait_until("node 1's link with node 2 goes direct", || {
        peer(1, 2)["path"] == "direct"
    });
    // node 0, the relay's host, is reached directly: an address and its relay
    let zero = peer(1, 0);
    assert_eq!(zero["addrs"].as_array().unwrap().len(), 2, "{zero}");
    // an event published at node 2 reaches node 1
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let e = note(&keys, "from behind the relay");
    runtime().block_on(publish_all(&nodes.ws(2), std::slice::from_ref(&e)));
    wait_until("node 1 holds node 2's event", || {
        holds(&nodes.ws(1), &e.id_hex())
    });
    // a buyer reaches node 1 (no address) through the relay, once the relay knows it: the
    // relay serves the federation's nodes only
    let buyer = tmp.path().join("buyer");
    assert!(init(&buyer, &[]).status.success());
    let file = upper_job(tmp.path(), "through the relay", "relayed-1");
    let ca = dir.join("iroh-relay-ca.pem");
    let submit = |to: &str, name: &str| {
        let out = tmp.path().join(name);
        let ca = ["--iroh-relay-ca", ca.to_str().unwrap()];
        (
            submit_via_iroh(&file, to, &buyer, &nodes.ws(0), &out, &ca),
            out,
        )
    };
    let (o, _) = submit(&nodes.key(1), "stranger");
    assert!(!o.status.success(), "a stranger went through the relay");
    assert!(
        stderr(&o).contains("turns away keys it does not know"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("ERROR"), "{}", stderr(&o));
    // the buyer peers with node 0 directly (its address is public): now a known node
    let (o, _) = submit(&nodes.key(0), "direct");
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    let (o, out) = submit(&nodes.key(1), "relayed");
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    assert!(
        stderr(&o).contains(" at iroh via https://127.0.0.1:"),
        "{}",
        stderr(&o)
    );
    let answer: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(answer["receipt"]["pubkey"], nodes.key(1).as_str());
    assert_eq!(
        std::fs::read_to_string(out.join("stdout")).unwrap(),
        "THROUGH THE RELAY"
    );
    // the relay settings are checked at start-up: a relay server without its key
    let node = tempfile::tempdir().unwrap();
    assert!(init(node.path(), &[]).status.success());
    edit_config(
        node.path(),
        &[(
            "peers = []\n",
            "iroh_relay_listen = \"127.0.0.1:0\"\niroh_relay_cert = \"/nonexistent.pem\"\npeers = []\n",
        )],
    );
    let o = run(&["run", node.path().to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("iroh_relay_listen, iroh_relay_cert and iroh_relay_key go together"),
        "{}",
        stderr(&o)
    );
}
