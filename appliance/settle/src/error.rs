//! What failed in settlement.

/// A settlement failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// A BOLT11 invoice that does not decode, or that a payer must refuse.
    #[error("invoice: {0}")]
    Invoice(String),
}

/// Settlement's results.
pub type Result<T> = std::result::Result<T, SettleError>;
