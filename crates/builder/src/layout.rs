//! The layout plan: where every inode, inline tail, shared xattr and data block goes, decided entirely
//! before a byte is written, so that writing can proceed in parallel to known positions.
//!
//! Image shape: block 0 holds the superblock at byte 1024; the metadata area starts right after it
//! (`meta_blkaddr = 0`, so `nid = byte offset / 32`) with the root inode first (its nid must fit 16
//! bits), the shared xattr area (`xattr_blkaddr = 0`), then every other inode in breadth-first order.
//! Inline tails never cross a block: an inode with a tail that does not fit the rest of the current block
//! starts the next one, and the gap it leaves is offered to later inodes. Data blocks follow the
//! metadata area, file by file in the same order (with [`Placement::data_first`], they come first,
//! from block 1, and the metadata area after them, as in compressed builds). Built like an earlier
//! image ([`Like`], `--like`), inodes and uncompressed data keep their old places first where they
//! fit, and the rest fills the room left, then goes after.

use crate::dedupe::ContentDigests;
use crate::error::{BuildError, Result};
use crate::like::{room_pieces, BlockGaps, Like, LIKE_MAX_UNUSED};
use crate::options::Placement;
use crate::spill::{Spill, Spilled};
use crate::tree::{Inode, InodeId, Kind, Tree};
use crate::xattrs::{self, SharedXattrs};
use sealfs_format::{self as fmt, round_up, DataLayout, BLKSZ, EROFS_DIRENT_SIZE, EROFS_NULL_ADDR};
use std::collections::{BTreeSet, HashMap};

/// Where one inode goes and how its data is laid out.
#[derive(Debug, Clone)]
pub(crate) struct InodePlan {
    /// Byte offset of the inode (`nid = offset / 32`).
    pub offset: u64,
    pub extended: bool,
    pub layout: DataLayout,
    /// `i_size`.
    pub size: u64,
    /// Size of the xattr body.
    pub ibody_len: u64,
    /// Bytes of data stored inline after the xattr body (FLAT_INLINE tail).
    pub inline_len: u64,
    /// First data block (FLAT layouts), or `EROFS_NULL_ADDR`.
    pub startblk: u32,
    /// The rest of where its data is, by layout.
    pub map: DataMap,
    /// `offset` is in the metabox's data (the nid gets the metabox bit).
    pub in_metabox: bool,
    /// Its whole blocks are those of this identical file (whole-file dedupe, FLAT layouts): an
    /// inode id (32 bits, as the sink numbers nodes: a plan has an `InodePlan` per inode).
    pub blocks_of: Option<u32>,
}

/// Where an inode's data is beyond `startblk` and `inline_len`: at most one of these applies to
/// an inode, so they share one field (a plan has an `InodePlan` per inode; the large ones are
/// boxed, as most inodes have none).
#[derive(Debug, Clone)]
pub(crate) enum DataMap {
    /// Nothing more (FLAT layouts: whole blocks from `startblk`, the tail copied with them).
    Flat,
    /// FLAT_INLINE, its inline tail bytes already read by the data phase, in the plan's spill
    /// (otherwise the copy phase writes them).
    Tail(Spilled),
    /// Block map of a chunk-based inode.
    Chunks(Box<ChunkPlan>),
    /// Extents of a compressed inode (COMPRESSED_*), placed by the data phase.
    Extents(Box<ZPlan>),
    /// The whole file is a fragment at this offset of the packed inode (COMPRESSED_FULL).
    Fragment(u64),
}

/// A compressed file's extents, as the data phase of a compressed build placed them.
#[derive(Debug, Clone)]
pub(crate) struct ZPlan {
    /// EROFS algorithm id.
    pub alg: u8,
    /// Some pcluster has more than one block (CBLKCNT entries, BIG_PCLUSTER_1).
    pub big_pcluster: bool,
    /// The extents in file order.
    pub extents: Vec<ZPlaced>,
    /// The tail pcluster stored inline after the indexes (ztailpacking), in the plan's spill; empty
    /// if none.
    pub idata: Spilled,
    /// 48-bit encoded extents, one per logical cluster of `1 << bits` bytes, their data packed
    /// byte by byte from the first extent's `pstart` (COMPRESSED_FULL); `None`: COMPACT indexes.
    pub extents_48bit: Option<u8>,
    /// The last extent's data is in the packed inode at this offset (`FRAGMENT_PCLUSTER`, a tail
    /// fragment); that extent is in `extents` with no blocks.
    pub fragment_tail: Option<u64>,
}

/// One placed extent.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ZPlaced {
    pub start: u64,
    pub len: u64,
    pub plain: bool,
    /// First block of the pcluster (0 for the inline tail).
    pub blkaddr: u32,
    /// Blocks the pcluster touches.
    pub blocks: u32,
    /// Byte address of its data (encoded extents).
    pub pstart: u64,
    /// Bytes of its data (compressed stream, or raw bytes).
    pub plen: u64,
}

