//! Images made by erofs-utils 1.9's `mkfs.erofs` with what 1.5 cannot write (MicroLZMA, DEFLATE,
//! libdeflate, fragments in the packed inode, alone and with dedupe) read back through the reader equal to the source, with random reads and with the
//! cluster cache on and off, and equal to the kernel's mount of the same image (the oracle: Linux
//! decodes these with its own MicroLZMA and DEFLATE decompressors).
//!
//! `mkfs.erofs` 1.9 is found by `sealfs_testsupport::mkfs_erofs_1_9` (`$MKFS_EROFS`, or the build
//! of `scripts/build-oracles.sh`); without it the test prints `SKIP` (and fails under CI).

use sealfs_format::{DataLayout, Z_EROFS_ADVISE_EXTENTS};
use sealfs_reader::{Compression, ExtentKind, Image, Inode, Options};
use sealfs_testsupport::walk::{compare, scan_source, walk_image, Expect, Tree};
use sealfs_testsupport::zcraft::text;
use sealfs_testsupport::{
    assert_no_diffs, mkfs_erofs_1_9, mkfs_with, mount_env, mount_erofs, oracle_guard, show, Rng,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// Sizes and contents that matter to pclusters: empty, tiny, block and cluster boundaries,
/// incompressible, zeros, mixed, many small files.
fn build_tree(root: &Path) {
    let mut rng = Rng::scrambled(19);
    let w = |rel: &str, data: &[u8]| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    };
    w("empty", b"");
    w("one", b"x");
    w("random-100k", &rng.bytes(100_000));
    w("zeros-2m", &vec![0u8; 2 << 20]);
    w("text-200k", &text(&mut rng, 200_000));
    w("text-3m", &text(&mut rng, 3 << 20));
    for n in [4095usize, 4096, 4097, 16384, 65536, 65537, 131072] {
        w(&format!("sizes/text-{n}"), &text(&mut rng, n));
        w(&format!("sizes/random-{n}"), &rng.bytes(n));
    }
    let mut mixed = Vec::new();
    for i in 0..40 {
        let n = 1000 + rng.below(9000) as usize;
        if i % 2 == 0 {
            mixed.extend(text(&mut rng, n));
        } else {
            mixed.extend(rng.bytes(n));
        }
    }
    w("mixed", &mixed);
    // Small files, some identical (dedupe and fragments share them).
    let shared = text(&mut rng, 2500);
    for i in 0..120 {
        let n = rng.below(3000) as usize;
        let data = match i % 4 {
            0 => text(&mut rng, n),
            1 => rng.bytes(n),
            2 => shared.clone(),
            _ => vec![b'z'; n],
        };
        w(&format!("many/f{i:03}"), &data);
    }
    std::os::unix::fs::symlink("text-200k", root.join("link")).unwrap();
    // Xattrs: one on ten files (in the shared area, since mkfs.erofs shares what more than two
    // inodes have), and one of each file's own on two.
    for i in 0..12 {
        let p = root.join(format!("many/f{i:03}"));
        let (name, value) = match i {
            0..10 => ("user.common", b"the same value".to_vec()),
            _ => ("user.own", format!("value {i}").into_bytes()),
        };
        xattr::set(&p, name, &value).unwrap();
    }
}

struct Case {
    name: &'static str,
    args: &'static [&'static str],
    /// An algorithm some extents must use.
    algorithm: Option<Compression>,
    /// Some files must have fragments in the packed inode.
    fragments: bool,
}

