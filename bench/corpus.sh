#!/usr/bin/env bash
# Fetch and prepare benchmark corpora (see shared benchmarks.md, "Corpora").
#
#   bench/corpus.sh [linux|big|rootfs]...     (default: linux)
#
#   linux  Debian bookworm's linux-source-6.1, unpacked:
#          $CORPUS_DIR/linux/linux-source-6.1/...   (~1.5 GB, ~79 k files)
#   big    the uncompressed tarball of that source as one file:
#          $CORPUS_DIR/big/linux.tar                (~1.4 GB)
#   rootfs `debootstrap --variant=minbase bookworm` (from the system's Debian mirror), with
#          `security.capability` set on a few binaries (setcap):
#          $CORPUS_DIR/rootfs/tree/...              (~190 MB: symlinks, devices, setuid,
#                                                    hard links, xattrs)
#
# CORPUS_DIR defaults to bench/.corpus (gitignored). Idempotent: a corpus that
# is already complete is skipped; a half-made one (interrupted run) is redone.
# The Debian package version used is written to $CORPUS_DIR/<name>/VERSION.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CORPUS_DIR="${CORPUS_DIR:-$here/.corpus}"
PKG="linux-source-6.1"

log() { printf 'corpus: %s\n' "$*" >&2; }
die() { printf 'corpus: error: %s\n' "$*" >&2; exit 1; }

need() {
    command -v "$1" >/dev/null 2>&1 || die "'$1' not found (install package '$2')"
}

# Download the .deb and extract it; print the path of the source tarball.
fetch_tarball() {
    local dl="$CORPUS_DIR/dl"
    mkdir -p "$dl"
    local deb
    deb="$(ls "$dl"/${PKG}_*.deb 2>/dev/null | head -n1 || true)"
    if [[ -z "$deb" ]]; then
        need apt-get apt
        log "downloading $PKG with apt-get download"
        if ! (cd "$dl" && apt-get download "$PKG" >&2); then
            log "apt-get download failed; running apt-get update and retrying"
            apt-get update >&2 || die "apt-get update failed (are you root?)"
            (cd "$dl" && apt-get download "$PKG" >&2) || die "apt-get download $PKG failed"
        fi
        deb="$(ls "$dl"/${PKG}_*.deb | head -n1)"
    else
        log "using cached $(basename "$deb")"
    fi
    local ver
    ver="$(dpkg-deb -f "$deb" Version)"
    local x="$dl/deb-$ver"
    if [[ ! -f "$x/.done" ]]; then
        need dpkg-deb dpkg
        log "extracting $(basename "$deb")"
        rm -rf "$x"
        mkdir -p "$x"
        dpkg-deb -x "$deb" "$x"
        touch "$x/.done"
    fi
    local tarball
    tarball="$(ls "$x"/usr/src/${PKG}.tar.xz 2>/dev/null | head -n1 || true)"
    [[ -n "$tarball" ]] || die "no usr/src/${PKG}.tar.xz inside $(basename "$deb")"
    printf '%s\t%s\n' "$tarball" "$ver"
}

xz_cat() {
    # Multi-threaded decompression where xz supports it (xz >= 5.4).
    xz -dc -T0 "$1" 2>/dev/null || xz -dc "$1"
}

prepare_linux() {
    local out="$CORPUS_DIR/linux"
    if [[ -f "$out/.done" && -d "$out/$PKG" ]]; then
        log "linux: already prepared at $out/$PKG ($(cat "$out/VERSION" 2>/dev/null || echo '?'))"
        return
    fi
    need xz xz-utils
    local info tarball ver
    info="$(fetch_tarball)"
    tarball="${info%%$'\t'*}"
    ver="${info#*$'\t'}"
    local tmp="$CORPUS_DIR/linux.tmp"
    rm -rf "$tmp" "$out"
    mkdir -p "$tmp"
    log "linux: unpacking $(basename "$tarball") ($ver) into $out (takes a few minutes)"
    xz_cat "$tarball" | tar -x -C "$tmp" -f -
    [[ -d "$tmp/$PKG" ]] || die "tarball did not contain $PKG/"
    printf '%s %s\n' "$PKG" "$ver" >"$tmp/VERSION"
    touch "$tmp/.done"
    mv "$tmp" "$out"
    local files dirs bytes
    files="$(find "$out/$PKG" -type f | wc -l)"
    dirs="$(find "$out/$PKG" -type d | wc -l)"
    bytes="$(du -sb "$out/$PKG" | cut -f1)"
    log "linux: done: $files files, $dirs dirs, $bytes bytes"
}