impl ZPlan {
    /// Bytes from the inode start to the end of its COMPACT indexes (inline tail excluded).
    pub fn meta_len(isize: u64, ibody_len: u64, size: u64) -> u64 {
        let ebase = zmap_header_offset(isize, ibody_len) + fmt::Z_EROFS_MAP_HEADER_SIZE;
        // The builder always writes `COMPACTED_2B`; `ebase` is relative to the 32-byte aligned inode.
        let advise = fmt::Z_EROFS_ADVISE_COMPACTED_2B;
        ebase + fmt::compact_index_split(ebase, size.div_ceil(BLKSZ), advise).index_bytes()
    }

    /// Bytes from the inode start to the end of its encoded extent records of `recsz` bytes, one
    /// per logical cluster of `1 << bits` bytes, after the map header (and, for 4-byte records,
    /// the 8-byte `pstart` they count from).
    pub fn meta_len_48bit(isize: u64, ibody_len: u64, size: u64, bits: u8, recsz: u64) -> u64 {
        let records =
            fmt::z_erofs_extent_records_start(zmap_header_offset(isize, ibody_len), recsz);
        let pstart = if recsz == fmt::Z_EROFS_EXTENT_RECSZ_PLEN {
            8
        } else {
            0
        };
        records + pstart + size.div_ceil(1 << bits) * recsz
    }

    /// The size of its encoded extent records: 4 bytes (`plen`) while each extent's data follows
    /// the previous one's; 8 (`plen`, `pstart_lo`) when some extent refers to data placed earlier
    /// (dedupe), all below 4 GiB; else 16 (`pstart_hi`, `lstart` too).
    pub fn record_size(&self) -> u64 {
        let data = match self.fragment_tail {
            Some(_) => &self.extents[..self.extents.len() - 1],
            None => &self.extents[..],
        };
        let contiguous = data
            .windows(2)
            .all(|w| w[0].pstart + w[0].plen == w[1].pstart);
        if contiguous {
            fmt::Z_EROFS_EXTENT_RECSZ_PLEN
        } else if data.iter().all(|e| e.pstart < 1 << 32) {
            8
        } else {
            16
        }
    }

    /// Bytes from the inode start to the end of its indexes, whichever form they take.
    pub fn meta_len_of(&self, isize: u64, ibody_len: u64, size: u64) -> u64 {
        match self.extents_48bit {
            Some(bits) => Self::meta_len_48bit(isize, ibody_len, size, bits, self.record_size()),
            None => Self::meta_len(isize, ibody_len, size),
        }
    }

    /// Blocks of data it holds outside the metadata area.
    pub fn blocks(&self) -> u64 {
        self.extents.iter().map(|e| e.blocks as u64).sum()
    }
}

/// What the data phase of a compressed build decided and wrote for a regular file.
#[derive(Debug, Clone)]
pub(crate) enum Placed {
    /// The whole file is a fragment at this offset of the packed inode.
    Fragment { offset: u64 },
    /// Compressed extents.
    Compressed(ZPlan),
    /// Stored as is: whole blocks from `startblk` (the last partial one among them when `tail` is
    /// `None`), and the tail bytes to store inline.
    Flat {
        startblk: u32,
        blocks: u64,
        tail: Option<Spilled>,
    },
    /// Chunk-based with holes, its map filled.
    Chunks(ChunkPlan),
}

/// The result of a compressed build's data phase: placements by inode id, and the first free block.
#[derive(Debug)]
pub(crate) struct PreData {
    pub files: Vec<Option<Placed>>,
    pub data_end: u64,
    /// Id of the packed inode (the last), if there are fragments.
    pub packed: Option<InodeId>,
    /// The inline data of the placements.
    pub spill: Spill,
}

/// Inode core size and xattr body size of an inode of `size` bytes, as the plan will choose them.
pub(crate) fn inode_lens(
    tree: &Tree,
    inode: &Inode,
    size: u64,
    epoch: (i64, u32),
    shared: &SharedXattrs,
) -> Result<(bool, u64, u64)> {
    let ibody_len = xattrs::ibody_size(tree, inode, shared)?;
    let extended = size > u32::MAX as u64
        || inode.uid > u16::MAX as u32
        || inode.gid > u16::MAX as u32
        || inode.nlink > u16::MAX as u32
        || (inode.mtime, inode.mtime_nsec) != epoch;
    Ok((extended, fmt::inode_isize(extended), ibody_len))
}

/// Offset of the map header relative to the inode.
pub(crate) fn zmap_header_offset(isize: u64, ibody_len: u64) -> u64 {
    fmt::z_erofs_map_header_start(isize + ibody_len).expect("inode sizes are small")
}

impl InodePlan {
    pub fn nid(&self) -> u64 {
        let metabox = if self.in_metabox {
            1 << fmt::EROFS_DIRENT_NID_METABOX_BIT
        } else {
            0
        };
        (self.offset >> fmt::INODE_SLOT_BITS) | metabox
    }

    pub fn isize(&self) -> u64 {
        fmt::inode_isize(self.extended)
    }

    /// Offset of the inline tail.
    pub fn inline_offset(&self) -> u64 {
        self.offset + self.isize() + self.ibody_len
    }

