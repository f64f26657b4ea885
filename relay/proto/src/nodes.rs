//! What a node says about itself: the keys it revoked (kind 11802), that it is alive
//! (kind 21801, ephemeral), and the shards of the store it holds (kind 30803).

use std::collections::BTreeSet;

use fleetmesh_schemas::constants::kind;
use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::identity::NodeClass;
use crate::noun::{Noun, noun_try_from, same, tag, tag_values};
use crate::words::{Engine, KeyType, RevocationReason};
use crate::{Error, Result};

/// One revoked key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedKey {
    /// Its algorithm.
    #[serde(rename = "type")]
    pub key_type: KeyType,
    /// The public key (hex).
    pub public: String,
    /// From when signatures by it and encryption to it are refused.
    pub revoked_at: u64,
    /// Why.
    pub reason: RevocationReason,
    /// The key that replaces it (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
}

/// The keys a node has revoked (kind 11802, replaceable): one `revoked` tag per key, and
/// a `p` tag naming the successor identity when the Nostr key itself is replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// The revoked keys.
    pub revoked: Vec<RevokedKey>,
    /// The successor Nostr identity (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successor: Option<String>,
}

impl Noun for Revocation {
    const KIND: u16 = kind::KEY_REVOCATION;
    const WHAT: &'static str = "a key revocation";

    fn with_tags(self, event: &Event) -> Result<Revocation> {
        let tagged: BTreeSet<(&str, &str)> = event
            .tags
            .iter()
            .filter(|t| t.first().map(String::as_str) == Some("revoked"))
            .map(|t| {
                (
                    t.get(1).map_or("", String::as_str),
                    t.get(2).map_or("", String::as_str),
                )
            })
            .collect();
        let listed: BTreeSet<(&str, &str)> = self
            .revoked
            .iter()
            .map(|k| (k.key_type.as_str(), k.public.as_str()))
            .collect();
        if tagged != listed {
            return Err(Error::Mismatch {
                field: "revoked",
                tag: format!("{tagged:?}"),
                content: format!("{listed:?}"),
            });
        }
        let p = event.tag_value("p");
        if p != self.successor.as_deref() {
            return Err(Error::Mismatch {
                field: "p",
                tag: p.unwrap_or_default().to_owned(),
                content: format!("{:?}", self.successor),
            });
        }
        Ok(self)
    }

    fn tags(&self) -> Vec<Vec<String>> {
        let mut tags: Vec<Vec<String>> = self
            .revoked
            .iter()
            .map(|k| {
                vec![
                    "revoked".to_owned(),
                    k.key_type.as_str().to_owned(),
                    k.public.clone(),
                ]
            })
            .collect();
        if let Some(s) = &self.successor {
            tags.push(tag("p", s));
        }
        tags
    }
}

/// Load at the time of a heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// CPU load (1.0 = one core busy).
    pub cpu: f64,
    /// Memory in use, 0–1.
    pub mem: f64,
    /// GPU busy, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<f64>,
    /// Jobs waiting.
    pub queue_depth: u64,
    /// Jobs running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_running: Option<u64>,
}

/// A compute backend a node offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backend {
    /// The resolved backend (`cpu`, `wgpu`, `cuda:0`, …).
    pub name: String,
    /// The engines it runs.
    pub engines: Vec<Engine>,
    /// The device's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Device memory, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
    /// Free device memory, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_free_bytes: Option<u64>,
}

/// A liveness beacon (kind 21801, ephemeral: relays forward it and never store it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Seconds since the node started.
    pub uptime_secs: u64,
    /// Its load.
    pub load: Load,
    /// What it can run.
    pub backends: Vec<Backend>,
    /// The protocol digest it speaks; also the `protocol` tag.
    pub protocol_digest: String,
    /// Its software version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// A counter, so that a stale beacon can be told from a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// Its class (a `class` tag).
    #[serde(skip)]
    pub class: Option<NodeClass>,
    /// The peers it is addressed to (`p` tags, hex).
    #[serde(skip)]
    pub to: Vec<String>,
}

impl Noun for Heartbeat {
    const KIND: u16 = kind::HEARTBEAT;
    const WHAT: &'static str = "a heartbeat";

    fn with_tags(mut self, event: &Event) -> Result<Heartbeat> {
        let protocol = event.tag_value("protocol").unwrap_or_default();
        same("protocol", protocol, &self.protocol_digest.as_str().into())?;
        self.class = match event.tag_value("class") {
            Some(c) => Some(
                serde_json::from_value(c.into())
                    .map_err(|e| Error::Schema(format!("class: {e}")))?,
            ),
            None => None,
        };
        self.to = tag_values(event, "p")
            .into_iter()
            .map(String::from)
            .collect();
        Ok(self)
    }

    fn tags(&self) -> Vec<Vec<String>> {
        let mut tags = vec![tag("protocol", &self.protocol_digest)];
        if let Some(c) = self.class {
            tags.push(tag("class", c.as_str()));
        }
        tags.extend(self.to.iter().map(|p| tag("p", p)));
        tags
    }
}

/// A range of event ids, inclusive, hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRange {
    /// The first id.
    pub start: String,
    /// The last id.
    pub end: String,
}

/// A range of `created_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimeRange {
    /// From.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Until.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
}

/// One replicated shard of the store its author holds (kind 30803, addressable by the
/// shard id): `d` is the id, `x` the digest, `p` tags the replica holders.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    /// The shard's id; also the `d` tag.
    pub shard_id: String,
    /// The ids it covers.
    pub key_range: KeyRange,
    /// The times it covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_range: Option<TimeRange>,
    /// The kinds it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kinds: Option<Vec<u16>>,
    /// Events in it.
    pub event_count: u64,
    /// Its size, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Its digest (hex); also the `x` tag.
    pub digest: String,
    /// The epoch of the sharding it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// How many copies are wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_factor: Option<u64>,
    /// Who else holds it (hex); each also a `p` tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<String>>,
    /// Relays it can be synced from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relays: Option<Vec<String>>,
}

impl Noun for Shard {
    const KIND: u16 = kind::SHARD;
    const WHAT: &'static str = "a shard";

    fn with_tags(self, event: &Event) -> Result<Shard> {
        same(
            "d",
            event.tag_value("d").unwrap_or_default(),
            &self.shard_id.as_str().into(),
        )?;
        same(
            "x",
            event.tag_value("x").unwrap_or_default(),
            &self.digest.as_str().into(),
        )?;
        let listed = self.replicas.as_deref().unwrap_or_default();
        if let Some(p) = tag_values(event, "p")
            .into_iter()
            .find(|p| !listed.iter().any(|r| r == p))
        {
            return Err(Error::Mismatch {
                field: "p",
                tag: p.to_owned(),
                content: format!("replicas {listed:?}"),
            });
        }
        Ok(self)
    }

    fn tags(&self) -> Vec<Vec<String>> {
        let mut tags = vec![tag("d", &self.shard_id), tag("x", &self.digest)];
        tags.extend(self.replicas.iter().flatten().map(|p| tag("p", p.as_str())));
        tags
    }
}

noun_try_from!(Revocation, Heartbeat, Shard);
