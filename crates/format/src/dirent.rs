//! Directory entries.

use crate::{LeU16, LeU64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The 12-byte directory entry (`struct erofs_dirent`). A directory block holds an array of these
/// followed by the names; `nameoff` of the first entry divided by 12 is the entry count of the block.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Dirent {
    /// Target inode.
    pub nid: LeU64,
    /// Offset of the name inside the block.
    pub nameoff: LeU16,
    /// `EROFS_FT_*`.
    pub file_type: u8,
    /// Reserved.
    pub reserved: u8,
}

const _: () = assert!(core::mem::size_of::<Dirent>() == 12);

/// Size of a [`Dirent`].
pub const EROFS_DIRENT_SIZE: u64 = 12;
/// Longest name the kernel accepts.
pub const EROFS_NAME_LEN: usize = 255;

/// Directory entry file types (same values as Linux `FT_*`).
pub const EROFS_FT_UNKNOWN: u8 = 0;
/// Regular file.
pub const EROFS_FT_REG_FILE: u8 = 1;
/// Directory.
pub const EROFS_FT_DIR: u8 = 2;
/// Character device.
pub const EROFS_FT_CHRDEV: u8 = 3;
/// Block device.
pub const EROFS_FT_BLKDEV: u8 = 4;
/// FIFO.
pub const EROFS_FT_FIFO: u8 = 5;
/// Socket.
pub const EROFS_FT_SOCK: u8 = 6;
/// Symbolic link.
pub const EROFS_FT_SYMLINK: u8 = 7;

/// `S_IFMT` and the file type bits of `i_mode`.
pub const S_IFMT: u16 = 0o170000;
/// Socket.
pub const S_IFSOCK: u16 = 0o140000;
/// Symbolic link.
pub const S_IFLNK: u16 = 0o120000;
/// Regular file.
pub const S_IFREG: u16 = 0o100000;
/// Block device.
pub const S_IFBLK: u16 = 0o060000;
/// Directory.
pub const S_IFDIR: u16 = 0o040000;
/// Character device.
pub const S_IFCHR: u16 = 0o020000;
/// FIFO.
pub const S_IFIFO: u16 = 0o010000;

/// The dirent file type for an `i_mode`, or `EROFS_FT_UNKNOWN`.
pub const fn file_type_of_mode(mode: u16) -> u8 {
    match mode & S_IFMT {
        S_IFREG => EROFS_FT_REG_FILE,
        S_IFDIR => EROFS_FT_DIR,
        S_IFCHR => EROFS_FT_CHRDEV,
        S_IFBLK => EROFS_FT_BLKDEV,
        S_IFIFO => EROFS_FT_FIFO,
        S_IFSOCK => EROFS_FT_SOCK,
        S_IFLNK => EROFS_FT_SYMLINK,
        _ => EROFS_FT_UNKNOWN,
    }
}
