//! Reading an open image: stat, files read at offsets, directory streams, symlinks, xattrs.

use crate::error::{bytes_arg, copy_str, guard, read_failure, sealfs_error, Failure};
use crate::open::{sealfs_image, Opened};
use sealfs_reader::{FileType, Follow, Inode};
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

/// `flags` of `sealfs_getxattr` and `sealfs_listxattr`: a symlink at the end of the path is not
/// followed (as `lgetxattr`, `llistxattr`).
pub const SEALFS_NOFOLLOW: c_int = 1;

/// The attributes of a file, as `stat(2)` shows them on a kernel mount of the image.
#[repr(C)]
pub struct sealfs_stat {
    /// Inode number.
    pub ino: u64,
    /// Type and permission bits (`S_IFREG | 0644`, ...).
    pub mode: u32,
    /// Link count.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Allocated 512-byte units.
    pub blocks: u64,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Device numbers of a character or block device (0 otherwise).
    pub rdev_major: u32,
    /// See `rdev_major`.
    pub rdev_minor: u32,
    /// Modification time, seconds since the epoch (the image keeps one time; atime and ctime
    /// equal it on a kernel mount).
    pub mtime: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: u32,
    /// `makedev(rdev_major, rdev_minor)`, as `st_rdev`.
    pub rdev: u64,
}

fn fill_stat(inode: &Inode, st: &mut sealfs_stat) {
    let s = inode.stat();
    *st = sealfs_stat {
        ino: s.ino,
        mode: s.mode,
        nlink: s.nlink,
        uid: s.uid,
        gid: s.gid,
        size: s.size,
        blocks: s.blocks,
        blksize: s.blksize,
        rdev_major: s.rdev_major,
        rdev_minor: s.rdev_minor,
        mtime: s.mtime,
        mtime_nsec: s.mtime_nsec,
        rdev: s.rdev,
    };
}

/// The image behind a handle argument.
fn image<'a>(p: *const sealfs_image) -> Result<&'a Opened, Failure> {
    if p.is_null() {
        return Err(Failure::invalid("image is NULL"));
    }
    // SAFETY: a handle sealfs_open made, not closed while in use (documented).
    Ok(unsafe { &(*p).inner })
}

/// Resolves `path` (`/a/b` or `a/b`, from the image root) as the kernel would: "" is `ENOENT`,
/// a path ending in `/`, `/.` or `/..` must be a directory (`ENOTDIR`).
fn resolve(img: &Opened, path: &[u8], flags: c_int) -> Result<Inode, Failure> {
    let follow = if flags & SEALFS_NOFOLLOW != 0 {
        Follow::Parents
    } else {
        Follow::All
    };
    img.opened
        .image
        .resolve_posix(path, follow)
        .map_err(|e| read_failure(e, path))
}

/// -1 (reported), or the value.
fn rc<T>(r: Result<T, c_int>, ok: impl FnOnce(T) -> isize) -> isize {
    match r {
        Ok(v) => ok(v),
        Err(rc) => rc as isize,
    }
}

/// `stat` or `lstat` of `path`.
fn stat_of(
    image: *const sealfs_image,
    path: *const c_char,
    flags: c_int,
    st: *mut sealfs_stat,
    error: *mut sealfs_error,
) -> c_int {
    let r = guard(error, || {
        let img = self::image(image)?;
        let path = bytes_arg(path, "path")?;
        if st.is_null() {
            return Err(Failure::invalid("st is NULL"));
        }
        let inode = resolve(img, path, flags)?;
        // SAFETY: the caller's struct.
        fill_stat(&inode, unsafe { &mut *st });
        Ok(())
    });
    rc(r, |_| 0) as c_int
}

/// The attributes of `path` in `image` (`/a/b` or `a/b`, from the image root; symlinks followed)
/// into `*st`, as `stat(2)`. Returns 0, or -1 with `errno` and `*error` set (`ENOENT`,
/// `ENOTDIR`, `ELOOP`, `EIO` when a block failed its check, ...).
#[no_mangle]
pub extern "C" fn sealfs_stat(
    image: *const sealfs_image,
    path: *const c_char,
    st: *mut sealfs_stat,
    error: *mut sealfs_error,
) -> c_int {
    stat_of(image, path, 0, st, error)
}

