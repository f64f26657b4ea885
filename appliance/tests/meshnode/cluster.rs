//! `meshnode cluster`: nodes on loopback, peered in a topology, converge on an event
//! published at one end without anyone running `sync`; status and stop; bad input refused.

use super::peering::{holds, note, wait_until};
use super::*;

/// Stops the cluster in `dir` when dropped (a failed test leaves no nodes running).
struct Stop<'a>(&'a Path);

impl Drop for Stop<'_> {
    fn drop(&mut self) {
        let _ = run(&["cluster", "stop", "--dir", self.0.to_str().unwrap()]);
    }
}

#[test]
fn a_cluster_in_a_line_converges_reports_its_health_and_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let d = dir.to_str().unwrap();
    let o = run(&[
        "cluster",
        "start",
        "--nodes",
        "3",
        "--dir",
        d,
        "--topology",
        "line",
        "--interval-secs",
        "1",
    ]);
    let _stop = Stop(&dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let nodes: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(nodes.len(), 3);
    let ws = |n: &Value| n["url"].as_str().unwrap().replace("http://", "ws://") + "/";
    for n in &nodes {
        assert!(n["did"].as_str().unwrap().starts_with("did:nostr:"), "{n}");
    }
    // published at one end, held at the other: node 0 ↔ 1 ↔ 2
    let keys = fleetmesh_proto::NodeKeys::generate().unwrap();
    let e = note(&keys, "from node 0");
    runtime().block_on(publish_all(&ws(&nodes[0]), std::slice::from_ref(&e)));
    wait_until("node 2 holds node 0's event", || {
        holds(&ws(&nodes[2]), &e.id_hex())
    });
    // status: all healthy; a second start is refused
    let o = run(&["cluster", "status", "--dir", d]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert_eq!(
        stdout(&o).matches("\"healthy\":true").count(),
        3,
        "{}",
        stdout(&o)
    );
    let o = run(&["cluster", "start", "--nodes", "2", "--dir", d]);
    assert_usage_error(&o, "holds a running cluster");
    // stop: every node ends; then there is no cluster to ask about
    let o = run(&["cluster", "stop", "--dir", d]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["cluster", "status", "--dir", d]);
    assert_usage_error(&o, "no cluster here");
    let o = run(&["cluster", "start", "--nodes", "0", "--dir", d]);
    assert_usage_error(&o, "1 to 32");
}
