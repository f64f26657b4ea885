//! The OpenAI-compatible inference API on the node's listener: `GET /v1/models` and
//! `POST /v1/completions` over the models given to `meshnode run --model PATH`.
//!
//! Requests follow OpenAI's legacy completions API (prompt as a string or an array of token
//! ids, `max_tokens`, `temperature`, `top_p`, `seed`, `stop`, `logprobs`) with vLLM's
//! extensions (`top_k`, `return_token_ids` → `prompt_token_ids` / `token_ids` on the
//! choice); errors are OpenAI's `{"error": {"message", "type", "param", "code"}}`. Each
//! response also carries `fleetmesh.model_digest` and `fleetmesh.transcript_digest`.
//! Generations run one at a time on a blocking thread (candle uses every core).

use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use fleetmesh_inference::{Llama, Sampling, TextTokenizer, generate_with};
use serde_json::{Value, json};

/// One served model.
struct Served {
    id: String,
    model: Llama,
    tokenizer: TextTokenizer,
    digest: [u8; 32],
}

/// The loaded models and the turn of the one generation running.
pub struct InferenceService {
    models: Vec<Served>,
    turn: tokio::sync::Mutex<()>,
}

impl InferenceService {
    /// Loads every model in `paths` (directories or GGUF files), each served under its
    /// directory or file name.
    ///
    /// # Errors
    /// A model that does not load, or two with the same name.
    pub fn load(paths: &[PathBuf]) -> anyhow::Result<Arc<InferenceService>> {
        let mut models: Vec<Served> = Vec::new();
        for p in paths {
            let id = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| anyhow::anyhow!("--model {}: no name", p.display()))?;
            if models.iter().any(|m| m.id == id) {
                anyhow::bail!("two models are named {id:?}; each is served under its name");
            }
            let (model, tokenizer, digest) = crate::infer::load(p)?;
            tracing::info!(model = %id, digest = %hex::encode(digest), "serving model");
            models.push(Served {
                id,
                model,
                tokenizer,
                digest,
            });
        }
        Ok(Arc::new(InferenceService {
            models,
            turn: tokio::sync::Mutex::new(()),
        }))
    }
}

/// A refused request, answered in OpenAI's error shape.
struct Failure {
    status: StatusCode,
    message: String,
    param: Option<&'static str>,
    code: Option<&'static str>,
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": self.param,
                "code": self.code,
            }})),
        )
            .into_response()
    }
}

/// A 400 naming the parameter at fault.
fn bad(message: impl Into<String>, param: &'static str) -> Failure {
    Failure {
        status: StatusCode::BAD_REQUEST,
        message: message.into(),
        param: Some(param),
        code: None,
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
                "fleetmesh": {"model_digest": hex::encode(m.digest)},
            })
        })
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}

/// A completions request, checked.
struct Request {
    model: usize,
    prompt: Vec<u32>,
    max_tokens: usize,
    sampling: Sampling,
    stop: Vec<String>,
    logprobs: Option<usize>,
    return_token_ids: bool,
    stream: bool,
}

