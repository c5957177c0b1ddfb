//! The compressors squashfs-tools writes, by id (`SquashFS` stores one per image): each block
//! is decompressed into a buffer of the size it must fill at most, and a stream that would
//! overflow it, ends early or is malformed is an error naming the codec.

use super::format::comp;
use super::lzo;

/// Memory a decoder of xz or LZMA streams may take (what unsquashfs allows).
const LZMA_MEMLIMIT: u64 = 32 << 20;

/// A SquashFS compressor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// zlib streams (`-comp gzip`).
    Zlib,
    /// LZMA "alone" streams (`-comp lzma`).
    Lzma,
    /// LZO1X.
    Lzo,
    /// xz streams.
    Xz,
    /// LZ4 blocks.
    Lz4,
    /// zstd frames.
    Zstd,
}

impl Codec {
    /// The codec of compressor id `id`.
    pub fn from_id(id: u16) -> Result<Codec, String> {
        Ok(match id {
            comp::ZLIB => Codec::Zlib,
            comp::LZMA => Codec::Lzma,
            comp::LZO => Codec::Lzo,
            comp::XZ => Codec::Xz,
            comp::LZ4 => Codec::Lz4,
            comp::ZSTD => Codec::Zstd,
            _ => return Err(format!("superblock: unknown compressor id {id}")),
        })
    }

    /// Its name, as `mksquashfs -comp` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Zlib => "gzip",
            Codec::Lzma => "lzma",
            Codec::Lzo => "lzo",
            Codec::Xz => "xz",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// A decompressor of one codec, its state kept between blocks where the codec has any.
pub struct Decompressor {
    codec: Codec,
    zlib: Option<flate2::Decompress>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl Decompressor {
    /// A decompressor for `codec`.
    pub fn new(codec: Codec) -> Decompressor {
        Decompressor {
            codec,
            zlib: None,
            zstd: None,
        }
    }

    /// Decompresses the block `src` into `dst`; the number of bytes written, or what is wrong
    /// (naming the codec).
    pub fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<usize, String> {
        let name = self.codec.name();
        let cap = dst.len();
        let too_long = || format!("{name}: decompresses to more than {cap} bytes");
        match self.codec {
            Codec::Zlib => {
                use flate2::{FlushDecompress, Status};
                let z = self
                    .zlib
                    .get_or_insert_with(|| flate2::Decompress::new(true));
                z.reset(true);
                match z.decompress(src, dst, FlushDecompress::Finish) {
                    Ok(Status::StreamEnd) => Ok(z.total_out() as usize),
                    Ok(_) if z.total_out() as usize == cap => Err(too_long()),
                    Ok(_) => Err(format!("{name}: the stream is truncated")),
                    Err(e) => Err(format!("{name}: {e}")),
                }
            }
            Codec::Zstd => {
                if self.zstd.is_none() {
                    let d = zstd::bulk::Decompressor::new()
                        .map_err(|e| format!("{name}: cannot start a decoder: {e}"))?;
                    self.zstd = Some(d);
                }
                let d = self.zstd.as_mut().expect("made above");
                d.decompress_to_buffer(src, dst)
                    .map_err(|e| format!("{name}: {e}"))
            }
            Codec::Lz4 => {
                lz4_flex::block::decompress_into(src, dst).map_err(|e| format!("{name}: {e}"))
            }
            Codec::Lzo => lzo::decompress(src, dst).map_err(|e| format!("{name}: {e}")),
            Codec::Xz => {
                let s = liblzma::stream::Stream::new_stream_decoder(LZMA_MEMLIMIT, 0)
                    .map_err(|e| format!("{name}: cannot start a decoder: {e}"))?;
                lzma_finish(s, src, dst, name)
            }
            Codec::Lzma => {
                // squashfs-tools writes the real size into the 13-byte header of a stream that
                // also has an end marker; like unsquashfs, decode with the size unknown.
                const HEADER: usize = 13;
                if src.len() < HEADER {
                    return Err(format!("{name}: the stream is truncated"));
                }
                let mut stream = src.to_vec();
                stream[5..HEADER].fill(0xff);
                let s = liblzma::stream::Stream::new_lzma_decoder(LZMA_MEMLIMIT)
                    .map_err(|e| format!("{name}: cannot start a decoder: {e}"))?;
                let n = lzma_finish(s, &stream, dst, name)?;
                let claimed = u32::from_le_bytes(src[5..9].try_into().expect("4 bytes")) as usize;
                if src[9..13] != [0; 4] || claimed != n {
                    return Err(format!(
                        "{name}: the header says {claimed} bytes, the stream holds {n}"
                    ));
                }
                Ok(n)
            }
        }
    }
}

/// Runs an xz or LZMA decoder over all of `src` into `dst`; the bytes written.
fn lzma_finish(
    mut s: liblzma::stream::Stream,
    src: &[u8],
    dst: &mut [u8],
    name: &str,
) -> Result<usize, String> {
    use liblzma::stream::{Action, Status};
    let out0 = s.total_out();
    match s.process(src, dst, Action::Finish) {
        Ok(Status::StreamEnd) => Ok((s.total_out() - out0) as usize),
        Ok(_) if (s.total_out() - out0) as usize == dst.len() => Err(format!(
            "{name}: decompresses to more than {} bytes",
            dst.len()
        )),
        Ok(_) => Err(format!("{name}: the stream is truncated")),
        Err(e) => Err(format!("{name}: {e}")),
    }
}
