//! A persistent cache of verified image blocks: a directory shared by every command and mount that
//! reads the same image (a remote one, typically), bounded in size, safe against crashes.
//!
//! Layout: one directory per image digest (`sha256-<hex>/`), holding a `meta` file (what the seal
//! says: algorithm, block size, salt, lengths, root) and chunk files of [`CHUNK_BLOCKS`] blocks
//! each, `d<index>` for EROFS blocks and `t<index>` for Merkle tree blocks. A chunk file starts with
//! a 4 KiB header (magic, block size, a bitmap of the blocks present) followed by its blocks at
//! fixed places (sparse where absent).
//!
//! Blocks are shared across images by leaf hash (`leaves`): a store a reader reads through finds,
//! for a data block it lacks, the same block of another cached image with the same tree
//! parameters (hash algorithm, block size, salt) by the leaf its image's cached tree records for
//! it, and the reader uses it once it hashes to the leaf of its own verified tree (then keeps it in
//! its own image's chunks, like a fetched block). A lazy read of version N+1 thus takes the blocks
//! that did not change from version N's entries, without the network.
//!
//! Rules that make it safe:
//! - Only verified blocks are written (the reader's [`sealfs_reader::VerifiedBlocks`] calls
//!   [`BlockStore::put`] after the check), and everything read back is verified again before use; a
//!   block torn by a crash, or damaged on disk, fails that check, is forgotten
//!   ([`BlockStore::discard`]) and fetched again. So no fsync is needed and none is done.
//! - Writers of the same chunk (several processes) serialize on an advisory lock of the chunk file;
//!   readers take no lock.
//! - The size bound is kept by deleting whole chunk files, least recently used first (a chunk's
//!   modification time is its last use, refreshed at most once a minute per process). Pruning runs
//!   on a background thread when a write takes the cache past its bound; a reader that has a chunk
//!   open keeps reading it, one that opens it afterwards finds it gone and fetches.

mod leaves;

pub use leaves::CachedLeaf;
use leaves::LeafIndex;
use rustix::fs::FlockOperation;
use sealfs_reader::{BlockStore, Region, SealInfo, StoreProvider};
use sealfs_verity::Digest;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

/// Blocks per chunk file (256 KiB of 4 KiB blocks).
pub const CHUNK_BLOCKS: u64 = 64;
/// Bytes before a chunk's first block: magic, block size, bitmap.
const HEADER: u64 = 4096;
const MAGIC: &[u8; 8] = b"SEALFSC1";
/// A chunk's modification time is refreshed at most this often by one process.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// Default size bound: 2 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 2 << 30;

/// The usual cache directory: `$SEALFS_CACHE_DIR`, else `$XDG_CACHE_HOME/sealfs`, else
/// `~/.cache/sealfs`.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SEALFS_CACHE_DIR") {
        return d.into();
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return Path::new(&d).join("sealfs");
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    Path::new(&home).join(".cache/sealfs")
}

/// Bytes the cache takes, shared by its stores.
#[derive(Debug)]
struct Usage {
    bytes: AtomicU64,
    /// Bytes ever added ([`DiskCache::grew`]): what a prune's scan may have missed is what was
    /// added since it began.
    added: AtomicU64,
    pruning: AtomicBool,
}

/// A cache directory with a size bound; hands out one [`BlockStore`] per image.
#[derive(Clone, Debug)]
pub struct DiskCache {
    dir: PathBuf,
    max_bytes: u64,
    usage: Arc<Usage>,
}

/// What one image has in the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageUsage {
    /// The image digest (`sha256:<hex>`), from the directory name.
    pub digest: String,
    /// Chunk files.
    pub chunks: u64,
    /// Blocks present (data and tree).
    pub blocks: u64,
    /// Bytes on disk.
    pub bytes: u64,
}

/// What [`DiskCache::prune`] removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Chunk files deleted.
    pub chunks: u64,
    /// Bytes freed.
    pub bytes: u64,
    /// Bytes left.
    pub left: u64,
}

/// A chunk file found on disk.
struct ChunkFile {
    path: PathBuf,
    modified: SystemTime,
    bytes: u64,
}

