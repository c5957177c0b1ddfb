//! `sealfs extract`: write the image's tree (or a subtree) into a directory, everything the kernel
//! shows of it: data with holes kept, directories, symlinks, hard links, devices, FIFOs and sockets,
//! modes (setuid, setgid, sticky), owners, mtimes with nanoseconds and xattrs (POSIX ACLs included).
//!
//! # Never outside DEST
//!
//! The image is untrusted input. Every file is created with a `*at()` call relative to a directory
//! descriptor this command opened itself, `O_DIRECTORY | O_NOFOLLOW`, one component at a time from
//! DEST; nothing is ever opened by a path string under DEST, and no symlink is followed (files are
//! opened `O_NOFOLLOW`, xattrs of symlinks and special files are set through `/proc/self/fd/N/name`
//! with `lsetxattr`). Dirents named "." and ".." are skipped; other names that are empty, "." or
//! "..", or contain '/' or NUL are refused, as are directories reached twice (cycles). So a name or
//! a symlink in the image, or a symlink already in DEST (with `--overwrite` it is replaced, not
//! followed), cannot make a write land outside DEST.
//!
//! # Phases
//!
//! 0. Plan: walk the image (nothing is written yet), check every name, find hard links.
//! 1. Tree (serial, depth first with a stack of open directories): directories (mode 0700 for now),
//!    symlinks and special files, with their metadata. Directory descriptors stay open for the
//!    later phases, as many as the descriptor limit allows (the rest are reopened from DEST).
//! 2. Data (parallel, rayon): each regular file is created (`O_EXCL`, with its permission bits),
//!    its mapped extents are read and written at their offsets, holes are skipped (the file is sized
//!    afterwards, so they stay holes; in a file the image stores with holes, whole zero blocks stay
//!    holes too); then owner, mode, xattrs (after chown, which clears file capabilities) and times.
//!    The chown is left out when the new file already has the owner the image wants (created by
//!    this process in a directory of its group), the chmod when it has the mode (no setuid, setgid
//!    or sticky bit, nothing taken by the umask, no default ACL on DEST, no `--overwrite`).
//!    Hard links follow, in order, once their first names exist.
//! 3. Directories, bottom-up: owner, mode, xattrs (a default ACL set last cannot leak into children)
//!    and times, after their contents.
//!
//! The result does not depend on the thread count. A file whose data cannot be read (corruption,
//! verification failure) is removed, and its other names are not made; both are reported: no wrong
//! bytes are left.

use super::{fault, is_root, join, resolve, show, EXIT_IMAGE};
use crate::open::ImageArgs;
use crate::progress::TermProgress;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rayon::prelude::*;
use sealfs_builder::Progress;
use sealfs_reader::{DirEntry, ExtentKind, FileType, Follow, Image, Inode};
use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Bytes read from the image and written per step.
const CHUNK: usize = 1 << 20;
/// Inodes whose metadata blocks are read together (see [`Image::prefetch_inodes`]).
const INODE_BATCH: usize = 32;
/// Deepest directory nesting extracted (each level holds a descriptor while its subtree is created).
const MAX_DEPTH: u32 = 1024;
/// Warnings printed before the rest are only counted.
const MAX_WARNINGS: usize = 20;

/// Arguments of `sealfs extract`.
#[derive(Args)]
pub struct ExtractArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Directory to extract into: created if missing, must be empty unless --overwrite. When a
    /// directory is extracted, DEST itself takes its mode, owner, times and xattrs.
    dest: PathBuf,
    /// Path in the image to extract (default: the whole tree). A directory's contents go into DEST;
    /// anything else becomes DEST/NAME.
    path: Option<OsString>,
    /// Extract into a non-empty DEST: existing entries are replaced (symlinks in DEST are removed,
    /// never followed), existing directories are merged.
    #[arg(long, visible_alias = "force")]
    overwrite: bool,
    /// Do not extract extended attributes.
    #[arg(long)]
    no_xattrs: bool,
    /// Worker threads writing file data (default: one per CPU). The result does not depend on it.
    #[arg(short = 'j', long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Print nothing but errors (no progress bar, warnings or summary).
    #[arg(short, long)]
    quiet: bool,
}

// ---------------------------------------------------------------------------------------------
// System calls relative to directory descriptors
// ---------------------------------------------------------------------------------------------

mod sys {
    use std::ffi::{CStr, CString};
    use std::io;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

