//! `meshnode watch`: the monitoring audit of a node, for people and for probes.
//!
//! Given a node directory it checks what lies on disk — the configuration, the directory's
//! and the keys' modes, every SQLite database (`quick_check`), the free space of the disk
//! it is on — and asks the daemon at the configured address (or `--node URL`) for its
//! health and counters: store errors, events rejected by the rate limits, connections,
//! the proving, verifying and inference queues (a full proving queue is degraded).
//! `--healthcheck` folds failing into 1 for container probes (Docker reserves 2).
//! One line per finding (`ok`, `degraded`, `failing`), or one JSON object with `--json`.
//! Exit 0 when all is well, 1 when something is degraded, 2 when something fails or the
//! daemon does not answer — what Nagios, systemd and Kubernetes probes expect.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::cli::{Outcome, WatchArgs};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Ok,
    Degraded,
    Failing,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Degraded => "degraded",
            Level::Failing => "failing",
        }
    }
}

/// One thing checked.
#[derive(Debug)]
struct Finding {
    check: String,
    level: Level,
    message: String,
}

fn found(out: &mut Vec<Finding>, check: &str, level: Level, message: impl Into<String>) {
    out.push(Finding {
        check: check.to_owned(),
        level,
        message: message.into(),
    });
}

/// Runs `meshnode watch`.
pub fn run(args: &WatchArgs) -> anyhow::Result<Outcome> {
    let mut out = Vec::new();
    let mut url = args.node.clone();
    if let Some(dir) = &args.dir {
        if let Some(listen) = node_checks(dir, args.min_free_bytes, &mut out)
            && url.is_none()
        {
            url = Some(listen);
        }
    } else if url.is_none() {
        anyhow::bail!("give a node directory, --node URL, or both");
    }
    if let Some(url) = &url {
        daemon_checks(url.trim_end_matches('/'), &mut out);
    }
    let worst = out.iter().map(|f| f.level).max().unwrap_or(Level::Ok);
    if args.json {
        let findings: Vec<Value> = out
            .iter()
            .map(|f| json!({"check": f.check, "level": f.level.as_str(), "message": f.message}))
            .collect();
        println!(
            "{}",
            json!({"status": worst.as_str(), "findings": findings})
        );
    } else {
        for f in &out {
            println!("{:<9} {}: {}", f.level.as_str(), f.check, f.message);
        }
    }
    Ok(match worst {
        Level::Ok => Outcome::Ok,
        Level::Degraded => Outcome::Negative,
        Level::Failing if args.healthcheck => Outcome::Negative,
        Level::Failing => Outcome::Failing,
    })
}

