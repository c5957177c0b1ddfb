#!/usr/bin/env bash
# Cold reads of a whole tree through the kernel: a sealfs image (EROFS, mounted file-backed:
# mount(2) of the image file through bench/kmount.py, Linux 6.12+; or through a loop device)
# against a SquashFS image of the same tree (`mount -t squashfs`, loop), as issue 16 asks:
# `tar -cf - . | cat >/dev/null` (every file's data, in directory order) and `ls -lR` (metadata
# only), each after dropping the page cache. (mount(8) of util-linux 2.38 sets up a loop device
# for an image file, so `mount -t erofs IMAGE MNT` is not file-backed here.)
#
#   bench/treeread.sh NAME=IMAGE[:TYPE]...
#       TYPE: erofs (file-backed, the default), erofs-loop (`-o loop`, a loop device) or squashfs
#
# Environment: RUNS=5 (interleaved rounds), needs root (mount, drop_caches).
# Prints one CSV line per run and the medians.
set -euo pipefail
RUNS="${RUNS:-5}"
(($# > 0)) || { echo "usage: $0 NAME=IMAGE[:TYPE]..." >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "treeread: needs root (mount, drop_caches)" >&2; exit 2; }
here="$(cd "$(dirname "$0")" && pwd)"
mnt="$(mktemp -d /tmp/treeread.XXXXXX)"
trap 'umount "$mnt" 2>/dev/null || true; rmdir "$mnt"' EXIT

cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
timed() { # command... -> seconds
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc
}
kmount() { # TYPE IMAGE: mounts IMAGE on $mnt
    case "$1" in
        erofs) python3 "$here/kmount.py" "$2" "$mnt" ;;
        erofs-loop) mount -t erofs -o ro,loop "$2" "$mnt" ;;
        squashfs) mount -t squashfs -o ro,loop "$2" "$mnt" ;;
        *) echo "treeread: unknown TYPE $1 (erofs, erofs-loop or squashfs)" >&2; exit 2 ;;
    esac
}
echo "# $(date -u), kernel $(uname -r), nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "name,run,tar_s,ls_s"
declare -A tars lss
for ((r = 1; r <= RUNS; r++)); do
    for spec in "$@"; do
        name="${spec%%=*}"
        rest="${spec#*=}"
        image="${rest%%:*}"
        type=erofs
        [[ "$rest" == *:* ]] && type="${rest##*:}"
        cold
        kmount "$type" "$image"
        t=$(timed sh -c "tar -C '$mnt' -cf - . | cat")
        umount "$mnt"
        cold
        kmount "$type" "$image"
        l=$(timed ls -lR "$mnt")
        umount "$mnt"
        echo "$name,$r,$t,$l"
        tars[$name]+="$t "
        lss[$name]+="$l "
    done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
for spec in "$@"; do
    name="${spec%%=*}"
    echo "# median $name: tar $(echo "${tars[$name]}" | median) s, ls -lR $(echo "${lss[$name]}" | median) s"
done
