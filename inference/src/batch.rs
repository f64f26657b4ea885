//! Continuous batching: one worker thread per model runs every generation in progress
//! together, a step at a time.
//!
//! Use a [`Batcher`] wherever several requests can arrive at once (the node's API, the
//! quorum's local executor); [`crate::generate_with`] is the one-request path. Each step,
//! the worker admits waiting jobs (up to the batch size), runs one
//! [`Llama::forward_batch`] over every active sequence — new prompts being prefilled beside
//! sequences decoding their next token — and samples each sequence with its own
//! [`Decoding`]. A sequence leaves the batch when it reaches its token limit, fills the
//! context, or its step callback says stop; its transcript is sent back at once.
//!
//! Batching changes which rows share a matrix product, not the arithmetic of any row: the
//! tests check that a batch of eight gives each sequence the ids it gets alone.
//!
//! Metrics (through the `metrics` facade): the gauge `fleetmesh_inference_queue_depth`
//! (jobs submitted, not yet in the batch), the histograms
//! `fleetmesh_inference_batch_size` (sequences per step),
//! `fleetmesh_inference_time_to_first_token_seconds` (submission to first token) and
//! `fleetmesh_inference_time_per_token_seconds` (one decoding step, per token it made),
//! and `fleetmesh_inference_tokens_total{direction}` (`prompt`, `generated`). The worker
//! takes its histogram handles when it starts: install the recorder before making a
//! [`Batcher`].

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use crate::generate::{Decoding, Sampling, Transcript};
use crate::model::{KvCache, Llama};
use crate::schema::Constraint;
use crate::{Error, Result};

/// Called after each step with the ids generated so far; returning true ends the
/// generation (stop strings, a streaming client that went away).
pub type OnStep = Box<dyn FnMut(&[u32]) -> bool + Send>;

/// One generation to run.
pub struct Job {
    /// The prompt's ids.
    pub prompt: Vec<u32>,
    /// Most tokens to generate.
    pub max_tokens: usize,
    /// How to pick each token.
    pub sampling: Sampling,
    /// Alternatives recorded per step.
    pub top_logprobs: usize,
    /// The step callback (None: run to the limit).
    pub on_step: Option<OnStep>,
    /// A JSON Schema every token must keep the output inside (`schema-bounds`).
    pub constraint: Option<Constraint>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("prompt", &self.prompt.len())
            .field("max_tokens", &self.max_tokens)
            .field("sampling", &self.sampling)
            .finish_non_exhaustive()
    }
}

/// Where a submitted job's transcript arrives.
pub type Ticket = mpsc::Receiver<Result<Transcript>>;

/// Called once, on the worker thread, with a job's transcript or error: how an async
/// caller gets its answer without a thread waiting on a [`Ticket`].
pub type Reply = Box<dyn FnOnce(Result<Transcript>) + Send>;

struct Admitted {
    job: Job,
    decoding: Decoding,
    reply: Reply,
    /// When it was submitted (time to first token counts from here).
    queued: Instant,
}

struct Active {
    admitted: Admitted,
    cache: KvCache,
    next: Vec<u32>,
}

