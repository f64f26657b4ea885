//! The Blossom routes (BUD-01, BUD-02, BUD-06): authorization from the headers before any
//! body, uploads streamed to disk, blobs streamed from it, the operator's served table.

use super::auth::Authorized;
use super::*;

/// Checks the request's `Authorization: Nostr …` for `verb` (and blob `hash`, when given)
/// now ([`super::auth::check_authorization`]); the signer and the hashes it lists, or why
/// not (answered as 401).
pub(super) fn authorize(
    headers: &HeaderMap,
    verb: &str,
    hash: Option<&str>,
) -> Result<Authorized, String> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| "an Authorization: Nostr header is required".to_string())?;
    super::auth::check_authorization(value, verb, hash, unix_now())
}

/// BUD-06's `X-SHA-256`: `None` when absent; a 400 when malformed.
pub(super) fn declared_hash(headers: &HeaderMap) -> Result<Option<String>, Refusal> {
    let Some(v) = headers.get("x-sha-256") else {
        return Ok(None);
    };
    match v.to_str().map(str::trim) {
        Ok(h) if is_hash(h) => Ok(Some(h.to_string())),
        _ => Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "X-SHA-256 must be 64 lowercase hex digits",
        )),
    }
}

/// A length header: `None` when absent; a 400 when not a number.
pub(super) fn length(headers: &HeaderMap, name: &str) -> Result<Option<u64>, Refusal> {
    let Some(v) = headers.get(name) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|s| digits(s.trim()))
        .map(Some)
        .ok_or_else(|| {
            Refusal::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("{name} must be a number of bytes"),
            )
        })
}

pub(super) fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}")
}

/// BUD-01: every response carries `Access-Control-Allow-Origin: *` (browser clients), and
/// `X-Content-Type-Options: nosniff` (a browser takes each body for what it says it is).
pub async fn cors(mut r: Response) -> Response {
    crate::http::guard::set_headers(
        r.headers_mut(),
        &[
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
    );
    r
}

/// BUD-01: the preflight answer for the blob routes.
pub async fn preflight() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    crate::http::guard::cors_any_origin(r.headers_mut(), "GET, HEAD, PUT, DELETE, OPTIONS");
    r.headers_mut().insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    r
}

/// `GET /<sha256>` and `HEAD /<sha256>`.
pub async fn get_blob(
    State(s): State<Arc<Blossom>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    UrlPath(name): UrlPath<String>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let Some(hash) = hash_of(&name) else {
        return fail(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such endpoint or blob",
        );
    };
    let Some(desc) = s.descriptor(&base_url(&headers), &hash) else {
        return fail(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no blob {hash}"),
        );
    };
    let media = desc["type"]
        .as_str()
        .unwrap_or("application/octet-stream")
        .to_string();
    let gone = || {
        fail(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("blob {hash} is gone"),
        )
    };
    let Some(path) = s.store.path_of(&hash) else {
        return gone();
    };
    let Ok(mut file) = tokio::fs::File::open(path).await else {
        return gone();
    };
    let Ok(size) = file.metadata().await.map(|m| m.len()) else {
        return gone();
    };
    let mut h = blob_headers(&media, &hash);
    // If-Range: a range only of this very blob (its ETag), else the whole of it
    let if_range_ok = headers
        .get(header::IF_RANGE)
        .is_none_or(|v| v.as_bytes() == format!("\"{hash}\"").as_bytes());
    let range = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .filter(|_| if_range_ok);
    let (status, start, len) = match span(range, size) {
        Span::Whole => (StatusCode::OK, 0, size),
        Span::Part { start, end } => {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{end}/{size}")) {
                h.insert(header::CONTENT_RANGE, v);
            }
            (StatusCode::PARTIAL_CONTENT, start, end - start + 1)
        }
        Span::Unsatisfiable => {
            let mut r = fail(
                StatusCode::RANGE_NOT_SATISFIABLE,
                "range_not_satisfiable",
                format!("blob {hash} has {size} bytes"),
            );
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            r.headers_mut()
                .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
            return r;
        }
    };
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if method == Method::HEAD {
        return (status, h).into_response();
    }
    if file.seek(SeekFrom::Start(start)).await.is_err() {
        return gone();
    }
    // the peer: the key that authorized the read, if any, else the address
    let who = authorize(&headers, "get", None)
        .map(|a| a.pubkey)
        .unwrap_or_else(|_| peer.ip().to_canonical().to_string());
    let store = s.clone();
    // read and counted chunk by chunk as the client takes them
    let chunks = futures_util::stream::unfold(
        (file, len, store, who),
        |(mut file, left, store, who)| async move {
            if left == 0 {
                return None;
            }
            let mut buf = vec![0u8; (left.min(CHUNK as u64)) as usize];
            let read = match file.read(&mut buf).await {
                Ok(0) => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the blob file is shorter than it was",
                )),
                Ok(n) => Ok(n),
                Err(e) => Err(e),
            };
            match read {
                Ok(n) => {
                    buf.truncate(n);
                    store.count(&who, n as u64);
                    Some((Ok(Bytes::from(buf)), (file, left - n as u64, store, who)))
                }
                // ends the body early: the client sees a short response, not a wrong one
                Err(e) => Some((Err(e), (file, 0, store, who))),
            }
        },
    );
    (status, h, Body::from_stream(chunks)).into_response()
}

