#!/usr/bin/env bash
# The main job: build an image of a directory (default: this project's crates/), then show it is
# readable, by mounting it with the kernel's EROFS driver when run as root, otherwise with fsck.erofs.
set -euo pipefail
cd "$(dirname "$0")/.."
src="${1:-crates}"
img="${2:-${TMPDIR:-/tmp}/sealfs-demo.img}"
cargo build --release --quiet -p sealfs-cli
./target/release/sealfs build "$src" "$img"
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
else
  echo "built $img; run as root to mount it, or install erofs-utils to check it with fsck.erofs" >&2
fi
