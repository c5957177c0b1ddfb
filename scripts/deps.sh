# Sourced by scripts/demo.sh and scripts/test.sh: installs, with apt-get, the Debian packages that
# building sealfs needs when they are missing. The `devicemapper` and `loopdev-3` crates (kernel-
# verified mounts) generate their kernel bindings with bindgen at build time, which needs libclang,
# and devicemapper-sys finds the device-mapper headers with pkg-config (libdevmapper-dev). The
# sealfs binary itself links none of these.
#
#   install_packages PKG...   installs PKG... (as root, or through sudo)
#   build_deps_missing        prints the build packages that are missing
#   apt_get ARGS...           apt-get ARGS..., waiting for the dpkg lock
#   apt_get_update            apt-get update, waiting for the package lists' lock
#
# Both wait up to SEALFS_APT_LOCK_TIMEOUT seconds (default 900) for the locks another apt process
# holds (on a fresh machine, most often its unattended upgrades) instead of failing at once with
# "Could not get lock". apt waits for the dpkg lock itself when given DPkg::Lock::Timeout, but
# `apt-get update` (apt 2.6) does not wait for the lists' lock, so that one is retried here.
apt_get() {
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=${SEALFS_APT_LOCK_TIMEOUT:-900}" "$@"
}

apt_get_update() {
  local deadline=$((SECONDS + ${SEALFS_APT_LOCK_TIMEOUT:-900})) err said=""
  while ! err=$(apt_get update -qq 2>&1); do
    if [[ "$err" != *"Could not get lock"* ]] || ((SECONDS >= deadline)); then
      printf '%s\n' "$err" >&2
      return 1
    fi
    [ -n "$said" ] || echo "waiting for another apt process to release the package lists' lock" >&2
    said=1
    sleep 2
  done
  [ -z "$err" ] || printf '%s\n' "$err" >&2
}

install_packages() {
  (($#)) || return 0
  echo "installing: $*" >&2
  apt_get_update
  apt_get install -y -qq --no-install-recommends "$@" >/dev/null
}

build_deps_missing() {
  command -v pkg-config >/dev/null 2>&1 || echo pkg-config
  command -v cc >/dev/null 2>&1 || echo gcc
  # containerd-snapshots (crates/snapshot) generates its gRPC code from .proto files with protoc.
  command -v protoc >/dev/null 2>&1 || echo protobuf-compiler
  if ! pkg-config --exists devmapper 2>/dev/null; then echo libdevmapper-dev; fi
  if ! compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null &&
     ! compgen -G '/usr/lib/*/libclang-[0-9]*.so*' >/dev/null &&
     [ -z "${LIBCLANG_PATH:-}" ]; then
    echo libclang-dev
  fi
}
