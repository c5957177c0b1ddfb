//! The root and file digest of data streamed in, without keeping the tree.
//!
//! [`RootHasher`] holds at most one partial tree block per level (a few KiB whatever the data
//! size), where [`TreeBuilder`](crate::TreeBuilder) keeps every level-0 hash (1/128 of the data
//! at SHA-256 and 4 KiB blocks). Runs of zeros ([`RootHasher::update_zeros`], a sparse file's
//! holes) cost time and memory in the logarithm of their length: a whole tree block of
//! all-zero subtrees of height `k` hashes to the all-zero subtree of height `k + 1`, computed
//! once. For callers that need a file's digest and not its tree: a builder's per-file digests,
//! where a 1 TiB sparse file would otherwise need 8 GiB of leaf hashes and 2^28 block hashes.

use crate::{BlockHasher, Descriptor, Digest, Params, TreeGeometry};

/// Level-0 hashes computed per step of [`RootHasher::update`] (a multiple of every arity).
const LEAVES_PER_STEP: usize = 256;

/// Streams data (or its level-0 hashes, or runs of zeros) into a Merkle root and file digest.
///
/// The result equals [`build_tree`](crate::build_tree)'s over the same bytes:
///
/// ```
/// use sealfs_verity::{build_tree, Params, RootHasher};
///
/// let params = Params::default();
/// let mut data = vec![7u8; 5000];
/// data.resize(3 << 20, 0);
/// data.extend_from_slice(b"tail");
///
/// let mut r = RootHasher::new(&params);
/// r.update(&[7u8; 5000]);
/// r.update_zeros((3 << 20) - 5000);
/// r.update(b"tail");
/// assert_eq!(r.finish(), build_tree(&params, &data)?.digest());
/// # Ok::<(), sealfs_verity::Error>(())
/// ```
pub struct RootHasher {
    hasher: BlockHasher,
    data_size: u64,
    /// Data not yet hashed: less than a block, starting at a block boundary.
    pending: Vec<u8>,
    /// Whether a short last block was given as a leaf hash (nothing may follow it).
    ended: bool,
    /// `levels[k]`: the hashes of level `k` not yet hashed into level `k + 1` (fewer than the
    /// arity).
    levels: Vec<Vec<u8>>,
    /// `zeros[k]`: the hash of an all-zero subtree of height `k` (`zeros[0]`: of a zero block).
    zeros: Vec<Vec<u8>>,
}

impl RootHasher {
    /// Nothing hashed yet.
    pub fn new(params: &Params) -> Self {
        RootHasher {
            hasher: BlockHasher::new(params),
            data_size: 0,
            pending: Vec::new(),
            ended: false,
            levels: Vec::new(),
            zeros: Vec::new(),
        }
    }

