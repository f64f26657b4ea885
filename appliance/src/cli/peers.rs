//! `meshnode peers`: the peers a running node sees (`GET /v1/peers`): each one's key, DID,
//! class, transport, whether its protocol digest is ours, its last heartbeat, its last
//! sync round and what the rounds moved, the traffic with it both ways and what was
//! refused from it by reason; and the gossip messages and QUIC hellos refused, per sender.

use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use serde_json::Value;

use crate::cli::Outcome;

/// `meshnode peers`.
#[derive(Debug, Args)]
pub struct PeersArgs {
    /// The node's base URL [default: http://127.0.0.1:7777].
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:7777")]
    pub node: String,
    /// The node's API token (its `[api] token`), when it has one.
    #[arg(
        long,
        env = "MESHNODE_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Print the node's answer as one JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
}

fn ago(now: u64, t: &Value) -> String {
    t.as_u64().map_or("never".into(), |t| {
        format!("{} s ago", now.saturating_sub(t))
    })
}

/// `meshnode peers`.
pub fn peers(args: &PeersArgs) -> anyhow::Result<Outcome> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let url = format!("{}/v1/peers", args.node.trim_end_matches('/'));
    let mut req = client.get(&url);
    if let Some(t) = &args.token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().with_context(|| format!("asking {url}"))?;
    let status = resp.status();
    let body: Value = resp
        .json()
        .with_context(|| format!("{url}: the answer is not JSON"))?;
    anyhow::ensure!(status.is_success(), "{url}: {status}: {body}");
    if args.json {
        println!("{body}");
        return Ok(Outcome::Ok);
    }
    let now = crate::node::unix_now();
    let peers = body["peers"].as_array().cloned().unwrap_or_default();
    if peers.is_empty() {
        println!("no peers");
    }
    for p in &peers {
        let s = |k: &str| p[k].as_str().unwrap_or("-").to_owned();
        println!(
            "{} {} class={} transport={}{} digest={} link={} heartbeat={} sync={} rounds={}/{} fetched={} sent={} refused={}{}",
            s("id"),
            s("did"),
            s("class"),
            s("transport"),
            p["path"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            if p["digest_match"] == true {
                "ours".to_owned()
            } else {
                format!("differs ({})", s("digest"))
            },
            s("link"),
            ago(now, &p["last_heartbeat"]),
            ago(now, &p["last_sync"]),
            p["rounds_ok"],
            p["rounds_failed"],
            p["fetched"],
            p["sent"],
            p["refused"],
            p["last_error"]
                .as_str()
                .map(|e| format!(" error: {e}"))
                .unwrap_or_default(),
        );
        let t = &p["traffic"];
        if t.is_object() {
            println!(
                "  traffic: in {} events / {} bytes, out {} events / {} bytes; refused from it: {} outside the agreed shards, {} malformed, {} forged, {} invalid, {} over its rate",
                t["events_in"],
                t["bytes_in"],
                t["events_out"],
                t["bytes_out"],
                t["out_of_filter"],
                t["malformed"],
                t["forged"],
                t["invalid"],
                t["rate_limited"],
            );
        }
    }
    for (what, key) in [
        ("gossip refused from", "gossip_refused"),
        ("hello refused from", "hello_refused"),
    ] {
        if let Some(m) = body[key].as_object() {
            for (who, n) in m {
                println!("{what} {who}: {n}");
            }
        }
    }
    Ok(Outcome::Ok)
}
