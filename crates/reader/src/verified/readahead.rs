//! Readahead into the store of a [`VerifiedBlocks`]: the background fetchers, sequential streams
//! and the windows fetched ahead of them, prefetch lists, the miss window, filling the whole image.
//!
//! Every block fetched here goes through [`VerifiedBlocks::read_checked`], so it is verified (and
//! stored) like a block a read asked for; nothing here returns bytes to a reader.

use super::*;

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

/// Readahead into the store: its settings, the streams seen, the background fetchers' queue.
pub(super) struct Readahead {
    min: u64,
    max: u64,
    streams: Mutex<Vec<Stream>>,
    /// The fetchers' queue, with the process that started them: a forked child (a mount daemon)
    /// has none of its parent's threads, so it starts its own on first use.
    queue: Mutex<(u32, mpsc::Sender<Job>)>,
    /// The verifying source, for fetchers started later.
    me: Weak<VerifiedBlocks>,
    threads: usize,
    /// Ranges the background fetchers are fetching: a read that needs one waits for it rather
    /// than fetching the same blocks again.
    inflight: Mutex<Vec<(u64, u64)>>,
    landed: Condvar,
    /// Blocks queued for or being fetched by this process's fetchers, a bit each (given back when
    /// the job ends; what landed is then in the store): streams that overlap (a FUSE mount's reads
    /// of one file on several threads) and prefetch lists never fetch a block twice.
    claimed: Mutex<Vec<u64>>,
    /// Jobs queued or running, and whether new ones are refused ([`VerifiedBlocks::settle_readahead`]).
    outstanding: Mutex<(u64, bool)>,
    idle: Condvar,
}

/// Blocks `.0..1` to fetch ahead; `.2`: registered as in flight when queued (a stream's window,
/// which the stream's next reads wait for) rather than when started (a long prefetch list, which
/// reads must not queue behind).
pub(super) type Job = (u64, u64, bool);

thread_local! {
    /// Reads on this thread start no readahead (the threads that fetch metadata ahead: their
    /// reads are not a reader's stream, and what follows the metadata is not theirs to fetch).
    pub(super) static NO_READAHEAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

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

/// Streams tracked at once (a FUSE mount reads several files in parallel).
pub(super) const STREAMS: usize = 16;

/// Blocks of one background fetch of a prefetch list (8 MiB of 4 KiB blocks): large enough that
/// its requests fill a link with a long round trip, small enough that a read waiting for it does
/// not wait long.
pub(super) const PREFETCH_PIECE: u64 = 2048;

/// Starts `threads` background fetchers for `me`; returns their queue. They end when the queue's
/// sender is dropped or `me` is gone.
pub(super) fn spawn_fetchers(me: &Weak<VerifiedBlocks>, threads: usize) -> mpsc::Sender<Job> {
    let (tx, rx) = mpsc::channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..threads {
        let me = me.clone();
        let rx = rx.clone();
        std::thread::spawn(move || loop {
            let job = rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
            let Ok((start, end, registered)) = job else {
                return;
            };
            let Some(vb) = me.upgrade() else { return };
            let Some(ra) = vb.readahead.get() else { return };
            let settling = lock_any(&ra.outstanding).1;
            if !settling {
                if !registered {
                    lock_any(&ra.inflight).push((start, end));
                }
                vb.fetch_ahead(start, end);
            }
            // Landed (or failed: the reads fetch it themselves).
            ra.unclaim(start, end);
            let mut inflight = lock_any(&ra.inflight);
            if let Some(i) = inflight.iter().position(|&r| r == (start, end)) {
                inflight.swap_remove(i);
            }
            ra.landed.notify_all();
            let mut outstanding = lock_any(&ra.outstanding);
            outstanding.0 = outstanding.0.saturating_sub(1);
            if outstanding.0 == 0 {
                ra.idle.notify_all();
            }
        });
    }
    tx
}

impl Readahead {
    /// Queues a job for the fetchers, starting them first in a process that has none of its own
    /// (a forked child: what its parent had queued or had in flight is forgotten).
    fn send(&self, job: Job) -> bool {
        self.ensure_fetchers();
        // Locks in this order only: the queue, then the count.
        let queue = lock_any(&self.queue);
        let mut outstanding = lock_any(&self.outstanding);
        if outstanding.1 || queue.1.send(job).is_err() {
            return false;
        }
        outstanding.0 += 1;
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

    /// Whether the fetchers were started by this process (a forked child's are its parent's).
    fn queue_is_this_process(&self) -> bool {
        lock_any(&self.queue).0 == std::process::id()
    }

    /// Starts this process's fetchers if it has none (it is a forked child).
    fn ensure_fetchers(&self) {
        let mut q = lock_any(&self.queue);
        let pid = std::process::id();
        if q.0 != pid {
            lock_any(&self.inflight).clear();
            lock_any(&self.claimed).clear();
            lock_any(&self.outstanding).0 = 0;
            *q = (pid, spawn_fetchers(&self.me, self.threads));
        }
    }
}

/// Background fetchers a remote image's readahead uses: with jobs of a quarter window each, up to
/// four are in flight, so the link stays busy while a reader waits for the nearest.
pub const READAHEAD_FETCHERS: usize = 4;

/// A read's blocks, registered as being fetched while it runs ([`VerifiedBlocks::read_blocks`]).
pub(super) struct Fetching<'a> {
    ra: &'a Readahead,
    range: (u64, u64),
}

impl Drop for Fetching<'_> {
    fn drop(&mut self) {
        let mut inflight = lock_any(&self.ra.inflight);
        if let Some(i) = inflight.iter().position(|&r| r == self.range) {
            inflight.swap_remove(i);
        }
        self.ra.landed.notify_all();
    }
}

