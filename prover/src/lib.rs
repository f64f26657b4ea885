//! # fleetmesh-prover
//!
//! Groth16 on BN254 for fleetmesh: proving over the MSM/NTT backends of
//! [`fleetmesh_kernels`], single and batch verification, and the circom/snarkjs formats.
//! The pipeline lands with the Groth16 issue; what exists today is the backend choice it
//! will take, re-exported so callers name it from here.

pub use fleetmesh_kernels::BackendChoice;
