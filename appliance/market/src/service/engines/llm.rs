//! `llm` jobs: the node's inference API under the ask's mode.

use fleetmesh_proto::Mode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::EngineRun;
use crate::receipt::Finished;
use crate::service::{JobService, LlmFailure, LlmRequest, Run};
use crate::{Refusal, refuse};
use fleetmesh_proto::unix_now;

/// `llm`.
pub(super) struct Llm;

impl EngineRun for Llm {
    fn run(&self, svc: &JobService, r: &Run<'_>) -> Result<(), Refusal> {
        if r.ask.mode == Mode::TeeAttestation {
            return attested(svc, r);
        }
        quorum_or_bounded(svc, r)
    }
}

/// An `llm` job: `params` is an OpenAI completions (or chat, with `messages`) body for
/// the ask's model, answered through the node's inference API under the ask's mode —
/// the 2-of-3 quorum, or decoding constrained to the job's `output_schema`.
fn quorum_or_bounded(svc: &JobService, r: &Run<'_>) -> Result<(), Refusal> {
    let (job, ask, msg, started_at) = (r.job, r.ask, r.msg, r.started_at);
    let t = std::time::Instant::now();
    if !msg["params"].is_object() {
        return Err(refuse(
            "bad_request",
            "an llm job's params are a completions request",
        ));
    }
    let answer = svc.inference.answer(&LlmRequest {
        model: ask.content["model"].as_str().unwrap_or_default().to_owned(),
        mode: ask.mode,
        params: msg["params"].clone(),
        output_schema: (ask.mode == Mode::SchemaBounds).then(|| msg["output_schema"].clone()),
        job: None,
        greedy: false,
    });
    let me = svc.keys.nostr_pubkey_hex();
    // executors by key: this node's own; a remote executor (an OpenAI endpoint, no key)
    // by SHA-256 of its name
    let key_of = |name: &str| {
        if name.starts_with("local:") {
            me.clone()
        } else {
            hex::encode(Sha256::digest(
                format!("fleetmesh/executor/{name}").as_bytes(),
            ))
        }
    };
    let quorum_verdict = |v: &Value, agreed: Option<&str>| {
        let digests: Vec<Value> = v["executors"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                Some(json!({"executor": key_of(e["executor"].as_str()?),
                                "digest": e["transcript_digest"].as_str()?}))
            })
            .collect();
        let mut out = json!({
            "mode": Mode::QuasiDeterministic,
            "quorum": ask.content["quorum"],
            "outcome": if agreed.is_some() { "agree" } else { "inconclusive" },
            "digests": digests,
        });
        if let Some(d) = agreed {
            out["agreed_digest"] = json!(d);
        }
        out
    };
    let (document, verdict, metered, failure) = match answer {
        Ok(a) => {
            let verdict = if ask.mode == Mode::SchemaBounds {
                json!({"mode": Mode::SchemaBounds,
                       "valid": a.verdict["valid"].as_bool().unwrap_or(false),
                       "schema_digest": ask.content["output_schema"]})
            } else {
                quorum_verdict(&a.verdict, a.transcript_digest.as_deref())
            };
            let metered = json!({
                "prompt_tokens": a.prompt_tokens,
                "completion_tokens": a.completion_tokens,
                "wall_ms": t.elapsed().as_millis() as u64,
            });
            (a.document.to_string(), verdict, metered, None)
        }
        Err(LlmFailure {
            code,
            message,
            verdict: Some(v),
        }) if ask.mode == Mode::QuasiDeterministic => {
            let doc = json!({"error": {"code": code, "message": message}, "verdict": v});
            let metered =
                json!({"completion_tokens": 0, "wall_ms": t.elapsed().as_millis() as u64});
            (
                doc.to_string(),
                quorum_verdict(&v, None),
                metered,
                Some(format!("{code}: {message}")),
            )
        }
        Err(LlmFailure { code, message, .. }) => {
            return Err(refuse("bad_request", format!("{code}: {message}")));
        }
    };
    let done = Finished {
        output_digest: hex::encode(Sha256::digest(document.as_bytes())),
        metered,
        verdict,
        started_at,
        finished_at: unix_now(),
    };
    svc.conclude(job, &done, &document, failure.as_deref())
}

/// An `llm` job in `tee-attestation` mode: the inference API's own `tee-attestation`
/// answer with the blinded job id as its `job`, so the receipt carries the very binding
/// the API's verdict does (`fleetmesh_attest::binding_nonce`: model digest, prompt
/// ids, output ids, blinded job id) in `verdict.nonce`; the SEV-SNP report is stored
/// as a blob named by the verdict's `report_digest`. A host without configfs-tsm fails
/// the job before generating.
fn attested(svc: &JobService, r: &Run<'_>) -> Result<(), Refusal> {
    use fleetmesh_attest as tee;
    let (job, ask, msg) = (r.job, r.ask, r.msg);
    tee::tsm_available().map_err(|e| refuse("tee_unavailable", e.to_string()))?;
    let t = std::time::Instant::now();
    let blinded = fleetmesh_proto::receipt::blinded_job_id(
        &svc.keys.nostr().secret_key(),
        &job.buyer,
        &job.id,
    )?;
    let answer = svc
        .inference
        .answer(&LlmRequest {
            model: ask.content["model"].as_str().unwrap_or_default().to_owned(),
            mode: Mode::TeeAttestation,
            params: msg["params"].clone(),
            output_schema: None,
            job: Some(blinded),
            greedy: true,
        })
        .map_err(|LlmFailure { code, message, .. }| match code {
            "tee_unavailable" | "tee_failed" => refuse("tee_failed", message),
            _ => refuse("bad_request", format!("{code}: {message}")),
        })?;
    let document = answer.document.to_string();
    let output_digest = Sha256::digest(document.as_bytes());
    let report = answer.verdict["report"]
        .as_str()
        .and_then(|h| hex::decode(h).ok())
        .ok_or_else(|| refuse("tee_failed", "the attested answer carries no report"))?;
    let nonce = answer.verdict["nonce"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let parsed =
        tee::snp::Report::parse(&report).map_err(|e| refuse("tee_failed", e.to_string()))?;
    let report_digest = svc
        .blobs
        .put(
            &report,
            "application/octet-stream",
            &svc.keys.nostr_pubkey_hex(),
        )
        .map_err(|e| refuse("internal", e.to_string()))?;
    let done = Finished {
        output_digest: hex::encode(output_digest),
        metered: json!({
            "prompt_tokens": answer.prompt_tokens,
            "completion_tokens": answer.completion_tokens,
            "wall_ms": t.elapsed().as_millis() as u64,
        }),
        verdict: json!({
            "mode": Mode::TeeAttestation,
            "bound": true,
            "platform": "amd-sev-snp",
            "report_digest": report_digest,
            "measurement": hex::encode(parsed.measurement),
            "nonce": nonce,
        }),
        started_at: r.started_at,
        finished_at: unix_now(),
    };
    svc.conclude(job, &done, &document, None)
}
