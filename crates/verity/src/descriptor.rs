//! `struct fsverity_descriptor` and the file digest.

use crate::{Digest, Error, HashAlg, Params, Result, MAX_DIGEST_SIZE, MAX_SALT_SIZE};

/// Size of `struct fsverity_descriptor` in bytes.
pub const DESCRIPTOR_SIZE: usize = 256;

// Field offsets (little-endian), from include/uapi/linux/fsverity.h.
const OFF_VERSION: usize = 0;
const OFF_HASH_ALG: usize = 1;
const OFF_LOG_BLOCKSIZE: usize = 2;
const OFF_SALT_SIZE: usize = 3;
const OFF_SIG_SIZE: usize = 4;
const OFF_DATA_SIZE: usize = 8;
const OFF_ROOT: usize = 16;
const OFF_SALT: usize = OFF_ROOT + MAX_DIGEST_SIZE; // 80
const OFF_RESERVED: usize = OFF_SALT + MAX_SALT_SIZE; // 112

/// The contents of an fs-verity descriptor: parameters, data size and
/// Merkle root. Its [`digest`](Self::digest) is the fs-verity file digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Descriptor {
    params: Params,
    data_size: u64,
    root: Digest,
}

impl Descriptor {
    /// A descriptor; the root's algorithm must be the parameters'.
    pub fn new(params: &Params, data_size: u64, root: &Digest) -> Result<Self> {
        if root.alg() != params.alg() {
            return Err(Error::AlgMismatch {
                expected: params.alg(),
                actual: root.alg(),
            });
        }
        Ok(Descriptor {
            params: *params,
            data_size,
            root: *root,
        })
    }

    /// Without the algorithm check, for roots known to match.
    pub(crate) fn from_parts(params: Params, data_size: u64, root: Digest) -> Self {
        Descriptor {
            params,
            data_size,
            root,
        }
    }

    /// The parameters (algorithm, block size, salt).
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Size of the data, in bytes.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// The Merkle root hash.
    pub fn root(&self) -> &Digest {
        &self.root
    }

    /// The 256 bytes, as the kernel hashes them: version 1, `sig_size` 0.
    pub fn to_bytes(&self) -> [u8; DESCRIPTOR_SIZE] {
        let mut b = [0u8; DESCRIPTOR_SIZE];
        b[OFF_VERSION] = 1;
        b[OFF_HASH_ALG] = self.params.alg().id();
        b[OFF_LOG_BLOCKSIZE] = self.params.log_block_size();
        b[OFF_SALT_SIZE] = self.params.salt().len() as u8;
        b[OFF_SIG_SIZE..OFF_SIG_SIZE + 4].copy_from_slice(&0u32.to_le_bytes());
        b[OFF_DATA_SIZE..OFF_DATA_SIZE + 8].copy_from_slice(&self.data_size.to_le_bytes());
        let root = self.root.as_bytes();
        b[OFF_ROOT..OFF_ROOT + root.len()].copy_from_slice(root);
        let salt = self.params.salt();
        b[OFF_SALT..OFF_SALT + salt.len()].copy_from_slice(salt);
        b
    }

    /// Parses and checks a descriptor: version 1, a known algorithm, a valid
    /// block size and salt size, and zeros in every unused byte (root and
    /// salt padding, reserved area).
    ///
    /// The `sig_size` field (bytes 4..8) is ignored, as the kernel zeroes it
    /// before computing the file digest; [`to_bytes`](Self::to_bytes) writes 0.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let bad = |what: String| Err(Error::InvalidDescriptor(what));
        if bytes.len() != DESCRIPTOR_SIZE {
            return bad(format!("{} bytes, expected {DESCRIPTOR_SIZE}", bytes.len()));
        }
        if bytes[OFF_VERSION] != 1 {
            return bad(format!("version {}, expected 1", bytes[OFF_VERSION]));
        }
        let alg = HashAlg::from_id(bytes[OFF_HASH_ALG])?;
        let salt_size = usize::from(bytes[OFF_SALT_SIZE]);
        if salt_size > MAX_SALT_SIZE {
            return Err(Error::SaltTooLong(salt_size));
        }
        let params = Params::from_log_block_size(
            alg,
            bytes[OFF_LOG_BLOCKSIZE],
            &bytes[OFF_SALT..OFF_SALT + salt_size],
        )?;
        let data_size = u64::from_le_bytes(
            bytes[OFF_DATA_SIZE..OFF_DATA_SIZE + 8]
                .try_into()
                .expect("8 bytes"),
        );
        let d = alg.digest_size();
        let root = Digest::new(alg, &bytes[OFF_ROOT..OFF_ROOT + d])?;
        let nonzero = |r: std::ops::Range<usize>| bytes[r].iter().any(|&b| b != 0);
        if nonzero(OFF_ROOT + d..OFF_SALT) {
            return bad("non-zero bytes after the root hash".into());
        }
        if nonzero(OFF_SALT + salt_size..OFF_RESERVED) {
            return bad("non-zero bytes after the salt".into());
        }
        if nonzero(OFF_RESERVED..DESCRIPTOR_SIZE) {
            return bad("non-zero reserved bytes".into());
        }
        Ok(Descriptor {
            params,
            data_size,
            root,
        })
    }

    /// The fs-verity file digest: the hash of [`to_bytes`](Self::to_bytes)
    /// (no salt), what `fsverity digest` prints and `FS_IOC_MEASURE_VERITY`
    /// returns.
    pub fn digest(&self) -> Digest {
        self.params.alg().hash(&self.to_bytes())
    }
}

/// The 256-byte `fsverity_descriptor` for a tree with Merkle root `root` over
/// `data_size` bytes (`sig_size` 0). Errors if `root`'s algorithm is not
/// `params`'.
pub fn descriptor(params: &Params, data_size: u64, root: &Digest) -> Result<[u8; DESCRIPTOR_SIZE]> {
    Ok(Descriptor::new(params, data_size, root)?.to_bytes())
}

/// The fs-verity file digest of a descriptor: its hash with `params`'
/// algorithm, unsalted.
///
/// The descriptor is hashed as given; it should have `sig_size` 0, as
/// [`descriptor`] makes it.
pub fn file_digest(params: &Params, descriptor: &[u8; DESCRIPTOR_SIZE]) -> Digest {
    params.alg().hash(descriptor)
}
