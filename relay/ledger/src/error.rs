//! What failed in the ledger.

/// A ledger failure: the evidence log or the ledger's SQLite file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The evidence log could not be read or appended to.
    #[error("evidence log {path}: {source}")]
    Log {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The ledger's SQLite file: opening (a damaged file is refused, never recreated) or a
    /// statement.
    #[error("ledger store {path}: {reason}")]
    Store {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// Another process (a running node) holds the books open for writing.
    #[error("ledger {path} is held by another process (a running node)")]
    Busy {
        /// The ledger's directory.
        path: String,
    },
}

/// The ledger's results.
pub type Result<T> = std::result::Result<T, LedgerError>;
