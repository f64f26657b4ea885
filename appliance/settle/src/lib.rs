//! fleetmesh's settlement rails: how a job gets paid.
//!
//! - [`bolt11`]: Lightning invoices (BOLT #11) decoded, their signature checked and their
//!   payee recovered, as `meshnode settle decode` prints them; what L402 and the Cashu
//!   mint's quotes carry.
//! - [`cashu`]: a Cashu ecash wallet against a real mint (NUT-00…05, 07, 08, 09): tokens,
//!   blind signatures, proofs in SQLite, every request written ahead; `meshnode wallet`.
//!
//! - [`nwc`]: Nostr Wallet Connect (NIP-47) answered from that wallet: connection URIs,
//!   the connections a node grants with their methods and budgets, the requests' answers,
//!   the wallet service over relays ([`nwc::start`]), and the client side
//!   ([`nwc::request`], [`nwc::NwcLightning`]).
//! - [`lightning`]: invoices issued and paid through one trait, whatever holds the
//!   channels: the Cashu mint's bolt11 quotes, LND's or Core Lightning's REST API.
//! - [`l402`]: paid HTTP requests (bLIP-26): macaroons, challenges, credentials, and the
//!   record of credentials used; the appliance prices its API routes with it.
//! - [`lnurl`]: a Lightning address or LNURL-pay service asked for an invoice, checked.
//! - [`nutzap`]: nutzaps (NIP-61): the recipient's kind 10019 and the kind 9321 of
//!   P2PK-locked proofs, written and read, the check of what a recipient may take, and
//!   the node's redeemer ([`nutzap::start`]).
//!
//! The services over relays reach them through [`fleetmesh_port::RelayPort`], which the
//! daemon hands them.

pub mod bolt11;
pub mod cashu;
mod error;
mod http;
pub mod l402;
pub mod lightning;
pub mod lnurl;
pub mod nutzap;
pub mod nwc;

pub use error::{Result, SettleError};

/// Opens the SQLite file at `path`, refusing one written by a newer build than schema
/// version `schema` (`PRAGMA user_version`), waiting up to 10 s for another process's
/// write; the wallet and the NWC grants open theirs so.
fn open_db(path: &std::path::Path, schema: i64) -> Result<rusqlite::Connection> {
    let shown = path.display().to_string();
    let err = |e: rusqlite::Error| SettleError::Store {
        path: shown.clone(),
        reason: e.to_string(),
    };
    let conn = rusqlite::Connection::open(path).map_err(err)?;
    // the daemon and the command line share these files: a writer waits for the other
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(err)?;
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err)?;
    if version > schema {
        return Err(SettleError::Store {
            path: shown,
            reason: format!("schema version {version} is newer than this build's {schema}"),
        });
    }
    Ok(conn)
}
