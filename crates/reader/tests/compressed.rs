//! Compressed inodes: images made by `mkfs.erofs` (erofs-utils 1.5: LZ4 and LZ4HC, compact and
//! full indexes, big pclusters, ztailpacking) read back equal to the source and to `fsck.erofs
//! --extract`; random reads; the cluster cache (hits, bounds, statistics); and a hand-built image
//! with ZSTD, HEAD2, PLAIN and CBLKCNT extents (mkfs.erofs 1.5 cannot write ZSTD).

use sealfs_format::{
    DataLayout, EROFS_FEATURE_INCOMPAT_ZERO_PADDING, Z_EROFS_ADVISE_COMPACTED_2B,
    Z_EROFS_ADVISE_INLINE_PCLUSTER, Z_EROFS_LCLUSTER_TYPE_HEAD1, Z_EROFS_LI_D0_CBLKCNT,
};
use sealfs_reader::{Compression, Error, ExtentKind, Image, Inode, Options};
use sealfs_testsupport::build::{build_image, compressed};
use sealfs_testsupport::craft::{Craft, BS};
use sealfs_testsupport::walk::{compare, scan_source, walk_image, Expect, Tree};
use sealfs_testsupport::zcraft::*;
use sealfs_testsupport::{
    assert_no_diffs, fsck_extract, have_tool, mkfs, need_tool, oracle_guard, show, Rng,
};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

// ----- the source tree ---------------------------------------------------------------------------

/// The compression fixture: every size and content kind that matters to pclusters.
fn build_tree(root: &Path) {
    let mut rng = Rng::scrambled(42);
    let w = |rel: &str, data: &[u8]| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    };
    w("empty", b"");
    w("one", b"x");
    w("random-100k", &rng.bytes(100_000));
    w("zeros-1m", &vec![0u8; 1 << 20]);
    w("zeros-13m", &vec![0u8; 13 << 20]);
    w("text-200k", &text(&mut rng, 200_000));
    w("text-3m", &text(&mut rng, 3 << 20));
    for n in [4095usize, 4096, 4097, 8192, 16384, 65536, 65537, 131072] {
        w(&format!("sizes/text-{n}"), &text(&mut rng, n));
        w(&format!("sizes/random-{n}"), &rng.bytes(n));
        w(&format!("sizes/zeros-{n}"), &vec![0u8; n]);
    }
    // Alternating compressible and incompressible runs: PLAIN and compressed extents in one file,
    // extents starting in the middle of lclusters.
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
    // A compressible head and an incompressible tail, and the reverse.
    w(
        "text-then-random",
        &[text(&mut rng, 50_000), rng.bytes(7_000)].concat(),
    );
    w(
        "random-then-text",
        &[rng.bytes(7_000), text(&mut rng, 50_000)].concat(),
    );
    for i in 0..150 {
        let n = rng.below(3000) as usize;
        let data = match i % 3 {
            0 => text(&mut rng, n),
            1 => rng.bytes(n),
            _ => vec![b'z'; n],
        };
        w(&format!("many/f{i:03}"), &data);
    }
    std::os::unix::fs::symlink("text-200k", root.join("link")).unwrap();
}

// ----- helpers -----------------------------------------------------------------------------------

/// Regular files of an image tree: path → inode.
fn files(img: &Image, tree: &Tree) -> BTreeMap<Vec<u8>, Inode> {
    tree.iter()
        .filter(|(_, n)| n.content.is_some())
        .map(|(p, n)| (p.clone(), img.inode(n.nid).unwrap()))
        .collect()
}

fn is_compressed(inode: &Inode) -> bool {
    matches!(
        inode.layout(),
        DataLayout::CompressedFull | DataLayout::CompressedCompact
    )
}

/// `h_advise` of a compressed inode, read from its map header.
fn h_advise(img: &Image, inode: &Inode) -> u16 {
    let pos = inode.data_offset().next_multiple_of(8);
    let mut h = [0u8; 8];
    img.read_raw(pos, &mut h).unwrap();
    u16::from_le_bytes([h[4], h[5]])
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

/// Random reads of every file (random offsets, some past the end; random lengths, some long),
/// compared with the source.
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
        let reads = if size > 100_000 { 24 } else { 6 };
        for _ in 0..reads {
            let off = rng.below(size + 100);
            let len = match rng.below(4) {
                0 => rng.below(16) as usize,
                1 => rng.below(5000) as usize,
                2 => rng.below(70_000) as usize,
                _ => rng.below(600_000) as usize,
            };
            let mut buf = vec![0xA5u8; len];
            let n = match img.read(inode, off, &mut buf) {
                Ok(n) => n,
                Err(e) => {
                    diffs.push(format!("/{}: read({off}, {len}): {e}", show(path)));
                    continue;
                }
            };
            let want = if off >= size {
                &[][..]
            } else {
                &content[off as usize..(off as usize + len).min(content.len())]
            };
            if &buf[..n] != want {
                diffs.push(format!("/{}: read({off}, {len}) differs", show(path)));
            }
        }
    }
    diffs
}

/// The extent map of a compressed file covers it exactly, extent after extent, and each extent
/// is one pcluster within the limits.
fn check_map(img: &Image, inode: &Inode, what: &str) -> Result<usize, String> {
    let extents = img
        .map_range(inode, 0, u64::MAX)
        .map_err(|e| format!("{what}: {e}"))?;
    let mut pos = 0;
    for e in &extents {
        let ExtentKind::Compressed {
            physical,
            plen,
            inline,
            extent_start,
            extent_len,
            ..
        } = e.kind
        else {
            return Err(format!("{what}: {e:?} is not a compressed extent"));
        };
        if e.logical != pos || extent_start != e.logical || extent_len != e.length {
            return Err(format!("{what}: {e:?} does not continue at {pos}"));
        }
        if plen == 0 || plen > 1 << 20 || e.length > 12 << 20 {
            return Err(format!("{what}: {e:?} out of limits"));
        }
        if !inline && (physical % 4096 != 0 || plen % 4096 != 0) {
            return Err(format!("{what}: {e:?} is not block-aligned"));
        }
        if inline && physical % 4096 + plen > 4096 {
            return Err(format!("{what}: inline {e:?} crosses a block"));
        }
        pos += e.length;
    }
    if pos != inode.size() {
        return Err(format!(
            "{what}: extents end at {pos}, size {}",
            inode.size()
        ));
    }
    Ok(extents.len())
}

