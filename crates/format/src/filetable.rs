//! The per-file digest table: every regular file's own fs-verity digest, kept *inside* the EROFS
//! bytes, so that the image digest covers it (`docs/format.md` §8).
//!
//! Two pieces, both in `[0, erofs_length)`:
//!
//! - the **locator** ([`FileTableLocator`], 64 bytes at byte 0 of the image): the 1024 bytes before
//!   the EROFS superblock are reserved for boot loaders and read by neither the kernel nor
//!   `fsck.erofs`, and `mkfs.erofs` leaves them zero. The locator names the table's place, its
//!   algorithm and its entry count;
//! - the **table**: `count` entries sorted by nid, each the nid as a LEB128 difference from the
//!   previous entry's (the first from 0), then the digest bytes. A table of at most
//!   [`FILE_TABLE_INLINE_MAX`] bytes follows the locator in the boot area (small images grow by
//!   nothing); a larger one takes whole 4 KiB blocks after the last block any inode uses, named by
//!   no inode.
//!
//! Only the builder, which lays out every block, writes them, and only bytes under the image digest
//! name them: a file's content cannot point a reader at a table of its own, and nothing in the seal
//! trailer takes part. An image whose first 8 bytes are not [`FILE_TABLE_MAGIC`] has no table (images
//! other tools made, unsealed builds); one whose magic is there but whose locator or table breaks a
//! rule here is damaged.

use crate::{LeU32, LeU64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Magic of the [`FileTableLocator`] at byte 0 of the image.
pub const FILE_TABLE_MAGIC: [u8; 8] = *b"\x89SEALFT\n";
/// Byte offset of the locator in the image (the start of the boot area before the superblock).
pub const FILE_TABLE_LOCATOR_OFFSET: u64 = 0;
/// Version of the locator and table this code reads and writes.
pub const FILE_TABLE_VERSION: u32 = 1;

/// Where the per-file digest table is: 64 bytes at [`FILE_TABLE_LOCATOR_OFFSET`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct FileTableLocator {
    /// [`FILE_TABLE_MAGIC`].
    pub magic: [u8; 8],
    /// [`FILE_TABLE_VERSION`].
    pub version: LeU32,
    /// `size_of::<FileTableLocator>()` (64).
    pub locator_size: LeU32,
    /// fs-verity hash algorithm of the digests (1 SHA-256, 2 SHA-512).
    pub hash_algorithm: u8,
    /// log2 of the digests' Merkle block size: 12 ([`crate::FILE_DIGESTS_LOG_BLOCKSIZE`]).
    pub log_blocksize: u8,
    /// Bytes per digest (32 or 64, the algorithm's).
    pub digest_size: u8,
    /// Reserved, zero.
    pub reserved: u8,
    /// Number of entries, at least 1.
    pub count: LeU32,
    /// Byte offset of the table in the image: a multiple of 4096, past block 0.
    pub table_offset: LeU64,
    /// Bytes of entries (the table's blocks are zero after them).
    pub table_length: LeU64,
    /// Reserved, zero.
    pub reserved2: [u8; 24],
}

const _: () = assert!(core::mem::size_of::<FileTableLocator>() == 64);
const _: () = assert!(core::mem::offset_of!(FileTableLocator, table_offset) == 24);

/// Size of [`FileTableLocator`].
pub const FILE_TABLE_LOCATOR_SIZE: usize = core::mem::size_of::<FileTableLocator>();
/// Alignment of the offset of a table in blocks of its own.
pub const FILE_TABLE_ALIGN: u64 = 4096;
/// Where a table inline in the boot area starts: right after the locator.
pub const FILE_TABLE_INLINE_OFFSET: u64 =
    FILE_TABLE_LOCATOR_OFFSET + FILE_TABLE_LOCATOR_SIZE as u64;
/// Largest table kept inline in the boot area (it ends at byte 1024, where the superblock starts).
pub const FILE_TABLE_INLINE_MAX: u64 = 1024 - FILE_TABLE_INLINE_OFFSET;
/// Longest LEB128 encoding of a 64-bit nid difference.
const MAX_LEB128: usize = 10;

