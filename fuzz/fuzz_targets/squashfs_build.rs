//! The input is a SquashFS image: `sealfs build --squashfs` of it (layout and limits:
//! `sealfs_fuzz::squashfs_harness`). Errors are fine, panics are bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;

thread_local! {
    static DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
}

fuzz_target!(|data: &[u8]| {
    DIR.with(|d| sealfs_fuzz::squashfs_harness::squashfs_build_in(d.path(), data));
});