/// `sealfs_stat` of `path` itself, a symlink at its end not followed (as `lstat(2)`).
#[no_mangle]
pub extern "C" fn sealfs_lstat(
    image: *const sealfs_image,
    path: *const c_char,
    st: *mut sealfs_stat,
    error: *mut sealfs_error,
) -> c_int {
    stat_of(image, path, SEALFS_NOFOLLOW, st, error)
}

/// A regular file of an image, open for reading: any number of threads may read it at once. It
/// stays readable after its image is closed.
pub struct sealfs_file {
    image: Arc<Opened>,
    inode: Inode,
    path: Vec<u8>,
}

/// Opens regular file `path` of `image` (symlinks followed) for `sealfs_pread`: 0 and the handle in
/// `*file`, or -1 (`ENOENT`, `EISDIR` for a directory, `ENXIO` for a device, FIFO or socket).
/// Close it with `sealfs_file_close`.
#[no_mangle]
pub extern "C" fn sealfs_file_open(
    image: *const sealfs_image,
    path: *const c_char,
    file: *mut *mut sealfs_file,
    error: *mut sealfs_error,
) -> c_int {
    let r = guard(error, || {
        let img = self::image(image)?;
        let path = bytes_arg(path, "path")?;
        if file.is_null() {
            return Err(Failure::invalid("file is NULL"));
        }
        let inode = resolve(img, path, 0)?;
        let shown = sealfs_reader::show_path(path);
        match inode.file_type() {
            FileType::Regular => {}
            FileType::Directory => {
                return Err(Failure::new(
                    libc::EISDIR,
                    format!("{shown}: Is a directory"),
                ))
            }
            _ => {
                return Err(Failure::new(
                    libc::ENXIO,
                    format!("{shown}: not a regular file: it has no data in the image"),
                ))
            }
        }
        // SAFETY: checked not NULL by self::image above.
        let image = unsafe { Arc::clone(&(*image).inner) };
        let handle = Box::new(sealfs_file {
            image,
            inode,
            path: path.to_vec(),
        });
        // SAFETY: checked not NULL.
        unsafe { *file = Box::into_raw(handle) };
        Ok(())
    });
    rc(r, |_| 0) as c_int
}

/// Reads up to `count` bytes of `file` at `offset` into `buf`, as `pread(2)`: returns how many
/// (fewer only at the end of the file, 0 at or past it), or -1 with `errno` and `*error` set:
/// `EIO` when a block failed its check against the digest (the message names the block's byte
/// offset in the image; other reads of the file and of other files go on working).
#[no_mangle]
pub extern "C" fn sealfs_pread(
    file: *const sealfs_file,
    buf: *mut c_void,
    count: usize,
    offset: u64,
    error: *mut sealfs_error,
) -> libc::ssize_t {
    let r = guard(error, || {
        if file.is_null() || (buf.is_null() && count > 0) {
            return Err(Failure::invalid("NULL argument"));
        }
        // SAFETY: a live handle.
        let f = unsafe { &*file };
        let img = &f.image;
        let n = f.inode.size().saturating_sub(offset).min(count as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: the caller's buffer of at least `count` bytes (n <= count).
        let out = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), n) };
        img.opened
            .image
            .read(&f.inode, offset, out)
            .map_err(|e| read_failure(e, &f.path))
    });
    rc(r, |n| n as isize)
}

/// The attributes of an open file into `*st`; returns 0 (-1 with `EINVAL` for NULL).
#[no_mangle]
pub extern "C" fn sealfs_file_stat(file: *const sealfs_file, st: *mut sealfs_stat) -> c_int {
    let r = guard(std::ptr::null_mut(), || {
        if file.is_null() || st.is_null() {
            return Err(Failure::invalid("NULL argument"));
        }
        // SAFETY: a live handle and the caller's struct.
        fill_stat(unsafe { &(*file).inode }, unsafe { &mut *st });
        Ok(())
    });
    rc(r, |_| 0) as c_int
}

/// Closes a file opened by `sealfs_file_open` (NULL is ignored).
#[no_mangle]
pub extern "C" fn sealfs_file_close(file: *mut sealfs_file) {
    if !file.is_null() {
        // SAFETY: a handle sealfs_file_open made, closed once.
        drop(unsafe { Box::from_raw(file) });
    }
}

