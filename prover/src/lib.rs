//! # fleetmesh-prover
//!
//! Groth16 on BN254 for fleetmesh, speaking circom's and snarkjs's formats.
//!
//! - Formats: [`r1cs`] (circom constraint systems), [`wtns`] (witnesses), [`zkey`]
//!   (snarkjs proving keys), [`snarkjs`] (the JSON verifying key, proof and public
//!   signals). Every reader is strict: canonical field elements, points on the curve and
//!   in the subgroup, exact counts; each rejection names the field and the reason.
//! - `witness` (feature `witness`): computes a witness from a circom witness `.wasm` and
//!   an `input.json` inside wasmtime.
//! - [`setup`]: a development-only circuit-specific setup that writes a snarkjs `.zkey`.
//! - [`mod@prove`]: the prover pipeline (witness → NTT → MSMs) over a
//!   [`fleetmesh_kernels::MsmNtt`] backend, using the circom reduction ([`qap`]) so its
//!   proofs verify under snarkjs.
//! - [`tables`]: a proving key's precomputed MSM tables (memory for speed, bounded).
//! - [`mod@verify`]: single verification with a prepared key, and batch verification by a
//!   random linear combination with bisection to name the bad proofs.
//! - `queue` and `gather` (feature `service`): what a node runs for others — the proving
//!   queue (circuits installed in a folder, bounded admission, one proof at a time, for the
//!   HTTP API and jobs alike) and the batch-verify gatherer (a 2 ms window, grouped per
//!   key, prepared keys cached).

mod binfile;
mod error;
#[cfg(feature = "service")]
pub mod gather;
mod pairs;
pub mod prove;
pub mod qap;
#[cfg(feature = "service")]
pub mod queue;
pub mod r1cs;
pub mod setup;
pub mod snarkjs;
pub mod tables;
#[cfg(feature = "test-utils")]
pub mod testing;
pub mod verify;
mod weights;
#[cfg(feature = "witness")]
pub mod witness;
pub mod wtns;
pub mod zkey;

pub use error::{Error, Result};
pub use fleetmesh_kernels::{BackendChoice, MsmNtt, NttDirection};
pub use prove::{Proven, prove};
pub use r1cs::R1cs;
pub use tables::KeyTables;
pub use verify::{
    PreparedVk, batch_verify, batch_verify_grouped, batch_verify_grouped_on, batch_verify_on,
    verify,
};
pub use zkey::ProvingKey;

/// Re-exported so callers name the curve types from here.
pub use ark_bn254::{Bn254, Fr};
/// Re-exported Groth16 data types.
pub use ark_groth16::{Proof, VerifyingKey};
