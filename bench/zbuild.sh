#!/usr/bin/env bash
# Compressed build benchmark: image the `linux` corpus with lz4hc and zstd, against mkfs.erofs
# (lz4hc; erofs-utils 1.5 has no zstd) and mksquashfs (same algorithm, same block size).
#
#   bench/zbuild.sh
#
# Environment:
#   RUNS=5                      timed runs per tool (after one untimed warm-up each)
#   TOOLS="sealfs-lz4hc-64k mkfs.erofs-lz4hc-64k sealfs-zstd-64k mksquashfs-lz4hc-64k
#          mksquashfs-zstd-64k sealfs-lz4hc-4k mkfs.erofs-lz4hc-4k"
#                               rows to compare, run interleaved A B C A B C ...
#   LZ4HC_LEVEL=9               lz4hc level for sealfs and mkfs.erofs (9 is mkfs.erofs 1.5's default:
#                               `-zlz4hc` and `-zlz4hc,9` give byte-identical images)
#   ZSTD_LEVEL=3                zstd level for sealfs and mksquashfs (sealfs' default; mksquashfs'
#                               own default is 15, far slower, so it is set explicitly)
#   SEALFS=target/release/sealfs  the sealfs binary
#   MKFS_EROFS=mkfs.erofs       the mkfs.erofs to compare with (e.g. target/oracles/erofs-utils-1.9/bin/mkfs.erofs,
#                               erofs-utils 1.9 from scripts/build-oracles.sh); the report names its version
#   CORPUS_DIR=bench/.corpus    corpus cache (bench/corpus.sh fills it if empty)
#   CORPUS=linux                the tree: linux, or rootfs (bench/corpus.sh rootfs; size rows only)
#   WORK_DIR=$CORPUS_DIR        where the images are written (a temporary folder is made
#                               inside; it must be a real disk, not tmpfs)
#   NO_DOCS=1                   do not touch docs/benchmarks.md / docs/bench-zbuild.png
#   WARMUP=0                    skip the untimed warm-up build per tool (for rows of minutes)
#
# Commands timed (fixed timestamp 0, default thread counts; sealfs images are sealed):
#   sealfs build -q -T 0 -z lz4hc,L -C 65536 SRC OUT        (and -C 4096 for the -4k row)
#   mkfs.erofs -T0 --quiet -zlz4hc,L -C65536 OUT SRC        (and -C4096)
#   mkfs.erofs -T0 --quiet -zzstd,L -C65536 OUT SRC         (erofs-utils 1.6+; -1m rows: -C1048576)
#   sealfs build -q -T 0 -z zstd,L -C 65536 SRC OUT
#   mksquashfs SRC OUT -noappend -comp lz4 -Xhc -b 65536 -mkfs-time 0 -all-time 0 -no-progress -quiet
#   mksquashfs SRC OUT -noappend -comp zstd -Xcompression-level L -b 65536 (same time flags)
# Size rows (TOOLS=... with NO_DOCS=1; the report section above is for the rows before):
#   sealfs-small  sealfs build -q -T 0 --preset small SRC OUT
#   sealfs-fast   sealfs build -q -T 0 --preset fast SRC OUT
#   sealfs-zstd-1m-48bit-frag   sealfs build -q -T 0 -z zstd,L -C 1048576 -E 48bit,fragments SRC OUT
#   sealfs-zstd-1m-48bit-frag-m the same with -m 65536 (metadata compressed, the metabox)
#   sealfs-zstd15-small         sealfs build -q -T 0 --preset small -z zstd,15 SRC OUT
#   mksquashfs-zstd15-1m  -comp zstd -Xcompression-level 15 -b 1M;  mksquashfs-xz-1m  -comp xz -b 1M
#   mksquashfs-zstd-128k  -comp zstd -Xcompression-level L -b 128K
#   sealfs-lz4hc-frag-64k  -z lz4hc,L -C 65536 -E fragments;  mkfs.erofs-lz4hc-frag-64k  the same
#
# Page cache: warm (one untimed read of the whole corpus first). Wall time and peak
# RSS (and user and system CPU time) come from GNU time (`/usr/bin/time -f '%e %M %U %S'`), image
# size from `stat -c %s`. CPU time shows the work done whatever the load of the machine.
#
# Writes: bench/results/zbuild-<UTC date>.csv (raw runs), the section
# "Build: linux corpus, compressed" of docs/benchmarks.md, and docs/bench-zbuild.png.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"

