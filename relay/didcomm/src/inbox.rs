//! Ledger messages (budget/1.0 receipts and grants, complaint/1.0 notices) that arrive as
//! signed DIDComm messages: handed, with their verified sender, to the ledger's bounded
//! inbox (the daemon's ledger); nothing of theirs runs here.

use fleetmesh_proto::didcomm::Message;
use serde_json::Value;

use super::{DidComm, Outcome, count};

/// The DIDComm types of the accountability ledger's messages between peers: a budget/1.0
/// receipt, a grant, a complaint/1.0 notice.
pub const LEDGER_TYPES: &[&str] = &[
    "https://fleetmesh.org/budget/1.0/receipt",
    "https://fleetmesh.org/budget/1.0/grant",
    "https://fleetmesh.org/complaint/1.0/complaint",
];

/// Whether the ledger takes messages from a key (hex): a linked or granted peer.
pub type Knows = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Where ledger messages go, and from whom they are taken.
#[derive(Clone)]
pub(super) struct LedgerInbox(tokio::sync::mpsc::Sender<(String, String, Value)>, Knows);

impl DidComm {
    /// Hands ledger messages from the keys `knows` accepts to `inbox` from now on (before:
    /// refused, 503; from anyone else: refused, 403).
    pub fn set_ledger(
        &self,
        inbox: tokio::sync::mpsc::Sender<(String, String, Value)>,
        knows: Knows,
    ) {
        *self
            .ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(LedgerInbox(inbox, knows));
    }

    /// Hands the ledger message `m` from `sender` (hex) to the ledger's inbox: 202 when
    /// taken, 403 from a key that is not a peer's (its messages would only grow the
    /// evidence log), 429 when the inbox is full, 503 when the node keeps no ledger.
    pub(super) fn to_ledger(&self, sender: String, m: &Message) -> Outcome {
        let inbox = self
            .ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let Some(LedgerInbox(inbox, knows)) = inbox else {
            count("refused");
            return Outcome::Refused(503, "no_ledger", "this node keeps no ledger".into());
        };
        if !knows(&sender) {
            count("refused");
            return Outcome::Refused(
                403,
                "not_a_peer",
                format!("{sender} is neither linked with this node nor granted by it"),
            );
        }
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
