//! Relay sessions with federation peers: what a session opened over a peer link (rather
//! than by an anonymous client) is held to, and the per-peer tally of what it moved and
//! what was refused from it.
//!
//! The transport that authenticated the peer (an iroh link's hello) hands
//! [`Relay::serve_frames`](super::Relay::serve_frames) a [`PeerSession`]: events the peer
//! pushes outside the shard filter agreed with it are refused (`blocked:`), its own
//! event rate replaces the relay's per-connection one, and everything it sends or is sent
//! is counted in its [`Tally`], shared by all of the peer's sessions. The counts are the
//! wire measurements the accountability ledger meters peers by: totals, per window, and per
//! shard of the grants between the two ([`Tally::set_shards`], [`ShardCounts`]); the
//! appliance adds the DIDComm messages of the link's message streams (hop forwards, jobs,
//! ledger messages) and, apart, the peer key's Blossom transfers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use fleetmesh_proto::event::Event;
use fleetmesh_proto::filter::Filter;
use fleetmesh_proto::ledger::Moved;
use serde::{Deserialize, Serialize};

/// What one relay session with a peer is held to.
#[derive(Debug, Clone)]
pub struct PeerSession {
    /// The peer, as logs name it (its key, hex).
    pub name: String,
    /// The shard filters agreed with the peer: an event it pushes must match one. `None`:
    /// every event; an empty list: none (peering disabled).
    pub filters: Option<Arc<Vec<Filter>>>,
    /// Events per second it may push, and the burst; `None`: the relay's per-connection
    /// limits.
    pub rate: Option<(f64, f64)>,
    /// Where its traffic is counted.
    pub tally: Arc<Tally>,
}

impl PeerSession {
    /// Why the peer may not push `event`, and the `blocked:` message: outside the agreed
    /// shards, or outside the shards of our grant to it when it names some — counted as
    /// out of filter (S3), except in the first window after those shards were set (the
    /// grant may not have reached the peer yet), when it is only refused. `None`: admitted.
    pub fn refusal(&self, event: &Event) -> Option<(PeerRefusal, &'static str)> {
        if !self
            .filters
            .as_ref()
            .is_none_or(|fs| fs.iter().any(|f| f.matches(event)))
        {
            return Some((
                PeerRefusal::OutOfFilter,
                "blocked: outside the shard filters agreed with this peer",
            ));
        }
        if !self.tally.granted(event) {
            return Some((
                self.tally.grant_refusal(),
                "blocked: outside the shards of the grant to this peer",
            ));
        }
        None
    }
}

/// Why something a peer sent was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerRefusal {
    /// An event outside the shard filters agreed with it.
    OutOfFilter,
    /// A frame that is not a NIP-01 message, or an event of the wrong shape.
    Malformed,
    /// An event whose id or signature does not hold.
    Forged,
    /// An event past a limit, expired, or failing its kind's schema.
    Invalid,
    /// An event over its rate.
    RateLimited,
}

/// The traffic with one peer, both ways, from this node's side; shared by its sessions
/// and the rounds this node runs with it. Counters only grow.
#[derive(Debug, Default)]
pub struct Tally {
    events_in: AtomicU64,
    bytes_in: AtomicU64,
    events_out: AtomicU64,
    bytes_out: AtomicU64,
    out_of_filter: AtomicU64,
    malformed: AtomicU64,
    forged: AtomicU64,
    invalid: AtomicU64,
    rate_limited: AtomicU64,
    blob_in: AtomicU64,
    blob_out: AtomicU64,
    /// Unix time of the peer's last NIP-77 reconciliation on our face (0: never).
    reconciled_at: AtomicU64,
    /// The counts per window of Unix time, when windows are set ([`Tally::set_window`]).
    windows: std::sync::Mutex<Windows>,
    /// The shard filters events are counted by, each way ([`Tally::set_shards`]).
    shards: std::sync::RwLock<ShardFilters>,
    /// Unix time the inbound shards last changed.
    shards_since: AtomicU64,
}

