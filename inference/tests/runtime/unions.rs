//! `anyOf`/`oneOf` under constrained decoding: unions whose branches start differently (as
//! Pydantic writes `Optional[...]` and `Union[int, str]`) and unions whose branches start
//! alike (two object models, Pydantic's tagged unions, an integer or a number) take
//! exactly the documents the `jsonschema` crate takes; random walks, masks over a
//! multi-byte vocabulary and the tiny model's answers are always valid; a `oneOf` whose
//! branches are not shown to exclude each other is refused up front, naming two. `allOf`
//! where it reduces to one schema is held to the same checks, and refused naming why
//! where not.

use super::schema::{answers_are_valid, checker, masks_equal_token_by_token_checks, shortest_walk};
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

/// Unions whose branches can start alike, with documents to try (valid and not).
fn overlapping_cases() -> Vec<(Value, Vec<&'static str>)> {
    // Pydantic's tagged union (`Field(discriminator="pet_type")`), as
    // `model_json_schema()` writes it
    let tagged = json!({
        "$defs": {
            "Cat": {"type": "object", "title": "Cat", "additionalProperties": false,
                "properties": {"pet_type": {"const": "cat", "type": "string"},
                    "lives": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": ["pet_type", "lives"]},
            "Dog": {"type": "object", "title": "Dog", "additionalProperties": false,
                "properties": {"pet_type": {"const": "dog", "type": "string"},
                    "name": {"type": "string", "maxLength": 8}},
                "required": ["pet_type", "name"]},
            "Cow": {"type": "object", "title": "Cow", "additionalProperties": false,
                "properties": {"pet_type": {"enum": ["cow", "ox"]},
                    "name": {"type": "string", "maxLength": 8}},
                "required": ["pet_type"]}},
        "type": "object", "additionalProperties": false, "required": ["pet"],
        "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"},
            {"$ref": "#/$defs/Cow"}],
            "discriminator": {"propertyName": "pet_type", "mapping": {
                "cat": "#/$defs/Cat", "dog": "#/$defs/Dog", "cow": "#/$defs/Cow"}}}}});
    vec![
        (
            json!({"anyOf": [{"type": "integer", "maximum": 5}, {"type": "number", "minimum": 3}]}),
            vec!["5", "-7", "3.5", "100.25", "2.5", "6", "\"1\""],
        ),
        (
            // two models sharing a property name with different types
            json!({"anyOf": [
                {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                    "additionalProperties": false},
                {"type": "object", "properties": {"a": {"type": "string"},
                    "b": {"type": "boolean"}}, "required": ["b"], "additionalProperties": false}]}),
            vec![
                "{\"a\":1}",
                "{\"a\":\"x\",\"b\":true}",
                "{\"b\":false}",
                "{\"a\":1,\"b\":true}",
                "{\"a\":\"x\"}",
                "{}",
            ],
        ),
        (
            tagged,
            vec![
                "{\"pet\":{\"pet_type\":\"cat\",\"lives\":9}}",
                "{\"pet\":{\"name\":\"Rex\",\"pet_type\":\"dog\"}}",
                "{\"pet\":{\"pet_type\":\"ox\"}}",
                "{\"pet\":{\"pet_type\":\"cat\",\"name\":\"Tom\"}}",
                "{\"pet\":{\"pet_type\":\"dog\",\"lives\":3}}",
                "{\"pet\":{\"pet_type\":\"cat\",\"lives\":10}}",
                "{\"pet\":{\"pet_type\":\"bird\"}}",
            ],
        ),
        (
            // told apart by a property one requires and the other forbids
            json!({"oneOf": [
                {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                    "additionalProperties": false},
                {"type": "object", "properties": {"email": {"type": "string", "format": "email"}},
                    "required": ["email"], "additionalProperties": false}]}),
            vec![
                "{\"id\":4}",
                "{\"email\":\"a@b.io\"}",
                "{\"id\":4,\"email\":\"a@b.io\"}",
                "{}",
            ],
        ),
        (
            // items that fork at every `{` and merge again when they end
            json!({"type": "array", "maxItems": 4, "items": {"anyOf": [
                {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                {"type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"]},
                {"type": "integer", "minimum": 10}]}}),
            vec![
                "[{\"x\":1},{\"y\":\"a\"},{\"x\":2,\"y\":\"b\"},12]",
                "[{\"z\":1}]",
                "[{\"x\":\"1\"}]",
                "[9]",
            ],
        ),
        (
            json!({"anyOf": [{"enum": ["a", "ab", 1]}, {"type": "string", "maxLength": 1},
                {"oneOf": [{"const": 1.5}, {"type": "number", "minimum": 2}]}]}),
            vec![
                "\"a\"", "\"ab\"", "\"b\"", "1", "1.5", "2", "\"abc\"", "\"bc\"", "1.25",
            ],
        ),
    ]
}

#[test]
fn unions_whose_branches_start_alike_take_exactly_what_jsonschema_takes() {
    take_what_jsonschema_takes(overlapping_cases(), 17, 300, true);
}

#[test]
fn masks_under_unions_whose_branches_start_alike_equal_token_by_token_checks() {
    let schemas: Vec<Value> = overlapping_cases().into_iter().map(|(s, _)| s).collect();
    masks_equal_token_by_token_checks(&schemas);
}

