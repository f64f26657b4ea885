//! The crate's one error type.

/// Everything that can go wrong reading or checking proofs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value in a snarkjs JSON document is malformed: not canonical, not on the curve,
    /// not in the subgroup, the point at infinity where it is not allowed, a wrong type.
    /// `field` is the path to it (e.g. `pi_b[1][0]`).
    #[error("{field}: {reason}")]
    Malformed {
        /// Where in the document.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// The number of public inputs does not match the verifying key.
    #[error("public inputs: the verifying key takes {expected}, got {got}")]
    PublicCount {
        /// What the key takes (`nPublic`).
        expected: usize,
        /// What was given.
        got: usize,
    },
    /// The operating system's random source failed (batch weights need it).
    #[error("random source: {0}")]
    Random(String),
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn malformed(field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Malformed {
        field: field.into(),
        reason: reason.into(),
    }
}
