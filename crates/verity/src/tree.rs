//! Building Merkle trees.

use std::fmt;
use std::fs::File;
use std::io;

use crate::{
    BlockHasher, Descriptor, Digest, Error, Params, Result, TreeGeometry, DESCRIPTOR_SIZE,
};

/// Bytes read or buffered per step by the file and streaming builders
/// (a multiple of every block size).
const CHUNK: usize = 4 << 20;

/// A built Merkle tree with its root hash.
///
/// The fields are public for convenience (move `bytes` out to write it);
/// [`descriptor`](Self::descriptor) and [`digest`](Self::digest) assume
/// they are left as built.
#[derive(Clone)]
pub struct Tree {
    /// The parameters it was built with.
    pub params: Params,
    /// Its geometry (also gives the data size).
    pub geometry: TreeGeometry,
    /// The tree blocks in stored order (top level first, level 0 last):
    /// byte-identical to `fsverity digest --out-merkle-tree` and to what
    /// `FS_IOC_READ_VERITY_METADATA` returns. Empty for at most one data block, and when the
    /// blocks were written elsewhere ([`write_tree_from_leaves`]).
    pub bytes: Vec<u8>,
    /// The Merkle root hash (all zeros for empty data).
    pub root: Digest,
}

impl Tree {
    /// Builds the upper levels from the level-0 hashes.
    ///
    /// `leaves` is the concatenation of the hashes of the data blocks, one
    /// digest per block, in order, as [`BlockHasher`] computes them (the last
    /// block zero-padded). This is for callers that hash the data themselves,
    /// for instance while copying it; the upper levels are hashed in parallel.
    pub fn from_leaf_hashes(params: &Params, data_size: u64, leaves: &[u8]) -> Result<Tree> {
        Self::leaves_to_tree(params, data_size, leaves, true)
    }

    /// Like [`from_leaf_hashes`](Self::from_leaf_hashes), but hashes the upper levels on the
    /// calling thread only: for callers that are themselves one of several worker threads (outside
    /// any rayon pool they were asked to use). The tree is the same.
    pub fn from_leaf_hashes_serial(params: &Params, data_size: u64, leaves: &[u8]) -> Result<Tree> {
        Self::leaves_to_tree(params, data_size, leaves, false)
    }

    /// Checks the leaves' length and builds the tree over them.
    fn leaves_to_tree(
        params: &Params,
        data_size: u64,
        leaves: &[u8],
        parallel: bool,
    ) -> Result<Tree> {
        let g = TreeGeometry::new(params, data_size);
        let expected = g.data_blocks() * params.digest_size() as u64;
        if leaves.len() as u64 != expected {
            return Err(Error::LeafHashesLength {
                data_blocks: g.data_blocks(),
                expected,
                actual: leaves.len(),
            });
        }
        build_with(params, data_size, parallel, |_, out| {
            out.copy_from_slice(leaves);
            Ok(())
        })
    }

    /// Size of the data the tree covers, in bytes.
    pub fn data_size(&self) -> u64 {
        self.geometry.data_size()
    }

    /// The fs-verity descriptor of this tree.
    pub fn descriptor(&self) -> Descriptor {
        // A built tree's root always has its parameters' algorithm (unless
        // the public fields were changed by hand: then the descriptor is
        // wrong, but nothing panics).
        Descriptor::from_parts(self.params, self.data_size(), self.root)
    }

    /// The 256 descriptor bytes (`sig_size` 0).
    pub fn descriptor_bytes(&self) -> [u8; DESCRIPTOR_SIZE] {
        self.descriptor().to_bytes()
    }

    /// The fs-verity file digest, as `fsverity digest` prints it.
    pub fn digest(&self) -> Digest {
        self.descriptor().digest()
    }
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tree")
            .field("params", &self.params)
            .field("data_size", &self.data_size())
            .field("levels", &self.geometry.num_levels())
            .field("tree_bytes", &self.bytes.len())
            .field("root", &self.root)
            .finish()
    }
}

