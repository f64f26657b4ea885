//! `POST /didcomm`: DIDComm v2 messages for the node ([`fleetmesh_didcomm`]). Open to anyone
//! (a message proves its own sender), but not to browsers: a request with an `Origin` or a
//! `Sec-Fetch-Site` other than `none` is refused, as is any content type but DIDComm's encrypted
//! or signed JSON, and any body over the size a message may have. The client's address is
//! the [`Source`] a mediator's quotas count forwards against (behind a reverse proxy, the
//! proxy's: one quota for all its clients); a refusal for now carries `Retry-After`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::http::error::api_error;
use fleetmesh_didcomm::{DidComm, ENCRYPTED, Outcome, SIGNED, Source};

/// `POST /didcomm`.
pub async fn post(
    State(dc): State<Arc<DidComm>>,
    client: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let browser = headers.contains_key(header::ORIGIN)
        || headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| !v.eq_ignore_ascii_case("none"));
    if browser {
        return api_error(
            StatusCode::FORBIDDEN,
            "cross_site",
            "DIDComm is not for web pages",
        );
    }
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if media != ENCRYPTED && media != SIGNED {
        return api_error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("send {ENCRYPTED} or {SIGNED}"),
        );
    }
    let source = client.map_or(Source::Unknown, |c| Source::Addr(c.0.0.ip()));
    match tokio::task::spawn_blocking(move || dc.handle(&body, &source)).await {
        Ok(Outcome::Reply(_, packed)) => {
            ([(header::CONTENT_TYPE, ENCRYPTED)], packed.to_string()).into_response()
        }
        Ok(Outcome::Accepted) => StatusCode::ACCEPTED.into_response(),
        Ok(Outcome::Refused(status, code, why)) => api_error(
            StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
            code,
            why,
        ),
        Ok(Outcome::Later(status, code, why, retry)) => {
            let mut r = api_error(
                StatusCode::from_u16(status).unwrap_or(StatusCode::TOO_MANY_REQUESTS),
                code,
                why,
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry));
            r
        }
        Err(_) => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the handler panicked",
        ),
    }
}
