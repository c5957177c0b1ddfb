//! Inodes: compact (32-byte) and extended (64-byte), decoded like Linux 6.18's `erofs_read_inode`.
//!
//! An inode lives at `iloc(nid) = meta_blkaddr * blksz + 32 * nid`, or, when bit 63 of the nid is
//! set (`METABOX`), at `32 * (nid & EROFS_DIRENT_NID_MASK)` of the metabox inode's data. It is followed by its inline xattr
//! body (`xattr_isize` bytes) and then the per-layout area: the inline tail (FLAT_INLINE) or the chunk
//! index array (CHUNK_BASED). Compact inodes take their time from the superblock `epoch` plus their
//! 32-bit `i_mtime` and `fixed_nsec`; with `NLINK_1` (non-directories) their nlink is 1 and `i_nb` holds
//! the high start-block bits, otherwise `i_nb` is nlink.

use crate::error::{Error, Location, Result};
use crate::image::{Image, IN_METABOX};
use sealfs_format::{
    new_decode_dev, xattr_ibody_size, DataLayout, FromBytes, InodeCompact, InodeExtended,
    EROFS_CHUNK_FORMAT_48BIT, EROFS_CHUNK_FORMAT_BLKBITS_MASK, EROFS_CHUNK_FORMAT_INDEXES,
    EROFS_FT_BLKDEV, EROFS_FT_CHRDEV, EROFS_FT_DIR, EROFS_FT_FIFO, EROFS_FT_REG_FILE,
    EROFS_FT_SOCK, EROFS_FT_SYMLINK, EROFS_INODE_LAYOUT_EXTENDED, EROFS_I_ALL, EROFS_I_NLINK_1_BIT,
    S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFMT, S_IFREG, S_IFSOCK,
};

/// Every chunk format bit Linux 6.18 knows.
pub const EROFS_CHUNK_FORMAT_ALL: u16 =
    EROFS_CHUNK_FORMAT_BLKBITS_MASK | EROFS_CHUNK_FORMAT_INDEXES | EROFS_CHUNK_FORMAT_48BIT;

/// The type of a file, from its mode or a directory entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
    /// Symbolic link.
    Symlink,
}

impl FileType {
    /// The type as `stat(1)` names it ("regular file", "directory", "symbolic link", ...).
    pub fn name(self) -> &'static str {
        match self {
            FileType::Regular => "regular file",
            FileType::Directory => "directory",
            FileType::CharDevice => "character special file",
            FileType::BlockDevice => "block special file",
            FileType::Fifo => "fifo",
            FileType::Socket => "socket",
            FileType::Symlink => "symbolic link",
        }
    }

    /// The type of an `i_mode`, or `None` for a bogus `S_IFMT`.
    pub fn from_mode(mode: u16) -> Option<FileType> {
        Some(match mode & S_IFMT {
            S_IFREG => FileType::Regular,
            S_IFDIR => FileType::Directory,
            S_IFCHR => FileType::CharDevice,
            S_IFBLK => FileType::BlockDevice,
            S_IFIFO => FileType::Fifo,
            S_IFSOCK => FileType::Socket,
            S_IFLNK => FileType::Symlink,
            _ => return None,
        })
    }

    /// The type of a dirent `file_type` (`EROFS_FT_*`), or `None` for unknown values.
    pub fn from_dirent(ft: u8) -> Option<FileType> {
        Some(match ft {
            EROFS_FT_REG_FILE => FileType::Regular,
            EROFS_FT_DIR => FileType::Directory,
            EROFS_FT_CHRDEV => FileType::CharDevice,
            EROFS_FT_BLKDEV => FileType::BlockDevice,
            EROFS_FT_FIFO => FileType::Fifo,
            EROFS_FT_SOCK => FileType::Socket,
            EROFS_FT_SYMLINK => FileType::Symlink,
            _ => return None,
        })
    }

    /// The dirent `file_type` value of this type.
    pub fn dirent_type(self) -> u8 {
        match self {
            FileType::Regular => EROFS_FT_REG_FILE,
            FileType::Directory => EROFS_FT_DIR,
            FileType::CharDevice => EROFS_FT_CHRDEV,
            FileType::BlockDevice => EROFS_FT_BLKDEV,
            FileType::Fifo => EROFS_FT_FIFO,
            FileType::Socket => EROFS_FT_SOCK,
            FileType::Symlink => EROFS_FT_SYMLINK,
        }
    }
}

