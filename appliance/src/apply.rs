//! `meshnode apply`: manifests (fleetmesh.org/v1alpha1) applied to a node through its
//! running daemon's control socket, or by the daemon itself from a watched directory
//! (`[manifests] watch`).
//!
//! Every document is validated against its kind's schema, and the settings they make
//! together ([`crate::reconcile::effective`]) are checked, before anything is written: one
//! bad manifest and nothing is applied, the answer naming it and why. Then what can change
//! live is applied to the running services (a model that does not load also stops it
//! here), each manifest is stored as `DIR/manifests/KIND/NAME.json` (owner-only), and the
//! answer lists, per manifest, what changed since the last apply (JSON pointers) and what
//! it does, and for the node the keys applied live and those waiting for a restart.
//!
//! - `MeshNode`: its settings (class, operator, relays, endpoints, facePort) are written
//!   into `meshnode.toml`'s `[node]` and `[face] listen` port, other keys kept; they take
//!   effect at the next start (the descriptor is signed from them then), which the answer
//!   says.
//! - `ComputeProvider`, `InferenceRouter`: reconciled ([`crate::reconcile`]); stored ones
//!   are read again at every start and `meshnode ctl reload`.
//! - `Peering`: validated and stored; the federation's link with the peer it names reads
//!   it before each round (`crate::federation`: enabled, direction, interval, filters).
//! - `GrantPolicy`: validated and stored; it takes effect when grants exist.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fleetmesh_schemas::constants::manifest;
use fleetmesh_schemas::{SchemaKey, SchemaSet};
use serde_json::{Value, json};

use crate::config::{self, Config};
use crate::reconcile::{Live, Notes};

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
pub(crate) fn changes(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
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

/// Applies `docs` to the node in `dir`, whose daemon runs `live`: all validated first,
/// then reconciled, then stored. The answer: `{"applied": [{kind, name, state:
/// created|changed|unchanged, changed, effect}], "reconciled": …}`.
///
/// # Errors
/// The first document that is not a valid manifest, settings that do not hold together,
/// a model that does not load (nothing is written or changed then); a file that cannot be
/// written.
pub fn apply(dir: &Path, docs: &[Value], live: &Live) -> Result<Value, String> {
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
    let _one = live.exclusive();
    let reconciled = live
        .reconcile(docs)
        .map_err(|e| format!("the manifests were not applied: {e}"))?;
    let applied = docs
        .iter()
        .map(|doc| apply_one(dir, doc, &reconciled.notes))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json!({"applied": applied, "reconciled": reconciled.to_json()}))
}

/// `answer` as the control socket sends it (an error as `{"error": {"code": "invalid",
/// …}}`), counted in `fleetmesh_manifest_applies_total{source, outcome}`.
pub fn counted(source: &'static str, answer: Result<Value, String>) -> Value {
    let outcome = if answer.is_ok() { "applied" } else { "refused" };
    metrics::counter!("fleetmesh_manifest_applies_total", "source" => source, "outcome" => outcome)
        .increment(1);
    answer.unwrap_or_else(|why| {
        tracing::warn!(source, %why, "manifests refused");
        json!({"error": {"code": "invalid", "message": why}})
    })
}

fn stored_path(dir: &Path, kind: &str, name: &str) -> PathBuf {
    dir.join(crate::node::MANIFESTS_DIR)
        .join(kind)
        .join(format!("{name}.json"))
}

fn apply_one(dir: &Path, doc: &Value, notes: &Notes) -> Result<Value, String> {
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
            dir.join(crate::node::MANIFESTS_DIR),
            path.parent().unwrap_or(dir).to_path_buf(),
        ] {
            std::fs::create_dir_all(&d).map_err(|e| format!("creating {}: {e}", d.display()))?;
            crate::node::set_private(&d).map_err(|e| format!("{e:#}"))?;
        }
        crate::node::replace_file(&path, format!("{doc:#}\n").as_bytes(), true)
            .map_err(|e| format!("{e:#}"))?;
    }
    let effect = match kind {
        manifest::MESH_NODE => reconcile_node(dir, doc)?,
        manifest::PEERING => {
            "stored; the QUIC link with this peer follows it from its next round".to_owned()
        }
        manifest::GRANT_POLICY => "stored; it takes effect when this node has grants".to_owned(),
        _ => "reconciled".to_owned(),
    };
    let me = format!("{kind}/{name}");
    let notes: Vec<&String> = notes
        .0
        .iter()
        .filter(|(m, _)| *m == me)
        .map(|(_, n)| n)
        .collect();
    Ok(
        json!({"kind": kind, "name": name, "state": state, "changed": changed, "effect": effect,
               "notes": notes}),
    )
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

