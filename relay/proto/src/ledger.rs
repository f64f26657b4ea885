//! The accountability nouns: the traffic [`Grant`] a node gives a peer (kind 30801,
//! addressed by the HKDF-blinded pair id, which only the two peers can compute), the
//! [`BudgetReceipt`] each side of a pair signs every window (budget/1.0, a SHA-256 hash
//! chain), and the [`Report`] a node publishes about a peer (kind 30802, addressed by the
//! peer). docs/protocol.md gives the arithmetic; `fleetmesh-ledger` applies it.

use fleetmesh_schemas::constants::kind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::event::Event;
use crate::identity::NodeKeys;
use crate::noun::{Noun, noun_try_from, same, tag};
use crate::words::{Remedy, Rung, Unit};
use crate::{Error, Result};

/// The label of the blinded pair id a grant's `d` tag carries ([`pair_id`]).
pub const GRANT_LABEL: &[u8] = b"fleetmesh/grant";

/// The pair id of us (`secret`) and `peer` (x-only, hex): HKDF of the pair's ECDH secret,
/// the same from either side, meaningless to anybody else. A grant's `d` tag.
///
/// # Errors
/// [`Error::Crypto`] for a peer key that is not on the curve.
pub fn pair_id(secret: &secp256k1::SecretKey, peer: &str) -> Result<String> {
    crate::hkdf::blinded_tag(secret, peer, GRANT_LABEL).map(hex::encode)
}

/// A quantity with its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amount {
    /// How much.
    pub amount: u64,
    /// Of what.
    pub unit: Unit,
}

/// The AIMD schedule of a grant's capacity, in events per window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Aimd {
    /// The capacity in the first window.
    pub initial: u64,
    /// The floor halving stops at; an overrun at the floor suspends.
    pub min: u64,
    /// Added after each clean window, up to the grant's `events`.
    pub increase: u64,
}

/// A traffic grant: what a node takes from one peer per window (kind 30801, addressable
/// by the blinded pair id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    /// Most events per window: the capacity's ceiling.
    pub events: u64,
    /// Most bytes per window at full capacity.
    pub bytes: u64,
    /// Window length, seconds.
    pub window_secs: u64,
    /// The capacity's schedule.
    pub aimd: Aimd,
    /// NIP-01 filters the grant covers (all events when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<Value>>,
    /// When it takes effect (default: the event's `created_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<u64>,
    /// The blinded pair id (the `d` tag).
    #[serde(skip)]
    pub pair: String,
    /// NIP-40 expiration (a tag).
    #[serde(skip)]
    pub expires_at: Option<u64>,
}

impl Grant {
    /// The byte limit at capacity `cap` events: `bytes × cap / events`, rounded down.
    pub fn bytes_at(&self, cap: u64) -> u64 {
        let v = u128::from(self.bytes) * u128::from(cap) / u128::from(self.events.max(1));
        u64::try_from(v).unwrap_or(u64::MAX)
    }
}

/// `d` and `p` both name the peer the content names.
fn addressed_to(event: &Event, peer: &str) -> Result<()> {
    same("d", event.tag_value("d").unwrap_or_default(), &peer.into())?;
    same("p", event.tag_value("p").unwrap_or_default(), &peer.into())
}

fn expiry_tag(tags: &mut Vec<Vec<String>>, expires_at: Option<u64>) {
    if let Some(x) = expires_at {
        tags.push(tag("expiration", x.to_string()));
    }
}

impl Noun for Grant {
    const KIND: u16 = kind::BUDGET;
    const WHAT: &'static str = "a grant";

    fn with_tags(mut self, event: &Event) -> Result<Grant> {
        if self.aimd.min > self.aimd.initial || self.aimd.initial > self.events {
            return Err(Error::Schema(format!(
                "grant: the AIMD capacity must start between its floor and the ceiling \
                 (min {} ≤ initial {} ≤ events {})",
                self.aimd.min, self.aimd.initial, self.events
            )));
        }
        self.pair = event.tag_value("d").unwrap_or_default().to_owned();
        self.expires_at = event.expiration();
        Ok(self)
    }

