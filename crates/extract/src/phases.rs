//! Phases 1 to 3: the tree, the data, the directories' metadata. See the crate documentation.

use crate::error::{ExtractError, Warning};
use crate::plan::Node;
use crate::sys::{self, cstr, is};
use crate::{show, ExtractProgress, CHUNK, INODE_BATCH};
use rayon::prelude::*;
use rustix::fs::OFlags;
use rustix::io::Errno;
use sealfs_reader::{ExtentKind, FileType, Image};
use std::collections::{HashMap, HashSet};
use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Shared state of the phases.
pub(crate) struct Ctx<'a> {
    pub(crate) img: &'a Image,
    pub(crate) nodes: Vec<Node>,
    pub(crate) dest: OwnedFd,
    pub(crate) dest_path: PathBuf,
    pub(crate) overwrite: bool,
    pub(crate) xattrs: bool,
    pub(crate) root: bool,
    /// This process's effective user and group: the owner of every file it creates in a directory
    /// of its own group.
    pub(crate) owner: (u32, u32),
    /// The process's umask, which the permission bits given at creation pass through.
    pub(crate) umask: u32,
    /// Files need a chmod even when created with their final permission bits: DEST has a default ACL
    /// (which replaces the umask for what is created below it), or `overwrite` merges into
    /// directories that might.
    pub(crate) chmod_always: bool,
    pub(crate) errors: Mutex<Vec<ExtractError>>,
    pub(crate) warnings: Mutex<Vec<Warning>>,
    /// `trusted.*`/`security.*` xattrs left out because this process is not root.
    pub(crate) skipped_xattrs: AtomicU64,
    /// Xattrs the destination refused.
    pub(crate) refused_xattrs: AtomicU64,
    /// Devices not made because this process is not root.
    pub(crate) skipped_devices: AtomicU64,
    pub(crate) bytes: AtomicU64,
    /// Turn fs-verity on for each regular file, expecting these digests.
    pub(crate) fsverity: Option<crate::Fsverity>,
    /// Files with fs-verity on and checked, refused, and measured different.
    pub(crate) verity: [AtomicU64; 3],
}

