//! The relay face: `GET /` upgrades to the relay WebSocket (NIP-01, its origin checked
//! against `[face] websocket_origins`) or, asked with `Accept: application/nostr+json`,
//! answers the NIP-11 document (CORS as NIP-11 requires), or gives a browser the status
//! page ([`crate::http::status`]); `GET /healthz` (the store's
//! health); `GET /metrics` is [`crate::http::metrics`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fleetmesh_relay::face::Relay;
use fleetmesh_schemas::SchemaSet;
use serde_json::json;

use crate::http::error::api_error;
use crate::http::guard::cors_any_origin;
use crate::node::Node;

/// NIP-11's media type.
const NOSTR_JSON: &str = "application/nostr+json";

/// What the relay face's handlers share.
pub struct RelayState {
    /// The NIP-11 document, serialized; replaced when `[jobs]` changes live.
    pub nip11: Arc<std::sync::RwLock<String>>,
    /// The node's Nostr key, hex.
    pub pubkey: String,
    /// When the node started.
    pub started: Instant,
    /// The relay.
    pub relay: Arc<Relay>,
    /// `[face] websocket_origins`.
    pub websocket_origins: Vec<String>,
    /// What the status page shows.
    pub status: crate::http::status::Status,
    /// The node's DID document, serialized at start-up from its descriptor.
    pub did_document: String,
}

/// NIPs this build serves; 77 is added when negentropy is enabled.
const BASE_NIPS: &[u16] = &[1, 9, 11, 40, 42];

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
            // the mints a priced job's Cashu escrow may be drawn on
            "settlement": {"mints": node.config.settlement.mints},
            // the API routes sold per request by L402, in sats
            "api": {"prices": node.config.api.prices},
        },
    })
}

/// `GET /`: the WebSocket upgrade, the NIP-11 document, or a line saying what this is.
pub async fn root(
    State(state): State<Arc<RelayState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    headers: HeaderMap,
) -> Response {
    if let Ok(ws) = ws {
        if !crate::http::guard::websocket_origin_ok(&state.websocket_origins, &headers) {
            return api_error(
                StatusCode::FORBIDDEN,
                "cross_site",
                "this origin is not in [face] websocket_origins",
            );
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned);
        return state.relay.clone().upgrade(ws, peer, host);
    }
    if accepts(&headers, NOSTR_JSON) {
        let mut response = (
            [(header::CONTENT_TYPE, HeaderValue::from_static(NOSTR_JSON))],
            state
                .nip11
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        )
            .into_response();
        cors_any_origin(response.headers_mut(), "GET, OPTIONS");
        response
    } else if accepts(&headers, "text/html") {
        crate::http::status::page(state).await
    } else {
        format!(
            "fleetmesh node {}\nThis is a Nostr relay endpoint: ask with 'Accept: {NOSTR_JSON}' for its NIP-11 document.\n",
            state.pubkey
        )
        .into_response()
    }
}

/// Whether a request's `Accept` header names `media` (parameters and quality ignored).
pub fn accepts(headers: &HeaderMap, media: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|m| m.trim().starts_with(media)))
}

/// `OPTIONS /`: NIP-11's CORS preflight.
pub async fn preflight() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    cors_any_origin(response.headers_mut(), "GET, OPTIONS");
    response
}

/// `GET /.well-known/did.json`: the node's DID document (did:nostr), readable from any
/// origin like NIP-11.
pub async fn did_document(State(state): State<Arc<RelayState>>) -> Response {
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        state.did_document.clone(),
    )
        .into_response();
    cors_any_origin(response.headers_mut(), "GET, OPTIONS");
    response
}

/// `GET /healthz`: 200 `ok`, or 503 `degraded` once a store operation has failed since
/// start-up (a damaged or full disk needs the operator; a restart re-checks the files) or
/// a GPU serving a model stopped answering (`inference.device_fault`: its requests fail;
/// a restart reopens the device).
pub async fn healthz(State(state): State<Arc<RelayState>>) -> Response {
    let (errors, last) = state.relay.metrics().store_errors();
    let fault = fleetmesh_inference::model::device_fault();
    let healthy = errors == 0 && fault.is_none();
    let body = json!({
        "status": if healthy { "ok" } else { "degraded" },
        "pubkey": state.pubkey,
        "uptime_secs": state.started.elapsed().as_secs(),
        "store": {"errors": errors, "last_error": last},
        "inference": {"device_fault": fault},
    });
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(body)).into_response()
}