/// An entry of a directory stream.
#[repr(C)]
pub struct sealfs_dirent {
    /// Inode number.
    pub ino: u64,
    /// File type, as `readdir(3)`'s `d_type` (`DT_REG`, `DT_DIR`, `DT_LNK`, ...).
    pub file_type: u8,
    /// Bytes of `name`, its NUL not counted.
    pub name_len: u16,
    /// The name, NUL-terminated (EROFS names are at most 255 bytes; any byte but NUL and '/').
    pub name: [c_char; 256],
}

/// A directory stream: the entries of one directory, read once at `sealfs_opendir`. Threads may
/// share one (each entry goes to one caller).
pub struct sealfs_dir {
    entries: Vec<(u64, u8, Vec<u8>)>,
    next: Mutex<usize>,
}

/// The `DT_*` value of a file type.
fn dtype(ft: Option<FileType>) -> u8 {
    match ft {
        Some(FileType::Fifo) => libc::DT_FIFO,
        Some(FileType::CharDevice) => libc::DT_CHR,
        Some(FileType::Directory) => libc::DT_DIR,
        Some(FileType::BlockDevice) => libc::DT_BLK,
        Some(FileType::Regular) => libc::DT_REG,
        Some(FileType::Symlink) => libc::DT_LNK,
        Some(FileType::Socket) => libc::DT_SOCK,
        None => libc::DT_UNKNOWN,
    }
}

/// Opens a stream over the entries of directory `path` (symlinks followed), in the image's order,
/// "." and ".." left out: 0 and the stream in `*dir`, or -1 (`ENOENT`, `ENOTDIR`, `EIO`, ...).
#[no_mangle]
pub extern "C" fn sealfs_opendir(
    image: *const sealfs_image,
    path: *const c_char,
    dir: *mut *mut sealfs_dir,
    error: *mut sealfs_error,
) -> c_int {
    let r = guard(error, || {
        let img = self::image(image)?;
        let path = bytes_arg(path, "path")?;
        if dir.is_null() {
            return Err(Failure::invalid("dir is NULL"));
        }
        let inode = resolve(img, path, 0)?;
        if !inode.is_dir() {
            return Err(Failure::new(
                libc::ENOTDIR,
                format!("{}: Not a directory", sealfs_reader::show_path(path)),
            ));
        }
        let reader = &img.opened.image;
        let entries = reader
            .read_dir_all(&inode)
            .map_err(|e| read_failure(e, path))?
            .into_iter()
            .filter(|e| e.name != b"." && e.name != b"..")
            .map(|e| (reader.ino_of(e.nid), dtype(e.file_type()), e.name))
            .collect();
        let handle = Box::new(sealfs_dir {
            entries,
            next: Mutex::new(0),
        });
        // SAFETY: checked not NULL.
        unsafe { *dir = Box::into_raw(handle) };
        Ok(())
    });
    rc(r, |_| 0) as c_int
}

/// The next entry of `dir` into `*entry`: returns 1, or 0 at the end (-1 with `EINVAL` for NULL).
#[no_mangle]
pub extern "C" fn sealfs_readdir(
    dir: *mut sealfs_dir,
    entry: *mut sealfs_dirent,
    error: *mut sealfs_error,
) -> c_int {
    let r = guard(error, || {
        if dir.is_null() || entry.is_null() {
            return Err(Failure::invalid("NULL argument"));
        }
        // SAFETY: a live stream and the caller's struct.
        let (d, out) = unsafe { (&*dir, &mut *entry) };
        let mut next = d.next.lock().unwrap_or_else(|e| e.into_inner());
        let Some((ino, t, name)) = d.entries.get(*next) else {
            return Ok(0);
        };
        *next += 1;
        out.ino = *ino;
        out.file_type = *t;
        out.name_len = name.len().min(255) as u16;
        copy_str(&mut out.name, name);
        Ok(1)
    });
    rc(r, |v| v) as c_int
}

/// Closes a directory stream (NULL is ignored).
#[no_mangle]
pub extern "C" fn sealfs_closedir(dir: *mut sealfs_dir) {
    if !dir.is_null() {
        // SAFETY: a stream sealfs_opendir made, closed once.
        drop(unsafe { Box::from_raw(dir) });
    }
}

