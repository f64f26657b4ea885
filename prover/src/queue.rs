//! The proving queue: every proof this node makes, whoever asks for it (the HTTP API, a
//! job), is admitted here and made here, one at a time.
//!
//! The operator installs circuits under one folder, a subfolder per circuit:
//! `<name>/circuit.zkey` (a snarkjs Groth16 proving key) and, to accept inputs rather than
//! full witnesses, `<name>/circuit.wasm` (circom's witness calculator). Names are 1–64
//! characters of `a-z 0-9 _ -`. Keys are loaded on first use and kept (reloaded when the
//! file changes); [`ProvingQueue::circuit_by_digest`] finds one by its zkey's SHA-256, as an
//! ask names it.
//!
//! Proving uses every core, so proofs run one batch at a time; at most [`QUEUE`] requests
//! are admitted at once (proving or waiting) and a request beyond is refused at once with
//! [`Error::Busy`] instead of piling up. Whoever gets the turn proves every waiting request
//! of the first waiting one's circuit together ([`crate::prove::prove_batch`]: side by
//! side on the CPU, back to back over kept bases on a GPU, one batch self-check), and each
//! caller gets its own answer, saying how many were proved with it (`batch`).
//! [`ProvingQueue::prove`] waits for its turn without holding a thread (a caller that goes
//! away while waiting is dropped unproved); [`ProvingQueue::prove_blocking`] is the same
//! queue for callers on a thread of their own.
//!
//! With a table budget ([`ProvingQueue::with_tables`]), each loaded circuit's MSM tables
//! ([`crate::tables`]) are built on a thread of their own after it loads, one circuit at
//! a time, within what the budget has left; proofs made meanwhile run without them. On a
//! GPU backend the circuit's bases are kept in device memory instead, when it loads
//! ([`KeyTables::keep`]), and freed with it.
//!
//! Metrics (through the `metrics` facade): `fleetmesh_prover_proofs_total{circuit,
//! outcome}`, `fleetmesh_prover_proof_seconds`, `fleetmesh_prover_phase_seconds{phase}`
//! (`witness` here, the rest in [`crate::prove`]) and the gauges
//! `fleetmesh_prover_queue_depth` (requests admitted, proving or waiting) and
//! `fleetmesh_prover_table_bytes` (the loaded circuits' MSM tables).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use fleetmesh_kernels::MsmNtt;
use serde_json::Value;
use tokio::sync::{Semaphore, SemaphorePermit, TryAcquireError};

use crate::witness::WitnessCalculator;
use crate::{Error, Fr, KeyTables, PreparedVk, Proven, ProvingKey, Result};

/// Requests admitted at once (one proving, the rest waiting).
pub const QUEUE: usize = 8;

/// A file's modification time and length: when either changes, the file is read again.
type Stamp = (SystemTime, u64);

/// A loaded circuit.
struct Circuit {
    name: String,
    stamp: Stamp,
    pk: Arc<ProvingKey>,
    /// `pk`'s verifying key, prepared once for the prover's self-check.
    pvk: PreparedVk,
    calc: Option<Arc<WitnessCalculator>>,
    /// `pk`'s MSM tables, once built in the background (never, without a budget).
    tables: OnceLock<KeyTables>,
    /// `pk`'s bases kept in the GPU backend's memory (freed with the circuit).
    kept: Option<KeyTables>,
    /// The queue's table accounting, to give the bytes back when this circuit goes.
    budget: Arc<TableBudget>,
}

impl Drop for Circuit {
    fn drop(&mut self) {
        if let Some(t) = self.tables.get() {
            let left = self.budget.used.fetch_sub(t.bytes(), Ordering::SeqCst) - t.bytes();
            metrics::gauge!("fleetmesh_prover_table_bytes").set(left as f64);
            tracing::debug!(circuit = %self.name, bytes = t.bytes(), "circuit tables freed");
        }
    }
}

/// The memory all circuits' MSM tables may take together, and what they take now.
#[derive(Debug, Default)]
struct TableBudget {
    limit: usize,
    used: AtomicUsize,
    /// One table build at a time (each uses every core).
    building: Mutex<()>,
    /// Builds started and not ended, for [`ProvingQueue::wait_for_tables`].
    pending: Mutex<usize>,
    ended: Condvar,
}

