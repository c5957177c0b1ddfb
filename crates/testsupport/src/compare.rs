//! Tree comparison: the source directory against what the kernel shows of the mounted image.
//!
//! Everything is read with `lstat`, `readlink`, `llistxattr` and `lgetxattr`, never following a
//! symlink; names are raw bytes. Each lookup in the mount goes through the kernel's binary search
//! over the directory blocks, so a misordered directory shows up as a missing path.

#![allow(unsafe_code, reason = "lseek(SEEK_DATA/SEEK_HOLE) to compare holes")]

use crate::{show, sys};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, Metadata};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// How the image's owner ids are expected to relate to the source's.
#[derive(Clone, Copy, Debug, Default)]
pub enum IdMap {
    /// Unchanged.
    #[default]
    Same,
    /// Every inode gets this id (`--force-uid`, `--all-root`).
    Force(u32),
    /// Added to every id (`--uid-offset`).
    Offset(u32),
}

impl IdMap {
    fn apply(self, id: u32) -> u32 {
        match self {
            IdMap::Same => id,
            IdMap::Force(v) => v,
            IdMap::Offset(o) => id.wrapping_add(o),
        }
    }
}

/// A relative source path predicate: true means "excluded from the image" (with its subtree).
pub type ExcludeFn = Box<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Transformations the build options make, so that [`compare_trees`] knows what to expect.
#[derive(Default)]
pub struct Expect {
    /// `-T`: every inode has this mtime (seconds, nanoseconds).
    pub mtime: Option<(i64, i64)>,
    /// `SOURCE_DATE_EPOCH`: mtimes with seconds above it become (it, 0).
    pub clamp_mtime: Option<i64>,
    /// Owner mapping.
    pub uid: IdMap,
    /// Group mapping.
    pub gid: IdMap,
    /// Source paths (relative, no leading `/`) that are not in the image, with their subtrees.
    pub exclude: Option<ExcludeFn>,
    /// Regular files larger than this are compared by metadata only (the caller checks content).
    pub content_limit: Option<u64>,
}

impl Expect {
    /// Whether the relative source path is excluded.
    pub fn excluded(&self, rel: &[u8]) -> bool {
        self.exclude.as_ref().is_some_and(|f| f(rel))
    }

    /// The mtime the image should show for a source mtime.
    pub fn mtime_of(&self, sec: i64, nsec: i64) -> (i64, i64) {
        if let Some(t) = self.mtime {
            t
        } else if self.clamp_mtime.is_some_and(|c| sec > c) {
            (self.clamp_mtime.unwrap(), 0)
        } else {
            (sec, nsec)
        }
    }
}

/// One path of a scanned tree.
pub struct Node {
    /// Absolute path.
    pub path: PathBuf,
    /// `lstat` result.
    pub md: Metadata,
    /// Symlink target bytes.
    pub target: Option<Vec<u8>>,
    /// All xattrs with values, or the error reading them.
    pub xattrs: Result<BTreeMap<Vec<u8>, Vec<u8>>, String>,
}

/// A scanned tree: relative path (root = empty) → node.
pub type Tree = BTreeMap<Vec<u8>, Node>;

/// Reads all xattrs of `path` with their values.
pub fn read_xattrs(path: &Path) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, String> {
    let names = sys::llistxattr(path).map_err(|e| format!("llistxattr: {e}"))?;
    let mut map = BTreeMap::new();
    for n in names {
        let v = sys::lgetxattr(path, &n).map_err(|e| format!("lgetxattr {}: {e}", show(&n)))?;
        map.insert(n, v);
    }
    Ok(map)
}

pub(crate) fn join_rel(parent: &[u8], name: &[u8]) -> Vec<u8> {
    if parent.is_empty() {
        name.to_vec()
    } else {
        [parent, b"/", name].concat()
    }
}