/// A model's batching worker. Dropping it lets the jobs already admitted finish, then
/// stops the thread.
pub struct Batcher {
    model: Arc<Llama>,
    digest: [u8; 32],
    tx: Option<mpsc::Sender<Admitted>>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Batcher {
    /// Starts the worker for `model` (whose weights digest transcripts carry), running at
    /// most `max_batch` sequences together (at least 1).
    pub fn new(model: Arc<Llama>, model_digest: [u8; 32], max_batch: usize) -> Batcher {
        let (tx, rx) = mpsc::channel();
        let m = model.clone();
        let max_batch = max_batch.max(1);
        let worker = std::thread::Builder::new()
            .name("fleetmesh-batcher".into())
            .spawn(move || work(&m, model_digest, max_batch, &rx))
            .expect("the batching thread starts");
        Batcher {
            model,
            digest: model_digest,
            tx: Some(tx),
            worker: Some(worker),
        }
    }

    /// The model.
    pub fn model(&self) -> &Llama {
        &self.model
    }

    /// The model's weights digest.
    pub fn model_digest(&self) -> [u8; 32] {
        self.digest
    }

    /// Queues `job`; its transcript arrives on the ticket.
    ///
    /// # Errors
    /// [`Error::Request`] at once for a prompt the model cannot run, bad sampling
    /// parameters, or a schema whose shortest document does not fit `max_tokens`.
    pub fn submit(&self, job: Job) -> Result<Ticket> {
        let (tx, ticket) = mpsc::channel();
        self.submit_with(
            job,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        )?;
        Ok(ticket)
    }

    /// Queues `job`; `reply` is called with its transcript (or error) on the worker thread
    /// when it ends. Nothing waits meanwhile.
    ///
    /// # Errors
    /// As [`Batcher::submit`]; `reply` is then not called.
    pub fn submit_with(&self, mut job: Job, reply: Reply) -> Result<()> {
        self.model.check_tokens(&job.prompt, 0)?;
        let mut decoding = Decoding::new(&job.sampling, job.top_logprobs)?;
        if let Some(c) = job.constraint.take() {
            let budget = job.max_tokens.min(self.model.room(job.prompt.len()));
            decoding.constrain(c, budget)?;
        }
        // counted before the worker can take it, so the gauge never dips below zero
        let depth = metrics::gauge!("fleetmesh_inference_queue_depth");
        depth.increment(1.0);
        self.tx
            .as_ref()
            .expect("the sender lives until drop")
            .send(Admitted {
                job,
                decoding,
                reply,
                queued: Instant::now(),
            })
            .map_err(|_| {
                depth.decrement(1.0);
                Error::Request("the model's batching worker has stopped".into())
            })
    }

    /// Submits `job` and waits for its transcript.
    ///
    /// # Errors
    /// As [`Batcher::submit`], or the forward pass's error.
    pub fn run(&self, job: Job) -> Result<Transcript> {
        wait(&self.submit(job)?)
    }
}

/// Waits for a ticket's transcript.
///
/// # Errors
/// The generation's error, or [`Error::Request`] if the worker stopped first.
pub fn wait(ticket: &Ticket) -> Result<Transcript> {
    ticket
        .recv()
        .map_err(|_| Error::Request("the model's batching worker has stopped".into()))?
}

impl Drop for Batcher {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

fn work(model: &Llama, digest: [u8; 32], max_batch: usize, rx: &mpsc::Receiver<Admitted>) {
    // looked up once, not per step and token
    let batch_size = metrics::histogram!("fleetmesh_inference_batch_size");
    let first_token = metrics::histogram!("fleetmesh_inference_time_to_first_token_seconds");
    let per_token = metrics::histogram!("fleetmesh_inference_time_per_token_seconds");
    let mut active: Vec<Active> = Vec::new();
    let mut open = true;
    loop {
        if active.is_empty() {
            if !open {
                return;
            }
            match rx.recv() {
                Ok(a) => admit(a, digest, &mut active),
                Err(_) => return,
            }
        }
        while open && active.len() < max_batch {
            match rx.try_recv() {
                Ok(a) => admit(a, digest, &mut active),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => open = false,
            }
        }
        if active.is_empty() {
            continue;
        }
        batch_size.record(active.len() as f64);
        let step = Instant::now();
        // a panic in candle fails this step's sequences, not the worker
        let result = {
            let mut batch: Vec<(&[u32], &mut KvCache)> = active
                .iter_mut()
                .map(|a| (a.next.as_slice(), &mut a.cache))
                .collect();
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                model.forward_batch(&mut batch)
            }))
            .unwrap_or_else(|_| Err(Error::Request("the forward pass panicked".into())))
        };
        let logits = match result {
            Ok(l) => l,
            Err(e) => {
                // a lost GPU fails the step and marks the node degraded
                let e = crate::placement::record_failure(model.device(), e);
                let device = matches!(e, Error::Device(_));
                let reason = e.to_string();
                for a in active.drain(..) {
                    let err = if device {
                        Error::Device(reason.clone())
                    } else {
                        Error::Request(reason.clone())
                    };
                    (a.admitted.reply)(Err(err));
                }
                continue;
            }
        };
        let mut still = Vec::with_capacity(active.len());
        for (mut a, l) in active.drain(..).zip(logits) {
            let Some(id) = a.admitted.decoding.push(&l) else {
                finish(a.admitted, digest);
                continue;
            };
            let d = &a.admitted.decoding;
            if d.steps().len() == 1 {
                first_token.record(a.admitted.queued.elapsed().as_secs_f64());
            } else {
                per_token.record(step.elapsed().as_secs_f64());
            }
            // a callback that panics ends its own job with an error
            let stop = match a.admitted.job.on_step.as_mut() {
                Some(f) => {
                    let ids = d.ids();
                    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(ids))) {
                        Ok(stop) => stop,
                        Err(_) => {
                            (a.admitted.reply)(Err(Error::Request(
                                "the step callback panicked".into(),
                            )));
                            continue;
                        }
                    }
                }
                None => false,
            };
            if stop
                || d.finished()
                || d.steps().len() >= a.admitted.job.max_tokens
                || !model.has_room(&a.cache)
            {
                finish(a.admitted, digest);
            } else {
                a.next = vec![id];
                still.push(a);
            }
        }
        active = still;
    }
}

fn admit(a: Admitted, digest: [u8; 32], active: &mut Vec<Active>) {
    metrics::gauge!("fleetmesh_inference_queue_depth").decrement(1.0);
    metrics::counter!("fleetmesh_inference_tokens_total", "direction" => "prompt")
        .increment(a.job.prompt.len() as u64);
    if a.job.max_tokens == 0 {
        return finish(a, digest);
    }
    active.push(Active {
        next: a.job.prompt.clone(),
        cache: KvCache::default(),
        admitted: a,
    });
}

fn finish(a: Admitted, digest: [u8; 32]) {
    metrics::counter!("fleetmesh_inference_tokens_total", "direction" => "generated")
        .increment(a.decoding.steps().len() as u64);
    let t = a.decoding.into_transcript(digest, &a.job.prompt);
    (a.reply)(Ok(t));
}
