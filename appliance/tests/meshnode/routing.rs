//! Inference routing: a model served by remote executors only is forwarded to them (the
//! best first, failing over), and Ollama takes part in the quorum through its native API.
//! No Ollama server can run here: an **Ollama double** (`ollama_double`) speaks its
//! documented `/api/tags`, `/api/generate` (raw, logprobs with token bytes) and OpenAI
//! layer, computing every answer on a real fleetmesh node serving the tiny model.

use std::path::Path;

use serde_json::{Value, json};

use super::inference::{make_tiny, serve};
use super::{Daemon, get_json, http_client, post_json, runtime};

/// What the double does to the answers it relays.
#[derive(Clone, Copy, PartialEq)]
enum Double {
    Honest,
    /// Its `/api/generate` reports one token other than what the model generated.
    Tampering,
}

/// An Ollama double in front of `upstream` (a fleetmesh node serving `tiny`), reading
/// token bytes with the tokenizer in `model`; its base URL.
fn ollama_double(upstream: &Daemon, model: &Path, how: Double) -> String {
    let tok =
        fleetmesh_inference::tokenizer::TextTokenizer::load(&model.join("tokenizer.json")).unwrap();
    let bytes = std::sync::Arc::new(tok.token_bytes());
    let up = upstream.url("");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let http = http_client();
            let relay = {
                let (http, up) = (http.clone(), up.clone());
                move |path: &'static str| {
                    let (http, up) = (http.clone(), up.clone());
                    axum::routing::post(move |body: axum::body::Bytes| async move {
                        // Ollama's OpenAI layer: the upstream's answer as it is
                        let r = http
                            .post(format!("{up}{path}"))
                            .header("content-type", "application/json")
                            .body(body)
                            .send()
                            .await
                            .unwrap();
                        let status = axum::http::StatusCode::from_u16(r.status().as_u16()).unwrap();
                        (status, r.bytes().await.unwrap())
                    })
                }
            };
            let generate = {
                let (http, up) = (http.clone(), up.clone());
                axum::routing::post(move |axum::Json(req): axum::Json<Value>| async move {
                    generate(&http, &up, &bytes, &req, how).await
                })
            };
            let app = axum::Router::new()
                .route(
                    "/api/tags",
                    axum::routing::get(|| async {
                        axum::Json(json!({"models": [{"name": "tiny:latest",
                            "model": "tiny:latest", "digest": "0".repeat(64)}]}))
                    }),
                )
                .route("/api/generate", generate)
                .route("/v1/completions", relay("/v1/completions"))
                .route("/v1/chat/completions", relay("/v1/chat/completions"));
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    url
}

