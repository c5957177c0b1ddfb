//! Prefetch lists: the paths a container reads as it starts, named ahead (nydus's prefetch
//! list, what eStargz's `ctr-remote optimize` records), and [`Image::prefetch_paths`], which
//! fetches their storage into a remote image's store in a few concurrent batches.
//!
//! A list is text: one absolute path in the container's root a line, `#` comments and blank
//! lines ignored ([`parse_prefetch_list`]). It is bounded ([`MAX_LIST_BYTES`],
//! [`MAX_LIST_PATHS`], [`MAX_PATH_BYTES`]) because it travels unsigned (an annotation of the
//! converted-layers referrer): it is a hint. What it can make a mount fetch is bounded too,
//! by [`PREFETCH_MAX_SHARE`] of the image (or [`PREFETCH_FLOOR`]), and every block fetched is
//! verified as any other.
//!
//! Resolution goes level by level across all paths, so that one level's lookups need one
//! batch of fetches, not a round trip per path component: the directories at the current level
//! (their blocks, in one fill), then the lookups in them (from the store), then the inodes
//! found (their blocks, in one fill), then the next level. Symlinks are followed within the
//! image (absolute targets from its root, relative ones from the link's directory, at most
//! [`MAX_SYMLINKS`] per path): in a layer of a container image, a link whose target another
//! layer holds resolves to nothing here, and that layer's own resolution covers it if the path
//! is listed as the link resolves in the container. Paths the image does not hold are skipped.
//! Last, the blocks of the directories named (one fill), then, in one fill, the inodes of their
//! entries (a listing with readdirplus reads each) and the storage of every file found (its data
//! blocks and pclusters; inline tails came with the inodes), file by file in the list's order
//! while the budget lasts.

use crate::image::Image;
use crate::inode::Inode;
use crate::namei::{split, MAX_SYMLINKS};
use std::collections::HashSet;
use std::ops::Range;

/// The largest share of an image a prefetch list may make a mount fetch (directories, inodes
/// and files together): a quarter, or [`PREFETCH_FLOOR`] if that is more. Files past it are
/// left to be read on demand.
pub const PREFETCH_MAX_SHARE: (u64, u64) = (1, 4);
/// What a prefetch list may make a mount fetch of a small image (up to its whole): a quarter of
/// a layer of a few MB would leave out the files a container starts with.
pub const PREFETCH_FLOOR: u64 = 8 << 20;
/// The largest prefetch list accepted, in bytes of text.
pub const MAX_LIST_BYTES: usize = 64 << 10;
/// The most paths a prefetch list may name.
pub const MAX_LIST_PATHS: usize = 4096;
/// The longest path a prefetch list may name (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Ranges of storage less than this apart are fetched in one request (the bytes between them
/// along): python's modules lie near one another in a layer.
const JOIN_GAP: u64 = 32 << 10;

/// Why a prefetch list was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListError {
    /// Larger than [`MAX_LIST_BYTES`].
    #[error("the list is {0} bytes, more than the {MAX_LIST_BYTES} allowed")]
    TooLarge(usize),
    /// More than [`MAX_LIST_PATHS`] paths.
    #[error("the list names more than {MAX_LIST_PATHS} paths")]
    TooMany,
    /// A line that is not an absolute path (1-based line number).
    #[error(
        "line {0}: not an absolute path (each line is a path starting with `/`, or a `#` comment)"
    )]
    NotAbsolute(usize),
    /// A path longer than [`MAX_PATH_BYTES`].
    #[error("line {0}: a path longer than {MAX_PATH_BYTES} bytes")]
    TooLong(usize),
    /// A path with a NUL byte.
    #[error("line {0}: a NUL byte in the path")]
    Nul(usize),
}

/// Reads a prefetch list: one absolute path a line (surrounding spaces and a trailing `\r`
/// trimmed), blank lines and lines starting with `#` ignored, duplicates dropped (the first
/// kept). Refuses a list past the bounds of the [module docs](crate::prefetch), or with a
/// line that is not an absolute path. Never panics, whatever the text.
pub fn parse_prefetch_list(text: &str) -> Result<Vec<String>, ListError> {
    if text.len() > MAX_LIST_BYTES {
        return Err(ListError::TooLarge(text.len()));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.starts_with('/') {
            return Err(ListError::NotAbsolute(i + 1));
        }
        if line.len() > MAX_PATH_BYTES {
            return Err(ListError::TooLong(i + 1));
        }
        if line.contains('\0') {
            return Err(ListError::Nul(i + 1));
        }
        if seen.insert(line) {
            if out.len() == MAX_LIST_PATHS {
                return Err(ListError::TooMany);
            }
            out.push(line.to_string());
        }
    }
    Ok(out)
}

