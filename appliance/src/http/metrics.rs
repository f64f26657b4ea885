//! `GET /metrics`: every subsystem's figures in the Prometheus text format (0.0.4).
//!
//! The relay keeps its own counters ([`fleetmesh_relay::metrics`]); the prover, the
//! inference runtime, the job store and the blob store record through the `metrics`
//! facade, into the one recorder [`exporter`] installs for the process. The scrape is the
//! relay's text followed by the recorder's. [`DESCRIBED`] lists every facade metric with
//! its type and help text; `images/grafana/fleetmesh.json` charts them.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde_json::json;

use crate::http::state::RelayState;

/// Histogram buckets for times, in seconds: 1 ms to 10 min.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
];
/// Histogram buckets for batch sizes.
const SIZES: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// The kind of a described metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Observations in buckets.
    Histogram,
}

/// Every metric the libraries and the appliance record through the facade: name, kind,
/// help. The relay's own are not here (it renders them itself).
pub const DESCRIBED: &[(&str, Kind, &str)] = &[
    (
        "fleetmesh_build_info",
        Kind::Gauge,
        "Always 1; the labels say which build runs: version, commit, features, profile, backend.",
    ),
    (
        "fleetmesh_prover_proofs_total",
        Kind::Counter,
        "Proofs asked of the proving queue, by circuit and outcome (ok, busy, malformed, unknown_circuit, unsatisfied, internal).",
    ),
    (
        "fleetmesh_prover_proof_seconds",
        Kind::Histogram,
        "Time to make a proof, witness included, once it had its turn.",
    ),
    (
        "fleetmesh_prover_phase_seconds",
        Kind::Histogram,
        "Time per proving phase: witness, witness_map (NTT), msm_a_b1, msm_b2 (the G2 MSM), msm_c_h, self_check.",
    ),
    (
        "fleetmesh_prover_queue_depth",
        Kind::Gauge,
        "Proof requests admitted: proving or waiting for their turn.",
    ),
    (
        "fleetmesh_prover_table_bytes",
        Kind::Gauge,
        "Bytes the loaded circuits' precomputed MSM tables take ([compute] precompute_mib bounds it).",
    ),
    (
        "fleetmesh_verifier_proofs_total",
        Kind::Counter,
        "Proofs checked by the batch-verify gatherer, by verdict (valid, invalid, error, busy).",
    ),
    (
        "fleetmesh_verifier_batch_size",
        Kind::Histogram,
        "Proofs per batch verification.",
    ),
    (
        "fleetmesh_verifier_queue_depth",
        Kind::Gauge,
        "Proofs waiting for a batch.",
    ),
    (
        "fleetmesh_http_body_bytes_held",
        Kind::Gauge,
        "Bytes of request bodies claimed from the node-wide budget ([face] body_bytes_total) now.",
    ),
    (
        "fleetmesh_http_body_budget_refused_total",
        Kind::Counter,
        "Requests answered 503 because the node-wide body budget stayed spent for 2 s.",
    ),
    (
        "fleetmesh_inference_requests_total",
        Kind::Counter,
        "Inference API requests, by api, verification and HTTP status.",
    ),
    (
        "fleetmesh_inference_routed_total",
        Kind::Counter,
        "Requests for routed models forwarded to a remote executor, by executor and outcome (answered, failed).",
    ),
    (
        "fleetmesh_inference_tokens_total",
        Kind::Counter,
        "Tokens through the local runtime, by direction (prompt, generated).",
    ),
    (
        "fleetmesh_inference_time_to_first_token_seconds",
        Kind::Histogram,
        "Time from a generation's submission to its first token.",
    ),
    (
        "fleetmesh_inference_time_per_token_seconds",
        Kind::Histogram,
        "Time of one decoding step, per token it produced.",
    ),
    (
        "fleetmesh_inference_batch_size",
        Kind::Histogram,
        "Sequences in each forward pass of the batching worker.",
    ),
    (
        "fleetmesh_inference_queue_depth",
        Kind::Gauge,
        "Generations submitted and not yet in the batch.",
    ),
    (
        "fleetmesh_inference_quorum_total",
        Kind::Counter,
        "Quorum runs, by outcome (unanimous, majority, no-quorum, not_enough_executors).",
    ),
    (
        "fleetmesh_jobs_total",
        Kind::Counter,
        "Market jobs entering a state, by engine, mode and state (accepted, running, verified, failed, expired).",
    ),
    (
        "fleetmesh_blobs_bytes_total",
        Kind::Counter,
        "Blob bytes received (in) and served (out); per peer at GET /v1/blobs/served.",
    ),
    (
        "fleetmesh_mailbox_total",
        Kind::Counter,
        "Gift wraps addressed to the node read by its mailbox, by outcome (accepted: a job submitted, refused: answered with the reason, unopened, other: not a compute message).",
    ),
    (
        "fleetmesh_didcomm_total",
        Kind::Counter,
        "DIDComm messages POSTed to /didcomm or picked up from the node's mediator, by outcome (accepted: a job submitted, answered: a job's status, held: forwarded for another DID, delivered: held messages picked up, refused, unopened, other: a type not taken).",
    ),
    (
        "fleetmesh_didcomm_held_messages",
        Kind::Gauge,
        "Messages a mediating node holds for other DIDs until they pick them up.",
    ),
    (
        "fleetmesh_peering_rounds_total",
        Kind::Counter,
        "NIP-77 reconciliation rounds with each peer (a [[peering.peers]] URL or a federation peer's key), by outcome (ok, failed).",
    ),
    (
        "fleetmesh_peering_events_total",
        Kind::Counter,
        "Events moved with each peer of [peering], by direction (fetched, sent, refused: fetched and not stored, or not taken by the peer).",
    ),
    (
        "fleetmesh_peering_bytes_total",
        Kind::Counter,
        "Bytes of the peering rounds with each peer, both ways (negentropy messages, REQ/EVENT/OK traffic).",
    ),
    (
        "fleetmesh_gossip_messages_total",
        Kind::Counter,
        "Gossip announcements heard, by outcome (descriptor, heartbeat: accepted; foreign: another protocol digest, not peered; refused: invalid, not passed on).",
    ),
    (
        "fleetmesh_quic_hellos_total",
        Kind::Counter,
        "Hellos on the QUIC peer-link endpoint, by outcome (accepted, refused).",
    ),
    (
        "fleetmesh_ledger_decisions_total",
        Kind::Counter,
        "Windows judged by the accountability ledger, by severity (S0-S4) and remedy.",
    ),
    (
        "fleetmesh_ledger_complaints_total",
        Kind::Counter,
        "complaint/1.0 notices, by direction (sent to an overrunning peer, received about us).",
    ),
    (
        "fleetmesh_projections_published_total",
        Kind::Counter,
        "Projections published for standard clients (NIP-85 assertions, NIP-66 events).",
    ),
    (
        "fleetmesh_manifest_applies_total",
        Kind::Counter,
        "Manifest applies and reloads, by source (socket, reload, watch) and outcome (applied, refused: nothing changed).",
    ),
    (
        "fleetmesh_offers_total",
        Kind::Counter,
        "Offers answering open asks, by outcome (sent, or why none was).",
    ),
    (
        "fleetmesh_nwc_requests_total",
        Kind::Counter,
        "Nostr Wallet Connect requests answered from the wallet, by outcome (answered, refused, expired, unopened, unsupported-encryption), and the notifications sent (notified).",
    ),
    (
        "fleetmesh_nutzaps_total",
        Kind::Counter,
        "Nutzaps (NIP-61) to the node, by outcome (redeemed, again: redeemed before, refused: not for it to take, failed: the mint refused).",
    ),
    (
        "fleetmesh_l402_total",
        Kind::Counter,
        "L402 on priced API routes, by outcome (challenged, paid, released: the request was refused and the credential freed, refused, replayed, unissued: no invoice could be made, limited: an address past its invoices a minute).",
    ),
];

