//! Background tasks the daemon starts beside its listener (the mailbox, peering), held so
//! that shutdown can end them and wait until each has let go of what it uses (the store's
//! last connection must close for the WAL to checkpoint).

/// A group of tasks; [`Tasks::stop`] ends them.
pub struct Tasks(pub Vec<tokio::task::JoinHandle<()>>);

impl Tasks {
    /// Ends every task and waits for each.
    pub async fn stop(self) {
        for task in &self.0 {
            task.abort();
        }
        for task in self.0 {
            let _ = task.await;
        }
    }
}
