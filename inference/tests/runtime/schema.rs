//! schema-bounds: constrained decoding on the tiny model always yields documents the
//! `jsonschema` crate accepts; unconstrained it mostly does not; unsupported schemas are
//! refused up front. Numeric bounds are in `bounds.rs`.

use super::*;
use fleetmesh_inference::batch::{Job, wait};
use fleetmesh_inference::schema::{
    Constraint, Grammar, Matcher, TokenMask, TokenVocab, Whitespace,
};
use fleetmesh_inference::{Batcher, Error, Sampling, TextTokenizer};
use serde_json::{Value, json};
use std::sync::Arc;

/// Twenty schemas, simplest first.
fn schemas() -> Vec<Value> {
    let point = json!({
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x", "y"],
        "additionalProperties": false
    });
    vec![
        json!({"type": "boolean"}),
        json!({"type": "null"}),
        json!({"type": "integer"}),
        json!({"type": "number"}),
        json!({"type": "string", "maxLength": 12}),
        json!({"enum": ["red", "green", "blue", 7, null]}),
        json!({"const": {"v": [1, "two"]}}),
        json!({"type": "string", "minLength": 3, "maxLength": 5}),
        json!({"type": ["string", "null"], "maxLength": 6}),
        json!({"type": "array", "items": {"type": "integer"}, "maxItems": 4}),
        json!({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3}),
        json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"],
            "additionalProperties": false
        }),
        json!({
            "title": "person",
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 10, "description": "given name"},
                "age": {"type": "integer"}
            },
            "required": ["name", "age"],
            "additionalProperties": false
        }),
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 4}, "c": {"type": "null"}},
            "required": ["c"],
            "additionalProperties": false
        }),
        json!({
            "type": "object",
            "properties": {
                "user": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3}
                    },
                    "required": ["id", "tags"],
                    "additionalProperties": false
                }
            },
            "required": ["user"],
            "additionalProperties": false
        }),
        json!({"type": "array", "items": point, "minItems": 1, "maxItems": 3}),
        json!({
            "$defs": {"point": point},
            "type": "object",
            "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
            "required": ["from", "to"],
            "additionalProperties": false
        }),
        json!({
            "$defs": {"node": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}
                },
                "required": ["value"],
                "additionalProperties": false
            }},
            "$ref": "#/$defs/node"
        }),
        // open object: other keys with any values beside the declared one
        json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}),
        json!({
            "type": "object",
            "properties": {
                "a\"b": {"enum": ["x", "y"]},
                "größe": {"type": "array", "items": {"type": ["integer", "boolean"]}, "minItems": 1},
                "note": {"type": "string", "minLength": 1, "maxLength": 8}
            },
            "required": ["a\"b", "größe", "extra"],
            "additionalProperties": {"type": "integer"}
        }),
    ]
}

pub(super) fn tiny() -> (tempfile::TempDir, Arc<Llama>, TextTokenizer) {
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let model = Arc::new(Llama::load_dir(dir.path()).unwrap());
    let tok = TextTokenizer::load(&dir.path().join("tokenizer.json")).unwrap();
    (dir, model, tok)
}

/// The `jsonschema` crate's validator of `schema` with `format` asserted (the verdict the
/// node gives).
pub(super) fn checker(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap()
}

/// One constrained answer of the tiny model: its schema, budget, text and steps taken.
pub(super) struct Answer {
    pub schema: Value,
    pub max_tokens: usize,
    pub text: String,
    pub steps: usize,
}

/// The tiny model's answers to `prompt` under each of `schemas`, with each of
/// [`samplings`] and each budget `budgets(shortest document)`.
pub(super) fn answers(
    schemas: &[Value],
    prompt: &[u8],
    budgets: fn(usize) -> [usize; 2],
) -> Vec<Answer> {
    let (_dir, model, tok) = tiny();
    let vocab = Arc::new(TokenVocab::new(&tok.token_bytes()));
    let batcher = Batcher::new(model, [7; 32], 8);
    let mut out = Vec::new();
    for schema in schemas {
        let grammar = Arc::new(Grammar::compile(schema).unwrap());
        let mut tickets = Vec::new();
        for sampling in samplings() {
            for max_tokens in budgets(grammar.min_bytes()) {
                let job = Job {
                    prompt: prompt.iter().map(|b| u32::from(*b)).collect(),
                    max_tokens,
                    sampling: sampling.clone(),
                    top_logprobs: 0,
                    on_step: None,
                    constraint: Some(Constraint::new(grammar.clone(), vocab.clone(), Vec::new())),
                };
                tickets.push((max_tokens, batcher.submit(job).unwrap()));
            }
        }
        for (max_tokens, ticket) in tickets {
            let t = wait(&ticket).unwrap();
            out.push(Answer {
                schema: schema.clone(),
                max_tokens,
                text: tok.decode(&t.output_ids()).unwrap(),
                steps: t.steps.len(),
            });
        }
    }
    out
}

