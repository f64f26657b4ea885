//! The schema registry against its examples, the constants, and the digest's contract.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use fleetmesh_schemas::constants::{kind, manifest, protocol};
use fleetmesh_schemas::{Error, SchemaKey, SchemaSet};
use serde_json::Value;
use sha2::Digest as _;

fn root() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
}

/// The examples file for a schema file (same relative path under `examples/`).
fn examples_for(file: &str) -> Value {
    let path = root().join("examples").join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: every schema needs examples: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_schema_accepts_its_valid_examples_and_names_the_failing_path_of_invalid_ones() {
    let set = SchemaSet::embedded();
    let mut checked = 0;
    for key in set.keys() {
        let (_, file) = set.source(key).unwrap();
        let examples = examples_for(file);
        let valid = examples["valid"].as_array().unwrap();
        let invalid = examples["invalid"].as_array().unwrap();
        assert!(
            !valid.is_empty() && !invalid.is_empty(),
            "{file}: needs both kinds"
        );
        for (i, instance) in valid.iter().enumerate() {
            if let Err(e) = set.validate(key, instance) {
                panic!("{file}: valid example {i} was rejected: {e}");
            }
            checked += 1;
        }
        for (i, case) in invalid.iter().enumerate() {
            let want = case["path"].as_str().unwrap();
            match set.validate(key, &case["instance"]) {
                Ok(()) => panic!("{file}: invalid example {i} ({}) was accepted", case["why"]),
                Err(Error::Invalid(violations)) => {
                    assert!(
                        violations.iter().any(|v| v.path == want),
                        "{file}: invalid example {i} ({}): expected a violation at {want:?}, got {violations:?}",
                        case["why"]
                    );
                    // What a user reads starts with the first failing path.
                    let shown = Error::Invalid(violations.clone()).to_string();
                    let first = if violations[0].path.is_empty() {
                        "/"
                    } else {
                        violations[0].path.as_str()
                    };
                    assert!(shown.starts_with(&format!("{first}: ")), "{shown}");
                }
                Err(e) => panic!("{file}: invalid example {i}: unexpected error {e}"),
            }
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} examples checked");
}

#[test]
fn constants_and_schemas_cover_each_other() {
    let set = SchemaSet::embedded();
    let mut want: BTreeSet<SchemaKey> = kind::FLEETMESH
        .iter()
        .map(|k| SchemaKey::Event(*k))
        .collect();
    want.extend(
        manifest::ALL
            .iter()
            .map(|k| SchemaKey::Manifest((*k).into())),
    );
    want.extend(
        protocol::ALL
            .iter()
            .map(|p| SchemaKey::Payload((*p).into())),
    );
    let have: BTreeSet<SchemaKey> = set.keys().cloned().collect();
    assert_eq!(have, want);
    // Manifest schemas pin the apiVersion constant and their kind.
    for m in manifest::ALL {
        let key = SchemaKey::Manifest((*m).into());
        let file = set.source(&key).unwrap().1;
        let mut doc = examples_for(file)["valid"][0].clone();
        assert_eq!(
            doc["apiVersion"],
            fleetmesh_schemas::constants::API_VERSION,
            "{m}"
        );
        assert_eq!(doc["kind"], *m);
        set.validate(&key, &doc).unwrap();
        for (field, wrong) in [("apiVersion", "fleetmesh.org/v1beta9"), ("kind", "Other")] {
            let saved = std::mem::replace(&mut doc[field], Value::from(wrong));
            match set.validate(&key, &doc) {
                Err(Error::Invalid(v)) => assert!(
                    v.iter().any(|v| v.path == format!("/{field}")),
                    "{m}: {v:?}"
                ),
                other => panic!("{m}: {field} {wrong}: {other:?}"),
            }
            doc[field] = saved;
        }
    }
}

#[test]
fn event_validation_picks_the_schema_by_kind() {
    let set = SchemaSet::embedded();
    let ask = &examples_for("events/kind-30810.json")["valid"][0];
    assert!(set.validate_event(ask).unwrap());
    // A kind fleetmesh does not define is left to the relay.
    let note = serde_json::json!({"kind": 1, "content": "hi"});
    assert!(!set.validate_event(&note).unwrap());
    let bad = serde_json::json!({"kind": "1"});
    match set.validate_event(&bad) {
        Err(Error::Invalid(v)) => assert_eq!(v[0].path, "/kind"),
        other => panic!("{other:?}"),
    }
    // Content that is not JSON is named as such.
    let mut broken = ask.clone();
    broken["content"] = Value::from("{not json");
    match set.validate_event(&broken) {
        Err(Error::Invalid(v)) => {
            assert_eq!(v[0].path, "/content");
            assert!(v[0].message.contains("not JSON"), "{}", v[0].message);
        }
        other => panic!("{other:?}"),
    }
}

fn copy_tree(from: &Path, to: &Path, files: &mut Vec<(PathBuf, PathBuf)>) {
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            copy_tree(&path, to, files);
        } else {
            files.push((path.clone(), to.to_path_buf()));
        }
    }
}

