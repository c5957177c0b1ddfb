#!/usr/bin/env bash
# Regenerates the seed corpus of the fuzz targets from small source trees:
#   fuzz/corpus/open_walk/          plain EROFS images (sealfs build --no-seal, mkfs.erofs)
#   fuzz/corpus/verified_open_walk/ the same images in the verified target's input format
#                                   (see `verified_open_walk` in fuzz/src/harness.rs)
#   fuzz/corpus/sealed_open/        small sealed images (sealfs build: attached; image and sidecar
#                                   concatenated; SHA-512; salt; 1 KiB verity blocks; lz4hc with
#                                   64 KiB pclusters; one damaged data byte; one plain image)
#   fuzz/corpus/seal_trailer/       some of those sealed files
#   fuzz/corpus/file_digests/       per-file digest sections of seal trailers, as releases before the
#                                   table moved into the image wrote them: cut out of the images
#                                   kept in crates/cli/tests/fixtures/seal-v1
#   fuzz/corpus/file_table/         per-file digest tables (the 64-byte locator at byte 0, then the
#                                   table's bytes) of the sealed images (the distinct ones)
#   fuzz/corpus/signatures/         signature sections (`sealfs sign --detached`; fresh keys, so
#                                   these seeds alone are not byte-reproducible)
#
# Usage: fuzz/make_corpus.sh [all|seal]   (from anywhere; needs target/release/sealfs; `all` also
#        needs mkfs.erofs, setfattr and erofs-utils 1.9 (built by scripts/build-oracles.sh); `seal` regenerates only the seal targets' seeds)
# The images are reproducible (fixed timestamps, UUIDs and uids), so re-running gives the same bytes
# as long as the builders do not change. Seeds are named <builder>-<tree>-<options>.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
sealfs=${SEALFS_BIN:-$root/target/release/sealfs}
what=${1:-all}
case $what in all | seal) ;; *) echo "usage: $0 [all|seal]" >&2; exit 2 ;; esac
[ -x "$sealfs" ] || (cd "$root" && cargo build --release -q -p sealfs-cli)

