//! Where image bytes come from: [`ReadAt`] (positional bytes) and [`BlockSource`] (whole blocks).
//!
//! The reader never reads a [`ReadAt`] directly. It reads whole blocks from a [`BlockSource`], through
//! the bounds-checked block cache in [`crate::cache`]. [`PlainBlocks`] turns any [`ReadAt`] into a
//! block source; a *verifying* block source (every block checked against a Merkle tree before it is
//! returned) implements [`BlockSource`] the same way and wraps any other one, so verified bytes are
//! what gets cached and nothing reaches the parsers unchecked.

use crate::error::{Error, Location, Result};
use std::io;
use std::sync::Arc;

/// A source of bytes at positions: a file, a byte buffer, a range of either.
pub trait ReadAt: Send + Sync {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at or past the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Total length in bytes.
    fn len(&self) -> u64;

    /// Whether the source holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads several ranges as one request, so that none waits for another: a verifying reader fetches
    /// a read's Merkle hash blocks in the same batch as its data. The default reads them in turn; a
    /// file first hints every range to the kernel (`POSIX_FADV_WILLNEED`), which starts them all.
    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        for (offset, buf) in reqs.iter_mut() {
            self.read_exact_at(buf, *offset)?;
        }
        Ok(())
    }

    /// [`ReadAt::read_batch`], fetching no byte that lies between the ranges: a source that joins
    /// ranges a little apart into one request (a remote object, its coalescing gap) keeps these
    /// apart. For ranges around bytes the caller has from elsewhere (blocks another image's cache
    /// entries gave by leaf hash), which fetching again would send over the link for nothing.
    /// The default is [`ReadAt::read_batch`] (a local source reads only what it is asked for).
    fn read_batch_apart(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        self.read_batch(reqs)
    }

    /// Whether each request costs a network round trip. A verifying reader then fetches a read's
    /// data and its hash blocks from two such sources (a detached seal) at once, not in turn.
    fn is_remote(&self) -> bool {
        false
    }

    /// Fills `buf` from `offset`; an end of data before `buf` is full is `UnexpectedEof`.
    fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("end of data at offset {offset:#x}"),
                    ))
                }
                Ok(n) => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let Ok(start) = usize::try_from(offset) else {
            return Ok(0);
        };
        let Some(avail) = self.get(start..) else {
            return Ok(0);
        };
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        Ok(n)
    }

    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.as_slice().read_at(buf, offset)
    }

    fn len(&self) -> u64 {
        Vec::len(self) as u64
    }
}

#[cfg(unix)]
impl ReadAt for std::fs::File {
    /// Positional `pread`: the file offset is not used, so one `File` serves many threads.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(self, buf, offset)
    }

    /// The file's length when asked, a block device's size (where it ends); 0 if it cannot be
    /// determined: every read then fails its bounds check instead of reading.
    fn len(&self) -> u64 {
        use std::os::unix::fs::FileTypeExt;
        match self.metadata() {
            Ok(m) if m.file_type().is_block_device() => {
                // Reads are positional: moving the descriptor's offset changes none of them.
                let mut f = self;
                std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)).unwrap_or(0)
            }
            Ok(m) => m.len(),
            Err(_) => 0,
        }
    }

    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        if reqs.len() > 1 {
            // Every range but the largest (the data) is hinted, so that its pages are read while the
            // data is; the data range itself is left to `pread`, whose sequential readahead then
            // keeps fetching ahead of a sequential reader (a WILLNEED hint on it would read exactly
            // the range and leave nothing in flight for the next request).
            let largest = reqs
                .iter()
                .enumerate()
                .max_by_key(|(_, (_, b))| b.len())
                .map(|(i, _)| i);
            for (i, (offset, buf)) in reqs.iter().enumerate() {
                if Some(i) == largest {
                    continue;
                }
                advise_willneed(self, *offset, buf.len() as u64);
            }
        }
        for (offset, buf) in reqs.iter_mut() {
            self.read_exact_at(buf, *offset)?;
        }
        Ok(())
    }
}

/// One file opened twice: the largest range of a batch (a read's data) is read through the first
/// descriptor, the others (its Merkle hash blocks, far away at the end of the file) through the
/// second. Each open file description keeps its own readahead state, so the hash reads do not break
/// the kernel's sequential readahead of the data: with one descriptor, a cold sequential verified
/// read ran at under half the speed of an unverified one.
#[cfg(unix)]
pub struct SplitFile {
    data: std::fs::File,
    side: std::fs::File,
}

