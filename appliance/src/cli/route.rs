//! The market over relays from the buyer's side. `meshnode job submit --route auto`
//! publishes the job's ask (kind 30810, open: no provider named) on the relays, gathers
//! the offers providers gift-wrap back ([`fleetmesh_market::service::offers::Offer`]) —
//! until every provider whose terms on the relays sell the ask within its bid (in a
//! `--region` asked for) has offered, or `--offer-secs` —, keeps those of providers whose
//! published terms (kind 30812) sell the ask's engine under its verification mode (and
//! name a region asked for), ranks them by price, then by the provider's standing in the
//! buyer's own ledger (its NIP-85 assertions, kind 30385), and sends the job by gift wrap to
//! the first; a provider that refuses it, answers with a failed job or not at all within
//! `--wait-secs` is skipped and the next one tried, until the ask expires or, paying, the
//! prices locked so far leave too little of the bid.
//! `meshnode market asks|offers|providers` show what the relays hold.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use fleetmesh_market::service::offers::{Offer, rank};
use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_proto::projection::Assertion;
use fleetmesh_proto::provider::Terms;
use fleetmesh_proto::{Event, NodeKeys, nip59};
use fleetmesh_schemas::constants::kind;
use serde_json::{Value, json};

use crate::cli::{ByKey, MarketArgs, MarketCommand, Outcome, RouteArgs};

impl RouteArgs {
    /// ` in REGION, …` when regions were asked for.
    fn where_(&self) -> String {
        if self.regions.is_empty() {
            return String::new();
        }
        format!(" in {}", self.regions.join(" or "))
    }
}

/// The relays the market is read on: `--relay`s, and the relay face of `node` when it was
/// given or no relay was.
pub fn market_relays(node: Option<&str>, relays: &[String]) -> anyhow::Result<Vec<String>> {
    let mut all = relays.to_vec();
    if node.is_some() || all.is_empty() {
        let url = node.unwrap_or("http://127.0.0.1:7777");
        let ws = if let Some(rest) = url.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = url.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            anyhow::bail!("--node {url:?} is not an http(s) URL")
        };
        all.push(format!("{}/", ws.trim_end_matches('/')));
    }
    for r in &all {
        anyhow::ensure!(
            r.starts_with("ws://") || r.starts_with("wss://"),
            "--relay must be a ws:// or wss:// URL, not {r:?}"
        );
    }
    Ok(all)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// The events matching `filter` on every relay (each relay that cannot be read is named on
/// stderr and skipped), at most `max` from each, deduplicated.
pub(crate) fn query_all(
    relays: &[String],
    filter: &Value,
    max: usize,
) -> anyhow::Result<Vec<Event>> {
    let rt = runtime()?;
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for url in relays {
        let got = rt.block_on(fleetmesh_relay::sync::query(
            url,
            filter,
            None,
            Duration::from_secs(10),
            max,
        ));
        match got {
            Ok(events) => out.extend(events.into_iter().filter(|e| seen.insert(e.id))),
            Err(e) => eprintln!("meshnode: {url}: {e}"),
        }
    }
    Ok(out)
}

/// Each provider's latest terms on the relays (of `authors`, or of anyone).
fn terms_on(
    relays: &[String],
    authors: Option<&[String]>,
) -> anyhow::Result<HashMap<String, (Event, Terms)>> {
    let mut filter =
        json!({"kinds": [kind::COMPUTE_PROVIDER], "#d": [fleetmesh_proto::provider::TERMS_D]});
    if let Some(a) = authors {
        filter["authors"] = json!(a);
    }
    let mut latest: HashMap<String, (Event, Terms)> = HashMap::new();
    for e in query_all(relays, &filter, 10_000)? {
        let Ok(t) = Terms::from_event(&e) else {
            continue;
        };
        let who = hex::encode(e.pubkey);
        if latest
            .get(&who)
            .is_none_or(|(old, _)| old.created_at < e.created_at)
        {
            latest.insert(who, (e, t));
        }
    }
    Ok(latest)
}

