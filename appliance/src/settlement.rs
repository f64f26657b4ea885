//! The node's side of paid jobs: [`fleetmesh_market::service::payments::Payments`] over
//! its Cashu wallet (`wallet.sqlite` in the node directory, the node's Nostr key to sign
//! for locked proofs, `[settlement] mints` as the mints it takes).
//!
//! A job's payment is escrow: a token of a trusted mint, every proof locked (NUT-11 P2PK)
//! to this node's key alone with no refund before the ask expires, worth the price after
//! the mint's input fee, unspent at the mint (NUT-07). For a `delivery`-mode ask the lock
//! may instead be a NUT-14 HTLC with this node's key on the hash its offer named
//! ([`CashuPayments::delivery_lock`]): a preimage derived from the node's key and the ask,
//! which the node alone knows until it sends it with the output, and redeems with.
//! Nothing is swapped until the job is verified; then the wallet redeems it (written
//! ahead, as every wallet operation).
//!
//! **Settlement records**: every job payment's end (redeemed, unredeemed, released) is a
//! `settled` line of the node's evidence log against the buyer ([`Books`], shared with
//! the accountability ledger), naming the job as its receipt does (the blinded id) and
//! the receipt; a buyer's `job submit --pay cashu` records its escrow, and `wallet check`
//! its refunds, in its own books ([`record_as_buyer`]).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fleetmesh_ledger::settlement::{Role, State};
use fleetmesh_ledger::{Line, Settlement};

use fleetmesh_market::service::payments::{Escrow, Payments};
use fleetmesh_market::{Refusal, refuse};
use fleetmesh_proto::ask::Ask;
use fleetmesh_settle::cashu::nut10::{self, Kind, Lock};
use fleetmesh_settle::cashu::{MintClient, Token, Wallet, token::normalize_mint};
use serde_json::Value;

/// The node's books (evidence log, fold, SQLite file), opened once by the daemon: the
/// accountability ledger and the settlement records write through the same handle.
pub type Books = Arc<Mutex<fleetmesh_ledger::Books>>;

/// Opens the books of the node (Nostr key `us`, hex) in `dir`.
///
/// # Errors
/// The books': another process holds them, a damaged file (refused, never recreated).
pub fn open_books(dir: &Path, us: &str) -> anyhow::Result<Books> {
    let (books, refused) = fleetmesh_ledger::Books::open(
        &dir.join(crate::node::LEDGER_DIR),
        us,
        fleetmesh_proto::unix_now(),
    )?;
    for r in refused {
        tracing::warn!(line = r.line, reason = %r.reason, "evidence log: a line not taken");
    }
    Ok(Arc::new(Mutex::new(books)))
}

/// Records `settlement` against `peer` in `books` (a payment is never judged: nothing
/// to carry out).
///
/// # Errors
/// The log's.
pub fn record(books: &Books, peer: &str, settlement: Settlement) -> anyhow::Result<()> {
    let line = Line::Settled {
        at: fleetmesh_proto::unix_now(),
        peer: peer.to_owned(),
        settlement,
    };
    books
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .record(line)?;
    Ok(())
}

/// Records a payment of the buyer whose key directory is `dir` (its Nostr key `us`) in
/// its books: opened for the line when no node runs there, else sent to the node that
/// does (`ledger.settle` on its control socket). A failure is a warning: the payment
/// itself stands, and is in the wallet's history.
pub fn record_as_buyer(dir: &Path, us: &secp256k1::Keypair, peer: &str, settlement: Settlement) {
    let us = hex::encode(us.x_only_public_key().0.to_byte_array());
    let outcome = match open_books(dir, &us).and_then(|b| record(&b, peer, settlement.clone())) {
        Ok(()) => Ok(()),
        Err(e)
            if e.downcast_ref::<fleetmesh_ledger::LedgerError>()
                .is_some_and(|e| matches!(e, fleetmesh_ledger::LedgerError::Busy { .. })) =>
        {
            let req = serde_json::json!({"cmd": "ledger.settle", "peer": peer,
                "settlement": settlement});
            crate::daemon::control::request(dir, &req).and_then(|answer| {
                match answer["error"].get("message") {
                    None => Ok(()),
                    Some(why) => Err(anyhow::anyhow!("the node refused it: {why}")),
                }
            })
        }
        Err(e) => Err(e),
    };
    if let Err(e) = outcome {
        eprintln!(
            "meshnode: the payment is not in the ledger of {}: {e:#}",
            dir.display()
        );
    }
}

