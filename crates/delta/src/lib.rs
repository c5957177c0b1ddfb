//! Updates that fetch only what changed. A sealed image's Merkle tree holds at its level 0 the hash
//! of each of its blocks, salted as its seal says: a client that has fetched a new version's tree
//! (about 1/128 of the image) and found it authentic from the image digest down knows every block
//! of the new version by its hash, and need not fetch the blocks whose hash it finds among the
//! blocks it already holds (the bases: older versions, or any other images). No chunk index, no
//! server-side delta: the image is its own index.
//!
//! [`Bases`] hashes the blocks of local images as the new image's seal says; [`plan`] compares
//! them with the new image's authentic leaves: how many blocks are found, which are to be fetched,
//! and the requests that fetch them. A block taken from a base is still checked against the new
//! tree when it is used: the hash only says where to look.

use sealfs_reader::Seal;
use sealfs_verity::{authentic_leaves, Params, TreeGeometry, TreeProblem};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    /// A base could not be read.
    #[error("{}: {source}", sealfs_text::escape_path(path))]
    Base {
        /// The base.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The new image's tree could not be read.
    #[error("{name}: reading its Merkle tree: {source}")]
    ReadTree {
        /// The image, as messages name it.
        name: String,
        /// Why.
        source: std::io::Error,
    },
    /// A block of the new image's tree is not the one its digest names.
    #[error("{name}: Merkle tree block {index} of level {level} does not match the image digest")]
    Tree {
        /// The image, as messages name it.
        name: String,
        /// The level of the block (0: the data blocks' hashes).
        level: usize,
        /// The block's index within its level.
        index: u64,
    },
}

impl DeltaError {
    /// Whether the new image is at fault (its tree does not match its digest), not the machine.
    pub fn is_image_fault(&self) -> bool {
        matches!(self, DeltaError::Tree { .. })
    }
}

/// Where a block with a given hash is found: (base, byte offset in it).
type Found = (u32, u64);

/// The blocks of local images, by their hash under one image's tree parameters.
pub struct Bases {
    paths: Vec<PathBuf>,
    block_size: u64,
    index: HashMap<Box<[u8]>, Found>,
    blocks: u64,
}

impl Bases {
    /// Hashes every whole block of each of `paths` (image files or block devices holding one: the
    /// EROFS data, the tree and seal alike) with `params` (the new image's hash, block size and
    /// salt; a block hashes to a new image's leaf only under that image's salt).
    pub fn index(paths: &[PathBuf], params: &Params) -> Result<Bases, DeltaError> {
        let mut bases = Bases {
            paths: paths.to_vec(),
            block_size: params.block_size() as u64,
            index: HashMap::new(),
            blocks: 0,
        };
        let d = params.digest_size();
        for (k, path) in paths.iter().enumerate() {
            let err = |source| DeltaError::Base {
                path: path.clone(),
                source,
            };
            let mut file = File::open(path).map_err(err)?;
            // A block device's length is where it ends, not its metadata's.
            let len = file.seek(SeekFrom::End(0)).map_err(err)?;
            let whole = len / bases.block_size * bases.block_size;
            let leaves = sealfs_verity::leaf_hashes_from_file(params, &file, 0, whole, &|_| {})
                .map_err(|e| err(std::io::Error::other(e)))?;
            for (b, h) in leaves.chunks_exact(d).enumerate() {
                bases
                    .index
                    .entry(h.into())
                    .or_insert((k as u32, b as u64 * bases.block_size));
            }
            bases.blocks += whole / bases.block_size;
        }
        Ok(bases)
    }

    /// Whole blocks hashed, across the bases.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The bases, in the order given.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Where a block hashing to `digest` is: the base's path and the byte offset in it.
    pub fn find(&self, digest: &[u8]) -> Option<(&Path, u64)> {
        self.index
            .get(digest)
            .map(|&(k, at)| (self.paths[k as usize].as_path(), at))
    }
}

