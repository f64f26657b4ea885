//! What the relay asks of a store of events, as a trait ([`EventStore`]), so that the
//! relay's users — the face, NIP-77 sync, the ledger — and the tests can hold any store:
//! the SQLite [`Store`](super::Store) a node keeps on disk, or the [`MemoryStore`](super::memory::MemoryStore).
//! rust-nostr's `NostrDatabase` is the model; the shape is the fast path's: writes come in
//! batches (one transaction, what the writer thread commits), and a query is answered as
//! keys first and bodies after ([`EventStore::query_keys`], [`EventStore::raw_by_rids`]),
//! so that a large answer is never held whole.
//!
//! Every implementation keeps NIP-01's storage semantics the same way (the store tests run
//! against each): replaceable and addressable versions, newest wins and ties go to the
//! lowest id; NIP-09 deletions remove their author's targets and keep them out; NIP-40
//! expired events are never returned and are purged on request.

use std::collections::HashSet;

use fleetmesh_proto::event::Event;
use fleetmesh_proto::filter::Filter;

use super::{EventKey, InsertOutcome, NegItem, StoredEvent};
use crate::Result;

/// A store of verified events with NIP-01, NIP-09 and NIP-40 semantics.
pub trait EventStore {
    /// Stores verified events in one transaction and says what became of each; `json` is
    /// each event's JSON as it will be served. On an error nothing of the batch is stored.
    ///
    /// # Errors
    /// The store's failure.
    fn insert_batch(&mut self, events: &[(&Event, &str)]) -> Result<Vec<InsertOutcome>>;

    /// Deletes events whose NIP-40 expiration is at or before `now`; how many.
    ///
    /// # Errors
    /// The store's failure.
    fn purge_expired(&mut self, now: u64) -> Result<usize>;

    /// Deletes the oldest events (by `created_at`) beyond `keep`, never those by `spare`'s
    /// author, who does not count either: a leaf node's bounded cache. How many.
    ///
    /// # Errors
    /// The store's failure.
    fn evict_oldest(&mut self, keep: usize, spare: &[u8; 32]) -> Result<usize>;

    /// The keys of the events matching any of `filters`, newest first (ties: lowest id
    /// first), each filter limited to `min(limit, cap)`, without duplicates, never expired
    /// ones; no event body is read.
    ///
    /// # Errors
    /// The store's failure.
    fn query_keys(&self, filters: &[Filter], cap: u64, now: u64) -> Result<Vec<EventKey>>;

    /// The JSON of the events under these keys' `rid`s, in order: `None` for one deleted
    /// or replaced since its key was read.
    ///
    /// # Errors
    /// The store's failure.
    fn raw_by_rids(&self, rids: &[i64]) -> Result<Vec<Option<String>>>;

    /// NIP-77 items `(created_at, id)` of the events matching any of `filters`, unsorted,
    /// without duplicates; `Ok(None)` past `max` items.
    ///
    /// # Errors
    /// The store's failure.
    fn negentropy_items(
        &self,
        filters: &[Filter],
        max: usize,
        now: u64,
    ) -> Result<Option<Vec<NegItem>>>;

    /// The JSON of the stored events with these ids (those that exist), in order.
    ///
    /// # Errors
    /// The store's failure.
    fn events_by_id(&self, ids: &[[u8; 32]]) -> Result<Vec<String>>;

    /// How many events are stored.
    ///
    /// # Errors
    /// The store's failure.
    fn event_count(&self) -> Result<u64>;

    /// Stores one event in its own transaction.
    ///
    /// # Errors
    /// The store's failure.
    fn insert_event(&mut self, event: &Event) -> Result<InsertOutcome> {
        let json = event.to_json();
        let mut out = self.insert_batch(&[(event, json.as_str())])?;
        Ok(out.remove(0))
    }

    /// The events [`EventStore::query_keys`] lists, with their bodies.
    ///
    /// # Errors
    /// The store's failure.
    fn query(&self, filters: &[Filter], cap: u64, now: u64) -> Result<Vec<StoredEvent>> {
        let keys = self.query_keys(filters, cap, now)?;
        let rids: Vec<i64> = keys.iter().map(|k| k.rid).collect();
        let raws = self.raw_by_rids(&rids)?;
        Ok(keys
            .into_iter()
            .zip(raws)
            .filter_map(|(k, raw)| {
                raw.map(|raw| StoredEvent {
                    created_at: k.created_at,
                    id: k.id,
                    raw,
                })
            })
            .collect())
    }
}

/// The NIP-77 items of several filters gathered as [`EventStore::negentropy_items`]
/// promises them: each id once, and nothing past `max` (then `None`). Implementations
/// feed it each filter's matches ([`NegItems::wanted`] says which filters to run).
pub(crate) struct NegItems {
    seen: HashSet<[u8; 32]>,
    out: Vec<NegItem>,
    max: usize,
    /// Duplicates arise only across filters.
    dedup: bool,
}

impl NegItems {
    /// Items for `filters` filters, at most `max`.
    pub(crate) fn new(filters: usize, max: usize) -> NegItems {
        NegItems {
            seen: HashSet::new(),
            out: Vec::new(),
            max,
            dedup: filters > 1,
        }
    }

    /// Whether filter `f` can match anything (one that cannot is not run).
    pub(crate) fn wanted(f: &Filter) -> bool {
        !(f.matches_nothing() || f.limit == Some(0))
    }

    /// Adds an item (once per id); `false` once there are more than `max`.
    pub(crate) fn add(&mut self, item: NegItem) -> bool {
        if !self.dedup || self.seen.insert(item.1) {
            self.out.push(item);
        }
        self.out.len() <= self.max
    }

    /// The items gathered.
    pub(crate) fn into_vec(self) -> Vec<NegItem> {
        self.out
    }
}