/// Asserts that every one of [`answers`] is JSON that `valid(schema, value)` takes, within
/// its budget.
pub(super) fn answers_are_valid(
    schemas: &[Value],
    prompt: &[u8],
    budgets: fn(usize) -> [usize; 2],
    valid: impl Fn(&Value, &Value) -> bool,
) {
    let got = answers(schemas, prompt, budgets);
    assert_eq!(got.len(), schemas.len() * samplings().len() * 2);
    for a in got {
        let v: Value = serde_json::from_str(&a.text)
            .unwrap_or_else(|e| panic!("{}: {:?} is not JSON: {e}", a.schema, a.text));
        assert!(valid(&a.schema, &v), "{}: {}", a.schema, a.text);
        assert!(a.steps <= a.max_tokens);
    }
}

pub(super) fn samplings() -> Vec<Sampling> {
    let mut s = vec![Sampling::default()];
    for seed in 1..=3 {
        s.push(Sampling {
            temperature: 1.0,
            seed,
            ..Sampling::default()
        });
    }
    s
}

#[test]
fn twenty_schemas_always_yield_valid_documents_under_constraint_and_mostly_not_without() {
    let (_dir, model, tok) = tiny();
    let vocab = Arc::new(TokenVocab::new(&tok.token_bytes()));
    assert_eq!(vocab.len(), 256);
    let batcher = Batcher::new(model, [7; 32], 8);
    let prompts: [&[u8]; 2] = [b"{\"answer\": ", b"JSON please: "];
    let (mut runs, mut free_valid) = (0, 0);
    for (i, schema) in schemas().iter().enumerate() {
        let grammar = Arc::new(Grammar::compile(schema).unwrap());
        let shortest = grammar.min_bytes();
        let mut jobs = Vec::new();
        for prompt in prompts {
            let prompt: Vec<u32> = prompt.iter().map(|b| u32::from(*b)).collect();
            for sampling in samplings() {
                // a roomy budget, and the tightest one the schema allows
                for max_tokens in [64, shortest] {
                    for constrained in [true, false] {
                        let job = Job {
                            prompt: prompt.clone(),
                            max_tokens,
                            sampling: sampling.clone(),
                            top_logprobs: 0,
                            on_step: None,
                            constraint: constrained.then(|| {
                                Constraint::new(grammar.clone(), vocab.clone(), Vec::new())
                            }),
                        };
                        jobs.push((constrained, max_tokens, batcher.submit(job).unwrap()));
                    }
                }
            }
        }
        for (constrained, max_tokens, ticket) in jobs {
            let t = wait(&ticket).unwrap();
            let text = tok.decode(&t.output_ids()).unwrap();
            let verdict = grammar.validate(&text);
            // the independent check, straight from the jsonschema crate
            let parsed: Option<Value> = serde_json::from_str(&text).ok();
            let independent = parsed.is_some_and(|v| jsonschema::is_valid(schema, &v));
            assert_eq!(verdict.valid, independent, "schema {i}: {text:?}");
            if constrained {
                assert!(
                    verdict.valid,
                    "schema {i}, max_tokens {max_tokens}: {text:?} is invalid: {:?}",
                    verdict.errors
                );
                assert!(t.steps.len() <= max_tokens);
                runs += 1;
            } else if verdict.valid {
                free_valid += 1;
            }
        }
    }
    eprintln!(
        "schema-bounds: {runs} of {runs} constrained generations valid; {free_valid} of {runs} \
         unconstrained ones"
    );
    assert_eq!(runs, 20 * 2 * 4 * 2);
    // random weights write garbage: without the constraint almost nothing is valid
    assert!(
        free_valid * 10 < runs,
        "{free_valid} of {runs} valid unconstrained"
    );
}

