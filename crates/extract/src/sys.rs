//! System calls relative to directory descriptors, through `rustix` (no `unsafe` here or anywhere
//! in this crate).
//!
//! Every call that names a file takes a directory descriptor this crate opened and one name
//! component; none follows a symlink in its last component. Two calls have no `*at` form that
//! `rustix` offers without following a symlink, and go through the `/proc/self/fd` magic link of a
//! descriptor instead (which stands for what the descriptor refers to, so no path under DEST is
//! resolved again): [`lchmodat`] (glibc's own `fchmodat(AT_SYMLINK_NOFOLLOW)` does the same where
//! the kernel lacks `fchmodat2`) and [`lsetxattrat`].

use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, Timespec, Timestamps, XattrFlags};
use rustix::io::Errno;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// Whether `e` is the system error `errno`.
pub fn is(e: &io::Error, errno: Errno) -> bool {
    e.raw_os_error() == Some(errno.raw_os_error())
}

/// `name` as a C string; a NUL byte is an [`io::ErrorKind::InvalidInput`] error.
pub fn cstr(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a name"))
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`.
pub fn openat(dir: BorrowedFd, name: &CStr, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    Ok(rfs::openat(
        dir,
        name,
        flags | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )?)
}

/// A directory below `dir`, not following a symlink.
pub fn open_dir(dir: BorrowedFd, name: &CStr) -> io::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        0,
    )
}

/// Opens the directory `path` (the destination itself, the one path this crate opens by name).
pub fn open_dir_path(path: &Path) -> io::Result<OwnedFd> {
    Ok(rfs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdirat(dir: BorrowedFd, name: &CStr, mode: u32) -> io::Result<()> {
    Ok(rfs::mkdirat(dir, name, Mode::from_raw_mode(mode))?)
}

/// `unlinkat(dir, name, 0)`: removes a non-directory.
pub fn unlinkat(dir: BorrowedFd, name: &CStr) -> io::Result<()> {
    Ok(rfs::unlinkat(dir, name, AtFlags::empty())?)
}

/// `symlinkat(target, dir, name)`.
pub fn symlinkat(target: &CStr, dir: BorrowedFd, name: &CStr) -> io::Result<()> {
    Ok(rfs::symlinkat(target, dir, name)?)
}

/// `mknodat(dir, name, kind | perm, dev)`.
pub fn mknodat(
    dir: BorrowedFd,
    name: &CStr,
    kind: rfs::FileType,
    perm: u32,
    dev: u64,
) -> io::Result<()> {
    Ok(rfs::mknodat(
        dir,
        name,
        kind,
        Mode::from_raw_mode(perm),
        dev,
    )?)
}

/// A new name for `old_dir/old_name` (a symlink is linked itself, not followed).
pub fn linkat(
    old_dir: BorrowedFd,
    old_name: &CStr,
    dir: BorrowedFd,
    name: &CStr,
) -> io::Result<()> {
    Ok(rfs::linkat(old_dir, old_name, dir, name, AtFlags::empty())?)
}

/// Owner ids for `chown`: the id `u32::MAX` (-1, which an image may hold) means "leave as it is",
/// as it does for the system call, and is passed as such.
fn ids(uid: u32, gid: u32) -> (Option<rfs::Uid>, Option<rfs::Gid>) {
    (
        (uid != u32::MAX).then(|| rfs::Uid::from_raw(uid)),
        (gid != u32::MAX).then(|| rfs::Gid::from_raw(gid)),
    )
}

/// `fchownat(dir, name, uid, gid, AT_SYMLINK_NOFOLLOW)`.
pub fn lchownat(dir: BorrowedFd, name: &CStr, uid: u32, gid: u32) -> io::Result<()> {
    let (uid, gid) = ids(uid, gid);
    Ok(rfs::chownat(
        dir,
        name,
        uid,
        gid,
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// `fchmodat(dir, name, mode, AT_SYMLINK_NOFOLLOW)` (never used on symlinks): opens `name` with
/// `O_PATH | O_NOFOLLOW`, refuses a symlink (`EOPNOTSUPP`, as glibc does) and changes the mode
/// through the descriptor's `/proc/self/fd` link.
pub fn lchmodat(dir: BorrowedFd, name: &CStr, mode: u32) -> io::Result<()> {
    let fd = openat(dir, name, OFlags::PATH | OFlags::NOFOLLOW, 0)?;
    let st = rfs::fstat(&fd)?;
    if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Symlink {
        return Err(Errno::OPNOTSUPP.into());
    }
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    Ok(rfs::chmod(path.as_str(), Mode::from_raw_mode(mode))?)
}

fn times(sec: i64, nsec: u32) -> Timestamps {
    let t = Timespec {
        tv_sec: sec,
        tv_nsec: nsec.into(),
    };
    Timestamps {
        last_access: t,
        last_modification: t,
    }
}

/// Sets atime and mtime of `dir/name` without following a symlink.
pub fn lutimensat(dir: BorrowedFd, name: &CStr, sec: i64, nsec: u32) -> io::Result<()> {
    Ok(rfs::utimensat(
        dir,
        name,
        &times(sec, nsec),
        AtFlags::SYMLINK_NOFOLLOW,
    )?)
}

/// Sets atime and mtime of an open file.
pub fn futimens(fd: BorrowedFd, sec: i64, nsec: u32) -> io::Result<()> {
    Ok(rfs::futimens(fd, &times(sec, nsec))?)
}

/// `fchown(fd, uid, gid)`.
pub fn fchown(fd: BorrowedFd, uid: u32, gid: u32) -> io::Result<()> {
    let (uid, gid) = ids(uid, gid);
    Ok(rfs::fchown(fd, uid, gid)?)
}

/// `fchmod(fd, mode)`.
pub fn fchmod(fd: BorrowedFd, mode: u32) -> io::Result<()> {
    Ok(rfs::fchmod(fd, Mode::from_raw_mode(mode))?)
}

/// `fsetxattr(fd, name, value, 0)`.
pub fn fsetxattr(fd: BorrowedFd, name: &CStr, value: &[u8]) -> io::Result<()> {
    Ok(rfs::fsetxattr(fd, name, value, XattrFlags::empty())?)
}

/// Sets an xattr of `dir/name` itself (a symlink or special file, which cannot be opened for
/// this): `lsetxattr("/proc/self/fd/DIR/NAME")`. The magic link stands for the directory this
/// process opened, so no path under DEST is resolved again.
pub fn lsetxattrat(dir: BorrowedFd, name: &[u8], xname: &CStr, value: &[u8]) -> io::Result<()> {
    let mut path = format!("/proc/self/fd/{}/", dir.as_raw_fd()).into_bytes();
    path.extend_from_slice(name);
    let path = CString::new(path).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(rfs::lsetxattr(
        path.as_c_str(),
        xname,
        value,
        XattrFlags::empty(),
    )?)
}

/// Whether `fd` has the xattr `name` (an error other than "no such attribute" or "not
/// supported" counts as yes: the caller then takes the careful path).
pub fn has_xattr(fd: BorrowedFd, name: &CStr) -> bool {
    let mut none = [0u8; 0];
    match rfs::fgetxattr(fd, name, &mut none) {
        Ok(_) => true,
        Err(e) => !matches!(e, Errno::NODATA | Errno::OPNOTSUPP),
    }
}

/// The group owning the open file `fd`.
pub fn group_of(fd: BorrowedFd) -> io::Result<u32> {
    Ok(rfs::fstat(fd)?.st_gid)
}

/// The effective user and group of this process.
pub fn effective_owner() -> (u32, u32) {
    (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    )
}

/// The process's umask. Reading it means setting it, so this is called before any other thread
/// creates files.
pub fn umask() -> u32 {
    let old = rustix::process::umask(Mode::from_raw_mode(0o077));
    rustix::process::umask(old);
    old.as_raw_mode()
}

/// Raises the soft limit of open descriptors to the hard limit; returns the soft limit.
pub fn raise_nofile() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    // `None` is "unlimited" (RLIM_INFINITY).
    let lim = |v: Option<u64>| v.unwrap_or(u64::MAX);
    let rl = getrlimit(Resource::Nofile);
    if lim(rl.current) < lim(rl.maximum) {
        let want = Rlimit {
            current: rl.maximum,
            maximum: rl.maximum,
        };
        if setrlimit(Resource::Nofile, want).is_ok() {
            return lim(rl.maximum);
        }
    }
    lim(rl.current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_id_minus_one_means_keep_and_does_not_panic() {
        assert_eq!(ids(u32::MAX, u32::MAX), (None, None));
        let (u, g) = ids(0, 7);
        assert_eq!(
            (u.map(|u| u.as_raw()), g.map(|g| g.as_raw())),
            (Some(0), Some(7))
        );
    }

    #[test]
    fn lchmodat_changes_a_special_file_and_never_follows_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let d = open_dir_path(dir.path()).unwrap();
        std::fs::write(dir.path().join("target"), b"t").unwrap();
        std::fs::set_permissions(
            dir.path().join("target"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        symlinkat(c"target", d.as_fd(), c"link").unwrap();
        let e = lchmodat(d.as_fd(), c"link", 0o600).unwrap_err();
        assert!(is(&e, Errno::OPNOTSUPP), "{e}");
        let mode = |n: &str| {
            std::fs::symlink_metadata(dir.path().join(n))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("target"), 0o644, "the symlink was followed");
        mknodat(d.as_fd(), c"fifo", rfs::FileType::Fifo, 0o600, 0).unwrap();
        lchmodat(d.as_fd(), c"fifo", 0o1640).unwrap();
        assert_eq!(mode("fifo"), 0o1640);
    }

    #[test]
    fn open_dir_does_not_follow_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let d = open_dir_path(dir.path()).unwrap();
        mkdirat(d.as_fd(), c"real", 0o700).unwrap();
        symlinkat(c"real", d.as_fd(), c"link").unwrap();
        open_dir(d.as_fd(), c"real").unwrap();
        let e = open_dir(d.as_fd(), c"link").unwrap_err();
        assert!(is(&e, Errno::LOOP) || is(&e, Errno::NOTDIR), "{e}");
    }

    #[test]
    fn names_with_nul_are_refused() {
        assert_eq!(
            cstr(b"a\0b").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
