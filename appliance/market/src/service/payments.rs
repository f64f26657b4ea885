//! Paid jobs: what a priced node asks of a job before it accepts it, and what it does with
//! the payment once the job's receipt is out.
//!
//! A node prices an engine with `[jobs.prices]` ([`super::Price`]). A job of a priced
//! engine must carry a `payment` in its (sealed) job message, worth at least the price of
//! the most the job may use (its ask's limits); the [`Payments`] the appliance gives the
//! service checks it as escrow — a Cashu token locked to this node's key, refundable to
//! the buyer only after the ask expired — and redeems it once the job is verified and its
//! receipt signed. A failed or expired job's escrow is left to the buyer's refund.

use fleetmesh_proto::Unit;
use fleetmesh_proto::ask::Ask;
use serde_json::Value;

use super::Price;
use crate::Refusal;

/// What a payment check accepted: recorded with the job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Escrow {
    /// The rail (`cashu`).
    pub method: String,
    /// Where the money sits (the mint's URL).
    pub at: String,
    /// Sats held.
    pub amount_sat: u64,
}

/// How the node takes payment (the appliance implements it over its Cashu wallet).
pub trait Payments: Send + Sync {
    /// Checks the `payment` of a job message (compute/1.0) for job `job_id` of `ask`:
    /// at least `need_sat` sats when the node prices the job (`None`: it does not, and a
    /// payment, if any, is still checked). Returns the escrow to record, `None` for an
    /// unpaid job the node does not price.
    ///
    /// # Errors
    /// `payment-required` (none where one is needed) or `payment-invalid` (naming why).
    fn escrow(
        &self,
        job_id: &str,
        ask: &Ask,
        payment: Option<&Value>,
        need_sat: Option<u64>,
    ) -> Result<Option<Escrow>, Refusal>;

    /// Redeems the escrowed `payment` of a verified job of `ask`; the sats now the node's.
    ///
    /// # Errors
    /// Why it could not (the mint unreachable, the proofs already spent).
    fn redeem(&self, job_id: &str, ask: &Ask, payment: &Value) -> Result<u64, String>;

    /// Called once a job's payment has reached its end, as the job store records it
    /// (`state` `redeemed`, `unredeemed` or `released`, with `receipt`): `job` is the job
    /// as its receipt names it (blinded for the pair). The appliance records it against
    /// `buyer` in its ledger.
    fn settled(&self, _buyer: &str, _job: &str, _payment: &Value) {}

    /// The hash a `delivery`-mode ask's escrow may be locked to (NUT-14 HTLC, SHA-256 hex),
    /// named in this node's offer; `None` where the node takes no such escrow.
    fn delivery_lock(&self, _ask: &Ask) -> Option<String> {
        None
    }

    /// The preimage of [`Payments::delivery_lock`] (hex), revealed with the output of the
    /// ask's job once it is delivered.
    fn delivery_key(&self, _ask: &Ask) -> Option<String> {
        None
    }
}

/// A node that takes no payments: an unpaid job is accepted, a paid or priced one refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoPayments;

impl Payments for NoPayments {
    fn escrow(
        &self,
        _: &str,
        _: &Ask,
        payment: Option<&Value>,
        need_sat: Option<u64>,
    ) -> Result<Option<Escrow>, Refusal> {
        match (payment, need_sat) {
            (None, None) => Ok(None),
            _ => Err(crate::refuse(
                "payment-invalid",
                "this node takes no payments (no wallet)",
            )),
        }
    }

    fn redeem(&self, _: &str, _: &Ask, _: &Value) -> Result<u64, String> {
        Err("this node takes no payments".into())
    }
}

/// The most a job with the ask's `limits` can cost at `price`, in sats (rounded up): the
/// price times the limit of what is charged for (`job`: one). `None` where the price is
/// not in `msat` or `sat`, or the limits do not bound what the price is per. Buyers use it
/// too, on the prices a node advertises, before they lock a payment.
pub fn price_sat(price: &Price, limits: &Value) -> Option<u64> {
    let count = match price.per.as_str() {
        "job" => 1,
        "fuel" => limits["fuel"].as_u64()?,
        "token" => limits["tokens"].as_u64()?,
        "proof" => limits["proofs"].as_u64()?,
        "second" => limits["wall_secs"].as_u64()?,
        "byte" => limits["output_bytes"].as_u64()?,
        _ => return None,
    };
    let total = u128::from(count) * u128::from(price.amount);
    let in_unit = total.div_ceil(u128::from(price.quantity.max(1)));
    let msat = match price.unit {
        Unit::Msat => in_unit,
        Unit::Sat => in_unit * 1000,
        _ => return None,
    };
    u64::try_from(msat.div_ceil(1000)).ok()
}
