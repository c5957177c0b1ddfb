#!/usr/bin/env bash
# Build benchmark: image the `linux` corpus, uncompressed, with each tool.
#
#   bench/build.sh
#
# Environment:
#   RUNS=5                      timed runs per tool (after one untimed warm-up each)
#   TOOLS="sealfs sealfs-noseal mkfs.erofs mksquashfs"
#                               tools to compare, run interleaved A B C A B C ...
#                               (e.g. TOOLS="mkfs.erofs mksquashfs" before sealfs can build)
#   SEALFS=target/release/sealfs  the sealfs binary
#   MKFS_EROFS=mkfs.erofs       the mkfs.erofs to compare with (e.g. target/oracles/erofs-utils-1.9/bin/mkfs.erofs,
#                               erofs-utils 1.9 from scripts/build-oracles.sh); the report names its version
#   CORPUS_DIR=bench/.corpus    corpus cache (bench/corpus.sh fills it if empty)
#   WORK_DIR=$CORPUS_DIR        where the images are written (a temporary folder is made
#                               inside; it must be a real disk, not tmpfs)
#   NO_DOCS=1                   do not touch docs/benchmarks.md / docs/bench-build.png
#
# Commands timed (same fixed timestamp 0 for every inode, default thread counts):
#   sealfs build -q -T 0 SRC OUT                 (sealed: EROFS + Merkle tree + trailer)
#   sealfs build -q --no-seal -T 0 SRC OUT       (plain EROFS, to show what sealing adds)
#   mkfs.erofs -T0 --quiet OUT SRC                 (-T sets every inode's time, compact inodes)
#   mksquashfs SRC OUT -noappend -noI -noId -noD -noF -noX -mkfs-time 0 -all-time 0
#              -no-progress -quiet                 (squashfs-tools 4.5 has no -no-compression)
#
# Page cache: warm (one untimed read of the whole corpus first). Wall time and peak
# RSS come from GNU time (`/usr/bin/time -f '%e %M'`), image size from `stat -c %s`.
#
# Writes: bench/results/build-<UTC date>.csv (raw runs), the section
# "Build: linux corpus, uncompressed" of docs/benchmarks.md, and docs/bench-build.png.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"

RUNS="${RUNS:-5}"
TOOLS="${TOOLS:-sealfs sealfs-noseal mkfs.erofs mksquashfs}"
SEALFS="${SEALFS:-$repo/target/release/sealfs}"
CORPUS_DIR="${CORPUS_DIR:-$here/.corpus}"
WORK_DIR="${WORK_DIR:-$CORPUS_DIR}"
SRC="$CORPUS_DIR/linux/linux-source-6.1"
PY="${PYTHON:-python3}"
MKFS_EROFS="${MKFS_EROFS:-mkfs.erofs}"   # e.g. target/oracles/erofs-utils-1.9/bin/mkfs.erofs (1.9, scripts/build-oracles.sh)

log() { printf '[build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf 'build: error: %s\n' "$*" >&2; exit 1; }

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$RUNS'"
read -r -a tools <<<"$TOOLS"
[[ ${#tools[@]} -gt 0 ]] || die "TOOLS is empty"

# --- tools -----------------------------------------------------------------
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
command -v "$PY" >/dev/null || die "python3 not found"

declare -A version
for t in "${tools[@]}"; do
    case "$t" in
        sealfs|sealfs-noseal)
            [[ -x "$SEALFS" ]] || die "sealfs binary '$SEALFS' not found; build it (cargo build --release) or set SEALFS, or run with TOOLS=\"mkfs.erofs mksquashfs\""
            "$SEALFS" build --help >/dev/null 2>&1 ||
                die "'$SEALFS build --help' failed: this sealfs has no working 'build' command; run with TOOLS=\"mkfs.erofs mksquashfs\""
            version[$t]="$("$SEALFS" --version 2>&1 | head -n1)"
            ;;
        mkfs.erofs)
            command -v "$MKFS_EROFS" >/dev/null || die "mkfs.erofs not found (apt-get install erofs-utils)"
            # erofs-utils 1.5 has no -V but prints its banner before complaining.
            version[$t]="$({ "$MKFS_EROFS" --version 2>/dev/null || "$MKFS_EROFS" -V 2>/dev/null || true; } | head -n1)"
            [[ -n "${version[$t]}" ]] || version[$t]="erofs-utils $(dpkg-query -W -f '${Version}' erofs-utils 2>/dev/null || echo '?')"
            ;;
        mksquashfs)
            command -v mksquashfs >/dev/null || die "mksquashfs not found (apt-get install squashfs-tools)"
            version[$t]="$(mksquashfs -version 2>&1 | head -n1)"
            ;;
        *) die "unknown tool '$t' (known: sealfs sealfs-noseal mkfs.erofs mksquashfs)" ;;
    esac
    log "tool $t: ${version[$t]}"
done

# --- corpus ----------------------------------------------------------------
if [[ ! -f "$CORPUS_DIR/linux/.done" ]]; then
    log "corpus 'linux' missing, preparing it"
    CORPUS_DIR="$CORPUS_DIR" "$here/corpus.sh" linux
fi
[[ -d "$SRC" ]] || die "corpus tree $SRC not found"
corpus_version="$(cat "$CORPUS_DIR/linux/VERSION" 2>/dev/null || echo 'linux-source-6.1 ?')"
corpus_files="$(find "$SRC" -type f | wc -l)"
corpus_dirs="$(find "$SRC" -type d | wc -l)"
corpus_bytes="$(du -sb "$SRC" | cut -f1)"
log "corpus: $corpus_version, $corpus_files files, $corpus_dirs dirs, $corpus_bytes bytes"

