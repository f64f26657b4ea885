//! The verdict on whole documents: a check against the schema with the `jsonschema` crate,
//! an implementation independent of the matcher, with `format` asserted. It judges what
//! the constrained runtime wrote and what any executor (a remote one, an unconstrained
//! run) wrote, under any schema that crate takes.

use serde_json::Value;

use crate::{Error, Result};

/// A check of whole JSON documents against a schema with the `jsonschema` crate, an
/// implementation independent of the matcher: what a [`super::Grammar`] checks its
/// constrained outputs with, and what checks documents generated elsewhere (a routed executor's), under
/// any schema that crate takes — the constrained decoder's subset does not apply.
#[derive(Debug)]
pub struct SchemaCheck(jsonschema::Validator);

impl SchemaCheck {
    /// The check of documents under `schema`.
    ///
    /// # Errors
    /// [`Error::Schema`] when `schema` is not a valid JSON Schema (checked against its
    /// meta-schema), naming where.
    pub fn new(schema: &Value) -> Result<SchemaCheck> {
        // its patterns within the bounds of any compilation a request causes
        super::pattern::check_sources(schema, &super::CompileLimits::default())?;
        validator(schema)
            .map(SchemaCheck)
            .map_err(|e| Error::Schema {
                at: format!("#{}", e.schema_path()),
                reason: format!("not a valid JSON Schema: {e}"),
            })
    }

    /// Whether `text` is one JSON document valid under the schema, or the reasons not.
    pub fn validate(&self, text: &str) -> Validation {
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return Validation {
                    valid: false,
                    errors: vec![format!("not JSON: {e}")],
                };
            }
        };
        let errors: Vec<String> = self
            .0
            .iter_errors(&value)
            .take(8)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() {
                    e.to_string()
                } else {
                    format!("{at}: {e}")
                }
            })
            .collect();
        Validation {
            valid: errors.is_empty(),
            errors,
        }
    }
}

/// The verdict of [`super::Grammar::validate`] and [`SchemaCheck::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// Whether the text is one JSON document valid under the schema.
    pub valid: bool,
    /// Why not (at most 8 reasons, each naming the instance location).
    pub errors: Vec<String>,
}

/// Bytes the `jsonschema` crate's regex engine may spend on one compiled `pattern`, and on
/// its lazy DFA's cache.
const PATTERN_BYTES: usize = 2 << 20;

/// The `jsonschema` crate's validator of `schema`, with `format` asserted (the buyer asked
/// for it; unknown formats are ignored, as the specification says).
pub(super) fn validator(
    schema: &Value,
) -> std::result::Result<jsonschema::Validator, jsonschema::ValidationError<'static>> {
    // each pattern's regex bounded in bytes (the crate's default leaves it to the regex
    // engine's 10 MiB), its matching in backtracking steps
    let patterns = jsonschema::PatternOptions::fancy_regex()
        .size_limit(PATTERN_BYTES)
        .dfa_size_limit(PATTERN_BYTES)
        .backtrack_limit(1_000_000);
    jsonschema::options()
        .should_validate_formats(true)
        .with_pattern_options(patterns)
        .build(schema)
}
