//! Hand-built EROFS images (4 KiB blocks) for cases no mkfs writes: the reader's edge cases, its
//! error paths and the xattr filter, with every byte under the test's control. Independent of the
//! sealfs builder: the on-disk structs come from `sealfs-format`. [`crate::dircraft`] builds on the
//! same pieces (superblock, directory blocks, compact inodes).

use sealfs_format::{
    superblock_checksum, superblock_checksum_len, DataLayout, InodeCompact, InodeExtended,
    IntoBytes, SuperBlock, EROFS_FEATURE_COMPAT_SB_CHKSUM, EROFS_SUPER_MAGIC_V1,
};

/// Block size of crafted images.
pub const BS: usize = 4096;
/// nid of the root inode crafted images use (byte 1152, right after the superblock).
pub const ROOT_NID: u64 = 36;

/// A crafted image being put together.
pub struct Craft {
    /// The superblock, written by [`Craft::finish`].
    pub sb: SuperBlock,
    /// The image bytes.
    pub img: Vec<u8>,
}

impl Craft {
    /// `nblocks` zeroed blocks and a superblock: magic, 4 KiB blocks, root nid 36, checksum on.
    pub fn new(nblocks: usize) -> Craft {
        let mut sb = base_superblock(nblocks, ROOT_NID);
        sb.fixed_nsec.set(123);
        sb.inos.set(10);
        sb.uuid = *b"0123456789abcdef";
        sb.volume_name[..5].copy_from_slice(b"craft");
        Craft {
            sb,
            img: vec![0; nblocks * BS],
        }
    }

    /// Writes `bytes` at `off`.
    pub fn put(&mut self, off: usize, bytes: &[u8]) {
        self.img[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// Byte offset of inode `nid` (meta_blkaddr 0).
    pub fn iloc(nid: u64) -> usize {
        nid as usize * 32
    }

    /// Writes a compact inode at `nid` followed by `tail` (xattr body, inline data, indexes).
    pub fn compact(&mut self, nid: u64, ic: &InodeCompact, tail: &[u8]) {
        let off = Craft::iloc(nid);
        self.put(off, ic.as_bytes());
        self.put(off + 32, tail);
    }

    /// Writes an extended inode at `nid` followed by `tail`.
    pub fn extended(&mut self, nid: u64, ie: &InodeExtended, tail: &[u8]) {
        let off = Craft::iloc(nid);
        self.put(off, ie.as_bytes());
        self.put(off + 64, tail);
    }

    /// The image with the superblock (and its checksum when `SB_CHKSUM` is set) written.
    pub fn finish(&self) -> Vec<u8> {
        let mut img = self.img.clone();
        write_superblock(&mut img, &self.sb);
        img
    }
}

/// A superblock with what every crafted image has: the magic, 4 KiB blocks, `root_nid`, `nblocks`
/// blocks, the checksum feature, epoch 1 700 000 000.
pub fn base_superblock(nblocks: usize, root_nid: u64) -> SuperBlock {
    let mut sb = SuperBlock::default();
    sb.magic.set(EROFS_SUPER_MAGIC_V1);
    sb.blkszbits = 12;
    sb.root_nid.set(root_nid as u16);
    sb.blocks.set(nblocks as u32);
    sb.feature_compat.set(EROFS_FEATURE_COMPAT_SB_CHKSUM);
    sb.epoch.set(1_700_000_000);
    sb
}

/// Writes `sb` at byte 1024 of `img`, its checksum computed over `img` when `SB_CHKSUM` is set
/// (the `checksum` field of `sb` is ignored).
pub fn write_superblock(img: &mut [u8], sb: &SuperBlock) {
    let mut sb = *sb;
    sb.checksum.set(0);
    img[1024..1152].copy_from_slice(sb.as_bytes());
    if sb.feature_compat.get() & EROFS_FEATURE_COMPAT_SB_CHKSUM != 0 {
        let len = superblock_checksum_len(sb.blkszbits.clamp(9, 12));
        let sum = superblock_checksum(&img[1024..1024 + len]);
        img[1028..1032].copy_from_slice(&sum.to_le_bytes());
    }
}

/// A compact inode.
pub fn compact(mode: u16, layout: DataLayout, size: u32, i_u: u32, nlink: u16) -> InodeCompact {
    let mut ic = InodeCompact::default();
    ic.i_format.set(layout.i_format(false));
    ic.i_mode.set(mode);
    ic.i_size.set(size);
    ic.i_u.set(i_u);
    ic.i_nb.set(nlink);
    ic
}

/// An extended inode.
pub fn extended(mode: u16, layout: DataLayout, size: u64, i_u: u32, nlink: u32) -> InodeExtended {
    let mut ie = InodeExtended::default();
    ie.i_format.set(layout.i_format(true));
    ie.i_mode.set(mode);
    ie.i_size.set(size);
    ie.i_u.set(i_u);
    ie.i_nlink.set(nlink);
    ie
}

/// One directory block: the entries sorted by name, dirents then names, zero-filled.
/// Returns the block and the bytes used (the directory's `i_size` if it is the only block).
pub fn dir_block(entries: &[(&[u8], u64, u8)]) -> (Vec<u8>, usize) {
    let mut sorted: Vec<_> = entries.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    dirents_block(&sorted)
}

/// One directory block with the entries in the given order (sorted or not), dirents then names,
/// zero-filled. Returns the block and the bytes used.
pub fn dirents_block(entries: &[(&[u8], u64, u8)]) -> (Vec<u8>, usize) {
    let mut block = vec![0u8; BS];
    let mut nameoff = 12 * entries.len();
    for (i, (name, nid, ft)) in entries.iter().enumerate() {
        block[i * 12..i * 12 + 8].copy_from_slice(&nid.to_le_bytes());
        block[i * 12 + 8..i * 12 + 10].copy_from_slice(&(nameoff as u16).to_le_bytes());
        block[i * 12 + 10] = *ft;
        block[nameoff..nameoff + name.len()].copy_from_slice(name);
        nameoff += name.len();
    }
    (block, nameoff)
}

/// One xattr entry (header, suffix, value, padding to 4 bytes).
pub fn xattr_entry(index: u8, suffix: &[u8], value: &[u8]) -> Vec<u8> {
    let mut v = vec![suffix.len() as u8, index];
    v.extend_from_slice(&(value.len() as u16).to_le_bytes());
    v.extend_from_slice(suffix);
    v.extend_from_slice(value);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

/// An inline xattr body: header (filter, shared ids) and the inline entries. Returns the body and
/// the `i_xattr_icount` that describes its size.
pub fn xattr_body(filter: u32, shared: &[u32], inline: &[Vec<u8>]) -> (Vec<u8>, u16) {
    let mut v = filter.to_le_bytes().to_vec();
    v.push(shared.len() as u8);
    v.extend_from_slice(&[0; 7]);
    for id in shared {
        v.extend_from_slice(&id.to_le_bytes());
    }
    for e in inline {
        v.extend_from_slice(e);
    }
    let icount = ((v.len() - 12) / 4 + 1) as u16;
    (v, icount)
}
