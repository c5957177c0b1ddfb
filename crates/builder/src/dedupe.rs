//! Whole-file dedupe: a file can have an identical twin only if another file has its size, so only
//! those files are read and named by their content (their fs-verity digest) before their data is
//! placed; files with equal digests share their data.

use crate::error::{BuildError, Result};
use crate::source::{open_file, Source};
use crate::tree::{Kind, Tree};
use sealfs_format::BLKSZ;
use sealfs_verity::{BlockHasher, Digest, HashAlg};
use std::collections::{HashMap, HashSet};

/// Content digests of files, by inode id: the ids in order and their digests' bytes side by side
/// (40 bytes a file with SHA-256, where a map of [`Digest`]s took about 135; in an archive of many
/// identical files nearly every file has one).
#[derive(Debug, Default)]
pub(crate) struct ContentDigests {
    /// Their algorithm (`None` when there are none).
    alg: Option<HashAlg>,
    ids: Vec<usize>,
    bytes: Vec<u8>,
}

impl ContentDigests {
    /// File `id`'s digest, if it has one.
    pub(crate) fn get(&self, id: usize) -> Option<Digest> {
        let at = self.ids.binary_search(&id).ok()?;
        let alg = self.alg?;
        Some(Digest::new(alg, self.bytes_at(at)).expect("slots are digest-size"))
    }

    fn bytes_at(&self, at: usize) -> &[u8] {
        let size = self.alg.map_or(0, HashAlg::digest_size);
        &self.bytes[at * size..(at + 1) * size]
    }

    /// `(inode id, digest bytes)`, by id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &[u8])> {
        (0..self.ids.len()).map(|at| self.at(at))
    }

    /// The `at`-th file (by id): `(inode id, digest bytes)`.
    pub(crate) fn at(&self, at: usize) -> (usize, &[u8]) {
        (self.ids[at], self.bytes_at(at))
    }
}

/// Bytes read at a time.
const READ: u64 = 4 << 20;

/// The hasher that names content when the build makes no per-file digests (an unsealed build).
pub(crate) fn key_hasher() -> BlockHasher {
    let p = sealfs_verity::Params::new(sealfs_verity::HashAlg::Sha256, BLKSZ as usize, b"")
        .expect("4 KiB blocks are valid");
    BlockHasher::new(&p)
}

/// The sizes two or more of the regular files among `ids` share: only files of those sizes can
/// have a twin.
pub(crate) fn shared_sizes(tree: &Tree, ids: impl Iterator<Item = usize>) -> HashSet<u64> {
    let mut seen = HashSet::new();
    let mut shared = HashSet::new();
    for id in ids {
        let size = size_of(tree, id);
        if !seen.insert(size) {
            shared.insert(size);
        }
    }
    shared
}

/// The fs-verity digests (by `hasher`, 4 KiB blocks) of those regular files among `ids` that have
/// a twin candidate: files of the same size are read in parallel and compared by a fast hash first,
/// and only those that match another are hashed with `hasher` (which alone decides equality). Each
/// file read is checked unchanged since the scan.
pub(crate) fn same_size_digests(
    source: &dyn Source,
    tree: &Tree,
    ids: &[usize],
    hasher: &BlockHasher,
) -> Result<ContentDigests> {
    use rayon::prelude::*;
    let shared = shared_sizes(tree, ids.iter().copied());
    let same_size: Vec<usize> = (ids.iter().copied())
        .filter(|&id| shared.contains(&size_of(tree, id)))
        .collect();
    let quick: Vec<(usize, u128)> = same_size
        .par_iter()
        .map(|&id| {
            let mut h = xxhash_rust::xxh3::Xxh3::new();
            read_file(source, tree, id, |data| h.update(data))?;
            Ok((id, h.digest128()))
        })
        .collect::<Result<_>>()?;
    let mut by_quick: HashMap<(u64, u128), Vec<usize>> = HashMap::new();
    for (id, q) in quick {
        by_quick.entry((size_of(tree, id), q)).or_default().push(id);
    }
    let mut candidates: Vec<usize> = by_quick
        .into_values()
        .filter(|ids| ids.len() > 1)
        .flatten()
        .collect();
    candidates.sort_unstable();
    let alg = hasher.params().alg();
    let mut bytes = vec![0u8; candidates.len() * alg.digest_size()];
    // Each digest straight into its slot.
    (bytes.par_chunks_mut(alg.digest_size()))
        .zip(candidates.par_iter())
        .try_for_each(|(slot, &id)| {
            let size = size_of(tree, id);
            let digest_size = hasher.params().digest_size();
            let mut leaves = vec![0u8; size.div_ceil(BLKSZ) as usize * digest_size];
            let mut at = 0;
            read_file(source, tree, id, |data| {
                let n = data.len().div_ceil(BLKSZ as usize) * digest_size;
                hasher.hash_blocks_into(data, &mut leaves[at..at + n]);
                at += n;
            })?;
            let digest =
                sealfs_verity::Tree::from_leaf_hashes_serial(hasher.params(), size, &leaves)
                    .map_err(|e| {
                        let path = tree.path(&tree.inodes[id]);
                        BuildError::io(path, "hash", std::io::Error::other(e))
                    })?
                    .digest();
            slot.copy_from_slice(digest.as_bytes());
            Ok::<_, BuildError>(())
        })?;
    Ok(ContentDigests {
        alg: Some(alg),
        ids: candidates,
        bytes,
    })
}

fn size_of(tree: &Tree, id: usize) -> u64 {
    match &tree.inodes[id].kind {
        Kind::File(f) => f.size,
        _ => unreachable!("only regular files have content digests"),
    }
}

/// Reads file `id` whole, in pieces of [`READ`] bytes (all but the last a multiple of the block
/// size), and checks it unchanged since the scan.
fn read_file(
    source: &dyn Source,
    tree: &Tree,
    id: usize,
    mut each: impl FnMut(&[u8]),
) -> Result<()> {
    let (inode, size) = (&tree.inodes[id], size_of(tree, id));
    let mut src = open_file(source, tree, inode)?;
    let mut buf = vec![0u8; size.min(READ) as usize];
    for start in (0..size).step_by(READ as usize) {
        let len = (size - start).min(READ) as usize;
        src.read_at(&mut buf[..len], start)?;
        each(&buf[..len]);
    }
    src.finish()
}
