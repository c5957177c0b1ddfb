//! The one choke point for image bytes: bounds checks, whole-block reads and a bounded LRU cache.
//!
//! Every byte the parsers look at comes through the crate-internal `Blocks`. It checks each
//! requested range against the image length *before* any read (an offset taken from the image that
//! points outside it is an [`Error::Corrupted`] naming the inode, block and offset), reads only
//! whole blocks of the [`BlockSource`] (so a verifying source sees whole blocks), and keeps the most
//! recently used blocks in a cache of a fixed number of entries. Large data reads bypass the cache
//! for the whole blocks in their middle, so streaming a file does not evict metadata.

use crate::error::{Error, Location, Result};
use crate::source::BlockSource;
use crate::stats::Stats;
use std::collections::HashMap;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex};

/// Bytes of one block (or part of one), shared with the cache when possible.
#[derive(Clone)]
pub struct BlockRef {
    buf: Arc<[u8]>,
    start: usize,
    len: usize,
}

impl BlockRef {
    /// A reference to bytes owned by nobody else.
    pub fn owned(bytes: Vec<u8>) -> BlockRef {
        let len = bytes.len();
        BlockRef {
            buf: bytes.into(),
            start: 0,
            len,
        }
    }
}

impl Deref for BlockRef {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl std::fmt::Debug for BlockRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockRef({} bytes)", self.len)
    }
}

const NIL: usize = usize::MAX;

/// What a cache entry weighs against the byte bound: its length in bytes.
pub(crate) trait Weigh {
    fn weight(&self) -> usize;
}

impl Weigh for Arc<[u8]> {
    fn weight(&self) -> usize {
        self.len()
    }
}

impl Weigh for Arc<Vec<u8>> {
    fn weight(&self) -> usize {
        self.len()
    }
}

struct Node<K, V> {
    key: K,
    /// `None` for a free slot.
    val: Option<V>,
    prev: usize,
    next: usize,
}

/// A least-recently-used map from a key (a block index by default) to bytes, with O(1) operations:
/// a hash map into a slab of nodes linked from most (`head`) to least (`tail`) recently used.
///
/// Bounded by a number of entries and by a total of bytes (the values' lengths); eviction removes
/// the least recently used entries until both bounds hold. A value longer than the byte bound is
/// never stored, so the bounds are never exceeded.
pub(crate) struct Lru<K = u64, V = Arc<[u8]>> {
    cap: usize,
    max_bytes: usize,
    bytes: usize,
    map: HashMap<K, usize>,
    nodes: Vec<Node<K, V>>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
}

impl<K: Copy + Eq + Hash, V: Clone + Weigh> Lru<K, V> {
    /// At most `cap` entries, any size.
    pub(crate) fn new(cap: usize) -> Lru<K, V> {
        Lru::with_bounds(cap, usize::MAX)
    }

    /// At most `cap` entries holding at most `max_bytes` bytes in total.
    pub(crate) fn with_bounds(cap: usize, max_bytes: usize) -> Lru<K, V> {
        Lru {
            cap,
            max_bytes,
            bytes: 0,
            map: HashMap::with_capacity(cap.min(1024)),
            nodes: Vec::with_capacity(cap.min(1024)),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
        }
    }

