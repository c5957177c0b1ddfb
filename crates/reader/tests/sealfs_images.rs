//! Images made by the sealfs builder library (a dev-dependency: the reader itself does not depend
//! on the builder) from the fixture tree, read back and compared with the source tree. These images
//! use what mkfs.erofs 1.5 cannot write: xattr name bloom filters, compact inodes with per-inode
//! mtimes, chunk-based sparse files with holes.

use sealfs_reader::{DataLayout, ExtentKind, Image};
use sealfs_testsupport::assert_no_diffs;
use sealfs_testsupport::build::{build_image, timestamp, BuildOptions};
use sealfs_testsupport::walk::{compare, scan_source, walk_image, Expect};

#[test]
fn sealfs_images_read_back_equal_to_the_source() {
    let dir = tempfile::tempdir().unwrap();
    let src_path = dir.path().join("src");
    std::fs::create_dir(&src_path).unwrap();
    sealfs_testsupport::small_fixture::build(&src_path, 2, true);
    let src = scan_source(&src_path);

    let base = Expect::default();
    let cases: [(&str, BuildOptions, Expect); 4] = [
        ("default", BuildOptions::default(), base),
        (
            "timestamp",
            timestamp(1_700_000_000),
            Expect {
                mtime: Some((1_700_000_000, 0)),
                ..base
            },
        ),
        (
            "no-filter",
            BuildOptions {
                xattr_filter: false,
                ..BuildOptions::default()
            },
            base,
        ),
        (
            "no-xattrs",
            BuildOptions {
                xattrs: false,
                ..BuildOptions::default()
            },
            Expect {
                xattrs: false,
                ..base
            },
        ),
    ];
    for (name, opts, expect) in cases {
        let img_path = dir.path().join(format!("{name}.img"));
        build_image(&src_path, &img_path, &opts).unwrap();
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