    fn check(rc: libc::c_int) -> io::Result<()> {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// `openat(dir, name, flags | O_CLOEXEC, mode)`.
    pub fn openat(dir: BorrowedFd, name: &CStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
        // SAFETY: valid descriptor and NUL-terminated name; the returned descriptor is owned here.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by openat and is not owned by anything else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// A directory below `dir`, not following a symlink.
    pub fn open_dir(dir: BorrowedFd, name: &CStr) -> io::Result<OwnedFd> {
        openat(
            dir,
            name,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
            0,
        )
    }

    pub fn mkdirat(dir: BorrowedFd, name: &CStr, mode: u32) -> io::Result<()> {
        // SAFETY: valid descriptor and NUL-terminated name.
        check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) })
    }

    pub fn unlinkat(dir: BorrowedFd, name: &CStr) -> io::Result<()> {
        // SAFETY: valid descriptor and NUL-terminated name.
        check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })
    }

    pub fn symlinkat(target: &CStr, dir: BorrowedFd, name: &CStr) -> io::Result<()> {
        // SAFETY: NUL-terminated strings and a valid descriptor.
        check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
    }

    pub fn mknodat(dir: BorrowedFd, name: &CStr, mode: u32, dev: u64) -> io::Result<()> {
        // SAFETY: valid descriptor and NUL-terminated name.
        check(unsafe {
            libc::mknodat(
                dir.as_raw_fd(),
                name.as_ptr(),
                mode as libc::mode_t,
                dev as libc::dev_t,
            )
        })
    }

    /// A new name for `old_dir/old_name` (a symlink is linked itself, not followed).
    pub fn linkat(
        old_dir: BorrowedFd,
        old_name: &CStr,
        dir: BorrowedFd,
        name: &CStr,
    ) -> io::Result<()> {
        // SAFETY: valid descriptors and NUL-terminated names.
        check(unsafe {
            libc::linkat(
                old_dir.as_raw_fd(),
                old_name.as_ptr(),
                dir.as_raw_fd(),
                name.as_ptr(),
                0,
            )
        })
    }

    /// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`.
    pub fn lchownat(dir: BorrowedFd, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
        // SAFETY: valid descriptor and NUL-terminated name.
        check(unsafe {
            libc::fchownat(
                dir.as_raw_fd(),
                name.as_ptr(),
                uid,
                gid,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    /// `fchmodat(dir, name, mode, AT_SYMLINK_NOFOLLOW)` (never used on symlinks).
    pub fn lchmodat(dir: BorrowedFd, name: &CStr, mode: u32) -> io::Result<()> {
        // SAFETY: valid descriptor and NUL-terminated name.
        check(unsafe {
            libc::fchmodat(
                dir.as_raw_fd(),
                name.as_ptr(),
                mode as libc::mode_t,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    fn times(sec: i64, nsec: u32) -> [libc::timespec; 2] {
        let ts = libc::timespec {
            tv_sec: sec as libc::time_t,
            tv_nsec: nsec as _,
        };
        [ts, ts]
    }

    /// Sets atime and mtime of `dir/name` without following a symlink.
    pub fn lutimensat(dir: BorrowedFd, name: &CStr, sec: i64, nsec: u32) -> io::Result<()> {
        let t = times(sec, nsec);
        // SAFETY: valid descriptor, NUL-terminated name and a two-element timespec array.
        check(unsafe {
            libc::utimensat(
                dir.as_raw_fd(),
                name.as_ptr(),
                t.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        })
    }

    pub fn futimens(fd: BorrowedFd, sec: i64, nsec: u32) -> io::Result<()> {
        let t = times(sec, nsec);
        // SAFETY: valid descriptor and a two-element timespec array.
        check(unsafe { libc::futimens(fd.as_raw_fd(), t.as_ptr()) })
    }

    pub fn fchown(fd: BorrowedFd, uid: u32, gid: u32) -> io::Result<()> {
        // SAFETY: valid descriptor.
        check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) })
    }

    pub fn fchmod(fd: BorrowedFd, mode: u32) -> io::Result<()> {
        // SAFETY: valid descriptor.
        check(unsafe { libc::fchmod(fd.as_raw_fd(), mode as libc::mode_t) })
    }

    pub fn fsetxattr(fd: BorrowedFd, name: &CStr, value: &[u8]) -> io::Result<()> {
        // SAFETY: valid descriptor, NUL-terminated name and a buffer of the given length.
        check(unsafe {
            libc::fsetxattr(
                fd.as_raw_fd(),
                name.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        })
    }

    /// Sets an xattr of `dir/name` itself (a symlink or special file, which cannot be opened for
    /// this): `lsetxattr("/proc/self/fd/DIR/NAME")`. The magic link stands for the directory this
    /// process opened, so no path under DEST is resolved again.
    pub fn lsetxattrat(dir: BorrowedFd, name: &[u8], xname: &CStr, value: &[u8]) -> io::Result<()> {
        let mut path = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
        path.extend_from_slice(name);
        let path = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: NUL-terminated path and name, and a buffer of the given length.
        check(unsafe {
            libc::lsetxattr(
                path.as_ptr(),
                xname.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        })
    }

    /// Whether `fd` has the xattr `name` (an error other than "no such attribute" or "not
    /// supported" counts as yes: the caller then takes the careful path).
    pub fn has_xattr(fd: BorrowedFd, name: &CStr) -> bool {
        // SAFETY: valid descriptor and NUL-terminated name; a zero-size query writes nothing.
        let rc = unsafe { libc::fgetxattr(fd.as_raw_fd(), name.as_ptr(), std::ptr::null_mut(), 0) };
        rc >= 0
            || !matches!(
                io::Error::last_os_error().raw_os_error(),
                Some(libc::ENODATA | libc::EOPNOTSUPP)
            )
    }

    /// The effective user and group of this process.
    pub fn effective_owner() -> (u32, u32) {
        // SAFETY: geteuid and getegid cannot fail.
        unsafe { (libc::geteuid(), libc::getegid()) }
    }

    /// The process's umask. Reading it means setting it, so this is called before any other thread
    /// creates files.
    pub fn umask() -> u32 {
        // SAFETY: umask cannot fail; the old mask is put back at once.
        unsafe {
            let old = libc::umask(0o077);
            libc::umask(old);
            old as u32
        }
    }

    /// Raises the soft limit of open descriptors to the hard limit; returns the soft limit.
    pub fn raise_nofile() -> u64 {
        // SAFETY: rlimit is plain data filled by getrlimit.
        let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to an rlimit.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
            return 1024;
        }
        if rl.rlim_cur < rl.rlim_max {
            let want = libc::rlimit {
                rlim_cur: rl.rlim_max,
                rlim_max: rl.rlim_max,
            };
            // SAFETY: valid pointer to an rlimit.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
                return want.rlim_cur;
            }
        }
        rl.rlim_cur
    }
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a name"))
}

// ---------------------------------------------------------------------------------------------
// Phase 0: the plan
// ---------------------------------------------------------------------------------------------

/// One path to create.
struct Node {
    /// The directory it goes into; `None`: DEST itself.
    parent: Option<usize>,
    /// Its name there; empty for the extraction root directory, which is DEST itself.
    name: Vec<u8>,
    /// Path in the image, for messages.
    path: Vec<u8>,
    inode: Inode,
    /// An earlier node with the same inode (hard link).
    link_of: Option<usize>,
    depth: u32,
}

impl Node {
    fn is_dest(&self) -> bool {
        self.parent.is_none() && self.name.is_empty()
    }
}

/// Why a dirent name is unsafe to create, if it is.
fn unsafe_name(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("an empty name")
    } else if name == b"." || name == b".." {
        Some("a name that means a directory itself or its parent")
    } else if name.contains(&b'/') {
        Some("a name containing '/'")
    } else if name.contains(&0) {
        Some("a name containing a NUL byte")
    } else {
        None
    }
}

/// What [`read_tree`] found: each directory's entries, and the inodes they name (`None`: it could
/// not be read; reading it again gives the error).
struct Contents {
    dirs: HashMap<u64, sealfs_reader::Result<Vec<DirEntry>>>,
    inodes: HashMap<u64, Option<Inode>>,
}

impl Contents {
    /// The entries of directory `dir` (read now if [`read_tree`] did not); each directory is asked
    /// for once.
    fn entries(&mut self, img: &Image, dir: &Inode) -> sealfs_reader::Result<Vec<DirEntry>> {
        self.dirs
            .remove(&dir.nid())
            .unwrap_or_else(|| img.read_dir_all(dir))
    }

    /// The inode `nid` names.
    fn inode(&self, img: &Image, nid: u64) -> sealfs_reader::Result<Inode> {
        match self.inodes.get(&nid) {
            Some(Some(inode)) => Ok(inode.clone()),
            _ => img.inode(nid),
        }
    }
}

fn is_dot(e: &DirEntry) -> bool {
    e.name == b"." || e.name == b".."
}

/// Reads the directories below `top` (to `max_depth`) and the inodes their entries name, breadth
/// first: the order the builder stores inodes in, so that the inodes of one level are read in order
/// of their position, [`INODE_BATCH`] at a time with their metadata blocks prefetched (read and
/// verified together), in parallel. Each directory is read once, however often it is named. Nothing
/// is checked here; [`plan`] does that.
fn read_tree(img: &Image, top: &Inode, max_depth: u32) -> Contents {
    let mut c = Contents {
        dirs: HashMap::new(),
        inodes: HashMap::new(),
    };
    let mut level = vec![top.clone()];
    let mut seen = HashSet::from([top.nid()]);
    for depth in 0..=max_depth {
        if level.is_empty() {
            break;
        }
        let listed: Vec<(u64, sealfs_reader::Result<Vec<DirEntry>>)> = level
            .par_iter()
            .map(|d| (d.nid(), img.read_dir_all(d)))
            .collect();
        level.clear();
        if depth < max_depth {
            let mut nids: Vec<u64> = listed
                .iter()
                .filter_map(|(_, r)| r.as_ref().ok())
                .flatten()
                .filter(|e| !is_dot(e) && !c.inodes.contains_key(&e.nid))
                .map(|e| e.nid)
                .collect();
            nids.sort_unstable();
            nids.dedup();
            let decoded: Vec<(u64, Option<Inode>)> = nids
                .par_chunks(INODE_BATCH)
                .flat_map_iter(|chunk| {
                    img.prefetch_inodes(chunk);
                    chunk
                        .iter()
                        .map(|&nid| (nid, img.inode(nid).ok()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (nid, inode) in decoded {
                if let Some(i) = inode.as_ref().filter(|i| i.is_dir()) {
                    if seen.insert(nid) {
                        level.push(i.clone());
                    }
                }
                c.inodes.insert(nid, inode);
            }
        }
        c.dirs.extend(listed);
    }
    c
}

/// Walks the image below `top` (depth first, directory order) and checks every name: unsafe names,
/// a name twice in one directory, "." or ".." naming another inode, a directory reached twice, too
/// deep a nesting. Problems skip the entry (and its subtree) and are pushed to `errors`.
fn plan(
    img: &Image,
    top: Inode,
    top_path: &[u8],
    max_depth: u32,
    errors: &mut Vec<anyhow::Error>,
) -> Result<Vec<Node>> {
    let mut nodes = Vec::new();
    if !top.is_dir() {
        let name = top_path
            .split(|&b| b == b'/')
            .rfind(|c| !c.is_empty())
            .unwrap_or(b"")
            .to_vec();
        if let Some(why) = unsafe_name(&name) {
            bail!("{}: cannot extract {why}", show(top_path));
        }
        nodes.push(Node {
            parent: None,
            name,
            path: top_path.to_vec(),
            inode: top,
            link_of: None,
            depth: 1,
        });
        return Ok(nodes);
    }
    let mut contents = read_tree(img, &top, max_depth);
    let mut seen_dirs: HashMap<u64, usize> = HashMap::from([(top.nid(), 0)]);
    let mut first_link: HashMap<u64, usize> = HashMap::new();
    let entries = contents
        .entries(img, &top)
        .with_context(|| show(top_path))?
        .into_iter();
    nodes.push(Node {
        parent: None,
        name: Vec::new(),
        path: top_path.to_vec(),
        inode: top,
        link_of: None,
        depth: 0,
    });
    // What ".." must name in each directory: its parent; for the image root, the root itself; for
    // the top of a subtree, unknown (not checked).
    let top_parent = (nodes[0].inode.nid() == img.root_nid()).then_some(img.root_nid());
    let mut stack = vec![(0usize, top_parent, entries, HashSet::<Vec<u8>>::new())];
    while let Some((di, parent_nid, it, names)) = stack.last_mut() {
        let (di, parent_nid) = (*di, *parent_nid);
        let Some(e) = it.next() else {
            stack.pop();
            continue;
        };
        let path = join(&nodes[di].path, &e.name);
        if !names.insert(e.name.clone()) {
            errors.push(fault(format!(
                "{}: skipped: a second entry of this name in its directory (nid {})",
                show(&path),
                e.nid
            )));
            continue;
        }
        if e.name == b"." || e.name == b".." {
            // Never created; but one that does not name its directory (or the parent) is a sign of a
            // forged image, and is reported.
            let want = if e.name == b"." {
                Some(nodes[di].inode.nid())
            } else {
                parent_nid
            };
            if want.is_some_and(|w| w != e.nid) {
                errors.push(fault(format!(
                    "{}: the entry names nid {}, not nid {}: ignored",
                    show(&path),
                    e.nid,
                    want.unwrap_or_default()
                )));
            }
            continue;
        }
        if let Some(why) = unsafe_name(&e.name) {
            errors.push(fault(format!(
                "{}: skipped: the image holds {why} (nid {})",
                show(&path),
                e.nid
            )));
            continue;
        }
        let depth = nodes[di].depth + 1;
        if depth > max_depth {
            errors.push(fault(format!(
                "{}: skipped: nested deeper than {max_depth} directories",
                show(&path)
            )));
            continue;
        }
        let inode = match contents.inode(img, e.nid).with_context(|| show(&path)) {
            Ok(i) => i,
            Err(err) => {
                errors.push(err);
                continue;
            }
        };
        let idx = nodes.len();
        if inode.is_dir() {
            if let Some(&other) = seen_dirs.get(&e.nid) {
                errors.push(fault(format!(
                    "{}: skipped: directory nid {} was already reached as {} (a directory cycle or a directory with two names)",
                    show(&path),
                    e.nid,
                    show(&nodes[other].path)
                )));
                continue;
            }
            seen_dirs.insert(e.nid, idx);
            let entries = match contents.entries(img, &inode).with_context(|| show(&path)) {
                Ok(v) => v,
                Err(err) => {
                    errors.push(err.context("its contents are not extracted"));
                    Vec::new()
                }
            };
            nodes.push(Node {
                parent: Some(di),
                name: e.name,
                path,
                inode,
                link_of: None,
                depth,
            });
            stack.push((
                idx,
                Some(nodes[di].inode.nid()),
                entries.into_iter(),
                HashSet::new(),
            ));
        } else {
            let link_of = first_link.get(&e.nid).copied();
            if link_of.is_none() {
                first_link.insert(e.nid, idx);
            }
            nodes.push(Node {
                parent: Some(di),
                name: e.name,
                path,
                inode,
                link_of,
                depth,
            });
        }
    }
    Ok(nodes)
}

// ---------------------------------------------------------------------------------------------
// Shared state of the phases
// ---------------------------------------------------------------------------------------------

struct Ctx<'a> {
    img: &'a Image,
    nodes: Vec<Node>,
    dest: OwnedFd,
    dest_path: PathBuf,
    overwrite: bool,
    xattrs: bool,
    root: bool,
    /// This process's effective user and group: the owner of every file it creates in a directory
    /// of its own group.
    owner: (u32, u32),
    /// The process's umask, which the permission bits given at creation pass through.
    umask: u32,
    /// Files need a chmod even when created with their final permission bits: DEST has a default ACL
    /// (which replaces the umask for what is created below it), or `--overwrite` merges into
    /// directories that might.
    chmod_always: bool,
    errors: Mutex<Vec<anyhow::Error>>,
    warnings: Mutex<Vec<String>>,
    skipped_xattrs: AtomicU64,
    bytes: AtomicU64,
}

impl Ctx<'_> {
    fn error(&self, e: anyhow::Error) {
        self.errors.lock().unwrap().push(e);
    }

    fn warn(&self, w: String) {
        self.warnings.lock().unwrap().push(w);
    }

    /// Where node `i` lands, for messages: `DEST/relative/path`.
    fn dest_name(&self, i: usize) -> String {
        let mut comps = Vec::new();
        let mut cur = Some(i);
        while let Some(c) = cur {
            let n = &self.nodes[c];
            if !n.name.is_empty() {
                comps.push(show(&n.name));
            }
            cur = n.parent;
        }
        comps.push(self.dest_path.display().to_string());
        comps.reverse();
        comps.join("/")
    }

    /// A local (DEST-side) error about node `i`.
    fn local(&self, i: usize, what: &str, e: io::Error) {
        let msg = format!("{}: {what}", self.dest_name(i));
        self.error(anyhow::Error::new(e).context(msg));
    }

    /// Opens the directory node `dir` (DEST for `None`) by walking down from DEST one component at a
    /// time with `O_NOFOLLOW`; `final_flags` are the open flags of the last component.
    fn open_beneath(&self, dir: Option<usize>, final_flags: i32) -> io::Result<OwnedFd> {
        let mut comps = Vec::new();
        let mut cur = dir;
        while let Some(c) = cur {
            let n = &self.nodes[c];
            if !n.is_dest() {
                comps.push(c);
            }
            cur = n.parent;
        }
        let mut fd = self.dest.try_clone()?;
        for (k, &c) in comps.iter().rev().enumerate() {
            let flags = if k + 1 == comps.len() {
                final_flags
            } else {
                libc::O_PATH
            };
            let name = cstr(&self.nodes[c].name)?;
            fd = sys::openat(
                fd.as_fd(),
                &name,
                flags | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )?;
        }
        Ok(fd)
    }

    /// Whether an xattr of this name is to be set (user.* and POSIX ACLs always, trusted.* and
    /// security.* as root).
    fn xattr_wanted(&self, name: &[u8]) -> bool {
        if name.starts_with(b"user.") || name.starts_with(b"system.posix_acl_") {
            return true;
        }
        if self.root {
            return true;
        }
        self.skipped_xattrs.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Sets the xattrs of node `i` with `set`; failures are warnings.
    fn set_xattrs(&self, i: usize, set: &dyn Fn(&CStr, &[u8]) -> io::Result<()>) {
        if !self.xattrs {
            return;
        }
        let n = &self.nodes[i];
        let list = match self.img.xattrs(&n.inode).with_context(|| show(&n.path)) {
            Ok(l) => l,
            Err(e) => return self.error(e.context("xattrs")),
        };
        for (name, value) in list {
            if !self.xattr_wanted(&name) {
                continue;
            }
            let r = cstr(&name).and_then(|c| set(&c, &value));
            if let Err(e) = r {
                self.warn(format!(
                    "{}: xattr {} not set: {e}",
                    self.dest_name(i),
                    show(&name)
                ));
            }
        }
    }

    /// Owner, mode, xattrs and times of node `i` through its open descriptor (files, directories).
    fn finish_fd(&self, i: usize, fd: BorrowedFd) {
        let st = self.nodes[i].inode.stat();
        if self.root {
            if let Err(e) = sys::fchown(fd, st.uid, st.gid) {
                self.local(i, "chown", e);
            }
        }
        if let Err(e) = sys::fchmod(fd, st.mode & 0o7777) {
            self.local(i, "chmod", e);
        }
        self.set_xattrs(i, &|n, v| sys::fsetxattr(fd, n, v));
        if let Err(e) = sys::futimens(fd, st.mtime, st.mtime_nsec) {
            self.local(i, "set times", e);
        }
    }

    /// Owner, mode, xattrs and times of the regular file node `i`, which phase 2 created with its
    /// permission bits (`mode & 0o777`, less the umask) in a directory of this process's group if
    /// `own_group`: the chown is skipped when the file has the owner the image wants, and the chmod
    /// when it has the mode.
    fn finish_file(&self, i: usize, fd: BorrowedFd, own_group: bool) {
        let st = self.nodes[i].inode.stat();
        if self.root && !(own_group && (st.uid, st.gid) == self.owner) {
            if let Err(e) = sys::fchown(fd, st.uid, st.gid) {
                self.local(i, "chown", e);
            }
        }
        let mode = st.mode & 0o7777;
        if self.chmod_always || mode & 0o7000 != 0 || mode & self.umask != 0 {
            if let Err(e) = sys::fchmod(fd, mode) {
                self.local(i, "chmod", e);
            }
        }
        self.set_xattrs(i, &|n, v| sys::fsetxattr(fd, n, v));
        if let Err(e) = sys::futimens(fd, st.mtime, st.mtime_nsec) {
            self.local(i, "set times", e);
        }
    }

    /// The same for a symlink or special file, by name in its directory.
    fn finish_at(&self, i: usize, dir: BorrowedFd, name: &CStr) {
        let n = &self.nodes[i];
        let st = n.inode.stat();
        if self.root {
            if let Err(e) = sys::lchownat(dir, name, st.uid, st.gid) {
                self.local(i, "chown", e);
            }
        }
        if !n.inode.is_symlink() {
            if let Err(e) = sys::lchmodat(dir, name, st.mode & 0o7777) {
                self.local(i, "chmod", e);
            }
        }
        self.set_xattrs(i, &|x, v| sys::lsetxattrat(dir, &n.name, x, v));
        if let Err(e) = sys::lutimensat(dir, name, st.mtime, st.mtime_nsec) {
            self.local(i, "set times", e);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Phase 1: the tree
// ---------------------------------------------------------------------------------------------

/// Runs `create`; if the name exists and `--overwrite` was given, removes it (never a directory)
/// and runs it again.
fn create_replacing<T>(
    ctx: &Ctx,
    dir: BorrowedFd,
    name: &CStr,
    create: &dyn Fn() -> io::Result<T>,
) -> io::Result<T> {
    match create() {
        Err(e) if errno(&e) == libc::EEXIST && ctx.overwrite => {
            match sys::unlinkat(dir, name) {
                Err(e) if matches!(errno(&e), libc::EISDIR | libc::EPERM) => {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        "exists as a directory (not replaced)",
                    ))
                }
                r => r?,
            }
            create()
        }
        r => r,
    }
}

/// Creates directory `name` in `dir` (mode 0700 until phase 3) and opens it. With `--overwrite` an
/// existing directory is reused, anything else there (a symlink included) is replaced.
fn make_dir(ctx: &Ctx, dir: BorrowedFd, name: &CStr) -> io::Result<OwnedFd> {
    match sys::mkdirat(dir, name, 0o700) {
        Ok(()) => {}
        Err(e) if errno(&e) == libc::EEXIST && ctx.overwrite => match sys::open_dir(dir, name) {
            Ok(fd) => return Ok(fd),
            Err(e) if matches!(errno(&e), libc::ENOTDIR | libc::ELOOP) => {
                sys::unlinkat(dir, name)?;
                sys::mkdirat(dir, name, 0o700)?;
            }
            Err(e) => return Err(e),
        },
        Err(e) => return Err(e),
    }
    sys::open_dir(dir, name)
}

/// Creates node `i` in `dir`. Returns the new directory's descriptor for directories; `Ok(None)`
/// for other types; `Err(())` if it was not created (already reported).
fn create_node(ctx: &Ctx, i: usize, dir: BorrowedFd) -> Result<Option<OwnedFd>, ()> {
    let n = &ctx.nodes[i];
    let name = match cstr(&n.name) {
        Ok(c) => c,
        Err(e) => {
            ctx.local(i, "name", e);
            return Err(());
        }
    };
    let fail = |what: &str, e: io::Error| {
        ctx.local(i, what, e);
        Err(())
    };
    if let Some(first) = n.link_of {
        // Another name of an inode created earlier: link it (a symlink is linked, not followed).
        let f = &ctx.nodes[first];
        let old_dir = match ctx.open_beneath(f.parent, libc::O_PATH) {
            Ok(d) => d,
            Err(e) => return fail("open the directory of the first name", e),
        };
        let old_name = cstr(&f.name).map_err(|_| ())?;
        return match create_replacing(ctx, dir, &name, &|| {
            sys::linkat(old_dir.as_fd(), &old_name, dir, &name)
        }) {
            Ok(()) => Ok(None),
            Err(e) => fail("hard link", e),
        };
    }
    let st = n.inode.stat();
    match n.inode.file_type() {
        FileType::Directory => match make_dir(ctx, dir, &name) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) => fail("mkdir", e),
        },
        FileType::Regular => unreachable!("regular files are created in phase 2"),
        FileType::Symlink => {
            let target = match ctx.img.readlink(&n.inode).with_context(|| show(&n.path)) {
                Ok(t) => t,
                Err(e) => {
                    ctx.error(e.context("readlink"));
                    return Err(());
                }
            };
            let target = match cstr(&target) {
                Ok(t) => t,
                Err(e) => return fail("symlink target", e),
            };
            match create_replacing(ctx, dir, &name, &|| sys::symlinkat(&target, dir, &name)) {
                Ok(()) => {
                    ctx.finish_at(i, dir, &name);
                    Ok(None)
                }
                Err(e) => fail("symlink", e),
            }
        }
        ft @ (FileType::CharDevice | FileType::BlockDevice | FileType::Fifo | FileType::Socket) => {
            let kind = match ft {
                FileType::CharDevice => libc::S_IFCHR,
                FileType::BlockDevice => libc::S_IFBLK,
                FileType::Fifo => libc::S_IFIFO,
                _ => libc::S_IFSOCK,
            };
            let dev = match ft {
                FileType::CharDevice | FileType::BlockDevice => st.rdev,
                _ => 0,
            };
            match create_replacing(ctx, dir, &name, &|| {
                sys::mknodat(dir, &name, kind | 0o600, dev)
            }) {
                Ok(()) => {
                    ctx.finish_at(i, dir, &name);
                    Ok(None)
                }
                Err(e) if errno(&e) == libc::EPERM && !ctx.root => {
                    ctx.warn(format!(
                        "{}: {} {}:{} not created: only root can make devices",
                        ctx.dest_name(i),
                        super::type_name(ft),
                        st.rdev_major,
                        st.rdev_minor
                    ));
                    Err(())
                }
                Err(e) => fail("mknod", e),
            }
        }
    }
}

/// What phase 1 made: the directories, symlinks and special files that exist (regular files are
/// created in phase 2, further names of an inode after it), and descriptors of the directories.
struct Tree {
    /// Which nodes exist.
    created: Vec<bool>,
    /// Open directories by node, as many as the descriptor limit allows (the others are reopened
    /// from DEST when needed). DEST itself is [`Ctx::dest`].
    fds: Vec<Option<OwnedFd>>,
    /// Directories whose group is this process's effective group: a file created in one belongs to
    /// this process's user and group (whether the directory is setgid or not).
    own_group: Vec<bool>,
}

/// A directory descriptor: one phase 1 kept, or one opened for the occasion.
enum DirFd<'a> {
    Kept(BorrowedFd<'a>),
    Opened(OwnedFd),
}

impl DirFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            DirFd::Kept(fd) => *fd,
            DirFd::Opened(fd) => fd.as_fd(),
        }
    }
}

impl Tree {
    /// The directory node `dir` (DEST for `None`): kept, or opened from DEST one component at a time.
    fn dir<'a>(&'a self, ctx: &'a Ctx, dir: Option<usize>, flags: i32) -> io::Result<DirFd<'a>> {
        match dir {
            None => Ok(DirFd::Kept(ctx.dest.as_fd())),
            Some(d) if ctx.nodes[d].is_dest() => Ok(DirFd::Kept(ctx.dest.as_fd())),
            Some(d) => match &self.fds[d] {
                Some(fd) => Ok(DirFd::Kept(fd.as_fd())),
                None => ctx.open_beneath(dir, flags).map(DirFd::Opened),
            },
        }
    }

    fn own_group(&self, ctx: &Ctx, dir: Option<usize>) -> bool {
        match dir {
            Some(d) => self.own_group[d],
            None => own_group(ctx, ctx.dest.as_fd()),
        }
    }
}

/// Whether the directory `fd` belongs to this process's effective group (files created in it then
/// do too, whatever its setgid bit or the `grpid` mount option say).
fn own_group(ctx: &Ctx, fd: BorrowedFd) -> bool {
    File::from(match fd.try_clone_to_owned() {
        Ok(fd) => fd,
        Err(_) => return false,
    })
    .metadata()
    .is_ok_and(|m| std::os::unix::fs::MetadataExt::gid(&m) == ctx.owner.1)
}

/// Phase 1: directories, symlinks and special files, depth first. Up to `keep` directory
/// descriptors are kept open for the later phases.
fn make_tree(ctx: &Ctx, keep: usize) -> Tree {
    let count = ctx.nodes.len();
    let mut t = Tree {
        created: vec![false; count],
        fds: (0..count).map(|_| None).collect(),
        own_group: vec![false; count],
    };
    let mut kept = 0;
    // The directories above the current node: (node, its descriptor unless kept in `t.fds`).
    let mut stack: Vec<(usize, Option<OwnedFd>)> = Vec::new();
    for i in 0..count {
        let n = &ctx.nodes[i];
        if n.is_dest() {
            t.created[i] = true;
            t.own_group[i] = own_group(ctx, ctx.dest.as_fd());
            stack.push((i, None));
            continue;
        }
        if let Some(p) = n.parent {
            if !t.created[p] {
                continue; // its directory could not be made (reported)
            }
            while stack.last().is_some_and(|(d, _)| *d != p) {
                stack.pop();
            }
        }
        if n.link_of.is_some() || n.inode.is_file() {
            continue; // phase 2 and after
        }
        let dir = match stack.last() {
            Some((_, Some(fd))) => fd.as_fd(),
            Some((d, None)) => t.fds[*d].as_ref().map_or(ctx.dest.as_fd(), |fd| fd.as_fd()),
            None => ctx.dest.as_fd(),
        };
        if let Ok(fd) = create_node(ctx, i, dir) {
            t.created[i] = true;
            if let Some(fd) = fd {
                t.own_group[i] = own_group(ctx, fd.as_fd());
                if kept < keep {
                    kept += 1;
                    t.fds[i] = Some(fd);
                    stack.push((i, None));
                } else {
                    stack.push((i, Some(fd)));
                }
            }
        }
    }
    t
}

// ---------------------------------------------------------------------------------------------
// Phase 2: regular files with their data
// ---------------------------------------------------------------------------------------------

/// Writes `data` at `off`; with `skip_zeros`, whole 4 KiB blocks of zeros (at 4 KiB file offsets) are
/// left unwritten: holes of the file, which is sized afterwards.
fn write_data_at(file: &File, data: &[u8], off: u64, skip_zeros: bool) -> io::Result<()> {
    const B: u64 = 4096;
    if !skip_zeros {
        return file.write_all_at(data, off);
    }
    let end = off + data.len() as u64;
    let mut pos = off;
    let mut run_start: Option<u64> = None;
    while pos < end {
        let next = ((pos / B) + 1) * B;
        let stop = next.min(end);
        let block = &data[(pos - off) as usize..(stop - off) as usize];
        let whole = pos.is_multiple_of(B) && stop == next;
        let zero = whole && block.iter().all(|&b| b == 0);
        match (zero, run_start) {
            (true, Some(s)) => {
                file.write_all_at(&data[(s - off) as usize..(pos - off) as usize], s)?;
                run_start = None;
            }
            (false, None) => run_start = Some(pos),
            _ => {}
        }
        pos = stop;
    }
    if let Some(s) = run_start {
        file.write_all_at(&data[(s - off) as usize..], s)?;
    }
    Ok(())
}

/// What phase 2 did with a regular file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Created and written (a local error on the way, if any, is reported).
    Written,
    /// Not created (reported).
    NotCreated,
    /// Its data could not be read from the image: removed again (reported).
    Removed,
}

thread_local! {
    /// Each worker's data buffer, reused from file to file.
    static BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Creates regular file node `i` in `dir` with its permission bits, writes its data (holes
/// skipped), sizes it, and sets its metadata. On an image fault the file is removed again.
fn write_file(
    ctx: &Ctx,
    i: usize,
    dir: BorrowedFd,
    own_group: bool,
    progress: &dyn Progress,
) -> Outcome {
    let n = &ctx.nodes[i];
    let name = match cstr(&n.name) {
        Ok(c) => c,
        Err(e) => {
            ctx.local(i, "name", e);
            return Outcome::NotCreated;
        }
    };
    let perm = u32::from(n.inode.mode()) & 0o777;
    let open = || {
        sys::openat(
            dir,
            &name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            perm,
        )
    };
    let file = match create_replacing(ctx, dir, &name, &open) {
        Ok(fd) => File::from(fd),
        Err(e) => {
            ctx.local(i, "create", e);
            return Outcome::NotCreated;
        }
    };
    let size = n.inode.size();
    let mut buf = BUF.take();
    let copy = |buf: &mut Vec<u8>| -> Result<()> {
        let extents = ctx
            .img
            .map_range(&n.inode, 0, size)
            .with_context(|| format!("{}: map", show(&n.path)))?;
        // A file the image stores sparse keeps its zero blocks as holes too (its data chunks may
        // hold zeros around the data); a dense file is written as stored.
        let sparse = extents.iter().any(|e| e.kind == ExtentKind::Hole);
        // A dense file is read as one range (its block extent and inline tail in one read and one
        // write per chunk); a sparse one extent by extent, skipping the holes.
        let ranges: Vec<(u64, u64)> = if sparse {
            extents
                .iter()
                .filter(|e| e.kind != ExtentKind::Hole)
                .map(|e| (e.logical, e.logical + e.length))
                .collect()
        } else {
            vec![(0, size)]
        };
        let holes = size.saturating_sub(ranges.iter().map(|(a, b)| b - a).sum::<u64>());
        progress.advance(holes);
        for (mut off, end) in ranges {
            while off < end {
                let len = (end - off).min(CHUNK as u64) as usize;
                if buf.len() < len {
                    buf.resize(len, 0);
                }
                let got = ctx
                    .img
                    .read(&n.inode, off, &mut buf[..len])
                    .with_context(|| format!("{}: read at byte {off}", show(&n.path)))?;
                if got != len {
                    return Err(fault(format!(
                        "{}: data ends at byte {} of {size}",
                        show(&n.path),
                        off + got as u64
                    )));
                }
                write_data_at(&file, &buf[..len], off, sparse)
                    .map_err(anyhow::Error::new)
                    .with_context(|| format!("{}: write", ctx.dest_name(i)))?;
                ctx.bytes.fetch_add(len as u64, Ordering::Relaxed);
                progress.advance(len as u64);
                off += len as u64;
            }
        }
        // Holes at the end (and zero blocks left out of a sparse file) are not written: the size
        // makes them.
        if sparse {
            file.set_len(size)
                .map_err(anyhow::Error::new)
                .with_context(|| format!("{}: set the size", ctx.dest_name(i)))?;
        }
        Ok(())
    };
    let copied = copy(&mut buf);
    BUF.set(buf);
    if let Err(e) = copied {
        let image_fault = super::exit_code(&e) == Some(EXIT_IMAGE);
        ctx.error(e);
        if image_fault {
            drop(file);
            match sys::unlinkat(dir, &name) {
                Ok(()) => ctx.warn(format!(
                    "{}: removed: its data could not be read from the image",
                    ctx.dest_name(i)
                )),
                Err(e) => ctx.local(i, "remove the incomplete file", e),
            }
            return Outcome::Removed;
        }
    }
    ctx.finish_file(i, file.as_fd(), own_group);
    Outcome::Written
}

/// Phase 2: every regular file (first names), in parallel: directory by directory (so that
/// workers rarely create files in the same directory at once, which the kernel serializes), and in
/// a directory in the order of the files' inodes in the image, so that the metadata blocks holding
/// their inline tails are read [`INODE_BATCH`] files at a time, together. Records in
/// `tree.created` which exist; returns those removed because their data could not be read.
fn write_data(ctx: &Ctx, tree: &mut Tree, progress: &dyn Progress) -> HashSet<usize> {
    let mut by_dir: HashMap<Option<usize>, Vec<usize>> = HashMap::new();
    for (i, n) in ctx.nodes.iter().enumerate() {
        if n.link_of.is_none() && n.inode.is_file() && n.parent.is_none_or(|p| tree.created[p]) {
            by_dir.entry(n.parent).or_default().push(i);
        }
    }
    let nid = |i: &usize| ctx.nodes[*i].inode.nid();
    let mut by_dir: Vec<(Option<usize>, Vec<usize>)> = by_dir.into_iter().collect();
    for (_, files) in by_dir.iter_mut() {
        files.sort_by_key(nid);
    }
    by_dir.sort_by_key(|(_, files)| nid(&files[0]));
    let t: &Tree = tree;
    let outcomes: Vec<(usize, Outcome)> = by_dir
        .par_iter()
        .flat_map(|(dir, files)| {
            let fd = match t.dir(ctx, *dir, libc::O_PATH) {
                Ok(fd) => fd,
                Err(e) => {
                    for &i in files {
                        ctx.local(
                            i,
                            "open its directory",
                            io::Error::from_raw_os_error(errno(&e)),
                        );
                    }
                    return Vec::new();
                }
            };
            let own = t.own_group(ctx, *dir);
            files
                .par_chunks(INODE_BATCH)
                .flat_map_iter(|chunk| {
                    let nids: Vec<u64> = chunk.iter().map(nid).collect();
                    ctx.img.prefetch_inodes(&nids);
                    chunk
                        .iter()
                        .map(|&i| (i, write_file(ctx, i, fd.as_fd(), own, progress)))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let mut removed = HashSet::new();
    for (i, outcome) in outcomes {
        match outcome {
            Outcome::Written => tree.created[i] = true,
            Outcome::Removed => {
                removed.insert(i);
            }
            Outcome::NotCreated => {}
        }
    }
    removed
}

/// After phase 2: the further names of inodes (hard links), in order. A name whose first name was
/// removed for bad data is not made.
fn make_links(ctx: &Ctx, tree: &mut Tree, removed: &HashSet<usize>) {
    for i in 0..ctx.nodes.len() {
        let n = &ctx.nodes[i];
        let Some(first) = n.link_of else {
            continue;
        };
        if n.parent.is_some_and(|p| !tree.created[p]) {
            continue; // its directory could not be made (reported)
        }
        if !tree.created[first] {
            ctx.warn(if removed.contains(&first) {
                format!(
                    "{}: removed: its data could not be read from the image",
                    ctx.dest_name(i)
                )
            } else {
                format!(
                    "{}: not linked: its first name {} was not created",
                    ctx.dest_name(i),
                    ctx.dest_name(first)
                )
            });
            continue;
        }
        let made = (|| {
            let name = cstr(&n.name)?;
            let f = &ctx.nodes[first];
            let old_name = cstr(&f.name)?;
            let dir = tree.dir(ctx, n.parent, libc::O_PATH)?;
            let old_dir = tree.dir(ctx, f.parent, libc::O_PATH)?;
            // A symlink is linked itself, not followed.
            create_replacing(ctx, dir.as_fd(), &name, &|| {
                sys::linkat(old_dir.as_fd(), &old_name, dir.as_fd(), &name)
            })
        })();
        match made {
            Ok(()) => tree.created[i] = true,
            Err(e) => ctx.local(i, "hard link", e),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Phase 3: directories, bottom-up
// ---------------------------------------------------------------------------------------------

/// Owner, mode, xattrs and times of every directory, in reverse depth-first order: each after
/// everything below it.
fn finish_dirs(ctx: &Ctx, tree: &Tree) {
    for i in (0..ctx.nodes.len()).rev() {
        let n = &ctx.nodes[i];
        if !n.inode.is_dir() || !tree.created[i] {
            continue;
        }
        match tree.dir(ctx, Some(i), libc::O_RDONLY) {
            Ok(fd) => ctx.finish_fd(i, fd.as_fd()),
            Err(e) => ctx.local(i, "open to set its attributes", e),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The command
// ---------------------------------------------------------------------------------------------

/// Opens (creating it if missing) the destination directory; it must be empty unless `overwrite`.
fn open_dest(dest: &std::path::Path, overwrite: bool) -> Result<OwnedFd> {
    match std::fs::symlink_metadata(dest) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dest).with_context(|| format!("{}: create", dest.display()))?
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("{}", dest.display()))),
        Ok(_) => {}
    }
    let c = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dest.as_os_str()))
        .map_err(|_| anyhow!("{}: NUL in the path", dest.display()))?;
    // SAFETY: NUL-terminated path; the descriptor returned is owned below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(anyhow::Error::new(io::Error::last_os_error())
            .context(format!("{}: open as a directory", dest.display())));
    }
    // SAFETY: fd was just returned by open and is owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if !overwrite {
        let mut entries =
            std::fs::read_dir(dest).with_context(|| format!("{}: read", dest.display()))?;
        if entries.next().is_some() {
            bail!(
                "{}: not empty (give --overwrite to extract into it anyway)",
                dest.display()
            );
        }
    }
    Ok(fd)
}

/// Runs `sealfs extract`.
pub fn run(args: ExtractArgs) -> Result<ExitCode> {
    if args.threads > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(args.threads)
            .build()
            .context("starting worker threads")?
            .install(|| extract(args))
    } else {
        extract(args)
    }
}

/// [`run`], on the thread pool it chose.
fn extract(args: ExtractArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let opened = args.image.open()?;
    let img = &opened.image;
    let path: Vec<u8> = args
        .path
        .as_deref()
        .map(|p| super::arg_bytes(p).to_vec())
        .unwrap_or_else(|| b"/".to_vec());
    let top = resolve(img, &path, Follow::Parents)?;

    let nofile = sys::raise_nofile();
    let max_depth = MAX_DEPTH.min(nofile.saturating_sub(256).max(16) as u32);
    let mut errors = Vec::new();
    let nodes = plan(img, top, &path, max_depth, &mut errors)?;

    let dest = open_dest(&args.dest, args.overwrite)?;
    // A default ACL on DEST would give what is created below it other permission bits than asked.
    let dest_acl = sys::has_xattr(dest.as_fd(), c"system.posix_acl_default");
    let ctx = Ctx {
        img,
        nodes,
        dest,
        dest_path: args.dest.clone(),
        overwrite: args.overwrite,
        xattrs: !args.no_xattrs,
        root: is_root(),
        owner: sys::effective_owner(),
        umask: sys::umask(),
        chmod_always: args.overwrite || dest_acl,
        errors: Mutex::new(errors),
        warnings: Mutex::new(Vec::new()),
        skipped_xattrs: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    };

    let progress = TermProgress::new(args.quiet);
    let threads = rayon::current_num_threads();
    // Directory descriptors kept open from phase 1 on: what the limit leaves after the deepest
    // stack of open directories and a few descriptors per worker.
    let keep = nofile.saturating_sub(512 + max_depth as u64 + 4 * threads as u64) as usize;
    let mut tree = make_tree(&ctx, keep);
    let total: u64 = ctx
        .nodes
        .iter()
        .filter(|n| n.link_of.is_none() && n.inode.is_file())
        .filter(|n| n.parent.is_none_or(|p| tree.created[p]))
        .map(|n| n.inode.size())
        .sum();
    progress.begin("extracting", Some(total));
    let removed = write_data(&ctx, &mut tree, &progress);
    progress.end();
    make_links(&ctx, &mut tree, &removed);
    finish_dirs(&ctx, &tree);
    let created = tree.created;

    // Report.
    let mut counts = [0u64; 5]; // dirs, files, symlinks, special, extra hard links
    for (i, n) in ctx.nodes.iter().enumerate() {
        if !created[i] || n.is_dest() {
            continue;
        }
        let k = if n.link_of.is_some() {
            4
        } else {
            match n.inode.file_type() {
                FileType::Directory => 0,
                FileType::Regular => 1,
                FileType::Symlink => 2,
                _ => 3,
            }
        };
        counts[k] += 1;
    }
    let mut warnings = ctx.warnings.into_inner().unwrap();
    let skipped = ctx.skipped_xattrs.load(Ordering::Relaxed);
    if skipped > 0 {
        warnings.push(format!(
            "{skipped} trusted.*/security.* xattrs not set: only root may set them"
        ));
    }
    if !args.quiet {
        for w in warnings.iter().take(MAX_WARNINGS) {
            eprintln!("sealfs: warning: {w}");
        }
        if warnings.len() > MAX_WARNINGS {
            eprintln!(
                "sealfs: warning: ... and {} more warnings",
                warnings.len() - MAX_WARNINGS
            );
        }
    }
    let mut code = 0u8;
    let errors = ctx.errors.into_inner().unwrap();
    for e in &errors {
        code = code.max(super::report(e));
    }
    if !args.quiet {
        eprintln!(
            "{}: extracted {} files, {} directories, {} symlinks, {} special files, {} extra hard links; {} bytes of data in {:.2?}{}",
            args.dest.display(),
            counts[1],
            counts[0],
            counts[2],
            counts[3],
            counts[4],
            ctx.bytes.load(Ordering::Relaxed),
            start.elapsed(),
            if errors.is_empty() {
                String::new()
            } else {
                format!("; {} errors", errors.len())
            }
        );
    }
    Ok(ExitCode::from(code))
}
