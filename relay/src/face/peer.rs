//! Relay sessions with federation peers: what a session opened over a peer link (rather
//! than by an anonymous client) is held to, and the per-peer tally of what it moved and
//! what was refused from it.
//!
//! The transport that authenticated the peer (an iroh link's hello) hands
//! [`Relay::serve_frames`](super::Relay::serve_frames) a [`PeerSession`]: events the peer
//! pushes outside the shard filter agreed with it are refused (`blocked:`), its own
//! event rate replaces the relay's per-connection one, and everything it sends or is sent
//! is counted in its [`Tally`], shared by all of the peer's sessions. The counts are the
//! wire measurements the accountability ledger meters peers by.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use fleetmesh_proto::event::Event;
use fleetmesh_proto::filter::Filter;
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
    /// Whether `event` lies within the agreed shards.
    pub fn admits(&self, event: &Event) -> bool {
        self.filters
            .as_ref()
            .is_none_or(|fs| fs.iter().any(|f| f.matches(event)))
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
    /// Unix time of the peer's last NIP-77 reconciliation on our face (0: never).
    reconciled_at: AtomicU64,
    /// The counts per window of Unix time, when windows are set ([`Tally::set_window`]).
    windows: std::sync::Mutex<Windows>,
}

/// Counts per window: window length (0: not kept) and the last few windows' counts.
#[derive(Debug, Default)]
struct Windows {
    secs: u64,
    slots: std::collections::VecDeque<(u64, TallyCounts)>,
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
}

impl Tally {
    /// Counts `events` (carried in `bytes`) received from the peer.
    pub fn received(&self, events: u64, bytes: u64) {
        self.events_in.fetch_add(events, Relaxed);
        self.bytes_in.fetch_add(bytes, Relaxed);
        self.in_window(|c| {
            c.events_in += events;
            c.bytes_in += bytes;
        });
    }

    /// Counts `events` (carried in `bytes`) sent to the peer.
    pub fn sent(&self, events: u64, bytes: u64) {
        self.events_out.fetch_add(events, Relaxed);
        self.bytes_out.fetch_add(bytes, Relaxed);
        self.in_window(|c| {
            c.events_out += events;
            c.bytes_out += bytes;
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
        let w = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        w.slots
            .iter()
            .find(|(k, _)| *k == n)
            .map(|(_, c)| *c)
            .unwrap_or_default()
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
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.window(now / secs)
    }

    fn in_window(&self, add: impl FnOnce(&mut TallyCounts)) {
        let mut w = self
            .windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.secs == 0 {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let n = now / w.secs;
        if w.slots.back().is_none_or(|(k, _)| *k != n) {
            w.slots.push_back((n, TallyCounts::default()));
            while w.slots.len() > WINDOWS_KEPT {
                w.slots.pop_front();
            }
        }
        if let Some((_, c)) = w.slots.back_mut() {
            add(c);
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
        self.in_window(|c| match why {
            PeerRefusal::OutOfFilter => c.out_of_filter += n,
            PeerRefusal::Malformed => c.malformed += n,
            PeerRefusal::Forged => c.forged += n,
            PeerRefusal::Invalid => c.invalid += n,
            PeerRefusal::RateLimited => c.rate_limited += n,
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
        }
    }
}
