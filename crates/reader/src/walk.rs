//! [`Image::walk`]: the one tree walk every command uses: depth first, in directory order, each
//! directory entered once.

use crate::dir::{DirEntry, ReadDir};
use crate::error::Error;
use crate::image::Image;
use crate::inode::Inode;
use std::collections::HashSet;

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
    /// An entry (never "." or "..").
    Entry(WalkEntry<'a>),
    /// A directory, or an inode of it, that could not be read: `path` is the directory (for a
    /// directory it could not list) or the entry (for an inode it could not load). The walk goes on
    /// with the next entry.
    Error {
        /// Where.
        path: &'a [u8],
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

fn push_name(path: &mut Vec<u8>, name: &[u8]) {
    if !path.is_empty() && !path.ends_with(b"/") {
        path.push(b'/');
    }
    path.extend_from_slice(name);
}

impl Image {
    /// Walks the tree below directory `top`, whose path is `top_path` (for example `b"/"`, or `b""`
    /// for paths relative to it): every entry but "." and ".." in pre-order, depth first, in on-disk
    /// directory order. Each directory is entered once; one reached again is reported with
    /// [`WalkEntry::revisited`] and not entered. Errors reading a directory or an inode are reported
    /// as [`WalkEvent::Error`] and the walk goes on; the visitor stops the walk by returning `Err`.
    pub fn walk<E>(
        &self,
        top: &Inode,
        top_path: &[u8],
        visit: &mut dyn FnMut(WalkEvent<'_>) -> Result<Visit, E>,
    ) -> Result<(), E> {
        let mut path = top_path.to_vec();
        let mut entered: HashSet<u64> = HashSet::from([top.nid()]);
        // Open directories, and the length of `path` at each.
        let mut stack: Vec<(ReadDir<'_>, usize)> = Vec::new();
        match self.read_dir(top) {
            Ok(rd) => stack.push((rd, path.len())),
            Err(error) => {
                visit(WalkEvent::Error { path: &path, error })?;
                return Ok(());
            }
        }
        while let Some((rd, len)) = stack.last_mut() {
            let len = *len;
            path.truncate(len);
            let entry = match rd.next() {
                None => {
                    stack.pop();
                    continue;
                }
                Some(Err(error)) => {
                    // ReadDir ends after an error.
                    visit(WalkEvent::Error { path: &path, error })?;
                    continue;
                }
                Some(Ok(e)) => e,
            };
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            push_name(&mut path, &entry.name);
            let inode = match self.inode(entry.nid) {
                Ok(i) => i,
                Err(error) => {
                    visit(WalkEvent::Error { path: &path, error })?;
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
                match self.read_dir(&inode) {
                    Ok(rd) => stack.push((rd, path.len())),
                    Err(error) => {
                        visit(WalkEvent::Error { path: &path, error })?;
                    }
                }
            }
        }
        Ok(())
    }
}
