//! # fleetmesh-wasi
//!
//! WASI jobs: a WebAssembly module (a WASI preview-1 command) run under wasmtime with
//!
//! - **fuel** metering — the deterministic unit a receipt reports; a module that runs out
//!   ends with [`Status::OutOfFuel`];
//! - a **memory limit** per job — growing past it ends the job with
//!   [`Status::OutOfMemory`] (never a silent `memory.grow` failure);
//! - a **wall-clock guard** by epoch interruption — a module still running at the deadline
//!   ends with [`Status::Timeout`];
//! - **no ambient authority** — no environment variables, no network, no files but the
//!   job's input directory (read-only, `/inputs`) and output directory (read-write,
//!   `/outputs`); stdin is the job's bytes, stdout and stderr are captured up to a cap;
//! - a **deterministic** configuration — clocks fixed at the Unix epoch, randomness from a
//!   fixed seed, NaNs canonicalized, no threads — so one module and one input give one
//!   output and one fuel figure everywhere.
//!
//! A [`Runtime`] holds the engine (with the pooling instance allocator, so instantiation
//! costs microseconds), the WASI linker and the epoch ticker; compile a module once with
//! [`Runtime::compile`] and run it as often as needed with [`Runtime::run`]. Whatever the
//! module does, the host is unharmed: every failure is a [`Status`] on the [`Outcome`].
//!
//! ```
//! use fleetmesh_wasi::{Job, Runtime, RuntimeConfig, Status};
//! let rt = Runtime::new(&RuntimeConfig::default()).unwrap();
//! // (module (func (export "_start")))
//! let wasm = [0, 97, 115, 109, 1, 0, 0, 0, 1, 4, 1, 96, 0, 0, 3, 2, 1, 0, 7, 10, 1, 6, 95,
//!             115, 116, 97, 114, 116, 0, 0, 10, 4, 1, 2, 0, 11];
//! let module = rt.compile(&wasm).unwrap();
//! let out = rt.run(&module, &Job::default()).unwrap();
//! assert_eq!(out.status, Status::Exited(0));
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, Linker, Module, PoolingAllocationConfig,
    ResourceLimiter, Store, Trap,
};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

/// The crate's one error type: what stops a job before it runs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine could not be set up with this configuration.
    #[error("wasmtime engine: {0}")]
    Engine(String),
    /// The bytes are not a valid WebAssembly module.
    #[error("not a valid WebAssembly module: {0}")]
    Module(String),
    /// The job cannot be set up: a preopen directory that does not exist, limits out of
    /// range.
    #[error("job setup: {0}")]
    Setup(String),
}

/// Shorthand for this crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Engine-wide settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// Jobs that may run at once (instance slots of the pooling allocator). Default 32.
    pub max_concurrent: u32,
    /// The most linear memory any job may be granted, in bytes (each slot reserves this
    /// much address space, not memory). Default 1 GiB.
    pub max_memory: usize,
    /// Granularity of the wall-clock guard. Default 10 ms.
    pub epoch_tick: Duration,
    /// Instances from a preallocated pool (default) or allocated on demand (slower to
    /// instantiate; no address space reserved up front).
    pub pooling: bool,
}

impl Default for RuntimeConfig {
    fn default() -> RuntimeConfig {
        RuntimeConfig {
            max_concurrent: 32,
            max_memory: 1 << 30,
            epoch_tick: Duration::from_millis(10),
            pooling: true,
        }
    }
}

/// One job's limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Fuel (roughly one unit per WebAssembly instruction). Default 10⁹.
    pub fuel: u64,
    /// Linear memory, bytes. Default 64 MiB.
    pub memory: usize,
    /// Wall-clock time. Default 10 s.
    pub wall: Duration,
    /// Bytes kept of stdout and of stderr each; writing more ends the job. Default 1 MiB.
    pub output: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            fuel: 1_000_000_000,
            memory: 64 << 20,
            wall: Duration::from_secs(10),
            output: 1 << 20,
        }
    }
}

