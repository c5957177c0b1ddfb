//! File contents of mixed compressibility, for compressed builds: runs of text (words of a
//! vocabulary drawn per file), noise, zeros and short repeated patterns, in random order and
//! lengths. Every codec then cuts such a file into extents of many compressed lengths, some
//! stored raw, whose ends fall at every offset of a block. Deterministic per generator state.

use crate::Rng;

/// `len` bytes of mixed content from `rng`: runs of 1 byte to 24 KiB, each text (half of them),
/// noise, zeros or a repeated pattern of 1 to 64 bytes.
pub fn mixed_content(len: usize, rng: &mut Rng) -> Vec<u8> {
    let vocabulary: Vec<Vec<u8>> = (0..1 + rng.below(400))
        .map(|_| {
            (0..1 + rng.below(12))
                .map(|_| b'a' + rng.below(26) as u8)
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let run = (1 + rng.below(24 << 10) as usize).min(len - out.len());
        let end = out.len() + run;
        match rng.below(8) {
            0..=3 => {
                while out.len() < end {
                    out.extend_from_slice(&vocabulary[rng.below(vocabulary.len() as u64) as usize]);
                    out.push(b" \n,."[rng.below(4) as usize]);
                }
                out.truncate(end);
            }
            4 | 5 => out.extend_from_slice(&rng.bytes(run)),
            6 => out.resize(end, 0),
            _ => {
                let n = 1 + rng.below(64) as usize;
                let pattern = rng.bytes(n);
                out.extend(pattern.iter().cycle().take(run));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_content_is_deterministic_and_of_the_length_asked() {
        for len in [0, 1, 4095, 4096, 100_000] {
            let a = mixed_content(len, &mut Rng::splitmix(9));
            assert_eq!(a.len(), len);
            assert_eq!(a, mixed_content(len, &mut Rng::splitmix(9)));
        }
    }
}
