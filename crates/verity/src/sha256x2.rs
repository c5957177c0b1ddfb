//! Two-way interleaved SHA-256 with the x86 SHA extensions (SHA-NI).
//!
//! Hashes two equal-length messages that share a starting state (the
//! prepared salted state) at once, interleaving their two dependency chains
//! so that a core with more than one SHA unit, or long SHA latency, keeps
//! busy. This is the idea of the kernel's `sha256_finup_2x()` (Linux 6.18);
//! the code is our own, written from the Intel SHA extensions reference flow
//! (as in the RustCrypto `sha2` crate's SHA-NI backend, MIT/Apache-2.0).
//!
//! Only whole tree/data blocks go through here (their length is a multiple
//! of 64 bytes, so the padding is one fixed extra block); everything else
//! uses the `sha2` crate. `BlockHasher` checks the results against `sha2`
//! in the crate's tests.

#![allow(
    unsafe_code,
    reason = "SHA-NI intrinsics hash two blocks at once; std::arch has only unsafe functions"
)]

use std::arch::x86_64::*;

/// SHA-256 round constants.
static K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// SHA-256 initial hash value.
pub(crate) const IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Whether this CPU can run [`hash_pair`].
pub(crate) fn available() -> bool {
    is_x86_feature_detected!("sha")
        && is_x86_feature_detected!("sse2")
        && is_x86_feature_detected!("ssse3")
        && is_x86_feature_detected!("sse4.1")
}

/// Two SHA-256 states in the SHA-NI register layout (ABEF, CDGH).
#[derive(Clone, Copy)]
struct Lanes {
    abef: [__m128i; 2],
    cdgh: [__m128i; 2],
}

/// Message schedule step: W[i..i+4] from the previous 16 words.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
#[inline]
unsafe fn schedule(v0: __m128i, v1: __m128i, v2: __m128i, v3: __m128i) -> __m128i {
    let t1 = _mm_sha256msg1_epu32(v0, v1);
    let t2 = _mm_alignr_epi8(v3, v2, 4);
    _mm_sha256msg2_epu32(_mm_add_epi32(t1, t2), v3)
}

/// Four rounds on both lanes, with message words `w` (one vector per lane)
/// and constants K[4i..4i+4].
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
#[inline]
unsafe fn rounds4(s: &mut Lanes, w: [__m128i; 2], i: usize) {
    let k = _mm_loadu_si128(K.as_ptr().add(4 * i).cast());
    let t0 = _mm_add_epi32(w[0], k);
    let t1 = _mm_add_epi32(w[1], k);
    s.cdgh[0] = _mm_sha256rnds2_epu32(s.cdgh[0], s.abef[0], t0);
    s.cdgh[1] = _mm_sha256rnds2_epu32(s.cdgh[1], s.abef[1], t1);
    let t0 = _mm_shuffle_epi32(t0, 0x0E);
    let t1 = _mm_shuffle_epi32(t1, 0x0E);
    s.abef[0] = _mm_sha256rnds2_epu32(s.abef[0], s.cdgh[0], t0);
    s.abef[1] = _mm_sha256rnds2_epu32(s.abef[1], s.cdgh[1], t1);
}

/// Loads message words 4i..4i+4 of a block, big-endian.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
#[inline]
unsafe fn load(p: *const u8, i: usize) -> __m128i {
    let mask = _mm_set_epi64x(0x0C0D_0E0F_0809_0A0B, 0x0405_0607_0001_0203);
    _mm_shuffle_epi8(_mm_loadu_si128(p.add(16 * i).cast()), mask)
}

/// Compresses one 64-byte block per lane.
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
#[inline]
unsafe fn compress(s: &mut Lanes, a: *const u8, b: *const u8) {
    let save = *s;
    let mut w = [[_mm_setzero_si128(); 2]; 4];
    for (i, wi) in w.iter_mut().enumerate() {
        *wi = [load(a, i), load(b, i)];
        rounds4(s, *wi, i);
    }
    for i in 4..16 {
        let [w0, w1, w2, w3] = w;
        let next = [
            schedule(w0[0], w1[0], w2[0], w3[0]),
            schedule(w0[1], w1[1], w2[1], w3[1]),
        ];
        rounds4(s, next, i);
        w = [w1, w2, w3, next];
    }
    for l in 0..2 {
        s.abef[l] = _mm_add_epi32(s.abef[l], save.abef[l]);
        s.cdgh[l] = _mm_add_epi32(s.cdgh[l], save.cdgh[l]);
    }
}

/// Hashes two messages `prefix ‖ a` and `prefix ‖ b`, where `state` is the
/// SHA-256 state after absorbing `prefix_len` bytes of prefix (a multiple
/// of 64), and `a`, `b` have equal lengths that are multiples of 64.
/// Writes the 32-byte digests to `out_a` and `out_b`.
///
/// # Safety
///
/// The CPU must support SHA, SSE2, SSSE3 and SSE4.1 ([`available`]).
#[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
pub(crate) unsafe fn hash_pair(
    state: &[u32; 8],
    prefix_len: u64,
    a: &[u8],
    b: &[u8],
    out_a: &mut [u8; 32],
    out_b: &mut [u8; 32],
) {
    assert!(a.len() == b.len() && a.len().is_multiple_of(64) && prefix_len.is_multiple_of(64));

    // Load the state (a, b, ..., h) into the ABEF/CDGH layout.
    let p = state.as_ptr().cast::<__m128i>();
    let dcba = _mm_shuffle_epi32(_mm_loadu_si128(p), 0xB1);
    let efgh = _mm_shuffle_epi32(_mm_loadu_si128(p.add(1)), 0x1B);
    let abef = _mm_alignr_epi8(dcba, efgh, 8);
    let cdgh = _mm_blend_epi16(efgh, dcba, 0xF0);
    let mut s = Lanes {
        abef: [abef; 2],
        cdgh: [cdgh; 2],
    };

    for off in (0..a.len()).step_by(64) {
        compress(&mut s, a.as_ptr().add(off), b.as_ptr().add(off));
    }

    // Padding: the message length is a multiple of 64, so it is one block
    // of 0x80, zeros and the bit length, the same for both lanes.
    let mut pad = [0u8; 64];
    pad[0] = 0x80;
    let bits = (prefix_len + a.len() as u64) * 8;
    pad[56..].copy_from_slice(&bits.to_be_bytes());
    compress(&mut s, pad.as_ptr(), pad.as_ptr());

    for (l, out) in [out_a, out_b].into_iter().enumerate() {
        let feba = _mm_shuffle_epi32(s.abef[l], 0x1B);
        let dchg = _mm_shuffle_epi32(s.cdgh[l], 0xB1);
        let dcba = _mm_blend_epi16(feba, dchg, 0xF0);
        let hgef = _mm_alignr_epi8(dchg, feba, 8);
        let mut words = [0u32; 8];
        let q = words.as_mut_ptr().cast::<__m128i>();
        _mm_storeu_si128(q, dcba);
        _mm_storeu_si128(q.add(1), hgef);
        for (o, w) in out.chunks_exact_mut(4).zip(words) {
            o.copy_from_slice(&w.to_be_bytes());
        }
    }
}
