//! The `tar_build` harness: the input is a tar stream (plain or compressed), built into an image
//! by `sealfs_builder::build_from` with `sealfs_import::TarSource`, read once as a stream (file
//! data through the temporary file) and once from a file (data read in place). Errors are fine,
//! panics are bugs; and the two reads must agree: both fail, or both give the same image.
//!
//! This file is compiled by the fuzz target and by the stable test
//! `crates/import/tests/fuzz_corpus.rs` (with `#[path]`), so both run the very same code.

use sealfs_builder::{build_from, BuildOptions, NoProgress};
use sealfs_import::TarSource;
use std::path::Path;

/// Builds `data` both ways in `dir`; panics if they disagree.
pub fn tar_build_in(dir: &Path, data: &[u8]) {
    let opts = BuildOptions {
        seal: None,
        threads: 1,
        ..BuildOptions::default()
    };
    let streamed = dir.join("stream.img");
    let stream = TarSource::from_reader(Box::new(std::io::Cursor::new(data.to_vec())), "fuzz")
        .map(|mut s| build_from(&mut s, &streamed, &opts, &NoProgress));
    let archive = dir.join("in.tar");
    std::fs::write(&archive, data).expect("write the input");
    let placed = dir.join("file.img");
    let file =
        TarSource::open(&archive).map(|mut s| build_from(&mut s, &placed, &opts, &NoProgress));
    match (stream, file) {
        (Ok(Ok(_)), Ok(Ok(_))) => {
            let (a, b) = (std::fs::read(&streamed), std::fs::read(&placed));
            assert!(
                a.expect("image") == b.expect("image"),
                "the stream and the file gave different images"
            );
        }
        (Ok(Ok(_)), Ok(Err(e))) | (Ok(Err(e)), Ok(Ok(_))) => {
            panic!("one read of the archive failed, the other did not: {e}")
        }
        _ => {}
    }
    let _ = std::fs::remove_file(&streamed);
    let _ = std::fs::remove_file(&placed);
}