/// The shard filters of the grants between the two sides: `inbound`, of ours to the peer
/// (what it delivers us spends against it); `outbound`, of the peer's to us. Empty: no
/// counts per shard that way.
#[derive(Debug, Default, Clone, PartialEq)]
struct ShardFilters {
    inbound: Arc<Vec<Filter>>,
    outbound: Arc<Vec<Filter>>,
}

/// Events and bytes per shard in one window, each way: position *i* counts the events of
/// shard filter *i* (an event counts in the first shard it matches, in none when it
/// matches none) and the bytes of their messages.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardCounts {
    /// Received from the peer, by the shards of our grant to it.
    pub inbound: Vec<Moved>,
    /// Sent to the peer, by the shards of its grant to us.
    pub outbound: Vec<Moved>,
}

/// One window's counts.
#[derive(Debug, Default)]
struct Slot {
    n: u64,
    counts: TallyCounts,
    shards: ShardCounts,
}

/// Counts per window: window length (0: not kept) and the last few windows' counts.
#[derive(Debug, Default)]
struct Windows {
    secs: u64,
    slots: std::collections::VecDeque<Slot>,
}

/// Which way a message crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    In,
    Out,
}

/// The event an `EVENT` message carries, client's (`["EVENT", ev]`) or relay's
/// (`["EVENT", sub, ev]`), read for its shard only (not verified).
fn carried_event(text: &str) -> Option<Event> {
    Event::from_event_message(text).or_else(|| {
        let (tag, _, ev): (String, serde::de::IgnoredAny, serde_json::Value) =
            serde_json::from_str(text).ok()?;
        (tag == "EVENT").then_some(())?;
        Event::from_value(&ev).ok()
    })
}

/// Whether a NIP-01 message is an `EVENT` one.
fn is_event(text: &str) -> bool {
    text.trim_start().starts_with("[\"EVENT\"")
}

/// Windows a tally keeps.
const WINDOWS_KEPT: usize = 8;

/// A [`Tally`] read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TallyCounts {
    /// Events received from the peer (pushed by it, or fetched from it), taken or not.
    pub events_in: u64,
    /// Bytes received from it (frames as sent, NIP-77 messages included).
    pub bytes_in: u64,
    /// Events sent to it.
    pub events_out: u64,
    /// Bytes sent to it.
    pub bytes_out: u64,
    /// Its events refused for lying outside the agreed shard filters.
    pub out_of_filter: u64,
    /// Its frames that were not NIP-01 messages, or events of the wrong shape.
    pub malformed: u64,
    /// Its events whose id or signature did not hold.
    pub forged: u64,
    /// Its events refused for a limit, expiry or schema.
    pub invalid: u64,
    /// Its events refused for coming faster than its rate.
    pub rate_limited: u64,
    /// Blossom bytes its key uploaded to our blob store.
    #[serde(default)]
    pub blob_in: u64,
    /// Blossom bytes served to its key.
    #[serde(default)]
    pub blob_out: u64,
}

impl Tally {
    /// Counts `events` (carried in `bytes`) received from the peer.
    pub fn received(&self, events: u64, bytes: u64) {
        self.count(Way::In, events, bytes, None);
    }

    /// Counts `events` (carried in `bytes`) sent to the peer.
    pub fn sent(&self, events: u64, bytes: u64) {
        self.count(Way::Out, events, bytes, None);
    }

    /// Counts one NIP-01 message received from the peer, as it crossed: an `EVENT`
    /// message as an event, in its shard when shards are set.
    pub fn received_message(&self, text: &str) {
        self.message(Way::In, text);
    }

    /// Counts one NIP-01 message sent to the peer, as [`Tally::received_message`].
    pub fn sent_message(&self, text: &str) {
        self.message(Way::Out, text);
    }

    /// Counts the per-window `bytes` of a message that is not NIP-01 (a DIDComm message on
    /// a link's message stream: a hop forward, a job, a ledger message), each way as it
    /// crossed.
    pub fn received_bytes(&self, bytes: u64) {
        self.count(Way::In, 0, bytes, None);
    }

