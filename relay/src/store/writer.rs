//! The one writer: a thread that owns the store's write connection and commits in groups.
//!
//! Requests queue on a bounded channel. The thread takes the first, then every request
//! already waiting (up to a batch size), applies them in one transaction, commits, and
//! only then reports each outcome. So under load one commit (one WAL append, one fsync
//! with [`Durability::Power`]) serves many events, and an outcome of
//! [`InsertOutcome::Stored`] always means committed: with the default durability it
//! survives `kill -9`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use tracing::{debug, error};

use super::checkpointer::{self, Checkpoints};
use super::{Durability, EventStore, InsertOutcome, Store};
use crate::{Error, Result};
use fleetmesh_proto::event::Event;

/// Called with each event's outcome once its transaction has committed (or failed).
pub type InsertDone = Box<dyn FnOnce(Result<InsertOutcome, String>) + Send>;

enum Job {
    Insert {
        event: Arc<Event>,
        json: Arc<str>,
        done: InsertDone,
        /// When it was queued.
        at: std::time::Instant,
    },
    /// Store maintenance between commits: expired events, or a cache's oldest.
    Purge {
        what: Purge,
        done: Box<dyn FnOnce(Result<usize, String>) + Send>,
    },
    /// Commit what came before, then end.
    Stop,
    /// Look at the priority lane (it has inserts).
    Wake,
}

/// Inserts waiting in the priority lane at most.
pub const PRIORITY_QUEUE: usize = 4096;

/// What a purge deletes.
#[derive(Debug, Clone, Copy)]
pub enum Purge {
    /// Events whose NIP-40 expiration is at or before this time.
    Expired(u64),
    /// The oldest events beyond this many, not counting those by `spare`'s author.
    Oldest {
        /// Events kept.
        keep: usize,
        /// The author whose events are never evicted (the node's own).
        spare: [u8; 32],
    },
}

/// A handle to the writer thread; clone it freely. The thread ends when every handle is
/// dropped and the queue is drained.
#[derive(Clone)]
pub struct Writer {
    tx: SyncSender<Job>,
    /// Inserts of granted peers, taken before anything in `tx` at every batch.
    priority: Arc<std::sync::Mutex<std::collections::VecDeque<Job>>>,
    /// How long inserts wait, how many wait, what one costs.
    gauges: Arc<Gauges>,
}

/// What the writer's load looks like, for load shedding.
#[derive(Default)]
struct Gauges {
    /// How long inserts waited for their commit, µs, smoothed over commits.
    sojourn_us: AtomicU64,
    /// Inserts queued in the channel.
    depth: AtomicU64,
    /// What committing one event cost lately, ns (smoothed).
    per_event_ns: AtomicU64,
    /// Inserts from the channel (not the priority lane) that waited longer than this, µs,
    /// are answered [`InsertOutcome::Shed`]; 0: never.
    shed_after_us: AtomicU64,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Writer")
    }
}

/// Why a request could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueError {
    /// The queue is full: the store is behind; try again later.
    Full,
    /// The writer thread has stopped.
    Stopped,
}

impl Writer {
    /// Opens the store at `path` for writing and starts the thread.
    ///
    /// `queue` bounds the requests waiting; `max_batch` the events per transaction. The WAL
    /// is copied back by a [`checkpointer`] thread beside it, with the default
    /// [`Checkpoints`]; joining the returned handle waits for both threads.
    ///
    /// # Errors
    /// Any error opening the store.
    pub fn start(
        path: &Path,
        durability: Durability,
        queue: usize,
        max_batch: usize,
    ) -> Result<(Writer, JoinHandle<()>)> {
        Writer::start_with(path, durability, queue, max_batch, Checkpoints::default())
    }

