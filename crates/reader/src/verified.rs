//! A [`BlockSource`] that checks every block against an fs-verity Merkle tree before returning it.
//!
//! For a read of data blocks `[a, b)` it works out, level by level, which hash blocks the check needs
//! and which of them are not already verified and cached: level 0 holds the hashes of `[a, b)`; a
//! hash block that is cached was verified when it was cached, so the climb towards the root stops at
//! the first cached block of each path. The missing hash blocks are fetched in the same batch as the
//! data ([`ReadAt::read_batch`]), never data first and hashes afterwards. Then the fetched hash
//! blocks are verified top-down (each against its parent's entry, the top one against the root),
//! cached, and every data block is checked against its level-0 entry. A mismatch fails this read
//! only, naming the block (and the tree level for hash blocks); nothing unverified is cached.
//!
//! Concurrent reads share hash blocks: a hash block that another read has planned to fetch and not
//! yet verified is waited for (after this read's own batch is issued) instead of read a second time,
//! so neighbouring reads served by different threads (a FUSE mount's readahead) fetch each hash block
//! once. A read only ever waits for reads that planned before it, so waits cannot form a cycle.
//!
//! With a persistent store ([`crate::store`]), blocks are also fetched ahead of the reads
//! (`readahead`: sequential streams, prefetch lists, filling the whole image, at a pace the
//! link's measured round trip and rate set, `link`), and the whole image is fetched once reads
//! scatter over it (`autofill`, [`FillMode`]).

use crate::cache::{Lru, Outcome};
use crate::error::{Error, Location, Result};
use crate::source::{BlockSource, ReadAt};
use crate::store::{BlockStore, Region};
use sealfs_verity::{BlockHasher, Digest, Params, TreeGeometry};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};

mod autofill;
mod link;
mod readahead;

pub use autofill::{FillMode, FIT_DENOMINATOR, FIT_NUMERATOR, SCATTERED_READS, SCATTER_WINDOW};
use readahead::Readahead;
pub(crate) use readahead::{no_readahead_on_this_thread, MetadataReads};
pub use readahead::{FillState, FILL_QUIET, FILL_UNREAD, READAHEAD_FETCHERS, YOUNG_WINDOW_BYTES};

/// A verified hash block from the cache: (tree block index, bytes).
type CachedBlock = (u64, Arc<[u8]>);

/// A hash block one read is fetching: its bytes once verified, `None` if fetching or verifying it
/// failed.
type Pending = Outcome<Arc<[u8]>>;

/// Verified hash blocks, and those being fetched.
struct HashCache {
    lru: Lru,
    inflight: HashMap<u64, Arc<Pending>>,
}

/// The hash blocks one read has claimed to fetch. Each is published (cached, and handed to the reads
/// waiting for it) as soon as it is verified; whatever is left when the read ends (an error) is
/// withdrawn, and its waiters are told it failed.
struct Claims<'a> {
    cache: &'a Mutex<HashCache>,
    open: HashMap<u64, Arc<Pending>>,
}

impl Claims<'_> {
    fn publish(&mut self, block: u64, bytes: Arc<[u8]>) {
        let Some(p) = self.open.remove(&block) else {
            return;
        };
        {
            let mut c = lock(self.cache);
            c.inflight.remove(&block);
            c.lru.insert(block, bytes.clone());
        }
        p.resolve(Some(bytes));
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let mut c = lock(self.cache);
        for (block, p) in self.open.drain() {
            c.inflight.remove(&block);
            p.resolve(None);
        }
    }
}

fn lock(cache: &Mutex<HashCache>) -> MutexGuard<'_, HashCache> {
    cache.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_any<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a read needs from the tree, as planned.
struct Plan<'a> {
    /// Hash blocks to fetch in this read's batch: (level, tree block index), lowest level first.
    missing: Vec<(usize, u64)>,
    /// Verified hash blocks found in the cache.
    cached: Vec<CachedBlock>,
    /// Hash blocks other reads are fetching: (level, tree block index, their outcome).
    awaited: Vec<(usize, u64, Arc<Pending>)>,
    claims: Claims<'a>,
}

/// Where the Merkle tree of an image is and what it must hash to.
#[derive(Clone, Debug)]
pub struct SealInfo {
    /// Hash algorithm, block size and salt.
    pub params: Params,
    /// Bytes the tree covers (the EROFS bytes, from offset 0 of the data source).
    pub data_length: u64,
    /// Offset of the tree (stored order, root level first) in the tree source.
    pub tree_offset: u64,
    /// The Merkle root.
    pub root: Digest,
}

/// Counters of a [`VerifiedBlocks`].
#[derive(Debug, Default)]
pub struct VerifyStats {
    /// Data blocks checked against the tree.
    pub blocks_verified: AtomicU64,
    /// Hash blocks fetched (and verified).
    pub hash_blocks_read: AtomicU64,
    /// Hash blocks found verified in the cache.
    pub hash_cache_hits: AtomicU64,
    /// Hash blocks a concurrent read was fetching, waited for instead of read again.
    pub hash_blocks_shared: AtomicU64,
    /// Read batches issued.
    pub batches: AtomicU64,
    /// Bytes of data read.
    pub data_bytes: AtomicU64,
    /// Bytes of hash blocks read (the cost of integrity).
    pub hash_bytes: AtomicU64,
    /// Blocks that failed verification.
    pub failures: AtomicU64,
    /// Blocks (data and hash) taken from the persistent store instead of fetched.
    pub store_hits: AtomicU64,
    /// Blocks the store returned that failed verification (forgotten, then fetched).
    pub store_discards: AtomicU64,
    /// Data blocks taken from the store's entries of other images with the same leaf hash (each
    /// checked against this image's tree) instead of fetched.
    pub leaf_hits: AtomicU64,
    /// Blocks another image's entry gave for a leaf that did not hash to it (damaged on disk):
    /// forgotten there, and fetched.
    pub leaf_discards: AtomicU64,
    /// Blocks fetched beyond what reads asked for (the miss window and sequential readahead), into
    /// the store.
    pub readahead_blocks: AtomicU64,
    /// Blocks a read took from a stream's readahead in memory, verified when they landed (not
    /// read back from the store).
    pub handed_over_blocks: AtomicU64,
    /// Nanoseconds spent hashing data blocks to check them (summed over threads).
    pub hash_ns: AtomicU64,
    /// Nanoseconds spent reading data and hash blocks from the image (its `pread`s or requests,
    /// summed over threads).
    pub fetch_ns: AtomicU64,
}