impl DiskCache {
    /// The cache in `dir` (created if missing), kept under `max_bytes`. A relative `dir` is
    /// resolved against the working directory now, once: chunk files are opened for as long as
    /// the cache is used, and a mount daemon changes its working directory after opening.
    pub fn open(dir: impl Into<PathBuf>, max_bytes: u64) -> io::Result<DiskCache> {
        let dir = std::path::absolute(dir.into())?;
        std::fs::create_dir_all(&dir)?;
        let cache = DiskCache {
            dir,
            max_bytes,
            usage: Arc::new(Usage {
                bytes: AtomicU64::new(0),
                added: AtomicU64::new(0),
                pruning: AtomicBool::new(false),
            }),
        };
        let total = cache.chunk_files()?.iter().map(|c| c.bytes).sum();
        cache.usage.bytes.store(total, Relaxed);
        Ok(cache)
    }

    /// The directory (absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size bound in bytes.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The store of the image with `digest` whose blocks are `block_size` bytes (whether or not
    /// anything is cached for it yet).
    pub fn image(&self, digest: &Digest, block_size: usize) -> ImageStore {
        ImageStore {
            dir: self.dir.join(dir_name(digest)),
            bs: block_size as u64,
            cache: self.clone(),
            touched: Mutex::new(HashMap::new()),
            sharing: None,
        }
    }

    /// What every image has in the cache, and the total.
    pub fn usage(&self) -> io::Result<(Vec<ImageUsage>, u64)> {
        let mut images = Vec::new();
        let mut total = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Some(digest) = digest_of_dir(&entry.file_name().to_string_lossy()) else {
                continue;
            };
            let mut u = ImageUsage {
                digest,
                chunks: 0,
                blocks: 0,
                bytes: 0,
            };
            for c in std::fs::read_dir(entry.path())? {
                let c = c?;
                if !is_chunk_name(&c.file_name().to_string_lossy()) {
                    continue;
                }
                let Ok(f) = File::open(c.path()) else {
                    continue;
                };
                let md = f.metadata()?;
                u.chunks += 1;
                u.bytes += md.blocks() * 512;
                u.blocks += u64::from(read_header(&f).map_or(0, |(_, bits)| bits.count_ones()));
            }
            total += u.bytes;
            images.push(u);
        }
        images.sort_by(|a, b| a.digest.cmp(&b.digest));
        Ok((images, total))
    }

    /// Deletes chunk files, least recently used first, until the cache takes at most `target` bytes.
    pub fn prune(&self, target: u64) -> io::Result<Pruned> {
        let added_before = self.usage.added.load(Relaxed);
        let mut chunks = self.chunk_files()?;
        chunks.sort_by_key(|c| c.modified);
        let mut total: u64 = chunks.iter().map(|c| c.bytes).sum();
        let mut pruned = Pruned::default();
        for c in chunks {
            if total <= target {
                break;
            }
            match std::fs::remove_file(&c.path) {
                Ok(()) => {
                    total -= c.bytes;
                    pruned.chunks += 1;
                    pruned.bytes += c.bytes;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => total -= c.bytes,
                Err(e) => return Err(e),
            }
        }
        pruned.left = total;
        // Blocks written while the scan and the removals ran may be missing from `total`:
        // counted again (some perhaps twice, which only prunes a little early).
        let added_since = self.usage.added.load(Relaxed) - added_before;
        self.usage.bytes.store(total + added_since, Relaxed);
        Ok(pruned)
    }

    /// Every chunk file of every image.
    fn chunk_files(&self) -> io::Result<Vec<ChunkFile>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            if digest_of_dir(&entry.file_name().to_string_lossy()).is_none() {
                continue;
            }
            let Ok(dir) = std::fs::read_dir(entry.path()) else {
                continue;
            };
            for c in dir {
                let c = c?;
                if !is_chunk_name(&c.file_name().to_string_lossy()) {
                    continue;
                }
                let Ok(md) = c.metadata() else { continue };
                out.push(ChunkFile {
                    path: c.path(),
                    modified: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    bytes: md.blocks() * 512,
                });
            }
        }
        Ok(out)
    }

    /// Counts `bytes` more; past the bound, prunes to 90% of it on a background thread (one at a
    /// time), again while what was written during a prune leaves the cache over its bound.
    fn grew(&self, bytes: u64) {
        self.usage.added.fetch_add(bytes, Relaxed);
        let now = self.usage.bytes.fetch_add(bytes, Relaxed) + bytes;
        if now <= self.max_bytes || self.usage.pruning.swap(true, Relaxed) {
            return;
        }
        let cache = self.clone();
        std::thread::spawn(move || loop {
            let pruned = cache.prune(cache.max_bytes / 10 * 9);
            if pruned.is_ok() && cache.usage.bytes.load(Relaxed) > cache.max_bytes {
                continue;
            }
            cache.usage.pruning.store(false, Relaxed);
            // A write that came after the check and before the flag fell started no prune: this
            // thread goes on unless another took over.
            if pruned.is_err()
                || cache.usage.bytes.load(Relaxed) <= cache.max_bytes
                || cache.usage.pruning.swap(true, Relaxed)
            {
                break;
            }
        });
    }

    /// Waits until no background prune runs (for tests and commands that report usage).
    pub fn settle(&self) {
        while self.usage.pruning.load(Relaxed) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl StoreProvider for DiskCache {
    fn store_for(&self, digest: &Digest, seal: &SealInfo) -> Option<Arc<dyn BlockStore>> {
        let mut store = self.image(digest, seal.params.block_size());
        store.write_meta(digest, seal).ok()?;
        store.sharing = Some(Sharing {
            digest: *digest,
            params: seal.params,
            index: OnceLock::new(),
        });
        Some(Arc::new(store))
    }
}

/// `sha256-<hex>`.
fn dir_name(digest: &Digest) -> String {
    format!("{}-{}", digest.alg(), digest.to_hex())
}

/// `sha256:<hex>` from a directory name, if it is one.
fn digest_of_dir(name: &str) -> Option<String> {
    let (alg, hex) = name.split_once('-')?;
    let ok = matches!(alg, "sha256" | "sha512") && hex.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| format!("{alg}:{hex}"))
}

