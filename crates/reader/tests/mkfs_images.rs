//! Images made by `mkfs.erofs` (erofs-utils, the reference implementation) from the fixture tree,
//! read back through the reader and compared with the source tree and with `fsck.erofs --extract`
//! of the same image.
//!
//! Each case is one set of mkfs options; together they cover compact and extended inodes, inline
//! tails and plain blocks, block-map and chunk-index chunk-based files, shared and inline xattrs, and
//! images without the superblock checksum.

use sealfs_reader::{DataLayout, Image, Inode};
use sealfs_testsupport::walk::{compare, scan_source, walk_image, Expect, Tree};
use sealfs_testsupport::{
    assert_no_diffs, fsck_extract, is_root, mkfs, need_tool, oracle_guard, Rng,
};
use std::collections::BTreeSet;
use std::path::Path;

struct Case {
    name: &'static str,
    args: &'static [&'static str],
    expect: Expect,
    /// Layouts some regular file or directory must have.
    layouts: &'static [DataLayout],
    /// Whether some inode must be compact / extended.
    compact: Option<bool>,
    extended: Option<bool>,
}

const T: i64 = 1_700_000_000;

fn cases() -> Vec<Case> {
    let base = Expect::default();
    vec![
        Case {
            name: "default",
            args: &[],
            expect: base,
            layouts: &[DataLayout::FlatInline, DataLayout::FlatPlain],
            compact: None,
            extended: Some(true),
        },
        Case {
            name: "shared-xattrs",
            args: &["-x1"],
            expect: base,
            layouts: &[DataLayout::FlatInline],
            compact: None,
            extended: Some(true),
        },
        Case {
            name: "compact",
            args: &[
                "-T1700000000",
                "-Eforce-inode-compact",
                "--force-uid=1000",
                "--force-gid=1000",
            ],
            expect: Expect {
                mtime: Some((T, 0)),
                force_owner: Some((1000, 1000)),
                ..base
            },
            layouts: &[DataLayout::FlatInline, DataLayout::FlatPlain],
            compact: Some(true),
            extended: Some(false),
        },
        Case {
            name: "extended-noinline",
            args: &["-Eforce-inode-extended", "-Enoinline_data", "-T1700000000"],
            expect: Expect {
                mtime: Some((T, 0)),
                ..base
            },
            layouts: &[DataLayout::FlatPlain],
            compact: Some(false),
            extended: Some(true),
        },
        Case {
            name: "chunk-blockmap",
            args: &["--chunksize=4096"],
            expect: base,
            layouts: &[DataLayout::ChunkBased],
            compact: None,
            extended: None,
        },
        Case {
            name: "chunk-indexes",
            args: &["--chunksize=8192", "-Eforce-chunk-indexes", "-x1"],
            expect: base,
            layouts: &[DataLayout::ChunkBased],
            compact: None,
            extended: None,
        },
        Case {
            name: "chunk-64k-compact",
            args: &[
                "--chunksize=65536",
                "-T1700000000",
                "-Eforce-inode-compact",
                "--force-uid=7",
                "--force-gid=8",
                "-Enosbcrc",
            ],
            expect: Expect {
                mtime: Some((T, 0)),
                force_owner: Some((7, 8)),
                ..base
            },
            layouts: &[DataLayout::ChunkBased],
            compact: Some(true),
            extended: Some(false),
        },
        Case {
            name: "no-xattrs",
            args: &["-x-1"],
            expect: Expect {
                xattrs: false,
                ..base
            },
            layouts: &[DataLayout::FlatInline],
            compact: None,
            extended: None,
        },
    ]
}

fn inodes(img: &Image, tree: &Tree) -> Vec<Inode> {
    let nids: BTreeSet<u64> = tree.values().map(|n| n.nid).collect();
    nids.into_iter()
        .map(|nid| img.inode(nid).unwrap())
        .collect()
}

/// Random reads of every regular file at random offsets and lengths (some past the end), compared
/// with the source content.
fn random_reads(img: &Image, tree: &Tree, src: &Tree, rng: &mut Rng) -> Vec<String> {
    let mut diffs = Vec::new();
    for (path, node) in tree {
        let Some(content) = src.get(path).and_then(|n| n.content.as_ref()) else {
            continue;
        };
        let inode = img.inode(node.nid).unwrap();
        for _ in 0..8 {
            let size = content.len() as u64;
            let off = rng.below(size + 100);
            let len = rng.below(3 * 4096 + 10) as usize;
            let mut buf = vec![0xAAu8; len];
            let n = img.read(&inode, off, &mut buf).unwrap();
            let want = if off >= size {
                &[][..]
            } else {
                &content[off as usize..(off as usize + len).min(content.len())]
            };
            if &buf[..n] != want {
                diffs.push(format!(
                    "/{}: read({off}, {len}) differs",
                    sealfs_testsupport::show(path)
                ));
            }
        }
    }
    diffs
}

