//! Writing a planned image: metadata streamed in offset order on one thread, file data copied in
//! parallel straight to its planned position, then the superblock and its checksum last.

use crate::error::{BuildError, Result};
use crate::layout::{dir_blocks, zmap_header_offset, InodePlan, Plan, ZPlan};
use crate::options::{BuildOptions, UuidChoice};
use crate::seal::Target;
use crate::source::{open_file, Source, SourceFile};
use crate::tree::{Inode, InodeId, Kind, Tree};
use crate::xattrs::{self, SharedXattrs};
use crate::Progress;
use rayon::prelude::*;
use sealfs_format::{
    self as fmt, Dirent, InodeCompact, InodeExtended, IntoBytes, SuperBlock, BLKSZ,
};
use sealfs_verity::{BlockHasher, Digest, HashAlg, RootHasher};
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

/// Sequential writer of the metadata stream: coalesces nearby pieces into large positioned writes and
/// hashes what it writes (the default UUID is derived from it).
struct Stream<'a> {
    file: &'a File,
    path: &'a Path,
    buf: Vec<u8>,
    start: u64,
    hash: Xxh3,
}

impl<'a> Stream<'a> {
    fn new(file: &'a File, path: &'a Path, start: u64) -> Self {
        Stream {
            file,
            path,
            buf: Vec::new(),
            start,
            hash: Xxh3::new(),
        }
    }

    const MAX_GAP: u64 = 64 << 10;
    const MAX_BUF: usize = 4 << 20;