impl VerifiedBlocks {
    /// With a store: a read that misses fetches at least `min_blocks` blocks, the following ones
    /// the store lacks coming along in the same request (so neighbouring metadata arrives
    /// together: a cold `ls -lR` costs a request per `min_blocks` blocks of inodes, not one per
    /// inode); and a sequential stream of reads has up to `max_blocks` fetched ahead of it into the
    /// store by `threads` background fetchers, its window doubling while it stays sequential.
    /// Blocks fetched ahead are verified and stored like any others, never returned unverified.
    pub fn start_readahead(self: &Arc<Self>, min_blocks: u64, max_blocks: u64, threads: usize) {
        if self.store.is_none() {
            return;
        }
        let me = Arc::downgrade(self);
        let ra = Readahead {
            min: min_blocks.max(1),
            max: max_blocks.max(min_blocks.max(1)),
            streams: Mutex::new(Vec::new()),
            queue: Mutex::new((std::process::id(), spawn_fetchers(&me, threads.max(1)))),
            me,
            threads: threads.max(1),
            inflight: Mutex::new(Vec::new()),
            landed: Condvar::new(),
            claimed: Mutex::new(Vec::new()),
            outstanding: Mutex::new((0, false)),
            idle: Condvar::new(),
        };
        let _ = self.readahead.set(ra);
    }

    /// Stops readahead: queued jobs are dropped, the ones running end, and this returns when none
    /// is left, so that no request is cut off at exit and the counters describe settled work.
    /// Reads go on without readahead afterwards.
    pub fn settle_readahead(&self) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        let ours = ra.queue_is_this_process();
        let mut outstanding = lock_any(&ra.outstanding);
        outstanding.1 = true;
        if ours {
            while outstanding.0 > 0 {
                outstanding = ra.idle.wait(outstanding).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Fetches every data block the store lacks into it, in order, a piece at a time on each of
    /// `threads` threads (reads and their readahead go on with requests of their own), leaving
    /// out what readahead or reads are fetching; stops when readahead is settled. Returns the
    /// blocks fetched. Nothing without a store and readahead.
    pub fn fill_all(&self, threads: usize) -> u64 {
        let Some(ra) = self.readahead.get() else {
            return 0;
        };
        let before = self.stats.readahead_blocks.load(Relaxed);
        let whole = self.whole_blocks();
        let next = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for _ in 0..threads.max(1) {
                scope.spawn(|| loop {
                    let s = next.fetch_add(PREFETCH_PIECE, Relaxed);
                    if s >= whole || lock_any(&ra.outstanding).1 {
                        return;
                    }
                    let e = (s + PREFETCH_PIECE).min(whole);
                    for (a, b) in ra.claim(s, e) {
                        let _fetching = {
                            lock_any(&ra.inflight).push((a, b));
                            Fetching { ra, range: (a, b) }
                        };
                        self.fetch_ahead(a, b);
                        ra.unclaim(a, b);
                    }
                });
            }
        });
        self.stats.readahead_blocks.load(Relaxed) - before
    }

