//! SquashFS 4.0 on-disk layout, as squashfs-tools (`squashfs_fs.h`) and the kernel
//! (`fs/squashfs/squashfs_fs.h`) define it: the superblock, inode types, and the encodings of
//! metadata and data block sizes. Field names follow the C headers. All integers are
//! little-endian.
//!
//! An image is: the superblock (96 bytes), optional compressor options, file data (data blocks
//! and fragment blocks), then tables made of *metadata blocks* (a 2-byte header, then at most
//! 8 KiB, compressed or not): inodes, directories, fragment entries, the NFS export table, the
//! uid/gid table, xattrs. The indexed tables (fragments, ids, xattr ids, export) are reached
//! through an array of 64-bit positions of their metadata blocks, at the `*_table_start`.

/// `s_magic`: "hsqs".
pub const SQUASHFS_MAGIC: u32 = 0x7371_7368;
/// Size of the superblock.
pub const SUPERBLOCK_SIZE: usize = 96;
/// Decompressed size of a full metadata block.
pub const SQUASHFS_METADATA_SIZE: usize = 8192;
/// Bit of a metadata block header set when the block is stored uncompressed.
pub const SQUASHFS_COMPRESSED_BIT: u16 = 1 << 15;
/// Bit of a data or fragment block size word set when the block is stored uncompressed.
pub const SQUASHFS_COMPRESSED_BIT_BLOCK: u32 = 1 << 24;
/// A fragment index meaning "no fragment".
pub const SQUASHFS_INVALID_FRAG: u32 = 0xffff_ffff;
/// An xattr index meaning "no xattrs".
pub const SQUASHFS_INVALID_XATTR: u32 = 0xffff_ffff;
/// A table position meaning "no such table".
pub const SQUASHFS_INVALID_BLK: u64 = u64::MAX;
/// Most entries one directory header may announce.
pub const SQUASHFS_DIR_COUNT: u32 = 256;
/// Longest name.
pub const SQUASHFS_NAME_LEN: usize = 256;
/// Smallest and largest data block sizes.
pub const MIN_BLOCK_SIZE: u32 = 4096;
/// See [`MIN_BLOCK_SIZE`].
pub const MAX_BLOCK_SIZE: u32 = 1 << 20;

/// Inode types (`SQUASHFS_*_TYPE`); the `L` ones are the extended forms.
pub mod ty {
    /// Directory.
    pub const DIR: u16 = 1;
    /// Regular file.
    pub const REG: u16 = 2;
    /// Symbolic link.
    pub const SYMLINK: u16 = 3;
    /// Block device.
    pub const BLKDEV: u16 = 4;
    /// Character device.
    pub const CHRDEV: u16 = 5;
    /// Named pipe.
    pub const FIFO: u16 = 6;
    /// Unix socket.
    pub const SOCKET: u16 = 7;
    /// Extended directory (more than 64 KiB of entries, an index, or xattrs).
    pub const LDIR: u16 = 8;
    /// Extended regular file (large, sparse, hard-linked, or with xattrs).
    pub const LREG: u16 = 9;
    /// Extended symbolic link (with xattrs).
    pub const LSYMLINK: u16 = 10;
    /// Extended block device.
    pub const LBLKDEV: u16 = 11;
    /// Extended character device.
    pub const LCHRDEV: u16 = 12;
    /// Extended named pipe.
    pub const LFIFO: u16 = 13;
    /// Extended socket.
    pub const LSOCKET: u16 = 14;
}

/// Xattr name prefixes by type (`SQUASHFS_XATTR_*`); the type's low byte indexes this.
pub const XATTR_PREFIXES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];
/// Bit of an xattr type set when the value is stored out of line (a reference to it instead).
pub const SQUASHFS_XATTR_VALUE_OOL: u16 = 0x100;

/// Compressor ids (`*_COMPRESSION`).
pub mod comp {
    /// zlib (`-comp gzip`).
    pub const ZLIB: u16 = 1;
    /// LZMA "alone" streams (`-comp lzma`, no kernel support).
    pub const LZMA: u16 = 2;
    /// LZO1X.
    pub const LZO: u16 = 3;
    /// xz streams.
    pub const XZ: u16 = 4;
    /// LZ4 blocks.
    pub const LZ4: u16 = 5;
    /// zstd frames.
    pub const ZSTD: u16 = 6;
}