/// Builds the tree over `data` held in memory, hashing level 0 (and large
/// upper levels) in parallel on the current rayon pool. The result does not
/// depend on the number of threads.
///
/// Errors only if the tree cannot be allocated.
pub fn build_tree(params: &Params, data: &[u8]) -> Result<Tree> {
    build_with(params, data.len() as u64, true, |hasher, leaves| {
        hasher.par_hash_blocks_into(data, leaves);
        Ok(())
    })
}

/// Builds the tree over `len` bytes of `file` starting at byte `offset`,
/// using positional reads (the file's cursor is neither used nor moved, so
/// the same `File` may be shared).
///
/// Reads 4 MiB at a time, overlapping each read with hashing of the
/// previous chunk; level 0 is hashed in parallel on the current rayon pool.
/// A file shorter than `offset + len` is an error ([`Error::Read`]).
#[cfg(unix)]
pub fn build_tree_from_file(params: &Params, file: &File, offset: u64, len: u64) -> Result<Tree> {
    use std::os::unix::fs::FileExt;
    if offset.checked_add(len).is_none() {
        return Err(Error::Read {
            offset,
            source: io::Error::new(io::ErrorKind::InvalidInput, "offset + length overflows"),
        });
    }
    build_with(params, len, true, |hasher, leaves| {
        hash_into(
            hasher,
            &|buf, at| file.read_exact_at(buf, offset + at),
            len,
            leaves,
            &|_| {},
        )
    })
}

/// The level-0 hashes of `len` bytes of `file` from byte `offset`: one
/// digest per block, concatenated, as [`Tree::from_leaf_hashes`] takes them.
///
/// Reads and hashes as [`build_tree_from_file`] does, calling `progress`
/// (on the calling thread) with the number of bytes just hashed after every
/// chunk. For checking a stored tree: hash the data once, then compare the
/// leaves with the stored level 0 and rebuild the upper levels from them.
#[cfg(unix)]
pub fn leaf_hashes_from_file(
    params: &Params,
    file: &File,
    offset: u64,
    len: u64,
    progress: &dyn Fn(u64),
) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    if offset.checked_add(len).is_none() {
        return Err(Error::Read {
            offset,
            source: io::Error::new(io::ErrorKind::InvalidInput, "offset + length overflows"),
        });
    }
    leaf_hashes_from_reader(
        params,
        &|buf, at| file.read_exact_at(buf, offset + at),
        len,
        progress,
    )
}

/// The level-0 hashes of the `len` bytes that `read_exact_at(buf, offset)` reads (offsets from 0),
/// as [`leaf_hashes_from_file`] computes them for a file: for any byte source.
pub fn leaf_hashes_from_reader(
    params: &Params,
    read_exact_at: &(dyn Fn(&mut [u8], u64) -> io::Result<()> + Sync),
    len: u64,
    progress: &dyn Fn(u64),
) -> Result<Vec<u8>> {
    let hasher = BlockHasher::new(params);
    let leaves_len = TreeGeometry::new(params, len)
        .data_blocks()
        .checked_mul(params.digest_size() as u64)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(Error::TooLarge(len))?;
    let mut leaves = Vec::new();
    leaves
        .try_reserve_exact(leaves_len)
        .map_err(|_| Error::TooLarge(len))?;
    leaves.resize(leaves_len, 0);
    hash_into(&hasher, read_exact_at, len, &mut leaves, progress)?;
    Ok(leaves)
}

