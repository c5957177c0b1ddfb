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
/// `h_advise` bits 1-2 of an inode with encoded extents: the record size is `4 << value` bytes.
pub const Z_EROFS_ADVISE_EXTRECSZ_BIT: u16 = 1;
/// Mask of the record size field (after shifting by [`Z_EROFS_ADVISE_EXTRECSZ_BIT`]).
pub const Z_EROFS_ADVISE_EXTRECSZ_MASK: u16 = 0x3;
/// `z_erofs_extent.plen`: the extent is a partial reference to its pcluster (dedupe).
pub const Z_EROFS_EXTENT_PLEN_PARTIAL: u32 = 1 << 27;
/// `z_erofs_extent.plen`: bits from here are the format (0: by `h_advise`, else algorithm + 1,
/// where 4 + 1 is SHIFTED and 5 + 1 INTERLACED).
pub const Z_EROFS_EXTENT_PLEN_FMT_BIT: u32 = 28;
/// `z_erofs_extent.plen`: the encoded length (`(Z_EROFS_PCLUSTER_MAX_SIZE << 1) - 1`).
pub const Z_EROFS_EXTENT_PLEN_MASK: u32 = (2 << 20) - 1;

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
/// Size of the map header (`struct z_erofs_map_header`).
pub const Z_EROFS_MAP_HEADER_SIZE: u64 = 8;

/// `Z_EROFS_MAP_HEADER_START(end)`: the map header's position, the first 8-byte boundary at or
/// after `end`, the end of the inode core and its inline xattrs (`iloc + isize + xattr_isize`, or
/// the same relative to a 32-byte aligned inode). The indexes start right after it
/// (`Z_EROFS_MAP_HEADER_END`, `ebase`). `None` on overflow.
pub const fn z_erofs_map_header_start(end: u64) -> Option<u64> {
    end.checked_next_multiple_of(Z_EROFS_MAP_HEADER_SIZE)
}

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

/// Encoded extent records of 4 bytes (`plen` only, one per logical cluster, the data of one
/// extent right after the previous one's from an 8-byte `pstart` before the records): the record
/// size `h_advise` gives with [`Z_EROFS_ADVISE_EXTRECSZ_BIT`] field 0.
pub const Z_EROFS_EXTENT_RECSZ_PLEN: u64 = 4;

/// The size of the encoded extent records `h_advise` gives: `4 << field` (4, 8, 16 or 32 bytes).
pub const fn z_erofs_extent_recsz(advise: u16) -> u64 {
    4 << ((advise >> Z_EROFS_ADVISE_EXTRECSZ_BIT) & Z_EROFS_ADVISE_EXTRECSZ_MASK)
}

/// The `h_advise` bits that give records of `recsz` bytes (4, 8, 16 or 32); the inverse of
/// [`z_erofs_extent_recsz`].
pub const fn z_erofs_advise_extrecsz(recsz: u64) -> u16 {
    ((recsz.trailing_zeros() - 2) as u16 & Z_EROFS_ADVISE_EXTRECSZ_MASK)
        << Z_EROFS_ADVISE_EXTRECSZ_BIT
}

/// Where the encoded extent records of `recsz` bytes start for a map header at `header_start`:
/// the first multiple of `recsz` after the header (`z_erofs_map_blocks_ext`).
pub const fn z_erofs_extent_records_start(header_start: u64, recsz: u64) -> u64 {
    (header_start + Z_EROFS_MAP_HEADER_SIZE).next_multiple_of(recsz)
}

/// Bit of `h_clusterbits` (bit 63 of the map header read as a little-endian `u64`) saying the whole
/// file is one fragment in the packed inode (`Z_EROFS_FRAGMENT_INODE_BIT`).
pub const Z_EROFS_FRAGMENT_INODE_BIT: u8 = 7;
/// Map header plus the 8 bytes after it: what a COMPRESSED_FULL inode whose whole data is a
/// fragment stores after its inode core and xattrs (`Z_EROFS_LEGACY_MAP_HEADER_SIZE`).
pub const Z_EROFS_LEGACY_MAP_HEADER_SIZE: u64 = Z_EROFS_MAP_HEADER_SIZE + Z_EROFS_FULL_INDEX_START;

