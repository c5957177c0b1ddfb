//! Readahead into the store of a [`VerifiedBlocks`]: the background fetchers and what they fetch,
//! in this order of priority:
//! 1. pieces a read is waiting for (it asked for blocks that were queued, not yet fetched);
//! 2. the windows kept ahead of sequential streams, and the metadata a walk fills ahead
//!    ([`BlockSource::fill`]);
//! 3. prefetch lists ([`BlockSource::prefetch`]: the files `cat` and `extract` will read, a
//!    replayed access profile);
//! 4. the rest of the image ([`FillMode`]), only when nothing else waits; started by
//!    [`VerifiedBlocks::fill_when_quiet`] (a mount's), it first waits for a reader to come and
//!    then fetch nothing for [`FILL_QUIET`], or for [`FILL_UNREAD`] without one (a container
//!    starting on a layer just mounted finds the link its own), and streams' windows stay small
//!    meanwhile ([`YOUNG_WINDOW_BYTES`], for at most [`YOUNG_FOR`] of reads).
//!
//! Everything is fetched in pieces of at most [`PIECE_BYTES`], and only so many pieces are in
//! flight at once: about a bandwidth-delay product of the link ([`super::link`]) plus a piece for
//! the streams (enough to keep the link busy), and no more than one bandwidth-delay product for
//! the fill, so that a read that needs the link finds at most a request's worth of the fill's
//! bytes queued ahead of its own. Every block fetched here goes through
//! [`VerifiedBlocks::read_checked`], so it is verified (and stored) like a block a read asked for.

use super::autofill::{fits, Scatter};
use super::*;
use std::collections::VecDeque;
use std::time::Instant;

/// A sequential stream of reads, for readahead.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stream {
    /// Where the next read of the stream would start.
    next: u64,
    /// Blocks to keep fetched ahead of it.
    window: u64,
    /// Where what was asked to be fetched ahead ends.
    ahead_end: u64,
}

/// Streams tracked at once (a FUSE mount reads several files in parallel).
pub(super) const STREAMS: usize = 16;

/// The stream a read of blocks `first..first + n` continues, if any: one whose end it is within a
/// window of (a FUSE mount's readahead arrives on several threads, not always in order), the
/// nearest of them. A stream's window reaches far once it has grown (64 MiB), and a read of a
/// second stream nearby (a compressed file's index, read at the end of the image as the file's
/// data is) taken as the first's moved the first's end past its next reads, which were then
/// behind it: it stopped fetching ahead.
fn nearest_stream(streams: &[Stream], first: u64, n: u64) -> Option<usize> {
    (0..streams.len())
        .filter(|&i| {
            let s = &streams[i];
            first + n > s.next.saturating_sub(s.window) && first <= s.next + s.window
        })
        .min_by_key(|&i| streams[i].next.abs_diff(first))
}

/// What a stream's window is multiplied by at each read that follows on exactly: from 16 blocks
/// to 64 MiB in five reads, each of which may wait a round trip for its blocks (doubling took
/// ten; in three interleaved runs of `bench/remote.py seq`, 2.79, 2.46 and 3.02 s against 2.54,
/// 2.46 and 2.47 s with this).
const WINDOW_GROWTH: u64 = 4;

/// Bytes of one piece, the unit of every background fetch (2 MiB, one request of a remote object):
/// a read waits for the piece it needs, not for a whole window (which grows to 64 MiB, half a
/// second of a 1 Gbit/s link), and a read that needs the link finds at most a few pieces of the
/// background's queued ahead of it there.
pub(super) const PIECE_BYTES: u64 = 2 << 20;

/// Background fetchers a remote image's readahead uses: the most pieces ever in flight at once,
/// 24 MiB. A sequential read of a 1.36 GB file over the emulated link (`bench/remote.py seq`:
/// 20 ms, 1 Gbit/s, a bandwidth-delay product of 2.5 MB) used 81% of the link with 4 pieces in
/// flight, 86% with 6, 80-89% with 8, 91% with 12 and 90% with 16 (single runs): a piece is
/// verified and stored between its last byte and the next request, and a stream's reader
/// decompresses while the link carries the next pieces.
pub const READAHEAD_FETCHERS: usize = 12;

/// The longest a stream's pieces in flight take to cross the link at its measured rate (so a
/// read of something else waits behind them no longer than this): 200 ms, twelve pieces at
/// 1 Gbit/s, two at 100 Mbit/s.
const STREAM_IN_FLIGHT: std::time::Duration = std::time::Duration::from_millis(200);

/// After a read fetched blocks, the fill starts no piece for this long, or for two of the link's
/// round trips if that is longer (at most [`FILL_YIELD_MAX`]): a read whose next request depends
/// on its first (a compressed file's index, then its data) then finds no new fill piece on the
/// link ahead of that one too. While reads are fetching, the fill starts no piece at all.
const FILL_YIELD: std::time::Duration = std::time::Duration::from_millis(50);
/// See [`FILL_YIELD`].
const FILL_YIELD_MAX: std::time::Duration = std::time::Duration::from_millis(500);

/// While the fill has no measure of the link's rate, and every this many fill pieces after, a fill
/// piece waits until nothing else is in flight: alone on the link, its time gives the rate.
const FILL_ALONE_EVERY: u64 = 32;

/// [`VerifiedBlocks::fill_when_quiet`]'s fill starts once reads, after it was asked for, have
/// fetched blocks and then fetched nothing for this long: while a program starts on a new mount,
/// its reads come closer together than this, and each would otherwise find the fill's pieces on
/// the link ahead of it (docs/benchmarks.md, "Lazy layers: metadata in a few requests, the fill
/// held back").
pub const FILL_QUIET: std::time::Duration = std::time::Duration::from_secs(2);

