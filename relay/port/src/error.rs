//! What can fail through the port.

/// What failed through the relay port.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PortError {
    /// The node's relay refused the event; the NIP-01 message (`invalid: …`, `error: …`).
    #[error("{0}")]
    Refused(String),
    /// The node's store could not be read.
    #[error("reading the store: {0}")]
    Store(String),
    /// A remote relay could not be reached, refused, or the connection ended.
    #[error("relay {url}: {reason}")]
    Remote {
        /// The relay.
        url: String,
        /// Why.
        reason: String,
    },
}

/// The port's result.
pub type Result<T> = std::result::Result<T, PortError>;
