//! The fuzz harness of the image reader: how an input becomes an opened image, and the walk that
//! then calls every reader entry point on everything reachable.
//!
//! ONE SOURCE FOR TWO USERS: this file is the library of the cargo-fuzz targets (`fuzz/src/lib.rs`)
//! and is also compiled into the stable test `crates/reader/tests/fuzz_corpus.rs` with
//! `#[path = "../../../fuzz/src/harness.rs"]`, so the fuzzers and the normal test suite cannot
//! drift apart. It must therefore build on stable Rust and use nothing but `std`, `sealfs_reader`,
//! `sealfs_format` and `sealfs_verity` (all dependencies of the reader crate).
//!
//! Every operation's result is ignored: errors are fine, a panic (or a hang, or an allocation the
//! image size does not justify) is a bug. The walk's own work is bounded (entries, inodes, bytes
//! of file data), so a slow or huge result can only come from the reader.

// The test uses only part of it.
#![allow(dead_code)]
// `..Options::default()` although every field is set today: fields added later keep their defaults.
#![allow(clippy::needless_update)]

use sealfs_format::{superblock_checksum, superblock_checksum_len, EROFS_FEATURE_COMPAT_SB_CHKSUM};
use sealfs_reader::{
    BlockSource, Follow, Image, Inode, Options, PlainBlocks, ReadAt, SealInfo, VerifiedBlocks,
};
use sealfs_verity::{build_tree, Digest, HashAlg, Params};
use std::collections::HashSet;
use std::sync::Arc;

/// Directory entries the walk looks at, over all directories.
pub const MAX_ENTRIES: usize = 10_000;
/// Inodes the walk visits (each one once: a set of visited nids breaks cycles).
pub const MAX_INODES: usize = 2_000;
/// Bytes of file data the walk reads, over all files.
pub const MAX_DATA_BYTES: u64 = 4 << 20;
/// Bytes of one read.
const MAX_READ: usize = 1 << 20;

/// xattr names no image is expected to have (exercise the miss paths and the bloom filter).
const ABSENT_XATTRS: &[&[u8]] = &[
    b"user.nope",
    b"security.capability",
    b"trusted.x",
    b"system.posix_acl_access",
    b"",
    b"user.",
    b"unknownprefix.a",
];

// ----- open_walk -----------------------------------------------------------------------------

/// The `open_walk` target: `data` is an image. It is opened as it is and, when its superblock
/// checksum is enabled but wrong, once more with the checksum fixed, so that mutations behind the
/// checksummed region reach the parsers instead of stopping at the checksum.
pub fn open_walk(data: &[u8]) {
    open_and_walk(data.to_vec());
    if let Some(fixed) = with_fixed_checksum(data) {
        open_and_walk(fixed);
    }
}

/// Opens `bytes` as an unverified image and walks it. The source block size and the cache sizes
/// depend on the length (so truncations and insertions also vary them): 4 KiB blocks with the
/// default caches; 512-byte blocks without any cache; 4 KiB blocks with a 3-block cache and an
/// 8 KiB cluster cache, 1 KiB blocks with a 5-block one and a 64 KiB cluster cache (both evict
/// all the time).
pub fn open_and_walk(bytes: Vec<u8>) {
    let (bits, cache_blocks, cluster_cache_bytes) = match bytes.len() % 4 {
        0 => (
            12,
            sealfs_reader::DEFAULT_CACHE_BLOCKS,
            sealfs_reader::DEFAULT_CLUSTER_CACHE_BYTES,
        ),
        1 => (9, 0, 0),
        2 => (12, 3, 8 << 10),
        _ => (10, 5, 64 << 10),
    };
    let source: Arc<dyn BlockSource> = Arc::new(PlainBlocks::with_block_bits(bytes, bits));
    let options = Options {
        cache_blocks,
        cluster_cache_bytes,
        ..Options::default()
    };
    if let Ok(img) = Image::open_blocks(source, &options) {
        walk(&img);
    }
}

/// `data` with its superblock checksum recomputed, if the image enables the checksum, the region
/// it covers is present and the stored checksum differs; otherwise `None`.
pub fn with_fixed_checksum(data: &[u8]) -> Option<Vec<u8>> {
    let compat = u32::from_le_bytes(data.get(1032..1036)?.try_into().ok()?);
    let bits = *data.get(1036)?;
    if compat & EROFS_FEATURE_COMPAT_SB_CHKSUM == 0 || !(9..=12).contains(&bits) {
        return None;
    }
    let region = data.get(1024..1024 + superblock_checksum_len(bits))?;
    let sum = superblock_checksum(region).to_le_bytes();
    if data[1028..1032] == sum {
        return None;
    }
    let mut fixed = data.to_vec();
    fixed[1028..1032].copy_from_slice(&sum);
    Some(fixed)
}