/// The map header of a file that is wholly a fragment at `offset` of the packed inode: the offset
/// in the low 63 bits, bit 63 set (nothing else of the header means anything then). `None` when
/// the offset does not fit 63 bits.
pub const fn fragment_inode_header(offset: u64) -> Option<[u8; 8]> {
    if offset >> 63 != 0 {
        return None;
    }
    Some((offset | 1 << 63).to_le_bytes())
}

/// The fragment offset of a map header written by [`fragment_inode_header`], or `None` when the
/// header is an ordinary one.
pub const fn fragment_inode_offset(header: [u8; 8]) -> Option<u64> {
    if header[7] >> Z_EROFS_FRAGMENT_INODE_BIT == 0 {
        return None;
    }
    Some(u64::from_le_bytes(header) ^ 1 << 63)
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

/// Largest `lclusterbits` COMPACT indexes can describe (4-byte packs; the kernel's
/// `z_erofs_load_compact_lcluster` returns `-EINVAL` above it).
pub const Z_EROFS_COMPACT_4B_MAX_LCLUSTERBITS: u8 = 14;
/// Largest `lclusterbits` 2-byte COMPACT packs can describe (`-EOPNOTSUPP` above it in the kernel;
/// mkfs.erofs refuses `COMPACTED_2B` above it).
pub const Z_EROFS_COMPACT_2B_MAX_LCLUSTERBITS: u8 = 12;

/// How the `totalidx` lcluster indexes of a COMPRESSED_COMPACT inode are split into packs.
///
/// The indexes start at `ebase`, right after the map header. In order:
///
/// 1. `initial_4b` entries in 4-byte form (8-byte packs of 2 entries), up to the next 32-byte
///    boundary, so that the 2-byte packs are 32-byte aligned;
/// 2. `compacted_2b` entries in 2-byte form (32-byte packs of 16), a multiple of 16;
/// 3. `end_4b` entries in 4-byte form again.
///
/// An odd 4-byte region is completed by a zero dummy entry, so every pack is whole
/// ([`index_bytes`](Self::index_bytes)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactIndexSplit {
    /// `compacted_4b_initial`, capped at `totalidx` (see [`compact_index_split`]).
    pub initial_4b: u64,
    /// `compacted_2b`: entries in 2-byte packs.
    pub compacted_2b: u64,
    /// `compacted_4b_end`: the remaining entries, in 4-byte packs.
    pub end_4b: u64,
}

/// Where one COMPACT index entry lives: its byte position and the pack form it is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactIndexPos {
    /// Byte position of the entry (`pos` in the kernel), in the same space as `ebase`; the entry is
    /// `pos & !(pack bytes - 1)`'s pack, slot `(pos % pack bytes) >> amortizedshift`.
    pub pos: u64,
    /// log2 of the amortized entry size: 2 for 4-byte packs, 1 for 2-byte packs.
    pub amortizedshift: u32,
}

