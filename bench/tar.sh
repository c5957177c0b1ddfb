#!/usr/bin/env bash
# Build from a tar archive: `sealfs build --tar` against mkfs.erofs 1.9 `--tar=f`, sqfstar 4.7, `tar -x` alone
# and `tar -x` + `sealfs build DIR`, on the `linux` tarball (bench/corpus.sh big), interleaved
# (A B C ... A B C ...), median of RUNS after one untimed warm-up of each, with min, max and peak
# RSS (GNU time).
#
#   bench/tar.sh
#
# Environment:
#   RUNS=5            timed runs per tool
#   TOOLS="sealfs sealfs-noseal sealfs-stdin mkfs.erofs sqfstar tar-x tar-x+build sealfs-lz4hc mkfs.erofs-lz4hc sqfstar-lz4hc"
#                     what to run (each name below)
#   SEALFS=target/release/sealfs
#   MKFS_EROFS=target/oracles/erofs-utils-1.9/bin/mkfs.erofs   (scripts/build-oracles.sh)
#   SQFSTAR=target/oracles/squashfs-tools-4.7/bin/sqfstar      (scripts/build-oracles.sh)
#   CORPUS_DIR=bench/.corpus   (bench/corpus.sh big fills it: $CORPUS_DIR/big/linux.tar)
#   WORK_DIR=$CORPUS_DIR       where images and extractions go (a real disk, not tmpfs)
#
# Commands timed (every inode's time fixed to 0, default threads; page cache warm):
#   sealfs          sealfs build -q -T 0 --tar linux.tar OUT            (sealed; data read in place)
#   sealfs-noseal   sealfs build -q -T 0 --no-seal --tar linux.tar OUT  (plain EROFS, as mkfs.erofs)
#   sealfs-stdin    sealfs build -q -T 0 --no-seal --tar - OUT < linux.tar (read once, data spilled)
#   mkfs.erofs      mkfs.erofs -T0 --quiet --tar=f OUT linux.tar
#   sqfstar         sqfstar -no-compression -mkfs-time 0 -all-time 0 -quiet -no-progress OUT < linux.tar
#   tar-x           tar -xf linux.tar -C DIR
#   tar-x+build     tar -xf linux.tar -C DIR && sealfs build -q -T 0 --no-seal DIR OUT
#   sealfs-lz4hc    sealfs build -q -T 0 --no-seal -z lz4hc -C 65536 --tar linux.tar OUT
#   mkfs.erofs-lz4hc mkfs.erofs -T0 --quiet -zlz4hc -C65536 --tar=f OUT linux.tar
#   sqfstar-lz4hc   sqfstar -comp lz4 -Xhc -b 65536 -mkfs-time 0 -all-time 0 -quiet -no-progress OUT < linux.tar
# Extraction directories are removed between runs, untimed.
#
# Writes bench/results/tar-<UTC date>.csv (raw runs) and prints the table; docs are not touched.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
RUNS="${RUNS:-5}"
TOOLS="${TOOLS:-sealfs sealfs-noseal sealfs-stdin mkfs.erofs sqfstar tar-x tar-x+build sealfs-lz4hc mkfs.erofs-lz4hc sqfstar-lz4hc}"
SEALFS="${SEALFS:-$repo/target/release/sealfs}"
MKFS_EROFS="${MKFS_EROFS:-$repo/target/oracles/erofs-utils-1.9/bin/mkfs.erofs}"
SQFSTAR="${SQFSTAR:-$repo/target/oracles/squashfs-tools-4.7/bin/sqfstar}"
CORPUS_DIR="${CORPUS_DIR:-$here/.corpus}"
WORK_DIR="${WORK_DIR:-$CORPUS_DIR}"

log() { printf '[tar %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf 'tar.sh: error: %s\n' "$*" >&2; exit 1; }

[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
[[ -x "$SEALFS" ]] || die "sealfs binary '$SEALFS' not found (cargo build --release)"
read -r -a tools <<<"$TOOLS"
for t in "${tools[@]}"; do
    case "$t" in
        mkfs.erofs*) [[ -x "$MKFS_EROFS" ]] || die "mkfs.erofs '$MKFS_EROFS' not found (scripts/build-oracles.sh, or set MKFS_EROFS)" ;;
        sqfstar*) [[ -x "$SQFSTAR" ]] || die "sqfstar '$SQFSTAR' not found (scripts/build-oracles.sh, or set SQFSTAR)" ;;
        sealfs|sealfs-noseal|sealfs-stdin|sealfs-lz4hc|tar-x|tar-x+build) ;;
        *) die "unknown tool '$t'" ;;
    esac
