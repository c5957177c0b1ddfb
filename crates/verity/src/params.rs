//! Validated fs-verity parameters.

use std::fmt;

use crate::{Error, HashAlg, Result};

/// Smallest block size accepted, in bytes (the kernel's lower bound since 6.3).
pub const MIN_BLOCK_SIZE: usize = 1024;
/// Largest block size accepted, in bytes.
pub const MAX_BLOCK_SIZE: usize = 65536;
/// Default block size, in bytes (fsverity-utils' default and the portable choice).
pub const DEFAULT_BLOCK_SIZE: usize = 4096;
/// Longest salt fs-verity allows, in bytes.
pub const MAX_SALT_SIZE: usize = 32;

/// fs-verity parameters: hash algorithm, block size and salt.
///
/// Always valid once constructed: the block size is a power of two in
/// [`MIN_BLOCK_SIZE`]`..=`[`MAX_BLOCK_SIZE`] and at least two digests, and
/// the salt is at most [`MAX_SALT_SIZE`] bytes. The block size serves both
/// data blocks and tree blocks, as in fs-verity.
///
/// The default is SHA-256, 4096-byte blocks, no salt.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Params {
    alg: HashAlg,
    log_block_size: u8,
    salt_len: u8,
    salt: [u8; MAX_SALT_SIZE],
}

impl Params {
    /// Validated parameters; errors name what is out of range.
    pub fn new(alg: HashAlg, block_size: usize, salt: &[u8]) -> Result<Self> {
        let ok = block_size.is_power_of_two()
            && (MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size)
            && block_size >= 2 * alg.digest_size();
        if !ok {
            return Err(Error::InvalidBlockSize {
                block_size: block_size as u64,
                alg,
            });
        }
        if salt.len() > MAX_SALT_SIZE {
            return Err(Error::SaltTooLong(salt.len()));
        }
        let mut s = [0u8; MAX_SALT_SIZE];
        s[..salt.len()].copy_from_slice(salt);
        Ok(Params {
            alg,
            log_block_size: block_size.trailing_zeros() as u8,
            salt_len: salt.len() as u8,
            salt: s,
        })
    }

    /// Like [`Params::new`], with the block size given as its base-2
    /// logarithm (the descriptor's `log_blocksize`).
    pub fn from_log_block_size(alg: HashAlg, log_block_size: u8, salt: &[u8]) -> Result<Self> {
        // Reject before shifting so that huge values cannot overflow.
        if u32::from(log_block_size) > MAX_BLOCK_SIZE.trailing_zeros() {
            return Err(Error::InvalidBlockSize {
                block_size: 1u64.checked_shl(log_block_size.into()).unwrap_or(u64::MAX),
                alg,
            });
        }
        Self::new(alg, 1 << log_block_size, salt)
    }

    /// The hash algorithm.
    pub const fn alg(&self) -> HashAlg {
        self.alg
    }

    /// Block size in bytes.
    pub const fn block_size(&self) -> usize {
        1 << self.log_block_size
    }

    /// Base-2 logarithm of the block size.
    pub const fn log_block_size(&self) -> u8 {
        self.log_block_size
    }

    /// The salt as given (unpadded; possibly empty).
    pub fn salt(&self) -> &[u8] {
        &self.salt[..usize::from(self.salt_len)]
    }

    /// The salt as dm-verity must be given it to hash as fs-verity does: fs-verity hashes
    /// `H(padded salt ‖ block)` with the salt zero-padded to the hash's compression block size
    /// (64 bytes for SHA-256, 128 for SHA-512), dm-verity (format 1) `H(salt ‖ block)` with the
    /// salt as given; so dm-verity's salt is the padded one. Empty when there is no salt.
    pub fn dm_verity_salt(&self) -> Vec<u8> {
        if self.salt().is_empty() {
            return Vec::new();
        }
        let mut padded = self.salt().to_vec();
        padded.resize(self.alg.compression_block_size(), 0);
        padded
    }

    /// Digest size of the hash algorithm, in bytes.
    pub const fn digest_size(&self) -> usize {
        self.alg.digest_size()
    }

    /// How many digests fit in one tree block (the tree's arity).
    pub const fn hashes_per_block(&self) -> usize {
        self.block_size() / self.alg.digest_size()
    }

    /// Base-2 logarithm of [`hashes_per_block`](Self::hashes_per_block).
    pub const fn log_hashes_per_block(&self) -> u32 {
        self.hashes_per_block().trailing_zeros()
    }
}

impl Default for Params {
    fn default() -> Self {
        Params {
            alg: HashAlg::Sha256,
            log_block_size: DEFAULT_BLOCK_SIZE.trailing_zeros() as u8,
            salt_len: 0,
            salt: [0; MAX_SALT_SIZE],
        }
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let salt: String = self.salt().iter().map(|b| format!("{b:02x}")).collect();
        f.debug_struct("Params")
            .field("alg", &self.alg)
            .field("block_size", &self.block_size())
            .field("salt", &salt)
            .finish()
    }
}
