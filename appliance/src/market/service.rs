//! Jobs on the node: `POST /v1/jobs` (a signed ask and its compute/1.0 job message,
//! NIP-44 encrypted to this node), `GET /v1/jobs/{id}` (the state),
//! `GET /v1/jobs/{id}/result` (the compute/1.0 result, encrypted to the buyer) and
//! `GET /v1/jobs/{id}/receipt` (the signed kind 30811 receipt, also published on the
//! node's relay).
//!
//! Jobs run one at a time on a worker thread, off the async runtime. The `wasm` engine in
//! `delivery` mode is what runs today: `params.module` is the WASI command, `input` its
//! stdin (job data inline, or blob references into this node's Blossom store) and `/inputs/input`, `params.files` (name → base64) more
//! files under `/inputs`, `params.args` its arguments, `limits` at most the ask's; the output
//! is a JSON document (exit code, stdout, stderr, the files the module wrote to
//! `/outputs`, and the delivery preimage) whose SHA-256 is the receipt's output digest.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use fleetmesh_relay::face::Relay;
use fleetmesh_relay::{NodeKeys, nip44};
use fleetmesh_schemas::{SchemaKey, SchemaSet};
use serde_json::{Value, json};

use crate::node::unix_now;
use sha2::{Digest, Sha256};

use super::ask::Ask;
use super::jobs::{JobRecord, JobStore, State as JobState};
use super::receipt::{Finished, sign_receipt};
use super::{Refusal, refuse};
use crate::server::api_error;

/// The job store file, in the node directory.
pub const JOBS_DB: &str = "jobs.sqlite";
/// Where jobs' input and output directories live, in the node directory.
pub const JOBS_DIR: &str = "jobs";

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// One job being run: its record, its ask, its opened job message, when it started.
struct Run<'a> {
    job: &'a JobRecord,
    ask: &'a Ask,
    msg: &'a Value,
    started_at: u64,
}

/// The node's job service.
pub struct JobService {
    store: JobStore,
    keys: NodeKeys,
    schemas: &'static SchemaSet,
    relay: Arc<Relay>,
    wasi: fleetmesh_wasi::Runtime,
    dir: PathBuf,
    blobs: Arc<crate::blossom::Blossom>,
    prover: Arc<crate::prove_service::ProveService>,
    inference: Arc<crate::inference_service::InferenceService>,
    queue: Mutex<std::sync::mpsc::Sender<String>>,
    runtime: tokio::runtime::Handle,
}

