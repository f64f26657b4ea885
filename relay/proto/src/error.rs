//! The crate's one error type.

use std::path::PathBuf;

/// A protocol noun that does not hold together, or a key that cannot be used.
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
    /// An event of another kind where one kind was expected.
    #[error("kind {found} is not {what} (kind {expected})")]
    WrongKind {
        /// What was expected, in words ("an ask").
        what: &'static str,
        /// The kind expected.
        expected: u16,
        /// The kind found.
        found: u16,
    },
    /// An event breaks its kind's JSON Schema (every violation, listed).
    #[error("{0}")]
    Schema(String),
    /// A tag disagrees with the content it repeats; `field` names it.
    #[error("the {field} tag says {tag:?}, the content says {content}")]
    Mismatch {
        /// The tag's name.
        field: &'static str,
        /// The tag's value.
        tag: String,
        /// The content's value (JSON).
        content: String,
    },
    /// The event's NIP-40 expiration has passed.
    #[error("the {what} expired at {expired_at} (now {now})")]
    Expired {
        /// What expired, in words ("ask").
        what: &'static str,
        /// Its expiration, Unix seconds.
        expired_at: u64,
        /// The time it was checked at.
        now: u64,
    },
    /// A word of the protocol (a verification mode, an engine) that is not one of its values.
    #[error("{what} {found:?} is not one of {expected}")]
    UnknownWord {
        /// Which word ("verification mode", "engine").
        what: &'static str,
        /// What was found.
        found: String,
        /// The values there are, comma-separated.
        expected: String,
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
    /// A file system operation on a key file or an append-only log ([`crate::linelog`])
    /// failed.
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
    /// A gift wrap (NIP-59) that does not open or does not hold together; the reason
    /// names the layer and the check.
    #[error("gift wrap: {0}")]
    GiftWrap(String),
    /// A DIDComm message that does not open or does not hold together; the reason names
    /// the layer and the check.
    #[error("didcomm: {0}")]
    DidComm(String),
    /// A hop envelope (`fleetmesh/hop/1`) whose path does not hold; the reason names the
    /// hop and the check.
    #[error("hop envelope: {0}")]
    Hop(String),
    /// The operating system's random source failed.
    #[error("random source: {0}")]
    Random(String),
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
