//! Remote executors: OpenAI-compatible completion endpoints (vLLM, another fleetmesh node,
//! any server that returns token ids and logprobs) called over HTTP(S).
//!
//! A [`RemoteExecutor`] sends the prompt as token ids (every executor of a quorum shares
//! the tokenizer) with `temperature: 0`, `logprobs: 2` (the top two give the margin) and
//! vLLM's `return_token_ids`, `return_tokens_as_token_ids`, `stop_token_ids` and
//! `ignore_eos` (so it stops where the request says, not at its own end-of-sequence),
//! and reads back the ids, each step's logprob and margin. [`RemoteExecutor::health`]
//! asks `GET /v1/models` whether the model is served. Every call has a connect timeout and
//! an overall timeout. Servers that cannot return token ids (Ollama's OpenAI layer today)
//! are refused with that reason rather than trusted on text.
//!
//! Ollama ([`RemoteKind::Ollama`]) is asked through its native `POST /api/generate`
//! instead: the prompt goes as the text of its ids (`raw`, no template; special tokens
//! are left to Ollama's own rules), greedy (`temperature` 0, `top_k` 1, `seed` 0,
//! `num_predict`), with `logprobs` and `top_logprobs: 2`; each returned token's bytes are
//! mapped back to its id in the shared vocabulary ([`RemoteExecutor::with_token_bytes`]),
//! the top two give the margin. Ollama ends at its end-of-sequence token, whatever the
//! request's stop ids, and leaves it out of its tokens: it is put back where the request
//! names one stop id ([`with_end`]); its health is `GET /api/tags` listing the model.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::executor::{Build, ExecRequest, Execution, Executor};
use crate::generate::Step;
use crate::{Error, Result};

/// Largest answer body read from a remote executor (16 MiB: far above any completion with
/// two logprobs per token).
const MAX_BODY: u64 = 16 << 20;

/// The API a remote executor speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RemoteKind {
    /// OpenAI's completions with vLLM's extensions (vLLM, a fleetmesh node).
    #[default]
    OpenAi,
    /// Ollama's native API.
    Ollama,
}

/// How to reach a remote executor.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteConfig {
    /// The API it speaks.
    pub kind: RemoteKind,
    /// The name the verdict uses.
    pub name: String,
    /// The server's base URL, e.g. `http://10.0.0.5:8000` (a trailing `/v1` is accepted).
    pub url: String,
    /// The model id on that server.
    pub model: String,
    /// Its engine (e.g. `vllm`); `None` takes what the server reports, else `unknown`.
    pub engine: Option<String>,
    /// Its dtype (e.g. `bf16`); `None` takes what the server reports, else `unknown`.
    pub dtype: Option<String>,
    /// Its model digest, pinned: an answer (or a health check) stating another one is
    /// refused as [`Error::WrongModel`]; `None` takes what the server reports (fleetmesh
    /// nodes do).
    pub model_digest: Option<[u8; 32]>,
    /// The model it must serve, across conversions ([`Build::base_digest`]), pinned the
    /// same way; `None` takes what the server reports (fleetmesh nodes do).
    pub base_digest: Option<[u8; 32]>,
    /// Bearer token sent as `Authorization`, if the server wants one.
    pub api_key: Option<String>,
    /// Longest a generation may take, connection included. Default 120 s.
    pub timeout: Duration,
    /// Longest to wait for the TCP (and TLS) connection. Default 5 s.
    pub connect_timeout: Duration,
}

