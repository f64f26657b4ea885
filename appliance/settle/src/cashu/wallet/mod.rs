//! The wallet: proofs of any number of mints in one SQLite file ([`super::store`]), and
//! the operations a user runs on them. Each takes the [`MintClient`] of the mint it works
//! with and first finishes whatever an earlier run left in flight there.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use secp256k1::PublicKey;
use serde::Serialize;

mod checks;

use super::nut10::Lock;
use super::store::{HistoryLine, Output, Store};
use super::{
    BlindSignature, BlindedMessage, KeysetInfo, MintClient, MintQuote, Proof, Token, dhke,
    input_fee,
};
use crate::{Result, SettleError};

/// The unit this wallet holds.
pub const UNIT: &str = "sat";

/// The most keysets the proofs of one token or operation may come from.
pub const MAX_KEYSETS: usize = 16;

/// The largest amount one operation moves (amounts are stored as SQLite integers).
pub const MAX_AMOUNT: u64 = 1 << 53;

/// What one mint's ecash in the wallet adds up to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Balance {
    /// The mint.
    pub mint: String,
    /// Sats ours to spend.
    pub unspent: u64,
    /// Sats in tokens handed out that the mint has not yet seen spent.
    pub sent: u64,
    /// Sats in operations in flight.
    pub reserved: u64,
}

/// What [`Wallet::check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Checked {
    /// Sats of interrupted operations recovered.
    pub recovered: u64,
    /// Sats of sent tokens the mint saw spent.
    pub claimed: u64,
    /// Sats of sent escrow taken back after its locktime.
    pub refunded: u64,
    /// The same escrow per key it was locked to (x-only, hex: the payee), in sats of its
    /// proofs before the mint's fee.
    pub refunds: BTreeMap<String, u64>,
    /// Sats the wallet held as unspent that the mint says were spent (a restored backup,
    /// a copy of the wallet spending them): no longer counted.
    pub gone: u64,
}

/// A paid invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Paid {
    /// The invoice's amount, sats.
    pub amount: u64,
    /// What paying it cost beyond that (Lightning fee and the mint's input fee).
    pub fee: u64,
    /// The payment's preimage, hex, when the mint gave it.
    pub preimage: Option<String>,
}

/// A hook run after a mint answered and before the answer is recorded: tests kill the
/// process there to show that nothing is lost.
pub type AnswerHook = Box<dyn Fn(&str) + Send>;

/// A Cashu wallet over one SQLite file.
pub struct Wallet {
    store: Store,
    on_answer: Option<AnswerHook>,
    key: Option<secp256k1::Keypair>,
}

impl std::fmt::Debug for Wallet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wallet").finish_non_exhaustive()
    }
}

/// An operation as the history records it.
struct Entry<'a> {
    kind: &'a str,
    detail: &'a str,
    amount: u64,
    fee: u64,
}

/// The keyset new outputs are signed with, and its keys.
struct Active {
    info: KeysetInfo,
    keys: BTreeMap<u64, PublicKey>,
}

impl Wallet {
    /// Opens the wallet file, creating it if absent; a damaged file is refused.
    pub fn open(path: &Path) -> Result<Wallet> {
        Ok(Wallet {
            store: Store::open(path)?,
            on_answer: None,
            key: None,
        })
    }

    /// The key that unlocks proofs locked to this wallet (NUT-11, NUT-14): the node's
    /// Nostr key.
    pub fn set_key(&mut self, key: secp256k1::Keypair) {
        self.key = Some(key);
    }

    /// Runs `hook` (with the operation's kind) between each answer of the mint and its
    /// record. For fault-injection tests only.
    pub fn set_answer_hook(&mut self, hook: AnswerHook) {
        self.on_answer = Some(hook);
    }

    fn answered(&self, kind: &str) {
        if let Some(h) = &self.on_answer {
            h(kind);
        }
    }

    /// The balance per mint, from the file alone.
    pub fn balances(&self) -> Result<Vec<Balance>> {
        let mut out: Vec<Balance> = Vec::new();
        for (mint, state, sum) in self.store.sums()? {
            if out.last().is_none_or(|b| b.mint != mint) {
                out.push(Balance {
                    mint: mint.clone(),
                    ..Balance::default()
                });
            }
            let b = out.last_mut().expect("pushed above");
            match state.as_str() {
                "unspent" => b.unspent += sum,
                "sent" => b.sent += sum,
                "reserved" => b.reserved += sum,
                _ => {}
            }
        }
        Ok(out)
    }

