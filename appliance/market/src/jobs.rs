//! The job store: one SQLite file (`jobs.sqlite` in the node directory, WAL) holding every
//! job's ask, state and result.
//!
//! States: `accepted` → `running` → `verified` | `failed`, and `expired` for a job whose
//! ask expired before it finished; the last three are final. A job's id is derived from
//! its ask's address, so submitting the same ask twice is one job. A job that was
//! `running` when the node stopped is `accepted` again when the store reopens (it runs
//! again; jobs are deterministic), with that said in its reason.
//!
//! Every state a job enters is counted in `fleetmesh_jobs_total{engine, mode, state}`
//! (through the `metrics` facade), so jobs in flight are `accepted` minus the final ones.

use std::path::Path;
use std::sync::Mutex;

use fleetmesh_relay::store::sqlite;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::Value;

use super::receipt::Finished;
use super::{Refusal, refuse};
use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::{Engine, Mode};

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Checked and queued.
    Accepted,
    /// On an executor.
    Running,
    /// Ran, and the verifier of its mode accepted the output (final).
    Verified,
    /// Did not produce a verified output (final); the reason says why.
    Failed,
    /// Its ask expired first (final).
    Expired,
}

impl State {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Accepted => "accepted",
            State::Running => "running",
            State::Verified => "verified",
            State::Failed => "failed",
            State::Expired => "expired",
        }
    }

    fn parse(s: &str) -> State {
        match s {
            "accepted" => State::Accepted,
            "running" => State::Running,
            "verified" => State::Verified,
            "failed" => State::Failed,
            _ => State::Expired,
        }
    }

    /// Whether nothing follows.
    pub fn is_final(self) -> bool {
        matches!(self, State::Verified | State::Failed | State::Expired)
    }

    fn may_become(self, to: State) -> bool {
        matches!(
            (self, to),
            (
                State::Accepted,
                State::Running | State::Failed | State::Expired
            ) | (
                State::Running,
                State::Verified | State::Failed | State::Expired
            )
        )
    }
}

/// Counts a job entering `state`.
fn counted(engine: &str, mode: &str, state: &str) {
    metrics::counter!("fleetmesh_jobs_total", "engine" => engine.to_owned(),
        "mode" => mode.to_owned(), "state" => state.to_owned())
    .increment(1);
}

impl JobRecord {
    fn counted(&self) {
        counted(
            self.engine.as_str(),
            self.mode.as_str(),
            self.state.as_str(),
        );
    }
}

/// One job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// The job id (hex), chosen by the buyer.
    pub id: String,
    /// The ask's address `30810:<buyer>:<d>`.
    pub address: String,
    /// The ask event's id.
    pub ask_id: String,
    /// The ask event (JSON).
    pub ask: String,
    /// The buyer's public key.
    pub buyer: String,
    /// The engine that runs it.
    pub engine: Engine,
    /// The verification mode.
    pub mode: Mode,
    /// Where it stands.
    pub state: State,
    /// Why it is where it is (failures, expiry, a resume).
    pub reason: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds of the last change.
    pub updated_at: u64,
    /// The ask's expiration.
    pub expires_at: u64,
    /// SHA-256 of the output (hex), once finished.
    pub output_digest: Option<String>,
    /// Metered usage (the receipt's `metered`), once finished.
    pub metered: Option<Value>,
    /// The signed receipt event (JSON), once finished.
    pub receipt: Option<String>,
    /// The job message (compute/1.0, NIP-44 encrypted to this node).
    pub payload: String,
    /// The result message (compute/1.0, NIP-44 encrypted to the buyer), once finished.
    pub result: Option<String>,
    /// The job's payment (`method`, `at`, `amount_sat`, `state`: `escrowed`, then
    /// `redeemed`, `released` or `unredeemed`, with a `reason`), when it carried one.
    pub payment: Option<Value>,
}

impl JobRecord {
    /// The record as JSON (what `job status` prints).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "ask": self.ask_id,
            "address": self.address,
            "buyer": self.buyer,
            "engine": self.engine,
            "mode": self.mode,
            "state": self.state.as_str(),
            "final": self.state.is_final(),
            "reason": self.reason,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "expires_at": self.expires_at,
            "output_digest": self.output_digest,
            "metered": self.metered,
            "payment": self.payment,
        })
    }
}

/// The SQLite job store.
#[derive(Debug)]
pub struct JobStore {
    conn: Mutex<Connection>,
}

fn storage(e: rusqlite::Error) -> Refusal {
    refuse("storage", e.to_string())
}

