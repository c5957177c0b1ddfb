//! Compressed inodes: mapping a logical offset to its extent and pcluster, as Linux 6.18's
//! `fs/erofs/zmap.c` does (`z_erofs_fill_inode_lazy`, `z_erofs_map_blocks_fo`).
//!
//! # Model
//!
//! The data of a compressed inode (COMPRESSED_FULL or COMPRESSED_COMPACT layout) is cut into
//! logical clusters (lclusters) of `1 << lclusterbits` bytes, `lclusterbits = blkszbits +
//! (h_clusterbits & 15)`. Each **extent** `[m_la, next head)` is stored as one **pcluster** of
//! whole blocks (or inline after the index: ztailpacking) and starts in a HEAD lcluster at
//! `clusterofs`; the lclusters it continues into are NONHEAD. There is one index entry per
//! lcluster: FULL indexes are 8-byte [`LclusterIndex`] records after the 8-byte map header and 8
//! unused bytes; COMPACT indexes are bit-packed 4-byte (2 entries + `le32 base`) and 2-byte (16
//! entries + `le32 base`) packs right after the header.
//!
//! # Mapping (`Image::zmap`, behind [`Image::map`] and [`Image::read`])
//!
//! 1. The map header at `round_up(iloc + isize + xattr_isize, 8)` is checked as
//!    `z_erofs_fill_inode_lazy` checks it: algorithms < 4 (else unsupported), big-pcluster bits
//!    only with `COMPR_CFGS` (else corrupted), COMPACT with `BIG_PCLUSTER_1 == BIG_PCLUSTER_2`.
//!    With ztailpacking (`INLINE_PCLUSTER`, `h_idata_size != 0`) or a tail fragment the tail is
//!    found first (the kernel's `EROFS_GET_BLOCKS_FINDTAIL`): the head lcluster of the extent
//!    holding byte `i_size - 1`, and the inline pcluster's position: right after the index entry
//!    of the last lcluster (FULL: that entry + 8; COMPACT: the end of its pack).
//! 2. `lcn = offset >> lclusterbits` is loaded. A HEAD/PLAIN whose `clusterofs <= offset` in the
//!    lcluster starts the extent. A HEAD/PLAIN with a larger `clusterofs` ends the previous extent
//!    there (at lcluster 0 that is corrupted); lookback starts at `lcn - 1`. A NONHEAD looks back
//!    by `delta[0]`, repeatedly, to its HEAD (a zero or too long distance is corrupted).
//! 3. The pcluster: the HEAD's block, 1 block long unless big pclusters apply to the head type
//!    (HEAD1: `BIG_PCLUSTER_1`; PLAIN and HEAD2: `BIG_PCLUSTER_2`) and the next lcluster is inside
//!    the file, in which case the next entry decides: CBLKCNT gives the block count, a HEAD one
//!    block, any other NONHEAD (`delta[0] != 1`) is corrupted. The inline tail pcluster is
//!    `h_idata_size` bytes and must not cross a block boundary.
//! 4. The extent's whole decoded length (the kernel's `z_erofs_get_extent_decompressedlen`, which
//!    it runs for FIEMAP): forward by `delta[1]` to the next HEAD (end = its lcluster start +
//!    `clusterofs`), or to `i_size` for the last extent. The reader decodes whole extents, so it
//!    always computes it (the kernel may decode a prefix: its `m_llen` ends at the lcluster it was
//!    asked about).
//! 5. Checks: HEAD1/HEAD2 algorithms must be listed in `available_compr_algs` (corrupted);
//!    PLAIN extents must fit their pcluster (`m_llen <= m_plen`, corrupted); pclusters over 1 MiB
//!    and extents over 12 MiB are unsupported, as in the kernel.
//!
//! COMPACT entries carry no block address for HEADs: `pblk = base + nblk`, where `base` is the
//! pack's `le32` and `nblk` is counted by walking back over the earlier entries of the same pack,
//! exactly as `z_erofs_load_compact_lcluster`/`unpack_compacted_index` do (without big pclusters
//! one block per earlier head, starting at 1; with them CBLKCNT block counts, starting at 0). The
//! last entry of each pack stores `delta[1]`; its `delta[0]` is derived from the previous entry.
//! The index count of COMPACT is the inode's block count.
//!
//! Work is bounded: lookback and lookahead stop (unsupported) once they span more than a 12 MiB
//! extent could, so a crafted index cannot make one map walk the whole file.
//!
//! **Fragments** (`FRAGMENTS`). A map header with bit 63 set makes the whole file one fragment:
//! the other 63 bits are its offset in the packed inode (`z_fragmentoff`), nothing else of the
//! header counts. With `FRAGMENT_PCLUSTER` the tail extent (found as for ztailpacking; a tail
//! extent starting at lcluster 0 makes the whole file a fragment, as in
//! `z_erofs_map_blocks_iter`) is a fragment at `h_fragmentoff`, to which FULL indexes add the
//! tail head's block address as the high 32 bits; the other extents map normally. A fragment
//! extent is mapped as [`crate::ExtentKind::Fragment`] and read from the packed inode (the
//! superblock's `packed_nid`) at the fragment offset plus the position in the extent
//! (`z_erofs_read_fragment`), through the packed inode's own extents and so the cluster cache;
//! a fragment past the packed inode's end, in the packed inode itself or without
//! `FRAGMENTS`/`packed_nid` is corrupted.
//!
//! **Encoded extents** (the 48-bit layout: FULL inodes with `Z_EROFS_ADVISE_EXTENTS`) have no
//! lcluster index but extent records, mapped as the kernel's `z_erofs_map_blocks_ext` does (see
//! `map_ext`): pclusters at byte addresses, of any length up to 1 MiB, each record giving its
//! extent's format; a zero-length record is a hole.
//!
//! Unsupported (an [`Error::Unsupported`]): compact indexes with 2-byte packs and
//! `lclusterbits > 12`; offsets past 2^24 lclusters in inodes with 4-byte extent records (each
//! map sums the records before it, as the kernel does: linear in the offset).

