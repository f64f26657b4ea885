//! The executor's side of receipts: a finished job signed into a kind 30811 event
//! (`fleetmesh_proto::receipt`), with the job id blinded over the buyer–executor pair.

use fleetmesh_proto::receipt::{ReceiptBody, blinded_job_id};
use fleetmesh_proto::{Event, NodeKeys};
use serde_json::Value;

use super::Refusal;
use super::jobs::JobRecord;

/// What a finished job reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// SHA-256 of the full output (hex).
    pub output_digest: String,
    /// Metered usage (`wall_ms`, and `fuel` / `completion_tokens` / `proofs`).
    pub metered: Value,
    /// The verifier's verdict for the job's mode.
    pub verdict: Value,
    /// Unix seconds.
    pub started_at: u64,
    /// Unix seconds.
    pub finished_at: u64,
}

/// Signs the receipt of `job` with the executor's key.
///
/// # Errors
/// `invalid_event` when the buyer's key or the job id does not parse.
pub fn sign_receipt(keys: &NodeKeys, job: &JobRecord, done: &Finished) -> Result<Event, Refusal> {
    let body = ReceiptBody {
        job: blinded_job_id(&keys.nostr().secret_key(), &job.buyer, &job.id)?,
        ask: job.ask_id.clone(),
        engine: job.engine,
        mode: job.mode,
        output_digest: done.output_digest.clone(),
        metered: done.metered.clone(),
        verdict: done.verdict.clone(),
        started_at: done.started_at,
        finished_at: done.finished_at,
    };
    Ok(body.sign(keys)?)
}