fn is_chunk_name(name: &str) -> bool {
    name.len() == 13
        && matches!(name.as_bytes()[0], b'd' | b't')
        && name[1..].bytes().all(|b| b.is_ascii_hexdigit())
}

/// A chunk's block size and bitmap, if its header is one.
fn read_header(f: &File) -> Option<(u32, u64)> {
    let mut h = [0u8; 24];
    f.read_exact_at(&mut h, 0).ok()?;
    if &h[..8] != MAGIC {
        return None;
    }
    let bs = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    let bits = u64::from_le_bytes(h[16..24].try_into().expect("8 bytes"));
    Some((bs, bits))
}

fn write_header(f: &File, bs: u32, bits: u64) -> io::Result<()> {
    let mut h = [0u8; 24];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&bs.to_le_bytes());
    h[16..24].copy_from_slice(&bits.to_le_bytes());
    f.write_all_at(&h, 0)
}

/// The bits of blocks `a..b` of a chunk.
fn mask(a: u64, b: u64) -> u64 {
    if b - a == 64 {
        u64::MAX
    } else {
        ((1u64 << (b - a)) - 1) << a
    }
}

/// Runs `(a, b)` of blocks in `at..at + count` of a chunk whose bit in `bits` is `set`.
fn bit_runs(bits: u64, at: u64, count: u64, set: bool) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for i in at..at + count {
        if (bits & (1 << i) != 0) != set {
            continue;
        }
        match out.last_mut() {
            Some((_, e)) if *e == i => *e = i + 1,
            _ => out.push((i, i + 1)),
        }
    }
    out
}

/// The cached blocks of one image.
#[derive(Debug)]
pub struct ImageStore {
    dir: PathBuf,
    /// Block size in bytes.
    bs: u64,
    cache: DiskCache,
    /// When this process last refreshed each chunk's modification time.
    touched: Mutex<HashMap<(Region, u64), Instant>>,
    /// For a store a reader reads through ([`StoreProvider::store_for`]): the blocks of other
    /// images it may take by leaf hash.
    sharing: Option<Sharing>,
}

