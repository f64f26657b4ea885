//! The job API: `POST /v1/jobs`, `GET /v1/jobs/{id}`, `GET /v1/jobs/{id}/result`,
//! `GET /v1/jobs/{id}/receipt`.
//!
//! Each key has its own jobs: a request signed by a key (NIP-98, see
//! [`crate::http::guard`]) submits only asks that key signed (`mismatch` otherwise) and
//! sees only the jobs it bought — another's job is `not_found`, as a job that does not
//! exist, so that a key learns nothing of others' jobs. The operator sees every job; a
//! request from nobody (a node with a token, a request without it or a signature) is 401.
//! A submission paid by L402 (`[api.prices]`) is taken as the operator's would be: the
//! job is the buyer's who signed its ask, who reads it by NIP-98.
//! The NIP-98 authorization of a submission must commit to its body (`payload`).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::http::error::{ApiError, api_error};
use crate::http::guard::{Principal, unauthorized};
use fleetmesh_market::jobs::JobRecord;
use fleetmesh_market::service::JobService;
use fleetmesh_market::{Refusal, refuse};

fn refusal_response(r: &Refusal) -> Response {
    ApiError::from(r.clone()).into_response()
}

/// `POST /v1/jobs`.
pub async fn submit(
    State(s): State<Arc<JobService>>,
    Extension(who): Extension<Principal>,
    body: axum::body::Bytes,
) -> Response {
    let svc = s.clone();
    let by = match who {
        Principal::Key(signed) if !signed.covers(&body) => {
            return unauthorized(
                "the NIP-98 authorization's payload tag is not the SHA-256 of this body",
            );
        }
        Principal::Key(signed) => Some(signed.pubkey),
        _ => None,
    };
    let submitted = tokio::task::spawn_blocking(move || match by {
        // the guard let the key in: the node takes jobs by key
        Some(key) => fleetmesh_market::mailbox::submit_from(&svc, true, &key, &body),
        None => svc.submit(&body),
    })
    .await;
    match submitted {
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

/// Job `id`, when `who` may see it: the operator any, a key the ones it bought.
fn lookup(s: &JobService, id: &str, who: &Principal) -> Result<JobRecord, Box<Response>> {
    let key = match who {
        Principal::Operator => None,
        Principal::Key(signed) => Some(signed.pubkey.as_str()),
        Principal::Anonymous | Principal::Paid(_) => {
            return Err(Box::new(unauthorized(
                "reading a job needs the buyer's NIP-98 signature or the [api] token",
            )));
        }
    };
    match s.job(id) {
        Ok(Some(j)) if key.is_none_or(|k| k == j.buyer) => Ok(j),
        Ok(_) => Err(Box::new(refusal_response(&refuse(
            "not_found",
            format!("no job {id}"),
        )))),
        Err(r) => Err(Box::new(refusal_response(&r))),
    }
}

/// 409: job `j` has no result or receipt yet.
fn not_finished(j: &JobRecord) -> Response {
    api_error(
        StatusCode::CONFLICT,
        "not_finished",
        format!("job {} is {}", j.id, j.state.as_str()),
    )
}

/// `GET /v1/jobs/{id}`.
pub async fn status(
    State(s): State<Arc<JobService>>,
    Extension(who): Extension<Principal>,
    UrlPath(id): UrlPath<String>,
) -> Response {
    match lookup(&s, &id, &who) {
        Ok(j) => axum::Json(j.to_json()).into_response(),
        Err(r) => *r,
    }
}

/// `GET /v1/jobs/{id}/result`.
pub async fn result(
    State(s): State<Arc<JobService>>,
    Extension(who): Extension<Principal>,
    UrlPath(id): UrlPath<String>,
) -> Response {
    match lookup(&s, &id, &who) {
        Ok(JobRecord {
            result: Some(r), ..
        }) => {
            let blob =
                json!({"sha256": hex::encode(Sha256::digest(r.as_bytes())), "size": r.len()});
            axum::Json(json!({"job": id, "payload": r, "blob": blob})).into_response()
        }
        Ok(j) => not_finished(&j),
        Err(r) => *r,
    }
}

/// `GET /v1/jobs/{id}/receipt`.
pub async fn receipt(
    State(s): State<Arc<JobService>>,
    Extension(who): Extension<Principal>,
    UrlPath(id): UrlPath<String>,
) -> Response {
    match lookup(&s, &id, &who) {
        Ok(JobRecord {
            receipt: Some(r), ..
        }) => ([(axum::http::header::CONTENT_TYPE, "application/json")], r).into_response(),
        Ok(j) => not_finished(&j),
        Err(r) => *r,
    }
}
