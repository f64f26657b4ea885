//! The libFuzzer runner (feature `libfuzzer`; built by `bench/fuzz.sh` with coverage
//! instrumentation): one binary for every target, which `FLEETMESH_FUZZ_TARGET` names.
//!
//! ```text
//! FLEETMESH_FUZZ_TARGET=relay_event fuzz bench/fuzz/corpus/relay_event -max_total_time=60
//! ```
//!
//! One binary rather than one per target: the instrumented build links once.

#![no_main]

use std::sync::OnceLock;

fn target() -> fleetmesh_fuzz::Harness {
    static TARGET: OnceLock<fleetmesh_fuzz::Harness> = OnceLock::new();
    *TARGET.get_or_init(|| {
        // libfuzzer-sys aborts on every panic, even one the code under test catches and
        // turns into an error (the node does so around third-party parsers that panic on
        // bad input). Back to the default hook: a panic that escapes the harness still
        // aborts (libfuzzer-sys catches it and aborts), with its message printed.
        drop(std::panic::take_hook());
        let name = std::env::var("FLEETMESH_FUZZ_TARGET").unwrap_or_default();
        fleetmesh_fuzz::harness(&name).unwrap_or_else(|| {
            let names: Vec<&str> = fleetmesh_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
            eprintln!(
                "FLEETMESH_FUZZ_TARGET={name:?} names no target; one of: {}",
                names.join(" ")
            );
            std::process::exit(2)
        })
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| target()(data));
