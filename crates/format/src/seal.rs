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
        if f.version.get() == 0 {
            return Err(SealError::Damaged("footer version 0".into()));
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
        if h.version.get() == 0 {
            return Err(SealError::Damaged("header version 0".into()));
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

/// fs-verity hash algorithm id of SHA-256 (`FS_VERITY_HASH_ALG_SHA256`).
pub const FS_VERITY_HASH_ALG_SHA256: u8 = 1;
/// fs-verity hash algorithm id of SHA-512 (`FS_VERITY_HASH_ALG_SHA512`).
pub const FS_VERITY_HASH_ALG_SHA512: u8 = 2;

/// Digest size of an fs-verity hash algorithm id, or `None` for an unknown one.
pub const fn fsverity_digest_size(hash_algorithm: u8) -> Option<usize> {
    match hash_algorithm {
        FS_VERITY_HASH_ALG_SHA256 => Some(32),
        FS_VERITY_HASH_ALG_SHA512 => Some(64),
        _ => None,
    }
}

/// log2 of the Merkle block size of per-file digests (4 KiB, what `fsverity digest` uses by default).
pub const FILE_DIGESTS_LOG_BLOCKSIZE: u8 = 12;

/// Size of [`FileDigestsHeader`].
pub const FILE_DIGESTS_HEADER_SIZE: usize = core::mem::size_of::<FileDigestsHeader>();

/// Where the parts of a trailer go, and the tree's descriptor: everything [`SealHeader::new`] needs.
#[derive(Clone, Copy, Debug)]
pub struct SealLayout<'a> {
    /// The 256-byte fs-verity descriptor of the EROFS bytes (algorithm, block size, salt, length and
    /// root are taken from it).
    pub descriptor: [u8; 256],
    /// The image digest, `H(descriptor)`.
    pub digest: &'a [u8],
    /// The seal is a sidecar ([`SEAL_FLAG_DETACHED`]).
    pub detached: bool,
    /// Offset of the tree in the file the trailer is written to.
    pub tree_offset: u64,
    /// Bytes of the tree (0 for an image of at most one block).
    pub tree_length: u64,
    /// The per-file digest section ([`encode_file_digests`]), written right after the tree; empty
    /// when there is none.
    pub files_section: &'a [u8],
}

impl SealLayout<'_> {
    /// Offset of the header: right after the tree and the per-file digest section.
    pub fn header_offset(&self) -> u64 {
        self.tree_offset + self.tree_length + self.files_section.len() as u64
    }
}

impl SealHeader {
    /// The header of a seal laid out as `layout` says. Absent sections have offset and length 0.
    pub fn new(layout: &SealLayout<'_>) -> SealHeader {
        let d = &layout.descriptor;
        let files = layout.files_section;
        let mut root_hash = [0u8; 64];
        root_hash.copy_from_slice(&d[16..80]);
        let mut digest = [0u8; 64];
        digest[..layout.digest.len()].copy_from_slice(layout.digest);
        let files_offset = layout.tree_offset + layout.tree_length;
        SealHeader {
            magic: SEAL_HEADER_MAGIC,
            version: SEAL_VERSION.into(),
            header_size: (SEAL_HEADER_SIZE as u32).into(),
            hash_algorithm: d[1],
            log_blocksize: d[2],
            salt_size: d[3],
            flags: if layout.detached {
                SEAL_FLAG_DETACHED
            } else {
                0
            },
            files_crc: if files.is_empty() { 0 } else { seal_crc(files) }.into(),
            erofs_length: u64::from_le_bytes(d[8..16].try_into().expect("8 bytes")).into(),
            tree_offset: if layout.tree_length == 0 {
                0
            } else {
                layout.tree_offset
            }
            .into(),
            tree_length: layout.tree_length.into(),
            files_offset: if files.is_empty() { 0 } else { files_offset }.into(),
            files_length: (files.len() as u64).into(),
            sig_offset: 0.into(),
            sig_length: 0.into(),
            root_hash,
            descriptor: *d,
            digest,
            reserved: [0; 48],
        }
    }

    /// The header followed by the footer that points at it, for a header written at `header_offset`:
    /// the last [`SEAL_HEADER_SIZE`] + [`SEAL_FOOTER_SIZE`] bytes of a sealed file or sidecar.
    pub fn with_footer(&self, header_offset: u64) -> Vec<u8> {
        let footer = SealFooter::new(
            header_offset,
            SEAL_HEADER_SIZE + SEAL_FOOTER_SIZE,
            seal_crc(self.as_bytes()),
        );
        let mut out = self.as_bytes().to_vec();
        out.extend_from_slice(footer.as_bytes());
        out
    }
}

