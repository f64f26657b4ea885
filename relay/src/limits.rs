//! The relay's limits and rate limits: enforced on every connection and advertised in
//! NIP-11's `limitation` object, so what clients read is what the relay does.

use fleetmesh_schemas::{SchemaKey, SchemaSet};
use serde::{Deserialize, Serialize};

use fleetmesh_proto::Error;
use fleetmesh_proto::event::Event;

/// Limits of the relay face. Every field has a default; the `[relay]` section of
/// `meshnode.toml` overrides them. None is reloadable: restart to change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest WebSocket message accepted, in bytes. Larger text messages get a NOTICE
    /// (the connection stays); frames past four times this close the connection.
    /// Default 131072.
    pub max_message_length: usize,
    /// Open subscriptions per connection. Default 32.
    pub max_subscriptions: usize,
    /// Filters per REQ. Default 10.
    pub max_filters: usize,
    /// Largest `limit` honoured; larger ones are capped, and it is the default when a
    /// filter gives none. Default 500.
    pub max_limit: u64,
    /// Longest subscription id, in characters. Default 64.
    pub max_subid_length: usize,
    /// Most tags on one event. Default 2000.
    pub max_event_tags: usize,
    /// Longest `content`, in bytes. Default 65536.
    pub max_content_length: usize,
    /// Most values in one filter list (`ids`, `authors`, `kinds`, `#x`). Default 1000.
    pub max_filter_values: usize,
    /// How far in the future `created_at` may be, in seconds. Default 900.
    pub created_at_upper_limit: u64,
    /// Sustained EVENTs per second per connection. Default 500.
    pub events_per_second: f64,
    /// EVENTs a connection may send in a burst above the sustained rate. Default 1000.
    pub event_burst: f64,
    /// Sustained REQs per second per connection. Default 50.
    pub reqs_per_second: f64,
    /// REQs in a burst. Default 100.
    pub req_burst: f64,
    /// Serve NIP-77 negentropy sync (NEG-OPEN/NEG-MSG/NEG-CLOSE). Default true.
    pub negentropy: bool,
    /// Open negentropy sessions per connection. Default 8.
    pub max_neg_sessions: usize,
    /// Most items (events matching the filter) one negentropy session may reconcile.
    /// Default 1 000 000.
    pub max_neg_items: usize,
    /// Largest negentropy message the relay writes, in bytes before hex encoding.
    /// Default 50 000 (100 000 hex characters, under the default message limit).
    pub neg_frame_size: u64,
    /// Output queued for one connection, in bytes, before it counts as too slow and is
    /// closed; a REQ's stored events are sent only while less than half is queued, so a
    /// query's answer never sits in memory whole. At least 2 × `max_message_length`.
    /// Default 4 194 304 (4 MiB).
    pub max_queued_bytes: usize,
    /// Output queued for all connections together, in bytes; the connection whose output
    /// would go past it is closed, not the others. At least `max_queued_bytes`. Default
    /// 268 435 456 (256 MiB).
    pub max_queued_bytes_total: usize,
    /// Seconds of silence from a client before the relay pings it; no frame at all for
    /// three times this closes the connection. 1 to 3600. Default 30.
    pub ping_interval_secs: u64,
    /// Seconds a connection with no subscription and no negentropy session may send
    /// nothing before it is closed. 1 to 86 400. Default 60.
    pub idle_timeout_secs: u64,
    /// Load shedding: `auto` (the rung follows the pressure), `off`, or pinned at
    /// `rung1` (writes and new subscriptions from granted peers only) or `rung2` (granted
    /// peers only, within their grants). Default `auto`.
    pub shedding: Shedding,
    /// Kinds served only to the keys they are addressed to: a client must authenticate
    /// (NIP-42) and ask for them by its own key (`#p` or `authors`); other filters never
    /// match them. Federation links read them within their agreed shards. `[]` serves them
    /// to anyone. Default `[1059, 21059]` (NIP-59 gift wraps and their ephemeral form, as
    /// NIP-17 asks of relays).
    pub private_kinds: Vec<u16>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_length: 131_072,
            max_subscriptions: 32,
            max_filters: 10,
            max_limit: 500,
            max_subid_length: 64,
            max_event_tags: 2000,
            max_content_length: 65_536,
            max_filter_values: 1000,
            created_at_upper_limit: 900,
            events_per_second: 500.0,
            event_burst: 1000.0,
            reqs_per_second: 50.0,
            req_burst: 100.0,
            negentropy: true,
            max_neg_sessions: 8,
            max_neg_items: 1_000_000,
            neg_frame_size: 50_000,
            max_queued_bytes: 4 << 20,
            max_queued_bytes_total: 256 << 20,
            ping_interval_secs: 30,
            idle_timeout_secs: 60,
            shedding: Shedding::Auto,
            private_kinds: vec![
                fleetmesh_schemas::constants::kind::GIFT_WRAP,
                fleetmesh_schemas::constants::kind::EPHEMERAL_GIFT_WRAP,
            ],
        }
    }
}

