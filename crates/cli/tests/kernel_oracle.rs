//! The kernel as oracle: build the full fixture (every case, see `common::fixture`) with various
//! options, mount the image with the running kernel's EROFS driver, through a loop device and
//! file-backed (mount(2) of the image file, Linux 6.12+), and compare everything the kernel shows
//! through each with the source (or with the transformation the options ask for). Also
//! `fsck.erofs`, `dump.erofs` listings, the xattr bloom filter through the kernel, superblock
//! fields, and a non-sparse file above 4 GiB.
//!
//! Needs root, loop devices and erofs-utils: prints `SKIP:` otherwise (a failure under CI=true).

mod common;

use common::compare::{check_xattr_filter, compare_trees, Expect, IdMap};
use common::fixture::{self, make_full_fixture, SPARSE_SIZE};
use common::*;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;

/// Directories whose `dump.erofs --ls` listing is compared with the source.
const DUMP_DIRS: &[&str] = &[
    "",
    "names",
    "sorting",
    "bigdir",
    "xattrs",
    "special",
    "hard",
    "excl",
    "excl/deep",
];

struct Case {
    _tmp: Tmpfs,
    src: PathBuf,
    _img_dir: tempfile::TempDir,
    image: PathBuf,
}

/// Makes the full fixture on a fresh tmpfs and builds it with `args` (and `envs`).
fn build_fixture(args: &[&str], envs: &[(&str, &str)]) -> Case {
    let tmp = Tmpfs::new("oracle").expect("tmpfs");
    let src = tmp.join("src");
    let t = std::time::Instant::now();
    make_full_fixture(&src);
    println!("fixture made in {:.2?}", t.elapsed());
    // Images go to the disk: a builder that wrote the 5 GiB hole out would not eat memory.
    let img_dir = tempfile::Builder::new()
        .prefix("sealfs-oracle-img-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let image = img_dir.path().join("fixture.erofs");
    let mut cmd = build_cmd(&src, &image, args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    build_ok_cmd(&mut cmd);
    assert!(
        image.is_file(),
        "build succeeded but {} does not exist",
        image.display()
    );
    assert!(
        temp_leftovers(img_dir.path()).is_empty(),
        "temp files left: {:?}",
        temp_leftovers(img_dir.path())
    );
    Case {
        _tmp: tmp,
        src,
        _img_dir: img_dir,
        image,
    }
}

/// Mounts the image and runs every check: compare_trees with `exp`, the xattr filter, fsck, the
/// dump.erofs listings and the image size. Panics listing all problems found.
fn check_all(case: &Case, exp: &Expect) {
    let image = &case.image;
    let size = fs::metadata(image).unwrap().len();
    let alloc = allocated_bytes(image);
    println!("image {}: {size} bytes, {alloc} allocated", image.display());
    // The EROFS blocks come first; a seal (Merkle tree, trailer) may follow them.
    let erofs_bytes = sb_blocks(&superblock(image)) * 4096;
    println!(
        "EROFS part: {erofs_bytes} bytes, {} bytes after it",
        size.saturating_sub(erofs_bytes)
    );
    assert!(
        erofs_bytes > 0 && erofs_bytes <= size,
        "superblock says {erofs_bytes} bytes of blocks, the file has {size}"
    );
    // The 5 GiB sparse file must cost (almost) nothing; everything else is ~20 MiB.
    assert!(
        size < 64 << 20,
        "image is {size} bytes: the 5 GiB sparse file was not stored as holes"
    );

    let mut problems = Vec::new();
    match fsck(image) {
        Ok(_) => println!("fsck.erofs: ok"),
        Err(e) => problems.push(e),
    }
    for dir in DUMP_DIRS {
        problems.extend(compare_dump_listing(image, &case.src, dir, &|rel| {
            exp.excluded(rel)
        }));
    }
    println!("dump.erofs --ls compared for {DUMP_DIRS:?}");

    // Two readers in the kernel: the block path (a loop device) and the file-backed one
    // (fs/erofs/fileio.c, mount(2) of the image file; the image is on disk, not tmpfs).
    let mut mounts = Vec::new();
    match mount_erofs(image) {
        Ok(m) => mounts.push(("loop device", m)),
        Err(e) => problems.push(e),
    }
    if oracle_guard(file_backed_env(image)) {
        match mount_erofs_file(image) {
            Ok(m) => mounts.push(("file-backed", m)),
            Err(e) => problems.push(e),
        }
    }
    if mounts.is_empty() {
        assert_no_diffs("fsck, dump.erofs and mount", &problems);
    }
    for (how, mnt) in &mounts {
        let t = std::time::Instant::now();
        let diffs = compare_trees(&case.src, mnt.path(), exp);
        println!(
            "{how} mount: compare_trees: {} differences in {:.2?}",
            diffs.len(),
            t.elapsed()
        );
        problems.extend(diffs.into_iter().map(|d| format!("{how} mount: {d}")));
        let (filter_problems, lookups) = check_xattr_filter(mnt.path());
        println!(
            "{how} mount: xattr lookups through the kernel: {lookups}, problems: {}",
            filter_problems.len()
        );
        problems.extend(
            filter_problems
                .into_iter()
                .map(|d| format!("{how} mount: {d}")),
        );

        // The sparse file through the kernel: size, and its few bytes where they were written.
        if !exp.excluded(b"files") {
            let sparse = mnt.path().join("files/sparse5g");
            let md = fs::symlink_metadata(&sparse).unwrap();
            println!(
                "{how} mount: files/sparse5g in the image: size {}, st_blocks {} (source st_blocks {})",
                md.len(),
                md.blocks(),
                fs::symlink_metadata(case.src.join("files/sparse5g"))
                    .unwrap()
                    .blocks()
            );
            if md.len() != SPARSE_SIZE {
                problems.push(format!(
                    "{how} mount: files/sparse5g: size {} in image",
                    md.len()
                ));
            }
        }
    }
    assert_no_diffs("kernel view of the image vs the source", &problems);
}

#[test]
fn full_fixture_default_options() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let case = build_fixture(&[], &[]);
    let sb = superblock(&case.image);
    assert_ne!(
        sb_feature_compat(&sb) & COMPAT_XATTR_FILTER,
        0,
        "the fixture has xattrs but the superblock lacks COMPAT_XATTR_FILTER"
    );
    assert_ne!(
        sb_uuid(&sb),
        [0u8; 16],
        "default UUID should be derived from the content, not nil"
    );
    check_all(&case, &Expect::default());
}

/// `--layout data-first` (issue 41): file data from block 1, the metadata after it.
#[test]
fn full_fixture_data_first() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let case = build_fixture(&["--layout", "data-first"], &[]);
    check_all(&case, &Expect::default());
}

