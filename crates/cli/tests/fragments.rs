//! Smaller images: fragments (`-E fragments`, `-E all-fragments`: files packed whole into the
//! packed inode and compressed together), whole-file dedupe (always on, uncompressed builds too) and
//! fixed-input clusters in 48-bit encoded extents (`-E 48bit`: data not block-aligned), metadata
//! compression (`-m`, the metabox) and per-file codecs (`--compress-rule`).
//!
//! Oracles: the kernel's mount equals the source (content and every attribute); `fsck.erofs` 1.9
//! (which knows fragments) checks the image and its `--extract` holds the source's bytes; the
//! reader (`sealfs extract`, `sealfs verify`) agrees; `fsverity digest` gives the per-file
//! digests; images do not depend on the thread count.

mod common;

use common::compare::{compare_extracted, compare_trees, Expect};
use common::fixture::{make_full_fixture, Rng};
use common::randtree::{materialize, tree_strategy};
use common::*;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::process::Command;

const VARIANTS: &[&[&str]] = &[
    &["-z", "lz4hc", "-C", "65536", "-E", "fragments"],
    &["-z", "zstd", "-C", "1048576", "-E", "fragments"],
    &["-z", "lz4", "-C", "4096", "-E", "all-fragments"],
    &["-z", "zstd", "-C", "16384", "-E", "all-fragments"],
    &["-z", "zstd", "-C", "131072", "-E", "48bit"],
    &["-z", "lz4hc", "-C", "16384", "-E", "48bit,fragments"],
    &["-z", "lz4", "-C", "1048576", "-E", "48bit,all-fragments"],
    &["-z", "lzma", "-C", "65536", "-E", "fragments"],
    &["-z", "deflate", "-C", "131072", "-E", "48bit,fragments"],
    // Identical clusters of input stored once (with and without fragments and a metabox).
    &["-z", "lz4hc", "-C", "16384", "-E", "48bit,dedupe"],
    &[
        "-z",
        "zstd",
        "-C",
        "65536",
        "-E",
        "48bit,fragments,dedupe",
        "-m",
        "4096",
    ],
    // Metadata compression (the metabox), with and without fragments and the 48-bit layout.
    &[
        "-z",
        "lz4hc",
        "-C",
        "65536",
        "-E",
        "fragments",
        "-m",
        "4096",
    ],
    &["-z", "lzma", "-C", "16384", "-m", "16384"],
    &[
        "-z",
        "zstd",
        "-C",
        "1048576",
        "-E",
        "48bit,fragments",
        "-m",
        "65536",
    ],
    // Uncompressed: identical files share their blocks (whole-file dedupe is always on).
    &[],
    // Compressed directories (`--zD`): alone, with fragments, and with 48-bit extents and a
    // metabox.
    &["-z", "lz4", "-C", "4096", "--zD"],
    &["-z", "zstd", "-C", "65536", "-E", "fragments", "--zD"],
    &[
        "-z",
        "lz4hc",
        "-C",
        "16384",
        "-E",
        "48bit,all-fragments",
        "-m",
        "4096",
        "--zD",
    ],
];

