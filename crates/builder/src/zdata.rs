//! The data phase of a compressed build: file data is compressed and written first, from block 1 on,
//! because only then are the sizes known that the metadata (written after it) records.
//!
//! Files are cut into segments ([`compress::SEGMENT`]) that every thread takes in order and compresses,
//! one at a time, with no barrier between batches ([`ordered_pipeline`]); the segments are grouped into
//! small batches that are placed and written whole, in file order, by the thread that completes a
//! batch's last segment. So the image does not depend on the thread count, the cores stay busy until
//! the last segment, and memory stays bounded by [`WINDOW`] batches whatever the file sizes (few fresh
//! pages to fault in: measured, a 64 MiB batch window cost ~0.4 s of system time per build of the
//! `linux` tree). While data passes
//! through memory it is hashed: level-0 Merkle hashes of the image blocks, and each file's own
//! fs-verity leaves for its per-file digest.
//!
//! Per file, the cheaper of compressed and stored-as-is wins (for files that fit one batch; larger
//! files keep compressed extents, whose incompressible parts are PLAIN blocks anyway). A compressed
//! file's last extent goes inline after its indexes when it fits (ztailpacking); a stored file's tail
//! goes inline as in uncompressed builds. Sparse files stay chunk-based (uncompressed) with their holes.
//!
//! **Dedupe.** A file of one segment whose content (its fs-verity digest) and inode shape equal an
//! earlier file's shares that file's blocks (or inline tail). A worker that sees an earlier twin
//! already claimed skips compressing; the earliest file of each content is always compressed, so the
//! image does not depend on which worker came first.
//!
//! **Fragments** ([`Fragments`]). Files chosen to be fragments are read first, in path order (see
//! [`fragment_order`]), and appended to a temporary file, identical ones once; that file becomes the packed inode, compressed after every other file like any file,
//! and each fragment file records only its offset in it.

use crate::compress::{self, CompressOptions, Fragments, ZExtent};
use crate::dedupe;
use crate::emit::{Copier, FileDigests, Hashers};
use crate::error::{BuildError, Result};
use crate::keep::{self, Kept};
use crate::layout::{self, ChunkPlan, DataMap, InodePlan, Placed, PreData, ZPlaced, ZPlan};
use crate::like::{InPlace, Like};
use crate::seal::Target;
use crate::source::{open_file, Source};
use crate::spill::{Spill, Spilled};
use crate::tree::{FileData, Inode, Kind, Origin, Special, Tree};
use crate::xattrs::SharedXattrs;
use crate::Progress;
use sealfs_format::{self as fmt, DataLayout, BLKSZ};
use sealfs_verity::{BlockHasher, Digest};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Input bytes placed (and written) per batch. A file that fits in one batch may be stored as is when
/// compressing it does not pay; a larger one keeps compressed extents.
const BATCH: u64 = 8 << 20;

/// Batches whose units may be held in memory at once: the oldest one not yet placed and those after it.
const WINDOW: usize = 4;

/// One segment's result.
struct Unit {
    id: usize,
    seg: u64,
    raw: Vec<u8>,
    extents: Vec<ZExtent>,
    file_leaves: Vec<u8>,
    /// A one-segment file's content and inode shape, for dedupe.
    key: Option<DedupeKey>,
    /// Not compressed: an earlier file with the same key was claimed, and is placed first.
    skipped: bool,
}

/// What makes two files share their data: the same content, named by its fs-verity digest (which
/// binds the size), or by the first 256 bits of a longer one; a map entry is half the size of one
/// keyed by a whole [`Digest`].
type DedupeKey = [u8; 32];

fn dedupe_key(d: &Digest) -> DedupeKey {
    d.as_bytes()[..32]
        .try_into()
        .expect("digests are at least 256 bits")
}

/// What the data phase produced.
pub(crate) struct DataPhase {
    pub pre: PreData,
    pub digests: FileDigests,
    /// The packed inode (fragments), to add to the tree: its id is the tree's inode count.
    pub packed: Option<Inode>,
    /// With compressed directories: the packed inode's data so far (the fragments), to which the
    /// directories are added once the layout has given every inode its nid; compressed then by
    /// [`write_packed`]. Its plan is a placeholder until then.
    pub deferred: Option<DeferredPacked>,
    /// Building like an earlier image: bytes of the data area no file took.
    pub unused: u64,
}

/// The packed inode's data, complete but for the directories, and its length with them.
pub(crate) struct DeferredPacked {
    pub file: File,
    pub len: u64,
    /// Where its pieces start, each compressed on its own (empty: one piece).
    pub pieces: Vec<u64>,
    /// Where its pclusters end when they can ([`PCLUSTER_ANCHOR`]).
    pub anchors: Vec<u64>,
    /// The runs of an earlier image's packed inode it keeps byte for byte, each a piece.
    pub kept: Kept,
}

/// The packed inode being built: fragments appended to an unnamed temporary file, whole files
/// first, then the tails of larger files as they are placed; the inode once it is complete.
struct Packed {
    file: File,
    /// Bytes of the whole files.
    whole: u64,
    /// Where its pieces start ([`crate::Placement::packed_pieces`]); empty: one piece.
    pieces: Vec<u64>,
    /// Where its pclusters end when they can ([`PCLUSTER_ANCHOR`]).
    anchors: Vec<u64>,
    /// The runs of an earlier image's packed inode it keeps byte for byte ([`keep::keep_runs`]).
    kept: Kept,
    inode: std::sync::OnceLock<Inode>,
}

/// Everything units are read from: the tree's files, and the packed inode once it exists (id
/// `tree.inodes.len()`).
struct Sources<'a> {
    source: &'a dyn Source,
    tree: &'a Tree,
    packed: Option<&'a Packed>,
}

impl UnitCtx<'_> {
    /// The codec of file `id`.
    fn codec(&self, id: usize) -> Codec {
        self.codecs.get(id).copied().unwrap_or(Some(*self.copts))
    }

    /// Extents of segment `seg` (bytes `raw`) of file `id`, of `size` bytes, as its codec makes them.
    fn extents(&self, id: usize, raw: &[u8], seg: u64, size: u64) -> Vec<ZExtent> {
        match self.codec(id) {
            Some(c) => compress::compress_segment(&c, raw, seg * compress::SEGMENT, size),
            None => compress::store_segment(self.copts, raw, seg * compress::SEGMENT),
        }
    }
}

impl Sources<'_> {
    fn inode(&self, id: usize) -> &Inode {
        match self.packed {
            Some(p) if id == self.tree.inodes.len() => p
                .inode
                .get()
                .expect("the packed inode is complete before it is read"),
            _ => &self.tree.inodes[id],
        }
    }

    /// Reads segment `seg` of file `id` (checking that a source file did not change meanwhile).
    fn read_segment(&self, id: usize, seg: u64) -> Result<Vec<u8>> {
        let inode = self.inode(id);
        let Kind::File(f) = &inode.kind else {
            unreachable!("units are regular files")
        };
        let start = seg * compress::SEGMENT;
        let len = (f.size - start).min(compress::SEGMENT) as usize;
        let mut raw = vec![0u8; len];
        if let Some(p) = self.packed.filter(|_| id == self.tree.inodes.len()) {
            p.file
                .read_exact_at(&mut raw, start)
                .map_err(|e| BuildError::io(self.tree.path(inode), "read", e))?;
            return Ok(raw);
        }
        let mut src = open_file(self.source, self.tree, inode)?;
        src.read_at(&mut raw, start)?;
        src.finish()?;
        Ok(raw)
    }
}

/// How one file's data is stored: compressed with these options, or (`None`) as it is.
pub(crate) type Codec = Option<CompressOptions>;

/// What every unit needs to know besides its file.
struct UnitCtx<'a> {
    sources: Sources<'a>,
    shared: &'a SharedXattrs,
    epoch: (i64, u32),
    copts: &'a CompressOptions,
    /// Per-file codecs chosen by rules (by inode id; `Some(copts)` for the others and the packed
    /// inode).
    codecs: &'a [Codec],
    hashers: Hashers<'a>,
    /// Computes dedupe keys when no per-file digests are made (an unsealed build).
    key_hasher: Option<&'a BlockHasher>,
    /// The first (lowest id) file seen so far with each key, by any worker.
    claims: Mutex<HashMap<DedupeKey, usize>>,
    /// Keys of the files of more than one segment that may have a twin ([`dedupe::same_size_digests`]).
    multi_keys: HashMap<usize, DedupeKey>,
    /// Sizes shared by two or more files (fragments and units together): only files of those
    /// sizes can have a twin, so an unsealed build hashes only them for the keys of files of one
    /// segment (a sealed one has every digest anyway).
    twin_sizes: std::collections::HashSet<u64>,
}

/// Reads and hashes one segment, with its file's dedupe key (if it has one).
fn read_unit(ctx: &UnitCtx<'_>, id: usize, seg: u64) -> Result<Unit> {
    let inode = ctx.sources.inode(id);
    let Kind::File(f) = &inode.kind else {
        unreachable!("units are regular files")
    };
    let raw = ctx.sources.read_segment(id, seg)?;
    let mut file_leaves = Vec::new();
    // (-E dedupe names each cluster of input by its blocks' hashes.)
    let leaf_hasher = ctx
        .hashers
        .file
        .or(ctx.key_hasher.filter(|_| ctx.copts.dedupe));
    if let Some(h) = leaf_hasher {
        file_leaves.resize(
            raw.len().div_ceil(BLKSZ as usize) * h.params().digest_size(),
            0,
        );
        h.hash_blocks_into(&raw, &mut file_leaves);
    }
    let packed = id == ctx.sources.tree.inodes.len();
    let key = if raw.len() as u64 == f.size && !packed {
        let named = match (ctx.hashers.file, ctx.key_hasher) {
            (Some(h), _) => Some((h, std::borrow::Cow::Borrowed(&file_leaves))),
            (None, Some(h)) if !file_leaves.is_empty() => {
                Some((h, std::borrow::Cow::Borrowed(&file_leaves)))
            }
            // No other file has its size: there is no twin to find.
            (None, Some(_)) if !ctx.twin_sizes.contains(&f.size) => None,
            (None, Some(h)) => {
                let mut l =
                    vec![0u8; raw.len().div_ceil(BLKSZ as usize) * h.params().digest_size()];
                h.hash_blocks_into(&raw, &mut l);
                Some((h, std::borrow::Cow::Owned(l)))
            }
            (None, None) => unreachable!("write_data always has a key hasher"),
        };
        match named {
            Some((hasher, leaves)) => Some(dedupe_key(
                &sealfs_verity::Tree::from_leaf_hashes_serial(hasher.params(), f.size, &leaves)
                    .map_err(|e| {
                        let path = ctx.sources.tree.path(inode);
                        BuildError::io(path, "hash", std::io::Error::other(e))
                    })?
                    .digest(),
            )),
            None => None,
        }
    } else {
        ctx.multi_keys.get(&id).copied()
    };
    Ok(Unit {
        id,
        seg,
        raw,
        extents: Vec::new(),
        file_leaves,
        key,
        skipped: false,
    })
}

