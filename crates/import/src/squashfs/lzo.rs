//! An LZO1X decompressor (what `mksquashfs -comp lzo` writes with liblzo2's `lzo1x_1*` and
//! `lzo1x_999` compressors, all one stream format), written from the description of the
//! stream in the kernel's `Documentation/staging/lzo.rst`.
//!
//! Written here because no crate fits: the LZO crates on crates.io are GPL (`rust-lzo`,
//! `lzo1x`, `minilzo-rs`, as liblzo2 itself), which this MIT/Apache project cannot link, or
//! panic on hostile input (`lzokay-native` subtracts and indexes without checks). This one
//! checks every read and every copy: a bad stream is an error, never a panic, and it never
//! writes past the output it is given.

/// Why a stream could not be decompressed.
#[derive(Debug, PartialEq, Eq)]
pub enum LzoError {
    /// The input ended inside an instruction.
    InputOverrun,
    /// The output would exceed the buffer.
    OutputOverrun,
    /// A match refers to bytes before the start of the output.
    LookBehind,
    /// Bytes follow the end-of-stream marker.
    TrailingInput,
    /// The end-of-stream marker is malformed.
    BadEnd,
}

impl std::fmt::Display for LzoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LzoError::InputOverrun => "the stream ends inside an instruction",
            LzoError::OutputOverrun => "the stream decompresses to more than the block holds",
            LzoError::LookBehind => "a match refers to bytes before the start of the block",
            LzoError::TrailingInput => "bytes follow the end of the stream",
            LzoError::BadEnd => "malformed end of stream",
        })
    }
}

struct Input<'a> {
    src: &'a [u8],
    ip: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> Result<u8, LzoError> {
        let b = *self.src.get(self.ip).ok_or(LzoError::InputOverrun)?;
        self.ip += 1;
        Ok(b)
    }

    fn le16(&mut self) -> Result<usize, LzoError> {
        let lo = self.byte()?;
        let hi = self.byte()?;
        Ok(usize::from(u16::from_le_bytes([lo, hi])))
    }

    /// A length whose bits in the instruction were all zero: `base` plus 255 per zero byte plus
    /// the first non-zero byte.
    fn long_length(&mut self, base: usize) -> Result<usize, LzoError> {
        let mut len = base;
        loop {
            match self.byte()? {
                0 => len += 255,
                b => return Ok(len + usize::from(b)),
            }
        }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], LzoError> {
        let end = self.ip.checked_add(n).ok_or(LzoError::InputOverrun)?;
        let s = self.src.get(self.ip..end).ok_or(LzoError::InputOverrun)?;
        self.ip = end;
        Ok(s)
    }
}

struct Output<'a> {
    dst: &'a mut [u8],
    op: usize,
}

impl Output<'_> {
    fn literals(&mut self, src: &[u8]) -> Result<(), LzoError> {
        let end = self.op + src.len();
        self.dst
            .get_mut(self.op..end)
            .ok_or(LzoError::OutputOverrun)?
            .copy_from_slice(src);
        self.op = end;
        Ok(())
    }

    /// Copies `len` bytes from `dist` bytes back (the ranges may overlap: byte by byte).
    fn matched(&mut self, dist: usize, len: usize) -> Result<(), LzoError> {
        if dist == 0 || dist > self.op {
            return Err(LzoError::LookBehind);
        }
        if len > self.dst.len() - self.op {
            return Err(LzoError::OutputOverrun);
        }
        let from = self.op - dist;
        if dist >= len {
            self.dst.copy_within(from..from + len, self.op);
        } else {
            for i in 0..len {
                self.dst[self.op + i] = self.dst[from + i];
            }
        }
        self.op += len;
        Ok(())
    }
}

