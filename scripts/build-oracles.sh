#!/usr/bin/env bash
# Builds the peer tools the tests and benchmarks compare against, newer than Debian stable ships,
# once, into target/oracles/ (kept across runs; delete it to rebuild):
#
#   target/oracles/erofs-utils-1.9/bin/{mkfs.erofs,fsck.erofs,dump.erofs,erofsfuse}   erofs-utils 1.9.x
#   target/oracles/squashfs-tools-4.7/bin/{mksquashfs,unsquashfs,sqfstar}   squashfs-tools 4.7.x, every
#                                       compressor (gzip, lzo, lz4, xz, zstd, legacy lzma)
#   target/oracles/versitygw            the S3 server of the remote-image tests (Go, v1.8.0)
#   target/oracles/oras                 the OCI registry client the registry tests read pushes with
#                                       (Go, v1.3.6)
#   target/oracles/containerd-2.4.2/bin/{containerd,ctr,containerd-shim-runc-v2}   containerd 2.x
#                                       (Go, v2.4.2, tag no_btrfs) for the snapshotter's tests under
#                                       config version 3 and its CRI plugins (and the erofs snapshotter
#                                       of bench/snapshotter.py); 148 s on 2 cores with an empty Go
#                                       build cache (modules already downloaded), about 3 min with
#                                       the downloads, beside a cargo build
#   target/oracles/crictl               the CRI client of those tests (Go, cri-tools v1.37.0); 44 s
#                                       (about 2 min with the downloads)
#   target/oracles/squashfuse-0.6/bin/squashfuse_ll   only with the argument `squashfuse` and
#                                       SQUASHFUSE_SRC (benchmarks)
#   target/oracles/toxiproxy-server     only with the argument `toxiproxy` (bench/remote.py's link)
#
# Go programs come from the Go module proxy (a package registry). Without Go, versitygw is skipped
# and the S3 tests say so (SKIP, or a failure under CI=true).
#
# The source comes from a package registry: the Debian source package of the newest release in
# Debian testing (deb-src, through apt with a private list, so the system's apt sources are not
# touched), built here with the build dependencies from Debian stable. Prints the directory.
#
#   scripts/build-oracles.sh            (as root, or with sudo for apt-get install)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/deps.sh
out="$PWD/target/oracles"
mkdir -p "$out"