#[test]
fn the_matcher_takes_valid_documents_in_its_subset_and_refuses_invalid_ones() {
    let s = schemas();
    let accepts = |i: usize, doc: &str| {
        let g = Grammar::compile(&s[i])
            .unwrap()
            .with_whitespace(Whitespace::Any);
        let mut m = Matcher::new(Arc::new(g));
        m.feed_all(doc.as_bytes()) && m.complete()
    };
    // whitespace (any, as asked for), escapes, multi-byte characters, exponents
    assert!(accepts(
        12,
        "{ \"name\" : \"Zo\\u00e9\\n\",\n  \"age\": -0 }"
    ));
    assert!(accepts(12, "{\"age\":3,\"name\":\"x\"}"));
    assert!(accepts(3, "-12.5e+07"));
    assert!(accepts(15, "[{\"x\":1,\"y\":2.5},{\"x\":-3,\"y\":0}]"));
    assert!(accepts(
        17,
        "{\"value\":1,\"children\":[{\"value\":2},{\"value\":3,\"children\":[]}]}"
    ));
    assert!(accepts(
        18,
        "{\"id\":\"a\",\"more\":{\"deep\":[null,true,1.5,\"s\"]}}"
    ));
    assert!(accepts(
        19,
        "{\"a\\\"b\":\"y\",\"größe\":[1,true],\"extra\":5}"
    ));
    assert!(accepts(5, "7"));
    assert!(accepts(5, "null"));
    assert!(accepts(8, "null"));
    // and refuses what the schema forbids
    for (i, doc) in [
        (0, "1"),
        (2, "1.5"),
        (4, "\"thirteen chars\""),
        (5, "\"pink\""),
        (7, "\"ab\""),
        (7, "\"abcdef\""),
        (9, "[1,2,3,4,5]"),
        (10, "[true]"),
        (11, "{}"),
        (11, "{\"ok\":true,\"no\":1}"),
        (13, "{\"a\":1}"),
        (16, "{\"from\":{\"x\":1}}"),
        (18, "{\"id\":1}"),
        (18, "{\"id\":\"a\",\"id\":\"b\"}"),
        (19, "{\"a\\\"b\":\"y\",\"größe\":[1],\"extra\":\"five\"}"),
        (3, "01"),
        (4, "\"\\x\""),
        (4, "\"\u{1}\""),
    ] {
        assert!(!accepts(i, doc), "schema {i} accepted {doc:?}");
        let parsed: Option<Value> = serde_json::from_str(doc).ok();
        // every refusal is invalid JSON or invalid under the schema, except a duplicate key
        // (serde_json keeps the last): valid, but outside the subset the matcher generates
        if doc != "{\"id\":\"a\",\"id\":\"b\"}" {
            assert!(
                !parsed.is_some_and(|v| jsonschema::is_valid(&s[i], &v)),
                "{doc}"
            );
        }
    }
    // invalid UTF-8 inside a string
    let mut m = Matcher::new(Arc::new(Grammar::compile(&s[4]).unwrap()));
    assert!(!m.feed_all(&[b'"', 0xC3, b'(']));
}

/// The document written by always taking a byte after which the promised remainder
/// (`remaining()`) shrinks by exactly one; `what` names the schema in a failure.
pub(super) fn shortest_walk(g: &Arc<Grammar>, what: &str) -> Vec<u8> {
    let mut m = Matcher::new(g.clone());
    let mut doc = Vec::new();
    while !m.complete() {
        let need = m.remaining();
        let b = (0u8..=255)
            .find(|b| {
                let mut n = m.clone();
                n.feed(*b) && n.remaining() + 1 == need
            })
            .unwrap_or_else(|| panic!("{what}: no byte shortens {doc:?}"));
        m.feed(b);
        doc.push(b);
    }
    doc
}

