//! The bounded cache of decoded inodes a mount keeps.

use sealfs_reader::Inode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Decoded inodes kept (about 150 bytes each with their map entry: at most ~40 MiB).
pub const INODE_CACHE_ENTRIES: usize = 1 << 18;

/// A bounded map of decoded inodes with two generations: entries are found in the current or the
/// previous one (and promoted); when the current one is full, it becomes the previous one and the
/// old previous one is dropped. At most `2 * half` entries, O(1) per operation.
type InodeMap = HashMap<u64, Arc<Inode>>;

pub(crate) struct InodeCache {
    half: usize,
    maps: Mutex<(InodeMap, InodeMap)>,
}

impl InodeCache {
    pub(crate) fn new(entries: usize) -> InodeCache {
        InodeCache {
            half: (entries / 2).max(1),
            maps: Mutex::new((HashMap::new(), HashMap::new())),
        }
    }

    pub(crate) fn get(&self, nid: u64) -> Option<Arc<Inode>> {
        let mut m = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = m.0.get(&nid) {
            return Some(i.clone());
        }
        let i = m.1.remove(&nid)?;
        Self::put(&mut m, self.half, nid, i.clone());
        Some(i)
    }

    pub(crate) fn insert(&self, nid: u64, inode: Arc<Inode>) {
        let mut m = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        Self::put(&mut m, self.half, nid, inode);
    }

    fn put(m: &mut (InodeMap, InodeMap), half: usize, nid: u64, inode: Arc<Inode>) {
        if m.0.len() >= half {
            m.1 = std::mem::take(&mut m.0);
        }
        m.0.insert(nid, inode);
    }
}