    /// Block map of a chunk-based inode.
    pub fn chunks(&self) -> Option<&ChunkPlan> {
        match &self.map {
            DataMap::Chunks(c) => Some(c),
            _ => None,
        }
    }

    /// Extents of a compressed inode.
    pub fn zmap(&self) -> Option<&ZPlan> {
        match &self.map {
            DataMap::Extents(z) => Some(z),
            _ => None,
        }
    }

    /// The offset in the packed inode of a file that is a fragment whole.
    pub fn fragment(&self) -> Option<u64> {
        match self.map {
            DataMap::Fragment(offset) => Some(offset),
            _ => None,
        }
    }

    /// Inline tail bytes the data phase read, in the plan's spill.
    pub fn inline_bytes(&self) -> Option<Spilled> {
        match self.map {
            DataMap::Tail(tail) => Some(tail),
            _ => None,
        }
    }

    /// Whole data blocks in the data area (FLAT layouts).
    pub fn full_blocks(&self) -> u64 {
        match self.layout {
            DataLayout::FlatInline => self.size / BLKSZ,
            DataLayout::FlatPlain => self.size.div_ceil(BLKSZ),
            _ => 0,
        }
    }
}

/// A chunk-based (sparse) file: chunks of `1 << chunkbits` bytes, each a hole or a run of blocks.
#[derive(Debug, Clone)]
pub(crate) struct ChunkPlan {
    pub chunkbits: u8,
    /// Per chunk: start block, or `EROFS_NULL_ADDR` for a hole.
    pub map: Vec<u32>,
}

impl ChunkPlan {
    /// Offset of the block map relative to the inode start.
    pub fn map_offset(isize: u64, ibody_len: u64) -> u64 {
        round_up(isize + ibody_len, fmt::EROFS_BLOCK_MAP_ENTRY_SIZE)
    }
}

/// The whole image plan.
#[derive(Debug)]
pub(crate) struct Plan {
    pub inodes: Vec<InodePlan>,
    /// Byte offset of the metadata area (`meta_blkaddr * 4096`); inode offsets are relative to it.
    pub meta_base: u64,
    /// Byte offset of the shared xattr area (4-aligned; `xattr_blkaddr` is 0).
    pub shared_offset: u64,
    pub total_blocks: u64,
    pub epoch: i64,
    pub fixed_nsec: u32,
    pub chunked: bool,
    /// Id of the packed inode, if there are fragments.
    pub packed: Option<InodeId>,
    /// Bytes each inode takes in its metadata area, inline data included.
    pub item_lens: Vec<u64>,
    /// Bytes of the metabox's data (inodes and shared xattrs), when there is one.
    pub metabox_len: Option<u64>,
    /// Id of the metabox inode, once it is added (see [`place_outside_metabox`]).
    pub metabox: Option<InodeId>,
    /// Where `inline_bytes` and `ZPlan::idata` are (compressed builds).
    pub spill: Option<Spill>,
    /// Content digests of the files that may share blocks (an uncompressed build), by inode id.
    pub alike: ContentDigests,
    /// Building like an earlier image, whether its inode places were given up (the root, which
    /// could not keep its place, would not have fit a 16-bit nid after them, or they left more of
    /// the metadata area unused than `LIKE_MAX_UNUSED` of what placing them anew takes).
    pub meta_places_dropped: bool,
}

/// Directory block layout: the entries (including "." and "..") in order, and where each block starts.
pub(crate) struct DirBlocks<'a> {
    /// (name, child id) sorted by name bytes.
    pub entries: Vec<(&'a [u8], InodeId)>,
    /// Index into `entries` of each block's first entry.
    pub block_starts: Vec<usize>,
    /// Directory `i_size`: full blocks plus the used part of the last.
    pub size: u64,
}

/// Sorts a directory's entries with "." and ".." in their byte order and splits them into blocks.
pub(crate) fn dir_blocks(tree: &Tree, id: InodeId) -> DirBlocks<'_> {
    let inode = &tree.inodes[id];
    let Kind::Dir { entries } = &inode.kind else {
        unreachable!("dir_blocks on a non-directory")
    };
    let mut all: Vec<(&[u8], InodeId)> = Vec::with_capacity(entries.len() + 2);
    all.push((b".", id));
    // The root is its own parent.
    all.push((b"..", inode.origin.dir().unwrap_or(id)));
    all.extend(tree.entries(entries));
    all.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut block_starts = vec![0];
    let mut used = 0u64;
    let mut size = 0u64;
    for (i, (name, _)) in all.iter().enumerate() {
        let need = EROFS_DIRENT_SIZE + name.len() as u64;
        if used + need > BLKSZ {
            block_starts.push(i);
            size += BLKSZ;
            used = 0;
        }
        used += need;
    }
    DirBlocks {
        entries: all,
        block_starts,
        size: size + used,
    }
}

