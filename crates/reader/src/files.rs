//! Regular files of an image and their fs-verity digests (4 KiB blocks, no salt: what
//! `fsverity digest` prints for the file): recorded in the image's own per-file digest table (inside
//! the EROFS bytes, so covered by the image digest: [`Image::file_table`]), or computed either from
//! the image's level-0 hashes (no re-hashing of data the seal already hashed) or by reading the file.

use crate::data::ExtentKind;
use crate::error::{Error, Location, Result};
use crate::image::Image;
use crate::inode::Inode;
use crate::walk::{Visit, WalkEvent};
use rayon::prelude::*;
use sealfs_format::FILE_DIGESTS_LOG_BLOCKSIZE;
use sealfs_verity::{BlockHasher, Digest, HashAlg, Params, RootHasher};
use std::collections::BTreeMap;
use std::ops::Range;

/// Where a set of per-file digests came from, which decides how far they can be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestOrigin {
    /// The image's own table, inside the EROFS bytes: as trustworthy as the image digest (read
    /// through the reader, so verified as the image is).
    Image,
    /// Computed from the image's content as read (verified as the image is).
    Computed,
    /// The per-file section of a seal trailer written by releases before the table moved into the
    /// EROFS bytes: no digest or signature covers it, so anyone can change it.
    Trailer,
}

impl DigestOrigin {
    /// Whether the image digest (or what vouches for it) also vouches for these digests.
    pub fn is_covered(self) -> bool {
        !matches!(self, DigestOrigin::Trailer)
    }

    /// A short name (`image`, `computed`, `trailer`), as `--json` output carries it.
    pub fn name(self) -> &'static str {
        match self {
            DigestOrigin::Image => "image",
            DigestOrigin::Computed => "computed",
            DigestOrigin::Trailer => "trailer",
        }
    }
}

/// Per-file fs-verity digests (4 KiB blocks, no salt: what `fsverity digest` prints for each regular
/// file), by nid, with where they came from.
#[derive(Clone, Debug)]
pub struct FileDigests {
    alg: HashAlg,
    entries: Vec<(u64, Digest)>,
    origin: DigestOrigin,
}

impl FileDigests {
    /// Digests of `alg`, `entries` sorted by nid.
    pub fn new(alg: HashAlg, entries: Vec<(u64, Digest)>, origin: DigestOrigin) -> FileDigests {
        debug_assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        FileDigests {
            alg,
            entries,
            origin,
        }
    }

    /// Their hash algorithm.
    pub fn alg(&self) -> HashAlg {
        self.alg
    }

    /// Where they came from.
    pub fn origin(&self) -> DigestOrigin {
        self.origin
    }