/// Counts an L402 event (`fleetmesh_l402_total{outcome}`).
pub fn l402(outcome: &'static str) {
    metrics::counter!("fleetmesh_l402_total", "outcome" => outcome).increment(1);
}

/// The process's recorder, installed on first use (histogram buckets for `_seconds` and
/// `_batch_size` metrics; help texts from [`DESCRIBED`]). Should another recorder already
/// be installed, a private one is kept so `/metrics` still answers.
pub fn exporter() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = || {
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_batch_size".into()), SIZES)
                })
                .expect("the bucket lists are not empty")
        };
        let handle = builder()
            .install_recorder()
            .unwrap_or_else(|_| builder().build_recorder().handle());
        for (name, kind, help) in DESCRIBED {
            match kind {
                Kind::Counter => ::metrics::describe_counter!(*name, *help),
                Kind::Gauge => ::metrics::describe_gauge!(*name, *help),
                Kind::Histogram => ::metrics::describe_histogram!(*name, *help),
            }
        }
        handle
    })
}

/// Sets `fleetmesh_build_info` for this build, running on `backend`.
pub fn build_info(backend: &str) {
    let mut features = Vec::new();
    if cfg!(feature = "wgpu") {
        features.push("wgpu");
    }
    if cfg!(feature = "cuda") {
        features.push("cuda");
    }
    ::metrics::gauge!("fleetmesh_build_info",
        "version" => env!("CARGO_PKG_VERSION"),
        "commit" => option_env!("FLEETMESH_COMMIT").unwrap_or("unknown"),
        "features" => features.join("+"),
        "profile" => if cfg!(debug_assertions) { "debug" } else { "release" },
        "backend" => backend.to_owned())
    .set(1.0);
}

