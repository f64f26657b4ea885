//! The node-wide budget for request bodies held in memory (`[face] body_bytes_total`).
//!
//! Each API route reads its body whole before it parses it (DIDComm messages, jobs,
//! proofs, completions); a route's own limit bounds one body, nothing bounded their sum:
//! 128 DIDComm posts of 4 MiB at once held 2 GiB. This middleware, behind the guard (a
//! refused request takes nothing), claims a body's bytes — its `Content-Length`, or
//! [`UNDECLARED`] for a body sent without one — from one budget shared by every route,
//! then reads the body itself within `[face] body_timeout_secs` (a body that stalls is
//! answered 408 and gives its claim back: stalled bodies cannot hold the budget) and hands
//! the route the bytes; the claim is given back once the answer is made.
//!
//! - A request that finds the budget spent waits up to [`WAIT`] for others to finish,
//!   holding nothing but its connection; then it is answered 503 `busy` with
//!   `Retry-After`.
//! - One client address may hold at most a quarter of the budget (at least the largest
//!   body, [`UNDECLARED`]); past it, 503 at once. Addresses in `[face] per_ip_exempt` (a
//!   reverse proxy on the box, whose clients all arrive from it) are not held to it.
//! - A body larger than any route takes (4 MiB) claims 4 MiB and is refused 413 once that
//!   much of it has arrived, as the route's own limit would refuse it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::Semaphore;

use crate::http::error::api_error;

/// Bytes claimed for a body sent without `Content-Length` (chunked), and the most any
/// body may be: the largest a route takes ([`fleetmesh_proto::didcomm::MAX_MESSAGE_BYTES`],
/// 4 MiB).
pub const UNDECLARED: usize = fleetmesh_proto::didcomm::MAX_MESSAGE_BYTES;
/// How long a request waits for the budget before it is answered 503.
pub const WAIT: Duration = Duration::from_secs(2);
/// The budget's unit: permits count KiB.
const UNIT: usize = 1024;

/// The budget: `total` bytes, counted in KiB, and what each client address holds of it.
#[derive(Debug)]
pub struct BodyBudget {
    permits: Arc<Semaphore>,
    total: usize,
    /// How long a body may take to arrive once its claim is granted.
    body_time: Duration,
    /// Addresses not held to a share (`[face] per_ip_exempt`).
    exempt: Vec<IpAddr>,
    /// Bytes each other address holds now.
    held: Mutex<HashMap<IpAddr, usize>>,
}

impl BodyBudget {
    /// A budget of `total` bytes, each body read within `body_time`, the addresses of
    /// `exempt` held to no share.
    pub fn new(total: usize, body_time: Duration, exempt: &[IpAddr]) -> BodyBudget {
        BodyBudget {
            permits: Arc::new(Semaphore::new(total.div_ceil(UNIT))),
            total,
            body_time,
            exempt: exempt.iter().map(|ip| ip.to_canonical()).collect(),
            held: Mutex::default(),
        }
    }

    /// Bytes claimed now.
    pub fn in_use(&self) -> usize {
        (self.total.div_ceil(UNIT) - self.permits.available_permits()) * UNIT
    }

    /// The most one address may hold at once.
    fn share(&self) -> usize {
        (self.total / 4).max(UNDECLARED).min(self.total)
    }

    /// Counts `bytes` against the share of `ip` (none for an exempt or unknown address):
    /// the count, given back when dropped; None past the share.
    fn take_share(self: &Arc<Self>, ip: Option<IpAddr>, bytes: usize) -> Option<Share> {
        let Some(ip) = ip
            .map(|ip| ip.to_canonical())
            .filter(|ip| !self.exempt.contains(ip))
        else {
            return Some(Share(None));
        };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let now = held.entry(ip).or_default();
        if *now + bytes > self.share() {
            return None;
        }
        *now += bytes;
        Some(Share(Some((self.clone(), ip, bytes))))
    }
}

/// Bytes counted against one address's share, given back when dropped.
struct Share(Option<(Arc<BodyBudget>, IpAddr, usize)>);

