//! Authoritative shards (kind 30803). A community node names, in `[[peering.shards]]`, the
//! parts of its store it holds for the federation (some kinds, within optional times); it
//! publishes each one's summary — how many events, and the digest of their ids — as a
//! signed shard descriptor, and again whenever the summary changes. Descriptors travel like
//! any fleetmesh event (the peering rounds carry them), so every node can check its own copy
//! of a shard against the holder's: `GET /v1/shards` and `meshnode shards` list the shards a
//! node knows, who holds each, and whether its copy is `in sync`, `behind` or `differs`.
//!
//! The digest is the one kind 30803 defines: SHA-256 over the 32-byte ids of the shard's
//! events, sorted by (`created_at`, id). Shard descriptors themselves belong to no shard.

use std::time::Duration;

use fleetmesh_proto::NodeKeys;
use fleetmesh_proto::event::Event;
use fleetmesh_proto::filter::Filter;
use fleetmesh_proto::nodes::{KeyRange, Shard, TimeRange};
use fleetmesh_proto::noun::Noun as _;
use fleetmesh_relay::Store;
use fleetmesh_relay::face::Relay;
use fleetmesh_relay::store::EventStore as _;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::config::ShardSection;

/// The most events one shard summary reads.
const MAX_SHARD_EVENTS: usize = 2_000_000;
/// The most events one listing reads in all (its shards past that are `not checked`).
const MAX_LISTED_EVENTS: usize = 4_000_000;
/// The shortest time between two summaries of a shard.
pub const MIN_PERIOD: Duration = Duration::from_secs(5);
/// The most shard descriptors one listing shows.
const MAX_LISTED: u64 = 500;

/// The first and last possible event ids.
const FIRST_ID: &str = "0000000000000000000000000000000000000000000000000000000000000000";
const LAST_ID: &str = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff";

/// A shard's extent: what its summary counts.
struct Extent {
    kinds: Option<Vec<u16>>,
    since: Option<u64>,
    until: Option<u64>,
    first: [u8; 32],
    last: [u8; 32],
}

impl Extent {
    fn of_config(s: &ShardSection) -> Extent {
        Extent {
            kinds: Some(s.kinds.clone()),
            since: s.since,
            until: s.until,
            first: [0; 32],
            last: [0xff; 32],
        }
    }

    fn of_shard(s: &Shard) -> Option<Extent> {
        let id = |h: &str| <[u8; 32]>::try_from(hex::decode(h).ok()?.as_slice()).ok();
        Some(Extent {
            kinds: s.kinds.clone(),
            since: s.time_range.and_then(|t| t.since),
            until: s.time_range.and_then(|t| t.until),
            first: id(&s.key_range.start)?,
            last: id(&s.key_range.end)?,
        })
    }
}

/// A shard's events in a store: how many, and their digest (hex).
///
/// # Errors
/// The store's failure, or a shard of more than `max` events.
fn summarize(
    store: &Store,
    extent: &Extent,
    max: usize,
    now: u64,
) -> anyhow::Result<(u64, String)> {
    let items_of = |kinds: Option<&[u16]>| -> anyhow::Result<Vec<(u64, [u8; 32])>> {
        let mut filter = json!({});
        if let Some(k) = kinds {
            filter["kinds"] = json!(k);
        }
        if let Some(t) = extent.since {
            filter["since"] = json!(t);
        }
        if let Some(t) = extent.until {
            filter["until"] = json!(t);
        }
        let filter = Filter::from_value(&filter, Default::default())?;
        store
            .negentropy_items(&[filter], max, now)?
            .ok_or_else(|| anyhow::anyhow!("a shard of more than {max} events"))
    };
    let mut items = items_of(extent.kinds.as_deref())?;
    // a shard of every kind: shard descriptors belong to no shard
    let descriptors: std::collections::HashSet<[u8; 32]> = match extent.kinds {
        None => items_of(Some(&[fleetmesh_schemas::constants::kind::SHARD]))?
            .into_iter()
            .map(|(_, id)| id)
            .collect(),
        Some(_) => Default::default(),
    };
    items.retain(|(_, id)| *id >= extent.first && *id <= extent.last && !descriptors.contains(id));
    items.sort_unstable();
    let mut h = Sha256::new();
    for (_, id) in &items {
        h.update(id);
    }
    Ok((items.len() as u64, hex::encode(h.finalize())))
}