/// Reads, hashes and compresses one segment (unless an earlier file has the same content).
fn run_unit(ctx: &UnitCtx<'_>, id: usize, seg: u64) -> Result<Unit> {
    let mut u = read_unit(ctx, id, seg)?;
    if let Some(key) = u.key {
        let mut claims = ctx.claims.lock().unwrap_or_else(|e| e.into_inner());
        let first = claims.entry(key).or_insert(id);
        if *first < id {
            u.skipped = true;
            return Ok(u);
        }
        *first = id;
    }
    let size = match &ctx.sources.inode(id).kind {
        Kind::File(f) => f.size,
        _ => unreachable!("units are regular files"),
    };
    u.extents = ctx.extents(id, &u.raw, seg, size);
    Ok(u)
}

/// Whether a file placed as `placed` can share that placement with an inode whose core and
/// xattrs take `isize + ibody` bytes: its inline part must fit the inode's block.
fn fits_inline(placed: Option<&Placed>, isize: u64, ibody: u64, size: u64) -> bool {
    match placed {
        Some(Placed::Flat {
            tail: Some(tail), ..
        }) => isize + ibody + tail.len() <= BLKSZ,
        Some(Placed::Compressed(z)) if !z.idata.is_empty() => {
            ZPlan::meta_len(isize, ibody, size) + z.idata.len() <= BLKSZ
        }
        Some(_) => true,
        None => false,
    }
}

/// Output being assembled for one batch: bytes from block `first_blk` on. Encoded extents are
/// packed byte by byte, so the buffer may end inside a block, which the next batch continues.
struct Out {
    first_blk: u64,
    buf: Vec<u8>,
}

impl Out {
    fn next_blk(&self) -> u64 {
        self.first_blk + (self.buf.len() as u64).div_ceil(BLKSZ)
    }

    /// Appends a pcluster: compressed bytes right-aligned, raw bytes at its start, from the next
    /// block boundary; returns its block.
    fn push(&mut self, data: &[u8], blocks: u64, right_align: bool) -> u64 {
        let blk = self.next_blk();
        self.buf
            .resize(self.buf.len().next_multiple_of(BLKSZ as usize), 0);
        let at = self.buf.len();
        self.buf.resize(at + (blocks * BLKSZ) as usize, 0);
        let off = if right_align {
            (blocks * BLKSZ) as usize - data.len()
        } else {
            0
        };
        self.buf[at + off..at + off + data.len()].copy_from_slice(data);
        blk
    }

    /// Appends extent `x` (compressed with algorithm `alg`) and says where it went: packed byte by
    /// byte (encoded extents), or as a pcluster of whole blocks, or nowhere when it is the tail
    /// stored inline (`inline_tail`). `input` gives the extent's input bytes, for the rare one
    /// that is stored as is instead (below).
    fn place(
        &mut self,
        x: &ZExtent,
        alg: u8,
        packed: bool,
        inline_tail: bool,
        input: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<ZPlaced> {
        let mut plen = x.data.len() as u64;
        let mut plain = x.plain;
        let (blkaddr, blocks, pstart) = if packed {
            let pstart = self.first_blk * BLKSZ + self.buf.len() as u64;
            // The kernel hands a DEFLATE stream to zlib a page at a time and fails the read when
            // the output is complete before the stream has ended: the pages left are never handed
            // over. One or two bytes of a stream in the last block it reaches may hold nothing but
            // its end-of-block code and padding, read only with that page, after the output is
            // complete; three or more hold part of the last symbol that writes output (the rule is
            // `fmt::z_erofs_deflate_end_ok`, which says where the kernel does this). So a stream
            // that would end one or two bytes into a block gets an empty stored block in front:
            // five bytes longer, it ends six or seven bytes in and decodes to the same bytes.
            // Unless that makes it longer than its data, which kernels since April 2026 refuse for a
            // compressed extent (`z_erofs_map_sanity_check`, "too much compressed data", commit
            // a5242d37c83a): then it saved fewer than five bytes, and is stored as is. (Right-
            // aligned pclusters end on a block boundary; the kernel's other decoders have no such
            // rule.)
            let breaks_rule = !x.plain
                && alg == fmt::Z_EROFS_COMPRESSION_DEFLATE
                && !fmt::z_erofs_deflate_end_ok(pstart, pstart + plen, BLKSZ);
            let lengthened = plen + compress::DEFLATE_EMPTY_BLOCK.len() as u64;
            if !breaks_rule {
                self.buf.extend_from_slice(&x.data);
            } else if lengthened <= x.len {
                self.buf.extend_from_slice(&compress::DEFLATE_EMPTY_BLOCK);
                self.buf.extend_from_slice(&x.data);
                plen = lengthened;
                debug_assert!(fmt::z_erofs_deflate_end_ok(pstart, pstart + plen, BLKSZ));
            } else {
                let raw = input()?;
                debug_assert_eq!(raw.len() as u64, x.len);
                self.buf.extend_from_slice(&raw);
                (plen, plain) = (raw.len() as u64, true);
            }
            let blocks = (pstart + plen).div_ceil(BLKSZ) - pstart / BLKSZ;
            (0, blocks as u32, pstart)
        } else {
            let blkaddr = match inline_tail {
                true => 0,
                false => self.push(&x.data, x.blocks(), !x.plain) as u32,
            };
            (blkaddr, x.blocks() as u32, blkaddr as u64 * BLKSZ)
        };
        Ok(ZPlaced {
            start: x.start,
            len: x.len,
            plain,
            blkaddr,
            blocks,
            pstart,
            plen,
        })
    }
}

/// Per-file state carried across batches.
#[derive(Default)]
struct FileState {
    extents: Vec<ZPlaced>,
    /// The file's digest so far (sealed builds): its segments' leaf hashes, in order.
    root: Option<sealfs_verity::RootHasher>,
}

/// The serial part of the data phase: places each batch's extents in file order and writes them.
struct Placer<'a> {
    out: Target<'a>,
    ctx: &'a UnitCtx<'a>,
    progress: &'a dyn Progress,
    alg: u8,
    next_blk: u64,
    files: Vec<Option<Placed>>,
    state: HashMap<usize, FileState>,
    /// The file placed first with each dedupe key.
    seen: HashMap<DedupeKey, usize>,
    /// Bytes of a block that encoded extents filled only partly, written with the next batch.
    carry: Vec<u8>,
    digests: FileDigests,
    /// Inline tails, kept out of memory until the metadata is written.
    spill: Spill,
    /// With `-E fragments`: the packed inode's file, where the last extent of each compressed file
    /// goes (its tail), and its length so far.
    tails: Option<Tails<'a>>,
    /// With `-E dedupe`: the first placement of each cluster of input.
    chunks: HashMap<ChunkKey, ZPlaced>,
    /// Building like an earlier image: where each file's data goes (else one after another).
    inplace: Option<InPlace>,
    /// Building like an earlier image: the byte after the last one written.
    written_end: u64,
}

/// A cluster of input as `-E dedupe` names it: the fs-verity digest of its bytes (which binds the
/// length; 256 bits of it), the algorithm it is compressed with, and whether it is stored as is.
type ChunkKey = (DedupeKey, u8, bool);

/// The key of extent `x` of file `id`, from the leaf hashes of the units `done` (one file's).
fn chunk_key(ctx: &UnitCtx<'_>, id: usize, done: &[Unit], x: &ZExtent) -> Option<ChunkKey> {
    let hasher = ctx.hashers.file.or(ctx.key_hasher)?;
    let u = done.iter().find(|u| u.seg == x.start / compress::SEGMENT)?;
    let ds = hasher.params().digest_size();
    let first = ((x.start - u.seg * compress::SEGMENT) / BLKSZ) as usize * ds;
    let leaves = u
        .file_leaves
        .get(first..first + (x.len.div_ceil(BLKSZ) as usize) * ds)?;
    let digest = sealfs_verity::Tree::from_leaf_hashes_serial(hasher.params(), x.len, leaves)
        .ok()?
        .digest();
    let alg = ctx.codec(id).map_or(u8::MAX, |c| c.algorithm.id());
    Some((dedupe_key(&digest), alg, x.plain))
}

/// The input bytes of extent `x` of a file, from `units`, its units in a batch (an extent lies in
/// one segment).
fn extent_input(units: &[Unit], x: &ZExtent) -> Vec<u8> {
    let u = units
        .iter()
        .find(|u| u.seg == x.start / compress::SEGMENT)
        .expect("the extent's segment is among its file's units");
    let from = (x.start - u.seg * compress::SEGMENT) as usize;
    u.raw[from..from + x.len as usize].to_vec()
}

/// The packed inode's end, where the tails of larger files are appended as they are placed
/// (`Placer::tails`).
struct Tails<'a> {
    file: &'a File,
    len: u64,
    /// With [`crate::Placement::packed_pieces`]: where each piece starts (the tails' pieces
    /// follow the whole files'), and the anchors ([`piece_rule`]).
    pieces: Option<Vec<u64>>,
    anchors: Vec<u64>,
}

/// Appends a tail to the packed inode (`Placer::tails`), in pieces as whole files are; returns
/// its offset there.
fn append_tail(tails: &mut Option<Tails<'_>>, bytes: &[u8]) -> Result<u64> {
    let t = tails.as_mut().expect("tails go to the packed inode");
    if let Some(pieces) = &mut t.pieces {
        piece_rule(
            pieces,
            &mut t.anchors,
            &mut t.len,
            bytes,
            bytes.len() as u64,
        );
    }
    let at = t.len;
    t.file
        .write_all_at(bytes, at)
        .map_err(|e| BuildError::io(Path::new("(packed inode)"), "write", e))?;
    t.len += bytes.len() as u64;
    Ok(at)
}

