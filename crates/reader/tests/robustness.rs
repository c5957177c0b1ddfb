//! Bad images: errors are fine, panics are bugs.
//!
//! Valid images (mkfs.erofs with several option sets, and sealfs images when the binary is built)
//! get random bytes overwritten, thousands of times with a deterministic PRNG, and are cut at many
//! lengths. Each result is opened and walked completely through every reader entry point (stat,
//! readdir, lookup, path resolution, map, read, readlink, xattrs). The superblock checksum is
//! recomputed after corrupting, so the damage reaches the parsers instead of stopping at the
//! checksum. A panic reports the seed that caused it. `SEALFS_FUZZ_SCALE=N` runs N times as many
//! corruption trials (for a longer local hunt).
//!
//! Compressed images are seeds too (mkfs.erofs LZ4 with compact and full indexes, big pclusters
//! and ztailpacking, and the hand-built ZSTD image), so damage reaches lcluster indexes, map
//! headers, compression configs and compressed bytes. A counting allocator checks that no damage
//! makes the reader allocate more than a bounded amount at once (the largest legitimate buffer is
//! a 12 MiB decoded extent).

#![allow(
    unsafe_code,
    reason = "a counting global allocator bounds what a malformed image makes the reader allocate"
)]

use sealfs_format::{superblock_checksum, superblock_checksum_len, EROFS_FEATURE_COMPAT_SB_CHKSUM};
use sealfs_reader::{ExtentKind, Follow, Image, Options};
use sealfs_testsupport::build::{build_image, timestamp};
use sealfs_testsupport::{mkfs, need_tool, oracle_guard, Rng};
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::symlink;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, remembering the largest single allocation.
struct Counting;

