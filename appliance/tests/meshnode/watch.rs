//! `meshnode watch`: the audit a monitoring probe runs, against a real node directory and
//! a real daemon — its exit code (0 healthy, 1 degraded, 2 failing or unreachable), its
//! lines and its JSON.

use std::os::unix::fs::PermissionsExt as _;

use serde_json::Value;

use super::{Daemon, init, meshnode, run, stdout};

fn watch(args: &[&str]) -> (i32, String) {
    let mut all = vec!["watch"];
    all.extend_from_slice(args);
    let o = run(&all);
    (o.status.code().unwrap(), stdout(&o))
}

fn level_of(json: &str, check: &str) -> String {
    let v: Value = serde_json::from_str(json).unwrap();
    v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} in {v}"))["level"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn watch_says_healthy_degraded_or_failing_and_exits_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    assert!(init(&dir, &[]).status.success());
    let d = dir.to_str().unwrap();
    // the node's files are fine, but nothing answers at its configured address
    let (code, out) = watch(&[d, "--node", "http://127.0.0.1:9", "--json"]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(level_of(&out, "daemon"), "failing");
    assert_eq!(level_of(&out, "keys"), "ok");
    assert_eq!(level_of(&out, "store"), "ok");
    // with the daemon running: healthy, exit 0, a line per finding
    let mut cmd = meshnode();
    cmd.args(["run", d, "--listen", "127.0.0.1:0"]);
    let daemon = Daemon::start(cmd);
    let url = daemon.url("");
    let (code, out) = watch(&[d, "--node", &url]);
    assert_eq!(code, 0, "{out}");
    let healthy = out.clone();
    for check in ["config", "keys", "store", "disk", "daemon", "rate-limits"] {
        assert!(
            out.lines()
                .any(|l| l.starts_with("ok") && l.contains(&format!(" {check}: "))),
            "{check}: {out}"
        );
    }
    // the URL alone works too (what a probe on another machine runs)
    let (code, out) = watch(&["--node", &url, "--json"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(level_of(&out, "daemon"), "ok");
    // asking for twice the free space: degraded, exit 1; for 32 times it: failing
    let free_mib: u64 = healthy
        .lines()
        .find_map(|l| l.split(" disk: ").nth(1))
        .and_then(|m| m.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no disk line in {healthy}"));
    let twice = (((free_mib + 1) * 2) << 20).to_string();
    let (code, out) = watch(&[d, "--node", &url, "--min-free-bytes", &twice]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("degraded") && l.contains(" disk: ")),
        "{out}"
    );
    let far = (((free_mib + 1) * 32) << 20).to_string();
    let (code, out) = watch(&[d, "--node", &url, "--min-free-bytes", &far]);
    assert_eq!(code, 2, "{out}");
    // a key directory others may enter: failing, naming the fix
    let keys = dir.join("keys");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (code, out) = watch(&[d, "--node", &url]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("chmod 700"), "{out}");
    std::fs::set_permissions(&keys, std::fs::Permissions::from_mode(0o700)).unwrap();
    drop(daemon);
    // a damaged database is failing, named by its path
    let jobs = dir.join("jobs.sqlite");
    std::fs::write(
        &jobs,
        b"this is not a database at all, not even close to one",
    )
    .unwrap();
    let (code, out) = watch(&[d, "--node", "http://127.0.0.1:9", "--json"]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(level_of(&out, "jobs"), "failing");
    assert!(out.contains("jobs.sqlite"), "{out}");
    // neither a directory nor a URL: a usage error
    let o = run(&["watch"]);
    assert_eq!(o.status.code(), Some(2));
}
