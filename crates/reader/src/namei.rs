//! Name lookup, as Linux 6.18's `fs/erofs/namei.c` does it, and path resolution.
//!
//! Lookup is a binary search over the directory's blocks, comparing with each block's *first* name,
//! then a binary search inside the chosen block. Both keep the common prefix already matched against
//! the lower and upper bounds, exactly as the kernel's `erofs_dirnamecmp`, so a directory the kernel
//! cannot search (unsorted names) gives the same misses here. Name offsets are masked with
//! `blksz - 1` as the kernel does, so a corrupted offset never reads outside the block.

use crate::dir::{dot_omitted, DirEntry};
use crate::error::{Error, Location, Result};
use crate::image::Image;
use crate::inode::Inode;
use sealfs_format::{EROFS_DIRENT_SIZE, EROFS_FT_DIR, EROFS_NAME_LEN};
use std::cmp::Ordering;

/// Bytes per on-disk dirent.
const DIRENT: usize = EROFS_DIRENT_SIZE as usize;

/// Which symbolic links path resolution follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// None: a symlink in the middle of a path is [`Error::NotADirectory`], a final one is returned.
    Never,
    /// Those in the middle of the path, not the final component (like `lstat`).
    Parents,
    /// All, including the final component (like `stat`).
    All,
}

/// Most symlinks followed while resolving one path (the kernel's `MAXSYMLINKS`).
pub const MAX_SYMLINKS: usize = 40;

/// `erofs_dirnamecmp`: compares the looked-up name `qn` with the on-disk name `qd` (which may lack a
/// terminating NUL and ends at the slice end), skipping the `matched` bytes known to be equal.
fn dirnamecmp(qn: &[u8], qd: &[u8], matched: &mut usize) -> Ordering {
    let byte = |i: usize| qn.get(i).copied().unwrap_or(0);
    let mut i = *matched;
    while i < qd.len() && qd[i] != 0 {
        if byte(i) != qd[i] {
            *matched = i;
            return byte(i).cmp(&qd[i]);
        }
        i += 1;
    }
    *matched = i;
    if byte(i) == 0 {
        Ordering::Equal
    } else {
        Ordering::Greater
    }
}

/// `nameoff_from_disk`: a name offset masked into the block.
fn nameoff(block: &[u8], i: usize) -> usize {
    let mask = block.len() - 1;
    u16::from_le_bytes([block[i * DIRENT + 8], block[i * DIRENT + 9]]) as usize & mask
}

/// The on-disk name of dirent `i` of a block with `ndirents` entries: up to the next name, or to the
/// end of the block for the last one (possibly empty for corrupted offsets).
fn dname(block: &[u8], i: usize, ndirents: usize) -> &[u8] {
    let start = nameoff(block, i);
    let end = if i + 1 >= ndirents {
        block.len()
    } else {
        nameoff(block, i + 1)
    };
    block.get(start..end).unwrap_or(&[])
}

fn dirent_at(block: &[u8], i: usize) -> (u64, u8) {
    let de = &block[i * DIRENT..(i + 1) * DIRENT];
    (
        u64::from_le_bytes(de[..8].try_into().expect("8 bytes")),
        de[10],
    )
}

fn show(name: &[u8]) -> String {
    sealfs_text::escape(name)
}

impl Image {
    /// Looks `name` up in directory `dir` with the kernel's algorithm. `Ok(None)` if absent.
    pub fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<DirEntry>> {
        if !dir.is_dir() {
            return Err(Error::NotADirectory(format!("nid {}", dir.nid())));
        }
        if name.len() > EROFS_NAME_LEN {
            return Err(Error::NameTooLong(show(name)));
        }
        if name.is_empty() || name.contains(&0) || name.contains(&b'/') {
            return Ok(None);
        }
        if name == b"." && dot_omitted(dir) {
            return Ok(Some(DirEntry {
                name: name.to_vec(),
                nid: dir.nid(),
                file_type: EROFS_FT_DIR,
            }));
        }
        if dir.size() == 0 {
            return Ok(None);
        }
        let at = Location::nid(dir.nid());
        let entry = |block: &[u8], i: usize| {
            let (nid, file_type) = dirent_at(block, i);
            DirEntry {
                name: name.to_vec(),
                nid,
                file_type,
            }
        };

        // erofs_find_target_block: binary search over blocks by their first name.
        let (mut head, mut back) = (0i64, dir.nblocks() as i64 - 1);
        let (mut startprfx, mut endprfx) = (0usize, 0usize);
        let mut candidate = None;
        while head <= back {
            let mid = head + (back - head) / 2;
            let block = self.logical_block(dir, mid as u64)?;
            let ndirents = nameoff(&block, 0) / DIRENT;
            if ndirents == 0 {
                return Err(Error::corrupted(
                    format!("corrupted directory block {mid}"),
                    at,
                ));
            }
            let mut matched = startprfx.min(endprfx);
            match dirnamecmp(name, dname(&block, 0, ndirents), &mut matched) {
                Ordering::Less => {
                    back = mid - 1;
                    endprfx = matched;
                }
                Ordering::Equal => return Ok(Some(entry(&block, 0))),
                Ordering::Greater => {
                    head = mid + 1;
                    startprfx = matched;
                    candidate = Some((block, ndirents));
                }
            }
        }
        let Some((block, ndirents)) = candidate else {
            return Ok(None);
        };

        // find_target_dirent: binary search inside the block (entry 0 is already known smaller).
        let (mut head, mut back) = (1i64, ndirents as i64 - 1);
        let (mut startprfx, mut endprfx) = (0usize, 0usize);
        while head <= back {
            let mid = head + (back - head) / 2;
            let mut matched = startprfx.min(endprfx);
            match dirnamecmp(name, dname(&block, mid as usize, ndirents), &mut matched) {
                Ordering::Equal => return Ok(Some(entry(&block, mid as usize))),
                Ordering::Greater => {
                    head = mid + 1;
                    startprfx = matched;
                }
                Ordering::Less => {
                    back = mid - 1;
                    endprfx = matched;
                }
            }
        }
        Ok(None)
    }