    /// Counts `bytes` of a non-NIP-01 message sent to the peer ([`Tally::received_bytes`]).
    pub fn sent_bytes(&self, bytes: u64) {
        self.count(Way::Out, 0, bytes, None);
    }

    /// Counts Blossom bytes: `uploaded` by the peer's key to our blob store, `served` to it.
    /// Kept apart from the relay traffic (a peer's own node does not sign for them).
    pub fn blobs(&self, uploaded: u64, served: u64) {
        self.blob_in.fetch_add(uploaded, Relaxed);
        self.blob_out.fetch_add(served, Relaxed);
        self.in_window(|s| {
            s.counts.blob_in += uploaded;
            s.counts.blob_out += served;
        });
    }

    /// Sets the shard filters events are counted by from now on: `inbound`, those of our
    /// grant to the peer; `outbound`, those of its grant to us (empty: none that way). A
    /// change of either starts that way's counts of the current window over.
    pub fn set_shards(&self, inbound: Vec<Filter>, outbound: Vec<Filter>) {
        let new = ShardFilters {
            inbound: Arc::new(inbound),
            outbound: Arc::new(outbound),
        };
        let mut cur = self
            .shards
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if *cur == new {
            return;
        }
        let (reset_in, reset_out) = (cur.inbound != new.inbound, cur.outbound != new.outbound);
        *cur = new;
        drop(cur);
        if reset_in {
            self.shards_since
                .store(fleetmesh_proto::unix_now(), Relaxed);
        }
        self.in_window(|s| {
            if reset_in {
                s.shards.inbound.clear();
            }
            if reset_out {
                s.shards.outbound.clear();
            }
        });
    }

    /// Whether `event` lies within the shards of our grant to the peer (any event when the
    /// grant names none).
    pub fn granted(&self, event: &Event) -> bool {
        let f = self
            .shards
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f.inbound.is_empty() || f.inbound.iter().any(|f| f.matches(event))
    }

    /// How a push outside our grant's shards counts: only as refused ([`PeerRefusal::Invalid`])
    /// within a window of the shards being set (or a minute without windows), out of filter
    /// after.
    pub fn grant_refusal(&self) -> PeerRefusal {
        let secs = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .secs;
        let grace = if secs == 0 { 60 } else { secs };
        if fleetmesh_proto::unix_now() < self.shards_since.load(Relaxed).saturating_add(grace) {
            PeerRefusal::Invalid
        } else {
            PeerRefusal::OutOfFilter
        }
    }

    /// The shard filters of the peer's grant to us: what we may push it (empty: any).
    pub fn outbound_shards(&self) -> Arc<Vec<Filter>> {
        self.shards
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .outbound
            .clone()
    }

    /// The counts per shard of window `n` (empty when none were kept).
    pub fn window_shards(&self, n: u64) -> ShardCounts {
        self.slot(n, |s| s.shards.clone())
    }

    /// `read` of window `n`'s slot; the default when it is not kept.
    fn slot<T: Default>(&self, n: u64, read: impl FnOnce(&Slot) -> T) -> T {
        let w = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        w.slots
            .iter()
            .find(|s| s.n == n)
            .map(read)
            .unwrap_or_default()
    }

    fn message(&self, way: Way, text: &str) {
        let event = is_event(text);
        let shard = if event {
            let filters = {
                let f = self
                    .shards
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match way {
                    Way::In => f.inbound.clone(),
                    Way::Out => f.outbound.clone(),
                }
            };
            (!filters.is_empty()).then(|| {
                let at =
                    carried_event(text).and_then(|e| filters.iter().position(|f| f.matches(&e)));
                (at, filters.len())
            })
        } else {
            None
        };
        self.count(way, u64::from(event), text.len() as u64, shard);
    }

