//! The engines a job runs on: `wasm` and `data` (WASI under `fleetmesh-wasi`),
//! `groth16-prove` and `groth16-verify` (the node's prover and verifier), `llm` (the
//! node's inference API under the ask's mode). Each ends in `JobService::conclude`.
//!
//! A `wasm` (or `data`) job: `params.module` is the WASI command, `input` its stdin and
//! `/inputs/input` (job data inline, or blob references into this node's Blossom store),
//! `params.files` (name → base64) more files under `/inputs`, `params.args` its
//! arguments, `limits` at most the ask's; the output is a JSON document (status, exit
//! code, stdout, stderr, the files the module wrote to `/outputs`, the delivery preimage)
//! whose SHA-256 is the receipt's output digest.

use base64::Engine as _;
use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::{Engine, Mode};
use fleetmesh_prover::queue::{ProveRequest, error_code};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{JobService, LlmFailure, Run, b64, unix_now};
use crate::jobs::JobRecord;
use crate::receipt::Finished;
use crate::{Refusal, refuse};

impl JobService {
    /// Runs `job` on its ask's engine.
    pub(super) fn run(&self, job: &JobRecord) -> Result<(), Refusal> {
        let started_at = unix_now();
        let ask = Ask::parse(&job.ask, 0)?;
        let msg = self.open_job(&ask, &job.payload)?;
        let run = Run {
            job,
            ask: &ask,
            msg: &msg,
            started_at,
        };
        match ask.engine {
            Engine::Groth16Prove => return self.run_prove(&run),
            Engine::Groth16Verify => return self.run_verify(&run),
            Engine::Llm => return self.run_llm(&run),
            Engine::Wasm | Engine::Data => {}
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
            // what the job asks, else the runtime's default, cut to the node's maxima
            limits: fleetmesh_wasi::Limits {
                fuel: limits["fuel"]
                    .as_u64()
                    .unwrap_or(defaults.fuel)
                    .min(self.limits.max_fuel),
                memory: limits["memory_bytes"]
                    .as_u64()
                    .unwrap_or(defaults.memory as u64)
                    .min(self.limits.max_memory_bytes) as usize,
                wall: std::time::Duration::from_secs(
                    limits["wall_secs"]
                        .as_u64()
                        .unwrap_or(defaults.wall.as_secs())
                        .min(self.limits.max_wall_secs),
                ),
                output: limits["output_bytes"]
                    .as_u64()
                    .unwrap_or(defaults.output as u64)
                    .min(self.limits.max_output_bytes) as usize,
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
                "mode": Mode::Delivery,
                "preimage_hash": hex::encode(Sha256::digest(preimage)),
                "delivered": failure.is_none(),
            }),
            started_at,
            finished_at: unix_now(),
        };
        self.conclude(job, &done, &document, failure.as_deref())
    }

    /// An `llm` job: `params` is an OpenAI completions (or chat, with `messages`) body for
    /// the ask's model, answered through the node's inference API under the ask's mode —
    /// the 2-of-3 quorum, or decoding constrained to the job's `output_schema`.
    fn run_llm(&self, r: &Run<'_>) -> Result<(), Refusal> {
        let (job, ask, msg, started_at) = (r.job, r.ask, r.msg, r.started_at);
        if ask.mode == Mode::TeeAttestation {
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
        if ask.mode == Mode::SchemaBounds {
            body["response_format"] = json!({"type": "json_schema",
                "json_schema": {"name": "output", "schema": msg["output_schema"]}});
        }
        let answer = self.inference.answer(&body);
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
            Ok(r) => {
                let fm = &r["fleetmesh"];
                let verdict = if ask.mode == Mode::SchemaBounds {
                    json!({"mode": Mode::SchemaBounds,
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
        self.conclude(job, &done, &document, failure.as_deref())
    }

    /// An `llm` job in `tee-attestation` mode: the inference API's own `tee-attestation`
    /// answer with the blinded job id as its `job`, so the receipt carries the very binding
    /// the API's verdict does (`fleetmesh_attest::binding_nonce`: model digest, prompt
    /// ids, output ids, blinded job id) in `verdict.nonce`; the SEV-SNP report is stored
    /// as a blob named by the verdict's `report_digest`. A host without configfs-tsm fails
    /// the job before generating.
    fn run_llm_attested(&self, r: &Run<'_>) -> Result<(), Refusal> {
        use fleetmesh_attest as tee;
        let (job, ask, msg) = (r.job, r.ask, r.msg);
        tee::tsm_available().map_err(|e| refuse("tee_unavailable", e.to_string()))?;
        let t = std::time::Instant::now();
        let blinded = fleetmesh_proto::receipt::blinded_job_id(
            &self.keys.nostr().secret_key(),
            &job.buyer,
            &job.id,
        )?;
        let mut body = msg["params"].clone();
        body["model"] = ask.content["model"].clone();
        body["verification"] = json!(Mode::TeeAttestation);
        body["job"] = json!(blinded);
        body["stream"] = json!(false);
        body["temperature"] = json!(0);
        let answer = self.inference.answer(&body).map_err(
            |LlmFailure {
                 code, message: m, ..
             }| match code {
                "tee_unavailable" | "tee_failed" => refuse("tee_failed", m),
                _ => refuse("bad_request", format!("{code}: {m}")),
            },
        )?;
        let document = answer.to_string();
        let output_digest = Sha256::digest(document.as_bytes());
        let bound = &answer["fleetmesh"]["verdict"];
        let report = bound["report"]
            .as_str()
            .and_then(|h| hex::decode(h).ok())
            .ok_or_else(|| refuse("tee_failed", "the attested answer carries no report"))?;
        let nonce = bound["nonce"].as_str().unwrap_or_default().to_owned();
        let parsed =
            tee::snp::Report::parse(&report).map_err(|e| refuse("tee_failed", e.to_string()))?;
        let report_digest = self
            .blobs
            .put(
                &report,
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
        let key = self.verifier.prepared(&vk);
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
        let pending = self
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
        let req = ProveRequest::from_json(&req).map_err(|m| refuse("bad_request", m))?;
        let t = std::time::Instant::now();
        // the node's one proving queue: the API's admission and one proof at a time
        let refused =
            |e: fleetmesh_prover::Error| refuse("bad_request", format!("{}: {e}", error_code(&e)));
        let proven = self.prover.prove_blocking(&req).map_err(refused)?;
        let vk = fleetmesh_prover::snarkjs::vk_to_json(
            &self.prover.verifying_key(&name).map_err(refused)?,
        );
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
        self.conclude(job, &done, &document, None)
    }
}

fn getrandom_fill(buf: &mut [u8]) -> Result<(), Refusal> {
    getrandom::fill(buf).map_err(|e| refuse("internal", format!("no randomness: {e}")))
}
