//! Building like an earlier image (`sealfs build --like OLD`): every path the earlier image
//! holds keeps its place there when it still fits: its inode at the same offset of the metadata
//! area (so the same nid, and the same directory entries naming it), and, in uncompressed builds,
//! its data in the same blocks. What changed size past its old room, and what is new, goes into
//! the room left by removed paths (first fit) or after everything. The earlier image's epoch (the
//! time its compact inodes have) is kept too while it suits the tree about as well as any time,
//! so that unchanged inodes keep their form and size. So an update from the earlier image to
//! this one fetches little more than what changed (issue 41): blocks are found by their content,
//! and content stays in place. Files packed whole into the packed inode keep their old order
//! there, new ones after them (see `zdata::fragment_order`).
//!
//! The builder does not read images: what it needs of the earlier one ([`LikeItem`]s) is given
//! by whoever read it (`sealfs_delta::like_image` reads it with the reader).

use sealfs_format::{round_up, BLKSZ, EROFS_NULL_ADDR, INODE_SLOT_SIZE};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::Arc;

/// Inode offsets from here on are not kept (a metadata area of 1 TiB).
const MAX_META_OFFSET: u64 = 1 << 40;

/// Building like an earlier image, the data blocks left unused by keeping old places may be at
/// most this fraction (numerator, denominator) of the data area: the size budget for
/// layouts that favour updates (2%).
pub(crate) const LIKE_MAX_UNUSED: (u64, u64) = (2, 100);

/// Where the earlier image put one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LikeItem {
    /// The path, relative to the root, no leading `/` (empty for the root).
    pub path: Vec<u8>,
    /// Byte offset of its inode in the metadata area (or in the metabox's data): nid × 32.
    pub meta_offset: u64,
    /// The blocks its data fills whole (an uncompressed file or directory's blocks, its inline
    /// tail not counted), if they are one run.
    pub data_blocks: Option<Range<u64>>,
    /// The bytes of the image its data outside the metadata area takes, if they are one run
    /// (a compressed file's pclusters one after another, or an uncompressed file's blocks).
    pub data_span: Option<Range<u64>>,
    /// Its size (`i_size`).
    pub size: u64,
    /// Where its data starts in the packed inode, if it is a whole fragment there.
    pub packed_offset: Option<u64>,
}

/// One pcluster of the earlier image's packed inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedExtent {
    /// First decoded byte (of the packed inode).
    pub start: u64,
    /// Decoded length.
    pub len: u64,
    /// Stored raw (a PLAIN pcluster: the bytes from the pcluster's first on) rather than
    /// compressed.
    pub plain: bool,
    /// Its bytes in the earlier image: whole blocks.
    pub physical: Range<u64>,
}

/// A run of the earlier packed inode's pclusters, from a block boundary to a block boundary, that
/// no file crosses: a build can keep it byte for byte, its files at the same offsets from its
/// start, wherever it goes. Its blocks are then the same as before, which an update from the
/// earlier image finds by their hashes and does not fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedRun {
    /// Its pclusters, in order, one after another.
    pub extents: Vec<PackedExtent>,
}

impl PackedRun {
    /// Its decoded bytes in the earlier packed inode.
    pub fn range(&self) -> Range<u64> {
        match (self.extents.first(), self.extents.last()) {
            (Some(a), Some(b)) => a.start..b.start + b.len,
            _ => 0..0,
        }
    }

    /// Bytes of its pclusters.
    pub fn stored(&self) -> u64 {
        self.extents
            .iter()
            .map(|x| x.physical.end - x.physical.start)
            .sum()
    }
}

/// Reads an earlier image's bytes, each checked against its seal: whatever a build copies from
/// it, and what it compares before copying, is what that image's digest names.
pub trait EarlierBytes: std::fmt::Debug + Send + Sync {
    /// The decoded bytes `range` of its packed inode.
    fn packed(&self, range: Range<u64>) -> std::io::Result<Vec<u8>>;
    /// Its bytes `range` as stored.
    fn stored(&self, range: Range<u64>) -> std::io::Result<Vec<u8>>;
}

