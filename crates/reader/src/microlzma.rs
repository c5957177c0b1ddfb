//! MicroLZMA decoding through liblzma (`lzma_microlzma_decoder`, liblzma >= 5.4), the format
//! EROFS stores as algorithm 1 and Linux decodes in `fs/erofs/decompressor_lzma.c` (with XZ
//! Embedded's `xz_dec_microlzma_*`).
//!
//! MicroLZMA is a raw LZMA1 stream without an end marker whose first byte, always 0 in LZMA1's
//! range coder, holds the bitwise negation of the properties byte (lc/lp/pb); the dictionary size,
//! the exact compressed size and the decoded size come from outside: the superblock's LZMA record,
//! the pcluster after its zero padding, and the extent. Like the kernel, a whole extent is decoded
//! with its size *exact* (the stream must end there), a prefix (a partial read or a `PARTIAL_REF`
//! head) with the size as an upper bound, decoding stopping once it is out.
//!
//! One decoder per thread is kept and re-initialized for every pcluster, so liblzma reuses its
//! dictionary buffer instead of allocating up to 8 MiB per decode.

#![allow(
    unsafe_code,
    reason = "liblzma is a C library; no safe Rust binding exposes its MicroLZMA decoder"
)]

use liblzma_sys as sys;
use std::cell::RefCell;

/// What went wrong, for the caller's error message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum MicroLzmaError {
    /// liblzma refused the parameters or ran out of memory (`lzma_ret` of the init call).
    Init(sys::lzma_ret),
    /// The stream is damaged (`lzma_ret` of `lzma_code`).
    Data(sys::lzma_ret),
    /// The stream ended, or the input ran out, after this many decoded bytes.
    Short(usize),
}

impl std::fmt::Display for MicroLzmaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MicroLzmaError::Init(r) => write!(f, "liblzma cannot start a decoder (lzma_ret {r})"),
            MicroLzmaError::Data(r) => write!(f, "the stream is damaged (lzma_ret {r})"),
            MicroLzmaError::Short(n) => write!(f, "the stream ends after {n} decoded bytes"),
        }
    }
}

/// A liblzma stream, ended when dropped.
struct Stream(sys::lzma_stream);

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: the stream was zero-initialized (LZMA_STREAM_INIT) and only ever used through
        // liblzma, so `lzma_end` may free whatever it holds.
        unsafe { sys::lzma_end(&mut self.0) };
    }
}

thread_local! {
    /// A decoder per thread, re-initialized for each pcluster (liblzma keeps its buffers).
    static STREAM: RefCell<Option<Stream>> = const { RefCell::new(None) };
}

/// Decodes the MicroLZMA stream `src` (exactly the compressed bytes) into all of `out`. `exact`:
/// the stream holds exactly `out.len()` decoded bytes (a whole extent); otherwise it may hold more
/// and decoding stops once `out` is full.
pub(crate) fn decode(
    src: &[u8],
    out: &mut [u8],
    exact: bool,
    dict_size: u32,
) -> Result<(), MicroLzmaError> {
    if out.is_empty() {
        return Ok(());
    }
    STREAM.with(|cell| {
        let mut slot = cell.borrow_mut();
        let stream = slot.get_or_insert_with(|| {
            // SAFETY: an all-zero lzma_stream is LZMA_STREAM_INIT (null pointers, zero counts).
            Stream(unsafe { std::mem::zeroed() })
        });
        let strm = &mut stream.0;
        // SAFETY: `strm` is an initialized stream owned by this thread; liblzma copies the scalar
        // arguments.
        let r = unsafe {
            sys::lzma_microlzma_decoder(
                strm,
                src.len() as u64,
                out.len() as u64,
                exact as sys::lzma_bool,
                dict_size,
            )
        };
        if r != sys::LZMA_OK {
            // Start afresh next time: a failed init may leave the stream half set up.
            *slot = None;
            return Err(MicroLzmaError::Init(r));
        }
        strm.next_in = src.as_ptr();
        strm.avail_in = src.len();
        strm.next_out = out.as_mut_ptr();
        strm.avail_out = out.len();
        let result = loop {
            let before = (strm.avail_in, strm.avail_out);
            // SAFETY: next_in/avail_in and next_out/avail_out describe `src` and `out`, which
            // outlive this call; liblzma reads and writes only within them.
            let r = unsafe { sys::lzma_code(strm, sys::LZMA_RUN) };
            let done = out.len() - strm.avail_out;
            match r {
                sys::LZMA_STREAM_END if done == out.len() => break Ok(()),
                sys::LZMA_STREAM_END => break Err(MicroLzmaError::Short(done)),
                sys::LZMA_OK if done == out.len() && !exact => break Ok(()),
                sys::LZMA_OK if (strm.avail_in, strm.avail_out) == before => {
                    break Err(MicroLzmaError::Short(done))
                }
                sys::LZMA_OK => {}
                r => break Err(MicroLzmaError::Data(r)),
            }
        };
        // The stream must not point into the buffers once they are gone.
        strm.next_in = std::ptr::null();
        strm.avail_in = 0;
        strm.next_out = std::ptr::null_mut();
        strm.avail_out = 0;
        if result.is_err() {
            *slot = None;
        }
        result
    })
}

