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
    pub data_ranges: Option<Box<[(u64, u64)]>>,
    /// The source's handle on its data.
    pub data: DataId,
}

/// The type-specific part of an inode.
#[derive(Debug)]
pub(crate) enum Kind {
    /// Children sorted by name bytes, without "." and ".." (its parent is its [`Origin`]).
    Dir {
        entries: Entries,
    },
    File(FileData),
    Symlink(Vec<u8>),
    /// Character or block device, `i_u` = Linux new_encode_dev(rdev).
    Device(u32),
    /// FIFO or socket.
    Special,
}

/// Where a directory's entries are in its tree ([`Tree::entries`]). A tree keeps every
/// directory's names back to back in one buffer and its entries in one vector (8 bytes and the
/// name's bytes an entry), not a vector per directory and an allocation per name (a name apart
/// costs its 24-byte vector and 32 bytes of heap for the 13 bytes of the median name in `linux`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Entries {
    /// Index of its first entry in the tree's entries.
    first: usize,
    /// How many it has.
    len: u32,
    /// Offset of its first name in the tree's names.
    names: usize,
}

impl Entries {
    pub fn len(&self) -> usize {
        self.len as usize
    }
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
    pub xattrs: Box<[Xattr]>,
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
    /// Building like an earlier image, its epoch (which `layout::choose_epoch` may keep).
    pub like_epoch: Option<(i64, u32)>,
    /// Every directory's names, one after another, a directory's together.
    names: Vec<u8>,
    /// Every directory's entries, a directory's together, in order: where its name ends (from
    /// the directory's first name) and the inode it names (ids fit 32 bits, as the sink numbers
    /// its nodes).
    entries: Vec<(u32, u32)>,
}

impl Tree {
    /// An empty tree from `base`, with room for `inodes` inodes.
    pub fn new(base: PathBuf, warnings: Vec<String>, inodes: usize) -> Self {
        Tree {
            inodes: Vec::with_capacity(inodes),
            warnings,
            base,
            like_epoch: None,
            names: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// The entries of a directory: (name, inode), in order.
    pub fn entries(
        &self,
        dir: &Entries,
    ) -> impl ExactSizeIterator<Item = (&[u8], InodeId)> + DoubleEndedIterator + '_ {
        let dir = *dir;
        (0..dir.len()).map(move |i| self.entry(&dir, i))
    }

    /// Entry `i` of a directory: its name and the inode it names.
    pub fn entry(&self, dir: &Entries, i: usize) -> (&[u8], InodeId) {
        let start = match i {
            0 => 0,
            _ => self.entries[dir.first + i - 1].0 as usize,
        };
        let (end, child) = self.entries[dir.first + i];
        let names = &self.names[dir.names..];
        (&names[start..end as usize], child as InodeId)
    }

    /// Starts a directory's entries: those [`Tree::push_entry`] adds until the next call are its.
    pub fn begin_entries(&self) -> Entries {
        Entries {
            first: self.entries.len(),
            len: 0,
            names: self.names.len(),
        }
    }

    /// Appends `name`, naming `child`, to `dir` (the directory begun last); `None` when the
    /// directory's names would take 4 GiB or more.
    pub fn push_entry(&mut self, dir: &mut Entries, name: &[u8], child: InodeId) -> Option<()> {
        let end = u32::try_from(self.names.len() - dir.names + name.len()).ok()?;
        self.names.extend_from_slice(name);
        self.entries.push((end, child as u32));
        dir.len += 1;
        Some(())
    }

    /// Gives back the room the names and entries grew by (once every directory is made).
    pub fn shrink_entries(&mut self) {
        self.names.shrink_to_fit();
        self.entries.shrink_to_fit();
    }

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
            names.push(self.entry(entries, index as usize).0);
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
                let named_here =
                    self.entries(entries)
                        .enumerate()
                        .filter(|&(index, (_, child))| {
                            self.inodes[child].origin
                                == (Origin::Entry {
                                    dir: id as u32,
                                    index: index as u32,
                                })
                        });
                stack.extend(named_here.map(|(_, (_, child))| child).rev());
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A build holds one of each per inode (the plan's too), and on an archive of many small
    /// files its peak memory is mostly these (issue 30: 630k entries in 256 MiB).
    #[test]
    fn per_inode_records_stay_small() {
        assert!(std::mem::size_of::<Inode>() <= 96);
        assert!(std::mem::size_of::<crate::layout::InodePlan>() <= 72);
    }
}
