//! L402 on a node's priced API routes (`[api.prices]`): `402` with a macaroon and an
//! invoice, the invoice paid, the request sent again with the credential — end to end
//! through `meshnode`, its refusals each tried.
//!
//! No Lightning node can run here (no chain, no peers), so the invoices come from the
//! **Lightning double** (`lightning_double.rs`, named as such), which speaks LND's and
//! Core Lightning's documented REST shapes and settles the invoices it issued by revealing
//! their preimages. The node invoices through its LND shape; the buyer pays through its
//! CLN shape. The macaroons are read and attenuated by pymacaroons (an independent
//! implementation, PyPI, its own venv).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Value, json};

use super::lightning_double::{LightningDouble, b64, hash_of, lnurl_service};
use super::{repo, run, stderr, stdout};

/// The venv's python with the pinned pymacaroons, from `pymacaroons/tools.sh`.
fn pymacaroons() -> Option<PathBuf> {
    super::venv_python("pymacaroons/tools.sh", "the L402 test")
}

/// `mac.py ARGS`: its stdout.
fn mac(py: &Path, args: &[&str]) -> String {
    let o = Command::new(py)
        .arg(repo().join("appliance/tests/meshnode/pymacaroons/mac.py"))
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "mac.py {args:?}: {}", stderr(&o));
    stdout(&o).trim().to_owned()
}

/// Appends `text` to the `meshnode.toml` of `dir`.
fn append_config(dir: &Path, text: &str) {
    let path = dir.join("meshnode.toml");
    let mut s = std::fs::read_to_string(&path).unwrap();
    s.push_str(text);
    std::fs::write(path, s).unwrap();
}

/// Sets `[settlement.lightning]` of `dir` to `flavor` of the double, its credential
/// written into `dir`.
fn use_lightning(dir: &Path, ln: &LightningDouble, flavor: &str) {
    let file = dir.join(format!("{flavor}.credential"));
    let cred = if flavor == "lnd" {
        ln.macaroon.clone()
    } else {
        ln.rune.clone().into_bytes()
    };
    std::fs::write(&file, cred).unwrap();
    let section = format!(
        "[settlement.lightning]\nbackend = \"{flavor}\"\nurl = \"{}\"\ncredential_file = \"{}\"\n",
        ln.url,
        file.display()
    );
    super::edit_config(
        dir,
        &[("[settlement.lightning]\nbackend = \"cashu\"\n", &section)],
    );
}

/// A raw POST of `body` to `url` with `auth`: status, `WWW-Authenticate`, JSON body.
fn post(url: &str, body: &Value, auth: Option<&str>) -> (u16, Option<String>, Value) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut req = reqwest::blocking::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(a) = auth {
        req = req.header("authorization", a);
    }
    let r = req.send().unwrap();
    let status = r.status().as_u16();
    let www = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, www, r.json().unwrap_or(Value::Null))
}

/// The macaroon and invoice of an `L402 macaroon="…", invoice="…"` challenge.
fn challenge(www: &str) -> (String, String) {
    let rest = www.strip_prefix("L402 ").expect("an L402 challenge");
    let field = |name: &str| {
        let start = rest.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
        rest[start..].split('"').next().unwrap().to_owned()
    };
    (field("macaroon"), field("invoice"))
}