/// The split of `totalidx` COMPACT indexes starting at byte `ebase`, for a map header whose
/// `h_advise` is `advise`.
///
/// This is the rule of Linux's `fs/erofs/zmap.c`, `z_erofs_load_compact_lcluster`:
///
/// ```c
/// compacted_4b_initial = ((32 - ebase % 32) / 4) & 7;
/// compacted_2b = 0;
/// if ((vi->z_advise & Z_EROFS_ADVISE_COMPACTED_2B) &&
///     compacted_4b_initial < totalidx)
///         compacted_2b = rounddown(totalidx - compacted_4b_initial, 16);
/// ```
///
/// with `totalidx` the inode's block count (`erofs_iblks`) and `ebase` the byte after the map header
/// (`Z_EROFS_MAP_HEADER_END(iloc + isize + xattr_isize)`). Positions are relative to anything 32-byte
/// aligned (image start, block, or the 32-byte aligned inode start). The kernel leaves
/// `compacted_4b_initial` uncapped; here it is capped at `totalidx` so that the three counts add up to
/// `totalidx`. Entry positions are the same either way: with `initial >= totalidx` every entry is
/// 4-byte from `ebase`. (mkfs.erofs writes that case as `initial = 0, end = totalidx`, the same bytes.)
pub const fn compact_index_split(ebase: u64, totalidx: u64, advise: u16) -> CompactIndexSplit {
    let initial = ((32 - ebase % 32) / 4) & 7;
    let compacted_2b = if advise & Z_EROFS_ADVISE_COMPACTED_2B != 0 && initial < totalidx {
        (totalidx - initial) / 16 * 16
    } else {
        0
    };
    let initial_4b = if initial < totalidx {
        initial
    } else {
        totalidx
    };
    CompactIndexSplit {
        initial_4b,
        compacted_2b,
        end_4b: totalidx - initial_4b - compacted_2b,
    }
}

impl CompactIndexSplit {
    /// Number of lcluster indexes (`totalidx`).
    pub const fn total(&self) -> u64 {
        self.initial_4b + self.compacted_2b + self.end_4b
    }

    /// Bytes the indexes occupy after `ebase`: whole packs (an odd 4-byte region ends with a dummy
    /// entry). The inline tail pcluster, if any, follows.
    pub const fn index_bytes(&self) -> u64 {
        self.initial_4b.div_ceil(2) * 8 + self.compacted_2b / 16 * 32 + self.end_4b.div_ceil(2) * 8
    }

    /// Where the index of lcluster `lcn` is, for indexes starting at `ebase` (the same `ebase` the
    /// split was computed from): the kernel's `pos` and `amortizedshift`. `None` when
    /// `lcn >= totalidx` (the kernel's `-EINVAL`) or the position overflows.
    pub const fn locate(&self, ebase: u64, lcn: u64) -> Option<CompactIndexPos> {
        if lcn >= self.total() {
            return None;
        }
        let (skip, lcn, amortizedshift) = if lcn < self.initial_4b {
            (0, lcn, 2)
        } else if lcn - self.initial_4b < self.compacted_2b {
            (self.initial_4b * 4, lcn - self.initial_4b, 1)
        } else {
            (
                self.initial_4b * 4 + self.compacted_2b * 2,
                lcn - self.initial_4b - self.compacted_2b,
                2,
            )
        };
        // `lcn < totalidx` and the counts are below 2^64 / 4, so only the additions to `ebase` can
        // overflow.
        match ebase.checked_add(skip) {
            Some(p) => match p.checked_add(lcn << amortizedshift) {
                Some(pos) => Some(CompactIndexPos {
                    pos,
                    amortizedshift,
                }),
                None => None,
            },
            None => None,
        }
    }
}

/// The shape of one COMPACT pack (`unpack_compacted_index` in the kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactPack {
    /// Entries per pack (`vcnt`): 2 for 4-byte packs, 16 for 2-byte packs.
    pub vcnt: u32,
    /// Bytes per pack, `vcnt << amortizedshift`; the last 4 are the pack's `le32` base block.
    pub bytes: u32,
    /// Bits per entry: `(bytes - 4) * 8 / vcnt` (16 or 14); the low `lobits` of each are `lo`, the
    /// next 2 the lcluster type.
    pub encodebits: u32,
    /// Bits of `lo`: `max(lclusterbits, ilog2(Z_EROFS_LI_D0_CBLKCNT) + 1)`.
    pub lobits: u32,
}