const COLUMNS: &str = "id, address, ask_id, ask, buyer, engine, mode, state, reason, created_at, \
                       updated_at, expires_at, output_digest, metered, receipt, payload, result, \
                       payment";

/// A protocol word stored as text; one this build does not know is a conversion error
/// naming the column, not a panic.
fn word<T>(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<T>
where
    T: std::str::FromStr<Err = fleetmesh_proto::Error>,
{
    r.get::<_, String>(i)?.parse().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobRecord> {
    let metered: Option<String> = r.get(13)?;
    Ok(JobRecord {
        id: r.get(0)?,
        address: r.get(1)?,
        ask_id: r.get(2)?,
        ask: r.get(3)?,
        buyer: r.get(4)?,
        engine: word(r, 5)?,
        mode: word(r, 6)?,
        state: State::parse(&r.get::<_, String>(7)?),
        reason: r.get(8)?,
        created_at: r.get::<_, i64>(9)? as u64,
        updated_at: r.get::<_, i64>(10)? as u64,
        expires_at: r.get::<_, i64>(11)? as u64,
        output_digest: r.get(12)?,
        metered: metered.and_then(|m| serde_json::from_str(&m).ok()),
        receipt: r.get(14)?,
        payload: r.get(15)?,
        result: r.get(16)?,
        payment: r
            .get::<_, Option<String>>(17)?
            .and_then(|p| serde_json::from_str(&p).ok()),
    })
}

/// The job store's schema, one step per version (`PRAGMA user_version`). Version 1 is the
/// first layout; its `IF NOT EXISTS` adopts files made before versions were counted.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS jobs (
         id TEXT PRIMARY KEY,
         address TEXT NOT NULL UNIQUE,
         ask_id TEXT NOT NULL,
         ask TEXT NOT NULL,
         buyer TEXT NOT NULL,
         engine TEXT NOT NULL,
         mode TEXT NOT NULL,
         state TEXT NOT NULL,
         reason TEXT,
         created_at INTEGER NOT NULL,
         updated_at INTEGER NOT NULL,
         expires_at INTEGER NOT NULL,
         output_digest TEXT,
         metered TEXT,
         receipt TEXT,
         payload TEXT NOT NULL,
         result TEXT
     );
     CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created_at);",
    // version 2: a buyer's unfinished jobs counted for `[jobs] per_buyer`
    "CREATE INDEX IF NOT EXISTS jobs_buyer ON jobs (buyer, state);",
    // version 3: what paid for the job (escrow, redeem)
    "ALTER TABLE jobs ADD COLUMN payment TEXT;",
];

impl JobStore {
    /// Opens (or creates) the store at `path`; jobs left `running` are `accepted` again.
    /// An existing file that is empty, not a database, damaged (`quick_check`) or from a
    /// newer build is refused and left as it is.
    ///
    /// # Errors
    /// `storage` when the file cannot be opened or is not a job store.
    pub fn open(path: &Path, now: u64) -> Result<JobStore, Refusal> {
        let store_err = |e: fleetmesh_relay::Error| refuse("storage", e.to_string());
        let mut conn = sqlite::open(path, sqlite::Mode::CreateIfAbsent, true).map_err(store_err)?;
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")
            .map_err(storage)?;
        sqlite::migrate(&mut conn, path, MIGRATIONS).map_err(store_err)?;
        conn.execute(
            "UPDATE jobs SET state = 'accepted', reason = 'resumed after a restart', \
             updated_at = ?1 WHERE state = 'running'",
            params![now as i64],
        )
        .map_err(storage)?;
        Ok(JobStore {
            conn: Mutex::new(conn),
        })
    }

