//! A hand-built image with compressed inodes (mkfs.erofs 1.5 cannot write ZSTD): ZSTD, HEAD2,
//! PLAIN and CBLKCNT extents in FULL indexes, and inodes that must fail (damaged LZMA, DEFLATE not
//! listed, a pcluster whose first block is all zeros, a 13 MiB extent).

use crate::craft::{compact, dir_block, Craft, BS};
use crate::Rng;
use sealfs_format::{
    DataLayout, EROFS_FEATURE_INCOMPAT_COMPR_CFGS, EROFS_FEATURE_INCOMPAT_ZERO_PADDING,
    EROFS_FT_DIR, EROFS_FT_REG_FILE, S_IFDIR, S_IFREG, Z_EROFS_ADVISE_BIG_PCLUSTER_1,
    Z_EROFS_LCLUSTER_TYPE_HEAD1, Z_EROFS_LCLUSTER_TYPE_HEAD2, Z_EROFS_LCLUSTER_TYPE_NONHEAD,
    Z_EROFS_LCLUSTER_TYPE_PLAIN, Z_EROFS_LI_D0_CBLKCNT,
};

/// Text-like bytes: words from a small vocabulary, compressible but not trivially.
pub fn text(rng: &mut Rng, n: usize) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "erofs", "sealed", "cluster", "the", "of", "a", "merkle", "tree", "block", "verity", "lz4",
        "zstd", "kernel", "read", "only", "image", "data", "and", "\n", "extent",
    ];
    let mut v = Vec::with_capacity(n + 16);
    while v.len() < n {
        v.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
        v.push(if rng.below(9) == 0 { b'\n' } else { b' ' });
    }
    v.truncate(n);
    v
}

pub const REG: u16 = S_IFREG | 0o644;
pub const ROOT: u64 = 40;
pub const Z: u64 = 42;
pub const LZMA: u64 = 46;
pub const DEFLATE: u64 = 48;
pub const ZPAD: u64 = 50;
pub const HUGE: u64 = 52;
pub const CDIR: u64 = 54;
/// Size of `/z`.
pub const ZSIZE: usize = 40_000;
pub const NBLOCKS: usize = 19;

/// One FULL index entry.
pub fn entry(ty: u16, clusterofs: u16, u: u32) -> [u8; 8] {
    let mut e = [0u8; 8];
    e[..2].copy_from_slice(&ty.to_le_bytes());
    e[2..4].copy_from_slice(&clusterofs.to_le_bytes());
    e[4..].copy_from_slice(&u.to_le_bytes());
    e
}

pub fn head(ty: u16, clusterofs: u16, blkaddr: u32) -> [u8; 8] {
    entry(ty, clusterofs, blkaddr)
}

pub fn nonhead(d0: u16, d1: u16) -> [u8; 8] {
    entry(
        Z_EROFS_LCLUSTER_TYPE_NONHEAD,
        0,
        d0 as u32 | (d1 as u32) << 16,
    )
}

/// Map header, 8 unused bytes, then the entries.
pub fn full_index(advise: u16, algs: u8, clusterbits: u8, entries: &[[u8; 8]]) -> Vec<u8> {
    let mut v = vec![0u8; 16];
    v[4..6].copy_from_slice(&advise.to_le_bytes());
    v[6] = algs;
    v[7] = clusterbits;
    for e in entries {
        v.extend_from_slice(e);
    }
    v
}

/// `stream` right-aligned in `blocks` blocks.
pub fn right_aligned(stream: &[u8], blocks: usize) -> Vec<u8> {
    assert!(
        stream.len() <= blocks * BS,
        "{} > {blocks} blocks",
        stream.len()
    );
    let mut v = vec![0u8; blocks * BS - stream.len()];
    v.extend_from_slice(stream);
    v
}

