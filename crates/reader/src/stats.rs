//! Counters of what the reader did: blocks read, cache hits and misses, xattr lookups and how many of
//! them the name bloom filter answered without reading xattr entries.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters, updated with relaxed atomics (they are statistics, not synchronisation).
#[derive(Debug, Default)]
pub struct Stats {
    blocks_read: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
    xattr_lookups: AtomicU64,
    filter_skips: AtomicU64,
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
}

impl StatsSnapshot {
    /// The counters that grew from `earlier` to `self`.
    pub fn since(&self, earlier: &StatsSnapshot) -> StatsSnapshot {
        StatsSnapshot {
            blocks_read: self.blocks_read.saturating_sub(earlier.blocks_read),
            cache_hits: self.cache_hits.saturating_sub(earlier.cache_hits),
            cache_misses: self.cache_misses.saturating_sub(earlier.cache_misses),
            xattr_lookups: self.xattr_lookups.saturating_sub(earlier.xattr_lookups),
            filter_skips: self.filter_skips.saturating_sub(earlier.filter_skips),
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
}
