//! What a request to the node's HTTP APIs must show before its body is read: the guard in
//! front of the compute, proof and job routes.
//!
//! - **No cross-site driving.** A browser page on another site can send a `POST` with
//!   `Content-Type: text/plain` and no preflight. State-changing requests are refused
//!   (403) when `Sec-Fetch-Site` says `cross-site`, or when they carry an `Origin` that is
//!   neither this node's own nor in `[api] allowed_origins`. Allowed origins get CORS
//!   headers and their preflights are answered; other preflights get 403.
//! - **JSON only.** Their bodies must be `Content-Type: application/json` (415 otherwise),
//!   which a browser cannot send cross-site without a preflight.
//! - **Who is asking** ([`Principal`]): the operator — `Authorization: Bearer TOKEN` with
//!   the `[api] token`; on a node without a token, only a client on this box with no proxy
//!   in front ([`local_operator`]) — or a key, by a NIP-98 signature
//!   ([`fleetmesh_proto::nip98`]; one that does not hold is 401 with its reason), or nobody.
//!   An anonymous client is never the operator: it reads no job (401). Every
//!   state-changing request needs the operator, else 401 with `WWW-Authenticate` — except
//!   on a node without a token (which listens on loopback only), where anyone who reaches
//!   it may compute; the job routes also take a key (the market is open to buyers who
//!   sign, `[api] jobs_by_key`), and keep each key to its own jobs (see
//!   [`crate::http::jobs`]). A node listening on a non-loopback address must have a token
//!   (checked at start-up).
//!
//! - **Paid routes** (`[api.prices]`, [`crate::http::l402`]): a state-changing request to a
//!   priced route must carry a paid L402 credential (a stranger's proof of payment lets
//!   it in, as the token would), or the token; else `402` with a fresh challenge. A
//!   credential that does not hold is 401 with its reason; one that does is recorded as
//!   used after every other check passed, and released when the route refuses the
//!   request.
//!
//! Checked in the middleware, so a refused request's body is never read; the principal
//! travels to the handler as a request extension.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use sha2::{Digest as _, Sha256};

use crate::http::error::api_error;

/// The policy, from `[api]`.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Origins (`scheme://host[:port]`) whose pages may call the APIs; `*` for any.
    pub allowed_origins: Vec<String>,
    /// SHA-256 of the bearer token, when one is set.
    pub token: Option<[u8; 32]>,
    /// Whether a key (NIP-98) may make state-changing requests here, token or not.
    pub keys: bool,
    /// The priced routes, when `[api.prices]` sets any.
    pub gate: Option<Arc<crate::http::l402::Gate>>,
    /// `[face] per_ip_exempt`: where a reverse proxy on the box sits (its clients are
    /// strangers, never the operator).
    pub proxies: Vec<std::net::IpAddr>,
}

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The operator: the `[api] token`, or on a node without one a client on this box
    /// with no proxy in front ([`local_operator`]).
    Operator,
    /// A key that signed the request (NIP-98).
    Key(fleetmesh_proto::nip98::Signed),
    /// Nobody: a request with neither the token nor a signature (on a node without a
    /// token, from anywhere but a client the node counts as its operator).
    Anonymous,
    /// Whoever paid for this one request (L402).
    Paid(fleetmesh_settle::l402::Paid),
}

impl Policy {
    /// The policy of `[api]`.
    pub fn new(allowed_origins: &[String], token: Option<&str>) -> Policy {
        Policy {
            allowed_origins: allowed_origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            token: token.map(|t| Sha256::digest(t.as_bytes()).into()),
            keys: false,
            gate: None,
            proxies: Vec::new(),
        }
    }

    /// This policy, with `[face] per_ip_exempt` as where proxies sit.
    pub fn with_proxies(mut self, proxies: &[std::net::IpAddr]) -> Policy {
        self.proxies = proxies.to_vec();
        self
    }

    /// This policy, selling the routes `gate` prices.
    pub fn with_gate(mut self, gate: Option<Arc<crate::http::l402::Gate>>) -> Policy {
        self.gate = gate;
        self
    }

    /// This policy, letting keys (NIP-98) make state-changing requests when `keys`.
    pub fn with_keys(mut self, keys: bool) -> Policy {
        self.keys = keys;
        self
    }

