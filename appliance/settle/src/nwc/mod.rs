//! Nostr Wallet Connect (NIP-47) on the node's Cashu wallet, without the transport: the
//! connection URI ([`Uri`]), the connections a node grants (a client key, the methods it
//! may call, a budget in sats; [`Grants`], in `nwc.sqlite`), and the requests they make
//! answered from the wallet ([`Grants::handle`]): `pay_invoice` (a melt at the mint),
//! `make_invoice` (a mint quote, claimed once paid), `lookup_invoice`, `list_transactions`,
//! `get_balance`, `get_info`; and the notifications they lead to ([`Grants::take_notices`]:
//! `payment_received` once an invoice a client made is claimed, `payment_sent` once it
//! paid one). The appliance carries requests, answers and notifications over relays
//! (kinds 23194/23195/23197, NIP-44 v2) and publishes the info event (13194).

mod client;
mod service;
pub use client::{NwcLightning, request};
pub use service::{INFO, NOTIFICATION, REQUEST, RESPONSE, start};

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension as _, params};
use serde_json::{Value, json};

use crate::cashu::{MintClient, Wallet};
use crate::{Result, SettleError};

/// The methods this wallet service answers, in the order its info event lists them.
pub const METHODS: &[&str] = &[
    "pay_invoice",
    "make_invoice",
    "lookup_invoice",
    "list_transactions",
    "get_balance",
    "get_info",
];

/// The URI scheme of a connection.
pub const SCHEME: &str = "nostr+walletconnect://";

/// The schema version of `nwc.sqlite`.
const SCHEMA: i64 = 1;

/// Most transactions one `list_transactions` answers.
const MAX_LIST: u64 = 1000;

/// A connection URI: `nostr+walletconnect://<wallet key>?relay=<url>&secret=<hex>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uri {
    /// The wallet service's key (x-only, hex).
    pub wallet: String,
    /// The relays it reads.
    pub relays: Vec<String>,
    /// The client's secret key (hex): what it signs and encrypts requests with.
    pub secret: String,
    /// The lightning address of the wallet, if given.
    pub lud16: Option<String>,
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

impl Uri {
    /// Reads a connection URI (at most 4 KiB).
    ///
    /// # Errors
    /// [`SettleError::Refused`] naming what is wrong: the scheme, the wallet key, no relay,
    /// a relay that is not ws(s), no secret or one that is not 32 bytes of hex.
    pub fn parse(text: &str) -> Result<Uri> {
        let bad = |why: &str| SettleError::Refused(format!("NWC URI: {why}"));
        if text.len() > 4096 {
            return Err(bad("longer than 4 KiB"));
        }
        let rest = text
            .trim()
            .strip_prefix(SCHEME)
            .or_else(|| text.trim().strip_prefix("nostrwalletconnect://"))
            .ok_or_else(|| bad("not nostr+walletconnect://"))?;
        let (wallet, query) = rest.split_once('?').unwrap_or((rest, ""));
        let wallet = wallet.trim_end_matches('/').to_ascii_lowercase();
        if !is_hex64(&wallet) {
            return Err(bad("the wallet key is not 64 hex digits"));
        }
        let (mut relays, mut secret, mut lud16) = (Vec::new(), None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v).ok_or_else(|| bad("a parameter that does not decode"))?;
            match k {
                "relay" => {
                    if !(v.starts_with("ws://") || v.starts_with("wss://")) {
                        return Err(bad(&format!("relay {v:?} is not a ws:// or wss:// URL")));
                    }
                    relays.push(v);
                }
                "secret" => secret = Some(v.to_ascii_lowercase()),
                "lud16" => lud16 = Some(v),
                _ => {}
            }
        }
        let secret = secret.ok_or_else(|| bad("no secret"))?;
        if !is_hex64(&secret) {
            return Err(bad("the secret is not 64 hex digits"));
        }
        if relays.is_empty() {
            return Err(bad("no relay"));
        }
        Ok(Uri {
            wallet,
            relays,
            secret,
            lud16,
        })
    }
}

impl std::fmt::Display for Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{SCHEME}{}?", self.wallet)?;
        for r in &self.relays {
            write!(f, "relay={}&", percent_encode(r))?;
        }
        write!(f, "secret={}", self.secret)?;
        if let Some(l) = &self.lud16 {
            write!(f, "&lud16={}", percent_encode(l))?;
        }
        Ok(())
    }
}

