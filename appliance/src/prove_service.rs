//! `POST /v1/proofs/prove`: the HTTP face of the node's proving queue
//! (`fleetmesh_prover::queue`, which jobs use too).
//!
//! The operator installs circuits under the node directory, one folder per circuit:
//! `circuits/<name>/circuit.zkey` (a snarkjs Groth16 proving key) and, to accept inputs
//! rather than full witnesses, `circuits/<name>/circuit.wasm` (circom's witness
//! calculator). Names are 1–64 characters of `a-z 0-9 _ -`.
//!
//! Body: `{"circuit": "<name>", "input": {<signal>: <value>, …}}`, or
//! `{"circuit": "<name>", "witness": ["1", "…", …]}` (every wire, decimal strings).
//! Answer: `{"proof": <proof.json>, "public": <public.json>, "ms": {…}}`. Errors carry
//! `{"error": {"code", "message"}}`: 400 `malformed`, 404 `unknown_circuit`,
//! 422 `unsatisfied` (the input fails the circuit's constraints or asserts), 503 `busy`
//! (with `Retry-After`: the queue admits a few requests and proves one at a time).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetmesh_prover::queue::{ProveRequest, ProvingQueue, QueuedProof, Witnessing};
use fleetmesh_prover::snarkjs::{proof_to_json, public_to_json};
use fleetmesh_prover::{Error, Fr};
use serde_json::{Value, json};

use crate::server::api_error;

/// A request body (or a job's `params` with its circuit) as a [`ProveRequest`]; the
/// message names the field.
pub(crate) fn parse_request(req: &Value) -> Result<ProveRequest, String> {
    let circuit = req
        .get("circuit")
        .and_then(Value::as_str)
        .ok_or("circuit: missing or not a string")?;
    let witnessing = match (req.get("input"), req.get("witness")) {
        (Some(input), None) => Witnessing::Input(input.clone()),
        (None, Some(w)) => Witnessing::Witness(parse_witness(w)?),
        _ => return Err("give exactly one of \"input\" and \"witness\"".into()),
    };
    Ok(ProveRequest {
        circuit: circuit.to_owned(),
        witnessing,
    })
}

/// A full witness in public.json's format (decimal strings), errors named `witness[i]`.
fn parse_witness(v: &Value) -> Result<Vec<Fr>, String> {
    fleetmesh_prover::snarkjs::parse_public(v).map_err(|e| match e {
        Error::Malformed { field, reason } => format!(
            "witness{}: {reason}",
            field.strip_prefix("public").unwrap_or(&field)
        ),
        other => format!("witness: {other}"),
    })
}

/// The code a prover error answers with: `malformed`, `unknown_circuit`, `unsatisfied`,
/// `busy` or `internal` (shared with the job engine's refusals).
pub(crate) fn error_code(e: &Error) -> &'static str {
    match e {
        Error::Malformed { .. } | Error::Input { .. } | Error::PublicCount { .. } => "malformed",
        Error::UnknownCircuit(_) => "unknown_circuit",
        Error::Witness(_) => "unsatisfied",
        Error::Busy(_) => "busy",
        _ => "internal",
    }
}

fn failure(e: &Error) -> Response {
    let code = error_code(e);
    let status = match code {
        "malformed" => StatusCode::BAD_REQUEST,
        "unknown_circuit" => StatusCode::NOT_FOUND,
        "unsatisfied" => StatusCode::UNPROCESSABLE_ENTITY,
        "busy" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let mut r = api_error(status, code, e.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("2"),
        );
    }
    r
}

/// A proof as the API (and a job's output) writes it.
pub(crate) fn proof_json(p: &QueuedProof) -> Value {
    json!({
        "proof": proof_to_json(&p.proven.proof),
        "public": public_to_json(&p.proven.public),
        "ms": {"witness": p.witness_ms, "prove": p.prove_ms},
    })
}

/// `POST /v1/proofs/prove`.
pub async fn handle(State(queue): State<Arc<ProvingQueue>>, body: axum::body::Bytes) -> Response {
    let req = match serde_json::from_slice::<Value>(&body)
        .map_err(|e| format!("the body is not JSON: {e}"))
        .and_then(|v| parse_request(&v))
    {
        Ok(r) => r,
        Err(m) => return api_error(StatusCode::BAD_REQUEST, "malformed", m),
    };
    match queue.prove(req).await {
        Ok(p) => Json(proof_json(&p)).into_response(),
        Err(e) => failure(&e),
    }
}
