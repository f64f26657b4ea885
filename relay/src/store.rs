//! The node's SQLite store (WAL): events with the columns filters need, and node metadata.
//!
//! The file lives in the node directory. The schema is versioned with `PRAGMA
//! user_version` and migrated forward on open; a file from a newer build is refused rather
//! than touched. Events arrive here **already verified** (id, signature, schema): the store
//! does not check them again.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::event::Event;
use crate::{Error, Result};

/// The newest schema version this build writes.
pub const SCHEMA_VERSION: i64 = 1;

const MIGRATIONS: &[&str] = &[
    // v1: events with indexed columns, raw JSON kept apart; node metadata.
    "CREATE TABLE events (
        id BLOB PRIMARY KEY NOT NULL,
        pubkey BLOB NOT NULL,
        created_at INTEGER NOT NULL,
        kind INTEGER NOT NULL,
        raw TEXT NOT NULL
     ) WITHOUT ROWID;
     CREATE INDEX events_created ON events (created_at, id);
     CREATE INDEX events_kind ON events (kind, created_at);
     CREATE INDEX events_author ON events (pubkey, kind, created_at);
     CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) WITHOUT ROWID;",
];

/// An open store.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    conn: Connection,
}

impl Store {
    /// Creates a new database at `path`; fails if the file exists.
    ///
    /// # Errors
    /// [`Error::Io`] if the file exists, [`Error::Store`] if SQLite fails.
    pub fn create(path: &Path) -> Result<Store> {
        if path.exists() {
            return Err(Error::Io {
                op: "creating store",
                path: path.to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            });
        }
        Store::open_with(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        )
    }

    /// Opens an existing database and migrates it to [`SCHEMA_VERSION`].
    ///
    /// # Errors
    /// [`Error::Store`] if it is missing or not a database, [`Error::StoreVersion`] if a
    /// newer build wrote it.
    pub fn open(path: &Path) -> Result<Store> {
        Store::open_with(path, OpenFlags::SQLITE_OPEN_READ_WRITE)
    }

    fn open_with(path: &Path, flags: OpenFlags) -> Result<Store> {
        let sql = |source| Error::Store {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open_with_flags(path, flags | OpenFlags::SQLITE_OPEN_NO_MUTEX)
            .map_err(sql)?;
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA foreign_keys = ON;
             PRAGMA busy_timeout = 5000;",
        )
        .map_err(sql)?;
        let mut store = Store {
            path: path.to_path_buf(),
            conn,
        };
        store.migrate()?;
        Ok(store)
    }

    fn sql(&self) -> impl Fn(rusqlite::Error) -> Error + '_ {
        |source| Error::Store {
            path: self.path.clone(),
            source,
        }
    }

    fn migrate(&mut self) -> Result<()> {
        let found: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(self.sql())?;
        if found > SCHEMA_VERSION {
            return Err(Error::StoreVersion {
                path: self.path.clone(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        let path = self.path.clone();
        let tx = self.conn.transaction().map_err(|source| Error::Store {
            path: path.clone(),
            source,
        })?;
        for (v, step) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.execute_batch(step)
                .and_then(|()| tx.pragma_update(None, "user_version", v as i64 + 1))
                .map_err(|source| Error::Store {
                    path: path.clone(),
                    source,
                })?;
        }
        tx.commit().map_err(|source| Error::Store { path, source })
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

    /// Stores a verified event; returns `false` if an event with this id is already stored.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    pub fn insert_event(&self, event: &Event) -> Result<bool> {
        let n = self
            .conn
            .execute(
                "INSERT OR IGNORE INTO events (id, pubkey, created_at, kind, raw)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    &event.id[..],
                    &event.pubkey[..],
                    event.created_at as i64,
                    event.kind,
                    event.to_json()
                ],
            )
            .map_err(self.sql())?;
        Ok(n == 1)
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
        raw.map(|r| Event::from_json(&r)).transpose()
    }

    /// Number of stored events.
    ///
    /// # Errors
    /// [`Error::Store`] if SQLite fails.
    pub fn event_count(&self) -> Result<u64> {
        self.conn
            .query_row("SELECT count(*) FROM events", [], |r| r.get::<_, i64>(0))
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
