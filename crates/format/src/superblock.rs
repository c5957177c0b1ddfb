//! The superblock (at byte 1024) and its checksum.

use crate::{LeI64, LeU16, LeU32, LeU64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `magic` of an EROFS superblock.
pub const EROFS_SUPER_MAGIC_V1: u32 = 0xE0F5_E1E2;
/// Absolute byte offset of the superblock.
pub const EROFS_SUPER_OFFSET: u64 = 1024;

/// `feature_compat`: the superblock checksum is valid and checked.
pub const EROFS_FEATURE_COMPAT_SB_CHKSUM: u32 = 0x0000_0001;
/// `feature_compat`: extended-inode times are modification times.
pub const EROFS_FEATURE_COMPAT_MTIME: u32 = 0x0000_0002;
/// `feature_compat`: per-inode xattr name bloom filters are present.
pub const EROFS_FEATURE_COMPAT_XATTR_FILTER: u32 = 0x0000_0004;

/// `feature_incompat`: compressed data is right-aligned (zero padding in front).
pub const EROFS_FEATURE_INCOMPAT_ZERO_PADDING: u32 = 0x0000_0001;
/// `feature_incompat`: per-algorithm config records / big physical clusters.
pub const EROFS_FEATURE_INCOMPAT_COMPR_CFGS: u32 = 0x0000_0002;
/// `feature_incompat`: chunk-based inodes exist.
pub const EROFS_FEATURE_INCOMPAT_CHUNKED_FILE: u32 = 0x0000_0004;
/// `feature_incompat`: device table / HEAD2 lclusters.
pub const EROFS_FEATURE_INCOMPAT_DEVICE_TABLE: u32 = 0x0000_0008;
/// `feature_incompat`: compressed tails packed inline.
pub const EROFS_FEATURE_INCOMPAT_ZTAILPACKING: u32 = 0x0000_0010;
/// `feature_incompat`: packed inode / fragments.
pub const EROFS_FEATURE_INCOMPAT_FRAGMENTS: u32 = 0x0000_0020;
/// `feature_incompat`: long xattr name prefixes.
pub const EROFS_FEATURE_INCOMPAT_XATTR_PREFIXES: u32 = 0x0000_0040;
/// `feature_incompat`: 48-bit block addresses.
pub const EROFS_FEATURE_INCOMPAT_48BIT: u32 = 0x0000_0080;
/// `feature_incompat`: metadata compression.
pub const EROFS_FEATURE_INCOMPAT_METABOX: u32 = 0x0000_0100;
/// Shared xattrs are in the metabox (`xattr_blkaddr` counts blocks of the metabox inode's data).
pub const EROFS_FEATURE_COMPAT_SHARED_EA_IN_METABOX: u32 = 0x0000_0008;
/// Every incompatible feature Linux 6.18 knows.
pub const EROFS_ALL_FEATURE_INCOMPAT: u32 = 0x0000_01FF;

/// The 128-byte EROFS superblock, as in `struct erofs_super_block`.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct SuperBlock {
    /// [`EROFS_SUPER_MAGIC_V1`].
    pub magic: LeU32,
    /// See [`superblock_checksum`]; valid when `SB_CHKSUM` is set.
    pub checksum: LeU32,
    /// Compatible features (`EROFS_FEATURE_COMPAT_*`).
    pub feature_compat: LeU32,
    /// log2 of the block size.
    pub blkszbits: u8,
    /// Superblock size is `128 + 16 * sb_extslots`.
    pub sb_extslots: u8,
    /// Root directory nid (16-bit unless 48BIT).
    pub root_nid: LeU16,
    /// Total inode count (statfs `f_files`).
    pub inos: LeU64,
    /// Base time (seconds) of compact inodes.
    pub epoch: LeI64,
    /// Nanoseconds of every compact inode's times.
    pub fixed_nsec: LeU32,
    /// Total block count (statfs only).
    pub blocks: LeU32,
    /// Start block of the inode area: `iloc(nid) = meta_blkaddr * blksz + 32 * nid`.
    pub meta_blkaddr: LeU32,
    /// Start block of the shared xattr area.
    pub xattr_blkaddr: LeU32,
    /// Filesystem UUID.
    pub uuid: [u8; 16],
    /// Volume label, NUL-padded, at most 15 bytes used.
    pub volume_name: [u8; 16],
    /// Incompatible features (`EROFS_FEATURE_INCOMPAT_*`).
    pub feature_incompat: LeU32,
    /// `available_compr_algs` with COMPR_CFGS, else `lz4_max_distance`.
    pub u1: LeU16,
    /// Number of extra devices (DEVICE_TABLE).
    pub extra_devices: LeU16,
    /// Device table position in units of 128 bytes.
    pub devt_slotoff: LeU16,
    /// Must be 0.
    pub dirblkbits: u8,
    /// Number of long xattr name prefixes.
    pub xattr_prefix_count: u8,
    /// Long prefix table position in units of 4 bytes.
    pub xattr_prefix_start: LeU32,
    /// nid of the packed (fragments) inode.
    pub packed_nid: LeU64,
    /// Must be 0, or the kernel ignores the xattr name filters.
    pub xattr_filter_reserved: u8,
    /// Reserved.
    pub reserved: [u8; 3],
    /// Build time relative to `epoch` (informational).
    pub build_time: LeU32,
    /// 64-bit root nid (48BIT only).
    pub rootnid_8b: LeU64,
    /// Reserved.
    pub reserved2: [u8; 8],
}