    /// Who sent a request with `headers` from `peer` to `path_and_query` by `method`, at
    /// `now`; why not, when it carries a NIP-98 authorization that does not hold.
    fn principal(
        &self,
        method: &Method,
        path_and_query: &str,
        headers: &HeaderMap,
        peer: Option<std::net::IpAddr>,
        now: u64,
    ) -> Result<Principal, String> {
        let auth = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        if auth.starts_with("Nostr ") {
            let host = headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or_default();
            return fleetmesh_proto::nip98::check(auth, method.as_str(), host, path_and_query, now)
                .map(Principal::Key);
        }
        let operator = match &self.token {
            Some(want) => bearer_matches(headers, want),
            None => local_operator(peer, headers, &self.proxies),
        };
        Ok(if operator {
            Principal::Operator
        } else {
            Principal::Anonymous
        })
    }

    fn allows(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/').to_ascii_lowercase();
        self.allowed_origins
            .iter()
            .any(|o| o == "*" || *o == origin)
    }
}

/// Whether a request to a node without `[api] token` comes from its operator: a client on
/// this box (a loopback address) with no proxy in front — not from an address in `proxies`
/// (`[face] per_ip_exempt`, where a reverse proxy on the box sits: by default loopback
/// itself), and carrying no `Forwarded`, `X-Forwarded-For` or `X-Real-IP` header (a proxy
/// passing a stranger's request on). So a node without a token has no operator over HTTP
/// unless `per_ip_exempt = []` says no proxy is in front of it.
pub(crate) fn local_operator(
    peer: Option<std::net::IpAddr>,
    headers: &HeaderMap,
    proxies: &[std::net::IpAddr],
) -> bool {
    let Some(ip) = peer.map(|ip| ip.to_canonical()) else {
        return false;
    };
    let forwarded = ["forwarded", "x-forwarded-for", "x-real-ip"]
        .iter()
        .any(|h| headers.contains_key(*h));
    ip.is_loopback() && !forwarded && !proxies.iter().any(|p| p.to_canonical() == ip)
}

/// Whether the request's `Authorization: Bearer` token hashes (SHA-256) to `want`. The
/// digests are compared, in equal time for every wrong token of any length.
pub(crate) fn bearer_matches(headers: &HeaderMap, want: &[u8; 32]) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
    given.is_some_and(|t| {
        let got: [u8; 32] = Sha256::digest(t.trim().as_bytes()).into();
        got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    })
}

/// Whether `origin` names this node itself (the `Host` the request was sent to).
fn same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h))
}

/// The origin a browser sent, if any (`null` counts as a foreign one).
fn origin(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::ORIGIN)
        .map(|o| o.to_str().unwrap_or("null"))
}

/// Whether a browser request came from a page this node does not trust.
fn cross_site(policy: &Policy, headers: &HeaderMap) -> bool {
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    match origin(headers) {
        Some(o) if policy.allows(o) => false,
        Some(o) => !same_origin(o, headers),
        None => fetch_site.eq_ignore_ascii_case("cross-site"),
    }
}

