//! Blocks of one image served to another by leaf hash: the hash the Merkle tree records at its
//! level 0 for each data block (salted as the seal says, so leaves are only comparable between
//! images with the same hash algorithm, block size and salt).
//!
//! An image's cached level-0 tree blocks say which leaf each of its cached data blocks has; the
//! index gathers them, for every other image in the cache whose `meta` records the same tree
//! parameters, when a store first needs it ([`crate::ImageStore`] as a
//! [`sealfs_reader::BlockStore`]). What the index finds is a hint: the reader checks the bytes
//! against the leaf of its own verified tree before it uses them, so a damaged entry, a damaged
//! tree block of the other image, or an index gone stale (a chunk pruned or rewritten since)
//! costs a fetch, never a wrong byte.

use crate::{read_meta, DiskCache, ImageStore, CHUNK_BLOCKS, HEADER};
use sealfs_reader::{BlockStore, Region};
use sealfs_verity::{Digest, Params, TreeGeometry};
use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::RwLock;

/// The first bytes of a leaf, as the index keys it: 128 bits find a block (two different blocks
/// sharing them would only cost a failed check and a fetch).
type Key = [u8; 16];

fn key(leaf: &[u8]) -> Key {
    let mut k = [0u8; 16];
    let n = leaf.len().min(16);
    k[..n].copy_from_slice(&leaf[..n]);
    k
}

/// A data block the cache holds for an image, by its leaf hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedLeaf {
    /// The leaf hash, as the image's cached tree records it (not checked here).
    pub leaf: Box<[u8]>,
    /// The image it belongs to.
    pub digest: Digest,
    /// The data block's index in that image.
    pub block: u64,
    /// The chunk file holding it.
    pub path: PathBuf,
    /// Where the block starts in that file.
    pub offset: u64,
}

impl DiskCache {
    /// Every data block the cache holds (its bit set in its chunk's header) for the images whose
    /// `meta` records tree parameters `params`, but `except`, with the leaf its image's cached
    /// level-0 tree blocks record for it (a block whose tree block is not cached is left out). The
    /// leaves are read, not checked: whoever uses a block checks it against the leaf it wants.
    pub fn leaf_entries(
        &self,
        params: &Params,
        except: Option<&Digest>,
    ) -> io::Result<Vec<CachedLeaf>> {
        let mut out = Vec::new();
        for (digest, store, data_length) in self.images_with(params, except)? {
            store.each_leaf(params, data_length, |block, leaf| {
                let (chunk, at) = (block / CHUNK_BLOCKS, block % CHUNK_BLOCKS);
                out.push(CachedLeaf {
                    leaf: leaf.into(),
                    digest,
                    block,
                    path: store.chunk_path(Region::Data, chunk),
                    offset: HEADER + at * params.block_size() as u64,
                });
            });
        }
        Ok(out)
    }

    /// The images in the cache made with `params`, but `except`: (digest, store, EROFS length).
    fn images_with(
        &self,
        params: &Params,
        except: Option<&Digest>,
    ) -> io::Result<Vec<(Digest, ImageStore, u64)>> {
        let mut out = Vec::new();
        let mut entries: Vec<_> = std::fs::read_dir(&self.dir)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .collect();
        entries.sort();
        for dir in entries {
            let Ok(meta) = read_meta(&dir) else {
                continue;
            };
            if meta.params != *params || Some(&meta.digest) == except {
                continue;
            }
            // The directory must be the one its meta names (a copied or renamed one is skipped).
            let store = self.image(&meta.digest, params.block_size());
            if store.dir != dir {
                continue;
            }
            out.push((meta.digest, store, meta.data_length));
        }
        Ok(out)
    }
}

impl ImageStore {
    /// Calls `f(block, leaf)` for each whole data block this store holds whose level-0 tree block
    /// it holds too (the image's tree made with `params` over `data_length` bytes).
    fn each_leaf(&self, params: &Params, data_length: u64, mut f: impl FnMut(u64, &[u8])) {
        let g = TreeGeometry::new(params, data_length);
        if g.num_levels() == 0 {
            return;
        }
        let bs = params.block_size();
        let whole = data_length / bs as u64;
        let per = g.hashes_per_block() as u64;
        let (start, count) = (g.level_start(0), g.level_blocks(0));
        let mut tree = vec![0u8; CHUNK_BLOCKS as usize * bs];
        for first in (0..count).step_by(CHUNK_BLOCKS as usize) {
            let n = (count - first).min(CHUNK_BLOCKS) as usize;
            let got = self.get(Region::Tree, start + first, &mut tree[..n * bs]);
            for (k, hit) in got.iter().enumerate() {
                if !hit {
                    continue;
                }
                let hb = &tree[k * bs..(k + 1) * bs];
                let from = (first + k as u64) * per;
                let to = (from + per).min(whole);
                if from >= to {
                    continue;
                }
                let present = self.has(Region::Data, from, to - from);
                for (i, p) in present.into_iter().enumerate() {
                    let block = from + i as u64;
                    let Some(loc) = g.hash_location(0, block) else {
                        continue;
                    };
                    if let (true, Some(leaf)) = (p, g.stored_digest(hb, loc)) {
                        f(block, leaf);
                    }
                }
            }
        }
    }
}

/// The data blocks of the other images with the same tree parameters, by leaf.
pub(crate) struct LeafIndex {
    images: Vec<ImageStore>,
    /// Leaf → (image in `images`, data block).
    map: RwLock<HashMap<Key, (u32, u64)>>,
}

impl std::fmt::Debug for LeafIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeafIndex")
            .field("images", &self.images.len())
            .field("leaves", &self.read().len())
            .finish()
    }
}

impl LeafIndex {
    /// The index of the blocks `cache` holds for the images made with `params`, but `except`.
    pub(crate) fn build(
        cache: &DiskCache,
        params: &Params,
        except: &Digest,
    ) -> io::Result<LeafIndex> {
        let mut images = Vec::new();
        let mut map = HashMap::new();
        for (_, store, data_length) in cache.images_with(params, Some(except))? {
            let i = images.len() as u32;
            store.each_leaf(params, data_length, |block, leaf| {
                map.entry(key(leaf)).or_insert((i, block));
            });
            images.push(store);
        }
        Ok(LeafIndex {
            images,
            map: RwLock::new(map),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<Key, (u32, u64)>> {
        self.map.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether it knows any block.
    pub(crate) fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Copies the block it knows for `leaf` into `out`; whether it could.
    pub(crate) fn get(&self, leaf: &[u8], out: &mut [u8]) -> bool {
        let Some(&(i, block)) = self.read().get(&key(leaf)) else {
            return false;
        };
        self.images[i as usize]
            .get(Region::Data, block, out)
            .first()
            == Some(&true)
    }

    /// Forgets the block it gave for `leaf` (it did not hash to it), here and in its image's
    /// store.
    pub(crate) fn discard(&self, leaf: &[u8]) {
        let found = self
            .map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key(leaf));
        if let Some((i, block)) = found {
            self.images[i as usize].discard(Region::Data, block, 1);
        }
    }
}