    /// Fetches the blocks of `start..end` the store lacks, verified, into the store: each run of
    /// missing blocks as one read (one batch of concurrent requests).
    fn fetch_ahead(&self, start: u64, end: u64) {
        let Some(store) = self.store.as_deref() else {
            return;
        };
        let bs = self.bs() as u64;
        let mut has = store.has(Region::Data, start, end - start);
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
        for (a, b) in runs(&has, false) {
            let (from, lead) = (start + a as u64, (b - a) as u64);
            let mut scratch = vec![0u8; (lead * bs) as usize];
            if self
                .read_checked(from, &mut scratch, Some(store), &mut StoreUse::default())
                .is_ok()
            {
                self.stats.readahead_blocks.fetch_add(lead, Relaxed);
            }
        }
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
        let mut big = vec![0u8; ((n + extra) as usize) * bs];
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
    /// need fetched ahead.
    pub(super) fn follow_stream(&self, first: u64, n: u64) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        if NO_READAHEAD.with(|q| q.get()) {
            return;
        }
        let whole = self.whole_blocks();
        let mut streams = ra.streams.lock().unwrap_or_else(|e| e.into_inner());
        // A read within a window of the stream's end continues it: a FUSE mount's readahead
        // arrives on several threads, not always in order.
        let Some(s) = streams
            .iter_mut()
            .find(|s| first + n > s.next.saturating_sub(s.window) && first <= s.next + s.window)
        else {
            if streams.len() == STREAMS {
                streams.remove(0);
            }
            streams.push(Stream {
                next: first + n,
                window: ra.min,
                ahead_end: first + n,
            });
            return;
        };
        if first + n <= s.next {
            return; // a read behind the stream's end, within what was fetched for it
        }
        // The window grows only while reads follow on exactly; one that skips ahead moves the
        // stream on (the read it skipped arrives later, behind).
        if first == s.next {
            s.window = (s.window * 2).min(ra.max);
        }
        s.next = first + n;
        // Keep the window fetched ahead, in jobs of at least a quarter window: several are in
        // flight at once, so the link stays busy while the reader waits for the nearest.
        if s.ahead_end.max(s.next) + s.window / 4 > s.next + s.window {
            return;
        }
        let start = s.ahead_end.max(s.next);
        let end = (s.next + s.window).min(whole);
        if end <= start {
            return;
        }
        s.ahead_end = end;
        drop(streams);
        ra.ensure_fetchers();
        for (a, b) in ra.claim(start, end) {
            lock_any(&ra.inflight).push((a, b));
            if !ra.send((a, b, true)) {
                lock_any(&ra.inflight).retain(|&r| r != (a, b));
                ra.unclaim(a, b);
            }
        }
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
                let e = (s + PREFETCH_PIECE).min(b);
                for (x, y) in ra.claim(s, e) {
                    if !ra.send((x, y, false)) {
                        ra.unclaim(x, y);
                    }
                }
                s = e;
            }
        }
    }

    /// Fetches the ranges into the store now: in pieces on the background fetchers (concurrently,
    /// each piece's requests in parallel), registered so that reads of them wait rather than
    /// fetch them again; returns when every piece has ended.
    pub(super) fn fill_ranges(&self, ranges: &[std::ops::Range<u64>]) {
        let Some(ra) = self.readahead.get() else {
            return;
        };
        ra.ensure_fetchers();
        let mut mine: Vec<(u64, u64)> = Vec::new();
        for (a, b) in self.block_runs(ranges) {
            let mut s = a;
            while s < b {
                let e = (s + PREFETCH_PIECE).min(b);
                for (x, y) in ra.claim(s, e) {
                    lock_any(&ra.inflight).push((x, y));
                    if ra.send((x, y, true)) {
                        mine.push((x, y));
                    } else {
                        lock_any(&ra.inflight).retain(|&r| r != (x, y));
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
    /// fetching them twice; then registers this read's blocks (and its miss window) until the
    /// returned guard is dropped, so that readahead jobs and other reads leave them to it.
    pub(super) fn register_read(&self, first: u64, n: u64) -> Option<Fetching<'_>> {
        let ra = self.readahead.get()?;
        let mut inflight = lock_any(&ra.inflight);
        while inflight.iter().any(|&(a, b)| a < first + n && first < b) {
            inflight = ra.landed.wait(inflight).unwrap_or_else(|e| e.into_inner());
        }
        let range = (first, first + n.max(ra.min));
        inflight.push(range);
        Some(Fetching { ra, range })
    }
}
