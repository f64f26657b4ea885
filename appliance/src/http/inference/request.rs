//! Requests: the body of a completions or chat request, checked into [`Params`].

use super::*;

/// Which API a request came in on; it decides the response's shape.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    Completion,
    Chat,
}

/// A request, checked.
#[derive(Clone)]
pub(super) struct Params {
    pub(super) api: Api,
    pub(super) model: Arc<Served>,
    /// One prompt, or several (completions only), each a choice of the answer.
    pub(super) prompts: Vec<Vec<u32>>,
    pub(super) max_tokens: usize,
    pub(super) sampling: Sampling,
    pub(super) stop: Vec<String>,
    pub(super) stop_ids: Vec<u32>,
    pub(super) logprobs: Option<usize>,
    pub(super) return_token_ids: bool,
    pub(super) as_token_ids: bool,
    pub(super) stream: bool,
    pub(super) verification: Verification,
    /// fleetmesh's `job`: the job id a `tee-attestation` answer is bound to (default: the
    /// response's id).
    pub(super) job: Option<String>,
    /// `response_format`'s schema, compiled.
    pub(super) schema: Option<Arc<Grammar>>,
    /// Set when the client has gone: its generations stop at their next step.
    pub(super) cancel: Arc<std::sync::atomic::AtomicBool>,
}

/// Reads a completions or chat request: its model, parameters and prompts, its schema
/// compiled within the bounds of [`CompileLimits`] (stopping once `cancel` is set).
pub(super) fn parse(
    s: &InferenceService,
    body: &[u8],
    api: Api,
    cancel: Arc<std::sync::atomic::AtomicBool>,
) -> Result<Params, Failure> {
    parse_value(s, &json_body(body)?, api, cancel)
}

/// A request's body as JSON.
pub(super) fn json_body(body: &[u8]) -> Result<Value, Failure> {
    serde_json::from_slice(body).map_err(|e| bad(format!("the body is not JSON: {e}"), "body"))
}

