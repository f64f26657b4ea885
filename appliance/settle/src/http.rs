//! The bounded HTTP calls settlement makes (to a mint, to a Lightning node's REST API):
//! rustls on ring, 10 s to connect, a whole-request limit, answers read up to a size.

use std::io::Read as _;
use std::time::Duration;

/// A blocking client with `timeout` in all, trusting `extra_root` (PEM) beside the
/// system's roots when given.
pub(crate) fn client(
    timeout: Duration,
    extra_root: Option<&[u8]>,
) -> Result<reqwest::blocking::Client, String> {
    // rustls on ring, as everywhere in the workspace (a provider already installed, the
    // appliance's, is kept)
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut b = reqwest::blocking::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(timeout);
    if let Some(pem) = extra_root {
        let cert =
            reqwest::Certificate::from_pem(pem).map_err(|e| format!("TLS certificate: {e}"))?;
        b = b.add_root_certificate(cert);
    }
    b.build().map_err(|e| format!("HTTP client: {e}"))
}

/// Sends `req`; the status and at most `max` bytes of answer (more is an error).
pub(crate) fn send(
    req: reqwest::blocking::RequestBuilder,
    max: u64,
) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
    let resp = req.send().map_err(|e| e.to_string())?;
    let status = resp.status();
    let mut body = Vec::new();
    resp.take(max + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("reading the answer: {e}"))?;
    if body.len() as u64 > max {
        return Err(format!("answer over {max} bytes"));
    }
    Ok((status, body))
}
