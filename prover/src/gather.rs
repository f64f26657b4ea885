//! The batch-verify gatherer: every Groth16 check this node makes for others (the HTTP
//! API, jobs) joins one queue. A worker takes whatever has queued within a short window
//! ([`WINDOW`], at most [`MAX_BATCH`] proofs), groups the proofs by verifying key and
//! batch-verifies each group on a blocking thread (one multi-Miller loop per group, bad
//! proofs named by bisection, [`crate::batch_verify_grouped_on`], the weights on the
//! node's GPU where its backend takes the batch), then answers each caller.
//! Prepared keys are cached by their coordinates ([`Gatherer::prepared`]), so a buyer who
//! sends the same key again does not pay for its preparation.
//!
//! Metrics: `fleetmesh_verifier_proofs_total{verdict}` (`valid`, `invalid`, `error`,
//! `busy`), the `fleetmesh_verifier_batch_size` histogram and the gauge
//! `fleetmesh_verifier_queue_depth` (proofs waiting for a batch).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::snarkjs::vk_id;
use crate::verify::Item;
use crate::{
    Bn254, Error, PreparedVk, Result, VerifyingKey, batch_verify_grouped, batch_verify_grouped_on,
};
use fleetmesh_kernels::ops::{Cpu, MsmNtt};

/// How long the worker waits for more proofs to join a batch.
pub const WINDOW: Duration = Duration::from_millis(2);
/// Most proofs in one round.
pub const MAX_BATCH: usize = 256;
/// Prepared keys kept.
const KEY_CACHE: usize = 64;
/// Proofs waiting at most.
const QUEUE: usize = 4096;

struct Job {
    key: Arc<PreparedVk>,
    item: Item,
    reply: oneshot::Sender<Result<bool, String>>,
}

/// One proof's verdict, to come.
#[derive(Debug)]
pub struct Pending(oneshot::Receiver<Result<bool, String>>);

impl Pending {
    /// Waits for the verdict: `Ok(valid)`, or why the check could not be made.
    pub async fn wait(self) -> Result<bool, String> {
        self.0
            .await
            .unwrap_or_else(|_| Err("the verifier stopped".into()))
    }

    /// [`Pending::wait`] for a caller on a thread of its own (never from async code).
    pub fn wait_blocking(self) -> Result<bool, String> {
        self.0
            .blocking_recv()
            .unwrap_or_else(|_| Err("the verifier stopped".into()))
    }
}

/// The gatherer: a queue, a batching worker, a cache of prepared keys.
#[derive(Debug)]
pub struct Gatherer {
    queue: mpsc::Sender<Job>,
    keys: Mutex<HashMap<Vec<u8>, Arc<PreparedVk>>>,
}

impl Gatherer {
    /// Starts the worker on the current tokio runtime, verifying on the CPU.
    pub fn start() -> Arc<Gatherer> {
        Gatherer::start_on(Arc::new(Cpu))
    }

    /// [`Gatherer::start`] with the batches' weights on `backend` where it takes them
    /// ([`crate::batch_verify_on`]; the prover's backend, so `auto` and an explicit GPU
    /// choice mean the same for both). A batch the GPU fails on is checked again on the
    /// CPU, with a warning.
    pub fn start_on(backend: Arc<dyn MsmNtt>) -> Arc<Gatherer> {
        let (queue, rx) = mpsc::channel(QUEUE);
        tokio::spawn(worker(rx, backend));
        Arc::new(Gatherer {
            queue,
            keys: Mutex::new(HashMap::new()),
        })
    }

    /// `vk` prepared for verification, from the cache when it was seen before (blocking
    /// work when not).
    pub fn prepared(&self, vk: &VerifyingKey<Bn254>) -> Arc<PreparedVk> {
        let id = vk_id(vk);
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = keys.get(&id) {
            return k.clone();
        }
        if keys.len() >= KEY_CACHE {
            keys.clear();
        }
        let k = Arc::new(PreparedVk::new(vk));
        keys.insert(id, k.clone());
        k
    }

    /// Queues checked items (keys prepared, public counts checked) all at once or none.
    ///
    /// # Errors
    /// [`Error::Busy`] when the queue has no room for all of them.
    pub fn submit(&self, items: Vec<(Arc<PreparedVk>, Item)>) -> Result<Vec<Pending>> {
        let permits = self.queue.try_reserve_many(items.len()).map_err(|_| {
            metrics::counter!("fleetmesh_verifier_proofs_total", "verdict" => "busy")
                .increment(items.len() as u64);
            Error::Busy("the verification queue is full; retry shortly".into())
        })?;
        metrics::gauge!("fleetmesh_verifier_queue_depth")
            .set((QUEUE - self.queue.capacity()) as f64);
        Ok(permits
            .zip(items)
            .map(|(permit, (key, item))| {
                let (tx, rx) = oneshot::channel();
                permit.send(Job {
                    key,
                    item,
                    reply: tx,
                });
                Pending(rx)
            })
            .collect())
    }
}

async fn worker(mut rx: mpsc::Receiver<Job>, backend: Arc<dyn MsmNtt>) {
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        let deadline = tokio::time::Instant::now() + WINDOW;
        while jobs.len() < MAX_BATCH {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(job)) => jobs.push(job),
                _ => break,
            }
        }
        debug!(proofs = jobs.len(), "verifying a batch");
        metrics::gauge!("fleetmesh_verifier_queue_depth").set(rx.len() as f64);
        metrics::histogram!("fleetmesh_verifier_batch_size").record(jobs.len() as f64);
        let keys: Vec<Arc<PreparedVk>> = jobs.iter().map(|j| j.key.clone()).collect();
        let items: Vec<(usize, Item)> = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (i, j.item.clone()))
            .collect();
        let backend = backend.clone();
        let verdicts = tokio::task::spawn_blocking(move || {
            match batch_verify_grouped_on(backend.as_ref(), &keys, &items) {
                Err(Error::Backend(e)) => {
                    warn!(error = %e, "batch verification on the GPU failed; checking on the CPU");
                    batch_verify_grouped(&keys, &items)
                }
                done => done,
            }
        })
        .await;
        match verdicts {
            Ok(Ok(v)) => {
                let valid = v.iter().filter(|ok| **ok).count() as u64;
                metrics::counter!("fleetmesh_verifier_proofs_total", "verdict" => "valid")
                    .increment(valid);
                metrics::counter!("fleetmesh_verifier_proofs_total", "verdict" => "invalid")
                    .increment(v.len() as u64 - valid);
                for (job, valid) in jobs.into_iter().zip(v) {
                    let _ = job.reply.send(Ok(valid));
                }
            }
            Ok(Err(e)) => {
                warn!(error = %e, "batch verification failed");
                metrics::counter!("fleetmesh_verifier_proofs_total", "verdict" => "error")
                    .increment(jobs.len() as u64);
                for job in jobs {
                    let _ = job.reply.send(Err(e.to_string()));
                }
            }
            Err(e) => {
                warn!(error = %e, "batch verification panicked");
                metrics::counter!("fleetmesh_verifier_proofs_total", "verdict" => "error")
                    .increment(jobs.len() as u64);
                for job in jobs {
                    let _ = job.reply.send(Err("internal error".into()));
                }
            }
        }
    }
}