/// What a store needs to take blocks of other images by leaf hash.
#[derive(Debug)]
struct Sharing {
    /// Its own image (left out of the index).
    digest: Digest,
    /// Its tree's parameters: only images made with the same ones share leaves.
    params: sealfs_verity::Params,
    /// Built on first use: the images cached then.
    index: OnceLock<Option<LeafIndex>>,
}

impl ImageStore {
    /// The index of other images' blocks by leaf, built on first use; `None` when there is none
    /// (no store to share, no other image with this image's tree parameters, or the cache
    /// directory could not be read).
    fn leaf_index(&self) -> Option<&LeafIndex> {
        let sharing = self.sharing.as_ref()?;
        sharing
            .index
            .get_or_init(|| {
                LeafIndex::build(&self.cache, &sharing.params, &sharing.digest)
                    .ok()
                    .filter(|i| !i.is_empty())
            })
            .as_ref()
    }
}

impl ImageStore {
    /// The directory of this image's chunks.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn chunk_path(&self, region: Region, chunk: u64) -> PathBuf {
        let tag = match region {
            Region::Data => 'd',
            Region::Tree => 't',
        };
        self.dir.join(format!("{tag}{chunk:012x}"))
    }

    /// Records what the seal says, once (for `sealfs cache` listings and checks).
    fn write_meta(&self, digest: &Digest, seal: &SealInfo) -> io::Result<()> {
        let path = self.dir.join("meta");
        if path.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.dir)?;
        let salt: String = seal
            .params
            .salt()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let text = format!(
            "digest {digest}\nhash_algorithm {}\nblock_size {}\nsalt {}\ndata_length {}\ntree_offset {}\nroot {}\n",
            seal.params.alg(),
            seal.params.block_size(),
            if salt.is_empty() { "-" } else { &salt },
            seal.data_length,
            seal.tree_offset,
            seal.root.to_hex(),
        );
        let tmp = self.dir.join(format!(".meta.{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(tmp, path)
    }

    /// Refreshes a chunk's modification time (its last use) unless this process did lately.
    fn touch(&self, region: Region, chunk: u64, f: &File) {
        let mut t = self.touched.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if t.get(&(region, chunk))
            .is_some_and(|&at| now - at < TOUCH_EVERY)
        {
            return;
        }
        t.insert((region, chunk), now);
        let _ = f.set_modified(SystemTime::now());
    }

    /// Splits blocks `first..first + n` into per-chunk pieces: (chunk, first index in it, count,
    /// offset of the piece in the caller's blocks).
    fn pieces(first: u64, n: u64) -> impl Iterator<Item = (u64, u64, u64, u64)> {
        let mut b = first;
        let end = first + n;
        std::iter::from_fn(move || {
            if b >= end {
                return None;
            }
            let chunk = b / CHUNK_BLOCKS;
            let at = b % CHUNK_BLOCKS;
            let count = (CHUNK_BLOCKS - at).min(end - b);
            let piece = (chunk, at, count, b - first);
            b += count;
            Some(piece)
        })
    }
}

impl BlockStore for ImageStore {
    fn get(&self, region: Region, first: u64, buf: &mut [u8]) -> Vec<bool> {
        let bs = self.bs;
        let n = buf.len() as u64 / bs;
        let mut hits = vec![false; n as usize];
        for (chunk, at, count, off) in Self::pieces(first, n) {
            let Ok(f) = File::open(self.chunk_path(region, chunk)) else {
                continue;
            };
            let Some((fbs, bits)) = read_header(&f) else {
                continue;
            };
            if u64::from(fbs) != bs {
                continue;
            }
            let mut any = false;
            // Each run of present blocks with one read.
            for (a, b) in bit_runs(bits, at, count, true) {
                let (k, n) = ((off + a - at) as usize, (b - a) as usize);
                let dst = &mut buf[k * bs as usize..(k + n) * bs as usize];
                if f.read_exact_at(dst, HEADER + a * bs).is_ok() {
                    hits[k..k + n].fill(true);
                    any = true;
                }
            }
            if any {
                self.touch(region, chunk, &f);
            }
        }
        hits
    }

    fn put(&self, region: Region, first: u64, bytes: &[u8]) {
        let _ = self.put_blocks(region, first, bytes, self.bs);
    }