/// Walks `root` without following symlinks. Paths for which `exclude` is true are left out with
/// their subtrees. Errors (unreadable directory, failed lstat) are returned as text.
pub fn scan_tree(root: &Path, exclude: &dyn Fn(&[u8]) -> bool) -> Result<Tree, String> {
    let mut tree = Tree::new();
    let mut stack = vec![Vec::<u8>::new()];
    while let Some(rel) = stack.pop() {
        let path = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(crate::bpath(&rel))
        };
        let md =
            fs::symlink_metadata(&path).map_err(|e| format!("lstat {}: {e}", path.display()))?;
        let target = if md.file_type().is_symlink() {
            Some(
                fs::read_link(&path)
                    .map_err(|e| format!("readlink {}: {e}", path.display()))?
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            )
        } else {
            None
        };
        if md.is_dir() {
            let rd = fs::read_dir(&path).map_err(|e| format!("readdir {}: {e}", path.display()))?;
            for entry in rd {
                let entry = entry.map_err(|e| format!("readdir {}: {e}", path.display()))?;
                let child = join_rel(&rel, entry.file_name().as_bytes());
                if !exclude(&child) {
                    stack.push(child);
                }
            }
        }
        let xattrs = read_xattrs(&path);
        tree.insert(
            rel,
            Node {
                path,
                md,
                target,
                xattrs,
            },
        );
    }
    Ok(tree)
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Compares two files byte for byte in 1 MiB chunks. `Ok(None)` when equal, `Ok(Some(offset))` at
/// the first difference (including one file ending early).
pub fn compare_content(a: &Path, b: &Path) -> Result<Option<u64>, String> {
    const CHUNK: usize = 1 << 20;
    let mut fa = File::open(a).map_err(|e| format!("open {}: {e}", a.display()))?;
    let mut fb = File::open(b).map_err(|e| format!("open {}: {e}", b.display()))?;
    let mut ba = vec![0u8; CHUNK];
    let mut bb = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let na = read_full(&mut fa, &mut ba).map_err(|e| format!("read {}: {e}", a.display()))?;
        let nb = read_full(&mut fb, &mut bb).map_err(|e| format!("read {}: {e}", b.display()))?;
        let n = na.min(nb);
        if ba[..n] != bb[..n] {
            let i = ba[..n]
                .iter()
                .zip(&bb[..n])
                .position(|(x, y)| x != y)
                .unwrap();
            return Ok(Some(off + i as u64));
        }
        if na != nb {
            return Ok(Some(off + n as u64));
        }
        if na == 0 {
            return Ok(None);
        }
        off += na as u64;
    }
}

/// Whether `buf` holds only zero bytes (written so that it vectorizes).
fn all_zero(buf: &[u8]) -> bool {
    let mut chunks = buf.chunks_exact(64);
    chunks
        .by_ref()
        .all(|c| c.iter().fold(0u8, |a, &b| a | b) == 0)
        && chunks.remainder().iter().all(|&b| b == 0)
}

/// Files larger than this are compared by [`compare_large_content`].
pub const LARGE_FILE: u64 = 64 << 20;

