//! Sources: where the tree an image is built from comes from.
//!
//! The builder never looks at a host file system, an archive or an image itself: it sees one
//! stream of [`Entry`]s (path, kind, mode, owner, time, xattrs, link target, device, hard links,
//! size and a handle on the data) that a [`Source`] hands to a [`Sink`], and reads file data back
//! through the same source. The directory scan ([`DirSource`](crate::DirSource)) is one source;
//! the tar, OCI and SquashFS importers (`sealfs-import`) are others. Whatever produced the entries,
//! the same tree gives the same image, byte for byte: the sink numbers inodes in one order of its
//! own (breadth first, names sorted), whatever order the entries came in.
//!
//! A build runs a source in two phases:
//!
//! 1. [`Source::scan`], once, on one thread: every entry goes to the [`Sink`] in any order, a
//!    later entry at a path replacing an earlier one as `tar -x` does (see [`Sink::add`]). A
//!    source that can only be read once (a tar stream) keeps what it must read again later (the
//!    data) somewhere it can: a temporary file beside the output
//!    ([`ScanContext::temp_file`]), never memory. Long scans report progress in their own
//!    unit (bytes of input for archives).
//! 2. [`Source::open`], from many threads at once: the data of regular files, by the [`DataId`]
//!    the scan gave them, as often as the build needs it (files whose size another file shares
//!    are read twice: once to find identical files, once to copy). [`SourceFile::finish`] tells
//!    whether what was read is still the file (a directory source checks the file did not change
//!    meanwhile).

use crate::error::{BuildError, Result};
use crate::options::BuildOptions;
use crate::Progress;
use std::fs::File;
use std::path::Path;

pub use crate::sink::{EntryError, Sink};

/// A source's handle on the data of one regular file; what it means is the source's business
/// (an index into a table of its own, an offset in a temporary file, an inode number).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DataId(pub u64);

/// The type of an entry, with what each type carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory. An entry for a directory that exists (given before, or made for an entry
    /// below it) changes its metadata and keeps what is in it.
    Dir,
    /// A regular file of `size` bytes, read back by `data`.
    File {
        /// Its size in bytes.
        size: u64,
        /// The source's handle on its data.
        data: DataId,
        /// For a file with holes, the ranges `[start, end)` that hold data, sorted and
        /// disjoint; everything else reads as zeros and need not be stored (the layout keeps the
        /// file sparse where that is smaller). `None` for a file stored whole.
        data_ranges: Option<Vec<(u64, u64)>>,
    },
    /// A symbolic link and its target (any bytes but NUL, shorter than 4096).
    Symlink(Vec<u8>),
    /// Another name of the non-directory given earlier at this path (relative to the root, as
    /// [`Entry::path`]); the entry's own metadata is not used, as with `tar -x`.
    HardLink(Vec<u8>),
    /// A character device.
    CharDevice {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
    /// A block device.
    BlockDevice {
        /// Major number.
        major: u32,
        /// Minor number.
        minor: u32,
    },
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
}

/// One entry of a source tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its path relative to the root: names separated by single `/`, none empty, `.` or `..`;
    /// the empty path is the root itself.
    pub path: Vec<u8>,
    /// What it is.
    pub kind: EntryKind,
    /// Permission bits with the set-user-id, set-group-id and sticky bits (`mode & 0o7777`; the
    /// file type comes from [`Entry::kind`]).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, seconds since the epoch (negative before it).
    pub mtime: i64,
    /// Nanoseconds of the modification time, below 10^9.
    pub mtime_nsec: u32,
    /// Extended attributes by full name (`user.x`, `security.capability`,
    /// `system.posix_acl_access` in the kernel's binary form), any order.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// What a source gets to know about the build while it scans.
pub struct ScanContext<'a> {
    pub(crate) out: &'a Path,
    pub(crate) out_ids: Vec<(u64, u64)>,
    pub(crate) opts: &'a BuildOptions,
    pub(crate) progress: &'a dyn Progress,
}

impl<'a> ScanContext<'a> {
    /// Where progress goes; a scan calls `begin` and `end` itself, in the unit it chooses.
    pub fn progress(&self) -> &'a dyn Progress {
        self.progress
    }

    /// Whether extended attributes are wanted at all (a source may skip reading them; the sink
    /// drops them anyway when they are not).
    pub fn xattrs(&self) -> bool {
        self.opts.xattrs
    }

    /// Whether the build leaves out `path` (relative to the root) and everything below it. A
    /// source may use this to skip work; the sink leaves such entries out anyway.
    pub fn excluded(&self, path: &[u8]) -> bool {
        crate::sink::is_excluded(self.opts, path)
    }

    /// Whether a file with this device and inode number is the image being written (or the one
    /// it replaces): a directory source must not pack it into itself.
    pub fn is_output(&self, dev: u64, ino: u64) -> bool {
        self.out_ids.contains(&(dev, ino))
    }

    /// An unnamed temporary file in the output's directory, removed when closed: where a source
    /// read only once keeps the file data it hands out later.
    pub fn temp_file(&self) -> Result<File> {
        let dir = self
            .out
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        tempfile::tempfile_in(dir).map_err(|e| BuildError::io(dir, "create a temporary file", e))
    }
}

/// What the builder knows of a regular file when it opens its data.
#[derive(Clone, Copy, Debug)]
pub struct FileRef<'a> {
    /// Its path as the source named it ([`Source::base`] joined with the first path under which
    /// the file appears in the image, breadth first): for messages.
    pub path: &'a Path,
    /// Its size, as the scan gave it.
    pub size: u64,
    /// The handle the scan gave.
    pub data: DataId,
}

/// The data of one regular file, opened for reading.
pub trait SourceFile {
    /// Fills `buf` with the file's bytes from `offset` on (holes read as zeros). The builder reads
    /// only inside the file's size; reading past its end is an error.
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<()>;

    /// Confirms that the bytes read are the file's as scanned (a directory source checks the
    /// file did not change since the scan); called after the last read.
    fn finish(self: Box<Self>) -> Result<()>;
}

/// Where a tree comes from: scanned once into a [`Sink`], then its files' data read back, in
/// parallel, by handle. See the module documentation for the two phases.
pub trait Source: Send + Sync {
    /// The path messages about the tree's files start from (a directory source's root); paths of
    /// inodes are this joined with their path in the tree. Empty by default.
    fn base(&self) -> &Path {
        Path::new("")
    }

    /// Hands every entry of the tree to `sink`. Called once, before any [`Source::open`].
    fn scan(&mut self, sink: &mut Sink, cx: &ScanContext<'_>) -> Result<()>;

    /// Opens the data of a regular file the scan gave. Called from several threads at once.
    fn open(&self, file: &FileRef<'_>) -> Result<Box<dyn SourceFile + '_>>;
}

/// Opens the data of `inode` (a regular file of `tree`) through `source`.
pub(crate) fn open_file<'s>(
    source: &'s dyn Source,
    tree: &crate::tree::Tree,
    inode: &crate::tree::Inode,
) -> Result<Box<dyn SourceFile + 's>> {
    let crate::tree::Kind::File(f) = &inode.kind else {
        unreachable!("only regular files have data")
    };
    source.open(&FileRef {
        path: &tree.path(inode),
        size: f.size,
        data: f.data,
    })
}