    fn conn(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Fails every running job that has run past its wall limit, `wall(ask event)` seconds,
    /// and a grace of a second plus a tenth: the ids failed, each with its limit.
    ///
    /// # Errors
    /// `storage`.
    pub fn fail_overdue(
        &self,
        now: u64,
        wall: impl Fn(&Value) -> u64,
    ) -> Result<Vec<(String, u64)>, Refusal> {
        let mut failed = Vec::new();
        for job in self.in_state(State::Running)? {
            let ask: Value = serde_json::from_str(&job.ask).unwrap_or_default();
            let limit = wall(&ask);
            let deadline = job
                .updated_at
                .saturating_add(limit)
                .saturating_add(1 + limit / 10);
            if now > deadline {
                let why = format!("limit: the job ran past its wall limit of {limit} s");
                // a job that finished meanwhile is left as it is
                if self
                    .transition(&job.id, State::Failed, Some(&why), now)
                    .is_ok()
                {
                    failed.push((job.id, limit));
                }
            }
        }
        Ok(failed)
    }

    /// Records job `job_id` for `ask` with its encrypted `payload`, or returns the job it
    /// already is (`false`: not new). A new job is taken only while the ask's buyer holds
    /// fewer than `per_buyer` unfinished (accepted or running) jobs.
    ///
    /// # Errors
    /// `conflict` when the ask's address already holds another job, or the job id belongs
    /// to another ask; `quota` when the buyer holds `per_buyer` unfinished jobs; `storage`.
    pub fn submit(
        &self,
        ask: &Ask,
        job_id: &str,
        payload: &str,
        now: u64,
        per_buyer: u64,
    ) -> Result<(JobRecord, bool), Refusal> {
        let address = ask.address();
        let conn = self.conn();
        let at_address = conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM jobs WHERE address = ?1"),
                params![address],
                row,
            )
            .optional()
            .map_err(storage)?;
        if let Some(existing) = at_address {
            if existing.id != job_id {
                return Err(refuse(
                    "conflict",
                    format!(
                        "the ask {address} already holds job {}; a new job needs a new ask (d tag)",
                        existing.id
                    ),
                ));
            }
            return Ok((existing, false));
        }
        if Self::get_in(&conn, job_id)?.is_some() {
            return Err(refuse(
                "conflict",
                format!("job {job_id} belongs to another ask"),
            ));
        }
        let unfinished = conn
            .query_row(
                "SELECT COUNT(*) FROM jobs WHERE buyer = ?1 AND state IN ('accepted', 'running')",
                params![ask.buyer()],
                |r| r.get::<_, i64>(0),
            )
            .map_err(storage)?
            .max(0) as u64;
        if unfinished >= per_buyer {
            return Err(refuse(
                "quota",
                format!(
                    "buyer {} holds {unfinished} unfinished jobs, this node's most per buyer \
                     ([jobs] per_buyer); submit again when one has finished",
                    ask.buyer()
                ),
            ));
        }
        conn.execute(
            "INSERT INTO jobs (id, address, ask_id, ask, buyer, engine, mode, state, created_at, \
             updated_at, expires_at, payload) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'accepted', ?8, ?8, ?9, ?10)",
            params![
                job_id,
                address,
                ask.event.id_hex(),
                ask.event.to_json(),
                ask.buyer(),
                ask.engine.as_str(),
                ask.mode.as_str(),
                now as i64,
                ask.expires_at as i64,
                payload
            ],
        )
        .map_err(storage)?;
        let rec = Self::get_in(&conn, job_id)?.expect("just inserted");
        rec.counted();
        Ok((rec, true))
    }

    fn get_in(conn: &Connection, id: &str) -> Result<Option<JobRecord>, Refusal> {
        conn.query_row(
            &format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1"),
            params![id],
            row,
        )
        .optional()
        .map_err(storage)
    }

    /// The job `id`, if there is one.
    ///
    /// # Errors
    /// `storage`.
    pub fn get(&self, id: &str) -> Result<Option<JobRecord>, Refusal> {
        Self::get_in(&self.conn(), id)
    }

