//! fleetmesh's settlement rails: how a job gets paid.
//!
//! - [`bolt11`]: Lightning invoices (BOLT #11) decoded, their signature checked and their
//!   payee recovered, as `meshnode settle decode` prints them; what L402 and the Cashu
//!   mint's quotes carry.
//! - [`cashu`]: a Cashu ecash wallet against a real mint (NUT-00…05, 07, 08, 09): tokens,
//!   blind signatures, proofs in SQLite, every request written ahead; `meshnode wallet`.
//!
//! The rest of settlement (L402 on the HTTP API, escrow, NWC) builds on these types; see
//! the market issue.

pub mod bolt11;
pub mod cashu;
mod error;

pub use error::{Result, SettleError};
