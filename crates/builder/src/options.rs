//! Build options: validated configuration, independent of how the command line spelled it.

use crate::compress::{Algorithm, CompressOptions, Fragments};
use crate::seal::SealOptions;
use regex::bytes::Regex;
use std::path::PathBuf;

/// How the filesystem UUID is chosen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum UuidChoice {
    /// Derived from the image metadata: reproducible, and different for different trees.
    #[default]
    Derived,
    /// A fixed value.
    Fixed([u8; 16]),
    /// Random (not reproducible).
    Random,
}

/// A per-file compression rule of a compressed build: a regular file whose path relative to the
/// source root (no leading `/`) matches `pattern` is compressed with `algorithm` instead of the
/// build's, or stored as it is (no compression tried) with `None`. Such files are never packed
/// into fragments.
#[derive(Clone, Debug)]
pub struct CompressRule {
    /// What the path must match.
    pub pattern: Regex,
    /// The algorithm, `None` to store the file uncompressed.
    pub algorithm: Option<Algorithm>,
}

/// Placement choices that keep what did not change in identical blocks from one version of a
/// tree to the next, so that an update (`sealfs pull --base`) fetches less (issue 41); each costs
/// some size, measured in docs/benchmarks.md ("Layouts for updates").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Uncompressed builds: file data from block 1, the metadata after it (as compressed builds
    /// do), so a change of the metadata's size does not move every file's blocks (and so every
    /// inode).
    pub data_first: bool,
    /// Compressed builds with compressed directories (`--preset small`): the packed inode (the
    /// small files, packed together) is compressed in pieces whose ends its files' content
    /// decides, each from a block boundary of the packed inode, so that a small file that changes
    /// rewrites its piece, not every pcluster after it.
    pub packed_pieces: bool,
}

impl Placement {
    /// Every choice off: the densest images, as before issue 41.
    pub const DENSE: Placement = Placement {
        data_first: false,
        packed_pieces: false,
    };
    /// Every choice on.
    pub const STABLE: Placement = Placement {
        data_first: true,
        packed_pieces: true,
    };

    /// Parses `dense`, `stable`, or a comma-separated list of `data-first`, `packed-pieces`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "dense" => return Ok(Placement::DENSE),
            "stable" => return Ok(Placement::STABLE),
            _ => {}
        }
        let mut p = Placement::DENSE;
        for part in s.split(',') {
            match part {
                "data-first" => p.data_first = true,
                "packed-pieces" => p.packed_pieces = true,
                _ => {
                    return Err(format!(
                        "unknown layout {part:?} (dense, stable, or a list of data-first, packed-pieces)"
                    ))
                }
            }
        }
        Ok(p)
    }
}

impl Default for Placement {
    fn default() -> Self {
        Placement::DENSE
    }
}

/// Everything that shapes an image besides the source tree.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// Every inode gets this mtime (nanoseconds 0).
    pub timestamp: Option<i64>,
    /// `SOURCE_DATE_EPOCH`: mtimes newer than this are clamped to it (nanoseconds 0).
    pub clamp_mtime: Option<i64>,
    /// Every inode is owned by this uid.
    pub force_uid: Option<u32>,
    /// Every inode is owned by this gid.
    pub force_gid: Option<u32>,
    /// Added to every uid (after `force_uid`).
    pub uid_offset: i64,
    /// Added to every gid (after `force_gid`).
    pub gid_offset: i64,
    /// The filesystem UUID.
    pub uuid: UuidChoice,
    /// Volume label, at most 15 bytes.
    pub label: Vec<u8>,
    /// Paths relative to the source root left out with everything below them.
    pub exclude_paths: Vec<PathBuf>,
    /// Paths relative to the source root (no leading `/`) matching any of these are left out.
    pub exclude_regexes: Vec<Regex>,
    /// Write the per-inode xattr name bloom filter.
    pub xattr_filter: bool,
    /// Copy extended attributes at all.
    pub xattrs: bool,
    /// Worker threads for reading files; 0 means one per CPU.
    pub threads: usize,
    /// Seal the image (Merkle tree and trailer); `None` writes a plain EROFS image.
    pub seal: Option<SealOptions>,
    /// Compress file data; `None` stores it as is.
    pub compress: Option<CompressOptions>,
    /// Per-file exceptions to `compress`, the first that matches a file applies.
    pub compress_rules: Vec<CompressRule>,
    /// Placement choices for smaller updates.
    pub placement: Placement,
    /// Build like this earlier image (`--like`, see [`crate::Like`]): what did not change keeps
    /// its place.
    pub like: Option<std::sync::Arc<crate::Like>>,
}

