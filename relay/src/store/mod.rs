//! The node's SQLite store (WAL): events with the columns filters need, a tag index,
//! NIP-09 deletion records, and node metadata.
//!
//! - [`Store`] is one connection with the synchronous API: the [`writer`] thread owns the
//!   one write connection (a checkpointer thread beside it copies the WAL back into the
//!   file, [`Checkpoints`]), [`readers`] hold read-only connections for queries, and
//!   `meshnode init` uses it directly.
//! - Events arrive here **already verified** (id, signature, schema): the store does not
//!   check them again. It does apply NIP-01's storage semantics: replaceable (0, 3,
//!   10000–19999) and addressable (30000–39999, keyed by kind, pubkey and `d`) versions
//!   replace older ones, ties broken by the lowest id; NIP-09 deletions remove their
//!   targets and keep them from coming back; NIP-40 expired events are never returned and
//!   are purged. Ephemeral events (20000–29999) never reach the store. That write path is
//!   `insert` (private), shaped so that a regular event costs one B-tree insert per index.
//!
//! The schema is versioned with `PRAGMA user_version` and migrated forward on open; a file
//! from a newer build is refused untouched, and so is an existing file that is empty or not
//! a database ([`sqlite`]): it is never recreated. [`Store::check`] runs SQLite's
//! `quick_check` (the node does at start-up).

mod api;
mod checkpointer;
mod insert;
pub mod memory;
pub mod readers;
pub mod sqlite;
pub mod writer;

pub use api::EventStore;
pub use checkpointer::Checkpoints;
pub use memory::MemoryStore;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::{Error, Result};
use fleetmesh_proto::event::Event;
use fleetmesh_proto::filter::Filter;

/// The newest schema version this build writes (one per step of `MIGRATIONS`).
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const MIGRATIONS: &[&str] = &[
    // v1. `rid` keeps secondary indexes small (8 bytes instead of a 32-byte id); `raw` is
    // the event's JSON as served, so queries never re-serialize.
    "CREATE TABLE events (
        rid INTEGER PRIMARY KEY,
        id BLOB NOT NULL UNIQUE,
        pubkey BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        kind INTEGER NOT NULL,
        dtag TEXT,
        expires_at INTEGER,
        raw TEXT NOT NULL
     );
     CREATE INDEX events_created ON events (created_at, id);
     CREATE INDEX events_kind ON events (kind, created_at);
     CREATE INDEX events_author ON events (pubkey, created_at);
     CREATE INDEX events_author_kind ON events (pubkey, kind, created_at);
     CREATE INDEX events_replace ON events (pubkey, kind, dtag) WHERE dtag IS NOT NULL;
     CREATE INDEX events_expiry ON events (expires_at) WHERE expires_at IS NOT NULL;
     CREATE TABLE tags (
        rid INTEGER NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        created_at INTEGER NOT NULL
     );
     CREATE INDEX tags_value ON tags (name, value, created_at);
     CREATE INDEX tags_rid ON tags (rid);
     CREATE TABLE deletions (
        target TEXT NOT NULL,
        pubkey BLOB NOT NULL,
        deleted_at INTEGER NOT NULL,
        PRIMARY KEY (target, pubkey)
     ) WITHOUT ROWID;
     CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;",
    // v2. Fewer B-trees touched per insert (each one a page written to the WAL per commit,
    // which is what bounds ingest as the store grows; bench/RESULTS.md):
    // - the tag index is the table itself (WITHOUT ROWID, keyed in query order) instead of a
    //   row, a `(name, value, created_at)` index and a `rid` index; an event's entries are
    //   found again from its JSON when it is deleted;
    // - one author index instead of two, covering every column an author query reads
    //   (`(pubkey, created_at)` and `(pubkey, kind, created_at)` each took a page per
    //   insert); for an author without kinds, SQLite reads the author's entries from it,
    //   never the rows, and keeps the newest.
    "DROP INDEX events_author;
     DROP INDEX events_author_kind;
     CREATE INDEX events_by_author ON events (pubkey, kind, created_at, id, expires_at);
     CREATE TABLE tags2 (
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        rid INTEGER NOT NULL,
        PRIMARY KEY (name, value, created_at, rid)
     ) WITHOUT ROWID;
     INSERT OR IGNORE INTO tags2 (name, value, created_at, rid)
        SELECT name, value, created_at, rid FROM tags;
     DROP TABLE tags;
     ALTER TABLE tags2 RENAME TO tags;",
];

