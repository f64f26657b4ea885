//! Reconciliation: the settings a node runs with — `meshnode.toml` with the applied
//! ComputeProvider and InferenceRouter manifests on top — and what changing them does to a
//! running daemon.
//!
//! [`effective`] is the one place manifests turn into settings: at start-up (a stored
//! manifest that no longer validates stops the start, naming its file), on `meshnode
//! apply`, on `meshnode ctl reload` and from a watched manifest directory. [`Live`] holds
//! the running services; [`Live::reconcile`] computes the new settings, applies what can
//! change while the node runs — job limits, engines, modes and prices (`[jobs]` but
//! `workers`), the models served and their executors, the quorum and the default
//! verification (`[inference]` but `device` and `max_batch`) — and names every other
//! changed key as waiting for a restart. It is all or nothing: a setting that does not
//! validate or a model that does not load changes nothing, and the answer says why.
//!
//! How a ComputeProvider maps: `engines`, `modes`, `pricing` → `[jobs] engines`, `modes`,
//! `prices`; `limits.maxFuel`, `maxTokens`, `memory`, `wallSecs`, `maxInputBytes` →
//! `[jobs] max_fuel`, `max_tokens`, `max_memory_bytes`, `max_wall_secs`,
//! `max_input_bytes`; `concurrency.maxJobs` → `[jobs] workers`, `concurrency.perBuyer` →
//! `[jobs] per_buyer`; `publishAsks` → `[jobs] publish_asks`; the first of `backends` →
//! `[compute] backend`. An InferenceRouter's models with a `path` are served under their
//! `id`, beside `[inference] models`; those with a `remote` become
//! `[[inference.executors]]` serving that `id` (routed to, or in the quorum of a local
//! model of the same id). What this build does not act on yet (settlement,
//! grant policies, routes to peers, Kubernetes secrets, queue depth, …) is
//! stored and named in the answer as not used yet.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fleetmesh_schemas::constants::manifest;
use fleetmesh_schemas::{SchemaKey, SchemaSet};
use serde_json::{Value, json};

use crate::config::{Config, ModelEntry};
use crate::node::MANIFESTS_DIR;

/// What the settings say beside the settings: per manifest, what is not used yet.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Notes(pub Vec<(String, String)>);

impl Notes {
    fn add(&mut self, doc: &Value, note: impl Into<String>) {
        self.0.push((
            format!(
                "{}/{}",
                doc["kind"].as_str().unwrap_or("?"),
                doc["metadata"]["name"].as_str().unwrap_or("?")
            ),
            note.into(),
        ));
    }
}