    fn put(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let end = self.start + self.buf.len() as u64;
        assert!(offset >= end, "metadata pieces out of order at {offset}");
        if offset - end > Self::MAX_GAP || self.buf.len() > Self::MAX_BUF {
            self.flush()?;
            self.start = offset;
            self.hash.update(&offset.to_le_bytes());
        } else {
            self.buf.resize(self.buf.len() + (offset - end) as usize, 0);
        }
        self.buf.extend_from_slice(bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.file
            .write_all_at(&self.buf, self.start)
            .map_err(|e| BuildError::io(self.path, "write image", e))?;
        self.hash.update(&self.buf);
        self.start += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

/// Encodes the inode core of `inode` as planned.
fn encode_inode(inode: &Inode, p: &InodePlan, plan: &Plan, ibody_len: u64) -> Vec<u8> {
    let i_u = match (&inode.kind, p.chunks()) {
        _ if p.zmap().is_some() => p.zmap().map_or(0, |z| z.blocks() as u32),
        _ if p.fragment().is_some() => 0,
        (_, Some(c)) => (c.chunkbits - fmt::BLKSZBITS) as u32,
        (Kind::Device(rdev), _) => *rdev,
        (Kind::Special, _) => 0,
        _ => p.startblk,
    };
    let i_format = p.layout.i_format(p.extended);
    let icount = xattrs::icount(ibody_len);
    // The nid's low 32 bits (unused by the kernel, which shows the nid; unique, as nids are). Not
    // a count: every inode after an added or removed file would change, and an update from the
    // earlier version would fetch every block of inodes (issue 41); nids stay where the layout
    // keeps inodes in place (`--like`).
    let i_ino = p.nid() as u32;
    if p.extended {
        InodeExtended {
            i_format: i_format.into(),
            i_xattr_icount: icount.into(),
            i_mode: inode.mode.into(),
            i_nb: 0.into(),
            i_size: p.size.into(),
            i_u: i_u.into(),
            i_ino: i_ino.into(),
            i_uid: inode.uid.into(),
            i_gid: inode.gid.into(),
            i_mtime: inode.mtime.into(),
            i_mtime_nsec: inode.mtime_nsec.into(),
            i_nlink: inode.nlink.into(),
            i_reserved2: [0; 16],
        }
        .as_bytes()
        .to_vec()
    } else {
        debug_assert_eq!(
            (inode.mtime, inode.mtime_nsec),
            (plan.epoch, plan.fixed_nsec)
        );
        InodeCompact {
            i_format: i_format.into(),
            i_xattr_icount: icount.into(),
            i_mode: inode.mode.into(),
            i_nb: (inode.nlink as u16).into(),
            i_size: (p.size as u32).into(),
            i_mtime: 0.into(),
            i_u: i_u.into(),
            i_ino: i_ino.into(),
            i_uid: (inode.uid as u16).into(),
            i_gid: (inode.gid as u16).into(),
            i_reserved: 0.into(),
        }
        .as_bytes()
        .to_vec()
    }
}

/// One logical cluster's index, before encoding.
#[derive(Clone, Copy, Default)]
struct Lcluster {
    kind: u16,
    clusterofs: u16,
    blkaddr: u32,
    /// NONHEAD: distance back to the head, or `CBLKCNT | blocks` in the first NONHEAD of a big pcluster.
    d0: u16,
    /// NONHEAD: distance forward to the next head.
    d1: u16,
    /// The head of the inline tail pcluster or of a tail fragment (its block address means
    /// nothing).
    inline_tail: bool,
}

/// The logical cluster indexes of a compressed inode.
fn lclusters(size: u64, z: &ZPlan) -> Vec<Lcluster> {
    let nlc = size.div_ceil(BLKSZ);
    let ext = &z.extents;
    let mut out = Vec::with_capacity(nlc as usize);
    let mut k = 0;
    for lc in 0..nlc {
        while k + 1 < ext.len() && ext[k + 1].start / BLKSZ <= lc {
            k += 1;
        }
        let e = &ext[k];
        debug_assert!(
            k == 0 || ext[k - 1].start + ext[k - 1].len == e.start,
            "extents are contiguous"
        );
        let head = e.start / BLKSZ;
        out.push(if head == lc {
            Lcluster {
                kind: if e.plain {
                    fmt::Z_EROFS_LCLUSTER_TYPE_PLAIN
                } else {
                    fmt::Z_EROFS_LCLUSTER_TYPE_HEAD1
                },
                clusterofs: (e.start % BLKSZ) as u16,
                blkaddr: e.blkaddr,
                inline_tail: (!z.idata.is_empty() || z.fragment_tail.is_some())
                    && k + 1 == ext.len(),
                ..Default::default()
            }
        } else {
            let next_head = ext.get(k + 1).map_or(nlc, |n| n.start / BLKSZ);
            let d0 = if lc == head + 1 && z.big_pcluster {
                fmt::Z_EROFS_LI_D0_CBLKCNT | e.blocks as u16
            } else {
                (lc - head).min(2047) as u16
            };
            Lcluster {
                kind: fmt::Z_EROFS_LCLUSTER_TYPE_NONHEAD,
                d0,
                d1: (next_head - lc).min(2047) as u16,
                ..Default::default()
            }
        });
    }
    out
}

/// `pblk - base` the kernel derives for the head at `i` of a COMPACT pack from the entries before it
/// (the format's [`fmt::compact_head_nblk`]).
fn compact_nblk(pack: &[(u16, u16)], i: usize, big: bool) -> Option<u32> {
    fmt::compact_head_nblk(i as u32, big, |j| {
        let (kind, lo) = pack[j as usize];
        (kind, lo as u64)
    })
    .map(|n| n as u32)
}

/// Appends a compressed inode's map header and its 48-bit encoded extents, one record per logical
/// cluster (its `plen` with the format in the top bits: the algorithm + 1, or 0 for raw bytes):
/// 4-byte records count each extent's data from the previous one's (after an 8-byte first
/// address); 8- and 16-byte ones give each extent's address (see [`ZPlan::record_size`]). The
/// last record of a tail fragment holds its offset in the packed inode instead.
fn encode_extents_48bit(item: &mut Vec<u8>, p: &InodePlan, z: &ZPlan, bits: u8) {
    let recsz = z.record_size();
    let hdr = zmap_header_offset(p.isize(), p.ibody_len);
    item.resize(hdr as usize, 0);
    let mut advise = fmt::Z_EROFS_ADVISE_EXTENTS | fmt::z_erofs_advise_extrecsz(recsz);
    if z.fragment_tail.is_some() {
        advise |= fmt::Z_EROFS_ADVISE_FRAGMENT_PCLUSTER;
    }
    // With encoded extents the first 4 bytes are the record count (`h_extents_lo`; a tail
    // fragment's offset is in its record), bytes 6-7 its high bits (`h_extents_hi`, zero below
    // 2^32 records but for the cluster bits that share them).
    let header = fmt::MapHeader {
        h_fragmentoff_or_idata: u32::try_from(z.extents.len())
            .expect("fewer than 2^32 extents")
            .into(),
        h_advise: advise.into(),
        h_algorithmtype: 0,
        h_clusterbits: bits - fmt::BLKSZBITS,
    };
    item.extend_from_slice(header.as_bytes());
    item.resize(fmt::z_erofs_extent_records_start(hdr, recsz) as usize, 0);
    let mut next = z.extents.first().map_or(0, |e| e.pstart);
    if recsz == fmt::Z_EROFS_EXTENT_RECSZ_PLEN {
        item.extend_from_slice(&next.to_le_bytes());
    }
    for (k, e) in z.extents.iter().enumerate() {
        let (plen, pstart) = match z.fragment_tail.filter(|_| k + 1 == z.extents.len()) {
            // A tail fragment: its offset in the packed inode, the high half as the address.
            Some(offset) => (offset as u32, offset >> 32),
            None => {
                let fmt_bits = if e.plain { 0 } else { z.alg as u32 + 1 };
                (
                    e.plen as u32 | fmt_bits << fmt::Z_EROFS_EXTENT_PLEN_FMT_BIT,
                    e.pstart,
                )
            }
        };
        item.extend_from_slice(&plen.to_le_bytes());
        match recsz {
            4 => {
                debug_assert!(
                    z.fragment_tail.is_some() && k + 1 == z.extents.len() || e.pstart == next,
                    "4-byte records: each extent's data right after the previous one's"
                );
                next += e.plen;
            }
            8 => item.extend_from_slice(&(pstart as u32).to_le_bytes()),
            _ => {
                item.extend_from_slice(&(pstart as u32).to_le_bytes());
                item.extend_from_slice(&((pstart >> 32) as u32).to_le_bytes());
                item.extend_from_slice(&(e.start as u32).to_le_bytes());
            }
        }
    }
}

/// Appends a compressed inode's map header, COMPACT lcluster indexes and inline tail pcluster.
fn encode_zmap(item: &mut Vec<u8>, p: &InodePlan, z: &ZPlan) {
    if let Some(bits) = z.extents_48bit {
        return encode_extents_48bit(item, p, z, bits);
    }
    item.resize(zmap_header_offset(p.isize(), p.ibody_len) as usize, 0);
    let mut advise = fmt::Z_EROFS_ADVISE_COMPACTED_2B;
    if z.big_pcluster {
        // COMPACT indexes need both bits equal.
        advise |= fmt::Z_EROFS_ADVISE_BIG_PCLUSTER_1 | fmt::Z_EROFS_ADVISE_BIG_PCLUSTER_2;
    }
    if !z.idata.is_empty() {
        advise |= fmt::Z_EROFS_ADVISE_INLINE_PCLUSTER;
    }
    let fragmentoff_or_idata = match z.fragment_tail {
        Some(offset) => {
            advise |= fmt::Z_EROFS_ADVISE_FRAGMENT_PCLUSTER;
            u32::try_from(offset).expect("tail fragments are placed below 4 GiB")
        }
        None => (z.idata.len() as u32) << 16,
    };
    let header = fmt::MapHeader {
        h_fragmentoff_or_idata: fragmentoff_or_idata.into(),
        h_advise: advise.into(),
        h_algorithmtype: z.alg,
        h_clusterbits: 0,
    };
    item.extend_from_slice(header.as_bytes());
    let lcs = lclusters(p.size, z);
    let ebase = item.len() as u64;
    let split = fmt::compact_index_split(ebase, lcs.len() as u64, advise);
    let (n4, n2) = (split.initial_4b, split.compacted_2b);
    // (first lcluster, count, amortizedshift) of the three regions.
    let regions = [(0, n4, 2), (n4, n2, 1), (n4 + n2, split.end_4b, 2)];
    for (start, count, shift) in regions {
        let shape =
            fmt::compact_pack(shift, fmt::BLKSZBITS).expect("4 KiB lclusters fit both packs");
        let (vcnt, pack_size, bits, lobits) = (
            shape.vcnt as usize,
            shape.bytes as usize,
            shape.encodebits as usize,
            shape.lobits,
        );
        for first in (start..start + count).step_by(vcnt) {
            // (kind, lo) per slot, as the kernel decodes them; slots past the region are zero dummies.
            let pack: Vec<(u16, u16)> = (0..vcnt)
                .map(|j| {
                    let idx = first + j as u64;
                    if idx >= start + count {
                        return (0, 0);
                    }
                    let lc = lcs[idx as usize];
                    let lo = if lc.kind != fmt::Z_EROFS_LCLUSTER_TYPE_NONHEAD {
                        lc.clusterofs
                    } else if lc.d0 & fmt::Z_EROFS_LI_D0_CBLKCNT != 0 {
                        lc.d0
                    } else if j + 1 == vcnt {
                        lc.d1 // the last slot of a pack looks ahead; its distance back is derived
                    } else {
                        lc.d0
                    };
                    (lc.kind, lo)
                })
                .collect();
            let mut bytes = vec![0u8; pack_size];
            for (j, (kind, lo)) in pack.iter().enumerate() {
                let v = ((*kind as u32) << lobits) | *lo as u32;
                let bit = j * bits;
                let word = u32::from_le_bytes(bytes[bit / 8..bit / 8 + 4].try_into().unwrap())
                    | (v << (bit % 8));
                bytes[bit / 8..bit / 8 + 4].copy_from_slice(&word.to_le_bytes());
            }
            // The base makes the kernel's `base + nblk` land on the first real head's block.
            let base = (0..vcnt)
                .filter(|&j| first + (j as u64) < start + count)
                .map(|j| (j, lcs[(first + j as u64) as usize]))
                .find(|(_, lc)| lc.kind != fmt::Z_EROFS_LCLUSTER_TYPE_NONHEAD && !lc.inline_tail)
                .and_then(|(j, lc)| {
                    compact_nblk(&pack, j, z.big_pcluster).map(|n| lc.blkaddr.wrapping_sub(n))
                })
                .unwrap_or(0);
            bytes[pack_size - 4..].copy_from_slice(&base.to_le_bytes());
            item.extend_from_slice(&bytes);
        }
    }
}

/// Encodes a directory's data: whole blocks, the last one cut to the directory size.
fn encode_dir(id: InodeId, tree: &Tree, plan: &Plan) -> Vec<u8> {
    let blocks = dir_blocks(tree, id);
    let mut out = Vec::with_capacity(blocks.size as usize);
    let mut bounds = blocks.block_starts.clone();
    bounds.push(blocks.entries.len());
    for w in bounds.windows(2) {
        let block_start = out.len();
        let ents = &blocks.entries[w[0]..w[1]];
        let mut nameoff = ents.len() as u64 * fmt::EROFS_DIRENT_SIZE;
        for (name, child) in ents {
            let d = Dirent {
                nid: plan.inodes[*child].nid().into(),
                nameoff: (nameoff as u16).into(),
                file_type: fmt::file_type_of_mode(tree.inodes[*child].mode),
                reserved: 0,
            };
            out.extend_from_slice(d.as_bytes());
            nameoff += name.len() as u64;
        }
        for (name, _) in ents {
            out.extend_from_slice(name);
        }
        if w[1] != blocks.entries.len() {
            out.resize(block_start + BLKSZ as usize, 0);
        }
    }
    debug_assert_eq!(out.len() as u64, blocks.size);
    out
}

/// Writes the data of every directory that is a fragment (compressed directories) into the packed
/// inode's data `packed`, at its offset there.
pub(crate) fn write_dir_fragments(packed: &File, tree: &Tree, plan: &Plan) -> Result<()> {
    let dirs: Vec<InodeId> = (0..tree.inodes.len())
        .filter(|&id| tree.inodes[id].is_dir() && plan.inodes[id].fragment().is_some())
        .collect();
    for chunk in dirs.chunks(PARTS_AT_ONCE) {
        let encoded: Vec<Vec<u8>> = chunk
            .par_iter()
            .map(|&id| encode_dir(id, tree, plan))
            .collect();
        for (&id, bytes) in chunk.iter().zip(encoded) {
            let offset = plan.inodes[id].fragment().expect("filtered on fragments");
            packed
                .write_all_at(&bytes, offset)
                .map_err(|e| BuildError::io(Path::new("(packed inode)"), "write", e))?;
        }
    }
    Ok(())
}

/// A part of a metadata area, encoded on its own: an inode's item (`None`: the shared xattrs), or
/// the data block(s) of a directory or symlink.
#[derive(Clone, Copy)]
enum Part {
    Item(Option<InodeId>),
    Block(InodeId),
}

/// A part and its position.
type PartAt = (u64, Part);

/// How many parts are encoded at once (in parallel) before they are written: bounds the memory of
/// the metadata phase whatever the image's size.
const PARTS_AT_ONCE: usize = 4096;

/// The parts of the metadata area inside the metabox (`in_metabox`) or outside it, each with its
/// position: items at their offset in the area, blocks at their byte address in the image.
fn parts(
    tree: &Tree,
    plan: &Plan,
    shared: &SharedXattrs,
    in_metabox: bool,
) -> (Vec<PartAt>, Vec<PartAt>) {
    let mut items = Vec::new();
    let mut blocks = Vec::new();
    for (id, p) in plan.inodes.iter().enumerate() {
        if p.in_metabox != in_metabox {
            continue;
        }
        items.push((p.offset, Part::Item(Some(id))));
        let dir_or_symlink = matches!(tree.inodes[id].kind, Kind::Dir { .. } | Kind::Symlink(_));
        if dir_or_symlink && p.size > p.inline_len && p.fragment().is_none() {
            blocks.push((p.startblk as u64 * BLKSZ, Part::Block(id)));
        }
    }
    if !shared.bytes.is_empty() && plan.metabox_len.is_some() == in_metabox {
        items.push((plan.shared_offset, Part::Item(None)));
    }
    items.sort_unstable_by_key(|(offset, _)| *offset);
    blocks.sort_unstable_by_key(|(offset, _)| *offset);
    (items, blocks)
}

/// Encodes `parts` in order, [`PARTS_AT_ONCE`] at a time in parallel, and hands each to `put` in
/// that order.
fn encode_each(
    tree: &Tree,
    plan: &Plan,
    shared: &SharedXattrs,
    opts: &BuildOptions,
    parts: &[PartAt],
    mut put: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    for chunk in parts.chunks(PARTS_AT_ONCE) {
        let encoded: Vec<Vec<u8>> = chunk
            .par_iter()
            .with_min_len(256)
            .map(|&(_, part)| encode_part(tree, plan, shared, opts, part))
            .collect::<Result<_>>()?;
        for ((offset, _), bytes) in chunk.iter().zip(encoded) {
            put(*offset, &bytes)?;
        }
    }
    Ok(())
}

/// The data of a directory or symlink, whole.
fn dir_or_symlink_data(id: InodeId, tree: &Tree, plan: &Plan) -> Option<Vec<u8>> {
    match &tree.inodes[id].kind {
        Kind::Dir { .. } => Some(encode_dir(id, tree, plan)),
        Kind::Symlink(target) => Some(target.clone()),
        _ => None,
    }
}

/// Encodes one part: an inode's metadata item (core, xattrs, indexes, inline data), the shared
/// xattrs, or the blocks of a directory or symlink's data before its inline tail.
fn encode_part(
    tree: &Tree,
    plan: &Plan,
    shared: &SharedXattrs,
    opts: &BuildOptions,
    part: Part,
) -> Result<Vec<u8>> {
    let id = match part {
        Part::Item(None) => return Ok(shared.bytes.clone()),
        Part::Item(Some(id)) => id,
        Part::Block(id) => {
            let p = &plan.inodes[id];
            let mut data = dir_or_symlink_data(id, tree, plan).unwrap_or_default();
            data.truncate(data.len() - p.inline_len as usize);
            data.resize(fmt::round_up(data.len() as u64, BLKSZ) as usize, 0);
            return Ok(data);
        }
    };
    let shared_base_id = (plan.shared_offset / 4) as u32;
    let (inode, p) = (&tree.inodes[id], &plan.inodes[id]);
    let ibody = xattrs::encode_ibody(inode, shared, shared_base_id, opts.xattr_filter);
    let mut item = encode_inode(inode, p, plan, ibody.len() as u64);
    item.extend_from_slice(&ibody);
    if let Some(z) = p.zmap() {
        encode_zmap(&mut item, p, z);
        if !z.idata.is_empty() {
            item.extend_from_slice(&spill_of(plan).read(z.idata)?);
        }
    }
    if let Some(offset) = p.fragment() {
        item.resize(zmap_header_offset(p.isize(), p.ibody_len) as usize, 0);
        let header = fmt::fragment_inode_header(offset)
            .expect("fragment offsets are below 2^63 (the packed inode's size)");
        item.extend_from_slice(&header);
        item.resize(item.len() + fmt::Z_EROFS_FULL_INDEX_START as usize, 0);
    }
    if let Some(tail) = p.inline_bytes() {
        item.extend_from_slice(&spill_of(plan).read(tail)?);
    }
    if let Some(chunks) = p.chunks() {
        item.resize(
            crate::layout::ChunkPlan::map_offset(p.isize(), p.ibody_len) as usize,
            0,
        );
        for blk in &chunks.map {
            item.extend_from_slice(&blk.to_le_bytes());
        }
    }
    if p.inline_len > 0 {
        if let Some(data) = dir_or_symlink_data(id, tree, plan) {
            item.extend_from_slice(&data[data.len() - p.inline_len as usize..]);
        }
    }
    Ok(item)
}

fn spill_of(plan: &Plan) -> &crate::spill::Spill {
    plan.spill
        .as_ref()
        .expect("spilled inline data comes with the plan's spill")
}

/// Writes the metadata area (outside the metabox, if there is one) and the data of directories and
/// symlinks whose inodes are there, in offset order; returns the metadata hash.
pub(crate) fn write_metadata(
    file: &File,
    path: &Path,
    tree: &Tree,
    plan: &Plan,
    shared: &SharedXattrs,
    opts: &BuildOptions,
) -> Result<u128> {
    let (items, blocks) = parts(tree, plan, shared, false);
    // Directory blocks come after the metadata in uncompressed images and before it in compressed
    // ones: one stream in offset order.
    let mut all: Vec<PartAt> = items
        .into_iter()
        .map(|(offset, part)| (plan.meta_base + offset, part))
        .chain(blocks)
        .collect();
    all.sort_by_key(|(offset, _)| *offset);
    let mut stream = Stream::new(file, path, all.first().map_or(0, |p| p.0));
    encode_each(tree, plan, shared, opts, &all, |offset, bytes| {
        stream.put(offset, bytes)
    })?;
    stream.flush()?;
    Ok(stream.hash.digest128())
}

/// Encodes the metabox's data (its inodes and the shared xattrs) and writes the data blocks of its
/// directories and symlinks; returns the data and the hash of the blocks written.
pub(crate) fn metabox_data(
    file: &File,
    path: &Path,
    tree: &Tree,
    plan: &Plan,
    shared: &SharedXattrs,
    opts: &BuildOptions,
) -> Result<(Vec<u8>, u128)> {
    let len = plan.metabox_len.expect("a metabox was planned");
    let (items, blocks) = parts(tree, plan, shared, true);
    let mut data = vec![0u8; len as usize];
    encode_each(tree, plan, shared, opts, &items, |offset, bytes| {
        data[offset as usize..][..bytes.len()].copy_from_slice(bytes);
        Ok(())
    })?;
    let mut stream = Stream::new(file, path, blocks.first().map_or(0, |p| p.0));
    encode_each(tree, plan, shared, opts, &blocks, |offset, bytes| {
        stream.put(offset, bytes)
    })?;
    stream.flush()?;
    Ok((data, stream.hash.digest128()))
}

thread_local! {
    static COPY_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

pub(crate) use crate::seal::DataLeaves;

/// Where file data goes, and the hashers that run over it while it passes through memory.
pub(crate) struct Copier<'a> {
    /// Where file data is read.
    pub source: &'a dyn Source,
    /// The tree the files are of.
    pub tree: &'a Tree,
    pub out: &'a File,
    pub out_path: &'a Path,
    /// Level-0 hashes of image blocks, when the seal's blocks are the image's.
    pub image_hasher: Option<&'a BlockHasher>,
    /// Where those hashes go (there when `image_hasher` is).
    pub leaves: Option<&'a DataLeaves>,
    /// Per-file fs-verity digests (4 KiB blocks, no salt); shares the image hashes when its parameters
    /// are the image hasher's.
    pub file_hasher: Option<&'a BlockHasher>,
    /// Byte offset of the metadata area, where inline tails are (inode offsets count from it).
    pub meta_base: u64,
}

/// The hashers [`write_image`] runs over file data as it copies it.
#[derive(Clone, Copy, Default)]
pub(crate) struct Hashers<'a> {
    /// Level-0 hashes of image blocks (the seal's blocks must be the image's).
    pub image: Option<&'a BlockHasher>,
    /// Where those hashes go (there when `image` is).
    pub leaves: Option<&'a DataLeaves>,
    /// Per-file fs-verity digests.
    pub file: Option<&'a BlockHasher>,
}

/// Per-file fs-verity digests by inode id, kept as their bytes: one digest-size slot per inode,
/// written in place (by parallel copies too), so a build of many files holds 32 bytes for each
/// (with SHA-256) rather than a [`Digest`] and its nid, twice over while they are collected.
pub(crate) struct FileDigests {
    /// Their algorithm; `None` when the build makes no per-file digests.
    alg: Option<HashAlg>,
    bytes: Vec<u8>,
    /// Which slots hold a digest.
    set: Vec<bool>,
}

impl FileDigests {
    /// Empty slots for `inodes` inodes, with the file hasher's algorithm (none without one).
    pub(crate) fn new(hasher: Option<&BlockHasher>, inodes: usize) -> Self {
        let alg = hasher.map(|h| h.params().alg());
        let size = alg.map_or(0, HashAlg::digest_size);
        Self {
            alg,
            bytes: vec![0; inodes * size],
            set: vec![false; if alg.is_some() { inodes } else { 0 }],
        }
    }

    fn size(&self) -> usize {
        self.alg.map_or(0, HashAlg::digest_size)
    }

    /// Records inode `id`'s digest.
    pub(crate) fn put(&mut self, id: usize, digest: &Digest) {
        let size = self.size();
        debug_assert_eq!(Some(digest.alg()), self.alg);
        self.bytes[id * size..(id + 1) * size].copy_from_slice(digest.as_bytes());
        self.set[id] = true;
    }

    /// The slots, one per inode, to fill in parallel ([`Slot::put`]); none without a hasher.
    fn slots_mut(&mut self) -> impl IndexedParallelIterator<Item = Slot<'_>> {
        let size = self.size().max(1);
        self.bytes
            .par_chunks_mut(size)
            .zip(self.set.par_iter_mut())
            .map(|(bytes, set)| Slot { bytes, set })
    }

    /// The algorithm and the ids of the inodes that have a digest, in order; `None` without a
    /// hasher.
    pub(crate) fn ids(&self) -> Option<(HashAlg, impl Iterator<Item = usize> + '_)> {
        let ids = (self.set.iter().enumerate()).filter_map(|(id, &set)| set.then_some(id));
        Some((self.alg?, ids))
    }

    /// Inode `id`'s digest (zeros if it has none).
    pub(crate) fn get(&self, id: usize) -> &[u8] {
        let size = self.size();
        &self.bytes[id * size..(id + 1) * size]
    }
}

/// One inode's slot of [`FileDigests`].
struct Slot<'a> {
    bytes: &'a mut [u8],
    set: &'a mut bool,
}

