//! The `squashfs_build` harness: the input is a SquashFS image, built into an EROFS image by
//! `sealfs_builder::build_from` with `sealfs_import::SquashfsSource` (every entry scanned, every
//! file's data read: blocks, fragments, holes). Errors are fine, panics are bugs. The work is
//! bounded as a service converting untrusted images would bound it: at most 16 MiB of file data
//! and 65,536 directory entries.
//!
//! This file is compiled by the fuzz target and by the stable test
//! `crates/import/tests/fuzz_corpus.rs` (with `#[path]`), so both run the very same code.

use sealfs_builder::{build_from, BuildOptions, NoProgress};
use sealfs_import::SquashfsSource;
use std::path::Path;

/// Builds the image `data` in `dir`.
pub fn squashfs_build_in(dir: &Path, data: &[u8]) {
    let opts = BuildOptions {
        seal: None,
        threads: 1,
        ..BuildOptions::default()
    };
    let image = dir.join("in.sqfs");
    std::fs::write(&image, data).expect("write the input");
    let out = dir.join("out.img");
    if let Ok(source) = SquashfsSource::open(&image) {
        let mut source = source.limit_data(16 << 20).limit_entries(1 << 16);
        let _ = build_from(&mut source, &out, &opts, &NoProgress);
    }
    let _ = std::fs::remove_file(&out);
}