/// The manifests of `kind` stored in the node directory, checked again against their
/// schema (a file damaged or edited by hand is named, never skipped).
///
/// # Errors
/// A file that cannot be read, is not JSON or does not validate.
pub fn stored(dir: &Path, kind: &str) -> Result<Vec<Value>, String> {
    let folder = dir.join(MANIFESTS_DIR).join(kind);
    let Ok(entries) = std::fs::read_dir(&folder) else {
        return Ok(Vec::new());
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let schemas = SchemaSet::embedded();
    paths
        .iter()
        .map(|p| {
            let bytes = std::fs::read(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
            let doc: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not JSON: {e}", p.display()))?;
            schemas
                .validate(&SchemaKey::Manifest(kind.to_owned()), &doc)
                .map_err(|e| format!("{}: {e:#}", p.display()))?;
            Ok(doc)
        })
        .collect()
}

/// The manifests of `kind` in effect: the stored ones, those in `pending` replacing any of
/// the same name.
fn in_effect(dir: &Path, kind: &str, pending: &[Value]) -> Result<Vec<Value>, String> {
    let name = |d: &Value| {
        d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let mut docs: Vec<Value> = stored(dir, kind)?
        .into_iter()
        .filter(|s| {
            !pending
                .iter()
                .any(|p| p["kind"] == kind && name(p) == name(s))
        })
        .collect();
    docs.extend(pending.iter().filter(|p| p["kind"] == kind).cloned());
    Ok(docs)
}

/// The settings the node in `dir` runs with: `file` (its `meshnode.toml`) with the stored
/// manifests and then `pending` on top, checked as a whole; and what is not used yet.
///
/// # Errors
/// A stored manifest that does not validate, two ComputeProviders, an InferenceRouter
/// that cannot be told from another, a value out of its range.
pub fn effective(dir: &Path, file: &Config, pending: &[Value]) -> Result<(Config, Notes), String> {
    let mut cfg = file.clone();
    let mut notes = Notes::default();
    let providers = in_effect(dir, manifest::COMPUTE_PROVIDER, pending)?;
    let routers = in_effect(dir, manifest::INFERENCE_ROUTER, pending)?;
    let names = |docs: &[Value]| -> String {
        docs.iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap_or("?").to_owned())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if providers.len() > 1 {
        return Err(format!(
            "ComputeProvider manifests {}: a node sells under one; remove the others from \
             {}/{MANIFESTS_DIR}/ComputeProvider and run `meshnode ctl reload`",
            names(&providers),
            dir.display()
        ));
    }
    let wanted = providers
        .first()
        .and_then(|p| p["spec"]["inferenceRouterRef"].as_str());
    let router = match (wanted, routers.len()) {
        (_, 0) => None,
        (Some(w), _) => Some(
            routers
                .iter()
                .find(|r| r["metadata"]["name"] == w)
                .ok_or_else(|| {
                    format!(
                        "the ComputeProvider names InferenceRouter {w:?}; there are {}",
                        names(&routers)
                    )
                })?,
        ),
        (None, 1) => routers.first(),
        (None, _) => {
            return Err(format!(
                "InferenceRouter manifests {}: name the one to serve in the \
                 ComputeProvider's spec.inferenceRouterRef",
                names(&routers)
            ));
        }
    };
    for r in &routers {
        if router.is_some_and(|chosen| !std::ptr::eq(chosen, r)) {
            notes.add(
                r,
                "stored; not the ComputeProvider's inferenceRouterRef, not served",
            );
        }
    }
    if let Some(p) = providers.first() {
        provider(p, &mut cfg, &mut notes)?;
    }
    if let Some(r) = router {
        inference_router(r, &mut cfg, &mut notes);
    }
    cfg.check()
        .map_err(|e| format!("with the manifests applied: {e}"))?;
    Ok((cfg, notes))
}

/// Bytes in a Kubernetes quantity (`512Mi`, `4Gi`, `2G`, `1.5Gi`).
fn quantity_bytes(q: &str) -> Option<u64> {
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let factor: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        _ => return None,
    };
    let bytes = number.parse::<f64>().ok()? * factor;
    (bytes.is_finite() && bytes < u64::MAX as f64).then(|| bytes.round() as u64)
}

/// The pointers of `doc` that are present and that this build does not act on.
fn unused(doc: &Value, pointers: &[&str]) -> Vec<String> {
    pointers
        .iter()
        .filter(|p| doc.pointer(p).is_some())
        .map(|p| (*p).to_owned())
        .collect()
}

/// `v` as a `T`, or an error naming the ComputeProvider's `what`.
fn parse<T: serde::de::DeserializeOwned>(what: &str, v: &Value) -> Result<T, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("ComputeProvider {what}: {e}"))
}