use crate::error::{Error, Location, Result};
use crate::image::Image;
use crate::inode::Inode;
use sealfs_format::{
    compact_head_nblk, compact_index_split, compact_pack, fragment_inode_offset,
    z_erofs_extent_records_start, z_erofs_extent_recsz, z_erofs_map_header_start, CompactIndexPos,
    CompactPack, DataLayout, FromBytes, LclusterIndex, MapHeader,
    EROFS_FEATURE_INCOMPAT_COMPR_CFGS, Z_EROFS_ADVISE_BIG_PCLUSTER_1,
    Z_EROFS_ADVISE_BIG_PCLUSTER_2, Z_EROFS_ADVISE_EXTENTS, Z_EROFS_ADVISE_FRAGMENT_PCLUSTER,
    Z_EROFS_ADVISE_INLINE_PCLUSTER, Z_EROFS_ADVISE_INTERLACED_PCLUSTER,
    Z_EROFS_COMPACT_4B_MAX_LCLUSTERBITS, Z_EROFS_COMPRESSION_DEFLATE, Z_EROFS_COMPRESSION_LZ4,
    Z_EROFS_COMPRESSION_LZMA, Z_EROFS_COMPRESSION_ZSTD, Z_EROFS_EXTENT_PLEN_FMT_BIT,
    Z_EROFS_EXTENT_PLEN_MASK, Z_EROFS_EXTENT_PLEN_PARTIAL, Z_EROFS_FULL_INDEX_START,
    Z_EROFS_LCLUSTER_TYPE_HEAD1, Z_EROFS_LCLUSTER_TYPE_HEAD2, Z_EROFS_LCLUSTER_TYPE_NONHEAD,
    Z_EROFS_LCLUSTER_TYPE_PLAIN, Z_EROFS_LI_D0_CBLKCNT, Z_EROFS_LI_PARTIAL_REF,
    Z_EROFS_MAP_HEADER_SIZE, Z_EROFS_PCLUSTER_MAX_DSIZE, Z_EROFS_PCLUSTER_MAX_SIZE,
};

/// Most 4-byte extent records one map sums (64 MiB of records: offsets up to 64 TiB at 4 KiB
/// lclusters).
const MAX_EXT4_RECORDS: u64 = 1 << 24;

/// How the pcluster of a compressed extent is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Uncompressed, "shifted": the extent's bytes start at pcluster byte 0 (PLAIN lclusters).
    Plain,
    /// Uncompressed, "interlaced" (`INTERLACED_PCLUSTER`): the first `blksz - blkoff(m_la)` bytes
    /// of the extent are the last ones of the pcluster, the rest start at pcluster byte 0.
    Interlaced,
    /// LZ4 block format (lz4 and lz4hc), right-aligned in its pcluster.
    Lz4,
    /// MicroLZMA, right-aligned in its pcluster.
    Lzma,
    /// Raw DEFLATE, right-aligned in its pcluster.
    Deflate,
    /// A Zstandard frame, right-aligned in its pcluster.
    Zstd,
}

impl Compression {
    /// The algorithm of an on-disk id (`Z_EROFS_COMPRESSION_*`), `None` for unknown ids.
    pub fn from_id(id: u8) -> Option<Compression> {
        Some(match id {
            Z_EROFS_COMPRESSION_LZ4 => Compression::Lz4,
            Z_EROFS_COMPRESSION_LZMA => Compression::Lzma,
            Z_EROFS_COMPRESSION_DEFLATE => Compression::Deflate,
            Z_EROFS_COMPRESSION_ZSTD => Compression::Zstd,
            _ => return None,
        })
    }

    /// The on-disk algorithm id; `None` for the two uncompressed forms.
    pub fn id(self) -> Option<u8> {
        match self {
            Compression::Plain | Compression::Interlaced => None,
            Compression::Lz4 => Some(Z_EROFS_COMPRESSION_LZ4),
            Compression::Lzma => Some(Z_EROFS_COMPRESSION_LZMA),
            Compression::Deflate => Some(Z_EROFS_COMPRESSION_DEFLATE),
            Compression::Zstd => Some(Z_EROFS_COMPRESSION_ZSTD),
        }
    }

    /// A short name: `plain`, `interlaced`, `lz4`, `lzma`, `deflate`, `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Plain => "plain",
            Compression::Interlaced => "interlaced",
            Compression::Lz4 => "lz4",
            Compression::Lzma => "lzma",
            Compression::Deflate => "deflate",
            Compression::Zstd => "zstd",
        }
    }
}

/// One compressed extent: its logical range and its pcluster (the kernel's `erofs_map_blocks`
/// result for compressed inodes, with the whole decoded length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ZExtent {
    /// First logical byte (`m_la`).
    pub logical: u64,
    /// Decoded length: to the next extent's start, or to `i_size` for the last one.
    pub length: u64,
    /// Image byte offset of the pcluster (`m_pa`).
    pub physical: u64,
    /// Pcluster length in bytes (`m_plen`).
    pub plen: u64,
    /// How the pcluster is encoded.
    pub algorithm: Compression,
    /// The pcluster is the inline tail (ztailpacking).
    pub inline: bool,
    /// The head has `PARTIAL_REF`: the pcluster may decode to more than this extent (dedupe).
    pub partial_ref: bool,
    /// Head lcluster of the extent.
    pub head_lcn: u64,
    /// The extent is a fragment: its bytes are those of the packed inode from this offset
    /// (`z_fragmentoff`); `physical`, `plen` and `algorithm` mean nothing then.
    pub fragment: Option<u64>,
    /// The extent is not stored (an encoded extent of length 0): it reads as zeros.
    pub hole: bool,
}