/// How hard a commit is pushed to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// WAL with `synchronous = NORMAL`: a committed event survives the process being killed
    /// (`kill -9`, a crash); the last commits may be lost on power failure. The default.
    #[default]
    Process,
    /// `synchronous = FULL`: every commit is fsynced; survives power failure; slower.
    Power,
}

/// What happened to an event handed to the store (defined with the relay port, which
/// reports it to the node's services).
pub use fleetmesh_port::InsertOutcome;

/// An event as stored: its sort key and its JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// `created_at`.
    pub created_at: u64,
    /// The id.
    pub id: [u8; 32],
    /// The event's JSON.
    pub raw: String,
}

/// Where a stored event is, without its body: what [`EventStore::query_keys`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventKey {
    /// The row id, for [`EventStore::raw_by_rids`].
    pub rid: i64,
    /// `created_at`.
    pub created_at: u64,
    /// The id.
    pub id: [u8; 32],
}

/// A NIP-77 item: `(created_at, id)`.
pub type NegItem = (u64, [u8; 32]);

/// One connection to the store.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    conn: Connection,
    /// Loaded by the first insert (only a writing connection needs it).
    deleters: Option<insert::Deleters>,
}

fn sql_err(path: &Path) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |source| Error::Store {
        path: path.to_path_buf(),
        source,
    }
}

impl Store {
    /// Creates a new database at `path`; fails if the file exists.
    ///
    /// # Errors
    /// [`Error::Io`] if the file exists, [`Error::Store`] if SQLite fails.
    pub fn create(path: &Path) -> Result<Store> {
        Store::open_with(path, sqlite::Mode::New, Durability::Process)
    }

    /// Opens an existing database read-write and migrates it to [`SCHEMA_VERSION`].
    ///
    /// # Errors
    /// [`Error::Io`] if it is missing, [`Error::StoreDamaged`] if it is empty or not a
    /// database (it is left as it is), [`Error::StoreVersion`] if a newer build wrote it,
    /// [`Error::Store`] if SQLite fails.
    pub fn open(path: &Path) -> Result<Store> {
        Store::open_with(path, sqlite::Mode::Existing, Durability::Process)
    }

    /// Opens with a chosen durability (for the writer).
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_durable(path: &Path, durability: Durability) -> Result<Store> {
        Store::open_with(path, sqlite::Mode::Existing, durability)
    }

    /// Runs SQLite's `quick_check` over the whole file (seconds for millions of events).
    ///
    /// # Errors
    /// [`Error::StoreDamaged`] with SQLite's findings.
    pub fn check(&self) -> Result<()> {
        sqlite::quick_check(&self.conn, &self.path)
    }

