//! `meshnode peers`: the peers a running node sees (`GET /v1/peers`): each one's key, DID,
//! class, transport, whether its protocol digest is ours, its last heartbeat, its last
//! sync round and what the rounds moved, the traffic with it both ways and what was
//! refused from it by reason; and the gossip messages and QUIC hellos refused, per sender.
//! `meshnode shards`: the shards it knows (`GET /v1/shards`) and the state of its copy.

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

/// `GET path` on the node, with its token; `None` when printed whole (`--json`).
pub(crate) fn ask(args: &PeersArgs, path: &str) -> anyhow::Result<Option<Value>> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()?;
    let url = format!("{}{path}", args.node.trim_end_matches('/'));
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
        return Ok(None);
    }
    Ok(Some(body))
}

/// `meshnode shards`.
pub fn shards(args: &PeersArgs) -> anyhow::Result<Outcome> {
    let Some(body) = ask(args, "/v1/shards")? else {
        return Ok(Outcome::Ok);
    };
    let shards = body["shards"].as_array().cloned().unwrap_or_default();
    if shards.is_empty() {
        println!("no shards");
    }
    for s in &shards {
        let copy = &s["copy"];
        println!(
            "{} held by {} ({}{}): {} events, digest {} — ours: {}{}",
            s["id"].as_str().unwrap_or("-"),
            s["holder"].as_str().unwrap_or("-"),
            s["class"].as_str().unwrap_or("class unknown"),
            if s["authoritative"] == true {
                ", authoritative"
            } else {
                ""
            },
            s["event_count"],
            s["digest"].as_str().unwrap_or("-"),
            copy["state"].as_str().unwrap_or("-"),
            match (copy["event_count"].as_u64(), copy["why"].as_str()) {
                (Some(n), _) => format!(" ({n} events)"),
                (None, Some(why)) => format!(" ({why})"),
                _ => String::new(),
            },
        );
    }
    Ok(Outcome::Ok)
}

/// `meshnode peers`.
pub fn peers(args: &PeersArgs) -> anyhow::Result<Outcome> {
    let Some(body) = ask(args, "/v1/peers")? else {
        return Ok(Outcome::Ok);
    };
    let now = fleetmesh_proto::unix_now();
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
