//! Compressors and the cutting of file data into EROFS extents.
//!
//! Each compressor answers one question, erofs-utils style: "compress as much of this input as fits
//! into N bytes" (fixed-size output). LZ4 and LZ4HC do it natively (`LZ4_compress_destSize`,
//! `LZ4_compress_HC_destSize` from the linked liblz4, declared here since the Rust wrapper lacks them);
//! zstd has no such call, so a prefix of the input is searched for (compress, shrink by the measured
//! ratio, retry).
//!
//! A file is cut into segments of [`SEGMENT`] bytes (a multiple of the lcluster size) that are
//! compressed independently, so big files compress in parallel and the result does not depend on the
//! thread count. Inside a segment, extents follow each other: each is a pcluster of whole blocks holding
//! compressed bytes (right-aligned), or a PLAIN block of raw bytes where compression does not save a
//! block. The kernel's rules shape the cut: at most one extent starts per lcluster (every extent but the
//! file's last covers at least one block of data), and a pcluster of more than one block needs a
//! NONHEAD lcluster in its extent to record its block count.

#![allow(
    unsafe_code,
    reason = "liblz4's destSize and HC-state calls, which no safe binding offers, through their C API"
)]

// Links liblz4, whose destSize functions are declared below.
use lz4_sys as _;
use sealfs_format::{self as fmt, BLKSZ};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};

/// Compression algorithm and level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// LZ4, fast.
    Lz4,
    /// LZ4 high compression at a level 1..=12 (same stream format as LZ4).
    Lz4Hc(i32),
    /// Zstandard at a level 1..=22.
    Zstd(i32),
}

impl Algorithm {
    /// The EROFS algorithm id.
    pub fn id(self) -> u8 {
        match self {
            Algorithm::Lz4 | Algorithm::Lz4Hc(_) => fmt::Z_EROFS_COMPRESSION_LZ4,
            Algorithm::Zstd(_) => fmt::Z_EROFS_COMPRESSION_ZSTD,
        }
    }

    /// Parses `lz4`, `lz4hc[,LEVEL]`, `zstd[,LEVEL]` (also `level=N`).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (name, level) = match s.split_once(',') {
            Some((n, l)) => {
                let l = l.strip_prefix("level=").unwrap_or(l);
                (
                    n,
                    Some(
                        l.parse::<i32>()
                            .map_err(|_| format!("bad compression level {l:?}"))?,
                    ),
                )
            }
            None => (s, None),
        };
        match (name, level) {
            ("lz4", None) => Ok(Algorithm::Lz4),
            ("lz4", Some(_)) => Err("lz4 takes no level (use lz4hc,LEVEL)".into()),
            ("lz4hc", l) => match l.unwrap_or(9) {
                l @ 1..=12 => Ok(Algorithm::Lz4Hc(l)),
                l => Err(format!("lz4hc level {l} is outside 1..=12")),
            },
            ("zstd", l) => match l.unwrap_or(3) {
                l @ 1..=22 => Ok(Algorithm::Zstd(l)),
                l => Err(format!("zstd level {l} is outside 1..=22")),
            },
            _ => Err(format!("unknown compressor {name:?} (lz4, lz4hc, zstd)")),
        }
    }
}

/// Which files go whole into the packed inode (`FRAGMENTS`), where they are compressed together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fragments {
    /// Every file has its own pclusters.
    #[default]
    Off,
    /// Files smaller than one pcluster (`mkfs.erofs -E fragments` packs these whole too).
    Small,
    /// Every file (`-E all-fragments`).
    All,
}

/// Compression settings of a build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressOptions {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Largest physical cluster in bytes: a multiple of 4 KiB from 4 KiB to 1 MiB.
    pub pcluster_bytes: u32,
    /// Files packed into the packed inode.
    pub fragments: Fragments,
    /// Fixed-input clusters in 48-bit encoded extents (`-E 48bit`): every cluster of input
    /// (`pcluster_bytes` rounded down to a power of two) is compressed in one call to whatever
    /// length it takes, and the compressed bytes are packed one after another, not block-aligned.
    pub extents_48bit: bool,
}

impl CompressOptions {
    /// Checks the cluster size.
    pub fn validate(&self) -> Result<(), String> {
        let p = self.pcluster_bytes as u64;
        if !(BLKSZ..=fmt::Z_EROFS_PCLUSTER_MAX_SIZE).contains(&p) || !p.is_multiple_of(BLKSZ) {
            return Err(format!(
                "pcluster size {p} must be a multiple of 4096 from 4096 to 1048576"
            ));
        }
        Ok(())
    }
}