/// The most common (mtime, nsec) becomes the superblock epoch, so the most inodes can be compact.
///
/// Building like an earlier image, its epoch stays while at least half as many inodes have it as
/// have the most common time: the unchanged inodes it made compact keep their form, their size
/// and so their places. (The most common time taken instead, when a few changed inodes made
/// another time the most common, turned every unchanged inode of the old epoch extended and
/// every one of the new epoch compact: the grown ones outgrew their places and moved, and the
/// update fetched more than one to v2 built alone, issue 41.) Past that, the old epoch would
/// cost more extended inodes than it keeps compact, and the most common time is taken.
pub(crate) fn choose_epoch(tree: &Tree) -> (i64, u32) {
    let mut count: HashMap<(i64, u32), u64> = HashMap::new();
    for inode in &tree.inodes {
        *count.entry((inode.mtime, inode.mtime_nsec)).or_default() += 1;
    }
    let old = tree
        .like_epoch
        .map_or(0, |t| count.get(&t).copied().unwrap_or(0));
    let best = count
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)));
    match (tree.like_epoch, best) {
        (Some(t), Some((_, most))) if old > 0 && old * 2 >= most => t,
        (_, best) => best.map(|(t, _)| t).unwrap_or((0, 0)),
    }
}

/// Picks the chunk size that minimises block map plus stored data for a file with holes, or `None`
/// when storing the file densely is no larger.
pub(crate) fn plan_chunks(size: u64, ranges: &[(u64, u64)]) -> Option<(u8, Vec<bool>)> {
    let dense = round_up(size, BLKSZ);
    let mut best: Option<(u64, u8)> = None;
    for extra in 0..=31u8 {
        let bits = fmt::BLKSZBITS + extra;
        let cs = 1u64 << bits;
        let count = size.div_ceil(cs);
        let mut cost = count * fmt::EROFS_BLOCK_MAP_ENTRY_SIZE;
        let mut last = u64::MAX;
        for &(s, e) in ranges {
            for c in (s / cs)..=((e - 1) / cs) {
                if c != last {
                    cost += round_up(cs.min(size - c * cs), BLKSZ);
                    last = c;
                }
            }
        }
        if best.is_none_or(|(b, _)| cost < b) {
            best = Some((cost, bits));
        }
        if cs >= size {
            break;
        }
    }
    let (cost, bits) = best?;
    if cost >= dense {
        return None;
    }
    let cs = 1u64 << bits;
    let mut mapped = vec![false; size.div_ceil(cs) as usize];
    for &(s, e) in ranges {
        for c in (s / cs)..=((e - 1) / cs) {
            mapped[c as usize] = true;
        }
    }
    Some((bits, mapped))
}

/// Marks the flat files whose content `digests` names alike to share one copy of their whole
/// blocks: those of the first of them stored without an inline tail (its last block holds the tail,
/// so it has all the blocks any of them needs), or else of the first of them.
fn share_blocks(inodes: &mut [InodePlan], digests: &ContentDigests) {
    // The files that may share, by digest then id (indexes into `digests`, 4 bytes each: in an
    // archive of many identical files nearly every file is one).
    let mut alike: Vec<u32> = (digests.iter().enumerate())
        .filter(|(_, (id, _))| {
            let p = &inodes[*id];
            matches!(p.layout, DataLayout::FlatPlain | DataLayout::FlatInline)
                && p.full_blocks() > 0
        })
        .map(|(at, _)| u32::try_from(at).expect("inode ids fit in 32 bits"))
        .collect();
    alike.sort_unstable_by(|&a, &b| {
        let (a, b) = (digests.at(a as usize), digests.at(b as usize));
        a.1.cmp(b.1).then(a.0.cmp(&b.0))
    });
    for group in alike.chunk_by(|&a, &b| digests.at(a as usize).1 == digests.at(b as usize).1) {
        let ids = || group.iter().map(|&at| digests.at(at as usize).0);
        let owner = ids()
            .find(|&id| inodes[id].layout == DataLayout::FlatPlain)
            .unwrap_or(digests.at(group[0] as usize).0);
        for id in ids().filter(|&id| id != owner) {
            inodes[id].blocks_of = Some(owner as u32);
        }
    }
}

/// Placement of metadata items: a cursor, plus the gaps left in earlier blocks by inodes whose inline
/// tail had to start a new block. Gaps are reused best-fit (smallest that holds the item), which is
/// deterministic and keeps the metadata area dense.
struct MetaAllocator {
    cursor: u64,
    /// Gaps keyed by (length, start).
    holes: BTreeSet<(u64, u64)>,
}

impl MetaAllocator {
    fn new(cursor: u64) -> Self {
        Self {
            cursor,
            holes: BTreeSet::new(),
        }
    }

    /// Places `len` bytes (32-aligned). With `one_block`, the item must not cross a block boundary.
    fn place(&mut self, len: u64, one_block: bool) -> u64 {
        let len = round_up(len, fmt::INODE_SLOT_SIZE);
        if let Some(&(hlen, start)) = self.holes.range((len, 0)..).next() {
            self.holes.remove(&(hlen, start));
            if hlen > len {
                self.holes.insert((hlen - len, start + len));
            }
            return start;
        }
        if one_block {
            let block_end = round_up(self.cursor + 1, BLKSZ);
            if self.cursor + len > block_end {
                if block_end > self.cursor {
                    self.holes.insert((block_end - self.cursor, self.cursor));
                }
                self.cursor = block_end;
            }
        }
        let start = self.cursor;
        self.cursor += len;
        start
    }
}