const _: () = assert!(core::mem::size_of::<SuperBlock>() == 128);
const _: () = assert!(core::mem::offset_of!(SuperBlock, feature_incompat) == 80);
const _: () = assert!(core::mem::offset_of!(SuperBlock, xattr_filter_reserved) == 104);
const _: () = assert!(core::mem::offset_of!(SuperBlock, rootnid_8b) == 112);

/// The first 16-byte extension slot of the superblock (`sb_extslots >= 1`), right after
/// [`SuperBlock`]: where a `METABOX` image names its metabox inode.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct SuperBlockExt1 {
    /// nid of the metabox inode (`METABOX`); never itself in the metabox.
    pub metabox_nid: LeU64,
    /// Reserved.
    pub reserved3: [u8; 8],
}

const _: () = assert!(core::mem::size_of::<SuperBlockExt1>() == 16);

impl SuperBlock {
    /// Length of the EROFS bytes of an image with this superblock: `blocks << blkszbits`. The kernel
    /// reads nothing past them, so what follows (a seal) is outside the file system. Checks the magic and
    /// that the block size is one EROFS allows (512 B to 64 KiB); `Err` names what is wrong.
    pub fn image_length(&self) -> Result<u64, &'static str> {
        if self.magic.get() != EROFS_SUPER_MAGIC_V1 {
            return Err("no superblock magic at byte 1024");
        }
        if !(9..=16).contains(&self.blkszbits) {
            return Err("block size is not an EROFS block size (512 B to 64 KiB)");
        }
        Ok((self.blocks.get() as u64) << self.blkszbits)
    }
}

/// The superblock checksum: CRC-32C (Castagnoli, reflected) with seed `!0` and **no** final XOR, over
/// `block0[1024..blksz]` with the checksum field zeroed (`block0[1024..]` is `blksz - 1024` bytes for
/// blocks larger than 1 KiB, otherwise `blksz` bytes starting at 1024).
///
/// `sb_region` must be exactly those bytes, starting with the superblock.
pub fn superblock_checksum(sb_region: &[u8]) -> u32 {
    let mut buf = sb_region.to_vec();
    if buf.len() >= 8 {
        buf[4..8].fill(0);
    }
    // crc32c() = !crc_raw(!0, data); erofs stores crc_raw(!0, data).
    !crc32c::crc32c(&buf)
}

/// Length of the region [`superblock_checksum`] covers, starting at byte 1024.
pub const fn superblock_checksum_len(blkszbits: u8) -> usize {
    let blksz = 1usize << blkszbits;
    if blksz > EROFS_SUPER_OFFSET as usize {
        blksz - EROFS_SUPER_OFFSET as usize
    } else {
        blksz
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_seed_matches_kernel_form() {
        // Recent kernels compute crc32c_raw(0x5045B54A, sb + 8, len - 8): 0x5045B54A is the raw CRC state
        // after the magic and four zero bytes. Our formula must agree with that form for any tail.
        let mut region = vec![0u8; 3072];
        region[..4].copy_from_slice(&EROFS_SUPER_MAGIC_V1.to_le_bytes());
        for (i, b) in region.iter_mut().enumerate().skip(8) {
            *b = (i * 7 % 251) as u8;
        }
        let ours = superblock_checksum(&region);
        // crc32c_append(!seed_state) continues a raw state: raw(state, d) = !crc32c_append(!state, d).
        let kernel = !crc32c::crc32c_append(!0x5045_B54A, &region[8..]);
        assert_eq!(ours, kernel);
    }
}
