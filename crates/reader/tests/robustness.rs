//! Bad images: errors are fine, panics are bugs.
//!
//! Valid images (mkfs.erofs with several option sets, and sealfs images when the binary is built)
//! get random bytes overwritten, thousands of times with a deterministic PRNG, and are cut at many
//! lengths. Each result is opened and walked completely through every reader entry point (stat,
//! readdir, lookup, path resolution, map, read, readlink, xattrs). The superblock checksum is
//! recomputed after corrupting, so the damage reaches the parsers instead of stopping at the
//! checksum. A panic reports the seed that caused it. `SEALFS_FUZZ_SCALE=N` runs N times as many
//! corruption trials (for a longer local hunt).

mod common;

use common::{mkfs, need_tool, oracle_guard, sealfs_bin, sealfs_build, Rng};
use sealfs_format::{superblock_checksum, superblock_checksum_len, EROFS_FEATURE_COMPAT_SB_CHKSUM};
use sealfs_reader::{Follow, Image, Options};
use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// A small tree, so that most random bytes land in metadata.
fn small_tree(root: &Path) {
    fs::create_dir_all(root.join("d/e")).unwrap();
    fs::create_dir_all(root.join("many")).unwrap();
    let mut rng = Rng::new(3);
    for (i, n) in [0usize, 1, 33, 700, 4095, 4096, 4097, 9000]
        .iter()
        .enumerate()
    {
        fs::write(root.join(format!("f{i}")), rng.bytes(*n)).unwrap();
    }
    for i in 0..150 {
        fs::write(
            root.join(format!("many/entry-{i:03}-{}", "n".repeat(i % 40))),
            b"x",
        )
        .unwrap();
    }
    fs::write(root.join("d/e/deep"), b"deep").unwrap();
    symlink("../f1", root.join("d/up")).unwrap();
    symlink("/d/e", root.join("abs")).unwrap();
    symlink("loop", root.join("loop")).unwrap();
    fs::hard_link(root.join("f2"), root.join("d/f2link")).unwrap();
    if common::fixture::xattrs_supported(root) {
        for (i, f) in ["f0", "f1", "f2", "d", "many/entry-001-n"]
            .iter()
            .enumerate()
        {
            let p = root.join(f);
            xattr::set(&p, "user.common", b"shared value").unwrap();
            xattr::set(&p, format!("user.own{i}"), &vec![b'v'; i * 30]).unwrap();
        }
    }
}

/// Walks everything reachable, ignoring errors, within fixed budgets.
fn walk_all(img: &Image) {
    let Ok(root) = img.root() else { return };
    let mut todo = vec![(root.nid(), b"/".to_vec())];
    let mut seen = HashSet::new();
    let mut budget = 3000usize;
    while let Some((nid, path)) = todo.pop() {
        if !seen.insert(nid) || budget == 0 {
            continue;
        }
        budget -= 1;
        let _ = img.resolve(&path, Follow::All);
        let _ = img.resolve(&path, Follow::Parents);
        let Ok(inode) = img.inode(nid) else { continue };
        let _ = inode.stat();
        if let Ok(names) = img.list_xattrs(&inode) {
            for n in names.iter().take(50) {
                let _ = img.get_xattr(&inode, n);
            }
        }
        let _ = img.xattrs(&inode);
        for absent in [&b"user.nope"[..], b"security.capability", b"trusted.x"] {
            let _ = img.get_xattr(&inode, absent);
        }
        let _ = img.map_range(&inode, 0, 1 << 20);
        let _ = img.read_vec(&inode, 0, 1 << 16);
        let _ = img.read_vec(&inode, inode.size().saturating_sub(5000), 10000);
        let _ = img.readlink(&inode);
        if let Ok(rd) = img.read_dir(&inode) {
            for e in rd.take(2000) {
                let Ok(e) = e else { break };
                let _ = img.lookup(&inode, &e.name);
                let mut other = e.name.clone();
                other.push(b'x');
                let _ = img.lookup(&inode, &other);
                if e.name != b"." && e.name != b".." {
                    let mut child = path.clone();
                    if child.len() > 1 {
                        child.push(b'/');
                    }
                    child.extend_from_slice(&e.name);
                    todo.push((e.nid, child));
                }
            }
        }
        let _ = img.lookup(&inode, b"zzzz");
    }
}

fn fix_checksum(img: &mut [u8]) {
    if img.len() < 1152 {
        return;
    }
    let compat = u32::from_le_bytes(img[1032..1036].try_into().unwrap());
    let bits = img[1036];
    if compat & EROFS_FEATURE_COMPAT_SB_CHKSUM == 0 || !(9..=12).contains(&bits) {
        return;
    }
    let len = superblock_checksum_len(bits);
    if img.len() < 1024 + len {
        return;
    }
    let sum = superblock_checksum(&img[1024..1024 + len]);
    img[1028..1032].copy_from_slice(&sum.to_le_bytes());
}

