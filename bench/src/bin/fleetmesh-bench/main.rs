//! `fleetmesh-bench`: side-by-side benchmarks against baselines, as ratios.
//!
//! ```text
//! cargo run --release -p fleetmesh-bench -- attacks [--meshnode PATH]   (bench/attacks.sh)
//! cargo run --release -p fleetmesh-bench -- events [N]
//! cargo run --release -p fleetmesh-bench -- federation [--meshnode PATH] [--nodes 3,5,10]
//!     [--topologies line,full] [--events N] [--interval-secs S]
//! cargo run --release -p fleetmesh-bench -- giftwrap [N]
//! cargo run --release -p fleetmesh-bench -- didcomm [N] [--rounds R] [--python PATH]
//! cargo run --release -p fleetmesh-bench -- cashu [N] [--rounds R] [--meshnode PATH]
//! cargo run --release -p fleetmesh-bench -- market --meshnode PATH [N]
//! cargo run --release -p fleetmesh-bench -- relay [--prefill N,..] [--events N] [--conns K]
//!     [--window W] [--reqs M] [--rounds R] [--python PATH] [--baselines 0.45,0.44]
//!     (bench/relay.sh installs the LocalRelay 0.45.1 baseline)
//! cargo run --release -p fleetmesh-bench -- shed [--flood-conns K] [--secs S] [--rate R] [--pool N]
//! cargo run --release -p fleetmesh-bench -- store [--events N] [--window W] [--dir DIR]
//! cargo run --release -p fleetmesh-bench -- sync [--items N]... [--diffs D]... [--relay-max N]
//! cargo run --release -p fleetmesh-bench -- groth16-verify [N] [--backend B]...
//! cargo run --release -p fleetmesh-bench -- groth16-prove [K] [ROUNDS]   (2^K domain; 14 uses the
//!     committed circuit, other K build it with circom via gen.sh)
//! ```

mod attacks;
mod attacks_exposure;
mod cashu;
mod didcomm;
mod events;
mod federation;
mod giftwrap;
mod groth16;
mod llm;
mod llm_gguf;
mod llm_gpu;
mod market;
mod prove_batch;
mod relay;
mod relay_client;
mod shed;
mod store;
mod sync;
mod wasi;

fn usage() -> ! {
    eprintln!(
        "usage: fleetmesh-bench attacks [--meshnode PATH]\n       fleetmesh-bench events [N]\n       fleetmesh-bench federation [--meshnode PATH] [--nodes 3,5,10] [--topologies line,full] [--events N] [--interval-secs S]\n       fleetmesh-bench giftwrap [N]\n       fleetmesh-bench didcomm [N] [--rounds R] [--python PATH]\n       fleetmesh-bench cashu [N] [--rounds R] [--meshnode PATH]\n       fleetmesh-bench market --meshnode PATH [N]\n       fleetmesh-bench relay [--prefill N,..] [--events N] [--conns K] [--window W] [--reqs M] [--rounds R] [--python PATH] [--baselines 0.45,0.44]\n       fleetmesh-bench shed [--flood-conns K] [--secs S] [--rate R] [--pool N]\n       fleetmesh-bench store [--events N] [--window W] [--dir DIR]\n       fleetmesh-bench sync [--items N]... [--diffs D]... [--relay-max N]\n       fleetmesh-bench groth16-verify [N] [--backend B]...\n       fleetmesh-bench groth16-prove [K] [ROUNDS]\n       fleetmesh-bench kernels [--min-log L] [--max-log M] [--backend cpu|wgpu|cuda:N]... [--rounds R]\n       fleetmesh-bench prove-backends [K] [ROUNDS] [--backend B]...\n       fleetmesh-bench prove-batch [K] [ROUNDS] [--backend B]...\n       fleetmesh-bench llm [ROUNDS]\n       fleetmesh-bench llm-mask [ROUNDS]\n       fleetmesh-bench llm-gguf [ROUNDS] | --ours-only TYPE [ROUNDS [ours|candle]]   (needs FLEETMESH_LLAMA_CPP_PYTHON: bench/llm.sh)\n       fleetmesh-bench llm-gpu [--device cuda:N] [--bandwidth TB/s] [--skip-cpu]   (a cuda-inference build)\n       fleetmesh-bench wasi [N]"
    );
    std::process::exit(2);
}

/// As meshnode does at start-up: fix `RAYON_NUM_THREADS` (rayon's default) unless set,
/// so candle's matrix products stop parsing /proc/cpuinfo at every call.
#[allow(unsafe_code)]
fn fix_thread_count() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: the first thing main does, before any other thread exists.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
    }
}

fn main() {
    fix_thread_count();
    // FLEETMESH_BENCH_LOG (an env-filter, e.g. `gpu.phase=debug`): the libraries' events
    // on stderr, beside the tables on stdout
    if let Ok(filter) = std::env::var("FLEETMESH_BENCH_LOG") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("attacks") => attacks::run(&args[1..]),
        Some("events") => {
            let n = args
                .get(1)
                .map_or(2000, |s| s.parse().unwrap_or_else(|_| usage()));
            events::run(n.max(1));
        }
        Some("giftwrap") => {
            let n = args
                .get(1)
                .map_or(500, |s| s.parse().unwrap_or_else(|_| usage()));
            giftwrap::run(n.max(1));
        }
        Some("didcomm") => didcomm::run(&args[1..]),
        Some("cashu") => cashu::run(&args[1..]),
        Some("market") => market::run(&args[1..]),
        Some("federation") => federation::run(&args[1..]),
        Some("relay") => relay::run(&args[1..]),
        Some("relay-client") => relay_client::client(&args[1..]),
        Some("shed") => shed::run(&args[1..]),
        Some("store") => store::run(&args[1..]),
        Some("sync") => sync::run(&args[1..]),
        Some("groth16-verify") => groth16::verify_cmd(&args[1..]),
        Some("kernels") => groth16::kernels(&args[1..]),
        Some("prove-backends") => groth16::prove_backends(&args[1..]),
        Some("prove-batch") => prove_batch::run(&args[1..]),
        Some("llm") => llm::run(&args[1..]),
        Some("llm-mask") => llm::mask_only(&args[1..]),
        Some("llm-gguf") => llm_gguf::run(&args[1..]),
        Some("llm-gpu") => llm_gpu::run(&args[1..]),
        Some("wasi") => wasi::run(&args[1..]),
        Some("groth16-prove") => {
            let k = args
                .get(1)
                .map_or(16, |s| s.parse().unwrap_or_else(|_| usage()));
            let rounds = args
                .get(2)
                .map_or(5, |s| s.parse().unwrap_or_else(|_| usage()));
            groth16::prove(k, rounds);
        }
        _ => usage(),
    }
}
