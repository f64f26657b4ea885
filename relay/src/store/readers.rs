//! Read-only connections for queries, kept in a small pool. WAL lets readers run beside
//! the writer without blocking it; each query runs on a blocking thread with a connection
//! taken from the pool.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Store;
use crate::Result;

/// A pool of read-only store connections.
#[derive(Debug)]
pub struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Store>>,
    keep: usize,
}

impl Readers {
    /// A pool over the store at `path` that keeps up to `keep` idle connections, all
    /// opened now (opening one costs a schema parse, better paid at start-up than by the
    /// first burst of queries).
    ///
    /// # Errors
    /// If a connection cannot be opened (so a bad path fails at start-up).
    pub fn new(path: &Path, keep: usize) -> Result<Readers> {
        let keep = keep.max(1);
        let idle = (0..keep)
            .map(|_| {
                let s = Store::open_read_only(path)?;
                s.schema_version()?;
                Ok(s)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Readers {
            path: path.to_path_buf(),
            idle: Mutex::new(idle),
            keep,
        })
    }

    /// Runs `f` with a connection (blocking: call it from a blocking thread).
    ///
    /// # Errors
    /// Opening a connection, or whatever `f` returns.
    pub fn with<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        let taken = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let store = match taken {
            Some(s) => s,
            None => Store::open_read_only(&self.path)?,
        };
        let out = f(&store);
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < self.keep {
            idle.push(store);
        }
        out
    }
}
