//! The superblock: parsed and validated the way Linux 6.18's `erofs_read_superblock` does.
//!
//! Checks, in the kernel's order: magic, `blkszbits` in 9..=12, `dirblkbits == 0`, the checksum when
//! `SB_CHKSUM` is set, no unknown incompatible feature, the superblock size. Then the root nid (48-bit
//! form when `48BIT` is set and `rootnid_8b != 0`), the compression configuration (below) and the
//! long xattr prefix table (see [`crate::xattr`]). With `METABOX` (metadata compression), the
//! superblock must have an extension slot holding `metabox_nid`, which must not itself be in the
//! metabox; neither may `packed_nid` be.
//!
//! **Compression configuration** (the kernel's `z_erofs_parse_cfgs`, run at mount). Without
//! `COMPR_CFGS` the image may use LZ4 only, `u1` is `lz4_max_distance` and LZ4 pclusters are one
//! block. With it, `u1` is `available_compr_algs` (unknown bits are unsupported) and one record
//! per listed algorithm follows the superblock, in ascending id, each at a 4-byte boundary:
//! `le16 len` (0 means 65536) then `len` payload bytes. Payloads are checked as the kernel checks
//! them (an invalid one fails the open as [`Error::Corrupted`], the kernel's `-EINVAL` at mount):
//! LZ4 `len >= 14`, `max_pclusterblks <= 1 MiB / blksz` (0 means 1); LZMA `len >= 14`, format 0,
//! `4096 <= dict_size <= 8 MiB`; DEFLATE `len >= 6`, `windowbits <= 15`; ZSTD `len >= 6`, format
//! 0, `windowlog <= 10`. The LZMA record's `dict_size` sizes the MicroLZMA decoder (see
//! [`crate::decompress`]).

use crate::cache::Blocks;
use crate::error::{Error, Location, Result};
use sealfs_format::{
    superblock_checksum, superblock_checksum_len, DeflateCfgs, FromBytes, Lz4Cfgs, LzmaCfgs,
    SuperBlock, SuperBlockExt1, ZstdCfgs, EROFS_ALL_FEATURE_INCOMPAT,
    EROFS_FEATURE_COMPAT_SB_CHKSUM, EROFS_FEATURE_COMPAT_XATTR_FILTER,
    EROFS_FEATURE_INCOMPAT_48BIT, EROFS_FEATURE_INCOMPAT_COMPR_CFGS,
    EROFS_FEATURE_INCOMPAT_METABOX, EROFS_SUPER_MAGIC_V1, EROFS_SUPER_OFFSET,
    Z_EROFS_COMPRESSION_DEFLATE, Z_EROFS_COMPRESSION_LZ4, Z_EROFS_COMPRESSION_LZMA,
    Z_EROFS_COMPRESSION_ZSTD, Z_EROFS_DEFLATE_MAX_WINDOWBITS, Z_EROFS_LZMA_FORMAT_MICROLZMA,
    Z_EROFS_LZMA_MIN_DICT_SIZE, Z_EROFS_PCLUSTER_MAX_SIZE,
};

pub use sealfs_format::EROFS_FEATURE_COMPAT_SHARED_EA_IN_METABOX;
/// `feature_compat`: the long xattr prefix table is plain on disk (6.17-rc6+).
pub const EROFS_FEATURE_COMPAT_PLAIN_XATTR_PFX: u32 = 0x0000_0010;

/// Smallest `blkszbits` the kernel accepts.
pub const MIN_BLKSZBITS: u8 = 9;
/// Largest `blkszbits` the kernel accepts on a 4 KiB-page machine.
pub const MAX_BLKSZBITS: u8 = 12;

/// Every compression algorithm id Linux 6.18 knows (LZ4, LZMA, DEFLATE, ZSTD).
pub const Z_EROFS_ALL_COMPR_ALGS: u16 = 0xF;
/// Largest LZMA dictionary the kernel accepts (8 MiB; defined in `sealfs_format`).
pub use sealfs_format::Z_EROFS_LZMA_MAX_DICT_SIZE;

/// The compression configuration: which algorithms compressed inodes may use and their settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComprInfo {
    /// Bit `1 << id` for every algorithm the image may use (LZ4 only without `COMPR_CFGS`).
    pub available_algs: u16,
    /// LZ4 window (`max_distance`; 0 without a record and `lz4_max_distance` unset).
    pub lz4_max_distance: u16,
    /// Largest LZ4 pcluster in blocks (1 without an LZ4 record, or when the record says 0).
    pub lz4_max_pclusterblks: u16,
    /// LZMA dictionary size, when the image lists LZMA.
    pub lzma_dict_size: Option<u32>,
    /// DEFLATE window bits, when the image lists DEFLATE.
    pub deflate_windowbits: Option<u8>,
    /// ZSTD `windowlog` (window `1 << (windowlog + 10)`), when the image lists ZSTD.
    pub zstd_windowlog: Option<u8>,
}

