//! `POST /v1/proofs/prove`: Groth16 proving as a service.
//!
//! The operator installs circuits under the node directory, one folder per circuit:
//! `circuits/<name>/circuit.zkey` (a snarkjs Groth16 proving key) and, to accept inputs
//! rather than full witnesses, `circuits/<name>/circuit.wasm` (circom's witness
//! calculator). Names are 1–64 characters of `a-z 0-9 _ -`. Keys are loaded on first use
//! and kept (reloaded when the file changes).
//!
//! Body: `{"circuit": "<name>", "input": {<signal>: <value>, …}}`, or
//! `{"circuit": "<name>", "witness": ["1", "…", …]}` (every wire, decimal strings).
//! Answer: `{"proof": <proof.json>, "public": <public.json>, "ms": {…}}`. Errors carry
//! `{"error": {"code", "message"}}`: 400 `malformed`, 404 `unknown_circuit`,
//! 422 `unsatisfied` (the input fails the circuit's constraints or asserts), 503 `busy`.
//!
//! Proving uses every core, so requests run one at a time from a bounded queue; a full
//! queue answers 503 with `Retry-After` at once instead of letting callers pile up. A
//! request whose client leaves while it waits for its turn is dropped unproved, and no
//! thread waits for a turn.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetmesh_kernels::MsmNtt;
use fleetmesh_prover::snarkjs::{proof_to_json, public_to_json};
use fleetmesh_prover::witness::WitnessCalculator;
use fleetmesh_prover::{Error, Fr, ProvingKey};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, TryAcquireError};

use crate::server::api_error;

/// Requests admitted at once (one proving, the rest waiting).
const QUEUE: usize = 8;

/// A file's modification time and length: when either changes, the file is read again.
type Stamp = (SystemTime, u64);

/// A loaded circuit.
struct Circuit {
    stamp: (SystemTime, u64),
    pk: Arc<ProvingKey>,
    /// `pk`'s verifying key, prepared once for the prover's self-check.
    pvk: fleetmesh_prover::PreparedVk,
    calc: Option<Arc<WitnessCalculator>>,
}

/// The proving service: the circuits folder, the backend and the admission queue.
pub struct ProveService {
    dir: PathBuf,
    backend: Arc<dyn MsmNtt>,
    admitted: Semaphore,
    prover: tokio::sync::Mutex<()>,
    circuits: Mutex<HashMap<String, Arc<Circuit>>>,
    /// Each circuit's zkey digest, with the file's stamp it was computed for.
    digests: Mutex<HashMap<String, (Stamp, String)>>,
}

/// Why a request failed, mapped to a status and a code.
#[derive(Debug)]
enum Failure {
    Malformed(String),
    Unknown(String),
    Unsatisfied(String),
    Busy,
    Internal(String),
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, code, message) = match self {
            Failure::Malformed(m) => (StatusCode::BAD_REQUEST, "malformed", m),
            Failure::Unknown(m) => (StatusCode::NOT_FOUND, "unknown_circuit", m),
            Failure::Unsatisfied(m) => (StatusCode::UNPROCESSABLE_ENTITY, "unsatisfied", m),
            Failure::Busy => (
                StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "the proving queue is full; retry shortly".into(),
            ),
            Failure::Internal(m) => (StatusCode::INTERNAL_SERVER_ERROR, "internal", m),
        };
        let mut r = api_error(status, code, message);
        if status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("2"),
            );
        }
        r
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn stamp(path: &Path) -> std::io::Result<(SystemTime, u64)> {
    let m = std::fs::metadata(path)?;
    Ok((m.modified()?, m.len()))
}

impl ProveService {
    /// A service for the circuits under `dir`, proving on `backend`.
    pub fn new(dir: PathBuf, backend: Arc<dyn MsmNtt>) -> Arc<ProveService> {
        Arc::new(ProveService {
            dir,
            backend,
            admitted: Semaphore::new(QUEUE),
            prover: tokio::sync::Mutex::new(()),
            circuits: Mutex::new(HashMap::new()),
            digests: Mutex::new(HashMap::new()),
        })
    }

    /// The circuit `name`, loading (blocking) when absent or changed on disk.
    fn circuit(&self, name: &str) -> Result<Arc<Circuit>, Failure> {
        if !valid_name(name) {
            return Err(Failure::Malformed(format!(
                "circuit: {name:?} is not a circuit name (1-64 of a-z 0-9 _ -)"
            )));
        }
        let folder = self.dir.join(name);
        let zkey = folder.join("circuit.zkey");
        let st = stamp(&zkey).map_err(|_| {
            Failure::Unknown(format!("circuit {name:?} is not installed on this node"))
        })?;
        if let Some(c) = self.lock().get(name)
            && c.stamp == st
        {
            return Ok(c.clone());
        }
        let t = Instant::now();
        let bytes = std::fs::read(&zkey).map_err(|e| Failure::Internal(format!("{name}: {e}")))?;
        let pk = ProvingKey::from_bytes(&bytes)
            .map_err(|e| Failure::Internal(format!("circuit {name}: {e}")))?;
        let wasm = folder.join("circuit.wasm");
        let calc = match std::fs::read(&wasm) {
            Ok(b) => {
                Some(Arc::new(WitnessCalculator::new(&b).map_err(|e| {
                    Failure::Internal(format!("circuit {name}: {e}"))
                })?))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Failure::Internal(format!("{}: {e}", wasm.display()))),
        };
        tracing::info!(
            circuit = name,
            wires = pk.n_vars,
            domain = pk.domain_size,
            ms = t.elapsed().as_millis() as u64,
            "circuit loaded"
        );
        let c = Arc::new(Circuit {
            stamp: st,
            pvk: fleetmesh_prover::PreparedVk::new(&pk.vk),
            pk: Arc::new(pk),
            calc,
        });
        self.lock().insert(name.to_owned(), c.clone());
        Ok(c)
    }

