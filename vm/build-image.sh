#!/usr/bin/env bash
# The Debian 12 VM image that tests hpnlab on the kernels users have: Debian 12's stock kernel (6.1) and
# bookworm-backports' (6.12), both installed in one root file system, booted in turn by vm/run.py.
#
#   vm/build-image.sh DIR      (as root; debootstrap and mkfs.ext4 from Debian's packages)
#
# Everything comes from Debian's archive (debootstrap; apt inside the new root) and, for the Python
# packages, from pip's usual index on this machine: they are downloaded here into a wheel folder inside
# the image, because the VM has no network. DIR ends up holding:
#   rootfs.img          ext4, the root file system (the VM boots a throw-away overlay of it)
#   kernels/<release>/  vmlinuz and initrd.img of each installed kernel
#   image.json          what was installed (kernel releases, packages), written last: its presence means done
set -euo pipefail
out="${1:?usage: vm/build-image.sh DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mirror="${HPNLAB_VM_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
# What a lab needs (the same list ./bootstrap installs), what the guest's init uses, and the stock kernel.
read -r -a lab_packages <<<"$("$here/bootstrap" packages)"
extra=(kmod linux-image-amd64 initramfs-tools ca-certificates tar gzip xz-utils util-linux iproute2 less sudo)

[ "$(id -u)" -eq 0 ] || { echo "build-image: needs root (debootstrap, chroot)" >&2; exit 2; }
for t in debootstrap mkfs.ext4 chroot; do
  command -v "$t" >/dev/null || { echo "build-image: $t is missing (apt-get install debootstrap e2fsprogs)" >&2; exit 2; }
done

mkdir -p "$out"
work="$out/build.tmp"
root="$work/root"
cleanup() {
  for m in dev/pts dev proc sys; do mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true; done
}
trap cleanup EXIT
rm -rf "$work" "$out/image.json"
mkdir -p "$root"

step() { echo "build-image: $*"; }

step "debootstrap $suite (minbase) from $mirror"
debootstrap --variant=minbase --include=apt-utils "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; exit 1; }

mount -t proc proc "$root/proc"
mount -t sysfs sys "$root/sys"
mount --bind /dev "$root/dev"
mount -t devpts devpts "$root/dev/pts"

cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror $suite main
deb $mirror $suite-updates main
deb $mirror $suite-backports main
EOF
# No service may start inside the chroot (frr's postinst would start one).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
# initrd: the drivers a QEMU virtio disk needs, whatever the build host has.
mkdir -p "$root/etc/initramfs-tools/conf.d"
echo "MODULES=most" >"$root/etc/initramfs-tools/conf.d/hpnlab-vm.conf"
printf 'virtio_pci\nvirtio_blk\next4\n' >>"$root/etc/initramfs-tools/modules"

in_root() { DEBIAN_FRONTEND=noninteractive chroot "$root" "$@"; }
step "apt: ${lab_packages[*]} ${extra[*]}"
in_root apt-get update -qq >"$work/apt.log" 2>&1
in_root apt-get install -y -qq --no-install-recommends "${lab_packages[@]}" "${extra[@]}" >>"$work/apt.log" 2>&1 \
  || { tail -20 "$work/apt.log" >&2; exit 1; }
step "apt: bookworm-backports' kernel"
in_root apt-get install -y -qq --no-install-recommends -t "$suite-backports" linux-image-amd64 >>"$work/apt.log" 2>&1 \
  || { tail -20 "$work/apt.log" >&2; exit 1; }
in_root apt-get clean

step "wheels for the project's Python dependencies (pip, on this machine)"
mkdir -p "$root/opt/wheels"
py="${HPNLAB_VM_PYTHON:-python3}"
"$py" -m pip download -q --disable-pip-version-check -d "$root/opt/wheels" --only-binary=:all: \
  --python-version 3.11 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 --platform any \
  $("$py" - "$here/pyproject.toml" <<'EOF'
import sys, tomllib
p = tomllib.load(open(sys.argv[1], "rb"))
reqs = list(p["project"]["dependencies"]) + p["build-system"]["requires"] + ["wheel"]
for extra in p["project"].get("optional-dependencies", {}).values():
    reqs += extra
print(" ".join(r.replace(" ", "") for r in reqs))
EOF
) >"$work/pip.log" 2>&1 || { tail -20 "$work/pip.log" >&2; exit 1; }
# The guest's pip never reaches an index: it installs from this folder only.
printf '[global]\nno-index = true\nfind-links = /opt/wheels\ndisable-pip-version-check = true\n' >"$root/etc/pip.conf"

step "guest init and settings"
echo hpnlab-vm >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 hpnlab-vm\n' >"$root/etc/hosts"
# The init the kernel runs (init=): mount what a system has, then the run folder the host shares over
# 9p, and hand over to the guest script the host put there (vm/guest.sh, copied anew for every run).
cat >"$root/sbin/hpnlab-vm-init" <<'EOF'
#!/bin/bash
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm; mount -t devpts devpts /dev/pts; mount -t tmpfs shm /dev/shm
mount -t tmpfs run /run; mount -t tmpfs tmp /tmp; mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mount -o remount,rw /
hostname hpnlab-vm; ip link set lo up
modprobe 9pnet_virtio; modprobe 9p
mkdir -p /mnt/run && mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 run /mnt/run
exec >/dev/ttyS0 2>&1 </dev/null
if [ -x /mnt/run/guest.sh ]; then /mnt/run/guest.sh; else echo "hpnlab-vm: no /mnt/run/guest.sh"; fi
sync
echo o >/proc/sysrq-trigger
sleep 60
EOF
chmod +x "$root/sbin/hpnlab-vm-init"
rm -f "$root/usr/sbin/policy-rc.d"

mkdir -p "$work/kernels"
kernels=()
for v in "$root"/boot/vmlinuz-*; do
  rel="${v##*/vmlinuz-}"
  [ -f "$root/boot/initrd.img-$rel" ] || { echo "build-image: no initrd for $rel" >&2; exit 1; }
  mkdir -p "$work/kernels/$rel"
  cp "$v" "$work/kernels/$rel/vmlinuz"
  cp "$root/boot/initrd.img-$rel" "$work/kernels/$rel/initrd.img"
  kernels+=("$rel")
done
frr="$(chroot "$root" dpkg-query -W -f='${Version}' frr)"
python="$(chroot "$root" python3 -c 'import platform; print(platform.python_version())')"
cleanup

step "ext4 image from the tree (mkfs.ext4 -d)"
rm -f "$work/rootfs.img"
mkfs.ext4 -q -F -L hpnlab-vm -d "$root" "$work/rootfs.img" 8G

rm -rf "$out/kernels" "$out/rootfs.img"
mv "$work/kernels" "$out/kernels"
mv "$work/rootfs.img" "$out/rootfs.img"
printf '{"suite": "%s", "kernels": [%s], "frr": "%s", "python": "%s", "built": "%s"}\n' \
  "$suite" "$(printf '"%s",' "${kernels[@]}" | sed 's/,$//')" "$frr" "$python" "$(date -u +%FT%TZ)" >"$out/image.json"
rm -rf "$work"
step "done: $out/image.json"
cat "$out/image.json"