/// Inodes are placed in windows of this many, in id (breadth-first) order; inside a window the largest
/// go first, so the small ones fill the gaps the large ones leave (first-fit decreasing, kept local).
const PLACEMENT_WINDOW: usize = 256;

/// Plans the image for `tree`. Without `pre`, the metadata area starts in block 0 and file data follows
/// it; with `pre` (a compressed build, whose file data was written first), directories' blocks follow
/// the file data and the metadata area comes last.
///
/// Files with equal content digests in `alike` (an uncompressed build) share their blocks ([`share_blocks`]).
///
/// With `metabox` (a compressed build), every inode but the packed one and the shared xattrs are
/// placed in the metabox's data instead, the shared xattrs first (so that `xattr_blkaddr` is 0
/// there); the metadata area outside it is placed once the metabox is compressed
/// ([`place_outside_metabox`]).
pub(crate) fn plan(
    tree: &Tree,
    shared: &SharedXattrs,
    mut pre: Option<PreData>,
    metabox: bool,
    alike: ContentDigests,
    placement: Placement,
    like: Option<&Like>,
) -> Result<Plan> {
    // Uncompressed file data first (from block 1, after the superblock), the metadata after it
    // (also when building like an earlier image that has it so).
    let data_first =
        pre.is_none() && (placement.data_first || like.is_some_and(|l| !l.meta_first()));
    let (epoch, fixed_nsec) = choose_epoch(tree);
    let mut chunked = false;
    let mut inodes = Vec::with_capacity(tree.inodes.len());
    // The chunks each chunk-based file stores, by id (few files have holes).
    let mut chunk_masks: Vec<(InodeId, Vec<bool>)> = Vec::new();
    // Bytes each inode takes in the metadata area, tail included.
    let mut item_lens = Vec::with_capacity(tree.inodes.len());

    for (id, inode) in tree.inodes.iter().enumerate() {
        let placed = pre
            .as_mut()
            .and_then(|p| p.files.get_mut(id).and_then(Option::take));
        let (size, chunk) = match &inode.kind {
            Kind::Dir { .. } => (dir_blocks(tree, id).size, None),
            Kind::File(f) if placed.is_none() => {
                let chunk = f.data_ranges.as_ref().and_then(|r| plan_chunks(f.size, r));
                (f.size, chunk)
            }
            Kind::File(f) => (f.size, None),
            Kind::Symlink(t) => (t.len() as u64, None),
            Kind::Device(_) | Kind::Special => (0, None),
        };
        let (extended, isize, ibody_len) =
            inode_lens(tree, inode, size, (epoch, fixed_nsec), shared)?;
        let mut p = InodePlan {
            offset: 0,
            extended,
            layout: DataLayout::FlatPlain,
            size,
            ibody_len,
            inline_len: 0,
            startblk: EROFS_NULL_ADDR,
            map: DataMap::Flat,
            in_metabox: false,
            blocks_of: None,
        };
        let mut meta_len = isize + ibody_len;
        match placed {
            Some(Placed::Fragment { offset }) => {
                p.layout = DataLayout::CompressedFull;
                p.map = DataMap::Fragment(offset);
                meta_len =
                    zmap_header_offset(isize, ibody_len) + fmt::Z_EROFS_LEGACY_MAP_HEADER_SIZE;
            }
            Some(Placed::Compressed(z)) => {
                p.layout = match z.extents_48bit {
                    Some(_) => DataLayout::CompressedFull,
                    None => DataLayout::CompressedCompact,
                };
                p.inline_len = z.idata.len();
                meta_len = z.meta_len_of(isize, ibody_len, size);
                p.map = DataMap::Extents(Box::new(z));
            }
            Some(Placed::Flat {
                startblk,
                blocks,
                tail,
            }) => {
                p.startblk = if blocks > 0 {
                    startblk
                } else {
                    EROFS_NULL_ADDR
                };
                if let Some(tail) = tail {
                    p.layout = DataLayout::FlatInline;
                    p.inline_len = tail.len();
                    p.map = DataMap::Tail(tail);
                }
            }
            Some(Placed::Chunks(c)) => {
                p.layout = DataLayout::ChunkBased;
                chunked = true;
                meta_len = ChunkPlan::map_offset(isize, ibody_len)
                    + c.map.len() as u64 * fmt::EROFS_BLOCK_MAP_ENTRY_SIZE;
                p.map = DataMap::Chunks(Box::new(c));
            }
            None => {
                if let Some((bits, mapped)) = &chunk {
                    p.layout = DataLayout::ChunkBased;
                    chunked = true;
                    meta_len = ChunkPlan::map_offset(isize, ibody_len)
                        + mapped.len() as u64 * fmt::EROFS_BLOCK_MAP_ENTRY_SIZE;
                    p.map = DataMap::Chunks(Box::new(ChunkPlan {
                        chunkbits: *bits,
                        map: Vec::new(),
                    }));
                } else if size % BLKSZ != 0 && meta_len + size % BLKSZ <= BLKSZ {
                    p.layout = DataLayout::FlatInline;
                    p.inline_len = size % BLKSZ;
                }
            }
        }
        item_lens.push(meta_len + p.inline_len);
        if let Some((_, mapped)) = chunk {
            chunk_masks.push((id, mapped));
        }
        inodes.push(p);
    }

    // The uncompressed layout starts the metadata right after the superblock; the compressed one gives
    // the metadata area its own blocks after the data (nids count from its start).
    // (nid 0 is skipped: the kernel reports the nid as the inode number, and userspace takes inode 0
    // for an empty directory slot.)
    let packed = pre.as_ref().and_then(|p| p.packed);
    let meta_start = if metabox {
        0
    } else if pre.is_some() || data_first {
        fmt::INODE_SLOT_SIZE
    } else {
        fmt::EROFS_SUPER_OFFSET + 128
    };
    // With `like`: each inode's path, and whether the inode keeps its old place.
    let paths: Vec<Option<Vec<u8>>> = match like {
        Some(_) => tree
            .inodes
            .iter()
            .map(|i| match i.origin {
                crate::tree::Origin::Special(_) => None,
                _ => Some(tree.rel_path(i)),
            })
            .collect(),
        None => Vec::new(),
    };
    // Places every inode: with `keep`, those that can keep their places in `like` first.
    // Returns the allocator after the last, and the shared xattr area's offset.
    let place_meta = |inodes: &mut Vec<InodePlan>, keep: bool| -> Result<(MetaAllocator, u64)> {
        let mut alloc = MetaAllocator::new(meta_start);
        let mut kept = vec![false; inodes.len()];
        if let (Some(like), true) = (like, keep) {
            keep_meta_places(
                like, &paths, &item_lens, inodes, &mut kept, &mut alloc, metabox, packed,
            );
        }
        // The root first (its nid must fit 16 bits, unless it is in the metabox), then the shared
        // xattr area, then everything else. In the metabox the shared area comes first, at block
        // 0. (Building like an earlier image: the inodes kept in place first, the rest after them
        // or in the room left.)
        let shared_offset = match metabox && like.is_none() {
            true => alloc.place(shared.bytes.len() as u64, false),
            false => 0,
        };
        inodes[0].in_metabox = metabox;
        if !kept[0] {
            inodes[0].offset = alloc.place(item_lens[0], inodes[0].inline_len > 0);
        }
        if !metabox && inodes[0].nid() > u16::MAX as u64 {
            return Err(BuildError::TooLarge(
                "root inode does not fit a 16-bit nid".into(),
            ));
        }
        let shared_offset = match metabox && like.is_none() {
            true => shared_offset,
            false => alloc.place(shared.bytes.len() as u64, false),
        };
        let mut window: Vec<usize> = Vec::with_capacity(PLACEMENT_WINDOW);
        for start in (1..inodes.len()).step_by(PLACEMENT_WINDOW) {
            window.clear();
            window.extend(
                (start..(start + PLACEMENT_WINDOW).min(inodes.len()))
                    .filter(|&id| !(kept[id] || (metabox && Some(id) == packed))),
            );
            window.sort_by_key(|&id| std::cmp::Reverse(item_lens[id]));
            for &id in &window {
                inodes[id].in_metabox = metabox;
                inodes[id].offset = alloc.place(item_lens[id], inodes[id].inline_len > 0);
            }
        }
        Ok((alloc, shared_offset))
    };
    let mut meta_places_dropped = false;
    let (alloc, shared_offset) = match like {
        None => place_meta(&mut inodes, false)?,
        Some(_) => {
            // The inodes keep their old places unless that puts the root's nid past 16 bits (when
            // the root could not keep its place), or leaves more of the metadata area unused than
            // `LIKE_MAX_UNUSED` of what placing them anew takes: then they are placed anew (the
            // data keeps its places) and the build says so.
            let anew = place_meta(&mut inodes, false)?.0.cursor;
            let (num, den) = crate::like::LIKE_MAX_UNUSED;
            match place_meta(&mut inodes, true) {
                Ok(kept)
                    if kept.0.cursor.saturating_sub(anew) * den <= anew * num + BLKSZ * den =>
                {
                    kept
                }
                _ => {
                    meta_places_dropped = true;
                    place_meta(&mut inodes, false)?
                }
            }
        }
    };

    let metabox_len = metabox.then_some(alloc.cursor);
    let meta_len = if metabox {
        0 // placed by `place_outside_metabox`
    } else {
        round_up(alloc.cursor, BLKSZ)
    };
    let mut next_blk = match &pre {
        Some(pre) => pre.data_end,
        None if data_first => 1,
        None => meta_len / BLKSZ,
    };
    share_blocks(&mut inodes, &alike);
    // Data blocks are given out in order from `next_blk`; building like an earlier image
    // (uncompressed), the files and directories that still fit their old blocks keep them first,
    // and the others take the room between first.
    let mut kept_runs = match (like, &pre) {
        (Some(like), None) => keep_data_places(like, &paths, &mut inodes, next_blk)?,
        _ => Vec::new(),
    };
    loop {
        let mut blocks = BlockGaps::new(next_blk, &kept_runs);
        let mut masks = chunk_masks.iter().peekable();
        for (id, p) in inodes.iter_mut().enumerate() {
            let mask = masks.next_if(|(of, _)| *of == id).map(|(_, mask)| mask);
            if p.blocks_of.is_some() {
                continue; // placed with the file it shares its blocks with
            }
            if pre.is_none() && p.startblk != EROFS_NULL_ADDR {
                continue; // kept in its old place
            }
            if p.zmap().is_some()
                || (pre.is_some() && p.startblk != EROFS_NULL_ADDR)
                || (pre.is_some() && p.chunks().is_some_and(|c| !c.map.is_empty()))
            {
                continue; // placed by the data phase
            }
            let size = p.size;
            if let (DataMap::Chunks(chunks), Some(mask)) = (&mut p.map, mask) {
                let cs = 1u64 << chunks.chunkbits;
                chunks.map = mask
                    .iter()
                    .enumerate()
                    .map(|(c, &m)| {
                        if !m {
                            return Ok(EROFS_NULL_ADDR);
                        }
                        let n = round_up(cs.min(size - c as u64 * cs), BLKSZ) / BLKSZ;
                        block_addr(blocks.take(n))
                    })
                    .collect::<Result<_>>()?;
            } else if p.full_blocks() > 0 {
                p.startblk = block_addr(blocks.take(p.full_blocks()))?;
            }
        }
        // Keeping old places may leave room no file takes (of files removed, or that grew
        // past their old blocks): more than [`LIKE_MAX_UNUSED`] of the data, and every file is
        // placed in order instead (the inodes keep their places).
        if !kept_runs.is_empty()
            && blocks.unused() * LIKE_MAX_UNUSED.1 > (blocks.end - next_blk) * LIKE_MAX_UNUSED.0
        {
            kept_runs.clear();
            for p in inodes.iter_mut().filter(|p| p.blocks_of.is_none()) {
                p.startblk = EROFS_NULL_ADDR;
            }
            continue;
        }
        next_blk = blocks.end;
        break;
    }
    for id in 0..inodes.len() {
        if let Some(owner) = inodes[id].blocks_of {
            inodes[id].startblk = inodes[owner as usize].startblk;
        }
    }
    let meta_base = match &pre {
        _ if data_first => {
            let base = next_blk * BLKSZ;
            next_blk += meta_len / BLKSZ;
            base
        }
        Some(_) => {
            let base = next_blk * BLKSZ;
            next_blk += meta_len / BLKSZ;
            base
        }
        None => 0,
    };
    block_addr(next_blk)?;
    Ok(Plan {
        inodes,
        meta_base,
        shared_offset,
        total_blocks: next_blk,
        epoch,
        fixed_nsec,
        chunked,
        packed,
        item_lens,
        metabox_len,
        metabox: None,
        spill: pre.map(|p| p.spill),
        alike,
        meta_places_dropped,
    })
}

