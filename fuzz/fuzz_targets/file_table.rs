//! The input is a per-file digest table's locator and bytes: `FileTableLocator::parse` and
//! `FileTable::parse`, and what parses must re-encode to the same bytes
//! (`sealfs_fuzz::harness::file_table`). Must not panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sealfs_fuzz::harness::file_table(data);
});
