//! Images made by the sealfs builder (`target/release/sealfs build`, invoked as a program so that the
//! reader does not depend on the builder) from the fixture tree, read back and compared with the
//! source tree. These images use what mkfs.erofs 1.5 cannot write: xattr name bloom filters,
//! compact inodes with per-inode mtimes, chunk-based sparse files with holes.
//!
//! The binary must be built beforehand (`cargo build --release -p sealfs-cli`; `cargo test
//! --workspace --release` builds it). Without it the test prints `SKIP:`, or fails under `CI=true`.

mod common;

use common::walk::{compare, scan_source, walk_image, Expect};
use common::{assert_no_diffs, oracle_guard, sealfs_bin, sealfs_build};
use sealfs_reader::{DataLayout, ExtentKind, Image};

#[test]
fn sealfs_images_read_back_equal_to_the_source() {
    let bin = sealfs_bin();
    if !oracle_guard(bin.as_ref().map(drop).map_err(Clone::clone)) {
        return;
    }
    let bin = bin.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    std::fs::create_dir(&src_path).unwrap();
    common::fixture::build(&src_path, 2, true);
    let src = scan_source(&src_path);

    let base = Expect::default();
    let cases: [(&str, &[&str], Expect); 4] = [
        ("default", &[], base),
        (
            "timestamp",
            &["-T", "1700000000"],
            Expect {
                mtime: Some((1_700_000_000, 0)),
                ..base
            },
        ),
        ("no-filter", &["--no-xattr-filter"], base),
        (
            "no-xattrs",
            &["--no-xattrs"],
            Expect {
                xattrs: false,
                ..base
            },
        ),
    ];
    for (name, args, expect) in cases {
        let img_path = dir.path().join(format!("{name}.img"));
        sealfs_build(&bin, &src_path, &img_path, args).unwrap();
        let img = Image::open_unverified(std::fs::File::open(&img_path).unwrap()).unwrap();
        let tree = walk_image(&img).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_no_diffs(name, &compare(&src, &tree, &expect));

        // The sparse file is chunk-based with holes, and reads back as zeros there.
        let sparse = img.lookup_path("/sizes/sparse").unwrap();
        let extents = img.map_range(&sparse, 0, u64::MAX).unwrap();
        assert_eq!(sparse.layout(), DataLayout::ChunkBased, "{name}");
        assert!(
            extents.iter().any(|e| e.kind == ExtentKind::Hole),
            "{name}: no hole in {extents:?}"
        );

        // The name bloom filter answers absent lookups when the image has it, and never hides a
        // present name (walk_image got every listed xattr by name).
        let stats = img.stats();
        println!("{name}: {stats:?}");
        if img.superblock().xattr_filter_enabled() {
            assert!(stats.filter_skips > 0, "{name}: {stats:?}");
        } else {
            assert_eq!(stats.filter_skips, 0, "{name}");
        }
        if name == "default" {
            assert!(img.superblock().xattr_filter_enabled(), "{name}");
        }
    }
}