/// Why a locator or table is refused; the text says which rule it breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTableError(pub String);

impl core::fmt::Display for FileTableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

fn refuse<T>(what: impl Into<String>) -> Result<T, FileTableError> {
    Err(FileTableError(what.into()))
}

fn push_leb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Reads one canonical LEB128 number (no redundant high zero groups, at most 64 bits) from the
/// start of `bytes`: the value and the bytes used.
fn read_leb128(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in bytes.iter().take(MAX_LEB128).enumerate() {
        let group = (b & 0x7f) as u64;
        if i == MAX_LEB128 - 1 && group > 1 {
            return None; // beyond 64 bits
        }
        v |= group << (7 * i);
        if b & 0x80 == 0 {
            // Canonical: a last group of zero only when it is the only one.
            if i > 0 && group == 0 {
                return None;
            }
            return Some((v, i + 1));
        }
    }
    None
}

/// Encodes the table's entries: `(nid, digest)` sorted by strictly increasing nid, each digest of
/// `hash_algorithm`. Returns the locator and the bytes of a table placed inline in the boot area
/// ([`FILE_TABLE_INLINE_OFFSET`]) when they fit ([`FILE_TABLE_INLINE_MAX`]), else at
/// `blocks_offset` (a multiple of [`FILE_TABLE_ALIGN`] past block 0: the caller's first free
/// block); `None` when there are no entries (no table is written). Where it went is the locator's
/// `table_offset`.
pub fn encode_file_table<'a>(
    hash_algorithm: u8,
    blocks_offset: u64,
    entries: impl ExactSizeIterator<Item = (u64, &'a [u8])>,
) -> Option<(FileTableLocator, Vec<u8>)> {
    let count = entries.len();
    if count == 0 {
        return None;
    }
    assert!(
        blocks_offset.is_multiple_of(FILE_TABLE_ALIGN) && blocks_offset > 0,
        "the table's blocks start a block past block 0"
    );
    let d = crate::fsverity_digest_size(hash_algorithm).expect("a known fs-verity hash algorithm");
    let mut out = Vec::with_capacity(count * (2 + d));
    let mut prev = None;
    for (nid, digest) in entries {
        assert_eq!(digest.len(), d, "digest of the declared algorithm");
        let delta = match prev {
            None => nid,
            Some(p) => {
                assert!(nid > p, "entries sorted by strictly increasing nid");
                nid - p
            }
        };
        push_leb128(&mut out, delta);
        out.extend_from_slice(digest);
        prev = Some(nid);
    }
    let table_offset = if out.len() as u64 <= FILE_TABLE_INLINE_MAX {
        FILE_TABLE_INLINE_OFFSET
    } else {
        blocks_offset
    };
    let locator = FileTableLocator {
        magic: FILE_TABLE_MAGIC,
        version: FILE_TABLE_VERSION.into(),
        locator_size: (FILE_TABLE_LOCATOR_SIZE as u32).into(),
        hash_algorithm,
        log_blocksize: crate::FILE_DIGESTS_LOG_BLOCKSIZE,
        digest_size: d as u8,
        reserved: 0,
        count: (count as u32).into(),
        table_offset: table_offset.into(),
        table_length: (out.len() as u64).into(),
        reserved2: [0; 24],
    };
    Some((locator, out))
}

