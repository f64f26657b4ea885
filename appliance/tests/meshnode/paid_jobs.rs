//! Paid jobs end to end: a node that prices its engines takes Cashu escrow with a job,
//! runs it, redeems the escrow into its own wallet — against a real mint (nutshell,
//! started by the test), with hostile payments refused and a node killed mid-redeem.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::wallet::{Mint, balance, nutshell, ok, wallet};
use super::{assert_usage_error, meshnode, stderr, stdout};

/// A provider node directory that prices wasm jobs at `sats` a job, paid at `mint`, and a
/// buyer's, both under the returned temporary directory.
fn priced(mint: &Mint, sats: u64) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let home = tempfile::tempdir().unwrap();
    let (provider, buyer) = (home.path().join("provider"), home.path().join("buyer"));
    assert!(super::init(&provider, &[]).status.success());
    assert!(super::init(&buyer, &[]).status.success());
    let price =
        format!("[jobs.prices]\nwasm = {{ amount = {sats}, unit = \"sat\", per = \"job\" }}\n");
    let mints = format!("mints = [\"{}\"]", mint.url);
    super::edit_config(
        &provider,
        &[("[jobs.prices]\n", &price), ("mints = []", &mints)],
    );
    (home, provider, buyer)
}

/// A wasm job file (upper-casing `input`) bidding `bid_msat`, written into `dir`.
fn paid_job(dir: &Path, name: &str, bid_msat: u64) -> PathBuf {
    let file = super::upper_job(dir, "paid for", name);
    let mut job: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    job["bid"] = serde_json::json!({"amount": bid_msat, "unit": "msat"});
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, job.to_string()).unwrap();
    file
}

