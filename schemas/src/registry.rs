//! The schema set: loading, compiling, validating, and the protocol digest.
//!
//! Use [`SchemaSet::embedded`] for the normative set compiled into the binary; use
//! [`SchemaSet::from_dir`] to load a directory laid out like `schemas/json/` (an operator
//! checking a candidate schema set, or a test).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::OnceLock;

use jsonschema::{Draft, Registry, Validator};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::{Error, Result, SchemaKey, Violation};

/// The `$schema` every file must declare.
pub const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Longest error message kept per violation; `contains` failures otherwise quote whole arrays.
const MAX_MESSAGE: usize = 240;

/// SHA-256 over the RFC 8785 canonical serialization of the whole schema set.
///
/// Computed over one JSON object that maps each schema's `$id` to the schema, so the digest
/// does not depend on file names, file order, whitespace or key order, only on the
/// schemas' content. Two nodes peer directly only when their digests are equal.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolDigest(pub [u8; 32]);

impl ProtocolDigest {
    /// Lowercase hex, as printed by `meshnode schema digest` and carried in descriptors.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for ProtocolDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for ProtocolDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProtocolDigest({})", self.to_hex())
    }
}

/// A compiled schema for one [`SchemaKey`].
struct Entry {
    /// File the schema came from, for messages.
    name: String,
    /// The schema's `$id`.
    id: String,
    validator: Validator,
    /// For event schemas whose content is JSON: the compiled `contentSchema`.
    content: Option<Validator>,
    /// `x-fleetmesh.contentOptional`: an empty content string is valid and not decoded
    /// (NIP-66 monitor events may carry no NIP-11 document).
    content_optional: bool,
}

/// A loaded, compiled and digested set of fleetmesh schemas.
pub struct SchemaSet {
    /// Every document by `$id` (the common definitions included), as loaded.
    docs: BTreeMap<String, (String, Value)>,
    entries: BTreeMap<SchemaKey, Entry>,
    digest: ProtocolDigest,
}

impl fmt::Debug for SchemaSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaSet")
            .field("schemas", &self.docs.len())
            .field("digest", &self.digest)
            .finish()
    }
}

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
}

