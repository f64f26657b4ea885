//! The OpenAI-compatible inference API on the node's listener: `GET /v1/models`,
//! `POST /v1/completions`, `POST /v1/chat/completions` over the served models and the
//! routed ones ([`routed`]: served by remote executors only), and `GET /v1/executors` (a
//! fresh health check of each remote executor).
//!
//! Requests follow OpenAI's APIs (prompt as a string or an array of token ids, or chat
//! `messages`; `max_tokens`, `temperature`, `top_p`, `seed`, `stop`, `logprobs` /
//! `top_logprobs`, `stream`) with vLLM's extensions (`top_k`, `stop_token_ids`,
//! `ignore_eos`, `return_token_ids` → `prompt_token_ids` / `token_ids`,
//! `return_tokens_as_token_ids` → tokens written `token_id:N`); errors are OpenAI's
//! `{"error": {"message", "type", "param", "code"}}`. Each response also carries
//! `fleetmesh.{model_digest, base_model_digest, transcript_digest, engine, dtype}`.
//!
//! `"verification": "quasi-deterministic"` (or `[inference] verification`) runs the
//! request through the quorum — the local runtime and the model's remote executors —
//! and adds `fleetmesh.verdict`; it decodes greedily and does not stream.
//!
//! `response_format` (OpenAI's `{"type": "json_schema", "json_schema": {"schema": …}}`,
//! or `{"type": "json_object"}`) constrains decoding to documents valid under the schema
//! ([`fleetmesh_inference::schema`]; unsupported keywords are refused with 400
//! `unsupported_schema`) and adds `fleetmesh.verdict` (`mode: schema-bounds`, `valid`,
//! `errors`) from the `jsonschema` crate's check of the output; with
//! `"verification": "schema-bounds"` an invalid output is 502 `schema_invalid`.
//!
//! Generations go to the model's [`Batcher`]: concurrent requests are decoded together,
//! up to `[inference] max_batch`; at most `[inference] max_queue` requests per model are
//! admitted (generating or waiting), more get 503 with `Retry-After`. A request whose
//! client disconnects stops generating at its next step, streamed or not.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetmesh_inference::batch::{Job, wait};
use fleetmesh_inference::chat::{ChatTemplate, Message};
use fleetmesh_inference::executor::{ExecRequest, Executor, LocalExecutor};
use fleetmesh_inference::quorum::{QuorumConfig, run_quorum};
use fleetmesh_inference::remote::{RemoteConfig, RemoteExecutor};
use fleetmesh_inference::schema::{CompileLimits, Constraint, Grammar, TokenVocab, Whitespace};
use fleetmesh_inference::{Batcher, Sampling, Step, TextTokenizer};
use serde_json::{Value, json};

use crate::config::{InferenceSection, Verification};

mod generation;
mod render;
mod request;
mod routed;
mod serving;
mod stream;

use fleetmesh_proto::unix_now;
use generation::{
    cut, generate_attested, generate_bounded, generate_local, generate_local_async,
    generate_quorum, schema_verdict, stopped,
};
use render::render;
use request::{Api, Params, parse, rand_seed};
use stream::stream;

pub use serving::InferenceService;
use serving::Served;

/// A refused request, answered in OpenAI's error shape.
struct Failure {
    status: StatusCode,
    message: String,
    param: Option<&'static str>,
    code: Option<&'static str>,
    extra: Option<Value>,
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let mut body = json!({"error": {
            "message": self.message,
            "type": if self.status.is_server_error() { "server_error" } else { "invalid_request_error" },
            "param": self.param,
            "code": self.code,
        }});
        if let Some(x) = self.extra {
            body["fleetmesh"] = x;
        }
        let mut r = (self.status, Json(body)).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from_static("1"),
            );
        }
        r
    }
}

/// A 400 naming the parameter at fault.
fn bad(message: impl Into<String>, param: &'static str) -> Failure {
    Failure {
        status: StatusCode::BAD_REQUEST,
        message: message.into(),
        param: Some(param),
        code: None,
        extra: None,
    }
}

fn internal(message: impl Into<String>) -> Failure {
    Failure {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        message: message.into(),
        param: None,
        code: None,
        extra: None,
    }
}

/// `GET /v1/models`.
pub async fn models(State(s): State<Arc<InferenceService>>) -> Response {
    let data: Vec<Value> = s
        .now()
        .models
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "object": "model",
                "created": 0,
                "owned_by": "fleetmesh",
                "max_model_len": m.batcher.model().config().max_position_embeddings,
                "fleetmesh": {
                    "model_digest": hex::encode(m.digest),
                    "base_model_digest": hex::encode(m.base_digest),
                    "engine": m.engine,
                    "dtype": m.batcher.model().dtype(),
                    "chat_template": m.template.is_some(),
                    "executors": std::iter::once(m.local.name())
                        .chain(m.remotes.iter().map(|r| r.name()))
                        .collect::<Vec<_>>(),
                    "requests_in_flight": m.queue_size - m.queue.available_permits(),
                    "max_queue": m.queue_size,
                    "tokens_generated": m.tokens.load(std::sync::atomic::Ordering::Relaxed),
                },
            })
        })
        .chain(s.now().routed.iter().map(|r| r.listing()))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

