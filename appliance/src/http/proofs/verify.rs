//! `POST /v1/proofs/verify`: the HTTP face of the node's batch-verify gatherer
//! (`fleetmesh_prover::gather`, which jobs use too): requests join one queue, a worker
//! batches what arrives within 2 ms, grouped per verifying key, and answers each.
//!
//! Body: `{"vk": <verification_key.json>, "proof": <proof.json>, "public": <public.json>}`,
//! or `{"items": [ {…}, … ]}`. Answers: `{"valid": true}` /
//! `{"valid": false, "reason": "…"}`, or `{"results": [{"index", "valid", "reason"}]}`;
//! a malformed body is a 400 with `{"error": {"code": "malformed", "message": "<field>: …"}}`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetmesh_prover::PreparedVk;
use fleetmesh_prover::gather::{Gatherer, Pending};
use fleetmesh_prover::snarkjs::{check_public_count, parse_proof, parse_public, parse_vk};
use fleetmesh_prover::verify::Item;
use serde_json::{Value, json};

use crate::http::error::api_error;

/// Most items in one request.
const MAX_ITEMS: usize = 1024;

/// Parses (curve and subgroup checks, key preparation: blocking work) one
/// `{vk, proof, public}` object; the message names the field.
pub(crate) fn parse_item(g: &Gatherer, v: &Value) -> Result<(Arc<PreparedVk>, Item), String> {
    let field = |k: &str| v.get(k).ok_or_else(|| format!("{k}: missing"));
    let vk = parse_vk(field("vk")?).map_err(|e| format!("vk.{e}"))?;
    let key = g.prepared(&vk);
    let proof = parse_proof(field("proof")?).map_err(|e| format!("proof.{e}"))?;
    let public = parse_public(field("public")?).map_err(|e| format!("{e}"))?;
    check_public_count(key.vk(), &public).map_err(|e| e.to_string())?;
    Ok((key, (proof, public)))
}

fn busy() -> Response {
    api_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "busy",
        "the verification queue is full; retry shortly",
    )
}

fn malformed(message: String) -> Response {
    api_error(StatusCode::BAD_REQUEST, "malformed", message)
}

fn verdict(r: Result<bool, String>) -> Value {
    match r {
        Ok(true) => json!({"valid": true}),
        Ok(false) => json!({"valid": false, "reason": "the pairing check failed"}),
        Err(e) => json!({"valid": false, "reason": format!("error: {e}")}),
    }
}

/// `POST /v1/proofs/verify`.
pub async fn handle(State(service): State<Arc<Gatherer>>, body: axum::body::Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return malformed(format!("the body is not JSON: {e}")),
    };
    let batch = v.get("items").is_some();
    let objects: Vec<Value> = match v.get("items") {
        None => vec![v],
        Some(Value::Array(items)) if items.len() <= MAX_ITEMS => items.clone(),
        Some(Value::Array(_)) => {
            return malformed(format!("items: at most {MAX_ITEMS} per request"));
        }
        Some(_) => return malformed("items: must be an array".into()),
    };
    // Parsing checks points on the curve and prepares keys: off the async workers.
    let svc = service.clone();
    let parsed = tokio::task::spawn_blocking(move || {
        objects
            .iter()
            .enumerate()
            .map(|(i, o)| {
                parse_item(&svc, o).map_err(|e| if batch { format!("items[{i}].{e}") } else { e })
            })
            .collect::<Result<Vec<_>, String>>()
    })
    .await;
    let parsed = match parsed {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return malformed(e),
        Err(_) => return malformed("the input could not be parsed".into()),
    };
    let pending: Vec<Pending> = match service.submit(parsed) {
        Ok(p) => p,
        Err(_) => return busy(),
    };
    let mut results = Vec::with_capacity(pending.len());
    for p in pending {
        results.push(verdict(p.wait().await));
    }
    if !batch {
        return Json(results.remove(0)).into_response();
    }
    for (i, r) in results.iter_mut().enumerate() {
        r["index"] = json!(i);
    }
    Json(json!({"results": results})).into_response()
}