/// The pack holding entries of size `1 << amortizedshift` for `lclusterbits`, or `None` where the
/// kernel returns `-EOPNOTSUPP`: 4-byte packs need `lclusterbits <= 14`
/// ([`Z_EROFS_COMPACT_4B_MAX_LCLUSTERBITS`]), 2-byte packs `lclusterbits <= 12`
/// ([`Z_EROFS_COMPACT_2B_MAX_LCLUSTERBITS`]).
pub const fn compact_pack(amortizedshift: u32, lclusterbits: u8) -> Option<CompactPack> {
    let vcnt = if amortizedshift == 2 && lclusterbits <= Z_EROFS_COMPACT_4B_MAX_LCLUSTERBITS {
        2
    } else if amortizedshift == 1 && lclusterbits <= Z_EROFS_COMPACT_2B_MAX_LCLUSTERBITS {
        16
    } else {
        return None;
    };
    let bytes = vcnt << amortizedshift;
    let cblkcnt_bits = Z_EROFS_LI_D0_CBLKCNT.trailing_zeros() + 1;
    Some(CompactPack {
        vcnt,
        bytes,
        encodebits: (bytes - 4) * 8 / vcnt,
        lobits: if lclusterbits as u32 > cblkcnt_bits {
            lclusterbits as u32
        } else {
            cblkcnt_bits
        },
    })
}

/// `pblk - base` of the HEAD or PLAIN entry `i` of a COMPACT pack: the blocks of the pclusters
/// that start earlier in the same pack, counted as `z_erofs_load_compact_lcluster` counts them,
/// walking back over entries `i - 1, …, 0`. `entry(j)` gives the lcluster type and `lo` bits of entry
/// `j < i`.
///
/// Without big pclusters every pcluster is one block and the count starts at 1; a NONHEAD's `lo`
/// (`delta[0]`) skips back to its head. With big pclusters the count starts at 0, a NONHEAD with
/// `Z_EROFS_LI_D0_CBLKCNT` adds its pcluster's block count, and a plain NONHEAD skips back by
/// `delta[0] - 2`; a plain `delta[0] <= 1` there is `None` (the kernel's `-EFSCORRUPTED`: the
/// first NONHEAD of a big pcluster must be its CBLKCNT).
pub fn compact_head_nblk(
    i: u32,
    big_pcluster: bool,
    mut entry: impl FnMut(u32) -> (u16, u64),
) -> Option<u64> {
    let cblkcnt = Z_EROFS_LI_D0_CBLKCNT as u64;
    let mut i = i as i64;
    let mut nblk: u64;
    if !big_pcluster {
        nblk = 1;
        while i > 0 {
            i -= 1;
            let (ty, lo) = entry(i as u32);
            if ty == Z_EROFS_LCLUSTER_TYPE_NONHEAD {
                i -= lo as i64;
            }
            if i >= 0 {
                nblk += 1;
            }
        }
    } else {
        nblk = 0;
        while i > 0 {
            i -= 1;
            let (ty, lo) = entry(i as u32);
            if ty == Z_EROFS_LCLUSTER_TYPE_NONHEAD {
                if lo & cblkcnt != 0 {
                    i -= 1;
                    nblk += lo & !cblkcnt;
                    continue;
                }
                if lo <= 1 {
                    return None;
                }
                i -= lo as i64 - 2;
                continue;
            }
            nblk += 1;
        }
    }
    Some(nblk)
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

/// Largest MicroLZMA dictionary the kernel accepts in [`LzmaCfgs::dict_size`]
/// (`Z_EROFS_LZMA_MAX_DICT_SIZE`, 8 pclusters of the largest size).
pub const Z_EROFS_LZMA_MAX_DICT_SIZE: u32 = 8 * Z_EROFS_PCLUSTER_MAX_SIZE as u32;
/// Smallest MicroLZMA dictionary the kernel accepts (`z_erofs_load_lzma_config`: `dict_size < 4096`
/// is `-EINVAL`).
pub const Z_EROFS_LZMA_MIN_DICT_SIZE: u32 = 4096;
/// [`LzmaCfgs::format`] of MicroLZMA, the only one the kernel knows (any other is `-EINVAL`).
pub const Z_EROFS_LZMA_FORMAT_MICROLZMA: u16 = 0;

/// MicroLZMA configuration record payload (14 bytes, after its `le16` length;
/// `struct z_erofs_lzma_cfgs`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct LzmaCfgs {
    /// Dictionary size in bytes, [`Z_EROFS_LZMA_MIN_DICT_SIZE`]..=[`Z_EROFS_LZMA_MAX_DICT_SIZE`];
    /// the kernel preallocates a dictionary of this size per decompression stream, and every match
    /// distance of every pcluster must lie within it.
    pub dict_size: LeU32,
    /// Must be [`Z_EROFS_LZMA_FORMAT_MICROLZMA`].
    pub format: LeU16,
    /// Reserved.
    pub reserved: [u8; 8],
}

