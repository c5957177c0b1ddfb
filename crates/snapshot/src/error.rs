//! The snapshotter's errors, and the one mapping of them to gRPC status codes (containerd turns
//! `NotFound`, `AlreadyExists` and `FailedPrecondition` into its own errdefs, which its unpacker
//! relies on: a layer whose commit answers `AlreadyExists` is one it already has).

use std::path::PathBuf;

/// What went wrong, naming the snapshot key, path or store operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No snapshot has this key or name.
    #[error("snapshot {} does not exist", sealfs_text::Escaped(.0.as_bytes()))]
    NotFound(String),
    /// A snapshot with this key or name exists already.
    #[error("snapshot {} already exists", sealfs_text::Escaped(.0.as_bytes()))]
    AlreadyExists(String),
    /// The call does not apply to the snapshot as it is (e.g. committing a view, removing a parent).
    #[error("{0}")]
    FailedPrecondition(String),
    /// A request field the snapshotter cannot take.
    #[error("{0}")]
    InvalidArgument(String),
    /// The metadata store failed.
    #[error("metadata store: {what}: {source}")]
    Store {
        /// The operation.
        what: &'static str,
        /// Why.
        source: Box<redb::Error>,
    },
    /// A record in the store could not be decoded.
    #[error("metadata store: record of {} is damaged: {reason}", sealfs_text::Escaped(key.as_bytes()))]
    Record {
        /// The snapshot key.
        key: String,
        /// Why.
        reason: String,
    },
    /// A file system operation failed.
    #[error("{}: {source}", sealfs_text::escape_path(path))]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Building the sealed image of a layer failed.
    #[error("sealing snapshot {}: {source}", sealfs_text::Escaped(key.as_bytes()))]
    Build {
        /// The active snapshot being committed.
        key: String,
        /// Why.
        source: sealfs_builder::BuildError,
    },
    /// A commit whose caller went away (containerd killed, the request cancelled) before it was
    /// recorded: the snapshot stays active.
    #[error("commit of snapshot {} abandoned: the caller went away before it was recorded", sealfs_text::Escaped(.0.as_bytes()))]
    Abandoned(String),
    /// A call's task ended without an answer (it panicked).
    #[error("the snapshotter's task for the call failed: {0}")]
    Task(String),
    /// Asking the running snapshotter for its status failed.
    #[error(
        "status of the snapshotter at {}: {reason}",
        sealfs_text::escape_path(socket)
    )]
    Status {
        /// Its status socket.
        socket: PathBuf,
        /// Why.
        reason: String,
    },
    /// Opening or mounting a committed layer's image failed.
    #[error("mounting layer {}: {reason}", sealfs_text::escape_path(image))]
    Mount {
        /// The layer image.
        image: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The snapshotter's results.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }

    /// A store error during `what`.
    pub(crate) fn store<E: Into<redb::Error>>(what: &'static str) -> impl FnOnce(E) -> Error {
        move |e| Error::Store {
            what,
            source: Box::new(e.into()),
        }
    }
}

impl From<Error> for containerd_snapshots::tonic::Status {
    fn from(e: Error) -> Self {
        use containerd_snapshots::tonic::Status;
        let msg = e.to_string();
        match e {
            Error::NotFound(_) => Status::not_found(msg),
            Error::AlreadyExists(_) => Status::already_exists(msg),
            Error::FailedPrecondition(_) => Status::failed_precondition(msg),
            Error::Abandoned(_) => Status::cancelled(msg),
            Error::InvalidArgument(_) => Status::invalid_argument(msg),
            _ => Status::internal(msg),
        }
    }
}