// ----- verified_open_walk ----------------------------------------------------------------------

/// log2 of the verity block size, by the 3-bit index in the parameter byte.
const LOG_BLOCK_SIZES: [u8; 8] = [12, 10, 11, 12, 13, 16, 14, 15];
/// Reader cache sizes (source blocks), by a 2-bit index in the mode byte.
const CACHE_BLOCKS: [usize; 4] = [4, 0, 1, 256];
/// Verified hash block cache sizes (raised to the tree height by the reader), by a 2-bit index.
const HASH_CACHE_BLOCKS: [usize; 4] = [0, 2, 1024, 1];
/// Decoded cluster cache sizes (bytes), by a 2-bit index.
const CLUSTER_CACHE_BYTES: [usize; 4] = [
    sealfs_reader::DEFAULT_CLUSTER_CACHE_BYTES,
    0,
    8 << 10,
    64 << 10,
];

/// The `verified_open_walk` target. Input layout:
///
/// ```text
/// byte 0  mode:   bit 0 raw (1) or honest (0); bit 1 sidecar tree (1) or attached (0);
///                 bits 2-3 reader cache size; bits 4-5 hash cache size; bits 6-7 cluster cache
///                 size (tables above)
/// byte 1  params: bit 0 SHA-512 (1) or SHA-256 (0); bits 1-3 verity block size (LOG_BLOCK_SIZES)
/// byte 2  salt length (mod 33; the salt bytes are a fixed pattern)
/// byte 3  honest: number of corruptions (mod 8); raw: unused
/// honest: corruptions (u32 LE position, u8 xor mask) each, then the image.
///         The Merkle tree is built over the image (so verification passes), laid out after the
///         image (attached, block-aligned, as a sealed image) or in its own source (sidecar); then
///         each corruption xors one byte of image+tree (position mod its length): those blocks must
///         fail verification cleanly while everything else stays readable.
/// raw:    u32 LE data_length (high bit set: the data source's length), u32 LE tree_offset,
///         u32 LE split, the root (digest size bytes), then the body: attached, both sources are the
///         body; sidecar, the data is body[..split % (len + 1)] and the tree the rest.
/// ```
pub fn verified_open_walk(data: &[u8]) {
    let Some((&[mode, pbyte, salt_len, count], rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let alg = if pbyte & 1 == 0 {
        HashAlg::Sha256
    } else {
        HashAlg::Sha512
    };
    let log = LOG_BLOCK_SIZES[((pbyte >> 1) & 7) as usize];
    let salt: Vec<u8> = (0..salt_len as usize % 33)
        .map(|i| (i * 7 + 1) as u8)
        .collect();
    let Ok(params) = Params::from_log_block_size(alg, log, &salt) else {
        return;
    };
    let sidecar = mode & 2 != 0;
    let options = Options {
        cache_blocks: CACHE_BLOCKS[((mode >> 2) & 3) as usize],
        cluster_cache_bytes: CLUSTER_CACHE_BYTES[((mode >> 6) & 3) as usize],
        ..Options::default()
    };
    let hash_cache = HASH_CACHE_BLOCKS[((mode >> 4) & 3) as usize];
    let bs = params.block_size();

    let (data_src, tree_src, seal): (Arc<dyn ReadAt>, Arc<dyn ReadAt>, SealInfo) = if mode & 1 == 0
    {
        // Honest: a correct tree, then the corruptions.
        let n = (count % 8) as usize * 5;
        let (corruptions, image) = rest.split_at(n.min(rest.len()));
        let Ok(tree) = build_tree(&params, image) else {
            return;
        };
        let data_length = image.len() as u64;
        let (mut data_buf, mut tree_buf, tree_offset) = if sidecar {
            (image.to_vec(), tree.bytes, 0)
        } else {
            let mut all = image.to_vec();
            all.resize(image.len().next_multiple_of(bs), 0);
            let offset = all.len() as u64;
            all.extend_from_slice(&tree.bytes);
            (all, Vec::new(), offset)
        };
        for c in corruptions.chunks_exact(5) {
            let total = data_buf.len() + tree_buf.len();
            if total == 0 {
                break;
            }
            let pos = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize % total;
            if pos < data_buf.len() {
                data_buf[pos] ^= c[4];
            } else {
                tree_buf[pos - data_buf.len()] ^= c[4];
            }
        }
        let seal = SealInfo {
            params,
            data_length,
            tree_offset,
            root: tree.root,
        };
        let data_src: Arc<dyn ReadAt> = Arc::new(data_buf);
        let tree_src = if sidecar {
            Arc::new(tree_buf) as Arc<dyn ReadAt>
        } else {
            data_src.clone()
        };
        (data_src, tree_src, seal)
    } else {
        // Raw: everything from the input.
        let d = params.digest_size();
        if rest.len() < 12 + d {
            return;
        }
        let word = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().unwrap());
        let (len_field, tree_offset, split) = (word(0), word(4) as u64, word(8) as usize);
        let Ok(root) = Digest::new(alg, &rest[12..12 + d]) else {
            return;
        };
        let body = &rest[12 + d..];
        let (data_src, tree_src): (Arc<dyn ReadAt>, Arc<dyn ReadAt>) = if sidecar {
            let (a, b) = body.split_at(split % (body.len() + 1));
            (Arc::new(a.to_vec()), Arc::new(b.to_vec()))
        } else {
            let all: Arc<dyn ReadAt> = Arc::new(body.to_vec());
            (all.clone(), all)
        };
        let data_length = if len_field & 0x8000_0000 != 0 {
            data_src.len()
        } else {
            len_field as u64
        };
        let seal = SealInfo {
            params,
            data_length,
            tree_offset,
            root,
        };
        (data_src, tree_src, seal)
    };
    let Ok(vb) = VerifiedBlocks::new(data_src, tree_src, seal, hash_cache) else {
        return;
    };
    let vb = Arc::new(vb);
    if let Ok(img) = Image::open_blocks(vb.clone(), &options) {
        walk(&img);
    }
    // The counters stay consistent whatever happened.
    let _ = vb.stats();
    let _ = vb.geometry().num_levels();
}

// ----- the walk ----------------------------------------------------------------------------------

/// Walks everything reachable from the root of `img`, calling every reader entry point, within
/// fixed budgets ([`MAX_ENTRIES`], [`MAX_INODES`], [`MAX_DATA_BYTES`]). Ignores all errors.
pub fn walk(img: &Image) {
    let mut w = Walk {
        img,
        entries_left: MAX_ENTRIES,
        inodes_left: MAX_INODES,
        bytes_left: MAX_DATA_BYTES,
        seen: HashSet::new(),
    };
    w.image_wide();
    let root_nid = img.root_nid();
    let mut todo = vec![(root_nid, b"/".to_vec())];
    while let Some((nid, path)) = todo.pop() {
        if w.inodes_left == 0 {
            break;
        }
        if !w.seen.insert(nid) {
            continue;
        }
        w.inodes_left -= 1;
        let Ok(inode) = img.inode(nid) else { continue };
        w.inode(&inode, &path);
        if inode.is_dir() {
            w.dir(&inode, &path, &mut todo);
        }
    }
}

struct Walk<'a> {
    img: &'a Image,
    entries_left: usize,
    inodes_left: usize,
    bytes_left: u64,
    seen: HashSet<u64>,
}

