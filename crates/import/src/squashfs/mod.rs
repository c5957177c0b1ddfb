//! SquashFS images (version 4.0, every compressor squashfs-tools writes: gzip, lzo, lz4, xz,
//! zstd and the legacy lzma) as a builder [`Source`], read in place: nothing is extracted.
//!
//! What the image holds is what `unsquashfs -d DIR` (as root: owners, permissions, times and
//! xattrs restored) followed by `sealfs build DIR` would give:
//!
//! - every inode type: directories, regular files, symlinks (mode 0777, as the kernel shows
//!   them), block and character devices (numbers decoded as the kernel's `new_decode_dev`),
//!   FIFOs and sockets; owners and groups through the uid/gid table; times in whole seconds
//!   (SquashFS stores unsigned 32-bit seconds);
//! - hard links: entries naming an inode number already given become [`EntryKind::HardLink`]s
//!   of its first name, for every type but directories (as unsquashfs links them and the
//!   kernel, which looks inodes up by number, shows them);
//! - xattrs: `user.`, `trusted.` and `security.` (all SquashFS can store; mksquashfs drops
//!   POSIX ACLs), inline or out-of-line values;
//! - files: data blocks and fragments (tails packed with others); sparse blocks (stored as size
//!   0) stay holes where `unsquashfs` leaves them (with `lseek`) in the file it writes: in
//!   extended inodes that count sparse bytes (mksquashfs also stores a short file of zeros as a
//!   sparse block of a basic inode, which unsquashfs writes out as zeros).
//!
//! **Reading.** The scan walks directories breadth first from the root, reading inodes and
//! listings through a bounded cache of decompressed metadata blocks, and keeps for each regular
//! file only where its blocks are; file data is read from the image when the builder asks for
//! it, block by block, fragment blocks through a cache shared by the threads. Memory holds the
//! tree's metadata, not its data. An image changed while it is read fails the build.
//!
//! **Bad images** (truncated, a bad superblock, corrupt compressed blocks, a directory that
//! contains itself, references outside their tables, names `.`, `..` or holding `/`, repeated
//! names) fail the build with an error naming the entry, what is wrong and the byte of the image
//! (or the metadata block and offset) where; nothing in it panics (fuzzed by
//! `fuzz/fuzz_targets/squashfs_build.rs`).

mod data;
mod decompress;
mod dir;
pub mod format;
mod inode;
mod lzo;
mod meta;
mod xattr;

use crate::error::At;
use crate::error::SquashfsError;
use data::{FileData, FragmentCache, OpenFile, Run, Tail};
use format::{SQUASHFS_INVALID_FRAG, SQUASHFS_INVALID_XATTR};
use inode::{Body, Inode};
use meta::{Cursor, Image, Indexed, Meta};
use sealfs_builder::{
    BuildError, DataId, Entry, EntryKind, FileRef, ScanContext, Sink, Source, SourceFile,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::path::{Path, PathBuf};
use xattr::Xattrs;

/// A SquashFS image, as a [`Source`].
pub struct SquashfsSource {
    img: Image,
    /// The image's (size, modification and change times) when it was opened: a read after it
    /// changed fails the build.
    stamp: (u64, i64, i64, i64, i64),
    files: Vec<FileData>,
    fragments: FragmentCache,
    data_limit: Option<u64>,
    entry_limit: Option<u64>,
}

/// What says the image did not change.
fn stamp(f: &File) -> std::io::Result<(u64, i64, i64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let md = f.metadata()?;
    Ok((
        md.len(),
        md.mtime(),
        md.mtime_nsec(),
        md.ctime(),
        md.ctime_nsec(),
    ))
}

impl SquashfsSource {
    /// Opens the image at `path` and checks its superblock.
    pub fn open(path: &Path) -> Result<SquashfsSource, SquashfsError> {
        let name = sealfs_text::escape_path(path);
        let io_err = |e: std::io::Error| SquashfsError {
            image: name.clone(),
            entry: None,
            what: format!("open: {e}"),
            at: None,
            io: Some(e),
        };
        let file = File::open(path).map_err(io_err)?;
        let st = stamp(&file).map_err(io_err)?;
        let img = Image::open(file, name)?;
        Ok(SquashfsSource {
            fragments: FragmentCache::new(img.sb.block_size),
            img,
            stamp: st,
            files: Vec::new(),
            data_limit: None,
            entry_limit: None,
        })
    }

    /// Refuses images whose files hold more than `bytes` of data in all (holes left out, a
    /// file counted once per inode): bounds the work a build of an untrusted image can cause
    /// (a few bytes of block list can name a large file, and many files can share blocks).
    pub fn limit_data(mut self, bytes: u64) -> SquashfsSource {
        self.data_limit = Some(bytes);
        self
    }

    /// Refuses images of more than `entries` directory entries: with [`SquashfsSource::limit_data`],
    /// bounds the memory a build of an untrusted image takes (compressed metadata can hold
    /// thousands of entries per kilobyte of image).
    pub fn limit_entries(mut self, entries: u64) -> SquashfsSource {
        self.entry_limit = Some(entries);
        self
    }

    /// The compressor of the image's blocks, as `mksquashfs -comp` names it.
    pub fn compressor(&self) -> &'static str {
        self.img.codec.name()
    }
}

