//! The accountability ledger of a fleetmesh node: what it grants each peer, what each
//! peer proves it moved, and the remedies both compute the same way from the same wire
//! evidence.
//!
//! - A **grant** (kind 30801, [`fleetmesh_proto::ledger::Grant`]) says how many events
//!   and bytes a peer may deliver per window, and the AIMD schedule of that capacity.
//! - Every window each side of a pair signs a **receipt** of what it sent and received
//!   ([`fleetmesh_proto::ledger::BudgetReceipt`], budget/1.0), chained by SHA-256.
//! - The node writes every artefact it acts on to its **evidence log**
//!   ([`evidence`]), and its state is a fold over that log ([`Ledger::apply`]): the
//!   window's measurement line has the window judged on the **S0–S4 ladder**
//!   ([`ladder`]). [`evidence::replay`] runs the same fold on a log alone — on any
//!   machine — and takes the same decisions.
//! - [`Books`] keeps the log, the fold and a SQLite file of decisions and standings in
//!   step for the daemon.
//! - [`settlement`]: every job payment between the node and a peer, recorded against the
//!   job's receipt and summed in the peer's standing (measured, never judged).
//! - [`projection`] turns a peer's standing into a NIP-85 trusted assertion (kind 30385)
//!   for standard Nostr clients.
//!
//! The rules, in integers, are docs/protocol.md's "Ledger" section.

mod error;
pub mod evidence;
pub mod ladder;
pub mod projection;
pub mod settlement;
pub mod store;

pub use error::{LedgerError, Result};
pub use evidence::{Counts, EvidenceLog, Line};
pub use ladder::{Decision, Ledger, Standing};
pub use settlement::{Settled, Settlement};
pub use store::Books;
