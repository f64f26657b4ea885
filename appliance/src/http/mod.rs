//! The daemon's HTTP side: one listener ([`listener`]) and one router over the faces — the
//! relay ([`relay`]: WebSocket, NIP-11, health), every subsystem's metrics ([`metrics`]),
//! proofs ([`proofs`]), inference
//! ([`inference`]), jobs ([`jobs`]) and blobs ([`blobs`], Blossom) — with the API guard
//! ([`guard`]: cross-site refusal, JSON only, bearer token, CORS) and one error body
//! ([`error`]). Stops cleanly on SIGINT or SIGTERM: connections get a close frame, queued
//! events are committed, then the process exits 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use fleetmesh_relay::face::{Relay, RelayConfig};
use tracing::info;

use crate::http::error::api_error;
use crate::http::relay::RelayState;
use crate::node::Node;

pub mod blobs;
pub mod budget;
pub mod didcomm;
pub mod error;
pub mod guard;
pub mod inference;
pub mod jobs;
pub mod l402;
pub mod listener;
pub mod metrics;
pub mod proofs;
pub mod relay;
pub mod status;

/// Where the prove service finds circuits, under the node directory.
pub const CIRCUITS_DIR: &str = "circuits";

/// Builds the router for `node`, serving `relay`; and the running services that
/// reconciliation acts on (`extra_models`: `meshnode run --model`).
pub fn router(
    node: &mut Node,
    relay: Arc<Relay>,
    inference: &crate::config::InferenceSection,
    extra_models: &[std::path::PathBuf],
    peers: Arc<crate::peers::Peers>,
    books: crate::settlement::Books,
) -> anyhow::Result<(
    Router,
    Arc<crate::reconcile::Live>,
    Arc<crate::didcomm::DidComm>,
)> {
    let descriptor = node.current_descriptor()?;
    let choice = node.config.compute.backend;
    let mut devices = format!("not probed ([compute] backend = \"{choice}\")");
    let (backend, why) = fleetmesh_kernels::ops::select(choice, || {
        let found = fleetmesh_kernels::probe::probe();
        let adapters = match &found.wgpu {
            Ok(list) if list.is_empty() => "none".to_owned(),
            Ok(list) => list
                .iter()
                .map(|a| format!("{} ({}, {})", a.name, a.backend, a.device_type))
                .collect::<Vec<_>>()
                .join("; "),
            Err(e) => e.to_string(),
        };
        let cuda = match &found.cuda {
            fleetmesh_kernels::probe::CudaStatus::Available { devices, .. } => devices.join("; "),
            fleetmesh_kernels::probe::CudaStatus::Unavailable { reason } => reason.clone(),
        };
        info!(cpu_threads = found.cpu_threads, wgpu = %adapters, cuda = %cuda, "hardware probe");
        devices = format!(
            "{} CPU threads; wgpu: {adapters}; CUDA: {cuda}",
            found.cpu_threads
        );
        found
    })
    .with_context(|| format!("[compute] backend = \"{choice}\""))?;
    info!(backend = %backend.describe(), reason = %why, "prover backend");
    // the recorder is in place before the first proof, token or job is counted
    self::metrics::exporter();
    self::metrics::build_info(&backend.describe());
    let backend_line = format!("{} ({why})", backend.describe());
    let inference = crate::http::inference::InferenceService::load(inference)?;
    let backend: Arc<dyn fleetmesh_kernels::MsmNtt> = Arc::from(backend);
    let blobs = crate::http::blobs::Blossom::open(
        &node.dir,
        &node.config.blobs,
        node.config.api.token.as_deref(),
        &node.config.face.per_ip_exempt,
    )?;
    blobs.meter_peers(peers.clone());
    // one proving queue and one verify gatherer for the API and jobs alike
    let verifier = fleetmesh_prover::gather::Gatherer::start_on(backend.clone());
    let prover = fleetmesh_prover::queue::ProvingQueue::with_tables(
        node.dir.join(CIRCUITS_DIR),
        backend,
        (node.config.compute.precompute_mib as usize).saturating_mul(1 << 20),
    );
    let jobs = fleetmesh_market::service::JobService::start(
        &node.dir,
        fleetmesh_market::service::Parts {
            keys: fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?,
            relay: relay.clone(),
            blobs: blobs.store(),
            prover: prover.clone(),
            verifier: verifier.clone(),
            inference: inference.clone(),
            payments: Arc::new(crate::settlement::CashuPayments {
                wallet: node.dir.join(fleetmesh_settle::cashu::WALLET_FILE),
                key: *fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?
                    .nostr(),
                mints: node
                    .config
                    .settlement
                    .mints
                    .iter()
                    .map(|m| fleetmesh_settle::cashu::token::normalize_mint(m))
                    .collect(),
                books,
            }),
        },
        &node.config.jobs,
    )?;
    let didcomm = Arc::new(crate::didcomm::DidComm::new(
        fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?,
        descriptor.clone(),
        jobs.clone(),
        node.config.didcomm.clone(),
        node.config
            .didcomm
            .mediate
            .then(|| {
                let path = node.dir.join(crate::didcomm::held::FILE);
                crate::didcomm::held::Held::open(&path, &node.config.didcomm)
            })
            .transpose()?,
        relay.revoked().clone(),
        node.config.api.jobs_by_key,
    ));
    let nip11 = relay::nip11_document(node, &descriptor.id_hex(), &relay);
    let status = status::Status {
        name: nip11["name"].as_str().unwrap_or_default().to_owned(),
        did: node.keys.did(),
        class: node.config.node.class.to_string(),
        protocol_digest: fleetmesh_schemas::SchemaSet::embedded().digest().to_hex(),
        descriptor: descriptor.id_hex(),
        backend: backend_line,
        devices,
        circuits: node.dir.join(CIRCUITS_DIR),
        inference: inference.clone(),
        jobs: jobs.clone(),
    };
    let nip11 = Arc::new(std::sync::RwLock::new(nip11.to_string()));
    let live = Arc::new(crate::reconcile::Live::new(
        &node.dir,
        &node.config,
        extra_models,
        crate::reconcile::Services {
            jobs: jobs.clone(),
            inference: inference.clone(),
            nip11: nip11.clone(),
        },
    ));
    let state = Arc::new(RelayState {
        nip11,
        pubkey: node.keys.nostr_pubkey_hex(),
        started: Instant::now(),
        relay,
        websocket_origins: node.config.face.websocket_origins.clone(),
        status,
        did_document: fleetmesh_proto::did::document(
            &fleetmesh_proto::identity::verify_descriptor(&descriptor)
                .context("the node's own descriptor")?,
        )
        .to_string(),
    });
    // the routes sold per request (L402), when [api.prices] sets any
    let gate = crate::http::l402::Gate::open(node)?;
    if let Some(g) = &gate {
        g.spawn_claims();
    }
    let policy = Arc::new(
        crate::http::guard::Policy::new(
            &node.config.api.allowed_origins,
            node.config.api.token.as_deref(),
        )
        .with_gate(gate)
        .with_proxies(&node.config.face.per_ip_exempt),
    );
    // the job routes take keys (NIP-98) too, each kept to its own jobs
    let jobs_policy = Arc::new((*policy).clone().with_keys(node.config.api.jobs_by_key));
    let guard = axum::middleware::from_fn_with_state(policy, crate::http::guard::guard);
    // bodies held in memory, all routes together (inside the guard: a refused request
    // claims nothing)
    let budget = axum::middleware::from_fn_with_state(
        Arc::new(crate::http::budget::BodyBudget::new(
            node.config.face.body_bytes_total,
            std::time::Duration::from_secs(node.config.face.body_timeout_secs),
            &node.config.face.per_ip_exempt,
        )),
        crate::http::budget::limit,
    );
    let jobs_guard = axum::middleware::from_fn_with_state(jobs_policy, crate::http::guard::guard);
    // the compute, proof and job APIs, behind the guard (checked before bodies are read)
    let api = Router::new()
        .route(
            "/v1/proofs/verify",
            axum::routing::post(crate::http::proofs::verify::handle).with_state(verifier),
        )
        .route(
            "/v1/proofs/prove",
            axum::routing::post(crate::http::proofs::prove::handle).with_state(prover),
        )
        .route(
            "/v1/models",
            get(crate::http::inference::models).with_state(inference.clone()),
        )
        .route(
            "/v1/executors",
            get(crate::http::inference::executors).with_state(inference.clone()),
        )
        .route(
            "/v1/completions",
            axum::routing::post(crate::http::inference::completions).with_state(inference.clone()),
        )
        .route(
            "/v1/chat/completions",
            axum::routing::post(crate::http::inference::chat_completions).with_state(inference),
        )
        .route(
            "/v1/shards",
            get(
                |axum::extract::State((db, ours)): axum::extract::State<(
                    std::path::PathBuf,
                    String,
                )>| blocking_json(move || crate::shards::list(&db, &ours)),
            )
            .with_state((
                node.dir.join(crate::node::DB_FILE),
                node.keys.nostr_pubkey_hex(),
            )),
        )
        .route(
            "/v1/ledger",
            get(
                |axum::extract::State(dir): axum::extract::State<std::path::PathBuf>| {
                    blocking_json(move || {
                        Ok(fleetmesh_ledger::store::standing(&dir.join("ledger"))?)
                    })
                },
            )
            .with_state(node.dir.clone()),
        )
        .route(
            "/v1/peers",
            get(
                |axum::extract::State((p, r)): axum::extract::State<(
                    Arc<crate::peers::Peers>,
                    Arc<fleetmesh_relay::face::Relay>,
                )>| async move {
                    // the peers, and the load shedding: the rung, the strain with each key
                    let mut v = p.snapshot();
                    v["shedding_rung"] = r.shedding_rung().into();
                    v["strain"] = serde_json::to_value(r.strain()).unwrap_or_default();
                    axum::Json(v)
                },
            )
            .with_state((peers, state.relay.clone())),
        )
        .route_layer(budget.clone())
        .route_layer(guard);
    let jobs_api = Router::new()
        .route(
            "/v1/jobs",
            axum::routing::post(crate::http::jobs::submit).with_state(jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}",
            get(crate::http::jobs::status).with_state(jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}/result",
            get(crate::http::jobs::result).with_state(jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}/receipt",
            get(crate::http::jobs::receipt).with_state(jobs),
        )
        .route_layer(budget.clone())
        .route_layer(jobs_guard);
    let app = Router::new()
        .route("/", get(relay::root).options(relay::preflight))
        .route("/healthz", get(relay::healthz))
        .route("/.well-known/did.json", get(relay::did_document))
        .route("/metrics", get(self::metrics::metrics))
        .route(
            "/didcomm",
            // open to anyone: a message proves its sender; refused to browsers
            axum::routing::post(crate::http::didcomm::post)
                .layer(axum::extract::DefaultBodyLimit::max(
                    fleetmesh_proto::didcomm::MAX_MESSAGE_BYTES,
                ))
                .layer(budget)
                .with_state(didcomm.clone()),
        )
        .merge(api)
        .merge(jobs_api)
        .route(
            "/upload",
            // the handler checks the authorization before it reads the body, then streams
            // it to disk under its own size limit and timeout
            axum::routing::put(crate::http::blobs::upload)
                .head(crate::http::blobs::upload_check)
                .options(crate::http::blobs::preflight)
                .layer(axum::middleware::map_response(crate::http::blobs::cors))
                .with_state(blobs.clone()),
        )
        .route(
            "/list/{pubkey}",
            get(crate::http::blobs::list)
                .layer(axum::middleware::map_response(crate::http::blobs::cors))
                .with_state(blobs.clone()),
        )
        .route(
            "/v1/blobs/served",
            // the operator's: the [api] token, or a loopback client when none is set
            get(crate::http::blobs::served).with_state(blobs.clone()),
        )
        .route(
            "/{blob}",
            get(crate::http::blobs::get_blob)
                .head(crate::http::blobs::get_blob)
                .delete(crate::http::blobs::delete)
                .options(crate::http::blobs::preflight)
                .layer(axum::middleware::map_response(crate::http::blobs::cors))
                .with_state(blobs),
        )
        .fallback(not_found)
        .with_state(state);
    Ok((app, live, didcomm))
}