impl RemoteConfig {
    /// A config with the defaults: build facts from the server, 120 s and 5 s timeouts.
    pub fn new(name: impl Into<String>, url: impl Into<String>, model: impl Into<String>) -> Self {
        RemoteConfig {
            kind: RemoteKind::OpenAi,
            name: name.into(),
            url: url.into(),
            model: model.into(),
            engine: None,
            dtype: None,
            model_digest: None,
            base_digest: None,
            api_key: None,
            timeout: Duration::from_secs(120),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// What a health check found.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// The models the server lists.
    pub models: Vec<String>,
    /// The model digest the server states for our model, if it does.
    pub model_digest: Option<[u8; 32]>,
    /// The base model digest it states, if it does.
    pub base_digest: Option<[u8; 32]>,
    /// How long the check took.
    pub latency: Duration,
}

/// The shared vocabulary, for an executor that answers in token bytes (Ollama).
#[derive(Debug)]
struct Vocab {
    /// Each id's bytes (`None`: a special token).
    bytes: Vec<Option<Vec<u8>>>,
    /// The lowest id of each byte string.
    ids: std::collections::HashMap<Vec<u8>, u32>,
}

/// A remote OpenAI-compatible endpoint (or an Ollama server) as an [`Executor`].
#[derive(Debug)]
pub struct RemoteExecutor {
    cfg: RemoteConfig,
    base: String,
    client: reqwest::blocking::Client,
    vocab: Option<std::sync::Arc<Vocab>>,
}

impl RemoteExecutor {
    /// Checks the URL and builds the HTTP client (rustls with the ring provider; the
    /// process-wide default provider is installed if none is yet).
    ///
    /// # Errors
    /// [`Error::Executor`] for a URL that is not http(s) or a client that cannot be built.
    pub fn new(cfg: RemoteConfig) -> Result<RemoteExecutor> {
        let fail = |reason: String| Error::Executor {
            executor: cfg.name.clone(),
            reason,
        };
        let url = cfg.url.trim_end_matches('/');
        let base = url.strip_suffix("/v1").unwrap_or(url).to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(fail(format!(
                "url {:?} is not http:// or https://",
                cfg.url
            )));
        }
        // a second install fails harmlessly: someone chose a provider already
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::blocking::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.connect_timeout)
            .build()
            .map_err(|e| fail(format!("HTTP client: {e}")))?;
        Ok(RemoteExecutor {
            cfg,
            base,
            client,
            vocab: None,
        })
    }

    /// Gives it the shared vocabulary's bytes per id
    /// ([`crate::tokenizer::TextTokenizer::token_bytes`]): an Ollama executor needs them
    /// to send the prompt as text and read its answer's tokens back as ids.
    pub fn with_token_bytes(mut self, bytes: Vec<Option<Vec<u8>>>) -> RemoteExecutor {
        let mut ids = std::collections::HashMap::new();
        for (id, b) in bytes.iter().enumerate() {
            if let (Some(b), Ok(id)) = (b, u32::try_from(id)) {
                ids.entry(b.clone()).or_insert(id);
            }
        }
        self.vocab = Some(std::sync::Arc::new(Vocab { bytes, ids }));
        self
    }

    /// The server's base URL (without a trailing `/` or `/v1`).
    pub fn base(&self) -> &str {
        &self.base
    }

    fn fail(&self, reason: impl Into<String>) -> Error {
        Error::Executor {
            executor: self.cfg.name.clone(),
            reason: reason.into(),
        }
    }

    fn call(&self, req: reqwest::blocking::RequestBuilder) -> Result<Value> {
        let req = match &self.cfg.api_key {
            Some(k) => req.bearer_auth(k),
            None => req,
        };
        let resp = req.send().map_err(|e| {
            self.fail(if e.is_timeout() {
                format!("timed out after {:?}", self.cfg.timeout)
            } else if e.is_connect() {
                format!("cannot connect to {}: {e}", self.base)
            } else {
                e.to_string()
            })
        })?;
        let status = resp.status();
        // a hostile or broken server cannot make us buffer without bound
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(resp, MAX_BODY + 1), &mut raw)
            .map_err(|e| self.fail(format!("HTTP {status}: reading the body: {e}")))?;
        if raw.len() as u64 > MAX_BODY {
            return Err(self.fail(format!("HTTP {status}: the body exceeds {MAX_BODY} bytes")));
        }
        let body: Value = serde_json::from_slice(&raw)
            .map_err(|e| self.fail(format!("HTTP {status}: the body is not JSON: {e}")))?;
        if !status.is_success() {
            let msg = body["error"]["message"]
                .as_str()
                .map_or_else(|| body.to_string(), str::to_owned);
            return Err(self.fail(format!("HTTP {status}: {msg}")));
        }
        Ok(body)
    }

    /// `GET /v1/models`: the server answers and lists our model.
    ///
    /// # Errors
    /// [`Error::Executor`] when it does not answer in time, answers with an error, or
    /// does not list the model; [`Error::WrongModel`] when it states digests other than
    /// the pinned ones.
    pub fn health(&self) -> Result<Health> {
        let start = Instant::now();
        if self.cfg.kind == RemoteKind::Ollama {
            let body = self.call(self.client.get(format!("{}/api/tags", self.base)))?;
            let models: Vec<String> = body["models"]
                .as_array()
                .ok_or_else(|| self.fail("/api/tags has no models list"))?
                .iter()
                .filter_map(|m| m["name"].as_str().map(str::to_owned))
                .collect();
            if !models.iter().any(|m| ollama_names(m, &self.cfg.model)) {
                return Err(self.fail(format!(
                    "model {:?} is not pulled there (it lists {models:?})",
                    self.cfg.model
                )));
            }
            return Ok(Health {
                models,
                model_digest: None,
                base_digest: None,
                latency: start.elapsed(),
            });
        }
        let body = self.call(self.client.get(format!("{}/v1/models", self.base)))?;
        let data = body["data"]
            .as_array()
            .ok_or_else(|| self.fail("/v1/models has no data list"))?;
        let models: Vec<String> = data
            .iter()
            .filter_map(|m| m["id"].as_str().map(str::to_owned))
            .collect();
        let ours = data
            .iter()
            .find(|m| m["id"].as_str() == Some(self.cfg.model.as_str()))
            .ok_or_else(|| {
                self.fail(format!(
                    "model {:?} is not served there (it lists {models:?})",
                    self.cfg.model
                ))
            })?;
        let (model_digest, base_digest) = self.digests(&ours["fleetmesh"])?;
        Ok(Health {
            model_digest,
            base_digest,
            models,
            latency: start.elapsed(),
        })
    }
}

