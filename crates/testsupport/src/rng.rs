//! A small deterministic PRNG (xorshift64*), so every test input is reproducible without a
//! dependency, and [`pseudo_random`], a fast fill of large buffers from the same generator.
//!
//! Three seedings exist because the suites grew their own and their inputs (compressed sizes,
//! corruption trials, fuzz mutations, fixtures) were tuned against the exact streams: [`Rng::new`]
//! takes the seed as the state, [`Rng::scrambled`] mixes it with one XOR, [`Rng::splitmix`] with
//! splitmix64. All are kept so every test sees the bytes it always saw.

/// xorshift64* state.
#[derive(Clone, Debug)]
pub struct Rng(u64);

/// The golden-ratio constant used to replace or mix seeds.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// The xorshift64* output multiplier.
const MUL: u64 = 0x2545_F491_4F6C_DD1D;

impl Rng {
    /// A generator whose state is `seed` (0, a fixed point, is replaced by a constant).
    pub fn new(seed: u64) -> Rng {
        Rng(if seed == 0 { GOLDEN } else { seed })
    }

    /// A generator whose state is `seed ^ GOLDEN | 1` (never 0).
    pub fn scrambled(seed: u64) -> Rng {
        Rng(seed ^ GOLDEN | 1)
    }

    /// A generator whose state is splitmix64 of `seed` (`| 1`), so that neighbouring seeds give
    /// unrelated streams.
    pub fn splitmix(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(GOLDEN);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(MUL)
    }

    /// Uniform-ish in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

/// `len` deterministic pseudo-random bytes, fast enough for hundreds of MiB: the generator seeded
/// with `seed * GOLDEN | 1`, eight bytes per step; a final partial word is `0x5a` bytes.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut rng = Rng(seed.wrapping_mul(GOLDEN) | 1);
    let mut chunks = v.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    for b in chunks.into_remainder() {
        *b = 0x5a;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streams the suites were written against: the first outputs of each seeding.
    #[test]
    fn seedings_keep_their_streams() {
        // Reference: the xorshift64* step written out, as the suites had it.
        fn step(x: &mut u64) -> u64 {
            *x ^= *x >> 12;
            *x ^= *x << 25;
            *x ^= *x >> 27;
            x.wrapping_mul(MUL)
        }
        let mut a = Rng::new(7);
        let mut s = 7u64;
        let mut b = Rng::scrambled(7);
        let mut t = 7 ^ GOLDEN | 1;
        for _ in 0..4 {
            assert_eq!(a.next_u64(), step(&mut s));
            assert_eq!(b.next_u64(), step(&mut t));
        }
        // splitmix64(0) is 0xE220_A839_7B1D_CDAF (its published first output).
        let mut c = Rng::splitmix(0);
        let mut u = 0xE220_A839_7B1D_CDAF_u64;
        assert_eq!(c.next_u64(), step(&mut u));
        let v = pseudo_random(20, 3);
        let mut u = 3u64.wrapping_mul(GOLDEN) | 1;
        assert_eq!(v[..8], step(&mut u).to_le_bytes());
        assert_eq!(v[8..16], step(&mut u).to_le_bytes());
        assert_eq!(v[16..], [0x5a; 4]);
        assert_eq!(Rng::new(0).next_u64(), Rng::new(GOLDEN).next_u64());
    }
}