/// Copies `data` out the way `getxattr(2)` does: its length for `size` 0, else `ERANGE` when it
/// does not fit.
fn give(data: &[u8], out: *mut c_void, size: usize, what: &[u8]) -> Result<isize, Failure> {
    if size == 0 {
        return Ok(data.len() as isize);
    }
    if data.len() > size {
        return Err(Failure::new(
            libc::ERANGE,
            format!(
                "{}: {} bytes do not fit in {size}",
                sealfs_reader::show_path(what),
                data.len()
            ),
        ));
    }
    if out.is_null() {
        return Err(Failure::invalid("buffer is NULL"));
    }
    // SAFETY: the caller's buffer of `size` bytes.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), out.cast::<u8>(), data.len()) };
    Ok(data.len() as isize)
}

/// The target of symlink `path`: with `size` 0 returns its length; otherwise copies it into `buf`
/// NUL-terminated and returns its length (NUL not counted), or -1 with `ERANGE` when `buf` has
/// not room for both; `EINVAL` when `path` is not a symlink.
#[no_mangle]
pub extern "C" fn sealfs_readlink(
    image: *const sealfs_image,
    path: *const c_char,
    buf: *mut c_char,
    size: usize,
    error: *mut sealfs_error,
) -> libc::ssize_t {
    let r = guard(error, || {
        let img = self::image(image)?;
        let path = bytes_arg(path, "path")?;
        let inode = resolve(img, path, SEALFS_NOFOLLOW)?;
        if !inode.is_symlink() {
            return Err(Failure::new(
                libc::EINVAL,
                format!("{}: not a symlink", sealfs_reader::show_path(path)),
            ));
        }
        let mut target = img
            .opened
            .image
            .readlink(&inode)
            .map_err(|e| read_failure(e, path))?;
        let len = target.len() as isize;
        if size == 0 {
            return Ok(len);
        }
        target.push(0);
        give(&target, buf.cast(), size, path)?;
        Ok(len)
    });
    rc(r, |n| n)
}

/// The value of extended attribute `name` of `path` (`flags`: `SEALFS_NOFOLLOW` for a symlink
/// itself), as `getxattr(2)`: with `size` 0 returns the value's length; otherwise copies it into
/// `value` and returns its length, or -1 with `ERANGE` (too small) or `ENODATA` (no such
/// attribute).
#[no_mangle]
pub extern "C" fn sealfs_getxattr(
    image: *const sealfs_image,
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: usize,
    flags: c_int,
    error: *mut sealfs_error,
) -> libc::ssize_t {
    let r = guard(error, || {
        let img = self::image(image)?;
        let path = bytes_arg(path, "path")?;
        let name = bytes_arg(name, "name")?;
        let inode = resolve(img, path, flags)?;
        let v = img
            .opened
            .image
            .get_xattr(&inode, name)
            .map_err(|e| read_failure(e, path))?
            .ok_or_else(|| {
                Failure::new(
                    libc::ENODATA,
                    format!(
                        "{}: no attribute {}",
                        sealfs_reader::show_path(path),
                        sealfs_reader::show_path(name)
                    ),
                )
            })?;
        give(&v, value, size, path)
    });
    rc(r, |n| n)
}

/// The names of the extended attributes of `path`, as `listxattr(2)`: each NUL-terminated, one
/// after the other; with `size` 0 returns the bytes needed; otherwise copies them into `list` and
/// returns their length, or -1 with `ERANGE` when too small.
#[no_mangle]
pub extern "C" fn sealfs_listxattr(
    image: *const sealfs_image,
    path: *const c_char,
    list: *mut c_char,
    size: usize,
    flags: c_int,
    error: *mut sealfs_error,
) -> libc::ssize_t {
    let r = guard(error, || {
        let img = self::image(image)?;
        let path = bytes_arg(path, "path")?;
        let inode = resolve(img, path, flags)?;
        let names = img
            .opened
            .image
            .list_xattrs(&inode)
            .map_err(|e| read_failure(e, path))?;
        let mut all = Vec::new();
        for n in names {
            all.extend_from_slice(&n);
            all.push(0);
        }
        give(&all, list.cast(), size, path)
    });
    rc(r, |n| n)
}