/// The checked map header and what the tail lookup found (`z_erofs_fill_inode_lazy`).
#[derive(Clone, Copy, Debug)]
struct ZInfo {
    hdr_pos: u64,
    compact: bool,
    advise: u16,
    algs: [u8; 2],
    lclusterbits: u8,
    /// `h_idata_size` with INLINE_PCLUSTER (0: no inline tail).
    idata_size: u16,
    fragment: bool,
    /// `z_fragmentoff`: where the fragment starts in the packed inode.
    fragmentoff: u64,
    /// Head lcluster of the tail extent (ztailpacking or fragment inodes).
    tail_headlcn: u64,
    /// The number of encoded extents (`48BIT` FULL inodes with `Z_EROFS_ADVISE_EXTENTS`).
    extents: Option<u64>,
    /// Position of the inline tail pcluster.
    inline_pos: u64,
}

/// What one lcluster index says, accumulated over a map like the kernel's
/// `z_erofs_maprecorder` (a CBLKCNT seen on the way is remembered).
#[derive(Clone, Copy, Debug, Default)]
struct Rec {
    lcn: u64,
    ty: u16,
    headtype: u16,
    clusterofs: u64,
    delta: [u64; 2],
    pblk: u64,
    compressedblks: u64,
    partialref: bool,
    nextpackoff: u64,
}

/// Byte position of lcluster `lcn`, saturating.
fn lcn_pos(lcn: u64, lcbits: u8) -> u64 {
    if lcn > u64::MAX >> lcbits {
        u64::MAX
    } else {
        lcn << lcbits
    }
}

/// Little-endian `u32` at byte `at` of `buf`, 0 past its end.
fn le32_at(buf: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(b) = buf.get(at..at + 4) {
        w.copy_from_slice(b);
    }
    u32::from_le_bytes(w)
}

/// `decode_compactedbits`: the `lo` bits and type of the entry at bit `pos` of a pack.
fn decode_compactedbits(lobits: u32, pack: &[u8], pos: u32) -> (u64, u16) {
    let v = le32_at(pack, (pos / 8) as usize) >> (pos & 7);
    let lo = v & ((1 << lobits) - 1);
    (lo as u64, ((v >> lobits) & 3) as u16)
}

/// `get_compacted_la_distance`: `delta[1]` of the NONHEAD entry `i` of a pack.
fn compacted_la_distance(lobits: u32, encodebits: u32, vcnt: u32, pack: &[u8], mut i: u32) -> u64 {
    let mut d1: u32 = 0;
    let mut lo;
    loop {
        let (l, ty) = decode_compactedbits(lobits, pack, encodebits * i);
        lo = l as u32;
        if ty != Z_EROFS_LCLUSTER_TYPE_NONHEAD {
            return d1 as u64;
        }
        d1 += 1;
        i += 1;
        if i >= vcnt {
            break;
        }
    }
    // The pack's last entry stores delta[1] (the kernel's unsigned arithmetic, wrapping included).
    if lo & Z_EROFS_LI_D0_CBLKCNT as u32 == 0 {
        d1 = d1.wrapping_add(lo.wrapping_sub(1));
    }
    d1 as u64
}

impl Image {
    /// Maps byte `offset` (< size) of compressed `inode` to its extent.
    pub(crate) fn zmap(&self, inode: &Inode, offset: u64) -> Result<ZExtent> {
        let at = Location::nid(inode.nid);
        let mut zi = self.zinfo(inode, at)?;
        let z = match zi.extents {
            Some(count) => self.map_ext(inode, &zi, count, offset, at)?,
            None => self.map_fo(inode, &mut zi, offset, false, at)?,
        };
        // Lookahead by delta[1] and lookback by delta[0] disagree in a damaged index.
        if offset < z.logical || offset - z.logical >= z.length {
            return Err(Error::corrupted(
                format!(
                    "extent {:#x}+{:#x} (lcluster {}) does not cover offset {offset:#x}",
                    z.logical, z.length, z.head_lcn
                ),
                at,
            ));
        }
        Ok(z)
    }