    /// The digest of the regular file with inode number `nid`.
    pub fn get(&self, nid: u64) -> Option<&Digest> {
        self.entries
            .binary_search_by_key(&nid, |(n, _)| *n)
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// Every `(nid, digest)`, sorted by nid.
    pub fn entries(&self) -> &[(u64, Digest)] {
        &self.entries
    }

    /// Number of files.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no file has a digest.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Why a seal whose image has its own per-file digest table is refused when its trailer has a
/// per-file section too (the writer never writes both).
pub const TRAILER_SECTION_WITH_TABLE: &str = "the seal's trailer has a per-file digest section, which no image with its own per-file digest table has: refused (it was added to the trailer, where nothing covers it)";

/// Block size of per-file digests.
pub const FILE_BLOCK: u64 = 1 << FILE_DIGESTS_LOG_BLOCKSIZE;

/// Bytes of a file whose extents a streamed digest maps at a time (so a file of many extents is
/// never mapped whole).
const DIGEST_WINDOW: u64 = 64 << 20;

/// Parameters of per-file digests for `alg`.
pub fn file_params(alg: HashAlg) -> Params {
    Params::new(alg, FILE_BLOCK as usize, b"").expect("4 KiB unsalted parameters are valid")
}

impl Image {
    /// The per-file digest table this image carries in its own bytes (docs/format.md §8), read
    /// through the reader, so verified as every other block is: `None` when the image has none (an
    /// image another tool made, an unsealed build, a tree without regular files). A locator or
    /// table that breaks the format's rules is an [`Error::Corrupted`] naming it.
    pub fn file_table(&self) -> Result<Option<FileDigests>> {
        use sealfs_format::FileTable;
        let at = Location::image();
        let corrupted = |e: sealfs_format::FileTableError| Error::corrupted(e.0, at);
        let Some(locator) = self.file_table_locator()? else {
            return Ok(None);
        };
        // The length was checked against the image's, so this allocation is bounded by it.
        let len = locator.table_length.get() as usize;
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(len)
            .map_err(|_| Error::corrupted(format!("per-file digest table of {len} bytes"), at))?;
        bytes.resize(len, 0);
        self.read_raw(locator.table_offset.get(), &mut bytes)?;
        let table = FileTable::parse(&locator, &bytes).map_err(corrupted)?;
        let alg = HashAlg::from_id(locator.hash_algorithm)
            .map_err(|e| Error::corrupted(format!("per-file digest table: {e}"), at))?;
        let entries = table
            .iter()
            .map(|(nid, d)| (nid, Digest::new(alg, d).expect("the locator's digest size")))
            .collect();
        Ok(Some(FileDigests::new(alg, entries, DigestOrigin::Image)))
    }

    /// The locator of the image's per-file digest table (the first 64 bytes of block 0, read and
    /// verified with the superblock), checked: `None` when the image has no table. Cheap: the
    /// table itself is not read ([`Image::file_table`] reads it).
    pub fn file_table_locator(&self) -> Result<Option<sealfs_format::FileTableLocator>> {
        use sealfs_format::{FileTableLocator, FILE_TABLE_LOCATOR_SIZE};
        let mut head = [0u8; FILE_TABLE_LOCATOR_SIZE];
        self.read_raw(sealfs_format::FILE_TABLE_LOCATOR_OFFSET, &mut head)?;
        let sb = self.superblock();
        let erofs_length = (sb.blocks << sb.blkszbits).min(self.len());
        FileTableLocator::parse(&head, erofs_length)
            .map_err(|e| Error::corrupted(e.0, Location::image()))
    }

    /// Every regular file's paths (relative to the root, raw bytes, sorted) by nid; hard links give
    /// several paths. The first error met ends the walk.
    pub fn regular_files(&self) -> Result<BTreeMap<u64, Vec<Vec<u8>>>> {
        let mut files: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        self.walk(&self.root()?, b"", &mut |event| match event {
            WalkEvent::Entry(e) => {
                if e.inode.is_file() {
                    files.entry(e.entry.nid).or_default().push(e.path.to_vec());
                }
                Ok(Visit::Continue)
            }
            WalkEvent::Dir { .. } => Ok(Visit::Continue),
            WalkEvent::Error { error, .. } => Err(error),
        })?;
        for paths in files.values_mut() {
            paths.sort();
        }
        Ok(files)
    }

    /// The fs-verity digest of a file, read through the reader (so verified as the image is).
    /// Holes are hashed without being read, and memory stays a few KiB plus one read buffer
    /// whatever the size the inode claims (see [`Image::stream_file_digest`]).
    pub fn file_digest_by_reading(&self, inode: &Inode, alg: HashAlg) -> Result<Digest> {
        self.stream_file_digest(inode, &file_params(alg), None)
    }

    /// The image blocks holding a file's whole blocks, with their place in the file:
    /// `(file block, image block)`, both in [`FILE_BLOCK`]s. Partial blocks and inline tails are not
    /// listed (they are hashed from the file's own bytes).
    pub fn file_blocks(&self, inode: &Inode) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for e in self.map_range(inode, 0, inode.size())? {
            if let ExtentKind::Mapped { physical } = e.kind {
                if e.logical % FILE_BLOCK != 0 || physical % FILE_BLOCK != 0 {
                    continue;
                }
                let end = (e.logical + e.length).min(inode.size());
                for k in 0..(end - e.logical) / FILE_BLOCK {
                    out.push((e.logical / FILE_BLOCK + k, physical / FILE_BLOCK + k));
                }
            }
        }
        Ok(out)
    }

    /// The byte ranges of the image whose blocks hold only this file's data: its mapped blocks and
    /// compressed pclusters. Inline tails and inline pclusters share metadata blocks with other
    /// inodes and are not listed.
    pub fn file_storage(&self, inode: &Inode) -> Result<Vec<Range<u64>>> {
        let mut out = Vec::new();
        if inode.size() == 0 {
            return Ok(out);
        }
        for e in self.map_range(inode, 0, inode.size())? {
            match e.kind {
                ExtentKind::Mapped { physical } => {
                    out.push(physical..physical + e.length.min(inode.size() - e.logical));
                }
                ExtentKind::Compressed {
                    physical,
                    plen,
                    inline: false,
                    ..
                } => out.push(physical..physical + plen),
                ExtentKind::Compressed { inline: true, .. }
                | ExtentKind::Fragment { .. }
                | ExtentKind::Inline { .. }
                | ExtentKind::Hole => {}
            }
        }
        Ok(out)
    }

    /// Hints that these byte ranges of the image will be read soon, in this order (see
    /// [`crate::BlockSource::prefetch`]); a no-op for a local image.
    pub fn prefetch(&self, ranges: &[Range<u64>]) {
        self.blocks.hint_source(ranges);
    }

    /// Whether prefetch hints do anything for this image (a remote image with a store).
    pub fn prefetches(&self) -> bool {
        self.blocks.source_prefetches()
    }

    /// Hints that these files will be read soon, in this order: their data blocks and pclusters
    /// are fetched ahead where the source can (a remote image with a store); nothing is worked
    /// out for a source that cannot. Files whose storage cannot be mapped are skipped (their reads
    /// report it).
    pub fn prefetch_files<'a>(&self, inodes: impl IntoIterator<Item = &'a Inode>) {
        if !self.blocks.source_prefetches() {
            return;
        }
        let mut ranges = Vec::new();
        for inode in inodes {
            if inode.is_file() {
                ranges.extend(self.file_storage(inode).unwrap_or_default());
            }
        }
        if !ranges.is_empty() {
            self.prefetch(&ranges);
        }
    }

