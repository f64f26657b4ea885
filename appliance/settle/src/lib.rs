//! fleetmesh's settlement rails: how a job gets paid.
//!
//! - [`bolt11`]: Lightning invoices (BOLT #11) decoded, their signature checked and their
//!   payee recovered, as `meshnode settle decode` prints them; what L402 and the Cashu
//!   mint's quotes carry.
//!
//! The rest of settlement (L402 on the HTTP API, the Cashu wallet and escrow, NWC) builds
//! on these types; see the market issue.

pub mod bolt11;
mod error;

pub use error::{Result, SettleError};