/// What was read, in the order first read, for an access profile.
#[derive(Default)]
struct Recording {
    /// Blocks already recorded (a bit per block).
    seen: Vec<u64>,
    /// Runs of blocks, in the order first read.
    runs: Vec<(u64, u64)>,
}

impl Recording {
    fn add(&mut self, first: u64, n: u64) {
        for b in first..first + n {
            let (w, bit) = ((b / 64) as usize, b % 64);
            if w >= self.seen.len() {
                self.seen.resize(w + 1, 0);
            }
            if self.seen[w] & (1 << bit) != 0 {
                continue;
            }
            self.seen[w] |= 1 << bit;
            match self.runs.last_mut() {
                Some((f, c)) if *f + *c == b => *c += 1,
                _ => self.runs.push((b, 1)),
            }
        }
    }
}

/// The blocks one read took from the store, to forget if the read fails its checks.
#[derive(Default)]
struct StoreUse {
    /// Runs of data blocks: (first, count).
    data: Vec<(u64, u64)>,
    /// Tree blocks.
    tree: Vec<u64>,
    /// The read failed because a hash block another read was fetching failed there (bytes that
    /// read fetched, perhaps long before: they say nothing about what a fetch now would give).
    shared_failed: bool,
    /// Bytes of data the read fetched (the store lacked them).
    fetched: u64,
}

/// Runs of consecutive `true` (or `false`) entries of `mask`: (start, end) index pairs.
fn runs(mask: &[bool], want: bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < mask.len() {
        if mask[i] == want {
            let start = i;
            while i < mask.len() && mask[i] == want {
                i += 1;
            }
            out.push((start, i));
        } else {
            i += 1;
        }
    }
    out
}

/// A verifying block source over a data source and a tree source (the same file for an attached seal).
pub struct VerifiedBlocks {
    data: Arc<dyn ReadAt>,
    tree: Arc<dyn ReadAt>,
    same_source: bool,
    seal: SealInfo,
    geometry: TreeGeometry,
    hasher: BlockHasher,
    /// Verified hash blocks by tree block index, and the ones being fetched.
    cache: Mutex<HashCache>,
    /// Verified blocks kept across processes, consulted before fetching.
    store: Option<Arc<dyn BlockStore>>,
    /// Readahead into the store, once started.
    readahead: OnceLock<Readahead>,
    /// The access profile being recorded, if one is.
    recording: Mutex<Option<Recording>>,
    /// Fetch hash blocks in a second batch after the data (for measuring what batching saves).
    dependent_hash_fetch: bool,
    stats: VerifyStats,
    /// The round trip and rate of a remote source, as its batches measured them.
    link: Arc<link::Link>,
    /// How the rest of the image is fetched into the store.
    fill_mode: Mutex<FillMode>,
    /// Whether reads served whole from the store follow streams (and so fetch ahead of them):
    /// [`VerifiedBlocks::set_stored_reads_stream`].
    stored_reads_stream: std::sync::atomic::AtomicBool,
    /// Reads that fetched their hash blocks in a batch of their own, before their data, to look
    /// for their data among other images' blocks ([`BlockStore::shares_leaves`]).
    leaf_probes: AtomicU64,
}

/// Reads that fetch their hash blocks first ([`BlockStore::shares_leaves`]) without any block found
/// among other images' before a reader stops looking: an image that shares nothing with what the
/// cache holds pays one round trip more per such read until then (a read needs a hash block of its
/// own at most once per 128 data blocks: 256 reads cover at least 128 MiB of 4 KiB blocks), never
/// after; an image that found one block keeps looking.
pub const LEAF_PROBES: u64 = 256;

/// Default number of hash blocks kept verified: 1024 (4 MiB of hashes, which cover 512 MiB of data
/// at level 0 with SHA-256 and 4 KiB blocks).
pub const DEFAULT_HASH_CACHE_BLOCKS: usize = 1024;

impl VerifiedBlocks {
    /// A verifying source. `data` holds the EROFS bytes from offset 0; `tree` holds the tree at
    /// `seal.tree_offset` (pass the same `Arc` for an attached seal: hashes and data then share one
    /// batch). `hash_cache_blocks` bounds the verified hash blocks kept (at least the tree height).
    pub fn new(
        data: Arc<dyn ReadAt>,
        tree: Arc<dyn ReadAt>,
        seal: SealInfo,
        hash_cache_blocks: usize,
    ) -> Result<Self> {
        let geometry = TreeGeometry::new(&seal.params, seal.data_length);
        if seal.root.alg() != seal.params.alg() {
            return Err(Error::InvalidArgument(
                "root and parameters use different hash algorithms".into(),
            ));
        }
        let end = seal.tree_offset.checked_add(geometry.tree_size());
        if end.is_none_or(|e| e > tree.len()) {
            return Err(Error::corrupted(
                format!(
                    "Merkle tree of {} bytes at {} lies outside its file of {}",
                    geometry.tree_size(),
                    seal.tree_offset,
                    tree.len()
                ),
                Location::image(),
            ));
        }
        if seal.data_length > data.len() {
            return Err(Error::corrupted(
                format!(
                    "the seal covers {} bytes but the image has {}",
                    seal.data_length,
                    data.len()
                ),
                Location::image(),
            ));
        }
        let same_source = std::ptr::addr_eq(Arc::as_ptr(&data), Arc::as_ptr(&tree));
        Ok(VerifiedBlocks {
            hasher: BlockHasher::new(&seal.params),
            cache: Mutex::new(HashCache {
                lru: Lru::new(hash_cache_blocks.max(geometry.num_levels() + 1)),
                inflight: HashMap::new(),
            }),
            data,
            tree,
            same_source,
            geometry,
            seal,
            store: None,
            readahead: OnceLock::new(),
            recording: Mutex::new(None),
            dependent_hash_fetch: false,
            stats: VerifyStats::default(),
            link: Arc::default(),
            fill_mode: Mutex::new(FillMode::default()),
            stored_reads_stream: std::sync::atomic::AtomicBool::new(true),
            leaf_probes: AtomicU64::new(0),
        })
    }

