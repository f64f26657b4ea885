//! fleetmesh-prover's integration tests: one binary, one module per area.

use std::path::PathBuf;

use serde_json::Value;

mod circom;
mod fixtures;
mod queue;
mod snarkjs_cli;
mod verify;

/// The circom/snarkjs fixture folder.
pub fn fixture_dir() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/circom")
}

/// A fixture's bytes.
pub fn fixture(name: &str) -> Vec<u8> {
    let p = fixture_dir().join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A fixture's JSON.
pub fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&fixture(name)).unwrap()
}
