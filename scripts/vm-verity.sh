#!/usr/bin/env bash
# Boots a Debian kernel that has fs-verity (CONFIG_FS_VERITY=y) under QEMU and runs a guest script in
# it, so the tests can check sealfs against the kernel's own fs-verity where the host kernel lacks it.
#
#   scripts/vm-verity.sh STAGING_DIR
#
# STAGING_DIR holds what the guest sees: it becomes an ext4 file system made with the `verity`
# feature, mounted read-write at /mnt in the guest, where /mnt/guest.sh is run with busybox sh. The
# guest has busybox, `sealfs` (the binary in $SEALFS), `fsverity` (fsverity-utils), and `dmsetup` and
# `losetup` (util-linux) in its PATH, the loop, device-mapper, dm-verity, EROFS, overlayfs and FUSE
# modules loaded, and /proc, /sys, /dev, cgroup2 (/sys/fs/cgroup) and tmpfs on /run and /tmp mounted
# (what containerd and runc need: VM_EXTRA_BINS="containerd ctr containerd-shim-runc-v2 runc"; the
# root is the initramfs, where runc cannot pivot_root: `ctr run --no-pivot`). VM_MEM sets the guest's
# memory in MiB (default 1024).
# Everything the guest prints reaches standard output (serial console); the last line is
# "GUEST-EXIT <status of guest.sh>". Exits 0 when the guest ran to its end, whatever the status.
#
# Needs qemu-system-x86_64 (qemu-system-x86), /bin/busybox statically linked (busybox-static),
# mkfs.ext4 (e2fsprogs), fsverity (fsverity), dmsetup (dmsetup), losetup, objcopy and apt-get: the kernel is the newest
# `linux-image-*-cloud-amd64` Debian package (needs CONFIG_FS_VERITY=y and ext4 built in), downloaded
# once into $VM_CACHE (default target/vm-kernel).
set -euo pipefail

staging="${1:?usage: vm-verity.sh STAGING_DIR}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SEALFS="${SEALFS:-$here/target/release/sealfs}"
VM_CACHE="${VM_CACHE:-$here/target/vm-kernel}"
die() { printf 'vm-verity: %s\n' "$*" >&2; exit 2; }

for tool in qemu-system-x86_64 mkfs.ext4 fsverity dmsetup losetup objcopy apt-get dpkg-deb flock; do
    command -v "$tool" >/dev/null || die "$tool not found"
