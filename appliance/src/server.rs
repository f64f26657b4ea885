//! The daemon: one listener that serves the relay WebSocket (NIP-01), the NIP-11 relay
//! information document, `GET /healthz` and `GET /metrics`, and — as later issues add
//! them — the HTTP APIs. Stops cleanly on SIGINT or SIGTERM: connections get a close
//! frame, queued events are committed, then the process exits 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use axum::Router;
use axum::extract::ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use fleetmesh_relay::face::{Relay, RelayConfig};
use fleetmesh_schemas::SchemaSet;
use serde_json::json;
use tracing::info;

use crate::node::Node;

/// NIP-11's media type.
const NOSTR_JSON: &str = "application/nostr+json";

/// What handlers share.
struct AppState {
    /// The NIP-11 document, serialized once at start-up.
    nip11: String,
    pubkey: String,
    started: Instant,
    relay: Arc<Relay>,
    /// `[face] websocket_origins`.
    websocket_origins: Vec<String>,
}

/// NIPs this build serves; 77 is added when negentropy is enabled.
const BASE_NIPS: &[u16] = &[1, 9, 11, 40];

/// The NIPs served with these relay limits.
pub fn supported_nips(relay: &Relay) -> Vec<u16> {
    let mut nips = BASE_NIPS.to_vec();
    if relay.limits().negentropy {
        nips.push(77);
    }
    nips
}

/// The NIP-11 relay information document for `node`.
pub fn nip11_document(node: &Node, descriptor_id: &str, relay: &Relay) -> serde_json::Value {
    let pubkey = node.keys.nostr_pubkey_hex();
    let name = node
        .config
        .node
        .name
        .clone()
        .unwrap_or_else(|| format!("fleetmesh node {}", &pubkey[..12]));
    json!({
        "name": name,
        "description": "A fleetmesh node: verifiable compute (Groth16 proofs, LLM inference, WASI jobs) on an accountable federation of Nostr relays.",
        // NIP-11: `pubkey` is the administrative contact, `self` the relay's own key.
        "pubkey": node.config.node.operator.clone().unwrap_or_else(|| pubkey.clone()),
        "self": pubkey,
        "software": env!("CARGO_PKG_REPOSITORY"),
        "version": env!("CARGO_PKG_VERSION"),
        "supported_nips": supported_nips(relay),
        "limitation": relay.limits().nip11(),
        "fleetmesh": {
            "did": node.keys.did(),
            "class": node.config.node.class,
            "protocol_digest": SchemaSet::embedded().digest().to_hex(),
            "descriptor": descriptor_id,
            // what a job may use here at most (its limits are cut to these)
            "jobs": node.config.jobs,
        },
    })
}

/// Where the prove service finds circuits, under the node directory.
pub const CIRCUITS_DIR: &str = "circuits";

/// Builds the router for `node`, serving `relay`.
pub fn router(
    node: &mut Node,
    relay: Arc<Relay>,
    inference: &crate::config::InferenceSection,
) -> anyhow::Result<Router> {
    let descriptor = node.current_descriptor()?;
    let choice = node.config.compute.backend;
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
        found
    })
    .with_context(|| format!("[compute] backend = \"{choice}\""))?;
    info!(backend = %backend.describe(), reason = %why, "prover backend");
    let inference = crate::inference_service::InferenceService::load(inference)?;
    let backend: Arc<dyn fleetmesh_kernels::MsmNtt> = Arc::from(backend);
    let blobs = crate::blossom::Blossom::open(
        &node.dir,
        &node.config.blobs,
        node.config.api.token.as_deref(),
    )?;
    // one proving queue and one verify gatherer for the API and jobs alike
    let prover = fleetmesh_prover::queue::ProvingQueue::new(node.dir.join(CIRCUITS_DIR), backend);
    let verifier = fleetmesh_prover::gather::Gatherer::start();
    let jobs = fleetmesh_market::service::JobService::start(
        &node.dir,
        fleetmesh_market::service::Parts {
            keys: fleetmesh_proto::NodeKeys::load(&node.dir.join(crate::node::KEYS_DIR))?,
            relay: relay.clone(),
            blobs: blobs.clone(),
            prover: prover.clone(),
            verifier: verifier.clone(),
            inference: inference.clone(),
        },
        &node.config.jobs,
    )?;
    let state = Arc::new(AppState {
        nip11: nip11_document(node, &descriptor.id_hex(), &relay).to_string(),
        pubkey: node.keys.nostr_pubkey_hex(),
        started: Instant::now(),
        relay,
        websocket_origins: node.config.face.websocket_origins.clone(),
    });
    let policy = Arc::new(crate::api_guard::Policy::new(
        &node.config.api.allowed_origins,
        node.config.api.token.as_deref(),
    ));
    let guard = axum::middleware::from_fn_with_state(policy, crate::api_guard::guard);
    // the compute, proof and job APIs, behind the guard (checked before bodies are read)
    let api = Router::new()
        .route(
            "/v1/proofs/verify",
            axum::routing::post(crate::verify_service::handle).with_state(verifier),
        )
        .route(
            "/v1/proofs/prove",
            axum::routing::post(crate::prove_service::handle).with_state(prover),
        )
        .route(
            "/v1/models",
            get(crate::inference_service::models).with_state(inference.clone()),
        )
        .route(
            "/v1/executors",
            get(crate::inference_service::executors).with_state(inference.clone()),
        )
        .route(
            "/v1/completions",
            axum::routing::post(crate::inference_service::completions)
                .with_state(inference.clone()),
        )
        .route(
            "/v1/chat/completions",
            axum::routing::post(crate::inference_service::chat_completions).with_state(inference),
        )
        .route(
            "/v1/jobs",
            axum::routing::post(crate::market::submit).with_state(jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}",
            get(crate::market::status).with_state(jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}/result",
            get(crate::market::result).with_state(jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}/receipt",
            get(crate::market::receipt).with_state(jobs),
        )
        .route_layer(guard);
    Ok(Router::new()
        .route("/", get(root).options(preflight))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .merge(api)
        .route(
            "/upload",
            // the handler checks the authorization before it reads the body, then streams
            // it to disk under its own size limit and timeout
            axum::routing::put(crate::blossom::upload)
                .head(crate::blossom::upload_check)
                .options(crate::blossom::preflight)
                .layer(axum::middleware::map_response(crate::blossom::cors))
                .with_state(blobs.clone()),
        )
        .route(
            "/list/{pubkey}",
            get(crate::blossom::list)
                .layer(axum::middleware::map_response(crate::blossom::cors))
                .with_state(blobs.clone()),
        )
        .route(
            "/v1/blobs/served",
            // the operator's: the [api] token, or a loopback client when none is set
            get(crate::blossom::served).with_state(blobs.clone()),
        )
        .route(
            "/{blob}",
            get(crate::blossom::get_blob)
                .head(crate::blossom::get_blob)
                .delete(crate::blossom::delete)
                .options(crate::blossom::preflight)
                .layer(axum::middleware::map_response(crate::blossom::cors))
                .with_state(blobs),
        )
        .fallback(not_found)
        .with_state(state))
}

