//! The input is an EROFS image: open it (unverified) and walk everything reachable.
//! Errors are fine, panics (and out-of-bounds reads, runaway allocations, hangs) are bugs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sealfs_fuzz::harness::open_walk(data);
});