impl Placer<'_> {
    /// Places one batch of compressed segments (in file order) and writes its blocks.
    fn place(&mut self, done: Vec<Unit>) -> Result<()> {
        let ctx = self.ctx;
        let (shared, epoch, alg) = (ctx.shared, ctx.epoch, self.alg);
        let mut outb = Out {
            first_blk: self.next_blk,
            buf: std::mem::take(&mut self.carry),
        };
        let mut k = 0;
        while k < done.len() {
            // The units of one file in this batch.
            let id = done[k].id;
            let mut e = k;
            while e < done.len() && done[e].id == id {
                e += 1;
            }
            let inode = ctx.sources.inode(id);
            let Kind::File(f) = &inode.kind else {
                unreachable!()
            };
            let first_seg = done[k].seg == 0;
            let last_seg = (done[e - 1].seg + 1) * compress::SEGMENT >= f.size;
            let whole = first_seg && last_seg;
            // Building like an earlier image, each file's bytes are laid out on their own, at
            // the place they will likely keep ([`InPlace::tentative`]), then settled.
            let tentative = self.inplace.as_ref().map(|ip| ip.tentative(id));
            let mut own_out = tentative.map(|at| Out {
                first_blk: at / BLKSZ,
                buf: vec![0; (at % BLKSZ) as usize],
            });
            let st = self.state.entry(id).or_default();
            if let Some(h) = ctx.hashers.file {
                let root = st
                    .root
                    .get_or_insert_with(|| sealfs_verity::RootHasher::new(h.params()));
                for u in &done[k..e] {
                    root.push_leaves(&u.file_leaves, u.raw.len() as u64);
                }
            }
            // A file whose twin was placed (whole, as it has a lower id) shares the twin's data,
            // when the twin's inline part (if any) fits this inode too (its xattrs may be larger).
            let (_, isize, ibody) =
                layout::inode_lens(ctx.sources.tree, inode, f.size, epoch, shared)?;
            let key = done[k].key;
            let twin = key
                .and_then(|key| self.seen.get(&key).copied())
                .filter(|&t| fits_inline(self.files[t].as_ref(), isize, ibody, f.size));
            // Units skipped for an earlier twin whose inline tail does not fit this inode (larger
            // xattrs) are compressed here, serially (rare).
            let redone: Vec<Option<Vec<ZExtent>>> = done[k..e]
                .iter()
                .map(|u| {
                    (u.skipped && twin.is_none()).then(|| ctx.extents(id, &u.raw, u.seg, f.size))
                })
                .collect();
            let exts: Vec<&ZExtent> = done[k..e]
                .iter()
                .zip(&redone)
                .flat_map(|(u, r)| r.as_ref().unwrap_or(&u.extents).iter())
                .collect();
            let bits48 = ctx
                .copts
                .extents_48bit
                .then(|| compress::fixed_lcluster_bits(ctx.copts));
            // -E dedupe: a cluster of input placed before is referred to, not stored again (files
            // below 4 GiB: 16-byte records hold 32-bit logical starts).
            let dedupe = ctx.copts.dedupe && bits48.is_some() && f.size < 1 << 32;
            // With fragments, the last extent of a file goes to the packed inode when it is
            // compressed (as mkfs.erofs -E fragments does) and its offset fits the index (32
            // bits), unless dedupe finds it placed before.
            let packed_id = ctx.sources.tree.inodes.len();
            let tail_placed = dedupe
                && exts.last().is_some_and(|x| {
                    chunk_key(ctx, id, &done[k..e], x)
                        .is_some_and(|key| self.chunks.contains_key(&key))
                });
            let frag_tail = last_seg
                && !tail_placed
                && twin.is_none()
                && id != packed_id
                && ctx.codec(id) == Some(*ctx.copts)
                && self.tails.as_ref().is_some_and(|t| t.len < 1 << 32)
                && exts.last().is_some_and(|x| !x.plain);
            let (tail, zcost) = match bits48 {
                // Encoded extents: the data packed byte by byte, no inline tail.
                Some(bits) => (
                    None,
                    exts.iter().map(|x| x.data.len() as u64).sum::<u64>()
                        + ZPlan::meta_len_48bit(
                            isize,
                            ibody,
                            f.size,
                            bits,
                            fmt::Z_EROFS_EXTENT_RECSZ_PLEN,
                        ),
                ),
                None => {
                    // The tail extent inline after the indexes, if it is compressed into one block
                    // and fits.
                    let zmeta = ZPlan::meta_len(isize, ibody, f.size);
                    let tail = exts.last().filter(|t| {
                        last_seg
                            && !frag_tail
                            && !t.plain
                            && t.blocks() == 1
                            && zmeta + t.data.len() as u64 <= BLKSZ
                    });
                    // The last extent inline or in the packed inode: its compressed bytes.
                    let elsewhere = exts.last().filter(|_| tail.is_some() || frag_tail);
                    let stored_blocks: u64 = exts.iter().map(|x| x.blocks()).sum::<u64>()
                        - elsewhere.map_or(0, |t| t.blocks());
                    let zcost = stored_blocks * BLKSZ
                        + zmeta
                        + elsewhere.map_or(0, |t| t.data.len() as u64);
                    (tail, zcost)
                }
            };
            let tail_len = f.size % BLKSZ;
            let inline_fits = tail_len != 0 && isize + ibody + tail_len <= BLKSZ;
            let flat_cost = if inline_fits {
                f.size - tail_len + isize + ibody + tail_len
            } else {
                f.size.div_ceil(BLKSZ) * BLKSZ + isize + ibody
            };
            if let Some(twin) = twin {
                self.files[id] = self.files[twin].clone();
            } else if whole && zcost >= flat_cost {
                // Stored as is.
                let raw: Vec<u8> = done[k..e]
                    .iter()
                    .flat_map(|u| u.raw.iter().copied())
                    .collect();
                let body = if inline_fits {
                    &raw[..(f.size - tail_len) as usize]
                } else {
                    &raw[..]
                };
                let blocks = (body.len() as u64).div_ceil(BLKSZ);
                let startblk = if blocks > 0 {
                    own_out
                        .as_mut()
                        .unwrap_or(&mut outb)
                        .push(body, blocks, false) as u32
                } else {
                    fmt::EROFS_NULL_ADDR
                };
                let tail = match inline_fits {
                    true => Some(self.spill.put(&raw[(f.size - tail_len) as usize..])?),
                    false => None,
                };
                self.files[id] = Some(Placed::Flat {
                    startblk,
                    blocks,
                    tail,
                });
            } else {
                let file_alg = ctx.codec(id).map_or(alg, |c| c.algorithm.id());
                let in_image = exts.len() - usize::from(frag_tail);
                for (x_i, x) in exts[..in_image].iter().enumerate() {
                    let is_tail = tail.is_some() && x_i + 1 == exts.len();
                    let key = dedupe.then(|| chunk_key(ctx, id, &done[k..e], x)).flatten();
                    let placed = match key.and_then(|key| self.chunks.get(&key)) {
                        Some(earlier) => ZPlaced {
                            start: x.start,
                            len: x.len,
                            ..*earlier
                        },
                        None => {
                            let o = own_out.as_mut().unwrap_or(&mut outb);
                            let placed = o.place(x, file_alg, bits48.is_some(), is_tail, || {
                                Ok(extent_input(&done[k..e], x))
                            })?;
                            if let Some(key) = key {
                                self.chunks.insert(key, placed);
                            }
                            placed
                        }
                    };
                    st.extents.push(placed);
                }
                let mut fragment_tail = None;
                if frag_tail {
                    let (x, u) = (exts[in_image], &done[e - 1]);
                    let from = (x.start - u.seg * compress::SEGMENT) as usize;
                    let at = append_tail(&mut self.tails, &u.raw[from..from + x.len as usize])?;
                    fragment_tail = Some(at);
                    st.extents.push(ZPlaced {
                        start: x.start,
                        len: x.len,
                        plain: false,
                        blkaddr: 0,
                        blocks: 0,
                        pstart: 0,
                        plen: 0,
                    });
                }
                let whole_tail = fragment_tail.filter(|_| last_seg && st.extents.len() == 1);
                if let Some(offset) = whole_tail {
                    // The whole file is its tail.
                    st.extents.clear();
                    self.files[id] = Some(Placed::Fragment { offset });
                } else if last_seg {
                    let extents = std::mem::take(&mut st.extents);
                    let big_pcluster = extents.iter().any(|x| !x.plain && x.blocks > 1);
                    let idata = match tail {
                        Some(t) => self.spill.put(&t.data)?,
                        None => Spilled::default(),
                    };
                    self.files[id] = Some(Placed::Compressed(ZPlan {
                        alg: file_alg,
                        big_pcluster,
                        extents,
                        idata,
                        extents_48bit: bits48,
                        fragment_tail,
                    }));
                }
            }
            if let (Some(at), Some(o)) = (tentative, own_out) {
                self.settle(id, at, o, (first_seg, last_seg))?;
            }
            if let Some(key) = key {
                self.seen.entry(key).or_insert(id);
            }
            if last_seg {
                let st = self.state.remove(&id).unwrap_or_default();
                let packed = id == ctx.sources.tree.inodes.len();
                if let Some(root) = st.root.filter(|_| !packed) {
                    self.digests.put(id, &root.finish());
                }
            }
            for u in &done[k..e] {
                self.progress.advance(u.raw.len() as u64);
            }
            k = e;
        }
        // Whole blocks are written; a last partial one waits for the next batch.
        let whole = outb.buf.len() / BLKSZ as usize * BLKSZ as usize;
        self.carry = outb.buf.split_off(whole);
        self.write(outb)
    }

    /// Writes whole blocks and hashes them.
    fn write(&mut self, outb: Out) -> Result<()> {
        if outb.buf.is_empty() {
            return Ok(());
        }
        debug_assert!(outb.buf.len().is_multiple_of(BLKSZ as usize));
        self.out
            .file
            .write_all_at(&outb.buf, outb.first_blk * BLKSZ)
            .map_err(|e| BuildError::io(self.out.path, "write image", e))?;
        if let (Some(h), Some(store)) = (self.ctx.hashers.image, self.ctx.hashers.leaves) {
            let mut l = vec![0u8; outb.buf.len() / BLKSZ as usize * h.params().digest_size()];
            h.hash_blocks_into(&outb.buf, &mut l);
            store.put(outb.first_blk, &l)?;
        }
        self.next_blk = outb.next_blk();
        Ok(())
    }

    /// Building like an earlier image: writes file `id`'s bytes of this batch, `o`, laid out
    /// from byte `at`, where [`InPlace::settle`] says, moving its earlier bytes with them if it
    /// says so, and its extents to match.
    fn settle(&mut self, id: usize, at: u64, o: Out, ends: (bool, bool)) -> Result<()> {
        let end = o.first_blk * BLKSZ + o.buf.len() as u64;
        let ip = self
            .inplace
            .as_mut()
            .expect("settled only when building like");
        let s = ip.settle(id, at, end, ends);

        let moved = |x: u64| {
            x.checked_add_signed(s.delta)
                .expect("moves stay in the image")
        };
        if let Some((from, len)) = s.earlier {
            // Its bytes so far, to their new place, and zeros where they were.
            let mut buf = Vec::new();
            for piece in (0..len).step_by(BATCH as usize) {
                let n = (len - piece).min(BATCH);
                buf.resize(n as usize, 0);
                self.out
                    .file
                    .read_exact_at(&mut buf, from + piece)
                    .map_err(|e| BuildError::io(self.out.path, "read back", e))?;
                self.write_at(moved(from + piece), &buf)?;
                buf.fill(0);
                self.write_at(from + piece, &buf)?;
            }
        }
        self.write_at(moved(at), &o.buf[(at % BLKSZ) as usize..])?;
        if s.delta != 0 {
            let blocks = s.delta / BLKSZ as i64;
            let shift = |x: &mut ZPlaced| {
                // (Inline tails and fragment tails are not in the data area.)
                if x.pstart >= BLKSZ {
                    x.pstart = moved(x.pstart);
                    if x.blkaddr != 0 {
                        x.blkaddr = (x.blkaddr as i64 + blocks) as u32;
                    }
                }
            };
            if let Some(st) = self.state.get_mut(&id) {
                st.extents.iter_mut().for_each(shift);
            }
            match &mut self.files[id] {
                Some(Placed::Compressed(z)) => z.extents.iter_mut().for_each(shift),
                Some(Placed::Flat {
                    startblk,
                    blocks: n,
                    ..
                }) if *n > 0 => *startblk = (*startblk as i64 + blocks) as u32,
                _ => {}
            }
        }
        Ok(())
    }

    /// Building like an earlier image: writes `bytes` at byte `at` of the image, hashing the
    /// blocks they fill whole (the others are read back and hashed when sealing).
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let end = at + bytes.len() as u64;
        self.out
            .file
            .write_all_at(bytes, at)
            .map_err(|e| BuildError::io(self.out.path, "write image", e))?;
        self.written_end = self.written_end.max(end);
        if let (Some(h), Some(store)) = (self.ctx.hashers.image, self.ctx.hashers.leaves) {
            let (first, last) = (at.div_ceil(BLKSZ), end / BLKSZ);
            if first < last {
                let whole = &bytes[(first * BLKSZ - at) as usize..(last * BLKSZ - at) as usize];
                let mut l = vec![0u8; (last - first) as usize * h.params().digest_size()];
                h.hash_blocks_into(whole, &mut l);
                store.put(first, &l)?;
            }
            if !at.is_multiple_of(BLKSZ) {
                store.forget(at / BLKSZ..at / BLKSZ + 1);
            }
            if !end.is_multiple_of(BLKSZ) {
                store.forget(end / BLKSZ..end / BLKSZ + 1);
            }
        }
        Ok(())
    }

    /// Writes the last partial block, zero-padded.
    fn finish(&mut self) -> Result<()> {
        let mut buf = std::mem::take(&mut self.carry);
        buf.resize(buf.len().next_multiple_of(BLKSZ as usize), 0);
        self.write(Out {
            first_blk: self.next_blk,
            buf,
        })
    }
}

