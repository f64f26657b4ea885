//! `meshnode ledger replay FILE` and `meshnode ledger show DIR|--node URL`: the
//! accountability ledger's decisions recomputed from an evidence log alone, and each
//! peer's standing and payments (`--settlements`: each payment, matched to its job's
//! receipt with `--job`) ([`fleetmesh_ledger`], [`crate::ledger`]); `meshnode grant …` on the
//! control socket; `meshnode report list`: the standing reports (kind 30802) on a relay.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde::Deserialize as _;
use serde_json::json;

use crate::cli::Outcome;

/// `meshnode ledger …`.
#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Recompute every decision from an evidence log (`DIR/ledger/evidence.jsonl`) alone
    /// and print them, one per line: what the node decided live; then each torn last line
    /// the node cut from the log (a `repaired` line: where, how many bytes, the
    /// `evidence.torn-<time>` file they went to). Lines that do not parse are named on
    /// stderr (exit 2 after the decisions).
    Replay(ReplayArgs),
    /// Each peer's standing (severity, capacity, probation, suspension, revocation,
    /// grants, chain heads, payments summed), from a node directory's log or a running
    /// node's `GET /v1/ledger`; with `--decisions`, the decisions too; with
    /// `--settlements`, each payment.
    Show(ShowArgs),
}

