//! The status page: what a browser gets asking `GET /` (`Accept: text/html`) — the node's
//! identity and DID, health, protocol digest, prover backend and devices, models and
//! circuits served, recent jobs, peers and the relay's figures, on one page of plain HTML
//! and inline CSS. No script, no external asset: the page's Content-Security-Policy
//! forbids both, so a hostile value that slipped through escaping could still not run.
//!
//! The page is as public as the NIP-11 document (it says nothing NIP-11 does not, plus
//! aggregate figures); recent jobs show engine, mode, state and time, never a buyer.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::http::state::RelayState;

/// Jobs listed under "recent jobs".
const RECENT_JOBS: usize = 10;
/// Circuits listed at most.
const MAX_CIRCUITS: usize = 100;

/// The page's Content-Security-Policy: nothing but its own inline style and a data: icon
/// (so the browser does not ask for `/favicon.ico`).
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page, with its security headers.
pub async fn page(state: Arc<RelayState>) -> Response {
    let html = tokio::task::spawn_blocking(move || render(&state))
        .await
        .unwrap_or_else(|_| "<!doctype html><title>error</title>internal error".into());
    let mut r = html.into_response();
    crate::http::guard::set_headers(
        r.headers_mut(),
        &[
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-store"),
        ],
    );
    r
}

/// `s` with HTML's five special characters escaped.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One table row of a label and an (escaped) value.
fn row(out: &mut String, label: &str, value: &str) {
    let _ = writeln!(
        out,
        "<tr><th>{}</th><td>{}</td></tr>",
        esc(label),
        esc(value)
    );
}

/// The installed circuits' names, sorted (at most [`MAX_CIRCUITS`]).
fn circuits(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("circuit.zkey").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .take(MAX_CIRCUITS)
        .collect();
    names.sort();
    names
}

fn render(state: &RelayState) -> String {
    let s = &state.status;
    let m = state.relay.metrics();
    let (store_errors, last_error) = m.store_errors();
    let mut out = String::with_capacity(8192);
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\"><title>{name}</title><style>\
         body{{font:15px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:60rem;padding:0 1rem;color:#1c1c1c}}\
         h1{{font-size:1.5rem;margin-bottom:.2rem}}h2{{font-size:1.1rem;margin-top:1.8rem;border-bottom:1px solid #ddd}}\
         table{{border-collapse:collapse;width:100%}}th,td{{text-align:left;padding:.25rem .6rem .25rem 0;vertical-align:top}}\
         th{{font-weight:600;white-space:nowrap;width:14rem}}code,.mono{{font-family:ui-monospace,monospace;word-break:break-all}}\
         .ok{{color:#17702a;font-weight:600}}.bad{{color:#a4161a;font-weight:600}}.muted{{color:#666}}\
         @media (prefers-color-scheme:dark){{body{{background:#161616;color:#e6e6e6}}.muted{{color:#9a9a9a}}h2{{border-color:#333}}}}\
         </style></head><body>\n<h1>{name}</h1><p class=\"muted\">fleetmesh node · {class} · version {version}</p>\n",
        name = esc(&s.name),
        class = esc(&s.class),
        version = env!("CARGO_PKG_VERSION"),
    );

    out.push_str("<h2>Health</h2><table>\n");
    let health = if store_errors == 0 {
        "<span class=\"ok\">ok</span>".to_owned()
    } else {
        format!(
            "<span class=\"bad\">degraded</span>: {store_errors} store errors, the last: {}",
            esc(last_error.as_deref().unwrap_or(""))
        )
    };
    let _ = writeln!(
        out,
        "<tr><th>status</th><td id=\"health\">{health}</td></tr>"
    );
    row(
        &mut out,
        "up for",
        &format!("{} s", state.started.elapsed().as_secs()),
    );
    out.push_str("</table>\n<h2>Identity</h2><table>\n");
    let _ = writeln!(
        out,
        "<tr><th>public key</th><td class=\"mono\" id=\"pubkey\">{}</td></tr>",
        esc(&state.pubkey)
    );
    let _ = writeln!(
        out,
        "<tr><th>DID</th><td class=\"mono\" id=\"did\">{}</td></tr>",
        esc(&s.did)
    );
    row(&mut out, "protocol digest", &s.protocol_digest);
    row(&mut out, "descriptor event", &s.descriptor);
    out.push_str("</table>\n<h2>Compute</h2><table>\n");
    row(&mut out, "prover backend", &s.backend);
    row(&mut out, "devices", &s.devices);
    let circuits = circuits(&s.circuits);
    row(
        &mut out,
        "circuits",
        &if circuits.is_empty() {
            format!("none installed (under {})", s.circuits.display())
        } else {
            circuits.join(", ")
        },
    );
    let models = s.inference.summary();
    if models.is_empty() {
        row(&mut out, "models", "none served");
    }
    for (id, digest, engine, executors) in models {
        row(
            &mut out,
            &format!("model {id}"),
            &format!(
                "{engine}, digest {digest}, executors: {}",
                executors.join(", ")
            ),
        );
    }
    let offer = s.jobs.limits();
    let words = |w: Vec<&str>| w.join(", ");
    row(
        &mut out,
        "jobs offered",
        &format!(
            "{} under {}; {} at once",
            words(offer.engines.iter().map(|e| e.as_str()).collect()),
            words(offer.modes.iter().map(|m| m.as_str()).collect()),
            offer.workers
        ),
    );
    for (engine, p) in &offer.prices {
        row(
            &mut out,
            &format!("price {engine}"),
            &format!("{} {} per {} {}", p.amount, p.unit, p.quantity, p.per),
        );
    }
    out.push_str("</table>\n<h2>Recent jobs</h2>\n");
    match s.jobs.recent(RECENT_JOBS) {
        Ok(jobs) if jobs.is_empty() => out.push_str("<p class=\"muted\">none yet</p>\n"),
        Ok(jobs) => {
            out.push_str(
                "<table><tr><th>updated</th><th>engine</th><th>mode</th><th>state</th></tr>\n",
            );
            for j in jobs {
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    fleetmesh_attest::x509::format_rfc3339(j.updated_at as i64),
                    esc(j.engine.as_str()),
                    esc(j.mode.as_str()),
                    esc(j.state.as_str())
                );
            }
            out.push_str("</table>\n");
        }
        Err(e) => {
            let _ = writeln!(
                out,
                "<p class=\"bad\">the job store failed: {}</p>",
                esc(&e.to_string())
            );
        }
    }
    out.push_str(
        "<h2>Peers</h2><p class=\"muted\">none: this node does not discover peers yet \
         (it serves its relay and APIs to whoever connects).</p>\n<h2>Relay</h2><table>\n",
    );
    for (label, v) in [
        ("connections open", m.connections_open.load(Relaxed)),
        ("subscriptions open", m.subscriptions_open.load(Relaxed)),
        ("events received", m.events_received.load(Relaxed)),
        ("events stored", m.events_stored.load(Relaxed)),
        ("REQs served", m.reqs.load(Relaxed)),
    ] {
        row(&mut out, label, &v.to_string());
    }
    out.push_str(
        "</table>\n<p class=\"muted\">Machine-readable: <a href=\"/healthz\">/healthz</a>, \
         <a href=\"/metrics\">/metrics</a>, and the NIP-11 document at / with \
         <code>Accept: application/nostr+json</code>.</p>\n</body></html>\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::esc;

    #[test]
    fn values_are_escaped() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }
}
