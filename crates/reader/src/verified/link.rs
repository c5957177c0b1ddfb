//! What the link to a remote source carries, estimated from the reads' own timing, for the number
//! of background fetches kept in flight ([`super::readahead`]).
//!
//! Two figures, both from batches this process sent (any source: HTTP, S3, a registry):
//! - the round trip: of the last [`SMALL_SAMPLES`] batches of at most [`SMALL_BATCH`] bytes that
//!   had at most that many bytes of others beside them (their transfer is short and little was
//!   queued ahead of them, so their time is mostly the round trip), the tenth quickest: a low figure
//!   leaves out those that queued behind others, and not the lowest, which may have been served
//!   without a request at all (the tail a remote object keeps from its open);
//! - the rate: a batch of at least [`LARGE_BATCH`] bytes that had the link to itself (the other
//!   batches in flight when it started, or started before it ended, carried less than an eighth
//!   of its bytes: a small read beside it changes its time little), its bytes over its time less
//!   a round trip; the median of the last few.
//!
//! Their product is the bandwidth-delay product: the bytes that must be in flight to keep the
//! link busy. Background fetches keep about that much in flight and no more, so that a read
//! waiting for its own request finds little of theirs queued ahead of it on the link.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Batches of at most this many bytes time the round trip (64 KiB of data and its hash blocks:
/// 0.5 ms at 1 Gbit/s).
pub(super) const SMALL_BATCH: u64 = 96 << 10;

/// Batches of at least this many bytes, alone on the link, time its rate.
pub(super) const LARGE_BATCH: u64 = 1 << 20;

/// Rate samples kept (the median is used).
const RATE_SAMPLES: usize = 8;

/// Small batches' times kept for the round trip.
pub(super) const SMALL_SAMPLES: usize = 64;

/// The estimates, and the bytes of the batches in flight.
#[derive(Debug, Default)]
pub(super) struct Link {
    state: Mutex<State>,
    in_flight: AtomicU64,
    /// Bytes of all the batches started so far (what started beside a batch while it ran).
    started: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    small: VecDeque<Duration>,
    rtt: Option<Duration>,
    rates: VecDeque<f64>,
}

/// One batch being timed; [`Link::end`] records it, dropping it without that forgets it.
pub(super) struct Timing<'a> {
    link: &'a Link,
    t0: Instant,
    bytes: u64,
    /// Bytes of other batches in flight when it started.
    beside: u64,
    /// [`Link::started`] after it started.
    started: u64,
}

impl Drop for Timing<'_> {
    fn drop(&mut self) {
        self.link.in_flight.fetch_sub(self.bytes, Relaxed);
    }
}