RUNS="${RUNS:-5}"
TOOLS="${TOOLS:-sealfs-lz4hc-64k mkfs.erofs-lz4hc-64k sealfs-zstd-64k mksquashfs-lz4hc-64k mksquashfs-zstd-64k sealfs-lz4hc-4k mkfs.erofs-lz4hc-4k}"
LZ4HC_LEVEL="${LZ4HC_LEVEL:-9}"
ZSTD_LEVEL="${ZSTD_LEVEL:-3}"
SEALFS="${SEALFS:-$repo/target/release/sealfs}"
CORPUS_DIR="${CORPUS_DIR:-$here/.corpus}"
WORK_DIR="${WORK_DIR:-$CORPUS_DIR}"
CORPUS="${CORPUS:-linux}"
case "$CORPUS" in
    linux) SRC="$CORPUS_DIR/linux/linux-source-6.1" ;;
    rootfs) SRC="$CORPUS_DIR/rootfs/tree" ;;   # bench/corpus.sh rootfs
    *) printf 'zbuild: error: CORPUS must be linux or rootfs\n' >&2; exit 1 ;;
esac
PY="${PYTHON:-python3}"
MKFS_EROFS="${MKFS_EROFS:-mkfs.erofs}"   # e.g. target/oracles/erofs-utils-1.9/bin/mkfs.erofs (1.9, scripts/build-oracles.sh)

