//! `meshnode`'s command line: the arguments ([`args`], clap) and a module per command
//! group that is more than a call into the node — [`attest`], [`cluster`], [`did`], [`didcomm`], [`doctor`], [`giftwrap`], [`infer`],
//! [`job`], [`keys`], [`ledger`], [`proof`], [`schema`], [`sync`], [`wasi`], [`watch`] — and how a command ended
//! ([`Outcome`]). `main.rs` dispatches to them and runs the daemon.

mod args;
pub mod attest;
pub mod bridge;
pub mod bykey;
pub mod cluster;
pub mod crds;
pub mod did;
pub mod didcomm;
pub mod doctor;
pub mod giftwrap;
pub mod infer;
pub mod init;
pub mod job;
mod job_node;
pub mod keys;
pub mod l402;
pub mod ledger;
pub mod nutzap;
pub mod nwc;
pub mod peers;
pub mod progress;
pub mod proof;
mod proof_args;
pub mod route;
pub mod schema;
pub mod settle;
pub mod sync;
pub mod wallet;
pub mod wasi;
pub mod watch;

pub use args::*;

/// How a command ended, when it did not fail.
pub(crate) enum Outcome {
    Ok,
    /// A negative verdict (exit 1), already reported.
    Negative,
    /// Malformed input (exit 2), already reported in the command's own format.
    Malformed,
    /// Not finished yet (exit 3), already reported.
    Pending,
    /// Something checked is failing or does not answer (exit 2), already reported.
    Failing,
}

/// The PEM file named by a `--ca FILE` flag, read whole; `None` without the flag.
pub(crate) fn read_ca(path: Option<&std::path::Path>) -> anyhow::Result<Option<Vec<u8>>> {
    use anyhow::Context as _;
    path.map(|p| std::fs::read(p).with_context(|| format!("--ca {}", p.display())))
        .transpose()
}

/// Reads a file (`-`: standard input) of at most `max` bytes; `what` names it in errors.
pub(crate) fn read_input(path: &std::path::Path, max: u64, what: &str) -> anyhow::Result<String> {
    use anyhow::Context as _;
    use std::io::Read as _;
    let source: Box<dyn std::io::Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?)
    };
    let mut text = String::new();
    source
        .take(max + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(
        text.len() as u64 <= max,
        "{}: over {max} bytes, more than {what} this command reads",
        path.display()
    );
    Ok(text)
}