    /// [`Writer::start`] with the checkpoints' thresholds chosen.
    ///
    /// # Errors
    /// Any error opening the store.
    pub fn start_with(
        path: &Path,
        durability: Durability,
        queue: usize,
        max_batch: usize,
        checkpoints: Checkpoints,
    ) -> Result<(Writer, JoinHandle<()>)> {
        let mut store = Store::open_durable(path, durability)?;
        let checkpointer = checkpointer::start(&mut store, durability, checkpoints)?;
        let (tx, rx) = sync_channel(queue.max(1));
        let gauges = Arc::new(Gauges::default());
        let waits = gauges.clone();
        let priority = Arc::new(std::sync::Mutex::new(std::collections::VecDeque::new()));
        let lane = priority.clone();
        let handle = std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || {
                run(store, rx, &lane, max_batch.max(1), &waits);
                // The store (and with it the hook that wakes the checkpointer) is gone.
                if checkpointer.join().is_err() {
                    error!("the store checkpointer panicked");
                }
            })
            .map_err(|source| Error::Io {
                op: "starting the writer thread for",
                path: path.to_path_buf(),
                source,
            })?;
        Ok((
            Writer {
                tx,
                priority,
                gauges,
            },
            handle,
        ))
    }

    /// Queues an insert; `done` runs on the writer thread after the commit.
    ///
    /// # Errors
    /// [`QueueError::Full`] when the queue is full, [`QueueError::Stopped`] after the thread
    /// ended; `done` is then not called.
    pub fn insert(
        &self,
        event: Arc<Event>,
        json: Arc<str>,
        done: InsertDone,
    ) -> Result<(), QueueError> {
        // counted before it is sent, so that the thread never takes one not yet counted
        self.gauges.depth.fetch_add(1, Relaxed);
        self.tx
            .try_send(Job::Insert {
                event,
                json,
                done,
                at: std::time::Instant::now(),
            })
            .map_err(|e| {
                self.gauges.depth.fetch_sub(1, Relaxed);
                match e {
                    TrySendError::Full(_) => QueueError::Full,
                    TrySendError::Disconnected(_) => QueueError::Stopped,
                }
            })
    }

    /// Queues an insert in the priority lane, which every batch takes first (a granted
    /// peer's event while others flood the queue); `done` as for [`Writer::insert`].
    ///
    /// # Errors
    /// [`QueueError::Full`] past [`PRIORITY_QUEUE`] waiting.
    pub fn insert_priority(
        &self,
        event: Arc<Event>,
        json: Arc<str>,
        done: InsertDone,
    ) -> Result<(), QueueError> {
        {
            let mut lane = self
                .priority
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if lane.len() >= PRIORITY_QUEUE {
                return Err(QueueError::Full);
            }
            lane.push_back(Job::Insert {
                event,
                json,
                done,
                at: std::time::Instant::now(),
            });
        }
        // a full queue means the thread is busy and looks at the lane before its next batch
        match self.tx.try_send(Job::Wake) {
            Err(TrySendError::Disconnected(_)) => Err(QueueError::Stopped),
            _ => Ok(()),
        }
    }

    /// How long inserts have waited for their commit lately, µs (smoothed).
    pub fn sojourn_us(&self) -> u64 {
        self.gauges.sojourn_us.load(Relaxed)
    }

    /// While the relay sheds load: inserts from the channel (never the priority lane)
    /// that waited longer than `after` are answered [`InsertOutcome::Shed`] instead of
    /// committed, so a backlog built before the shedding began does not stand in front of
    /// what comes after. `None`: everything is committed.
    pub fn set_shed_after(&self, after: Option<std::time::Duration>) {
        let us = after.map_or(0, |d| {
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
        });
        self.gauges.shed_after_us.store(us, Relaxed);
    }

    /// How long the inserts queued now will take to commit at the recent cost per event,
    /// µs: the wait a new insert faces before its commit shows it.
    pub fn backlog_us(&self) -> u64 {
        let g = &self.gauges;
        g.depth
            .load(Relaxed)
            .saturating_mul(g.per_event_ns.load(Relaxed))
            / 1000
    }

    /// Lets the smoothed wait fade by an eighth (called by whoever samples it, so that it
    /// falls back once commits stop).
    pub fn fade_sojourn(&self) {
        let _ = self
            .gauges
            .sojourn_us
            .fetch_update(Relaxed, Relaxed, |v| Some(v - v / 8));
    }

    /// Asks the thread to commit everything queued so far and end, even while handles
    /// remain (shutdown with connections still open). Blocks while the queue is full; what
    /// is queued after it is never run.
    pub fn stop(&self) {
        let _ = self.tx.send(Job::Stop);
    }

    /// Queues a purge (expired events, or a cache's oldest), run between two commits.
    ///
    /// # Errors
    /// [`QueueError::Full`] when the queue is full (the caller skips this round),
    /// [`QueueError::Stopped`] after the thread ended.
    pub fn purge(
        &self,
        what: Purge,
        done: Box<dyn FnOnce(Result<usize, String>) + Send>,
    ) -> Result<(), QueueError> {
        self.tx
            .try_send(Job::Purge { what, done })
            .map_err(|e| match e {
                TrySendError::Full(_) => QueueError::Full,
                TrySendError::Disconnected(_) => QueueError::Stopped,
            })
    }
}