/// Encodes a per-file digest section: a [`FileDigestsHeader`] and `(nid, digest)` entries, which must
/// be sorted by nid, each digest of `hash_algorithm` ([`fsverity_digest_size`] bytes). Empty when there
/// are no entries (the seal then has no section).
pub fn encode_file_digests<'a>(
    hash_algorithm: u8,
    entries: impl ExactSizeIterator<Item = (u64, &'a [u8])>,
) -> Vec<u8> {
    let count = entries.len();
    if count == 0 {
        return Vec::new();
    }
    let d = fsverity_digest_size(hash_algorithm).expect("a known fs-verity hash algorithm");
    let header = FileDigestsHeader {
        magic: FILE_DIGESTS_MAGIC,
        hash_algorithm,
        log_blocksize: FILE_DIGESTS_LOG_BLOCKSIZE,
        digest_size: d as u8,
        reserved: 0,
        count: (count as u32).into(),
    };
    let mut out = Vec::with_capacity(FILE_DIGESTS_HEADER_SIZE + count * (8 + d));
    out.extend_from_slice(header.as_bytes());
    for (nid, digest) in entries {
        assert_eq!(digest.len(), d, "digest of the declared algorithm");
        out.extend_from_slice(&nid.to_le_bytes());
        out.extend_from_slice(digest);
    }
    out
}

/// A per-file digest section, checked: entries borrowed from its bytes.
#[derive(Clone, Copy, Debug)]
pub struct FileDigestSection<'a> {
    /// fs-verity hash algorithm of every digest.
    pub hash_algorithm: u8,
    /// Bytes per digest.
    pub digest_size: usize,
    entries: &'a [u8],
}

