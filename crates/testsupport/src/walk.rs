//! Trees as maps from relative path to node: scanned from a source directory (with `lstat`,
//! `readlink`, `llistxattr`), walked through the reader, and compared.
//!
//! The image walk also checks the reader against itself on the way: "." and ".." entries, the dirent
//! file type against the inode, `lookup` and `resolve` of every name (the kernel's binary search, so
//! a misordered directory shows up), lookups of absent names, `get_xattr` of every listed name, and
//! that the extent map covers the file exactly.

use crate::compare::{join_rel as join, scan_tree};
use crate::show;
use sealfs_reader::{ExtentKind, Follow, Image, Inode};
use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// One file of a tree.
#[derive(Clone, Debug, Default)]
pub struct Node {
    /// `st_mode`.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size.
    pub size: u64,
    /// Link count.
    pub nlink: u64,
    /// Modification time.
    pub mtime: (i64, i64),
    /// Device number (makedev form).
    pub rdev: u64,
    /// Content of regular files.
    pub content: Option<Vec<u8>>,
    /// Symlink target.
    pub target: Option<Vec<u8>>,
    /// Xattrs.
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// nid (image trees only).
    pub nid: u64,
}

/// Relative path (empty for the root) → node.
pub type Tree = BTreeMap<Vec<u8>, Node>;

const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFCHR: u32 = 0o020000;
const S_IFBLK: u32 = 0o060000;

/// Scans a source directory without following symlinks (with [`crate::compare::scan_tree`]), reading
/// the content of every regular file.
pub fn scan_source(root: &Path) -> Tree {
    let scanned = scan_tree(root, &|_| false).unwrap_or_else(|e| panic!("{e}"));
    scanned
        .into_iter()
        .map(|(rel, n)| {
            let md = &n.md;
            let node = Node {
                mode: md.mode(),
                uid: md.uid(),
                gid: md.gid(),
                size: md.size(),
                nlink: md.nlink(),
                mtime: (md.mtime(), md.mtime_nsec()),
                rdev: md.rdev(),
                content: md.is_file().then(|| fs::read(&n.path).unwrap()),
                target: n.target,
                xattrs: n
                    .xattrs
                    .unwrap_or_else(|e| panic!("{}: {e}", n.path.display())),
                nid: 0,
            };
            (rel, node)
        })
        .collect()
}

fn check_extents(img: &Image, inode: &Inode, what: &str) -> Result<(), String> {
    let extents = img
        .map_range(inode, 0, u64::MAX)
        .map_err(|e| format!("{what}: map_range: {e}"))?;
    let mut pos = 0;
    for e in &extents {
        if e.logical != pos || e.length == 0 {
            return Err(format!("{what}: extent {e:?} does not continue at {pos}"));
        }
        if let ExtentKind::Inline { physical } = e.kind {
            let bsz = img.block_size();
            if physical % bsz + e.length > bsz {
                return Err(format!("{what}: inline extent {e:?} crosses a block"));
            }
        }
        pos += e.length;
    }
    if pos != inode.size() {
        return Err(format!(
            "{what}: extents end at {pos}, size {}",
            inode.size()
        ));
    }
    Ok(())
}

