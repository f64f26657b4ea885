//! Manifests reconciled into a running daemon: a ComputeProvider's limits, engines and
//! prices and an InferenceRouter's models take effect without a restart (NIP-11, the job
//! API and `/v1/models` say so), what cannot is named as waiting for a restart, a bad
//! manifest or a model that does not load changes nothing, `meshnode ctl reload` reads
//! `meshnode.toml` again, stored manifests hold across a restart (and a damaged one stops
//! the start), and a watched manifest directory is applied when it changes.

use super::*;

/// `meshnode apply DIR -f FILE` for a manifest written as `name` in `work`.
fn apply(dir: &Path, work: &Path, name: &str, text: &str) -> Output {
    let file = work.join(name);
    std::fs::write(&file, text).unwrap();
    run(&["apply", dir.to_str().unwrap(), "-f", file.to_str().unwrap()])
}

/// `[settlement] mints` for a node whose ComputeProvider prices jobs (a config with prices
/// and no mint is refused): a mint nobody pays at here, only advertised.
const PRICED_MINTS: &str = "mints = [\"http://127.0.0.1:9\"]";

fn provider(name: &str, engines: &str, modes: &str, max_fuel: u64) -> String {
    format!(
        "apiVersion: fleetmesh.org/v1alpha1\nkind: ComputeProvider\nmetadata: {{name: {name}}}\n\
         spec:\n  engines: {engines}\n  modes: {modes}\n  limits: {{maxFuel: {max_fuel}, memory: 64Mi, wallSecs: 30}}\n\
         \x20 concurrency: {{maxJobs: 3, perBuyer: 2}}\n  publishAsks: false\n  pricing:\n    wasm: {{amount: 1, unit: msat, per: fuel, quantity: 1000000}}\n\
         \x20 settlement: [cashu]\n"
    )
}

fn router(models: &[(&str, &Path)]) -> String {
    let list: Vec<Value> = models
        .iter()
        .map(|(id, path)| serde_json::json!({"id": id, "path": path}))
        .collect();
    serde_json::json!({
        "apiVersion": "fleetmesh.org/v1alpha1",
        "kind": "InferenceRouter",
        "metadata": {"name": "default"},
        "spec": {"models": list, "routes": {"delivery": {"executors": ["local"]}}},
    })
    .to_string()
}

fn served(d: &Daemon) -> Vec<String> {
    runtime().block_on(async {
        let v = get_json(&http_client(), d.url("/v1/models")).await;
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    })
}

fn jobs_offer(d: &Daemon) -> Value {
    runtime().block_on(nip11(d))["fleetmesh"]["jobs"].clone()
}

/// Submits the demo wasm job as `buyer`: the `job submit` output.
fn submit_wasm(d: &Daemon, buyer: &Path, work: &Path, name: &str) -> Output {
    std::fs::write(work.join("upper.wat"), include_str!("../../demo/upper.wat")).unwrap();
    std::fs::write(work.join("in.txt"), "hi").unwrap();
    let file = work.join(format!("{name}.json"));
    std::fs::write(
        &file,
        serde_json::json!({"engine": "wasm", "mode": "delivery", "module": "upper.wat",
            "input": "in.txt", "limits": {"fuel": 1_000_000}, "name": name})
        .to_string(),
    )
    .unwrap();
    let url = d.url("");
    run(&[
        "job",
        "submit",
        file.to_str().unwrap(),
        "--node",
        &url,
        "--key-dir",
        buyer.to_str().unwrap(),
    ])
}