/// Decompresses the LZO1X stream `src` into `dst`; the number of bytes written.
pub fn decompress(src: &[u8], dst: &mut [u8]) -> Result<usize, LzoError> {
    let mut inp = Input { src, ip: 0 };
    let mut out = Output { dst, op: 0 };
    // Literals the last instruction copied: 0, 1..=3, or 4 for "4 or more".
    let mut state = 0usize;
    // The first byte may start with a literal run.
    if let Some(&first) = src.first() {
        if first > 17 {
            inp.ip = 1;
            let n = usize::from(first - 17);
            let lit = inp.take(n)?;
            out.literals(lit)?;
            state = n.min(4);
        }
    }
    loop {
        let inst = usize::from(inp.byte()?);
        let (dist, len, next_state);
        if inst >= 64 {
            // 1 L L D D D S S: 5..8 bytes; 0 1 L D D D S S: 3..4 bytes; within 2 KiB.
            len = if inst >= 128 {
                5 + ((inst >> 5) & 3)
            } else {
                3 + ((inst >> 5) & 1)
            };
            dist = (usize::from(inp.byte()?) << 3) + ((inst >> 2) & 7) + 1;
            next_state = inst & 3;
        } else if inst >= 32 {
            // 0 0 1 L L L L L, then D..D S S (LE16): within 16 KiB.
            let l = inst & 31;
            len = 2 + if l == 0 { inp.long_length(31)? } else { l };
            let d = inp.le16()?;
            dist = (d >> 2) + 1;
            next_state = d & 3;
        } else if inst >= 16 {
            // 0 0 0 1 H L L L, then D..D S S (LE16): 16..48 KiB back, or the end.
            let l = inst & 7;
            len = 2 + if l == 0 { inp.long_length(7)? } else { l };
            let d = inp.le16()?;
            let far = ((inst & 8) << 11) + (d >> 2);
            if far == 0 {
                if len != 3 {
                    return Err(LzoError::BadEnd);
                }
                if inp.ip != src.len() {
                    return Err(LzoError::TrailingInput);
                }
                return Ok(out.op);
            }
            dist = 16384 + far;
            next_state = d & 3;
        } else if state == 0 {
            // 0 0 0 0 L L L L after no literals: a run of 4 or more literals.
            let n = 3 + if inst == 0 {
                inp.long_length(15)?
            } else {
                inst
            };
            let lit = inp.take(n)?;
            out.literals(lit)?;
            state = 4;
            continue;
        } else if state < 4 {
            // 0 0 0 0 D D S S after 1..3 literals: 2 bytes within 1 KiB.
            len = 2;
            dist = (inst >> 2) + (usize::from(inp.byte()?) << 2) + 1;
            next_state = inst & 3;
        } else {
            // 0 0 0 0 D D S S after 4 or more literals: 3 bytes, 2..3 KiB back.
            len = 3;
            dist = (inst >> 2) + (usize::from(inp.byte()?) << 2) + 2049;
            next_state = inst & 3;
        }
        out.matched(dist, len)?;
        let lit = inp.take(next_state)?;
        out.literals(lit)?;
        state = next_state;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream written by hand: a literal run, a match that overlaps what it copies, and the
    /// end marker (0x11 0x00 0x00).
    #[test]
    fn literal_run_overlapping_match_and_end() {
        // "abcd" as a first-byte literal run (17 + 4), then 0 1 L=1 DDD=3 SS=0 (copy 4 from 4
        // back), H = 0 -> "abcdabcd"; then M3 "0 0 1 00011" copy 5 from distance 1 ("ddddd").
        let src = [
            21,
            b'a',
            b'b',
            b'c',
            b'd', // literal run
            0b0110_1100,
            0, // 4 bytes from 4 back
            0b0010_0011,
            0,
            0, // 5 bytes from 1 back (LE16 D = 0)
            0x11,
            0,
            0, // end
        ];
        let mut dst = [0u8; 32];
        let n = decompress(&src, &mut dst).unwrap();
        assert_eq!(&dst[..n], b"abcdabcdddddd");
    }

    #[test]
    fn hostile_streams_are_errors() {
        let mut dst = [0u8; 8];
        assert_eq!(decompress(&[], &mut dst), Err(LzoError::InputOverrun));
        // A match before any output.
        assert_eq!(
            decompress(&[18, b'x', 0x44, 0], &mut dst),
            Err(LzoError::LookBehind)
        );
        // A literal run longer than the output.
        assert_eq!(
            decompress(&[30, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13], &mut dst),
            Err(LzoError::OutputOverrun)
        );
        // A long length made of zero bytes running off the input.
        assert_eq!(
            decompress(&[0, 0, 0, 0], &mut dst),
            Err(LzoError::InputOverrun)
        );
        // Bytes after the end marker.
        assert_eq!(
            decompress(&[18, b'x', 0x11, 0, 0, 7], &mut dst),
            Err(LzoError::TrailingInput)
        );
        assert_eq!(decompress(&[18, b'x', 0x11, 0, 0], &mut dst), Ok(1));
    }
}