    /// The last `n` payments in and out, newest first.
    pub fn history(&self, n: usize) -> Result<Vec<HistoryLine>> {
        self.store.history(n)
    }

    /// The keyset info and keys of `id` at this mint: from the file, else fetched (and
    /// checked against the id).
    fn keyset(
        &self,
        mint: &MintClient,
        id: &str,
    ) -> Result<(KeysetInfo, BTreeMap<u64, PublicKey>)> {
        if let Some(k) = self.store.keyset(mint.url(), id)? {
            return Ok(k);
        }
        let info = mint
            .keysets()?
            .into_iter()
            .find(|k| k.id == id)
            .ok_or_else(|| {
                SettleError::Keyset(format!("{} does not list keyset {id}", mint.url()))
            })?;
        let keys = mint.keys(id)?;
        self.store.put_keyset(mint.url(), &info, &keys)?;
        Ok((info, keys))
    }

    /// The active `sat` keyset with the lowest input fee, its info refreshed.
    fn active(&self, mint: &MintClient) -> Result<Active> {
        let sets = mint.keysets()?;
        let info = sets
            .iter()
            .filter(|k| k.active && k.unit == UNIT && k.id.starts_with("00"))
            .min_by_key(|k| k.input_fee_ppk)
            .cloned()
            .ok_or_else(|| {
                SettleError::Keyset(format!("{} has no active sat keyset", mint.url()))
            })?;
        let keys = match self.store.keyset(mint.url(), &info.id)? {
            Some((_, keys)) => keys,
            None => mint.keys(&info.id)?,
        };
        self.store.put_keyset(mint.url(), &info, &keys)?;
        Ok(Active { info, keys })
    }

    /// Fresh outputs for `amounts` in the active keyset, bound for `dest`, their secrets
    /// carrying `lock` if given.
    fn outputs(
        active: &Active,
        amounts: &[u64],
        dest: &'static str,
        lock: Option<&Lock>,
    ) -> Result<Vec<Output>> {
        amounts
            .iter()
            .map(|&amount| {
                if !active.keys.contains_key(&amount) {
                    return Err(SettleError::Keyset(format!(
                        "keyset {} has no key for {amount}",
                        active.info.id
                    )));
                }
                let secret = match lock {
                    Some(l) => l.secret()?,
                    None => dhke::random_secret()?,
                };
                let r = dhke::random_scalar()?;
                let b_ = dhke::blind(secret.as_bytes(), &r)?;
                Ok(Output {
                    id: active.info.id.clone(),
                    amount,
                    secret,
                    r: hex::encode(r.to_secret_bytes()),
                    b_: hex::encode(b_.serialize()),
                    dest,
                })
            })
            .collect()
    }

    fn blinded(outputs: &[Output]) -> Vec<BlindedMessage> {
        outputs
            .iter()
            .map(|o| BlindedMessage {
                amount: o.amount,
                id: o.id.clone(),
                b_: o.b_.clone(),
            })
            .collect()
    }

    /// Proofs from the mint's signatures on `outputs` (pairwise, in order).
    fn unblind(
        &self,
        mint: &MintClient,
        outputs: &[Output],
        sigs: &[BlindSignature],
    ) -> Result<Vec<(Proof, &'static str)>> {
        if sigs.len() > outputs.len() {
            return Err(SettleError::Unreachable {
                url: mint.url().to_owned(),
                reason: format!("{} signatures for {} outputs", sigs.len(), outputs.len()),
            });
        }
        let mut keysets: BTreeMap<String, BTreeMap<u64, PublicKey>> = BTreeMap::new();
        let mut proofs = Vec::with_capacity(sigs.len());
        for (o, s) in outputs.iter().zip(sigs) {
            if !keysets.contains_key(&s.id) {
                let (_, keys) = self.keyset(mint, &s.id)?;
                keysets.insert(s.id.clone(), keys);
            }
            let k = keysets[&s.id].get(&s.amount).ok_or_else(|| {
                SettleError::Keyset(format!("keyset {} has no key for {}", s.id, s.amount))
            })?;
            let c_ = dhke::point(&s.c_, "C_")?;
            let r = dhke::scalar(&o.r, "blinding factor")?;
            let c = dhke::unblind(&c_, &r, k)?;
            proofs.push((
                Proof {
                    amount: s.amount,
                    id: s.id.clone(),
                    secret: o.secret.clone(),
                    c: hex::encode(c.serialize()),
                    witness: None,
                },
                o.dest,
            ));
        }
        Ok(proofs)
    }