extern "C" {
    // liblz4 (linked by lz4-sys, version 1.9.3 or later, whose destSize functions are correct).
    fn LZ4_compress_destSize(
        src: *const c_char,
        dst: *mut c_char,
        src_size: *mut c_int,
        dst_capacity: c_int,
    ) -> c_int;
    fn LZ4_sizeofStateHC() -> c_int;
    fn LZ4_initStreamHC(state: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_resetStreamHC_fast(state: *mut c_void, level: c_int);
    fn LZ4_compress_HC_continue_destSize(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: *mut c_int,
        dst_capacity: c_int,
    ) -> c_int;
    #[cfg(test)]
    fn LZ4_compress_HC_destSize(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: *mut c_int,
        dst_capacity: c_int,
        level: c_int,
    ) -> c_int;
}

/// log2 of the zstd window: 1 MiB, the most the kernel accepts (configuration record `windowlog` 10).
pub(crate) const ZSTD_WINDOW_LOG: u8 = 20;

thread_local! {
    static LZ4HC_STATE: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    static ZSTD_CTX: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
}

/// This thread's LZ4 HC stream, ready for a new independent compression at `level`.
///
/// `LZ4_compress_HC_destSize` clears the whole 256 KiB state on every call (once per pcluster:
/// 145k times for the linux tree at 4 KiB clusters). `LZ4_resetStreamHC_fast` instead moves the
/// stream's index base past everything seen before, so earlier entries fall below the new lowest
/// match index and are never followed; liblz4 reads table entries only for positions it has inserted
/// for the current input. The output is byte-identical to a freshly cleared state (tested against
/// `LZ4_compress_HC_destSize` below), so images stay identical whatever thread compressed what.
/// A state left dirty by a failed call gets the full clear (inside liblz4).
///
/// # Safety
/// The returned pointer is valid while `state` is neither dropped nor resized.
unsafe fn lz4hc_state(state: &mut Vec<u64>, level: c_int) -> *mut c_void {
    // SAFETY: a pure function of the library.
    let size = unsafe { LZ4_sizeofStateHC() } as usize;
    if state.len() * 8 < size {
        state.resize(size.div_ceil(8), 0);
        // SAFETY: an 8-aligned buffer of at least LZ4_sizeofStateHC() bytes.
        unsafe { LZ4_initStreamHC(state.as_mut_ptr().cast(), size) };
    }
    // SAFETY: the state was initialised above and only used by liblz4 since.
    unsafe { LZ4_resetStreamHC_fast(state.as_mut_ptr().cast(), level) };
    state.as_mut_ptr().cast()
}

/// Compresses as much of `input` as fits in `dst`; returns (bytes consumed, bytes written), or
/// `None` if nothing fits.
fn compress_dest(alg: Algorithm, input: &[u8], dst: &mut [u8]) -> Option<(usize, usize)> {
    let src_len = input.len().min(i32::MAX as usize / 2);
    match alg {
        Algorithm::Lz4 => {
            let mut consumed = src_len as c_int;
            // SAFETY: src is readable for `consumed` bytes and dst writable for `dst.len()` bytes; liblz4
            // writes at most dst_capacity bytes and updates `consumed`.
            let n = unsafe {
                LZ4_compress_destSize(
                    input.as_ptr().cast(),
                    dst.as_mut_ptr().cast(),
                    &mut consumed,
                    dst.len() as c_int,
                )
            };
            (n > 0).then_some((consumed as usize, n as usize))
        }
        Algorithm::Lz4Hc(level) => LZ4HC_STATE.with_borrow_mut(|state| {
            let mut consumed = src_len as c_int;
            // SAFETY: lz4hc_state gives an initialised LZ4 HC stream; src is readable for
            // `consumed` bytes and dst writable for `dst.len()` bytes; liblz4 writes at most
            // dst_capacity bytes and updates `consumed`.
            let n = unsafe {
                let state = lz4hc_state(state, level);
                LZ4_compress_HC_continue_destSize(
                    state,
                    input.as_ptr().cast(),
                    dst.as_mut_ptr().cast(),
                    &mut consumed,
                    dst.len() as c_int,
                )
            };
            (n > 0).then_some((consumed as usize, n as usize))
        }),
        Algorithm::Zstd(level) => ZSTD_CTX.with_borrow_mut(|ctx| {
            let ctx = ctx
                .get_or_insert_with(|| zstd::bulk::Compressor::new(level).expect("zstd context"));
            ctx.set_compression_level(level).ok()?;
            ctx.set_parameter(zstd::zstd_safe::CParameter::WindowLog(
                ZSTD_WINDOW_LOG as u32,
            ))
            .ok()?;
            // Search for a long prefix whose frame fits: start at 4x the room, then grow or shrink by
            // the measured ratio; each trial compresses at most a few times `dst` bytes.
            let room = dst.len();
            let mut len = src_len.min(room * 4);
            let mut best: Option<(usize, usize)> = None;
            let mut scratch = Vec::new();
            for _ in 0..6 {
                scratch.clear();
                scratch.reserve(zstd::zstd_safe::compress_bound(len));
                let n = ctx.compress_to_buffer(&input[..len], &mut scratch).ok()?;
                let next = if n <= room {
                    if best.is_none_or(|(l, _)| len > l) {
                        dst[..n].copy_from_slice(&scratch[..n]);
                        best = Some((len, n));
                    }
                    if len == src_len || n * 100 >= room * 95 {
                        break;
                    }
                    (len as u128 * room as u128 * 95 / (n.max(1) as u128 * 100)) as usize
                } else {
                    (len as u128 * room as u128 * 97 / (n as u128 * 100)) as usize
                };
                let next = next.clamp(1, src_len);
                if best.is_some_and(|(l, _)| next <= l) || next == len {
                    break;
                }
                len = next;
            }
            best
        }),
    }
}

/// Input bytes of one segment: a multiple of the block size, so segments start on lcluster boundaries.
pub(crate) const SEGMENT: u64 = 4 << 20;

/// One extent of a compressed file.
#[derive(Debug, Clone)]
pub(crate) struct ZExtent {
    /// First file byte.
    pub start: u64,
    /// Decoded length.
    pub len: u64,
    /// Stored raw (a PLAIN pcluster of one block) rather than compressed.
    pub plain: bool,
    /// The pcluster's bytes: compressed stream, or raw data (at most one block).
    pub data: Vec<u8>,
}

impl ZExtent {
    /// Blocks of its pcluster.
    pub fn blocks(&self) -> u64 {
        (self.data.len() as u64).div_ceil(BLKSZ).max(1)
    }
}

/// log2 of the logical cluster of a fixed-input build: `pcluster_bytes` rounded down to a power
/// of two ([`SEGMENT`] is a multiple of it).
pub(crate) fn fixed_lcluster_bits(opts: &CompressOptions) -> u8 {
    (u32::BITS - 1 - opts.pcluster_bytes.leading_zeros()) as u8
}

/// Cuts `data`, the segment starting at `seg_start`, into one extent per logical cluster, each
/// compressed in one call (a fixed-input build), or stored raw where compressing does not shrink it.
fn compress_fixed(opts: &CompressOptions, data: &[u8], seg_start: u64) -> Vec<ZExtent> {
    let lc = 1usize << fixed_lcluster_bits(opts);
    let mut dst = Vec::new();
    data.chunks(lc)
        .enumerate()
        .map(|(i, chunk)| {
            let start = seg_start + (i * lc) as u64;
            // Room for any stream that could still be smaller than the input.
            dst.resize(chunk.len() + chunk.len() / 16 + 4096, 0);
            match compress_dest(opts.algorithm, chunk, &mut dst) {
                Some((consumed, n)) if consumed == chunk.len() && n < chunk.len() => ZExtent {
                    start,
                    len: chunk.len() as u64,
                    plain: false,
                    data: dst[..n].to_vec(),
                },
                _ => ZExtent {
                    start,
                    len: chunk.len() as u64,
                    plain: true,
                    data: chunk.to_vec(),
                },
            }
        })
        .collect()
}

/// Cuts `data`, the segment of a file starting at `seg_start` (block-aligned) in a file of `file_size`
/// bytes, into extents.
pub(crate) fn compress_segment(
    opts: &CompressOptions,
    data: &[u8],
    seg_start: u64,
    file_size: u64,
) -> Vec<ZExtent> {
    if opts.extents_48bit {
        return compress_fixed(opts, data, seg_start);
    }
    let b = BLKSZ as usize;
    let seg_end = seg_start + data.len() as u64;
    let mut out = Vec::new();
    let mut dst = vec![0u8; opts.pcluster_bytes as usize];
    let mut pos = 0usize;
    while pos < data.len() {
        let start = seg_start + pos as u64;
        let head = start / BLKSZ;
        let mut cap = opts.pcluster_bytes as usize;
        let mut chosen = None;
        while cap >= b {
            let Some((consumed, written)) =
                compress_dest(opts.algorithm, &data[pos..], &mut dst[..cap])
            else {
                break;
            };
            let end = start + consumed as u64;
            let blocks = written.div_ceil(b);
            // Worth it only if it saves at least one block over the raw bytes.
            if consumed == 0 || blocks * b >= consumed {
                break;
            }
            let at_file_end = end == file_size;
            // One extent start per lcluster: the next extent must start in a later lcluster.
            let next_ok = at_file_end || end == seg_end || end / BLKSZ > head;
            // A multi-block pcluster needs a NONHEAD lcluster for its block count.
            let last_lc = if at_file_end {
                end.div_ceil(BLKSZ)
            } else {
                end / BLKSZ
            };
            let nonheads = last_lc.saturating_sub(head + 1);
            if next_ok && (blocks == 1 || nonheads >= 1) {
                chosen = Some(ZExtent {
                    start,
                    len: consumed as u64,
                    plain: false,
                    data: dst[..written].to_vec(),
                });
                break;
            }
            if blocks == 1 {
                break;
            }
            cap = (blocks - 1) * b; // retry into fewer blocks
        }
        let ext = chosen.unwrap_or_else(|| {
            // A PLAIN extent ends at the next lcluster boundary: the kernel maps its NONHEAD lclusters
            // as running to their end, which a one-block raw pcluster must cover.
            let len = (data.len() - pos).min(b - (start % BLKSZ) as usize);
            ZExtent {
                start,
                len: len as u64,
                plain: true,
                data: data[pos..pos + len].to_vec(),
            }
        });
        pos += ext.len as usize;
        out.push(ext);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What liblz4's one-shot `LZ4_compress_HC_destSize` (full clear of a fresh state) gives.
    fn reference_hc(level: c_int, input: &[u8], room: usize) -> Option<(usize, Vec<u8>)> {
        // SAFETY: a pure function of the library.
        let size = unsafe { LZ4_sizeofStateHC() } as usize;
        let mut state = vec![0u64; size.div_ceil(8)];
        let mut dst = vec![0u8; room];
        let mut consumed = input.len() as c_int;
        // SAFETY: as in compress_dest.
        let n = unsafe {
            LZ4_compress_HC_destSize(
                state.as_mut_ptr().cast(),
                input.as_ptr().cast(),
                dst.as_mut_ptr().cast(),
                &mut consumed,
                room as c_int,
                level,
            )
        };
        (n > 0).then(|| (consumed as usize, dst[..n as usize].to_vec()))
    }

    /// Inputs of every shape liblz4's match finder treats differently: text, noise, runs of one byte
    /// and short repeated patterns (its pattern analysis), long repeats beyond 64 KiB, mixtures.
    fn shapes(seed: u64) -> Vec<Vec<u8>> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let words = [
            &b"erofs "[..],
            b"block ",
            b"the ",
            b"cluster ",
            b"verity\n",
            b"0x1f, ",
        ];
        let mut text = Vec::new();
        while text.len() < 400_000 {
            text.extend_from_slice(words[(next() % 6) as usize]);
        }
        let noise: Vec<u8> = (0..300_000).map(|_| next() as u8).collect();
        let mut mixed = Vec::new();
        for i in 0..40 {
            match i % 4 {
                0 => mixed.extend_from_slice(&text[i * 1000..i * 1000 + 9000]),
                1 => mixed.extend(std::iter::repeat_n(b'z', 5000 + i * 37)),
                2 => mixed.extend_from_slice(&noise[i * 500..i * 500 + 3000]),
                _ => mixed.extend(b"abcabcab".iter().cycle().take(7000)),
            }
        }
        let mut far = text[..70_000].to_vec();
        far.extend_from_slice(&noise[..20_000]);
        far.extend_from_slice(&text[..70_000]);
        vec![
            vec![7],
            text[..100].to_vec(),
            text[..4096].to_vec(),
            text.clone(),
            noise,
            vec![0; 3 << 20],
            b"ab".repeat(200_000),
            mixed,
            far,
        ]
    }

    #[test]
    fn lz4hc_reused_state_matches_a_fresh_one_byte_for_byte() {
        let mut compared = 0;
        for level in [3, 9, 12] {
            for seed in [1, 2] {
                for input in shapes(seed) {
                    for room in [4096, 65536, 1 << 20] {
                        let mut dst = vec![0u8; room];
                        let ours = compress_dest(Algorithm::Lz4Hc(level), &input, &mut dst)
                            .map(|(c, n)| (c, dst[..n].to_vec()));
                        let want = reference_hc(level, &input, room);
                        assert_eq!(
                            ours.as_ref().map(|(c, d)| (c, d.len())),
                            want.as_ref().map(|(c, d)| (c, d.len())),
                            "level {level}, input {} bytes, room {room}",
                            input.len()
                        );
                        assert!(
                            ours == want,
                            "level {level}, {} bytes, room {room}",
                            input.len()
                        );
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, 3 * 2 * 9 * 3);
    }

    #[test]
    fn lz4hc_reused_state_past_liblz4s_1gib_index_wrap() {
        // The stream's index grows by what each call consumes (+64 KiB); past 1 GiB liblz4 clears
        // its tables. Push one thread's state across that point and compare on both sides.
        let zeros = vec![0u8; 8 << 20];
        let text = shapes(3).swap_remove(3);
        let mut dst = vec![0u8; 1 << 20];
        for i in 0..160 {
            let (consumed, _) = compress_dest(Algorithm::Lz4Hc(9), &zeros, &mut dst).unwrap();
            assert_eq!(consumed, zeros.len());
            if i % 16 == 0 {
                let ours = compress_dest(Algorithm::Lz4Hc(9), &text, &mut dst[..65536])
                    .map(|(c, n)| (c, dst[..n].to_vec()));
                assert!(ours == reference_hc(9, &text, 65536), "after {i} x 8 MiB");
            }
        }
    }

    fn check_rules(exts: &[ZExtent], size: u64) {
        let mut pos = 0;
        for (i, e) in exts.iter().enumerate() {
            assert_eq!(e.start, pos, "extents are contiguous");
            pos += e.len;
            if i + 1 < exts.len() {
                assert!(
                    exts[i + 1].start / BLKSZ > e.start / BLKSZ,
                    "two starts in one lcluster"
                );
            }
            if e.plain {
                assert!(e.len <= BLKSZ && e.data.len() as u64 == e.len);
                assert!(
                    e.start % BLKSZ + e.len <= BLKSZ,
                    "a PLAIN extent crosses an lcluster boundary"
                );
            } else {
                assert!(
                    e.blocks() * BLKSZ < e.len,
                    "compressed extent saves a block"
                );
            }
        }
        assert_eq!(pos, size);
    }

    #[test]
    fn extents_follow_the_kernel_rules() {
        let mut text = Vec::new();
        for i in 0..200_000u32 {
            text.extend_from_slice(format!("line {} of some text {}\n", i, i % 97).as_bytes());
        }
        let mut rng = 0x1234_5678u64;
        let random: Vec<u8> = (0..300_000)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect();
        let zeros = vec![0u8; 9 << 20];
        for alg in [Algorithm::Lz4, Algorithm::Lz4Hc(9), Algorithm::Zstd(3)] {
            for pcluster in [4096u32, 65536, 1 << 20] {
                let opts = CompressOptions {
                    algorithm: alg,
                    pcluster_bytes: pcluster,
                    fragments: Fragments::Off,
                    extents_48bit: false,
                };
                for data in [
                    &text[..],
                    &random[..],
                    &zeros[..],
                    &text[..5000],
                    &text[..4096],
                    &b"x"[..],
                ] {
                    let size = data.len() as u64;
                    let mut exts = Vec::new();
                    for seg in (0..size).step_by(SEGMENT as usize) {
                        let end = (seg + SEGMENT).min(size);
                        exts.extend(compress_segment(
                            &opts,
                            &data[seg as usize..end as usize],
                            seg,
                            size,
                        ));
                    }
                    check_rules(&exts, size);
                    assert!(exts.iter().all(|e| e.len <= fmt::Z_EROFS_PCLUSTER_MAX_DSIZE
                        && e.data.len() <= pcluster as usize));
                }
            }
        }
    }

    #[test]
    fn algorithms_parse() {
        assert_eq!(Algorithm::parse("lz4hc,12"), Ok(Algorithm::Lz4Hc(12)));
        assert_eq!(Algorithm::parse("zstd"), Ok(Algorithm::Zstd(3)));
        assert_eq!(Algorithm::parse("zstd,level=19"), Ok(Algorithm::Zstd(19)));
        assert!(Algorithm::parse("lz4hc,13").is_err());
        assert!(Algorithm::parse("gzip").is_err());
    }
}