/// The plan of the metabox inode `inode` with extents `z` (encoded extents or compact indexes, no
/// inline data), and the bytes it takes in the metadata area; placed by [`place_outside_metabox`].
pub(crate) fn metabox_inode_plan(
    tree: &Tree,
    inode: &Inode,
    z: ZPlan,
    shared: &SharedXattrs,
    epoch: (i64, u32),
) -> Result<(InodePlan, u64)> {
    let Kind::File(f) = &inode.kind else {
        unreachable!("the metabox inode is a regular file")
    };
    let (extended, isize, ibody_len) = inode_lens(tree, inode, f.size, epoch, shared)?;
    let item_len = z.meta_len_of(isize, ibody_len, f.size);
    let p = InodePlan {
        offset: 0,
        extended,
        layout: match z.extents_48bit {
            Some(_) => DataLayout::CompressedFull,
            None => DataLayout::CompressedCompact,
        },
        size: f.size,
        ibody_len,
        inline_len: 0,
        startblk: EROFS_NULL_ADDR,
        map: DataMap::Extents(Box::new(z)),
        in_metabox: false,
        blocks_of: None,
    };
    Ok((p, item_len))
}

/// Places the metadata area of an image with a metabox: what cannot be in the metabox (the packed
/// inode, and `metabox`, the metabox inode, whose plan the caller has just added) after everything
/// written so far (`plan.total_blocks`).
pub(crate) fn place_outside_metabox(plan: &mut Plan, metabox: InodeId) -> Result<()> {
    plan.metabox = Some(metabox);
    // (nid 0 is skipped, as in every image.)
    let mut alloc = MetaAllocator::new(fmt::INODE_SLOT_SIZE);
    for id in [Some(metabox), plan.packed].into_iter().flatten() {
        let p = &mut plan.inodes[id];
        p.in_metabox = false;
        p.offset = alloc.place(plan.item_lens[id], p.inline_len > 0);
    }
    plan.meta_base = plan.total_blocks * BLKSZ;
    plan.total_blocks += round_up(alloc.cursor, BLKSZ) / BLKSZ;
    block_addr(plan.total_blocks)?;
    Ok(())
}

