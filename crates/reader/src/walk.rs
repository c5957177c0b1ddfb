//! [`Image::walk`]: the one tree walk every command and the FUSE layer use: depth first, in
//! directory order, each directory entered once.
//!
//! The walk reports each directory when it enters it, with all its entries ([`WalkEvent::Dir`]: what
//! `ls -R` prints), then each entry in on-disk order ([`WalkEvent::Entry`], with its inode loaded:
//! what `find` and `getfattr -R` visit), entering a subdirectory as soon as its entry is met
//! (pre-order). The visitor prunes with [`Visit::Skip`] and stops the walk by returning `Err`.

use crate::dir::DirEntry;
use crate::error::{Error, Result};
use crate::image::Image;
use crate::inode::Inode;
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};

/// Inodes whose metadata blocks [`Image::read_ahead`] reads together (see
/// [`Image::prefetch_inodes`]).
const INODE_BATCH: usize = 32;

/// A subtree's directory listings and inodes, read ahead by [`Image::read_ahead`] for a walk that
/// will visit all of them ([`Image::walk_read_ahead`]).
#[derive(Debug, Default)]
pub struct ReadAhead {
    dirs: HashMap<u64, Result<Vec<DirEntry>>>,
    /// `None`: the inode could not be read (the walk reads it again for the error).
    inodes: HashMap<u64, Option<Inode>>,
}

/// An entry met by [`Image::walk`].
#[derive(Debug)]
pub struct WalkEntry<'a> {
    /// Its path: the walk's starting path joined with every name below it.
    pub path: &'a [u8],
    /// The directory entry.
    pub entry: &'a DirEntry,
    /// The inode it names.
    pub inode: &'a Inode,
    /// 1 for the entries of the starting directory, 2 below them, ...
    pub depth: usize,
    /// A directory the walk has entered before: a hard-linked directory, or a cycle in a damaged
    /// image. It is not entered again.
    pub revisited: bool,
}

/// What [`Image::walk`] met.
#[derive(Debug)]
pub enum WalkEvent<'a> {
    /// A directory the walk enters, with all its entries in on-disk order ("." and ".." included),
    /// before any of them is visited.
    Dir {
        /// Its path.
        path: &'a [u8],
        /// Its inode.
        inode: &'a Inode,
        /// Its entries.
        entries: &'a [DirEntry],
        /// 0 for the starting directory.
        depth: usize,
    },
    /// An entry (never "." or "..").
    Entry(WalkEntry<'a>),
    /// A directory that could not be listed, or an entry whose inode could not be loaded (`path`
    /// says which). The walk goes on with the next entry.
    Error {
        /// Where.
        path: &'a [u8],
        /// The entry whose inode could not be loaded; `None` for a directory that could not be
        /// listed.
        entry: Option<&'a DirEntry>,
        /// The entry's depth (as [`WalkEntry::depth`]), or the directory's (0 for the start).
        depth: usize,
        /// What went wrong.
        error: Error,
    },
}

/// What the walk does after an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// Go on, into the entry if it is a directory not entered before.
    Continue,
    /// Go on, but not into this directory.
    Skip,
}

/// `prefix` joined with `name` by one '/' (none after a prefix that ends in '/' or is empty).
pub fn join_path(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = prefix.to_vec();
    push_name(&mut p, name);
    p
}

/// A raw name or path made safe for text output and messages, by the one rule of
/// [`sealfs_text::escape`] (`LC_ALL=C ls --quoting-style=escape`): printable ASCII, one token.
pub fn show_path(bytes: &[u8]) -> String {
    sealfs_text::escape(bytes)
}

fn push_name(path: &mut Vec<u8>, name: &[u8]) {
    if !path.is_empty() && !path.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
}

/// A directory being walked: its entries, the next one, and the length of the path at it.
struct Open {
    entries: Vec<DirEntry>,
    next: usize,
    path_len: usize,
}