/// A payment of the node as a buyer: Cashu escrow at `mint`, `sats` of it, for `job`
/// (blinded for the pair) where there is one.
pub fn payer(state: State, mint: &str, sats: u64, job: Option<String>) -> Settlement {
    Settlement {
        role: Role::Payer,
        state,
        method: "cashu".into(),
        at: mint.to_owned(),
        amount_sat: sats,
        job,
        receipt: None,
    }
}

/// The settlement line of a job payment's end as the job store records it (`state`
/// `redeemed`, `unredeemed` or `released`): `None` for any other.
pub fn payee_settlement(job: &str, payment: &Value) -> Option<Settlement> {
    let state = match payment["state"].as_str()? {
        "redeemed" => State::Redeemed,
        "unredeemed" => State::Unredeemed,
        "released" => State::Released,
        _ => return None,
    };
    let amount = match state {
        State::Redeemed => payment["redeemed_sat"].as_u64(),
        _ => payment["amount_sat"].as_u64(),
    };
    Some(Settlement {
        role: Role::Payee,
        state,
        method: payment["method"].as_str().unwrap_or("cashu").to_owned(),
        at: payment["at"].as_str().unwrap_or_default().to_owned(),
        amount_sat: amount.unwrap_or(0),
        job: Some(job.to_owned()),
        receipt: payment["receipt"].as_str().map(str::to_owned),
    })
}

/// The node's wallet as the job service's payments.
pub struct CashuPayments {
    /// The wallet file.
    pub wallet: PathBuf,
    /// The node's Nostr key: what escrow is locked to.
    pub key: secp256k1::Keypair,
    /// The mints the node takes tokens of, normalized.
    pub mints: Vec<String>,
    /// The node's books: each payment's end is recorded there against the buyer.
    pub books: Books,
}

fn invalid(why: impl Into<String>) -> Refusal {
    refuse("payment-invalid", why)
}

impl CashuPayments {
    /// The preimage of the delivery lock of the ask `ask_id`: HKDF of the node's key.
    fn preimage(&self, ask_id: &str) -> Option<[u8; 32]> {
        let prk = fleetmesh_proto::hkdf::extract(
            b"fleetmesh/delivery-htlc/v1",
            &self.key.secret_key().to_secret_bytes(),
        );
        fleetmesh_proto::hkdf::expand(&prk, ask_id.as_bytes(), 32)
            .ok()
            .and_then(|v| v.try_into().ok())
    }

    fn token(payment: &Value) -> Result<Token, Refusal> {
        if payment["method"] != "cashu" {
            return Err(invalid(format!(
                "payment method {}: this node takes cashu",
                payment["method"]
            )));
        }
        Token::parse(payment["token"].as_str().unwrap_or_default())
            .map_err(|e| invalid(e.to_string()))
    }
}

impl Payments for CashuPayments {
    fn escrow(
        &self,
        job_id: &str,
        ask: &Ask,
        payment: Option<&Value>,
        need_sat: Option<u64>,
    ) -> Result<Option<Escrow>, Refusal> {
        let Some(payment) = payment else {
            return match need_sat {
                None => Ok(None),
                Some(n) => Err(refuse(
                    "payment-required",
                    format!(
                        "{} jobs are priced here: this one costs up to {n} sat, paid with a \
                         cashu token (meshnode job submit --pay cashu) of one of {}",
                        ask.engine,
                        self.mints.join(", ")
                    ),
                )),
            };
        };
        let token = Self::token(payment)?;
        if !self.mints.contains(&normalize_mint(&token.mint)) {
            return Err(invalid(format!(
                "a token of mint {}; this node takes {}",
                token.mint,
                if self.mints.is_empty() {
                    "none ([settlement] mints is empty)".to_owned()
                } else {
                    self.mints.join(", ")
                }
            )));
        }
        if token.unit != "sat" {
            return Err(invalid(format!("a token in {}, not sat", token.unit)));
        }
        let ours = self.key.x_only_public_key().0;
        for p in &token.proofs {
            let lock = Lock::parse(&p.secret)
                .map_err(|e| invalid(e.to_string()))?
                .ok_or_else(|| {
                    invalid("an unlocked proof: escrow must be locked to this node's key")
                })?;
            // the escrow is this node's alone until the locktime: a second key that may
            // sign (the buyer's, say) could take it back at any time; an HTLC only on the
            // hash of a delivery-mode ask this node offered for, and with its key
            let keys: Vec<&String> = match lock.kind {
                Kind::P2pk => std::iter::once(&lock.data).chain(&lock.pubkeys).collect(),
                _ => {
                    let ours = self.delivery_lock(ask);
                    if ours.as_deref() != Some(lock.data.as_str()) || lock.pubkeys.is_empty() {
                        return Err(invalid(
                            "an HTLC lock not on this node's delivery hash for the ask, or \
                             without its key: this node takes P2PK escrow to its key, or a \
                             delivery-mode HTLC it offered",
                        ));
                    }
                    lock.pubkeys.iter().collect()
                }
            };
            let is_ours = |k: &&String| nut10::x_only(k).is_some_and(|x| x == ours);
            if !keys.iter().all(is_ours) || lock.n_sigs > 1 || lock.sigflag != "SIG_INPUTS" {
                return Err(invalid(format!(
                    "a proof locked to {} (n_sigs {}, {}); escrow is locked to this node's key {} alone",
                    keys.iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    lock.n_sigs,
                    lock.sigflag,
                    hex::encode(ours.to_byte_array())
                )));
            }
            // before the ask expires nobody but this node may spend it
            if lock.locktime.is_some_and(|t| t < ask.expires_at) {
                return Err(invalid(format!(
                    "the lock's refund opens at {:?}, before the ask expires at {}",
                    lock.locktime, ask.expires_at
                )));
            }
        }
        let mint = MintClient::new(&token.mint).map_err(|e| invalid(e.to_string()))?;
        let amount = token.amount().map_err(|e| invalid(e.to_string()))?;
        let wallet = Wallet::open(&self.wallet).map_err(|e| refuse("internal", e.to_string()))?;
        let worth = wallet
            .worth(&mint, &token)
            .map_err(|e| invalid(format!("checking the token with its mint: {e}")))?;
        if let Some(need) = need_sat.filter(|n| worth < *n) {
            return Err(invalid(format!(
                "the token is worth {worth} sat after the mint's fee ({amount} sat in \
                 proofs); this job costs up to {need} sat"
            )));
        }
        tracing::debug!(job = job_id, worth, mint = %token.mint, "escrow checked");
        Ok(Some(Escrow {
            method: "cashu".into(),
            at: normalize_mint(&token.mint),
            amount_sat: amount,
        }))
    }