    fn unlink(&mut self, i: usize) {
        let (prev, next) = (self.nodes[i].prev, self.nodes[i].next);
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next].prev = prev;
        }
    }

    fn push_front(&mut self, i: usize) {
        self.nodes[i].prev = NIL;
        self.nodes[i].next = self.head;
        if self.head != NIL {
            self.nodes[self.head].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// Whether `key` is held (without making it the most recently used).
    pub(crate) fn contains(&self, key: K) -> bool {
        self.map.contains_key(&key)
    }

    /// Maximum number of entries.
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    pub(crate) fn get(&mut self, key: K) -> Option<V> {
        let i = *self.map.get(&key)?;
        if self.head != i {
            self.unlink(i);
            self.push_front(i);
        }
        self.nodes[i].val.clone()
    }

    /// Removes the entry under `key`; returns its value.
    pub(crate) fn remove(&mut self, key: K) -> Option<V> {
        let i = *self.map.get(&key)?;
        self.remove_slot(i)
    }

    /// Removes the least recently used entry; returns its value.
    fn evict_tail(&mut self) -> Option<V> {
        if self.tail != NIL {
            self.remove_slot(self.tail)
        } else {
            None
        }
    }

    /// Removes the entry in slot `i`; the slot goes to the free list. Returns its value.
    fn remove_slot(&mut self, i: usize) -> Option<V> {
        self.unlink(i);
        self.map.remove(&self.nodes[i].key);
        let v = self.nodes[i].val.take();
        if let Some(v) = &v {
            self.bytes -= v.weight();
        }
        self.free.push(i);
        v
    }

    /// Stores `val` under `key` as the most recently used entry, evicting as needed. Returns the
    /// number of entries evicted. A value longer than the byte bound is not stored (and evicts
    /// nothing; an older value under the same key is dropped).
    pub(crate) fn insert(&mut self, key: K, val: V) -> usize {
        self.insert_with(key, val, drop)
    }

    /// [`Lru::insert`], handing every value it drops (evicted, or replaced under `key`) to
    /// `dropped`.
    pub(crate) fn insert_with(&mut self, key: K, val: V, mut dropped: impl FnMut(V)) -> usize {
        let weight = val.weight();
        if self.cap == 0 || weight > self.max_bytes {
            if let Some(i) = self.map.get(&key).copied() {
                if let Some(v) = self.remove_slot(i) {
                    dropped(v);
                }
            }
            return 0;
        }
        let mut evicted = 0;
        if let Some(&i) = self.map.get(&key) {
            let old = self.nodes[i].val.replace(val);
            self.bytes = self.bytes - old.as_ref().map_or(0, |v| v.weight()) + weight;
            if let Some(v) = old {
                dropped(v);
            }
            if self.head != i {
                self.unlink(i);
                self.push_front(i);
            }
            // `i` is the head and fits alone, so eviction stops before reaching it.
            while self.bytes > self.max_bytes && self.tail != i {
                if let Some(v) = self.evict_tail() {
                    dropped(v);
                }
                evicted += 1;
            }
            return evicted;
        }
        while self.tail != NIL
            && (self.map.len() >= self.cap || self.bytes + weight > self.max_bytes)
        {
            if let Some(v) = self.evict_tail() {
                dropped(v);
            }
            evicted += 1;
        }
        self.bytes += weight;
        let node = Node {
            key,
            val: Some(val),
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i] = node;
                i
            }
            None => {
                self.nodes.push(node);
                self.nodes.len() - 1
            }
        };
        self.map.insert(key, i);
        self.push_front(i);
        evicted
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Total bytes of the values held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Bounds-checked, cached access to the blocks of a [`BlockSource`].
pub(crate) struct Blocks {
    src: Arc<dyn BlockSource>,
    bits: u8,
    len: u64,
    nblocks: u64,
    erofs_bits: u8,
    cache: Mutex<Lru>,
    stats: Stats,
}

impl Blocks {
    /// Access to `src` caching up to `cache_blocks` blocks. `erofs_bits` (the EROFS block size) is
    /// used to name blocks in errors; [`Blocks::set_erofs_bits`] sets it once the superblock is read.
    pub(crate) fn new(src: Arc<dyn BlockSource>, cache_blocks: usize) -> Blocks {
        let bits = src.block_bits();
        let len = src.len();
        Blocks {
            bits,
            len,
            nblocks: len.div_ceil(1 << bits),
            erofs_bits: 12,
            cache: Mutex::new(Lru::new(cache_blocks)),
            stats: Stats::default(),
            src,
        }
    }

    /// Whether the source acts on prefetch hints.
    pub(crate) fn source_prefetches(&self) -> bool {
        self.src.prefetches()
    }

    /// Passes a prefetch hint (byte ranges, in order of use) to the source.
    pub(crate) fn hint_source(&self, ranges: &[std::ops::Range<u64>]) {
        self.src.prefetch(ranges);
    }

    /// Has the source fetch the byte ranges into its store now ([`BlockSource::fill`]).
    pub(crate) fn fill_source(&self, ranges: &[std::ops::Range<u64>]) {
        self.src.fill(ranges);
    }

    pub(crate) fn set_erofs_bits(&mut self, bits: u8) {
        self.erofs_bits = bits;
    }

    /// log2 of the source's block size.
    pub(crate) fn block_bits(&self) -> u8 {
        self.bits
    }

    /// Image length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    pub(crate) fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Number of blocks held in the cache.
    #[cfg(test)]
    pub(crate) fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn locate(&self, offset: u64, at: Location) -> Location {
        at.with_offset(offset).with_block(offset >> self.erofs_bits)
    }

    /// Checks that `[offset, offset + len)` lies inside the image.
    pub(crate) fn check(&self, offset: u64, len: u64, at: Location) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::corrupted(
                format!(
                    "{len} bytes at {offset:#x} run past the end of the image ({} bytes)",
                    self.len
                ),
                self.locate(offset, at),
            )),
        }
    }

    fn relocate(&self, e: Error, offset: u64, at: Location) -> Error {
        match e {
            Error::Io { source, .. } => Error::Io {
                at: self.locate(offset, at),
                source,
            },
            Error::Verification { what, at: inner } => Error::Verification {
                what,
                at: Location {
                    nid: at.nid,
                    ..inner
                },
            },
            other => other,
        }
    }

    /// Source block `idx`, from the cache or read (and then cached).
    fn block(&self, idx: u64, at: Location) -> Result<Arc<[u8]>> {
        if idx >= self.nblocks {
            return Err(Error::corrupted(
                format!("block beyond the end of the image ({} bytes)", self.len),
                self.locate(idx << self.bits, at),
            ));
        }
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(b) = cache.get(idx) {
                self.stats.add_cache_hit();
                return Ok(b);
            }
        }
        self.stats.add_cache_miss();
        let mut buf = vec![0u8; 1 << self.bits];
        self.src
            .read_blocks(idx, &mut buf)
            .map_err(|e| self.relocate(e, idx << self.bits, at))?;
        self.stats.add_blocks_read(1);
        let block: Arc<[u8]> = buf.into();
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(idx, block.clone());
        Ok(block)
    }

    /// Brings the blocks `blocks` (sorted, distinct indexes) into the cache ahead of use: runs of
    /// nearby uncached blocks are read in one request each (a verifying source then checks them
    /// together), at most a quarter of the cache in all. Only a hint: blocks outside the image are
    /// skipped, and a run that fails to read or verify is dropped, so that the failure is reported by
    /// the read that needs the failing block, and by no other.
    pub(crate) fn prefetch(&self, blocks: &[u64]) {
        /// Uncached blocks between two wanted ones that are read along rather than splitting a run.
        const MAX_GAP: u64 = 2;
        /// Longest run read in one request.
        const MAX_RUN: u64 = 64;
        let bs = 1usize << self.bits;
        let runs = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let mut budget = (cache.cap() / 4) as u64;
            let mut runs: Vec<(u64, u64)> = Vec::new();
            for &b in blocks {
                if b >= self.nblocks || cache.contains(b) {
                    continue;
                }
                match runs.last_mut() {
                    Some((first, n))
                        if b >= *first + *n
                            && b - (*first + *n) <= MAX_GAP
                            && b + 1 - *first <= MAX_RUN
                            && b + 1 - (*first + *n) <= budget =>
                    {
                        budget -= b + 1 - (*first + *n);
                        *n = b + 1 - *first;
                    }
                    _ if budget > 0 => {
                        budget -= 1;
                        runs.push((b, 1));
                    }
                    _ => break,
                }
            }
            runs
        };
        for (first, n) in runs {
            let mut buf = vec![0u8; n as usize * bs];
            if self.src.read_blocks(first, &mut buf).is_err() {
                continue;
            }
            self.stats.add_blocks_read(n);
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            for (k, block) in buf.chunks_exact(bs).enumerate() {
                cache.insert(first + k as u64, Arc::from(block));
            }
        }
    }

    /// Fills `buf` with the image bytes at `offset`, through the cache.
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8], at: Location) -> Result<()> {
        self.check(offset, buf.len() as u64, at)?;
        let mask = (1u64 << self.bits) - 1;
        let mut pos = offset;
        let mut done = 0;
        while done < buf.len() {
            let block = self.block(pos >> self.bits, at)?;
            let off = (pos & mask) as usize;
            let n = (block.len() - off).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&block[off..off + n]);
            done += n;
            pos += n as u64;
        }
        Ok(())
    }

    /// `len` image bytes at `offset`. Callers bound `len` (it is never an unchecked image field).
    pub(crate) fn read_vec(&self, offset: u64, len: usize, at: Location) -> Result<Vec<u8>> {
        self.check(offset, len as u64, at)?;
        let mut v = vec![0u8; len];
        self.read(offset, &mut v, at)?;
        Ok(v)
    }

    /// `len` bytes at `offset` as a [`BlockRef`]: shared with the cache when they lie in one block.
    pub(crate) fn slice(&self, offset: u64, len: usize, at: Location) -> Result<BlockRef> {
        self.check(offset, len as u64, at)?;
        let mask = (1u64 << self.bits) - 1;
        let off = (offset & mask) as usize;
        if off + len <= 1 << self.bits {
            let buf = self.block(offset >> self.bits, at)?;
            Ok(BlockRef {
                buf,
                start: off,
                len,
            })
        } else {
            Ok(BlockRef::owned(self.read_vec(offset, len, at)?))
        }
    }

    /// Fills `buf` from `offset` like [`Blocks::read`], but reads the whole blocks in the middle of
    /// the range straight from the source into `buf`, without caching them.
    pub(crate) fn read_bulk(&self, offset: u64, buf: &mut [u8], at: Location) -> Result<()> {
        self.check(offset, buf.len() as u64, at)?;
        let bs = 1u64 << self.bits;
        let end = offset + buf.len() as u64;
        let first_full = offset.next_multiple_of(bs);
        let last_full = end & !(bs - 1);
        if first_full >= last_full {
            return self.read(offset, buf, at);
        }
        let head = (first_full - offset) as usize;
        let mid = (last_full - first_full) as usize;
        self.read(offset, &mut buf[..head], at)?;
        // Whole blocks already cached are copied; runs of uncached ones are read in one request.
        let mut pos = first_full;
        while pos < last_full {
            let idx = pos >> self.bits;
            let dst_off = (pos - offset) as usize;
            let cached = self
                .cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(idx);
            if let Some(b) = cached {
                self.stats.add_cache_hit();
                buf[dst_off..dst_off + bs as usize].copy_from_slice(&b);
                pos += bs;
                continue;
            }
            let run_end = last_full.min(pos + (1 << 20));
            let n = (run_end - pos) as usize;
            self.src
                .read_blocks(idx, &mut buf[dst_off..dst_off + n])
                .map_err(|e| self.relocate(e, pos, at))?;
            self.stats.add_blocks_read(n as u64 >> self.bits);
            pos = run_end;
        }
        self.read(last_full, &mut buf[head + mid..], at)
    }
}