fn provider(doc: &Value, cfg: &mut Config, notes: &mut Notes) -> Result<(), String> {
    let spec = &doc["spec"];
    let j = &mut cfg.jobs;
    j.engines = parse("engines", &spec["engines"])?;
    j.modes = parse("modes", &spec["modes"])?;
    if !spec["pricing"].is_null() {
        j.prices = parse("pricing", &spec["pricing"])?;
    }
    let limits = &spec["limits"];
    let set = |field: &mut u64, v: &Value| {
        if let Some(n) = v.as_u64() {
            *field = n;
        }
    };
    set(&mut j.max_fuel, &limits["maxFuel"]);
    set(&mut j.max_tokens, &limits["maxTokens"]);
    set(&mut j.max_wall_secs, &limits["wallSecs"]);
    set(&mut j.max_input_bytes, &limits["maxInputBytes"]);
    if let Some(q) = limits["memory"].as_str() {
        j.max_memory_bytes = quantity_bytes(q)
            .ok_or_else(|| format!("ComputeProvider spec.limits.memory {q:?}: not a quantity"))?;
    }
    if let Some(n) = spec["concurrency"]["maxJobs"].as_u64() {
        j.workers = usize::try_from(n).unwrap_or(usize::MAX);
    }
    set(&mut j.per_buyer, &spec["concurrency"]["perBuyer"]);
    if let Some(b) = spec["publishAsks"].as_bool() {
        j.publish_asks = b;
    }
    if let Some(first) = spec["backends"][0].as_str() {
        cfg.compute.backend = first
            .parse()
            .map_err(|e| format!("ComputeProvider spec.backends: {e}"))?;
        if spec["backends"].as_array().is_some_and(|b| b.len() > 1) {
            notes.add(
                doc,
                format!("[compute] backend is the first of spec.backends, {first}; this build does not fall back along the list"),
            );
        }
    }
    let idle = unused(
        doc,
        &[
            "/spec/concurrency/queueDepth",
            "/spec/concurrency/proofBatch",
            "/spec/settlement",
            "/spec/grantPolicyRefs",
        ],
    );
    if !idle.is_empty() {
        notes.add(
            doc,
            format!("not used by this build yet: {}", idle.join(", ")),
        );
    }
    Ok(())
}

fn inference_router(doc: &Value, cfg: &mut Config, notes: &mut Notes) {
    let mut idle = Vec::new();
    for (i, m) in doc["spec"]["models"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let id = m["id"].as_str().unwrap_or_default().to_owned();
        let base_model_digest = m["baseModelDigest"].as_str().map(str::to_owned);
        match (m["path"].as_str(), &m["remote"]) {
            (Some(path), _) => cfg.inference.models.push(ModelEntry::Named {
                id,
                path: PathBuf::from(path),
                base_model_digest,
            }),
            // a remote server: the model's executor (routed, or in the quorum of a local
            // model of the same id)
            (None, r) => {
                let kind = match r["kind"].as_str() {
                    Some("ollama") => crate::config::ExecutorKind::Ollama,
                    _ => crate::config::ExecutorKind::Openai,
                };
                cfg.inference
                    .executors
                    .push(crate::config::ExecutorSection {
                        name: id.clone(),
                        url: r["url"].as_str().unwrap_or_default().to_owned(),
                        model: r["model"].as_str().map(str::to_owned),
                        serves: id,
                        kind,
                        base_model_digest,
                        ..crate::config::ExecutorSection::default()
                    });
                if !r["apiKeySecretRef"].is_null() {
                    idle.push(format!("/spec/models/{i}/remote/apiKeySecretRef"));
                }
            }
        }
        for key in ["tokenizer", "contextLength", "modes"] {
            if !m[key].is_null() {
                idle.push(format!("/spec/models/{i}/{key}"));
            }
        }
    }
    let peers = doc["spec"]["routes"]
        .as_object()
        .into_iter()
        .flatten()
        .any(|(_, r)| {
            r["executors"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e != "local")
        });
    if peers {
        notes.add(doc, "routes to peers take effect when this node has peers");
    }
    idle.extend(unused(doc, &["/spec/timeouts", "/spec/defaultModel"]));
    if !idle.is_empty() {
        notes.add(
            doc,
            format!("not used by this build yet: {}", idle.join(", ")),
        );
    }
}