    /// Reads and checks the map header; finds the tail extent when the inode needs it.
    fn zinfo(&self, inode: &Inode, at: Location) -> Result<ZInfo> {
        let bits = self.sb.blkszbits;
        let hdr_pos = z_erofs_map_header_start(inode.data_offset())
            .ok_or_else(|| Error::corrupted("map header position overflows", at))?;
        let hat = at.with_offset(hdr_pos).with_block(hdr_pos >> bits);
        let mut raw = [0u8; 8];
        self.meta_read(hdr_pos, &mut raw, hat)?;
        let h = MapHeader::read_from_bytes(&raw).expect("8 bytes");
        if let Some(fragmentoff) = fragment_inode_offset(raw) {
            // The whole file is a fragment; the other 63 bits of the header are its offset in the
            // packed inode, and nothing else of the header is looked at.
            return Ok(ZInfo {
                hdr_pos,
                compact: inode.layout == DataLayout::CompressedCompact,
                advise: Z_EROFS_ADVISE_FRAGMENT_PCLUSTER,
                algs: [0, 0],
                lclusterbits: bits,
                idata_size: 0,
                fragment: true,
                fragmentoff,
                tail_headlcn: 0,
                inline_pos: 0,
                extents: None,
            });
        }
        let advise = h.h_advise.get();
        let compact = inode.layout == DataLayout::CompressedCompact;
        if !compact && advise & Z_EROFS_ADVISE_EXTENTS != 0 {
            // Encoded extents: the header holds the extent count (48 bits) and the advise bits;
            // the records are mapped by `map_ext`.
            let count = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as u64
                | (u16::from_le_bytes([raw[6], raw[7]]) as u64) << 32;
            return Ok(ZInfo {
                hdr_pos,
                compact,
                advise,
                algs: [0, 0],
                lclusterbits: bits + (h.h_clusterbits & 15),
                idata_size: 0,
                fragment: advise & Z_EROFS_ADVISE_FRAGMENT_PCLUSTER != 0,
                fragmentoff: 0,
                tail_headlcn: 0,
                inline_pos: 0,
                extents: Some(count),
            });
        }
        let algs = [h.h_algorithmtype & 15, h.h_algorithmtype >> 4];
        for (n, alg) in algs.iter().enumerate() {
            if *alg >= 4 {
                return Err(Error::unsupported(
                    format!("unknown HEAD{} compression algorithm {alg}", n + 1),
                    hat,
                ));
            }
        }
        let big = advise & (Z_EROFS_ADVISE_BIG_PCLUSTER_1 | Z_EROFS_ADVISE_BIG_PCLUSTER_2);
        if big != 0 && !self.sb.has_incompat(EROFS_FEATURE_INCOMPAT_COMPR_CFGS) {
            return Err(Error::corrupted(
                "big pclusters without the superblock feature (COMPR_CFGS)",
                hat,
            ));
        }
        if compact
            && big != 0
            && big != Z_EROFS_ADVISE_BIG_PCLUSTER_1 | Z_EROFS_ADVISE_BIG_PCLUSTER_2
        {
            return Err(Error::corrupted(
                "compact indexes with BIG_PCLUSTER_1 != BIG_PCLUSTER_2",
                hat,
            ));
        }
        let fragment = advise & Z_EROFS_ADVISE_FRAGMENT_PCLUSTER != 0;
        let idata_size = if !fragment && advise & Z_EROFS_ADVISE_INLINE_PCLUSTER != 0 {
            h.h_idata_size()
        } else {
            0
        };
        let mut zi = ZInfo {
            hdr_pos,
            compact,
            advise,
            algs,
            lclusterbits: bits + (h.h_clusterbits & 15),
            idata_size,
            fragment,
            // For a tail fragment `h_fragmentoff`; FULL indexes add the tail head's block number
            // as the high 32 bits (found with the tail below).
            fragmentoff: u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as u64,
            tail_headlcn: 0,
            inline_pos: 0,
            extents: None,
        };
        if idata_size != 0 || fragment {
            self.map_fo(inode, &mut zi, inode.size.saturating_sub(1), true, at)?;
        }
        Ok(zi)
    }

    /// `z_erofs_load_lcluster_from_disk`: loads index entry `lcn` into `m`.
    fn load_lcluster(
        &self,
        inode: &Inode,
        zi: &ZInfo,
        m: &mut Rec,
        lcn: u64,
        lookahead: bool,
        at: Location,
    ) -> Result<()> {
        if zi.compact {
            self.load_compact(inode, zi, m, lcn, lookahead, at)?;
        } else {
            self.load_full(zi, m, lcn, at)?;
        }
        if m.ty != Z_EROFS_LCLUSTER_TYPE_NONHEAD && m.clusterofs >= 1 << zi.lclusterbits {
            return Err(Error::corrupted(
                format!(
                    "clusterofs {} of lcluster {lcn} is not inside the lcluster",
                    m.clusterofs
                ),
                at,
            ));
        }
        Ok(())
    }

    fn index_at(&self, pos: u64, at: Location) -> Location {
        at.with_offset(pos).with_block(pos >> self.sb.blkszbits)
    }

    /// `z_erofs_load_full_lcluster`.
    fn load_full(&self, zi: &ZInfo, m: &mut Rec, lcn: u64, at: Location) -> Result<()> {
        let pos = lcn
            .checked_mul(8)
            .and_then(|o| {
                o.checked_add(zi.hdr_pos + Z_EROFS_MAP_HEADER_SIZE + Z_EROFS_FULL_INDEX_START)
            })
            .ok_or_else(|| {
                Error::corrupted(format!("index of lcluster {lcn} is out of range"), at)
            })?;
        let iat = self.index_at(pos, at);
        let mut raw = [0u8; 8];
        self.meta_read(pos, &mut raw, iat)?;
        let di = LclusterIndex::read_from_bytes(&raw).expect("8 bytes");
        m.lcn = lcn;
        m.nextpackoff = pos + 8;
        let advise = di.di_advise.get();
        m.ty = di.lcluster_type();
        if m.ty == Z_EROFS_LCLUSTER_TYPE_NONHEAD {
            m.clusterofs = 1 << zi.lclusterbits;
            let d0 = di.delta0();
            m.delta[0] = d0 as u64;
            if d0 & Z_EROFS_LI_D0_CBLKCNT != 0 {
                if zi.advise & (Z_EROFS_ADVISE_BIG_PCLUSTER_1 | Z_EROFS_ADVISE_BIG_PCLUSTER_2) == 0
                {
                    return Err(Error::corrupted(
                        format!("CBLKCNT at lcluster {lcn} without big pclusters"),
                        iat,
                    ));
                }
                m.compressedblks = (d0 & !Z_EROFS_LI_D0_CBLKCNT) as u64;
                m.delta[0] = 1;
            }
            m.delta[1] = di.delta1() as u64;
        } else {
            m.partialref = advise & Z_EROFS_LI_PARTIAL_REF != 0;
            m.clusterofs = di.di_clusterofs.get() as u64;
            m.pblk = di.di_u.get() as u64;
        }
        Ok(())
    }

