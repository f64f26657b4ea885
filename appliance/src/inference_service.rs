//! The OpenAI-compatible inference API on the node's listener: `GET /v1/models`,
//! `POST /v1/completions`, `POST /v1/chat/completions` over the served models, and
//! `GET /v1/executors` (a fresh health check of each remote executor).
//!
//! Requests follow OpenAI's APIs (prompt as a string or an array of token ids, or chat
//! `messages`; `max_tokens`, `temperature`, `top_p`, `seed`, `stop`, `logprobs` /
//! `top_logprobs`, `stream`) with vLLM's extensions (`top_k`, `stop_token_ids`,
//! `ignore_eos`, `return_token_ids` → `prompt_token_ids` / `token_ids`,
//! `return_tokens_as_token_ids` → tokens written `token_id:N`); errors are OpenAI's
//! `{"error": {"message", "type", "param", "code"}}`. Each response also carries
//! `fleetmesh.{model_digest, transcript_digest, engine, dtype}`.
//!
//! `"verification": "quasi-deterministic"` (or `[inference] verification`) runs the
//! request through the quorum — the local runtime and the model's remote executors —
//! and adds `fleetmesh.verdict`; it decodes greedily and does not stream.
//!
//! Generations go to the model's [`Batcher`]: concurrent requests are decoded together,
//! up to `[inference] max_batch`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetmesh_inference::batch::{Job, wait};
use fleetmesh_inference::chat::{ChatTemplate, Message};
use fleetmesh_inference::executor::{ExecRequest, Executor, LocalExecutor};
use fleetmesh_inference::quorum::{QuorumConfig, run_quorum};
use fleetmesh_inference::remote::{RemoteConfig, RemoteExecutor};
use fleetmesh_inference::{Batcher, Sampling, Step, TextTokenizer};
use serde_json::{Value, json};

use crate::config::{InferenceSection, Verification};

/// One served model.
struct Served {
    id: String,
    batcher: Arc<Batcher>,
    tokenizer: Arc<TextTokenizer>,
    template: Option<ChatTemplate>,
    digest: [u8; 32],
    /// `fleetmesh-candle/<device>`.
    engine: String,
    eos: Vec<u32>,
    local: LocalExecutor,
    remotes: Vec<RemoteExecutor>,
}

/// The loaded models, their executors and the quorum's settings.
pub struct InferenceService {
    models: Vec<Served>,
    quorum: QuorumConfig,
    verification: Verification,
}