/// Small files, some alike, some identical (also with different modes and xattrs, which must
/// stay apart), tails, and files around the cluster sizes.
fn make_small_files(dir: &Path) {
    fs::create_dir_all(dir.join("src/sub")).unwrap();
    fs::create_dir_all(dir.join("copies")).unwrap();
    let mut rng = Rng::new(16);
    let words: Vec<String> = (0..400)
        .map(|i| format!("word{}", i * 7919 % 1000))
        .collect();
    for k in 0..400 {
        let len = rng.below(9000) as usize;
        let mut text = String::new();
        while text.len() < len {
            text += &words[rng.below(words.len() as u64) as usize];
            text.push(if k % 3 == 0 { '\n' } else { ' ' });
        }
        let ext = ["c", "h", "txt", "rs"][k % 4];
        fs::write(dir.join(format!("src/f{k}.{ext}")), &text[..len]).unwrap();
    }
    let random = Rng::new(17).bytes(300_000);
    for n in [
        1usize, 4095, 4096, 4097, 16383, 16384, 65535, 65536, 65537, 300_000,
    ] {
        fs::write(dir.join(format!("sub-random{n}")), &random[..n]).unwrap();
    }
    // Identical files: small (fragments), mid-size and large (one segment, own pclusters).
    for (name, len) in [("small", 3000usize), ("mid", 70_000), ("large", 300_000)] {
        for c in 0..5 {
            fs::write(dir.join(format!("copies/{name}{c}")), &random[..len]).unwrap();
        }
    }
    // Text larger than every cluster size used: its last extent is a tail fragment with
    // `-E fragments`.
    let mut long = String::new();
    while long.len() < 1_300_000 {
        long += &words[rng.below(words.len() as u64) as usize];
        long.push(' ');
    }
    fs::write(dir.join("src/long.txt"), &long[..1_300_000]).unwrap();
    fs::write(dir.join("src/long-200k.txt"), &long[..200_000]).unwrap();
    // The same 64 KiB of text eight times (`-E dedupe` stores its clusters once), and a file
    // holding two of them at another alignment.
    let block = &long[..65536];
    fs::write(dir.join("src/repeat.txt"), block.repeat(8)).unwrap();
    fs::write(
        dir.join("src/sub/repeat-shifted.txt"),
        format!("{}{}", &long[..5000], block.repeat(2)),
    )
    .unwrap();
    fs::write(dir.join("src/sub/empty"), b"").unwrap();
    let odd = dir.join("copies/large-other-mode");
    fs::write(&odd, &random).unwrap();
    let mut perm = fs::metadata(&odd).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
    fs::set_permissions(&odd, perm).unwrap();
    let tagged = dir.join("copies/small-with-xattr");
    fs::write(&tagged, &random[..3000]).unwrap();
    xattr::set(&tagged, "user.tag", &[b'x'; 300]).unwrap();
    // Too many xattrs for its tail to fit inline: in an uncompressed build its last block holds
    // the tail, and the other copies share its blocks.
    let crowded = dir.join("copies/large-crowded");
    fs::write(&crowded, &random).unwrap();
    xattr::set(&crowded, "user.crowd", &[b'y'; 3500]).unwrap();
}

/// The regular files and symlinks under `b` hold the bytes of those under `a`, and no others.
fn same_content(a: &Path, b: &Path) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut stack = vec![std::path::PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in fs::read_dir(a.join(&rel)).unwrap() {
            let e = e.unwrap();
            let r = rel.join(e.file_name());
            let t = e.file_type().unwrap();
            let (x, y) = (a.join(&r), b.join(&r));
            if t.is_dir() {
                stack.push(r);
            } else if t.is_file() {
                if fs::read(&y).ok().as_deref() != Some(&fs::read(&x).unwrap()[..]) {
                    diffs.push(format!("{}: content differs or missing", r.display()));
                }
            } else if t.is_symlink() {
                if fs::read_link(&y).ok() != Some(fs::read_link(&x).unwrap()) {
                    diffs.push(format!("{}: link target differs", r.display()));
                }
            } else if !(t.is_fifo() || t.is_char_device() || t.is_block_device() || t.is_socket()) {
                diffs.push(format!("{}: unexpected type", r.display()));
            }
        }
    }
    diffs
}