/// [`VerifiedBlocks::fill_when_quiet`]'s fill starts this long after it was asked for when no
/// read has fetched anything meanwhile (a layer mounted at a pull, its container not started).
pub const FILL_UNREAD: std::time::Duration = std::time::Duration::from_secs(10);

/// The most bytes a stream's window reaches while a fill is held ([`FILL_QUIET`]: the mount is
/// young, a program starting on it): 1 MiB rather than 64 MiB (python's start read its 128 MB
/// layer whole through the windows). On the bench's python start, 2 MiB, 1 MiB and 512 KiB took
/// the same time (2.96, 2.94-2.95, 2.92 s) and fetched 47.8, 34.5 and 26.8 MB before its line;
/// a stream that goes on reading keeps the fill held and its window this small (about 50 MB/s
/// at a 20 ms round trip) for [`YOUNG_FOR`], so not smaller (docs/benchmarks.md, "Lazy layers:
/// metadata in a few requests, the fill held back").
pub const YOUNG_WINDOW_BYTES: u64 = 1 << 20;

/// ... for at most this long after the first read that fetched blocks: a program that goes on
/// reading past its start (a large file read whole) gets the windows of any stream again, while
/// the fill stays held until its reads leave the link free.
pub const YOUNG_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// What a job is for, in order of priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// A read is waiting for it.
    Waited,
    /// A stream's window, or blocks a walk fills ahead and waits for.
    Stream,
    /// A prefetch list.
    Prefetch,
    /// The rest of the image.
    Fill,
}

/// One job of the background fetchers: blocks `start..end` to fetch ahead.
#[derive(Clone, Copy, Debug)]
struct Job {
    start: u64,
    end: u64,
    class: Class,
    /// Order of queueing, within a class.
    seq: u64,
    /// Registered as in flight when queued (a stream's window, which the stream's next reads wait
    /// for) rather than when started (a long prefetch list, which reads must not queue behind).
    registered: bool,
    /// Handed over to the stream's reader in memory once verified ([`Handoff`]).
    hand_over: bool,
}

/// The fill's progress.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FillState {
    /// No fill: [`FillMode::Off`], or no store.
    #[default]
    Off,
    /// [`FillMode::Auto`], waiting for reads to scatter.
    Armed,
    /// [`FillMode::Auto`], but the image would not fit the store's bound: never started.
    TooLarge,
    /// Fetching the blocks the store lacks, in order.
    Running,
    /// Every block was fetched (or found in the store), or readahead was settled.
    Done,
}

impl std::fmt::Display for FillState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FillState::Off => "off",
            FillState::Armed => "armed",
            FillState::TooLarge => "too large for the cache",
            FillState::Running => "running",
            FillState::Done => "done",
        })
    }
}

/// The fetchers' queue, what they have in flight, and the fill.
struct Sched {
    /// The process whose fetchers these are (a forked child starts its own).
    pid: u32,
    queue: Vec<Job>,
    running: usize,
    seq: u64,
    /// New jobs are refused, queued ones dropped ([`VerifiedBlocks::settle_readahead`]).
    settling: bool,
    /// The verifying source is gone: the fetchers end.
    closed: bool,
    fill: FillState,
    /// The next block the fill looks at.
    fill_next: u64,
    /// Fill pieces started.
    fill_pieces: u64,
    /// The fill piece that is to wait until nothing else is in flight, if one is.
    fill_alone: bool,
    /// When [`VerifiedBlocks::fill_when_quiet`] asked for the fill, while it waits
    /// ([`FILL_QUIET`], [`FILL_UNREAD`]).
    fill_held: Option<Instant>,
    /// When a read last fetched blocks, since the fill was asked for.
    last_demand: Option<Instant>,
    /// When a read first fetched blocks, since the fill was asked for ([`YOUNG_FOR`]).
    first_demand: Option<Instant>,
    /// Reads registered ([`VerifiedBlocks::register_read`]) and not yet done: the fill starts no
    /// piece meanwhile ([`FILL_YIELD`]).
    reads: usize,
}

/// What the fetchers share with the [`Readahead`]: they hold no strong reference to the
/// verifying source while they wait, so it can be dropped (and they end).
struct Shared {
    sched: Mutex<Sched>,
    /// A job was queued, a slot freed, or the fill started.
    work: Condvar,
    /// A job ended (settling and fill waiters watch this).
    ended: Condvar,
    link: Arc<super::link::Link>,
    /// Blocks of a piece ([`PIECE_BYTES`]).
    piece: u64,
    /// The fetchers this process started, each with its [`FETCHER`] number, joined by
    /// [`VerifiedBlocks::close_readahead`].
    threads: Mutex<Vec<(u64, std::thread::JoinHandle<()>)>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Sched> {
        lock_any(&self.sched)
    }

    /// Pieces that may be in flight for streams, prefetch lists and waited reads: all the
    /// fetchers, or, once the link's rate is measured, what it carries in [`STREAM_IN_FLIGHT`]
    /// (at least two).
    fn stream_limit(&self) -> usize {
        match self.link.estimate() {
            Some((_, rate)) => ((rate * STREAM_IN_FLIGHT.as_secs_f64() / PIECE_BYTES as f64).ceil()
                as usize)
                .clamp(2, READAHEAD_FETCHERS),
            None => READAHEAD_FETCHERS,
        }
    }

    /// Pieces that may be in flight when one is the fill's: one, and as many more as the link's
    /// bandwidth-delay product holds whole. A read that needs the link then waits behind at most
    /// the fill's bytes in flight, which take no longer to cross it than one request of a piece
    /// (a round trip and a piece's transfer).
    fn fill_limit(&self) -> usize {
        match self.link.bdp() {
            Some(bdp) => (1 + (bdp / PIECE_BYTES as f64).floor() as usize).min(READAHEAD_FETCHERS),
            None => 1,
        }
    }

