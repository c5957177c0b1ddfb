//! Building like an earlier image with pieces (`--like OLD --layout packed-pieces`): which runs
//! of the earlier packed inode's pclusters are kept byte for byte (issue 41).
//!
//! Files packed in the old order still change the piece that holds a changed file, so an update
//! fetches the whole piece (about 1 MB compressed) for one changed file in it. A kept run instead
//! keeps its old bytes, the old version of a changed file included, which nothing names any more
//! (dead bytes); the new version goes into a new piece with the other changed and new files. So
//! an update fetches the changed files and not their neighbours, and the image carries the dead
//! bytes, as many as [`KEEP_MAX_DEAD`] allows, spent where they save the most.
//!
//! Nothing is taken on trust from the earlier image: its bytes are read through its seal
//! ([`EarlierBytes`]), and a file is kept only where its old bytes are the same as the new
//! file's, compared byte for byte. A run whose bytes cannot be read (damaged) is not kept.

use crate::compress::{CompressOptions, ZExtent};
use crate::error::{BuildError, Result};
use crate::like::{EarlierBytes, Like, PackedRun, LIKE_MAX_UNUSED};
use crate::source::{open_file, Source};
use crate::tree::{Kind, Tree};
use sealfs_format::BLKSZ;
use std::collections::HashMap;
use std::path::Path;

/// The dead bytes (of files changed or removed since) that the kept runs may hold: at most this
/// fraction (numerator, denominator) of the earlier packed inode's stored bytes, the budget of
/// layouts that favour updates ([`LIKE_MAX_UNUSED`]). (Measured on bench/delta.py's pairs,
/// docs/benchmarks.md: with 0.5%, 1%, 2%, 4% and 10%, debian's update fetched 32.4, 31.1, 30.2,
/// 27.2 and 25.0 MB, against 34.1 with none; python's 68.0, 67.2, 66.1, 65.3 and 64.2 MB, against
/// 71.2; with 2% the images are 1.6% and 1.0% larger than `--preset small`'s.)
pub(crate) const KEEP_MAX_DEAD: (u64, u64) = LIKE_MAX_UNUSED;

/// Runs of the earlier packed inode kept byte for byte ([`keep_runs`]).
#[derive(Debug, Default)]
pub(crate) struct Kept {
    /// Each kept run and where it starts in the new packed inode: one after another from byte 0,
    /// in their old order.
    pub runs: Vec<(u64, PackedRun)>,
    /// The files kept in them: id, and offset in the new packed inode.
    pub files: HashMap<usize, u64>,
    /// Where the runs end (a block boundary): the other files go from here on.
    pub end: u64,
    /// Where the runs' bytes are read from.
    pub bytes: Option<std::sync::Arc<dyn EarlierBytes>>,
}

impl Kept {
    /// The runs' pclusters as extents of the new packed inode: their stored bytes as they were
    /// (whole blocks, so placed again they are the same blocks), at the new offsets.
    pub(crate) fn extents(&self, run: usize) -> Result<Vec<ZExtent>> {
        let (at, run) = &self.runs[run];
        let bytes = self.bytes.as_ref().expect("runs are kept with their bytes");
        let from = run.range().start;
        run.extents
            .iter()
            .map(|x| {
                let data = bytes.stored(x.physical.clone()).map_err(|e| {
                    BuildError::io(Path::new("(the earlier image, --like)"), "read", e)
                })?;
                Ok(ZExtent {
                    start: at + (x.start - from),
                    len: x.len,
                    plain: x.plain,
                    data,
                })
            })
            .collect()
    }

    /// Writes the kept runs' decoded bytes into the packed inode's file at their places.
    pub(crate) fn write_decoded(&self, file: &std::fs::File) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let Some(bytes) = &self.bytes else {
            return Ok(());
        };
        for (at, run) in &self.runs {
            let data = bytes
                .packed(run.range())
                .map_err(|e| BuildError::io(Path::new("(the earlier image, --like)"), "read", e))?;
            file.write_all_at(&data, *at)
                .map_err(|e| BuildError::io(Path::new("(packed inode)"), "write", e))?;
        }
        Ok(())
    }
}

/// A run of the earlier packed inode that holds live files.
struct Scored {
    /// Its index.
    run: usize,
    /// The files live in it: id and old offset.
    live: Vec<(usize, u64)>,
    /// Its bytes some live file takes.
    live_bytes: u64,
    /// Its other bytes.
    dead_bytes: u64,
    /// Its stored bytes the others take, at its compression ratio.
    dead_stored: u64,
}