/// Largest [`DeflateCfgs::windowbits`] the kernel accepts (zlib's `MAX_WBITS`: a 32 KiB window;
/// `-EOPNOTSUPP` above it). The kernel always inflates with a 32 KiB window whatever the value.
pub const Z_EROFS_DEFLATE_MAX_WINDOWBITS: u8 = 15;

/// DEFLATE configuration record payload (6 bytes, after its `le16` length;
/// `struct z_erofs_deflate_cfgs`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct DeflateCfgs {
    /// log2 of the window the streams use, at most [`Z_EROFS_DEFLATE_MAX_WINDOWBITS`].
    pub windowbits: u8,
    /// Reserved.
    pub reserved: [u8; 5],
}

/// Fewest bytes of a DEFLATE stream that must lie in the last block it reaches, when it reaches
/// more than one ([`z_erofs_deflate_end_ok`]): more than the 22 bits an end-of-block code (at most
/// 15) and the padding to the byte boundary after it (at most 7) can take.
pub const Z_EROFS_DEFLATE_LAST_BLOCK_MIN: u64 = 3;

/// Whether the kernel inflates a DEFLATE stream stored at image bytes `[start, end)`: it lies in
/// one block, or it ends on a block boundary, or at least [`Z_EROFS_DEFLATE_LAST_BLOCK_MIN`] of its
/// bytes lie in the last block it reaches. Only streams packed byte by byte (48-bit encoded extents)
/// can break it: a right-aligned pcluster's stream ends on a block boundary.
///
/// The kernel (`__z_erofs_deflate_decompress` in `fs/erofs/decompressor_deflate.c` with
/// `z_erofs_stream_switch_bufs` in `fs/erofs/decompressor.c`, since DEFLATE came in Linux 6.6 and
/// still in 6.18; streams packed byte by byte came with 48-bit encoded extents in 6.15) hands zlib
/// a pcluster's bytes one page at a time: from the stream's start to the end of its page, then
/// whole pages. After each `zlib_inflate(Z_SYNC_FLUSH)` that leaves no output to produce, anything
/// but `Z_STREAM_END` fails the read with `-EFSCORRUPTED` ("failed to decompress 0 in\[1\]
/// out\[0\]": `Z_OK`, one byte not handed over, no output left): the pages still to come are never
/// handed over.
/// zlib reads only the bits it needs, so the call that writes the last byte of output also ends the
/// stream only if the end-of-block code after that byte is in the same page. When the last page holds
/// nothing of the stream but (the end of) that code and the padding after it, the output is complete
/// one page early and the read fails, although the stream is valid (zlib, libdeflate and miniz_oxide
/// decode it whole). With three bytes in the last page, some of its bits belong to the last symbol
/// that writes output (the last block of a stream holds data: libdeflate writes an empty one only
/// for empty input, and a stored one ends with a data byte), so the output completes in the call
/// that also reads the end. Pages are whole blocks (`PAGE_SIZE` is a multiple of the 4 KiB block),
/// so three bytes in the last block are three in the last page.
///
/// The kernel's other stream decoders have no such rule: ZSTD's (`z_erofs_zstd_decompress`) stops
/// once the output is complete, whatever input is left; MicroLZMA's (`xz_dec_microlzma_run`,
/// `lib/xz/xz_dec_lzma2.c`) keeps its look-ahead across pages in a buffer of its own and decodes the
/// last symbols only once all the input is there; LZ4 and the uncompressed forms have all of a
/// pcluster's pages at hand at once.
pub const fn z_erofs_deflate_end_ok(start: u64, end: u64, blksz: u64) -> bool {
    let last_block_bytes = end % blksz;
    start / blksz == end.saturating_sub(1) / blksz
        || last_block_bytes == 0
        || last_block_bytes >= Z_EROFS_DEFLATE_LAST_BLOCK_MIN
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

const _: () = assert!(core::mem::size_of::<MapHeader>() as u64 == Z_EROFS_MAP_HEADER_SIZE);
const _: () = assert!(core::mem::size_of::<LclusterIndex>() == 8);
const _: () = assert!(core::mem::size_of::<Lz4Cfgs>() == 14);
const _: () = assert!(core::mem::size_of::<LzmaCfgs>() == 14);
const _: () = assert!(core::mem::offset_of!(LzmaCfgs, format) == 4);
const _: () = assert!(core::mem::size_of::<DeflateCfgs>() == 6);
const _: () = assert!(core::mem::size_of::<ZstdCfgs>() == 6);

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_B: u16 = Z_EROFS_ADVISE_COMPACTED_2B;

    /// The record size field round-trips, in the bits the kernel reads (`(advise >> 1) & 3`).
    #[test]
    fn extent_record_sizes_round_trip() {
        for (recsz, field) in [(4u64, 0u16), (8, 1), (16, 2), (32, 3)] {
            let advise = z_erofs_advise_extrecsz(recsz);
            assert_eq!((advise >> 1) & 3, field);
            assert_eq!(z_erofs_extent_recsz(advise | Z_EROFS_ADVISE_EXTENTS), recsz);
        }
    }

    /// The kernel's lookup, written as `z_erofs_load_compact_lcluster` does it (uncapped
    /// `compacted_4b_initial`), to compare [`CompactIndexSplit::locate`] against.
    fn kernel_pos(ebase: u64, totalidx: u64, advise: u16, mut lcn: u64) -> (u64, u32) {
        let initial = ((32 - ebase % 32) / 4) & 7;
        let mut c2b = 0;
        if advise & TWO_B != 0 && initial < totalidx {
            c2b = (totalidx - initial) / 16 * 16;
        }
        let mut pos = ebase;
        let mut shift = 2;
        if lcn >= initial {
            pos += initial * 4;
            lcn -= initial;
            if lcn < c2b {
                shift = 1;
            } else {
                pos += c2b * 2;
                lcn -= c2b;
            }
        }
        (pos + (lcn << shift), shift)
    }

    #[test]
    fn initial_4b_aligns_the_2b_packs_to_32_bytes() {
        // ebase is 8-byte aligned (header end): 0, 8, 16, 24 mod 32 give 0, 6, 4, 2 initial entries.
        for (ebase, initial) in [(32, 0), (40, 6), (48, 4), (56, 2), (1064, 6)] {
            let s = compact_index_split(ebase, 100, TWO_B);
            assert_eq!(s.initial_4b, initial, "ebase {ebase}");
            assert_eq!((ebase + s.initial_4b * 4) % 32, 0);
            assert_eq!(s.total(), 100);
        }
    }

    #[test]
    fn tiny_files_are_all_4b() {
        // One lcluster, fewer than the initial entries: capped, no 2-byte packs, one padded pack.
        let s = compact_index_split(40, 1, TWO_B);
        assert_eq!(
            s,
            CompactIndexSplit {
                initial_4b: 1,
                compacted_2b: 0,
                end_4b: 0
            }
        );
        assert_eq!(s.index_bytes(), 8);
        // Exactly the initial entries: the kernel's `initial < totalidx` guard keeps 2B off.
        let s = compact_index_split(40, 6, TWO_B);
        assert_eq!(
            s,
            CompactIndexSplit {
                initial_4b: 6,
                compacted_2b: 0,
                end_4b: 0
            }
        );
        assert_eq!(s.index_bytes(), 24);
        // No lclusters at all.
        let s = compact_index_split(40, 0, TWO_B);
        assert_eq!(s.total(), 0);
        assert_eq!(s.index_bytes(), 0);
        assert_eq!(s.locate(40, 0), None);
    }

    #[test]
    fn the_2b_range_boundaries() {
        // ebase 56: 2 initial entries. 2 + 15 -> no 2B pack; 2 + 16 -> one; 2 + 31 -> one + 15 4B.
        let s = compact_index_split(56, 17, TWO_B);
        assert_eq!((s.initial_4b, s.compacted_2b, s.end_4b), (2, 0, 15));
        assert_eq!(s.index_bytes(), 8 + 64);
        let s = compact_index_split(56, 18, TWO_B);
        assert_eq!((s.initial_4b, s.compacted_2b, s.end_4b), (2, 16, 0));
        assert_eq!(s.index_bytes(), 8 + 32);
        assert_eq!(
            s.locate(56, 1),
            Some(CompactIndexPos {
                pos: 60,
                amortizedshift: 2
            })
        );
        assert_eq!(
            s.locate(56, 2),
            Some(CompactIndexPos {
                pos: 64,
                amortizedshift: 1
            })
        );
        assert_eq!(
            s.locate(56, 17),
            Some(CompactIndexPos {
                pos: 94,
                amortizedshift: 1
            })
        );
        assert_eq!(s.locate(56, 18), None);
        let s = compact_index_split(56, 33, TWO_B);
        assert_eq!((s.initial_4b, s.compacted_2b, s.end_4b), (2, 16, 15));
        assert_eq!(
            s.locate(56, 18),
            Some(CompactIndexPos {
                pos: 96,
                amortizedshift: 2
            })
        );
        assert_eq!(s.index_bytes(), 8 + 32 + 64);
        // Without COMPACTED_2B everything after the initial entries is 4-byte.
        let s = compact_index_split(56, 33, 0);
        assert_eq!((s.initial_4b, s.compacted_2b, s.end_4b), (2, 0, 31));
        assert_eq!(s.index_bytes(), 33u64.div_ceil(2) * 8);
    }

    #[test]
    fn locate_matches_the_kernel_everywhere() {
        for ebase in (8..=64).step_by(8) {
            for totalidx in 0..80 {
                for advise in [0, TWO_B, TWO_B | Z_EROFS_ADVISE_BIG_PCLUSTER_1] {
                    let s = compact_index_split(ebase, totalidx, advise);
                    assert_eq!(s.total(), totalidx);
                    let mut end = ebase;
                    for lcn in 0..totalidx {
                        let (pos, shift) = kernel_pos(ebase, totalidx, advise, lcn);
                        let got = s.locate(ebase, lcn).unwrap();
                        assert_eq!((got.pos, got.amortizedshift), (pos, shift));
                        let pack = compact_pack(shift, 12).unwrap().bytes as u64;
                        end = end.max((pos & !(pack - 1)) + pack);
                    }
                    assert_eq!(ebase + s.index_bytes(), end, "{ebase} {totalidx} {advise}");
                    assert_eq!(s.locate(ebase, totalidx), None);
                }
            }
        }
    }

    #[test]
    fn head_nblk_counts_earlier_pclusters_of_the_pack() {
        const H: u16 = Z_EROFS_LCLUSTER_TYPE_HEAD1;
        const N: u16 = Z_EROFS_LCLUSTER_TYPE_NONHEAD;
        const C: u64 = Z_EROFS_LI_D0_CBLKCNT as u64;
        let at = |pack: &'static [(u16, u64)]| move |j: u32| pack[j as usize];
        // One-block pclusters: H H N(1) H -> the head at 3 is base + 3 (1 + two earlier heads).
        let pack: &[(u16, u64)] = &[(H, 0), (H, 0), (N, 1), (H, 0)];
        assert_eq!(compact_head_nblk(0, false, at(pack)), Some(1));
        assert_eq!(compact_head_nblk(3, false, at(pack)), Some(3));
        // Big pclusters: H N(CBLKCNT 5) N(2) H -> the head at 3 is base + 5.
        let pack: &[(u16, u64)] = &[(H, 0), (N, C | 5), (N, 2), (H, 0)];
        assert_eq!(compact_head_nblk(0, true, at(pack)), Some(0));
        assert_eq!(compact_head_nblk(3, true, at(pack)), Some(5));
        // A plain delta[0] of 1 in a big-pcluster pack is corrupted.
        let pack: &[(u16, u64)] = &[(H, 0), (N, 1), (H, 0)];
        assert_eq!(compact_head_nblk(2, true, at(pack)), None);
        // A delta reaching before the pack does not count a block.
        let pack: &[(u16, u64)] = &[(N, 7), (H, 0)];
        assert_eq!(compact_head_nblk(1, false, at(pack)), Some(1));
    }

    #[test]
    fn deflate_streams_reach_their_last_block_by_three_bytes() {
        const B: u64 = 4096;
        // Issue 29's stream: 1442 bytes from 5995103, one byte into block 1464.
        assert!(!z_erofs_deflate_end_ok(5995103, 5996545, B));
        // Two bytes in: still too few; three: enough.
        assert!(!z_erofs_deflate_end_ok(5995103, 5996546, B));
        assert!(z_erofs_deflate_end_ok(5995103, 5996547, B));
        // Ending on a boundary (a right-aligned pcluster), or within one block, always passes.
        assert!(z_erofs_deflate_end_ok(4096 + 100, 3 * 4096, B));
        assert!(z_erofs_deflate_end_ok(4096, 4097, B));
        assert!(z_erofs_deflate_end_ok(4096 + 4000, 4096 + 4002, B));
        // One byte into the next block from the last byte of the previous one: two blocks.
        assert!(!z_erofs_deflate_end_ok(4095, 4097, B));
        assert!(z_erofs_deflate_end_ok(0, 0, B));
    }

    #[test]
    fn huge_positions_do_not_overflow() {
        let s = compact_index_split(u64::MAX - 7, 1 << 40, TWO_B);
        assert_eq!(s.locate(u64::MAX - 7, (1 << 40) - 1), None);
    }

    #[test]
    fn pack_shapes_and_big_lclusters() {
        let p4 = compact_pack(2, 12).unwrap();
        assert_eq!(
            (p4.vcnt, p4.bytes, p4.encodebits, p4.lobits),
            (2, 8, 16, 12)
        );
        let p2 = compact_pack(1, 12).unwrap();
        assert_eq!(
            (p2.vcnt, p2.bytes, p2.encodebits, p2.lobits),
            (16, 32, 14, 12)
        );
        // Big lclusters (lclusterbits up to 14) only in 4-byte packs.
        assert_eq!(compact_pack(2, 14).unwrap().lobits, 14);
        assert_eq!(compact_pack(2, 15), None);
        assert_eq!(compact_pack(1, 13), None);
        assert_eq!(compact_pack(3, 12), None);
        // lobits never drops below CBLKCNT's bit + 1.
        assert_eq!(compact_pack(2, 9).unwrap().lobits, 12);
    }
}