    /// Opens a read-only connection (for queries). The file must be at
    /// [`SCHEMA_VERSION`] already.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    pub fn open_read_only(path: &Path) -> Result<Store> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql_err(path))?;
        // mmap: readers share the OS page cache instead of each warming its own copy.
        conn.execute_batch(
            "PRAGMA busy_timeout = 5000; PRAGMA query_only = ON;
             PRAGMA mmap_size = 268435456; PRAGMA cache_size = -8192;",
        )
        .map_err(sql_err(path))?;
        Ok(Store {
            path: path.to_path_buf(),
            conn,
            deleters: None,
        })
    }

    fn open_with(path: &Path, mode: sqlite::Mode, durability: Durability) -> Result<Store> {
        let conn = sqlite::open(path, mode, false)?;
        let synchronous = match durability {
            Durability::Process => "NORMAL",
            Durability::Power => "FULL",
        };
        // A checkpoint copies every page the WAL holds back into the file. Every 256 MiB of
        // WAL instead of SQLite's 4 MiB: an index page changed by many commits is copied
        // once, not once per commit or two (with a million events stored, the store alone
        // ingests ~2.5x faster; bench/RESULTS.md). The WAL file stays at most that size on
        // disk between checkpoints; power-loss durability (`synchronous = FULL`) is as before.
        // The writer thread moves these checkpoints out of its commits ([`Checkpoints`]).
        conn.execute_batch(&format!(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = {synchronous};
             PRAGMA busy_timeout = 5000;
             PRAGMA cache_size = -32768;
             PRAGMA wal_autocheckpoint = 65536;
             PRAGMA journal_size_limit = 268435456;"
        ))
        .map_err(sql_err(path))?;
        let mut store = Store {
            path: path.to_path_buf(),
            conn,
            deleters: None,
        };
        store.migrate()?;
        Ok(store)
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> Error + '_ {
        sql_err(&self.path)
    }

    fn migrate(&mut self) -> Result<()> {
        sqlite::migrate(&mut self.conn, &self.path, MIGRATIONS)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version of the open file.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    pub fn schema_version(&self) -> Result<i64> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(self.sql())
    }

    /// The newest stored event of `kind` by `pubkey`, if any.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails; [`Error::InvalidEvent`] if the stored JSON is
    /// corrupt.
    pub fn latest_event(&self, pubkey: &[u8; 32], kind: u16) -> Result<Option<Event>> {
        let raw: Option<String> = self
            .conn
            .query_row(
                "SELECT raw FROM events WHERE pubkey = ?1 AND kind = ?2
                 ORDER BY created_at DESC, id ASC LIMIT 1",
                params![&pubkey[..], kind],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sql())?;
        Ok(raw.map(|r| Event::from_json(&r)).transpose()?)
    }

    /// Size of the database in bytes (pages in use times page size; the WAL not counted).
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    pub fn size_bytes(&self) -> Result<u64> {
        self.conn
            .query_row(
                "SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n as u64)
            .map_err(self.sql())
    }

    /// Reads a metadata value.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(self.sql())
    }

    /// Writes a metadata value.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [key, value],
            )
            .map(|_| ())
            .map_err(self.sql())
    }
}

impl Store {
    /// A write transaction that takes the write lock when it begins: one that began as a
    /// read (SQLite's default) fails at once with `SQLITE_BUSY` when it must upgrade while
    /// another connection to the file writes or has written since its snapshot — a node's
    /// peering rounds write beside its relay's writer — and no busy timeout waits that
    /// out. Beginning `IMMEDIATE` waits for the other writer instead (the busy timeout).
    fn write_tx(conn: &mut rusqlite::Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
    }
}

impl EventStore for Store {
    /// Stores verified events in one transaction (one commit for the group) and says what
    /// became of each. `json` is each event's JSON as it will be served.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails; then nothing of the batch is stored.
    fn insert_batch(&mut self, events: &[(&Event, &str)]) -> Result<Vec<InsertOutcome>> {
        let path = self.path.clone();
        if self.deleters.is_none() {
            self.deleters = Some(insert::Deleters::load(&self.conn).map_err(sql_err(&path))?);
        }
        let deleters = self.deleters.as_mut().expect("loaded above");
        let tx = Store::write_tx(&mut self.conn).map_err(sql_err(&path))?;
        let mut outcomes = Vec::with_capacity(events.len());
        for (event, json) in events {
            outcomes.push(insert::insert_in(&tx, deleters, event, json).map_err(sql_err(&path))?);
        }
        tx.commit().map_err(sql_err(&path))?;
        Ok(outcomes)
    }

