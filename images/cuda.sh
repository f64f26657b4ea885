#!/usr/bin/env bash
# The CUDA toolkit fleetmesh builds with, from NVIDIA's PyPI wheels (no system install, no
# root): nvcc, NVRTC, the CUDA runtime, cuBLAS and cuRAND of CUDA 13.0 Update 2, pinned by
# version and SHA-256, installed into ~/.cache/fleetmesh/cuda/13.0.2 (kept between runs).
#
#   images/cuda.sh install        download (once) and install; prints the toolkit's root
#   eval "$(images/cuda.sh env)"  CUDA_ROOT, PATH, NVCC, CUDA_COMPUTE_CAP, CUDARC_CUDA_VERSION
#                                 for `cargo build --features cuda-inference` (installs first)
#   images/cuda.sh libs           the folder of the redistributable libraries the node loads
#   images/cuda.sh runtime        those libraries, one path a line: what the images carry
#                                 (NVRTC and its builtins, cuBLAS, cuBLASLt, cuRAND)
#   images/cuda.sh licences       the folder of NVIDIA's licence files, one per wheel
#
# Why CUDA 13.0: the bindings (cudarc's `cuda-13000`) and the toolkit agree, and PTX from
# nvcc 13.0 JIT-compiles on every driver that runs CUDA 13 (R580 and later); PTX from a
# newer nvcc needs a newer driver (CUDA_ERROR_UNSUPPORTED_PTX_VERSION on R580).
#
# Which GPUs: candle's PTX kernels are built for compute capability 8.0 (Ampere, the oldest
# card with the bf16 arithmetic they use); the driver JIT-compiles that PTX on Hopper (9.0)
# and later at the first load (then from its cache, ~/.nv/ComputeCache). candle's statically
# compiled quantized kernels (mmq/mmvq, MoE) are built as sm_90 machine code (H100/H200 run
# them without JIT) with compute_80 PTX beside it (Ampere JIT-compiles it once); sm_80
# machine code is left out: it would cost CI a third more nvcc time for the older cards.
set -euo pipefail

version=13.0.2
cache="${FLEETMESH_CUDA_CACHE:-$HOME/.cache/fleetmesh/cuda}"
root="$cache/$version"
site="$root/site"
cuda="$site/nvidia/cu13"

# name==version sha256 (the manylinux x86_64 wheel of each)
wheels=(
    "nvidia-cuda-nvcc==13.0.88 56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03"
    "nvidia-cuda-crt==13.0.88 2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4"
    "nvidia-nvvm==13.0.88 c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0"
    "nvidia-cuda-cccl==13.0.85 e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649"
    "nvidia-cuda-runtime==13.0.96 7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548"
    "nvidia-cuda-nvrtc==13.0.88 ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575"
    "nvidia-cublas==13.1.0.3 ee8722c1f0145ab246bccb9e452153b5e0515fd094c3678df50b2a0888b8b171"
    "nvidia-curand==10.4.0.35 1aee33a5da6e1db083fe2b90082def8915f30f3248d5896bcec36a579d941bfc"
)

install() {
    if [[ ! -f $root/.complete ]]; then
        fetch
    fi
    local_files
}

# The wheels, once.
fetch() {
    if [[ $(uname -m) != x86_64 ]]; then
        echo "images/cuda.sh: the pinned wheels are for x86_64, not $(uname -m)" >&2
        exit 1
    fi
    echo "images/cuda.sh: installing CUDA $version from PyPI wheels into $root" >&2
    rm -rf "$root"
    mkdir -p "$root/wheels"
    local req="$root/requirements.txt" line
    : >"$req"
    for line in "${wheels[@]}"; do
        echo "${line% *} --hash=sha256:${line#* }" >>"$req"
    done
    # --require-hashes: a wheel whose bytes differ from the pin is refused
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
        --only-binary=:all: \
        -r "$req" -d "$root/wheels"
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --no-index \
        --no-compile --target "$site" "$root"/wheels/*.whl 2>&1 |
        grep -v "Running pip as the 'root' user" >&2 || true
    [[ -x $cuda/bin/nvcc ]] || {
        echo "images/cuda.sh: no nvcc in $cuda/bin after installing the wheels" >&2
        exit 1
    }
    touch "$root/.complete"
}

# What the project adds to the toolkit (rewritten at every call, so a change here takes
# effect without downloading the wheels again).
local_files() {
    # candle's kernels link the CUDA runtime as `-lcudart`: a linker script under that
    # name takes the static runtime (what nvcc links by default), so the binary needs no
    # libcudart.so at start; the runtime opens the driver (libcuda.so.1) when first used.
    echo "INPUT(libcudart_static.a -lrt -lpthread -ldl)" >"$cuda/lib/libcudart.so"
    # The wrapper nvcc: cudaforge (candle's build) passes one -gencode, from
    # CUDA_COMPUTE_CAP. PTX output (--ptx) is left as asked (compute 8.0); object files
    # get sm_90 machine code (Hopper, no JIT at start) and compute_80 PTX (Ampere and
    # newer cards JIT-compile it once) in place of sm_80 machine code.
    cat >"$cuda/bin/nvcc-fleetmesh" <<'EOF'
#!/usr/bin/env bash
here="$(cd "$(dirname "$0")" && pwd)"
ptx=0
for a in "$@"; do
    case $a in --ptx | -ptx) ptx=1 ;; esac
done
if ((ptx == 1)); then
    exec "$here/nvcc" "$@"
fi
args=()
skip=0
for a in "$@"; do
    if ((skip)); then
        skip=0
        continue
    fi
    case $a in
    -gencode | --generate-code | -arch | --gpu-architecture) skip=1 ;;
    -gencode=* | --generate-code=* | -arch=* | --gpu-architecture=*) ;;
    *) args+=("$a") ;;
    esac
done
args+=(-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_80,code=compute_80)
exec "$here/nvcc" "${args[@]}"
EOF
    chmod +x "$cuda/bin/nvcc-fleetmesh"
}

case "${1:-}" in
install)
    install
    echo "$cuda"
    ;;
env)
    install
    cat <<EOF
export CUDA_ROOT='$cuda'
export CUDA_HOME='$cuda'
export NVCC='$cuda/bin/nvcc-fleetmesh'
export PATH='$cuda/bin':"\$PATH"
export CUDA_COMPUTE_CAP=80
export CUDARC_CUDA_VERSION=13000
export CUDAFORGE_THREADS=$(nproc)
export LIBRARY_PATH='$cuda/lib':"\${LIBRARY_PATH:-}"
EOF
    ;;
libs)
    install
    echo "$cuda/lib"
    ;;
runtime)
    install
    # what the node dlopens: candle's device (cuBLAS, cuBLASLt, cuRAND), the prover's
    # kernels (NVRTC, which loads its builtins); the driver, libcuda.so.1, is the host's
    for lib in libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 \
        libnvrtc-builtins.so.13.0; do
        echo "$cuda/lib/$lib"
    done
    ;;
licences)
    install
    echo "$site"
    ;;
*)
    echo "usage: images/cuda.sh install | env | libs | runtime | licences" >&2
    exit 2
    ;;
esac
