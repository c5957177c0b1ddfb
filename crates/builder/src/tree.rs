//! The in-memory model of the source tree, as the sink ([`crate::Sink`]) assembles it from a
//! source's entries.
//!
//! Inode ids are assigned breadth first, names sorted by bytes, the root first, whatever order the
//! entries came in (so the image does not depend on it, nor on the thread count); the layout keeps
//! this order.

use crate::source::DataId;
use sealfs_format::{S_IFDIR, S_IFMT};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

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
    /// Children sorted by name bytes, without "." and ".." (its parent is its [`Origin`]).
    Dir {
        entries: Vec<(Vec<u8>, InodeId)>,
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
    /// Where its path comes from (see [`Tree::path`]).
    pub origin: Origin,
}

/// Where an inode is named: its path is rebuilt from this when needed (for messages, rules and
/// the order of fragments) rather than kept, as it would take more than the inode itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The root directory.
    Root,
    /// Entry `index` of directory `dir`: the inode's first name in the tree, breadth first
    /// (`dir` is also a directory's parent, its "..").
    Entry { dir: u32, index: u32 },
    /// An inode no directory names.
    Special(Special),
}

/// The inodes of an image that no directory names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// The packed inode (fragments, compressed directories).
    Packed,
    /// The metabox inode (the compressed metadata).
    Metabox,
}

impl Inode {
    /// The size the image records (`i_size`); directories are filled in by the layout.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
}

impl Origin {
    /// The directory that names the inode, if one does.
    pub fn dir(self) -> Option<InodeId> {
        match self {
            Origin::Entry { dir, .. } => Some(dir as InodeId),
            Origin::Root | Origin::Special(_) => None,
        }
    }
}

/// The whole source tree; `inodes[0]` is the root.
#[derive(Debug, Default)]
pub(crate) struct Tree {
    pub inodes: Vec<Inode>,
    /// Names skipped because their xattrs have no EROFS prefix (path, xattr name).
    pub warnings: Vec<String>,
    /// Where the paths of messages start ([`crate::Source::base`]).
    pub base: PathBuf,
}

impl Tree {
    /// The path of `inode` (of this tree, or one no directory names) relative to the root, no
    /// leading `/`: its names from the root down, joined by `/`.
    pub fn rel_path(&self, inode: &Inode) -> Vec<u8> {
        let mut names = Vec::new();
        let mut origin = inode.origin;
        while let Origin::Entry { dir, index } = origin {
            let dir = &self.inodes[dir as usize];
            let Kind::Dir { entries } = &dir.kind else {
                unreachable!("an origin is a directory")
            };
            names.push(entries[index as usize].0.as_slice());
            origin = dir.origin;
        }
        if let Origin::Special(s) = origin {
            return s.name().as_bytes().to_vec();
        }
        let mut path = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum());
        for name in names.iter().rev() {
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name);
        }
        path
    }

    /// The path of `inode` as the source names it: [`Tree::base`] joined with its path in the
    /// tree (see [`Tree::rel_path`]); an inode no directory names gets what it is.
    pub fn path(&self, inode: &Inode) -> PathBuf {
        match inode.origin {
            Origin::Root => self.base.clone(),
            Origin::Special(s) => PathBuf::from(s.name()),
            Origin::Entry { .. } => self
                .base
                .join(Path::new(OsStr::from_bytes(&self.rel_path(inode)))),
        }
    }

    /// Every inode's rank in depth-first order, names sorted by bytes (the order of their paths
    /// compared component by component), an inode at its first name; inodes no directory names
    /// come last.
    pub fn depth_first_ranks(&self) -> Vec<u32> {
        let mut rank = vec![u32::MAX; self.inodes.len()];
        let mut next = 0;
        let mut stack = vec![0];
        while let Some(id) = stack.pop() {
            rank[id] = next;
            next += 1;
            if let Kind::Dir { entries } = &self.inodes[id].kind {
                // Children named here first, pushed last to first so the first pops first.
                let named_here = entries.iter().enumerate().filter(|&(index, &(_, child))| {
                    self.inodes[child].origin
                        == (Origin::Entry {
                            dir: id as u32,
                            index: index as u32,
                        })
                });
                stack.extend(named_here.map(|(_, &(_, child))| child).rev());
            }
        }
        rank
    }
}

impl Special {
    /// What it is, as messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Special::Packed => "(packed inode)",
            Special::Metabox => "(metabox inode)",
        }
    }
}
