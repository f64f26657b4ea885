//! # fleetmesh-prover
//!
//! Groth16 on BN254 for fleetmesh. Today: the snarkjs JSON formats read strictly and
//! written as snarkjs writes them ([`snarkjs`]), single verification with a prepared key,
//! and batch verification by a random linear combination with bisection to name the bad
//! proofs ([`verify`]). The proving pipeline over [`fleetmesh_kernels`]' MSM/NTT backends,
//! the circom `.r1cs`/`.wtns`/`.zkey` readers and witness generation land next.

mod error;
pub mod snarkjs;
#[cfg(feature = "test-utils")]
pub mod testing;
pub mod verify;

pub use error::{Error, Result};
pub use fleetmesh_kernels::BackendChoice;
pub use verify::{PreparedVk, batch_verify, batch_verify_grouped, verify};

/// Re-exported so callers name the curve types from here.
pub use ark_bn254::{Bn254, Fr};
/// Re-exported Groth16 data types.
pub use ark_groth16::{Proof, VerifyingKey};