    /// `z_erofs_load_compact_lcluster`: finds the pack holding `lcn` and unpacks its entry.
    fn load_compact(
        &self,
        inode: &Inode,
        zi: &ZInfo,
        m: &mut Rec,
        lcn: u64,
        lookahead: bool,
        at: Location,
    ) -> Result<()> {
        let totalidx = inode.nblocks();
        if lcn >= totalidx {
            return Err(Error::corrupted(
                format!("lcluster {lcn} is past the {totalidx} compact indexes"),
                at,
            ));
        }
        if zi.lclusterbits > Z_EROFS_COMPACT_4B_MAX_LCLUSTERBITS {
            return Err(Error::corrupted(
                format!(
                    "compact indexes with lclusterbits {} (at most {})",
                    zi.lclusterbits, Z_EROFS_COMPACT_4B_MAX_LCLUSTERBITS
                ),
                at,
            ));
        }
        m.lcn = lcn;
        let ebase = zi.hdr_pos + Z_EROFS_MAP_HEADER_SIZE;
        let CompactIndexPos {
            pos,
            amortizedshift: shift,
        } = compact_index_split(ebase, totalidx, zi.advise)
            .locate(ebase, lcn)
            .ok_or_else(|| {
                Error::corrupted(format!("index of lcluster {lcn} is out of range"), at)
            })?;
        self.unpack_compacted(zi, m, shift, pos, lookahead, at)
    }

    /// `unpack_compacted_index`: entry at byte `pos` of a pack of `1 << shift`-byte entries.
    fn unpack_compacted(
        &self,
        zi: &ZInfo,
        m: &mut Rec,
        shift: u32,
        pos: u64,
        lookahead: bool,
        at: Location,
    ) -> Result<()> {
        let lcbits = zi.lclusterbits as u32;
        let Some(CompactPack {
            vcnt,
            bytes: packsize,
            encodebits,
            lobits,
        }) = compact_pack(shift, zi.lclusterbits)
        else {
            return Err(Error::unsupported(
                format!(
                    "compact {}-byte indexes with lclusterbits {lcbits}",
                    1 << shift
                ),
                at,
            ));
        };
        let packsize = packsize as u64;
        let packpos = pos & !(packsize - 1);
        let iat = self.index_at(packpos, at);
        let mut pack = [0u8; 32];
        let pack = &mut pack[..packsize as usize];
        self.meta_read(packpos, pack, iat)?;
        m.nextpackoff = packpos + packsize;
        let big_pcluster = zi.advise & Z_EROFS_ADVISE_BIG_PCLUSTER_1 != 0;
        let cblkcnt = Z_EROFS_LI_D0_CBLKCNT as u64;
        let i = ((pos - packpos) >> shift) as i64;

        let (lo, ty) = decode_compactedbits(lobits, pack, encodebits * i as u32);
        m.ty = ty;
        if ty == Z_EROFS_LCLUSTER_TYPE_NONHEAD {
            m.clusterofs = 1 << lcbits;
            if lookahead {
                m.delta[1] = compacted_la_distance(lobits, encodebits, vcnt, pack, i as u32);
            }
            if lo & cblkcnt != 0 {
                if !big_pcluster {
                    return Err(Error::corrupted(
                        format!("CBLKCNT at lcluster {} without big pclusters", m.lcn),
                        iat,
                    ));
                }
                m.compressedblks = lo & !cblkcnt;
                m.delta[0] = 1;
                return Ok(());
            } else if i + 1 != vcnt as i64 {
                m.delta[0] = lo;
                return Ok(());
            }
            // The pack's last entry stores delta[1]: delta[0] comes from the previous entry.
            let (lo, ty) = decode_compactedbits(lobits, pack, encodebits * (i as u32 - 1));
            let lo = if ty != Z_EROFS_LCLUSTER_TYPE_NONHEAD {
                0
            } else if lo & cblkcnt != 0 {
                1
            } else {
                lo
            };
            m.delta[0] = lo + 1;
            return Ok(());
        }
        m.clusterofs = lo;
        m.delta[0] = 0;
        // The HEAD's block: base + the blocks of the earlier pclusters of this pack.
        let nblk = compact_head_nblk(i as u32, big_pcluster, |j| {
            let (lo, ty) = decode_compactedbits(lobits, pack, encodebits * j);
            (ty, lo)
        })
        .ok_or_else(|| {
            // A big-pcluster extent's first NONHEAD is its CBLKCNT: plain delta[0] is at least 2.
            Error::corrupted(
                format!(
                    "delta[0] <= 1 in the compact pack of lcluster {} (big pclusters)",
                    m.lcn
                ),
                iat,
            )
        })?;
        m.pblk = le32_at(pack, packsize as usize - 4) as u64 + nblk;
        Ok(())
    }

    /// The longest walk (in lclusters) an extent of at most 12 MiB allows.
    fn max_span(zi: &ZInfo) -> u64 {
        (Z_EROFS_PCLUSTER_MAX_DSIZE >> zi.lclusterbits) + 1
    }