fn cases() -> Vec<Case> {
    let c = |name, args, algorithm| Case {
        name,
        args,
        algorithm: Some(algorithm),
        fragments: false,
    };
    let f = |name, args, algorithm| Case {
        name,
        args,
        algorithm,
        fragments: true,
    };
    vec![
        c("lzma", &["-zlzma"], Compression::Lzma),
        c(
            "lzma-9-64k-tail",
            &["-zlzma,level=9,dictsize=65536", "-C65536", "-Eztailpacking"],
            Compression::Lzma,
        ),
        c(
            "lzma-extreme-1m",
            &["-zlzma,level=109", "-C1048576"],
            Compression::Lzma,
        ),
        c("deflate", &["-zdeflate"], Compression::Deflate),
        c(
            "deflate-9-128k-tail",
            &["-zdeflate,level=9", "-C131072", "-Eztailpacking"],
            Compression::Deflate,
        ),
        c(
            "libdeflate-12-64k",
            &["-zlibdeflate,level=12", "-C65536"],
            Compression::Deflate,
        ),
        // Fragments: tails (and small files) in the packed inode.
        f(
            "lz4hc-fragments",
            &["-zlz4hc", "-Efragments"],
            Some(Compression::Lz4),
        ),
        f(
            "lzma-64k-fragments",
            &["-zlzma", "-C65536", "-Efragments"],
            Some(Compression::Lzma),
        ),
        f(
            "zstd-all-fragments",
            &["-zzstd", "-C65536", "-Eall-fragments"],
            None,
        ),
        f(
            "deflate-fragments-dedupe",
            &["-zdeflate", "-C16384", "-Efragments,dedupe"],
            Some(Compression::Deflate),
        ),
        f(
            "lz4-fragments-ztailpacking-full",
            &["-zlz4", "-Efragments,ztailpacking,legacy-compress"],
            Some(Compression::Lz4),
        ),
        f(
            "lzma-1m-all-fragments-dedupe",
            &["-zlzma,level=9", "-C1048576", "-Eall-fragments,dedupe"],
            None,
        ),
        // Compressed directories (whole-file fragments). erofs-utils 1.9.3 reads its option
        // backwards: `--zD=1` disables, a bare `--zD` enables.
        c(
            "lz4hc-compressed-dirs",
            &["-zlz4hc", "--zD"],
            Compression::Lz4,
        ),
        // Metadata compression: inodes, their xattrs, indexes and inline data in the metabox
        // (`-m`), alone, with another algorithm than the data's, and with compressed directories
        // and fragments.
        c("lz4hc-metabox", &["-zlz4hc", "-m4096"], Compression::Lz4),
        c(
            "lzma-metabox-lz4-dirs",
            &["-zlzma", "-C65536", "-m16384:lz4", "--zD"],
            Compression::Lzma,
        ),
        f(
            "zstd-metabox-fragments-ztail",
            &["-zzstd", "-C65536", "-m4096", "-Efragments,ztailpacking"],
            Some(Compression::Zstd),
        ),
        // The 48-bit layout: encoded extents (fixed-input pclusters at byte addresses).
        c("lzma-48bit", &["-zlzma", "-E48bit"], Compression::Lzma),
        c(
            "lz4-48bit-ztail-dedupe",
            &["-zlz4hc", "-C65536", "-E48bit,ztailpacking,dedupe"],
            Compression::Lz4,
        ),
        c(
            "deflate-48bit-16k",
            &["-zdeflate", "-C16384", "-E48bit"],
            Compression::Deflate,
        ),
        f(
            "zstd-48bit-fragments",
            &["-zzstd", "-E48bit,fragments"],
            Some(Compression::Zstd),
        ),
    ]
}

/// `h_advise` of a compressed inode, read from its map header.
fn h_advise(img: &Image, inode: &Inode) -> u16 {
    let pos = inode.data_offset().next_multiple_of(8);
    let mut h = [0u8; 8];
    if pos >> 63 != 0 {
        // The inode is in the metabox: the position is in the metabox inode's data.
        let metabox = img.inode(img.superblock().metabox_nid.unwrap()).unwrap();
        assert_eq!(img.read(&metabox, pos & !(1 << 63), &mut h).unwrap(), 8);
    } else {
        img.read_raw(pos, &mut h).unwrap();
    }
    u16::from_le_bytes([h[4], h[5]])
}

/// Regular files of an image tree: path → inode.
fn files(img: &Image, tree: &Tree) -> BTreeMap<Vec<u8>, Inode> {
    tree.iter()
        .filter(|(_, n)| n.content.is_some())
        .map(|(p, n)| (p.clone(), img.inode(n.nid).unwrap()))
        .collect()
}

fn open_with(path: &Path, cluster_cache_bytes: usize) -> Image {
    Image::open_unverified_with(
        fs::File::open(path).unwrap(),
        &Options {
            cluster_cache_bytes,
            ..Options::default()
        },
    )
    .unwrap()
}

/// Random reads of every file compared with the source.
fn random_reads(
    img: &Image,
    src: &Tree,
    files: &BTreeMap<Vec<u8>, Inode>,
    rng: &mut Rng,
) -> Vec<String> {
    let mut diffs = Vec::new();
    for (path, inode) in files {
        let content = src[path].content.as_ref().unwrap();
        let size = content.len() as u64;
        for _ in 0..if size > 100_000 { 16 } else { 4 } {
            let off = rng.below(size + 100);
            let len = match rng.below(3) {
                0 => rng.below(16) as usize,
                1 => rng.below(9000) as usize,
                _ => rng.below(300_000) as usize,
            };
            let mut buf = vec![0xA5u8; len];
            match img.read(inode, off, &mut buf) {
                Ok(n) => {
                    let end = (off as usize + len).min(content.len());
                    let want = content.get(off as usize..end).unwrap_or(&[]);
                    if &buf[..n] != want {
                        diffs.push(format!("/{}: read({off}, {len}) differs", show(path)));
                    }
                }
                Err(e) => diffs.push(format!("/{}: read({off}, {len}): {e}", show(path))),
            }
        }
    }
    diffs
}

