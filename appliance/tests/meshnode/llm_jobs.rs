//! `llm` jobs through `meshnode run`: the node's inference API under the ask's mode — the
//! 2-of-3 quorum over remote executors, a JSON Schema, TEE attestation, and a routed model
//! under schema-bounds — with receipts whose verdict says which, and the node's terms
//! listing the models it sells.

use super::jobs::{job, receipt_of, submit_and_wait};
use super::*;

/// The API answer an llm job returned, fetched and decrypted with `job result`.
fn llm_answer(id: &str, node: &Daemon, buyer: &Path) -> Value {
    let out = tempfile::tempdir().unwrap();
    let (o, _) = job(
        &["result", id, "--out", out.path().to_str().unwrap()],
        node,
        buyer,
    );
    assert!(o.status.success(), "{}", stdout(&o));
    serde_json::from_slice(&std::fs::read(out.path().join("response.json")).unwrap()).unwrap()
}

#[test]
fn llm_jobs_run_under_the_quorum_or_a_schema_with_receipts_saying_so() {
    let models = tempfile::tempdir().unwrap();
    let tiny = models.path().join("a").join("tiny");
    let other = models.path().join("b").join("tiny");
    super::inference::make_tiny(&tiny, 7);
    super::inference::make_tiny(&other, 8);
    let (_h, honest) = super::inference::serve(&[&tiny], "");
    let (_c, cheat) = super::inference::serve(&[&other], "");
    // `far-tiny`: routed to the honest node alone, its weights pinned by digest
    let honest_models = runtime().block_on(get_json(&http_client(), honest.url("/v1/models")));
    let pinned = honest_models["data"][0]["fleetmesh"]["model_digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let cfg = super::quorum::executor_toml("cheat", &cheat)
        + &super::quorum::executor_toml("honest", &honest)
        + &format!(
            "[[inference.executors]]\nname = \"far\"\nurl = \"http://{}\"\nserves = \"far-tiny\"\n\
             model = \"tiny\"\nkind = \"vllm\"\nmodel_digest = \"{pinned}\"\n\n",
            honest.addr
        );
    let (_n, d) = super::inference::serve(&[&tiny], &cfg);
    let buyer = tempfile::tempdir().unwrap();
    assert!(init(buyer.path(), &[]).status.success());
    let work = tempfile::tempdir().unwrap();
    let spec = serde_json::json!({"engine": "llm", "model": "tiny", "prompt": "hello",
        "max_tokens": 8, "limits": {"tokens": 8}, "name": "llm-1"});
    let (id, code, st) = submit_and_wait(&spec, work.path(), &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
    assert_eq!(st["metered"]["completion_tokens"], 8);
    let answer = llm_answer(&id, &d, buyer.path());
    // the node's terms list the model it serves, with the digest /v1/models says
    let served = runtime().block_on(get_json(&http_client(), d.url("/v1/models")));
    let terms = super::market::market(&["providers"], &d);
    assert_eq!(
        terms[0]["models"],
        serde_json::json!([{"id": "tiny", "digest": served["data"][0]["fleetmesh"]["model_digest"]},
                           {"id": "far-tiny", "digest": pinned}]),
        "{terms:?}"
    );
    // the accepted output is the honest node's greedy output
    let solo = runtime().block_on(async {
        post_json(
            &http_client(),
            &honest.url("/v1/completions"),
            serde_json::json!({"model": "tiny",
            "prompt": "hello", "max_tokens": 8, "temperature": 0}),
        )
        .await
        .1
    });
    assert_eq!(answer["choices"][0]["text"], solo["choices"][0]["text"]);
    let (_, c) = receipt_of(&id, &d, buyer.path());
    let v = &c["verdict"];
    assert_eq!(
        (v["mode"].as_str(), v["outcome"].as_str()),
        (Some("quasi-deterministic"), Some("agree")),
        "{v}"
    );
    assert_eq!(v["agreed_digest"], answer["fleetmesh"]["transcript_digest"]);
    assert_eq!(v["quorum"], serde_json::json!({"n": 3, "k": 2}));
    assert!(v["digests"].as_array().unwrap().len() >= 2, "{v}");
    // schema-bounds: the answer fits the schema, the verdict says so
    let schema = serde_json::json!({"type": "object", "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"], "additionalProperties": false});
    let spec = serde_json::json!({"engine": "llm", "model": "tiny", "prompt": "hello",
        "max_tokens": 16, "limits": {"tokens": 16}, "output_schema": schema, "name": "llm-2"});
    let (id, code, st) = submit_and_wait(&spec, work.path(), &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
    let answer = llm_answer(&id, &d, buyer.path());
    let text = answer["choices"][0]["text"].as_str().unwrap();
    let doc: Value = serde_json::from_str(text).unwrap();
    assert!(jsonschema::is_valid(&schema, &doc), "{text}");
    let (_, c) = receipt_of(&id, &d, buyer.path());
    assert_eq!(c["verdict"]["mode"], "schema-bounds");
    assert_eq!(c["verdict"]["valid"], true);
    // a routed model runs jobs under schema-bounds, its executor's answer checked here
    let spec = serde_json::json!({"engine": "llm", "model": "far-tiny", "prompt": "hello",
        "max_tokens": 16, "limits": {"tokens": 16}, "output_schema": schema, "name": "llm-far"});
    let (id, code, st) = submit_and_wait(&spec, work.path(), &d, buyer.path());
    assert_eq!(code, Some(0), "{st}");
    let answer = llm_answer(&id, &d, buyer.path());
    assert_eq!(answer["fleetmesh"]["routed"], true, "{answer}");
    assert_eq!(answer["fleetmesh"]["executor"], "far", "{answer}");
    let text = answer["choices"][0]["text"].as_str().unwrap();
    let doc: Value = serde_json::from_str(text).unwrap();
    assert!(jsonschema::is_valid(&schema, &doc), "{text}");
    let (_, c) = receipt_of(&id, &d, buyer.path());
    assert_eq!(
        (
            c["verdict"]["mode"].as_str(),
            c["verdict"]["valid"].as_bool()
        ),
        (Some("schema-bounds"), Some(true)),
        "{c}"
    );
    // and nothing else: a quorum needs a local model
    let spec = serde_json::json!({"engine": "llm", "model": "far-tiny", "prompt": "hello",
        "max_tokens": 8, "limits": {"tokens": 8}, "name": "llm-far-quorum"});
    let (_, code, st) = submit_and_wait(&spec, work.path(), &d, buyer.path());
    assert_eq!(code, Some(1), "{st}");
    assert!(
        st["reason"]
            .as_str()
            .unwrap()
            .contains("its jobs run under schema-bounds"),
        "{st}"
    );
    // tee-attestation: bound to this host's SEV-SNP report, or failed saying why not
    let spec = serde_json::json!({"engine": "llm", "model": "tiny", "prompt": "hello",
        "max_tokens": 8, "limits": {"tokens": 8}, "mode": "tee-attestation", "name": "llm-tee"});
    let (id, code, st) = submit_and_wait(&spec, work.path(), &d, buyer.path());
    if std::path::Path::new("/sys/kernel/config/tsm/report").is_dir() {
        assert_eq!(code, Some(0), "{st}");
        let (_, c) = receipt_of(&id, &d, buyer.path());
        assert_eq!(c["verdict"]["bound"], true);
    } else {
        assert_eq!(code, Some(1), "{st}");
        assert!(
            st["reason"]
                .as_str()
                .unwrap()
                .contains("cannot produce TEE evidence"),
            "{st}"
        );
    }

    // more tokens than the ask allows: refused at submission
    let file = work.path().join("llm-3.json");
    std::fs::write(
        &file,
        serde_json::json!({"engine": "llm", "model": "tiny", "prompt": "x",
        "max_tokens": 64, "limits": {"tokens": 8}, "name": "llm-3"})
        .to_string(),
    )
    .unwrap();
    let (o, v) = job(&["submit", file.to_str().unwrap()], &d, buyer.path());
    assert_eq!(o.status.code(), Some(2), "{v}");
    assert_eq!(v["error"]["code"], "limit-exceeded");

    // metrics: the quorum ran once (the cheat outvoted), three jobs were taken, two verified
    let m = d.scrape();
    assert_eq!(
        m.must(
            "fleetmesh_inference_quorum_total",
            &[("outcome", "majority")]
        ),
        1.0
    );
    let llm = |state: &str| {
        m.must(
            "fleetmesh_jobs_total",
            &[("engine", "llm"), ("state", state)],
        )
    };
    // the quorum, the schema and the routed schema-bounds jobs verified; the tee job and
    // the routed one under the quorum failed
    assert_eq!((llm("accepted"), llm("verified")), (5.0, 3.0));
    // jobs reach the runtime without the HTTP API: no API request was counted
    assert_eq!(m.value("fleetmesh_inference_requests_total", &[]), None);
}
