//! The ledger's SQLite file, `DIR/ledger/ledger.sqlite`: the decisions the node took, in
//! order, and each peer's standing, for queries (`GET /v1/ledger`, `meshnode ledger
//! show`). The evidence log is the source of truth; [`Books::open`] replays it and brings
//! the file up to it, so a decision recorded in the log but not here (a crash between
//! the two writes) is added, never lost.

use std::path::{Path, PathBuf};

use fleetmesh_relay::store::sqlite::{self, Mode};
use rusqlite::{Connection, params};

use crate::evidence::{EvidenceLog, Line, Refused, file_digest, replay};
use crate::ladder::{Decision, Ledger};
use crate::{LedgerError, Result};

/// The evidence log, the fold over it and the SQLite file, kept in step.
#[derive(Debug)]
pub struct Books {
    ledger: Ledger,
    log: EvidenceLog,
    conn: Connection,
    path: PathBuf,
    /// The ledger's directory.
    dir: PathBuf,
    /// `DIR/lock`, locked while the books are open: one writer per log.
    _lock: std::fs::File,
}

/// The evidence log's current segment in the ledger's directory.
pub const LOG: &str = "evidence.jsonl";
/// A new segment being written, before it takes the current one's place.
const NEXT: &str = "evidence.jsonl.next";

/// Whether `name` is a kept (rotated) segment's: `evidence-<time>.jsonl`.
pub fn is_segment(name: &str) -> bool {
    name.strip_prefix("evidence-")
        .and_then(|r| r.strip_suffix(".jsonl"))
        .is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
}

/// The kept segments in `dir`, oldest first, then the current one: the whole log in order.
///
/// # Errors
/// [`LedgerError::Log`] when the directory cannot be read.
pub fn segments(dir: &Path) -> Result<Vec<PathBuf>> {
    let err = |source| LedgerError::Log {
        path: dir.display().to_string(),
        source,
    };
    let mut kept: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(is_segment)
        })
        .collect();
    kept.sort();
    let current = dir.join(LOG);
    if current.exists() {
        kept.push(current);
    }
    Ok(kept)
}

