//! The ledger's SQLite file, `DIR/ledger/ledger.sqlite`: the decisions the node took, in
//! order, and each peer's standing, for queries (`GET /v1/ledger`, `meshnode ledger
//! show`). The evidence log is the source of truth; [`Books::open`] replays it and brings
//! the file up to it, so a decision recorded in the log but not here (a crash between
//! the two writes) is added, never lost.

use std::path::{Path, PathBuf};

use fleetmesh_relay::store::sqlite::{self, Mode};
use rusqlite::{Connection, params};

use crate::evidence::{EvidenceLog, Line, Refused, replay};
use crate::ladder::{Decision, Ledger};
use crate::{LedgerError, Result};

/// The evidence log, the fold over it and the SQLite file, kept in step.
#[derive(Debug)]
pub struct Books {
    ledger: Ledger,
    log: EvidenceLog,
    conn: Connection,
    path: PathBuf,
}

fn store_err(path: &Path) -> impl Fn(rusqlite::Error) -> LedgerError + '_ {
    move |e| LedgerError::Store {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

impl Books {
    /// Opens the books in `dir` (`evidence.jsonl`, `ledger.sqlite`) of the node `us`:
    /// replays the log, records what the file lacks. Returns the lines of the log that were
    /// not taken (a torn last line after a crash, say) beside the books.
    ///
    /// # Errors
    /// [`LedgerError::Log`]; [`LedgerError::Store`] for a damaged file (refused, never
    /// recreated) or a failed statement.
    pub fn open(dir: &Path, us: &str, now: u64) -> Result<(Books, Vec<Refused>)> {
        let log_path = dir.join("evidence.jsonl");
        let db = dir.join("ledger.sqlite");
        std::fs::create_dir_all(dir).map_err(|source| LedgerError::Log {
            path: dir.display().to_string(),
            source,
        })?;
        let conn =
            sqlite::open(&db, Mode::CreateIfAbsent, true).map_err(|e| LedgerError::Store {
                path: db.display().to_string(),
                reason: e.to_string(),
            })?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS decisions (n INTEGER PRIMARY KEY, peer TEXT NOT NULL, \
             window INTEGER NOT NULL, json TEXT NOT NULL);
             CREATE INDEX IF NOT EXISTS decisions_peer ON decisions (peer, n);
             CREATE TABLE IF NOT EXISTS standing (peer TEXT PRIMARY KEY, json TEXT NOT NULL);",
        )
        .map_err(store_err(&db))?;
        let fresh = !log_path.exists();
        let replayed = if fresh {
            Default::default()
        } else {
            replay(&log_path)?
        };
        let log = EvidenceLog::open(&log_path)?;
        let mut books = Books {
            ledger: replayed.ledger,
            log,
            conn,
            path: db,
        };
        match books.ledger.us() {
            Some(owner) if owner != us => {
                return Err(LedgerError::Store {
                    path: log_path.display().to_string(),
                    reason: format!("the evidence log is {owner}'s, this node is {us}"),
                });
            }
            Some(_) => {}
            None => {
                books.record(Line::Node {
                    at: now,
                    pubkey: us.to_owned(),
                })?;
            }
        }
        let have: i64 = books
            .conn
            .query_row("SELECT count(*) FROM decisions", [], |r| r.get(0))
            .map_err(store_err(&books.path))?;
        let have = usize::try_from(have).unwrap_or(0);
        if replayed.decisions.len() > have {
            books.store(&replayed.decisions[have..])?;
        }
        Ok((books, replayed.refused))
    }

    /// The fold.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Appends `line` to the log, applies it, records the decisions; returns them.
    ///
    /// # Errors
    /// [`LedgerError::Log`] (nothing applied) or [`LedgerError::Store`].
    pub fn record(&mut self, line: Line) -> Result<Vec<Decision>> {
        let (text, _) = self.log.append(&line)?;
        let decisions = match self.ledger.apply(&text) {
            Ok(d) => d,
            Err(why) => {
                tracing::warn!(%why, "a line of our own evidence log was not taken");
                Vec::new()
            }
        };
        self.store(&decisions)?;
        Ok(decisions)
    }

    fn store(&mut self, decisions: &[Decision]) -> Result<()> {
        let err = store_err(&self.path);
        let tx = self.conn.transaction().map_err(&err)?;
        for d in decisions {
            let json = serde_json::to_string(d).expect("a decision serializes");
            tx.execute(
                "INSERT INTO decisions (peer, window, json) VALUES (?1, ?2, ?3)",
                params![d.peer, d.window as i64, json],
            )
            .map_err(&err)?;
        }
        for (peer, s) in self.ledger.standings() {
            let json = serde_json::to_string(&s).expect("a standing serializes");
            tx.execute(
                "INSERT INTO standing (peer, json) VALUES (?1, ?2) \
                 ON CONFLICT (peer) DO UPDATE SET json = excluded.json",
                params![peer, json],
            )
            .map_err(&err)?;
        }
        tx.commit().map_err(&err)
    }

    /// The decisions recorded in the file, in order (for `peer` only, when given).
    ///
    /// # Errors
    /// [`LedgerError::Store`].
    pub fn decisions(&self, peer: Option<&str>) -> Result<Vec<Decision>> {
        read_decisions(&self.conn, &self.path, peer)
    }
}

/// The decisions recorded in the books in `dir`, in order, read without opening the books
/// for writing (`GET /v1/ledger` while the daemon runs); empty when there are none yet.
///
/// # Errors
/// [`LedgerError::Store`] for a damaged file.
pub fn recorded(dir: &Path) -> Result<Vec<Decision>> {
    let db = dir.join("ledger.sqlite");
    if !db.exists() {
        return Ok(Vec::new());
    }
    let conn = sqlite::open(&db, Mode::Existing, false).map_err(|e| LedgerError::Store {
        path: db.display().to_string(),
        reason: e.to_string(),
    })?;
    read_decisions(&conn, &db, None)
}

/// The decisions in the file behind `conn` (at `path`), in order; `peer`'s only when given.
fn read_decisions(conn: &Connection, path: &Path, peer: Option<&str>) -> Result<Vec<Decision>> {
    let err = store_err(path);
    let mut st = conn
        .prepare("SELECT json FROM decisions WHERE ?1 IS NULL OR peer = ?1 ORDER BY n")
        .map_err(&err)?;
    let rows = st
        .query_map(params![peer], |r| r.get::<_, String>(0))
        .map_err(&err)?;
    let mut out = Vec::new();
    for json in rows {
        if let Ok(d) = serde_json::from_str(&json.map_err(&err)?) {
            out.push(d);
        }
    }
    Ok(out)
}
