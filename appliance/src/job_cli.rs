//! `meshnode job …`: a buyer's side of the market against a running node — submit a job
//! file, follow its state, fetch and decrypt its result, print its receipt.
//!
//! A job file (JSON) says what to run; paths are relative to the file:
//!
//! ```json
//! {"engine": "wasm", "mode": "delivery", "module": "upper.wat", "input": "in.txt",
//!  "args": [], "limits": {"fuel": 10000000}, "bid": {"amount": 1000, "unit": "msat"},
//!  "expires_in": 600, "name": "upper-1"}
//! ```
//!
//! The ask's `d` tag is `name` (default: `job-` and 16 hex digits of the file's SHA-256);
//! the job id is derived from the buyer's key and the file, so submitting one file twice
//! is one job.

use std::path::Path;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use fleetmesh_relay::{NodeKeys, UnsignedEvent, hkdf, nip44};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::Outcome;
use crate::cli::{JobCommand, JobNode};

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn client() -> anyhow::Result<reqwest::blocking::Client> {
    Ok(reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()?)
}

/// GETs `url`; the JSON body and the status.
fn get(url: &str) -> anyhow::Result<(u16, Value)> {
    let r = client()?
        .get(url)
        .header("accept", "application/json")
        .send()
        .with_context(|| format!("GET {url}"))?;
    let status = r.status().as_u16();
    let body: Value = r
        .json()
        .with_context(|| format!("GET {url}: the answer is not JSON"))?;
    Ok((status, body))
}

/// The buyer's keys: `--key-dir` itself, or its `keys/` (a node directory).
fn buyer_keys(to: &JobNode) -> anyhow::Result<NodeKeys> {
    let nested = to.key_dir.join(crate::node::KEYS_DIR);
    let dir = if nested.is_dir() {
        nested
    } else {
        to.key_dir.clone()
    };
    NodeKeys::load(&dir).with_context(|| format!("the buyer's keys in {}", dir.display()))
}

/// The node's (the executor's) public key, from its NIP-11 document.
fn node_key(to: &JobNode) -> anyhow::Result<String> {
    let info: Value = client()?
        .get(node_url(to, "/"))
        .header("accept", "application/nostr+json")
        .send()
        .with_context(|| format!("reaching {}", to.node))?
        .json()
        .context("the node's NIP-11 document")?;
    Ok(info["self"]
        .as_str()
        .context("the node's NIP-11 document has no `self` key")?
        .to_string())
}

fn node_url(to: &JobNode, path: &str) -> String {
    format!("{}{path}", to.node.trim_end_matches('/'))
}

/// Runs a `meshnode job` command.
pub fn run(c: JobCommand) -> anyhow::Result<Outcome> {
    match c {
        JobCommand::Submit { file, to } => submit(&file, &to),
        JobCommand::Status { id, to } => {
            let (code, v) = get(&node_url(&to, &format!("/v1/jobs/{id}")))?;
            println!("{v}");
            if code != 200 {
                return Ok(Outcome::Malformed);
            }
            Ok(match v["state"].as_str() {
                Some("verified") => Outcome::Ok,
                Some("failed" | "expired") => Outcome::Negative,
                _ => Outcome::Pending,
            })
        }
        JobCommand::Result { id, out, to } => result(&id, &out, &to),
        JobCommand::Receipt { id, to } => {
            let (code, v) = get(&node_url(&to, &format!("/v1/jobs/{id}/receipt")))?;
            println!("{v}");
            Ok(match code {
                200 => Outcome::Ok,
                409 => Outcome::Pending,
                _ => Outcome::Malformed,
            })
        }
    }
}

