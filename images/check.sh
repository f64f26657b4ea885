#!/usr/bin/env bash
# Checks what images/ builds, with independent tools (run by .ci/test after the tests):
#
#   images/check.sh MESHNODE
#
# - the OCI image, built twice from MESHNODE (stripped) by images/build.sh: the same
#   manifest digest both times; `skopeo inspect` reads the layout and the docker-archive;
#   `umoci unpack` unpacks it; the unpacked meshnode runs `--version` on the image's own
#   libc; as root, the image's entrypoint is started in the unpacked root as its user and
#   the image's HEALTHCHECK command passes against it;
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
python3 - "$work/one/oci/blobs/sha256" "$version" <<'EOF' <<<"$inspected"
import json, sys
i = json.load(sys.stdin)
labels = i["Labels"]
for k in ("title", "version", "revision", "created", "source", "licenses"):
    assert labels.get("org.opencontainers.image." + k), f"label org.opencontainers.image.{k} missing: {labels}"
assert labels["org.opencontainers.image.version"] == sys.argv[2], labels
assert len(i["Layers"]) == 2, i["Layers"]
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