/// `--like OLD` (issue 41): the fixture built like itself, once dense and once data-first (whose
/// layout --like keeps): every inode and data block kept in place, the kernel's view still the
/// source's.
#[test]
fn full_fixture_built_like_itself() {
    if !oracle_guard(mount_env()) {
        return;
    }
    for layout in ["dense", "data-first"] {
        let old = build_fixture(&["--layout", layout], &[]);
        let case = build_fixture(&["--like", old.image.to_str().unwrap()], &[]);
        check_all(&case, &Expect::default());
    }
}

#[test]
fn full_fixture_no_xattr_filter() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let case = build_fixture(&["--no-xattr-filter"], &[]);
    let sb = superblock(&case.image);
    assert_eq!(
        sb_feature_compat(&sb) & COMPAT_XATTR_FILTER,
        0,
        "--no-xattr-filter but the superblock has COMPAT_XATTR_FILTER"
    );
    check_all(&case, &Expect::default());
}

#[test]
fn full_fixture_timestamp_and_all_root() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let case = build_fixture(&["-T", "1234567890", "--all-root"], &[]);
    let exp = Expect {
        mtime: Some((1_234_567_890, 0)),
        uid: IdMap::Force(0),
        gid: IdMap::Force(0),
        ..Default::default()
    };
    check_all(&case, &exp);
}

