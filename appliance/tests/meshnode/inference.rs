//! The OpenAI-compatible API of `meshnode run --model`: models, completions from text and
//! from token ids, logprobs, stop strings, reproducible sampling, and OpenAI-shaped errors.

use super::*;

#[test]
fn the_daemon_serves_completions_for_its_models() {
    let models = tempfile::tempdir().unwrap();
    let tiny = models.path().join("tiny");
    make_tiny(&tiny, 7);
    let (_node, d) = serve(&[&tiny, &tiny.join("model.gguf")], "");
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
            let r = http.post(&url).header("content-type", "application/json").body(req.to_string()).send().await.unwrap();
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
            (serde_json::json!({"model": "tiny", "prompt": ["x", 5]}), "prompt"),
            (serde_json::json!({"model": "tiny", "prompt": ["x", []]}), "prompt"),
            (serde_json::json!({"model": "tiny", "prompt": [[1], [256]]}), "prompt"),
            (serde_json::json!({"model": "tiny", "prompt": vec!["x"; 65]}), "prompt"),
            (serde_json::json!({"model": "tiny", "prompt": ["x", "y"], "stream": true}), "prompt"),
            // OpenAI parameters not implemented are refused by name, not ignored
            (serde_json::json!({"model": "tiny", "prompt": "x", "n": 2}), "n"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "best_of": 3}), "best_of"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "logit_bias": {"65": 5}}), "logit_bias"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "presence_penalty": 0.5}), "presence_penalty"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "frequency_penalty": -1}), "frequency_penalty"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "repetition_penalty": 1.2}), "repetition_penalty"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "tools": [{"type": "function"}]}), "tools"),
            (serde_json::json!({"model": "tiny", "prompt": "x", "tool_choice": "auto"}), "tool_choice"),
        ] {
            let (status, e) = post_json(&http, &url, body.clone()).await;
            assert_eq!(status, 400, "{body} → {e}");
            assert_eq!(e["error"]["param"], param, "{body} → {e}");
            assert!(!e["error"]["message"].as_str().unwrap().is_empty());
        }
        let r = http.post(&url).header("content-type", "application/json").body("{not json").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400);
        // the daemon is still serving, and neutral values of those parameters are fine
        let (status, r) = post_json(&http, &url, serde_json::json!({"model": "tiny", "prompt": "x", "max_tokens": 1,
            "n": 1, "presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "tools": []})).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["choices"].as_array().unwrap().len(), 1);
    });
    // the requests, their tokens and the batcher's timings are in the node's metrics
    let m = d.scrape();
    let requests = |labels: &[(&str, &str)]| m.must("fleetmesh_inference_requests_total", labels);
    assert!(
        requests(&[
            ("api", "completions"),
            ("verification", "none"),
            ("status", "200")
        ]) >= 3.0
    );
    assert_eq!(
        requests(&[
            ("api", "completions"),
            ("verification", ""),
            ("status", "404")
        ]),
        1.0
    );
    // the 19 refused bodies and the one that is not JSON (most refused before the
    // verification is known, some after)
    let refused = [("api", "completions"), ("status", "400")];
    assert_eq!(requests(&refused), 20.0, "{}", m.text);
    let generated = m.must(
        "fleetmesh_inference_tokens_total",
        &[("direction", "generated")],
    );
    let prompt = m.must(
        "fleetmesh_inference_tokens_total",
        &[("direction", "prompt")],
    );
    assert!(generated >= 6.0 && prompt >= 2.0, "{}", m.text);
    let first = m.must("fleetmesh_inference_time_to_first_token_seconds", &[]);
    let steps = m.must("fleetmesh_inference_time_per_token_seconds", &[]);
    // every generation that made a token made a first one; the rest were steps after it
    assert_eq!(first + steps, generated, "{}", m.text);
    assert!(m.must("fleetmesh_inference_batch_size", &[]) >= 1.0);
    assert_eq!(m.must("fleetmesh_inference_queue_depth", &[]), 0.0);
}

