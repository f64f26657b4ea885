//! What the control socket ([`super::control`]) answers: `status` (identity, address,
//! uptime, protocol digest, relay counters), `config`, `reload`, `apply`, `ledger.settle`
//! and, with the federation, `grant.issue|list|revoke`.

use std::net::SocketAddr;
use std::sync::Arc;

#[cfg(feature = "federation")]
use super::background::Accounts;
use super::services::Services;

/// What the control socket answers: `status` (identity, address, uptime, protocol
/// digest, relay counters), `config` (the settings in effect, the API token only said to be
/// set), `reload` (`meshnode.toml` and the stored manifests read again,
/// [`crate::reconcile`]), `apply` (manifests, [`crate::apply`]) and `ledger.settle` (a
/// payment the operator's own `job submit` or `wallet check` made with this node's key,
/// recorded in its books, [`crate::settlement::record_as_buyer`]).
pub fn handler(
    s: &Services,
    listen: SocketAddr,
    #[cfg(feature = "federation")] accounts: Accounts,
) -> super::control::Handler {
    let (node, relay, books, live) = (&s.node, s.relay.clone(), s.books.clone(), s.live.clone());
    let started = std::time::Instant::now();
    let identity = serde_json::json!({
        "pubkey": node.keys.nostr_pubkey_hex(),
        "did": node.keys.did(),
        "version": env!("CARGO_PKG_VERSION"),
        "listen": listen.to_string(),
        "dir": node.dir.display().to_string(),
        "protocol_digest": fleetmesh_schemas::SchemaSet::embedded().digest().to_hex(),
    });
    let dir = node.dir.clone();
    Arc::new(move |cmd: &str, req: &serde_json::Value| match cmd {
        "status" => {
            use std::sync::atomic::Ordering::Relaxed;
            let m = relay.metrics();
            let mut s = identity.clone();
            s["uptime_secs"] = serde_json::json!(started.elapsed().as_secs());
            s["relay"] = serde_json::json!({
                "connections_open": m.connections_open.load(Relaxed),
                "subscriptions_open": m.subscriptions_open.load(Relaxed),
                "events_received": m.events_received.load(Relaxed),
                "events_stored": m.events_stored.load(Relaxed),
                "store_errors": m.store_errors().0,
            });
            Some(s)
        }
        "config" => {
            let mut config = serde_json::to_value(live.current()).unwrap_or_default();
            if !config["api"]["token"].is_null() {
                config["api"]["token"] = serde_json::json!("(set)");
            }
            Some(config)
        }
        "reload" => Some(crate::apply::counted(
            "reload",
            live.reload()
                .map(|r| serde_json::json!({"reconciled": r.to_json()})),
        )),
        "apply" => {
            let docs = req["manifests"].as_array().map_or(&[][..], Vec::as_slice);
            Some(crate::apply::counted(
                "socket",
                crate::apply::apply(&dir, docs, &live),
            ))
        }
        "ledger.settle" => Some(settle_command(&books, req)),
        #[cfg(feature = "federation")]
        "grant.issue" | "grant.list" | "grant.revoke" => Some(grant_command(&accounts, cmd, req)),
        _ => None,
    })
}

/// `ledger.settle` on the control socket: `{"peer": hex key, "settlement": {…}}`.
fn settle_command(books: &crate::settlement::Books, req: &serde_json::Value) -> serde_json::Value {
    let refuse = |m: String| serde_json::json!({"error": {"code": "bad_request", "message": m}});
    let peer = req["peer"].as_str().unwrap_or_default();
    if peer.len() != 64 || !peer.bytes().all(|b| b.is_ascii_hexdigit()) {
        return refuse(format!("peer {peer:?}: a Nostr key in hex"));
    }
    let s: fleetmesh_ledger::Settlement = match serde_json::from_value(req["settlement"].clone()) {
        Ok(s) => s,
        Err(e) => return refuse(format!("the settlement: {e}")),
    };
    if let Err(why) = s.check() {
        return refuse(why);
    }
    match crate::settlement::record(books, &peer.to_ascii_lowercase(), s) {
        Ok(()) => serde_json::json!({"recorded": true}),
        Err(e) => serde_json::json!({"error": {"code": "internal", "message": format!("{e:#}")}}),
    }
}

/// `meshnode grant issue|list|revoke` on the control socket.
#[cfg(feature = "federation")]
fn grant_command(accounts: &Accounts, cmd: &str, req: &serde_json::Value) -> serde_json::Value {
    let refuse = |code: &str, m: String| serde_json::json!({"error": {"code": code, "message": m}});
    let Some(acc) = accounts.get() else {
        return refuse(
            "no_ledger",
            "the ledger runs with the federation ([peering] quic_listen or gossip_listen)".into(),
        );
    };
    let peer = req["peer"].as_str().unwrap_or_default().to_owned();
    let rt = tokio::runtime::Handle::current();
    match cmd {
        "grant.list" => serde_json::json!({"grants": acc.grants()}),
        "grant.revoke" => serde_json::json!({"revoked": rt.block_on(acc.revoke(&peer))}),
        _ => {
            let n = |k: &str| req[k].as_u64().unwrap_or(0);
            let events = n("events");
            if events == 0 {
                return refuse("bad_request", "events: at least 1".into());
            }
            let terms = crate::config::LedgerSection {
                window_secs: n("window_secs").max(1),
                grant_events: events,
                grant_bytes: n("bytes"),
                grant_min: n("min"),
                grant_increase: n("increase"),
                grant_shards: req["shards"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|s| s.as_str().unwrap_or("?").to_owned())
                            .collect()
                    })
                    .unwrap_or_default(),
                ..Default::default()
            };
            if let Err(why) = terms.check() {
                return refuse("bad_request", why);
            }
            let t = terms.terms().expect("events ≥ 1");
            match rt.block_on(acc.issue(&peer, t, terms.window_secs, terms.shards())) {
                Ok(e) => serde_json::json!({"grant": e.to_value()}),
                Err(e) => refuse("bad_request", format!("{e:#}")),
            }
        }
    }
}