/// A SHA-256 digest.
type Digest = [u8; 32];

fn digest_of(v: &Value) -> Option<Digest> {
    let s = v.as_str()?;
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Whether Ollama's model name `listed` is `model` (`name` stands for `name:latest`).
fn ollama_names(listed: &str, model: &str) -> bool {
    listed == model || (!model.contains(':') && listed.strip_suffix(":latest") == Some(model))
}

/// A step from the server's answer: its alternatives sorted (likeliest first, ties to the
/// lower id), the top two giving the margin; a server that sends fewer leaves it unknown
/// (infinite: never a near-tie).
fn step(id: u32, logprob: f64, mut top: Vec<(u32, f64)>) -> Step {
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let margin = match top.as_slice() {
        [a, b, ..] => a.1 - b.1,
        _ => f64::INFINITY,
    };
    Step {
        id,
        logprob,
        margin,
        top,
    }
}

/// Ollama's answer `steps` with the end-of-sequence token it stopped at, which it leaves
/// out of its tokens: where it says `done_reason` `stop` before `max_tokens` and the
/// request has one stop id, that id ends the output, as it ends the other executors'
/// (its logprob unknown: NaN, which no tolerance check flags). With several stop ids it
/// cannot tell which one, and the output stays a prefix of theirs (a length divergence).
fn with_end(mut steps: Vec<Step>, done_reason: Option<&str>, req: &ExecRequest) -> Vec<Step> {
    if done_reason == Some("stop")
        && steps.len() < req.max_tokens
        && let [end] = req.stop_ids.as_slice()
        && steps.last().is_none_or(|s| s.id != *end)
    {
        steps.push(step(*end, f64::NAN, Vec::new()));
    }
    steps
}

/// The id in a `token_id:N` token string (vLLM's `return_tokens_as_token_ids`).
fn token_id(s: &str) -> Option<u32> {
    s.strip_prefix("token_id:")?.parse().ok()
}

impl Executor for RemoteExecutor {
    fn name(&self) -> &str {
        &self.cfg.name
    }

    fn build(&self) -> Build {
        Build {
            model_digest: self.cfg.model_digest,
            base_digest: self.cfg.base_digest,
            engine: self.engine().unwrap_or_else(|| "unknown".into()),
            dtype: self.cfg.dtype.clone().unwrap_or_else(|| "unknown".into()),
        }
    }

    fn run(&self, req: &ExecRequest) -> Result<Execution> {
        if self.cfg.kind == RemoteKind::Ollama {
            return self.run_ollama(req);
        }
        let mut body = json!({
            "model": self.cfg.model,
            "prompt": req.prompt,
            "max_tokens": req.max_tokens,
            "temperature": 0,
            "top_p": 1,
            "seed": 0,
            "logprobs": 2,
            "return_token_ids": true,
            "return_tokens_as_token_ids": true,
            "stop_token_ids": req.stop_ids,
            "ignore_eos": req.schema.is_none(),
            "stream": false,
        });
        if let Some(schema) = &req.schema {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": "fleetmesh", "schema": schema, "strict": true},
            });
        }
        let v = self.call(
            self.client
                .post(format!("{}/v1/completions", self.base))
                .json(&body),
        )?;
        let choice = &v["choices"][0];
        let lp = &choice["logprobs"];
        let ids: Vec<u32> = match choice["token_ids"].as_array() {
            Some(a) => a
                .iter()
                .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect::<Option<_>>()
                .ok_or_else(|| self.fail("token_ids holds a non-id"))?,
            None => lp["tokens"]
                .as_array()
                .and_then(|t| t.iter().map(|s| s.as_str().and_then(token_id)).collect())
                .ok_or_else(|| {
                    self.fail(
                        "the answer has no token ids (the server needs vLLM's \
                         return_token_ids or return_tokens_as_token_ids)",
                    )
                })?,
        };
        if let Some(p) = choice["prompt_token_ids"].as_array()
            && p.iter().map(Value::as_u64).collect::<Vec<_>>()
                != req
                    .prompt
                    .iter()
                    .map(|i| Some(u64::from(*i)))
                    .collect::<Vec<_>>()
        {
            return Err(self.fail("the server ran other prompt ids than were sent"));
        }
        let logprobs = lp["token_logprobs"].as_array();
        let tops = lp["top_logprobs"].as_array();
        if ids.len() > req.max_tokens {
            return Err(self.fail(format!(
                "returned {} tokens for max_tokens {}",
                ids.len(),
                req.max_tokens
            )));
        }
        let mut steps = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let logprob = logprobs
                .and_then(|l| l.get(i))
                .and_then(Value::as_f64)
                .ok_or_else(|| self.fail(format!("no logprob for step {i}")))?;
            let top: Vec<(u32, f64)> = tops
                .and_then(|t| t.get(i))
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((token_id(k).unwrap_or(u32::MAX), v.as_f64()?)))
                        .collect()
                })
                .unwrap_or_default();
            steps.push(step(*id, logprob, top));
        }
        self.execution(steps, &v["fleetmesh"])
    }
}