/// The earlier packed inode, as [`Like::with_packed_runs`] gives it.
#[derive(Clone, Debug)]
pub(crate) struct PackedRuns {
    /// Its pclusters' algorithm (id).
    pub alg: u8,
    /// The window they were compressed with (0: none).
    pub window: u64,
    pub runs: Vec<PackedRun>,
    pub bytes: Arc<dyn EarlierBytes>,
}

/// The placement of an earlier image, as the layout uses it.
#[derive(Clone, Debug, Default)]
pub struct Like {
    /// Per path: its old inode offset and the bytes up to the next inode (or the end of its block
    /// for the last), which it may fill again.
    meta: HashMap<Vec<u8>, (u64, u64)>,
    /// Per path: its old run of data blocks.
    blocks: HashMap<Vec<u8>, Range<u64>>,
    /// Per path: its old bytes of data, in one run, and its old size.
    spans: HashMap<Vec<u8>, (Range<u64>, u64)>,
    /// Per path: where its data started in the old packed inode (a whole fragment), and its size.
    packed: HashMap<Vec<u8>, (u64, u64)>,
    /// The old packed inode's runs of pclusters that may be kept byte for byte ([`PackedRun`]),
    /// their algorithm, and where to read them.
    runs: Option<PackedRuns>,
    /// Where the earlier metadata area ends (its last inode's block end).
    meta_end: u64,
    /// The earlier image has its metadata area first (`meta_blkaddr` 0: an uncompressed image
    /// built without `data-first`).
    meta_first: bool,
    /// The earlier image's epoch (`epoch`, `fixed_nsec`): the time its compact inodes have.
    epoch: Option<(i64, u32)>,
}

impl Like {
    /// The placement of an earlier image holding `items`, whose metadata area is its first
    /// block's (`meta_first`: `meta_blkaddr` is 0) or not.
    pub fn new(mut items: Vec<LikeItem>, meta_first: bool) -> Like {
        // (Places no image of ours has: ignored, whatever image they came from.)
        items.retain(|i| i.meta_offset < MAX_META_OFFSET);
        for i in &mut items {
            i.data_blocks = i
                .data_blocks
                .take()
                .filter(|b| b.end < EROFS_NULL_ADDR as u64);
        }
        let mut offsets: Vec<u64> = items.iter().map(|i| i.meta_offset).collect();
        offsets.sort_unstable();
        offsets.dedup();
        let room = |at: u64| -> u64 {
            let i = offsets.partition_point(|&o| o <= at);
            match offsets.get(i) {
                Some(&next) => next - at,
                None => round_up(at + 1, BLKSZ) - at,
            }
        };
        let meta_end = offsets.last().map_or(0, |&o| round_up(o + 1, BLKSZ));
        let mut like = Like {
            meta: HashMap::with_capacity(items.len()),
            blocks: HashMap::new(),
            spans: HashMap::new(),
            packed: HashMap::new(),
            runs: None,
            meta_end,
            meta_first,
            epoch: None,
        };
        for item in items {
            if let Some(b) = item.data_blocks.filter(|b| b.start < b.end) {
                like.blocks.insert(item.path.clone(), b);
            }
            if let Some(s) = item.data_span.filter(|s| {
                s.start >= BLKSZ && s.start < s.end && s.end <= EROFS_NULL_ADDR as u64 * BLKSZ
            }) {
                like.spans.insert(item.path.clone(), (s, item.size));
            }
            if let Some(at) = item.packed_offset {
                like.packed.insert(item.path.clone(), (at, item.size));
            }
            let r = room(item.meta_offset);
            like.meta.insert(item.path, (item.meta_offset, r));
        }
        like
    }

    /// The same, the earlier image's superblock epoch being `epoch` (`epoch`, `fixed_nsec`):
    /// the build keeps it while it suits the tree about as well as any time
    /// (`layout::choose_epoch`), so the inodes that were compact stay compact, and the same size.
    pub fn with_epoch(mut self, epoch: (i64, u32)) -> Like {
        self.epoch = Some(epoch);
        self
    }

