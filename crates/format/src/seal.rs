//! The seal: where the Merkle tree over the EROFS bytes is, and the parameters and root that name them.
//!
//! A sealed image is `[EROFS bytes][Merkle tree][sections][SealHeader][SealFooter]`. The EROFS bytes are
//! a whole number of blocks, so the kernel mounts the file as it is and ignores what follows them. The
//! detached form keeps the EROFS file untouched and writes `[Merkle tree][sections][SealHeader][SealFooter]`
//! to a sidecar file (flag [`SEAL_FLAG_DETACHED`]; offsets then count from the sidecar's start).
//!
//! The footer is found at the very end of the file and points at the header. Both carry CRC-32C
//! checksums so that accidental damage is reported as such; authenticity never comes from the trailer
//! itself but from the image digest (the fs-verity digest of the EROFS bytes, `H(descriptor)`), given
//! from outside.

use crate::{LeU32, LeU64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Magic at the start and end of the [`SealFooter`].
pub const SEAL_FOOTER_MAGIC: [u8; 8] = *b"\x89SEALFS\n";
/// Magic at the start of the [`SealHeader`].
pub const SEAL_HEADER_MAGIC: [u8; 8] = *b"\x89SEALHD\n";
/// Current seal format version.
pub const SEAL_VERSION: u32 = 1;
/// The seal lives in a sidecar file; offsets are relative to the sidecar.
pub const SEAL_FLAG_DETACHED: u8 = 0x01;

/// Fixed-size footer at the very end of a sealed file (or sidecar).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct SealFooter {
    /// [`SEAL_FOOTER_MAGIC`].
    pub magic: [u8; 8],
    /// [`SEAL_VERSION`].
    pub version: LeU32,
    /// `size_of::<SealFooter>()` (64).
    pub footer_size: LeU32,
    /// Offset of the [`SealHeader`] in the file.
    pub header_offset: LeU64,
    /// Bytes from `header_offset` to the end of the file, footer included.
    pub trailer_len: LeU64,
    /// CRC-32C of the header (its `header_size` bytes).
    pub header_crc: LeU32,
    /// Reserved, zero.
    pub reserved: [u8; 12],
    /// CRC-32C of the whole footer with this field zero.
    pub footer_crc: LeU32,
    /// Reserved, zero.
    pub reserved2: [u8; 4],
    /// [`SEAL_FOOTER_MAGIC`] again, so a truncated footer is recognised.
    pub magic2: [u8; 8],
}

/// The seal header: parameters, positions and the root.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct SealHeader {
    /// [`SEAL_HEADER_MAGIC`].
    pub magic: [u8; 8],
    /// [`SEAL_VERSION`].
    pub version: LeU32,
    /// `size_of::<SealHeader>()` (512).
    pub header_size: LeU32,
    /// fs-verity hash algorithm: 1 SHA-256, 2 SHA-512.
    pub hash_algorithm: u8,
    /// log2 of the Merkle tree block size.
    pub log_blocksize: u8,
    /// Salt length, 0..=32.
    pub salt_size: u8,
    /// `SEAL_FLAG_*`.
    pub flags: u8,
    /// CRC-32C of the per-file digest section (0 when absent).
    pub files_crc: LeU32,
    /// Length of the EROFS bytes the tree covers (a multiple of the EROFS block size).
    pub erofs_length: LeU64,
    /// Offset of the Merkle tree (stored order: root level first).
    pub tree_offset: LeU64,
    /// Length of the Merkle tree.
    pub tree_length: LeU64,
    /// Offset of the per-file digest section, 0 if absent.
    pub files_offset: LeU64,
    /// Length of the per-file digest section.
    pub files_length: LeU64,
    /// Offset of the signature section, 0 if absent.
    pub sig_offset: LeU64,
    /// Length of the signature section.
    pub sig_length: LeU64,
    /// Merkle root, zero-padded to 64 bytes.
    pub root_hash: [u8; 64],
    /// The 256-byte `fsverity_descriptor` whose hash is the image digest.
    pub descriptor: [u8; 256],
    /// The image digest `H(descriptor)`, zero-padded to 64 bytes.
    pub digest: [u8; 64],
    /// Reserved, zero.
    pub reserved: [u8; 48],
}

