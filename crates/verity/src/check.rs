//! Checking a stored Merkle tree and the data it covers, whole: what `sealfs verify` does.
//!
//! [`check_tree`] walks the stored tree top-down: the top block against the root hash, every other
//! tree block against its entry in its parent, but only where the parent itself checked out (an
//! entry in a damaged block proves nothing). Then every data block's level-0 hash (computed by the
//! caller, as [`leaf_hashes_from_file`](crate::leaf_hashes_from_file) does) is compared with its
//! entry in an authentic level-0 block. A damaged block is reported once: the blocks below it are
//! neither trusted nor reported.
//!
//! Lazily verifying readers check one path at a time instead; they share
//! [`TreeGeometry::hash_location`] and [`TreeGeometry::stored_digest`] with this walk.

use std::ops::Range;

use crate::{BlockHasher, Params, TreeGeometry};

/// A block that does not match its hash, as [`check_tree`] reports it.
///
/// Indices count blocks of the tree's block size ([`Params::block_size`], 1 KiB to 64 KiB), not
/// 4 KiB EROFS blocks: use [`TreeProblem::byte_range`] (or
/// [`TreeGeometry::data_block_range`]) for byte offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TreeProblem {
    /// Data block `index` (bytes `index × block_size ..`) does not match its level-0 hash.
    DataBlock {
        /// Index of the data block, in verity blocks.
        index: u64,
    },
    /// Tree block `index` of `level` (0 = the level holding the data blocks' hashes) does not
    /// match its entry in its parent block, or the root hash for the top block.
    TreeBlock {
        /// Tree level, 0 = leaf level.
        level: usize,
        /// Index of the block within its level.
        index: u64,
    },
}

impl TreeProblem {
    /// The damaged block's bytes: for a data block, its range in the data (the last block ends at
    /// the data size); for a tree block, its range in the stored tree (top level first).
    pub fn byte_range(&self, geometry: &TreeGeometry) -> Range<u64> {
        match *self {
            TreeProblem::DataBlock { index } => geometry.data_block_range(index),
            TreeProblem::TreeBlock { level, index } => geometry.tree_block_range(level, index),
        }
    }
}

impl TreeGeometry {
    /// Bytes of data block `index`: `index × block_size` up to the next block or the end of the
    /// data, whichever comes first (the hash covers the block zero-padded). Empty past the data.
    pub fn data_block_range(&self, index: u64) -> Range<u64> {
        let bs = self.block_size() as u64;
        let start = index.saturating_mul(bs);
        let end = start.saturating_add(bs).min(self.data_size()).max(start);
        start..end
    }

    /// Bytes of tree block `index` of `level` within the stored tree (top level first). Empty when
    /// the block does not exist.
    pub fn tree_block_range(&self, level: usize, index: u64) -> Range<u64> {
        if level >= self.num_levels() || index >= self.level_blocks(level) {
            return 0..0;
        }
        let bs = self.block_size() as u64;
        let start = (self.level_start(level) + index) * bs;
        start..start + bs
    }

    /// The digest stored at `loc` inside `block`, the bytes of tree block `loc.block` (what
    /// [`hash_location`](Self::hash_location) names); `None` if `block` is too short to hold it.
    ///
    /// An item is authentic when its hash equals this digest and `block` is authentic.
    #[inline]
    pub fn stored_digest<'a>(&self, block: &'a [u8], loc: crate::HashLocation) -> Option<&'a [u8]> {
        block.get(loc.offset..loc.offset + self.digest_size())
    }
}

