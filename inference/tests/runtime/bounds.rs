//! Numeric bounds (`minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`,
//! `multipleOf`) and array shapes (`prefixItems`, `items: false`) under constrained
//! decoding: the matcher takes exactly the integers and decimals the `jsonschema` crate
//! accepts, and only tuples it accepts; its shortest completion is exact; the tiny model's
//! constrained answers are always valid.

use super::schema::{answers_are_valid, checker, shortest_walk};
use fleetmesh_inference::schema::{Grammar, Matcher};
use serde_json::{Value, json};
use std::sync::Arc;

/// Bounded schemas, and how a number is placed in a document of each (`{}` for the number).
fn bounded() -> Vec<(Value, &'static str)> {
    let age = json!({"type": "object", "properties": {"age":
        {"type": "integer", "minimum": 0, "maximum": 150}},
        "required": ["age"], "additionalProperties": false});
    vec![
        (
            json!({"type": "integer", "minimum": 0, "maximum": 150}),
            "{}",
        ),
        (
            json!({"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 7}),
            "{}",
        ),
        (
            json!({"type": "integer", "minimum": -1000, "maximum": -37}),
            "{}",
        ),
        (
            json!({"type": "number", "minimum": 2.5, "maximum": 1000.5}),
            "{}",
        ),
        (json!({"type": "integer", "minimum": 100}), "{}"),
        (json!({"type": "integer", "maximum": -3}), "{}"),
        (
            json!({"type": "integer", "minimum": 1e3, "maximum": 1e3}),
            "{}",
        ),
        (
            json!({"type": ["integer", "null"], "minimum": 10, "maximum": 12}),
            "{}",
        ),
        (
            json!({"type": "integer", "exclusiveMinimum": 0.5, "exclusiveMaximum": 9.5}),
            "{}",
        ),
        (
            json!({"type": "integer", "multipleOf": 7, "minimum": -50, "maximum": 100}),
            "{}",
        ),
        (json!({"type": "number", "multipleOf": 25.0}), "{}"),
        (
            json!({"type": "integer", "multipleOf": 300, "exclusiveMaximum": 0}),
            "{}",
        ),
        (age, "{\"age\":{}}"),
        (
            json!({"type": "array", "items": {"type": "integer", "minimum": 7, "maximum": 9},
                "minItems": 2, "maxItems": 2}),
            "[8,{}]",
        ),
        (tuple(), "[{},\"a\"]"),
    ]
}

/// Bounded `number`s written as decimals, and how one is placed in a document of each.
fn decimals() -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({"type": "number", "minimum": 0.2, "maximum": 0.8}),
            "{}",
        ),
        (
            json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
            "{}",
        ),
        (
            json!({"type": "number", "minimum": -1.25, "maximum": 2.5}),
            "{}",
        ),
        (
            json!({"type": "number", "exclusiveMinimum": -0.05, "maximum": 0.125}),
            "{}",
        ),
        (
            json!({"type": "number", "minimum": 0, "exclusiveMaximum": 0.001}),
            "{}",
        ),
        (
            json!({"type": ["number", "null"], "exclusiveMinimum": 2.999}),
            "{}",
        ),
        (
            json!({"type": "object", "properties": {"score":
                {"type": "number", "minimum": 0, "maximum": 1}},
                "required": ["score"], "additionalProperties": false}),
            "{\"score\":{}}",
        ),
    ]
}

/// A tuple: a number in 1..=3, a short string, an optional boolean, nothing more.
fn tuple() -> Value {
    json!({"type": "array", "prefixItems": [
        {"type": "integer", "minimum": 1, "maximum": 3},
        {"type": "string", "maxLength": 2},
        {"type": "boolean"}],
        "items": false, "minItems": 2})
}

fn accepts(g: &Arc<Grammar>, doc: &str) -> bool {
    let mut m = Matcher::new(g.clone());
    m.feed_all(doc.as_bytes()) && m.complete()
}

