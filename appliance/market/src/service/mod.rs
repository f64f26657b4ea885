//! Jobs on the node: the service behind the appliance's `/v1/jobs`. A submission is a
//! signed ask and its compute/1.0 job message, NIP-44 encrypted to this node; it is
//! checked ([`JobService::submit`]), stored, and run by a pool of `workers` threads off
//! the async runtime on the ask's engine (`engines`), its limits cut to the node's
//! [`JobLimits`]; a watchdog fails a job still running past its wall limit. Every run ends
//! in `conclude`: the receipt (kind 30811) signed and published on the node's relay, the
//! compute/1.0 result encrypted to the buyer, stored with the job and as a blob.
//!
//! The engines call the node's parts through Rust: `fleetmesh-wasi` (`wasm`, `data`), the
//! node's one proving queue and verify gatherer (`fleetmesh_prover::queue`, `gather`:
//! the same admission, turn and batches as the HTTP API's), its blob store
//! ([`crate::blobs`]), and, through the [`Llm`] trait the appliance implements, its
//! inference API; through [`payments::Payments`], its wallet: a priced job is accepted
//! only with its payment in escrow, which is redeemed once its receipt is out.

mod engines;
pub mod offers;
pub mod payments;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use fleetmesh_port::RelayPort;
use fleetmesh_proto::ask::Ask;
use fleetmesh_proto::{Engine, Mode, NodeKeys, nip44};
use fleetmesh_schemas::{SchemaKey, SchemaSet};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use fleetmesh_proto::receipt::blinded_job_id;

use crate::jobs::{JobRecord, JobStore, State as JobState};
use crate::receipt::{Finished, sign_receipt};
use crate::{Refusal, refuse};

/// An `llm` job's request to the node's inference API.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmRequest {
    /// The ask's model.
    pub model: String,
    /// The verification mode the answer must carry (`quasi-deterministic`,
    /// `schema-bounds`, `tee-attestation`).
    pub mode: Mode,
    /// The job's `params`: an OpenAI completions request (or chat, with `messages`), as
    /// compute/1.0 carries it — prompt, `max_tokens`, `stop` and the like.
    pub params: Value,
    /// The JSON Schema bounding the output (`schema-bounds`).
    pub output_schema: Option<Value>,
    /// The job id a `tee-attestation` answer is bound to (the blinded job id).
    pub job: Option<String>,
    /// Greedy decoding, whatever `params` says.
    pub greedy: bool,
}

/// What the inference API answered an [`LlmRequest`].
#[derive(Debug, Clone, PartialEq)]
pub struct LlmAnswer {
    /// The answer as the API's clients read it: the job's output document.
    pub document: Value,
    /// The verifier's verdict for the mode (the answer's `fleetmesh.verdict`).
    pub verdict: Value,
    /// The digest of the transcript the executors agreed on, when the mode has one.
    pub transcript_digest: Option<String>,
    /// Tokens read.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
}

/// Why the inference API did not answer, as it would say it: its error `code` and
/// `message`, and for the quorum the verdict it reached (which executors said what).
#[derive(Debug, Clone, PartialEq)]
pub struct LlmFailure {
    /// The API's error code (`tee_unavailable`, `not_enough_executors`, …).
    pub code: &'static str,
    /// What it said.
    pub message: String,
    /// The quorum's verdict, when there was one.
    pub verdict: Option<Value>,
}

/// What the `llm` engine needs of the node's inference API, which the appliance
/// implements: one request answered as the API would answer it, on the calling thread.
pub trait Llm: Send + Sync {
    /// Answers `request` (never from async code).
    ///
    /// # Errors
    /// [`LlmFailure`].
    fn answer(&self, request: &LlmRequest) -> Result<LlmAnswer, LlmFailure>;
}

/// A unit price, as manifests and NIP-11 write it: `amount` of `unit` for `quantity` of
/// `per` (e.g. 2 msat per 1000 tokens).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// What `quantity` of `per` costs.
    pub amount: u64,
    /// The accounting unit of `amount`.
    pub unit: fleetmesh_proto::Unit,
    /// What is charged for: `job`, `fuel`, `token`, `proof`, `second` or `byte`.
    pub per: String,
    /// How many of `per` the amount buys. Default 1.
    #[serde(default = "one")]
    pub quantity: u64,
}