/// Building like an earlier image: every inode whose path `like` holds, and which fits the room
/// its old place had (within one block, with inline data), goes there again (marked in `kept`);
/// the allocator then starts after the earlier metadata area, and the room left (old places no
/// inode took, the ends of those taken) is offered to the others.
#[allow(clippy::too_many_arguments, reason = "the parts of the plan it fills")]
fn keep_meta_places(
    like: &Like,
    paths: &[Option<Vec<u8>>],
    item_lens: &[u64],
    inodes: &mut [InodePlan],
    kept: &mut [bool],
    alloc: &mut MetaAllocator,
    metabox: bool,
    packed: Option<InodeId>,
) {
    let start = alloc.cursor;
    let mut used: HashMap<u64, u64> = HashMap::new();
    for id in 0..inodes.len() {
        if metabox && Some(id) == packed {
            continue;
        }
        let Some((at, room)) = paths[id].as_deref().and_then(|p| like.meta(p)) else {
            continue;
        };
        let len = round_up(item_lens[id], fmt::INODE_SLOT_SIZE);
        let crosses = at / BLKSZ != (at + len - 1) / BLKSZ;
        let root_too_far = id == 0 && !metabox && at >> fmt::INODE_SLOT_BITS > u16::MAX as u64;
        if at < start
            || len > room
            || (inodes[id].inline_len > 0 && crosses)
            || root_too_far
            || used.contains_key(&at)
        {
            continue;
        }
        used.insert(at, len);
        inodes[id].offset = at;
        inodes[id].in_metabox = metabox;
        kept[id] = true;
    }
    alloc.cursor = alloc.cursor.max(like.meta_end());
    let mut rooms: Vec<(u64, u64)> = like.meta_rooms().collect();
    rooms.sort_unstable();
    rooms.dedup();
    for (at, room) in rooms {
        let taken = used.get(&at).copied().unwrap_or(0);
        if at < start || taken >= room {
            continue;
        }
        for piece in room_pieces(at + taken, room - taken) {
            alloc.holes.insert((piece.1, piece.0));
        }
    }
}