const _: () = assert!(core::mem::size_of::<SealFooter>() == 64);
const _: () = assert!(core::mem::size_of::<SealHeader>() == 512);
const _: () = assert!(core::mem::offset_of!(SealHeader, root_hash) == 80);
const _: () = assert!(core::mem::offset_of!(SealHeader, descriptor) == 144);

/// Magic of the per-file digest section.
pub const FILE_DIGESTS_MAGIC: [u8; 8] = *b"SEALFDG1";

/// Header of the per-file digest section: `count` entries of `le64 nid` + `digest_size` digest bytes
/// follow, sorted by nid. Each digest is the fs-verity digest of the regular file with that nid
/// (4 KiB blocks, no salt: what `fsverity digest --hash-alg=ALG` prints for the file).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct FileDigestsHeader {
    /// [`FILE_DIGESTS_MAGIC`].
    pub magic: [u8; 8],
    /// fs-verity hash algorithm of the digests.
    pub hash_algorithm: u8,
    /// log2 of their Merkle block size.
    pub log_blocksize: u8,
    /// Bytes per digest.
    pub digest_size: u8,
    /// Reserved, zero.
    pub reserved: u8,
    /// Number of entries.
    pub count: LeU32,
}

const _: () = assert!(core::mem::size_of::<FileDigestsHeader>() == 16);

/// Size of the footer.
pub const SEAL_FOOTER_SIZE: u64 = core::mem::size_of::<SealFooter>() as u64;
/// Size of the header.
pub const SEAL_HEADER_SIZE: u64 = core::mem::size_of::<SealHeader>() as u64;

/// What is wrong with a trailer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SealError {
    /// No footer magic at the end: the file is not sealed (or the footer is destroyed).
    NoFooter,
    /// A footer or header field is damaged; the text says which.
    Damaged(String),
    /// A newer version than this code reads.
    Version(u32),
}

impl core::fmt::Display for SealError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SealError::NoFooter => write!(f, "no seal footer at the end of the file"),
            SealError::Damaged(what) => write!(f, "damaged seal trailer: {what}"),
            SealError::Version(v) => write!(
                f,
                "seal format version {v} is newer than this sealfs reads ({SEAL_VERSION})"
            ),
        }
    }
}

impl std::error::Error for SealError {}

/// The CRC-32C the trailer uses for its header and footer.
pub fn seal_crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

impl SealFooter {
    /// A footer pointing at a header at `header_offset`, for a trailer of `trailer_len` bytes.
    pub fn new(header_offset: u64, trailer_len: u64, header_crc: u32) -> Self {
        let mut f = SealFooter {
            magic: SEAL_FOOTER_MAGIC,
            version: SEAL_VERSION.into(),
            footer_size: (SEAL_FOOTER_SIZE as u32).into(),
            header_offset: header_offset.into(),
            trailer_len: trailer_len.into(),
            header_crc: header_crc.into(),
            reserved: [0; 12],
            footer_crc: 0.into(),
            reserved2: [0; 4],
            magic2: SEAL_FOOTER_MAGIC,
        };
        f.footer_crc = Self::crc(f.as_bytes()).into();
        f
    }

    /// CRC of footer bytes with the `footer_crc` field taken as zero.
    fn crc(bytes: &[u8]) -> u32 {
        let mut b = [0u8; 64];
        b.copy_from_slice(bytes);
        b[48..52].fill(0);
        crc32c::crc32c(&b)
    }

