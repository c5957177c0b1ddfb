#!/usr/bin/env bash
# Runs each fuzz target of the image reader for SECONDS (default 30), starting from the committed
# seed corpus and the saved regressions of that target. New corpus entries go to a scratch
# directory, so the committed corpus is never modified.
#
# Usage: fuzz/run.sh [SECONDS]
#        fuzz/run.sh build        only build the targets (scripts/test.sh does it beforehand, so that
#                                 the timed fuzz job only fuzzes)
#   FUZZ_SANITIZER=address   build with AddressSanitizer (default: none; the reader is safe Rust,
#                            where an out-of-bounds access is a panic, and runs ~5x faster without)
#   FUZZ_TARGETS="open_walk" run only these targets
#
# Exit status: 0 when no target crashed, or when fuzzing cannot run here (prints "SKIP: <reason>":
# no nightly toolchain, cargo-fuzz not installable); 1 when a target crashed (panic, out-of-memory,
# timeout): the input is under fuzz/artifacts/<target>/ and the log's end is printed.
set -uo pipefail

mode=fuzz
[ "${1:-}" = build ] && { mode=build; shift; }
secs=${1:-30}
case $secs in '' | *[!0-9]*) echo "usage: $0 [build] [SECONDS]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
sanitizer=${FUZZ_SANITIZER:-none}
targets=${FUZZ_TARGETS:-open_walk verified_open_walk seal_trailer file_digests file_table signatures sealed_open tar_build manifest oci_spec squashfs_build}

skip() {
    echo "SKIP: $*"
    exit 0
}

command -v cargo >/dev/null || skip "cargo is not installed"
command -v rustup >/dev/null || skip "rustup is not installed (fuzzing needs a nightly toolchain)"
cargo +nightly --version >/dev/null 2>&1 || skip "no nightly toolchain (rustup toolchain install nightly)"
case "$(uname -s)" in Linux | Darwin) ;; *) skip "libFuzzer needs Linux or macOS" ;; esac
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is missing: installing it (cargo install cargo-fuzz)"
    cargo install --locked cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz >/dev/null 2>&1 ||
        skip "cargo-fuzz is missing and could not be installed"
fi

cd "$here" || exit 1
scratch=$(mktemp -d "${TMPDIR:-/tmp}/sealfs-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
echo "building the fuzz targets (sanitizer: $sanitizer)"
if ! cargo +nightly fuzz build --sanitizer "$sanitizer" >"$scratch/build.log" 2>&1; then
    tail -30 "$scratch/build.log"
    echo "FAIL: the fuzz targets do not build"
    exit 1
fi
[ "$mode" = build ] && { echo "the fuzz targets are built"; exit 0; }
status=0
for target in $targets; do
    seeds=("$here/corpus/$target")
    # Saved crash inputs: open_walk's at the top of fuzz_regressions/, verified_open_walk's in
    # verified/, every other target's in a directory named after it.
    regressions=$here/../crates/reader/tests/fuzz_regressions
    case $target in
    open_walk) ;;
    verified_open_walk) regressions=$regressions/verified ;;
    tar_build) regressions=$here/../crates/import/tests/fuzz_regressions ;;
    squashfs_build) regressions=$here/../crates/import/tests/fuzz_regressions/squashfs ;;
    *) regressions=$regressions/$target ;;
    esac
    [ -d "$regressions" ] && seeds+=("$regressions")
    mkdir -p "$scratch/$target"
    log=$scratch/$target.log
    echo "fuzzing $target for ${secs}s"
    cargo +nightly fuzz run --sanitizer "$sanitizer" "$target" "$scratch/$target" "${seeds[@]}" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -max_len=262144 -timeout=20 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    # "stat::number_of_executed_units: N", "#N DONE cov: ... exec/s: ..."
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    slowest=$(sed -n 's/^stat::slowest_unit_time_sec: *//p' "$log")
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
    if [ $rc -eq 0 ]; then
        echo "  $target: ok, ${runs:-?} executions, slowest input ${slowest:-?} s; ${done_line:-no summary}"
    else
        status=1
        echo "  $target: CRASHED (exit $rc); the log's end:"
        tail -60 "$log" | sed 's/^/    /'
        echo "  the input is in $here/artifacts/$target/; minimize it with"
        echo "  (cd fuzz && cargo +nightly fuzz tmin $target artifacts/$target/<file>)"
        # What crashed, said again at the end: a log is often read from its end.
        { echo "  $target (exit $rc):"
          grep -m6 -E 'panicked at|ERROR: libFuzzer|SUMMARY: libFuzzer|==[0-9]+==ERROR|Test unit written|out-of-memory|timeout' "$log" |
              sed 's/^/    /'
          grep -A1 -m1 -E 'panicked at' "$log" | tail -1 | sed 's/^/    /'; } >>"$scratch/crashes"
    fi
done
if [ $status -ne 0 ]; then
    echo "FAIL: targets crashed:"
    cat "$scratch/crashes"
fi
exit $status