impl Ctx<'_> {
    fn error(&self, e: ExtractError) {
        self.errors.lock().unwrap().push(e);
    }

    fn warn(&self, w: Warning) {
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
        comps.push(show(std::os::unix::ffi::OsStrExt::as_bytes(
            self.dest_path.as_os_str(),
        )));
        comps.reverse();
        comps.join("/")
    }

    /// A local (DEST-side) error about node `i`.
    fn local(&self, i: usize, what: &str, e: io::Error) {
        self.error(ExtractError::local(
            format!("{}: {what}", self.dest_name(i)),
            e,
        ));
    }

    /// Opens the directory node `dir` (DEST for `None`) by walking down from DEST one component at a
    /// time with `O_NOFOLLOW`; `final_flags` are the open flags of the last component.
    fn open_beneath(&self, dir: Option<usize>, final_flags: OFlags) -> io::Result<OwnedFd> {
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
                OFlags::PATH
            };
            let name = cstr(&self.nodes[c].name)?;
            fd = sys::openat(
                fd.as_fd(),
                &name,
                flags | OFlags::DIRECTORY | OFlags::NOFOLLOW,
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
        let list = match self.img.xattrs(&n.inode) {
            Ok(l) => l,
            Err(e) => {
                return self.error(ExtractError::image(format!("xattrs: {}", show(&n.path)), e))
            }
        };
        for (name, value) in list {
            if !self.xattr_wanted(&name) {
                continue;
            }
            let r = cstr(&name).and_then(|c| set(&c, &value));
            if let Err(error) = r {
                self.refused_xattrs.fetch_add(1, Ordering::Relaxed);
                self.warn(Warning::XattrNotSet {
                    path: self.dest_name(i),
                    name,
                    error,
                });
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

    /// Turns the kernel's fs-verity on for regular file node `i`, just written through `file`
    /// (which is closed first: no writer may remain), and checks the digest the kernel measures
    /// against `expected`'s. Returns a read-only descriptor of the file for its metadata (the
    /// written one, reopened, when a read-only open fails; `None`, reported, when neither opens).
    /// What goes wrong is counted and warned about, never fatal: the file's data is right either
    /// way.
    fn enable_verity(
        &self,
        i: usize,
        dir: BorrowedFd,
        name: &CStr,
        file: File,
        expected: &crate::Fsverity,
    ) -> Option<File> {
        let [enabled, refused, mismatch] = &self.verity;
        let inode = &self.nodes[i].inode;
        let (want, alg) = match expected {
            crate::Fsverity::Recorded(d) => (d.get(inode.nid()).copied(), d.alg()),
            crate::Fsverity::FromContent(alg) => (None, *alg),
        };
        let want = match (want, expected) {
            (Some(w), _) => Ok(w),
            (None, crate::Fsverity::FromContent(_)) => {
                self.img.file_digest_by_reading(inode, alg).map_err(|e| {
                    let e = sealfs_reader::ErrorChain(&e);
                    format!("its digest could not be computed: {e}")
                })
            }
            (None, crate::Fsverity::Recorded(_)) => {
                Err("the image records no fs-verity digest for it".into())
            }
        };
        drop(file);
        let ro = match sys::openat(dir, name, OFlags::RDONLY | OFlags::NOFOLLOW, 0) {
            Ok(fd) => File::from(fd),
            Err(e) => {
                refused.fetch_add(1, Ordering::Relaxed);
                self.warn(Warning::VerityNotEnabled {
                    path: self.dest_name(i),
                    error: e,
                });
                // Its metadata is still set, through a descriptor for writing.
                return match sys::openat(dir, name, OFlags::WRONLY | OFlags::NOFOLLOW, 0) {
                    Ok(fd) => Some(File::from(fd)),
                    Err(e) => {
                        self.local(i, "reopen", e);
                        None
                    }
                };
            }
        };
        let params = sealfs_reader::files::file_params(alg);
        match sealfs_reader::enable_kernel_verity(&ro, &params) {
            Ok(()) => {}
            Err(e) if is(&e, Errno::EXIST) => {}
            Err(e) => {
                refused.fetch_add(1, Ordering::Relaxed);
                self.warn(Warning::VerityNotEnabled {
                    path: self.dest_name(i),
                    error: e,
                });
                return Some(ro);
            }
        }
        let measured = sealfs_reader::kernel_verity_digest(&ro);
        match (want, measured) {
            (Ok(w), Some(m)) if w == m => {
                enabled.fetch_add(1, Ordering::Relaxed);
            }
            (want, measured) => {
                mismatch.fetch_add(1, Ordering::Relaxed);
                self.warn(Warning::VerityMismatch {
                    path: self.dest_name(i),
                    expected: want,
                    measured,
                });
            }
        }
        Some(ro)
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

/// Runs `create`; if the name exists and `overwrite` was given, removes it (never a directory)
/// and runs it again.
fn create_replacing<T>(
    ctx: &Ctx,
    dir: BorrowedFd,
    name: &CStr,
    create: &dyn Fn() -> io::Result<T>,
) -> io::Result<T> {
    match create() {
        Err(e) if is(&e, Errno::EXIST) && ctx.overwrite => {
            match sys::unlinkat(dir, name) {
                Err(e) if is(&e, Errno::ISDIR) || is(&e, Errno::PERM) => {
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

/// Creates directory `name` in `dir` (mode 0700 until phase 3) and opens it. With `overwrite` an
/// existing directory is reused, anything else there (a symlink included) is replaced.
fn make_dir(ctx: &Ctx, dir: BorrowedFd, name: &CStr) -> io::Result<OwnedFd> {
    match sys::mkdirat(dir, name, 0o700) {
        Ok(()) => {}
        Err(e) if is(&e, Errno::EXIST) && ctx.overwrite => match sys::open_dir(dir, name) {
            Ok(fd) => return Ok(fd),
            Err(e) if is(&e, Errno::NOTDIR) || is(&e, Errno::LOOP) => {
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
        let old_dir = match ctx.open_beneath(f.parent, OFlags::PATH) {
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
            let target = match ctx.img.readlink(&n.inode) {
                Ok(t) => t,
                Err(e) => {
                    ctx.error(ExtractError::image(
                        format!("readlink: {}", show(&n.path)),
                        e,
                    ));
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
                FileType::CharDevice => rustix::fs::FileType::CharacterDevice,
                FileType::BlockDevice => rustix::fs::FileType::BlockDevice,
                FileType::Fifo => rustix::fs::FileType::Fifo,
                _ => rustix::fs::FileType::Socket,
            };
            let dev = match ft {
                FileType::CharDevice | FileType::BlockDevice => st.rdev,
                _ => 0,
            };
            match create_replacing(ctx, dir, &name, &|| {
                sys::mknodat(dir, &name, kind, 0o600, dev)
            }) {
                Ok(()) => {
                    ctx.finish_at(i, dir, &name);
                    Ok(None)
                }
                Err(e) if is(&e, Errno::PERM) && !ctx.root => {
                    ctx.skipped_devices.fetch_add(1, Ordering::Relaxed);
                    ctx.warn(Warning::DeviceNeedsRoot {
                        path: ctx.dest_name(i),
                        file_type: ft,
                        major: st.rdev_major,
                        minor: st.rdev_minor,
                    });
                    Err(())
                }
                Err(e) => fail("mknod", e),
            }
        }
    }
}

/// What phase 1 made: the directories, symlinks and special files that exist (regular files are
/// created in phase 2, further names of an inode after it), and descriptors of the directories.
pub(crate) struct Tree {
    /// Which nodes exist.
    pub(crate) created: Vec<bool>,
    /// Open directories by node, as many as the descriptor limit allows (the others are reopened
    /// from DEST when needed). DEST itself is [`Ctx::dest`].
    pub(crate) fds: Vec<Option<OwnedFd>>,
    /// Directories whose group is this process's effective group: a file created in one belongs to
    /// this process's user and group (whether the directory is setgid or not).
    pub(crate) own_group: Vec<bool>,
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
    fn dir<'a>(&'a self, ctx: &'a Ctx, dir: Option<usize>, flags: OFlags) -> io::Result<DirFd<'a>> {
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
    sys::group_of(fd).is_ok_and(|gid| gid == ctx.owner.1)
}

/// Phase 1: directories, symlinks and special files, depth first. Up to `keep` directory
/// descriptors are kept open for the later phases.
pub(crate) fn make_tree(ctx: &Ctx, keep: usize) -> Tree {
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
    progress: &dyn ExtractProgress,
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
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
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
    let copy = |buf: &mut Vec<u8>| -> Result<(), ExtractError> {
        let extents = ctx
            .img
            .map_range(&n.inode, 0, size)
            .map_err(|e| ExtractError::image(format!("{}: map", show(&n.path)), e))?;
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
                let got = ctx.img.read(&n.inode, off, &mut buf[..len]).map_err(|e| {
                    ExtractError::image(format!("{}: read at byte {off}", show(&n.path)), e)
                })?;
                if got != len {
                    return Err(ExtractError::Refused(format!(
                        "{}: data ends at byte {} of {size}",
                        show(&n.path),
                        off + got as u64
                    )));
                }
                write_data_at(&file, &buf[..len], off, sparse)
                    .map_err(|e| ExtractError::local(format!("{}: write", ctx.dest_name(i)), e))?;
                ctx.bytes.fetch_add(len as u64, Ordering::Relaxed);
                progress.advance(len as u64);
                off += len as u64;
            }
        }
        // Holes at the end (and zero blocks left out of a sparse file) are not written: the size
        // makes them.
        if sparse {
            file.set_len(size).map_err(|e| {
                ExtractError::local(format!("{}: set the size", ctx.dest_name(i)), e)
            })?;
        }
        Ok(())
    };
    let copied = copy(&mut buf);
    BUF.set(buf);
    let copied_ok = copied.is_ok();
    if let Err(e) = copied {
        // The typed error decides: the image is at fault (the data could not be read), so the
        // file holds wrong or missing bytes and goes; a local error leaves what was written.
        let image_fault = e.is_image_fault();
        ctx.error(e);
        if image_fault {
            drop(file);
            match sys::unlinkat(dir, &name) {
                Ok(()) => ctx.warn(Warning::Removed {
                    path: ctx.dest_name(i),
                }),
                Err(e) => ctx.local(i, "remove the incomplete file", e),
            }
            return Outcome::Removed;
        }
    }
    let file = match &ctx.fsverity {
        Some(expected) if copied_ok => ctx.enable_verity(i, dir, &name, file, expected),
        _ => Some(file),
    };
    if let Some(file) = file {
        ctx.finish_file(i, file.as_fd(), own_group);
    }
    Outcome::Written
}

/// Phase 2: every regular file (first names), in parallel: directory by directory (so that
/// workers rarely create files in the same directory at once, which the kernel serializes), and in
/// a directory in the order of the files' inodes in the image, so that the metadata blocks holding
/// their inline tails are read [`INODE_BATCH`] files at a time, together. Records in
/// `tree.created` which exist; returns those removed because their data could not be read.
pub(crate) fn write_data(
    ctx: &Ctx,
    tree: &mut Tree,
    progress: &dyn ExtractProgress,
) -> HashSet<usize> {
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
    // A remote image fetches the files' data ahead, in the order they are written.
    ctx.img.prefetch_files(
        by_dir
            .iter()
            .flat_map(|(_, files)| files)
            .map(|&i| &ctx.nodes[i].inode),
    );
    let t: &Tree = tree;
    let outcomes: Vec<(usize, Outcome)> = by_dir
        .par_iter()
        .flat_map(|(dir, files)| {
            let fd = match t.dir(ctx, *dir, OFlags::PATH) {
                Ok(fd) => fd,
                Err(e) => {
                    for &i in files {
                        ctx.local(
                            i,
                            "open its directory",
                            io::Error::from_raw_os_error(e.raw_os_error().unwrap_or(0)),
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
pub(crate) fn make_links(ctx: &Ctx, tree: &mut Tree, removed: &HashSet<usize>) {
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
                Warning::Removed {
                    path: ctx.dest_name(i),
                }
            } else {
                Warning::NotLinked {
                    path: ctx.dest_name(i),
                    first: ctx.dest_name(first),
                }
            });
            continue;
        }
        let made = (|| {
            let name = cstr(&n.name)?;
            let f = &ctx.nodes[first];
            let old_name = cstr(&f.name)?;
            let dir = tree.dir(ctx, n.parent, OFlags::PATH)?;
            let old_dir = tree.dir(ctx, f.parent, OFlags::PATH)?;
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
pub(crate) fn finish_dirs(ctx: &Ctx, tree: &Tree) {
    for i in (0..ctx.nodes.len()).rev() {
        let n = &ctx.nodes[i];
        if !n.inode.is_dir() || !tree.created[i] {
            continue;
        }
        match tree.dir(ctx, Some(i), OFlags::RDONLY) {
            Ok(fd) => ctx.finish_fd(i, fd.as_fd()),
            Err(e) => ctx.local(i, "open to set its attributes", e),
        }
    }
}
