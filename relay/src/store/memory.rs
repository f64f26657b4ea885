//! An [`EventStore`] in memory: the same NIP-01, NIP-09 and NIP-40 semantics as the SQLite
//! [`Store`](super::Store), with nothing on disk. For tests, for tools that hold a few
//! events for a moment (a sync's staging, a ledger replay), and as the second
//! implementation that keeps the trait honest: the store tests run against both.
//!
//! Queries scan the events newest first, so their cost grows with the store; a node's
//! relay keeps its events in SQLite. Times beyond `i64::MAX` (which SQLite saturates)
//! compare here as they are.

use std::collections::{BTreeMap, HashMap, HashSet};

use fleetmesh_proto::event::Event;
use fleetmesh_proto::filter::Filter;

use super::api::NegItems;
use super::{EventKey, EventStore, InsertOutcome, NegItem};
use crate::Result;

/// Newest first, then the lowest id: the order of every answer.
type Order = (std::cmp::Reverse<u64>, [u8; 32]);

#[derive(Debug, Clone)]
struct Stored {
    rid: i64,
    event: Event,
    raw: String,
}

/// Events in memory, with NIP-01 storage semantics.
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    next_rid: i64,
    events: BTreeMap<Order, Stored>,
    /// id → its place in `events`.
    by_id: HashMap<[u8; 32], Order>,
    /// rid → its place in `events`.
    by_rid: HashMap<i64, Order>,
    /// NIP-09 records: (target, author) → the newest deletion's `created_at`. A target is
    /// an event id (lowercase hex) or an address `kind:pubkey:d`.
    deletions: HashMap<(String, [u8; 32]), u64>,
}

fn order(e: &Event) -> Order {
    (std::cmp::Reverse(e.created_at), e.id)
}

fn address(kind: u16, pubkey: &[u8; 32], d: &str) -> String {
    format!("{kind}:{}:{d}", hex::encode(pubkey))
}

fn live(e: &Event, now: u64) -> bool {
    e.expiration().is_none_or(|x| x > now)
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn remove(&mut self, key: &Order) {
        if let Some(s) = self.events.remove(key) {
            self.by_id.remove(&s.event.id);
            self.by_rid.remove(&s.rid);
        }
    }

    fn deleted_at(&self, target: &str, author: &[u8; 32]) -> Option<u64> {
        self.deletions.get(&(target.to_owned(), *author)).copied()
    }

    fn record_deletion(&mut self, target: String, author: [u8; 32], at: u64) {
        let slot = self.deletions.entry((target, author)).or_insert(at);
        *slot = (*slot).max(at);
    }

    /// NIP-09: the deletion's author's events named by `e` tags (not deletions), and the
    /// versions of addresses named by `a` tags up to its `created_at`.
    fn apply_deletion(&mut self, del: &Event) {
        for tag in &del.tags {
            match (tag.first().map(String::as_str), tag.get(1)) {
                (Some("e"), Some(id_hex)) => {
                    let mut id = [0u8; 32];
                    if hex::decode_to_slice(id_hex, &mut id).is_err() {
                        continue;
                    }
                    if let Some(key) = self.by_id.get(&id).copied()
                        && self.events[&key].event.pubkey == del.pubkey
                        && self.events[&key].event.kind != 5
                    {
                        self.remove(&key);
                    }
                    self.record_deletion(hex::encode(id), del.pubkey, del.created_at);
                }
                (Some("a"), Some(addr)) => {
                    let mut parts = addr.splitn(3, ':');
                    let (Some(kind), Some(pk), Some(d)) =
                        (parts.next(), parts.next(), parts.next())
                    else {
                        continue;
                    };
                    let (Ok(kind), Ok(pk)) = (kind.parse::<u16>(), hex::decode(pk)) else {
                        continue;
                    };
                    if pk != del.pubkey {
                        continue; // only the author may delete an address
                    }
                    let doomed: Vec<Order> = self
                        .events
                        .iter()
                        .filter(|(_, s)| {
                            s.event.pubkey == del.pubkey
                                && s.event.kind == kind
                                && s.event.replacement_key() == Some(d)
                                && s.event.created_at <= del.created_at
                        })
                        .map(|(k, _)| *k)
                        .collect();
                    for k in doomed {
                        self.remove(&k);
                    }
                    self.record_deletion(address(kind, &del.pubkey, d), del.pubkey, del.created_at);
                }
                _ => {}
            }
        }
    }

    fn insert_one(&mut self, e: &Event, json: &str) -> InsertOutcome {
        if self.deleted_at(&hex::encode(e.id), &e.pubkey).is_some() {
            return if self.by_id.contains_key(&e.id) {
                InsertOutcome::Duplicate
            } else {
                InsertOutcome::Deleted
            };
        }
        if self.by_id.contains_key(&e.id) {
            return InsertOutcome::Duplicate;
        }
        if let Some(d) = e.replacement_key() {
            if self
                .deleted_at(&address(e.kind, &e.pubkey, d), &e.pubkey)
                .is_some_and(|at| at >= e.created_at)
            {
                return InsertOutcome::Deleted;
            }
            let older: Vec<Order> = self
                .events
                .iter()
                .filter(|(_, s)| {
                    s.event.pubkey == e.pubkey
                        && s.event.kind == e.kind
                        && s.event.replacement_key() == Some(d)
                })
                .map(|(k, _)| *k)
                .collect();
            // NIP-01: the newest wins; on equal created_at, the lowest id (the order's own).
            if older.iter().any(|k| *k < order(e)) {
                return InsertOutcome::Superseded;
            }
            for k in older {
                self.remove(&k);
            }
        }
        if e.kind == 5 {
            self.apply_deletion(e);
        }
        self.next_rid += 1;
        let key = order(e);
        self.by_id.insert(e.id, key);
        self.by_rid.insert(self.next_rid, key);
        self.events.insert(
            key,
            Stored {
                rid: self.next_rid,
                event: e.clone(),
                raw: json.to_owned(),
            },
        );
        InsertOutcome::Stored
    }
}

