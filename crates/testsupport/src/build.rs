//! sealfs images from the builder library, the way `sealfs build` makes them
//! (`crates/cli/src/build.rs`): [`BuildOptions`] in, [`sealfs_builder::build`], no progress shown.
//! No binary is looked for, so a stale one cannot stand in for the code under test.

pub use sealfs_builder::{Algorithm, BuildOptions, BuildSummary, CompressOptions};
use std::path::Path;

/// Builds `src` into `out` with `opts` (`BuildOptions::default()` is what `sealfs build SRC OUT`
/// does: sealed, SHA-256, xattrs and their name filter, no compression).
pub fn build_image(src: &Path, out: &Path, opts: &BuildOptions) -> Result<BuildSummary, String> {
    sealfs_builder::build(src, out, opts, &sealfs_builder::NoProgress)
        .map_err(|e| format!("building {} into {}: {e}", src.display(), out.display()))
}

/// The options of `sealfs build -z ALG [-C PCLUSTER_BYTES]`: `alg` as the command line spells it
/// (`lz4`, `lz4hc[,LEVEL]`, `zstd[,LEVEL]`).
pub fn compressed(alg: &str, pcluster_bytes: u32) -> BuildOptions {
    let c = CompressOptions {
        algorithm: Algorithm::parse(alg).unwrap_or_else(|e| panic!("-z {alg}: {e}")),
        pcluster_bytes,
        fragments: sealfs_builder::Fragments::Off,
        extents_48bit: false,
        dedupe: false,
        compress_dirs: false,
        metabox: None,
    };
    c.validate()
        .unwrap_or_else(|e| panic!("-C {pcluster_bytes}: {e}"));
    BuildOptions {
        compress: Some(c),
        ..BuildOptions::default()
    }
}

/// The options of `sealfs build -T SECS`: every inode gets this mtime.
pub fn timestamp(secs: i64) -> BuildOptions {
    BuildOptions {
        timestamp: Some(secs),
        ..BuildOptions::default()
    }
}
