//! The importers' fuzz targets, replayed on stable Rust: each seed as it is, then deterministic
//! mutations of each (fixed seeds). Errors are fine, panics are bugs.
//!
//! - `tar_build`: seeds `fuzz/corpus/tar_build` (made by `fuzz/make_tar_corpus.sh` with GNU tar
//!   and bsdtar) and saved crashes (`tests/fuzz_regressions`); bit flips, bytes set,
//!   truncations, insertions, deletions, half of them in the first 2 KiB where the headers are;
//!   the stream and file reads must agree (see the harness).
//! - `oci_spec`: seeds `fuzz/corpus/oci_spec` (made by `fuzz/make_oci_corpus.sh` with umoci and
//!   skopeo); the same mutations and JSON's own bytes where they change its shape.
//! - `squashfs_build`: seeds `fuzz/corpus/squashfs_build` (made by
//!   `fuzz/make_squashfs_corpus.sh` with mksquashfs) and saved crashes
//!   (`tests/fuzz_regressions/squashfs`); bit flips, bytes and little-endian fields set to
//!   edge values, truncations, half of them in the superblock and the tables (the image's end).
//!
//! The harnesses are NOT copies: they are `fuzz/src/tar_harness.rs`, `fuzz/src/oci_harness.rs`
//! and `fuzz/src/squashfs_harness.rs`, the files the fuzz targets run. `SEALFS_FUZZ_SCALE=N`
//! runs N times as many mutations.

#[path = "../../../fuzz/src/tar_harness.rs"]
mod tar_harness;

#[path = "../../../fuzz/src/oci_harness.rs"]
mod oci_harness;

#[path = "../../../fuzz/src/squashfs_harness.rs"]
mod squashfs_harness;

use sealfs_testsupport::Rng;
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// Mutations of each seed (times SEALFS_FUZZ_SCALE).
const MUTATIONS: u64 = 120;

fn inputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            !n.starts_with('.') && !n.ends_with(".md")
        })
        .map(|p| (p.display().to_string(), fs::read(&p).unwrap()))
        .collect();
    out.sort();
    out
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if d.is_empty() {
            d.push(0);
        }
        let span = if rng.below(2) == 0 {
            d.len().min(2048)
        } else {
            d.len()
        } as u64;
        let at = rng.below(span) as usize;
        match rng.below(6) {
            0 => d[at] ^= 1 << rng.below(8),
            1 => d[at] = [0, 0xff, b'0', b'7', b' ', b'\n', b'9'][rng.below(7) as usize],
            2 => d.truncate(at),
            3 => {
                let n = rng.below(64) as usize;
                let bytes = rng.bytes(n);
                d.splice(at..at, bytes);
            }
            4 => {
                let end = (at + rng.below(600) as usize).min(d.len());
                d.drain(at..end);
            }
            _ => {
                // A digit run, where numbers (sizes, PAX lengths) are.
                let end = (at + 1 + rng.below(11) as usize).min(d.len());
                for b in &mut d[at..end] {
                    *b = b'0' + rng.below(8) as u8;
                }
            }
        }
    }
    d
}

