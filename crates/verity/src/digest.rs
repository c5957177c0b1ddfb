//! Hash algorithms and digests.

use std::fmt;
use std::str::FromStr;

use sha2::Digest as _;

use crate::{Error, Result};

/// Size of the largest digest (SHA-512), in bytes.
pub const MAX_DIGEST_SIZE: usize = 64;

/// The hash algorithms fs-verity defines (`FS_VERITY_HASH_ALG_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HashAlg {
    /// SHA-256: number 1, 32-byte digests, 64-byte compression blocks.
    #[default]
    Sha256,
    /// SHA-512: number 2, 64-byte digests, 128-byte compression blocks.
    Sha512,
}

impl HashAlg {
    /// Every algorithm, in number order.
    pub const ALL: [HashAlg; 2] = [HashAlg::Sha256, HashAlg::Sha512];

    /// The fs-verity algorithm number: 1 for SHA-256, 2 for SHA-512
    /// (the descriptor's `hash_algorithm` byte).
    pub const fn id(self) -> u8 {
        match self {
            HashAlg::Sha256 => 1,
            HashAlg::Sha512 => 2,
        }
    }

    /// The algorithm with fs-verity number `id`.
    pub fn from_id(id: u8) -> Result<Self> {
        match id {
            1 => Ok(HashAlg::Sha256),
            2 => Ok(HashAlg::Sha512),
            _ => Err(Error::UnknownHashAlgId(id)),
        }
    }

    /// Digest size in bytes: 32 or 64.
    pub const fn digest_size(self) -> usize {
        match self {
            HashAlg::Sha256 => 32,
            HashAlg::Sha512 => 64,
        }
    }

    /// The hash function's internal (compression) block size in bytes: 64 or 128.
    /// fs-verity zero-pads the salt to this size.
    pub const fn compression_block_size(self) -> usize {
        match self {
            HashAlg::Sha256 => 64,
            HashAlg::Sha512 => 128,
        }
    }

    /// The name `fsverity` uses: `"sha256"` or `"sha512"`.
    pub const fn name(self) -> &'static str {
        match self {
            HashAlg::Sha256 => "sha256",
            HashAlg::Sha512 => "sha512",
        }
    }

    /// Plain (unsalted) hash of `data`.
    pub fn hash(self, data: &[u8]) -> Digest {
        match self {
            HashAlg::Sha256 => Digest::from_raw(self, &sha2::Sha256::digest(data)),
            HashAlg::Sha512 => Digest::from_raw(self, &sha2::Sha512::digest(data)),
        }
    }
}

impl fmt::Display for HashAlg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for HashAlg {
    type Err = Error;

    /// Parses `sha256` / `sha512` (any case) or the numbers `1` / `2`,
    /// as `fsverity --hash-alg` does.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "sha256" | "1" => Ok(HashAlg::Sha256),
            "sha512" | "2" => Ok(HashAlg::Sha512),
            _ => Err(Error::UnknownHashAlg(s.to_owned())),
        }
    }
}

/// A digest together with its algorithm: a Merkle root, a block hash or an
/// fs-verity file digest.
///
/// It displays as `fsverity digest` prints it, `sha256:<hex>` or
/// `sha512:<hex>`, and parses from that form.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest {
    alg: HashAlg,
    bytes: [u8; MAX_DIGEST_SIZE],
}

impl Digest {
    /// A digest from raw bytes, which must be `alg.digest_size()` long.
    pub fn new(alg: HashAlg, bytes: &[u8]) -> Result<Self> {
        if bytes.len() != alg.digest_size() {
            return Err(Error::DigestLength {
                alg,
                expected: alg.digest_size(),
                actual: bytes.len(),
            });
        }
        Ok(Self::from_raw(alg, bytes))
    }

    /// Internal constructor; `bytes.len()` is known to be right.
    pub(crate) fn from_raw(alg: HashAlg, bytes: &[u8]) -> Self {
        let mut d = Self::zero(alg);
        d.bytes[..alg.digest_size()].copy_from_slice(bytes);
        d
    }

    /// The all-zero digest: the Merkle root of empty data.
    pub const fn zero(alg: HashAlg) -> Self {
        Digest {
            alg,
            bytes: [0; MAX_DIGEST_SIZE],
        }
    }

    /// The digest's algorithm.
    pub const fn alg(&self) -> HashAlg {
        self.alg
    }

    /// The raw digest bytes (32 or 64 of them).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.alg.digest_size()]
    }

    /// Lower-case hex of the raw bytes, without the algorithm prefix
    /// (what `fsverity digest --compact` prints).
    pub fn to_hex(&self) -> String {
        use fmt::Write as _;
        let mut s = String::with_capacity(2 * self.alg.digest_size());
        for b in self.as_bytes() {
            let _ = write!(s, "{b:02x}");
        }
        s
    }

    /// Parses bare hex (either case) as a digest of algorithm `alg`.
    pub fn from_hex(alg: HashAlg, hex: &str) -> Result<Self> {
        let bad = || Error::DigestSyntax(hex.to_owned());
        let raw = hex.as_bytes();
        if raw.len() != 2 * alg.digest_size() {
            return Err(bad());
        }
        let mut d = Self::zero(alg);
        for (out, pair) in d.bytes.iter_mut().zip(raw.chunks_exact(2)) {
            let hi = hex_val(pair[0]).ok_or_else(bad)?;
            let lo = hex_val(pair[1]).ok_or_else(bad)?;
            *out = (hi << 4) | lo;
        }
        Ok(d)
    }

    /// The `struct fsverity_formatted_digest` that fs-verity built-in
    /// signatures sign: `"FSVerity"`, le16 algorithm number, le16 digest
    /// size, then the digest (12 + digest size bytes).
    pub fn to_formatted_digest(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(12 + self.alg.digest_size());
        v.extend_from_slice(b"FSVerity");
        v.extend_from_slice(&u16::from(self.alg.id()).to_le_bytes());
        v.extend_from_slice(&(self.alg.digest_size() as u16).to_le_bytes());
        v.extend_from_slice(self.as_bytes());
        v
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

impl AsRef<[u8]> for Digest {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Display for Digest {
    /// `sha256:<hex>` / `sha512:<hex>`, like `fsverity digest`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.alg, self.to_hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl FromStr for Digest {
    type Err = Error;

    /// Parses `sha256:<64 hex digits>` or `sha512:<128 hex digits>`.
    fn from_str(s: &str) -> Result<Self> {
        let (alg, hex) = s
            .split_once(':')
            .ok_or_else(|| Error::DigestSyntax(s.to_owned()))?;
        let alg = match alg {
            "sha256" => HashAlg::Sha256,
            "sha512" => HashAlg::Sha512,
            _ => return Err(Error::DigestSyntax(s.to_owned())),
        };
        Digest::from_hex(alg, hex).map_err(|_| Error::DigestSyntax(s.to_owned()))
    }
}
