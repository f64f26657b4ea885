//! schema-bounds on the node: `response_format` on completions and chat (also streamed),
//! `"verification": "schema-bounds"`, the refusals, and `meshnode infer --schema` on the
//! local model and on a remote executor.

use super::inference::{make_tiny, serve};
use super::quorum::fake_executor;
use super::*;
use serde_json::json;

fn person() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 10},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["admin", "ops", "dev"]}, "maxItems": 3},
            "manager": {"type": ["string", "null"], "maxLength": 8}
        },
        "required": ["name", "age", "tags"],
        "additionalProperties": false
    })
}

fn format_of(schema: &Value) -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}})
}

/// `text` with each string literal as `S`: what lies between a document's tokens.
fn outside_strings(text: &str) -> String {
    let (mut out, mut in_str, mut esc) = (String::new(), false, false);
    for c in text.chars() {
        match (in_str, esc, c) {
            (true, true, _) => esc = false,
            (true, false, '\\') => esc = true,
            (true, false, '"') => {
                in_str = false;
                out.push('S');
            }
            (true, false, _) => {}
            (false, _, '"') => in_str = true,
            (false, _, c) => out.push(c),
        }
    }
    out
}

/// Whether `text` is one JSON document valid under `schema` (the jsonschema crate's word).
fn valid(schema: &Value, text: &str) -> bool {
    serde_json::from_str::<Value>(text).is_ok_and(|v| jsonschema::is_valid(schema, &v))
}