impl Slot<'_> {
    fn put(self, digest: &Digest) {
        self.bytes.copy_from_slice(digest.as_bytes());
        *self.set = true;
    }
}

/// Hashes to collect while copying one range.
struct Leaves<'v> {
    image: Option<&'v mut Vec<u8>>,
    file: Option<&'v mut RootHasher>,
}

fn hash_append(hasher: &BlockHasher, data: &[u8], out: &mut Vec<u8>) {
    let at = out.len();
    out.resize(
        at + data.len().div_ceil(hasher.params().block_size()) * hasher.params().digest_size(),
        0,
    );
    hasher.hash_blocks_into(data, &mut out[at..]);
}

impl Copier<'_> {
    fn shares_hashes(&self) -> bool {
        matches!((self.image_hasher, self.file_hasher), (Some(i), Some(f)) if i.params() == f.params())
    }

    /// Copies `len` bytes of `src` at `src_off` to the image at `dst_off` through a bounded per-thread
    /// buffer, appending the hashes `leaves` asks for: image hashes need a block-aligned `dst_off` (the
    /// last block is zero-padded, as the image holds it); file hashes a block-aligned `src_off`.
    /// (`copy_file_range` measured no faster on the `linux` corpus, and the seal needs the bytes.)
    fn copy(
        &self,
        src: &mut dyn SourceFile,
        src_off: u64,
        dst_off: u64,
        len: u64,
        mut leaves: Leaves<'_>,
    ) -> Result<()> {
        const BUF: usize = 1 << 20;
        let share = self.shares_hashes();
        COPY_BUF.with_borrow_mut(|buf| {
            buf.resize(BUF.min(len as usize), 0);
            let (mut so, mut d_o, mut left) = (src_off, dst_off, len);
            while left > 0 {
                let n = (left as usize).min(buf.len());
                src.read_at(&mut buf[..n], so)?;
                let (data, got) = (&buf[..n], n);
                self.out
                    .write_all_at(data, d_o)
                    .map_err(|e| BuildError::io(self.out_path, "write image", e))?;
                let mut image_part = None;
                if let (Some(h), Some(out)) = (self.image_hasher, leaves.image.as_deref_mut()) {
                    let at = out.len();
                    hash_append(h, data, out);
                    image_part = Some(at);
                }
                if let Some(out) = leaves.file.as_deref_mut() {
                    match (share, image_part, leaves.image.as_deref()) {
                        (true, Some(at), Some(image)) => out.push_leaves(&image[at..], got as u64),
                        _ => out.update(data),
                    }
                }
                (so, d_o, left) = (so + got as u64, d_o + got as u64, left - got as u64);
            }
            Ok(())
        })
    }

    /// Copies one regular file's data to its planned blocks and inline tail, checking it did not change.
    /// Stores the level-0 image hashes of its blocks ([`Copier::leaves`]); returns its own fs-verity
    /// digest.
    ///
    /// `known` is its content digest (by the file hasher, if there is one) when another file has
    /// the same: a file whose blocks are another's ([`InodePlan::blocks_of`]) has only its inline
    /// tail written and `known` as its digest; one whose blocks others share must still hash to it.
    pub(crate) fn copy_file(
        &self,
        inode: &Inode,
        p: &InodePlan,
        known: Option<&Digest>,
    ) -> Result<Option<Digest>> {
        let Kind::File(f) = &inode.kind else {
            return Ok(None);
        };
        let mut src = open_file(self.source, self.tree, inode)?;
        if p.blocks_of.is_some() {
            if p.inline_len > 0 {
                let leaves = Leaves {
                    image: None,
                    file: None,
                };
                let tail_at = f.size - p.inline_len;
                self.copy(
                    &mut *src,
                    tail_at,
                    self.meta_base + p.inline_offset(),
                    p.inline_len,
                    leaves,
                )?;
            }
            src.finish()?;
            let known = known.expect("files sharing blocks have content digests");
            return Ok(self.file_hasher.map(|_| *known));
        }
        // The file's own digest, streamed: a few KiB whatever its size, its holes in
        // logarithmic time (a 1 TiB hole would be 2^28 leaf hashes).
        let mut file_leaves = self.file_hasher.map(|h| RootHasher::new(h.params()));
        let run = |src: &mut dyn SourceFile,
                   src_off: u64,
                   blk: u64,
                   len: u64,
                   file_leaves: Option<&mut RootHasher>|
         -> Result<()> {
            let mut leaves = self.image_hasher.map(|_| Vec::new());
            self.copy(
                src,
                src_off,
                blk * BLKSZ,
                len,
                Leaves {
                    image: leaves.as_mut(),
                    file: file_leaves,
                },
            )?;
            if let (Some(l), Some(store)) = (leaves, self.leaves) {
                store.put(blk, &l)?;
            }
            Ok(())
        };
        if let Some(chunks) = p.chunks() {
            let cs = 1u64 << chunks.chunkbits;
            for (c, &blk) in chunks.map.iter().enumerate() {
                let start = c as u64 * cs;
                let len = cs.min(f.size - start);
                if blk != fmt::EROFS_NULL_ADDR {
                    run(&mut *src, start, blk as u64, len, file_leaves.as_mut())?;
                } else if let Some(out) = file_leaves.as_mut() {
                    // A hole reads as zeros.
                    out.update_zeros(len);
                }
            }
        } else {
            let block_bytes = (p.full_blocks() * BLKSZ).min(f.size);
            if block_bytes > 0 {
                run(
                    &mut *src,
                    0,
                    p.startblk as u64,
                    block_bytes,
                    file_leaves.as_mut(),
                )?;
            }
            if p.inline_len > 0 {
                let leaves = Leaves {
                    image: None,
                    file: file_leaves.as_mut(),
                };
                self.copy(
                    &mut *src,
                    block_bytes,
                    self.meta_base + p.inline_offset(),
                    p.inline_len,
                    leaves,
                )?;
            }
        }
        src.finish()?;
        let digest = file_leaves.map(|r| {
            debug_assert_eq!(r.data_size(), f.size, "{}", self.tree.path(inode).display());
            r.finish()
        });
        // What was copied is what the files sharing it were found equal to.
        if let (Some(d), Some(k)) = (&digest, known) {
            if d != k {
                return Err(BuildError::Changed {
                    path: self.tree.path(inode),
                    what: "content".into(),
                });
            }
        }
        Ok(digest)
    }
}