impl FileTableLocator {
    /// Reads the locator from the first [`FILE_TABLE_LOCATOR_SIZE`] bytes of an image whose EROFS
    /// bytes are `erofs_length` long: `Ok(None)` when the magic is not there (no table), the locator
    /// when every rule holds (exactly what [`encode_file_table`] writes, with the table inside the
    /// EROFS bytes and past block 0), else what is wrong.
    pub fn parse(
        bytes: &[u8],
        erofs_length: u64,
    ) -> Result<Option<FileTableLocator>, FileTableError> {
        let Some(bytes) = bytes.get(..FILE_TABLE_LOCATOR_SIZE) else {
            return refuse("per-file digest table locator: fewer than 64 bytes");
        };
        if bytes[..8] != FILE_TABLE_MAGIC {
            return Ok(None);
        }
        let l = FileTableLocator::read_from_bytes(bytes).expect("64 bytes");
        let what = |w: &str| refuse(format!("per-file digest table locator: {w}"));
        if l.version.get() != FILE_TABLE_VERSION {
            return what(&format!(
                "version {} (this sealfs reads {FILE_TABLE_VERSION})",
                l.version.get()
            ));
        }
        if l.locator_size.get() as usize != FILE_TABLE_LOCATOR_SIZE {
            return what(&format!("size {}, not 64", l.locator_size.get()));
        }
        let Some(d) = crate::fsverity_digest_size(l.hash_algorithm) else {
            return what(&format!("unknown hash algorithm {}", l.hash_algorithm));
        };
        if l.digest_size as usize != d {
            return what(&format!(
                "digest size {} for hash algorithm {}",
                l.digest_size, l.hash_algorithm
            ));
        }
        if l.log_blocksize != crate::FILE_DIGESTS_LOG_BLOCKSIZE {
            return what(&format!("log_blocksize {}, not 12", l.log_blocksize));
        }
        if l.reserved != 0 || l.reserved2 != [0; 24] {
            return what("reserved bytes are not zero");
        }
        let count = l.count.get() as u64;
        if count == 0 {
            return what("no entries");
        }
        let (off, len) = (l.table_offset.get(), l.table_length.get());
        if off == FILE_TABLE_INLINE_OFFSET {
            if len > FILE_TABLE_INLINE_MAX {
                return what(&format!(
                    "an inline table of {len} bytes runs into the superblock"
                ));
            }
        } else if !off.is_multiple_of(FILE_TABLE_ALIGN) || off == 0 {
            return what(&format!(
                "table offset {off} is neither {FILE_TABLE_INLINE_OFFSET} (inline) nor a block past block 0"
            ));
        } else if len <= FILE_TABLE_INLINE_MAX {
            return what(&format!(
                "a table of {len} bytes in blocks of its own (it fits inline)"
            ));
        }
        if off.checked_add(len).is_none_or(|end| end > erofs_length) {
            return what(&format!(
                "table at {off}+{len} lies outside the {erofs_length} EROFS bytes"
            ));
        }
        let (min, max) = (count * (1 + d as u64), count * (MAX_LEB128 + d) as u64);
        if len < min || len > max {
            return what(&format!("{len} bytes cannot hold {count} entries"));
        }
        Ok(Some(l))
    }

    /// Number of entries.
    pub fn entries(&self) -> usize {
        self.count.get() as usize
    }
}

/// A parsed table: its entries, checked, in nid order.
#[derive(Clone, Debug)]
pub struct FileTable<'a> {
    digest_size: usize,
    count: usize,
    bytes: &'a [u8],
}

impl<'a> FileTable<'a> {
    /// Checks the `table_length` bytes the locator names: exactly `count` entries of canonical
    /// LEB128 nid differences (strictly increasing nids, no overflow) and whole digests, nothing
    /// after them.
    pub fn parse(
        locator: &FileTableLocator,
        bytes: &'a [u8],
    ) -> Result<FileTable<'a>, FileTableError> {
        let d = locator.digest_size as usize;
        if bytes.len() as u64 != locator.table_length.get() {
            return refuse(format!(
                "per-file digest table: {} bytes, the locator says {}",
                bytes.len(),
                locator.table_length.get()
            ));
        }
        let table = FileTable {
            digest_size: d,
            count: locator.entries(),
            bytes,
        };
        let mut n = 0;
        let mut it = table.raw_iter();
        for entry in &mut it {
            entry?;
            n += 1;
        }
        if n != table.count || it.at != bytes.len() {
            return refuse(format!(
                "per-file digest table: {} entries in {} bytes, the locator says {}",
                n,
                bytes.len(),
                table.count
            ));
        }
        Ok(table)
    }

    fn raw_iter(&self) -> RawIter<'a> {
        RawIter {
            bytes: self.bytes,
            digest_size: self.digest_size,
            left: self.count,
            at: 0,
            prev: None,
        }
    }

    /// Every `(nid, digest)`, in nid order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &'a [u8])> + '_ {
        self.raw_iter()
            .map(|e| e.expect("entries were checked when parsed"))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none (never, for a parsed table).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

