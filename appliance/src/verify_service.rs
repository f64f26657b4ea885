//! `POST /v1/proofs/verify`: Groth16 verification as a service, batched.
//!
//! Requests queue; a worker takes whatever has queued within a short window (2 ms, at
//! most 256 proofs), groups the proofs by verifying key and batch-verifies each group on a
//! blocking thread (one multi-Miller loop per group, bad proofs named by bisection), then
//! answers each request. Prepared keys are cached by their coordinates, so a buyer who
//! sends the same key again does not pay for its preparation.
//!
//! Body: `{"vk": <verification_key.json>, "proof": <proof.json>, "public": <public.json>}`,
//! or `{"items": [ {…}, … ]}`. Answers: `{"valid": true}` /
//! `{"valid": false, "reason": "…"}`, or `{"results": [{"index", "valid", "reason"}]}`;
//! a malformed body is a 400 with `{"error": {"code": "malformed", "message": "<field>: …"}}`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetmesh_prover::snarkjs::{check_public_count, parse_proof, parse_public, parse_vk, vk_id};
use fleetmesh_prover::verify::Item;
use fleetmesh_prover::{PreparedVk, batch_verify_grouped};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::server::api_error;

/// How long the worker waits for more proofs to join a batch.
const WINDOW: Duration = Duration::from_millis(2);
/// Most proofs in one round.
const MAX_BATCH: usize = 256;
/// Prepared keys kept.
const KEY_CACHE: usize = 64;
/// Most items in one request.
const MAX_ITEMS: usize = 1024;

struct Job {
    key: Arc<PreparedVk>,
    item: Item,
    reply: oneshot::Sender<Result<bool, String>>,
}

/// The verification service: a queue, a batching worker, a cache of prepared keys.
pub struct VerifyService {
    queue: mpsc::Sender<Job>,
    keys: Mutex<HashMap<Vec<u8>, Arc<PreparedVk>>>,
}

impl VerifyService {
    /// Starts the worker on the current runtime.
    pub fn start() -> Arc<VerifyService> {
        let (queue, rx) = mpsc::channel(4096);
        tokio::spawn(worker(rx));
        Arc::new(VerifyService {
            queue,
            keys: Mutex::new(HashMap::new()),
        })
    }

    fn prepared(&self, vk: &Value) -> Result<Arc<PreparedVk>, String> {
        let vk = parse_vk(vk).map_err(|e| format!("vk.{e}"))?;
        let id = vk_id(&vk);
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = keys.get(&id) {
            return Ok(k.clone());
        }
        if keys.len() >= KEY_CACHE {
            keys.clear();
        }
        let k = Arc::new(PreparedVk::new(&vk));
        keys.insert(id, k.clone());
        Ok(k)
    }

    /// Parses (curve and subgroup checks, key preparation: blocking work) one
    /// `{vk, proof, public}` object.
    fn parse(&self, v: &Value) -> Result<(Arc<PreparedVk>, Item), String> {
        let field = |k: &str| v.get(k).ok_or_else(|| format!("{k}: missing"));
        let key = self.prepared(field("vk")?)?;
        let proof = parse_proof(field("proof")?).map_err(|e| format!("proof.{e}"))?;
        let public = parse_public(field("public")?).map_err(|e| format!("{e}"))?;
        check_public_count(key.vk(), &public).map_err(|e| e.to_string())?;
        Ok((key, (proof, public)))
    }

    /// Queues parsed items; the receivers yield the verdicts.
    fn enqueue(
        &self,
        parsed: Vec<(Arc<PreparedVk>, Item)>,
    ) -> Result<Vec<oneshot::Receiver<Result<bool, String>>>, Busy> {
        let permits = self
            .queue
            .try_reserve_many(parsed.len())
            .map_err(|_| Busy)?;
        Ok(permits
            .zip(parsed)
            .map(|(permit, (key, item))| {
                let (tx, rx) = oneshot::channel();
                permit.send(Job {
                    key,
                    item,
                    reply: tx,
                });
                rx
            })
            .collect())
    }
}

async fn worker(mut rx: mpsc::Receiver<Job>) {
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        let deadline = tokio::time::Instant::now() + WINDOW;
        while jobs.len() < MAX_BATCH {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(job)) => jobs.push(job),
                _ => break,
            }
        }
        debug!(proofs = jobs.len(), "verifying a batch");
        let keys: Vec<Arc<PreparedVk>> = jobs.iter().map(|j| j.key.clone()).collect();
        let items: Vec<(usize, Item)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (i, j.item.clone()))
            .collect();
        let verdicts =
            tokio::task::spawn_blocking(move || batch_verify_grouped(&keys, &items)).await;
        match verdicts {
            Ok(Ok(v)) => {
                for (job, valid) in jobs.into_iter().zip(v) {
                    let _ = job.reply.send(Ok(valid));
                }
            }
            Ok(Err(e)) => {
                warn!(error = %e, "batch verification failed");
                for job in jobs {
                    let _ = job.reply.send(Err(e.to_string()));
                }
            }
            Err(e) => {
                warn!(error = %e, "batch verification panicked");
                for job in jobs {
                    let _ = job.reply.send(Err("internal error".into()));
                }
            }
        }
    }
}

/// The queue is full: 503, retry later.
struct Busy;

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

async fn wait(rx: oneshot::Receiver<Result<bool, String>>) -> Result<bool, String> {
    rx.await
        .unwrap_or_else(|_| Err("the verifier stopped".into()))
}

/// `POST /v1/proofs/verify`.
pub async fn handle(
    State(service): State<Arc<VerifyService>>,
    body: axum::body::Bytes,
) -> Response {
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
                svc.parse(o)
                    .map_err(|e| if batch { format!("items[{i}].{e}") } else { e })
            })
            .collect::<Result<Vec<_>, String>>()
    })
    .await;
    let parsed = match parsed {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => return malformed(e),
        Err(_) => return malformed("the input could not be parsed".into()),
    };
    let pending = match service.enqueue(parsed) {
        Ok(p) => p,
        Err(Busy) => return busy(),
    };
    let mut results = Vec::with_capacity(pending.len());
    for rx in pending {
        results.push(verdict(wait(rx).await));
    }
    if !batch {
        return Json(results.remove(0)).into_response();
    }
    for (i, r) in results.iter_mut().enumerate() {
        r["index"] = json!(i);
    }
    Json(json!({"results": results})).into_response()
}