impl TableBudget {
    fn end_build(&self) {
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
        self.ended.notify_all();
    }
}

/// What a proof is made from.
#[derive(Debug, Clone, PartialEq)]
pub enum Witnessing {
    /// The circuit's input signals (`{"a": "3", …}`), run through its `circuit.wasm`.
    Input(Value),
    /// Every wire, already computed.
    Witness(Vec<Fr>),
}

/// A proof to make.
#[derive(Debug, Clone, PartialEq)]
pub struct ProveRequest {
    /// The installed circuit's name.
    pub circuit: String,
    /// Its witness, or the input to compute it from.
    pub witnessing: Witnessing,
}

/// A proof made and checked against the circuit's verifying key.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedProof {
    /// The proof and its public inputs.
    pub proven: Proven,
    /// Time spent computing the witness, ms.
    pub witness_ms: u64,
    /// Time spent proving the batch it was proved in, ms.
    pub prove_ms: u64,
    /// How many proofs were made together with it (1: alone).
    pub batch: usize,
}

/// A request waiting for its turn, and where its answer goes.
struct Waiting {
    req: ProveRequest,
    answer: tokio::sync::oneshot::Sender<Result<QueuedProof>>,
}

/// The proving queue over a folder of circuits.
pub struct ProvingQueue {
    dir: PathBuf,
    backend: Arc<dyn MsmNtt>,
    admitted: Semaphore,
    /// Held while a batch is proved (by the blocking task itself, so a caller that goes
    /// away mid-proof does not let another batch start beside it).
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Admitted requests not yet taken into a batch, in arrival order.
    waiting: Mutex<Vec<Waiting>>,
    circuits: Mutex<HashMap<String, Arc<Circuit>>>,
    /// Each circuit's zkey digest, with the file's stamp it was computed for.
    digests: Mutex<HashMap<String, (Stamp, String)>>,
    /// Proofs being made now, and the most there ever were at once (1, by design).
    running: AtomicUsize,
    peak: AtomicUsize,
    tables: Arc<TableBudget>,
}

impl std::fmt::Debug for ProvingQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvingQueue")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let m = std::fs::metadata(path)?;
    Ok((m.modified()?, m.len()))
}

fn circuit_error(name: &str, reason: impl std::fmt::Display) -> Error {
    Error::Circuit {
        name: name.to_owned(),
        reason: reason.to_string(),
    }
}

impl ProveRequest {
    /// A request as the HTTP API's body and a `groth16-prove` job's params write it:
    /// `{"circuit", "input": {…}}` or `{"circuit", "witness": ["1", …]}` (every wire, as
    /// decimal strings); the message names the field (`witness[i]`).
    ///
    /// # Errors
    /// What does not fit, named.
    pub fn from_json(req: &Value) -> std::result::Result<ProveRequest, String> {
        let circuit = req
            .get("circuit")
            .and_then(Value::as_str)
            .ok_or("circuit: missing or not a string")?;
        let witnessing = match (req.get("input"), req.get("witness")) {
            (Some(input), None) => Witnessing::Input(input.clone()),
            (None, Some(w)) => {
                Witnessing::Witness(crate::snarkjs::parse_public(w).map_err(|e| match e {
                    Error::Malformed { field, reason } => format!(
                        "witness{}: {reason}",
                        field.strip_prefix("public").unwrap_or(&field)
                    ),
                    other => format!("witness: {other}"),
                })?)
            }
            _ => return Err("give exactly one of \"input\" and \"witness\"".into()),
        };
        Ok(ProveRequest {
            circuit: circuit.to_owned(),
            witnessing,
        })
    }
}

impl QueuedProof {
    /// The proof as the API answers it: `{"proof": <proof.json>, "public": <public.json>,
    /// "ms": {"witness", "prove"}, "batch": n}` (snarkjs's formats; `batch`: how many
    /// proofs were made together with it).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "proof": crate::snarkjs::proof_to_json(&self.proven.proof),
            "public": crate::snarkjs::public_to_json(&self.proven.public),
            "ms": {"witness": self.witness_ms, "prove": self.prove_ms},
            "batch": self.batch,
        })
    }
}