    /// Parses and checks the last 64 bytes of a file of `file_len` bytes.
    pub fn parse(bytes: &[u8; 64], file_len: u64) -> Result<Self, SealError> {
        let f = SealFooter::read_from_bytes(bytes).expect("64 bytes");
        if f.magic != SEAL_FOOTER_MAGIC && f.magic2 != SEAL_FOOTER_MAGIC {
            return Err(SealError::NoFooter);
        }
        if f.magic != SEAL_FOOTER_MAGIC || f.magic2 != SEAL_FOOTER_MAGIC {
            return Err(SealError::Damaged("footer magic".into()));
        }
        if Self::crc(bytes) != f.footer_crc.get() {
            return Err(SealError::Damaged("footer checksum mismatch".into()));
        }
        if f.version.get() > SEAL_VERSION {
            return Err(SealError::Version(f.version.get()));
        }
        if f.footer_size.get() as u64 != SEAL_FOOTER_SIZE {
            return Err(SealError::Damaged(format!(
                "footer size {}",
                f.footer_size.get()
            )));
        }
        let (ho, tl) = (f.header_offset.get(), f.trailer_len.get());
        if tl < SEAL_HEADER_SIZE + SEAL_FOOTER_SIZE || ho.checked_add(tl) != Some(file_len) {
            return Err(SealError::Damaged(format!(
                "footer places the header at {ho} with a {tl}-byte trailer in a {file_len}-byte file"
            )));
        }
        Ok(f)
    }
}

impl SealHeader {
    /// Parses a header and checks it against the footer's CRC and its own invariants: the descriptor's
    /// fields must agree with the header's, and every section must lie inside `[0, header_offset)` (or, in
    /// an attached seal, after the EROFS bytes).
    pub fn parse(bytes: &[u8; 512], footer: &SealFooter) -> Result<Self, SealError> {
        if crc32c::crc32c(bytes) != footer.header_crc.get() {
            return Err(SealError::Damaged("header checksum mismatch".into()));
        }
        let h = SealHeader::read_from_bytes(bytes).expect("512 bytes");
        if h.magic != SEAL_HEADER_MAGIC {
            return Err(SealError::Damaged("header magic".into()));
        }
        if h.version.get() > SEAL_VERSION {
            return Err(SealError::Version(h.version.get()));
        }
        if h.header_size.get() as u64 != SEAL_HEADER_SIZE {
            return Err(SealError::Damaged(format!(
                "header size {}",
                h.header_size.get()
            )));
        }
        let d = &h.descriptor;
        let data_size = u64::from_le_bytes(d[8..16].try_into().unwrap());
        let mismatch = d[0] != 1
            || d[1] != h.hash_algorithm
            || d[2] != h.log_blocksize
            || d[3] != h.salt_size
            || data_size != h.erofs_length.get()
            || d[16..80] != h.root_hash;
        if mismatch {
            return Err(SealError::Damaged(
                "descriptor disagrees with the header".into(),
            ));
        }
        if !matches!(h.hash_algorithm, 1 | 2)
            || !(10..=16).contains(&h.log_blocksize)
            || h.salt_size > 32
        {
            return Err(SealError::Damaged(format!(
                "parameters: algorithm {}, block size 2^{}, salt {} bytes",
                h.hash_algorithm, h.log_blocksize, h.salt_size
            )));
        }
        let end = footer.header_offset.get();
        let start = if h.flags & SEAL_FLAG_DETACHED != 0 {
            0
        } else {
            h.erofs_length.get()
        };
        for (name, off, len) in [
            ("tree", h.tree_offset.get(), h.tree_length.get()),
            ("file digests", h.files_offset.get(), h.files_length.get()),
            ("signatures", h.sig_offset.get(), h.sig_length.get()),
        ] {
            if len == 0 {
                continue;
            }
            if off < start || off.checked_add(len).is_none_or(|e| e > end) {
                return Err(SealError::Damaged(format!(
                    "{name} section at {off}+{len} lies outside [{start}, {end})"
                )));
            }
        }
        Ok(h)
    }

    /// The salt bytes.
    pub fn salt(&self) -> &[u8] {
        &self.descriptor[80..80 + self.salt_size.min(32) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trip_and_damage() {
        let f = SealFooter::new(1000, 600, 7);
        let bytes: [u8; 64] = f.as_bytes().try_into().unwrap();
        assert!(SealFooter::parse(&bytes, 1600).is_ok());
        assert!(matches!(
            SealFooter::parse(&bytes, 1601),
            Err(SealError::Damaged(_))
        ));
        for i in 0..64 {
            let mut b = bytes;
            b[i] ^= 0x10;
            assert!(
                SealFooter::parse(&b, 1600).is_err(),
                "flip at {i} went unnoticed"
            );
        }
        assert_eq!(
            SealFooter::parse(&[0; 64], 1600).unwrap_err(),
            SealError::NoFooter
        );
    }
}
