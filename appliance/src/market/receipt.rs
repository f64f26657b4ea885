//! Receipts: the kind 30811 event an executor signs when a job finishes — the blinded job
//! id, the ask, the engine, the output digest, metered usage and the verifier's verdict.
//!
//! The job id is blinded with HKDF-SHA256 over the ECDH secret of the buyer and the
//! executor ([`fleetmesh_relay::hkdf::blinded_tag`]): the two of them can recompute it and
//! link the receipt to the job; anyone else sees 32 unlinkable bytes.

use fleetmesh_relay::hkdf::blinded_tag;
use fleetmesh_relay::{Event, NodeKeys, UnsignedEvent};
use serde_json::{Value, json};

use super::jobs::JobRecord;
use super::{Refusal, refuse};

/// The kind of a receipt.
pub const KIND_RECEIPT: u16 = 30811;

/// The blinded id of job `job_id` (hex) between `secret`'s owner and `peer` (hex x-only
/// key): what either party computes to find the receipt.
///
/// # Errors
/// `invalid_event` for a malformed id or key.
pub fn blinded_job_id(
    secret: &secp256k1::SecretKey,
    peer: &str,
    job_id: &str,
) -> Result<String, Refusal> {
    let id = hex::decode(job_id).map_err(|e| refuse("invalid_event", format!("job id: {e}")))?;
    blinded_tag(secret, peer, &id)
        .map(hex::encode)
        .map_err(|e| refuse("invalid_event", e.to_string()))
}

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
    let blinded = blinded_job_id(&keys.nostr().secret_key(), &job.buyer, &job.id)?;
    let content = json!({
        "job": blinded,
        "ask": job.ask_id,
        "engine": job.engine,
        "output_digest": done.output_digest,
        "metered": done.metered,
        "verdict": done.verdict,
        "started_at": done.started_at,
        "finished_at": done.finished_at,
    });
    keys.sign(UnsignedEvent {
        created_at: done.finished_at,
        kind: KIND_RECEIPT,
        tags: vec![
            vec!["d".into(), blinded],
            vec!["e".into(), job.ask_id.clone()],
            vec!["mode".into(), job.mode.clone()],
            vec!["engine".into(), job.engine.clone()],
        ],
        content: content.to_string(),
    })
    .map_err(|e| refuse("invalid_event", e.to_string()))
}