/// What `stat(2)` shows for an inode on a kernel mount (atime and ctime equal mtime).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Inode number: the nid (mapped by [`sealfs_format::nid_to_ino64`] in images with a metabox).
    pub ino: u64,
    /// Type and permission bits.
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Allocated 512-byte units, as the kernel computes them.
    pub blocks: u64,
    /// Preferred I/O size: the block size.
    pub blksize: u32,
    /// Modification time, seconds.
    pub mtime: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// Device number (glibc `makedev` form) for character and block devices, else 0.
    pub rdev: u64,
    /// Device major number.
    pub rdev_major: u32,
    /// Device minor number.
    pub rdev_minor: u32,
}

/// The C library's `makedev`: the 64-bit `dev_t` that `st_rdev` holds. A different rule from the
/// on-disk (and FUSE) encoding, [`sealfs_format::new_encode_dev`].
pub fn glibc_makedev(major: u32, minor: u32) -> u64 {
    let (major, minor) = (major as u64, minor as u64);
    ((major & 0xffff_f000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffff_ff00) << 12)
        | (minor & 0xff)
}

/// A decoded on-disk inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub(crate) nid: u64,
    /// The inode number the kernel shows (see [`sealfs_format::nid_to_ino64`]).
    pub(crate) ino: u64,
    pub(crate) iloc: u64,
    pub(crate) extended: bool,
    pub(crate) format: u16,
    pub(crate) layout: DataLayout,
    pub(crate) mode: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) nlink: u32,
    pub(crate) size: u64,
    pub(crate) mtime: i64,
    pub(crate) mtime_nsec: u32,
    pub(crate) ino32: u32,
    pub(crate) xattr_icount: u16,
    pub(crate) rdev: u32,
    /// Start block of flat data; `None` for the all-ones "no data" address of FLAT_PLAIN.
    pub(crate) startblk: Option<u64>,
    pub(crate) chunkformat: u16,
    pub(crate) chunkbits: u8,
    /// Compressed block count (compressed layouts), for `i_blocks`.
    pub(crate) compressed_blocks: u64,
    pub(crate) blkszbits: u8,
}

impl Inode {
    /// The inode number (nid): its 32-byte slot in the inode area.
    pub fn nid(&self) -> u64 {
        self.nid
    }

    /// The inode number `stat` shows on a kernel mount: the nid, except in images with a metabox
    /// (see [`sealfs_format::nid_to_ino64`]).
    pub fn ino(&self) -> u64 {
        self.ino
    }

    /// Byte offset of the inode: in the image, or with bit 63 set, in the metabox inode's data.
    pub fn iloc(&self) -> u64 {
        self.iloc
    }

    /// Whether this is a 64-byte extended inode.
    pub fn is_extended(&self) -> bool {
        self.extended
    }

    /// Size of the on-disk inode: 32 or 64 bytes.
    pub fn inode_isize(&self) -> u64 {
        sealfs_format::inode_isize(self.extended)
    }

    /// The raw `i_format`.
    pub fn format(&self) -> u16 {
        self.format
    }

    /// The data layout.
    pub fn layout(&self) -> DataLayout {
        self.layout
    }

    /// Type and permission bits.
    pub fn mode(&self) -> u16 {
        self.mode
    }

    /// The file type (always valid: a bogus type is rejected when the inode is read).
    pub fn file_type(&self) -> FileType {
        FileType::from_mode(self.mode).unwrap_or(FileType::Regular)
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }

    /// Whether this is a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }

    /// Whether this is a regular file.
    pub fn is_file(&self) -> bool {
        self.mode & S_IFMT == S_IFREG
    }

    /// Owner.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Group.
    pub fn gid(&self) -> u32 {
        self.gid
    }

