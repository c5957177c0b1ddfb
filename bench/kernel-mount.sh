#!/usr/bin/env bash
# What a kernel-verified mount costs, in the QEMU guest of scripts/vm-verity.sh (the only place here
# with dm-verity): opening an image (seal, descriptor and signature checks) against setting up and
# mounting it. Rounds are interleaved; each figure is the median of N rounds, in milliseconds of wall
# time in the guest (software-emulated: absolute times are several times a real machine's, the
# ratios are what to read).
#
#   bench/kernel-mount.sh [SRC_DIR] [ROUNDS]      (as root; default SRC_DIR: the kernel's fs/ tree)
#
# Rows: `sealfs stat IMAGE /` with --verify=none (no seal read), --digest (descriptor checked) and
# --key (descriptor and an Ed25519 signature checked): process start, open, and one verified inode;
# `sealfs mount --kernel --key` (open, loop device, dm-verity mapping, EROFS mount) and its
# `sealfs umount`; busybox `mount -o loop,ro` of the same file (loop and EROFS, nothing verified)
# and `umount`; the first `ls -lR` of each mount.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
src="${1:-$here/bench/.corpus/linux/linux-source-6.1/fs}"
rounds="${2:-7}"
sealfs="$here/target/release/sealfs"
[[ -d "$src" ]] || { echo "no source tree $src (bench/corpus.sh linux)" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
st="$work/staging"
mkdir -p "$st"
openssl genpkey -algorithm ed25519 -out "$st/key.pem" 2>/dev/null
openssl pkey -in "$st/key.pem" -pubout -out "$st/key.pub"
digest="$("$sealfs" build -q "$src" "$st/a.img")"
"$sealfs" sign "$st/a.img" --key "$st/key.pem" >/dev/null 2>&1
size=$(stat -c %s "$st/a.img")

cat >"$st/guest.sh" <<EOF
cd /mnt
mkdir -p /m
ms() { echo \$(( \$(/usr/local/bin/date +%s%N) / 1000 )); }
t() { local name="\$1"; shift; local a=\$(ms); "\$@" >/dev/null 2>&1 || echo "FAILED \$name"; local b=\$(ms); echo "T \$name \$(( b - a ))"; }
for r in \$(seq $rounds); do
  t open-none sealfs stat --verify=none a.img /
  t open-digest sealfs stat --digest $digest a.img /
  t open-key sealfs stat --key key.pub a.img /
  t mount-kernel sealfs mount --kernel --key key.pub a.img /m
  t ls-kernel ls -lR /m
  t umount-kernel sealfs umount /m
  t mount-loop mount -t erofs -o loop,ro a.img /m
  t ls-loop ls -lR /m
  t umount-loop umount -d /m
done
EOF

VM_EXTRA_BINS=date "$here/scripts/vm-verity.sh" "$st" | tr -d '\r' >"$work/out"
grep -q FAILED "$work/out" && { grep FAILED "$work/out" >&2; exit 1; }
python3 - "$work/out" "$rounds" "$size" <<'PY'
import sys, statistics
out, rounds, size = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3])
t = {}
for line in out.splitlines():
    if line.startswith("T "):
        _, name, us = line.split()
        t.setdefault(name, []).append(int(us) / 1000)
med = {k: statistics.median(v) for k, v in t.items()}
rows = [
    ("open-none", "sealfs stat --verify=none (no seal read)"),
    ("open-digest", "sealfs stat --digest (seal + descriptor)"),
    ("open-key", "sealfs stat --key (seal + descriptor + Ed25519)"),
    ("mount-kernel", "sealfs mount --kernel --key (open + loop + dm-verity + mount)"),
    ("umount-kernel", "sealfs umount (mount, mapping, loop)"),
    ("mount-loop", "mount -o loop,ro (unverified)"),
    ("umount-loop", "umount -d (unverified)"),
    ("ls-kernel", "first ls -lR, dm-verity mount"),
    ("ls-loop", "first ls -lR, unverified loop mount"),
]
print(f"image {size/1e6:.1f} MB, {rounds} interleaved rounds, median (min-max) ms in the guest")
print("| step | ms |")
print("|---|---|")
for k, label in rows:
    v = t.get(k, [])
    if v:
        print(f"| {label} | {med[k]:.1f} ({min(v):.1f}-{max(v):.1f}) |")
print(f"\nopen with --key minus --verify=none: {med['open-key'] - med['open-none']:.1f} ms "
      f"(inside the noise of process start when small); kernel-verified mount "
      f"{med['mount-kernel'] / med['mount-loop']:.2f}x the unverified loop mount (no sealfs process there)")
PY
