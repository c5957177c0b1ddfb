//! The fuzzers' seed corpus and every saved fuzz crash, walked on stable Rust in the normal test
//! suite: a malformed image never panics (errors are fine, panics are bugs).
//!
//! Inputs: every file of `fuzz/corpus/open_walk` (small valid images, see `fuzz/make_corpus.sh`)
//! and of `crates/reader/tests/fuzz_regressions` (crashes the fuzzers found, saved after
//! minimizing), each walked as it is, then 2,000 deterministic mutations of each seed (bit flips,
//! interesting values, truncations, insertions, deletions, copies; fixed seeds); and verified opens:
//! `fuzz/corpus/verified_open_walk`, `fuzz_regressions/verified`, and each seed under honest
//! Merkle trees (random parameters, attached or sidecar, cache sizes) with damage, and as raw seals.
//! The seal targets: `fuzz/corpus/{seal_trailer,file_digests,file_table,signatures,sealed_open}` and
//! `fuzz_regressions/<target>`, each as it is and with deterministic mutations (half of them in the
//! trailer at the end).
//!
//! The walk is NOT a copy: `harness.rs` below is the very file the cargo-fuzz targets use
//! (`fuzz/src/harness.rs`), so the fuzzers and this test cannot drift apart.
//!
//! `SEALFS_FUZZ_SCALE=N` runs N times as many mutations. A panicking input is written to
//! `target/tmp/fuzz_corpus-failures/` for `cargo +nightly fuzz run open_walk <file>` or this test.

#[path = "../../../fuzz/src/harness.rs"]
mod harness;