/// `GET /metrics`: the relay's counters, then every other subsystem's.
pub async fn metrics(State(state): State<Arc<RelayState>>) -> Response {
    match state.relay.render_metrics().await {
        Ok(mut text) => {
            let handle = exporter();
            handle.run_upkeep();
            text.push_str(&handle.render());
            (
                [(
                    header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                text,
            )
                .into_response()
        }
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(json!({"error": {"code": "store", "message": e.to_string()}})),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::DESCRIBED;

    /// Metric names in `text` (`fleetmesh_…`), histogram series folded to their metric.
    fn names(text: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for (i, _) in text.match_indices("fleetmesh_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let name = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .map_or(name.clone(), str::to_owned);
            out.insert(name);
        }
        out
    }

    #[test]
    fn the_grafana_dashboard_charts_every_metric_and_only_metrics_the_node_exports() {
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../images/grafana/fleetmesh.json"))
                .expect("the dashboard is JSON");
        let mut charted = BTreeSet::new();
        let mut ids = BTreeSet::new();
        for panel in dashboard["panels"].as_array().expect("panels") {
            assert!(ids.insert(panel["id"].as_u64().expect("an id")), "{panel}");
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().expect("a PromQL expression");
                assert!(expr.contains("instance=~\"$instance\""), "{expr}");
                charted.extend(names(expr));
            }
        }
        // what the node exports: the relay's own text, its output gauge, and the facade's
        let mut exported = names(&fleetmesh_relay::metrics::Metrics::default().render(0, 0));
        exported.insert("fleetmesh_relay_output_queued_bytes".into());
        exported.insert("fleetmesh_relay_shedding_rung".into());
        exported.extend(DESCRIBED.iter().map(|(n, _, _)| (*n).to_owned()));
        // and what `meshnode sync --metrics-file` leaves for node_exporter
        exported.extend(
            fleetmesh_relay::sync::textfile::METRICS
                .iter()
                .map(|(n, _)| (*n).to_owned()),
        );
        assert_eq!(charted, exported);
    }
}