fn cors(policy: &Policy, headers: &HeaderMap, response: &mut Response) {
    if let Some(o) = origin(headers).filter(|o| policy.allows(o))
        && let Ok(v) = HeaderValue::from_str(o)
    {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
}

/// The middleware: see the module docs.
pub async fn guard(State(policy): State<Arc<Policy>>, req: Request, next: Next) -> Response {
    let headers = req.headers().clone();
    if req.method() == Method::OPTIONS {
        if !origin(&headers).is_some_and(|o| policy.allows(o)) {
            return api_error(
                StatusCode::FORBIDDEN,
                "cross_site",
                "this origin is not in [api] allowed_origins",
            );
        }
        let mut r = StatusCode::NO_CONTENT.into_response();
        set_headers(
            r.headers_mut(),
            &[
                (header::ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, OPTIONS"),
                (
                    header::ACCESS_CONTROL_ALLOW_HEADERS,
                    "Authorization, Content-Type",
                ),
                (header::ACCESS_CONTROL_MAX_AGE, "600"),
            ],
        );
        cors(&policy, &headers, &mut r);
        return r;
    }
    let changes_state = !matches!(*req.method(), Method::GET | Method::HEAD);
    if changes_state && cross_site(&policy, &headers) {
        return api_error(
            StatusCode::FORBIDDEN,
            "cross_site",
            "a cross-site request; add the page's origin to [api] allowed_origins to allow it",
        );
    }
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let route = req.uri().path().to_owned();
    let priced = match &policy.gate {
        Some(g) if changes_state => g.price(&route).map(|p| (g, p)),
        _ => None,
    };
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let principal = match (priced, fleetmesh_settle::l402::is_l402(auth)) {
        (Some((gate, price)), true) => match gate.verify(auth, &route, price) {
            Ok(paid) => Principal::Paid(paid),
            Err(why) => return unauthorized(&why),
        },
        (None, true) => {
            return unauthorized("an L402 credential on a route this node does not price");
        }
        _ => match policy.principal(
            req.method(),
            path,
            &headers,
            peer,
            fleetmesh_proto::unix_now(),
        ) {
            Ok(p) => p,
            Err(why) => return unauthorized(&why),
        },
    };
    if let Some((gate, price)) = priced {
        // the token holder does not pay its own node; everyone else does
        let free = principal == Principal::Operator && policy.token.is_some();
        if !free && !matches!(principal, Principal::Paid(_)) {
            return gate.challenge(&route, price, peer).await;
        }
    }
    if changes_state {
        let allowed = match &principal {
            Principal::Operator | Principal::Paid(_) => true,
            // a key may where keys are let in, and anywhere on a node without a token
            Principal::Key(_) => policy.keys || policy.token.is_none(),
            // anyone who reaches a node without a token (on loopback only) may compute
            Principal::Anonymous => policy.token.is_none(),
        };
        if !allowed {
            return unauthorized("this node needs `Authorization: Bearer <[api] token>`");
        }
        let json = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return api_error(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "the body must be sent as Content-Type: application/json",
            );
        }
    }
    // a paid credential is spent last, once nothing else can refuse the request here
    let paid = match (&principal, priced) {
        (Principal::Paid(paid), Some((gate, _))) => {
            if let Err(why) = gate.redeem(paid, &route).await {
                return unauthorized(&why);
            }
            Some((gate.clone(), paid.clone()))
        }
        _ => None,
    };
    let mut req = req;
    req.extensions_mut().insert(principal);
    let mut response = next.run(req).await;
    if let Some((gate, paid)) = paid {
        gate.finish(paid, response.status()).await;
    }
    cors(&policy, &headers, &mut response);
    response
}

/// 401 saying `why`, with the schemes this node takes.
pub(crate) fn unauthorized(why: &str) -> Response {
    let mut r = api_error(StatusCode::UNAUTHORIZED, "unauthorized", why);
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"fleetmesh\", Nostr"),
    );
    r
}

/// Whether a WebSocket upgrade may go ahead: no `Origin` (not a browser), or one in
/// `allowed` (`*` for any).
pub fn websocket_origin_ok(allowed: &[String], headers: &HeaderMap) -> bool {
    match origin(headers) {
        None => true,
        Some(o) => {
            let o = o.trim_end_matches('/').to_ascii_lowercase();
            allowed
                .iter()
                .any(|a| a == "*" || a.trim_end_matches('/').eq_ignore_ascii_case(&o))
        }
    }
}

/// CORS headers allowing any origin and any header (Authorization named, as browsers
/// do not count it under `*`), for `methods`.
pub(crate) fn cors_any_origin(headers: &mut HeaderMap, methods: &'static str) {
    set_headers(
        headers,
        &[
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::ACCESS_CONTROL_ALLOW_HEADERS, "Authorization, *"),
            (header::ACCESS_CONTROL_ALLOW_METHODS, methods),
        ],
    );
}

/// Sets each header of `pairs` to its fixed value, replacing what was there.
pub(crate) fn set_headers(headers: &mut HeaderMap, pairs: &[(HeaderName, &'static str)]) {
    for (name, value) in pairs {
        headers.insert(name.clone(), HeaderValue::from_static(value));
    }
}