    /// Starts recording which data blocks are read, in the order first read (an access profile).
    pub fn record_profile(&self) {
        *lock_any(&self.recording) = Some(Recording::default());
    }

    /// The byte ranges read since [`Self::record_profile`], in the order first read, adjacent ones
    /// merged; empty when not recording.
    pub fn profile(&self) -> Vec<std::ops::Range<u64>> {
        let bs = self.bs() as u64;
        let rec = lock_any(&self.recording);
        let Some(rec) = rec.as_ref() else {
            return Vec::new();
        };
        rec.runs
            .iter()
            .map(|&(f, n)| f * bs..((f + n) * bs).min(self.seal.data_length))
            .collect()
    }

    /// Whole data blocks (a partial last block is never fetched ahead or stored).
    fn whole_blocks(&self) -> u64 {
        self.seal.data_length / self.bs() as u64
    }

    /// Fetches a read's missing hash blocks in a second request after its data, as readers that do
    /// not batch them do: only for measuring what fetching them together saves.
    pub fn with_dependent_hash_fetch(mut self, on: bool) -> Self {
        self.dependent_hash_fetch = on;
        self
    }

    /// Consults `store` before fetching, and gives it every block fetched and verified.
    pub fn with_store(mut self, store: Arc<dyn BlockStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The round trip and rate (bytes per second) of the link to a remote source, as its reads
    /// measured them (`None` until they have).
    pub fn link_estimate(&self) -> Option<(std::time::Duration, f64)> {
        self.link.estimate()
    }

    /// The counters.
    pub fn stats(&self) -> &VerifyStats {
        &self.stats
    }

    /// The tree's shape.
    pub fn geometry(&self) -> &TreeGeometry {
        &self.geometry
    }

    fn bs(&self) -> usize {
        self.seal.params.block_size()
    }

    fn fail(&self, what: String, block: Option<u64>) -> Error {
        self.stats.failures.fetch_add(1, Relaxed);
        let mut at = Location::image();
        if let Some(b) = block {
            at.offset = Some(b * self.bs() as u64);
        }
        Error::Verification { what, at }
    }

    /// Hash blocks the check of data blocks `first..end` needs: per level, the blocks neither cached
    /// nor being fetched by another read are claimed for this read's batch, climbing only above
    /// those (a block another read fetches is verified by that read, up to the root).
    fn plan(&self, first: u64, end: u64) -> Plan<'_> {
        let g = &self.geometry;
        let mut missing = Vec::new();
        let mut cached = Vec::new();
        let mut awaited = Vec::new();
        let mut claims = Claims {
            cache: &self.cache,
            open: HashMap::new(),
        };
        let mut guard = lock(&self.cache);
        let cache = &mut *guard;
        // Items (data blocks at level 0, hash blocks of the level below otherwise) whose hashes we need.
        let mut items: Vec<u64> = (first..end).collect();
        for level in 0..g.num_levels() {
            let mut next = Vec::new();
            let mut last = None;
            for &item in &items {
                let loc = g.hash_location(level, item).expect("item inside the tree");
                if last == Some(loc.block) {
                    continue;
                }
                last = Some(loc.block);
                if claims.open.contains_key(&loc.block) {
                    continue;
                }
                if let Some(b) = cache.lru.get(loc.block) {
                    self.stats.hash_cache_hits.fetch_add(1, Relaxed);
                    cached.push((loc.block, b));
                } else if let Some(p) = cache.inflight.get(&loc.block) {
                    self.stats.hash_blocks_shared.fetch_add(1, Relaxed);
                    awaited.push((level, loc.block, p.clone()));
                } else {
                    let p = Arc::new(Pending::default());
                    cache.inflight.insert(loc.block, p.clone());
                    claims.open.insert(loc.block, p);
                    missing.push((level, loc.block));
                    next.push(loc.block - g.level_start(level));
                }
            }
            if next.is_empty() {
                break;
            }
            items = next;
        }
        drop(guard);
        Plan {
            missing,
            cached,
            awaited,
            claims,
        }
    }
}

impl BlockSource for VerifiedBlocks {
    fn block_bits(&self) -> u8 {
        self.seal.params.log_block_size()
    }

    fn prefetches(&self) -> bool {
        self.readahead.get().is_some()
    }

    /// Queues the ranges (as whole blocks, in order, adjacent ones merged) for the background
    /// fetchers, when readahead into a store is on.
    fn prefetch(&self, ranges: &[std::ops::Range<u64>]) {
        self.queue_prefetch(ranges);
    }

    /// Fetches the ranges into the store now: in pieces on the background fetchers (concurrently,
    /// each piece's requests in parallel), registered so that reads of them wait rather than
    /// fetch them again; returns when every piece has ended.
    fn fill(&self, ranges: &[std::ops::Range<u64>]) {
        self.fill_ranges(ranges);
    }