    /// The same, the earlier image's packed inode being in `runs` of pclusters compressed with
    /// algorithm `alg` (its id) with a window (a dictionary) of `window` bytes as its
    /// superblock records it (0: none), read with `bytes`: a build with pieces keeps a run byte
    /// for byte where most of its files did not change (`keep::keep_runs`).
    pub fn with_packed_runs(
        mut self,
        (alg, window): (u8, u64),
        runs: Vec<PackedRun>,
        bytes: Arc<dyn EarlierBytes>,
    ) -> Like {
        self.runs = Some(PackedRuns {
            alg,
            window,
            runs,
            bytes,
        });
        self
    }

    /// The earlier packed inode's runs, if known.
    pub(crate) fn packed_runs(&self) -> Option<&PackedRuns> {
        self.runs.as_ref()
    }

    /// Where `path`'s data started in the old packed inode, and its size then.
    pub(crate) fn packed_place(&self, path: &[u8]) -> Option<(u64, u64)> {
        self.packed.get(path).copied()
    }

    /// The earlier image's epoch, if known.
    pub(crate) fn epoch(&self) -> Option<(i64, u32)> {
        self.epoch
    }

    /// Paths the earlier image holds.
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// Whether it holds no path.
    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// The old offset and room of `path`'s inode.
    pub(crate) fn meta(&self, path: &[u8]) -> Option<(u64, u64)> {
        self.meta.get(path).copied()
    }

    /// The old data blocks of `path`.
    pub(crate) fn blocks(&self, path: &[u8]) -> Option<Range<u64>> {
        self.blocks.get(path).cloned()
    }

    /// The old bytes of data of `path` (one run).
    pub(crate) fn span(&self, path: &[u8]) -> Option<Range<u64>> {
        self.spans.get(path).map(|(s, _)| s.clone())
    }

    /// Where `path`'s data started in the old packed inode.
    pub(crate) fn packed_offset(&self, path: &[u8]) -> Option<u64> {
        self.packed.get(path).map(|&(at, _)| at)
    }

    /// Every old inode place: (offset, room).
    pub(crate) fn meta_rooms(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.meta.values().copied()
    }

    /// Whether the earlier image's metadata area came first.
    pub(crate) fn meta_first(&self) -> bool {
        self.meta_first
    }

    /// Where the earlier metadata area ended.
    pub(crate) fn meta_end(&self) -> u64 {
        self.meta_end
    }
}

/// Room in a run of blocks, handed out first fit: the gaps between the runs kept in place, then
/// the end.
pub(crate) struct BlockGaps {
    /// Free runs by start: their ends.
    gaps: BTreeMap<u64, u64>,
    /// The first block after every run kept or given out.
    pub end: u64,
}

impl BlockGaps {
    /// The room from block `first` on, but for the runs `kept` (sorted, not overlapping).
    pub fn new(first: u64, kept: &[Range<u64>]) -> BlockGaps {
        let mut gaps = BTreeMap::new();
        let mut at = first;
        for r in kept {
            if r.start > at {
                gaps.insert(at, r.start);
            }
            at = at.max(r.end);
        }
        BlockGaps { gaps, end: at }
    }

    /// Blocks in the gaps no one took.
    pub fn unused(&self) -> u64 {
        self.gaps.iter().map(|(s, e)| e - s).sum()
    }

    /// `n` blocks, first fit.
    pub fn take(&mut self, n: u64) -> u64 {
        let found = self
            .gaps
            .iter()
            .find(|(&s, &e)| e - s >= n)
            .map(|(&s, &e)| (s, e));
        match found {
            Some((s, e)) => {
                self.gaps.remove(&s);
                if e - s > n {
                    self.gaps.insert(s + n, e);
                }
                s
            }
            None => {
                let s = self.end;
                self.end += n;
                s
            }
        }
    }
}