impl InferenceService {
    /// Each served model: its name, digest (hex), engine and executors (the local runtime
    /// first) — what the status page shows. Routed models too, with no digest and the engine `routed`.
    pub fn summary(&self) -> Vec<(String, String, String, Vec<String>)> {
        let now = self.now();
        let local = now.models.iter().map(|m| {
            let executors = std::iter::once(m.local.name())
                .chain(m.remotes.iter().map(|r| r.name()))
                .map(str::to_owned)
                .collect();
            (
                m.id.clone(),
                hex::encode(m.digest),
                m.engine.clone(),
                executors,
            )
        });
        let routed = now.routed.iter().map(|r| {
            let executors = r.routes.iter().map(|x| x.entry.name.clone()).collect();
            (r.id.clone(), String::new(), "routed".to_owned(), executors)
        });
        local.chain(routed).collect()
    }
}

/// `GET /v1/executors`: every remote executor's health, checked now.
pub async fn executors(State(s): State<Arc<InferenceService>>) -> Response {
    let svc = s.clone();
    let list = tokio::task::spawn_blocking(move || {
        let now = svc.now();
        now.models
            .iter()
            .flat_map(|m| {
                m.remotes.iter().map(|r| match r.health() {
                    Ok(h) => match m.other_model(&h) {
                        // a server stating another model would be refused by the quorum
                        Some(why) => json!({"executor": r.name(), "serves": m.id,
                                            "healthy": false,
                                            "model_digest": h.model_digest.map(hex::encode),
                                            "base_model_digest": h.base_digest.map(hex::encode),
                                            "error": why}),
                        None => json!({"executor": r.name(), "serves": m.id, "healthy": true,
                                       "latency_ms": h.latency.as_secs_f64() * 1e3,
                                       "model_digest": h.model_digest.map(hex::encode),
                                       "base_model_digest": h.base_digest.map(hex::encode)}),
                    },
                    Err(e) => json!({"executor": r.name(), "serves": m.id, "healthy": false,
                                     "error": e.to_string()}),
                })
            })
            .chain(
                now.routed
                    .iter()
                    .flat_map(|r| r.routes.iter().map(|route| routed::health(r, route))),
            )
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    Json(json!({"object": "list", "data": list})).into_response()
}

/// A finished generation, ready to render.
struct Generated {
    prompt: Vec<u32>,
    ids: Vec<u32>,
    steps: Vec<Step>,
    text: String,
    finish: &'static str,
    transcript_digest: [u8; 32],
    verdict: Option<Value>,
    build: (String, String),
}

/// `POST /v1/completions`.
pub async fn completions(
    State(s): State<Arc<InferenceService>>,
    body: axum::body::Bytes,
) -> Response {
    serve(s, body, Api::Completion).await
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(s): State<Arc<InferenceService>>,
    body: axum::body::Bytes,
) -> Response {
    serve(s, body, Api::Chat).await
}

/// The market's `llm` engine asks the API through this: its typed request made into the
/// API's own request body (the job's OpenAI params, with the model, the verification, no
/// streaming, the schema as `response_format`, the job to bind), answered as the API would
/// answer it, blocking, and read back into the typed answer.
impl fleetmesh_market::service::Llm for InferenceService {
    fn answer(
        &self,
        req: &fleetmesh_market::service::LlmRequest,
    ) -> Result<fleetmesh_market::service::LlmAnswer, fleetmesh_market::service::LlmFailure> {
        use fleetmesh_market::service::{LlmAnswer, LlmFailure};
        let mut body = req.params.clone();
        body["model"] = json!(req.model);
        body["verification"] = json!(req.mode);
        body["stream"] = json!(false);
        if let Some(schema) = &req.output_schema {
            body["response_format"] = json!({"type": "json_schema",
                "json_schema": {"name": "output", "schema": schema}});
        }
        if let Some(job) = &req.job {
            body["job"] = json!(job);
        }
        if req.greedy {
            body["temperature"] = json!(0);
        }
        let api = if body.get("messages").is_some() {
            Api::Chat
        } else {
            Api::Completion
        };
        if let Some(r) = self.now().routed(&req.model) {
            return routed::job_answer(r, body, (api, req.mode), self.runtime.as_ref());
        }
        let fail = |f: Failure| LlmFailure {
            verdict: f.extra.as_ref().and_then(|e| e.get("verdict").cloned()),
            code: f.code.unwrap_or("bad_request"),
            message: f.message,
        };
        let p = parse(self, body.to_string().as_bytes(), api, Arc::default()).map_err(fail)?;
        let gens = match p.verification {
            Verification::None => generate_local(&p),
            Verification::SchemaBounds => generate_bounded(&p),
            Verification::QuasiDeterministic => generate_quorum(self, &p),
            Verification::TeeAttestation => generate_attested(&p),
        }
        .map_err(fail)?;
        let document = render(&p.model, &p, &gens);
        let fm = &document["fleetmesh"];
        Ok(LlmAnswer {
            verdict: fm["verdict"].clone(),
            transcript_digest: fm["transcript_digest"].as_str().map(String::from),
            prompt_tokens: document["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            completion_tokens: document["usage"]["completion_tokens"].as_u64().unwrap_or(0),
            document,
        })
    }
}

/// Sets a request's cancel flag when dropped: when the handler's future is dropped because
/// the client went away, its schema's compilation and its generations stop at their next
/// step.
struct CancelOnDrop(Option<Arc<std::sync::atomic::AtomicBool>>);

impl CancelOnDrop {
    /// Leaves the flag alone from now on (a stream watches its client itself).
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(c) = &self.0 {
            c.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// 503 with `Retry-After`: the model's queue (`[inference] max_queue`) is full.
fn overloaded(model: &str) -> Response {
    let mut r = Failure {
        status: StatusCode::SERVICE_UNAVAILABLE,
        message: format!("model {model} has as many requests as its queue holds; retry shortly"),
        param: None,
        code: Some("overloaded"),
        extra: None,
    }
    .into_response();
    r.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static("1"),
    );
    r
}

/// Answers one API request, counted in `fleetmesh_inference_requests_total{api,
/// verification, status}` (`verification` is empty for a request that did not parse; a
/// stream counts its status when it starts).
async fn serve(s: Arc<InferenceService>, body: axum::body::Bytes, api: Api) -> Response {
    let (verification, response) = match routed::routed_for(&s, &body) {
        Some((r, v)) => {
            let default = s.now().verification;
            let label = match v["verification"].as_str() {
                Some("schema-bounds") => "schema-bounds",
                Some(_) => "",
                None => default.as_str(),
            };
            (label, routed::forward(r, v, api, default).await)
        }
        None => answer(s, body, api).await,
    };
    let api = match api {
        Api::Completion => "completions",
        Api::Chat => "chat",
    };
    metrics::counter!("fleetmesh_inference_requests_total", "api" => api,
        "verification" => verification, "status" => response.status().as_str().to_owned())
    .increment(1);
    response
}

async fn answer(
    s: Arc<InferenceService>,
    body: axum::body::Bytes,
    api: Api,
) -> (&'static str, Response) {
    let v = match request::json_body(&body) {
        Ok(v) => v,
        Err(f) => return ("", f.into_response()),
    };
    drop(body);
    // a request with a schema is read (the schema compiled) on a blocking thread that stops
    // at its next check once this handler is dropped (the client went away); others here
    let cancel = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cancel_on_drop = CancelOnDrop(Some(cancel.clone()));
    let parsed = if v["response_format"].is_null() {
        request::parse_value(&s, &v, api, cancel)
    } else {
        let svc = s.clone();
        tokio::task::spawn_blocking(move || request::parse_value(&svc, &v, api, cancel))
            .await
            .unwrap_or_else(|_| Err(internal("reading the request panicked")))
    };
    let p = match parsed {
        Ok(p) => p,
        Err(f) => return ("", f.into_response()),
    };
    let verification = p.verification.as_str();
    let m = &p.model;
    let Ok(place) = m.queue.clone().try_acquire_owned() else {
        return (verification, overloaded(&m.id));
    };
    if p.stream {
        cancel_on_drop.disarm();
        return (verification, stream(p, place));
    }
    let _cancel = cancel_on_drop;
    let result = match p.verification {
        // the local paths await the batcher; nothing blocks a thread meanwhile
        Verification::None => generate_local_async(&p).await,
        Verification::SchemaBounds => generate_local_async(&p)
            .await
            .and_then(generation::schema_bounded),
        // these also wait on remote executors or the TEE, on a blocking thread each (as
        // many as the queue admits)
        Verification::QuasiDeterministic | Verification::TeeAttestation => {
            let (svc, params) = (s.clone(), p.clone());
            tokio::task::spawn_blocking(move || {
                if params.verification == Verification::QuasiDeterministic {
                    generate_quorum(&svc, &params)
                } else {
                    generate_attested(&params)
                }
            })
            .await
            .unwrap_or_else(|_| Err(internal("the generation panicked")))
        }
    };
    drop(place);
    let response = match result {
        Ok(g) => Json(render(&p.model, &p, &g)).into_response(),
        Err(f) => f.into_response(),
    };
    (verification, response)
}
