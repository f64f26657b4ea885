#!/usr/bin/env bash
# Checks what images/ builds, with independent tools (run by .ci/test after the tests):
#
#   images/check.sh MESHNODE
#
# MESHNODE is a build with the `cuda-inference` feature (the image's own binary is), so
# that doctor can say where the image's CUDA libraries load from.
#
# - the OCI image, built twice from MESHNODE (stripped) by images/build.sh: the same
#   manifest digest both times; `skopeo inspect` reads the layout and the docker-archive;
#   `umoci unpack` unpacks it; the unpacked meshnode runs `--version` on the image's own
#   libc; the CUDA libraries are in /usr/lib/fleetmesh/cuda with NVIDIA's licences, each
#   resolves every library it needs in the image (the image's loader, `--list`), and the
#   unpacked `meshnode doctor --json` loads them from there; as root, the image's entrypoint
#   is started in the unpacked root as its user and the image's HEALTHCHECK passes;
# - the Caddyfile, with `caddy validate`; the systemd units, with `systemd-analyze verify`.
#
# Needs skopeo, umoci, caddy and systemd (`.ci/test` installs them).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -ne 1 ]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
fi
bin="$(realpath "$1")"
for tool in skopeo umoci caddy systemd-analyze python3; do
    command -v "$tool" >/dev/null || { echo "images/check.sh: $tool is missing" >&2; exit 1; }
done
step() { printf '[check.sh %4ss] %s\n' "$SECONDS" "$*" >&2; }
fail() { echo "images/check.sh: $*" >&2; exit 1; }