impl RemoteExecutor {
    /// What it ran, as the config states it or else as the answer's `fleetmesh` claims.
    fn execution(&self, steps: Vec<Step>, fm: &Value) -> Result<Execution> {
        let claimed = |key: &str| fm[key].as_str().map(str::to_owned);
        let (model_digest, base_digest) = self.digests(fm)?;
        Ok(Execution {
            executor: self.cfg.name.clone(),
            build: Build {
                model_digest,
                base_digest,
                engine: self
                    .engine()
                    .or_else(|| claimed("engine"))
                    .unwrap_or_else(|| "unknown".into()),
                dtype: self
                    .cfg
                    .dtype
                    .clone()
                    .or_else(|| claimed("dtype"))
                    .unwrap_or_else(|| "unknown".into()),
            },
            steps,
        })
    }

    /// The model and base digests from the server's `fleetmesh` object (an answer's or
    /// its `/v1/models` entry's), the pinned ones where it states none.
    ///
    /// # Errors
    /// [`Error::WrongModel`] when it states one other than the pinned one.
    fn digests(&self, fm: &Value) -> Result<(Option<Digest>, Option<Digest>)> {
        let check = |key: &str, pinned: Option<[u8; 32]>| {
            let stated = digest_of(&fm[key]);
            match (pinned, stated) {
                (Some(p), Some(s)) if p != s => Err(Error::WrongModel {
                    executor: self.cfg.name.clone(),
                    reason: format!(
                        "it states {key} {}, pinned to {}",
                        crate::executor::hex32(&s),
                        crate::executor::hex32(&p)
                    ),
                }),
                _ => Ok(pinned.or(stated)),
            }
        };
        Ok((
            check("model_digest", self.cfg.model_digest)?,
            check("base_model_digest", self.cfg.base_digest)?,
        ))
    }