fn store_err(path: &Path) -> impl Fn(rusqlite::Error) -> LedgerError + '_ {
    move |e| LedgerError::Store {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// Takes `dir`'s lock file (released when the process ends, however it ends).
fn lock(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| LedgerError::Log {
            path: path.display().to_string(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(LedgerError::Busy {
            path: dir.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(LedgerError::Log {
            path: path.display().to_string(),
            source,
        }),
    }
}

impl Books {
    /// Opens the books in `dir` (`evidence.jsonl`, `ledger.sqlite`) of the node `us`:
    /// replays the log, records what the file lacks. A torn last line (a crash in the
    /// middle of a write) is moved aside into `evidence.torn-<now>` and a `repaired` line
    /// recorded ([`EvidenceLog::open`]). Returns the lines of the log that were not taken
    /// beside the books.
    ///
    /// # Errors
    /// [`LedgerError::Busy`] while another process has them open; [`LedgerError::Log`];
    /// [`LedgerError::Store`] for a damaged file (refused, never recreated) or a failed
    /// statement.
    pub fn open(dir: &Path, us: &str, now: u64) -> Result<(Books, Vec<Refused>)> {
        let log_path = dir.join(LOG);
        // a rotation cut short between its two renames: the new segment is whole
        if !log_path.exists() && dir.join(NEXT).exists() {
            std::fs::rename(dir.join(NEXT), &log_path).map_err(|source| LedgerError::Log {
                path: log_path.display().to_string(),
                source,
            })?;
        }
        let db = dir.join("ledger.sqlite");
        std::fs::create_dir_all(dir).map_err(|source| LedgerError::Log {
            path: dir.display().to_string(),
            source,
        })?;
        let lock = lock(dir)?;
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
        // another node's log is refused before anything is written to it
        if let Some(owner) = replayed.ledger.us()
            && owner != us
        {
            return Err(LedgerError::Store {
                path: log_path.display().to_string(),
                reason: format!("the evidence log is {owner}'s, this node is {us}"),
            });
        }
        // a torn last line is moved aside here, and a `repaired` line appended: the fold is
        // then the repaired file's (the torn line may have read as a line without its `\n`)
        let log = EvidenceLog::open(&log_path, now)?;
        let replayed = if log.repaired().is_some() {
            replay(&log_path)?
        } else {
            replayed
        };
        let before = replayed.decided_before();
        let mut books = Books {
            ledger: replayed.ledger,
            log,
            conn,
            path: db,
            dir: dir.to_owned(),
            _lock: lock,
        };
        if books.ledger.us().is_none() {
            books.record(Line::Node {
                at: now,
                pubkey: us.to_owned(),
            })?;
        }
        let have: i64 = books
            .conn
            .query_row("SELECT count(*) FROM decisions", [], |r| r.get(0))
            .map_err(store_err(&books.path))?;
        // the file holds the decisions of earlier segments too
        let have = usize::try_from(have).unwrap_or(0).saturating_sub(before);
        if replayed.decisions.len() > have {
            books.store(&replayed.decisions[have..], None)?;
        }
        Ok((books, replayed.refused))
    }

    /// The fold.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// The current segment's length in bytes.
    pub fn log_len(&self) -> u64 {
        self.log.len()
    }

    /// Starts a new segment of the evidence log at `at` when the current one is past
    /// `max_bytes`: it is kept as `evidence-<at>.jsonl` (the newest `keep` kept segments
    /// stay, older ones are removed; 0 keeps all) and the new `evidence.jsonl` begins with
    /// the node line and a checkpoint of the state naming the old one's SHA-256, so it
    /// replays alone, and after the kept ones ([`crate::evidence::replay_all`]) as one log.
    /// The new segment is written whole before it replaces the old one. Returns the kept
    /// segment's path when it rotated.
    ///
    /// # Errors
    /// [`LedgerError::Log`]; the current segment stays in place when the new one could not
    /// be written.
    pub fn rotate(&mut self, at: u64, max_bytes: u64, keep: usize) -> Result<Option<PathBuf>> {
        if self.log.len() <= max_bytes {
            return Ok(None);
        }
        let (Some(us), Some(state)) = (self.ledger.us().map(str::to_owned), self.ledger.snapshot())
        else {
            return Ok(None);
        };
        let (current, next) = (self.dir.join(LOG), self.dir.join(NEXT));
        let err = |path: &Path| {
            let path = path.display().to_string();
            move |source| LedgerError::Log { path, source }
        };
        let previous = file_digest(&current)?;
        let _ = std::fs::remove_file(&next);
        let mut fresh = EvidenceLog::open(&next, at)?;
        let mut ledger = self.ledger.clone();
        for line in [
            Line::Node { at, pubkey: us },
            Line::Checkpoint {
                at,
                previous,
                state: serde_json::to_value(&state).expect("a snapshot serializes"),
            },
        ] {
            let (text, _) = fresh.append(&line)?;
            ledger.apply(&text).map_err(|why| LedgerError::Log {
                path: next.display().to_string(),
                source: std::io::Error::other(why),
            })?;
        }
        drop(fresh);
        // named by time, so that names sort as segments follow each other (a name taken
        // in the same second moves on a second)
        let mut t = at;
        let mut kept = self.dir.join(format!("evidence-{t:020}.jsonl"));
        while kept.exists() {
            t += 1;
            kept = self.dir.join(format!("evidence-{t:020}.jsonl"));
        }
        std::fs::rename(&current, &kept).map_err(err(&current))?;
        std::fs::rename(&next, &current).map_err(err(&next))?;
        self.log = EvidenceLog::open(&current, at)?;
        self.ledger = ledger;
        if keep > 0 {
            let all = segments(&self.dir)?;
            let old = all.len().saturating_sub(1).saturating_sub(keep);
            for p in &all[..old] {
                std::fs::remove_file(p).map_err(err(p))?;
            }
        }
        tracing::info!(kept = %kept.display(), "evidence log rotated");
        Ok(Some(kept))
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
        // the standings the line and its decisions touched, not every peer's
        let mut touched: Vec<String> = decisions.iter().map(|d| d.peer.clone()).collect();
        touched.extend(line.peer().map(str::to_owned));
        self.store(&decisions, Some(&touched))?;
        Ok(decisions)
    }

    /// Records `decisions` and the standings of `peers` (every peer's for `None`).
    fn store(&mut self, decisions: &[Decision], peers: Option<&[String]>) -> Result<()> {
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
        let standings: Vec<(String, crate::Standing)> = match peers {
            None => self.ledger.standings().into_iter().collect(),
            Some(peers) => peers
                .iter()
                .filter_map(|p| Some((p.clone(), self.ledger.standing(p)?.clone())))
                .collect(),
        };
        for (peer, s) in standings {
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

/// The standing of a node among its peers, from the evidence log in its ledger directory
/// `dir` (`evidence.jsonl`) and the decisions it recorded as it took them (`ledger.sqlite`):
/// what a node's `GET /v1/ledger` and `meshnode ledger show` answer; empty when it keeps
/// no ledger yet.
///
/// # Errors
/// A log or store that cannot be read.
pub fn standing(dir: &Path) -> Result<serde_json::Value> {
    let log = dir.join("evidence.jsonl");
    if !log.exists() {
        return Ok(serde_json::json!({"node": null, "peers": {}, "decisions": []}));
    }
    let r = crate::evidence::replay(&log)?;
    Ok(serde_json::json!({
        "node": r.ledger.us(),
        "peers": r.ledger.standings(),
        "decisions": recorded(dir)?,
        "refused": r.refused,
        "repairs": r.repairs,
    }))
}