    fn delivery_lock(&self, ask: &Ask) -> Option<String> {
        use sha2::Digest as _;
        (ask.mode == fleetmesh_proto::Mode::Delivery)
            .then(|| self.preimage(&ask.event.id_hex()))
            .flatten()
            .map(|p| hex::encode(sha2::Sha256::digest(p)))
    }

    fn delivery_key(&self, ask: &Ask) -> Option<String> {
        (ask.mode == fleetmesh_proto::Mode::Delivery)
            .then(|| self.preimage(&ask.event.id_hex()))
            .flatten()
            .map(hex::encode)
    }

    fn redeem(&self, job_id: &str, ask: &Ask, payment: &Value) -> Result<u64, String> {
        let token = Self::token(payment).map_err(|r| r.message)?;
        let htlc = token
            .proofs
            .iter()
            .any(|p| Lock::parse(&p.secret).is_ok_and(|l| l.is_some_and(|l| l.kind == Kind::Htlc)));
        let preimage = htlc.then(|| self.delivery_key(ask)).flatten();
        let mint = MintClient::new(&token.mint).map_err(|e| e.to_string())?;
        let mut wallet = Wallet::open(&self.wallet).map_err(|e| e.to_string())?;
        wallet.set_key(self.key);
        fault_hook(&mut wallet);
        let detail = format!("job {job_id}");
        match wallet.receive_for(&mint, &token, preimage.as_deref(), &detail) {
            Ok((sats, _fee)) => Ok(sats),
            // redeemed already, by a run that died before recording it (the wallet
            // recovered the proofs when it opened the operation again)
            Err(e) => wallet
                .received(&detail)
                .ok()
                .flatten()
                .ok_or_else(|| e.to_string()),
        }
    }

    fn settled(&self, buyer: &str, job: &str, payment: &Value) {
        let Some(s) = payee_settlement(job, payment) else {
            return;
        };
        if let Err(e) = record(&self.books, buyer, s) {
            tracing::error!(%job, error = %e, "recording a job's payment in the ledger");
        }
    }
}

/// Fault injection for the crash tests, never for a node that serves anyone:
/// `MESHNODE_WALLET_FAULT=exit-after-answer` ends the process (exit 70) after the mint
/// answered a wallet operation and before the wallet recorded the answer.
pub fn fault_hook(wallet: &mut fleetmesh_settle::cashu::Wallet) {
    if std::env::var("MESHNODE_WALLET_FAULT").as_deref() == Ok("exit-after-answer") {
        wallet.set_answer_hook(Box::new(|kind| {
            eprintln!("meshnode wallet: fault injected: exiting after the mint answered {kind}");
            std::process::exit(70);
        }));
    }
}
