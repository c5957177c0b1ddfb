#!/usr/bin/env bash
# Writes the seed corpus of the squashfs_build target (fuzz/corpus/squashfs_build): small images of
# a tree with every kind of entry (files in blocks, fragments and holes, hard links, a symlink,
# devices, a FIFO, a socket, xattrs inline and shared, a long name), made by mksquashfs with every
# compressor and with uncompressed tables (where mutations reach the structures rather than the
# compressed streams). 4 KiB blocks and no padding keep them small.
# Needs root (devices, owners, trusted.* xattrs), mksquashfs (squashfs-tools), setfattr, python3;
# MKSQUASHFS picks the mksquashfs (default: squashfs-tools 4.7 from scripts/build-oracles.sh when
# built, else the one in PATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/corpus/squashfs_build
mk=${MKSQUASHFS:-$here/../target/oracles/squashfs-tools-4.7/bin/mksquashfs}
[ -x "$mk" ] || mk=mksquashfs
mkdir -p "$out"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
s=$t/s
mkdir -p "$s/d/sub" "$s/e"
printf 'hello\n' > "$s/d/f"
ln "$s/d/f" "$s/d/hard"
ln -s ../d/f "$s/e/sym"
mknod "$s/e/chr" c 1 3
mknod "$s/e/blk" b 259 74565
mkfifo "$s/e/fifo"
ln "$s/e/fifo" "$s/e/fifo2"
python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$s/e/sock"
long=$(printf 'n%.0s' $(seq 1 200))
printf 'x' > "$s/d/sub/$long"
# Two blocks and a tail, a hole in between.
head -c 4500 /dev/urandom > "$s/d/blocks"
truncate -s 20000 "$s/d/blocks"
printf 'tail' >> "$s/d/blocks"
seq 1 800 > "$s/d/text"
setfattr -n user.note -v 'a value' "$s/d/f"
setfattr -n user.note -v 'a value' "$s/d/text"
setfattr -n trusted.t -v "$(head -c 300 /dev/zero | tr '\0' v)" "$s/e"
setfattr -n security.selinux -v 'system_u:object_r:etc_t:s0' "$s/d"
chown 3000000:70000 "$s/d/text"
touch -h -d @1600000000 "$s/e/sym"
touch -d @1700000000 "$s/d" "$s/e" "$s"
mk() {
    local name=$1
    shift
    "$mk" "$s" "$out/$name.sqfs" -noappend -no-progress -quiet -b 4K -nopad "$@" >/dev/null
}
for c in gzip lzo lz4 xz zstd lzma; do
    mk "$c" -comp "$c"
done
mk plain-nofrag -noI -noD -noF -noX -no-fragments -no-exports
mk plain-tailends -noI -noD -noF -noX -tailends -all-root
mk plain-noxattr -noI -noD -noF -noX -no-xattrs -no-hardlinks
ls -l "$out"
