#!/usr/bin/env bash
# The GPU check and benchmark for a machine with an NVIDIA GPU, in one run. Measurements
# first, the GPU tests last (on an H200: sections 1–3 ~280 s at MAX_LOG=20; the tests took
# 530 s, most of it NVIDIA's Vulkan driver compiling the wgpu G2 MSM kernels, 127 s a time;
# SKIP_TESTS=1 leaves them out when device time is short):
#   1. G1 MSM, G2 MSM and NTT at 2^14 … 2^MAX_LOG on cpu, wgpu and cuda:0, each result checked
#      against arkworks before it is timed against it (`fleetmesh-bench kernels`), each GPU
#      call's phases (wgpu's host plan, upload, kernels — CUDA's plan is among them —,
#      download, combine) and NVRTC's compile logged as gpu.phase;
#   2. a full Groth16 proof on each backend, equal to the CPU's proof and verified, timed
#      against our CPU backend, then with the key's bases kept on the GPU against uploading
#      them and against the CPU with its tables (`fleetmesh-bench prove-backends`);
#   3. batch proving on each backend, proofs/s at batches of 1, 4 and 16
#      (`fleetmesh-bench prove-batch`);
#   4. batch verification on each GPU backend against the CPU batch verifier
#      (`fleetmesh-bench groth16-verify N --backend …`);
#   5. every GPU backend against the CPU, bit for bit: the kernels' GPU tests
#      (kernels/tests/gpu.rs) with CUDA required (FLEETMESH_REQUIRE_CUDA=1) and wgpu on
#      whatever Vulkan adapter is there, each test's time per backend printed;
#   6. LLM inference on cuda:0 (`fleetmesh-bench llm-gpu`, run first by default): greedy ids
#      equal to the CPU's for the tiny model and a random-weight Llama-3.2-1B-shape model
#      (F32, 16 prompts × 64 tokens), then decode tokens/s at batch 1, 8, 32 and the time to
#      first token of a 512-token prompt in F32, BF16 and Q4_K_M. Needs cuBLAS, cuBLASLt and
#      cuRAND on the machine (a CUDA toolkit's lib64 or NVIDIA's pip wheels; they are too
#      large for the bundle).
# It prints one table; with $OUT set, the log is also written to $OUT/gpu-bench.log.
#
# Usage:
#   bench/gpu/run.sh             build (when cargo is here) and run
#   bench/gpu/run.sh --prepare   pack .gpu-bin/bundle.tgz (gitignored, ~44 MB) for a GPU
#                                machine without a Rust toolchain: the stripped bench and
#                                GPU-test binaries, the Vulkan loader's .deb and a 2^16
#                                chain circuit (needs npm); carry .gpu-bin there and run
#                                bench/gpu/run.sh
# Environment: MAX_LOG (default 20), PROVE_K (default 16 when prepared, else 14), ROUNDS (3),
# VERIFY_N (batch sizes to verify, default "256 4096"), SKIP_TESTS (1: no section 5),
# SECTIONS (which sections, in that order, default "6 1 2 3 4 5"; with 15 minutes of device
# time "6 1 2" fits), BACKENDS (the backends of
# sections 1–4, default every one in 1 and "cuda:0 wgpu" in 2–4; wgpu's first G2 MSM costs
# NVIDIA's driver 127 s), MIN_LOG (section 1's smallest size, default 14), GPU_TESTS (cuda
# or wgpu: section 5 tests only that backend),
# FLEETMESH_REQUIRE_CUDA (default 1; 0 lets a machine without CUDA rehearse the script).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=.gpu-bin
MAX_LOG=${MAX_LOG:-20}
ROUNDS=${ROUNDS:-3}

