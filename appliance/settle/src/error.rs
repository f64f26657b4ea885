//! What failed in settlement.

/// A settlement failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// A BOLT11 invoice that does not decode, or that a payer must refuse.
    #[error("invoice: {0}")]
    Invoice(String),
    /// A Cashu token that does not decode (NUT-00 `cashuA`/`cashuB`).
    #[error("token: {0}")]
    Token(String),
    /// The mint answered with a refusal (its `detail` and NUT error `code`).
    #[error("mint {url} refused ({status}{}): {detail}", code.map(|c| format!(", code {c}")).unwrap_or_default())]
    Mint {
        /// The mint.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The NUT error code, when the mint gave one.
        code: Option<i64>,
        /// What the mint said.
        detail: String,
    },
    /// The mint could not be reached or answered nonsense: whether a request took effect
    /// is unknown, so the wallet keeps the operation to recover it later.
    #[error("mint {url}: {reason}")]
    Unreachable {
        /// The mint.
        url: String,
        /// What went wrong.
        reason: String,
    },
    /// A keyset whose keys do not derive its id, or that the mint does not list.
    #[error("keyset: {0}")]
    Keyset(String),
    /// Not enough unspent ecash at that mint for the amount and its fees.
    #[error("not enough ecash at {mint}: {have} sat unspent, {need} sat needed (fees included)")]
    Funds {
        /// The mint.
        mint: String,
        /// Unspent sats there.
        have: u64,
        /// Sats the operation needs.
        need: u64,
    },
    /// Something the wallet refuses to do with these proofs or this mint (a mint not
    /// trusted, a unit it does not hold, proofs locked to someone else).
    #[error("refused: {0}")]
    Refused(String),
    /// The wallet's SQLite file.
    #[error("wallet store {path}: {reason}")]
    Store {
        /// The file.
        path: String,
        /// What failed.
        reason: String,
    },
    /// A curve point or scalar that is not valid.
    #[error("crypto: {0}")]
    Crypto(String),
}

/// Settlement's results.
pub type Result<T> = std::result::Result<T, SettleError>;
