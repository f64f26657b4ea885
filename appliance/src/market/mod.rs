//! The compute market's core: asks (kind 30810) checked into [`ask::Ask`], the job store
//! ([`jobs::JobStore`], SQLite in the node directory: accepted → running → verified |
//! failed | expired, idempotent submission, resumable across restarts), and receipts
//! (kind 30811, [`receipt::sign_receipt`]) signed by the executor with the job id blinded
//! over the buyer–provider pair.
//!
//! [`service`] serves them on the node (`/v1/jobs`) and runs `wasm` jobs on
//! `fleetmesh-wasi`; the prover, inference and compute-over-data engines are next (issue 9).

pub mod ask;
pub mod bacalhau;
pub mod jobs;
pub mod receipt;
pub mod service;

/// A machine-readable refusal: `code` for programs, `message` for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `invalid_event`, `schema`, `mismatch`, `expired`, `conflict`, `not_found`,
    /// `bad_transition`, `storage`.
    pub code: &'static str,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Refusal {}

pub(crate) fn refuse(code: &'static str, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests;