impl Default for BuildOptions {
    fn default() -> Self {
        Self {
            timestamp: None,
            clamp_mtime: None,
            force_uid: None,
            force_gid: None,
            uid_offset: 0,
            gid_offset: 0,
            uuid: UuidChoice::Derived,
            label: Vec::new(),
            exclude_paths: Vec::new(),
            exclude_regexes: Vec::new(),
            xattr_filter: true,
            xattrs: true,
            threads: 0,
            seal: Some(SealOptions::default()),
            compress: None,
            compress_rules: Vec::new(),
            placement: Placement::default(),
            like: None,
        }
    }
}

impl BuildOptions {
    /// How a container image layer is built, by the snapshotter when it commits one and by
    /// `sealfs convert` from a layer's tar (one function, so that a layer pulled and committed
    /// and the same layer converted are built alike): sealed (SHA-256, 4 KiB blocks), xattrs
    /// kept (overlay's opaque marks), file data in lz4 (4 KiB clusters), which every kernel
    /// EROFS reads. Measured on `/usr/lib/python3.11` (52.6 MB, page-cached, one run each on a
    /// loaded 2-core machine): uncompressed 52.9 MB in 0.29 s, lz4 28.8 MB in 0.51 s, lz4hc
    /// 25.5 MB in 1.68 s, zstd 25.3 MB in 1.05 s: lz4 takes off almost all that compression can
    /// for the least time a commit waits.
    pub fn sealed_layer() -> BuildOptions {
        BuildOptions {
            compress: Some(CompressOptions::new(Algorithm::Lz4)),
            ..BuildOptions::default()
        }
    }
}

/// Named compression settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// The smallest sensible image that builds in half `mksquashfs -comp zstd -Xcompression-level
    /// 15 -b 1M`'s time: zstd level 12 (with zstd's block splitter) in 1 MiB clusters cut to fit
    /// (the densest packing), small files and tails packed together (fragments), identical files
    /// once, the metadata compressed too (the metabox, 64 KiB clusters; Linux 6.17 or later
    /// mounts it), and the directories (whole, in the packed inode). On the `linux` tree: 175.7 MB
    /// against that mksquashfs's 176.1 MB, in about 0.4 times its time. `-z lzma` with this preset is smaller still (151 MB, where `mksquashfs
    /// -comp xz -b 1M` makes 157 MB) but takes longer than xz, and reads slower.
    Small,
    /// Quick to build and to read: LZ4 in 64 KiB clusters, small files packed together, identical
    /// files once.
    Fast,
}

impl Preset {
    /// Parses `small` or `fast`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "small" => Ok(Preset::Small),
            "fast" => Ok(Preset::Fast),
            _ => Err(format!("unknown preset {s:?} (small, fast)")),
        }
    }

    /// The settings it stands for.
    pub fn options(self) -> CompressOptions {
        match self {
            Preset::Small => CompressOptions {
                algorithm: Algorithm::Zstd(12),
                pcluster_bytes: 1 << 20,
                fragments: Fragments::Small,
                extents_48bit: false,
                dedupe: false,
                metabox: Some(64 << 10),
                compress_dirs: true,
            },
            Preset::Fast => CompressOptions {
                algorithm: Algorithm::Lz4,
                pcluster_bytes: 64 << 10,
                fragments: Fragments::Small,
                extents_48bit: false,
                dedupe: false,
                metabox: None,
                compress_dirs: false,
            },
        }
    }
}
