//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong loading a model or running it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A model file is not what the loader expects (a bad config, a missing or misshapen
    /// tensor).
    #[error("{path}: {reason}")]
    Model {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key or tensor.
        reason: String,
    },
    /// A request the model cannot serve (an empty prompt, a token id outside the
    /// vocabulary, a context longer than the model's).
    #[error("{0}")]
    Request(String),
    /// An executor could not produce an output: an endpoint that is unreachable, times
    /// out, answers with an error or with a body that lacks what the quorum needs.
    #[error("executor {executor}: {reason}")]
    Executor {
        /// The executor's name.
        executor: String,
        /// What went wrong.
        reason: String,
    },
    /// An executor serves another model than the one asked for: it states a model digest
    /// other than the one pinned for it, or a base digest other than the quorum's model.
    #[error("executor {executor} serves another model: {reason}")]
    WrongModel {
        /// The executor's name.
        executor: String,
        /// What it stated against what was expected.
        reason: String,
    },
    /// A JSON Schema constrained decoding cannot follow: a keyword outside the supported
    /// subset, a `$ref` outside the document, bounds no value meets.
    #[error("schema {at}: {reason}")]
    Schema {
        /// Where in the schema, as a JSON pointer fragment (`#/properties/zip`).
        at: String,
        /// What is wrong.
        reason: String,
    },
    /// Work stopped before it was done because nobody waits for it any more: its
    /// requester went away, the node is stopping, or it waited past its deadline for a
    /// turn (a schema compilation, [`crate::schema::CompileLimits`]).
    #[error("abandoned: {0}")]
    Abandoned(String),
    /// The device named for a model cannot run it: a CUDA device this build or machine
    /// cannot open (a missing library, an ordinal past the device count), a model larger
    /// than its free memory, or a device that stopped answering.
    #[error("{0}")]
    Device(String),
    /// A tensor operation failed inside candle.
    #[error("{op}: {source}")]
    Candle {
        /// What was being done.
        op: &'static str,
        /// candle's error.
        source: candle_core::Error,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds the operation's name to a candle error.
pub(crate) trait CandleContext<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> CandleContext<T> for candle_core::Result<T> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| Error::Candle { op, source })
    }
}
