#!/usr/bin/env bash
# The cost of running a container on `sealfs snapshotter` layers, kernel-verified (EROFS on
# dm-verity) and FUSE-verified, against containerd's `overlayfs` snapshotter (issue 39's "cost of
# running" row), in the QEMU guest of scripts/vm-verity.sh (the only place here with dm-verity),
# with Debian's containerd and runc copied in.
#
#   bench/snapshotter-kernel.sh [SRC_DIR] [ROUNDS]    (as root; default: /usr/lib/python3.11, 3)
#
# The image (umoci): a busybox-static layer and a layer holding SRC_DIR, imported into both
# snapshotters from an OCI archive. Each round runs, in turn, a container on overlayfs, on sealfs
# with --layer-mount kernel, and on sealfs with --layer-mount fuse (the snapshotter restarted
# between, so each mode mounts its layers afresh), each after the page cache is dropped, timing
# `find / -xdev -type f | xargs cat >/dev/null` inside the container with busybox `time` (10 ms
# resolution). containerd's root and the snapshotter's are on the guest's ext4 alike. Prints the
# median of each, and each against overlayfs. Software-emulated guest: absolute times are many
# times a real machine's; read the ratios, with that caveat.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
src="${1:-/usr/lib/python3.11}"
rounds="${2:-3}"
[[ -d "$src" ]] || { echo "no source tree $src" >&2; exit 2; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
st="$work/staging"
mkdir -p "$st"
l="$work/layout" b="$work/bundle"
umoci init --layout "$l"
umoci new --image "$l:t"
umoci unpack --image "$l:t" "$b" >/dev/null
r="$b/rootfs"
mkdir -p "$r/bin" "$r/data"
cp /bin/busybox "$r/bin/"
for t in sh cat find xargs time; do ln -s busybox "$r/bin/$t"; done
umoci repack --image "$l:t" "$b"
rm -rf "$b"
umoci unpack --image "$l:t" "$b" >/dev/null
cp -a "$src/." "$r/data/"
umoci repack --image "$l:t" "$b"
umoci config --image "$l:t" --config.cmd /bin/sh
tar -C "$l" -cf "$st/image.tar" .
files=$(find "$src" -type f | wc -l)
bytes=$(du -sb "$src" | cut -f1)

cat >"$st/guest.sh" <<GUEST
C="ctr --address /run/containerd/containerd.sock"
R=/mnt/sroot
mkdir -p /run/ctd /run/out /mnt/ctd-root
cat > /run/ctd/config.toml <<EOT
version = 2
root = "/mnt/ctd-root"
state = "/run/ctd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "/run/containerd/containerd.sock"
[proxy_plugins.sealfs]
  type = "snapshot"
  address = "/run/sealfs.sock"
EOT
mode=""
snap() {
  if [ -n "\$mode" ]; then
    p=\$(cat /run/snap.pid); kill \$p
    while [ -d /proc/\$p ] && ! grep -q "^State:.*Z" /proc/\$p/status; do sleep 0.1; done
  fi
  mode=\$1; rm -f /run/sealfs.sock
  sealfs snapshotter --root \$R --address /run/sealfs.sock --containerd-address /run/containerd/containerd.sock --layer-mount \$1 2>>/run/snap.log &
  echo \$! > /run/snap.pid
  while [ ! -S /run/sealfs.sock ]; do sleep 0.1; done
}
echo 'find / -xdev -type f | xargs cat > /dev/null' > /run/out/w.sh
run() {
  sn=\$1; name=\$2; n=0
  sync; echo 3 > /proc/sys/vm/drop_caches
  until \$C run --rm --no-pivot --snapshotter \$sn --mount type=bind,src=/run/out,dst=/out,options=rbind:rw img:t \$name-\$r /bin/sh -c "time sh /out/w.sh 2>/out/t-\$name-\$r"; do
    n=\$((n+1)); [ \$n -ge 20 ] && { echo "FAILED \$name"; return; }; sleep 1
  done
  echo "T \$name \$(grep real /run/out/t-\$name-\$r | sed 's/real[[:space:]]*//')"
}
snap kernel
containerd --config /run/ctd/config.toml 2>/run/ctd.log &
while ! \$C version >/dev/null 2>&1; do sleep 0.2; done
\$C image import --base-name img --snapshotter sealfs /mnt/image.tar >/dev/null
\$C image import --base-name img --snapshotter overlayfs /mnt/image.tar >/dev/null
for r in \$(seq $rounds); do
  run overlayfs overlayfs
  snap kernel; run sealfs kernel-dm-verity
  sealfs snapshotter status --root \$R | grep -c "mounted kernel-dm-verity" | sed 's/^/M kernel-dm-verity /'
  snap fuse; run sealfs fuse-verified
  sealfs snapshotter status --root \$R | grep -c "mounted fuse-verified" | sed 's/^/M fuse-verified /'
done
GUEST

VM_MEM=3072 VM_DISK_MB=$(( bytes * 3 / 1048576 + 64 )) VM_EXTRA_BINS="containerd ctr containerd-shim-runc-v2 runc" \
    "$here/scripts/vm-verity.sh" "$st" | tr -d '\r' >"$work/out"
cp "$work/out" "${GUEST_LOG:-/dev/null}"
if grep -q FAILED "$work/out"; then grep FAILED "$work/out" >&2; tail -50 "$work/out" >&2; exit 1; fi
python3 - "$work/out" "$files" "$bytes" <<'PY'
import sys, statistics, re
out, files, size = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3])
t, mounted = {}, {}
for line in out.splitlines():
    if line.startswith("T "):
        _, name, rest = line.split(" ", 2)
        m = re.match(r"(\d+)m\s*([\d.]+)s", rest.strip())
        if not m:
            sys.exit(f"cannot read the time of {name}: {rest!r}")
        t.setdefault(name, []).append(int(m.group(1)) * 60 + float(m.group(2)))
    elif line.startswith("M "):
        _, name, n = line.split()
        mounted.setdefault(name, []).append(int(n))
base = statistics.median(t["overlayfs"])
print(f"workload: find / -xdev -type f | xargs cat, {files} files, {size / 1e6:.1f} MB in the data layer")
print("| layers | median s | runs, s | / overlayfs |")
print("|---|---|---|---|")
for name in ["overlayfs", "kernel-dm-verity", "fuse-verified"]:
    v = t.get(name, [])
    if not v:
        continue
    med = statistics.median(v)
    print(f"| {name} | {med:.2f} | {', '.join(f'{x:.2f}' for x in v)} | {med / base:.2f}x |")
print("layers mounted in that mode, per round:", mounted)
PY