work="$(mktemp -d)"
daemon=""
cleanup() {
    if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

strip -o "$work/meshnode" "$bin"
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$root/Cargo.toml")"

step "building the image twice"
one="$(MESHNODE_BIN="$work/meshnode" "$root/images/build.sh" "$work/one" | tail -1)"
two="$(MESHNODE_BIN="$work/meshnode" "$root/images/build.sh" "$work/two" | tail -1)"
[ "$one" = "$two" ] || fail "two builds gave different manifests: $one and $two"
cmp -s "$work/one/meshnode.tar" "$work/two/meshnode.tar" || fail "two builds gave different docker-archives"

step "skopeo inspect"
inspected="$(skopeo inspect "oci:$work/one/oci:$version")"
digest="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["Digest"])' <<<"$inspected")"
[ "$digest" = "$one" ] || fail "skopeo sees manifest $digest, build.sh said $one"
# (the JSON goes in a file: a here-string after the script's here-document would replace it
# as python's stdin, and python would run the JSON as its script)
printf '%s' "$inspected" >"$work/inspected.json"
python3 - "$work/inspected.json" "$version" <<'EOF' || fail "skopeo inspect: $inspected"
import json, sys
i = json.load(open(sys.argv[1]))
labels = i["Labels"]
for k in ("title", "version", "revision", "created", "source", "licenses"):
    assert labels.get("org.opencontainers.image." + k), f"label org.opencontainers.image.{k} missing: {labels}"
assert labels["org.opencontainers.image.version"] == sys.argv[2], labels
assert len(i["Layers"]) == 3, i["Layers"]
EOF
skopeo inspect "docker-archive:$work/one/meshnode.tar" >/dev/null
config="$(skopeo inspect --raw --config "oci:$work/one/oci:$version")"
python3 -c '
import json, sys
c = json.loads(sys.argv[1])["config"]
assert c["User"] == "10001:10001", c["User"]
assert c["ExposedPorts"] == {"7777/tcp": {}}, c["ExposedPorts"]
assert c["Volumes"] == {"/var/lib/meshnode": {}}, c["Volumes"]
assert c["Entrypoint"][:3] == ["/usr/bin/meshnode", "up", "/var/lib/meshnode"], c["Entrypoint"]
assert c["Healthcheck"]["Test"][0] == "CMD", c["Healthcheck"]
assert "LD_LIBRARY_PATH=/usr/lib/fleetmesh/cuda" in c["Env"], c["Env"]
assert "NVIDIA_VISIBLE_DEVICES=all" in c["Env"], c["Env"]
' "$config"

step "umoci unpack"
if [ "$(id -u)" = 0 ]; then
    umoci unpack --image "$work/one/oci:$version" "$work/bundle" >/dev/null
else
    umoci unpack --rootless --image "$work/one/oci:$version" "$work/bundle" >/dev/null
fi
rootfs="$work/bundle/rootfs"
v="$("$rootfs/lib64/ld-linux-x86-64.so.2" --library-path \
    "$rootfs/lib/x86_64-linux-gnu:$rootfs/usr/lib/x86_64-linux-gnu" \
    "$rootfs/usr/bin/meshnode" --version)"
[ "$v" = "meshnode $version" ] || fail "the unpacked meshnode says '$v'"
[ "$(stat -c %a "$rootfs/var/lib/meshnode")" = 700 ] || fail "/var/lib/meshnode is not 0700"

step "the CUDA libraries in the image"
cuda="$rootfs/usr/lib/fleetmesh/cuda"
libpath="$cuda:$rootfs/lib/x86_64-linux-gnu:$rootfs/usr/lib/x86_64-linux-gnu"
for lib in $("$root/images/cuda.sh" runtime | xargs -n1 basename); do
    [ -f "$cuda/$lib" ] || fail "no $lib in /usr/lib/fleetmesh/cuda"
    deps="$("$rootfs/lib64/ld-linux-x86-64.so.2" --library-path "$libpath" --list "$cuda/$lib" 2>&1)" ||
        fail "$lib does not load in the image: $deps"
    if grep -q "not found" <<<"$deps"; then fail "$lib needs a library the image lacks: $deps"; fi
done
for wheel in nvidia_cublas nvidia_curand nvidia_cuda_nvrtc; do
    compgen -G "$rootfs/usr/share/doc/fleetmesh-cuda/$wheel-*/License.txt" >/dev/null ||
        fail "no NVIDIA licence for $wheel in /usr/share/doc/fleetmesh-cuda"
done
# meshnode needs none of them to start: only the driver is left for the host
if "$rootfs/lib64/ld-linux-x86-64.so.2" --library-path "$libpath" --list "$rootfs/usr/bin/meshnode" |
    grep -E "libcuda|libcublas|libcurand|libnvrtc|libcudart"; then
    fail "meshnode links a CUDA library at start (it must open them when used)"
fi
LD_LIBRARY_PATH="$cuda" "$rootfs/lib64/ld-linux-x86-64.so.2" --library-path "$libpath" \
    "$rootfs/usr/bin/meshnode" doctor --json >"$work/doctor.json" || fail "doctor failed in the image"
python3 - "$cuda" "$work/doctor.json" <<'EOF' || fail "doctor in the image: $(cat "$work/doctor.json")"
import json, sys
r = json.load(open(sys.argv[2]))
assert "cuda-inference" in r["features"], r["features"]
libs = r["inference"]["cuda_libraries"]
for name, file in (("cublas", "libcublas.so.13"), ("cublaslt", "libcublasLt.so.13"),
                   ("curand", "libcurand.so.10"), ("nvrtc", "libnvrtc.so.13")):
    assert libs.get(name) == sys.argv[1] + "/" + file, (name, libs)
# no driver here: inference runs on the CPU and says why
if libs.get("driver") is None:
    assert r["inference"]["device"] == "cpu", r["inference"]
    assert "libcuda.so.1" in r["inference"]["reason"], r["inference"]
EOF

if [ "$(id -u)" = 0 ]; then
    step "the entrypoint in the unpacked root, as its user; then the HEALTHCHECK"
    [ "$(stat -c %u "$rootfs/var/lib/meshnode")" = 10001 ] || fail "/var/lib/meshnode is not the node user's"
    mapfile -t entry < <(python3 -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])["config"]["Entrypoint"]))' "$config")
    mapfile -t probe < <(python3 -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])["config"]["Healthcheck"]["Test"][1:]))' "$config")
    chroot --userspec=10001:10001 "$rootfs" "${entry[@]}" >"$work/daemon.out" 2>"$work/daemon.err" &
    daemon=$!
    for _ in $(seq 100); do
        grep -q "listening on" "$work/daemon.out" 2>/dev/null && break
        kill -0 "$daemon" 2>/dev/null || fail "the entrypoint exited: $(cat "$work/daemon.err")"
        sleep 0.2
    done
    grep -q "meshnode listening on http://0.0.0.0:7777" "$work/daemon.out" ||
        fail "the entrypoint does not listen on 0.0.0.0:7777: $(cat "$work/daemon.out" "$work/daemon.err")"
    grep -q "token" "$work/daemon.err" || fail "no API token was generated: $(cat "$work/daemon.err")"
    chroot --userspec=10001:10001 "$rootfs" "${probe[@]}" >"$work/probe.out" ||
        fail "the HEALTHCHECK failed: $(cat "$work/probe.out")"
    kill -TERM "$daemon"
    wait "$daemon" || fail "the node did not stop cleanly on SIGTERM: $(cat "$work/daemon.err")"
    daemon=""
    [ "$(stat -c %a "$rootfs/var/lib/meshnode/meshnode.toml")" = 600 ] || fail "the node's config (with its token) is not 0600"
    # the token printed once on the first start is the one the config keeps
    token=$(sed -n 's/^token = "\(.*\)"$/\1/p' "$rootfs/var/lib/meshnode/meshnode.toml")
    [ -n "$token" ] && grep -q "$token" "$work/daemon.err" ||
        fail "the first start did not print the [api] token it wrote: $(cat "$work/daemon.err")"
else
    step "not root: the entrypoint run in the unpacked root is skipped (it needs chroot)"
fi

step "caddy validate"
caddy validate --adapter caddyfile --config "$root/images/disk/Caddyfile" >/dev/null 2>"$work/caddy.err" ||
    fail "caddy validate: $(cat "$work/caddy.err")"
step "systemd-analyze verify"
units="$work/units"
mkdir -p "$units"
cp "$root/images/systemd/"*.service "$root/images/disk/"*.service "$units/"
# the units name /usr/bin/meshnode and caddy: point them at what exists here
sed -i "s#/usr/bin/meshnode#$bin#g" "$units/"*.service
systemd-analyze verify --man=no "$units/"*.service 2>"$work/units.err" || {
    cat "$work/units.err" >&2
    fail "systemd-analyze verify found problems in the units"
}
if grep -v "Failed to connect to bus\|not running under systemd" "$work/units.err" | grep -q .; then
    cat "$work/units.err" >&2
    fail "systemd-analyze verify warned about the units"
fi
step "ok: image $one"
