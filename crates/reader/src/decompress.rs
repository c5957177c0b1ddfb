//! Decoding compressed extents, and the bounded cache of decoded pclusters (design idea 5).
//!
//! # Decoding
//!
//! `Image::decoded_extent` turns one mapped extent (from [`crate::zmap`]) into its decoded bytes:
//! it reads the pcluster through the block layer (whole blocks of the [`crate::BlockSource`], so a
//! verifying source checks them as read from the image; blocks of ordinary pclusters bypass the
//! metadata block cache, inline tail pclusters come through it) and hands it to the decoder of its
//! algorithm. Decoders are a table indexed by the on-disk algorithm id, like the kernel's
//! `z_erofs_decomp[]`:
//!
//! | id | algorithm | decoder |
//! |---|---|---|
//! | 0 | LZ4 (lz4, lz4hc) | raw LZ4 block, liblz4's `LZ4_decompress_safe` (through `lz4-sys`) |
//! | 1 | LZMA (MicroLZMA) | liblzma's `lzma_microlzma_decoder` (through `liblzma-sys`), dictionary of the image's LZMA record |
//! | 2 | DEFLATE | raw DEFLATE, `flate2` (miniz_oxide) streaming inflate, 32 KiB window |
//! | 3 | ZSTD | one Zstandard frame, `zstd` streaming decoder, window at most the image's `1 << (windowlog + 10)` |
//!
//! and the two uncompressed forms of PLAIN lclusters: *shifted* (the extent's bytes start at
//! pcluster byte 0; `m_llen <= m_plen` was checked by the map) and *interlaced* (the kernel's
//! `z_erofs_transform_plain`: the first `blksz - blkoff(m_la)` bytes are the pcluster's last ones,
//! the rest start at its byte 0).
//!
//! **Zero padding** (`z_erofs_fixup_insize`). LZ4 (with `ZERO_PADDING`), MicroLZMA, DEFLATE and
//! ZSTD data is right-aligned: leading zero bytes are skipped, looking **only at the pcluster's first block**
//! (for an inline pcluster, the rest of its block). A first block of zeros is corrupted.
//!
//! **Decoded length.** An extent holds `m_llen` bytes, from its start to the next extent's start
//! (or to `i_size` for the last one). A read that ends inside it needs only a prefix, and
//! `Image::decoded_extent` decodes only that prefix when it will not keep the rest (see the cluster
//! cache below): LZ4 with the partial decoder below (as the kernel decodes only up to the output it
//! needs), ZSTD by stopping the streaming decoder, PLAIN by copying less. The bytes after the
//! prefix are then not looked at, so damage there shows only on a read that reaches it. A whole
//! extent is decoded like the kernel's full decode
//! (`LZ4_decompress_safe` into exactly `m_llen` bytes) and `fsck.erofs`, a right-aligned LZ4 stream
//! must decode to exactly that length (decoded with liblz4's `LZ4_decompress_safe`, the kernel's
//! decoder). Two cases need the kernel's
//! *partial* decode (`LZ4_decompress_safe_partial`: stop once `m_llen` bytes are out, whatever
//! follows), and there a small bounds-checked decoder here is stricter than liblz4's partial
//! decoder, which reads the zeros after a stream's end as matches of offset 0 and decodes them:
//! images without `ZERO_PADDING` (pre-5.3 layout, still written by mkfs.erofs 1.5 with
//! `-E legacy-compress`: the stream is left-aligned and followed by zeros) and heads with
//! `PARTIAL_REF` (dedupe: the pcluster holds more than this extent). ZSTD follows the kernel's
//! streaming decoder: the frame must yield `m_llen` bytes before it ends; what would follow is not
//! decoded; DEFLATE likewise (`z_erofs_deflate_decompress` inflates until the output is full),
//! except that the kernel also needs a whole extent's stream to end in the page where its output
//! completes, which fails a stream whose last page holds only its end (issue 29; the rule and why
//! are `sealfs_format::z_erofs_deflate_end_ok`): this reader reads such a stream, which the builder
//! never writes and `mkfs.erofs` 1.9 writes with `-z libdeflate -E 48bit`.
//! MicroLZMA follows `z_erofs_lzma_decompress`: the compressed size is exactly the stream after
//! the padding, and a whole extent is decoded with its length *exact* (the stream must end there,
//! as far as an LZMA stream without end marker shows it), a prefix or a `PARTIAL_REF` head with
//! the length as a bound (see [`crate::microlzma`]). LZ4 pclusters longer than the LZ4 record's
//! `max_pclusterblks` are corrupted (the
//! kernel sizes its buffers from it).
//!
//! Every length is bounded before anything is allocated: pclusters by 1 MiB and extents by 12 MiB
//! (checked by the map), so a crafted image cannot make the reader allocate more than that per
//! decode. Errors name the inode, the pcluster's block and its head lcluster.
//!
//! # The cluster cache
//!
//! Decoded extents (or decoded prefixes of them) are kept in a least-recently-used cache bounded by
//! bytes
//! ([`crate::Options::cluster_cache_bytes`], default [`DEFAULT_CLUSTER_CACHE_BYTES`]; 0 turns it
//! off). The key is what determines the decoded bytes: the pcluster's image position and length,
//! the algorithm, the decoded length (and, for interlaced pclusters, where the extent starts in
//! its block); so extents of different inodes sharing a pcluster share an entry. The bound counts
//! decoded bytes and is never exceeded: an entry larger than the bound is not cached, and
//! eviction makes room before an insertion. Repeated reads of the same region are served from the
//! cache without reading or decoding again. An entry serves every read that ends within it; a
//! read past a cached prefix is a miss that decodes the whole extent and replaces the entry. A
//! miss decodes the whole extent only when the rest is likely to be read: the read starts at the
//! extent's start (streaming), or the extent was missed before; a random read landing inside an
//! extent decodes and caches only the prefix it needs. So when the working set is larger than the
//! cache, a miss costs what a read with the cache off costs, and the cache holds more, shorter
//! entries. Buffers of evicted and uncached extents are reused by later decodes (a few, of at most
//! 1 MiB each, outside the bound), so a miss does not pay for a fresh zeroed allocation either.
//! With [`crate::Options::keep_passed_extents`] off (a FUSE mount, where the kernel's page cache
//! keeps what was read), a file's extent that a read takes to its end is not cached, or is dropped
//! from the cache (also when the read of its head completes after the read of its rest, as
//! concurrent requests of one stream do): streaming reads leave the cache empty, and its room goes
//! to what random reads come back to, the packed inode's extents above all.
//! A miss on an extent another read is decoding (at least as much of it as this read needs) waits
//! for that decode instead of repeating it: two FUSE threads serving neighbouring requests both
//! need the extent across their border, and decoded it twice before (1.8 decoded bytes per byte
//! served by a sequential read); if that decode fails, the waiting read decodes the extent itself.
//! Every decoded extent (or prefix) a read needs is one lookup,
//! counted as a hit or a miss in [`crate::StatsSnapshot`], with evictions, the compressed bytes
//! read and the decompressed bytes produced on misses, and the bytes held (now and at most).

