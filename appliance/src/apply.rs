//! `meshnode apply`: manifests (fleetmesh.org/v1alpha1) applied to a node through its
//! running daemon's control socket.
//!
//! Every document is validated against its kind's schema before anything is written: one
//! bad manifest and nothing is applied, the answer naming it and why. Then each is stored
//! as `DIR/manifests/KIND/NAME.json` (owner-only) and reconciled without destroying
//! anything: the answer lists, per manifest, what changed since the last apply (JSON
//! pointers) and what it does now.
//!
//! - `MeshNode`: its settings (class, operator, relays, endpoints, facePort) are written
//!   into `meshnode.toml`'s `[node]` and `[face] listen` port, other keys kept; they take
//!   effect at the next start (the descriptor is signed from them then), which the answer
//!   says.
//! - `Peering`, `GrantPolicy`: validated and stored; they take effect when peering and
//!   grants exist.
//! - `ComputeProvider`, `InferenceRouter`: validated and stored; this build still takes
//!   jobs and inference from `meshnode.toml` (`[jobs]`, `[inference]`), and says so.

use std::path::{Path, PathBuf};

use fleetmesh_schemas::{SchemaKey, SchemaSet};
use serde_json::{Value, json};

use crate::config::{self, Config};

/// Where applied manifests are kept, under the node directory.
pub const MANIFESTS_DIR: &str = "manifests";
/// Most documents in one apply.
const MAX_DOCUMENTS: usize = 64;

/// A refusal: which document (its position and, when known, kind/name) and why.
fn refuse(i: usize, doc: &Value, why: impl std::fmt::Display) -> String {
    match (doc["kind"].as_str(), doc["metadata"]["name"].as_str()) {
        (Some(k), Some(n)) => format!("document {} ({k}/{n}): {why}", i + 1),
        _ => format!("document {}: {why}", i + 1),
    }
}

/// The JSON pointers at which `a` and `b` differ (leaves; a missing side counts).
fn changes(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let path = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                changes(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &path,
                    out,
                );
            }
        }
        _ if a != b => out.push(if at.is_empty() { "/".into() } else { at.into() }),
        _ => {}
    }
}

/// Applies `docs` to the node in `dir`: all validated first, then stored and reconciled.
/// The answer per manifest: `{kind, name, state: created|changed|unchanged, changed,
/// effect}`.
///
/// # Errors
/// The first document that is not a valid manifest (nothing is written then), or a file
/// that cannot be written.
pub fn apply(dir: &Path, docs: &[Value]) -> Result<Vec<Value>, String> {
    if docs.is_empty() {
        return Err("no manifests to apply".into());
    }
    if docs.len() > MAX_DOCUMENTS {
        return Err(format!(
            "{} documents; at most {MAX_DOCUMENTS} in one apply",
            docs.len()
        ));
    }
    let schemas = SchemaSet::embedded();
    let mut seen = std::collections::HashSet::new();
    for (i, doc) in docs.iter().enumerate() {
        let Some(kind) = doc["kind"].as_str() else {
            return Err(refuse(i, doc, "no kind"));
        };
        let key = SchemaKey::Manifest(kind.to_owned());
        if !schemas.contains(&key) {
            return Err(refuse(
                i,
                doc,
                format!("kind {kind:?} is not a fleetmesh.org/v1alpha1 manifest"),
            ));
        }
        schemas
            .validate(&key, doc)
            .map_err(|e| refuse(i, doc, format!("{e:#}")))?;
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        // the schema's DNS label already; a file name either way
        if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(refuse(i, doc, "metadata.name is not a DNS label"));
        }
        if !seen.insert((kind.to_owned(), name.to_owned())) {
            return Err(refuse(i, doc, "the same manifest twice in one apply"));
        }
    }
    // one apply at a time (the socket serves clients concurrently; they share files)
    static APPLYING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = APPLYING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    docs.iter().map(|doc| apply_one(dir, doc)).collect()
}

fn stored_path(dir: &Path, kind: &str, name: &str) -> PathBuf {
    dir.join(MANIFESTS_DIR)
        .join(kind)
        .join(format!("{name}.json"))
}

fn apply_one(dir: &Path, doc: &Value) -> Result<Value, String> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let path = stored_path(dir, kind, name);
    let before: Option<Value> = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let mut changed = Vec::new();
    if let Some(b) = &before {
        changes(b, doc, "", &mut changed);
    }
    let state = match (&before, changed.is_empty()) {
        (None, _) => "created",
        (Some(_), true) => "unchanged",
        (Some(_), false) => "changed",
    };
    if state != "unchanged" {
        for d in [
            dir.join(MANIFESTS_DIR),
            path.parent().unwrap_or(dir).to_path_buf(),
        ] {
            std::fs::create_dir_all(&d).map_err(|e| format!("creating {}: {e}", d.display()))?;
            crate::node::set_private(&d).map_err(|e| format!("{e:#}"))?;
        }
        crate::node::replace_file(&path, format!("{doc:#}\n").as_bytes(), true)
            .map_err(|e| format!("{e:#}"))?;
    }
    let effect = match kind {
        fleetmesh_schemas::constants::manifest::MESH_NODE => reconcile_node(dir, doc)?,
        "Peering" | "GrantPolicy" => {
            "stored; it takes effect when this node has peers and grants".to_owned()
        }
        other => format!(
            "stored; this build still takes {} from meshnode.toml, not from {other} manifests",
            if other == "ComputeProvider" {
                "jobs ([jobs])"
            } else {
                "inference ([inference])"
            }
        ),
    };
    Ok(json!({"kind": kind, "name": name, "state": state, "changed": changed, "effect": effect}))
}

/// Writes a MeshNode's settings into `meshnode.toml`, other keys kept; what it changed.
fn reconcile_node(dir: &Path, doc: &Value) -> Result<String, String> {
    let settings = crate::manifest::mesh_node_settings(doc).map_err(|e| format!("{e:#}"))?;
    let mut cfg = Config::load(dir).map_err(|e| format!("{e:#}"))?;
    let before = cfg.clone();
    cfg.node.class = settings.class;
    cfg.node.operator = settings.operator;
    cfg.node.relays = settings.relays;
    cfg.node.endpoints = settings.endpoints;
    cfg.face.listen.set_port(settings.face_port);
    let mut keys = Vec::new();
    if cfg.node != before.node {
        keys.push("[node]");
    }
    if cfg.face.listen != before.face.listen {
        keys.push("[face] listen");
    }
    if keys.is_empty() {
        return Ok("meshnode.toml already says this".into());
    }
    crate::node::replace_file(&dir.join(config::FILE), cfg.to_toml().as_bytes(), true)
        .map_err(|e| format!("{e:#}"))?;
    Ok(format!(
        "written to meshnode.toml ({}); restart the daemon for it to take effect (the \
         descriptor is signed from it at start-up)",
        keys.join(", ")
    ))
}
