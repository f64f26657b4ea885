//! The HTTP APIs' one error type, [`ApiError`]: a status, a code and a message, answered
//! as `{"error": {"code", "message"}}` (503s with `Retry-After`). The libraries' errors
//! map to it here, in one place: the market's [`Refusal`] codes and the prover's errors
//! each get their status. Two faces keep their protocol's own shape on top of the same
//! statuses: the inference API answers OpenAI's error object, Blossom adds BUD-01's
//! `X-Reason` header.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use fleetmesh_market::Refusal;
use serde_json::json;

/// An API error: what the client did wrong, or why the node cannot answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable code for programs.
    pub code: String,
    /// What is wrong, for people.
    pub message: String,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let busy = self.status == StatusCode::SERVICE_UNAVAILABLE;
        let mut r = (
            self.status,
            axum::Json(json!({"error": {"code": self.code, "message": self.message}})),
        )
            .into_response();
        if busy {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        }
        r
    }
}

/// The market's refusals: `not_found` 404, `conflict` and `bad_transition` 409, `storage`
/// and `internal` 500, `busy` 503, anything else (a request that does not hold) 400.
impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        let status = match r.code {
            "not_found" => StatusCode::NOT_FOUND,
            "conflict" | "bad_transition" => StatusCode::CONFLICT,
            "storage" | "internal" => StatusCode::INTERNAL_SERVER_ERROR,
            "busy" => StatusCode::SERVICE_UNAVAILABLE,
            "quota" => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, r.code, r.message)
    }
}

/// The prover's errors, by `fleetmesh_prover::queue::error_code`: `malformed` 400,
/// `unknown_circuit` 404, `unsatisfied` 422, `busy` 503, `internal` 500.
impl From<fleetmesh_prover::Error> for ApiError {
    fn from(e: fleetmesh_prover::Error) -> ApiError {
        let code = fleetmesh_prover::queue::error_code(&e);
        let status = match code {
            "malformed" => StatusCode::BAD_REQUEST,
            "unknown_circuit" => StatusCode::NOT_FOUND,
            "unsatisfied" => StatusCode::UNPROCESSABLE_ENTITY,
            "busy" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, code, e.to_string())
    }
}

/// [`ApiError`] answered at once.
pub fn api_error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    ApiError::new(status, code, message).into_response()
}
