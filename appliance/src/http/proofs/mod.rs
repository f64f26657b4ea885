//! The proof face: `POST /v1/proofs/prove` ([`prove`], the node's proving queue) and
//! `POST /v1/proofs/verify` ([`verify`], its batch-verify gatherer), both
//! `fleetmesh-prover`'s, which the job engines share.

pub mod prove;
pub mod verify;
