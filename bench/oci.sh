#!/usr/bin/env bash
# Build from a multi-layer OCI image: `sealfs build --oci LAYOUT:REF` against `umoci unpack` +
# `sealfs build DIR` (the way there without an OCI importer), and, with docker-registry and
# skopeo installed, `sealfs build --oci oci+http://...` from a registry on loopback against the
# same layout on disk; interleaved (A B C ... A B C ...), median of RUNS after one untimed
# warm-up of each, with min, max and peak RSS (GNU time).
#
#   bench/oci.sh
#
# The image (made once, into $CORPUS_DIR/oci/L, by umoci from Debian packages: nothing but
# Debian's archive is fetched): six gzip layers,
#   1  debootstrap --variant=minbase bookworm
#   2  golang-1.19-go                                   (dpkg-deb -x of the package)
#   3  golang-1.19-src, perl-modules-5.36, libpython3.11-stdlib
#   4  openjdk-17-jre-headless
#   5  libllvm14, llvm-14, libclang-cpp14, gcc-12, cpp-12, libicu72
#   6  deletions: /usr/share/doc, /usr/share/man, /usr/share/locale (umoci writes whiteouts)
#
# Environment:
#   RUNS=5            timed runs per tool
#   TOOLS="oci unpack+build registry"   what to run (each name below)
#   SEALFS=target/release/sealfs
#   CORPUS_DIR=bench/.corpus
#   WORK_DIR=$CORPUS_DIR       where images and unpacked trees go (a real disk, not tmpfs)
#
# Commands timed (every inode's time fixed to 0, plain EROFS, default threads; page cache warm):
#   oci            sealfs build -q -T 0 --no-seal --oci L:bench OUT
#   unpack+build   umoci unpack --image L:bench B && sealfs build -q -T 0 --no-seal B/rootfs OUT
#   registry       sealfs build -q -T 0 --no-seal --oci oci+http://127.0.0.1:PORT/bench:v1 OUT
# Unpacked trees are removed between runs, untimed. The images of all three are checked to be
# byte-identical before timing.
#
# Writes bench/results/oci-<UTC date>.csv (raw runs) and prints the table; docs are not touched.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
RUNS="${RUNS:-5}"
TOOLS="${TOOLS:-oci unpack+build registry}"
SEALFS="${SEALFS:-$repo/target/release/sealfs}"
CORPUS_DIR="${CORPUS_DIR:-$here/.corpus}"
WORK_DIR="${WORK_DIR:-$CORPUS_DIR}"

log() { printf '[oci %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf 'oci.sh: error: %s\n' "$*" >&2; exit 1; }

[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
[[ -x "$SEALFS" ]] || die "sealfs binary '$SEALFS' not found (cargo build --release)"
command -v umoci >/dev/null || die "umoci not found (apt-get install umoci)"
read -r -a tools <<<"$TOOLS"
for t in "${tools[@]}"; do
    case "$t" in
        oci|unpack+build) ;;
        registry)
            command -v skopeo >/dev/null || die "registry: skopeo not found (apt-get install skopeo)"
            [[ -x /usr/bin/docker-registry ]] || die "registry: docker-registry not found (apt-get install docker-registry)" ;;
        *) die "unknown tool '$t'" ;;
    esac
done

L="$CORPUS_DIR/oci/L"
make_image() {
    command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
    local t
    t="$(mktemp -d "$WORK_DIR/oci-make.XXXXXX")"
    rm -rf "$L"
    mkdir -p "$(dirname "$L")"
    umoci init --layout "$L"
    umoci new --image "$L:bench"
    # Each layer: a fresh bundle of the image so far, filled, repacked (one new layer).
    layer() {
        rm -rf "$t/b"
        umoci unpack --image "$L:bench" "$t/b" >/dev/null
        "$@"
        umoci repack --image "$L:bench" "$t/b"
        log "layer: $(du -sh "$t/b/rootfs" | cut -f1) unpacked so far"
    }
    debs() {
        mkdir -p "$t/debs"
        (cd "$t/debs" && apt-get download "$@" >/dev/null)
        for p in "$@"; do dpkg-deb -x "$t/debs/${p}"_*.deb "$t/b/rootfs"; done
    }
    log "making the image (debootstrap, apt-get download, umoci repack)"
    layer debootstrap --variant=minbase bookworm "$t/b/rootfs" >/dev/null
    layer debs golang-1.19-go
    layer debs golang-1.19-src perl-modules-5.36 libpython3.11-stdlib
    layer debs openjdk-17-jre-headless
    layer debs libllvm14 llvm-14 libclang-cpp14 gcc-12 cpp-12 libicu72
    layer rm -rf "$t/b/rootfs/usr/share/doc" "$t/b/rootfs/usr/share/man" "$t/b/rootfs/usr/share/locale"
    umoci gc --layout "$L"
    rm -rf "$t"
}
[[ -f "$L/index.json" ]] || make_image