fn one() -> u64 {
    1
}

/// What a price may be charged per (`common.json`'s `measure`).
pub const MEASURES: &[&str] = &["job", "fuel", "token", "proof", "second", "byte"];

/// What the node offers and lets a job use (the appliance's `[jobs]`, which a
/// ComputeProvider manifest overrides). Every field but `workers` can change while the
/// service runs ([`JobService::set_limits`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JobLimits {
    /// Jobs run at once, each on its own thread. 1 to 64. Default 2. Read at start-up.
    pub workers: usize,
    /// Most fuel (WebAssembly instructions, roughly) of a wasm or data job. 1 to 10^15.
    /// Default 10 000 000 000.
    pub max_fuel: u64,
    /// Most seconds any job may run; past it a watchdog fails the job. 1 to 86 400.
    /// Default 300.
    pub max_wall_secs: u64,
    /// Most linear memory of a wasm or data job, in bytes. 1 MiB to 4 GiB. Default 1 GiB.
    pub max_memory_bytes: u64,
    /// Most output (stdout, stderr, files) of a wasm or data job, in bytes. 1 KiB to
    /// 1 GiB. Default 64 MiB.
    pub max_output_bytes: u64,
    /// Most tokens an `llm` job may ask to generate (`max_tokens`); more is refused
    /// `limit-exceeded`. 1 to 1 000 000. Default 4096.
    pub max_tokens: u64,
    /// Most unfinished jobs (accepted or running) one buyer key may hold, across HTTP,
    /// DIDComm and gift wrap; past it a submission is refused `quota` until one finishes.
    /// 1 to 100 000. Default 16.
    pub per_buyer: u64,
    /// Most bytes of a submission's sealed job message (its inline inputs); more is
    /// refused `limit-exceeded`. 1 KiB to 1 GiB; the HTTP API reads at most 2 MiB of a body
    /// whatever this says. Default 1 MiB.
    pub max_input_bytes: u64,
    /// The engines this node runs jobs of; an ask for another is refused
    /// `unsupported-engine`. Default: all five.
    pub engines: Vec<Engine>,
    /// The verification modes offered; a job under another is refused
    /// `unsupported-mode`. Default: all five (each engine runs under its own).
    pub modes: Vec<Mode>,
    /// Unit prices per engine (`wasm`, `groth16-prove`, …), advertised in NIP-11 for
    /// buyers to bid against. Default: none.
    pub prices: std::collections::BTreeMap<String, Price>,
    /// Whether the node answers open asks (kind 30810) with offers; `false` takes only
    /// jobs sent to it directly (HTTP, gift wrap, DIDComm), and its terms are still
    /// published. A ComputeProvider's `publishAsks`. Default true.
    pub publish_asks: bool,
}

impl Default for JobLimits {
    fn default() -> Self {
        JobLimits {
            workers: 2,
            max_fuel: 10_000_000_000,
            max_wall_secs: 300,
            max_memory_bytes: 1 << 30,
            max_output_bytes: 64 << 20,
            max_tokens: 4096,
            per_buyer: 16,
            max_input_bytes: 1 << 20,
            engines: Engine::ALL.to_vec(),
            modes: Mode::ALL.to_vec(),
            prices: std::collections::BTreeMap::new(),
            publish_asks: true,
        }
    }
}

/// The parts of the node a job service runs on.
pub struct Parts {
    /// The node's keys (the executor's identity).
    pub keys: NodeKeys,
    /// The node's relay, where receipts are published.
    pub relay: Arc<dyn RelayPort>,
    /// The node's blob store.
    pub blobs: Arc<crate::blobs::BlobStore>,
    /// The node's proving queue.
    pub prover: Arc<fleetmesh_prover::queue::ProvingQueue>,
    /// The node's verify gatherer.
    pub verifier: Arc<fleetmesh_prover::gather::Gatherer>,
    /// The node's inference API.
    pub inference: Arc<dyn Llm>,
    /// How the node takes payment for jobs ([`payments::NoPayments`]: it does not).
    pub payments: Arc<dyn payments::Payments>,
}