/// Where the data phase of a compressed build puts each file's data when building like an
/// earlier image: a file keeps the bytes its data took there (its pclusters, one after another)
/// while its data still fits them, or the free room after them, or that of smaller files not
/// placed yet (which then go elsewhere), so a file whose content did not change gets the same
/// pclusters at the same addresses. A file that no longer fits, or is new, takes the first gap that fits (the room
/// of removed files, or left by files that shrank or moved), else goes after everything. The data
/// of one file stays one run (compact indexes need it), so a file of several batches that
/// outgrows its old bytes is moved whole to the end.
///
/// Positions are bytes of the image. With encoded extents (`-E 48bit`), data is packed byte by
/// byte and a file may start inside a block; a move keeps its offset in the block, so its bytes
/// (DEFLATE's rule depends on where a stream ends in its block) stay the same.
#[derive(Debug)]
pub(crate) struct InPlace {
    /// The old bytes of each file that may keep them (by inode id), not yet given up.
    spans: HashMap<usize, Range<u64>>,
    /// The same by start: the file and the end.
    by_start: BTreeMap<u64, (usize, u64)>,
    /// Free runs of bytes by start: their ends.
    gaps: BTreeMap<u64, u64>,
    /// The first byte after everything kept or placed.
    pub end: u64,
    /// The file whose data is being placed batch by batch.
    open: Option<Open>,
}

/// A file of several batches being placed.
#[derive(Debug)]
struct Open {
    id: usize,
    /// Its first byte.
    start: u64,
    /// The byte after what it has placed so far.
    cursor: u64,
    /// It is in its old bytes, which end here (else it is at the end).
    limit: Option<u64>,
}

/// What [`InPlace::settle`] decided for a file's bytes just written at the tentative place.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    /// Move this batch's bytes (and every byte of the file placed before) by this many bytes, a
    /// multiple of the block size.
    pub delta: i64,
    /// The file's bytes placed in earlier batches, `(from, len)`, to move by `delta` (and then
    /// clear where they were).
    pub earlier: Option<(u64, u64)>,
}

impl InPlace {
    /// The room from byte `first` on, with `spans` (by inode id) held for their files: those
    /// that overlap one before them (by start) are not kept.
    pub fn new(first: u64, mut spans: Vec<(usize, Range<u64>)>) -> InPlace {
        spans.retain(|(_, s)| s.start >= first && s.start < s.end);
        spans.sort_unstable_by_key(|(id, s)| (s.start, *id));
        let mut kept = HashMap::with_capacity(spans.len());
        let mut gaps = BTreeMap::new();
        let mut at = first;
        for (id, s) in spans {
            if s.start < at {
                continue;
            }
            if s.start > at {
                gaps.insert(at, s.start);
            }
            at = s.end;
            kept.insert(id, s);
        }
        InPlace {
            by_start: kept.iter().map(|(&id, s)| (s.start, (id, s.end))).collect(),
            spans: kept,
            gaps,
            end: at,
            open: None,
        }
    }

    /// Bytes in gaps no file took.
    pub fn unused(&self) -> u64 {
        self.gaps.iter().map(|(s, e)| e - s).sum()
    }

    /// Where file `id`'s next bytes go, before they are known: after its bytes so far, at the
    /// start of its old bytes, or at the end.
    pub fn tentative(&self, id: usize) -> u64 {
        match &self.open {
            Some(o) if o.id == id => o.cursor,
            _ => self.spans.get(&id).map_or(self.end, |s| s.start),
        }
    }

    /// Gives `r` back to the free room (merged with its neighbours; at the end, the end comes
    /// back).
    fn free(&mut self, r: Range<u64>) {
        let (mut s, mut e) = (r.start, r.end);
        if s >= e {
            return;
        }
        if let Some((&ps, &pe)) = self.gaps.range(..=s).next_back() {
            if pe >= s {
                self.gaps.remove(&ps);
                s = ps;
                e = e.max(pe);
            }
        }
        while let Some((&ns, &ne)) = self.gaps.range(s..).next() {
            if ns > e {
                break;
            }
            self.gaps.remove(&ns);
            e = e.max(ne);
        }
        if e >= self.end {
            self.end = self.end.min(s);
        } else {
            self.gaps.insert(s, e);
        }
    }

