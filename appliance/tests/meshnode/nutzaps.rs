//! Nutzaps (NIP-61) end to end against a real mint (nutshell): a node publishes its kind
//! 10019, a buyer nutzaps it with `meshnode settle nutzap`, the node redeems the proofs into
//! its wallet once, records the redemption (kind 7376), and refuses what is not its to
//! take.

use fleetmesh_proto::{NodeKeys, UnsignedEvent};
use serde_json::{Value, json};

use super::wallet::{Mint, balance, nutshell, ok, wallet};
use super::{run, runtime, stderr, stdout};

/// `meshnode settle nutzap ARGS`.
fn nutzap(args: &[&str]) -> std::process::Output {
    let mut all = vec!["settle", "nutzap"];
    all.extend_from_slice(args);
    run(&all)
}

/// The node's `fleetmesh_nutzaps_total{outcome}` (0 when absent).
fn counted(node: &super::Daemon, outcome: &str) -> u64 {
    let text = reqwest::blocking::get(node.url("/metrics"))
        .unwrap()
        .text()
        .unwrap();
    let series = format!("fleetmesh_nutzaps_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[test]
fn a_node_redeems_nutzaps_sent_to_it_at_a_real_mint_once_and_refuses_what_is_not_its_own() {
    let Some(bin) = nutshell("the nutzap test") else {
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (mint, other) = (Mint::start(&bin), Mint::start(&bin));
    let home = tempfile::tempdir().unwrap();
    let (provider, buyer) = (home.path().join("provider"), home.path().join("buyer"));
    assert!(super::init(&provider, &[]).status.success());
    assert!(super::init(&buyer, &[]).status.success());
    // nutzaps need a mint to take them at: refused at start-up without one
    super::edit_config(&provider, &[("nutzaps = false", "nutzaps = true")]);
    let o = run(&["run", provider.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert!(
        stderr(&o).contains("nutzaps = true needs a mint"),
        "{}",
        stderr(&o)
    );
    super::edit_config(
        &provider,
        &[("mints = []", &format!("mints = [\"{}\"]", mint.url))],
    );
    for (m, sats) in [(&mint.url, "40"), (&other.url, "16")] {
        ok(
            wallet(&buyer, &["--mint", m, "mint", "--amount", sats]),
            "fund the buyer",
        );
    }
    let node = super::run_node(&provider);
    let me = runtime().block_on(super::nip11(&node))["self"]
        .as_str()
        .unwrap()
        .to_owned();
    let relay = node.url("/").replace("http://", "ws://");

    // the node's kind 10019: its mint, and a key to lock to that is not its Nostr key
    let infos = runtime().block_on(super::req_events(
        &relay,
        json!({"kinds": [10019], "authors": [me]}),
    ));
    assert_eq!(infos.len(), 1, "{infos:?}");
    let tags = infos[0]["tags"].as_array().unwrap();
    let tag = |name: &str| {
        tags.iter()
            .find(|t| t[0] == name)
            .unwrap_or_else(|| panic!("no {name} tag: {tags:?}"))
            .clone()
    };
    assert_eq!(tag("mint"), json!(["mint", mint.url, "sat"]));
    let p2pk = tag("pubkey")[1].as_str().unwrap().to_owned();
    assert_eq!(p2pk.len(), 64);
    assert_ne!(p2pk, me, "NIP-61: never the recipient's Nostr key");

    // a mint the node does not list: refused by the sender before anything is locked
    let node_url = node.url("");
    let key_dir = buyer.to_str().unwrap();
    let base = ["--to", &me, "--node", &node_url, "--key-dir", key_dir];
    let mut args = base.to_vec();
    args.extend(["--amount", "5", "--mint", &other.url]);
    let o = nutzap(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("takes nutzaps at"), "{}", stderr(&o));
    assert_eq!(
        balance(&buyer, &other.url).0,
        16,
        "nothing left the other mint"
    );

    // a nutzap of 5 sat: published, redeemed by the node into its wallet (less the mint's
    // input fee), recorded as a kind 7376 naming it
    let mut args = base.to_vec();
    args.extend(["--amount", "5", "--mint", &mint.url, "--comment", "thanks"]);
    let o = nutzap(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let sent: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let id = sent["event"].as_str().unwrap().to_owned();
    super::market::wait_for("the node redeems the nutzap", || {
        balance(&provider, &mint.url).0 > 0
    });
    let got = balance(&provider, &mint.url).0;
    assert!((4..=5).contains(&got), "5 sat less the input fee: {got}");
    let zaps = runtime().block_on(super::req_events(
        &relay,
        json!({"kinds": [9321], "#p": [me]}),
    ));
    assert_eq!(zaps.len(), 1, "{zaps:?}");
    assert_eq!(zaps[0]["content"], "thanks");
    let proof_tags = zaps[0]["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t[0] == "proof")
        .count();
    assert!(proof_tags >= 2, "5 sat is at least two proofs: {zaps:?}");
    let records = runtime().block_on(super::req_events(
        &relay,
        json!({"kinds": [7376], "authors": [me], "#e": [id]}),
    ));
    assert_eq!(records.len(), 1, "{records:?}");

    // a nutzap whose proofs do not parse: refused, nothing taken
    let stranger = NodeKeys::generate().unwrap();
    let junk = stranger
        .sign(UnsignedEvent {
            created_at: super::unix_now(),
            kind: 9321,
            tags: vec![
                vec!["proof".into(), "{\"amount\": 1}".into()],
                vec!["u".into(), mint.url.clone()],
                vec!["p".into(), me.clone()],
            ],
            content: String::new(),
        })
        .unwrap();
    runtime().block_on(super::publish_all(&relay, &[junk]));
    super::market::wait_for("the junk nutzap is refused", || {
        counted(&node, "refused") == 1
    });
    assert_eq!(counted(&node, "redeemed"), 1);
    assert_eq!(balance(&provider, &mint.url).0, got);

    // a restarted node reads the stored nutzap again and does not redeem it twice
    drop(node);
    let node = super::run_node(&provider);
    super::market::wait_for("the restarted node looks at the nutzap again", || {
        counted(&node, "again") == 1
    });
    assert_eq!(counted(&node, "redeemed"), 0);
    assert_eq!(balance(&provider, &mint.url).0, got);
    // the buyer's history has the 5 sat it sent (and the swap's fee)
    let o = ok(wallet(&buyer, &["history", "--json"]), "history");
    let lines: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let sends: Vec<&Value> = lines
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "send" && l["mint"] == mint.url.as_str())
        .collect();
    assert_eq!(sends.len(), 1, "{lines}");
    assert_eq!(sends[0]["amount"], 5, "{lines}");
}