/// The image has what `what` (the build arguments) asked for, as `dump.erofs` 1.9 reads it:
/// fragments (`FRAGMENTS` and a packed inode), 48-bit layouts (`48BIT`).
fn assert_features(image: &Path, what: &str) {
    let dump = erofs_utils_1_9("dump.erofs").expect("dump.erofs 1.9");
    let out = run_ok(Command::new(&dump).arg("-s").arg(image)).expect("dump.erofs -s");
    let packed = out
        .lines()
        .find_map(|l| l.strip_prefix("Filesystem packed nid:"))
        .map(|v| v.trim().to_string());
    let features = out
        .lines()
        .find_map(|l| l.strip_prefix("Filesystem incompatible features:"))
        .unwrap_or_default();
    if what.contains("fragments") {
        assert!(
            features.contains("fragments") && packed.as_deref().is_some_and(|n| n != "0"),
            "{what}: no fragments in the image:\n{out}"
        );
    }
    // Tails (`-E fragments`, the small-files tree): the last extent of a file larger than a
    // cluster is in the packed inode (the whole file, when it is one extent), which dump.erofs
    // shows as an extent of no physical bytes.
    if what.contains(" fragments") && what.contains("small ") {
        let ext = run_ok(
            Command::new(&dump)
                .args(["-e", "--path=/src/long.txt"])
                .arg(image),
        )
        .expect("dump.erofs -e");
        let extents: Vec<&str> = ext
            .lines()
            .filter(|l| {
                l.trim_start()
                    .split(':')
                    .next()
                    .is_some_and(|n| n.trim().parse::<u32>().is_ok())
            })
            .collect();
        assert!(
            extents
                .last()
                .is_some_and(|l| l.trim_end().ends_with("|       0")),
            "{what}: the tail of /src/long.txt is not a fragment:\n{ext}"
        );
    }
    // Compressed directories are whole fragments in the packed inode: a compressed layout
    // (COMPRESSED_FULL, 1) where they are compressed, a flat one (0 or 2) where they are not.
    let dirs_compressed = what.contains("--zD") || what.contains("--preset small");
    if dirs_compressed {
        assert!(
            features.contains("fragments") && packed.as_deref().is_some_and(|n| n != "0"),
            "{what}: compressed directories without a packed inode:\n{out}"
        );
    }
    let root = run_ok(Command::new(&dump).arg("--path=/").arg(image)).expect("dump.erofs --path");
    assert_eq!(
        root.contains("Layout: 1 "),
        dirs_compressed,
        "{what}: the root directory's layout:\n{root}"
    );
    // (A metabox needs 48BIT for the root's 64-bit nid.)
    let metabox = what.contains(" -m ");
    assert_eq!(
        features.split_whitespace().any(|f| f == "48bit"),
        what.contains("48bit") || metabox,
        "{what}: 48bit feature:\n{out}"
    );
    assert_eq!(
        features.split_whitespace().any(|f| f == "metabox"),
        metabox,
        "{what}: metabox feature:\n{out}"
    );
    if metabox {
        let root = out
            .lines()
            .find_map(|l| l.strip_prefix("Filesystem root nid:"))
            .and_then(|v| v.trim().parse::<u64>().ok());
        assert!(
            root.is_some_and(|n| n >> 63 == 1),
            "{what}: the root is not in the metabox:\n{out}"
        );
    }
}