/// What a queue error says to a caller, as a code: `malformed`, `unknown_circuit`,
/// `unsatisfied`, `busy`, or `internal`.
pub fn error_code(e: &Error) -> &'static str {
    match e {
        Error::Malformed { .. } | Error::Input { .. } | Error::PublicCount { .. } => "malformed",
        Error::UnknownCircuit(_) => "unknown_circuit",
        Error::Witness(_) => "unsatisfied",
        Error::Busy(_) => "busy",
        _ => "internal",
    }
}

/// A place in the proving queue; leaving it lowers `fleetmesh_prover_queue_depth`.
struct Admission<'a> {
    _permit: SemaphorePermit<'a>,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        metrics::gauge!("fleetmesh_prover_queue_depth").decrement(1.0);
    }
}

impl ProvingQueue {
    /// A queue for the circuits under `dir`, proving on `backend`, without MSM tables.
    pub fn new(dir: PathBuf, backend: Arc<dyn MsmNtt>) -> Arc<ProvingQueue> {
        ProvingQueue::with_tables(dir, backend, 0)
    }

    /// A queue whose circuits' MSM tables ([`crate::tables`]) may take `table_bytes`
    /// together: each circuit's are built in the background after it loads, from what the
    /// others left (when the backend uses them: the CPU), and freed when it goes.
    pub fn with_tables(
        dir: PathBuf,
        backend: Arc<dyn MsmNtt>,
        table_bytes: usize,
    ) -> Arc<ProvingQueue> {
        Arc::new(ProvingQueue {
            dir,
            backend,
            admitted: Semaphore::new(QUEUE),
            turn: Arc::new(tokio::sync::Mutex::new(())),
            waiting: Mutex::new(Vec::new()),
            circuits: Mutex::new(HashMap::new()),
            digests: Mutex::new(HashMap::new()),
            running: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            tables: Arc::new(TableBudget {
                limit: table_bytes,
                ..TableBudget::default()
            }),
        })
    }

    /// The bytes the loaded circuits' MSM tables take now.
    pub fn table_bytes(&self) -> usize {
        self.tables.used.load(Ordering::SeqCst)
    }