log() { printf '[zbuild %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf 'zbuild: error: %s\n' "$*" >&2; exit 1; }

[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer, got '$RUNS'"
read -r -a tools <<<"$TOOLS"
[[ ${#tools[@]} -gt 0 ]] || die "TOOLS is empty"

# --- tools -----------------------------------------------------------------
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
command -v "$PY" >/dev/null || die "python3 not found"

declare -A version
for t in "${tools[@]}"; do
    case "$t" in
        sealfs-*)
            [[ -x "$SEALFS" ]] || die "sealfs binary '$SEALFS' not found; build it (cargo build --release) or set SEALFS, or leave the sealfs rows out of TOOLS"
            "$SEALFS" build --help >/dev/null 2>&1 ||
                die "'$SEALFS build --help' failed: this sealfs has no working 'build' command; leave the sealfs rows out of TOOLS"
            version[$t]="$("$SEALFS" --version 2>&1 | head -n1)"
            ;;
        mkfs.erofs-*)
            command -v "$MKFS_EROFS" >/dev/null || die "mkfs.erofs not found (apt-get install erofs-utils)"
            # erofs-utils 1.5 has no -V but prints its banner before complaining.
            version[$t]="$({ "$MKFS_EROFS" --version 2>/dev/null || "$MKFS_EROFS" -V 2>/dev/null || true; } | head -n1)"
            [[ -n "${version[$t]}" ]] || version[$t]="erofs-utils $(dpkg-query -W -f '${Version}' erofs-utils 2>/dev/null || echo '?')"
            ;;
        mksquashfs-*)
            command -v mksquashfs >/dev/null || die "mksquashfs not found (apt-get install squashfs-tools)"
            version[$t]="$(mksquashfs -version 2>&1 | head -n1)"
            ;;
        *) die "unknown tool '$t' (known: sealfs-{lz4hc,zstd}-{64k,4k} mkfs.erofs-lz4hc-{64k,4k} mksquashfs-{lz4hc,zstd}-64k, and the size rows above)" ;;
    esac
    log "tool $t: ${version[$t]}"
done

# --- corpus ----------------------------------------------------------------
if [[ ! -f "$CORPUS_DIR/$CORPUS/.done" ]]; then
    log "corpus '$CORPUS' missing, preparing it"
    CORPUS_DIR="$CORPUS_DIR" "$here/corpus.sh" "$CORPUS"
fi
[[ -d "$SRC" ]] || die "corpus tree $SRC not found"
corpus_version="$(cat "$CORPUS_DIR/$CORPUS/VERSION" 2>/dev/null || echo "$CORPUS ?")"
corpus_files="$(find "$SRC" -type f | wc -l)"
corpus_dirs="$(find "$SRC" -type d | wc -l)"
corpus_bytes="$(du -sb "$SRC" | cut -f1)"
log "corpus: $corpus_version, $corpus_files files, $corpus_dirs dirs, $corpus_bytes bytes"

# --- work dir --------------------------------------------------------------
mkdir -p "$WORK_DIR"
tmp="$(mktemp -d "$WORK_DIR/zbuild-bench.XXXXXX")"
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
work_fs="$(findmnt -n -o FSTYPE -T "$tmp" 2>/dev/null || stat -f -c %T "$tmp")"
[[ "$work_fs" != tmpfs && "$work_fs" != ramfs ]] || die "WORK_DIR $WORK_DIR is on $work_fs; use a real disk"
need_bytes=$((corpus_bytes))
avail_bytes=$(($(stat -f -c '%a * %S' "$tmp")))
((avail_bytes > need_bytes)) || die "not enough free space in $WORK_DIR ($avail_bytes < $need_bytes bytes)"

# --- metadata --------------------------------------------------------------
stamp="$(date -u +%Y-%m-%dT%H%M%SZ)"
date_h="$(date -u)"
cpu="$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || echo '?')"
mem_gib="$(awk '/^MemTotal/ {printf "%.1f", $2/1048576}' /proc/meminfo)"
machine="nproc $(nproc), $cpu, ${mem_gib} GiB RAM, kernel $(uname -r), images on $work_fs"

build_cmd() { # tool out -> sets cmd array
    local t="$1" c
    local sqtime=(-mkfs-time 0 -all-time 0 -no-progress -quiet)
    case "$t" in
        # Size rows (issue 16): presets and 48-bit fixed-input clusters against mksquashfs.
        sealfs-small) cmd=("$SEALFS" build -q -T 0 --preset small "$SRC" "$2"); return ;;
        sealfs-fast) cmd=("$SEALFS" build -q -T 0 --preset fast "$SRC" "$2"); return ;;
        sealfs-zstd-1m-48bit-frag) cmd=("$SEALFS" build -q -T 0 -z "zstd,$ZSTD_LEVEL" -C 1048576
            -E 48bit,fragments "$SRC" "$2"); return ;;
        sealfs-zstd-1m-48bit-frag-m) cmd=("$SEALFS" build -q -T 0 -z "zstd,$ZSTD_LEVEL" -C 1048576
            -E 48bit,fragments -m 65536 "$SRC" "$2"); return ;;
        sealfs-zstd15-small) cmd=("$SEALFS" build -q -T 0 --preset small -z zstd,15 "$SRC" "$2"); return ;;
        sealfs-lz4hc-frag-64k) cmd=("$SEALFS" build -q -T 0 -z "lz4hc,$LZ4HC_LEVEL" -C 65536
            -E fragments "$SRC" "$2"); return ;;
        mkfs.erofs-lz4hc-frag-64k) cmd=("$MKFS_EROFS" -T0 --quiet "-zlz4hc,$LZ4HC_LEVEL" -C65536
            -Efragments "$2" "$SRC"); return ;;
        mksquashfs-zstd15-1m) cmd=(mksquashfs "$SRC" "$2" -noappend -comp zstd
            -Xcompression-level 15 -b 1M "${sqtime[@]}"); return ;;
        mksquashfs-xz-1m) cmd=(mksquashfs "$SRC" "$2" -noappend -comp xz -b 1M "${sqtime[@]}"); return ;;
        mksquashfs-zstd-128k) cmd=(mksquashfs "$SRC" "$2" -noappend -comp zstd
            -Xcompression-level "$ZSTD_LEVEL" -b 128K "${sqtime[@]}"); return ;;
    esac
    case "$t" in
        *-1m) c=1048576 ;;
        *-64k) c=65536 ;;
        *-4k) c=4096 ;;
        *) die "tool '$t' must end in -1m, -64k or -4k" ;;
    esac
    case "$t" in
        sealfs-lz4hc-*) cmd=("$SEALFS" build -q -T 0 -z "lz4hc,$LZ4HC_LEVEL" -C "$c" "$SRC" "$2") ;;
        sealfs-zstd-*) cmd=("$SEALFS" build -q -T 0 -z "zstd,$ZSTD_LEVEL" -C "$c" "$SRC" "$2") ;;
        mkfs.erofs-lz4hc-*) cmd=("$MKFS_EROFS" -T0 --quiet "-zlz4hc,$LZ4HC_LEVEL" "-C$c" "$2" "$SRC") ;;
        mkfs.erofs-zstd-*) cmd=("$MKFS_EROFS" -T0 --quiet "-zzstd,$ZSTD_LEVEL" "-C$c" "$2" "$SRC") ;;
        mksquashfs-lz4hc-*) cmd=(mksquashfs "$SRC" "$2" -noappend -comp lz4 -Xhc -b "$c"
            -mkfs-time 0 -all-time 0 -no-progress -quiet) ;;
        mksquashfs-zstd-*) cmd=(mksquashfs "$SRC" "$2" -noappend -comp zstd
            -Xcompression-level "$ZSTD_LEVEL" -b "$c" -mkfs-time 0 -all-time 0 -no-progress -quiet) ;;
        *) die "unknown tool '$t'" ;;
    esac
}