    /// How much longer a held fill waits ([`FILL_QUIET`] after the last read that fetched, or
    /// [`FILL_UNREAD`] after it was asked for when none did); `None` when it is not held (or
    /// need wait no longer).
    fn fill_hold(&self, s: &Sched) -> Option<std::time::Duration> {
        let asked = s.fill_held?;
        let wait = match s.last_demand {
            Some(read) => FILL_QUIET.checked_sub(read.elapsed()),
            None => FILL_UNREAD.checked_sub(asked.elapsed()),
        };
        wait.filter(|d| !d.is_zero())
    }

    /// How much longer the fill yields to a read that fetched ([`FILL_YIELD`]); `None` when it
    /// need not.
    fn fill_yield(&self, s: &Sched) -> Option<std::time::Duration> {
        let read = s.last_demand?;
        let round_trip = self
            .link
            .estimate()
            .map_or(Default::default(), |(rt, _)| rt);
        let span = FILL_YIELD.max(round_trip * 2).min(FILL_YIELD_MAX);
        span.checked_sub(read.elapsed()).filter(|d| !d.is_zero())
    }

    /// How much longer the fill waits, held ([`Shared::fill_hold`]) or yielding to a read
    /// ([`Shared::fill_yield`]).
    fn fill_wait(&self, s: &Sched) -> Option<std::time::Duration> {
        self.fill_hold(s).or_else(|| self.fill_yield(s))
    }

    /// The next job to start, if one may start now.
    fn pick(&self, s: &mut Sched, whole: u64) -> Option<Job> {
        if let Some(i) = (0..s.queue.len()).min_by_key(|&i| (s.queue[i].class, s.queue[i].seq)) {
            if s.running >= self.stream_limit() {
                return None;
            }
            return Some(s.queue.swap_remove(i));
        }
        if s.fill != FillState::Running || s.settling || s.reads > 0 || self.fill_wait(s).is_some()
        {
            return None;
        }
        s.fill_held = None;
        if s.fill_next >= whole {
            // Done once its last pieces have landed, not when they are sent for: a caller that
            // waits for it (`fill_all`, `sealfs stats`) may then go offline.
            if s.running > 0 {
                return None;
            }
            s.fill = FillState::Done;
            self.ended.notify_all();
            return None;
        }
        let alone = s.fill_alone || !self.link.has_rate();
        if s.running >= self.fill_limit() || (alone && s.running > 0) {
            return None;
        }
        s.fill_alone = false;
        s.fill_pieces += 1;
        if s.fill_pieces.is_multiple_of(FILL_ALONE_EVERY) {
            s.fill_alone = true;
        }
        let start = s.fill_next;
        s.fill_next = (start + self.piece).min(whole);
        s.seq += 1;
        Some(Job {
            start,
            end: s.fill_next,
            class: Class::Fill,
            seq: s.seq,
            registered: false,
            hand_over: false,
        })
    }
}

/// Readahead into the store: its settings, the streams seen, the background fetchers.
pub(super) struct Readahead {
    min: u64,
    max: u64,
    streams: Mutex<Vec<Stream>>,
    shared: Arc<Shared>,
    /// The verifying source, for fetchers started later.
    me: Weak<VerifiedBlocks>,
    /// Ranges being fetched (by the fetchers, or by reads), and stream pieces queued: a read that
    /// needs one waits for it rather than fetching the same blocks again.
    inflight: Mutex<Vec<(u64, u64)>>,
    landed: Condvar,
    /// Blocks queued for or being fetched by this process's fetchers, a bit each (given back when
    /// the job ends; what landed is then in the store): streams that overlap (a FUSE mount's reads
    /// of one file on several threads) and prefetch lists never fetch a block twice.
    claimed: Mutex<Vec<u64>>,
    /// Pieces of streams' windows that landed, kept for their reader.
    handoff: Mutex<Handoff>,
    /// Scattered reads, for [`FillMode::Auto`].
    scatter: Mutex<Scatter>,
}

impl Drop for Readahead {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
    }
}

/// Pieces of streams' windows that landed, verified, kept in memory until the stream's reader
/// takes them (they are in the store too): the reader neither reads them back from the store nor
/// hashes them a second time, which was a third of a cold sequential read's CPU (`perf`, `cat`
/// of a 1.36 GB file through a mount). At most the largest window is kept; the oldest piece goes
/// first, and a reader that finds nothing here reads the store as before.
#[derive(Default)]
struct Handoff {
    /// (first block, the blocks' bytes), oldest first.
    pieces: VecDeque<(u64, PieceBuf)>,
    bytes: usize,
}

/// The bytes of a piece fetched ahead: pages mapped for it alone and unmapped when it is dropped.
/// Pieces are allocated by the fetchers and freed by readers on other threads; from the heap,
/// glibc's per-thread arenas kept what they freed (its mmap threshold rises to the largest block
/// freed, so after the first 2 MiB piece every piece came from an arena): a cold 200 MB read
/// through the cache peaked at 167-186 MiB RSS against 93 MiB uncached, and at 113 MiB with
/// `MALLOC_MMAP_THRESHOLD_` fixed (docs/benchmarks.md, "Remote reads from the bindings").
pub(super) struct PieceBuf(memmap2::MmapMut);

impl PieceBuf {
    /// `len` zero bytes; `None` when the system has no memory for them.
    pub(super) fn zeroed(len: usize) -> Option<PieceBuf> {
        memmap2::MmapMut::map_anon(len).ok().map(PieceBuf)
    }
}

impl std::ops::Deref for PieceBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for PieceBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