/// `[section] key` for a JSON pointer into the configuration (`/jobs/max_fuel`, or
/// `/inference/models/0/path` → `[inference] models`).
fn key_of(pointer: &str) -> String {
    let mut parts = pointer.trim_start_matches('/').split('/');
    match (parts.next(), parts.next()) {
        (Some(section), Some(key)) => format!("[{section}] {key}"),
        (Some(section), None) => format!("[{section}]"),
        _ => pointer.to_owned(),
    }
}

/// Whether a changed key applies while the node runs.
fn is_live(key: &str) -> bool {
    match key.split_once(' ') {
        Some(("[jobs]", k)) => k != "workers",
        Some(("[inference]", k)) => k != "device" && k != "max_batch",
        _ => false,
    }
}

/// The keys at which two configurations differ, each once.
fn changed_keys(a: &Config, b: &Config) -> Vec<String> {
    let (a, b) = (
        serde_json::to_value(a).unwrap_or_default(),
        serde_json::to_value(b).unwrap_or_default(),
    );
    let mut pointers = Vec::new();
    crate::apply::changes(&a, &b, "", &mut pointers);
    let mut keys: Vec<String> = pointers.iter().map(|p| key_of(p)).collect();
    keys.dedup();
    keys
}

/// What a reconciliation did.
#[derive(Debug, Default)]
pub struct Reconciled {
    /// Keys applied to the running services now.
    pub live: Vec<String>,
    /// What changed in them, one line each (models served, …).
    pub said: Vec<String>,
    /// Keys that differ from what the daemon started with and wait for a restart.
    pub restart: Vec<String>,
    /// Per manifest, what is not used yet.
    pub notes: Notes,
}

impl Reconciled {
    /// As the control socket answers it.
    pub fn to_json(&self) -> Value {
        json!({
            "live": self.live,
            "said": self.said,
            "restart": self.restart,
            "notes": self.notes.0.iter().map(|(m, n)| json!({"manifest": m, "note": n})).collect::<Vec<_>>(),
        })
    }
}

/// The running services a reconciliation acts on.
pub struct Live {
    dir: PathBuf,
    /// `meshnode run --model` paths, served beside the configured ones.
    extra_models: Vec<PathBuf>,
    /// The settings the daemon started with.
    started: Config,
    /// The settings in effect now.
    current: Mutex<Config>,
    jobs: Arc<fleetmesh_market::service::JobService>,
    inference: Arc<crate::http::inference::InferenceService>,
    /// The NIP-11 document served; its `fleetmesh.jobs` follows `[jobs]`.
    nip11: Arc<std::sync::RwLock<String>>,
    /// Held through a whole apply or reload ([`Live::exclusive`]).
    applying: Mutex<()>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// The services [`Live`] acts on.
pub struct Services {
    /// The job service.
    pub jobs: Arc<fleetmesh_market::service::JobService>,
    /// The inference API.
    pub inference: Arc<crate::http::inference::InferenceService>,
    /// The NIP-11 document served.
    pub nip11: Arc<std::sync::RwLock<String>>,
}

impl Live {
    /// The daemon of the node in `dir`, started with `started` (its effective settings).
    pub fn new(dir: &Path, started: &Config, extra_models: &[PathBuf], s: Services) -> Live {
        Live {
            dir: dir.to_path_buf(),
            extra_models: extra_models.to_vec(),
            started: started.clone(),
            current: Mutex::new(started.clone()),
            jobs: s.jobs,
            inference: s.inference,
            nip11: s.nip11,
            applying: Mutex::new(()),
        }
    }

    /// One apply or reload at a time: the socket serves clients concurrently and the
    /// watcher runs beside them, and each reads the stored manifests, reconciles, then
    /// writes them. Hold this through all of it.
    pub fn exclusive(&self) -> std::sync::MutexGuard<'_, ()> {
        self.applying
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `meshnode ctl reload`: [`Live::reconcile`] of what is on disk, exclusively.
    ///
    /// # Errors
    /// As [`Live::reconcile`].
    pub fn reload(&self) -> Result<Reconciled, String> {
        let _one = self.exclusive();
        self.reconcile(&[])
    }