impl Link {
    /// A batch of `bytes` starts.
    pub(super) fn begin(&self, bytes: u64) -> Timing<'_> {
        let started = self.started.fetch_add(bytes, Relaxed) + bytes;
        let beside = self.in_flight.fetch_add(bytes, Relaxed);
        Timing {
            link: self,
            t0: Instant::now(),
            bytes,
            beside,
            started,
        }
    }

    /// The batch `t` ended (its bytes all came).
    pub(super) fn end(&self, t: Timing<'_>) {
        let took = t.t0.elapsed();
        let bytes = t.bytes;
        let others = t.beside + (self.started.load(Relaxed) - t.started);
        let alone = others <= bytes / 8;
        drop(t);
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if bytes == 0 {
            return;
        }
        if bytes <= SMALL_BATCH {
            if others > SMALL_BATCH {
                // It shared the link with more than a small batch's bytes (a piece of the
                // fill's, a window's): its time is mostly theirs. A mount whose metadata came in
                // a few large requests had no other small batches before its first reads, and
                // those, queued behind the fill's first piece, made the round trip half a
                // second, the rate (a piece's time less that) 70 MB/s on a 4 MB/s link, and the
                // fill kept two pieces in flight ahead of every read (cli/remote
                // the_fill_starts_once_reads_scatter_and_holds_no_read_back).
                return;
            }
            s.small.push_back(took);
            if s.small.len() > SMALL_SAMPLES {
                s.small.pop_front();
            }
            let mut times: Vec<Duration> = s.small.iter().copied().collect();
            times.sort();
            s.rtt = Some(times[times.len() / 10]);
        } else if alone && bytes >= LARGE_BATCH {
            if let Some(rtt) = s.rtt.filter(|&r| took > r) {
                s.rates.push_back(bytes as f64 / (took - rtt).as_secs_f64());
                if s.rates.len() > RATE_SAMPLES {
                    s.rates.pop_front();
                }
            }
        }
    }

    /// The round trip and the rate (bytes per second), once both have been measured.
    pub(super) fn estimate(&self) -> Option<(Duration, f64)> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let rtt = s.rtt?;
        if s.rates.is_empty() {
            return None;
        }
        let mut rates: Vec<f64> = s.rates.iter().copied().collect();
        rates.sort_by(f64::total_cmp);
        Some((rtt, rates[rates.len() / 2]))
    }

    /// Whether a rate has been measured.
    pub(super) fn has_rate(&self) -> bool {
        !self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .rates
            .is_empty()
    }

    /// The bandwidth-delay product in bytes, once measured.
    pub(super) fn bdp(&self) -> Option<f64> {
        self.estimate().map(|(rtt, rate)| rtt.as_secs_f64() * rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small batches give the round trip (their minimum), a large one alone gives the rate over
    /// the time beyond a round trip; a large one that overlapped another gives none.
    #[test]
    fn round_trip_from_small_batches_rate_from_a_large_one_alone() {
        let link = Link::default();
        assert!(link.estimate().is_none());
        // One served at once (no request), the rest a round trip or more.
        for ms in [0, 30, 20, 25, 21, 40, 22, 20, 23, 26, 24, 35] {
            let t = link.begin(4096);
            std::thread::sleep(Duration::from_millis(ms));
            link.end(t);
        }
        let rtt = link.state.lock().unwrap().rtt.unwrap();
        assert!(
            rtt >= Duration::from_millis(20) && rtt < Duration::from_millis(22),
            "{rtt:?}"
        );
        // Overlapping: no rate.
        let a = link.begin(4 << 20);
        let b = link.begin(4 << 20);
        std::thread::sleep(Duration::from_millis(40));
        link.end(b);
        link.end(a);
        assert!(!link.has_rate());
        // Alone but for a small read beside it: 2 MiB in a round trip plus about 20 ms, about
        // 100 MB/s.
        let t = link.begin(2 << 20);
        let small = link.begin(64 << 10);
        std::thread::sleep(rtt + Duration::from_millis(20));
        link.end(small);
        link.end(t);
        let (_, rate) = link.estimate().unwrap();
        assert!(rate > 40e6 && rate < 110e6, "{rate}");
        let bdp = link.bdp().unwrap();
        assert!(bdp > 0.4e6 && bdp < 4e6, "{bdp}");
    }

    /// A small batch that crossed the link behind a large one times the large one, not the round
    /// trip: it is no sample (nor, with no round trip, is the large one's rate).
    #[test]
    fn a_small_batch_queued_behind_a_piece_is_no_round_trip() {
        let link = Link::default();
        let piece = link.begin(2 << 20);
        for _ in 0..3 {
            let small = link.begin(96 << 10);
            std::thread::sleep(Duration::from_millis(30));
            link.end(small);
        }
        link.end(piece);
        assert!(link.state.lock().unwrap().rtt.is_none());
        // Beside one other small batch, it still is.
        let a = link.begin(64 << 10);
        let b = link.begin(32 << 10);
        std::thread::sleep(Duration::from_millis(10));
        link.end(b);
        link.end(a);
        assert!(link.state.lock().unwrap().rtt.is_some());
        assert!(link.bdp().is_none());
    }
}