#[test]
fn whitespace_is_one_space_by_default_any_when_asked_and_none_as_vllm_disables_it() {
    let schema = json!({"type": "object", "properties": {"a": {"type": "array"}}});
    let takes = |ws: Option<Whitespace>, doc: &str| {
        let g = Grammar::compile(&schema).unwrap();
        let g = match ws {
            Some(ws) => g.with_whitespace(ws),
            None => g,
        };
        let mut m = Matcher::new(Arc::new(g));
        m.feed_all(doc.as_bytes()) && m.complete()
    };
    let spaced = "{ \"a\": [ 1, 2 ] }";
    let pretty = "{\n  \"a\": [1,\t2]\r\n}";
    let doubled = "{\"a\":  []}";
    let tight = "{\"a\":[1,2]}";
    for (ws, want) in [
        (None, [true, false, false, true]),
        (Some(Whitespace::Compact), [true, false, false, true]),
        (Some(Whitespace::Any), [true, true, true, true]),
        (Some(Whitespace::None), [false, false, false, true]),
    ] {
        let got = [spaced, pretty, doubled, tight].map(|d| takes(ws, d));
        assert_eq!(got, want, "{ws:?}");
    }
}

#[test]
fn the_shortest_completion_is_exact_so_the_tightest_budget_closes() {
    // remaining() must never promise fewer bytes than a finish takes, and must not ask for
    // more than the shortest one: walk the shortest path byte by byte
    let s = schemas();
    for (i, schema) in s.iter().enumerate() {
        let g = Arc::new(Grammar::compile(schema).unwrap());
        let doc = shortest_walk(&g, &format!("schema {i}"));
        assert_eq!(doc.len(), g.min_bytes(), "schema {i}");
        let text = String::from_utf8(doc).unwrap();
        assert!(g.validate(&text).valid, "schema {i}: {text}");
    }
}

#[test]
fn unsupported_and_unsatisfiable_schemas_are_refused_up_front() {
    for (schema, says) in [
        (json!({"type": "string", "pattern": "(?=a)"}), "`pattern`"),
        (
            json!({"type": "string", "format": "hostname"}),
            "unsupported `format`",
        ),
        (
            json!({"oneOf": [{"type": "object"}, {"type": "object", "required": ["a"]}]}),
            "#/oneOf/0 and #/oneOf/1 may both match one document",
        ),
        (
            json!({"type": "array", "uniqueItems": true}),
            "`uniqueItems` is supported over items that are an `enum` or `const`",
        ),
        (
            json!({"properties": {"a": {"type": "string", "not": {}}}}),
            "#/properties/a: unsupported keyword `not`",
        ),
        (json!({"items": [{"type": "string"}]}), "use `prefixItems`"),
        (
            json!({"type": "string", "description": 5}),
            "not a valid JSON Schema",
        ),
        (
            json!({"$ref": "https://example.com/s.json"}),
            "must point inside this document",
        ),
        (
            json!({"$ref": "#/$defs/missing"}),
            "nothing at this location",
        ),
        (
            json!({"$ref": "#/$defs/x", "type": "string", "$defs": {"x": {}}}),
            "`$ref` beside",
        ),
        (json!({"type": "strin"}), "unknown type \"strin\""),
        (
            json!({"type": "object", "required": ["a"], "additionalProperties": false}),
            "no finite document",
        ),
        (
            json!({"type": "string", "minLength": 5, "maxLength": 2}),
            "no finite document",
        ),
        (
            json!({"$defs": {"n": {"type": "object", "properties": {"c": {"$ref": "#/$defs/n"}}, "required": ["c"]}}, "$ref": "#/$defs/n"}),
            "no finite document",
        ),
        (
            json!({"enum": ["a"], "type": "integer"}),
            "no finite document",
        ),
        (json!(false), "the schema `false`"),
    ] {
        let e = Grammar::compile(&schema).unwrap_err();
        assert!(matches!(e, Error::Schema { .. }), "{schema}: {e}");
        assert!(e.to_string().contains(says), "{schema}: {e}");
    }
}

