//! The quasi-deterministic quorum through `meshnode`: over HTTP against other nodes (an
//! honest one, one serving another model), on the CLI, with pinned digests, and against
//! in-process stand-ins for misbehaving servers.

use super::inference::{make_tiny, serve};
use super::*;

/// `meshnode infer --verify quasi-deterministic` on "hello" with `executors`.
fn quorum_cli(model: &Path, max_tokens: usize, executors: &[&str]) -> Output {
    quorum_cli_with(model, max_tokens, executors, &[])
}

/// [`quorum_cli`] with `extra` arguments.
fn quorum_cli_with(model: &Path, max_tokens: usize, executors: &[&str], extra: &[&str]) -> Output {
    let max = max_tokens.to_string();
    let mut args = vec!["--max-tokens", &max, "--verify", "quasi-deterministic"];
    for e in executors {
        args.extend(["--executor", e]);
    }
    args.extend(extra);
    infer(model, "hello", &args)
}

/// Each executor's status in the verdict `meshnode infer` printed.
fn statuses(o: &Output) -> Vec<String> {
    let cli: Value = serde_json::from_str(&stdout(o)).unwrap();
    cli["verdict"]["executors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["status"].as_str().unwrap().to_owned())
        .collect()
}

/// An in-process stand-in for an OpenAI-compatible server that answers every request with
/// `ids` (logprobs 0), whatever it was asked; its base URL.
pub(crate) fn fake_executor(ids: &[u32]) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let body = serde_json::json!({"choices": [{"token_ids": ids,
        "logprobs": {"token_logprobs": vec![0.0; ids.len()], "top_logprobs": []}}]})
    .to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { return };
            let mut buf = [0u8; 65536];
            let _ = std::io::Read::read(&mut c, &mut buf);
            let _ = std::io::Write::write_all(
                &mut c,
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                )
                .as_bytes(),
            );
        }
    });
    url
}

pub(crate) fn executor_toml(name: &str, d: &Daemon) -> String {
    format!(
        "[[inference.executors]]\nname = \"{name}\"\nurl = \"http://{}\"\nserves = \"tiny\"\ntimeout_s = 60\n\n",
        d.addr
    )
}