/// What one read fetches or decodes for the reads waiting on it: set once (`None`: it failed),
/// waited for by any number of them.
pub(crate) struct Outcome<T> {
    result: Mutex<Option<Option<T>>>,
    ready: Condvar,
}

impl<T> Default for Outcome<T> {
    fn default() -> Self {
        Outcome {
            result: Mutex::new(None),
            ready: Condvar::new(),
        }
    }
}

impl<T: Clone> Outcome<T> {
    /// Sets the outcome and wakes the waiters; later calls change nothing.
    pub(crate) fn resolve(&self, v: Option<T>) {
        let mut r = self.result.lock().unwrap_or_else(|e| e.into_inner());
        if r.is_none() {
            *r = Some(v);
            self.ready.notify_all();
        }
    }

    /// Waits for the outcome.
    pub(crate) fn wait(&self) -> Option<T> {
        let mut r = self.result.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(v) = &*r {
                return v.clone();
            }
            r = self.ready.wait(r).unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::PlainBlocks;

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut lru = Lru::new(2);
        let v = |b: u8| -> Arc<[u8]> { vec![b].into() };
        lru.insert(1, v(1));
        lru.insert(2, v(2));
        assert_eq!(lru.get(1).unwrap()[0], 1); // 1 is now most recent
        lru.insert(3, v(3)); // evicts 2
        assert!(lru.get(2).is_none());
        assert_eq!(lru.get(1).unwrap()[0], 1);
        assert_eq!(lru.get(3).unwrap()[0], 3);
        lru.insert(3, v(33));
        assert_eq!(lru.get(3).unwrap()[0], 33);
        assert_eq!(lru.len(), 2);
        let mut none = Lru::new(0);
        none.insert(1, v(1));
        assert!(none.get(1).is_none());
    }

