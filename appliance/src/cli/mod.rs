//! `meshnode`'s command line: the arguments ([`args`], clap) and a module per command
//! group that is more than a call into the node — [`attest`], [`did`], [`doctor`], [`giftwrap`], [`infer`],
//! [`job`], [`proof`], [`schema`], [`sync`], [`wasi`], [`watch`] — and how a command ended
//! ([`Outcome`]). `main.rs` dispatches to them and runs the daemon.

mod args;
pub mod attest;
pub mod crds;
pub mod did;
pub mod doctor;
pub mod giftwrap;
pub mod infer;
pub mod job;
pub mod progress;
pub mod proof;
pub mod schema;
pub mod sync;
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