thread_local! {
    /// Reads on this thread start no readahead (the threads that fetch metadata ahead: their
    /// reads are not a reader's stream, and what follows the metadata is not theirs to fetch).
    static NO_READAHEAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

thread_local! {
    /// On a fetcher thread, its number (from 1); 0 elsewhere. (Not `std::thread::current()`,
    /// which on a thread std did not start, a C program's, allocates what is never freed.)
    static FETCHER: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The numbers given to fetcher threads.
static FETCHERS_STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Reads on the calling thread start no readahead from now on ([`NO_READAHEAD`]).
pub(crate) fn no_readahead_on_this_thread() {
    NO_READAHEAD.with(|q| q.set(true));
}

/// While alive, reads on this thread start no readahead: metadata reads (inodes, directories),
/// which are not a stream of file data, and whose neighbours past the metadata are not theirs.
pub(crate) struct MetadataReads(bool);

impl MetadataReads {
    pub(crate) fn begin() -> MetadataReads {
        MetadataReads(NO_READAHEAD.with(|q| q.replace(true)))
    }
}

impl Drop for MetadataReads {
    fn drop(&mut self) {
        NO_READAHEAD.with(|q| q.set(self.0));
    }
}

/// Starts the fetchers of `shared` for `me`. They end when the verifying source is gone.
fn spawn_fetchers(shared: &Arc<Shared>, me: &Weak<VerifiedBlocks>, whole: u64) {
    let mut threads = lock_any(&shared.threads);
    // A forked child's list holds its parent's fetchers, which do not exist here: neither joined
    // nor detached.
    std::mem::forget(std::mem::take(&mut *threads));
    for _ in 0..READAHEAD_FETCHERS {
        let (shared, me) = (shared.clone(), me.clone());
        let number = FETCHERS_STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let handle = std::thread::spawn(move || {
            FETCHER.with(|f| f.set(number));
            fetch_loop(&shared, &me, whole)
        });
        threads.push((number, handle));
    }
}

/// A fetcher's work: jobs as they come, until the verifying source is closed.
fn fetch_loop(shared: &Shared, me: &Weak<VerifiedBlocks>, whole: u64) {
    loop {
        let job = {
            let mut s = shared.lock();
            loop {
                if s.closed {
                    return;
                }
                if let Some(job) = shared.pick(&mut s, whole) {
                    s.running += 1;
                    break job;
                }
                // Woken by new work, or when a held fill may start; otherwise the timeout only
                // bounds how long an ended source's fetchers linger.
                let idle = std::time::Duration::from_secs(5);
                let wait = shared.fill_wait(&s).map_or(idle, |d| d.min(idle));
                s = shared
                    .work
                    .wait_timeout(s, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        if let Some(vb) = me.upgrade() {
            vb.run(job);
        }
        let mut s = shared.lock();
        s.running -= 1;
        drop(s);
        shared.work.notify_all();
        shared.ended.notify_all();
    }
}

impl Readahead {
    /// Queues a job for the fetchers, starting them first in a process that has none of its own
    /// (a forked child: what its parent had queued or had in flight is forgotten). False when
    /// readahead is settled.
    fn send(&self, vb: &VerifiedBlocks, mut job: Job) -> bool {
        self.ensure_fetchers(vb);
        let mut s = self.shared.lock();
        if s.settling {
            return false;
        }
        s.seq += 1;
        job.seq = s.seq;
        s.queue.push(job);
        drop(s);
        self.shared.work.notify_one();
        true
    }

    /// Claims the blocks of `start..end` not claimed before; returns them as runs.
    fn claim(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut bits = lock_any(&self.claimed);
        let words = end.div_ceil(64) as usize;
        if bits.len() < words {
            bits.resize(words, 0);
        }
        let mut out: Vec<(u64, u64)> = Vec::new();
        for b in start..end {
            let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
            if bits[w] & bit != 0 {
                continue;
            }
            bits[w] |= bit;
            match out.last_mut() {
                Some((_, e)) if *e == b => *e = b + 1,
                _ => out.push((b, b + 1)),
            }
        }
        out
    }

    /// Gives back blocks claimed for a job that ended or was not queued.
    fn unclaim(&self, start: u64, end: u64) {
        let mut bits = lock_any(&self.claimed);
        for b in start..end {
            if let Some(w) = bits.get_mut((b / 64) as usize) {
                *w &= !(1u64 << (b % 64));
            }
        }
    }

    fn unregister(&self, range: (u64, u64)) {
        let mut inflight = lock_any(&self.inflight);
        if let Some(i) = inflight.iter().position(|&r| r == range) {
            inflight.swap_remove(i);
        }
        drop(inflight);
        self.landed.notify_all();
    }

    /// Starts this process's fetchers if it has none (it is a forked child).
    fn ensure_fetchers(&self, vb: &VerifiedBlocks) {
        let mut s = self.shared.lock();
        let pid = std::process::id();
        if s.pid != pid {
            lock_any(&self.inflight).clear();
            lock_any(&self.claimed).clear();
            s.pid = pid;
            s.queue.clear();
            s.running = 0;
            // (Reads of the parent's threads, which do not exist here.)
            s.reads = 0;
            drop(s);
            spawn_fetchers(&self.shared, &self.me, vb.whole_blocks());
        }
    }

    /// Queued jobs overlapping `first..end` go first: a read waits for them.
    fn hurry(&self, first: u64, end: u64) {
        let mut s = self.shared.lock();
        let mut any = false;
        for j in s.queue.iter_mut() {
            if j.start < end && first < j.end && j.class != Class::Waited {
                j.class = Class::Waited;
                any = true;
            }
        }
        drop(s);
        if any {
            self.shared.work.notify_one();
        }
    }
}

/// A read's blocks, registered as being fetched while it runs ([`VerifiedBlocks::read_blocks`]).
pub(super) struct Fetching<'a> {
    ra: &'a Readahead,
    range: (u64, u64),
}

impl Drop for Fetching<'_> {
    fn drop(&mut self) {
        self.ra.unregister(self.range);
        let mut s = self.ra.shared.lock();
        // (Saturating: a forked child forgets its parent's reads, one of which may end here.)
        s.reads = s.reads.saturating_sub(1);
        let none = s.reads == 0;
        drop(s);
        if none {
            // The fill may start its next piece.
            self.ra.shared.work.notify_all();
        }
    }
}

impl VerifiedBlocks {
    /// With a store: a read that misses fetches at least `min_blocks` blocks, the following ones
    /// the store lacks coming along in the same request (so neighbouring metadata arrives
    /// together: a cold `ls -lR` costs a request per `min_blocks` blocks of inodes, not one per
    /// inode); a sequential stream of reads has up to `max_blocks` fetched ahead of it into the
    /// store by the background fetchers, its window doubling while it stays sequential; and the
    /// rest of the image is fetched as [`VerifiedBlocks::set_fill`] says. Blocks fetched ahead are
    /// verified and stored like any others, never returned unverified.
    pub fn start_readahead(self: &Arc<Self>, min_blocks: u64, max_blocks: u64) {
        if self.store.is_none() {
            return;
        }
        let me = Arc::downgrade(self);
        let shared = Arc::new(Shared {
            sched: Mutex::new(Sched {
                pid: std::process::id(),
                queue: Vec::new(),
                running: 0,
                seq: 0,
                settling: false,
                closed: false,
                fill: FillState::Off,
                fill_next: 0,
                fill_pieces: 0,
                fill_alone: false,
                fill_held: None,
                last_demand: None,
                first_demand: None,
                reads: 0,
            }),
            work: Condvar::new(),
            ended: Condvar::new(),
            link: self.link.clone(),
            piece: (PIECE_BYTES / self.bs() as u64).max(1),
            threads: Mutex::new(Vec::new()),
        });
        spawn_fetchers(&shared, &me, self.whole_blocks());
        let ra = Readahead {
            min: min_blocks.max(1),
            max: max_blocks.max(min_blocks.max(1)),
            streams: Mutex::new(Vec::new()),
            shared,
            me,
            inflight: Mutex::new(Vec::new()),
            landed: Condvar::new(),
            claimed: Mutex::new(Vec::new()),
            handoff: Mutex::new(Handoff::default()),
            scatter: Mutex::new(Scatter::default()),
        };
        if self.readahead.set(ra).is_ok() {
            self.set_fill(self.fill_mode());
        }
    }

    /// Whether a read served whole from the store follows a sequential stream, and so fetches
    /// ahead of it (on by default). Off for a mount that fetched a prefetch list: its program
    /// reads the listed files from the store, and their streams' windows would fetch past each
    /// file's end into blocks nobody asked for (python's start on the bench's layer: about 10
    /// MB). A read that fetches still starts or follows a stream.
    pub fn set_stored_reads_stream(&self, on: bool) {
        self.stored_reads_stream.store(on, Relaxed);
    }

    /// How the rest of the image is fetched: [`FillMode::Auto`] unless set otherwise (the
    /// setting is kept until readahead starts). With readahead running, `On` starts the fill now
    /// and `Off` stops it; `Auto` arms it.
    pub fn set_fill(&self, mode: FillMode) {
        *lock_any(&self.fill_mode) = mode;
        let Some(ra) = self.readahead.get() else {
            return;
        };
        let mut s = ra.shared.lock();
        s.fill = match (mode, s.fill) {
            (_, FillState::Done) => FillState::Done,
            (FillMode::Off, _) => FillState::Off,
            (FillMode::On, _) => FillState::Running,
            (FillMode::Auto, FillState::Running) => FillState::Running,
            (FillMode::Auto, _) if !fits(self.image_bytes(), self.store_capacity()) => {
                FillState::TooLarge
            }
            (FillMode::Auto, _) => FillState::Armed,
        };
        let running = s.fill == FillState::Running;
        if !running {
            s.fill_held = None;
        }
        drop(s);
        if running {
            ra.ensure_fetchers(self);
        }
        ra.shared.work.notify_all();
    }

    /// The fill mode set ([`VerifiedBlocks::set_fill`]).
    pub fn fill_mode(&self) -> FillMode {
        *lock_any(&self.fill_mode)
    }

    /// Where the fill is.
    pub fn fill_state(&self) -> FillState {
        self.readahead
            .get()
            .map_or(FillState::Off, |ra| ra.shared.lock().fill)
    }

    /// Bytes the store keeps of this image at most: its EROFS bytes and its Merkle tree.
    fn image_bytes(&self) -> u64 {
        self.seal.data_length + self.geometry.tree_size()
    }

    fn store_capacity(&self) -> Option<u64> {
        self.store.as_ref().and_then(|s| s.capacity())
    }

    /// [`FillMode::On`], the fill held until reads leave the link free: it starts [`FILL_QUIET`]
    /// after the last read that fetched blocks (once one has, after this call), or
    /// [`FILL_UNREAD`] after this call when none has; meanwhile streams' windows reach at most
    /// [`YOUNG_WINDOW_BYTES`]. What a mount asks for once its metadata is in: a program starting
    /// on it finds the link its own. A fill already running goes on.
    pub fn fill_when_quiet(&self) {
        if let Some(ra) = self.readahead.get() {
            let mut s = ra.shared.lock();
            if !matches!(s.fill, FillState::Running | FillState::Done) {
                s.fill_held = Some(Instant::now());
                s.last_demand = None;
                s.first_demand = None;
            }
        }
        self.set_fill(FillMode::On);
    }

    /// Returns once a fill is no longer held ([`FILL_QUIET`], [`FILL_UNREAD`]):
    /// it has started, or was stopped, or readahead settled. At once without readahead.
    pub fn wait_while_fill_held(&self) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        let mut s = ra.shared.lock();
        while s.fill == FillState::Running && s.fill_held.is_some() && !s.settling && !s.closed {
            let wait = ra
                .shared
                .fill_hold(&s)
                .unwrap_or(std::time::Duration::from_millis(10))
                .min(std::time::Duration::from_millis(500));
            s = ra
                .shared
                .work
                .wait_timeout(s, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// A read fetched blocks: a held fill ([`FILL_QUIET`]) waits longer.
    pub(super) fn note_demand(&self) {
        if let Some(ra) = self.readahead.get() {
            let mut s = ra.shared.lock();
            let now = Instant::now();
            s.last_demand = Some(now);
            s.first_demand.get_or_insert(now);
        }
    }

    /// A read fetched data and continued no stream: with [`FillMode::Auto`], enough of them start
    /// the fill ([`super::autofill`]).
    pub(super) fn note_scattered(&self) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        if ra.shared.lock().fill != FillState::Armed {
            return;
        }
        if lock_any(&ra.scatter).note(Instant::now()) {
            let mut s = ra.shared.lock();
            if s.fill == FillState::Armed && !s.settling {
                s.fill = FillState::Running;
                drop(s);
                ra.ensure_fetchers(self);
                ra.shared.work.notify_all();
            }
        }
    }

    /// Stops readahead: queued jobs are dropped, the fill stops, the jobs running end, and this
    /// returns when none is left, so that no request is cut off at exit and the counters describe
    /// settled work. Reads go on without readahead afterwards.
    pub fn settle_readahead(&self) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        let mut s = ra.shared.lock();
        s.settling = true;
        if s.fill == FillState::Running {
            s.fill = FillState::Done;
        }
        let dropped = std::mem::take(&mut s.queue);
        let ours = s.pid == std::process::id();
        drop(s);
        for j in dropped {
            ra.unclaim(j.start, j.end);
            if j.registered {
                ra.unregister((j.start, j.end));
            }
        }
        ra.shared.ended.notify_all();
        let mut s = ra.shared.lock();
        while ours && s.running > 0 {
            s = ra.shared.ended.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Stops readahead as [`VerifiedBlocks::settle_readahead`] does, then ends the background
    /// fetchers and returns once their threads have exited: nothing this source started runs
    /// after it (a library's close, whose caller may unload it or exit). Reads go on without
    /// readahead afterwards. Called from a fetcher (the last reference dropped there), it does not
    /// wait for that thread itself.
    pub fn close_readahead(&self) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        self.settle_readahead();
        let ours = {
            let mut s = ra.shared.lock();
            s.closed = true;
            s.pid == std::process::id()
        };
        ra.shared.work.notify_all();
        let threads = std::mem::take(&mut *lock_any(&ra.shared.threads));
        if !ours {
            // A forked child's fetchers were never started (the list is its parent's).
            std::mem::forget(threads);
            return;
        }
        let me = FETCHER.with(|f| f.get());
        for (number, t) in threads {
            if number != me {
                // A fetcher that panicked has nothing more to end.
                let _ = t.join();
            }
        }
    }

    /// Fetches every data block the store lacks into it, in order, in pieces that wait behind
    /// every other fetch (reads and their readahead go first); returns when the whole image has
    /// been seen, or readahead is settled, with the blocks fetched meanwhile. Nothing without a
    /// store and readahead.
    pub fn fill_all(&self) -> u64 {
        let Some(ra) = self.readahead.get() else {
            return 0;
        };
        let before = self.stats.readahead_blocks.load(Relaxed);
        self.set_fill(FillMode::On);
        let mut s = ra.shared.lock();
        // Asked for now: not held for quiet reads.
        s.fill_held = None;
        ra.shared.work.notify_all();
        while s.fill == FillState::Running {
            s = ra.shared.ended.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        while s.running > 0 && s.pid == std::process::id() {
            s = ra.shared.ended.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        drop(s);
        self.stats.readahead_blocks.load(Relaxed) - before
    }

    /// Runs one job of the fetchers.
    fn run(&self, job: Job) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        if job.class == Class::Fill {
            // Its blocks, but not those a read or another job is bringing.
            for (a, b) in ra.claim(job.start, job.end) {
                lock_any(&ra.inflight).push((a, b));
                self.fetch_ahead(a, b, false);
                ra.unclaim(a, b);
                ra.unregister((a, b));
            }
            return;
        }
        if !job.registered {
            lock_any(&ra.inflight).push((job.start, job.end));
        }
        self.fetch_ahead(job.start, job.end, job.hand_over);
        // Landed (or failed: the reads fetch it themselves).
        ra.unclaim(job.start, job.end);
        ra.unregister((job.start, job.end));
    }

    /// Fetches the blocks of `start..end` the store lacks, verified, into the store: each run of
    /// missing blocks as one read (one batch of concurrent requests); with `hand_over`, also into
    /// the [`Handoff`] for a stream's reader.
    fn fetch_ahead(&self, start: u64, end: u64, hand_over: bool) {
        let Some(store) = self.store.as_deref() else {
            return;
        };
        let bs = self.bs() as u64;
        let stored = store.has(Region::Data, start, end - start);
        let mut has = stored.clone();
        // Blocks a read is fetching itself are left to it.
        if let Some(ra) = self.readahead.get() {
            for &(a, b) in lock_any(&ra.inflight).iter() {
                if (a, b) != (start, end) {
                    for k in a.max(start)..b.min(end) {
                        has[(k - start) as usize] = true;
                    }
                }
            }
        }
        // Runs of missing blocks, joined across blocks the store holds (read back from it, and
        // checked again, in the same read): one batch for a piece that reads have dotted.
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for (a, b) in runs(&has, false) {
            match spans.last_mut() {
                Some((_, e)) if stored[*e..a].iter().all(|&h| h) => *e = b,
                _ => spans.push((a, b)),
            }
        }
        for (a, b) in spans {
            let (from, lead) = (start + a as u64, (b - a) as u64);
            let Some(mut scratch) = PieceBuf::zeroed((lead * bs) as usize) else {
                continue;
            };
            let mut used = StoreUse::default();
            if self
                .read_checked(from, &mut scratch, Some(store), &mut used)
                .is_ok()
            {
                self.stats
                    .readahead_blocks
                    .fetch_add(used.fetched / bs, Relaxed);
                if let (true, Some(ra)) = (hand_over, self.readahead.get()) {
                    let mut h = lock_any(&ra.handoff);
                    h.bytes += scratch.len();
                    h.pieces.push_back((from, scratch));
                    while h.bytes > (ra.max * bs) as usize {
                        let Some((_, old)) = h.pieces.pop_front() else {
                            break;
                        };
                        h.bytes -= old.len();
                    }
                }
            }
        }
    }

    /// Copies blocks `first..` (as many as `buf` holds) from the pieces handed over, if they hold
    /// them all; a piece whose last block this read takes is dropped (its stream has passed it).
    /// Their bytes were verified when they landed.
    pub(super) fn take_handed_over(&self, first: u64, buf: &mut [u8]) -> bool {
        let Some(ra) = self.readahead.get() else {
            return false;
        };
        let bs = self.bs();
        let n = (buf.len() / bs) as u64;
        if n == 0 || !buf.len().is_multiple_of(bs) {
            return false;
        }
        let mut h = lock_any(&ra.handoff);
        // Each block's piece, found before anything is copied: (piece, first block, count).
        let mut found: Vec<(usize, u64, u64)> = Vec::new();
        let mut b = first;
        while b < first + n {
            let Some(i) = h
                .pieces
                .iter()
                .position(|(p, v)| *p <= b && b < *p + (v.len() / bs) as u64)
            else {
                return false;
            };
            let (p, v) = &h.pieces[i];
            let count = (*p + (v.len() / bs) as u64).min(first + n) - b;
            found.push((i, b, count));
            b += count;
        }
        let mut done: Vec<usize> = Vec::new();
        for &(i, b, count) in &found {
            let (p, v) = &h.pieces[i];
            let from = ((b - p) as usize) * bs;
            let to = ((b - first) as usize) * bs;
            let len = count as usize * bs;
            buf[to..to + len].copy_from_slice(&v[from..from + len]);
            if b + count == *p + (v.len() / bs) as u64 {
                done.push(i);
            }
        }
        done.sort_unstable();
        for i in done.into_iter().rev() {
            if let Some((_, v)) = h.pieces.remove(i) {
                h.bytes -= v.len();
            }
        }
        drop(h);
        self.stats.handed_over_blocks.fetch_add(n, Relaxed);
        true
    }

    /// Byte ranges as runs of whole blocks (the partial last one left out), adjacent ones merged.
    fn block_runs(&self, ranges: &[std::ops::Range<u64>]) -> Vec<(u64, u64)> {
        let bs = self.bs() as u64;
        let whole = self.whole_blocks();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for r in ranges {
            let (a, b) = (r.start / bs, r.end.div_ceil(bs).min(whole));
            if a >= b {
                continue;
            }
            match runs.last_mut() {
                Some((_, end)) if *end == a => *end = b,
                _ => runs.push((a, b)),
            }
        }
        runs
    }

    /// The miss window: when blocks `first..first + n` are not all stored and fewer than the
    /// minimum, reads them with the missing blocks after them (up to the minimum) in one request.
    /// `true` when it did (and `buf` holds the blocks asked for).
    pub(super) fn read_with_miss_window(
        &self,
        first: u64,
        buf: &mut [u8],
        store: &dyn BlockStore,
    ) -> bool {
        let Some(ra) = self.readahead.get() else {
            return false;
        };
        let bs = self.bs();
        let n = (buf.len() / bs) as u64;
        let whole = self.whole_blocks();
        if n >= ra.min || first + n > whole {
            return false;
        }
        let mut end = (first + ra.min).min(whole);
        // Not into blocks the fetchers are bringing already.
        for &(a, _) in lock_any(&ra.inflight).iter() {
            if a >= first + n && a < end {
                end = a;
            }
        }
        let has = store.has(Region::Data, first, end - first);
        if has[..n as usize].iter().all(|h| *h) {
            return false;
        }
        let extra = has[n as usize..].iter().take_while(|h| !**h).count() as u64;
        if extra == 0 {
            return false;
        }
        let Some(mut big) = PieceBuf::zeroed(((n + extra) as usize) * bs) else {
            return false;
        };
        if self
            .read_checked(first, &mut big, Some(store), &mut StoreUse::default())
            .is_err()
        {
            return false; // the plain read reports what failed, for the blocks asked for only
        }
        buf.copy_from_slice(&big[..buf.len()]);
        self.stats.readahead_blocks.fetch_add(extra, Relaxed);
        true
    }

    /// After a read of `first..first + n`: follow sequential streams, and queue what their windows
    /// need fetched ahead. Whether the read started a new stream (it continued none).
    pub(super) fn follow_stream(&self, first: u64, n: u64) -> bool {
        let Some(ra) = self.readahead.get() else {
            return false;
        };
        if NO_READAHEAD.with(|q| q.get()) {
            return false;
        }
        let whole = self.whole_blocks();
        let young = {
            let s = ra.shared.lock();
            s.fill_held.is_some()
                && s.fill == FillState::Running
                && s.first_demand.is_none_or(|t| t.elapsed() < YOUNG_FOR)
        };
        let max = if young {
            (YOUNG_WINDOW_BYTES / self.bs() as u64).clamp(ra.min, ra.max)
        } else {
            ra.max
        };
        let mut streams = ra.streams.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = nearest_stream(&streams, first, n).map(|i| &mut streams[i]) else {
            if streams.len() == STREAMS {
                streams.remove(0);
            }
            streams.push(Stream {
                next: first + n,
                window: ra.min,
                ahead_end: first + n,
            });
            return true;
        };
        if first + n <= s.next {
            return false; // a read behind the stream's end, within what was fetched for it
        }
        // The window grows only while reads follow on exactly; one that skips ahead moves the
        // stream on (the read it skipped arrives later, behind).
        if first == s.next {
            s.window = (s.window * WINDOW_GROWTH).min(max);
        }
        s.window = s.window.min(max);
        s.next = first + n;
        // Keep the window fetched ahead, queued a quarter window at a time.
        if s.ahead_end.max(s.next) + s.window / 4 > s.next + s.window {
            return false;
        }
        let start = s.ahead_end.max(s.next);
        let end = (s.next + s.window).min(whole);
        if end <= start {
            return false;
        }
        s.ahead_end = end;
        drop(streams);
        for (a, b) in ra.claim(start, end) {
            // In pieces, each its own job: a read waits for the piece it needs only.
            let mut x = a;
            while x < b {
                let y = (x + ra.shared.piece).min(b);
                lock_any(&ra.inflight).push((x, y));
                let job = Job {
                    start: x,
                    end: y,
                    class: Class::Stream,
                    seq: 0,
                    registered: true,
                    hand_over: true,
                };
                if !ra.send(self, job) {
                    ra.unregister((x, y));
                    ra.unclaim(x, y);
                }
                x = y;
            }
        }
        false
    }

    /// Queues the ranges (as whole blocks, in order, adjacent ones merged) for the background
    /// fetchers, when readahead into a store is on.
    pub(super) fn queue_prefetch(&self, ranges: &[std::ops::Range<u64>]) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        for (a, b) in self.block_runs(ranges) {
            // In pieces, so that reads never wait long behind one.
            let mut s = a;
            while s < b {
                let e = (s + ra.shared.piece).min(b);
                for (x, y) in ra.claim(s, e) {
                    let job = Job {
                        start: x,
                        end: y,
                        class: Class::Prefetch,
                        seq: 0,
                        registered: false,
                        hand_over: false,
                    };
                    if !ra.send(self, job) {
                        ra.unclaim(x, y);
                    }
                }
                s = e;
            }
        }
    }

    /// Fetches the ranges into the store now, in pieces on the background fetchers, registered so
    /// that reads of them wait rather than fetch them again; returns when every piece has ended.
    pub(super) fn fill_ranges(&self, ranges: &[std::ops::Range<u64>]) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        let mut mine: Vec<(u64, u64)> = Vec::new();
        for (a, b) in self.block_runs(ranges) {
            let mut s = a;
            while s < b {
                let e = (s + ra.shared.piece).min(b);
                for (x, y) in ra.claim(s, e) {
                    lock_any(&ra.inflight).push((x, y));
                    let job = Job {
                        start: x,
                        end: y,
                        class: Class::Stream,
                        seq: 0,
                        registered: true,
                        hand_over: false,
                    };
                    if ra.send(self, job) {
                        mine.push((x, y));
                    } else {
                        ra.unregister((x, y));
                        ra.unclaim(x, y);
                    }
                }
                s = e;
            }
        }
        let mut inflight = lock_any(&ra.inflight);
        while inflight.iter().any(|r| mine.contains(r)) {
            inflight = ra.landed.wait(inflight).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Waits for the blocks of a read that fetchers (or other reads) are fetching, instead of
    /// fetching them twice (queued ones are started first); then registers this read's blocks
    /// (and its miss window) until the returned guard is dropped, so that readahead jobs and
    /// other reads leave them to it.
    pub(super) fn register_read(&self, first: u64, n: u64) -> Option<Fetching<'_>> {
        let ra = self.readahead.get()?;
        let mut inflight = lock_any(&ra.inflight);
        let mut hurried = false;
        while inflight.iter().any(|&(a, b)| a < first + n && first < b) {
            if !hurried {
                drop(inflight);
                ra.hurry(first, first + n);
                hurried = true;
                inflight = lock_any(&ra.inflight);
                continue;
            }
            inflight = ra.landed.wait(inflight).unwrap_or_else(|e| e.into_inner());
        }
        let range = (first, first + n.max(ra.min));
        inflight.push(range);
        drop(inflight);
        ra.shared.lock().reads += 1;
        Some(Fetching { ra, range })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The regression seen on `cat` of a compressed file over the network: the file's data at
    /// block 50,436 with a 64 MiB window, its index read at 66,264: each read continues its own
    /// stream (the first in the list was taken before, and the data stream stopped there).
    #[test]
    fn a_read_continues_the_nearest_stream() {
        let data = Stream {
            next: 50_436,
            window: 16_384,
            ahead_end: 66_820,
        };
        let index = Stream {
            next: 66_265,
            window: 64,
            ahead_end: 66_329,
        };
        let streams = [data, index];
        assert_eq!(nearest_stream(&streams, 66_265, 1), Some(1));
        assert_eq!(nearest_stream(&streams, 50_436, 16), Some(0));
        // Behind the data stream, within its window: still it.
        assert_eq!(nearest_stream(&streams, 40_000, 16), Some(0));
        assert_eq!(nearest_stream(&streams, 10, 16), None);
    }
}
