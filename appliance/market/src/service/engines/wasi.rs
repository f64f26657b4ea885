//! `wasm` and `data` jobs: a WASI command under `fleetmesh-wasi`.
//!
//! A job: `params.module` is the WASI command, `input` its stdin and
//! `/inputs/input` (job data inline, or blob references into this node's Blossom store),
//! `params.files` (name → base64) more files under `/inputs`, `params.args` its
//! arguments, `limits` at most the ask's; the output is a JSON document (status, exit
//! code, stdout, stderr, the files the module wrote to `/outputs`, the delivery preimage)
//! whose SHA-256 is the receipt's output digest.

use base64::Engine as _;
use fleetmesh_proto::Mode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::EngineRun;
use crate::receipt::Finished;
use crate::service::{JobService, Run, b64};
use crate::{Refusal, refuse};
use fleetmesh_proto::unix_now;

/// `wasm` (and `data`, a Bacalhau task run the same way).
pub(super) struct Wasi;

impl EngineRun for Wasi {
    fn run(&self, svc: &JobService, r: &Run<'_>) -> Result<(), Refusal> {
        let (job, msg, started_at) = (r.job, r.msg, r.started_at);
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
                        let bytes = svc.blobs.get(hash).ok_or_else(|| {
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
        let work = svc.dir.join(&job.id);
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
        let asked = &msg["limits"];
        let node = svc.limits();
        let defaults = fleetmesh_wasi::Limits::default();
        let wasi_job = fleetmesh_wasi::Job {
            args,
            stdin: input,
            inputs: Some(inputs),
            outputs: Some(outputs.clone()),
            // what the job asks, else the runtime's default, cut to the node's maxima
            limits: fleetmesh_wasi::Limits {
                fuel: asked["fuel"]
                    .as_u64()
                    .unwrap_or(defaults.fuel)
                    .min(node.max_fuel),
                memory: asked["memory_bytes"]
                    .as_u64()
                    .unwrap_or(defaults.memory as u64)
                    .min(node.max_memory_bytes) as usize,
                wall: std::time::Duration::from_secs(
                    asked["wall_secs"]
                        .as_u64()
                        .unwrap_or(defaults.wall.as_secs())
                        .min(node.max_wall_secs),
                ),
                output: asked["output_bytes"]
                    .as_u64()
                    .unwrap_or(defaults.output as u64)
                    .min(node.max_output_bytes) as usize,
            },
        };
        let module = svc
            .wasi
            .compile(&module)
            .map_err(|e| refuse("bad_request", e.to_string()))?;
        let out = svc
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
        svc.conclude(job, &done, &document, failure.as_deref())
    }
}

fn getrandom_fill(buf: &mut [u8]) -> Result<(), Refusal> {
    getrandom::fill(buf).map_err(|e| refuse("internal", format!("no randomness: {e}")))
}
