//! `anyOf`/`oneOf` under constrained decoding: unions whose branches start differently (as
//! Pydantic writes `Optional[...]` and `Union[int, str]`) take exactly the documents the
//! `jsonschema` crate takes; random walks and the tiny model's answers are always valid;
//! unions whose branches can start alike are refused up front, naming both. `allOf` where
//! it reduces to one schema is held to the same checks, and refused naming why where not.

use super::schema::{answers_are_valid, checker, shortest_walk};
use super::strings::random_walk;
use fleetmesh_inference::schema::{Grammar, Matcher};
use rand::SeedableRng;
use serde_json::{Value, json};
use std::sync::Arc;

/// Union schemas, with documents to try (valid and not).
fn cases() -> Vec<(Value, Vec<&'static str>)> {
    // a Pydantic model with Optional fields, as `model_json_schema()` writes it
    let pydantic = json!({
        "$defs": {"Address": {"type": "object", "title": "Address",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"], "additionalProperties": false}},
        "type": "object", "title": "User",
        "properties": {
            "age": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 150},
                {"type": "null"}], "default": null, "title": "Age"},
            "address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
            "id": {"oneOf": [{"type": "integer"}, {"type": "string", "format": "uuid"}]}},
        "required": ["age", "address", "id"], "additionalProperties": false});
    vec![
        (
            json!({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]}),
            vec!["5", "null", "-1", "\"5\"", "true"],
        ),
        (
            json!({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "number"}]}),
            vec!["\"abc\"", "2.5", "\"abcd\"", "[]"],
        ),
        (
            json!({"anyOf": [{"type": "array", "items": {"type": "boolean"}},
                {"type": "object", "additionalProperties": {"type": "integer"}}]}),
            vec!["[true,false]", "{\"a\":1}", "[1]", "{\"a\":true}"],
        ),
        (
            json!({"anyOf": [{"enum": ["red", "green"]}, {"const": 7}, {"type": "boolean"}]}),
            vec!["\"red\"", "7", "false", "\"blue\"", "8"],
        ),
        (
            pydantic,
            vec![
                "{\"age\":30,\"address\":{\"city\":\"Oslo\"},\"id\":7}",
                "{\"age\":null,\"address\":null,\"id\":\"123e4567-e89b-12d3-a456-426614174000\"}",
                "{\"age\":200,\"address\":null,\"id\":1}",
                "{\"age\":1,\"address\":{},\"id\":1}",
                "{\"age\":1,\"address\":null,\"id\":\"x\"}",
            ],
        ),
        (
            json!({"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "minItems": 2, "maxItems": 4}),
            vec!["[1,null]", "[null,null,3]", "[1]", "[1,\"a\"]"],
        ),
    ]
}

/// Each schema takes exactly the documents the `jsonschema` crate takes; random walks of
/// its grammar are valid; with `shortest`, the shortest document is found byte by byte.
pub(super) fn take_what_jsonschema_takes(
    cases: Vec<(Value, Vec<&str>)>,
    seed: u64,
    walks: usize,
    shortest: bool,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    for (schema, docs) in cases {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        let check = checker(&schema);
        for doc in docs {
            let mut m = Matcher::new(g.clone());
            let took = m.feed_all(doc.as_bytes()) && m.complete();
            let valid = check.is_valid(&serde_json::from_str(doc).unwrap());
            assert_eq!(took, valid, "{schema}: {doc}");
        }
        for _ in 0..walks {
            let budget = g.min_bytes() + 60;
            let text = String::from_utf8(random_walk(&g, &mut rng, budget)).unwrap();
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{schema}: {text:?} is not JSON: {e}"));
            assert!(check.is_valid(&v), "{schema}: generated {text}");
        }
        if shortest {
            let doc = shortest_walk(&g, &schema.to_string());
            assert_eq!(doc.len(), g.min_bytes(), "{schema}");
            assert!(check.is_valid(&serde_json::from_slice(&doc).unwrap()));
        }
    }
}

#[test]
fn unions_take_exactly_the_documents_the_jsonschema_crate_takes() {
    take_what_jsonschema_takes(cases(), 11, 300, true);
}

#[test]
fn unions_whose_branches_can_start_alike_are_refused_naming_both() {
    for (schema, says) in [
        (
            json!({"anyOf": [{"type": "integer"}, {"type": "number"}]}),
            "#/anyOf/0 and #/anyOf/1 can both start with `-`",
        ),
        (
            json!({"properties": {"p": {"oneOf": [{"type": "object"}, {"required": ["a"]}]}}}),
            "#/properties/p/oneOf/0 and #/properties/p/oneOf/1 can both start with `{`",
        ),
        (
            json!({"anyOf": [{}, {"type": "null"}]}),
            "can both start with `n`",
        ),
        (
            json!({"type": "object", "anyOf": [{"type": "object"}]}),
            "`anyOf` beside [\"type\"] is not supported",
        ),
        (json!({"oneOf": []}), "`oneOf` must be a non-empty array"),
    ] {
        let e = Grammar::compile(&schema).unwrap_err();
        assert!(e.to_string().contains(says), "{schema}: {e}");
    }
}

