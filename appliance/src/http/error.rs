//! The HTTP APIs' error body, one shape for every face: `{"error": {"code", "message"}}`
//! with its status (Blossom adds BUD-01's `X-Reason` header on top).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The API's error body, `{"error": {"code", "message"}}`, with `status`.
pub fn api_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"error": {"code": code, "message": message.into()}})),
    )
        .into_response()
}