    /// Waits (blocking) until every table build started has ended; then `Some(bytes)` of
    /// circuit `name`'s tables, `None` when it has none (not loaded, no budget, or none
    /// fitted). For tests and benchmarks.
    pub fn wait_for_tables(&self, name: &str) -> Option<usize> {
        let mut pending = self
            .tables
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        while *pending > 0 {
            pending = self
                .tables
                .ended
                .wait(pending)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(pending);
        let c = self.lock().get(name).cloned()?;
        c.tables.get().map(KeyTables::bytes)
    }

    /// The most proofs that were ever being made at once by this queue.
    pub fn peak_concurrency(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    /// Makes a proof: admission (or [`Error::Busy`] at once), then waiting until a turn
    /// proves it (this caller's turn or another's: the requests of one circuit waiting
    /// together are proved as a batch), witnesses and proofs on a blocking thread.
    ///
    /// # Errors
    /// [`Error::Busy`]; [`Error::UnknownCircuit`]; [`Error::Malformed`] / [`Error::Input`]
    /// for a request that does not fit the circuit; [`Error::Witness`] for one that fails
    /// its constraints; [`Error::Circuit`] for an installed circuit that does not load.
    pub async fn prove(self: &Arc<Self>, req: ProveRequest) -> Result<QueuedProof> {
        let _admitted = self.admit()?;
        let mut answer = self.wait(req);
        loop {
            let turn = self.turn.clone().lock_owned().await;
            if let Some(done) = answered(&mut answer) {
                return done;
            }
            let batch = self.take_batch();
            let me = self.clone();
            tokio::task::spawn_blocking(move || {
                let _turn = turn;
                me.run_batch(batch);
            })
            .await
            .map_err(|e| circuit_error("?", format!("the prover panicked: {e}")))?;
        }
    }

    /// [`ProvingQueue::prove`] for a caller on a thread of its own (never from async code).
    ///
    /// # Errors
    /// As [`ProvingQueue::prove`].
    pub fn prove_blocking(&self, req: &ProveRequest) -> Result<QueuedProof> {
        let _admitted = self.admit()?;
        let mut answer = self.wait(req.clone());
        loop {
            let _turn = self.turn.blocking_lock();
            if let Some(done) = answered(&mut answer) {
                return done;
            }
            let batch = self.take_batch();
            self.run_batch(batch);
        }
    }

    /// Holds the turn until the guard is dropped: no batch starts meanwhile, and requests
    /// that arrive wait together. For tests of batching.
    #[doc(hidden)]
    pub async fn hold_turn(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.turn.clone().lock_owned().await
    }

    /// Requests admitted and not yet taken into a batch. For tests of batching.
    #[doc(hidden)]
    pub fn waiting(&self) -> usize {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Puts `req` among the waiting; its answer comes on the receiver.
    fn wait(&self, req: ProveRequest) -> tokio::sync::oneshot::Receiver<Result<QueuedProof>> {
        let (answer, rx) = tokio::sync::oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Waiting { req, answer });
        rx
    }

    /// The first waiting request and every other waiting one of its circuit, in order
    /// (those whose caller went away are dropped unproved); empty when none waits.
    fn take_batch(&self) -> Vec<Waiting> {
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        waiting.retain(|w| !w.answer.is_closed());
        let Some(circuit) = waiting.first().map(|w| w.req.circuit.clone()) else {
            return Vec::new();
        };
        let (batch, rest) = std::mem::take(&mut *waiting)
            .into_iter()
            .partition(|w| w.req.circuit == circuit);
        *waiting = rest;
        batch
    }

    fn admit(&self) -> Result<Admission<'_>> {
        match self.admitted.try_acquire() {
            Ok(p) => {
                metrics::gauge!("fleetmesh_prover_queue_depth").increment(1.0);
                Ok(Admission { _permit: p })
            }
            Err(e) => {
                metrics::counter!("fleetmesh_prover_proofs_total", "circuit" => "", "outcome" => "busy")
                    .increment(1);
                Err(Error::Busy(match e {
                    TryAcquireError::NoPermits => "the proving queue is full; retry shortly".into(),
                    TryAcquireError::Closed => "the prover stopped".into(),
                }))
            }
        }
    }

    /// The circuit `name`, loading (blocking) when absent or changed on disk.
    fn circuit(&self, name: &str) -> Result<Arc<Circuit>> {
        if !valid_name(name) {
            return Err(Error::Malformed {
                field: "circuit".into(),
                reason: format!("{name:?} is not a circuit name (1-64 of a-z 0-9 _ -)"),
            });
        }
        let folder = self.dir.join(name);
        let zkey = folder.join("circuit.zkey");
        let st = stamp(&zkey).map_err(|_| Error::UnknownCircuit(name.to_owned()))?;
        if let Some(c) = self.lock().get(name)
            && c.stamp == st
        {
            return Ok(c.clone());
        }
        let t = Instant::now();
        let bytes = std::fs::read(&zkey).map_err(|e| circuit_error(name, e))?;
        let pk = ProvingKey::from_bytes(&bytes).map_err(|e| circuit_error(name, e))?;
        let wasm = folder.join("circuit.wasm");
        let calc = match std::fs::read(&wasm) {
            Ok(b) => Some(Arc::new(
                WitnessCalculator::new(&b).map_err(|e| circuit_error(name, e))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(circuit_error(name, format!("{}: {e}", wasm.display()))),
        };
        tracing::info!(
            circuit = name,
            wires = pk.n_vars,
            domain = pk.domain_size,
            ms = t.elapsed().as_millis() as u64,
            "circuit loaded"
        );
        // a GPU backend keeps the bases it runs MSMs over (none for the CPU)
        let kept = match KeyTables::keep(&pk, self.backend.as_ref()) {
            Ok(Some(k)) => {
                tracing::info!(
                    circuit = name,
                    bytes = k.bytes(),
                    "circuit bases kept on the GPU"
                );
                Some(k)
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(circuit = name, error = %e, "circuit bases not kept on the GPU; each proof uploads them");
                None
            }
        };
        let c = Arc::new(Circuit {
            name: name.to_owned(),
            stamp: st,
            pvk: PreparedVk::new(&pk.vk),
            pk: Arc::new(pk),
            calc,
            tables: OnceLock::new(),
            kept,
            budget: self.tables.clone(),
        });
        self.lock().insert(name.to_owned(), c.clone());
        // tables only where the key's largest MSM runs on the CPU
        if self.tables.limit > 0 && self.backend.uses_tables(c.pk.a.len().max(c.pk.h.len())) {
            self.build_tables(&c);
        }
        Ok(c)
    }

    /// Builds `c`'s tables on a thread of its own, after any other build, within what the
    /// budget has left when it starts.
    fn build_tables(&self, c: &Arc<Circuit>) {
        let weak = Arc::downgrade(c);
        let budget = self.tables.clone();
        *budget.pending.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        std::thread::spawn(move || {
            let one = budget.building.lock().unwrap_or_else(|p| p.into_inner());
            // a circuit replaced or dropped before its turn needs no tables
            if let Some(c) = weak.upgrade() {
                build_into(&budget, &c);
            }
            drop(one);
            budget.end_build();
        });
    }
}

impl ProvingQueue {
    /// The installed circuit whose `circuit.zkey` has SHA-256 `digest` (hex), if any — how
    /// an ask names a circuit.
    pub fn circuit_by_digest(&self, digest: &str) -> Option<String> {
        self.installed()
            .into_iter()
            .find(|(_, d)| d == digest)
            .map(|(name, _)| name)
    }

    /// Every installed circuit's name and its `circuit.zkey`'s SHA-256 (hex), by name; a
    /// digest is computed once per file version (its size and modification time).
    pub fn installed(&self) -> Vec<(String, String)> {
        use sha2::Digest as _;
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !valid_name(&name) {
                continue;
            }
            let zkey = e.path().join("circuit.zkey");
            let Ok(st) = stamp(&zkey) else { continue };
            let known = self
                .digests
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&name)
                .filter(|(s, _)| *s == st)
                .map(|(_, d)| d.clone());
            let d = match known {
                Some(d) => d,
                None => {
                    let Ok(bytes) = std::fs::read(&zkey) else {
                        continue;
                    };
                    let d = hex::encode(sha2::Sha256::digest(&bytes));
                    self.digests
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), (st, d.clone()));
                    d
                }
            };
            out.push((name, d));
        }
        out.sort();
        out
    }

    /// The verifying key of circuit `name`.
    ///
    /// # Errors
    /// As loading the circuit: [`Error::UnknownCircuit`], [`Error::Circuit`].
    pub fn verifying_key(&self, name: &str) -> Result<crate::VerifyingKey<crate::Bn254>> {
        Ok(self.circuit(name)?.pk.vk.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Circuit>>> {
        self.circuits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Witnesses then proofs of `batch` (requests of one circuit), blocking, on the
    /// caller's thread (the turn is held); each answer goes to its caller. Each proof is
    /// counted in `fleetmesh_prover_proofs_total{circuit, outcome}` (the outcome is `ok` or
    /// the [`error_code`]; the circuit is empty when the name is not installed) and timed
    /// in `fleetmesh_prover_proof_seconds` (its batch's time).
    fn run_batch(&self, batch: Vec<Waiting>) {
        let Some(name) = batch.first().map(|w| w.req.circuit.clone()) else {
            return;
        };
        let count = |circuit: &str, outcome: &'static str| {
            metrics::counter!("fleetmesh_prover_proofs_total", "circuit" => circuit.to_owned(), "outcome" => outcome)
                .increment(1);
        };
        let circuit = match self.circuit(&name) {
            Ok(c) => c,
            Err(e) => {
                let label = if matches!(e, Error::UnknownCircuit(_)) {
                    ""
                } else {
                    &name
                };
                for w in batch {
                    count(label, error_code(&e));
                    let _ = w.answer.send(Err(e.clone()));
                }
                return;
            }
        };
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        let t = Instant::now();
        // the witnesses, one by one; those that fail are answered at once
        let mut made = Vec::with_capacity(batch.len());
        for w in batch {
            let started = Instant::now();
            match self.witness(&circuit, &w.req) {
                Ok(witness) => {
                    let ms = started.elapsed().as_millis() as u64;
                    metrics::histogram!("fleetmesh_prover_phase_seconds", "phase" => "witness")
                        .record(started.elapsed().as_secs_f64());
                    made.push((w, witness, ms));
                }
                Err(e) => {
                    count(&name, error_code(&e));
                    let _ = w.answer.send(Err(e));
                }
            }
        }
        let prepared = circuit.kept.as_ref().or_else(|| circuit.tables.get());
        let proving = Instant::now();
        let (made, witnesses): (Vec<_>, Vec<Vec<Fr>>) = made
            .into_iter()
            .map(|(w, witness, ms)| ((w, ms), witness))
            .unzip();
        let proofs: Vec<Result<Proven>> = match witnesses.as_slice() {
            [] => Vec::new(),
            [witness] => vec![crate::prove::prove_checked(
                &circuit.pk,
                prepared,
                &circuit.pvk,
                witness,
                self.backend.as_ref(),
            )],
            many => match crate::prove::prove_batch(
                &circuit.pk,
                prepared,
                &circuit.pvk,
                many,
                self.backend.as_ref(),
            ) {
                Ok(each) => each,
                Err(e) => many.iter().map(|_| Err(e.clone())).collect(),
            },
        };
        let prove_ms = proving.elapsed().as_millis() as u64;
        let n = made.len();
        if n > 1 {
            tracing::debug!(circuit = %name, proofs = n, ms = prove_ms, "proved a batch");
        }
        for ((w, witness_ms), proof) in made.into_iter().zip(proofs) {
            let answer = proof.map(|proven| QueuedProof {
                proven,
                witness_ms,
                prove_ms,
                batch: n,
            });
            match &answer {
                Ok(_) => {
                    metrics::histogram!("fleetmesh_prover_proof_seconds")
                        .record(t.elapsed().as_secs_f64());
                    count(&name, "ok");
                }
                Err(e) => count(&name, error_code(e)),
            }
            let _ = w.answer.send(answer);
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    /// The witness `req` asks for: computed from its input, or as given.
    fn witness(&self, circuit: &Circuit, req: &ProveRequest) -> Result<Vec<Fr>> {
        Ok(match &req.witnessing {
            Witnessing::Input(input) => {
                let calc = circuit.calc.as_ref().ok_or_else(|| Error::Malformed {
                    field: "input".into(),
                    reason: format!(
                        "circuit {:?} has no circuit.wasm on this node; send \"witness\"",
                        req.circuit
                    ),
                })?;
                // an input the circuit's own code refuses is unsatisfiable, not malformed
                calc.calculate(input).map_err(|e| match e {
                    Error::Input { .. } | Error::Witness(_) => e,
                    other => Error::Witness(other.to_string()),
                })?
            }
            Witnessing::Witness(w) => w.clone(),
        })
    }
}

/// The answer on `rx`, if it came (an error if it never will: its sender was dropped).
fn answered(
    rx: &mut tokio::sync::oneshot::Receiver<Result<QueuedProof>>,
) -> Option<Result<QueuedProof>> {
    use tokio::sync::oneshot::error::TryRecvError;
    match rx.try_recv() {
        Ok(answer) => Some(answer),
        Err(TryRecvError::Empty) => None,
        Err(TryRecvError::Closed) => Some(Err(circuit_error(
            "?",
            "the prover stopped before answering",
        ))),
    }
}

/// Builds `c`'s tables within what `budget` has left and accounts for them.
fn build_into(budget: &TableBudget, c: &Circuit) {
    let left = budget
        .limit
        .saturating_sub(budget.used.load(Ordering::SeqCst));
    let t = Instant::now();
    let Some(tables) = KeyTables::build(&c.pk, left) else {
        tracing::info!(
            circuit = %c.name,
            left_bytes = left,
            per_copy = crate::tables::bytes_per_copy(&c.pk),
            "no MSM tables: what is left of the table budget does not fit one copy"
        );
        return;
    };
    let bytes = tables.bytes();
    let used = budget.used.fetch_add(bytes, Ordering::SeqCst) + bytes;
    metrics::gauge!("fleetmesh_prover_table_bytes").set(used as f64);
    tracing::info!(
        circuit = %c.name,
        bytes,
        copies = tables.copies(),
        ms = t.elapsed().as_millis() as u64,
        "circuit MSM tables ready"
    );
    if c.tables.set(tables).is_err() {
        budget.used.fetch_sub(bytes, Ordering::SeqCst);
    }
}
