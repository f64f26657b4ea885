//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in the relay crate: its store, its face, its sync.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event, filter, key or descriptor does not hold together (see
    /// [`fleetmesh_proto::Error`]).
    #[error(transparent)]
    Proto(#[from] fleetmesh_proto::Error),
    /// A file system operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The SQLite store failed.
    #[error("store {path}: {source}")]
    Store {
        /// The database file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A database file is empty, foreign or damaged; it is left as it is.
    #[error("store {path}: {reason}")]
    StoreDamaged {
        /// The database file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A query's blocking thread panicked or was cancelled.
    #[error("store query: {0}")]
    StoreTask(String),
    /// The database exists but was written by a newer fleetmesh.
    #[error("store {path}: schema version {found} is newer than this build supports ({supported})")]
    StoreVersion {
        /// The database file.
        path: PathBuf,
        /// The version found in the file.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// A NIP-77 sync with a peer failed.
    #[error("sync with {peer}: {reason}")]
    Sync {
        /// The peer's URL.
        peer: String,
        /// What went wrong.
        reason: String,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
