//! Nostr Wallet Connect (NIP-47): a node serves its Cashu wallet (at a real mint,
//! nutshell) to the connections it grants; our client and @getalby/sdk's (an independent
//! implementation, in JavaScript) ask its balance, have it make invoices and pay them;
//! methods not granted, budgets passed, unknown keys and revoked connections are refused
//! with NIP-47's codes.

use std::path::Path;

use serde_json::Value;

use super::wallet::{Mint, balance, nutshell, ok, wallet};
use super::{node_tool, repo, run, run_node, stderr, stdout};

/// `meshnode settle ARGS`, its exit code and stdout parsed (Null when not JSON).
fn settle(args: &[&str]) -> (Option<i32>, Value, String) {
    let mut all = vec!["settle"];
    all.extend_from_slice(args);
    let o = run(&all);
    let v = serde_json::from_str(stdout(&o).trim()).unwrap_or(Value::Null);
    (o.status.code(), v, stderr(&o))
}

/// A connection to the wallet of `dir` through `relay`: its URI.
pub(super) fn connect(dir: &Path, relay: &str, name: &str, extra: &[&str]) -> String {
    let mut args = vec!["settle", "nwc-connect", "--key-dir", dir.to_str().unwrap()];
    args.extend(["--name", name, "--relay", relay]);
    args.extend_from_slice(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).trim().to_owned()
}

/// An unpaid invoice of nutshell's own wallet for `sats`.
fn invoice(mint: &Mint, sats: u64) -> String {
    let o = mint.cashu(&["invoice", &sats.to_string(), "--no-check"]);
    let text = stdout(&o) + &stderr(&o);
    text.split_whitespace()
        .find(|w| w.starts_with("lnbc"))
        .unwrap_or_else(|| panic!("no invoice in {text}"))
        .to_owned()
}