/// The list as [`parse_prefetch_list`] reads it back: one path a line, no newline after the
/// last (so that the text is never longer than what the list was parsed from, and stays within
/// [`MAX_LIST_BYTES`]).
pub fn encode_prefetch_list(paths: &[String]) -> String {
    paths.join("\n")
}

/// What [`Image::prefetch_paths`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefetchReport {
    /// Paths asked for.
    pub paths: usize,
    /// Paths this image holds (files, directories, others).
    pub found: usize,
    /// Paths it does not hold (a component missing, or not a directory where one is needed,
    /// or a symlink leading out of it).
    pub missing: usize,
    /// Paths given up: too many symlinks, a block that failed, a damaged inode.
    pub failed: usize,
    /// Files whose storage was fetched.
    pub files: usize,
    /// Files left out because the budget ([`PREFETCH_MAX_SHARE`], [`PREFETCH_FLOOR`]) was
    /// spent.
    pub over_budget: usize,
    /// Bytes asked of the source (directories, inodes, files; some may have been stored
    /// already).
    pub bytes: u64,
    /// Batches of fetches (each one concurrent): two a level, the directories named, and the
    /// files'.
    pub batches: usize,
}

/// One path being resolved: the components still to look up (last first) and the directory
/// to look the next one up in.
struct Walk {
    todo: Vec<Vec<u8>>,
    dir: Inode,
    links: usize,
}

/// Sorts the ranges and joins those that overlap or lie less than [`JOIN_GAP`] apart.
fn join(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(JOIN_GAP) => {
                last.end = last.end.max(r.end)
            }
            _ => out.push(r),
        }
    }
    out
}

impl Image {
    /// Fetches what reading `paths` (a prefetch list: absolute paths from the image's root)
    /// needs into the source's store, in a few concurrent batches, as the [module
    /// docs](crate::prefetch) say, and reports what was found and fetched. Nothing is done
    /// for a source that does not prefetch (a local image). Bounded by
    /// [`PREFETCH_MAX_SHARE`] of the image (or [`PREFETCH_FLOOR`]); never fails (a path that cannot be resolved is
    /// counted and skipped).
    pub fn prefetch_paths<P: AsRef<[u8]>>(&self, paths: &[P]) -> PrefetchReport {
        if !self.prefetches() {
            return PrefetchReport {
                paths: paths.len(),
                ..PrefetchReport::default()
            };
        }
        // Its lookups read from the store what the batches brought: no stream of file data.
        let _metadata = crate::verified::MetadataReads::begin();
        self.resolve_and_fill(paths, &mut |ranges| self.blocks.fill_source(ranges))
    }

