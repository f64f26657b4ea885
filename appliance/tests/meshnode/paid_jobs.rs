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

    // paid, and failed (out of fuel): the escrow is left to the buyer's refund
    let spin = super::spin_job(
        work.path(),
        "spin-paid",
        serde_json::json!({"fuel": 20_000}),
    );
    let mut j: Value = serde_json::from_str(&std::fs::read_to_string(&spin).unwrap()).unwrap();
    j["bid"] = serde_json::json!({"amount": 5000, "unit": "msat"});
    std::fs::write(&spin, j.to_string()).unwrap();
    let (o, v) = submit(&spin, &["--pay", "cashu", "--mint", &mint.url]);
    assert_eq!(o.status.code(), Some(0), "{v} {}", stderr(&o));
    let failed = v["job"].as_str().unwrap().to_owned();
    let (code, st) = super::jobs::wait_final(&failed, &node, &buyer);
    assert_eq!(code, Some(1), "{st}");
    let (_, st) = super::jobs::job(&["status", &failed], &node, &buyer);
    assert_eq!(st["payment"]["state"], "released", "{st}");
    let released = st["payment"]["amount_sat"].as_u64().unwrap();
    let (_, failed_receipt) = super::jobs::job(&["receipt", &failed], &node, &buyer);
    assert_eq!(st["payment"]["receipt"], failed_receipt["id"], "{st}");
    settlement_records(
        &provider,
        &buyer,
        &mint,
        [&receipt, &failed_receipt],
        (redeemed, escrowed, released),
    );
}

/// The payments in a node directory's books (`ledger show --settlements`, `--job`), and
/// what its standings say in words.
fn settlements(dir: &Path, job: Option<&str>) -> (Vec<Value>, String) {
    let mut args = vec!["ledger", "show", dir.to_str().unwrap(), "--settlements"];
    args.extend(job.iter().flat_map(|j| ["--job", j]));
    let o = ok(super::run(&args), "ledger show --settlements");
    let text = stdout(&o);
    let lines = text
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (lines, text)
}

/// The paid jobs' payments in both sides' books (one redeemed, one released), matched to
/// their receipts by the job id the receipts name (blinded: the buyer and the provider
/// compute it, nobody else); refunds in the books of the side that took them back, also
/// while a node runs on that directory.
fn settlement_records(
    provider: &Path,
    buyer: &Path,
    mint: &Mint,
    receipts: [&Value; 2],
    (redeemed, escrowed, released): (u64, u64, u64),
) {
    let key = |dir: &Path| {
        fleetmesh_proto::NodeKeys::load(&dir.join("keys"))
            .unwrap()
            .nostr_pubkey_hex()
    };
    let (p_key, b_key) = (key(provider), key(buyer));
    for (receipt, state, sats) in [
        (receipts[0], "redeemed", redeemed),
        (receipts[1], "released", released),
    ] {
        let content: Value = serde_json::from_str(receipt["content"].as_str().unwrap()).unwrap();
        let job = content["job"].as_str().unwrap();
        let (theirs, _) = settlements(provider, Some(job));
        assert_eq!(theirs.len(), 1, "{theirs:?}");
        let t = &theirs[0];
        assert_eq!(
            (&t["peer"], &t["role"], &t["state"], &t["receipt"], &t["at"]),
            (
                &Value::from(b_key.as_str()),
                &Value::from("payee"),
                &Value::from(state),
                &receipt["id"],
                &Value::from(mint.url.as_str())
            ),
            "{t}"
        );
        assert_eq!(t["amount_sat"], sats, "{t}");
        let (ours, _) = settlements(buyer, Some(job));
        assert_eq!(ours.len(), 1, "{ours:?}");
        let b = &ours[0];
        assert_eq!(
            (&b["peer"], &b["role"], &b["state"], &b["job"]),
            (
                &Value::from(p_key.as_str()),
                &Value::from("payer"),
                &Value::from("escrowed"),
                &Value::from(job)
            ),
            "{b}"
        );
        assert_eq!(b["amount_sat"], escrowed, "{b}");
    }
    // the refused submissions and the hostile payments left nothing in either book
    let (theirs, words) = settlements(provider, None);
    assert_eq!(theirs.len(), 2, "{theirs:?}");
    assert_eq!(settlements(buyer, None).0.len(), 2);
    assert!(
        words.contains(&format!(
            "{b_key}: 2 jobs paid; received {redeemed} sat (0 unredeemed, {released} released)"
        )),
        "{words}"
    );

    // escrow the running provider locks to the buyer, with a refund to itself after 2 s:
    // taken back by `wallet check`, recorded through the node's control socket (the node
    // holds its books)
    let m = |rest: &[&str]| {
        let mut args = vec!["--mint", mint.url.as_str()];
        args.extend_from_slice(rest);
        ok(wallet(provider, &args), rest[0])
    };
    m(&[
        "send",
        "--amount",
        "2",
        "--lock",
        &b_key,
        "--locktime",
        "+2",
        "--refund",
        "self",
    ]);
    std::thread::sleep(std::time::Duration::from_secs(3));
    // (the mint's input fee comes off the refund; the books count the escrow's 2 sat)
    let o = m(&["check"]);
    let said = stderr(&o);
    assert!(
        said.contains("sat of escrow refunded") && !said.contains(" 0 sat of escrow refunded"),
        "{said}"
    );
    let (all, words) = settlements(provider, None);
    assert_eq!(all.len(), 3, "{all:?}");
    let r = &all[2];
    assert_eq!(
        (&r["peer"], &r["role"], &r["state"], &r["amount_sat"]),
        (
            &Value::from(b_key.as_str()),
            &Value::from("payer"),
            &Value::from("refunded"),
            &Value::from(2)
        ),
        "{r}"
    );
    assert!(r.get("job").is_none(), "{r}");
    assert!(words.contains("paid 0 sat (2 refunded)"), "{words}");
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
    // and in the books once
    let (paid, _) = settlements(&provider, None);
    assert_eq!(paid.len(), 1, "{paid:?}");
    assert_eq!(
        (&paid[0]["state"], paid[0]["amount_sat"].as_u64()),
        (&serde_json::json!("redeemed"), Some(redeemed)),
        "{paid:?}"
    );
}
