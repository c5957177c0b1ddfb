//! Throughput of this crate's hashing, on this machine.
//!
//! `cargo run --release -p sealfs-verity --example sha_bench [MiB]`
//!
//! - single thread, 4 KiB blocks, salted (state prepared once and cloned per
//!   block) and unsalted, SHA-256 and SHA-512: `BlockHasher::hash_block_into`
//!   block by block (the `sha2` crate) and `BlockHasher::hash_blocks_into`
//!   (for SHA-256 with SHA-NI: the 2-way interleaved kernel);
//! - whole trees with the default rayon pool: `build_tree` (in memory) and
//!   `build_tree_from_file` (positional reads of a page-cached file).
//!
//! The comparison of SHA crates that chose `sha2` is in `../sha-bench/`
//! (a separate package, so sealfs does not depend on ring/openssl);
//! results in `../BENCH.md`.

use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

use sealfs_verity::{build_tree, build_tree_from_file, BlockHasher, HashAlg, Params};

fn data(len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for c in v.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    v
}

/// Best of `rounds` runs of `f` over `bytes` bytes, in MB/s.
fn mbps(bytes: usize, rounds: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    bytes as f64 / best / 1e6
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().expect("size in MiB"))
        .unwrap_or(256);
    let buf = data(mib << 20);
    let small = &buf[..buf.len().min(16 << 20)];

    println!(
        "single thread, 4096-byte blocks, best of 7 over {} MiB:",
        small.len() >> 20
    );
    for alg in HashAlg::ALL {
        for salt in [&b""[..], &[0xa5; 32][..]] {
            let params = Params::new(alg, 4096, salt).unwrap();
            let h = BlockHasher::new(&params);
            let d = alg.digest_size();
            let mut out = vec![0u8; small.len() / 4096 * d];
            let one = mbps(small.len(), 7, || {
                for (b, o) in small.chunks(4096).zip(out.chunks_mut(d)) {
                    h.hash_block_into(b, o);
                }
                black_box(&out);
            });
            let multi = mbps(small.len(), 7, || {
                h.hash_blocks_into(small, &mut out);
                black_box(&out);
            });
            let s = if salt.is_empty() {
                "no salt"
            } else {
                "32-byte salt"
            };
            println!(
                "  {alg} {s:<13} one by one {one:>6.0} MB/s   hash_blocks_into {multi:>6.0} MB/s"
            );
        }
    }

    let threads = rayon::current_num_threads();
    println!("whole tree, {threads} rayon threads, {mib} MiB, best of 3:");
    for alg in HashAlg::ALL {
        let params = Params::new(alg, 4096, &[]).unwrap();
        let r = mbps(buf.len(), 3, || {
            black_box(build_tree(&params, &buf).unwrap());
        });
        println!("  build_tree {alg}            {r:>6.0} MB/s");
    }
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&buf).unwrap();
    f.flush().unwrap();
    let file = f.reopen().unwrap();
    let params = Params::default();
    let r = mbps(buf.len(), 3, || {
        black_box(build_tree_from_file(&params, &file, 0, buf.len() as u64).unwrap());
    });
    println!("  build_tree_from_file sha256 {r:>6.0} MB/s (page-cached file)");
}