use crate::cache::{Lru, Outcome};
use crate::error::{Error, Location, Result};
use crate::image::Image;
use crate::inode::Inode;
use crate::lz4::{lz4_decode, lz4_decode_to};
use crate::stats::Stats;
use crate::superblock::Z_EROFS_LZMA_MAX_DICT_SIZE;
use crate::zmap::{Compression, ZExtent};
use sealfs_format::{
    EROFS_FEATURE_INCOMPAT_ZERO_PADDING, Z_EROFS_COMPRESSION_DEFLATE, Z_EROFS_COMPRESSION_LZ4,
    Z_EROFS_COMPRESSION_LZMA, Z_EROFS_COMPRESSION_ZSTD,
};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Default bound of the cluster cache: 64 MiB of decoded data.
pub const DEFAULT_CLUSTER_CACHE_BYTES: usize = 64 << 20;

/// What determines an extent's decoded bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ClusterKey {
    physical: u64,
    plen: u64,
    length: u64,
    algorithm: Compression,
    /// `blkoff(m_la)` for interlaced pclusters, else 0.
    shift: u64,
    partial_ref: bool,
}

/// A decode one read is doing: how many bytes it decodes, and its bytes once done (`None` if it
/// failed).
struct Decoding {
    want: u64,
    outcome: Outcome<Arc<Vec<u8>>>,
}

/// What a read that missed the cache does.
enum Miss<'a> {
    /// Another read cached enough of the extent meanwhile.
    Cached(Arc<Vec<u8>>),
    /// Another read is decoding enough of it: wait for that.
    Wait(Arc<Decoding>),
    /// Decode it here.
    Decode(DecodeClaim<'a>),
}

/// A decode this read does: the result goes to the reads waiting for it, on [`Self::publish`] or,
/// as a failure, on drop.
struct DecodeClaim<'a> {
    cache: &'a ClusterCache,
    key: ClusterKey,
    decoding: Arc<Decoding>,
}

impl DecodeClaim<'_> {
    fn resolve(&self, v: Option<Arc<Vec<u8>>>) {
        let mut inflight = self
            .cache
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if inflight
            .get(&self.key)
            .is_some_and(|d| Arc::ptr_eq(d, &self.decoding))
        {
            inflight.remove(&self.key);
        }
        drop(inflight);
        self.decoding.outcome.resolve(v);
    }

    /// Hands the decoded bytes (cached first) to the reads waiting for them.
    fn publish(self, v: Arc<Vec<u8>>) {
        self.resolve(Some(v));
    }
}

impl Drop for DecodeClaim<'_> {
    fn drop(&mut self) {
        self.resolve(None);
    }
}

/// The bounded cache of decoded extents.
pub(crate) struct ClusterCache {
    lru: Mutex<Lru<ClusterKey, Arc<Vec<u8>>>>,
    /// Extents being decoded: a read that needs one waits for it rather than decoding it again
    /// (two FUSE threads serving neighbouring requests both need the extent across their border).
    inflight: Mutex<HashMap<ClusterKey, Arc<Decoding>>>,
    max_bytes: usize,
    /// [`crate::Options::keep_passed_extents`].
    pub(crate) keep_passed: bool,
    /// Without `keep_passed`: the last extents a read took to their end without caching them.
    /// Concurrent requests of one stream complete out of order: when the read of an extent's head
    /// comes after the read of its rest, it does not cache what the stream has already passed.
    passed: Mutex<std::collections::VecDeque<ClusterKey>>,
    /// Buffers of evicted or uncached extents, reused by the next decodes: a decode then writes
    /// into memory already mapped, instead of a fresh allocation that is zeroed and faulted in
    /// (what made a miss with the cache on cost more than one with it off). At most
    /// [`SPARE_BUFFERS`] buffers of at most [`SPARE_MAX_BYTES`] each, outside the cache's bound.
    spare: Mutex<Vec<Vec<u8>>>,
}

/// Buffers kept for reuse.
const SPARE_BUFFERS: usize = 8;
/// Largest buffer kept for reuse.
const SPARE_MAX_BYTES: usize = 1 << 20;

impl ClusterCache {
    /// A cache holding at most `max_bytes` decoded bytes (0: nothing is cached).
    pub(crate) fn new(max_bytes: usize, keep_passed: bool) -> ClusterCache {
        let cap = if max_bytes == 0 { 0 } else { usize::MAX };
        ClusterCache {
            lru: Mutex::new(Lru::with_bounds(cap, max_bytes)),
            inflight: Mutex::new(HashMap::new()),
            max_bytes,
            keep_passed,
            passed: Mutex::new(std::collections::VecDeque::new()),
            spare: Mutex::new(Vec::new()),
        }
    }

    fn get(&self, key: ClusterKey) -> Option<Arc<Vec<u8>>> {
        self.lru.lock().unwrap_or_else(|p| p.into_inner()).get(key)
    }

