//! The input is an OCI index, manifest or config: parsed every way, and read through an image
//! layout (`sealfs_fuzz::oci_harness`). Errors are fine, panics are bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;

thread_local! {
    static DIR: tempfile::TempDir = tempfile::tempdir().expect("temporary directory");
}

fuzz_target!(|data: &[u8]| {
    DIR.with(|d| sealfs_fuzz::oci_harness::oci_spec_in(d.path(), data));
});