/// Compares a large source file `src` with its image copy `img` without reading the source's
/// holes and without filling the page cache with gigabytes of zeros:
///
/// - the image file is read in full with O_DIRECT (the kernel's EROFS direct-I/O path), in 8 MiB
///   chunks; a chunk that lies in a source hole (`SEEK_DATA`) must be all zeros, any other chunk is
///   compared with the source bytes;
/// - then, through the page cache (the path ordinary reads take), every source data extent with
///   64 KiB of margin (up to 1 MiB at each edge of an extent, at most 64 extents), and the first
///   and last MiB, are compared again.
pub fn compare_large_content(src: &Path, img: &Path) -> Result<Option<u64>, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    const CHUNK: usize = 8 << 20;
    let fs_ = File::open(src).map_err(|e| format!("open {}: {e}", src.display()))?;
    let len = fs_.metadata().map_err(|e| e.to_string())?.len();
    let seek = |whence: libc::c_int, off: u64| -> u64 {
        // SAFETY: plain lseek on an open descriptor.
        let r = unsafe { libc::lseek(fs_.as_raw_fd(), off as libc::off_t, whence) };
        if r < 0 {
            len
        } else {
            r as u64
        } // ENXIO: no data at or after off
    };
    let direct = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(img);
    let mut fi = match direct {
        Ok(f) => f,
        Err(_) => File::open(img).map_err(|e| format!("open {}: {e}", img.display()))?,
    };
    let mut raw = vec![0u8; CHUNK + 4096];
    let align = raw.as_ptr().align_offset(4096);
    let buf = &mut raw[align..align + CHUNK];
    let mut sbuf = vec![0u8; CHUNK];
    let mut off = 0u64;
    // Next source data offset at or after `off`: valid while it is >= off (no data in between).
    let mut next_data = 0u64;
    loop {
        let n = read_full(&mut fi, buf).map_err(|e| format!("read {}: {e}", img.display()))?;
        if n == 0 {
            break;
        }
        if next_data < off {
            next_data = seek(libc::SEEK_DATA, off);
        }
        if next_data >= off + n as u64 {
            if !all_zero(&buf[..n]) {
                return Ok(Some(
                    off + buf[..n].iter().position(|&b| b != 0).unwrap() as u64,
                ));
            }
        } else {
            let want = (len.saturating_sub(off)).min(n as u64) as usize;
            fs_.read_exact_at(&mut sbuf[..want], off)
                .map_err(|e| format!("read {}: {e}", src.display()))?;
            if sbuf[..want] != buf[..want] {
                let i = sbuf[..want]
                    .iter()
                    .zip(&buf[..want])
                    .position(|(a, b)| a != b)
                    .unwrap();
                return Ok(Some(off + i as u64));
            }
            if want < n {
                return Ok(Some(off + want as u64));
            }
        }
        off += n as u64;
    }
    if off != len {
        return Ok(Some(off));
    }
    // Buffered pass over the data extents and both ends.
    let fb = File::open(img).map_err(|e| format!("open {}: {e}", img.display()))?;
    let mut ranges = vec![(0, len.min(1 << 20)), (len.saturating_sub(1 << 20), len)];
    let mut pos = 0;
    while pos < len {
        let start = seek(libc::SEEK_DATA, pos);
        if start >= len {
            break;
        }
        let end = seek(libc::SEEK_HOLE, start).max(start + 1);
        // Windows around both edges of the extent (the middle of a long one was read above).
        ranges.push((
            start.saturating_sub(1 << 16),
            (start + (1 << 20)).min(end).max(start + (1 << 16)).min(len),
        ));
        ranges.push((
            end.saturating_sub(1 << 20).max(start),
            (end + (1 << 16)).min(len),
        ));
        pos = end;
        if ranges.len() > 130 {
            break;
        }
    }
    for (a, b) in ranges {
        let mut x = vec![0u8; (b - a) as usize];
        let mut y = vec![0u8; (b - a) as usize];
        fs_.read_exact_at(&mut x, a)
            .map_err(|e| format!("read {}: {e}", src.display()))?;
        fb.read_exact_at(&mut y, a)
            .map_err(|e| format!("read {}: {e}", img.display()))?;
        if let Some(i) = x.iter().zip(&y).position(|(p, q)| p != q) {
            return Ok(Some(a + i as u64));
        }
    }
    Ok(None)
}

fn kind(md: &Metadata) -> &'static str {
    match md.mode() & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "symlink",
        libc::S_IFCHR => "chardev",
        libc::S_IFBLK => "blockdev",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        _ => "unknown",
    }
}

/// Sets of paths sharing one non-directory inode (size ≥ 1 each).
fn link_groups(tree: &Tree) -> BTreeSet<BTreeSet<Vec<u8>>> {
    let mut by_ino: BTreeMap<(u64, u64), BTreeSet<Vec<u8>>> = BTreeMap::new();
    for (rel, n) in tree {
        if !n.md.is_dir() {
            by_ino
                .entry((n.md.dev(), n.md.ino()))
                .or_default()
                .insert(rel.clone());
        }
    }
    by_ino.into_values().collect()
}

