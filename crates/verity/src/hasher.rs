//! The prepared, salted block hasher.

use rayon::prelude::*;
use sha2::Digest as _;

use crate::{Digest, Params};

/// Blocks per rayon task when hashing in parallel: big enough that task
/// overhead is negligible (64 × 4 KiB = 256 KiB), small enough to balance;
/// even, so that the 2-way path pairs every whole block.
const PAR_MIN_BLOCKS: usize = 64;

static ZEROS: [u8; 4096] = [0; 4096];

#[derive(Clone)]
enum State {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

/// Hashes blocks the way fs-verity does: `H(padded salt ‖ block)`, with a
/// block shorter than the block size zero-padded to it.
///
/// The salt, zero-padded to the hash's compression block size (64 bytes for
/// SHA-256, 128 for SHA-512), is absorbed once when the hasher is made; each
/// block then starts from a copy of that state, as the kernel's
/// `fsverity_prepare_hash_state()` does. Without a salt the state is the
/// plain initial state.
///
/// `BlockHasher` is `Send + Sync`: share one `&BlockHasher` among threads.
///
/// The hash implementation is the `sha2` crate, which uses the CPU's SHA
/// instructions (x86 SHA-NI, ARMv8 SHA2) when the CPU has them, detected at
/// run time; see `BENCH.md` for the comparison that chose it. In addition,
/// for SHA-256 on x86-64 CPUs with SHA-NI, the multi-block methods
/// ([`hash_blocks_into`](Self::hash_blocks_into),
/// [`par_hash_blocks_into`](Self::par_hash_blocks_into), and so every tree
/// builder) hash whole blocks two at a time with an interleaved SHA-NI
/// kernel, as Linux does since 6.18; results are identical.
#[derive(Clone)]
pub struct BlockHasher {
    params: Params,
    state: State,
    /// SHA-256 only, on CPUs with SHA-NI: the prepared state for the 2-way
    /// interleaved path used by `hash_blocks_into` for whole blocks.
    #[cfg(target_arch = "x86_64")]
    x2: Option<X2State>,
}

#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct X2State {
    state: [u32; 8],
    prefix_len: u64,
}

impl BlockHasher {
    /// A hasher for `params`, with the salted state prepared.
    pub fn new(params: &Params) -> Self {
        let alg = params.alg();
        let mut padded = [0u8; 128];
        let padded = &mut padded[..alg.compression_block_size()];
        let salted = !params.salt().is_empty();
        padded[..params.salt().len()].copy_from_slice(params.salt());
        let state = match alg {
            crate::HashAlg::Sha256 => {
                let mut h = sha2::Sha256::new();
                if salted {
                    h.update(&*padded);
                }
                State::Sha256(h)
            }
            crate::HashAlg::Sha512 => {
                let mut h = sha2::Sha512::new();
                if salted {
                    h.update(&*padded);
                }
                State::Sha512(h)
            }
        };
        BlockHasher {
            params: *params,
            state,
            #[cfg(target_arch = "x86_64")]
            x2: (alg == crate::HashAlg::Sha256 && crate::sha256x2::available()).then(|| {
                let mut state = crate::sha256x2::IV;
                if salted {
                    let block = sha2::digest::generic_array::GenericArray::from_slice(&*padded);
                    sha2::compress256(&mut state, std::slice::from_ref(block));
                }
                X2State {
                    state,
                    prefix_len: if salted { 64 } else { 0 },
                }
            }),
        }
    }

    /// The parameters this hasher was made for.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The hash of one block.
    ///
    /// # Panics
    ///
    /// If `block` is longer than the block size.
    pub fn hash_block(&self, block: &[u8]) -> Digest {
        let mut out = [0u8; crate::MAX_DIGEST_SIZE];
        let d = self.params.digest_size();
        self.hash_block_into(block, &mut out[..d]);
        Digest::from_raw(self.params.alg(), &out[..d])
    }

    /// Writes the hash of one block into `out`.
    ///
    /// # Panics
    ///
    /// If `block` is longer than the block size or `out` is not exactly one
    /// digest long.
    pub fn hash_block_into(&self, block: &[u8], out: &mut [u8]) {
        let bs = self.params.block_size();
        assert!(
            block.len() <= bs,
            "block of {} bytes exceeds the block size {bs}",
            block.len()
        );
        match &self.state {
            State::Sha256(base) => {
                let mut h = base.clone();
                h.update(block);
                pad_zeros(&mut h, bs - block.len());
                out.copy_from_slice(&h.finalize());
            }
            State::Sha512(base) => {
                let mut h = base.clone();
                h.update(block);
                pad_zeros(&mut h, bs - block.len());
                out.copy_from_slice(&h.finalize());
            }
        }
    }

    /// Hashes consecutive blocks of `data` (the last one may be short and is
    /// zero-padded), writing their digests consecutively into `out`.
    ///
    /// # Panics
    ///
    /// If `out.len()` is not `ceil(data.len() / block_size) × digest_size`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    pub fn hash_blocks_into(&self, mut data: &[u8], mut out: &mut [u8]) {
        let (bs, d) = (self.params.block_size(), self.params.digest_size());
        assert_eq!(out.len(), data.len().div_ceil(bs) * d, "output size");
        #[cfg(target_arch = "x86_64")]
        if let Some(x2) = &self.x2 {
            // Whole blocks two at a time through the interleaved SHA-NI path.
            let pairs = data.len() / (2 * bs);
            let (paired, rest) = data.split_at(pairs * 2 * bs);
            let (paired_out, rest_out) = std::mem::take(&mut out).split_at_mut(pairs * 2 * d);
            for (blocks, o) in paired
                .chunks_exact(2 * bs)
                .zip(paired_out.chunks_exact_mut(64))
            {
                let (a, b) = blocks.split_at(bs);
                let (oa, ob) = o.split_at_mut(32);
                #[allow(unsafe_code, reason = "the call into the SHA-NI two-way hasher")]
                // SAFETY: x2 is only set when sha256x2::available() said the
                // CPU has the needed features.
                unsafe {
                    crate::sha256x2::hash_pair(
                        &x2.state,
                        x2.prefix_len,
                        a,
                        b,
                        oa.try_into().expect("32 bytes"),
                        ob.try_into().expect("32 bytes"),
                    );
                }
            }
            data = rest;
            out = rest_out;
        }
        for (block, o) in data.chunks(bs).zip(out.chunks_exact_mut(d)) {
            self.hash_block_into(block, o);
        }
    }

    /// Like [`hash_blocks_into`](Self::hash_blocks_into), spread over the
    /// current rayon thread pool. The output does not depend on the number
    /// of threads.
    ///
    /// # Panics
    ///
    /// If `out.len()` is not `ceil(data.len() / block_size) × digest_size`.
    pub fn par_hash_blocks_into(&self, data: &[u8], out: &mut [u8]) {
        let (bs, d) = (self.params.block_size(), self.params.digest_size());
        assert_eq!(out.len(), data.len().div_ceil(bs) * d, "output size");
        if data.len() <= PAR_MIN_BLOCKS * bs {
            return self.hash_blocks_into(data, out);
        }
        out.par_chunks_mut(PAR_MIN_BLOCKS * d)
            .zip(data.par_chunks(PAR_MIN_BLOCKS * bs))
            .for_each(|(o, blocks)| self.hash_blocks_into(blocks, o));
    }
}

fn pad_zeros(h: &mut impl sha2::Digest, mut n: usize) {
    while n > 0 {
        let k = n.min(ZEROS.len());
        h.update(&ZEROS[..k]);
        n -= k;
    }
}

impl std::fmt::Debug for BlockHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockHasher")
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}