/// Cuts units `(id, segment, bytes)` into batches of about [`BATCH`] bytes.
fn batches_of(units: &[(usize, u64, u64)]) -> Vec<std::ops::Range<usize>> {
    let mut batches = Vec::new();
    let mut i = 0;
    while i < units.len() {
        let mut j = i;
        let mut bytes = 0;
        while j < units.len() && (j == i || bytes + units[j].2 <= BATCH) {
            bytes += units[j].2;
            j += 1;
        }
        batches.push(i..j);
        i = j;
    }
    batches
}

/// The units `(id, segment, bytes)` of a file of `size` bytes.
fn segments(id: usize, size: u64) -> impl Iterator<Item = (usize, u64, u64)> {
    (0..size.div_ceil(compress::SEGMENT)).map(move |seg| {
        (
            id,
            seg,
            (size - seg * compress::SEGMENT).min(compress::SEGMENT),
        )
    })
}

/// The order fragments are packed in: by source path, so the files of a directory sit together
/// and directories follow depth first (a tree read in directory order walks the packed inode
/// forward). Measured on the `linux` tree (zstd, 1 MiB clusters, and lz4, 64 KiB): this order
/// and breadth-first order are within 0.2% of each other; grouping by extension, then name, made
/// the image 2.5% larger.
///
/// Building like an earlier image, the paths it packed come first, in its order, and the new
/// ones after them in path order: a new file then changes no piece of the packed inode that held
/// only old files (with [`crate::Placement::packed_pieces`]), where in path order each one
/// lands among old files and changes their piece. (Measured on bench/delta.py's debian pair,
/// docs/benchmarks.md.)
///
/// With pieces, the files in `compressed` (already compressed formats, [`looks_compressed`]) go
/// after all the others, in that same order, in small pieces of their own ([`PIECE_MIN_COMPRESSED`]).
fn fragment_order(
    tree: &Tree,
    like: Option<&Like>,
    compressed: &HashSet<usize>,
    ids: &mut [usize],
) {
    let rank = tree.depth_first_ranks();
    match like {
        None => ids.sort_by_key(|&id| (compressed.contains(&id), rank[id])),
        Some(like) => ids.sort_by_cached_key(|&id| {
            let old = like.packed_offset(&tree.rel_path(&tree.inodes[id]));
            (compressed.contains(&id), old.is_none(), old, rank[id])
        }),
    }
}

/// Whether a file starting with `head` is in a compressed format (gzip, xz, zstd, bzip2, PNG,
/// JPEG, zip) by its magic number, as `file(1)` tells them.
fn looks_compressed(head: &[u8]) -> bool {
    const MAGIC: [&[u8]; 7] = [
        b"\x1f\x8b",
        b"\xfd7zXZ\0",
        b"\x28\xb5\x2f\xfd",
        b"BZh",
        b"\x89PNG\r\n\x1a\n",
        b"\xff\xd8\xff",
        b"PK\x03\x04",
    ];
    MAGIC.iter().any(|m| head.starts_with(m))
}

/// Which of the files `ids` are in a compressed format ([`looks_compressed`]), by their first
/// bytes. (A file that cannot be read here counts as not: its read for packing reports it.)
fn compressed_files(source: &dyn Source, tree: &Tree, ids: &[usize]) -> HashSet<usize> {
    use rayon::prelude::*;
    ids.par_iter()
        .copied()
        .filter(|&id| {
            let Kind::File(f) = &tree.inodes[id].kind else {
                return false;
            };
            let mut head = [0u8; 8];
            let head = &mut head[..f.size.min(8) as usize];
            open_file(source, tree, &tree.inodes[id])
                .and_then(|mut file| file.read_at(head, 0))
                .is_ok_and(|()| looks_compressed(head))
        })
        .collect()
}

/// The serial part of packing fragments: appends each file's bytes to the packed file (identical
/// files once) and records where they went.
struct FragPlacer<'a> {
    ctx: &'a UnitCtx<'a>,
    progress: &'a dyn Progress,
    file: File,
    len: u64,
    seen: HashMap<DedupeKey, u64>,
    /// Offset and leaves so far of a file of several segments being appended.
    open: Option<(usize, u64, Vec<u8>)>,
    files: &'a mut [Option<Placed>],
    digests: &'a mut FileDigests,
    /// With [`crate::Placement::packed_pieces`]: where each piece of the packed inode starts.
    pieces: Option<Vec<u64>>,
    /// The files kept where they were in an earlier image's packed inode: their offsets.
    kept: &'a HashMap<usize, u64>,
    /// With pieces: where pclusters inside a piece end when they can ([`PCLUSTER_ANCHOR`]).
    anchors: Vec<u64>,
}

/// With [`crate::Placement::packed_pieces`]: a piece of the packed inode holds at least this many
/// bytes... (Measured on linux `fs/` with `--preset small`, docs/benchmarks.md: pieces of at
/// least 64 KiB then about 256 KiB more made the image 10.3% larger, 256 KiB then 1 MiB 2.8%,
/// these 0.7%, for 24%, 57% and 76% of it fetched by an update of 20 small files, against 100%.)
const PIECE_MIN: u64 = 1 << 20;
/// ... and then ends before a file with a chance of its size in this many, decided by a hash of
/// its first bytes: pieces of about `PIECE_MIN + PIECE_TARGET` bytes, the same in two versions of
/// a tree wherever their files are, each from a block boundary of the packed inode (so its
/// pclusters are the same too).
const PIECE_TARGET: u64 = 2 << 20;

/// ... but a file in a compressed format ([`looks_compressed`]) ends a piece once it holds this
/// many bytes, with a chance of its size in [`PIECE_TARGET_COMPRESSED`]: such files are stored as
/// they are (no pcluster of them compresses), so a file added or removed among them shifts the
/// stored bytes after it by a number of bytes no block boundary absorbs. Small pieces cost only
/// the padding to a block. (Measured on bench/delta.py's debian pair, `--preset small --layout
/// packed-pieces`, docs/benchmarks.md: these files after the others in pieces of 1 MiB then 2 MiB
/// as the others: 38.5 MB fetched built `--like`; pieces of 256 KiB then 256 KiB 36.5 MB, 64 then
/// 128 KiB 34.4 MB, these 34.1 MB, 16 then 32 KiB 33.5 MB with 0.3% more image.)
const PIECE_MIN_COMPRESSED: u64 = 32 << 10;
/// See [`PIECE_MIN_COMPRESSED`].
const PIECE_TARGET_COMPRESSED: u64 = 64 << 10;

