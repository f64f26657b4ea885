//! The set of served models: loaded at start-up from `[inference]` and replaced whole while
//! the node runs ([`InferenceService::reload`], from `meshnode ctl reload`, `meshnode
//! apply` of an InferenceRouter, or a watched manifest directory).
//!
//! A reload builds the new set beside the old one — a model whose path, device and batch
//! size are unchanged keeps its loaded weights, its batcher and its counters; only added
//! models are read from disk — and swaps it in only when every model loaded and every
//! executor was built: a bad entry changes nothing. Executors of an id no local model
//! has make a routed model ([`super::routed`]). Requests hold the model they were
//! admitted for, so a model that is no longer served finishes what it is generating.

use super::*;

/// One served model.
pub(super) struct Served {
    pub(super) id: String,
    /// The weights it was loaded from.
    path: PathBuf,
    pub(super) batcher: Arc<Batcher>,
    pub(super) tokenizer: Arc<TextTokenizer>,
    pub(super) template: Option<ChatTemplate>,
    pub(super) digest: [u8; 32],
    /// The model it is a build of (`base_model_digest`, else `digest`).
    pub(super) base_digest: [u8; 32],
    /// `fleetmesh-candle/<device>`.
    pub(super) engine: String,
    pub(super) eos: Vec<u32>,
    pub(super) local: LocalExecutor,
    pub(super) remotes: Vec<RemoteExecutor>,
    /// The `[[inference.executors]]` the remotes were built from.
    executors: Vec<crate::config::ExecutorSection>,
    /// The vocabulary's bytes, built on the first request with a schema.
    vocab: OnceLock<Arc<TokenVocab>>,
    /// Requests admitted for this model (generating or waiting): `[inference] max_queue`.
    pub(super) queue: Arc<tokio::sync::Semaphore>,
    /// `max_queue`, to tell how many are in flight.
    pub(super) queue_size: usize,
    /// Tokens generated for this model's requests on the local runtime, ever.
    pub(super) tokens: Arc<std::sync::atomic::AtomicU64>,
}

impl Served {
    /// Why a remote whose health check found `h` serves another model than this one (it
    /// states another base digest: the quorum refuses its answers as `wrong-model`).
    pub(super) fn other_model(&self, h: &fleetmesh_inference::remote::Health) -> Option<String> {
        let b = h.base_digest.filter(|b| *b != self.base_digest)?;
        Some(format!(
            "serves another model: base_model_digest {}, this node's {} is {}",
            hex::encode(b),
            self.id,
            hex::encode(self.base_digest)
        ))
    }

    pub(super) fn vocab(&self) -> Arc<TokenVocab> {
        self.vocab
            .get_or_init(|| Arc::new(TokenVocab::new(&self.tokenizer.token_bytes())))
            .clone()
    }
}

/// One generation of the served set.
pub(super) struct Loaded {
    pub(super) models: Vec<Arc<Served>>,
    /// Models served by remote executors only.
    pub(super) routed: Vec<Arc<super::routed::Routed>>,
    pub(super) quorum: QuorumConfig,
    pub(super) verification: Verification,
    /// What it was built from (paths resolved).
    source: InferenceSection,
}

impl Loaded {
    /// The model served as `id`.
    pub(super) fn model(&self, id: &str) -> Option<Arc<Served>> {
        self.models.iter().find(|m| m.id == id).cloned()
    }

    /// The routed model `id`.
    pub(super) fn routed(&self, id: &str) -> Option<Arc<super::routed::Routed>> {
        self.routed.iter().find(|r| r.id == id).cloned()
    }
}

/// The loaded models, their executors and the quorum's settings.
pub struct InferenceService {
    loaded: std::sync::RwLock<Arc<Loaded>>,
    /// The runtime it was loaded on, whose HTTP clients routed models use: market jobs
    /// (on worker threads) forward through it.
    pub(super) runtime: Option<tokio::runtime::Handle>,
}