// ----- mkfs.erofs images -------------------------------------------------------------------------

struct Case {
    name: &'static str,
    args: &'static [&'static str],
    layout: DataLayout,
    /// Some extent has a pcluster of more than one block.
    big: bool,
    /// Some extent is an inline tail pcluster.
    inline: bool,
}

fn cases() -> Vec<Case> {
    let c = |name, args, layout, big, inline| Case {
        name,
        args,
        layout,
        big,
        inline,
    };
    use DataLayout::{CompressedCompact as Compact, CompressedFull as Full};
    vec![
        c("lz4", &["-zlz4"], Compact, false, false),
        c("lz4hc", &["-zlz4hc"], Compact, false, false),
        c(
            "lz4hc-64k",
            &["-zlz4hc,12", "-C65536"],
            Compact,
            true,
            false,
        ),
        c("lz4-1m", &["-zlz4", "-C1048576"], Compact, true, false),
        c(
            "lz4-full",
            &["-zlz4", "-Elegacy-compress"],
            Full,
            false,
            false,
        ),
        c(
            "lz4hc-16k-full",
            &["-zlz4hc", "-C16384", "-Elegacy-compress"],
            Full,
            true,
            false,
        ),
        c(
            "lz4-tail",
            &["-zlz4", "-Eztailpacking"],
            Compact,
            false,
            true,
        ),
        c(
            "lz4hc-64k-tail",
            &["-zlz4hc", "-C65536", "-Eztailpacking"],
            Compact,
            true,
            true,
        ),
        c(
            "lz4-full-tail",
            &["-zlz4", "-Eztailpacking", "-Elegacy-compress"],
            Full,
            false,
            true,
        ),
        c(
            "lz4hc-32k-full-tail-compact-inodes",
            &[
                "-zlz4hc,4",
                "-C32768",
                "-Eztailpacking,legacy-compress,force-inode-compact",
                "-T1700000000",
            ],
            Full,
            true,
            true,
        ),
        c(
            "lz4-small-extents",
            &["-zlz4", "--max-extent-bytes=12288"],
            Compact,
            false,
            false,
        ),
    ]
}

fn check_case(dir: &Path, src: &Tree, case: &Case, rng: &mut Rng) {
    let name = case.name;
    let img_path = dir.join(format!("{name}.erofs"));
    mkfs(&dir.join("src"), &img_path, case.args).unwrap();
    let img = Image::open_unverified(fs::File::open(&img_path).unwrap()).unwrap();
    let tree = walk_image(&img).unwrap_or_else(|e| panic!("{name}: {e}"));
    let expect = Expect {
        mtime: None,
        xattrs: false,
        nlink: true,
        owners: !case.args.iter().any(|a| a.contains("force-inode-compact")),
        force_owner: None,
    };
    let mut diffs = compare(src, &tree, &expect);
    diffs.retain(|d| !(d.contains(": mtime:") && case.args.iter().any(|a| a.starts_with("-T"))));
    assert_no_diffs(name, &diffs);

    // The case exercised what it is meant to.
    let files = files(&img, &tree);
    let compressed: Vec<_> = files.values().filter(|i| is_compressed(i)).collect();
    assert!(
        compressed.len() > 10,
        "{name}: {} compressed",
        compressed.len()
    );
    assert!(
        compressed.iter().all(|i| i.layout() == case.layout),
        "{name}: layouts"
    );
    let (mut big, mut inline, mut plain, mut lz4, mut extents) = (false, false, false, false, 0);
    for (path, inode) in &files {
        if !is_compressed(inode) {
            continue;
        }
        extents += check_map(&img, inode, &format!("{name}: /{}", show(path)))
            .unwrap_or_else(|e| panic!("{e}"));
        for e in img.map_range(inode, 0, u64::MAX).unwrap() {
            if let ExtentKind::Compressed {
                plen,
                inline: il,
                algorithm,
                ..
            } = e.kind
            {
                big |= plen > 4096;
                inline |= il;
                plain |= algorithm == Compression::Plain;
                lz4 |= algorithm == Compression::Lz4;
            }
        }
    }
    println!(
        "{name}: {} compressed files, {extents} extents",
        compressed.len()
    );
    assert_eq!(big, case.big, "{name}: big pclusters");
    assert_eq!(inline, case.inline, "{name}: inline pclusters");
    // Incompressible data is stored in PLAIN lclusters (big pclusters can absorb it).
    assert!(
        lz4 && (plain || case.big),
        "{name}: plain {plain}, lz4 {lz4}"
    );
    if case.layout == DataLayout::CompressedCompact && !case.big {
        // erofs-utils uses 2-byte compact packs whenever big pclusters are off.
        assert!(
            compressed
                .iter()
                .any(|i| h_advise(&img, i) & Z_EROFS_ADVISE_COMPACTED_2B != 0),
            "{name}: no COMPACTED_2B inode"
        );
    }
    if case.inline {
        assert!(compressed
            .iter()
            .any(|i| h_advise(&img, i) & Z_EROFS_ADVISE_INLINE_PCLUSTER != 0));
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
        let s = small.stats();
        assert!(s.cluster_cache_peak_bytes <= bound as u64, "{name}: {s:?}");
        if bound == 0 {
            assert_eq!((s.cluster_hits, s.cluster_cache_bytes), (0, 0), "{name}");
        }
    }

    // fsck.erofs --extract of the same image has the same file contents as the reader.
    let out = dir.join(format!("{name}.extract"));
    fsck_extract(&img_path, &out).unwrap();
    let extracted = scan_source(&out);
    let mut diffs = Vec::new();
    for (path, inode) in &files {
        let want = extracted
            .get(path)
            .and_then(|n| n.content.as_ref())
            .unwrap_or_else(|| panic!("{name}: /{} not extracted", show(path)));
        if tree[path].content.as_ref() != Some(want) || inode.size() != want.len() as u64 {
            diffs.push(format!("/{}: differs from fsck.erofs", show(path)));
        }
    }
    assert_no_diffs(&format!("{name} vs fsck.erofs --extract"), &diffs);
}