/// Publishes the summary of each of `shards` into the node's relay, at start and again every
/// `every` (at least [`MIN_PERIOD`]: a summary reads the shard's ids, ~0.2 s a million) when
/// it has changed; aborted at shutdown.
pub fn spawn(
    relay: std::sync::Arc<Relay>,
    db: std::path::PathBuf,
    keys: NodeKeys,
    shards: Vec<ShardSection>,
    every: Duration,
) -> Option<tokio::task::JoinHandle<()>> {
    if shards.is_empty() {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut published: Vec<Option<(u64, String)>> = vec![None; shards.len()];
        let mut last_at = 0;
        // one read connection for the task's life, opened at its first summary
        let mut conn: Option<Store> = None;
        loop {
            for (def, last) in shards.iter().zip(published.iter_mut()) {
                let (db, extent, open) = (db.clone(), Extent::of_config(def), conn.take());
                let now = fleetmesh_proto::unix_now();
                let summary = tokio::task::spawn_blocking(move || {
                    let store = match open {
                        Some(s) => s,
                        None => Store::open_read_only(&db)?,
                    };
                    let s = summarize(&store, &extent, MAX_SHARD_EVENTS, now);
                    anyhow::Ok((store, s))
                })
                .await;
                let (count, digest) = match summary {
                    Ok(Ok((store, Ok(s)))) => {
                        conn = Some(store);
                        s
                    }
                    Ok(Ok((store, Err(e)))) => {
                        conn = Some(store);
                        tracing::warn!(shard = %def.id, error = %e, "shard not summarized");
                        continue;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(shard = %def.id, error = %e, "shard not summarized");
                        continue;
                    }
                    Err(_) => return,
                };
                if last.as_ref() == Some(&(count, digest.clone())) {
                    continue;
                }
                // an addressable event replaces the last only when it is newer
                last_at = now.max(last_at + 1);
                let event = match descriptor(def, count, &digest).sign(&keys, last_at) {
                    Ok(e) => e,
                    Err(e) => {
                        tracing::error!(shard = %def.id, error = %e, "shard descriptor not signed");
                        continue;
                    }
                };
                match relay.publish(event).await {
                    Ok(fleetmesh_relay::store::InsertOutcome::Stored) => {
                        tracing::info!(shard = %def.id, events = count, %digest, "shard descriptor published");
                        *last = Some((count, digest));
                    }
                    Ok(other) => {
                        tracing::debug!(shard = %def.id, ?other, "shard descriptor not stored; again next time");
                    }
                    Err(e) => {
                        tracing::warn!(shard = %def.id, error = %e, "shard descriptor refused")
                    }
                }
            }
            tokio::time::sleep(every.max(MIN_PERIOD)).await;
        }
    }))
}

fn descriptor(def: &ShardSection, count: u64, digest: &str) -> Shard {
    Shard {
        shard_id: def.id.clone(),
        key_range: KeyRange {
            start: FIRST_ID.into(),
            end: LAST_ID.into(),
        },
        time_range: (def.since.is_some() || def.until.is_some()).then_some(TimeRange {
            since: def.since,
            until: def.until,
        }),
        kinds: Some(def.kinds.clone()),
        event_count: count,
        bytes: None,
        digest: digest.to_owned(),
        epoch: None,
        replication_factor: None,
        replicas: None,
        relays: None,
    }
}

/// The shards this node knows (the shard descriptors in its store, newest first), each with
/// its holder, the holder's class where its node descriptor is here, and this node's copy:
/// `ours` (this node holds it), `in sync`, `behind` (fewer events than the holder's),
/// `differs`, or `not checked` (past the listing's work bound).
///
/// # Errors
/// The store's failure.
pub fn list(db: &std::path::Path, ours: &str) -> anyhow::Result<Value> {
    let store = Store::open_read_only(db)?;
    let now = fleetmesh_proto::unix_now();
    let filter = |v: Value| Filter::from_value(&v, Default::default());
    let found = store.query(
        &[filter(
            json!({"kinds": [fleetmesh_schemas::constants::kind::SHARD]}),
        )?],
        MAX_LISTED,
        now,
    )?;
    let mut budget = MAX_LISTED_EVENTS;
    let mut out = Vec::new();
    for stored in found {
        let Ok(event) = Event::from_json(&stored.raw) else {
            continue;
        };
        let Ok(shard) = Shard::from_event(&event) else {
            continue;
        };
        let holder = hex::encode(event.pubkey);
        let class = store
            .query(
                &[filter(
                    json!({"kinds": [fleetmesh_schemas::constants::kind::NODE_DESCRIPTOR],
                               "authors": [holder], "limit": 1}),
                )?],
                1,
                now,
            )?
            .first()
            .and_then(|d| Event::from_json(&d.raw).ok())
            .and_then(|d| d.tag_value("class").map(str::to_owned));
        let copy = match Extent::of_shard(&shard) {
            _ if holder == ours => json!({"state": "ours"}),
            Some(extent) if budget > 0 => {
                match summarize(&store, &extent, budget.min(MAX_SHARD_EVENTS), now) {
                    Ok((count, digest)) => {
                        budget = budget.saturating_sub(count as usize);
                        let state = if digest == shard.digest {
                            "in sync"
                        } else if count < shard.event_count {
                            "behind"
                        } else {
                            "differs"
                        };
                        json!({"state": state, "event_count": count, "digest": digest})
                    }
                    Err(e) => json!({"state": "not checked", "why": e.to_string()}),
                }
            }
            Some(_) => json!({"state": "not checked", "why": "the listing's work bound"}),
            None => json!({"state": "not checked", "why": "a key range that is not two ids"}),
        };
        out.push(json!({
            "id": shard.shard_id,
            "holder": holder,
            "class": class,
            "authoritative": class.as_deref() == Some("community"),
            "published_at": event.created_at,
            "kinds": shard.kinds,
            "time_range": shard.time_range,
            "event_count": shard.event_count,
            "digest": shard.digest,
            "copy": copy,
        }));
    }
    Ok(json!({"shards": out}))
}
