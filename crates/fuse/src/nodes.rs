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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    // ----- NodeMap -------------------------------------------------------------------------------

    /// The largest nid an image can have: `nid * 32` is a byte offset below 2^64.
    const MAX_NID: u64 = (1 << 59) - 1;

    #[test]
    fn node_map_root_is_node_one_and_back() {
        let m = NodeMap::new(36, false);
        assert_eq!(m.node(36), 1);
        assert_eq!(m.nid(1), 36);
    }

    #[test]
    fn node_map_ordinary_nids_are_their_own_node_ids() {
        let m = NodeMap::new(36, false);
        for nid in [2, 3, 35, 37, 38, 1 << 20, MAX_NID] {
            assert_eq!(m.node(nid), nid, "nid {nid}");
            assert_eq!(m.nid(nid), nid, "node {nid}");
        }
    }

    /// Node ids 0 (FUSE: "no node") and 1 (the root) cannot carry nids 0 and 1: they move to
    /// 2^62 + nid, above every nid.
    #[test]
    fn node_map_nids_zero_and_one_are_moved_above_every_nid() {
        let m = NodeMap::new(36, false);
        assert_eq!(m.node(0), 0x4000_0000_0000_0000);
        assert_eq!(m.node(1), 0x4000_0000_0000_0001);
        assert_eq!(m.nid(0x4000_0000_0000_0000), 0);
        assert_eq!(m.nid(0x4000_0000_0000_0001), 1);
        assert!(m.node(0) > MAX_NID && m.node(1) > MAX_NID);
    }

    /// A root at nid 0 or 1 takes node id 1; the other of the two is moved.
    #[test]
    fn node_map_root_at_nid_zero_or_one() {
        let m = NodeMap::new(0, false);
        assert_eq!((m.node(0), m.nid(1)), (1, 0));
        assert_eq!(m.node(1), 0x4000_0000_0000_0001);
        assert_eq!(m.nid(0x4000_0000_0000_0001), 1);

        let m = NodeMap::new(1, false);
        assert_eq!((m.node(1), m.nid(1)), (1, 1));
        assert_eq!(m.node(0), 0x4000_0000_0000_0000);
        assert_eq!(m.nid(0x4000_0000_0000_0000), 0);
    }

    /// Over many nids and roots: `nid(node(n)) == n`, no node id is 0, only the root gets 1, and
    /// distinct nids get distinct node ids.
    #[test]
    fn node_map_is_a_bijection_that_avoids_zero() {
        let nids: Vec<u64> = (0..70)
            .chain([1 << 16, (1 << 32) - 1, 1 << 32, MAX_NID - 1, MAX_NID])
            .collect();
        let in_metabox: Vec<u64> = nids.iter().map(|n| n | 1 << 63).collect();
        for (root, metabox) in [0, 1, 2, 36, 65535, MAX_NID, 1 << 63, (1 << 63) + 5]
            .into_iter()
            .flat_map(|r| [(r, false), (r, true)])
            .filter(|&(r, metabox)| metabox || r >> 63 == 0)
        {
            let m = NodeMap::new(root, metabox);
            let nids: Vec<u64> = match metabox {
                true => nids.iter().chain(&in_metabox).copied().collect(),
                false => nids.clone(),
            };
            let mut seen = HashSet::new();
            for &nid in nids.iter().chain([&root]) {
                let node = m.node(nid);
                assert_eq!(m.nid(node), nid, "root {root}, nid {nid}, node {node}");
                assert_ne!(node, 0, "root {root}, nid {nid}");
                assert_eq!(node == 1, nid == root, "root {root}, nid {nid}");
                if !seen.insert(nid) {
                    continue; // the root listed twice
                }
                assert!(
                    nids.iter()
                        .chain([&root])
                        .all(|&o| o == nid || m.node(o) != node),
                    "root {root}: nid {nid} shares node {node}"
                );
            }
        }
    }
}