/// With [`crate::Placement::packed_pieces`]: a file starts an anchor with a chance of its size in
/// this many bytes, decided by another hash of its first bytes, and a pcluster inside a piece
/// that would end past an anchor ends at the last one instead
/// ([`compress::compress_segment_anchored`]). A piece of files that do not compress much holds
/// more than one pcluster, and a pcluster fills its room with as much input as fits: without
/// anchors a changed file moves the end of its pcluster, and so every pcluster after it in the
/// piece, unchanged files and all. With them, the next pcluster still starts at the same file
/// unless the end moved past an anchor. (Measured on bench/delta.py's pairs, `--preset small
/// --layout packed-pieces`, docs/benchmarks.md: debian's update built `--like` fetched 26.4 MB
/// without anchors, 25.4 MB with anchors every 128 KiB or 256 KiB, 25.5 MB every 512 KiB;
/// built alone 35.1, 35.1, 34.7 and 34.7 MB; python's within 0.1% either way; images within
/// 0.2%.)
const PCLUSTER_ANCHOR: u64 = 256 << 10;

/// With [`crate::Placement::packed_pieces`], before a file (or a tail) of `size` bytes, whose
/// first bytes are `head`, is appended to the packed inode at `*len`: ends the piece there (at the
/// next block boundary, `*len` moved up to it), or sets an anchor there, or neither, as
/// [`PIECE_MIN`], [`PIECE_MIN_COMPRESSED`] and [`PCLUSTER_ANCHOR`] say.
fn piece_rule(
    pieces: &mut Vec<u64>,
    anchors: &mut Vec<u64>,
    len: &mut u64,
    head: &[u8],
    size: u64,
) {
    let start = pieces.last().copied().unwrap_or(0);
    let (min, target) = if looks_compressed(head) {
        (PIECE_MIN_COMPRESSED, PIECE_TARGET_COMPRESSED)
    } else {
        (PIECE_MIN, PIECE_TARGET)
    };
    if *len - start >= min && xxhash_rust::xxh3::xxh3_64(head) % target < size {
        *len = len.next_multiple_of(BLKSZ);
        pieces.push(*len);
    } else if xxhash_rust::xxh3::xxh3_64_with_seed(head, 1) % PCLUSTER_ANCHOR < size {
        anchors.push(*len);
    }
}

impl FragPlacer<'_> {
    /// Appends a file's segment `raw` (`first`: its first, of a file of `size` bytes); returns
    /// its offset.
    fn append(&mut self, raw: &[u8], first: bool, size: u64) -> Result<u64> {
        if let Some(pieces) = self.pieces.as_mut().filter(|_| first) {
            piece_rule(pieces, &mut self.anchors, &mut self.len, raw, size);
        }
        let at = self.len;
        self.file
            .write_all_at(raw, at)
            .map_err(|e| BuildError::io(Path::new("(packed inode)"), "write", e))?;
        self.len += raw.len() as u64;
        Ok(at)
    }

    fn place(&mut self, done: Vec<Unit>) -> Result<()> {
        for u in done {
            let inode = self.ctx.sources.inode(u.id);
            let Kind::File(f) = &inode.kind else {
                unreachable!("fragments are regular files")
            };
            // Stored before (a twin, each of whose segments is found so, or kept in a run of an
            // earlier image): nothing is appended.
            let kept = self.kept.get(&u.id).copied();
            if let (Some(at), Some(key)) = (kept, u.key) {
                self.seen.entry(key).or_insert(at);
            }
            let twin = kept.or_else(|| u.key.and_then(|key| self.seen.get(&key).copied()));
            let several = f.size > compress::SEGMENT;
            let offset = match (u.key, twin) {
                (_, Some(at)) => at,
                (Some(key), None) if !several => {
                    let at = self.append(&u.raw, u.seg == 0, f.size)?;
                    self.seen.insert(key, at);
                    at
                }
                _ => self.append(&u.raw, u.seg == 0, f.size)?,
            };
            if several || u.key.is_none() {
                // Gathered until its last segment.
                self.open.get_or_insert((u.id, offset, Vec::new()));
            }
            let mut leaves = u.file_leaves;
            let (offset, done) = match self.open.take() {
                Some((id, start, mut so_far)) => {
                    debug_assert_eq!(id, u.id);
                    so_far.extend_from_slice(&leaves);
                    if (u.seg + 1) * compress::SEGMENT < f.size {
                        self.open = Some((id, start, so_far));
                        (start, false)
                    } else {
                        leaves = so_far;
                        (start, true)
                    }
                }
                None => (offset, true),
            };
            self.progress.advance(u.raw.len() as u64);
            if !done {
                continue;
            }
            if let (true, Some(key), None) = (several, u.key, twin) {
                // Whole now, so that a twin after it can take its place.
                self.seen.insert(key, offset);
            }
            self.files[u.id] = Some(Placed::Fragment { offset });
            if let Some(h) = self.ctx.hashers.file {
                let t = sealfs_verity::Tree::from_leaf_hashes_serial(h.params(), f.size, &leaves)
                    .map_err(|e| {
                    BuildError::io(
                        self.ctx.sources.tree.path(inode),
                        "hash",
                        std::io::Error::other(e),
                    )
                })?;
                self.digests.put(u.id, &t.digest());
            }
        }
        Ok(())
    }
}

/// Packs the files `ids`, in that order ([`fragment_order`]), into an unnamed temporary file beside the image, which becomes the packed
/// inode (id `tree.inodes.len()`, owned by root, mode 0644, the image's most common mtime).
fn pack_fragments(
    ctx: &UnitCtx<'_>,
    out: Target<'_>,
    ids: Vec<usize>,
    files: &mut [Option<Placed>],
    digests: &mut FileDigests,
    progress: &dyn Progress,
    pieces: Option<Kept>,
) -> Result<Packed> {
    let tree = ctx.sources.tree;
    let units: Vec<(usize, u64, u64)> = ids
        .iter()
        .flat_map(|&id| match &tree.inodes[id].kind {
            Kind::File(f) => segments(id, f.size),
            _ => unreachable!("fragments are regular files"),
        })
        .collect();
    let dir = out
        .path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file = tempfile::tempfile_in(dir)
        .map_err(|e| BuildError::io(dir, "create the packed inode's temporary file", e))?;
    // Runs kept from an earlier image first, each a piece; the other files from where they end.
    let with_pieces = pieces.is_some();
    let kept = pieces.unwrap_or_default();
    kept.write_decoded(&file)?;
    let first_pieces = kept
        .runs
        .iter()
        .map(|(at, _)| *at)
        .chain([kept.end])
        .collect::<Vec<_>>();
    let placer = FragPlacer {
        ctx,
        progress,
        file,
        len: kept.end,
        seen: HashMap::new(),
        open: None,
        files,
        digests,
        pieces: with_pieces.then_some(first_pieces),
        kept: &kept.files,
        anchors: Vec::new(),
    };
    let placer = ordered_pipeline(
        rayon::current_num_threads(),
        &batches_of(&units),
        WINDOW,
        |i| read_unit(ctx, units[i].0, units[i].1),
        placer,
        |p, done| p.place(done),
    )?;
    let (whole, pieces, file) = (placer.len, placer.pieces.unwrap_or_default(), placer.file);
    Ok(Packed {
        whole,
        pieces,
        anchors: placer.anchors,
        file,
        kept,
        inode: std::sync::OnceLock::new(),
    })
}

/// An inode of the image that no directory names (the packed inode, the metabox inode): a regular
/// file of `size` bytes, mode 0644, owned by root, with the image's common time.
fn special_inode(size: u64, epoch: (i64, u32), what: Special) -> Inode {
    Inode {
        kind: Kind::File(FileData {
            size,
            data_ranges: None,
            data: crate::sink::NO_DATA,
        }),
        mode: fmt::S_IFREG | 0o644,
        uid: 0,
        gid: 0,
        mtime: epoch.0,
        mtime_nsec: epoch.1,
        nlink: 1,
        xattrs: Box::default(),
        origin: Origin::Special(what),
    }
}

