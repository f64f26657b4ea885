//! Routed models: a model id that no local model has, served by remote executors only
//! (`[[inference.executors]]` whose `serves` names it, an InferenceRouter's `remote`
//! models). A request for it is forwarded whole — `stop`, sampling, `stream` and all, the
//! model renamed to its id there, `verification` and `job` taken out — to its executors,
//! the one answering best first: up and fastest (a moving average of the time to the
//! answer's head), an executor that failed set aside for [`RETRY_AFTER_SECS`]. An
//! executor that cannot be reached, times out or answers 5xx is counted a failure and the
//! next is tried (a stream only before its first byte); a 4xx is the client's and is
//! answered as it is. Answers are unverified, or `schema-bounds`: the executor gets the
//! request's `response_format` and its answer, read whole (no stream), is checked here
//! against that schema with the `jsonschema` crate (any schema it takes, not only the
//! constrained decoder's subset); an output the schema rejects is that executor's failure
//! and the next is tried. Other modes are refused with 400: a quorum needs a local model.
//! Market `llm` jobs of a routed model run the same way ([`job_answer`]), schema-bounds
//! only; the node's terms list a routed model when its executors pin one model digest.
//!
//! vLLM and other OpenAI-compatible servers get `/v1/completions` and
//! `/v1/chat/completions`; Ollama its OpenAI layer (the same paths). Non-streamed answers
//! carry `fleetmesh.{executor, routed, verification}`, every answer the
//! `x-fleetmesh-executor` header; `fleetmesh_inference_routed_total{executor, outcome}`
//! counts the calls.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use super::*;
use crate::config::ExecutorSection;
use fleetmesh_inference::schema::SchemaCheck;
use fleetmesh_proto::Mode;

/// Seconds an executor that failed is tried after those that did not.
pub(super) const RETRY_AFTER_SECS: u64 = 10;
/// Largest non-streamed answer read from an executor.
const MAX_ANSWER: usize = 16 << 20;

/// One executor of a routed model, and how it has answered.
pub(super) struct Route {
    pub(super) entry: ExecutorSection,
    /// For health checks.
    pub(super) remote: RemoteExecutor,
    client: reqwest::Client,
    base: String,
    pub(super) stats: Stats,
}

