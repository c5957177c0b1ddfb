//! Extended attributes: the inline body header, entries, name prefixes and the name bloom filter.

use crate::{LeU16, LeU32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Header of the inline xattr body (`struct erofs_xattr_ibody_header`), followed by
/// `h_shared_count` le32 shared xattr ids and then inline entries.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct XattrIbodyHeader {
    /// Bloom filter of the inode's xattr names; a 1 bit means "no name hashes here".
    pub h_name_filter: LeU32,
    /// Number of shared xattr ids that follow.
    pub h_shared_count: u8,
    /// Reserved.
    pub h_reserved2: [u8; 7],
}

/// Header of one xattr entry (`struct erofs_xattr_entry`), followed by the name suffix and the value;
/// the whole entry is padded to 4 bytes.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct XattrEntry {
    /// Length of the name suffix.
    pub e_name_len: u8,
    /// Prefix index (`EROFS_XATTR_INDEX_*`, or `0x80 | long prefix id`).
    pub e_name_index: u8,
    /// Length of the value.
    pub e_value_size: LeU16,
}

/// Size of the inline xattr body header (`struct erofs_xattr_ibody_header`).
pub const EROFS_XATTR_IBODY_HEADER_SIZE: u64 = 12;
/// Size of one shared xattr id after that header (`__le32 h_shared_xattrs[]`), and the unit of
/// `i_xattr_icount` and of xattr entry alignment.
pub const EROFS_XATTR_SHARED_ID_SIZE: u64 = 4;

const _: () =
    assert!(core::mem::size_of::<XattrIbodyHeader>() as u64 == EROFS_XATTR_IBODY_HEADER_SIZE);
const _: () = assert!(core::mem::size_of::<XattrEntry>() == 4);

/// `user.`
pub const EROFS_XATTR_INDEX_USER: u8 = 1;
/// `system.posix_acl_access` (whole name).
pub const EROFS_XATTR_INDEX_POSIX_ACL_ACCESS: u8 = 2;
/// `system.posix_acl_default` (whole name).
pub const EROFS_XATTR_INDEX_POSIX_ACL_DEFAULT: u8 = 3;
/// `trusted.`
pub const EROFS_XATTR_INDEX_TRUSTED: u8 = 4;
/// `lustre.` (not served by the kernel).
pub const EROFS_XATTR_INDEX_LUSTRE: u8 = 5;
/// `security.`
pub const EROFS_XATTR_INDEX_SECURITY: u8 = 6;
/// Bit marking a long-prefix index.
pub const EROFS_XATTR_LONG_PREFIX: u8 = 0x80;

/// Largest value an entry can hold (`e_value_size` is 16 bits).
pub const EROFS_XATTR_VALUE_MAX: usize = u16::MAX as usize;
/// Longest name suffix an entry can hold.
pub const EROFS_XATTR_NAME_MAX: usize = u8::MAX as usize;

/// The short prefixes, by index. Index 2 and 3 are whole names with an empty suffix.
pub const XATTR_PREFIXES: [(u8, &[u8]); 5] = [
    (EROFS_XATTR_INDEX_USER, b"user."),
    (
        EROFS_XATTR_INDEX_POSIX_ACL_ACCESS,
        b"system.posix_acl_access",
    ),
    (
        EROFS_XATTR_INDEX_POSIX_ACL_DEFAULT,
        b"system.posix_acl_default",
    ),
    (EROFS_XATTR_INDEX_TRUSTED, b"trusted."),
    (EROFS_XATTR_INDEX_SECURITY, b"security."),
];

/// Splits a full xattr name into `(index, suffix)`, or `None` if no prefix the kernel serves matches.
pub fn split_xattr_name(name: &[u8]) -> Option<(u8, &[u8])> {
    for (index, prefix) in XATTR_PREFIXES {
        let whole = matches!(
            index,
            EROFS_XATTR_INDEX_POSIX_ACL_ACCESS | EROFS_XATTR_INDEX_POSIX_ACL_DEFAULT
        );
        if whole {
            if name == prefix {
                return Some((index, &[]));
            }
        } else if let Some(suffix) = name.strip_prefix(prefix) {
            return Some((index, suffix));
        }
    }
    None
}

/// The full prefix text of a short index.
pub fn xattr_prefix(index: u8) -> Option<&'static [u8]> {
    XATTR_PREFIXES
        .iter()
        .find(|(i, _)| *i == index)
        .map(|(_, p)| *p)
}

/// Seed of the xattr name filter hash.
pub const EROFS_XATTR_FILTER_SEED: u32 = 0x25BB_E08F;
/// Bits in an xattr name filter.
pub const EROFS_XATTR_FILTER_BITS: u32 = 32;

/// The filter bit of a name: `xxh32(suffix, SEED + index) & 31`, with `index` the short prefix index.
pub fn xattr_filter_bit(index: u8, suffix: &[u8]) -> u32 {
    xxhash_rust::xxh32::xxh32(suffix, EROFS_XATTR_FILTER_SEED.wrapping_add(index as u32))
        & (EROFS_XATTR_FILTER_BITS - 1)
}

/// The stored filter of an inode holding the given names: all ones, with the bit of each name cleared.
pub fn xattr_name_filter<'a>(names: impl IntoIterator<Item = (u8, &'a [u8])>) -> u32 {
    names.into_iter().fold(u32::MAX, |f, (index, suffix)| {
        f & !(1 << xattr_filter_bit(index, suffix))
    })
}

/// Size of an entry with the given name suffix and value lengths, padded to 4 bytes.
pub const fn xattr_entry_size(name_len: usize, value_len: usize) -> u64 {
    ((4 + name_len + value_len + 3) & !3) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from the kernel patch cover letter (Jingbo Xu, 2023), reproduced in the reference.
    #[test]
    fn filter_bits_match_kernel_vectors() {
        let cases: [(&[u8], u32); 12] = [
            (b"security.ima", 0),
            (b"trusted.overlay.nlink", 2),
            (b"security.apparmor", 8),
            (b"user.overlay.opaque", 10),
            (b"security.selinux", 11),
            (b"trusted.overlay.opaque", 20),
            (b"system.posix_acl_default", 21),
            (b"user.mime_type", 23),
            (b"security.capability", 29),
            (b"system.posix_acl_access", 30),
            (b"trusted.overlay.metacopy", 31),
            (b"user.overlay.metacopy", 31),
        ];
        for (name, bit) in cases {
            let (index, suffix) = split_xattr_name(name).unwrap();
            assert_eq!(
                xattr_filter_bit(index, suffix),
                bit,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
        let (i, s) = split_xattr_name(b"security.selinux").unwrap();
        assert_eq!(xattr_name_filter([(i, s)]), 0xFFFF_F7FF);
    }

    #[test]
    fn names_split_by_prefix() {
        assert_eq!(split_xattr_name(b"user.x"), Some((1, &b"x"[..])));
        assert_eq!(
            split_xattr_name(b"system.posix_acl_access"),
            Some((2, &b""[..]))
        );
        assert_eq!(split_xattr_name(b"system.posix_acl_accessx"), None);
        assert_eq!(split_xattr_name(b"system.foo"), None);
        assert_eq!(split_xattr_name(b"security."), Some((6, &b""[..])));
    }
}
