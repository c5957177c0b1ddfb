#!/usr/bin/env bash
# Installs libsealfs: the shared library (libsealfs.so.VERSION, with the links libsealfs.so.0 and
# libsealfs.so), the static one (libsealfs.a), the header (sealfs.h) and the pkg-config file
# (sealfs.pc), under PREFIX (default /usr/local):
#
#   crates/capi/install.sh [PREFIX]         builds with `cargo build --release -p sealfs-capi`
#   SEALFS_LIB_DIR=target/release crates/capi/install.sh PREFIX    installs what is built there
#
# Then: cc prog.c $(pkg-config --cflags --libs sealfs)    (PKG_CONFIG_PATH=PREFIX/lib/pkgconfig
# for a prefix pkg-config does not search).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="${1:-/usr/local}"
libdir="${LIBDIR:-$prefix/lib}"
built="${SEALFS_LIB_DIR:-}"
if [[ -z "$built" ]]; then
  (cd "$here" && cargo build --release -p sealfs-capi)
  built="$(cd "$here/../.." && pwd)/target/release"
fi
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../../Cargo.toml" | head -n1)"
install -d "$libdir/pkgconfig" "$prefix/include"
install -m 0755 "$built/libsealfs.so" "$libdir/libsealfs.so.$version"
ln -sf "libsealfs.so.$version" "$libdir/libsealfs.so.0"
ln -sf "libsealfs.so.0" "$libdir/libsealfs.so"
install -m 0644 "$built/libsealfs.a" "$libdir/libsealfs.a"
install -m 0644 "$here/include/sealfs.h" "$prefix/include/sealfs.h"
sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@VERSION@|$version|" \
  "$here/sealfs.pc.in" >"$libdir/pkgconfig/sealfs.pc"
echo "libsealfs $version installed under $prefix"
