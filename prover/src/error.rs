//! The crate's one error type.

/// Everything that can go wrong reading or checking proofs.
#[derive(Debug, Clone, thiserror::Error)]
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
    /// The operating system's random source failed (batch weights, proofs and setup
    /// need it).
    #[error("random source: {0}")]
    Random(String),
    /// A binary circom/snarkjs file (`kind` is `r1cs`, `wtns` or `zkey`) is malformed.
    #[error("{kind} file: {reason}")]
    Format {
        /// Which format.
        kind: &'static str,
        /// What is wrong, with the section and byte offset where it applies.
        reason: String,
    },
    /// The witness does not fit the key or circuit, or witness generation failed.
    #[error("witness: {0}")]
    Witness(String),
    /// The input for witness generation (`input.json`) is wrong: unknown signal, wrong
    /// number of values, a value that is not a number.
    #[error("input {signal:?}: {reason}")]
    Input {
        /// The signal's name.
        signal: String,
        /// What is wrong.
        reason: String,
    },
    /// The setup cannot be run for this circuit.
    #[error("setup: {0}")]
    Setup(String),
    /// The proving or verification queue is full (or stopped): retry shortly.
    #[error("{0}")]
    Busy(String),
    /// No circuit of that name is installed.
    #[error("circuit {0:?} is not installed on this node")]
    UnknownCircuit(String),
    /// An installed circuit does not load (its zkey or witness calculator).
    #[error("circuit {name}: {reason}")]
    Circuit {
        /// The circuit's name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The MSM/NTT backend failed.
    #[error(transparent)]
    Backend(#[from] fleetmesh_kernels::Error),
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn malformed(field: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Malformed {
        field: field.into(),
        reason: reason.into(),
    }
}
