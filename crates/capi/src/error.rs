//! Errors: an `errno` value and a message, in `errno` and in the caller's `sealfs_error`.
//!
//! | library error | errno |
//! |---|---|
//! | a block failed its check against the digest | `EIO` |
//! | damaged image bytes, a damaged seal, not an EROFS image | `EUCLEAN` (the kernel's `EFSCORRUPTED`) |
//! | a missing path, not a directory, a name too long, too many symlinks | `ENOENT`, `ENOTDIR`, `ENAMETOOLONG`, `ELOOP` |
//! | the image's file or server failed | the system's errno (`EIO` when there is none) |
//! | another digest than the one given, no signature by the keys given | `EKEYREJECTED` |
//! | refused otherwise (a URL without digest or key, a digest for an unsealed image) | `EACCES` |
//! | an argument that cannot be used | `EINVAL` |

use sealfs_reader::{Error, OpenError};
use std::ffi::{c_char, c_int};

/// Bytes of `sealfs_error::message`, its NUL included.
pub const SEALFS_ERROR_MESSAGE_SIZE: usize = 1024;

/// What went wrong, for the caller to keep: every function that can fail takes a pointer to one
/// (or NULL) and fills it when it fails. `errno` is set to the same code.
#[repr(C)]
pub struct sealfs_error {
    /// The `errno` value (`EIO` for a block that failed its check, `ENOENT` for a missing path,
    /// `EKEYREJECTED` for an image refused at open, ...).
    pub code: c_int,
    /// What happened and where, NUL-terminated (the path, and for a failed check the block's
    /// byte offset in the image); cut to fit.
    pub message: [c_char; SEALFS_ERROR_MESSAGE_SIZE],
}

/// An error on its way to C: errno and message.
pub struct Failure {
    pub code: c_int,
    pub message: String,
}

impl Failure {
    /// `code` with `message`.
    pub fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A bad argument.
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(libc::EINVAL, message)
    }
}

/// A reader error met on `path`.
pub fn read_failure(e: Error, path: &[u8]) -> Failure {
    Failure::new(
        e.errno(),
        format!("{}: {e}", sealfs_reader::show_path(path)),
    )
}

/// An open that failed.
pub fn open_failure(e: OpenError) -> Failure {
    let code = match &e {
        OpenError::Io { source, .. } => source.raw_os_error().unwrap_or(match source.kind() {
            std::io::ErrorKind::NotFound => libc::ENOENT,
            _ => libc::EIO,
        }),
        OpenError::Source(source) => source.raw_os_error().unwrap_or(match source.kind() {
            std::io::ErrorKind::NotFound => libc::ENOENT,
            _ => libc::EIO,
        }),
        OpenError::NotErofs { .. } | OpenError::Seal(_) => libc::EUCLEAN,
        OpenError::Image { source, .. } => source.errno(),
        OpenError::DigestMismatch { .. } | OpenError::Signature { .. } => libc::EKEYREJECTED,
        OpenError::Refused(_) => libc::EACCES,
        _ => libc::EIO,
    };
    let message = sealfs_reader::ErrorChain(&e).to_string();
    Failure::new(code, message)
}

/// Sets `errno` and fills `*error` (when not NULL); returns -1.
pub fn report(error: *mut sealfs_error, f: Failure) -> c_int {
    // SAFETY: __errno_location gives this thread's errno.
    unsafe { *libc::__errno_location() = f.code };
    if !error.is_null() {
        // SAFETY: the caller passes NULL or a pointer to a sealfs_error it owns.
        let e = unsafe { &mut *error };
        e.code = f.code;
        let bytes = f.message.as_bytes();
        let n = bytes.len().min(SEALFS_ERROR_MESSAGE_SIZE - 1);
        for (dst, &src) in e.message.iter_mut().zip(&bytes[..n]) {
            *dst = src as c_char;
        }
        e.message[n] = 0;
    }
    -1
}

/// Runs an entry point's body: its failure (or a panic, as `EIO`) is reported through `error`.
pub fn guard<T>(
    error: *mut sealfs_error,
    body: impl FnOnce() -> Result<T, Failure>,
) -> Result<T, c_int> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(f)) => Err(report(error, f)),
        Err(_) => Err(report(
            error,
            Failure::new(libc::EIO, "internal error: the library panicked"),
        )),
    }
}

/// The bytes of a C string argument (`what` names it in the error for NULL).
pub fn bytes_arg<'a>(p: *const c_char, what: &str) -> Result<&'a [u8], Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string that outlives the call.
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes())
}

/// An optional C string argument, as a host path.
pub fn path_arg(p: *const c_char) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if p.is_null() {
        return None;
    }
    // SAFETY: as in bytes_arg.
    let b = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
    Some(std::ffi::OsStr::from_bytes(b).into())
}

/// Copies `s` into the fixed C buffer `dst` (NUL-terminated, cut to fit).
pub fn copy_str(dst: &mut [c_char], s: &[u8]) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s[..n]) {
        *d = b as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}
