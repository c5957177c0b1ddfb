#!/usr/bin/env bash
# What the kernel's verification costs, apart from decompression (issue 39's "cost of running"
# row, whose guest is software-emulated): in the QEMU guest of scripts/vm-verity.sh, reading every
# file of a tree (`find M -type f | xargs cat`, busybox `time`, page cache dropped first) through a
# read-only overlayfs whose lower layer is, in turn: the tree's directory on the guest's ext4 (what
# containerd's overlayfs snapshotter reads), the sealed layer image (as `sealfs snapshotter` builds
# layers: `-z lz4`) mounted by the kernel's EROFS on a plain loop device (nothing verified), and
# the same image mounted by `sealfs mount --kernel=dm-verity` (EROFS on dm-verity: what the
# snapshotter's kernel-verified layers are). The three interleaved, ROUNDS rounds, medians.
#
#   bench/kernel-layers-floor.sh [SRC_DIR] [ROUNDS]    (as root; default /usr/lib/python3.11, 5)
#
# The ratio EROFS-on-dm-verity / EROFS-on-loop is what verification adds; EROFS-on-loop / directory
# what the compressed image adds. Absolute times are an emulated CPU's.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
src="${1:-/usr/lib/python3.11}"
rounds="${2:-5}"
sealfs="${SEALFS:-$here/target/release/sealfs}"
[[ -d "$src" ]] || { echo "no source tree $src" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
st="$work/staging"
mkdir -p "$st/tree" "$st/empty"
cp -a "$src/." "$st/tree/"
"$sealfs" build -z lz4 "$src" "$st/layer.erofs" >/dev/null
digest="$("$sealfs" digest "$st/layer.erofs")"
files=$(find "$src" -type f | wc -l)
bytes=$(du -sb "$src" | cut -f1)

cat >"$st/guest.sh" <<GUEST
mkdir -p /run/lower /run/ov
read_all() {
  name=\$1
  mount -t overlay overlay -o lowerdir=/run/lower:/mnt/empty /run/ov || { echo "FAILED overlay \$name"; return; }
  sync; echo 3 > /proc/sys/vm/drop_caches
  ( time sh -c 'find /run/ov -type f | xargs cat > /dev/null' ) 2>/run/t
  echo "T \$name \$(grep real /run/t | sed 's/real[[:space:]]*//')"
  umount /run/ov
}
for r in \$(seq $rounds); do
  mount --bind /mnt/tree /run/lower && read_all directory && umount /run/lower
  mount -t erofs -o ro,loop /mnt/layer.erofs /run/lower && read_all erofs-loop && umount -d /run/lower
  sealfs mount --kernel=dm-verity --digest $digest /mnt/layer.erofs /run/lower && read_all erofs-dm-verity && sealfs umount /run/lower
done
GUEST

VM_MEM=3072 VM_DISK_MB=$(( bytes * 3 / 1048576 + 64 )) "$here/scripts/vm-verity.sh" "$st" | tr -d '\r' >"$work/out"
cp "$work/out" "${GUEST_LOG:-/dev/null}"
if grep -q FAILED "$work/out"; then grep FAILED "$work/out" >&2; tail -50 "$work/out" >&2; exit 1; fi
python3 - "$work/out" "$files" "$bytes" <<'PY'
import sys, statistics, re
out, files, size = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3])
t = {}
for line in out.splitlines():
    if line.startswith("T "):
        _, name, rest = line.split(" ", 2)
        m = re.match(r"(\d+)m\s*([\d.]+)s", rest.strip())
        if not m:
            sys.exit(f"cannot read the time of {name}: {rest!r}")
        t.setdefault(name, []).append(int(m.group(1)) * 60 + float(m.group(2)))
if not t.get("directory"):
    sys.exit("no run finished:\n" + out[-3000:])
base = statistics.median(t["directory"])
print(f"workload: find M -type f | xargs cat through a read-only overlayfs, {files} files, {size / 1e6:.1f} MB")
print("| lower layer | median s | runs, s | / directory |")
print("|---|---|---|---|")
for name in ["directory", "erofs-loop", "erofs-dm-verity"]:
    v = t.get(name, [])
    if v:
        med = statistics.median(v)
        print(f"| {name} | {med:.2f} | {', '.join(f'{x:.2f}' for x in v)} | {med / base:.2f}x |")
PY