done

TAR="$CORPUS_DIR/big/linux.tar"
[[ -f "$TAR" ]] || CORPUS_DIR="$CORPUS_DIR" "$here/corpus.sh" big
[[ -f "$TAR" ]] || die "$TAR missing after bench/corpus.sh big"
work="$(mktemp -d "$WORK_DIR/tar-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
out="$work/out.img"
x="$work/x"

log "archive: $TAR ($(stat -c %s "$TAR") bytes)"
log "sealfs: $("$SEALFS" --version 2>&1 | head -n1)"
[[ -x "$MKFS_EROFS" ]] && log "mkfs.erofs: $("$MKFS_EROFS" --version 2>&1 | head -n1)"
[[ -x "$SQFSTAR" ]] && log "sqfstar: $("$SQFSTAR" -version 2>&1 | head -n1)"
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
cat "$TAR" >/dev/null # warm

# Runs one tool once; prints "seconds peak_kib image_bytes".
run_one() {
    local t=$1 tf="$work/time"
    rm -rf "$x" "$out"
    case "$t" in
        sealfs) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --tar "$TAR" "$out" >/dev/null ;;
        sealfs-noseal) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --no-seal --tar "$TAR" "$out" ;;
        sealfs-stdin) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --no-seal --tar - "$out" <"$TAR" ;;
        sealfs-lz4hc) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --no-seal -z lz4hc -C 65536 --tar "$TAR" "$out" ;;
        mkfs.erofs) /usr/bin/time -o "$tf" -f '%e %M' "$MKFS_EROFS" -T0 --quiet --tar=f "$out" "$TAR" ;;
        mkfs.erofs-lz4hc) /usr/bin/time -o "$tf" -f '%e %M' "$MKFS_EROFS" -T0 --quiet -zlz4hc -C65536 --tar=f "$out" "$TAR" ;;
        sqfstar) /usr/bin/time -o "$tf" -f '%e %M' "$SQFSTAR" -no-compression -mkfs-time 0 -all-time 0 -quiet -no-progress "$out" <"$TAR" ;;
        sqfstar-lz4hc) /usr/bin/time -o "$tf" -f '%e %M' "$SQFSTAR" -comp lz4 -Xhc -b 65536 -mkfs-time 0 -all-time 0 -quiet -no-progress "$out" <"$TAR" ;;
        tar-x) mkdir "$x"; /usr/bin/time -o "$tf" -f '%e %M' tar -xf "$TAR" -C "$x" ;;
        tar-x+build)
            mkdir "$x"
            /usr/bin/time -o "$tf" -f '%e %M' sh -c 'tar -xf "$1" -C "$2" && "$3" build -q -T 0 --no-seal "$2" "$4"' _ "$TAR" "$x" "$SEALFS" "$out" ;;
    esac
    local size=0
    [[ -f "$out" ]] && size=$(stat -c %s "$out")
    echo "$(cat "$tf") $size"
}

mkdir -p "$here/results"
csv="$here/results/tar-$(date -u +%Y%m%d-%H%M%S).csv"
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
print(f"{'tool':18} {'median s':>9} {'min':>7} {'max':>7} {'peak MiB':>9} {'image MB':>9}")
for t in tools:
    s = [float(r["seconds"]) for r in rows if r["tool"] == t]
    m = max(int(r["peak_kib"]) for r in rows if r["tool"] == t)
    b = max(int(r["image_bytes"]) for r in rows if r["tool"] == t)
    med[t] = statistics.median(s)
    print(f"{t:18} {med[t]:9.2f} {min(s):7.2f} {max(s):7.2f} {m/1024:9.1f} {b/1e6:9.1f}")
for a, b in [("sealfs-noseal", "mkfs.erofs"), ("sealfs-stdin", "mkfs.erofs"), ("sealfs-noseal", "sqfstar"),
             ("sealfs-lz4hc", "sqfstar-lz4hc"), ("sealfs-noseal", "tar-x"),
             ("sealfs", "tar-x"), ("sealfs-noseal", "tar-x+build"), ("sealfs-lz4hc", "mkfs.erofs-lz4hc")]:
    if a in med and b in med and med[b] > 0:
        print(f"{a} / {b}: {med[a] / med[b]:.2f}x")
EOF