/// The job store file, in the node directory.
pub const JOBS_DB: &str = "jobs.sqlite";
/// Where jobs' input and output directories live, in the node directory.
pub const JOBS_DIR: &str = "jobs";

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// One job being run: its record, its ask, its opened job message, when it started.
struct Run<'a> {
    job: &'a JobRecord,
    ask: &'a Ask,
    msg: &'a Value,
    started_at: u64,
}

/// The id of a finished job's receipt (event id).
fn receipt_id(job: &JobRecord) -> Option<String> {
    let r: Value = serde_json::from_str(job.receipt.as_deref()?).ok()?;
    r["id"].as_str().map(str::to_owned)
}

/// The node's job service.
pub struct JobService {
    store: JobStore,
    keys: NodeKeys,
    schemas: &'static SchemaSet,
    relay: Arc<dyn RelayPort>,
    wasi: fleetmesh_wasi::Runtime,
    dir: PathBuf,
    blobs: Arc<crate::blobs::BlobStore>,
    prover: Arc<fleetmesh_prover::queue::ProvingQueue>,
    verifier: Arc<fleetmesh_prover::gather::Gatherer>,
    inference: Arc<dyn Llm>,
    payments: Arc<dyn payments::Payments>,
    queue: Mutex<std::sync::mpsc::Sender<String>>,
    runtime: tokio::runtime::Handle,
    /// Workers, what is offered and the most any job may use; replaced whole by
    /// [`JobService::set_limits`].
    limits: std::sync::RwLock<Arc<JobLimits>>,
    /// Counts the times jobs reached a final state ([`JobService::finishes`]).
    finished: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for JobService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobService")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl JobService {
    /// The job `id`, if there is one.
    ///
    /// # Errors
    /// `storage` when the store fails.
    pub fn job(&self, id: &str) -> Result<Option<JobRecord>, Refusal> {
        self.store.get(id)
    }

    /// The `n` jobs changed last, newest first (the status page's "recent jobs").
    ///
    /// # Errors
    /// `storage` when the store fails.
    pub fn recent(&self, n: usize) -> Result<Vec<JobRecord>, Refusal> {
        self.store.recent(n)
    }

