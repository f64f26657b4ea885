//! Answers: a finished generation in OpenAI's completion or chat shape.

use super::*;

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

pub(super) fn render(m: &Served, p: &Params, gens: &[Generated]) -> Value {
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
            if let Some(v) = &g.verdict {
                choice["fleetmesh"]["verdict"] = v.clone();
            }
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
        "base_model_digest": hex::encode(m.base_digest),
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