/// Compresses and writes every regular file's data from block 1 on.
///
/// `codecs` holds each inode's codec where a rule chose one (empty: the build's for every file).
#[allow(
    clippy::too_many_arguments,
    reason = "each is a distinct input of the step"
)]
pub(crate) fn write_data(
    out: Target<'_>,
    source: &dyn Source,
    tree: &Tree,
    shared: &SharedXattrs,
    copts: &CompressOptions,
    codecs: &[Codec],
    hashers: Hashers<'_>,
    progress: &dyn Progress,
    packed_pieces: bool,
    like: Option<&Like>,
    like_places: bool,
) -> Result<DataPhase> {
    // (`-E dedupe` refers to clusters placed before, which placing like an earlier image may
    // move: with it, data goes one file after another.)
    let like = like.filter(|_| !copts.dedupe);
    // The fragments' order follows `like` whether or not the files' data keeps its old places
    // (`like_places`): it leaves no room unused.
    let order_like = like;
    let like = like.filter(|_| like_places);
    let epoch = layout::choose_epoch(tree);
    let n = tree.inodes.len();
    // One more slot for the packed inode.
    let mut files: Vec<Option<Placed>> = (0..=n).map(|_| None).collect();
    // One digest per regular file, the packed inode's excepted.
    let mut digests = FileDigests::new(hashers.file, n);
    let mut next_blk = 1u64;
    let alg = copts.algorithm.id();
    let total: u64 = tree
        .inodes
        .iter()
        .map(|i| {
            if let Kind::File(f) = &i.kind {
                f.size
            } else {
                0
            }
        })
        .sum();
    // Fragments are counted twice: read into the packed inode, then compressed with it.
    let fragment_limit = match copts.fragments {
        Fragments::Off => 0,
        Fragments::Small => copts.pcluster_bytes as u64,
        Fragments::All => u64::MAX,
    };
    // (A file a rule gives its own codec keeps its own clusters.)
    let own_codec = |id: usize| codecs.get(id).is_some_and(|c| *c != Some(*copts));
    let fragment_bytes: u64 = tree
        .inodes
        .iter()
        .enumerate()
        .map(|(id, i)| match &i.kind {
            Kind::File(f)
                if f.data_ranges.is_none() && f.size < fragment_limit && !own_codec(id) =>
            {
                f.size
            }
            _ => 0,
        })
        .sum();
    // (With compressed directories the packed inode is compressed later, on its own.)
    let twice = if copts.compress_dirs {
        0
    } else {
        fragment_bytes
    };
    progress.begin("compressing file data", Some(total + twice));

    // Sparse files: chunk-based, copied as in uncompressed builds.
    let copier = Copier {
        source,
        tree,
        out: out.file,
        out_path: out.path,
        image_hasher: hashers.image,
        leaves: hashers.leaves,
        file_hasher: hashers.file,
        // (It copies sparse files, whose block maps are not inline.)
        meta_base: 0,
    };
    let mut units: Vec<(usize, u64, u64)> = Vec::new(); // (id, segment, bytes)
    let mut multi = Vec::new(); // files of more than one segment
    let mut fragments = Vec::new();
    let mut sparse = Vec::new();
    for (id, inode) in tree.inodes.iter().enumerate() {
        let Kind::File(f) = &inode.kind else { continue };
        if let Some(chunks) = f
            .data_ranges
            .as_ref()
            .and_then(|r| layout::plan_chunks(f.size, r))
        {
            sparse.push((id, chunks));
            continue;
        }
        if f.size == 0 {
            open_file(source, tree, inode)?.finish()?;
            if let Some(h) = hashers.file {
                let t = sealfs_verity::Tree::from_leaf_hashes(h.params(), 0, &[]).map_err(|e| {
                    BuildError::io(tree.path(inode), "hash", std::io::Error::other(e))
                })?;
                digests.put(id, &t.digest());
            }
            files[id] = Some(Placed::Flat {
                startblk: fmt::EROFS_NULL_ADDR,
                blocks: 0,
                tail: None,
            });
            continue;
        }
        if f.size > compress::SEGMENT {
            multi.push(id);
        }
        if f.size < fragment_limit && !own_codec(id) {
            fragments.push(id);
            continue;
        }
        units.extend(segments(id, f.size));
    }
    // (Pieces are compressed on their own where the packed inode is compressed last, on its own:
    // with compressed directories.)
    let pieces = packed_pieces && copts.compress_dirs;
    let compressed = if pieces {
        compressed_files(source, tree, &fragments)
    } else {
        HashSet::new()
    };
    fragment_order(tree, order_like, &compressed, &mut fragments);
    // With pieces, like an earlier image: runs of its packed inode kept whole, their files
    // first (a later identical file then refers to them).
    let kept = match order_like.filter(|_| pieces) {
        Some(like) => keep::keep_runs(source, tree, like, copts, &fragments)?,
        None => Kept::default(),
    };
    fragments.sort_by_key(|id| !kept.files.contains_key(id));
    let pieces = pieces.then_some(kept);
    // Building like an earlier image: the files compressed here hold their old bytes until
    // they are placed; sparse files go after them.
    let mut inplace = like.map(|like| {
        let mut spans = Vec::new();
        for &(id, seg, _) in &units {
            if seg == 0 {
                spans.extend(like.span(&tree.rel_path(&tree.inodes[id])).map(|s| (id, s)));
            }
        }
        // The files that had bytes there first: the last of them (which may grow into the end,
        // before anything else goes there), then the others in the order of their bytes (a file
        // grows into the room after it while that is free or held by a smaller file not placed
        // yet); then the new ones, which fill the gaps left. (A file's units stay together.)
        let last = spans.iter().max_by_key(|(_, s)| s.start).map(|(id, _)| *id);
        let order: HashMap<usize, u64> = spans.iter().map(|(id, s)| (*id, s.start)).collect();
        units.sort_by_key(|&(id, _, _)| match order.get(&id) {
            _ if Some(id) == last => (0, 0),
            Some(&at) => (1, at),
            None => (2, 0),
        });
        InPlace::new(next_blk * BLKSZ, spans)
    });
    if let Some(ip) = &inplace {
        next_blk = ip.end.div_ceil(BLKSZ);
    }
    for (id, (bits, mask)) in sparse {
        let inode = &tree.inodes[id];
        let Kind::File(f) = &inode.kind else {
            unreachable!("sparse files are regular files")
        };
        {
            let cs = 1u64 << bits;
            let map = mask
                .iter()
                .enumerate()
                .map(|(c, &m)| {
                    if !m {
                        return fmt::EROFS_NULL_ADDR;
                    }
                    let blk = next_blk as u32;
                    next_blk += (cs.min(f.size - c as u64 * cs)).div_ceil(BLKSZ);
                    blk
                })
                .collect();
            let chunks = ChunkPlan {
                chunkbits: bits,
                map,
            };
            let p = InodePlan {
                offset: 0,
                extended: false,
                layout: DataLayout::ChunkBased,
                size: f.size,
                ibody_len: 0,
                inline_len: 0,
                startblk: fmt::EROFS_NULL_ADDR,
                map: DataMap::Chunks(Box::new(chunks.clone())),
                in_metabox: false,
                blocks_of: None,
            };
            let digest = copier.copy_file(inode, &p, None)?;
            if let Some(d) = digest {
                digests.put(id, &d);
            }
            files[id] = Some(Placed::Chunks(chunks));
            progress.advance(f.size);
        }
    }
    if let Some(ip) = &mut inplace {
        ip.end = ip.end.max(next_blk * BLKSZ);
    }

    // Dedupe keys are fs-verity digests: the per-file ones when the build makes them, else these.
    let own_key_hasher = hashers.file.is_none().then(dedupe::key_hasher);
    let mut ctx = UnitCtx {
        sources: Sources {
            source,
            tree,
            packed: None,
        },
        shared,
        epoch,
        copts,
        codecs,
        hashers,
        key_hasher: own_key_hasher.as_ref(),
        claims: Mutex::new(HashMap::new()),
        multi_keys: HashMap::new(),
        twin_sizes: dedupe::shared_sizes(
            tree,
            (units.iter())
                .filter(|&&(_, seg, _)| seg == 0)
                .map(|&(id, _, _)| id)
                .chain(fragments.iter().copied()),
        ),
    };
    let key_hasher = hashers
        .file
        .or(own_key_hasher.as_ref())
        .expect("one of the two hashers is there");
    // Files of more than one segment are read and hashed once more, before the data phase, if
    // they may have a twin: their first segments are placed before their last is read. (A
    // one-segment file's key comes with its only unit.)
    ctx.multi_keys = dedupe::same_size_digests(source, tree, &multi, key_hasher)?
        .iter()
        .map(|(id, d)| {
            (
                id,
                d[..32].try_into().expect("digests are at least 256 bits"),
            )
        })
        .collect();
    // With fragments: whole small files packed first; tails are added as files are placed.
    // (Compressed directories alone need the packed inode too.)
    let mut packed = match (copts.fragments, copts.compress_dirs) {
        (Fragments::Off, false) => None,
        _ => Some(pack_fragments(
            &ctx,
            out,
            fragments,
            &mut files,
            &mut digests,
            progress,
            pieces,
        )?),
    };
    // (The pieces and anchors go on with the tails.)
    let (tail_pieces, tail_anchors) = match &mut packed {
        Some(p) => {
            // (identical fragments stored once; pieces padded to a block)
            progress.advance(fragment_bytes.saturating_sub(p.whole));
            let pieces = std::mem::take(&mut p.pieces);
            (
                (!pieces.is_empty()).then_some(pieces),
                std::mem::take(&mut p.anchors),
            )
        }
        None => (None, Vec::new()),
    };
    ctx.sources.packed = packed.as_ref();
    let placer = Placer {
        out,
        ctx: &ctx,
        progress,
        alg,
        next_blk,
        files,
        state: HashMap::new(),
        seen: HashMap::new(),
        carry: Vec::new(),
        digests,
        spill: Spill::beside(out.path)?,
        tails: packed
            .as_ref()
            .filter(|_| copts.fragments != Fragments::Off)
            .map(|p| Tails {
                file: &p.file,
                len: p.whole,
                pieces: tail_pieces.clone(),
                anchors: tail_anchors.clone(),
            }),
        chunks: HashMap::new(),
        inplace,
        written_end: 0,
    };
    // Compresses and places `units` (in order) after what `placer` placed.
    let place = |placer, units: &[(usize, u64, u64)]| {
        ordered_pipeline(
            rayon::current_num_threads(),
            &batches_of(units),
            WINDOW,
            |i| run_unit(&ctx, units[i].0, units[i].1),
            placer,
            |placer: &mut Placer<'_>, done| placer.place(done),
        )
    };
    let mut placer = place(placer, &units)?;
    let (mut packed_len, pieces, anchors) = match placer.tails.take() {
        Some(t) => (t.len, t.pieces.unwrap_or_default(), t.anchors),
        None => (
            packed.as_ref().map_or(0, |p| p.whole),
            tail_pieces.unwrap_or_default(),
            tail_anchors,
        ),
    };
    // Compressed directories: each one whole in the packed inode, after the fragments, in id
    // order; the packed inode is compressed once they are written (after the layout).
    let deferred = copts.compress_dirs;
    if deferred {
        for (id, inode) in tree.inodes.iter().enumerate() {
            if inode.is_dir() {
                placer.files[id] = Some(Placed::Fragment { offset: packed_len });
                packed_len += layout::dir_blocks(tree, id).size;
            }
        }
        placer.files[n] = Some(Placed::Compressed(packed_placeholder(copts)));
    }
    // Then the packed inode, complete, compressed like any file (if it holds anything).
    let packed_inode = || special_inode(packed_len, ctx.epoch, Special::Packed);
    match packed.as_ref().filter(|_| packed_len > 0 && !deferred) {
        Some(p) => {
            p.inode.set(packed_inode()).expect("set once");
            placer = place(placer, &segments(n, packed_len).collect::<Vec<_>>())?;
        }
        None if deferred => {}
        None => placer.files.truncate(n),
    }
    placer.finish()?;
    let mut unused = 0;
    if let Some(ip) = &placer.inplace {
        // The data ends after the last file; blocks past it written once (zeros where a file
        // was) are the metadata's, hashed when sealing.
        placer.next_blk = ip.end.div_ceil(BLKSZ).max(next_blk);
        unused = ip.unused();
        if let Some(store) = hashers.leaves {
            store.forget(placer.next_blk..placer.written_end.div_ceil(BLKSZ));
        }
    }
    let Placer {
        next_blk,
        files,
        digests,
        spill,
        ..
    } = placer;
    progress.end();
    Ok(DataPhase {
        pre: PreData {
            files,
            data_end: next_blk,
            packed: (packed_len > 0).then_some(n),
            spill,
        },
        digests,
        packed: (packed_len > 0).then(packed_inode),
        deferred: match packed {
            Some(p) if deferred => Some(DeferredPacked {
                file: p.file,
                len: packed_len,
                pieces,
                anchors,
                kept: p.kept,
            }),
            _ => None,
        },
        unused,
    })
}

