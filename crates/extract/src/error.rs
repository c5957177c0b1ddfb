//! What can go wrong, typed: errors (something was not extracted, or extraction could not run) and
//! warnings (something was extracted without all it carries in the image).
//!
//! Every message names where: the path in the image, or the path in the destination
//! (`DEST/relative/path`). An error's [`Display`](std::fmt::Display) is its own context only; the
//! cause (a [`sealfs_reader::Error`] or an [`io::Error`]) is its [`source`](std::error::Error::source),
//! so printing the chain joined by ": " (as `anyhow`'s `{:#}` does) gives the full message.

use crate::show;
use sealfs_reader::FileType;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// An error of [`extract`](crate::extract). Returned as `Err` when extraction could not start;
/// collected in [`Summary::errors`](crate::Summary::errors) when it went on after it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    /// The image could not be read there: corruption, a verification failure, a path that does not
    /// exist, an I/O error of the image file. A regular file whose data this hits is removed again.
    #[error("{context}")]
    Image {
        /// What was being read: the path in the image, and the step.
        context: String,
        /// The reader's error.
        #[source]
        source: sealfs_reader::Error,
    },
    /// The image holds something extraction refuses or that contradicts itself: an unsafe name,
    /// a name twice in a directory, a directory cycle, "." or ".." naming another inode, too deep a
    /// nesting, file data shorter than the file. Like [`ExtractError::Image`], the image is at fault.
    #[error("{0}")]
    Refused(String),
    /// Writing to the destination failed (a local error: permissions, space, a file system that
    /// refuses what is asked).
    #[error("{context}")]
    Local {
        /// Where in the destination, and the step.
        context: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The destination exists, is not empty, and [`ExtractOptions::overwrite`](crate::ExtractOptions::overwrite)
    /// was not given.
    #[error("{}: not empty", sealfs_reader::show_path(std::os::unix::ffi::OsStrExt::as_bytes(.0.as_os_str())))]
    DestNotEmpty(PathBuf),
    /// The request cannot be carried out as given (a path that cannot name a file in the
    /// destination, a destination path with a NUL byte).
    #[error("{0}")]
    Invalid(String),
    /// The worker threads could not be started.
    #[error("starting worker threads")]
    Threads(#[source] rayon::ThreadPoolBuildError),
}

impl ExtractError {
    /// Whether the image is at fault ([`ExtractError::Image`], [`ExtractError::Refused`]) rather
    /// than the destination or the request. A file whose data copy ends in such an error is
    /// removed: no wrong bytes are left.
    pub fn is_image_fault(&self) -> bool {
        matches!(self, ExtractError::Image { .. } | ExtractError::Refused(_))
    }

    pub(crate) fn image(context: impl Into<String>, source: sealfs_reader::Error) -> Self {
        ExtractError::Image {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn local(context: impl Into<String>, source: io::Error) -> Self {
        ExtractError::Local {
            context: context.into(),
            source,
        }
    }
}

/// Something extracted without all it carries in the image, or not extracted for a reason that
/// is no error of its own. Collected in [`Summary::warnings`](crate::Summary::warnings), in no
/// fixed order except that [`Warning::XattrsNeedRoot`] comes last.
#[derive(Debug)]
#[non_exhaustive]
pub enum Warning {
    /// The destination refused an xattr (for example a value larger than the file system takes:
    /// ext4 without `ea_inode` refuses values over about 4 KiB). Counted in
    /// [`Summary::xattrs_refused`](crate::Summary::xattrs_refused): not restored.
    XattrNotSet {
        /// The file, `DEST/relative/path`.
        path: String,
        /// The xattr's name.
        name: Vec<u8>,
        /// Why it was refused.
        error: io::Error,
    },
    /// A device was not created: only root can make devices.
    DeviceNeedsRoot {
        /// Where it would be, `DEST/relative/path`.
        path: String,
        /// Character or block device.
        file_type: FileType,
        /// Device major number.
        major: u32,
        /// Device minor number.
        minor: u32,
    },
    /// A file (or another name of it) was removed, or not made, because its data could not be read
    /// from the image (the error is in [`Summary::errors`](crate::Summary::errors)).
    Removed {
        /// The name, `DEST/relative/path`.
        path: String,
    },
    /// Another name of an inode was not made because its first name was not created.
    NotLinked {
        /// The name not made, `DEST/relative/path`.
        path: String,
        /// The first name, `DEST/relative/path`.
        first: String,
    },
    /// The kernel's fs-verity could not be turned on for a file (the destination file system has
    /// none: ext4 needs `tune2fs -O verity`, or it refused). Counted in
    /// [`Summary::verity_refused`](crate::Summary::verity_refused): not restored.
    VerityNotEnabled {
        /// The file, `DEST/relative/path`.
        path: String,
        /// Why.
        error: io::Error,
    },
    /// The fs-verity digest the kernel measured for a file differs from the one the image vouches
    /// for (or there was none to compare with). Counted in
    /// [`Summary::verity_mismatch`](crate::Summary::verity_mismatch): not restored.
    VerityMismatch {
        /// The file, `DEST/relative/path`.
        path: String,
        /// The digest the image vouches for, or why there is none.
        expected: Result<sealfs_reader::Digest, String>,
        /// What the kernel measured (`None`: nothing, fs-verity is not on).
        measured: Option<sealfs_reader::Digest>,
    },
    /// `trusted.*` and `security.*` xattrs were not set: only root may set them.
    XattrsNeedRoot {
        /// How many.
        count: u64,
    },
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::XattrNotSet { path, name, error } => {
                write!(f, "{path}: xattr {} not set: {error}", show(name))
            }
            Warning::DeviceNeedsRoot {
                path,
                file_type,
                major,
                minor,
            } => write!(
                f,
                "{path}: {} {major}:{minor} not created: only root can make devices",
                file_type.name()
            ),
            Warning::Removed { path } => {
                write!(
                    f,
                    "{path}: removed: its data could not be read from the image"
                )
            }
            Warning::NotLinked { path, first } => {
                write!(
                    f,
                    "{path}: not linked: its first name {first} was not created"
                )
            }
            Warning::VerityNotEnabled { path, error } => {
                write!(f, "{path}: fs-verity not turned on: {error}")
            }
            Warning::VerityMismatch {
                path,
                expected,
                measured,
            } => {
                let measured = measured.map_or("nothing".into(), |d| d.to_string());
                match expected {
                    Ok(d) => write!(
                        f,
                        "{path}: the kernel measures fs-verity digest {measured}, the image vouches for {d}"
                    ),
                    Err(why) => write!(f, "{path}: fs-verity digest {measured} not checked: {why}"),
                }
            }
            Warning::XattrsNeedRoot { count } => write!(
                f,
                "{count} trusted.*/security.* xattrs not set: only root may set them"
            ),
        }
    }
}