    /// The input fee of spending `proofs` at this mint.
    fn fee_of(&self, mint: &MintClient, proofs: &[Proof]) -> Result<u64> {
        let mut by_id: BTreeMap<&str, u64> = BTreeMap::new();
        for p in proofs {
            by_id.entry(p.id.as_str()).or_default();
        }
        if by_id.len() > MAX_KEYSETS {
            return Err(SettleError::Refused(format!(
                "proofs of {} keysets; a token carries at most {MAX_KEYSETS}",
                by_id.len()
            )));
        }
        // keysets this wallet has not seen are looked up in one listing of the mint's, so
        // a token naming keysets the mint never had costs one request, not one each
        let mut listed: Option<Vec<KeysetInfo>> = None;
        for (id, fee) in &mut by_id {
            if let Some((info, _)) = self.store.keyset(mint.url(), id)? {
                *fee = info.input_fee_ppk;
                continue;
            }
            if listed.is_none() {
                listed = Some(mint.keysets()?);
            }
            let info = listed
                .as_ref()
                .and_then(|l| l.iter().find(|k| k.id == *id))
                .ok_or_else(|| {
                    SettleError::Keyset(format!("{} does not list keyset {id}", mint.url()))
                })?;
            let keys = mint.keys(id)?;
            self.store.put_keyset(mint.url(), info, &keys)?;
            *fee = info.input_fee_ppk;
        }
        Ok(input_fee(proofs.iter().map(|p| by_id[p.id.as_str()])))
    }

    /// Unspent proofs covering `amount` plus their own input fee, largest first.
    fn select(&self, mint: &MintClient, amount: u64) -> Result<(Vec<Proof>, u64)> {
        let unspent = self.store.proofs(mint.url(), "unspent")?;
        let have: u64 = unspent.iter().map(|p| p.amount).sum();
        let mut chosen = Vec::new();
        let mut sum = 0u64;
        for p in unspent {
            let fee = self.fee_of(mint, &chosen)?;
            if sum >= amount.saturating_add(fee) {
                return Ok((chosen, fee));
            }
            sum += p.amount;
            chosen.push(p);
        }
        let fee = self.fee_of(mint, &chosen)?;
        if sum >= amount.saturating_add(fee) {
            return Ok((chosen, fee));
        }
        Err(SettleError::Funds {
            mint: mint.url().to_owned(),
            have,
            need: amount.saturating_add(fee),
        })
    }

