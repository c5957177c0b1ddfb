//! The input is a signature section (or a detached `IMAGE.sig`): `sealfs_trust::parse_section`, the
//! statements, `authenticate`; what parses must re-encode to the same bytes
//! (`sealfs_fuzz::harness::signatures`). Must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sealfs_fuzz::harness::signatures(data);
});
