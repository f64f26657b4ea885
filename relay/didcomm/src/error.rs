//! What can fail in the DIDComm service.

/// What failed in the DIDComm service.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DidcommError {
    /// A message that could not be packed or does not open, a document that does not
    /// parse.
    #[error(transparent)]
    Proto(#[from] fleetmesh_proto::Error),
    /// The agent at `to` could not be reached, or answered what this side refuses.
    #[error("{to}: {reason}")]
    Peer {
        /// The agent (its URL or DID).
        to: String,
        /// Why.
        reason: String,
    },
    /// The mediator's store.
    #[error("mediator store {path}: {reason}")]
    Store {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
}

/// The DIDComm service's results.
pub type Result<T> = std::result::Result<T, DidcommError>;
