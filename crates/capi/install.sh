#!/usr/bin/env bash
# Installs libsealfs: the shared library (libsealfs.so.VERSION, with the links libsealfs.so.0 and
# libsealfs.so), the static one (libsealfs.a), the header (sealfs.h) and the pkg-config files
# (sealfs.pc for the shared library, sealfs-static.pc for the static one), under PREFIX (default
# /usr/local), the libraries stripped of their debug information (STRIP=: keeps it):
#
#   crates/capi/install.sh [PREFIX]         builds with `cargo build --release -p sealfs-capi`
#   SEALFS_LIB_DIR=target/release crates/capi/install.sh PREFIX    installs what is built there
#
# Where the dynamic linker searches PREFIX/lib (/usr/local/lib, /usr/lib) and this runs as root,
# it runs ldconfig, and then:
#
#   cc prog.c $(pkg-config --cflags --libs sealfs) && ./a.out
#
# For another prefix, it prints the lines to use (pkg-config finds sealfs.pc through
# PKG_CONFIG_PATH, the program its library through an rpath). Static linking:
# `cc prog.c $(pkg-config --cflags --libs --static sealfs-static)`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="${1:-/usr/local}"
libdir="${LIBDIR:-$prefix/lib}"
built="${SEALFS_LIB_DIR:-}"
strip="${STRIP:-strip}"
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
# Debug information only (the release profile keeps line tables): the symbols stay, so the
# static library still links and backtraces still name functions.
"$strip" --strip-debug "$libdir/libsealfs.so.$version" "$libdir/libsealfs.a"
install -m 0644 "$here/include/sealfs.h" "$prefix/include/sealfs.h"
for pc in sealfs sealfs-static; do
  sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@VERSION@|$version|" \
    "$here/$pc.pc.in" >"$libdir/pkgconfig/$pc.pc"
done
echo "libsealfs $version installed under $prefix"

# Whether the dynamic linker searches libdir (its configured directories and the default ones).
searched=no
real_libdir="$(cd "$libdir" && pwd -P)"
if command -v ldconfig >/dev/null; then
  while IFS= read -r dir; do
    if [[ -d $dir && "$(cd "$dir" && pwd -P)" == "$real_libdir" ]]; then
      searched=yes
    fi
  done < <(ldconfig -N -v 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p')
fi
if [[ $searched == yes && $(id -u) == 0 ]]; then
  ldconfig
  echo "ldconfig: libsealfs.so.0 found by the dynamic linker"
  echo "Build a program with: cc prog.c \$(pkg-config --cflags --libs sealfs)"
elif [[ $searched == yes ]]; then
  echo "Run ldconfig as root so that the dynamic linker finds libsealfs.so.0; then:"
  echo "  cc prog.c \$(pkg-config --cflags --libs sealfs)"
else
  echo "The dynamic linker does not search $libdir: build a program with"
  echo "  export PKG_CONFIG_PATH=$libdir/pkgconfig"
  echo "  cc prog.c \$(pkg-config --cflags --libs sealfs) -Wl,-rpath,$libdir"
fi