/// The standing of providers in `me`'s own ledger: its NIP-85 assertions (rank 0–100).
fn standing(relays: &[String], me: &str) -> anyhow::Result<HashMap<String, u8>> {
    let filter = json!({"kinds": [kind::ASSERTION_PROJECTION], "authors": [me]});
    Ok(query_all(relays, &filter, 10_000)?
        .iter()
        .filter_map(|e| Assertion::from_event(e).ok())
        .filter_map(|a| {
            let key = a.subject.strip_prefix("did:nostr:")?.to_owned();
            Some((key, a.rank?))
        })
        .collect())
}

/// Compute messages opened: (sender hex, message).
type Opened = Vec<(String, Value)>;

/// Gift wraps to `keys` on `relays` for `secs` seconds at most, opened: (sender hex,
/// message), of compute messages only; `first` (if any) published on each relay before;
/// the wait ends early once what came is `enough`.
fn gather(
    keys: &NodeKeys,
    relays: &[String],
    first: Option<&Event>,
    secs: u64,
    enough: &dyn Fn(&Opened) -> bool,
) -> anyhow::Result<Opened> {
    let me = keys.nostr_pubkey_hex();
    let since = fleetmesh_proto::unix_now().saturating_sub(nip59::MAX_TWEAK_SECS + 600);
    let filter = json!({"kinds": [kind::GIFT_WRAP], "#p": [me], "since": since});
    runtime()?.block_on(async {
        let client: std::sync::Arc<dyn fleetmesh_port::Remotes> =
            std::sync::Arc::new(fleetmesh_relay::Client);
        let (mut rx, out, tasks) =
            fleetmesh_port::subscribe_all(&client, relays, &filter, *keys.nostr(), |e| {
                eprintln!("meshnode: {e}")
            });
        if let Some(e) = first {
            // each connection sends its REQ before what it publishes: offers to the ask
            // come to the subscription
            let _ = out.send(e.clone());
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        let mut got = Vec::new();
        let mut seen = std::collections::HashSet::new();
        while let Ok(Some(wrap)) = tokio::time::timeout_at(deadline, rx.recv()).await {
            if !seen.insert(wrap.id) {
                continue;
            }
            let Ok(opened) = nip59::unwrap(keys.nostr(), &wrap) else {
                continue;
            };
            if opened.rumor.kind != kind::COMPUTE_RUMOR {
                continue;
            }
            if let Ok(v) = serde_json::from_str::<Value>(&opened.rumor.content) {
                got.push((hex::encode(opened.sender), v));
                if enough(&got) {
                    break;
                }
            }
        }
        for t in tasks {
            t.abort();
        }
        Ok(got)
    })
}

/// What a provider's terms say about paying it, in the shape of a node's NIP-11 `fleetmesh`
/// object (its `jobs.prices` and `settlement.mints`), which `--pay` checks before locking.
pub fn as_offer(terms: &Terms) -> Value {
    json!({"jobs": {"prices": terms.prices}, "settlement": {"mints": terms.mints}})
}

/// `--route auto`: publishes `ask` on `relays`, takes offers for `route.offer_secs` at most
/// (until every provider whose terms sell the ask, in `route`'s regions, has offered), and
/// sends the job (`seal`: the submission body for a provider, its terms and its offer,
/// whose price `--pay` locks, to its delivery hash when it names one; `paying`: whether
/// it does) to the best, then the next, as the module says — paid attempts together
/// within the bid.
pub fn by_market(
    keys: &NodeKeys,
    ask: &Event,
    seal: &dyn Fn(&str, &Terms, &Offer) -> anyhow::Result<Value>,
    job_id: &str,
    by_key: &ByKey,
    relays: &[String],
    (route, paying): (&RouteArgs, bool),
) -> anyhow::Result<Outcome> {
    let checked = Ask::from_event(ask.clone(), fleetmesh_proto::unix_now())?;
    // paid attempts together stay within the bid (escrow a silent provider holds comes
    // back only after its locktime)
    let mut budget =
        fleetmesh_market::service::offers::bid_sat(&checked.content["bid"]).filter(|_| paying);
    let me = keys.nostr_pubkey_hex();
    let sells = |t: &Terms| t.sells(checked.engine, checked.mode);
    // who would offer for this ask by the terms on the relays now (engine, mode, tokens,
    // price within the bid): once each has offered, the wait is over (one that is away
    // makes the buyer wait the whole time)
    let mut terms = terms_on(relays, None)?;
    let sellers: Vec<String> = terms
        .iter()
        .filter(|(who, (_, t))| **who != me && t.in_any_region(&route.regions))
        .filter(|(_, (_, t))| fleetmesh_market::service::offers::terms_would_offer(t, &checked))
        .map(|(who, _)| who.clone())
        .collect();
    let ask_id = ask.id_hex();
    let all_offered = |got: &Opened| {
        !sellers.is_empty()
            && sellers.iter().all(|s| {
                got.iter()
                    .any(|(who, m)| who == s && m["type"] == "offer" && m["ask"] == ask_id.as_str())
            })
    };
    eprintln!(
        "meshnode: ask {ask_id} ({} under {}) published on {}; {} provider(s){} sell it \
         within the bid by their terms; taking offers for up to {} s",
        checked.engine,
        checked.mode,
        relays.join(", "),
        sellers.len(),
        route.where_(),
        route.offer_secs
    );
    let got = gather(keys, relays, Some(ask), route.offer_secs, &all_offered)?;
    if all_offered(&got) {
        eprintln!("meshnode: every provider that sells it within the bid has offered");
    }
    let mut offers = Vec::new();
    for (sender, message) in got {
        if message["type"] != "offer" || message["ask"] != ask_id.as_str() {
            continue;
        }
        match Offer::read(&sender, &message, &checked) {
            Ok(o) => offers.push(o),
            Err(r) => eprintln!("meshnode: an offer from {sender} refused: {r}"),
        }
    }
    // the terms of those who offered but had none on the relays before the ask went out
    let unknown: Vec<String> = offers
        .iter()
        .map(|o| o.provider.clone())
        .filter(|p| !terms.contains_key(p))
        .collect();
    if !unknown.is_empty() {
        terms.extend(terms_on(relays, Some(&unknown))?);
    }
    // a provider is taken at its published word: terms that sell this engine and mode,
    // in a region asked for
    offers.retain(|o| match terms.get(&o.provider) {
        Some((_, t)) if sells(t) && !t.in_any_region(&route.regions) => {
            eprintln!(
                "meshnode: {} offered, but its terms name no region{}; skipped",
                o.provider,
                route.where_()
            );
            false
        }
        Some((_, t)) if sells(t) => true,
        _ => {
            eprintln!(
                "meshnode: {} offered, but its terms do not sell {} under {}; skipped",
                o.provider, checked.engine, checked.mode
            );
            false
        }
    });
    let standing = standing(relays, &me)?;
    let ranked = rank(offers, &standing);
    anyhow::ensure!(
        !ranked.is_empty(),
        "no provider{} offered to run ask {ask_id} within {} s",
        route.where_(),
        route.offer_secs
    );
    for o in &ranked {
        eprintln!(
            "meshnode: offer from did:nostr:{}: {} sat, standing {}",
            o.provider,
            o.price_sat,
            standing
                .get(&o.provider)
                .map_or("unknown".to_owned(), u8::to_string)
        );
    }
    let mut tried = Vec::new();
    for o in &ranked {
        if fleetmesh_proto::unix_now() >= checked.expires_at {
            eprintln!("meshnode: the ask expired; no more providers are tried");
            break;
        }
        if let Some(left) = budget {
            if o.price_sat > left {
                eprintln!(
                    "meshnode: did:nostr:{} asks {} sat; {left} sat of the bid are left; skipped",
                    o.provider, o.price_sat
                );
                continue;
            }
            budget = Some(left - o.price_sat);
        }
        let body = match seal(&o.provider, &terms[&o.provider].1, o) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("meshnode: did:nostr:{}: {e:#}; trying the next", o.provider);
                tried.push(o.provider.clone());
                continue;
            }
        };
        eprintln!("meshnode: sending the job to did:nostr:{}", o.provider);
        match crate::cli::bykey::by_giftwrap(keys, &o.provider, &body, job_id, by_key, relays) {
            Ok(Outcome::Ok) => return Ok(Outcome::Ok),
            Ok(_) => eprintln!(
                "meshnode: did:nostr:{} did not deliver a verified job; trying the next",
                o.provider
            ),
            Err(e) => eprintln!("meshnode: did:nostr:{}: {e:#}; trying the next", o.provider),
        }
        tried.push(o.provider.clone());
    }
    anyhow::bail!(
        "no provider delivered job {job_id} (tried {})",
        tried.join(", ")
    )
}

