//! Hand-built images: every data layout and inode form the reader supports, with exact expected
//! bytes, and the error paths (each must name what is wrong and where, never panic).

use sealfs_format::{
    DataLayout, EROFS_FEATURE_INCOMPAT_48BIT, EROFS_FEATURE_INCOMPAT_CHUNKED_FILE,
    EROFS_FEATURE_INCOMPAT_METABOX, EROFS_FT_DIR, EROFS_FT_REG_FILE, EROFS_I_NLINK_1_BIT,
};
use sealfs_reader::{Error, ExtentKind, Follow, Image};
use sealfs_testsupport::craft::{compact, dir_block, extended, Craft, BS, ROOT_NID};
use sealfs_testsupport::layouts::*;

fn open(c: &Craft) -> Image {
    Image::open_unverified(c.finish()).unwrap()
}

fn read_all(img: &Image, path: &str) -> Vec<u8> {
    let inode = img.lookup_path(path).unwrap();
    img.read_vec(&inode, 0, 1 << 20).unwrap()
}

#[test]
fn every_layout_reads_its_bytes() {
    let (c, f) = layouts_image();
    let img = open(&c);
    assert_eq!(read_all(&img, "/plain"), f.plain);
    assert_eq!(read_all(&img, "/inline"), f.inline);
    assert_eq!(read_all(&img, "/null"), vec![0; 10000]);
    assert_eq!(read_all(&img, "/map"), f.map);
    assert_eq!(read_all(&img, "/idx"), f.idx);
    assert_eq!(
        read_all(&img, "/idx48"),
        [&f.idx[..BS], &[0; BS][..]].concat()
    );
    assert_eq!(read_all(&img, "/nlink1"), b"one");
    assert_eq!(read_all(&img, "/ext"), b"extended!\n");
    assert_eq!(read_all(&img, "/d/f"), b"sub\n");

    // Reads at every offset and length around block boundaries agree with whole reads.
    for (path, want) in [("/inline", &f.inline), ("/map", &f.map), ("/idx", &f.idx)] {
        let inode = img.lookup_path(path).unwrap();
        for off in [
            0,
            1,
            4095,
            4096,
            4097,
            8191,
            8192,
            12288,
            want.len() as u64 - 1,
        ] {
            if off >= want.len() as u64 {
                continue;
            }
            for len in [1usize, 100, 4096, 9000] {
                let got = img.read_vec(&inode, off, len).unwrap();
                let end = (off as usize + len).min(want.len());
                assert_eq!(got, want[off as usize..end], "{path} {off} {len}");
            }
        }
    }
}

#[test]
fn maps_say_where_bytes_are_before_reading() {
    let (c, f) = layouts_image();
    let img = open(&c);
    let map = |p: &str| {
        let i = img.lookup_path(p).unwrap();
        img.map_range(&i, 0, u64::MAX).unwrap()
    };
    let bs = BS as u64;
    let m = map("/map");
    let kinds: Vec<_> = m.iter().map(|e| (e.logical, e.length, e.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            (0, bs, ExtentKind::Mapped { physical: 7 * bs }),
            (bs, bs, ExtentKind::Hole),
            (2 * bs, bs, ExtentKind::Mapped { physical: 8 * bs }),
            (3 * bs, 5, ExtentKind::Mapped { physical: 9 * bs }),
        ]
    );
    let i = map("/inline");
    assert_eq!(i.len(), 2);
    assert_eq!(i[1].length, 100);
    assert!(matches!(i[1].kind, ExtentKind::Inline { physical } if physical == INLINE * 32 + 32));
    assert_eq!(
        map("/null"),
        vec![sealfs_reader::Extent {
            logical: 0,
            length: 10000,
            kind: ExtentKind::Hole
        }]
    );
    let x = map("/idx");
    assert_eq!(x.len(), 3);
    assert_eq!(
        (x[1].logical, x[1].length, x[1].kind),
        (8192, 8192, ExtentKind::Hole)
    );
    assert_eq!(x[2].length, f.idx.len() as u64 - 16384);
    // An unclipped chunk mapping runs to the end of its last block.
    let idx = img.lookup_path("/idx").unwrap();
    assert_eq!(img.map(&idx, 16385).unwrap().length, bs);
}

