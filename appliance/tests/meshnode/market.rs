//! The market over relays: providers publish their terms (kind 30812) and answer open asks
//! with offers; `job submit --route auto` publishes the ask, ranks the offers (terms that
//! sell the mode, then price) and sends the job to the best, skipping one that never
//! answers; paid with Cashu escrow at a real mint (nutshell). `meshnode market` shows the
//! asks, the providers and the offers the relay holds.

use std::path::Path;
use std::time::{Duration, Instant};

use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::provider::Terms;
use fleetmesh_proto::{Engine, Mode, NodeKeys, UnsignedEvent, nip59};
use serde_json::{Value, json};

use super::wallet::{Mint, balance, nutshell, ok, wallet};
use super::{Daemon, meshnode, publish_all, run, run_node, runtime, stderr, stdout};

/// A provider node in `region` selling wasm jobs at `sats` a job, paid at `mint`, that
/// reads asks on the relay of `market`.
fn provider(
    home: &Path,
    (name, region): (&str, &str),
    sats: u64,
    mint: &Mint,
    market: &Daemon,
) -> Daemon {
    provider_with(home, (name, region), sats, mint, market, &[])
}

/// A provider as [`provider`] makes, its `meshnode.toml` edited further by `extra`.
fn provider_with(
    home: &Path,
    (name, region): (&str, &str),
    sats: u64,
    mint: &Mint,
    market: &Daemon,
    extra: &[(&str, &str)],
) -> Daemon {
    let dir = home.join(name);
    assert!(super::init(&dir, &[]).status.success());
    let price =
        format!("[jobs.prices]\nwasm = {{ amount = {sats}, unit = \"sat\", per = \"job\" }}\n");
    super::edit_config(
        &dir,
        &[
            ("[jobs.prices]\n", &price),
            ("mints = []", &format!("mints = [\"{}\"]", mint.url)),
            ("regions = []", &format!("regions = [\"{region}\"]")),
            (
                "\nrelays = []",
                &format!("\nrelays = [\"ws://{}/\"]", market.addr),
            ),
            (
                "engines = [\n    \"wasm\",\n    \"groth16-prove\",\n    \"groth16-verify\",\n    \"llm\",\n    \"data\",\n]",
                "engines = [\"wasm\"]",
            ),
        ],
    );
    super::edit_config(&dir, extra);
    run_node(&dir)
}

