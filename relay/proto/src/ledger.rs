//! The accountability nouns: the budget a node grants a peer (kind 30801) and the report it
//! publishes about one (kind 30802). Both are addressed by the peer (`d` = `p` = the
//! peer's key, which the content repeats: checked here, since a schema cannot).

use fleetmesh_schemas::constants::kind;
use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::noun::{Noun, noun_try_from, same, tag};
use crate::words::{Rung, Unit};
use crate::{Error, Result};

/// A quantity with its unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Amount {
    /// How much.
    pub amount: u64,
    /// Of what.
    pub unit: Unit,
}

/// AIMD parameters of a credit window, in the unit of the credit limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Aimd {
    /// The window to start with.
    pub initial: u64,
    /// Floor after decreases (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u64>,
    /// Ceiling (default: the credit limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// Added after each window settled in full.
    pub increase: u64,
    /// Multiplied in on a late or disputed settlement (0 < f < 1).
    pub decrease_factor: f64,
}

/// A budget: the credit a node extends to one peer (kind 30801, addressable by the peer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// The peer it is granted to (hex); also the `d` and `p` tags.
    pub peer: String,
    /// The most unsettled credit the peer may owe.
    pub credit_limit: Amount,
    /// Length of an accounting window.
    pub window_secs: u64,
    /// The credit window's AIMD parameters.
    pub aimd: Aimd,
    /// When it takes effect (default: the event's `created_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starts_at: Option<u64>,
    /// Protocols it may be spent on (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocols: Option<Vec<String>>,
    /// Accepted settlement methods, preferred first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settlement: Option<Vec<String>>,
    /// The rung it reflects (S0 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rung: Option<Rung>,
    /// NIP-40 expiration (a tag).
    #[serde(skip)]
    pub expires_at: Option<u64>,
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

impl Noun for Budget {
    const KIND: u16 = kind::BUDGET;
    const WHAT: &'static str = "a budget";

    fn with_tags(mut self, event: &Event) -> Result<Budget> {
        addressed_to(event, &self.peer)?;
        self.expires_at = event.expiration();
        Ok(self)
    }

    fn tags(&self) -> Vec<Vec<String>> {
        let mut tags = vec![tag("d", &self.peer), tag("p", &self.peer)];
        expiry_tag(&mut tags, self.expires_at);
        tags
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

noun_try_from!(Budget, Report);