    /// [`Image::prefetch_paths`] with the fill given (each call one batch).
    fn resolve_and_fill<P: AsRef<[u8]>>(
        &self,
        paths: &[P],
        fill: &mut dyn FnMut(&[Range<u64>]),
    ) -> PrefetchReport {
        let mut report = PrefetchReport {
            paths: paths.len(),
            ..PrefetchReport::default()
        };
        let (num, den) = PREFETCH_MAX_SHARE;
        let budget = (self.len() / den * num).max(PREFETCH_FLOOR.min(self.len()));
        let Ok(root) = self.root() else {
            report.failed = paths.len();
            return report;
        };
        let mut batch = |ranges: Vec<Range<u64>>, report: &mut PrefetchReport| {
            let mut take = Vec::new();
            for r in join(ranges) {
                let n = r.end - r.start;
                if report.bytes + n > budget {
                    continue;
                }
                report.bytes += n;
                take.push(r);
            }
            if !take.is_empty() {
                report.batches += 1;
                fill(&take);
            }
        };
        let mut active: Vec<Walk> = Vec::new();
        let mut dirs_named: Vec<Inode> = Vec::new();
        for p in paths {
            let todo = split(p.as_ref());
            if todo.is_empty() {
                report.found += 1;
                dirs_named.push(root.clone());
            } else {
                active.push(Walk {
                    todo,
                    dir: root.clone(),
                    links: 0,
                });
            }
        }
        let mut dirs_filled: HashSet<u64> = HashSet::new();
        let mut files: Vec<Inode> = Vec::new();
        let mut files_seen: HashSet<u64> = HashSet::new();
        while !active.is_empty() {
            // The directories to look in at this level: their blocks, in one batch.
            let mut ranges = Vec::new();
            for w in &active {
                if dirs_filled.insert(w.dir.nid()) {
                    ranges.extend(self.file_storage(&w.dir).unwrap_or_default());
                }
            }
            batch(ranges, &mut report);
            // The lookups, from the store.
            let mut found: Vec<(Walk, u64)> = Vec::new();
            for mut w in active.drain(..) {
                let Some(name) = w.todo.pop() else { continue };
                match self.lookup(&w.dir, &name) {
                    Ok(Some(e)) => found.push((w, e.nid)),
                    Ok(None) => report.missing += 1,
                    Err(_) => report.failed += 1,
                }
            }
            // The inodes found: their blocks (an extended inode may straddle two), one batch.
            let nids: Vec<u64> = found.iter().map(|(_, nid)| *nid).collect();
            batch(self.inode_ranges(&nids), &mut report);
            for (mut w, nid) in found {
                let Ok(inode) = self.inode(nid) else {
                    report.failed += 1;
                    continue;
                };
                if inode.is_symlink() {
                    w.links += 1;
                    let target = match self.readlink(&inode) {
                        Ok(t) if w.links <= MAX_SYMLINKS => t,
                        _ => {
                            report.failed += 1;
                            continue;
                        }
                    };
                    if target.is_empty() {
                        report.missing += 1;
                        continue;
                    }
                    if target[0] == b'/' {
                        w.dir = root.clone();
                    }
                    w.todo.extend(split(&target));
                    if w.todo.is_empty() {
                        report.found += 1;
                        dirs_named.push(w.dir);
                    } else {
                        active.push(w);
                    }
                    continue;
                }
                if !w.todo.is_empty() {
                    if inode.is_dir() {
                        w.dir = inode;
                        active.push(w);
                    } else {
                        report.missing += 1;
                    }
                    continue;
                }
                report.found += 1;
                if inode.is_file() {
                    if files_seen.insert(nid) {
                        files.push(inode);
                    }
                } else if inode.is_dir() {
                    dirs_named.push(inode);
                }
            }
        }
        // The directories named: their blocks; then, with the files, their entries' inodes (a
        // listing with readdirplus, as FUSE answers `ls` and Python's path finder, reads each).
        let mut named = HashSet::new();
        dirs_named.retain(|d| named.insert(d.nid()));
        let mut ranges = Vec::new();
        for d in &dirs_named {
            if dirs_filled.insert(d.nid()) {
                ranges.extend(self.file_storage(d).unwrap_or_default());
            }
        }
        batch(ranges, &mut report);
        let mut nids = Vec::new();
        for d in &dirs_named {
            for e in self.read_dir_all(d).unwrap_or_default() {
                if e.name != b"." && e.name != b".." {
                    nids.push(e.nid);
                }
            }
        }
        // The files, in the list's order while the budget lasts.
        let mut ranges = self.inode_ranges(&nids);
        let mut planned: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        for f in &files {
            let storage = self.file_storage(f).unwrap_or_default();
            let n: u64 = storage.iter().map(|r| r.end - r.start).sum();
            if report.bytes + planned + n > budget {
                report.over_budget += 1;
                continue;
            }
            planned += n;
            report.files += 1;
            ranges.extend(storage);
        }
        batch(ranges, &mut report);
        report
    }

    /// The blocks holding inodes `nids` (an extended inode may straddle two), as byte ranges.
    fn inode_ranges(&self, nids: &[u64]) -> Vec<Range<u64>> {
        let bs = self.block_size();
        let meta = (self.superblock().meta_blkaddr as u64) << self.superblock().blkszbits;
        nids.iter()
            .filter(|nid| !sealfs_format::nid_in_metabox(**nid))
            .filter_map(|nid| nid.checked_mul(32)?.checked_add(meta))
            .filter(|&pos| pos < self.len())
            .map(|pos| pos / bs * bs..(pos + 64).div_ceil(bs) * bs)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_reads_back_and_what_is_not_one_is_refused() {
        let text = "# python3 -c ...\n/usr/bin/python3\n\n  /usr/lib/x \r\n/usr/bin/python3\n";
        let paths = parse_prefetch_list(text).unwrap();
        assert_eq!(paths, vec!["/usr/bin/python3", "/usr/lib/x"]);
        assert_eq!(
            parse_prefetch_list(&encode_prefetch_list(&paths)),
            Ok(paths)
        );
        assert_eq!(
            parse_prefetch_list("/a\nb\n"),
            Err(ListError::NotAbsolute(2))
        );
        assert_eq!(parse_prefetch_list("/a\0"), Err(ListError::Nul(1)));
        let long = format!("/{}", "a".repeat(MAX_PATH_BYTES));
        assert_eq!(parse_prefetch_list(&long), Err(ListError::TooLong(1)));
        let many: String = (0..=MAX_LIST_PATHS).map(|i| format!("/{i}\n")).collect();
        assert_eq!(parse_prefetch_list(&many), Err(ListError::TooMany));
        let big = "#".repeat(MAX_LIST_BYTES + 1);
        assert_eq!(
            parse_prefetch_list(&big),
            Err(ListError::TooLarge(MAX_LIST_BYTES + 1))
        );
    }

    #[test]
    fn ranges_near_one_another_are_joined() {
        assert_eq!(
            join(vec![100..200, 0..50, 40..60, 200_000..200_100, 0..0]),
            vec![0..200, 200_000..200_100]
        );
    }
}
