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
//!    empty regular files of their final size, symlinks, special files and hard links; the metadata of
//!    symlinks and special files.
//! 2. Data (parallel, rayon): each regular file's mapped extents are read and written at their
//!    offsets, holes are skipped (the file was sized in phase 1, so they stay holes; in a file the
//!    image stores with holes, whole zero blocks stay holes too); then owner, mode, xattrs (after
//!    chown, which clears file capabilities) and times.
//! 3. Directories, bottom-up: owner, mode, xattrs (a default ACL set last cannot leak into children)
//!    and times, after their contents.
//!
//! The result does not depend on the thread count. A file whose data cannot be read (corruption,
//! verification failure) is removed, with all its names, and reported: no wrong bytes are left.

use super::{fault, is_root, join, resolve, show, EXIT_IMAGE};
use crate::open::ImageArgs;
use crate::progress::TermProgress;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rayon::prelude::*;
use sealfs_builder::Progress;
use sealfs_reader::{ExtentKind, FileType, Follow, Image, Inode};
use std::collections::{BTreeMap, HashMap, HashSet};
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
    let mut seen_dirs: HashMap<u64, usize> = HashMap::from([(top.nid(), 0)]);
    let mut first_link: HashMap<u64, usize> = HashMap::new();
    let entries = img
        .read_dir_all(&top)
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
        let inode = match img.inode(e.nid).with_context(|| show(&path)) {
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
            let entries = match img.read_dir_all(&inode).with_context(|| show(&path)) {
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
fn create_replacing(
    ctx: &Ctx,
    dir: BorrowedFd,
    name: &CStr,
    create: &dyn Fn() -> io::Result<()>,
) -> io::Result<()> {
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
        FileType::Regular => {
            let open = || {
                sys::openat(
                    dir,
                    &name,
                    libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                    0o600,
                )
                .and_then(|fd| File::from(fd).set_len(st.size))
            };
            match create_replacing(ctx, dir, &name, &open) {
                Ok(()) => Ok(None),
                Err(e) => fail("create", e),
            }
        }
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

/// Phase 1. Returns which nodes exist now.
fn make_tree(ctx: &Ctx) -> Vec<bool> {
    let mut created = vec![false; ctx.nodes.len()];
    let mut stack: Vec<(usize, OwnedFd)> = Vec::new();
    for i in 0..ctx.nodes.len() {
        let n = &ctx.nodes[i];
        if n.is_dest() {
            created[i] = true;
            match ctx.dest.try_clone() {
                Ok(fd) => stack.push((i, fd)),
                Err(e) => {
                    ctx.local(i, "dup", e);
                    return created;
                }
            }
            continue;
        }
        if let Some(p) = n.parent {
            if !created[p] {
                continue; // its directory could not be made (reported)
            }
            while stack.last().is_some_and(|(d, _)| *d != p) {
                stack.pop();
            }
        }
        if let Some(first) = n.link_of {
            if !created[first] {
                ctx.warn(format!(
                    "{}: not linked: its first name {} was not created",
                    ctx.dest_name(i),
                    ctx.dest_name(first)
                ));
                continue;
            }
        }
        let dir = match stack.last() {
            Some((_, fd)) => fd.as_fd(),
            None => ctx.dest.as_fd(),
        };
        if let Ok(fd) = create_node(ctx, i, dir) {
            created[i] = true;
            if let Some(fd) = fd {
                stack.push((i, fd));
            }
        }
    }
    created
}

// ---------------------------------------------------------------------------------------------
// Phase 2: file data
// ---------------------------------------------------------------------------------------------

/// Writes `data` at `off`; with `skip_zeros`, whole 4 KiB blocks of zeros (at 4 KiB file offsets) are
/// left unwritten: holes of the file, which was sized beforehand.
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

/// Writes node `i`'s data (holes skipped) and its metadata. `Err` when the image's data could not
/// be read (the file must then go).
fn write_file(ctx: &Ctx, i: usize, dir: BorrowedFd, progress: &dyn Progress) -> Result<(), ()> {
    let n = &ctx.nodes[i];
    let name = cstr(&n.name).map_err(|_| ())?;
    let fd = match sys::openat(dir, &name, libc::O_WRONLY | libc::O_NOFOLLOW, 0) {
        Ok(fd) => fd,
        Err(e) => {
            ctx.local(i, "open for writing", e);
            return Ok(());
        }
    };
    let file = File::from(fd);
    let size = n.inode.size();
    let copy = || -> Result<()> {
        let extents = ctx
            .img
            .map_range(&n.inode, 0, size)
            .with_context(|| format!("{}: map", show(&n.path)))?;
        // A file the image stores sparse keeps its zero blocks as holes too (its data chunks may
        // hold zeros around the data); a dense file is written as stored.
        let sparse = extents.iter().any(|e| e.kind == ExtentKind::Hole);
        let mut buf = Vec::new();
        for e in extents {
            if e.kind == ExtentKind::Hole {
                progress.advance(e.length);
                continue;
            }
            let end = e.logical + e.length;
            let mut off = e.logical;
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
        Ok(())
    };
    if let Err(e) = copy() {
        let image_fault = super::exit_code(&e) == Some(EXIT_IMAGE);
        ctx.error(e);
        if image_fault {
            return Err(());
        }
    }
    ctx.finish_fd(i, file.as_fd());
    Ok(())
}

/// Phase 2. Returns the first names of files whose data could not be read.
fn write_data(ctx: &Ctx, created: &[bool], progress: &dyn Progress) -> Vec<usize> {
    let mut by_dir: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
    for (i, n) in ctx.nodes.iter().enumerate() {
        if created[i] && n.link_of.is_none() && n.inode.is_file() {
            by_dir.entry(n.parent).or_default().push(i);
        }
    }
    let failed = Mutex::new(Vec::new());
    by_dir.par_iter().for_each(|(dir, files)| {
        let fd = match ctx.open_beneath(*dir, libc::O_PATH) {
            Ok(fd) => fd,
            Err(e) => {
                for &i in files {
                    ctx.local(
                        i,
                        "open its directory",
                        io::Error::from_raw_os_error(errno(&e)),
                    );
                }
                return;
            }
        };
        files.par_iter().for_each(|&i| {
            if write_file(ctx, i, fd.as_fd(), progress).is_err() {
                failed.lock().unwrap().push(i);
            }
        });
    });
    let mut failed = failed.into_inner().unwrap();
    failed.sort_unstable();
    failed
}

/// Removes every name of the files in `failed`, so that no file with wrong content is left.
fn remove_failed(ctx: &Ctx, failed: &[usize], created: &[bool]) {
    let failed: HashSet<usize> = failed.iter().copied().collect();
    for (i, n) in ctx.nodes.iter().enumerate() {
        let first = n.link_of.unwrap_or(i);
        if !created[i] || !failed.contains(&first) {
            continue;
        }
        let r = ctx
            .open_beneath(n.parent, libc::O_PATH)
            .and_then(|d| sys::unlinkat(d.as_fd(), &cstr(&n.name)?));
        match r {
            Ok(()) => ctx.warn(format!(
                "{}: removed: its data could not be read from the image",
                ctx.dest_name(i)
            )),
            Err(e) => ctx.local(i, "remove the incomplete file", e),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Phase 3: directories, bottom-up
// ---------------------------------------------------------------------------------------------

fn finish_dirs(ctx: &Ctx, created: &[bool]) {
    // Replay the depth-first order with a stack of open directories: a directory is finished when
    // it leaves the stack, that is after everything below it.
    let mut stack: Vec<(usize, OwnedFd)> = Vec::new();
    let pop = |stack: &mut Vec<(usize, OwnedFd)>| {
        if let Some((d, fd)) = stack.pop() {
            ctx.finish_fd(d, fd.as_fd());
        }
    };
    for (i, n) in ctx.nodes.iter().enumerate() {
        if !n.inode.is_dir() || !created[i] {
            continue;
        }
        if n.is_dest() {
            match ctx.dest.try_clone() {
                Ok(fd) => stack.push((i, fd)),
                Err(e) => ctx.local(i, "dup", e),
            }
            continue;
        }
        let p = n.parent;
        while stack.last().is_some_and(|(d, _)| Some(*d) != p) {
            pop(&mut stack);
        }
        let dir = match stack.last() {
            Some((_, fd)) => fd.as_fd(),
            None => ctx.dest.as_fd(),
        };
        match cstr(&n.name).and_then(|c| sys::open_dir(dir, &c)) {
            Ok(fd) => stack.push((i, fd)),
            Err(e) => ctx.local(i, "open to set its attributes", e),
        }
    }
    while !stack.is_empty() {
        pop(&mut stack);
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
    let ctx = Ctx {
        img,
        nodes,
        dest,
        dest_path: args.dest.clone(),
        overwrite: args.overwrite,
        xattrs: !args.no_xattrs,
        root: is_root(),
        errors: Mutex::new(errors),
        warnings: Mutex::new(Vec::new()),
        skipped_xattrs: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
    };

    let progress = TermProgress::new(args.quiet);
    let created = make_tree(&ctx);
    let total: u64 = ctx
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, n)| created[*i] && n.link_of.is_none() && n.inode.is_file())
        .map(|(_, n)| n.inode.size())
        .sum();
    progress.begin("extracting", Some(total));
    let failed = if args.threads > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(args.threads)
            .build()
            .context("starting worker threads")?
            .install(|| write_data(&ctx, &created, &progress))
    } else {
        write_data(&ctx, &created, &progress)
    };
    progress.end();
    remove_failed(&ctx, &failed, &created);
    finish_dirs(&ctx, &created);

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