/// How an executor has answered.
#[derive(Default)]
pub(super) struct Stats {
    calls: AtomicU64,
    failures: AtomicU64,
    /// Moving average of the time to the answer's head, µs (0: not measured yet).
    latency_us: AtomicU64,
    /// Unix time before which it is tried last (after a failure).
    down_until: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Stats {
    fn answered(&self, took: Duration) {
        self.calls.fetch_add(1, Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
        let old = self.latency_us.load(Relaxed);
        let new = if old == 0 { us } else { (old * 7 + us) / 8 };
        self.latency_us.store(new, Relaxed);
        self.down_until.store(0, Relaxed);
    }

    pub(super) fn failed(&self, why: String) {
        self.calls.fetch_add(1, Relaxed);
        self.failures.fetch_add(1, Relaxed);
        self.down_until
            .store(unix_now() + RETRY_AFTER_SECS, Relaxed);
        *self
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
    }

    /// What `/v1/models` and `/v1/executors` say of it.
    pub(super) fn to_json(&self) -> Value {
        let us = self.latency_us.load(Relaxed);
        json!({
            "calls": self.calls.load(Relaxed),
            "failures": self.failures.load(Relaxed),
            "latency_ms": (us > 0).then(|| us as f64 / 1e3),
            "up": self.down_until.load(Relaxed) <= unix_now(),
            "last_error": *self.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
        })
    }
}

/// A model served by remote executors only.
pub(super) struct Routed {
    pub(super) id: String,
    pub(super) routes: Vec<Route>,
    /// Requests admitted (`[inference] max_queue`), as for a local model.
    queue: Arc<tokio::sync::Semaphore>,
    pub(super) queue_size: usize,
}

impl Routed {
    /// The routed model `id` over `entries` (in their order).
    ///
    /// # Errors
    /// An entry with a bad URL or a client that cannot be built.
    pub(super) fn new(
        id: String,
        entries: Vec<ExecutorSection>,
        queue_size: usize,
    ) -> anyhow::Result<Routed> {
        let mut routes = Vec::new();
        for entry in entries {
            let remote = super::serving::remote(&entry)?;
            let base = remote.base().to_owned();
            // an executor's redirect is not followed: it answers or it fails
            let client = reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(Duration::from_secs(entry.connect_timeout_s.max(1)))
                .read_timeout(Duration::from_secs(entry.timeout_s.max(1)))
                .build()
                .map_err(|e| anyhow::anyhow!("[[inference.executors]] {:?}: {e}", entry.name))?;
            routes.push(Route {
                entry,
                remote,
                client,
                base,
                stats: Stats::default(),
            });
        }
        Ok(Routed {
            id,
            routes,
            queue: Arc::new(tokio::sync::Semaphore::new(queue_size)),
            queue_size,
        })
    }

    /// The entries it was built from.
    pub(super) fn entries(&self) -> Vec<&ExecutorSection> {
        self.routes.iter().map(|r| &r.entry).collect()
    }

    /// Its executors, the one to try first first: up before set aside, then fastest
    /// (unmeasured ones first, so each gets measured), then as configured.
    fn ordered(&self) -> Vec<&Route> {
        let now = unix_now();
        let mut v: Vec<(usize, &Route)> = self.routes.iter().enumerate().collect();
        v.sort_by_key(|(i, r)| {
            (
                r.stats.down_until.load(Relaxed) > now,
                r.stats.latency_us.load(Relaxed),
                *i,
            )
        });
        v.into_iter().map(|(_, r)| r).collect()
    }

    /// `GET /v1/models`' entry.
    pub(super) fn listing(&self) -> Value {
        json!({
            "id": self.id,
            "object": "model",
            "created": 0,
            "owned_by": "fleetmesh",
            "fleetmesh": {
                "routed": true,
                "verification": ["none", "schema-bounds"],
                "requests_in_flight": self.queue_size - self.queue.available_permits(),
                "max_queue": self.queue_size,
                "executors": self.routes.iter().map(|r| {
                    let mut v = r.stats.to_json();
                    v["name"] = json!(r.entry.name);
                    v["kind"] = json!(r.entry.kind);
                    v
                }).collect::<Vec<_>>(),
            },
        })
    }
}

/// Checks `route`'s health now (blocking): counted in its stats, logged; what
/// `/v1/executors` says of it.
pub(super) fn health(r: &Routed, route: &Route) -> Value {
    let name = route.entry.name.as_str();
    let mut v = match route.remote.health() {
        Ok(h) => {
            route.stats.answered(h.latency);
            tracing::info!(executor = name, model = %r.id, latency_ms = h.latency.as_millis() as u64, "routed executor is up");
            json!({"healthy": true, "latency_ms": h.latency.as_secs_f64() * 1e3})
        }
        Err(e) => {
            route.stats.failed(e.to_string());
            tracing::warn!(executor = name, model = %r.id, error = %e, "routed executor is not reachable");
            json!({"healthy": false, "error": e.to_string()})
        }
    };
    v["executor"] = json!(name);
    v["serves"] = json!(r.id);
    v["routed"] = json!(true);
    v["stats"] = route.stats.to_json();
    v
}

/// The routed model `body` names, if it names one.
pub(super) fn routed_for(s: &InferenceService, body: &[u8]) -> Option<(Arc<Routed>, Value)> {
    let now = s.now();
    if now.routed.is_empty() {
        // a node that routes nothing does not read the body twice
        return None;
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    let r = now
        .routed
        .iter()
        .find(|r| Some(r.id.as_str()) == v["model"].as_str())?;
    Some((r.clone(), v))
}

/// Answers a request for routed model `r` (`body` parsed) by forwarding it.
pub(super) async fn forward(
    r: Arc<Routed>,
    mut body: Value,
    api: Api,
    default: Verification,
) -> Response {
    let verification = match &body["verification"] {
        Value::Null => Ok(default),
        Value::String(x) => x.parse::<Verification>(),
        _ => Err("verification must be a string".into()),
    };
    let check = match verification {
        Ok(Verification::None) => None,
        Ok(Verification::SchemaBounds) => match schema_check(&body) {
            Ok(c) => Some(c),
            Err(f) => return f.into_response(),
        },
        Ok(v) => {
            return bad(
                format!(
                    "model {} is served by remote executors only: verification {} needs a \
                     local model (none and schema-bounds are served)",
                    r.id,
                    v.as_str()
                ),
                "verification",
            )
            .into_response();
        }
        Err(e) => return bad(e, "verification").into_response(),
    };
    let Ok(_place) = r.queue.clone().try_acquire_owned() else {
        return overloaded(&r.id);
    };
    let Some(obj) = body.as_object_mut() else {
        return bad("the body is not a JSON object", "body").into_response();
    };
    obj.remove("verification");
    obj.remove("job");
    let stream = body["stream"] == true;
    if stream && check.is_some() {
        return bad(
            "a routed schema-bounds answer is checked whole before it is sent: stream must be false",
            "stream",
        )
        .into_response();
    }
    let path = match api {
        Api::Completion => "completions",
        Api::Chat => "chat/completions",
    };
    let mut failed = Vec::new();
    for route in r.ordered() {
        let name = route.entry.name.as_str();
        let counted = |outcome: &'static str| {
            metrics::counter!("fleetmesh_inference_routed_total",
                "executor" => name.to_owned(), "outcome" => outcome)
            .increment(1);
        };
        body["model"] = json!(route.entry.model.as_deref().unwrap_or(&r.id));
        let mut req = route
            .client
            .post(format!("{}/v1/{path}", route.base))
            .json(&body);
        if !stream {
            req = req.timeout(Duration::from_secs(route.entry.timeout_s.max(1)));
        }
        if let Some(k) = &route.entry.api_key {
            req = req.bearer_auth(k);
        }
        let start = Instant::now();
        let why = match req.send().await {
            Ok(resp) if !resp.status().is_server_error() => {
                route.stats.answered(start.elapsed());
                let Some(check) = &check else {
                    counted("answered");
                    return relay(resp, name, stream).await;
                };
                let (status, mut v) = match read_answer(resp, name).await {
                    Ok(a) => a,
                    Err(f) => return f.into_response(),
                };
                // a 4xx is the client's: relayed as it is
                let verdict = match status.is_success() {
                    true => bounded(check, &v),
                    false => Ok(Value::Null),
                };
                match verdict {
                    Err(why) => why,
                    Ok(verdict) => {
                        counted("answered");
                        if status.is_success() {
                            v["fleetmesh"] = json!({"executor": name, "routed": true,
                                "verification": "schema-bounds", "verdict": verdict});
                        }
                        return (status, [executor_header(name)], Json(v)).into_response();
                    }
                }
            }
            Ok(resp) => format!("HTTP {}", resp.status()),
            Err(e) if e.is_timeout() => "timed out".to_owned(),
            Err(e) => format!("cannot reach it: {e}"),
        };
        tracing::warn!(model = %r.id, executor = name, %why, "a routed request failed; trying the next executor");
        route.stats.failed(why.clone());
        counted("failed");
        failed.push(format!("{name}: {why}"));
    }
    Failure {
        status: StatusCode::BAD_GATEWAY,
        message: format!(
            "no executor of model {} answered: {}",
            r.id,
            failed.join("; ")
        ),
        param: None,
        code: Some("executors_failed"),
        extra: None,
    }
    .into_response()
}

/// A market `llm` job of routed model `r` (`body`: the API request it was made into):
/// under `schema-bounds` only, forwarded as such a request is, on `runtime` (the one the
/// executors' connections live on; called from a job's worker thread, outside it), its
/// checked answer read back.
pub(super) fn job_answer(
    r: Arc<Routed>,
    body: Value,
    (api, mode): (Api, Mode),
    runtime: Option<&tokio::runtime::Handle>,
) -> Result<fleetmesh_market::service::LlmAnswer, fleetmesh_market::service::LlmFailure> {
    use fleetmesh_market::service::{LlmAnswer, LlmFailure};
    let failure = |code, message: String| LlmFailure {
        code,
        message,
        verdict: None,
    };
    if mode != Mode::SchemaBounds {
        return Err(failure(
            "unsupported_mode",
            format!(
                "model {} is served by remote executors only: its jobs run under schema-bounds, \
                 not {mode}",
                r.id
            ),
        ));
    }
    let runtime = runtime.ok_or_else(|| {
        failure(
            "internal",
            "the inference service was loaded outside a runtime".to_owned(),
        )
    })?;
    let (status, raw) = runtime.block_on(async {
        let resp = forward(r, body, api, Verification::SchemaBounds).await;
        let status = resp.status();
        (
            status,
            axum::body::to_bytes(resp.into_body(), MAX_ANSWER * 2).await,
        )
    });
    let document: Value = raw
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if !status.is_success() {
        let code = match document["error"]["code"].as_str() {
            Some("executors_failed") => "executors_failed",
            Some("overloaded") => "overloaded",
            Some("unsupported_schema") => "unsupported_schema",
            _ => "bad_request",
        };
        let message = document["error"]["message"]
            .as_str()
            .map_or_else(|| format!("HTTP {status}"), str::to_owned);
        return Err(failure(code, message));
    }
    Ok(LlmAnswer {
        verdict: document["fleetmesh"]["verdict"].clone(),
        transcript_digest: None,
        prompt_tokens: document["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
        completion_tokens: document["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        document,
    })
}

/// The `x-fleetmesh-executor` header of an answer from `executor`.
fn executor_header(executor: &str) -> (axum::http::HeaderName, axum::http::HeaderValue) {
    (
        axum::http::HeaderName::from_static("x-fleetmesh-executor"),
        axum::http::HeaderValue::from_str(executor)
            .unwrap_or(axum::http::HeaderValue::from_static("?")),
    )
}

/// The check of a `schema-bounds` request's output: its `response_format`'s schema, which
/// it must have.
fn schema_check(body: &Value) -> Result<SchemaCheck, Failure> {
    let schema = super::request::response_schema(&body["response_format"])?.ok_or_else(|| {
        bad(
            "schema-bounds verification needs a response_format with a JSON Schema",
            "response_format",
        )
    })?;
    SchemaCheck::new(&schema).map_err(|e| Failure {
        status: StatusCode::BAD_REQUEST,
        message: e.to_string(),
        param: Some("response_format"),
        code: Some("unsupported_schema"),
        extra: None,
    })
}

/// The `schema-bounds` verdict on an executor's answer `v` (every choice's text or message
/// content valid under `check`), or why it fails.
fn bounded(check: &SchemaCheck, v: &Value) -> Result<Value, String> {
    let choices = v["choices"].as_array().filter(|c| !c.is_empty());
    for (i, c) in choices
        .ok_or("its answer has no choices")?
        .iter()
        .enumerate()
    {
        let text = c["text"]
            .as_str()
            .or_else(|| c["message"]["content"].as_str())
            .ok_or_else(|| format!("choice {i} has no text"))?;
        let checked = check.validate(text);
        if !checked.valid {
            return Err(format!(
                "its output (choice {i}) is not valid under the schema: {}",
                checked.errors.join("; ")
            ));
        }
    }
    Ok(json!({"mode": "schema-bounds", "valid": true, "errors": [], "constrained": false}))
}

/// The executor's answer as ours: streamed through, or read (bounded) with `fleetmesh`
/// added.
async fn relay(resp: reqwest::Response, executor: &str, stream: bool) -> Response {
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    if stream && status.is_success() {
        let kind = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| axum::http::HeaderValue::from_bytes(v.as_bytes()).ok())
            .unwrap_or(axum::http::HeaderValue::from_static("application/json"));
        let body = axum::body::Body::from_stream(resp.bytes_stream());
        return (
            status,
            [
                (axum::http::header::CONTENT_TYPE, kind),
                executor_header(executor),
            ],
            body,
        )
            .into_response();
    }
    match read_answer(resp, executor).await {
        Ok((status, mut v)) => {
            if status.is_success() {
                v["fleetmesh"] =
                    json!({"executor": executor, "routed": true, "verification": "none"});
            }
            (status, [executor_header(executor)], Json(v)).into_response()
        }
        Err(f) => f.into_response(),
    }
}

/// The executor's whole answer (at most [`MAX_ANSWER`] bytes), a JSON object, with its
/// status.
async fn read_answer(
    mut resp: reqwest::Response,
    executor: &str,
) -> Result<(StatusCode, Value), Failure> {
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let failed = |message: String| Failure {
        status: StatusCode::BAD_GATEWAY,
        message,
        param: None,
        code: Some("executors_failed"),
        extra: None,
    };
    let mut raw = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) if raw.len() + c.len() <= MAX_ANSWER => raw.extend_from_slice(&c),
            Ok(Some(_)) => {
                return Err(internal(format!(
                    "executor {executor}'s answer exceeds {MAX_ANSWER} bytes"
                )));
            }
            Ok(None) => break,
            Err(e) => return Err(failed(format!("reading executor {executor}'s answer: {e}"))),
        }
    }
    match serde_json::from_slice::<Value>(&raw) {
        Ok(v) if v.is_object() => Ok((status, v)),
        _ => Err(failed(format!(
            "executor {executor} answered HTTP {status} with a body that is not JSON"
        ))),
    }
}