    fn len(&self) -> u64 {
        self.seal.data_length
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> Result<()> {
        if let Some(rec) = lock_any(&self.recording).as_mut() {
            let n = (buf.len() / self.bs()) as u64;
            rec.add(first, n.min(self.whole_blocks().saturating_sub(first)));
        }
        let Some(store) = &self.store else {
            return self.read_own(first, buf, None, &mut StoreUse::default());
        };
        let n = (buf.len() / self.bs()) as u64;
        let _fetching = self.register_read(first, n);
        if self.take_handed_over(first, buf) {
            self.follow_stream(first, n);
            return Ok(());
        }
        if self.read_with_miss_window(first, buf, &**store) {
            self.note_demand();
            if self.follow_stream(first, n) {
                self.note_scattered();
            }
            return Ok(());
        }
        let mut used = StoreUse::default();
        let result = self.read_own(first, buf, Some(&**store), &mut used);
        if used.fetched > 0 {
            self.note_demand();
        }
        if result.is_ok() && (used.fetched > 0 || self.stored_reads_stream.load(Relaxed)) {
            // A read that had to fetch data and began no stream: it scattered.
            if self.follow_stream(first, n) && used.fetched > 0 {
                self.note_scattered();
            }
        }
        match result {
            // A block from the store failed its check (a torn write, a damaged cache file): forget
            // what this read took from the store and fetch it all again.
            Err(Error::Verification { .. }) if !used.data.is_empty() || !used.tree.is_empty() => {
                let mut n = 0;
                for &(b, count) in &used.data {
                    store.discard(Region::Data, b, count);
                    n += count;
                }
                for &b in &used.tree {
                    store.discard(Region::Tree, b, 1);
                }
                n += used.tree.len() as u64;
                self.stats.store_discards.fetch_add(n, Relaxed);
                self.stats.failures.fetch_sub(1, Relaxed);
                self.read_own(first, buf, None, &mut StoreUse::default())
            }
            other => other,
        }
    }
}

impl VerifiedBlocks {
    /// [`Self::read_checked`], once more if it failed only because a hash block it waited for
    /// failed in the read fetching it: this read then fetches that block itself, so it fails only
    /// on bytes it was given (a fault on the link a moment ago fails the reads that met it).
    fn read_own(
        &self,
        first: u64,
        buf: &mut [u8],
        store: Option<&dyn BlockStore>,
        used: &mut StoreUse,
    ) -> Result<()> {
        let result = self.read_checked(first, buf, store, used);
        if result.is_err() && used.shared_failed {
            self.stats.failures.fetch_sub(1, Relaxed);
            *used = StoreUse::default();
            return self.read_checked(first, buf, store, used);
        }
        result
    }