impl Drop for Share {
    fn drop(&mut self) {
        if let Some((budget, ip, bytes)) = self.0.take() {
            let mut held = budget.held.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(now) = held.get_mut(&ip) {
                *now -= bytes;
                if *now == 0 {
                    held.remove(&ip);
                }
            }
        }
    }
}

/// 503 `busy` with `Retry-After`, saying `why`.
fn busy(why: String) -> Response {
    metrics::counter!("fleetmesh_http_body_budget_refused_total").increment(1);
    let mut r = api_error(StatusCode::SERVICE_UNAVAILABLE, "busy", why);
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
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
    // a body past the largest any route takes claims that much, and is refused (413) once
    // that much of it has been read, as a route's own limit would
    let bytes = bytes.min(UNDECLARED);
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    let Some(share) = budget.take_share(peer, bytes) else {
        return busy(format!(
            "this address holds as many request bodies as one address may ({} bytes of \
             [face] body_bytes_total = {}); retry shortly",
            budget.share(),
            budget.total
        ));
    };
    let claim = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX);
    let permit = tokio::time::timeout(WAIT, budget.permits.clone().acquire_many_owned(claim)).await;
    let Ok(Ok(permit)) = permit else {
        return busy(format!(
            "the node holds as many request bodies as it takes at once ([face] \
             body_bytes_total = {}); retry shortly",
            budget.total
        ));
    };
    let held = || metrics::gauge!("fleetmesh_http_body_bytes_held").set(budget.in_use() as f64);
    held();
    // the body, read here within its time: one that stalls gives its claim back
    let (parts, body) = req.into_parts();
    let read = tokio::time::timeout(budget.body_time, axum::body::to_bytes(body, bytes)).await;
    let response = match read {
        Ok(Ok(whole)) => {
            next.run(Request::from_parts(parts, Body::from(whole)))
                .await
        }
        Ok(Err(e)) => api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "reading the body: {e} (more than its Content-Length, or than {UNDECLARED} bytes)"
            ),
        ),
        Err(_) => api_error(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the body did not arrive within {} s ([face] body_timeout_secs)",
                budget.body_time.as_secs()
            ),
        ),
    };
    drop((permit, share));
    held();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_counts_kib_and_each_address_holds_at_most_its_share() {
        let b = Arc::new(BodyBudget::new(
            32 << 20,
            Duration::from_secs(1),
            &["127.0.0.1".parse().unwrap()],
        ));
        assert_eq!(b.in_use(), 0);
        let p = b.permits.clone().try_acquire_many_owned(3).unwrap();
        assert_eq!(b.in_use(), 3 * UNIT);
        drop(p);
        assert_eq!(b.in_use(), 0);
        // a quarter of 32 MiB is 8 MiB: two 4 MiB bodies from one address, not three
        let a: IpAddr = "203.0.113.7".parse().unwrap();
        let one = b.take_share(Some(a), 4 << 20).unwrap();
        let two = b.take_share(Some(a), 4 << 20).unwrap();
        assert!(b.take_share(Some(a), 1).is_none());
        assert!(
            b.take_share(Some("203.0.113.8".parse().unwrap()), 4 << 20)
                .is_some()
        );
        // the proxy's address, and a mapped IPv4 form of it, hold no share
        for _ in 0..4 {
            std::mem::forget(b.take_share(Some("127.0.0.1".parse().unwrap()), 4 << 20));
            std::mem::forget(b.take_share(Some("::ffff:127.0.0.1".parse().unwrap()), 4 << 20));
        }
        assert!(
            b.take_share(Some("127.0.0.1".parse().unwrap()), 4 << 20)
                .is_some()
        );
        drop((one, two));
        assert!(b.take_share(Some(a), 8 << 20).is_some());
        // a small budget still takes one largest body from an address
        let small = Arc::new(BodyBudget::new(UNDECLARED, Duration::from_secs(1), &[]));
        assert!(small.take_share(Some(a), UNDECLARED).is_some());
    }
}
