//! The "layouts" image: one file per data layout and inode form the reader supports, a
//! DOT_OMITTED subdirectory, xattrs with shared entries and long prefixes, with the expected bytes.

use crate::craft::{compact, dir_block, extended, xattr_body, xattr_entry, Craft, BS, ROOT_NID};
use sealfs_format::{
    new_encode_dev, xattr_name_filter, DataLayout, EROFS_CHUNK_FORMAT_48BIT,
    EROFS_CHUNK_FORMAT_INDEXES, EROFS_FEATURE_COMPAT_XATTR_FILTER,
    EROFS_FEATURE_INCOMPAT_CHUNKED_FILE, EROFS_FEATURE_INCOMPAT_XATTR_PREFIXES, EROFS_FT_CHRDEV,
    EROFS_FT_DIR, EROFS_FT_REG_FILE, EROFS_FT_SYMLINK, EROFS_I_NLINK_1_BIT, S_IFCHR, S_IFDIR,
    S_IFLNK, S_IFREG,
};
use sealfs_reader::superblock::EROFS_FEATURE_COMPAT_PLAIN_XATTR_PFX;

/// Mode of crafted directories.
pub const DIR: u16 = S_IFDIR | 0o755;
/// Mode of crafted regular files.
pub const REG: u16 = S_IFREG | 0o644;

/// Deterministic content of `n` bytes for file `seed`.
pub fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32 * 7) as u8)
        .collect()
}

/// Where the crafted "layouts" image puts things.
pub mod at {
    /// Blocks 0 and 1: inodes. Block 2: root directory. Block 3: directory "d".
    pub const ROOT_DIR_BLK: u32 = 2;
    pub const SUB_DIR_BLK: u32 = 3;
    pub const PLAIN_BLK: u32 = 4; // 2 blocks
    pub const INLINE_BLK: u32 = 6; // 1 block
    pub const MAP_BLKS: [u32; 3] = [7, 8, 9];
    pub const IDX_BLK: u32 = 10; // 2 blocks (one 8 KiB chunk) + 12 (tail chunk)
    pub const IDX_TAIL_BLK: u32 = 12;
    pub const XATTR_BLK: u32 = 13;
    pub const PREFIX_BLK: u32 = 14;
    pub const NBLOCKS: usize = 16;
}

/// Expected contents of the data files.
pub struct Files {
    /// `/plain`.
    pub plain: Vec<u8>,
    /// `/inline`.
    pub inline: Vec<u8>,
    /// `/map`.
    pub map: Vec<u8>,
    /// `/idx`.
    pub idx: Vec<u8>,
}

pub const PLAIN: u64 = 40;
pub const INLINE: u64 = 42;
pub const NULL: u64 = 48;
pub const MAP: u64 = 50;
pub const IDX: u64 = 54;
pub const IDX48: u64 = 58;
pub const DEV: u64 = 62;
pub const NLINK1: u64 = 64;
pub const LINK: u64 = 66;
pub const COMPR: u64 = 68;
pub const XATTRS: u64 = 70;
pub const SUBDIR: u64 = 90;
pub const EXT: u64 = 127; // straddles blocks 0 and 1
pub const SUBFILE: u64 = 132;

