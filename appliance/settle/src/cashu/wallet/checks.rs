//! What the wallet asks the mint about proofs it already has: operations an earlier run
//! left in flight finished (NUT-09 restore, NUT-07 state), sent tokens seen claimed,
//! escrow taken back after its locktime, proofs it holds that were spent elsewhere, and
//! what a token is worth before anyone takes it.

use std::collections::BTreeMap;

use super::{Checked, Lock, UNIT, Wallet, unix_now};
use crate::cashu::store::Op;
use crate::cashu::{MintClient, Proof, Token, dhke, input_fee};
use crate::{Result, SettleError};

impl Wallet {
    /// Finishes what earlier runs left in flight at this mint: outputs the mint signed are
    /// restored (NUT-09), reserved inputs the mint saw spent are marked so and the others
    /// put back (NUT-07); a melt still pending at the mint stays. Returns the sats
    /// recovered.
    pub fn recover(&mut self, mint: &MintClient) -> Result<u64> {
        let mut recovered = 0;
        for op in self.store.open_ops(mint.url())? {
            recovered += self.recover_op(mint, op)?;
        }
        Ok(recovered)
    }

    fn recover_op(&mut self, mint: &MintClient, op: Op) -> Result<u64> {
        if op.kind == "melt" {
            let quote = mint.melt_quote_state(&op.detail)?;
            if quote.state == "PENDING" {
                return Ok(0);
            }
        }
        let restored = if op.outputs.is_empty() {
            Vec::new()
        } else {
            mint.restore(&Self::blinded(&op.outputs))?
        };
        let mut outputs = Vec::new();
        let mut sigs = Vec::new();
        for (msg, sig) in restored {
            if let Some(o) = op.outputs.iter().find(|o| o.b_ == msg.b_) {
                outputs.push(o.clone());
                sigs.push(sig);
            }
        }
        // a token whose swap was interrupted was never handed to anyone: its proofs are ours
        let proofs: Vec<(Proof, &str)> = self
            .unblind(mint, &outputs, &sigs)?
            .into_iter()
            .map(|(p, _)| (p, "unspent"))
            .collect();
        let amount: u64 = proofs.iter().map(|(p, _)| p.amount).sum();
        // reserved inputs the mint saw spent stay reserved until `finish` marks them spent
        let mut back = Vec::new();
        if !op.inputs.is_empty() {
            for (p, state) in op.inputs.iter().zip(Self::states(mint, &op.inputs)?) {
                match state.as_deref() {
                    Some("SPENT") => {}
                    Some("PENDING") => return Ok(0),
                    _ => back.push(p.secret.as_str()),
                }
            }
        }
        self.store.set_state(&back, "unspent")?;
        let detail = format!(
            "{} (a {} recovered after an interruption)",
            op.detail, op.kind
        );
        let note = Some(("recover", amount, 0, detail.as_str()));
        self.store
            .finish(op.op, mint.url(), &proofs, "spent", note)?;
        tracing::info!(
            mint = mint.url(),
            op = op.op,
            kind = op.kind,
            amount,
            "wallet operation recovered"
        );
        Ok(amount)
    }

    /// Sats received under `detail` (a receive, or one recovered after an interruption),
    /// if any.
    pub fn received(&self, detail: &str) -> Result<Option<u64>> {
        self.store.received(detail)
    }

    /// What `token` is worth to this wallet now: its amount less the mint's input fee,
    /// once the mint (NUT-07) says every proof is unspent and lists every keyset. Swaps
    /// nothing: a payment checked before it is taken.
    pub fn worth(&self, mint: &MintClient, token: &Token) -> Result<u64> {
        let amount = token.amount()?;
        let fee = self.fee_of(mint, &token.proofs)?;
        let states = Self::states(mint, &token.proofs)?;
        if let Some(s) = states.iter().find(|s| s.as_deref() != Some("UNSPENT")) {
            return Err(SettleError::Refused(format!(
                "a proof is {} at the mint",
                s.as_deref().unwrap_or("unknown")
            )));
        }
        amount.checked_sub(fee).filter(|w| *w > 0).ok_or_else(|| {
            SettleError::Refused(format!(
                "token worth {amount} sat does not cover the mint's {fee} sat input fee"
            ))
        })
    }

