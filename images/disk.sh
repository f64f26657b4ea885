#!/usr/bin/env bash
# Builds the bootable fleetmesh disk image, and optionally boots it to check it.
#
#   images/disk.sh OUT                 build OUT/meshnode-disk.raw
#   images/disk.sh --boot-check OUT    boot OUT/meshnode-disk.raw under qemu (TCG is fine)
#                                      and wait on its serial console until meshnode answers
#                                      /healthz; prints the time it took
#
# The image (GPT, UEFI): an EFI system partition `esp` (systemd-boot, the kernel, the
# initrd, and a `fleetmesh/` folder the operator fills after writing the image) and an
# ext4 root `meshnode-root` with Debian bookworm, systemd, systemd-networkd (DHCP on every
# wired interface), OpenSSH, Caddy terminating TLS in front of the node
# (images/disk/Caddyfile), /usr/bin/meshnode (the `cuda-inference` build) with
# images/systemd/meshnode.service, and the CUDA libraries it opens in /usr/lib/fleetmesh/cuda
# (images/cuda.sh; on the loader's path, NVIDIA's licences in /usr/share/doc). No NVIDIA
# driver: Debian's (535 in bookworm, 550 in trixie) are older than CUDA 13 needs (R580);
# the operator installs NVIDIA's (docs/operator-manual.md). No
# key is in the image: the node's keys are made by `meshnode up` on first boot, SSH host
# keys by ssh-keygen on first boot, the machine id by systemd.
#
# Before the first boot, mount the image's first partition and put in fleetmesh/:
#   authorized_keys   SSH public keys allowed to log in as root
#   caddy-meshnode    MESHNODE_DOMAIN=node.example.org (the node's public name, for TLS)
# Then write it to the server's disk: dd if=meshnode-disk.raw of=/dev/sdX bs=4M conv=fsync
# (the root partition grows to fill the disk on first boot).
#
# Environment:
#   MESHNODE_BIN    use this meshnode binary instead of building the release one
#   DISK_MIRROR     the Debian mirror [http://deb.debian.org/debian]
#   DISK_ACCEL      qemu's accelerator for --boot-check [tcg]; kvm where it works
#
# Needs (root): mmdebstrap, mkfs.vfat and mtools, mke2fs, sfdisk, and for --boot-check
# qemu-system-x86_64 and OVMF (Debian: mmdebstrap dosfstools mtools e2fsprogs fdisk
# qemu-system-x86 ovmf). About 10 minutes to build; a TCG boot takes a few more.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
step() { printf '[disk.sh %4ss] %s\n' "$SECONDS" "$*" >&2; }
fail() { echo "images/disk.sh: $*" >&2; exit 1; }

