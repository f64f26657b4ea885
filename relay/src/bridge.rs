//! Bridging with standard Nostr relays: the same exchange as [`crate::sync`] with a relay
//! that may not speak NIP-77. [`Via::Auto`] tries NIP-77 and falls back to plain NIP-01
//! when the relay refuses it (NEG-ERR, a NOTICE) or does not answer it: history is then
//! pulled by REQ pages walking `until` back from now (each page verified and matched
//! against the filter, as NIP-77 fetches are), and the local events matching the filter
//! are published to the relay (its `duplicate:` OKs say what it already had).
//!
//! Used by `meshnode bridge sync` and the daemon's `[[peering.peers]]` rounds.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;

use crate::store::{EventStore, InsertOutcome};
use crate::sync::{Direction, SyncOptions, SyncReport, parse_filter, publish, query, sync};
use crate::{Error, Result};
use fleetmesh_proto::unix_now;

/// Events asked for per REQ page.
pub const PAGE: usize = 500;
/// Events published per connection when pushing over NIP-01.
const PUSH_BATCH: usize = 250;
/// How long a relay may take to answer NEG-OPEN before [`Via::Auto`] takes it for one
/// without NIP-77.
const NEG_PROBE: Duration = Duration::from_secs(10);

/// How to exchange events with a relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// NIP-77, then NIP-01 REQ pages when the relay does not speak it. The default.
    #[default]
    Auto,
    /// NIP-77 only.
    Nip77,
    /// NIP-01 only: REQ pages in, EVENTs out.
    Req,
}

impl std::str::FromStr for Via {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Via::Auto),
            "nip77" => Ok(Via::Nip77),
            "req" => Ok(Via::Req),
            _ => Err(format!("unknown way {s:?} (auto, nip77 or req)")),
        }
    }
}

/// Whether a NIP-77 failure says the relay does not speak it (rather than a broken link).
fn unsupported(e: &Error) -> bool {
    matches!(e, Error::Sync { reason, .. }
        if reason.starts_with("NEG-ERR") || reason.starts_with("NOTICE") || reason.starts_with("no answer within"))
}

/// Exchanges the events of `opts.filter` with the relay at `url` by `via`; the report
/// and the way used (`nip77` or `req`).
///
/// # Errors
/// [`Error::Sync`] when the relay cannot be reached or breaks the protocol,
/// [`Error::Store`] when the store fails.
pub async fn bridge<S: EventStore + ?Sized>(
    store: &mut S,
    url: &str,
    opts: &SyncOptions,
    via: Via,
) -> Result<(SyncReport, &'static str)> {
    match via {
        Via::Nip77 => Ok((sync(store, url, opts, |_| {}).await?, "nip77")),
        Via::Req => Ok((by_req(store, url, opts).await?, "req")),
        Via::Auto => {
            let probe = SyncOptions {
                timeout: opts.timeout.min(NEG_PROBE),
                ..opts.clone()
            };
            match sync(store, url, &probe, |_| {}).await {
                Ok(r) => Ok((r, "nip77")),
                Err(e) if unsupported(&e) => {
                    tracing::info!(relay = url, reason = %e, "no NIP-77 here: REQ pages instead");
                    Ok((by_req(store, url, opts).await?, "req"))
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// The exchange over NIP-01 alone.
async fn by_req<S: EventStore + ?Sized>(
    store: &mut S,
    url: &str,
    opts: &SyncOptions,
) -> Result<SyncReport> {
    let filter = parse_filter(url, &opts.filter)?;
    let mut report = SyncReport::default();
    if opts.direction != Direction::Push {
        pull(store, url, opts, &mut report).await?;
    }
    if opts.direction != Direction::Pull {
        let local = store.query(
            std::slice::from_ref(&filter),
            opts.max_items as u64,
            unix_now(),
        )?;
        report.local_items = local.len();
        report.have = local.len();
        if !opts.dry_run {
            for chunk in local.chunks(PUSH_BATCH) {
                let events: Vec<_> = chunk
                    .iter()
                    .filter_map(|s| fleetmesh_proto::event::Event::from_json(&s.raw).ok())
                    .collect();
                for (_, accepted, msg) in
                    publish(url, &events, opts.ca_pem.as_deref(), opts.timeout).await?
                {
                    if accepted && !msg.starts_with("duplicate:") {
                        report.pushed += 1;
                    } else if !accepted {
                        report.push_refused += 1;
                    }
                }
            }
        }
    }
    Ok(report)
}

/// REQ pages from now back: `until` moves to the oldest event of each full page.
async fn pull<S: EventStore + ?Sized>(
    store: &mut S,
    url: &str,
    opts: &SyncOptions,
    report: &mut SyncReport,
) -> Result<()> {
    let schemas = fleetmesh_schemas::SchemaSet::embedded();
    let limits = crate::limits::Limits::default();
    let revoked = crate::revoked::Revoked::from_store(&*store)?;
    let mut seen: HashSet<[u8; 32]> = HashSet::new();
    let mut until: Option<u64> = None;
    loop {
        let mut page_filter = opts.filter.clone();
        let Value::Object(f) = &mut page_filter else {
            return Err(Error::Sync {
                peer: url.to_owned(),
                reason: "the filter is not an object".into(),
            });
        };
        let limit = f
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(PAGE, |l| (l as usize).min(PAGE));
        f.insert("limit".into(), limit.into());
        if let Some(u) = until {
            f.insert("until".into(), u.into());
        }
        // each event verified and matched against the filter by `query`
        let page = query(
            url,
            &page_filter,
            opts.ca_pem.as_deref(),
            opts.timeout,
            limit,
        )
        .await?;
        report.rounds += 1;
        let full = page.len() >= limit;
        let oldest = page.iter().map(|e| e.created_at).min();
        let fresh: Vec<_> = page.into_iter().filter(|e| seen.insert(e.id)).collect();
        if fresh.is_empty() {
            break;
        }
        report.need += fresh.len();
        fresh.iter().for_each(|e| revoked.learn(e));
        let (ok, bad): (Vec<_>, Vec<_>) = fresh.into_iter().partition(|e| {
            limits.admit(e, schemas, unix_now()).is_ok() && revoked.check(e).is_ok()
        });
        report.fetch_failed += bad.len();
        if !opts.dry_run {
            let json: Vec<String> = ok.iter().map(|e| e.to_json()).collect();
            let refs: Vec<_> = ok.iter().zip(&json).map(|(e, j)| (e, j.as_str())).collect();
            for outcome in store.insert_batch(&refs)? {
                match outcome {
                    InsertOutcome::Stored | InsertOutcome::Duplicate => report.fetched += 1,
                    InsertOutcome::Superseded | InsertOutcome::Deleted | InsertOutcome::Shed => {
                        report.fetch_failed += 1
                    }
                }
            }
        }
        match oldest {
            // a page of one second only: more than a page shares that second, and REQ
            // cannot page inside it; what the relay holds there beyond the page is skipped
            Some(o) if full && until != Some(o) => until = Some(o),
            _ => break,
        }
    }
    Ok(())
}
