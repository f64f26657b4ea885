//! `meshnode`: the fleetmesh node appliance's daemon and CLI.
//!
//! See `meshnode --help` and the README. Exit codes: 0 ok, 1 a negative verdict, 2 bad
//! input, usage or an error that stopped the command.

mod apply;
mod cli;
mod config;
mod daemon;
mod demo;
mod didcomm;
#[cfg(feature = "federation")]
mod federation;
mod http;
#[cfg(feature = "federation")]
mod ledger;
mod mailbox;
mod manifest;
mod models;
mod node;
mod nutzaps;
mod nwc;
mod offers;
mod peering;
mod peers;
mod projections;
mod reconcile;
mod settlement;
mod shards;
mod tasks;

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
    match dispatch(cli.command) {
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

fn dispatch(command: Command) -> anyhow::Result<Outcome> {
    match command {
        Command::Init(args) => {
            let settings = cli::init::settings(&args)?;
            let created = node::init(&args.dir, &settings)?;
            println!("created node in {}", args.dir.display());
            println!("pubkey:     {}", created.pubkey);
            println!("did:        {}", created.did);
            println!("descriptor: {}", created.descriptor.id_hex());
            println!("listen:     127.0.0.1:{}", settings.face_port);
            Ok(Outcome::Ok)
        }
        Command::Run(args) => run(&args.dir, args.listen, &args.model, |_| {}),
        Command::Up(args) => {
            let dir = node::dir_or_home(args.dir)?;
            if !node::exists(&dir) {
                let open = args.listen.is_some_and(|a| !a.ip().is_loopback());
                let settings = manifest::NodeSettings {
                    listen: args.listen,
                    token: args.token || open,
                    ..manifest::NodeSettings::default()
                };
                let created = node::init(&dir, &settings)?;
                eprintln!(
                    "meshnode: created a node with defaults in {} (pubkey {})",
                    dir.display(),
                    created.pubkey
                );
                if settings.token {
                    let why = if open {
                        format!(
                            "{} is reachable from other hosts",
                            args.listen.map(|a| a.to_string()).unwrap_or_default()
                        )
                    } else {
                        "--token".to_owned()
                    };
                    // printed this once; kept in the owner-only config
                    eprintln!(
                        "meshnode: {why}, so the APIs need a token: one was generated into \
                         [api] token of {} (owner-only): {}",
                        dir.join(config::FILE).display(),
                        config::Config::load(&dir)?.api.token.unwrap_or_default()
                    );
                }
            }
            let models = if args.demo {
                vec![demo::prepare(&dir)?]
            } else {
                Vec::new()
            };
            let hints = dir.clone();
            run(&dir, args.listen, &models, move |addr| {
                eprint!("{}", demo::next_steps(addr, &hints, args.demo));
            })
        }
        Command::Doctor(args) => {
            let dir = match args.dir {
                Some(d) => Some(d),
                None => node::default_home().ok().filter(|d| node::exists(d)),
            };
            let report = cli::doctor::report(dir.as_deref(), args.backend)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{}", cli::doctor::render(&report));
            }
            Ok(Outcome::Ok)
        }
        Command::Schema(cmd) => cli::schema::run(cmd),
        Command::Apply(args) => {
            let dir = node::dir_or_home(args.dir)?;
            let mut docs = Vec::new();
            for f in &args.files {
                docs.extend(manifest::read_documents(f)?);
            }
            let answer = daemon::control::request(
                &dir,
                &serde_json::json!({"cmd": "apply", "manifests": docs}),
            )?;
            if let Some(why) = answer["error"]["message"].as_str() {
                anyhow::bail!("nothing applied: {why}");
            }
            for a in answer["applied"].as_array().into_iter().flatten() {
                println!(
                    "{}/{} {}: {}",
                    a["kind"].as_str().unwrap_or("?"),
                    a["name"].as_str().unwrap_or("?"),
                    a["state"].as_str().unwrap_or("?"),
                    a["effect"].as_str().unwrap_or("")
                );
                for path in a["changed"].as_array().into_iter().flatten() {
                    println!("  changed {}", path.as_str().unwrap_or("?"));
                }
                for note in a["notes"].as_array().into_iter().flatten() {
                    println!("  note: {}", note.as_str().unwrap_or("?"));
                }
            }
            print_reconciled(&answer["reconciled"], false);
            Ok(Outcome::Ok)
        }
        Command::Manifest(cli::ManifestCommand::Crds) => {
            print!("{}", cli::crds::render_all()?);
            Ok(Outcome::Ok)
        }
        Command::Sync(args) => cli::sync::run(args),
        Command::Did(cli::DidCommand::Show { dir }) => {
            let dir = node::dir_or_home(dir)?;
            cli::did::show(&dir)
        }
        Command::Did(cli::DidCommand::Resolve(args)) => cli::did::resolve(&args),
        Command::Wrap(args) => cli::giftwrap::wrap(&args),
        Command::Unwrap(args) => cli::giftwrap::unwrap(&args),
        Command::Peers(args) => cli::peers::peers(&args),
        Command::Shards(args) => cli::peers::shards(&args),
        Command::Ledger(cli::ledger::LedgerCommand::Replay(args)) => cli::ledger::replay(&args),
        Command::Ledger(cli::ledger::LedgerCommand::Show(args)) => cli::ledger::show(&args),
        Command::Grant(cmd) => cli::ledger::grant(&cmd),
        Command::Report(cli::ledger::ReportCommand::List(args)) => cli::ledger::reports(&args),
        Command::Settle(c) => cli::settle::run(&c),
        Command::Wallet(args) => cli::wallet::run(&args),
        Command::Market(args) => cli::route::market(&args),
        Command::Bridge(cmd) => cli::bridge::run(cmd),
        Command::Cluster(cli::cluster::ClusterCommand::Start(args)) => cli::cluster::start(&args),
        Command::Cluster(cli::cluster::ClusterCommand::Status(args)) => cli::cluster::status(&args),
        Command::Cluster(cli::cluster::ClusterCommand::Stop(args)) => cli::cluster::stop(&args),
        Command::Keys(cli::keys::KeysCommand::Rotate(args)) => cli::keys::rotate(&args),
        Command::Keys(cli::keys::KeysCommand::Revoke(args)) => cli::keys::revoke(&args),
        Command::Didcomm(cli::didcomm::DidcommCommand::Pack(args)) => cli::didcomm::pack(&args),
        Command::Didcomm(cli::didcomm::DidcommCommand::Unpack(args)) => cli::didcomm::unpack(&args),
        Command::Watch(args) => cli::watch::run(&args),
        Command::Ctl(cmd) => {
            let (name, dir) = match cmd {
                cli::CtlCommand::Status { dir } => ("status", dir),
                cli::CtlCommand::Config { dir } => ("config", dir),
                cli::CtlCommand::Reload { dir } => ("reload", dir),
            };
            let dir = node::dir_or_home(dir)?;
            let answer = daemon::control::ask(&dir, name)?;
            if name == "reload" {
                if let Some(why) = answer["error"]["message"].as_str() {
                    anyhow::bail!("nothing reloaded: {why}");
                }
                print_reconciled(&answer["reconciled"], true);
            } else {
                println!("{}", serde_json::to_string_pretty(&answer)?);
            }
            Ok(Outcome::Ok)
        }
        Command::Proof(cli::ProofCommand::Verify { vk, proof, public }) => {
            cli::proof::verify_one(&vk, &proof, &public)
        }
        Command::Proof(cli::ProofCommand::BatchVerify {
            vk,
            manifest,
            dirs,
            backend,
        }) => cli::proof::batch(vk.as_deref(), &dirs, manifest.as_deref(), backend),
        Command::Proof(cli::ProofCommand::Prove {
            zkey,
            wtns,
            wasm,
            input,
            proof,
            public,
            backend,
        }) => {
            let witness = match (wtns, wasm, input) {
                (Some(w), _, _) => cli::proof::WitnessSource::Wtns(w),
                (None, Some(wasm), Some(input)) => cli::proof::WitnessSource::Wasm { wasm, input },
                _ => anyhow::bail!("give --wtns W.wtns, or --wasm C.wasm with --input input.json"),
            };
            cli::proof::prove_cmd(&zkey, &witness, &proof, &public, backend)
        }
        Command::Proof(cli::ProofCommand::Setup { r1cs, zkey, vk }) => {
            cli::proof::setup_cmd(&r1cs, &zkey, vk.as_deref())
        }
        Command::Attest(cli::AttestCommand::Verify(a)) => cli::attest::verify(&a),
        Command::Attest(cli::AttestCommand::Binding {
            model_digest,
            prompt_ids,
            output_ids,
            job_id,
        }) => cli::attest::binding(&model_digest, &prompt_ids, &output_ids, &job_id),
        Command::Attest(cli::AttestCommand::Collect {
            report_data,
            nonce,
            gpu,
            out,
        }) => match (report_data, nonce) {
            (Some(data), _) => cli::attest::collect(&data, &out),
            (None, Some(nonce)) => cli::attest::collect_gpu(&nonce, gpu, &out),
            (None, None) => unreachable!("clap requires one"),
        },
        Command::Infer(a) => cli::infer::run(&cli::infer::InferArgs {
            verify: a.verify.parse().map_err(|e: String| anyhow::anyhow!(e))?,
            model: a.model,
            prompt: a.prompt,
            max_tokens: a.max_tokens,
            sampling: fleetmesh_inference::Sampling {
                temperature: a.temperature,
                top_p: a.top_p,
                top_k: a.top_k,
                seed: a.seed,
            },
            executors: a.executor,
            schema: a.schema,
            whitespace: match a.whitespace.as_str() {
                "any" => fleetmesh_inference::schema::Whitespace::Any,
                "none" => fleetmesh_inference::schema::Whitespace::None,
                _ => fleetmesh_inference::schema::Whitespace::Compact,
            },
            remote_model: a.remote_model,
            executor_timeout: std::time::Duration::from_secs(a.executor_timeout.max(1)),
            base_model_digest: a
                .base_model_digest
                .map(|h| crate::models::digest_hex(&h, "--base-model-digest"))
                .transpose()?,
            device: a.device,
        }),
        Command::Wasi(cli::WasiCommand::Run(a)) => cli::wasi::run(&a),
        Command::Job(c) => cli::job::run(c),
        Command::Model(cli::ModelCommand::Quantize {
            dir,
            file_type,
            out,
        }) => {
            let out = out.unwrap_or_else(|| dir.join(format!("model-{}.gguf", file_type.name())));
            fleetmesh_inference::gguf::convert_dir(&dir, file_type, &out)?;
            let base = fleetmesh_inference::model::model_digest(&dir)?;
            let model = fleetmesh_inference::Llama::load_gguf(&out)?;
            println!(
                "{}",
                serde_json::json!({
                    "out": out.display().to_string(),
                    "type": file_type.name(),
                    "model_digest": hex::encode(fleetmesh_inference::model::model_digest(&out)?),
                    "base_model_digest": hex::encode(base),
                    "weight_bytes": model.weight_bytes(),
                })
            );
            Ok(Outcome::Ok)
        }
        Command::Model(cli::ModelCommand::MakeTiny { dir, seed, arch }) => {
            let config = fleetmesh_inference::tiny::tiny_config_for(&arch)?;
            fleetmesh_inference::tiny::make_model(&dir, &config, seed)?;
            let digest = fleetmesh_inference::model::model_digest(&dir)?;
            println!(
                "{}",
                serde_json::json!({
                    "dir": dir.display().to_string(),
                    "seed": seed,
                    "model_digest": hex::encode(digest),
                    "config": config,
                })
            );
            Ok(Outcome::Ok)
        }
    }
}