    /// `z_erofs_extent_lookback`: from `m.lcn` back by `distance` until a HEAD.
    fn lookback(
        &self,
        inode: &Inode,
        zi: &ZInfo,
        m: &mut Rec,
        mut distance: u64,
        initial_lcn: u64,
        at: Location,
    ) -> Result<u64> {
        let lcbits = zi.lclusterbits;
        loop {
            if distance == 0 || m.lcn < distance {
                return Err(Error::corrupted(
                    format!("bogus lookback distance {distance} at lcluster {}", m.lcn),
                    at,
                ));
            }
            let lcn = m.lcn - distance;
            if initial_lcn - lcn > Self::max_span(zi) {
                return Err(Error::unsupported(
                    format!(
                        "extent of lcluster {initial_lcn} starts before lcluster {lcn}: longer \
                         than 12 MiB"
                    ),
                    at,
                ));
            }
            self.load_lcluster(inode, zi, m, lcn, false, at)?;
            if m.ty == Z_EROFS_LCLUSTER_TYPE_NONHEAD {
                distance = m.delta[0];
                continue;
            }
            m.headtype = m.ty;
            return Ok((lcn << lcbits) | m.clusterofs);
        }
    }

    /// `z_erofs_get_extent_compressedlen`: the pcluster's length in blocks.
    fn compressed_blocks(
        &self,
        inode: &Inode,
        zi: &ZInfo,
        m: &mut Rec,
        at: Location,
    ) -> Result<u64> {
        let bp1 = zi.advise & Z_EROFS_ADVISE_BIG_PCLUSTER_1 != 0;
        let bp2 = zi.advise & Z_EROFS_ADVISE_BIG_PCLUSTER_2 != 0;
        let lcn = m.lcn + 1;
        if (m.headtype == Z_EROFS_LCLUSTER_TYPE_HEAD1 && !bp1)
            || (m.headtype != Z_EROFS_LCLUSTER_TYPE_HEAD1 && !bp2)
            || lcn_pos(lcn, zi.lclusterbits) >= inode.size
        {
            m.compressedblks = 1;
        }
        if m.compressedblks != 0 {
            return Ok(m.compressedblks);
        }
        self.load_lcluster(inode, zi, m, lcn, false, at)?;
        if m.ty == Z_EROFS_LCLUSTER_TYPE_NONHEAD && m.delta[0] != 1 {
            return Err(Error::corrupted(
                format!("bogus CBLKCNT at lcluster {lcn}"),
                at,
            ));
        }
        if m.ty != Z_EROFS_LCLUSTER_TYPE_NONHEAD || m.compressedblks == 0 {
            m.compressedblks = 1;
        }
        Ok(m.compressedblks)
    }

    /// `z_erofs_get_extent_decompressedlen`: the whole extent's length, from its head at `la`.
    fn decompressed_len(
        &self,
        inode: &Inode,
        zi: &ZInfo,
        m: &mut Rec,
        la: u64,
        at: Location,
    ) -> Result<u64> {
        let lcbits = zi.lclusterbits as u32;
        let headlcn = la >> lcbits;
        let mut lcn = m.lcn;
        loop {
            let start = lcn_pos(lcn, zi.lclusterbits);
            if start >= inode.size {
                return Ok(inode.size - la);
            }
            if lcn - headlcn > Self::max_span(zi) {
                return Err(Error::unsupported(
                    format!("extent at lcluster {headlcn} is longer than 12 MiB"),
                    at,
                ));
            }
            self.load_lcluster(inode, zi, m, lcn, true, at)?;
            if m.ty == Z_EROFS_LCLUSTER_TYPE_NONHEAD {
                // Pre-1.0 mkfs wrote delta[1] = 0.
                if m.delta[1] == 0 {
                    m.delta[1] = 1;
                }
            } else {
                if lcn != headlcn {
                    // Ends where the next extent starts.
                    return Ok(start + m.clusterofs - la);
                }
                m.delta[1] = 1;
            }
            lcn += m.delta[1];
        }
    }