    /// Gives up file `id`'s old bytes (it goes elsewhere, or another file took them).
    fn unhold(&mut self, id: usize) -> Option<Range<u64>> {
        let s = self.spans.remove(&id)?;
        self.by_start.remove(&s.start);
        Some(s)
    }

    /// The room right after `from` (where a file's room ends) up to `to`, if it is free or
    /// held by files not placed yet, of at most `most` bytes together (they go elsewhere, their
    /// data found wherever it is: only their inodes change): taken, up to the end of the last
    /// piece; returns that end (`None`: the end of everything, which now follows `to`).
    fn claim(&mut self, from: u64, to: u64, most: u64) -> Option<Option<u64>> {
        let (mut at, mut evicted, mut pieces) = (from, 0, Vec::new());
        while at < to {
            if at == self.end {
                pieces.push(None);
                break;
            }
            if let Some(&e) = self.gaps.get(&at) {
                pieces.push(Some((at, None)));
                at = e;
            } else if let Some(&(id, e)) = self.by_start.get(&at) {
                evicted += e - at;
                pieces.push(Some((at, Some(id))));
                at = e;
            } else {
                return None;
            }
        }
        if evicted > most {
            return None;
        }
        let mut limit = Some(at);
        for piece in pieces {
            match piece {
                Some((s, None)) => {
                    self.gaps.remove(&s);
                }
                Some((_, Some(id))) => {
                    self.unhold(id);
                }
                None => {
                    self.end = to;
                    limit = None;
                }
            }
        }
        Some(limit)
    }

    /// File `id`'s bytes of one batch were laid out at [`InPlace::tentative`]`(id)` = `at`, up
    /// to `end` (`first`: its first batch, `last`: its last): says where they go.
    pub fn settle(&mut self, id: usize, at: u64, end: u64, (first, last): (bool, bool)) -> Settled {
        let phase = at % BLKSZ;
        let mut out = Settled::default();
        let mut o = match self.open.take() {
            Some(o) if o.id == id => {
                debug_assert_eq!(o.cursor, at);
                o
            }
            other => {
                debug_assert!(
                    first && other.is_none(),
                    "a file's batches follow one another"
                );
                let len = end - at;
                match self.unhold(id) {
                    // Its old bytes hold it (with the free room after them).
                    Some(s) if s.start == at && end <= s.end => Open {
                        id,
                        start: at,
                        cursor: at,
                        limit: Some(s.end),
                    },
                    Some(s) if s.start == at => match self.claim(s.end, end, end - at) {
                        Some(limit) => Open {
                            id,
                            start: at,
                            cursor: at,
                            limit,
                        },
                        None => {
                            self.free(s);
                            self.elsewhere(id, at, len, phase, last, &mut out)
                        }
                    },
                    s => {
                        if let Some(s) = s {
                            self.free(s);
                        }
                        self.elsewhere(id, at, len, phase, last, &mut out)
                    }
                }
            }
        };
        let moved_end = end
            .checked_add_signed(out.delta)
            .expect("moves stay in the image");
        if let Some(limit) = o.limit.filter(|&l| moved_end > l) {
            match self.claim(limit, moved_end, at - o.start + (end - at)) {
                // Grows into the room after it.
                Some(l) => o.limit = l,
                None => {
                    // Outgrew its room: the whole file goes to the end.
                    debug_assert_eq!(out.delta, 0, "a file placed elsewhere has room");
                    let p = self.take_end(end - o.start, o.start % BLKSZ);
                    out.delta = p as i64 - o.start as i64;
                    out.earlier = Some((o.start, at - o.start));
                    self.free(o.start..limit);
                    o.start = p;
                    o.limit = None;
                }
            }
        }
        o.cursor = end
            .checked_add_signed(out.delta)
            .expect("moves stay in the image");
        if o.limit.is_none() {
            self.end = self.end.max(o.cursor);
        }
        if last {
            if let Some(l) = o.limit {
                self.free(o.cursor..l);
            }
        } else {
            self.open = Some(o);
        }
        out
    }