    fn has(&self, region: Region, first: u64, count: u64) -> Vec<bool> {
        let mut out = vec![false; count as usize];
        for (chunk, at, n, off) in Self::pieces(first, count) {
            let Ok(f) = File::open(self.chunk_path(region, chunk)) else {
                continue;
            };
            let Some((fbs, bits)) = read_header(&f) else {
                continue;
            };
            if u64::from(fbs) != self.bs {
                continue;
            }
            for i in 0..n {
                out[(off + i) as usize] = bits & (1 << (at + i)) != 0;
            }
        }
        out
    }

    fn capacity(&self) -> Option<u64> {
        Some(self.cache.max_bytes)
    }

    fn shares_leaves(&self) -> bool {
        self.leaf_index().is_some()
    }

    fn get_by_leaf(&self, leaf: &[u8], out: &mut [u8]) -> bool {
        self.leaf_index().is_some_and(|i| i.get(leaf, out))
    }

    fn discard_leaf(&self, leaf: &[u8]) {
        if let Some(i) = self.leaf_index() {
            i.discard(leaf);
        }
    }

    fn discard(&self, region: Region, first: u64, count: u64) {
        for (chunk, at, n, _) in Self::pieces(first, count) {
            let Ok(f) = OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.chunk_path(region, chunk))
            else {
                continue;
            };
            if rustix::fs::flock(&f, FlockOperation::LockExclusive).is_err() {
                continue;
            }
            if let Some((bs, bits)) = read_header(&f) {
                let _ = write_header(&f, bs, bits & !mask(at, at + n));
            }
        }
    }
}

impl ImageStore {
    fn put_blocks(&self, region: Region, first: u64, bytes: &[u8], bs: u64) -> io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let n = bytes.len() as u64 / bs;
        let mut grown = 0;
        for (chunk, at, count, off) in Self::pieces(first, n) {
            let path = self.chunk_path(region, chunk);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(&path)?;
            rustix::fs::flock(&f, FlockOperation::LockExclusive)?;
            let before = f.metadata()?.blocks() * 512;
            let bits = match read_header(&f) {
                Some((fbs, bits)) if u64::from(fbs) == bs => bits,
                _ => 0,
            };
            let mut new_bits = bits;
            // Each run of absent blocks with one write.
            for (a, b) in bit_runs(bits, at, count, false) {
                let k = (off + a - at) as usize;
                f.write_all_at(
                    &bytes[k * bs as usize..(k + (b - a) as usize) * bs as usize],
                    HEADER + a * bs,
                )?;
                new_bits |= mask(a, b);
            }
            if new_bits != bits {
                // The blocks first, then the bits: a crash in between loses blocks, never claims
                // them; and a claimed block torn by a crash fails its check when read.
                write_header(&f, bs as u32, new_bits)?;
                grown += (f.metadata()?.blocks() * 512).saturating_sub(before);
            }
            drop(f);
        }
        if grown > 0 {
            self.cache.grew(grown);
        }
        Ok(())
    }
}

/// What [`DiskCache::verify`] found for one image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checked {
    /// The image digest.
    pub digest: String,
    /// Blocks (data and tree) that match the tree up to the root.
    pub verified: u64,
    /// Blocks that do not: forgotten.
    pub damaged: u64,
    /// Blocks whose path to the root is not cached, so they cannot be checked here (the reader
    /// checks them when it reads them).
    pub unverifiable: u64,
    /// Why the image could not be checked at all (no or bad `meta`).
    pub error: Option<String>,
}

/// The seal facts `meta` records.
struct Meta {
    digest: Digest,
    params: sealfs_verity::Params,
    data_length: u64,
    root: Digest,
}

