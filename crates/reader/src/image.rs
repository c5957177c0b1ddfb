//! [`Image`]: an opened EROFS image, the entry point of the reader (the kernel's `fill_super`).

use crate::cache::{BlockRef, Blocks};
use crate::decompress::{ClusterCache, DEFAULT_CLUSTER_CACHE_BYTES};
use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::source::{BlockSource, PlainBlocks, ReadAt};
use crate::stats::StatsSnapshot;
use crate::superblock::{read_superblock, SuperInfo};
use crate::xattr::{load_long_prefixes, LongPrefixes};
use std::sync::Arc;

/// How an image is opened.
#[derive(Clone, Debug)]
pub struct Options {
    /// Number of source blocks (4 KiB with [`Image::open_unverified`]) the block cache keeps. 0 disables it.
    pub cache_blocks: usize,
    /// Bytes of decoded compressed extents the cluster cache keeps (see [`crate::decompress`]), and
    /// of the blocks [`Image::read_direct`]'s small reads of uncompressed data read;
    /// never exceeded. 0 disables it.
    pub cluster_cache_bytes: usize,
    /// Whether a regular file's decoded extent stays cached once a read has taken it to its end
    /// (true, the default). A FUSE mount sets false: the kernel's page cache keeps what was read,
    /// and streaming reads would otherwise fill the cache with extents nothing reads again,
    /// pushing out those that random reads come back to (the packed inode's). Extents of the
    /// packed inode and of the metabox are always kept.
    pub keep_passed_extents: bool,
}

/// Default size of the block cache: 256 blocks, 1 MiB with 4 KiB blocks.
pub const DEFAULT_CACHE_BLOCKS: usize = 256;

impl Default for Options {
    fn default() -> Options {
        Options {
            cache_blocks: DEFAULT_CACHE_BLOCKS,
            cluster_cache_bytes: DEFAULT_CLUSTER_CACHE_BYTES,
            keep_passed_extents: true,
        }
    }
}

/// An opened, validated EROFS image. Cheap operations take `&self`; an `Image` is `Send + Sync`, so
/// one can serve many threads (wrap it in an `Arc`).
pub struct Image {
    pub(crate) blocks: Blocks,
    pub(crate) sb: SuperInfo,
    pub(crate) prefixes: LongPrefixes,
    pub(crate) clusters: ClusterCache,
    /// The metabox inode (`METABOX`): its data holds the inodes whose nid has bit 63 set.
    pub(crate) metabox: Option<Inode>,
    /// The metabox extent decoded last, `(first byte, its bytes)`: metadata reads are local, so
    /// most are served from it without mapping or a cache lookup. Decoded from verified bytes, one
    /// extent at a time.
    metabox_last: std::sync::Mutex<Option<(u64, Arc<Vec<u8>>)>>,
}

/// Bit 63 of a metadata position: the position is a byte offset in the metabox inode's data, not
/// in the image. Positions derived from an inode's place (its xattrs, block map, compression indexes
/// and inline data) carry the tag of the inode's nid, so one read path ([`Image::meta_read`]) serves
/// both.
pub(crate) const IN_METABOX: u64 = 1 << 63;

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("sb", &self.sb)
            .field("len", &self.blocks.len())
            .finish_non_exhaustive()
    }
}