    /// A file whose old bytes do not hold it (or that has none): the first gap that holds it
    /// whole (a file of several batches, of which only the first is known: the largest gap,
    /// where it may grow), else the end. Sets `out.delta`; returns it as the open file, not yet advanced.
    fn elsewhere(
        &mut self,
        id: usize,
        at: u64,
        len: u64,
        phase: u64,
        last: bool,
        out: &mut Settled,
    ) -> Open {
        // (A file with no bytes here takes no room: asked of `take_gap`, it would be given the
        // first gap whole, and the gap would be lost.)
        let (p, limit) = match len == 0 && last {
            true => (at, Some(at)),
            false => match self.take_gap(len, phase, !last) {
                Some((p, e)) => (p, Some(e)),
                None => (self.take_end(len, phase), None),
            },
        };
        out.delta = p as i64 - at as i64;
        // (What it leaves of its room is given back when it is done.)
        Open {
            id,
            start: p,
            cursor: p,
            limit: match limit {
                Some(e) => Some(e),
                None if last => Some(p + len),
                None => None,
            },
        }
    }

    /// The first gap that holds `len` bytes at an offset `phase` into a block (`largest`: the
    /// largest, the first of those): taken whole; returns where they start and the gap's end.
    fn take_gap(&mut self, len: u64, phase: u64, largest: bool) -> Option<(u64, u64)> {
        let at_phase = |s: u64| s + (phase + BLKSZ - s % BLKSZ) % BLKSZ;
        let mut fits = (self.gaps.iter())
            .map(|(&s, &e)| (s, e, at_phase(s)))
            .filter(|&(_, e, p)| p + len <= e);
        let (s, e, p) = match largest {
            false => fits.next()?,
            true => fits.fold(None, |best: Option<(u64, u64, u64)>, g| match best {
                Some(b) if b.1 - b.0 >= g.1 - g.0 => Some(b),
                _ => Some(g),
            })?,
        };
        self.gaps.remove(&s);
        if p > s {
            self.gaps.insert(s, p);
        }
        Some((p, e))
    }

    /// `len` bytes at the end, at an offset `phase` into a block.
    fn take_end(&mut self, len: u64, phase: u64) -> u64 {
        let p = self.end + (phase + BLKSZ - self.end % BLKSZ) % BLKSZ;
        if p > self.end {
            self.gaps.insert(self.end, p);
        }
        self.end = p + len;
        p
    }
}