#[test]
fn manifests_change_a_running_node_live_and_name_what_waits_for_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    assert!(init(&dir, &[]).status.success());
    // the ComputeProviders below price wasm: a priced node must name the mints it takes
    edit_config(&dir, &[("mints = []", PRICED_MINTS)]);
    let work = tempfile::tempdir().unwrap();
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    super::inference::make_tiny(&a, 1);
    super::inference::make_tiny(&b, 2);
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    let d = run_node(&dir);
    assert_eq!(jobs_offer(&d)["max_fuel"], 10_000_000_000u64);
    assert!(served(&d).is_empty());

    // a ComputeProvider: limits, engines and prices live; workers at the next start
    let o = apply(
        &dir,
        work.path(),
        "cp.yaml",
        &provider("box", "[wasm]", "[delivery]", 5_000_000),
    );
    let out = stdout(&o);
    assert!(o.status.success(), "{out} {}", stderr(&o));
    assert!(
        out.contains("ComputeProvider/box created: reconciled\n"),
        "{out}"
    );
    assert!(
        out.contains("  note: not used by this build yet: /spec/settlement\n"),
        "{out}"
    );
    let live = out
        .lines()
        .find(|l| l.starts_with("applied live: "))
        .unwrap();
    for key in [
        "[jobs] engines",
        "[jobs] max_fuel",
        "[jobs] max_memory_bytes",
        "[jobs] per_buyer",
        "[jobs] prices",
        "[jobs] publish_asks",
    ] {
        assert!(live.contains(key), "{key}: {out}");
    }
    assert!(
        out.contains("waits for a restart: [jobs] workers\n"),
        "{out}"
    );
    let offer = jobs_offer(&d);
    assert_eq!(offer["max_fuel"], 5_000_000);
    assert_eq!(offer["max_memory_bytes"], 64 << 20);
    assert_eq!(offer["engines"], serde_json::json!(["wasm"]));
    assert_eq!(offer["prices"]["wasm"]["quantity"], 1_000_000);
    assert_eq!(offer["workers"], 2, "workers change at the next start");
    assert_eq!(offer["per_buyer"], 2);
    assert_eq!(offer["publish_asks"], false);
    // the price is live in the job path too: the node now takes no unpaid wasm job
    let o = submit_wasm(&d, buyer.path(), work.path(), "w1");
    assert_eq!(o.status.code(), Some(2), "{} {}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("payment-required"), "{}", stdout(&o));
    // the same provider selling llm only: the next wasm job is refused
    let o = apply(
        &dir,
        work.path(),
        "cp.yaml",
        &provider("box", "[llm]", "[quasi-deterministic]", 5_000_000),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("ComputeProvider/box changed: reconciled\n  changed /spec/engines\n"),
        "{}",
        stdout(&o)
    );
    let o = submit_wasm(&d, buyer.path(), work.path(), "w2");
    assert!(!o.status.success());
    assert!(
        format!("{}{}", stdout(&o), stderr(&o)).contains("unsupported-engine"),
        "{} {}",
        stdout(&o),
        stderr(&o)
    );
    // a second ComputeProvider: refused, nothing stored
    let o = apply(
        &dir,
        work.path(),
        "cp2.yaml",
        &provider("other", "[wasm]", "[delivery]", 1),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("a node sells under one"),
        "{}",
        stderr(&o)
    );
    assert!(!dir.join("manifests/ComputeProvider/other.json").exists());

    // an InferenceRouter: its model is served under its id, at once
    let o = apply(&dir, work.path(), "r.json", &router(&[("tiny-a", &a)]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("\n  model tiny-a is served\n"),
        "{}",
        stdout(&o)
    );
    assert_eq!(served(&d), ["tiny-a"]);
    // a model that does not load: nothing applied, nothing stored, the old one served
    let missing = work.path().join("missing");
    let o = apply(
        &dir,
        work.path(),
        "r.json",
        &router(&[("tiny-a", &a), ("nope", &missing)]),
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("nothing applied: the manifests were not applied: [inference]"),
        "{}",
        stderr(&o)
    );
    assert_eq!(served(&d), ["tiny-a"]);
    let stored =
        std::fs::read_to_string(dir.join("manifests/InferenceRouter/default.json")).unwrap();
    assert!(!stored.contains("nope"), "{stored}");
    // another model in its place: the old one is no longer served
    let o = apply(&dir, work.path(), "r.json", &router(&[("tiny-b", &b)]));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("  model tiny-b is served\n"), "{out}");
    assert!(
        out.contains("  model tiny-a is no longer served\n"),
        "{out}"
    );
    assert_eq!(served(&d), ["tiny-b"]);
    runtime().block_on(async {
        let (code, v) = post_json(
            &http_client(),
            &d.url("/v1/completions"),
            serde_json::json!({"model": "tiny-b", "prompt": [1, 2, 3], "max_tokens": 2}),
        )
        .await;
        assert_eq!(code, 200, "{v}");
    });
    // a remote model: routed to its server (here the node itself, serving tiny-b); both
    // stated as builds of one base model, which the node reports and the remote's pin
    // holds it to
    let base = "ab".repeat(32);
    let remote = serde_json::json!({
        "apiVersion": "fleetmesh.org/v1alpha1",
        "kind": "InferenceRouter",
        "metadata": {"name": "default"},
        "spec": {"models": [{"id": "tiny-b", "path": b, "baseModelDigest": base},
                            {"id": "far", "remote": {"url": d.url(""), "kind": "vllm",
                                                     "model": "tiny-b"},
                             "baseModelDigest": base}],
                 "routes": {"delivery": {"executors": ["local"]}}},
    });
    let o = apply(&dir, work.path(), "r.json", &remote.to_string());
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("  model far is routed to its executors\n"),
        "{}",
        stdout(&o)
    );
    assert_eq!(served(&d), ["tiny-b", "far"]);
    runtime().block_on(async {
        let models = get_json(&http_client(), d.url("/v1/models")).await;
        assert_eq!(
            models["data"][0]["fleetmesh"]["base_model_digest"], base,
            "{models}"
        );
        let (code, v) = post_json(
            &http_client(),
            &d.url("/v1/completions"),
            serde_json::json!({"model": "far", "prompt": [1, 2, 3], "max_tokens": 2}),
        )
        .await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["fleetmesh"]["executor"], "far", "{v}");
        assert_eq!(v["model"], "tiny-b", "{v}");
    });

    // ctl reload: meshnode.toml read again; a live key and one that waits
    edit_config(
        &dir,
        &[
            ("max_tokens = 4096", "max_tokens = 100"),
            ("header_timeout_secs = 10", "header_timeout_secs = 11"),
        ],
    );
    let o = run(&["ctl", "reload", dir.to_str().unwrap()]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out} {}", stderr(&o));
    assert!(out.contains("applied live: [jobs] max_tokens\n"), "{out}");
    assert!(
        out.contains("waits for a restart: [face] header_timeout_secs, [jobs] workers\n"),
        "{out}"
    );
    assert!(
        out.contains("ComputeProvider/box: not used by this build yet: /spec/settlement"),
        "{out}"
    );
    let o = run(&["ctl", "config", dir.to_str().unwrap()]);
    let config: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(config["jobs"]["max_tokens"], 100);
    assert_eq!(config["jobs"]["engines"], serde_json::json!(["llm"]));
    // a meshnode.toml that does not hold: nothing reloaded, exit 2
    edit_config(&dir, &[("max_tokens = 100", "max_tokens = 0")]);
    let o = run(&["ctl", "reload", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("nothing reloaded:") && stderr(&o).contains("[jobs] max_tokens"),
        "{}",
        stderr(&o)
    );
    edit_config(&dir, &[("max_tokens = 0", "max_tokens = 100")]);
    // prices that are not prices: an unknown measure, an unknown engine
    for (table, says) in [
        (
            "[jobs.prices.wasm]\namount = 1\nunit = \"msat\"\nper = \"parsec\"\n",
            "[jobs.prices.wasm] per = \"parsec\"",
        ),
        (
            "[jobs.prices.python]\namount = 1\nunit = \"msat\"\nper = \"job\"\n",
            "[jobs.prices] \"python\": not an engine",
        ),
    ] {
        edit_config(&dir, &[("[jobs.prices]\n", table)]);
        let o = run(&["ctl", "reload", dir.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
        edit_config(&dir, &[(table, "[jobs.prices]\n")]);
    }
    let m = d.scrape();
    let count = |source: &str, outcome: &str| {
        m.must(
            "fleetmesh_manifest_applies_total",
            &[("source", source), ("outcome", outcome)],
        )
    };
    assert_eq!(count("socket", "applied"), 5.0);
    assert_eq!(count("socket", "refused"), 2.0);
    assert_eq!(count("reload", "applied"), 1.0);
    assert_eq!(count("reload", "refused"), 3.0);

    // across a restart the stored manifests hold
    assert!(d.stop("-TERM").success());
    let d = run_node(&dir);
    assert_eq!(jobs_offer(&d)["max_fuel"], 5_000_000);
    assert_eq!(jobs_offer(&d)["workers"], 3);
    assert_eq!(served(&d), ["tiny-b", "far"]);
    assert!(d.stop("-TERM").success());
    // a stored manifest damaged by hand stops the start, naming it
    let damaged = dir.join("manifests/ComputeProvider/box.json");
    std::fs::write(&damaged, r#"{"kind": "ComputeProvider"}"#).unwrap();
    let o = run(&["run", dir.to_str().unwrap(), "--listen", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&damaged.display().to_string()),
        "{}",
        stderr(&o)
    );
    // and `meshnode watch` says so before a restart would find out
    let o = run(&[
        "watch",
        dir.to_str().unwrap(),
        "--node",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let line = stdout(&o)
        .lines()
        .find(|l| l.contains(" config: "))
        .unwrap_or_default()
        .to_owned();
    assert!(
        line.starts_with("failing") && line.contains(&damaged.display().to_string()),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_watched_manifest_directory_is_applied_when_it_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    assert!(init(&dir, &[]).status.success());
    edit_config(
        &dir,
        &[
            ("watch = false", "watch = true"),
            ("interval_secs = 2", "interval_secs = 1"),
            ("mints = []", PRICED_MINTS),
        ],
    );
    let watched = dir.join("manifests.d");
    std::fs::create_dir(&watched).unwrap();
    std::fs::write(
        watched.join("cp.yaml"),
        provider("box", "[wasm]", "[delivery]", 7_000),
    )
    .unwrap();
    let d = run_node(&dir);
    let wait_for = |what: &str, ok: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ok() {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // applied when the daemon starts
    wait_for("the watched manifest applied at start", &|| {
        jobs_offer(&d)["max_fuel"] == 7_000
    });
    // a bad file beside it: nothing changes, the refusal is counted
    std::fs::write(watched.join("bad.json"), r#"{"kind": "ComputeProvider""#).unwrap();
    wait_for("the bad file refused", &|| {
        d.scrape()
            .value(
                "fleetmesh_manifest_applies_total",
                &[("source", "watch"), ("outcome", "refused")],
            )
            .is_some()
    });
    assert_eq!(jobs_offer(&d)["max_fuel"], 7_000);
    // a file over the bounds (1 MiB): refused as well, nothing changes
    std::fs::remove_file(watched.join("bad.json")).unwrap();
    std::fs::write(watched.join("huge.yaml"), vec![b'#'; (1 << 20) + 1]).unwrap();
    wait_for("the oversized file refused", &|| {
        d.scrape()
            .value(
                "fleetmesh_manifest_applies_total",
                &[("source", "watch"), ("outcome", "refused")],
            )
            .is_some_and(|n| n >= 2.0)
    });
    assert_eq!(jobs_offer(&d)["max_fuel"], 7_000);
    std::fs::remove_file(watched.join("huge.yaml")).unwrap();
    // fixed, and the provider changed: applied
    std::fs::write(
        watched.join("cp.yaml"),
        provider("box", "[wasm]", "[delivery]", 9_000),
    )
    .unwrap();
    wait_for("the changed manifest applied", &|| {
        jobs_offer(&d)["max_fuel"] == 9_000
    });
    let m = d.scrape();
    assert_eq!(
        m.must(
            "fleetmesh_manifest_applies_total",
            &[("source", "watch"), ("outcome", "applied")]
        ),
        2.0
    );
    assert!(dir.join("manifests/ComputeProvider/box.json").exists());
}