/// A NIP-47 error: its `code` (`UNAUTHORIZED`, `RESTRICTED`, `QUOTA_EXCEEDED`,
/// `INSUFFICIENT_BALANCE`, `NOT_IMPLEMENTED`, `NOT_FOUND`, `PAYMENT_FAILED`, `INTERNAL`,
/// `OTHER`) and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The NIP-47 code.
    pub code: &'static str,
    /// What went wrong.
    pub message: String,
}

fn fail(code: &'static str, message: impl Into<String>) -> Failure {
    Failure {
        code,
        message: message.into(),
    }
}

/// A connection the node granted.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Grant {
    /// The operator's name for it.
    pub name: String,
    /// The client's key (x-only, hex).
    pub client: String,
    /// The methods it may call.
    pub methods: Vec<String>,
    /// Most sats it may spend (invoices paid and their fees) in all; `None`: no limit.
    pub budget_sat: Option<u64>,
    /// Sats it spent so far.
    pub spent_sat: u64,
    /// Unix seconds.
    pub created_at: u64,
}

/// The connections and their transactions (`nwc.sqlite`), and the wallet they spend from.
pub struct Grants {
    db: Connection,
    path: String,
    /// The wallet file.
    wallet: PathBuf,
    /// The key locked proofs are signed for (the node's).
    key: Option<secp256k1::Keypair>,
    /// The mint invoices are made at and paid from.
    mint: Option<String>,
    /// What pays invoices instead of the wallet's melts, when set (the node's Lightning
    /// node: its preimages are real where a mint's internal settlement gives none).
    payer: Option<Box<dyn crate::lightning::Lightning>>,
    /// The wallet service's name (`get_info`'s alias).
    pub alias: String,
    /// The wallet service's key (x-only, hex).
    pub pubkey: String,
    /// Notifications not yet taken ([`Grants::take_notices`]).
    notices: std::cell::RefCell<Vec<Notice>>,
}

/// The notification types the service sends (NIP-47).
pub const NOTIFICATIONS: &[&str] = &["payment_received", "payment_sent"];

/// A NIP-47 notification for one connection's client: an invoice it made was paid
/// (`payment_received`), or it paid one (`payment_sent`); `notification` is the
/// transaction as `lookup_invoice` answers it.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The connection's client key (hex).
    pub client: String,
    /// `payment_received` or `payment_sent`.
    pub kind: &'static str,
    /// The transaction.
    pub transaction: Value,
}

impl Grants {
    /// Opens (creating when absent) `path`; the wallet is the one in `wallet`, paying and
    /// invoicing at `mint`.
    ///
    /// # Errors
    /// [`SettleError::Store`] when the file cannot be opened or is of a newer schema.
    pub fn open(path: &Path, wallet: &Path, mint: Option<&str>) -> Result<Grants> {
        let shown = path.display().to_string();
        let err = |e: rusqlite::Error| SettleError::Store {
            path: shown.clone(),
            reason: e.to_string(),
        };
        let db = crate::open_db(path, SCHEMA)?;
        // IMMEDIATE: the write lock first, waited for under the busy timeout; a deferred
        // transaction reads the schema, and its write would then fail at once (busy, not
        // retried) when the daemon or another command wrote in between
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
             BEGIN IMMEDIATE;
             CREATE TABLE IF NOT EXISTS grants (
                 client TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, methods TEXT NOT NULL,
                 budget INTEGER, spent INTEGER NOT NULL DEFAULT 0, created INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS txs (
                 payment_hash TEXT PRIMARY KEY, client TEXT NOT NULL, type TEXT NOT NULL,
                 invoice TEXT NOT NULL, description TEXT, amount INTEGER NOT NULL,
                 fees INTEGER NOT NULL DEFAULT 0, preimage TEXT, quote TEXT, mint TEXT,
                 created INTEGER NOT NULL, expires INTEGER, settled INTEGER);
             PRAGMA user_version = 1;
             COMMIT;",
        )
        .map_err(err)?;
        Ok(Grants {
            db,
            path: path.display().to_string(),
            wallet: wallet.to_path_buf(),
            key: None,
            mint: mint.map(str::to_owned),
            payer: None,
            alias: "fleetmesh".into(),
            pubkey: String::new(),
            notices: std::cell::RefCell::default(),
        })
    }

    /// Pays `pay_invoice` through `payer` instead of melting the wallet's ecash.
    pub fn set_payer(&mut self, payer: Box<dyn crate::lightning::Lightning>) {
        self.payer = Some(payer);
    }