impl Source for SquashfsSource {
    fn scan(&mut self, sink: &mut Sink, cx: &ScanContext<'_>) -> sealfs_builder::Result<()> {
        let progress = cx.progress();
        let sb = &self.img.sb;
        progress.begin_bytes(
            "reading the image's tables",
            Some(sb.bytes_used - sb.inode_table_start),
        );
        let limits = (self.data_limit, self.entry_limit);
        let mut scan = Scan::new(&self.img, cx, limits).map_err(BuildError::from_source)?;
        let mut reported = 0;
        scan.walk(sink, &mut |read| {
            progress.advance(read - reported);
            reported = read;
        })
        .map_err(BuildError::from_source)?;
        self.files = scan.files;
        progress.end();
        Ok(())
    }

    fn open(&self, file: &FileRef<'_>) -> sealfs_builder::Result<Box<dyn SourceFile + '_>> {
        Ok(Box::new(SquashfsFile {
            source: self,
            inner: OpenFile::new(
                &self.img,
                &self.fragments,
                &self.files[file.data.0 as usize],
                file.path,
            ),
        }))
    }
}

/// One regular file's data, read from the image.
struct SquashfsFile<'a> {
    source: &'a SquashfsSource,
    inner: OpenFile<'a>,
}

impl SourceFile for SquashfsFile<'_> {
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> sealfs_builder::Result<()> {
        self.inner
            .read_at(buf, offset)
            .map_err(BuildError::from_source)
    }

    /// The data read is the image's as scanned only if the image did not change.
    fn finish(self: Box<Self>) -> sealfs_builder::Result<()> {
        let img = &self.source.img;
        let now = stamp(&img.file).map_err(|e| BuildError::io_error(&img.name, "stat", e))?;
        if now != self.source.stamp {
            return Err(BuildError::Changed {
                path: PathBuf::from(&img.name),
                what: "the image changed while its data was read".into(),
            });
        }
        Ok(())
    }
}

/// A directory waiting to be listed: its path and where its listing is.
struct PendingDir {
    path: Vec<u8>,
    start_block: u32,
    offset: u16,
    file_size: u32,
}

/// The state of one scan.
struct Scan<'a, 'c> {
    meta: Meta<'a>,
    cx: &'c ScanContext<'c>,
    ids: Vec<u32>,
    fragments: Option<Indexed>,
    xattrs: Option<Xattrs>,
    files: Vec<FileData>,
    /// First names of the non-directories with several links, by inode number.
    links: HashMap<u32, Vec<u8>>,
    /// Inode numbers of the non-directories with one link, seen once.
    single: HashSet<u32>,
    /// Directory inodes reached, by reference: a second time is a cycle.
    dirs: HashSet<u64>,
    data_bytes: u64,
    data_limit: Option<u64>,
    /// Directory entries that may still be read.
    entries_left: u64,
}

/// `path` as messages show it: from the image's root.
fn shown(path: &[u8]) -> String {
    let mut rooted = b"/".to_vec();
    rooted.extend_from_slice(path);
    sealfs_text::escape(&rooted)
}