#[test]
fn extreme_values_of_every_numeric_keyword_compile_or_are_refused_never_panic() {
    let extremes = [
        0u64,
        1,
        2,
        u64::from(u32::MAX),
        1 << 53,
        (usize::MAX / 4) as u64,
        u64::MAX - 2,
        u64::MAX - 1,
        u64::MAX,
    ];
    let vocab = TokenVocab::new(&bpe_like_vocab());
    for key in ["minLength", "maxLength", "minItems", "maxItems"] {
        for &v in &extremes {
            for (ty, doc) in [
                (json!("string"), "\"ab\""),
                (json!("array"), "[1,2]"),
                (json!(["string", "array"]), "[]"),
            ] {
                let mut schema = json!({"type": ty, "items": {"type": "integer"}});
                schema[key] = json!(v);
                let nested = json!({"type": "object", "properties": {"a": schema.clone(),
                    "b": {"type": "array", "items": schema.clone(), "minItems": v}},
                    "required": ["a", "b"]});
                for s in [&schema, &nested] {
                    let Ok(g) = Grammar::compile(s) else {
                        continue; // refused with a reason: fine, it did not panic
                    };
                    let g = Arc::new(g);
                    // every check on it is total: validation, a matcher, a mask
                    let valid = g.validate(doc).valid;
                    let mut m = Matcher::new(g.clone());
                    let fed = m.feed_all(doc.as_bytes()) && m.complete();
                    if s == &schema {
                        assert_eq!(valid, fed, "{s}: {doc}");
                    }
                    let mut allowed = TokenMask::new(vocab.len());
                    vocab.allowed(
                        &Matcher::new(g.clone()),
                        g.min_bytes().saturating_add(8),
                        &mut allowed,
                    );
                    let _ = Matcher::new(g).remaining();
                }
            }
        }
    }
    // a minimum no document can meet is refused up front
    let e = Grammar::compile(&json!({"type": "string", "minLength": u64::MAX})).unwrap_err();
    assert!(e.to_string().contains("no finite document"), "{e}");
}

#[test]
fn a_budget_below_the_shortest_document_is_refused_before_generating() {
    let (_dir, model, tok) = tiny();
    let vocab = Arc::new(TokenVocab::new(&tok.token_bytes()));
    let g = Arc::new(Grammar::compile(&schemas()[12]).unwrap());
    let batcher = Batcher::new(model, [7; 32], 1);
    let job = |max_tokens| Job {
        prompt: vec![104, 105],
        max_tokens,
        sampling: Sampling::default(),
        top_logprobs: 0,
        on_step: None,
        constraint: Some(Constraint::new(g.clone(), vocab.clone(), Vec::new())),
    };
    let short = g.min_bytes() - 1;
    let e = batcher.submit(job(short)).unwrap_err().to_string();
    assert!(e.contains(&format!("max_tokens {short} is too few")), "{e}");
    let t = batcher.run(job(short + 1)).unwrap();
    assert!(g.validate(&tok.decode(&t.output_ids()).unwrap()).valid);
}

/// A BPE-like vocabulary: the 256 bytes, JSON-shaped pieces (quotes, escapes, keys,
/// literals, multi-byte and partial UTF-8), and seeded printable pieces.
fn bpe_like_vocab() -> Vec<Option<Vec<u8>>> {
    let mut v: Vec<Option<Vec<u8>>> = (0u8..=255).map(|b| Some(vec![b])).collect();
    for piece in [
        "{\"", "\":", "\",\"", "\"}", "\\\"", "\\n", "\\u00", "é", "größe", "true", "false",
        "null", "null,", " \"name", "name", "\":\"", "[{\"", "}]", "],", "12", "-0.5", "e+1", "  ",
        "\n  ", "admin", "\"ops\"", "a\\\"b", "{}", "[]", "\"\"", "0,", "1}",
        // keys: text that closes one (declared or not), with what follows
        "name\":", "b\":1", "b\":2", "e\"", "x\"", "ab\"", "\"x\":\"",
    ] {
        v.push(Some(piece.as_bytes().to_vec()));
    }
    v.push(Some(vec![0xC3])); // the first half of a two-byte character
    v.push(Some(vec![0xA9, b'"'])); // its second half, then a quote
    v.push(None); // a special token
    v.push(Some(vec![b'a'; 300])); // plain text too long for the table: walked
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..500 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let len = 2 + (state % 6) as usize;
        // a hundred open a string (enough for the index of what follows a `"`), some
        // with escapes
        let start: &[u8] = match i % 5 {
            _ if i >= 100 => b"",
            0 => b"\"",
            1 => b"\"\\n",
            2 => b"\"\\u00e9",
            _ => b"\"",
        };
        v.push(Some(
            start
                .iter()
                .copied()
                .chain((0..len).map(|i| b' ' + ((state >> (8 * i)) % 95) as u8))
                .collect(),
        ));
    }
    v
}

#[test]
fn masks_over_a_multi_byte_vocabulary_equal_token_by_token_checks_and_always_close() {
    masks_equal_token_by_token_checks(&schemas());
}