    /// One read: plan, take what the store has, fetch the rest in one batch, verify, keep.
    fn read_checked(
        &self,
        first: u64,
        buf: &mut [u8],
        store: Option<&dyn BlockStore>,
        used: &mut StoreUse,
    ) -> Result<()> {
        let bs = self.bs();
        let n = (buf.len() / bs) as u64;
        let g = &self.geometry;
        let d = self.seal.params.digest_size();
        let start = first * bs as u64;
        let avail = (self.seal.data_length.saturating_sub(start) as usize).min(buf.len());
        let Plan {
            missing,
            cached,
            awaited,
            mut claims,
        } = self.plan(first, first + n);

        // What the store holds: whole data blocks, and missing hash blocks.
        let whole_avail = avail / bs;
        let mut data_stored = vec![false; whole_avail];
        let mut hash_bufs: Vec<Vec<u8>> = missing.iter().map(|_| vec![0u8; bs]).collect();
        let mut hash_stored = vec![false; missing.len()];
        if let Some(store) = store {
            if whole_avail > 0 {
                data_stored = store.get(Region::Data, first, &mut buf[..whole_avail * bs]);
                data_stored.resize(whole_avail, false);
                for (a, b) in runs(&data_stored, true) {
                    used.data.push((first + a as u64, (b - a) as u64));
                }
            }
            for (i, (_, block)) in missing.iter().enumerate() {
                if store.get(Region::Tree, *block, &mut hash_bufs[i]).first() == Some(&true) {
                    hash_stored[i] = true;
                    used.tree.push(*block);
                }
            }
            let hits = data_stored
                .iter()
                .chain(&hash_stored)
                .filter(|&&h| h)
                .count();
            self.stats.store_hits.fetch_add(hits as u64, Relaxed);
        }

        // With other images' blocks to draw on by leaf hash, the hash blocks come first (a batch
        // of their own, when the store lacks some): the leaves say which data blocks those images
        // hold; only the others are fetched, after. Otherwise one batch: the data and every
        // missing hash block the store did not have.
        let probing =
            self.leaf_probes.load(Relaxed) < LEAF_PROBES || self.stats.leaf_hits.load(Relaxed) > 0;
        let by_leaf = store.filter(|s| {
            probing && g.num_levels() > 0 && data_stored.contains(&false) && s.shares_leaves()
        });
        if by_leaf.is_some() && hash_stored.contains(&false) {
            self.leaf_probes.fetch_add(1, Relaxed);
        }
        let fetched = self.fetch(
            start,
            &mut buf[..],
            avail,
            by_leaf.is_none().then_some(&data_stored[..]),
            &missing,
            &mut hash_bufs,
            &hash_stored,
            false,
        )?;
        used.fetched += fetched;

        // Verify fetched hash blocks top-down; parents come from this batch, the cache, or the read
        // fetching them (waited for only now, after this read's own I/O).
        let mut known: HashMap<u64, Arc<[u8]>> = cached.into_iter().collect();
        let mut awaited: HashMap<u64, (usize, Arc<Pending>)> =
            awaited.into_iter().map(|(l, b, p)| (b, (l, p))).collect();
        let shared_failed = &mut used.shared_failed;
        let mut need = |known: &mut HashMap<u64, Arc<[u8]>>, block: u64| -> Result<()> {
            if known.contains_key(&block) {
                return Ok(());
            }
            let Some((level, p)) = awaited.remove(&block) else {
                return Ok(());
            };
            match p.wait() {
                Some(bytes) => {
                    known.insert(block, bytes);
                    Ok(())
                }
                None => {
                    *shared_failed = true;
                    Err(self.fail(
                        format!(
                            "Merkle tree level {level} block {} could not be read and verified",
                            block - g.level_start(level)
                        ),
                        None,
                    ))
                }
            }
        };
        let mut order: Vec<usize> = (0..missing.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(missing[i].0));
        for i in order {
            let (level, block) = missing[i];
            let bytes: Arc<[u8]> = std::mem::take(&mut hash_bufs[i]).into();
            let digest = self.hasher.hash_block(&bytes);
            let ok = if level + 1 == g.num_levels() {
                digest.as_bytes() == self.seal.root.as_bytes()
            } else {
                let index = block - g.level_start(level);
                let loc = g
                    .hash_location(level + 1, index)
                    .expect("parent inside the tree");
                need(&mut known, loc.block)?;
                match known.get(&loc.block) {
                    Some(parent) => g.stored_digest(parent, loc) == Some(digest.as_bytes()),
                    None => false,
                }
            };
            if !ok {
                return Err(self.fail(
                    format!(
                        "Merkle tree level {level} block {} does not match its parent",
                        block - g.level_start(level)
                    ),
                    None,
                ));
            }
            if let (Some(store), false) = (store, hash_stored[i]) {
                store.put(Region::Tree, block, &bytes);
            }
            known.insert(block, bytes.clone());
            claims.publish(block, bytes);
        }

        // Data blocks other images' entries hold (by this image's verified leaves), each checked
        // against its leaf before it is used (one that fails is forgotten there and fetched);
        // then the rest fetched.
        if let Some(store) = by_leaf {
            let mut have = data_stored.clone();
            let (mut hits, mut discards) = (0u64, 0u64);
            // Stored by a concurrent read meanwhile: read back, checked below like any.
            let stored_now = store.has(Region::Data, first, whole_avail as u64);
            for (k, got) in have.iter_mut().enumerate() {
                if *got {
                    continue;
                }
                let slot = &mut buf[k * bs..(k + 1) * bs];
                if stored_now.get(k) == Some(&true)
                    && store.get(Region::Data, first + k as u64, slot).first() == Some(&true)
                {
                    *got = true;
                    used.data.push((first + k as u64, 1));
                    continue;
                }
                let blk = first + k as u64;
                let loc = g.hash_location(0, blk).expect("data block inside the tree");
                need(&mut known, loc.block)?;
                let Some(leaf) = known
                    .get(&loc.block)
                    .and_then(|hb| g.stored_digest(hb, loc))
                else {
                    continue;
                };
                if !store.get_by_leaf(leaf, slot) {
                    continue;
                }
                if self.hasher.hash_block(slot).as_bytes() == leaf {
                    *got = true;
                    hits += 1;
                } else {
                    store.discard_leaf(leaf);
                    discards += 1;
                }
            }
            self.stats.leaf_hits.fetch_add(hits, Relaxed);
            self.stats.leaf_discards.fetch_add(discards, Relaxed);
            // Around the blocks taken by leaf: never joined across them into one request (the
            // remote client joins ranges less than its gap apart, 64 KiB, and would send them
            // over the link for nothing).
            let fetched = self.fetch(
                start,
                &mut buf[..],
                avail,
                Some(&have),
                &[],
                &mut [],
                &[],
                hits > 0,
            )?;
            used.fetched += fetched;
        }

        // Verify the data blocks: whole blocks two at a time (the hasher's interleaved path), a last
        // partial block (the end of the data) zero-padded.
        let whole = (n as usize).min(avail / bs);
        let mut digests = vec![0u8; n as usize * d];
        let hashing = std::time::Instant::now();
        self.hasher
            .hash_blocks_into(&buf[..whole * bs], &mut digests[..whole * d]);
        for k in whole..n as usize {
            let blk = first + k as u64;
            let len = ((self.seal.data_length - blk * bs as u64) as usize).min(bs);
            self.hasher
                .hash_block_into(&buf[k * bs..k * bs + len], &mut digests[k * d..(k + 1) * d]);
        }
        self.stats
            .hash_ns
            .fetch_add(hashing.elapsed().as_nanos() as u64, Relaxed);
        for (k, digest) in digests.chunks_exact(d).enumerate() {
            let blk = first + k as u64;
            let want: &[u8] = if g.num_levels() == 0 {
                self.seal.root.as_bytes()
            } else {
                let loc = g.hash_location(0, blk).expect("data block inside the tree");
                need(&mut known, loc.block)?;
                let Some(want) = known
                    .get(&loc.block)
                    .and_then(|hb| g.stored_digest(hb, loc))
                else {
                    return Err(
                        self.fail(format!("no verified hash for data block {blk}"), Some(blk))
                    );
                };
                want
            };
            if digest != want {
                return Err(self.fail(
                    format!("data block {blk} does not match its hash"),
                    Some(blk),
                ));
            }
        }
        self.stats.blocks_verified.fetch_add(n, Relaxed);
        if let Some(store) = store {
            for (a, b) in runs(&data_stored, false) {
                store.put(Region::Data, first + a as u64, &buf[a * bs..b * bs]);
            }
        }
        Ok(())
    }
}

impl VerifiedBlocks {
    /// Fetches in one batch the hash blocks of `missing` that `hash_stored` says the store did not
    /// give (into `hash_bufs`) and, when `have` is given, the data blocks of `buf` (read `start`
    /// bytes into the image, `avail` of them inside it) that it marks absent, with the partial
    /// last block; zeroes what lies past the image; counts what it fetched. With `apart`, no byte
    /// between the ranges is fetched ([`ReadAt::read_batch_apart`]: the blocks `have` marks came
    /// from elsewhere). Returns the bytes of data fetched.
    #[allow(clippy::too_many_arguments)]
    fn fetch(
        &self,
        start: u64,
        buf: &mut [u8],
        avail: usize,
        have: Option<&[bool]>,
        missing: &[(usize, u64)],
        hash_bufs: &mut [Vec<u8>],
        hash_stored: &[bool],
        apart: bool,
    ) -> Result<u64> {
        let bs = self.bs();
        let whole_avail = avail / bs;
        let (data_part, zero_tail) = buf.split_at_mut(avail);
        zero_tail.fill(0);
        let mut hashes: Vec<(u64, &mut [u8])> = missing
            .iter()
            .zip(hash_bufs.iter_mut())
            .zip(hash_stored)
            .filter(|(_, &stored)| !stored)
            .map(|(((_, b), v), _)| (self.seal.tree_offset + b * bs as u64, v.as_mut_slice()))
            .collect();
        // The data not in the store, as runs of blocks (the partial last block always fetched).
        let mut data_reqs: Vec<(u64, &mut [u8])> = Vec::new();
        if let Some(have) = have {
            let mut fetch: Vec<(usize, usize)> = runs(have, false);
            if avail > whole_avail * bs {
                match fetch.last_mut() {
                    Some(last) if last.1 == whole_avail => last.1 = whole_avail + 1,
                    _ => fetch.push((whole_avail, whole_avail + 1)),
                }
            }
            let mut rest = data_part;
            let mut at = 0usize;
            for (a, b) in fetch {
                let (_, tail) = rest.split_at_mut(a * bs - at);
                let len = (b * bs).min(avail) - a * bs;
                let (piece, tail) = tail.split_at_mut(len);
                data_reqs.push((start + (a * bs) as u64, piece));
                rest = tail;
                at = a * bs + len;
            }
        }
        let io = |e: std::io::Error| Error::Io {
            at: Location {
                offset: Some(start),
                ..Location::image()
            },
            source: e,
        };
        let fetched_hashes = hashes.len();
        let fetched_data: usize = data_reqs.iter().map(|(_, b)| b.len()).sum();
        if !hashes.is_empty() || !data_reqs.is_empty() {
            self.stats.batches.fetch_add(1, Relaxed);
        }
        // Timed, for the link's round trip and rate.
        let timing = ((self.data.is_remote() || self.tree.is_remote())
            && fetched_data + fetched_hashes > 0)
            .then(|| self.link.begin((fetched_data + fetched_hashes * bs) as u64));
        let fetching = std::time::Instant::now();
        let batch = |src: &Arc<dyn ReadAt>, reqs: &mut [(u64, &mut [u8])]| {
            if apart {
                src.read_batch_apart(reqs)
            } else {
                src.read_batch(reqs)
            }
        };
        if self.same_source && !self.dependent_hash_fetch {
            hashes.append(&mut data_reqs);
            if !hashes.is_empty() {
                batch(&self.data, &mut hashes).map_err(io)?;
            }
        } else if !self.dependent_hash_fetch
            && (self.data.is_remote() || self.tree.is_remote())
            && !hashes.is_empty()
            && !data_reqs.is_empty()
        {
            // A detached seal over the network: the hashes come from their own source in a
            // batch of its own, at the same time as the data (one round trip, not two).
            let (data, tree) = (&self.data, &self.tree);
            let (d, h) = std::thread::scope(|s| {
                let h = s.spawn(|| batch(tree, &mut hashes));
                let d = batch(data, &mut data_reqs);
                (d, h.join())
            });
            d.map_err(io)?;
            h.unwrap_or_else(|p| std::panic::resume_unwind(p))
                .map_err(io)?;
        } else {
            // Data first, then the hashes that check it.
            if !data_reqs.is_empty() {
                batch(&self.data, &mut data_reqs).map_err(io)?;
            }
            if !hashes.is_empty() {
                batch(&self.tree, &mut hashes).map_err(io)?;
            }
        }
        if let Some(t) = timing {
            self.link.end(t);
        }
        self.stats
            .fetch_ns
            .fetch_add(fetching.elapsed().as_nanos() as u64, Relaxed);
        self.stats
            .data_bytes
            .fetch_add(fetched_data as u64, Relaxed);
        self.stats
            .hash_bytes
            .fetch_add((fetched_hashes * bs) as u64, Relaxed);
        self.stats
            .hash_blocks_read
            .fetch_add(fetched_hashes as u64, Relaxed);
        Ok(fetched_data as u64)
    }
}

pub use crate::sys::{enable_kernel_verity, kernel_verity_digest};

#[cfg(test)]
mod tests {
    use super::*;
    use sealfs_verity::{build_tree, HashAlg};