/// `meshnode market ARGS --node market --json`, parsed.
pub(super) fn market(args: &[&str], at: &Daemon) -> Vec<Value> {
    let node = at.url("");
    let mut all = vec!["market"];
    all.extend_from_slice(args);
    all.extend(["--node", &node, "--json"]);
    let o = run(&all);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_str::<Value>(stdout(&o).trim())
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

/// `what` holds within a minute.
pub(super) fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `from` offers `price` sats for `ask` (an event id) to `buyer`, gift-wrapped as a
/// provider's node would.
fn offer(from: &NodeKeys, buyer: &str, ask: &str, price: u64) -> fleetmesh_proto::Event {
    let message = json!({"protocol": "compute/1.0", "type": "offer", "ask": ask,
        "engine": "wasm", "mode": "delivery", "price": {"amount": price, "unit": "sat"}});
    let now = super::unix_now();
    let rumor = UnsignedEvent {
        created_at: now,
        kind: 23810,
        tags: Vec::new(),
        content: message.to_string(),
    };
    nip59::wrap(from.nostr(), buyer, rumor, 1059, now).unwrap()
}

#[test]
fn an_ask_on_the_relay_gets_offers_and_the_job_goes_to_the_cheapest_provider_that_delivers() {
    let Some(bin) = nutshell("the market test") else {
        return;
    };
    let mint = Mint::start(&bin);
    let home = tempfile::tempdir().unwrap();
    // the relay where buyers and providers meet: a node of its own, selling nothing here
    let hub_dir = home.path().join("hub");
    assert!(super::init(&hub_dir, &[]).status.success());
    super::edit_config(&hub_dir, &[("jobs_by_key = true", "jobs_by_key = false")]);
    let hub = run_node(&hub_dir);
    let dear = provider(home.path(), ("dear", "eu-west"), 4, &mint, &hub);
    let cheap = provider(home.path(), ("cheap", "us-east"), 2, &mint, &hub);
    // the cheapest of all, but it answers no public ask (a ComputeProvider's publishAsks)
    let quiet = provider_with(
        home.path(),
        ("quiet", "ap-south"),
        1,
        &mint,
        &hub,
        &[("publish_asks = true", "publish_asks = false")],
    );
    let buyer = home.path().join("buyer");
    assert!(super::init(&buyer, &[]).status.success());
    ok(
        wallet(&buyer, &["--mint", &mint.url, "mint", "--amount", "64"]),
        "fund the buyer",
    );
    let buyer_key = NodeKeys::load(&buyer.join("keys"))
        .unwrap()
        .nostr_pubkey_hex();
    // a provider that publishes terms (1 sat a job) and offers, but never runs anything;
    // and one that offers without terms
    let (ghost, stranger) = (NodeKeys::generate().unwrap(), NodeKeys::generate().unwrap());
    let terms = Terms {
        engines: vec![Engine::Wasm],
        modes: vec![Mode::Delivery],
        prices: [(
            "wasm".to_owned(),
            json!({"amount": 1, "unit": "sat", "per": "job"}),
        )]
        .into(),
        limits: [("fuel".to_owned(), 1u64 << 40)].into(),
        mints: vec![mint.url.clone()],
        models: Vec::new(),
        circuits: Vec::new(),
        regions: Vec::new(),
    };
    let ws = format!("ws://{}/", hub.addr);
    let signed = terms.sign(&ghost, super::unix_now()).unwrap();
    runtime().block_on(publish_all(&ws, std::slice::from_ref(&signed)));

    // every provider's terms are on the relay; by mode
    wait_for("four providers' terms", || {
        market(&["providers"], &hub).len() == 4
    });
    let providers = market(&["providers", "--mode", "delivery"], &hub);
    assert_eq!(providers.len(), 4, "{providers:?}");
    assert!(
        providers.iter().all(|p| p["engines"] == json!(["wasm"])),
        "{providers:?}"
    );
    assert!(market(&["providers", "--mode", "proof"], &hub).is_empty());

    // the buyer's ask goes out; the ghost and the stranger answer it too
    let work = tempfile::tempdir().unwrap();
    let file = super::upper_job(work.path(), "routed", "routed");
    let mut job: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    // 3 sat: above the ghost's and the cheap provider's prices together, under the dear one's
    job["bid"] = json!({"amount": 3000, "unit": "msat"});
    std::fs::write(&file, job.to_string()).unwrap();
    let node = hub.url("");
    let child = meshnode()
        .args(["job", "submit", file.to_str().unwrap(), "--route", "auto"])
        .args(["--offer-secs", "8", "--wait-secs", "8", "--node", &node])
        .args(["--key-dir", buyer.to_str().unwrap()])
        .args(["--out", work.path().join("out").to_str().unwrap()])
        .args(["--pay", "cashu", "--mint", &mint.url])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut asks = Vec::new();
    wait_for("the buyer's ask on the relay", || {
        asks = market(&["asks"], &hub);
        !asks.is_empty()
    });
    assert_eq!(asks[0]["buyer"], buyer_key.as_str());
    assert_eq!(asks[0]["mode"], "delivery");
    let ask = asks[0]["id"].as_str().unwrap().to_owned();
    // the stranger's first: the ghost's is the last offer the buyer waits for (the dear
    // provider's price is above the bid: it is not waited for)
    let hostile = [
        offer(&stranger, &buyer_key, &ask, 0),
        offer(&ghost, &buyer_key, &ask, 1),
    ];
    runtime().block_on(publish_all(&ws, &hostile));
    let o = child.wait_with_output().unwrap();
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    // the stranger has no terms; the ghost is cheapest, tried, and skipped when it does
    // not answer; the cheaper of the two real providers runs the job
    assert!(
        err.contains(&format!(
            "{} offered, but its terms",
            stranger.nostr_pubkey_hex()
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "did:nostr:{}: no answer",
            ghost.nostr_pubkey_hex()
        )),
        "{err}"
    );
    // the silent ghost's escrow was P2PK (its offer named no hash); the cheap one's an HTLC
    assert!(err.contains("locked to the provider at"), "{err}");
    assert!(
        err.contains("locked to the provider's key and delivery hash"),
        "{err}"
    );
    let dear_key = node_key(&dear);
    assert!(
        !err.contains(&dear_key),
        "the dear provider does not offer under its price: {err}"
    );
    let quiet_key = node_key(&quiet);
    assert!(
        !err.contains(&quiet_key),
        "the quiet provider answers no public ask: {err}"
    );
    let answer: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(answer["job"]["state"], "verified", "{answer}");
    let cheap_key = node_key(&cheap);
    assert_eq!(answer["receipt"]["pubkey"], cheap_key.as_str(), "{answer}");
    let output = std::fs::read_to_string(work.path().join("out/stdout")).unwrap();
    assert_eq!(output, "ROUTED");
    // delivery mode: the escrow was an HTLC on the hash the offer named, and the preimage
    // came with the output
    let preimage = answer["result"]["preimage"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    let revealed = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        hex::decode(preimage).unwrap(),
    ));
    // the cheap provider redeems its escrow; the dear one got nothing
    let cheap_dir = home.path().join("cheap");
    wait_for("the cheap provider's redeemed escrow", || {
        balance(&cheap_dir, &mint.url).0 >= 2
    });
    assert_eq!(balance(&home.path().join("dear"), &mint.url).0, 0);

    // by region: the providers whose terms name it; the wait for offers ends once every
    // provider there that sells the ask has offered
    let in_us = market(&["providers", "--region", "us-east"], &hub);
    assert_eq!(in_us.len(), 1, "{in_us:?}");
    assert_eq!(in_us[0]["did"], format!("did:nostr:{cheap_key}").as_str());
    assert_eq!(in_us[0]["regions"], json!(["us-east"]));
    let (f, b) = (file.to_str().unwrap(), buyer.to_str().unwrap());
    // `job submit` of the job file named `name`, with `extra` arguments
    let submit = |job: &mut Value, name: &str, extra: &[&str]| {
        job["name"] = json!(name);
        std::fs::write(&file, job.to_string()).unwrap();
        let mut args = vec!["job", "submit", f, "--node", &node, "--key-dir", b];
        args.extend_from_slice(extra);
        run(&args)
    };
    let mut auto = vec![
        "--route",
        "auto",
        "--region",
        "us-east",
        "--offer-secs",
        "300",
    ];
    auto.extend(["--pay", "cashu", "--mint", &mint.url]);
    let o = submit(&mut job, "in-us-east", &auto);
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(
        err.contains("1 provider(s) in us-east sell it within the bid"),
        "{err}"
    );
    assert!(
        err.contains("every provider that sells it within the bid has offered"),
        "{err}"
    );
    let answer: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(answer["receipt"]["pubkey"], cheap_key.as_str(), "{answer}");
    // nobody sells in a region no provider names; --region is for the market only
    let mars = ["--route", "auto", "--region", "mars", "--offer-secs", "2"];
    let o = submit(&mut job, "on-mars", &mars);
    super::assert_usage_error(&o, "no provider in mars offered");
    let o = submit(&mut job, "on-mars", &mars[2..4]);
    super::assert_usage_error(&o, "--region picks among the market's providers");
    drop(dear);

    // an ask nobody sells (wasm under proof) gets no offer; --route auto picks the
    // provider itself
    job["mode"] = json!("proof");
    let o = submit(
        &mut job,
        "unsold",
        &["--route", "auto", "--offer-secs", "2"],
    );
    super::assert_usage_error(&o, "no provider offered");
    let o = submit(&mut job, "unsold", &["--route", "auto", "--to", &cheap_key]);
    super::assert_usage_error(&o, "drop --to");
    // --route URL is --node; --route did:nostr:… is --to (here by gift wrap via the hub)
    job["mode"] = json!("delivery");
    let by_did = format!("did:nostr:{cheap_key}");
    for (name, route, via) in [
        ("by-url", cheap.url(""), &[][..]),
        ("by-did", by_did, &["--via", "giftwrap", "--relay", &ws][..]),
    ] {
        job["name"] = json!(name);
        std::fs::write(&file, job.to_string()).unwrap();
        let mut args = vec!["job", "submit", f, "--route", &route, "--key-dir", b];
        args.extend(["--pay", "cashu", "--mint", &mint.url]);
        args.extend_from_slice(via);
        let o = run(&args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {} {}",
            stdout(&o),
            stderr(&o)
        );
    }

    // the offers to the buyer's key, as it sees them
    let offers = market(
        &[
            "offers",
            "--key-dir",
            buyer.to_str().unwrap(),
            "--secs",
            "2",
        ],
        &hub,
    );
    let from: Vec<&str> = offers
        .iter()
        .filter(|o| o["ask"] == ask.as_str())
        .filter_map(|o| o["provider"].as_str())
        .collect();
    for k in [&cheap_key, &ghost.nostr_pubkey_hex()] {
        assert!(
            from.contains(&format!("did:nostr:{k}").as_str()),
            "{offers:?}"
        );
    }
    let cheap_offer = offers
        .iter()
        .find(|o| {
            o["ask"] == ask.as_str() && o["provider"] == format!("did:nostr:{cheap_key}").as_str()
        })
        .unwrap();
    assert_eq!(cheap_offer["htlc"], revealed.as_str(), "{offers:?}");
}

/// The node's key, from its NIP-11 document.
fn node_key(node: &Daemon) -> String {
    let doc = runtime().block_on(super::nip11(node));
    doc["self"].as_str().unwrap().to_owned()
}
