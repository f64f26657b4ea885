//! The node-wide budget for request bodies held in memory (`[face] body_bytes_total`).
//!
//! Each API route reads its body whole before it parses it (DIDComm messages, jobs,
//! proofs, completions); a route's own limit bounds one body, nothing bounded their sum:
//! 128 DIDComm posts of 4 MiB at once held 2 GiB. This middleware, behind the guard (a
//! refused request takes nothing), claims a body's bytes — its `Content-Length`, or
//! [`UNDECLARED`] for a body sent without one — from one budget shared by every route
//! before the body is read, and gives them back when the answer is made. A request that
//! finds the budget spent waits up to [`WAIT`] for others to finish, holding nothing but
//! its connection; then it is answered 503 `busy` with `Retry-After`. A request whose
//! declared body is larger than the route could take anyway is left to the route's limit
//! (413), and one larger than the whole budget is refused 413 here.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::Semaphore;

use crate::http::error::api_error;

/// Bytes claimed for a body sent without `Content-Length` (chunked): the largest any
/// route takes ([`fleetmesh_proto::didcomm::MAX_MESSAGE_BYTES`], 4 MiB).
pub const UNDECLARED: usize = fleetmesh_proto::didcomm::MAX_MESSAGE_BYTES;
/// How long a request waits for the budget before it is answered 503.
pub const WAIT: Duration = Duration::from_secs(2);
/// The budget's unit: permits count KiB.
const UNIT: usize = 1024;

/// The budget: `total` bytes, counted in KiB.
#[derive(Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    total: usize,
}

impl BodyBudget {
    /// A budget of `total` bytes.
    pub fn new(total: usize) -> BodyBudget {
        BodyBudget {
            permits: Arc::new(Semaphore::new(total.div_ceil(UNIT))),
            total,
        }
    }

    /// Bytes claimed now (for metrics and tests).
    pub fn in_use(&self) -> usize {
        (self.total.div_ceil(UNIT) - self.permits.available_permits()) * UNIT
    }
}

/// The middleware: see the module docs.
pub async fn limit(State(budget): State<Arc<BodyBudget>>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        return next.run(req).await;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let bytes = match declared {
        Some(0) => return next.run(req).await,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => UNDECLARED,
    };
    if bytes > budget.total {
        return api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "a body of {bytes} bytes is more than the node holds for all requests \
                 together ([face] body_bytes_total = {})",
                budget.total
            ),
        );
    }
    // a body past the largest any route takes is the route's to refuse (413), unread
    let claim = bytes.min(UNDECLARED).div_ceil(UNIT);
    let claim = u32::try_from(claim).unwrap_or(u32::MAX);
    let permit = tokio::time::timeout(WAIT, budget.permits.clone().acquire_many_owned(claim)).await;
    let Ok(Ok(permit)) = permit else {
        metrics::counter!("fleetmesh_http_body_budget_refused_total").increment(1);
        let mut r = api_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!(
                "the node holds as many request bodies as it takes at once ([face] \
                 body_bytes_total = {}); retry shortly",
                budget.total
            ),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    let held = || metrics::gauge!("fleetmesh_http_body_bytes_held").set(budget.in_use() as f64);
    held();
    let response = next.run(req).await;
    drop(permit);
    held();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_counts_kib() {
        let b = BodyBudget::new(10 * UNIT + 1);
        assert_eq!(b.in_use(), 0);
        let p = b.permits.clone().try_acquire_many_owned(3).unwrap();
        assert_eq!(b.in_use(), 3 * UNIT);
        drop(p);
        assert_eq!(b.in_use(), 0);
        assert!(b.permits.clone().try_acquire_many_owned(11).is_ok());
    }
}
