//! Bacalhau v1 job specs (YAML or JSON, keys in either case) for compute-over-data, read
//! into a wasm job this node runs — or refused with the reason.
//!
//! Accepted: `Type: batch`, `Count` 1 (or absent), one task with `Engine: wasm`
//! (`EntryModule` naming an input source's target, `Entrypoint: _start`, `Parameters` as
//! arguments), input sources of type `inline` (a `data:` URL or text), `local`
//! (`SourcePath`, read on the submitting machine) and `urlDownload` (fetched by the
//! submitter), `Publisher` `local` or `noop`, `ResultPaths` under `/outputs`,
//! `Resources.Memory`, `Timeouts.ExecutionTimeout`. Refused with a clear error: other job
//! types, counts and engines (docker, noop, unknown ones), storage types (s3, ipfs, …),
//! publishers, networking, environment variables, an empty document.

use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

use super::{Refusal, refuse};

/// A Bacalhau wasm task, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WasmSpec {
    /// The job's name, if any.
    pub name: Option<String>,
    /// The entry module's bytes.
    pub module: Vec<u8>,
    /// Arguments after the program name.
    pub args: Vec<String>,
    /// Other inputs: file name under `/inputs` and bytes.
    pub files: Vec<(String, Vec<u8>)>,
    /// `Resources.Memory`, bytes.
    pub memory_bytes: Option<u64>,
    /// `Timeouts.ExecutionTimeout`, seconds.
    pub wall_secs: Option<u64>,
}

fn bad(message: impl Into<String>) -> Refusal {
    refuse("bacalhau", message)
}

/// Lower-cases every object key, so `Tasks` and `tasks` read alike.
fn lower_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), lower_keys(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(lower_keys).collect()),
        other => other,
    }
}

/// Whether `text` looks like a Bacalhau spec (a document with `Tasks`).
pub fn is_spec(text: &str) -> bool {
    serde_yaml::from_str::<Value>(text)
        .ok()
        .map(lower_keys)
        .is_some_and(|v| v.get("tasks").is_some())
}

/// "1Gb", "512Mb", "64MiB", "1048576" → bytes.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().ok()?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "kib" | "ki" => 1024.0,
        "mb" | "m" => 1e6,
        "mib" | "mi" => 1024.0 * 1024.0,
        "gb" | "g" => 1e9,
        "gib" | "gi" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * mult) as u64)
}

/// The bytes of a `data:` URL (base64 or percent-free text), or plain text.
fn inline_bytes(url: &str) -> Result<Vec<u8>, Refusal> {
    let Some(rest) = url.strip_prefix("data:") else {
        return Ok(url.as_bytes().to_vec());
    };
    let (meta, data) = rest
        .split_once(',')
        .ok_or_else(|| bad("an inline data: URL without a comma"))?;
    if meta.ends_with(";base64") {
        let clean: String = data.split_whitespace().collect();
        base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map_err(|e| bad(format!("inline data: bad base64: {e}")))
    } else {
        Ok(data.as_bytes().to_vec())
    }
}