/// Lists every difference between the source tree `src` and the mounted image `mnt`, given the
/// transformations in `exp`: the set of paths; per path the file type, all 12 permission bits,
/// uid, gid, mtime seconds and nanoseconds, nlink (counted inside the image: hard links among the
/// included paths; 2 + subdirectories for directories), size (not for directories), rdev,
/// symlink target, file content, and all xattrs with their values; and hard-link identity (paths
/// sharing an inode in the source share one in the image, and no others do); and the image's
/// raw directory entries ([`check_dirents`]).
pub fn compare_trees(src: &Path, mnt: &Path, exp: &Expect) -> Vec<String> {
    let mut diffs = Vec::new();
    let src_tree = match scan_tree(src, &|rel| exp.excluded(rel)) {
        Ok(t) => t,
        Err(e) => return vec![format!("scanning source: {e}")],
    };
    let mnt_tree = match scan_tree(mnt, &|_| false) {
        Ok(t) => t,
        Err(e) => return vec![format!("scanning mount: {e}")],
    };

    for rel in src_tree.keys().filter(|k| !mnt_tree.contains_key(*k)) {
        diffs.push(format!("missing in image: /{}", show(rel)));
    }
    for rel in mnt_tree.keys().filter(|k| !src_tree.contains_key(*k)) {
        diffs.push(format!("unexpected in image: /{}", show(rel)));
    }

    // Expected nlink, counted inside the image.
    let src_groups = link_groups(&src_tree);
    let mut expected_nlink: BTreeMap<&[u8], u64> = BTreeMap::new();
    for g in &src_groups {
        for p in g {
            expected_nlink.insert(p, g.len() as u64);
        }
    }
    let mut subdirs: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for (rel, n) in &src_tree {
        if n.md.is_dir() && !rel.is_empty() {
            let parent = match rel.iter().rposition(|&b| b == b'/') {
                Some(i) => rel[..i].to_vec(),
                None => Vec::new(),
            };
            *subdirs.entry(parent).or_default() += 1;
        }
    }

    for (rel, s) in &src_tree {
        let Some(m) = mnt_tree.get(rel) else { continue };
        let at = format!("/{}", show(rel));
        let (sm, mm) = (&s.md, &m.md);
        if sm.mode() & libc::S_IFMT != mm.mode() & libc::S_IFMT {
            diffs.push(format!(
                "{at}: type {} in source, {} in image",
                kind(sm),
                kind(mm)
            ));
            continue;
        }
        if sm.mode() & 0o7777 != mm.mode() & 0o7777 {
            diffs.push(format!(
                "{at}: mode {:04o} expected, image has {:04o}",
                sm.mode() & 0o7777,
                mm.mode() & 0o7777
            ));
        }
        let uid = exp.uid.apply(sm.uid());
        if uid != mm.uid() {
            diffs.push(format!("{at}: uid {uid} expected, image has {}", mm.uid()));
        }
        let gid = exp.gid.apply(sm.gid());
        if gid != mm.gid() {
            diffs.push(format!("{at}: gid {gid} expected, image has {}", mm.gid()));
        }
        let t = exp.mtime_of(sm.mtime(), sm.mtime_nsec());
        if t != (mm.mtime(), mm.mtime_nsec()) {
            diffs.push(format!(
                "{at}: mtime {}.{:09} expected (source {}.{:09}), image has {}.{:09}",
                t.0,
                t.1,
                sm.mtime(),
                sm.mtime_nsec(),
                mm.mtime(),
                mm.mtime_nsec()
            ));
        }
        let nlink = if sm.is_dir() {
            2 + subdirs.get(rel).copied().unwrap_or(0)
        } else {
            expected_nlink.get(rel.as_slice()).copied().unwrap_or(1)
        };
        if nlink != mm.nlink() {
            diffs.push(format!(
                "{at}: nlink {nlink} expected (source st_nlink {}), image has {}",
                sm.nlink(),
                mm.nlink()
            ));
        }
        if !sm.is_dir() && sm.len() != mm.len() {
            diffs.push(format!(
                "{at}: size {} in source, {} in image",
                sm.len(),
                mm.len()
            ));
        }
        let ft = sm.mode() & libc::S_IFMT;
        if (ft == libc::S_IFCHR || ft == libc::S_IFBLK) && sm.rdev() != mm.rdev() {
            diffs.push(format!(
                "{at}: rdev {}:{} in source, {}:{} in image",
                libc::major(sm.rdev()),
                libc::minor(sm.rdev()),
                libc::major(mm.rdev()),
                libc::minor(mm.rdev())
            ));
        }
        if s.target != m.target {
            diffs.push(format!(
                "{at}: symlink target {:?} in source, {:?} in image",
                s.target.as_deref().map(show),
                m.target.as_deref().map(show)
            ));
        }
        if ft == libc::S_IFREG
            && sm.len() == mm.len()
            && exp.content_limit.is_none_or(|l| sm.len() <= l)
        {
            let cmp = if sm.len() > LARGE_FILE {
                compare_large_content(&s.path, &m.path)
            } else {
                compare_content(&s.path, &m.path)
            };
            match cmp {
                Ok(None) => {}
                Ok(Some(off)) => diffs.push(format!("{at}: content differs at byte {off}")),
                Err(e) => diffs.push(format!("{at}: reading content: {e}")),
            }
        }
        match (&s.xattrs, &m.xattrs) {
            (Ok(sx), Ok(mx)) => {
                for (k, v) in sx {
                    match mx.get(k) {
                        None => diffs.push(format!("{at}: xattr {} missing in image", show(k))),
                        Some(w) if w != v => diffs.push(format!(
                            "{at}: xattr {} value differs ({} bytes in source, {} in image{})",
                            show(k),
                            v.len(),
                            w.len(),
                            match v.iter().zip(w).position(|(a, b)| a != b) {
                                Some(i) => format!(", first difference at byte {i}"),
                                None => String::new(),
                            }
                        )),
                        Some(_) => {}
                    }
                }
                for k in mx.keys().filter(|k| !sx.contains_key(*k)) {
                    diffs.push(format!("{at}: unexpected xattr {} in image", show(k)));
                }
            }
            (Err(e), _) => diffs.push(format!("{at}: source xattrs: {e}")),
            (_, Err(e)) => diffs.push(format!("{at}: image xattrs: {e}")),
        }
    }

    // Raw directory entries of the image: "." and ".." with the right inode numbers, every
    // entry's d_ino and d_type matching what lstat says of it.
    diffs.extend(check_dirents(&mnt_tree));

    // Hard-link identity, both ways.
    let mnt_groups = link_groups(&mnt_tree);
    for g in src_groups.difference(&mnt_groups) {
        if g.len() > 1 || g.iter().all(|p| mnt_tree.contains_key(p)) {
            let names: Vec<String> = g.iter().map(|p| format!("/{}", show(p))).collect();
            diffs.push(format!(
                "hard-link group {names:?} of the source is not one inode in the image"
            ));
        }
    }
    for g in mnt_groups.difference(&src_groups) {
        if g.len() > 1 {
            let names: Vec<String> = g.iter().map(|p| format!("/{}", show(p))).collect();
            diffs.push(format!(
                "paths {names:?} share an inode in the image but not in the source"
            ));
        }
    }
    diffs
}

