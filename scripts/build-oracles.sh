#!/usr/bin/env bash
# Builds the test oracles that Debian does not package, once: erofs-utils 1.9.3 (mkfs.erofs with
# MicroLZMA, DEFLATE, fragments, dedupe; bookworm has 1.5) from third_party/ into
# target/oracles/erofs-utils-1.9, where the tests look for it (or set MKFS_EROFS). Installs the
# build packages it needs when they are missing. Called by scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh

prefix="$PWD/target/oracles/erofs-utils-1.9"
if [ -x "$prefix/bin/mkfs.erofs" ] && "$prefix/bin/mkfs.erofs" --version | grep -q ' 1\.9'; then
  exit 0
fi
tarball="$PWD/third_party/erofs-utils-1.9.3.tar.xz"
echo "7c75c293c97598f8283be23010eb50e083eba3e84ceb0f81795ef265a51e4d1a  $tarball" | sha256sum --check --quiet
missing=()
for pair in autoconf:autoconf automake:automake libtool:libtoolize pkg-config:pkg-config make:make; do
  command -v "${pair#*:}" >/dev/null 2>&1 || missing+=("${pair%%:*}")
done
for pair in liblz4-dev:liblz4 liblzma-dev:liblzma zlib1g-dev:zlib libzstd-dev:libzstd uuid-dev:uuid \
            libdeflate-dev:libdeflate; do
  pkg-config --exists "${pair#*:}" 2>/dev/null || missing+=("${pair%%:*}")
done
install_packages "${missing[@]}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
tar -xJf "$tarball" -C "$work"
cd "$work/erofs-utils-1.9.3"
{
  ./autogen.sh
  ./configure --prefix="$prefix" --enable-lzma --with-libdeflate --with-libzstd --with-lz4 \
    --without-selinux --disable-fuse
  make -j"$(nproc)"
  make install
} >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; echo "building erofs-utils 1.9.3 failed" >&2; exit 1; }
"$prefix/bin/mkfs.erofs" --version
