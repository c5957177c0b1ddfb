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

mod files;
mod regions;

pub use files::{file_changes, FileChanges};
pub use regions::{count_by_region, like_image, regions, Region};
use sealfs_reader::{ReadAt, Seal};
use sealfs_verity::{authentic_leaves, BlockHasher, Params, TreeGeometry, TreeProblem};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

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
    /// Bytes of the new image could not be fetched.
    #[error("{name}: bytes {start}..{end}: {source}")]
    Fetch {
        /// The image, as messages name it.
        name: String,
        /// Where.
        start: u64,
        /// Where.
        end: u64,
        /// Why.
        source: std::io::Error,
    },
    /// A fetched block is not the one the new image's tree names.
    #[error("{name}: block {block} as fetched does not match its hash in the Merkle tree")]
    Fetched {
        /// The image, as messages name it.
        name: String,
        /// The block.
        block: u64,
    },
    /// The output could not be written.
    #[error("{}: {source}", sealfs_text::escape_path(path))]
    Write {
        /// The output.
        path: PathBuf,
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
        matches!(self, DeltaError::Tree { .. } | DeltaError::Fetched { .. })
    }
}

/// Where a block with a given hash is found: (base, byte offset in it).
type Found = (u32, u64);

/// The blocks of local images, by their hash under one image's tree parameters.
pub struct Bases {
    paths: Vec<PathBuf>,
    /// The files blocks are found in: the bases, then the files of blocks added by
    /// [`Bases::add_cached`].
    files: Vec<PathBuf>,
    block_size: u64,
    index: HashMap<Box<[u8]>, Found>,
    blocks: u64,
    cached: u64,
}

impl Bases {
    /// Indexes the blocks of each of `paths` (image files or block devices holding one) by their
    /// hash under `params` (the new image's hash, block size and salt: a block hashes to a new
    /// image's leaf only under that image's salt). A sealed base with the same parameters gives
    /// the hashes of its EROFS blocks from its own tree's level 0 (read, about 1/128 of it, not
    /// checked: each block taken is checked against the new tree when it is read); any other
    /// base (another salt or hash, a partial file, a plain image) has every whole block hashed.
    pub fn index(paths: &[PathBuf], params: &Params) -> Result<Bases, DeltaError> {
        let mut bases = Bases {
            paths: paths.to_vec(),
            files: paths.to_vec(),
            block_size: params.block_size() as u64,
            index: HashMap::new(),
            blocks: 0,
            cached: 0,
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
            let leaves = match own_leaves(&file, params) {
                Some(leaves) => leaves,
                None => {
                    let whole = len / bases.block_size * bases.block_size;
                    sealfs_verity::leaf_hashes_from_file(params, &file, 0, whole, &|_| {})
                        .map_err(|e| err(std::io::Error::other(e)))?
                }
            };
            for (b, h) in leaves.chunks_exact(d).enumerate() {
                bases
                    .index
                    .entry(h.into())
                    .or_insert((k as u32, b as u64 * bases.block_size));
            }
            bases.blocks += (leaves.len() / d) as u64;
        }
        Ok(bases)
    }

    /// Whole blocks hashed, across the bases.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Adds blocks held elsewhere by their leaf under the new image's parameters, `(leaf, file,
    /// offset)`: the persistent cache's entries of images with the same hash algorithm, block size
    /// and salt (`sealfs_cache::DiskCache::leaf_entries`). A leaf a base holds keeps the base's
    /// block. Hints like a base's hashes: a block is used only once it hashes to the new image's
    /// leaf, and one whose file has gone (a cache chunk pruned since) is fetched instead.
    pub fn add_cached(&mut self, entries: impl IntoIterator<Item = (Box<[u8]>, PathBuf, u64)>) {
        let mut file_of: HashMap<PathBuf, u32> = HashMap::new();
        for (leaf, path, offset) in entries {
            if self.index.contains_key(&leaf) {
                continue;
            }
            let k = *file_of.entry(path).or_insert_with_key(|p| {
                self.files.push(p.clone());
                (self.files.len() - 1) as u32
            });
            self.index.insert(leaf, (k, offset));
            self.cached += 1;
        }
    }

