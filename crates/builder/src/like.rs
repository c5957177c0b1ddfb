//! Building like an earlier image (`sealfs build --like OLD`): every path the earlier image
//! holds keeps its place there when it still fits: its inode at the same offset of the metadata
//! area (so the same nid, and the same directory entries naming it), and, in uncompressed builds,
//! its data in the same blocks. What changed size past its old room, and what is new, goes into
//! the room left by removed paths (first fit) or after everything. So an update from the earlier
//! image to this one fetches little more than what changed (issue 41): blocks are found by their
//! content, and content stays in place.
//!
//! The builder does not read images: what it needs of the earlier one ([`LikeItem`]s) is given
//! by whoever read it (`sealfs_delta::like_image` reads it with the reader).

use sealfs_format::{round_up, BLKSZ, INODE_SLOT_SIZE};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;

/// Inode offsets from here on are not kept (a metadata area of 1 TiB).
const MAX_META_OFFSET: u64 = 1 << 40;

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
}

/// The placement of an earlier image, as the layout uses it.
#[derive(Clone, Debug, Default)]
pub struct Like {
    /// Per path: its old inode offset and the bytes up to the next inode (or the end of its block
    /// for the last), which it may fill again.
    meta: HashMap<Vec<u8>, (u64, u64)>,
    /// Per path: its old run of data blocks.
    blocks: HashMap<Vec<u8>, Range<u64>>,
    /// Where the earlier metadata area ends (its last inode's block end).
    meta_end: u64,
    /// The earlier image has its metadata area first (`meta_blkaddr` 0: an uncompressed image
    /// built without `data-first`).
    meta_first: bool,
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
                .filter(|b| b.end < sealfs_format::EROFS_NULL_ADDR as u64);
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
            meta_end,
            meta_first,
        };
        for item in items {
            if let Some(b) = item.data_blocks.filter(|b| b.start < b.end) {
                like.blocks.insert(item.path.clone(), b);
            }
            let r = room(item.meta_offset);
            like.meta.insert(item.path, (item.meta_offset, r));
        }
        like
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
}