/// `POST /api/generate` as Ollama answers it (raw prompt, greedy, `logprobs` with each
/// token's text and bytes and its `top_logprobs`), computed on the upstream node.
async fn generate(
    http: &reqwest::Client,
    up: &str,
    bytes: &[Option<Vec<u8>>],
    req: &Value,
    how: Double,
) -> (axum::http::StatusCode, axum::Json<Value>) {
    let refuse = |m: &str| {
        (
            axum::http::StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": m})),
        )
    };
    if req["raw"] != true || req["stream"] != false || req["options"]["temperature"] != 0 {
        return refuse("this double answers raw, greedy, unstreamed requests");
    }
    if !matches!(req["model"].as_str(), Some("tiny" | "tiny:latest")) {
        return refuse("model not found");
    }
    let (_, v) = post_json(
        http,
        &format!("{up}/v1/completions"),
        json!({"model": "tiny", "prompt": req["prompt"], "temperature": 0,
               "max_tokens": req["options"]["num_predict"],
               "logprobs": req["top_logprobs"], "return_token_ids": true,
               "return_tokens_as_token_ids": true}),
    )
    .await;
    let c = &v["choices"][0];
    let piece = |id: u64| -> Value {
        let b = bytes[id as usize].clone().unwrap_or_default();
        json!({"token": String::from_utf8_lossy(&b), "bytes": b})
    };
    let mut lps = Vec::new();
    let mut ids: Vec<u64> = c["token_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap())
        .collect();
    // Ollama does not report the end-of-sequence token it stopped at
    if c["finish_reason"] == "stop" && ids.last().is_some_and(|id| bytes[*id as usize].is_none()) {
        ids.pop();
    }
    for (i, &id) in ids.iter().enumerate() {
        if how == Double::Tampering && i == 1 {
            // another token than the one generated, claimed with a wide margin
            let other = if id == 100 { 101 } else { 100 };
            let mut e = piece(other);
            e["logprob"] = json!(0.0);
            let (mut first, mut second) = (piece(other), piece(id));
            first["logprob"] = json!(0.0);
            second["logprob"] = json!(-10.0);
            e["top_logprobs"] = json!([first, second]);
            lps.push(e);
            continue;
        }
        let mut e = piece(id);
        e["logprob"] = c["logprobs"]["token_logprobs"][i].clone();
        e["top_logprobs"] = c["logprobs"]["top_logprobs"][i]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, lp)| {
                let mut t = piece(k.strip_prefix("token_id:").unwrap().parse().unwrap());
                t["logprob"] = lp.clone();
                t
            })
            .collect();
        lps.push(e);
    }
    let done_reason = if c["finish_reason"] == "length" {
        "length"
    } else {
        "stop"
    };
    (
        axum::http::StatusCode::OK,
        axum::Json(
            json!({"model": req["model"], "created_at": "2026-12-03T00:00:00Z",
            "response": c["text"], "done": true, "done_reason": done_reason,
            "prompt_eval_count": v["usage"]["prompt_tokens"],
            "eval_count": lps.len(), "logprobs": lps}),
        ),
    )
}

/// `far-tiny` as the router's `/v1/models` lists it.
async fn far_tiny(http: &reqwest::Client, r: &Daemon) -> Value {
    let models = get_json(http, r.url("/v1/models")).await;
    let list = models["data"].as_array().unwrap();
    list.iter().find(|m| m["id"] == "far-tiny").unwrap().clone()
}

fn executor(name: &str, url: &str, serves: &str, kind: &str) -> String {
    format!(
        "[[inference.executors]]\nname = \"{name}\"\nurl = \"{url}\"\nserves = \"{serves}\"\n\
         model = \"tiny\"\nkind = \"{kind}\"\ntimeout_s = 60\nconnect_timeout_s = 2\n\n"
    )
}