/// Reads a spec; `base` resolves `local` sources; `download` fetches `urlDownload` ones.
///
/// # Errors
/// A `bacalhau` refusal naming what is not supported or wrong.
pub fn parse(
    text: &str,
    base: &Path,
    download: &dyn Fn(&str) -> Result<Vec<u8>, String>,
) -> Result<WasmSpec, Refusal> {
    let doc: Value =
        serde_yaml::from_str(text).map_err(|e| bad(format!("not YAML or JSON: {e}")))?;
    if doc.is_null() {
        return Err(bad("the job spec is empty"));
    }
    let doc = lower_keys(doc);
    let kind = doc["type"].as_str().unwrap_or("batch");
    if kind != "batch" {
        return Err(bad(format!(
            "Type {kind} is not supported: this node runs batch jobs (ops, service and daemon \
             jobs need a Bacalhau cluster)"
        )));
    }
    let count = doc["count"].as_u64().unwrap_or(1);
    if count != 1 {
        return Err(bad(format!(
            "Count {count}: a job runs once on this node (Count 1)"
        )));
    }
    let tasks = doc["tasks"]
        .as_array()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| bad("Tasks must list one task"))?;
    if tasks.len() != 1 {
        return Err(bad(format!("{} tasks: one task per job", tasks.len())));
    }
    let task = &tasks[0];
    let engine = task["engine"]["type"].as_str().unwrap_or("");
    match engine {
        "wasm" => {}
        "docker" => {
            return Err(bad(
                "engine docker is not supported: this node runs wasm tasks (no containers)",
            ));
        }
        "" => return Err(bad("the task has no Engine.Type")),
        other => {
            return Err(bad(format!(
                "engine {other} is not supported: this node runs wasm tasks"
            )));
        }
    }
    let params = &task["engine"]["params"];
    match params["entrypoint"].as_str() {
        None | Some("_start") => {}
        Some(other) => {
            return Err(bad(format!(
                "Entrypoint {other}: only WASI commands (_start) run"
            )));
        }
    }
    let env_empty = |v: &Value| match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    };
    if !env_empty(&params["environmentvariables"]) || !env_empty(&task["env"]) {
        return Err(bad(
            "environment variables are not passed to jobs (no ambient authority)",
        ));
    }
    match task["network"]["type"].as_str() {
        None | Some("None") | Some("none") => {}
        Some(other) => return Err(bad(format!("Network {other}: jobs have no network"))),
    }
    match task["publisher"]["type"].as_str() {
        None | Some("local") | Some("noop") => {}
        Some(other) => {
            return Err(bad(format!(
                "Publisher {other} is not supported: results come back to the buyer (local)"
            )));
        }
    }
    if let Some(paths) = task["resultpaths"].as_array() {
        for p in paths {
            let path = p["path"].as_str().unwrap_or("");
            if path != "/outputs" && !path.starts_with("/outputs/") {
                return Err(bad(format!(
                    "ResultPath {path}: a job writes its results under /outputs"
                )));
            }
        }
    }
    // input sources: the entry module and the job's files
    let entry = params["entrymodule"]
        .as_str()
        .ok_or_else(|| bad("the wasm engine needs EntryModule"))?;
    let mut module = None;
    let mut files = Vec::new();
    for src in task["inputsources"].as_array().into_iter().flatten() {
        let target = src["target"].as_str().unwrap_or("");
        let p = &src["source"]["params"];
        let bytes = match src["source"]["type"].as_str().unwrap_or("") {
            "inline" => inline_bytes(p["url"].as_str().unwrap_or(""))?,
            "local" | "localDirectory" | "localdirectory" => {
                let path = p["sourcepath"]
                    .as_str()
                    .ok_or_else(|| bad("a local source without SourcePath"))?;
                std::fs::read(base.join(path))
                    .map_err(|e| bad(format!("local source {path}: {e}")))?
            }
            "urlDownload" | "urldownload" => {
                let url = p["url"]
                    .as_str()
                    .ok_or_else(|| bad("a urlDownload source without URL"))?;
                download(url).map_err(|e| bad(format!("downloading {url}: {e}")))?
            }
            other => {
                return Err(bad(format!(
                    "input source type {other:?} is not supported (inline, local, urlDownload)"
                )));
            }
        };
        let name = Path::new(target)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| bad(format!("input target {target:?} names no file")))?;
        if name == entry || target.trim_start_matches('/') == entry {
            module = Some(bytes);
        } else {
            files.push((name, bytes));
        }
    }
    let module = module.ok_or_else(|| {
        bad(format!(
            "EntryModule {entry} is not among the input sources' targets"
        ))
    })?;
    let args = params["parameters"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), String::from))
                .collect()
        })
        .unwrap_or_default();
    let memory_bytes = match &task["resources"]["memory"] {
        Value::Null => None,
        Value::String(s) => {
            Some(parse_size(s).ok_or_else(|| bad(format!("Resources.Memory {s:?}")))?)
        }
        Value::Number(n) => n.as_u64(),
        other => return Err(bad(format!("Resources.Memory {other}"))),
    };
    let wall_secs = task["timeouts"]["executiontimeout"]
        .as_u64()
        .filter(|t| *t > 0);
    Ok(WasmSpec {
        name: doc["name"].as_str().map(String::from),
        module,
        args,
        files,
        memory_bytes,
        wall_secs,
    })
}
