//! The crate's one error type.

use std::fmt;
use std::path::PathBuf;

use crate::SchemaKey;

/// One way an instance fails its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON Pointer (RFC 6901) of the failing location in the instance; `""` is the root.
    /// Inside an event's JSON-encoded `content`, the pointer into the decoded content is
    /// appended to `/content` (e.g. `/content/bid/amount`).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

/// Everything that can go wrong loading schemas or validating against them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A schema file could not be read.
    #[error("reading {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A schema file is not JSON.
    #[error("schema {name}: not JSON: {source}")]
    NotJson {
        /// The schema's file name.
        name: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A schema is malformed: no `$id`, a bad `x-fleetmesh` annotation, not a valid Draft
    /// 2020-12 schema, or an unresolvable `$ref`.
    #[error("schema {name}: {reason}")]
    BadSchema {
        /// The schema's file name.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// Two schemas claim the same `$id` or the same key.
    #[error("{what} is defined twice: in {first} and in {second}")]
    Duplicate {
        /// The `$id` or key.
        what: String,
        /// The first file.
        first: String,
        /// The second file.
        second: String,
    },
    /// No schema is registered under this key.
    #[error("no schema for {0}")]
    UnknownSchema(SchemaKey),
    /// A key could not be parsed (see [`SchemaKey`]'s `FromStr`).
    #[error(
        "not a schema key: {0:?} (expected an event kind number, a manifest kind such as MeshNode, or a protocol id such as compute/1.0)"
    )]
    BadKey(String),
    /// The instance does not satisfy its schema.
    #[error("{}", display_violations(.0))]
    Invalid(Vec<Violation>),
}

fn display_violations(v: &[Violation]) -> String {
    match v {
        [] => "invalid".to_owned(),
        [one] => one.to_string(),
        [first, rest @ ..] => format!("{first} (and {} more)", rest.len()),
    }
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