    /// Signs for proofs locked to `key` (the node's), which is also the service's key.
    pub fn set_key(&mut self, key: secp256k1::Keypair) {
        self.pubkey = hex::encode(key.x_only_public_key().0.to_byte_array());
        self.key = Some(key);
    }

    fn store_err(&self, e: rusqlite::Error) -> SettleError {
        SettleError::Store {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    /// Grants `client` (x-only hex) the connection `name` with `methods` and `budget_sat`.
    ///
    /// # Errors
    /// [`SettleError::Refused`] for an unknown method, a bad key, or a name or key already
    /// granted; [`SettleError::Store`].
    pub fn grant(
        &self,
        name: &str,
        client: &str,
        methods: &[String],
        budget_sat: Option<u64>,
    ) -> Result<Grant> {
        if let Some(m) = methods.iter().find(|m| !METHODS.contains(&m.as_str())) {
            return Err(SettleError::Refused(format!(
                "method {m:?}: one of {}",
                METHODS.join(", ")
            )));
        }
        if !is_hex64(client) || name.is_empty() || name.len() > 64 {
            return Err(SettleError::Refused(
                "a connection needs a name (1 to 64 bytes) and a 64-hex-digit client key".into(),
            ));
        }
        let created = fleetmesh_proto::unix_now();
        self.db
            .execute(
                "INSERT INTO grants (client, name, methods, budget, created) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![client, name, methods.join(" "), budget_sat.map(|b| b as i64), created as i64],
            )
            .map_err(|e| match e {
                rusqlite::Error::SqliteFailure(f, _)
                    if f.code == rusqlite::ErrorCode::ConstraintViolation =>
                {
                    SettleError::Refused(format!("a connection named {name:?} exists already"))
                }
                e => self.store_err(e),
            })?;
        Ok(Grant {
            name: name.to_owned(),
            client: client.to_owned(),
            methods: methods.to_vec(),
            budget_sat,
            spent_sat: 0,
            created_at: created,
        })
    }

    /// Every connection, by name.
    ///
    /// # Errors
    /// [`SettleError::Store`].
    pub fn list(&self) -> Result<Vec<Grant>> {
        self.select("ORDER BY name", [])
    }

    /// The grants the `tail` of a `SELECT … FROM grants` picks (with its `params`).
    fn select<P: rusqlite::Params>(&self, tail: &str, params: P) -> Result<Vec<Grant>> {
        let mut st = self
            .db
            .prepare(&format!(
                "SELECT client, name, methods, budget, spent, created FROM grants {tail}"
            ))
            .map_err(|e| self.store_err(e))?;
        let rows = st
            .query_map(params, |r| {
                Ok(Grant {
                    client: r.get(0)?,
                    name: r.get(1)?,
                    methods: r
                        .get::<_, String>(2)?
                        .split_whitespace()
                        .map(str::to_owned)
                        .collect(),
                    budget_sat: r.get::<_, Option<i64>>(3)?.map(|b| b as u64),
                    spent_sat: r.get::<_, i64>(4)? as u64,
                    created_at: r.get::<_, i64>(5)? as u64,
                })
            })
            .map_err(|e| self.store_err(e))?;
        rows.collect::<std::result::Result<_, _>>()
            .map_err(|e| self.store_err(e))
    }

    /// Ends the connection `name`; false when there is none.
    ///
    /// # Errors
    /// [`SettleError::Store`].
    pub fn revoke(&self, name: &str) -> Result<bool> {
        let n = self
            .db
            .execute("DELETE FROM grants WHERE name = ?1", params![name])
            .map_err(|e| self.store_err(e))?;
        Ok(n > 0)
    }

    /// The connection of `client`, if granted.
    ///
    /// # Errors
    /// [`SettleError::Store`].
    pub fn grant_of(&self, client: &str) -> Result<Option<Grant>> {
        Ok(self
            .select("WHERE client = ?1", [client])?
            .into_iter()
            .next())
    }

    fn wallet(&self) -> std::result::Result<(Wallet, MintClient), Failure> {
        let mint = self
            .mint
            .as_deref()
            .ok_or_else(|| fail("INTERNAL", "the wallet has no mint ([settlement] mints)"))?;
        let mint = MintClient::new(mint).map_err(|e| fail("INTERNAL", e.to_string()))?;
        let mut wallet = Wallet::open(&self.wallet).map_err(|e| fail("INTERNAL", e.to_string()))?;
        if let Some(k) = self.key {
            wallet.set_key(k);
        }
        Ok((wallet, mint))
    }

    /// Answers `request` (`{"method", "params"}`) from `client`: the NIP-47 `result`, or
    /// the [`Failure`] to answer instead.
    pub fn handle(&self, client: &str, request: &Value) -> std::result::Result<Value, Failure> {
        let internal = |e: SettleError| fail("INTERNAL", e.to_string());
        let grant = self
            .grant_of(client)
            .map_err(internal)?
            .ok_or_else(|| fail("UNAUTHORIZED", "no wallet connection for this key"))?;
        let method = request["method"]
            .as_str()
            .ok_or_else(|| fail("OTHER", "the request names no method"))?;
        if !METHODS.contains(&method) {
            return Err(fail(
                "NOT_IMPLEMENTED",
                format!("{method} is not supported"),
            ));
        }
        if !grant.methods.iter().any(|m| m == method) {
            return Err(fail(
                "RESTRICTED",
                format!("this connection may not call {method}"),
            ));
        }
        let params = &request["params"];
        match method {
            "get_info" => Ok(json!({
                "alias": self.alias, "color": "", "pubkey": self.pubkey, "network": "mainnet",
                "block_height": 0, "block_hash": "", "methods": grant.methods,
                "notifications": NOTIFICATIONS,
            })),
            "get_balance" => {
                let (wallet, _) = self.wallet()?;
                let sats: u64 = wallet
                    .balances()
                    .map_err(internal)?
                    .iter()
                    .map(|b| b.unspent)
                    .sum();
                Ok(json!({"balance": sats * 1000}))
            }
            "make_invoice" => self.make_invoice(client, params),
            "lookup_invoice" => self.lookup_invoice(client, params),
            "pay_invoice" => self.pay_invoice(&grant, params),
            _ => self.list_transactions(client, params),
        }
    }

    fn make_invoice(&self, client: &str, params: &Value) -> std::result::Result<Value, Failure> {
        let msat = params["amount"]
            .as_u64()
            .filter(|a| *a >= 1000)
            .ok_or_else(|| {
                fail(
                    "OTHER",
                    "amount: msat, at least 1000 (the mint issues sats)",
                )
            })?;
        let sats = msat / 1000;
        let description = params["description"].as_str().unwrap_or_default();
        if description.len() > 640 {
            return Err(fail("OTHER", "description: at most 640 bytes"));
        }
        let (mut wallet, mint) = self.wallet()?;
        let quote = wallet
            .mint_quote(&mint, sats)
            .map_err(|e| fail("INTERNAL", e.to_string()))?;
        let inv = crate::bolt11::decode(&quote.request)
            .map_err(|e| fail("INTERNAL", format!("the mint's invoice: {e}")))?;
        self.db
            .execute(
                "INSERT INTO txs (payment_hash, client, type, invoice, description, amount, quote, \
                 mint, created, expires) VALUES (?1, ?2, 'incoming', ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![
                    inv.payment_hash,
                    client,
                    quote.request,
                    description,
                    (sats * 1000) as i64,
                    quote.quote,
                    mint.url(),
                    fleetmesh_proto::unix_now() as i64,
                    inv.expires_at as i64
                ],
            )
            .map_err(|e| fail("INTERNAL", e.to_string()))?;
        self.tx(client, &inv.payment_hash)
    }

    fn lookup_invoice(&self, client: &str, params: &Value) -> std::result::Result<Value, Failure> {
        let hash = match (params["payment_hash"].as_str(), params["invoice"].as_str()) {
            (Some(h), _) => h.to_ascii_lowercase(),
            (None, Some(i)) => {
                crate::bolt11::decode(i)
                    .map_err(|e| fail("OTHER", format!("invoice: {e}")))?
                    .payment_hash
            }
            _ => return Err(fail("OTHER", "payment_hash or invoice is required")),
        };
        self.settle(client, &hash)?;
        self.tx(client, &hash)
    }

    /// Claims every unexpired incoming invoice the mint says is paid (the service runs it
    /// every few seconds, so that a paid invoice reaches the wallet without a lookup);
    /// how many it claimed.
    pub fn settle_pending(&self) -> usize {
        let pending: Vec<(String, String)> = self
            .db
            .prepare(
                "SELECT client, payment_hash FROM txs WHERE type = 'incoming' AND settled IS NULL \
                 AND (expires IS NULL OR expires > ?1)",
            )
            .and_then(|mut st| {
                st.query_map(params![fleetmesh_proto::unix_now() as i64], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect()
            })
            .unwrap_or_default();
        pending
            .iter()
            .filter(|(client, hash)| {
                self.settle(client, hash).is_ok()
                    && self.tx(client, hash).is_ok_and(|t| t["state"] == "settled")
            })
            .count()
    }

    /// Claims an incoming invoice of `client`'s that the mint says is paid.
    fn settle(&self, client: &str, hash: &str) -> std::result::Result<(), Failure> {
        let row: Option<(String, i64, Option<i64>)> = self
            .db
            .query_row(
                "SELECT quote, amount, settled FROM txs WHERE payment_hash = ?1 AND client = ?2 \
                 AND type = 'incoming'",
                params![hash, client],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
            .map_err(|e| fail("INTERNAL", e.to_string()))?;
        let Some((quote, msat, None)) = row else {
            return Ok(());
        };
        let (mut wallet, mint) = self.wallet()?;
        let state = mint
            .mint_quote_state(&quote)
            .map_err(|e| fail("INTERNAL", e.to_string()))?
            .state;
        match state.as_str() {
            "UNPAID" => return Ok(()),
            // minted already: by a claim whose record this file missed (the wallet keeps
            // the operation written ahead and recovers its proofs)
            "ISSUED" => {}
            _ => {
                wallet
                    .claim(&mint, &quote, msat as u64 / 1000, &state)
                    .map_err(|e| fail("INTERNAL", e.to_string()))?;
            }
        }
        self.db
            .execute(
                "UPDATE txs SET settled = ?1 WHERE payment_hash = ?2",
                params![fleetmesh_proto::unix_now() as i64, hash],
            )
            .map_err(|e| fail("INTERNAL", e.to_string()))?;
        self.notify(client, "payment_received", hash);
        Ok(())
    }

    /// Queues a notification of `client`'s transaction `hash`.
    fn notify(&self, client: &str, kind: &'static str, hash: &str) {
        if let Ok(transaction) = self.tx(client, hash) {
            self.notices.borrow_mut().push(Notice {
                client: client.to_owned(),
                kind,
                transaction,
            });
        }
    }

    /// The notifications queued since the last call, oldest first: the service sends each
    /// to its client.
    pub fn take_notices(&self) -> Vec<Notice> {
        std::mem::take(&mut *self.notices.borrow_mut())
    }

    fn pay_invoice(&self, grant: &Grant, params: &Value) -> std::result::Result<Value, Failure> {
        let invoice = params["invoice"]
            .as_str()
            .ok_or_else(|| fail("OTHER", "invoice is required"))?;
        let inv =
            crate::bolt11::decode(invoice).map_err(|e| fail("OTHER", format!("invoice: {e}")))?;
        let msat = inv
            .amount_msat
            .ok_or_else(|| fail("NOT_IMPLEMENTED", "invoices without an amount"))?;
        let sats = msat.div_ceil(1000);
        if let Some(b) = grant.budget_sat
            && grant.spent_sat.saturating_add(sats) > b
        {
            return Err(fail(
                "QUOTA_EXCEEDED",
                format!(
                    "{sats} sat would take this connection past its budget ({} of {b} sat spent)",
                    grant.spent_sat
                ),
            ));
        }
        let (paid, source) = match &self.payer {
            Some(payer) => {
                let sent = payer
                    .pay(invoice)
                    .map_err(|e| fail("PAYMENT_FAILED", e.to_string()))?;
                let paid = crate::cashu::Paid {
                    amount: sats,
                    fee: sent.fee_msat.div_ceil(1000),
                    preimage: Some(hex::encode(sent.preimage)),
                };
                (paid, payer.describe())
            }
            None => self.melt(invoice, sats)?,
        };
        let spent = paid.amount + paid.fee;
        let preimage = paid.preimage.clone().unwrap_or_default();
        let recorded = self
            .db
            .execute(
                "UPDATE grants SET spent = spent + ?1 WHERE client = ?2",
                params![spent as i64, grant.client],
            )
            .and_then(|_| {
                self.db.execute(
                    "INSERT OR REPLACE INTO txs (payment_hash, client, type, invoice, description, \
                     amount, fees, preimage, mint, created, expires, settled) VALUES \
                     (?1, ?2, 'outgoing', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?9)",
                    params![
                        inv.payment_hash,
                        grant.client,
                        invoice,
                        inv.description.unwrap_or_default(),
                        (paid.amount * 1000) as i64,
                        (paid.fee * 1000) as i64,
                        preimage,
                        source,
                        fleetmesh_proto::unix_now() as i64,
                        inv.expires_at as i64
                    ],
                )
            });
        match recorded {
            Ok(_) => self.notify(&grant.client, "payment_sent", &inv.payment_hash),
            Err(e) => tracing::warn!(error = %e, "an NWC payment made but not recorded"),
        }
        Ok(json!({"preimage": preimage, "fees_paid": paid.fee * 1000}))
    }

    /// Pays `invoice` (`sats`) by a melt of the wallet's ecash at its mint; the payment
    /// and the mint's URL.
    fn melt(
        &self,
        invoice: &str,
        sats: u64,
    ) -> std::result::Result<(crate::cashu::Paid, String), Failure> {
        let (mut wallet, mint) = self.wallet()?;
        let have: u64 = wallet
            .balances()
            .map_err(|e| fail("INTERNAL", e.to_string()))?
            .iter()
            .filter(|b| b.mint == mint.url())
            .map(|b| b.unspent)
            .sum();
        if have < sats {
            return Err(fail(
                "INSUFFICIENT_BALANCE",
                format!("{sats} sat asked, {have} sat held at {}", mint.url()),
            ));
        }
        let paid = wallet
            .pay(&mint, invoice)
            .map_err(|e| fail("PAYMENT_FAILED", e.to_string()))?;
        Ok((paid, mint.url().to_owned()))
    }

    fn list_transactions(
        &self,
        client: &str,
        params: &Value,
    ) -> std::result::Result<Value, Failure> {
        let from = params["from"].as_u64().unwrap_or(0) as i64;
        let until = params["until"]
            .as_u64()
            .unwrap_or(i64::MAX as u64)
            .min(i64::MAX as u64) as i64;
        let limit = params["limit"].as_u64().unwrap_or(MAX_LIST).min(MAX_LIST) as i64;
        let offset = params["offset"].as_u64().unwrap_or(0).min(i64::MAX as u64) as i64;
        let unpaid = params["unpaid"].as_bool().unwrap_or(false);
        let kind = params["type"].as_str().unwrap_or("");
        let hashes: Vec<String> = {
            let mut st = self
                .db
                .prepare(
                    "SELECT payment_hash FROM txs WHERE client = ?1 AND created >= ?2 AND created <= ?3 \
                     AND (?4 OR settled IS NOT NULL) AND (?5 = '' OR type = ?5) \
                     ORDER BY created DESC LIMIT ?6 OFFSET ?7",
                )
                .map_err(|e| fail("INTERNAL", e.to_string()))?;
            st.query_map(
                params![client, from, until, unpaid, kind, limit, offset],
                |r| r.get(0),
            )
            .and_then(|rows| rows.collect())
            .map_err(|e| fail("INTERNAL", e.to_string()))?
        };
        let txs = hashes
            .iter()
            .map(|h| self.tx(client, h))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(json!({"transactions": txs}))
    }

    /// The NIP-47 transaction object of `hash`, `client`'s.
    fn tx(&self, client: &str, hash: &str) -> std::result::Result<Value, Failure> {
        self.db
            .query_row(
                "SELECT type, invoice, description, amount, fees, preimage, created, expires, settled \
                 FROM txs WHERE payment_hash = ?1 AND client = ?2",
                params![hash, client],
                |r| {
                    let settled: Option<i64> = r.get(8)?;
                    Ok(json!({
                        "type": r.get::<_, String>(0)?,
                        "state": if settled.is_some() { "settled" } else { "pending" },
                        "invoice": r.get::<_, String>(1)?,
                        "description": r.get::<_, Option<String>>(2)?.unwrap_or_default(),
                        "description_hash": "",
                        "preimage": r.get::<_, Option<String>>(5)?.unwrap_or_default(),
                        "payment_hash": hash,
                        "amount": r.get::<_, i64>(3)?,
                        "fees_paid": r.get::<_, i64>(4)?,
                        "created_at": r.get::<_, i64>(6)?,
                        "expires_at": r.get::<_, Option<i64>>(7)?,
                        "settled_at": settled,
                        "metadata": {},
                    }))
                },
            )
            .optional()
            .map_err(|e| fail("INTERNAL", e.to_string()))?
            .ok_or_else(|| fail("NOT_FOUND", format!("no invoice {hash} of this connection")))
    }
}

#[cfg(test)]
mod tests;
