//! The archive's bytes: a plain file (seekable: data can be left where it is and skipped by
//! seeking), or a stream (stdin, or gzip, zstd, xz, bzip2 or lz4 input, recognised by its first
//! bytes as bsdtar recognises them, and
//! decompressed as it is read), with the position in the tar stream counted for messages and
//! the bytes of input taken counted for progress.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// How the input is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// A plain tar stream.
    None,
    /// gzip (`1f 8b`), members concatenated as `gzip -d` reads them.
    Gzip,
    /// zstd (`28 b5 2f fd`), frames concatenated.
    Zstd,
    /// xz (`fd 37 7a 58 5a 00`), streams concatenated.
    Xz,
    /// bzip2 (`BZh` and a block size digit), streams concatenated as `bzip2 -d` reads them.
    Bzip2,
    /// lz4 frames (`04 22 4d 18`, what the `lz4` command writes), concatenated.
    Lz4,
}

impl Compression {
    /// Recognises a compressed stream by its first bytes.
    pub fn of_magic(head: &[u8]) -> Compression {
        if head.starts_with(&[0x1f, 0x8b]) {
            Compression::Gzip
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Compression::Zstd
        } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
            Compression::Xz
        } else if head.len() >= 4 && head.starts_with(b"BZh") && (b'1'..=b'9').contains(&head[3]) {
            Compression::Bzip2
        } else if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
            Compression::Lz4
        } else {
            Compression::None
        }
    }

    /// What a stream of it is, for messages ("gzip data", "a plain tar stream").
    pub fn description(self) -> &'static str {
        match self {
            Compression::None => "an uncompressed tar stream",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
            Compression::Bzip2 => "bzip2",
            Compression::Lz4 => "lz4",
        }
    }

    /// Its name, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "tar",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::Xz => "xz",
            Compression::Bzip2 => "bzip2",
            Compression::Lz4 => "lz4",
        }
    }
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Bytes read ahead to recognise compression, then the rest.
struct Peeked<R> {
    head: Vec<u8>,
    at: usize,
    rest: R,
}

impl<R: Read> Read for Peeked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at < self.head.len() {
            let n = (self.head.len() - self.at).min(buf.len());
            buf[..n].copy_from_slice(&self.head[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.rest.read(buf)
    }
}

/// lz4 frames one after another, as `lz4 -d` reads them: lz4_flex's decoder ends its reads at
/// the end of each frame and starts the next frame only when read again.
struct Lz4Frames<R: io::BufRead>(lz4_flex::frame::FrameDecoder<R>);

impl<R: io::BufRead> Read for Lz4Frames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let n = self.0.read(buf)?;
            if n > 0 || buf.is_empty() || self.0.get_mut().fill_buf()?.is_empty() {
                return Ok(n);
            }
        }
    }
}

enum Stream {
    /// A plain tar in a regular file: skipped by seeking, its data read in place later.
    File { file: File, len: u64 },
    /// Anything read once.
    Read(Box<dyn Read + Send>),
}

/// The tar stream being read.
pub(crate) struct Input {
    stream: Stream,
    /// Position in the (decompressed) tar stream.
    pos: u64,
    /// Bytes of input taken so far (compressed bytes for compressed input).
    raw: Arc<AtomicU64>,
    compression: Compression,
}

