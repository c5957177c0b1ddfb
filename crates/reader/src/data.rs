//! File data: **map, then read** (the kernel's `erofs_map_blocks`, then I/O).
//!
//! [`Image::map`] turns a logical offset of an inode into an [`Extent`]: a logical range and where its
//! bytes are (blocks, inline after the inode, or nowhere: a hole) before any data is read. Reads then
//! copy from the physical ranges through the bounds-checked block cache; [`Image::read_direct`]'s
//! reads of at most 16 KiB (`SMALL_READ`) take whole blocks through the cluster cache, which keeps
//! them.
//!
//! Layouts:
//! - FLAT_PLAIN: `ceil(size / blksz)` blocks from `startblk`; the all-ones start block means no data
//!   (zeros).
//! - FLAT_INLINE: the same for all blocks but the last, whose `size % blksz` bytes follow the inode's
//!   xattrs and must not cross a block boundary.
//! - CHUNK_BASED: an array of 4-byte block-map entries or 8-byte chunk indexes at
//!   `round_up(iloc + isize + xattr_isize, unit)`, one per `1 << chunkbits` bytes; all-ones is a hole.
//! - COMPRESSED_FULL and COMPRESSED_COMPACT: [`crate::zmap`] maps an offset to its extent and
//!   pcluster ([`ExtentKind::Compressed`]) as the kernel's `z_erofs_map_blocks_fo` does; a read
//!   decodes each extent it overlaps, whole, through the cluster cache ([`crate::decompress`]),
//!   and copies the part it needs; an extent a read takes whole and nothing keeps
//!   ([`crate::Options::keep_passed_extents`] off, as on a FUSE mount) is decoded straight into
//!   the reader's buffer, without a copy. Only the extents overlapping `[offset, offset + len)` are
//!   mapped and decoded. A fragment extent ([`ExtentKind::Fragment`]) is read from the packed
//!   inode; reads of the packed inode decode whole extents (cached), which its other fragments
//!   then share.

use crate::cache::BlockRef;
use crate::error::{Error, Location, Result};
use crate::image::Image;
use crate::inode::{FileType, Inode};
use crate::zmap::Compression;
use sealfs_format::{
    DataLayout, EROFS_BLOCK_MAP_ENTRY_SIZE, EROFS_CHUNK_FORMAT_48BIT, EROFS_CHUNK_FORMAT_INDEXES,
    EROFS_FEATURE_INCOMPAT_DEVICE_TABLE, EROFS_FEATURE_INCOMPAT_FRAGMENTS, EROFS_NULL_ADDR,
};

/// [`Image::read_direct`]'s reads of uncompressed data of at most this many bytes (random reads)
/// keep the verified blocks they read in the cluster cache, as compressed reads keep their decoded
/// extents, so that reading them again neither reads nor hashes them; longer ones (streaming) read
/// straight into the caller's buffer.
const SMALL_READ: usize = 16 << 10;

/// Where the bytes of an [`Extent`] are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtentKind {
    /// In blocks, starting at absolute image byte `physical`.
    Mapped {
        /// Image byte offset of the extent's first byte.
        physical: u64,
    },
    /// Inline after the inode (the tail of a FLAT_INLINE inode), at absolute byte `physical`.
    Inline {
        /// Image byte offset of the extent's first byte.
        physical: u64,
    },
    /// Not stored: reads as zeros.
    Hole,
    /// Encoded in a pcluster (compressed layouts): the pcluster decodes to the whole extent
    /// `[extent_start, extent_start + extent_len)`; this [`Extent`] is that extent, or a part of
    /// it when [`Image::map_range`] clipped it.
    Compressed {
        /// Image byte offset of the pcluster (a block boundary, or inside a metadata block for
        /// an inline tail pcluster).
        physical: u64,
        /// Length of the pcluster in bytes.
        plen: u64,
        /// How the pcluster is encoded.
        algorithm: Compression,
        /// The pcluster is stored inline after the inode's index (ztailpacking).
        inline: bool,
        /// First logical byte of the whole extent.
        extent_start: u64,
        /// Decoded length of the whole extent.
        extent_len: u64,
    },
    /// A fragment (`FRAGMENTS`): the whole extent's bytes are those of the packed inode from
    /// byte `offset` on, read (and decoded) through it. Whole small files and the tails of
    /// others share the packed inode's pclusters.
    Fragment {
        /// Byte of the packed inode holding the whole extent's first byte.
        offset: u64,
        /// First logical byte of the whole extent.
        extent_start: u64,
        /// Length of the whole extent.
        extent_len: u64,
    },
}

