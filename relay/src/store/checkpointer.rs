//! The store's checkpointer: a thread that copies the WAL back into the database file beside
//! the [`writer`](super::writer), so the writer's commits do not wait on checkpoints.
//!
//! By default SQLite checkpoints inside the commit that takes the WAL past its limit. With
//! the store's 256 MiB limit (which lets a page changed by many commits be copied once),
//! that commit and every event queued behind it waited for hundreds of MiB to be copied:
//! the `OK` p99 of bench/RESULTS.md. Instead the writer's WAL hook looks at the WAL's size
//! after each commit and, past [`Checkpoints::background_pages`], wakes this thread, which
//! runs a `PASSIVE` checkpoint on its own connection: it takes no lock the writer or the
//! readers need and copies what no reader still reads. Once the whole WAL is copied and no
//! reader is on it, the writer's next commit starts the WAL over from its beginning (and
//! truncates the file to `journal_size_limit`). Should the thread fall behind, past
//! [`Checkpoints::inline_pages`] the writer checkpoints in line as before, so the WAL stays
//! bounded on disk.
//!
//! A checkpoint moves committed pages from one file to the other; it changes neither what
//! is committed nor when a commit is durable.

use std::ffi::c_int;
use std::path::Path;
use std::sync::mpsc::{Receiver, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::Instant;

use rusqlite::hooks::Wal;
use rusqlite::{Connection, OpenFlags};
use tracing::{debug, warn};

use super::{Durability, Store, sql_err};
use crate::{Error, Result};

/// When the WAL is copied back, in pages (4 KiB each) held by the WAL after a commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpoints {
    /// Past this the checkpointer thread is woken (default 65 536: 256 MiB).
    pub background_pages: u32,
    /// Past this the writer checkpoints in line, after its commit (default 262 144: 1 GiB).
    pub inline_pages: u32,
}

impl Default for Checkpoints {
    fn default() -> Self {
        Checkpoints {
            background_pages: 65_536,
            inline_pages: 262_144,
        }
    }
}

/// Starts the checkpointer thread for the store `writer` writes, and hooks the writer's
/// commits to it. The thread ends when `writer` is dropped (the hook holds its wake-up).
///
/// # Errors
/// If the thread's connection cannot be opened or the thread not started.
pub(super) fn start(
    writer: &mut Store,
    durability: Durability,
    policy: Checkpoints,
) -> Result<JoinHandle<()>> {
    let path = writer.path.clone();
    let conn = open(&path, durability)?;
    let (wake, woken) = sync_channel::<()>(1);
    let handle = std::thread::Builder::new()
        .name("store-checkpointer".into())
        .spawn(move || run(&conn, &path, &woken))
        .map_err(|source| Error::Io {
            op: "starting the checkpointer thread for",
            path: writer.path.clone(),
            source,
        })?;
    // Replaces SQLite's own autocheckpoint, which is a WAL hook too.
    let hook = move |wal: &mut Wal, pages: c_int| -> rusqlite::Result<()> {
        let pages = u32::try_from(pages).unwrap_or(0);
        if pages >= policy.inline_pages {
            // An error here would make the COMMIT that has already happened report one.
            if let Err(e) = wal.checkpoint() {
                warn!(error = %e, pages, "in-line checkpoint failed");
            }
        } else if pages >= policy.background_pages {
            match wake.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) => {}
                Err(TrySendError::Disconnected(())) => {
                    warn!(pages, "the checkpointer thread has ended");
                }
            }
        }
        Ok(())
    };
    writer
        .conn
        .wal_hook(Some(hook))
        .map_err(sql_err(&writer.path))?;
    Ok(handle)
}

fn open(path: &Path, durability: Durability) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(sql_err(path))?;
    // The checkpoint's own syncs follow the store's durability.
    let synchronous = match durability {
        Durability::Process => "NORMAL",
        Durability::Power => "FULL",
    };
    conn.execute_batch(&format!(
        "PRAGMA busy_timeout = 5000; PRAGMA synchronous = {synchronous};
         PRAGMA wal_autocheckpoint = 0;"
    ))
    .map_err(sql_err(path))?;
    Ok(conn)
}

fn run(conn: &Connection, path: &Path, woken: &Receiver<()>) {
    while woken.recv().is_ok() {
        let started = Instant::now();
        let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        });
        match result {
            Ok((wal_pages, copied)) => debug!(
                wal_pages,
                copied,
                ms = started.elapsed().as_millis() as u64,
                "WAL checkpointed"
            ),
            Err(e) => warn!(error = %e, path = %path.display(), "checkpoint failed"),
        }
    }
    debug!("store checkpointer stopped");
}