    /// Blocks added by [`Bases::add_cached`] (whose leaf no base holds).
    pub fn cached_blocks(&self) -> u64 {
        self.cached
    }

    /// Whether the block found at `found` is one [`Bases::add_cached`] added.
    fn is_cached(&self, found: Found) -> bool {
        found.0 as usize >= self.paths.len()
    }

    /// The bases, in the order given.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// Where a block hashing to `digest` is: the base's path and the byte offset in it.
    pub fn find(&self, digest: &[u8]) -> Option<(&Path, u64)> {
        self.index
            .get(digest)
            .map(|&(k, at)| (self.files[k as usize].as_path(), at))
    }
}

/// The level-0 digests a sealed image at `file` records in its own tree, when its seal is attached
/// and made with `params`.
fn own_leaves(file: &File, params: &Params) -> Option<Vec<u8>> {
    let source: std::sync::Arc<dyn ReadAt> = std::sync::Arc::new(file.try_clone().ok()?);
    let sealfs_reader::Found::Sealed(seal) =
        sealfs_reader::find_seal(&source, "base", None).ok()?
    else {
        return None;
    };
    let info = seal.info();
    if seal.is_detached() || info.params != *params {
        return None;
    }
    let tree = seal.read_tree().ok()?;
    let g = TreeGeometry::new(params, info.data_length);
    if g.num_levels() == 0 {
        return None;
    }
    let d = params.digest_size();
    let mut leaves = Vec::with_capacity(g.data_blocks() as usize * d);
    for j in 0..g.data_blocks() {
        let loc = g.hash_location(0, j)?;
        let block = tree.get(loc.block as usize * params.block_size()..)?;
        leaves.extend_from_slice(g.stored_digest(block, loc)?);
    }
    Some(leaves)
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

    /// Bytes an update transfers after opening the image: its requests for blocks (`gap` and
    /// `max` as [`Plan::requests`] takes them) and the seal (the tree included).
    pub fn fetch_bytes(&self, gap: u64, max: u64) -> u64 {
        self.requests(gap, max)
            .iter()
            .map(|r| r.end - r.start)
            .sum::<u64>()
            + self.seal_bytes
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

/// The new image's tree read whole (from wherever the seal is: a file, a URL, a registry blob) and
/// checked from the image digest down: (the tree's bytes, its level-0 digests).
fn authentic_tree(name: &str, seal: &Seal) -> Result<(Vec<u8>, Vec<u8>), DeltaError> {
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
    Ok((tree, leaves))
}

/// The plan of an update to the image whose seal is `seal` (named `name` in messages) from
/// `bases`: its tree read whole and checked from the image digest down before any of its hashes
/// is used.
pub fn plan(name: &str, seal: &Seal, image_length: u64, bases: &Bases) -> Result<Plan, DeltaError> {
    let (_, leaves) = authentic_tree(name, seal)?;
    Ok(plan_from_leaves(seal, &leaves, image_length, |h| {
        bases.find(h).is_some()
    }))
}

fn plan_from_leaves(
    seal: &Seal,
    leaves: &[u8],
    image_length: u64,
    mut found: impl FnMut(&[u8]) -> bool,
) -> Plan {
    let info = seal.info();
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
        if found(h) {
            plan.reused_blocks += 1;
            continue;
        }
        match plan.fetch.last_mut() {
            Some(r) if r.end == b => r.end = b + 1,
            _ => plan.fetch.push(b..b + 1),
        }
    }
    plan
}

/// How an update fetches.
#[derive(Clone, Copy, Debug)]
pub struct FetchOptions {
    /// Runs of blocks to fetch at most this many bytes apart are fetched in one request.
    pub gap: u64,
    /// The longest request, in bytes.
    pub max_request: u64,
    /// Requests in flight at once.
    pub in_flight: usize,
}

/// What an update did.
#[derive(Clone, Debug)]
pub struct UpdateReport {
    /// The plan it followed (from the bases' hashes).
    pub plan: Plan,
    /// Blocks copied from a base (or the cache), each checked against the new tree.
    pub reused_blocks: u64,
    /// Of them, taken from the persistent cache's entries ([`Bases::add_cached`]).
    pub cache_reused_blocks: u64,
    /// Blocks a base was to give whose bytes no longer hash to the new tree's leaf (a base
    /// changed or damaged since it was hashed): fetched instead.
    pub base_mismatches: u64,
    /// Blocks fetched (those between runs joined into one request included).
    pub fetched_blocks: u64,
    /// Bytes fetched: the blocks, and the seal (the tree included): what `sealfs diff`
    /// predicts as its `fetch_bytes` when no base block mismatched.
    pub fetched_bytes: u64,
    /// Requests made for them.
    pub requests: u64,
}

/// Writes the image whose seal is `seal` into `out` (`out_path` in messages: a file, sized to the
/// image, or a block device at least its size, written in place) from `bases` and
/// `source` (the image's own bytes: a file, a URL, a registry blob): its tree fetched and checked
/// from the image digest down; each block whose leaf a base holds copied from it, and checked
/// against the leaf; the others fetched, joined into requests, `options.in_flight` at a time, each
/// block checked against its leaf before it is written; the tree written from what was checked,
/// and the rest of the seal fetched. `progress` is called with bytes written. Nothing unverified is
/// written but the seal's header and signatures, which the caller checks with the whole file (as
/// `sealfs verify` does) before it uses it.
#[allow(clippy::too_many_arguments)]
pub fn update(
    name: &str,
    seal: &Seal,
    source: &dyn ReadAt,
    image_length: u64,
    bases: &Bases,
    out: &File,
    out_path: &Path,
    options: FetchOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<UpdateReport, DeltaError> {
    let info = seal.info();
    let (tree, leaves) = authentic_tree(name, seal)?;
    let d = info.params.digest_size();
    let bs = info.params.block_size() as u64;
    let hasher = BlockHasher::new(&info.params);
    let write_err = |source| DeltaError::Write {
        path: out_path.to_path_buf(),
        source,
    };
    // A file is sized to the image; a block device (an A/B slot) must hold it.
    let meta = out.metadata().map_err(write_err)?;
    if meta.is_file() {
        out.set_len(image_length).map_err(write_err)?;
    } else if ReadAt::len(out) < image_length {
        return Err(write_err(std::io::Error::other(format!(
            "{} bytes: the image needs {image_length}",
            ReadAt::len(out)
        ))));
    }
    let leaf = |b: u64| &leaves[b as usize * d..(b as usize + 1) * d];

    // Blocks from the bases (and the cache), each checked against its leaf.
    let mut files: HashMap<u32, Option<File>> = HashMap::new();
    let mut mismatched: Vec<u64> = Vec::new();
    let mut block = vec![0u8; bs as usize];
    let (mut reused, mut from_cache) = (0u64, 0u64);
    let plan = plan_from_leaves(seal, &leaves, image_length, |h| bases.find(h).is_some());
    for (b, h) in leaves.chunks_exact(d).enumerate() {
        let b = b as u64;
        let Some(&(k, at)) = bases.index.get(h) else {
            continue;
        };
        let cached = bases.is_cached((k, at));
        let file = match files.entry(k) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let path = &bases.files[k as usize];
                match File::open(path) {
                    Ok(f) => e.insert(Some(f)),
                    // A cache chunk pruned since it was listed: its blocks are fetched.
                    Err(_) if cached => e.insert(None),
                    Err(source) => {
                        return Err(DeltaError::Base {
                            path: path.clone(),
                            source,
                        })
                    }
                }
            }
        };
        let ok = file.as_ref().is_some_and(|f| {
            FileExt::read_exact_at(f, &mut block, at).is_ok()
                && hasher.hash_block(&block).as_bytes() == h
        });
        if !ok {
            mismatched.push(b);
            continue;
        }
        out.write_all_at(&block, b * bs).map_err(write_err)?;
        progress(bs);
        reused += 1;
        from_cache += u64::from(cached);
    }

    // The others: the plan's runs and the blocks a base failed to give, as requests.
    let mut wanted: Vec<u64> = plan.fetch.iter().flat_map(|r| r.clone()).collect();
    wanted.extend(&mismatched);
    wanted.sort_unstable();
    let mut runs: Vec<Range<u64>> = Vec::new();
    for b in wanted {
        match runs.last_mut() {
            Some(r) if r.end == b => r.end = b + 1,
            _ => runs.push(b..b + 1),
        }
    }
    let fetching = Plan {
        fetch: runs,
        ..plan.clone()
    };
    let requests = fetching.requests(options.gap, options.max_request);
    let next = Mutex::new(requests.iter());
    let fetched = AtomicU64::new(0);
    let failed: Mutex<Option<DeltaError>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..options.in_flight.max(1) {
            scope.spawn(|| {
                let mut buf = Vec::new();
                loop {
                    if failed.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                        return;
                    }
                    let Some(r) = next
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .next()
                        .cloned()
                    else {
                        return;
                    };
                    let result = (|| {
                        buf.resize((r.end - r.start) as usize, 0);
                        source.read_exact_at(&mut buf, r.start).map_err(|source| {
                            DeltaError::Fetch {
                                name: name.to_string(),
                                start: r.start,
                                end: r.end,
                                source,
                            }
                        })?;
                        for (k, chunk) in buf.chunks_exact(bs as usize).enumerate() {
                            let b = r.start / bs + k as u64;
                            if hasher.hash_block(chunk).as_bytes() != leaf(b) {
                                return Err(DeltaError::Fetched {
                                    name: name.to_string(),
                                    block: b,
                                });
                            }
                        }
                        out.write_all_at(&buf, r.start).map_err(write_err)?;
                        fetched.fetch_add((r.end - r.start) / bs, Relaxed);
                        progress(r.end - r.start);
                        Ok(())
                    })();
                    if let Err(e) = result {
                        failed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }

    // The seal: the tree as checked, the rest (its header, signatures) as fetched.
    let tree_at = info.tree_offset;
    let tree_end = tree_at + tree.len() as u64;
    let mut seal_fetched = 0u64;
    let gaps = [
        info.data_length..tree_at.min(image_length),
        tree_end.max(info.data_length)..image_length,
    ];
    for g in gaps.into_iter().filter(|g| g.start < g.end) {
        let mut rest = vec![0u8; (g.end - g.start) as usize];
        source
            .read_exact_at(&mut rest, g.start)
            .map_err(|source| DeltaError::Fetch {
                name: name.to_string(),
                start: g.start,
                end: g.end,
                source,
            })?;
        out.write_all_at(&rest, g.start).map_err(write_err)?;
        seal_fetched += rest.len() as u64;
    }
    if tree_end <= image_length && tree_at >= info.data_length {
        out.write_all_at(&tree, tree_at).map_err(write_err)?;
    }
    progress(image_length - info.data_length);
    let fetched = fetched.into_inner();
    Ok(UpdateReport {
        plan,
        reused_blocks: reused,
        cache_reused_blocks: from_cache,
        base_mismatches: mismatched.len() as u64,
        fetched_blocks: fetched,
        fetched_bytes: fetched * bs + seal_fetched + tree.len() as u64,
        requests: requests.len() as u64 + u64::from(seal_fetched > 0),
    })
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
