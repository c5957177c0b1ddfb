//! Compact (32-byte) and extended (64-byte) inodes.

use crate::{LeI64, LeU16, LeU32, LeU64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Inodes live in 32-byte slots: `nid = offset / 32`.
pub const INODE_SLOT_BITS: u32 = 5;
/// Size of one inode slot.
pub const INODE_SLOT_SIZE: u64 = 1 << INODE_SLOT_BITS;

/// `i_format` bit 0: extended (64-byte) inode.
pub const EROFS_INODE_LAYOUT_EXTENDED: u16 = 1;
/// `i_format` bits 1..3: data layout.
pub const EROFS_I_DATALAYOUT_BIT: u16 = 1;
/// `i_format` bit 4: compact non-directory with nlink 1 / directory without "." (6.15+).
pub const EROFS_I_NLINK_1_BIT: u16 = 4;
/// Every `i_format` bit Linux 6.18 knows.
pub const EROFS_I_ALL: u16 = 0x1F;

/// Data layout of an inode (`i_format` bits 1..3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum DataLayout {
    /// Consecutive blocks from `startblk`.
    FlatPlain = 0,
    /// Compressed, full (8-byte) lcluster indexes.
    CompressedFull = 1,
    /// Consecutive blocks, the last partial block stored inline after the inode.
    FlatInline = 2,
    /// Compressed, compact lcluster indexes.
    CompressedCompact = 3,
    /// Chunk-based: a block map or chunk index array follows the inode.
    ChunkBased = 4,
}

impl DataLayout {
    /// Decodes bits 1..3 of `i_format`; `None` for layouts Linux 6.18 rejects.
    pub fn from_format(i_format: u16) -> Option<Self> {
        Some(match (i_format >> EROFS_I_DATALAYOUT_BIT) & 7 {
            0 => Self::FlatPlain,
            1 => Self::CompressedFull,
            2 => Self::FlatInline,
            3 => Self::CompressedCompact,
            4 => Self::ChunkBased,
            _ => return None,
        })
    }

    /// `i_format` value for this layout and inode version.
    pub const fn i_format(self, extended: bool) -> u16 {
        ((self as u16) << EROFS_I_DATALAYOUT_BIT) | extended as u16
    }
}

/// "No block": reads as zeros / startblk don't-care (32-bit form).
pub const EROFS_NULL_ADDR: u32 = u32::MAX;

/// `i_u` of chunk-based inodes, `format` field: bits 0..4 are `chunkbits - blkszbits`.
pub const EROFS_CHUNK_FORMAT_BLKBITS_MASK: u16 = 0x001F;
/// Chunk format: 8-byte chunk indexes instead of a 4-byte block map.
pub const EROFS_CHUNK_FORMAT_INDEXES: u16 = 0x0020;
/// Chunk format: 48-bit start blocks.
pub const EROFS_CHUNK_FORMAT_48BIT: u16 = 0x0040;
/// Size of one block-map entry (chunk format without INDEXES).
pub const EROFS_BLOCK_MAP_ENTRY_SIZE: u64 = 4;

/// The 32-byte compact inode (`struct erofs_inode_compact`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct InodeCompact {
    /// Version and data layout.
    pub i_format: LeU16,
    /// Inline xattr size: `12 + 4 * (icount - 1)` bytes when non-zero.
    pub i_xattr_icount: LeU16,
    /// File type and permission bits.
    pub i_mode: LeU16,
    /// nlink (or high address bits with NLINK_1).
    pub i_nb: LeU16,
    /// File size.
    pub i_size: LeU32,
    /// Modification time relative to `sb.epoch` (6.15+; older kernels show `epoch`).
    pub i_mtime: LeU32,
    /// Start block, rdev, compressed block count or chunk format, by layout.
    pub i_u: LeU32,
    /// 32-bit inode number for stat compatibility (unused by the kernel, which shows the nid);
    /// sealfs writes the nid's low 32 bits, which stay when the layout keeps the inode in place.
    pub i_ino: LeU32,
    /// Owner.
    pub i_uid: LeU16,
    /// Group.
    pub i_gid: LeU16,
    /// Reserved.
    pub i_reserved: LeU32,
}