    /// Counts one crossing: totals, its window, and its shard (`Some((Some(i), n))`: shard
    /// `i` of `n`; `Some((None, n))`: none of the `n` matched).
    fn count(&self, way: Way, events: u64, bytes: u64, shard: Option<(Option<usize>, usize)>) {
        let (e, b) = match way {
            Way::In => (&self.events_in, &self.bytes_in),
            Way::Out => (&self.events_out, &self.bytes_out),
        };
        e.fetch_add(events, Relaxed);
        b.fetch_add(bytes, Relaxed);
        self.in_window(|s| {
            let (c, per) = match way {
                Way::In => (
                    (&mut s.counts.events_in, &mut s.counts.bytes_in),
                    &mut s.shards.inbound,
                ),
                Way::Out => (
                    (&mut s.counts.events_out, &mut s.counts.bytes_out),
                    &mut s.shards.outbound,
                ),
            };
            *c.0 += events;
            *c.1 += bytes;
            if let Some((at, n)) = shard {
                if per.len() != n {
                    per.resize(n, Moved::default());
                }
                if let Some(m) = at.and_then(|i| per.get_mut(i)) {
                    m.events += events;
                    m.bytes += bytes;
                }
            }
        });
    }

    /// Keeps counts per window of `secs` seconds of Unix time from now on (window n covers
    /// [n × secs, (n + 1) × secs)): what the ledger meters a peer by. A change of length
    /// starts over.
    pub fn set_window(&self, secs: u64) {
        let mut w = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.secs != secs {
            *w = Windows {
                secs,
                slots: Default::default(),
            };
        }
    }

    /// The counts of window `n` (all zero when nothing was counted in it or it is no
    /// longer kept: the last eight are).
    pub fn window(&self, n: u64) -> TallyCounts {
        self.slot(n, |s| s.counts)
    }

    /// The counts of the window now running (all zero when windows are not kept).
    pub fn this_window(&self) -> TallyCounts {
        let secs = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .secs;
        if secs == 0 {
            return TallyCounts::default();
        }
        let now = fleetmesh_proto::unix_now();
        self.window(now / secs)
    }

    fn in_window(&self, add: impl FnOnce(&mut Slot)) {
        let mut w = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.secs == 0 {
            return;
        }
        let now = fleetmesh_proto::unix_now();
        let n = now / w.secs;
        if w.slots.back().is_none_or(|s| s.n != n) {
            w.slots.push_back(Slot {
                n,
                ..Slot::default()
            });
            while w.slots.len() > WINDOWS_KEPT {
                w.slots.pop_front();
            }
        }
        if let Some(s) = w.slots.back_mut() {
            add(s);
        }
    }

    /// Counts one refusal.
    pub fn refused(&self, why: PeerRefusal) {
        self.refused_n(why, 1);
    }

    /// Counts `n` refusals for the same reason.
    pub fn refused_n(&self, why: PeerRefusal, n: u64) {
        let c = match why {
            PeerRefusal::OutOfFilter => &self.out_of_filter,
            PeerRefusal::Malformed => &self.malformed,
            PeerRefusal::Forged => &self.forged,
            PeerRefusal::Invalid => &self.invalid,
            PeerRefusal::RateLimited => &self.rate_limited,
        };
        c.fetch_add(n, Relaxed);
        self.in_window(|s| {
            let c = &mut s.counts;
            match why {
                PeerRefusal::OutOfFilter => c.out_of_filter += n,
                PeerRefusal::Malformed => c.malformed += n,
                PeerRefusal::Forged => c.forged += n,
                PeerRefusal::Invalid => c.invalid += n,
                PeerRefusal::RateLimited => c.rate_limited += n,
            }
        });
    }

    /// Notes that the peer opened a NIP-77 reconciliation with us at unix time `now`: it
    /// runs rounds with us, so ours with it need only pull.
    pub fn reconciling(&self, now: u64) {
        self.reconciled_at.fetch_max(now, Relaxed);
    }