/// [`compare_trees`] of a source with an extracted directory. `compare_trees` checks the compared
/// tree's raw dirents as a mount root's, where ".." of the root is the root itself; an extracted
/// directory's ".." is its real parent, so exactly that one line is dropped.
pub fn compare_extracted(src: &Path, out: &Path, exp: &Expect) -> Vec<String> {
    compare_trees(src, out, exp)
        .into_iter()
        .filter(|d| !d.starts_with("/: readdir entry .. has d_ino "))
        .collect()
}

fn dt_of(md: &Metadata) -> u8 {
    match md.mode() & libc::S_IFMT {
        libc::S_IFREG => libc::DT_REG,
        libc::S_IFDIR => libc::DT_DIR,
        libc::S_IFLNK => libc::DT_LNK,
        libc::S_IFCHR => libc::DT_CHR,
        libc::S_IFBLK => libc::DT_BLK,
        libc::S_IFIFO => libc::DT_FIFO,
        libc::S_IFSOCK => libc::DT_SOCK,
        _ => libc::DT_UNKNOWN,
    }
}

/// Checks `readdir` of every directory of a scanned tree against `lstat`: "." carries the
/// directory's inode number, ".." its parent's (the root's own for the root), and every other
/// entry the inode number and `d_type` of the path it names; no name appears twice.
pub fn check_dirents(tree: &Tree) -> Vec<String> {
    let mut diffs = Vec::new();
    for (rel, node) in tree.iter().filter(|(_, n)| n.md.is_dir()) {
        let at = format!("/{}", show(rel));
        let entries = match sys::raw_readdir(&node.path) {
            Ok(e) => e,
            Err(e) => {
                diffs.push(format!("{at}: readdir: {e}"));
                continue;
            }
        };
        let parent_rel: &[u8] = match rel.iter().rposition(|&b| b == b'/') {
            Some(i) => &rel[..i],
            None => b"",
        };
        let parent_ino = tree.get(parent_rel).map(|p| p.md.ino());
        let mut seen = BTreeSet::new();
        for e in &entries {
            if !seen.insert(e.name.clone()) {
                diffs.push(format!("{at}: readdir returns {} twice", show(&e.name)));
            }
            let (want_ino, want_dt) = match e.name.as_slice() {
                b"." => (Some(node.md.ino()), libc::DT_DIR),
                b".." => (
                    if rel.is_empty() {
                        Some(node.md.ino())
                    } else {
                        parent_ino
                    },
                    libc::DT_DIR,
                ),
                name => match tree.get(&join_rel(rel, name)) {
                    Some(c) => (Some(c.md.ino()), dt_of(&c.md)),
                    None => {
                        diffs.push(format!(
                            "{at}: readdir returns {} which lstat did not see",
                            show(name)
                        ));
                        continue;
                    }
                },
            };
            if want_ino.is_some_and(|w| w != e.ino) {
                diffs.push(format!(
                    "{at}: readdir entry {} has d_ino {}, lstat says {}",
                    show(&e.name),
                    e.ino,
                    want_ino.unwrap()
                ));
            }
            if e.d_type != want_dt {
                diffs.push(format!(
                    "{at}: readdir entry {} has d_type {}, expected {want_dt}",
                    show(&e.name),
                    e.d_type
                ));
            }
        }
        for must in [&b"."[..], b".."] {
            if !seen.contains(must) {
                diffs.push(format!("{at}: readdir lacks {}", show(must)));
            }
        }
    }
    diffs
}