#[test]
fn a_node_sells_api_routes_by_l402_through_lnd_and_cln_rest_shaped_lightning_doubles() {
    let Some(py) = pymacaroons() else {
        return;
    };
    let ln = LightningDouble::start();
    let home = tempfile::tempdir().unwrap();
    let (provider, buyer) = (home.path().join("provider"), home.path().join("buyer"));
    assert!(super::init(&provider, &[]).status.success());
    assert!(super::init(&buyer, &[]).status.success());
    use_lightning(&provider, &ln, "lnd");
    append_config(
        &provider,
        "\n[api.prices]\n\"/v1/jobs\" = 3\n\"/v1/proofs/verify\" = 1\n",
    );
    use_lightning(&buyer, &ln, "cln");

    // a price on a route that cannot be priced, and a Lightning node's API over plain
    // http elsewhere than loopback, are refused at start-up
    let bad = home.path().join("bad");
    assert!(super::init(&bad, &[]).status.success());
    append_config(&bad, "\n[api.prices]\n\"/v1/ledger\" = 1\n");
    let o = run(&["run", bad.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert!(stderr(&o).contains("not a priced route"), "{}", stderr(&o));
    let bad2 = home.path().join("bad2");
    assert!(super::init(&bad2, &[]).status.success());
    let far = LightningDouble {
        url: ln.url.replace("127.0.0.1", "192.0.2.1"),
        macaroon: ln.macaroon.clone(),
        rune: ln.rune.clone(),
        book: Arc::default(),
    };
    use_lightning(&bad2, &far, "lnd");
    let o = run(&["run", bad2.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert!(stderr(&o).contains("over https"), "{}", stderr(&o));
    // a credential file that is not there, a certificate that is not PEM: refused too
    let bad3 = home.path().join("bad3");
    assert!(super::init(&bad3, &[]).status.success());
    use_lightning(&bad3, &ln, "lnd");
    std::fs::remove_file(bad3.join("lnd.credential")).unwrap();
    let o = run(&["run", bad3.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert!(stderr(&o).contains("credential_file"), "{}", stderr(&o));
    std::fs::write(bad3.join("lnd.credential"), &ln.macaroon).unwrap();
    std::fs::write(bad3.join("cert.pem"), "not a certificate").unwrap();
    let cert = format!("tls_cert_file = \"{}\"\n", bad3.join("cert.pem").display());
    super::edit_config(
        &bad3,
        &[("backend = \"lnd\"\n", &format!("backend = \"lnd\"\n{cert}"))],
    );
    let o = run(&["run", bad3.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert!(stderr(&o).contains("TLS certificate"), "{}", stderr(&o));

    let node = super::run_node(&provider);
    // the prices are public: NIP-11 names them
    let nip11 = super::runtime().block_on(super::nip11(&node));
    assert_eq!(
        nip11["fleetmesh"]["api"]["prices"],
        json!({"/v1/jobs": 3, "/v1/proofs/verify": 1}),
        "{nip11}"
    );
    let url = node.url("/v1/proofs/verify");
    let fixtures = repo().join("prover/tests/fixtures/circom");
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(fixtures.join(f)).unwrap()).unwrap()
    };
    let verify = json!({"vk": read("tiny_vk.json"), "proof": read("tiny_proof.json"),
                        "public": read("tiny_public.json")});

    // no credential: 402 with a challenge; the invoice is the double's, for 1 sat, and
    // the macaroon (read by pymacaroons) commits to its payment hash, the route, the price
    let (status, www, body) = post(&url, &verify, None);
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["code"], "payment_required", "{body}");
    let (macaroon, invoice) = challenge(&www.expect("WWW-Authenticate"));
    let seen: Value = serde_json::from_str(&mac(&py, &["inspect", &macaroon])).unwrap();
    assert_eq!(seen["version"], 2, "{seen}");
    assert_eq!(seen["location"], "fleetmesh", "{seen}");
    let id = seen["identifier"].as_str().unwrap();
    assert_eq!(id.len(), 132, "version 0: 2 + 32 + 32 bytes: {id}");
    assert_eq!(&id[..4], "0000");
    assert_eq!(
        id[4..68],
        hash_of(&invoice),
        "the macaroon commits to the invoice"
    );
    let caveats: Vec<&str> = seen["caveats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        caveats[..2],
        [
            "services=fleetmesh:0",
            "fleetmesh_capabilities=/v1/proofs/verify"
        ]
    );
    assert!(caveats.contains(&"fleetmesh_amount_sat=1"), "{caveats:?}");
    let decoded = run(&["settle", "decode", &invoice, "--json"]);
    let decoded: Value = serde_json::from_str(stdout(&decoded).trim()).unwrap();
    assert_eq!(decoded["amount_msat"], 1000, "{decoded}");

    // unpaid (a made-up preimage): 401 naming the preimage
    let refused = |auth: &str, on: &str, says: &str| {
        let (status, _, body) = post(on, &verify, Some(auth));
        assert_eq!(status, 401, "{says}: {body}");
        let msg = body["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(says), "{says}: {body}");
    };
    refused(
        &format!("L402 {macaroon}:{}", "00".repeat(32)),
        &url,
        "preimage",
    );
    // paid: the buyer's side of the double (CLN's /v1/pay) returns the preimage
    let paid: Value = reqwest::blocking::Client::new()
        .post(format!("{}/v1/pay", ln.url))
        .header("Rune", &ln.rune)
        .json(&json!({"bolt11": invoice}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(paid["status"], "complete", "{paid}");
    let preimage = paid["payment_preimage"].as_str().unwrap().to_owned();
    // forged (a flipped signature byte), attenuated by the holder to have expired, used on
    // another route (priced or not): 401 with the reason, the route never reached
    let mut raw = base64::engine::general_purpose::STANDARD
        .decode(&macaroon)
        .unwrap();
    let last = raw.len() - 1;
    raw[last] ^= 1;
    refused(&format!("L402 {}:{preimage}", b64(&raw)), &url, "signature");
    let expired = mac(&py, &["attenuate", &macaroon, "fleetmesh_valid_until=1000"]);
    refused(
        &format!("L402 {expired}:{preimage}"),
        &url,
        "expired at 1000",
    );
    let cred = format!("L402 {macaroon}:{preimage}");
    refused(&cred, &node.url("/v1/jobs"), "not /v1/jobs");
    refused(&cred, &node.url("/v1/proofs/prove"), "does not price");

    // attenuated by the holder with a caveat still in force and one the node does not
    // know (pymacaroons' URL-safe encoding): accepted. A malformed body is refused by the
    // route itself, which releases the credential; the next request spends it; once.
    let narrowed = mac(
        &py,
        &[
            "attenuate",
            &macaroon,
            "fleetmesh_valid_until=4000000000",
            "shop_note=kept",
        ],
    );
    let cred = format!("L402 {narrowed}:{preimage}");
    let (status, _, body) = post(&url, &json!({"vk": 1}), Some(&cred));
    assert_eq!(status, 400, "the route's own refusal: {body}");
    let (status, _, body) = post(&url, &verify, Some(&cred));
    assert_eq!((status, &body["valid"]), (200, &json!(true)), "{body}");
    refused(&cred, &url, "already used");

    // `meshnode settle l402` pays a priced route itself (the buyer's CLN backend), within
    // --max-sat
    let data = home.path().join("verify.json");
    std::fs::write(&data, verify.to_string()).unwrap();
    let settle = |max: &str| {
        run(&[
            "settle",
            "l402",
            &url,
            "--data",
            data.to_str().unwrap(),
            "--max-sat",
            max,
            "--key-dir",
            buyer.to_str().unwrap(),
        ])
    };
    let o = settle("0");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("at most 0 sat"), "{}", stderr(&o));
    let o = settle("5");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("paid 1 sat (fee 1 msat) through cln"),
        "{}",
        stderr(&o)
    );
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["valid"], true, "{v}");

    // `job submit --pay l402`: within the bid only; the job is the buyer's, who signed its
    // ask, and is read back by its key
    let file = super::upper_job(home.path(), "paid by lightning", "l402-job");
    let submit = || {
        super::jobs::job(
            &["submit", file.to_str().unwrap(), "--pay", "l402"],
            &node,
            &buyer,
        )
    };
    let (o, v) = submit();
    assert_eq!(
        o.status.code(),
        Some(2),
        "the default bid is 1 msat: {v} {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("the node asks 3 sat"), "{}", stderr(&o));
    let mut spec: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    spec["bid"] = json!({"amount": 5, "unit": "sat"});
    std::fs::write(&file, spec.to_string()).unwrap();
    let (o, v) = submit();
    assert!(o.status.success(), "{v} {}", stderr(&o));
    assert!(stderr(&o).contains("paid 3 sat"), "{}", stderr(&o));
    let id = v["job"].as_str().unwrap().to_owned();
    let (code, state) = super::jobs::wait_final(&id, &node, &buyer);
    assert_eq!(code, Some(0), "{state}");
    let out = home.path().join("out");
    let (o, _) = super::jobs::job(
        &["result", &id, "--out", out.to_str().unwrap()],
        &node,
        &buyer,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(out.join("stdout")).unwrap(),
        "PAID BY LIGHTNING"
    );
    // unpaid, a job is not taken
    let (o, v) = super::jobs::job(&["submit", file.to_str().unwrap()], &node, &buyer);
    assert_eq!(o.status.code(), Some(2), "{v}");
    assert_eq!(v["error"]["code"], "payment_required", "{v}");

    // one address has at most 30 invoices issued a minute: a burst, then 429 with when
    let limited = (0..40).find_map(|_| {
        let r = reqwest::blocking::Client::new()
            .post(&url)
            .json(&verify)
            .send()
            .unwrap();
        match r.status().as_u16() {
            402 => None,
            429 => Some((
                r.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
                r.json::<Value>().unwrap(),
            )),
            other => panic!("{other}"),
        }
    });
    let (wait, body) = limited.expect("a 429 within 40 unpaid requests");
    assert!((1..=2).contains(&wait), "{wait} s");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");

    let (issued, settled) = ln.counts();
    assert_eq!(settled, 3, "{issued} invoices issued");
    let metrics = reqwest::blocking::get(node.url("/metrics"))
        .unwrap()
        .text()
        .unwrap();
    for outcome in [
        "challenged",
        "refused",
        "paid",
        "released",
        "replayed",
        "limited",
    ] {
        assert!(
            metrics.contains(&format!("fleetmesh_l402_total{{outcome=\"{outcome}\"}}")),
            "{outcome}: {metrics}"
        );
    }
}

#[test]
fn a_node_prices_routes_with_invoices_of_its_cashu_mint_a_real_nutshell() {
    let Some(bin) = super::wallet::nutshell("the L402 Cashu-backend test") else {
        return;
    };
    let Some(py) = pymacaroons() else {
        return;
    };
    let mint = super::wallet::Mint::start(&bin);
    let home = tempfile::tempdir().unwrap();
    let provider = home.path().join("provider");
    assert!(super::init(&provider, &[]).status.success());
    super::edit_config(
        &provider,
        &[("mints = []", &format!("mints = [\"{}\"]", mint.url))],
    );
    append_config(&provider, "\n[api.prices]\n\"/v1/proofs/verify\" = 2\n");
    let node = super::run_node(&provider);
    let (status, www, body) = post(&node.url("/v1/proofs/verify"), &json!({}), None);
    assert_eq!(status, 402, "{body}");
    let (macaroon, invoice) = challenge(&www.expect("WWW-Authenticate"));
    // the macaroon names the mint quote behind the invoice; the mint, asked, has that
    // quote for that invoice
    let seen: Value = serde_json::from_str(&mac(&py, &["inspect", &macaroon])).unwrap();
    let quote = seen["caveats"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|c| c.as_str()?.strip_prefix("fleetmesh_quote="))
        .unwrap_or_else(|| panic!("no quote caveat: {seen}"))
        .to_owned();
    let at_mint: Value =
        reqwest::blocking::get(format!("{}/v1/mint/quote/bolt11/{quote}", mint.url))
            .unwrap()
            .json()
            .unwrap();
    assert_eq!(at_mint["request"], invoice, "{at_mint}");
    assert_eq!(at_mint["amount"], 2, "{at_mint}");
    assert_eq!(
        &seen["identifier"].as_str().unwrap()[4..68],
        hash_of(&invoice)
    );
}

#[test]
fn l402_is_paid_through_an_nwc_wallet_whose_node_pays_with_its_lightning_node() {
    let Some(bin) = super::wallet::nutshell("the L402-over-NWC test") else {
        return;
    };
    let mint = super::wallet::Mint::start(&bin);
    let ln = LightningDouble::start();
    let home = tempfile::tempdir().unwrap();
    let (provider, wallet, buyer) = (
        home.path().join("provider"),
        home.path().join("wallet"),
        home.path().join("buyer"),
    );
    for d in [&provider, &wallet, &buyer] {
        assert!(super::init(d, &[]).status.success());
    }
    use_lightning(&provider, &ln, "lnd");
    append_config(
        &provider,
        "\n[api.prices]\n\"/v1/jobs\" = 2\n\"/v1/proofs/verify\" = 1\n",
    );
    // the wallet node serves NWC, paying through its Lightning node (the double's CLN
    // side), so that payments give real preimages
    use_lightning(&wallet, &ln, "cln");
    super::edit_config(
        &wallet,
        &[
            ("mints = []", &format!("mints = [\"{}\"]", mint.url)),
            ("nwc = false", "nwc = true"),
        ],
    );
    let (node, w) = (super::run_node(&provider), super::run_node(&wallet));
    let relay = w.url("/").replace("http://", "ws://");
    let uri = super::nwc::connect(
        &wallet,
        &relay,
        "buyer",
        &["--methods", "pay_invoice", "--budget", "10"],
    );
    // the buyer's payer is that NWC connection
    let file = buyer.join("nwc.uri");
    std::fs::write(&file, &uri).unwrap();
    let section = format!(
        "[settlement.lightning]\nbackend = \"nwc\"\ncredential_file = \"{}\"\n",
        file.display()
    );
    super::edit_config(
        &buyer,
        &[("[settlement.lightning]\nbackend = \"cashu\"\n", &section)],
    );

    let fixtures = repo().join("prover/tests/fixtures/circom");
    let read = |f: &str| std::fs::read_to_string(fixtures.join(f)).unwrap();
    let data = home.path().join("verify.json");
    std::fs::write(
        &data,
        format!(
            "{{\"vk\": {}, \"proof\": {}, \"public\": {}}}",
            read("tiny_vk.json"),
            read("tiny_proof.json"),
            read("tiny_public.json")
        ),
    )
    .unwrap();
    let o = run(&[
        "settle",
        "l402",
        &node.url("/v1/proofs/verify"),
        "--data",
        data.to_str().unwrap(),
        "--key-dir",
        buyer.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("through nwc"), "{}", stderr(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["valid"], true, "{v}");

    // job submit --pay nwc: the connection given on the command line
    let job = super::upper_job(home.path(), "paid over nwc", "nwc-job");
    let mut spec: Value = serde_json::from_str(&std::fs::read_to_string(&job).unwrap()).unwrap();
    spec["bid"] = json!({"amount": 3, "unit": "sat"});
    std::fs::write(&job, spec.to_string()).unwrap();
    let (o, v) = super::jobs::job(
        &[
            "submit",
            job.to_str().unwrap(),
            "--pay",
            "nwc",
            "--nwc-uri",
            &uri,
        ],
        &node,
        &buyer,
    );
    assert!(o.status.success(), "{v} {}", stderr(&o));
    let id = v["job"].as_str().unwrap().to_owned();
    let (code, state) = super::jobs::wait_final(&id, &node, &buyer);
    assert_eq!(code, Some(0), "{state}");
    // both payments went through the wallet node's Lightning node, within the budget
    assert_eq!(ln.counts().1, 2);
    let o = run(&[
        "settle",
        "nwc-connections",
        "--key-dir",
        wallet.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let grant: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    // 1 sat and 2 sat, each with its routing fee (1 msat) rounded up to a sat
    assert_eq!(grant["spent_sat"], 5, "{grant}");

    // a Lightning address (LUD-16) paid over the same connection: the LNURL service (a
    // loopback server here, invoicing through the double's LND side with its metadata's
    // hash) is asked for an invoice, which is checked, then paid
    let host = lnurl_service(&ln);
    let nwc_pay_to = |who: &str, sats: &str| {
        let address = format!("{who}@{host}");
        run(&[
            "settle",
            "nwc-pay",
            "--to",
            &address,
            "--amount",
            sats,
            "--comment",
            "hi",
            "--uri",
            &uri,
        ])
    };
    let nwc_pay = |sats: &str| nwc_pay_to("alice", sats);
    let o = nwc_pay("2");
    assert!(o.status.success(), "{}", stderr(&o));
    let paid: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(paid["preimage"].as_str().map(str::len), Some(64), "{paid}");
    assert_eq!(ln.counts().1, 3);
    // more than the service takes: refused before anything is paid
    let o = nwc_pay("50");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not 50000"), "{}", stderr(&o));
    // an invoice not bound to the service's metadata, or for more than asked: refused
    // before anything is paid
    for (who, says) in [("mallory", "description hash"), ("greedy", "not 2000")] {
        let o = nwc_pay_to(who, "2");
        assert_eq!(o.status.code(), Some(2), "{who}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{who}: {}", stderr(&o));
    }
    assert_eq!(ln.counts().1, 3);

    // a node whose invoices come from an NWC wallet (make_invoice at the wallet node's
    // mint): its challenge carries that wallet's invoice
    let issuer = home.path().join("issuer");
    assert!(super::init(&issuer, &[]).status.success());
    let uri = super::nwc::connect(&wallet, &relay, "issuer", &["--methods", "make_invoice"]);
    std::fs::write(issuer.join("nwc.uri"), &uri).unwrap();
    let section = format!(
        "[settlement.lightning]\nbackend = \"nwc\"\ncredential_file = \"{}\"\n",
        issuer.join("nwc.uri").display()
    );
    super::edit_config(
        &issuer,
        &[("[settlement.lightning]\nbackend = \"cashu\"\n", &section)],
    );
    append_config(&issuer, "\n[api.prices]\n\"/v1/proofs/verify\" = 4\n");
    let i = super::run_node(&issuer);
    let (status, www, body) = post(&i.url("/v1/proofs/verify"), &json!({}), None);
    assert_eq!(status, 402, "{body}");
    let (_, invoice) = challenge(&www.unwrap());
    let o = run(&[
        "settle",
        "nwc-connections",
        "--key-dir",
        wallet.to_str().unwrap(),
    ]);
    assert!(stdout(&o).contains("issuer"), "{}", stdout(&o));
    let decoded = run(&["settle", "decode", &invoice, "--json"]);
    let decoded: Value = serde_json::from_str(stdout(&decoded).trim()).unwrap();
    assert_eq!(decoded["amount_msat"], 4000, "{decoded}");
    // made by the wallet node at its mint, not by the double
    assert_eq!(ln.counts().0, 5, "not an invoice of the double's");
    drop(w);
}
