//! `meshnode up --demo`: what a fresh machine needs for every API to answer with no
//! download — the tiny model (generated into `DIR/models/tiny`), the prover's tiny test
//! circuit (`DIR/circuits/demo/`) and a WASI job with its job file (`DIR/demo/`) — and the
//! lines `meshnode up` prints after "listening" to say what to try next.
//!
//! Nothing here overwrites: files already in place are kept, so an operator's edits stay.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The demo circuit's name on the proof API.
pub const CIRCUIT: &str = "demo";
/// The tiny model's directory under the node directory; its model id is `tiny`.
const MODEL_DIR: &str = "models/tiny";

/// The files `--demo` writes: (folder under the node directory, name, bytes).
const FILES: [(&str, &str, &[u8]); 5] = [
    (
        "circuits/demo",
        "circuit.zkey",
        include_bytes!("../demo/circuit.zkey"),
    ),
    (
        "circuits/demo",
        "circuit.wasm",
        include_bytes!("../demo/circuit.wasm"),
    ),
    ("demo", "upper.wat", include_bytes!("../demo/upper.wat")),
    ("demo", "input.txt", include_bytes!("../demo/input.txt")),
    ("demo", "job.json", include_bytes!("../demo/job.json")),
];

/// Puts the demo's model, circuit and job into the node directory `dir` (what is already
/// there is kept); the model to serve.
pub fn prepare(dir: &Path) -> anyhow::Result<PathBuf> {
    for (folder, name, bytes) in FILES {
        let folder = dir.join(folder);
        let path = folder.join(name);
        if path.exists() {
            continue;
        }
        std::fs::create_dir_all(&folder)
            .with_context(|| format!("creating {}", folder.display()))?;
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    let model = dir.join(MODEL_DIR);
    if !model.join("config.json").exists() {
        fleetmesh_inference::tiny::make_tiny(&model, 0)?;
        tracing::info!(dir = %model.display(), "made the tiny demo model");
    }
    Ok(model)
}

/// What to try next, printed under the "listening" line: the demo's requests when `demo`,
/// else how to get there.
pub fn next_steps(addr: SocketAddr, dir: &Path, demo: bool) -> String {
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "meshnode".into());
    let url = format!("http://{addr}");
    let mut s = format!(
        "next, from another shell:\n  \
         curl -H 'Accept: application/nostr+json' {url}/    # the relay (NIP-11); Nostr clients: ws://{addr}/\n  \
         curl {url}/healthz\n"
    );
    if demo {
        s += &format!(
            "  curl {url}/v1/completions -H 'content-type: application/json' \\\n      \
             -d '{{\"model\": \"tiny\", \"prompt\": \"hello\", \"max_tokens\": 8}}'\n  \
             curl {url}/v1/proofs/prove -H 'content-type: application/json' \\\n      \
             -d '{{\"circuit\": \"{CIRCUIT}\", \"input\": {{\"a\": \"3\", \"b\": \"11\", \"w\": \"5\"}}}}'\n  \
             {exe} job submit {job} --node {url}\n",
            job = dir.join("demo/job.json").display(),
        );
    } else {
        s += &format!(
            "  {exe} up --demo    # also serves a tiny model, a demo circuit and a job to submit\n  \
             {exe} doctor      # what this machine offers\n"
        );
    }
    s
}