/// `meshnode grant …`: the node's grants, on its control socket.
#[derive(Debug, Subcommand)]
pub enum GrantCommand {
    /// Grant one peer (its Nostr key, hex) EVENTS per window: a kind 30801 event, logged,
    /// published and sent to the peer; replaces the grant it had.
    Issue {
        /// The peer's Nostr key (hex).
        peer: String,
        /// Events per window (the AIMD ceiling and first capacity).
        #[arg(long)]
        events: u64,
        /// Bytes per window at full capacity [default: 4 KiB per event].
        #[arg(long, default_value_t = 0)]
        bytes: u64,
        /// Window length, seconds.
        #[arg(long, default_value_t = 60)]
        window: u64,
        /// The capacity's floor [default: a quarter of the events].
        #[arg(long, default_value_t = 0)]
        min: u64,
        /// Added after each clean window [default: a tenth of the events].
        #[arg(long, default_value_t = 0)]
        increase: u64,
        /// A shard the grant covers: a NIP-01 filter, JSON (repeatable, at most 16).
        /// Receipts then count per shard, and the peer's pushes outside every shard are
        /// refused (S3) [default: every event].
        #[arg(long, value_name = "FILTER")]
        shard: Vec<String>,
        /// The node directory [default: $MESHNODE_HOME or the platform data directory].
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// The grants the node gives, with the capacity in force.
    List {
        /// The node directory.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Revoke the node's grant to a peer (logged; deleted by NIP-09 from its relay).
    Revoke {
        /// The peer's Nostr key (hex).
        peer: String,
        /// The node directory.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// `meshnode grant …`.
pub fn grant(cmd: &GrantCommand) -> anyhow::Result<Outcome> {
    let (req, dir) = match cmd {
        GrantCommand::Issue {
            peer,
            events,
            bytes,
            window,
            min,
            increase,
            shard,
            dir,
        } => (
            json!({"cmd": "grant.issue", "peer": peer, "events": events, "bytes": bytes,
                "window_secs": window, "min": min, "increase": increase, "shards": shard}),
            dir,
        ),
        GrantCommand::List { dir } => (json!({"cmd": "grant.list"}), dir),
        GrantCommand::Revoke { peer, dir } => (json!({"cmd": "grant.revoke", "peer": peer}), dir),
    };
    let dir = crate::node::dir_or_home(dir.clone())?;
    let answer = crate::daemon::control::request(&dir, &req)?;
    if let Some(why) = answer["error"]["message"].as_str() {
        eprintln!("meshnode grant: {why}");
        return Ok(Outcome::Failing);
    }
    println!("{answer}");
    Ok(Outcome::Ok)
}

/// `meshnode report …`: standing reports (kind 30802).
#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// The standing reports a relay holds (a node's face by default), each checked
    /// (signature, schema): who reported whom, the rung, the remedy, the window, the
    /// evidence lines it rests on. A node keeps its latest report per peer.
    List(ReportArgs),
}

/// `meshnode report list`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The relay to ask (a node's face).
    #[arg(long, value_name = "URL", default_value = "ws://127.0.0.1:7777/")]
    pub relay: String,
    /// Only reports about this peer (its Nostr key, hex).
    #[arg(long, value_name = "KEY")]
    pub about: Option<String>,
    /// Only reports by this node (its Nostr key, hex).
    #[arg(long, value_name = "KEY")]
    pub by: Option<String>,
    /// A CA certificate (PEM) to trust for a wss:// relay.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Seconds to wait for each answer.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub timeout_secs: u64,
    /// One JSON object per report (`id`, `by`, `at`, and the report's content) instead of
    /// a line of words each.
    #[arg(long)]
    pub json: bool,
}

/// The most reports `meshnode report list` takes from one relay.
const MAX_REPORTS: usize = 4096;

/// `meshnode report list`.
pub fn reports(args: &ReportArgs) -> anyhow::Result<Outcome> {
    use anyhow::Context as _;
    use fleetmesh_proto::noun::Noun as _;
    let url = args
        .relay
        .replacen("http://", "ws://", 1)
        .replacen("https://", "wss://", 1);
    anyhow::ensure!(
        url.starts_with("ws://") || url.starts_with("wss://"),
        "--relay must be a ws:// or wss:// URL, not {:?}",
        args.relay
    );
    let mut filter =
        json!({"kinds": [fleetmesh_schemas::constants::kind::REPORT], "limit": MAX_REPORTS});
    for (key, tag) in [(&args.about, "#p"), (&args.by, "authors")] {
        if let Some(k) = key {
            anyhow::ensure!(
                k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()),
                "{k:?}: a Nostr key is 64 hex digits"
            );
            filter[tag] = json!([k.to_ascii_lowercase()]);
        }
    }
    let ca = crate::cli::read_ca(args.ca.as_deref())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut events = runtime.block_on(fleetmesh_relay::sync::query(
        &url,
        &filter,
        ca.as_deref(),
        std::time::Duration::from_secs(args.timeout_secs),
        MAX_REPORTS,
    ))?;
    events.sort_by_key(|e| std::cmp::Reverse(e.created_at));
    let mut bad = false;
    for e in &events {
        let r = match fleetmesh_proto::ledger::Report::from_event(e) {
            Ok(r) => r,
            Err(why) => {
                eprintln!("meshnode report: {} refused: {why}", e.id_hex());
                bad = true;
                continue;
            }
        };
        if args.json {
            let mut v = serde_json::to_value(&r)?;
            v["id"] = json!(e.id_hex());
            v["by"] = json!(hex::encode(e.pubkey));
            v["at"] = json!(e.created_at);
            println!("{v}");
        } else {
            println!(
                "{} about {}: {} {} (window {}, {} evidence lines){}",
                hex::encode(e.pubkey),
                r.subject,
                r.rung,
                r.remedy.map_or("-", |m| m.as_str()),
                r.window.map_or("-".into(), |w| w.to_string()),
                r.evidence.as_ref().map_or(0, Vec::len),
                r.note.map(|n| format!(": {n}")).unwrap_or_default(),
            );
        }
    }
    if events.is_empty() && !args.json {
        println!("no reports");
    }
    Ok(if bad { Outcome::Malformed } else { Outcome::Ok })
}

/// `meshnode ledger replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The evidence log: a node's `ledger/evidence.jsonl`, or several segments of it in
    /// order (`ledger/evidence-*.jsonl` then `evidence.jsonl`), replayed as one log. A
    /// segment alone replays from the checkpoint it begins with.
    #[arg(value_name = "FILE", required = true)]
    pub file: Vec<PathBuf>,
    /// JSON lines (`peer`, `window`, `severity`, `remedy`, `capacity`, `evidence`, `why`,
    /// `at`) instead of a line of words each; a cut torn line as `{"type": "repaired",
    /// "line", "log", "at", "offset", "bytes", "moved_to"}`.
    #[arg(long)]
    pub json: bool,
}

/// `meshnode ledger show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A node directory (its `ledger/evidence.jsonl` is replayed).
    #[arg(value_name = "DIR", conflicts_with = "node")]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub remote: crate::cli::peers::PeersArgs,
    /// The decisions too, one JSON line each (as `ledger replay --json` prints them).
    #[arg(long)]
    pub decisions: bool,
    /// The payments too (of a node directory, every kept segment): one JSON line each —
    /// the peer, the node's side (`payee`, `payer`), what became of it, the sats, the mint,
    /// the job as its receipt names it and the receipt.
    #[arg(long, requires = "dir")]
    pub settlements: bool,
    /// With `--settlements`, only the payments of this job (its id as the receipt names
    /// it: `job receipt` shows it).
    #[arg(long, value_name = "ID", requires = "settlements")]
    pub job: Option<String>,
}

