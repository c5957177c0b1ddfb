//! The libraries' errors as Python exceptions: one mapping, used by every call.
//!
//! The exception classes live in `sealfs/_errors.py` (an `OSError` subclass with a second base
//! cannot be made with pyo3's `create_exception!`); they are imported when first raised.
//!
//! | library error | Python |
//! |---|---|
//! | a block failed its check ([`sealfs_reader::Error::Verification`]) | `VerificationError` (`OSError`, `errno.EIO`), the message naming the block, `filename` the file |
//! | damaged image bytes or seal ([`sealfs_reader::Error::Corrupted`], [`OpenError::Seal`], not EROFS) | `CorruptedImageError` (`OSError`, `errno.EUCLEAN`) |
//! | a path that does not exist, is not a directory, ... | the `OSError` subclass of the kernel's errno (`FileNotFoundError`, `NotADirectoryError`, ...) |
//! | the image's file or server failed ([`sealfs_reader::Error::Io`], [`OpenError::Io`]) | `OSError` with the system's errno (`EIO` when it has none) |
//! | wrong digest, no signature by the keys given, a URL without digest or key | `DigestMismatchError`, `SignatureError`, `OpenRefusedError` |

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use sealfs_reader::{show_path, Error, ErrorChain, OpenError};

pyo3::import_exception!(sealfs._errors, VerificationError);
pyo3::import_exception!(sealfs._errors, CorruptedImageError);
pyo3::import_exception!(sealfs._errors, OpenRefusedError);
pyo3::import_exception!(sealfs._errors, DigestMismatchError);
pyo3::import_exception!(sealfs._errors, SignatureError);
pyo3::import_exception!(sealfs._errors, BuildError);

/// The text of an errno, as `strerror` gives it (what Python's own `OSError`s say).
fn strerror(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // "No such file or directory (os error 2)": the errno is shown by Python already.
    match text.rfind(" (os error") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// A reader error met on `path` (the path in the image, as asked).
pub fn read_error(e: Error, path: &[u8]) -> PyErr {
    let file = show_path(path);
    let errno = e.errno();
    match e {
        Error::Verification { .. } => VerificationError::new_err((errno, e.to_string(), file)),
        Error::Corrupted { .. } => CorruptedImageError::new_err((errno, e.to_string(), file)),
        Error::Unsupported { .. } | Error::Io { .. } => {
            PyOSError::new_err((errno, e.to_string(), file))
        }
        // The path asked for says where; the errno's text says what, as Python's own do.
        _ => PyOSError::new_err((errno, strerror(errno), file)),
    }
}

/// An error of the system call `errno` on `path` (a reader error the bindings raise themselves:
/// `EISDIR` for reading a directory, `ENODATA` for an absent xattr).
pub fn errno_error(errno: i32, path: &[u8]) -> PyErr {
    PyOSError::new_err((errno, strerror(errno), show_path(path)))
}

/// An open that failed.
pub fn open_error(e: OpenError) -> PyErr {
    match e {
        OpenError::Io { name, what, source } => {
            let errno = source
                .raw_os_error()
                .unwrap_or_else(|| match source.kind() {
                    std::io::ErrorKind::NotFound => libc::ENOENT,
                    std::io::ErrorKind::InvalidInput => libc::EINVAL,
                    _ => libc::EIO,
                });
            PyOSError::new_err((errno, format!("{what}: {source}"), name))
        }
        OpenError::Source(source) => {
            let errno = source
                .raw_os_error()
                .unwrap_or_else(|| match source.kind() {
                    std::io::ErrorKind::NotFound => libc::ENOENT,
                    std::io::ErrorKind::InvalidInput => libc::EINVAL,
                    _ => libc::EIO,
                });
            PyOSError::new_err((errno, ErrorChain(&source).to_string()))
        }
        OpenError::NotErofs { .. } | OpenError::Seal(_) => {
            CorruptedImageError::new_err((libc::EUCLEAN, e.to_string()))
        }
        OpenError::Image { name, source } => {
            let (errno, text) = (source.errno(), format!("open: {source}"));
            match source {
                Error::Verification { .. } => VerificationError::new_err((errno, text, name)),
                Error::Io { .. } => PyOSError::new_err((errno, text, name)),
                _ => CorruptedImageError::new_err((errno, text, name)),
            }
        }
        OpenError::DigestMismatch {
            ref expected,
            ref actual,
            ..
        } => {
            let (expected, actual) = (expected.to_string(), actual.to_string());
            DigestMismatchError::new_err((e.to_string(), expected, actual))
        }
        OpenError::Signature { .. } => SignatureError::new_err(e.to_string()),
        OpenError::Refused(_) => OpenRefusedError::new_err(e.to_string()),
        e => PyOSError::new_err((libc::EIO, e.to_string())),
    }
}

/// An argument that cannot be used (a malformed digest, an unknown option value).
pub fn bad_argument(what: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(what.to_string())
}

/// A key file that cannot be read.
pub fn key_error(what: &str, e: sealfs_trust::KeyError) -> PyErr {
    PyValueError::new_err(format!("{what}: {e}"))
}