    /// Data of `len` bytes, its tree (SHA-256, 4 KiB blocks, salted or not) and a source over both.
    fn sealed(len: usize, salt: &[u8]) -> (Vec<u8>, Vec<u8>, SealInfo) {
        let data: Vec<u8> = (0..len as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        let params = Params::new(HashAlg::Sha256, 4096, salt).unwrap();
        let tree = build_tree(&params, &data).unwrap();
        let info = SealInfo {
            params,
            data_length: len as u64,
            tree_offset: 0,
            root: tree.root,
        };
        (data, tree.bytes, info)
    }

    fn source(data: Vec<u8>, tree: Vec<u8>, info: &SealInfo) -> VerifiedBlocks {
        VerifiedBlocks::new(Arc::new(data), Arc::new(tree), info.clone(), 64).unwrap()
    }

    /// Reads of many blocks at once (hashed two at a time, the last partial block zero-padded) equal
    /// the data; a damaged block at an even or odd position of a pair, or the partial last block,
    /// fails exactly the reads that include it and is named.
    #[test]
    fn multi_block_reads_check_every_block_and_name_the_damaged_one() {
        for salt in [&b""[..], b"salt!"] {
            let len = 300 * 4096 + 1234;
            let (data, tree, info) = sealed(len, salt);
            let vb = source(data.clone(), tree.clone(), &info);
            let mut buf = vec![0u8; 301 * 4096];
            vb.read_blocks(0, &mut buf).unwrap();
            assert_eq!(&buf[..len], &data[..]);
            assert!(buf[len..].iter().all(|&b| b == 0));
            for bad in [100u64, 101, 300] {
                let mut damaged = data.clone();
                damaged[bad as usize * 4096 + 7] ^= 1;
                let vb = source(damaged, tree.clone(), &info);
                for (first, n) in [(0u64, 301usize), (bad - 1, 2), (bad, 1), (bad & !1, 2)] {
                    let n = n.min((301 - first) as usize);
                    let mut buf = vec![0u8; n * 4096];
                    let err = vb.read_blocks(first, &mut buf).unwrap_err();
                    assert!(
                        err.to_string().contains(&format!("data block {bad} ")),
                        "read of {n} blocks at {first}: {err}"
                    );
                }
                let mut buf = vec![0u8; 64 * 4096];
                vb.read_blocks(bad.saturating_sub(70), &mut buf).unwrap();
                assert_eq!(vb.stats().failures.load(Relaxed), 4);
            }
        }
    }

    /// A source that answers after a pause, so that concurrent reads overlap.
    struct Slow(Vec<u8>);

    impl ReadAt for Slow {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            std::thread::sleep(std::time::Duration::from_millis(30));
            self.0.read_at(buf, offset)
        }
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
    }