#[test]
fn full_fixture_force_uid_gid() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let case = build_fixture(&["--force-uid", "1000", "--force-gid", "2000"], &[]);
    let exp = Expect {
        uid: IdMap::Force(1000),
        gid: IdMap::Force(2000),
        ..Default::default()
    };
    check_all(&case, &exp);
}

/// `owners/max` has uid = gid = 4294967294, so +5 / +7 leave 32 bits: expected to wrap (to 3 and 5)
/// as mkfs.erofs does (u32 arithmetic). Saturating at 4294967295 would store `(uid_t)-1`, which is
/// no valid owner: the kernel shows it as the overflow id 65534.
#[test]
fn full_fixture_uid_gid_offset() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let case = build_fixture(&["--uid-offset", "5", "--gid-offset", "7"], &[]);
    let exp = Expect {
        uid: IdMap::Offset(5),
        gid: IdMap::Offset(7),
        ..Default::default()
    };
    check_all(&case, &exp);
}

#[test]
fn full_fixture_source_date_epoch_clamps() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let sde = fixture::FIXTURE_SDE;
    let case = build_fixture(&[], &[("SOURCE_DATE_EPOCH", &sde.to_string())]);
    // The fixture must have mtimes on both sides of SDE, or this test proves nothing.
    let tree = common::compare::scan_tree(&case.src, &|_| false).unwrap();
    let above = tree.values().filter(|n| n.md.mtime() > sde).count();
    let below = tree.values().filter(|n| n.md.mtime() <= sde).count();
    println!("SOURCE_DATE_EPOCH={sde}: {above} paths to clamp, {below} to keep");
    assert!(above > 100 && below > 100);
    let mnt = mount_erofs(&case.image).unwrap();
    let clamped = fs::symlink_metadata(mnt.path().join("times/sde_plus_one")).unwrap();
    assert_eq!(
        (clamped.mtime(), clamped.mtime_nsec()),
        (sde, 0),
        "times/sde_plus_one not clamped"
    );
    let kept = fs::symlink_metadata(mnt.path().join("times/sde_minus_one")).unwrap();
    assert_eq!(
        (kept.mtime(), kept.mtime_nsec()),
        (sde - 1, 999_999_999),
        "times/sde_minus_one changed"
    );
    drop(mnt);
    check_all(
        &case,
        &Expect {
            clamp_mtime: Some(sde),
            ..Default::default()
        },
    );
}

#[test]
fn full_fixture_excludes() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let case = build_fixture(fixture::EXCLUDE_ARGS, &[]);
    let exp = Expect {
        exclude: Some(Box::new(fixture::exclude_args_predicate)),
        ..Default::default()
    };
    // Sanity: the predicate matches what it should in the source.
    let all = common::compare::scan_tree(&case.src, &|_| false).unwrap();
    let matched: Vec<String> = all
        .keys()
        .filter(|k| fixture::exclude_args_predicate(k))
        .map(|k| show(k))
        .collect();
    println!("excluded by the options: {matched:?}");
    assert_eq!(matched.len(), 10, "fixture changed? {matched:?}");
    let mnt = mount_erofs(&case.image).unwrap();
    for gone in [
        "excl/drop.tmp",
        "excl/dir.tmp",
        "excl/path_excluded_dir",
        "excl/rx_dir",
        "excl/hl_b.tmp",
    ] {
        assert!(
            fs::symlink_metadata(mnt.path().join(gone)).is_err(),
            "{gone} should be excluded"
        );
    }
    for kept in [
        "excl/keep.txt",
        "excl/tmp_not_suffix",
        "excl/path_excluded_file_not",
        "excl/not_rx_",
        "excl/hl_a",
    ] {
        assert!(
            fs::symlink_metadata(mnt.path().join(kept)).is_ok(),
            "{kept} should be kept"
        );
    }
    drop(mnt);
    check_all(&case, &exp);
}

