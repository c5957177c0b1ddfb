//! On-disk structures and constants of sealfs images.
//!
//! A sealfs image *is* an EROFS image (4 KiB blocks), optionally followed by an fs-verity Merkle tree and
//! a seal trailer. This crate holds only the byte layouts and the small pure functions that are part of
//! the format (the superblock checksum, the xattr name filter hash, device number encoding); the builder
//! and the reader depend on it and never on each other.
//!
//! Field names follow the kernel's `fs/erofs/erofs_fs.h` verbatim so that one grep covers both. Every
//! struct is `#[repr(C)]` over little-endian integer types with compile-time size checks, so a struct's
//! bytes are exactly its on-disk form.

pub mod dirent;
pub mod filetable;
pub mod inode;
pub mod seal;
pub mod superblock;
pub mod xattr;
pub mod zmap;

pub use dirent::*;
pub use filetable::*;
pub use inode::*;
pub use seal::*;
pub use superblock::*;
pub use xattr::*;
pub use zmap::*;

/// Little-endian integer types used by the on-disk structs.
pub use zerocopy::little_endian::{I64 as LeI64, U16 as LeU16, U32 as LeU32, U64 as LeU64};
pub use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// log2 of the block size sealfs writes (4 KiB, the page size the kernel requires on x86-64).
pub const BLKSZBITS: u8 = 12;
/// Block size sealfs writes.
pub const BLKSZ: u64 = 1 << BLKSZBITS;

/// Byte offset of an inode slot: `meta_blkaddr * blksz + 32 * nid`.
pub const fn iloc(meta_blkaddr: u32, blkszbits: u8, nid: u64) -> u64 {
    ((meta_blkaddr as u64) << blkszbits) + (nid << INODE_SLOT_BITS)
}

/// Bit of a nid (in dirents, the superblock's root nid and inode numbers) that places the inode in the
/// metabox: its slot is at `32 * (nid & EROFS_DIRENT_NID_MASK)` of the metabox inode's data, not of the
/// metadata area (`METABOX`, Linux 6.17).
pub const EROFS_DIRENT_NID_METABOX_BIT: u32 = 63;
/// The slot part of a nid.
pub const EROFS_DIRENT_NID_MASK: u64 = (1 << EROFS_DIRENT_NID_METABOX_BIT) - 1;

/// Whether inode `nid` lives in the metabox.
pub const fn nid_in_metabox(nid: u64) -> bool {
    nid >> EROFS_DIRENT_NID_METABOX_BIT != 0
}

/// The inode number the kernel shows for `nid` (`erofs_nid_to_ino64`): the nid itself, except in
/// images with a metabox, where bits 31..62 move up by one and the metabox bit becomes bit 31 (so
/// that metabox inodes do not get huge numbers).
pub const fn nid_to_ino64(metabox: bool, nid: u64) -> u64 {
    if !metabox {
        return nid;
    }
    ((nid << 1) & !((1u64 << 32) - 1))
        | (nid & ((1 << 31) - 1))
        | ((nid >> EROFS_DIRENT_NID_METABOX_BIT) << 31)
}

/// Inverse of [`nid_to_ino64`] for nids below 2^62 (every nid: `32 * nid` is a byte offset).
pub const fn ino64_to_nid(metabox: bool, ino: u64) -> u64 {
    if !metabox {
        return ino;
    }
    ((ino >> 1) & !((1u64 << 31) - 1) & EROFS_DIRENT_NID_MASK)
        | (ino & ((1 << 31) - 1))
        | (((ino >> 31) & 1) << EROFS_DIRENT_NID_METABOX_BIT)
}

/// Linux "new" device number encoding, as stored in `i_u` of device inodes and carried by FUSE
/// (`new_encode_dev`: `(minor & 0xff) | (major << 8) | ((minor & ~0xff) << 12)`). Only numbers that
/// pass [`new_valid_dev`] round-trip. Not the C library's `makedev` (the 64-bit `st_rdev` form).
pub const fn new_encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | (major << 8) | ((minor & !0xff) << 12)
}

/// Largest major number a device inode can store: the kernel's 32-bit `dev_t` has 12 major bits
/// (`MINORBITS = 20`), and [`new_encode_dev`] keeps exactly those.
pub const NEW_DEV_MAX_MAJOR: u32 = 0xfff;
/// Largest minor number a device inode can store (20 bits, `MINORMASK`).
pub const NEW_DEV_MAX_MINOR: u32 = 0xfffff;

/// Whether `(major, minor)` fits the kernel's 32-bit `dev_t`, so that [`new_encode_dev`] and
/// [`new_decode_dev`] round-trip it.
pub const fn new_valid_dev(major: u32, minor: u32) -> bool {
    major <= NEW_DEV_MAX_MAJOR && minor <= NEW_DEV_MAX_MINOR
}

/// Inverse of [`new_encode_dev`]: `(major, minor)`.
pub const fn new_decode_dev(dev: u32) -> (u32, u32) {
    ((dev & 0xfff00) >> 8, (dev & 0xff) | ((dev >> 12) & 0xfff00))
}

/// Rounds `v` up to a multiple of the power of two `align`.
pub const fn round_up(v: u64, align: u64) -> u64 {
    (v + align - 1) & !(align - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_round_trip() {
        for (ma, mi) in [(0, 0), (1, 3), (8, 1), (259, 0x12345), (0xfff, 0xfffff)] {
            assert!(new_valid_dev(ma, mi));
            assert_eq!(new_decode_dev(new_encode_dev(ma, mi)), (ma, mi));
        }
        assert!(!new_valid_dev(0x1000, 0));
        assert!(!new_valid_dev(0, 0x100000));
        // The kernel's documented example: major 8, minor 1 encodes as 0x801.
        assert_eq!(new_encode_dev(8, 1), 0x801);
    }

    #[test]
    fn metabox_inode_numbers_round_trip() {
        // As the 6.18 kernel showed them for a `mkfs.erofs -m4096` image: `stat` of the root
        // (nid 2^63) and of nid 2^63 + 3007 gives 2^31 and 2^31 + 3007.
        assert_eq!(nid_to_ino64(true, 1 << 63), 1 << 31);
        assert_eq!(nid_to_ino64(true, (1 << 63) + 3007), (1 << 31) + 3007);
        assert_eq!(nid_to_ino64(true, 42), 42);
        assert_eq!(nid_to_ino64(false, (1 << 63) + 5), (1 << 63) + 5);
        for nid in [
            0,
            1,
            42,
            (1 << 31) - 1,
            1 << 31,
            (1 << 40) + 7,
            (1 << 58) - 1,
        ] {
            for nid in [nid, nid | 1 << 63] {
                assert_eq!(ino64_to_nid(true, nid_to_ino64(true, nid)), nid, "{nid:#x}");
            }
        }
    }
}