fn check_case(mkfs: &Path, dir: &Path, src: &Tree, case: &Case, kernel: bool, rng: &mut Rng) {
    let name = case.name;
    let img_path = dir.join(format!("{name}.erofs"));
    mkfs_with(mkfs, &dir.join("src"), &img_path, case.args).unwrap();
    let img = Image::open_unverified(fs::File::open(&img_path).unwrap())
        .unwrap_or_else(|e| panic!("{name}: open: {e}"));
    let tree = walk_image(&img).unwrap_or_else(|e| panic!("{name}: {e}"));
    let expect = Expect {
        xattrs: false,
        ..Expect::default()
    };
    let mut diffs = compare(src, &tree, &expect);
    // mkfs.erofs 1.9 keeps whole seconds in compact inodes; the kernel comparison below checks
    // the reader's mtimes exactly.
    diffs.retain(|d| !d.contains(": mtime:"));
    assert_no_diffs(name, &diffs);

    // The case exercised what it is meant to.
    let files = files(&img, &tree);
    let (mut compressed, mut extents, mut with_alg, mut fragments) = (0, 0, 0, 0);
    // Record sizes of inodes with encoded extents (48-bit layout).
    let mut recsz = BTreeSet::new();
    for inode in files.values() {
        if !matches!(
            inode.layout(),
            DataLayout::CompressedFull | DataLayout::CompressedCompact
        ) {
            continue;
        }
        compressed += 1;
        let advise = h_advise(&img, inode);
        // (Bit 0 is COMPACTED_2B in compact indexes.)
        if inode.layout() == DataLayout::CompressedFull && advise & Z_EROFS_ADVISE_EXTENTS != 0 {
            recsz.insert(4 << ((advise >> 1) & 3));
        }
        for e in img.map_range(inode, 0, u64::MAX).unwrap() {
            extents += 1;
            match e.kind {
                ExtentKind::Compressed { algorithm, .. } => {
                    with_alg += (Some(algorithm) == case.algorithm) as usize;
                }
                ExtentKind::Fragment { .. } => fragments += 1,
                _ => {}
            }
        }
    }
    println!(
        "{name}: {compressed} compressed files, {extents} extents, {with_alg} {:?}, {fragments} \
         fragments, {} bytes",
        case.algorithm,
        fs::metadata(&img_path).unwrap().len()
    );
    assert!(compressed >= 5, "{name}: too few compressed files");
    println!("{name}: encoded extent record sizes {recsz:?}");
    assert_eq!(
        !recsz.is_empty(),
        // (`-m` turns on the 48-bit layout, which the metabox needs for the root's 64-bit nid.)
        case.args
            .iter()
            .any(|a| a.contains("48bit") || a.starts_with("-m")),
        "{name}: encoded extents"
    );
    if case.args.contains(&"--zD") {
        let dirs = tree
            .values()
            .filter(|n| n.mode & libc::S_IFMT == libc::S_IFDIR)
            .map(|n| img.inode(n.nid).unwrap().layout())
            .filter(|l| {
                matches!(
                    l,
                    DataLayout::CompressedFull | DataLayout::CompressedCompact
                )
            })
            .count();
        assert!(dirs > 0, "{name}: no compressed directory");
    }
    if case.args.iter().any(|a| a.starts_with("-m")) {
        // Every inode is in the metabox, which is itself compressed.
        let metabox = img.superblock().metabox_nid.expect("a metabox");
        let layout = img.inode(metabox).unwrap().layout();
        assert!(
            matches!(
                layout,
                DataLayout::CompressedFull | DataLayout::CompressedCompact
            ),
            "{name}: metabox layout {layout:?}"
        );
        let outside = tree.values().filter(|n| n.nid >> 63 == 0).count();
        assert_eq!(outside, 0, "{name}: inodes outside the metabox");
    }
    if case.algorithm.is_some() {
        assert!(
            with_alg >= 5,
            "{name}: too few {:?} extents",
            case.algorithm
        );
    }
    assert_eq!(
        fragments > 10,
        case.fragments,
        "{name}: {fragments} fragments"
    );
    if case.fragments {
        // Reading every file once decodes each pcluster (the packed inode's and the files'
        // own) at most once: a fragment cluster decoded for one small file serves the others.
        let fresh = open_with(&img_path, 64 << 20);
        let packed = fresh.inode(fresh.superblock().packed_nid).unwrap();
        let mut pclusters = fresh.map_range(&packed, 0, u64::MAX).unwrap().len();
        for inode in files.values() {
            let mut buf = vec![0u8; inode.size() as usize];
            assert_eq!(fresh.read(inode, 0, &mut buf).unwrap(), buf.len());
            pclusters += fresh
                .map_range(inode, 0, u64::MAX)
                .unwrap()
                .iter()
                .filter(|e| matches!(e.kind, ExtentKind::Compressed { .. }))
                .count();
        }
        let s = fresh.stats();
        println!(
            "{name}: {fragments} fragments, {} cluster misses, {} hits, at most {pclusters} \
             pclusters",
            s.cluster_misses, s.cluster_hits
        );
        assert!(s.cluster_misses as usize <= pclusters, "{name}: {s:?}");
    }

    // Random reads, with the default cache, a tiny one and none.
    assert_no_diffs(name, &random_reads(&img, src, &files, rng));
    for bound in [5000, 0] {
        let small = open_with(&img_path, bound);
        let tree2 = walk_image(&small).unwrap_or_else(|e| panic!("{name}, cache {bound}: {e}"));
        assert_no_diffs(
            &format!("{name}, cache {bound}"),
            &compare(&tree, &tree2, &Expect::default()),
        );
        assert_no_diffs(name, &random_reads(&small, src, &files, rng));
    }

    // The kernel's mount of the same image shows what the reader shows.
    if kernel {
        let mnt = mount_erofs(&img_path).unwrap_or_else(|e| panic!("{name}: mount: {e}"));
        let seen = scan_source(mnt.path());
        assert_no_diffs(
            &format!("{name}: kernel mount vs reader"),
            &compare(&seen, &tree, &Expect::default()),
        );
        assert_eq!(seen.len(), tree.len(), "{name}");
    }
    fs::remove_file(&img_path).unwrap();
}