impl SchemaSet {
    /// The normative schema set compiled into this build, loaded once.
    ///
    /// # Panics
    /// If the embedded schemas do not load, which the crate's tests rule out for any build
    /// that passed them.
    pub fn embedded() -> &'static SchemaSet {
        static SET: OnceLock<SchemaSet> = OnceLock::new();
        SET.get_or_init(|| {
            SchemaSet::from_sources(
                embedded::EMBEDDED
                    .iter()
                    .map(|(name, text)| ((*name).to_owned(), (*text).to_owned())),
            )
            .unwrap_or_else(|e| panic!("the embedded schema set is broken: {e}"))
        })
    }

    /// The files of the embedded set: (path relative to `schemas/json/`, contents).
    pub fn embedded_files() -> &'static [(&'static str, &'static str)] {
        embedded::EMBEDDED
    }

    /// Loads every `*.json` file under `dir`, recursively.
    ///
    /// # Errors
    /// An unreadable file, or any error of [`SchemaSet::from_sources`].
    pub fn from_dir(dir: &Path) -> Result<SchemaSet> {
        let mut files = Vec::new();
        walk(dir, dir, &mut files)?;
        SchemaSet::from_sources(files)
    }

    /// Builds a set from (name, JSON text) pairs; names serve only in messages.
    ///
    /// # Errors
    /// A file that is not JSON, not a Draft 2020-12 schema, lacks an absolute `$id` or a
    /// valid `x-fleetmesh` annotation, has a `$ref` that resolves nowhere in the set, or
    /// repeats another's `$id` or key.
    pub fn from_sources(sources: impl IntoIterator<Item = (String, String)>) -> Result<SchemaSet> {
        let mut docs: BTreeMap<String, (String, Value)> = BTreeMap::new();
        for (name, text) in sources {
            let value: Value = serde_json::from_str(&text).map_err(|source| Error::NotJson {
                name: name.clone(),
                source,
            })?;
            let id = check_header(&name, &value)?;
            if let Some((first, _)) = docs.get(&id) {
                return Err(Error::Duplicate {
                    what: id,
                    first: first.clone(),
                    second: name,
                });
            }
            docs.insert(id, (name, value));
        }

        let entries = compile_all(&docs)?;
        let digest = digest_of(&docs);
        Ok(SchemaSet {
            docs,
            entries,
            digest,
        })
    }

    /// The protocol digest of this set.
    pub fn digest(&self) -> ProtocolDigest {
        self.digest
    }

    /// Every key with a schema, in order (events by kind, then manifests, then payloads).
    pub fn keys(&self) -> impl Iterator<Item = &SchemaKey> {
        self.entries.keys()
    }

    /// Whether a schema exists for `key`.
    pub fn contains(&self, key: &SchemaKey) -> bool {
        self.entries.contains_key(key)
    }

    /// The schema document for `key`, as loaded.
    pub fn schema(&self, key: &SchemaKey) -> Option<&Value> {
        let entry = self.entries.get(key)?;
        self.docs.get(&entry.id).map(|(_, v)| v)
    }

    /// The `$id` and file name of the schema for `key`.
    pub fn source(&self, key: &SchemaKey) -> Option<(&str, &str)> {
        self.entries
            .get(key)
            .map(|e| (e.id.as_str(), e.name.as_str()))
    }

    /// Validates `instance` against the schema for `key`.
    ///
    /// For event schemas whose `content` is declared `contentMediaType: application/json`,
    /// the content string is decoded and checked against its `contentSchema` too; those
    /// violations carry paths under `/content`.
    ///
    /// # Errors
    /// [`Error::UnknownSchema`] if no schema has this key; [`Error::Invalid`] with every
    /// violation (path and reason) otherwise.
    pub fn validate(&self, key: &SchemaKey, instance: &Value) -> Result<()> {
        let entry = self
            .entries
            .get(key)
            .ok_or_else(|| Error::UnknownSchema(key.clone()))?;
        let mut violations: Vec<Violation> = entry
            .validator
            .iter_errors(instance)
            .map(|e| violation(String::new(), &e))
            .collect();
        if let (Some(content_validator), Some(Value::String(text))) =
            (&entry.content, instance.get("content"))
            && !(entry.content_optional && text.is_empty())
        {
            match serde_json::from_str::<Value>(text) {
                Ok(content) => violations.extend(
                    content_validator
                        .iter_errors(&content)
                        .map(|e| violation("/content".into(), &e)),
                ),
                Err(e) => violations.push(Violation {
                    path: "/content".into(),
                    message: format!("content is not JSON: {e}"),
                }),
            }
        }
        if violations.is_empty() {
            Ok(())
        } else {
            Err(Error::Invalid(violations))
        }
    }

    /// Validates a Nostr event against the schema of its kind.
    ///
    /// Returns `Ok(false)` for a kind fleetmesh defines no schema for (left to the relay's
    /// generic NIP-01 checks), `Ok(true)` when a schema exists and the event satisfies it.
    ///
    /// # Errors
    /// [`Error::Invalid`] when the event has no integer `kind` in 0..=65535 or fails its
    /// kind's schema.
    pub fn validate_event(&self, event: &Value) -> Result<bool> {
        let kind = event
            .get("kind")
            .and_then(Value::as_u64)
            .and_then(|k| u16::try_from(k).ok())
            .ok_or_else(|| {
                Error::Invalid(vec![Violation {
                    path: "/kind".into(),
                    message: "kind must be an integer between 0 and 65535".into(),
                }])
            })?;
        let key = SchemaKey::Event(kind);
        if !self.contains(&key) {
            return Ok(false);
        }
        self.validate(&key, event).map(|()| true)
    }
}

fn violation(prefix: String, e: &jsonschema::ValidationError<'_>) -> Violation {
    let mut message = e.to_string();
    if message.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    Violation {
        path: prefix + e.instance_path().as_str(),
        message,
    }
}