    /// Deletes events whose NIP-40 expiration is at or before `now`; returns how many.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    fn purge_expired(&mut self, now: u64) -> Result<usize> {
        let path = self.path.clone();
        let tx = Store::write_tx(&mut self.conn).map_err(sql_err(&path))?;
        let n = insert::purge_expired(&tx, now).map_err(sql_err(&path))?;
        tx.commit().map_err(sql_err(&path))?;
        Ok(n)
    }

    /// The oldest events beyond `keep` deleted, `spare`'s never; returns how many.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    fn evict_oldest(&mut self, keep: usize, spare: &[u8; 32]) -> Result<usize> {
        let path = self.path.clone();
        let tx = Store::write_tx(&mut self.conn).map_err(sql_err(&path))?;
        let n = insert::evict_oldest(&tx, keep, spare).map_err(sql_err(&path))?;
        tx.commit().map_err(sql_err(&path))?;
        Ok(n)
    }

    /// The keys of the events [`EventStore::query`] returns, in its order, without reading a
    /// single event body: at most `filters.len() × cap` small items.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    fn query_keys(&self, filters: &[Filter], cap: u64, now: u64) -> Result<Vec<EventKey>> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for f in filters {
            let limit = f.limit.unwrap_or(cap).min(cap);
            if limit == 0 || f.matches_nothing() {
                continue;
            }
            let (chosen, params) = filter_sql(f, Some(limit), now);
            let mut stmt = self.conn.prepare_cached(&chosen).map_err(self.sql())?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                    Ok(EventKey {
                        rid: r.get(0)?,
                        created_at: r.get::<_, i64>(1)? as u64,
                        id: r.get(2)?,
                    })
                })
                .map_err(self.sql())?;
            for row in rows {
                let row = row.map_err(self.sql())?;
                if seen.insert(row.id) {
                    out.push(row);
                }
            }
        }
        out.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    /// The JSON of the events stored under these row ids, in the same order: `None` for one
    /// deleted or replaced since its key was read.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    fn raw_by_rids(&self, rids: &[i64]) -> Result<Vec<Option<String>>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT raw FROM events WHERE rid = ?1")
            .map_err(self.sql())?;
        rids.iter()
            .map(|rid| {
                stmt.query_row([rid], |r| r.get(0))
                    .optional()
                    .map_err(self.sql())
            })
            .collect()
    }

    /// The `(created_at, id)` of every stored event matching any of `filters` (NIP-77's
    /// items), without reading event bodies; unsorted, without duplicates. Stops with
    /// `Ok(None)` past `max` items.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    fn negentropy_items(
        &self,
        filters: &[Filter],
        max: usize,
        now: u64,
    ) -> Result<Option<Vec<NegItem>>> {
        let mut items = api::NegItems::new(filters.len(), max);
        for f in filters.iter().filter(|f| api::NegItems::wanted(f)) {
            // A filter's own limit keeps its meaning (the newest N); otherwise no order.
            let (chosen, params) = filter_sql(f, f.limit, now);
            let sql = format!("SELECT created_at, id FROM ({chosen})");
            let mut stmt = self.conn.prepare_cached(&sql).map_err(self.sql())?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get::<_, [u8; 32]>(1)?))
                })
                .map_err(self.sql())?;
            for row in rows {
                if !items.add(row.map_err(self.sql())?) {
                    return Ok(None);
                }
            }
        }
        Ok(Some(items.into_vec()))
    }

    /// The JSON of the stored events with these ids (those that exist).
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    fn events_by_id(&self, ids: &[[u8; 32]]) -> Result<Vec<String>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT raw FROM events WHERE id = ?1")
            .map_err(self.sql())?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(raw) = stmt
                .query_row([&id[..]], |r| r.get::<_, String>(0))
                .optional()
                .map_err(self.sql())?
            {
                out.push(raw);
            }
        }
        Ok(out)
    }

    /// Number of stored events.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    fn event_count(&self) -> Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(self.sql())
    }
}

/// A Unix time as SQLite's signed integer, saturating (a peer may send any u64).
fn sql_time(t: u64) -> i64 {
    t.min(i64::MAX as u64) as i64
}

