//! Opening the node's SQLite files safely — the relay's store, and the appliance's job and
//! blob databases — so that a damaged file is reported, never silently replaced.
//!
//! - [`open`] refuses an existing file that is empty or does not start with SQLite's
//!   header (opening one would quietly make a fresh empty database over it), creates the
//!   file only when asked to and it is absent, and runs `PRAGMA quick_check` when asked.
//! - [`migrate`] brings a file to the newest schema version with numbered steps under
//!   `PRAGMA user_version`, one transaction, and refuses a file from a newer build.

use std::io::Read as _;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::{Error, Result};

/// The first 16 bytes of every SQLite database file.
const HEADER: &[u8; 16] = b"SQLite format 3\0";

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// It must exist.
    Existing,
    /// Create it when absent; an existing one must be a database.
    CreateIfAbsent,
    /// It must not exist yet.
    New,
}

fn damaged(path: &Path, reason: impl Into<String>) -> Error {
    Error::StoreDamaged {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Whether the file at `path` can be a SQLite database: refuses an empty file or one whose
/// first bytes are not SQLite's header.
///
/// # Errors
/// [`Error::StoreDamaged`] naming what is wrong; [`Error::Io`] if it cannot be read.
pub fn check_header(path: &Path) -> Result<()> {
    let io = |source| Error::Io {
        op: "reading",
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut head = [0u8; 16];
    let n = f.read(&mut head).map_err(io)?;
    if n == 0 {
        return Err(damaged(
            path,
            "the file is empty; it is not replaced by a new database — restore it from a \
             backup, or move it away to start afresh",
        ));
    }
    if n < 16 || &head != HEADER {
        return Err(damaged(
            path,
            "the file is not a SQLite database; it is left as it is",
        ));
    }
    Ok(())
}

/// Opens the database at `path` read-write in `mode`; with `check`, runs
/// `PRAGMA quick_check` and refuses a file that fails it.
///
/// # Errors
/// [`Error::StoreDamaged`] for an empty, foreign or damaged file, [`Error::Io`] for a
/// missing one (or an existing one in [`Mode::New`]), [`Error::Store`] if SQLite fails.
pub fn open(path: &Path, mode: Mode, check: bool) -> Result<Connection> {
    let exists = path.exists();
    match (mode, exists) {
        (Mode::Existing, false) => {
            return Err(Error::Io {
                op: "opening",
                path: path.to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::NotFound),
            });
        }
        (Mode::New, true) => {
            return Err(Error::Io {
                op: "creating",
                path: path.to_path_buf(),
                source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            });
        }
        (_, true) => check_header(path)?,
        (_, false) => {}
    }
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if !exists {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags).map_err(|source| Error::Store {
        path: path.to_path_buf(),
        source,
    })?;
    if check && exists {
        quick_check(&conn, path)?;
    }
    Ok(conn)
}

/// `PRAGMA quick_check` on `conn` (the database at `path`).
///
/// # Errors
/// [`Error::StoreDamaged`] with SQLite's first findings when the file is damaged.
pub fn quick_check(conn: &Connection, path: &Path) -> Result<()> {
    let found: Vec<String> = conn
        .prepare("PRAGMA quick_check(8)")
        .and_then(|mut s| {
            s.query_map([], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<String>>>()
        })
        .map_err(|e| damaged(path, format!("quick_check could not run: {e}")))?;
    if found.len() == 1 && found[0] == "ok" {
        return Ok(());
    }
    Err(damaged(
        path,
        format!("PRAGMA quick_check found: {}", found.join("; ")),
    ))
}

/// Applies the steps of `migrations` past the file's `user_version` (step `i` makes version
/// `i + 1`) in one transaction.
///
/// # Errors
/// [`Error::StoreVersion`] for a file from a newer build (left untouched), [`Error::Store`]
/// if a step fails (nothing applied).
pub fn migrate(conn: &mut Connection, path: &Path, migrations: &[&str]) -> Result<()> {
    let sql = |source| Error::Store {
        path: path.to_path_buf(),
        source,
    };
    let newest = migrations.len() as i64;
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql)?;
    if found > newest {
        return Err(Error::StoreVersion {
            path: path.to_path_buf(),
            found,
            supported: newest,
        });
    }
    if found == newest {
        return Ok(());
    }
    // An existing file's migration can rewrite whole tables: say so before, and after.
    let started = std::time::Instant::now();
    if found > 0 {
        tracing::info!(path = %path.display(), from = found, to = newest, "migrating the database");
    }
    let tx = conn.transaction().map_err(sql)?;
    for (v, step) in migrations.iter().enumerate().skip(found as usize) {
        tx.execute_batch(step)
            .and_then(|()| tx.pragma_update(None, "user_version", v as i64 + 1))
            .map_err(sql)?;
    }
    tx.commit().map_err(sql)?;
    if found > 0 {
        tracing::info!(
            path = %path.display(),
            secs = started.elapsed().as_secs_f64(),
            "database migrated"
        );
    }
    Ok(())
}