/// The "layouts" image: one file per layout and inode form, a DOT_OMITTED subdirectory, xattrs with
/// shared entries and long prefixes.
pub fn layouts_image() -> (Craft, Files) {
    let mut c = Craft::new(at::NBLOCKS);
    c.sb.feature_incompat
        .set(EROFS_FEATURE_INCOMPAT_CHUNKED_FILE | EROFS_FEATURE_INCOMPAT_XATTR_PREFIXES);
    c.sb.feature_compat
        .set(c.sb.feature_compat.get() | EROFS_FEATURE_COMPAT_PLAIN_XATTR_PFX);
    c.sb.xattr_blkaddr.set(at::XATTR_BLK);

    let entries: Vec<(&[u8], u64, u8)> = vec![
        (b".", ROOT_NID, EROFS_FT_DIR),
        (b"..", ROOT_NID, EROFS_FT_DIR),
        (b"plain", PLAIN, EROFS_FT_REG_FILE),
        (b"inline", INLINE, EROFS_FT_REG_FILE),
        (b"null", NULL, EROFS_FT_REG_FILE),
        (b"map", MAP, EROFS_FT_REG_FILE),
        (b"idx", IDX, EROFS_FT_REG_FILE),
        (b"idx48", IDX48, EROFS_FT_REG_FILE),
        (b"dev", DEV, EROFS_FT_CHRDEV),
        (b"nlink1", NLINK1, EROFS_FT_REG_FILE),
        (b"link", LINK, EROFS_FT_SYMLINK),
        (b"compr", COMPR, EROFS_FT_REG_FILE),
        (b"xattrs", XATTRS, EROFS_FT_REG_FILE),
        (b"d", SUBDIR, EROFS_FT_DIR),
        (b"ext", EXT, EROFS_FT_REG_FILE),
    ];
    let (block, used) = dir_block(&entries);
    c.put(at::ROOT_DIR_BLK as usize * BS, &block);
    let mut root = compact(DIR, DataLayout::FlatPlain, used as u32, at::ROOT_DIR_BLK, 3);
    root.i_mtime.set(5);
    c.compact(ROOT_NID, &root, &[]);

    // FLAT_PLAIN, 5000 bytes in two blocks.
    let plain = pattern(1, 5000);
    c.put(at::PLAIN_BLK as usize * BS, &plain);
    c.compact(
        PLAIN,
        &compact(REG, DataLayout::FlatPlain, 5000, at::PLAIN_BLK, 1),
        &[],
    );

    // FLAT_INLINE: one block plus a 100-byte tail right after the inode.
    let inline = pattern(2, BS + 100);
    c.put(at::INLINE_BLK as usize * BS, &inline[..BS]);
    c.compact(
        INLINE,
        &compact(
            REG,
            DataLayout::FlatInline,
            inline.len() as u32,
            at::INLINE_BLK,
            1,
        ),
        &inline[BS..],
    );

    // FLAT_PLAIN with the null start block: 10000 zeros.
    c.compact(
        NULL,
        &compact(REG, DataLayout::FlatPlain, 10000, u32::MAX, 1),
        &[],
    );

    // CHUNK_BASED, block map of 4 KiB chunks: data, hole, data, data (short).
    let mut map = pattern(3, 3 * BS + 5);
    map[BS..2 * BS].fill(0);
    c.put(at::MAP_BLKS[0] as usize * BS, &map[..BS]);
    c.put(at::MAP_BLKS[1] as usize * BS, &map[2 * BS..3 * BS]);
    c.put(at::MAP_BLKS[2] as usize * BS, &map[3 * BS..]);
    let mut blockmap = Vec::new();
    for b in [at::MAP_BLKS[0], u32::MAX, at::MAP_BLKS[1], at::MAP_BLKS[2]] {
        blockmap.extend_from_slice(&b.to_le_bytes());
    }
    c.compact(
        MAP,
        &compact(REG, DataLayout::ChunkBased, map.len() as u32, 0, 1),
        &blockmap,
    );

    // CHUNK_BASED, 8-byte indexes of 8 KiB chunks: data, hole, short tail chunk. iloc + 32 is
    // 8-aligned, so the indexes follow the inode directly.
    let mut idx = pattern(4, 2 * 8192 + 3000);
    idx[8192..16384].fill(0);
    c.put(at::IDX_BLK as usize * BS, &idx[..8192]);
    c.put(at::IDX_TAIL_BLK as usize * BS, &idx[16384..]);
    let index = |blk: u32, hi: u16| -> Vec<u8> {
        let mut v = hi.to_le_bytes().to_vec();
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&blk.to_le_bytes());
        v
    };
    let indexes = [
        index(at::IDX_BLK, 0),
        index(u32::MAX, 0),
        index(at::IDX_TAIL_BLK, 0),
    ]
    .concat();
    c.compact(
        IDX,
        &compact(
            REG,
            DataLayout::ChunkBased,
            idx.len() as u32,
            (EROFS_CHUNK_FORMAT_INDEXES | 1) as u32,
            1,
        ),
        &indexes,
    );

    // CHUNK_BASED with 48-bit indexes: a 32-bit all-ones address with high bits is *not* a hole,
    // so use one mapped chunk and one 48-bit hole.
    let idx48 = [index(at::IDX_BLK, 0), index(u32::MAX, 0xFFFF)].concat();
    c.compact(
        IDX48,
        &compact(
            REG,
            DataLayout::ChunkBased,
            2 * BS as u32,
            (EROFS_CHUNK_FORMAT_INDEXES | EROFS_CHUNK_FORMAT_48BIT) as u32,
            1,
        ),
        &idx48,
    );

    // A character device.
    c.compact(
        DEV,
        &compact(
            S_IFCHR | 0o600,
            DataLayout::FlatPlain,
            0,
            new_encode_dev(259, 0x12345),
            1,
        ),
        &[],
    );

    // NLINK_1: nlink reads 1 and i_nb is the start block's high bits (0 here).
    let mut n1 = compact(REG, DataLayout::FlatInline, 3, 0, 0);
    n1.i_format
        .set(DataLayout::FlatInline.i_format(false) | 1 << EROFS_I_NLINK_1_BIT);
    c.compact(NLINK1, &n1, b"one");

    // A symlink with an inline target.
    c.compact(
        LINK,
        &compact(S_IFLNK | 0o777, DataLayout::FlatInline, 6, 0, 1),
        b"plain",
    );
    // (6 bytes of size but 5 of target: the sixth byte is the NUL that pads it.)

    // Compressed (FULL, all-zero index): one PLAIN lcluster whose pcluster is block 0.
    c.compact(
        COMPR,
        &compact(REG, DataLayout::CompressedFull, 100, 1, 1),
        &[0; 32],
    );

    // Xattrs: inline short-prefix entries, a long-prefix entry, and two shared entries.
    let prefixes: [(u8, &[u8]); 2] = [(4, b"overlay."), (1, b"very.long.prefix.")];
    let mut table = Vec::new();
    for (base, infix) in prefixes {
        let rec_len = (1 + infix.len()) as u16;
        table.extend_from_slice(&rec_len.to_le_bytes());
        table.push(base);
        table.extend_from_slice(infix);
        while table.len() % 4 != 0 {
            table.push(0);
        }
    }
    c.put(at::PREFIX_BLK as usize * BS, &table);
    c.sb.xattr_prefix_count = 2;
    c.sb.xattr_prefix_start
        .set((at::PREFIX_BLK as usize * BS / 4) as u32);
    let shared = [
        xattr_entry(1, b"shared", b"shared value"),
        xattr_entry(6, b"selinux", b"system_u:object_r:etc_t:s0"),
    ];
    let shared_ids = [0u32, (shared[0].len() / 4) as u32];
    c.put(at::XATTR_BLK as usize * BS, &shared.concat());
    let inline_x = vec![
        xattr_entry(1, b"inline", b"inline value"),
        xattr_entry(4, b"secret", b""),
        xattr_entry(0x80, b"opaque", b"y"),
        xattr_entry(0x81, b"x", b"long"),
        xattr_entry(5, b"lustre", b"skipped"),
    ];
    let names: [(u8, &[u8]); 6] = [
        (1, b"inline"),
        (4, b"secret"),
        (4, b"overlay.opaque"),
        (1, b"very.long.prefix.x"),
        (1, b"shared"),
        (6, b"selinux"),
    ];
    let (body, icount) = xattr_body(xattr_name_filter(names), &shared_ids, &inline_x);
    let mut xi = compact(REG, DataLayout::FlatPlain, 0, u32::MAX, 1);
    xi.i_xattr_icount.set(icount);
    c.compact(XATTRS, &xi, &body);
    c.sb.feature_compat
        .set(c.sb.feature_compat.get() | EROFS_FEATURE_COMPAT_XATTR_FILTER);

    // A DOT_OMITTED subdirectory with one file.
    let (block, used) = dir_block(&[
        (b"..", ROOT_NID, EROFS_FT_DIR),
        (b"f", SUBFILE, EROFS_FT_REG_FILE),
    ]);
    c.put(at::SUB_DIR_BLK as usize * BS, &block);
    let mut sd = compact(DIR, DataLayout::FlatPlain, used as u32, at::SUB_DIR_BLK, 2);
    sd.i_format
        .set(DataLayout::FlatPlain.i_format(false) | 1 << EROFS_I_NLINK_1_BIT);
    c.compact(SUBDIR, &sd, &[]);
    c.compact(
        SUBFILE,
        &compact(REG, DataLayout::FlatInline, 4, 0, 1),
        b"sub\n",
    );

    // An extended inode straddling blocks 0 and 1, with an inline tail in block 1.
    let mut ext = extended(REG, DataLayout::FlatInline, 10, 0, 1);
    ext.i_uid.set(100_000);
    ext.i_gid.set(200_000);
    ext.i_mtime.set(-12345);
    ext.i_mtime_nsec.set(999_999_999);
    c.extended(EXT, &ext, b"extended!\n");

    let files = Files {
        plain,
        inline,
        map,
        idx,
    };
    (c, files)
}
