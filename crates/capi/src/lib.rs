//! `libsealfs`: the C library of sealfs. Open a sealed (or plain) EROFS image from a path or an
//! `http://`, `https://` or `s3://` URL, with a digest or keys, and read it: stat, directories,
//! pread-style reads, symlinks, xattrs, and the trust the open established. Every block is checked
//! against the image digest before it is used.
//!
//! # Design
//!
//! - **Translation only.** Each function is one call of the libraries the `sealfs` command uses:
//!   opening is [`sealfs_remote::open_cached`], reads are [`sealfs_reader::Image`]'s, mounting
//!   (in this process) [`sealfs_fuse::mount::mount`]. This crate
//!   turns C strings into paths, options into [`sealfs_reader::OpenOptions`], and errors into
//!   `errno` values with a message.
//! - **No global state.** Everything lives in the handles the caller holds (`sealfs_image`,
//!   `sealfs_file`, `sealfs_dir`, `sealfs_mount_handle`); errors come back in `errno` and in the caller's own
//!   `sealfs_error`, never in library-wide state.
//! - **Thread-safe handles.** An image and a file may be used by any number of threads at once
//!   (the reader is `Sync`); a directory stream serializes its readers.
//! - **No panic crosses the boundary**: each entry point catches one and reports `EIO`.
//!
//! The header, `include/sealfs.h`, is generated from this crate by cbindgen (build.rs), the doc
//! comments here becoming its Doxygen comments; `install.sh` installs it with the libraries and a
//! pkg-config file.

#![allow(
    unsafe_code,
    reason = "a C ABI: every entry point takes raw pointers from C callers"
)]
#![allow(
    clippy::not_unsafe_ptr_arg_deref,
    reason = "entry points called from C, whose pointer contracts the header states"
)]
#![allow(
    non_camel_case_types,
    reason = "the C names of the types (sealfs_image, sealfs_error, ...)"
)]

mod error;
mod mount;
mod open;
mod read;

pub use error::{sealfs_error, SEALFS_ERROR_MESSAGE_SIZE};
pub use mount::{
    sealfs_mount, sealfs_mount_handle, sealfs_mount_options, sealfs_mount_stats, sealfs_unmount,
    SEALFS_MOUNT_KERNEL_READ_AHEAD, SEALFS_XATTRS_AUTO, SEALFS_XATTRS_OFF, SEALFS_XATTRS_ON,
};
pub use open::{
    sealfs_close, sealfs_get_trust, sealfs_image, sealfs_open, sealfs_open_options, sealfs_trust,
    SEALFS_AUTHORITY_DIGEST, SEALFS_AUTHORITY_KEY, SEALFS_AUTHORITY_NONE, SEALFS_CHECKER_KERNEL,
    SEALFS_CHECKER_NONE, SEALFS_CHECKER_READER, SEALFS_OPEN_FILL, SEALFS_OPEN_FILL_AUTO,
    SEALFS_OPEN_NO_CACHE, SEALFS_OPEN_SELF_CONSISTENT, SEALFS_TRUST_AUTHENTICATED,
    SEALFS_TRUST_SELF_CONSISTENT, SEALFS_TRUST_UNVERIFIED, SEALFS_VERIFY_FULL, SEALFS_VERIFY_NONE,
};
pub use read::{
    sealfs_closedir, sealfs_dir, sealfs_dirent, sealfs_file, sealfs_file_close, sealfs_file_open,
    sealfs_file_stat, sealfs_getxattr, sealfs_listxattr, sealfs_lstat, sealfs_opendir,
    sealfs_pread, sealfs_readdir, sealfs_readlink, sealfs_stat, SEALFS_NOFOLLOW,
};

/// The library's version, `MAJOR.MINOR.PATCH` (a static string).
#[no_mangle]
pub extern "C" fn sealfs_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