/// What to run a module with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Job {
    /// Arguments after the program name (`argv[0]` is `job`).
    pub args: Vec<String>,
    /// Standard input.
    pub stdin: Vec<u8>,
    /// A host directory the guest sees read-only at `/inputs`.
    pub inputs: Option<PathBuf>,
    /// A host directory the guest sees read-write at `/outputs`.
    pub outputs: Option<PathBuf>,
    /// The limits.
    pub limits: Limits,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// `_start` returned (0) or the guest called `proc_exit(code)`.
    Exited(i32),
    /// The fuel ran out.
    OutOfFuel,
    /// The guest tried to grow its memory past the job's limit.
    OutOfMemory,
    /// The wall-clock limit passed.
    Timeout,
    /// Another trap (unreachable, out-of-bounds access, stack overflow, output cap, …),
    /// with its message.
    Trap(String),
}

impl Status {
    /// A short machine-readable name: `exited`, `out-of-fuel`, `out-of-memory`, `timeout`,
    /// `trap`.
    pub fn code(&self) -> &'static str {
        match self {
            Status::Exited(_) => "exited",
            Status::OutOfFuel => "out-of-fuel",
            Status::OutOfMemory => "out-of-memory",
            Status::Timeout => "timeout",
            Status::Trap(_) => "trap",
        }
    }

    /// Whether the job succeeded (exit code 0).
    pub fn success(&self) -> bool {
        *self == Status::Exited(0)
    }
}

/// A finished job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// How it ended.
    pub status: Status,
    /// Fuel consumed.
    pub fuel_used: u64,
    /// Captured standard output.
    pub stdout: Vec<u8>,
    /// Captured standard error.
    pub stderr: Vec<u8>,
    /// Wall time, instantiation included.
    pub wall: Duration,
}

