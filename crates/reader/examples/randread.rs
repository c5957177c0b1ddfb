//! Repeated random 4 KiB reads of one file of an image through the reader, for the cluster-cache
//! benchmark: `randread IMAGE PATH [--cache-bytes N] [--reads N] [--distinct N] [--seed N]`.
//!
//! Picks `distinct` random 4 KiB-aligned offsets of the file, then reads `reads` times from them in
//! random order (so regions repeat, as a working set does), and prints the elapsed time and the
//! reader's statistics as one JSON line.

use sealfs_reader::{Follow, Image, Options, SubRange};
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!(
            "usage: randread IMAGE PATH [--cache-bytes N] [--reads N] [--distinct N] [--seed N]"
        );
        std::process::exit(2);
    }
    let opt = |name: &str, default: u64| -> u64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let cache = opt(
        "--cache-bytes",
        sealfs_reader::DEFAULT_CLUSTER_CACHE_BYTES as u64,
    ) as usize;
    let reads = opt("--reads", 20_000);
    let distinct = opt("--distinct", 2_000);
    let mut seed = opt("--seed", 42) | 1;
    let file = std::fs::File::open(&args[1])?;
    // The EROFS part: the superblock's block count (a sealed image carries its seal after it).
    let mut sb = [0u8; 128];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut sb, 1024)?;
    let len = (u32::from_le_bytes(sb[36..40].try_into()?) as u64) << sb[12];
    let img = Image::open_unverified_with(
        SubRange::new(file, 0, len),
        &Options {
            cluster_cache_bytes: cache,
            ..Options::default()
        },
    )?;
    let inode = img.resolve(&args[2], Follow::All)?;
    let blocks = inode.size() / 4096;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let offsets: Vec<u64> = (0..distinct)
        .map(|_| next() % blocks.max(1) * 4096)
        .collect();
    let mut buf = vec![0u8; 4096];
    let t = Instant::now();
    for _ in 0..reads {
        let off = offsets[(next() % distinct) as usize];
        img.read(&inode, off, &mut buf)?;
    }
    let el = t.elapsed().as_secs_f64();
    let s = img.stats();
    println!(
        "{{\"seconds\": {el:.4}, \"reads\": {reads}, \"cache_bytes\": {cache}, \"cluster_hits\": {}, \"cluster_misses\": {}, \"evictions\": {}, \"compressed_bytes_read\": {}, \"decompressed_bytes\": {}, \"peak_cache_bytes\": {}}}",
        s.cluster_hits, s.cluster_misses, s.cluster_evictions, s.compressed_bytes_read, s.decompressed_bytes, s.cluster_cache_peak_bytes
    );
    Ok(())
}