#[test]
fn mkfs_1_9_lzma_deflate_and_fragment_images_read_like_the_kernel() {
    let mkfs = mkfs_erofs_1_9();
    if !oracle_guard(mkfs.as_ref().map(drop).map_err(Clone::clone)) {
        return;
    }
    let mkfs = mkfs.unwrap();
    let kernel = oracle_guard(mount_env());
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    fs::create_dir(&src_path).unwrap();
    build_tree(&src_path);
    let src = scan_source(&src_path);
    let mut rng = Rng::scrambled(23);
    let only = std::env::var("CASE").ok();
    for case in cases() {
        if only
            .as_ref()
            .is_some_and(|o| !case.name.contains(o.as_str()))
        {
            continue;
        }
        check_case(&mkfs, dir.path(), &src, &case, kernel, &mut rng);
    }
}

/// Damaged fragment headers of a `-Eall-fragments` image: an offset that runs past the end of the
/// packed inode, or an enormous one, is a corrupted image for that file (never a panic or wrong
/// bytes); the other files still read.
#[test]
fn damaged_fragment_offsets_are_corrupted() {
    let mkfs = mkfs_erofs_1_9();
    if !oracle_guard(mkfs.as_ref().map(drop).map_err(Clone::clone)) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    fs::create_dir(&src_path).unwrap();
    build_tree(&src_path);
    let src = scan_source(&src_path);
    let img_path = dir.path().join("frag.erofs");
    mkfs_with(
        &mkfs.unwrap(),
        &src_path,
        &img_path,
        &["-zlz4hc", "-Eall-fragments"],
    )
    .unwrap();
    let bytes = fs::read(&img_path).unwrap();
    let img = Image::open_unverified(bytes.clone()).unwrap();
    let tree = walk_image(&img).unwrap();
    let packed = img.inode(img.superblock().packed_nid).unwrap();
    let victim = tree
        .iter()
        .find(|(p, n)| p.starts_with(b"sizes/text-") && n.content.is_some())
        .map(|(p, n)| (p.clone(), img.inode(n.nid).unwrap()))
        .unwrap();
    let (vpath, vinode) = victim;
    let hdr = vinode.data_offset().next_multiple_of(8) as usize;
    let orig = u64::from_le_bytes(bytes[hdr..hdr + 8].try_into().unwrap());
    assert_ne!(orig >> 63, 0, "/{}: a whole-file fragment", show(&vpath));
    for off in [packed.size() - 10, packed.size(), u64::MAX >> 1] {
        let mut bad = bytes.clone();
        bad[hdr..hdr + 8].copy_from_slice(&(off | 1 << 63).to_le_bytes());
        let img = Image::open_unverified(bad).unwrap();
        let inode = img.inode(vinode.nid()).unwrap();
        let e = img.read_vec(&inode, 0, 1 << 20).unwrap_err();
        assert!(e.is_corrupted(), "offset {off:#x}: {e}");
        assert!(e.to_string().contains("packed inode"), "{e}");
        // Another file is unharmed.
        let other = &tree[&b"text-200k"[..]];
        let got = img
            .read_vec(&img.inode(other.nid).unwrap(), 0, 1 << 20)
            .unwrap();
        assert_eq!(&got, src[&b"text-200k"[..]].content.as_ref().unwrap());
    }
}
