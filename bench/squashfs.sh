#!/usr/bin/env bash
# Build from a SquashFS image: `sealfs build --squashfs` (read in place) against unsquashfs alone,
# unsquashfs + `sealfs build DIR` and unsquashfs + mkfs.erofs 1.9 (what one does without
# --squashfs), plain and lz4hc, on the `linux` source tree packed by mksquashfs 4.7 (or any image
# given), interleaved (A B C ... A B C ...), median of RUNS after one untimed warm-up of each,
# with min, max and peak RSS (GNU time).
#
#   bench/squashfs.sh
#   SQUASHFS=some.sqfs RUNS=1 bench/squashfs.sh      (any image; a quick check of the script)
#
# Environment:
#   RUNS=5            timed runs per tool
#   TOOLS="sealfs sealfs-noseal unsquashfs unsquashfs+build unsquashfs+mkfs.erofs sealfs-lz4hc unsquashfs+mkfs.erofs-lz4hc"
#   SQUASHFS=...      the input image (default: $CORPUS_DIR/linux-<args>.sqfs, e.g.
#                     linux-comp-gzip.sqfs, made once from bench/corpus.sh linux with
#                     `mksquashfs DIR IMG $MKSQUASHFS_ARGS`)
#   MKSQUASHFS_ARGS="-comp gzip"   how the default image is made (gzip: mksquashfs's default)
#   SEALFS=target/release/sealfs
#   SQUASHFS_TOOLS=target/oracles/squashfs-tools-4.7/bin   (scripts/build-oracles.sh)
#   MKFS_EROFS=target/oracles/erofs-utils-1.9/bin/mkfs.erofs   (scripts/build-oracles.sh)
#   CORPUS_DIR=bench/.corpus
#   WORK_DIR=$CORPUS_DIR       where images and extractions go (a real disk, not tmpfs)
#
# Commands timed (every inode's time fixed to 0, default threads; page cache warm):
#   sealfs                   sealfs build -q -T 0 --squashfs IMG OUT      (sealed)
#   sealfs-noseal            sealfs build -q -T 0 --no-seal --squashfs IMG OUT
#   unsquashfs               unsquashfs -q -n -d DIR IMG
#   unsquashfs+build         unsquashfs ... && sealfs build -q -T 0 --no-seal DIR OUT
#   unsquashfs+mkfs.erofs    unsquashfs ... && mkfs.erofs -T0 --quiet OUT DIR
#   sealfs-lz4hc             sealfs build -q -T 0 --no-seal -z lz4hc -C 65536 --squashfs IMG OUT
#   unsquashfs+mkfs.erofs-lz4hc  unsquashfs ... && mkfs.erofs -T0 --quiet -zlz4hc -C65536 OUT DIR
# Extraction directories are removed between runs, untimed.
#
# Writes bench/results/squashfs-<UTC date>.csv (raw runs) and prints the table; docs are not touched.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
RUNS="${RUNS:-5}"
TOOLS="${TOOLS:-sealfs sealfs-noseal unsquashfs unsquashfs+build unsquashfs+mkfs.erofs sealfs-lz4hc unsquashfs+mkfs.erofs-lz4hc}"
SEALFS="${SEALFS:-$repo/target/release/sealfs}"
SQUASHFS_TOOLS="${SQUASHFS_TOOLS:-$repo/target/oracles/squashfs-tools-4.7/bin}"
MKFS_EROFS="${MKFS_EROFS:-$repo/target/oracles/erofs-utils-1.9/bin/mkfs.erofs}"
CORPUS_DIR="${CORPUS_DIR:-$here/.corpus}"
WORK_DIR="${WORK_DIR:-$CORPUS_DIR}"
MKSQUASHFS_ARGS="${MKSQUASHFS_ARGS:--comp gzip}"

log() { printf '[squashfs %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf 'squashfs.sh: error: %s\n' "$*" >&2; exit 1; }

[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
[[ -x "$SEALFS" ]] || die "sealfs binary '$SEALFS' not found (cargo build --release)"
UNSQUASHFS="$SQUASHFS_TOOLS/unsquashfs"
[[ -x "$UNSQUASHFS" ]] || die "unsquashfs 4.7 not found in $SQUASHFS_TOOLS (scripts/build-oracles.sh, or set SQUASHFS_TOOLS)"
read -r -a tools <<<"$TOOLS"
for t in "${tools[@]}"; do
    case "$t" in
        *mkfs.erofs*) [[ -x "$MKFS_EROFS" ]] || die "mkfs.erofs '$MKFS_EROFS' not found (scripts/build-oracles.sh, or set MKFS_EROFS)" ;;
        sealfs|sealfs-noseal|sealfs-lz4hc|unsquashfs|unsquashfs+build) ;;
        *) die "unknown tool '$t'" ;;
    esac
done