#[test]
fn a_priced_node_takes_jobs_paid_into_escrow_and_ends_up_holding_the_redeemed_tokens() {
    let Some(bin) = nutshell("the paid job test") else {
        return;
    };
    let mint = Mint::start(&bin);
    let other = Mint::start(&bin);
    // wasm jobs cost 5 sat here, paid at `mint` only
    let (_home, provider, buyer) = priced(&mint, 5);
    let node = super::run_node(&provider);
    for m in [&mint.url, &other.url] {
        ok(
            wallet(&buyer, &["--mint", m, "mint", "--amount", "64"]),
            "fund the buyer",
        );
    }
    let work = tempfile::tempdir().unwrap();
    let submit = |file: &Path, extra: &[&str]| {
        let mut args = vec!["submit", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        super::jobs::job(&args, &node, &buyer)
    };

    // unpaid: refused by the node, nothing run
    let (o, v) = submit(&paid_job(work.path(), "unpaid", 5000), &[]);
    assert_eq!(o.status.code(), Some(2), "{v} {}", stderr(&o));
    assert_eq!(v["error"]["code"], "payment-required", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("5 sat"),
        "{v}"
    );
    // underpaid, or at a mint the node does not take: the node's offer (NIP-11) says so
    // before the buyer locks anything
    for (name, bid, m, says) in [
        ("cheap", 1000, &mint.url, "charges up to 5 sat"),
        ("foreign", 5000, &other.url, "the node takes tokens of"),
    ] {
        let (o, _) = submit(
            &paid_job(work.path(), name, bid),
            &["--pay", "cashu", "--mint", m],
        );
        assert_usage_error(&o, says);
    }
    assert_eq!(balance(&buyer, &mint.url), (64, 0, 0));
    // what a buyer's own tools might send instead: each refused by the node, with the reason
    hostile_payments(&node, &provider, &buyer, &mint, &other);
    // (the token the provider spent is seen claimed; the others stay sent until refunds)
    ok(wallet(&buyer, &["--mint", &mint.url, "check"]), "check");

    // paid: the bid locked to the provider's key, the job run, the escrow redeemed into the
    // provider's own wallet
    let (before, sent_before, _) = balance(&buyer, &mint.url);
    let provider_before = balance(&provider, &mint.url).0;
    let (o, v) = submit(
        &paid_job(work.path(), "paid", 5000),
        &["--pay", "cashu", "--mint", &mint.url],
    );
    assert_eq!(o.status.code(), Some(0), "{v} {}", stderr(&o));
    let id = v["job"].as_str().unwrap().to_owned();
    let locked = stderr(&o);
    assert!(locked.contains("locked to the provider"), "{locked}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        let (_, st) = super::jobs::job(&["status", &id], &node, &buyer);
        if st["payment"]["state"] != "escrowed" && st["state"] == "verified" {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "{st}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(status["payment"]["state"], "redeemed", "{status}");
    // recorded against the job's receipt
    let (_, receipt) = super::jobs::job(&["receipt", &id], &node, &buyer);
    assert_eq!(
        status["payment"]["receipt"], receipt["id"],
        "{status} {receipt}"
    );
    assert_eq!(status["payment"]["at"], mint.url.as_str(), "{status}");
    let redeemed = status["payment"]["redeemed_sat"].as_u64().unwrap();
    assert!(
        redeemed >= 5,
        "the provider nets at least its price: {status}"
    );
    let escrowed = status["payment"]["amount_sat"].as_u64().unwrap();
    assert_eq!(
        balance(&provider, &mint.url),
        (provider_before + redeemed, 0, 0)
    );
    // the buyer paid the escrow (and its own swap fee), and once the mint saw the escrow
    // spent, `check` says so
    let (after, sent, _) = balance(&buyer, &mint.url);
    assert_eq!(sent, sent_before + escrowed);
    assert!(
        after + escrowed <= before && after + escrowed + 2 >= before,
        "{before} → {after}"
    );
    let o = ok(wallet(&buyer, &["--mint", &mint.url, "check"]), "check");
    assert!(
        stderr(&o).contains(&format!("{escrowed} sat of sent tokens claimed")),
        "{}",
        stderr(&o)
    );
    // the provider's history names the job it was paid for
    let o = ok(wallet(&provider, &["history", "--json"]), "history");
    assert!(stdout(&o).contains(&format!("job {id}")), "{}", stdout(&o));
    // submitting the same job again is the same job, not a second payment
    let (o, v) = submit(&paid_job(work.path(), "paid", 5000), &[]);
    assert_eq!(
        (o.status.code(), v["new"].as_bool()),
        (Some(0), Some(false)),
        "{v}"
    );
}

/// Submissions sealed by hand, each carrying a payment the node must refuse: its
/// `payment-invalid` (or `schema`) reason, and no job.
fn hostile_payments(
    node: &super::Daemon,
    provider: &Path,
    buyer: &Path,
    mint: &Mint,
    other: &Mint,
) {
    use fleetmesh_proto::NodeKeys;
    let keys = NodeKeys::load(&buyer.join("keys")).unwrap();
    let node_key = NodeKeys::load(&provider.join("keys")).unwrap();
    let provider_key = node_key.nostr_pubkey_hex();
    let now = super::unix_now();
    let token = |m: &Mint, args: &[&str]| {
        let mut a = vec!["--mint", m.url.as_str(), "send"];
        a.extend_from_slice(args);
        stdout(&ok(wallet(buyer, &a), "send")).trim().to_owned()
    };
    let stranger = NodeKeys::generate().unwrap().nostr_pubkey_hex();
    let locked = token(mint, &["--amount", "6", "--lock", &provider_key]);
    // the provider spends one escrow token itself, so it is spent at the mint
    let spent = token(mint, &["--amount", "6", "--lock", &provider_key]);
    ok(
        wallet(provider, &["--mint", &mint.url, "receive", &spent]),
        "spend it",
    );
    let cases = [
        (
            serde_json::json!({"method": "cashu", "token": token(mint, &["--amount", "6"])}),
            "payment-invalid",
            "an unlocked proof",
        ),
        (
            serde_json::json!({"method": "cashu", "token": token(mint, &["--amount", "6", "--lock", &stranger])}),
            "payment-invalid",
            "this node's key",
        ),
        (
            serde_json::json!({"method": "cashu", "token": token(mint, &["--amount", "6", "--lock", &provider_key, "--locktime", "+60", "--refund", "self"])}),
            "payment-invalid",
            "before the ask expires",
        ),
        (
            serde_json::json!({"method": "cashu", "token": token(other, &["--amount", "6", "--lock", &provider_key])}),
            "payment-invalid",
            "this node takes",
        ),
        (
            serde_json::json!({"method": "cashu", "token": token(mint, &["--amount", "2", "--lock", &provider_key])}),
            "payment-invalid",
            "costs up to 5 sat",
        ),
        (
            serde_json::json!({"method": "cashu", "token": spent}),
            "payment-invalid",
            "SPENT",
        ),
        (
            serde_json::json!({"method": "cashu", "token": token(mint, &["--amount", "6", "--hash", &"ab".repeat(32), "--lock", &provider_key])}),
            "payment-invalid",
            "an HTLC lock",
        ),
        (
            serde_json::json!({"method": "lightning", "token": locked}),
            "schema",
            "lightning",
        ),
        (
            serde_json::json!({"method": "cashu", "token": "cashuBgarbage"}),
            "payment-invalid",
            "token",
        ),
    ];
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::blocking::Client::new();
    for (n, (payment, code, says)) in cases.into_iter().enumerate() {
        let d = format!("hostile-{n}");
        let ask = keys
            .sign(fleetmesh_proto::UnsignedEvent {
                created_at: now,
                kind: 30810,
                tags: vec![
                    vec!["d".into(), d],
                    vec!["engine".into(), "wasm".into()],
                    vec!["mode".into(), "delivery".into()],
                    vec!["expiration".into(), (now + 600).to_string()],
                ],
                content: serde_json::json!({"engine": "wasm", "mode": "delivery",
                    "limits": {"fuel": 1000}, "bid": {"amount": 5000, "unit": "msat"}})
                .to_string(),
            })
            .unwrap();
        let message = serde_json::json!({"protocol": "compute/1.0", "type": "job",
            "job_id": format!("{n:02}").repeat(32), "ask": ask.id_hex(), "engine": "wasm",
            "mode": "delivery", "input": {"inline": ""}, "limits": {"fuel": 1000},
            "params": {"module": {"inline": ""}}, "payment": payment});
        let key =
            fleetmesh_proto::nip44::conversation_key(&keys.nostr().secret_key(), &provider_key)
                .unwrap();
        let sealed = fleetmesh_proto::nip44::encrypt(&key, message.to_string().as_bytes()).unwrap();
        let body = serde_json::json!({"ask": ask.to_value(), "payload": sealed});
        let r = http.post(node.url("/v1/jobs")).json(&body).send().unwrap();
        let status = r.status().as_u16();
        let v: Value = r.json().unwrap();
        assert!((400..500).contains(&status), "{n}: {status} {v}");
        assert_eq!(v["error"]["code"], code, "{n}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{n}: {says:?} in {v}"
        );
    }
}

#[test]
fn a_node_killed_between_redeeming_a_jobs_escrow_and_recording_it_redeems_it_once_after_a_restart()
{
    let Some(bin) = nutshell("the redeem crash test") else {
        return;
    };
    let mint = Mint::start(&bin);
    let (_home, provider, buyer) = priced(&mint, 3);
    ok(
        wallet(&buyer, &["--mint", &mint.url, "mint", "--amount", "16"]),
        "fund the buyer",
    );
    // the node dies right after the mint answered its redeem, before the wallet wrote
    // the proofs down
    let mut cmd = meshnode();
    cmd.args(["run", provider.to_str().unwrap(), "--listen", "127.0.0.1:0"])
        .env("MESHNODE_WALLET_FAULT", "exit-after-answer");
    let mut node = super::Daemon::start(cmd);
    let work = tempfile::tempdir().unwrap();
    let file = paid_job(work.path(), "crash", 3000);
    let (o, v) = super::jobs::job(
        &[
            "submit",
            file.to_str().unwrap(),
            "--pay",
            "cashu",
            "--mint",
            &mint.url,
        ],
        &node,
        &buyer,
    );
    assert_eq!(o.status.code(), Some(0), "{v} {}", stderr(&o));
    let id = v["job"].as_str().unwrap().to_owned();
    let exited = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            if let Some(status) = node.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the node never redeemed"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    assert_eq!(exited.code(), Some(70));
    assert_eq!(
        balance(&provider, &mint.url),
        (0, 0, 0),
        "nothing recorded yet"
    );

    // restarted, the node finds the verified job's escrow unrecorded and redeems it: the
    // wallet restores what the mint signed (NUT-09), the swap is not made twice
    let node = super::run_node(&provider);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        let (_, st) = super::jobs::job(&["status", &id], &node, &buyer);
        if st["payment"]["state"] != "escrowed" {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "{st}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(
        (&status["state"], &status["payment"]["state"]),
        (
            &serde_json::json!("verified"),
            &serde_json::json!("redeemed")
        ),
        "{status}"
    );
    let redeemed = status["payment"]["redeemed_sat"].as_u64().unwrap();
    assert!(redeemed >= 3, "{status}");
    assert_eq!(balance(&provider, &mint.url), (redeemed, 0, 0));
    let o = ok(wallet(&provider, &["history", "--json"]), "history");
    let h: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let for_job: Vec<&Value> = h
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| {
            l["detail"]
                .as_str()
                .unwrap()
                .starts_with(&format!("job {id}"))
        })
        .collect();
    assert_eq!(for_job.len(), 1, "{h}");
    assert_eq!(for_job[0]["amount"].as_u64(), Some(redeemed), "{h}");
}
