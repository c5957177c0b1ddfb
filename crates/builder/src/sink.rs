//! The sink: entries from a source, in any order, assembled into the tree the layout plans.
//!
//! Entries are kept in a tree of nodes addressed by path while the source scans (a later entry at
//! a path replaces an earlier one, parents missing are made as `tar -x` makes them); then
//! [`Sink::finish`] numbers the nodes breadth first, names sorted by bytes, the root first (a
//! file with several names gets the number of the first name in that order), applies the build
//! options that change entries (times, owners, exclusions) and returns the [`Tree`]. Neither the
//! order entries came in nor anything of where they came from is left in it.
//!
//! For layered sources (OCI images) the sink counts layers ([`Sink::next_layer`]) and removes
//! what a layer deletes ([`Sink::remove`], [`Sink::make_opaque`]).

use crate::error::{BuildError, Result};
use crate::options::BuildOptions;
use crate::source::{DataId, Entry, EntryKind};
use crate::tree::{Entries, FileData, Inode, InodeId, Kind, Origin, Tree, Xattr};
use sealfs_format::{self as fmt, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFREG, S_IFSOCK};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// An entry the sink cannot take, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {what}", sealfs_text::escape(path))]
pub struct EntryError {
    /// The entry's path (relative to the root).
    pub path: Vec<u8>,
    /// What is wrong with it.
    pub what: String,
}

impl EntryError {
    fn new(path: &[u8], what: impl Into<String>) -> Self {
        EntryError {
            path: path.to_vec(),
            what: what.into(),
        }
    }
}

type NodeId = u32;

#[derive(Debug)]
enum NodeKind {
    Dir(BTreeMap<Vec<u8>, NodeId>),
    File(FileData),
    Symlink(Vec<u8>),
    Device(u32),
    Special,
}

#[derive(Debug)]
struct Node {
    kind: NodeKind,
    /// `st_mode`, type and permissions.
    mode: u16,
    uid: u32,
    gid: u32,
    mtime: i64,
    mtime_nsec: u32,
    xattrs: Vec<Xattr>,
    /// The layer that last gave this node (see [`Sink::next_layer`]).
    layer: u32,
}

/// Mode of a directory made for an entry below it (as `tar -x` makes one with the usual umask).
const IMPLICIT_DIR_MODE: u16 = S_IFDIR | 0o755;

/// Takes the entries of a source (see [`crate::Source`]) and assembles the tree.
#[derive(Debug)]
pub struct Sink {
    nodes: Vec<Node>,
    /// Where paths of messages start ([`crate::Source::base`]).
    base: PathBuf,
    /// Copy xattrs at all.
    xattrs: bool,
    warnings: Vec<String>,
    layer: u32,
    /// The last parent directory looked up, by path: entries come grouped by directory.
    last_parent: Option<(Vec<u8>, NodeId)>,
}

impl Sink {
    pub(crate) fn new(base: &Path, opts: &BuildOptions) -> Self {
        let mut sink = Sink {
            nodes: Vec::new(),
            base: base.to_path_buf(),
            xattrs: opts.xattrs,
            warnings: Vec::new(),
            layer: 0,
            last_parent: None,
        };
        sink.nodes.push(sink.implicit_dir());
        sink
    }

    fn implicit_dir(&self) -> Node {
        Node {
            kind: NodeKind::Dir(BTreeMap::new()),
            mode: IMPLICIT_DIR_MODE,
            uid: 0,
            gid: 0,
            mtime: 0,
            mtime_nsec: 0,
            xattrs: Vec::new(),
            layer: self.layer,
        }
    }

    /// Notes something left out or changed, for the build summary.
    pub fn warn(&mut self, message: String) {
        self.warnings.push(message);
    }

    /// Starts the next layer of a layered source: from now on an entry may replace a directory
    /// by a file or the reverse (within one layer that is an error), and [`Sink::remove`] and
    /// [`Sink::make_opaque`] act on what earlier layers gave.
    pub fn next_layer(&mut self) {
        self.layer += 1;
    }

