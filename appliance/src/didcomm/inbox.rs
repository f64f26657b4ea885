//! Ledger messages (budget/1.0 receipts and grants, complaint/1.0 notices) that arrive as
//! signed DIDComm messages: handed, with their verified sender, to the ledger's bounded
//! inbox (`crate::ledger`); nothing of theirs runs here.

use fleetmesh_proto::didcomm::Message;
use serde_json::Value;

use super::{DidComm, Outcome, count};

/// The DIDComm types of the accountability ledger's messages between peers: a budget/1.0
/// receipt, a grant, a complaint/1.0 notice (`crate::ledger`).
pub const LEDGER_TYPES: &[&str] = &[
    "https://fleetmesh.org/budget/1.0/receipt",
    "https://fleetmesh.org/budget/1.0/grant",
    "https://fleetmesh.org/complaint/1.0/complaint",
];

impl DidComm {
    /// Hands ledger messages to `inbox` from now on (before: refused, 503).
    #[cfg_attr(not(feature = "federation"), allow(dead_code))]
    pub fn set_ledger(&self, inbox: tokio::sync::mpsc::Sender<(String, String, Value)>) {
        *self
            .ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(inbox);
    }

    /// Hands the ledger message `m` from `sender` (hex) to the ledger's inbox: 202 when
    /// taken, 429 when the inbox is full, 503 when the node keeps no ledger.
    pub(super) fn to_ledger(&self, sender: String, m: &Message) -> Outcome {
        let inbox = self
            .ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some(inbox) = inbox else {
            count("refused");
            return Outcome::Refused(503, "no_ledger", "this node keeps no ledger".into());
        };
        match inbox.try_send((sender, m.type_.clone(), m.body.clone())) {
            Ok(()) => {
                count("accepted");
                Outcome::Accepted
            }
            Err(_) => {
                count("refused");
                Outcome::Refused(429, "busy", "the ledger's inbox is full".into())
            }
        }
    }
}