    /// After a miss: the bytes if another read cached at least `need` of them meanwhile, else
    /// whether to decode `want` bytes here or wait for the read decoding at least `need`.
    fn claim(&self, key: ClusterKey, need: u64, want: u64) -> Miss<'_> {
        let mut inflight = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = inflight.get(&key) {
            if d.want >= need {
                return Miss::Wait(d.clone());
            }
        } else if let Some(v) = self.get(key).filter(|v| v.len() as u64 >= need) {
            // Decoded and cached between the miss and now.
            return Miss::Cached(v);
        }
        let d = Arc::new(Decoding {
            want,
            outcome: Outcome::default(),
        });
        inflight.insert(key, d.clone());
        Miss::Decode(DecodeClaim {
            cache: self,
            key,
            decoding: d,
        })
    }

    /// Notes that a read took the extent under `key` to its end.
    fn passed(&self, key: ClusterKey) {
        /// Extents remembered: a few per stream, for the requests in flight.
        const PASSED: usize = 64;
        let mut passed = self.passed.lock().unwrap_or_else(|p| p.into_inner());
        if passed.len() == PASSED {
            passed.pop_front();
        }
        passed.push_back(key);
    }

    /// Whether a read already took the extent under `key` to its end (and forgets that it did).
    fn was_passed(&self, key: ClusterKey) -> bool {
        let mut passed = self.passed.lock().unwrap_or_else(|p| p.into_inner());
        match passed.iter().position(|k| *k == key) {
            Some(i) => {
                passed.remove(i);
                true
            }
            None => false,
        }
    }

    /// Drops the entry under `key` (a read has passed it), its buffer kept for reuse.
    fn forget(&self, key: ClusterKey, stats: &Stats) {
        let dropped = {
            let mut lru = self.lru.lock().unwrap_or_else(|p| p.into_inner());
            let v = lru.remove(key);
            stats.set_cluster_cache(0, lru.bytes() as u64);
            v
        };
        if let Some(v) = dropped {
            self.recycle(v);
        }
    }

    fn insert(&self, key: ClusterKey, val: Arc<Vec<u8>>, stats: &Stats) {
        let mut dropped = Vec::new();
        {
            let mut lru = self.lru.lock().unwrap_or_else(|p| p.into_inner());
            let evicted = lru.insert_with(key, val, |v| dropped.push(v));
            stats.set_cluster_cache(evicted as u64, lru.bytes() as u64);
        }
        for v in dropped {
            self.recycle(v);
        }
    }

    /// A buffer for `n` decoded bytes: a spare one of a capacity from `n` to `2n` (so an entry
    /// does not hold much more memory than it weighs), or a new one.
    fn take_buffer(&self, n: usize) -> Vec<u8> {
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        match spare
            .iter()
            .position(|b| (n..=n.saturating_mul(2)).contains(&b.capacity()))
        {
            Some(i) => spare.swap_remove(i),
            None => Vec::with_capacity(n),
        }
    }

    /// Keeps the buffer of a decoded extent nobody else holds, for [`Self::take_buffer`].
    pub(crate) fn recycle(&self, v: Arc<Vec<u8>>) {
        let Ok(v) = Arc::try_unwrap(v) else { return };
        if v.capacity() > SPARE_MAX_BYTES || v.capacity() == 0 {
            return;
        }
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() == SPARE_BUFFERS {
            // Keep the larger buffers: they save the most.
            let (i, min) = spare
                .iter()
                .enumerate()
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, b)| (i, b.capacity()))
                .unwrap_or((0, 0));
            if min >= v.capacity() {
                return;
            }
            spare.swap_remove(i);
        }
        spare.push(v);
    }

    /// Entries and bytes held.
    pub(crate) fn usage(&self) -> (usize, usize) {
        let lru = self.lru.lock().unwrap_or_else(|p| p.into_inner());
        (lru.len(), lru.bytes())
    }
}

/// One decode: a pcluster's bytes and what they must become.
struct DecodeReq<'a> {
    /// The whole pcluster.
    input: &'a [u8],
    /// Bytes of `input` in its first block: where zero padding is looked for.
    first_block: usize,
    /// The extent's decoded length.
    length: usize,
    /// Decoded bytes to produce: the extent's first `want <= length` bytes (a prefix is enough
    /// for a read that ends before the extent does).
    want: usize,
    /// The stream may decode to more than `length` (`PARTIAL_REF`).
    partial: bool,
    /// `ZERO_PADDING` is set.
    zero_padding: bool,
    /// Largest zstd window, log2.
    zstd_window_log: u32,
    /// The LZMA dictionary size (the superblock's LZMA record).
    lzma_dict_size: u32,
    /// For errors: the inode and the pcluster's block.
    at: Location,
    /// For errors: the extent's head lcluster.
    head_lcn: u64,
}

impl DecodeReq<'_> {
    fn corrupted(&self, what: String) -> Error {
        Error::corrupted(
            format!("{what} (pcluster of lcluster {})", self.head_lcn),
            self.at,
        )
    }
}

/// Decodes `req.want` bytes into the given buffer (a recycled one, any length and contents).
type DecodeFn = fn(&DecodeReq<'_>, Vec<u8>) -> Result<Vec<u8>>;

/// Decodes `req.want` bytes into `out` (exactly that long, any contents): straight into the
/// buffer of the read that needs them (a FUSE reply's), with no copy after the decoder.
type DecodeToFn = fn(&DecodeReq<'_>, &mut [u8]) -> Result<()>;

/// A decoder of one algorithm id.
struct Decompressor {
    name: &'static str,
    decode: Option<DecodeFn>,
    decode_to: Option<DecodeToFn>,
}

/// Decoders by on-disk algorithm id (`Z_EROFS_COMPRESSION_*`).
static DECOMPRESSORS: [Decompressor; 4] = [
    Decompressor {
        name: "LZ4",
        decode: Some(decode_lz4_into),
        decode_to: Some(decode_lz4_to),
    },
    Decompressor {
        name: "LZMA",
        decode: Some(decode_lzma_into),
        decode_to: Some(decode_lzma_to),
    },
    Decompressor {
        name: "DEFLATE",
        decode: Some(decode_deflate_into),
        decode_to: Some(decode_deflate_to),
    },
    Decompressor {
        name: "ZSTD",
        decode: Some(decode_zstd_into),
        decode_to: Some(decode_zstd_to),
    },
];

// The table's order is the ids'.
const _: () = assert!(
    Z_EROFS_COMPRESSION_LZ4 == 0
        && Z_EROFS_COMPRESSION_LZMA == 1
        && Z_EROFS_COMPRESSION_DEFLATE == 2
        && Z_EROFS_COMPRESSION_ZSTD == 3
);

/// `z_erofs_fixup_insize`: the stream after the zero padding of the first block.
fn skip_padding<'a>(req: &DecodeReq<'a>) -> Result<&'a [u8]> {
    let window = &req.input[..req.first_block.min(req.input.len())];
    match window.iter().position(|&b| b != 0) {
        Some(n) => Ok(&req.input[n..]),
        None => Err(req.corrupted(format!(
            "no compressed data: the first {} bytes of the pcluster are zero padding",
            window.len()
        ))),
    }
}