static LARGEST_ALLOC: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST_ALLOC.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST_ALLOC.fetch_max(layout.size(), Ordering::Relaxed);
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST_ALLOC.fetch_max(new_size, Ordering::Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// No single allocation may exceed this: a 12 MiB decoded extent plus slack.
const ALLOC_LIMIT: usize = 16 << 20;

fn check_allocations(what: &str) {
    let largest = LARGEST_ALLOC.load(Ordering::Relaxed);
    println!("{what}: largest single allocation {largest} bytes");
    assert!(
        largest <= ALLOC_LIMIT,
        "{what}: an allocation of {largest} bytes"
    );
}

/// A small tree, so that most random bytes land in metadata.
fn small_tree(root: &Path) {
    fs::create_dir_all(root.join("d/e")).unwrap();
    fs::create_dir_all(root.join("many")).unwrap();
    let mut rng = Rng::scrambled(3);
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
    // Compressible data (for the compressed seed images): text, zeros, text with a random tail.
    let text = sealfs_testsupport::zcraft::text(&mut rng, 3000).repeat(7);
    fs::write(root.join("text"), &text).unwrap();
    fs::write(root.join("zeros"), vec![0u8; 70_000]).unwrap();
    fs::write(
        root.join("d/mixed"),
        [&text[..9000], &rng.bytes(5000)].concat(),
    )
    .unwrap();
    symlink("../f1", root.join("d/up")).unwrap();
    symlink("/d/e", root.join("abs")).unwrap();
    symlink("loop", root.join("loop")).unwrap();
    fs::hard_link(root.join("f2"), root.join("d/f2link")).unwrap();
    if sealfs_testsupport::small_fixture::xattrs_supported(root) {
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

thread_local! {
    /// Compressed extents decoded (or attempted) by this test thread's walks: the compressed
    /// seeds must reach the decoders.
    static DECODED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

fn decoded() -> u64 {
    DECODED.with(|d| d.get())
}

/// Opens and walks; returns whether the image opened.
fn open_and_walk(bytes: Vec<u8>, what: &str) -> bool {
    let r = catch_unwind(AssertUnwindSafe(|| {
        // A tiny cache, so that eviction paths run too.
        match Image::open_unverified_with(
            bytes,
            &Options {
                cache_blocks: 3,
                cluster_cache_bytes: 100_000,
                // (Extents read to their end dropped, as a mount does.)
                keep_passed_extents: false,
            },
        ) {
            Ok(img) => {
                walk_all(&img);
                let s = img.stats();
                DECODED.with(|d| d.set(d.get() + s.cluster_misses));
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

/// The pclusters of every compressed file of an image: (position, length).
fn pclusters(img: &Image) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let Ok(tree) = sealfs_testsupport::walk::walk_image(img) else {
        return out;
    };
    for node in tree.values().filter(|n| n.content.is_some()) {
        let inode = img.inode(node.nid).unwrap();
        for e in img.map_range(&inode, 0, u64::MAX).unwrap_or_default() {
            if let ExtentKind::Compressed { physical, plen, .. } = e.kind {
                out.push((physical, plen));
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Damage inside the pclusters of compressed files only (the compressed streams, their zero
/// padding, uncompressed PLAIN pclusters), then the image is walked: the decoders see
/// damaged input of every kind. Errors are expected; panics are bugs.
fn compressed_data_trials(name: &str, base: &[u8], trials: u64, seed: u64, pcl: &[(u64, u64)]) {
    let scale = std::env::var("SEALFS_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    assert!(!pcl.is_empty(), "{name}: no pcluster");
    let before = decoded();
    for t in 0..trials * scale {
        let mut rng = Rng::scrambled(seed.wrapping_mul(7_000_003) + t);
        let mut bytes = base.to_vec();
        let (pos, len) = pcl[rng.below(pcl.len() as u64) as usize];
        for _ in 0..1 + rng.below(4) {
            let at = (pos + rng.below(len)) as usize;
            // Near the stream's end (right-aligned data), or anywhere.
            let at = if rng.below(2) == 0 {
                (pos + len - 1 - rng.below(len.min(64))) as usize
            } else {
                at
            };
            bytes[at] = match rng.below(3) {
                0 => bytes[at] ^ (1 << rng.below(8)),
                1 => 0,
                _ => rng.next_u64() as u8,
            };
        }
        open_and_walk(bytes, &format!("{name}, data trial {t} (seed {seed})"));
    }
    let decoded = decoded() - before;
    assert!(decoded > trials, "{name}: only {decoded} decodes");
    println!(
        "{name}: {} data trials, {decoded} extent decodes",
        trials * scale
    );
}

fn corrupt_trials(name: &str, base: &[u8], trials: u64, seed: u64) {
    let scale = std::env::var("SEALFS_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(1)
        .max(1);
    let trials = trials * scale;
    // The valid image opens first (and walks cleanly, unless it has unsupported parts).
    let img = Image::open_unverified(base.to_vec()).unwrap();
    if !name.starts_with("crafted") {
        sealfs_testsupport::walk::walk_image(&img).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let meta_end = (base.len() as u64).min(3 * 4096);
    let mut opened = 0;
    let before = decoded();
    for t in 0..trials {
        let mut rng = Rng::scrambled(seed.wrapping_mul(1_000_003) + t);
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
    let decoded = decoded() - before;
    println!("{name}: {opened} of {trials} corrupted images opened, {decoded} extent decodes");
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
        ("mkfs-lz4", &["-zlz4"]),
        ("mkfs-lz4hc-64k", &["-zlz4hc", "-C65536"]),
        ("mkfs-lz4-tail", &["-zlz4", "-Eztailpacking"]),
        (
            "mkfs-lz4hc-16k-full-tail",
            &["-zlz4hc", "-C16384", "-Elegacy-compress", "-Eztailpacking"],
        ),
    ] {
        let out = dir.join(name);
        mkfs(&src, &out, args).unwrap();
        images.push((name.to_string(), fs::read(&out).unwrap()));
    }
    // The sealfs builder's image (from the library: always there, never skipped).
    let out = dir.join("sealfs");
    build_image(&src, &out, &timestamp(1000)).unwrap();
    images.push(("sealfs".to_string(), fs::read(&out).unwrap()));
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
        if name.contains("lz4") {
            let pcl = pclusters(&Image::open_unverified(base.clone()).unwrap());
            compressed_data_trials(name, base, 400, i as u64 + 1, &pcl);
        }
    }
    check_allocations("random corruption");
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
    check_allocations("truncations");
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = Rng::scrambled(99);
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
    let (c, _) = sealfs_testsupport::layouts::layouts_image();
    corrupt_trials("crafted", &c.finish(), 3000, 77);
    truncations("crafted", &c.finish());
}

#[test]
fn crafted_compressed_image_corruption_never_panics() {
    // ZSTD, LZ4 as HEAD2, PLAIN and CBLKCNT extents, compression config records.
    let (c, _) = sealfs_testsupport::zcraft::zstd_image();
    corrupt_trials("crafted-zstd", &c.finish(), 3000, 78);
    truncations("crafted-zstd", &c.finish());
    let z = sealfs_testsupport::zcraft::Z;
    let img = Image::open_unverified(c.finish()).unwrap();
    let inode = img.inode(z).unwrap();
    let pcl: Vec<(u64, u64)> = img
        .map_range(&inode, 0, u64::MAX)
        .unwrap()
        .iter()
        .filter_map(|e| match e.kind {
            ExtentKind::Compressed { physical, plen, .. } => Some((physical, plen)),
            _ => None,
        })
        .collect();
    compressed_data_trials("crafted-zstd", &c.finish(), 2000, 79, &pcl);
    check_allocations("crafted compressed");
}