    /// Runs `threads` reads of 64 blocks each, adjacent, started together; returns their results.
    fn concurrent_reads(vb: &Arc<VerifiedBlocks>, threads: u64) -> Vec<Result<Vec<u8>>> {
        let barrier = Arc::new(std::sync::Barrier::new(threads as usize));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (vb, barrier) = (vb.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 4096];
                    barrier.wait();
                    vb.read_blocks(t * 64, &mut buf).map(|_| buf)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }

    /// Eight reads at once over 512 blocks need 4 level-0 hash blocks and the level-1 block: each is
    /// read once, the reads that need one another is fetching wait for it.
    #[test]
    fn concurrent_reads_fetch_each_hash_block_once() {
        let (data, tree, info) = sealed(2048 * 4096, b"");
        let vb = Arc::new(
            VerifiedBlocks::new(Arc::new(data.clone()), Arc::new(Slow(tree)), info, 64).unwrap(),
        );
        assert_eq!(vb.geometry().num_levels(), 2);
        for (t, r) in concurrent_reads(&vb, 8).into_iter().enumerate() {
            let off = t * 64 * 4096;
            assert!(r.unwrap() == data[off..off + 64 * 4096], "read {t}");
        }
        let s = vb.stats();
        assert_eq!(
            s.hash_blocks_read.load(Relaxed),
            5,
            "each hash block fetched once"
        );
        // The second read of each pair waits for its level-0 block (and climbs no further); three of
        // the four reads that fetch one wait for the level-1 block: 7 waits (or, for a read that
        // started late, cache hits).
        let (shared, hits) = (
            s.hash_blocks_shared.load(Relaxed),
            s.hash_cache_hits.load(Relaxed),
        );
        assert_eq!(shared + hits, 7, "shared {shared}, cache hits {hits}");
        assert_eq!(s.blocks_verified.load(Relaxed), 512);
    }

    /// A network source (`is_remote`) whose batches wait (up to `wait`) until two batches, of
    /// either source of the pair, are in flight at once; records whether that happened.
    struct Rendezvous {
        bytes: Vec<u8>,
        /// (batches in flight, most ever in flight)
        meet: Arc<(Mutex<(u32, u32)>, std::sync::Condvar)>,
        met: Arc<Mutex<Vec<bool>>>,
        wait: std::time::Duration,
    }

    impl ReadAt for Rendezvous {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            self.bytes.read_at(buf, offset)
        }
        fn len(&self) -> u64 {
            self.bytes.len() as u64
        }
        fn is_remote(&self) -> bool {
            true
        }
        fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> std::io::Result<()> {
            let (lock, cv) = &*self.meet;
            let mut state = lock.lock().unwrap();
            state.0 += 1;
            state.1 = state.1.max(state.0);
            cv.notify_all();
            let (mut state, _) = cv
                .wait_timeout_while(state, self.wait, |(_, most)| *most < 2)
                .unwrap();
            self.met.lock().unwrap().push(state.1 >= 2);
            state.0 -= 1;
            drop(state);
            for (offset, buf) in reqs.iter_mut() {
                self.bytes.read_exact_at(buf, *offset)?;
            }
            Ok(())
        }
    }

    /// With a detached seal over the network, a cold read fetches its data and its hash blocks at
    /// the same time, each from its own source (not the data first, then the hashes); with
    /// dependent hash fetches (the benchmark's switch) they come in turn.
    #[test]
    fn a_detached_remote_seal_fetches_data_and_hashes_at_once() {
        let (data, tree, info) = sealed(256 * 4096, b"");
        for dependent in [false, true] {
            let meet = Arc::new((Mutex::new((0, 0)), std::sync::Condvar::new()));
            let met = Arc::new(Mutex::new(Vec::new()));
            // Long enough for a thread to start; waited out only when the batches come in turn.
            let wait = std::time::Duration::from_millis(if dependent { 200 } else { 10_000 });
            let src = |bytes: &Vec<u8>| {
                Arc::new(Rendezvous {
                    bytes: bytes.clone(),
                    meet: meet.clone(),
                    met: met.clone(),
                    wait,
                })
            };
            let vb = VerifiedBlocks::new(src(&data), src(&tree), info.clone(), 64)
                .unwrap()
                .with_dependent_hash_fetch(dependent);
            let mut buf = vec![0u8; 16 * 4096];
            vb.read_blocks(100, &mut buf).unwrap();
            assert!(buf == data[100 * 4096..116 * 4096]);
            let met = met.lock().unwrap().clone();
            assert_eq!(met.len(), 2, "one batch from each source");
            assert_eq!(met, vec![!dependent; 2], "dependent fetches: {dependent}");
        }
    }

    /// Tree bytes whose first answer covering one offset has that byte flipped (a fault on the
    /// link), later answers right.
    struct FlipOnce(Vec<u8>, u64, std::sync::atomic::AtomicBool);