# A scratch directory on a file system with user xattrs (tmpfs may lack them).
work=$(mktemp -d "${TMPDIR:-/var/tmp}/sealfs-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- Seal targets ------------------------------------------------------------------------------
# Tiny trees (each image is 2 to 4 EROFS blocks): small: an inline file, a 5,000-byte file (a data
# block and a tail), a subdirectory, a symlink, an empty file; zip: compressible text.
t=$work/small
mkdir -p "$t/d"
printf hello >"$t/hello"
# (truncate, not `| head -c`: under pipefail the loop's SIGPIPE would end the script)
for i in $(seq 1 120); do echo "line $i of a small text file for the seal seeds"; done >"$t/text"
truncate -s 5000 "$t/text"
printf deep >"$t/d/deep"
ln -s ../hello "$t/d/link"
: >"$t/empty"
t=$work/zip
mkdir -p "$t"
for i in $(seq 1 400); do echo "line $i of a compressible text: the quick brown fox"; done >"$t/text"
printf abc >"$t/tiny"

# many: 40 small files, so that the per-file digest table (41 entries) takes a block of its own.
t=$work/many
mkdir -p "$t"
for i in $(seq 1 40); do printf 'file %s\n' "$i" >"$t/f$i"; done

sout=$here/corpus/sealed_open
tout=$here/corpus/seal_trailer
fout=$here/corpus/file_digests
xout=$here/corpus/file_table
rm -rf "$sout" "$tout" "$fout" "$xout"
mkdir -p "$sout" "$tout" "$fout" "$xout"
sealed_img() { # name tree [args...]: a sealed image (with --sidecar: image and sidecar, concatenated)
    local name=$1 tree=$2
    shift 2
    rm -f "$work/side"
    "$sealfs" build -q -T 1000 -U clear --all-root "$@" "$work/$tree" "$sout/$name" >/dev/null
    if [ -f "$work/side" ]; then cat "$work/side" >>"$sout/$name"; fi
}
sealed_img sealfs-small small
sealed_img sealfs-small-sidecar small --sidecar "$work/side"
sealed_img sealfs-small-sha512 small --hash-alg sha512
sealed_img sealfs-small-salt-vbs1k small --salt 000102030405060708090a0b0c0d0e0f --verity-block-size 1024
sealed_img sealfs-small-sha512-vbs1k-sidecar small --hash-alg sha512 --verity-block-size 1024 \
    --sidecar "$work/side"
sealed_img sealfs-zip-lz4hc-c64k zip -z lz4hc -C 65536
sealed_img sealfs-small-plain small --no-seal
sealed_img sealfs-many many
# One damaged byte in the last EROFS block of file data, so opens fail its reads and the check
# names its owner.
cp "$sout/sealfs-small" "$sout/sealfs-small-damaged"
python3 - "$sout/sealfs-small-damaged" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
blocks = int.from_bytes(b[1024 + 36:1024 + 40], "little")  # superblock `blocks` (4 KiB each)
if b[:8] == b"\x89SEALFT\n":  # the per-file digest table is last: the block before it
    blocks = int.from_bytes(b[24:32], "little") // 4096
b[(blocks - 1) * 4096 + 10] ^= 0x20
open(p, "wb").write(bytes(b))
EOF
for name in sealfs-small sealfs-small-sidecar sealfs-small-sha512 sealfs-small-salt-vbs1k; do
    cp "$sout/$name" "$tout/$name"
done
# The per-file digest sections of older seals, cut out of the kept images (header: files_offset at
# 48, files_length at 56; footer: header_offset at 16, trailer_len at 24; a detached seal's offsets
# count from the sidecar's start).
old=$root/crates/cli/tests/fixtures/seal-v1
python3 - "$old" "$fout" <<'EOF'
import os, sys
src, dst = sys.argv[1], sys.argv[2]
seen = set()
for name in sorted(os.listdir(src)):
    if not (name.endswith(".img") or name.endswith(".seal")):
        continue
    b = open(os.path.join(src, name), "rb").read()
    if b[-8:] != b"\x89SEALFS\n":
        continue
    ho = int.from_bytes(b[-64 + 16:-64 + 24], "little")
    trailer = int.from_bytes(b[-64 + 24:-64 + 32], "little")
    base = len(b) - (ho + trailer)
    h = b[base + ho:base + ho + 512]
    fo = int.from_bytes(h[48:56], "little")
    fl = int.from_bytes(h[56:64], "little")
    sec = b[base + fo:base + fo + fl]
    if fl == 0 or sec in seen:
        continue
    seen.add(sec)
    open(os.path.join(dst, name), "wb").write(sec)
EOF
# The per-file digest tables: the locator at byte 0 (table_offset at 24, table_length at 32), then
# the table's bytes.
python3 - "$sout" "$xout" <<'EOF'
import os, sys
src, dst = sys.argv[1], sys.argv[2]
seen = set()
for name in sorted(os.listdir(src)):
    b = open(os.path.join(src, name), "rb").read()
    if b[:8] != b"\x89SEALFT\n":
        continue
    off = int.from_bytes(b[24:32], "little")
    n = int.from_bytes(b[32:40], "little")
    seed = b[:64] + b[off:off + n]
    if seed in seen:
        continue
    seen.add(seed)
    open(os.path.join(dst, name), "wb").write(seed)
EOF
# Signature sections: IMAGE.sig files, which hold exactly the bytes of a seal's section.
gout=$here/corpus/signatures
rm -rf "$gout"
mkdir -p "$gout"
for k in k1 k2; do "$sealfs" keygen "$work/$k" >/dev/null; done
for name in sealfs-small sealfs-small-salt-vbs1k; do cp "$sout/$name" "$work/$name"; done
"$sealfs" sign "$work/sealfs-small" --key "$work/k1" --detached >/dev/null 2>&1
cp "$work/sealfs-small.sig" "$gout/one-signature"
"$sealfs" sign "$work/sealfs-small" --key "$work/k2" --detached --name "base image" --version 1.0 \
    --created 1764000000 >/dev/null 2>&1
cp "$work/sealfs-small.sig" "$gout/two-keys-all-fields"
"$sealfs" sign "$work/sealfs-small-salt-vbs1k" --key "$work/k1" --detached --name salted >/dev/null 2>&1
cp "$work/sealfs-small-salt-vbs1k.sig" "$gout/salt-vbs1k"
ls -l "$sout" "$tout" "$fout" "$xout" "$gout"
du -sh "$sout" "$tout" "$fout" "$xout" "$gout"
[ "$what" = seal ] && exit 0

command -v mkfs.erofs >/dev/null || { echo "mkfs.erofs is needed" >&2; exit 1; }
command -v setfattr >/dev/null || { echo "setfattr is needed" >&2; exit 1; }

# --- Trees -------------------------------------------------------------------------------------
# basic: a few files of boundary sizes, a subdirectory, symlinks of every kind, a hard link,
# a small sparse file, special files.
t=$work/basic
mkdir -p "$t/d/e"
: >"$t/empty"
printf x >"$t/one"
head -c 100 /dev/zero | tr '\0' a >"$t/hundred"
head -c 4096 /dev/zero | tr '\0' b >"$t/block"
head -c 5000 /dev/zero | tr '\0' c >"$t/block-and-tail"
printf deep >"$t/d/e/deep"
ln -s ../one "$t/d/up"
ln -s /d/e "$t/abs"
ln -s nowhere "$t/dangling"
ln -s loop "$t/loop"
ln -s "$(head -c 300 /dev/zero | tr '\0' L)" "$t/longlink"
ln "$t/hundred" "$t/d/hardlink"
# Sparse: data at 0 and at 8 KiB, a hole in between, 12 KiB long.
printf head | dd of="$t/sparse" bs=1 seek=0 conv=notrunc status=none
printf tail | dd of="$t/sparse" bs=1 seek=8192 conv=notrunc status=none
truncate -s 12288 "$t/sparse"
mkfifo "$t/fifo"
if [ "$(id -u)" = 0 ]; then mknod "$t/chr" c 1 3; mknod "$t/blk" b 7 0; fi
setfattr -n user.note -v hello "$t/one"
setfattr -n user.note -v hello "$t/hundred"
setfattr -n user.dir -v 1 "$t/d"

# many: directories spanning several blocks (names of many lengths), nested empty dirs.
t=$work/many
mkdir -p "$t/big" "$t/a/b/c/d"
for i in $(seq 0 299); do
    n=$(printf 'entry-%03d-%s' "$i" "$(head -c $((i % 50)) /dev/zero | tr '\0' n)")
    printf '%d' "$i" >"$t/big/$n"
done
ln -s ../big "$t/a/b/up"

# xattrs: shared (same pair on several inodes) and inline xattrs, every short prefix, long
# values, many names on one inode (for the bloom filter and multi-block xattr bodies).
t=$work/xattrs
mkdir -p "$t/dir"
for f in f1 f2 f3 dir/g; do printf '%s' "$f" >"$t/$f"; done
for f in f1 f2 f3 dir dir/g; do
    setfattr -n user.common -v "shared value" "$t/$f"
    setfattr -n user.mime -v text/plain "$t/$f"
done
setfattr -n user.long -v "$(head -c 1500 /dev/zero | tr '\0' v)" "$t/f1"
for i in $(seq 0 40); do setfattr -n "user.k$i" -v "v$i" "$t/f2"; done
setfattr -n user.empty "$t/f3"
if [ "$(id -u)" = 0 ]; then
    setfattr -n trusted.overlay.opaque -v y "$t/dir"
    setfattr -n security.selinux -v "system_u:object_r:etc_t:s0" "$t/f1"
fi
ln -s f1 "$t/link"

# comp: compressible files (for the compressed layouts): text of several sizes, a file whose tail
# is packed inline (ztailpacking), one incompressible file, a tiny one.
t=$work/comp
mkdir -p "$t"
for i in $(seq 1 600); do echo "line $i of a compressible text file: the quick brown fox"; done >"$t/text"
head -c 9000 "$t/text" >"$t/medium"
head -c 70000 /dev/zero | tr '\0' z >"$t/zeros-ish"
python3 -c "import random,sys; random.seed(1); sys.stdout.buffer.write(bytes(random.randrange(256) for _ in range(6000)))" >"$t/random"
printf abc >"$t/tiny"
setfattr -n user.c -v 1 "$t/text"

# --- Images ------------------------------------------------------------------------------------
out=$here/corpus/open_walk
vout=$here/corpus/verified_open_walk
rm -rf "$out" "$vout"
mkdir -p "$out" "$vout"

sealfs_img() { # name tree [args...]
    local name=$1 tree=$2
    shift 2
    "$sealfs" build --no-seal -q -T 1000 -U clear --all-root "$@" "$work/$tree" "$out/$name" >/dev/null
}
mkfs_img() { # name tree [args...]
    local name=$1 tree=$2
    shift 2
    mkfs.erofs --quiet -T0 -U 00000000-0000-0000-0000-000000000000 --all-root "$@" \
        "$out/$name" "$work/$tree" >/dev/null
}

for tree in basic many xattrs; do
    sealfs_img "sealfs-$tree" "$tree"
    mkfs_img "mkfs-$tree-x1" "$tree" -x1
done
sealfs_img sealfs-xattrs-nofilter xattrs --no-xattr-filter
sealfs_img sealfs-comp-zstd comp -z zstd
sealfs_img sealfs-comp-lz4hc-c16k comp -z lz4hc -C 16384
sealfs_img sealfs-comp-zstd-fragments comp -z zstd -C 65536 -E fragments
sealfs_img sealfs-comp-lz4-48bit-all-fragments comp -z lz4 -C 16384 -E 48bit,all-fragments
# Tails of larger files in the packed inode (compact indexes; 48-bit records), and clusters of
# input stored once (8-byte extent records pointing back).
sealfs_img sealfs-comp-lz4hc-c16k-tails comp -z lz4hc -C 16384 -E fragments
sealfs_img sealfs-comp-lz4-48bit-dedupe-tails comp -z lz4 -C 16384 -E 48bit,fragments,dedupe
mkfs_img mkfs-basic-chunk4k basic --chunksize=4096
mkfs_img mkfs-basic-chunkidx basic --chunksize=8192 -Eforce-chunk-indexes
mkfs_img mkfs-basic-noinline basic -Enoinline_data
# (-Eforce-inode-compact gives the same bytes as -x1 here: compact inodes are the default.)
mkfs_img mkfs-basic-extended basic -Eforce-inode-extended
mkfs_img mkfs-basic-lz4 basic -zlz4
mkfs_img mkfs-xattrs-x0 xattrs -x0
mkfs_img mkfs-comp-lz4 comp -zlz4
mkfs_img mkfs-comp-lz4hc-ztail comp -zlz4hc -Eztailpacking
mkfs_img mkfs-comp-lz4-legacy comp -zlz4 -Elegacy-compress
mkfs_img mkfs-comp-lz4hc-c16k-blockmap comp -zlz4hc -C16384 -Eforce-inode-blockmap
# erofs-utils 1.9 (scripts/build-oracles.sh, or $MKFS_EROFS): MicroLZMA, DEFLATE, fragments in the
# packed inode (tails and whole files, compact and full indexes), dedupe, the metabox.
mkfs19=${MKFS_EROFS:-$root/target/oracles/erofs-utils-1.9/bin/mkfs.erofs}
[ -x "$mkfs19" ] || "$root/scripts/build-oracles.sh"
mkfs19_img() { # name tree [args...]
    local name=$1 tree=$2
    shift 2
    "$mkfs19" --quiet -T0 -U 00000000-0000-0000-0000-000000000000 --all-root "$@" \
        "$out/$name" "$work/$tree" >/dev/null
}
mkfs19_img mkfs19-comp-lzma comp -zlzma -Eztailpacking
mkfs19_img mkfs19-comp-deflate comp -zdeflate,level=9 -C16384
mkfs19_img mkfs19-comp-lzma-fragments comp -zlzma,dictsize=65536 -C65536 -Efragments
mkfs19_img mkfs19-comp-zstd-all-fragments-dedupe comp -zzstd -Eall-fragments,dedupe
mkfs19_img mkfs19-comp-lz4-fragments-full comp -zlz4 -Efragments,legacy-compress
mkfs19_img mkfs19-comp-zstd-48bit-fragments comp -zzstd -C16384 -E48bit,fragments
mkfs19_img mkfs19-comp-lzma-48bit-ztail comp -zlzma -E48bit,ztailpacking
# (erofs-utils 1.9.3 reads --zD=1 as "off": a bare --zD compresses directories.)
mkfs19_img mkfs19-many-lz4hc-dirs many -zlz4hc --zD
# Metadata compression (the metabox), with shared and inline xattrs, and with compressed directories.
mkfs19_img mkfs19-xattrs-lz4-metabox xattrs -zlz4 -m4096 -x1
mkfs19_img mkfs19-comp-zstd-metabox-dirs comp -zzstd -C16384 -m4096:lz4 --zD -Efragments

# The verified target's seeds: each image in the honest-tree mode with a few parameter sets
# (byte layout: see `verified_open_walk` in fuzz/src/harness.rs).
python3 - "$out" "$vout" <<'EOF'
import os, sys
src, dst = sys.argv[1], sys.argv[2]
# (mode, params byte, salt length, corruption count): params byte = alg bit 0 | log block size index << 1
variants = [
    ("s256-4k", 0x00, 0x00, 0, 0),
    ("s512-1k-salt", 0x00, 0x01 | (1 << 1), 8, 0),
    ("s256-64k-sidecar", 0x02, 0x00 | (5 << 1), 0, 0),
    ("s256-4k-bad", 0x00, 0x00, 0, 1),
]
# Every variant of one image, the plain variant of a few others (the corpus stays small).
plain_only = ["sealfs-xattrs", "mkfs-xattrs-x1", "mkfs-comp-lz4hc-ztail", "sealfs-comp-zstd"]
for name in ["sealfs-basic"] + plain_only:
    img = open(os.path.join(src, name), "rb").read()
    for tag, mode, params, salt, bad in variants:
        if tag != "s256-4k" and name in plain_only:
            continue
        hdr = bytes([mode, params, salt, bad])
        # One corruption: xor 0x40 into the byte at 5000 (the second 4 KiB block).
        body = (5000).to_bytes(4, "little") + bytes([0x40]) if bad else b""
        open(os.path.join(dst, f"{name}-{tag}"), "wb").write(hdr + body + img)
EOF

ls -l "$out" "$vout"
du -sh "$out" "$vout"
