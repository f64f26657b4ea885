//! # fleetmesh-inference
//!
//! LLM inference for fleetmesh: the candle runtime, OpenAI-compatible request and
//! response types, remote executors, and the verification modes (2-of-3 quorum on greedy
//! decoding, schema bounds, TEE attestation). It lands with the inference issue; the crate
//! exists now so that the workspace's dependency graph has its final shape.