boot_check=""
if [ "${1:-}" = "--boot-check" ]; then boot_check=1; shift; fi
[ $# -eq 1 ] && [ "${1#-}" = "$1" ] || usage
out="$1"
disk="$out/meshnode-disk.raw"

need() {
    local missing=()
    for tool in "$@"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
    ((${#missing[@]} == 0)) || fail "missing ${missing[*]} (see the header of images/disk.sh for the packages)"
}

if [ -n "$boot_check" ]; then
    need qemu-system-x86_64
    ovmf=/usr/share/ovmf/OVMF.fd
    [ -f "$ovmf" ] || fail "no UEFI firmware at $ovmf (Debian package ovmf)"
    [ -f "$disk" ] || fail "no $disk: build it first with images/disk.sh $out"
    step "booting $disk under qemu (a copy-on-write snapshot; the image is not changed)"
    # TCG by default: it runs anywhere (KVM inside a VM can fail); DISK_ACCEL=kvm to use it
    accel="${DISK_ACCEL:-tcg}"
    log="$out/boot-check.log"
    : >"$log"
    start=$SECONDS
    # the guest prints "meshnode-ready: /healthz ok" on its console once the node answers
    timeout 1800 qemu-system-x86_64 -machine q35,accel=$accel -m 2048 -smp 2 \
        -bios "$ovmf" -nographic -no-reboot \
        -drive if=virtio,format=raw,file="$disk",snapshot=on \
        -netdev user,id=net0 -device virtio-net-pci,netdev=net0 \
        >"$log" 2>&1 &
    qemu=$!
    trap 'kill $qemu 2>/dev/null || true' EXIT
    while kill -0 $qemu 2>/dev/null; do
        if grep -q "meshnode-ready: /healthz ok" "$log"; then
            took=$((SECONDS - start))
            for u in meshnode-firstboot caddy-meshnode ssh; do
                grep -q "meshnode-ready: $u is active" "$log" ||
                    fail "$u is not active: $(grep -a "meshnode-ready: $u" "$log")"
            done
            # the first boot generated the node's [api] token (the proxy's clients are
            # strangers, never the operator)
            grep -q "meshnode-ready: \[api\] token is set" "$log" ||
                fail "the first boot wrote no [api] token: $(grep -a "token" "$log")"
            step "meshnode answered /healthz ${took}s after power-on ($accel); the console is in $log"
            echo "boot-to-healthz ${took}s ($accel)"
            exit 0
        fi
        sleep 2
    done
    tail -40 "$log" >&2
    fail "the guest stopped or timed out before meshnode answered /healthz (console: $log)"
fi

[ "$(id -u)" = 0 ] || fail "building the disk needs root (mmdebstrap, file ownership in the root filesystem)"
need mmdebstrap mkfs.vfat mmd mcopy mke2fs sfdisk python3
mkdir -p "$out"
work="$(mktemp -d "$out/.disk.XXXXXX")"
trap 'rm -rf "$work"' EXIT

if [ -n "${MESHNODE_BIN:-}" ]; then
    bin="$MESHNODE_BIN"
else
    step "building the release meshnode (cuda-inference)"
    eval "$("$root/images/cuda.sh" env)"
    FLEETMESH_COMMIT="$(git -C "$root" rev-parse HEAD)" \
        cargo build --release --locked -p fleetmesh-appliance --bin meshnode --features cuda-inference
    bin="${CARGO_TARGET_DIR:-$root/target}/release/meshnode"
fi
[ -x "$bin" ] || fail "$bin is not an executable"

rootfs="$work/rootfs"
step "Debian bookworm into $rootfs (mmdebstrap)"
packages=systemd,systemd-sysv,systemd-boot,systemd-resolved,udev,dbus,kmod,linux-image-amd64,initramfs-tools
packages+=,openssh-server,caddy,ca-certificates,libvulkan1,libstdc++6,iproute2,cloud-guest-utils,e2fsprogs,less
mmdebstrap --quiet --variant=minbase --include="$packages" \
    --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
    bookworm "$rootfs" "${DISK_MIRROR:-http://deb.debian.org/debian}" >&2

step "installing meshnode, its units, Caddy's config"
install -m 0755 "$bin" "$rootfs/usr/bin/meshnode"
install -m 0644 "$root/images/systemd/meshnode.service" "$rootfs/etc/systemd/system/"
# the CUDA libraries the node opens, as in the OCI image (images/cuda.sh runtime)
cuda_site="$("$root/images/cuda.sh" licences)"
install -d -m 0755 "$rootfs/usr/lib/fleetmesh/cuda"
"$root/images/cuda.sh" runtime | while read -r lib; do
    install -m 0644 "$lib" "$rootfs/usr/lib/fleetmesh/cuda/"
done
for d in "$cuda_site"/*.dist-info; do
    lic="$d/licenses/License.txt"
    [ -f "$lic" ] || lic="$d/License.txt"
    install -D -m 0644 "$lic" "$rootfs/usr/share/doc/fleetmesh-cuda/$(basename "$d" .dist-info)/License.txt"
done
echo /usr/lib/fleetmesh/cuda >"$rootfs/etc/ld.so.conf.d/fleetmesh-cuda.conf"
chroot "$rootfs" ldconfig
install -m 0644 "$root/images/disk/"*.service "$rootfs/etc/systemd/system/"
install -d -m 0755 "$rootfs/etc/fleetmesh"
install -m 0644 "$root/images/disk/Caddyfile" "$rootfs/etc/fleetmesh/Caddyfile"
install -m 0644 "$root/images/disk/80-wired.network" "$rootfs/etc/systemd/network/"
install -d -m 0755 "$rootfs/etc/systemd/system/ssh.service.d"
printf '[Service]\n# host keys are made on the box, never shipped in the image: before sshd checks them\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\nExecStartPre=/usr/sbin/sshd -t\n' \
    >"$rootfs/etc/systemd/system/ssh.service.d/host-keys.conf"
echo meshnode >"$rootfs/etc/hostname"
: >"$rootfs/etc/machine-id" # made on first boot
cat >"$rootfs/etc/fstab" <<'EOF'
PARTLABEL=meshnode-root  /          ext4  defaults,errors=remount-ro  0 1
PARTLABEL=esp            /boot/efi  vfat  umask=0077                  0 2
EOF
install -d -m 0700 "$rootfs/boot/efi"
chroot "$rootfs" systemctl disable caddy.service >/dev/null 2>&1 || true
chroot "$rootfs" systemctl enable systemd-networkd.service systemd-resolved.service \
    meshnode.service caddy-meshnode.service meshnode-firstboot.service meshnode-ready.service \
    ssh.service >/dev/null
ln -sf /run/systemd/resolve/stub-resolv.conf "$rootfs/etc/resolv.conf"

kernel="$(ls "$rootfs"/boot/vmlinuz-* | sort -V | tail -1)"
initrd="$(ls "$rootfs"/boot/initrd.img-* | sort -V | tail -1)"
[ -f "$kernel" ] && [ -f "$initrd" ] || fail "the kernel or initrd is missing in the root filesystem"

step "the EFI system partition (systemd-boot)"
esp="$work/esp.img"
esp_mib=256
mkfs.vfat -C -n ESP "$esp" $((esp_mib * 1024)) >/dev/null
export MTOOLS_SKIP_CHECK=1
mmd -i "$esp" ::/EFI ::/EFI/BOOT ::/loader ::/loader/entries ::/fleetmesh
mcopy -i "$esp" "$rootfs/usr/lib/systemd/boot/efi/systemd-bootx64.efi" ::/EFI/BOOT/BOOTX64.EFI
mcopy -i "$esp" "$kernel" ::/vmlinuz
mcopy -i "$esp" "$initrd" ::/initrd.img
printf 'default meshnode.conf\ntimeout 0\n' >"$work/loader.conf"
printf 'title fleetmesh node\nlinux /vmlinuz\ninitrd /initrd.img\noptions root=PARTLABEL=meshnode-root rw console=tty0 console=ttyS0,115200\n' >"$work/meshnode.conf"
mcopy -i "$esp" "$work/loader.conf" ::/loader/loader.conf
mcopy -i "$esp" "$work/meshnode.conf" ::/loader/entries/meshnode.conf
printf '# SSH public keys allowed to log in as root, one per line (read on every boot)\n' >"$work/authorized_keys"
printf '# The node'"'"'s public name, for TLS certificates by ACME:\n# MESHNODE_DOMAIN=node.example.org\n' >"$work/caddy-meshnode"
mcopy -i "$esp" "$work/authorized_keys" "$work/caddy-meshnode" ::/fleetmesh/

step "the root filesystem (ext4)"
rootimg="$work/root.img"
used_mib=$(( $(du -sm "$rootfs" | cut -f1) ))
root_mib=$(( used_mib + used_mib / 4 + 512 ))
mke2fs -q -t ext4 -L meshnode-root -d "$rootfs" "$rootimg" "${root_mib}M"

step "the disk (GPT)"
rm -f "$disk"
total_mib=$(( 1 + esp_mib + root_mib + 1 ))
truncate -s "${total_mib}M" "$disk"
sfdisk --quiet "$disk" <<EOF
label: gpt
start=1MiB, size=${esp_mib}MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp
start=$(( 1 + esp_mib ))MiB, size=${root_mib}MiB, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, name=meshnode-root
EOF
dd if="$esp" of="$disk" bs=1M seek=1 conv=notrunc status=none
dd if="$rootimg" of="$disk" bs=1M seek=$(( 1 + esp_mib )) conv=notrunc status=none
step "done: $disk ($(du -h --apparent-size "$disk" | cut -f1)); check it with images/disk.sh --boot-check $out"