# --- work dir --------------------------------------------------------------
mkdir -p "$WORK_DIR"
tmp="$(mktemp -d "$WORK_DIR/build-bench.XXXXXX")"
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
work_fs="$(findmnt -n -o FSTYPE -T "$tmp" 2>/dev/null || stat -f -c %T "$tmp")"
[[ "$work_fs" != tmpfs && "$work_fs" != ramfs ]] || die "WORK_DIR $WORK_DIR is on $work_fs; use a real disk"
need_bytes=$((corpus_bytes * 3 / 2))
avail_bytes=$(($(stat -f -c '%a * %S' "$tmp")))
((avail_bytes > need_bytes)) || die "not enough free space in $WORK_DIR ($avail_bytes < $need_bytes bytes)"

# --- metadata --------------------------------------------------------------
stamp="$(date -u +%Y-%m-%dT%H%M%SZ)"
date_h="$(date -u)"
cpu="$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || echo '?')"
mem_gib="$(awk '/^MemTotal/ {printf "%.1f", $2/1048576}' /proc/meminfo)"
machine="nproc $(nproc), $cpu, ${mem_gib} GiB RAM, kernel $(uname -r), images on $work_fs"

build_cmd() { # tool out -> sets cmd array
    case "$1" in
        sealfs) cmd=("$SEALFS" build -q -T 0 "$SRC" "$2") ;;
        sealfs-noseal) cmd=("$SEALFS" build -q --no-seal -T 0 "$SRC" "$2") ;;
        mkfs.erofs) cmd=("$MKFS_EROFS" -T0 --quiet "$2" "$SRC") ;;
        mksquashfs) cmd=(mksquashfs "$SRC" "$2" -noappend -noI -noId -noD -noF -noX
            -mkfs-time 0 -all-time 0 -no-progress -quiet) ;;
    esac
}

mkdir -p "$here/results"
csv="$here/results/build-$stamp.csv"
{
    echo "# benchmark: build, corpus linux ($corpus_version: $corpus_files files, $corpus_dirs dirs, $corpus_bytes bytes), uncompressed, page cache warm"
    echo "# date: $date_h"
    echo "# machine: $machine"
    for t in "${tools[@]}"; do echo "# version $t: ${version[$t]}"; done
    for t in "${tools[@]}"; do
        cmd=()
        build_cmd "$t" OUT
        cmd=("${cmd[@]/#$SRC/SRC}")
        cmd[0]="$(basename "${cmd[0]}")"
        echo "# command $t: ${cmd[*]}"
    done
    echo "tool,run,cache,wall_s,peak_rss_kib,image_bytes"
} >"$csv"

# --- runs ------------------------------------------------------------------

run_one() { # tool run-label -> appends CSV row unless warm-up
    local t="$1" label="$2" out="$tmp/image" cmd=()
    build_cmd "$t" "$out"
    rm -f "$out"
    if ! /usr/bin/time -f '%e %M' -o "$tmp/time" "${cmd[@]}" >"$tmp/log" 2>&1; then
        tail -n 20 "$tmp/log" >&2
        die "$t failed: ${cmd[*]}"
    fi
    [[ -f "$out" ]] || die "$t wrote no image at $out"
    local wall rss size
    # GNU time puts "Command exited with non-zero status" first on failure;
    # the numbers are always its last line.
    read -r wall rss < <(tail -n1 "$tmp/time")
    size="$(stat -c %s "$out")"
    rm -f "$out"
    sync # write-back of this run's pages must not land in the next run
    log "$t $label: ${wall}s, peak RSS ${rss} KiB, image $size bytes"
    [[ "$label" == warm-up ]] || echo "$t,$label,warm,$wall,$rss,$size" >>"$csv"
}

log "warming the page cache: one untimed read of the corpus"
tar -C "$SRC" -cf - . | cat >/dev/null # (tar skips reading file data when writing to /dev/null itself)

log "warm-up: one untimed build per tool"
for t in "${tools[@]}"; do run_one "$t" warm-up; done
for ((i = 1; i <= RUNS; i++)); do
    log "round $i/$RUNS"
    for t in "${tools[@]}"; do run_one "$t" "$i"; done
done
log "raw results: ${csv#$repo/}"

# --- report ----------------------------------------------------------------
if [[ "${NO_DOCS:-}" == 1 ]]; then
    "$PY" "$here/report_build.py" "$csv"
    exit 0
fi
mkdir -p "$repo/docs"
"$PY" "$here/report_build.py" "$csv" --docs "$repo/docs/benchmarks.md" --chart bench-build.png
if ! "$PY" -c 'import matplotlib' 2>/dev/null; then
    log "matplotlib missing; installing it with pip"
    "$PY" -m pip install --quiet matplotlib >&2 || log "warning: pip install matplotlib failed"
fi
if "$PY" -c 'import matplotlib' 2>/dev/null; then
    "$PY" "$here/plot_build.py" "$csv" "$repo/docs/bench-build.png"
    log "chart: docs/bench-build.png"
else
    log "warning: no matplotlib, chart not drawn"
fi
log "report: docs/benchmarks.md, section 'Build: linux corpus, uncompressed'"