    /// Jobs in `state`, oldest first.
    ///
    /// # Errors
    /// `storage`.
    pub fn in_state(&self, state: State) -> Result<Vec<JobRecord>, Refusal> {
        let conn = self.conn();
        let mut q = conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE state = ?1 ORDER BY created_at, id"
            ))
            .map_err(storage)?;
        q.query_map(params![state.as_str()], row)
            .map_err(storage)?
            .collect::<rusqlite::Result<_>>()
            .map_err(storage)
    }

    /// The `n` jobs changed last, newest first.
    ///
    /// # Errors
    /// `storage`.
    pub fn recent(&self, n: usize) -> Result<Vec<JobRecord>, Refusal> {
        let conn = self.conn();
        let mut q = conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM jobs ORDER BY updated_at DESC, id LIMIT ?1"
            ))
            .map_err(storage)?;
        q.query_map(params![n as i64], row)
            .map_err(storage)?
            .collect::<rusqlite::Result<_>>()
            .map_err(storage)
    }

    /// Moves job `id` to `to` (with `reason`), if that is a step its state allows.
    ///
    /// # Errors
    /// `not_found`; `bad_transition` (for example out of a final state); `storage`.
    pub fn transition(
        &self,
        id: &str,
        to: State,
        reason: Option<&str>,
        now: u64,
    ) -> Result<JobRecord, Refusal> {
        let rec = Self::transition_in(&self.conn(), id, to, reason, now)?;
        rec.counted();
        Ok(rec)
    }

    fn transition_in(
        conn: &Connection,
        id: &str,
        to: State,
        reason: Option<&str>,
        now: u64,
    ) -> Result<JobRecord, Refusal> {
        let job =
            Self::get_in(conn, id)?.ok_or_else(|| refuse("not_found", format!("no job {id}")))?;
        if !job.state.may_become(to) {
            return Err(refuse(
                "bad_transition",
                format!(
                    "job {id} is {}; it cannot become {}",
                    job.state.as_str(),
                    to.as_str()
                ),
            ));
        }
        // compare-and-set on the state read, so two workers cannot both take a job
        let changed = conn
            .execute(
                "UPDATE jobs SET state = ?1, reason = ?2, updated_at = ?3 WHERE id = ?4 AND state = ?5",
                params![to.as_str(), reason, now as i64, id, job.state.as_str()],
            )
            .map_err(storage)?;
        if changed != 1 {
            return Err(refuse(
                "bad_transition",
                format!("job {id} changed meanwhile"),
            ));
        }
        Ok(Self::get_in(conn, id)?.expect("present"))
    }

    /// Finishes running job `id`: `verified` when `failure` is None, else `failed` with
    /// that reason; with the output digest and metered usage of `done` and the signed
    /// receipt and the encrypted result message.
    ///
    /// # Errors
    /// As [`JobStore::transition`].
    pub fn finish(
        &self,
        id: &str,
        failure: Option<&str>,
        done: &Finished,
        (receipt, result): (&str, &str),
        now: u64,
    ) -> Result<JobRecord, Refusal> {
        let to = if failure.is_none() {
            State::Verified
        } else {
            State::Failed
        };
        // One transaction under one lock: nobody sees the final state without its receipt
        // and metered usage, not even after a crash between the two writes.
        let conn = self.conn();
        let tx = conn.unchecked_transaction().map_err(storage)?;
        Self::transition_in(&tx, id, to, failure, now)?;
        tx.execute(
            "UPDATE jobs SET output_digest = ?1, metered = ?2, receipt = ?3, result = ?4 \
             WHERE id = ?5",
            params![
                done.output_digest,
                done.metered.to_string(),
                receipt,
                result,
                id
            ],
        )
        .map_err(storage)?;
        tx.commit().map_err(storage)?;
        let rec = Self::get_in(&conn, id)?.expect("present");
        rec.counted();
        Ok(rec)
    }

    /// Records what paid for job `id` (see [`JobRecord::payment`]).
    ///
    /// # Errors
    /// `storage`.
    pub fn set_payment(&self, id: &str, payment: &Value) -> Result<(), Refusal> {
        self.conn()
            .execute(
                "UPDATE jobs SET payment = ?1 WHERE id = ?2",
                params![payment.to_string(), id],
            )
            .map(drop)
            .map_err(storage)
    }

    /// Finished jobs whose payment is still `escrowed` (a restart between the receipt and
    /// the redeem).
    ///
    /// # Errors
    /// `storage`.
    pub fn escrowed(&self) -> Result<Vec<JobRecord>, Refusal> {
        let conn = self.conn();
        let mut q = conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM jobs WHERE state = 'verified' AND \
                 json_extract(payment, '$.state') = 'escrowed'"
            ))
            .map_err(storage)?;
        let rows = q.query_map([], row).map_err(storage)?;
        rows.collect::<rusqlite::Result<_>>().map_err(storage)
    }

    /// Expires every unfinished job whose ask expired by `now`; returns their ids.
    ///
    /// # Errors
    /// `storage`.
    pub fn expire_due(&self, now: u64) -> Result<Vec<String>, Refusal> {
        let conn = self.conn();
        let mut q = conn
            .prepare(
                "UPDATE jobs SET state = 'expired', reason = 'the ask expired before the job \
                 finished', updated_at = ?1 WHERE state IN ('accepted', 'running') AND \
                 expires_at <= ?1 RETURNING id, engine, mode",
            )
            .map_err(storage)?;
        let expired: Vec<(String, String, String)> = q
            .query_map(params![now as i64], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(storage)?
            .collect::<rusqlite::Result<_>>()
            .map_err(storage)?;
        Ok(expired
            .into_iter()
            .map(|(id, engine, mode)| {
                counted(&engine, &mode, State::Expired.as_str());
                id
            })
            .collect())
    }
}