    #[test]
    fn lru_survives_many_operations() {
        let mut lru: Lru = Lru::new(5);
        for i in 0..1000u64 {
            lru.insert(i % 17, vec![i as u8].into());
            let _ = lru.get((i * 7) % 17);
            assert!(lru.len() <= 5);
        }
    }

    #[test]
    fn lru_byte_bound_is_never_exceeded() {
        let v = |n: usize| -> Arc<[u8]> { vec![7u8; n].into() };
        let mut lru: Lru = Lru::with_bounds(usize::MAX, 1000);
        assert_eq!(lru.insert(1, v(400)), 0);
        assert_eq!(lru.insert(2, v(400)), 0);
        assert_eq!(lru.bytes(), 800);
        assert!(lru.get(1).is_some()); // 2 is now least recently used
        assert_eq!(lru.insert(3, v(300)), 1); // evicts 2
        assert!(lru.get(2).is_none());
        assert_eq!((lru.len(), lru.bytes()), (2, 700));
        // Too large for the bound: not stored, nothing evicted, an older value dropped.
        assert_eq!(lru.insert(4, v(1001)), 0);
        assert!(lru.get(4).is_none());
        assert_eq!(lru.insert(1, v(1001)), 0);
        assert!(lru.get(1).is_none());
        assert_eq!((lru.len(), lru.bytes()), (1, 300));
        // Replacing a value with a larger one evicts others, never itself.
        lru.insert(5, v(500));
        assert_eq!(lru.insert(3, v(900)), 1);
        assert_eq!((lru.len(), lru.bytes()), (1, 900));
        assert_eq!(lru.get(3).unwrap().len(), 900);
        // Many random operations: both bounds hold, bytes add up.
        let mut lru: Lru = Lru::with_bounds(7, 5000);
        let mut x = 1u64;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = (x >> 33) % 23;
            if x.is_multiple_of(3) {
                let _ = lru.get(key);
            } else {
                lru.insert(key, v(((x >> 20) % 1500) as usize));
            }
            assert!(lru.len() <= 7 && lru.bytes() <= 5000);
            let sum: usize = lru
                .map
                .values()
                .map(|&i| lru.nodes[i].val.as_ref().unwrap().len())
                .sum();
            assert_eq!(sum, lru.bytes());
        }
        let mut off: Lru = Lru::with_bounds(0, 0);
        assert_eq!(off.insert(1, v(0)), 0);
        assert!(off.get(1).is_none());
    }

    fn blocks(len: usize, cache: usize) -> Blocks {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        Blocks::new(Arc::new(PlainBlocks::new(data)), cache)
    }

    #[test]
    fn reads_are_bounds_checked() {
        let b = blocks(10000, 4);
        let mut buf = [0u8; 16];
        b.read(9984, &mut buf, Location::nid(5)).unwrap();
        assert_eq!(buf[0], (9984 % 251) as u8);
        let e = b.read(9990, &mut buf, Location::nid(5)).unwrap_err();
        assert!(e.is_corrupted());
        let msg = e.to_string();
        assert!(msg.contains("nid 5") && msg.contains("block 2"), "{msg}");
        assert!(b.read(u64::MAX - 3, &mut buf, Location::image()).is_err());
    }

    #[test]
    fn cache_is_bounded_and_counts() {
        let b = blocks(10 * 4096, 3);
        let mut buf = [0u8; 100];
        for i in 0..10u64 {
            b.read(i * 4096, &mut buf, Location::image()).unwrap();
        }
        assert_eq!(b.cached(), 3);
        b.read(9 * 4096 + 5, &mut buf, Location::image()).unwrap();
        let s = b.stats().snapshot();
        assert_eq!((s.cache_misses, s.cache_hits, s.blocks_read), (10, 1, 10));
    }

    #[test]
    fn bulk_reads_match_cached_reads() {
        let b = blocks(50000, 2);
        for (off, len) in [
            (0, 50000),
            (100, 20000),
            (4096, 8192),
            (4000, 200),
            (49000, 1000),
        ] {
            let mut x = vec![0u8; len];
            let mut y = vec![0u8; len];
            b.read(off, &mut x, Location::image()).unwrap();
            b.read_bulk(off, &mut y, Location::image()).unwrap();
            assert!(x == y, "{off} {len}");
        }
        let s = b.slice(4090, 10, Location::image()).unwrap();
        assert_eq!(s[0], (4090 % 251) as u8);
        assert_eq!(s.len(), 10);
    }
}
