#!/usr/bin/env bash
# The relay bench against rust-nostr 0.45.1's LocalRelay (bench/RESULTS.md, "Relay face").
#
#   bench/relay.sh [fleetmesh-bench relay options]     e.g. --prefill 0,100000,1000000
#
# Makes a Python venv with the PyPI nostr-sdk 0.45.1 bindings under ~/.cache/fleetmesh (the
# baseline relay is their Rust LocalRelay), builds fleetmesh-bench in release mode with
# LocalRelay 0.44.1 on LMDB as a third baseline (minutes cold), then runs
# `fleetmesh-bench relay --baselines 0.45,0.44,lmdb` (options after it override). The
# default prefill stages (0, 100 000 and 1 000 000 events in every relay) take about half an
# hour on two cores and ~4 GB of disk.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/fleetmesh/target}"
venv="$HOME/.cache/fleetmesh/bench-venv"
if ! "$venv/bin/python" -c 'import nostr_sdk' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'nostr-sdk==0.45.1'
fi
ulimit -n 4096 2>/dev/null || true
cargo build --release --locked -p fleetmesh-bench --features lmdb-baseline
FLEETMESH_BENCH_PYTHON="$venv/bin/python" exec "$CARGO_TARGET_DIR/release/fleetmesh-bench" relay --baselines 0.45,0.44,lmdb "$@"
