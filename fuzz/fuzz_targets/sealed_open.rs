//! The input is a whole sealed file (or an image followed by its sidecar): `sealfs_reader::open`
//! with no digest, its own, a wrong one, double and no verification, each opened image walked, and
//! `check::check` (`sealfs_fuzz::harness::sealed_open`). Must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sealfs_fuzz::harness::sealed_open(data);
});