impl<'a> FileDigestSection<'a> {
    /// Parses and checks a section (its CRC is the caller's, against the header's `files_crc`): the
    /// magic, a known algorithm whose digest size matches, 4 KiB blocks, the reserved byte zero, at
    /// least one entry, a length that fits the count exactly, and nids strictly increasing: exactly
    /// the sections [`encode_file_digests`] writes.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, SealError> {
        let damaged = |what: String| Err(SealError::Damaged(what));
        let Some(header) = bytes.get(..FILE_DIGESTS_HEADER_SIZE) else {
            return damaged("per-file digest section shorter than its header".into());
        };
        let h = FileDigestsHeader::read_from_bytes(header).expect("16 bytes");
        if h.magic != FILE_DIGESTS_MAGIC {
            return damaged("per-file digest section has a bad magic".into());
        }
        let Some(d) = fsverity_digest_size(h.hash_algorithm) else {
            return damaged(format!(
                "per-file digest section: unknown hash algorithm {}",
                h.hash_algorithm
            ));
        };
        if h.digest_size as usize != d || h.log_blocksize != FILE_DIGESTS_LOG_BLOCKSIZE {
            return damaged("per-file digest section parameters".into());
        }
        // Only what encode_file_digests writes: the reserved byte zero, at least one entry (a seal
        // without per-file digests has no section).
        if h.reserved != 0 {
            return damaged("per-file digest section: reserved byte is not zero".into());
        }
        let count = h.count.get() as u64;
        if count == 0 {
            return damaged("per-file digest section with no entries".into());
        }
        let entries = &bytes[FILE_DIGESTS_HEADER_SIZE..];
        if entries.len() as u64 != count * (8 + d as u64) {
            return damaged(format!(
                "per-file digest section holds {} bytes for {count} entries",
                bytes.len()
            ));
        }
        let section = FileDigestSection {
            hash_algorithm: h.hash_algorithm,
            digest_size: d,
            entries,
        };
        let mut prev = None;
        for (nid, _) in section.iter() {
            if prev.is_some_and(|p| p >= nid) {
                return damaged("per-file digest section is not sorted by nid".into());
            }
            prev = Some(nid);
        }
        Ok(section)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len() / (8 + self.digest_size)
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, `(nid, digest bytes)`, sorted by nid.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u64, &'a [u8])> + 'a {
        let d = self.digest_size;
        self.entries.chunks_exact(8 + d).map(|e| {
            let nid = u64::from_le_bytes(e[..8].try_into().expect("8 bytes"));
            (nid, &e[8..])
        })
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

    #[test]
    fn file_digest_section_round_trip_and_damage() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let bytes = encode_file_digests(
            FS_VERITY_HASH_ALG_SHA256,
            [(3u64, &a[..]), (9, &b[..])].into_iter(),
        );
        assert_eq!(bytes.len(), 16 + 2 * 40);
        let s = FileDigestSection::parse(&bytes).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![(3, &a[..]), (9, &b[..])]);
        assert!(encode_file_digests(FS_VERITY_HASH_ALG_SHA512, std::iter::empty()).is_empty());
        // Unsorted, truncated, wrong algorithm, wrong digest size, wrong block size.
        let mut unsorted = bytes.clone();
        unsorted[16..24].copy_from_slice(&9u64.to_le_bytes());
        for bad in [
            unsorted,
            bytes[..bytes.len() - 1].to_vec(),
            [&bytes[..8], &[3], &bytes[9..]].concat(),
            [&bytes[..10], &[64], &bytes[11..]].concat(),
            [&bytes[..9], &[13], &bytes[10..]].concat(),
            bytes[..15].to_vec(),
        ] {
            assert!(matches!(
                FileDigestSection::parse(&bad),
                Err(SealError::Damaged(_))
            ));
        }
    }

    /// Found by the `file_digests` fuzz target: the parser accepted a section with its reserved byte
    /// set, or with no entries, neither of which `encode_file_digests` writes (so the section did not
    /// round-trip, and two different byte strings meant the same digests).
    #[test]
    fn file_digest_section_reserved_byte_and_empty_section_rejected() {
        let bytes = encode_file_digests(
            FS_VERITY_HASH_ALG_SHA256,
            [(3u64, &[1u8; 32][..])].into_iter(),
        );
        let s = FileDigestSection::parse(&bytes).unwrap();
        assert_eq!(encode_file_digests(s.hash_algorithm, s.iter()), bytes);
        let mut reserved = bytes.clone();
        reserved[11] = 1;
        let mut empty = bytes[..16].to_vec();
        empty[12..16].copy_from_slice(&0u32.to_le_bytes());
        for bad in [reserved, empty] {
            assert!(matches!(
                FileDigestSection::parse(&bad),
                Err(SealError::Damaged(_))
            ));
        }
    }

    #[test]
    fn header_from_layout_parses_back() {
        let mut descriptor = [0u8; 256];
        descriptor[0] = 1;
        descriptor[1] = FS_VERITY_HASH_ALG_SHA256;
        descriptor[2] = 12;
        descriptor[8..16].copy_from_slice(&8192u64.to_le_bytes());
        descriptor[16..48].fill(7);
        let files = encode_file_digests(1, [(1u64, &[5u8; 32][..])].into_iter());
        let layout = SealLayout {
            descriptor,
            digest: &[9; 32],
            detached: false,
            tree_offset: 8192,
            tree_length: 4096,
            files_section: &files,
        };
        let header_offset = layout.header_offset();
        assert_eq!(header_offset, 8192 + 4096 + 56);
        let tail = SealHeader::new(&layout).with_footer(header_offset);
        let file_len = header_offset + tail.len() as u64;
        let footer = SealFooter::parse(tail[512..].try_into().unwrap(), file_len).unwrap();
        let h = SealHeader::parse(tail[..512].try_into().unwrap(), &footer).unwrap();
        assert_eq!(h.erofs_length.get(), 8192);
        assert_eq!(h.files_offset.get(), 8192 + 4096);
        assert_eq!(h.files_crc.get(), seal_crc(&files));
        assert_eq!(h.root_hash[..32], [7; 32]);
        assert_eq!(h.digest[..32], [9; 32]);
    }
}

/// Magic of the signature section (`docs/format.md` §10), in a seal or a detached `IMAGE.sig` file.
pub const SIGNATURES_MAGIC: [u8; 8] = *b"SEALSIG1";
/// Bytes of an Ed25519 public key in a signature entry.
pub const SIGNATURE_KEY_SIZE: usize = 32;
/// Bytes of an Ed25519 signature in a signature entry.
pub const SIGNATURE_SIZE: usize = 64;
/// Longest statement a signature entry may carry.
pub const STATEMENT_MAX_SIZE: usize = 4096;

/// Header of the signature section: `count` entries follow, each the 32-byte Ed25519 public key, a
/// `le32` statement length, the statement bytes, and the 64-byte Ed25519 signature over them.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct SignaturesHeader {
    /// [`SIGNATURES_MAGIC`].
    pub magic: [u8; 8],
    /// Number of entries (at least 1).
    pub count: LeU32,
    /// Reserved, zero.
    pub reserved: [u8; 4],
}

