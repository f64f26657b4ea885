//! `groth16-prove` and `groth16-verify` jobs: the node's one proving queue and verify
//! gatherer, shared with the HTTP API.

use base64::Engine as _;
use fleetmesh_proto::Mode;
use fleetmesh_prover::queue::{ProveRequest, error_code};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::EngineRun;
use crate::receipt::Finished;
use crate::service::{JobService, Run, b64};
use crate::{Refusal, refuse};
use fleetmesh_proto::unix_now;

/// `groth16-prove`.
pub(super) struct Prove;

/// `groth16-verify`.
pub(super) struct Verify;

impl EngineRun for Prove {
    fn run(&self, svc: &JobService, r: &Run<'_>) -> Result<(), Refusal> {
        prove(svc, r)
    }
}

impl EngineRun for Verify {
    fn run(&self, svc: &JobService, r: &Run<'_>) -> Result<(), Refusal> {
        verify(svc, r)
    }
}

/// A `groth16-verify` job: `params.vkey` (snarkjs, its SHA-256 the ask's `circuit`)
/// and `params.proofs` (`[{"proof", "public"}]`), checked together; the job fails,
/// with a receipt saying `valid: false`, when any proof is invalid.
fn verify(svc: &JobService, r: &Run<'_>) -> Result<(), Refusal> {
    let (job, ask, msg, started_at) = (r.job, r.ask, r.msg, r.started_at);
    use fleetmesh_prover::snarkjs::{check_public_count, parse_proof, parse_public, parse_vk};
    let t = std::time::Instant::now();
    let p = &msg["params"];
    let vkey = p["vkey"].to_string();
    let sha = |s: &str| hex::encode(Sha256::digest(s.as_bytes()));
    if ask.content["circuit"].as_str() != Some(sha(&vkey).as_str()) {
        return Err(refuse(
            "mismatch",
            "the job's vkey does not hash (SHA-256 of its compact JSON) to the ask's circuit",
        ));
    }
    let vk = parse_vk(&p["vkey"]).map_err(|e| refuse("bad_request", format!("vkey: {e}")))?;
    let key = svc.verifier.prepared(&vk);
    let items = p["proofs"]
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| refuse("bad_request", "params.proofs must list {proof, public}"))?;
    let mut parsed = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        let proof = parse_proof(&it["proof"])
            .map_err(|e| refuse("bad_request", format!("proofs[{i}].proof: {e}")))?;
        let public = parse_public(&it["public"])
            .map_err(|e| refuse("bad_request", format!("proofs[{i}].public: {e}")))?;
        check_public_count(&vk, &public)
            .map_err(|e| refuse("bad_request", format!("proofs[{i}].public: {e}")))?;
        parsed.push((key.clone(), (proof, public)));
    }
    // the node's one gatherer: batched with the API's checks, grouped per key
    let pending = svc
        .verifier
        .submit(parsed)
        .map_err(|e| refuse("busy", e.to_string()))?;
    let results = pending
        .into_iter()
        .map(|p| p.wait_blocking().map_err(|e| refuse("internal", e)))
        .collect::<Result<Vec<bool>, Refusal>>()?;
    let valid = results.iter().all(|v| *v);
    let document = json!({"status": "checked", "exit_code": 0, "stdout": "", "stderr": "",
                              "files": {}, "valid": results})
    .to_string();
    let proofs: Vec<Value> = items.iter().map(|i| i["proof"].clone()).collect();
    let publics: Vec<Value> = items.iter().map(|i| i["public"].clone()).collect();
    let done = Finished {
        output_digest: sha(&document),
        metered: json!({"proofs": items.len(), "wall_ms": t.elapsed().as_millis() as u64}),
        verdict: json!({
            "mode": Mode::Proof,
            "valid": valid,
            "vkey_digest": sha(&vkey),
            "public_inputs_digest": sha(&Value::from(publics).to_string()),
            "proof_digest": sha(&Value::from(proofs).to_string()),
            "batch_size": items.len(),
        }),
        started_at,
        finished_at: unix_now(),
    };
    let failure = (!valid).then(|| {
        let bad: Vec<usize> = (0..results.len()).filter(|i| !results[*i]).collect();
        format!("invalid proofs: {bad:?}")
    });
    svc.conclude(job, &done, &document, failure.as_deref())
}

/// A `groth16-prove` job: the installed circuit whose zkey has the ask's digest, the
/// job's `params.input` (or `params.witness`), a proof checked before it is claimed.
fn prove(svc: &JobService, r: &Run<'_>) -> Result<(), Refusal> {
    let (job, ask, msg, started_at) = (r.job, r.ask, r.msg, r.started_at);
    let digest = ask.content["circuit"].as_str().unwrap_or_default();
    let name = svc.prover.circuit_by_digest(digest).ok_or_else(|| {
        refuse(
            "bad_request",
            format!("no circuit with zkey digest {digest} is installed on this node"),
        )
    })?;
    let mut req = json!({"circuit": name});
    for k in ["input", "witness"] {
        if !msg["params"][k].is_null() {
            req[k] = msg["params"][k].clone();
        }
    }
    let req = ProveRequest::from_json(&req).map_err(|m| refuse("bad_request", m))?;
    let t = std::time::Instant::now();
    // the node's one proving queue: the API's admission and one proof at a time
    let refused =
        |e: fleetmesh_prover::Error| refuse("bad_request", format!("{}: {e}", error_code(&e)));
    let proven = svc.prover.prove_blocking(&req).map_err(refused)?;
    let vk =
        fleetmesh_prover::snarkjs::vk_to_json(&svc.prover.verifying_key(&name).map_err(refused)?);
    let proven = proven.to_json();
    let text = |v: &Value| v.to_string();
    let (proof, public, vkey) = (text(&proven["proof"]), text(&proven["public"]), text(&vk));
    let sha = |s: &str| hex::encode(Sha256::digest(s.as_bytes()));
    let document = json!({
        "status": "proved",
        "exit_code": 0,
        "stdout": "",
        "stderr": "",
        "files": {
            "proof.json": b64().encode(&proof),
            "public.json": b64().encode(&public),
            "verification_key.json": b64().encode(&vkey),
        },
    })
    .to_string();
    let done = Finished {
        output_digest: sha(&document),
        metered: json!({"proofs": 1, "wall_ms": t.elapsed().as_millis() as u64}),
        verdict: json!({
            "mode": Mode::Proof,
            "valid": true,
            "vkey_digest": sha(&vkey),
            "public_inputs_digest": sha(&public),
            "proof_digest": sha(&proof),
        }),
        started_at,
        finished_at: unix_now(),
    };
    svc.conclude(job, &done, &document, None)
}