#[test]
fn inode_fields_decode_like_the_kernel() {
    let (c, _) = layouts_image();
    let img = open(&c);
    let sb = img.superblock();
    assert_eq!(sb.label(), b"craft");
    assert_eq!(&sb.uuid, b"0123456789abcdef");
    assert_eq!(sb.root_nid, ROOT_NID);

    let root = img.root().unwrap();
    let st = root.stat();
    assert_eq!((st.mtime, st.mtime_nsec), (1_700_000_005, 123));
    assert_eq!((st.nlink, st.mode), (3, DIR as u32));

    let ext = img.lookup_path("/ext").unwrap().stat();
    assert_eq!((ext.uid, ext.gid), (100_000, 200_000));
    assert_eq!((ext.mtime, ext.mtime_nsec), (-12345, 999_999_999));
    assert_eq!(
        (ext.ino, ext.size, ext.blocks, ext.blksize),
        (EXT, 10, 8, 4096)
    );

    let dev = img.lookup_path("/dev").unwrap().stat();
    assert_eq!((dev.rdev_major, dev.rdev_minor), (259, 0x12345));
    assert_eq!(dev.rdev, libc::makedev(259, 0x12345));

    assert_eq!(img.lookup_path("/nlink1").unwrap().nlink(), 1);
    assert_eq!(img.lookup_path("/plain").unwrap().stat().blocks, 16);
    // Compressed inodes count their compressed blocks.
    assert_eq!(img.lookup_path("/compr").unwrap().stat().blocks, 8);
}

#[test]
fn crafted_compressed_inode_reads_like_the_kernel() {
    // The crafted COMPRESSED_FULL inode has an all-zero map header and index: one PLAIN lcluster
    // whose pcluster is block 0. The kernel copies its first 100 bytes (zeros before the
    // superblock); so does the reader.
    let (c, _) = layouts_image();
    let img = open(&c);
    let z = img.lookup_path("/compr").unwrap();
    assert_eq!(img.read_vec(&z, 0, 1000).unwrap(), vec![0; 100]);
    let e = img.map(&z, 50).unwrap();
    assert_eq!((e.logical, e.length), (0, 100));
    assert!(
        matches!(
            e.kind,
            ExtentKind::Compressed {
                physical: 0,
                plen: 4096,
                algorithm: sealfs_reader::Compression::Plain,
                inline: false,
                extent_start: 0,
                extent_len: 100,
            }
        ),
        "{e:?}"
    );

    // An unknown HEAD1 algorithm in the map header is unsupported, naming the inode.
    let (mut c, _) = layouts_image();
    let hdr = Craft::iloc(COMPR) + 32;
    c.img[hdr + 6] = 4;
    let img = open(&c);
    let z = img.lookup_path("/compr").unwrap();
    let e = img.read_vec(&z, 0, 10).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(e.to_string().contains(&format!("nid {COMPR}")), "{e}");
    assert!(e.to_string().contains("algorithm 4"), "{e}");
    assert_eq!(e.errno(), libc::EOPNOTSUPP);
}