/// Writes the metadata and file data of an uncompressed image to `file` (already sized); the
/// superblock is the caller's ([`finish`], after the per-file digest table). Returns the metadata's
/// hash (for a derived UUID) and the per-file digests; the data's level-0 hashes go to
/// `hashers.leaves`.
#[allow(
    clippy::too_many_arguments,
    reason = "each is a distinct input of the step"
)]
pub(crate) fn write_image(
    out: Target<'_>,
    source: &dyn Source,
    tree: &Tree,
    plan: &Plan,
    shared: &SharedXattrs,
    opts: &BuildOptions,
    hashers: Hashers<'_>,
    progress: &dyn Progress,
) -> Result<(u128, FileDigests)> {
    let (file, path) = (out.file, out.path);
    let meta_hash = write_metadata(file, path, tree, plan, shared, opts)?;
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
    progress.begin("copying file data", Some(total));
    let copier = Copier {
        source,
        tree,
        out: file,
        out_path: path,
        image_hasher: hashers.image,
        leaves: hashers.leaves,
        file_hasher: hashers.file,
        meta_base: plan.meta_base,
    };
    let copy = |id: usize, inode: &Inode, p: &InodePlan| -> Result<Option<Digest>> {
        let Kind::File(f) = &inode.kind else {
            return Ok(None);
        };
        let digest = copier.copy_file(inode, p, plan.alike.get(id).as_ref())?;
        progress.advance(f.size);
        Ok(digest)
    };
    let mut digests = FileDigests::new(hashers.file, tree.inodes.len());
    if hashers.file.is_some() {
        // Each file's digest straight into its slot: nothing collected, nothing sorted.
        (tree.inodes.par_iter())
            .zip(plan.inodes.par_iter())
            .zip(digests.slots_mut())
            .enumerate()
            .try_for_each(|(id, ((inode, p), slot))| {
                if let Some(d) = copy(id, inode, p)? {
                    slot.put(&d);
                }
                Ok::<_, BuildError>(())
            })?;
    } else {
        (tree.inodes.par_iter())
            .zip(plan.inodes.par_iter())
            .enumerate()
            .try_for_each(|(id, (inode, p))| copy(id, inode, p).map(drop))?;
    }
    progress.end();
    Ok((meta_hash, digests))
}