impl<'a, 'c> Scan<'a, 'c> {
    fn new(
        img: &'a Image,
        cx: &'c ScanContext<'c>,
        (data_limit, entry_limit): (Option<u64>, Option<u64>),
    ) -> Result<Scan<'a, 'c>, SquashfsError> {
        let sb = &img.sb;
        let mut meta = Meta::new(img);
        let id_table = Indexed::load(
            img,
            "uid/gid table",
            sb.id_table_start,
            u64::from(sb.no_ids),
            4,
        )?;
        let mut ids = Vec::with_capacity(usize::from(sb.no_ids));
        for i in 0..id_table.len() {
            let mut cur = id_table.cursor(i).map_err(|w| img.err(w, None))?;
            ids.push(meta.u32(&mut cur)?);
        }
        let fragments = match sb.fragments {
            0 => None,
            n => Some(Indexed::load(
                img,
                "fragment table",
                sb.fragment_table_start,
                u64::from(n),
                16,
            )?),
        };
        let xattrs = if cx.xattrs() && !sb.no_xattrs() {
            Some(Xattrs::load(&mut meta)?)
        } else {
            None
        };
        Ok(Scan {
            meta,
            cx,
            ids,
            fragments,
            xattrs,
            files: Vec::new(),
            links: HashMap::new(),
            single: HashSet::new(),
            dirs: HashSet::new(),
            data_bytes: 0,
            data_limit,
            entries_left: entry_limit.unwrap_or(u64::MAX),
        })
    }

    /// Gives every entry of the tree to `sink`, breadth first; `progress` gets the image bytes
    /// of metadata read so far.
    fn walk(
        &mut self,
        sink: &mut Sink,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), SquashfsError> {
        let img = self.meta.img;
        let root_ref = img.sb.root_inode;
        let mut queue = VecDeque::new();
        let root = self.inode(root_ref, b"")?;
        let Body::Dir { .. } = root.0.body else {
            return Err(SquashfsError {
                entry: Some("/".into()),
                ..img.err("the root inode is not a directory", Some(root.0.at))
            });
        };
        self.dirs.insert(root_ref);
        self.add(sink, Vec::new(), root, &mut queue)?;
        while let Some(dir) = queue.pop_front() {
            let listing = (dir.start_block, dir.offset, dir.file_size);
            let entries =
                dir::read(&mut self.meta, listing, &mut self.entries_left).map_err(|e| {
                    SquashfsError {
                        entry: Some(shown(&dir.path)),
                        ..e
                    }
                })?;
            for e in entries {
                let mut path = dir.path.clone();
                if !path.is_empty() {
                    path.push(b'/');
                }
                path.extend_from_slice(&e.name);
                if self.cx.excluded(&path) {
                    continue;
                }
                let inode = self.inode(e.inode, &path)?;
                let (number, ty) = (inode.0.number, inode.0.ty);
                let problem = if inode.0.base_type() != e.ty {
                    Some(format!(
                        "the directory entry says type {}, its inode {number} is of type {ty}",
                        e.ty
                    ))
                } else if matches!(inode.0.body, Body::Dir { .. }) && !self.dirs.insert(e.inode) {
                    Some(format!(
                        "directory inode {number} reached a second time (the directory table \
                         has a cycle)"
                    ))
                } else {
                    None
                };
                if let Some(what) = problem {
                    return Err(SquashfsError {
                        entry: Some(shown(&path)),
                        ..img.err(what, Some(e.at))
                    });
                }
                self.add(sink, path, inode, &mut queue)?;
            }
            progress(self.meta.read_bytes);
        }
        Ok(())
    }

    /// Reads the inode `reference` (of the entry at `path`); with the cursor after its fixed
    /// part (a regular file's block list).
    fn inode(&mut self, reference: u64, path: &[u8]) -> Result<(Inode, Cursor), SquashfsError> {
        inode::read(&mut self.meta, reference).map_err(|e| SquashfsError {
            entry: Some(shown(path)),
            ..e
        })
    }

