//! Read-only connections for queries, in a bounded pool. WAL lets readers run beside the
//! writer without blocking it. [`Readers::run`] is the way in from async code: it waits
//! for one of the pool's connections (so a burst of clients queues instead of opening
//! connections and blocking threads without bound), then runs the query on a blocking
//! thread.

use std::path::Path;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use super::Store;
use crate::Result;

/// A pool of read-only store connections.
#[derive(Debug)]
pub struct Readers {
    idle: Mutex<Vec<Store>>,
    /// One permit per connection: held while a connection is out.
    permits: Arc<Semaphore>,
}

impl Readers {
    /// A pool of `size` connections over the store at `path`, all opened now (opening one
    /// costs a schema parse, better paid at start-up than by the first burst of queries).
    ///
    /// # Errors
    /// If a connection cannot be opened (so a bad path fails at start-up).
    pub fn new(path: &Path, size: usize) -> Result<Readers> {
        let size = size.max(1);
        let idle = (0..size)
            .map(|_| {
                let s = Store::open_read_only(path)?;
                s.schema_version()?;
                Ok(s)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Readers {
            idle: Mutex::new(idle),
            permits: Arc::new(Semaphore::new(size)),
        })
    }

    /// Waits for a connection, then runs `f` with it on a blocking thread.
    ///
    /// # Errors
    /// Whatever `f` returns; [`crate::Error::StoreTask`] if the blocking thread panicked.
    pub async fn run<T, F>(self: &Arc<Self>, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T> + Send + 'static,
    {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the pool's semaphore is never closed");
        let pool = self.clone();
        tokio::task::spawn_blocking(move || {
            let store = pool
                .idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop()
                .expect("a permit guarantees an idle connection");
            let out = f(&store);
            pool.idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(store);
            drop(permit);
            out
        })
        .await
        .map_err(|e| crate::Error::StoreTask(e.to_string()))?
    }
}