/// What a reconciliation did, as `meshnode apply` and `meshnode ctl reload` print it
/// (`notes`: also the notes, which `apply` prints under each manifest).
fn print_reconciled(r: &serde_json::Value, notes: bool) {
    let list = |key: &str| -> Vec<String> {
        r[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|k| k.as_str().map(str::to_owned))
            .collect()
    };
    let (live, restart) = (list("live"), list("restart"));
    if live.is_empty() {
        println!("applied live: nothing changed");
    } else {
        println!("applied live: {}", live.join(", "));
    }
    for line in list("said") {
        println!("  {line}");
    }
    if !restart.is_empty() {
        println!("waits for a restart: {}", restart.join(", "));
    }
    if notes {
        for n in r["notes"].as_array().into_iter().flatten() {
            println!(
                "{}: {}",
                n["manifest"].as_str().unwrap_or("?"),
                n["note"].as_str().unwrap_or("?")
            );
        }
    }
}

fn run(
    dir: &Path,
    listen: Option<std::net::SocketAddr>,
    extra_models: &[std::path::PathBuf],
    listening: impl FnOnce(std::net::SocketAddr),
) -> anyhow::Result<Outcome> {
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
    inference.models = http::inference::resolve_models(&node.dir, &inference, extra_models);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("meshnode")
        .build()
        .context("starting the async runtime")?;
    let served = runtime.block_on(serve(node, listen, &inference, extra_models, listening));
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