use sealfs_testsupport::Rng;
use std::fs;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// Mutations of each open_walk seed (times SEALFS_FUZZ_SCALE).
const MUTATIONS: u64 = 2000;
/// Verified opens of each seed under a correct tree with damage (times SEALFS_FUZZ_SCALE).
const VERIFIED_MUTATIONS: u64 = 40;
/// Mutations of each seal_trailer and file_digests seed (times SEALFS_FUZZ_SCALE).
const SEAL_MUTATIONS: u64 = 300;
/// Mutations of each sealed_open seed (times SEALFS_FUZZ_SCALE): each runs several opens, walks
/// and a whole-image check.
const SEALED_OPEN_MUTATIONS: u64 = 30;
/// At most this many failures are collected before the test stops and reports.
const MAX_FAILURES: usize = 5;

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn scale() -> u64 {
    std::env::var("SEALFS_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1)
}

/// The files of `dir` (sorted; READMEs and dotfiles skipped). A missing directory is empty.
fn inputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = rd
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            !name.starts_with('.') && !name.starts_with("README")
        })
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, fs::read(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// A random mutation of `base`, and what it was (for the failure report).
fn mutate(base: &[u8], rng: &mut Rng) -> (Vec<u8>, String) {
    let mut b = base.to_vec();
    let len = b.len() as u64;
    // Most positions in the metadata at the start (superblock, inodes, directories).
    let pos = |rng: &mut Rng, len: u64| -> usize {
        if len == 0 {
            0
        } else if rng.below(4) == 0 {
            rng.below(len) as usize
        } else {
            let meta = len.min(3 * 4096);
            let lo = 1024.min(meta - 1);
            (lo + rng.below(meta - lo)) as usize
        }
    };
    let what;
    match rng.below(8) {
        0 | 1 if len > 0 => {
            let n = 1 + rng.below(8);
            for _ in 0..n {
                let p = pos(rng, len);
                b[p] ^= 1 << rng.below(8);
            }
            what = format!("{n} bit flips");
        }
        2 if len > 0 => {
            let n = 1 + rng.below(4);
            for _ in 0..n {
                let p = pos(rng, len);
                b[p] = [0, 0xff, 0x7f, 0x80, 1, 0xfe][rng.below(6) as usize];
            }
            what = format!("{n} interesting bytes");
        }
        3 if len >= 8 => {
            // An interesting little-endian integer of 2, 4 or 8 bytes.
            let width = [2usize, 4, 8][rng.below(3) as usize];
            let p = pos(rng, len).min(b.len() - width);
            let v: u64 = [
                0,
                1,
                u64::MAX,
                u64::MAX >> 1,
                1 << 31,
                1 << 32,
                4096,
                0xffff_fffe,
            ][rng.below(8) as usize];
            b[p..p + width].copy_from_slice(&v.to_le_bytes()[..width]);
            what = format!("{width}-byte value {v:#x} at {p}");
        }
        4 => {
            let cut = rng.below(len + 1) as usize;
            b.truncate(cut);
            what = format!("truncated to {cut}");
        }
        5 => {
            let p = pos(rng, len).min(b.len());
            let n = 1 + rng.below(16) as usize;
            let ins: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            b.splice(p..p, ins);
            what = format!("{n} bytes inserted at {p}");
        }
        6 if len > 0 => {
            let p = pos(rng, len);
            let n = (1 + rng.below(64) as usize).min(b.len() - p);
            b.drain(p..p + n);
            what = format!("{n} bytes deleted at {p}");
        }
        _ if len > 0 => {
            // A block-sized chunk copied over another (the fuzzers' CopyPart).
            let from = pos(rng, len);
            let to = pos(rng, len);
            let n = (1 + rng.below(4096) as usize).min(b.len() - from.max(to));
            b.copy_within(from..from + n, to);
            what = format!("{n} bytes copied from {from} to {to}");
        }
        _ => what = "unchanged".to_string(),
    }
    (b, what)
}

struct Failures {
    list: Vec<String>,
    dir: PathBuf,
}

impl Failures {
    /// Runs `f` on `input`; a panic is recorded (and the input saved). Returns false once there
    /// are enough failures to stop.
    fn run(&mut self, what: &str, input: &[u8], f: fn(&[u8])) -> bool {
        if catch_unwind(AssertUnwindSafe(|| f(input))).is_err() {
            fs::create_dir_all(&self.dir).unwrap();
            let file = self.dir.join(format!("crash-{:016x}", fnv1a(input)));
            fs::write(&file, input).unwrap();
            self.list.push(format!(
                "{what}: panicked (input saved to {})",
                file.display()
            ));
        }
        self.list.len() < MAX_FAILURES
    }

    fn check(self) {
        assert!(
            self.list.is_empty(),
            "the reader panicked on {} input(s) (message and stack above):\n{}",
            self.list.len(),
            self.list.join("\n")
        );
    }
}

fn failures() -> Failures {
    Failures {
        list: Vec::new(),
        dir: Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz_corpus-failures"),
    }
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let seeds = inputs(&repo_path("../../fuzz/corpus/open_walk"));
    assert!(
        seeds.len() >= 5,
        "the seed corpus fuzz/corpus/open_walk is missing (regenerate it with fuzz/make_corpus.sh)"
    );
    seeds
}

/// Every seed and every saved regression, as it is.
#[test]
fn corpus_and_regressions_never_panic() {
    let mut f = failures();
    let seeds = seeds();
    let regressions = inputs(&repo_path("tests/fuzz_regressions"));
    let mut verified = inputs(&repo_path("../../fuzz/corpus/verified_open_walk"));
    verified.extend(inputs(&repo_path("tests/fuzz_regressions/verified")));
    for (name, bytes) in seeds.iter().chain(&regressions) {
        if !f.run(&format!("open_walk {name}"), bytes, harness::open_walk) {
            break;
        }
    }
    for (name, bytes) in &verified {
        if !f.run(
            &format!("verified_open_walk {name}"),
            bytes,
            harness::verified_open_walk,
        ) {
            break;
        }
    }
    f.check();
    // The seeds are valid images: they must open, or the mutations test little.
    let unopened: Vec<&str> = seeds
        .iter()
        .filter(|(_, bytes)| sealfs_reader::Image::open_unverified(bytes.clone()).is_err())
        .map(|(name, _)| name.as_str())
        .collect();
    assert!(unopened.is_empty(), "seeds that do not open: {unopened:?}");
}

/// Deterministic mutations of every seed.
#[test]
fn mutated_corpus_never_panics() {
    let mut f = failures();
    let n = MUTATIONS * scale();
    'seeds: for (name, base) in seeds() {
        for i in 0..n {
            let mut rng = Rng::splitmix(fnv1a(name.as_bytes()) ^ i);
            let (bytes, what) = mutate(&base, &mut rng);
            if !f.run(
                &format!("open_walk {name}, mutation {i} ({what})"),
                &bytes,
                harness::open_walk,
            ) {
                break 'seeds;
            }
        }
    }
    f.check();
}

