//! Strings under `pattern` and `format` in constrained decoding: every string the matcher
//! takes is one the `jsonschema` crate (with formats asserted) accepts, on hand-picked
//! strings and on thousands of random walks; the shortest completion is exact; the tiny
//! model's constrained answers are always valid; what cannot be generated is refused up
//! front, naming the keyword.

use super::schema::{answers_are_valid, checker, masks_equal_token_by_token_checks, shortest_walk};
use fleetmesh_inference::schema::{Grammar, Matcher};
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::sync::Arc;

/// String schemas with a pattern or a format, and strings of each kind (valid ones the
/// matcher must take, then others).
fn cases() -> Vec<(Value, Vec<&'static str>)> {
    let s = |extra: Value| {
        let mut o = json!({"type": "string"});
        o.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        o
    };
    vec![
        (
            s(json!({"pattern": "^[A-Z]{3}-\\d{4}$"})),
            vec!["ABC-1234", "abc-1234", "ABC-123", "ABC-12345", "AB-1234"],
        ),
        (
            s(json!({"pattern": "cat"})),
            vec!["cat", "concatenate", "a cat!", "ca", "dog"],
        ),
        (
            s(json!({"pattern": "^(red|green|blue)$"})),
            vec!["red", "green", "blue", "Red", "redgreen", ""],
        ),
        (
            s(json!({"pattern": "^\\w+@\\w+\\.com$"})),
            vec!["a_1@b.com", "x@y.com", "@b.com", "a@b.org", "a b@c.com"],
        ),
        (
            s(json!({"pattern": "^[0-9a-f]{2}(:[0-9a-f]{2}){5}$"})),
            vec!["00:1a:2b:3c:4d:5e", "00:1a:2b:3c:4d", "00-1a-2b-3c-4d-5e"],
        ),
        (s(json!({"pattern": "^é+ü?$"})), vec!["é", "ééü", "e", "ü"]),
        (
            s(json!({"format": "date"})),
            vec![
                "2024-02-28",
                "1999-12-01",
                "2024-13-01",
                "2024-02-30",
                "24-01-01",
            ],
        ),
        (
            s(json!({"format": "time"})),
            vec!["23:59:59Z", "08:30:00.125+02:00", "24:00:00Z", "12:00:00"],
        ),
        (
            s(json!({"format": "date-time"})),
            vec![
                "2024-01-15T10:20:30Z",
                "2000-06-01T00:00:00.5-05:30",
                "2024-01-15 10:20:30Z",
                "2024-01-15T10:20Z",
            ],
        ),
        (
            s(json!({"format": "uuid"})),
            vec![
                "123e4567-e89b-12d3-a456-426614174000",
                "123e4567e89b12d3a456426614174000",
                "123e4567-e89b-12d3-a456-42661417400",
            ],
        ),
        (
            s(json!({"format": "email"})),
            vec!["ada@example.org", "a.b@c.io", "no-at-sign", "@x.org"],
        ),
        (
            s(json!({"format": "ipv4"})),
            vec![
                "192.168.0.1",
                "0.0.0.0",
                "255.255.255.255",
                "256.1.1.1",
                "01.2.3.4",
            ],
        ),
        (
            s(json!({"format": "ipv6"})),
            vec![
                "2001:db8:0:0:0:0:0:1",
                "fe80:0:0:0:0:0:0:1",
                "2001:db8::1",
                "1:2:3",
            ],
        ),
        (
            s(json!({"format": "uri"})),
            vec![
                "https://example.org/a/b",
                "urn:isbn:1",
                "no scheme",
                "http://x.io",
            ],
        ),
        (
            json!({"type": "object", "properties": {
                "when": {"type": "string", "format": "date-time"},
                "id": {"type": "string", "format": "uuid"},
                "code": {"type": "string", "pattern": "^[A-Z]{2}\\d$"}},
                "required": ["when", "id", "code"], "additionalProperties": false}),
            vec![],
        ),
        (
            json!({"type": "array", "items": {"type": "string", "format": "ipv4"},
                "minItems": 1, "maxItems": 3}),
            vec![],
        ),
        (
            json!({"type": ["string", "null"], "format": "date"}),
            vec!["2020-01-01", "yesterday"],
        ),
        // a format on a number (as OpenAPI writes them) says nothing to generation
        (json!({"type": "integer", "format": "int32"}), vec![]),
    ]
}

fn takes(g: &Arc<Grammar>, doc: &str) -> bool {
    let mut m = Matcher::new(g.clone());
    m.feed_all(doc.as_bytes()) && m.complete()
}

/// A random document the matcher takes: random bytes it allows, within `budget` bytes
/// (the shortest completion always fits), ending at a random point once complete.
pub(super) fn random_walk(
    g: &Arc<Grammar>,
    rng: &mut rand::rngs::StdRng,
    budget: usize,
) -> Vec<u8> {
    let mut m = Matcher::new(g.clone());
    let mut out = Vec::new();
    let alphabet: Vec<u8> = (0x20..0x7f).chain([0xc3, 0xa9, 0xbc]).collect();
    while !m.finished() {
        if m.complete() && rng.gen_bool(0.2) {
            break;
        }
        let left = budget - out.len();
        let ok: Vec<u8> = alphabet
            .iter()
            .copied()
            .filter(|b| {
                let mut n = m.clone();
                n.feed(*b) && n.remaining() < left
            })
            .collect();
        if ok.is_empty() {
            break;
        }
        let b = ok[rng.gen_range(0..ok.len())];
        assert!(m.feed(b));
        out.push(b);
    }
    assert!(
        m.complete(),
        "a walk always ends complete: {:?}",
        String::from_utf8_lossy(&out)
    );
    out
}

