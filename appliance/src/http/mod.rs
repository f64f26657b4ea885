//! The daemon's HTTP side: one listener ([`listener`]) and one router over the faces — the
//! relay ([`relay`]: WebSocket, NIP-11, health), every subsystem's metrics ([`metrics`]),
//! proofs ([`proofs`]), inference
//! ([`inference`]), jobs ([`jobs`]) and blobs ([`blobs`], Blossom) — with the API guard
//! ([`guard`]: cross-site refusal, JSON only, bearer token, CORS) and one error body
//! ([`error`]). Routing and handlers only: the services routed to are opened, and stopped,
//! by `crate::daemon`; `main.rs` hands [`router`]'s answer to [`listener::serve`].

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse as _, Response};
use axum::routing::get;
use fleetmesh_relay::face::Relay;

use crate::daemon::Services;
use crate::http::error::api_error;
use crate::http::state::RelayState;
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
pub mod state;
pub mod status;

/// The node's routes over the running services `s`: the relay face (WebSocket, NIP-11,
/// status page, health, DID document), `/metrics`, DIDComm, the compute, proof and job
/// APIs behind the guard, and Blossom.
///
/// # Errors
/// The L402 gate (`[api.prices]`) cannot open its backend, or the node's own descriptor
/// does not verify.
pub fn router(s: &Services) -> anyhow::Result<Router> {
    self::metrics::build_info(&s.backend);
    let node = &s.node;
    let state = Arc::new(RelayState {
        nip11: s.nip11.clone(),
        pubkey: node.keys.nostr_pubkey_hex(),
        started: Instant::now(),
        relay: s.relay.clone(),
        websocket_origins: node.config.face.websocket_origins.clone(),
        status: state::Status::of(s),
        did_document: fleetmesh_proto::did::document(
            &fleetmesh_proto::identity::verify_descriptor(&s.descriptor)
                .context("the node's own descriptor")?,
        )
        .to_string(),
    });
    let layers = Layers::new(node)?;
    Ok(Router::new()
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
                .layer(axum::middleware::from_fn_with_state(
                    layers.budget.clone(),
                    budget::limit,
                ))
                .with_state(s.didcomm.clone()),
        )
        .merge(api_routes(s, &layers))
        .merge(job_routes(s, &layers))
        .merge(blob_routes(s))
        .fallback(not_found)
        .with_state(state)
        // outermost: whatever refused a request before its body, the client is told the
        // connection will not be reused
        .layer(axum::middleware::from_fn(listener::close_unread)))
}

/// What the API routes' middleware holds: the guard's policies (cross-site refusal, JSON
/// only, the bearer token, L402 prices; the job routes' also take NIP-98 keys) and the
/// node-wide budget of request bodies held in memory.
#[derive(Clone)]
struct Layers {
    policy: Arc<guard::Policy>,
    jobs_policy: Arc<guard::Policy>,
    budget: Arc<budget::BodyBudget>,
}

impl Layers {
    /// The layers `[api]` and `[face]` of `node` ask for; the L402 gate starts claiming.
    fn new(node: &Node) -> anyhow::Result<Layers> {
        // the routes sold per request (L402), when [api.prices] sets any
        let gate = l402::Gate::open(node)?;
        if let Some(g) = &gate {
            g.spawn_claims();
        }
        let policy = guard::Policy::new(
            &node.config.api.allowed_origins,
            node.config.api.token.as_deref(),
        )
        .with_gate(gate)
        .with_proxies(&node.config.face.per_ip_exempt);
        let face = &node.config.face;
        Ok(Layers {
            // the job routes take keys (NIP-98) too, each kept to its own jobs
            jobs_policy: Arc::new(policy.clone().with_keys(node.config.api.jobs_by_key)),
            policy: Arc::new(policy),
            budget: Arc::new(budget::BodyBudget::new(
                face.body_bytes_total,
                std::time::Duration::from_secs(face.body_timeout_secs),
                &face.per_ip_exempt,
            )),
        })
    }

    /// Routes behind `policy`'s guard, checked before bodies are read; the budget inside
    /// it, so a refused request claims nothing.
    fn guarded<S: Clone + Send + Sync + 'static>(
        &self,
        routes: Router<S>,
        policy: &Arc<guard::Policy>,
    ) -> Router<S> {
        routes
            .route_layer(axum::middleware::from_fn_with_state(
                self.budget.clone(),
                budget::limit,
            ))
            .route_layer(axum::middleware::from_fn_with_state(
                policy.clone(),
                guard::guard,
            ))
    }
}

