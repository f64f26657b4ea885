//! The OpenAI-compatible API of `meshnode run --model`: models, completions from text and
//! from token ids, logprobs, stop strings, reproducible sampling, and OpenAI-shaped errors.

use super::*;

#[test]
fn the_daemon_serves_completions_for_its_models() {
    let node = tempfile::tempdir().unwrap();
    assert!(
        run(&["init", node.path().to_str().unwrap()])
            .status
            .success()
    );
    let models = tempfile::tempdir().unwrap();
    let tiny = models.path().join("tiny");
    assert!(
        run(&["model", "make-tiny", tiny.to_str().unwrap()])
            .status
            .success()
    );
    let mut cmd = meshnode();
    cmd.args([
        "run",
        node.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    cmd.args(["--model", tiny.to_str().unwrap()]);
    cmd.args(["--model", tiny.join("model.gguf").to_str().unwrap()]);
    let d = Daemon::start(cmd);
    // what the CLI generates greedily, for comparison
    let o = run(&[
        "infer",
        "--model",
        tiny.to_str().unwrap(),
        "--prompt",
        "hello",
        "--max-tokens",
        "6",
    ]);
    let cli: Value = serde_json::from_str(&stdout(&o)).unwrap();
    runtime().block_on(async {
        let http = http_client();
        let list: Value = http.get(d.url("/v1/models")).send().await.unwrap().json().await.unwrap();
        let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["tiny", "model.gguf"]);
        assert_eq!(list["data"][0]["fleetmesh"]["model_digest"], cli["model_digest"]);

        let url = d.url("/v1/completions");
        let (status, r) = post_json(&http, &url, serde_json::json!({
            "model": "tiny", "prompt": "hello", "max_tokens": 6, "temperature": 0,
            "return_token_ids": true, "logprobs": 2
        })).await;
        assert_eq!(status, 200, "{r}");
        let choice = &r["choices"][0];
        assert_eq!(choice["token_ids"], cli["token_ids"]);
        assert_eq!(choice["prompt_token_ids"], cli["prompt_token_ids"]);
        assert_eq!(choice["text"], cli["text"]);
        assert_eq!(choice["finish_reason"], "length");
        assert_eq!(r["usage"]["completion_tokens"], 6);
        assert_eq!(r["fleetmesh"]["transcript_digest"], cli["transcript_digest"]);
        let lp = &choice["logprobs"];
        assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 6);
        assert_eq!(lp["token_logprobs"], cli["logprobs"]);
        // greedy: the chosen token is the most likely of the top 2
        for (step, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
            let top = top.as_object().unwrap();
            // two ids may share a text (bytes of one UTF-8 character): then one entry
            assert!((1..=2).contains(&top.len()), "{top:?}");
            let best = top.values().map(|v| v.as_f64().unwrap()).fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(best, lp["token_logprobs"][step].as_f64().unwrap());
        }
        // the same prompt as token ids, and on the GGUF model: the same output ids
        for model in ["tiny", "model.gguf"] {
            let (status, r2) = post_json(&http, &url, serde_json::json!({
                "model": model, "prompt": cli["prompt_token_ids"], "max_tokens": 6,
                "temperature": 0, "return_token_ids": true
            })).await;
            assert_eq!(status, 200, "{r2}");
            assert_eq!(r2["choices"][0]["token_ids"], cli["token_ids"], "{model}");
        }
        // a stop string cuts the text and ends the generation
        let text = cli["text"].as_str().unwrap();
        let stop: String = text.chars().skip(2).take(1).collect();
        let (_, r3) = post_json(&http, &url, serde_json::json!({
            "model": "tiny", "prompt": "hello", "max_tokens": 6, "temperature": 0, "stop": [stop]
        })).await;
        let cut = r3["choices"][0]["text"].as_str().unwrap();
        assert_eq!(r3["choices"][0]["finish_reason"], "stop", "{r3}");
        assert!(text.starts_with(cut) && !cut.contains(stop.as_str()), "{cut:?} / {text:?}");
        // seeded sampling is reproducible
        let sample = serde_json::json!({"model": "tiny", "prompt": "abc", "max_tokens": 8,
            "temperature": 1.3, "seed": 42, "return_token_ids": true});
        let (_, a) = post_json(&http, &url, sample.clone()).await;
        let (_, b) = post_json(&http, &url, sample).await;
        assert_eq!(a["choices"][0]["token_ids"], b["choices"][0]["token_ids"]);
        // streaming: the deltas add up to the non-streamed answer, ids and digest included
        let events = |body: String| -> Vec<String> {
            body.lines()
                .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
                .map(|l| l.trim().to_owned())
                .collect()
        };
        for stop in [None, Some(stop.clone())] {
            let mut req = serde_json::json!({"model": "tiny", "prompt": "hello", "max_tokens": 6,
                "temperature": 0, "return_token_ids": true});
            if let Some(st) = &stop {
                req["stop"] = serde_json::json!([st]);
            }
            let (_, whole) = post_json(&http, &url, req.clone()).await;
            req["stream"] = true.into();
            let r = http.post(&url).body(req.to_string()).send().await.unwrap();
            assert_eq!(r.status().as_u16(), 200);
            assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
            let ev = events(r.text().await.unwrap());
            assert_eq!(ev.last().map(String::as_str), Some("[DONE]"), "{ev:?}");
            let chunks: Vec<Value> = ev[..ev.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
            // without a stop string nothing is held back but incomplete characters: several
            // chunks; with one, text may wait for the last chunk
            assert!(stop.is_some() || chunks.len() >= 2, "{chunks:?}");
            let text: String = chunks.iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
            let ids: Vec<Value> = chunks.iter().flat_map(|c| c["choices"][0]["token_ids"].as_array().unwrap().clone()).collect();
            assert_eq!(text, whole["choices"][0]["text"].as_str().unwrap(), "stop {stop:?}");
            assert_eq!(Value::from(ids), whole["choices"][0]["token_ids"]);
            let last = chunks.last().unwrap();
            assert_eq!(last["choices"][0]["finish_reason"], whole["choices"][0]["finish_reason"]);
            assert_eq!(last["fleetmesh"]["transcript_digest"], whole["fleetmesh"]["transcript_digest"]);
            assert!(chunks[..chunks.len() - 1].iter().all(|c| c["choices"][0]["finish_reason"].is_null()));
        }
        // errors in OpenAI's shape
        let (status, e) = post_json(&http, &url, serde_json::json!({"model": "nope", "prompt": "x"})).await;
        assert_eq!(status, 404);
        assert_eq!(e["error"]["code"], "model_not_found");
        assert_eq!(e["error"]["type"], "invalid_request_error");
        for (body, param) in [
            (serde_json::json!({"model": "tiny"}), "prompt"),
            (serde_json::json!({"model": "tiny", "prompt": [300]}), "prompt"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "temperature": "hot"}), "temperature"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "top_p": 0}), "prompt"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "stream": "yes"}), "stream"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}), "stop"),
        ] {
            let (status, e) = post_json(&http, &url, body.clone()).await;
            assert_eq!(status, 400, "{body} → {e}");
            assert_eq!(e["error"]["param"], param, "{body} → {e}");
            assert!(!e["error"]["message"].as_str().unwrap().is_empty());
        }
        let r = http.post(&url).body("{not json").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400);
        // the daemon is still serving
        let (status, _) = post_json(&http, &url, serde_json::json!({"model": "tiny", "prompt": "x", "max_tokens": 1})).await;
        assert_eq!(status, 200);
    });
}