#[test]
fn full_fixture_uuid_and_label() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let case = build_fixture(
        &[
            "-U",
            "01234567-89ab-cdef-0123-456789abcdef",
            "-L",
            "mylabel",
        ],
        &[],
    );
    let sb = superblock(&case.image);
    let want_uuid = [
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd,
        0xef,
    ];
    assert_eq!(
        sb_uuid(&sb),
        want_uuid,
        "superblock uuid bytes (offset 1024+48)"
    );
    let mut want_label = [0u8; 16];
    want_label[..7].copy_from_slice(b"mylabel");
    assert_eq!(
        sb_label(&sb),
        want_label,
        "superblock volume_name bytes (offset 1024+64)"
    );
    println!("superblock uuid and label bytes: ok");

    let out = Command::new("dump.erofs")
        .arg("-s")
        .arg(&case.image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dump.erofs -s failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("01234567-89ab-cdef-0123-456789abcdef"),
        "dump.erofs -s does not show the UUID:\n{text}"
    );
    println!("dump.erofs -s shows the UUID");
    if have_tool("blkid") {
        let out = Command::new("blkid")
            .args(["-p", "-o", "export"])
            .arg(&case.image)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("TYPE=erofs"), "blkid -p: {text}");
        assert!(
            text.contains("UUID=01234567-89ab-cdef-0123-456789abcdef"),
            "blkid -p: {text}"
        );
        assert!(text.contains("LABEL=mylabel"), "blkid -p: {text}");
        println!("blkid -p: TYPE, UUID and LABEL ok");
    }
    check_all(&case, &Expect::default());
}

/// Link counts that do not fit the 16 bits of a compact inode: a file with 70 000 names and a
/// directory with 70 000 subdirectories (nlink 70 002), and a file whose other hard link lies
/// outside the source tree (its nlink in the image counts only the names inside).
#[test]
fn nlink_above_16_bits_and_links_outside_the_tree() {
    if !oracle_guard(mount_env()) {
        return;
    }
    const N: usize = 70_000;
    let tmp = Tmpfs::new("nlink").expect("tmpfs");
    let src = tmp.join("src");
    fs::create_dir_all(src.join("links")).unwrap();
    fs::create_dir_all(src.join("subdirs")).unwrap();
    fs::write(src.join("links/target"), b"one inode, many names").unwrap();
    for i in 0..N {
        fs::hard_link(src.join("links/target"), src.join(format!("links/l{i}"))).unwrap();
        fs::create_dir(src.join(format!("subdirs/d{i}"))).unwrap();
    }
    fs::write(src.join("half_outside"), b"linked from outside the source").unwrap();
    fs::hard_link(src.join("half_outside"), tmp.join("outside_link")).unwrap();
    let target_nlink = fs::metadata(src.join("links/target")).unwrap().nlink();
    assert_eq!(target_nlink, N as u64 + 1);
    assert_eq!(
        fs::metadata(src.join("subdirs")).unwrap().nlink(),
        N as u64 + 2
    );
    let image = tmp.join("nlink.erofs");
    build_ok(&src, &image, &[]);
    fsck(&image).unwrap();
    let mnt = mount_erofs(&image).unwrap();
    let md = fs::metadata(mnt.path().join("links/l12345")).unwrap();
    assert_eq!(
        md.nlink(),
        N as u64 + 1,
        "nlink of a file with {} names",
        N + 1
    );
    let md = fs::metadata(mnt.path().join("subdirs")).unwrap();
    assert_eq!(
        md.nlink(),
        N as u64 + 2,
        "nlink of a directory with {N} subdirectories"
    );
    let md = fs::metadata(mnt.path().join("half_outside")).unwrap();
    assert_eq!(
        md.nlink(),
        1,
        "nlink must count the names inside the image only"
    );
    println!(
        "nlink {} (file), {} (dir), 1 (link outside the tree): ok",
        N + 1,
        N + 2
    );
    assert_no_diffs(
        "nlink tree",
        &compare_trees(&src, mnt.path(), &Expect::default()),
    );
}

