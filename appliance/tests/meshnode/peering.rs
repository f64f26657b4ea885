//! Peering over the relay faces: a node with `[[peering.peers]]` reconciles its store with
//! each peer on its schedule, both ways, without anyone running `sync`; a peer that does
//! not answer is retried and counted, and the node keeps serving.

use super::*;

fn peered_node(peers: &[String], interval: u64) -> (tempfile::TempDir, Daemon) {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let mut table = String::new();
    for url in peers {
        table.push_str(&format!("\n[[peering.peers]]\nurl = \"{url}\"\n"));
    }
    let interval = format!("[peering]\ninterval_secs = {interval}\n");
    edit_config(
        dir.path(),
        &[
            ("[peering]\ninterval_secs = 30\n", &interval),
            ("peers = []\n", &table),
        ],
    );
    let d = run_node(dir.path());
    (dir, d)
}

/// Whether the relay at `url` holds the event `id`.
pub(crate) fn holds(url: &str, id: &str) -> bool {
    !runtime()
        .block_on(req_events(url, serde_json::json!({"ids": [id]})))
        .is_empty()
}

/// Waits up to 30 s for `done`.
pub(crate) fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what} within 30 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A kind-1 note by `keys`, now.
pub(crate) fn note(keys: &fleetmesh_proto::NodeKeys, text: &str) -> fleetmesh_proto::Event {
    let now = unix_now();
    keys.sign(fleetmesh_proto::UnsignedEvent {
        created_at: now,
        kind: 1,
        tags: vec![],
        content: text.into(),
    })
    .unwrap()
}

#[test]
fn a_peered_node_converges_with_its_peer_both_ways_on_its_schedule() {
    let (_b_dir, b) = peered_node(&[], 30);
    let b_url = format!("ws://{}/", b.addr);
    // a peer that is not there: its rounds fail and are counted, the others go on
    let gone = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (_a_dir, a) = peered_node(&[b_url.clone(), format!("ws://{gone}/")], 1);
    let a_url = format!("ws://{}/", a.addr);
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let (on_b, on_a) = (note(&keys, "published on b"), note(&keys, "published on a"));
    runtime().block_on(publish_all(&b_url, std::slice::from_ref(&on_b)));
    runtime().block_on(publish_all(&a_url, std::slice::from_ref(&on_a)));
    wait_until("b's event on a", || holds(&a_url, &on_b.id_hex()));
    wait_until("a's event on b", || holds(&b_url, &on_a.id_hex()));
    let scrape = a.scrape();
    let b_fetched = scrape.value(
        "fleetmesh_peering_events_total",
        &[("peer", b_url.as_str()), ("direction", "fetched")],
    );
    assert!(b_fetched.unwrap_or(0.0) >= 1.0, "{}", scrape.text);
    let b_bytes = scrape.value("fleetmesh_peering_bytes_total", &[("peer", b_url.as_str())]);
    assert!(b_bytes.unwrap_or(0.0) > 0.0, "{}", scrape.text);
    let failed = scrape.value(
        "fleetmesh_peering_rounds_total",
        &[
            ("peer", format!("ws://{gone}/").as_str()),
            ("outcome", "failed"),
        ],
    );
    assert!(failed.unwrap_or(0.0) >= 1.0, "{}", scrape.text);
    assert!(holds(&a_url, &on_a.id_hex()));
}