/// What an update of one image from bases takes.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Bytes per block.
    pub block_size: u64,
    /// Blocks of the image's EROFS data.
    pub data_blocks: u64,
    /// Of them, found in a base.
    pub reused_blocks: u64,
    /// The others, as runs of block numbers in order.
    pub fetch: Vec<Range<u64>>,
    /// Bytes of the image after its EROFS data (the Merkle tree, the seal's header and
    /// signatures): fetched whole, for the tree is what finds the rest.
    pub seal_bytes: u64,
    /// Bytes of the image.
    pub image_length: u64,
}

impl Plan {
    /// Blocks to fetch.
    pub fn fetch_blocks(&self) -> u64 {
        self.fetch.iter().map(|r| r.end - r.start).sum()
    }

    /// Bytes an update transfers: the blocks to fetch and the seal.
    pub fn fetch_bytes(&self) -> u64 {
        self.fetch_blocks() * self.block_size + self.seal_bytes
    }

    /// The byte ranges of the blocks to fetch as requests: runs at most `gap` bytes apart joined
    /// (the blocks between are fetched along: one request costs more than a few blocks), each
    /// request at most `max` bytes.
    pub fn requests(&self, gap: u64, max: u64) -> Vec<Range<u64>> {
        let bs = self.block_size;
        let max = max.max(bs);
        let mut out: Vec<Range<u64>> = Vec::new();
        for run in &self.fetch {
            let (mut a, end) = (run.start * bs, run.end * bs);
            if let Some(last) = out.last_mut() {
                if a <= last.end + gap && end - last.start <= max {
                    last.end = end;
                    continue;
                }
            }
            while a < end {
                let b = end.min(a + max);
                out.push(a..b);
                a = b;
            }
        }
        out
    }
}

/// The plan of an update to the image whose seal is `seal` (named `name` in messages) from
/// `bases`: its tree read whole (from wherever the seal is: a file, a URL, a registry blob) and
/// checked from the image digest down before any of its hashes is used.
pub fn plan(name: &str, seal: &Seal, image_length: u64, bases: &Bases) -> Result<Plan, DeltaError> {
    let info = seal.info();
    let tree = seal.read_tree().map_err(|source| DeltaError::ReadTree {
        name: name.to_string(),
        source,
    })?;
    let leaves = authentic_leaves(&info.params, info.data_length, info.root.as_bytes(), &tree)
        .map_err(|p| match p {
            TreeProblem::TreeBlock { level, index } => DeltaError::Tree {
                name: name.to_string(),
                level,
                index,
            },
            TreeProblem::DataBlock { index } => DeltaError::Tree {
                name: name.to_string(),
                level: 0,
                index: index
                    / TreeGeometry::new(&info.params, info.data_length).hashes_per_block() as u64,
            },
        })?;
    let d = info.params.digest_size();
    let mut plan = Plan {
        block_size: info.params.block_size() as u64,
        data_blocks: (leaves.len() / d) as u64,
        reused_blocks: 0,
        fetch: Vec::new(),
        seal_bytes: image_length.saturating_sub(info.data_length),
        image_length,
    };
    for (b, h) in leaves.chunks_exact(d).enumerate() {
        let b = b as u64;
        if bases.find(h).is_some() {
            plan.reused_blocks += 1;
            continue;
        }
        match plan.fetch.last_mut() {
            Some(r) if r.end == b => r.end = b + 1,
            _ => plan.fetch.push(b..b + 1),
        }
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(fetch: Vec<Range<u64>>) -> Plan {
        Plan {
            block_size: 4096,
            data_blocks: 100,
            reused_blocks: 0,
            fetch,
            seal_bytes: 0,
            image_length: 0,
        }
    }

    #[test]
    fn requests_join_near_runs_and_split_long_ones() {
        let p = plan_of(vec![0..2, 3..4, 10..11, 20..40]);
        assert_eq!(
            p.requests(4096, 1 << 20),
            vec![0..4 * 4096, 10 * 4096..11 * 4096, 20 * 4096..40 * 4096]
        );
        assert_eq!(
            p.requests(0, 8 * 4096),
            vec![
                0..2 * 4096,
                3 * 4096..4 * 4096,
                10 * 4096..11 * 4096,
                20 * 4096..28 * 4096,
                28 * 4096..36 * 4096,
                36 * 4096..40 * 4096
            ]
        );
        assert_eq!(p.fetch_blocks(), 24);
    }
}