#[test]
fn masks_inside_keys_of_objects_that_take_other_properties_equal_token_by_token_checks() {
    // where any bare text goes on a key, those tokens are allowed at once
    masks_equal_token_by_token_checks(&[
        json!({"type": "object"}),
        json!({}),
        json!({"type": "object", "properties": {"name": {"type": "string"}},
            "required": ["name"]}),
        json!({"type": "object", "properties": {"ab": {"const": 1}},
            "additionalProperties": {"type": "integer"}, "required": ["ab", "x"]}),
        json!({"type": "object", "additionalProperties": {"type": "string", "maxLength": 2},
            "required": ["x", "y"], "properties": {"é": {"type": "null"}}}),
    ]);
}

/// The mask `vocab` gives at `m` with `left` tokens to go, checked against its definition
/// token by token (a clone of `m` takes the token and can still finish after it); with
/// how many ids it holds.
fn mask_is_the_definition(
    tokens: &[Option<Vec<u8>>],
    vocab: &TokenVocab,
    m: &Matcher,
    left: usize,
    what: &dyn Fn() -> String,
) -> (TokenMask, usize) {
    let mut allowed = TokenMask::new(tokens.len());
    let n = vocab.allowed(m, left - 1, &mut allowed);
    for (id, bytes) in tokens.iter().enumerate() {
        let want = bytes.as_ref().is_some_and(|b| {
            let mut t = m.clone();
            !b.is_empty() && t.feed_all(b) && t.remaining() < left
        });
        assert_eq!(
            allowed.contains(id as u32),
            want,
            "{}: token {id} {:?}",
            what(),
            bytes.as_ref().map(|b| String::from_utf8_lossy(b))
        );
    }
    (allowed, n)
}

#[test]
fn masks_inside_keys_that_spell_one_the_object_has_equal_token_by_token_checks() {
    let tokens = bpe_like_vocab();
    let vocab = TokenVocab::new(&tokens);
    let schema = json!({"type": "object", "properties": {"ab": {"const": 1},
        "name": {"type": "string"}}, "additionalProperties": {"type": "integer"}});
    // a declared key with an escape: a backslash goes on a key only there
    let escaped = json!({"type": "object", "properties": {"a\"b": {"type": "integer"}},
        "additionalProperties": {"type": "null"}});
    // in a key: new, spelling a declared one, after it is written, spelling another key
    for (schema, prefix) in [
        (&schema, "{\""),
        (&schema, "{\"a"),
        (&schema, "{\"nam"),
        (&schema, "{\"ab\":1,\"a"),
        (&schema, "{\"b\":3,\""),
        (&schema, "{\"ax\":3,\"a"),
        (&escaped, "{\""),
        (&escaped, "{\"a"),
    ] {
        let mut m = Matcher::new(Arc::new(Grammar::compile(schema).unwrap()));
        assert!(m.feed_all(prefix.as_bytes()), "{prefix}");
        for left in (1..=12).chain([40]) {
            mask_is_the_definition(&tokens, &vocab, &m, left, &|| format!("{prefix:?} {left}"));
        }
    }
}

/// Under each schema, at three budgets, a random generation over a BPE-like vocabulary
/// whose every mask equals the definition (the tokens a clone of the matcher takes and
/// can still finish after), ending valid.
pub(super) fn masks_equal_token_by_token_checks(schemas: &[Value]) {
    let tokens = bpe_like_vocab();
    let vocab = TokenVocab::new(&tokens);
    let mut rng_state = 7u64;
    let mut rng = move || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state
    };
    for (i, schema) in schemas.iter().enumerate() {
        let g = Arc::new(Grammar::compile(schema).unwrap());
        for budget in [g.min_bytes(), g.min_bytes() + 3, g.min_bytes().max(30) + 10] {
            let mut m = Matcher::new(g.clone());
            let mut doc = Vec::new();
            let mut left = budget;
            while !m.finished() {
                if left == 0 {
                    assert!(m.complete(), "schema {i}: out of budget after {doc:?}");
                    break;
                }
                let (allowed, n) = mask_is_the_definition(&tokens, &vocab, &m, left, &|| {
                    format!("schema {i}, after {doc:?}")
                });
                if n == 0 {
                    // only a top-level number or literal that could go on may end here
                    assert!(m.complete(), "schema {i}: stuck after {doc:?}");
                    break;
                }
                let pick: Vec<usize> = (0..tokens.len())
                    .filter(|id| allowed.contains(*id as u32))
                    .collect();
                assert_eq!(pick.len(), n);
                let id = pick[(rng() % pick.len() as u64) as usize];
                let bytes = tokens[id].as_ref().unwrap();
                assert!(m.feed_all(bytes));
                doc.extend_from_slice(bytes);
                left -= 1;
            }
            let text = String::from_utf8(doc).unwrap();
            assert!(
                g.validate(&text).valid,
                "schema {i}, budget {budget}: {text:?}"
            );
        }
    }
}

