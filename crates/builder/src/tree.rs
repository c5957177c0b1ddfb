//! The in-memory model of the source tree, as the sink ([`crate::Sink`]) assembles it from a
//! source's entries.
//!
//! Inode ids are assigned breadth first, names sorted by bytes, the root first, whatever order the
//! entries came in (so the image does not depend on it, nor on the thread count); the layout keeps
//! this order.

use crate::source::DataId;
use sealfs_format::{S_IFDIR, S_IFMT};
use std::path::PathBuf;

/// Index of an inode in [`Tree::inodes`].
pub(crate) type InodeId = usize;

/// One extended attribute, split into its short prefix index and name suffix.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Xattr {
    pub index: u8,
    pub suffix: Vec<u8>,
    pub value: Vec<u8>,
}

/// A regular file's source and data shape.
#[derive(Debug)]
pub(crate) struct FileData {
    pub size: u64,
    /// Data ranges `[start, end)` when the file has holes (from `SEEK_DATA`/`SEEK_HOLE`); `None` when dense.
    pub data_ranges: Option<Vec<(u64, u64)>>,
    /// The source's handle on its data.
    pub data: DataId,
}

/// The type-specific part of an inode.
#[derive(Debug)]
pub(crate) enum Kind {
    /// Children sorted by name bytes, without "." and "..".
    Dir {
        entries: Vec<(Vec<u8>, InodeId)>,
        parent: InodeId,
    },
    File(FileData),
    Symlink(Vec<u8>),
    /// Character or block device, `i_u` = Linux new_encode_dev(rdev).
    Device(u32),
    /// FIFO or socket.
    Special,
}

/// One inode of the tree.
#[derive(Debug)]
pub(crate) struct Inode {
    pub kind: Kind,
    /// `st_mode` (type and permission bits).
    pub mode: u16,
    pub uid: u32,
    pub gid: u32,
    pub mtime: i64,
    pub mtime_nsec: u32,
    /// Links inside the image.
    pub nlink: u32,
    /// Sorted.
    pub xattrs: Vec<Xattr>,
    /// Its path as the source names it: [`crate::Source::base`] joined with its first path in
    /// the tree (breadth first); for messages, rules and the order of fragments.
    pub path: PathBuf,
}

impl Inode {
    /// The size the image records (`i_size`); directories are filled in by the layout.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
}

/// The whole source tree; `inodes[0]` is the root.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    pub inodes: Vec<Inode>,
    /// Names skipped because their xattrs have no EROFS prefix (path, xattr name).
    pub warnings: Vec<String>,
}