/// A logical range of an inode's data and where it is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// First logical byte.
    pub logical: u64,
    /// Length in bytes. A chunk's mapping may run up to the end of its last block, past `i_size`.
    pub length: u64,
    /// Where the bytes are.
    pub kind: ExtentKind,
}

impl Extent {
    /// The part of this extent inside `[from, to)`; `from` must lie inside the extent.
    fn clip(self, from: u64, to: u64, at: Location) -> Result<Extent> {
        let end = self.logical.saturating_add(self.length);
        if from < self.logical || from >= end {
            return Err(Error::corrupted(
                format!(
                    "mapping {:#x}+{:#x} does not cover offset {from:#x}",
                    self.logical, self.length
                ),
                at,
            ));
        }
        let skip = from - self.logical;
        let kind = match self.kind {
            ExtentKind::Mapped { physical } => ExtentKind::Mapped {
                physical: physical + skip,
            },
            ExtentKind::Inline { physical } => ExtentKind::Inline {
                physical: physical + skip,
            },
            kind @ (ExtentKind::Hole
            | ExtentKind::Compressed { .. }
            | ExtentKind::Fragment { .. }) => kind,
        };
        Ok(Extent {
            logical: from,
            length: end.min(to) - from,
            kind,
        })
    }
}

impl Image {
    /// Maps logical byte `offset` (< size) of `inode`: the extent holding it, as the kernel's
    /// `erofs_map_blocks` computes it. For compressed inodes: the whole compressed extent holding
    /// `offset` (`z_erofs_map_blocks_fo` with the decoded length to the next extent), as an
    /// [`ExtentKind::Compressed`]; nothing is decoded.
    pub fn map(&self, inode: &Inode, offset: u64) -> Result<Extent> {
        let at = Location::nid(inode.nid);
        if offset >= inode.size {
            return Err(Error::InvalidArgument(format!(
                "offset {offset:#x} is past the end of nid {} ({} bytes)",
                inode.nid, inode.size
            )));
        }
        match inode.layout {
            DataLayout::FlatPlain | DataLayout::FlatInline => self.map_flat(inode, offset, at),
            DataLayout::ChunkBased => self.map_chunk(inode, offset, at),
            DataLayout::CompressedFull | DataLayout::CompressedCompact => {
                let z = self.zmap(inode, offset)?;
                if z.hole {
                    return Ok(Extent {
                        logical: z.logical,
                        length: z.length,
                        kind: ExtentKind::Hole,
                    });
                }
                if let Some(offset) = z.fragment {
                    return Ok(Extent {
                        logical: z.logical,
                        length: z.length,
                        kind: ExtentKind::Fragment {
                            offset,
                            extent_start: z.logical,
                            extent_len: z.length,
                        },
                    });
                }
                Ok(Extent {
                    logical: z.logical,
                    length: z.length,
                    kind: ExtentKind::Compressed {
                        physical: z.physical,
                        plen: z.plen,
                        algorithm: z.algorithm,
                        inline: z.inline,
                        extent_start: z.logical,
                        extent_len: z.length,
                    },
                })
            }
        }
    }