#[test]
fn a_vocabulary_without_a_needed_byte_is_refused_up_front_and_never_writes_wrong() {
    // every byte but `}`: an object can be opened, never closed
    let tokens: Vec<Option<Vec<u8>>> = (0u8..=255).map(|b| (b != b'}').then(|| vec![b])).collect();
    let vocab = Arc::new(TokenVocab::new(&tokens));
    let g = Arc::new(
        Grammar::compile(&json!({"type": "object", "additionalProperties": false})).unwrap(),
    );
    // checked before generating: refused, naming the character no token writes
    let e = vocab.writes(&g).unwrap_err().to_string();
    assert!(e.contains("no token writes `}` after \"{\""), "{e}");
    let nested = Arc::new(
        Grammar::compile(
            &json!({"type": "object", "properties": {"a": {"const": [1]}},
            "required": ["a"]}),
        )
        .unwrap(),
    );
    let e = vocab.writes(&nested).unwrap_err().to_string();
    assert!(e.contains("after \"{\\\"a\\\":[1]\""), "{e}");
    // a longer document where the shortest needs a missing byte: no digit has a token,
    // yet `null` (or "x") is written; a bare integer is refused naming the digit
    let digitless: Vec<Option<Vec<u8>>> = (0u8..=255)
        .map(|b| (!b.is_ascii_digit()).then(|| vec![b]))
        .collect();
    let digitless = TokenVocab::new(&digitless);
    for schema in [
        json!({"type": ["integer", "null"]}),
        json!({"anyOf": [{"type": "integer"}, {"enum": ["x"]}]}),
        json!({"type": "object", "properties": {"n": {"type": ["integer", "null"]}},
               "required": ["n"], "additionalProperties": false}),
    ] {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        assert!(digitless.writes(&g).is_ok(), "{schema}");
    }
    let integer = Arc::new(Grammar::compile(&json!({"type": "integer"})).unwrap());
    let e = digitless.writes(&integer).unwrap_err().to_string();
    assert!(e.contains("no token writes `0` after \"\""), "{e}");
    // a vocabulary with every byte writes anything, one of merged tokens too
    let all: Vec<Option<Vec<u8>>> = (0u8..=255).map(|b| Some(vec![b])).collect();
    assert!(TokenVocab::new(&all).writes(&g).is_ok());
    // without DEL (no document needs it) the shortest documents are followed token by
    // token, and every schema is written
    let mut no_del = bpe_like_vocab();
    no_del[0x7f] = None;
    let no_del = TokenVocab::new(&no_del);
    for schema in schemas() {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        assert!(no_del.writes(&g).is_ok(), "{schema}");
    }
    let mut c = Constraint::new(g, vocab, Vec::new());
    c.start(2).unwrap();
    let mut logits = vec![0f32; 256];
    assert!(c.mask(&mut logits));
    // only `{` is allowed (with one token left, `}` would have to follow)
    let allowed: Vec<usize> = (0..256)
        .filter(|i| logits[*i] > f32::NEG_INFINITY)
        .collect();
    assert_eq!(allowed, [usize::from(b'{')]);
    c.advance(u32::from(b'{'));
    let mut logits = vec![0f32; 256];
    assert!(!c.mask(&mut logits), "no token can follow");
    assert!(c.finished() && c.stuck());
    // and a budget that cannot hold the shortest document is refused up front
    let g = Arc::new(Grammar::compile(&json!({"type": "string", "minLength": 4})).unwrap());
    let mut c = Constraint::new(g, Arc::new(TokenVocab::new(&tokens)), Vec::new());
    let e = c.start(5).unwrap_err().to_string();
    assert!(e.contains("shortest document takes 6 tokens"), "{e}");
}