/// Test support: a MicroLZMA stream of `data` made by liblzma's encoder (as mkfs.erofs makes
/// them), with the given dictionary size.
#[cfg(test)]
pub(crate) fn encode(data: &[u8], dict_size: u32) -> Vec<u8> {
    // SAFETY: as in `decode`; `opts` is filled in by liblzma from a preset.
    unsafe {
        let mut opts: sys::lzma_options_lzma = std::mem::zeroed();
        assert_eq!(sys::lzma_lzma_preset(&mut opts, 6), 0);
        opts.dict_size = dict_size;
        let mut s = Stream(std::mem::zeroed());
        assert_eq!(sys::lzma_microlzma_encoder(&mut s.0, &opts), sys::LZMA_OK);
        let mut out = vec![0u8; data.len() + data.len() / 2 + 64];
        s.0.next_in = data.as_ptr();
        s.0.avail_in = data.len();
        s.0.next_out = out.as_mut_ptr();
        s.0.avail_out = out.len();
        let r = sys::lzma_code(&mut s.0, sys::LZMA_FINISH);
        assert_eq!(r, sys::LZMA_STREAM_END);
        assert_eq!(s.0.avail_in, 0, "the encoder consumed everything");
        out.truncate(s.0.total_out as usize);
        s.0.next_in = std::ptr::null();
        s.0.next_out = std::ptr::null_mut();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"erofs microlzma test data, "[i % 27] ^ (i / 1000) as u8)
            .collect()
    }

    #[test]
    fn round_trip_exact_and_prefix() {
        let d = data(50_000);
        let s = encode(&d, 1 << 16);
        let mut out = vec![0u8; d.len()];
        decode(&s, &mut out, true, 1 << 16).unwrap();
        assert_eq!(out, d);
        // A prefix, not exact.
        let mut out = vec![0u8; 1234];
        decode(&s, &mut out, false, 1 << 16).unwrap();
        assert_eq!(out, &d[..1234]);
        // A prefix with the size said to be exact: the stream does not end there.
        let mut out = vec![0u8; 1234];
        assert!(decode(&s, &mut out, true, 1 << 16).is_err());
        // More than the stream holds.
        let mut out = vec![0u8; d.len() + 1];
        assert!(decode(&s, &mut out, true, 1 << 16).is_err());
        // Truncated and damaged input: errors, then the next decode works again.
        let mut out = vec![0u8; d.len()];
        assert!(decode(&s[..s.len() / 2], &mut out, true, 1 << 16).is_err());
        let mut bad = s.clone();
        bad[0] = !0xffu8; // properties byte 0xff: invalid lc/lp/pb
        assert!(decode(&bad, &mut out, true, 1 << 16).is_err());
        decode(&s, &mut out, true, 1 << 16).unwrap();
        assert_eq!(out, d);
    }
}
