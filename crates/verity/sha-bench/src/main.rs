//! Throughput of salted fs-verity block hashing with several SHA crates.
//!
//! Each candidate prepares the salted state once (salt zero-padded to 64 or
//! 128 bytes), then for every 4 KiB block clones the state, feeds the block
//! and finalizes: exactly the per-block work of a Merkle-tree builder. The
//! last candidates are sealfs-verity's own `BlockHasher::hash_blocks_into`
//! (SHA-256: 2-way interleaved SHA-NI kernel; SHA-512: sha2).
//!
//! Candidates are run in interleaved rounds so that load from elsewhere on
//! the machine hits all of them alike; best and median of the rounds are
//! printed.
//!
//! Run: `cargo run --release [--features sha2-asm|sha2-soft|aws-lc-rs]`

use std::hint::black_box;
use std::time::Instant;

const BLOCK: usize = 4096;
const DATA: usize = 16 << 20; // buffer hashed per pass
const TOTAL: usize = 128 << 20; // bytes hashed per measurement
const ROUNDS: usize = 7;

/// A named candidate: hashes every 4 KiB block of its argument.
type Candidate<'a> = (String, Box<dyn FnMut(&[u8]) -> u8 + 'a>);

/// Per-block loop shared by the crates with a cloneable hasher.
macro_rules! per_block {
    ($base:expr, $update:ident, $finish:ident) => {{
        let base = $base;
        Box::new(move |data: &[u8]| {
            let mut acc = 0u8;
            for b in data.chunks(BLOCK) {
                let mut h = base.clone();
                h.$update(b);
                acc ^= first(h.$finish());
            }
            acc
        })
    }};
}

fn first(d: impl AsRef<[u8]>) -> u8 {
    d.as_ref()[0]
}

fn run(data: &[u8], mut cands: Vec<Candidate<'_>>) {
    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); cands.len()];
    for _ in 0..ROUNDS {
        for (i, (_, f)) in cands.iter_mut().enumerate() {
            let t = Instant::now();
            let mut acc = 0u8;
            for _ in 0..TOTAL / data.len() {
                acc ^= f(data);
            }
            black_box(acc);
            secs[i].push(t.elapsed().as_secs_f64() / TOTAL as f64);
        }
    }
    println!(
        "{:<44} {:>9} {:>9}",
        "candidate (4096-byte blocks)", "best MB/s", "median"
    );
    for ((name, _), mut s) in cands.iter().zip(secs) {
        s.sort_by(f64::total_cmp);
        println!(
            "{name:<44} {:>9.0} {:>9.0}",
            1e-6 / s[0],
            1e-6 / s[s.len() / 2]
        );
    }
}

fn padded<const N: usize>(salt: &[u8]) -> [u8; N] {
    let mut p = [0u8; N];
    p[..salt.len()].copy_from_slice(salt);
    p
}

fn main() {
    let mut data = vec![0u8; DATA];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for c in data.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    let salt = [0xa5u8; 32];
    let p64: [u8; 64] = padded(&salt);
    let p128: [u8; 128] = padded(&salt);
    let feat = if cfg!(feature = "sha2-asm") {
        " +asm"
    } else if cfg!(feature = "sha2-soft") {
        " +force-soft"
    } else {
        ""
    };
    let mut cands: Vec<Candidate<'_>> = Vec::new();
    {
        use sha2_10::{Digest, Sha256, Sha512};
        let mut h = Sha256::new();
        h.update(p64);
        cands.push((
            format!("sha2 0.10{feat} sha256 salted"),
            per_block!(h, update, finalize),
        ));
        cands.push((
            format!("sha2 0.10{feat} sha256 unsalted"),
            per_block!(Sha256::new(), update, finalize),
        ));
        let mut h = Sha512::new();
        h.update(p128);
        cands.push((
            format!("sha2 0.10{feat} sha512 salted"),
            per_block!(h, update, finalize),
        ));
    }
    {
        use sha2_11::{Digest, Sha256, Sha512};
        let mut h = Sha256::new();
        h.update(p64);
        cands.push((
            "sha2 0.11 sha256 salted".into(),
            per_block!(h, update, finalize),
        ));
        let mut h = Sha512::new();
        h.update(p128);
        cands.push((
            "sha2 0.11 sha512 salted".into(),
            per_block!(h, update, finalize),
        ));
    }
    {
        use ring::digest::{Context, SHA256, SHA512};
        let mut h = Context::new(&SHA256);
        h.update(&p64);
        cands.push((
            "ring 0.17 sha256 salted".into(),
            per_block!(h, update, finish),
        ));
        let mut h = Context::new(&SHA512);
        h.update(&p128);
        cands.push((
            "ring 0.17 sha512 salted".into(),
            per_block!(h, update, finish),
        ));
    }
    {
        // openssl::sha::Sha256/512 wrap SHA256_CTX/SHA512_CTX and are Clone.
        use openssl::sha::{Sha256, Sha512};
        let mut h = Sha256::new();
        h.update(&p64);
        cands.push((
            "openssl 0.10 sha256 salted".into(),
            per_block!(h, update, finish),
        ));
        let mut h = Sha512::new();
        h.update(&p128);
        cands.push((
            "openssl 0.10 sha512 salted".into(),
            per_block!(h, update, finish),
        ));
    }
    #[cfg(feature = "aws-lc-rs")]
    {
        use aws_lc_rs::digest::{Context, SHA256, SHA512};
        let mut h = Context::new(&SHA256);
        h.update(&p64);
        cands.push((
            "aws-lc-rs 1 sha256 salted".into(),
            per_block!(h, update, finish),
        ));
        let mut h = Context::new(&SHA512);
        h.update(&p128);
        cands.push((
            "aws-lc-rs 1 sha512 salted".into(),
            per_block!(h, update, finish),
        ));
    }
    {
        use sealfs_verity::{BlockHasher, HashAlg, Params};
        for alg in HashAlg::ALL {
            let h = BlockHasher::new(&Params::new(alg, BLOCK, &salt).unwrap());
            let mut out = vec![0u8; DATA / BLOCK * alg.digest_size()];
            let name = match alg {
                HashAlg::Sha256 => "sealfs-verity 2-way SHA-NI sha256 salted",
                HashAlg::Sha512 => "sealfs-verity (sha2) sha512 salted",
            };
            cands.push((
                name.into(),
                Box::new(move |data: &[u8]| {
                    h.hash_blocks_into(data, &mut out);
                    out[0]
                }),
            ));
        }
    }
    run(&data, cands);
}
