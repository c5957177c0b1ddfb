//! Errors of the reader, and where in the image they happened.
//!
//! Every error that comes from image bytes names its place: the inode (nid), the EROFS block and the
//! byte offset, as far as they are known. [`Error::errno`] is the one mapping to Linux error numbers
//! (for a FUSE front end), following what the kernel returns for the same condition.
//!
//! The rule for every error type of the workspace: a message says its own facts, and its cause
//! is either its [`source`](std::error::Error::source) or part of its text, never both (else a
//! chain printed whole, as `anyhow`'s `{:#}` or [`ErrorChain`] print it, says the cause twice).
//! Causes are sources here (the builder's `BuildError::Io`, which shows the system's text
//! without its errno, keeps it in its text and returns none). Print an error with
//! [`ErrorChain`] wherever its causes matter: logs, notes, the CLI's message.

use std::fmt;
use std::io;

/// A place in the image: any of inode, block and byte offset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Location {
    /// Inode number (nid) the access was made for.
    pub nid: Option<u64>,
    /// EROFS block address.
    pub block: Option<u64>,
    /// Absolute byte offset in the image.
    pub offset: Option<u64>,
}

impl Location {
    /// The image as a whole (superblock-level errors).
    pub const fn image() -> Location {
        Location {
            nid: None,
            block: None,
            offset: None,
        }
    }

    /// An access made for inode `nid`.
    pub const fn nid(nid: u64) -> Location {
        Location {
            nid: Some(nid),
            block: None,
            offset: None,
        }
    }

    /// An access at byte `offset`.
    pub const fn offset(offset: u64) -> Location {
        Location {
            nid: None,
            block: None,
            offset: Some(offset),
        }
    }

    /// This location with a block address.
    pub const fn with_block(mut self, block: u64) -> Location {
        self.block = Some(block);
        self
    }

    /// This location with a byte offset.
    pub const fn with_offset(mut self, offset: u64) -> Location {
        self.offset = Some(offset);
        self
    }
}

use crate::image::IN_METABOX as METABOX_TAG;

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        if let Some(nid) = self.nid {
            write!(f, "nid {nid}")?;
            sep = ", ";
        }
        // A metadata position in the metabox (bit 63, see `Image::meta_read`) has no image block.
        let in_metabox = self.offset.is_some_and(|o| o & METABOX_TAG != 0);
        if let Some(block) = self.block.filter(|_| !in_metabox) {
            write!(f, "{sep}block {block}")?;
            sep = ", ";
        }
        if let Some(offset) = self.offset {
            if in_metabox {
                write!(f, "{sep}metabox offset {:#x}", offset & !METABOX_TAG)?;
            } else {
                write!(f, "{sep}offset {offset:#x}")?;
            }
            sep = ", ";
        }
        if sep.is_empty() {
            f.write_str("image")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong while reading an image.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The image bytes are inconsistent (the kernel's `-EFSCORRUPTED` and friends).
    #[error("corrupted image: {what} ({at})")]
    Corrupted {
        /// What is wrong.
        what: String,
        /// Where.
        at: Location,
    },
    /// A valid image that uses something this reader does not implement.
    #[error("unsupported: {feature} ({at})")]
    Unsupported {
        /// The feature.
        feature: String,
        /// Where it was met.
        at: Location,
    },
    /// A path or name that does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A path component that is not a directory.
    #[error("not a directory: {0}")]
    NotADirectory(String),
    /// A name longer than 255 bytes.
    #[error("name too long: {0}")]
    NameTooLong(String),
    /// Too many symbolic links while resolving a path.
    #[error("too many levels of symbolic links: {0}")]
    TooManySymlinks(String),
    /// A request that does not fit the inode (for example `readlink` of a regular file).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A block does not match the Merkle tree: the image was damaged or tampered with.
    #[error("verification failed: {what} ({at})")]
    Verification {
        /// What did not match (data block, or tree level and block).
        what: String,
        /// Where.
        at: Location,
    },
    /// The byte source failed.
    #[error("I/O error ({at})")]
    Io {
        /// Where the read was.
        at: Location,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// A [`Error::Corrupted`].
    pub fn corrupted(what: impl Into<String>, at: Location) -> Error {
        Error::Corrupted {
            what: what.into(),
            at,
        }
    }

    /// An [`Error::Unsupported`].
    pub fn unsupported(feature: impl Into<String>, at: Location) -> Error {
        Error::Unsupported {
            feature: feature.into(),
            at,
        }
    }

    /// The Linux errno the kernel would return for this condition.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Corrupted { .. } => libc::EUCLEAN, // EFSCORRUPTED
            Error::Unsupported { .. } => libc::EOPNOTSUPP,
            Error::NotFound(_) => libc::ENOENT,
            Error::NotADirectory(_) => libc::ENOTDIR,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::TooManySymlinks(_) => libc::ELOOP,
            Error::InvalidArgument(_) => libc::EINVAL,
            Error::Verification { .. } => libc::EIO,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// Whether this is [`Error::Corrupted`].
    pub fn is_corrupted(&self) -> bool {
        matches!(self, Error::Corrupted { .. })
    }
}

/// Result of reader operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error with its causes, as one line: `message: cause: cause of the cause`. Each fact is said
/// once: a cause whose text the error above it already holds is left out (errors of other crates,
/// `object_store`'s and `reqwest`'s among them, often put their cause in their own text and return
/// it as their source too), and so are empty messages.
///
/// ```
/// use sealfs_reader::{ErrorChain, Error, Location};
/// let io = std::io::Error::other("connection reset");
/// let e = Error::Io { at: Location::offset(4096), source: io };
/// assert_eq!(ErrorChain(&e).to_string(), "I/O error (offset 0x1000): connection reset");
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut above = self.0.to_string();
        f.write_str(&above)?;
        let mut said_any = !above.is_empty();
        let mut next = self.0.source();
        while let Some(cause) = next {
            let text = cause.to_string();
            if !text.is_empty() && !above.contains(&text) {
                if said_any {
                    f.write_str(": ")?;
                }
                f.write_str(&text)?;
                said_any = true;
            }
            above = text;
            next = cause.source();
        }
        Ok(())
    }
}

impl fmt::Debug for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_print_what_is_known() {
        assert_eq!(Location::image().to_string(), "image");
        assert_eq!(
            Location::nid(36)
                .with_block(1)
                .with_offset(0x480)
                .to_string(),
            "nid 36, block 1, offset 0x480"
        );
        let e = Error::corrupted("bogus dirent", Location::nid(7));
        assert_eq!(e.to_string(), "corrupted image: bogus dirent (nid 7)");
        assert_eq!(e.errno(), libc::EUCLEAN);
    }

    /// An error whose text holds its cause, which it also returns (as many crates' errors do).
    #[derive(Debug)]
    struct Saying(io::Error);

    impl fmt::Display for Saying {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "request failed: {}", self.0)
        }
    }

    impl std::error::Error for Saying {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_chain_says_each_cause_once() {
        let e = Error::Io {
            at: Location::offset(0x1000),
            source: io::Error::other(Saying(io::Error::other("connection refused"))),
        };
        // The io::Error shows the error it wraps, and its source is that error's source.
        assert_eq!(
            ErrorChain(&e).to_string(),
            "I/O error (offset 0x1000): request failed: connection refused"
        );
        let plain = io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(
            ErrorChain(&plain).to_string(),
            "No such file or directory (os error 2)"
        );
    }
}