    /// Bytes consumed so far.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Appends `data`.
    ///
    /// # Panics
    ///
    /// After [`push_leaves`](Self::push_leaves) ended the data with a short block.
    pub fn update(&mut self, mut data: &[u8]) {
        assert!(!self.ended, "data after a short last block");
        let (bs, d) = (self.block_size(), self.digest_size());
        self.data_size += data.len() as u64;
        if !self.pending.is_empty() {
            let take = (bs - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.pending.len() < bs {
                return;
            }
            let block = std::mem::take(&mut self.pending);
            let mut leaf = [0u8; crate::MAX_DIGEST_SIZE];
            self.hasher.hash_block_into(&block, &mut leaf[..d]);
            self.push(0, &leaf[..d]);
        }
        let mut leaves = [0u8; LEAVES_PER_STEP * crate::MAX_DIGEST_SIZE];
        while data.len() >= bs {
            let n = (data.len() / bs).min(LEAVES_PER_STEP);
            let out = &mut leaves[..n * d];
            self.hasher.hash_blocks_into(&data[..n * bs], out);
            for leaf in out.chunks_exact(d) {
                self.push(0, leaf);
            }
            data = &data[n * bs..];
        }
        self.pending.extend_from_slice(data);
    }

    /// Appends `len` zero bytes, in time and memory logarithmic in `len`.
    ///
    /// # Panics
    ///
    /// After [`push_leaves`](Self::push_leaves) ended the data with a short block.
    pub fn update_zeros(&mut self, mut len: u64) {
        assert!(!self.ended, "data after a short last block");
        let bs = self.block_size();
        if !self.pending.is_empty() {
            let take = ((bs - self.pending.len()) as u64).min(len);
            self.data_size += take;
            len -= take;
            let pending = self.pending.len() + take as usize;
            self.pending.resize(pending, 0);
            if pending < bs {
                return;
            }
            let block = std::mem::take(&mut self.pending);
            let leaf = self.hasher.hash_block(&block);
            self.push(0, leaf.as_bytes());
        }
        self.data_size += len;
        self.push_zero_subtrees(0, len / bs as u64);
        self.pending.resize((len % bs as u64) as usize, 0);
    }

    /// Appends the level-0 hashes of whole blocks of data (as [`BlockHasher`] computes them),
    /// covering `bytes` bytes: `bytes` may end inside the last block (hashed zero-padded), and
    /// then nothing more may be appended.
    ///
    /// # Panics
    ///
    /// If data is pending inside a block, if `leaves` is not `ceil(bytes / block_size)`
    /// digests, or after a short last block.
    pub fn push_leaves(&mut self, leaves: &[u8], bytes: u64) {
        let (bs, d) = (self.block_size() as u64, self.digest_size());
        assert!(!self.ended, "data after a short last block");
        assert!(self.pending.is_empty(), "leaf hashes inside a block");
        assert_eq!(
            leaves.len() as u64,
            bytes.div_ceil(bs) * d as u64,
            "leaf hashes for {bytes} bytes"
        );
        for leaf in leaves.chunks_exact(d) {
            self.push(0, leaf);
        }
        self.data_size += bytes;
        self.ended = !bytes.is_multiple_of(bs);
    }

    /// The Merkle root of everything appended (all zeros for no data).
    pub fn root(mut self) -> Digest {
        let d = self.digest_size();
        let alg = self.hasher.params().alg();
        if !self.pending.is_empty() {
            let block = std::mem::take(&mut self.pending);
            let leaf = self.hasher.hash_block(&block);
            self.push(0, leaf.as_bytes());
        }
        let levels = TreeGeometry::new(self.hasher.params(), self.data_size).num_levels();
        if levels == 0 {
            // At most one block: its hash, if any, is the root.
            return match self.levels.first() {
                Some(l) if !l.is_empty() => Digest::from_raw(alg, &l[..d]),
                _ => Digest::zero(alg),
            };
        }
        let top = levels - 1;
        for k in 0..top {
            if self.levels.get(k).is_some_and(|l| !l.is_empty()) {
                let block = std::mem::take(&mut self.levels[k]);
                let h = self.hasher.hash_block(&block);
                self.push(k + 1, h.as_bytes());
            }
        }
        match self.levels.get(top) {
            Some(l) if !l.is_empty() => self.hasher.hash_block(l),
            // The top block filled up and was hashed as soon as it did.
            _ => Digest::from_raw(alg, &self.levels[top + 1][..d]),
        }
    }

    /// The fs-verity file digest of everything appended, as `fsverity digest` prints it.
    pub fn finish(self) -> Digest {
        let (params, data_size) = (*self.hasher.params(), self.data_size);
        Descriptor::from_parts(params, data_size, self.root()).digest()
    }

    fn block_size(&self) -> usize {
        self.hasher.params().block_size()
    }

    fn digest_size(&self) -> usize {
        self.hasher.params().digest_size()
    }

    /// Appends one hash to `level`, hashing the level's block into the next once it is full.
    fn push(&mut self, level: usize, hash: &[u8]) {
        let arity = self.hasher.params().block_size() / self.digest_size();
        if self.levels.len() <= level {
            self.levels.resize_with(level + 1, Vec::new);
        }
        self.levels[level].extend_from_slice(hash);
        if self.levels[level].len() == arity * hash.len() {
            let block = std::mem::take(&mut self.levels[level]);
            let h = self.hasher.hash_block(&block);
            self.push(level + 1, h.as_bytes());
            self.levels[level] = block;
            self.levels[level].clear();
        }
    }

    /// Appends `count` all-zero subtrees of height `level`: those that fill a block of the level
    /// whole go up one level as fewer subtrees of the next height.
    fn push_zero_subtrees(&mut self, level: usize, mut count: u64) {
        let arity = (self.block_size() / self.digest_size()) as u64;
        let zero = self.zero_subtree(level);
        while count > 0 && self.levels.get(level).is_some_and(|l| !l.is_empty()) {
            self.push(level, &zero);
            count -= 1;
        }
        if count >= arity {
            self.push_zero_subtrees(level + 1, count / arity);
            count %= arity;
        }
        for _ in 0..count {
            self.push(level, &zero);
        }
    }

    /// The hash of an all-zero subtree of height `level`, computed once.
    fn zero_subtree(&mut self, level: usize) -> Vec<u8> {
        while self.zeros.len() <= level {
            let h = match self.zeros.last() {
                None => self.hasher.hash_block(&[]),
                Some(below) => {
                    let arity = self.block_size() / self.digest_size();
                    self.hasher.hash_block(&below.repeat(arity))
                }
            };
            self.zeros.push(h.as_bytes().to_vec());
        }
        self.zeros[level].clone()
    }
}

impl std::fmt::Debug for RootHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RootHasher")
            .field("params", self.hasher.params())
            .field("data_size", &self.data_size)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{build_tree, HashAlg};

