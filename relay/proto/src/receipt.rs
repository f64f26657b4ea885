//! The job receipt (kind 30811): what an executor signs when a job finishes — the blinded
//! job id, the ask, the engine, the output digest, metered usage and the verifier's verdict.
//!
//! The job id is blinded with HKDF-SHA256 over the ECDH secret of the buyer and the
//! executor ([`blinded_job_id`], [`crate::hkdf::blinded_tag`]): the two of them can
//! recompute it and link the receipt to the job; anyone else sees 32 unlinkable bytes.

use fleetmesh_schemas::constants::kind;
use serde_json::{Value, json};

use crate::event::{Event, UnsignedEvent};
use crate::identity::NodeKeys;
use crate::noun::{agreeing_tag, checked_content, same};
use crate::words::{Engine, Mode};
use crate::{Error, Result};

/// The blinded id of job `job_id` (hex) between `secret`'s owner and `peer` (hex x-only
/// key): what either party computes to find the receipt.
///
/// # Errors
/// [`Error::InvalidEvent`] naming `job` for an id that is not hex; [`Error::Crypto`] for a
/// key that is not on the curve.
pub fn blinded_job_id(secret: &secp256k1::SecretKey, peer: &str, job_id: &str) -> Result<String> {
    let id = hex::decode(job_id).map_err(|e| Error::InvalidEvent {
        field: "job",
        reason: format!("job id: {e}"),
    })?;
    crate::hkdf::blinded_tag(secret, peer, &id).map(hex::encode)
}

/// What a receipt says, before it is signed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiptBody {
    /// The blinded job id (hex, [`blinded_job_id`]); the receipt's `d` tag.
    pub job: String,
    /// The ask event's id (hex); the `e` tag.
    pub ask: String,
    /// The engine that ran the job.
    pub engine: Engine,
    /// The verification mode of the job.
    pub mode: Mode,
    /// SHA-256 of the full output (hex).
    pub output_digest: String,
    /// Metered usage (`wall_ms`, and `fuel` / `completion_tokens` / `proofs`).
    pub metered: Value,
    /// The verifier's verdict for the job's mode (its `mode` is [`ReceiptBody::mode`]).
    pub verdict: Value,
    /// Unix seconds.
    pub started_at: u64,
    /// Unix seconds; the event's `created_at`.
    pub finished_at: u64,
}

impl ReceiptBody {
    /// Signs the receipt with the executor's key.
    ///
    /// # Errors
    /// [`Error::Random`] if the signing nonce cannot be drawn.
    pub fn sign(&self, keys: &NodeKeys) -> Result<Event> {
        let content = json!({
            "job": self.job,
            "ask": self.ask,
            "engine": self.engine,
            "output_digest": self.output_digest,
            "metered": self.metered,
            "verdict": self.verdict,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        });
        keys.sign(UnsignedEvent {
            created_at: self.finished_at,
            kind: kind::JOB_RECEIPT,
            tags: vec![
                vec!["d".into(), self.job.clone()],
                vec!["e".into(), self.ask.clone()],
                vec!["mode".into(), self.mode.as_str().into()],
                vec!["engine".into(), self.engine.as_str().into()],
            ],
            content: content.to_string(),
        })
    }
}

/// A checked receipt.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    /// The signed event; its author is the executor.
    pub event: Event,
    /// The blinded job id (hex).
    pub job: String,
    /// The ask event's id (hex).
    pub ask: String,
    /// The engine that ran the job.
    pub engine: Engine,
    /// The verification mode.
    pub mode: Mode,
    /// SHA-256 of the output (hex).
    pub output_digest: String,
    /// The whole content (metered usage, verdict, price, times).
    pub content: Value,
}

impl Receipt {
    /// Checks a receipt event: its id and signature, its kind, the kind's JSON Schema, and
    /// that the tags agree with the content (`d` is the job, `e` the ask, `mode` the
    /// verdict's mode, `engine` where present the engine).
    ///
    /// # Errors
    /// [`Error::InvalidEvent`], [`Error::WrongKind`], [`Error::Schema`], [`Error::Mismatch`]
    /// naming the tag.
    pub fn from_event(event: Event) -> Result<Receipt> {
        let content = checked_content(&event, kind::JOB_RECEIPT, "a receipt")?;
        let (job, ask) = (
            event.tag_value("d").unwrap_or_default().to_owned(),
            event.tag_value("e").unwrap_or_default().to_owned(),
        );
        same("d", &job, &content["job"])?;
        same("e", &ask, &content["ask"])?;
        let mode = event.tag_value("mode").unwrap_or_default();
        same("mode", mode, &content["verdict"]["mode"])?;
        let mode: Mode = mode.parse()?;
        let engine: Engine = if event.tag_value("engine").is_some() {
            agreeing_tag(&event, &content, "engine")?
        } else {
            serde_json::from_value(content["engine"].clone())
                .map_err(|e| Error::Schema(format!("engine: {e}")))?
        };
        Ok(Receipt {
            job,
            ask,
            engine,
            mode,
            output_digest: content["output_digest"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            content,
            event,
        })
    }
}

impl TryFrom<&Event> for Receipt {
    type Error = Error;

    fn try_from(event: &Event) -> Result<Receipt> {
        Receipt::from_event(event.clone())
    }
}
