//! The inference crate's readers of model files and requests: GGUF and safetensors
//! weights (with the config they carry or come with), `tokenizer.json`, chat templates,
//! and JSON Schemas compiled for constrained decoding.

use std::io::Cursor;
use std::path::Path;
use std::sync::Arc;

use fleetmesh_inference::chat::{ChatTemplate, Message};
use fleetmesh_inference::schema::{Constraint, Grammar, Matcher, TokenVocab};
use fleetmesh_inference::{KvCache, Llama, LlamaConfig, TextTokenizer};

use crate::split_at_byte;

/// The shape of the micro model the model seeds hold (`tests/corpus.rs` writes them):
/// small enough that a whole model fits in a fuzz input.
pub fn micro_config() -> LlamaConfig {
    LlamaConfig {
        model_type: "llama".into(),
        sliding_window: None,
        use_sliding_window: false,
        rope_scaling: None,
        partial_rotary_factor: None,
        head_dim: None,
        attention_bias: false,
        mlp_bias: false,
        hidden_size: 8,
        intermediate_size: 8,
        vocab_size: 16,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: Some(1),
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        max_position_embeddings: 16,
        tie_word_embeddings: false,
        bos_token_id: None,
        eos_token_id: Vec::new(),
    }
}

/// A model that loaded must run: two positions through the forward pass.
fn run(model: &Llama) {
    let mut cache = KvCache::default();
    let vocab = model.config().vocab_size as u32;
    if model.check_tokens(&[0, vocab - 1], 0).is_ok() {
        let _ = model.forward(&[0, vocab - 1], &mut cache);
    }
}

/// A GGUF file: its header (candle's reader), the `llama.*` metadata read into a config,
/// the tensors dequantized and checked against it, then a forward pass.
pub fn gguf(data: &[u8]) {
    if let Ok(model) = Llama::read_gguf(&mut Cursor::new(data), Path::new("fuzz.gguf")) {
        run(&model);
    }
}

/// A `model.safetensors`. The first byte picks the config: even, the micro model's; odd,
/// a `config.json` read from the rest up to the first 0 byte (the weights follow it).
pub fn safetensors(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (config, weights) = if mode & 1 == 0 {
        (micro_config(), rest)
    } else {
        let (json, weights) = split_at_byte(rest, 0);
        let Ok(config) = serde_json::from_slice::<LlamaConfig>(json) else {
            return;
        };
        (config, weights)
    };
    if let Ok(model) = Llama::from_safetensors_bytes(config, weights, Path::new("fuzz")) {
        run(&model);
    }
}

/// A `tokenizer.json`, then (after a 0 byte, when there is one) its
/// `tokenizer_config.json`: encoding, decoding and the per-token bytes constrained
/// decoding uses.
pub fn tokenizer(data: &[u8]) {
    let (json, config) = split_at_byte(data, 0);
    let config = (!config.is_empty()).then_some(config);
    let Ok(t) = TextTokenizer::from_bytes(json, config) else {
        return;
    };
    let bytes = t.token_bytes();
    for text in ["Hello, world!", " <s> ünïcödé\n\t☃ 12345 ", ""] {
        for special in [false, true] {
            if let Ok(ids) = t.encode_with(text, special) {
                let _ = t.decode(&ids);
            }
        }
    }
    let n = bytes.len() as u32;
    let _ = t.decode(&[0, n.saturating_sub(1), n, n + 7, u32::MAX]);
    let _ = TokenVocab::new(&bytes);
}

/// A chat template (up to the first 0 byte; the rest is the user's message): parsed, then
/// rendered for a short conversation as the chat endpoint would.
pub fn chat_template(data: &[u8]) {
    let (source, user) = split_at_byte(data, 0);
    let (Ok(source), Ok(user)) = (std::str::from_utf8(source), std::str::from_utf8(user)) else {
        return;
    };
    let Ok(t) = ChatTemplate::new(source, "<s>", "</s>") else {
        return;
    };
    let messages = [
        Message {
            role: "system".into(),
            content: "Be brief.".into(),
        },
        Message {
            role: "user".into(),
            content: user.into(),
        },
        Message {
            role: "assistant".into(),
            content: "Hi.".into(),
        },
    ];
    for open in [false, true] {
        let _ = t.render(&messages, open);
    }
    let _ = t.render(&messages[1..2], true);
}

/// A JSON Schema (up to the first 0 byte; the rest is a document): compiled, then the
/// matcher follows the document. A document the matcher accepts whole must be valid by the
/// independent validator, and a generation constrained to the schema — always taking the
/// first token allowed, with a budget of twice the shortest document — must end with a
/// valid document.
pub fn schema(data: &[u8]) {
    let (schema, doc) = split_at_byte(data, 0);
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(schema) else {
        return;
    };
    let Ok(g) = Grammar::compile(&schema) else {
        return;
    };
    let g = Arc::new(g);
    let mut m = Matcher::new(g.clone());
    let mut accepted = true;
    for &b in doc {
        if !m.feed(b) {
            accepted = false;
            break;
        }
    }
    if accepted && m.complete() {
        let text = std::str::from_utf8(doc).expect("the matcher accepts UTF-8 only");
        let v = g.validate(text);
        assert!(
            v.valid,
            "the matcher accepted {text:?}, the validator refuses it: {:?}",
            v.errors
        );
    }
    // a constrained generation over a byte vocabulary (ids 0..=255, 256 ends)
    let min = g.min_bytes();
    if min > 4096 {
        return;
    }
    let vocab: Vec<Option<Vec<u8>>> = (0..=255u8).map(|b| Some(vec![b])).collect();
    let vocab = Arc::new(TokenVocab::new(&vocab));
    let mut c = Constraint::new(g.clone(), vocab, vec![256]);
    let budget = 2 * min + 2;
    c.start(budget)
        .expect("the shortest document fits twice over");
    let mut out = Vec::new();
    let mut logits = vec![0f32; 257];
    while !c.finished() && out.len() <= budget {
        logits.iter_mut().for_each(|l| *l = 0.0);
        if !c.mask(&mut logits) {
            break;
        }
        // the lowest allowed byte other than whitespace, else the end
        let pick = (0..256)
            .filter(|i| !b" \t\r\n".contains(&(*i as u8)))
            .chain([256, 32, 9, 10, 13])
            .find(|i| logits[*i].is_finite())
            .expect("mask left something allowed") as u32;
        c.advance(pick);
        if pick < 256 {
            out.push(pick as u8);
        }
    }
    assert!(!c.stuck(), "the generation got stuck after {out:?}");
    let text = String::from_utf8(out).expect("a generation under the schema is UTF-8");
    let v = g.validate(&text);
    assert!(
        v.valid,
        "the constrained generation {text:?} is not valid: {:?}",
        v.errors
    );
}