impl EventStore for MemoryStore {
    fn insert_batch(&mut self, events: &[(&Event, &str)]) -> Result<Vec<InsertOutcome>> {
        Ok(events.iter().map(|(e, j)| self.insert_one(e, j)).collect())
    }

    fn purge_expired(&mut self, now: u64) -> Result<usize> {
        let doomed: Vec<Order> = self
            .events
            .iter()
            .filter(|(_, s)| !live(&s.event, now))
            .map(|(k, _)| *k)
            .collect();
        for k in &doomed {
            self.remove(k);
        }
        Ok(doomed.len())
    }

    fn evict_oldest(&mut self, keep: usize, spare: &[u8; 32]) -> Result<usize> {
        let mut others: Vec<(u64, Order)> = self
            .events
            .iter()
            .filter(|(_, s)| s.event.pubkey != *spare)
            .map(|(k, s)| (s.event.created_at, *k))
            .collect();
        let over = others.len().saturating_sub(keep);
        others.sort_unstable();
        for (_, k) in &others[..over] {
            self.remove(k);
        }
        Ok(over)
    }

    fn query_keys(&self, filters: &[Filter], cap: u64, now: u64) -> Result<Vec<EventKey>> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for f in filters {
            let limit = f.limit.unwrap_or(cap).min(cap);
            if limit == 0 || f.matches_nothing() {
                continue;
            }
            let hits = self
                .events
                .values()
                .filter(|s| f.matches(&s.event) && live(&s.event, now))
                .take(usize::try_from(limit).unwrap_or(usize::MAX));
            for s in hits {
                if seen.insert(s.event.id) {
                    out.push(EventKey {
                        rid: s.rid,
                        created_at: s.event.created_at,
                        id: s.event.id,
                    });
                }
            }
        }
        out.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    fn raw_by_rids(&self, rids: &[i64]) -> Result<Vec<Option<String>>> {
        Ok(rids
            .iter()
            .map(|rid| self.by_rid.get(rid).map(|k| self.events[k].raw.clone()))
            .collect())
    }

    fn negentropy_items(
        &self,
        filters: &[Filter],
        max: usize,
        now: u64,
    ) -> Result<Option<Vec<NegItem>>> {
        let mut items = NegItems::new(filters.len(), max);
        for f in filters.iter().filter(|f| NegItems::wanted(f)) {
            let limit = f
                .limit
                .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
            let hits = self
                .events
                .values()
                .filter(|s| f.matches(&s.event) && live(&s.event, now))
                .take(limit);
            for s in hits {
                if !items.add((s.event.created_at, s.event.id)) {
                    return Ok(None);
                }
            }
        }
        Ok(Some(items.into_vec()))
    }

    fn events_by_id(&self, ids: &[[u8; 32]]) -> Result<Vec<String>> {
        Ok(ids
            .iter()
            .filter_map(|id| self.by_id.get(id).map(|k| self.events[k].raw.clone()))
            .collect())
    }

    fn event_count(&self) -> Result<u64> {
        Ok(self.events.len() as u64)
    }
}
