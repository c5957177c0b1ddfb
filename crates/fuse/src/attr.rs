//! Attributes as the kernel shows them: times, file types, device numbers, empty attributes.

use fuser::{Errno, FileAttr, FileType as FuseType, INodeNo, ReplyXattr};
use sealfs_reader::{DirEntry, FileType};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Attributes of nothing: for negative entries and entries without attributes (node id 0).
pub(crate) fn bare_attr(ino: u64, kind: FuseType) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// The kernel's `new_encode_dev`, the form FUSE carries device numbers in (the format's rule).
pub use sealfs_format::new_encode_dev;

pub(crate) fn system_time(sec: i64, nsec: u32) -> SystemTime {
    let nsec = nsec.min(999_999_999);
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec)
    } else {
        // sec + nsec/1e9 with sec negative: go back |sec| seconds, then forward nsec.
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

pub(crate) fn fuse_type(t: FileType) -> FuseType {
    match t {
        FileType::Regular => FuseType::RegularFile,
        FileType::Directory => FuseType::Directory,
        FileType::Symlink => FuseType::Symlink,
        FileType::CharDevice => FuseType::CharDevice,
        FileType::BlockDevice => FuseType::BlockDevice,
        FileType::Fifo => FuseType::NamedPipe,
        FileType::Socket => FuseType::Socket,
    }
}

/// The type a directory entry says, falling back to what the inode would say for unknown values
/// (the kernel passes `DT_UNKNOWN`; FUSE has no such type, so regular file).
pub(crate) fn dirent_type(e: &DirEntry) -> FuseType {
    e.file_type()
        .map(fuse_type)
        .unwrap_or(FuseType::RegularFile)
}

/// Replies to an xattr request as the kernel does: the size for a size-0 probe, ERANGE when the
/// caller's buffer is too small.
pub(crate) fn reply_xattr(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}