mkdir -p "$here/results"
csv="$here/results/zbuild-$stamp.csv"
{
    echo "# benchmark: build, corpus $CORPUS ($corpus_version: $corpus_files files, $corpus_dirs dirs, $corpus_bytes bytes), compressed (lz4hc level $LZ4HC_LEVEL, zstd level $ZSTD_LEVEL), page cache warm"
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
    echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "tool,run,cache,wall_s,peak_rss_kib,image_bytes,user_s,sys_s"
} >"$csv"

# --- runs ------------------------------------------------------------------

run_one() { # tool run-label -> appends CSV row unless warm-up
    local t="$1" label="$2" out="$tmp/image" cmd=()
    build_cmd "$t" "$out"
    rm -f "$out"
    if ! /usr/bin/time -f '%e %M %U %S' -o "$tmp/time" "${cmd[@]}" >"$tmp/log" 2>&1; then
        tail -n 20 "$tmp/log" >&2
        die "$t failed: ${cmd[*]}"
    fi
    [[ -f "$out" ]] || die "$t wrote no image at $out"
    local wall rss size user sys
    # GNU time puts "Command exited with non-zero status" first on failure;
    # the numbers are always its last line.
    read -r wall rss user sys < <(tail -n1 "$tmp/time")
    size="$(stat -c %s "$out")"
    rm -f "$out"
    sync # write-back of this run's pages must not land in the next run
    log "$t $label: ${wall}s (CPU ${user}s user, ${sys}s sys), peak RSS ${rss} KiB, image $size bytes"
    [[ "$label" == warm-up ]] || echo "$t,$label,warm,$wall,$rss,$size,$user,$sys" >>"$csv"
}

log "warming the page cache: one untimed read of the corpus"
tar -C "$SRC" -cf - . | cat >/dev/null # (tar skips reading file data when writing to /dev/null itself)

if [[ "${WARMUP:-1}" == 1 ]]; then
    log "warm-up: one untimed build per tool"
    for t in "${tools[@]}"; do run_one "$t" warm-up; done
fi
for ((i = 1; i <= RUNS; i++)); do
    log "round $i/$RUNS"
    for t in "${tools[@]}"; do run_one "$t" "$i"; done
done
log "raw results: ${csv#$repo/}"

log "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$csv"

# --- report ----------------------------------------------------------------
if [[ "${NO_DOCS:-}" == 1 ]]; then
    "$PY" "$here/report_zbuild.py" "$csv"
    exit 0
fi
mkdir -p "$repo/docs"
"$PY" "$here/report_zbuild.py" "$csv" --docs "$repo/docs/benchmarks.md" --chart bench-zbuild.png
if "$PY" -c 'import matplotlib' 2>/dev/null; then
    "$PY" "$here/plot_build.py" "$csv" "$repo/docs/bench-zbuild.png" "Build: linux corpus, compressed"
    log "chart: docs/bench-zbuild.png"
else
    log "warning: no matplotlib, chart not drawn"
fi
log "report: docs/benchmarks.md, section 'Build: linux corpus, compressed'"