fn submit(file: &Path, to: &JobNode) -> anyhow::Result<Outcome> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let spec: Value =
        serde_json::from_slice(&bytes).with_context(|| format!("{}: not JSON", file.display()))?;
    let base = file.parent().unwrap_or(Path::new("."));
    let read = |key: &str| -> anyhow::Result<Option<Vec<u8>>> {
        match spec[key].as_str() {
            None => Ok(None),
            Some(p) => std::fs::read(base.join(p))
                .map(Some)
                .with_context(|| format!("{key}: reading {p}")),
        }
    };
    let engine = spec["engine"].as_str().unwrap_or("wasm");
    let mode = spec["mode"].as_str().unwrap_or("delivery");
    let module = read("module")?.context("the job file names no module")?;
    let input = read("input")?.unwrap_or_default();
    let keys = buyer_keys(to)?;
    let provider = node_key(to)?;
    let digest = Sha256::digest(&bytes);
    let name = spec["name"].as_str().map_or_else(
        || format!("job-{}", &hex::encode(digest)[..16]),
        String::from,
    );
    let secret = keys.nostr().secret_key();
    let job_id = hex::encode(hkdf::expand(
        &hkdf::extract(b"fleetmesh/job-id/v1", &secret.to_secret_bytes()),
        &digest,
        32,
    )?);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let expires = now + spec["expires_in"].as_u64().unwrap_or(600);
    let limits = spec["limits"].clone();
    let bid = if spec["bid"].is_null() {
        json!({"amount": 1, "unit": "msat"})
    } else {
        spec["bid"].clone()
    };
    let ask = keys.sign(UnsignedEvent {
        created_at: now,
        kind: crate::market::ask::KIND_ASK,
        tags: vec![
            vec!["d".into(), name],
            vec!["engine".into(), engine.into()],
            vec!["mode".into(), mode.into()],
            vec!["expiration".into(), expires.to_string()],
            vec!["p".into(), provider.clone()],
        ],
        content: json!({"engine": engine, "mode": mode, "limits": limits, "bid": bid}).to_string(),
    })?;
    let job = json!({
        "protocol": "compute/1.0",
        "type": "job",
        "job_id": job_id,
        "ask": ask.id_hex(),
        "engine": engine,
        "mode": mode,
        "input": {"inline": b64().encode(&input)},
        "limits": limits,
        "params": {"module": {"inline": b64().encode(&module)}, "args": spec["args"].clone()},
    });
    let key = nip44::conversation_key(&secret, &provider)?;
    let payload = nip44::encrypt(&key, job.to_string().as_bytes())?;
    let r = client()?
        .post(node_url(to, "/v1/jobs"))
        .json(&json!({"ask": ask.to_value(), "payload": payload}))
        .send()
        .with_context(|| format!("submitting to {}", to.node))?;
    let status = r.status().as_u16();
    let v: Value = r.json().context("the node's answer is not JSON")?;
    println!("{v}");
    Ok(if status == 202 {
        Outcome::Ok
    } else if status >= 500 {
        Outcome::Negative
    } else {
        Outcome::Malformed
    })
}

fn result(id: &str, out: &Path, to: &JobNode) -> anyhow::Result<Outcome> {
    let (code, v) = get(&node_url(to, &format!("/v1/jobs/{id}/result")))?;
    match code {
        200 => {}
        409 => {
            println!("{v}");
            return Ok(Outcome::Pending);
        }
        _ => {
            println!("{v}");
            return Ok(Outcome::Malformed);
        }
    }
    let keys = buyer_keys(to)?;
    let provider = node_key(to)?;
    let key = nip44::conversation_key(&keys.nostr().secret_key(), &provider)?;
    let plain = nip44::decrypt(&key, v["payload"].as_str().context("no payload")?)?;
    let msg: Value = serde_json::from_slice(&plain)?;
    let doc_bytes = b64().decode(msg["output"]["inline"].as_str().context("no output")?)?;
    if hex::encode(Sha256::digest(&doc_bytes)) != msg["output_digest"].as_str().unwrap_or_default()
    {
        bail!("the output does not match its digest");
    }
    let doc: Value = serde_json::from_slice(&doc_bytes)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let write = |name: &str, b64text: &str| -> anyhow::Result<()> {
        let safe = Path::new(name)
            .file_name()
            .context("an output file without a name")?;
        std::fs::write(out.join(safe), b64().decode(b64text)?)
            .with_context(|| format!("writing {}", out.join(safe).display()))
    };
    write("stdout", doc["stdout"].as_str().unwrap_or_default())?;
    write("stderr", doc["stderr"].as_str().unwrap_or_default())?;
    if let Some(files) = doc["files"].as_object() {
        for (name, data) in files {
            write(name, data.as_str().unwrap_or_default())?;
        }
    }
    println!(
        "{}",
        json!({
            "job": id,
            "status": doc["status"],
            "exit_code": doc["exit_code"],
            "output_digest": msg["output_digest"],
            "metered": msg["metered"],
            "verdict": msg["verdict"],
            "receipt": msg["receipt"],
            "out": out.display().to_string(),
        })
    );
    Ok(Outcome::Ok)
}