impl ComprInfo {
    /// Whether algorithm `id` is listed.
    pub fn has_alg(&self, id: u8) -> bool {
        id < 16 && self.available_algs & (1 << id) != 0
    }
}

/// Everything the superblock says, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuperInfo {
    /// log2 of the block size.
    pub blkszbits: u8,
    /// Superblock size is `128 + 16 * sb_extslots`.
    pub sb_extslots: u8,
    /// The stored checksum (checked when `SB_CHKSUM` is set).
    pub checksum: u32,
    /// Compatible feature bits.
    pub feature_compat: u32,
    /// Incompatible feature bits.
    pub feature_incompat: u32,
    /// nid of the root directory.
    pub root_nid: u64,
    /// Total inode count (statfs only).
    pub inos: u64,
    /// Total block count (statfs only; 48-bit with `48BIT`).
    pub blocks: u64,
    /// Base seconds of compact-inode times.
    pub epoch: i64,
    /// Nanoseconds of every compact inode's times.
    pub fixed_nsec: u32,
    /// Build time relative to `epoch` (informational).
    pub build_time: u32,
    /// Start block of the inode area.
    pub meta_blkaddr: u32,
    /// Start block of the shared xattr area.
    pub xattr_blkaddr: u32,
    /// Filesystem UUID.
    pub uuid: [u8; 16],
    /// Volume label bytes, NUL-padded (see [`SuperInfo::label`]).
    pub volume_name: [u8; 16],
    /// Number of extra devices (`DEVICE_TABLE`).
    pub extra_devices: u16,
    /// Number of long xattr name prefixes.
    pub xattr_prefix_count: u8,
    /// Position of the long prefix table, in units of 4 bytes.
    pub xattr_prefix_start: u32,
    /// nid of the packed inode (`FRAGMENTS`).
    pub packed_nid: u64,
    /// Must be 0 for the xattr name filters to be used.
    pub xattr_filter_reserved: u8,
    /// nid of the metabox inode (`METABOX`), which holds the inodes whose nid has bit 63 set.
    pub metabox_nid: Option<u64>,
    /// Compression algorithms and their configuration records.
    pub compr: ComprInfo,
}

impl SuperInfo {
    /// Block size in bytes.
    pub fn block_size(&self) -> u64 {
        1 << self.blkszbits
    }

    /// The volume label: `volume_name` up to its first NUL.
    pub fn label(&self) -> &[u8] {
        let n = self.volume_name.iter().position(|&b| b == 0).unwrap_or(16);
        &self.volume_name[..n]
    }

    /// Whether a compatible feature bit is set.
    pub fn has_compat(&self, bit: u32) -> bool {
        self.feature_compat & bit != 0
    }

    /// Whether an incompatible feature bit is set.
    pub fn has_incompat(&self, bit: u32) -> bool {
        self.feature_incompat & bit != 0
    }

    /// Whether the kernel would use the per-inode xattr name filters: `COMPAT_XATTR_FILTER` is set
    /// and `xattr_filter_reserved` is 0.
    pub fn xattr_filter_enabled(&self) -> bool {
        self.has_compat(EROFS_FEATURE_COMPAT_XATTR_FILTER) && self.xattr_filter_reserved == 0
    }

    /// Build time in seconds since the Unix epoch: `epoch + build_time`.
    pub fn build_time_abs(&self) -> i64 {
        self.epoch.saturating_add(self.build_time as i64)
    }

    /// Superblock size in bytes.
    pub fn sb_size(&self) -> u64 {
        128 + 16 * self.sb_extslots as u64
    }
}