done
[[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 || die "/bin/busybox missing or not static (apt-get install busybox-static)"
[[ -x "$SEALFS" ]] || die "no sealfs binary at $SEALFS"
[[ -f "$staging/guest.sh" ]] || die "$staging/guest.sh missing"

# --- kernel: vmlinuz and the modules the tests need, from the Debian cloud kernel package ---------
# The loop driver (the ext4 image lives in the initramfs), SHA-512 for fs-verity's --hash-alg=sha512,
# and for kernel-verified mounts device-mapper with dm-verity and EROFS: modules in the cloud kernel,
# kept with what they depend on, in load order (modules.order).
MODULES="loop sha512_generic dm-verity erofs overlay fuse"
# One download at a time: test programs that boot guests run side by side.
mkdir -p "$(dirname "$VM_CACHE")"
exec 9>"$VM_CACHE.lock"
flock 9
if [[ ! -f "$VM_CACHE/.done-v3" ]]; then
    rm -rf "$VM_CACHE" && mkdir -p "$VM_CACHE/deb" "$VM_CACHE/modules"
    pick() { apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}'; }
    pkg="$(pick)"
    if [[ -z "$pkg" ]]; then
        apt-get update -qq >&2 || die "apt-get update failed"
        pkg="$(pick)"
    fi
    [[ -n "$pkg" ]] || die "no linux-image-cloud-amd64 package known to apt"
    (cd "$VM_CACHE/deb" && apt-get download "$pkg" >&2 2>/dev/null) || die "apt-get download $pkg failed"
    dpkg-deb -x "$VM_CACHE"/deb/*.deb "$VM_CACHE/x"
    cp "$VM_CACHE"/x/boot/vmlinuz-* "$VM_CACHE/vmlinuz"
    for opt in CONFIG_FS_VERITY=y CONFIG_DM_VERITY= CONFIG_EROFS_FS=; do
        grep -q "^$opt" "$VM_CACHE"/x/boot/config-* || die "$pkg has no $opt"
    done
    # A module's dependencies, from its .modinfo section (no modules.dep in the package).
    deps_of() { objcopy -O binary --only-section=.modinfo "$1" /dev/stdout | tr '\0' '\n' | sed -n 's/^depends=//p' | tr ',' ' '; }
    find_ko() { find "$VM_CACHE/x/lib/modules" \( -name "$1.ko" -o -name "${1//-/_}.ko" -o -name "${1//_/-}.ko" \) | head -n1; }
    add() {
        local ko; ko="$(find_ko "$1")"
        [[ -n "$ko" ]] || die "$pkg has no uncompressed $1.ko"
        local base; base="$(basename "$ko")"
        grep -qx "$base" "$VM_CACHE/modules.order" 2>/dev/null && return 0
        for dep in $(deps_of "$ko"); do add "$dep"; done
        cp "$ko" "$VM_CACHE/modules/"
        echo "$base" >>"$VM_CACHE/modules.order"
    }
    for mod in $MODULES; do add "$mod"; done
    echo "$pkg" >"$VM_CACHE/PACKAGE"
    rm -rf "$VM_CACHE/x" "$VM_CACHE/deb"
    touch "$VM_CACHE/.done-v3"
fi
flock -u 9
exec 9>&-

# --- initramfs: busybox, sealfs and fsverity with their libraries, the ext4 image -------------------
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root"/{bin,dev,proc,sys,mnt,tmp,run}
cp /bin/busybox "$root/bin/"
strip -o "$root/bin/sealfs" "$SEALFS"
# VM_EXTRA_BINS: more host programs for the guest, in /usr/local/bin (call them by that path: busybox
# sh runs its own applet of the same name first; benchmarks use coreutils' date for ns times).
mkdir -p "$root/usr/local/bin"
for b in ${VM_EXTRA_BINS:-}; do cp "$(command -v "$b")" "$root/usr/local/bin/"; done
cp "$(command -v fsverity)" "$(command -v dmsetup)" "$(command -v losetup)" "$root/bin/"
for bin in "$root"/bin/* "$root"/usr/local/bin/*; do
    [[ -e "$bin" && "$bin" != "$root/bin/busybox" ]] || continue
    ldd "$bin" | awk '/=> \// {print $3} /^\t\/lib/ {print $1}' | while read -r lib; do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
done
mkdir -p "$root/modules"
cp "$VM_CACHE"/modules/*.ko "$VM_CACHE/modules.order" "$root/modules/"
# Room for the staged files, their fs-verity trees and ext4's own metadata.
# VM_DISK_MB: that much more room, for what the guest writes there (a containerd root).
size_kib=$(( $(du -sk "$staging" | cut -f1) * 3 / 2 + 16384 + ${VM_DISK_MB:-0} * 1024 ))
mkfs.ext4 -q -F -O verity -b 4096 -d "$staging" "$root/fs.ext4" "${size_kib}k"
cat >"$root/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/usr/local/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
while read -r ko; do insmod "/modules/$ko" || echo "GUEST: insmod $ko failed"; done </modules/modules.order
mount -t ext4 -o loop /fs.ext4 /mnt || echo "GUEST: cannot mount the ext4 image"
echo GUEST-START
cd /mnt && sh /mnt/guest.sh
echo "GUEST-EXIT $?"
sync
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null) >"$work/initrd"

# Software emulation by default: it boots in seconds, and nested KVM on the machines this was written
# on stops with "emulation failure" in the guest kernel. VM_ACCEL=kvm asks for KVM, VM_CPU another
# CPU model, VM_APPEND other kernel arguments than "quiet loglevel=3". (Tried on 2026-12-05 in these
# machines' nested KVM: host, qemu64, kvm64, Haswell-noTSX stop at a `lock cmpxchg16b` in the guest
# kernel's early boot; host,-cx16 boots 30 times slower and stops at an `xrstor`: the guest's memory
# accesses reach KVM's instruction emulator, so a KVM guest here would not measure speed either.)
accel="${VM_ACCEL:-tcg}"
cpu=max
[[ "$accel" == kvm ]] && cpu=host
cpu="${VM_CPU:-$cpu}"
qemu-system-x86_64 -machine "accel=$accel" -cpu "$cpu" -m "${VM_MEM:-1024}" -smp 2 -nographic -no-reboot \
    -kernel "$VM_CACHE/vmlinuz" -initrd "$work/initrd" \
    -append "console=ttyS0 panic=-1 ${VM_APPEND:-quiet loglevel=3}" </dev/null