#[test]
fn quorum_over_http_picks_the_honest_output_and_names_the_node_with_other_weights() {
    let models = tempfile::tempdir().unwrap();
    let honest = models.path().join("honest").join("tiny");
    let other = models.path().join("other").join("tiny");
    make_tiny(&honest, 7);
    // the same name and shape, other weights
    make_tiny(&other, 8);
    let (_h, honest_node) = serve(&[&honest], "");
    let (_t, cheat_node) = serve(&[&other], "");
    // each node states its model's digest, and (original weights) that as its base
    let digests = |d: &Daemon| {
        runtime().block_on(async {
            let v = get_json(&http_client(), d.url("/v1/models")).await;
            let fm = &v["data"][0]["fleetmesh"];
            assert_eq!(fm["base_model_digest"], fm["model_digest"], "{v}");
            fm["model_digest"].as_str().unwrap().to_owned()
        })
    };
    let (honest_digest, cheat_digest) = (digests(&honest_node), digests(&cheat_node));
    assert_ne!(honest_digest, cheat_digest);
    // the cheat (another model, honestly stated; its own digest pinned right) is asked
    // first, beside the local runtime; the honest node (its base pinned) settles it
    let cfg = executor_toml("cheat", &cheat_node)
        + &format!("model_digest = \"{cheat_digest}\"\n")
        + &executor_toml("honest", &honest_node)
        + &format!("base_model_digest = \"{}\"\n", honest_digest.to_uppercase());
    let (_a, node) = serve(&[&honest], &cfg);
    let prompts = ["hello", "fleetmesh", "2 + 2 ="];
    runtime().block_on(async {
        let http = http_client();
        let url = node.url("/v1/completions");
        let health: Value = http.get(node.url("/v1/executors")).send().await.unwrap().json().await.unwrap();
        let list = health["data"].as_array().unwrap();
        assert_eq!(list.len(), 2, "{health}");
        let named = |name: &str| list.iter().find(|e| e["executor"] == name).unwrap();
        assert_eq!(named("honest")["healthy"], true, "{health}");
        // the server that serves another model is reported, not trusted
        assert_eq!(named("cheat")["healthy"], false, "{health}");
        let why = named("cheat")["error"].as_str().unwrap();
        assert!(why.contains("serves another model") && why.contains(&cheat_digest), "{health}");
        for prompt in prompts {
            let plain = serde_json::json!({"model": "tiny", "prompt": prompt, "max_tokens": 8,
                                           "temperature": 0, "return_token_ids": true});
            let (status, local) = post_json(&http, &url, plain.clone()).await;
            assert_eq!(status, 200, "{local}");
            let mut q = plain.clone();
            q["verification"] = "quasi-deterministic".into();
            q.as_object_mut().unwrap().remove("temperature");
            let (status, r) = post_json(&http, &url, q).await;
            assert_eq!(status, 200, "{r}");
            // the accepted output is the honest greedy output
            assert_eq!(r["choices"][0]["token_ids"], local["choices"][0]["token_ids"]);
            assert_eq!(r["choices"][0]["text"], local["choices"][0]["text"]);
            let v = &r["fleetmesh"]["verdict"];
            assert_eq!(v["outcome"], "majority", "{v}");
            let by = |name: &str| v["executors"].as_array().unwrap().iter()
                .find(|e| e["executor"] == name).unwrap().clone();
            assert_eq!(by("local:tiny")["status"], "agreed");
            assert_eq!(by("honest")["status"], "agreed");
            // another model, whatever it answered: refused and flagged, never compared
            assert_eq!(by("cheat")["status"], "wrong-model", "{v}");
            assert_eq!(by("cheat")["flagged"], true);
            assert_eq!(by("cheat")["base_model_digest"], cheat_digest.as_str());
            assert!(by("cheat")["error"].as_str().unwrap().contains("base_model_digest"), "{v}");
            assert!(by("cheat")["transcript_digest"].is_null(), "{v}");
            assert!(v["divergences"].as_array().unwrap().iter()
                .all(|d| !d["executors"].as_array().unwrap().contains(&"cheat".into())), "{v}");
            // the honest node states its digests over HTTP; both honest transcripts agree
            assert_eq!(by("honest")["model_digest"], r["fleetmesh"]["model_digest"]);
            assert_eq!(by("honest")["base_model_digest"], r["fleetmesh"]["base_model_digest"]);
            assert_eq!(r["fleetmesh"]["base_model_digest"], honest_digest.as_str());
            assert_eq!(by("honest")["transcript_digest"], by("local:tiny")["transcript_digest"]);
            assert_eq!(by("local:tiny")["transcript_digest"], r["fleetmesh"]["transcript_digest"]);
        }
        // the quorum decodes greedily and does not stream
        for (extra, param) in [(("temperature", serde_json::json!(0.8)), "temperature"),
                               (("stream", serde_json::json!(true)), "stream"),
                               (("verification", serde_json::json!("majority-vote")), "verification")] {
            let mut q = serde_json::json!({"model": "tiny", "prompt": "hi", "max_tokens": 2,
                                           "verification": "quasi-deterministic"});
            q[extra.0] = extra.1;
            let (status, r) = post_json(&http, &url, q).await;
            assert_eq!(status, 400, "{r}");
            assert_eq!(r["error"]["param"], param, "{r}");
        }
        // `job` names what a tee-attestation answer is bound to: nothing else takes it,
        // and it is bounded
        for (verification, job) in [("none", serde_json::json!("job-1")),
                                    ("tee-attestation", serde_json::json!("")),
                                    ("tee-attestation", serde_json::json!("j".repeat(129))),
                                    ("tee-attestation", serde_json::json!(7))] {
            let (status, r) = post_json(&http, &url, serde_json::json!({"model": "tiny",
                "prompt": "hi", "max_tokens": 2, "verification": verification, "job": job})).await;
            assert_eq!(status, 400, "{r}");
            assert_eq!(r["error"]["param"], "job", "{r}");
        }
        // a node without remote executors says what is missing
        let (status, r) = post_json(&http, &honest_node.url("/v1/completions"), serde_json::json!({
            "model": "tiny", "prompt": "hi", "max_tokens": 2, "verification": "quasi-deterministic"})).await;
        assert_eq!(status, 400, "{r}");
        assert_eq!(r["error"]["code"], "not_enough_executors");
        // tee-attestation on a host without a TEE: refused with the reason, nothing faked
        if !std::path::Path::new("/sys/kernel/config/tsm/report").exists() {
            let (status, r) = post_json(&http, &honest_node.url("/v1/completions"), serde_json::json!({
                "model": "tiny", "prompt": "hi", "max_tokens": 2, "verification": "tee-attestation"})).await;
            assert_eq!(status, 501, "{r}");
            assert_eq!(r["error"]["code"], "tee_unavailable");
            assert!(r["error"]["message"].as_str().unwrap().contains("configfs-tsm"), "{r}");
        }
    });
    // the CLI runs the same quorum against the two nodes
    let o = quorum_cli(&honest, 8, &[&cheat_node.url(""), &honest_node.url("")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cli: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(cli["verdict"]["outcome"], "majority", "{cli}");
    assert_eq!(statuses(&o), ["agreed", "wrong-model", "agreed"]);
    // a pin the server's statement contradicts: that executor is wrong-model too, and
    // its health check says so
    let pinned = executor_toml("pinned", &honest_node)
        + &format!("model_digest = \"{}\"\n", "0".repeat(64))
        + &executor_toml("honest", &honest_node);
    let (_p, pinned_node) = serve(&[&honest], &pinned);
    runtime().block_on(async {
        let http = http_client();
        let (status, r) = post_json(
            &http,
            &pinned_node.url("/v1/completions"),
            serde_json::json!({"model": "tiny", "prompt": "hi", "max_tokens": 3,
                               "verification": "quasi-deterministic"}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let e = &r["fleetmesh"]["verdict"]["executors"][1];
        assert_eq!(e["status"], "wrong-model", "{r}");
        assert!(
            e["error"].as_str().unwrap().contains("pinned to 0000"),
            "{r}"
        );
        assert_eq!(r["fleetmesh"]["verdict"]["outcome"], "majority", "{r}");
        let health = get_json(&http, pinned_node.url("/v1/executors")).await;
        let e = health["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["executor"] == "pinned")
            .unwrap()
            .clone();
        assert_eq!(e["healthy"], false, "{health}");
        assert!(
            e["error"].as_str().unwrap().contains("pinned to 0000"),
            "{health}"
        );
    });
    // the local file declared a build of the cheat's model: now the honest node serves
    // another model than the quorum's
    let urls = [cheat_node.url(""), honest_node.url("")];
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    let o = quorum_cli_with(&honest, 8, &urls, &["--base-model-digest", &cheat_digest]);
    assert_eq!(statuses(&o)[2], "wrong-model", "{}", stdout(&o));
    let cli: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        cli["verdict"]["executors"][0]["base_model_digest"],
        cheat_digest.as_str()
    );
    // an unreachable executor is reported as failed, not flagged, and the quorum goes on
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let o = quorum_cli(&honest, 4, &[&dead_url, &honest_node.url("")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cli: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let e = &cli["verdict"]["executors"][1];
    assert_eq!(e["status"], "failed", "{cli}");
    assert_eq!(e["flagged"], false);
    assert!(
        e["error"].as_str().unwrap().contains("cannot connect"),
        "{e}"
    );
    // a server that answers more tokens than asked for is not believed (an in-process
    // stand-in for a misbehaving OpenAI-compatible server)
    let liar_url = fake_executor(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
    let o = quorum_cli(&honest, 4, &[&liar_url, &honest_node.url("")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cli: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let e = &cli["verdict"]["executors"][1];
    assert_eq!(e["status"], "failed", "{cli}");
    assert!(
        e["error"].as_str().unwrap().contains("returned 9 tokens"),
        "{e}"
    );
    // two executors that both fail leave no quorum: exit 1 with the verdict printed
    let o = quorum_cli(&honest, 4, &[&dead_url, &dead_url]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let cli: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(cli["verdict"]["outcome"], "no-quorum");
    // quorum options without --verify are usage errors, and a base must be a digest
    for (extra, says) in [
        (vec!["--executor", dead_url.as_str()], "is for --verify"),
        (
            vec!["--base-model-digest", &cheat_digest],
            "is for --verify",
        ),
        (
            vec![
                "--verify",
                "quasi-deterministic",
                "--base-model-digest",
                "xyz",
            ],
            "not 64 hex digits",
        ),
    ] {
        let o = infer(&honest, "x", &extra);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(says), "{}", stderr(&o));
    }
}