/// `PUT /upload`: see the module docs.
pub async fn upload(State(s): State<Arc<Blossom>>, headers: HeaderMap, body: Body) -> Response {
    // everything that can refuse without the body is checked before it is read
    let declared = match declared_hash(&headers) {
        Ok(d) => d,
        Err(r) => return r.into_response(),
    };
    let auth = match authorize(&headers, "upload", declared.as_deref()) {
        Ok(a) => a,
        Err(why) => return fail(StatusCode::UNAUTHORIZED, "unauthorized", why),
    };
    if declared.is_none() && auth.x.is_empty() {
        return fail(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the authorization lists no blob (an x tag) and no X-SHA-256 was sent",
        );
    }
    match length(&headers, header::CONTENT_LENGTH.as_str()) {
        Err(r) => return r.into_response(),
        Ok(Some(n)) if n > MAX_BLOB as u64 => return too_large().into_response(),
        Ok(Some(n)) => {
            if let Err(r) = s.within_quota(&auth.pubkey, declared.as_deref(), n) {
                return r.into_response();
            }
        }
        Ok(None) => {}
    }
    let media = clean_media(headers.get(header::CONTENT_TYPE));
    let (partial, hash, size) = match s.receive(body).await {
        Ok(r) => r,
        Err(r) => return r.into_response(),
    };
    match &declared {
        Some(d) if *d != hash => {
            return fail(
                StatusCode::BAD_REQUEST,
                "hash_mismatch",
                format!("the body's SHA-256 is {hash}, not the declared X-SHA-256 {d}"),
            );
        }
        None if !auth.x.contains(&hash) => {
            return fail(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!("the authorization does not list blob {hash} (the body's SHA-256)"),
            );
        }
        _ => {}
    }
    let owner = (auth.pubkey.as_str(), s.per_key_bytes);
    match s.store.place(partial, &hash, size, &media, owner) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::QuotaExceeded => {
            return over_quota(e.to_string()).into_response();
        }
        Err(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, "storage", e.to_string()),
    }
    metrics::counter!("fleetmesh_blobs_bytes_total", "direction" => "in").increment(size);
    s.meter(&auth.pubkey, size, 0);
    match s.descriptor(&base_url(&headers), &hash) {
        Some(d) => axum::Json(d).into_response(),
        None => fail(
            StatusCode::INTERNAL_SERVER_ERROR,
            "storage",
            "the blob vanished",
        ),
    }
}

/// `HEAD /upload` (BUD-06): whether `PUT /upload` would take the blob described by
/// `X-SHA-256`, `X-Content-Length` and `X-Content-Type` with this Authorization.
pub async fn upload_check(State(s): State<Arc<Blossom>>, headers: HeaderMap) -> Response {
    let declared = match declared_hash(&headers) {
        Ok(Some(d)) => d,
        Ok(None) => {
            return fail(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "X-SHA-256 is required",
            );
        }
        Err(r) => return r.into_response(),
    };
    let auth = match authorize(&headers, "upload", Some(&declared)) {
        Ok(a) => a,
        Err(why) => return fail(StatusCode::UNAUTHORIZED, "unauthorized", why),
    };
    match length(&headers, "x-content-length") {
        Err(r) => r.into_response(),
        Ok(None) => fail(
            StatusCode::LENGTH_REQUIRED,
            "length_required",
            "X-Content-Length is required",
        ),
        Ok(Some(n)) if n > MAX_BLOB as u64 => too_large().into_response(),
        // every media type is taken (active ones are served as attachments)
        Ok(Some(n)) => match s.within_quota(&auth.pubkey, Some(&declared), n) {
            Ok(()) => StatusCode::OK.into_response(),
            Err(r) => r.into_response(),
        },
    }
}

/// `DELETE /<sha256>`.
pub async fn delete(
    State(s): State<Arc<Blossom>>,
    UrlPath(name): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let Some(hash) = hash_of(&name) else {
        return fail(StatusCode::NOT_FOUND, "not_found", "no such blob");
    };
    let owner = match authorize(&headers, "delete", Some(&hash)) {
        Ok(a) => a.pubkey,
        Err(why) => return fail(StatusCode::UNAUTHORIZED, "unauthorized", why),
    };
    match s.store.release(&hash, &owner) {
        Ok(Released::NotClaimed) => {
            return fail(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("{owner} did not upload {hash}"),
            );
        }
        Ok(Released::Kept | Released::Removed) => {}
        Err(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, "storage", e.message),
    }
    axum::Json(json!({"deleted": hash})).into_response()
}

/// `GET /list/<pubkey>`.
pub async fn list(
    State(s): State<Arc<Blossom>>,
    UrlPath(pubkey): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let hashes = match s.store.claimed_by(&pubkey) {
        Ok(h) => h,
        Err(_) => return fail(StatusCode::INTERNAL_SERVER_ERROR, "storage", "listing"),
    };
    let base = base_url(&headers);
    let out: Vec<Value> = hashes
        .iter()
        .filter_map(|h| s.descriptor(&base, h))
        .collect();
    axum::Json(out).into_response()
}

/// `GET /v1/blobs/served`: bytes served per peer, to the operator only.
pub async fn served(
    State(s): State<Arc<Blossom>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.operator(&headers, peer) {
        return r.into_response();
    }
    let served = s
        .served
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    axum::Json(json!({
        "bytes_served": served.bytes,
        "max_peers": served.cap,
        "evicted": served.evicted,
    }))
    .into_response()
}
