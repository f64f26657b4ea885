//! Payments between the node and its peers, as the ledger records them: every job
//! payment the node took or made reaches the evidence log as a `settled` line
//! ([`crate::Line::Settled`]) naming the peer, the job as its receipt names it (the
//! blinded id, which only the buyer and the provider can tie to the job) and the receipt
//! itself, and each peer's [`Standing`](crate::Standing) sums them ([`Settled`]).
//!
//! Payments are measured, never judged: they take no rung of the ladder. Their totals are
//! the operator's (`meshnode ledger show`), never published in an assertion.

use serde::{Deserialize, Serialize};

/// Which side of a payment the node was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The peer paid the node (the node ran its job).
    Payee,
    /// The node paid the peer (the node bought a job of it).
    Payer,
}

/// What became of a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// The payer locked it to the payee (Cashu escrow) and sent it with the job.
    Escrowed,
    /// The payee redeemed it after the job's receipt: the sats are the payee's.
    Redeemed,
    /// The payee could not redeem it (the mint refused or was unreachable).
    Unredeemed,
    /// The job failed: the payee leaves the escrow to the payer's refund.
    Released,
    /// The payer took it back after its locktime.
    Refunded,
}

/// One payment between the node and a peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settlement {
    /// The node's side.
    pub role: Role,
    /// What became of it.
    pub state: State,
    /// The rail (`cashu`).
    pub method: String,
    /// Where the money sits (the mint's URL).
    pub at: String,
    /// Sats: locked (escrowed, released, unredeemed), netted (redeemed), taken back
    /// (refunded).
    pub amount_sat: u64,
    /// The job as its receipt names it: the id blinded for the pair
    /// ([`fleetmesh_proto::receipt::blinded_job_id`]); absent for a refund, which the
    /// mint does not tie to a job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The job's receipt (event id), where the node holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
}

impl Settlement {
    /// Whether its state fits its role: a payee records what it did with escrow it holds
    /// (redeemed, unredeemed, released), a payer what it locked and took back (escrowed,
    /// refunded).
    ///
    /// # Errors
    /// The mismatch, in words.
    pub fn check(&self) -> Result<(), String> {
        let fits = match self.role {
            Role::Payee => matches!(
                self.state,
                State::Redeemed | State::Unredeemed | State::Released
            ),
            Role::Payer => matches!(self.state, State::Escrowed | State::Refunded),
        };
        if fits {
            Ok(())
        } else {
            Err(format!(
                "a {:?} payment cannot be {:?}",
                self.role, self.state
            ))
        }
    }
}

/// A peer's payments with the node, summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settled {
    /// Jobs paid between the two (a payer's escrow, a payee's end of one).
    pub jobs: u64,
    /// Sats the node redeemed of the peer's escrow.
    pub received_sat: u64,
    /// Sats of the peer's escrow the node could not redeem.
    #[serde(default, skip_serializing_if = "crate::evidence::is_zero")]
    pub unredeemed_sat: u64,
    /// Sats of the peer's escrow left to its refund (its jobs failed).
    #[serde(default, skip_serializing_if = "crate::evidence::is_zero")]
    pub released_sat: u64,
    /// Sats the node locked to the peer.
    pub paid_sat: u64,
    /// Sats of those the node took back after their locktime.
    #[serde(default, skip_serializing_if = "crate::evidence::is_zero")]
    pub refunded_sat: u64,
}

impl Settled {
    /// Whether nothing was paid either way (a standing without payments leaves it out).
    pub fn is_empty(&self) -> bool {
        *self == Settled::default()
    }

    /// Adds one payment ([`Settlement::check`]ed).
    pub fn add(&mut self, s: &Settlement) {
        let n = s.amount_sat;
        let total = match s.state {
            State::Redeemed => &mut self.received_sat,
            State::Unredeemed => &mut self.unredeemed_sat,
            State::Released => &mut self.released_sat,
            State::Escrowed => &mut self.paid_sat,
            State::Refunded => &mut self.refunded_sat,
        };
        *total = total.saturating_add(n);
        if s.state != State::Refunded {
            self.jobs = self.jobs.saturating_add(1);
        }
    }
}