    /// [`Executor::run`] through Ollama's `POST /api/generate`.
    fn run_ollama(&self, req: &ExecRequest) -> Result<Execution> {
        let vocab = self.vocab.as_ref().ok_or_else(|| {
            self.fail("an Ollama executor needs the model's vocabulary (with_token_bytes)")
        })?;
        let mut text = Vec::new();
        for (i, id) in req.prompt.iter().enumerate() {
            match vocab.bytes.get(*id as usize) {
                Some(Some(b)) => text.extend_from_slice(b),
                // a leading special token (BOS) is Ollama's to add
                Some(None) if i == 0 => {}
                _ => {
                    return Err(self.fail(format!(
                        "prompt id {id} is a special or unknown token: Ollama takes text"
                    )));
                }
            }
        }
        let text = String::from_utf8(text)
            .map_err(|_| self.fail("the prompt's ids are not whole UTF-8 text"))?;
        let mut body = json!({
            "model": self.cfg.model,
            "prompt": text,
            "raw": true,
            "stream": false,
            "logprobs": true,
            "top_logprobs": 2,
            "options": {"temperature": 0, "top_k": 1, "seed": 0, "num_predict": req.max_tokens},
        });
        if let Some(schema) = &req.schema {
            body["format"] = schema.clone();
        }
        let v = self.call(
            self.client
                .post(format!("{}/api/generate", self.base))
                .json(&body),
        )?;
        let lps = v["logprobs"].as_array().ok_or_else(|| {
            self.fail("the answer has no logprobs (Ollama 0.12.11 or later returns them)")
        })?;
        if lps.len() > req.max_tokens {
            return Err(self.fail(format!(
                "returned {} tokens for max_tokens {}",
                lps.len(),
                req.max_tokens
            )));
        }
        let id_of = |t: &Value| -> Result<u32> {
            let bytes: Vec<u8> = t["bytes"]
                .as_array()
                .map(|b| {
                    b.iter()
                        .map(|x| x.as_u64().and_then(|x| u8::try_from(x).ok()))
                        .collect()
                })
                .unwrap_or_else(|| t["token"].as_str().map(|s| s.as_bytes().to_vec()))
                .ok_or_else(|| self.fail("a token without its bytes"))?;
            vocab.ids.get(&bytes).copied().ok_or_else(|| {
                self.fail(format!(
                    "token {:?} is not in the model's vocabulary (another tokenizer?)",
                    String::from_utf8_lossy(&bytes)
                ))
            })
        };
        let mut steps = Vec::with_capacity(lps.len());
        for (i, lp) in lps.iter().enumerate() {
            let logprob = lp["logprob"]
                .as_f64()
                .ok_or_else(|| self.fail(format!("no logprob for step {i}")))?;
            let top = lp["top_logprobs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| {
                    Ok((
                        id_of(t)?,
                        t["logprob"].as_f64().unwrap_or(f64::NEG_INFINITY),
                    ))
                })
                .collect::<Result<Vec<(u32, f64)>>>()?;
            steps.push(step(id_of(lp)?, logprob, top));
        }
        let steps = with_end(steps, v["done_reason"].as_str(), req);
        self.execution(steps, &Value::Null)
    }

    /// The engine the config states, or `ollama` for an Ollama server.
    fn engine(&self) -> Option<String> {
        self.cfg
            .engine
            .clone()
            .or_else(|| (self.cfg.kind == RemoteKind::Ollama).then(|| "ollama".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(stop_ids: Vec<u32>) -> ExecRequest {
        ExecRequest {
            prompt: vec![1, 5],
            max_tokens: 4,
            stop_ids,
            schema: None,
        }
    }

    #[test]
    fn ollama_stopping_early_ends_with_the_one_stop_id() {
        let two = || vec![step(7, -0.1, Vec::new()), step(8, -0.2, Vec::new())];
        let ended = with_end(two(), Some("stop"), &req(vec![2]));
        assert_eq!(ended.iter().map(|s| s.id).collect::<Vec<_>>(), [7, 8, 2]);
        assert!(ended[2].logprob.is_nan() && ended[2].margin.is_infinite());
        // at the token limit, with several stop ids or none, or already there: as it came
        for (done, stops) in [
            (Some("length"), vec![2]),
            (None, vec![2]),
            (Some("stop"), vec![2, 3]),
            (Some("stop"), Vec::new()),
            (Some("stop"), vec![8]),
        ] {
            assert_eq!(with_end(two(), done, &req(stops)).len(), 2);
        }
        let full: Vec<Step> = (0..4).map(|i| step(10 + i, -0.1, Vec::new())).collect();
        assert_eq!(with_end(full, Some("stop"), &req(vec![2])).len(), 4);
    }
}
