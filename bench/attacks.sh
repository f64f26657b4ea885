#!/usr/bin/env bash
# Replays the hardening issues' attacks (1–6, then 7–11 of the next round: hostile
# patterns, DIDComm bodies, a mediator flood, anonymous job reads, a torn evidence log)
# against a release build of meshnode and prints the node's memory (VmRSS) and what became
# of each attack, beside the bound each must stay under (bench/RESULTS.md, "The node under
# attack").
#
#   bench/attacks.sh
#
# Builds meshnode and fleetmesh-bench in release mode (several minutes cold), then runs
# `fleetmesh-bench attacks`. Takes about four minutes (the slowloris round waits 65 s).
# Traffic goes to 127.0.0.1 only. Needs `ulimit -n` of at least 2048 (raised here if it can).
set -euo pipefail
cd "$(dirname "$0")/.."
ulimit -n 4096 2>/dev/null || true
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/fleetmesh/target}"
cargo build --release --locked -p fleetmesh-appliance -p fleetmesh-bench
exec "$CARGO_TARGET_DIR/release/fleetmesh-bench" attacks --meshnode "$CARGO_TARGET_DIR/release/meshnode"
