//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::process::Command;

/// Deterministic pseudo-random bytes (xorshift64*), fast enough for hundreds of MiB.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut chunks = v.chunks_exact_mut(8);
    for c in &mut chunks {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        c.copy_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    for b in chunks.into_remainder() {
        *b = 0x5a;
    }
    v
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether an oracle program can be run (`prog arg`). When it cannot, prints
/// `SKIP: <package> not installed` and returns false, or panics when the
/// environment has `CI=true` (CI must not pass by skipping).
pub fn have_oracle(prog: &str, arg: &str, package: &str) -> bool {
    let found = Command::new(prog)
        .arg(arg)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !found {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{prog} ({package}) is required in CI but is not installed");
        }
        println!("SKIP: {package} not installed");
    }
    found
}

/// Runs a command, panicking with its stderr if it fails; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Asserts two byte strings are equal without printing megabytes on failure.
pub fn assert_same_bytes(ours: &[u8], theirs: &[u8], what: &str) {
    if ours == theirs {
        return;
    }
    let first = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    panic!(
        "{what}: ours is {} bytes, the oracle's {}; first difference at byte {first}",
        ours.len(),
        theirs.len()
    );
}