/// Chooses the runs of `like`'s packed inode to keep, for the files `ids` to be packed: each
/// file whose old bytes in a run are the same as now is live there; a run's other bytes are
/// dead. Runs with no dead byte are kept; then those with the fewest dead bytes per live one,
/// while their dead bytes (counted at the run's compression ratio) fit [`KEEP_MAX_DEAD`]. Only
/// where the build would write the same kind of pclusters: the same algorithm, with a window and
/// pclusters no larger than its own, and not as encoded extents (`-E 48bit`).
pub(crate) fn keep_runs(
    source: &dyn Source,
    tree: &Tree,
    like: &Like,
    copts: &CompressOptions,
    ids: &[usize],
) -> Result<Kept> {
    use rayon::prelude::*;
    let Some(old) = like.packed_runs() else {
        return Ok(Kept::default());
    };
    // (A decoder set up for this build's window must decode them.)
    if copts.extents_48bit || copts.algorithm.id() != old.alg || old.window > copts.window() {
        return Ok(Kept::default());
    }
    let starts: Vec<u64> = old.runs.iter().map(|r| r.range().start).collect();
    // Per run: the files whose old bytes lie in it, at their old offsets, of the same size.
    let mut candidates: HashMap<usize, Vec<(usize, u64)>> = HashMap::new();
    for &id in ids {
        let inode = &tree.inodes[id];
        let Kind::File(f) = &inode.kind else { continue };
        let Some((at, size)) = like.packed_place(&tree.rel_path(inode)) else {
            continue;
        };
        let Some(r) = starts.partition_point(|&s| s <= at).checked_sub(1) else {
            continue;
        };
        if size == f.size && size > 0 && at.saturating_add(size) <= old.runs[r].range().end {
            candidates.entry(r).or_default().push((id, at));
        }
    }
    // Whole blocks from a block boundary to one, pclusters one after another, none larger than
    // this build's.
    let fits = |run: &PackedRun| {
        let r = run.range();
        r.start.is_multiple_of(BLKSZ)
            && r.end.is_multiple_of(BLKSZ)
            && r.start < r.end
            && run
                .extents
                .windows(2)
                .all(|w| w[0].start + w[0].len == w[1].start)
            && run.extents.iter().all(|x| {
                let stored = x.physical.end.saturating_sub(x.physical.start);
                x.physical.start.is_multiple_of(BLKSZ)
                    && stored.is_multiple_of(BLKSZ)
                    && stored > 0
                    && stored <= (copts.pcluster_bytes as u64).max(BLKSZ)
                    && (!x.plain || stored == BLKSZ)
            })
    };
    let mut scored: Vec<Scored> = candidates
        .into_par_iter()
        .filter(|(r, _)| fits(&old.runs[*r]))
        .map(|(r, files)| -> Result<_> {
            let run = &old.runs[r];
            let range = run.range();
            // (A run the earlier image cannot give, damaged, is not kept.)
            let Ok(bytes) = old.bytes.packed(range.clone()) else {
                return Ok(None);
            };
            let mut live = Vec::new();
            let mut buf = Vec::new();
            for (id, at) in files {
                let inode = &tree.inodes[id];
                let Kind::File(f) = &inode.kind else {
                    unreachable!("only files are candidates")
                };
                buf.resize(f.size as usize, 0);
                let mut file = open_file(source, tree, inode)?;
                file.read_at(&mut buf, 0)?;
                let from = (at - range.start) as usize;
                if bytes.get(from..from + buf.len()) == Some(&buf[..]) {
                    live.push((id, at));
                }
            }
            // Bytes some live file takes (identical files share theirs).
            let mut spans: Vec<(u64, u64)> = live
                .iter()
                .map(|&(id, at)| match &tree.inodes[id].kind {
                    Kind::File(f) => (at, at + f.size),
                    _ => unreachable!("only files are candidates"),
                })
                .collect();
            spans.sort_unstable();
            let (mut live_bytes, mut reach) = (0, range.start);
            for (a, b) in spans {
                live_bytes += b.saturating_sub(a.max(reach));
                reach = reach.max(b);
            }
            let len = range.end - range.start;
            let dead_stored =
                (run.stored() as u128 * (len - live_bytes) as u128 / len as u128) as u64;
            Ok((live_bytes > 0).then_some(Scored {
                run: r,
                live,
                live_bytes,
                dead_bytes: len - live_bytes,
                dead_stored,
            }))
        })
        .filter_map(Result::transpose)
        .collect::<Result<_>>()?;
    // Fewest dead bytes per live byte first (by cross-multiplication), then in old order: the
    // stored bytes a piece keeps from being fetched again per stored byte it carries dead (both
    // at its compression ratio).
    scored.sort_by(|a, b| {
        ((a.dead_bytes as u128) * (b.live_bytes as u128))
            .cmp(&((b.dead_bytes as u128) * (a.live_bytes as u128)))
            .then(a.run.cmp(&b.run))
    });
    let total: u64 = old.runs.iter().map(PackedRun::stored).sum();
    let budget = total / KEEP_MAX_DEAD.1 * KEEP_MAX_DEAD.0;
    let mut spent = 0;
    let mut chosen: Vec<(usize, Vec<(usize, u64)>)> = Vec::new();
    for s in scored {
        if spent + s.dead_stored <= budget {
            spent += s.dead_stored;
            chosen.push((s.run, s.live));
        }
    }
    chosen.sort_unstable_by_key(|(r, _)| *r);
    let mut kept = Kept {
        bytes: Some(old.bytes.clone()),
        ..Kept::default()
    };
    for (r, live) in chosen {
        let run = old.runs[r].clone();
        let from = run.range().start;
        for (id, at) in live {
            kept.files.insert(id, kept.end + (at - from));
        }
        let len = run.range().end - from;
        kept.runs.push((kept.end, run));
        kept.end += len;
    }
    Ok(kept)
}