    fn tags(&self) -> Vec<Vec<String>> {
        let mut tags = vec![tag("d", &self.pair)];
        expiry_tag(&mut tags, self.expires_at);
        tags
    }
}

/// Traffic one way in a window: EVENT messages and the bytes of NIP-01 text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Moved {
    /// Bytes (declared first: RFC 8785 orders keys).
    pub bytes: u64,
    /// Events.
    pub events: u64,
}

/// Zeros: the `prev` of a chain's first receipt and the `grant` of a receipt whose sender
/// knows no grant.
pub const ZERO: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A budget/1.0 receipt: what its signer sent and received over a pair's links in one
/// window, chained to its previous receipt. Fields are declared in RFC 8785 key order so
/// that serde's JSON of it is its canonical form (every number is an integer below 2^53).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetReceipt {
    /// The signer (x-only, hex).
    pub from: String,
    /// The grant its deliveries spend against (event id; [`ZERO`]: none known).
    pub grant: String,
    /// SHA-256 of the previous receipt ([`ZERO`] for seq 0).
    pub prev: String,
    /// `budget/1.0`.
    pub protocol: String,
    /// What the signer received from the other side.
    pub received: Moved,
    /// What the signer sent the other side.
    pub sent: Moved,
    /// Position in the signer's chain.
    pub seq: u64,
    /// What the signer sent, per shard of `grant` (in the grant's order; an event counts in
    /// the first shard it matches): present when that grant names shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<Moved>>,
    /// BIP-340 signature over SHA-256 of the receipt without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
    /// When it was made.
    pub ts: u64,
    /// `receipt`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Window number (Unix time / window_secs).
    pub window: u64,
    /// The window length.
    pub window_secs: u64,
}

/// Lowercase hex of SHA-256.
fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl BudgetReceipt {
    /// An unsigned receipt of `from`'s chain.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        from: String,
        grant: String,
        window: u64,
        window_secs: u64,
        seq: u64,
        prev: String,
        sent: Moved,
        received: Moved,
        ts: u64,
    ) -> BudgetReceipt {
        BudgetReceipt {
            from,
            grant,
            prev,
            protocol: fleetmesh_schemas::constants::protocol::BUDGET_1_0.to_owned(),
            received,
            seq,
            sent,
            shards: None,
            sig: None,
            ts,
            type_: "receipt".to_owned(),
            window,
            window_secs,
        }
    }

    /// The same receipt with what was sent per shard of its grant (`None`: the grant names
    /// no shards).
    #[must_use]
    pub fn with_shards(self, shards: Option<Vec<Moved>>) -> BudgetReceipt {
        BudgetReceipt { shards, ..self }
    }

    /// SHA-256 of the receipt's canonical JSON without its signature: what is signed.
    pub fn signing_digest(&self) -> [u8; 32] {
        let unsigned = BudgetReceipt {
            sig: None,
            ..self.clone()
        };
        Sha256::digest(serde_json::to_vec(&unsigned).expect("a receipt serializes")).into()
    }

    /// SHA-256 of the whole receipt's canonical JSON (signature included): the next
    /// receipt's `prev`.
    pub fn hash(&self) -> String {
        sha256_hex(&serde_json::to_vec(self).expect("a receipt serializes"))
    }

    /// Signs it with `keys` (whose key must be `from`).
    ///
    /// # Errors
    /// [`Error::Crypto`] when `from` is not the key's, [`Error::Random`] without randomness.
    pub fn sign(mut self, keys: &NodeKeys) -> Result<BudgetReceipt> {
        if self.from != keys.nostr_pubkey_hex() {
            return Err(Error::Crypto(format!(
                "a receipt from {} cannot be signed with the key of {}",
                self.from,
                keys.nostr_pubkey_hex()
            )));
        }
        let mut aux = [0u8; 32];
        getrandom::fill(&mut aux).map_err(|e| Error::Random(e.to_string()))?;
        let sig = crate::event::sign_schnorr(keys.nostr(), &self.signing_digest(), &aux);
        self.sig = Some(hex::encode(sig));
        Ok(self)
    }

    /// Whether the signature is `from`'s over the rest.
    pub fn verify(&self) -> bool {
        let (Some(sig), Ok(from)) = (self.sig.as_deref(), hex::decode(&self.from)) else {
            return false;
        };
        let (Ok(sig), Ok(from)) = (
            <[u8; 64]>::try_from(hex::decode(sig).unwrap_or_default().as_slice()),
            <[u8; 32]>::try_from(from.as_slice()),
        ) else {
            return false;
        };
        crate::event::verify_schnorr(&from, &self.signing_digest(), &sig)
    }

    /// Reads a receipt from JSON: the budget/1.0 schema, then the fields.
    ///
    /// # Errors
    /// [`Error::Schema`] naming what failed.
    pub fn from_value(v: &Value) -> Result<BudgetReceipt> {
        fleetmesh_schemas::SchemaSet::embedded()
            .validate(
                &fleetmesh_schemas::SchemaKey::Payload(
                    fleetmesh_schemas::constants::protocol::BUDGET_1_0.into(),
                ),
                v,
            )
            .map_err(|e| Error::Schema(e.to_string()))?;
        serde_json::from_value(v.clone()).map_err(|e| Error::Schema(format!("receipt: {e}")))
    }
}

