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
use fleetmesh_prover::queue::{ProveRequest, ProvingQueue};
use serde_json::Value;

use crate::http::error::{ApiError, api_error};

/// `POST /v1/proofs/prove`.
pub async fn handle(State(queue): State<Arc<ProvingQueue>>, body: axum::body::Bytes) -> Response {
    let req = match serde_json::from_slice::<Value>(&body)
        .map_err(|e| format!("the body is not JSON: {e}"))
        .and_then(|v| ProveRequest::from_json(&v))
    {
        Ok(r) => r,
        Err(m) => return api_error(StatusCode::BAD_REQUEST, "malformed", m),
    };
    match queue.prove(req).await {
        Ok(p) => Json(p.to_json()).into_response(),
        Err(e) => ApiError::from(e).into_response(),
    }
}