#[test]
fn the_tiny_models_answers_under_unions_are_always_valid() {
    let schemas: Vec<Value> = cases().into_iter().map(|(s, _)| s).collect();
    answers_are_valid(
        &schemas,
        b"user: ",
        |shortest| [shortest + 30, shortest],
        |s, v| checker(s).is_valid(v),
    );
}

/// `allOf` schemas that reduce, with documents to try (valid and not).
fn all_of_cases() -> Vec<(Value, Vec<&'static str>)> {
    // Pydantic's inheritance shape: a base model by reference, the subclass's fields beside
    let inherited = json!({
        "$defs": {"Base": {"type": "object", "properties": {"id": {"type": "integer",
            "minimum": 1}}, "required": ["id"]}},
        "allOf": [{"$ref": "#/$defs/Base"}, {"properties": {"name": {"type": "string",
            "maxLength": 5}}, "required": ["name"]}],
        "title": "Sub"});
    vec![
        (
            json!({"allOf": [{"type": "integer"}, {"minimum": 3}, {"maximum": 9}]}),
            vec!["3", "9", "2", "10", "3.5", "\"3\""],
        ),
        (
            inherited,
            vec![
                "{\"id\":1,\"name\":\"ab\"}",
                "{\"id\":1}",
                "{\"name\":\"a\"}",
                "{\"id\":0,\"name\":\"a\"}",
                "{\"id\":2,\"name\":\"abcdef\"}",
            ],
        ),
        (
            json!({"type": "object", "properties": {"n": {"allOf": [{"type": "number"},
                {"type": "integer", "minimum": 0}, {"maximum": 50}]}}, "required": ["n"],
                "additionalProperties": false}),
            vec![
                "{\"n\":0}",
                "{\"n\":50}",
                "{\"n\":-1}",
                "{\"n\":1.5}",
                "{\"n\":51}",
            ],
        ),
        (
            json!({"type": "string", "allOf": [{"minLength": 2}, {"maxLength": 4},
                {"minLength": 3}]}),
            vec!["\"abc\"", "\"abcd\"", "\"ab\"", "\"abcde\""],
        ),
    ]
}

#[test]
fn all_of_that_reduces_takes_exactly_the_documents_the_jsonschema_crate_takes() {
    take_what_jsonschema_takes(all_of_cases(), 5, 200, true);
}

#[test]
fn all_of_that_does_not_reduce_is_refused_naming_the_keyword() {
    for (schema, says) in [
        (
            json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
            "no type is allowed by every part",
        ),
        (
            json!({"allOf": [{"properties": {"a": {"type": "integer"}},
                "additionalProperties": false}, {"properties": {"b": {}}}]}),
            "`additionalProperties` in one part",
        ),
        (
            json!({"type": "string", "allOf": [{"pattern": "^a"}, {"pattern": "b$"}]}),
            "`pattern` differs between its parts",
        ),
        (
            json!({"allOf": [{"properties": {"a": {"type": "integer"}}},
                {"properties": {"a": {"type": "string"}}}]}),
            "property `a` has a different schema",
        ),
        (
            json!({"allOf": [{"items": {"type": "integer"}}, {"prefixItems": [{}]}]}),
            "`items` and `prefixItems` from different parts",
        ),
        (json!({"allOf": []}), "`allOf` must be a non-empty array"),
        (
            // each level refers twice to the next: 2^30 copies unless the work is bounded
            {
                let mut defs = serde_json::Map::new();
                for i in 0..30 {
                    let next = format!("#/$defs/d{}", i + 1);
                    defs.insert(
                        format!("d{i}"),
                        json!({"allOf": [{"$ref": next}, {"$ref": next}]}),
                    );
                }
                defs.insert("d30".into(), json!({"type": "integer"}));
                json!({"$defs": defs, "allOf": [{"$ref": "#/$defs/d0"}]})
            },
            "resolve more than 1000",
        ),
        (
            json!({"properties": {"p": {"allOf": [{"$ref": "#/$defs/none"}]}}}),
            "#/properties/p/allOf/0",
        ),
    ] {
        let e = Grammar::compile(&schema).unwrap_err();
        assert!(e.to_string().contains(says), "{schema}: {e}");
    }
}

#[test]
fn the_tiny_models_answers_under_all_of_are_always_valid() {
    let schemas: Vec<Value> = all_of_cases().into_iter().map(|(s, _)| s).collect();
    answers_are_valid(
        &schemas,
        b"record: ",
        |shortest| [shortest + 30, shortest],
        |s, v| checker(s).is_valid(v),
    );
}