/// Writes the embedded set into a fresh directory in another layout: flat, renamed, in
/// reverse order, re-indented and with object keys reordered.
fn relaid_copy(dir: &Path) {
    let mut files = Vec::new();
    copy_tree(&root().join("json"), dir, &mut files);
    files.sort();
    files.reverse();
    for (i, (src, _)) in files.iter().enumerate() {
        let value: Value = serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
        let text = if i % 2 == 0 {
            serde_json::to_string(&value).unwrap()
        } else {
            // Reverse the top-level key order and indent differently.
            let obj = value.as_object().unwrap();
            let mut parts: Vec<String> = obj
                .iter()
                .map(|(k, v)| {
                    format!(
                        "\n    {}: {}",
                        serde_json::to_string(k).unwrap(),
                        serde_json::to_string_pretty(v).unwrap()
                    )
                })
                .collect();
            parts.reverse();
            format!("{{{}\n}}\r\n", parts.join(","))
        };
        let sub = dir.join(if i % 3 == 0 { "a/b" } else { "c" });
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(
            sub.join(format!("{:03}-renamed.json", files.len() - i)),
            text,
        )
        .unwrap();
    }
}

#[test]
fn digest_is_stable_across_loads_and_layouts_and_matches_the_sources() {
    let embedded = SchemaSet::embedded().digest();
    // The same files loaded again, from disk, give the same digest.
    let from_disk = SchemaSet::from_dir(&root().join("json")).unwrap().digest();
    assert_eq!(embedded, from_disk);
    assert_eq!(
        from_disk,
        SchemaSet::from_dir(&root().join("json")).unwrap().digest()
    );
    // Another layout, order, naming and formatting of the same schemas: same digest.
    let tmp = tempfile::tempdir().unwrap();
    relaid_copy(tmp.path());
    assert_eq!(SchemaSet::from_dir(tmp.path()).unwrap().digest(), embedded);
    assert_eq!(embedded.to_hex().len(), 64);
}

#[test]
fn changing_any_schema_changes_the_digest() {
    let base = SchemaSet::embedded().digest();
    let files = SchemaSet::embedded_files();
    let mut seen = BTreeSet::new();
    for (changed, _) in files {
        let sources = files.iter().map(|(name, text)| {
            let text = if name == changed {
                let mut v: Value = serde_json::from_str(text).unwrap();
                v["description"] = Value::from(format!(
                    "{} (edited)",
                    v["description"].as_str().unwrap_or("")
                ));
                v.to_string()
            } else {
                (*text).to_owned()
            };
            ((*name).to_owned(), text)
        });
        let digest = SchemaSet::from_sources(sources).unwrap().digest();
        assert_ne!(digest, base, "editing {changed} left the digest unchanged");
        assert!(
            seen.insert(digest),
            "two different edits gave the same digest"
        );
    }
    // A change of a single constraint deep inside counts too.
    let sources = files.iter().map(|(name, text)| {
        (
            (*name).to_owned(),
            text.replacen("\"minimum\": 0", "\"minimum\": 1", 1),
        )
    });
    assert_ne!(SchemaSet::from_sources(sources).unwrap().digest(), base);
}