/// Walks the whole image through the reader, checking it against itself on the way. Any reader
/// error or inconsistency is returned as text naming the path.
pub fn walk_image(img: &Image) -> Result<Tree, String> {
    let mut tree = Tree::new();
    let root = img.root().map_err(|e| format!("root: {e}"))?;
    let mut stack = vec![(Vec::<u8>::new(), root.clone(), root.nid())];
    let mut seen_dirs = HashSet::new();
    while let Some((rel, inode, parent)) = stack.pop() {
        let what = format!("/{}", show(&rel));
        let err = |e: sealfs_reader::Error| format!("{what}: {e}");
        let st = inode.stat();
        let mut node = Node {
            mode: st.mode,
            uid: st.uid,
            gid: st.gid,
            size: st.size,
            nlink: st.nlink as u64,
            mtime: (st.mtime, st.mtime_nsec as i64),
            rdev: st.rdev,
            nid: inode.nid(),
            ..Node::default()
        };
        // The kernel's rule (`erofs_nid_to_ino64`), written out here rather than taken from the
        // format crate: the nid, or with a metabox, bits 31..62 moved up one and bit 63 to bit 31.
        let nid = inode.nid();
        let want_ino = match img.superblock().metabox_nid {
            None => nid,
            Some(_) => ((nid << 1) & !0xffff_ffff) | (nid & 0x7fff_ffff) | ((nid >> 63) << 31),
        };
        if st.ino != want_ino {
            return Err(format!("{what}: ino {} for nid {nid}", st.ino));
        }
        let resolved = img.resolve(&rel, Follow::Never).map_err(err)?;
        if resolved.nid() != inode.nid() {
            return Err(format!("{what}: resolve gives nid {}", resolved.nid()));
        }
        if inode.is_dir() {
            if !seen_dirs.insert(inode.nid()) {
                return Err(format!("{what}: directory nid {} seen twice", inode.nid()));
            }
            let entries = img.read_dir_all(&inode).map_err(err)?;
            let mut names = HashSet::new();
            for e in &entries {
                if e.name.is_empty() {
                    return Err(format!("{what}: empty name (nid {})", e.nid));
                }
                if !names.insert(e.name.clone()) {
                    return Err(format!("{what}: duplicate entry {}", show(&e.name)));
                }
                let found = img.lookup(&inode, &e.name).map_err(err)?;
                if found.as_ref().map(|f| f.nid) != Some(e.nid) {
                    return Err(format!(
                        "{what}: lookup of {} gives {found:?}, readdir nid {}",
                        show(&e.name),
                        e.nid
                    ));
                }
                // Absent neighbours of every name: longer, shorter, changed last byte.
                let mut longer = e.name.clone();
                longer.push(b'~');
                let mut changed = e.name.clone();
                *changed.last_mut().unwrap() ^= 0x01;
                for probe in [longer, e.name[..e.name.len() - 1].to_vec(), changed] {
                    if probe.is_empty() || probe.len() > 255 || names_contains(&entries, &probe) {
                        continue;
                    }
                    if let Some(f) = img.lookup(&inode, &probe).map_err(err)? {
                        return Err(format!("{what}: absent {} found: {f:?}", show(&probe)));
                    }
                }
                match &e.name[..] {
                    b"." if e.nid != inode.nid() => {
                        return Err(format!("{what}: \".\" is nid {}", e.nid))
                    }
                    b".." if e.nid != parent => {
                        return Err(format!("{what}: \"..\" is nid {}, parent {parent}", e.nid))
                    }
                    b"." | b".." => continue,
                    _ => {}
                }
                let child = img.inode(e.nid).map_err(err)?;
                if e.file_type() != Some(child.file_type()) {
                    return Err(format!(
                        "{what}/{}: dirent type {} but inode {:?}",
                        show(&e.name),
                        e.file_type,
                        child.file_type()
                    ));
                }
                stack.push((join(&rel, &e.name), child, inode.nid()));
            }
            for must in [&b"."[..], b".."] {
                if !names.contains(must) {
                    return Err(format!("{what}: no {} entry", show(must)));
                }
            }
        } else if inode.is_file() {
            check_extents(img, &inode, &what)?;
            let data = img
                .read_vec(&inode, 0, inode.size() as usize)
                .map_err(err)?;
            if data.len() as u64 != inode.size() {
                return Err(format!(
                    "{what}: read {} of {} bytes",
                    data.len(),
                    inode.size()
                ));
            }
            node.content = Some(data);
        } else if inode.is_symlink() {
            node.target = Some(img.readlink(&inode).map_err(err)?);
        }
        for (name, value) in img.xattrs(&inode).map_err(err)? {
            match img.get_xattr(&inode, &name).map_err(err)? {
                Some(v) if v == value => {}
                other => {
                    return Err(format!(
                        "{what}: get_xattr({}) = {other:?}, listed {value:?}",
                        show(&name)
                    ))
                }
            }
            node.xattrs.insert(name, value);
        }
        for absent in [
            &b"user.absent"[..],
            b"trusted.absent",
            b"security.capability",
        ] {
            if node.xattrs.contains_key(absent) {
                continue;
            }
            if let Some(v) = img.get_xattr(&inode, absent).map_err(err)? {
                return Err(format!("{what}: absent xattr {} = {v:?}", show(absent)));
            }
        }
        tree.insert(rel, node);
    }
    Ok(tree)
}