    /// Opens the job store of the node in `node_dir`, starts the workers (which first take
    /// the jobs left accepted) and the expiry sweep. Call from inside the runtime.
    ///
    /// # Errors
    /// `storage` when the store cannot be opened, `internal` when the WASI engine or a
    /// worker thread cannot start.
    pub fn start(
        node_dir: &Path,
        parts: Parts,
        limits: &JobLimits,
    ) -> Result<Arc<JobService>, Refusal> {
        let Parts {
            keys,
            relay,
            blobs,
            prover,
            verifier,
            inference,
            payments,
        } = parts;
        let store = JobStore::open(&node_dir.join(JOBS_DB), fleetmesh_proto::unix_now())?;
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let pending: Vec<String> = store
            .in_state(JobState::Accepted)?
            .into_iter()
            .map(|j| j.id)
            .collect();
        let svc = Arc::new(JobService {
            store,
            keys,
            schemas: SchemaSet::embedded(),
            relay,
            wasi: fleetmesh_wasi::Runtime::new(&fleetmesh_wasi::RuntimeConfig::default())
                .map_err(|e| refuse("internal", format!("the WASI engine: {e}")))?,
            dir: node_dir.join(JOBS_DIR),
            blobs,
            prover,
            verifier,
            inference,
            payments,
            queue: Mutex::new(tx.clone()),
            runtime: tokio::runtime::Handle::current(),
            limits: std::sync::RwLock::new(Arc::new(limits.clone())),
            finished: tokio::sync::watch::Sender::new(0),
        });
        for id in pending {
            let _ = tx.send(id);
        }
        // a restart between a receipt and its redeem: redeem now, off the runtime
        let escrowed = svc.store.escrowed()?;
        if !escrowed.is_empty() {
            let weak = Arc::downgrade(&svc);
            std::thread::spawn(move || {
                for job in escrowed {
                    let Some(svc) = weak.upgrade() else { return };
                    svc.redeem(&job);
                }
            });
        }
        // the workers hold weak handles: the service ends with the router
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..limits.workers {
            let weak = Arc::downgrade(&svc);
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("fleetmesh-jobs-{n}"))
                .spawn(move || worker(&weak, &rx))
                .map_err(|e| refuse("internal", format!("a job worker: {e}")))?;
        }
        let weak = Arc::downgrade(&svc);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(svc) = weak.upgrade() else { return };
                match svc.store.expire_due(fleetmesh_proto::unix_now()) {
                    Ok(ids) if !ids.is_empty() => {
                        tracing::info!(?ids, "jobs expired");
                        svc.finished.send_modify(|n| *n += 1);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(%e, "expiring jobs"),
                }
                svc.watchdog(fleetmesh_proto::unix_now());
            }
        });
        Ok(svc)
    }

    /// Changes each time jobs reach a final state (verified and paid, failed, expired):
    /// what answers buyers waits on, instead of asking the store again and again.
    pub fn finishes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.finished.subscribe()
    }

    /// What the service offers and lets a job use now.
    pub fn limits(&self) -> Arc<JobLimits> {
        self.limits
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces what is offered and the limits, for the jobs checked and started from now
    /// on (running jobs keep theirs). `workers` is read at start-up only.
    pub fn set_limits(&self, limits: JobLimits) {
        tracing::info!(?limits, "job limits replaced");
        *self
            .limits
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(limits);
    }

    /// The wall limit of a job: its ask's `wall_secs`, cut to `[jobs] max_wall_secs`.
    fn wall_secs(&self, ask: &Value) -> u64 {
        let cap = self.limits().max_wall_secs;
        ask["limits"]["wall_secs"].as_u64().unwrap_or(cap).min(cap)
    }

    /// Fails every running job past its wall limit (and a grace second per 10): an engine
    /// that does not watch the clock itself (a proof, a generation) cannot keep a buyer
    /// waiting beyond what was agreed. The engine's late result is then discarded.
    fn watchdog(&self, now: u64) {
        let failed = self.store.fail_overdue(now, |ask| {
            let content: Value =
                serde_json::from_str(ask["content"].as_str().unwrap_or("{}")).unwrap_or_default();
            self.wall_secs(&content)
        });
        let failed = failed.unwrap_or_default();
        for (id, wall) in &failed {
            tracing::warn!(job = %id, wall, "job past its wall limit; failed");
        }
        if !failed.is_empty() {
            self.finished.send_modify(|n| *n += 1);
        }
    }
}

/// One worker thread: runs queued jobs until the service ends.
fn worker(weak: &std::sync::Weak<JobService>, rx: &Mutex<std::sync::mpsc::Receiver<String>>) {
    loop {
        let next = rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .recv();
        let Ok(id) = next else { return };
        let Some(svc) = weak.upgrade() else { return };
        // a panic in an engine fails its job, not the worker
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            svc.execute(&id);
        }));
        if ran.is_err() {
            tracing::error!(job = %id, "the job's engine panicked");
            let _ = svc.store.transition(
                &id,
                JobState::Failed,
                Some("internal: the engine panicked"),
                fleetmesh_proto::unix_now(),
            );
        }
    }
}

/// The verification modes this node runs jobs of an engine under.
/// A compute/1.0 `message` (`what`: "job", "offer") names `ask`, its engine and its mode.
///
/// # Errors
/// `mismatch`, naming the field.
fn answers(message: &Value, ask: &Ask, what: &str) -> Result<(), Refusal> {
    for (field, want) in [
        ("ask", ask.event.id_hex()),
        ("engine", ask.engine.to_string()),
        ("mode", ask.mode.to_string()),
    ] {
        if message[field].as_str() != Some(want.as_str()) {
            return Err(refuse(
                "mismatch",
                format!(
                    "the {what}'s {field} is {}, the ask's {want}",
                    message[field]
                ),
            ));
        }
    }
    Ok(())
}