impl InferenceService {
    /// Loads every model of `cfg` (directories or GGUF files, paths already resolved),
    /// each served under its id or its directory or file name, with its remote executors.
    ///
    /// # Errors
    /// A model that does not load, two with the same name, an executor for a model that is
    /// not served or with a bad URL or digest.
    pub fn load(cfg: &InferenceSection) -> anyhow::Result<Arc<InferenceService>> {
        let loaded = build(cfg, None)?;
        check_remotes(&loaded.models);
        check_routes(loaded.routed.clone());
        Ok(Arc::new(InferenceService {
            loaded: std::sync::RwLock::new(Arc::new(loaded)),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }))
    }

    /// The set served now.
    pub(super) fn now(&self) -> Arc<Loaded> {
        self.loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The models served now, as the node's terms list them (name and file digest): the
    /// local ones, and each routed model whose executors all pin one `model_digest` (a
    /// buyer is told what runs; one that is not pinned is not sold to the market).
    pub fn catalog(&self) -> Vec<fleetmesh_proto::provider::ModelTerm> {
        let now = self.now();
        let local = now
            .models
            .iter()
            .map(|m| fleetmesh_proto::provider::ModelTerm {
                id: m.id.clone(),
                digest: hex::encode(m.digest),
            });
        let routed = now.routed.iter().filter_map(|r| {
            let pinned: Vec<String> = r
                .entries()
                .iter()
                .map(|e| e.model_digest.as_deref().map(str::to_ascii_lowercase))
                .collect::<Option<_>>()?;
            let first = pinned.first()?;
            pinned
                .iter()
                .all(|d| d == first)
                .then(|| fleetmesh_proto::provider::ModelTerm {
                    id: r.id.clone(),
                    digest: first.clone(),
                })
        });
        local.chain(routed).collect()
    }

    /// Serves `cfg` from now on: added models are loaded, removed ones are no longer
    /// admitted (their requests in flight finish), the others keep their weights. Call
    /// off the async runtime (it may read weights from disk). What changed, one line each.
    ///
    /// # Errors
    /// As [`InferenceService::load`]; then nothing has changed.
    pub fn reload(&self, cfg: &InferenceSection) -> anyhow::Result<Vec<String>> {
        let before = self.now();
        if before.source == *cfg {
            return Ok(Vec::new());
        }
        let after = build(cfg, Some(&before))?;
        let ids = |l: &Loaded| -> Vec<String> { l.models.iter().map(|m| m.id.clone()).collect() };
        let (old, new) = (ids(&before), ids(&after));
        let mut said = Vec::new();
        for id in new.iter().filter(|i| !old.contains(i)) {
            said.push(format!("model {id} is served"));
        }
        for r in &after.routed {
            match before.routed(&r.id) {
                None => said.push(format!("model {} is routed to its executors", r.id)),
                Some(b) if !Arc::ptr_eq(&b, r) => {
                    said.push(format!("model {}: its executors changed", r.id));
                }
                Some(_) => {}
            }
        }
        for b in &before.routed {
            if after.routed(&b.id).is_none() {
                said.push(format!("model {} is no longer routed", b.id));
            }
        }
        for id in old.iter().filter(|i| !new.contains(i)) {
            said.push(format!("model {id} is no longer served"));
        }
        for m in &after.models {
            if let Some(b) = before.model(&m.id)
                && !Arc::ptr_eq(&b, m)
            {
                said.push(if Arc::ptr_eq(&b.batcher, &m.batcher) {
                    format!("model {}: its executors or queue changed", m.id)
                } else {
                    format!("model {} was loaded again", m.id)
                });
            }
        }
        if before.quorum != after.quorum {
            said.push("the quorum's thresholds changed".into());
        }
        if before.verification != after.verification {
            said.push(format!(
                "the default verification is {}",
                after.verification.as_str()
            ));
        }
        let fresh: Vec<Arc<Served>> = after
            .models
            .iter()
            .filter(|m| before.model(&m.id).is_none_or(|b| !Arc::ptr_eq(&b, m)))
            .cloned()
            .collect();
        check_remotes(&fresh);
        let routed: Vec<_> = after
            .routed
            .iter()
            .filter(|r| before.routed(&r.id).is_none_or(|b| !Arc::ptr_eq(&b, r)))
            .cloned()
            .collect();
        check_routes(routed);
        *self
            .loaded
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(after);
        tracing::info!(changes = ?said, "served models replaced");
        Ok(said)
    }
}

/// Builds the set `cfg` names, taking what it can from `before`.
fn build(cfg: &InferenceSection, before: Option<&Loaded>) -> anyhow::Result<Loaded> {
    let mut models: Vec<Arc<Served>> = Vec::new();
    for entry in &cfg.models {
        let p = entry.path();
        let id = entry
            .id()
            .ok_or_else(|| anyhow::anyhow!("model {}: no name", p.display()))?;
        if models.iter().any(|m| m.id == id) {
            anyhow::bail!("two models are named {id:?}; each is served under its own name");
        }
        let executors: Vec<_> = cfg
            .executors
            .iter()
            .filter(|e| e.serves == id)
            .cloned()
            .collect();
        let base = entry
            .base_model_digest()
            .map(|h| crate::models::digest_hex(h, &format!("model {id:?}: base_model_digest")))
            .transpose()?;
        // the weights, batcher and counters of the same model loaded the same way
        let kept = before.and_then(|b| {
            let m = b.model(&id)?;
            (m.path == p && b.source.device == cfg.device && b.source.max_batch == cfg.max_batch)
                .then_some(m)
        });
        if let Some(m) = &kept
            && m.executors == executors
            && m.queue_size == cfg.max_queue
            && m.base_digest == base.unwrap_or(m.digest)
        {
            models.push(m.clone());
            continue;
        }
        // Ollama executors read and write text: they get the model's vocabulary
        let remotes = |tokenizer: &TextTokenizer| {
            executors
                .iter()
                .map(|e| {
                    let r = remote(e)?;
                    Ok(match e.kind {
                        crate::config::ExecutorKind::Ollama => {
                            r.with_token_bytes(tokenizer.token_bytes())
                        }
                        crate::config::ExecutorKind::Openai => r,
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()
        };
        let queue = Arc::new(tokio::sync::Semaphore::new(cfg.max_queue));
        let served = match kept {
            // the same weights, other executors or another queue size
            Some(m) => Served {
                id,
                path: m.path.clone(),
                batcher: m.batcher.clone(),
                tokenizer: m.tokenizer.clone(),
                template: m.template.clone(),
                digest: m.digest,
                base_digest: base.unwrap_or(m.digest),
                engine: m.engine.clone(),
                eos: m.eos.clone(),
                local: m.local.clone().with_base_digest(base.unwrap_or(m.digest)),
                remotes: remotes(&m.tokenizer)?,
                executors,
                vocab: m.vocab.clone(),
                queue,
                queue_size: cfg.max_queue,
                tokens: m.tokens.clone(),
            },
            None => {
                let (model, tokenizer, digest) = crate::models::load(p, &cfg.device)?;
                let template = ChatTemplate::load_beside(p)?;
                tracing::info!(model = %id, digest = %hex::encode(digest), dtype = model.dtype(), weight_bytes = model.weight_bytes(), chat = template.is_some(), "serving model");
                let batcher = Arc::new(Batcher::new(Arc::new(model), digest, cfg.max_batch));
                Served {
                    local: LocalExecutor::new(format!("local:{id}"), batcher.clone())
                        .with_base_digest(base.unwrap_or(digest)),
                    base_digest: base.unwrap_or(digest),
                    engine: fleetmesh_inference::model::engine_name(batcher.model().device()),
                    eos: batcher.model().config().eos_token_id.clone(),
                    id,
                    path: p.to_path_buf(),
                    batcher,
                    remotes: remotes(&tokenizer)?,
                    tokenizer: Arc::new(tokenizer),
                    template,
                    digest,
                    executors,
                    vocab: OnceLock::new(),
                    queue,
                    queue_size: cfg.max_queue,
                    tokens: Arc::default(),
                }
            }
        };
        models.push(Arc::new(served));
    }
    // executors of ids no local model has: routed models, in the order first named
    let mut routed: Vec<Arc<super::routed::Routed>> = Vec::new();
    for e in &cfg.executors {
        if models.iter().any(|m| m.id == e.serves) || routed.iter().any(|r| r.id == e.serves) {
            continue;
        }
        let entries: Vec<_> = cfg
            .executors
            .iter()
            .filter(|x| x.serves == e.serves)
            .cloned()
            .collect();
        let kept = before.and_then(|b| b.routed(&e.serves)).filter(|r| {
            r.entries().into_iter().eq(entries.iter()) && r.queue_size == cfg.max_queue
        });
        routed.push(match kept {
            Some(r) => r,
            None => Arc::new(super::routed::Routed::new(
                e.serves.clone(),
                entries,
                cfg.max_queue,
            )?),
        });
    }
    Ok(Loaded {
        models,
        routed,
        quorum: cfg.quorum.to_config(),
        verification: cfg.verification,
        source: cfg.clone(),
    })
}

/// A remote executor from its `[[inference.executors]]` entry.
pub(super) fn remote(e: &crate::config::ExecutorSection) -> anyhow::Result<RemoteExecutor> {
    let what = |key: &str| format!("[[inference.executors]] {:?}: {key}", e.name);
    let pin = |h: &Option<String>, key: &str| {
        h.as_deref()
            .map(|h| crate::models::digest_hex(h, &what(key)))
            .transpose()
    };
    let model_digest = pin(&e.model_digest, "model_digest")?;
    let base_digest = pin(&e.base_model_digest, "base_model_digest")?;
    let mut rc = RemoteConfig::new(
        e.name.clone(),
        e.url.clone(),
        e.model.clone().unwrap_or_else(|| e.serves.clone()),
    );
    rc.kind = e.kind.remote_kind();
    rc.engine = e.engine.clone();
    rc.dtype = e.dtype.clone();
    rc.model_digest = model_digest;
    rc.base_digest = base_digest;
    rc.api_key = e.api_key.clone();
    rc.timeout = std::time::Duration::from_secs(e.timeout_s.max(1));
    rc.connect_timeout = std::time::Duration::from_secs(e.connect_timeout_s.max(1));
    // reqwest's blocking client refuses to be built on an async runtime's thread
    std::thread::scope(|t| t.spawn(|| RemoteExecutor::new(rc)).join())
        .map_err(|_| anyhow::anyhow!("building the HTTP client panicked"))?
        .map_err(Into::into)
}

/// A first health check of the remote executors of `models`, logged on a thread of its
/// own; requests do not wait for it.
fn check_remotes(models: &[Arc<Served>]) {
    let models = models.to_vec();
    std::thread::spawn(move || {
        for (m, r) in models
            .iter()
            .flat_map(|m| m.remotes.iter().map(move |r| (m, r)))
        {
            match r.health() {
                Ok(h) => match m.other_model(&h) {
                    Some(why) => {
                        tracing::warn!(executor = r.name(), model = %m.id, reason = %why, "remote executor serves another model: the quorum will refuse it")
                    }
                    None => {
                        tracing::info!(executor = r.name(), model = %m.id, latency_ms = h.latency.as_millis() as u64, "remote executor is up")
                    }
                },
                Err(e) => {
                    tracing::warn!(executor = r.name(), model = %m.id, error = %e, "remote executor is not reachable")
                }
            }
        }
    });
}

/// A first health check of routed models' executors, on a thread of its own: counted in
/// their stats (a failure sets one aside) and logged.
fn check_routes(routed: Vec<Arc<super::routed::Routed>>) {
    if routed.is_empty() {
        return;
    }
    std::thread::spawn(move || {
        for r in &routed {
            for route in &r.routes {
                super::routed::health(r, route);
            }
        }
    });
}