#[test]
fn a_one_of_whose_branches_may_overlap_is_refused_naming_two() {
    let cat = |tag: Value| {
        json!({"type": "object", "properties": {"t": tag, "n": {"type": "integer"}},
            "required": ["t"]})
    };
    for (schema, says) in [
        (
            json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}),
            "#/oneOf/0 and #/oneOf/1 may both match one document",
        ),
        (
            json!({"properties": {"p": {"oneOf": [{"type": "object"}, {"required": ["a"]}]}}}),
            "#/properties/p/oneOf/0 and #/properties/p/oneOf/1 may both match",
        ),
        (
            // the same tag twice
            json!({"oneOf": [cat(json!({"const": "cat"})), cat(json!({"enum": ["dog", "cat"]}))]}),
            "#/oneOf/0 and #/oneOf/1 may both match",
        ),
        (
            // a tag not required in one branch
            json!({"oneOf": [cat(json!({"const": "cat"})),
                {"type": "object", "properties": {"t": {"const": "dog"}}}]}),
            "#/oneOf/0 and #/oneOf/1 may both match",
        ),
        (
            // each requires its own property, and allows the other's
            json!({"oneOf": [
                {"type": "object", "properties": {"a": {}}, "required": ["a"]},
                {"type": "object", "properties": {"b": {}}, "required": ["b"]}]}),
            "#/oneOf/0 and #/oneOf/1 may both match",
        ),
        (
            // equal as JSON Schema compares values
            json!({"oneOf": [{"enum": [1, 2]}, {"enum": [3, 1.0]}]}),
            "#/oneOf/0 and #/oneOf/1 may both match",
        ),
        (
            json!({"oneOf": [{"type": "string"}, {"const": 1}, {"type": "number"}]}),
            "#/oneOf/1 and #/oneOf/2 may both match",
        ),
        (
            json!({"oneOf": [{}, {"type": "null"}]}),
            "#/oneOf/0 and #/oneOf/1 may both match",
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
    // the check is bounded: two enums of 30 000 values each (disjoint) are refused
    // saying it gave up, in bounded time
    let big = |from: i64| Value::Array((from..from + 30_000).map(|i| json!(i)).collect());
    let e =
        Grammar::compile(&json!({"oneOf": [{"enum": big(0)}, {"enum": big(30_000)}]})).unwrap_err();
    assert!(
        e.to_string().contains("gave up after 20000 comparisons"),
        "{e}"
    );
    // the same shapes as `anyOf` are taken
    for schema in [
        json!({"anyOf": [{"type": "integer"}, {"type": "number"}]}),
        json!({"anyOf": [{}, {"type": "null"}]}),
        json!({"anyOf": [{"enum": [1, 2]}, {"enum": [3, 1.0]}]}),
    ] {
        assert!(Grammar::compile(&schema).is_ok(), "{schema}");
    }
}

#[test]
fn readings_are_bounded_and_merge_when_branches_meet_again() {
    // 40 branches that all start with `{`: the matcher carries at most MAX_READINGS, and
    // every document it takes is still valid
    let branches: Vec<Value> = (0..40)
        .map(|i| {
            json!({"type": "object", "properties": {format!("k{i}"): {"type": "integer"}},
            "required": [format!("k{i}")], "additionalProperties": false})
        })
        .collect();
    let schema = json!({"anyOf": branches});
    let g = Arc::new(Grammar::compile(&schema).unwrap());
    let check = checker(&schema);
    let mut m = Matcher::new(g.clone());
    assert!(m.feed_all(b"{\"k"));
    assert_eq!(m.readings(), fleetmesh_inference::schema::MAX_READINGS);
    let took: Vec<usize> = (0..40)
        .filter(|i| {
            let mut t = m.clone();
            t.feed_all(format!("{i}\":1}}").as_bytes()) && t.complete()
        })
        .collect();
    assert_eq!(took.len(), fleetmesh_inference::schema::MAX_READINGS);
    for i in took {
        let doc = format!("{{\"k{i}\":1}}");
        assert!(
            check.is_valid(&serde_json::from_str(&doc).unwrap()),
            "{doc}"
        );
    }
    // items of a union whose branches meet again at the array: the readings merge, so a
    // long array costs no more than one item
    let schema = json!({"type": "array", "items": {"anyOf": [{"type": "integer"},
        {"type": "number"}, {"type": "integer", "minimum": 0}]}});
    let mut m = Matcher::new(Arc::new(Grammar::compile(&schema).unwrap()));
    assert!(m.feed(b'['));
    for _ in 0..200 {
        assert!(m.feed(b'7'));
        assert_eq!(m.readings(), 3);
        assert!(m.feed(b','));
        assert_eq!(m.readings(), 1);
    }
    // `-0` is an integer ≥ 0 too; `-5` is not
    assert!(m.feed(b'-') && m.readings() == 3 && m.feed(b'5'));
    assert_eq!(m.readings(), 2);
    assert!(m.feed(b'.'));
    assert_eq!(m.readings(), 1, "only the number goes on");
    assert!(m.feed_all(b"5]") && m.complete() && m.finished());
}

#[test]
fn the_tiny_models_answers_under_unions_are_always_valid() {
    // branches that start differently, then alike
    let schemas: Vec<Value> = cases()
        .into_iter()
        .chain(overlapping_cases())
        .map(|(s, _)| s)
        .collect();
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