/// The pieces of a room `[at, at + len)` of the metadata area that lie within one block each
/// (where inodes with inline data may go), 32-byte aligned.
pub(crate) fn room_pieces(at: u64, len: u64) -> impl Iterator<Item = (u64, u64)> {
    let end = at + len;
    let mut a = round_up(at, INODE_SLOT_SIZE);
    std::iter::from_fn(move || {
        while a < end {
            let b = end.min(round_up(a + 1, BLKSZ));
            let piece = (a, b - a);
            a = b;
            if piece.1 >= INODE_SLOT_SIZE {
                return Some(piece);
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_reach_the_next_inode_or_the_block_end() {
        let item = |p: &[u8], o| LikeItem {
            path: p.to_vec(),
            meta_offset: o,
            data_blocks: None,
            data_span: None,
            size: 0,
            packed_offset: None,
        };
        let like = Like::new(vec![item(b"", 32), item(b"a", 96), item(b"b", 4000)], false);
        assert_eq!(like.meta(b""), Some((32, 64)));
        assert_eq!(like.meta(b"a"), Some((96, 3904)));
        assert_eq!(like.meta(b"b"), Some((4000, 96)));
        assert_eq!(like.meta_end(), 4096);
    }

    #[test]
    fn gaps_are_taken_first_fit_then_the_end() {
        let mut g = BlockGaps::new(1, &[3..5, 9..10]);
        assert_eq!(g.take(3), 5);
        assert_eq!(g.take(2), 1);
        assert_eq!(g.take(2), 10);
        assert_eq!(g.take(1), 8);
        assert_eq!(g.end, 12);
    }

    #[test]
    fn room_pieces_stay_in_one_block() {
        let p: Vec<_> = room_pieces(4000, 4200).collect();
        assert_eq!(
            p,
            vec![(4000, 96), (4096, 4096), (8192, 8)]
                .into_iter()
                .filter(|x| x.1 >= 32)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn files_keep_their_old_bytes_and_the_rest_fills_gaps() {
        const B: u64 = BLKSZ;
        // Files 1, 3, 4 had blocks 1-2, 7-8, 9; blocks 3-6 were a file now gone.
        let spans = vec![(1, B..3 * B), (3, 7 * B..9 * B), (4, 9 * B..10 * B)];
        let mut ip = InPlace::new(B, spans);
        assert_eq!(ip.end, 10 * B);
        // File 1, unchanged, stays.
        assert_eq!(ip.tentative(1), B);
        assert_eq!(ip.settle(1, B, 3 * B, (true, true)), Settled::default());
        // A new file of 3 blocks takes the first gap.
        assert_eq!(ip.tentative(5), 10 * B);
        let s = ip.settle(5, 10 * B, 13 * B, (true, true));
        assert_eq!(s.delta, -7 * B as i64);
        assert_eq!(ip.unused(), B);
        // File 3 grew to 3 blocks: it takes file 4's block (not placed yet, and smaller).
        let s = ip.settle(3, 7 * B, 10 * B, (true, true));
        assert_eq!(s, Settled::default());
        assert_eq!(ip.tentative(4), 10 * B, "file 4 goes elsewhere");
        assert_eq!(
            ip.settle(4, 10 * B, 11 * B, (true, true)).delta,
            -4 * B as i64
        );
        assert_eq!((ip.end, ip.unused()), (10 * B, 0));
    }

    #[test]
    fn a_file_of_several_batches_moves_whole_when_it_outgrows_its_room() {
        const B: u64 = BLKSZ;
        let mut ip = InPlace::new(B, vec![(1, B..3 * B), (2, 3 * B..10 * B)]);
        assert_eq!(ip.settle(1, B, 2 * B, (true, false)), Settled::default());
        assert_eq!(ip.tentative(1), 2 * B);
        // It needs block 3, file 2's first: file 2 is larger, so file 1 moves to the end.
        let s = ip.settle(1, 2 * B, 4 * B, (false, false));
        let earlier = Some((B, B));
        assert_eq!(
            s,
            Settled {
                delta: 9 * B as i64,
                earlier
            }
        );
        assert_eq!(ip.tentative(1), 13 * B);
        assert_eq!(
            ip.settle(1, 13 * B, 14 * B, (false, true)),
            Settled::default()
        );
        assert_eq!((ip.end, ip.unused()), (14 * B, 2 * B));
        // File 2, unchanged, stays; a new file of 2 blocks takes file 1's old room.
        assert_eq!(
            ip.settle(2, 3 * B, 10 * B, (true, true)),
            Settled::default()
        );
        assert_eq!(
            ip.settle(3, 14 * B, 16 * B, (true, true)).delta,
            -13 * B as i64
        );
        assert_eq!(ip.unused(), 0);
    }

    #[test]
    fn byte_packed_files_keep_their_offset_in_the_block_when_moved() {
        // File 1 had bytes 5000-9000, file 2 9000-20000 (encoded extents, packed byte by byte).
        let mut ip = InPlace::new(BLKSZ, vec![(1, 5000..9000), (2, 9000..20_000)]);
        // File 1 grew to 5000 bytes: no gap holds it, so after file 2, 904 bytes into a block.
        let s = ip.settle(1, 5000, 10_000, (true, true));
        assert_eq!(s.delta, 16_384);
        assert_eq!(ip.end, 21_384 + 5000);
        assert_eq!(ip.unused(), 9000 - 4096 + 1384);
    }

    #[test]
    fn a_file_with_no_bytes_here_takes_no_gap() {
        const B: u64 = BLKSZ;
        // Blocks 3-6 were a file now gone: a gap of 4 blocks.
        let mut ip = InPlace::new(B, vec![(1, B..3 * B), (3, 7 * B..9 * B)]);
        assert_eq!(ip.unused(), 4 * B);
        // A new file whose data is all elsewhere (a fragment, an inline tail, a twin's): no
        // bytes in the data area. The gap stays free (it was lost: the image grew by it, and
        // the 2% bound did not count it).
        let at = ip.tentative(7);
        assert_eq!(ip.settle(7, at, at, (true, true)), Settled::default());
        assert_eq!(ip.unused(), 4 * B);
        // The next new file takes it.
        assert_eq!(
            ip.settle(8, 9 * B, 11 * B, (true, true)).delta,
            -6 * B as i64
        );
        assert_eq!((ip.end, ip.unused()), (9 * B, 2 * B));
    }

    /// Random trees of files kept, grown, shrunk, emptied, removed and added, placed as the data
    /// phase places them (the last old file first, then the others by their old place, then the
    /// new ones; one to three batches each): the files' bytes never overlap one another or the
    /// free room, and every byte up to the end is a file's or free (room lost to neither is what
    /// grew python's image by 9.2%).
    #[test]
    fn no_room_is_lost_or_given_twice() {
        const B: u64 = BLKSZ;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for case in 0..3000 {
            // Old places: files 0..n one after another, with gaps now and then.
            let n = 1 + rand(12) as usize;
            let mut at = B;
            let mut old = Vec::new();
            for id in 0..n {
                at += rand(3) * B;
                let len = (1 + rand(6)) * B;
                old.push((id, at..at + len));
                at += len;
            }
            // v2: some removed (their places are not held), the rest with a new length (0: all
            // in its inode), and a few new files.
            let kept: Vec<(usize, Range<u64>)> =
                old.iter().filter(|_| rand(4) != 0).cloned().collect();
            let mut order: Vec<usize> = kept.iter().map(|(id, _)| *id).collect();
            if let Some(last) = kept.iter().max_by_key(|(_, s)| s.start).map(|(id, _)| *id) {
                order.retain(|&id| id != last);
                order.insert(0, last);
            }
            order.extend((0..rand(4) as usize).map(|k| 100 + k));
            let mut ip = InPlace::new(B, kept);
            let mut placed: Vec<Range<u64>> = Vec::new();
            for &id in &order {
                let len = rand(8) * B;
                let batches = 1 + rand(3);
                let (mut start, mut done) = (None::<u64>, 0u64);
                for b in 0..batches {
                    let part = match b + 1 == batches {
                        true => len - done,
                        false => (len / batches).next_multiple_of(B).min(len - done),
                    };
                    let at = ip.tentative(id);
                    let s = ip.settle(id, at, at + part, (b == 0, b + 1 == batches));
                    let moved = |x: u64| x.checked_add_signed(s.delta).unwrap();
                    if let Some((from, len)) = s.earlier {
                        assert_eq!(Some(from), start, "case {case}: file {id}'s earlier bytes");
                        assert_eq!(len, done, "case {case}: file {id}'s earlier bytes");
                    }
                    start = Some(match start {
                        Some(st) if s.earlier.is_some() => moved(st),
                        Some(st) => st,
                        None => moved(at),
                    });
                    done += part;
                }
                let st = start.unwrap();
                if done > 0 {
                    placed.push(st..st + done);
                }
            }
            let mut all: Vec<Range<u64>> = placed.clone();
            all.extend(ip.gaps.iter().map(|(&s, &e)| s..e));
            all.sort_by_key(|r| r.start);
            for w in all.windows(2) {
                assert!(
                    w[0].end <= w[1].start,
                    "case {case}: {:?} and {:?} overlap",
                    w[0],
                    w[1]
                );
            }
            let covered: u64 = all.iter().map(|r| r.end - r.start).sum();
            assert!(
                all.last().is_none_or(|r| r.end <= ip.end),
                "case {case}: past the end"
            );
            assert_eq!(
                covered,
                ip.end - B,
                "case {case}: room lost: {all:?}, end {}",
                ip.end
            );
        }
    }
}