#[test]
fn symlinks_and_path_resolution() {
    let (c, _) = layouts_image();
    let img = open(&c);
    let link = img.lookup_path("/link").unwrap();
    assert!(link.is_symlink());
    assert_eq!(img.readlink(&link).unwrap(), b"plain"); // up to the NUL
    assert_eq!(img.resolve("/link", Follow::All).unwrap().nid(), PLAIN);
    assert_eq!(img.resolve("/link", Follow::Parents).unwrap().nid(), LINK);
    assert_eq!(
        img.resolve("d/../d/./f", Follow::Never).unwrap().nid(),
        SUBFILE
    );
    assert_eq!(
        img.resolve("/../../plain", Follow::Never).unwrap().nid(),
        PLAIN
    );
    assert!(matches!(img.lookup_path("/nope"), Err(Error::NotFound(p)) if p == "/nope"));
    assert!(matches!(
        img.lookup_path("/plain/x"),
        Err(Error::NotADirectory(_))
    ));
    assert!(matches!(
        img.resolve("/link/x", Follow::Never),
        Err(Error::NotADirectory(_))
    ));
    assert!(matches!(
        img.lookup_path(format!("/{}", "n".repeat(256))),
        Err(Error::NameTooLong(_))
    ));
    assert!(matches!(
        img.readlink(&img.root().unwrap()),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn dot_omitted_directories_list_a_synthetic_dot() {
    let (c, _) = layouts_image();
    let img = open(&c);
    let d = img.lookup_path("/d").unwrap();
    let names: Vec<(Vec<u8>, u64)> = img
        .read_dir(&d)
        .unwrap()
        .map(|e| e.map(|e| (e.name, e.nid)))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        names,
        vec![
            (b"..".to_vec(), ROOT_NID),
            (b"f".to_vec(), SUBFILE),
            (b".".to_vec(), SUBDIR)
        ]
    );
    assert_eq!(img.lookup(&d, b".").unwrap().unwrap().nid, SUBDIR);
}

#[test]
fn xattrs_inline_shared_and_long_prefixes() {
    let (c, _) = layouts_image();
    let img = open(&c);
    let x = img.lookup_path("/xattrs").unwrap();
    let names: Vec<String> = img
        .list_xattrs(&x)
        .unwrap()
        .iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    // Inline first, then shared; the lustre entry (index 5) is not listed.
    assert_eq!(
        names,
        [
            "user.inline",
            "trusted.secret",
            "trusted.overlay.opaque",
            "user.very.long.prefix.x",
            "user.shared",
            "security.selinux"
        ]
    );
    for (name, value) in [
        ("user.inline", &b"inline value"[..]),
        ("trusted.secret", b""),
        ("trusted.overlay.opaque", b"y"),
        ("user.very.long.prefix.x", b"long"),
        ("user.shared", b"shared value"),
        ("security.selinux", b"system_u:object_r:etc_t:s0"),
    ] {
        assert_eq!(
            img.get_xattr(&x, name.as_bytes()).unwrap().as_deref(),
            Some(value),
            "{name}"
        );
    }
    for absent in [
        "user.lustre",
        "trusted.overlay.opaqu",
        "user.very.long.prefix.",
        "user.x",
    ] {
        assert_eq!(
            img.get_xattr(&x, absent.as_bytes()).unwrap(),
            None,
            "{absent}"
        );
    }
    let prefixes = img.long_prefixes().unwrap();
    assert_eq!(prefixes.len(), 2);
    assert_eq!(prefixes[1].infix, b"very.long.prefix.");
    // No xattrs at all on other inodes.
    let plain = img.lookup_path("/plain").unwrap();
    assert!(img.list_xattrs(&plain).unwrap().is_empty());
    assert_eq!(img.get_xattr(&plain, b"user.inline").unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// Errors: each names what and where, none panics.
// ---------------------------------------------------------------------------------------------

/// A change made to a crafted image before it is finished.
type Mutation = Box<dyn Fn(&mut Craft)>;

fn open_err(img: Vec<u8>) -> Error {
    Image::open_unverified(img).expect_err("image must not open")
}

#[test]
fn superblock_checks() {
    let (c, _) = layouts_image();
    let good = c.finish();

    let mut bad = good.clone();
    bad[1024] ^= 1;
    let e = open_err(bad);
    assert!(e.is_corrupted() && e.to_string().contains("magic"), "{e}");

    let mut bad = good.clone();
    bad[1200] ^= 1; // inside block 0: the checksum covers it
    let e = open_err(bad);
    assert!(e.to_string().contains("checksum"), "{e}");

    for (what, f) in [
        (
            "blkszbits 13",
            Box::new(|c: &mut Craft| c.sb.blkszbits = 13) as Box<dyn Fn(&mut Craft)>,
        ),
        ("blkszbits 8", Box::new(|c: &mut Craft| c.sb.blkszbits = 8)),
        ("dirblkbits", Box::new(|c: &mut Craft| c.sb.dirblkbits = 1)),
        (
            "unknown incompatible",
            Box::new(|c: &mut Craft| c.sb.feature_incompat.set(0x200)),
        ),
    ] {
        let (mut c, _) = layouts_image();
        f(&mut c);
        let e = open_err(c.finish());
        assert!(matches!(e, Error::Unsupported { .. }), "{what}: {e}");
        assert!(e.to_string().contains(what), "{what}: {e}");
    }

    // Metadata compression: the superblock must have the slot naming the metabox inode; that
    // inode, and the packed inode, must not be in the metabox; an inode in the metabox of an image
    // without one is corrupted.
    let (mut c, _) = layouts_image();
    c.sb.feature_incompat.set(EROFS_FEATURE_INCOMPAT_METABOX);
    let e = open_err(c.finish());
    assert!(
        e.is_corrupted() && e.to_string().contains("METABOX without"),
        "{e}"
    );
    let (mut c, _) = layouts_image();
    c.sb.packed_nid.set(1 << 63 | 40);
    let e = open_err(c.finish());
    assert!(
        e.is_corrupted() && e.to_string().contains("packed_nid"),
        "{e}"
    );
    let (mut c, _) = layouts_image();
    c.sb.root_nid.set(0);
    c.sb.feature_incompat
        .set(c.sb.feature_incompat.get() | EROFS_FEATURE_INCOMPAT_48BIT);
    c.sb.rootnid_8b.set(1 << 63 | 40);
    let e = open_err(c.finish());
    assert!(
        e.is_corrupted() && e.to_string().contains("metabox of an image without one"),
        "{e}"
    );

    let (mut c, _) = layouts_image();
    c.sb.root_nid.set(PLAIN as u16);
    let e = open_err(c.finish());
    assert!(
        e.to_string().contains("not a directory") && e.to_string().contains("nid 40"),
        "{e}"
    );

    for len in [0, 100, 1024, 1100, 1151] {
        let e = open_err(good[..len].to_vec());
        assert!(e.is_corrupted(), "{len}: {e}");
    }
    // The long prefix table (block 14) is read when opening: cut before it, the open fails.
    let e = open_err(good[..2 * BS + 10].to_vec());
    assert!(e.to_string().contains("block 14"), "{e}");
    // Without it, an image cut inside the root directory's block opens (the root inode is in
    // block 0) and listing the root fails.
    let (mut c, _) = layouts_image();
    c.sb.xattr_prefix_count = 0;
    let img = Image::open_unverified(c.finish()[..2 * BS + 10].to_vec()).unwrap();
    let e = img.read_dir_all(&img.root().unwrap()).unwrap_err();
    assert!(e.to_string().contains("past the end of the image"), "{e}");
}

#[test]
fn forty_eight_bit_root_nid() {
    let (mut c, _) = layouts_image();
    c.sb.feature_incompat
        .set(c.sb.feature_incompat.get() | EROFS_FEATURE_INCOMPAT_48BIT);
    c.sb.rootnid_8b.set(ROOT_NID);
    c.sb.root_nid.set(1); // now blocks_hi
    let img = open(&c);
    assert_eq!(img.root_nid(), ROOT_NID);
    assert_eq!(img.superblock().blocks, (1 << 32) | at::NBLOCKS as u64);
}

#[test]
fn corrupted_directories_are_reported_with_their_inode() {
    let blk = at::ROOT_DIR_BLK as usize * BS;
    let cases: Vec<(&str, Mutation)> = vec![
        (
            "nameoff0 below 12",
            Box::new(move |c| c.put(blk + 8, &4u16.to_le_bytes())),
        ),
        (
            "nameoff0 at block size",
            Box::new(move |c| c.put(blk + 8, &4096u16.to_le_bytes())),
        ),
        // The last name runs past the directory's data.
        (
            "name past the data",
            Box::new(move |c| c.put(blk + 14 * 12 + 8, &4000u16.to_le_bytes())),
        ),
        // A name longer than 255 bytes.
        (
            "name over 255 bytes",
            Box::new(move |c| {
                c.put(blk + 12 + 8, &300u16.to_le_bytes());
                c.put(blk + 24 + 8, &600u16.to_le_bytes());
            }),
        ),
        // Next nameoff below this one.
        (
            "decreasing nameoff",
            Box::new(move |c| c.put(blk + 2 * 12 + 8, &100u16.to_le_bytes())),
        ),
    ];
    for (what, f) in cases {
        let (mut c, _) = layouts_image();
        f(&mut c);
        let img = match Image::open_unverified(c.finish()) {
            Ok(img) => img,
            Err(e) => panic!("{what}: {e}"),
        };
        let e = img.read_dir_all(&img.root().unwrap()).unwrap_err();
        assert!(e.is_corrupted(), "{what}: {e}");
        assert!(
            e.to_string().contains(&format!("nid {ROOT_NID}")),
            "{what}: {e}"
        );
        // Lookups never panic either, whatever they find.
        for name in ["plain", "zzz", "a", ".", "idx48"] {
            let _ = img.lookup(&img.root().unwrap(), name.as_bytes());
        }
    }
}

#[test]
fn inline_data_crossing_a_block_is_corrupted() {
    let (mut c, _) = layouts_image();
    // A FLAT_INLINE inode in the last slot of block 0 whose 100-byte tail would cross into block 1.
    let nid = 126;
    c.compact(nid, &compact(REG, DataLayout::FlatInline, 100, 0, 1), &[]);
    let img = open(&c);
    let inode = img.inode(nid).unwrap();
    let e = img.read_vec(&inode, 0, 100).unwrap_err();
    assert!(
        e.is_corrupted() && e.to_string().contains("crosses a block"),
        "{e}"
    );
    assert!(e.to_string().contains("nid 126"), "{e}");
}

#[test]
fn odd_inode_fields() {
    let (mut c, _) = layouts_image();
    // i_xattr_icount 1 (a header-only body) is unsupported, as in the kernel.
    let mut one = compact(REG, DataLayout::FlatPlain, 0, u32::MAX, 1);
    one.i_xattr_icount.set(1);
    c.compact(100, &one, &[0; 12]);
    // Unknown i_format bits, a bogus mode, a datalayout above 4, a negative size.
    let mut fmt = compact(REG, DataLayout::FlatPlain, 0, 0, 1);
    fmt.i_format.set(0x20);
    c.compact(102, &fmt, &[]);
    c.compact(104, &compact(0o170644, DataLayout::FlatPlain, 0, 0, 1), &[]);
    let mut lay = compact(REG, DataLayout::FlatPlain, 0, 0, 1);
    lay.i_format.set(5 << 1);
    c.compact(106, &lay, &[]);
    c.extended(
        108,
        &extended(REG, DataLayout::FlatPlain, u64::MAX, 0, 1),
        &[],
    );
    // Shared count larger than the body.
    let mut sc = compact(REG, DataLayout::FlatPlain, 0, u32::MAX, 1);
    sc.i_xattr_icount.set(2);
    let mut body = vec![0u8; 16];
    body[4] = 9;
    c.compact(112, &sc, &body);
    // A chunk-based file whose chunk format has unknown bits.
    c.compact(114, &compact(REG, DataLayout::ChunkBased, 10, 0x80, 1), &[]);
    let img = open(&c);

    let e = img
        .get_xattr(&img.inode(100).unwrap(), b"user.a")
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    for (nid, unsupported) in [
        (102, true),
        (104, false),
        (106, true),
        (108, false),
        (114, true),
    ] {
        let e = img.inode(nid).unwrap_err();
        assert_eq!(
            matches!(e, Error::Unsupported { .. }),
            unsupported,
            "{nid}: {e}"
        );
        assert!(e.to_string().contains(&format!("nid {nid}")), "{e}");
    }
    let e = img.list_xattrs(&img.inode(112).unwrap()).unwrap_err();
    assert!(e.is_corrupted(), "{e}");
    // A nid far past the end of the image, and one whose offset overflows.
    assert!(img.inode(1 << 40).unwrap_err().is_corrupted());
    assert!(img.inode(u64::MAX).unwrap_err().is_corrupted());
}

#[test]
fn the_null_start_block_has_32_or_48_bits_by_inode_form() {
    let (mut c, _) = layouts_image();
    // Extended: 48 ones is "no data", 32 ones is block 0xFFFFFFFF (past the end of the image).
    let mut e48 = extended(REG, DataLayout::FlatPlain, 5000, u32::MAX, 1);
    e48.i_nb.set(0xFFFF);
    c.extended(100, &e48, &[]);
    c.extended(
        102,
        &extended(REG, DataLayout::FlatPlain, 5000, u32::MAX, 1),
        &[],
    );
    // Compact with NLINK_1: i_nb is the high bits as well.
    let mut n1 = compact(REG, DataLayout::FlatPlain, 5000, u32::MAX, 0xFFFF);
    n1.i_format
        .set(DataLayout::FlatPlain.i_format(false) | 1 << EROFS_I_NLINK_1_BIT);
    c.compact(104, &n1, &[]);
    let img = open(&c);
    let zeros = |nid| img.read_vec(&img.inode(nid).unwrap(), 0, 5000);
    assert_eq!(zeros(100).unwrap(), vec![0; 5000]);
    assert_eq!(zeros(104).unwrap(), vec![0; 5000]);
    let e = zeros(102).unwrap_err();
    assert!(e.is_corrupted() && e.to_string().contains("nid 102"), "{e}");
}

/// `read_direct` keeps the blocks of small uncompressed reads in the cluster cache under the key of
/// the one-block PLAIN extent at their address. A crafted image whose compressed inode has such an
/// extent on the block a flat file's data is in: a random read of the compressed file caches a
/// prefix of the extent under that key (60 bytes, not the block), and a direct read of the flat
/// file then finds it. It must read the block, not take (or index past) the prefix; the extent read
/// whole afterwards is the block.
#[test]
fn a_cached_prefix_under_a_flat_block_key_is_not_the_block() {
    let (mut c, _) = layouts_image();
    // /compr: 4096 bytes, so its one PLAIN lcluster is an extent of a whole block (block 0).
    let compr_at = Craft::iloc(COMPR);
    c.img[compr_at + 8..compr_at + 12].copy_from_slice(&4096u32.to_le_bytes());
    // /plain: its data from block 0 too.
    let plain_at = Craft::iloc(PLAIN);
    c.img[plain_at + 16..plain_at + 20].copy_from_slice(&0u32.to_le_bytes());
    let bytes = c.finish();
    let img = open(&c);
    let compr = img.lookup_path("/compr").unwrap();
    let plain = img.lookup_path("/plain").unwrap();
    assert_eq!(img.read_vec(&compr, 50, 10).unwrap(), bytes[50..60]);
    let mut block = vec![0u8; 4096];
    assert_eq!(img.read_direct(&plain, 0, &mut block).unwrap(), 4096);
    assert_eq!(block, bytes[..4096]);
    assert_eq!(img.read_vec(&compr, 0, 4096).unwrap(), bytes[..4096]);
    let mut again = vec![0u8; 100];
    assert_eq!(img.read_direct(&plain, 4000, &mut again).unwrap(), 100);
    assert_eq!(again, bytes[4000..4100]);
}

#[test]
fn small_blocks_of_512_bytes() {
    // blkszbits 9: EROFS blocks are smaller than the 4 KiB blocks the cache reads.
    let mut c = Craft::new(3);
    c.sb.blkszbits = 9;
    c.sb.feature_incompat
        .set(EROFS_FEATURE_INCOMPAT_CHUNKED_FILE);
    let (block, used) = dir_block(&[
        (b".", ROOT_NID, EROFS_FT_DIR),
        (b"..", ROOT_NID, EROFS_FT_DIR),
        (b"plain", PLAIN, EROFS_FT_REG_FILE),
        (b"chunks", 44, EROFS_FT_REG_FILE),
        (b"tail", 48, EROFS_FT_REG_FILE),
    ]);
    c.put(8 * 512, &block[..512]);
    c.compact(
        ROOT_NID,
        &compact(DIR, DataLayout::FlatPlain, used as u32, 8, 2),
        &[],
    );
    // FLAT_PLAIN across EROFS blocks 10..12 (the second half of a 4 KiB cache block and beyond).
    let plain = pattern(9, 1300);
    c.put(10 * 512, &plain);
    c.compact(
        PLAIN,
        &compact(REG, DataLayout::FlatPlain, 1300, 10, 1),
        &[],
    );
    // Block map of 512-byte chunks: block 13, hole, block 15.
    let mut chunks = pattern(10, 3 * 512);
    chunks[512..1024].fill(0);
    c.put(13 * 512, &chunks[..512]);
    c.put(15 * 512, &chunks[1024..]);
    let map = [13u32, u32::MAX, 15].map(u32::to_le_bytes).concat();
    c.compact(44, &compact(REG, DataLayout::ChunkBased, 1536, 0, 1), &map);
    // FLAT_INLINE: one 512-byte block and a 100-byte tail.
    let tail = pattern(11, 612);
    c.put(16 * 512, &tail[..512]);
    c.compact(
        48,
        &compact(REG, DataLayout::FlatInline, 612, 16, 1),
        &tail[512..],
    );
    let img = open(&c);
    assert_eq!(img.block_size(), 512);
    assert_eq!(read_all(&img, "/plain"), plain);
    assert_eq!(read_all(&img, "/chunks"), chunks);
    assert_eq!(read_all(&img, "/tail"), tail);
    let names: Vec<Vec<u8>> = img
        .read_dir_all(&img.root().unwrap())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names.len(), 5);
}