struct RawIter<'a> {
    bytes: &'a [u8],
    digest_size: usize,
    left: usize,
    at: usize,
    prev: Option<u64>,
}

impl<'a> Iterator for RawIter<'a> {
    type Item = Result<(u64, &'a [u8]), FileTableError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 || self.at >= self.bytes.len() {
            return None;
        }
        self.left -= 1;
        let at = self.at;
        let fail = |w: &str| {
            Some(refuse(format!(
                "per-file digest table: entry at byte {at}: {w}"
            )))
        };
        let Some((delta, used)) = read_leb128(&self.bytes[at..]) else {
            self.left = 0;
            return fail("its nid is not a canonical LEB128 number");
        };
        let nid = match self.prev {
            None => Some(delta),
            Some(_) if delta == 0 => {
                self.left = 0;
                return fail("nids are not strictly increasing");
            }
            Some(p) => p.checked_add(delta),
        };
        let Some(nid) = nid else {
            self.left = 0;
            return fail("nid overflows 64 bits");
        };
        let Some(digest) = self.bytes.get(at + used..at + used + self.digest_size) else {
            self.left = 0;
            return fail("its digest is cut short");
        };
        self.at = at + used + self.digest_size;
        self.prev = Some(nid);
        Some(Ok((nid, digest)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: u64, step: u64) -> Vec<(u64, [u8; 32])> {
        (0..n).map(|i| (40 + i * step, [i as u8; 32])).collect()
    }

    fn encode(e: &[(u64, [u8; 32])]) -> (FileTableLocator, Vec<u8>) {
        encode_file_table(1, 8192, e.iter().map(|(n, d)| (*n, &d[..]))).unwrap()
    }

    #[test]
    fn round_trip() {
        for (n, step) in [(1, 1), (3, 2), (29, 1), (30, 1), (200, 129), (5, 1 << 40)] {
            let e = entries(n, step);
            let (loc, bytes) = encode(&e);
            // Up to 29 entries of a one-byte difference and a SHA-256 digest fit inline (960 bytes).
            let inline = bytes.len() <= 960;
            assert_eq!(
                loc.table_offset.get(),
                if inline { 64 } else { 8192 },
                "{n}"
            );
            let parsed = FileTableLocator::parse(loc.as_bytes(), 8192 + 4096 * 100)
                .unwrap()
                .unwrap();
            assert_eq!(parsed, loc);
            let t = FileTable::parse(&parsed, &bytes).unwrap();
            let back: Vec<_> = t
                .iter()
                .map(|(n, d)| (n, <[u8; 32]>::try_from(d).unwrap()))
                .collect();
            assert_eq!(back, e);
        }
        // Metabox nids (bit 63) take the longest differences.
        let e = [(1u64 << 63, [1u8; 64]), ((1 << 63) + 7, [2; 64])];
        let (loc, bytes) = encode_file_table(2, 4096, e.iter().map(|(n, d)| (*n, &d[..]))).unwrap();
        assert_eq!(loc.table_offset.get(), 64);
        let t = FileTable::parse(&loc, &bytes).unwrap();
        assert_eq!(
            t.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            [1 << 63, (1 << 63) + 7]
        );
        assert!(encode_file_table(1, 4096, std::iter::empty()).is_none());
    }

    #[test]
    fn no_magic_is_no_table() {
        assert_eq!(FileTableLocator::parse(&[0u8; 64], 1 << 20), Ok(None));
        assert!(FileTableLocator::parse(&[0u8; 10], 1 << 20).is_err());
    }

    #[test]
    fn locator_rules() {
        // 40 entries: a table in blocks of its own, at 8192.
        let (loc, _) = encode(&entries(40, 1));
        assert_eq!(loc.table_offset.get(), 8192);
        let base = loc.as_bytes().to_vec();
        let bad = |f: &dyn Fn(&mut Vec<u8>), erofs_length: u64| {
            let mut b = base.clone();
            f(&mut b);
            FileTableLocator::parse(&b, erofs_length).unwrap_err()
        };
        let set64 = |at: usize, v: u64| {
            move |b: &mut Vec<u8>| b[at..at + 8].copy_from_slice(&v.to_le_bytes())
        };
        bad(&|b| b[8] = 2, 1 << 20); // version
        bad(&|b| b[12] = 65, 1 << 20); // size
        bad(&|b| b[16] = 3, 1 << 20); // algorithm
        bad(&|b| b[18] = 64, 1 << 20); // digest size
        bad(&|b| b[17] = 13, 1 << 20); // block size
        bad(&|b| b[19] = 1, 1 << 20); // reserved
        bad(&|b| b[63] = 1, 1 << 20); // reserved2
        bad(&|b| b[20..24].copy_from_slice(&0u32.to_le_bytes()), 1 << 20); // no entries
        bad(&set64(24, 4100), 1 << 20); // unaligned
        bad(&set64(24, 0), 1 << 20); // block 0
        bad(&set64(24, 128), 1 << 20); // elsewhere in the boot area
        bad(&set64(24, 64), 1 << 20); // inline, but longer than fits
        bad(&|_| {}, 8192); // past the EROFS bytes
        bad(&set64(24, !4095), u64::MAX - 4096); // at the end of the address space
        bad(&set64(32, 40 * 33 - 1), 1 << 20); // too short for the entries
        bad(&set64(32, 40 * 42 + 1), 1 << 20); // too long for them

        // A table that fits inline must be inline.
        let (mut small, _) = encode(&entries(3, 1));
        assert!(FileTableLocator::parse(small.as_bytes(), 1 << 20).is_ok());
        small.table_offset = 8192.into();
        assert!(FileTableLocator::parse(small.as_bytes(), 1 << 20).is_err());
    }

    #[test]
    fn table_rules() {
        let (loc, bytes) = encode(&entries(3, 1));
        // Not strictly increasing: a zero difference after the first entry.
        let mut b = bytes.clone();
        b[33] = 0;
        assert!(FileTable::parse(&loc, &b).is_err());
        // An overlong LEB128 (0x81 0x00 for 1).
        let mut l2 = loc;
        let mut b = bytes.clone();
        b.splice(33..34, [0x81, 0x00]);
        l2.table_length = (b.len() as u64).into();
        assert!(FileTable::parse(&l2, &b).is_err());
        // Length disagrees with the locator.
        assert!(FileTable::parse(&loc, &bytes[..bytes.len() - 1]).is_err());
        // A nid that overflows.
        let big = [(u64::MAX, [0u8; 32])];
        let (l3, mut b3) =
            encode_file_table(1, 4096, big.iter().map(|(n, d)| (*n, &d[..]))).unwrap();
        assert!(FileTable::parse(&l3, &b3).is_ok());
        b3.extend_from_slice(&[1]);
        b3.extend_from_slice(&[0; 32]);
        let mut l3 = l3;
        l3.count = 2.into();
        l3.table_length = (b3.len() as u64).into();
        assert!(FileTable::parse(&l3, &b3).is_err());
        // The LEB128 reader refuses more than 64 bits.
        let mut long = vec![0xff; 9];
        long.push(0x02);
        assert!(read_leb128(&long).is_none());
        long[9] = 0x01;
        assert_eq!(read_leb128(&long), Some((u64::MAX, 10)));
    }
}