    /// Link count.
    pub fn nlink(&self) -> u32 {
        self.nlink
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Modification time: seconds and nanoseconds.
    pub fn mtime(&self) -> (i64, u32) {
        (self.mtime, self.mtime_nsec)
    }

    /// The stored 32-bit `i_ino` (stat compatibility only; the kernel shows the nid).
    pub fn ino32(&self) -> u32 {
        self.ino32
    }

    /// `i_xattr_icount`.
    pub fn xattr_icount(&self) -> u16 {
        self.xattr_icount
    }

    /// Size of the inline xattr body in bytes.
    pub fn xattr_isize(&self) -> u64 {
        xattr_ibody_size(self.xattr_icount)
    }

    /// Device `(major, minor)` of a character or block device, else `(0, 0)`.
    pub fn rdev(&self) -> (u32, u32) {
        new_decode_dev(self.rdev)
    }

    /// Start block of flat data; `None` when absent (all-ones address, or not a flat layout).
    pub fn startblk(&self) -> Option<u64> {
        self.startblk
    }

    /// log2 of the chunk size of a chunk-based inode.
    pub fn chunkbits(&self) -> u8 {
        self.chunkbits
    }

    /// Chunk format bits of a chunk-based inode.
    pub fn chunkformat(&self) -> u16 {
        self.chunkformat
    }

    /// Byte offset right after the inode and its inline xattrs: the inline tail's position.
    pub fn data_offset(&self) -> u64 {
        self.iloc
            .saturating_add(self.inode_isize())
            .saturating_add(self.xattr_isize())
    }

    /// Number of blocks the data spans: `ceil(size / blksz)`.
    pub fn nblocks(&self) -> u64 {
        self.size.div_ceil(1 << self.blkszbits)
    }

    /// What `stat(2)` shows on a kernel mount.
    pub fn stat(&self) -> Stat {
        let (rdev_major, rdev_minor) = self.rdev();
        // The kernel takes a compressed inode's count as stored, 0 included (a file whose data
        // is all in the packed inode, or all inline).
        let blocks = if matches!(
            self.layout,
            DataLayout::CompressedFull | DataLayout::CompressedCompact
        ) {
            self.compressed_blocks << (self.blkszbits - 9)
        } else {
            self.size.next_multiple_of(1 << self.blkszbits) >> 9
        };
        Stat {
            ino: self.ino,
            mode: self.mode as u32,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            blocks,
            blksize: 1 << self.blkszbits,
            mtime: self.mtime,
            mtime_nsec: self.mtime_nsec,
            rdev: glibc_makedev(rdev_major, rdev_minor),
            rdev_major,
            rdev_minor,
        }
    }
}

impl Image {
    /// Brings the metadata blocks of inodes `nids` into the block cache ahead of use: blocks near one
    /// another are read in one request (with a verifying source, checked together). A hint for
    /// callers about to read many inodes (and their inline tails, in the same blocks), such as the
    /// entries of a directory; it reads at most a quarter of the cache and reports nothing (a block
    /// that fails is reported by the read that needs it).
    pub fn prefetch_inodes(&self, nids: &[u64]) {
        let base = (self.sb.meta_blkaddr as u64) << self.sb.blkszbits;
        let bits = self.blocks.block_bits();
        let mut blocks: Vec<u64> = nids
            .iter()
            .filter(|&&nid| !sealfs_format::nid_in_metabox(nid))
            .filter_map(|nid| nid.checked_mul(32)?.checked_add(base))
            // An extended inode (64 bytes) may straddle a block boundary: both blocks are wanted.
            .flat_map(|pos| [pos >> bits, pos.saturating_add(63) >> bits])
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        let _metadata = crate::verified::MetadataReads::begin();
        self.blocks.prefetch(&blocks);
    }