/// Reads until `buf` is full or the stream ends; the bytes read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl Input {
    /// The input a file gives: a plain tar in a regular file stays seekable.
    pub fn from_file(mut file: File) -> io::Result<Input> {
        let md = file.metadata()?;
        if md.is_file() {
            let mut head = [0u8; 6];
            let n = read_full(&mut file, &mut head)?;
            file.seek(SeekFrom::Start(0))?;
            if Compression::of_magic(&head[..n]) == Compression::None {
                let raw = Arc::new(AtomicU64::new(0));
                return Ok(Input {
                    stream: Stream::File {
                        file,
                        len: md.len(),
                    },
                    pos: 0,
                    raw,
                    compression: Compression::None,
                });
            }
        }
        Input::from_reader(Box::new(file))
    }

    /// The input a stream gives, decompressed if its first bytes say so.
    pub fn from_reader(reader: Box<dyn Read + Send>) -> io::Result<Input> {
        let raw = Arc::new(AtomicU64::new(0));
        let mut counted = Counting {
            inner: reader,
            count: raw.clone(),
        };
        let mut head = vec![0u8; 6];
        let n = read_full(&mut counted, &mut head)?;
        head.truncate(n);
        let compression = Compression::of_magic(&head);
        let peeked = Peeked {
            head,
            at: 0,
            rest: counted,
        };
        let bufd = io::BufReader::with_capacity(1 << 20, peeked);
        let stream: Box<dyn Read + Send> = match compression {
            Compression::None => Box::new(bufd),
            Compression::Gzip => Box::new(io::BufReader::with_capacity(
                1 << 20,
                flate2::bufread::MultiGzDecoder::new(bufd),
            )),
            Compression::Zstd => Box::new(io::BufReader::with_capacity(
                1 << 20,
                zstd::stream::read::Decoder::with_buffer(bufd)?,
            )),
            Compression::Xz => Box::new(io::BufReader::with_capacity(
                1 << 20,
                liblzma::bufread::XzDecoder::new_multi_decoder(bufd),
            )),
            Compression::Bzip2 => Box::new(io::BufReader::with_capacity(
                1 << 20,
                bzip2::bufread::MultiBzDecoder::new(bufd),
            )),
            Compression::Lz4 => Box::new(io::BufReader::with_capacity(
                1 << 20,
                Lz4Frames(lz4_flex::frame::FrameDecoder::new(bufd)),
            )),
        };
        Ok(Input {
            stream: Stream::Read(stream),
            pos: 0,
            raw,
            compression,
        })
    }

    /// Position in the tar stream.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Bytes of input taken so far.
    pub fn raw_bytes(&self) -> u64 {
        match &self.stream {
            Stream::File { .. } => self.pos,
            Stream::Read(_) => self.raw.load(Ordering::Relaxed),
        }
    }

    /// The input's size in bytes, when known.
    pub fn raw_len(&self) -> Option<u64> {
        match &self.stream {
            Stream::File { len, .. } => Some(*len),
            Stream::Read(_) => None,
        }
    }

    /// How the input is compressed.
    pub fn compression(&self) -> Compression {
        self.compression
    }

    /// The file a plain archive is in, for reading its data in place.
    pub fn in_place(&self) -> Option<&File> {
        match &self.stream {
            Stream::File { file, .. } => Some(file),
            Stream::Read(_) => None,
        }
    }

    /// Reads up to `buf.len()` bytes; fewer only at the end of the stream.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match &mut self.stream {
            Stream::File { file, .. } => read_full(file, buf)?,
            Stream::Read(r) => read_full(r, buf)?,
        };
        self.pos += n as u64;
        Ok(n)
    }

    /// Skips `n` bytes; false if the stream ended first.
    pub fn skip(&mut self, n: u64) -> io::Result<bool> {
        match &mut self.stream {
            Stream::File { file, len } => {
                let to = self.pos.saturating_add(n);
                if to > *len {
                    self.pos = *len;
                    file.seek(SeekFrom::Start(*len))?;
                    return Ok(false);
                }
                file.seek(SeekFrom::Start(to))?;
                self.pos = to;
                Ok(true)
            }
            Stream::Read(r) => {
                let got = io::copy(&mut r.by_ref().take(n), &mut io::sink())?;
                self.pos += got;
                Ok(got == n)
            }
        }
    }

    /// Reads the rest of a compressed stream, so that a damaged end (a bad checksum, a
    /// truncated frame) is seen.
    pub fn drain(&mut self) -> io::Result<()> {
        if let Stream::Read(r) = &mut self.stream {
            if self.compression != Compression::None {
                io::copy(r, &mut io::sink())?;
            }
        }
        Ok(())
    }
}