/// LZ4 block decoding that stops once `out` is full (the kernel's `LZ4_decompress_safe_partial`
/// with `targetOutputSize == dstCapacity`): returns the bytes written, fewer than `out.len()` only
/// if the stream ends first. Bytes after the point where `out` is full are not looked at, so a
/// stream followed by padding or by more data decodes. Every read and write is bounds-checked.
fn lz4_decode_partial(src: &[u8], out: &mut [u8]) -> std::result::Result<usize, &'static str> {
    /// An LZ4 length continuation: bytes of 255 and a final byte below 255.
    fn more(src: &[u8], ip: &mut usize, mut n: usize) -> std::result::Result<usize, &'static str> {
        loop {
            let b = *src
                .get(*ip)
                .ok_or("length runs past the end of the input")?;
            *ip += 1;
            n = n.saturating_add(b as usize);
            if b != 255 {
                return Ok(n);
            }
        }
    }
    let (mut ip, mut op) = (0usize, 0usize);
    while op < out.len() {
        let token = *src.get(ip).ok_or("no sequence where one was expected")?;
        ip += 1;
        let mut lit = (token >> 4) as usize;
        if lit == 15 {
            lit = more(src, &mut ip, lit)?;
        }
        if lit <= 16 && src.len() - ip >= 16 && out.len() - op >= 16 {
            // Fast path, far from both ends: 16 bytes at once; those after the literals are
            // overwritten by what follows (or lie past the bytes returned).
            out[op..op + 16].copy_from_slice(&src[ip..ip + 16]);
            op += lit;
        } else {
            let n = lit.min(out.len() - op);
            let literal = src
                .get(ip..ip.saturating_add(n))
                .ok_or("literals run past the end of the input")?;
            out[op..op + n].copy_from_slice(literal);
            op += n;
        }
        if op == out.len() {
            break;
        }
        ip += lit;
        if ip >= src.len() {
            // The last sequence has no match: the stream ends here.
            if ip > src.len() {
                return Err("literals run past the end of the input");
            }
            break;
        }
        let offset = src
            .get(ip..ip + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or("match offset runs past the end of the input")?;
        ip += 2;
        if offset == 0 || offset > op {
            return Err("match offset points before the start of the output");
        }
        let mut mlen = (token & 15) as usize + 4;
        if mlen == 19 {
            mlen = more(src, &mut ip, mlen)?;
        }
        let from = op - offset;
        if offset >= 16 && (out.len() - op).saturating_sub(16) >= mlen {
            // Fast path: 16-byte chunks, each from bytes already written; the last one may write
            // up to 15 bytes past the match, overwritten by what follows.
            let mut k = 0;
            while k < mlen {
                out.copy_within(from + k..from + k + 16, op + k);
                k += 16;
            }
            op += mlen;
            continue;
        }
        let n = mlen.min(out.len() - op);
        // An overlapping match repeats the `offset` bytes before it: copy them in chunks that
        // double, each one from bytes already written (a whole number of periods at every step).
        let mut done = 0;
        while done < n {
            let c = (offset + done).min(n - done);
            out.copy_within(from..from + c, op + done);
            done += c;
        }
        op += n;
    }
    Ok(op)
}

