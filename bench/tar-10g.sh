#!/usr/bin/env bash
# Peak memory of `sealfs build --tar -` on a 10 GB archive that is never stored: COPIES copies of
# the `linux` tarball (bench/corpus.sh big), each under its own top-level directory (c0/, c1/,
# ...; hard links renamed with them), written as one GNU tar stream by Python's tarfile and piped
# into the build. Default options (sealed). One run; prints seconds, peak RSS (GNU time) and the
# image size, then deletes the image.
#
#   bench/tar-10g.sh
#
# Environment:
#   COPIES=8          copies of linux.tar (8: 10.9 GB, 630k entries)
#   SEALFS=target/release/sealfs
#   CORPUS_DIR=bench/.corpus   ($CORPUS_DIR/big/linux.tar)
#   WORK_DIR=$CORPUS_DIR       where the image goes (a real disk)
#   ARGS=                      more build options (e.g. --no-seal)
#
# Disk: the build reads the stream once and spills file data beside the output (the archive's
# data, 10.9 GB for 8 copies) while the image is written; the copies' files are identical, so the
# image stores most data once (whole-file dedupe; 2.3 GB for 8 copies): about 13 GB at the peak.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
COPIES="${COPIES:-8}"
SEALFS="${SEALFS:-$repo/target/release/sealfs}"
CORPUS_DIR="${CORPUS_DIR:-$here/.corpus}"
WORK_DIR="${WORK_DIR:-$CORPUS_DIR}"
read -r -a args <<<"${ARGS:-}"

die() { printf 'tar-10g.sh: error: %s\n' "$*" >&2; exit 1; }
[[ -x /usr/bin/time ]] || die "/usr/bin/time not found (apt-get install time)"
[[ -x "$SEALFS" ]] || die "sealfs binary '$SEALFS' not found (cargo build --release)"
TAR="$CORPUS_DIR/big/linux.tar"
[[ -f "$TAR" ]] || CORPUS_DIR="$CORPUS_DIR" "$here/corpus.sh" big
[[ -f "$TAR" ]] || die "$TAR missing after bench/corpus.sh big"
work="$(mktemp -d "$WORK_DIR/tar-10g.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# The stream: GNU tar, every member of linux.tar COPIES times, renamed.
gen='
import sys, tarfile
src, copies = sys.argv[1], int(sys.argv[2])
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.GNU_FORMAT)
for c in range(copies):
    with tarfile.open(src, mode="r:") as t:
        for m in t:
            f = t.extractfile(m) if m.isreg() else None
            m.name = f"c{c}/{m.name}"
            if m.islnk():
                m.linkname = f"c{c}/{m.linkname}"
            out.addfile(m, f)
out.close()
'
python3 -c "$gen" "$TAR" "$COPIES" |
    /usr/bin/time -o "$work/time" -f '%e %M' "$SEALFS" build -q "${args[@]}" --tar - "$work/out.img" >/dev/null
read -r s m <"$work/time"
printf 'copies %s: %s s, peak RSS %s KiB (%.1f MiB), image %s bytes\n' \
    "$COPIES" "$s" "$m" "$(awk "BEGIN{print $m/1024}")" "$(stat -c %s "$work/out.img")"