fn parse(s: &InferenceService, body: &[u8]) -> Result<Request, Failure> {
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
        })?;
    let served = &s.models[model];
    let vocab = served.model.config().vocab_size;
    let prompt = match &v["prompt"] {
        Value::String(text) => served
            .tokenizer
            .encode(text)
            .map_err(|e| bad(e.to_string(), "prompt"))?,
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_u64) => {
            let ids: Vec<u32> = items
                .iter()
                .map(|i| i.as_u64().unwrap_or(u64::MAX) as u32)
                .collect();
            if let Some(bad_id) = items
                .iter()
                .map(|i| i.as_u64().unwrap_or(u64::MAX))
                .find(|i| *i >= vocab as u64)
            {
                return Err(bad(
                    format!("token id {bad_id} is outside the vocabulary (size {vocab})"),
                    "prompt",
                ));
            }
            ids
        }
        Value::Array(_) => {
            return Err(bad(
                "prompt must be a string or a non-empty array of token ids (batches of prompts are not supported yet)",
                "prompt",
            ));
        }
        _ => {
            return Err(bad(
                "prompt is required: a string or an array of token ids",
                "prompt",
            ));
        }
    };
    if prompt.is_empty() {
        return Err(bad("the prompt has no tokens", "prompt"));
    }
    let uint = |key: &'static str, default: u64| -> Result<u64, Failure> {
        match &v[key] {
            Value::Null => Ok(default),
            x => x
                .as_u64()
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
    let stream = match &v["stream"] {
        Value::Null => false,
        x => x
            .as_bool()
            .ok_or_else(|| bad("stream must be a boolean", "stream"))?,
    };
    let stop = match &v["stop"] {
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
    let logprobs = match &v["logprobs"] {
        Value::Null | Value::Bool(false) => None,
        Value::Bool(true) => Some(0),
        x => match x.as_u64() {
            Some(n) if n <= 20 => Some(n as usize),
            _ => return Err(bad("logprobs must be an integer from 0 to 20", "logprobs")),
        },
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
    let seed = match &v["seed"] {
        Value::Null => rand_seed(),
        x => x
            .as_u64()
            .ok_or_else(|| bad("seed must be a non-negative integer", "seed"))?,
    };
    Ok(Request {
        model,
        prompt,
        max_tokens: uint("max_tokens", 16)? as usize,
        sampling: Sampling {
            temperature: num("temperature", 1.0)?,
            top_p: num("top_p", 1.0)?,
            top_k,
            seed,
        },
        stop,
        logprobs,
        return_token_ids: v["return_token_ids"].as_bool().unwrap_or(false),
        stream,
    })
}

/// A seed for a request that gave none (OpenAI's default is a fresh draw).
fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// `POST /v1/completions`.
pub async fn completions(
    State(s): State<Arc<InferenceService>>,
    body: axum::body::Bytes,
) -> Response {
    let req = match parse(&s, &body) {
        Ok(r) => r,
        Err(f) => return f.into_response(),
    };
    if req.stream {
        return stream(s, req);
    }
    let _turn = s.turn.lock().await;
    let svc = s.clone();
    match tokio::task::spawn_blocking(move || complete(&svc, &req)).await {
        Ok(r) => r,
        Err(_) => Failure {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: "the generation panicked".into(),
            param: None,
            code: None,
        }
        .into_response(),
    }
}

fn complete(s: &InferenceService, req: &Request) -> Response {
    let m = &s.models[req.model];
    let mut stopped_at: Option<usize> = None;
    let mut done = |ids: &[u32]| {
        if req.stop.is_empty() {
            return false;
        }
        let text = m.tokenizer.decode(ids).unwrap_or_default();
        stopped_at = find_stop(&text, &req.stop);
        stopped_at.is_some()
    };
    let t = match generate_with(
        &m.model,
        m.digest,
        &req.prompt,
        req.max_tokens,
        &req.sampling,
        req.logprobs.unwrap_or(0),
        &mut done,
    ) {
        Ok(t) => t,
        Err(e) => return bad(e.to_string(), "prompt").into_response(),
    };
    let ids = t.output_ids();
    let (text, finish) = final_text(m, &ids, stopped_at);
    let mut choice = json!({"index": 0, "text": text, "finish_reason": finish, "logprobs": null});
    if let Some(n) = req.logprobs {
        let token = |id: u32| m.tokenizer.decode(&[id]).unwrap_or_default();
        choice["logprobs"] = json!({
            "tokens": ids.iter().map(|i| token(*i)).collect::<Vec<_>>(),
            "token_logprobs": t.steps.iter().map(|st| st.logprob).collect::<Vec<_>>(),
            // OpenAI's shape maps token text to logprob: ids whose text is the same (bytes of
            // an incomplete UTF-8 character) keep the more likely entry
            "top_logprobs": t.steps.iter().map(|st| {
                let mut m = serde_json::Map::new();
                for (i, lp) in st.top.iter().take(n) {
                    m.entry(token(*i)).or_insert(json!(lp));
                }
                m
            }).collect::<Vec<_>>(),
        });
    }
    if req.return_token_ids {
        choice["prompt_token_ids"] = json!(req.prompt);
        choice["token_ids"] = json!(ids);
    }
    let digest = hex::encode(t.digest());
    Json(json!({
        "id": format!("cmpl-{}", &digest[..24]),
        "object": "text_completion",
        "created": unix_now(),
        "model": m.id,
        "choices": [choice],
        "usage": {
            "prompt_tokens": req.prompt.len(),
            "completion_tokens": ids.len(),
            "total_tokens": req.prompt.len() + ids.len(),
        },
        "fleetmesh": {
            "model_digest": hex::encode(m.digest),
            "transcript_digest": digest,
            "margins": t.steps.iter().map(|st| st.margin).collect::<Vec<_>>(),
        },
    }))
    .into_response()
}

/// The answer's text — cut where a stop string began, if one did — and its
/// `finish_reason`.
fn final_text(m: &Served, ids: &[u32], stopped_at: Option<usize>) -> (String, &'static str) {
    let mut text = m.tokenizer.decode(ids).unwrap_or_default();
    match stopped_at {
        Some(cut) => {
            text.truncate(cut);
            (text, "stop")
        }
        None => (text, "length"),
    }
}

/// Where the first of `stops` begins in `text`.
fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops.iter().filter_map(|st| text.find(st.as_str())).min()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `stream: true`: server-sent events, one `text_completion` chunk per token (its text
/// delta, and with `return_token_ids` its id), a last chunk with `finish_reason`, usage and
/// the digests, then `data: [DONE]`. Text is held back while it ends in an incomplete
/// UTF-8 character or could still be the start of a stop string, so no chunk ever carries
/// text that the final answer does not. A client that goes away stops the generation.
fn stream(s: Arc<InferenceService>, req: Request) -> Response {
    use axum::response::sse::{Event, Sse};
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        let _turn = s.turn.lock().await;
        let svc = s.clone();
        let _ = tokio::task::spawn_blocking(move || stream_blocking(&svc, &req, &tx)).await;
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|e| (Ok::<_, std::convert::Infallible>(e), rx))
    });
    Sse::new(body).into_response()
}

