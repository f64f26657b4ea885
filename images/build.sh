#!/usr/bin/env bash
# Builds the meshnode OCI image without a container daemon.
#
#   images/build.sh OUT
#
# Writes OUT/oci (an OCI image layout, reference VERSION; `skopeo inspect oci:OUT/oci:VERSION`)
# and OUT/meshnode.tar (the same image as a docker-archive tagged meshnode:VERSION:
# `docker load -i OUT/meshnode.tar` or `podman load -i …`), and prints the manifest digest.
#
# The image: a base layer made from Debian packages (the C libraries meshnode links, the
# Vulkan loader, CA certificates; their copyright files kept), a layer of the CUDA libraries
# the node opens (NVRTC, cuBLAS, cuBLASLt, cuRAND from NVIDIA's wheels, images/cuda.sh, with
# their licences; in /usr/lib/fleetmesh/cuda), then /usr/bin/meshnode from a release build
# with the GPU features (`cuda-inference`: candle's CUDA kernels, built by the same toolkit).
# Only the driver (libcuda.so.1) and the Vulkan ICD come from the host at run time, as the
# NVIDIA container toolkit mounts them (`docker run --gpus all`); without them the node
# proves and infers on the CPU. It runs as user
# meshnode (10001) with its node in the volume /var/lib/meshnode, listens on 0.0.0.0:7777
# (on first start `meshnode up` creates the node there with a generated API token), and
# carries a HEALTHCHECK (`meshnode watch --node … --healthcheck`) and the
# org.opencontainers.image.* labels.
#
# Reproducible: every timestamp is the commit's (SOURCE_DATE_EPOCH), owners are numeric,
# entries sorted, gzip without names or times, so two builds of one commit with the same
# packages give the same manifest digest.
#
# Environment:
#   MESHNODE_BIN     use this meshnode binary instead of building the release one
#                    (CI checks the image with its debug build of `cuda-inference`)
#   DEB_CACHE        where downloaded .deb files are kept [~/.cache/fleetmesh/debs]
#
# Needs: cargo (unless MESHNODE_BIN), apt-get and dpkg-deb (Debian or Ubuntu), python3, git.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
fi
out="$1"

missing=()
for tool in apt-get dpkg-deb python3 git; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ -z "${MESHNODE_BIN:-}" ] && ! command -v cargo >/dev/null; then
    missing+=(cargo)
fi
if ((${#missing[@]})); then
    echo "images/build.sh: missing ${missing[*]}: the image is built from Debian packages with apt-get and dpkg-deb, assembled by python3; install them or build on Debian" >&2
    exit 1
fi

cd "$root"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)"
commit="$(git rev-parse HEAD)"
if ! git diff --quiet HEAD -- 2>/dev/null; then
    commit="$commit-dirty"
fi
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}"
export SOURCE_DATE_EPOCH="$epoch"

step() { printf '[build.sh %4ss] %s\n' "$SECONDS" "$*" >&2; }

if [ -n "${MESHNODE_BIN:-}" ]; then
    bin="$MESHNODE_BIN"
    [ -x "$bin" ] || { echo "images/build.sh: MESHNODE_BIN=$bin is not an executable" >&2; exit 1; }
    step "using $bin"
else
    step "building the release meshnode (wgpu, cuda, cuda-inference) at $commit"
    eval "$("$root/images/cuda.sh" env)"
    FLEETMESH_COMMIT="$commit" cargo build --release --locked -p fleetmesh-appliance \
        --bin meshnode --features cuda-inference
    target="${CARGO_TARGET_DIR:-$root/target}"
    bin="$target/release/meshnode"
fi

# The Debian packages of the base layer: what meshnode links (glibc, libgcc, libstdc++), the
# Vulkan loader wgpu opens, and the CA certificates rustls checks peers against.
packages=(libc6 libgcc-s1 libstdc++6 libvulkan1 ca-certificates)
cache="${DEB_CACHE:-$HOME/.cache/fleetmesh/debs}"
mkdir -p "$cache"
step "fetching ${packages[*]}"
download() { (cd "$cache" && apt-get download -qq "${packages[@]}" 2>/dev/null); }
if ! download; then
    # no package lists yet (a fresh machine): fetch them once, as root, and try again
    if [ "$(id -u)" = 0 ] && apt-get update -qq && download; then
        :
    else
        echo "images/build.sh: apt-get download ${packages[*]} failed (no package lists? run apt-get update)" >&2
        exit 1
    fi
fi
debs=()
for p in "${packages[@]}"; do
    # the candidate version apt would install, as its file is named
    v="$(apt-cache policy "$p" | sed -n 's/^  Candidate: //p')"
    f="$(ls "$cache"/"${p}"_"${v//:/%3a}"_*.deb 2>/dev/null | head -1)"
    [ -n "$f" ] || { echo "images/build.sh: no .deb for $p $v in $cache" >&2; exit 1; }
    debs+=("$f")
done

step "the CUDA libraries (images/cuda.sh)"
cuda_site="$("$root/images/cuda.sh" licences)"
cuda_libs=()
while read -r lib; do cuda_libs+=(--cuda-lib "$lib"); done < <("$root/images/cuda.sh" runtime)

step "assembling the image"
python3 "$root/images/oci.py" --out "$out" --binary "$bin" --version "$version" \
    --commit "$commit" --epoch "$epoch" --cuda "$cuda_site" "${cuda_libs[@]}" \
    --cache "${FLEETMESH_CUDA_CACHE:-$HOME/.cache/fleetmesh/cuda}/layers" "${debs[@]}"
step "done: $out/oci ($version) and $out/meshnode.tar"