impl Walk<'_> {
    /// Image-wide calls: superblock fields, raw reads at the edges, odd nids, root paths.
    fn image_wide(&mut self) {
        let img = self.img;
        let sb = img.superblock();
        let _ = (
            sb.block_size(),
            sb.label(),
            sb.build_time_abs(),
            sb.sb_size(),
        );
        let _ = sb.xattr_filter_enabled();
        let _ = (img.block_size(), img.len(), img.is_empty(), img.stats());
        let _ = img.long_prefixes();
        let len = img.len();
        let mut buf = [0u8; 64];
        for off in [
            0,
            len.saturating_sub(64),
            len.saturating_sub(1),
            len,
            u64::MAX - 1,
        ] {
            let _ = img.read_raw(off, &mut buf);
        }
        let root = img.root_nid();
        for nid in [
            0,
            1,
            root.wrapping_add(1),
            root.wrapping_sub(1),
            u64::MAX,
            1 << 40,
        ] {
            if let Ok(inode) = img.inode(nid) {
                let _ = inode.stat();
            }
        }
        for path in [
            &b"/"[..],
            b"",
            b".",
            b"..",
            b"/..",
            b"//",
            b"/nonexistent",
            b"/./../.",
        ] {
            self.resolve(path);
        }
    }

    fn resolve(&self, path: &[u8]) {
        let img = self.img;
        let _ = img.resolve(path, Follow::All);
        let _ = img.resolve(path, Follow::Parents);
        let _ = img.resolve(path, Follow::Never);
        let _ = img.lookup_path(path);
    }

    /// Everything about one inode but its directory entries.
    fn inode(&mut self, inode: &Inode, path: &[u8]) {
        let img = self.img;
        let _ = (
            inode.nid(),
            inode.iloc(),
            inode.is_extended(),
            inode.inode_isize(),
        );
        let _ = (
            inode.format(),
            inode.layout(),
            inode.mode(),
            inode.file_type(),
        );
        let _ = (inode.is_dir(), inode.is_symlink(), inode.is_file());
        let _ = (
            inode.uid(),
            inode.gid(),
            inode.nlink(),
            inode.size(),
            inode.mtime(),
        );
        let _ = (
            inode.ino32(),
            inode.xattr_icount(),
            inode.xattr_isize(),
            inode.rdev(),
        );
        let _ = (inode.startblk(), inode.chunkbits(), inode.chunkformat());
        let _ = (inode.data_offset(), inode.nblocks(), inode.stat());

        // Extended attributes: the list, each listed one, some absent ones, all at once.
        let _ = img.xattr_body(inode);
        if let Ok(names) = img.list_xattrs(inode) {
            for name in names.iter().take(100) {
                let _ = img.get_xattr(inode, name);
                // A name that shares a prefix with a real one.
                let mut other = name.clone();
                other.push(b'~');
                let _ = img.get_xattr(inode, &other);
            }
        }
        for name in ABSENT_XATTRS {
            let _ = img.get_xattr(inode, name);
        }
        let _ = img.get_xattr(inode, &[b'u'; 300]);
        let _ = img.xattrs(inode);

        // Symlinks (and the error for others).
        let _ = img.readlink(inode);

        // Data: mappings, then reads within the byte budget.
        let size = inode.size();
        for off in [0, size / 2, size.saturating_sub(1), size, u64::MAX] {
            let _ = img.map(inode, off);
        }
        let _ = img.map_range(inode, 0, 1 << 20);
        let _ = img.map_range(inode, size.saturating_sub(1 << 20), 1 << 20);
        let _ = img.map_range(inode, u64::MAX - 10, 100);
        self.read(inode, 0, MAX_READ);
        self.read(inode, size.saturating_sub(5000), 10_000);
        self.read(inode, (size / 2) | 1, 4097);
        let mut small = [0u8; 16];
        let _ = img.read(inode, u64::MAX - 3, &mut small);
        let _ = img.read(inode, size, &mut small);
        let _ = img.read(inode, 0, &mut []);

        // The path to it (lstat-like); every way of following for symlinks; through directories.
        if path != b"/" {
            let _ = img.resolve(path, Follow::Parents);
            if inode.is_symlink() {
                self.resolve(path);
            }
            if inode.is_dir() {
                let mut p = path.to_vec();
                p.extend_from_slice(b"/..");
                let _ = img.resolve(&p, Follow::All);
                p.truncate(path.len());
                p.extend_from_slice(b"/x");
                let _ = img.resolve(&p, Follow::All);
            }
        }
    }

    /// A bounded `read_vec`: at most `max` bytes, and nothing once the data budget is spent. The
    /// budget is charged what the read can return (the file's bytes from `offset`), not `max`, so
    /// small files never exhaust it.
    fn read(&mut self, inode: &Inode, offset: u64, max: usize) {
        let want = inode.size().saturating_sub(offset).min(max as u64);
        let n = want.min(self.bytes_left);
        if n == 0 && want > 0 {
            return;
        }
        self.bytes_left -= n;
        if let Ok(v) = self.img.read_vec(inode, offset, n as usize) {
            assert!(v.len() as u64 <= n, "read_vec returned more than asked");
        }
    }

    /// The entries of a directory: iteration (bounded), lookups of each name and of near misses;
    /// children are queued for the walk.
    fn dir(&mut self, dir: &Inode, path: &[u8], todo: &mut Vec<(u64, Vec<u8>)>) {
        let img = self.img;
        // The reader bounds a directory's entries by the image size, so collecting them all is fine.
        let _ = img.read_dir_all(dir);
        if let Ok(rd) = img.read_dir(dir) {
            for (index, entry) in rd.enumerate() {
                if self.entries_left == 0 {
                    break;
                }
                self.entries_left -= 1;
                let Ok(e) = entry else { break };
                let _ = e.file_type();
                let _ = img.lookup(dir, &e.name);
                // Near misses, for some entries (lookups dominate the walk's time).
                if index < 16 || index % 16 == 0 {
                    let mut other = e.name.clone();
                    other.push(b'x');
                    let _ = img.lookup(dir, &other);
                    if let Some((_, shorter)) = e.name.split_last() {
                        let _ = img.lookup(dir, shorter);
                    }
                }
                if e.name != b"." && e.name != b".." && !self.seen.contains(&e.nid) {
                    let mut child = path.to_vec();
                    if child.len() > 1 {
                        child.push(b'/');
                    }
                    child.extend_from_slice(&e.name);
                    todo.push((e.nid, child));
                }
            }
        }
        for name in [
            &b""[..],
            b".",
            b"..",
            b"zzzz",
            b"\0",
            b"\xff\xff",
            &[b'n'; 300],
        ] {
            let _ = img.lookup(dir, name);
        }
    }
}
