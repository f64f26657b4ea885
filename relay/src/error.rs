//! The crate's one error type.

use std::path::PathBuf;

/// Everything that can go wrong in the relay crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An event is malformed or fails verification; `field` names the culprit.
    #[error("invalid event: {field}: {reason}")]
    InvalidEvent {
        /// The failing field (`id`, `sig`, `pubkey`, `tags`, `content`, or `event`).
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Encryption or key derivation refused its input (NIP-44 payloads, HKDF lengths, a
    /// public key off the curve); the reason names the first failed check.
    #[error("crypto: {0}")]
    Crypto(String),
    /// A node descriptor does not hold together (keys, DID, proofs).
    #[error("invalid node descriptor: {0}")]
    InvalidDescriptor(String),
    /// A peer speaks another version of the protocol: its descriptor's protocol digest is
    /// not ours, so the two nodes must not peer directly.
    #[error("protocol mismatch: peer {peer} has protocol digest {theirs}, ours is {ours}")]
    ProtocolMismatch {
        /// The peer's pubkey, hex.
        peer: String,
        /// Our digest, hex.
        ours: String,
        /// Theirs, hex.
        theirs: String,
    },
    /// A key file is missing, malformed, or readable by others.
    #[error("key file {path}: {reason}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why it was refused.
        reason: String,
    },
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
    /// The operating system's random source failed.
    #[error("random source: {0}")]
    Random(String),
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
