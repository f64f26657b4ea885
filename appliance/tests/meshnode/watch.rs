//! `meshnode watch`: the audit a monitoring probe runs, against a real node directory and
//! a real daemon — its exit code (0 healthy, 1 degraded, 2 failing or unreachable), its
//! lines and its JSON — and the control socket beside it: `meshnode ctl` and
//! `meshnode apply`.

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
    for check in [
        "config",
        "keys",
        "store",
        "disk",
        "daemon",
        "rate-limits",
        "queues",
    ] {
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
    // and as the image's HEALTHCHECK runs it
    assert_eq!(watch(&["--node", &url, "--healthcheck"]).0, 0);
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
    // as a container's health probe: 1 for anything but healthy (Docker reserves 2)
    let (code, out) = watch(&["--node", "http://127.0.0.1:9", "--healthcheck"]);
    assert_eq!(code, 1, "{out}");
    // neither a directory nor a URL: a usage error
    let o = run(&["watch"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_control_socket_answers_its_owner_and_one_daemon_per_node() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    assert!(init(&dir, &[]).status.success());
    let d = dir.to_str().unwrap();
    let sock = dir.join("meshnode.sock");
    // something else where the socket goes: refused, named, left as it is
    std::fs::write(&sock, b"not a socket").unwrap();
    super::assert_usage_error(
        &run(&["run", d, "--listen", "127.0.0.1:0"]),
        "meshnode.sock exists and is not a socket",
    );
    assert_eq!(std::fs::read(&sock).unwrap(), b"not a socket");
    std::fs::remove_file(&sock).unwrap();
    let mut cmd = meshnode();
    cmd.args(["run", d, "--listen", "127.0.0.1:0"]);
    let daemon = Daemon::start(cmd);
    assert_eq!(super::mode(&sock), 0o600);
    let o = run(&["ctl", "status", d]);
    assert!(o.status.success(), "{}", super::stderr(&o));
    let status: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let descriptor: Value =
        serde_json::from_slice(&std::fs::read(dir.join("descriptor.json")).unwrap()).unwrap();
    assert_eq!(status["pubkey"], descriptor["pubkey"]);
    assert_eq!(
        status["listen"],
        daemon.url("").trim_start_matches("http://")
    );
    assert_eq!(status["relay"]["store_errors"], 0);
    let o = run(&["ctl", "config", d]);
    assert!(o.status.success(), "{}", super::stderr(&o));
    let config: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(config["face"]["listen"].is_string(), "{config}");
    // a second daemon on the same node is refused, naming the socket
    super::assert_usage_error(
        &run(&["run", d, "--listen", "127.0.0.1:0"]),
        "another meshnode answers",
    );
    // a clean stop removes the socket; then ctl says nothing answers
    assert!(daemon.stop("-TERM").success());
    assert!(!sock.exists());
    let o = run(&["ctl", "status", d]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        super::stderr(&o).contains("no daemon answers"),
        "{}",
        super::stderr(&o)
    );
}

#[test]
fn apply_validates_everything_first_stores_manifests_and_writes_mesh_node_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    assert!(init(&dir, &[]).status.success());
    let d = dir.to_str().unwrap();
    let mut cmd = meshnode();
    cmd.args(["run", d, "--listen", "127.0.0.1:0"]);
    let daemon = Daemon::start(cmd);
    let examples = |kind: &str| -> Value {
        let path = super::repo().join(format!("schemas/examples/manifests/{kind}.json"));
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    };
    let work = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = work.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let apply = |files: &[&str]| {
        let mut args = vec!["apply", d];
        for f in files {
            args.extend(["-f", f]);
        }
        run(&args)
    };
    // a MeshNode in YAML: stored, and its settings written into meshnode.toml
    let node_yaml = file(
        "node.yaml",
        &format!(
            "apiVersion: fleetmesh.org/v1alpha1\nkind: MeshNode\nmetadata: {{name: gpu-1}}\n\
             spec:\n  class: backbone\n  operator: \"{}\"\n  relays: [\"wss://relay.example.org/\"]\n",
            "ab".repeat(32)
        ),
    );
    let o = apply(&[&node_yaml]);
    assert!(o.status.success(), "{}", super::stderr(&o));
    assert!(
        stdout(&o).starts_with("MeshNode/gpu-1 created: written to meshnode.toml ([node])"),
        "{}",
        stdout(&o)
    );
    let config = std::fs::read_to_string(dir.join("meshnode.toml")).unwrap();
    assert!(config.contains("class = \"backbone\""), "{config}");
    assert!(config.contains("wss://relay.example.org/"), "{config}");
    let stored: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifests/MeshNode/gpu-1.json")).unwrap())
            .unwrap();
    assert_eq!(stored["spec"]["class"], "backbone");
    assert_eq!(
        super::mode(&dir.join("manifests/MeshNode/gpu-1.json")),
        0o600
    );
    // again: unchanged; then one field changed, named by its pointer
    let o = apply(&[&node_yaml]);
    assert!(stdout(&o).starts_with("MeshNode/gpu-1 unchanged: meshnode.toml already says this"));
    let o = apply(&[&file(
        "node2.yaml",
        &std::fs::read_to_string(&node_yaml)
            .unwrap()
            .replace("backbone", "leaf"),
    )]);
    assert!(o.status.success(), "{}", super::stderr(&o));
    assert!(
        stdout(&o).contains("\n  changed /spec/class\n"),
        "{}",
        stdout(&o)
    );
    // a valid Peering beside an invalid GrantPolicy in one YAML stream: nothing applied
    let peering = examples("Peering")["valid"][0].clone();
    let bad = examples("GrantPolicy")["invalid"][0]["instance"].clone();
    let stream = format!(
        "{}---\n{}",
        serde_yaml_ng::to_string(&peering).unwrap(),
        serde_yaml_ng::to_string(&bad).unwrap()
    );
    let o = apply(&[&file("both.yaml", &stream)]);
    assert_eq!(o.status.code(), Some(2));
    let err = super::stderr(&o);
    assert!(
        err.contains("nothing applied: document 2 (GrantPolicy/"),
        "{err}"
    );
    assert!(!dir.join("manifests/Peering").exists(), "half applied");
    // the Peering alone (JSON): stored, and said to govern the link from its next round
    let o = apply(&[&file("peering.json", &peering.to_string())]);
    assert!(o.status.success(), "{}", super::stderr(&o));
    assert!(
        stdout(&o).contains(" created: stored; the QUIC link with this peer follows it"),
        "{}",
        stdout(&o)
    );
    // the same manifest twice in one apply, and more documents than one apply takes
    let twice = format!("[{peering},{peering}]");
    let o = apply(&[&file("twice.json", &twice)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        super::stderr(&o).contains("the same manifest twice"),
        "{}",
        super::stderr(&o)
    );
    let many: Vec<Value> = (0..65)
        .map(|i| {
            let mut p = peering.clone();
            p["metadata"]["name"] = format!("p{i}").into();
            p
        })
        .collect();
    let o = apply(&[&file("many.json", &Value::from(many).to_string())]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        super::stderr(&o).contains("65 documents; at most 64"),
        "{}",
        super::stderr(&o)
    );
    // not a manifest at all
    let o = apply(&[&file(
        "x.json",
        r#"{"kind": "Pod", "metadata": {"name": "x"}}"#,
    )]);
    assert_eq!(o.status.code(), Some(2));
    assert!(super::stderr(&o).contains("\"Pod\" is not a fleetmesh.org/v1alpha1 manifest"));
    // with no daemon: refused, naming the socket
    assert!(daemon.stop("-TERM").success());
    let o = apply(&[&node_yaml]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        super::stderr(&o).contains("no daemon answers"),
        "{}",
        super::stderr(&o)
    );
}