    /// `z_erofs_map_blocks_ext`: maps `ofs` through the encoded extent records of a 48-bit FULL
    /// inode. Records of `recsz = 4 << ((h_advise >> 1) & 3)` bytes start at
    /// `round_up(map header end, recsz)`: 4-byte records (`plen` only) follow an 8-byte first
    /// physical address and are one per lcluster, each pcluster right after the previous one;
    /// 8-byte records add `pstart_lo` (one per lcluster); 16- and 32-byte records add
    /// `pstart_hi` and `lstart` (and `lstart_hi`) and are sorted by `lstart`, found by binary
    /// search over `count`. `plen` carries the length (bits 0-20), `PARTIAL` (bit 27) and the
    /// format (bits 28-31: 0 by `h_advise`, else the algorithm id + 1, SHIFTED 5, INTERLACED 6).
    /// The last extent of a `FRAGMENT_PCLUSTER` inode is a fragment at offset `plen` (with
    /// `pstart` as high 32 bits when records have it); an extent of length 0 is a hole.
    fn map_ext(
        &self,
        inode: &Inode,
        zi: &ZInfo,
        count: u64,
        ofs: u64,
        at: Location,
    ) -> Result<ZExtent> {
        let recsz = z_erofs_extent_recsz(zi.advise);
        let lcs = 1u64 << zi.lclusterbits;
        let mut pos = z_erofs_extent_records_start(zi.hdr_pos, recsz);
        let mut rec = [0u8; 32];
        let read = |p: u64, n: u64, rec: &mut [u8; 32]| -> Result<()> {
            self.meta_read(p, &mut rec[..n as usize], self.index_at(p, at))
        };
        let le32 = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut lend = inode.size;
        let mut lstart: u64;
        let (mut plen, mut pa): (u32, u64) = (0, 0);
        let last;
        if recsz <= 8 {
            // One record per lcluster.
            let mut next_pa = None;
            if recsz == 4 {
                read(pos, 8, &mut rec)?;
                next_pa = Some(u64::from_le_bytes(rec[..8].try_into().expect("8 bytes")));
                pos += 8;
                lstart = 0;
                if (ofs >> zi.lclusterbits) > MAX_EXT4_RECORDS {
                    // The records before `ofs` are summed one by one, as the kernel does; bound
                    // the work one map may do (4 records per byte of image read anyway).
                    return Err(Error::unsupported(
                        format!(
                            "offset {ofs:#x} of an inode with 4-byte extent records: more than \
                             {MAX_EXT4_RECORDS} records to sum"
                        ),
                        at,
                    ));
                }
            } else {
                lstart = ofs & !(lcs - 1);
                pos += (lstart >> zi.lclusterbits) * recsz;
            }
            while lstart <= ofs {
                read(pos, recsz, &mut rec)?;
                plen = le32(&rec, 0);
                match next_pa.as_mut() {
                    Some(p) => {
                        pa = *p;
                        *p = p
                            .checked_add((plen & Z_EROFS_EXTENT_PLEN_MASK) as u64)
                            .ok_or_else(|| {
                                Error::corrupted(
                                    format!(
                                        "4-byte extent records sum past the end of the address \
                                         space (pcluster at {pa:#x})"
                                    ),
                                    at,
                                )
                            })?;
                    }
                    None => pa = le32(&rec, 4) as u64,
                }
                pos += recsz;
                lstart += lcs;
            }
            last = lstart >= inode.size.next_multiple_of(lcs);
            lend = lend.min(lstart);
            lstart -= lcs;
        } else {
            lstart = lend;
            let (mut l, mut r) = (0u64, count);
            while l < r {
                let mid = l + (r - l) / 2;
                let p = mid
                    .checked_mul(recsz)
                    .and_then(|o| o.checked_add(pos))
                    .ok_or_else(|| Error::corrupted("extent record position overflows", at))?;
                read(p, recsz, &mut rec)?;
                let mut la = le32(&rec, 12) as u64;
                let rpa = le32(&rec, 4) as u64 | (le32(&rec, 8) as u64) << 32;
                if recsz > 16 {
                    la |= (le32(&rec, 16) as u64) << 32;
                }
                if la > ofs {
                    r = mid;
                    if la > lend {
                        return Err(Error::corrupted(
                            format!("unsorted extent records (record {mid} at {la:#x})"),
                            self.index_at(p, at),
                        ));
                    }
                    lend = la;
                } else {
                    l = mid + 1;
                    if ofs == la {
                        r = r.min(l + 1);
                    }
                    lstart = la;
                    plen = le32(&rec, 0);
                    pa = rpa;
                }
            }
            last = l >= count;
        }
        let mut z = ZExtent {
            logical: lstart,
            length: lend.saturating_sub(lstart),
            physical: pa,
            plen: (plen & Z_EROFS_EXTENT_PLEN_MASK) as u64,
            algorithm: Compression::Plain,
            inline: false,
            partial_ref: plen & Z_EROFS_EXTENT_PLEN_PARTIAL != 0,
            head_lcn: lstart >> zi.lclusterbits,
            fragment: None,
            hole: false,
        };
        if lstart >= lend {
            // No record maps `ofs`: unmapped from there to `lend`, as in the kernel.
            z.logical = ofs;
            z.length = lend.saturating_sub(ofs);
            z.hole = true;
            return Ok(z);
        }
        if last && zi.fragment {
            let mut off = plen as u64;
            if recsz > 4 {
                off |= pa << 32;
            }
            z.fragment = Some(off);
            return Ok(z);
        }
        if z.plen == 0 {
            z.hole = true;
            return Ok(z);
        }
        let fmt = plen >> Z_EROFS_EXTENT_PLEN_FMT_BIT;
        let bmask = self.block_size() - 1;
        z.algorithm = match fmt {
            0 if zi.advise & Z_EROFS_ADVISE_INTERLACED_PCLUSTER != 0
                && (z.physical | z.plen) & bmask == 0 =>
            {
                Compression::Interlaced
            }
            0 => Compression::Plain,
            5 => Compression::Plain,
            6 => Compression::Interlaced,
            f => {
                let id = (f - 1) as u8;
                let alg = Compression::from_id(id).ok_or_else(|| {
                    Error::unsupported(format!("compression algorithm {id} of an extent"), at)
                })?;
                if !self.sb.compr.has_alg(id) {
                    return Err(Error::corrupted(
                        format!(
                            "algorithm {id} of the extent at {lstart:#x} is not in \
                             available_compr_algs {:#x}",
                            self.sb.compr.available_algs
                        ),
                        at,
                    ));
                }
                alg
            }
        };
        let blk = z.physical >> self.sb.blkszbits;
        if matches!(z.algorithm, Compression::Plain | Compression::Interlaced) && z.length > z.plen
        {
            return Err(Error::corrupted(
                format!(
                    "uncompressed extent of {} bytes at {lstart:#x} is longer than its pcluster \
                     ({} bytes)",
                    z.length, z.plen
                ),
                at.with_block(blk),
            ));
        }
        if z.plen > Z_EROFS_PCLUSTER_MAX_SIZE || z.length > Z_EROFS_PCLUSTER_MAX_DSIZE {
            return Err(Error::unsupported(
                format!(
                    "extent at {lstart:#x} of {} bytes in a pcluster of {} bytes (at most 12 MiB \
                     in 1 MiB)",
                    z.length, z.plen
                ),
                at.with_block(blk),
            ));
        }
        Ok(z)
    }