prepare_big() {
    local out="$CORPUS_DIR/big"
    if [[ -f "$out/.done" && -f "$out/linux.tar" ]]; then
        log "big: already prepared at $out/linux.tar ($(cat "$out/VERSION" 2>/dev/null || echo '?'))"
        return
    fi
    need xz xz-utils
    local info tarball ver
    info="$(fetch_tarball)"
    tarball="${info%%$'\t'*}"
    ver="${info#*$'\t'}"
    rm -rf "$out"
    mkdir -p "$out"
    log "big: decompressing $(basename "$tarball") ($ver) to $out/linux.tar"
    xz_cat "$tarball" >"$out/linux.tar.tmp"
    mv "$out/linux.tar.tmp" "$out/linux.tar"
    printf '%s %s\n' "$PKG" "$ver" >"$out/VERSION"
    touch "$out/.done"
    log "big: done: $(stat -c %s "$out/linux.tar") bytes"
}

prepare_rootfs() {
    local out="$CORPUS_DIR/rootfs"
    if [[ -f "$out/.done" && -d "$out/tree" ]]; then
        log "rootfs: already prepared at $out/tree ($(cat "$out/VERSION" 2>/dev/null || echo '?'))"
        return
    fi
    need debootstrap debootstrap
    need setcap libcap2-bin
    [[ $(id -u) == 0 ]] || die "rootfs: debootstrap needs root"
    local mirror
    mirror="$(awk '/^URIs:/ && $2 ~ /debian$/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
    mirror="${mirror:-http://deb.debian.org/debian}"
    local tmp="$CORPUS_DIR/rootfs.tmp"
    rm -rf "$tmp" "$out"
    mkdir -p "$tmp"
    log "rootfs: debootstrap --variant=minbase bookworm from $mirror (a few minutes)"
    debootstrap --variant=minbase bookworm "$tmp/tree" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
        { tail -n 20 "$tmp/debootstrap.log" >&2; die "debootstrap failed"; }
    # File capabilities, as a real image carries them (security.capability xattrs).
    local b
    for b in usr/bin/ping usr/bin/newgidmap usr/bin/newuidmap usr/bin/dpkg usr/bin/apt; do
        [[ -f "$tmp/tree/$b" ]] && setcap cap_net_raw,cap_setuid+ep "$tmp/tree/$b"
    done
    printf 'debootstrap minbase bookworm %s\n' "$(date -u +%F)" >"$tmp/VERSION"
    rm -f "$tmp/debootstrap.log"
    touch "$tmp/.done"
    mv "$tmp" "$out"
    log "rootfs: done: $(find "$out/tree" -xdev | wc -l) entries, $(du -sb "$out/tree" | cut -f1) bytes"
}

main() {
    local which=("$@")
    [[ ${#which[@]} -gt 0 ]] || which=(linux)
    mkdir -p "$CORPUS_DIR"
    for c in "${which[@]}"; do
        case "$c" in
            linux) prepare_linux ;;
            big) prepare_big ;;
            rootfs) prepare_rootfs ;;
            all) prepare_linux; prepare_big; prepare_rootfs ;;
            -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
            *) die "unknown corpus '$c' (known: linux, big, rootfs, all)" ;;
        esac
    done
}

main "$@"
