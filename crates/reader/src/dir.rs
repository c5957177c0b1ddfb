//! Directory iteration, with the checks of Linux 6.18's `fs/erofs/dir.c`.
//!
//! A directory's data is a sequence of blocks. Each starts with an array of 12-byte dirents
//! `{nid, nameoff, file_type}`; `nameoff` of the first one over 12 is the number of entries (rounded
//! up, as the kernel's pointer walk does), and the names follow, not NUL-terminated: a name ends where
//! the next one starts, the last one at its first NUL or at the end of the directory's data in that
//! block. A first `nameoff` below 12 or not below the block size is corrupted, and so is a name longer
//! than 255 bytes or one running past the data.

use crate::cache::BlockRef;
use crate::error::{Error, Location, Result};
use crate::image::Image;
use crate::inode::{FileType, Inode};
use sealfs_format::{EROFS_DIRENT_SIZE, EROFS_FT_DIR, EROFS_I_NLINK_1_BIT, EROFS_NAME_LEN};

/// One directory entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The name (raw bytes, at most 255).
    pub name: Vec<u8>,
    /// The inode it refers to.
    pub nid: u64,
    /// The stored `file_type` (`EROFS_FT_*`); the kernel uses it only for `d_type`.
    pub file_type: u8,
}

impl DirEntry {
    /// The decoded `file_type`, `None` for unknown values.
    pub fn file_type(&self) -> Option<FileType> {
        FileType::from_dirent(self.file_type)
    }
}

/// Iterator over the entries of a directory, in on-disk order. After an error it ends.
pub struct ReadDir<'a> {
    image: &'a Image,
    dir: Inode,
    nblocks: u64,
    lblk: u64,
    block: Option<BlockRef>,
    maxsize: usize,
    count: usize,
    idx: usize,
    done: bool,
    dot_pending: bool,
    /// Entries left before the directory holds more than the image could: every entry takes at
    /// least 12 bytes, so a corrupted size cannot make the iteration endless.
    budget: u64,
}

impl std::fmt::Debug for ReadDir<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadDir")
            .field("nid", &self.dir.nid())
            .field("lblk", &self.lblk)
            .field("idx", &self.idx)
            .finish_non_exhaustive()
    }
}

/// Whether a directory inode has `DOT_OMITTED` (no "." dirent; 6.15+).
pub(crate) fn dot_omitted(dir: &Inode) -> bool {
    (dir.format() >> EROFS_I_NLINK_1_BIT) & 1 != 0
}

impl<'a> ReadDir<'a> {
    fn at(&self) -> Location {
        Location::nid(self.dir.nid())
    }

    fn load_block(&mut self) -> Result<()> {
        let _metadata = crate::verified::MetadataReads::begin();
        let bsz = self.image.block_size();
        let block = self.image.logical_block(&self.dir, self.lblk)?;
        let dbstart = self.lblk * bsz;
        let nameoff0 = u16::from_le_bytes([block[8], block[9]]) as u64;
        if nameoff0 < EROFS_DIRENT_SIZE || nameoff0 >= bsz {
            return Err(Error::corrupted(
                format!(
                    "invalid de[0].nameoff {nameoff0} in directory block {}",
                    self.lblk
                ),
                self.at(),
            ));
        }
        let count = nameoff0.div_ceil(EROFS_DIRENT_SIZE);
        if count * EROFS_DIRENT_SIZE > bsz {
            return Err(Error::corrupted(
                format!(
                    "dirent array of {count} entries runs past directory block {}",
                    self.lblk
                ),
                self.at(),
            ));
        }
        self.maxsize = (self.dir.size() - dbstart).min(bsz) as usize;
        self.count = count as usize;
        self.idx = 0;
        self.block = Some(block);
        Ok(())
    }

    fn entry(&self, block: &[u8], i: usize) -> Result<DirEntry> {
        let de = &block[i * 12..i * 12 + 12];
        let nid = u64::from_le_bytes(de[..8].try_into().expect("8 bytes"));
        let nameoff = u16::from_le_bytes([de[8], de[9]]) as usize;
        let file_type = de[10];
        let bogus = || {
            Error::corrupted(
                format!(
                    "bogus dirent {i} (nameoff {nameoff}) in directory block {}",
                    self.lblk
                ),
                self.at(),
            )
        };
        let namelen = if i + 1 >= self.count {
            let tail = block.get(nameoff..self.maxsize).ok_or_else(bogus)?;
            tail.iter().position(|&b| b == 0).unwrap_or(tail.len())
        } else {
            let next = u16::from_le_bytes([block[i * 12 + 20], block[i * 12 + 21]]) as usize;
            next.checked_sub(nameoff).ok_or_else(bogus)?
        };
        if nameoff + namelen > self.maxsize || namelen > EROFS_NAME_LEN {
            return Err(bogus());
        }
        Ok(DirEntry {
            name: block[nameoff..nameoff + namelen].to_vec(),
            nid,
            file_type,
        })
    }
}

impl Iterator for ReadDir<'_> {
    type Item = Result<DirEntry>;

    fn next(&mut self) -> Option<Result<DirEntry>> {
        loop {
            if self.done {
                return None;
            }
            let Some(block) = self.block.clone() else {
                if self.lblk >= self.nblocks {
                    self.done = true;
                    if self.dot_pending {
                        return Some(Ok(DirEntry {
                            name: b".".to_vec(),
                            nid: self.dir.nid(),
                            file_type: EROFS_FT_DIR,
                        }));
                    }
                    return None;
                }
                if let Err(e) = self.load_block() {
                    self.done = true;
                    return Some(Err(e));
                }
                continue;
            };
            if self.idx < self.count {
                if self.budget == 0 {
                    self.done = true;
                    return Some(Err(Error::corrupted(
                        "directory has more entries than the image can hold",
                        self.at(),
                    )));
                }
                self.budget -= 1;
                let r = self.entry(&block, self.idx);
                self.idx += 1;
                if r.is_err() {
                    self.done = true;
                }
                return Some(r);
            }
            self.block = None;
            self.lblk += 1;
        }
    }
}

impl Image {
    /// Iterates the entries of directory `dir` (including "." and ".."), in on-disk order.
    pub fn read_dir(&self, dir: &Inode) -> Result<ReadDir<'_>> {
        if !dir.is_dir() {
            return Err(Error::NotADirectory(format!("nid {}", dir.nid())));
        }
        Ok(ReadDir {
            image: self,
            dir: dir.clone(),
            nblocks: dir.nblocks(),
            lblk: 0,
            block: None,
            maxsize: 0,
            count: 0,
            idx: 0,
            done: false,
            dot_pending: dot_omitted(dir),
            budget: self.len() / EROFS_DIRENT_SIZE + 1,
        })
    }

    /// All entries of directory `dir`, in on-disk order.
    pub fn read_dir_all(&self, dir: &Inode) -> Result<Vec<DirEntry>> {
        self.read_dir(dir)?.collect()
    }
}