impl std::fmt::Debug for JobService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobService")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl JobService {
    /// Opens the job store of the node in `node_dir`, starts the worker (which first takes
    /// the jobs left accepted) and the expiry sweep. Call from inside the runtime.
    ///
    /// # Errors
    /// The store or the keys cannot be opened, or the WASI engine cannot start.
    pub fn start(
        node_dir: &std::path::Path,
        relay: Arc<Relay>,
        blobs: Arc<crate::blossom::Blossom>,
        prover: Arc<crate::prove_service::ProveService>,
        inference: Arc<crate::inference_service::InferenceService>,
    ) -> anyhow::Result<Arc<JobService>> {
        let store = JobStore::open(&node_dir.join(JOBS_DB), unix_now())?;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let pending: Vec<String> = store
            .in_state(JobState::Accepted)?
            .into_iter()
            .map(|j| j.id)
            .collect();
        let svc = Arc::new(JobService {
            store,
            keys: NodeKeys::load(&node_dir.join(crate::node::KEYS_DIR))?,
            schemas: SchemaSet::embedded(),
            relay,
            wasi: fleetmesh_wasi::Runtime::new(&fleetmesh_wasi::RuntimeConfig::default())?,
            dir: node_dir.join(JOBS_DIR),
            blobs,
            prover,
            inference,
            queue: Mutex::new(tx.clone()),
            runtime: tokio::runtime::Handle::current(),
        });
        for id in pending {
            let _ = tx.send(id);
        }
        // the worker holds a weak handle: the service ends with the router
        let weak = Arc::downgrade(&svc);
        std::thread::Builder::new()
            .name("fleetmesh-jobs".into())
            .spawn(move || {
                while let Ok(id) = rx.recv() {
                    let Some(svc) = weak.upgrade() else { return };
                    // a panic in an engine fails its job, not the worker
                    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        svc.execute(&id);
                    }));
                    if ran.is_err() {
                        tracing::error!(job = %id, "the job's engine panicked");
                        let _ = svc.store.transition(
                            &id,
                            JobState::Failed,
                            Some("internal: the engine panicked"),
                            unix_now(),
                        );
                    }
                }
            })?;
        let weak = Arc::downgrade(&svc);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
            loop {
                tick.tick().await;
                let Some(svc) = weak.upgrade() else { return };
                match svc.store.expire_due(unix_now()) {
                    Ok(ids) if !ids.is_empty() => tracing::info!(?ids, "jobs expired"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(%e, "expiring jobs"),
                }
            }
        });
        Ok(svc)
    }

    /// Checks and records a submission: the ask, then the job message it carries.
    fn submit(&self, body: &[u8]) -> Result<(JobRecord, bool), Refusal> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| refuse("bad_request", format!("the body is not JSON: {e}")))?;
        let now = unix_now();
        let ask = Ask::parse(&v["ask"].to_string(), self.schemas, now)?;
        let sealed = v["payload"]
            .as_str()
            .ok_or_else(|| refuse("bad_request", "payload must be a NIP-44 string"))?;
        let job = self.open_job(&ask, sealed)?;
        let id = job["job_id"].as_str().unwrap_or_default().to_string();
        let (rec, new) = self.store.submit(&ask, &id, sealed, now)?;
        if new {
            let _ = self
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .send(rec.id.clone());
        }
        Ok((rec, new))
    }

    /// Decrypts and checks the compute/1.0 job message of `ask`.
    fn open_job(&self, ask: &Ask, sealed: &str) -> Result<Value, Refusal> {
        let key = nip44::conversation_key(&self.keys.nostr().secret_key(), &ask.buyer())
            .map_err(|e| refuse("bad_request", e.to_string()))?;
        let plain = nip44::decrypt(&key, sealed)
            .map_err(|e| refuse("bad_request", format!("the payload does not open: {e}")))?;
        let job: Value = serde_json::from_slice(&plain)
            .map_err(|e| refuse("bad_request", format!("the payload is not JSON: {e}")))?;
        self.schemas
            .validate(&SchemaKey::Payload("compute/1.0".into()), &job)
            .map_err(|e| refuse("schema", e.to_string()))?;
        if job["type"] != "job" {
            return Err(refuse("bad_request", "the payload is not a job message"));
        }
        for (field, want) in [
            ("ask", ask.event.id_hex()),
            ("engine", ask.engine.clone()),
            ("mode", ask.mode.clone()),
        ] {
            if job[field].as_str() != Some(want.as_str()) {
                return Err(refuse(
                    "mismatch",
                    format!("the job's {field} is {}, the ask's {want}", job[field]),
                ));
            }
        }
        let modes: &[&str] = match ask.engine.as_str() {
            "wasm" | "data" => &["delivery"],
            "groth16-prove" | "groth16-verify" => &["proof"],
            "llm" => &["quasi-deterministic", "schema-bounds", "tee-attestation"],
            other => {
                return Err(refuse(
                    "unsupported-engine",
                    format!(
                        "engine {other} does not run on this node (wasm, data, groth16-prove, \
                         groth16-verify and llm do)"
                    ),
                ));
            }
        };
        if !modes.contains(&ask.mode.as_str()) {
            return Err(refuse(
                "unsupported-mode",
                format!(
                    "{} jobs are verified by {}, not {}",
                    ask.engine,
                    modes.join(" or "),
                    ask.mode
                ),
            ));
        }
        if ask.engine == "llm" {
            let want = job["params"]["max_tokens"].as_u64().unwrap_or(16);
            let cap = ask.content["limits"]["tokens"].as_u64().unwrap_or(0);
            if want > cap {
                return Err(refuse(
                    "limit-exceeded",
                    format!("max_tokens {want} is above the ask's tokens limit {cap}"),
                ));
            }
            if ask.mode == "schema-bounds" {
                let schema = &job["output_schema"];
                let digest = hex::encode(Sha256::digest(schema.to_string().as_bytes()));
                if schema.is_null()
                    || ask.content["output_schema"].as_str() != Some(digest.as_str())
                {
                    return Err(refuse(
                        "mismatch",
                        "the job's output_schema does not hash (SHA-256 of its compact JSON) to \
                         the ask's",
                    ));
                }
            }
        }
        for limit in ["fuel", "wall_secs", "memory_bytes", "output_bytes"] {
            if let (Some(asked), Some(cap)) = (
                job["limits"][limit].as_u64(),
                ask.content["limits"][limit].as_u64(),
            ) && asked > cap
            {
                return Err(refuse(
                    "limit-exceeded",
                    format!("the job's {limit} {asked} is above the ask's {cap}"),
                ));
            }
        }
        if (ask.engine == "wasm" || ask.engine == "data")
            && job["limits"]["fuel"].as_u64().is_none()
        {
            return Err(refuse("bad_request", "a wasm job needs limits.fuel"));
        }
        Ok(job)
    }

    /// Runs accepted job `id` to its end; every failure ends up on the job.
    fn execute(&self, id: &str) {
        let now = unix_now();
        let Ok(Some(job)) = self.store.get(id) else {
            return;
        };
        if job.state != JobState::Accepted
            || self
                .store
                .transition(id, JobState::Running, None, now)
                .is_err()
        {
            return;
        }
        if let Err(e) = self.run(&job) {
            tracing::warn!(job = %id, %e, "job failed");
            let _ = self
                .store
                .transition(id, JobState::Failed, Some(&e.to_string()), unix_now());
        }
    }

    fn run(&self, job: &JobRecord) -> Result<(), Refusal> {
        let started_at = unix_now();
        let ask = Ask::parse(&job.ask, self.schemas, 0)?;
        let msg = self.open_job(&ask, &job.payload)?;
        let run = Run {
            job,
            ask: &ask,
            msg: &msg,
            started_at,
        };
        match ask.engine.as_str() {
            "groth16-prove" => return self.run_prove(&run),
            "groth16-verify" => return self.run_verify(&run),
            "llm" => return self.run_llm(&run),
            _ => {}
        }
        // job data: inline bytes, or blobs of this node's Blossom store, in order
        let inline = |v: &Value, what: &str| -> Result<Vec<u8>, Refusal> {
            match (&v["inline"], &v["blobs"]) {
                (Value::String(s), _) => b64()
                    .decode(s)
                    .map_err(|e| refuse("bad_request", format!("{what}: bad base64: {e}"))),
                (_, Value::Array(refs)) => {
                    let mut out = Vec::new();
                    for r in refs {
                        let hash = r["sha256"].as_str().unwrap_or_default();
                        let bytes = self.blobs.get(hash).ok_or_else(|| {
                            refuse(
                                "bad_request",
                                format!("{what}: blob {hash} is not on this node (PUT /upload it)"),
                            )
                        })?;
                        if r["size"].as_u64() != Some(bytes.len() as u64) {
                            return Err(refuse(
                                "bad_request",
                                format!(
                                    "{what}: blob {hash} has {} bytes, not {}",
                                    bytes.len(),
                                    r["size"]
                                ),
                            ));
                        }
                        out.extend(bytes);
                    }
                    Ok(out)
                }
                _ => Err(refuse("bad_request", format!("{what}: no data"))),
            }
        };
        let module = inline(&msg["params"]["module"], "params.module")?;
        let input = inline(&msg["input"], "input")?;
        let args: Vec<String> = msg["params"]["args"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let work = self.dir.join(&job.id);
        let (inputs, outputs) = (work.join("inputs"), work.join("outputs"));
        let io = |e: std::io::Error| refuse("internal", format!("{}: {e}", work.display()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&inputs).map_err(io)?;
        std::fs::create_dir_all(&outputs).map_err(io)?;
        std::fs::write(inputs.join("input"), &input).map_err(io)?;
        // more input files (a Bacalhau spec's input sources), by base name
        if let Some(files) = msg["params"]["files"].as_object() {
            for (name, data) in files {
                let safe = std::path::Path::new(name)
                    .file_name()
                    .filter(|n| *n != "input")
                    .ok_or_else(|| refuse("bad_request", format!("input file name {name:?}")))?;
                let bytes = b64()
                    .decode(data.as_str().unwrap_or_default())
                    .map_err(|e| refuse("bad_request", format!("input file {name}: {e}")))?;
                std::fs::write(inputs.join(safe), bytes).map_err(io)?;
            }
        }
        let limits = &msg["limits"];
        let defaults = fleetmesh_wasi::Limits::default();
        let wasi_job = fleetmesh_wasi::Job {
            args,
            stdin: input,
            inputs: Some(inputs),
            outputs: Some(outputs.clone()),
            limits: fleetmesh_wasi::Limits {
                fuel: limits["fuel"].as_u64().unwrap_or(defaults.fuel),
                memory: limits["memory_bytes"]
                    .as_u64()
                    .map_or(defaults.memory, |m| m as usize),
                wall: limits["wall_secs"]
                    .as_u64()
                    .map_or(defaults.wall, std::time::Duration::from_secs),
                output: limits["output_bytes"]
                    .as_u64()
                    .map_or(defaults.output, |m| m as usize),
            },
        };
        let module = self
            .wasi
            .compile(&module)
            .map_err(|e| refuse("bad_request", e.to_string()))?;
        let out = self
            .wasi
            .run(&module, &wasi_job)
            .map_err(|e| refuse("bad_request", e.to_string()))?;
        // the output document
        let mut files = serde_json::Map::new();
        if let Ok(entries) = std::fs::read_dir(&outputs) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_file())
                    && let Ok(bytes) = std::fs::read(e.path())
                {
                    files.insert(
                        e.file_name().to_string_lossy().into_owned(),
                        json!(b64().encode(bytes)),
                    );
                }
            }
        }
        let mut preimage = [0u8; 32];
        getrandom_fill(&mut preimage)?;
        let exit_code = match out.status {
            fleetmesh_wasi::Status::Exited(c) => Some(c),
            _ => None,
        };
        let document = json!({
            "status": out.status.code(),
            "exit_code": exit_code,
            "stdout": b64().encode(&out.stdout),
            "stderr": b64().encode(&out.stderr),
            "files": files,
            "preimage": hex::encode(preimage),
        })
        .to_string();
        let output_digest = hex::encode(Sha256::digest(document.as_bytes()));
        let failure = match &out.status {
            fleetmesh_wasi::Status::Exited(0) => None,
            fleetmesh_wasi::Status::Exited(c) => Some(format!("the module exited with {c}")),
            fleetmesh_wasi::Status::Trap(m) => Some(format!("trap: {m}")),
            other => Some(other.code().to_string()),
        };
        let done = Finished {
            output_digest: output_digest.clone(),
            metered: json!({
                "fuel": out.fuel_used,
                "wall_ms": out.wall.as_millis() as u64,
                "output_bytes": document.len(),
            }),
            verdict: json!({
                "mode": "delivery",
                "preimage_hash": hex::encode(Sha256::digest(preimage)),
                "delivered": failure.is_none(),
            }),
            started_at,
            finished_at: unix_now(),
        };
        self.conclude(job, &done, &document, failure.as_deref())
    }

    /// Signs, publishes and stores what a finished job produced: the receipt on the relay,
    /// the result (with the output `document`) encrypted to the buyer.
    fn conclude(
        &self,
        job: &JobRecord,
        done: &Finished,
        document: &str,
        failure: Option<&str>,
    ) -> Result<(), Refusal> {
        let receipt = sign_receipt(&self.keys, job, done)?;
        let published = self.runtime.block_on(self.relay.publish(receipt.clone()));
        if let Err(e) = published {
            tracing::warn!(job = %job.id, %e, "publishing the receipt");
        }
        let result = json!({
            "protocol": "compute/1.0",
            "type": "result",
            "job_id": job.id,
            "output_digest": done.output_digest,
            "metered": done.metered,
            "verdict": done.verdict,
            "output": {"inline": b64().encode(document.as_bytes()),
                       "media_type": "application/vnd.fleetmesh.job-result+json"},
            "receipt": receipt.id_hex(),
        });
        let key = nip44::conversation_key(&self.keys.nostr().secret_key(), &job.buyer)
            .map_err(|e| refuse("internal", e.to_string()))?;
        let sealed = nip44::encrypt(&key, result.to_string().as_bytes())
            .map_err(|e| refuse("internal", e.to_string()))?;
        // the sealed result is also a blob of the node's Blossom store: content-addressed,
        // readable by anyone, openable by the buyer only
        if let Err(e) = self.blobs.put(
            sealed.as_bytes(),
            "application/nip44",
            &self.keys.nostr_pubkey_hex(),
        ) {
            tracing::warn!(job = %job.id, %e, "storing the result blob");
        }
        self.store.finish(
            &job.id,
            failure,
            done,
            (&receipt.to_json(), &sealed),
            unix_now(),
        )?;
        Ok(())
    }

    /// An `llm` job: `params` is an OpenAI completions (or chat, with `messages`) body for
    /// the ask's model, answered through the node's inference API under the ask's mode —
    /// the 2-of-3 quorum, or decoding constrained to the job's `output_schema`.
    fn run_llm(&self, r: &Run<'_>) -> Result<(), Refusal> {
        let (job, ask, msg, started_at) = (r.job, r.ask, r.msg, r.started_at);
        if ask.mode == "tee-attestation" {
            return self.run_llm_attested(r);
        }
        let t = std::time::Instant::now();
        let mut body = msg["params"].clone();
        if !body.is_object() {
            return Err(refuse(
                "bad_request",
                "an llm job's params are a completions request",
            ));
        }
        body["model"] = ask.content["model"].clone();
        body["verification"] = json!(ask.mode);
        body["stream"] = json!(false);
        if ask.mode == "schema-bounds" {
            body["response_format"] = json!({"type": "json_schema",
                "json_schema": {"name": "output", "schema": msg["output_schema"]}});
        }
        let inference = self.inference.clone();
        let answer = crate::inference_service::answer_blocking(&inference, &body);
        let me = self.keys.nostr_pubkey_hex();
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
                "mode": "quasi-deterministic",
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
            Ok(r) => {
                let fm = &r["fleetmesh"];
                let verdict = if ask.mode == "schema-bounds" {
                    json!({"mode": "schema-bounds",
                           "valid": fm["verdict"]["valid"].as_bool().unwrap_or(false),
                           "schema_digest": ask.content["output_schema"]})
                } else {
                    quorum_verdict(&fm["verdict"], fm["transcript_digest"].as_str())
                };
                let metered = json!({
                    "prompt_tokens": r["usage"]["prompt_tokens"],
                    "completion_tokens": r["usage"]["completion_tokens"],
                    "wall_ms": t.elapsed().as_millis() as u64,
                });
                (r.to_string(), verdict, metered, None)
            }
            Err((code, message, Some(v))) if ask.mode == "quasi-deterministic" => {
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
            Err((code, message, _)) => {
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
        self.conclude(job, &done, &document, failure.as_deref())
    }

    /// An `llm` job in `tee-attestation` mode: generated here, then this host's SEV-SNP
    /// report over the protocol's nonce — SHA-256(blinded job id ‖ output digest) in the
    /// first half of REPORT_DATA — is stored as a blob named by the verdict's
    /// `report_digest`. A host without configfs-tsm fails the job before generating.
    fn run_llm_attested(&self, r: &Run<'_>) -> Result<(), Refusal> {
        use fleetmesh_inference::tee;
        let (job, ask, msg) = (r.job, r.ask, r.msg);
        tee::tsm_available().map_err(|e| refuse("tee_unavailable", e.to_string()))?;
        let t = std::time::Instant::now();
        let mut body = msg["params"].clone();
        body["model"] = ask.content["model"].clone();
        body["verification"] = json!("none");
        body["stream"] = json!(false);
        body["temperature"] = json!(0);
        let answer = crate::inference_service::answer_blocking(&self.inference, &body)
            .map_err(|(code, m, _)| refuse("bad_request", format!("{code}: {m}")))?;
        let document = answer.to_string();
        let output_digest = Sha256::digest(document.as_bytes());
        let blinded =
            super::receipt::blinded_job_id(&self.keys.nostr().secret_key(), &job.buyer, &job.id)?;
        let mut h = Sha256::new();
        h.update(hex::decode(&blinded).unwrap_or_default());
        h.update(output_digest);
        let nonce: [u8; 32] = h.finalize().into();
        let mut report_data = [0u8; 64];
        report_data[..32].copy_from_slice(&nonce);
        let got =
            tee::collect_report(&report_data).map_err(|e| refuse("tee_failed", e.to_string()))?;
        let parsed = tee::snp::Report::parse(&got.report)
            .map_err(|e| refuse("tee_failed", e.to_string()))?;
        let report_digest = self
            .blobs
            .put(
                &got.report,
                "application/octet-stream",
                &self.keys.nostr_pubkey_hex(),
            )
            .map_err(|e| refuse("internal", e.to_string()))?;
        let done = Finished {
            output_digest: hex::encode(output_digest),
            metered: json!({
                "prompt_tokens": answer["usage"]["prompt_tokens"],
                "completion_tokens": answer["usage"]["completion_tokens"],
                "wall_ms": t.elapsed().as_millis() as u64,
            }),
            verdict: json!({
                "mode": "tee-attestation",
                "bound": true,
                "platform": "amd-sev-snp",
                "report_digest": report_digest,
                "measurement": hex::encode(parsed.measurement),
                "nonce": hex::encode(nonce),
            }),
            started_at: r.started_at,
            finished_at: unix_now(),
        };
        self.conclude(job, &done, &document, None)
    }

    /// A `groth16-verify` job: `params.vkey` (snarkjs, its SHA-256 the ask's `circuit`)
    /// and `params.proofs` (`[{"proof", "public"}]`), checked together; the job fails,
    /// with a receipt saying `valid: false`, when any proof is invalid.
    fn run_verify(&self, r: &Run<'_>) -> Result<(), Refusal> {
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
        let pvk = fleetmesh_prover::PreparedVk::new(&vk);
        let items = p["proofs"]
            .as_array()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| refuse("bad_request", "params.proofs must list {proof, public}"))?;
        let mut results = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            let proof = parse_proof(&it["proof"])
                .map_err(|e| refuse("bad_request", format!("proofs[{i}].proof: {e}")))?;
            let public = parse_public(&it["public"])
                .map_err(|e| refuse("bad_request", format!("proofs[{i}].public: {e}")))?;
            check_public_count(&vk, &public)
                .map_err(|e| refuse("bad_request", format!("proofs[{i}].public: {e}")))?;
            let ok = fleetmesh_prover::verify(&pvk, &proof, &public)
                .map_err(|e| refuse("internal", e.to_string()))?;
            results.push(ok);
        }
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
                "mode": "proof",
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
        self.conclude(job, &done, &document, failure.as_deref())
    }

    /// A `groth16-prove` job: the installed circuit whose zkey has the ask's digest, the
    /// job's `params.input` (or `params.witness`), a proof checked before it is claimed.
    fn run_prove(&self, r: &Run<'_>) -> Result<(), Refusal> {
        let (job, ask, msg, started_at) = (r.job, r.ask, r.msg, r.started_at);
        let digest = ask.content["circuit"].as_str().unwrap_or_default();
        let name = self.prover.circuit_by_digest(digest).ok_or_else(|| {
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
        let t = std::time::Instant::now();
        let proven = self
            .prover
            .prove_blocking(&req)
            .map_err(|(code, m)| refuse("bad_request", format!("{code}: {m}")))?;
        let vk = self
            .prover
            .vk_json(&name)
            .map_err(|e| refuse("internal", e))?;
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
                "mode": "proof",
                "valid": true,
                "vkey_digest": sha(&vkey),
                "public_inputs_digest": sha(&public),
                "proof_digest": sha(&proof),
            }),
            started_at,
            finished_at: unix_now(),
        };
        self.conclude(job, &done, &document, None)
    }
}