#[test]
fn digest_is_sha256_of_the_rfc8785_form_of_the_id_map() {
    // Computed independently: the canonical form written out by hand.
    let a = r#"{"x-fleetmesh": {"class": "common"}, "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://fleetmesh.org/t/a.json", "minimum": 1.50}"#;
    let b = r#"{"$id": "https://fleetmesh.org/t/b.json", "$schema": "https://json-schema.org/draft/2020-12/schema", "x-fleetmesh": {"class": "common"}, "title": "é\u0001"}"#;
    let set = SchemaSet::from_sources([("b".into(), b.into()), ("a".into(), a.into())]).unwrap();
    let canonical = concat!(
        r#"{"https://fleetmesh.org/t/a.json":{"$id":"https://fleetmesh.org/t/a.json","$schema":"https://json-schema.org/draft/2020-12/schema","minimum":1.5,"x-fleetmesh":{"class":"common"}},"#,
        r#""https://fleetmesh.org/t/b.json":{"$id":"https://fleetmesh.org/t/b.json","$schema":"https://json-schema.org/draft/2020-12/schema","title":"é\u0001","x-fleetmesh":{"class":"common"}}}"#
    );
    let want: [u8; 32] = sha2::Sha256::digest(canonical.as_bytes()).into();
    assert_eq!(set.digest().0, want);
}

fn one(text: &str) -> Result<SchemaSet, Error> {
    SchemaSet::from_sources([("t.json".to_owned(), text.to_owned())])
}

#[test]
fn malformed_schema_sets_are_refused_with_the_reason() {
    let head = r#""$schema": "https://json-schema.org/draft/2020-12/schema""#;
    let cases = [
        ("not json".to_owned(), "not JSON"),
        (format!(r#"{{{head}}}"#), "missing $id"),
        (
            r#"{"$id": "https://x.org/a.json"}"#.to_owned(),
            "$schema must be",
        ),
        (
            format!(r#"{{{head}, "$id": "https://x.org/a.json"}}"#),
            "x-fleetmesh",
        ),
        (
            format!(
                r#"{{{head}, "$id": "https://x.org/a.json", "x-fleetmesh": {{"class": "event", "kind": 99999}}}}"#
            ),
            "kind",
        ),
        (
            format!(
                r#"{{{head}, "$id": "https://x.org/a.json", "x-fleetmesh": {{"class": "event", "kind": 1}}, "type": 5}}"#
            ),
            "Draft 2020-12",
        ),
        (
            format!(
                r#"{{{head}, "$id": "https://x.org/a.json", "x-fleetmesh": {{"class": "event", "kind": 1}}, "$ref": "https://x.org/missing.json"}}"#
            ),
            "missing.json",
        ),
    ];
    for (text, want) in cases {
        let err = one(&text).expect_err(&text).to_string();
        assert!(
            err.contains(want),
            "{text}: {err:?} should mention {want:?}"
        );
    }
    let a = format!(
        r#"{{{head}, "$id": "https://x.org/a.json", "x-fleetmesh": {{"class": "common"}}}}"#
    );
    let err =
        SchemaSet::from_sources([("1.json".into(), a.clone()), ("2.json".into(), a)]).unwrap_err();
    assert!(matches!(err, Error::Duplicate { .. }), "{err}");
    let k = |id: &str| {
        format!(
            r#"{{{head}, "$id": "https://x.org/{id}.json", "x-fleetmesh": {{"class": "manifest", "kind": "X"}}}}"#
        )
    };
    let err = SchemaSet::from_sources([("1.json".into(), k("a")), ("2.json".into(), k("b"))])
        .unwrap_err();
    assert!(
        err.to_string().contains("manifest X is defined twice"),
        "{err}"
    );
}

#[test]
fn unknown_keys_are_reported() {
    let set = SchemaSet::embedded();
    let err = set
        .validate(&SchemaKey::Event(1), &Value::Null)
        .unwrap_err();
    assert!(matches!(err, Error::UnknownSchema(SchemaKey::Event(1))));
}