/// Builds the tree over `data_size` bytes whose level-0 hashes `read_leaves(buf, at)` reads
/// (`data_blocks × digest_size` bytes from offset 0, as [`Tree::from_leaf_hashes`] takes them) and
/// hands its blocks, in stored order, to `write(bytes, at)` (`at` counted from the tree's first
/// block), without holding level 0 in memory: it passes through in 4 MiB pieces and only the
/// levels above it (1/128 of it with SHA-256 and 4 KiB blocks) are kept. For trees over data
/// larger than memory should hold (level 0 of a 10 GB image is 80 MB).
///
/// Returns the tree with `bytes` empty: its blocks went to `write`. The same tree as
/// [`Tree::from_leaf_hashes`] builds, byte for byte.
pub fn write_tree_from_leaves(
    params: &Params,
    data_size: u64,
    read_leaves: &mut dyn FnMut(&mut [u8], u64) -> io::Result<()>,
    write: &mut dyn FnMut(&[u8], u64) -> io::Result<()>,
) -> Result<Tree> {
    let geometry = TreeGeometry::new(params, data_size);
    let (bs, d) = (params.block_size(), params.digest_size());
    let leaves_len = geometry.data_blocks() * d as u64;
    if geometry.num_levels() == 0 {
        // At most one data block: its hash (if any) is the root, and there are no tree blocks.
        let mut leaf = [0u8; crate::MAX_DIGEST_SIZE];
        let leaf = &mut leaf[..leaves_len as usize];
        read_leaves(leaf, 0).map_err(|source| Error::Read { offset: 0, source })?;
        return Tree::from_leaf_hashes(params, data_size, leaf);
    }
    let hasher = BlockHasher::new(params);
    let too_large = || Error::TooLarge(data_size);
    // The levels above level 0, in stored order (they come first), with room for level 1's hashes.
    let upper_len =
        usize::try_from(geometry.level_start(0) * bs as u64).map_err(|_| too_large())?;
    let mut upper = Vec::new();
    upper
        .try_reserve_exact(upper_len)
        .map_err(|_| too_large())?;
    upper.resize(upper_len, 0);
    // Level 0, a piece at a time: written through, its blocks hashed into level 1 (or, when it
    // is the top level, its one block hashed into the root).
    let l0_start = geometry.level_start(0) * bs as u64;
    let l0_len = geometry.level_blocks(0) * bs as u64;
    let mut buf = vec![0u8; CHUNK.min(l0_len as usize)];
    let mut l1 = vec![0u8; geometry.level_blocks(0) as usize * d];
    let mut pos = 0u64;
    while pos < l0_len {
        let n = ((l0_len - pos) as usize).min(buf.len());
        let piece = &mut buf[..n];
        // The level's last block is zero-padded past the last leaf.
        let have = leaves_len.saturating_sub(pos).min(n as u64) as usize;
        piece[have..].fill(0);
        read_leaves(&mut piece[..have], pos).map_err(|source| Error::Read {
            offset: pos,
            source,
        })?;
        write(piece, l0_start + pos).map_err(|source| Error::Write {
            offset: l0_start + pos,
            source,
        })?;
        let first = (pos / bs as u64) as usize * d;
        hasher.par_hash_blocks_into(piece, &mut l1[first..first + n / bs * d]);
        pos += n as u64;
    }
    let top = geometry.num_levels() - 1;
    let root = if top == 0 {
        Digest::new(params.alg(), &l1)?
    } else {
        let dst = geometry.level_start(1) as usize * bs;
        upper[dst..dst + l1.len()].copy_from_slice(&l1);
        drop(l1);
        hash_levels(&geometry, &hasher, &mut upper, 1..top, true);
        debug_assert_eq!(geometry.level_start(top), 0);
        write(&upper, 0).map_err(|source| Error::Write { offset: 0, source })?;
        hasher.hash_block(&upper[..bs])
    };
    Ok(Tree {
        params: *params,
        geometry,
        bytes: Vec::new(),
        root,
    })
}

