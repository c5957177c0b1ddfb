//! The image file and its metadata: bounds-checked reads of image bytes, metadata blocks read
//! and decompressed on demand (a bounded cache of them), cursors that read across block
//! boundaries, and the indexed tables (uid/gid, fragments, xattr ids).
//!
//! A corrupted image can make tables overlap so that the same metadata is parsed over and
//! over (a block list running through the inodes after it, directories inside directories).
//! A sound image's scan parses each decompressed byte about once, so the scan stops with an
//! error once it has parsed four times the metadata it has decompressed (plus a floor for
//! small images): the work stays proportional to the image.

use super::decompress::{Codec, Decompressor};
use super::format::{self, SuperBlock, SQUASHFS_METADATA_SIZE, SUPERBLOCK_SIZE};
use crate::error::{At, SquashfsError};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

/// An open SquashFS image: the file, its superblock and its compressor.
pub struct Image {
    /// The file.
    pub file: File,
    /// Its path, for messages.
    pub name: String,
    /// The superblock.
    pub sb: SuperBlock,
    /// The compressor of its blocks.
    pub codec: Codec,
}

impl Image {
    /// Opens the image in `file` (named `name`) and checks its superblock.
    pub fn open(file: File, name: String) -> Result<Image, SquashfsError> {
        let err = |what: String, io| SquashfsError {
            image: name.clone(),
            entry: None,
            what,
            at: None,
            io,
        };
        let len = file
            .metadata()
            .map_err(|e| err(format!("stat: {e}"), Some(e)))?
            .len();
        let mut b = [0u8; SUPERBLOCK_SIZE];
        if len < SUPERBLOCK_SIZE as u64 {
            return Err(err(
                format!("truncated: {len} bytes, shorter than a SquashFS superblock"),
                None,
            ));
        }
        file.read_exact_at(&mut b, 0)
            .map_err(|e| err(format!("read the superblock: {e}"), Some(e)))?;
        let sb = SuperBlock::parse(&b, len).map_err(|w| err(w, None))?;
        let codec = Codec::from_id(sb.compression).map_err(|w| err(w, None))?;
        Ok(Image {
            file,
            name,
            sb,
            codec,
        })
    }

    /// An error about the image.
    pub fn err(&self, what: impl Into<String>, at: Option<At>) -> SquashfsError {
        SquashfsError {
            image: self.name.clone(),
            entry: None,
            what: what.into(),
            at,
            io: None,
        }
    }

    /// Reads `buf.len()` bytes at `at`, which must lie inside the image's `bytes_used`; `what`
    /// names them for messages.
    pub fn read(&self, buf: &mut [u8], at: u64, what: &str) -> Result<(), SquashfsError> {
        let end = at.checked_add(buf.len() as u64);
        if end.is_none_or(|e| e > self.sb.bytes_used) {
            return Err(self.err(
                format!(
                    "{what} ({} bytes) runs past the end of the image ({} bytes)",
                    buf.len(),
                    self.sb.bytes_used
                ),
                Some(At::Byte(at)),
            ));
        }
        self.file.read_exact_at(buf, at).map_err(|e| SquashfsError {
            what: format!("read {what}: {e}"),
            io: Some(e),
            ..self.err("", Some(At::Byte(at)))
        })
    }
}

/// A table of metadata blocks: its name and the image bytes its blocks lie in.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    /// For messages ("inode table").
    pub name: &'static str,
    /// Its blocks lie in `[start, end)`.
    pub start: u64,
    /// See `start`.
    pub end: u64,
}

/// A position in a table: the metadata block (image byte of its header) and an offset in its
/// decompressed bytes.
#[derive(Clone, Copy, Debug)]
pub struct Cursor {
    /// The table.
    pub table: Table,
    /// Image byte of the current block's header.
    pub block: u64,
    /// Offset in the block's decompressed bytes.
    pub offset: usize,
}

impl Cursor {
    /// Where the cursor is, for messages.
    pub fn at(&self) -> At {
        At::Meta {
            block: self.block,
            offset: self.offset as u32,
        }
    }
}

struct Cached {
    data: Rc<Vec<u8>>,
    next: u64,
    used: u64,
}

/// Decompressed metadata blocks most recently used.
const CACHE_BLOCKS: usize = 512;
/// Metadata a scan may parse whatever it decompressed.
const PARSE_FLOOR: u64 = 16 << 20;

/// Reads metadata (on the scanning thread).
pub struct Meta<'a> {
    /// The image.
    pub img: &'a Image,
    dec: Decompressor,
    cache: HashMap<u64, Cached>,
    tick: u64,
    /// Blocks decompressed at least once, and their decompressed bytes in all.
    seen: HashSet<u64>,
    seen_bytes: u64,
    parsed: u64,
    /// Image bytes of the metadata blocks decompressed (for progress).
    pub read_bytes: u64,
}

