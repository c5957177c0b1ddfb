//! When to fetch the rest of an image on its own ([`FillMode::Auto`]): once reads scatter over an
//! image the store can hold whole.
//!
//! A read that scatters is one that had to fetch data (the store lacked some of its blocks) and
//! continued no sequential stream: a file opened somewhere else in the image. Each costs a round
//! trip that nothing could have fetched ahead. A sequential stream costs one at its start, then
//! rides on its readahead; a reader of a few files costs a few. [`SCATTERED_READS`] of them within
//! [`SCATTER_WINDOW`] say the reader goes on reading here and there: from then on, every block the
//! fill has brought is a round trip saved, and the fill itself waits behind every other fetch and
//! keeps about a bandwidth-delay product in flight ([`super::link`]), so it costs the reads little.
//!
//! Only an image whose EROFS bytes and Merkle tree take at most [`FIT_NUMERATOR`]/[`FIT_DENOMINATOR`]
//! of the store's bound ([`crate::BlockStore::capacity`]) is filled: a larger one would push its own
//! first blocks out (the store deletes the least recently used ones past its bound) while its last
//! ones came in, and the rest of the bound is left to the other images the store keeps.
//!
//! Nothing here depends on where the bytes come from: the reads, the streams and the store are
//! the verifying source's own, whatever [`crate::ReadAt`] is under it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Whether a verifying source with a store fetches the rest of the image into it in the
/// background ([`crate::VerifiedBlocks::set_fill`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FillMode {
    /// Never: reads fetch what they need, and sequential streams what they will need.
    Off,
    /// Once reads scatter over an image the store can hold whole (see the module's text).
    #[default]
    Auto,
    /// From the start of readahead, whatever the reads do.
    On,
}

impl std::fmt::Display for FillMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FillMode::Off => "off",
            FillMode::Auto => "auto",
            FillMode::On => "on",
        })
    }
}

impl std::str::FromStr for FillMode {
    type Err = String;

    fn from_str(s: &str) -> Result<FillMode, String> {
        match s {
            "off" => Ok(FillMode::Off),
            "auto" => Ok(FillMode::Auto),
            "on" => Ok(FillMode::On),
            other => Err(format!("`{other}`: auto, on or off")),
        }
    }
}

/// Scattered reads that start the fill: 16 round trips that nothing fetched ahead (0.3 s at a
/// 20 ms round trip), against the one a sequential stream costs and the few of a reader of a
/// few files.
pub const SCATTERED_READS: usize = 16;

/// The time within which they must come: a reader that opens a file now and then over hours is
/// served as it goes.
pub const SCATTER_WINDOW: Duration = Duration::from_secs(10);

/// The share of the store's bound an image may take and still be filled: three quarters.
pub const FIT_NUMERATOR: u64 = 3;
/// See [`FIT_NUMERATOR`].
pub const FIT_DENOMINATOR: u64 = 4;

/// Whether an image of `bytes` (EROFS bytes and tree) fits a store bounded at `capacity`.
pub(super) fn fits(bytes: u64, capacity: Option<u64>) -> bool {
    capacity.is_none_or(|c| bytes <= c / FIT_DENOMINATOR * FIT_NUMERATOR)
}

/// The scattered reads of the last [`SCATTER_WINDOW`].
#[derive(Debug, Default)]
pub(super) struct Scatter {
    times: VecDeque<Instant>,
}

impl Scatter {
    /// Counts a scattered read at `now`; whether the fill should start.
    pub(super) fn note(&mut self, now: Instant) -> bool {
        self.times.push_back(now);
        while self
            .times
            .front()
            .is_some_and(|&t| now.duration_since(t) > SCATTER_WINDOW)
        {
            self.times.pop_front();
        }
        self.times.len() >= SCATTERED_READS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scattered_reads_count_within_the_window_only() {
        let mut s = Scatter::default();
        let t0 = Instant::now();
        // One every second: at most 11 in any 10 s, never the threshold.
        for k in 0..40 {
            assert!(!s.note(t0 + Duration::from_secs(k)), "{k}");
        }
        let t1 = t0 + Duration::from_secs(100);
        for k in 0..SCATTERED_READS as u64 {
            let start = s.note(t1 + Duration::from_millis(k * 20));
            assert_eq!(start, k + 1 == SCATTERED_READS as u64, "{k}");
        }
    }

    #[test]
    fn an_image_fits_three_quarters_of_the_bound() {
        assert!(fits(1 << 40, None));
        assert!(fits(1536 << 20, Some(2 << 30)));
        assert!(!fits((1536 << 20) + 1, Some(2 << 30)));
        assert_eq!("auto".parse::<FillMode>(), Ok(FillMode::Auto));
        assert!("yes".parse::<FillMode>().is_err());
    }
}