/// Reads and validates the superblock at byte 1024.
pub(crate) fn read_superblock(blocks: &Blocks) -> Result<SuperInfo> {
    let at = Location::offset(EROFS_SUPER_OFFSET);
    if blocks.len() < EROFS_SUPER_OFFSET + 128 {
        return Err(Error::corrupted(
            format!(
                "image of {} bytes is too short to hold a superblock",
                blocks.len()
            ),
            at,
        ));
    }
    let mut raw = [0u8; 128];
    blocks.read(EROFS_SUPER_OFFSET, &mut raw, at)?;
    let dsb = SuperBlock::read_from_bytes(&raw).expect("128 bytes");
    let magic = dsb.magic.get();
    if magic != EROFS_SUPER_MAGIC_V1 {
        return Err(Error::corrupted(
            format!("bad superblock magic {magic:#010x} (not an EROFS image)"),
            at,
        ));
    }
    let blkszbits = dsb.blkszbits;
    if !(MIN_BLKSZBITS..=MAX_BLKSZBITS).contains(&blkszbits) {
        return Err(Error::unsupported(
            format!("blkszbits {blkszbits} (only {MIN_BLKSZBITS}..={MAX_BLKSZBITS})"),
            at,
        ));
    }
    if dsb.dirblkbits != 0 {
        return Err(Error::unsupported(
            format!("dirblkbits {}", dsb.dirblkbits),
            at,
        ));
    }
    let feature_compat = dsb.feature_compat.get();
    if feature_compat & EROFS_FEATURE_COMPAT_SB_CHKSUM != 0 {
        let len = superblock_checksum_len(blkszbits);
        let region = blocks.read_vec(EROFS_SUPER_OFFSET, len, at)?;
        let expected = superblock_checksum(&region);
        let stored = dsb.checksum.get();
        if stored != expected {
            return Err(Error::corrupted(
                format!("superblock checksum {stored:#010x}, computed {expected:#010x}"),
                at,
            ));
        }
    }
    let feature_incompat = dsb.feature_incompat.get();
    let unknown = feature_incompat & !EROFS_ALL_FEATURE_INCOMPAT;
    if unknown != 0 {
        return Err(Error::unsupported(
            format!("unknown incompatible features {unknown:#x}"),
            at,
        ));
    }
    let sb_size = 128 + 16 * dsb.sb_extslots as u64;
    if sb_size > 4096 - EROFS_SUPER_OFFSET {
        return Err(Error::corrupted(
            format!("sb_extslots {} (superblock beyond a page)", dsb.sb_extslots),
            at,
        ));
    }
    if sealfs_format::nid_in_metabox(dsb.packed_nid.get()) {
        return Err(Error::corrupted(
            format!("packed_nid {:#x} is in the metabox", dsb.packed_nid.get()),
            at,
        ));
    }
    let metabox_nid = if feature_incompat & EROFS_FEATURE_INCOMPAT_METABOX != 0 {
        if sb_size < 128 + 16 {
            return Err(Error::corrupted(
                "METABOX without the superblock slot that names the metabox inode",
                at,
            ));
        }
        let mut ext = [0u8; 16];
        blocks.read(EROFS_SUPER_OFFSET + 128, &mut ext, at)?;
        let nid = SuperBlockExt1::read_from_bytes(&ext)
            .expect("16 bytes")
            .metabox_nid
            .get();
        if sealfs_format::nid_in_metabox(nid) {
            return Err(Error::corrupted(
                format!("metabox_nid {nid:#x} is in the metabox itself"),
                at,
            ));
        }
        Some(nid)
    } else {
        None
    };
    let compr = read_compr_cfgs(blocks, &dsb, feature_incompat, blkszbits, sb_size)?;
    let mut blocks_total = dsb.blocks.get() as u64;
    let root_nid =
        if feature_incompat & EROFS_FEATURE_INCOMPAT_48BIT != 0 && dsb.rootnid_8b.get() != 0 {
            blocks_total |= (dsb.root_nid.get() as u64) << 32;
            dsb.rootnid_8b.get()
        } else {
            dsb.root_nid.get() as u64
        };
    Ok(SuperInfo {
        blkszbits,
        sb_extslots: dsb.sb_extslots,
        checksum: dsb.checksum.get(),
        feature_compat,
        feature_incompat,
        root_nid,
        inos: dsb.inos.get(),
        blocks: blocks_total,
        epoch: dsb.epoch.get(),
        fixed_nsec: dsb.fixed_nsec.get(),
        build_time: dsb.build_time.get(),
        meta_blkaddr: dsb.meta_blkaddr.get(),
        xattr_blkaddr: dsb.xattr_blkaddr.get(),
        uuid: dsb.uuid,
        volume_name: dsb.volume_name,
        extra_devices: dsb.extra_devices.get(),
        xattr_prefix_count: dsb.xattr_prefix_count,
        xattr_prefix_start: dsb.xattr_prefix_start.get(),
        packed_nid: dsb.packed_nid.get(),
        xattr_filter_reserved: dsb.xattr_filter_reserved,
        metabox_nid,
        compr,
    })
}