/// SQL choosing the rows of one filter: it yields `rid, created_at, id`, newest first, at
/// most `limit` rows.
///
/// The rows to return are chosen on narrow columns first (`rid`, `created_at`, `id`) and
/// only those `limit` rows have their JSON read, so no sort ever carries event bodies. A
/// filter with `#x` values is driven by the tag index, one branch per value, each branch
/// already in `created_at` order (one value: no sort at all); the others by the events
/// indexes.
///
/// With `limit: None` the rows are neither ordered nor limited (NIP-77 items: the
/// negentropy storage sorts them itself, and sorting a million rows in SQLite first would
/// double the work).
fn filter_sql(f: &Filter, limit: Option<u64>, now: u64) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value as V;
    let mut params: Vec<V> = Vec::new();
    let limit = limit.map(|l| V::Integer(sql_time(l)));
    let (order_t, order, order_e) = if limit.is_some() {
        (
            " ORDER BY t.created_at DESC, e.id ASC LIMIT ?",
            " ORDER BY created_at DESC, id ASC LIMIT ?",
            " ORDER BY e.created_at DESC, e.id ASC LIMIT ?",
        )
    } else {
        ("", "", "")
    };
    // Conditions on the events table, aliased `e`.
    let mut conds = String::from("(e.expires_at IS NULL OR e.expires_at > ?)");
    let mut cond_params = vec![V::Integer(sql_time(now))];
    let mut list = |col: &str, values: Vec<V>| {
        conds.push_str(" AND ");
        conds.push_str(col);
        conds.push_str(" IN (");
        for i in 0..values.len() {
            conds.push_str(if i == 0 { "?" } else { ",?" });
        }
        conds.push(')');
        cond_params.extend(values);
    };
    if let Some(ids) = &f.ids {
        list("e.id", ids.iter().map(|i| V::Blob(i.to_vec())).collect());
    }
    if let Some(authors) = &f.authors {
        list(
            "e.pubkey",
            authors.iter().map(|a| V::Blob(a.to_vec())).collect(),
        );
    }
    if let Some(kinds) = &f.kinds {
        list(
            "e.kind",
            kinds.iter().map(|k| V::Integer(i64::from(*k))).collect(),
        );
    }
    if !f.exclude_kinds.is_empty() {
        list(
            "e.kind NOT",
            f.exclude_kinds
                .iter()
                .map(|k| V::Integer(i64::from(*k)))
                .collect(),
        );
    }
    let mut range = String::new();
    let mut range_params = Vec::new();
    if let Some(since) = f.since {
        range.push_str(" AND {col} >= ?");
        range_params.push(V::Integer(sql_time(since)));
    }
    if let Some(until) = f.until {
        range.push_str(" AND {col} <= ?");
        range_params.push(V::Integer(sql_time(until)));
    }
    // The tag key that drives the query (fewest values), and the others as conditions.
    let driver = if f.ids.is_none() {
        f.tags.iter().min_by_key(|(_, v)| v.len())
    } else {
        None
    };
    for (name, values) in &f.tags {
        if driver.is_some_and(|(d, _)| d == name) {
            continue;
        }
        conds.push_str(" AND e.rid IN (SELECT rid FROM tags WHERE name = ? AND value IN (");
        cond_params.push(V::Text(name.to_string()));
        for (i, v) in values.iter().enumerate() {
            conds.push_str(if i == 0 { "?" } else { ",?" });
            cond_params.push(V::Text(v.clone()));
        }
        conds.push_str("))");
    }
    let chosen = match driver {
        Some((name, values)) => {
            let branches: Vec<String> = values
                .iter()
                .map(|v| {
                    params.push(V::Text(name.to_string()));
                    params.push(V::Text(v.clone()));
                    params.extend(range_params.iter().cloned());
                    params.extend(cond_params.iter().cloned());
                    params.extend(limit.clone());
                    format!(
                        "SELECT * FROM (SELECT DISTINCT t.rid AS rid, t.created_at AS created_at, e.id AS id \
                         FROM tags t CROSS JOIN events e ON e.rid = t.rid \
                         WHERE t.name = ? AND t.value = ?{} AND {conds}{order_t})",
                        range.replace("{col}", "t.created_at")
                    )
                })
                .collect();
            params.extend(limit);
            format!(
                "SELECT rid, created_at, id FROM (SELECT DISTINCT rid, created_at, id FROM ({})){order}",
                branches.join(" UNION ALL ")
            )
        }
        None => {
            params.extend(cond_params);
            params.extend(range_params);
            params.extend(limit);
            format!(
                "SELECT e.rid AS rid, e.created_at AS created_at, e.id AS id FROM events e \
                 WHERE {conds}{}{order_e}",
                range.replace("{col}", "e.created_at")
            )
        }
    };
    (chosen, params)
}
