//! Where every hash lives in a stored fs-verity Merkle tree.

use std::ops::Range;

use crate::Params;

/// The deepest tree the Linux kernel accepts (`FS_VERITY_MAX_LEVELS`).
/// [`TreeGeometry`] itself has no such limit (fsverity-utils allows 64).
pub const KERNEL_MAX_LEVELS: usize = 8;

/// Shape and layout of the Merkle tree over `data_size` bytes.
///
/// Terms, for block size `B`, digest size `D` and arity `A = B / D`:
///
/// - **Level 0** holds the hashes of the data blocks (the leaves); **level
///   k + 1** holds the hashes of the tree blocks of level k. The top level
///   has exactly one block, whose hash is the **root hash**.
/// - The **items** of level k are what it hashes: data blocks for level 0,
///   the tree blocks of level k − 1 otherwise. Item `j`'s hash sits at byte
///   `j·D` of the level, so a level is its items' digests concatenated and
///   zero-padded to whole blocks.
/// - **Stored order** (on disk, in `FS_IOC_READ_VERITY_METADATA`, in
///   `fsverity digest --out-merkle-tree`): the top level first, level 0
///   last, each level's blocks in order. [`level_start`](Self::level_start)
///   gives the first tree block of each level in that order.
///
/// Special cases: empty data has no data blocks, no levels and an all-zero
/// root; data of one block has no levels, and the root is that block's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeGeometry {
    log_block_size: u32,
    digest_size: usize,
    log_arity: u32,
    data_size: u64,
    data_blocks: u64,
    /// Blocks per level, index 0 = level 0 (leaves).
    level_blocks: Vec<u64>,
    /// First tree block of each level in stored order, index 0 = level 0.
    level_start: Vec<u64>,
    tree_blocks: u64,
}

/// Where one hash is stored: a tree block (index in stored order) and the
/// byte offset of the digest inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HashLocation {
    /// Index of the tree block, counting blocks from the start of the stored tree.
    pub block: u64,
    /// Byte offset of the digest within that block.
    pub offset: usize,
}

impl TreeGeometry {
    /// The geometry of the tree over `data_size` bytes of data.
    ///
    /// Never overflows: for any `u64` data size the tree is smaller than the
    /// data divided by the arity.
    pub fn new(params: &Params, data_size: u64) -> Self {
        let log_block_size = u32::from(params.log_block_size());
        let log_arity = params.log_hashes_per_block();
        let data_blocks = data_size.div_ceil(1u64 << log_block_size);
        let mut level_blocks = Vec::new();
        let mut n = data_blocks;
        while n > 1 {
            n = n.div_ceil(1u64 << log_arity);
            level_blocks.push(n);
        }
        let mut level_start = vec![0u64; level_blocks.len()];
        let mut start = 0;
        for k in (0..level_blocks.len()).rev() {
            level_start[k] = start;
            start += level_blocks[k];
        }
        TreeGeometry {
            log_block_size,
            digest_size: params.digest_size(),
            log_arity,
            data_size,
            data_blocks,
            level_blocks,
            level_start,
            tree_blocks: start,
        }
    }

    /// Block size in bytes (data and tree blocks alike).
    pub fn block_size(&self) -> usize {
        1 << self.log_block_size
    }

    /// Digest size in bytes.
    pub fn digest_size(&self) -> usize {
        self.digest_size
    }

    /// Digests per tree block (the arity `A`).
    pub fn hashes_per_block(&self) -> usize {
        1 << self.log_arity
    }

    /// Size of the data the tree covers, in bytes.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Number of data blocks, `ceil(data_size / block_size)`; the last one is
    /// zero-padded when hashed.
    pub fn data_blocks(&self) -> u64 {
        self.data_blocks
    }

    /// Number of tree levels: 0 for at most one data block.
    pub fn num_levels(&self) -> usize {
        self.level_blocks.len()
    }

    /// Number of tree blocks of `level` (0 = leaf level).
    ///
    /// # Panics
    ///
    /// If `level >= num_levels()`.
    pub fn level_blocks(&self, level: usize) -> u64 {
        self.level_blocks[level]
    }

    /// Index of the first tree block of `level`, in stored order (the top
    /// level starts at 0, level 0 comes last).
    ///
    /// # Panics
    ///
    /// If `level >= num_levels()`.
    pub fn level_start(&self, level: usize) -> u64 {
        self.level_start[level]
    }

    /// Number of items hashed into `level`: data blocks for level 0, the
    /// blocks of level `level − 1` otherwise. For `level == num_levels()` it
    /// is 1 when the data is not empty (the block or top tree block whose
    /// hash is the root).
    ///
    /// # Panics
    ///
    /// If `level > num_levels()`.
    pub fn level_items(&self, level: usize) -> u64 {
        assert!(level <= self.num_levels(), "level {level} out of range");
        match level {
            0 => self.data_blocks,
            _ => self.level_blocks[level - 1],
        }
    }

    /// Total number of tree blocks.
    pub fn tree_blocks(&self) -> u64 {
        self.tree_blocks
    }

    /// Total tree size in bytes (`tree_blocks × block_size`).
    pub fn tree_size(&self) -> u64 {
        self.tree_blocks << self.log_block_size
    }

    /// Where the hash of item `index` of `level` is stored (for `level == 0`,
    /// the hash of data block `index`).
    ///
    /// `None` when `level >= num_levels()` or `index` is past the level's
    /// items; in particular, the hash of the top block (or of the only data
    /// block) is the root hash, which is not in the tree.
    pub fn hash_location(&self, level: usize, index: u64) -> Option<HashLocation> {
        if level >= self.num_levels() || index >= self.level_items(level) {
            return None;
        }
        Some(HashLocation {
            block: self.level_start[level] + (index >> self.log_arity),
            offset: ((index & ((1 << self.log_arity) - 1)) as usize) * self.digest_size,
        })
    }

    /// Byte offset, from the start of the stored tree, of the hash of item
    /// `index` of `level`; `None` in the same cases as
    /// [`hash_location`](Self::hash_location).
    pub fn hash_offset(&self, level: usize, index: u64) -> Option<u64> {
        self.hash_location(level, index)
            .map(|l| (l.block << self.log_block_size) + l.offset as u64)
    }

    /// The tree blocks of `level` that hold hashes needed to verify the data
    /// blocks `data_blocks` (a range of data block indices), as a range of
    /// tree block indices in stored order.
    ///
    /// A reader fetches these for every level together with the data
    /// (hash readahead at submission time). The range is clamped to the
    /// data, and empty for an empty range or when `level >= num_levels()`.
    pub fn hash_blocks_for(&self, level: usize, data_blocks: Range<u64>) -> Range<u64> {
        let end = data_blocks.end.min(self.data_blocks);
        if level >= self.num_levels() || data_blocks.start >= end {
            return 0..0;
        }
        let shift = self.log_arity * (level as u32 + 1);
        let first = data_blocks.start.checked_shr(shift).unwrap_or(0);
        let last = (end - 1).checked_shr(shift).unwrap_or(0);
        self.level_start[level] + first..self.level_start[level] + last + 1
    }
}