/// `struct squashfs_super_block`.
#[derive(Debug, Clone)]
pub struct SuperBlock {
    /// Number of inodes.
    pub inodes: u32,
    /// Data block size, a power of two from 4 KiB to 1 MiB.
    pub block_size: u32,
    /// Number of fragment blocks.
    pub fragments: u32,
    /// Compressor id ([`comp`]).
    pub compression: u16,
    /// log2 of `block_size`.
    pub block_log: u16,
    /// `SQUASHFS_*` flags.
    pub flags: u16,
    /// Entries of the uid/gid table.
    pub no_ids: u16,
    /// Major and minor version: 4.0.
    pub s_major: u16,
    /// See `s_major`.
    pub s_minor: u16,
    /// The root directory's inode: metadata block (relative to the inode table) << 16 | offset.
    pub root_inode: u64,
    /// Bytes of the image in use (the file may be padded beyond).
    pub bytes_used: u64,
    /// Where the uid/gid table's index is.
    pub id_table_start: u64,
    /// Where the xattr id table is ([`SQUASHFS_INVALID_BLK`] without xattrs).
    pub xattr_id_table_start: u64,
    /// Where the inode table starts.
    pub inode_table_start: u64,
    /// Where the directory table starts.
    pub directory_table_start: u64,
    /// Where the fragment table's index is.
    pub fragment_table_start: u64,
    /// Where the NFS export table's index is (unused here).
    pub lookup_table_start: u64,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl SuperBlock {
    /// Parses the superblock and checks what every later read relies on: the magic, version,
    /// block size and log, and that the tables lie in order inside `bytes_used`, itself inside
    /// `file_len`. The error names the field.
    pub fn parse(b: &[u8; SUPERBLOCK_SIZE], file_len: u64) -> Result<SuperBlock, String> {
        let magic = u32_at(b, 0);
        if magic != SQUASHFS_MAGIC {
            return Err(if magic.swap_bytes() == SQUASHFS_MAGIC {
                "a big-endian SquashFS image (not supported)".into()
            } else {
                format!(
                    "not a SquashFS image (magic {magic:#010x}, expected {SQUASHFS_MAGIC:#010x})"
                )
            });
        }
        let sb = SuperBlock {
            inodes: u32_at(b, 4),
            block_size: u32_at(b, 12),
            fragments: u32_at(b, 16),
            compression: u16_at(b, 20),
            block_log: u16_at(b, 22),
            flags: u16_at(b, 24),
            no_ids: u16_at(b, 26),
            s_major: u16_at(b, 28),
            s_minor: u16_at(b, 30),
            root_inode: u64_at(b, 32),
            bytes_used: u64_at(b, 40),
            id_table_start: u64_at(b, 48),
            xattr_id_table_start: u64_at(b, 56),
            inode_table_start: u64_at(b, 64),
            directory_table_start: u64_at(b, 72),
            fragment_table_start: u64_at(b, 80),
            lookup_table_start: u64_at(b, 88),
        };
        if (sb.s_major, sb.s_minor) != (4, 0) {
            return Err(format!(
                "SquashFS version {}.{} (only 4.0 is read)",
                sb.s_major, sb.s_minor
            ));
        }
        if !sb.block_size.is_power_of_two()
            || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&sb.block_size)
        {
            return Err(format!(
                "superblock: block size {} (a power of two from 4 KiB to 1 MiB)",
                sb.block_size
            ));
        }
        if u32::from(sb.block_log) != sb.block_size.trailing_zeros() {
            return Err(format!(
                "superblock: block_log {} does not match block size {}",
                sb.block_log, sb.block_size
            ));
        }
        if sb.bytes_used > file_len {
            return Err(format!(
                "truncated: the superblock says the image is {} bytes, the file has {file_len}",
                sb.bytes_used
            ));
        }
        let tables = [
            ("inode table", sb.inode_table_start),
            ("directory table", sb.directory_table_start),
            ("uid/gid table", sb.id_table_start),
        ];
        for (name, start) in tables {
            if start < SUPERBLOCK_SIZE as u64 || start >= sb.bytes_used {
                return Err(format!(
                    "superblock: the {name} starts at byte {start}, outside the image's {} bytes",
                    sb.bytes_used
                ));
            }
        }
        if sb.inode_table_start >= sb.directory_table_start {
            return Err(format!(
                "superblock: the inode table (byte {}) does not come before the directory table \
                 (byte {})",
                sb.inode_table_start, sb.directory_table_start
            ));
        }
        for (name, start) in [
            ("fragment table", sb.fragment_table_start),
            ("xattr id table", sb.xattr_id_table_start),
        ] {
            if start != SQUASHFS_INVALID_BLK && start >= sb.bytes_used {
                return Err(format!(
                    "superblock: the {name} starts at byte {start}, outside the image's {} bytes",
                    sb.bytes_used
                ));
            }
        }
        Ok(sb)
    }

    /// Whether the image has no xattrs at all.
    pub fn no_xattrs(&self) -> bool {
        self.xattr_id_table_start == SQUASHFS_INVALID_BLK
    }
}

/// A metadata block header: (stored length, compressed). `None` for a length of 0 or above
/// 8 KiB, which no block has.
pub fn metadata_header(h: u16) -> Option<(usize, bool)> {
    let len = usize::from(h & !SQUASHFS_COMPRESSED_BIT);
    let compressed = h & SQUASHFS_COMPRESSED_BIT == 0;
    (1..=SQUASHFS_METADATA_SIZE)
        .contains(&len)
        .then_some((len, compressed))
}

/// A data or fragment block size word: (stored length, compressed). A word of 0 is a sparse
/// block (no bytes stored; callers check for it first).
pub fn block_word(w: u32) -> (u32, bool) {
    (
        w & !SQUASHFS_COMPRESSED_BIT_BLOCK,
        w & SQUASHFS_COMPRESSED_BIT_BLOCK == 0,
    )
}

/// A device number as the kernel's `new_decode_dev` reads it: (major, minor).
pub fn decode_dev(rdev: u32) -> (u32, u32) {
    (
        (rdev & 0xfff00) >> 8,
        (rdev & 0xff) | ((rdev >> 12) & 0xfff00),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_decode_as_the_kernel_does() {
        // new_encode_dev(major, minor) = (minor & 0xff) | (major << 8) | ((minor & ~0xff) << 12)
        let enc = |ma: u32, mi: u32| (mi & 0xff) | (ma << 8) | ((mi & !0xff) << 12);
        for (ma, mi) in [(1, 3), (8, 1), (259, 0x12345), (4095, 0xfffff), (0, 0)] {
            assert_eq!(decode_dev(enc(ma, mi)), (ma, mi));
        }
    }

    #[test]
    fn size_words() {
        assert_eq!(metadata_header(0x8000 | 10), Some((10, false)));
        assert_eq!(metadata_header(8192), Some((8192, true)));
        assert_eq!(metadata_header(8193), None);
        assert_eq!(metadata_header(0x8000), None);
        assert_eq!(block_word((1 << 24) | 4096), (4096, false));
        assert_eq!(block_word(100), (100, true));
    }
}