/// Replays `seeds` and `mutations` of each (made by `mutate`, seeded from `salt`) through `run`,
/// catching panics; a panicking input is kept under target/tmp/`what`_fuzz-failure-N. Fails
/// listing at most five. `SEALFS_FUZZ_SCALE` multiplies the mutations.
fn replay(
    what: &str,
    seeds: &[(String, Vec<u8>)],
    salt: u64,
    mutations: u64,
    mutate: impl Fn(&mut Rng, &[u8]) -> Vec<u8>,
    run: impl Fn(&Path, &[u8]),
) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scale: u64 = std::env::var("SEALFS_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut runs = 0;
    for (name, seed) in seeds {
        let mut rng = Rng::new(seed.len() as u64 ^ salt);
        let mut cases = vec![seed.clone()];
        for _ in 0..mutations * scale {
            cases.push(mutate(&mut rng, seed));
        }
        for (i, case) in cases.iter().enumerate() {
            runs += 1;
            if catch_unwind(AssertUnwindSafe(|| run(dir.path(), case))).is_err() {
                let keep = root.join(format!(
                    "../../target/tmp/{what}_fuzz-failure-{}",
                    failures.len()
                ));
                let _ = fs::create_dir_all(keep.parent().unwrap());
                let _ = fs::write(&keep, case);
                failures.push(format!("{name} mutation {i}: kept at {}", keep.display()));
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    println!("{what}: {runs} inputs, {} panicked", failures.len());
    assert!(failures.is_empty(), "panics: {failures:#?}");
}

#[test]
fn tar_corpus_and_mutations_never_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seeds = inputs(&root.join("../../fuzz/corpus/tar_build"));
    assert!(
        seeds.len() >= 8,
        "the seed corpus is missing (fuzz/make_tar_corpus.sh)"
    );
    seeds.extend(inputs(&root.join("tests/fuzz_regressions")));
    replay(
        "tar",
        &seeds,
        0x7a72,
        MUTATIONS,
        mutate,
        tar_harness::tar_build_in,
    );
}

#[test]
fn oci_corpus_and_mutations_never_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let seeds = inputs(&root.join("../../fuzz/corpus/oci_spec"));
    assert!(
        seeds.len() >= 8,
        "the seed corpus is missing (fuzz/make_oci_corpus.sh)"
    );
    // (Each input is read through a layout on disk: fewer mutations keep the test short.)
    let mutate_json = |rng: &mut Rng, seed: &[u8]| {
        let mut case = mutate(rng, seed);
        // JSON's own bytes where they change its shape.
        let at = rng.below(case.len().max(1) as u64) as usize;
        if at < case.len() {
            case[at] = b"\"{}[],:-0e"[rng.below(10) as usize];
        }
        case
    };
    replay(
        "oci",
        &seeds,
        0x0c1,
        MUTATIONS / 3,
        mutate_json,
        oci_harness::oci_spec_in,
    );
}

/// A mutation of a SquashFS image: half of them in the superblock or the tables (which
/// mksquashfs writes after the data, at the end).
fn mutate_image(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    let tables = seed
        .get(64..72)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()) as usize)
        .min(seed.len());
    for _ in 0..1 + rng.below(3) {
        if d.is_empty() {
            d.push(0);
        }
        let at = match rng.below(4) {
            0 => rng.below(96.min(d.len()) as u64) as usize,
            1 if tables < d.len() => tables + rng.below((d.len() - tables) as u64) as usize,
            _ => rng.below(d.len() as u64) as usize,
        };
        match rng.below(6) {
            0 | 1 => d[at] ^= 1 << rng.below(8),
            2 => d[at] = [0, 0xff, 1, 0x80, 0x7f][rng.below(5) as usize],
            3 => d.truncate(at),
            _ => {
                // A little-endian field set to an edge value.
                let v: u64 = [
                    0,
                    1,
                    2,
                    3,
                    0xff,
                    0x100,
                    0x1fff,
                    0x2000,
                    0x8000,
                    0xffff,
                    1 << 24,
                ][rng.below(11) as usize];
                let v = match rng.below(3) {
                    0 => v,
                    1 => v.wrapping_neg(),
                    _ => v << 16,
                };
                let width = [2usize, 4, 8][rng.below(3) as usize];
                let end = (at + width).min(d.len());
                d[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
            }
        }
    }
    d
}

#[test]
fn squashfs_corpus_and_mutations_never_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seeds = inputs(&root.join("../../fuzz/corpus/squashfs_build"));
    assert!(
        seeds.len() >= 8,
        "the seed corpus is missing (fuzz/make_squashfs_corpus.sh)"
    );
    seeds.extend(inputs(&root.join("tests/fuzz_regressions/squashfs")));
    replay(
        "squashfs",
        &seeds,
        0x5173,
        MUTATIONS,
        mutate_image,
        squashfs_harness::squashfs_build_in,
    );
}