/// Every oracle on one image of `src`; extractions go under `work` (a tmpfs, where every xattr
/// of the fixture can be restored). `fsck.erofs` checks the image, and with `fsck_extract` also
/// extracts it (too slow for the full fixture's 5 GiB sparse file).
fn check(src: &Path, image: &Path, work: &Path, fsck_extract: bool, what: &str) {
    assert_features(image, what);
    assert_verifies_and_mounts_equal(src, image, what);
    let work = tempfile::tempdir_in(work).unwrap();
    // (fsck.erofs 1.9.4 extracts the inline data of inodes in a metabox as zeros, from its own
    // images too: it only checks those.)
    if fsck_extract && !what.contains(" -m ") {
        let fsck_out = work.path().join("fsck");
        fsck_1_9_extract(image, &fsck_out).unwrap_or_else(|e| panic!("{what}: {e}"));
        let diffs = same_content(src, &fsck_out);
        assert!(
            diffs.is_empty(),
            "{what}: fsck.erofs --extract differs:\n{}",
            diffs.join("\n")
        );
    } else {
        fsck_1_9(image).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    let ours = work.path().join("ours");
    let o = run(Command::new(sealfs_bin())
        .args(["extract", "-q"])
        .arg(image)
        .arg(&ours));
    assert!(
        o.status.success(),
        "{what}: extract: {}: {}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let diffs = compare_extracted(src, &ours, &Expect::default());
    assert!(
        diffs.is_empty(),
        "{what}: sealfs extract differs:\n{}",
        diffs.join("\n")
    );
}

#[test]
fn fragments_read_back_through_the_kernel_fsck_and_the_reader() {
    if !oracle_guard(mount_env().and(erofs_utils_1_9("fsck.erofs").map(drop))) {
        return;
    }
    let tmp = Tmpfs::new("zfrag").expect("tmpfs");
    let small = tmp.join("small");
    make_small_files(&small);
    let full = tmp.join("full");
    make_full_fixture(&full);
    let img_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let image = img_dir.path().join("img");
    // The full fixture (large) with every other variant, the small files with all.
    for (src, step, fsck_extract) in [(&small, 1, true), (&full, 2, false)] {
        for args in VARIANTS.iter().step_by(step) {
            let t = std::time::Instant::now();
            build_ok(src, &image, args);
            let what = format!("{} {}", src.display(), args.join(" "));
            check(src, &image, &tmp.join(""), fsck_extract, &what);
            println!("{what}: checked in {:.1?}", t.elapsed());
        }
    }
    let mut runner = TestRunner::deterministic();
    for n in 0..2 {
        let desc = tree_strategy().new_tree(&mut runner).unwrap().current();
        let src = tmp.join(format!("random{n}"));
        fs::create_dir(&src).unwrap();
        materialize(&desc, &src).unwrap();
        let args = VARIANTS[n % VARIANTS.len()];
        build_ok(&src, &image, args);
        // A random tree may have no file small enough to pack.
        if fs::read_dir(&src).unwrap().next().is_some() {
            let v = run(Command::new(sealfs_bin()).arg("verify").arg(&image));
            assert!(v.status.success());
            let mnt = mount_erofs(&image).expect("mount");
            let diffs = compare_trees(&src, mnt.path(), &Expect::default());
            assert!(diffs.is_empty(), "random tree {n}:\n{}", diffs.join("\n"));
        }
    }
}

/// Packing small files together makes the image smaller than giving each its own clusters, and
/// identical files are stored once: five copies of a file cost little more than one.
#[test]
fn fragments_and_dedupe_make_images_smaller() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let tmp = Tmpfs::new("zsmall").expect("tmpfs");
    let src = tmp.join("src");
    make_small_files(&src);
    // Only the small files: the long text is the same size either way.
    for long in [
        "src/long.txt",
        "src/long-200k.txt",
        "src/repeat.txt",
        "src/sub/repeat-shifted.txt",
    ] {
        fs::remove_file(src.join(long)).unwrap();
    }
    let size = |args: &[&str], src: &Path| {
        let image = tmp.join("img");
        build_ok(src, &image, args);
        let mnt = mount_erofs(&image).expect("mount");
        let diffs = compare_trees(src, mnt.path(), &Expect::default());
        assert!(diffs.is_empty(), "{args:?}:\n{}", diffs.join("\n"));
        fs::metadata(&image).unwrap().len()
    };
    let plain = size(&["-z", "zstd", "-C", "65536"], &src);
    let packed = size(&["-z", "zstd", "-C", "65536", "-E", "fragments"], &src);
    println!("400 small text files and more: {plain} bytes, with fragments {packed}");
    assert!(
        packed * 10 < plain * 8,
        "fragments save less than 20%: {packed} against {plain}"
    );

    // Dedupe: 40 copies of a 200 KB random file against one (fragments off: the copies share
    // their pclusters; on: their fragment).
    let dup = tmp.join("dup");
    fs::create_dir(&dup).unwrap();
    let random = Rng::new(3).bytes(200_000);
    fs::write(dup.join("only"), &random).unwrap();
    for args in [
        &[][..],
        &["-z", "lz4", "-C", "65536"][..],
        &["-z", "lz4", "-C", "65536", "-E", "all-fragments"][..],
    ] {
        let one = size(args, &dup);
        for c in 0..40 {
            fs::write(dup.join(format!("copy{c}")), &random).unwrap();
        }
        let forty = size(args, &dup);
        for c in 0..40 {
            fs::remove_file(dup.join(format!("copy{c}"))).unwrap();
        }
        println!("{args:?}: one file {one} bytes, with 40 copies {forty}");
        assert!(
            forty < one + 40 * 5000,
            "{args:?}: 40 copies of 200 KB took {} more bytes",
            forty - one
        );
    }

    // Files of more than one 4 MiB segment: two copies of a 9 MB file are stored once; a file of
    // the same size that differs in its last byte is stored apart. The kernel, fsverity and -j1/-j3
    // agree.
    let big = tmp.join("big");
    let data = Rng::new(5).bytes(9_000_000);
    let mut other = data.clone();
    *other.last_mut().unwrap() ^= 1;
    for args in [&[][..], &["-z", "lz4", "-C", "65536"][..]] {
        let _ = fs::remove_dir_all(&big);
        fs::create_dir(&big).unwrap();
        fs::write(big.join("a"), &data).unwrap();
        let one = size(args, &big);
        fs::write(big.join("b"), &data).unwrap();
        fs::write(big.join("c"), &data).unwrap();
        let three = size(args, &big);
        fs::write(big.join("d"), &other).unwrap();
        let four = size(args, &big);
        println!(
            "{args:?}: 9 MB file: once {one} bytes, three copies {three}, and one that differs {four}"
        );
        assert!(
            three < one + 100_000,
            "{args:?}: copies of 9 MB took {} more bytes",
            three - one
        );
        assert!(
            four > three + 8_900_000,
            "{args:?}: a file that differs was not stored: {four} against {three}"
        );
        let dir = tempfile::tempdir().unwrap();
        assert_deterministic_with_fsverity_digests(&big, dir.path(), args, "big");
    }

    // -E dedupe: the same 64 KiB of text eight times over, in 16 KiB clusters, and once more in
    // another file: four clusters stored, not 40 (the kernel reads both files back, above).
    let rep = tmp.join("rep");
    fs::create_dir(&rep).unwrap();
    let text: String = (0..12_000)
        .map(|i| format!("w{} ", i * 7919 % 100_003))
        .collect();
    let block = &text.as_bytes()[..65536];
    fs::write(rep.join("a"), block.repeat(8)).unwrap();
    fs::write(rep.join("b"), block.repeat(2)).unwrap();
    let plain = size(&["-z", "lz4hc", "-C", "16384", "-E", "48bit"], &rep);
    let deduped = size(&["-z", "lz4hc", "-C", "16384", "-E", "48bit,dedupe"], &rep);
    println!("64 KiB of text 10 times: {plain} bytes, with -E dedupe {deduped}");
    assert!(
        deduped * 4 < plain,
        "-E dedupe: {deduped} bytes against {plain}"
    );
}

#[test]
fn fragment_builds_are_deterministic_and_digests_match_fsverity() {
    if !oracle_guard(if have_tool("fsverity") {
        Ok(())
    } else {
        Err("fsverity not installed".into())
    }) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_small_files(&src);
    for args in VARIANTS {
        assert_deterministic_with_fsverity_digests(&src, dir.path(), args, &format!("{args:?}"));
    }
}

/// `--preset small` and `--preset fast` build what they name (as `dump.erofs` 1.9 reads the
/// image: algorithm and fragments), -z changes a preset's algorithm, and every oracle reads the
/// images back.
#[test]
fn presets_build_what_they_name() {
    if !oracle_guard(mount_env().and(erofs_utils_1_9("fsck.erofs").map(drop))) {
        return;
    }
    let tmp = Tmpfs::new("zpreset").expect("tmpfs");
    let src = tmp.join("src");
    make_small_files(&src);
    // Files in a compressed format, which `--layout packed-pieces` packs apart in small pieces:
    // random bytes gzipped by gzip, some larger than a piece.
    fs::create_dir_all(src.join("gz")).unwrap();
    let random = Rng::new(18).bytes(200_000);
    for k in 0..60usize {
        let raw = src.join(format!("gz/g{k:02}"));
        fs::write(&raw, &random[..(k * 3331) % 200_000 + 1]).unwrap();
        run_ok(Command::new("gzip").args(["-n"]).arg(&raw)).expect("gzip");
    }
    let image = tmp.join("img");
    let dump = erofs_utils_1_9("dump.erofs").expect("dump.erofs 1.9");
    for (args, alg) in [
        (&["--preset", "small"][..], "zstd"),
        (
            &["--preset", "small", "--layout", "packed-pieces"][..],
            "zstd",
        ),
        (&["--preset", "small", "-z", "lzma"][..], "lzma"),
        (&["--preset", "fast"][..], "lz4"),
        (&["--preset", "small", "-z", "lz4hc"][..], "lz4"),
    ] {
        build_ok(&src, &image, args);
        // (`check` expects a metabox when the description names -m, as `--preset small` sets it.)
        let metabox = if args[1] == "small" { ", -m 65536" } else { "" };
        let what = format!("{} (fragments{metabox})", args.join(" "));
        check(&src, &image, &tmp.join(""), true, &what);
        let out = run_ok(Command::new(&dump).arg("-s").arg(&image)).expect("dump.erofs -s");
        let algs = out
            .lines()
            .find_map(|l| l.strip_prefix("Filesystem compr_algs:"))
            .map(str::trim);
        assert_eq!(algs, Some(alg), "{what}:\n{out}");
    }
    let o = run(Command::new(sealfs_bin())
        .args(["build", "--preset", "tiny"])
        .arg(&src)
        .arg(&image));
    assert_eq!(
        o.status.code(),
        Some(2),
        "an unknown preset is a usage error"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("small, fast"));
}

/// `--compress-rule`: files matching `none` are stored as they are (whole-file: a flat layout;
/// larger than a segment: raw clusters), files matching an algorithm use it (the image lists both
/// algorithms), and neither is packed into fragments; every oracle reads the image back, and the
/// image does not depend on the thread count.
#[test]
fn compress_rules_choose_each_files_codec() {
    if !oracle_guard(mount_env().and(erofs_utils_1_9("fsck.erofs").map(drop))) {
        return;
    }
    let tmp = Tmpfs::new("zrule").expect("tmpfs");
    let src = tmp.join("src");
    fs::create_dir_all(src.join("pics")).unwrap();
    let mut rng = Rng::new(77);
    let text = |n: usize| -> Vec<u8> {
        (0..)
            .map(|i| format!("line {i} of a log file that compresses well\n"))
            .flat_map(String::into_bytes)
            .take(n)
            .collect()
    };
    for (name, n) in [("a.jpg", 3000), ("b.jpg", 200_000), ("big.jpg", 9 << 20)] {
        fs::write(src.join("pics").join(name), rng.bytes(n)).unwrap();
    }
    for (name, n) in [
        ("small.log", 20_000),
        ("big.log", 300_000),
        ("notes.txt", 250_000),
    ] {
        fs::write(src.join(name), text(n)).unwrap();
    }
    fs::write(src.join("tiny.txt"), text(1500)).unwrap();
    let image = tmp.join("img");
    let args = [
        "-z",
        "zstd",
        "-C",
        "65536",
        "-E",
        "fragments",
        "--compress-rule",
        r"\.jpg$=none",
        "--compress-rule",
        r"\.log$=lzma,9",
    ];
    build_ok(&src, &image, &args);
    let what = args.join(" ");
    check(&src, &image, &tmp.join(""), true, &what);
    let dump = erofs_utils_1_9("dump.erofs").expect("dump.erofs 1.9");
    let out = run_ok(Command::new(&dump).arg("-s").arg(&image)).expect("dump.erofs -s");
    assert!(
        out.contains("compr_algs:") && out.contains("lzma, zstd"),
        "{out}"
    );
    // Layout and compression ratio of each file, as dump.erofs reads them.
    let shown = |path: &str| -> (u32, f64) {
        let out = run_ok(
            Command::new(&dump)
                .arg(format!("--path={path}"))
                .arg(&image),
        )
        .expect("dump.erofs --path");
        let field = |key: &str| {
            let at = out
                .find(key)
                .unwrap_or_else(|| panic!("{path}: no {key:?}:\n{out}"));
            out[at + key.len()..]
                .split(|c: char| c.is_whitespace() || c == '%')
                .find(|w| !w.is_empty())
                .unwrap()
                .to_string()
        };
        (
            field("Layout:").parse().unwrap(),
            field("Compression ratio:").parse().unwrap(),
        )
    };
    // FLAT_PLAIN 0, COMPRESSED_FULL 1, FLAT_INLINE 2, COMPRESSED_COMPACT 3.
    for path in ["/pics/a.jpg", "/pics/b.jpg"] {
        let (layout, _) = shown(path);
        assert!(layout == 0 || layout == 2, "{path}: layout {layout}");
    }
    let (layout, ratio) = shown("/pics/big.jpg");
    assert!(layout == 1 || layout == 3, "/pics/big.jpg: layout {layout}");
    assert!(ratio >= 100.0, "/pics/big.jpg: stored raw, ratio {ratio}");
    for path in ["/small.log", "/big.log", "/notes.txt"] {
        let (layout, ratio) = shown(path);
        assert!(
            (layout == 1 || layout == 3) && ratio < 50.0,
            "{path}: layout {layout}, ratio {ratio}"
        );
    }
    // The small log has its own clusters; the small text file is a fragment (no blocks of its
    // own: dump.erofs shows a ratio of 0).
    assert_eq!(shown("/tiny.txt").1, 0.0, "/tiny.txt is a fragment");
    assert!(
        shown("/small.log").1 > 0.0,
        "/small.log has its own clusters"
    );
    assert_deterministic_with_fsverity_digests(&src, &tmp.join(""), &args, &what);
}