# Unpacks the source of Debian testing's package $1 into a new directory; prints its path.
testing_source() {
  local missing=() p
  for p in autoconf automake libtool pkg-config liblz4-dev liblzma-dev zlib1g-dev libzstd-dev \
           uuid-dev libfuse3-dev libdeflate-dev dpkg-dev; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  install_packages "${missing[@]}" >&2
  local work
  work="$(mktemp -d)"
  mkdir -p "$work/lists/partial"
  echo 'deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian testing main' >"$work/src.list"
  local apt_opts=(-o "Dir::Etc::sourcelist=$work/src.list" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$work/lists")
  apt-get "${apt_opts[@]}" update -qq >&2
  (cd "$work" && apt-get "${apt_opts[@]}" source --download-only -qq "$1" >&2 2>/dev/null)
  tar -xf "$work/$1"_*.orig.tar.* -C "$work"
  local src
  src="$(find "$work" -maxdepth 1 -type d -name "$1-*" | head -n1)"
  [[ -n "$src" ]] || { echo "build-oracles: no $1 source unpacked" >&2; exit 2; }
  echo "$src"
}

erofs="$out/erofs-utils-1.9"
if [[ ! -x "$erofs/bin/mkfs.erofs" ]]; then
  src="$(testing_source erofs-utils)"
  trap 'rm -rf "$(dirname "$src")"' EXIT
  (
    cd "$src"
    ./autogen.sh >/dev/null 2>&1
    ./configure -q --prefix="$erofs" --enable-lzma --with-libzstd --with-libdeflate --enable-fuse \
      --without-selinux --disable-werror >/dev/null
    make -s -j"$(nproc)" >/dev/null 2>&1
    make -s install >/dev/null
  ) >&2
  "$erofs/bin/mkfs.erofs" --version >&2 2>&1 || true
fi
# squashfs-tools 4.7 (the SquashFS import tests make images with it beside Debian stable's 4.5.1),
# with every compressor it can write; legacy LZMA through liblzma (LZMA_XZ_SUPPORT).
sq="$out/squashfs-tools-4.7"
if [[ ! -x "$sq/bin/mksquashfs" ]]; then
  dpkg -s liblzo2-dev >/dev/null 2>&1 || install_packages liblzo2-dev >&2
  src="$(testing_source squashfs-tools)"
  trap 'rm -rf "$(dirname "$src")"' EXIT
  make -s -C "$src/squashfs-tools" -j"$(nproc)" LZMA_XZ_SUPPORT=1 LZO_SUPPORT=1 LZ4_SUPPORT=1 \
    ZSTD_SUPPORT=1 XZ_SUPPORT=1 >/dev/null 2>&1
  mkdir -p "$sq/bin"
  cp "$src/squashfs-tools/mksquashfs" "$src/squashfs-tools/unsquashfs" "$sq/bin/"
  "$sq/bin/mksquashfs" -version 2>&1 | head -n1 >&2
fi
# sqfstar is mksquashfs called by that name (as `make install` links it); the tar benchmark runs it.
[[ -e "$sq/bin/sqfstar" ]] || ln -s mksquashfs "$sq/bin/sqfstar"
go=$(command -v go || echo /usr/local/go/bin/go)
if [[ ! -x "$out/versitygw" ]]; then
  if [[ -x "$go" ]]; then
    echo "building versitygw v1.8.0 into $out" >&2
    GOBIN="$out" "$go" install github.com/versity/versitygw/cmd/versitygw@v1.8.0 >&2 ||
      echo "build-oracles: versitygw could not be built; the S3 tests will say so" >&2
  else
    echo "build-oracles: go not found; the S3 tests will say so" >&2
  fi
fi
if [[ ! -x "$out/oras" ]]; then
  if [[ -x "$go" ]]; then
    echo "building oras v1.3.6 into $out" >&2
    GOBIN="$out" "$go" install oras.land/oras/cmd/oras@v1.3.6 >&2 ||
      echo "build-oracles: oras could not be built; the registry tests will say so" >&2
  else
    echo "build-oracles: go not found; the registry tests will say so" >&2
  fi
fi
# containerd 2.x: the daemon, its ctr and its runc shim (2.x's containerd finds it first in PATH:
# the tests put this directory there). no_btrfs: the btrfs snapshotter needs libbtrfs headers.
ctd2="$out/containerd-2.4.2/bin"
if [[ ! -x "$ctd2/containerd-shim-runc-v2" ]]; then
  if [[ -x "$go" ]]; then
    echo "building containerd v2.4.2 into $ctd2" >&2
    GOBIN="$ctd2" "$go" install -tags no_btrfs \
      -ldflags "-X github.com/containerd/containerd/v2/version.Version=v2.4.2" \
      github.com/containerd/containerd/v2/cmd/containerd@v2.4.2 \
      github.com/containerd/containerd/v2/cmd/ctr@v2.4.2 \
      github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v2.4.2 >&2 ||
      echo "build-oracles: containerd 2 could not be built; its tests will say so" >&2
  else
    echo "build-oracles: go not found; the containerd 2 tests will say so" >&2
  fi
fi
if [[ ! -x "$out/crictl" ]]; then
  if [[ -x "$go" ]]; then
    echo "building crictl v1.37.0 into $out" >&2
    GOBIN="$out" "$go" install -ldflags "-X sigs.k8s.io/cri-tools/pkg/version.Version=v1.37.0" \
      sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0 >&2 ||
      echo "build-oracles: crictl could not be built; the CRI tests will say so" >&2
  else
    echo "build-oracles: go not found; the CRI tests will say so" >&2
  fi
fi
# squashfuse 0.6 (multi-threaded squashfuse_ll), only with the argument `squashfuse`: the FUSE peer
# of the benchmarks. Debian stable ships 0.1 and testing 0.5, and no package registry has 0.6, so
# the source comes from SQUASHFUSE_SRC: a tree of github.com/vasi/squashfuse at a 0.6 tag.
if [[ " $* " == *" squashfuse "* && ! -x "$out/squashfuse-0.6/bin/squashfuse_ll" ]]; then
  [[ -f "${SQUASHFUSE_SRC:-}/configure.ac" ]] ||
    { echo "build-oracles: set SQUASHFUSE_SRC to a squashfuse 0.6 source tree" >&2; exit 2; }
  sq="$(mktemp -d)"
  cp -a "$SQUASHFUSE_SRC/." "$sq"
  (
    cd "$sq"
    ./autogen.sh >/dev/null 2>&1
    ./configure -q --prefix="$out/squashfuse-0.6" >/dev/null
    make -s -j"$(nproc)" >/dev/null 2>&1
    make -s install >/dev/null
  ) >&2
  rm -rf "$sq"
  "$out/squashfuse-0.6/bin/squashfuse_ll" --version >&2 2>&1 || true
fi
if [[ " $* " == *" toxiproxy "* && ! -x "$out/toxiproxy-server" ]]; then
  [[ -x "$go" ]] || { echo "build-oracles: go not found (toxiproxy is a Go program)" >&2; exit 2; }
  GOBIN="$out/gobin" "$go" install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0 >&2
  mv "$out/gobin/server" "$out/toxiproxy-server"
fi
echo "$out"