/// Runs `f` on the blocking pool and answers its JSON, or 500 naming what failed.
async fn blocking_json(
    f: impl FnOnce() -> anyhow::Result<serde_json::Value> + Send + 'static,
) -> Response {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => axum::Json(v).into_response(),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(serde_json::json!({"error": e.to_string()})),
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn not_found() -> Response {
    api_error(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// Serves `node` on `listen` until SIGINT or SIGTERM.
pub async fn run(
    mut node: Node,
    listen: SocketAddr,
    inference: &crate::config::InferenceSection,
    extra_models: &[std::path::PathBuf],
    listening: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    if !listen.ip().is_loopback() && node.config.api.token.is_none() {
        anyhow::bail!(
            "listening on {listen}, which is not a loopback address, needs [api] token in {}: \
             without it anyone who reaches the port could run compute and proofs here",
            crate::config::FILE
        );
    }
    let (relay, writer) = Relay::start(
        &node.dir.join(crate::node::DB_FILE),
        RelayConfig {
            limits: node.config.relay.clone(),
            durability: node.config.store.durability,
        },
    )?;
    relay.spawn_expiry_purge(std::time::Duration::from_secs(60));
    // [relay] shedding = "auto": the rung follows the pressure (ends with the relay)
    let _ = relay.spawn_shedder();
    if node.config.node.class == fleetmesh_proto::NodeClass::Leaf {
        // a leaf keeps a bounded cache of others' events, its own always
        relay.spawn_eviction(
            node.config.peering.leaf_cache_events as usize,
            node.keys.nostr_pubkey(),
            std::time::Duration::from_secs(node.config.peering.interval_secs),
        );
    }
    relay.spawn_rejection_summary(std::time::Duration::from_secs(60));
    let peers = Arc::new(crate::peers::Peers::new(
        node.config.peering.max_peers as usize * 4,
    ));
    // one daemon per node directory: its control socket says so before anything is held
    let control_socket = crate::control::bind(&node.dir)?;
    // the books: the accountability ledger's and the settlement records'
    let books = crate::settlement::open_books(&node.dir, &node.keys.nostr_pubkey_hex())?;
    let (app, live, didcomm) = router(
        &mut node,
        relay.clone(),
        inference,
        extra_models,
        peers.clone(),
        books.clone(),
    )?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
    #[cfg(feature = "federation")]
    let accounts: Arc<std::sync::OnceLock<Arc<crate::ledger::Accounts>>> = Arc::default();
    let control = control_socket.map(|(socket, control)| {
        let handler = control_handler(
            &node,
            local,
            relay.clone(),
            books.clone(),
            live.clone(),
            #[cfg(feature = "federation")]
            accounts.clone(),
        );
        (
            tokio::spawn(crate::control::serve(socket, handler)),
            control,
        )
    });
    // jobs gift-wrapped to this node, on its relay and on those it names
    let mailbox = crate::mailbox::start(
        node.config.node.relays.clone(),
        fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?,
        live.jobs(),
        relay.clone(),
        node.config.api.jobs_by_key,
    );
    // the node's terms published, and asks it can fill answered with offers
    let offer_keys = fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?;
    let offers = if node.config.api.jobs_by_key {
        let started = crate::offers::start(
            node.config.node.relays.clone(),
            offer_keys,
            live.jobs(),
            relay.clone(),
            (
                node.config.settlement.mints.clone(),
                node.config.node.regions.clone(),
            ),
            {
                let inference = live.inference();
                Arc::new(move || inference.catalog())
            },
        );
        Some(started.await)
    } else {
        None
    };
    // the wallet's services on the relays: Nostr Wallet Connect ([settlement] nwc) and
    // nutzaps ([settlement] nutzaps)
    let (wallet, relays) = (&node.config.settlement, &node.config.node.relays);
    let (dir, mints) = (&node.dir, &wallet.mints);
    let nwc = match wallet.nwc {
        true => Some(crate::nwc::start(dir, relays.clone(), relay.clone(), wallet).await?),
        false => None,
    };
    let nutzaps = match wallet.nutzaps {
        true => Some(crate::nutzaps::start(dir, relays.clone(), relay.clone(), mints).await?),
        false => None,
    };
    // stores reconciled with the peers of [peering]
    let peering = crate::peering::start(
        node.dir.join(crate::node::DB_FILE),
        &node.config.peering,
        node.config.store.durability,
        peers.clone(),
    );
    // the federation transports ([peering] quic_listen, gossip_listen)
    #[cfg(feature = "federation")]
    let descriptor = node.current_descriptor()?;
    #[cfg(feature = "federation")]
    let federation = crate::federation::start(
        &node.config,
        fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?,
        &descriptor,
        relay.clone(),
        &node.dir,
        peers.clone(),
        didcomm.clone(),
    )
    .await?;
    // the accountability ledger over the federation's links ([ledger])
    #[cfg(feature = "federation")]
    let ledger = match &federation {
        Some(f) => {
            let ledger = crate::ledger::Accounts::open(
                &node.dir,
                books.clone(),
                descriptor.clone(),
                relay.clone(),
                peers.clone(),
                f.links(),
                node.config.ledger.clone(),
            )?;
            let (tx, rx) = tokio::sync::mpsc::channel(crate::ledger::INBOX);
            let knows = ledger.clone();
            didcomm.set_ledger(tx, Arc::new(move |peer: &str| knows.knows(peer)));
            let granted = ledger.clone();
            relay.set_granted(Arc::new(move |peer: &str| granted.allowance(peer)));
            let _ = accounts.set(ledger.clone());
            ledger.spawn(rx)
        }
        None => Vec::new(),
    };
    // new events here start peering rounds at once
    let kicker = peers.spawn_kicker(&relay);
    // a community node's authoritative shards, summarized and published as they change
    let shards = crate::shards::spawn(
        relay.clone(),
        node.dir.join(crate::node::DB_FILE),
        fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?,
        node.config.peering.shards.clone(),
        std::time::Duration::from_secs(node.config.peering.interval_secs),
    );
    // NIP-66 (this face) and NIP-85 (the ledger's peers) for standard clients
    let projections = crate::projections::Projector {
        keys: fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?,
        relay: relay.clone(),
        nip11: live.nip11(),
        face: crate::projections::face_url(&node.config, local),
        relays: node.config.node.relays.clone(),
        #[cfg(feature = "federation")]
        accounts: accounts.clone(),
    }
    .spawn(std::time::Duration::from_secs(
        node.config.ledger.publish_secs,
    ));
    // messages held for this node by its mediator ([didcomm] mediator)
    #[cfg(feature = "federation")]
    let pickup = didcomm.spawn_pickup(federation.as_ref().map(|f| f.links()));
    #[cfg(not(feature = "federation"))]
    let pickup = didcomm.spawn_pickup();
    let watcher = node.config.manifests.watch.then(|| {
        let m = &node.config.manifests;
        tokio::spawn(crate::apply::watch(
            node.dir.clone(),
            node.dir.join(&m.dir),
            std::time::Duration::from_secs(m.interval_secs),
            live.clone(),
        ))
    });
    let signals = shutdown_signal()?;
    info!(
        address = %local,
        pubkey = %node.keys.nostr_pubkey_hex(),
        dir = %node.dir.display(),
        "listening"
    );
    // One line on stdout for scripts and humans: where the node is.
    println!(
        "meshnode listening on http://{local} (node {})",
        node.keys.nostr_pubkey_hex()
    );
    listening(local);
    let closer = relay.clone();
    let face = &node.config.face;
    let opts = crate::http::listener::Options {
        header_timeout: std::time::Duration::from_secs(face.header_timeout_secs),
        max_connections: face.max_connections,
        max_per_ip: face.max_connections_per_ip,
        per_ip_exempt: face.per_ip_exempt.clone(),
        shutdown: std::time::Duration::from_secs(face.shutdown_secs),
    };
    crate::http::listener::serve(listener, app, opts, async move {
        signals.await;
        info!("stopping");
        // schema compilations stop at their next check: the stop never waits on one
        fleetmesh_inference::schema::stop_compiles();
        // WebSockets are told to close (1001); HTTP requests in flight may finish
        closer.close_all();
    })
    .await;
    if let Some((task, socket)) = control {
        task.abort();
        drop(socket);
    }
    if let Some(task) = watcher {
        task.abort();
    }
    mailbox.stop().await;
    for tasks in [offers, nwc, nutzaps].into_iter().flatten() {
        tasks.stop().await;
    }
    kicker.abort();
    if let Some(s) = shards {
        s.abort();
    }
    if let Some(p) = projections {
        p.abort();
    }
    peering.stop().await;
    #[cfg(feature = "federation")]
    for task in ledger {
        task.abort();
    }
    #[cfg(feature = "federation")]
    if let Some(f) = federation {
        f.stop().await;
    }
    if let Some(task) = pickup {
        task.abort();
        let _ = task.await;
    }
    drop(didcomm);
    // The writer commits what is queued, then ends, whatever connection is still open.
    tokio::task::spawn_blocking(move || {
        relay.stop_writer();
        writer.join()
    })
    .await
    .context("waiting for the store writer")?
    .map_err(|_| anyhow::anyhow!("the store writer panicked"))?;
    info!("stopped");
    Ok(())
}

/// What the control socket answers: `status` (identity, address, uptime, protocol
/// digest, relay counters), `config` (the settings in effect, the API token only said to be
/// set), `reload` (`meshnode.toml` and the stored manifests read again,
/// [`crate::reconcile`]), `apply` (manifests, [`crate::apply`]) and `ledger.settle` (a
/// payment the operator's own `job submit` or `wallet check` made with this node's key,
/// recorded in its books, [`crate::settlement::record_as_buyer`]).
fn control_handler(
    node: &Node,
    listen: SocketAddr,
    relay: Arc<Relay>,
    books: crate::settlement::Books,
    live: Arc<crate::reconcile::Live>,
    #[cfg(feature = "federation")] accounts: Arc<std::sync::OnceLock<Arc<crate::ledger::Accounts>>>,
) -> crate::control::Handler {
    let started = std::time::Instant::now();
    let identity = serde_json::json!({
        "pubkey": node.keys.nostr_pubkey_hex(),
        "did": node.keys.did(),
        "version": env!("CARGO_PKG_VERSION"),
        "listen": listen.to_string(),
        "dir": node.dir.display().to_string(),
        "protocol_digest": fleetmesh_schemas::SchemaSet::embedded().digest().to_hex(),
    });
    let dir = node.dir.clone();
    Arc::new(move |cmd: &str, req: &serde_json::Value| match cmd {
        "status" => {
            use std::sync::atomic::Ordering::Relaxed;
            let m = relay.metrics();
            let mut s = identity.clone();
            s["uptime_secs"] = serde_json::json!(started.elapsed().as_secs());
            s["relay"] = serde_json::json!({
                "connections_open": m.connections_open.load(Relaxed),
                "subscriptions_open": m.subscriptions_open.load(Relaxed),
                "events_received": m.events_received.load(Relaxed),
                "events_stored": m.events_stored.load(Relaxed),
                "store_errors": m.store_errors().0,
            });
            Some(s)
        }
        "config" => {
            let mut config = serde_json::to_value(live.current()).unwrap_or_default();
            if !config["api"]["token"].is_null() {
                config["api"]["token"] = serde_json::json!("(set)");
            }
            Some(config)
        }
        "reload" => Some(crate::apply::counted(
            "reload",
            live.reload()
                .map(|r| serde_json::json!({"reconciled": r.to_json()})),
        )),
        "apply" => {
            let docs = req["manifests"].as_array().map_or(&[][..], Vec::as_slice);
            Some(crate::apply::counted(
                "socket",
                crate::apply::apply(&dir, docs, &live),
            ))
        }
        "ledger.settle" => Some(settle_command(&books, req)),
        #[cfg(feature = "federation")]
        "grant.issue" | "grant.list" | "grant.revoke" => Some(grant_command(&accounts, cmd, req)),
        _ => None,
    })
}

/// `ledger.settle` on the control socket: `{"peer": hex key, "settlement": {…}}`.
fn settle_command(books: &crate::settlement::Books, req: &serde_json::Value) -> serde_json::Value {
    let refuse = |m: String| serde_json::json!({"error": {"code": "bad_request", "message": m}});
    let peer = req["peer"].as_str().unwrap_or_default();
    if peer.len() != 64 || !peer.bytes().all(|b| b.is_ascii_hexdigit()) {
        return refuse(format!("peer {peer:?}: a Nostr key in hex"));
    }
    let s: fleetmesh_ledger::Settlement = match serde_json::from_value(req["settlement"].clone()) {
        Ok(s) => s,
        Err(e) => return refuse(format!("the settlement: {e}")),
    };
    if let Err(why) = s.check() {
        return refuse(why);
    }
    match crate::settlement::record(books, &peer.to_ascii_lowercase(), s) {
        Ok(()) => serde_json::json!({"recorded": true}),
        Err(e) => serde_json::json!({"error": {"code": "internal", "message": format!("{e:#}")}}),
    }
}

/// `meshnode grant issue|list|revoke` on the control socket.
#[cfg(feature = "federation")]
fn grant_command(
    accounts: &std::sync::OnceLock<Arc<crate::ledger::Accounts>>,
    cmd: &str,
    req: &serde_json::Value,
) -> serde_json::Value {
    let refuse = |code: &str, m: String| serde_json::json!({"error": {"code": code, "message": m}});
    let Some(acc) = accounts.get() else {
        return refuse(
            "no_ledger",
            "the ledger runs with the federation ([peering] quic_listen or gossip_listen)".into(),
        );
    };
    let peer = req["peer"].as_str().unwrap_or_default().to_owned();
    let rt = tokio::runtime::Handle::current();
    match cmd {
        "grant.list" => serde_json::json!({"grants": acc.grants()}),
        "grant.revoke" => serde_json::json!({"revoked": rt.block_on(acc.revoke(&peer))}),
        _ => {
            let n = |k: &str| req[k].as_u64().unwrap_or(0);
            let events = n("events");
            if events == 0 {
                return refuse("bad_request", "events: at least 1".into());
            }
            let terms = crate::config::LedgerSection {
                window_secs: n("window_secs").max(1),
                grant_events: events,
                grant_bytes: n("bytes"),
                grant_min: n("min"),
                grant_increase: n("increase"),
                grant_shards: req["shards"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|s| s.as_str().unwrap_or("?").to_owned())
                            .collect()
                    })
                    .unwrap_or_default(),
                ..Default::default()
            };
            if let Err(why) = terms.check() {
                return refuse("bad_request", why);
            }
            let t = terms.terms().expect("events ≥ 1");
            match rt.block_on(acc.issue(&peer, t, terms.window_secs, terms.shards())) {
                Ok(e) => serde_json::json!({"grant": e.to_value()}),
                Err(e) => refuse("bad_request", format!("{e:#}")),
            }
        }
    }
}

/// Registers the SIGINT and SIGTERM handlers now, so a signal that arrives as soon as the
/// listening line is printed already stops the node cleanly; the returned future resolves
/// on the first of them.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        Ok(async move {
            tokio::select! {
                _ = int.recv() => info!("SIGINT: shutting down"),
                _ = term.recv() => info!("SIGTERM: shutting down"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            if tokio::signal::ctrl_c().await.is_ok() {
                info!("Ctrl-C: shutting down");
            }
        })
    }
}