impl Limits {
    /// Checks every setting against the bound it really has, so a bad value stops the
    /// node at start-up instead of failing later on a connection.
    ///
    /// # Errors
    /// `key = value: why` for the first setting out of its range.
    pub fn check(&self) -> Result<(), String> {
        let range = |key: &str, v: u64, lo: u64, hi: u64| -> Result<(), String> {
            if v < lo || v > hi {
                return Err(format!("{key} = {v}: must be between {lo} and {hi}"));
            }
            Ok(())
        };
        let u = |v: usize| v as u64;
        range(
            "max_message_length",
            u(self.max_message_length),
            1024,
            64 << 20,
        )?;
        range("max_subscriptions", u(self.max_subscriptions), 1, 4096)?;
        range("max_filters", u(self.max_filters), 1, 256)?;
        range("max_limit", self.max_limit, 1, 100_000)?;
        range("max_subid_length", u(self.max_subid_length), 1, 1024)?;
        range("max_event_tags", u(self.max_event_tags), 1, 1_000_000)?;
        range(
            "max_content_length",
            u(self.max_content_length),
            1,
            u(self.max_message_length),
        )?;
        range("max_filter_values", u(self.max_filter_values), 1, 100_000)?;
        range(
            "created_at_upper_limit",
            self.created_at_upper_limit,
            0,
            1 << 31,
        )?;
        for (key, v, lo) in [
            ("events_per_second", self.events_per_second, 0.0),
            ("event_burst", self.event_burst, 1.0),
            ("reqs_per_second", self.reqs_per_second, 0.0),
            ("req_burst", self.req_burst, 1.0),
        ] {
            if !v.is_finite() || v < lo || v > 1e9 {
                return Err(format!(
                    "{key} = {v}: must be a number between {lo} and 1e9"
                ));
            }
        }
        range("max_neg_sessions", u(self.max_neg_sessions), 1, 256)?;
        range("max_neg_items", u(self.max_neg_items), 1, 100_000_000)?;
        // negentropy frames are at least 4 KiB; hex doubles them into one message
        range(
            "neg_frame_size",
            self.neg_frame_size,
            4096,
            (u(self.max_message_length) / 2).max(4096),
        )?;
        range(
            "max_queued_bytes",
            u(self.max_queued_bytes),
            2 * u(self.max_message_length),
            1 << 32,
        )?;
        range(
            "max_queued_bytes_total",
            u(self.max_queued_bytes_total),
            u(self.max_queued_bytes),
            1 << 40,
        )?;
        range("ping_interval_secs", self.ping_interval_secs, 1, 3600)?;
        range("idle_timeout_secs", self.idle_timeout_secs, 1, 86_400)?;
        Ok(())
    }

