//! The `manifest` fuzzer's seed corpus and saved crashes, replayed on stable Rust in the normal test
//! suite, with deterministic mutations: bytes (flips, cuts, insertions) and JSON values (a leaf or
//! key replaced by a value of another kind: negative and huge numbers, long strings, nulls, nested
//! arrays; a key removed). A malformed manifest never panics; what parses round-trips.
//!
//! Inputs: `fuzz/corpus/manifest` and `crates/registry/tests/fuzz_regressions` (if any). The
//! harness is `fuzz/src/manifest_harness.rs`, the very file the fuzz target uses.
//! `SEALFS_FUZZ_SCALE=N` runs N times as many mutations.

#[path = "../../../fuzz/src/manifest_harness.rs"]
mod manifest_harness;

use sealfs_testsupport::Rng;
use serde_json::Value;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

const MUTATIONS: u64 = 600;

fn inputs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(String, Vec<u8>)> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// A value of another kind, for a leaf.
fn odd_value(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => Value::Null,
        1 => (-1i64).into(),
        2 => u64::MAX.into(),
        3 => i64::MIN.into(),
        4 => 1e300.into(),
        5 => {
            let n = rng.below(5000) as usize;
            "x".repeat(n).into()
        }
        6 => {
            let n = rng.below(4) as usize;
            Value::Array(vec![Value::Array(vec![]); n])
        }
        7 => serde_json::json!({}),
        8 => {
            let n = rng.below(70) as usize;
            format!("sha256:{}", "0".repeat(n)).into()
        }
        _ => true.into(),
    }
}

/// Replaces (or removes) one random node of `v`.
fn mutate_json(v: &mut Value, rng: &mut Rng, depth: u32) {
    match v {
        Value::Object(map) if !map.is_empty() && depth < 8 => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let k = &keys[rng.below(keys.len() as u64) as usize];
            match rng.below(6) {
                0 => {
                    map.remove(k);
                }
                1 => {
                    map.insert(k.clone(), odd_value(rng));
                }
                _ => mutate_json(map.get_mut(k).unwrap(), rng, depth + 1),
            }
        }
        Value::Array(items) if !items.is_empty() && depth < 8 => {
            let i = rng.below(items.len() as u64) as usize;
            match rng.below(5) {
                0 => {
                    items.remove(i);
                }
                1 => {
                    let dup = items[i].clone();
                    items.push(dup);
                }
                _ => mutate_json(&mut items[i], rng, depth + 1),
            }
        }
        _ => *v = odd_value(rng),
    }
}

fn mutate(base: &[u8], rng: &mut Rng) -> Vec<u8> {
    if let (true, Ok(mut v)) = (rng.below(3) != 0, serde_json::from_slice::<Value>(base)) {
        for _ in 0..1 + rng.below(3) {
            mutate_json(&mut v, rng, 0);
        }
        return serde_json::to_vec(&v).unwrap();
    }
    let mut b = base.to_vec();
    match rng.below(4) {
        0 if !b.is_empty() => {
            let p = rng.below(b.len() as u64) as usize;
            b[p] ^= 1 << rng.below(8);
        }
        1 => b.truncate(rng.below(b.len() as u64 + 1) as usize),
        2 => {
            let p = rng.below(b.len() as u64 + 1) as usize;
            let n = 1 + rng.below(8) as usize;
            let ins = rng.bytes(n);
            b.splice(p..p, ins);
        }
        _ => {
            let p = rng.below(b.len() as u64 + 1) as usize;
            b.splice(p..p, b"\"\\u0000\"".iter().copied());
        }
    }
    b
}

#[test]
fn manifest_corpus_and_mutations_never_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut seeds = inputs(&root.join("../../fuzz/corpus/manifest"));
    seeds.extend(inputs(&root.join("tests/fuzz_regressions")));
    assert!(
        seeds.len() >= 8,
        "the seed corpus is there ({} files)",
        seeds.len()
    );
    let scale = std::env::var("SEALFS_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    let mut failures = Vec::new();
    let mut runs = 0u64;
    for (name, seed) in &seeds {
        let mut rng = Rng::new(seed.len() as u64 ^ 0x5ea1f5);
        let cases = std::iter::once(seed.clone())
            .chain((0..MUTATIONS * scale).map(|_| mutate(seed, &mut rng)));
        for (i, input) in cases.enumerate() {
            runs += 1;
            if catch_unwind(AssertUnwindSafe(|| manifest_harness::manifest(&input))).is_err() {
                let dir = root.join("../../target/tmp/registry-fuzz-failures");
                let _ = std::fs::create_dir_all(&dir);
                let path = dir.join(format!("{name}-{i}"));
                let _ = std::fs::write(&path, &input);
                failures.push(path.display().to_string());
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    println!("{runs} inputs from {} seeds", seeds.len());
    assert!(failures.is_empty(), "panicking inputs: {failures:?}");
}