#[test]
fn strings_under_patterns_and_formats_are_taken_only_when_the_jsonschema_crate_takes_them() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (schema, strings) in cases() {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        let check = checker(&schema);
        // hand-picked: whatever the matcher takes is valid; the first of each list (a
        // plain valid string of the subset) must be taken
        for (i, s) in strings.iter().enumerate() {
            let doc = serde_json::to_string(s).unwrap();
            let valid = check.is_valid(&serde_json::from_str(&doc).unwrap());
            if takes(&g, &doc) {
                assert!(valid, "{schema}: took {doc}, which is invalid");
            } else {
                assert!(i > 0 || !valid, "{schema}: refused the valid {doc}");
            }
        }
        // random walks: every document the matcher lets through is valid
        for _ in 0..300 {
            let budget = g.min_bytes() + rng.gen_range(0..40);
            let doc = random_walk(&g, &mut rng, budget);
            let text = String::from_utf8(doc).expect("UTF-8");
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{schema}: {text:?} is not JSON: {e}"));
            assert!(check.is_valid(&v), "{schema}: generated {text}");
            assert!(text.len() <= budget, "{schema}: {text} over {budget} bytes");
        }
    }
}

#[test]
fn the_shortest_string_under_a_pattern_is_found_byte_by_byte() {
    for (schema, want) in [
        (json!({"type": "string", "pattern": "^a{3}b?$"}), "\"aaa\""),
        (json!({"type": "string", "pattern": "xyz"}), "\"xyz\""),
        (json!({"type": "string", "format": "ipv4"}), "\"0.0.0.0\""),
        (
            json!({"type": "object", "properties": {"d": {"type": "string", "format": "date"}},
                "required": ["d"]}),
            "{\"d\":\"0000-01-01\"}",
        ),
    ] {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        let doc = shortest_walk(&g, &schema.to_string());
        assert_eq!(
            doc.len(),
            want.len(),
            "{schema}: {:?}",
            String::from_utf8_lossy(&doc)
        );
        assert_eq!(g.min_bytes(), want.len(), "{schema}");
        assert!(
            g.validate(std::str::from_utf8(&doc).unwrap()).valid,
            "{schema}"
        );
    }
}

#[test]
fn patterns_and_formats_that_cannot_be_generated_are_refused_naming_the_keyword() {
    for (schema, says) in [
        (json!({"type": "string", "pattern": "(?=a)b"}), "`pattern`"),
        (json!({"type": "string", "pattern": "(a)\\1"}), "`pattern`"),
        (
            json!({"type": "string", "pattern": "^\"$"}),
            "no string without quotes",
        ),
        (
            json!({"type": "string", "pattern": 5}),
            "`pattern` must be a string",
        ),
        (
            json!({"type": "string", "format": "hostname"}),
            "unsupported `format` \"hostname\"",
        ),
        (
            json!({"type": "string", "pattern": "a", "minLength": 2}),
            "put the length in the pattern",
        ),
        (
            json!({"type": "string", "pattern": "a", "format": "date"}),
            "`pattern` beside `format`",
        ),
        // hostile sizes: one automaton too large, too many patterns, too many states in all
        (
            json!({"type": "string", "pattern": "^\\p{L}{1,300}$"}),
            "cannot be compiled to an automaton within 2 MiB of NFA and 2 MiB of DFA",
        ),
        (
            many(65, |i| format!("^a{{{i}}}$")),
            "more than 64 different patterns",
        ),
        (
            many(40, |i| format!("^[a-z]{{{}}}x$", 300 + i)),
            "automaton states in all",
        ),
    ] {
        let e = Grammar::compile(&schema).unwrap_err();
        assert!(e.to_string().contains(says), "{schema}: {e}");
    }
    // the same pattern written many times is built once
    assert!(Grammar::compile(&many(100, |_| "^[a-z]{300}x$".into())).is_ok());
}

/// An object of `n` string properties, property i under pattern `pattern(i)`.
fn many(n: usize, pattern: impl Fn(usize) -> String) -> Value {
    let props: serde_json::Map<String, Value> = (0..n)
        .map(|i| {
            (
                format!("p{i}"),
                json!({"type": "string", "pattern": pattern(i)}),
            )
        })
        .collect();
    json!({"type": "object", "properties": props})
}

#[test]
fn the_tiny_models_answers_under_patterns_and_formats_are_always_valid() {
    let schemas: Vec<Value> = cases().into_iter().map(|(s, _)| s).collect();
    answers_are_valid(
        &schemas,
        b"when: ",
        |shortest| [shortest + 24, shortest],
        |s, v| checker(s).is_valid(v),
    );
}

#[test]
fn masks_inside_patterns_and_formats_equal_token_by_token_checks() {
    // each string alone and as a required member (the walk goes on past its closing
    // quote into the object)
    let schemas: Vec<Value> = cases()
        .into_iter()
        .flat_map(|(s, _)| {
            let member = json!({"type": "object", "properties": {"v": s.clone()},
                "required": ["v"], "additionalProperties": false});
            [s, member]
        })
        .collect();
    masks_equal_token_by_token_checks(&schemas);
}