/// The value stored at every 8-byte-aligned offset of the big file: the offset itself mixed with a
/// constant, so misplaced blocks, dropped blocks and zero-filled blocks all show.
fn pattern_word(off: u64) -> u64 {
    (off ^ 0xA5A5_5A5A_0F0F_F0F0).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

fn fill_pattern(buf: &mut [u8], start: u64) {
    assert!(start & 7 == 0);
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let w = pattern_word(start + 8 * i as u64).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

/// A regular file larger than 4 GiB that is not sparse (every byte non-trivial) round-trips through
/// the kernel: source and image on the disk (not tmpfs), content verified by streaming.
#[test]
fn large_non_sparse_file_over_4gib() {
    if !oracle_guard(mount_env()) {
        return;
    }
    const SIZE: u64 = (4 << 30) + 4097;
    const CHUNK: usize = 8 << 20;
    let dir = tempfile::Builder::new()
        .prefix("sealfs-large-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("small"), b"next to the big one").unwrap();
    let big = src.join("big");
    let t = std::time::Instant::now();
    {
        let mut f = std::io::BufWriter::with_capacity(CHUNK, File::create(&big).unwrap());
        let mut buf = vec![0u8; CHUNK];
        let mut off = 0u64;
        while off < SIZE {
            let n = (SIZE - off).min(CHUNK as u64) as usize;
            fill_pattern(&mut buf[..n], off);
            f.write_all(&buf[..n]).unwrap();
            off += n as u64;
        }
        f.flush().unwrap();
    }
    println!("wrote {SIZE}-byte source in {:.2?}", t.elapsed());
    let image = dir.path().join("large.erofs");
    build_ok(&src, &image, &[]);
    let image_size = fs::metadata(&image).unwrap().len();
    println!("image size {image_size}");
    assert!(
        image_size > SIZE,
        "image ({image_size} bytes) is smaller than the file it holds"
    );
    fsck(&image).unwrap();
    println!("fsck.erofs: ok");

    let mnt = mount_erofs(&image).unwrap();
    // Metadata of both files (content of the big one checked below against the pattern).
    let exp = Expect {
        content_limit: Some(1 << 20),
        ..Default::default()
    };
    assert_no_diffs("large file tree", &compare_trees(&src, mnt.path(), &exp));
    let t = std::time::Instant::now();
    let mut f = File::open(mnt.path().join("big")).unwrap();
    let mut got = vec![0u8; CHUNK];
    let mut want = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let mut n = 0;
        while n < CHUNK {
            let k = f.read(&mut got[n..]).unwrap();
            if k == 0 {
                break;
            }
            n += k;
        }
        if n == 0 {
            break;
        }
        fill_pattern(&mut want[..n], off);
        if got[..n] != want[..n] {
            let i = got[..n]
                .iter()
                .zip(&want[..n])
                .position(|(a, b)| a != b)
                .unwrap();
            panic!(
                "big file content differs at byte {} (of {SIZE})",
                off + i as u64
            );
        }
        off += n as u64;
    }
    assert_eq!(off, SIZE, "big file read back {off} bytes, {SIZE} expected");
    println!(
        "read back and verified {SIZE} bytes through the kernel in {:.2?}",
        t.elapsed()
    );
    drop(f);
    drop(mnt);
    // Free the 8 GiB now rather than at the end of the test binary.
    dir.close().unwrap();
}
