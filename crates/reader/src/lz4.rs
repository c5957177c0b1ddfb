//! Whole LZ4 blocks decoded by liblz4 (built and linked by `lz4-sys`): `LZ4_decompress_safe`, the
//! decoder the kernel's EROFS uses, made for untrusted input, and faster than a safe Rust decoder
//! (`lz4_flex`'s took 45% of a FUSE daemon's time reading an lz4hc file).

#![allow(
    unsafe_code,
    reason = "liblz4 is a C library, reached through the declarations of lz4-sys"
)]

/// Bytes liblz4 decoded, or why it stopped: it returns minus the input position it failed at.
fn lz4_result(r: std::ffi::c_int) -> std::result::Result<usize, String> {
    usize::try_from(r).map_err(|_| format!("malformed at input byte {}", -(r as i64) - 1))
}

/// LZ4 block decoding of a whole stream into `out`, replacing its contents, at most `max` bytes
/// (`LZ4_decompress_safe`): returns the bytes written, now `out.len()`; a stream that would write
/// more is malformed. The bytes are written into `out`'s spare capacity, never zeroed first.
pub(crate) fn lz4_decode(
    src: &[u8],
    out: &mut Vec<u8>,
    max: usize,
) -> std::result::Result<usize, String> {
    out.clear();
    out.reserve(max);
    // SAFETY: the spare capacity holds at least `max` bytes; the length is set to what liblz4
    // reports written (at most `max`), which it initialised.
    let written = unsafe { decode_raw(src, out.as_mut_ptr(), max)? };
    // SAFETY: liblz4 initialised the first `written <= max` bytes.
    unsafe { out.set_len(written) };
    Ok(written)
}

/// [`lz4_decode`] into a slice: the whole stream decoded into `out` (at most `out.len()` bytes;
/// a stream that would write more is malformed); returns the bytes written. The decoder writes
/// straight into `out` (a FUSE reply's buffer), with no copy after it.
pub(crate) fn lz4_decode_to(src: &[u8], out: &mut [u8]) -> std::result::Result<usize, String> {
    // SAFETY: `out` is `out.len()` writable bytes.
    unsafe { decode_raw(src, out.as_mut_ptr(), out.len()) }
}

/// `LZ4_decompress_safe` of `src` into `cap` bytes at `dst`.
///
/// # Safety
///
/// `dst` must be valid for writes of `cap` bytes.
unsafe fn decode_raw(src: &[u8], dst: *mut u8, cap: usize) -> std::result::Result<usize, String> {
    let (n, cap) = (src.len() as std::ffi::c_int, cap as std::ffi::c_int);
    // SAFETY: liblz4 reads at most `n` bytes of `src` and writes at most `cap` bytes at `dst`,
    // whatever the input (both at most 12 MiB, bounded by the map), which the caller makes valid.
    let r = unsafe { lz4_sys::LZ4_decompress_safe(src.as_ptr().cast(), dst.cast(), n, cap) };
    lz4_result(r)
}
