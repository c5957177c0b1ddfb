//! Thin wrappers over the libc calls the tests need and that `std` does not offer: `l*xattr`,
//! `lchown`, `utimensat(AT_SYMLINK_NOFOLLOW)`, `mknod`, `mkfifo`.
//!
//! Every function takes a path and never follows a final symlink.

#![allow(unsafe_code, reason = "the libc calls std lacks, for test setup")]

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path contains a NUL byte")
}

fn cname(name: &[u8]) -> CString {
    CString::new(name).expect("xattr name contains a NUL byte")
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `lsetxattr(path, name, value, 0)`.
pub fn lsetxattr(path: &Path, name: &[u8], value: &[u8]) -> io::Result<()> {
    let (p, n) = (cpath(path), cname(name));
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    check(unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    })
}

/// All xattr names of `path` (not following a symlink), in the order the filesystem lists them.
pub fn llistxattr(path: &Path) -> io::Result<Vec<Vec<u8>>> {
    let p = cpath(path);
    loop {
        // SAFETY: a NULL buffer of size 0 asks for the needed size.
        let size = unsafe { libc::llistxattr(p.as_ptr(), std::ptr::null_mut(), 0) };
        if size < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; size as usize];
        if buf.is_empty() {
            return Ok(Vec::new());
        }
        // SAFETY: buf is writable for buf.len() bytes.
        let got = unsafe { libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue; // the list grew in between: ask again
            }
            return Err(e);
        }
        buf.truncate(got as usize);
        return Ok(buf
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| n.to_vec())
            .collect());
    }
}

/// The value of xattr `name` of `path` (not following a symlink).
pub fn lgetxattr(path: &Path, name: &[u8]) -> io::Result<Vec<u8>> {
    let (p, n) = (cpath(path), cname(name));
    loop {
        // SAFETY: a NULL buffer of size 0 asks for the needed size.
        let size = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
        if size < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; size as usize];
        // SAFETY: buf is writable for buf.len() bytes (a zero-length read is fine).
        let got =
            unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue;
            }
            return Err(e);
        }
        buf.truncate(got as usize);
        return Ok(buf);
    }
}

/// `lchown(path, uid, gid)`.
pub fn lchown(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let p = cpath(path);
    // SAFETY: valid NUL-terminated path.
    check(unsafe { libc::lchown(p.as_ptr(), uid, gid) })
}

/// Sets atime and mtime of `path` (not following a symlink) to `sec.nsec`.
pub fn set_mtime(path: &Path, sec: i64, nsec: i64) -> io::Result<()> {
    let p = cpath(path);
    let ts = libc::timespec {
        tv_sec: sec as libc::time_t,
        tv_nsec: nsec as _,
    };
    let times = [ts, ts];
    // SAFETY: valid path and a two-element timespec array.
    check(unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            p.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

/// `chmod(path, mode)` with all 12 permission bits (never used on symlinks).
pub fn chmod(path: &Path, mode: u32) -> io::Result<()> {
    let p = cpath(path);
    // SAFETY: valid NUL-terminated path.
    check(unsafe { libc::chmod(p.as_ptr(), mode as libc::mode_t) })
}

/// `mknod(path, mode, dev)`; `mode` includes the file type bits.
pub fn mknod(path: &Path, mode: u32, dev: u64) -> io::Result<()> {
    let p = cpath(path);
    // SAFETY: valid NUL-terminated path.
    check(unsafe { libc::mknod(p.as_ptr(), mode as libc::mode_t, dev as libc::dev_t) })
}

/// `mkfifo(path, mode)`.
pub fn mkfifo(path: &Path, mode: u32) -> io::Result<()> {
    let p = cpath(path);
    // SAFETY: valid NUL-terminated path.
    check(unsafe { libc::mkfifo(p.as_ptr(), mode as libc::mode_t) })
}

/// `makedev(major, minor)` in the C library's encoding (what `st_rdev` holds).
pub fn makedev(major: u32, minor: u32) -> u64 {
    libc::makedev(major, minor)
}

/// Effective uid of this process.
pub fn geteuid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

/// The `errno` of an I/O error, or 0.
pub fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

/// One raw directory entry as `readdir(3)` returns it, "." and ".." included.
pub struct RawDirent {
    /// Name bytes.
    pub name: Vec<u8>,
    /// `d_ino`.
    pub ino: u64,
    /// `d_type` (`DT_*`).
    pub d_type: u8,
}

/// All entries of directory `path`, in the order the filesystem returns them.
pub fn raw_readdir(path: &Path) -> io::Result<Vec<RawDirent>> {
    let p = cpath(path);
    // SAFETY: valid NUL-terminated path; the stream is closed below.
    let dir = unsafe { libc::opendir(p.as_ptr()) };
    if dir.is_null() {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let result = loop {
        // SAFETY: errno is thread-local; resetting it tells end-of-stream from an error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: dir is an open stream.
        let ent = unsafe { libc::readdir(dir) };
        if ent.is_null() {
            let e = io::Error::last_os_error();
            break if e.raw_os_error() == Some(0) {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: readdir returned a valid dirent whose d_name is NUL-terminated.
        let (name, ino, d_type) = unsafe {
            let e = &*ent;
            (
                std::ffi::CStr::from_ptr(e.d_name.as_ptr())
                    .to_bytes()
                    .to_vec(),
                e.d_ino,
                e.d_type,
            )
        };
        out.push(RawDirent { name, ino, d_type });
    };
    // SAFETY: dir is an open stream, closed once.
    unsafe { libc::closedir(dir) };
    result.map(|()| out)
}