    /// Recovers interrupted operations, asks the mint (NUT-07) which proofs of our sent
    /// tokens were claimed, and takes back those still unclaimed that are ours to spend
    /// again: escrow whose locktime passed with a refund to this wallet's key. Unspent
    /// proofs the mint says are spent stop being counted.
    pub fn check(&mut self, mint: &MintClient) -> Result<Checked> {
        let recovered = self.recover(mint)?;
        let sent = self.store.proofs(mint.url(), "sent")?;
        let states = Self::states(mint, &sent)?;
        let now = unix_now();
        let (mut claimed, mut refundable) = (Vec::new(), Vec::new());
        for (p, state) in sent.into_iter().zip(states) {
            match state.as_deref() {
                Some("SPENT") => claimed.push(p),
                Some("UNSPENT") => {
                    let lock = Lock::parse(&p.secret).ok().flatten();
                    if let Some(w) =
                        lock.and_then(|l| l.witness(&p.secret, self.key.as_ref(), None, now).ok())
                    {
                        refundable.push(Proof {
                            witness: Some(w),
                            ..p
                        });
                    }
                }
                _ => {}
            }
        }
        // proofs held as unspent that the mint says are spent: a restored backup, or a
        // copy of the wallet that spent them
        let unspent = self.store.proofs(mint.url(), "unspent")?;
        let states = Self::states(mint, &unspent)?;
        let gone: Vec<Proof> = unspent
            .into_iter()
            .zip(states)
            .filter(|(_, s)| s.as_deref() == Some("SPENT"))
            .map(|(p, _)| p)
            .collect();
        let secrets: Vec<&str> = claimed
            .iter()
            .chain(&gone)
            .map(|p| p.secret.as_str())
            .collect();
        self.store.set_state(&secrets, "spent")?;
        let claimed = claimed.iter().map(|p| p.amount).sum();
        let gone = gone.iter().map(|p| p.amount).sum();
        let mut refunded = 0;
        let mut refunds = std::collections::BTreeMap::<String, u64>::new();
        for p in &refundable {
            let payee = Lock::parse(&p.secret).ok().flatten().and_then(|l| {
                let key = match l.kind {
                    crate::cashu::nut10::Kind::P2pk => Some(l.data),
                    _ => l.pubkeys.into_iter().next(),
                };
                key.as_deref().and_then(crate::cashu::nut10::x_only)
            });
            if let Some(k) = payee {
                let n = refunds.entry(hex::encode(k.to_byte_array())).or_default();
                *n = n.saturating_add(p.amount);
            }
        }
        if !refundable.is_empty() {
            let token = Token {
                mint: mint.url().to_owned(),
                unit: UNIT.into(),
                memo: None,
                proofs: refundable.clone(),
            };
            let (sats, _) = self.receive_for(mint, &token, None, "refund of a sent token")?;
            let secrets: Vec<&str> = refundable.iter().map(|p| p.secret.as_str()).collect();
            self.store.set_state(&secrets, "spent")?;
            refunded = sats;
        }
        Ok(Checked {
            recovered,
            claimed,
            refunded,
            refunds,
            gone,
        })
    }

    /// The smallest amount whose proofs, spent at this mint, leave `net` after its input
    /// fee: what a payer locks so that the payee nets `net`.
    pub fn gross(&self, mint: &MintClient, net: u64) -> Result<u64> {
        let ppk = self.active(mint)?.info.input_fee_ppk;
        let mut gross = net;
        loop {
            let fee = input_fee(std::iter::repeat_n(ppk, dhke::split(gross).len()));
            if gross >= net.saturating_add(fee) {
                return Ok(gross);
            }
            gross = net.saturating_add(fee);
        }
    }

    /// What the mint says of each proof (NUT-07): `UNSPENT`, `PENDING`, `SPENT`, or
    /// `None` where it said nothing.
    fn states(mint: &MintClient, proofs: &[Proof]) -> Result<Vec<Option<String>>> {
        let ys = proofs
            .iter()
            .map(|p| {
                let y = dhke::hash_to_curve(p.secret.as_bytes())?;
                Ok(hex::encode(y.serialize()))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut states: BTreeMap<String, String> = mint.check_state(&ys)?.into_iter().collect();
        Ok(ys.iter().map(|y| states.remove(y)).collect())
    }
}
