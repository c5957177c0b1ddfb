//! Build errors: every error names the source path (or option) that caused it.

use std::io;
use std::path::PathBuf;

/// Why a build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// An I/O operation on a source or output path failed.
    #[error("{}: {op}: {}", sealfs_text::escape_path(path), os_error_text(err))]
    Io {
        /// The path the operation was on.
        path: PathBuf,
        /// What was being done (e.g. "read", "list directory").
        op: &'static str,
        /// The underlying error; its text is part of this error's (not chained, so it prints once).
        err: io::Error,
    },
    /// A source file changed between scanning and copying.
    #[error(
        "{}: changed while being read ({what}); the image would not match the tree",
        sealfs_text::escape_path(path)
    )]
    Changed {
        /// The file.
        path: PathBuf,
        /// What differed.
        what: String,
    },
    /// A source path vanished during the build.
    #[error("{}: vanished during the build", sealfs_text::escape_path(path))]
    Vanished {
        /// The path.
        path: PathBuf,
    },
    /// The source holds something EROFS cannot represent.
    #[error("{}: {what}", sealfs_text::escape_path(path))]
    Unsupported {
        /// The path.
        path: PathBuf,
        /// What cannot be stored.
        what: String,
    },
    /// The source is not a directory.
    #[error("{}: source is not a directory", sealfs_text::escape_path(path))]
    NotADirectory {
        /// The source path.
        path: PathBuf,
    },
    /// The input is not an EROFS image this can seal.
    #[error("{}: not a plain EROFS image: {what}", sealfs_text::escape_path(path))]
    NotAnImage {
        /// The path.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The image already carries a seal.
    #[error("{}: already sealed", sealfs_text::escape_path(path))]
    AlreadySealed {
        /// The path.
        path: PathBuf,
    },
    /// An option value is invalid.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// The image exceeds a format limit.
    #[error("image too large: {0}")]
    TooLarge(String),
    /// A source other than a directory (an archive, an image) could not be read; the error
    /// names the input and where in it.
    #[error("{0}")]
    Source(Box<dyn std::error::Error + Send + Sync>),
}

impl BuildError {
    /// An error of a source (an importer's own error type).
    pub fn from_source(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        BuildError::Source(Box::new(e))
    }

    /// An I/O error on `path` (for sources outside this crate).
    pub fn io_error(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Self {
        BuildError::io(path, op, source)
    }

    /// An I/O error on `path`; a missing path becomes [`BuildError::Vanished`] when `may_vanish`.
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Self {
        BuildError::Io {
            path: path.into(),
            op,
            err: source,
        }
    }

    /// Like [`BuildError::io`], but a missing path means it vanished after it was listed.
    pub(crate) fn io_listed(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            BuildError::Vanished { path: path.into() }
        } else {
            BuildError::io(path, op, source)
        }
    }
}

/// The text of an OS error, without the ` at path "..."` the tempfile crate appends (the path is already
/// in the message).
fn os_error_text(err: &io::Error) -> String {
    let text = err.to_string();
    match text.split_once(" at path \"") {
        Some((head, _)) => head.to_string(),
        None => text,
    }
}

/// Result of a build step.
pub type Result<T> = std::result::Result<T, BuildError>;
