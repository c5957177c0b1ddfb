//! The mount's statistics: the FUSE layer's counters, and [`SealFs::stats_json`], which adds the
//! reader's and the verifier's (what `sealfs stats MOUNTPOINT` prints).

use crate::SealFs;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the FUSE layer (the reader and the verifier keep their own).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) lookups: AtomicU64,
    pub(crate) negative_lookups: AtomicU64,
    pub(crate) getattrs: AtomicU64,
    pub(crate) reads: AtomicU64,
    pub(crate) bytes_served: AtomicU64,
    /// Nanoseconds `read` requests spent in the reader (mapping, fetching, hashing, decoding).
    pub(crate) read_ns: AtomicU64,
    /// Nanoseconds `read` requests spent sending their reply (the kernel copying it into the
    /// page cache).
    pub(crate) reply_ns: AtomicU64,
    pub(crate) readdirs: AtomicU64,
    /// `open`/`opendir` requests: one of each per mount (answered `ENOSYS`, see [`SealFs::open`]).
    pub(crate) opens: AtomicU64,
    pub(crate) getxattrs: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) verification_errors: AtomicU64,
    /// Files whose whole content was checked against its own digest (double verification).
    pub(crate) files_checked: AtomicU64,
    /// Files that failed that check.
    pub(crate) file_check_failures: AtomicU64,
}

impl SealFs {
    /// The statistics as a JSON object.
    pub fn stats_json(&self) -> serde_json::Value {
        let c = &self.counters;
        let s = self.image.stats();
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut v = serde_json::json!({
            "trust": self.trust,
            "uptime_seconds": self.started.elapsed().as_secs_f64(),
            "fuse": {
                "lookups": load(&c.lookups),
                "negative_lookups": load(&c.negative_lookups),
                "getattrs": load(&c.getattrs),
                "reads": load(&c.reads),
                "bytes_served": load(&c.bytes_served),
                "readdirs": load(&c.readdirs),
                "opens": load(&c.opens),
                "files_checked": load(&c.files_checked),
                "file_check_failures": load(&c.file_check_failures),
                "getxattrs": load(&c.getxattrs),
                "xattrs": match &*self.xattrs_unread.lock().unwrap_or_else(|e| e.into_inner()) {
                    Some(why) => format!("answered from the image (it could not be read whole to check for any: {why})"),
                    None => self.xattr_state().describe().to_string(),
                },
                "errors": load(&c.errors),
                "verification_errors": load(&c.verification_errors),
                // "io_uring" where the mount asked for rings (`ring_requests` says whether the
                // kernel really sent requests through them), "dev" otherwise.
                "transport": if self.ring_requests.is_some() { "io_uring" } else { "dev" },
                "ring_requests": self.ring_requests.as_ref().map_or(0, |r| load(r)),
            },
            "reader": {
                "blocks_read": s.blocks_read,
                "block_cache_hits": s.cache_hits,
                "block_cache_misses": s.cache_misses,
                "xattr_lookups": s.xattr_lookups,
                "xattr_filter_skips": s.filter_skips,
                "cluster_cache_hits": s.cluster_hits,
                "cluster_cache_misses": s.cluster_misses,
                "cluster_cache_evictions": s.cluster_evictions,
                "cluster_cache_bytes": s.cluster_cache_bytes,
                "cluster_cache_peak_bytes": s.cluster_cache_peak_bytes,
                "compressed_bytes_read": s.compressed_bytes_read,
                "decompressed_bytes": s.decompressed_bytes,
            },
        });
        // Where `read` requests' time goes (summed over the serving threads).
        let secs = |ns: u64| ns as f64 / 1e9;
        v["data_path"] = serde_json::json!({
            "requests": load(&c.reads),
            "bytes": load(&c.bytes_served),
            "read_seconds": secs(load(&c.read_ns)),
            "decompress_seconds": secs(s.decompress_ns),
            "reply_seconds": secs(load(&c.reply_ns)),
        });
        if let Some(vb) = &self.verified {
            let vs = vb.stats();
            v["verify"] = serde_json::json!({
                "blocks_verified": load(&vs.blocks_verified),
                "hash_blocks_read": load(&vs.hash_blocks_read),
                "hash_cache_hits": load(&vs.hash_cache_hits),
                "hash_blocks_shared": load(&vs.hash_blocks_shared),
                "batches": load(&vs.batches),
                "data_bytes_read": load(&vs.data_bytes),
                "hash_bytes_read": load(&vs.hash_bytes),
                "failures": load(&vs.failures),
                "store_hits": load(&vs.store_hits),
                "store_discards": load(&vs.store_discards),
                "leaf_hits": load(&vs.leaf_hits),
                "leaf_discards": load(&vs.leaf_discards),
                "readahead_blocks": load(&vs.readahead_blocks),
                "handed_over_blocks": load(&vs.handed_over_blocks),
                "fill": vb.fill_state().to_string(),
            });
            v["data_path"]["fetch_seconds"] = serde_json::json!(secs(load(&vs.fetch_ns)));
            v["data_path"]["hash_seconds"] = serde_json::json!(secs(load(&vs.hash_ns)));
            if let Some((rtt, rate)) = vb.link_estimate() {
                v["verify"]["link_round_trip_ms"] = serde_json::json!(rtt.as_secs_f64() * 1e3);
                v["verify"]["link_rate_bytes_per_s"] = serde_json::json!(rate.round());
            }
        }
        v
    }
}