    /// Resolves `path` from the root, following no symlink (see [`Image::resolve`]).
    pub fn lookup_path(&self, path: impl AsRef<[u8]>) -> Result<Inode> {
        self.resolve(path, Follow::Never)
    }

    /// Resolves a path (`/a/b/c` or `a/b/c`, both from the image root). "." and empty components are
    /// skipped; ".." uses the directory's ".." entry (the root's is the root). Symlinks are followed as
    /// `follow` says: absolute targets from the image root, relative ones from the link's directory,
    /// at most [`MAX_SYMLINKS`] in all.
    pub fn resolve(&self, path: impl AsRef<[u8]>, follow: Follow) -> Result<Inode> {
        let path = path.as_ref();
        let mut links = 0usize;
        // Components still to resolve, last first.
        let mut todo: Vec<Vec<u8>> = split(path);
        let mut cur = self.root()?;
        let mut walked: Vec<u8> = Vec::new();
        while let Some(comp) = todo.pop() {
            if !cur.is_dir() {
                return Err(Error::NotADirectory(show(&walked)));
            }
            let next = match self.lookup(&cur, &comp)? {
                Some(e) => self.inode(e.nid)?,
                None => {
                    walked.push(b'/');
                    walked.extend_from_slice(&comp);
                    return Err(Error::NotFound(show(&walked)));
                }
            };
            walked.push(b'/');
            walked.extend_from_slice(&comp);
            let last = todo.is_empty();
            let follow_this = next.is_symlink()
                && match follow {
                    Follow::Never => false,
                    Follow::Parents => !last,
                    Follow::All => true,
                };
            if !follow_this {
                if next.is_symlink() && !last {
                    return Err(Error::NotADirectory(show(&walked)));
                }
                cur = next;
                continue;
            }
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(Error::TooManySymlinks(show(path)));
            }
            let target = self.readlink(&next)?;
            if target.is_empty() {
                return Err(Error::NotFound(show(&walked)));
            }
            if target[0] == b'/' {
                cur = self.root()?;
            }
            todo.extend(split(&target));
        }
        Ok(cur)
    }
}

impl Image {
    /// [`Image::resolve`] with the rules of POSIX path resolution (`stat(2)`, `open(2)`) where
    /// they differ: the empty path names nothing ([`Error::NotFound`]), and a path ending in `/`,
    /// `/.` or `/..` must name a directory ([`Error::NotADirectory`] otherwise), a symlink at its
    /// end being followed whatever `follow` says (`lstat("link/")` is the directory's). For the
    /// bindings, whose callers compare with what the kernel does.
    pub fn resolve_posix(&self, path: impl AsRef<[u8]>, follow: Follow) -> Result<Inode> {
        let path = path.as_ref();
        if path.is_empty() {
            return Err(Error::NotFound("the empty path".into()));
        }
        let last = path.rsplit(|&b| b == b'/').next().unwrap_or_default();
        let dir = path.ends_with(b"/") || last == b"." || last == b"..";
        let inode = self.resolve(path, if dir { Follow::All } else { follow })?;
        if dir && !inode.is_dir() {
            return Err(Error::NotADirectory(show(path)));
        }
        Ok(inode)
    }
}

/// The components of a path that need a lookup, last first ("." and empty ones dropped).
pub(crate) fn split(path: &[u8]) -> Vec<Vec<u8>> {
    path.split(|&b| b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .rev()
        .map(|c| c.to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirnamecmp_matches_the_kernel() {
        let mut m = 0;
        assert_eq!(dirnamecmp(b"abc", b"abc", &mut m), Ordering::Equal);
        assert_eq!(m, 3);
        let mut m = 0;
        assert_eq!(dirnamecmp(b"abc", b"abc\0\0", &mut m), Ordering::Equal);
        let mut m = 0;
        assert_eq!(dirnamecmp(b"ab", b"abc", &mut m), Ordering::Less);
        assert_eq!(m, 2);
        let mut m = 0;
        assert_eq!(dirnamecmp(b"abd", b"abc", &mut m), Ordering::Greater);
        let mut m = 0;
        assert_eq!(dirnamecmp(b"abcd", b"abc", &mut m), Ordering::Greater);
        let mut m = 0;
        assert_eq!(dirnamecmp(b"a", b"", &mut m), Ordering::Greater);
        let mut m = 0;
        assert_eq!(dirnamecmp(b"\xff", b"a", &mut m), Ordering::Greater);
    }

    #[test]
    fn paths_split_into_components() {
        assert_eq!(
            split(b"/a//b/./c/"),
            vec![b"c".to_vec(), b"b".to_vec(), b"a".to_vec()]
        );
        assert!(split(b"/").is_empty());
        assert_eq!(split(b".."), vec![b"..".to_vec()]);
    }
}