/// The plan of a packed inode compressed later by [`write_packed`]: no extents yet, but the same
/// index size (compact indexes take a size given by the inode's size alone; encoded extents
/// packed one after another take 4-byte records) and no inline tail.
fn packed_placeholder(copts: &CompressOptions) -> ZPlan {
    ZPlan {
        alg: copts.algorithm.id(),
        big_pcluster: false,
        extents: Vec::new(),
        idata: Spilled::default(),
        extents_48bit: copts
            .extents_48bit
            .then(|| compress::fixed_lcluster_bits(copts)),
        fragment_tail: None,
    }
}

/// What [`write_packed`] compresses as one unit: a segment of a piece (its start and end), or a
/// piece kept from an earlier image (the run's index in [`Kept::runs`]).
#[derive(Clone, Copy)]
enum Part {
    Segment(u64, u64),
    Kept(usize),
}

/// Segments of the packed inode that may be held in memory at once by [`write_packed`].
const PACKED_WINDOW: usize = 8;

/// Compresses the packed inode's data (`packed`: its file and pieces), with the data's algorithm
/// and clusters, one segment per unit of an [`ordered_pipeline`] (at most [`PACKED_WINDOW`] in
/// memory), the pieces kept from an earlier image as they were, and writes it from block
/// `first_blk` on; returns its extents and the next free block. The result does not depend on
/// the thread count.
pub(crate) fn write_packed(
    out: Target<'_>,
    packed: &DeferredPacked,
    copts: &CompressOptions,
    first_blk: u64,
    progress: &dyn Progress,
) -> Result<(ZPlan, u64)> {
    let DeferredPacked {
        file: src,
        len,
        pieces,
        anchors,
        kept,
    } = packed;
    let len = *len;
    let copts = &CompressOptions {
        fragments: Fragments::Off,
        metabox: None,
        dedupe: false,
        compress_dirs: false,
        ..*copts
    };
    let (packed, alg) = (copts.extents_48bit, copts.algorithm.id());
    // Each piece (one without `pieces`) in segments from its start; each segment is compressed
    // on its own. A piece kept from an earlier image is one part: its pclusters as they were.
    let mut ends: Vec<u64> = pieces.iter().skip(1).copied().collect();
    ends.push(len);
    let mut parts: Vec<Part> = Vec::new();
    for (a, &b) in std::iter::once(0)
        .chain(pieces.iter().skip(1).copied())
        .zip(&ends)
    {
        // (The kept runs are in order, one after another from 0.)
        match kept.runs.binary_search_by_key(&a, |(at, _)| *at) {
            Ok(run) if a < b => parts.push(Part::Kept(run)),
            _ => {
                // Segments end at the last anchor they reach where there is one: a segment's
                // end is an extent's, fixed, so at a fixed distance from the piece's start it
                // would move with every change of size before it.
                let mut s = a;
                while s < b {
                    let end = b.min(s + compress::SEGMENT);
                    let cut = anchors.partition_point(|&x| x <= end);
                    let e = match anchors[..cut].last() {
                        Some(&x) if x > s && end < b => x,
                        _ => end,
                    };
                    parts.push(Part::Segment(s, e));
                    s = e;
                }
            }
        }
    }
    let batches: Vec<_> = (0..parts.len()).map(|i| i..i + 1).collect();
    let outb = Out {
        first_blk,
        buf: Vec::new(),
    };
    progress.begin("compressing the packed inode", Some(len));
    let (mut outb, placed) = ordered_pipeline(
        rayon::current_num_threads(),
        &batches,
        PACKED_WINDOW,
        |i| {
            let (s, e) = match parts[i] {
                Part::Segment(s, e) => (s, e),
                Part::Kept(run) => {
                    let extents = kept.extents(run)?;
                    progress.advance(extents.iter().map(|x| x.len).sum());
                    return Ok(extents);
                }
            };
            let mut seg = vec![0u8; (e - s) as usize];
            src.read_exact_at(&mut seg, s)
                .map_err(|e| BuildError::io(Path::new("(packed inode)"), "read", e))?;
            let inside = &anchors[anchors.partition_point(|&a| a <= s)..];
            let inside = &inside[..inside.partition_point(|&a| a < e)];
            let extents = compress::compress_segment_anchored(copts, &seg, s, len, inside);
            progress.advance(seg.len() as u64);
            Ok(extents)
        },
        (outb, Vec::new()),
        |(outb, placed): &mut (Out, Vec<ZPlaced>), done: Vec<Vec<ZExtent>>| {
            for x in done.iter().flatten() {
                placed.push(outb.place(x, alg, packed, false, || {
                    let mut raw = vec![0u8; x.len as usize];
                    src.read_exact_at(&mut raw, x.start)
                        .map_err(|e| BuildError::io(Path::new("(packed inode)"), "read", e))?;
                    Ok(raw)
                })?);
            }
            // Whole blocks are written; a partly filled one (encoded extents) waits for the next.
            let whole = outb.buf.len() / BLKSZ as usize * BLKSZ as usize;
            out.file
                .write_all_at(&outb.buf[..whole], outb.first_blk * BLKSZ)
                .map_err(|e| BuildError::io(out.path, "write image", e))?;
            outb.buf.drain(..whole);
            outb.first_blk += whole as u64 / BLKSZ;
            Ok(())
        },
    )?;
    progress.end();
    outb.buf
        .resize(outb.buf.len().next_multiple_of(BLKSZ as usize), 0);
    out.file
        .write_all_at(&outb.buf, outb.first_blk * BLKSZ)
        .map_err(|e| BuildError::io(out.path, "write image", e))?;
    let z = ZPlan {
        big_pcluster: placed.iter().any(|x| !x.plain && x.blocks > 1),
        extents: placed,
        ..packed_placeholder(copts)
    };
    Ok((z, outb.next_blk()))
}

/// Compresses the metabox's data (see [`crate::emit::metabox_data`]) in pclusters of at most
/// `copts.metabox` bytes, with the data's algorithm (in fixed-input clusters and encoded extents
/// with `-E 48bit`, else cut to fit with compact indexes), writes them from block `first_blk` on,
/// and returns the metabox inode (its tree part and its planned extents) and the next free block.
/// Segments are compressed in parallel; the result does not depend on the thread count.
pub(crate) fn write_metabox(
    out: Target<'_>,
    data: Vec<u8>,
    copts: &CompressOptions,
    epoch: (i64, u32),
    first_blk: u64,
) -> Result<(Inode, ZPlan, u64)> {
    use rayon::prelude::*;
    let m = CompressOptions {
        pcluster_bytes: copts.metabox.expect("metadata compression was asked for"),
        fragments: Fragments::Off,
        metabox: None,
        ..*copts
    };
    let bits48 = m.extents_48bit.then(|| compress::fixed_lcluster_bits(&m));
    let size = data.len() as u64;
    let starts: Vec<usize> = (0..data.len())
        .step_by(compress::SEGMENT as usize)
        .collect();
    let extents: Vec<Vec<ZExtent>> = starts
        .par_iter()
        .map(|&s| {
            let seg = &data[s..(s + compress::SEGMENT as usize).min(data.len())];
            compress::compress_segment(&m, seg, s as u64, size)
        })
        .collect();
    let mut outb = Out {
        first_blk,
        buf: Vec::new(),
    };
    let placed = extents
        .iter()
        .flatten()
        .map(|x| {
            outb.place(x, m.algorithm.id(), bits48.is_some(), false, || {
                Ok(data[x.start as usize..][..x.len as usize].to_vec())
            })
        })
        .collect::<Result<Vec<ZPlaced>>>()?;
    outb.buf
        .resize(outb.buf.len().next_multiple_of(BLKSZ as usize), 0);
    out.file
        .write_all_at(&outb.buf, first_blk * BLKSZ)
        .map_err(|e| BuildError::io(out.path, "write image", e))?;
    let z = ZPlan {
        alg: m.algorithm.id(),
        big_pcluster: placed.iter().any(|x| !x.plain && x.blocks > 1),
        extents: placed,
        idata: Spilled::default(),
        extents_48bit: bits48,
        fragment_tail: None,
    };
    let inode = special_inode(size, epoch, Special::Metabox);
    Ok((inode, z, outb.next_blk()))
}

/// Where the units of an [`ordered_pipeline`] stand.
struct Progression<T> {
    /// Finished units not yet placed.
    slots: Vec<Option<T>>,
    /// Units of each batch not finished yet.
    remaining: Vec<usize>,
    /// Batches placed so far (all of them, in order).
    placed: usize,
    /// A thread is placing batches.
    placing: bool,
    /// The first failure (by unit, or by batch for a placement), which stops the pipeline.
    error: Option<(usize, BuildError)>,
}

