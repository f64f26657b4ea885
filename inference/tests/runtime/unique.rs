//! `uniqueItems` over `enum`/`const` items (tags, categories): arrays take exactly the
//! documents the `jsonschema` crate takes — values equal as JSON (`1` and `1.0`, objects
//! member by member) count as repeats; random walks and shortest documents account for the
//! values already written; the tiny model's answers are valid at two budgets; over other
//! items the keyword is refused up front, naming it.

use super::schema::{answers_are_valid, checker};
use super::unions::take_what_jsonschema_takes;
use fleetmesh_inference::schema::Grammar;
use serde_json::{Value, json};

fn cases() -> Vec<(Value, Vec<&'static str>)> {
    vec![
        (
            json!({"type": "array", "items": {"enum": ["red", "green", "blue"]},
                "uniqueItems": true}),
            vec![
                "[]",
                "[\"red\",\"green\"]",
                "[ \"blue\", \"red\", \"green\" ]",
                "[\"red\",\"red\"]",
                "[\"red\",\"green\",\"blue\",\"red\"]",
            ],
        ),
        (
            // equal numbers written differently, and values that are prefixes of others
            json!({"type": "array", "items": {"enum": [1, 1.0, 2, 12, 123]},
                "uniqueItems": true, "minItems": 2}),
            vec![
                "[1,1.0]",
                "[1,12]",
                "[12,1]",
                "[1,12,123]",
                "[2,1.0]",
                "[1]",
                "[12,12]",
                "[1.0,2,1]",
            ],
        ),
        (
            // more items owed than distinct values left for a cheap answer
            json!({"type": "array", "items": {"enum": ["a", "bbbbbbbb", "cc", "ddd"]},
                "uniqueItems": true, "minItems": 3, "maxItems": 3}),
            vec![
                "[\"a\",\"cc\",\"ddd\"]",
                "[\"a\",\"a\",\"cc\"]",
                "[\"bbbbbbbb\",\"a\",\"cc\"]",
            ],
        ),
        (
            json!({"type": "array", "uniqueItems": true,
                "items": {"enum": [{"a": 1}, {"a": 1.0}, [1, 2], null, true]}}),
            vec![
                "[{\"a\":1},{\"a\":1.0}]",
                "[{\"a\":1},[1,2],null,true]",
                "[null,null]",
                "[true,[1,2]]",
            ],
        ),
        (
            json!({"type": "object", "properties": {"tags": {"type": "array",
                "items": {"enum": ["x", "y", "z"]}, "uniqueItems": true, "minItems": 2,
                "maxItems": 3}}, "required": ["tags"], "additionalProperties": false}),
            vec![
                "{\"tags\":[\"x\",\"y\"]}",
                "{\"tags\":[\"z\",\"z\"]}",
                "{\"tags\":[\"x\"]}",
                "{\"tags\":[\"y\",\"z\",\"x\"]}",
            ],
        ),
        (
            // no type: other values are valid; arrays hold the constant at most once
            json!({"items": {"const": "a"}, "uniqueItems": true}),
            vec!["[\"a\"]", "[\"a\",\"a\"]", "5", "[]"],
        ),
        (
            // more values owed than there are: only null is left
            json!({"type": ["array", "null"], "items": {"enum": ["a", "b"]},
                "uniqueItems": true, "minItems": 3}),
            vec!["null", "[\"a\",\"b\"]"],
        ),
        (
            // at most one item, or uniqueItems false: nothing to hold, any items
            json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true,
                "maxItems": 1}),
            vec!["[\"q\"]", "[]", "[\"q\",\"r\"]"],
        ),
        (
            json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": false}),
            vec!["[1,1]", "[]"],
        ),
    ]
}

#[test]
fn unique_arrays_take_exactly_the_documents_the_jsonschema_crate_takes() {
    take_what_jsonschema_takes(cases(), 13, 300, true);
}

#[test]
fn unique_items_over_other_items_are_refused_naming_the_keyword() {
    for (schema, says) in [
        (
            json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
            "`uniqueItems` is supported over items that are an `enum` or `const`",
        ),
        (
            json!({"type": "array", "uniqueItems": true}),
            "`uniqueItems` is supported over items",
        ),
        (
            json!({"type": "array", "prefixItems": [{"const": 1}],
                "items": {"enum": [1, 2]}, "uniqueItems": true}),
            "without `prefixItems`",
        ),
        (
            json!({"type": "array", "items": {"enum": [1]}, "uniqueItems": "yes"}),
            "`uniqueItems` must be a boolean",
        ),
        (
            json!({"type": "array", "items": {"enum": (0..129).collect::<Vec<_>>()},
                "uniqueItems": true}),
            "at most 128 values",
        ),
        (
            json!({"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": true,
                "minItems": 3}),
            "no finite document",
        ),
    ] {
        let e = Grammar::compile(&schema).unwrap_err();
        assert!(e.to_string().contains(says), "{schema}: {e}");
    }
}

#[test]
fn the_tiny_models_answers_under_unique_items_are_always_valid() {
    let schemas: Vec<Value> = cases()
        .into_iter()
        .map(|(s, _)| s)
        .filter(|s| s["items"].get("enum").is_some() || s["properties"].is_object())
        .collect();
    answers_are_valid(
        &schemas,
        b"user: ",
        |shortest| [shortest + 30, shortest],
        |s, v| checker(s).is_valid(v),
    );
}
