//! The crate's one error type.

/// Why evidence could not be had or did not hold.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Attestation evidence (a report, a certificate, a CRL, a RIM) that does not parse.
    #[error("malformed evidence: {0}")]
    EvidenceMalformed(String),
    /// Attestation evidence that parses and fails a check (signature, chain, binding,
    /// policy); the reason names the first check that failed.
    #[error("invalid evidence: {0}")]
    EvidenceInvalid(String),
    /// This host cannot produce evidence (no configfs-tsm, no NVIDIA driver), or the kernel
    /// or driver refused; evidence is never made up.
    #[error("{0}")]
    Unavailable(String),
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;