#[test]
fn routed_models_are_forwarded_to_the_best_executor_and_ollama_is_a_quorum_member() {
    let models = tempfile::tempdir().unwrap();
    let (honest, other) = (
        models.path().join("honest").join("tiny"),
        models.path().join("other").join("tiny"),
    );
    make_tiny(&honest, 7);
    make_tiny(&other, 8);
    let (_a, a) = serve(&[&honest], "");
    let (_b, b) = serve(&[&other], "");
    let ollama_a = ollama_double(&a, &honest, Double::Honest);
    let ollama_b = ollama_double(&b, &other, Double::Honest);
    let lying = ollama_double(&a, &honest, Double::Tampering);
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    // the router: `tiny` local with two Ollama executors in its quorum (the one with other
    // weights asked first); `far-tiny` routed to a dead server, node A and Ollama over A;
    // `gone` routed to the dead server alone
    let cfg = executor("ollama-b", &ollama_b, "tiny", "ollama")
        + &executor("ollama-a", &ollama_a, "tiny", "ollama")
        + &executor("dead", &dead, "far-tiny", "openai")
        + &executor("node-a", &a.url(""), "far-tiny", "vllm")
        + &executor("ollama-far", &ollama_a, "far-tiny", "ollama")
        + &executor("dead-too", &dead, "gone", "openai");
    let (_r, r) = serve(&[&honest], &cfg);
    let (_q, liar_q) = serve(
        &[&honest],
        &(executor("lying", &lying, "tiny", "ollama")
            + &executor("ollama-a", &ollama_a, "tiny", "ollama")),
    );
    runtime().block_on(async {
        let http = http_client();
        // what node A itself answers
        let ask = json!({"model": "tiny", "prompt": "hello", "max_tokens": 8, "temperature": 0});
        let (status, direct) = post_json(&http, &a.url("/v1/completions"), ask.clone()).await;
        assert_eq!(status, 200, "{direct}");
        let text = direct["choices"][0]["text"].as_str().unwrap().to_owned();

        // listed with its executors
        let far = far_tiny(&http, &r).await;
        assert_eq!(far["fleetmesh"]["routed"], true, "{far}");
        let names: Vec<&str> = far["fleetmesh"]["executors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["dead", "node-a", "ollama-far"]);

        // forwarded: the same greedy answer, by a live executor (the dead one failed over)
        let mut routed = ask.clone();
        routed["model"] = json!("far-tiny");
        for _ in 0..3 {
            let (status, v) = post_json(&http, &r.url("/v1/completions"), routed.clone()).await;
            assert_eq!(status, 200, "{v}");
            assert_eq!(v["choices"][0]["text"], text.as_str(), "{v}");
            assert_eq!(v["fleetmesh"]["routed"], true);
            assert_ne!(v["fleetmesh"]["executor"], "dead", "{v}");
        }
        let far = far_tiny(&http, &r).await;
        let dead_stats = &far["fleetmesh"]["executors"][0];
        assert!(dead_stats["failures"].as_u64().unwrap() >= 1, "{far}");
        assert_eq!(dead_stats["up"], false, "{far}");
        assert!(
            far["fleetmesh"]["executors"].as_array().unwrap()[1..]
                .iter()
                .any(|e| e["latency_ms"].as_f64().is_some_and(|l| l > 0.0)),
            "{far}"
        );
        // stop strings go with the request: the answer ends before the first
        let stop: String = text.chars().skip(2).take(2).collect();
        let cut = &text[..text.find(&stop).unwrap()];
        let mut stopped = routed.clone();
        stopped["stop"] = json!([stop]);
        let (status, v) = post_json(&http, &r.url("/v1/completions"), stopped).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["text"], cut, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        // streamed through
        let mut streamed = routed.clone();
        streamed["stream"] = json!(true);
        let resp = http
            .post(r.url("/v1/completions"))
            .json(&streamed)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert!(resp.headers().get("x-fleetmesh-executor").is_some());
        let sse = resp.text().await.unwrap();
        assert!(sse.contains("data: [DONE]"), "{sse}");
        // schema-bounds: the schema goes to the executor, its answer is checked here; an
        // executor whose output the schema rejects has failed, and the next is tried
        let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}},
                            "required": ["ok"], "additionalProperties": false});
        let mut bounded = routed.clone();
        bounded["verification"] = json!("schema-bounds");
        bounded["max_tokens"] = json!(32);
        bounded["response_format"] =
            json!({"type": "json_schema", "json_schema": {"name": "ok", "schema": schema}});
        let (status, v) = post_json(&http, &r.url("/v1/completions"), bounded.clone()).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["fleetmesh"]["verification"], "schema-bounds", "{v}");
        assert_eq!(v["fleetmesh"]["verdict"]["valid"], true, "{v}");
        let doc: Value = serde_json::from_str(v["choices"][0]["text"].as_str().unwrap()).unwrap();
        assert!(jsonschema::is_valid(&schema, &doc), "{doc}");
        // a stop string that cuts the document: every executor's output fails the check
        let mut cut_short = bounded.clone();
        cut_short["stop"] = json!(["\""]);
        let (status, v) = post_json(&http, &r.url("/v1/completions"), cut_short).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (502, Some("executors_failed")),
            "{v}"
        );
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not valid under the schema"),
            "{v}"
        );
        let mut streamed_bounded = bounded.clone();
        streamed_bounded["stream"] = json!(true);
        let (status, v) = post_json(&http, &r.url("/v1/completions"), streamed_bounded).await;
        assert_eq!(
            (status, v["error"]["param"].as_str()),
            (400, Some("stream")),
            "{v}"
        );
        // a schema that is not JSON Schema is refused before any executor is asked
        let mut not_a_schema = bounded.clone();
        not_a_schema["response_format"]["json_schema"]["schema"] = json!({"type": 12});
        let (status, v) = post_json(&http, &r.url("/v1/completions"), not_a_schema).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (400, Some("unsupported_schema")),
            "{v}"
        );
        bounded.as_object_mut().unwrap().remove("response_format");
        let (status, v) = post_json(&http, &r.url("/v1/completions"), bounded).await;
        assert_eq!(
            (status, v["error"]["param"].as_str()),
            (400, Some("response_format")),
            "{v}"
        );
        // other modes need a local model; a client's error is its own (relayed, not
        // failed over)
        let mut verified = routed.clone();
        verified["verification"] = json!("quasi-deterministic");
        let (status, v) = post_json(&http, &r.url("/v1/completions"), verified).await;
        assert_eq!(
            (status, v["error"]["param"].as_str()),
            (400, Some("verification")),
            "{v}"
        );
        let mut wrong = routed.clone();
        wrong["max_tokens"] = json!(-1);
        let (status, v) = post_json(&http, &r.url("/v1/completions"), wrong).await;
        assert_eq!(status, 400, "{v}");
        // nobody answers: 502 naming each failure
        let mut gone = routed.clone();
        gone["model"] = json!("gone");
        let (status, v) = post_json(&http, &r.url("/v1/completions"), gone).await;
        assert_eq!(
            (status, v["error"]["code"].as_str()),
            (502, Some("executors_failed")),
            "{v}"
        );
        assert!(
            v["error"]["message"].as_str().unwrap().contains("dead-too"),
            "{v}"
        );

        // Ollama in the quorum: the one with other weights diverges, the honest one agrees
        let mut q = ask.clone();
        q.as_object_mut().unwrap().remove("temperature");
        q["verification"] = json!("quasi-deterministic");
        let (status, v) = post_json(&http, &r.url("/v1/completions"), q.clone()).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["choices"][0]["text"], text.as_str(), "{v}");
        let verdict = &v["fleetmesh"]["verdict"];
        let by = |v: &Value, name: &str| {
            v["executors"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["executor"] == name)
                .unwrap()
                .clone()
        };
        assert_eq!(verdict["outcome"], "majority", "{verdict}");
        assert_eq!(by(verdict, "ollama-a")["status"], "agreed", "{verdict}");
        assert_eq!(by(verdict, "ollama-a")["engine"], "ollama", "{verdict}");
        assert_eq!(by(verdict, "ollama-b")["status"], "diverged", "{verdict}");
        // an Ollama that reports a token other than the one generated is caught
        let (status, v) = post_json(&http, &liar_q.url("/v1/completions"), q).await;
        assert_eq!(status, 200, "{v}");
        let verdict = &v["fleetmesh"]["verdict"];
        assert_eq!(by(verdict, "lying")["status"], "diverged", "{verdict}");
        assert_eq!(by(verdict, "lying")["flagged"], true, "{verdict}");
        assert_eq!(by(verdict, "ollama-a")["status"], "agreed", "{verdict}");
        // its health: the model listed by /api/tags
        let health = get_json(&http, r.url("/v1/executors")).await;
        let list = health["data"].as_array().unwrap();
        let e = list.iter().find(|e| e["executor"] == "ollama-a").unwrap();
        assert_eq!(e["healthy"], true, "{health}");
        let e = list.iter().find(|e| e["executor"] == "dead").unwrap();
        assert_eq!(
            (&e["healthy"], &e["routed"]),
            (&json!(false), &json!(true)),
            "{health}"
        );
    });
}