/// `meshnode ledger replay`.
pub fn replay(args: &ReplayArgs) -> anyhow::Result<Outcome> {
    let files: Vec<&Path> = args.file.iter().map(PathBuf::as_path).collect();
    let r = fleetmesh_ledger::evidence::replay_all(&files)?;
    for d in &r.decisions {
        if args.json {
            println!("{}", serde_json::to_string(d)?);
        } else {
            println!(
                "window {} {} {} {} → capacity {}: {}",
                d.window, d.peer, d.severity, d.remedy, d.capacity, d.why
            );
        }
    }
    for x in &r.repairs {
        if args.json {
            let mut v = serde_json::to_value(x)?;
            v["type"] = json!("repaired");
            println!("{v}");
        } else {
            println!(
                "line {}: {} was cut at byte {} at {}: a torn last line of {} bytes moved to {}",
                x.line, x.log, x.offset, x.at, x.bytes, x.moved_to
            );
        }
    }
    for x in &r.refused {
        eprintln!("line {}: {}", x.line, x.reason);
    }
    Ok(if r.refused.is_empty() {
        Outcome::Ok
    } else {
        Outcome::Malformed
    })
}

/// `meshnode ledger show`.
pub fn show(args: &ShowArgs) -> anyhow::Result<Outcome> {
    let body = match &args.dir {
        Some(dir) => fleetmesh_ledger::store::standing(&dir.join("ledger"))?,
        None => {
            let quiet = crate::cli::peers::PeersArgs {
                node: args.remote.node.clone(),
                token: args.remote.token.clone(),
                json: false,
            };
            crate::cli::peers::ask(&quiet, "/v1/ledger")?.unwrap_or_default()
        }
    };
    if args.remote.json {
        println!("{body}");
        return Ok(Outcome::Ok);
    }
    let peers = body["peers"].as_object().cloned().unwrap_or_default();
    if peers.is_empty() {
        println!("no peers in the ledger");
    }
    for (peer, s) in &peers {
        if let Some(p) = s.get("settled") {
            println!(
                "{peer}: {} jobs paid; received {} sat ({} unredeemed, {} released), paid {} \
                 sat ({} refunded)",
                p["jobs"],
                p["received_sat"],
                p["unredeemed_sat"].as_u64().unwrap_or(0),
                p["released_sat"].as_u64().unwrap_or(0),
                p["paid_sat"],
                p["refunded_sat"].as_u64().unwrap_or(0),
            );
            if !fleetmesh_ledger::Standing::deserialize(s).is_ok_and(|s| s.beyond_payments()) {
                continue;
            }
        }
        let state = if s["revoked"] == true {
            "revoked".to_owned()
        } else if let Some(u) = s["suspended_until"].as_u64() {
            format!("suspended until {u}")
        } else if s["probation"] == true {
            "on probation".to_owned()
        } else {
            "in good standing".to_owned()
        };
        println!(
            "{peer}: {} {state}, capacity {} events/window, last window {}, grant out {}, grant in {}",
            s["severity"].as_str().unwrap_or("S0"),
            s["capacity"],
            s["last_window"],
            s["grant_out"].as_str().unwrap_or("none"),
            s["grant_in"].as_str().unwrap_or("none"),
        );
    }
    if args.decisions {
        for d in body["decisions"].as_array().into_iter().flatten() {
            println!("{d}");
        }
    }
    if let (true, Some(dir)) = (args.settlements, &args.dir)
        && dir.join(crate::node::LEDGER_DIR).is_dir()
    {
        let segments = fleetmesh_ledger::store::segments(&dir.join(crate::node::LEDGER_DIR))?;
        let paths: Vec<&Path> = segments.iter().map(PathBuf::as_path).collect();
        for s in fleetmesh_ledger::evidence::settlements(&paths)? {
            if args.job.is_none() || s.settlement.job == args.job {
                println!("{}", serde_json::to_string(&s)?);
            }
        }
    }
    Ok(Outcome::Ok)
}