fn getrandom_fill(buf: &mut [u8]) -> Result<(), Refusal> {
    getrandom::fill(buf).map_err(|e| refuse("internal", format!("no randomness: {e}")))
}

fn refusal_response(r: &Refusal) -> Response {
    let status = match r.code {
        "not_found" => StatusCode::NOT_FOUND,
        "conflict" | "bad_transition" => StatusCode::CONFLICT,
        "storage" | "internal" => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    };
    api_error(status, r.code, r.message.clone())
}

/// `POST /v1/jobs`.
pub async fn submit(State(s): State<Arc<JobService>>, body: axum::body::Bytes) -> Response {
    let svc = s.clone();
    match tokio::task::spawn_blocking(move || svc.submit(&body)).await {
        Ok(Ok((rec, new))) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({"job": rec.id, "state": rec.state.as_str(), "new": new})),
        )
            .into_response(),
        Ok(Err(r)) => refusal_response(&r),
        Err(_) => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the submission panicked",
        ),
    }
}

fn lookup(s: &JobService, id: &str) -> Result<JobRecord, Refusal> {
    s.store
        .get(id)?
        .ok_or_else(|| refuse("not_found", format!("no job {id}")))
}

/// `GET /v1/jobs/{id}`.
pub async fn status(State(s): State<Arc<JobService>>, UrlPath(id): UrlPath<String>) -> Response {
    match lookup(&s, &id) {
        Ok(j) => axum::Json(j.to_json()).into_response(),
        Err(r) => refusal_response(&r),
    }
}

/// `GET /v1/jobs/{id}/result`.
pub async fn result(State(s): State<Arc<JobService>>, UrlPath(id): UrlPath<String>) -> Response {
    match lookup(&s, &id) {
        Ok(JobRecord {
            result: Some(r), ..
        }) => {
            let blob =
                json!({"sha256": hex::encode(Sha256::digest(r.as_bytes())), "size": r.len()});
            axum::Json(json!({"job": id, "payload": r, "blob": blob})).into_response()
        }
        Ok(j) => api_error(
            StatusCode::CONFLICT,
            "not_finished",
            format!("job {id} is {}", j.state.as_str()),
        ),
        Err(r) => refusal_response(&r),
    }
}

/// `GET /v1/jobs/{id}/receipt`.
pub async fn receipt(State(s): State<Arc<JobService>>, UrlPath(id): UrlPath<String>) -> Response {
    match lookup(&s, &id) {
        Ok(JobRecord {
            receipt: Some(r), ..
        }) => ([(axum::http::header::CONTENT_TYPE, "application/json")], r).into_response(),
        Ok(j) => api_error(
            StatusCode::CONFLICT,
            "not_finished",
            format!("job {id} is {}", j.state.as_str()),
        ),
        Err(r) => refusal_response(&r),
    }
}