/// `meshnode market …`.
pub fn market(args: &MarketArgs) -> anyhow::Result<Outcome> {
    let relays = market_relays(args.node.as_deref(), &args.relays)?;
    let wanted = |m: Option<&str>| args.mode.is_none_or(|w| m == Some(w.as_str()));
    let rows: Vec<Value> = match &args.what {
        MarketCommand::Asks => {
            let now = fleetmesh_proto::unix_now();
            let filter = json!({"kinds": [kind::COMPUTE_ASK]});
            query_all(&relays, &filter, 10_000)?
                .into_iter()
                .filter_map(|e| Ask::from_event(e, now).ok())
                .filter(|a| wanted(Some(a.mode.as_str())))
                .map(|a| {
                    json!({"id": a.event.id_hex(), "address": a.address(), "buyer": a.buyer(),
                           "engine": a.engine, "mode": a.mode, "bid": a.content["bid"],
                           "limits": a.content["limits"], "expires_at": a.expires_at})
                })
                .collect()
        }
        MarketCommand::Providers => {
            let mut all: Vec<(String, (Event, Terms))> =
                terms_on(&relays, None)?.into_iter().collect();
            all.sort_by(|a, b| a.0.cmp(&b.0));
            all.into_iter()
                .filter(|(_, (_, t))| args.mode.is_none_or(|m| t.modes.contains(&m)))
                .filter(|(_, (_, t))| t.in_any_region(&args.regions))
                .map(|(who, (e, t))| {
                    let mut v = serde_json::to_value(&t).unwrap_or_default();
                    v["did"] = json!(format!("did:nostr:{who}"));
                    v["terms"] = json!(e.id_hex());
                    v["published_at"] = json!(e.created_at);
                    v
                })
                .collect()
        }
        MarketCommand::Offers { key_dir, secs } => {
            let keys = crate::cli::job::buyer_keys(&crate::cli::JobNode {
                given_node: None,
                key_dir: key_dir.clone(),
                token: None,
            })?;
            gather(&keys, &relays, None, *secs, &|_| false)?
                .into_iter()
                .filter(|(_, m)| m["type"] == "offer" && wanted(m["mode"].as_str()))
                .map(|(who, m)| {
                    json!({"provider": format!("did:nostr:{who}"), "ask": m["ask"],
                           "engine": m["engine"], "mode": m["mode"], "price": m["price"],
                           "terms": m["terms"], "htlc": m["htlc"]})
                })
                .collect()
        }
    };
    if args.json {
        println!("{}", Value::Array(rows));
    } else {
        for r in &rows {
            println!("{r}");
        }
        if rows.is_empty() {
            eprintln!("meshnode: nothing on {}", relays.join(", "));
        }
    }
    Ok(Outcome::Ok)
}