impl Image {
    /// Opens the EROFS bytes of any byte source **without verification**, with default options: no
    /// block is checked against a seal, so this is for plain images and for reading a damaged image
    /// on purpose. A sealed image is opened verified with [`crate::open()`].
    pub fn open_unverified<R: ReadAt + 'static>(source: R) -> Result<Image> {
        Image::open_unverified_with(source, &Options::default())
    }

    /// Opens the EROFS bytes of any byte source **without verification** (see
    /// [`Image::open_unverified`]).
    pub fn open_unverified_with<R: ReadAt + 'static>(
        source: R,
        options: &Options,
    ) -> Result<Image> {
        Image::open_blocks(Arc::new(PlainBlocks::new(source)), options)
    }

    /// Opens an image read through a [`BlockSource`] (for example one that verifies every block).
    ///
    /// Validates the superblock, loads the long xattr name prefixes and checks that the root inode is
    /// a directory.
    pub fn open_blocks(source: Arc<dyn BlockSource>, options: &Options) -> Result<Image> {
        let mut blocks = Blocks::new(source, options.cache_blocks);
        let sb = read_superblock(&blocks)?;
        blocks.set_erofs_bits(sb.blkszbits);
        let prefixes = load_long_prefixes(&blocks, &sb)?;
        let mut image = Image {
            blocks,
            sb,
            prefixes,
            clusters: ClusterCache::new(options.cluster_cache_bytes, options.keep_passed_extents),
            metabox: None,
            metabox_last: std::sync::Mutex::new(None),
        };
        if let Some(nid) = image.sb.metabox_nid {
            // Never in the metabox itself (checked with the superblock), so read from the image.
            let metabox = image.inode(nid)?;
            if !metabox.is_file() {
                return Err(Error::corrupted(
                    format!(
                        "the metabox inode is not a regular file (mode {:o})",
                        metabox.mode()
                    ),
                    Location::nid(nid),
                ));
            }
            image.metabox = Some(metabox);
        }
        let root = image.root()?;
        if !root.is_dir() {
            return Err(Error::corrupted(
                format!("root inode is not a directory (mode {:o})", root.mode()),
                Location::nid(root.nid()),
            ));
        }
        Ok(image)
    }

    /// The decoded superblock.
    pub fn superblock(&self) -> &SuperInfo {
        &self.sb
    }

    /// Block size in bytes.
    pub fn block_size(&self) -> u64 {
        1 << self.sb.blkszbits
    }

    /// Length of the image in bytes.
    pub fn len(&self) -> u64 {
        self.blocks.len()
    }

    /// Whether the image has no bytes (never true for an opened image).
    pub fn is_empty(&self) -> bool {
        self.blocks.len() == 0
    }

    /// nid of the root directory.
    pub fn root_nid(&self) -> u64 {
        self.sb.root_nid
    }

    /// The inode number the kernel shows for `nid` (`stat`'s `st_ino` and `readdir`'s `d_ino`): the
    /// nid, except in images with a metabox (see [`sealfs_format::nid_to_ino64`]).
    pub fn ino_of(&self, nid: u64) -> u64 {
        sealfs_format::nid_to_ino64(self.sb.metabox_nid.is_some(), nid)
    }

    /// The root directory inode.
    pub fn root(&self) -> Result<Inode> {
        self.inode(self.sb.root_nid)
    }

    /// Counters of blocks read, cache hits and misses, xattr lookups and filter skips, and of the
    /// cluster cache of decoded compressed extents.
    pub fn stats(&self) -> StatsSnapshot {
        self.blocks.stats().snapshot()
    }

    /// Reads raw image bytes at an absolute offset through the bounds-checked block cache (for
    /// structural dumps and tools; file data is read with [`Image::read`]).
    pub fn read_raw(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.blocks.read(offset, buf, Location::image())
    }

    /// Reads metadata at `pos`: image bytes, or with [`IN_METABOX`] set, bytes of the metabox
    /// inode's data (decoded through the cluster cache, verified like any file data).
    pub(crate) fn meta_read(&self, pos: u64, buf: &mut [u8], at: Location) -> Result<()> {
        if pos & IN_METABOX == 0 {
            return self.blocks.read(pos, buf, at);
        }
        let Some(metabox) = &self.metabox else {
            return Err(Error::corrupted(
                "an inode in the metabox of an image without one",
                at,
            ));
        };
        let off = pos & !IN_METABOX;
        let end = off.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > metabox.size()) {
            return Err(Error::corrupted(
                format!(
                    "{} bytes of metadata beyond the end of the metabox ({} bytes)",
                    buf.len(),
                    metabox.size()
                ),
                at,
            ));
        }
        let end = off + buf.len() as u64;
        let last = self
            .metabox_last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some((start, data)) = last {
            if off >= start && end <= start + data.len() {
                buf.copy_from_slice(&data[(off - start) as usize..(end - start) as usize]);
                return Ok(());
            }
        }
        // A whole extent decoded (and kept) when it holds the read; anything else (a metabox
        // stored uncompressed, a hole, a fragment, a read across extents) goes the general way.
        let compressed = matches!(
            metabox.layout(),
            sealfs_format::DataLayout::CompressedFull
                | sealfs_format::DataLayout::CompressedCompact
        );
        if !compressed {
            let n = self.read(metabox, off, buf)?;
            debug_assert_eq!(n, buf.len());
            return Ok(());
        }
        let z = self.zmap(metabox, off)?;
        if !z.hole && z.fragment.is_none() && end <= z.logical + z.length {
            let data = self.decoded_extent(metabox, &z, 0, z.length, true)?;
            if data.len() >= z.length {
                let from = (off - z.logical) as usize;
                buf.copy_from_slice(&data[from..from + buf.len()]);
                *self.metabox_last.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((z.logical, data));
                return Ok(());
            }
        }
        let n = self.read(metabox, off, buf)?;
        debug_assert_eq!(n, buf.len());
        Ok(())
    }

    /// [`Image::meta_read`] into a new vector of `len` bytes.
    pub(crate) fn meta_read_vec(&self, pos: u64, len: usize, at: Location) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.meta_read(pos, &mut v, at)?;
        Ok(v)
    }

    /// Byte position of EROFS block `blkaddr`, or a corruption error naming `at` on overflow.
    pub(crate) fn blkpos(&self, blkaddr: u64, at: Location) -> Result<u64> {
        blkaddr
            .checked_mul(self.block_size())
            .ok_or_else(|| Error::corrupted(format!("block address {blkaddr:#x} overflows"), at))
    }

    /// One whole EROFS block, shared with the cache.
    pub(crate) fn meta_block(&self, pos: u64, at: Location) -> Result<BlockRef> {
        self.blocks.slice(pos, self.block_size() as usize, at)
    }
}
