//! The input is what a registry serves as a manifest or index (and, as text, an image reference):
//! `sealfs_registry::manifest::parse`, the sealfs artifact, platform selection; what parses must
//! round-trip (`sealfs_fuzz::manifest_harness::manifest`). Must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sealfs_fuzz::manifest_harness::manifest(data);
});