thread_local! {
    /// The buffer of this thread's last pcluster read, for its next one.
    static PCLUSTER: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Where a decode puts its bytes.
enum Decoded<'a> {
    /// A buffer of the cluster cache's (a recycled one, any length and contents), replaced by
    /// one holding exactly the bytes decoded.
    Buffer(&'a mut Vec<u8>),
    /// The buffer of the read that needs them, exactly as long as the bytes decoded.
    Slice(&'a mut [u8]),
}

/// A buffer for one pcluster (at most 1 MiB), taken from this thread's and given back on drop, so
/// a decode neither allocates nor zeroes its input (the block read overwrites every byte).
struct PclusterBuf(Vec<u8>);

impl PclusterBuf {
    fn take(n: usize) -> PclusterBuf {
        PclusterBuf(sized(PCLUSTER.take(), n))
    }
}

impl std::ops::Deref for PclusterBuf {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl std::ops::DerefMut for PclusterBuf {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Drop for PclusterBuf {
    fn drop(&mut self) {
        PCLUSTER.set(std::mem::take(&mut self.0));
    }
}

/// `buf` with exactly `n` initialised bytes: no zeroing of the bytes it already has (a decoder
/// overwrites all `n` before it succeeds).
fn sized(mut buf: Vec<u8>, n: usize) -> Vec<u8> {
    if buf.len() >= n {
        buf.truncate(n);
    } else {
        buf.resize(n, 0);
    }
    buf
}

#[cfg(test)]
fn decode_lz4(req: &DecodeReq<'_>) -> Result<Vec<u8>> {
    decode_lz4_into(req, Vec::new())
}

/// Whether an LZ4 decode needs the kernel's partial decode (see [`decode_lz4_to`]) rather than
/// the whole right-aligned stream decoded to exactly the extent.
fn lz4_partial(req: &DecodeReq<'_>) -> bool {
    req.want < req.length || !req.zero_padding || req.partial
}

fn decode_lz4_into(req: &DecodeReq<'_>, mut buf: Vec<u8>) -> Result<Vec<u8>> {
    if lz4_partial(req) {
        let mut out = sized(buf, req.want);
        decode_lz4_to(req, &mut out)?;
        return Ok(out);
    }
    // The usual case: the whole right-aligned stream is exactly the extent, decoded into the
    // buffer's spare capacity (never zeroed first).
    let src = skip_padding(req)?;
    let n = lz4_decode(src, &mut buf, req.length).map_err(|e| lz4_whole_error(req, src, e))?;
    lz4_whole_length(req, src, n)?;
    Ok(buf)
}

fn decode_lz4_to(req: &DecodeReq<'_>, out: &mut [u8]) -> Result<()> {
    if lz4_partial(req) {
        // The kernel's partial decode, stopping once `want` bytes are out: for a prefix; for
        // legacy images (no ZERO_PADDING: the stream is left-aligned, whatever follows it in the
        // pcluster is not LZ4, and it may hold more than the extent); for a partial reference
        // (dedupe), which also decodes to more.
        let src = if req.zero_padding {
            skip_padding(req)?
        } else {
            req.input
        };
        return match lz4_decode_partial(src, out) {
            Ok(n) if n == req.want => Ok(()),
            Ok(n) => Err(req.corrupted(format!(
                "LZ4 data of {} bytes ends after {n} of the extent's {} bytes",
                src.len(),
                req.length
            ))),
            Err(e) => Err(req.corrupted(format!(
                "LZ4 data of {} bytes does not decode: {e}",
                src.len()
            ))),
        };
    }
    let src = skip_padding(req)?;
    let n = lz4_decode_to(src, out).map_err(|e| lz4_whole_error(req, src, e))?;
    lz4_whole_length(req, src, n)
}

fn lz4_whole_error(req: &DecodeReq<'_>, src: &[u8], e: String) -> Error {
    req.corrupted(format!(
        "LZ4 data of {} bytes does not decode to the extent's {} bytes: {e}",
        src.len(),
        req.length
    ))
}

fn lz4_whole_length(req: &DecodeReq<'_>, src: &[u8], n: usize) -> Result<()> {
    if n == req.length {
        return Ok(());
    }
    Err(req.corrupted(format!(
        "LZ4 data of {} bytes decodes to {n} bytes, the extent has {}",
        src.len(),
        req.length
    )))
}

thread_local! {
    /// A zstd decoding context per thread, reused (its session is reset for every frame).
    static ZSTD_DCTX: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
}

#[cfg(test)]
fn decode_zstd(req: &DecodeReq<'_>) -> Result<Vec<u8>> {
    decode_zstd_into(req, Vec::new())
}

fn decode_zstd_into(req: &DecodeReq<'_>, buf: Vec<u8>) -> Result<Vec<u8>> {
    let mut out = sized(buf, req.want);
    decode_zstd_to(req, &mut out)?;
    Ok(out)
}

fn decode_zstd_to(req: &DecodeReq<'_>, out: &mut [u8]) -> Result<()> {
    use zstd::stream::raw::{DParameter, Decoder, InBuffer, Operation, OutBuffer};
    let src = skip_padding(req)?;
    let zerr = |e: std::io::Error| req.corrupted(format!("ZSTD data does not decode: {e}"));
    ZSTD_DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let dctx = slot.get_or_insert_with(zstd::zstd_safe::DCtx::create);
        let mut dec = Decoder::with_context(dctx);
        dec.set_parameter(DParameter::WindowLogMax(req.zstd_window_log))
            .map_err(zerr)?;
        let mut input = InBuffer::around(src);
        let mut output = OutBuffer::around(out);
        while output.pos() < req.want {
            let before = (input.pos(), output.pos());
            let hint = dec.run(&mut input, &mut output).map_err(zerr)?;
            if output.pos() == req.want {
                break;
            }
            if hint == 0 {
                return Err(req.corrupted(format!(
                    "ZSTD frame ends after {} of the extent's {} bytes",
                    output.pos(),
                    req.length
                )));
            }
            if (input.pos(), output.pos()) == before {
                return Err(req.corrupted(format!(
                    "ZSTD data of {} bytes is truncated after {} of the extent's {} bytes",
                    src.len(),
                    output.pos(),
                    req.length
                )));
            }
        }
        Ok(())
    })
}

#[cfg(test)]
fn decode_lzma(req: &DecodeReq<'_>) -> Result<Vec<u8>> {
    decode_lzma_into(req, Vec::new())
}

/// MicroLZMA (`z_erofs_lzma_decompress`): the right-aligned stream after the zero padding is
/// exactly the compressed data; a whole extent must decode to exactly its length, a prefix (or a
/// `PARTIAL_REF` head) stops once it is out.
fn decode_lzma_into(req: &DecodeReq<'_>, buf: Vec<u8>) -> Result<Vec<u8>> {
    let mut out = sized(buf, req.want);
    decode_lzma_to(req, &mut out)?;
    Ok(out)
}

fn decode_lzma_to(req: &DecodeReq<'_>, out: &mut [u8]) -> Result<()> {
    let src = skip_padding(req)?;
    let exact = req.want == req.length && !req.partial;
    crate::microlzma::decode(src, out, exact, req.lzma_dict_size).map_err(|e| {
        req.corrupted(format!(
            "MicroLZMA data of {} bytes does not decode to the extent's {} bytes{}: {e}",
            src.len(),
            req.length,
            if req.want < req.length {
                format!(" (first {})", req.want)
            } else {
                String::new()
            }
        ))
    })?;
    Ok(())
}

#[cfg(test)]
fn decode_deflate(req: &DecodeReq<'_>) -> Result<Vec<u8>> {
    decode_deflate_into(req, Vec::new())
}

/// Raw DEFLATE (`z_erofs_deflate_decompress`, zlib's inflate with a 32 KiB window): the
/// right-aligned stream after the zero padding must yield the extent's bytes before it ends; like
/// ZSTD, what would follow them is not decoded.
fn decode_deflate_into(req: &DecodeReq<'_>, buf: Vec<u8>) -> Result<Vec<u8>> {
    let mut out = sized(buf, req.want);
    decode_deflate_to(req, &mut out)?;
    Ok(out)
}

fn decode_deflate_to(req: &DecodeReq<'_>, out: &mut [u8]) -> Result<()> {
    use flate2::{Decompress, FlushDecompress, Status};
    let src = skip_padding(req)?;
    let mut dec = Decompress::new(false);
    loop {
        let (i, o) = (dec.total_in() as usize, dec.total_out() as usize);
        if o == req.want {
            return Ok(());
        }
        let status = dec
            .decompress(&src[i..], &mut out[o..], FlushDecompress::None)
            .map_err(|e| req.corrupted(format!("DEFLATE data does not decode: {e}")))?;
        let progress = (dec.total_in() as usize, dec.total_out() as usize) != (i, o);
        if dec.total_out() as usize == req.want {
            return Ok(());
        }
        if status == Status::StreamEnd || !progress {
            return Err(req.corrupted(format!(
                "DEFLATE data of {} bytes ends after {} of the extent's {} bytes",
                src.len(),
                dec.total_out(),
                req.length
            )));
        }
    }
}

/// The uncompressed forms: shifted and interlaced (`z_erofs_transform_plain`).
fn transform_plain(req: &DecodeReq<'_>, interlaced: Option<usize>) -> Result<Vec<u8>> {
    let mut out = vec![0u8; req.want];
    transform_plain_to(req, interlaced, &mut out)?;
    Ok(out)
}

/// [`transform_plain`] into `out` (`req.want` bytes).
fn transform_plain_to(
    req: &DecodeReq<'_>,
    interlaced: Option<usize>,
    out: &mut [u8],
) -> Result<()> {
    let input = req.input;
    if req.length > input.len() {
        return Err(req.corrupted(format!(
            "uncompressed extent of {} bytes in a pcluster of {}",
            req.length,
            input.len()
        )));
    }
    let Some(cut) = interlaced else {
        out.copy_from_slice(&input[..req.want]);
        return Ok(());
    };
    // The first `cut` bytes of the extent are the pcluster's last `cut` bytes; the rest start at
    // its byte 0.
    let Some(start) = input.len().checked_sub(cut) else {
        return Err(req.corrupted(format!(
            "interlaced pcluster of {} bytes shorter than the {cut} bytes of its first part",
            input.len()
        )));
    };
    let head = cut.min(req.want);
    out[..head].copy_from_slice(&input[start..start + head]);
    out[head..].copy_from_slice(&input[..req.want - head]);
    Ok(())
}

impl Image {
    /// Decoded bytes of extent `z` of `inode`, at least its first `need` bytes (all `z.length` of
    /// them, or a prefix), for a read of the extent's bytes `from..need`: from the cluster cache,
    /// or read and decoded (and then cached). Unless `keep`: not cached, and dropped from the cache
    /// if it was there (the read takes it to its end, and nothing after it will need it).
    ///
    /// What a miss decodes: the whole extent when the cache is on and either the read starts at
    /// the extent's start (streaming reads go on to the rest of it) or the cache already holds a
    /// shorter prefix of it (the second miss on it); otherwise only the prefix the read needs, as
    /// the kernel's partial decode does. So random reads that land inside large extents neither
    /// decode nor cache the bytes after them, with the cache on or off.
    pub(crate) fn decoded_extent(
        &self,
        inode: &Inode,
        z: &ZExtent,
        from: u64,
        need: u64,
        keep: bool,
    ) -> Result<Arc<Vec<u8>>> {
        let key = self.cluster_key(z);
        let stats = self.blocks.stats();
        let need = need.min(z.length);
        let cached = self.clusters.get(key);
        if let Some(v) = &cached {
            if v.len() as u64 >= need {
                stats.add_cluster_hit();
                if !keep {
                    self.clusters.forget(key, stats);
                }
                return Ok(v.clone());
            }
        }
        let want = if self.clusters.max_bytes > 0 && (from == 0 || cached.is_some()) {
            z.length
        } else {
            need
        };
        // (Another read decoded it meanwhile, and cached it before handing it over.)
        let passed = |v: Arc<Vec<u8>>| {
            if !keep {
                self.clusters.forget(key, stats);
            }
            v
        };
        let claim = match self.clusters.claim(key, need, want) {
            Miss::Cached(v) => {
                stats.add_cluster_hit();
                return Ok(passed(v));
            }
            Miss::Wait(d) => match d.outcome.wait() {
                Some(v) if v.len() as u64 >= need => {
                    stats.add_cluster_hit();
                    return Ok(passed(v));
                }
                // That decode failed: this read decodes the extent itself, so that it fails only
                // on what it read.
                _ => None,
            },
            Miss::Decode(claim) => Some(claim),
        };
        stats.add_cluster_miss();
        let mut out = self.clusters.take_buffer(want as usize);
        self.decode_pcluster(inode, z, want, Decoded::Buffer(&mut out))?;
        debug_assert_eq!(out.len() as u64, want);
        let out = Arc::new(out);
        if !keep {
            if cached.is_some() {
                self.clusters.forget(key, stats);
            }
            self.clusters.passed(key);
        } else if self.clusters.keep_passed || !self.clusters.was_passed(key) {
            self.clusters.insert(key, out.clone(), stats);
        }
        if let Some(claim) = claim {
            claim.publish(out.clone());
        }
        Ok(out)
    }

    /// The whole extent `z` of `inode` (`dst` is `z.length` bytes) for a read that takes all of
    /// it and keeps none of it (the cache does not keep passed extents): decoded **straight into
    /// `dst`** (a FUSE reply's buffer), without a buffer of its own and a copy from it; only an
    /// extent the cluster cache holds whole is copied from there (and dropped from it, passed).
    /// The pcluster is read through the block layer like any (so checked before it is decoded),
    /// and `dst` holds nothing of the extent when this fails.
    ///
    /// It does not register a decode for other reads to wait for, nor look for one to wait for:
    /// an extent read whole is inside one request, which no other request shares (the requests
    /// of a stream meet inside the extents across their borders, which [`Self::decoded_extent`]
    /// decodes, caches and shares).
    pub(crate) fn decode_extent_to(
        &self,
        inode: &Inode,
        z: &ZExtent,
        dst: &mut [u8],
    ) -> Result<()> {
        debug_assert_eq!(dst.len() as u64, z.length);
        let key = self.cluster_key(z);
        let stats = self.blocks.stats();
        let cached = self.clusters.get(key);
        if let Some(v) = cached.as_ref().filter(|v| v.len() == dst.len()) {
            stats.add_cluster_hit();
            dst.copy_from_slice(v);
            drop(cached);
            self.clusters.forget(key, stats);
            return Ok(());
        }
        stats.add_cluster_miss();
        self.decode_pcluster(inode, z, z.length, Decoded::Slice(dst))?;
        if cached.is_some() {
            self.clusters.forget(key, stats);
        }
        self.clusters.passed(key);
        Ok(())
    }

    /// `dst.len()` bytes of uncompressed data at image byte `physical`, block by block through the
    /// cluster cache: each block is what a PLAIN extent of one block at its address decodes to, so
    /// it is cached under that extent's key (a compressed inode's prefix of such an extent, cached
    /// there by a random read, is not the block: the block is read and replaces it). A block not
    /// cached is read (checked by the block source as it is read) and then cached. A range whose
    /// last block would run past the image's end is read uncached (and left to the bounds check).
    pub(crate) fn read_flat_cached(
        &self,
        physical: u64,
        dst: &mut [u8],
        at: Location,
    ) -> Result<()> {
        let bs = self.block_size();
        let end = physical.saturating_add(dst.len() as u64);
        if self.clusters.max_bytes == 0 || end.next_multiple_of(bs) > self.blocks.len() {
            return self.blocks.read_bulk(physical, dst, at);
        }
        let stats = self.blocks.stats();
        let mut pos = physical;
        while pos < end {
            let block = pos - pos % bs;
            let key = ClusterKey {
                physical: block,
                plen: bs,
                length: bs,
                algorithm: Compression::Plain,
                shift: 0,
                partial_ref: false,
            };
            // A compressed inode's PLAIN extent under the same key may be cached as a prefix
            // (a random read's partial decode): only the whole block serves.
            let bytes = match self.clusters.get(key).filter(|v| v.len() as u64 == bs) {
                Some(v) => {
                    stats.add_cluster_hit();
                    v
                }
                None => {
                    stats.add_cluster_miss();
                    let mut v = self.clusters.take_buffer(bs as usize);
                    v.resize(bs as usize, 0);
                    self.blocks.read_bulk(block, &mut v, at)?;
                    let v = Arc::new(v);
                    self.clusters.insert(key, v.clone(), stats);
                    v
                }
            };
            let from = (pos - block) as usize;
            let n = (bs - pos % bs).min(end - pos) as usize;
            let done = (pos - physical) as usize;
            dst[done..done + n].copy_from_slice(&bytes[from..from + n]);
            pos += n as u64;
        }
        Ok(())
    }

    /// What determines the decoded bytes of extent `z`.
    fn cluster_key(&self, z: &ZExtent) -> ClusterKey {
        let interlaced = z.algorithm == Compression::Interlaced;
        ClusterKey {
            physical: z.physical,
            plen: z.plen,
            length: z.length,
            algorithm: z.algorithm,
            shift: if interlaced {
                z.logical % self.block_size()
            } else {
                0
            },
            partial_ref: z.partial_ref,
        }
    }

    /// Reads the pcluster of extent `z` (verified by the block source as it is read) and decodes
    /// its first `want` bytes into `out`; counts the bytes read and produced, and the decoder's
    /// time.
    fn decode_pcluster(
        &self,
        inode: &Inode,
        z: &ZExtent,
        want: u64,
        out: Decoded<'_>,
    ) -> Result<()> {
        let stats = self.blocks.stats();
        let bits = self.sb.blkszbits;
        let bsz = self.block_size();
        let at = Location::nid(inode.nid)
            .with_offset(z.physical)
            .with_block(z.physical >> bits);
        // Lengths were bounded by the map: 1 MiB encoded, 12 MiB decoded.
        let (plen, length) = (z.plen as usize, z.length as usize);
        let mut input = PclusterBuf::take(plen);
        if z.inline {
            self.meta_read(z.physical, &mut input, at)?;
        } else {
            self.blocks.read_bulk(z.physical, &mut input, at)?;
        }
        stats.add_compressed_read(z.plen);
        let req = DecodeReq {
            input: &input,
            first_block: (bsz - z.physical % bsz) as usize,
            length,
            want: want as usize,
            partial: z.partial_ref,
            zero_padding: self.sb.has_incompat(EROFS_FEATURE_INCOMPAT_ZERO_PADDING),
            zstd_window_log: self.sb.compr.zstd_windowlog.unwrap_or(10) as u32 + 10,
            lzma_dict_size: self
                .sb
                .compr
                .lzma_dict_size
                .unwrap_or(Z_EROFS_LZMA_MAX_DICT_SIZE),
            at,
            head_lcn: z.head_lcn,
        };
        let started = std::time::Instant::now();
        let plain = match z.algorithm {
            Compression::Plain => Some(None),
            Compression::Interlaced => Some(Some((bsz - z.logical % bsz) as usize)),
            _ => None,
        };
        match (plain, out) {
            (Some(cut), Decoded::Buffer(buf)) => *buf = transform_plain(&req, cut)?,
            (Some(cut), Decoded::Slice(dst)) => transform_plain_to(&req, cut, dst)?,
            (None, out) => {
                let alg = z.algorithm;
                let id = alg.id().unwrap_or(u8::MAX) as usize;
                let Some(dec) = DECOMPRESSORS.get(id) else {
                    return Err(Error::unsupported(format!("algorithm {alg:?}"), at));
                };
                let (Some(decode), Some(decode_to)) = (dec.decode, dec.decode_to) else {
                    return Err(Error::unsupported(
                        format!(
                            "{} decompression (pcluster of lcluster {})",
                            dec.name, z.head_lcn
                        ),
                        at,
                    ));
                };
                if alg == Compression::Lz4 && !z.inline {
                    let blocks = z.plen >> bits;
                    let max = self.sb.compr.lz4_max_pclusterblks as u64;
                    if blocks > max {
                        return Err(req.corrupted(format!(
                            "LZ4 pcluster of {blocks} blocks, more than max_pclusterblks {max}"
                        )));
                    }
                }
                match out {
                    Decoded::Buffer(buf) => *buf = decode(&req, std::mem::take(buf))?,
                    Decoded::Slice(dst) => decode_to(&req, dst)?,
                }
            }
        }
        stats.add_decompress_time(started.elapsed());
        stats.add_decompressed(want);
        Ok(())
    }

    /// Entries and bytes the cluster cache holds now.
    pub fn cluster_cache_usage(&self) -> (usize, usize) {
        self.clusters.usage()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(input: &[u8], length: usize) -> DecodeReq<'_> {
        DecodeReq {
            input,
            first_block: 4096.min(input.len()),
            length,
            want: length,
            partial: false,
            zero_padding: true,
            zstd_window_log: 20,
            lzma_dict_size: 1 << 16,
            at: Location::nid(1).with_block(5),
            head_lcn: 3,
        }
    }

    fn padded(stream: &[u8], plen: usize) -> Vec<u8> {
        let mut v = vec![0u8; plen - stream.len()];
        v.extend_from_slice(stream);
        v
    }

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"the quick brown fox jumps over the lazy dog "[i % 44] ^ (i / 997) as u8)
            .collect()
    }

    #[test]
    fn lz4_right_aligned_decodes_exactly() {
        let data = text(10000);
        let stream = lz4_flex::block::compress(&data);
        let input = padded(&stream, stream.len().next_multiple_of(4096));
        assert_eq!(decode_lz4(&req(&input, data.len())).unwrap(), data);
        // Longer or shorter than the extent: corrupted.
        let e = decode_lz4(&req(&input, data.len() - 1)).unwrap_err();
        assert!(
            e.is_corrupted() && e.to_string().contains("lcluster 3"),
            "{e}"
        );
        assert!(decode_lz4(&req(&input, data.len() + 1)).is_err());
        // A partial reference keeps the prefix.
        let mut r = req(&input, 5000);
        r.partial = true;
        assert_eq!(decode_lz4(&r).unwrap(), &data[..5000]);
        // No ZERO_PADDING (legacy): left-aligned, followed by zeros, possibly more data.
        let mut left = stream.clone();
        left.resize(stream.len().next_multiple_of(4096), 0);
        let mut r = req(&left, data.len());
        r.zero_padding = false;
        assert_eq!(decode_lz4(&r).unwrap(), data);
        let mut r = req(&left, 7000);
        r.zero_padding = false;
        assert_eq!(decode_lz4(&r).unwrap(), &data[..7000]);
        let mut r = req(&left, data.len() + 1);
        r.zero_padding = false;
        assert!(decode_lz4(&r).unwrap_err().is_corrupted());
    }

    #[test]
    fn partial_lz4_decoder_agrees_with_lz4_flex() {
        let mut x = 99u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..300 {
            let n = (next() % 20000) as usize;
            let data: Vec<u8> = match round % 3 {
                0 => text(n),
                1 => (0..n).map(|_| (next() % 4) as u8).collect(),
                _ => (0..n).map(|_| next() as u8).collect(),
            };
            let stream = lz4_flex::block::compress(&data);
            let mut out = vec![0u8; n];
            assert_eq!(lz4_decode_partial(&stream, &mut out), Ok(n));
            assert_eq!(out, data);
            let k = (next() % (n as u64 + 1)) as usize;
            let mut out = vec![0u8; k];
            assert_eq!(lz4_decode_partial(&stream, &mut out), Ok(k));
            assert_eq!(out, &data[..k]);
            let mut out = vec![0u8; n + 10];
            assert_eq!(lz4_decode_partial(&stream, &mut out), Ok(n));
            // Damaged streams: errors or wrong bytes, never a panic.
            let mut bad = stream.clone();
            if !bad.is_empty() {
                let i = (next() % bad.len() as u64) as usize;
                bad[i] ^= 1 << (next() % 8);
                let mut out = vec![0u8; n];
                let _ = lz4_decode_partial(&bad, &mut out);
                let _ = lz4_decode_partial(&bad[..i], &mut out);
            }
        }
    }

    #[test]
    fn prefixes_decode_into_dirty_buffers() {
        // Every prefix length, into a reused buffer full of other bytes (a recycled one is not
        // zeroed): the decoders must write every byte they return.
        let data = text(20000);
        let stream = lz4_flex::block::compress(&data);
        let lz4 = padded(&stream, stream.len().next_multiple_of(4096));
        let frame = zstd::bulk::compress(&data, 3).unwrap();
        let zst = padded(&frame, frame.len().next_multiple_of(4096));
        for want in (1..=data.len()).step_by(7).chain([data.len()]) {
            for (input, zstd) in [(&lz4, false), (&zst, true)] {
                let mut r = req(input, data.len());
                r.want = want;
                let dirty = vec![0x5Au8; want + (want % 3) * 100];
                let out = if zstd {
                    decode_zstd_into(&r, dirty)
                } else {
                    decode_lz4_into(&r, dirty)
                }
                .unwrap();
                assert_eq!(out, &data[..want], "zstd {zstd} want {want}");
            }
        }
        // A prefix of a stream that ends early is corrupted, not short.
        let mut r = req(&lz4, data.len() + 10);
        r.want = data.len() + 5;
        assert!(decode_lz4(&r).unwrap_err().is_corrupted());
    }

    #[test]
    fn zero_padding_is_looked_for_in_the_first_block_only() {
        let data = text(300);
        let stream = lz4_flex::block::compress(&data);
        // Stream in the second block after a first block of zeros: corrupted, as in the kernel.
        let input = padded(&stream, 8192);
        let e = decode_lz4(&req(&input, data.len())).unwrap_err();
        assert!(e.to_string().contains("zero padding"), "{e}");
        let e = decode_zstd(&req(&input, data.len())).unwrap_err();
        assert!(e.is_corrupted(), "{e}");
        // An inline pcluster scans only its part of the block.
        let input = padded(&stream, stream.len() + 10);
        let mut r = req(&input, data.len());
        r.first_block = 5;
        assert!(decode_lz4(&r).is_err());
        r.first_block = 11;
        assert_eq!(decode_lz4(&r).unwrap(), data);
    }

    #[test]
    fn zstd_frames_decode_and_stop_at_the_extent() {
        let data = text(70000);
        let frame = zstd::bulk::compress(&data, 3).unwrap();
        let input = padded(&frame, frame.len().next_multiple_of(4096));
        assert_eq!(decode_zstd(&req(&input, data.len())).unwrap(), data);
        // A prefix is what the kernel's streaming decoder gives for a shorter extent.
        assert_eq!(decode_zstd(&req(&input, 1234)).unwrap(), &data[..1234]);
        // More than the frame holds: corrupted.
        let e = decode_zstd(&req(&input, data.len() + 1)).unwrap_err();
        assert!(e.to_string().contains("ends after 70000"), "{e}");
        // Truncated and damaged frames: errors.
        let cut = padded(&frame[..frame.len() / 2], 4096 * 4);
        assert!(decode_zstd(&req(&cut, data.len())).is_err());
        let mut bad = input.clone();
        let n = bad.len();
        bad[n - frame.len() + 1] ^= 0xff; // the magic
        assert!(decode_zstd(&req(&bad, data.len())).is_err());
        // A window larger than the image allows: corrupted.
        let big: Vec<u8> = (0..3 << 20)
            .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut enc = zstd::bulk::Compressor::new(1).unwrap();
        enc.set_parameter(zstd::stream::raw::CParameter::WindowLog(22))
            .unwrap();
        enc.set_parameter(zstd::stream::raw::CParameter::ContentSizeFlag(false))
            .unwrap();
        let frame = enc.compress(&big).unwrap();
        let mut r = req(&frame, big.len());
        r.first_block = 4096;
        r.zstd_window_log = 20;
        assert!(decode_zstd(&r).is_err());
        r.zstd_window_log = 22;
        assert_eq!(decode_zstd(&r).unwrap(), big);
    }

    #[test]
    fn plain_pclusters_shifted_and_interlaced() {
        let input: Vec<u8> = (0..4096u32).map(|i| i as u8 ^ (i >> 8) as u8).collect();
        assert_eq!(
            transform_plain(&req(&input, 100), None).unwrap(),
            &input[..100]
        );
        // Interlaced, extent starting at block offset 1000: its first 3096 bytes are the
        // pcluster's last ones.
        let out = transform_plain(&req(&input, 4096), Some(4096 - 1000)).unwrap();
        assert_eq!(&out[..3096], &input[1000..]);
        assert_eq!(&out[3096..], &input[..1000]);
        let out = transform_plain(&req(&input, 50), Some(4096 - 1000)).unwrap();
        assert_eq!(out, &input[1000..1050]);
        assert!(transform_plain(&req(&input, 4097), None).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for n in 0..2000usize {
            let len = 1 + n % 600;
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let out = 1 + (x % 70000) as usize;
            let _ = decode_lz4(&req(&input, out));
            let _ = decode_zstd(&req(&input, out));
            let _ = decode_deflate(&req(&input, out));
            let _ = decode_lzma(&req(&input, out.min(5000)));
            let mut r = req(&input, out);
            r.partial = true;
            let _ = decode_lz4(&r);
        }
    }

    fn deflate(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(6));
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn deflate_and_lzma_decode_whole_extents_and_prefixes() {
        let data = text(70000);
        let streams = [
            ("deflate", deflate(&data)),
            ("lzma", crate::microlzma::encode(&data, 1 << 16)),
        ]
        .map(|(name, s)| (name, padded(&s, s.len().next_multiple_of(4096))));
        for (name, input) in &streams {
            let dec = |r: &DecodeReq<'_>, buf: Vec<u8>| {
                if *name == "deflate" {
                    decode_deflate_into(r, buf)
                } else {
                    decode_lzma_into(r, buf)
                }
            };
            assert_eq!(dec(&req(input, data.len()), Vec::new()).unwrap(), data);
            // Prefixes, into dirty reused buffers.
            for want in [1, 4095, 4096, 33333, data.len() - 1] {
                let mut r = req(input, data.len());
                r.want = want;
                let out = dec(&r, vec![0x5A; want + 7]).unwrap();
                assert_eq!(out, &data[..want], "{name} want {want}");
            }
            // A PARTIAL_REF head: the stream holds more than the extent.
            let mut r = req(input, 5000);
            r.partial = true;
            assert_eq!(dec(&r, Vec::new()).unwrap(), &data[..5000], "{name}");
            // More than the stream holds: corrupted, naming the lcluster. (MicroLZMA has no end
            // marker: a few bytes more may come out of the range coder's state, as in the kernel.)
            let e = dec(&req(input, data.len() + 4096), Vec::new()).unwrap_err();
            assert!(
                e.is_corrupted() && e.to_string().contains("lcluster 3"),
                "{name}: {e}"
            );
            // Truncated (cut at the front, as right-aligned data is) and damaged streams.
            let n = input.len();
            let cut = padded(
                &input[n - (n - input.iter().position(|&b| b != 0).unwrap()) / 2..],
                n,
            );
            assert!(dec(&req(&cut, data.len()), Vec::new()).is_err(), "{name}");
            let mut bad = input.clone();
            for i in (n - 200..n).step_by(7) {
                bad[i] ^= 0x55;
            }
            let _ = dec(&req(&bad, data.len()), Vec::new());
            // All zeros: no data.
            let zeros = vec![0u8; 4096];
            assert!(dec(&req(&zeros, 10), Vec::new())
                .unwrap_err()
                .is_corrupted());
        }
        // A whole MicroLZMA extent must end where the stream does (the kernel decodes it exact).
        let e = decode_lzma(&req(&streams[1].1, data.len() - 1)).unwrap_err();
        assert!(e.is_corrupted(), "{e}");
    }

    #[test]
    fn table_is_indexed_by_id() {
        for (id, d) in DECOMPRESSORS.iter().enumerate() {
            let alg = Compression::from_id(id as u8).unwrap();
            assert_eq!(alg.id(), Some(id as u8));
            assert_eq!(d.name.to_lowercase(), alg.name());
            assert!(d.decode.is_some());
        }
    }
}