/// Runs `work` for every unit on `threads` threads and `place` for every batch of units (consecutive
/// ranges covering all units), the batches strictly in order, each once all its units are done.
///
/// Threads take units in order from one counter and never wait for a batch to end: the thread that
/// finishes a batch's last unit places it (and any later batches already complete), so the cores stay
/// busy across batch boundaries. A unit more than `window - 1` batches past the oldest unplaced batch
/// waits, which bounds memory to `window` batches. The results do not depend on the thread count: each
/// batch is placed whole, in order.
fn ordered_pipeline<T: Send, P: Send>(
    threads: usize,
    batches: &[std::ops::Range<usize>],
    window: usize,
    work: impl Fn(usize) -> Result<T> + Sync,
    placer: P,
    place: impl Fn(&mut P, Vec<T>) -> Result<()> + Sync,
) -> Result<P> {
    let n = batches.last().map_or(0, |b| b.end);
    let mut batch_of = vec![0usize; n];
    for (b, r) in batches.iter().enumerate() {
        batch_of[r.clone()].fill(b);
    }
    let state = Mutex::new(Progression {
        slots: (0..n).map(|_| None).collect(),
        remaining: batches.iter().map(|r| r.len()).collect(),
        placed: 0,
        placing: false,
        error: None,
    });
    let changed = Condvar::new();
    let placer = Mutex::new(placer);
    let next = AtomicUsize::new(0);
    let lock = || state.lock().unwrap_or_else(|e| e.into_inner());
    let fail = |st: &mut MutexGuard<'_, Progression<T>>, at: usize, e: BuildError| {
        if st.error.as_ref().is_none_or(|(first, _)| at < *first) {
            st.error = Some((at, e));
        }
        changed.notify_all();
    };
    let worker = || {
        // A panicking worker stops the others instead of leaving them waiting for its unit.
        struct OnPanic<'a, T>(&'a Mutex<Progression<T>>, &'a Condvar);
        impl<T> Drop for OnPanic<'_, T> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    let mut st = self.0.lock().unwrap_or_else(|e| e.into_inner());
                    st.error
                        .get_or_insert((0, BuildError::InvalidOption("a worker panicked".into())));
                    self.1.notify_all();
                }
            }
        }
        let _guard = OnPanic(&state, &changed);
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                return;
            }
            let b = batch_of[i];
            let mut st = lock();
            while st.error.is_none() && b >= st.placed + window {
                st = changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.error.is_some() {
                return;
            }
            drop(st);
            let result = work(i);
            let mut st = lock();
            match result {
                Ok(t) => {
                    st.slots[i] = Some(t);
                    st.remaining[b] -= 1;
                }
                Err(e) => return fail(&mut st, i, e),
            }
            if st.placing {
                continue; // the placing thread takes this batch when it is its turn
            }
            st.placing = true;
            while st.error.is_none() && st.placed < batches.len() && st.remaining[st.placed] == 0 {
                let pb = st.placed;
                let items: Vec<T> = st.slots[batches[pb].clone()]
                    .iter_mut()
                    .map(|s| s.take().expect("finished unit"))
                    .collect();
                drop(st);
                let placed = place(&mut placer.lock().unwrap_or_else(|e| e.into_inner()), items);
                st = lock();
                match placed {
                    Ok(()) => st.placed += 1,
                    Err(e) => fail(&mut st, batches[pb].start, e),
                }
                changed.notify_all();
            }
            st.placing = false;
        }
    };
    std::thread::scope(|s| {
        let others: Vec<_> = (1..threads.max(1)).map(|_| s.spawn(worker)).collect();
        worker();
        // A worker's panic goes on with its own message (the scope's would be "a scoped thread
        // panicked", whichever thread ran the unit).
        for other in others {
            if let Err(panic) = other.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    let st = state.into_inner().unwrap_or_else(|e| e.into_inner());
    if let Some((_, e)) = st.error {
        return Err(e);
    }
    assert_eq!(st.placed, batches.len(), "every batch placed");
    Ok(placer.into_inner().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn batches_of(sizes: &[usize]) -> Vec<std::ops::Range<usize>> {
        let mut at = 0;
        sizes
            .iter()
            .map(|&n| {
                at += n;
                at - n..at
            })
            .collect()
    }

    /// Issue 29: a DEFLATE stream packed to end one or two bytes into a block gets an empty stored
    /// block in front (and still decodes to its bytes), or, when that would make it longer than
    /// its data, is stored as is; other positions, other algorithms and right-aligned pclusters
    /// are placed as they are.
    #[test]
    fn deflate_streams_ending_just_into_a_block_are_lengthened() {
        use std::io::Read;
        let text: Vec<u8> = (0..4096u32)
            .flat_map(|i| format!("{} ", i * 7 % 1000).into_bytes())
            .take(4096)
            .collect();
        let mut c = libdeflater::Compressor::new(libdeflater::CompressionLvl::new(6).unwrap());
        let mut stream = vec![0u8; c.deflate_compress_bound(text.len())];
        let n = c.deflate_compress(&text, &mut stream).unwrap();
        stream.truncate(n);
        let deflate = fmt::Z_EROFS_COMPRESSION_DEFLATE;
        // Where the stream starts so that it ends `t` bytes into a block.
        let start_for = |t: u64| (4096 * 3 + t - n as u64) % 4096;
        // The stream of `text`, and the same stream taken for one saving only 4 bytes (its
        // "input" is then `n + 4` bytes, made up).
        let tight: Vec<u8> = (0..n + 4).map(|i| i as u8).collect();
        for (len, input) in [(4096, &text), (n as u64 + 4, &tight)] {
            let x = ZExtent {
                start: 0,
                len,
                plain: false,
                data: stream.clone(),
            };
            for t in 0..8 {
                for (alg, packed) in [(deflate, true), (deflate, false), (0, true)] {
                    let mut out = Out {
                        first_blk: 1,
                        buf: vec![7u8; start_for(t) as usize],
                    };
                    let p = out
                        .place(&x, alg, packed, false, || Ok(input.clone()))
                        .unwrap();
                    let fixed = alg == deflate && packed && (t == 1 || t == 2);
                    let raw = fixed && len < 4096;
                    let plen = match (fixed, raw) {
                        (false, _) => n as u64,
                        (true, false) => n as u64 + 5,
                        (true, true) => len,
                    };
                    let what = format!("len {len} t {t} alg {alg} packed {packed}");
                    assert_eq!((p.plen, p.plain), (plen, raw), "{what}");
                    if !packed {
                        continue;
                    }
                    assert_eq!(p.pstart, 4096 + start_for(t), "{what}");
                    let at = (p.pstart - 4096) as usize;
                    let bytes = &out.buf[at..at + plen as usize];
                    if raw {
                        assert_eq!(bytes, &input[..], "{what}");
                        continue;
                    }
                    assert_eq!(&bytes[plen as usize - n..], &stream[..], "{what}");
                    if alg == deflate {
                        assert!(fmt::z_erofs_deflate_end_ok(
                            p.pstart,
                            p.pstart + plen,
                            BLKSZ
                        ));
                        let mut decoded = Vec::new();
                        flate2::read::DeflateDecoder::new(bytes)
                            .read_to_end(&mut decoded)
                            .unwrap();
                        assert_eq!(decoded, text, "{what}");
                    }
                }
            }
        }
    }

    /// Unit costs vary (some units sleep), so units finish out of order; batches must still be placed
    /// whole, in order, with their units in order, and no more than `window` batches held at once.
    #[test]
    fn pipeline_places_batches_whole_and_in_order_within_the_window() {
        let batches = batches_of(&[3, 1, 7, 2, 5, 1, 1, 9, 4]);
        let n = batches.last().unwrap().end;
        for threads in [1, 2, 4] {
            for window in [1, 2, 3] {
                let started = AtomicUsize::new(0);
                let placed_units = AtomicUsize::new(0);
                let max_ahead = AtomicUsize::new(0);
                let batch_of = |i: usize| batches.iter().position(|r| r.contains(&i)).unwrap();
                let placed = ordered_pipeline(
                    threads,
                    &batches,
                    window,
                    |i| {
                        started.fetch_add(1, Ordering::SeqCst);
                        // How far past the oldest unplaced batch this unit is.
                        let oldest = batch_of(placed_units.load(Ordering::SeqCst).min(n - 1));
                        max_ahead.fetch_max(batch_of(i) - oldest, Ordering::SeqCst);
                        if i % 4 == 0 {
                            std::thread::sleep(std::time::Duration::from_millis(3));
                        }
                        Ok(i * 10)
                    },
                    Vec::new(),
                    |log: &mut Vec<Vec<usize>>, items| {
                        placed_units.fetch_add(items.len(), Ordering::SeqCst);
                        log.push(items);
                        Ok(())
                    },
                )
                .unwrap();
                let want: Vec<Vec<usize>> = batches
                    .iter()
                    .map(|r| r.clone().map(|i| i * 10).collect())
                    .collect();
                assert_eq!(placed, want, "threads {threads}, window {window}");
                assert_eq!(started.load(Ordering::SeqCst), n);
                assert!(
                    max_ahead.load(Ordering::SeqCst) < window,
                    "threads {threads}: a unit ran {} batches ahead with window {window}",
                    max_ahead.load(Ordering::SeqCst)
                );
            }
        }
    }

    /// A failing unit stops the pipeline with its error (the first by unit order among failures),
    /// places nothing at or after its batch, and leaves no thread waiting.
    #[test]
    fn pipeline_stops_at_a_failing_unit() {
        let batches = batches_of(&[4, 4, 4, 4, 4]);
        for threads in [1, 2, 3] {
            let placed = AtomicUsize::new(0);
            let err = ordered_pipeline(
                threads,
                &batches,
                2,
                |i| {
                    if i == 9 || i == 17 {
                        Err(BuildError::InvalidOption(format!("unit {i} failed")))
                    } else {
                        Ok(i)
                    }
                },
                (),
                |_, items: Vec<usize>| {
                    assert!(
                        items.iter().all(|&i| i < 8),
                        "batch of a failed unit placed"
                    );
                    placed.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                },
            )
            .expect_err("fails");
            assert!(err.to_string().contains("unit 9 failed"), "{err}");
            assert!(placed.load(Ordering::SeqCst) <= 2);
        }
    }

    /// A failing placement stops the pipeline with its error.
    #[test]
    fn pipeline_stops_at_a_failing_placement() {
        let batches = batches_of(&[2, 2, 2, 2, 2, 2]);
        for threads in [1, 2, 4] {
            let err = ordered_pipeline(
                threads,
                &batches,
                2,
                Ok,
                0usize,
                |count, items: Vec<usize>| {
                    *count += 1;
                    if items[0] == 4 {
                        return Err(BuildError::InvalidOption("write failed".into()));
                    }
                    assert!(items[0] < 4, "placed a batch after the failed one");
                    Ok(())
                },
            )
            .expect_err("fails");
            assert!(err.to_string().contains("write failed"), "{err}");
        }
    }

    /// A panicking unit propagates its panic instead of leaving the other threads waiting for it.
    #[test]
    #[should_panic(expected = "unit 5 panicked")]
    fn pipeline_propagates_a_panic() {
        let batches = batches_of(&[2, 2, 2, 2, 2, 2]);
        let _ = ordered_pipeline(
            2,
            &batches,
            1,
            |i| {
                if i == 5 {
                    panic!("unit 5 panicked");
                }
                Ok(i)
            },
            (),
            |_, _: Vec<usize>| Ok(()),
        );
    }
}