    /// Hands the entry at `path` of `inode` to the sink (a hard link if its inode number was
    /// given before); queues a directory's listing.
    fn add(
        &mut self,
        sink: &mut Sink,
        path: Vec<u8>,
        (inode, cur): (Inode, Cursor),
        queue: &mut VecDeque<PendingDir>,
    ) -> Result<(), SquashfsError> {
        let img = self.meta.img;
        let named = |what: String, at| SquashfsError {
            entry: Some(shown(&path)),
            ..img.err(what, Some(at))
        };
        let id = |i: u16| {
            self.ids.get(usize::from(i)).copied().ok_or_else(|| {
                named(
                    format!(
                        "inode {}: uid/gid index {i} outside the table's {} entries",
                        inode.number,
                        self.ids.len()
                    ),
                    inode.at,
                )
            })
        };
        let (uid, gid) = (id(inode.uid)?, id(inode.gid)?);
        let is_dir = matches!(inode.body, Body::Dir { .. });
        if !is_dir {
            if let Some(first) = self.links.get(&inode.number) {
                let entry = Entry {
                    path,
                    kind: EntryKind::HardLink(first.clone()),
                    mode: 0,
                    uid,
                    gid,
                    mtime: 0,
                    mtime_nsec: 0,
                    xattrs: Vec::new(),
                };
                return self.give(sink, entry);
            }
            if inode.nlink > 1 {
                self.links.insert(inode.number, path.clone());
            } else if !self.single.insert(inode.number) {
                return Err(named(
                    format!(
                        "inode {} has one link but a second name reaches it",
                        inode.number
                    ),
                    inode.at,
                ));
            }
        }
        let xattrs = match (&self.xattrs, inode.xattr) {
            (Some(x), i) if i != SQUASHFS_INVALID_XATTR => {
                x.read(&mut self.meta, i).map_err(|e| SquashfsError {
                    entry: Some(shown(&path)),
                    ..e
                })?
            }
            _ => Vec::new(),
        };
        let mut mode = u32::from(inode.mode) & 0o7777;
        let kind = match inode.body {
            Body::Dir {
                start_block,
                offset,
                file_size,
            } => {
                queue.push_back(PendingDir {
                    path: path.clone(),
                    start_block,
                    offset,
                    file_size,
                });
                EntryKind::Dir
            }
            Body::File {
                start,
                size,
                fragment,
                frag_offset,
                holes,
            } => self
                .file(cur, start, size, (fragment, frag_offset), holes)
                .map_err(|(what, at)| named(format!("inode {}: {what}", inode.number), at))?,
            Body::Symlink(target) => {
                mode = 0o777;
                EntryKind::Symlink(target)
            }
            Body::Device(block, rdev) => {
                let (major, minor) = format::decode_dev(rdev);
                if block {
                    EntryKind::BlockDevice { major, minor }
                } else {
                    EntryKind::CharDevice { major, minor }
                }
            }
            Body::Fifo => EntryKind::Fifo,
            Body::Socket => EntryKind::Socket,
        };
        let entry = Entry {
            path,
            kind,
            mode,
            uid,
            gid,
            mtime: i64::from(inode.mtime),
            mtime_nsec: 0,
            xattrs,
        };
        self.give(sink, entry)
    }

    fn give(&mut self, sink: &mut Sink, entry: Entry) -> Result<(), SquashfsError> {
        let path = entry.path.clone();
        sink.add(entry).map_err(|e| SquashfsError {
            entry: Some(shown(&path)),
            ..self.meta.img.err(e.what, None)
        })
    }

