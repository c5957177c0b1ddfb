//! Hand-built EROFS images for the extraction safety tests: directory entries no builder writes
//! (names with '/', "..", NUL, duplicates, directories reached twice), with every byte under the
//! test's control. Independent of the sealfs builder; the on-disk structs come from `sealfs-format`.
//!
//! Layout: block 0 holds the superblock and the inodes (compact, from nid 36 = byte 1152 on; at most
//! nid 127), each file's or symlink's data inline right after its inode; every directory gets one
//! block of its own from block 1 on.

pub use crate::craft::BS;
use crate::craft::{base_superblock, compact, dirents_block, write_superblock};
use sealfs_format::{DataLayout, InodeCompact, IntoBytes, EROFS_FT_DIR, S_IFDIR, S_IFLNK, S_IFREG};

/// nid of the root directory.
pub const ROOT: u64 = crate::craft::ROOT_NID;
/// Last nid whose inode (with 32 bytes of inline data) fits in block 0.
const LAST_NID: u64 = 126;

/// Dirent file types.
pub use sealfs_format::{
    EROFS_FT_DIR as FT_DIR, EROFS_FT_REG_FILE as FT_REG, EROFS_FT_SYMLINK as FT_LNK,
};

/// One directory entry: name, nid, dirent file type.
pub type Dirent = (Vec<u8>, u64, u8);

/// An image being put together.
pub struct Crafter {
    next_nid: u64,
    block0: Vec<u8>,
    blocks: Vec<Vec<u8>>,
}

impl Default for Crafter {
    fn default() -> Self {
        Self::new()
    }
}

impl Crafter {
    /// An empty image; the root directory's slot (nid 36) is reserved.
    pub fn new() -> Crafter {
        Crafter {
            next_nid: ROOT + 1,
            block0: vec![0; BS],
            blocks: Vec::new(),
        }
    }

    /// Reserves a 32-byte inode slot for a directory written later with [`Crafter::dir`].
    pub fn reserve(&mut self) -> u64 {
        self.alloc(0)
    }

    fn alloc(&mut self, inline: usize) -> u64 {
        let nid = self.next_nid;
        self.next_nid += 1 + inline.div_ceil(32) as u64;
        assert!(
            self.next_nid <= LAST_NID + 1,
            "crafted image: block 0 is full"
        );
        nid
    }

    fn put_inode(&mut self, nid: u64, ic: &InodeCompact, tail: &[u8]) {
        let off = nid as usize * 32;
        self.block0[off..off + 32].copy_from_slice(ic.as_bytes());
        self.block0[off + 32..off + 32 + tail.len()].copy_from_slice(tail);
    }

    fn inode(mode: u16, layout: DataLayout, size: u32, i_u: u32, nlink: u16) -> InodeCompact {
        let mut ic = compact(mode, layout, size, i_u, nlink);
        ic.i_mtime.set(1000);
        ic
    }

    /// A regular file (mode 0644) holding `data` (at most a few hundred bytes, inline).
    pub fn file(&mut self, data: &[u8]) -> u64 {
        let nid = self.alloc(data.len());
        let ic = Self::inode(
            S_IFREG | 0o644,
            DataLayout::FlatInline,
            data.len() as u32,
            0,
            1,
        );
        self.put_inode(nid, &ic, data);
        nid
    }

    /// A symlink to `target` (inline).
    pub fn symlink(&mut self, target: &[u8]) -> u64 {
        let nid = self.alloc(target.len());
        let ic = Self::inode(
            S_IFLNK | 0o777,
            DataLayout::FlatInline,
            target.len() as u32,
            0,
            1,
        );
        self.put_inode(nid, &ic, target);
        nid
    }

    /// Writes directory `nid` (reserved) with `entries` in this order (give "." and ".." yourself;
    /// sort them with [`sorted`] for a directory the kernel can search) in a block of its own.
    pub fn dir(&mut self, nid: u64, entries: &[Dirent]) {
        let slices: Vec<(&[u8], u64, u8)> = entries
            .iter()
            .map(|(n, nid, ft)| (&n[..], *nid, *ft))
            .collect();
        let (block, nameoff) = dirents_block(&slices);
        self.blocks.push(block);
        let blkaddr = self.blocks.len() as u32; // block 0 is the metadata block
        let subdirs = entries
            .iter()
            .filter(|(n, _, ft)| *ft == EROFS_FT_DIR && n != b"." && n != b"..")
            .count();
        let ic = Self::inode(
            S_IFDIR | 0o755,
            DataLayout::FlatPlain,
            nameoff as u32,
            blkaddr,
            2 + subdirs as u16,
        );
        self.put_inode(nid, &ic, &[]);
    }

    /// The image bytes: superblock (checksummed), block 0, directory blocks.
    pub fn finish(&self) -> Vec<u8> {
        let nblocks = 1 + self.blocks.len();
        let mut sb = base_superblock(nblocks, ROOT);
        sb.inos.set(self.next_nid - ROOT);
        let mut img = self.block0.clone();
        write_superblock(&mut img, &sb);
        for b in &self.blocks {
            img.extend_from_slice(b);
        }
        img
    }
}

/// `entries` sorted by name bytes, as EROFS stores them.
pub fn sorted(mut entries: Vec<Dirent>) -> Vec<Dirent> {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
}

/// A dirent.
pub fn de(name: &[u8], nid: u64, ft: u8) -> Dirent {
    (name.to_vec(), nid, ft)
}