/// Hashes the `len` bytes `read_exact_at` reads into `leaves` (exactly one digest per block),
/// double-buffered: the read of chunk i + 1 runs while chunk i is hashed.
fn hash_into(
    hasher: &BlockHasher,
    read_exact_at: &(dyn Fn(&mut [u8], u64) -> io::Result<()> + Sync),
    len: u64,
    leaves: &mut [u8],
    progress: &dyn Fn(u64),
) -> Result<()> {
    let read_at = |buf: &mut [u8], at: u64| -> Result<()> {
        read_exact_at(buf, at).map_err(|source| Error::Read { offset: at, source })
    };
    let (bs, d) = (
        hasher.params().block_size() as u64,
        hasher.params().digest_size(),
    );
    let chunk_len = |pos: u64| (len - pos).min(CHUNK as u64) as usize;
    let cap = chunk_len(0);
    let (mut cur, mut next) = (vec![0u8; cap], vec![0u8; cap]);
    read_at(&mut cur[..cap], 0)?;
    let mut pos = 0;
    while pos < len {
        let cur_len = chunk_len(pos);
        let next_pos = pos + cur_len as u64;
        let next_len = chunk_len(next_pos);
        let first = (pos / bs) as usize * d;
        let out = &mut leaves[first..first + (cur_len as u64).div_ceil(bs) as usize * d];
        let (read, ()) = rayon::join(
            || read_at(&mut next[..next_len], next_pos),
            || hasher.par_hash_blocks_into(&cur[..cur_len], out),
        );
        read?;
        progress(cur_len as u64);
        std::mem::swap(&mut cur, &mut next);
        pos = next_pos;
    }
    Ok(())
}

/// Builds a tree from data that arrives in pieces of any size, for input
/// whose length is not known up front (also an [`io::Write`]).
///
/// Pieces are gathered into 4 MiB chunks and each chunk is hashed in
/// parallel; large pieces are hashed in place without copying.
///
/// ```
/// use sealfs_verity::{Params, TreeBuilder, build_tree};
/// let data = vec![7u8; 100_000];
/// let mut b = TreeBuilder::new(&Params::default());
/// for piece in data.chunks(777) {
///     b.update(piece);
/// }
/// let tree = b.finish().unwrap();
/// assert_eq!(tree.bytes, build_tree(&Params::default(), &data).unwrap().bytes);
/// ```
pub struct TreeBuilder {
    hasher: BlockHasher,
    /// Level-0 hashes of the blocks consumed so far.
    leaves: Vec<u8>,
    /// Data not yet hashed; starts at a block boundary, shorter than CHUNK.
    pending: Vec<u8>,
    data_size: u64,
}

impl TreeBuilder {
    /// An empty builder.
    pub fn new(params: &Params) -> Self {
        TreeBuilder {
            hasher: BlockHasher::new(params),
            leaves: Vec::new(),
            pending: Vec::new(),
            data_size: 0,
        }
    }

    /// Bytes consumed so far.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Appends `data`.
    pub fn update(&mut self, mut data: &[u8]) {
        self.data_size += data.len() as u64;
        if !self.pending.is_empty() {
            let take = (CHUNK - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() < CHUNK {
                return;
            }
            let pending = std::mem::take(&mut self.pending);
            self.hash_whole_blocks(&pending);
            self.pending = pending;
            self.pending.clear();
        }
        if data.len() >= CHUNK {
            let bs = self.hasher.params().block_size();
            let whole = data.len() / bs * bs;
            self.hash_whole_blocks(&data[..whole]);
            data = &data[whole..];
        }
        if self.pending.capacity() == 0 && !data.is_empty() {
            self.pending.reserve_exact(CHUNK);
        }
        self.pending.extend_from_slice(data);
    }

    /// Hashes `data` (whole blocks, except possibly at the very end) and
    /// appends the digests to `leaves`.
    fn hash_whole_blocks(&mut self, data: &[u8]) {
        let (bs, d) = (
            self.hasher.params().block_size(),
            self.hasher.params().digest_size(),
        );
        let start = self.leaves.len();
        self.leaves.resize(start + data.len().div_ceil(bs) * d, 0);
        self.hasher
            .par_hash_blocks_into(data, &mut self.leaves[start..]);
    }

    /// Hashes what remains (zero-padding the last block) and builds the tree.
    pub fn finish(mut self) -> Result<Tree> {
        let pending = std::mem::take(&mut self.pending);
        self.hash_whole_blocks(&pending);
        Tree::from_leaf_hashes(self.hasher.params(), self.data_size, &self.leaves)
    }
}

impl io::Write for TreeBuilder {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl fmt::Debug for TreeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TreeBuilder")
            .field("params", self.hasher.params())
            .field("data_size", &self.data_size)
            .finish_non_exhaustive()
    }
}