    /// The installed circuit whose `circuit.zkey` has SHA-256 `digest` (hex), if any — how
    /// an ask names a circuit.
    pub(crate) fn circuit_by_digest(&self, digest: &str) -> Option<String> {
        use sha2::Digest as _;
        let entries = std::fs::read_dir(&self.dir).ok()?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !valid_name(&name) {
                continue;
            }
            let zkey = e.path().join("circuit.zkey");
            let Ok(st) = stamp(&zkey) else { continue };
            let known = self
                .digests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&name)
                .filter(|(s, _)| *s == st)
                .map(|(_, d)| d.clone());
            let d = match known {
                Some(d) => d,
                None => {
                    let Ok(bytes) = std::fs::read(&zkey) else {
                        continue;
                    };
                    let d = hex::encode(sha2::Sha256::digest(&bytes));
                    self.digests
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), (st, d.clone()));
                    d
                }
            };
            if d == digest {
                return Some(name);
            }
        }
        None
    }

    /// Proves `req` (as the HTTP body: circuit name and input or witness), blocking; the
    /// answer, or the failure's code and message.
    pub(crate) fn prove_blocking(&self, req: &Value) -> Result<Value, (&'static str, String)> {
        self.run(req).map_err(|f| match f {
            Failure::Malformed(m) => ("bad_request", m),
            Failure::Unknown(m) => ("unknown_circuit", m),
            Failure::Unsatisfied(m) => ("unsatisfied", m),
            Failure::Busy => ("busy", "the prover is busy".into()),
            Failure::Internal(m) => ("internal", m),
        })
    }

    /// The snarkjs verification key of circuit `name`.
    pub(crate) fn vk_json(&self, name: &str) -> Result<Value, String> {
        let c = self.circuit(name).map_err(|f| format!("{f:?}"))?;
        Ok(fleetmesh_prover::snarkjs::vk_to_json(&c.pk.vk))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Circuit>>> {
        self.circuits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Witness then proof, blocking.
    fn run(&self, req: &Value) -> Result<Value, Failure> {
        let name = req
            .get("circuit")
            .and_then(Value::as_str)
            .ok_or_else(|| Failure::Malformed("circuit: missing or not a string".into()))?;
        let circuit = self.circuit(name)?;
        let t = Instant::now();
        let witness = match (req.get("input"), req.get("witness")) {
            (Some(input), None) => {
                let calc = circuit.calc.as_ref().ok_or_else(|| {
                    Failure::Malformed(format!(
                        "input: circuit {name:?} has no circuit.wasm on this node; send \"witness\""
                    ))
                })?;
                calc.calculate(input).map_err(|e| match e {
                    Error::Input { .. } => Failure::Malformed(e.to_string()),
                    other => Failure::Unsatisfied(other.to_string()),
                })?
            }
            (None, Some(w)) => parse_witness(w)?,
            _ => {
                return Err(Failure::Malformed(
                    "give exactly one of \"input\" and \"witness\"".into(),
                ));
            }
        };
        let witness_ms = t.elapsed().as_millis() as u64;
        let t = Instant::now();
        let proven = fleetmesh_prover::prove::prove_checked(
            &circuit.pk,
            &circuit.pvk,
            &witness,
            self.backend.as_ref(),
        )
        .map_err(|e| match e {
            Error::Witness(m) => Failure::Unsatisfied(m),
            other => Failure::Internal(other.to_string()),
        })?;
        Ok(json!({
            "proof": proof_to_json(&proven.proof),
            "public": public_to_json(&proven.public),
            "ms": {"witness": witness_ms, "prove": t.elapsed().as_millis() as u64},
        }))
    }
}

/// A full witness in public.json's format (decimal strings), errors named `witness[i]`.
fn parse_witness(v: &Value) -> Result<Vec<Fr>, Failure> {
    fleetmesh_prover::snarkjs::parse_public(v).map_err(|e| match e {
        Error::Malformed { field, reason } => Failure::Malformed(format!(
            "witness{}: {reason}",
            field.strip_prefix("public").unwrap_or(&field)
        )),
        other => Failure::Malformed(format!("witness: {other}")),
    })
}

/// `POST /v1/proofs/prove`.
pub async fn handle(State(service): State<Arc<ProveService>>, body: axum::body::Bytes) -> Response {
    let req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return Failure::Malformed(format!("the body is not JSON: {e}")).into_response(),
    };
    let _admitted = match service.admitted.try_acquire() {
        Ok(p) => p,
        Err(TryAcquireError::NoPermits) => return Failure::Busy.into_response(),
        Err(TryAcquireError::Closed) => {
            return Failure::Internal("the prover stopped".into()).into_response();
        }
    };
    // One proof at a time: each uses every core.
    let _turn = service.prover.lock().await;
    let svc = service.clone();
    match tokio::task::spawn_blocking(move || svc.run(&req)).await {
        Ok(Ok(v)) => Json(v).into_response(),
        Ok(Err(f)) => f.into_response(),
        Err(_) => Failure::Internal("the prover panicked".into()).into_response(),
    }
}
