#!/usr/bin/env bash
# Our inference runtime against llama.cpp on the same GGUF files (bench/RESULTS.md,
# "Quantized inference against llama.cpp").
#
#   bench/llm.sh [ROUNDS]
#
# Makes a Python venv with PyPI llama-cpp-python 0.3.36 under ~/.cache/fleetmesh (it builds
# llama.cpp from source for this CPU: ~10 minutes on two cores, once), builds fleetmesh-bench
# in release mode, then runs `fleetmesh-bench llm-gguf ROUNDS`: the generated 88M model at
# F32, Q8_0 and Q4_K_M, prefill and decode tokens/s on both sides, ids compared.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/fleetmesh/target}"
venv="$HOME/.cache/fleetmesh/llama-venv"
if ! "$venv/bin/python" -c 'import llama_cpp' 2>/dev/null; then
    python3 -m venv "$venv"
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" \
        "$venv/bin/pip" install --quiet 'llama-cpp-python==0.3.36'
fi
cargo build --release --locked -p fleetmesh-bench
FLEETMESH_LLAMA_CPP_PYTHON="$venv/bin/python" exec "$CARGO_TARGET_DIR/release/fleetmesh-bench" llm-gguf "$@"
