//! Compressors and the cutting of file data into EROFS extents.
//!
//! Each compressor answers one question, erofs-utils style: "compress as much of this input as fits
//! into N bytes" (fixed-size output). LZ4 and LZ4HC do it natively (`LZ4_compress_destSize`,
//! `LZ4_compress_HC_destSize` from the linked liblz4, declared here since the Rust wrapper lacks them),
//! and so does MicroLZMA (liblzma's `lzma_microlzma_encoder`: with `avail_out = N` and `LZMA_FINISH`
//! it encodes as much input as fits and reports how much it took, exactly as mkfs.erofs uses it).
//! DEFLATE has no such call, so a prefix of the input is searched for ([`fit_prefix`]: compress,
//! shrink or grow by the measured ratio, retry). zstd has none either, but its streaming encoder
//! can be flushed after any input and the frame ended there later ([`zstd_dest`]): input that does
//! not fit whole is fed once, in pieces sized by the ratio so far, and the frame ends at the last
//! piece that fit.
//!
//! DEFLATE is libdeflate's (through `libdeflater`, which builds a pinned copy of its C source, so
//! the bytes do not depend on the machine's zlib), as in mkfs.erofs's `compressor_libdeflate.c`.
//! Why not the reader's `flate2` (miniz_oxide): the prefix search compresses each pcluster's input
//! a few times, so compression speed counts several times over, and libdeflate is a one-shot
//! compressor built for whole buffers. Measured once on 200 MB of the linux-source-6.1 tree in
//! 128 KiB chunks (one thread, raw DEFLATE): at level 6, libdeflate 86.5 MB/s and 46.69 MB out,
//! miniz_oxide 15.8 MB/s and 46.55 MB; at level 9, 16.4 MB/s and 46.08 MB against 20.9 MB/s and
//! 46.39 MB. libdeflate also has levels 10-12 (smaller still). A streaming encoder stopped at N
//! output bytes would not help: it cannot end its stream there (its pending bits need room).
//!
#![allow(
    unsafe_code,
    reason = "liblz4's destSize and HC-state calls, liblzma's MicroLZMA encoder and zstd's \
              stable-input streaming, which no safe binding offers, through their C API"
)]

// Links liblz4, whose destSize functions are declared below.
use liblzma_sys as lzma;
use lz4_sys as _;
use sealfs_format::{self as fmt, BLKSZ};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use zstd::zstd_safe::zstd_sys as zs;

/// Compression algorithm and level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// LZ4, fast.
    Lz4,
    /// LZ4 high compression at a level 1..=12 (same stream format as LZ4).
    Lz4Hc(i32),
    /// Zstandard at a level 1..=22.
    Zstd(i32),
    /// MicroLZMA at an mkfs.erofs level: 0..=9 are xz's presets, 100..=109 the same presets with
    /// `LZMA_PRESET_EXTREME` (slower, sometimes smaller).
    Lzma(i32),
    /// Raw DEFLATE (libdeflate) at a level 1..=12.
    Deflate(i32),
}

impl Algorithm {
    /// The EROFS algorithm id.
    pub fn id(self) -> u8 {
        match self {
            Algorithm::Lz4 | Algorithm::Lz4Hc(_) => fmt::Z_EROFS_COMPRESSION_LZ4,
            Algorithm::Zstd(_) => fmt::Z_EROFS_COMPRESSION_ZSTD,
            Algorithm::Lzma(_) => fmt::Z_EROFS_COMPRESSION_LZMA,
            Algorithm::Deflate(_) => fmt::Z_EROFS_COMPRESSION_DEFLATE,
        }
    }