    /// Maps a regular file's data: its block list (at `cur`) and its tail (fragment, offset);
    /// its sparse blocks are holes if `holes`. The error says what and where.
    fn file(
        &mut self,
        mut cur: Cursor,
        start: u64,
        size: u64,
        (fragment, frag_offset): (u32, u32),
        holes: bool,
    ) -> Result<EntryKind, (String, At)> {
        let sb = &self.meta.img.sb;
        let (bs, bytes_used) = (u64::from(sb.block_size), sb.bytes_used);
        let list_at = cur.at();
        let has_tail = fragment != SQUASHFS_INVALID_FRAG && !size.is_multiple_of(bs);
        let nblocks = if has_tail {
            size / bs
        } else {
            size.div_ceil(bs)
        };
        let mut runs: Vec<Run> = Vec::new();
        let mut pos = start;
        let mut stored = 0u64;
        let mut sparse = false;
        let mut stretches = Vec::new();
        let mut words = vec![0u8; 4 * nblocks.min(1024) as usize];
        let mut i = 0u64;
        while i < nblocks {
            let n = (nblocks - i).min(1024) as usize;
            let at = cur.at();
            self.meta
                .read(&mut cur, &mut words[..4 * n])
                .map_err(|e| (e.what, e.at.unwrap_or(at)))?;
            for w in words[..4 * n].chunks_exact(4) {
                let word = u32::from_le_bytes(w.try_into().expect("4 bytes"));
                let blen = bs.min(size - i * bs);
                if word == 0 {
                    sparse = true;
                    if !holes {
                        stored += blen;
                    }
                    match runs.last_mut() {
                        Some(r) if r.word == 0 => r.count += 1,
                        _ => runs.push(Run {
                            first: i,
                            count: 1,
                            pos,
                            word: 0,
                        }),
                    }
                } else {
                    let (len, _) = format::block_word(word);
                    if len == 0 || u64::from(len) > bs {
                        return Err((
                            format!("data block {i}: stored size {len} (block size {bs})"),
                            list_at,
                        ));
                    }
                    runs.push(Run {
                        first: i,
                        count: 1,
                        pos,
                        word,
                    });
                    // Saturating: a start near the end of the u64 range is then past the
                    // image's end, refused below.
                    pos = pos.saturating_add(u64::from(len));
                    stored += blen;
                    stretches.push((i * bs, blen));
                }
                i += 1;
            }
        }
        if pos > bytes_used {
            return Err((
                format!(
                    "its data blocks (from byte {start}) run past the end of the image \
                     ({bytes_used} bytes)"
                ),
                list_at,
            ));
        }
        let tail = if has_tail {
            let frags = self.fragments.as_ref().ok_or_else(|| {
                (
                    format!("fragment {fragment}, but the image has no fragments"),
                    list_at,
                )
            })?;
            let mut fcur = frags
                .cursor(u64::from(fragment))
                .map_err(|w| (w, list_at))?;
            let fat = fcur.at();
            let meta_err = |e: SquashfsError| (e.what, e.at.unwrap_or(fat));
            let fpos = self.meta.u64(&mut fcur).map_err(meta_err)?;
            let word = self.meta.u32(&mut fcur).map_err(meta_err)?;
            let (len, _) = format::block_word(word);
            let tail_len = size % bs;
            if len == 0
                || u64::from(len) > bs
                || fpos
                    .checked_add(u64::from(len))
                    .is_none_or(|e| e > bytes_used)
            {
                return Err((
                    format!(
                        "fragment {fragment}: block at byte {fpos} of stored size {len} is not \
                         inside the image (block size {bs})"
                    ),
                    fat,
                ));
            }
            if u64::from(frag_offset) + tail_len > bs {
                return Err((
                    format!(
                        "its tail ({tail_len} bytes at offset {frag_offset} of fragment                          {fragment}) runs past the block size {bs}"
                    ),
                    list_at,
                ));
            }
            stored += tail_len;
            stretches.push((nblocks * bs, tail_len));
            Some(Tail {
                index: fragment,
                pos: fpos,
                word,
                offset: frag_offset,
            })
        } else {
            None
        };
        self.data_bytes += stored;
        if let Some(limit) = self.data_limit.filter(|l| self.data_bytes > *l) {
            return Err((
                format!("the files hold more than the {limit} bytes of data allowed"),
                list_at,
            ));
        }
        let data_ranges = if sparse && holes {
            crate::holes::data_ranges(size, &stretches)
        } else {
            None
        };
        self.files.push(FileData {
            size,
            runs: runs.into_boxed_slice(),
            tail,
        });
        Ok(EntryKind::File {
            size,
            data: DataId(self.files.len() as u64 - 1),
            data_ranges,
        })
    }
}
