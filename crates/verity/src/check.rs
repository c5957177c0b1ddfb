//! Checking a stored Merkle tree and an image's level-0 hashes against a root.

use crate::{BlockHasher, Params, TreeGeometry};

/// One thing [`check_tree`] found wrong. Indices are in Merkle blocks of the tree's block size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeProblem {
    /// Data block `index` does not match its (authentic) level-0 hash.
    DataBlock {
        /// Index of the data block, in Merkle blocks.
        index: u64,
    },
    /// Block `index` of tree level `level` does not match its parent's hash (or the root); its
    /// children are not reported.
    TreeBlock {
        /// Tree level (0 hashes data blocks).
        level: usize,
        /// Block index within the level.
        index: u64,
    },
}

/// Checks a stored tree (`tree`, root level first) top-down against `root`, then every data block's
/// level-0 hash (`leaves`, computed from the data) against the authentic tree blocks. A damaged tree
/// block is reported once: what it hashes cannot be judged. At most `max_report` problems.
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
    let hasher = BlockHasher::new(params);
    let mut problems = Vec::new();
    if data_len == 0 {
        return problems;
    }
    if g.num_levels() == 0 {
        if leaves.get(..d) != Some(root) {
            problems.push(TreeProblem::DataBlock { index: 0 });
        }
        return problems;
    }
    let mut authentic = vec![false; g.tree_blocks() as usize];
    let stored =
        |block: usize, offset: usize| tree.get(block * bs + offset..block * bs + offset + d);
    for level in (0..g.num_levels()).rev() {
        for i in 0..g.level_blocks(level) {
            let b = (g.level_start(level) + i) as usize;
            let Some(bytes) = tree.get(b * bs..(b + 1) * bs) else {
                continue;
            };
            let digest = hasher.hash_block(bytes);
            let (ok, parent_ok) = if level + 1 == g.num_levels() {
                (digest.as_bytes() == root, true)
            } else {
                let loc = g
                    .hash_location(level + 1, i)
                    .expect("index inside the level");
                let parent = authentic[loc.block as usize];
                (
                    parent && stored(loc.block as usize, loc.offset) == Some(digest.as_bytes()),
                    parent,
                )
            };
            authentic[b] = ok;
            if !ok && parent_ok && problems.len() < max_report {
                problems.push(TreeProblem::TreeBlock { level, index: i });
            }
        }
    }
    for j in 0..g.data_blocks() {
        let loc = g.hash_location(0, j).expect("data block inside the image");
        if authentic[loc.block as usize]
            && stored(loc.block as usize, loc.offset)
                != leaves.get(j as usize * d..(j as usize + 1) * d)
            && problems.len() < max_report
        {
            problems.push(TreeProblem::DataBlock { index: j });
        }
    }
    problems
}