/// The crafted image and the content of `/z`: four extents
/// - A `[0, 20000)`: ZSTD (HEAD1) in a 2-block pcluster (CBLKCNT) at block 10,
/// - B `[20000, 26000)`: ZSTD in one block at 12, starting inside lcluster 4,
/// - C `[26000, 30000)`: PLAIN (uncompressed) at 13,
/// - D `[30000, 40000)`: LZ4 as HEAD2 at 14;
///
/// and `/lzma` (LZMA: a pcluster that is no MicroLZMA stream), `/deflate` (DEFLATE, not listed),
/// `/zpad` (a ZSTD pcluster whose first block is all zeros), `/huge` (a 13 MiB extent), and
/// `/cdir`, an LZ4-compressed directory.
pub fn zstd_image() -> (Craft, Vec<u8>) {
    let mut rng = Rng::scrambled(8);
    let mut c = Craft::new(NBLOCKS);
    c.sb.feature_incompat
        .set(EROFS_FEATURE_INCOMPAT_ZERO_PADDING | EROFS_FEATURE_INCOMPAT_COMPR_CFGS);
    c.sb.root_nid.set(ROOT as u16);
    // available_compr_algs: LZ4, LZMA, ZSTD; their records follow the superblock.
    c.sb.u1.set(0b1011);
    let mut recs = Vec::new();
    recs.extend_from_slice(&14u16.to_le_bytes());
    recs.extend_from_slice(&65535u16.to_le_bytes()); // max_distance
    recs.extend_from_slice(&2u16.to_le_bytes()); // max_pclusterblks
    recs.extend_from_slice(&[0; 10]);
    recs.extend_from_slice(&14u16.to_le_bytes());
    recs.extend_from_slice(&65536u32.to_le_bytes()); // dict_size
    recs.extend_from_slice(&[0; 10]);
    recs.extend_from_slice(&6u16.to_le_bytes());
    recs.extend_from_slice(&[0, 7, 0, 0, 0, 0]); // format 0, windowlog 7 (128 KiB)
    c.put(1152, &recs);

    let entries: Vec<(&[u8], u64, u8)> = vec![
        (b".", ROOT, EROFS_FT_DIR),
        (b"..", ROOT, EROFS_FT_DIR),
        (b"z", Z, EROFS_FT_REG_FILE),
        (b"lzma", LZMA, EROFS_FT_REG_FILE),
        (b"deflate", DEFLATE, EROFS_FT_REG_FILE),
        (b"zpad", ZPAD, EROFS_FT_REG_FILE),
        (b"huge", HUGE, EROFS_FT_REG_FILE),
        (b"cdir", CDIR, EROFS_FT_DIR),
    ];
    let (block, used) = dir_block(&entries);
    c.put(BS, &block);
    c.compact(
        ROOT,
        &compact(S_IFDIR | 0o755, DataLayout::FlatPlain, used as u32, 1, 2),
        &[],
    );

    // /z
    let a = [rng.bytes(5000), text(&mut rng, 1000).repeat(15)].concat();
    let b = text(&mut rng, 2000).repeat(3);
    let cc = rng.bytes(4000);
    let d = text(&mut rng, 2500).repeat(4);
    let za = zstd::bulk::compress(&a, 3).unwrap();
    assert!(za.len() > BS && za.len() <= 2 * BS, "{}", za.len());
    c.put(10 * BS, &right_aligned(&za, 2));
    c.put(
        12 * BS,
        &right_aligned(&zstd::bulk::compress(&b, 3).unwrap(), 1),
    );
    c.put(13 * BS, &cc);
    c.put(14 * BS, &right_aligned(&lz4_flex::block::compress(&d), 1));
    let h1 = Z_EROFS_LCLUSTER_TYPE_HEAD1;
    let index = full_index(
        Z_EROFS_ADVISE_BIG_PCLUSTER_1,
        0x03, // HEAD1: ZSTD, HEAD2: LZ4
        0,
        &[
            head(h1, 0, 10),
            nonhead(Z_EROFS_LI_D0_CBLKCNT | 2, 3),
            nonhead(2, 2),
            nonhead(3, 1),
            head(h1, 20_000 - 4 * 4096, 12),
            nonhead(1, 1),
            head(Z_EROFS_LCLUSTER_TYPE_PLAIN, 26_000 - 6 * 4096, 13),
            head(Z_EROFS_LCLUSTER_TYPE_HEAD2, 30_000 - 7 * 4096, 14),
            nonhead(1, 1),
            nonhead(2, 1),
        ],
    );
    c.compact(
        Z,
        &compact(REG, DataLayout::CompressedFull, ZSIZE as u32, 5, 1),
        &index,
    );
    // /lzma: listed, but its pcluster is no MicroLZMA stream.
    c.put(15 * BS, &[0x5d; BS]);
    let index = full_index(0, 0x01, 0, &[head(h1, 0, 15), nonhead(1, 1)]);
    c.compact(
        LZMA,
        &compact(REG, DataLayout::CompressedFull, 5000, 1, 1),
        &index,
    );
    // /deflate: not in available_compr_algs.
    let index = full_index(0, 0x02, 0, &[head(h1, 0, 15)]);
    c.compact(
        DEFLATE,
        &compact(REG, DataLayout::CompressedFull, 100, 1, 1),
        &index,
    );
    // /zpad: a 2-block pcluster whose stream lies entirely in its second block.
    let zp = zstd::bulk::compress(&text(&mut rng, 2000).repeat(3), 3).unwrap();
    c.put(17 * BS, &right_aligned(&zp, 1));
    let index = full_index(
        Z_EROFS_ADVISE_BIG_PCLUSTER_1,
        0x03,
        0,
        &[head(h1, 0, 16), nonhead(Z_EROFS_LI_D0_CBLKCNT | 2, 1)],
    );
    c.compact(
        ZPAD,
        &compact(REG, DataLayout::CompressedFull, 6000, 2, 1),
        &index,
    );
    // /huge: one 16 MiB lcluster holding a 13 MiB extent.
    let index = full_index(0, 0, 12, &[head(h1, 0, 14)]);
    c.compact(
        HUGE,
        &compact(REG, DataLayout::CompressedFull, 13 << 20, 1, 1),
        &index,
    );
    // /cdir: a directory compressed with LZ4 (the kernel reads compressed directories too).
    let entries: Vec<(&[u8], u64, u8)> = vec![
        (b".", CDIR, EROFS_FT_DIR),
        (b"..", ROOT, EROFS_FT_DIR),
        (b"z", Z, EROFS_FT_REG_FILE),
        (b"zz-also-z", Z, EROFS_FT_REG_FILE),
    ];
    let (block, used) = dir_block(&entries);
    let stream = lz4_flex::block::compress(&block[..used]);
    c.put(18 * BS, &right_aligned(&stream, 1));
    let index = full_index(0, 0, 0, &[head(h1, 0, 18)]);
    c.compact(
        CDIR,
        &compact(
            S_IFDIR | 0o755,
            DataLayout::CompressedFull,
            used as u32,
            1,
            2,
        ),
        &index,
    );
    (c, [a, b, cc, d].concat())
}
