//! Persistent stores of verified blocks ([`BlockStore`]): a cache that outlives the process (for
//! images read over a network), consulted by [`crate::VerifiedBlocks`] before it fetches.
//!
//! A store is only ever given blocks that were verified, and everything it returns is verified
//! again like fetched bytes, so a torn or lost write (a crash mid-fill) is caught, forgotten
//! ([`BlockStore::discard`]) and fetched again; a store can never make the reader return an
//! unverified byte.

use crate::verified::SealInfo;
use sealfs_verity::Digest;
use std::sync::Arc;

/// Which of an image's two block spaces a block belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Region {
    /// EROFS blocks, by block index from offset 0.
    Data,
    /// Merkle tree blocks, by index in the stored tree (root level first).
    Tree,
}

/// Verified blocks of one image, kept across processes.
pub trait BlockStore: Send + Sync {
    /// Copies the blocks `first..first + buf.len() / block size` of `region` it holds into their
    /// places in `buf`; returns, per block, whether it had it (the others are left as they were).
    fn get(&self, region: Region, first: u64, buf: &mut [u8]) -> Vec<bool>;

    /// Keeps `bytes` (whole, verified blocks) as blocks `first..` of `region`. Best effort: a store
    /// that cannot write drops them.
    fn put(&self, region: Region, first: u64, bytes: &[u8]);

    /// Forgets blocks it returned that failed verification.
    fn discard(&self, region: Region, first: u64, count: u64);

    /// Which of the blocks `first..first + count` of `region` it holds (without reading them).
    fn has(&self, region: Region, first: u64, count: u64) -> Vec<bool>;

    /// The most bytes it keeps, of all the images it serves (its bound), or `None` when unbounded:
    /// an image larger than a share of it is not filled whole ([`crate::FillMode::Auto`]).
    fn capacity(&self) -> Option<u64> {
        None
    }

    /// Whether blocks kept for other images may serve this one by leaf hash
    /// ([`Self::get_by_leaf`]): reads then take the hash blocks a read needs (from the store, or
    /// fetched) before its data, to know which data blocks another image's entries hold.
    fn shares_leaves(&self) -> bool {
        false
    }

    /// Copies into `out` (one block) a block kept for another image whose leaf hash under this
    /// image's hash algorithm, block size and salt is `leaf`; whether it had one. A hint only: the
    /// caller checks the bytes against `leaf` (taken from this image's verified tree) before it
    /// uses them, and calls [`Self::discard_leaf`] when they do not match.
    fn get_by_leaf(&self, leaf: &[u8], out: &mut [u8]) -> bool {
        let _ = (leaf, out);
        false
    }

    /// The block [`Self::get_by_leaf`] gave for `leaf` does not hash to it (damaged on disk):
    /// forgets it.
    fn discard_leaf(&self, leaf: &[u8]) {
        let _ = leaf;
    }
}

/// Hands out the [`BlockStore`] of an image once its seal is known (a cache directory, say, with
/// one store per image digest).
pub trait StoreProvider: Send + Sync + std::fmt::Debug {
    /// The store for the image with `digest`, whose tree `seal` describes; `None` to not cache it.
    fn store_for(&self, digest: &Digest, seal: &SealInfo) -> Option<Arc<dyn BlockStore>>;
}