/// Most files, and bytes per file, of a watched manifest directory.
const MAX_WATCHED_FILES: usize = 64;
const MAX_WATCHED_BYTES: u64 = 1 << 20;

/// A watched directory's manifest files, read: one digest over their names and texts, and
/// each file's path and text.
type Scanned = ([u8; 32], Vec<(PathBuf, String)>);

/// The manifest files of `folder` (`.yaml`, `.yml`, `.json`, sorted by name), read.
fn scan(folder: &Path) -> Result<Scanned, String> {
    use sha2::{Digest as _, Sha256};
    let entries =
        std::fs::read_dir(folder).map_err(|e| format!("reading {}: {e}", folder.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
                && p.is_file()
        })
        .collect();
    paths.sort();
    if paths.len() > MAX_WATCHED_FILES {
        return Err(format!(
            "{} holds {} manifest files; at most {MAX_WATCHED_FILES}",
            folder.display(),
            paths.len()
        ));
    }
    let mut digest = Sha256::new();
    let mut files = Vec::new();
    for p in paths {
        let mut text = String::new();
        std::fs::File::open(&p)
            .and_then(|f| {
                std::io::Read::read_to_string(&mut f.take(MAX_WATCHED_BYTES + 1), &mut text)
            })
            .map_err(|e| format!("reading {}: {e}", p.display()))?;
        if text.len() as u64 > MAX_WATCHED_BYTES {
            return Err(format!(
                "{} is over {MAX_WATCHED_BYTES} bytes, the most a manifest file holds",
                p.display()
            ));
        }
        digest.update(p.as_os_str().as_encoded_bytes());
        digest.update([0]);
        digest.update((text.len() as u64).to_le_bytes());
        digest.update(text.as_bytes());
        files.push((p, text));
    }
    Ok((digest.finalize().into(), files))
}

/// Applies the manifests of `folder` (`[manifests] dir`) now and whenever its files
/// change, looking every `every`, until the task is dropped. Each outcome is logged and
/// counted under `source="watch"`; a folder that cannot be read (or holds a file over the
/// bounds) is refused the same way, once per change of what went wrong.
pub async fn watch(
    node_dir: PathBuf,
    folder: PathBuf,
    every: std::time::Duration,
    live: Arc<Live>,
) {
    let mut last: Option<Result<[u8; 32], String>> = None;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let (f, d, l) = (folder.clone(), node_dir.clone(), live.clone());
        let seen = last.clone();
        let Ok(now) = tokio::task::spawn_blocking(move || {
            let (digest, files) = match scan(&f) {
                Ok(found) => found,
                Err(why) => {
                    // refused like a bad manifest, once per change of what is wrong
                    if seen.as_ref().is_none_or(|s| s.as_ref().err() != Some(&why)) {
                        counted("watch", Err(format!("[manifests] dir: {why}")));
                    }
                    return Err(why);
                }
            };
            if seen == Some(Ok(digest)) {
                return Ok(digest);
            }
            let mut docs = Vec::new();
            let mut read = Ok(());
            for (path, text) in &files {
                match crate::manifest::parse_documents(text, path) {
                    Ok(more) => docs.extend(more),
                    Err(e) => read = Err(format!("{e:#}")),
                }
            }
            let answer = match read {
                Err(why) => counted("watch", Err(why)),
                Ok(()) if docs.is_empty() => return Ok(digest),
                Ok(()) => counted("watch", apply(&d, &docs, &l)),
            };
            if answer.get("error").is_none() {
                tracing::info!(
                    folder = %f.display(),
                    applied = %answer["applied"],
                    reconciled = %answer["reconciled"],
                    "manifests applied"
                );
            }
            Ok(digest)
        })
        .await
        else {
            continue;
        };
        last = Some(now);
    }
}
