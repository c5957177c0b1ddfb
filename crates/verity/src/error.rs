//! The crate's error type.

use std::io;

use crate::HashAlg;

/// Everything that can go wrong in this crate.
///
/// Invalid parameters, malformed digests or descriptors and I/O failures are
/// all reported here; nothing in this crate panics on bad input data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A hash algorithm name that is neither `sha256` nor `sha512`.
    #[error("unknown hash algorithm {0:?} (fs-verity supports \"sha256\" and \"sha512\")")]
    UnknownHashAlg(String),

    /// A hash algorithm number that is neither 1 (SHA-256) nor 2 (SHA-512).
    #[error("unknown fs-verity hash algorithm number {0} (1 = sha256, 2 = sha512)")]
    UnknownHashAlgId(u8),

    /// A block size that is not a power of two in 1024..=65536, or is smaller
    /// than two digests.
    #[error(
        "invalid block size {block_size} for {alg}: must be a power of two from 1024 to 65536 \
         and at least twice the digest size"
    )]
    InvalidBlockSize {
        /// The rejected block size in bytes (or `1 << log_blocksize`, saturated).
        block_size: u64,
        /// The hash algorithm it was to be used with.
        alg: HashAlg,
    },

    /// A salt longer than [`MAX_SALT_SIZE`](crate::MAX_SALT_SIZE) bytes.
    #[error("salt is {0} bytes long; fs-verity allows at most 32")]
    SaltTooLong(usize),

    /// Raw digest bytes of the wrong length for their algorithm.
    #[error("a {alg} digest is {expected} bytes, got {actual}")]
    DigestLength {
        /// The digest's algorithm.
        alg: HashAlg,
        /// Its digest size.
        expected: usize,
        /// The length that was given.
        actual: usize,
    },

    /// A digest string that is not `<alg>:<hex>` with the right number of hex digits.
    #[error(
        "invalid digest {0:?}: expected \"sha256:<64 hex digits>\" or \"sha512:<128 hex digits>\""
    )]
    DigestSyntax(String),

    /// A digest whose algorithm differs from the parameters it is used with.
    #[error("hash algorithm mismatch: the parameters use {expected}, the digest is {actual}")]
    AlgMismatch {
        /// The parameters' algorithm.
        expected: HashAlg,
        /// The digest's algorithm.
        actual: HashAlg,
    },

    /// Concatenated leaf hashes whose length is not one digest per data block.
    #[error("leaf hashes are {actual} bytes; {data_blocks} data blocks need {expected}")]
    LeafHashesLength {
        /// Number of data blocks for the given data size.
        data_blocks: u64,
        /// `data_blocks × digest size`.
        expected: u64,
        /// The length that was given.
        actual: usize,
    },

    /// A Merkle tree too large to hold in memory on this platform.
    #[error("a Merkle tree over {0} bytes of data is too large to build in memory")]
    TooLarge(u64),

    /// A 256-byte fs-verity descriptor that is malformed.
    #[error("invalid fs-verity descriptor: {0}")]
    InvalidDescriptor(String),

    /// Reading input data failed (including a file shorter than requested).
    #[error("reading data at byte offset {offset}")]
    Read {
        /// Absolute offset in the file (or stream) where the failed read started.
        offset: u64,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// Writing tree blocks failed.
    #[error("writing the Merkle tree at byte offset {offset}")]
    Write {
        /// Offset in the tree (from its first block) where the failed write started.
        offset: u64,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