fn offered_modes(engine: Engine) -> &'static [Mode] {
    match engine {
        Engine::Wasm | Engine::Data => &[Mode::Delivery],
        Engine::Groth16Prove | Engine::Groth16Verify => &[Mode::Proof],
        Engine::Llm => &[
            Mode::QuasiDeterministic,
            Mode::SchemaBounds,
            Mode::TeeAttestation,
        ],
    }
}

impl JobService {
    /// Checks and records a submission (`{"ask": <event>, "payload": "<NIP-44>"}`): the
    /// ask, then the job message it carries; the job, and whether it is new.
    ///
    /// # Errors
    /// The [`Refusal`] naming what does not hold.
    pub fn submit(&self, body: &[u8]) -> Result<(JobRecord, bool), Refusal> {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| refuse("bad_request", format!("the body is not JSON: {e}")))?;
        let now = fleetmesh_proto::unix_now();
        let ask = Ask::parse(&v["ask"].to_string(), now)?;
        let sealed = v["payload"]
            .as_str()
            .ok_or_else(|| refuse("bad_request", "payload must be a NIP-44 string"))?;
        let cap = self.limits().max_input_bytes;
        if sealed.len() as u64 > cap {
            return Err(refuse(
                "limit-exceeded",
                format!(
                    "the job message is {} bytes; this node takes at most {cap}",
                    sealed.len()
                ),
            ));
        }
        let job = self.open_job(&ask, sealed)?;
        let id = job["job_id"].as_str().unwrap_or_default().to_string();
        // a job already taken is not paid for twice
        let escrow = match self.store.get(&id)? {
            Some(_) => None,
            None => {
                let need = self.need_sat(&ask)?;
                self.payments.escrow(&id, &ask, job.get("payment"), need)?
            }
        };
        let (rec, new) = self
            .store
            .submit(&ask, &id, sealed, now, self.limits().per_buyer)?;
        let rec = match escrow {
            Some(e) if new => {
                let mut p = serde_json::to_value(&e).unwrap_or_default();
                p["state"] = json!("escrowed");
                self.store.set_payment(&rec.id, &p)?;
                tracing::info!(job = %rec.id, amount_sat = e.amount_sat, at = %e.at, "job paid into escrow");
                JobRecord {
                    payment: Some(p),
                    ..rec
                }
            }
            _ => rec,
        };
        if new {
            let _ = self
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .send(rec.id.clone());
        }
        Ok((rec, new))
    }

    /// The circuits installed for `groth16` jobs, as the node's terms list them.
    pub fn circuits(&self) -> Vec<fleetmesh_proto::provider::CircuitTerm> {
        self.prover
            .installed()
            .into_iter()
            .map(|(id, zkey)| fleetmesh_proto::provider::CircuitTerm { id, zkey })
            .collect()
    }

    /// What the node charges at most for a job of `ask`, in sats: `None` when it does not
    /// price the ask's engine.
    ///
    /// # Errors
    /// `payment-required` when the engine is priced in a way the ask gives no bound for.
    fn need_sat(&self, ask: &Ask) -> Result<Option<u64>, Refusal> {
        let limits = self.limits();
        let Some(price) = limits.prices.get(ask.engine.as_str()) else {
            return Ok(None);
        };
        payments::price_sat(price, &ask.content["limits"])
            .map(Some)
            .ok_or_else(|| {
                refuse(
                    "payment-required",
                    format!(
                        "{} jobs cost {} {} per {} {}: the ask must set that limit, and the price \
                     be in msat or sat",
                        ask.engine, price.amount, price.unit, price.quantity, price.per
                    ),
                )
            })
    }

    /// Redeems a verified job's escrow and records the outcome.
    fn redeem(&self, job: &JobRecord) {
        let Some(mut p) = job.payment.clone() else {
            return;
        };
        let outcome = Ask::parse(&job.ask, 0)
            .map_err(|e| e.to_string())
            .and_then(|ask| {
                let msg = self
                    .open_payload(&ask, &job.payload)
                    .map_err(|e| e.to_string())?;
                self.payments.redeem(&job.id, &ask, &msg["payment"])
            });
        // the payment is recorded against the job's receipt (whose `d` only the buyer and
        // this node can tie to the job)
        if let Some(id) = receipt_id(job) {
            p["receipt"] = json!(id);
        }
        match outcome {
            Ok(sats) => {
                p["state"] = json!("redeemed");
                p["redeemed_sat"] = json!(sats);
                tracing::info!(job = %job.id, sats, "job payment redeemed");
            }
            Err(e) => {
                p["state"] = json!("unredeemed");
                p["reason"] = json!(e);
                tracing::warn!(job = %job.id, %e, "redeeming the job's payment");
            }
        }
        // the ledger first: a crash before the job store has it redeemed again after the
        // restart (the wallet finds it redeemed), and the ledger counts a payment once
        self.settled(job, &p);
        if let Err(e) = self.store.set_payment(&job.id, &p) {
            tracing::warn!(job = %job.id, %e, "recording the job's payment");
        }
    }

    /// Tells the payments a job's payment has reached its end `p`, the job named as its
    /// receipt names it.
    fn settled(&self, job: &JobRecord, p: &Value) {
        match blinded_job_id(&self.keys.nostr().secret_key(), &job.buyer, &job.id) {
            Ok(blinded) => self.payments.settled(&job.buyer, &blinded, p),
            Err(e) => tracing::warn!(job = %job.id, %e, "the job's blinded id"),
        }
    }

    /// The job message of `ask`, decrypted (not checked: see [`JobService::open_job`]).
    fn open_payload(&self, ask: &Ask, sealed: &str) -> Result<Value, Refusal> {
        let key = nip44::conversation_key(&self.keys.nostr().secret_key(), &ask.buyer())
            .map_err(|e| refuse("bad_request", e.to_string()))?;
        let plain = nip44::decrypt(&key, sealed)
            .map_err(|e| refuse("bad_request", format!("the payload does not open: {e}")))?;
        serde_json::from_slice(&plain)
            .map_err(|e| refuse("bad_request", format!("the payload is not JSON: {e}")))
    }

    /// Decrypts and checks the compute/1.0 job message of `ask`.
    fn open_job(&self, ask: &Ask, sealed: &str) -> Result<Value, Refusal> {
        let job = self.open_payload(ask, sealed)?;
        self.schemas
            .validate(&SchemaKey::Payload("compute/1.0".into()), &job)
            .map_err(|e| refuse("schema", e.to_string()))?;
        if job["type"] != "job" {
            return Err(refuse("bad_request", "the payload is not a job message"));
        }
        answers(&job, ask, "job")?;
        self.sells(ask)?;
        let limits = self.limits();
        if ask.engine == Engine::Llm {
            let want = job["params"]["max_tokens"].as_u64().unwrap_or(16);
            if want > limits.max_tokens {
                return Err(refuse(
                    "limit-exceeded",
                    format!(
                        "max_tokens {want} is above this node's {}",
                        limits.max_tokens
                    ),
                ));
            }
            let cap = ask.content["limits"]["tokens"].as_u64().unwrap_or(0);
            if want > cap {
                return Err(refuse(
                    "limit-exceeded",
                    format!("max_tokens {want} is above the ask's tokens limit {cap}"),
                ));
            }
            if ask.mode == Mode::SchemaBounds {
                let schema = &job["output_schema"];
                let digest = hex::encode(Sha256::digest(schema.to_string().as_bytes()));
                if schema.is_null()
                    || ask.content["output_schema"].as_str() != Some(digest.as_str())
                {
                    return Err(refuse(
                        "mismatch",
                        "the job's output_schema does not hash (SHA-256 of its compact JSON) to \
                         the ask's",
                    ));
                }
            }
        }
        for limit in ["fuel", "wall_secs", "memory_bytes", "output_bytes"] {
            if let (Some(asked), Some(cap)) = (
                job["limits"][limit].as_u64(),
                ask.content["limits"][limit].as_u64(),
            ) && asked > cap
            {
                return Err(refuse(
                    "limit-exceeded",
                    format!("the job's {limit} {asked} is above the ask's {cap}"),
                ));
            }
        }
        if matches!(ask.engine, Engine::Wasm | Engine::Data)
            && job["limits"]["fuel"].as_u64().is_none()
        {
            return Err(refuse("bad_request", "a wasm job needs limits.fuel"));
        }
        Ok(job)
    }

    /// Runs accepted job `id` to its end; every failure ends up on the job.
    fn execute(&self, id: &str) {
        let now = fleetmesh_proto::unix_now();
        let Ok(Some(job)) = self.store.get(id) else {
            return;
        };
        if job.state != JobState::Accepted
            || self
                .store
                .transition(id, JobState::Running, None, now)
                .is_err()
        {
            return;
        }
        if let Err(e) = self.run(&job) {
            tracing::warn!(job = %id, %e, "job failed");
            let _ = self.store.transition(
                id,
                JobState::Failed,
                Some(&e.to_string()),
                fleetmesh_proto::unix_now(),
            );
        }
    }

    /// Signs, publishes and stores what a finished job produced: the receipt on the relay,
    /// the result (with the output `document`) encrypted to the buyer.
    fn conclude(
        &self,
        job: &JobRecord,
        done: &Finished,
        document: &str,
        failure: Option<&str>,
    ) -> Result<(), Refusal> {
        let receipt = sign_receipt(&self.keys, job, done)?;
        let published = self.runtime.block_on(self.relay.publish(receipt.clone()));
        if let Err(e) = published {
            tracing::warn!(job = %job.id, %e, "publishing the receipt");
        }
        let result = json!({
            "protocol": "compute/1.0",
            "type": "result",
            "job_id": job.id,
            "output_digest": done.output_digest,
            "metered": done.metered,
            "verdict": done.verdict,
            "output": {"inline": b64().encode(document.as_bytes()),
                       "media_type": "application/vnd.fleetmesh.job-result+json"},
            "receipt": receipt.id_hex(),
        });
        let mut result = result;
        // delivered: the key to the delivery-mode escrow goes with the output
        if failure.is_none()
            && let Ok(ask) = Ask::parse(&job.ask, 0)
            && ask.mode == Mode::Delivery
            && job.payment.is_some()
            && let Some(preimage) = self.payments.delivery_key(&ask)
        {
            result["preimage"] = json!(preimage);
        }
        let key = nip44::conversation_key(&self.keys.nostr().secret_key(), &job.buyer)
            .map_err(|e| refuse("internal", e.to_string()))?;
        let sealed = nip44::encrypt(&key, result.to_string().as_bytes())
            .map_err(|e| refuse("internal", e.to_string()))?;
        // the sealed result is also a blob of the node's Blossom store: content-addressed,
        // readable by anyone, openable by the buyer only
        if let Err(e) = self.blobs.put(
            sealed.as_bytes(),
            "application/nip44",
            &self.keys.nostr_pubkey_hex(),
        ) {
            tracing::warn!(job = %job.id, %e, "storing the result blob");
        }
        let rec = self.store.finish(
            &job.id,
            failure,
            done,
            (&receipt.to_json(), &sealed),
            fleetmesh_proto::unix_now(),
        )?;
        match (&rec.payment, failure) {
            (Some(_), None) => self.redeem(&rec),
            (Some(p), Some(why)) => {
                let mut p = p.clone();
                p["state"] = json!("released");
                p["reason"] = json!(format!(
                    "the job failed ({why}): the buyer's refund after the locktime"
                ));
                if let Some(id) = receipt_id(&rec) {
                    p["receipt"] = json!(id);
                }
                self.settled(&rec, &p);
                self.store.set_payment(&job.id, &p)?;
            }
            (None, _) => {}
        }
        // final, its payment settled: the answer can go out
        self.finished.send_modify(|n| *n += 1);
        Ok(())
    }
}