#[test]
fn text_prompts_carry_the_tokenizers_bos_as_transformers_and_vllm_encode_them() {
    let models = tempfile::tempdir().unwrap();
    let bos = models.path().join("bos");
    fleetmesh_inference::tiny::make_tiny_with_bos(&bos, 3).unwrap();
    // the reference: the tokenizers crate with add_special_tokens = true
    let reference = tokenizers::Tokenizer::from_file(bos.join("tokenizer.json")).unwrap();
    let want = |t: &str, special: bool| -> Value {
        serde_json::json!(reference.encode(t, special).unwrap().get_ids())
    };
    let o = run(&[
        "infer",
        "--model",
        bos.to_str().unwrap(),
        "--prompt",
        "the",
        "--max-tokens",
        "2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let cli: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(cli["prompt_token_ids"], want("the", true));
    assert_eq!(cli["prompt_token_ids"][0], 256, "{cli}");
    let (_node, d) = serve(&[&bos], "");
    runtime().block_on(async {
        let http = http_client();
        let url = d.url("/v1/completions");
        let ask = |extra: Value| {
            let mut body = serde_json::json!({"model": "bos", "prompt": "the", "max_tokens": 2,
                                              "temperature": 0, "return_token_ids": true});
            body.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            post_json(&http, &url, body)
        };
        let (status, r) = ask(serde_json::json!({})).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["choices"][0]["prompt_token_ids"], want("the", true));
        assert_eq!(r["choices"][0]["token_ids"], cli["token_ids"]);
        // vLLM's switch to leave them out
        let (status, r) = ask(serde_json::json!({"add_special_tokens": false})).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["choices"][0]["prompt_token_ids"], want("the", false));
        let (status, r) = ask(serde_json::json!({"add_special_tokens": "yes"})).await;
        assert_eq!(
            (status, r["error"]["param"].as_str()),
            (400, Some("add_special_tokens")),
            "{r}"
        );
        // chat: the template writes the one BOS
        let (status, r) = post_json(
            &http,
            &d.url("/v1/chat/completions"),
            serde_json::json!({
                "model": "bos", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                "return_token_ids": true
            }),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let ids = r["choices"][0]["prompt_token_ids"].as_array().unwrap();
        assert_eq!(ids.iter().filter(|i| **i == 256).count(), 1, "{r}");
        assert_eq!(ids[0], 256, "{r}");
    });
}

#[test]
fn a_model_that_does_not_load_stops_the_daemon_with_the_reason() {
    let node = tempfile::tempdir().unwrap();
    assert!(init(node.path(), &[]).status.success());
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
        make_tiny(m, 7);
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
    assert!(init(node.path(), &[]).status.success());
    // a model inside the node directory, named relative to it
    let tiny = node.path().join("models").join("tiny");
    make_tiny(&tiny, 7);
    let cfg = node.path().join("meshnode.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        text.contains("[inference]"),
        "init writes every section: {text}"
    );
    // a converted copy states the model it was made from
    let base = "ab".repeat(32);
    let entry = format!(
        "models = [{{ id = \"tiny\", path = \"models/tiny\", base_model_digest = \"{}\" }}]",
        base.to_uppercase()
    );
    std::fs::write(&cfg, text.replace("models = []", &entry)).unwrap();
    let d = run_node(node.path());
    runtime().block_on(async {
        let list = get_json(&http_client(), d.url("/v1/models")).await;
        assert_eq!(list["data"][0]["id"], "tiny", "{list}");
        let fm = &list["data"][0]["fleetmesh"];
        assert_eq!(fm["base_model_digest"], base.as_str(), "{list}");
        assert_ne!(fm["model_digest"], fm["base_model_digest"], "{list}");
    });
    drop(d);
    // a config the node refuses to start with, naming why
    let refused = |config: &str, says: &str| {
        std::fs::write(&cfg, config).unwrap();
        let o = run(&[
            "run",
            node.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ]);
        assert_eq!(o.status.code(), Some(2), "{config}");
        assert!(stderr(&o).contains(says), "{config}: {}", stderr(&o));
    };
    // a base that is not a digest
    refused(
        &text.replace("models = []", &entry.replace(&base.to_uppercase(), "12")),
        "base_model_digest is not 64 hex digits",
    );
    // a typo in the section is refused, not ignored
    let good = text.replace("models = []", "models = [\"models/tiny\"]");
    refused(&good.replace("models = [", "modles = ["), "modles");
    // executors with a bad digest, URL or kind are refused (one for a model that is not
    // served locally makes it a routed model: its URL is checked the same)
    let good = good.replace("executors = []\n", "");
    for (executor, says) in [
        ("serves = \"nope\"\nurl = \"ftp://127.0.0.1:9\"", "not http"),
        (
            "serves = \"tiny\"\nurl = \"http://127.0.0.1:9\"\nkind = \"tgi\"",
            "unknown variant",
        ),
        (
            "serves = \"tiny\"\nurl = \"http://127.0.0.1:9\"\nmodel_digest = \"abc\"",
            "64 hex digits",
        ),
        (
            "serves = \"tiny\"\nurl = \"http://127.0.0.1:9\"\nbase_model_digest = \"xyz\"",
            "base_model_digest is not 64 hex digits",
        ),
        ("serves = \"tiny\"\nurl = \"ftp://127.0.0.1:9\"", "not http"),
    ] {
        refused(
            &format!("{good}\n[[inference.executors]]\nname = \"x\"\n{executor}\n"),
            says,
        );
    }
}

/// `meshnode model make-tiny DIR --seed SEED`.
pub(crate) fn make_tiny(dir: &Path, seed: u64) {
    let o = run(&[
        "model",
        "make-tiny",
        dir.to_str().unwrap(),
        "--seed",
        &seed.to_string(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A fresh node serving `models`, with `executors` (TOML `[[inference.executors]]`
/// tables) in its config.
pub(crate) fn serve(models: &[&Path], executors: &str) -> (tempfile::TempDir, Daemon) {
    serve_edited(models, executors, &[])
}

/// [`serve`] with `edits` made to the node's config first.
pub(crate) fn serve_edited(
    models: &[&Path],
    executors: &str,
    edits: &[(&str, &str)],
) -> (tempfile::TempDir, Daemon) {
    let node = tempfile::tempdir().unwrap();
    assert!(init(node.path(), &[]).status.success());
    edit_config(node.path(), edits);
    let cfg = node.path().join("meshnode.toml");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("executors = []\n", "");
    std::fs::write(&cfg, format!("{text}\n{executors}")).unwrap();
    let mut cmd = meshnode();
    cmd.args([
        "run",
        node.path().to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    for m in models {
        cmd.args(["--model", m.to_str().unwrap()]);
    }
    (node, Daemon::start(cmd))
}

#[test]
fn chat_completions_use_the_models_template_and_stream_the_same_answer() {
    let models = tempfile::tempdir().unwrap();
    let tiny = models.path().join("tiny");
    make_tiny(&tiny, 7);
    // the GGUF alone: its template comes from the file's metadata
    let lone = models.path().join("lone");
    std::fs::create_dir_all(&lone).unwrap();
    std::fs::copy(tiny.join("model.gguf"), lone.join("lone.gguf")).unwrap();
    std::fs::copy(tiny.join("tokenizer.json"), lone.join("tokenizer.json")).unwrap();
    // a model without a template, and one whose template refuses system messages
    let plain = models.path().join("plain");
    make_tiny(&plain, 7);
    std::fs::remove_file(plain.join("tokenizer_config.json")).unwrap();
    let strict = models.path().join("strict");
    make_tiny(&strict, 7);
    std::fs::write(strict.join("tokenizer_config.json"), serde_json::json!({
        "chat_template": "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('no system messages') }}{% endif %}{{ m.content.strip() }}\n{% endfor %}",
        "eos_token": "\n\n",
    }).to_string()).unwrap();
    // a tiny Mistral: its family's [INST] format
    let mistral = models.path().join("mistral");
    let o = run(&[
        "model",
        "make-tiny",
        mistral.to_str().unwrap(),
        "--arch",
        "mistral",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (_n, d) = serve(
        &[&tiny, &lone.join("lone.gguf"), &plain, &strict, &mistral],
        "",
    );
    runtime().block_on(async {
        let http = http_client();
        let chat_url = d.url("/v1/chat/completions");
        let messages = serde_json::json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Say "}, {"type": "text", "text": "hi"}]},
        ]);
        let (status, r) = post_json(&http, &chat_url, serde_json::json!({
            "model": "tiny", "messages": messages, "max_tokens": 10, "temperature": 0,
            "return_token_ids": true, "logprobs": true, "top_logprobs": 2,
        })).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["object"], "chat.completion");
        let choice = &r["choices"][0];
        assert_eq!(choice["message"]["role"], "assistant");
        // the prompt is the ChatML rendering of the messages, then the assistant's turn
        let rendered = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n";
        let want: Vec<u32> = rendered.bytes().map(u32::from).collect();
        assert_eq!(choice["prompt_token_ids"], serde_json::json!(want));
        // the same ids as a plain completion of the rendered prompt
        let (_, c) = post_json(&http, &d.url("/v1/completions"), serde_json::json!({
            "model": "tiny", "prompt": rendered, "max_tokens": 10, "temperature": 0,
            "return_token_ids": true, "stop": "<|im_end|>",
        })).await;
        assert_eq!(choice["token_ids"], c["choices"][0]["token_ids"], "{r} {c}");
        assert_eq!(choice["message"]["content"], c["choices"][0]["text"]);
        let content = choice["logprobs"]["content"].as_array().unwrap();
        assert_eq!(content.len(), r["usage"]["completion_tokens"].as_u64().unwrap() as usize);
        assert_eq!(content[0]["top_logprobs"].as_array().unwrap().len(), 2);
        assert!(content[0]["bytes"].is_array());
        // streamed: a role delta, then content deltas that add up to the same message
        let resp = http.post(&chat_url).header("content-type", "application/json").body(serde_json::json!({
            "model": "tiny", "messages": messages, "max_tokens": 10, "temperature": 0,
            "stream": true}).to_string()).send().await.unwrap();
        let body = resp.text().await.unwrap();
        let events: Vec<&str> = body.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
        assert_eq!(events.last(), Some(&"[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
        let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(text, choice["message"]["content"].as_str().unwrap());
        assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], choice["finish_reason"]);
        // the GGUF's own template gives the same answer
        let (status, g) = post_json(&http, &chat_url, serde_json::json!({
            "model": "lone.gguf", "messages": messages, "max_tokens": 10, "temperature": 0,
            "return_token_ids": true})).await;
        assert_eq!(status, 200, "{g}");
        assert_eq!(g["choices"][0]["token_ids"], choice["token_ids"]);
        // the Mistral speaks its own format: the system text joins the first user turn
        let (status, m) = post_json(&http, &chat_url, serde_json::json!({
            "model": "mistral", "messages": messages, "max_tokens": 4, "temperature": 0,
            "return_token_ids": true})).await;
        assert_eq!(status, 200, "{m}");
        let want: Vec<u32> = "[INST] Be brief.\n\nSay hi [/INST]".bytes().map(u32::from).collect();
        assert_eq!(m["choices"][0]["prompt_token_ids"], serde_json::json!(want));
        // refusals: no template, a template that refuses, bad messages
        let bad = [
            (serde_json::json!({"model": "plain", "messages": messages}), "model", "chat template"),
            (serde_json::json!({"model": "strict", "messages": messages}), "messages", "no system messages"),
            (serde_json::json!({"model": "tiny", "messages": []}), "messages", "non-empty"),
            (serde_json::json!({"model": "tiny", "messages": [{"role": "user"}]}), "messages", "content"),
            (serde_json::json!({"model": "mistral", "messages": [{"role": "user", "content": "a"},
                {"role": "user", "content": "b"}]}), "messages", "roles must alternate"),
            (serde_json::json!({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}), "messages", "text parts"),
            (serde_json::json!({"model": "tiny", "messages": messages, "top_logprobs": 3}), "top_logprobs", "logprobs: true"),
        ];
        for (body, param, says) in bad {
            let (status, r) = post_json(&http, &chat_url, body.clone()).await;
            assert_eq!(status, 400, "{body} → {r}");
            assert_eq!(r["error"]["param"], param, "{r}");
            assert!(r["error"]["message"].as_str().unwrap().contains(says), "{r}");
        }
        // the strict template accepts what it allows; its eos string ends the answer
        let (status, r) = post_json(&http, &chat_url, serde_json::json!({
            "model": "strict", "messages": [{"role": "user", "content": "  hi  "}],
            "max_tokens": 40, "temperature": 0, "return_token_ids": true})).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["choices"][0]["prompt_token_ids"], serde_json::json!([104, 105, 10]));
        assert!(!r["choices"][0]["message"]["content"].as_str().unwrap().contains("\n\n"));
    });
}

#[test]
fn concurrent_requests_are_batched_and_each_gets_its_solo_answer() {
    let models = tempfile::tempdir().unwrap();
    let tiny = models.path().join("tiny");
    make_tiny(&tiny, 7);
    let (_n, d) = serve(&[&tiny], "");
    let prompts: Vec<String> = (0..8)
        .map(|i| format!("request {i}: {}", "x".repeat(i)))
        .collect();
    runtime().block_on(async {
        let http = http_client();
        let url = d.url("/v1/completions");
        let body = |p: &str, i: usize| serde_json::json!({
            "model": "tiny", "prompt": p, "max_tokens": 6 + i, "temperature": if i.is_multiple_of(2) { 0.0 } else { 0.9 },
            "seed": i, "return_token_ids": true, "logprobs": 1});
        let mut solo = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            solo.push(post_json(&http, &url, body(p, i)).await.1);
        }
        let together = futures_util::future::join_all(
            prompts.iter().enumerate().map(|(i, p)| post_json(&http, &url, body(p, i)))).await;
        for (i, ((status, r), s)) in together.iter().zip(&solo).enumerate() {
            assert_eq!(*status, 200, "{r}");
            assert_eq!(r["choices"][0]["token_ids"], s["choices"][0]["token_ids"], "request {i}");
            assert_eq!(r["fleetmesh"]["transcript_digest"], s["fleetmesh"]["transcript_digest"]);
            assert_eq!(r["choices"][0]["token_ids"].as_array().unwrap().len(), 6 + i);
        }
        // several prompts in one request (strings and token ids mixed): one choice each, in
        // order, each what it is alone
        let greedy = |p: Value| serde_json::json!({"model": "tiny", "prompt": p, "max_tokens": 7,
                                                   "temperature": 0, "return_token_ids": true});
        let (status, many) = post_json(&http, &url, greedy(serde_json::json!(
            ["request 0: ", [104, 105], "request 2: xx"]))).await;
        assert_eq!(status, 200, "{many}");
        let choices = many["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 3);
        let mut total = 0;
        for (i, p) in [serde_json::json!("request 0: "), serde_json::json!([104, 105]), serde_json::json!("request 2: xx")].into_iter().enumerate() {
            let (_, one) = post_json(&http, &url, greedy(p)).await;
            assert_eq!(choices[i]["index"], i);
            assert_eq!(choices[i]["token_ids"], one["choices"][0]["token_ids"], "prompt {i}");
            assert_eq!(choices[i]["prompt_token_ids"], one["choices"][0]["prompt_token_ids"]);
            assert_eq!(choices[i]["fleetmesh"]["transcript_digest"], one["fleetmesh"]["transcript_digest"]);
            total += one["usage"]["total_tokens"].as_u64().unwrap();
        }
        assert_eq!(many["usage"]["total_tokens"].as_u64().unwrap(), total);
    });
}
