//! `meshnode`'s command line: the arguments ([`args`], clap), a module per command group —
//! [`attest`], [`cluster`], [`ctl`], [`did`], [`didcomm`], [`doctor`], [`giftwrap`],
//! [`infer`], [`init`], [`job`], [`keys`], [`ledger`], [`model`], [`proof`], [`schema`],
//! [`sync`], [`wasi`], [`watch`], … — [`dispatch`] to them, and how a command ended
//! ([`Outcome`]). Running the node is `main.rs`'s: `run` and `up` hand it a [`NodeRun`].

mod args;
pub mod attest;
pub mod bridge;
pub mod bykey;
pub mod cluster;
mod command;
pub mod crds;
pub mod ctl;
pub mod did;
pub mod didcomm;
pub mod doctor;
pub mod giftwrap;
pub mod infer;
pub mod init;
mod io;
pub mod job;
mod job_node;
pub mod keys;
pub mod l402;
pub mod ledger;
pub mod model;
pub mod nutzap;
pub mod nwc;
pub mod peers;
pub mod progress;
pub mod proof;
mod proof_args;
mod provider_args;
pub mod route;
pub mod schema;
pub mod settle;
mod submit;
pub mod sync;
pub mod wallet;
pub mod wasi;
pub mod watch;

pub use args::*;
pub use command::{Cli, Command};
pub(crate) use io::{Outcome, read_ca, read_input};

/// A node to run, as `meshnode run` and `meshnode up` ask: its directory, the address to
/// listen on instead of `[face] listen`, models served besides `[inference] models`, and
/// what to do once it listens.
pub(crate) struct NodeRun {
    pub dir: std::path::PathBuf,
    pub listen: Option<std::net::SocketAddr>,
    pub models: Vec<std::path::PathBuf>,
    pub listening: Box<dyn FnOnce(std::net::SocketAddr)>,
}

/// Runs `command`; `run_node` runs the node for `run` and `up`.
pub(crate) fn dispatch(
    command: Command,
    run_node: impl FnOnce(NodeRun) -> anyhow::Result<Outcome>,
) -> anyhow::Result<Outcome> {
    use Command as C;
    match command {
        C::Init(args) => init::init(&args),
        C::Run(args) => run_node(NodeRun {
            dir: args.dir,
            listen: args.listen,
            models: args.model,
            listening: Box::new(|_| {}),
        }),
        C::Up(args) => run_node(init::up(args)?),
        C::Doctor(args) => doctor::run(&args),
        C::Schema(cmd) => schema::run(cmd),
        C::Apply(args) => ctl::apply(args),
        C::Ctl(cmd) => ctl::ctl(cmd),
        C::Manifest(ManifestCommand::Crds) => {
            print!("{}", crds::render_all()?);
            Ok(Outcome::Ok)
        }
        C::Sync(args) => sync::run(args),
        C::Did(DidCommand::Show { dir }) => did::show(&crate::node::dir_or_home(dir)?),
        C::Did(DidCommand::Resolve(args)) => did::resolve(&args),
        C::Wrap(args) => giftwrap::wrap(&args),
        C::Unwrap(args) => giftwrap::unwrap(&args),
        C::Peers(args) => peers::peers(&args),
        C::Shards(args) => peers::shards(&args),
        C::Ledger(ledger::LedgerCommand::Replay(args)) => ledger::replay(&args),
        C::Ledger(ledger::LedgerCommand::Show(args)) => ledger::show(&args),
        C::Grant(cmd) => ledger::grant(&cmd),
        C::Report(ledger::ReportCommand::List(args)) => ledger::reports(&args),
        C::Settle(c) => settle::run(&c),
        C::Wallet(args) => wallet::run(&args),
        C::Market(args) => route::market(&args),
        C::Bridge(cmd) => bridge::run(cmd),
        C::Cluster(cluster::ClusterCommand::Start(args)) => cluster::start(&args),
        C::Cluster(cluster::ClusterCommand::Status(args)) => cluster::status(&args),
        C::Cluster(cluster::ClusterCommand::Stop(args)) => cluster::stop(&args),
        C::Keys(keys::KeysCommand::Rotate(args)) => keys::rotate(&args),
        C::Keys(keys::KeysCommand::Revoke(args)) => keys::revoke(&args),
        C::Didcomm(didcomm::DidcommCommand::Pack(args)) => didcomm::pack(&args),
        C::Didcomm(didcomm::DidcommCommand::Unpack(args)) => didcomm::unpack(&args),
        C::Watch(args) => watch::run(&args),
        C::Proof(cmd) => proof::run(cmd),
        C::Attest(cmd) => attest::run(cmd),
        C::Infer(a) => infer::run(&infer::InferArgs::from_flags(a)?),
        C::Wasi(WasiCommand::Run(a)) => wasi::run(&a),
        C::Job(c) => job::run(c),
        C::Model(cmd) => model::run(cmd),
    }
}