/// Writes the superblock (and compression records) and its checksum, last; returns the UUID used.
pub(crate) fn finish(
    out: Target<'_>,
    tree: &Tree,
    plan: &Plan,
    opts: &BuildOptions,
    meta_hash: u128,
) -> Result<[u8; 16]> {
    let (file, path) = (out.file, out.path);
    let uuid = match &opts.uuid {
        UuidChoice::Fixed(u) => *u,
        UuidChoice::Random => {
            random_uuid().map_err(|e| BuildError::io("/dev/urandom", "read", e))?
        }
        UuidChoice::Derived => {
            let mut u = meta_hash.to_le_bytes();
            u[6] = (u[6] & 0x0f) | 0x80; // version 8 (custom)
            u[8] = (u[8] & 0x3f) | 0x80; // RFC 4122 variant
            u
        }
    };
    let mut volume_name = [0u8; 16];
    volume_name[..opts.label.len()].copy_from_slice(&opts.label);
    let mut compat = fmt::EROFS_FEATURE_COMPAT_SB_CHKSUM | fmt::EROFS_FEATURE_COMPAT_MTIME;
    if opts.xattr_filter && tree.inodes.iter().any(|i| !i.xattrs.is_empty()) {
        compat |= fmt::EROFS_FEATURE_COMPAT_XATTR_FILTER;
    }
    let mut incompat = if plan.chunked {
        fmt::EROFS_FEATURE_INCOMPAT_CHUNKED_FILE
    } else {
        0
    };
    let zmaps: Vec<&ZPlan> = plan.inodes.iter().filter_map(|p| p.zmap()).collect();
    let mut algs = 0u16;
    let mut max_blocks = 1u32;
    for z in &zmaps {
        algs |= 1 << z.alg;
        max_blocks = max_blocks.max(z.extents.iter().map(|e| e.blocks).max().unwrap_or(1));
        if !z.idata.is_empty() {
            incompat |= fmt::EROFS_FEATURE_INCOMPAT_ZTAILPACKING;
        }
    }
    if zmaps.iter().any(|z| z.extents_48bit.is_some()) {
        incompat |= fmt::EROFS_FEATURE_INCOMPAT_48BIT;
    }
    if plan.packed.is_some() {
        incompat |= fmt::EROFS_FEATURE_INCOMPAT_FRAGMENTS;
    }
    // A metabox: the root's nid (with the metabox bit) needs the 64-bit root nid of 48BIT, the
    // superblock's first extension slot names the metabox inode, and the shared xattrs are in it.
    let metabox_nid = plan.metabox.map(|id| plan.inodes[id].nid());
    let sb_extslots = metabox_nid.map_or(0, |_| 1u8);
    if metabox_nid.is_some() {
        incompat |= fmt::EROFS_FEATURE_INCOMPAT_METABOX | fmt::EROFS_FEATURE_INCOMPAT_48BIT;
        compat |= fmt::EROFS_FEATURE_COMPAT_SHARED_EA_IN_METABOX;
    }
    let sb_size = 128 + 16 * sb_extslots as u64;
    let mut u1 = 0u16;
    if !zmaps.is_empty() {
        // Compressed data is right-aligned; every algorithm used has a configuration record.
        incompat |=
            fmt::EROFS_FEATURE_INCOMPAT_ZERO_PADDING | fmt::EROFS_FEATURE_INCOMPAT_COMPR_CFGS;
        u1 = algs;
        let mut records = Vec::new();
        for alg in 0..16u8 {
            if algs & (1 << alg) == 0 {
                continue;
            }
            records.resize(fmt::round_up(records.len() as u64, 4) as usize, 0);
            let payload: Vec<u8> = match alg {
                fmt::Z_EROFS_COMPRESSION_LZ4 => fmt::Lz4Cfgs {
                    max_distance: u16::MAX.into(),
                    max_pclusterblks: (max_blocks as u16).into(),
                    reserved: [0; 10],
                }
                .as_bytes()
                .to_vec(),
                fmt::Z_EROFS_COMPRESSION_LZMA => fmt::LzmaCfgs {
                    // The dictionary every MicroLZMA pcluster was encoded with.
                    dict_size: opts
                        .compress
                        .map_or(fmt::Z_EROFS_LZMA_MAX_DICT_SIZE, |c| c.lzma_dict_size())
                        .into(),
                    format: fmt::Z_EROFS_LZMA_FORMAT_MICROLZMA.into(),
                    reserved: [0; 8],
                }
                .as_bytes()
                .to_vec(),
                fmt::Z_EROFS_COMPRESSION_DEFLATE => fmt::DeflateCfgs {
                    windowbits: crate::compress::DEFLATE_WINDOW_BITS,
                    reserved: [0; 5],
                }
                .as_bytes()
                .to_vec(),
                _ => {
                    debug_assert_eq!(alg, fmt::Z_EROFS_COMPRESSION_ZSTD);
                    fmt::ZstdCfgs {
                        format: 0,
                        windowlog: crate::compress::ZSTD_WINDOW_LOG - 10,
                        reserved: [0; 4],
                    }
                    .as_bytes()
                    .to_vec()
                }
            };
            records.extend_from_slice(&(payload.len() as u16).to_le_bytes());
            records.extend_from_slice(&payload);
        }
        file.write_all_at(&records, fmt::EROFS_SUPER_OFFSET + sb_size)
            .map_err(|e| BuildError::io(path, "write compression records", e))?;
    }
    if let Some(nid) = metabox_nid {
        let ext = fmt::SuperBlockExt1 {
            metabox_nid: nid.into(),
            reserved3: [0; 8],
        };
        file.write_all_at(ext.as_bytes(), fmt::EROFS_SUPER_OFFSET + 128)
            .map_err(|e| BuildError::io(path, "write superblock", e))?;
    }
    let root_nid = plan.inodes[0].nid();
    let sb = SuperBlock {
        magic: fmt::EROFS_SUPER_MAGIC_V1.into(),
        feature_compat: compat.into(),
        blkszbits: fmt::BLKSZBITS,
        sb_extslots,
        // (With 48BIT and `rootnid_8b` set, this field holds the high bits of `blocks`: 0.)
        root_nid: (if metabox_nid.is_some() {
            0
        } else {
            root_nid as u16
        })
        .into(),
        rootnid_8b: (if metabox_nid.is_some() { root_nid } else { 0 }).into(),
        inos: (tree.inodes.len() as u64).into(),
        epoch: plan.epoch.into(),
        fixed_nsec: plan.fixed_nsec.into(),
        blocks: (plan.total_blocks as u32).into(),
        uuid,
        volume_name,
        feature_incompat: incompat.into(),
        u1: u1.into(),
        meta_blkaddr: ((plan.meta_base / BLKSZ) as u32).into(),
        // The shared xattrs: at the start of the metadata area, or of the metabox's data.
        xattr_blkaddr: (if metabox_nid.is_some() {
            0
        } else {
            (plan.meta_base / BLKSZ) as u32
        })
        .into(),
        packed_nid: plan.packed.map_or(0, |id| plan.inodes[id].nid()).into(),
        ..Default::default()
    };
    let io_err = |op| move |e| BuildError::io(path, op, e);
    file.write_all_at(sb.as_bytes(), fmt::EROFS_SUPER_OFFSET)
        .map_err(io_err("write superblock"))?;
    // The checksum covers the rest of block 0 (inodes, tails), so it is computed from the file last.
    let mut region = vec![0u8; fmt::superblock_checksum_len(fmt::BLKSZBITS)];
    file.read_exact_at(&mut region, fmt::EROFS_SUPER_OFFSET)
        .map_err(io_err("read back block 0"))?;
    let crc = fmt::superblock_checksum(&region);
    file.write_all_at(&crc.to_le_bytes(), fmt::EROFS_SUPER_OFFSET + 4)
        .map_err(io_err("write checksum"))?;
    Ok(uuid)
}

fn random_uuid() -> io::Result<[u8; 16]> {
    use std::io::Read;
    let mut u = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut u)?;
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    Ok(u)
}