fn run(
    mut store: Store,
    rx: Receiver<Job>,
    priority: &std::sync::Mutex<std::collections::VecDeque<Job>>,
    max_batch: usize,
    gauges: &Gauges,
) {
    let mut batch: Vec<(Arc<Event>, Arc<str>, InsertDone)> = Vec::with_capacity(max_batch);
    while let Ok(first) = rx.recv() {
        let first = match first {
            Job::Insert { .. } => {
                gauges.depth.fetch_sub(1, Relaxed);
                // a stale one answered, the priority lane is still looked at
                stale(first, gauges).unwrap_or(Job::Wake)
            }
            other => other,
        };
        // the priority lane first, then what the channel holds
        let mut lane: std::collections::VecDeque<Job> = std::mem::take(
            &mut *priority
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        lane.push_back(first);
        let mut next = lane.pop_front();
        let mut oldest: Option<std::time::Instant> = None;
        while let Some(job) = next.take() {
            match job {
                Job::Wake => {}
                Job::Insert {
                    event,
                    json,
                    done,
                    at,
                } => {
                    oldest = Some(oldest.map_or(at, |o| o.min(at)));
                    batch.push((event, json, done));
                }
                Job::Purge { what, done } => {
                    // Commit what is gathered first, so order is kept.
                    commit(&mut store, &mut batch);
                    let r = match what {
                        Purge::Expired(now) => store.purge_expired(now),
                        Purge::Oldest { keep, spare } => store.evict_oldest(keep, &spare),
                    }
                    .map_err(|e| e.to_string());
                    if let Ok(n) = &r {
                        debug!(purged = n, ?what, "events purged");
                    }
                    done(r);
                }
                Job::Stop => {
                    commit(&mut store, &mut batch);
                    debug!("store writer stopped");
                    return;
                }
            }
            next = lane.pop_front();
            if next.is_none() && batch.len() < max_batch {
                next = loop {
                    match rx.try_recv() {
                        Ok(job @ Job::Insert { .. }) => {
                            gauges.depth.fetch_sub(1, Relaxed);
                            if let Some(job) = stale(job, gauges) {
                                break Some(job);
                            }
                        }
                        Ok(job) => break Some(job),
                        Err(_) => break None,
                    }
                };
            }
        }
        let (n, t) = (batch.len() as u64, std::time::Instant::now());
        commit(&mut store, &mut batch);
        let smooth = |a: &AtomicU64, sample: u64| {
            let old = a.load(Relaxed);
            a.store((old.saturating_mul(7).saturating_add(sample)) / 8, Relaxed);
        };
        if let Some(per) = u64::try_from(t.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .checked_div(n)
        {
            smooth(&gauges.per_event_ns, per);
        }
        if let Some(o) = oldest {
            smooth(
                &gauges.sojourn_us,
                u64::try_from(o.elapsed().as_micros()).unwrap_or(u64::MAX),
            );
        }
    }
    debug!("store writer stopped");
}

/// `job` (an insert from the channel), or `None` when it waited past the shedding limit
/// and was answered [`InsertOutcome::Shed`].
fn stale(job: Job, gauges: &Gauges) -> Option<Job> {
    let limit = gauges.shed_after_us.load(Relaxed);
    match job {
        Job::Insert { done, at, .. }
            if limit > 0 && at.elapsed().as_micros() > u128::from(limit) =>
        {
            done(Ok(InsertOutcome::Shed));
            None
        }
        job => Some(job),
    }
}

fn commit(store: &mut Store, batch: &mut Vec<(Arc<Event>, Arc<str>, InsertDone)>) {
    if batch.is_empty() {
        return;
    }
    let refs: Vec<(&Event, &str)> = batch.iter().map(|(e, j, _)| (&**e, &**j)).collect();
    let result = store.insert_batch(&refs);
    drop(refs);
    match result {
        Ok(outcomes) => {
            for ((_, _, done), outcome) in batch.drain(..).zip(outcomes) {
                done(Ok(outcome));
            }
        }
        Err(e) => {
            error!(error = %e, events = batch.len(), "store commit failed");
            let msg = e.to_string();
            for (_, _, done) in batch.drain(..) {
                done(Err(msg.clone()));
            }
        }
    }
}
