//! The wallet's SQLite file: keysets, proofs by state, operations written ahead of every
//! request to a mint, and a history of what came and went.
//!
//! A proof is `unspent` (ours to spend), `reserved` (the input of an operation in flight),
//! `sent` (in a token we handed out, until the mint says it is spent) or `spent`. An
//! operation row holds the outputs (secret and blinding factor) it asked the mint to sign
//! before the request leaves, so that a crash between the mint's answer and our record
//! is recovered by asking the mint again ([`super::Wallet::recover`]).

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{Connection, OptionalExtension as _, params};
use secp256k1::PublicKey;

use super::{KeysetInfo, Proof, dhke};
use crate::{Result, SettleError};

/// The schema version this build writes (`PRAGMA user_version`).
const SCHEMA: i64 = 1;

/// An output asked of the mint: where its proof goes once signed.
#[derive(Debug, Clone)]
pub(crate) struct Output {
    pub id: String,
    pub amount: u64,
    pub secret: String,
    pub r: String,
    pub b_: String,
    /// The state its proof takes: `unspent` (kept) or `sent` (for a token).
    pub dest: &'static str,
}

/// An operation left in flight (a crash, or a mint that did not answer).
#[derive(Debug, Clone)]
pub(crate) struct Op {
    pub op: i64,
    pub kind: String,
    pub detail: String,
    pub outputs: Vec<Output>,
    pub inputs: Vec<Proof>,
}

/// A payment in or out, as the wallet recorded it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HistoryLine {
    /// Unix seconds.
    pub at: u64,
    /// `mint`, `send`, `receive`, `pay` or `recover`.
    pub kind: String,
    /// The mint.
    pub mint: String,
    /// Sats moved (for `receive`, after the fee).
    pub amount: u64,
    /// Sats of fees.
    pub fee: u64,
    /// The quote, the invoice paid, or the token's memo.
    pub detail: String,
}

pub(crate) struct Store {
    conn: Connection,
    path: String,
}