/// Common driver: allocates the tree, lets `fill_leaves` write the level-0
/// hashes (`data_blocks × digest_size` bytes) and hashes the upper levels (on the current rayon
/// pool if `parallel`, else on this thread).
/// Hashes each level k of `levels` into level k+1, in `bytes` laid out as the tree is stored
/// (from its start; level k+1 lies before level k): split there, read level k's blocks from the
/// right part, write their hashes on the left.
fn hash_levels(
    geometry: &TreeGeometry,
    hasher: &BlockHasher,
    bytes: &mut [u8],
    levels: std::ops::Range<usize>,
    parallel: bool,
) {
    let (bs, d) = (geometry.block_size(), geometry.digest_size());
    for k in levels {
        let src = geometry.level_start(k) as usize * bs;
        let src_len = geometry.level_blocks(k) as usize * bs;
        let dst = geometry.level_start(k + 1) as usize * bs;
        let dst_len = geometry.level_blocks(k) as usize * d;
        let (left, right) = bytes.split_at_mut(src);
        let (src, out) = (&right[..src_len], &mut left[dst..dst + dst_len]);
        if parallel {
            hasher.par_hash_blocks_into(src, out);
        } else {
            hasher.hash_blocks_into(src, out);
        }
    }
}

fn build_with(
    params: &Params,
    data_size: u64,
    parallel: bool,
    fill_leaves: impl FnOnce(&BlockHasher, &mut [u8]) -> Result<()>,
) -> Result<Tree> {
    let geometry = TreeGeometry::new(params, data_size);
    let hasher = BlockHasher::new(params);
    let (bs, d) = (params.block_size(), params.digest_size());
    let too_large = || Error::TooLarge(data_size);

    if geometry.num_levels() == 0 {
        // At most one data block: its hash (if any) is the root.
        let mut leaf = [0u8; crate::MAX_DIGEST_SIZE];
        let leaf = &mut leaf[..geometry.data_blocks() as usize * d];
        fill_leaves(&hasher, leaf)?;
        let root = if leaf.is_empty() {
            Digest::zero(params.alg())
        } else {
            Digest::new(params.alg(), leaf)?
        };
        return Ok(Tree {
            params: *params,
            geometry,
            bytes: Vec::new(),
            root,
        });
    }

    let tree_size = usize::try_from(geometry.tree_size()).map_err(|_| too_large())?;
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(tree_size)
        .map_err(|_| too_large())?;
    bytes.resize(tree_size, 0);
    // Level 0 is a whole number of blocks holding data_blocks digests, so
    // data_blocks × d fits in usize as the tree does.
    let l0 = geometry.level_start(0) as usize * bs;
    let leaves_len = geometry.data_blocks() as usize * d;
    fill_leaves(&hasher, &mut bytes[l0..l0 + leaves_len])?;

    let top = geometry.num_levels() - 1;
    hash_levels(&geometry, &hasher, &mut bytes, 0..top, parallel);
    debug_assert_eq!(geometry.level_start(top), 0);
    let root = hasher.hash_block(&bytes[..bs]);
    Ok(Tree {
        params: *params,
        geometry,
        bytes,
        root,
    })
}