const _: () = assert!(core::mem::size_of::<SignaturesHeader>() == 16);

/// Size of [`SignaturesHeader`].
pub const SIGNATURES_HEADER_SIZE: usize = core::mem::size_of::<SignaturesHeader>();

/// One entry of a signature section, as stored (nothing here is checked cryptographically).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignatureEntryRef<'a> {
    /// The signer's Ed25519 public key.
    pub public_key: &'a [u8; SIGNATURE_KEY_SIZE],
    /// The statement bytes that were signed.
    pub statement: &'a [u8],
    /// The Ed25519 signature over `statement`.
    pub signature: &'a [u8; SIGNATURE_SIZE],
}

/// Parses a signature section: the magic, the reserved bytes zero, at least one entry, statements of
/// at most [`STATEMENT_MAX_SIZE`] bytes, and entries that fill the section exactly: exactly the
/// sections [`encode_signatures`] writes.
pub fn parse_signatures(bytes: &[u8]) -> Result<Vec<SignatureEntryRef<'_>>, SealError> {
    let damaged = |what: &str| Err(SealError::Damaged(format!("signature section: {what}")));
    let Some(header) = bytes.get(..SIGNATURES_HEADER_SIZE) else {
        return damaged("shorter than its header");
    };
    let h = SignaturesHeader::read_from_bytes(header).expect("16 bytes");
    if h.magic != SIGNATURES_MAGIC {
        return damaged("bad magic");
    }
    if h.reserved != [0; 4] {
        return damaged("reserved bytes are not zero");
    }
    let count = h.count.get() as usize;
    if count == 0 {
        return damaged("no entries");
    }
    let min_entry = SIGNATURE_KEY_SIZE + 4 + SIGNATURE_SIZE;
    if count > (bytes.len() - SIGNATURES_HEADER_SIZE) / min_entry {
        return damaged("more entries than fit");
    }
    let mut rest = &bytes[SIGNATURES_HEADER_SIZE..];
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let Some((key, r)) = rest.split_first_chunk::<SIGNATURE_KEY_SIZE>() else {
            return damaged("truncated entry");
        };
        let Some((len, r)) = r.split_first_chunk::<4>() else {
            return damaged("truncated entry");
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > STATEMENT_MAX_SIZE {
            return damaged("statement longer than 4096 bytes");
        }
        let Some((statement, r)) = r.split_at_checked(len) else {
            return damaged("truncated entry");
        };
        let Some((signature, r)) = r.split_first_chunk::<SIGNATURE_SIZE>() else {
            return damaged("truncated entry");
        };
        out.push(SignatureEntryRef {
            public_key: key,
            statement,
            signature,
        });
        rest = r;
    }
    if !rest.is_empty() {
        return damaged("bytes after the last entry");
    }
    Ok(out)
}

/// Encodes a signature section from entries (at least one; statements of at most
/// [`STATEMENT_MAX_SIZE`] bytes).
pub fn encode_signatures(entries: &[SignatureEntryRef<'_>]) -> Vec<u8> {
    assert!(!entries.is_empty(), "a signature section has entries");
    let header = SignaturesHeader {
        magic: SIGNATURES_MAGIC,
        count: (entries.len() as u32).into(),
        reserved: [0; 4],
    };
    let mut out = header.as_bytes().to_vec();
    for e in entries {
        assert!(
            e.statement.len() <= STATEMENT_MAX_SIZE,
            "statement too long"
        );
        out.extend_from_slice(e.public_key);
        out.extend_from_slice(&(e.statement.len() as u32).to_le_bytes());
        out.extend_from_slice(e.statement);
        out.extend_from_slice(e.signature);
    }
    out
}

#[cfg(test)]
mod signature_tests {
    use super::*;

    #[test]
    fn round_trip_and_every_truncation_fails_cleanly() {
        let (k1, k2, s1, s2) = ([1u8; 32], [2u8; 32], [3u8; 64], [4u8; 64]);
        let entries = [
            SignatureEntryRef {
                public_key: &k1,
                statement: b"one\n",
                signature: &s1,
            },
            SignatureEntryRef {
                public_key: &k2,
                statement: b"",
                signature: &s2,
            },
        ];
        let bytes = encode_signatures(&entries);
        assert_eq!(parse_signatures(&bytes).unwrap(), entries);
        for n in 0..bytes.len() {
            assert!(parse_signatures(&bytes[..n]).is_err(), "truncated to {n}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(parse_signatures(&longer).is_err());
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                let _ = parse_signatures(&b); // never panics
            }
        }
    }
}