impl Image {
    /// Walks the tree below directory `top`, whose path is `top_path` (for example `b"/"`, or `b""`
    /// for paths relative to it); see the [module docs](crate::walk). Each directory is entered once;
    /// one reached again is reported with [`WalkEntry::revisited`] and not entered. The visitor's
    /// answer to a [`WalkEvent::Dir`] or [`WalkEvent::Error`] is ignored unless it is `Err`.
    pub fn walk<E>(
        &self,
        top: &Inode,
        top_path: &[u8],
        visit: &mut dyn FnMut(WalkEvent<'_>) -> std::result::Result<Visit, E>,
    ) -> std::result::Result<(), E> {
        self.walk_read_ahead(top, top_path, ReadAhead::default(), visit)
    }

    /// [`Image::walk`], taking listings and inodes from `ahead` where it has them (each once) and
    /// reading the rest as the walk reaches them.
    pub fn walk_read_ahead<E>(
        &self,
        top: &Inode,
        top_path: &[u8],
        mut ahead: ReadAhead,
        visit: &mut dyn FnMut(WalkEvent<'_>) -> std::result::Result<Visit, E>,
    ) -> std::result::Result<(), E> {
        let ahead = &mut ahead;
        let mut path = top_path.to_vec();
        let mut entered: HashSet<u64> = HashSet::from([top.nid()]);
        let mut stack: Vec<Open> = Vec::new();
        if let Some(open) = self.enter(top, &path, 0, ahead, visit)? {
            stack.push(open);
        }
        while let Some(open) = stack.last_mut() {
            path.truncate(open.path_len);
            let Some(entry) = open.entries.get(open.next).cloned() else {
                stack.pop();
                continue;
            };
            open.next += 1;
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            push_name(&mut path, &entry.name);
            // Hard links name an inode again: it stays in `ahead`.
            let inode = match ahead.inodes.get(&entry.nid) {
                Some(Some(i)) => Ok(i.clone()),
                _ => self.inode(entry.nid),
            };
            let inode = match inode {
                Ok(i) => i,
                Err(error) => {
                    visit(WalkEvent::Error {
                        path: &path,
                        entry: Some(&entry),
                        depth: stack.len(),
                        error,
                    })?;
                    continue;
                }
            };
            let revisited = inode.is_dir() && entered.contains(&entry.nid);
            let depth = stack.len();
            let step = visit(WalkEvent::Entry(WalkEntry {
                path: &path,
                entry: &entry,
                inode: &inode,
                depth,
                revisited,
            }))?;
            if step == Visit::Continue && inode.is_dir() && !revisited {
                entered.insert(entry.nid);
                if let Some(open) = self.enter(&inode, &path, depth, ahead, visit)? {
                    stack.push(open);
                }
            }
        }
        Ok(())
    }

    /// Reads every directory and inode of the image once, on `threads` threads of its own, and
    /// forgets them: for a remote image with a store, this brings the metadata into the store in
    /// batches (a later `ls -lR` or `find` then reads it locally) while the caller goes on, the
    /// [metadata span](Image::metadata_span) first in one concurrent fill of large requests (the
    /// walk then finds most of what it reads stored, rather than waiting a round trip per
    /// directory level). Errors
    /// are left for the reads that meet them. Returns what [`Image::any_xattrs`] would, from the
    /// same walk, when every directory and inode was read; `None` when one was not (or no thread
    /// could be started).
    pub fn warm_metadata(&self, threads: usize) -> Option<bool> {
        let root = self.root().ok()?;
        self.fill_metadata();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(|i| format!("sealfs-warm-{i}"))
            .start_handler(|_| crate::verified::no_readahead_on_this_thread())
            .build()
            .ok()?;
        let ahead = pool.install(|| self.read_ahead(&root, usize::MAX));
        if ahead.dirs.values().any(|d| d.is_err()) {
            return None;
        }
        let mut any = root.xattr_icount() > 0;
        for inode in ahead.inodes.values() {
            any |= inode.as_ref()?.xattr_icount() > 0;
        }
        Some(any)
    }

    /// Whether any inode of the image carries extended attributes. Every directory and the inode
    /// of every entry are read, breadth first with inodes fetched [`INODE_BATCH`] at a time (as
    /// [`Image::read_ahead`] does, but on the calling thread and keeping nothing), until one is
    /// found. `false` is only said when every inode was read: a block that fails its check or a
    /// damaged inode is returned as the error. An inode with an xattr body counts, even an empty one.
    pub fn any_xattrs(&self) -> Result<bool> {
        let root = self.root()?;
        if root.xattr_icount() > 0 {
            return Ok(true);
        }
        let mut seen = HashSet::from([root.nid()]);
        let mut level = vec![root];
        while !level.is_empty() {
            let mut nids = Vec::new();
            for dir in &level {
                for e in self.read_dir_all(dir)? {
                    if e.name != b"." && e.name != b".." && seen.insert(e.nid) {
                        nids.push(e.nid);
                    }
                }
            }
            nids.sort_unstable();
            level.clear();
            for chunk in nids.chunks(INODE_BATCH) {
                self.prefetch_inodes(chunk);
                for &nid in chunk {
                    let inode = self.inode(nid)?;
                    if inode.xattr_icount() > 0 {
                        return Ok(true);
                    }
                    if inode.is_dir() {
                        level.push(inode);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Reads the directories below `top` (to `max_depth` levels) and the inodes their entries name,
    /// breadth first: the order the builder stores inodes in, so the inodes of one level are read
    /// in order of their position, [`INODE_BATCH`] at a time with their metadata blocks fetched
    /// (and verified) together, in parallel on the current rayon pool. Each directory is read once,
    /// however often it is named. Nothing is checked here; the walk reports what failed.
    pub fn read_ahead(&self, top: &Inode, max_depth: usize) -> ReadAhead {
        let mut ahead = ReadAhead::default();
        if !top.is_dir() {
            return ahead;
        }
        let mut level = vec![top.clone()];
        let mut seen = HashSet::from([top.nid()]);
        // With a metabox, the inodes are in its pclusters: fetch them all in one concurrent fill
        // rather than one pcluster per dependent read.
        if let Some(metabox) = self.metabox.as_ref().filter(|_| self.prefetches()) {
            self.blocks
                .fill_source(&self.file_storage(metabox).unwrap_or_default());
        }
        for depth in 0..=max_depth {
            if level.is_empty() {
                break;
            }
            // Where the source keeps what it fetches (a remote image with a store): the level's
            // directory blocks outside the metadata first, in one concurrent fill.
            if self.prefetches() {
                let ranges: Vec<_> = level
                    .iter()
                    .flat_map(|d| self.file_storage(d).unwrap_or_default())
                    .collect();
                self.blocks.fill_source(&ranges);
            }
            let listed: Vec<(u64, Result<Vec<DirEntry>>)> = level
                .par_iter()
                .map(|d| (d.nid(), self.read_dir_all(d)))
                .collect();
            level.clear();
            if depth < max_depth {
                let mut nids: Vec<u64> = listed
                    .iter()
                    .filter_map(|(_, r)| r.as_ref().ok())
                    .flatten()
                    .filter(|e| e.name != b"." && e.name != b"..")
                    .filter(|e| !ahead.inodes.contains_key(&e.nid))
                    .map(|e| e.nid)
                    .collect();
                nids.sort_unstable();
                nids.dedup();
                if self.prefetches() {
                    self.blocks.fill_source(&self.inode_block_spans(&nids));
                }
                let decoded: Vec<(u64, Option<Inode>)> = nids
                    .par_chunks(INODE_BATCH)
                    .flat_map_iter(|chunk| {
                        self.prefetch_inodes(chunk);
                        chunk
                            .iter()
                            .map(|&nid| (nid, self.inode(nid).ok()))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                for (nid, inode) in decoded {
                    if let Some(i) = inode.as_ref().filter(|i| i.is_dir()) {
                        if seen.insert(nid) {
                            level.push(i.clone());
                        }
                    }
                    ahead.inodes.insert(nid, inode);
                }
            }
            ahead.dirs.extend(listed);
        }
        ahead
    }

    /// The blocks holding the inodes `nids` (sorted), as byte ranges: blocks close together are
    /// joined with what lies between (fetched in one request rather than many small ones).
    fn inode_block_spans(&self, nids: &[u64]) -> Vec<std::ops::Range<u64>> {
        /// Blocks between two inode blocks fetched along rather than splitting the span.
        const GAP: u64 = 16;
        let sb = self.superblock();
        let base = (sb.meta_blkaddr as u64) << sb.blkszbits;
        let bs = 1u64 << sb.blkszbits;
        let mut spans: Vec<std::ops::Range<u64>> = Vec::new();
        for pos in nids
            .iter()
            .filter_map(|n| n.checked_mul(32)?.checked_add(base))
        {
            let blk = pos / bs * bs;
            match spans.last_mut() {
                Some(r) if blk < r.end + GAP * bs => r.end = r.end.max(blk + bs),
                _ => spans.push(blk..blk + bs),
            }
        }
        spans
    }

    /// Lists directory `dir` and reports it: `None` when it cannot be listed (reported as an error).
    fn enter<E>(
        &self,
        dir: &Inode,
        path: &[u8],
        depth: usize,
        ahead: &mut ReadAhead,
        visit: &mut dyn FnMut(WalkEvent<'_>) -> std::result::Result<Visit, E>,
    ) -> std::result::Result<Option<Open>, E> {
        let listing = ahead
            .dirs
            .remove(&dir.nid())
            .unwrap_or_else(|| self.read_dir_all(dir));
        match listing {
            Ok(entries) => {
                visit(WalkEvent::Dir {
                    path,
                    inode: dir,
                    entries: &entries,
                    depth,
                })?;
                Ok(Some(Open {
                    entries,
                    next: 0,
                    path_len: path.len(),
                }))
            }
            Err(error) => {
                visit(WalkEvent::Error {
                    path,
                    entry: None,
                    depth,
                    error,
                })?;
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::join_path;

    #[test]
    fn joins_with_one_slash() {
        assert_eq!(join_path(b"", b"a"), b"a");
        assert_eq!(join_path(b"/", b"a"), b"/a");
        assert_eq!(join_path(b"/a", b"b"), b"/a/b");
        assert_eq!(join_path(b"a/", b"b"), b"a/b");
    }

    #[test]
    fn shows_paths_escaped() {
        assert_eq!(super::show_path(b"a/b c"), "a/b\\ c");
        assert_eq!(super::show_path(b"x\ny\\\x01\xff"), "x\\ny\\\\\\001\\377");
    }
}