    /// When the peer last opened a reconciliation with us.
    pub fn reconciled_at(&self) -> Option<u64> {
        Some(self.reconciled_at.load(Relaxed)).filter(|t| *t > 0)
    }

    /// The counts now.
    pub fn counts(&self) -> TallyCounts {
        TallyCounts {
            events_in: self.events_in.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            events_out: self.events_out.load(Relaxed),
            bytes_out: self.bytes_out.load(Relaxed),
            out_of_filter: self.out_of_filter.load(Relaxed),
            malformed: self.malformed.load(Relaxed),
            forged: self.forged.load(Relaxed),
            invalid: self.invalid.load(Relaxed),
            rate_limited: self.rate_limited.load(Relaxed),
            blob_in: self.blob_in.load(Relaxed),
            blob_out: self.blob_out.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(v: serde_json::Value) -> Filter {
        Filter::from_value(&v, Default::default()).unwrap()
    }

    fn event(kind: u16, tags: Vec<Vec<String>>) -> Event {
        let keys = secp256k1::Keypair::from_secret_bytes([7; 32]).unwrap();
        fleetmesh_proto::event::UnsignedEvent {
            created_at: 1,
            kind,
            tags,
            content: String::new(),
        }
        .sign(&keys)
        .unwrap()
    }

    #[test]
    fn a_grants_shards_narrow_what_a_session_admits_and_split_the_counts() {
        let tally = Arc::new(Tally::default());
        tally.set_window(3600);
        let session = PeerSession {
            name: "p".into(),
            filters: Some(Arc::new(vec![filter(serde_json::json!({"kinds": [1, 7]}))])),
            rate: None,
            tally: tally.clone(),
        };
        let (note, tagged, reaction) = (
            event(1, vec![]),
            event(1, vec![vec!["t".into(), "x".into()]]),
            event(7, vec![]),
        );
        let admits = |e: &Event| session.refusal(e).is_none();
        assert!(admits(&note) && admits(&reaction));
        // our grant covers kind 1 tagged x, then kind 7: the rest is outside it
        let shards = vec![
            filter(serde_json::json!({"kinds": [1], "#t": ["x"]})),
            filter(serde_json::json!({"kinds": [7]})),
        ];
        tally.set_shards(shards.clone(), Vec::new());
        assert!(!admits(&note));
        assert!(admits(&tagged) && admits(&reaction));
        // only refused while the grant may still be on its way; out of filter after
        assert_eq!(session.refusal(&note).unwrap().0, PeerRefusal::Invalid);
        tally
            .shards_since
            .store(fleetmesh_proto::unix_now() - 3600, Relaxed);
        assert_eq!(session.refusal(&note).unwrap().0, PeerRefusal::OutOfFilter);
        assert!(tally.outbound_shards().is_empty());
        let client = |e: &Event| serde_json::json!(["EVENT", e.to_value()]).to_string();
        let relay = |e: &Event| serde_json::json!(["EVENT", "s", e.to_value()]).to_string();
        for m in [
            client(&tagged),
            relay(&reaction),
            client(&note),
            "[\"REQ\"]".into(),
        ] {
            tally.received_message(&m);
        }
        tally.sent_message(&client(&tagged));
        let n = fleetmesh_proto::unix_now() / 3600;
        let per = tally.window_shards(n);
        let c = tally.window(n);
        if c.events_in == 0 {
            return; // the hour turned between the counts and the read
        }
        assert_eq!(c.events_in, 3);
        assert_eq!(per.inbound.len(), 2);
        assert_eq!(per.inbound[0].events, 1);
        assert_eq!(per.inbound[0].bytes, client(&tagged).len() as u64);
        assert_eq!(per.inbound[1].events, 1);
        assert_eq!(per.inbound[1].bytes, relay(&reaction).len() as u64);
        assert!(per.outbound.is_empty(), "no shards that way");
        // new shards start the window's counts that way over
        tally.set_shards(shards[..1].to_vec(), Vec::new());
        assert!(tally.window_shards(n).inbound.is_empty());
    }
}
