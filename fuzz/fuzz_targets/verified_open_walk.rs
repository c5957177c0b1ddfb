//! The input is an image plus a seal (layout: `sealfs_fuzz::harness::verified_open_walk`): open it
//! through `VerifiedBlocks` and walk everything reachable. Must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sealfs_fuzz::harness::verified_open_walk(data);
});