work="$(mktemp -d "$WORK_DIR/oci-bench.XXXXXX")"
registry_pid=
cleanup() {
    [[ -n "$registry_pid" ]] && kill "$registry_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
out="$work/out.img"
b="$work/b"

layers_bytes=$(python3 -c '
import json, sys
L = sys.argv[1]
i = json.load(open(L + "/index.json"))
m = json.load(open(L + "/blobs/sha256/" + i["manifests"][0]["digest"][7:]))
print(len(m["layers"]), sum(l["size"] for l in m["layers"]))' "$L")
log "image: $L, $layers_bytes (layers, compressed bytes)"
log "sealfs: $("$SEALFS" --version 2>&1 | head -n1); $(umoci --version)"
log "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
cat "$L"/blobs/sha256/* >/dev/null # warm

ref=
if [[ " ${tools[*]} " == *" registry "* ]]; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    mkdir -p "$work/registry"
    cat >"$work/registry/config.yml" <<YML
version: 0.1
log:
  level: error
storage:
  cache:
    blobdescriptor: inmemory
  filesystem:
    rootdirectory: $work/registry/storage
http:
  addr: 127.0.0.1:$port
YML
    /usr/bin/docker-registry serve "$work/registry/config.yml" >"$work/registry/log" 2>&1 &
    registry_pid=$!
    sleep 1
    skopeo copy -q --dest-tls-verify=false "oci:$L:bench" "docker://127.0.0.1:$port/bench:v1"
    ref="oci+http://127.0.0.1:$port/bench:v1"
fi

# Runs one tool once; prints "seconds peak_kib image_bytes".
run_one() {
    local t=$1 tf="$work/time"
    rm -rf "$b" "$out"
    case "$t" in
        oci) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --no-seal --oci "$L:bench" "$out" ;;
        registry) /usr/bin/time -o "$tf" -f '%e %M' "$SEALFS" build -q -T 0 --no-seal --oci "$ref" "$out" ;;
        unpack+build)
            /usr/bin/time -o "$tf" -f '%e %M' sh -c 'umoci unpack --image "$1" "$2" >/dev/null && "$3" build -q -T 0 --no-seal "$2/rootfs" "$4"' _ "$L:bench" "$b" "$SEALFS" "$out" ;;
    esac
    local size=0
    [[ -f "$out" ]] && size=$(stat -c %s "$out")
    echo "$(cat "$tf") $size"
}

# The same image every way.
first=
for t in "${tools[@]}"; do
    log "warm-up $t"
    run_one "$t" >/dev/null
    sum=$(sha256sum "$out" | cut -d' ' -f1)
    [[ -z "$first" || "$first" == "$sum" ]] || die "$t gave another image than ${tools[0]}"
    first=$sum
done
log "every tool gave the same image (sha256 $first)"

mkdir -p "$here/results"
csv="$here/results/oci-$(date -u +%Y%m%d-%H%M%S).csv"
echo "tool,run,seconds,peak_kib,image_bytes" >"$csv"
for r in $(seq 1 "$RUNS"); do
    for t in "${tools[@]}"; do
        read -r s m sz < <(run_one "$t")
        log "run $r $t: ${s}s, peak ${m} KiB, image $sz bytes"
        echo "$t,$r,$s,$m,$sz" >>"$csv"
    done
done
rm -rf "$b" "$out"
log "raw runs: $csv"

python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
tools = list(dict.fromkeys(r["tool"] for r in rows))
med = {}
print(f"{'tool':14} {'median s':>9} {'min':>7} {'max':>7} {'peak MiB':>9} {'image MB':>9}")
for t in tools:
    s = [float(r["seconds"]) for r in rows if r["tool"] == t]
    m = max(int(r["peak_kib"]) for r in rows if r["tool"] == t)
    b = max(int(r["image_bytes"]) for r in rows if r["tool"] == t)
    med[t] = statistics.median(s)
    print(f"{t:14} {med[t]:9.2f} {min(s):7.2f} {max(s):7.2f} {m/1024:9.1f} {b/1e6:9.1f}")
for a, b in [("oci", "unpack+build"), ("registry", "oci")]:
    if a in med and b in med and med[b] > 0:
        print(f"{a} / {b}: {med[a] / med[b]:.2f}x")
PY