    fn params() -> Vec<Params> {
        vec![
            Params::default(),
            Params::new(HashAlg::Sha256, 1024, b"salt").unwrap(),
            Params::new(HashAlg::Sha512, 4096, b"").unwrap(),
        ]
    }

    /// Data of `len` bytes: zero runs at `holes`, a byte pattern elsewhere.
    fn data(len: usize, holes: &[(usize, usize)]) -> Vec<u8> {
        let mut v: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4093) as u8 | 1).collect();
        for &(a, b) in holes {
            v[a.min(len)..b.min(len)].fill(0);
        }
        v
    }

    /// Feeds `v` with its zero runs (of at least `min_run` bytes) as `update_zeros`, in pieces.
    fn streamed(p: &Params, v: &[u8], piece: usize, min_run: usize) -> Digest {
        let mut r = RootHasher::new(p);
        let mut i = 0;
        while i < v.len() {
            let zeros = v[i..].iter().take_while(|&&b| b == 0).count();
            if zeros >= min_run {
                r.update_zeros(zeros as u64);
                i += zeros;
            } else {
                let end = (i + piece).min(v.len());
                r.update(&v[i..end]);
                i = end;
            }
        }
        assert_eq!(r.data_size(), v.len() as u64);
        r.finish()
    }

    #[test]
    fn equals_the_built_tree() {
        for p in params() {
            let bs = p.block_size();
            let arity = bs / p.digest_size();
            let sizes = [
                0,
                1,
                bs - 1,
                bs,
                bs + 1,
                arity * bs,
                arity * bs + 1,
                arity * arity * bs,
                arity * arity * bs + 3 * bs + 5,
            ];
            for len in sizes {
                let holes = [
                    (0, len / 3),
                    (len / 2, len / 2 + arity * bs + 17),
                    (len - len / 5, len),
                ];
                for v in [data(len, &[]), data(len, &holes), vec![0; len]] {
                    let want = build_tree(&p, &v).unwrap().digest();
                    for (piece, min_run) in [(len.max(1), usize::MAX), (777, 1), (bs, 100), (3, 1)]
                    {
                        assert_eq!(
                            streamed(&p, &v, piece, min_run),
                            want,
                            "{p:?} len {len} piece {piece}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn leaf_hashes_and_data_mix() {
        let p = Params::default();
        let v = data(300 * 4096 + 10, &[(4096 * 5, 4096 * 200)]);
        let want = build_tree(&p, &v).unwrap().digest();
        let h = BlockHasher::new(&p);
        let mut leaves = vec![0; 100 * 32];
        h.hash_blocks_into(&v[..100 * 4096], &mut leaves);
        let mut r = RootHasher::new(&p);
        r.push_leaves(&leaves, 100 * 4096);
        r.update(&v[100 * 4096..250 * 4096]);
        let rest = &v[250 * 4096..];
        let mut leaves = vec![0; rest.len().div_ceil(4096) * 32];
        h.hash_blocks_into(rest, &mut leaves);
        r.push_leaves(&leaves, rest.len() as u64);
        assert_eq!(r.finish(), want);
    }
}