/// The period a report covers, Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Period {
    /// Start.
    pub start: u64,
    /// End.
    pub end: u64,
}

/// Traffic one way: bytes, jobs, events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Traffic {
    /// Bytes.
    pub bytes: u64,
    /// Jobs.
    pub jobs: u64,
    /// Events relayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<u64>,
}

/// The head of the budget/1.0 receipt chain between reporter and subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainHead {
    /// The budget event (30801) the chain spends against (id, hex).
    pub budget: String,
    /// The newest receipt's digest (hex).
    pub head: String,
    /// Its sequence number.
    pub seq: u64,
    /// Receipts not yet acknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unacked: Option<u64>,
}

/// Complaint counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Complaints {
    /// Filed in the period.
    pub filed: u64,
    /// Still open.
    pub open: u64,
    /// Resolved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<u64>,
}

/// A node's periodic report about one peer (kind 30802, addressable by the subject).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The peer reported on (hex); also the `d` and `p` tags.
    pub subject: String,
    /// The period covered.
    pub period: Period,
    /// What the reporter served the subject.
    pub served: Traffic,
    /// What the reporter consumed from the subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumed: Option<Traffic>,
    /// The head of their receipt chain.
    pub receipt_chain: ChainHead,
    /// Complaints.
    pub complaints: Complaints,
    /// The rung applied; a `rung` tag, where present, repeats it.
    pub rung: Rung,
    /// Since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rung_since: Option<u64>,
    /// Unsettled credit the subject owes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outstanding: Option<Amount>,
    /// The remedy this report publishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remedy: Option<Remedy>,
    /// The window the decision was taken for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<u64>,
    /// Digests of the evidence-log lines the decision rests on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<Vec<String>>,
    /// A short note (≤ 280 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// NIP-40 expiration (a tag).
    #[serde(skip)]
    pub expires_at: Option<u64>,
}

impl Noun for Report {
    const KIND: u16 = kind::REPORT;
    const WHAT: &'static str = "a report";

    fn with_tags(mut self, event: &Event) -> Result<Report> {
        addressed_to(event, &self.subject)?;
        if let Some(rung) = event.tag_value("rung")
            && rung != self.rung.as_str()
        {
            return Err(Error::Mismatch {
                field: "rung",
                tag: rung.to_owned(),
                content: format!("{:?}", self.rung.as_str()),
            });
        }
        self.expires_at = event.expiration();
        Ok(self)
    }

    fn tags(&self) -> Vec<Vec<String>> {
        let mut tags = vec![
            tag("d", &self.subject),
            tag("p", &self.subject),
            tag("rung", self.rung.as_str()),
        ];
        expiry_tag(&mut tags, self.expires_at);
        tags
    }
}

noun_try_from!(Grant, Report);