/// [`parse`] of a body already read as JSON.
pub(super) fn parse_value(
    s: &InferenceService,
    v: &Value,
    api: Api,
    cancel: Arc<std::sync::atomic::AtomicBool>,
) -> Result<Params, Failure> {
    let name = v["model"]
        .as_str()
        .ok_or_else(|| bad("model must be a string", "model"))?;
    let now = s.now();
    let served = now.model(name).ok_or_else(|| Failure {
        status: StatusCode::NOT_FOUND,
        message: format!("The model `{name}` does not exist."),
        param: Some("model"),
        code: Some("model_not_found"),
        extra: None,
    })?;
    unsupported(v)?;
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
    let limits = CompileLimits::default().with_cancel(cancel.clone());
    let schema = response_format(&v["response_format"], whitespace(v)?, &limits)?;
    if let Some(g) = &schema {
        // a vocabulary that cannot spell the schema is refused now, not answered empty
        served
            .vocab()
            .writes_within(g, &limits)
            .map_err(unsupported_schema)?;
    }
    let prompts = match api {
        Api::Completion => completion_prompts(&served, &v["prompt"], vocab, add_special(v, true)?)?,
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
            // the end of the assistant's turn ends the generation (under a schema, the end
            // of the document does)
            if !template.eos_token().is_empty()
                && !v["ignore_eos"].as_bool().unwrap_or(false)
                && schema.is_none()
            {
                stop.push(template.eos_token().to_owned());
            }
            // the template writes its own BOS (vLLM: add_special_tokens defaults to false)
            vec![
                served
                    .tokenizer
                    .encode_with(&text, add_special(v, false)?)
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
        Value::Null => now.verification,
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
    let job = match &v["job"] {
        Value::Null => None,
        Value::String(j) if !j.is_empty() && j.len() <= 128 => Some(j.clone()),
        _ => return Err(bad("job must be a string of 1 to 128 bytes", "job")),
    };
    if job.is_some() && verification != Verification::TeeAttestation {
        return Err(bad(
            "job names what a tee-attestation answer is bound to; it needs that verification",
            "job",
        ));
    }
    if verification == Verification::TeeAttestation && stream {
        return Err(bad(
            "tee-attestation does not stream: the report binds the finished output",
            "stream",
        ));
    }
    if verification == Verification::SchemaBounds && schema.is_none() {
        return Err(bad(
            "schema-bounds verification needs a response_format with a JSON Schema",
            "response_format",
        ));
    }
    if verification == Verification::QuasiDeterministic && schema.is_some() {
        return Err(bad(
            "response_format cannot be combined with quasi-deterministic verification yet",
            "response_format",
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
        model: served,
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
        job,
        schema,
        cancel,
    })
}

/// The JSON Schema of OpenAI's `response_format`: `{"type": "text"}` (none), `{"type":
/// "json_object"}` (any object), `{"type": "json_schema", "json_schema": {"name",
/// "schema", "strict"}}`.
pub(super) fn response_schema(v: &Value) -> Result<Option<Value>, Failure> {
    let param = "response_format";
    Ok(Some(match v["type"].as_str() {
        _ if v.is_null() => return Ok(None),
        Some("text") => return Ok(None),
        Some("json_object") => json!({"type": "object"}),
        Some("json_schema") => match &v["json_schema"]["schema"] {
            s @ (Value::Object(_) | Value::Bool(_)) => s.clone(),
            _ => {
                return Err(bad(
                    "response_format.json_schema.schema must be a JSON Schema object",
                    param,
                ));
            }
        },
        _ => {
            return Err(bad(
                "response_format.type must be text, json_object or json_schema",
                param,
            ));
        }
    }))
}

/// The whitespace a constrained document may hold: at most one space in a row (the
/// default), any (`"any_whitespace": true`), or none (vLLM's
/// `"disable_any_whitespace": true`).
fn whitespace(v: &Value) -> Result<Whitespace, Failure> {
    let flag = |key: &'static str| match &v[key] {
        Value::Null => Ok(false),
        Value::Bool(b) => Ok(*b),
        _ => Err(bad(format!("{key} must be a boolean"), key)),
    };
    match (flag("any_whitespace")?, flag("disable_any_whitespace")?) {
        (true, true) => Err(bad(
            "any_whitespace and disable_any_whitespace cannot both be true",
            "any_whitespace",
        )),
        (true, false) => Ok(Whitespace::Any),
        (false, true) => Ok(Whitespace::None),
        (false, false) => Ok(Whitespace::Compact),
    }
}

/// `response_format`'s schema ([`response_schema`]) compiled for the constrained decoder,
/// with `whitespace` between tokens.
fn response_format(
    v: &Value,
    whitespace: Whitespace,
    limits: &CompileLimits,
) -> Result<Option<Arc<Grammar>>, Failure> {
    let Some(schema) = response_schema(v)? else {
        return Ok(None);
    };
    Grammar::compile_within(&schema, limits)
        .map(|g| Some(Arc::new(g.with_whitespace(whitespace))))
        .map_err(unsupported_schema)
}

/// 400 `unsupported_schema`: the schema cannot be generated here, and why; 503 `busy`
/// when its compilation was abandoned (no compilation slot came free in time, or the node
/// is stopping).
fn unsupported_schema(e: fleetmesh_inference::Error) -> Failure {
    if let fleetmesh_inference::Error::Abandoned(_) = e {
        return Failure {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!("response_format: {e}"),
            param: Some("response_format"),
            code: Some("busy"),
            extra: None,
        };
    }
    Failure {
        status: StatusCode::BAD_REQUEST,
        message: e.to_string(),
        param: Some("response_format"),
        code: Some("unsupported_schema"),
        extra: None,
    }
}

/// Most prompts in one completions request.
const MAX_PROMPTS: usize = 64;

/// The prompts of a completions request: a string, an array of token ids, or an array of
/// either (one choice each).
/// OpenAI parameters this server does not implement, refused by name rather than
/// silently ignored (a client asking for `n: 4` must not get one choice and think it has
/// four). Neutral values (`n: 1`, penalties 0, an empty `logit_bias`) are accepted.
fn unsupported(v: &Value) -> Result<(), Failure> {
    let neutral = |key: &'static str, ok: &dyn Fn(&Value) -> bool| -> Result<(), Failure> {
        match &v[key] {
            Value::Null => Ok(()),
            x if ok(x) => Ok(()),
            x => Err(bad(
                format!("{key} = {x} is not supported by this server"),
                key,
            )),
        }
    };
    let is = |want: f64| move |x: &Value| x.as_f64() == Some(want);
    neutral("n", &is(1.0))?;
    neutral("best_of", &is(1.0))?;
    neutral("presence_penalty", &is(0.0))?;
    neutral("frequency_penalty", &is(0.0))?;
    neutral("repetition_penalty", &is(1.0))?;
    neutral("logit_bias", &|x| {
        x.as_object().is_some_and(|o| o.is_empty())
    })?;
    for key in ["tools", "functions"] {
        neutral(key, &|x| x.as_array().is_some_and(|a| a.is_empty()))?;
    }
    neutral("tool_choice", &|x| x == "none")?;
    neutral("function_call", &|x| x == "none")?;
    Ok(())
}

/// vLLM's `add_special_tokens`: whether text prompts get the tokenizer's special tokens
/// (a Llama's BOS); `default` when absent.
fn add_special(v: &Value, default: bool) -> Result<bool, Failure> {
    match &v["add_special_tokens"] {
        Value::Null => Ok(default),
        Value::Bool(b) => Ok(*b),
        _ => Err(bad(
            "add_special_tokens must be a boolean",
            "add_special_tokens",
        )),
    }
}

fn completion_prompts(
    served: &Served,
    p: &Value,
    vocab: usize,
    add_special_tokens: bool,
) -> Result<Vec<Vec<u32>>, Failure> {
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
            .encode_with(t, add_special_tokens)
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
pub(super) fn rand_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}
