//! What the federation projects for outsiders, in other NIPs' kinds: a node's standing as
//! a NIP-85 trusted assertion (kind 30385, from its 30802 reports) and a relay's health as
//! a NIP-66 monitor event (kind 30166). Both say everything in tags.

use fleetmesh_schemas::constants::kind;
use serde_json::Value;

use crate::event::{Event, UnsignedEvent};
use crate::identity::NodeKeys;
use crate::noun::{checked, tag, tag_values};
use crate::words::Rung;
use crate::{Error, Result};

fn number<T: std::str::FromStr>(event: &Event, name: &'static str) -> Result<Option<T>> {
    event
        .tag_value(name)
        .map(|v| {
            v.parse().map_err(|_| Error::InvalidEvent {
                field: "tags",
                reason: format!("the {name} tag {v:?} is not a number"),
            })
        })
        .transpose()
}

fn push_number(tags: &mut Vec<Vec<String>>, name: &str, v: Option<impl ToString>) {
    if let Some(v) = v {
        tags.push(tag(name, v.to_string()));
    }
}

/// A NIP-85 trusted assertion about an external identifier (kind 30385). fleetmesh makes
/// them about nodes (`d` = `did:nostr:<pubkey>`, `k` = `did:nostr`) with a rank and its own
/// result tags; it reads anyone's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assertion {
    /// The NIP-73 identifier (`d`).
    pub subject: String,
    /// Its kind (`k`), e.g. `did:nostr`.
    pub subject_kind: String,
    /// Rank, 0–100.
    pub rank: Option<u8>,
    /// The rung most reporters apply.
    pub rung: Option<Rung>,
    /// Receipted jobs in the window.
    pub jobs: Option<u64>,
    /// Open complaints.
    pub complaints: Option<u64>,
    /// Percent of heartbeats seen.
    pub uptime: Option<u8>,
    /// Percent of receipts with a passing verdict.
    pub verified: Option<u8>,
    /// Distinct reporters aggregated.
    pub reporters: Option<u64>,
}

impl Assertion {
    /// An assertion about the node with Nostr key `pubkey` (hex), ranked `rank`.
    pub fn about_node(pubkey: &str, rank: u8) -> Assertion {
        Assertion {
            subject: format!("did:nostr:{pubkey}"),
            subject_kind: "did:nostr".into(),
            rank: Some(rank),
            rung: None,
            jobs: None,
            complaints: None,
            uptime: None,
            verified: None,
            reporters: None,
        }
    }

    /// Reads an assertion: id and signature, kind, the kind's schema, the tags' values.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`], [`Error::WrongKind`], [`Error::Schema`].
    pub fn from_event(event: &Event) -> Result<Assertion> {
        checked(event, kind::ASSERTION_PROJECTION, "a trusted assertion")?;
        Ok(Assertion {
            subject: event.tag_value("d").unwrap_or_default().to_owned(),
            subject_kind: event.tag_value("k").unwrap_or_default().to_owned(),
            rank: number(event, "rank")?,
            rung: event.tag_value("rung").map(str::parse).transpose()?,
            jobs: number(event, "jobs")?,
            complaints: number(event, "complaints")?,
            uptime: number(event, "uptime")?,
            verified: number(event, "verified")?,
            reporters: number(event, "reporters")?,
        })
    }

    /// Signs it with `keys` at `created_at`.
    ///
    /// # Errors
    /// [`Error::Random`] if the signing nonce cannot be drawn.
    pub fn sign(&self, keys: &NodeKeys, created_at: u64) -> Result<Event> {
        keys.sign(self.unsigned(created_at))
    }

    /// The event that says it, to be signed (content empty, as NIP-85 says).
    pub fn unsigned(&self, created_at: u64) -> UnsignedEvent {
        let mut tags = vec![tag("d", &self.subject), tag("k", &self.subject_kind)];
        push_number(&mut tags, "rank", self.rank);
        if let Some(r) = self.rung {
            tags.push(tag("rung", r.as_str()));
        }
        push_number(&mut tags, "jobs", self.jobs);
        push_number(&mut tags, "complaints", self.complaints);
        push_number(&mut tags, "uptime", self.uptime);
        push_number(&mut tags, "verified", self.verified);
        push_number(&mut tags, "reporters", self.reporters);
        UnsignedEvent {
            created_at,
            kind: kind::ASSERTION_PROJECTION,
            tags,
            content: String::new(),
        }
    }
}