impl<'a> Meta<'a> {
    /// A reader of `img`'s metadata.
    pub fn new(img: &'a Image) -> Meta<'a> {
        Meta {
            img,
            dec: Decompressor::new(img.codec),
            cache: HashMap::new(),
            tick: 0,
            seen: HashSet::new(),
            seen_bytes: 0,
            parsed: 0,
            read_bytes: 0,
        }
    }

    /// The metadata block at `pos` of `table` (decompressed) and the position of the next one.
    fn block(&mut self, table: Table, pos: u64) -> Result<(Rc<Vec<u8>>, u64), SquashfsError> {
        self.tick += 1;
        if let Some(c) = self.cache.get_mut(&pos) {
            c.used = self.tick;
            return Ok((c.data.clone(), c.next));
        }
        let at = Some(At::Byte(pos));
        if pos < table.start || pos >= table.end {
            return Err(self.img.err(
                format!(
                    "a metadata block of the {} lies outside it (bytes {} to {})",
                    table.name, table.start, table.end
                ),
                at,
            ));
        }
        let mut h = [0u8; 2];
        self.img.read(&mut h, pos, "a metadata block header")?;
        let header = u16::from_le_bytes(h);
        let (len, compressed) = format::metadata_header(header).ok_or_else(|| {
            self.img.err(
                format!(
                    "{}: bad metadata block header {header:#06x} (length 0 or above 8 KiB)",
                    table.name
                ),
                at,
            )
        })?;
        let mut raw = vec![0u8; len];
        self.img.read(&mut raw, pos + 2, "a metadata block")?;
        let data = if compressed {
            let mut out = vec![0u8; SQUASHFS_METADATA_SIZE];
            let n = self
                .dec
                .decompress(&raw, &mut out)
                .map_err(|e| self.img.err(format!("{}: {e}", table.name), at))?;
            out.truncate(n);
            out
        } else {
            raw
        };
        if data.is_empty() {
            return Err(self
                .img
                .err(format!("{}: an empty metadata block", table.name), at));
        }
        if self.seen.insert(pos) {
            self.seen_bytes += data.len() as u64;
        }
        self.read_bytes += 2 + len as u64;
        let next = pos + 2 + len as u64;
        if self.cache.len() >= CACHE_BLOCKS {
            let oldest = self
                .cache
                .iter()
                .min_by_key(|(_, c)| c.used)
                .map(|(k, _)| *k)
                .expect("the cache is full");
            self.cache.remove(&oldest);
        }
        let data = Rc::new(data);
        self.cache.insert(
            pos,
            Cached {
                data: data.clone(),
                next,
                used: self.tick,
            },
        );
        Ok((data, next))
    }

    /// Fills `buf` from `cur` on, moving it past what was read (across block boundaries).
    pub fn read(&mut self, cur: &mut Cursor, buf: &mut [u8]) -> Result<(), SquashfsError> {
        self.parsed += buf.len() as u64;
        if self.parsed > PARSE_FLOOR + 4 * self.seen_bytes {
            return Err(self.img.err(
                format!(
                    "{}: tables overlap (more metadata parsed than the image holds)",
                    cur.table.name
                ),
                Some(cur.at()),
            ));
        }
        let mut done = 0;
        while done < buf.len() {
            let (data, next) = self.block(cur.table, cur.block)?;
            if cur.offset > data.len() {
                return Err(self.img.err(
                    format!(
                        "{}: offset {} is beyond the block's {} bytes",
                        cur.table.name,
                        cur.offset,
                        data.len()
                    ),
                    Some(cur.at()),
                ));
            }
            if cur.offset == data.len() {
                cur.block = next;
                cur.offset = 0;
                continue;
            }
            let n = (data.len() - cur.offset).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&data[cur.offset..cur.offset + n]);
            cur.offset += n;
            done += n;
        }
        Ok(())
    }

    /// Reads a little-endian u16, u32 or u64 at `cur`.
    pub fn u16(&mut self, cur: &mut Cursor) -> Result<u16, SquashfsError> {
        let mut b = [0u8; 2];
        self.read(cur, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// See [`Meta::u16`].
    pub fn u32(&mut self, cur: &mut Cursor) -> Result<u32, SquashfsError> {
        let mut b = [0u8; 4];
        self.read(cur, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// See [`Meta::u16`].
    pub fn u64(&mut self, cur: &mut Cursor) -> Result<u64, SquashfsError> {
        let mut b = [0u8; 8];
        self.read(cur, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Reads `n` bytes at `cur` (`n` bounded by the caller).
    pub fn bytes(&mut self, cur: &mut Cursor, n: usize) -> Result<Vec<u8>, SquashfsError> {
        let mut v = vec![0u8; n];
        self.read(cur, &mut v)?;
        Ok(v)
    }
}

/// A table of fixed-size entries reached through an index of metadata block positions.
pub struct Indexed {
    /// For messages ("uid/gid table").
    pub name: &'static str,
    index: Vec<u64>,
    count: u64,
    entry: u64,
}

impl Indexed {
    /// Reads the index of a table of `count` entries of `entry` bytes at `start`.
    pub fn load(
        img: &Image,
        name: &'static str,
        start: u64,
        count: u64,
        entry: u64,
    ) -> Result<Indexed, SquashfsError> {
        let blocks = (count * entry).div_ceil(SQUASHFS_METADATA_SIZE as u64);
        if blocks * 8 > img.sb.bytes_used {
            return Err(img.err(
                format!("the {name} claims {count} entries, more than the image can hold"),
                Some(At::Byte(start)),
            ));
        }
        let mut raw = vec![0u8; (blocks * 8) as usize];
        img.read(&mut raw, start, &format!("the index of the {name}"))?;
        let index = raw
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        Ok(Indexed {
            name,
            index,
            count,
            entry,
        })
    }

    /// Entries in the table.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// A cursor at entry `i`, or an error naming the index when the table has no such entry.
    pub fn cursor(&self, i: u64) -> Result<Cursor, String> {
        if i >= self.count {
            return Err(format!(
                "{} entry {i} does not exist (the table has {})",
                self.name, self.count
            ));
        }
        let byte = i * self.entry;
        let block = self.index[(byte / SQUASHFS_METADATA_SIZE as u64) as usize];
        Ok(Cursor {
            table: Table {
                name: self.name,
                start: SUPERBLOCK_SIZE as u64,
                end: u64::MAX,
            },
            block,
            offset: (byte % SQUASHFS_METADATA_SIZE as u64) as usize,
        })
    }
}