    /// Parses `lz4`, `lz4hc[,LEVEL]`, `zstd[,LEVEL]`, `lzma[,LEVEL]`, `deflate[,LEVEL]` (also
    /// `level=N`).
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
        let alg = match (name, level) {
            ("lz4", None) => Algorithm::Lz4,
            ("lz4", Some(_)) => return Err("lz4 takes no level (use lz4hc,LEVEL)".into()),
            ("lz4hc", l) => Algorithm::Lz4Hc(l.unwrap_or(9)),
            ("zstd", l) => Algorithm::Zstd(l.unwrap_or(3)),
            ("lzma", l) => Algorithm::Lzma(l.unwrap_or(6)),
            ("deflate", l) => Algorithm::Deflate(l.unwrap_or(6)),
            _ => {
                return Err(format!(
                    "unknown compressor {name:?} (lz4, lz4hc, zstd, lzma, deflate)"
                ))
            }
        };
        alg.check_level().map(|()| alg)
    }

    /// Checks the level against the compressor's range (a level out of range would make every
    /// compression fail and the data be stored raw).
    pub fn check_level(self) -> Result<(), String> {
        match self {
            Algorithm::Lz4
            | Algorithm::Lz4Hc(1..=12)
            | Algorithm::Zstd(1..=22)
            | Algorithm::Lzma(0..=9 | 100..=109)
            | Algorithm::Deflate(1..=12) => Ok(()),
            Algorithm::Lz4Hc(l) => Err(format!("lz4hc level {l} is outside 1..=12")),
            Algorithm::Zstd(l) => Err(format!("zstd level {l} is outside 1..=22")),
            Algorithm::Lzma(l) => Err(format!(
                "lzma level {l} is outside 0..=9 (or 100..=109 for the extreme presets)"
            )),
            Algorithm::Deflate(l) => Err(format!("deflate level {l} is outside 1..=12")),
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
    /// Metadata compression (`-m`, the metabox, Linux 6.17 or later): every inode but the packed
    /// one, with its xattrs, indexes and inline data, and the shared xattrs go into one inode whose
    /// data is compressed in pclusters of at most this many bytes (a multiple of 4 KiB, at most
    /// `pcluster_bytes`).
    pub metabox: Option<u32>,
    /// Identical clusters of input stored once (`-E dedupe`, with `extents_48bit`): a cluster
    /// whose content (the SHA-256 of its blocks' hashes, with its length and codec) was placed
    /// before, in any file, refers to that data instead of storing it again.
    pub dedupe: bool,
    /// Directories compressed too (`--zD`, as mkfs.erofs names it): each directory's data goes
    /// whole into the packed inode, compressed there with the fragments.
    pub compress_dirs: bool,
}

impl CompressOptions {
    /// `algorithm` alone (what `sealfs build -z ALG` asks for without a preset): physical clusters
    /// of one block, no fragments, no 48-bit extents, no dedupe, metadata and directories stored
    /// uncompressed.
    pub fn new(algorithm: Algorithm) -> CompressOptions {
        CompressOptions {
            algorithm,
            pcluster_bytes: BLKSZ as u32,
            fragments: Fragments::Off,
            extents_48bit: false,
            dedupe: false,
            metabox: None,
            compress_dirs: false,
        }
    }

    /// Checks the level and the cluster sizes.
    pub fn validate(&self) -> Result<(), String> {
        self.algorithm.check_level()?;
        let p = self.pcluster_bytes as u64;
        if !(BLKSZ..=fmt::Z_EROFS_PCLUSTER_MAX_SIZE).contains(&p) || !p.is_multiple_of(BLKSZ) {
            return Err(format!(
                "pcluster size {p} must be a multiple of 4096 from 4096 to 1048576"
            ));
        }
        if self.dedupe && !self.extents_48bit {
            return Err(
                "-E dedupe needs -E 48bit (extents of fixed-input clusters can point anywhere)"
                    .into(),
            );
        }
        if let Some(m) = self.metabox.map(u64::from) {
            if !(BLKSZ..=p).contains(&m) || !m.is_multiple_of(BLKSZ) {
                return Err(format!(
                    "metabox pcluster size {m} must be a multiple of 4096 from 4096 to the \
                     pcluster size ({p})"
                ));
            }
        }
        Ok(())
    }

    /// The window (dictionary) its pclusters need to decode, in bytes, as the superblock records
    /// it (0 for LZ4, whose records say nothing a decoder allocates).
    pub fn window(&self) -> u64 {
        match self.algorithm {
            Algorithm::Lz4 | Algorithm::Lz4Hc(_) => 0,
            Algorithm::Lzma(_) => self.lzma_dict_size().into(),
            Algorithm::Deflate(_) => 1 << DEFLATE_WINDOW_BITS,
            Algorithm::Zstd(_) => 1 << ZSTD_WINDOW_LOG,
        }
    }

    /// The MicroLZMA dictionary of this build: mkfs.erofs's default, four times the largest
    /// pcluster, at least 32 KiB and at most the kernel's 8 MiB (so 4 MiB at 1 MiB clusters, as
    /// much as one [`SEGMENT`], the most input one pcluster is ever given). The kernel preallocates
    /// one dictionary of the recorded size per decompression stream, so it is not made larger than
    /// the input can use.
    pub fn lzma_dict_size(&self) -> u32 {
        self.pcluster_bytes
            .saturating_mul(4)
            .clamp(32 << 10, fmt::Z_EROFS_LZMA_MAX_DICT_SIZE)
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

/// log2 of the DEFLATE window: libdeflate always uses DEFLATE's full 32 KiB, the most the kernel
/// accepts ([`fmt::Z_EROFS_DEFLATE_MAX_WINDOWBITS`]).
pub(crate) const DEFLATE_WINDOW_BITS: u8 = 15;

/// A liblzma stream, ended when dropped.
struct LzmaStream(lzma::lzma_stream);

impl Drop for LzmaStream {
    fn drop(&mut self) {
        // SAFETY: the stream was zero-initialized (LZMA_STREAM_INIT) and only used through liblzma
        // since, so `lzma_end` may free whatever it holds.
        unsafe { lzma::lzma_end(&mut self.0) };
    }
}

thread_local! {
    static LZ4HC_STATE: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    static ZSTD_CTX: RefCell<Option<ZstdCtx>> = const { RefCell::new(None) };
    /// This thread's MicroLZMA encoder, re-initialized for every pcluster (liblzma keeps its buffers).
    static LZMA_STREAM: RefCell<Option<LzmaStream>> = const { RefCell::new(None) };
    /// This thread's libdeflate compressor and its level.
    static DEFLATE: RefCell<Option<(i32, libdeflater::Compressor)>> = const { RefCell::new(None) };
    /// The room [`compress_segment`] compresses into.
    static DST: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Trial outputs of the prefix search (DEFLATE) and zstd's one-call and streamed frames.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
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

/// Compresses as much of `input` as fits in `dst` with the algorithm of `opts`; returns (bytes
/// consumed, bytes written), or `None` if nothing fits (or the compressor failed: the data is then
/// stored raw, which is always valid).
fn compress_dest(opts: &CompressOptions, input: &[u8], dst: &mut [u8]) -> Option<(usize, usize)> {
    #[cfg(test)]
    tests::ROOM_TRIED.set(tests::ROOM_TRIED.get() + dst.len());
    let src_len = input.len().min(i32::MAX as usize / 2);
    let input = &input[..src_len];
    #[cfg(test)]
    tests::INPUT_SEEN.set(tests::INPUT_SEEN.get() + src_len);
    match opts.algorithm {
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
            let ctx = match ctx {
                Some(ctx) => ctx,
                None => ctx.insert(ZstdCtx::new()?),
            };
            SCRATCH.with_borrow_mut(|scratch| zstd_dest(ctx, level, input, dst, scratch))
        }),
        Algorithm::Lzma(level) => lzma_dest(level, opts.lzma_dict_size(), input, dst),
        Algorithm::Deflate(level) => DEFLATE.with_borrow_mut(|slot| {
            let c = match slot {
                Some((l, c)) if *l == level => c,
                _ => {
                    let lvl = libdeflater::CompressionLvl::new(level).ok()?;
                    &mut slot.insert((level, libdeflater::Compressor::new(lvl))).1
                }
            };
            let (consumed, written) = SCRATCH.with_borrow_mut(|scratch| {
                fit_prefix(src_len, dst, scratch, |len, scratch| {
                    let bound = c.deflate_compress_bound(len);
                    if scratch.len() < bound {
                        scratch.resize(bound, 0);
                    }
                    c.deflate_compress(&input[..len], scratch).ok()
                })
            })?;
            // The kernel finds the start of a pcluster's stream by skipping its zero padding, so
            // the stream must not start with a zero byte. Only a non-final stored block does
            // (BFINAL 0, BTYPE 00, then bits up to the byte boundary that inflaters skip); one of
            // those skipped bits is set instead, as mkfs.erofs does. Still valid DEFLATE.
            if dst[0] == 0 {
                dst[0] = DEFLATE_STORED_PAD_BIT;
            }
            Some((consumed, written))
        }),
    }
}

/// A zstd compression context (libzstd's `ZSTD_CCtx`), freed when dropped.
struct ZstdCtx(std::ptr::NonNull<zs::ZSTD_CCtx>);

impl Drop for ZstdCtx {
    fn drop(&mut self) {
        // SAFETY: the context came from ZSTD_createCCtx and is freed once, here.
        unsafe { zs::ZSTD_freeCCtx(self.0.as_ptr()) };
    }
}

impl ZstdCtx {
    fn new() -> Option<Self> {
        // SAFETY: a plain constructor; null on allocation failure.
        std::ptr::NonNull::new(unsafe { zs::ZSTD_createCCtx() }).map(ZstdCtx)
    }

    /// Sets a parameter; `None` if zstd refuses it.
    fn set(&mut self, param: zs::ZSTD_cParameter, value: i32) -> Option<()> {
        // SAFETY: a valid context; zstd checks the parameter and its value.
        let r = unsafe { zs::ZSTD_CCtx_setParameter(self.0.as_ptr(), param, value) };
        ok(r).map(drop)
    }

    /// Starts a new frame at `level` for `len` bytes of input at most: the kernel's largest window; from level 10 on, zstd's
    /// block splitter (blocks cut where the statistics change; measured on linux-source-6.1 at
    /// level 12: 0.2% smaller for at most 10% more time; at level 3, 70% more time for 0.3%); and
    /// input read in place across streaming calls (`ZSTD_c_stableInBuffer`), so the whole input
    /// stays one window (streamed through zstd's own buffer, the window wraps and matches are
    /// searched in two parts: a third of the time on a Debian rootfs).
    fn start(&mut self, level: i32, len: usize) -> Option<()> {
        use zs::ZSTD_cParameter::*;
        // SAFETY: a valid context. A frame the last call left unended (ended by hand) is dropped:
        // parameters cannot change inside one.
        ok(unsafe {
            zs::ZSTD_CCtx_reset(
                self.0.as_ptr(),
                zs::ZSTD_ResetDirective::ZSTD_reset_session_only,
            )
        })?;
        self.set(ZSTD_c_compressionLevel, level)?;
        self.set(ZSTD_c_windowLog, i32::from(ZSTD_WINDOW_LOG))?;
        // ZSTD_c_splitAfterSequences (the block splitter): 1 on, 2 off.
        self.set(ZSTD_c_experimentalParam13, if level >= 10 { 1 } else { 2 })?;
        // ZSTD_c_srcSizeHint: tables sized for this input when streaming, as one call sizes them
        // (for an unknown size zstd takes its largest: 48 MiB more per thread at level 12).
        self.set(
            ZSTD_c_experimentalParam7,
            i32::try_from(len).unwrap_or(i32::MAX),
        )?;
        // ZSTD_c_stableInBuffer.
        self.set(ZSTD_c_experimentalParam9, 1)
    }

    /// Compresses all of `input` as one frame into `out` (cleared first); its length.
    fn whole(&mut self, input: &[u8], out: &mut Vec<u8>) -> Option<usize> {
        out.clear();
        let cap = zstd::zstd_safe::compress_bound(input.len());
        out.reserve(cap);
        // SAFETY: `out` has room for `cap` bytes, `input` is readable; zstd writes at most `cap`.
        let n = ok(unsafe {
            zs::ZSTD_compress2(
                self.0.as_ptr(),
                out.as_mut_ptr().cast(),
                cap,
                input.as_ptr().cast(),
                input.len(),
            )
        })?;
        // SAFETY: zstd wrote `n` bytes.
        unsafe { out.set_len(n) };
        Some(n)
    }

    /// Feeds `input[pos..upto]` into the frame begun on `input` (the same slice every call, as
    /// `ZSTD_c_stableInBuffer` requires) and flushes (`end`: ends the frame) into `out` from `at`;
    /// the output's new end.
    fn feed(
        &mut self,
        input: &[u8],
        pos: usize,
        upto: usize,
        out: &mut [u8],
        at: usize,
        end: bool,
    ) -> Option<usize> {
        let mut inb = zs::ZSTD_inBuffer {
            src: input.as_ptr().cast(),
            size: upto,
            pos,
        };
        let mut outb = zs::ZSTD_outBuffer {
            dst: out.as_mut_ptr().cast(),
            size: out.len(),
            pos: at,
        };
        let mode = if end {
            zs::ZSTD_EndDirective::ZSTD_e_end
        } else {
            zs::ZSTD_EndDirective::ZSTD_e_flush
        };
        loop {
            // SAFETY: `inb` covers `input[..upto]`, readable; `outb` covers `out`, writable; zstd
            // moves the positions within those bounds.
            let left = ok(unsafe {
                zs::ZSTD_compressStream2(self.0.as_ptr(), &mut outb, &mut inb, mode)
            })?;
            if left == 0 && inb.pos == upto {
                return Some(outb.pos);
            }
            if outb.pos == outb.size {
                return None; // no room left: cannot happen, `out` holds a piece's bound
            }
        }
    }
}

/// A zstd result: `None` for an error code.
fn ok(r: usize) -> Option<usize> {
    // SAFETY: a pure function of its argument.
    (unsafe { zs::ZSTD_isError(r) } == 0).then_some(r)
}

/// zstd into at most `dst.len()` bytes: (input bytes consumed, bytes written), `None` when
/// nothing fits.
///
/// Input that may fit whole (at most twice the room, or a whole that the ratio of its first
/// 64 KiB says fits with 15% to spare) is compressed in one call, which gives zstd's best output.
/// Otherwise, and when that did not fit after all, the streaming encoder takes the input in
/// pieces (128 KiB, then smaller as the room fills, sized by the ratio so far), flushing after
/// each: the output of a flushed prefix is final, so when a piece overflows the room the frame is
/// ended after the piece before it, with the empty last block zstd itself writes to end a flushed
/// frame. So each input byte is compressed about once, where a search over prefixes
/// ([`fit_prefix`]) compressed it two to four times: on a Debian rootfs at level 12, 1 MiB
/// clusters, the build took 0.65 times as long and the image was 0.3% smaller (the pieces fill
/// the room closer; one call alone packs a little better, by zstd's pre-splitting of blocks,
/// which needs the input whole). The frames carry no content size: the kernel and erofs-utils
/// decode with zstd's streaming decoder, which needs none.
fn zstd_dest(
    ctx: &mut ZstdCtx,
    level: i32,
    input: &[u8],
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Option<(usize, usize)> {
    /// Input whose ratio decides whether the whole is compressed in one call.
    const PROBE: usize = 64 << 10;
    /// zstd's largest block: pieces are no larger, so a flush adds no block boundary of its own.
    const PIECE: usize = 128 << 10;
    /// A zstd frame ended after a flush: one empty raw block marked last.
    const EMPTY_LAST_BLOCK: [u8; 3] = [1, 0, 0];
    let room = dst.len();
    if room <= EMPTY_LAST_BLOCK.len() + 16 || input.is_empty() {
        return None;
    }
    let whole = |ctx: &mut ZstdCtx, dst: &mut [u8], scratch: &mut Vec<u8>| {
        ctx.start(level, input.len())?;
        let n = ctx.whole(input, scratch)?;
        if n <= room {
            dst[..n].copy_from_slice(&scratch[..n]);
        }
        Some(n)
    };
    // Bytes of output per byte of input, as far as known.
    let mut ratio = 1.0f64;
    // Whether the whole input was tried in one call, or the probe said it would not fit.
    let mut decided = input.len() <= 2 * room;
    if decided {
        let n = whole(ctx, dst, scratch)?;
        if n <= room {
            return Some((input.len(), n));
        }
        ratio = n as f64 / input.len() as f64;
    }
    'frame: loop {
        ctx.start(level, input.len())?;
        scratch.clear();
        scratch.resize(room + zstd::zstd_safe::compress_bound(PIECE), 0);
        let limit = room - EMPTY_LAST_BLOCK.len();
        // The last prefix that fit: (input consumed, output written).
        let (mut consumed, mut written) = (0usize, 0usize);
        loop {
            if consumed == input.len() {
                let n = ctx.feed(input, consumed, consumed, scratch, written, true)?;
                if n > room {
                    return None;
                }
                dst[..n].copy_from_slice(&scratch[..n]);
                return Some((consumed, n));
            }
            // Aim at 90% of the room left, and at half of it near the end, where one piece
            // too many ends the frame (its bytes cannot be taken back).
            let aim = if (limit - written) * 4 > room {
                0.9
            } else {
                0.5
            };
            let wanted = ((limit - written) as f64 / ratio * aim) as usize;
            let left = input.len() - consumed;
            let piece = wanted.min(if decided { PIECE } else { PROBE }).min(left);
            // Too little room left to be worth another block.
            if piece < 512.min(left) || piece == 0 {
                break;
            }
            let n = ctx.feed(input, consumed, consumed + piece, scratch, written, false)?;
            if n > limit {
                break;
            }
            (consumed, written) = (consumed + piece, n);
            ratio = n as f64 / consumed as f64;
            if !decided {
                decided = true;
                // The probe says the whole fits: one call instead, which packs better.
                if ratio * input.len() as f64 <= 0.85 * limit as f64 {
                    let n = whole(ctx, dst, scratch)?;
                    if n <= room {
                        return Some((input.len(), n));
                    }
                    ratio = n as f64 / input.len() as f64;
                    continue 'frame;
                }
            }
        }
        if consumed == 0 {
            return None;
        }
        dst[..written].copy_from_slice(&scratch[..written]);
        dst[written..written + EMPTY_LAST_BLOCK.len()].copy_from_slice(&EMPTY_LAST_BLOCK);
        return Some((consumed, written + EMPTY_LAST_BLOCK.len()));
    }
}

/// A bit of a DEFLATE stored block's header byte that inflaters skip (they go to the byte
/// boundary after BFINAL and BTYPE): set in a stream that would otherwise start with a zero byte.
const DEFLATE_STORED_PAD_BIT: u8 = 1 << 3;

/// An empty, non-final stored DEFLATE block: BFINAL 0 and BTYPE 00 (with [`DEFLATE_STORED_PAD_BIT`]
/// among the bits up to the byte boundary, so it does not start with a zero byte), then LEN 0 and
/// NLEN 0xffff. Inflaters pass over it, so put in front of a stream it makes the stream five bytes
/// longer and decodes to the same bytes (see [`crate::zdata`]'s placement of encoded extents).
pub(crate) const DEFLATE_EMPTY_BLOCK: [u8; 5] = [DEFLATE_STORED_PAD_BIT, 0, 0, 0xff, 0xff];

/// For compressors without a fixed-output mode (DEFLATE): searches for a long prefix of the
/// `src_len` input bytes whose whole compressed form fits in `dst`, which gets the longest one found.
/// `compress(len, scratch)` writes the compressed form of the first `len` bytes to the start of
/// `scratch` and returns its length (`None`: the compressor failed). Starts at four times the
/// room, then grows or shrinks by the measured ratio; at most ten trials, stopping once the blocks
/// a fitting one takes are 99% full (the rest of its last block is padding). Measured once on
/// linux-source-6.1's fs/ (42.6 MB, one thread) against the earlier rule (six trials, stop at 95%
/// of the room): DEFLATE at 4 KiB clusters 1.8% smaller (14.72 to 14.45 MB) for 40% more
/// compression time, zstd 1.1% smaller; at 64 KiB 0.15% and 0.1% smaller in the same time.
/// Returns (bytes consumed, bytes written), `None` when no prefix fit.
fn fit_prefix(
    src_len: usize,
    dst: &mut [u8],
    scratch: &mut Vec<u8>,
    mut compress: impl FnMut(usize, &mut Vec<u8>) -> Option<usize>,
) -> Option<(usize, usize)> {
    let room = dst.len();
    let mut len = src_len.min(room * 4);
    let mut best: Option<(usize, usize)> = None;
    for _ in 0..10 {
        let n = compress(len, scratch)?;
        let next = if n <= room {
            if best.is_none_or(|(l, _)| len > l) {
                dst[..n].copy_from_slice(&scratch[..n]);
                best = Some((len, n));
            }
            // Good enough once the blocks it takes are 99% full.
            let used = n.next_multiple_of(BLKSZ as usize);
            if len == src_len || (used - n) * 100 <= used {
                break;
            }
            (len as u128 * room as u128 * 99 / (n.max(1) as u128 * 100)) as usize
        } else {
            (len as u128 * room as u128 * 99 / (n as u128 * 100)) as usize
        };
        let next = next.clamp(1, src_len);
        if best.is_some_and(|(l, _)| next <= l) || next == len {
            break;
        }
        len = next;
    }
    best
}

/// MicroLZMA through liblzma's `lzma_microlzma_encoder`, as mkfs.erofs's `compressor_liblzma.c`:
/// the stream's first byte is the negated properties byte, never zero, so zero padding in front of
/// it is unambiguous. The encoder is re-initialized for every pcluster, which resets all of its
/// state (liblzma clears the match finder's hash table on init), so a reused stream gives the same
/// bytes as a fresh one (tested below).
fn lzma_dest(level: i32, dict_size: u32, input: &[u8], dst: &mut [u8]) -> Option<(usize, usize)> {
    let preset = match level {
        100.. => (level - 100) as u32 | lzma::LZMA_PRESET_EXTREME,
        _ => level as u32,
    };
    LZMA_STREAM.with_borrow_mut(|slot| {
        // SAFETY: an all-zero lzma_stream is LZMA_STREAM_INIT (null pointers, zero counts).
        let stream = slot.get_or_insert_with(|| LzmaStream(unsafe { std::mem::zeroed() }));
        let strm = &mut stream.0;
        // SAFETY: liblzma fills in `options` from the preset (a zeroed struct is a valid start); the
        // stream is initialized and owned by this thread; `next_in`/`next_out` point to `input` and
        // `dst`, readable and writable for the given counts, and are cleared before returning.
        let result = unsafe {
            let mut options: lzma::lzma_options_lzma = std::mem::zeroed();
            if lzma::lzma_lzma_preset(&mut options, preset) != 0 {
                return None;
            }
            options.dict_size = dict_size;
            if lzma::lzma_microlzma_encoder(strm, &options) != lzma::LZMA_OK {
                *slot = None;
                return None;
            }
            strm.next_in = input.as_ptr();
            strm.avail_in = input.len();
            strm.next_out = dst.as_mut_ptr();
            strm.avail_out = dst.len();
            let ret = lzma::lzma_code(strm, lzma::LZMA_FINISH);
            let done = (strm.total_in as usize, strm.total_out as usize);
            strm.next_in = std::ptr::null();
            strm.avail_in = 0;
            strm.next_out = std::ptr::null_mut();
            strm.avail_out = 0;
            (ret == lzma::LZMA_STREAM_END).then_some(done)
        };
        if result.is_none() {
            *slot = None;
        }
        result.filter(|&(consumed, written)| consumed > 0 && written > 0 && written <= dst.len())
    })
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
            match compress_dest(opts, chunk, &mut dst) {
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

/// Cuts `data`, the segment starting at `seg_start`, into extents stored as they are, without trying
/// to compress them (a file a [`crate::CompressRule`] stores): one per logical cluster of a
/// fixed-input build, else one per block.
pub(crate) fn store_segment(opts: &CompressOptions, data: &[u8], seg_start: u64) -> Vec<ZExtent> {
    let unit = match opts.extents_48bit {
        true => 1usize << fixed_lcluster_bits(opts),
        false => BLKSZ as usize,
    };
    data.chunks(unit)
        .enumerate()
        .map(|(i, chunk)| ZExtent {
            start: seg_start + (i * unit) as u64,
            len: chunk.len() as u64,
            plain: true,
            data: chunk.to_vec(),
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
    compress_segment_anchored(opts, data, seg_start, file_size, &[])
}

/// [`compress_segment`], but an extent that would end past one of `anchors` (file offsets, in
/// order) ends at the last of them instead, where it can: so where the data before an anchor
/// changes, the extents after it can still be the same (the packed inode's pieces,
/// [`crate::Placement::packed_pieces`]).
pub(crate) fn compress_segment_anchored(
    opts: &CompressOptions,
    data: &[u8],
    seg_start: u64,
    file_size: u64,
    anchors: &[u64],
) -> Vec<ZExtent> {
    if opts.extents_48bit {
        return compress_fixed(opts, data, seg_start);
    }
    let full = opts.pcluster_bytes as usize;
    DST.with_borrow_mut(|dst| {
        // Reused, never zeroed again: a fresh zeroed megabyte per call (a file or segment each)
        // was 14% of a 1 MiB zstd build of the linux tree, in memset (glibc serves it from the
        // heap once a freed one raised its mmap threshold).
        if dst.len() < full {
            dst.resize(full, 0);
        }
        cut_segment(opts, data, seg_start, file_size, anchors, &mut dst[..full])
    })
}

/// [`compress_segment`] with `dst` (one pcluster of room) to compress into.
fn cut_segment(
    opts: &CompressOptions,
    data: &[u8],
    seg_start: u64,
    file_size: u64,
    anchors: &[u64],
    dst: &mut [u8],
) -> Vec<ZExtent> {
    let b = BLKSZ as usize;
    let seg_end = seg_start + data.len() as u64;
    let mut out = Vec::new();
    let full = dst.len();
    // Room of the next try. Every try compresses about a room's worth of input (more for
    // compressible data), and data that does not compress gives one PLAIN block per try: with the
    // whole pcluster as room, an incompressible megabyte at 1 MiB clusters would cost 256
    // compressions of a megabyte each (minutes with lzma or zstd at high levels). So the room halves
    // after each PLAIN block, down to one block, and is whole again after a compressed extent.
    let mut room = full;
    let mut pos = 0usize;
    while pos < data.len() {
        let start = seg_start + pos as u64;
        let head = start / BLKSZ;
        let mut cap = room;
        let mut chosen = None;
        // At most a block left: compressed, it still takes a block, and saves none (below), so it
        // is not compressed at all (as mkfs.erofs does not). In the linux tree, 40,000 files.
        let may_save = data.len() - pos > b;
        // After a PLAIN block the data ahead is likely not to compress either, and a compressor
        // that finds no match reads on without writing: liblz4's destSize mode reads to the first
        // match, which in incompressible data is the end of its input, only to keep a room's worth.
        // A try per block over the rest of the segment made a 64 KiB lz4hc build of `rootfs` spend
        // 11 of its 15 s of CPU on 34 MB of such data. So such tries see at most twice their room
        // and a block (compressible data ahead is found there; the room is whole again after it).
        let input_end = match room < full {
            true => (pos + 2 * cap + b).min(data.len()),
            false => data.len(),
        };
        while may_save && cap >= b {
            let Some((mut consumed, mut written)) =
                compress_dest(opts, &data[pos..input_end], &mut dst[..cap])
            else {
                break;
            };
            // Short of the segment's end: cut back to the last anchor inside, in a later
            // lcluster (the next extent's head must be), when its input alone fits (it nearly
            // always does: a prefix of what fit).
            let first = anchors.partition_point(|&a| a / BLKSZ <= head);
            let last = anchors.partition_point(|&a| a < start + consumed as u64);
            let short = pos + consumed < data.len();
            if let Some(&a) = anchors
                .get(first..last)
                .filter(|_| short)
                .and_then(|a| a.last())
            {
                let n = (a - start) as usize;
                match compress_dest(opts, &data[pos..pos + n], &mut dst[..cap]) {
                    Some((c, w)) if c == n => (consumed, written) = (c, w),
                    _ => {
                        // (`dst` holds that try now: the first is made again.)
                        let Some(again) =
                            compress_dest(opts, &data[pos..input_end], &mut dst[..cap])
                        else {
                            break;
                        };
                        (consumed, written) = again;
                    }
                }
            }
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
        room = match chosen {
            Some(_) => full,
            None => (room / 2).next_multiple_of(b).max(b),
        };
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
    use std::cell::Cell;

    thread_local! {
        /// Output room of every compression tried on this thread, added up.
        pub(super) static ROOM_TRIED: Cell<usize> = const { Cell::new(0) };
        /// Input offered to every compression tried on this thread, added up.
        pub(super) static INPUT_SEEN: Cell<usize> = const { Cell::new(0) };
    }

    #[test]
    fn incompressible_data_costs_compressions_in_proportion_to_its_size() {
        // Noise, then text: 256 PLAIN blocks, then compressed extents again.
        let mut x = 8u64;
        let mut data: Vec<u8> = (0..256 * 4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let text = shapes(8).swap_remove(3);
        data.extend_from_slice(&text);
        data.extend_from_slice(&text);
        for alg in [
            Algorithm::Lz4,
            Algorithm::Lz4Hc(9),
            Algorithm::Zstd(3),
            Algorithm::Lzma(6),
            Algorithm::Deflate(6),
        ] {
            let opts = mb(alg);
            ROOM_TRIED.set(0);
            INPUT_SEEN.set(0);
            let exts = compress_segment(&opts, &data, 0, data.len() as u64);
            check_rules(&exts, data.len() as u64);
            let plain = exts.iter().filter(|e| e.plain).count();
            assert!(plain >= 250, "{alg:?}: {plain} PLAIN blocks");
            assert!(
                exts.iter()
                    .any(|e| !e.plain && e.start >= 1 << 20 && e.data.len() > 3 * 4096),
                "{alg:?}: the text after the noise gets multi-block pclusters again"
            );
            // Whole 1 MiB rooms for each of the 256 blocks would be 256 MiB.
            assert!(
                ROOM_TRIED.get() < 8 << 20,
                "{alg:?}: {} bytes of room",
                ROOM_TRIED.get()
            );
            // The rest of the segment offered to each of the 256 tries would be about 128 MiB
            // (liblz4 HC reads all of it, looking for a match in the noise).
            assert!(
                INPUT_SEEN.get() < 8 << 20,
                "{alg:?}: {} bytes of input offered",
                INPUT_SEEN.get()
            );
        }
    }

    /// `alg` with 1 MiB clusters.
    fn mb(algorithm: Algorithm) -> CompressOptions {
        CompressOptions {
            algorithm,
            pcluster_bytes: 1 << 20,
            fragments: Fragments::Off,
            extents_48bit: false,
            dedupe: false,
            compress_dirs: false,
            metabox: None,
        }
    }

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
                        let ours = compress_dest(&mb(Algorithm::Lz4Hc(level)), &input, &mut dst)
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
            let (consumed, _) = compress_dest(&mb(Algorithm::Lz4Hc(9)), &zeros, &mut dst).unwrap();
            assert_eq!(consumed, zeros.len());
            if i % 16 == 0 {
                let ours = compress_dest(&mb(Algorithm::Lz4Hc(9)), &text, &mut dst[..65536])
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

    /// Anchored cuts (the packed inode's pieces): an extent short of the segment's end ends at the
    /// last anchor it reached, and so an edit before an anchor leaves the extents after the
    /// first cut at or after the edit the same, where unanchored ones all move.
    #[test]
    fn extents_end_at_anchors_and_an_edit_before_one_moves_no_later_extent() {
        // Half-compressible text (zstd about 2:1): 4 MiB is several 256 KiB pclusters.
        let mut rng = 0x9e37_79b9u64;
        let mut data = Vec::new();
        while data.len() < 4 << 20 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            data.extend_from_slice(format!("{:x} {} ", rng >> 40, rng % 1000).as_bytes());
        }
        data.truncate(4 << 20);
        let size = data.len() as u64;
        let anchors: Vec<u64> = (1..size / 70_001).map(|k| k * 70_001 + k % 13).collect();
        let opts = mb_with(Algorithm::Zstd(3), 256 << 10);
        let mut edited = data.clone();
        edited[5000..5600].fill(b'z');
        for (what, anchors) in [("anchored", &anchors[..]), ("unanchored", &[][..])] {
            let a = compress_segment_anchored(&opts, &data, 0, size, anchors);
            let b = compress_segment_anchored(&opts, &edited, 0, size, anchors);
            check_rules(&a, size);
            check_rules(&b, size);
            assert!(a.len() >= 6, "{what}: {} extents", a.len());
            let key = |x: &ZExtent| (x.start, x.len, x.plain, x.data.clone());
            let same = b
                .iter()
                .filter(|x| a.iter().any(|y| key(y) == key(x)))
                .count();
            if anchors.is_empty() {
                assert!(same <= 1, "{what}: {same} extents unchanged of {}", a.len());
                continue;
            }
            for x in &a[..a.len() - 1] {
                let end = x.start + x.len;
                assert!(
                    anchors.contains(&end),
                    "{what}: an extent ends at {end}, no anchor"
                );
            }
            assert!(
                same + 2 >= a.len(),
                "{what}: {same} extents unchanged of {}",
                a.len()
            );
        }
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
        for alg in [
            Algorithm::Lz4,
            Algorithm::Lz4Hc(9),
            Algorithm::Zstd(3),
            Algorithm::Lzma(6),
            Algorithm::Deflate(6),
        ] {
            for pcluster in [4096u32, 65536, 1 << 20] {
                let opts = CompressOptions {
                    algorithm: alg,
                    pcluster_bytes: pcluster,
                    fragments: Fragments::Off,
                    extents_48bit: false,
                    dedupe: false,
                    compress_dirs: false,
                    metabox: None,
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
        assert_eq!(Algorithm::parse("lzma"), Ok(Algorithm::Lzma(6)));
        assert_eq!(Algorithm::parse("lzma,0"), Ok(Algorithm::Lzma(0)));
        assert_eq!(Algorithm::parse("lzma,level=109"), Ok(Algorithm::Lzma(109)));
        assert_eq!(Algorithm::parse("deflate"), Ok(Algorithm::Deflate(6)));
        assert_eq!(Algorithm::parse("deflate,12"), Ok(Algorithm::Deflate(12)));
        for bad in [
            "lzma,10",
            "lzma,99",
            "lzma,110",
            "lzma,-1",
            "deflate,0",
            "deflate,13",
        ] {
            let e = Algorithm::parse(bad).unwrap_err();
            assert!(e.contains("outside"), "{bad}: {e}");
        }
        assert!(Algorithm::parse("lzma,x").is_err());
        assert!(mb(Algorithm::Lzma(50)).validate().is_err());
        assert!(mb(Algorithm::Deflate(0)).validate().is_err());
        assert!(mb(Algorithm::Zstd(23)).validate().is_err());
        assert_eq!(mb(Algorithm::Lzma(109)).validate(), Ok(()));
        assert_eq!(Algorithm::Lzma(6).id(), fmt::Z_EROFS_COMPRESSION_LZMA);
        assert_eq!(Algorithm::Deflate(6).id(), fmt::Z_EROFS_COMPRESSION_DEFLATE);
    }

    #[test]
    fn lzma_dictionary_follows_the_cluster_size_within_the_kernels_limits() {
        let dict = |p| mb_with(Algorithm::Lzma(6), p).lzma_dict_size();
        assert_eq!(dict(4096), 32 << 10);
        assert_eq!(dict(65536), 256 << 10);
        assert_eq!(dict(1 << 20), 4 << 20);
        for p in (4096..=1 << 20).step_by(4096) {
            let d = dict(p);
            assert!(
                (fmt::Z_EROFS_LZMA_MIN_DICT_SIZE..=fmt::Z_EROFS_LZMA_MAX_DICT_SIZE).contains(&d)
            );
            assert!(d as u64 >= SEGMENT.min(4 * p as u64), "pcluster {p}");
        }
    }

    fn mb_with(algorithm: Algorithm, pcluster_bytes: u32) -> CompressOptions {
        CompressOptions {
            algorithm,
            pcluster_bytes,
            fragments: Fragments::Off,
            extents_48bit: false,
            dedupe: false,
            compress_dirs: false,
            metabox: None,
        }
    }

    /// Decodes a whole MicroLZMA stream of exactly `out_len` bytes with liblzma's decoder (what
    /// the reader and, with XZ Embedded, the kernel do).
    fn unlzma(stream: &[u8], out_len: usize, dict_size: u32) -> Vec<u8> {
        let mut out = vec![0u8; out_len];
        // SAFETY: a zeroed stream is LZMA_STREAM_INIT; the pointers cover the slices' lengths.
        unsafe {
            let mut s = LzmaStream(std::mem::zeroed());
            let r = lzma::lzma_microlzma_decoder(
                &mut s.0,
                stream.len() as u64,
                out_len as u64,
                1,
                dict_size,
            );
            assert_eq!(r, lzma::LZMA_OK);
            s.0.next_in = stream.as_ptr();
            s.0.avail_in = stream.len();
            s.0.next_out = out.as_mut_ptr();
            s.0.avail_out = out.len();
            let r = lzma::lzma_code(&mut s.0, lzma::LZMA_FINISH);
            assert_eq!(r, lzma::LZMA_STREAM_END, "MicroLZMA stream decodes");
            assert_eq!(s.0.total_out as usize, out_len);
            s.0.next_in = std::ptr::null();
            s.0.next_out = std::ptr::null_mut();
        }
        out
    }

    /// What a fresh MicroLZMA encoder gives (as mkfs.erofs does it, one stream per compressor).
    fn reference_lzma(
        level: i32,
        dict_size: u32,
        input: &[u8],
        room: usize,
    ) -> Option<(usize, Vec<u8>)> {
        // The thread-local encoder of another thread is fresh.
        let input = input.to_vec();
        std::thread::spawn(move || {
            let mut dst = vec![0u8; room];
            lzma_dest(level, dict_size, &input, &mut dst).map(|(c, n)| (c, dst[..n].to_vec()))
        })
        .join()
        .unwrap()
    }

    #[test]
    fn lzma_reused_encoder_matches_a_fresh_one_and_decodes() {
        for (level, pcluster) in [(6, 4096u32), (6, 65536), (9, 1 << 20), (106, 65536)] {
            let opts = mb_with(Algorithm::Lzma(level), pcluster);
            let dict = opts.lzma_dict_size();
            // Inputs one after another on this thread: the encoder is reused, dirty from the last.
            for input in shapes(4).into_iter().chain(shapes(5)) {
                let input = &input[..input.len().min(SEGMENT as usize)];
                let mut dst = vec![0u8; pcluster as usize];
                let ours =
                    compress_dest(&opts, input, &mut dst).map(|(c, n)| (c, dst[..n].to_vec()));
                let want = reference_lzma(level, dict, input, pcluster as usize);
                assert!(
                    ours == want,
                    "level {level}, room {pcluster}, {} bytes",
                    input.len()
                );
                if let Some((consumed, stream)) = ours {
                    assert_ne!(stream[0], 0, "a MicroLZMA stream never starts with 0");
                    assert_eq!(unlzma(&stream, consumed, dict), input[..consumed]);
                }
            }
        }
    }

    #[test]
    fn deflate_fits_decodes_and_never_starts_with_a_zero_byte() {
        use std::io::Read;
        // Noise first, then zeros: libdeflate starts with a stored block, whose first byte is 0
        // unless the padding bit is set.
        let mut noisy_start = shapes(6).swap_remove(4);
        noisy_start.extend(std::iter::repeat_n(0u8, 1 << 20));
        for level in [1, 6, 12] {
            let lvl = libdeflater::CompressionLvl::new(level).unwrap();
            let mut c = libdeflater::Compressor::new(lvl);
            let mut raw = vec![0u8; c.deflate_compress_bound(noisy_start.len())];
            c.deflate_compress(&noisy_start, &mut raw).unwrap();
            assert_eq!(
                raw[0], 0,
                "level {level}: the input exercises the zero first byte"
            );
        }
        let mut starts_stored = 0;
        for level in [1, 6, 12] {
            for pcluster in [4096u32, 65536, 1 << 20] {
                let opts = mb_with(Algorithm::Deflate(level), pcluster);
                for input in shapes(7).into_iter().chain([noisy_start.clone()]) {
                    let input = &input[..input.len().min(SEGMENT as usize)];
                    let mut dst = vec![0u8; pcluster as usize];
                    let Some((consumed, n)) = compress_dest(&opts, input, &mut dst) else {
                        continue;
                    };
                    assert!(n <= pcluster as usize && consumed <= input.len());
                    assert_ne!(dst[0], 0);
                    starts_stored += usize::from(dst[0] == DEFLATE_STORED_PAD_BIT);
                    // flate2 (miniz_oxide) is the reader's inflater.
                    let mut out = Vec::new();
                    flate2::read::DeflateDecoder::new(&dst[..n])
                        .read_to_end(&mut out)
                        .unwrap();
                    assert!(out == input[..consumed], "level {level}, room {pcluster}");
                    // The same input again (a used compressor) gives the same bytes.
                    let mut again = vec![0u8; pcluster as usize];
                    assert_eq!(compress_dest(&opts, input, &mut again), Some((consumed, n)));
                    assert_eq!(again[..n], dst[..n]);
                }
            }
        }
        assert!(starts_stored > 0, "some stream started with a stored block");
    }

    #[test]
    fn prefix_search_keeps_the_longest_fit() {
        // A fake compressor: output is half the input plus 10 bytes.
        let mut dst = vec![0u8; 1000];
        let mut scratch = Vec::new();
        let got = fit_prefix(100_000, &mut dst, &mut scratch, |len, s| {
            s.clear();
            s.resize(len / 2 + 10, 7);
            Some(s.len())
        });
        let (len, n) = got.unwrap();
        assert!(n <= 1000 && n == len / 2 + 10 && n >= 980, "{len} {n}");
        // Blocks 99% full are good enough: a shorter prefix that fills its block is kept.
        let mut dst = vec![0u8; 3 * 4096];
        let mut tries = 0;
        let got = fit_prefix(1 << 20, &mut dst, &mut scratch, |len, s| {
            tries += 1;
            s.clear();
            s.resize((len / 4).min(2 * 4096 + 4090), 7);
            Some(s.len())
        });
        assert_eq!(got.map(|(_, n)| n), Some(2 * 4096 + 4090));
        assert!(tries <= 3, "{tries} tries");
        // Nothing fits.
        let got = fit_prefix(100, &mut dst[..4], &mut scratch, |len, s| {
            s.clear();
            s.resize(len + 10, 7);
            Some(s.len())
        });
        assert_eq!(got, None);
    }

    /// zstd input that does not fit whole is cut in one streaming pass: the frame ends (with
    /// zstd's empty last block) after the last piece that fit, fills its room closely, and decodes
    /// to exactly the input it claims; input that fits is one call's frame (it decodes whole);
    /// noise that fits nowhere gives `None`.
    #[test]
    fn zstd_frames_are_cut_after_the_last_piece_that_fits() {
        let noise = tests_noise(3 << 20, 11);
        let text = shapes(9).swap_remove(3).repeat(3);
        let mut half = Vec::new();
        for k in 0..(2 << 20) / 2048 {
            half.extend_from_slice(&noise[k * 2048..(k + 1) * 2048]);
            half.extend_from_slice(&text[(k * 2048) % (text.len() - 2048)..][..2048]);
        }
        let decode = |frame: &[u8], len: usize| {
            let mut d = zstd::stream::raw::Decoder::new().unwrap();
            let mut out = vec![0u8; len + 1];
            let mut inb = zstd::stream::raw::InBuffer::around(frame);
            let mut outb = zstd::stream::raw::OutBuffer::around(&mut out[..]);
            let left = zstd::stream::raw::Operation::run(&mut d, &mut inb, &mut outb).unwrap();
            assert_eq!(left, 0, "the frame is complete");
            let n = outb.pos();
            out.truncate(n);
            out
        };
        for (level, room) in [(3, 1 << 20), (12, 1 << 20), (3, 65536), (19, 16384)] {
            let opts = CompressOptions {
                algorithm: Algorithm::Zstd(level),
                ..mb(Algorithm::Zstd(level))
            };
            let mut dst = vec![0u8; room];
            let (consumed, n) = compress_dest(&opts, &half, &mut dst).expect("fits");
            assert!(consumed < half.len(), "level {level}, room {room}: cut");
            assert!(
                n <= room && n * 100 >= room * 95,
                "level {level}: {n} of {room} bytes"
            );
            assert_eq!(&dst[n - 3..n], &[1, 0, 0], "ended by an empty last block");
            assert!(
                decode(&dst[..n], half.len()) == half[..consumed],
                "level {level}, room {room}"
            );
            // Text that fits whole: one call, the whole input.
            let (consumed, n) = compress_dest(&opts, &text[..room], &mut dst).expect("fits");
            assert_eq!(consumed, room);
            assert!(decode(&dst[..n], room) == text[..room]);
        }
        let mut dst = vec![0u8; 65536];
        let got = compress_dest(&mb(Algorithm::Zstd(3)), &noise[..4096], &mut dst[..4096]);
        assert!(got.is_none_or(|(c, n)| n <= 4096 && c <= 4096), "{got:?}");
    }

    fn tests_noise(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }
}