    /// Reads and validates inode `nid`.
    pub fn inode(&self, nid: u64) -> Result<Inode> {
        let _metadata = crate::verified::MetadataReads::begin();
        let at = Location::nid(nid);
        let sb = &self.sb;
        let pos = if sealfs_format::nid_in_metabox(nid) {
            (nid & sealfs_format::EROFS_DIRENT_NID_MASK)
                .checked_mul(32)
                .filter(|&o| o < IN_METABOX)
                .map(|o| o | IN_METABOX)
        } else {
            nid.checked_mul(32)
                .and_then(|o| ((sb.meta_blkaddr as u64) << sb.blkszbits).checked_add(o))
                .filter(|&pos| pos < IN_METABOX)
        }
        .ok_or_else(|| Error::corrupted("nid out of range", at))?;
        let at = at.with_offset(pos).with_block(pos >> sb.blkszbits);
        let mut raw = [0u8; 64];
        self.meta_read(pos, &mut raw[..32], at)?;
        let dic = InodeCompact::read_from_bytes(&raw[..32]).expect("32 bytes");
        let ifmt = dic.i_format.get();
        if ifmt & !EROFS_I_ALL != 0 {
            return Err(Error::unsupported(
                format!("i_format {ifmt:#x} has unknown bits"),
                at,
            ));
        }
        let layout = DataLayout::from_format(ifmt)
            .ok_or_else(|| Error::unsupported(format!("data layout {}", (ifmt >> 1) & 7), at))?;
        let extended = ifmt & EROFS_INODE_LAYOUT_EXTENDED != 0;
        let nlink_1 = (ifmt >> EROFS_I_NLINK_1_BIT) & 1 != 0;
        let mut inode = Inode {
            nid,
            ino: sealfs_format::nid_to_ino64(sb.metabox_nid.is_some(), nid),
            iloc: pos,
            extended,
            format: ifmt,
            layout,
            mode: dic.i_mode.get(),
            uid: 0,
            gid: 0,
            nlink: 0,
            size: 0,
            mtime: 0,
            mtime_nsec: 0,
            ino32: dic.i_ino.get(),
            xattr_icount: dic.i_xattr_icount.get(),
            rdev: 0,
            startblk: None,
            chunkformat: 0,
            chunkbits: 0,
            compressed_blocks: 0,
            blkszbits: sb.blkszbits,
        };
        // The union `i_u` and the high address bits `i_nb` (0 unless this inode form carries them).
        let (i_u, i_nb, addrmask);
        if extended {
            // An extended inode may straddle a block boundary: the choke point reads across it.
            self.meta_read(pos + 32, &mut raw[32..], at)?;
            let die = InodeExtended::read_from_bytes(&raw).expect("64 bytes");
            inode.uid = die.i_uid.get();
            inode.gid = die.i_gid.get();
            inode.nlink = die.i_nlink.get();
            inode.mtime = die.i_mtime.get();
            inode.mtime_nsec = die.i_mtime_nsec.get();
            inode.size = die.i_size.get();
            i_u = die.i_u.get();
            i_nb = die.i_nb.get();
            addrmask = (1u64 << 48) - 1;
        } else {
            inode.uid = dic.i_uid.get() as u32;
            inode.gid = dic.i_gid.get() as u32;
            if inode.mode & S_IFMT != S_IFDIR && nlink_1 {
                inode.nlink = 1;
                i_nb = dic.i_nb.get();
                addrmask = (1u64 << 48) - 1;
            } else {
                inode.nlink = dic.i_nb.get() as u32;
                i_nb = 0;
                addrmask = (1u64 << 32) - 1;
            }
            inode.mtime = sb.epoch.wrapping_add(dic.i_mtime.get() as i64);
            inode.mtime_nsec = sb.fixed_nsec;
            inode.size = dic.i_size.get() as u64;
            i_u = dic.i_u.get();
        }
        if inode.size > i64::MAX as u64 {
            return Err(Error::corrupted(
                format!("negative i_size {:#x}", inode.size),
                at,
            ));
        }
        match inode.mode & S_IFMT {
            S_IFDIR | S_IFREG | S_IFLNK => {
                let startblk = i_u as u64 | ((i_nb as u64) << 32);
                // The kernel compares with the 64-bit all-ones address under `addrmask`: 32 ones
                // for plain compact inodes, 48 ones otherwise.
                let null = startblk & addrmask == addrmask;
                inode.startblk = if null && layout == DataLayout::FlatPlain {
                    None
                } else {
                    Some(startblk)
                };
            }
            S_IFCHR | S_IFBLK => inode.rdev = i_u,
            S_IFIFO | S_IFSOCK => {}
            _ => {
                return Err(Error::corrupted(
                    format!("bogus i_mode {:o}", inode.mode),
                    at,
                ))
            }
        }
        match layout {
            DataLayout::CompressedFull | DataLayout::CompressedCompact => {
                inode.startblk = None;
                inode.compressed_blocks = i_u as u64 | ((i_nb as u64) << 32);
            }
            DataLayout::ChunkBased => {
                inode.startblk = None;
                let chunkformat = (i_u & 0xffff) as u16;
                if chunkformat & !EROFS_CHUNK_FORMAT_ALL != 0 {
                    return Err(Error::unsupported(
                        format!("chunk format {chunkformat:#x}"),
                        at,
                    ));
                }
                inode.chunkformat = chunkformat;
                inode.chunkbits =
                    sb.blkszbits + (chunkformat & EROFS_CHUNK_FORMAT_BLKBITS_MASK) as u8;
            }
            DataLayout::FlatPlain | DataLayout::FlatInline => {}
        }
        if !matches!(inode.mode & S_IFMT, S_IFDIR | S_IFREG | S_IFLNK) {
            inode.startblk = None;
        }
        Ok(inode)
    }
}

/// Longest symlink target the kernel returns: a page minus the terminating NUL.
pub const SYMLINK_MAX: usize = 4095;

impl Image {
    /// The target of symlink `inode`, as the kernel's `readlink` returns it: the data up to its first
    /// NUL, at most [`SYMLINK_MAX`] bytes.
    pub fn readlink(&self, inode: &Inode) -> Result<Vec<u8>> {
        if !inode.is_symlink() {
            return Err(Error::InvalidArgument(format!(
                "nid {} is not a symlink",
                inode.nid
            )));
        }
        let mut target = self.read_vec(inode, 0, SYMLINK_MAX)?;
        if let Some(n) = target.iter().position(|&b| b == 0) {
            target.truncate(n);
        }
        Ok(target)
    }
}
