//! The input is a tar stream (plain, gzip, zstd or xz): `sealfs build --tar` of it, read as a
//! stream and from a file (layout and checks: `sealfs_fuzz::tar_harness`). Errors are fine,
//! panics are bugs, and both reads must agree.
#![no_main]

use libfuzzer_sys::fuzz_target;

thread_local! {
    static DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
}

fuzz_target!(|data: &[u8]| {
    DIR.with(|d| sealfs_fuzz::tar_harness::tar_build_in(d.path(), data));
});