fn stream_blocking(
    s: &InferenceService,
    req: &Request,
    tx: &tokio::sync::mpsc::Sender<axum::response::sse::Event>,
) {
    use axum::response::sse::Event;
    let m = &s.models[req.model];
    let id = format!(
        "cmpl-{:024x}",
        u128::from(rand_seed()) << 32 | u128::from(rand_seed() as u32)
    );
    let created = unix_now();
    let chunk = |text: &str, ids: &[u32], finish: Option<&str>| {
        let mut choice =
            json!({"index": 0, "text": text, "finish_reason": finish, "logprobs": null});
        if req.return_token_ids {
            choice["token_ids"] = json!(ids);
        }
        json!({"id": id, "object": "text_completion", "created": created, "model": m.id,
               "choices": [choice]})
    };
    let send = |v: Value| {
        tx.blocking_send(Event::default().data(v.to_string()))
            .is_ok()
    };
    let hold = req
        .stop
        .iter()
        .map(|st| st.chars().count())
        .max()
        .unwrap_or(0);
    let mut sent = String::new();
    let mut sent_ids = 0usize;
    let mut stopped_at: Option<usize> = None;
    let mut gone = false;
    let mut done = |ids: &[u32]| {
        let text = m.tokenizer.decode(ids).unwrap_or_default();
        if !req.stop.is_empty() {
            stopped_at = find_stop(&text, &req.stop);
            if stopped_at.is_some() {
                return true;
            }
        }
        // the stable part: no trailing replacement character, minus what a stop string
        // could still claim
        let stable = text.trim_end_matches('\u{FFFD}');
        let keep = stable.chars().count().saturating_sub(hold);
        let stable: String = stable.chars().take(keep).collect();
        if stable.len() > sent.len() && stable.starts_with(sent.as_str()) {
            let delta = stable[sent.len()..].to_owned();
            if !send(chunk(&delta, &ids[sent_ids..], None)) {
                gone = true;
                return true;
            }
            sent = stable;
            sent_ids = ids.len();
        }
        false
    };
    let result = generate_with(
        &m.model,
        m.digest,
        &req.prompt,
        req.max_tokens,
        &req.sampling,
        0,
        &mut done,
    );
    if gone {
        return;
    }
    match result {
        Ok(t) => {
            let ids = t.output_ids();
            let (text, finish) = final_text(m, &ids, stopped_at);
            let rest = text.get(sent.len()..).unwrap_or_default().to_owned();
            let mut last = chunk(&rest, &ids[sent_ids.min(ids.len())..], Some(finish));
            last["usage"] = json!({
                "prompt_tokens": req.prompt.len(),
                "completion_tokens": ids.len(),
                "total_tokens": req.prompt.len() + ids.len(),
            });
            last["fleetmesh"] = json!({
                "model_digest": hex::encode(m.digest),
                "transcript_digest": hex::encode(t.digest()),
            });
            send(last);
        }
        Err(e) => {
            send(
                json!({"error": {"message": e.to_string(), "type": "invalid_request_error",
                                  "param": "prompt", "code": null}}),
            );
        }
    }
    let _ = tx.blocking_send(Event::default().data("[DONE]"));
}
