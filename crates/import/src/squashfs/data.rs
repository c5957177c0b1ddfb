//! File data: where a regular file's blocks are (map, from its block list and fragment, at
//! scan time), then read on demand from the image (decompressed block by block; fragment
//! blocks, which many small files share, through a cache all threads use).

use super::decompress::Decompressor;
use super::format::{self};
use super::meta::Image;
use crate::error::{At, SquashfsError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A stretch of a file's blocks: one stored block, or a run of sparse blocks.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Index of its first block in the file.
    pub first: u64,
    /// Blocks in it (1 for a stored block).
    pub count: u64,
    /// Image byte of the stored block (unused for a sparse run).
    pub pos: u64,
    /// The block's size word; 0 for a sparse run.
    pub word: u32,
}

/// The tail of a file, in a fragment block.
#[derive(Debug, Clone, Copy)]
pub struct Tail {
    /// The fragment's index.
    pub index: u32,
    /// Image byte of the fragment block.
    pub pos: u64,
    /// The fragment block's size word.
    pub word: u32,
    /// Where the tail starts in the decompressed fragment block.
    pub offset: u32,
}

/// Where one regular file's data is.
#[derive(Debug)]
pub struct FileData {
    /// Its size.
    pub size: u64,
    /// Its blocks (all of the file but a tail in a fragment), in order.
    pub runs: Box<[Run]>,
    /// Its tail, if in a fragment.
    pub tail: Option<Tail>,
}

/// Fragment blocks by index, each with the tick it was last used at; and the clock.
type Blocks = (HashMap<u32, (Arc<Vec<u8>>, u64)>, u64);

/// Decompressed fragment blocks, shared by the threads reading files.
pub struct FragmentCache {
    blocks: Mutex<Blocks>,
    capacity: usize,
}

impl FragmentCache {
    /// A cache of up to 32 MiB of fragment blocks of `block_size` (at least 8 blocks).
    pub fn new(block_size: u32) -> FragmentCache {
        FragmentCache {
            blocks: Mutex::new((HashMap::new(), 0)),
            capacity: ((32 << 20) / block_size as usize).max(8),
        }
    }

    fn get(&self, index: u32) -> Option<Arc<Vec<u8>>> {
        let mut g = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        g.1 += 1;
        let tick = g.1;
        g.0.get_mut(&index).map(|(b, used)| {
            *used = tick;
            b.clone()
        })
    }

    fn put(&self, index: u32, block: Arc<Vec<u8>>) {
        let mut g = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        g.1 += 1;
        let tick = g.1;
        if g.0.len() >= self.capacity {
            if let Some(oldest) = g.0.iter().min_by_key(|(_, (_, u))| *u).map(|(k, _)| *k) {
                g.0.remove(&oldest);
            }
        }
        g.0.insert(index, (block, tick));
    }
}

/// One file's data, opened: decompresses the blocks reads need, keeping the last one.
pub struct OpenFile<'a> {
    img: &'a Image,
    fragments: &'a FragmentCache,
    file: &'a FileData,
    path: PathBuf,
    dec: Decompressor,
    /// The last block decompressed: its index and bytes.
    block: Option<(u64, Vec<u8>)>,
}

impl<'a> OpenFile<'a> {
    /// Opens `file` (named `path` in messages).
    pub fn new(
        img: &'a Image,
        fragments: &'a FragmentCache,
        file: &'a FileData,
        path: &Path,
    ) -> OpenFile<'a> {
        OpenFile {
            img,
            fragments,
            file,
            path: path.to_path_buf(),
            dec: Decompressor::new(img.codec),
            block: None,
        }
    }

    fn err(&self, e: SquashfsError) -> SquashfsError {
        SquashfsError {
            entry: Some(sealfs_text::escape_path(&Path::new("/").join(&self.path))),
            ..e
        }
    }

    /// Reads a stored block (data or fragment) of size word `word` at `pos` into a buffer of
    /// `block_size` bytes; its decompressed length.
    fn load(
        &mut self,
        what: &str,
        pos: u64,
        word: u32,
        out: &mut Vec<u8>,
    ) -> Result<usize, SquashfsError> {
        let bs = self.img.sb.block_size as usize;
        let (len, compressed) = format::block_word(word);
        let at = Some(At::Byte(pos));
        if len == 0 || len as usize > bs {
            return Err(self.err(
                self.img
                    .err(format!("{what}: stored size {len} (block size {bs})"), at),
            ));
        }
        let mut raw = vec![0u8; len as usize];
        self.img
            .read(&mut raw, pos, what)
            .map_err(|e| self.err(e))?;
        if !compressed {
            *out = raw;
            return Ok(out.len());
        }
        out.resize(bs, 0);
        let n = self
            .dec
            .decompress(&raw, out)
            .map_err(|w| self.err(self.img.err(format!("{what}: {w}"), at)))?;
        out.truncate(n);
        Ok(n)
    }

    /// Fills `buf` with the file's bytes from `offset` (inside the file).
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<(), SquashfsError> {
        let bs = u64::from(self.img.sb.block_size);
        let nblocks: u64 = self.file.runs.last().map_or(0, |r| r.first + r.count);
        let end = offset + buf.len() as u64;
        let mut pos = offset;
        while pos < end {
            let into = &mut buf[(pos - offset) as usize..];
            let bi = pos / bs;
            if bi < nblocks {
                let bstart = bi * bs;
                let blen = bs.min(self.file.size - bstart);
                let within = pos - bstart;
                let n = (end - pos).min(blen - within) as usize;
                let run =
                    self.file.runs[self.file.runs.partition_point(|r| r.first + r.count <= bi)];
                if run.word == 0 {
                    into[..n].fill(0);
                } else {
                    if self.block.as_ref().is_none_or(|(i, _)| *i != bi) {
                        let mut data = self.block.take().map(|(_, d)| d).unwrap_or_default();
                        let what = format!("data block {bi}");
                        let got = self.load(&what, run.pos, run.word, &mut data)?;
                        if got as u64 != blen {
                            return Err(self.err(self.img.err(
                                format!("{what} holds {got} bytes, the file needs {blen}"),
                                Some(At::Byte(run.pos)),
                            )));
                        }
                        self.block = Some((bi, data));
                    }
                    let data = &self.block.as_ref().expect("loaded above").1;
                    into[..n].copy_from_slice(&data[within as usize..within as usize + n]);
                }
                pos += n as u64;
            } else {
                let tail = self
                    .file
                    .tail
                    .expect("reads past the blocks are in the tail");
                let frag = match self.fragments.get(tail.index) {
                    Some(f) => f,
                    None => {
                        let mut data = Vec::new();
                        let what = format!("fragment block {}", tail.index);
                        self.load(&what, tail.pos, tail.word, &mut data)?;
                        let data = Arc::new(data);
                        self.fragments.put(tail.index, data.clone());
                        data
                    }
                };
                let from = u64::from(tail.offset) + (pos - nblocks * bs);
                let n = (end - pos) as usize;
                let bytes = usize::try_from(from)
                    .ok()
                    .and_then(|f| frag.get(f..f + n))
                    .ok_or_else(|| {
                        self.err(self.img.err(
                            format!(
                                "fragment block {} holds {} bytes, the file's tail needs bytes \
                                 {} to {}",
                                tail.index,
                                frag.len(),
                                tail.offset,
                                u64::from(tail.offset) + self.file.size - nblocks * bs
                            ),
                            Some(At::Byte(tail.pos)),
                        ))
                    })?;
                into[..n].copy_from_slice(bytes);
                pos = end;
            }
        }
        Ok(())
    }
}