/// The compression configuration (`z_erofs_parse_cfgs`): see the module documentation.
fn read_compr_cfgs(
    blocks: &Blocks,
    dsb: &SuperBlock,
    feature_incompat: u32,
    blkszbits: u8,
    sb_size: u64,
) -> Result<ComprInfo> {
    let u1 = dsb.u1.get();
    if feature_incompat & EROFS_FEATURE_INCOMPAT_COMPR_CFGS == 0 {
        return Ok(ComprInfo {
            available_algs: 1 << Z_EROFS_COMPRESSION_LZ4,
            lz4_max_distance: u1,
            lz4_max_pclusterblks: 1,
            ..ComprInfo::default()
        });
    }
    let at = Location::offset(EROFS_SUPER_OFFSET + 84);
    let unknown = u1 & !Z_EROFS_ALL_COMPR_ALGS;
    if unknown != 0 {
        return Err(Error::unsupported(
            format!("unknown compression algorithms {unknown:#x} in available_compr_algs"),
            at,
        ));
    }
    let mut info = ComprInfo {
        available_algs: u1,
        lz4_max_pclusterblks: 1,
        ..ComprInfo::default()
    };
    let mut offset = EROFS_SUPER_OFFSET + sb_size;
    for alg in 0..4u8 {
        if u1 & (1 << alg) == 0 {
            continue;
        }
        // erofs_read_metadata: a 4-byte aligned le16 length (0 = 65536), then the payload. Only
        // the first bytes of the payload are needed; all of it must be inside the image.
        offset = offset.next_multiple_of(4);
        let at = Location::offset(offset).with_block(offset >> blkszbits);
        let mut len = [0u8; 2];
        blocks.read(offset, &mut len, at)?;
        let len = match u16::from_le_bytes(len) {
            0 => 65536,
            n => n as usize,
        };
        blocks.check(offset + 2, len as u64, at)?;
        let mut payload = [0u8; 16];
        let n = len.min(payload.len());
        blocks.read(offset + 2, &mut payload[..n], at)?;
        offset += 2 + len as u64;
        let bad = |what: String| Err(Error::corrupted(what, at));
        match alg {
            Z_EROFS_COMPRESSION_LZ4 => {
                if len < 14 {
                    return bad(format!("LZ4 config record of {len} bytes (at least 14)"));
                }
                let cfg = Lz4Cfgs::read_from_bytes(&payload[..14]).expect("14 bytes");
                let max = (Z_EROFS_PCLUSTER_MAX_SIZE >> blkszbits) as u16;
                info.lz4_max_distance = cfg.max_distance.get();
                info.lz4_max_pclusterblks = match cfg.max_pclusterblks.get() {
                    0 => 1,
                    n if n > max => {
                        return bad(format!("LZ4 max_pclusterblks {n} (at most {max})"));
                    }
                    n => n,
                };
            }
            Z_EROFS_COMPRESSION_LZMA => {
                if len < 14 {
                    return bad(format!("LZMA config record of {len} bytes (at least 14)"));
                }
                let cfg = LzmaCfgs::read_from_bytes(&payload[..14]).expect("14 bytes");
                let (dict, format) = (cfg.dict_size.get(), cfg.format.get());
                if format != Z_EROFS_LZMA_FORMAT_MICROLZMA {
                    return bad(format!("LZMA format {format:#x}"));
                }
                if !(Z_EROFS_LZMA_MIN_DICT_SIZE..=Z_EROFS_LZMA_MAX_DICT_SIZE).contains(&dict) {
                    return bad(format!("LZMA dict_size {dict}"));
                }
                info.lzma_dict_size = Some(dict);
            }
            Z_EROFS_COMPRESSION_DEFLATE => {
                if len < 6 {
                    return bad(format!("DEFLATE config record of {len} bytes (at least 6)"));
                }
                let cfg = DeflateCfgs::read_from_bytes(&payload[..6]).expect("6 bytes");
                if cfg.windowbits > Z_EROFS_DEFLATE_MAX_WINDOWBITS {
                    return bad(format!("DEFLATE windowbits {}", cfg.windowbits));
                }
                info.deflate_windowbits = Some(cfg.windowbits);
            }
            _ => {
                debug_assert_eq!(alg, Z_EROFS_COMPRESSION_ZSTD);
                if len < 6 {
                    return bad(format!("ZSTD config record of {len} bytes (at least 6)"));
                }
                let cfg = ZstdCfgs::read_from_bytes(&payload[..6]).expect("6 bytes");
                if cfg.format != 0 {
                    return bad(format!("ZSTD format {}", cfg.format));
                }
                if cfg.windowlog > 10 {
                    return bad(format!("ZSTD windowlog {} (at most 10)", cfg.windowlog));
                }
                info.zstd_windowlog = Some(cfg.windowlog);
            }
        }
    }
    Ok(info)
}
