//! Mounting an image over FUSE in the calling process (`sealfs_mount`, `sealfs_unmount`): a
//! translation of [`sealfs_fuse::mount::mount`], with the options of `sealfs mount`.

use crate::error::{bytes_arg, guard, path_arg, sealfs_error, Failure};
use crate::open::sealfs_image;
use sealfs_fuse::mount::{
    self as fmount, LogTo, MountError, MountHandle, MountImage, MountOptions,
};
use sealfs_fuse::XattrMode;
use std::ffi::{c_char, c_int, c_uint};

/// `sealfs_mount_options::xattrs`: extended attributes are answered from the image until a
/// background read of every inode finds it has none, then the kernel is told there are none
/// (the default; `sealfs mount --xattrs=auto`).
pub const SEALFS_XATTRS_AUTO: c_int = 0;
/// `sealfs_mount_options::xattrs`: every request is answered from the image.
pub const SEALFS_XATTRS_ON: c_int = 1;
/// `sealfs_mount_options::xattrs`: the mount shows none.
pub const SEALFS_XATTRS_OFF: c_int = 2;
/// `sealfs_mount_options::flags`: leave the kernel's readahead for the mount as it is (128 KiB)
/// instead of setting `read_ahead`.
pub const SEALFS_MOUNT_KERNEL_READ_AHEAD: c_uint = 1;

/// How `sealfs_mount` mounts an image: the options of `sealfs mount`. All zeros (`{0}`) means
/// the defaults: only the calling user may use the mount, one serving thread per CPU (at least
/// 2), a readahead of 1 MiB, failed reads logged to standard error.
#[repr(C)]
pub struct sealfs_mount_options {
    /// Mount options, comma-separated (`sealfs mount -o`), or NULL: `allow_other` (every user may
    /// use the mount), `allow_root`, `nodev`, `nosuid`, `noexec`, `noatime` (and `dev`, `suid`,
    /// `exec`, `atime`), `fsname=NAME`; `ro` and `default_permissions` are always on; `rw` and
    /// anything else are refused (`EINVAL`).
    pub options: *const c_char,
    /// Threads serving requests; 0 for the default (one per CPU, at least 2).
    pub threads: c_uint,
    /// The kernel's readahead for the mount, in bytes; 0 for the default (1 MiB). Setting it
    /// needs root (other users' mounts keep the kernel's).
    pub read_ahead: u64,
    /// `SEALFS_XATTRS_AUTO` (0), `SEALFS_XATTRS_ON` or `SEALFS_XATTRS_OFF`.
    pub xattrs: c_int,
    /// `SEALFS_MOUNT_KERNEL_READ_AHEAD`, or 0.
    pub flags: c_uint,
    /// A file failed reads are appended to (once each), or NULL for standard error.
    pub log: *const c_char,
}

/// An image mounted by `sealfs_mount`, served by threads of this process until
/// `sealfs_unmount`.
pub struct sealfs_mount_handle {
    handle: MountHandle,
}

/// A mount error as a failure: the library's errno and chain of causes.
fn mount_failure(e: MountError) -> Failure {
    Failure::new(e.errno(), sealfs_reader::ErrorChain(&e).to_string())
}

/// The library's options for `o` (NULL: the defaults), the source named after `location`.
fn options(
    o: *const sealfs_mount_options,
    location: &std::path::Path,
) -> Result<(MountOptions, XattrMode, LogTo), Failure> {
    let mut options = MountOptions {
        fsname: Some(fmount::source_name(location)),
        ..MountOptions::default()
    };
    if o.is_null() {
        return Ok((options, XattrMode::Auto, LogTo::Stderr));
    }
    // SAFETY: the caller passes NULL or a pointer to options that outlive the call.
    let o = unsafe { &*o };
    if !o.options.is_null() {
        let list = std::str::from_utf8(bytes_arg(o.options, "options")?)
            .map_err(|_| Failure::invalid("options: not UTF-8"))?;
        options.add_options(list).map_err(mount_failure)?;
    }
    if o.threads != 0 {
        options.threads = Some(o.threads as usize);
    }
    if o.flags & !SEALFS_MOUNT_KERNEL_READ_AHEAD != 0 {
        return Err(Failure::invalid(format!(
            "flags: unknown bits {:#x}",
            o.flags & !SEALFS_MOUNT_KERNEL_READ_AHEAD
        )));
    }
    if o.flags & SEALFS_MOUNT_KERNEL_READ_AHEAD != 0 {
        options.read_ahead = 0;
    } else if o.read_ahead != 0 {
        options.read_ahead = o.read_ahead;
    }
    let xattrs = match o.xattrs {
        SEALFS_XATTRS_AUTO => XattrMode::Auto,
        SEALFS_XATTRS_ON => XattrMode::On,
        SEALFS_XATTRS_OFF => XattrMode::Off,
        v => {
            return Err(Failure::invalid(format!(
                "xattrs: {v} is not SEALFS_XATTRS_AUTO, SEALFS_XATTRS_ON or SEALFS_XATTRS_OFF"
            )))
        }
    };
    let log = match path_arg(o.log) {
        Some(p) => LogTo::append(&p).map_err(|e| {
            Failure::new(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("log {}: {e}", sealfs_text::escape_path(&p)),
            )
        })?,
        None => LogTo::Stderr,
    };
    Ok((options, xattrs, log))
}