/// Checks the stored Merkle `tree` over `data_len` bytes against `root`, and the data blocks, given
/// as their level-0 hashes `leaves`, against the tree. Returns at most `max_report` problems, tree
/// blocks (top level first) before data blocks, each level and the data in block order.
///
/// - `root`: the Merkle root hash (not the file digest); for data of one block it is that block's
///   hash and there is no tree.
/// - `tree`: the stored tree, [`TreeGeometry::tree_size`] bytes, top level first.
/// - `leaves`: the hashes of the data blocks, one digest each, in order (the last block
///   zero-padded), as [`BlockHasher::hash_blocks_into`] computes them.
///
/// A tree block is checked only if its parent is authentic, and reported only then: the blocks
/// below a damaged one are not reported again (they cannot be checked). Likewise a data block is
/// reported only if its level-0 block is authentic. Missing bytes (a short `tree` or `leaves`, a
/// `root` of the wrong length) count as damage; nothing panics. Empty data has nothing to check.
pub fn check_tree(
    params: &Params,
    data_len: u64,
    root: &[u8],
    tree: &[u8],
    leaves: &[u8],
    max_report: usize,
) -> Vec<TreeProblem> {
    let g = TreeGeometry::new(params, data_len);
    let (bs, d) = (params.block_size(), params.digest_size());
    let leaf = |j: u64| {
        (j as usize)
            .checked_mul(d)
            .and_then(|at| leaves.get(at..at + d))
    };
    let mut problems = Vec::new();
    if data_len == 0 || max_report == 0 {
        return problems;
    }
    if g.num_levels() == 0 {
        if leaf(0) != Some(root) {
            problems.push(TreeProblem::DataBlock { index: 0 });
        }
        return problems;
    }
    let hasher = BlockHasher::new(params);
    let block = |b: u64| {
        (b as usize)
            .checked_mul(bs)
            .and_then(|at| tree.get(at..at + bs))
    };
    let mut authentic = vec![false; g.tree_blocks() as usize];
    for level in (0..g.num_levels()).rev() {
        let top = level + 1 == g.num_levels();
        for i in 0..g.level_blocks(level) {
            let b = g.level_start(level) + i;
            // Where this block's hash is stored (None for the top block: the root).
            let parent = if top {
                None
            } else {
                let loc = g
                    .hash_location(level + 1, i)
                    .expect("index inside the level");
                if !authentic[loc.block as usize] {
                    continue;
                }
                Some(loc)
            };
            let ok = block(b).is_some_and(|bytes| {
                let digest = hasher.hash_block(bytes);
                let want = match parent {
                    None => Some(root),
                    Some(loc) => block(loc.block).and_then(|p| g.stored_digest(p, loc)),
                };
                want == Some(digest.as_bytes())
            });
            authentic[b as usize] = ok;
            if !ok {
                problems.push(TreeProblem::TreeBlock { level, index: i });
                if problems.len() == max_report {
                    return problems;
                }
            }
        }
    }
    for j in 0..g.data_blocks() {
        let loc = g.hash_location(0, j).expect("data block inside the data");
        if !authentic[loc.block as usize] {
            continue;
        }
        let want = block(loc.block).and_then(|p| g.stored_digest(p, loc));
        if want.is_none() || leaf(j) != want {
            problems.push(TreeProblem::DataBlock { index: j });
            if problems.len() == max_report {
                break;
            }
        }
    }
    problems
}