fn read_meta(dir: &Path) -> Result<Meta, String> {
    let text = std::fs::read_to_string(dir.join("meta")).map_err(|e| format!("meta: {e}"))?;
    let get = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
            .ok_or_else(|| format!("meta: no {key}"))
    };
    let bad = |what: &str| format!("meta: bad {what}");
    let digest: Digest = get("digest")?.parse().map_err(|_| bad("digest"))?;
    let alg: sealfs_verity::HashAlg = get("hash_algorithm")?
        .parse()
        .map_err(|_| bad("hash_algorithm"))?;
    let bs: usize = get("block_size")?.parse().map_err(|_| bad("block_size"))?;
    let salt_hex = get("salt")?;
    let salt: Vec<u8> = if salt_hex == "-" {
        Vec::new()
    } else {
        (0..salt_hex.len() / 2)
            .map(|i| u8::from_str_radix(salt_hex.get(2 * i..2 * i + 2).unwrap_or("zz"), 16))
            .collect::<Result<_, _>>()
            .map_err(|_| bad("salt"))?
    };
    let params = sealfs_verity::Params::new(alg, bs, &salt).map_err(|_| bad("parameters"))?;
    let data_length = get("data_length")?
        .parse()
        .map_err(|_| bad("data_length"))?;
    let root = Digest::from_hex(alg, get("root")?).map_err(|_| bad("root"))?;
    Ok(Meta {
        digest,
        params,
        data_length,
        root,
    })
}

impl DiskCache {
    /// Checks every cached block of every image against its tree (tree blocks from the root down,
    /// data blocks against their level-0 entries); damaged ones are forgotten.
    pub fn verify(&self) -> io::Result<Vec<Checked>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let Some(digest) = digest_of_dir(&entry.file_name().to_string_lossy()) else {
                continue;
            };
            let mut c = Checked {
                digest,
                ..Checked::default()
            };
            match read_meta(&entry.path()) {
                Ok(meta) => self.verify_image(&meta, &mut c),
                Err(e) => c.error = Some(e),
            }
            out.push(c);
        }
        out.sort_by(|a, b| a.digest.cmp(&b.digest));
        Ok(out)
    }

    fn verify_image(&self, meta: &Meta, c: &mut Checked) {
        let g = sealfs_verity::TreeGeometry::new(&meta.params, meta.data_length);
        let hasher = sealfs_verity::BlockHasher::new(&meta.params);
        let bs = meta.params.block_size();
        let store = self.image(&meta.digest, bs);
        let mut known: HashMap<u64, Vec<u8>> = HashMap::new();
        let mut block = vec![0u8; bs];
        for level in (0..g.num_levels()).rev() {
            let start = g.level_start(level);
            for b in start..start + g.level_blocks(level) {
                if store.get(Region::Tree, b, &mut block).first() != Some(&true) {
                    continue;
                }
                let digest = hasher.hash_block(&block);
                let ok = if level + 1 == g.num_levels() {
                    Some(digest.as_bytes() == meta.root.as_bytes())
                } else {
                    let loc = g
                        .hash_location(level + 1, b - start)
                        .expect("parent inside the tree");
                    known
                        .get(&loc.block)
                        .map(|parent| g.stored_digest(parent, loc) == Some(digest.as_bytes()))
                };
                match ok {
                    Some(true) => {
                        c.verified += 1;
                        known.insert(b, block.clone());
                    }
                    Some(false) => {
                        c.damaged += 1;
                        store.discard(Region::Tree, b, 1);
                    }
                    None => c.unverifiable += 1,
                }
            }
        }
        let whole = meta.data_length / bs as u64;
        let mut chunk = vec![0u8; CHUNK_BLOCKS as usize * bs];
        for first in (0..whole).step_by(CHUNK_BLOCKS as usize) {
            let n = (whole - first).min(CHUNK_BLOCKS) as usize;
            let hits = store.get(Region::Data, first, &mut chunk[..n * bs]);
            for (k, hit) in hits.iter().enumerate() {
                if !hit {
                    continue;
                }
                let b = first + k as u64;
                let digest = hasher.hash_block(&chunk[k * bs..(k + 1) * bs]);
                let want = if g.num_levels() == 0 {
                    Some(meta.root.as_bytes())
                } else {
                    let loc = g.hash_location(0, b).expect("data block inside the tree");
                    known
                        .get(&loc.block)
                        .and_then(|hb| g.stored_digest(hb, loc))
                };
                match want {
                    Some(w) if w == digest.as_bytes() => c.verified += 1,
                    Some(_) => {
                        c.damaged += 1;
                        store.discard(Region::Data, b, 1);
                    }
                    None => c.unverifiable += 1,
                }
            }
        }
    }
}
