//! The input is a sealed file (or an image followed by its sidecar): its seal footer and header are
//! parsed and `find_seal` looks for its seal (layout: `sealfs_fuzz::harness::seal_trailer`).
//! Errors are fine, panics are bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sealfs_fuzz::harness::seal_trailer(data);
});