/// The 64-byte extended inode (`struct erofs_inode_extended`).
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct InodeExtended {
    /// Version and data layout.
    pub i_format: LeU16,
    /// Inline xattr size: `12 + 4 * (icount - 1)` bytes when non-zero.
    pub i_xattr_icount: LeU16,
    /// File type and permission bits.
    pub i_mode: LeU16,
    /// High 16 bits of the start block (6.15+ reads it): keep 0 below 2^32 blocks.
    pub i_nb: LeU16,
    /// File size.
    pub i_size: LeU64,
    /// Start block, rdev, compressed block count or chunk format, by layout.
    pub i_u: LeU32,
    /// 32-bit inode number for stat compatibility (unused by the kernel, which shows the nid);
    /// sealfs writes the nid's low 32 bits, which stay when the layout keeps the inode in place.
    pub i_ino: LeU32,
    /// Owner.
    pub i_uid: LeU32,
    /// Group.
    pub i_gid: LeU32,
    /// Modification time, seconds.
    pub i_mtime: LeI64,
    /// Modification time, nanoseconds.
    pub i_mtime_nsec: LeU32,
    /// Link count.
    pub i_nlink: LeU32,
    /// Reserved.
    pub i_reserved2: [u8; 16],
}

const _: () = assert!(core::mem::size_of::<InodeCompact>() as u64 == EROFS_INODE_COMPACT_SIZE);
const _: () = assert!(core::mem::size_of::<InodeExtended>() as u64 == EROFS_INODE_EXTENDED_SIZE);
const _: () = assert!(core::mem::offset_of!(InodeCompact, i_u) == 16);
const _: () = assert!(core::mem::offset_of!(InodeExtended, i_mtime) == 32);
const _: () = assert!(core::mem::offset_of!(InodeExtended, i_nlink) == 44);

/// Size of the inline xattr body for an `i_xattr_icount` (`erofs_xattr_ibody_size`): the 12-byte
/// header counts as one, every further unit is 4 bytes.
pub const fn xattr_ibody_size(icount: u16) -> u64 {
    if icount == 0 {
        0
    } else {
        crate::EROFS_XATTR_IBODY_HEADER_SIZE
            + crate::EROFS_XATTR_SHARED_ID_SIZE * (icount as u64 - 1)
    }
}

/// Inverse of [`xattr_ibody_size`]: the `i_xattr_icount` of an inline xattr body of `size` bytes (a
/// header plus a multiple of 4 bytes, or 0). May exceed `u16::MAX`: the caller checks.
pub const fn xattr_icount(size: u64) -> u64 {
    if size == 0 {
        0
    } else {
        (size - crate::EROFS_XATTR_IBODY_HEADER_SIZE) / crate::EROFS_XATTR_SHARED_ID_SIZE + 1
    }
}

/// Size of a compact inode core (`struct erofs_inode_compact`).
pub const EROFS_INODE_COMPACT_SIZE: u64 = 32;
/// Size of an extended inode core (`struct erofs_inode_extended`).
pub const EROFS_INODE_EXTENDED_SIZE: u64 = 64;

/// `inode_isize`: the size of the inode core, extended or compact.
pub const fn inode_isize(extended: bool) -> u64 {
    if extended {
        EROFS_INODE_EXTENDED_SIZE
    } else {
        EROFS_INODE_COMPACT_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xattr_icount_inverts_xattr_ibody_size() {
        for icount in [0u16, 1, 2, 3, 100, u16::MAX] {
            assert_eq!(xattr_icount(xattr_ibody_size(icount)), icount as u64);
        }
        // The kernel's example: icount 2 is a 12-byte header and one 4-byte unit.
        assert_eq!(xattr_ibody_size(2), 16);
        assert_eq!((inode_isize(false), inode_isize(true)), (32, 64));
    }
}
