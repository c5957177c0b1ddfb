#!/usr/bin/env bash
# Runs every sealfs test: formatting, lints, unit tests and the oracle tests (kernel mounts, fsck.erofs,
# dump.erofs, ...). Installs the Debian packages the oracle tests need when they are missing.
# Oracle tests that need root or mounting print "SKIP: <reason>" when the machine forbids them, and fail
# instead when CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/deps.sh

# package:command pairs the tests use.
needs=(erofs-utils:fsck.erofs erofs-utils:dump.erofs fsverity:fsverity cryptsetup-bin:veritysetup
       attr:getfattr squashfs-tools:mksquashfs fuse3:fusermount3 fio:fio util-linux:setpriv
       qemu-system-x86:qemu-system-x86_64 e2fsprogs:mkfs.ext4 openssl:openssl dmsetup:dmsetup umoci:umoci
       mount:losetup binutils:objcopy nginx:nginx python3:python3
       libarchive-tools:bsdtar acl:setfacl tar:tar zstd:zstd xz-utils:xz bzip2:bzip2 lz4:lz4
       docker-registry:docker-registry skopeo:skopeo apache2-utils:htpasswd valgrind:valgrind
       containerd:containerd containerd:ctr runc:runc)
# docs/examples.py (checked by crates/cli/tests/docs_and_scripts.rs) shows dumps made by xxd.
needs+=(xxd:xxd)
missing=($(build_deps_missing))
for pair in "${needs[@]}"; do
  command -v "${pair#*:}" >/dev/null 2>&1 || missing+=("${pair%%:*}")
done
# The Python bindings' tests make a virtual environment (pip inside needs ensurepip).
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
# The kernel fs-verity tests boot a Debian kernel under QEMU with a statically linked busybox as init.
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
  missing+=(busybox-static)
fi
install_packages "${missing[@]}"
# Peer tools newer than Debian stable ships (erofs-utils 1.9: MicroLZMA, DEFLATE, fragments; bookworm
# has 1.5) and the S3 server of the remote-image tests (versitygw), built once into target/oracles/,
# in the background while the workspace compiles (their downloads leave the cores idle otherwise).
mkdir -p target
./scripts/build-oracles.sh >/dev/null 2>target/oracles.log &
oracles=$!
# The fuzz targets (and cargo-fuzz, where missing) are built here too, not in the fuzz job below:
# on a clean checkout that build takes longer than the job's fuzzing, and a job has a time limit.
./fuzz/run.sh build >target/fuzz-build.log 2>&1 &
fuzz_build=$!

command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup, 1.87 or newer)" >&2; exit 2; }
cargo fmt --all -- --check
# (The fuzz crate is outside the workspace.)
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
# The README's benchmark table is what bench/readme_table.py makes of the committed bench/results.
python3 bench/readme_table.py --check
# Linted with the release profile, so that the tests below reuse its build scripts (the C libraries
# compiled by zstd-sys, lz4-sys, liblzma-sys, libdeflate) and proc-macros rather than building them twice.
cargo clippy --workspace --all-targets --release --quiet -- -D warnings
cargo test --workspace --release --no-run --quiet
# What the tests of other crates run (the sealfs binary, libsealfs), built as they ask for it
# (crates/testsupport/src/workspace.rs, ARTIFACT_PACKAGES): cargo unifies features per command, so
# this is a build of its own, better done here than inside a timed test program.
cargo build --release --quiet -p sealfs-capi -p sealfs-cli
if ! wait "$oracles"; then
  cat target/oracles.log >&2
  echo "scripts/build-oracles.sh failed" >&2
  exit 1
fi
wait "$fuzz_build" || cat target/fuzz-build.log >&2 # the fuzz job reports it again, and fails
# Every test program (each one's tests one at a time), two programs at once, the longest first; with
# them a short coverage-guided fuzz run of the image reader (the long runs are in fuzz/README.md; it
# prints "SKIP: ..." where no nightly toolchain exists, and the corpus replay runs everywhere).
./scripts/run-tests.py --jobs 2 --also fuzz='./fuzz/run.sh 15' -- --workspace --release