    /// Runs a request whose answer is signatures on `outputs`, written ahead: a refusal
    /// puts the inputs back, an answer is recorded with the inputs spent, anything else
    /// leaves the operation for [`Wallet::recover`].
    fn signed(
        &mut self,
        mint: &MintClient,
        what: Entry<'_>,
        inputs: &[Proof],
        outputs: &[Output],
        request: impl FnOnce(&[BlindedMessage]) -> Result<Vec<BlindSignature>>,
    ) -> Result<Vec<(Proof, &'static str)>> {
        let Entry {
            kind,
            detail,
            amount,
            fee,
        } = what;
        let op = self
            .store
            .begin(kind, mint.url(), detail, inputs, outputs)?;
        match request(&Self::blinded(outputs)) {
            Ok(sigs) => {
                self.answered(kind);
                let proofs = self.unblind(mint, outputs, &sigs)?;
                let note = Some((kind, amount, fee, detail));
                self.store.finish(op, mint.url(), &proofs, "spent", note)?;
                Ok(proofs)
            }
            Err(e @ SettleError::Mint { .. }) => {
                self.store.finish(op, mint.url(), &[], "unspent", None)?;
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Asks the mint for an invoice of `amount` sats, shows it to `shown`, waits up to
    /// `wait` for it to be paid, and mints the ecash (NUT-04). Returns the sats minted.
    pub fn mint(
        &mut self,
        mint: &MintClient,
        amount: u64,
        wait: Duration,
        shown: impl FnOnce(&MintQuote),
    ) -> Result<u64> {
        let quote = self.mint_quote(mint, amount)?;
        shown(&quote);
        let started = Instant::now();
        let mut state = quote.state.clone();
        while state == "UNPAID" {
            if started.elapsed() >= wait {
                return Err(SettleError::Refused(format!(
                    "invoice of quote {} not paid within {} s; run again to mint once it is",
                    quote.quote,
                    wait.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(500));
            state = mint.mint_quote_state(&quote.quote)?.state;
        }
        self.claim(mint, &quote.quote, amount, &state)
    }

    /// The mint's invoice for `amount` sats (a NUT-04 quote), to be paid and then claimed
    /// ([`Wallet::claim`]).
    pub fn mint_quote(&mut self, mint: &MintClient, amount: u64) -> Result<MintQuote> {
        check_amount(amount)?;
        self.recover(mint)?;
        mint.mint_quote(amount, UNIT)
    }

    /// Mints the `amount` sats of quote `quote`, whose invoice is in `state` (`PAID` to
    /// mint; anything else is refused). Returns the sats minted.
    pub fn claim(
        &mut self,
        mint: &MintClient,
        quote: &str,
        amount: u64,
        state: &str,
    ) -> Result<u64> {
        check_amount(amount)?;
        if state != "PAID" {
            return Err(SettleError::Refused(format!("quote {quote} is {state}")));
        }
        let active = self.active(mint)?;
        let outputs = Self::outputs(&active, &dhke::split(amount), "unspent", None)?;
        let what = Entry {
            kind: "mint",
            detail: quote,
            amount,
            fee: 0,
        };
        self.signed(mint, what, &[], &outputs, |o| mint.mint(quote, o))?;
        Ok(amount)
    }

    /// A token worth exactly `amount` sats (version 4), its proofs marked `sent`; swaps
    /// first when no set of proofs adds up to it (the swap's fee is ours).
    ///
    /// With `lock`, the token's proofs carry it (NUT-11 P2PK, NUT-14 HTLC): only its key
    /// (or preimage) spends them, the refund keys after its locktime. Such a send always
    /// swaps.
    pub fn send(
        &mut self,
        mint: &MintClient,
        amount: u64,
        memo: Option<String>,
        lock: Option<&Lock>,
    ) -> Result<(Token, u64)> {
        check_amount(amount)?;
        self.recover(mint)?;
        let unspent = self.store.proofs(mint.url(), "unspent")?;
        let have: u64 = unspent.iter().map(|p| p.amount).sum();
        if have < amount {
            return Err(SettleError::Funds {
                mint: mint.url().to_owned(),
                have,
                need: amount,
            });
        }
        let mut exact = Vec::new();
        let mut rest = amount;
        for p in unspent {
            if p.amount <= rest {
                rest -= p.amount;
                exact.push(p);
            }
        }
        let (proofs, fee) = if rest == 0 && lock.is_none() {
            let secrets: Vec<&str> = exact.iter().map(|p| p.secret.as_str()).collect();
            self.store.set_state(&secrets, "sent")?;
            self.store.note("send", mint.url(), amount, 0, "token")?;
            (exact, 0)
        } else {
            let active = self.active(mint)?;
            let (inputs, fee) = self.select(mint, amount)?;
            let total: u64 = inputs.iter().map(|p| p.amount).sum();
            let mut outputs = Self::outputs(&active, &dhke::split(amount), "sent", lock)?;
            outputs.extend(Self::outputs(
                &active,
                &dhke::split(total - amount - fee),
                "unspent",
                None,
            )?);
            let what = Entry {
                kind: "send",
                detail: "token",
                amount,
                fee,
            };
            let proofs = self.signed(mint, what, &inputs, &outputs, |o| mint.swap(&inputs, o))?;
            let sent = proofs
                .into_iter()
                .filter(|(_, d)| *d == "sent")
                .map(|(p, _)| p)
                .collect();
            (sent, fee)
        };
        let token = Token {
            mint: mint.url().to_owned(),
            unit: UNIT.into(),
            memo,
            proofs,
        };
        Ok((token, fee))
    }

    /// Swaps a token's proofs for fresh ones of ours (NUT-03). Only tokens of `mint`, in
    /// sats; locked proofs only when this wallet's key may sign for them (and, for an
    /// HTLC, with its `preimage`). Returns the sats received after the mint's input fee.
    pub fn receive(
        &mut self,
        mint: &MintClient,
        token: &Token,
        preimage: Option<&str>,
    ) -> Result<(u64, u64)> {
        let detail = format!(
            "token{}",
            token
                .memo
                .as_ref()
                .map(|m| format!(" {m:?}"))
                .unwrap_or_default()
        );
        self.receive_for(mint, token, preimage, &detail)
    }

    /// [`Wallet::receive`], recorded in the history under `detail` (e.g. the job it paid
    /// for; see [`Wallet::received`]).
    pub fn receive_for(
        &mut self,
        mint: &MintClient,
        token: &Token,
        preimage: Option<&str>,
        detail: &str,
    ) -> Result<(u64, u64)> {
        if token.mint != mint.url() {
            return Err(SettleError::Refused(format!(
                "token of mint {}, not {}",
                token.mint,
                mint.url()
            )));
        }
        if token.unit != UNIT {
            return Err(SettleError::Refused(format!(
                "token in {:?}, this wallet holds sat",
                token.unit
            )));
        }
        let now = unix_now();
        let mut inputs = token.proofs.clone();
        for p in &mut inputs {
            if let Some(lock) = Lock::parse(&p.secret)? {
                p.witness = Some(lock.witness(&p.secret, self.key.as_ref(), preimage, now)?);
            }
        }
        let amount = token.amount()?;
        check_amount(amount)?;
        self.recover(mint)?;
        let fee = self.fee_of(mint, &token.proofs)?;
        if amount <= fee {
            return Err(SettleError::Refused(format!(
                "token worth {amount} sat does not cover the mint's {fee} sat input fee"
            )));
        }
        let active = self.active(mint)?;
        let outputs = Self::outputs(&active, &dhke::split(amount - fee), "unspent", None)?;
        let what = Entry {
            kind: "receive",
            detail,
            amount: amount - fee,
            fee,
        };
        self.signed(mint, what, &[], &outputs, |o| mint.swap(&inputs, o))?;
        Ok((amount - fee, fee))
    }

    /// Pays a BOLT11 invoice from the mint's ecash (NUT-05), with blank outputs for the
    /// unused fee reserve (NUT-08).
    pub fn pay(&mut self, mint: &MintClient, invoice: &str) -> Result<Paid> {
        let inv = crate::bolt11::decode(invoice)?;
        if inv.expires_at <= unix_now() {
            return Err(SettleError::Invoice(format!(
                "expired at {}",
                inv.expires_at
            )));
        }
        if inv.amount_msat.is_none() {
            return Err(SettleError::Invoice(
                "no amount; ask the payee for an invoice with one".into(),
            ));
        }
        self.recover(mint)?;
        let quote = mint.melt_quote(invoice, UNIT)?;
        let need = quote.amount.saturating_add(quote.fee_reserve);
        check_amount(need)?;
        let active = self.active(mint)?;
        let (inputs, in_fee) = self.select(mint, need)?;
        let total: u64 = inputs.iter().map(|p| p.amount).sum();
        let over = total - quote.amount - in_fee;
        let blanks = if over == 0 {
            0
        } else {
            (64 - over.leading_zeros() as usize).max(1)
        };
        let outputs = Self::outputs(&active, &vec![1; blanks], "unspent", None)?;
        let op = self
            .store
            .begin("melt", mint.url(), &quote.quote, &inputs, &outputs)?;
        let answer = match mint.melt(&quote.quote, &inputs, &Self::blinded(&outputs)) {
            Ok(a) => a,
            Err(e @ SettleError::Mint { .. }) => {
                self.store.finish(op, mint.url(), &[], "unspent", None)?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        self.answered("melt");
        match answer.state.as_str() {
            "PAID" => {
                let change =
                    self.unblind(mint, &outputs, answer.change.as_deref().unwrap_or_default())?;
                let back: u64 = change.iter().map(|(p, _)| p.amount).sum();
                let fee = total - quote.amount - back;
                let note = Some(("pay", quote.amount, fee, invoice));
                self.store.finish(op, mint.url(), &change, "spent", note)?;
                Ok(Paid {
                    amount: quote.amount,
                    fee,
                    preimage: answer.payment_preimage,
                })
            }
            "PENDING" => Err(SettleError::Unreachable {
                url: mint.url().to_owned(),
                reason: format!(
                    "payment of quote {} is pending; `meshnode wallet check` settles it",
                    quote.quote
                ),
            }),
            other => {
                self.store.finish(op, mint.url(), &[], "unspent", None)?;
                Err(SettleError::Refused(format!(
                    "the mint did not pay the invoice (state {other})"
                )))
            }
        }
    }
}

pub(super) use fleetmesh_proto::unix_now;

fn check_amount(amount: u64) -> Result<()> {
    if amount == 0 || amount > MAX_AMOUNT {
        return Err(SettleError::Refused(format!(
            "amount {amount}: between 1 and {MAX_AMOUNT} sat"
        )));
    }
    Ok(())
}
