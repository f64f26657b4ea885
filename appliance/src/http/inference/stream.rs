//! Streaming answers as server-sent events.

use super::*;

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
pub(super) fn stream(p: Params, place: tokio::sync::OwnedSemaphorePermit) -> Response {
    use axum::response::sse::{Event, Sse};
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let m = &p.model;
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
    let on_step = {
        let (tokenizer, sent, tx, chunk) =
            (m.tokenizer.clone(), sent.clone(), tx.clone(), chunk.clone());
        let (stops, stop_ids) = (p.stop.clone(), p.stop_ids.clone());
        let tokens = m.tokens.clone();
        move |ids: &[u32]| {
            tokens.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // one decode per step serves the stop test and the delta
            let text = tokenizer.decode(ids).unwrap_or_default();
            if stopped(ids, &text, &stops, &stop_ids) {
                return true;
            }
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
    let (done, answer) = tokio::sync::oneshot::channel();
    let submitted = p.model.batcher.submit_with(
        Job {
            prompt: p.prompts[0].clone(),
            max_tokens: p.max_tokens,
            sampling: p.sampling.clone(),
            top_logprobs: 0,
            on_step: Some(Box::new(on_step)),
            constraint: generation::constraint(&p.model, &p),
        },
        Box::new(move |r| {
            let _ = done.send(r);
        }),
    );
    tokio::spawn(async move {
        // the queue place is held until the generation ends
        let _place = place;
        let result = match submitted {
            Ok(()) => answer.await.unwrap_or_else(|_| {
                Err(fleetmesh_inference::Error::Request(
                    "the model's batching worker stopped".into(),
                ))
            }),
            Err(e) => Err(e),
        };
        let st = std::mem::take(&mut *sent.lock().expect("stream state"));
        if st.gone {
            return;
        }
        let m = &p.model;
        match result {
            Ok(t) => {
                let (ids, text, mut finish) = cut(m, &p, &t.output_ids());
                let verdict = p.schema.as_ref().map(|g| {
                    let (valid, v) = schema_verdict(g, &text);
                    if valid {
                        finish = "stop";
                    }
                    v
                });
                let rest = text.get(st.text.len()..).unwrap_or_default();
                let mut last = chunk(rest, &ids[st.ids.min(ids.len())..], Some(finish));
                last["usage"] = json!({
                    "prompt_tokens": p.prompts[0].len(),
                    "completion_tokens": ids.len(),
                    "total_tokens": p.prompts[0].len() + ids.len(),
                });
                last["fleetmesh"] = json!({
                    "model_digest": hex::encode(m.digest),
                    "base_model_digest": hex::encode(m.base_digest),
                    "transcript_digest": hex::encode(t.digest()),
                    "engine": m.engine,
                    "dtype": m.batcher.model().dtype(),
                });
                if let Some(v) = verdict {
                    last["fleetmesh"]["verdict"] = v;
                }
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
