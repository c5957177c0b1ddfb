//! Counters of what the reader did: blocks read, cache hits and misses, xattr lookups and how many of
//! them the name bloom filter answered without reading xattr entries, and the decompressed pcluster
//! cache (see [`crate::decompress`]): its lookups, the compressed bytes read and the decompressed
//! bytes produced on its misses, the time spent decoding, its evictions and how many bytes it
//! holds.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters, updated with relaxed atomics (they are statistics, not synchronisation).
#[derive(Debug, Default)]
pub struct Stats {
    blocks_read: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    xattr_lookups: AtomicU64,
    filter_skips: AtomicU64,
    cluster_hits: AtomicU64,
    cluster_misses: AtomicU64,
    cluster_evictions: AtomicU64,
    compressed_bytes_read: AtomicU64,
    decompressed_bytes: AtomicU64,
    decompress_ns: AtomicU64,
    cluster_cache_bytes: AtomicU64,
    cluster_cache_peak_bytes: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Blocks read from the block source (cache misses plus uncached bulk data reads).
    pub blocks_read: u64,
    /// Block requests served from the cache.
    pub cache_hits: u64,
    /// Block requests that had to read the source.
    pub cache_misses: u64,
    /// Calls of [`crate::Image::get_xattr`] that reached the inode's xattrs.
    pub xattr_lookups: u64,
    /// Lookups answered "absent" from the name bloom filter, without reading any xattr entry.
    pub filter_skips: u64,
    /// Decoded extents (and blocks of [`crate::Image::read_direct`]'s small uncompressed reads)
    /// served from the cluster cache.
    /// Every decoded extent or such block a read needs is one lookup: `cluster_hits +
    /// cluster_misses` is the number of lookups.
    pub cluster_hits: u64,
    /// Decoded extents not in the cluster cache (or with the cache off): their pcluster was read
    /// and decoded; or blocks of those small uncompressed reads not in it, read.
    pub cluster_misses: u64,
    /// Entries the cluster cache evicted to stay within its byte bound.
    pub cluster_evictions: u64,
    /// Bytes of pclusters read for decoding (the sum of their physical lengths).
    pub compressed_bytes_read: u64,
    /// Bytes the decoders produced.
    pub decompressed_bytes: u64,
    /// Nanoseconds spent in the decoders (summed over threads).
    pub decompress_ns: u64,
    /// Bytes of decoded data the cluster cache holds now (a level, not a counter).
    pub cluster_cache_bytes: u64,
    /// Most bytes the cluster cache ever held (a level, not a counter): never more than
    /// [`crate::Options::cluster_cache_bytes`].
    pub cluster_cache_peak_bytes: u64,
}

impl StatsSnapshot {
    /// The counters that grew from `earlier` to `self` (the two levels, `cluster_cache_bytes` and
    /// `cluster_cache_peak_bytes`, are `self`'s).
    pub fn since(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            blocks_read: self.blocks_read.saturating_sub(earlier.blocks_read),
            cache_hits: self.cache_hits.saturating_sub(earlier.cache_hits),
            cache_misses: self.cache_misses.saturating_sub(earlier.cache_misses),
            xattr_lookups: self.xattr_lookups.saturating_sub(earlier.xattr_lookups),
            filter_skips: self.filter_skips.saturating_sub(earlier.filter_skips),
            cluster_hits: self.cluster_hits.saturating_sub(earlier.cluster_hits),
            cluster_misses: self.cluster_misses.saturating_sub(earlier.cluster_misses),
            cluster_evictions: self
                .cluster_evictions
                .saturating_sub(earlier.cluster_evictions),
            compressed_bytes_read: self
                .compressed_bytes_read
                .saturating_sub(earlier.compressed_bytes_read),
            decompressed_bytes: self
                .decompressed_bytes
                .saturating_sub(earlier.decompressed_bytes),
            decompress_ns: self.decompress_ns.saturating_sub(earlier.decompress_ns),
            cluster_cache_bytes: self.cluster_cache_bytes,
            cluster_cache_peak_bytes: self.cluster_cache_peak_bytes,
        }
    }
}

impl Stats {
    /// The current values.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            blocks_read: self.blocks_read.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            cache_misses: self.cache_misses.load(Ordering::Relaxed),
            xattr_lookups: self.xattr_lookups.load(Ordering::Relaxed),
            filter_skips: self.filter_skips.load(Ordering::Relaxed),
            cluster_hits: self.cluster_hits.load(Ordering::Relaxed),
            cluster_misses: self.cluster_misses.load(Ordering::Relaxed),
            cluster_evictions: self.cluster_evictions.load(Ordering::Relaxed),
            compressed_bytes_read: self.compressed_bytes_read.load(Ordering::Relaxed),
            decompressed_bytes: self.decompressed_bytes.load(Ordering::Relaxed),
            decompress_ns: self.decompress_ns.load(Ordering::Relaxed),
            cluster_cache_bytes: self.cluster_cache_bytes.load(Ordering::Relaxed),
            cluster_cache_peak_bytes: self.cluster_cache_peak_bytes.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn add_blocks_read(&self, n: u64) {
        self.blocks_read.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_cache_hit(&self) {
        self.cache_hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_cache_miss(&self) {
        self.cache_misses.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_xattr_lookup(&self) {
        self.xattr_lookups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_filter_skip(&self) {
        self.filter_skips.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_cluster_hit(&self) {
        self.cluster_hits.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_cluster_miss(&self) {
        self.cluster_misses.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_compressed_read(&self, n: u64) {
        self.compressed_bytes_read.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_decompressed(&self, n: u64) {
        self.decompressed_bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_decompress_time(&self, t: std::time::Duration) {
        self.decompress_ns
            .fetch_add(t.as_nanos() as u64, Ordering::Relaxed);
    }

    /// After an insertion into the cluster cache: `evicted` entries left, `bytes` are held.
    pub(crate) fn set_cluster_cache(&self, evicted: u64, bytes: u64) {
        self.cluster_evictions.fetch_add(evicted, Ordering::Relaxed);
        self.cluster_cache_bytes.store(bytes, Ordering::Relaxed);
        self.cluster_cache_peak_bytes
            .fetch_max(bytes, Ordering::Relaxed);
    }
}