#[test]
fn a_model_that_does_not_load_stops_the_daemon_with_the_reason() {
    let node = tempfile::tempdir().unwrap();
    assert!(
        run(&["init", node.path().to_str().unwrap()])
            .status
            .success()
    );
    let o = run(&[
        "run",
        node.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--model",
        "/nonexistent/m",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/m"), "{}", stderr(&o));
    // two models with one name cannot both be served under it
    let models = tempfile::tempdir().unwrap();
    let (a, b) = (models.path().join("a/tiny"), models.path().join("b/tiny"));
    for m in [&a, &b] {
        assert!(
            run(&["model", "make-tiny", m.to_str().unwrap()])
                .status
                .success()
        );
    }
    let o = run(&[
        "run",
        node.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--model",
        a.to_str().unwrap(),
        "--model",
        b.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("two models are named \"tiny\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn models_in_the_config_are_served_by_run() {
    let node = tempfile::tempdir().unwrap();
    assert!(
        run(&["init", node.path().to_str().unwrap()])
            .status
            .success()
    );
    // a model inside the node directory, named relative to it
    let tiny = node.path().join("models").join("tiny");
    assert!(
        run(&["model", "make-tiny", tiny.to_str().unwrap()])
            .status
            .success()
    );
    let cfg = node.path().join("meshnode.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        text.contains("[inference]"),
        "init writes every section: {text}"
    );
    let text = text.replace("models = []", "models = [\"models/tiny\"]");
    std::fs::write(&cfg, text).unwrap();
    let d = run_node(node.path());
    runtime().block_on(async {
        let list: Value = http_client()
            .get(d.url("/v1/models"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(list["data"][0]["id"], "tiny", "{list}");
    });
    drop(d);
    // a typo in the section is refused, not ignored
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("models = [", "modles = [");
    std::fs::write(&cfg, text).unwrap();
    let o = run(&[
        "run",
        node.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("modles"), "{}", stderr(&o));
}
