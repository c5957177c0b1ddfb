//! [`Image::metadata_span`] and [`Image::fill_metadata`]: the stretch of an image that holds its
//! metadata, fetched whole in a few large requests before the first lookup needs it, as a zTOC is
//! (soci-snapshotter fetches every file's metadata before a container starts).
//!
//! The builder keeps the metadata together: a compressed build (or `--data-first`) writes the
//! file data from block 1, then the directories' blocks in inode order (the root's first), then
//! the metadata area (inodes, inline tails, shared xattrs), then the packed inode or the metabox,
//! to the end of the image; an uncompressed build starts the metadata area at block 0 and the
//! data after it, the root directory's blocks first. So the span is the root directory's first
//! block to the end, or the start to the root directory's first block. Nothing here depends on
//! it being so: what the span misses (an image from another builder, `--like` places) a walk
//! reads as before, and a span larger than [`SPAN_MAX_SHARE`] of the image is not fetched.

use crate::image::Image;
use std::ops::Range;

/// The largest share of the image a metadata span may take and still be fetched whole: a
/// quarter (the bench's python and linux layers: see docs/benchmarks.md, "Metadata in a few
/// requests").
pub const SPAN_MAX_SHARE: (u64, u64) = (1, 4);

impl Image {
    /// The byte range of the image that holds its metadata area and its directories' blocks, as
    /// the builder lays them out (see the [module docs](crate::warm)); `None` when that cannot be
    /// told (the root directory is inline in an image whose metadata comes first) or the range
    /// is larger than [`SPAN_MAX_SHARE`] of the image. Reads the root inode.
    pub fn metadata_span(&self) -> Option<Range<u64>> {
        let sb = self.superblock();
        let bs = self.block_size();
        let len = self.len();
        let meta = (sb.meta_blkaddr as u64) << sb.blkszbits;
        let root = self.root().ok()?;
        let root_start = self
            .file_storage(&root)
            .ok()
            .and_then(|r| r.iter().map(|r| r.start).min());
        let span = if meta > 0 || self.metabox.is_some() {
            // Data first: the directories, the metadata area and what follows it, to the end.
            let start = root_start.map_or(meta, |r| r.min(meta)) / bs * bs;
            start..len
        } else {
            // Metadata first: from the superblock's block to the root directory's first block.
            0..root_start.filter(|&r| r > 0)?
        };
        let (num, den) = SPAN_MAX_SHARE;
        (span.start < span.end && (span.end - span.start) * den <= len * num).then_some(span)
    }

    /// Where the source keeps what it fetches (a remote image with a store): fetches
    /// [`Image::metadata_span`] into it now, in one concurrent fill of large range requests (each
    /// block verified, with the hash blocks above it, before it is stored), and returns the
    /// span. `None`, having fetched nothing, for other sources and images without a span.
    pub fn fill_metadata(&self) -> Option<Range<u64>> {
        if !self.prefetches() {
            return None;
        }
        let span = self.metadata_span()?;
        self.blocks.fill_source(std::slice::from_ref(&span));
        Some(span)
    }
}
