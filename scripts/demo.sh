#!/usr/bin/env bash
# The main job: build a sealed image of a directory (default: this project's crates/), then show it is
# readable: with sealfs itself (list and extract, every block verified against the digest), and
# with the kernel's EROFS driver when run as root (otherwise with fsck.erofs, if installed).
set -euo pipefail
cd "$(dirname "$0")/.."
src="${1:-crates}"
img="${2:-${TMPDIR:-/tmp}/sealfs-demo.img}"
. scripts/deps.sh
install_packages $(build_deps_missing)
cargo build --release --quiet -p sealfs-cli
digest=$(./target/release/sealfs build "$src" "$img")
# Read it back with sealfs itself (every block verified against the digest), no root needed:
./target/release/sealfs ls -l "$img" / --digest "$digest"
check=$(mktemp -d)
./target/release/sealfs extract -q "$img" "$check/x" --digest "$digest"
diff -r --no-dereference "$src" "$check/x" && echo "OK: sealfs extracts $img ($digest) and it matches $src"
rm -rf "$check"
# Mount it with sealfs over FUSE (root, or fusermount3 from the fuse3 package), every block verified:
if [ -e /dev/fuse ] && { [ "$(id -u)" -eq 0 ] || command -v fusermount3 >/dev/null; }; then
  fmnt=$(mktemp -d)
  if ./target/release/sealfs mount "$img" "$fmnt" --digest "$digest"; then
    diff -r --no-dereference "$src" "$fmnt" && echo "OK: sealfs mount serves $img and it matches $src"
    ./target/release/sealfs stats "$fmnt" | grep -E "bytes_served|blocks_verified|failures"
    ./target/release/sealfs umount "$fmnt"
  fi
  rmdir "$fmnt"
fi
if [ "$(id -u)" -eq 0 ]; then
  mnt=$(mktemp -d)
  trap 'umount "$mnt" 2>/dev/null; rmdir "$mnt"' EXIT
  mount -t erofs -o loop,ro "$img" "$mnt"
  ls -la "$mnt"
  diff -r --no-dereference "$src" "$mnt" && echo "OK: the kernel mounts $img and it matches $src"
elif command -v fsck.erofs >/dev/null; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  fsck.erofs --extract="$out/x" "$img"
  diff -r --no-dereference "$src" "$out/x" && echo "OK: fsck.erofs extracts $img and it matches $src"
fi
