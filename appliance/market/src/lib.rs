//! # fleetmesh-market
//!
//! The compute market's core, without HTTP: the job store ([`jobs::JobStore`], SQLite in the node
//! directory: accepted → running → verified | failed | expired, idempotent submission,
//! resumable across restarts) and the executor's receipts ([`receipt::sign_receipt`]). The
//! nouns themselves — asks (kind 30810), receipts (kind 30811), modes and engines — are
//! `fleetmesh_proto`'s; a [`Refusal`] is what this node answers when one does not hold.
//! [`service`] runs jobs on the engines (WASI, the node's proving queue and verify
//! gatherer, its inference API); [`blobs`] is the node's content-addressed blob store
//! (job inputs and outputs; the appliance serves it as Blossom); [`bacalhau`] reads
//! Bacalhau job specs into WASI tasks.
//! The appliance serves them on the node (`/v1/jobs`).
//!
//! Over relays, through the [`fleetmesh_port::RelayPort`] the daemon hands it: the
//! [`mailbox`] takes jobs that arrive gift-wrapped and answers them the same way, and the
//! offer [`desk`] publishes the node's terms and answers open asks with offers.

pub mod bacalhau;
pub mod blobs;
pub mod desk;
pub mod jobs;
pub mod mailbox;
pub mod receipt;
pub mod service;

/// A machine-readable refusal: `code` for programs, `message` for people. The crate's
/// one error type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Refusal {
    /// `invalid_event`, `schema`, `mismatch`, `expired`, `conflict`, `not_found`,
    /// `bad_transition`, `storage`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

/// A protocol noun that does not hold, as the market's refusal codes: `invalid_event`
/// (not an event, a bad id or signature, another kind, a bad key), `schema`, `mismatch`
/// (a tag against the content), `expired`.
impl From<fleetmesh_proto::Error> for Refusal {
    fn from(e: fleetmesh_proto::Error) -> Refusal {
        use fleetmesh_proto::Error as E;
        let code = match &e {
            E::Schema(_) => "schema",
            E::Mismatch { .. } => "mismatch",
            E::Expired { .. } => "expired",
            _ => "invalid_event",
        };
        refuse(code, e.to_string())
    }
}

/// A [`Refusal`] with this code and message.
pub fn refuse(code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests;