    /// The inference API.
    pub fn inference(&self) -> Arc<crate::http::inference::InferenceService> {
        self.inference.clone()
    }

    /// The NIP-11 document served, as it is now.
    pub fn nip11(&self) -> Arc<std::sync::RwLock<String>> {
        self.nip11.clone()
    }

    /// The job service.
    pub fn jobs(&self) -> Arc<fleetmesh_market::service::JobService> {
        self.jobs.clone()
    }

    /// The settings in effect now.
    pub fn current(&self) -> Config {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Reads `meshnode.toml` and the stored manifests again, `pending` on top, and applies
    /// what changed. Call off the async runtime (a model may load), holding
    /// [`Live::exclusive`].
    ///
    /// # Errors
    /// As [`effective`], or a model that does not load: then nothing has changed.
    pub fn reconcile(&self, pending: &[Value]) -> Result<Reconciled, String> {
        let file = Config::load(&self.dir).map_err(|e| format!("{e:#}"))?;
        let (wanted, notes) = effective(&self.dir, &file, pending)?;
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let restart: Vec<String> = changed_keys(&self.started, &wanted)
            .into_iter()
            .filter(|k| !is_live(k))
            .collect();
        // what can change live, the rest as the daemon started
        let mut next = self.started.clone();
        next.jobs = wanted.jobs.clone();
        next.jobs.workers = self.started.jobs.workers;
        next.inference = wanted.inference.clone();
        next.inference
            .device
            .clone_from(&self.started.inference.device);
        next.inference.max_batch = self.started.inference.max_batch;
        let live: Vec<String> = changed_keys(&current, &next)
            .into_iter()
            .filter(|k| is_live(k))
            .collect();
        let mut said = Vec::new();
        if next.inference != current.inference {
            let mut resolved = next.inference.clone();
            resolved.models = resolved.models_in(&self.dir, &self.extra_models);
            said = self
                .inference
                .reload(&resolved)
                .map_err(|e| format!("[inference]: {e:#}"))?;
        }
        if next.jobs != current.jobs {
            self.jobs.set_limits(next.jobs.clone());
            let mut held = self
                .nip11
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Ok(mut doc) = serde_json::from_str::<Value>(&held) {
                doc["fleetmesh"]["jobs"] = json!(next.jobs);
                *held = doc.to_string();
            }
        }
        *current = next;
        Ok(Reconciled {
            live,
            said,
            restart,
            notes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{is_live, key_of, quantity_bytes};

    #[test]
    fn quantities_are_kubernetes_quantities() {
        assert_eq!(quantity_bytes("512Mi"), Some(512 << 20));
        assert_eq!(quantity_bytes("4Gi"), Some(4 << 30));
        assert_eq!(quantity_bytes("2G"), Some(2_000_000_000));
        assert_eq!(quantity_bytes("1.5Ki"), Some(1536));
        assert_eq!(quantity_bytes("100"), Some(100));
        for bad in ["", "Gi", "4 GB", "4gb", "1e3", "99999999999999999999999P"] {
            assert_eq!(quantity_bytes(bad), None, "{bad}");
        }
    }

    #[test]
    fn keys_are_live_or_wait_for_a_restart() {
        assert_eq!(key_of("/jobs/max_fuel"), "[jobs] max_fuel");
        assert_eq!(key_of("/inference/models/0/path"), "[inference] models");
        for live in ["[jobs] max_fuel", "[jobs] prices", "[inference] models"] {
            assert!(is_live(live), "{live}");
        }
        for restart in [
            "[jobs] workers",
            "[inference] device",
            "[face] listen",
            "[compute] backend",
        ] {
            assert!(!is_live(restart), "{restart}");
        }
    }
}