#[test]
fn the_nodes_wallet_answers_nwc_clients_ours_and_getalbys_within_their_grants() {
    let Some(bin) = nutshell("the NWC test") else {
        return;
    };
    let Some(npm) = node_tool("getalby", "the NWC interop test") else {
        return;
    };
    let mint = Mint::start(&bin);
    let home = tempfile::tempdir().unwrap();
    // a wallet service with no mint to pay and invoice at does not start
    let bare = home.path().join("bare");
    assert!(super::init(&bare, &[]).status.success());
    super::edit_config(&bare, &[("nwc = false", "nwc = true")]);
    let o = run(&["run", bare.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("nwc = true needs a mint"),
        "{}",
        stderr(&o)
    );
    let dir = home.path().join("wallet-node");
    assert!(super::init(&dir, &[]).status.success());
    let mints = format!("mints = [\"{}\"]", mint.url);
    super::edit_config(
        &dir,
        &[("mints = []", &mints), ("nwc = false", "nwc = true")],
    );
    ok(
        wallet(&dir, &["--mint", &mint.url, "mint", "--amount", "100"]),
        "fund the node",
    );
    let node = run_node(&dir);
    let relay = format!("ws://{}/", node.addr);
    let full = connect(&dir, &relay, "app", &["--budget", "30"]);
    assert!(full.starts_with("nostr+walletconnect://"), "{full}");
    let viewer = connect(
        &dir,
        &relay,
        "viewer",
        &["--methods", "get_balance,get_info"],
    );

    // our client: the balance, in msat
    let (code, v, err) = settle(&["nwc-balance", "--uri", &full]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(v["balance"], 100_000, "{v}");
    // an invoice the node makes settles into the node's wallet once paid (FakeWallet pays
    // every invoice of its mint after 3 s: it stands for the payer's Lightning node)
    let (code, made, err) = settle(&["nwc-invoice", "--uri", &full, "--amount", "7"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        (made["type"].as_str(), made["state"].as_str()),
        (Some("incoming"), Some("pending")),
        "{made}"
    );
    assert_eq!(made["amount"], 7000);
    let hash = made["payment_hash"].as_str().unwrap();
    // claimed by the service on its own (nobody looks it up), then seen settled
    super::market::wait_for("the node's invoice paid and claimed", || {
        balance(&dir, &mint.url).0 == 107
    });
    let (code, looked, err) = settle(&["nwc-lookup", "--uri", &full, "--payment-hash", hash]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(looked["state"], "settled", "{looked}");
    assert_eq!(balance(&dir, &mint.url).0, 107);
    // paying: within the budget, then past it
    let (code, paid, err) = settle(&["nwc-pay", "--uri", &full, "--invoice", &invoice(&mint, 20)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(paid["fees_paid"].is_u64(), "{paid}");
    let (code, _, err) = settle(&["nwc-pay", "--uri", &full, "--invoice", &invoice(&mint, 20)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("QUOTA_EXCEEDED"), "{err}");
    // a connection may call only what it was granted
    let (code, _, err) = settle(&["nwc-pay", "--uri", &viewer, "--invoice", &invoice(&mint, 1)]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("RESTRICTED"), "{err}");
    let (code, v, err) = settle(&["nwc-balance", "--uri", &viewer]);
    assert_eq!(code, Some(0), "{err}");
    let left = v["balance"].as_u64().unwrap();
    assert!(left < 87_000, "{v}");
    // a key the node never granted, and one revoked
    let stranger = format!(
        "nostr+walletconnect://{}?relay={}&secret={}",
        full.split("://").nth(1).unwrap().split('?').next().unwrap(),
        relay.replace(':', "%3A").replace('/', "%2F"),
        "42".repeat(32)
    );
    let (code, _, err) = settle(&["nwc-balance", "--uri", &stranger]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("UNAUTHORIZED"), "{err}");
    let o = run(&[
        "settle",
        "nwc-revoke",
        "--key-dir",
        dir.to_str().unwrap(),
        "--name",
        "viewer",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (code, _, err) = settle(&["nwc-balance", "--uri", &viewer]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("UNAUTHORIZED"), "{err}");
    let o = run(&[
        "settle",
        "nwc-connections",
        "--key-dir",
        dir.to_str().unwrap(),
    ]);
    let grants: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert!(grants[0]["spent_sat"].as_u64().unwrap() >= 20, "{grants:?}");

    // @getalby/sdk: info, balance, an invoice made, an invoice paid
    let alby = connect(&dir, &relay, "alby", &[]);
    let script = repo().join("appliance/tests/meshnode/getalby/nwc.mjs");
    let to_pay = invoice(&mint, 5);
    let o = std::process::Command::new("node")
        .arg(&script)
        .arg(&npm)
        .arg(&alby)
        .arg(&to_pay)
        .output()
        .unwrap();
    assert!(o.status.success(), "nwc.mjs: {} {}", stdout(&o), stderr(&o));
    let js: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(js["balance"]["balance"], left, "{js}");
    assert!(js["info"]["methods"].as_array().unwrap().len() == 6, "{js}");
    assert!(
        js["made"]["invoice"].as_str().unwrap().starts_with("lnbc"),
        "{js}"
    );
    assert_eq!(js["made"]["amount"], 3000, "{js}");
    // notified (kind 23197) of the payment it sent and of the invoice it made, once paid
    assert_eq!(
        js["info"]["notifications"],
        serde_json::json!(["payment_received", "payment_sent"]),
        "{js}"
    );
    let note = |t: &str| {
        js["notes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["notification_type"] == t)
            .unwrap_or_else(|| panic!("no {t} notification: {js}"))["notification"]
            .clone()
    };
    let sent = note("payment_sent");
    assert_eq!(
        (&sent["type"], &sent["invoice"]),
        (&serde_json::json!("outgoing"), &serde_json::json!(to_pay)),
        "{sent}"
    );
    let received = note("payment_received");
    assert_eq!(
        (
            &received["type"],
            &received["payment_hash"],
            &received["amount"]
        ),
        (
            &serde_json::json!("incoming"),
            &js["made"]["payment_hash"],
            &serde_json::json!(3000)
        ),
        "{received}"
    );
    assert!(received["settled_at"].is_u64(), "{received}");
    // (what it paid, fees in; less the 3000 of the invoice it made where FakeWallet paid
    // that one and the node claimed it before the balance was read again)
    let spent = left - js["balanceAfter"]["balance"].as_u64().unwrap();
    let claimed = js["looked"]["state"] == "settled";
    assert!(
        (5000..=8000).contains(&spent) || (claimed && (5000..=8000).contains(&(spent + 3000))),
        "{js}"
    );
    // the invoice it made, looked up (FakeWallet may have paid it by then: then settled,
    // with the time), and both transactions listed
    let state = js["looked"]["state"].as_str().unwrap();
    assert!(
        state == "pending" || js["looked"]["settled_at"].is_u64(),
        "{js}"
    );
    assert_eq!(
        js["looked"]["payment_hash"], js["made"]["payment_hash"],
        "{js}"
    );
    let listed: Vec<&str> = js["listed"]["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["type"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 2, "{js}");
    assert!(
        listed.contains(&"incoming") && listed.contains(&"outgoing"),
        "{js}"
    );
    // and a connection it does not hold is refused to it too
    let o = std::process::Command::new("node")
        .arg(&script)
        .arg(&npm)
        .arg(&stranger)
        .output()
        .unwrap();
    let js: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(js["refused"]["code"], "UNAUTHORIZED", "{js}");
}
