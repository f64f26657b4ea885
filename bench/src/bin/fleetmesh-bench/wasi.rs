//! `fleetmesh-bench wasi [N]`: WASI job latency and throughput on `fleetmesh-wasi`.
//!
//! A job's latency from "run this module" to its first instruction is the WASI context
//! (stdio pipes, fixed clocks, seeded randomness), the store with its fuel and epoch
//! deadline, and instantiation; measured by a module whose `_start` is empty, so the run
//! ends right after its first instruction. With the pooling allocator (the runtime's
//! default) against wasmtime's on-demand allocator measured in the same run; then jobs/s
//! of that trivial module, one thread and one per core.

use std::time::{Duration, Instant};

use fleetmesh_bench::median;
use fleetmesh_wasi::{Job, Runtime, RuntimeConfig, Status};

const TRIVIAL: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")))"#;

fn latency(pooling: bool, n: usize) -> Duration {
    let rt = Runtime::new(&RuntimeConfig {
        pooling,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let m = rt.compile(TRIVIAL.as_bytes()).expect("module");
    let job = Job::default();
    for _ in 0..50 {
        rt.run(&m, &job).expect("warm-up");
    }
    median(
        (0..n)
            .map(|_| {
                let t = Instant::now();
                let out = rt.run(&m, &job).expect("run");
                assert_eq!(out.status, Status::Exited(0));
                t.elapsed()
            })
            .collect(),
    )
}

/// Runs the benchmark.
pub fn run(args: &[String]) {
    let n = args
        .first()
        .map_or(2000, |s| s.parse().unwrap_or_else(|_| super::usage()));
    let pooled = latency(true, n);
    let on_demand = latency(false, n);
    println!(
        "wasi job latency (context + store + instantiate + empty _start), median of {n}: pooling {:>7.1} us   on-demand {:>7.1} us   x{:.2}   (goal <= 1000 us)",
        pooled.as_secs_f64() * 1e6,
        on_demand.as_secs_f64() * 1e6,
        on_demand.as_secs_f64() / pooled.as_secs_f64()
    );
    let rt = Runtime::new(&RuntimeConfig::default()).expect("runtime");
    let m = rt.compile(TRIVIAL.as_bytes()).expect("module");
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    for t in [1, threads] {
        let start = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..t {
                s.spawn(|| {
                    for _ in 0..n / t {
                        rt.run(&m, &Job::default()).expect("run");
                    }
                });
            }
        });
        let done = (n / t) * t;
        println!(
            "wasi trivial jobs, {t} thread(s): {:>8.0} jobs/s",
            done as f64 / start.elapsed().as_secs_f64()
        );
    }
}