    /// `z_erofs_map_blocks_fo`. With `findtail`, maps byte `i_size - 1` and records the tail
    /// extent's head lcluster and inline pcluster position in `zi`.
    fn map_fo(
        &self,
        inode: &Inode,
        zi: &mut ZInfo,
        ofs: u64,
        findtail: bool,
        at: Location,
    ) -> Result<ZExtent> {
        let lcbits = zi.lclusterbits;
        let lcs = 1u64 << lcbits;
        if zi.fragment && !findtail && zi.tail_headlcn == 0 {
            // The whole file is one fragment (a whole-file fragment header, or a fragment tail
            // extent that starts at lcluster 0), as in `z_erofs_map_blocks_iter`.
            return Ok(ZExtent {
                logical: 0,
                length: inode.size,
                physical: 0,
                plen: 0,
                algorithm: Compression::Plain,
                inline: false,
                partial_ref: false,
                head_lcn: 0,
                fragment: Some(zi.fragmentoff),
                hole: false,
            });
        }
        let ztailpacking = zi.idata_size != 0;
        let initial_lcn = ofs >> lcbits;
        let endoff = ofs & (lcs - 1);
        let mut m = Rec::default();
        self.load_lcluster(inode, zi, &mut m, initial_lcn, false, at)?;
        if findtail && ztailpacking {
            zi.inline_pos = m.nextpackoff;
        }
        let mut end = (m.lcn + 1).saturating_mul(lcs);
        let mut full_mapped = false;
        let la = if m.ty == Z_EROFS_LCLUSTER_TYPE_NONHEAD {
            let distance = m.delta[0];
            self.lookback(inode, zi, &mut m, distance, initial_lcn, at)?
        } else if endoff >= m.clusterofs {
            m.headtype = m.ty;
            if ztailpacking && end > inode.size {
                end = inode.size;
            }
            (m.lcn << lcbits) | m.clusterofs
        } else {
            if m.lcn == 0 {
                return Err(Error::corrupted("invalid logical cluster 0", at));
            }
            end = (m.lcn << lcbits) | m.clusterofs;
            full_mapped = true;
            m.delta[0] = 1;
            self.lookback(inode, zi, &mut m, 1, initial_lcn, at)?
        };
        let head_lcn = m.lcn;
        let partial_ref = m.partialref;
        if findtail {
            zi.tail_headlcn = head_lcn;
            if zi.fragment && !zi.compact {
                // FULL indexes: the fragment offset is 64 bits, the high half in the tail head.
                zi.fragmentoff |= m.pblk << 32;
            }
        }
        let inline = ztailpacking && head_lcn == zi.tail_headlcn;
        let (physical, plen) = if inline {
            let pos = zi.inline_pos;
            let plen = zi.idata_size as u64;
            let bsz = self.block_size();
            if pos % bsz + plen > bsz {
                return Err(Error::corrupted(
                    format!("inline pcluster of {plen} bytes crosses a block boundary"),
                    self.index_at(pos, at),
                ));
            }
            (pos, plen)
        } else if zi.fragment && head_lcn == zi.tail_headlcn {
            if findtail {
                // Only the tail's position was wanted; its data is in the packed inode.
                return Ok(ZExtent {
                    logical: la,
                    length: 0,
                    physical: 0,
                    plen: 0,
                    algorithm: Compression::Plain,
                    inline: false,
                    partial_ref,
                    head_lcn,
                    fragment: None,
                    hole: false,
                });
            }
            // The tail extent, to the end of the file, is in the packed inode.
            return Ok(ZExtent {
                logical: la,
                length: inode.size.saturating_sub(la),
                physical: 0,
                plen: 0,
                algorithm: Compression::Plain,
                inline: false,
                partial_ref,
                head_lcn,
                fragment: Some(zi.fragmentoff),
                hole: false,
            });
        } else {
            let physical = self.blkpos(m.pblk, at)?;
            let blocks = self.compressed_blocks(inode, zi, &mut m, at)?;
            (physical, blocks << self.sb.blkszbits)
        };
        let algorithm = if m.headtype == Z_EROFS_LCLUSTER_TYPE_PLAIN {
            if zi.advise & Z_EROFS_ADVISE_INTERLACED_PCLUSTER != 0 {
                Compression::Interlaced
            } else {
                Compression::Plain
            }
        } else {
            let id = if m.headtype == Z_EROFS_LCLUSTER_TYPE_HEAD2 {
                zi.algs[1]
            } else {
                debug_assert_eq!(m.headtype, Z_EROFS_LCLUSTER_TYPE_HEAD1);
                zi.algs[0]
            };
            if !self.sb.compr.has_alg(id) {
                return Err(Error::corrupted(
                    format!(
                        "algorithm {id} of the extent at lcluster {head_lcn} is not in \
                         available_compr_algs {:#x}",
                        self.sb.compr.available_algs
                    ),
                    at,
                ));
            }
            Compression::from_id(id)
                .ok_or_else(|| Error::unsupported(format!("compression algorithm {id}"), at))?
        };
        let length = if full_mapped {
            end - la
        } else {
            self.decompressed_len(inode, zi, &mut m, la, at)?
        };
        let blk = physical >> self.sb.blkszbits;
        if matches!(algorithm, Compression::Plain | Compression::Interlaced) && length > plen {
            return Err(Error::corrupted(
                format!(
                    "uncompressed extent of {length} bytes at lcluster {head_lcn} is longer \
                     than its pcluster ({plen} bytes)"
                ),
                at.with_block(blk),
            ));
        }
        if plen > Z_EROFS_PCLUSTER_MAX_SIZE || length > Z_EROFS_PCLUSTER_MAX_DSIZE {
            return Err(Error::unsupported(
                format!(
                    "extent at lcluster {head_lcn} of {length} bytes in a pcluster of {plen} \
                     bytes (at most 12 MiB in 1 MiB)"
                ),
                at.with_block(blk),
            ));
        }
        Ok(ZExtent {
            logical: la,
            length,
            physical,
            plen,
            algorithm,
            inline,
            partial_ref,
            head_lcn,
            fragment: None,
            hole: false,
        })
    }
}