/// Opens and walks; returns whether the image opened.
fn open_and_walk(bytes: Vec<u8>, what: &str) -> bool {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // A tiny cache, so that eviction paths run too.
        match Image::open_with(bytes, &Options { cache_blocks: 3 }) {
            Ok(img) => {
                walk_all(&img);
                true
            }
            Err(_) => false,
        }
    }));
    match r {
        Ok(opened) => opened,
        Err(_) => panic!("reader panicked on {what}"),
    }
}

fn corrupt_trials(name: &str, base: &[u8], trials: u64, seed: u64) {
    let scale = std::env::var("SEALFS_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    let trials = trials * scale;
    // The valid image opens first (and walks cleanly, unless it has unsupported parts).
    let img = Image::open(base.to_vec()).unwrap();
    if name != "crafted" {
        common::walk::walk_image(&img).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let meta_end = (base.len() as u64).min(3 * 4096);
    let mut opened = 0;
    for t in 0..trials {
        let mut rng = Rng::new(seed.wrapping_mul(1_000_003) + t);
        let mut bytes = base.to_vec();
        let n = 1 + rng.below(8);
        for _ in 0..n {
            // Mostly the metadata blocks at the start, sometimes anywhere.
            let pos = if rng.below(4) == 0 {
                rng.below(bytes.len() as u64)
            } else {
                1024 + rng.below(meta_end - 1024)
            } as usize;
            bytes[pos] = match rng.below(4) {
                0 => 0,
                1 => 0xff,
                2 => bytes[pos] ^ (1 << rng.below(8)),
                _ => rng.next_u64() as u8,
            };
        }
        fix_checksum(&mut bytes);
        opened += open_and_walk(
            bytes,
            &format!("{name}, corruption trial {t} (seed {seed})"),
        ) as u64;
    }
    // Most damage must get past the superblock, or the walk tests nothing.
    println!("{name}: {opened} of {trials} corrupted images opened");
    assert!(
        opened * 2 > trials,
        "{name}: only {opened} of {trials} opened"
    );
}

fn truncations(name: &str, base: &[u8]) {
    let mut cut = 0;
    while cut < base.len() {
        let _ = open_and_walk(base[..cut].to_vec(), &format!("{name} cut at {cut}"));
        cut += if cut < 8192 { 97 } else { 1021 };
    }
}

fn base_images(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let src = dir.join("src");
    fs::create_dir(&src).unwrap();
    small_tree(&src);
    let mut images = Vec::new();
    for (name, args) in [
        ("mkfs-default", &["-x1"][..]),
        (
            "mkfs-compact",
            &[
                "-T1000",
                "-Eforce-inode-compact",
                "--force-uid=1",
                "--force-gid=1",
            ],
        ),
        ("mkfs-chunk", &["--chunksize=4096", "-Eforce-chunk-indexes"]),
        ("mkfs-blockmap", &["--chunksize=8192", "-Enoinline_data"]),
    ] {
        let out = dir.join(name);
        mkfs(&src, &out, args).unwrap();
        images.push((name.to_string(), fs::read(&out).unwrap()));
    }
    match sealfs_bin() {
        Ok(bin) => {
            let out = dir.join("sealfs");
            sealfs_build(&bin, &src, &out, &["-T", "1000"]).unwrap();
            images.push(("sealfs".to_string(), fs::read(&out).unwrap()));
        }
        Err(e) => println!("note: no sealfs images in the robustness test: {e}"),
    }
    images
}

#[test]
fn random_corruption_never_panics() {
    if !oracle_guard(need_tool("mkfs.erofs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (i, (name, base)) in base_images(dir.path()).iter().enumerate() {
        corrupt_trials(name, base, 1500, i as u64 + 1);
    }
}

#[test]
fn truncated_images_never_panic() {
    if !oracle_guard(need_tool("mkfs.erofs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for (name, base) in base_images(dir.path()) {
        truncations(&name, &base);
    }
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng::new(99);
    for t in 0..500 {
        let len = rng.below(5 * 4096) as usize;
        let mut bytes = rng.bytes(len);
        if bytes.len() >= 1152 {
            // A plausible superblock over random bytes.
            bytes[1024..1028].copy_from_slice(&sealfs_format::EROFS_SUPER_MAGIC_V1.to_le_bytes());
            bytes[1036] = 12;
            bytes[1114] = 0; // dirblkbits
            bytes[1104..1108].fill(0); // incompat
            bytes[1038..1040].copy_from_slice(&36u16.to_le_bytes());
            bytes[1064..1068].fill(0); // meta_blkaddr
            fix_checksum(&mut bytes);
        }
        let _ = open_and_walk(bytes, &format!("garbage trial {t}"));
    }
}

#[test]
fn crafted_image_corruption_never_panics() {
    // The hand-built image has what mkfs.erofs 1.5 cannot write: 48-bit chunk indexes, long xattr
    // prefixes, a DOT_OMITTED directory, an inode straddling two blocks, a compressed inode.
    let (c, _) = common::layouts::layouts_image();
    corrupt_trials("crafted", &c.finish(), 3000, 77);
    truncations("crafted", &c.finish());
}
