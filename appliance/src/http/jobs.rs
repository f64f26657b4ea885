//! The job API: `POST /v1/jobs`, `GET /v1/jobs/{id}`, `GET /v1/jobs/{id}/result`,
//! `GET /v1/jobs/{id}/receipt`.

use std::sync::Arc;

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::http::error::{ApiError, api_error};
use fleetmesh_market::jobs::JobRecord;
use fleetmesh_market::service::JobService;
use fleetmesh_market::{Refusal, refuse};

fn refusal_response(r: &Refusal) -> Response {
    ApiError::from(r.clone()).into_response()
}

/// `POST /v1/jobs`.
pub async fn submit(State(s): State<Arc<JobService>>, body: axum::body::Bytes) -> Response {
    let svc = s.clone();
    match tokio::task::spawn_blocking(move || svc.submit(&body)).await {
        Ok(Ok((rec, new))) => (
            StatusCode::ACCEPTED,
            axum::Json(json!({"job": rec.id, "state": rec.state.as_str(), "new": new})),
        )
            .into_response(),
        Ok(Err(r)) => refusal_response(&r),
        Err(_) => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the submission panicked",
        ),
    }
}

fn lookup(s: &JobService, id: &str) -> Result<JobRecord, Refusal> {
    s.job(id)?
        .ok_or_else(|| refuse("not_found", format!("no job {id}")))
}

/// `GET /v1/jobs/{id}`.
pub async fn status(State(s): State<Arc<JobService>>, UrlPath(id): UrlPath<String>) -> Response {
    match lookup(&s, &id) {
        Ok(j) => axum::Json(j.to_json()).into_response(),
        Err(r) => refusal_response(&r),
    }
}

/// `GET /v1/jobs/{id}/result`.
pub async fn result(State(s): State<Arc<JobService>>, UrlPath(id): UrlPath<String>) -> Response {
    match lookup(&s, &id) {
        Ok(JobRecord {
            result: Some(r), ..
        }) => {
            let blob =
                json!({"sha256": hex::encode(Sha256::digest(r.as_bytes())), "size": r.len()});
            axum::Json(json!({"job": id, "payload": r, "blob": blob})).into_response()
        }
        Ok(j) => api_error(
            StatusCode::CONFLICT,
            "not_finished",
            format!("job {id} is {}", j.state.as_str()),
        ),
        Err(r) => refusal_response(&r),
    }
}

/// `GET /v1/jobs/{id}/receipt`.
pub async fn receipt(State(s): State<Arc<JobService>>, UrlPath(id): UrlPath<String>) -> Response {
    match lookup(&s, &id) {
        Ok(JobRecord {
            receipt: Some(r), ..
        }) => ([(axum::http::header::CONTENT_TYPE, "application/json")], r).into_response(),
        Ok(j) => api_error(
            StatusCode::CONFLICT,
            "not_finished",
            format!("job {id} is {}", j.state.as_str()),
        ),
        Err(r) => refusal_response(&r),
    }
}
