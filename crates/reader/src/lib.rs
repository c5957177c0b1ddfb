//! Reads EROFS images, the on-disk form of sealfs: the userspace twin of Linux 6.18's `fs/erofs`.
//!
//! # Design
//!
//! - **One choke point for image bytes.** Parsers never touch the byte source. They ask the
//!   bounds-checked block cache ([`cache`]) for ranges; it checks every offset and length taken from
//!   the image against the image size before reading, reads only whole blocks of a [`BlockSource`]
//!   and keeps a bounded LRU of them. A malformed image therefore gives an [`Error::Corrupted`] that
//!   names the inode, block and offset, never a panic or an out-of-bounds read, and no allocation is
//!   sized by an unchecked image field.
//! - **Verification slots in underneath.** [`BlockSource`] is the layer a verifying source
//!   implements (each block checked against a Merkle tree before it is returned). The cache stores
//!   what the source returned, so a block is verified once while cached; [`PlainBlocks`] is the
//!   unverified source over any [`ReadAt`] (a file with `pread`, a byte buffer, a [`SubRange`]).
//! - **Map, then read.** [`Image::map`] turns a logical offset of an inode into an [`Extent`] (blocks,
//!   inline tail, hole, or a compressed extent's pcluster) before any data I/O, like the kernel's
//!   `erofs_map_blocks` and `z_erofs_map_blocks_fo` ([`zmap`]); reads follow the map.
//! - **Decoded pclusters are cached** (design idea 5, [`decompress`]): a read decodes each
//!   compressed extent it overlaps, whole, once; the decoded bytes go to a byte-bounded LRU
//!   ([`Options::cluster_cache_bytes`]), so repeated reads neither re-read nor re-decompress.
//!   Compressed blocks come through the same [`BlockSource`], so a verifying source checks them as
//!   read from the image.
//! - **Kernel semantics.** Directory iteration has the checks of `dir.c`, lookup is `namei.c`'s binary
//!   search (so a directory the kernel cannot search fails here the same way), xattrs follow
//!   `xattr.c` including the name bloom filter fast path, inodes decode as `erofs_read_inode` does.
//!
//! One module per on-disk concept, as in the kernel: [`superblock`], [`inode`], [`dir`], [`namei`],
//! [`xattr`], [`data`], [`zmap`], [`decompress`]; plus [`mod@open`] and [`seal`] (the verified entry
//! point), [`source`] (byte and block sources),
//! [`stats`] and [`error`].
//!
//! Supported: FLAT_PLAIN, FLAT_INLINE and CHUNK_BASED data (block maps and chunk indexes, holes),
//! COMPRESSED_FULL and COMPRESSED_COMPACT data (LZ4, MicroLZMA, DEFLATE and ZSTD, big pclusters,
//! ztailpacking, fragments in the packed inode, PLAIN and interlaced uncompressed pclusters, HEAD2,
//! dedupe's partial references, legacy images without ZERO_PADDING), compact and extended inodes,
//! every file type, shared and inline xattrs with short and plain long prefixes.
//! Encoded extents (48BIT compressed inodes) and compressed directories read too.
//! Not yet (an [`Error::Unsupported`]): extra devices, metadata compression
//! (METABOX), long prefixes stored in the packed inode.
//!
//! # Opening an image
//!
//! [`open()`] is the entry point: it finds the seal (trailer or sidecar, [`seal`]), checks it against
//! the digest the caller expects, detects kernel fs-verity offload, and returns the [`Image`] whose
//! every read is verified together with the [`Trust`] it established. Reading without verification
//! is asked for by name: [`VerifyMode::None`], or [`Image::open_unverified`] on raw EROFS bytes.
//!
//! ```no_run
//! use sealfs_reader::{open, Follow, OpenOptions};
//! let digest = "sha256:3f1c4e0b9a7d5c2e8f6a1b3d5c7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f".parse()?;
//! let opened = open("image.sealfs", &OpenOptions::new().digest(digest))?;
//! println!("{}", opened.trust); // authenticated (digest given): sha256:3f1c...
//! let image = &opened.image;
//! let inode = image.resolve("/etc/hostname", Follow::All)?;
//! let data = image.read_vec(&inode, 0, 1 << 20)?; // a damaged block is an Error::Verification
//! for entry in image.read_dir(&image.root()?)? {
//!     let entry = entry?;
//!     println!("{} -> nid {}", String::from_utf8_lossy(&entry.name), entry.nid);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod cache;
pub mod check;
pub mod data;
pub mod decompress;
pub mod dir;
pub mod error;
pub mod files;
mod image;
pub mod inode;
mod lz4;
mod microlzma;
pub mod namei;
pub mod open;
pub mod prefetch;
pub mod profile;
pub mod seal;
pub mod source;
pub mod stats;
pub mod store;
pub mod superblock;
mod sys;
pub mod verified;
pub mod walk;
pub mod warm;
pub mod xattr;
pub mod zmap;

pub use cache::BlockRef;
pub use data::{Extent, ExtentKind};
pub use decompress::DEFAULT_CLUSTER_CACHE_BYTES;
pub use dir::{DirEntry, ReadDir};
pub use error::{Error, ErrorChain, Location, Result};
pub use files::{DigestOrigin, FileDigests};
pub use image::{Image, Options, DEFAULT_CACHE_BLOCKS};
pub use inode::{FileType, Inode, Stat};
pub use namei::Follow;
pub use open::{open, Authority, Checker, OpenOptions, OpenedImage, Source, Trust, VerifyMode};
pub use seal::{find_seal, Found, OpenError, Seal};
pub use sealfs_format::DataLayout;
pub use sealfs_verity::{Digest, HashAlg};
#[cfg(unix)]
pub use source::SplitFile;
pub use source::{BlockSource, PlainBlocks, ReadAt, SubRange};
pub use stats::StatsSnapshot;
pub use store::{BlockStore, Region, StoreProvider};
pub use superblock::{ComprInfo, SuperInfo};
pub use verified::{
    enable_kernel_verity, kernel_verity_digest, FillMode, FillState, SealInfo, VerifiedBlocks,
    VerifyStats, FILL_QUIET, FILL_UNREAD, LEAF_PROBES, READAHEAD_FETCHERS, YOUNG_WINDOW_BYTES,
};
pub use walk::{join_path, show_path, ReadAhead, Visit, WalkEntry, WalkEvent};
pub use xattr::{LongPrefix, XattrBody};
pub use zmap::Compression;

#[cfg(test)]
mod tests {
    /// An image is shared between threads (FUSE workers).
    #[test]
    fn images_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<crate::Image>();
        check::<crate::Inode>();
    }
}