#[test]
fn bounded_integers_are_taken_exactly_when_the_jsonschema_crate_takes_them() {
    let mut numbers: Vec<String> = (-1200..=1200).map(|n: i64| n.to_string()).collect();
    numbers.extend(
        [
            "-0",
            "999999999999999999",
            "-999999999999999999",
            "1000000000000000000",
        ]
        .map(String::from),
    );
    let odd = ["01", "-01", "1.0", "1e2", "3.5", "-", "+1", "00", "150.5"];
    for (schema, place) in bounded() {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        let mut taken = 0;
        for n in &numbers {
            let doc = place.replace("{}", n);
            let valid = jsonschema::is_valid(&schema, &serde_json::from_str(&doc).unwrap());
            let ok = accepts(&g, &doc);
            // every integer of up to 18 digits the schema allows is taken, nothing else
            let in_subset = n.trim_start_matches('-').len() <= 18;
            assert_eq!(ok, valid && in_subset, "{schema}: {doc}");
            taken += usize::from(ok);
        }
        assert!(taken > 0, "{schema}");
        for n in odd {
            let doc = place.replace("{}", n);
            if accepts(&g, &doc) {
                let v: Value = serde_json::from_str(&doc).unwrap();
                assert!(jsonschema::is_valid(&schema, &v), "{schema}: {doc}");
            }
        }
    }
}

#[test]
fn bounded_decimals_are_taken_exactly_when_the_jsonschema_crate_takes_them() {
    // every number from -3.999 to 3.999 with up to three fraction digits, and "-0"
    let mut numbers = vec!["-0".to_string()];
    for int in ["-3", "-2", "-1", "-0", "0", "1", "2", "3"] {
        numbers.push(int.to_string());
        for digits in 1..=3 {
            for f in 0..10u32.pow(digits) {
                numbers.push(format!("{int}.{f:0w$}", w = digits as usize));
            }
        }
    }
    // beyond the matcher's 15 significant digits, an exponent, not JSON: never taken
    let odd = [
        "0.2000000000000001",
        "0.30000000000000004",
        "0.19999999999999999",
        "0.0010000000000000001",
        "2e-1",
        "0.5e0",
        "1.",
        ".5",
        "00.5",
        "-.5",
    ];
    for (schema, place) in decimals() {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        let check = checker(&schema);
        let mut taken = 0;
        for n in &numbers {
            let doc = place.replace("{}", n);
            let valid = check.is_valid(&serde_json::from_str(&doc).unwrap());
            assert_eq!(accepts(&g, &doc), valid, "{schema}: {doc}");
            taken += usize::from(valid);
        }
        assert!(taken > 0, "{schema}");
        // fifteen significant digits are taken where the bounds allow them
        for n in [
            "0.123456789012345",
            "0.999999999999999",
            "0.000000000000001",
        ] {
            let doc = place.replace("{}", n);
            let valid = check.is_valid(&serde_json::from_str(&doc).unwrap());
            assert_eq!(accepts(&g, &doc), valid, "{schema}: {doc}");
        }
        for n in odd {
            let doc = place.replace("{}", n);
            assert!(!accepts(&g, &doc), "{schema}: {doc}");
        }
    }
}

#[test]
fn the_shortest_bounded_document_is_found_byte_by_byte() {
    for (schema, want) in [
        (json!({"type": "integer", "minimum": 1000}), "1000"),
        (json!({"type": "integer", "maximum": -20}), "-20"),
        (json!({"type": "integer", "minimum": -7, "maximum": 3}), "0"),
        (json!({"type": "number", "exclusiveMinimum": 41.5}), "42"),
        (
            json!({"type": "number", "minimum": 0.2, "maximum": 0.8}),
            "0.2",
        ),
        (
            json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1}),
            "0.1",
        ),
        (
            json!({"type": "number", "minimum": -0.75, "maximum": -0.5}),
            "-0.5",
        ),
        (json!({"type": "number", "exclusiveMinimum": 0.999}), "1"),
        (
            json!({"type": "number", "minimum": 0.0625, "maximum": 0.0625}),
            "0.0625",
        ),
        (
            json!({"type": "number", "exclusiveMinimum": 7.25, "exclusiveMaximum": 7.5}),
            "7.3",
        ),
        (
            json!({"type": "integer", "multipleOf": 10, "minimum": 1}),
            "10",
        ),
        (
            json!({"type": "integer", "multipleOf": 300, "maximum": -1}),
            "-300",
        ),
        (
            json!({"type": "integer", "multipleOf": 7, "minimum": -10, "maximum": 10}),
            "0",
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 12345}},
                   "required": ["n"]}),
            "{\"n\":12345}",
        ),
    ] {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        let doc = shortest_walk(&g, &schema.to_string());
        assert_eq!(String::from_utf8(doc).unwrap(), want, "{schema}");
        assert_eq!(g.min_bytes(), want.len(), "{schema}");
    }
}