    /// Whether an event may be taken in: within the size limits, not too far in the future,
    /// not expired (NIP-40), a correct id and BIP-340 signature, and, for a kind fleetmesh
    /// defines, valid against its schema. The relay face applies it to every EVENT and
    /// `meshnode sync` to every event it fetches.
    ///
    /// # Errors
    /// Why not, with the NIP-01 `invalid:` message for the `OK`.
    pub fn admit(&self, event: &Event, schemas: &SchemaSet, now: u64) -> Result<(), Inadmissible> {
        self.admit_reason(event, schemas, now)
            .map_err(|reason| Inadmissible {
                forged: reason == FORGED_ID || reason == FORGED_SIG,
                reason,
            })
    }

    fn admit_reason(&self, event: &Event, schemas: &SchemaSet, now: u64) -> Result<(), String> {
        if event.tags.len() > self.max_event_tags {
            return Err(format!(
                "invalid: {} tags, the most allowed is {}",
                event.tags.len(),
                self.max_event_tags
            ));
        }
        if event.content.len() > self.max_content_length {
            return Err(format!(
                "invalid: content of {} bytes, the most allowed is {}",
                event.content.len(),
                self.max_content_length
            ));
        }
        if event.created_at > now.saturating_add(self.created_at_upper_limit) {
            return Err("invalid: created_at is too far in the future".into());
        }
        if event.expiration().is_some_and(|x| x <= now) {
            return Err("invalid: event has expired".into());
        }
        if let Err(e) = event.verify() {
            return Err(match &e {
                Error::InvalidEvent { field: "id", .. } => FORGED_ID.to_owned(),
                Error::InvalidEvent { field: "sig", .. } => FORGED_SIG.to_owned(),
                other => format!("invalid: {other}"),
            });
        }
        if schemas.contains(&SchemaKey::Event(event.kind)) {
            schemas
                .validate_event(&event.to_value())
                .map_err(|e| format!("invalid: {e}"))?;
        }
        Ok(())
    }

    /// NIP-11's `limitation` object for these limits.
    pub fn nip11(&self) -> serde_json::Value {
        serde_json::json!({
            "max_message_length": self.max_message_length,
            "max_subscriptions": self.max_subscriptions,
            "max_filters": self.max_filters,
            "max_limit": self.max_limit,
            "default_limit": self.max_limit,
            "max_subid_length": self.max_subid_length,
            "max_event_tags": self.max_event_tags,
            "max_content_length": self.max_content_length,
            "created_at_upper_limit": self.created_at_upper_limit,
            "auth_required": false,
            "payment_required": false,
            "restricted_writes": false,
        })
    }
}

/// A token bucket: `rate` tokens per second, holding at most `burst`.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: std::time::Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: f64, burst: f64) -> TokenBucket {
        TokenBucket {
            rate,
            burst: burst.max(1.0),
            tokens: burst.max(1.0),
            last: std::time::Instant::now(),
        }
    }

    /// Takes one token if there is one.
    pub fn take(&mut self) -> bool {
        let now = std::time::Instant::now();
        let elapsed = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

const FORGED_ID: &str = "invalid: event id does not match its content";
const FORGED_SIG: &str = "invalid: bad signature";

/// Why [`Limits::admit`] refused an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inadmissible {
    /// Its id or signature does not hold: whoever sent it forged it or corrupted it (the
    /// ledger's S4 evidence), rather than broke a limit.
    pub forged: bool,
    /// The NIP-01 `invalid:` message for the `OK`.
    pub reason: String,
}

impl std::fmt::Display for Inadmissible {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// How the relay sheds load (`[relay] shedding`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shedding {
    /// The rung follows the pressure.
    #[default]
    Auto,
    /// Never sheds (rung 0).
    Off,
    /// Pinned at rung 1: writes and new subscriptions from granted peers only.
    Rung1,
    /// Pinned at rung 2: granted peers only, within their grants.
    Rung2,
}