/// Absent-name candidates always probed by [`check_xattr_filter`].
pub const ABSENT_NAMES: &[&str] = &[
    "security.capability",
    "system.posix_acl_access",
    "system.posix_acl_default",
    "security.selinux",
    "security.ima",
    "security.apparmor",
    "user.absent",
    "user.mime_type",
    "user.overlay.opaque",
    "user.overlay.metacopy",
    "trusted.nope",
    "trusted.overlay.opaque",
    "trusted.overlay.nlink",
    "trusted.overlay.metacopy",
];

/// Checks the kernel's xattr lookups on every path of a mounted image, where the per-inode bloom
/// filter decides whether the kernel even looks: every listed xattr must be returned by
/// `lgetxattr` (a wrong filter bit hides it), and absent names ([`ABSENT_NAMES`] plus 20 random
/// ones per path) must give ENODATA (EOPNOTSUPP allowed for POSIX ACL names on symlinks).
/// Returns the problems and the number of lookups made.
pub fn check_xattr_filter(mnt: &Path) -> (Vec<String>, usize) {
    let mut problems = Vec::new();
    let mut lookups = 0usize;
    let tree = match scan_tree(mnt, &|_| false) {
        Ok(t) => t,
        Err(e) => return (vec![format!("scanning mount: {e}")], 0),
    };
    let mut rng = crate::Rng::new(0x5EA1_F11E);
    for (rel, node) in &tree {
        let at = format!("/{}", show(rel));
        let names = match sys::llistxattr(&node.path) {
            Ok(n) => n,
            Err(e) => {
                problems.push(format!("{at}: llistxattr: {e}"));
                continue;
            }
        };
        for n in &names {
            lookups += 1;
            if let Err(e) = sys::lgetxattr(&node.path, n) {
                problems.push(format!(
                    "{at}: listed xattr {} not returned by getxattr: {e}",
                    show(n)
                ));
            }
        }
        let mut candidates: Vec<Vec<u8>> =
            ABSENT_NAMES.iter().map(|s| s.as_bytes().to_vec()).collect();
        for _ in 0..20 {
            let prefix: &[u8] = match rng.below(3) {
                0 => b"user.",
                1 => b"trusted.",
                _ => b"security.",
            };
            let len = 1 + rng.below(24) as usize;
            let suffix: Vec<u8> = (0..len)
                .map(|_| b"abcdefghijklmnopqrstuvwxyz0123456789._-"[rng.below(39) as usize])
                .collect();
            candidates.push([prefix, &suffix].concat());
        }
        for c in candidates.iter().filter(|c| !names.contains(c)) {
            lookups += 1;
            match sys::lgetxattr(&node.path, c) {
                Ok(v) => problems.push(format!(
                    "{at}: absent xattr {} returned a {}-byte value",
                    show(c),
                    v.len()
                )),
                Err(e) if sys::errno(&e) == libc::ENODATA => {}
                Err(e)
                    if sys::errno(&e) == libc::EOPNOTSUPP
                        && node.md.file_type().is_symlink()
                        && c.starts_with(b"system.posix_acl") => {}
                Err(e) => problems.push(format!(
                    "{at}: getxattr of absent {}: {e} (ENODATA expected)",
                    show(c)
                )),
            }
        }
    }
    (problems, lookups)
}