if [[ ${1:-} == --prepare ]]; then
    stage=$(mktemp -d)
    # candle's CUDA kernels need nvcc: the pinned toolkit from PyPI wheels (images/cuda.sh)
    eval "$(images/cuda.sh env)"
    cargo build --release --locked -p fleetmesh-bench --features cuda-inference
    strip -o "$stage/fleetmesh-bench" "${CARGO_TARGET_DIR:-target}/release/fleetmesh-bench"
    # the GPU test binary, release build (the CPU reference is arkworks: fast enough)
    exe=$(cargo test --release --locked -p fleetmesh-kernels --features wgpu,cuda --test gpu \
        --no-run --message-format=json 2>/dev/null |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
    strip -o "$stage/gpu-tests" "$exe"
    if command -v apt-get >/dev/null; then
        # the Vulkan loader, and glvnd's libraries that NVIDIA's Vulkan driver links to
        # (with the loader alone, wgpu found no adapter on an H200)
        (cd "$stage" && apt-get download libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libopengl0 \
            libgles2 >/dev/null 2>&1) ||
            echo "run.sh: could not download the Vulkan loader (wgpu may find no Vulkan there)" >&2
    fi
    if command -v npm >/dev/null; then
        prover/tests/fixtures/circom/gen.sh chain 16 "$stage/chain16"
    fi
    mkdir -p "$BIN"
    tar czf "$BIN/bundle.tgz" -C "$stage" .
    rm -rf "$stage"
    du -sh "$BIN/bundle.tgz"
    exit 0
fi

log() { printf '%s\n' "$*" >&2; }
if command -v cargo >/dev/null; then
    log "run.sh: building (release, features wgpu+cuda+cuda-inference)"
    eval "$(images/cuda.sh env)"
    cargo build --release --locked -p fleetmesh-bench --features cuda-inference
    BENCH=${CARGO_TARGET_DIR:-target}/release/fleetmesh-bench
    TESTS=(cargo test --release --locked -p fleetmesh-kernels --features wgpu,cuda --test gpu --)
else
    [[ -f $BIN/bundle.tgz ]] || {
        log "run.sh: no cargo here and no $BIN/bundle.tgz (run bench/gpu/run.sh --prepare where cargo is)"
        exit 2
    }
    BIN=/tmp/fleetmesh-gpu
    rm -rf "$BIN" && mkdir -p "$BIN" && tar xzf .gpu-bin/bundle.tgz -C "$BIN"
    BENCH=$BIN/fleetmesh-bench
    TESTS=("$BIN/gpu-tests")
fi

# The Vulkan loader and glvnd, when the machine lacks them (its NVIDIA ICD is usually
# there): unpacked into / on a bare machine where we are root (as on the device), else
# into a private folder.
if ! ldconfig -p | grep -q libvulkan.so.1 && compgen -G "$BIN/libvulkan1_*.deb" >/dev/null; then
    if [[ $(id -u) == 0 && -z ${CI:-} ]]; then
        for deb in "$BIN"/*.deb; do dpkg -x "$deb" /; done
        ldconfig
    else
        mkdir -p /tmp/fleetmesh-vk
        for deb in "$BIN"/*.deb; do dpkg -x "$deb" /tmp/fleetmesh-vk; done
        export LD_LIBRARY_PATH=/tmp/fleetmesh-vk/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    fi
fi
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
    if [[ -f $icd && -z ${VK_DRIVER_FILES:-} ]]; then export VK_DRIVER_FILES=$icd; fi
done
# NVRTC, cuBLAS, cuBLASLt, cuRAND: the toolkit's lib64, or pip wheels' copies.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d $d ]] && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
done
if command -v python3 >/dev/null; then
    nv=$(python3 - <<'EOF' 2>/dev/null || true
import glob, os, site
dirs = []
for s in site.getsitepackages() + [site.getusersitepackages()]:
    for lib in ("libnvrtc.so*", "libcublas.so*", "libcublasLt.so*", "libcurand.so*"):
        for f in glob.glob(os.path.join(s, "nvidia", "**", lib), recursive=True):
            d = os.path.dirname(f)
            if d not in dirs:
                dirs.append(d)
print(":".join(dirs))
EOF
)
    [[ -n $nv ]] && export LD_LIBRARY_PATH=$nv:${LD_LIBRARY_PATH:-}
fi
for lib in libnvrtc.so libcublas.so libcublasLt.so libcurand.so; do
    found=$(ldconfig -p | grep -o "/[^ ]*$lib[^ ]*" | head -1)
    for d in ${LD_LIBRARY_PATH//:/ }; do
        [[ -z $found ]] && found=$(ls "$d/$lib"* 2>/dev/null | head -1)
    done
    log "run.sh: $lib: ${found:-not found}"
done
[[ -z ${PROVE_K:-} && -f $BIN/chain16/chain.r1cs ]] && PROVE_K=16
PROVE_K=${PROVE_K:-14}
export FLEETMESH_CHAIN_DIR=$BIN

if [[ -n ${OUT:-} ]]; then exec > >(tee "$OUT/gpu-bench.log") 2>&1; fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

failed=0
backend_args=()
for b in ${BACKENDS:-cuda:0 wgpu}; do backend_args+=(--backend "$b"); done
section() {
    SECONDS=0
    case $1 in
    1)
        echo "== 1. G1 and G2 MSM and NTT, 2^14 … 2^$MAX_LOG, checked then timed against arkworks"
        # with each GPU call's phases (plan, upload, kernels, download, combine) and NVRTC's
        # compile (op=compile, nvrtc_ms) as gpu.phase
        FLEETMESH_BENCH_LOG=gpu.phase=debug "$BENCH" kernels --min-log "${MIN_LOG:-14}" \
            --max-log "$MAX_LOG" --rounds "$ROUNDS" ${BACKENDS:+"${backend_args[@]}"}
        ;;
    2)
        echo "== 2. a full proof, 2^$PROVE_K domain, on each backend against our CPU backend"
        "$BENCH" prove-backends "$PROVE_K" "$ROUNDS" "${backend_args[@]}"
        ;;
    3)
        echo "== 3. batch proving, 2^$PROVE_K domain, batches of 1, 4, 16 against one by one"
        "$BENCH" prove-batch "$PROVE_K" 1 "${backend_args[@]}"
        ;;
    4)
        echo "== 4. batch verification on each GPU backend against the CPU batch verifier"
        local rc=0
        for n in ${VERIFY_N:-256 4096}; do
            FLEETMESH_BENCH_LOG=gpu.phase=debug "$BENCH" groth16-verify "$n" "${backend_args[@]}" ||
                rc=1
        done
        return "$rc"
        ;;
    6)
        echo "== 6. LLM inference on cuda:0 against the CPU, then tokens/s (llm-gpu)"
        "$BENCH" llm-gpu --device cuda:0
        ;;
    5)
        [[ ${SKIP_TESTS:-0} == 1 ]] && return 0
        echo "== 5. GPU backends against the CPU (kernels/tests/gpu.rs)"
        # GPU_TESTS=cuda leaves wgpu out (NVIDIA's Vulkan driver compiles its G2 kernels in
        # minutes)
        FLEETMESH_REQUIRE_CUDA=${FLEETMESH_REQUIRE_CUDA:-1} FLEETMESH_GPU_TESTS=${GPU_TESTS:-} \
            "${TESTS[@]}" --test-threads 1 --nocapture
        ;;
    esac
}
for s in ${SECTIONS:-6 1 2 3 4 5}; do
    section "$s" || { echo "section $s FAILED"; failed=1; }
    echo "(section $s: ${SECONDS}s)"
done
exit "$failed"