#[test]
fn peering_settings_are_checked_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    edit_config(
        dir.path(),
        &[(
            "peers = []\n",
            "\n[[peering.peers]]\nurl = \"http://x.example/\"\n",
        )],
    );
    let o = run(&[
        "run",
        dir.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_usage_error(&o, "a ws:// or wss:// URL");
    edit_config(
        dir.path(),
        &[(
            "url = \"http://x.example/\"\n",
            "url = \"ws://x.example/\"\nfilter = '{\"kinds\": \"one\"}'\n",
        )],
    );
    let o = run(&[
        "run",
        dir.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_usage_error(&o, "filter");
    // a peer's CA file that is missing, or holds no certificate
    let ca = dir.path().join("ca.pem");
    edit_config(
        dir.path(),
        &[(
            "filter = '{\"kinds\": \"one\"}'\n",
            &format!("ca = {:?}\n", ca.display().to_string()),
        )],
    );
    let start = || {
        run(&[
            "run",
            dir.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
    };
    assert_usage_error(&start(), "ca.pem: No such file");
    std::fs::write(&ca, "not a certificate").unwrap();
    assert_usage_error(&start(), "no PEM certificate in it");
    std::fs::remove_file(&ca).unwrap();
    let ca_line = format!("ca = {:?}\n", ca.display().to_string());
    // the federation transports: a bootstrap address without its peer id, a gossip address
    // that is not a multiaddr, a bootstrap without a gossip listener, a heartbeat out of
    // range, bad iroh relay settings
    for (edit, says) in [
        (
            "bootstrap = [\"/ip4/127.0.0.1/tcp/7779\"]\n",
            "ending in /p2p/<peer id>",
        ),
        (
            "gossip_listen = \"127.0.0.1:7779\"\n",
            "[peering] gossip_listen",
        ),
        (
            "bootstrap = [\"/ip4/127.0.0.1/tcp/7779/p2p/12D3KooWGH745UaxcaKXrjvJNTj4HeKP6nuzehWjB73eCuoThtRR\"]\n",
            "bootstrap needs gossip_listen",
        ),
        ("heartbeat_secs = 0\n", "[peering] heartbeat_secs = 0"),
        // iroh relays: not https, no QUIC endpoint to home, a CA file that is not there
        (
            "iroh_relays = [\"http://relay.example/\"]\n",
            "an https:// URL of an iroh relay server",
        ),
        (
            "iroh_relays = [\"https://relay.example/\"]\n",
            "iroh_relays needs quic_listen",
        ),
        (
            "iroh_relay_ca = \"/nonexistent/relay-ca.pem\"\n",
            "[peering] iroh_relay_ca = /nonexistent/relay-ca.pem",
        ),
        // a relay server open to anyone without a relay server; one for the federation's
        // nodes without the gossip it learns them on
        (
            "iroh_relay_open = true\n",
            "iroh_relay_open needs iroh_relay_listen",
        ),
        (
            "iroh_relay_listen = \"127.0.0.1:0\"\niroh_relay_cert = \"/r.pem\"\niroh_relay_key = \"/r.pem\"\n",
            "learns them on the gossip, so it needs gossip_listen",
        ),
        ("max_peers = 0\n", "[peering] max_peers = 0"),
        (
            "peer_events_per_second = 0\n",
            "[peering] peer_events_per_second = 0",
        ),
    ] {
        let key = edit.split(" = ").next().unwrap();
        let text = std::fs::read_to_string(dir.path().join("meshnode.toml")).unwrap();
        let text = text
            .replace(&ca_line, "")
            .lines()
            .filter(|l| !l.starts_with(&format!("{key} = ")))
            .collect::<Vec<_>>()
            .join("\n")
            .replacen("[peering]\n", &format!("[peering]\n{edit}"), 1);
        std::fs::write(dir.path().join("meshnode.toml"), text + "\n").unwrap();
        assert_usage_error(&start(), says);
        // put the default back
        let text = std::fs::read_to_string(dir.path().join("meshnode.toml")).unwrap();
        std::fs::write(dir.path().join("meshnode.toml"), text.replace(edit, "")).unwrap();
    }
    // and so are [didcomm]'s: a mediator without its URL, and no QUIC link to reach it by
    let mediator = format!("[didcomm]\nmediator = \"did:nostr:{}\"\n", "ab".repeat(32));
    edit_config(dir.path(), &[("[didcomm]\n", mediator.as_str())]);
    let o = run(&[
        "run",
        dir.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_usage_error(&o, "is reached over a QUIC link");
}

#[test]
fn a_wss_peer_is_reached_with_the_ca_its_entry_names_and_refused_without_it() {
    let (_b_dir, b) = peered_node(&[], 30);
    let b_url = format!("ws://{}/", b.addr);
    // b behind TLS with a certificate from a CA of its own (the runtime's worker keeps the
    // front going)
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (wss, ca_pem, _front) = rt.block_on(fleetmesh_relay::testing::tls_front(&b_url));
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let ca = dir.path().join("peer-ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    // the same relay twice: by address with the CA, by name without it
    let by_name = wss.replace("127.0.0.1", "localhost");
    let peers = format!(
        "\n[[peering.peers]]\nurl = \"{wss}\"\nca = {:?}\n\n[[peering.peers]]\nurl = \"{by_name}\"\n",
        ca.display().to_string()
    );
    edit_config(
        dir.path(),
        &[
            (
                "[peering]\ninterval_secs = 30\n",
                "[peering]\ninterval_secs = 1\n",
            ),
            ("peers = []\n", &peers),
        ],
    );
    let a = run_node(dir.path());
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let e = note(&keys, "behind TLS");
    runtime().block_on(publish_all(&b_url, std::slice::from_ref(&e)));
    let a_url = format!("ws://{}/", a.addr);
    wait_until("b's event on a over wss", || holds(&a_url, &e.id_hex()));
    let view = |url: &str| {
        super::cluster::peers_of(&format!("http://{}", a.addr))["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == url)
            .cloned()
            .unwrap()
    };
    // the round stores what it fetched before it records itself: the event can be
    // readable a moment before the link reads up
    wait_until("the entry with the CA reads up", || {
        view(&wss)["link"] == "up"
    });
    let with_ca = view(&wss);
    assert_eq!(
        (&with_ca["transport"], &with_ca["link"]),
        (&serde_json::json!("wss"), &serde_json::json!("up")),
        "{with_ca}"
    );
    wait_until("the entry without the CA fails", || {
        view(&by_name)["rounds_failed"].as_u64() > Some(0)
    });
    let without = view(&by_name);
    assert_eq!(without["link"], "down", "{without}");
    assert!(
        without["last_error"]
            .as_str()
            .unwrap()
            .contains("certificate"),
        "{without}"
    );
}

#[test]
fn bridge_sync_pages_a_relay_by_req_from_a_given_time_and_pushes_back() {
    let (_b_dir, b) = peered_node(&[], 30);
    let b_url = format!("ws://{}/", b.addr);
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let now = unix_now();
    let sign = |at: u64, text: &str| {
        keys.sign(fleetmesh_proto::UnsignedEvent {
            created_at: at,
            kind: 1,
            tags: vec![],
            content: text.into(),
        })
        .unwrap()
    };
    let (old, new) = (
        sign(now - 3 * 86_400, "three days ago"),
        sign(now - 60, "a minute ago"),
    );
    runtime().block_on(publish_all(&b_url, &[old.clone(), new.clone()]));
    let a = tempfile::tempdir().unwrap();
    assert!(init(a.path(), &[]).status.success());
    let a_dir = a.path().to_str().unwrap();
    // `meshnode bridge sync A --relay B --filter {kinds: [1]} EXTRA…`
    let bridge = |extra: &[&str]| {
        let mut args = vec![
            "bridge",
            "sync",
            a_dir,
            "--relay",
            &b_url,
            "--filter",
            "{\"kinds\": [1]}",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    // REQ pages only, since a day ago: the new event comes, the old one does not
    let o = bridge(&["--via", "req", "--since", "1d"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("sync: by req"), "{}", stderr(&o));
    let d = run_node(a.path());
    let a_url = format!("ws://{}/", d.addr);
    assert!(holds(&a_url, &new.id_hex()));
    assert!(!holds(&a_url, &old.id_hex()));
    drop(d);
    // auto against a fleetmesh relay: NIP-77 finds the old one missing here
    let o = bridge(&[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("sync: by nip77"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("fetched 1 of 1 missing here"),
        "{}",
        stdout(&o)
    );
    // bad input
    let o = bridge(&["--since", "yesterday"]);
    assert_usage_error(&o, "--since \"yesterday\"");
}

#[test]
fn a_leaf_node_keeps_a_bounded_cache_of_others_events_and_all_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &["--class", "leaf"]).status.success());
    edit_config(
        dir.path(),
        &[
            (
                "[peering]\ninterval_secs = 30\n",
                "[peering]\ninterval_secs = 1\n",
            ),
            ("leaf_cache_events = 100000\n", "leaf_cache_events = 10\n"),
        ],
    );
    let d = run_node(dir.path());
    let url = format!("ws://{}/", d.addr);
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let now = unix_now();
    let notes: Vec<_> = (0..25u64)
        .map(|i| {
            keys.sign(fleetmesh_proto::UnsignedEvent {
                created_at: now - 100 + i,
                kind: 1,
                tags: vec![],
                content: format!("note {i}"),
            })
            .unwrap()
        })
        .collect();
    runtime().block_on(publish_all(&url, &notes));
    let held = || runtime().block_on(req_events(&url, serde_json::json!({"kinds": [1]})));
    wait_until("the cache is down to 10", || held().len() == 10);
    let mut kept: Vec<String> = held()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect();
    kept.sort_unstable();
    let mut newest: Vec<String> = notes[15..].iter().map(|e| e.id_hex()).collect();
    newest.sort_unstable();
    assert_eq!(kept, newest);
    // its own descriptor stays, and did not count among the ten
    let own = runtime().block_on(req_events(&url, serde_json::json!({"kinds": [11801]})));
    assert_eq!(own.len(), 1);
}

#[test]
fn gossip_strangers_past_max_peers_are_listed_but_not_dialled() {
    use fleetmesh_proto::identity::{DescriptorInfo, Software};
    let free = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let gossip_port = free();
    let peering = format!(
        "[peering]\ninterval_secs = 1\nquic_listen = \"127.0.0.1:0\"\n\
         gossip_listen = \"/ip4/127.0.0.1/tcp/{gossip_port}\"\n"
    );
    let node = tempfile::tempdir().unwrap();
    assert!(init(node.path(), &[]).status.success());
    edit_config(
        node.path(),
        &[
            ("[peering]\ninterval_secs = 30\n", peering.as_str()),
            ("max_peers = 256", "max_peers = 1"),
        ],
    );
    let d = run_node(node.path());
    let keys = fleetmesh_proto::NodeKeys::load(&node.path().join("keys")).unwrap();
    let boot = format!(
        "/ip4/127.0.0.1/tcp/{gossip_port}/p2p/{}",
        fleetmesh_transport::gossip::peer_id_of(&keys.ed25519_public()).unwrap()
    );
    // two strangers, each on its own swarm, announce descriptors with an iroh address
    // where nobody answers
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let digest = fleetmesh_schemas::SchemaSet::embedded().digest();
    let strangers: Vec<_> = (0..2)
        .map(|_| {
            let k = fleetmesh_proto::NodeKeys::generate().unwrap();
            let (tx, rx) = tokio::sync::mpsc::channel(16);
            let (g, task) = rt
                .block_on(fleetmesh_transport::gossip::Gossip::start(
                    &k.ed25519_secret(),
                    &"/ip4/127.0.0.1/tcp/0".parse().unwrap(),
                    vec![boot.parse().unwrap()],
                    digest,
                    tx,
                ))
                .unwrap();
            let info = DescriptorInfo {
                software: Software {
                    name: "stranger".into(),
                    version: "0".into(),
                },
                class: fleetmesh_proto::NodeClass::Edge,
                operator: None,
                relays: vec![],
                endpoints: vec!["iroh=127.0.0.1:9".parse().unwrap()],
                protocol_digest: digest.to_hex(),
                predecessor: None,
            };
            let event = k.descriptor(&info, fleetmesh_proto::unix_now()).unwrap();
            (k, g, task, rx, event)
        })
        .collect();
    let listed = |key: &str| {
        super::cluster::peers_of(&d.url(""))["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == key)
            .cloned()
    };
    wait_until("both strangers are heard, one past max_peers", || {
        for (_, g, _, _, event) in &strangers {
            rt.block_on(g.announce(event));
        }
        strangers
            .iter()
            .all(|(k, ..)| listed(&k.nostr_pubkey_hex()).is_some())
            && d.scrape()
                .value(
                    "fleetmesh_gossip_messages_total",
                    &[("outcome", "over_max_peers")],
                )
                .unwrap_or(0.0)
                >= 1.0
    });
    // exactly one is dialled (its failed dials are on record), the other never was
    wait_until("the dialled stranger's dial fails", || {
        strangers.iter().any(|(k, ..)| {
            listed(&k.nostr_pubkey_hex()).is_some_and(|p| p["rounds_failed"].as_u64() > Some(0))
        })
    });
    let dialled = strangers
        .iter()
        .filter(|(k, ..)| {
            listed(&k.nostr_pubkey_hex()).is_some_and(|p| p["last_error"].is_string())
        })
        .count();
    assert_eq!(dialled, 1);
}

/// A new node of `class` holding the shards of `tables` (`[[peering.shards]]` bodies), its
/// rounds every second.
fn shard_node(class: &str, tables: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    assert!(init(dir.path(), &[]).status.success());
    let class = format!("class = \"{class}\"");
    edit_config(
        dir.path(),
        &[
            ("class = \"edge\"", class.as_str()),
            (
                "[peering]\ninterval_secs = 30\n",
                "[peering]\ninterval_secs = 1\n",
            ),
            ("\nshards = []\n", "\n"),
        ],
    );
    let path = dir.path().join("meshnode.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for t in tables {
        text.push_str(&format!("\n[[peering.shards]]\n{t}"));
    }
    std::fs::write(&path, text).unwrap();
    dir
}

/// `meshnode shards --node URL --json`: the shard called `id`, when listed.
fn shard_seen(url: &str, id: &str) -> Option<Value> {
    let o = run(&["shards", "--node", url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    v["shards"]
        .as_array()?
        .iter()
        .find(|s| s["id"] == id)
        .cloned()
}

#[test]
fn a_community_node_publishes_its_shards_and_a_peer_checks_its_copy_against_them() {
    use sha2::{Digest as _, Sha256};
    let a_dir = shard_node("community", &["id = \"notes\"\nkinds = [1]\n"]);
    let a = run_node(a_dir.path());
    let a_key = fleetmesh_proto::NodeKeys::load(&a_dir.path().join("keys"))
        .unwrap()
        .nostr_pubkey_hex();
    let a_ws = format!("ws://{}/", a.addr);
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let mut notes: Vec<_> = (0..3).map(|i| note(&keys, &format!("note {i}"))).collect();
    let reaction = keys
        .sign(fleetmesh_proto::event::UnsignedEvent {
            created_at: fleetmesh_proto::unix_now(),
            kind: 7,
            tags: vec![],
            content: "+".into(),
        })
        .unwrap();
    runtime().block_on(publish_all(&a_ws, &notes));
    runtime().block_on(publish_all(&a_ws, std::slice::from_ref(&reaction)));
    // the digest as kind 30803 defines it, computed here: SHA-256 over the ids, sorted by
    // (created_at, id)
    let digest = |events: &mut Vec<fleetmesh_proto::Event>| {
        events.sort_by_key(|e| (e.created_at, e.id));
        let mut h = Sha256::new();
        for e in events.iter() {
            h.update(e.id);
        }
        hex::encode(h.finalize())
    };
    let want = digest(&mut notes);
    wait_until("the community node publishes its shard", || {
        shard_seen(&a.url(""), "notes").is_some_and(|s| s["digest"] == want.as_str())
    });
    let s = shard_seen(&a.url(""), "notes").unwrap();
    assert_eq!(s["event_count"], 3, "{s}");
    assert_eq!(s["holder"], a_key.as_str());
    assert_eq!(
        (&s["class"], &s["authoritative"]),
        (&serde_json::json!("community"), &serde_json::json!(true))
    );
    assert_eq!(s["copy"]["state"], "ours", "{s}");
    // an edge node syncing with it finds the shard and checks its own copy against it
    let (_b_dir, b) = peered_node(std::slice::from_ref(&a_ws), 1);
    wait_until("the peer's copy is in sync", || {
        shard_seen(&b.url(""), "notes").is_some_and(|s| s["copy"]["state"] == "in sync")
    });
    // a new note: the holder publishes the shard again, and the peer follows
    let fourth = note(&keys, "note 3");
    runtime().block_on(publish_all(&a_ws, std::slice::from_ref(&fourth)));
    notes.push(fourth);
    let want = digest(&mut notes);
    wait_until("the peer is in sync with four notes", || {
        shard_seen(&b.url(""), "notes").is_some_and(|s| {
            s["digest"] == want.as_str()
                && s["copy"]["state"] == "in sync"
                && s["copy"]["event_count"] == 4
        })
    });
    let o = run(&["shards", "--node", &b.url("")]);
    assert!(
        stdout(&o).contains(&format!(
            "notes held by {a_key} (community, authoritative): 4 events"
        )) && stdout(&o).contains("ours: in sync (4 events)"),
        "{}",
        stdout(&o)
    );
    // a node holding the shard descriptor but not the notes is behind; one holding as many
    // other notes differs; without the holder's node descriptor, its class is unknown
    let descriptor = fleetmesh_proto::Event::from_json(
        &runtime()
            .block_on(req_events(
                &a_ws,
                serde_json::json!({"kinds": [30803], "authors": [a_key]}),
            ))
            .remove(0)
            .to_string(),
    )
    .unwrap();
    let c_dir = tempfile::tempdir().unwrap();
    assert!(init(c_dir.path(), &[]).status.success());
    let c = run_node(c_dir.path());
    let c_ws = format!("ws://{}/", c.addr);
    runtime().block_on(publish_all(&c_ws, std::slice::from_ref(&descriptor)));
    let s = shard_seen(&c.url(""), "notes").unwrap();
    assert_eq!(
        (&s["copy"]["state"], &s["copy"]["event_count"]),
        (&serde_json::json!("behind"), &serde_json::json!(0)),
        "{s}"
    );
    assert_eq!(
        (&s["class"], &s["authoritative"]),
        (&Value::Null, &serde_json::json!(false))
    );
    let others: Vec<_> = (0..4).map(|i| note(&keys, &format!("other {i}"))).collect();
    runtime().block_on(publish_all(&c_ws, &others));
    let s = shard_seen(&c.url(""), "notes").unwrap();
    assert_eq!(s["copy"]["state"], "differs", "{s}");
    // only a community node holds shards, and they are checked at start-up
    for (class, table, says) in [
        (
            "edge",
            "id = \"notes\"\nkinds = [1]\n",
            "only a community node holds authoritative shards",
        ),
        (
            "community",
            "id = \"Notes\"\nkinds = [1]\n",
            "lowercase letters",
        ),
        ("community", "id = \"s\"\nkinds = [30803]\n", "not 30803"),
        ("community", "id = \"s\"\nkinds = []\n", "at least one kind"),
        (
            "community",
            "id = \"s\"\nkinds = [1]\nsince = 9\nuntil = 3\n",
            "since = 9 is after until = 3",
        ),
    ] {
        let dir = shard_node(class, &[table]);
        assert_usage_error(
            &run(&[
                "run",
                dir.path().to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ]),
            says,
        );
    }
}

#[test]
fn a_peer_whose_quic_cannot_be_reached_is_synced_over_its_relay_face() {
    let port = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (face, gossip) = (port(), port());
    // b advertises an iroh address where nothing answers (its UDP "blocked") and its
    // relay face
    let b_dir = tempfile::tempdir().unwrap();
    let ws = format!("ws=ws://127.0.0.1:{face}/");
    assert!(
        init(
            b_dir.path(),
            &["--endpoint", "iroh=127.0.0.1:9", "--endpoint", &ws]
        )
        .status
        .success()
    );
    let b_peering = format!(
        "[peering]\ninterval_secs = 1\nquic_listen = \"127.0.0.1:0\"\n\
         gossip_listen = \"/ip4/127.0.0.1/tcp/{gossip}\"\n"
    );
    edit_config(
        b_dir.path(),
        &[("[peering]\ninterval_secs = 30\n", b_peering.as_str())],
    );
    let mut cmd = meshnode();
    let listen = format!("127.0.0.1:{face}");
    cmd.args(["run", b_dir.path().to_str().unwrap(), "--listen", &listen]);
    let _b = Daemon::start(cmd);
    let b_keys = fleetmesh_proto::NodeKeys::load(&b_dir.path().join("keys")).unwrap();
    let boot = format!(
        "/ip4/127.0.0.1/tcp/{gossip}/p2p/{}",
        fleetmesh_transport::gossip::peer_id_of(&b_keys.ed25519_public()).unwrap()
    );
    // a finds b by gossip, cannot link over QUIC, and runs its rounds over b's face
    let a_peering = format!(
        "[peering]\ninterval_secs = 1\nquic_listen = \"127.0.0.1:0\"\n\
         gossip_listen = \"/ip4/127.0.0.1/tcp/0\"\nbootstrap = [\"{boot}\"]\n"
    );
    let (_a_dir, a) = {
        let dir = tempfile::tempdir().unwrap();
        assert!(init(dir.path(), &[]).status.success());
        edit_config(
            dir.path(),
            &[(
                "[peering]\ninterval_secs = 30\nbootstrap = []\n",
                a_peering.as_str(),
            )],
        );
        let d = run_node(dir.path());
        (dir, d)
    };
    let b_key = b_keys.nostr_pubkey_hex();
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let e = note(&keys, "over the face");
    runtime().block_on(publish_all(
        &format!("ws://{listen}/"),
        std::slice::from_ref(&e),
    ));
    wait_until("a syncs with b over its relay face", || {
        super::cluster::peers_of(&a.url(""))["peers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| {
                p["id"] == b_key.as_str()
                    && p["transport"] == "ws"
                    && p["link"] == "up"
                    && p["rounds_ok"].as_u64() > Some(0)
            })
    });
    wait_until("a holds b's event", || {
        holds(&format!("ws://{}/", a.addr), &e.id_hex())
    });
}