/// Mounts `image` read-only on directory `mountpoint` over FUSE, as `sealfs mount` does, but
/// served by background threads of this process (no daemon) until `sealfs_unmount`. The image is
/// opened again for the mount as `sealfs_open` opened it (the same digest, keys and cache, with a
/// mount's larger caches) and must have the same digest (else `EKEYREJECTED`); `image` itself may
/// be closed meanwhile. Every read through the mount is checked as the image's trust says: a
/// block that fails its check fails that read with `EIO` (logged once), other files read fine.
///
/// On success stores the handle in `*mount` and returns 0; on failure returns -1 with `errno`
/// set and `*error` filled (when not NULL): `ENOTDIR` for a mount point that is not a directory,
/// `ENOTCONN` for a stale FUSE mount there (`sealfs umount` it), `EINVAL` for an unknown or `rw`
/// option, the kernel's errno when it refuses the mount (`EPERM`, `ENODEV` without
/// `/dev/fuse`).
#[no_mangle]
pub extern "C" fn sealfs_mount(
    image: *const sealfs_image,
    mountpoint: *const c_char,
    options: *const sealfs_mount_options,
    mount: *mut *mut sealfs_mount_handle,
    error: *mut sealfs_error,
) -> c_int {
    let r = guard(error, || {
        if image.is_null() || mount.is_null() {
            return Err(Failure::invalid("NULL argument"));
        }
        let mountpoint =
            path_arg(mountpoint).ok_or_else(|| Failure::invalid("mountpoint is NULL"))?;
        // SAFETY: a live handle.
        let img = unsafe { &*image };
        let spec = &img.inner.spec;
        let (mount_options, xattrs, log) = self::options(options, &spec.location)?;
        let open_options = fmount::mount_open_options(&spec.options);
        let (opened, remote) = spec.open_with(&open_options)?;
        let (was, now) = (img.inner.opened.trust.digest(), opened.trust.digest());
        if was != now {
            return Err(Failure::new(
                libc::EKEYREJECTED,
                format!(
                    "{}: opened again to mount, the image is {}, not the {} it was",
                    sealfs_text::escape_path(&spec.location),
                    now.map_or("unverified".into(), |d| d.to_string()),
                    was.map_or("unverified image".into(), |d| d.to_string()),
                ),
            ));
        }
        // A remote image read through the cache: its metadata fetched ahead, as `sealfs mount`.
        let warm = remote.is_some() && spec.cache.is_some();
        let mut served = MountImage::new(opened);
        served.warm = warm;
        served.fill = spec.options.fill;
        served.xattrs = match xattrs {
            XattrMode::Auto if remote.is_some() && !warm => XattrMode::On,
            x => x,
        };
        fmount::mount(served, &mountpoint, &mount_options, log).map_err(mount_failure)
    });
    match r {
        Ok(handle) => {
            // SAFETY: checked not NULL above.
            unsafe { *mount = Box::into_raw(Box::new(sealfs_mount_handle { handle })) };
            0
        }
        Err(rc) => rc,
    }
}

/// Unmounts a mount made by `sealfs_mount` and frees its handle (NULL is ignored: 0). When files
/// are open on it (`EBUSY` for `umount`), it is detached lazily instead: it leaves the file system
/// tree at once, the files open keep working until closed. Never waits for them (a thread of
/// this process may hold them): the threads that served the mount end, and are joined, once the
/// last is closed. With nothing open, every thread of the mount has ended when this returns. Returns 0; -1 with `errno` and `*error` when the system refuses (the handle
/// then stays valid and mounted: call again, or `sealfs_unmount` it later).
#[no_mangle]
pub extern "C" fn sealfs_unmount(
    mount: *mut sealfs_mount_handle,
    error: *mut sealfs_error,
) -> c_int {
    if mount.is_null() {
        return 0;
    }
    // SAFETY: a handle sealfs_mount made, not yet unmounted.
    let m = unsafe { &mut *mount };
    match guard(error, || m.handle.detach().map_err(mount_failure)) {
        Ok(()) => {
            // SAFETY: as above; its session is gone, so dropping it does not wait.
            drop(unsafe { Box::from_raw(mount) });
            0
        }
        Err(rc) => rc,
    }
}

/// The mount's counters as `sealfs stats --json` prints them (a JSON object: requests, bytes read
/// and verified, failed reads, `trust`), NUL-terminated into `buf` of `size` bytes. Returns the
/// length of the JSON text (without its NUL; if it is `size` or more, the text was cut: call
/// again with a larger buffer), or -1 with `errno` and `*error`.
#[no_mangle]
pub extern "C" fn sealfs_mount_stats(
    mount: *const sealfs_mount_handle,
    buf: *mut c_char,
    size: usize,
    error: *mut sealfs_error,
) -> libc::ssize_t {
    let r = guard(error, || {
        if mount.is_null() || (buf.is_null() && size != 0) {
            return Err(Failure::invalid("NULL argument"));
        }
        // SAFETY: a live handle.
        let m = unsafe { &*mount };
        let text = m.handle.stats().map_err(mount_failure)?.to_string();
        if size != 0 {
            // SAFETY: the caller's buffer of `size` bytes.
            let out = unsafe { std::slice::from_raw_parts_mut(buf, size) };
            crate::error::copy_str(out, text.as_bytes());
        }
        Ok(text.len())
    });
    match r {
        Ok(n) => n as libc::ssize_t,
        Err(rc) => rc as libc::ssize_t,
    }
}