fn names_contains(entries: &[sealfs_reader::DirEntry], name: &[u8]) -> bool {
    entries.iter().any(|e| e.name == name)
}

/// What the image should show, relative to the source.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// Every mtime is this one (`-T`, compact inodes); otherwise the source's.
    pub mtime: Option<(i64, i64)>,
    /// Compare xattrs.
    pub xattrs: bool,
    /// Compare link counts.
    pub nlink: bool,
    /// Compare owners.
    pub owners: bool,
    /// Every inode has this owner and group (`--force-uid/--force-gid`).
    pub force_owner: Option<(u32, u32)>,
}

impl Default for Expect {
    fn default() -> Expect {
        Expect {
            mtime: None,
            xattrs: true,
            nlink: true,
            owners: true,
            force_owner: None,
        }
    }
}

/// Differences between a source tree and an image tree, as text.
pub fn compare(src: &Tree, img: &Tree, expect: &Expect) -> Vec<String> {
    let mut diffs = Vec::new();
    for path in src.keys().filter(|p| !img.contains_key(*p)) {
        diffs.push(format!("/{}: missing from the image", show(path)));
    }
    for path in img.keys().filter(|p| !src.contains_key(*p)) {
        diffs.push(format!("/{}: only in the image", show(path)));
    }
    for (path, s) in src {
        let Some(i) = img.get(path) else { continue };
        let p = format!("/{}", show(path));
        let mut d = |what: &str, a: String, b: String| {
            if a != b {
                diffs.push(format!("{p}: {what}: source {a}, image {b}"));
            }
        };
        d("mode", format!("{:o}", s.mode), format!("{:o}", i.mode));
        if expect.owners {
            let (uid, gid) = expect.force_owner.unwrap_or((s.uid, s.gid));
            d("uid", uid.to_string(), i.uid.to_string());
            d("gid", gid.to_string(), i.gid.to_string());
        }
        if s.mode & S_IFMT != S_IFDIR {
            d("size", s.size.to_string(), i.size.to_string());
        }
        if expect.nlink {
            d("nlink", s.nlink.to_string(), i.nlink.to_string());
        }
        let want = expect.mtime.unwrap_or(s.mtime);
        d("mtime", format!("{want:?}"), format!("{:?}", i.mtime));
        if matches!(s.mode & S_IFMT, S_IFCHR | S_IFBLK) {
            d("rdev", format!("{:#x}", s.rdev), format!("{:#x}", i.rdev));
        }
        if s.content != i.content {
            let at = match (&s.content, &i.content) {
                (Some(a), Some(b)) => a
                    .iter()
                    .zip(b.iter())
                    .position(|(x, y)| x != y)
                    .unwrap_or(a.len().min(b.len()))
                    .to_string(),
                _ => "-".into(),
            };
            diffs.push(format!("{p}: content differs (first at {at})"));
        }
        if s.target != i.target {
            diffs.push(format!(
                "{p}: link target {:?} vs {:?}",
                s.target.as_deref().map(show),
                i.target.as_deref().map(show)
            ));
        }
        if expect.xattrs && s.xattrs != i.xattrs {
            let names =
                |m: &BTreeMap<Vec<u8>, Vec<u8>>| m.keys().map(|k| show(k)).collect::<Vec<_>>();
            diffs.push(format!(
                "{p}: xattrs {:?} vs {:?} (or values differ)",
                names(&s.xattrs),
                names(&i.xattrs)
            ));
        }
    }
    diffs
}
