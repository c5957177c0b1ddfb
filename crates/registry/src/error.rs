//! What can go wrong talking to a registry; every message names the reference or URL.

use crate::manifest::ManifestError;

/// Damaged blocks a [`RegistryError::Damaged`] message lists.
const MAX_SHOWN: usize = 10;

/// Why a registry operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The reference is malformed.
    #[error("{reference}: {reason}")]
    BadReference {
        /// The reference as given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Credentials could not be read.
    #[error("{registry}: credentials: {reason}")]
    Credentials {
        /// `HOST[:PORT]`.
        registry: String,
        /// What is wrong.
        reason: String,
    },
    /// The client could not be set up (a certificate file, the TLS configuration).
    #[error("{what}: {reason}")]
    Setup {
        /// What was being set up.
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// The registry refused the credentials, or asks for some it cannot be given.
    #[error("{what}: not authorized: {reason}")]
    Unauthorized {
        /// The request or registry.
        what: String,
        /// What the registry asked for, or said.
        reason: String,
    },
    /// The registry has no such manifest, tag, blob or repository.
    #[error("{what}: not found ({reason})")]
    NotFound {
        /// What was asked for.
        what: String,
        /// What the registry said.
        reason: String,
    },
    /// A request failed (after its retries), or the registry answered in a way the distribution
    /// specification does not allow.
    #[error("{what}: {reason}")]
    Request {
        /// The request (method and URL).
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// The manifest's bytes do not hash to the digest that names them (the pinned one, or the one
    /// the registry claimed).
    #[error("{reference}: the manifest served hashes to {actual}, not {expected}: refused")]
    ManifestDigest {
        /// The reference.
        reference: String,
        /// The digest it must have.
        expected: String,
        /// What its bytes hash to.
        actual: String,
    },
    /// A manifest or index is malformed, or is not what was expected.
    #[error("{reference}: manifest {digest}: {source}")]
    Manifest {
        /// The reference.
        reference: String,
        /// Its digest.
        digest: String,
        /// What is wrong.
        #[source]
        source: ManifestError,
    },
    /// A blob's bytes do not match its descriptor (digest or size).
    #[error("{what}: {reason}: refused")]
    BlobContent {
        /// The blob (reference and digest).
        what: String,
        /// What differs.
        reason: String,
    },
    /// A local file could not be read (push).
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A local image could not be pushed as it is (not sealed, say).
    #[error("{path}: {reason}")]
    Image {
        /// The image.
        path: String,
        /// Why.
        reason: String,
    },
    /// A local image to push could not be opened as a sealed image (its seal is damaged, say):
    /// the message names the image.
    #[error(transparent)]
    Open(sealfs_reader::OpenError),
    /// A local image to push is damaged: blocks of its data or of its Merkle tree do not match
    /// their hashes (found while it was read for its descriptor, before anything was sent).
    #[error(
        "{path}: damaged, refused (nothing was sent): {}{}",
        problems.iter().take(MAX_SHOWN).cloned().collect::<Vec<_>>().join("; "),
        if problems.len() > MAX_SHOWN { "; and more" } else { "" }
    )]
    Damaged {
        /// The image.
        path: String,
        /// What is damaged, one block each.
        problems: Vec<String>,
    },
    /// The ranged reader over a blob failed.
    #[error(transparent)]
    Remote(#[from] sealfs_remote::RemoteError),
}

impl RegistryError {
    /// Whether the image is at fault (the CLI's exit code 1), not the attempt to reach it: the
    /// registry served content that is not what names it (a manifest or blob whose digest
    /// differs, a malformed manifest), or the local image to push is damaged or fails its seal.
    pub fn is_content_fault(&self) -> bool {
        match self {
            RegistryError::ManifestDigest { .. }
            | RegistryError::Manifest { .. }
            | RegistryError::BlobContent { .. }
            | RegistryError::Damaged { .. } => true,
            RegistryError::Open(e) => e.is_image_fault(),
            _ => false,
        }
    }

    /// The [`std::io::ErrorKind`] [`RegistryError::into_io`] gives it.
    pub fn kind(&self) -> std::io::ErrorKind {
        use std::io::ErrorKind as K;
        match self {
            RegistryError::NotFound { .. } => K::NotFound,
            RegistryError::Unauthorized { .. } => K::PermissionDenied,
            RegistryError::BadReference { .. } => K::InvalidInput,
            RegistryError::ManifestDigest { .. }
            | RegistryError::Manifest { .. }
            | RegistryError::BlobContent { .. } => K::InvalidData,
            RegistryError::Remote(r) => match r {
                sealfs_remote::RemoteError::NotFound { .. } => K::NotFound,
                sealfs_remote::RemoteError::Short { .. } => K::UnexpectedEof,
                sealfs_remote::RemoteError::BadUrl { .. } => K::InvalidInput,
                _ => K::Other,
            },
            _ => K::Other,
        }
    }

    /// As an [`std::io::Error`] (for [`sealfs_reader::OpenError::Io`] and readers).
    pub fn into_io(self) -> std::io::Error {
        match self {
            RegistryError::Remote(r) => r.into_io(),
            other => std::io::Error::new(other.kind(), other),
        }
    }
}