/// The compute, proof, shard, ledger and peer APIs.
fn api_routes(s: &Services, layers: &Layers) -> Router<Arc<RelayState>> {
    let node = &s.node;
    let routes = Router::new()
        .route(
            "/v1/proofs/verify",
            axum::routing::post(proofs::verify::handle).with_state(s.verifier.clone()),
        )
        .route(
            "/v1/proofs/prove",
            axum::routing::post(proofs::prove::handle).with_state(s.prover.clone()),
        )
        .route(
            "/v1/models",
            get(inference::models).with_state(s.inference.clone()),
        )
        .route(
            "/v1/executors",
            get(inference::executors).with_state(s.inference.clone()),
        )
        .route(
            "/v1/completions",
            axum::routing::post(inference::completions).with_state(s.inference.clone()),
        )
        .route(
            "/v1/chat/completions",
            axum::routing::post(inference::chat_completions).with_state(s.inference.clone()),
        )
        .route(
            "/v1/shards",
            get(|State((db, ours)): State<(std::path::PathBuf, String)>| {
                blocking_json(move || crate::shards::list(&db, &ours))
            })
            .with_state((
                node.dir.join(crate::node::DB_FILE),
                node.keys.nostr_pubkey_hex(),
            )),
        )
        .route(
            "/v1/ledger",
            get(|State(dir): State<std::path::PathBuf>| {
                blocking_json(move || Ok(fleetmesh_ledger::store::standing(&dir)?))
            })
            .with_state(node.dir.join(crate::node::LEDGER_DIR)),
        )
        .route(
            "/v1/peers",
            get(
                |State((p, r)): State<(Arc<crate::peers::Peers>, Arc<Relay>)>| async move {
                    // the peers, and the load shedding: the rung, the strain with each key
                    let mut v = p.snapshot();
                    v["shedding_rung"] = r.shedding_rung().into();
                    v["strain"] = serde_json::to_value(r.strain()).unwrap_or_default();
                    axum::Json(v)
                },
            )
            .with_state((s.peers.clone(), s.relay.clone())),
        );
    layers.guarded(routes, &layers.policy)
}

/// The job API: submit, status, result, receipt.
fn job_routes(s: &Services, layers: &Layers) -> Router<Arc<RelayState>> {
    let routes = Router::new()
        .route(
            "/v1/jobs",
            axum::routing::post(jobs::submit).with_state(s.jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}",
            get(jobs::status).with_state(s.jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}/result",
            get(jobs::result).with_state(s.jobs.clone()),
        )
        .route(
            "/v1/jobs/{id}/receipt",
            get(jobs::receipt).with_state(s.jobs.clone()),
        );
    layers.guarded(routes, &layers.jobs_policy)
}

/// Blossom: upload, list, the operator's served counts, and the blobs themselves. The
/// upload handler checks the authorization before it reads the body, then streams it to
/// disk under its own size limit and timeout.
fn blob_routes(s: &Services) -> Router<Arc<RelayState>> {
    let node = &s.node;
    let store = blobs::Blossom::new(
        s.blobs.clone(),
        &node.config.blobs,
        node.config.api.token.as_deref(),
        &node.config.face.per_ip_exempt,
    );
    store.meter_peers(s.peers.clone());
    let cors = || axum::middleware::map_response(blobs::cors);
    Router::new()
        .route(
            "/upload",
            axum::routing::put(blobs::upload)
                .head(blobs::upload_check)
                .options(blobs::preflight)
                .layer(cors())
                .with_state(store.clone()),
        )
        .route(
            "/list/{pubkey}",
            get(blobs::list).layer(cors()).with_state(store.clone()),
        )
        .route(
            "/v1/blobs/served",
            // the operator's: the [api] token, or a loopback client when none is set
            get(blobs::served).with_state(store.clone()),
        )
        .route(
            "/{blob}",
            get(blobs::get_blob)
                .head(blobs::get_blob)
                .delete(blobs::delete)
                .options(blobs::preflight)
                .layer(cors())
                .with_state(store),
        )
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