/// Building an uncompressed image like an earlier one: every file and directory whose path
/// `like` holds, and whose whole blocks fit its old run of blocks (from `first` on, not
/// overlapping another kept run), gets that run's start again. Returns the runs kept, sorted.
fn keep_data_places(
    like: &Like,
    paths: &[Option<Vec<u8>>],
    inodes: &mut [InodePlan],
    first: u64,
) -> Result<Vec<std::ops::Range<u64>>> {
    let mut wanted: Vec<(u64, u64, InodeId)> = Vec::new();
    for (id, p) in inodes.iter().enumerate() {
        if p.blocks_of.is_some() || p.chunks().is_some() || p.full_blocks() == 0 {
            continue;
        }
        let Some(run) = paths[id].as_deref().and_then(|path| like.blocks(path)) else {
            continue;
        };
        if run.start >= first && p.full_blocks() <= run.end - run.start {
            wanted.push((run.start, run.start + p.full_blocks(), id));
        }
    }
    wanted.sort_unstable();
    let mut runs: Vec<std::ops::Range<u64>> = Vec::with_capacity(wanted.len());
    for (start, end, id) in wanted {
        if runs.last().is_some_and(|r| r.end > start) {
            continue; // another file took (part of) it
        }
        inodes[id].startblk = block_addr(start)?;
        block_addr(end)?;
        runs.push(start..end);
    }
    Ok(runs)
}

fn block_addr(blk: u64) -> Result<u32> {
    if blk >= EROFS_NULL_ADDR as u64 {
        return Err(BuildError::TooLarge(format!(
            "{blk} blocks exceed the 32-bit block addresses (16 TiB)"
        )));
    }
    Ok(blk as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_choose_small_map_for_mostly_empty_file() {
        let size = 5 << 30;
        let ranges = [(0, 10), (size / 2, size / 2 + 10), (size - 10, size)];
        let (bits, mapped) = plan_chunks(size, &ranges).unwrap();
        let cs = 1u64 << bits;
        let cost = mapped.len() as u64 * 4 + mapped.iter().filter(|m| **m).count() as u64 * cs;
        assert!(cost < 1 << 20, "cost {cost} with chunk bits {bits}");
        assert_eq!(mapped.iter().filter(|m| **m).count(), 3);
    }

    #[test]
    fn dense_file_gets_no_chunks() {
        assert!(plan_chunks(1 << 20, &[(0, 1 << 20)]).is_none());
        assert!(plan_chunks(8192, &[(0, 8192)]).is_none());
        let (bits, mapped) =
            plan_chunks(8192, &[(0, 4096)]).expect("a map of 8 bytes beats a zero block");
        assert_eq!((bits, mapped), (12, vec![true, false]));
    }

    #[test]
    fn inline_items_never_cross_blocks() {
        let mut a = MetaAllocator::new(1152);
        let x = a.place(3000, true);
        assert_eq!(x, 4096, "3000 bytes do not fit after 1152 in block 0");
        let y = a.place(64, false);
        assert_eq!(y, 1152, "the gap is reused");
        let z = a.place(4096, true);
        assert_eq!(z % BLKSZ, 0);
    }
}