    /// The fs-verity digest of a file from the image's level-0 hashes `leaves` (which must use
    /// 4 KiB unsalted blocks of the same algorithm as `hasher`): only partial blocks, inline
    /// tails and data not in whole image blocks are read and hashed.
    pub fn file_digest_from_leaves(
        &self,
        inode: &Inode,
        hasher: &BlockHasher,
        leaves: &[u8],
    ) -> Result<Digest> {
        self.stream_file_digest(inode, hasher.params(), Some(leaves))
    }

    /// A file's digest streamed in file order through a [`RootHasher`]: its extents are mapped
    /// [`DIGEST_WINDOW`] bytes at a time, holes go in as runs of zeros, whole blocks stored in
    /// whole image blocks take the image's level-0 hash from `leaves` when given, and the rest is
    /// read through the reader. Neither time nor memory follows the size an inode claims beyond
    /// the bytes actually stored (an absurd size of holes costs its logarithm).
    fn stream_file_digest(
        &self,
        inode: &Inode,
        params: &Params,
        leaves: Option<&[u8]>,
    ) -> Result<Digest> {
        let at = || Location::nid(inode.nid());
        let (size, d) = (inode.size(), params.digest_size());
        let mut root = RootHasher::new(params);
        let mut buf = vec![0u8; (1 << 20).min(size as usize).max(1)];
        let mut pos = 0;
        while pos < size {
            let window_end = size.min(pos.saturating_add(DIGEST_WINDOW));
            for e in self.map_range(inode, pos, window_end - pos)? {
                let end = e.logical.saturating_add(e.length).min(window_end);
                if end <= pos || e.logical > pos {
                    // Not where the stream is (the mapping has a gap or overlap): read instead.
                    continue;
                }
                match (e.kind, leaves) {
                    (ExtentKind::Hole, _) => root.update_zeros(end - pos),
                    (ExtentKind::Mapped { physical }, Some(leaves))
                        if pos % FILE_BLOCK == 0
                            && (physical + (pos - e.logical)) % FILE_BLOCK == 0 =>
                    {
                        let whole = (end - pos) / FILE_BLOCK;
                        let first = (physical + (pos - e.logical)) / FILE_BLOCK;
                        let hashes = usize::try_from(first)
                            .ok()
                            .zip(usize::try_from(whole).ok())
                            .and_then(|(f, n)| {
                                leaves.get(f.checked_mul(d)?..f.checked_add(n)?.checked_mul(d)?)
                            })
                            .ok_or_else(|| {
                                Error::corrupted(
                                    format!(
                                        "file block {} maps outside the image (block {first})",
                                        pos / FILE_BLOCK
                                    ),
                                    at(),
                                )
                            })?;
                        root.push_leaves(hashes, whole * FILE_BLOCK);
                        let done = pos + whole * FILE_BLOCK;
                        self.read_into_digest(inode, done, end, &mut buf, &mut root)?;
                    }
                    _ => self.read_into_digest(inode, pos, end, &mut buf, &mut root)?,
                }
                pos = end;
            }
            self.read_into_digest(inode, pos, window_end, &mut buf, &mut root)?;
            pos = window_end;
        }
        Ok(root.finish())
    }

    /// Reads `[from, to)` of a file through the reader into `root`.
    fn read_into_digest(
        &self,
        inode: &Inode,
        mut from: u64,
        to: u64,
        buf: &mut [u8],
        root: &mut RootHasher,
    ) -> Result<()> {
        while from < to {
            let want = (to - from).min(buf.len() as u64) as usize;
            let n = self.read(inode, from, &mut buf[..want])?;
            if n == 0 {
                return Err(Error::corrupted(
                    format!("read ended at {from} of {}", inode.size()),
                    Location::nid(inode.nid()),
                ));
            }
            root.update(&buf[..n]);
            from += n as u64;
        }
        Ok(())
    }

    /// Digests of every regular file, computed by reading (in parallel), sorted by nid.
    pub fn compute_file_digests(&self, alg: HashAlg) -> Result<Vec<(u64, Digest)>> {
        let nids: Vec<u64> = self.regular_files()?.into_keys().collect();
        nids.par_iter()
            .map(|&nid| {
                let inode = self.inode(nid)?;
                Ok((nid, self.file_digest_by_reading(&inode, alg)?))
            })
            .collect()
    }
}
