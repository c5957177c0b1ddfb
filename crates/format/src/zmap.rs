//! Compressed data: the map header, logical cluster indexes and per-algorithm configuration records.
//!
//! A compressed inode's data is cut into logical clusters (lclusters, one block each here). Each
//! extent of decoded data starts in a HEAD lcluster and is stored as one physical cluster (pcluster)
//! of whole blocks, its compressed bytes right-aligned (zero padding in front). FULL indexes have one
//! 8-byte [`LclusterIndex`] per lcluster, after the [`MapHeader`] and 8 unused bytes.

use crate::{LeU16, LeU32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `h_advise`: COMPACT indexes use 2-byte packs where possible.
pub const Z_EROFS_ADVISE_COMPACTED_2B: u16 = 0x0001;
/// `h_advise` (FULL, 48BIT): encoded extents.
pub const Z_EROFS_ADVISE_EXTENTS: u16 = 0x0001;
/// `h_advise`: big pclusters for HEAD1 lclusters.
pub const Z_EROFS_ADVISE_BIG_PCLUSTER_1: u16 = 0x0002;
/// `h_advise`: big pclusters for PLAIN and HEAD2 lclusters.
pub const Z_EROFS_ADVISE_BIG_PCLUSTER_2: u16 = 0x0004;
/// `h_advise`: the tail pcluster is stored inline (ztailpacking).
pub const Z_EROFS_ADVISE_INLINE_PCLUSTER: u16 = 0x0008;
/// `h_advise`: interlaced PLAIN pclusters.
pub const Z_EROFS_ADVISE_INTERLACED_PCLUSTER: u16 = 0x0010;
/// `h_advise`: the tail is a fragment in the packed inode.
pub const Z_EROFS_ADVISE_FRAGMENT_PCLUSTER: u16 = 0x0020;

/// lcluster type PLAIN: an uncompressed pcluster.
pub const Z_EROFS_LCLUSTER_TYPE_PLAIN: u16 = 0;
/// lcluster type HEAD1: an extent starts here, algorithm `h_algorithmtype & 0xF`.
pub const Z_EROFS_LCLUSTER_TYPE_HEAD1: u16 = 1;
/// lcluster type NONHEAD: continues the extent of an earlier HEAD.
pub const Z_EROFS_LCLUSTER_TYPE_NONHEAD: u16 = 2;
/// lcluster type HEAD2: an extent starts here, algorithm `h_algorithmtype >> 4`.
pub const Z_EROFS_LCLUSTER_TYPE_HEAD2: u16 = 3;
/// Mask of the type in `di_advise`.
pub const Z_EROFS_LI_LCLUSTER_TYPE_MASK: u16 = 0x3;
/// `di_advise` bit 15: the HEAD's data is only part of the decoded pcluster (dedupe).
pub const Z_EROFS_LI_PARTIAL_REF: u16 = 1 << 15;
/// Flag in `delta[0]` of the first NONHEAD: the rest is the pcluster's block count (CBLKCNT).
pub const Z_EROFS_LI_D0_CBLKCNT: u16 = 1 << 11;

/// Algorithm id: LZ4 (also lz4hc: same stream format).
pub const Z_EROFS_COMPRESSION_LZ4: u8 = 0;
/// Algorithm id: MicroLZMA.
pub const Z_EROFS_COMPRESSION_LZMA: u8 = 1;
/// Algorithm id: raw DEFLATE.
pub const Z_EROFS_COMPRESSION_DEFLATE: u8 = 2;
/// Algorithm id: Zstandard.
pub const Z_EROFS_COMPRESSION_ZSTD: u8 = 3;

/// Largest encoded pcluster the kernel accepts.
pub const Z_EROFS_PCLUSTER_MAX_SIZE: u64 = 1 << 20;
/// Largest decoded extent the kernel accepts.
pub const Z_EROFS_PCLUSTER_MAX_DSIZE: u64 = 12 << 20;
/// Bytes between the map header and the first FULL index entry.
pub const Z_EROFS_FULL_INDEX_START: u64 = 8;

/// The 8-byte map header at `round_up(iloc + isize + xattr_isize, 8)` (`struct z_erofs_map_header`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct MapHeader {
    /// `h_fragmentoff` (FRAGMENT_PCLUSTER), or `le16 h_reserved1` + `le16 h_idata_size` (INLINE_PCLUSTER).
    pub h_fragmentoff_or_idata: LeU32,
    /// `Z_EROFS_ADVISE_*`.
    pub h_advise: LeU16,
    /// Low nibble: HEAD1 algorithm; high nibble: HEAD2 algorithm.
    pub h_algorithmtype: u8,
    /// Bits 0..3: lclusterbits - blkszbits; bit 7: the whole file is a fragment.
    pub h_clusterbits: u8,
}

impl MapHeader {
    /// `h_idata_size`: bytes of the inline tail pcluster (INLINE_PCLUSTER).
    pub fn h_idata_size(&self) -> u16 {
        (self.h_fragmentoff_or_idata.get() >> 16) as u16
    }
}

/// One FULL lcluster index (`struct z_erofs_lcluster_index`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct LclusterIndex {
    /// Bits 0..1: type; bit 15: PARTIAL_REF.
    pub di_advise: LeU16,
    /// HEAD/PLAIN: offset of the extent start inside this lcluster.
    pub di_clusterofs: LeU16,
    /// HEAD/PLAIN: `blkaddr` of the pcluster. NONHEAD: `le16 delta[0]` (back to the HEAD, or
    /// CBLKCNT), `le16 delta[1]` (forward to the next HEAD).
    pub di_u: LeU32,
}

impl LclusterIndex {
    /// The lcluster type.
    pub fn lcluster_type(&self) -> u16 {
        self.di_advise.get() & Z_EROFS_LI_LCLUSTER_TYPE_MASK
    }
    /// `delta[0]` of a NONHEAD.
    pub fn delta0(&self) -> u16 {
        self.di_u.get() as u16
    }
    /// `delta[1]` of a NONHEAD.
    pub fn delta1(&self) -> u16 {
        (self.di_u.get() >> 16) as u16
    }
}

/// LZ4 configuration record payload (14 bytes, after its `le16` length).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Lz4Cfgs {
    /// LZ4 window; mkfs writes 65535.
    pub max_distance: LeU16,
    /// Largest pcluster in blocks (the kernel sizes buffers from it).
    pub max_pclusterblks: LeU16,
    /// Reserved.
    pub reserved: [u8; 10],
}

/// Zstandard configuration record payload (6 bytes, after its `le16` length).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct ZstdCfgs {
    /// Must be 0.
    pub format: u8,
    /// Window is `1 << (windowlog + 10)`; at most 10 (1 MiB).
    pub windowlog: u8,
    /// Reserved.
    pub reserved: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<MapHeader>() == 8);
const _: () = assert!(core::mem::size_of::<LclusterIndex>() == 8);
const _: () = assert!(core::mem::size_of::<Lz4Cfgs>() == 14);
const _: () = assert!(core::mem::size_of::<ZstdCfgs>() == 6);