/// What lies on disk; the daemon's address from the configuration, when it loads.
fn node_checks(dir: &Path, min_free: u64, out: &mut Vec<Finding>) -> Option<String> {
    if !crate::node::exists(dir) {
        found(
            out,
            "node",
            Level::Failing,
            format!("{} holds no node", dir.display()),
        );
        return None;
    }
    // meshnode.toml and the applied manifests on top: what the next start reads
    let config = match crate::config::Config::load(dir).and_then(|c| {
        crate::reconcile::effective(dir, &c, &[])
            .map(|(c, _)| c)
            .map_err(|e| anyhow::anyhow!("the applied manifests: {e}"))
    }) {
        Ok(c) => {
            found(out, "config", Level::Ok, "valid");
            Some(c)
        }
        Err(e) => {
            found(out, "config", Level::Failing, format!("{e:#}"));
            None
        }
    };
    let keys = dir.join(crate::node::KEYS_DIR);
    let modes = crate::node::check_private(dir, 0o022, "writable by group or others")
        .and_then(|()| crate::node::check_private(&keys, 0o077, "open to group or others"))
        .and_then(|()| Ok(fleetmesh_proto::NodeKeys::load(&keys)?));
    match modes {
        Ok(k) => found(
            out,
            "keys",
            Level::Ok,
            format!("owner only; node {}", k.nostr_pubkey_hex()),
        ),
        Err(e) => found(out, "keys", Level::Failing, format!("{e:#}")),
    }
    for (check, file) in [
        ("store", dir.join(crate::node::DB_FILE)),
        ("jobs", dir.join(fleetmesh_market::service::JOBS_DB)),
        (
            "blobs",
            dir.join(fleetmesh_market::blobs::BLOBS_DIR)
                .join(fleetmesh_market::blobs::INDEX_FILE),
        ),
        ("mediator", dir.join(fleetmesh_didcomm::held::FILE)),
    ] {
        if !file.exists() {
            found(
                out,
                check,
                Level::Ok,
                format!("{} not created yet", file.display()),
            );
            continue;
        }
        match quick_check(&file) {
            Ok(()) => found(out, check, Level::Ok, format!("{}: intact", file.display())),
            Err(e) => found(out, check, Level::Failing, e),
        }
    }
    match rustix::fs::statvfs(dir) {
        Ok(s) => {
            let free = s.f_bavail.saturating_mul(s.f_frsize);
            let level = if free < min_free / 16 {
                Level::Failing
            } else if free < min_free {
                Level::Degraded
            } else {
                Level::Ok
            };
            found(
                out,
                "disk",
                level,
                format!(
                    "{} MiB free (degraded below {} MiB)",
                    free >> 20,
                    min_free >> 20
                ),
            );
        }
        Err(e) => found(out, "disk", Level::Degraded, format!("statvfs: {e}")),
    }
    config.map(|c| {
        let mut listen = c.face.listen;
        if listen.ip().is_unspecified() {
            listen.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("http://{listen}")
    })
}

/// SQLite's `quick_check` of a database, opened read-only (a running daemon may hold it).
fn quick_check(path: &Path) -> Result<(), String> {
    fleetmesh_relay::store::sqlite::check_header(path).map_err(|e| e.to_string())?;
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    fleetmesh_relay::store::sqlite::quick_check(&conn, path).map_err(|e| e.to_string())
}

/// The daemon's health and counters.
fn daemon_checks(url: &str, out: &mut Vec<Finding>) {
    let http = match reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => return found(out, "daemon", Level::Failing, e.to_string()),
    };
    let health = http
        .get(format!("{url}/healthz"))
        .send()
        .and_then(|r| r.json::<Value>());
    match health {
        Ok(h) if h["status"] == "ok" => found(
            out,
            "daemon",
            Level::Ok,
            format!(
                "{url} answers; up {} s",
                h["uptime_secs"].as_u64().unwrap_or(0)
            ),
        ),
        // a lost GPU fails its requests: the node is degraded, the rest serves
        Ok(h) if h["store"]["errors"] == 0 && h["inference"]["device_fault"].is_string() => found(
            out,
            "daemon",
            Level::Degraded,
            format!(
                "{url} is degraded: inference device fault: {}",
                h["inference"]["device_fault"].as_str().unwrap_or("?")
            ),
        ),
        Ok(h) => found(
            out,
            "daemon",
            Level::Failing,
            format!(
                "{url} is {}: {} store errors, the last: {}",
                h["status"].as_str().unwrap_or("?"),
                h["store"]["errors"],
                h["store"]["last_error"]
            ),
        ),
        Err(e) => {
            return found(
                out,
                "daemon",
                Level::Failing,
                format!("{url} does not answer: {e}"),
            );
        }
    }
    let Ok(text) = http
        .get(format!("{url}/metrics"))
        .send()
        .and_then(|r| r.text())
    else {
        return found(out, "metrics", Level::Degraded, "GET /metrics failed");
    };
    let metric = |name: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(name) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    };
    let rate_limited = metric("fleetmesh_relay_events_rejected_total{reason=\"rate-limited\"}");
    found(
        out,
        "rate-limits",
        Level::Ok,
        format!(
            "{} events refused by the rate limits since start",
            rate_limited.unwrap_or(0.0)
        ),
    );
    let errors = metric("fleetmesh_relay_store_errors_total").unwrap_or(0.0);
    found(
        out,
        "store-errors",
        if errors > 0.0 {
            Level::Failing
        } else {
            Level::Ok
        },
        format!("{errors} store errors since start"),
    );
    found(
        out,
        "connections",
        Level::Ok,
        format!(
            "{} open, {} subscriptions; {} queued output bytes",
            metric("fleetmesh_relay_connections ").unwrap_or(0.0),
            metric("fleetmesh_relay_subscriptions ").unwrap_or(0.0),
            metric("fleetmesh_relay_output_queued_bytes ").unwrap_or(0.0)
        ),
    );
    let rung = metric("fleetmesh_relay_shedding_rung ").unwrap_or(0.0);
    found(
        out,
        "shedding",
        if rung > 0.0 {
            Level::Degraded
        } else {
            Level::Ok
        },
        format!(
            "rung {rung}{}; {} writes and subscriptions shed since start",
            match rung as u8 {
                0 => " (normal)",
                1 => " (writes and new subscriptions from granted peers only)",
                _ => " (granted peers only, within their grants)",
            },
            metric("fleetmesh_relay_shed_total ").unwrap_or(0.0)
        ),
    );
    // a full proving queue turns requests away (503); the others only wait
    let proving = metric("fleetmesh_prover_queue_depth ").unwrap_or(0.0);
    let full = proving >= fleetmesh_prover::queue::QUEUE as f64;
    found(
        out,
        "queues",
        if full { Level::Degraded } else { Level::Ok },
        format!(
            "{proving} proofs admitted (of {}{}), {} checks waiting for a batch, {} \
             generations waiting for the batcher",
            fleetmesh_prover::queue::QUEUE,
            if full { ": new ones are refused" } else { "" },
            metric("fleetmesh_verifier_queue_depth ").unwrap_or(0.0),
            metric("fleetmesh_inference_queue_depth ").unwrap_or(0.0)
        ),
    );
}
