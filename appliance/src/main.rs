//! `meshnode`: the fleetmesh node appliance's daemon and CLI.
//!
//! See `meshnode --help` and the README. Exit codes: 0 ok, 1 a negative verdict, 2 bad
//! input, usage or an error that stopped the command.

mod apply;
mod cli;
mod config;
mod daemon;
mod demo;
#[cfg(feature = "federation")]
mod federation;
mod http;
#[cfg(feature = "federation")]
mod ledger;
mod manifest;
mod models;
mod node;
mod peering;
mod peers;
mod projections;
mod reconcile;
mod settlement;
mod shards;

use std::io::IsTerminal as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser as _;
use tracing_subscriber::EnvFilter;

use cli::{Cli, Command, Outcome};

fn main() -> ExitCode {
    quiet_vulkan_probe();
    fix_thread_count();
    let cli = Cli::parse();
    // libp2p-style dependencies bring aws-lc-rs beside ring into rustls: choose one
    let _ = rustls::crypto::ring::default_provider().install_default();
    let daemon = matches!(cli.command, Command::Run(_) | Command::Up(_));
    let filter = EnvFilter::try_from_env("MESHNODE_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(if daemon { "info" } else { "warn" }));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match cli::dispatch(cli.command, run) {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Negative) => ExitCode::from(1),
        Ok(Outcome::Malformed | Outcome::Failing) => ExitCode::from(2),
        Ok(Outcome::Pending) => ExitCode::from(3),
        Err(e) => {
            eprintln!("meshnode: error: {}", format!("{e:#}").replace('\n', " "));
            ExitCode::from(2)
        }
    }
}

/// Mesa's Vulkan device-select layer asks Wayland which GPU drives the display while wgpu
/// probes, and libwayland prints "error: XDG_RUNTIME_DIR is invalid or not set" on a box
/// without a desktop session (a server, a container), which reads like a failure. With
/// no usable XDG_RUNTIME_DIR, point it at a private empty one (`$TMPDIR/meshnode-run-UID`,
/// 0700): the look-up then fails quietly and the probe finds the same adapters.
#[allow(unsafe_code)]
fn quiet_vulkan_probe() {
    let usable = std::env::var_os("XDG_RUNTIME_DIR")
        .is_some_and(|d| Path::new(&d).is_absolute() && Path::new(&d).is_dir());
    if usable {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
        let Ok(uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("meshnode-run-{uid}"));
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        // only a directory of ours that nobody else can use
        let private = std::fs::symlink_metadata(&dir)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.permissions().mode() & 0o077 == 0);
        if private {
            // SAFETY: the first thing main does, before any other thread exists.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        }
    }
}

/// candle's CPU matrix product asks for its thread count at every call, and without
/// `RAYON_NUM_THREADS` that means parsing /proc/cpuinfo each time (about a millisecond per
/// decoded token of an 88M model). Unless the operator set it, fix it once to rayon's own
/// default, the CPUs this process may use, so nothing else changes.
#[allow(unsafe_code)]
fn fix_thread_count() {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() {
        return;
    }
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: called at the start of main, before any other thread exists.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
}

/// Runs the node `r` asks for until SIGINT or SIGTERM.
fn run(r: cli::NodeRun) -> anyhow::Result<Outcome> {
    let (dir, listen, extra_models) = (&r.dir, r.listen, &r.models);
    let mut node = node::Node::open(dir)?;
    // meshnode.toml with the applied manifests on top; a stored manifest that no longer
    // validates stops the start here
    node.config = reconcile::effective(dir, &node.config, &[])
        .map_err(|e| anyhow::anyhow!("{e}"))
        .context("the applied manifests")?
        .0;
    let listen = listen.unwrap_or(node.config.face.listen);
    // [inference] models (relative to the node directory), then --model
    let mut inference = node.config.inference.clone();
    inference.models = inference.models_in(&node.dir, extra_models);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("meshnode")
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(serve(node, listen, &inference, extra_models, r.listening));
    // work still running on blocking threads (a proof, a generation) is not waited for
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served?;
    Ok(Outcome::Ok)
}

/// Runs the node until SIGINT or SIGTERM: the daemon's subsystems, the HTTP face over
/// them, then the stop in reverse.
async fn serve(
    node: node::Node,
    listen: std::net::SocketAddr,
    inference: &config::InferenceSection,
    extra_models: &[std::path::PathBuf],
    listening: impl FnOnce(std::net::SocketAddr),
) -> anyhow::Result<()> {
    // the recorder is in place before the first proof, token or job is counted
    http::metrics::exporter();
    let mut daemon = daemon::Daemon::start(node, listen, inference, extra_models).await?;
    let app = http::router(daemon.services())?;
    let face = &daemon.services().node.config.face;
    let opts = http::listener::Options {
        header_timeout: std::time::Duration::from_secs(face.header_timeout_secs),
        max_connections: face.max_connections,
        max_per_ip: face.max_connections_per_ip,
        per_ip_exempt: face.per_ip_exempt.clone(),
        shutdown: std::time::Duration::from_secs(face.shutdown_secs),
    };
    let (listener, stopping) = daemon.listening(listening)?;
    http::listener::serve(listener, app, opts, stopping).await;
    daemon.stop().await
}