#[test]
fn bounds_no_integer_meets_draft_4_booleans_and_fractional_steps_are_refused_with_the_reason() {
    for (schema, says) in [
        (
            json!({"type": "integer", "minimum": 5, "maximum": 4}),
            "no finite document",
        ),
        (
            json!({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 4}),
            "no finite document",
        ),
        (
            json!({"type": "number", "minimum": 0.8, "maximum": 0.2}),
            "no finite document",
        ),
        (
            json!({"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 0.5}),
            "no finite document",
        ),
        (
            // no decimal of fifteen fraction digits lies strictly between
            json!({"type": "number", "exclusiveMinimum": 0.1,
                   "exclusiveMaximum": 0.1000000000000001}),
            "no finite document",
        ),
        (
            json!({"type": "integer", "minimum": 0, "exclusiveMinimum": true}),
            "`exclusiveMinimum` must be a number",
        ),
        (
            json!({"type": "integer", "multipleOf": 0.5}),
            "`multipleOf` 0.5",
        ),
        (
            json!({"type": "integer", "multipleOf": 5, "minimum": 1, "maximum": 4}),
            "no finite document",
        ),
        (
            json!({"type": "integer", "not": {"const": 3}}),
            "unsupported keyword `not`",
        ),
    ] {
        let e = Grammar::compile(&schema).unwrap_err();
        assert!(e.to_string().contains(says), "{schema}: {e}");
    }
}

#[test]
fn the_tiny_models_constrained_answers_are_always_in_range() {
    let schemas: Vec<Value> = bounded()
        .into_iter()
        .chain(decimals())
        .map(|(s, _)| s)
        .collect();
    answers_are_valid(
        &schemas,
        b"age: ",
        |shortest| [32, shortest],
        jsonschema::is_valid,
    );
}

#[test]
fn tuples_take_each_position_by_its_own_schema_and_nothing_past_them() {
    let open_ended = json!({"type": "array", "prefixItems": [{"const": "x"}],
                            "items": {"type": "integer"}});
    for (schema, docs) in [
        (
            tuple(),
            vec![
                "[1,\"a\"]",
                "[1,\"ab\",true]",
                "[3,\"\",false]",
                "[0,\"a\"]",
                "[1]",
                "[1,\"a\",true,1]",
                "[1,2]",
                "[\"a\",1]",
                "[2,\"abc\"]",
                "[]",
            ],
        ),
        (
            open_ended,
            vec![
                "[\"x\",1,2]",
                "[\"x\",\"y\"]",
                "[1]",
                "[]",
                "[\"x\"]",
                "[\"y\",1]",
            ],
        ),
    ] {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        for doc in docs {
            let valid = jsonschema::is_valid(&schema, &serde_json::from_str(doc).unwrap());
            assert_eq!(accepts(&g, doc), valid, "{schema}: {doc}");
        }
    }
    let g = Arc::new(Grammar::compile(&tuple()).unwrap());
    assert_eq!(shortest_walk(&g, "tuple"), b"[1,\"\"]");
    assert_eq!(g.min_bytes(), 6);
    // refused: too many positions, and the draft-2019 array form of items
    let many: Vec<Value> = (0..65).map(|_| json!({})).collect();
    let e = Grammar::compile(&json!({"prefixItems": many})).unwrap_err();
    assert!(e.to_string().contains("at most 64"), "{e}");
    let e = Grammar::compile(&json!({"items": [{}]})).unwrap_err();
    assert!(e.to_string().contains("use `prefixItems`"), "{e}");
}

#[test]
fn enum_values_the_other_keywords_forbid_are_never_written() {
    // literals are kept only where the whole sub-schema allows them (the jsonschema crate)
    for (schema, only) in [
        (json!({"enum": [[1, 2, 3], [1]], "maxItems": 2}), "[1]"),
        (
            json!({"enum": [[5, "a"], [2, "a"]], "prefixItems": [{"maximum": 3}]}),
            "[2,\"a\"]",
        ),
        (
            json!({"enum": [{"a": 1}, {"b": 1}], "required": ["b"]}),
            "{\"b\":1}",
        ),
        (
            json!({"$defs": {"small": {"type": "integer", "maximum": 3}}, "type": "array",
                   "items": {"$ref": "#/$defs/small"}, "enum": [[9], [2]]}),
            "[2]",
        ),
    ] {
        let g = Arc::new(Grammar::compile(&schema).unwrap());
        assert_eq!(
            String::from_utf8(shortest_walk(&g, "enum")).unwrap(),
            only,
            "{schema}"
        );
        let mut other = schema["enum"].as_array().unwrap().clone();
        let written: Value = serde_json::from_str(only).unwrap();
        other.retain(|v| *v != written);
        for v in other {
            assert!(!accepts(&g, &v.to_string()), "{schema}: {v}");
        }
    }
}