impl Store {
    /// Opens (or creates) the file; a file that is not this wallet's is refused, never
    /// replaced.
    pub fn open(path: &Path) -> Result<Store> {
        let shown = path.display().to_string();
        let err = |e: rusqlite::Error| SettleError::Store {
            path: shown.clone(),
            reason: e.to_string(),
        };
        let conn = crate::open_db(path, SCHEMA)?;
        // IMMEDIATE: the write lock first, waited for under the busy timeout; a deferred
        // transaction reads the schema, and its write would then fail at once (busy, not
        // retried) when the daemon or another command wrote in between
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;
             BEGIN IMMEDIATE;
             CREATE TABLE IF NOT EXISTS keysets (
                 mint TEXT NOT NULL, id TEXT NOT NULL, unit TEXT NOT NULL,
                 active INTEGER NOT NULL, fee_ppk INTEGER NOT NULL, keys TEXT NOT NULL,
                 PRIMARY KEY (mint, id));
             CREATE TABLE IF NOT EXISTS proofs (
                 secret TEXT PRIMARY KEY, mint TEXT NOT NULL, id TEXT NOT NULL,
                 amount INTEGER NOT NULL, c TEXT NOT NULL, state TEXT NOT NULL,
                 op INTEGER, added INTEGER NOT NULL);
             CREATE INDEX IF NOT EXISTS proofs_by_state ON proofs (mint, state);
             CREATE TABLE IF NOT EXISTS ops (
                 op INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL,
                 mint TEXT NOT NULL, detail TEXT NOT NULL, started INTEGER NOT NULL);
             CREATE TABLE IF NOT EXISTS outputs (
                 op INTEGER NOT NULL, idx INTEGER NOT NULL, id TEXT NOT NULL,
                 amount INTEGER NOT NULL, secret TEXT NOT NULL, r TEXT NOT NULL,
                 b_ TEXT NOT NULL, dest TEXT NOT NULL, PRIMARY KEY (op, idx));
             CREATE TABLE IF NOT EXISTS history (
                 at INTEGER NOT NULL, kind TEXT NOT NULL, mint TEXT NOT NULL,
                 amount INTEGER NOT NULL, fee INTEGER NOT NULL, detail TEXT NOT NULL);
             PRAGMA user_version = 1;
             COMMIT;",
        )
        .map_err(err)?;
        Ok(Store { conn, path: shown })
    }

    fn err(&self, e: rusqlite::Error) -> SettleError {
        SettleError::Store {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }

    /// Every row of a query, mapped.
    fn rows<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let mut st = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        let rows = st.query_map(params, map).map_err(|e| self.err(e))?;
        rows.collect::<std::result::Result<_, _>>()
            .map_err(|e| self.err(e))
    }

    /// A keyset's info and keys, if stored.
    pub fn keyset(
        &self,
        mint: &str,
        id: &str,
    ) -> Result<Option<(KeysetInfo, BTreeMap<u64, PublicKey>)>> {
        let row = self
            .conn
            .query_row(
                "SELECT unit, active, fee_ppk, keys FROM keysets WHERE mint = ?1 AND id = ?2",
                params![mint, id],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, bool>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, String>(3)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some((unit, active, fee, keys)) = row else {
            return Ok(None);
        };
        let hexes: BTreeMap<u64, String> =
            serde_json::from_str(&keys).map_err(|e| SettleError::Store {
                path: self.path.clone(),
                reason: format!("keys of keyset {id}: {e}"),
            })?;
        let mut keys = BTreeMap::new();
        for (a, k) in hexes {
            keys.insert(a, dhke::point(&k, "stored key")?);
        }
        let info = KeysetInfo {
            id: id.to_owned(),
            unit,
            active,
            input_fee_ppk: fee as u64,
        };
        Ok(Some((info, keys)))
    }

    /// Stores a keyset (keys already checked against its id) or refreshes its info.
    pub fn put_keyset(
        &self,
        mint: &str,
        info: &KeysetInfo,
        keys: &BTreeMap<u64, PublicKey>,
    ) -> Result<()> {
        let hexes: BTreeMap<u64, String> = keys
            .iter()
            .map(|(a, k)| (*a, hex::encode(k.serialize())))
            .collect();
        self.conn
            .execute(
                "INSERT INTO keysets (mint, id, unit, active, fee_ppk, keys)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (mint, id) DO UPDATE SET active = ?4, fee_ppk = ?5",
                params![
                    mint,
                    info.id,
                    info.unit,
                    info.active,
                    info.input_fee_ppk as i64,
                    serde_json::to_string(&hexes).unwrap_or_default()
                ],
            )
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The proofs of `mint` in `state`, largest first.
    pub fn proofs(&self, mint: &str, state: &str) -> Result<Vec<Proof>> {
        self.rows(
            "SELECT amount, id, secret, c FROM proofs WHERE mint = ?1 AND state = ?2
             ORDER BY amount DESC, secret",
            params![mint, state],
            proof_row,
        )
    }

    /// Sats per (mint, state).
    pub fn sums(&self) -> Result<Vec<(String, String, u64)>> {
        self.rows(
            "SELECT mint, state, SUM(amount) FROM proofs GROUP BY mint, state ORDER BY mint",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)? as u64)),
        )
    }

    /// Moves proofs (by secret) to `state`.
    pub fn set_state(&mut self, secrets: &[&str], state: &str) -> Result<()> {
        let path = self.path.clone();
        let e = move |e: rusqlite::Error| SettleError::Store {
            path: path.clone(),
            reason: e.to_string(),
        };
        let tx = self.conn.transaction().map_err(&e)?;
        for s in secrets {
            tx.execute(
                "UPDATE proofs SET state = ?2, op = NULL WHERE secret = ?1",
                params![s, state],
            )
            .map_err(&e)?;
        }
        tx.commit().map_err(&e)
    }

    /// Writes an operation ahead of its request: its outputs, and our `inputs` reserved.
    pub fn begin(
        &mut self,
        kind: &str,
        mint: &str,
        detail: &str,
        inputs: &[Proof],
        outputs: &[Output],
    ) -> Result<i64> {
        let path = self.path.clone();
        let e = move |e: rusqlite::Error| SettleError::Store {
            path: path.clone(),
            reason: e.to_string(),
        };
        let tx = self.conn.transaction().map_err(&e)?;
        tx.execute(
            "INSERT INTO ops (kind, mint, detail, started) VALUES (?1, ?2, ?3, ?4)",
            params![kind, mint, detail, now_i64()],
        )
        .map_err(&e)?;
        let op = tx.last_insert_rowid();
        for p in inputs {
            let n = tx
                .execute(
                    "UPDATE proofs SET state = 'reserved', op = ?2
                     WHERE secret = ?1 AND state = 'unspent'",
                    params![p.secret, op],
                )
                .map_err(&e)?;
            if n != 1 {
                return Err(SettleError::Refused(format!(
                    "proof {}… is no longer unspent",
                    &p.secret.chars().take(8).collect::<String>()
                )));
            }
        }
        for (i, o) in outputs.iter().enumerate() {
            tx.execute(
                "INSERT INTO outputs (op, idx, id, amount, secret, r, b_, dest)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    op,
                    i as i64,
                    o.id,
                    o.amount as i64,
                    o.secret,
                    o.r,
                    o.b_,
                    o.dest
                ],
            )
            .map_err(&e)?;
        }
        tx.commit().map_err(&e)?;
        Ok(op)
    }

    /// Ends an operation in one transaction: its new proofs stored, its reserved inputs
    /// moved to `inputs_to` (`spent`, or back to `unspent` when the mint refused), a
    /// history line when `amount` is given.
    pub fn finish(
        &mut self,
        op: i64,
        mint: &str,
        new: &[(Proof, &str)],
        inputs_to: &str,
        history: Option<(&str, u64, u64, &str)>,
    ) -> Result<()> {
        let path = self.path.clone();
        let e = move |e: rusqlite::Error| SettleError::Store {
            path: path.clone(),
            reason: e.to_string(),
        };
        let tx = self.conn.transaction().map_err(&e)?;
        for (p, state) in new {
            tx.execute(
                "INSERT OR IGNORE INTO proofs (secret, mint, id, amount, c, state, op, added)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7)",
                params![p.secret, mint, p.id, p.amount as i64, p.c, state, now_i64()],
            )
            .map_err(&e)?;
        }
        tx.execute(
            "UPDATE proofs SET state = ?2, op = NULL WHERE op = ?1 AND state = 'reserved'",
            params![op, inputs_to],
        )
        .map_err(&e)?;
        tx.execute("DELETE FROM outputs WHERE op = ?1", params![op])
            .map_err(&e)?;
        tx.execute("DELETE FROM ops WHERE op = ?1", params![op])
            .map_err(&e)?;
        if let Some((kind, amount, fee, detail)) = history {
            insert_history(&tx, kind, mint, amount, fee, detail).map_err(&e)?;
        }
        tx.commit().map_err(&e)
    }

    /// Adds a history line.
    pub fn note(&self, kind: &str, mint: &str, amount: u64, fee: u64, detail: &str) -> Result<()> {
        insert_history(&self.conn, kind, mint, amount, fee, detail).map_err(|e| self.err(e))
    }

    /// The operations of `mint` left in flight, oldest first.
    pub fn open_ops(&self, mint: &str) -> Result<Vec<Op>> {
        let heads: Vec<(i64, String, String)> = self.rows(
            "SELECT op, kind, detail FROM ops WHERE mint = ?1 ORDER BY op",
            params![mint],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let mut ops = Vec::new();
        for (op, kind, detail) in heads {
            let outputs = self.rows(
                "SELECT id, amount, secret, r, b_, dest FROM outputs WHERE op = ?1 ORDER BY idx",
                params![op],
                |r| {
                    let dest: String = r.get(5)?;
                    Ok(Output {
                        id: r.get(0)?,
                        amount: r.get::<_, i64>(1)? as u64,
                        secret: r.get(2)?,
                        r: r.get(3)?,
                        b_: r.get(4)?,
                        dest: if dest == "sent" { "sent" } else { "unspent" },
                    })
                },
            )?;
            let inputs = self.rows(
                "SELECT amount, id, secret, c FROM proofs WHERE op = ?1",
                params![op],
                proof_row,
            )?;
            ops.push(Op {
                op,
                kind,
                detail,
                outputs,
                inputs,
            });
        }
        Ok(ops)
    }

    /// Sats received under `detail` (kinds `receive` and `recover`), if any.
    pub fn received(&self, detail: &str) -> Result<Option<u64>> {
        self.conn
            .query_row(
                "SELECT SUM(amount) FROM history WHERE kind IN ('receive', 'recover') \
                 AND (detail = ?1 OR substr(detail, 1, length(?1) + 1) = ?1 || ' ')",
                params![detail],
                |r| r.get::<_, Option<i64>>(0),
            )
            .map(|s| s.map(|s| s as u64))
            .map_err(|e| self.err(e))
    }

    /// The last `n` history lines, newest first.
    pub fn history(&self, n: usize) -> Result<Vec<HistoryLine>> {
        self.rows(
            "SELECT at, kind, mint, amount, fee, detail FROM history ORDER BY rowid DESC LIMIT ?1",
            params![n as i64],
            |r| {
                Ok(HistoryLine {
                    at: r.get::<_, i64>(0)? as u64,
                    kind: r.get(1)?,
                    mint: r.get(2)?,
                    amount: r.get::<_, i64>(3)? as u64,
                    fee: r.get::<_, i64>(4)? as u64,
                    detail: r.get(5)?,
                })
            },
        )
    }
}

/// One history line, in `conn` (a transaction derefs to it).
fn insert_history(
    conn: &Connection,
    kind: &str,
    mint: &str,
    amount: u64,
    fee: u64,
    detail: &str,
) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO history (at, kind, mint, amount, fee, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![now_i64(), kind, mint, amount as i64, fee as i64, detail],
    )
    .map(drop)
}

/// A proof from `SELECT amount, id, secret, c`.
fn proof_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Proof> {
    Ok(Proof {
        amount: r.get::<_, i64>(0)? as u64,
        id: r.get(1)?,
        secret: r.get(2)?,
        c: r.get(3)?,
        witness: None,
    })
}

/// Now in Unix seconds, as SQLite's signed integer.
fn now_i64() -> i64 {
    i64::try_from(fleetmesh_proto::unix_now()).unwrap_or(i64::MAX)
}