/// Checks `$schema`, the metaschema and `$id`; returns the `$id`.
fn check_header(name: &str, value: &Value) -> Result<String> {
    let bad = |reason: String| Error::BadSchema {
        name: name.to_owned(),
        reason,
    };
    if !value.is_object() {
        return Err(bad("a schema file must hold a JSON object".into()));
    }
    match value.get("$schema").and_then(Value::as_str) {
        Some(DIALECT) => {}
        other => return Err(bad(format!("$schema must be {DIALECT:?}, found {other:?}"))),
    }
    if let Err(e) = jsonschema::meta::validate(value) {
        return Err(bad(format!(
            "not a valid Draft 2020-12 schema at {}: {e}",
            e.instance_path()
        )));
    }
    let id = value
        .get("$id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("missing $id".into()))?;
    if !id.starts_with("https://") || id.contains('#') {
        return Err(bad(format!(
            "$id must be an absolute https URI without a fragment, found {id:?}"
        )));
    }
    Ok(id.to_owned())
}

/// Reads the `x-fleetmesh` annotation: `None` for the common definitions.
fn annotation_key(name: &str, value: &Value) -> Result<Option<SchemaKey>> {
    let bad = |reason: &str| Error::BadSchema {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    let note = value
        .get("x-fleetmesh")
        .ok_or_else(|| bad("missing the x-fleetmesh annotation"))?;
    let class = note
        .get("class")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("x-fleetmesh.class must be a string"))?;
    let key = match class {
        "common" => return Ok(None),
        "event" => SchemaKey::Event(
            note.get("kind")
                .and_then(Value::as_u64)
                .and_then(|k| u16::try_from(k).ok())
                .ok_or_else(|| bad("x-fleetmesh.kind of an event must be an integer < 65536"))?,
        ),
        "manifest" => SchemaKey::Manifest(
            note.get("kind")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("x-fleetmesh.kind of a manifest must be a string"))?
                .to_owned(),
        ),
        "payload" => SchemaKey::Payload(
            note.get("protocol")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("x-fleetmesh.protocol of a payload must be a string"))?
                .to_owned(),
        ),
        _ => {
            return Err(bad(
                "x-fleetmesh.class must be common, event, manifest or payload",
            ));
        }
    };
    Ok(Some(key))
}

/// The `contentSchema` of an event schema whose content is JSON.
fn content_schema(value: &Value) -> Option<&Value> {
    let content = value.pointer("/properties/content")?;
    (content.get("contentMediaType")?.as_str()? == "application/json")
        .then(|| content.get("contentSchema"))
        .flatten()
}

fn digest_of(docs: &BTreeMap<String, (String, Value)>) -> ProtocolDigest {
    let set: serde_json::Map<String, Value> = docs
        .iter()
        .map(|(id, (_, value))| (id.clone(), value.clone()))
        .collect();
    let canonical = serde_json_canonicalizer::to_vec(&Value::Object(set))
        .expect("a serde_json value always serializes");
    ProtocolDigest(Sha256::digest(&canonical).into())
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> Result<()> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.is_dir() {
            walk(root, &path, out)?;
        } else if path.extension().is_some_and(|x| x == "json") {
            let text = std::fs::read_to_string(&path).map_err(io(&path))?;
            let name = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            out.push((name, text));
        }
    }
    Ok(())
}

fn compile_all(docs: &BTreeMap<String, (String, Value)>) -> Result<BTreeMap<SchemaKey, Entry>> {
    let registry = Registry::new()
        .extend(docs.iter().map(|(id, (_, value))| (id.as_str(), value)))
        .and_then(|b| b.prepare())
        .map_err(|e| Error::BadSchema {
            name: "(schema set)".into(),
            reason: e.to_string(),
        })?;

    let mut entries: BTreeMap<SchemaKey, Entry> = BTreeMap::new();
    for (id, (name, value)) in docs {
        let Some(key) = annotation_key(name, value)? else {
            continue;
        };
        let compile = |schema: &Value| {
            jsonschema::options()
                .with_draft(Draft::Draft202012)
                .with_base_uri(id.clone())
                .with_registry(&registry)
                .offline()
                .build(schema)
                .map_err(|e| Error::BadSchema {
                    name: name.clone(),
                    reason: e.to_string(),
                })
        };
        let validator = compile(value)?;
        let content = match (&key, content_schema(value)) {
            (SchemaKey::Event(_), Some(cs)) => Some(compile(cs)?),
            _ => None,
        };
        let entry = Entry {
            name: name.clone(),
            id: id.clone(),
            validator,
            content,
            content_optional: value.pointer("/x-fleetmesh/contentOptional")
                == Some(&Value::Bool(true)),
        };
        if let Some(prev) = entries.insert(key.clone(), entry) {
            return Err(Error::Duplicate {
                what: key.to_string(),
                first: prev.name,
                second: name.clone(),
            });
        }
    }

    Ok(entries)
}