struct Limiter {
    memory: usize,
    hit: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory {
            self.hit = true;
            return Err(wasmtime::format_err!(
                "memory limit: {desired} bytes asked, {} allowed",
                self.memory
            ));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

struct State {
    wasi: WasiP1Ctx,
    limiter: Limiter,
}

/// The wall clock every job sees: the Unix epoch, forever.
struct FixedWall;

impl wasmtime_wasi::HostWallClock for FixedWall {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

/// The monotonic clock every job sees: 0, forever.
struct FixedMonotonic;

impl wasmtime_wasi::HostMonotonicClock for FixedMonotonic {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        0
    }
}

/// The engine, the WASI linker and the epoch ticker, shared by every job.
pub struct Runtime {
    engine: Engine,
    linker: Linker<State>,
    tick: Duration,
    stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("tick", &self.tick)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// An engine for `cfg`: Cranelift, fuel, epoch interruption, the pooling allocator,
    /// deterministic floats, no threads.
    ///
    /// # Errors
    /// [`Error::Engine`] when wasmtime refuses the configuration (for example a pool that
    /// does not fit the address space).
    pub fn new(cfg: &RuntimeConfig) -> Result<Runtime> {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_core_instances(cfg.max_concurrent)
            .total_memories(cfg.max_concurrent)
            .total_tables(cfg.max_concurrent)
            .total_stacks(cfg.max_concurrent)
            .max_memory_size(cfg.max_memory);
        let mut c = Config::new();
        c.consume_fuel(true)
            .epoch_interruption(true)
            .cranelift_nan_canonicalization(true)
            .relaxed_simd_deterministic(true)
            .allocation_strategy(if cfg.pooling {
                InstanceAllocationStrategy::Pooling(pool)
            } else {
                InstanceAllocationStrategy::OnDemand
            });
        let engine = Engine::new(&c).map_err(|e| Error::Engine(format!("{e:#}")))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut State| &mut s.wasi)
            .map_err(|e| Error::Engine(format!("{e:#}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (engine, stop, tick) = (engine.clone(), stop.clone(), cfg.epoch_tick);
            std::thread::Builder::new()
                .name("fleetmesh-wasi-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| Error::Engine(format!("epoch thread: {e}")))?
        };
        Ok(Runtime {
            engine,
            linker,
            tick: cfg.epoch_tick,
            stop,
            ticker: Some(ticker),
        })
    }

    /// Compiles a module (binary `.wasm` or the text format).
    ///
    /// # Errors
    /// [`Error::Module`] with wasmtime's reason.
    pub fn compile(&self, wasm: &[u8]) -> Result<Module> {
        Module::new(&self.engine, wasm).map_err(|e| Error::Module(format!("{e:#}")))
    }

    /// Runs `module`'s `_start` as `job` says. Every way the guest can fail — fuel,
    /// memory, time, a trap, a nonzero exit — is a [`Status`], not an error.
    ///
    /// # Errors
    /// [`Error::Setup`] for a preopen directory that cannot be opened, and
    /// [`Error::Module`] for a module that is not a WASI command (no `_start`, an import
    /// WASI preview 1 does not provide).
    pub fn run(&self, module: &Module, job: &Job) -> Result<Outcome> {
        let start = Instant::now();
        let stdout = MemoryOutputPipe::new(job.limits.output);
        let stderr = MemoryOutputPipe::new(job.limits.output);
        let mut b = WasiCtxBuilder::new();
        b.args(
            &std::iter::once("job".to_string())
                .chain(job.args.iter().cloned())
                .collect::<Vec<_>>(),
        )
        .stdin(MemoryInputPipe::new(job.stdin.clone()))
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        .wall_clock(FixedWall)
        .monotonic_clock(FixedMonotonic)
        .secure_random(wasmtime_wasi::Deterministic::new(vec![0x5a; 32]))
        .insecure_random(wasmtime_wasi::Deterministic::new(vec![0xa5; 32]))
        .insecure_random_seed(0)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
        for (dir, guest, perms) in [
            (&job.inputs, "/inputs", FsPerms::ReadOnly),
            (&job.outputs, "/outputs", FsPerms::ReadWrite),
        ] {
            if let Some(dir) = dir {
                b.preopened_dir(dir, guest, perms)
                    .map_err(|e| Error::Setup(format!("{} as {guest}: {e:#}", dir.display())))?;
            }
        }
        let mut store = Store::new(
            &self.engine,
            State {
                wasi: b.build_p1(),
                limiter: Limiter {
                    memory: job.limits.memory,
                    hit: false,
                },
            },
        );
        store.limiter(|s| &mut s.limiter);
        store
            .set_fuel(job.limits.fuel)
            .map_err(|e| Error::Engine(format!("{e:#}")))?;
        let ticks = job.limits.wall.as_nanos() / self.tick.as_nanos().max(1);
        store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX).max(1));
        store.epoch_deadline_trap();

        let result = self
            .linker
            .instantiate(&mut store, module)
            .map_err(|e| (true, e))
            .and_then(|instance| {
                let f = instance
                    .get_typed_func::<(), ()>(&mut store, "_start")
                    .map_err(|e| (true, e))?;
                f.call(&mut store, ()).map_err(|e| (false, e))
            });
        let status = match result {
            Ok(()) => Status::Exited(0),
            Err((setup, e)) => {
                if store.data().limiter.hit {
                    Status::OutOfMemory
                } else if let Some(exit) = e.downcast_ref::<I32Exit>() {
                    Status::Exited(exit.0)
                } else if let Some(t) = e.downcast_ref::<Trap>() {
                    match t {
                        Trap::OutOfFuel => Status::OutOfFuel,
                        Trap::Interrupt => Status::Timeout,
                        other => Status::Trap(other.to_string()),
                    }
                } else if setup {
                    return Err(Error::Module(format!("{e:#}")));
                } else {
                    Status::Trap(format!("{e:#}"))
                }
            }
        };
        let fuel_used = job
            .limits
            .fuel
            .saturating_sub(store.get_fuel().unwrap_or(0));
        drop(store);
        Ok(Outcome {
            status,
            fuel_used,
            stdout: stdout.contents().to_vec(),
            stderr: stderr.contents().to_vec(),
            wall: start.elapsed(),
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.ticker.take() {
            let _ = t.join();
        }
    }
}
