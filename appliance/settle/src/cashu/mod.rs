//! A Cashu ecash wallet (NUT-00…05, 07, 08, 09) that talks to a real mint's HTTP API.
//!
//! - [`dhke`]: the blind signatures themselves, keyset ids, amounts.
//! - [`token`]: `cashuB…`/`cashuA…` tokens as people paste them.
//! - [`nut10`]: locked proofs (NUT-11 P2PK, NUT-14 HTLC, locktime and refund): escrow.
//! - [`MintClient`]: the mint's `/v1` API (keys, keysets, quotes, mint, swap, melt,
//!   checkstate, restore), bounded in time and in bytes.
//! - [`Wallet`]: proofs in a SQLite file; mint, send, receive, pay an invoice, check,
//!   with every request to the mint written ahead so that a crash between the mint's
//!   answer and the wallet's record loses nothing ([`Wallet::recover`] asks the mint
//!   again, NUT-09 restore and NUT-07 checkstate).
//!
//! `meshnode wallet …` is this module on the command line.

pub mod dhke;
mod mint;
pub mod nut10;
mod store;
pub mod token;
mod wallet;

use serde::{Deserialize, Serialize};

pub use mint::{KeysetInfo, MeltQuote, MintClient, MintQuote};
pub use store::HistoryLine;
pub use token::Token;
pub use wallet::{Balance, Checked, Paid, Wallet};

/// The file a node's (or a buyer's) Cashu wallet lives in, inside its directory.
pub const WALLET_FILE: &str = "wallet.sqlite";

/// A proof: the mint's unblinded signature `C` on `secret`, worth `amount` in the keyset
/// `id`'s unit. Whoever holds it can spend it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// Its value.
    pub amount: u64,
    /// The keyset (hex).
    pub id: String,
    /// The secret (a string; 64 hex characters for plain proofs, NUT-10 JSON for locked
    /// ones).
    pub secret: String,
    /// The signature, a compressed point in hex.
    #[serde(rename = "C")]
    pub c: String,
    /// The witness that unlocks a NUT-10 secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness: Option<String>,
}

/// A blinded message (`B_`) the wallet asks the mint to sign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlindedMessage {
    /// The amount to sign for.
    pub amount: u64,
    /// The keyset to sign with.
    pub id: String,
    /// `B_`, hex.
    #[serde(rename = "B_")]
    pub b_: String,
}

/// The mint's signature (`C_`) on a blinded message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlindSignature {
    /// The amount signed for (set by the mint for NUT-08 blank outputs).
    pub amount: u64,
    /// The keyset that signed.
    pub id: String,
    /// `C_`, hex.
    #[serde(rename = "C_")]
    pub c_: String,
}

/// The fee the mint takes for spending `inputs` (NUT-02): the sum of each input's keyset
/// `input_fee_ppk`, in thousandths, rounded up.
pub fn input_fee(ppks: impl IntoIterator<Item = u64>) -> u64 {
    ppks.into_iter().sum::<u64>().div_ceil(1000)
}

#[cfg(test)]
mod tests;
