//! The relay face: `GET /` upgrades to the relay WebSocket (NIP-01, its origin checked
//! against `[face] websocket_origins`) or, asked with `Accept: application/nostr+json`,
//! answers the NIP-11 document (CORS as NIP-11 requires), or gives a browser the status
//! page ([`crate::http::status`]); `GET /healthz` (the store's
//! health); `GET /metrics` is [`crate::http::metrics`].

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::ws::{WebSocketUpgrade, rejection::WebSocketUpgradeRejection};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::http::error::api_error;
use crate::http::guard::cors_any_origin;
use crate::http::state::RelayState;

/// NIP-11's media type.
const NOSTR_JSON: &str = "application/nostr+json";

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
