//! What each block of an image holds, as its reader maps it: the data of a file (one the update
//! changes or adds, or one it keeps), a directory's blocks, the packed inode (fragments: small
//! files and tails packed together, and compressed directories), the metabox (compressed
//! inodes), or the rest (superblock, inodes, inline tails, xattrs, the per-file digest table).
//! [`regions`] gives it per block, so that what an update fetches can be told apart by where it
//! comes from (`sealfs diff --regions`, bench/delta_layouts.py).

use crate::FileChanges;
use sealfs_reader::{Extent, ExtentKind, FileType, Inode, OpenedImage, Visit, WalkEvent};
use std::collections::HashSet;
use std::sync::Arc;

/// What a block of an image holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Region {
    /// The data of regular files the update does not change.
    KeptFiles,
    /// The data of regular files the update changes or adds.
    ChangedFiles,
    /// Directory blocks.
    Directories,
    /// The packed inode's data (fragments, tails, compressed directories).
    Packed,
    /// The metabox's data (compressed inodes and shared xattrs).
    Metabox,
    /// Everything else: superblock, inodes, inline tails, xattrs, the per-file digest table.
    Metadata,
}

impl Region {
    /// Every region, in the order reports list them.
    pub const ALL: [Region; 6] = [
        Region::KeptFiles,
        Region::ChangedFiles,
        Region::Directories,
        Region::Packed,
        Region::Metabox,
        Region::Metadata,
    ];

    /// Its name in reports (a JSON key too).
    pub fn name(self) -> &'static str {
        match self {
            Region::KeptFiles => "kept_files",
            Region::ChangedFiles => "changed_files",
            Region::Directories => "directories",
            Region::Packed => "packed",
            Region::Metabox => "metabox",
            Region::Metadata => "metadata",
        }
    }
}

/// The region of each block (of `block_size` bytes) of `image`'s EROFS data; `changes` (against
/// the old version) tells changed and added files from kept ones (without it every file counts as
/// kept). A block shared by several regions (a block of inodes with an inline tail, the last
/// block of a packed pcluster) counts as the first one met: files, then directories, then the
/// packed inode and the metabox.
pub fn regions(
    image: &OpenedImage,
    changes: Option<&FileChanges>,
    block_size: u64,
) -> Result<Vec<Region>, String> {
    let blocks = image.erofs_length.div_ceil(block_size) as usize;
    let mut out = vec![Region::Metadata; blocks];
    let mut set = vec![false; blocks];
    let changed: HashSet<&[u8]> = changes
        .map(|c| {
            c.changed
                .iter()
                .chain(&c.added)
                .map(Vec::as_slice)
                .collect()
        })
        .unwrap_or_default();
    // A path is changed when it or a directory above it is in the list (an added directory is
    // listed alone).
    let is_changed = |path: &[u8]| {
        changed.contains(path)
            || path
                .iter()
                .enumerate()
                .any(|(i, &c)| c == b'/' && changed.contains(&path[..i]))
    };
    let mut mark = |inode: &Inode, region: Region| -> Result<(), String> {
        for r in image.image.file_storage(inode).map_err(|e| e.to_string())? {
            let (a, b) = (r.start / block_size, r.end.div_ceil(block_size));
            for blk in a..b.min(blocks as u64) {
                if !set[blk as usize] {
                    set[blk as usize] = true;
                    out[blk as usize] = region;
                }
            }
        }
        Ok(())
    };
    let root = image.image.root().map_err(|e| e.to_string())?;
    mark(&root, Region::Directories)?;
    image
        .image
        .walk(&root, b"", &mut |event| -> Result<Visit, String> {
            match event {
                WalkEvent::Entry(e) => {
                    match e.inode.file_type() {
                        FileType::Regular if is_changed(e.path) => {
                            mark(e.inode, Region::ChangedFiles)?
                        }
                        FileType::Regular => mark(e.inode, Region::KeptFiles)?,
                        FileType::Directory => mark(e.inode, Region::Directories)?,
                        _ => {}
                    }
                    Ok(Visit::Continue)
                }
                WalkEvent::Error { error, .. } => Err(error.to_string()),
                WalkEvent::Dir { .. } => Ok(Visit::Continue),
            }
        })?;
    let sb = image.image.superblock();
    let special = [
        (sb.packed_nid, Region::Packed),
        (sb.metabox_nid.unwrap_or(0), Region::Metabox),
    ];
    for (nid, region) in special {
        if nid != 0 {
            let inode = image.image.inode(nid).map_err(|e| e.to_string())?;
            mark(&inode, region)?;
        }
    }
    Ok(out)
}