    impl ReadAt for FlipOnce {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            std::thread::sleep(std::time::Duration::from_millis(30));
            let n = self.0.read_at(buf, offset)?;
            let at = self.1.wrapping_sub(offset);
            if at < n as u64 && !self.2.swap(true, Relaxed) {
                buf[at as usize] ^= 1;
            }
            Ok(n)
        }
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
    }

    /// A hash block damaged on its way to the read fetching it fails that read; a read that was
    /// waiting for it fetches it itself and reads (it was never given the damaged bytes).
    #[test]
    fn a_waiter_fetches_again_what_failed_in_another_read() {
        let (data, tree, info) = sealed(2048 * 4096, b"");
        let g = TreeGeometry::new(&info.params, info.data_length);
        // Level-0 block 1 covers data blocks 128..256: the reads of threads 2 and 3.
        let at = (g.level_start(0) + 1) * 4096 + 5;
        let tree = FlipOnce(tree, at, Default::default());
        let vb = Arc::new(
            VerifiedBlocks::new(Arc::new(data.clone()), Arc::new(tree), info, 64).unwrap(),
        );
        let results = concurrent_reads(&vb, 4);
        let mut failed = 0;
        for (t, r) in results.into_iter().enumerate() {
            match r {
                Ok(buf) => assert!(buf == data[t * 64 * 4096..(t + 1) * 64 * 4096], "read {t}"),
                Err(e) if t == 2 || t == 3 => {
                    assert!(e.to_string().contains("level 0 block 1"), "{t}: {e}");
                    failed += 1;
                }
                Err(e) => panic!("read {t}: {e}"),
            }
        }
        assert_eq!(failed, 1, "only the read given the damaged bytes fails");
        assert_eq!(vb.stats().failures.load(Relaxed), 1);
    }

    /// A damaged hash block fails the read that fetched it and every read that waited for it; it is
    /// not cached, so later reads fetch it again (and fail again), and other regions read.
    #[test]
    fn a_damaged_shared_hash_block_fails_its_waiters_too() {
        let (data, mut tree, info) = sealed(2048 * 4096, b"");
        let g = TreeGeometry::new(&info.params, info.data_length);
        // Level-0 block 1 covers data blocks 128..256: the reads of threads 2 and 3.
        tree[(g.level_start(0) as usize + 1) * 4096 + 5] ^= 1;
        let vb = Arc::new(
            VerifiedBlocks::new(Arc::new(data.clone()), Arc::new(Slow(tree)), info, 64).unwrap(),
        );
        for round in 0..2 {
            let results = concurrent_reads(&vb, 4);
            for (t, r) in results.into_iter().enumerate() {
                match (t, r) {
                    (2 | 3, Err(e)) => assert!(
                        e.to_string().contains("level 0 block 1"),
                        "{round} {t}: {e}"
                    ),
                    (0 | 1, Ok(buf)) => assert!(buf == data[t * 64 * 4096..(t + 1) * 64 * 4096]),
                    (t, r) => panic!("round {round}, read {t}: {:?}", r.map(|_| ())),
                }
            }
        }
        assert!(
            vb.cache.lock().unwrap().inflight.is_empty(),
            "no claim left behind"
        );
    }
    /// A store that holds nothing but says other images' blocks may serve (as a cache holding
    /// unrelated images does); `give` makes it find every leaf, with the right bytes or not.
    struct Sharing {
        data: Vec<u8>,
        give: Option<bool>,
        discarded: AtomicU64,
    }

    impl BlockStore for Sharing {
        fn get(&self, _: Region, _: u64, buf: &mut [u8]) -> Vec<bool> {
            vec![false; buf.len() / 4096]
        }
        fn put(&self, _: Region, _: u64, _: &[u8]) {}
        fn discard(&self, _: Region, _: u64, _: u64) {}
        fn has(&self, _: Region, _: u64, count: u64) -> Vec<bool> {
            vec![false; count as usize]
        }
        fn shares_leaves(&self) -> bool {
            true
        }
        fn get_by_leaf(&self, leaf: &[u8], out: &mut [u8]) -> bool {
            let Some(right) = self.give else {
                return false;
            };
            // The block with that leaf, found by hashing (a test only).
            let params = Params::new(sealfs_verity::HashAlg::Sha256, 4096, b"").unwrap();
            let hasher = BlockHasher::new(&params);
            let Some(b) = self
                .data
                .chunks_exact(4096)
                .position(|c| hasher.hash_block(c).as_bytes() == leaf)
            else {
                return false;
            };
            out.copy_from_slice(&self.data[b * 4096..(b + 1) * 4096]);
            if !right {
                out[9] ^= 1;
            }
            true
        }
        fn discard_leaf(&self, _: &[u8]) {
            self.discarded.fetch_add(1, Relaxed);
        }
    }

    /// Reads through a store that may share leaves take their hash blocks first (two batches when
    /// their level-0 block is not cached); after LEAF_PROBES such reads without a block found, one
    /// batch again. Blocks found by leaf are used, not fetched; wrong ones are discarded, fetched,
    /// and the read returns the right bytes.
    #[test]
    fn reads_look_for_shared_blocks_until_the_probes_find_none() {
        let (data, tree, info) = sealed(5 * 128 * 4096, b"");
        let vb = VerifiedBlocks::new(
            Arc::new(data.clone()),
            Arc::new(tree.clone()),
            info.clone(),
            4,
        )
        .unwrap()
        .with_store(Arc::new(Sharing {
            data: data.clone(),
            give: None,
            discarded: AtomicU64::new(0),
        }));
        let mut buf = vec![0u8; 8 * 4096];
        let reads = LEAF_PROBES + 20;
        for r in 0..reads {
            // Five regions in turn: each read's level-0 hash block was evicted (4 kept).
            let first = (r % 5) * 128 + 3;
            vb.read_blocks(first, &mut buf).unwrap();
            assert!(buf == data[first as usize * 4096..(first as usize + 8) * 4096]);
        }
        assert_eq!(vb.stats().batches.load(Relaxed), LEAF_PROBES * 2 + 20);

        for right in [true, false] {
            let store = Arc::new(Sharing {
                data: data.clone(),
                give: Some(right),
                discarded: AtomicU64::new(0),
            });
            let vb = VerifiedBlocks::new(
                Arc::new(data.clone()),
                Arc::new(tree.clone()),
                info.clone(),
                4,
            )
            .unwrap()
            .with_store(store.clone());
            vb.read_blocks(200, &mut buf).unwrap();
            assert!(buf == data[200 * 4096..208 * 4096]);
            let s = vb.stats();
            let (hits, fetched) = (s.leaf_hits.load(Relaxed), s.data_bytes.load(Relaxed));
            if right {
                assert_eq!((hits, fetched, s.leaf_discards.load(Relaxed)), (8, 0, 0));
            } else {
                assert_eq!(
                    (hits, fetched, s.leaf_discards.load(Relaxed)),
                    (0, 8 * 4096, 8)
                );
                assert_eq!(store.discarded.load(Relaxed), 8);
            }
        }
    }
}