    /// Adds `entry` to the tree, as `tar -x` would extract it over what is there:
    ///
    /// - parents missing are made: directories of mode 0755, owned by 0:0, modified at time 0
    ///   (the epoch), until an entry of their own gives them their metadata;
    /// - a directory over a directory changes its metadata and keeps its contents;
    /// - anything else over a non-directory replaces it (the last entry wins; other names of the
    ///   replaced file keep it, as hard links do);
    /// - a hard link names the file its target names now;
    /// - within one layer, a non-directory over a directory, a directory over a non-directory,
    ///   an entry below a non-directory, a hard link to a directory or to nothing are errors.
    ///
    /// Xattrs that EROFS cannot name are left out with a warning.
    pub fn add(&mut self, entry: Entry) -> std::result::Result<(), EntryError> {
        let path = &entry.path;
        check_path(path)?;
        if path.is_empty() {
            // The root: always a directory.
            if entry.kind != EntryKind::Dir {
                return Err(EntryError::new(b"/", "the root must be a directory"));
            }
            let node = self.node_of(&entry, NodeKind::Dir(BTreeMap::new()))?;
            set_meta(&mut self.nodes[0], node);
            return Ok(());
        }
        let (parent_path, name) = split_last(path);
        let parent = self
            .dir_at(parent_path, true)?
            .expect("missing directories are made");
        let existing = self.child(parent, name);
        let layer = self.layer;
        let replacing_lower = |n: &Node| n.layer < layer;
        match (&entry.kind, existing) {
            (EntryKind::Dir, Some(id)) if self.is_dir(id) => {
                let node = self.node_of(&entry, NodeKind::Dir(BTreeMap::new()))?;
                set_meta(&mut self.nodes[id as usize], node);
                return Ok(());
            }
            (EntryKind::Dir, Some(id)) if !replacing_lower(&self.nodes[id as usize]) => {
                return Err(EntryError::new(path, "a directory over a non-directory"));
            }
            (k, Some(id))
                if *k != EntryKind::Dir
                    && self.is_dir(id)
                    && !replacing_lower(&self.nodes[id as usize]) =>
            {
                return Err(EntryError::new(path, "a non-directory over a directory"));
            }
            _ => {}
        }
        if existing.is_some() {
            // What replaces it may not be the directory a lookup remembers.
            self.last_parent = None;
        }
        let id = match &entry.kind {
            EntryKind::HardLink(target) => {
                check_path(target).map_err(|e| EntryError::new(path, e.what))?;
                let target_id = self.lookup(target).ok_or_else(|| {
                    EntryError::new(
                        path,
                        format!(
                            "hard link to {}, which is not in the tree",
                            sealfs_text::escape(target)
                        ),
                    )
                })?;
                if self.is_dir(target_id) {
                    return Err(EntryError::new(
                        path,
                        format!("hard link to {}, a directory", sealfs_text::escape(target)),
                    ));
                }
                target_id
            }
            kind => {
                let node_kind = match kind {
                    EntryKind::Dir => NodeKind::Dir(BTreeMap::new()),
                    EntryKind::File {
                        size,
                        data,
                        data_ranges,
                    } => NodeKind::File(FileData {
                        size: *size,
                        data_ranges: data_ranges.as_deref().map(Box::from),
                        data: *data,
                    }),
                    EntryKind::Symlink(target) => {
                        if target.len() as u64 >= fmt::BLKSZ {
                            return Err(EntryError::new(
                                path,
                                "symlink target longer than 4095 bytes",
                            ));
                        }
                        NodeKind::Symlink(target.clone())
                    }
                    EntryKind::CharDevice { major, minor }
                    | EntryKind::BlockDevice { major, minor } => {
                        if !fmt::new_valid_dev(*major, *minor) {
                            return Err(EntryError::new(
                                path,
                                format!("device number {major}:{minor} does not fit 32 bits"),
                            ));
                        }
                        NodeKind::Device(fmt::new_encode_dev(*major, *minor))
                    }
                    EntryKind::Fifo | EntryKind::Socket => NodeKind::Special,
                    EntryKind::HardLink(_) => unreachable!("matched above"),
                };
                let node = self.node_of(&entry, node_kind)?;
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        };
        if let NodeKind::Dir(children) = &mut self.nodes[parent as usize].kind {
            children.insert(name.to_vec(), id);
        }
        Ok(())
    }

    /// Removes `path` (relative to the root) and everything below it, if an earlier layer gave
    /// it (an OCI whiteout); returns whether there was something to remove. A path below a
    /// non-directory names nothing: no error, nothing removed.
    pub fn remove(&mut self, path: &[u8]) -> std::result::Result<bool, EntryError> {
        check_path(path)?;
        if path.is_empty() {
            return Err(EntryError::new(b"/", "the root cannot be removed"));
        }
        let (parent_path, name) = split_last(path);
        // Nothing below a non-directory (`d`, then `d/.wh.x`, as `umoci repack` writes a
        // directory that became a file): nothing to remove, as `umoci unpack` takes it.
        let Some(parent) = self.lookup(parent_path).filter(|&id| self.is_dir(id)) else {
            return Ok(false);
        };
        let layer = self.layer;
        match self.child(parent, name) {
            Some(id) if self.nodes[id as usize].layer < layer => {
                let NodeKind::Dir(children) = &mut self.nodes[parent as usize].kind else {
                    unreachable!("dir_at gives directories")
                };
                children.remove(name);
                self.last_parent = None;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Whether one of the parents of `path` is a non-directory now: no entry can be below it
    /// (an OCI whiteout there names nothing, see [`Sink::remove`]).
    pub fn below_non_dir(&self, path: &[u8]) -> bool {
        let (parent, _) = split_last(path);
        if parent.is_empty() {
            return false;
        }
        let mut id = 0;
        for name in parent.split(|&b| b == b'/') {
            match self.child(id, name) {
                Some(c) if self.is_dir(c) => id = c,
                Some(_) => return true,
                None => return false,
            }
        }
        false
    }

    /// Makes the directory at `path` opaque (an OCI opaque whiteout): whatever earlier layers
    /// put below it is removed; what this layer put there stays.
    pub fn make_opaque(&mut self, path: &[u8]) -> std::result::Result<(), EntryError> {
        check_path(path)?;
        if let Some(dir) = self.dir_at(path, false)? {
            self.drop_lower(dir);
            self.last_parent = None;
        }
        Ok(())
    }

    /// Sets the extended attribute `name` of the directory at `path` to `value` (made, with its
    /// parents, if missing, as for an entry below it): an OCI layer kept as overlayfs layers
    /// it marks an opaque directory so (`trusted.overlay.opaque`). Left out, as every xattr,
    /// when the build copies none.
    pub fn set_dir_xattr(
        &mut self,
        path: &[u8],
        name: &[u8],
        value: &[u8],
    ) -> std::result::Result<(), EntryError> {
        check_path(path)?;
        if !self.xattrs {
            return Ok(());
        }
        let (index, suffix) = fmt::split_xattr_name(name).ok_or_else(|| {
            EntryError::new(
                path,
                format!("xattr {} has no EROFS prefix", sealfs_text::escape(name)),
            )
        })?;
        let dir = self
            .dir_at(path, true)?
            .expect("missing directories are made");
        let xattrs = &mut self.nodes[dir as usize].xattrs;
        xattrs.retain(|x| !(x.index == index && x.suffix == suffix));
        xattrs.push(Xattr {
            index,
            suffix: suffix.to_vec(),
            value: value.to_vec(),
        });
        xattrs.sort();
        Ok(())
    }

    fn drop_lower(&mut self, dir: NodeId) {
        let layer = self.layer;
        let NodeKind::Dir(children) = &mut self.nodes[dir as usize].kind else {
            return;
        };
        let mut kept = std::mem::take(children);
        kept.retain(|_, id| self.nodes[*id as usize].layer >= layer);
        let subdirs: Vec<NodeId> = kept
            .values()
            .copied()
            .filter(|&id| self.is_dir(id))
            .collect();
        if let NodeKind::Dir(children) = &mut self.nodes[dir as usize].kind {
            *children = kept;
        }
        for d in subdirs {
            self.drop_lower(d);
        }
    }

    fn is_dir(&self, id: NodeId) -> bool {
        matches!(self.nodes[id as usize].kind, NodeKind::Dir(_))
    }

    fn child(&self, dir: NodeId, name: &[u8]) -> Option<NodeId> {
        match &self.nodes[dir as usize].kind {
            NodeKind::Dir(children) => children.get(name).copied(),
            _ => None,
        }
    }

    /// The node at `path`, if there is one.
    fn lookup(&self, path: &[u8]) -> Option<NodeId> {
        if path.is_empty() {
            return Some(0);
        }
        let mut id = 0;
        for name in path.split(|&b| b == b'/') {
            id = self.child(id, name)?;
        }
        Some(id)
    }

    /// The directory at `path`, made (with its parents) when missing if `make`; an error if a
    /// non-directory is in the way.
    fn dir_at(
        &mut self,
        path: &[u8],
        make: bool,
    ) -> std::result::Result<Option<NodeId>, EntryError> {
        if path.is_empty() {
            return Ok(Some(0));
        }
        if let Some((p, id)) = &self.last_parent {
            if p == path {
                return Ok(Some(*id));
            }
        }
        let mut id = 0;
        let mut end = 0;
        for name in path.split(|&b| b == b'/') {
            end += name.len();
            id = match self.child(id, name) {
                Some(c) if self.is_dir(c) => c,
                Some(_) => {
                    return Err(EntryError::new(
                        &path[..end],
                        "not a directory, but an entry below it is in the archive",
                    ))
                }
                None if make => {
                    let node = self.implicit_dir();
                    self.nodes.push(node);
                    let c = (self.nodes.len() - 1) as NodeId;
                    if let NodeKind::Dir(children) = &mut self.nodes[id as usize].kind {
                        children.insert(name.to_vec(), c);
                    }
                    c
                }
                None => return Ok(None),
            };
            end += 1;
        }
        self.last_parent = Some((path.to_vec(), id));
        Ok(Some(id))
    }

    /// A node of kind `kind` with `entry`'s metadata.
    fn node_of(&mut self, entry: &Entry, kind: NodeKind) -> std::result::Result<Node, EntryError> {
        let ftype = match entry.kind {
            EntryKind::Dir => S_IFDIR,
            EntryKind::File { .. } => S_IFREG,
            EntryKind::Symlink(_) => S_IFLNK,
            EntryKind::CharDevice { .. } => S_IFCHR,
            EntryKind::BlockDevice { .. } => S_IFBLK,
            EntryKind::Fifo => S_IFIFO,
            EntryKind::Socket => S_IFSOCK,
            EntryKind::HardLink(_) => unreachable!("hard links make no node"),
        };
        let mut xattrs = Vec::new();
        if self.xattrs {
            for (name, value) in &entry.xattrs {
                let Some((index, suffix)) = fmt::split_xattr_name(name) else {
                    self.warnings.push(format!(
                        "{}: xattr {} has no EROFS prefix; left out",
                        sealfs_text::escape_path(&self.display(&entry.path)),
                        sealfs_text::escape(name)
                    ));
                    continue;
                };
                if value.len() > fmt::EROFS_XATTR_VALUE_MAX {
                    return Err(EntryError::new(
                        &entry.path,
                        format!(
                            "xattr {} has a {}-byte value; EROFS stores at most {} bytes",
                            sealfs_text::escape(name),
                            value.len(),
                            fmt::EROFS_XATTR_VALUE_MAX
                        ),
                    ));
                }
                xattrs.push(Xattr {
                    index,
                    suffix: suffix.to_vec(),
                    value: value.clone(),
                });
            }
            xattrs.sort();
            xattrs.dedup_by(|a, b| a.index == b.index && a.suffix == b.suffix);
        }
        Ok(Node {
            kind,
            mode: ftype | (entry.mode & 0o7777) as u16,
            uid: entry.uid,
            gid: entry.gid,
            mtime: entry.mtime,
            mtime_nsec: entry.mtime_nsec,
            xattrs,
            layer: self.layer,
        })
    }

    /// The path messages give for `rel`.
    fn display(&self, rel: &[u8]) -> PathBuf {
        display(&self.base, rel)
    }

    /// Numbers the tree (breadth first, names sorted, the root first) and applies the options
    /// that change entries: `timestamp`, `clamp_mtime`, owners, exclusions.
    pub(crate) fn finish(mut self, opts: &BuildOptions) -> Result<Tree> {
        // At most one inode per node, and the two a build may add (the packed inode, the
        // metabox inode).
        let mut tree = Tree::new(
            std::mem::take(&mut self.base),
            std::mem::take(&mut self.warnings),
            self.nodes.len() + 2,
        );
        let mut ids: Vec<InodeId> = vec![InodeId::MAX; self.nodes.len()];
        tree.inodes.push(self.take(0, Origin::Root, opts));
        ids[0] = 0;
        // (directory inode, its node, its path relative to the root)
        let mut level: Vec<(InodeId, NodeId, Vec<u8>)> = vec![(0, 0, Vec::new())];
        while !level.is_empty() {
            let mut next = Vec::new();
            for (dir, node, rel) in level {
                let kids = match &mut self.nodes[node as usize].kind {
                    NodeKind::Dir(c) => std::mem::take(c),
                    _ => unreachable!("levels hold directories"),
                };
                let mut entries = tree.begin_entries();
                for (name, child) in kids {
                    let mut child_rel = Vec::with_capacity(rel.len() + 1 + name.len());
                    if !rel.is_empty() {
                        child_rel.extend_from_slice(&rel);
                        child_rel.push(b'/');
                    }
                    child_rel.extend_from_slice(&name);
                    if is_excluded(opts, &child_rel) {
                        continue;
                    }
                    if name.len() > fmt::EROFS_NAME_LEN {
                        return Err(BuildError::Unsupported {
                            path: display(&tree.base, &child_rel),
                            what: "name longer than 255 bytes".into(),
                        });
                    }
                    let seen = ids[child as usize];
                    let push = |tree: &mut Tree, entries: &mut Entries, id| {
                        tree.push_entry(entries, &name, id)
                            .ok_or_else(|| BuildError::Unsupported {
                                path: display(&tree.base, &rel),
                                what: "a directory whose names take 4 GiB or more".into(),
                            })
                    };
                    if seen != InodeId::MAX {
                        push(&mut tree, &mut entries, seen)?;
                        continue;
                    }
                    let id = tree.inodes.len();
                    ids[child as usize] = id;
                    let origin = Origin::Entry {
                        dir: dir as u32,
                        index: entries.len() as u32,
                    };
                    let inode = self.take(child, origin, opts);
                    if inode.is_dir() {
                        next.push((id, child, child_rel));
                    }
                    tree.inodes.push(inode);
                    push(&mut tree, &mut entries, id)?;
                }
                if let Kind::Dir { entries: e } = &mut tree.inodes[dir].kind {
                    *e = entries;
                }
            }
            level = next;
        }
        // Fewer when some nodes were left out or removed.
        tree.inodes.shrink_to(tree.inodes.len() + 2);
        tree.shrink_entries();
        count_links(&mut tree);
        Ok(tree)
    }

    /// Turns node `id` (named at `origin`) into an inode, the options applied; its directory
    /// entries are filled by [`Sink::finish`].
    fn take(&mut self, id: NodeId, origin: Origin, opts: &BuildOptions) -> Inode {
        let node = &mut self.nodes[id as usize];
        let kind = match std::mem::replace(&mut node.kind, NodeKind::Special) {
            NodeKind::Dir(c) => {
                // Put back: the caller takes the children.
                node.kind = NodeKind::Dir(c);
                Kind::Dir {
                    entries: Entries::default(),
                }
            }
            NodeKind::File(f) => Kind::File(f),
            NodeKind::Symlink(t) => Kind::Symlink(t),
            NodeKind::Device(d) => Kind::Device(d),
            NodeKind::Special => Kind::Special,
        };
        let (mut mtime, mut mtime_nsec) = (node.mtime, node.mtime_nsec);
        if let Some(t) = opts.timestamp {
            (mtime, mtime_nsec) = (t, 0);
        } else if let Some(t) = opts.clamp_mtime {
            if mtime > t || (mtime == t && mtime_nsec > 0) {
                (mtime, mtime_nsec) = (t, 0);
            }
        }
        // Offsets wrap in 32 bits, as mkfs.erofs's do.
        let uid = opts
            .force_uid
            .unwrap_or(node.uid)
            .wrapping_add(opts.uid_offset as u32);
        let gid = opts
            .force_gid
            .unwrap_or(node.gid)
            .wrapping_add(opts.gid_offset as u32);
        Inode {
            kind,
            mode: node.mode,
            uid,
            gid,
            mtime,
            mtime_nsec,
            nlink: 0,
            xattrs: std::mem::take(&mut node.xattrs).into_boxed_slice(),
            origin,
        }
    }
}

/// Copies `from`'s metadata (not its kind) onto `to`.
fn set_meta(to: &mut Node, from: Node) {
    to.mode = from.mode;
    to.uid = from.uid;
    to.gid = from.gid;
    to.mtime = from.mtime;
    to.mtime_nsec = from.mtime_nsec;
    to.xattrs = from.xattrs;
    to.layer = from.layer;
}

/// The path messages give for `rel` (relative to the root) of a tree from `base`.
fn display(base: &Path, rel: &[u8]) -> PathBuf {
    if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(Path::new(std::ffi::OsStr::from_bytes(rel)))
    }
}

fn split_last(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

/// Checks that `path` is relative and normal: names separated by single slashes, none empty,
/// `.` or `..`, no NUL.
fn check_path(path: &[u8]) -> std::result::Result<(), EntryError> {
    if path.is_empty() {
        return Ok(());
    }
    if path.contains(&0) {
        return Err(EntryError::new(path, "NUL in path"));
    }
    for name in path.split(|&b| b == b'/') {
        if name.is_empty() || name == b"." || name == b".." {
            return Err(EntryError::new(
                path,
                "not a normal relative path (empty, '.' or '..' component, or a leading '/')",
            ));
        }
    }
    Ok(())
}

/// Whether the build leaves out `rel` (relative to the root, no leading `/`) and everything below
/// it: `rel` or a directory above it is an excluded path or matches an excluded pattern.
pub(crate) fn is_excluded(opts: &BuildOptions, rel: &[u8]) -> bool {
    if opts.exclude_paths.is_empty() && opts.exclude_regexes.is_empty() {
        return false;
    }
    let path = Path::new(std::ffi::OsStr::from_bytes(rel));
    opts.exclude_paths.iter().any(|p| p == path)
        || opts.exclude_regexes.iter().any(|re| re.is_match(rel))
}

/// Link counts as the image has them: a directory has 2 + its subdirectories, anything else one
/// per name.
fn count_links(tree: &mut Tree) {
    let mut nlink = vec![0u32; tree.inodes.len()];
    for inode in &tree.inodes {
        if let Kind::Dir { entries, .. } = &inode.kind {
            for (_, child) in tree.entries(entries) {
                nlink[child] += 1;
            }
        }
    }
    for (id, inode) in tree.inodes.iter().enumerate() {
        if let Kind::Dir { entries, .. } = &inode.kind {
            nlink[id] = 2 + tree
                .entries(entries)
                .filter(|&(_, c)| tree.inodes[c].is_dir())
                .count() as u32;
        }
    }
    for (inode, n) in tree.inodes.iter_mut().zip(nlink) {
        inode.nlink = n;
    }
}

/// The data handle of inodes no source gave (the packed inode, the metabox inode).
pub(crate) const NO_DATA: DataId = DataId(u64::MAX);

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: EntryKind) -> Entry {
        Entry {
            path: path.as_bytes().to_vec(),
            kind,
            mode: 0o644,
            uid: 1,
            gid: 2,
            mtime: 100,
            mtime_nsec: 0,
            xattrs: Vec::new(),
        }
    }

    fn file(path: &str, data: u64) -> Entry {
        entry(
            path,
            EntryKind::File {
                size: 1,
                data: DataId(data),
                data_ranges: None,
            },
        )
    }

    fn build(entries: &[Entry]) -> std::result::Result<Tree, EntryError> {
        let opts = BuildOptions::default();
        let mut sink = Sink::new(Path::new(""), &opts);
        for e in entries {
            sink.add(e.clone())?;
        }
        Ok(sink.finish(&opts).unwrap())
    }

    /// (path, mode, data handle or nlink) of every inode, in id order.
    fn shape(tree: &Tree) -> Vec<(String, u16, u64)> {
        tree.inodes
            .iter()
            .map(|i| {
                let d = match &i.kind {
                    Kind::File(f) => f.data.0,
                    _ => i.nlink as u64,
                };
                (tree.path(i).display().to_string(), i.mode, d)
            })
            .collect()
    }

    #[test]
    fn the_order_of_entries_does_not_matter() {
        let mut entries = vec![
            entry("", EntryKind::Dir),
            entry("b", EntryKind::Dir),
            file("b/z", 1),
            file("a", 2),
            entry("b/c", EntryKind::Dir),
            file("b/c/x", 3),
            entry("b/link", EntryKind::HardLink(b"b/c/x".to_vec())),
            entry("s", EntryKind::Symlink(b"b".to_vec())),
        ];
        let first = shape(&build(&entries).unwrap());
        // Breadth first, names sorted; the file with two names is numbered at its first name in
        // that order (b/link), not where its entry came.
        let paths: Vec<&str> = first.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(paths, ["", "a", "b", "s", "b/c", "b/link", "b/z"]);
        assert_eq!(first[5].2, 3, "b/link is the file b/c/x");
        entries.swap(1, 7);
        entries.swap(2, 4);
        let link = entries.remove(6);
        entries.push(link);
        assert_eq!(shape(&build(&entries).unwrap()), first);
    }

    #[test]
    fn paths_are_rebuilt_from_first_names_and_ranked_as_paths_compare() {
        let tree = build(&[
            file("a/b", 1),
            file("a-b", 2),
            file("a/c/d", 3),
            file("b", 4),
            entry("a/c/e", EntryKind::HardLink(b"b".to_vec())),
            entry("a0", EntryKind::HardLink(b"a/c/d".to_vec())),
        ])
        .unwrap();
        let paths: Vec<PathBuf> = tree.inodes.iter().map(|i| tree.path(i)).collect();
        // A file with several names is at its first breadth first: "a0" before "a/c/d", "b"
        // before "a/c/e".
        let names: Vec<&str> = paths.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(names, ["", "a", "a-b", "a0", "b", "a/b", "a/c"]);
        // Depth first is the order of the paths compared component by component ("a/b" before
        // "a-b", though '/' sorts after '-' as bytes).
        let ranks = tree.depth_first_ranks();
        let mut by_rank: Vec<usize> = (0..tree.inodes.len()).collect();
        by_rank.sort_by_key(|&id| ranks[id]);
        let mut by_path: Vec<usize> = (0..tree.inodes.len()).collect();
        by_path.sort_by(|&a, &b| paths[a].cmp(&paths[b]));
        assert_eq!(by_rank, by_path);
        assert_eq!(by_rank, [0, 1, 5, 6, 2, 3, 4]);
    }

    #[test]
    fn missing_parents_are_made_and_later_entries_win() {
        let tree = build(&[
            file("d/e/f", 1),
            file("d/e/f", 2),
            entry("d", EntryKind::Dir),
            entry("d", EntryKind::Dir),
        ])
        .unwrap();
        let s = shape(&tree);
        assert_eq!(s[0], (String::new(), IMPLICIT_DIR_MODE, 3));
        assert_eq!(s[1], ("d".into(), S_IFDIR | 0o644, 3));
        assert_eq!(s[2], ("d/e".into(), IMPLICIT_DIR_MODE, 2));
        assert_eq!(
            s[3],
            ("d/e/f".into(), S_IFREG | 0o644, 2),
            "the last entry wins"
        );
        assert_eq!(tree.inodes[2].mtime, 0, "a directory made for its contents");
        assert_eq!((tree.inodes[1].uid, tree.inodes[1].mtime), (1, 100));
    }

    #[test]
    fn a_replaced_file_stays_under_its_other_names() {
        let tree = build(&[
            file("a", 1),
            entry("b", EntryKind::HardLink(b"a".to_vec())),
            file("a", 2),
        ])
        .unwrap();
        let s = shape(&tree);
        assert_eq!((s[1].0.as_str(), s[1].2), ("a", 2));
        assert_eq!((s[2].0.as_str(), s[2].2), ("b", 1));
        assert_eq!(tree.inodes[2].nlink, 1);
    }

    #[test]
    fn conflicts_within_a_layer_are_errors() {
        let e = build(&[entry("d", EntryKind::Dir), file("d", 1)]).unwrap_err();
        assert_eq!(e.path, b"d");
        assert!(e.what.contains("over a directory"), "{e}");
        let e = build(&[file("f", 1), entry("f", EntryKind::Dir)]).unwrap_err();
        assert!(e.what.contains("over a non-directory"), "{e}");
        let e = build(&[file("f", 1), file("f/g", 2)]).unwrap_err();
        assert_eq!(e.path, b"f");
        let e = build(&[entry("l", EntryKind::HardLink(b"nothing".to_vec()))]).unwrap_err();
        assert!(e.what.contains("not in the tree"), "{e}");
        let e = build(&[
            entry("d", EntryKind::Dir),
            entry("l", EntryKind::HardLink(b"d".to_vec())),
        ])
        .unwrap_err();
        assert!(e.what.contains("a directory"), "{e}");
        for bad in ["/a", "a/../b", "a//b", "./a", "a/"] {
            assert!(build(&[file(bad, 1)]).is_err(), "{bad}");
        }
    }

    #[test]
    fn layers_remove_replace_and_make_opaque() {
        let opts = BuildOptions::default();
        let mut sink = Sink::new(Path::new(""), &opts);
        for e in [
            file("d/old", 1),
            file("d/sub/deep", 2),
            file("gone", 3),
            entry("f", EntryKind::Dir),
        ] {
            sink.add(e).unwrap();
        }
        sink.next_layer();
        sink.add(file("d/new", 4)).unwrap();
        sink.make_opaque(b"d").unwrap();
        assert!(sink.remove(b"gone").unwrap());
        assert!(!sink.remove(b"never").unwrap());
        assert!(
            !sink.remove(b"d/new").unwrap(),
            "this layer's own entries stay"
        );
        sink.add(file("f", 5)).unwrap(); // a file over a lower layer's directory
        let paths: Vec<String> = shape(&sink.finish(&opts).unwrap())
            .into_iter()
            .map(|s| s.0)
            .collect();
        assert_eq!(paths, ["", "d", "f", "d/new"]);
    }
}