/// Blocks per region, and of them those in `fetch` (runs of block numbers): `(region, blocks,
/// fetched)`, every region listed.
pub fn count_by_region(
    regions: &[Region],
    fetch: &[std::ops::Range<u64>],
) -> Vec<(Region, u64, u64)> {
    let mut fetched = vec![false; regions.len()];
    for r in fetch {
        for b in r.clone() {
            if let Some(f) = fetched.get_mut(b as usize) {
                *f = true;
            }
        }
    }
    Region::ALL
        .iter()
        .map(|&region| {
            let of = regions.iter().enumerate().filter(|(_, r)| **r == region);
            let (n, f) = of.fold((0, 0), |(n, f), (b, _)| (n + 1, f + u64::from(fetched[b])));
            (region, n, f)
        })
        .collect()
}

/// What `sealfs build --like` keeps of an earlier image (see [`sealfs_builder::Like`]): every
/// path's inode offset (its nid, without the metabox bit, × 32), for files and directories whose
/// data is one run of whole blocks (an uncompressed image) that run, for files packed whole into
/// the packed inode where they start there, its epoch, and its packed inode's runs of pclusters
/// ([`packed_runs`]), which a build with pieces may keep byte for byte, read from `image` then.
/// Read through the reader, so every block it reads, then or later, is checked as `image` was
/// opened.
pub fn like_image(image: Arc<OpenedImage>) -> Result<sealfs_builder::Like, String> {
    let bs = image.image.block_size();
    let item = |path: &[u8], inode: &Inode| -> Result<sealfs_builder::LikeItem, String> {
        let ranges = image
            .image
            .file_storage(inode)
            .map_err(|e| format!("/{}: {e}", sealfs_text::escape(path)))?;
        // One run of whole blocks (the inline tail is not in it).
        let data_blocks = match ranges.as_slice() {
            [r] if r.start % bs == 0 => Some(r.start / bs..r.end / bs),
            _ => None,
        };
        // Its bytes of data in one run: each range where the one before ended.
        let data_span = match (ranges.first(), ranges.last()) {
            (Some(first), Some(last)) if ranges.windows(2).all(|w| w[0].end == w[1].start) => {
                Some(first.start..last.end)
            }
            _ => None,
        };
        // A whole fragment: one extent of the packed inode, from the file's first byte to its last.
        let packed_offset = match image.image.map_range(inode, 0, inode.size()) {
            Ok(extents) => match extents.as_slice() {
                [Extent {
                    kind:
                        ExtentKind::Fragment {
                            offset,
                            extent_start: 0,
                            extent_len,
                        },
                    ..
                }] if *extent_len == inode.size() => Some(*offset),
                _ => None,
            },
            Err(e) => return Err(format!("/{}: {e}", sealfs_text::escape(path))),
        };
        Ok(sealfs_builder::LikeItem {
            path: path.to_vec(),
            meta_offset: (inode.nid() & sealfs_format::EROFS_DIRENT_NID_MASK)
                .saturating_mul(1 << sealfs_format::INODE_SLOT_BITS),
            data_blocks,
            data_span,
            size: inode.size(),
            packed_offset,
        })
    };
    let root = image.image.root().map_err(|e| e.to_string())?;
    let mut items = vec![item(b"", &root)?];
    image
        .image
        .walk(&root, b"", &mut |event| -> Result<Visit, String> {
            match event {
                WalkEvent::Entry(e) => {
                    items.push(item(e.path, e.inode)?);
                    Ok(Visit::Continue)
                }
                WalkEvent::Error { error, .. } => Err(error.to_string()),
                WalkEvent::Dir { .. } => Ok(Visit::Continue),
            }
        })?;
    let sb = image.image.superblock();
    let meta_first = sb.meta_blkaddr == 0;
    let packed: Vec<(u64, u64)> = (items.iter())
        .filter_map(|i| i.packed_offset.map(|at| (at, i.size)))
        .collect();
    let like = sealfs_builder::Like::new(items, meta_first).with_epoch((sb.epoch, sb.fixed_nsec));
    Ok(match packed_runs(&image, packed)? {
        Some((alg, runs, inode)) => {
            let c = &sb.compr;
            let window = match alg {
                sealfs_format::Z_EROFS_COMPRESSION_LZ4 => Some(0),
                sealfs_format::Z_EROFS_COMPRESSION_LZMA => c.lzma_dict_size.map(u64::from),
                sealfs_format::Z_EROFS_COMPRESSION_DEFLATE => {
                    c.deflate_windowbits.map(|b| 1 << b.min(63))
                }
                sealfs_format::Z_EROFS_COMPRESSION_ZSTD => {
                    c.zstd_windowlog.map(|l| 1 << (l as u32 + 10).min(63))
                }
                _ => None,
            };
            match window {
                Some(w) => {
                    like.with_packed_runs((alg, w), runs, Arc::new(Earlier { image, inode }))
                }
                None => like,
            }
        }
        None => like,
    })
}

