//! The crate's one error type.

/// Everything that can go wrong choosing or probing a backend.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A backend name that is not `auto`, `cpu`, `wgpu` or `cuda[:N]`.
    #[error("unknown backend {0:?} (expected auto, cpu, wgpu or cuda:N)")]
    BadBackend(String),
    /// The backend was not compiled into this build.
    #[error("this build has no {backend} support (rebuild with the `{feature}` feature)")]
    NotCompiled {
        /// The backend.
        backend: &'static str,
        /// The Cargo feature that enables it.
        feature: &'static str,
    },
    /// The backend was asked for explicitly but this machine cannot provide it.
    #[error("backend {backend} is not available here: {reason}")]
    Unavailable {
        /// The backend asked for.
        backend: String,
        /// Why not.
        reason: String,
    },
    /// An MSM or NTT was called with inputs it cannot take (mismatched lengths, an NTT size
    /// that is not a supported power of two).
    #[error("{op}: {reason}")]
    Arith {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        reason: String,
    },
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