fn check_case(dir: &Path, src: &Tree, case: &Case, rng: &mut Rng) {
    let img_path = dir.join(format!("{}.erofs", case.name));
    mkfs(&dir.join("src"), &img_path, case.args).unwrap();
    let img = Image::open_unverified(std::fs::File::open(&img_path).unwrap()).unwrap();
    let tree = walk_image(&img).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    assert_no_diffs(case.name, &compare(src, &tree, &case.expect));
    assert_no_diffs(case.name, &random_reads(&img, &tree, src, rng));

    // The case exercised what it is meant to.
    let all = inodes(&img, &tree);
    for layout in case.layouts {
        assert!(
            all.iter().any(|i| i.layout() == *layout),
            "{}: no inode with layout {layout:?}",
            case.name
        );
    }
    if let Some(want) = case.compact {
        assert_eq!(all.iter().any(|i| !i.is_extended()), want, "{}", case.name);
    }
    if let Some(want) = case.extended {
        assert_eq!(all.iter().any(|i| i.is_extended()), want, "{}", case.name);
    }

    // fsck.erofs --extract of the same image shows the same tree as the reader (it extracts no
    // xattrs and no hard links in erofs-utils 1.5).
    let out = dir.join(format!("{}.extract", case.name));
    fsck_extract(&img_path, &out).unwrap();
    let extracted = scan_source(&out);
    let expect = Expect {
        xattrs: false,
        nlink: false,
        owners: is_root(),
        mtime: None,
        force_owner: None,
    };
    // fsck.erofs 1.5 chowns after chmod, which drops set-uid/set-gid bits: ignore those two bits.
    let strip = |t: &Tree| -> Tree {
        t.iter()
            .map(|(k, v)| {
                let mut v = v.clone();
                v.mode &= !0o6000;
                (k.clone(), v)
            })
            .collect()
    };
    // Compare everything but the extraction root's own attributes.
    let mut diffs = compare(&strip(&extracted), &strip(&tree), &expect);
    diffs.retain(|d| !d.starts_with("/: "));
    assert_no_diffs(&format!("{} vs fsck.erofs --extract", case.name), &diffs);
}

#[test]
fn mkfs_images_read_back_equal_to_the_source() {
    if !oracle_guard(need_tool("mkfs.erofs").and(need_tool("fsck.erofs"))) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    std::fs::create_dir(&src_path).unwrap();
    sealfs_testsupport::small_fixture::build(&src_path, 1, false);
    let src = scan_source(&src_path);
    let mut rng = Rng::scrambled(7);
    for case in cases() {
        check_case(dir.path(), &src, &case, &mut rng);
    }
}

/// erofs-utils 1.5 truncates 255-byte names to 254 bytes; the kernel then lists two entries of the
/// same name. The reader must show exactly what the kernel shows, not fail.
#[test]
fn mkfs_1_5_truncated_255_byte_names_read_like_the_kernel() {
    if !oracle_guard(need_tool("mkfs.erofs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("L".repeat(254)), b"254").unwrap();
    std::fs::write(src.join("L".repeat(255)), b"255").unwrap();
    let img_path = dir.path().join("img");
    mkfs(&src, &img_path, &[]).unwrap();
    let img = Image::open_unverified(std::fs::read(&img_path).unwrap()).unwrap();
    let names: Vec<usize> = img
        .read_dir_all(&img.root().unwrap())
        .unwrap()
        .iter()
        .filter(|e| e.name[0] == b'L')
        .map(|e| e.name.len())
        .collect();
    // 254 twice (truncated), or 254 and 255 with a fixed mkfs.
    assert!(names == [254, 254] || names == [254, 255], "{names:?}");
}

/// `Image::any_xattrs` (which lets a FUSE mount stop the kernel asking for extended attributes)
/// says `false` for an image `mkfs.erofs` made from a tree without any, and `true` as soon as one
/// file or directory anywhere in it has one, however deep and however late in the walk.
#[test]
fn any_xattrs_is_false_only_when_no_inode_has_one() {
    if !oracle_guard(need_tool("mkfs.erofs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let mut deep = src.clone();
    for level in 0..6 {
        deep = deep.join(format!("d{level}"));
        std::fs::create_dir_all(&deep).unwrap();
        for f in 0..40 {
            std::fs::write(deep.join(format!("f{f}")), format!("{level} {f}")).unwrap();
        }
    }
    std::os::unix::fs::symlink("d0/f1", src.join("link")).unwrap();
    let check = |name: &str| -> bool {
        let img_path = dir.path().join(name);
        mkfs(&src, &img_path, &[]).unwrap();
        let img = Image::open_unverified(std::fs::read(&img_path).unwrap()).unwrap();
        let any = img.any_xattrs().unwrap();
        // The metadata fetched ahead (a mount's warm-up) answers the same, from its one walk.
        assert_eq!(img.warm_metadata(2), Some(any), "{name}");
        any
    };
    assert!(!check("none.img"), "no inode has an xattr");
    let user = |p: &Path| sealfs_testsupport::sys::lsetxattr(p, b"user.k", b"v");
    // The last file of the deepest directory: the last inode a breadth-first walk reads.
    let last = deep.join("f39");
    if let Err(e) = user(&last) {
        println!("SKIP: the temporary directory's file system takes no user xattrs: {e}");
        assert!(std::env::var("CI").is_err(), "user xattrs must work in CI");
        return;
    }
    assert!(check("last-file.img"), "an xattr on the deepest, last file");
    std::fs::remove_file(&last).unwrap();
    std::fs::write(&last, b"again").unwrap();
    assert!(!check("none-again.img"));
    user(&src.join("d0/d1/d2")).unwrap();
    assert!(check("dir.img"), "an xattr on a directory in the middle");
}
