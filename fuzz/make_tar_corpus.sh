#!/usr/bin/env bash
# Writes the seed corpus of the tar_build target (fuzz/corpus/tar_build): small archives of a
# tree with every kind of entry, made by GNU tar (posix with xattrs and ACLs, gnu, sparse formats
# 0.0, 0.1, 1.0 and GNU's S members, long names) and bsdtar (pax), plain and gzip, zstd and xz.
# Needs root (devices, owners), tar, bsdtar, setfacl, setfattr, gzip, zstd, xz.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/corpus/tar_build
mkdir -p "$out"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
s=$t/s
mkdir -p "$s/d/sub" "$s/e"
printf 'hello\n' > "$s/d/f"
ln "$s/d/f" "$s/d/hard"
ln -s ../d/f "$s/e/sym"
mknod "$s/e/chr" c 1 3
mknod "$s/e/blk" b 8 1
mkfifo "$s/e/fifo"
long=$(printf 'n%.0s' $(seq 1 150))
printf 'x' > "$s/d/sub/$long"
truncate -s 20000 "$s/sparse"
printf 'data' | dd of="$s/sparse" bs=1 seek=9000 conv=notrunc status=none
head -c 3000 /dev/urandom > "$s/d/rand"
setfattr -n user.note -v 'a
b' "$s/d/f"
setfacl -m u:1234:rw "$s/d/f"
setfacl -d -m g:77:r "$s/d/sub"
chown 3000000:70000 "$s/d/rand"
touch -h -d '1969-12-31 23:59:58.5' "$s/e/sym"
touch -d '@1700000000.123456789' "$s/d" "$s/e"
cd "$s"
tar --format=posix --xattrs --xattrs-include='*' --acls --sparse -cf "$out/posix.tar" .
tar --format=gnu --sparse -cf "$out/gnu.tar" .
tar --format=posix --sparse --sparse-version=0.0 -cf "$out/sparse00.tar" sparse d/f
tar --format=posix --sparse --sparse-version=0.1 -cf "$out/sparse01.tar" sparse d/f
tar --format=ustar -cf "$out/ustar.tar" d/f d/hard e/chr e/fifo e/blk
bsdtar --format=pax --xattrs --acls -cf "$out/bsdtar.tar" .
gzip -9 -c "$out/ustar.tar" > "$out/ustar.tar.gz"
zstd -q -19 -c "$out/gnu.tar" > "$out/gnu.tar.zst"
xz -9 -c "$out/sparse01.tar" > "$out/sparse01.tar.xz"
ls -l "$out"