/// Verified opens of every seed: a correct Merkle tree (several parameter sets, attached or
/// sidecar, cache sizes), then damage to the image or the tree; and some raw seals.
#[test]
fn verified_corpus_never_panics() {
    let mut f = failures();
    let n = VERIFIED_MUTATIONS * scale();
    'seeds: for (name, base) in seeds() {
        for i in 0..n {
            let mut rng = Rng::splitmix(fnv1a(name.as_bytes()) ^ (i << 32) ^ 0x5eed);
            let mode = rng.next_u64() as u8 & !1; // honest
            let params = rng.next_u64() as u8;
            let salt = rng.below(33) as u8;
            let count = rng.below(4) as u8;
            let mut input = vec![mode, params, salt, count];
            for _ in 0..count {
                input.extend_from_slice(&(rng.next_u64() as u32).to_le_bytes());
                input.push(1 << rng.below(8));
            }
            let (image, what) = if i % 4 == 3 {
                mutate(&base, &mut rng)
            } else {
                (base.clone(), "unchanged".to_string())
            };
            input.extend_from_slice(&image);
            let what = format!(
                "verified_open_walk {name}, trial {i} (header {:02x?}, image {what})",
                &input[..4]
            );
            if !f.run(&what, &input, harness::verified_open_walk) {
                break 'seeds;
            }
            // The same bytes as a raw seal (root and tree taken from the input).
            input[0] |= 1;
            if !f.run(&format!("raw {what}"), &input, harness::verified_open_walk) {
                break 'seeds;
            }
        }
    }
    f.check();
}

/// A mutation for the seal targets: half of the time one of [`mutate`]'s, else 1 to 4 bytes changed
/// in the last KiB (footer, header, per-file section, end of the tree).
fn mutate_seal(base: &[u8], rng: &mut Rng) -> (Vec<u8>, String) {
    if base.is_empty() || rng.below(2) == 0 {
        return mutate(base, rng);
    }
    let mut b = base.to_vec();
    let tail = b.len().min(1024) as u64;
    let n = 1 + rng.below(4);
    for _ in 0..n {
        let p = b.len() - 1 - rng.below(tail) as usize;
        b[p] = match rng.below(3) {
            0 => b[p] ^ (1 << rng.below(8)),
            1 => [0, 0xff, 1, 0x80][rng.below(4) as usize],
            _ => rng.next_u64() as u8,
        };
    }
    (b, format!("{n} bytes changed in the trailer"))
}

/// The seal targets' seeds and regressions, as they are and mutated.
#[test]
fn seal_corpora_never_panic() {
    let mut f = failures();
    type Target = (&'static str, fn(&[u8]), u64);
    let targets: [Target; 5] = [
        ("seal_trailer", harness::seal_trailer, SEAL_MUTATIONS),
        ("file_digests", harness::file_digests, SEAL_MUTATIONS),
        ("file_table", harness::file_table, SEAL_MUTATIONS),
        ("signatures", harness::signatures, SEAL_MUTATIONS),
        ("sealed_open", harness::sealed_open, SEALED_OPEN_MUTATIONS),
    ];
    'targets: for (target, run, mutations) in targets {
        let seeds = inputs(&repo_path(&format!("../../fuzz/corpus/{target}")));
        assert!(
            seeds.len() >= 3,
            "the seed corpus fuzz/corpus/{target} is missing (regenerate it with fuzz/make_corpus.sh)"
        );
        let regressions = inputs(&repo_path(&format!("tests/fuzz_regressions/{target}")));
        for (name, bytes) in seeds.iter().chain(&regressions) {
            if !f.run(&format!("{target} {name}"), bytes, run) {
                break 'targets;
            }
        }
        let n = mutations * scale();
        for (name, base) in &seeds {
            for i in 0..n {
                let mut rng = Rng::splitmix(fnv1a(name.as_bytes()) ^ fnv1a(target.as_bytes()) ^ i);
                let (bytes, what) = mutate_seal(base, &mut rng);
                if !f.run(
                    &format!("{target} {name}, mutation {i} ({what})"),
                    &bytes,
                    run,
                ) {
                    break 'targets;
                }
            }
        }
    }
    f.check();
}