#[test]
fn response_format_constrains_answers_over_http_and_on_the_cli() {
    let models = tempfile::tempdir().unwrap();
    let tiny = models.path().join("tiny");
    make_tiny(&tiny, 7);
    // the same model with no `}` token of its own (only `}}`): it cannot close an object
    let nobrace = models.path().join("nobrace");
    std::fs::create_dir(&nobrace).unwrap();
    for e in std::fs::read_dir(&tiny).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), nobrace.join(e.file_name())).unwrap();
    }
    let tok_path = nobrace.join("tokenizer.json");
    let mut tok: Value = serde_json::from_slice(&std::fs::read(&tok_path).unwrap()).unwrap();
    let vocab = tok["model"]["vocab"].as_object_mut().unwrap();
    let id = vocab.remove("}").unwrap();
    vocab.insert("}}".into(), id);
    std::fs::write(&tok_path, tok.to_string()).unwrap();
    let (_node, d) = serve(&[&tiny, &nobrace], "");
    let schema = person();
    runtime().block_on(async {
        let http = http_client();
        let url = d.url("/v1/completions");
        // a schema that vocabulary cannot spell: 400 before generating, naming the byte
        let (status, r) = post_json(&http, &url, json!({
            "model": "nobrace", "prompt": "x", "max_tokens": 60,
            "response_format": format_of(&schema),
        }))
        .await;
        assert_eq!(status, 400, "{r}");
        assert_eq!(r["error"]["code"], "unsupported_schema", "{r}");
        let says = r["error"]["message"].as_str().unwrap();
        assert!(says.contains("no token writes `}` after \"{"), "{r}");
        for temperature in [0.0, 1.0] {
            let body = json!({
                "model": "tiny", "prompt": ["hello", "{\"name\": "], "max_tokens": 60,
                "temperature": temperature, "seed": 3, "return_token_ids": true,
                "response_format": format_of(&schema),
            });
            let (status, r) = post_json(&http, &url, body.clone()).await;
            assert_eq!(status, 200, "{r}");
            for c in r["choices"].as_array().unwrap() {
                let text = c["text"].as_str().unwrap();
                assert!(valid(&schema, text), "{text:?}");
                // by default at most one space between tokens: no tabs or line breaks
                let between = outside_strings(text);
                assert!(!between.contains(['\t', '\r', '\n']), "{text:?}");
                assert!(!between.contains("  "), "{text:?}");
                assert_eq!(c["finish_reason"], "stop", "{c}");
                let v = &c["fleetmesh"]["verdict"];
                assert_eq!(v["mode"], "schema-bounds");
                assert_eq!(v["valid"], true, "{v}");
            }
            // the same request without the constraint: the tiny model writes no JSON
            let mut free = body;
            free.as_object_mut().unwrap().remove("response_format");
            let (_, r) = post_json(&http, &url, free).await;
            for c in r["choices"].as_array().unwrap() {
                assert!(!valid(&schema, c["text"].as_str().unwrap()), "{c}");
                assert!(c["fleetmesh"]["verdict"].is_null());
            }
        }
        // json_object: any object
        let (status, r) = post_json(&http, &url, json!({
            "model": "tiny", "prompt": "x", "max_tokens": 40, "temperature": 0,
            "response_format": {"type": "json_object"}})).await;
        assert_eq!(status, 200, "{r}");
        let v: Value = serde_json::from_str(r["choices"][0]["text"].as_str().unwrap()).unwrap();
        assert!(v.is_object(), "{v}");

        // whitespace: any when asked for, none as vLLM's flag disables it
        for (flag, none) in [("any_whitespace", false), ("disable_any_whitespace", true)] {
            let mut body = json!({"model": "tiny", "prompt": "{", "max_tokens": 60,
                "temperature": 1.0, "seed": 9, "response_format": format_of(&schema)});
            body[flag] = json!(true);
            let (status, r) = post_json(&http, &url, body).await;
            assert_eq!(status, 200, "{r}");
            let text = r["choices"][0]["text"].as_str().unwrap();
            assert!(valid(&schema, text), "{flag}: {text:?}");
            if none {
                assert!(!outside_strings(text).contains([' ', '\t', '\r', '\n']), "{text:?}");
            }
        }

        // strings under a format and a pattern, and an Optional (anyOf with null) as
        // Pydantic writes it: valid with formats asserted
        let dated = json!({"type": "object", "properties": {
            "when": {"type": "string", "format": "date-time"},
            "code": {"type": "string", "pattern": "^[A-Z]{2}\\d{3}$"},
            "age": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 150},
                {"type": "null"}], "default": null}},
            "required": ["when", "code", "age"], "additionalProperties": false});
        let check = jsonschema::options()
            .should_validate_formats(true)
            .build(&dated)
            .unwrap();
        for temperature in [0.0, 1.0] {
            let (status, r) = post_json(&http, &url, json!({
                "model": "tiny", "prompt": "x", "max_tokens": 80, "temperature": temperature,
                "seed": 5, "response_format": format_of(&dated)})).await;
            assert_eq!(status, 200, "{r}");
            let text = r["choices"][0]["text"].as_str().unwrap();
            let v: Value = serde_json::from_str(text).unwrap();
            assert!(check.is_valid(&v), "{text}");
            assert_eq!(r["choices"][0]["fleetmesh"]["verdict"]["valid"], true, "{r}");
        }

        // allOf as Pydantic writes inheritance: the base by reference, the fields beside
        let inherited = json!({"$defs": {"Base": {"type": "object",
            "properties": {"id": {"type": "integer", "minimum": 1}}, "required": ["id"]}},
            "allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"tag": {"type": "string",
            "maxLength": 4}}, "required": ["tag"]}]});
        let (status, r) = post_json(&http, &url, json!({"model": "tiny", "prompt": "x",
            "max_tokens": 60, "temperature": 1.0, "seed": 3,
            "response_format": format_of(&inherited)})).await;
        assert_eq!(status, 200, "{r}");
        let text = r["choices"][0]["text"].as_str().unwrap();
        assert!(valid(&inherited, text), "{text:?}");
        assert_eq!(r["choices"][0]["fleetmesh"]["verdict"]["valid"], true, "{r}");

        // tags: an array of enum values, each at most once, at least two — sampled, so
        // the model would repeat one if the constraint let it
        let tagged = json!({"type": "object", "properties": {"tags": {"type": "array",
            "items": {"enum": ["a", "b", "c"]}, "uniqueItems": true, "minItems": 2}},
            "required": ["tags"], "additionalProperties": false});

        // a Pydantic tagged union (`oneOf` of models with a `const` tag, OpenAPI's
        // `discriminator` beside) in a list: sampled, so the model writes several kinds
        let pets = json!({"$defs": {
            "Cat": {"type": "object", "properties": {"kind": {"const": "cat"},
                "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["kind", "lives"], "additionalProperties": false},
            "Dog": {"type": "object", "properties": {"kind": {"const": "dog"},
                "name": {"type": "string", "maxLength": 6}},
                "required": ["kind", "name"], "additionalProperties": false}},
            "type": "array", "minItems": 2, "maxItems": 3, "items": {"oneOf": [
                {"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                "discriminator": {"propertyName": "kind"}}});
        for (schema, max_tokens, seeds) in [(&tagged, 40, 0..4), (&pets, 80, 0..3)] {
            for seed in seeds {
                let (status, r) = post_json(&http, &url, json!({"model": "tiny",
                    "prompt": "x", "max_tokens": max_tokens, "temperature": 1.0, "seed": seed,
                    "response_format": format_of(schema)})).await;
                assert_eq!(status, 200, "{r}");
                let text = r["choices"][0]["text"].as_str().unwrap();
                assert!(valid(schema, text), "{text:?}");
                assert_eq!(r["choices"][0]["fleetmesh"]["verdict"]["valid"], true, "{r}");
            }
        }

        // chat, streamed and not: the deltas add up to the same valid document
        let chat = d.url("/v1/chat/completions");
        let body = json!({
            "model": "tiny", "messages": [{"role": "user", "content": "Who?"}],
            "max_tokens": 60, "temperature": 0, "response_format": format_of(&schema),
            "verification": "schema-bounds",
        });
        let (status, r) = post_json(&http, &chat, body.clone()).await;
        assert_eq!(status, 200, "{r}");
        let content = r["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(valid(&schema, content), "{content:?}");
        assert_eq!(r["fleetmesh"]["verdict"]["valid"], true);
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let text = http.post(&chat).header("content-type", "application/json").body(streamed.to_string()).send().await.unwrap().text().await.unwrap();
        let chunks: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let joined: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
        assert_eq!(joined, content);
        let last = chunks.last().unwrap();
        assert_eq!(last["fleetmesh"]["verdict"]["valid"], true, "{last}");
        assert_eq!(last["choices"][0]["finish_reason"], "stop");

        // a stop string that cuts the document: schema-bounds refuses the answer
        let mut cut = body.clone();
        cut["stop"] = json!(":");
        let (status, r) = post_json(&http, &chat, cut).await;
        assert_eq!(status, 502, "{r}");
        assert_eq!(r["error"]["code"], "schema_invalid");
        assert_eq!(r["fleetmesh"]["verdict"]["valid"], false, "{r}");

        // refusals, before any generation
        let refusals = [
            (json!({"response_format": format_of(&json!({"type": "string", "pattern": "(?=a)"}))}), "unsupported_schema", "`pattern`"),
            (json!({"response_format": format_of(&json!({"type": "object", "properties": {"a": {"format": "hostname"}}}))}), "unsupported_schema", "#/properties/a"),
            (json!({"response_format": format_of(&json!({"type": "string", "allOf": [{"pattern": "^a"}, {"pattern": "b$"}]}))}), "unsupported_schema", "`pattern` differs"),
            (json!({"response_format": format_of(&json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}))}), "unsupported_schema", "`uniqueItems` is supported over items that are an `enum`"),
            (json!({"response_format": format_of(&json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}))}), "unsupported_schema", "may both match one document"),
            (json!({"response_format": {"type": "xml"}}), "", "json_object or json_schema"),
            (json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}), "", "must be a JSON Schema"),
            (json!({"verification": "schema-bounds"}), "", "needs a response_format"),
            (json!({"response_format": format_of(&schema), "verification": "quasi-deterministic"}), "", "cannot be combined"),
            (json!({"response_format": format_of(&schema), "max_tokens": 5}), "", "too few for this schema"),
            (json!({"response_format": format_of(&schema), "any_whitespace": "yes"}), "", "any_whitespace must be a boolean"),
            (json!({"response_format": format_of(&schema), "any_whitespace": true, "disable_any_whitespace": true}), "", "cannot both be true"),
        ];
        for (extra, code, says) in refusals {
            let mut body = json!({"model": "tiny", "prompt": "hi", "max_tokens": 30});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            let (status, r) = post_json(&http, &url, body.clone()).await;
            assert_eq!(status, 400, "{body} → {r}");
            assert!(r["error"]["message"].as_str().unwrap().contains(says), "{r}");
            if !code.is_empty() {
                assert_eq!(r["error"]["code"], code, "{r}");
            }
        }
    });

    // the CLI, locally and with the node as a remote executor: the node constrains by
    // the response_format it is sent, so both give the same greedy document
    let file = models.path().join("person.json");
    std::fs::write(&file, schema.to_string()).unwrap();
    let base = [
        "infer",
        "--model",
        tiny.to_str().unwrap(),
        "--prompt",
        "hello",
        "--max-tokens",
        "60",
        "--schema",
        file.to_str().unwrap(),
    ];
    let o = run(&base);
    assert!(o.status.success(), "{}", stderr(&o));
    let local: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(local["verdict"]["valid"], true, "{local}");
    assert_eq!(local["verdict"]["constrained"], "local");
    assert!(valid(&schema, local["text"].as_str().unwrap()), "{local}");
    // --whitespace: sampled answers with `none` hold no whitespace between tokens, with
    // `any` the same draws do (most bytes a structural position allows are whitespace)
    let mut spaced = 0;
    for seed in ["1", "2", "3"] {
        for (ws, none) in [("none", true), ("any", false)] {
            let mut args = base.to_vec();
            args.extend(["--whitespace", ws, "--temperature", "1", "--seed", seed]);
            let o = run(&args);
            assert!(o.status.success(), "{}", stderr(&o));
            let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
            let text = out["text"].as_str().unwrap();
            assert!(valid(&schema, text), "{out}");
            let between = outside_strings(text).contains(char::is_whitespace);
            assert!(!(none && between), "--whitespace none: {text:?}");
            spaced += usize::from(!none && between);
        }
    }
    assert!(spaced > 0, "--whitespace any never wrote whitespace");
    let node_url = d.url("");
    let mut remote_args = base.to_vec();
    remote_args.extend(["--executor", &node_url, "--remote-model", "tiny"]);
    let o = run(&remote_args);
    assert!(o.status.success(), "{}", stderr(&o));
    let remote: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(remote["verdict"]["constrained"], "remote");
    assert_eq!(remote["token_ids"], local["token_ids"], "{remote}");
    remote_args.extend(["--whitespace", "none"]);
    let o = run(&remote_args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--whitespace is for the local model"),
        "{}",
        stderr(&o)
    );

    // a remote executor that ignores response_format: checked after the fact, exit 1
    let ids: Vec<u32> = b"nope".iter().map(|b| u32::from(*b)).collect();
    let plain_url = fake_executor(&ids);
    let mut args = base.to_vec();
    args.extend(["--executor", &plain_url]);
    let o = run(&args);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(out["verdict"]["valid"], false, "{out}");
    assert_eq!(out["text"], "nope");
    assert!(
        out["verdict"]["errors"][0]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{out}"
    );

    // the vocabulary without `}`: refused before generating, exit 2 with the reason
    let mut args = base.to_vec();
    args[2] = nobrace.to_str().unwrap();
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no token writes `}`"), "{}", stderr(&o));

    // bad schemas and flags: exit 2 with the reason
    let bad = models.path().join("bad.json");
    std::fs::write(&bad, json!({"not": {"type": "string"}}).to_string()).unwrap();
    let mut args = base.to_vec();
    args[8] = bad.to_str().unwrap();
    let o = run(&args);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unsupported keyword `not`"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "infer",
        "--model",
        tiny.to_str().unwrap(),
        "--prompt",
        "x",
        "--verify",
        "schema-bounds",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("needs --schema"), "{}", stderr(&o));
}