/// The level-0 digests of a tree (one per data block, concatenated), once every tree block was
/// found authentic from `root` down: what a client that fetched only the tree knows of each block
/// it has not read. The first problem found otherwise (a [`TreeProblem::TreeBlock`]).
pub fn authentic_leaves(
    params: &Params,
    data_len: u64,
    root: &[u8],
    tree: &[u8],
) -> Result<Vec<u8>, TreeProblem> {
    let g = TreeGeometry::new(params, data_len);
    let d = params.digest_size();
    if g.num_levels() == 0 {
        return Ok(if data_len == 0 {
            Vec::new()
        } else {
            root.to_vec()
        });
    }
    let mut leaves = Vec::with_capacity(g.data_blocks() as usize * d);
    for j in 0..g.data_blocks() {
        let loc = g.hash_location(0, j).expect("data block inside the data");
        let stored = (loc.block as usize)
            .checked_mul(params.block_size())
            .and_then(|at| tree.get(at..at + params.block_size()))
            .and_then(|b| g.stored_digest(b, loc))
            .ok_or(TreeProblem::TreeBlock {
                level: 0,
                index: loc.block - g.level_start(0),
            })?;
        leaves.extend_from_slice(stored);
    }
    // The tree's upper levels checked from the root down; its level 0 compared with itself.
    match check_tree(params, data_len, root, tree, &leaves, 1).first() {
        Some(&problem) => Err(problem),
        None => Ok(leaves),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{build_tree, HashAlg};

    /// Deterministic, block-distinct data.
    fn data(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[(i % 3) + 1])
            .collect()
    }

    fn leaves(params: &Params, data: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; data.len().div_ceil(params.block_size()) * params.digest_size()];
        BlockHasher::new(params).hash_blocks_into(data, &mut out);
        out
    }

    /// (params, data, tree bytes, root) of an undamaged tree.
    fn sealed(alg: HashAlg, bs: usize, len: usize) -> (Params, Vec<u8>, Vec<u8>, Vec<u8>) {
        let params = Params::new(alg, bs, b"salt").unwrap();
        let data = data(len);
        let tree = build_tree(&params, &data).unwrap();
        (params, data, tree.bytes, tree.root.as_bytes().to_vec())
    }

    fn check(p: &Params, data: &[u8], tree: &[u8], root: &[u8], max: usize) -> Vec<TreeProblem> {
        check_tree(p, data.len() as u64, root, tree, &leaves(p, data), max)
    }

    #[test]
    fn an_undamaged_tree_has_no_problems() {
        for (alg, bs, len) in [
            (HashAlg::Sha256, 4096, 0),
            (HashAlg::Sha256, 4096, 1),
            (HashAlg::Sha256, 4096, 4096),
            (HashAlg::Sha256, 4096, 4097),
            (HashAlg::Sha256, 1024, 1024 * 2000 + 17),
            (HashAlg::Sha512, 1024, 1024 * 300),
            (HashAlg::Sha256, 65536, 65536 * 3),
        ] {
            let (p, data, tree, root) = sealed(alg, bs, len);
            assert_eq!(
                check(&p, &data, &tree, &root, 100),
                vec![],
                "{alg:?} {bs} {len}"
            );
        }
    }

    #[test]
    fn damaged_data_blocks_are_reported_in_verity_blocks() {
        for bs in [1024, 4096, 65536] {
            let len = bs * 40 + bs / 2;
            let (p, mut data, tree, root) = sealed(HashAlg::Sha256, bs, len);
            let g = TreeGeometry::new(&p, len as u64);
            // A byte in data block 7, and one in the last (partial) block.
            let at = 7 * bs + 123;
            data[at] ^= 1;
            data[len - 1] ^= 0x80;
            let problems = check(&p, &data, &tree, &root, 100);
            assert_eq!(
                problems,
                vec![
                    TreeProblem::DataBlock { index: 7 },
                    TreeProblem::DataBlock { index: 40 }
                ],
                "block size {bs}"
            );
            let r = problems[0].byte_range(&g);
            assert_eq!(r, (7 * bs) as u64..(8 * bs) as u64);
            assert!(r.contains(&(at as u64)));
            assert_eq!(problems[1].byte_range(&g), (40 * bs) as u64..len as u64);
        }
    }

    #[test]
    fn a_single_block_is_checked_against_the_root() {
        let (p, mut data, tree, root) = sealed(HashAlg::Sha256, 4096, 100);
        assert!(tree.is_empty());
        data[5] ^= 1;
        assert_eq!(
            check(&p, &data, &tree, &root, 10),
            vec![TreeProblem::DataBlock { index: 0 }]
        );
    }

    #[test]
    fn a_damaged_tree_block_is_reported_once_at_every_level() {
        for alg in [HashAlg::Sha256, HashAlg::Sha512] {
            // 1 KiB blocks: SHA-256 gives 3 levels, SHA-512 4.
            let len = 1024 * 2000 + 5;
            let (p, data, tree, root) = sealed(alg, 1024, len);
            let g = TreeGeometry::new(&p, len as u64);
            assert!(g.num_levels() >= 3);
            for level in 0..g.num_levels() {
                let index = g.level_blocks(level) - 1;
                let mut bad = tree.clone();
                let r = g.tree_block_range(level, index);
                bad[r.start as usize + 9] ^= 4;
                // A data block below the damaged block is damaged too: not reported.
                let mut data = data.clone();
                data[len - 1] ^= 1;
                assert_eq!(
                    check(&p, &data, &bad, &root, 100),
                    vec![TreeProblem::TreeBlock { level, index }],
                    "{alg:?} level {level}"
                );
                assert_eq!(TreeProblem::TreeBlock { level, index }.byte_range(&g), r);
            }
        }
    }

    #[test]
    fn a_wrong_root_fails_the_top_block_only() {
        let len = 1024 * 100;
        let (p, data, tree, mut root) = sealed(HashAlg::Sha256, 1024, len);
        let g = TreeGeometry::new(&p, len as u64);
        root[0] ^= 1;
        let top = g.num_levels() - 1;
        assert_eq!(
            check(&p, &data, &tree, &root, 100),
            vec![TreeProblem::TreeBlock {
                level: top,
                index: 0
            }]
        );
    }

    #[test]
    fn max_report_caps_the_list() {
        let bs = 1024;
        let (p, mut data, mut tree, root) = sealed(HashAlg::Sha256, bs, bs * 200);
        let g = TreeGeometry::new(&p, data.len() as u64);
        for j in [3, 50, 51, 120, 199] {
            data[j * bs] ^= 1;
        }
        let all = check(&p, &data, &tree, &root, usize::MAX);
        assert_eq!(all.len(), 5);
        assert_eq!(check(&p, &data, &tree, &root, 3), all[..3]);
        assert_eq!(check(&p, &data, &tree, &root, 0), vec![]);
        // Tree blocks come first and count towards the cap.
        let r = g.tree_block_range(0, 6);
        tree[r.start as usize] ^= 1;
        assert_eq!(
            check(&p, &data, &tree, &root, 2),
            vec![
                TreeProblem::TreeBlock { level: 0, index: 6 },
                TreeProblem::DataBlock { index: 3 }
            ]
        );
    }

    #[test]
    fn short_inputs_count_as_damage_without_panicking() {
        let bs = 1024;
        let (p, data, tree, root) = sealed(HashAlg::Sha256, bs, bs * 100);
        let l = leaves(&p, &data);
        let len = data.len() as u64;
        // Tree cut short: the level-0 blocks are missing.
        let problems = check_tree(&p, len, &root, &tree[..bs], &l, 100);
        assert_eq!(
            problems,
            vec![
                TreeProblem::TreeBlock { level: 0, index: 0 },
                TreeProblem::TreeBlock { level: 0, index: 1 },
                TreeProblem::TreeBlock { level: 0, index: 2 },
                TreeProblem::TreeBlock { level: 0, index: 3 }
            ]
        );
        // Leaves cut short: the missing ones are reported.
        let problems = check_tree(&p, len, &root, &tree, &l[..l.len() - 64], 100);
        assert_eq!(
            problems,
            vec![
                TreeProblem::DataBlock { index: 98 },
                TreeProblem::DataBlock { index: 99 }
            ]
        );
        // Nothing at all.
        assert_eq!(check_tree(&p, len, &[], &[], &[], 100).len(), 1);
    }

    #[test]
    fn data_block_range_clamps_to_the_data() {
        let p = Params::new(HashAlg::Sha256, 65536, b"").unwrap();
        let g = TreeGeometry::new(&p, 65536 + 10);
        assert_eq!(g.data_block_range(0), 0..65536);
        assert_eq!(g.data_block_range(1), 65536..65546);
        assert!(g.data_block_range(5).is_empty());
        assert!(g.data_block_range(u64::MAX).is_empty());
        assert!(g.tree_block_range(0, 1).is_empty());
    }

    #[test]
    fn authentic_leaves_are_the_data_hashes_and_a_damaged_tree_block_is_named() {
        for (alg, bs, len) in [
            (HashAlg::Sha256, 4096, 3 << 20),
            (HashAlg::Sha512, 1024, 70_000),
        ] {
            let (params, data, mut tree, root) = sealed(alg, bs, len);
            assert_eq!(
                authentic_leaves(&params, len as u64, &root, &tree).unwrap(),
                leaves(&params, &data)
            );
            let last = tree.len() - 1;
            tree[last - bs / 2] ^= 1;
            assert!(matches!(
                authentic_leaves(&params, len as u64, &root, &tree),
                Err(TreeProblem::TreeBlock { .. })
            ));
        }
        // One block: the root is its hash.
        let (params, data, tree, root) = sealed(HashAlg::Sha256, 4096, 100);
        assert_eq!(
            authentic_leaves(&params, 100, &root, &tree).unwrap(),
            leaves(&params, &data)
        );
    }
}
