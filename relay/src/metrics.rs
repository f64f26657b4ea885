//! Counters of the relay face, rendered in the Prometheus text format for `/metrics`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Why an event was turned away; the label on `events_rejected_total`. The names are the
/// NIP-01 `OK` prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// `duplicate:` — already stored, or a newer version is.
    Duplicate,
    /// `invalid:` — malformed, bad id or signature, fails its schema, expired, too big.
    Invalid,
    /// `blocked:` — deleted by its author.
    Blocked,
    /// `rate-limited:` — the connection or the store is over its rate.
    RateLimited,
    /// `error:` — the store failed.
    Error,
}

const REASONS: [(Rejection, &str); 5] = [
    (Rejection::Duplicate, "duplicate"),
    (Rejection::Invalid, "invalid"),
    (Rejection::Blocked, "blocked"),
    (Rejection::RateLimited, "rate-limited"),
    (Rejection::Error, "error"),
];

/// The relay's counters. Cheap to bump from any thread.
#[derive(Debug, Default)]
pub struct Metrics {
    /// EVENT messages received.
    pub events_received: AtomicU64,
    /// Events stored (committed).
    pub events_stored: AtomicU64,
    /// Ephemeral events fanned out.
    pub events_ephemeral: AtomicU64,
    rejected: [AtomicU64; 5],
    /// WebSocket connections accepted, ever.
    pub connections_total: AtomicU64,
    /// WebSocket connections open now.
    pub connections_open: AtomicU64,
    /// Subscriptions open now, all connections together.
    pub subscriptions_open: AtomicU64,
    /// REQ messages served.
    pub reqs: AtomicU64,
    /// NOTICEs sent for malformed or oversized messages.
    pub notices: AtomicU64,
    /// Messages refused by load shedding (writes, new subscriptions).
    pub shed: AtomicU64,
    /// Store operations that failed (commits, queries): a damaged or full disk.
    store_errors: AtomicU64,
    /// The last store failure's message.
    last_store_error: std::sync::Mutex<Option<String>>,
}

impl Metrics {
    /// Counts a rejection.
    pub fn reject(&self, why: Rejection) {
        let i = REASONS
            .iter()
            .position(|(r, _)| *r == why)
            .expect("every reason listed");
        self.rejected[i].fetch_add(1, Relaxed);
    }

    /// Counts a failed store operation and keeps its message for `/healthz`.
    pub fn store_error(&self, message: &str) {
        self.store_errors.fetch_add(1, Relaxed);
        *self
            .last_store_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(message.to_owned());
    }

    /// Failed store operations so far, and the last one's message.
    pub fn store_errors(&self) -> (u64, Option<String>) {
        let last = self
            .last_store_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        (self.store_errors.load(Relaxed), last)
    }

    /// Rejections so far for `why`.
    pub fn rejected(&self, why: Rejection) -> u64 {
        let i = REASONS
            .iter()
            .position(|(r, _)| *r == why)
            .expect("every reason listed");
        self.rejected[i].load(Relaxed)
    }

    /// The rejections since the counts in `last` (which it updates), as
    /// `rate-limited=12 invalid=3`; `None` when there were none.
    pub fn rejections_since(&self, last: &mut [u64; 5]) -> Option<String> {
        let mut parts = Vec::new();
        for (i, (_, name)) in REASONS.iter().enumerate() {
            let now = self.rejected[i].load(Relaxed);
            if now > last[i] {
                parts.push(format!("{name}={}", now - last[i]));
            }
            last[i] = now;
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }

    /// The Prometheus text exposition, with the store's figures read by the caller.
    pub fn render(&self, store_events: u64, store_bytes: u64) -> String {
        let mut out = String::with_capacity(2048);
        let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        };
        metric(
            "fleetmesh_relay_events_received_total",
            "counter",
            "EVENT messages received.",
            self.events_received.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_events_stored_total",
            "counter",
            "Events committed to the store.",
            self.events_stored.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_events_ephemeral_total",
            "counter",
            "Ephemeral events fanned out without storing.",
            self.events_ephemeral.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_connections_total",
            "counter",
            "WebSocket connections accepted.",
            self.connections_total.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_connections",
            "gauge",
            "WebSocket connections open.",
            self.connections_open.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_subscriptions",
            "gauge",
            "Subscriptions open.",
            self.subscriptions_open.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_reqs_total",
            "counter",
            "REQ messages served.",
            self.reqs.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_store_errors_total",
            "counter",
            "Store operations (commits, queries) that failed.",
            self.store_errors.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_notices_total",
            "counter",
            "NOTICEs sent for malformed or oversized messages.",
            self.notices.load(Relaxed),
        );
        metric(
            "fleetmesh_relay_shed_total",
            "counter",
            "Writes and new subscriptions refused by load shedding.",
            self.shed.load(Relaxed),
        );
        metric(
            "fleetmesh_store_events",
            "gauge",
            "Events in the store.",
            store_events,
        );
        metric(
            "fleetmesh_store_bytes",
            "gauge",
            "Size of the store's database file in bytes (WAL excluded).",
            store_bytes,
        );
        let name = "fleetmesh_relay_events_rejected_total";
        let _ = writeln!(
            out,
            "# HELP {name} Events rejected, by NIP-01 OK prefix.\n# TYPE {name} counter"
        );
        for (i, (_, label)) in REASONS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}{{reason=\"{label}\"}} {}",
                self.rejected[i].load(Relaxed)
            );
        }
        out
    }
}
