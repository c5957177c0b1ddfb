# Sourced by scripts/demo.sh and scripts/test.sh: installs, with apt-get, the Debian packages that
# building sealfs needs when they are missing. The `devicemapper` and `loopdev-3` crates (kernel-
# verified mounts) generate their kernel bindings with bindgen at build time, which needs libclang,
# and devicemapper-sys finds the device-mapper headers with pkg-config (libdevmapper-dev). The
# sealfs binary itself links none of these.
#
#   install_packages PKG...   installs PKG... (as root, or through sudo)
#   build_deps_missing        prints the build packages that are missing
install_packages() {
  (($#)) || return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: $*" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

build_deps_missing() {
  command -v pkg-config >/dev/null 2>&1 || echo pkg-config
  command -v cc >/dev/null 2>&1 || echo gcc
  if ! pkg-config --exists devmapper 2>/dev/null; then echo libdevmapper-dev; fi
  if ! compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null &&
     ! compgen -G '/usr/lib/*/libclang-[0-9]*.so*' >/dev/null &&
     [ -z "${LIBCLANG_PATH:-}" ]; then
    echo libclang-dev
  fi
}