impl InferenceService {
    /// Loads every model of `cfg` (directories or GGUF files, paths already resolved),
    /// each served under its directory or file name, with its remote executors.
    ///
    /// # Errors
    /// A model that does not load, two with the same name, an executor for a model that is
    /// not served or with a bad URL or digest.
    pub fn load(cfg: &InferenceSection) -> anyhow::Result<Arc<InferenceService>> {
        let mut models: Vec<Served> = Vec::new();
        for p in &cfg.models {
            let id = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| anyhow::anyhow!("--model {}: no name", p.display()))?;
            if models.iter().any(|m| m.id == id) {
                anyhow::bail!("two models are named {id:?}; each is served under its name");
            }
            let (model, tokenizer, digest) = crate::infer::load(p, &cfg.device)?;
            let engine = fleetmesh_inference::model::engine_name(model.device());
            let template = ChatTemplate::load_beside(p)?;
            tracing::info!(model = %id, digest = %hex::encode(digest), chat = template.is_some(), "serving model");
            let eos = model.config().eos_token_id.clone();
            let batcher = Arc::new(Batcher::new(Arc::new(model), digest, cfg.max_batch));
            models.push(Served {
                local: LocalExecutor::new(format!("local:{id}"), batcher.clone()),
                id,
                batcher,
                tokenizer: Arc::new(tokenizer),
                template,
                digest,
                engine,
                eos,
                remotes: Vec::new(),
            });
        }
        for e in &cfg.executors {
            let served = models
                .iter_mut()
                .find(|m| m.id == e.serves)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "[[inference.executors]] {:?} serves {:?}, which is not a served model",
                        e.name,
                        e.serves
                    )
                })?;
            let model_digest = match &e.model_digest {
                None => None,
                Some(h) => Some(
                    hex::decode(h)
                        .ok()
                        .and_then(|b| <[u8; 32]>::try_from(b).ok())
                        .ok_or_else(|| {
                            anyhow::anyhow!(
                                "[[inference.executors]] {:?}: model_digest is not 64 hex digits",
                                e.name
                            )
                        })?,
                ),
            };
            let mut rc = RemoteConfig::new(
                e.name.clone(),
                e.url.clone(),
                e.model.clone().unwrap_or_else(|| e.serves.clone()),
            );
            rc.engine = e.engine.clone();
            rc.dtype = e.dtype.clone();
            rc.model_digest = model_digest;
            rc.api_key = e.api_key.clone();
            rc.timeout = std::time::Duration::from_secs(e.timeout_s.max(1));
            rc.connect_timeout = std::time::Duration::from_secs(e.connect_timeout_s.max(1));
            // reqwest's blocking client refuses to be built on an async runtime's thread
            let remote = std::thread::scope(|t| t.spawn(|| RemoteExecutor::new(rc)).join())
                .map_err(|_| anyhow::anyhow!("building the HTTP client panicked"))??;
            served.remotes.push(remote);
        }
        let svc = Arc::new(InferenceService {
            models,
            quorum: cfg.quorum.to_config(),
            verification: cfg.verification,
        });
        // a first health check of every remote executor, logged; requests do not wait
        let s = svc.clone();
        std::thread::spawn(move || {
            for (m, r) in s
                .models
                .iter()
                .flat_map(|m| m.remotes.iter().map(move |r| (m, r)))
            {
                match r.health() {
                    Ok(h) => {
                        tracing::info!(executor = r.name(), model = %m.id, latency_ms = h.latency.as_millis() as u64, "remote executor is up")
                    }
                    Err(e) => {
                        tracing::warn!(executor = r.name(), model = %m.id, error = %e, "remote executor is not reachable")
                    }
                }
            }
        });
        Ok(svc)
    }
}

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
        (self.status, Json(body)).into_response()
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
                    "engine": m.engine,
                    "dtype": "f32",
                    "chat_template": m.template.is_some(),
                    "executors": std::iter::once(m.local.name())
                        .chain(m.remotes.iter().map(|r| r.name()))
                        .collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /v1/executors`: every remote executor's health, checked now.
pub async fn executors(State(s): State<Arc<InferenceService>>) -> Response {
    let svc = s.clone();
    let list = tokio::task::spawn_blocking(move || {
        svc.models
            .iter()
            .flat_map(|m| {
                m.remotes.iter().map(|r| match r.health() {
                    Ok(h) => json!({"executor": r.name(), "serves": m.id, "healthy": true,
                                    "latency_ms": h.latency.as_secs_f64() * 1e3,
                                    "model_digest": h.model_digest.map(hex::encode)}),
                    Err(e) => json!({"executor": r.name(), "serves": m.id, "healthy": false,
                                     "error": e.to_string()}),
                })
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    Json(json!({"object": "list", "data": list})).into_response()
}

/// Which API a request came in on; it decides the response's shape.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Completion,
    Chat,
}

/// A request, checked.
#[derive(Clone)]
struct Params {
    api: Api,
    model: usize,
    /// One prompt, or several (completions only), each a choice of the answer.
    prompts: Vec<Vec<u32>>,
    max_tokens: usize,
    sampling: Sampling,
    stop: Vec<String>,
    stop_ids: Vec<u32>,
    logprobs: Option<usize>,
    return_token_ids: bool,
    as_token_ids: bool,
    stream: bool,
    verification: Verification,
}

fn parse(s: &InferenceService, body: &[u8], api: Api) -> Result<Params, Failure> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| bad(format!("the body is not JSON: {e}"), "body"))?;
    let name = v["model"]
        .as_str()
        .ok_or_else(|| bad("model must be a string", "model"))?;
    let model = s
        .models
        .iter()
        .position(|m| m.id == name)
        .ok_or_else(|| Failure {
            status: StatusCode::NOT_FOUND,
            message: format!("The model `{name}` does not exist."),
            param: Some("model"),
            code: Some("model_not_found"),
            extra: None,
        })?;
    let served = &s.models[model];
    let vocab = served.batcher.model().config().vocab_size;
    let mut stop = match &v["stop"] {
        Value::Null => Vec::new(),
        Value::String(s) => vec![s.clone()],
        Value::Array(a) if a.len() <= 4 && a.iter().all(Value::is_string) => a
            .iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect(),
        _ => return Err(bad("stop must be a string or up to 4 strings", "stop")),
    };
    if stop.iter().any(String::is_empty) {
        return Err(bad("a stop string is empty", "stop"));
    }
    let prompts = match api {
        Api::Completion => completion_prompts(served, &v["prompt"], vocab)?,
        Api::Chat => {
            let template = served.template.as_ref().ok_or_else(|| {
                bad(
                    format!(
                        "model {name} has no chat template (tokenizer_config.json `chat_template` \
                         or GGUF `tokenizer.chat_template`); use /v1/completions"
                    ),
                    "model",
                )
            })?;
            let messages = chat_messages(&v["messages"])?;
            let add = v["add_generation_prompt"].as_bool().unwrap_or(true);
            let text = template
                .render(&messages, add)
                .map_err(|e| bad(e.to_string(), "messages"))?;
            // the end of the assistant's turn ends the generation
            if !template.eos_token().is_empty() && !v["ignore_eos"].as_bool().unwrap_or(false) {
                stop.push(template.eos_token().to_owned());
            }
            vec![
                served
                    .tokenizer
                    .encode(&text)
                    .map_err(|e| bad(e.to_string(), "messages"))?,
            ]
        }
    };
    let context = served.batcher.model().config().max_position_embeddings;
    for (i, prompt) in prompts.iter().enumerate() {
        let which = if prompts.len() > 1 {
            format!("prompt {i}")
        } else {
            "the prompt".into()
        };
        if prompt.is_empty() {
            return Err(bad(format!("{which} has no tokens"), "prompt"));
        }
        if prompt.len() >= context {
            return Err(bad(
                format!(
                    "{which} has {} tokens; the model's context is {context}",
                    prompt.len()
                ),
                "prompt",
            ));
        }
    }
    let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let uint = |key: &'static str| -> Result<Option<u64>, Failure> {
        match &v[key] {
            Value::Null => Ok(None),
            x => x
                .as_u64()
                .map(Some)
                .ok_or_else(|| bad(format!("{key} must be a non-negative integer"), key)),
        }
    };
    let num = |key: &'static str, default: f64| -> Result<f64, Failure> {
        match &v[key] {
            Value::Null => Ok(default),
            x => x
                .as_f64()
                .ok_or_else(|| bad(format!("{key} must be a number"), key)),
        }
    };
    let flag = |key: &'static str| -> Result<bool, Failure> {
        match &v[key] {
            Value::Null => Ok(false),
            x => x
                .as_bool()
                .ok_or_else(|| bad(format!("{key} must be a boolean"), key)),
        }
    };
    let stream = flag("stream")?;
    let logprobs = match api {
        Api::Completion => match &v["logprobs"] {
            Value::Null | Value::Bool(false) => None,
            Value::Bool(true) => Some(0),
            x => match x.as_u64() {
                Some(n) if n <= 20 => Some(n as usize),
                _ => return Err(bad("logprobs must be an integer from 0 to 20", "logprobs")),
            },
        },
        Api::Chat => {
            let top = match uint("top_logprobs")? {
                Some(n) if n > 20 => {
                    return Err(bad(
                        "top_logprobs must be an integer from 0 to 20",
                        "top_logprobs",
                    ));
                }
                n => n.unwrap_or(0) as usize,
            };
            if flag("logprobs")? {
                Some(top)
            } else if top > 0 {
                return Err(bad("top_logprobs needs logprobs: true", "top_logprobs"));
            } else {
                None
            }
        }
    };
    // top_k: vLLM's; −1 and 0 both mean every token
    let top_k = match &v["top_k"] {
        Value::Null => 0,
        x if x.as_i64() == Some(-1) => 0,
        x => x
            .as_u64()
            .ok_or_else(|| bad("top_k must be −1 or a non-negative integer", "top_k"))?
            as usize,
    };
    let seed = uint("seed")?.unwrap_or_else(rand_seed);
    let mut stop_ids: Vec<u32> = match &v["stop_token_ids"] {
        Value::Null => Vec::new(),
        Value::Array(a) => a
            .iter()
            .map(|x| x.as_u64().filter(|i| *i < vocab as u64).map(|i| i as u32))
            .collect::<Option<_>>()
            .ok_or_else(|| {
                bad(
                    format!("stop_token_ids must be token ids below {vocab}"),
                    "stop_token_ids",
                )
            })?,
        _ => return Err(bad("stop_token_ids must be an array", "stop_token_ids")),
    };
    if !flag("ignore_eos")? {
        stop_ids.extend(&served.eos);
    }
    let verification = match &v["verification"] {
        Value::Null => s.verification,
        Value::String(x) => x.parse().map_err(|e: String| bad(e, "verification"))?,
        _ => return Err(bad("verification must be a string", "verification")),
    };
    let default_max = match api {
        Api::Completion => 16,
        Api::Chat => context - longest,
    };
    let max_tokens = match (uint("max_tokens")?, uint("max_completion_tokens")?) {
        (Some(n), _) | (None, Some(n)) => n as usize,
        (None, None) => default_max,
    };
    let temperature = num("temperature", 1.0)?;
    if prompts.len() > 1 && (stream || verification != Verification::None) {
        return Err(bad(
            "several prompts are answered without stream and without verification; send them \
             one per request",
            "prompt",
        ));
    }
    if verification == Verification::TeeAttestation && stream {
        return Err(bad(
            "tee-attestation does not stream: the report binds the finished output",
            "stream",
        ));
    }
    if verification == Verification::QuasiDeterministic {
        if !v["temperature"].is_null() && temperature != 0.0 {
            return Err(bad(
                "quasi-deterministic verification decodes greedily: temperature must be 0 or absent",
                "temperature",
            ));
        }
        if stream {
            return Err(bad(
                "quasi-deterministic verification does not stream: the output is known only \
                 once two executors agree",
                "stream",
            ));
        }
        if max_tokens == 0 {
            return Err(bad(
                "quasi-deterministic verification needs max_tokens of at least 1",
                "max_tokens",
            ));
        }
    }
    Ok(Params {
        api,
        model,
        prompts,
        max_tokens,
        sampling: Sampling {
            temperature: if verification == Verification::QuasiDeterministic {
                0.0
            } else {
                temperature
            },
            top_p: num("top_p", 1.0)?,
            top_k,
            seed,
        },
        stop,
        stop_ids,
        logprobs,
        return_token_ids: flag("return_token_ids")?,
        as_token_ids: flag("return_tokens_as_token_ids")?,
        stream,
        verification,
    })
}

/// Most prompts in one completions request.
const MAX_PROMPTS: usize = 64;

/// The prompts of a completions request: a string, an array of token ids, or an array of
/// either (one choice each).
fn completion_prompts(served: &Served, p: &Value, vocab: usize) -> Result<Vec<Vec<u32>>, Failure> {
    let ids = |items: &[Value]| -> Result<Vec<u32>, Failure> {
        items
            .iter()
            .map(|i| match i.as_u64() {
                Some(id) if id < vocab as u64 => Ok(id as u32),
                _ => Err(bad(
                    format!("token id {i} is outside the vocabulary (size {vocab})"),
                    "prompt",
                )),
            })
            .collect()
    };
    let text = |t: &str| {
        served
            .tokenizer
            .encode(t)
            .map_err(|e| bad(e.to_string(), "prompt"))
    };
    let shape = || {
        bad(
            "prompt must be a string, a non-empty array of token ids, or an array of those",
            "prompt",
        )
    };
    match p {
        Value::String(t) => Ok(vec![text(t)?]),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_number) => {
            Ok(vec![ids(items)?])
        }
        Value::Array(items) if !items.is_empty() => {
            if items.len() > MAX_PROMPTS {
                return Err(bad(
                    format!("{} prompts; at most {MAX_PROMPTS} per request", items.len()),
                    "prompt",
                ));
            }
            items
                .iter()
                .map(|x| match x {
                    Value::String(t) => text(t),
                    Value::Array(a) if !a.is_empty() => ids(a),
                    _ => Err(shape()),
                })
                .collect()
        }
        Value::Null => Err(bad(
            "prompt is required: a string or an array of token ids",
            "prompt",
        )),
        _ => Err(shape()),
    }
}

/// Chat messages: `content` a string or an array of `{"type": "text", "text": …}` parts.
fn chat_messages(v: &Value) -> Result<Vec<Message>, Failure> {
    let list = v
        .as_array()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| bad("messages must be a non-empty array", "messages"))?;
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let role = m["role"]
                .as_str()
                .ok_or_else(|| bad(format!("messages[{i}].role must be a string"), "messages"))?;
            let content = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .map(|p| match (p["type"].as_str(), p["text"].as_str()) {
                        (Some("text"), Some(t)) => Ok(t),
                        _ => Err(bad(
                            format!("messages[{i}].content: only text parts are supported"),
                            "messages",
                        )),
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .concat(),
                _ => {
                    return Err(bad(
                        format!("messages[{i}].content must be a string or text parts"),
                        "messages",
                    ));
                }
            };
            Ok(Message {
                role: role.to_owned(),
                content,
            })
        })
        .collect()
}

/// A seed for a request that gave none (OpenAI's default is a fresh draw).
fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
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
    serve(s, &body, Api::Completion).await
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(
    State(s): State<Arc<InferenceService>>,
    body: axum::body::Bytes,
) -> Response {
    serve(s, &body, Api::Chat).await
}

async fn serve(s: Arc<InferenceService>, body: &[u8], api: Api) -> Response {
    let p = match parse(&s, body, api) {
        Ok(p) => p,
        Err(f) => return f.into_response(),
    };
    if p.stream {
        return stream(s, p);
    }
    let svc = s.clone();
    let params = p.clone();
    let result = tokio::task::spawn_blocking(move || match params.verification {
        Verification::None => generate_local(&svc, &params),
        Verification::QuasiDeterministic => generate_quorum(&svc, &params),
        Verification::TeeAttestation => generate_attested(&svc, &params),
    })
    .await
    .unwrap_or_else(|_| Err(internal("the generation panicked")));
    match result {
        Ok(g) => Json(render(&s.models[p.model], &p, &g)).into_response(),
        Err(f) => f.into_response(),
    }
}

/// Where the first of `stops` begins in `text`.
fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter_map(|st| text.find(st.as_str())).min()
}

/// Cuts `ids` where the request says the answer ends: after the first id whose text
/// completes a stop string (the text cut where that string began), or at a stop id (its
/// text left out); returns the ids kept, the text and the finish reason.
fn cut(m: &Served, p: &Params, ids: &[u32]) -> (Vec<u32>, String, &'static str) {
    let decode = |ids: &[u32]| m.tokenizer.decode(ids).unwrap_or_default();
    if !p.stop.is_empty() {
        let full = decode(ids);
        if find_stop(&full, &p.stop).is_some() {
            let n = (1..=ids.len())
                .find(|n| find_stop(&decode(&ids[..*n]), &p.stop).is_some())
                .unwrap_or(ids.len());
            let mut text = decode(&ids[..n]);
            text.truncate(find_stop(&text, &p.stop).unwrap_or(text.len()));
            return (ids[..n].to_vec(), text, "stop");
        }
    }
    if let Some(k) = ids.iter().position(|i| p.stop_ids.contains(i)) {
        return (ids[..=k].to_vec(), decode(&ids[..k]), "stop");
    }
    (ids.to_vec(), decode(ids), "length")
}

/// The stop test a generation runs after each step.
fn stop_test(m: &Served, p: &Params) -> impl FnMut(&[u32]) -> bool + Send + 'static {
    let tokenizer = m.tokenizer.clone();
    let (stop, stop_ids) = (p.stop.clone(), p.stop_ids.clone());
    move |ids: &[u32]| {
        ids.last().is_some_and(|i| stop_ids.contains(i))
            || (!stop.is_empty()
                && find_stop(&tokenizer.decode(ids).unwrap_or_default(), &stop).is_some())
    }
}

/// Every prompt of `p` on the local runtime, submitted together so the batcher decodes them
/// side by side.
fn generate_local(s: &InferenceService, p: &Params) -> Result<Vec<Generated>, Failure> {
    let m = &s.models[p.model];
    let tickets = p
        .prompts
        .iter()
        .map(|prompt| {
            m.batcher.submit(Job {
                prompt: prompt.clone(),
                max_tokens: p.max_tokens,
                sampling: p.sampling.clone(),
                top_logprobs: p.logprobs.unwrap_or(0),
                on_step: Some(Box::new(stop_test(m, p))),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string(), "prompt"))?;
    tickets
        .iter()
        .map(|ticket| {
            let t = wait(ticket).map_err(|e| bad(e.to_string(), "prompt"))?;
            let (ids, text, finish) = cut(m, p, &t.output_ids());
            Ok(Generated {
                transcript_digest: t.digest(),
                steps: t.steps[..ids.len()].to_vec(),
                prompt: t.prompt,
                ids,
                text,
                finish,
                verdict: None,
                build: (m.engine.clone(), "f32".into()),
            })
        })
        .collect()
}

/// The local generation with this host's SEV-SNP report over the job binding (model
/// digest, prompt ids, output ids, and the response id as the job id).
fn generate_attested(s: &InferenceService, p: &Params) -> Result<Vec<Generated>, Failure> {
    use fleetmesh_inference::tee;
    // no generation is spent on a host that cannot attest it
    if !std::path::Path::new(tee::TSM_REPORT_DIR).is_dir() {
        return Err(Failure {
            status: StatusCode::NOT_IMPLEMENTED,
            message: format!(
                "this host cannot produce TEE evidence: {} does not exist (no SEV-SNP guest \
                 with configfs-tsm)",
                tee::TSM_REPORT_DIR
            ),
            param: Some("verification"),
            code: Some("tee_unavailable"),
            extra: None,
        });
    }
    let m = &s.models[p.model];
    let mut gens = generate_local(s, p)?;
    for g in &mut gens {
        // the job id is the response's id
        let prefix = if p.api == Api::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        };
        let job = format!("{prefix}-{}", &hex::encode(g.transcript_digest)[..24]);
        let data = tee::snp_report_data(&m.digest, &g.prompt, &g.ids, job.as_bytes());
        let report = tee::collect_report(&data).map_err(|e| Failure {
            status: StatusCode::BAD_GATEWAY,
            message: e.to_string(),
            param: Some("verification"),
            code: Some("tee_failed"),
            extra: None,
        })?;
        g.verdict = Some(json!({
            "mode": "tee-attestation",
            "evidence": "sev-snp",
            "job_id": job,
            "report_data": hex::encode(data),
            "report": hex::encode(report),
        }));
    }
    Ok(gens)
}

fn generate_quorum(s: &InferenceService, p: &Params) -> Result<Vec<Generated>, Failure> {
    let m = &s.models[p.model];
    let mut executors: Vec<&dyn Executor> = vec![&m.local];
    executors.extend(m.remotes.iter().map(|r| r as &dyn Executor));
    let req = ExecRequest {
        prompt: p.prompts[0].clone(),
        max_tokens: p.max_tokens,
        stop_ids: p.stop_ids.clone(),
    };
    let v = run_quorum(&executors, &req, &s.quorum).map_err(|e| Failure {
        status: StatusCode::BAD_REQUEST,
        message: format!("{e} for model {} (configure [[inference.executors]])", m.id),
        param: Some("verification"),
        code: Some("not_enough_executors"),
        extra: None,
    })?;
    let verdict = v.to_json();
    let Some(out) = v.output else {
        return Err(Failure {
            status: StatusCode::BAD_GATEWAY,
            message: "no two executors agreed; no output is accepted".into(),
            param: None,
            code: Some("no_quorum"),
            extra: Some(json!({"verdict": verdict})),
        });
    };
    let (ids, text, finish) = cut(m, p, &out.ids());
    // the digest of what is returned: the accepted output cut where the request ends it
    let mut kept = out.clone();
    kept.steps.truncate(ids.len());
    Ok(vec![Generated {
        transcript_digest: kept.transcript_digest(&req.prompt),
        prompt: req.prompt,
        steps: kept.steps,
        ids,
        text,
        finish,
        verdict: Some(verdict),
        build: (out.build.engine.clone(), out.build.dtype.clone()),
    }])
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A token's text as the response shows it.
fn token_text(m: &Served, p: &Params, id: u32) -> String {
    if p.as_token_ids {
        format!("token_id:{id}")
    } else {
        m.tokenizer.decode(&[id]).unwrap_or_default()
    }
}

/// The logprobs object of a choice, in the API's shape.
fn logprobs_json(m: &Served, p: &Params, steps: &[Step], n: usize) -> Value {
    let tok = |id: u32| token_text(m, p, id);
    match p.api {
        Api::Completion => json!({
            "tokens": steps.iter().map(|s| tok(s.id)).collect::<Vec<_>>(),
            "token_logprobs": steps.iter().map(|s| s.logprob).collect::<Vec<_>>(),
            // OpenAI's shape maps token text to logprob: ids whose text is the same (bytes
            // of an incomplete UTF-8 character) keep the more likely entry
            "top_logprobs": steps.iter().map(|s| {
                let mut map = serde_json::Map::new();
                for (i, lp) in s.top.iter().take(n) {
                    map.entry(tok(*i)).or_insert(json!(lp));
                }
                map
            }).collect::<Vec<_>>(),
        }),
        Api::Chat => {
            let bytes = |id: u32| m.tokenizer.decode(&[id]).unwrap_or_default().into_bytes();
            json!({"content": steps.iter().map(|s| json!({
                "token": tok(s.id),
                "logprob": s.logprob,
                "bytes": bytes(s.id),
                "top_logprobs": s.top.iter().take(n).map(|(i, lp)| json!({
                    "token": tok(*i), "logprob": lp, "bytes": bytes(*i),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>()})
        }
    }
}

fn render(m: &Served, p: &Params, gens: &[Generated]) -> Value {
    let choices: Vec<Value> = gens
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut choice = match p.api {
                Api::Completion => json!({"index": i, "text": g.text, "finish_reason": g.finish}),
                Api::Chat => json!({"index": i, "finish_reason": g.finish,
                                    "message": {"role": "assistant", "content": g.text}}),
            };
            choice["logprobs"] = match p.logprobs {
                Some(n) => logprobs_json(m, p, &g.steps, n),
                None => Value::Null,
            };
            if p.return_token_ids {
                choice["prompt_token_ids"] = json!(g.prompt);
                choice["token_ids"] = json!(g.ids);
            }
            choice["fleetmesh"] = json!({
                "transcript_digest": hex::encode(g.transcript_digest),
                "margins": g.steps.iter().map(|st| st.margin).collect::<Vec<_>>(),
            });
            choice
        })
        .collect();
    let (prefix, object) = match p.api {
        Api::Completion => ("cmpl", "text_completion"),
        Api::Chat => ("chatcmpl", "chat.completion"),
    };
    let first = &gens[0];
    let mut fm = json!({
        "model_digest": hex::encode(m.digest),
        "engine": first.build.0,
        "dtype": first.build.1,
    });
    if let [only] = gens {
        fm["transcript_digest"] = json!(hex::encode(only.transcript_digest));
        fm["margins"] = json!(only.steps.iter().map(|st| st.margin).collect::<Vec<_>>());
    }
    if let Some(v) = &first.verdict {
        fm["verdict"] = v.clone();
    }
    let prompt_tokens: usize = gens.iter().map(|g| g.prompt.len()).sum();
    let completion_tokens: usize = gens.iter().map(|g| g.ids.len()).sum();
    json!({
        "id": format!("{prefix}-{}", &hex::encode(first.transcript_digest)[..24]),
        "object": object,
        "created": unix_now(),
        "model": m.id,
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
        "fleetmesh": fm,
    })
}

/// What a stream has sent so far.
#[derive(Default)]
struct Sent {
    text: String,
    ids: usize,
    gone: bool,
}

/// `stream: true`: server-sent events, one chunk per token (its text delta, and with
/// `return_token_ids` its id) — `text_completion` chunks, or `chat.completion.chunk`
/// deltas after one that opens the assistant's message — then a last chunk with
/// `finish_reason`, usage and the digests, then `data: [DONE]`. Text is held back while it
/// ends in an incomplete UTF-8 character or could still be the start of a stop string, so
/// no chunk carries text the final answer does not. A client that goes away ends its
/// generation.
fn stream(s: Arc<InferenceService>, p: Params) -> Response {
    use axum::response::sse::{Event, Sse};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let m = &s.models[p.model];
    let id = format!(
        "{}-{:024x}",
        if p.api == Api::Chat {
            "chatcmpl"
        } else {
            "cmpl"
        },
        u128::from(rand_seed()) << 32 | u128::from(rand_seed() as u32)
    );
    let (created, model_id, api, with_ids) = (unix_now(), m.id.clone(), p.api, p.return_token_ids);
    let chunk = move |text: &str, ids: &[u32], finish: Option<&str>| {
        let mut choice = match api {
            Api::Completion => json!({"index": 0, "text": text, "logprobs": null}),
            Api::Chat => json!({"index": 0, "delta": {"content": text}, "logprobs": null}),
        };
        choice["finish_reason"] = json!(finish);
        if with_ids {
            choice["token_ids"] = json!(ids);
        }
        let object = match api {
            Api::Completion => "text_completion",
            Api::Chat => "chat.completion.chunk",
        };
        json!({"id": id, "object": object, "created": created, "model": model_id,
               "choices": [choice]})
    };
    if api == Api::Chat {
        let mut first = chunk("", &[], None);
        first["choices"][0]["delta"] = json!({"role": "assistant", "content": ""});
        let _ = tx.send(first);
    }
    let sent = Arc::new(Mutex::new(Sent::default()));
    let hold = p
        .stop
        .iter()
        .map(|st| st.chars().count())
        .max()
        .unwrap_or(0);
    let mut stop = stop_test(m, &p);
    let on_step = {
        let (tokenizer, sent, tx, chunk) =
            (m.tokenizer.clone(), sent.clone(), tx.clone(), chunk.clone());
        move |ids: &[u32]| {
            if stop(ids) {
                return true;
            }
            let text = tokenizer.decode(ids).unwrap_or_default();
            // the stable part: no trailing replacement character, minus what a stop string
            // could still claim
            let stable = text.trim_end_matches('\u{FFFD}');
            let keep = stable.chars().count().saturating_sub(hold);
            let stable: String = stable.chars().take(keep).collect();
            let mut st = sent.lock().expect("stream state");
            if stable.len() > st.text.len() && stable.starts_with(st.text.as_str()) {
                let delta = &stable[st.text.len()..];
                if tx.send(chunk(delta, &ids[st.ids..], None)).is_err() {
                    st.gone = true;
                    return true;
                }
                st.text = stable;
                st.ids = ids.len();
            }
            false
        }
    };
    let ticket = s.models[p.model].batcher.submit(Job {
        prompt: p.prompts[0].clone(),
        max_tokens: p.max_tokens,
        sampling: p.sampling.clone(),
        top_logprobs: 0,
        on_step: Some(Box::new(on_step)),
    });
    let svc = s.clone();
    tokio::spawn(async move {
        let result = match ticket {
            Ok(t) => tokio::task::spawn_blocking(move || wait(&t))
                .await
                .unwrap_or_else(|_| {
                    Err(fleetmesh_inference::Error::Request(
                        "the generation panicked".into(),
                    ))
                }),
            Err(e) => Err(e),
        };
        let st = std::mem::take(&mut *sent.lock().expect("stream state"));
        if st.gone {
            return;
        }
        let m = &svc.models[p.model];
        match result {
            Ok(t) => {
                let (ids, text, finish) = cut(m, &p, &t.output_ids());
                let rest = text.get(st.text.len()..).unwrap_or_default();
                let mut last = chunk(rest, &ids[st.ids.min(ids.len())..], Some(finish));
                last["usage"] = json!({
                    "prompt_tokens": p.prompts[0].len(),
                    "completion_tokens": ids.len(),
                    "total_tokens": p.prompts[0].len() + ids.len(),
                });
                last["fleetmesh"] = json!({
                    "model_digest": hex::encode(m.digest),
                    "transcript_digest": hex::encode(t.digest()),
                    "engine": m.engine,
                    "dtype": "f32",
                });
                let _ = tx.send(last);
            }
            Err(e) => {
                let _ = tx.send(json!({"error": {"message": e.to_string(),
                    "type": "invalid_request_error", "param": "prompt", "code": null}}));
            }
        }
        let _ = tx.send(Value::String("[DONE]".into()));
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|v| {
            let data = match v {
                Value::String(s) if s == "[DONE]" => s,
                v => v.to_string(),
            };
            (
                Ok::<_, std::convert::Infallible>(Event::default().data(data)),
                rx,
            )
        })
    });
    Sse::new(body).into_response()
}

/// The paths of `cfg.models`, resolved against the node directory, with `extra` after.
pub fn resolve_models(
    dir: &std::path::Path,
    cfg: &InferenceSection,
    extra: &[PathBuf],
) -> Vec<PathBuf> {
    cfg.models
        .iter()
        .map(|m| dir.join(m))
        .chain(extra.iter().cloned())
        .collect()
}
