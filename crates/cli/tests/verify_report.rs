//! Issue 38, item 4: `verify` printed the unverified value as if it were a fact ("recorded digest
//! sha256:a075…" read from a forged per-file digest table) and labelled the table's block
//! "metadata (inodes, directories, xattrs) or tails". It must say what was expected and that the
//! recorded bytes failed their hash check, and label blocks by what they hold. The expected
//! digests come from `fsverity digest` of the source files.

mod common;

use common::*;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

/// `fsverity digest` of `path`: its raw bytes and its `sha256:HEX` text.
fn fsverity(path: &Path) -> (Vec<u8>, String) {
    let hex = run_ok(
        Command::new("fsverity")
            .args(["digest", "--compact"])
            .arg(path),
    )
    .unwrap()
    .trim()
    .to_string();
    let raw = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    (raw, format!("sha256:{hex}"))
}

/// The only offset of `needle` in `hay`.
fn only(hay: &[u8], needle: &[u8]) -> usize {
    let at: Vec<usize> = hay
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 1, "{} found {} times", hex(needle), at.len());
    at[0]
}

/// `sealfs verify [--json] IMG`: exit code and stdout + stderr.
fn verify(img: &Path, json: bool) -> (i32, String) {
    let mut c = Command::new(sealfs_bin());
    c.arg("verify");
    if json {
        c.arg("--json");
    }
    let o = run(c.arg(img));
    (
        o.status.code().unwrap(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[test]
fn verify_does_not_show_a_forged_file_digest_as_recorded() {
    if !oracle_guard(need_tool("fsverity")) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir(&src).unwrap();
    let mut rng = Rng::new(384);
    fs::write(src.join("victim"), rng.bytes(64 << 10)).unwrap();
    fs::write(src.join("other"), rng.bytes(10 << 10)).unwrap();
    let img = tmp.path().join("s.img");
    build_ok(&src, &img, &[]);
    let (raw, want) = fsverity(&src.join("victim"));
    let (forged_raw, forged) = fsverity(&src.join("other"));
    let bytes = fs::read(&img).unwrap();
    let at = only(&bytes, &raw);

    // The victim's entry in the table replaced by another file's digest.
    let bad = tmp.path().join("forged.img");
    fs::copy(&img, &bad).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&bad).unwrap();
    f.write_all_at(&forged_raw, at as u64).unwrap();
    let (code, text) = verify(&bad, false);
    println!("{text}");
    assert_eq!(code, 1, "{text}");
    assert!(
        !text.contains(&forged),
        "the forged value is shown as if it were recorded: {text}"
    );
    assert!(text.contains(&format!("expected {want}")), "{text}");
    assert!(text.contains("failed their hash check"), "{text}");
    let block = at / 4096;
    let label = text
        .lines()
        .find(|l| l.contains(&format!("image block {block} ")))
        .unwrap_or_else(|| panic!("block {block} not reported: {text}"));
    assert!(label.contains("the per-file digest table"), "{label}");
    assert!(!label.contains("metadata (inodes"), "{label}");
    let (_, json) = verify(&bad, true);
    assert!(!json.contains(&forged), "{json}");

    // The victim's data damaged, the table intact: the table's value is the expected one.
    let data_at = only(&bytes, &fs::read(src.join("victim")).unwrap()[..4096]);
    let bad = tmp.path().join("data.img");
    fs::copy(&img, &bad).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&bad).unwrap();
    f.write_all_at(&[!bytes[data_at + 10]], data_at as u64 + 10)
        .unwrap();
    let (code, text) = verify(&bad, false);
    println!("{text}");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains(&format!("expected {want}")), "{text}");
    assert!(text.contains("data of /victim"), "{text}");
    assert!(text.contains("damaged image blocks"), "{text}");
}