#[cfg(unix)]
impl SplitFile {
    /// `data` and a second, independent open of the same file (`side`; not a `try_clone`, which
    /// would share the readahead state). Whatever `side` holds, every byte read through it is still
    /// checked against the tree by the verifying source above.
    pub fn new(data: std::fs::File, side: std::fs::File) -> SplitFile {
        SplitFile { data, side }
    }
}

#[cfg(unix)]
impl ReadAt for SplitFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.data.read_at(buf, offset)
    }

    fn len(&self) -> u64 {
        ReadAt::len(&self.data)
    }

    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        let largest = reqs
            .iter()
            .enumerate()
            .max_by_key(|(_, (_, b))| b.len())
            .map(|(i, _)| i);
        let (mut main, mut rest): (Vec<_>, Vec<_>) = reqs
            .iter_mut()
            .enumerate()
            .partition(|(i, _)| Some(*i) == largest);
        // The side ranges are hinted first (they load while the data is read), then read. Each hint
        // reaches SIDE_AHEAD bytes further: hash blocks are read cold one at a time, each a seek, and
        // a sequential reader needs the next ones soon (64 KiB of SHA-256 level-0 hashes cover 8 MiB
        // of data); for a random reader the extra bytes are few and stay cached for later reads.
        const SIDE_AHEAD: u64 = 64 << 10;
        let mut side: Vec<(u64, &mut [u8])> =
            rest.iter_mut().map(|(_, (o, b))| (*o, &mut **b)).collect();
        for (offset, buf) in &side {
            advise_willneed(&self.side, *offset, buf.len() as u64 + SIDE_AHEAD);
        }
        for (_, (offset, buf)) in main.iter_mut() {
            self.data.read_exact_at(buf, *offset)?;
        }
        for (offset, buf) in side.iter_mut() {
            self.side.read_exact_at(buf, *offset)?;
        }
        Ok(())
    }
}

/// `POSIX_FADV_WILLNEED` on a range: the kernel starts reading it.
#[cfg(unix)]
fn advise_willneed(file: &std::fs::File, offset: u64, len: u64) {
    // Only a hint: an error (a file system without readahead) changes nothing.
    let _ = rustix::fs::fadvise(
        file,
        offset,
        std::num::NonZeroU64::new(len),
        rustix::fs::Advice::WillNeed,
    );
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn len(&self) -> u64 {
        (**self).len()
    }

    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        (**self).read_batch(reqs)
    }

    fn read_batch_apart(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        (**self).read_batch_apart(reqs)
    }

    fn is_remote(&self) -> bool {
        (**self).is_remote()
    }
}

impl<T: ReadAt + ?Sized> ReadAt for Arc<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn len(&self) -> u64 {
        (**self).len()
    }

    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        (**self).read_batch(reqs)
    }

    fn read_batch_apart(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        (**self).read_batch_apart(reqs)
    }

    fn is_remote(&self) -> bool {
        (**self).is_remote()
    }
}

impl<T: ReadAt + ?Sized> ReadAt for Box<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn len(&self) -> u64 {
        (**self).len()
    }

    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        (**self).read_batch(reqs)
    }

    fn read_batch_apart(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        (**self).read_batch_apart(reqs)
    }

    fn is_remote(&self) -> bool {
        (**self).is_remote()
    }
}

/// The bytes `[start, start + len)` of another source, seen from offset 0: for example the EROFS part
/// of a sealed image, which a Merkle tree and a trailer follow.
#[derive(Clone, Debug)]
pub struct SubRange<R> {
    inner: R,
    start: u64,
    len: u64,
}

impl<R: ReadAt> SubRange<R> {
    /// The range `[start, start + len)` of `inner`, clipped to `inner`'s length.
    pub fn new(inner: R, start: u64, len: u64) -> SubRange<R> {
        let avail = inner.len().saturating_sub(start);
        SubRange {
            inner,
            start,
            len: len.min(avail),
        }
    }
}

impl<R: ReadAt> ReadAt for SubRange<R> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.len {
            return Ok(0);
        }
        let n = buf
            .len()
            .min((self.len - offset).min(usize::MAX as u64) as usize);
        self.inner.read_at(&mut buf[..n], self.start + offset)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn is_remote(&self) -> bool {
        self.inner.is_remote()
    }
}

/// Whole blocks of an image. This is the layer a verifying source implements: the reader asks only
/// for whole, in-range blocks, and caches what it gets.
pub trait BlockSource: Send + Sync {
    /// log2 of this source's block size (its unit of reading and, for a verifying source, of checking).
    fn block_bits(&self) -> u8;