/// A NIP-66 relay discovery event (kind 30166): what a monitor found probing one relay.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayMonitor {
    /// The relay (`d`): its normalized URL, or its pubkey.
    pub relay: String,
    /// Round-trip times, ms.
    pub rtt_open: Option<u64>,
    /// Read round trip, ms.
    pub rtt_read: Option<u64>,
    /// Write round trip, ms.
    pub rtt_write: Option<u64>,
    /// Network (`n`: clearnet, tor, i2p, loki).
    pub network: Option<String>,
    /// Relay types (`T`, PascalCase).
    pub types: Vec<String>,
    /// Supported NIPs (`N`).
    pub nips: Vec<u32>,
    /// Requirements (`R`, `!` for false).
    pub requirements: Vec<String>,
    /// Accepted kinds (`k`, `!` for rejected).
    pub kinds: Vec<String>,
    /// The relay's NIP-11 document, when the monitor includes it.
    pub document: Option<Value>,
}

impl RelayMonitor {
    /// Reads one: id and signature, kind, the kind's schema (NIP-11 document included),
    /// the tags' values.
    ///
    /// # Errors
    /// [`Error::InvalidEvent`], [`Error::WrongKind`], [`Error::Schema`].
    pub fn from_event(event: &Event) -> Result<RelayMonitor> {
        checked(
            event,
            kind::RELAY_MONITOR_PROJECTION,
            "a relay monitor event",
        )?;
        let owned = |name: &str| -> Vec<String> {
            tag_values(event, name)
                .into_iter()
                .map(String::from)
                .collect()
        };
        let nips = tag_values(event, "N")
            .into_iter()
            .map(|n| {
                n.parse().map_err(|_| Error::InvalidEvent {
                    field: "tags",
                    reason: format!("the N tag {n:?} is not a NIP number"),
                })
            })
            .collect::<Result<Vec<u32>>>()?;
        Ok(RelayMonitor {
            relay: event.tag_value("d").unwrap_or_default().to_owned(),
            rtt_open: number(event, "rtt-open")?,
            rtt_read: number(event, "rtt-read")?,
            rtt_write: number(event, "rtt-write")?,
            network: event.tag_value("n").map(String::from),
            types: owned("T"),
            nips,
            requirements: owned("R"),
            kinds: owned("k"),
            document: if event.content.is_empty() {
                None
            } else {
                Some(
                    serde_json::from_str(&event.content)
                        .map_err(|e| Error::Schema(format!("content is not JSON: {e}")))?,
                )
            },
        })
    }

    /// Signs it with the monitor's `keys` at `created_at`.
    ///
    /// # Errors
    /// [`Error::Random`] if the signing nonce cannot be drawn.
    pub fn sign(&self, keys: &NodeKeys, created_at: u64) -> Result<Event> {
        keys.sign(self.unsigned(created_at))
    }

    /// The event that says it, to be signed.
    pub fn unsigned(&self, created_at: u64) -> UnsignedEvent {
        let mut tags = vec![tag("d", &self.relay)];
        push_number(&mut tags, "rtt-open", self.rtt_open);
        push_number(&mut tags, "rtt-read", self.rtt_read);
        push_number(&mut tags, "rtt-write", self.rtt_write);
        if let Some(n) = &self.network {
            tags.push(tag("n", n));
        }
        tags.extend(self.types.iter().map(|t| tag("T", t)));
        tags.extend(self.nips.iter().map(|n| tag("N", n.to_string())));
        tags.extend(self.requirements.iter().map(|r| tag("R", r)));
        tags.extend(self.kinds.iter().map(|k| tag("k", k)));
        UnsignedEvent {
            created_at,
            kind: kind::RELAY_MONITOR_PROJECTION,
            tags,
            content: self
                .document
                .as_ref()
                .map_or_else(String::new, Value::to_string),
        }
    }
}

impl TryFrom<&Event> for Assertion {
    type Error = Error;
    fn try_from(event: &Event) -> Result<Assertion> {
        Assertion::from_event(event)
    }
}

impl TryFrom<&Event> for RelayMonitor {
    type Error = Error;
    fn try_from(event: &Event) -> Result<RelayMonitor> {
        RelayMonitor::from_event(event)
    }
}