    fn map_flat(&self, inode: &Inode, la: u64, at: Location) -> Result<Extent> {
        let bits = self.sb.blkszbits;
        let bsz = self.block_size();
        let tail = inode.layout == DataLayout::FlatInline;
        let lastpos = (inode.nblocks() - tail as u64) << bits;
        if la < lastpos {
            let kind = match inode.startblk {
                None => ExtentKind::Hole,
                Some(startblk) => {
                    let physical = self
                        .blkpos(startblk, at)?
                        .checked_add(la)
                        .ok_or_else(|| Error::corrupted("data address overflows", at))?;
                    ExtentKind::Mapped { physical }
                }
            };
            return Ok(Extent {
                logical: la,
                length: lastpos - la,
                kind,
            });
        }
        // The inline tail [lastpos, size): right after the xattrs, inside one block.
        let start = inode.data_offset();
        let len = inode.size - lastpos;
        if (start & (bsz - 1)) + len > bsz {
            return Err(Error::corrupted(
                format!("inline data of {len} bytes crosses a block boundary"),
                at.with_offset(start).with_block(start >> bits),
            ));
        }
        Ok(Extent {
            logical: la,
            length: inode.size - la,
            kind: ExtentKind::Inline {
                physical: start + (la - lastpos),
            },
        })
    }

