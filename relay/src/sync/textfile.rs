//! A sync's outcome as Prometheus text for node_exporter's textfile collector
//! (`meshnode sync --metrics-file`): one gauge family per [`METRICS`] entry, each
//! labelled with the peer.

use super::SyncReport;

/// What `--metrics-file` holds, each gauge labelled with the peer: name, help.
pub const METRICS: &[(&str, &str)] = &[
    (
        "fleetmesh_sync_last_run_timestamp_seconds",
        "When the last sync with the peer started (Unix seconds).",
    ),
    (
        "fleetmesh_sync_success",
        "1 when the last sync with the peer completed, 0 when it failed (the peer unreachable, NEG-ERR, a broken protocol, the store).",
    ),
    (
        "fleetmesh_sync_duration_seconds",
        "How long the last sync with the peer took.",
    ),
    (
        "fleetmesh_sync_rounds",
        "Negentropy round trips of the last completed sync.",
    ),
    (
        "fleetmesh_sync_negentropy_bytes",
        "Negentropy message bytes of the last completed sync, by direction (up, down).",
    ),
    (
        "fleetmesh_sync_missing",
        "Events the last completed sync found missing, by side (here: the peer had them; there: this node had them).",
    ),
    (
        "fleetmesh_sync_events",
        "Events the last completed sync moved, by outcome (fetched, fetch_failed, pushed, push_refused).",
    ),
];

/// A label value as the text format writes it.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text of a sync with `peer` started at `unix` that took `took`: every
/// gauge of [`METRICS`] with its HELP and TYPE, the counts only when it completed.
pub fn render(
    peer: &str,
    unix: f64,
    took: std::time::Duration,
    report: Option<&SyncReport>,
) -> String {
    use std::fmt::Write as _;
    let peer = label(peer);
    let mut out = String::new();
    let mut gauge = |name: &str, extra: &str, value: f64| {
        if !out.contains(&format!("# TYPE {name} ")) {
            let help = METRICS
                .iter()
                .find(|(n, _)| *n == name)
                .map_or("", |(_, h)| *h);
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        }
        let _ = writeln!(out, "{name}{{peer=\"{peer}\"{extra}}} {value}");
    };
    gauge(
        "fleetmesh_sync_last_run_timestamp_seconds",
        "",
        unix.floor(),
    );
    gauge(
        "fleetmesh_sync_success",
        "",
        if report.is_some() { 1.0 } else { 0.0 },
    );
    gauge("fleetmesh_sync_duration_seconds", "", took.as_secs_f64());
    if let Some(r) = report {
        gauge("fleetmesh_sync_rounds", "", r.rounds as f64);
        for (dir, n) in [("up", r.neg_bytes_up), ("down", r.neg_bytes_down)] {
            gauge(
                "fleetmesh_sync_negentropy_bytes",
                &format!(",direction=\"{dir}\""),
                n as f64,
            );
        }
        for (side, n) in [("here", r.need), ("there", r.have)] {
            gauge(
                "fleetmesh_sync_missing",
                &format!(",side=\"{side}\""),
                n as f64,
            );
        }
        for (outcome, n) in [
            ("fetched", r.fetched),
            ("fetch_failed", r.fetch_failed),
            ("pushed", r.pushed),
            ("push_refused", r.push_refused),
        ] {
            gauge(
                "fleetmesh_sync_events",
                &format!(",outcome=\"{outcome}\""),
                n as f64,
            );
        }
    }
    out
}