/// CORS headers allowing any origin and any header (Authorization named, as browsers
/// do not count it under `*`), for `methods`.
pub(crate) fn cors(headers: &mut HeaderMap, methods: &'static str) {
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("Authorization, *"),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static(methods),
    );
}

async fn root(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    headers: HeaderMap,
) -> Response {
    if let Ok(ws) = ws {
        if !crate::api_guard::websocket_origin_ok(&state.websocket_origins, &headers) {
            return api_error(
                StatusCode::FORBIDDEN,
                "cross_site",
                "this origin is not in [face] websocket_origins",
            );
        }
        return state.relay.clone().upgrade(ws, peer);
    }
    let wants_nip11 = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|m| m.trim().starts_with(NOSTR_JSON)));
    if wants_nip11 {
        let mut response = (
            [(header::CONTENT_TYPE, HeaderValue::from_static(NOSTR_JSON))],
            state.nip11.clone(),
        )
            .into_response();
        cors(response.headers_mut(), "GET, OPTIONS");
        response
    } else {
        format!(
            "fleetmesh node {}\nThis is a Nostr relay endpoint: ask with 'Accept: {NOSTR_JSON}' for its NIP-11 document.\n",
            state.pubkey
        )
        .into_response()
    }
}

async fn preflight() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    cors(response.headers_mut(), "GET, OPTIONS");
    response
}

/// `GET /healthz`: 200 `ok`, or 503 `degraded` once a store operation has failed since
/// start-up (a damaged or full disk needs the operator; a restart re-checks the files).
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    let (errors, last) = state.relay.metrics().store_errors();
    let body = json!({
        "status": if errors == 0 { "ok" } else { "degraded" },
        "pubkey": state.pubkey,
        "uptime_secs": state.started.elapsed().as_secs(),
        "store": {"errors": errors, "last_error": last},
    });
    let status = if errors == 0 {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    match state.relay.render_metrics().await {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"code": "store", "message": e.to_string()}})),
        )
            .into_response(),
    }
}

/// The API's error body, `{"error": {"code", "message"}}`, with `status`.
pub fn api_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"error": {"code": code, "message": message.into()}})),
    )
        .into_response()
}

async fn not_found() -> Response {
    api_error(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}

/// Serves `node` on `listen` until SIGINT or SIGTERM.
pub async fn run(
    mut node: Node,
    listen: SocketAddr,
    inference: &crate::config::InferenceSection,
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
    relay.spawn_rejection_summary(std::time::Duration::from_secs(60));
    let app = router(&mut node, relay.clone(), inference)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let local = listener.local_addr().context("reading the bound address")?;
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
    let opts = crate::listener::Options {
        header_timeout: std::time::Duration::from_secs(face.header_timeout_secs),
        max_connections: face.max_connections,
        max_per_ip: face.max_connections_per_ip,
        shutdown: std::time::Duration::from_secs(face.shutdown_secs),
    };
    crate::listener::serve(listener, app, opts, async move {
        signals.await;
        info!("stopping");
        // WebSockets are told to close (1001); HTTP requests in flight may finish
        closer.close_all();
    })
    .await;
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