    /// Length of the image in bytes. The last block may be partial: its bytes past the end read as
    /// zeros (as fs-verity pads it for hashing), but the reader never uses them.
    fn len(&self) -> u64;

    /// Whether the image holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the consecutive blocks `first ..` into `buf`, whose length is a whole number of blocks.
    /// The caller guarantees that every block starts before [`BlockSource::len`].
    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> Result<()>;

    /// Hints that the byte ranges will be read soon, in this order: a source that can fetch them
    /// ahead (a remote image with a store) starts doing so in the background. The default ignores it.
    fn prefetch(&self, _ranges: &[std::ops::Range<u64>]) {}

    /// Whether [`BlockSource::prefetch`] does anything here (so callers can skip working out
    /// what to hint).
    fn prefetches(&self) -> bool {
        false
    }

    /// Fetches the byte ranges into the source's store now, in large concurrent requests, and
    /// returns when they have landed (or failed: the reads that need them report it). A no-op for
    /// a source that stores nothing (the default).
    fn fill(&self, _ranges: &[std::ops::Range<u64>]) {}
}

/// A [`BlockSource`] over any [`ReadAt`], without verification.
#[derive(Clone, Debug)]
pub struct PlainBlocks<R> {
    inner: R,
    bits: u8,
    len: u64,
}

/// The block size [`PlainBlocks::new`] uses: 4 KiB, the page and fs-verity block size.
pub const DEFAULT_BLOCK_BITS: u8 = 12;

impl<R: ReadAt> PlainBlocks<R> {
    /// 4 KiB blocks of `inner`.
    pub fn new(inner: R) -> PlainBlocks<R> {
        PlainBlocks::with_block_bits(inner, DEFAULT_BLOCK_BITS)
    }

    /// Blocks of `1 << bits` bytes (9..=20) of `inner`.
    ///
    /// # Panics
    /// If `bits` is outside 9..=20.
    pub fn with_block_bits(inner: R, bits: u8) -> PlainBlocks<R> {
        assert!((9..=20).contains(&bits), "block bits {bits} out of 9..=20");
        let len = inner.len();
        PlainBlocks { inner, bits, len }
    }

    /// The wrapped source.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }
}

impl<R: ReadAt> BlockSource for PlainBlocks<R> {
    fn block_bits(&self) -> u8 {
        self.bits
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> Result<()> {
        let offset = first << self.bits;
        let at = Location::offset(offset);
        let avail = self.len.saturating_sub(offset);
        let n = (buf.len() as u64).min(avail) as usize;
        self.inner
            .read_exact_at(&mut buf[..n], offset)
            .map_err(|source| Error::Io { at, source })?;
        buf[n..].fill(0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_read_positionally() {
        let data: Vec<u8> = (0..100u8).collect();
        let mut buf = [0u8; 8];
        assert_eq!(data.read_at(&mut buf, 96).unwrap(), 4);
        assert_eq!(&buf[..4], &[96, 97, 98, 99]);
        assert_eq!(data.read_at(&mut buf, 100).unwrap(), 0);
        assert_eq!(data.read_at(&mut buf, u64::MAX).unwrap(), 0);
        assert!(data.read_exact_at(&mut buf, 95).is_err());
        let arc: Arc<[u8]> = data.clone().into();
        arc.read_exact_at(&mut buf, 10).unwrap();
        assert_eq!(buf[0], 10);
    }

    #[test]
    fn sub_ranges_clip() {
        let data: Vec<u8> = (0..100u8).collect();
        let sub = SubRange::new(&data[..], 10, 20);
        assert_eq!(ReadAt::len(&sub), 20);
        let mut buf = [0u8; 30];
        assert_eq!(sub.read_at(&mut buf, 15).unwrap(), 5);
        assert_eq!(buf[0], 25);
        assert_eq!(ReadAt::len(&SubRange::new(&data[..], 90, 20)), 10);
    }

    #[test]
    fn plain_blocks_zero_fill_the_last_partial_block() {
        let data = vec![7u8; 5000];
        let blocks = PlainBlocks::new(data);
        let mut buf = vec![1u8; 4096];
        blocks.read_blocks(1, &mut buf).unwrap();
        assert!(buf[..904].iter().all(|&b| b == 7));
        assert!(buf[904..].iter().all(|&b| b == 0));
    }

    #[test]
    fn files_read_with_pread() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"hello world").unwrap();
        let mut buf = [0u8; 5];
        f.read_exact_at(&mut buf, 6).unwrap();
        assert_eq!(&buf, b"world");
        assert_eq!(ReadAt::len(&f), 11);
    }
}
