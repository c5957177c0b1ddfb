//! Node ids: how the inode numbers of an image map to the node ids of FUSE.

/// The FUSE node ids of an image's inodes.
///
/// The kernel shows a node's `st_ino` from the attributes the filesystem returns, and for every node
/// but the root (whose node id is always 1) the node id *is* that number in fuser. So node id = the
/// inode number the kernel shows (the nid, or in an image with a metabox its
/// [`sealfs_format::nid_to_ino64`] form), except: the root is 1 (its attributes still say its
/// number), and numbers 0 and 1 (when not the root), which FUSE cannot use, are moved above every
/// possible one (nids are below 2^59, since `nid * 32` is a byte offset, so their inode numbers are
/// below 2^60).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeMap {
    pub(crate) root_nid: u64,
    metabox: bool,
}

const ALIAS: u64 = 1 << 62;

impl NodeMap {
    /// The map for an image whose root directory is `root_nid`, with a metabox or not.
    pub fn new(root_nid: u64, metabox: bool) -> NodeMap {
        NodeMap { root_nid, metabox }
    }

    /// The inode number the kernel shows for `nid`.
    pub fn ino(&self, nid: u64) -> u64 {
        sealfs_format::nid_to_ino64(self.metabox, nid)
    }

    /// The node id of `nid`.
    pub fn node(&self, nid: u64) -> u64 {
        let ino = self.ino(nid);
        if nid == self.root_nid {
            1
        } else if ino <= 1 {
            ino | ALIAS
        } else {
            ino
        }
    }

    /// The nid of node id `node` (the inverse of [`NodeMap::node`]).
    pub fn nid(&self, node: u64) -> u64 {
        if node == 1 {
            self.root_nid
        } else {
            sealfs_format::ino64_to_nid(self.metabox, node & !ALIAS)
        }
    }
}