IMG="${SQUASHFS:-$CORPUS_DIR/linux$(printf %s "$MKSQUASHFS_ARGS" | tr -c "A-Za-z0-9" -).sqfs}"
if [[ ! -f "$IMG" ]]; then
    [[ -z "${SQUASHFS:-}" ]] || die "$IMG not found"
    CORPUS_DIR="$CORPUS_DIR" "$here/corpus.sh" linux
    src="$(ls -d "$CORPUS_DIR"/linux/linux-source-*/ | head -n1)"
    log "making $IMG from $src (mksquashfs $MKSQUASHFS_ARGS)"
    # shellcheck disable=SC2086 # MKSQUASHFS_ARGS is a list of options
    "$SQUASHFS_TOOLS/mksquashfs" "$src" "$IMG.tmp" -noappend -no-progress -quiet $MKSQUASHFS_ARGS
    mv "$IMG.tmp" "$IMG"
fi
work="$(mktemp -d "$WORK_DIR/squashfs-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
out="$work/out.img"
x="$work/x"

log "image: $IMG ($(stat -c %s "$IMG") bytes)"
log "sealfs: $("$SEALFS" --version 2>&1 | head -n1)"
log "unsquashfs: $("$UNSQUASHFS" -version 2>&1 | head -n1)"
[[ -x "$MKFS_EROFS" ]] && log "mkfs.erofs: $("$MKFS_EROFS" --version 2>&1 | head -n1)"
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
cat "$IMG" >/dev/null # warm

# Runs one tool once; prints "seconds peak_kib image_bytes".
run_one() {
    local t=$1 tf="$work/time"
    local unsq='"$1" -q -n -d "$2" "$3" >/dev/null'
    rm -rf "$x" "$out"
    case "$t" in
        sealfs) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --squashfs "$IMG" "$out" >/dev/null ;;
        sealfs-noseal) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --no-seal --squashfs "$IMG" "$out" ;;
        sealfs-lz4hc) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --no-seal -z lz4hc -C 65536 --squashfs "$IMG" "$out" ;;
        unsquashfs) /usr/bin/time -o "$tf" -f '%e %M' sh -c "$unsq" _ "$UNSQUASHFS" "$x" "$IMG" ;;
        unsquashfs+build)
            /usr/bin/time -o "$tf" -f '%e %M' sh -c "$unsq"' && "$4" build -q -T 0 --no-seal "$2" "$5"' _ "$UNSQUASHFS" "$x" "$IMG" "$SEALFS" "$out" ;;
        unsquashfs+mkfs.erofs)
            /usr/bin/time -o "$tf" -f '%e %M' sh -c "$unsq"' && "$4" -T0 --quiet "$5" "$2"' _ "$UNSQUASHFS" "$x" "$IMG" "$MKFS_EROFS" "$out" ;;
        unsquashfs+mkfs.erofs-lz4hc)
            /usr/bin/time -o "$tf" -f '%e %M' sh -c "$unsq"' && "$4" -T0 --quiet -zlz4hc -C65536 "$5" "$2"' _ "$UNSQUASHFS" "$x" "$IMG" "$MKFS_EROFS" "$out" ;;
    esac
    local size=0
    [[ -f "$out" ]] && size=$(stat -c %s "$out")
    echo "$(cat "$tf") $size"
}

mkdir -p "$here/results"
csv="$here/results/squashfs-$(date -u +%Y%m%d-%H%M%S).csv"
echo "tool,run,seconds,peak_kib,image_bytes" >"$csv"
for t in "${tools[@]}"; do
    log "warm-up $t"
    run_one "$t" >/dev/null
done
for r in $(seq 1 "$RUNS"); do
    for t in "${tools[@]}"; do
        read -r s m b < <(run_one "$t")
        log "run $r $t: ${s}s, peak ${m} KiB, image $b bytes"
        echo "$t,$r,$s,$m,$b" >>"$csv"
    done
done
rm -rf "$x" "$out"
log "raw runs: $csv"

python3 - "$csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tools = list(dict.fromkeys(r["tool"] for r in rows))
med = {}
print(f"{'tool':28} {'median s':>9} {'min':>7} {'max':>7} {'peak MiB':>9} {'image MB':>9}")
for t in tools:
    s = [float(r["seconds"]) for r in rows if r["tool"] == t]
    m = max(int(r["peak_kib"]) for r in rows if r["tool"] == t)
    b = max(int(r["image_bytes"]) for r in rows if r["tool"] == t)
    med[t] = statistics.median(s)
    print(f"{t:28} {med[t]:9.2f} {min(s):7.2f} {max(s):7.2f} {m/1024:9.1f} {b/1e6:9.1f}")
for a, b in [("sealfs-noseal", "unsquashfs"), ("sealfs-noseal", "unsquashfs+build"),
             ("sealfs-noseal", "unsquashfs+mkfs.erofs"), ("sealfs", "unsquashfs+build"),
             ("sealfs-lz4hc", "unsquashfs+mkfs.erofs-lz4hc")]:
    if a in med and b in med and med[b] > 0:
        print(f"{a} / {b}: {med[a] / med[b]:.2f}x")
EOF