/// The runs of `image`'s packed inode that a build may keep byte for byte
/// ([`sealfs_builder::PackedRun`]), its algorithm, and the packed inode; `files`: where the
/// whole fragments are (offset, size). A run goes from one block boundary of the packed inode
/// to the next that no file crosses; it holds only pclusters of one algorithm (or raw), each
/// stored in whole blocks right after the one before, none inline. `None` when the image has no
/// packed inode, or its pclusters are of several algorithms.
fn packed_runs(
    image: &OpenedImage,
    mut files: Vec<(u64, u64)>,
) -> Result<Option<(u8, Vec<sealfs_builder::PackedRun>, Inode)>, String> {
    use sealfs_builder::{PackedExtent, PackedRun};
    use sealfs_reader::Compression;
    let sb = image.image.superblock();
    if sb.packed_nid == 0 || files.is_empty() {
        return Ok(None);
    }
    let bs = image.image.block_size();
    let packed = image
        .image
        .inode(sb.packed_nid)
        .map_err(|e| e.to_string())?;
    // Offsets a file crosses (its start excepted): past the start of a file before them and
    // before the furthest end of those.
    files.sort_unstable();
    let reach: Vec<u64> = (files.iter())
        .scan(0u64, |r, &(o, n)| {
            *r = (*r).max(o.saturating_add(n));
            Some(*r)
        })
        .collect();
    let crossed = |at: u64| {
        let i = files.partition_point(|&(o, _)| o < at);
        i > 0 && reach[i - 1] > at
    };
    let mut alg = None;
    let mut runs = Vec::new();
    // The run being gathered; `None` after a pcluster no run may hold, until the next boundary.
    let mut run: Option<Vec<PackedExtent>> = Some(Vec::new());
    let mut off = 0;
    while off < packed.size() {
        let x = image.image.map(&packed, off).map_err(|e| e.to_string())?;
        if x.logical % bs == 0 && !crossed(x.logical) {
            if let Some(done) = run.take().filter(|r| !r.is_empty()) {
                runs.push(PackedRun { extents: done });
            }
            run = Some(Vec::new());
        }
        let ExtentKind::Compressed {
            physical,
            plen,
            algorithm,
            inline,
            ..
        } = x.kind
        else {
            return Ok(None);
        };
        let plain = matches!(algorithm, Compression::Plain);
        let ok = !inline && physical % bs == 0 && algorithm != Compression::Interlaced && {
            let id = algorithm.id();
            plain || alg.get_or_insert(id) == &id
        };
        let stored = physical..physical.saturating_add(plen.div_ceil(bs).saturating_mul(bs));
        run = run.filter(|r| {
            ok && r
                .last()
                .is_none_or(|p: &PackedExtent| p.physical.end == stored.start)
        });
        if let Some(r) = &mut run {
            r.push(PackedExtent {
                start: x.logical,
                len: x.length,
                plain,
                physical: stored,
            });
        }
        let next = x.logical.saturating_add(x.length);
        if next <= off {
            return Err(format!(
                "the packed inode's extent at {:#x} ends at {next:#x}, before {off:#x}",
                x.logical
            ));
        }
        off = next;
    }
    // (The last run ends where the packed inode does, which is no block boundary but by chance:
    // it is kept only then.)
    if let Some(done) = run.filter(|r| !r.is_empty() && off % bs == 0) {
        runs.push(PackedRun { extents: done });
    }
    Ok(alg.flatten().map(|alg| (alg, runs, packed)))
}

/// An earlier image's bytes, read through its reader (each block checked as it was opened).
#[derive(Debug)]
struct Earlier {
    image: Arc<OpenedImage>,
    inode: Inode,
}

impl sealfs_builder::EarlierBytes for Earlier {
    fn packed(&self, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; (range.end - range.start) as usize];
        let mut done = 0;
        while done < buf.len() {
            let n = (self.image.image)
                .read(&self.inode, range.start + done as u64, &mut buf[done..])
                .map_err(std::io::Error::other)?;
            if n == 0 {
                return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
            }
            done += n;
        }
        Ok(buf)
    }

    fn stored(&self, range: std::ops::Range<u64>) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; (range.end - range.start) as usize];
        (self.image.image)
            .read_raw(range.start, &mut buf)
            .map_err(std::io::Error::other)?;
        Ok(buf)
    }
}