#[test]
fn mkfs_compressed_images_read_back_equal_to_the_source_and_fsck() {
    if !oracle_guard(need_tool("mkfs.erofs").and(need_tool("fsck.erofs"))) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    fs::create_dir(&src_path).unwrap();
    build_tree(&src_path);
    let src = scan_source(&src_path);
    let mut rng = Rng::scrambled(11);
    for case in cases() {
        check_case(dir.path(), &src, &case, &mut rng);
    }
}

// ----- the cluster cache -------------------------------------------------------------------------

/// An image with big pclusters (few, large extents) and its source tree.
fn cache_image(dir: &Path) -> (std::path::PathBuf, Tree) {
    let src_path = dir.join("src");
    fs::create_dir(&src_path).unwrap();
    build_tree(&src_path);
    let img_path = dir.join("cache.erofs");
    mkfs(&src_path, &img_path, &["-zlz4hc", "-C65536"]).unwrap();
    (img_path, scan_source(&src_path))
}

/// The number of extents overlapping `[off, off + len)`: the cluster lookups a read makes.
fn lookups(img: &Image, inode: &Inode, off: u64, len: u64) -> u64 {
    img.map_range(inode, off, len).unwrap().len() as u64
}

#[test]
fn cluster_cache_hits_bounds_and_counts() {
    if !oracle_guard(need_tool("mkfs.erofs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img_path, src) = cache_image(dir.path());

    // Repeated reads are served from the cache: no compressed byte is read again.
    let img = open_with(&img_path, 64 << 20);
    let text = img.lookup_path("/text-3m").unwrap();
    let want = src[&b"text-3m"[..]].content.clone().unwrap();
    let n = lookups(&img, &text, 0, text.size());
    assert!(n > 10, "{n} extents");
    let s0 = img.stats();
    assert_eq!(img.read_vec(&text, 0, 4 << 20).unwrap(), want);
    let s1 = img.stats().since(&s0);
    assert_eq!((s1.cluster_hits, s1.cluster_misses), (0, n), "{s1:?}");
    assert!(s1.compressed_bytes_read > 0 && s1.compressed_bytes_read < want.len() as u64);
    assert_eq!(s1.decompressed_bytes, want.len() as u64);
    assert_eq!(s1.cluster_cache_bytes, want.len() as u64);
    let s1 = img.stats();
    assert_eq!(img.read_vec(&text, 0, 4 << 20).unwrap(), want);
    let s2 = img.stats().since(&s1);
    assert_eq!((s2.cluster_hits, s2.cluster_misses), (n, 0), "{s2:?}");
    assert_eq!((s2.compressed_bytes_read, s2.decompressed_bytes), (0, 0));
    assert_eq!(s2.blocks_read, 0, "{s2:?}");

    // A read decodes only the extents it overlaps: one byte in the middle is one extent, of which
    // only the prefix up to that byte is decoded (and cached); a second read past the prefix
    // decodes the whole extent.
    let fresh = open_with(&img_path, 64 << 20);
    let e = fresh.map(&text, text.size() / 2).unwrap();
    let mid = e.logical + e.length / 2;
    let ExtentKind::Compressed { plen, .. } = e.kind else {
        panic!("{e:?}")
    };
    let mut byte = [0u8; 1];
    fresh.read(&text, mid, &mut byte).unwrap();
    assert_eq!(byte[0], want[mid as usize]);
    let s = fresh.stats();
    assert_eq!((s.cluster_misses, s.compressed_bytes_read), (1, plen));
    assert_eq!(s.decompressed_bytes, mid - e.logical + 1);
    assert_eq!(s.cluster_cache_bytes, mid - e.logical + 1);
    fresh.read(&text, mid - 100, &mut byte).unwrap();
    assert_eq!(byte[0], want[mid as usize - 100]);
    assert_eq!(fresh.stats().since(&s).cluster_hits, 1);
    fresh.read(&text, mid + 1, &mut byte).unwrap();
    assert_eq!(byte[0], want[mid as usize + 1]);
    let s2 = fresh.stats().since(&s);
    assert_eq!((s2.cluster_hits, s2.cluster_misses), (1, 1), "{s2:?}");
    assert_eq!(s2.decompressed_bytes, e.length);
    assert_eq!(s2.cluster_cache_bytes, e.length);

    // A small bound is never exceeded, entries are evicted, and hits + misses == lookups.
    let bound = 150_000;
    let img = open_with(&img_path, bound);
    let all: Vec<(Vec<u8>, Inode)> = src
        .iter()
        .filter(|(_, n)| n.content.is_some())
        .map(|(p, _)| (p.clone(), img.lookup_path(&p[..]).unwrap()))
        .collect();
    let mut rng = Rng::scrambled(5);
    let mut expected_lookups = 0;
    for round in 0..3000 {
        let (path, inode) = &all[rng.below(all.len() as u64) as usize];
        let content = src[path].content.as_ref().unwrap();
        if content.is_empty() {
            continue;
        }
        let off = rng.below(content.len() as u64);
        let len = 1 + rng.below(if round % 10 == 0 { 300_000 } else { 9000 });
        let got = img.read_vec(inode, off, len as usize).unwrap();
        let end = (off + len).min(content.len() as u64) as usize;
        assert_eq!(got, &content[off as usize..end], "{round}");
        if is_compressed(inode) {
            expected_lookups += lookups(&img, inode, off, len);
        }
        let s = img.stats();
        assert!(s.cluster_cache_bytes <= bound as u64, "{s:?}");
        assert!(img.cluster_cache_usage().1 <= bound);
    }
    let s = img.stats();
    println!("bound {bound}: {s:?}");
    assert_eq!(s.cluster_hits + s.cluster_misses, expected_lookups, "{s:?}");
    assert!(s.cluster_cache_peak_bytes <= bound as u64, "{s:?}");
    assert!(s.cluster_evictions > 0 && s.cluster_hits > 0, "{s:?}");

    // A mount's policy (`keep_passed_extents: false`): an extent a read takes to its end is not
    // kept, so a streaming read leaves the cache empty; an extent a read stops inside is kept for
    // the read that goes on, which takes it from the cache and drops it.
    let open_streaming = || {
        Image::open_unverified_with(
            fs::File::open(&img_path).unwrap(),
            &Options {
                keep_passed_extents: false,
                ..Options::default()
            },
        )
        .unwrap()
    };
    let streaming = open_streaming();
    assert_eq!(streaming.read_vec(&text, 0, 4 << 20).unwrap(), want);
    let s = streaming.stats();
    assert_eq!((s.cluster_misses, s.cluster_hits), (n, 0), "{s:?}");
    assert_eq!(streaming.cluster_cache_usage(), (0, 0));
    // (A fresh image: that read has just passed every extent, so a read of one's head now is
    // taken for a late request of the same stream, and not cached either.)
    let streaming = open_streaming();
    let s = streaming.stats();
    let e = streaming.map(&text, text.size() / 2).unwrap();
    let half = e.logical + e.length / 2;
    let first = streaming.read_vec(&text, e.logical, (half - e.logical) as usize);
    assert_eq!(first.unwrap(), &want[e.logical as usize..half as usize]);
    assert_eq!(streaming.cluster_cache_usage(), (1, e.length as usize));
    let rest = streaming.read_vec(&text, half, (e.logical + e.length - half) as usize);
    assert_eq!(
        rest.unwrap(),
        &want[half as usize..(e.logical + e.length) as usize]
    );
    let s2 = streaming.stats().since(&s);
    assert_eq!((s2.cluster_misses, s2.cluster_hits), (1, 1), "{s2:?}");
    assert_eq!(streaming.cluster_cache_usage(), (0, 0));

    // A bound smaller than every extent caches nothing; 0 turns the cache off.
    for bound in [1000, 0] {
        let img = open_with(&img_path, bound);
        for _ in 0..2 {
            assert_eq!(img.read_vec(&text, 0, 4 << 20).unwrap(), want);
        }
        let s = img.stats();
        assert_eq!((s.cluster_hits, s.cluster_misses), (0, 2 * n), "{s:?}");
        assert_eq!((s.cluster_cache_peak_bytes, s.cluster_evictions), (0, 0));
        assert_eq!(img.cluster_cache_usage(), (0, 0));
    }
}

#[test]
fn concurrent_reads_share_the_cache() {
    if !oracle_guard(need_tool("mkfs.erofs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img_path, src) = cache_image(dir.path());
    let img = std::sync::Arc::new(open_with(&img_path, 300_000));
    let src = std::sync::Arc::new(src);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (img, src) = (img.clone(), src.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::scrambled(t);
                for name in ["text-3m", "mixed", "text-200k", "random-100k", "zeros-13m"] {
                    let inode = img.lookup_path(name).unwrap();
                    let content = src[name.as_bytes()].content.as_ref().unwrap();
                    for _ in 0..50 {
                        let off = rng.below(content.len() as u64) as usize;
                        let len = rng.below(100_000) as usize;
                        let got = img.read_vec(&inode, off as u64, len).unwrap();
                        assert_eq!(got, &content[off..(off + len).min(content.len())]);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(img.stats().cluster_cache_peak_bytes <= 300_000);
}

/// The image file, each read 20 ms late: concurrent reads of one extent overlap for certain.
struct SlowFile(fs::File);

impl sealfs_reader::ReadAt for SlowFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::os::unix::fs::FileExt::read_at(&self.0, buf, offset)
    }
    fn len(&self) -> u64 {
        self.0.metadata().map(|m| m.len()).unwrap_or(0)
    }
}

/// Four reads of the same extent at once (as FUSE threads serving neighbouring requests make):
/// one decodes it, the others wait for its bytes, and every one gets them right.
#[test]
fn concurrent_reads_of_one_extent_decode_it_once() {
    if !oracle_guard(need_tool("mkfs.erofs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img_path, src) = cache_image(dir.path());
    let img = std::sync::Arc::new(
        Image::open_unverified_with(
            SlowFile(fs::File::open(&img_path).unwrap()),
            &Options::default(),
        )
        .unwrap(),
    );
    let inode = img.lookup_path("text-3m").unwrap();
    let first = img.map_range(&inode, 0, inode.size()).unwrap()[0];
    let content = &src[b"text-3m".as_slice()].content.as_ref().unwrap()[..first.length as usize];
    let before = img.stats();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (img, inode, barrier) = (img.clone(), inode.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                // Each from the extent's start (so each would decode all of it), different lengths.
                img.read_vec(&inode, 0, 1000 * (t as usize + 1)).unwrap()
            })
        })
        .collect();
    for (t, h) in threads.into_iter().enumerate() {
        let got = h.join().unwrap();
        assert!(got == content[..got.len()], "read {t}: wrong bytes");
    }
    let after = img.stats();
    assert_eq!(
        after.cluster_misses - before.cluster_misses,
        1,
        "one decode"
    );
    assert_eq!(
        after.cluster_hits - before.cluster_hits,
        3,
        "three reads waited for it"
    );
    assert_eq!(
        after.decompressed_bytes - before.decompressed_bytes,
        first.length
    );
}

#[test]
fn crafted_zstd_head2_plain_and_cblkcnt_extents() {
    let (c, want) = zstd_image();
    let img = Image::open_unverified(c.finish()).unwrap();
    let compr = &img.superblock().compr;
    assert_eq!(compr.available_algs, 0b1011);
    assert_eq!(compr.lz4_max_pclusterblks, 2);
    assert_eq!(compr.lzma_dict_size, Some(65536));
    assert_eq!(compr.zstd_windowlog, Some(7));

    let z = img.lookup_path("/z").unwrap();
    assert_eq!(img.read_vec(&z, 0, 1 << 20).unwrap(), want);
    let kinds: Vec<_> = img
        .map_range(&z, 0, u64::MAX)
        .unwrap()
        .into_iter()
        .map(|e| match e.kind {
            ExtentKind::Compressed {
                physical,
                plen,
                algorithm,
                inline,
                ..
            } => (
                e.logical,
                e.length,
                physical / 4096,
                plen,
                algorithm,
                inline,
            ),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (0, 20_000, 10, 8192, Compression::Zstd, false),
            (20_000, 6000, 12, 4096, Compression::Zstd, false),
            (26_000, 4000, 13, 4096, Compression::Plain, false),
            (30_000, 10_000, 14, 4096, Compression::Lz4, false),
        ]
    );
    // Offsets before a HEAD's clusterofs belong to the previous extent.
    for (off, start) in [(16_384, 0), (19_999, 0), (20_000, 20_000), (24_575, 20_000)] {
        let e = img.map(&z, off).unwrap();
        assert_eq!(e.logical, start, "{off}");
    }
    // Reads of every small range near the extent boundaries.
    for edge in [
        0usize, 4096, 8192, 16_384, 20_000, 24_576, 26_000, 28_672, 30_000, 36_864,
    ] {
        for off in edge.saturating_sub(3)..edge + 3 {
            for len in [1, 2, 5, 4097] {
                let got = img.read_vec(&z, off as u64, len).unwrap();
                assert!(got == want[off..(off + len).min(ZSIZE)], "{off} {len}");
            }
        }
    }
    // All four extents are cached now: reading again hits.
    let s = img.stats();
    img.read_vec(&z, 0, ZSIZE).unwrap();
    let d = img.stats().since(&s);
    assert_eq!((d.cluster_hits, d.cluster_misses), (4, 0), "{d:?}");

    let err = |path: &str| {
        let inode = img.lookup_path(path).unwrap();
        img.read_vec(&inode, 0, 100).unwrap_err()
    };
    // Its pcluster is no MicroLZMA stream: corrupted, where it is.
    let e = err("/lzma");
    assert!(e.is_corrupted(), "{e}");
    assert!(e.to_string().contains("MicroLZMA data"), "{e}");
    assert!(
        e.to_string().contains(&format!("nid {LZMA}, block 15")),
        "{e}"
    );
    let lzma = img.lookup_path("/lzma").unwrap();
    let e = img.map(&lzma, 0).unwrap();
    assert!(
        matches!(
            e.kind,
            ExtentKind::Compressed {
                algorithm: Compression::Lzma,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err("/deflate");
    assert!(
        e.is_corrupted() && e.to_string().contains("available_compr_algs"),
        "{e}"
    );
    let e = err("/zpad");
    assert!(
        e.is_corrupted() && e.to_string().contains("zero padding"),
        "{e}"
    );
    assert!(
        e.to_string().contains(&format!("nid {ZPAD}, block 16")),
        "{e}"
    );
    let cdir = img.lookup_path("/cdir").unwrap();
    let names: Vec<Vec<u8>> = img
        .read_dir_all(&cdir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, [&b"."[..], b"..", b"z", b"zz-also-z"]);
    assert_eq!(img.lookup_path("/cdir/zz-also-z").unwrap().nid(), Z);
    let e = err("/huge");
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains("12 MiB"), "{e}");
}

/// Changes one index entry of `/z` (lcluster `lcn`), or its header (`lcn` = None).
fn damage_z(c: &mut Craft, lcn: Option<usize>, bytes: &[u8]) {
    let hdr = Craft::iloc(Z) + 32;
    let at = match lcn {
        Some(l) => hdr + 16 + 8 * l,
        None => hdr,
    };
    c.put(at, bytes);
}

/// (what, lcluster or header, new bytes, message, corrupted rather than unsupported)
type Damage = (&'static str, Option<usize>, Vec<u8>, &'static str, bool);

#[test]
fn crafted_index_damage_is_reported() {
    let h1 = Z_EROFS_LCLUSTER_TYPE_HEAD1;
    let cases: Vec<Damage> = vec![
        (
            "no big pcluster",
            None,
            vec![0, 0, 0, 0, 0, 0],
            "CBLKCNT",
            true,
        ),
        (
            "clusterofs",
            Some(0),
            head(h1, 5000, 10).to_vec(),
            "clusterofs 5000",
            true,
        ),
        (
            "lcluster 0",
            Some(0),
            head(h1, 100, 10).to_vec(),
            "logical cluster 0",
            true,
        ),
        (
            "zero lookback",
            Some(3),
            nonhead(0, 1).to_vec(),
            "lookback distance 0",
            true,
        ),
        (
            "long lookback",
            Some(3),
            nonhead(9, 1).to_vec(),
            "lookback distance 9",
            true,
        ),
        (
            "bad cblkcnt",
            Some(5),
            nonhead(3, 1).to_vec(),
            "bogus CBLKCNT",
            true,
        ),
        (
            "block address",
            Some(4),
            head(h1, 3616, 1 << 30).to_vec(),
            "past the end",
            true,
        ),
        (
            "plain too long",
            Some(7),
            nonhead(1, 1).to_vec(),
            "longer than its pcluster",
            true,
        ),
        (
            "unknown HEAD2",
            None,
            vec![0, 0, 0, 0, 2, 0, 0x53],
            "HEAD2",
            false,
        ),
        (
            // HEAD1 is LZ4 now, and extent A's pcluster 3 blocks: more than the LZ4 record's 2.
            "lz4 in 3 blocks",
            None,
            [
                &[0, 0, 0, 0, 2, 0, 0x30, 0][..],
                &[0; 8],
                &head(h1, 0, 10),
                &nonhead(Z_EROFS_LI_D0_CBLKCNT | 3, 3),
            ]
            .concat(),
            "max_pclusterblks 2",
            true,
        ),
    ];
    for (what, lcn, bytes, msg, corrupted) in cases {
        let (mut c, want) = zstd_image();
        damage_z(&mut c, lcn, &bytes);
        let img = Image::open_unverified(c.finish()).unwrap();
        let z = img.lookup_path("/z").unwrap();
        // Reads fail with an error naming the damage and the inode (bytes that still map read
        // as the kernel would read them: not necessarily the original ones).
        let mut errors = Vec::new();
        for off in (0..ZSIZE).step_by(997) {
            if let Err(e) = img.read_vec(&z, off as u64, 3000) {
                errors.push(e);
            }
        }
        let e = errors
            .iter()
            .find(|e| e.to_string().contains(msg))
            .unwrap_or_else(|| panic!("{what}: {errors:?}"));
        assert_eq!(e.is_corrupted(), corrupted, "{what}: {e}");
        assert!(e.to_string().contains(&format!("nid {Z}")), "{what}: {e}");
        // The undamaged extents still read back.
        let intact = img.read_vec(&z, 30_000, 10_000);
        if !what.starts_with("unknown") && !what.starts_with("lz4") && !what.starts_with("plain") {
            assert!(intact.unwrap() == want[30_000..], "{what}");
        }
        let _ = img.map_range(&z, 0, u64::MAX);
    }
}

/// (what, change, message, corrupted rather than unsupported)
type BadConfig = (&'static str, Box<dyn Fn(&mut Craft)>, &'static str, bool);

#[test]
fn crafted_bad_compression_configs_fail_the_open() {
    let cases: Vec<BadConfig> = vec![
        (
            "unknown algorithm",
            Box::new(|c| c.sb.u1.set(0b1_1011)),
            "unknown compression algorithms 0x10",
            false,
        ),
        (
            "zstd windowlog",
            Box::new(|c| c.put(1152 + 16 + 16 + 3, &[11])),
            "ZSTD windowlog 11",
            true,
        ),
        (
            "short lz4 record",
            Box::new(|c| c.put(1152, &[10, 0])),
            "LZ4 config",
            true,
        ),
        (
            "lz4 pcluster blocks",
            Box::new(|c| c.put(1156, &[1, 1])),
            "max_pclusterblks 257",
            true,
        ),
        (
            "lzma format",
            Box::new(|c| c.put(1168 + 6, &[1])),
            "LZMA format",
            true,
        ),
    ];
    for (what, f, msg, corrupted) in cases {
        let (mut c, _) = zstd_image();
        f(&mut c);
        let e = Image::open_unverified(c.finish()).unwrap_err();
        assert_eq!(e.is_corrupted(), corrupted, "{what}: {e}");
        assert!(e.to_string().contains(msg), "{what}: {e}");
    }
    // A record length of 0 means 65536 bytes, which must be inside the image.
    let (mut c, _) = zstd_image();
    c.put(1184, &[0, 0]);
    let bytes = c.finish();
    let img = Image::open_unverified(bytes.clone()).unwrap();
    assert_eq!(img.superblock().compr.zstd_windowlog, Some(7));
    let e = Image::open_unverified(bytes[..2 * BS].to_vec()).unwrap_err();
    assert!(
        e.is_corrupted() && e.to_string().contains("past the end"),
        "{e}"
    );

    // Without COMPR_CFGS the image is LZ4-only: /z's ZSTD extents are inconsistent.
    let (mut c, _) = zstd_image();
    c.sb.feature_incompat
        .set(EROFS_FEATURE_INCOMPAT_ZERO_PADDING);
    damage_z(&mut c, None, &[0, 0, 0, 0, 0, 0]);
    let img = Image::open_unverified(c.finish()).unwrap();
    assert_eq!(img.superblock().compr.available_algs, 1);
    let z = img.lookup_path("/z").unwrap();
    let e = img.read_vec(&z, 0, 10).unwrap_err();
    assert!(e.to_string().contains("available_compr_algs"), "{e}");
}

// ----- verified compressed reads -----------------------------------------------------------------

#[test]
fn verified_compressed_reads_check_pclusters_once() {
    use sealfs_reader::{ReadAt, SealInfo, VerifiedBlocks};
    use sealfs_verity::{build_tree, HashAlg, Params};
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;
    if !oracle_guard(need_tool("mkfs.erofs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img_path, src) = cache_image(dir.path());
    let bytes = fs::read(&img_path).unwrap();
    let params = Params::new(HashAlg::Sha256, 4096, b"").unwrap();
    let tree = build_tree(&params, &bytes).unwrap();
    let seal = SealInfo {
        params,
        data_length: bytes.len() as u64,
        tree_offset: 0,
        root: tree.root,
    };
    let open = |data: Vec<u8>| {
        let data: Arc<dyn ReadAt> = Arc::new(data);
        let tree: Arc<dyn ReadAt> = Arc::new(tree.bytes.clone());
        let vb = Arc::new(VerifiedBlocks::new(data, tree, seal.clone(), 64).unwrap());
        (
            Image::open_blocks(vb.clone(), &Options::default()).unwrap(),
            vb,
        )
    };

    // Every pcluster is verified when fetched, once: a second read is served decoded.
    let (img, vb) = open(bytes.clone());
    let text = img.lookup_path("/text-3m").unwrap();
    let want = src[&b"text-3m"[..]].content.clone().unwrap();
    assert_eq!(img.read_vec(&text, 0, 4 << 20).unwrap(), want);
    let verified = vb.stats().blocks_verified.load(Relaxed);
    let s = img.stats();
    assert!(
        verified * 4096 >= s.compressed_bytes_read,
        "{verified} {s:?}"
    );
    assert_eq!(img.read_vec(&text, 0, 4 << 20).unwrap(), want);
    assert_eq!(vb.stats().blocks_verified.load(Relaxed), verified);
    assert_eq!(img.stats().since(&s).cluster_misses, 0);

    // A tampered pcluster fails the reads that need it, and only those.
    let extents = img.map_range(&text, 0, u64::MAX).unwrap();
    let victim = extents[extents.len() / 2];
    let ExtentKind::Compressed { physical, plen, .. } = victim.kind else {
        panic!("{victim:?}")
    };
    let mut bad = bytes.clone();
    bad[(physical + plen - 10) as usize] ^= 0x40;
    let (img, _) = open(bad);
    let e = img.read_vec(&text, victim.logical + 5, 10).unwrap_err();
    assert!(matches!(e, Error::Verification { .. }), "{e}");
    let before = extents[extents.len() / 2 - 1];
    let got = img
        .read_vec(&text, before.logical, before.length as usize)
        .unwrap();
    assert!(got == want[before.logical as usize..(before.logical + before.length) as usize]);
    let mixed = img.lookup_path("/mixed").unwrap();
    assert!(
        img.read_vec(&mixed, 0, 1 << 20).unwrap() == *src[&b"mixed"[..]].content.as_ref().unwrap()
    );
}

// ----- images of the sealfs builder --------------------------------------------------------------

/// The sealfs builder's compressed images (ZSTD too, which mkfs.erofs 1.5 cannot write) read
/// back equal to the source; the LZ4 ones also equal `fsck.erofs --extract`. The images come from
/// the builder library (a dev-dependency: the reader itself does not depend on the builder).
#[test]
fn sealfs_compressed_images_read_back_equal_to_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    fs::create_dir(&src_path).unwrap();
    build_tree(&src_path);
    let src = scan_source(&src_path);
    let mut rng = Rng::scrambled(12);
    for (name, opts, alg) in [
        ("zstd", compressed("zstd", 4096), Compression::Zstd),
        ("zstd-64k", compressed("zstd,9", 65536), Compression::Zstd),
        ("lz4", compressed("lz4", 4096), Compression::Lz4),
        ("lz4hc-16k", compressed("lz4hc", 16384), Compression::Lz4),
    ] {
        let img_path = dir.path().join(format!("{name}.img"));
        build_image(&src_path, &img_path, &opts).unwrap();
        let img = Image::open_unverified(fs::File::open(&img_path).unwrap()).unwrap();
        let tree = walk_image(&img).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_no_diffs(name, &compare(&src, &tree, &Expect::default()));
        let files = files(&img, &tree);
        let mut seen = false;
        for (path, inode) in files.iter().filter(|(_, i)| is_compressed(i)) {
            check_map(&img, inode, &format!("{name}: /{}", show(path)))
                .unwrap_or_else(|e| panic!("{e}"));
            seen |= img.map_range(inode, 0, u64::MAX).unwrap().iter().any(
                |e| matches!(e.kind, ExtentKind::Compressed { algorithm, .. } if algorithm == alg),
            );
        }
        assert!(seen, "{name}: no {alg:?} extent");
        assert_no_diffs(name, &random_reads(&img, &src, &files, &mut rng));
        if alg == Compression::Lz4 && have_tool("fsck.erofs") {
            let out = dir.path().join(format!("{name}.extract"));
            fsck_extract(&img_path, &out).unwrap();
            let extracted = scan_source(&out);
            for (path, node) in &tree {
                if let Some(content) = &node.content {
                    assert!(
                        extracted[path].content.as_ref() == Some(content),
                        "{name}: /{} differs from fsck.erofs",
                        show(path)
                    );
                }
            }
        }
    }
}

// ----- decoding straight into the reader's buffer ------------------------------------------------

/// With `keep_passed_extents` off (a FUSE mount), an extent a read takes whole is decoded
/// straight into the read's buffer; the others go through the cluster cache. Sequential reads in
/// 1 MiB pieces (as the kernel asks with a 1 MiB readahead: most extents whole, the ones across a
/// border in two reads) and random reads of every file equal the source, for the sealfs builder's
/// LZ4, LZ4HC and ZSTD images and, where `mkfs.erofs` is installed, its legacy (no zero padding:
/// LZ4's partial decoder) and tail-packed images; the sequential pass leaves the cache empty.
#[test]
fn extents_read_whole_decode_into_the_read_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    fs::create_dir(&src_path).unwrap();
    build_tree(&src_path);
    let src = scan_source(&src_path);
    let mut rng = Rng::scrambled(31);
    let mut images = Vec::new();
    for (name, opts) in [
        ("lz4", compressed("lz4", 4096)),
        ("lz4hc-64k", compressed("lz4hc", 65536)),
        ("zstd-64k", compressed("zstd", 65536)),
    ] {
        let path = dir.path().join(format!("{name}.img"));
        build_image(&src_path, &path, &opts).unwrap();
        images.push((name.to_string(), path));
    }
    if have_tool("mkfs.erofs") {
        for case in cases()
            .into_iter()
            .filter(|c| ["lz4-full", "lz4hc-64k-tail", "lz4-full-tail"].contains(&c.name))
        {
            let path = dir.path().join(format!("{}.erofs", case.name));
            mkfs(&src_path, &path, case.args).unwrap();
            images.push((case.name.to_string(), path));
        }
    }
    for (name, path) in images {
        let img = Image::open_unverified_with(
            fs::File::open(&path).unwrap(),
            &Options {
                keep_passed_extents: false,
                ..Options::default()
            },
        )
        .unwrap();
        let tree = walk_image(&img).unwrap_or_else(|e| panic!("{name}: {e}"));
        let files = files(&img, &tree);
        for (p, inode) in files.iter().filter(|(_, i)| is_compressed(i)) {
            let content = src[p].content.as_ref().unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0x5Au8; 1 << 20];
            loop {
                let n = img.read(inode, got.len() as u64, &mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            assert!(
                got == *content,
                "{name}: /{} read in 1 MiB pieces differs",
                show(p)
            );
        }
        assert_eq!(
            img.cluster_cache_usage().1,
            0,
            "{name}: the cache kept passed extents"
        );
        assert_no_diffs(&name, &random_reads(&img, &src, &files, &mut rng));
    }
}

// ----- prefix decoding ---------------------------------------------------------------------------

/// A read that ends inside an extent decodes only the extent's prefix up to its end (the cache
/// off, or a first miss inside the extent); every such read equals the source at every offset of
/// every extent, for LZ4 and ZSTD, and the statistics count exactly the prefix decoded. With the
/// cache on and a small bound, prefixes, their extension to whole extents and hits interleave
/// without exceeding the bound, and hits + misses still equal the lookups.
#[test]
fn prefix_decodes_equal_full_decodes_at_every_offset() {
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    fs::create_dir(&src_path).unwrap();
    build_tree(&src_path);
    let src = scan_source(&src_path);
    for (name, opts) in [
        ("lz4hc-64k", compressed("lz4hc", 65536)),
        ("zstd-64k", compressed("zstd", 65536)),
        ("lz4-4k", compressed("lz4", 4096)),
    ] {
        let img_path = dir.path().join(format!("{name}.img"));
        build_image(&src_path, &img_path, &opts).unwrap();
        let off = open_with(&img_path, 0);
        let tree = walk_image(&off).unwrap();
        let files = files(&off, &tree);
        let mut prefix_reads = 0;
        for (path, inode) in files.iter().filter(|(_, i)| is_compressed(i)) {
            let content = src[path].content.as_ref().unwrap();
            for e in off.map_range(inode, 0, u64::MAX).unwrap() {
                let ExtentKind::Compressed { algorithm, .. } = e.kind else {
                    panic!("{e:?}")
                };
                let step = (e.length / 64).max(1);
                let mut offsets: Vec<u64> = (0..e.length).step_by(step as usize).collect();
                offsets.extend([e.length - 1, e.length.saturating_sub(4096)]);
                for rel in offsets {
                    let pos = e.logical + rel;
                    let len = (e.length - rel).min(4096);
                    let s0 = off.stats();
                    let got = off.read_vec(inode, pos, len as usize).unwrap();
                    assert_eq!(
                        got,
                        &content[pos as usize..(pos + len) as usize],
                        "{name}: /{} at {pos}",
                        show(path)
                    );
                    let s = off.stats().since(&s0);
                    assert_eq!((s.cluster_hits, s.cluster_misses), (0, 1), "{s:?}");
                    if matches!(algorithm, Compression::Lz4 | Compression::Zstd) {
                        // Exactly the prefix the read needs.
                        assert_eq!(s.decompressed_bytes, rel + len, "{name} {e:?} {rel}");
                        prefix_reads += (rel + len < e.length) as u64;
                    }
                }
            }
        }
        assert!(prefix_reads > 100, "{name}: {prefix_reads} prefix reads");

        // Cache on, small bound: random reads inside and across extents.
        let bound = 200_000;
        let img = open_with(&img_path, bound);
        let mut rng = Rng::scrambled(77);
        let all: Vec<_> = files.iter().filter(|(_, i)| is_compressed(i)).collect();
        let mut expected_lookups = 0;
        for round in 0..4000 {
            let (path, inode) = all[rng.below(all.len() as u64) as usize];
            let content = src[path].content.as_ref().unwrap();
            let pos = rng.below(content.len() as u64);
            let len = 1 + rng.below(if round % 8 == 0 { 150_000 } else { 4096 });
            let got = img.read_vec(inode, pos, len as usize).unwrap();
            let end = (pos + len).min(content.len() as u64) as usize;
            assert_eq!(got, &content[pos as usize..end], "{name} round {round}");
            expected_lookups += lookups(&img, inode, pos, len);
            assert!(img.cluster_cache_usage().1 <= bound);
        }
        let s = img.stats();
        assert_eq!(s.cluster_hits + s.cluster_misses, expected_lookups, "{s:?}");
        assert!(s.cluster_cache_peak_bytes <= bound as u64, "{s:?}");
        assert!(
            s.cluster_hits > 0 && s.cluster_evictions > 0,
            "{name}: {s:?}"
        );
        assert_eq!(s.cluster_cache_bytes as usize, img.cluster_cache_usage().1);
    }
}

/// An inode with 4-byte extent records (each pcluster right after the previous one, from one
/// 8-byte first address) whose first address is so high that adding a pcluster's length passes
/// 2^64: a read is a "corrupted" error naming the sum, not an overflow (found by fuzzing; the
/// image is `fuzz_regressions/ext-4byte-records-sum-overflow`).
#[test]
fn four_byte_extent_records_summing_past_2_64_are_corrupted() {
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    fs::create_dir(&src_path).unwrap();
    let mut rng = Rng::scrambled(7);
    fs::write(src_path.join("f"), text(&mut rng, 40_000)).unwrap();
    let mut opts = compressed("lz4", 4096);
    opts.compress.as_mut().unwrap().extents_48bit = true;
    let img_path = dir.path().join("48bit.img");
    build_image(&src_path, &img_path, &opts).unwrap();
    let img = Image::open_unverified(fs::File::open(&img_path).unwrap()).unwrap();
    let inode = img.lookup_path("/f").unwrap();
    assert!(is_compressed(&inode));
    let recsz = sealfs_format::z_erofs_extent_recsz(h_advise(&img, &inode));
    assert_eq!(recsz, 4, "the builder wrote {recsz}-byte records");
    let mut buf = vec![0u8; 40_000];
    assert_eq!(img.read(&inode, 0, &mut buf).unwrap(), 40_000);
    let first_address =
        sealfs_format::z_erofs_extent_records_start(inode.data_offset().next_multiple_of(8), recsz)
            as usize;
    drop(img);

    let mut bytes = fs::read(&img_path).unwrap();
    bytes[first_address..first_address + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    fs::write(&img_path, &bytes).unwrap();
    let img = Image::open_unverified(fs::File::open(&img_path).unwrap()).unwrap();
    let inode = img.lookup_path("/f").unwrap();
    let err = img.read(&inode, 0, &mut buf).unwrap_err();
    assert!(
        err.to_string()
            .contains("sum past the end of the address space"),
        "{err}"
    );
}