    fn map_chunk(&self, inode: &Inode, la: u64, at: Location) -> Result<Extent> {
        let indexes = inode.chunkformat & EROFS_CHUNK_FORMAT_INDEXES != 0;
        let unit = if indexes {
            8
        } else {
            EROFS_BLOCK_MAP_ENTRY_SIZE
        };
        let chunknr = la >> inode.chunkbits;
        let pos = inode
            .data_offset()
            .checked_next_multiple_of(unit)
            .and_then(|base| base.checked_add(chunknr.checked_mul(unit)?))
            .ok_or_else(|| Error::corrupted("chunk index position overflows", at))?;
        let at = at.with_offset(pos).with_block(pos >> self.sb.blkszbits);
        let mut entry = [0u8; 8];
        self.meta_read(pos, &mut entry[..unit as usize], at)?;
        let logical = chunknr << inode.chunkbits;
        let length = (1u64 << inode.chunkbits)
            .min((inode.size - logical).next_multiple_of(self.block_size()));
        let startblk = if indexes {
            let hi = u16::from_le_bytes([entry[0], entry[1]]) as u64;
            let device_id = u16::from_le_bytes([entry[2], entry[3]]);
            let lo = u32::from_le_bytes([entry[4], entry[5], entry[6], entry[7]]) as u64;
            let (startblk, null) = if inode.chunkformat & EROFS_CHUNK_FORMAT_48BIT != 0 {
                let b = lo | (hi << 32);
                (b, b == (1 << 48) - 1)
            } else {
                (lo, lo == EROFS_NULL_ADDR as u64)
            };
            if null {
                None
            } else {
                let extra = if self.sb.has_incompat(EROFS_FEATURE_INCOMPAT_DEVICE_TABLE) {
                    self.sb.extra_devices as u32
                } else {
                    0
                };
                let mask = ((extra + 1).next_power_of_two() - 1) as u16;
                if device_id & mask != 0 {
                    return Err(Error::unsupported(
                        format!("chunk on extra device {}", device_id & mask),
                        at,
                    ));
                }
                Some(startblk)
            }
        } else {
            let b = u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]);
            (b != EROFS_NULL_ADDR).then_some(b as u64)
        };
        let kind = match startblk {
            None => ExtentKind::Hole,
            Some(b) => ExtentKind::Mapped {
                physical: self.blkpos(b, at)?,
            },
        };
        Ok(Extent {
            logical,
            length,
            kind,
        })
    }

    /// The extents covering `[offset, offset + len)` of `inode`, clipped to that range and to the
    /// file size.
    pub fn map_range(&self, inode: &Inode, offset: u64, len: u64) -> Result<Vec<Extent>> {
        let at = Location::nid(inode.nid);
        let end = inode.size.min(offset.saturating_add(len));
        let mut out = Vec::new();
        let mut pos = offset;
        while pos < end {
            let e = self.map(inode, pos)?.clip(pos, end, at)?;
            pos += e.length;
            out.push(e);
        }
        Ok(out)
    }

    /// Reads data of `inode` at `offset` into `buf`; returns the number of bytes read, which is less
    /// than `buf.len()` only at the end of the file. Only regular files, directories and symlinks
    /// have data.
    pub fn read(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_keeping(inode, offset, buf, false)
    }

    /// [`Self::read`] for a reader whose reads nothing else keeps (a file opened with `O_DIRECT` on
    /// a mount: the kernel's page cache is bypassed): a read of at most 16 KiB of uncompressed data
    /// also keeps the verified blocks it reads in the cluster cache, so that reading them again
    /// neither reads nor hashes them. A block that fails to read or verify is never kept.
    pub fn read_direct(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.read_keeping(inode, offset, buf, buf.len() <= SMALL_READ)
    }

    /// [`Self::read`]; with `keep_flat`, uncompressed blocks through the cluster cache.
    fn read_keeping(
        &self,
        inode: &Inode,
        offset: u64,
        buf: &mut [u8],
        keep_flat: bool,
    ) -> Result<usize> {
        let at = Location::nid(inode.nid);
        if !matches!(
            inode.file_type(),
            FileType::Regular | FileType::Directory | FileType::Symlink
        ) {
            return Err(Error::InvalidArgument(format!(
                "nid {} is a {:?} and has no data",
                inode.nid,
                inode.file_type()
            )));
        }
        let end = inode.size.min(offset.saturating_add(buf.len() as u64));
        let compressed = matches!(
            inode.layout,
            DataLayout::CompressedFull | DataLayout::CompressedCompact
        );
        let mut pos = offset;
        while pos < end {
            if compressed {
                pos +=
                    self.read_compressed(inode, pos, end, &mut buf[(pos - offset) as usize..])?;
                continue;
            }
            let e = self.map(inode, pos)?.clip(pos, end, at)?;
            let dst = &mut buf[(pos - offset) as usize..][..e.length as usize];
            match e.kind {
                ExtentKind::Hole => dst.fill(0),
                ExtentKind::Mapped { physical } if keep_flat => {
                    self.read_flat_cached(physical, dst, at)?
                }
                ExtentKind::Mapped { physical } => self.blocks.read_bulk(physical, dst, at)?,
                ExtentKind::Inline { physical } => self.meta_read(physical, dst, at)?,
                ExtentKind::Compressed { .. } | ExtentKind::Fragment { .. } => {
                    return Err(Error::corrupted("compressed extent in a flat inode", at))
                }
            }
            pos += e.length;
        }
        Ok((end.saturating_sub(offset)) as usize)
    }

    /// Copies the bytes of the compressed extent holding `pos` (up to `end`) into `dst`, decoding
    /// the extent (or taking it from the cluster cache); returns the number of bytes copied.
    fn read_compressed(&self, inode: &Inode, pos: u64, end: u64, dst: &mut [u8]) -> Result<u64> {
        let at = Location::nid(inode.nid);
        let z = self.zmap(inode, pos)?;
        let zend = z.logical + z.length;
        let n = (zend.min(end) - pos) as usize;
        let from = (pos - z.logical) as usize;
        if z.hole {
            dst[..n].fill(0);
            return Ok(n as u64);
        }
        if let Some(offset) = z.fragment {
            self.read_fragment(inode, offset.saturating_add(from as u64), &mut dst[..n])?;
            return Ok(n as u64);
        }
        // Reads of the packed inode (and of the metabox) are reads of fragments (inodes), each a
        // small part of an extent that the ones around it will read too: decode (and cache) whole
        // extents, as a read from an extent's start does, so one decode serves all of them.
        let shared = (inode.nid == self.sb.packed_nid && self.has_fragments())
            || self.sb.metabox_nid == Some(inode.nid);
        let hint = if shared { 0 } else { from as u64 };
        let keep = shared || self.clusters.keep_passed || ((from + n) as u64) < z.length;
        if !keep && from == 0 {
            // The read takes the whole extent and nothing keeps it: decoded into `dst` itself.
            self.decode_extent_to(inode, &z, &mut dst[..n])?;
            return Ok(n as u64);
        }
        let data = self.decoded_extent(inode, &z, hint, (from + n) as u64, keep)?;
        let src = data.get(from..from + n).ok_or_else(|| {
            Error::corrupted(
                format!(
                    "extent at lcluster {} decoded to {} bytes, not {}",
                    z.head_lcn,
                    data.len(),
                    z.length
                ),
                at,
            )
        })?;
        dst[..n].copy_from_slice(src);
        self.clusters.recycle(data);
        Ok(n as u64)
    }

    /// Whether the image may hold fragments: `FRAGMENTS` with a packed inode.
    fn has_fragments(&self) -> bool {
        self.sb.has_incompat(EROFS_FEATURE_INCOMPAT_FRAGMENTS) && self.sb.packed_nid != 0
    }

    /// Fills `dst` with the bytes of the packed inode at `pos` (`z_erofs_read_fragment`): a
    /// fragment of `inode`. They are read like any file's data, so the packed inode's extents are
    /// decoded through the cluster cache and shared by every fragment in them.
    fn read_fragment(&self, inode: &Inode, pos: u64, dst: &mut [u8]) -> Result<()> {
        let at = Location::nid(inode.nid);
        if !self.has_fragments() {
            return Err(Error::corrupted(
                "a fragment, but no packed inode (FRAGMENTS, packed_nid)",
                at,
            ));
        }
        if inode.nid == self.sb.packed_nid {
            return Err(Error::corrupted(
                "the packed inode has a fragment itself",
                at,
            ));
        }
        let packed = self.inode(self.sb.packed_nid)?;
        let n = dst.len() as u64;
        if pos.checked_add(n).is_none_or(|end| end > packed.size) {
            return Err(Error::corrupted(
                format!(
                    "fragment {pos:#x}+{n:#x} runs past the end of the packed inode (nid {}, {} \
                     bytes)",
                    packed.nid, packed.size
                ),
                at,
            ));
        }
        let got = self.read(&packed, pos, dst)?;
        debug_assert_eq!(got as u64, n);
        Ok(())
    }

    /// Reads up to `max_len` bytes of `inode` from `offset` into a new vector (shorter at the end of
    /// the file). The allocation is bounded by `max_len`, never by the image.
    pub fn read_vec(&self, inode: &Inode, offset: u64, max_len: usize) -> Result<Vec<u8>> {
        let n = inode.size.saturating_sub(offset).min(max_len as u64) as usize;
        let mut v = vec![0u8; n];
        let got = self.read(inode, offset, &mut v)?;
        v.truncate(got);
        Ok(v)
    }

    /// Logical block `lblk` of `inode` as the kernel's page cache shows it: a whole block read as-is
    /// for block-mapped data, the inline tail followed by zeros, or zeros for a hole.
    pub(crate) fn logical_block(&self, inode: &Inode, lblk: u64) -> Result<BlockRef> {
        let at = Location::nid(inode.nid);
        let bsz = self.block_size();
        let la = lblk
            .checked_mul(bsz)
            .ok_or_else(|| Error::corrupted("logical block overflows", at))?;
        if matches!(
            inode.layout,
            DataLayout::CompressedFull | DataLayout::CompressedCompact
        ) && la < inode.size
        {
            // Decoded data, zero-filled past the end of the file.
            let mut v = vec![0u8; bsz as usize];
            let n = (inode.size - la).min(bsz) as usize;
            self.read(inode, la, &mut v[..n])?;
            return Ok(BlockRef::owned(v));
        }
        let e = self.map(inode, la)?;
        match e.kind {
            ExtentKind::Mapped { physical } => self.meta_block(physical + (la - e.logical), at),
            ExtentKind::Inline { physical } => {
                let n = (e.logical + e.length - la).min(bsz) as usize;
                let mut v = vec![0u8; bsz as usize];
                self.meta_read(physical + (la - e.logical), &mut v[..n], at)?;
                Ok(BlockRef::owned(v))
            }
            ExtentKind::Hole => Ok(BlockRef::owned(vec![0u8; bsz as usize])),
            ExtentKind::Compressed { .. } | ExtentKind::Fragment { .. } => {
                Err(Error::corrupted("compressed extent in a flat inode", at))
            }
        }
    }
}
