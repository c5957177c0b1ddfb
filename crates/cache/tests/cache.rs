//! The persistent cache against its promises, through the reader's public open: what is cached
//! reads back with the network gone; a damaged or torn cached block is caught, forgotten and fetched
//! again, never returned; a damaged response never enters the cache; the size bound holds under a
//! workload larger than it; the rest of the image is fetched on its own once reads scatter over it,
//! and only then. The expected bytes are the source files and the image file as written.

use sealfs_cache::DiskCache;
use sealfs_reader::{open, FillMode, FillState, Follow, OpenOptions, ReadAt, Source};
use sealfs_testsupport::rng::Rng;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The image bytes, as a remote object would serve them: counts requests; "offline" fails every
/// read outside the last 64 KiB (the seal trailer, which the open reads first); one offset can be
/// served damaged.
struct Remote {
    bytes: Vec<u8>,
    offline: AtomicBool,
    damage_at: AtomicU64,
    /// Ranges read.
    requests: AtomicU64,
    /// Bytes read.
    bytes_read: AtomicU64,
    /// Batches (one round trip each, for a remote source that sends a batch's ranges at once).
    batches: AtomicU64,
}

impl Remote {
    fn new(bytes: Vec<u8>) -> Arc<Remote> {
        Arc::new(Remote {
            bytes,
            offline: AtomicBool::new(false),
            damage_at: AtomicU64::new(u64::MAX),
            requests: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            batches: AtomicU64::new(0),
        })
    }
}

impl ReadAt for Remote {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
        let tail = self.bytes.len() as u64 - 65536;
        if self.offline.load(Relaxed) && offset + buf.len() as u64 <= tail {
            return Err(std::io::Error::other("offline"));
        }
        self.requests.fetch_add(1, Relaxed);
        let n = self.bytes.as_slice().read_at(buf, offset)?;
        self.bytes_read.fetch_add(n as u64, Relaxed);
        let d = self.damage_at.load(Relaxed);
        if (offset..offset + n as u64).contains(&d) {
            buf[(d - offset) as usize] ^= 0x20;
        }
        Ok(n)
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> std::io::Result<()> {
        self.batches.fetch_add(1, Relaxed);
        for (offset, buf) in reqs.iter_mut() {
            self.read_exact_at(buf, *offset)?;
        }
        Ok(())
    }
}

/// A tree of 48 files of 8-96 KiB and one of 3 MiB, random content; returns (name, bytes).
fn make_tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng::new(7);
    let mut files = Vec::new();
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..48 {
        let len = 8192 + (rng.below(88) as usize) * 1024;
        files.push((format!("f{i:02}"), rng.bytes(len)));
    }
    files.push(("big".to_string(), rng.bytes(3 << 20)));
    for (name, bytes) in &files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    files
}

/// Files by name.
type Files = Vec<(String, Vec<u8>)>;

fn build(dir: &Path) -> (Files, Vec<u8>, sealfs_verity::Digest) {
    let files = make_tree(&dir.join("src"));
    let img = dir.join("image");
    let summary = sealfs_builder::build(
        &dir.join("src"),
        &img,
        &sealfs_builder::BuildOptions::default(),
        &sealfs_builder::NoProgress,
    )
    .unwrap();
    (
        files,
        std::fs::read(&img).unwrap(),
        summary.seal.unwrap().digest,
    )
}

fn options(cache: &DiskCache, digest: sealfs_verity::Digest) -> OpenOptions {
    let mut o = OpenOptions::new().digest(digest);
    o.store = Some(Arc::new(cache.clone()));
    // Small in-memory caches, so that rereads go to the store.
    o.cache_blocks = 8;
    o.cluster_cache_bytes = 0;
    o.hash_cache_blocks = 8;
    o
}

/// Reads every file through a fresh open; returns the files that failed or differ.
fn read_all(remote: &Arc<Remote>, opts: &OpenOptions, files: &[(String, Vec<u8>)]) -> Vec<String> {
    read_all_counting(remote, opts, files).0
}

/// Every block the cache claims holds the image's bytes at that place (data blocks from offset 0,
/// tree blocks from the tree offset).
fn cache_holds_only_image_bytes(cache: &Path, image: &[u8], tree_offset: u64) -> usize {
    let mut checked = 0;
    for img_dir in std::fs::read_dir(cache).unwrap() {
        let img_dir = img_dir.unwrap().path();
        for chunk in std::fs::read_dir(&img_dir).unwrap() {
            let path = chunk.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            let base = match name.as_bytes()[0] {
                b'd' => 0,
                b't' => tree_offset,
                _ => continue,
            };
            let index = u64::from_str_radix(&name[1..], 16).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            if bytes.len() < 24 {
                continue; // being created by a background fetch: claims nothing yet
            }
            let bits = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
            for i in 0..64u64 {
                if bits & (1 << i) == 0 {
                    continue;
                }
                let at = (4096 + i * 4096) as usize;
                let off = (base + (index * 64 + i) * 4096) as usize;
                assert_eq!(
                    &bytes[at..at + 4096],
                    &image[off..off + 4096],
                    "{name} block {i} is not the image's block at {off}"
                );
                checked += 1;
            }
        }
    }
    checked
}

fn tree_offset(image: &[u8]) -> u64 {
    let opened = open(
        Source::reader(Arc::new(image.to_vec()), "image"),
        &OpenOptions::new(),
    )
    .unwrap();
    opened.seal.unwrap().header.tree_offset.get()
}

#[test]
fn cached_image_reads_offline_and_damage_is_refetched_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let (files, image, digest) = build(dir.path());
    let cache = DiskCache::open(dir.path().join("cache"), 1 << 30).unwrap();
    let opts = options(&cache, digest);
    let remote = Remote::new(image.clone());

    // Cold: everything fetched and verified, and kept.
    assert_eq!(read_all(&remote, &opts, &files), Vec::<String>::new());
    let cold = remote.requests.swap(0, Relaxed);
    let blocks = cache_holds_only_image_bytes(cache.dir(), &image, tree_offset(&image));
    println!("cold read: {cold} requests, {blocks} blocks cached");
    assert!(blocks * 4096 >= files.iter().map(|f| f.1.len()).sum::<usize>());

    // Offline: the same reads come from the cache alone (only the seal trailer is read remotely).
    remote.offline.store(true, Relaxed);
    assert_eq!(read_all(&remote, &opts, &files), Vec::<String>::new());
    println!(
        "offline reread: {} requests (trailer only)",
        remote.requests.load(Relaxed)
    );

    // A cached block damaged on disk (as a torn write would leave it): offline, the read that needs
    // it fails its check, the others still read; online, it is forgotten and fetched again.
    let big_at = image
        .windows(64)
        .position(|w| w == &files.last().unwrap().1[1 << 20..(1 << 20) + 64])
        .unwrap() as u64;
    let chunk = dir
        .path()
        .join("cache")
        .join(format!("{}-{}", digest.alg(), digest.to_hex()))
        .join(format!("d{:012x}", big_at / 4096 / 64));
    let mut bytes = std::fs::read(&chunk).unwrap();
    let pos = 4096 + ((big_at / 4096) % 64) as usize * 4096 + (big_at % 4096) as usize + 5;
    bytes[pos] ^= 0xff;
    std::fs::write(&chunk, &bytes).unwrap();
    let bad = read_all(&remote, &opts, &files);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("big: ") && !bad[0].contains("WRONG"),
        "{bad:?}"
    );
    remote.offline.store(false, Relaxed);
    assert_eq!(read_all(&remote, &opts, &files), Vec::<String>::new());
    cache_holds_only_image_bytes(cache.dir(), &image, tree_offset(&image));

    // `verify` finds a damaged block without a read needing it, and forgets it.
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[pos + 4096] ^= 0x01;
    std::fs::write(&chunk, &bytes).unwrap();
    let checked = cache.verify().unwrap();
    println!("verify: {checked:?}");
    assert_eq!(checked.len(), 1);
    assert_eq!((checked[0].damaged, checked[0].unverifiable), (1, 0));
    assert_eq!(checked[0].verified as usize, blocks - 1);
    cache_holds_only_image_bytes(cache.dir(), &image, tree_offset(&image));

    // A damaged response (one flipped byte in big, fresh cache): that read fails, nothing of it is
    // cached, the other files read; once the network is healthy again it reads.
    let cache2 = DiskCache::open(dir.path().join("cache2"), 1 << 30).unwrap();
    let opts2 = options(&cache2, digest);
    remote.damage_at.store(big_at + 777, Relaxed);
    let bad = read_all(&remote, &opts2, &files);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(bad[0].starts_with("big: ") && !bad[0].contains("WRONG"));
    cache_holds_only_image_bytes(cache2.dir(), &image, tree_offset(&image));
    remote.damage_at.store(u64::MAX, Relaxed);
    assert_eq!(read_all(&remote, &opts2, &files), Vec::<String>::new());
}

#[test]
fn the_size_bound_holds_under_a_larger_workload() {
    let dir = tempfile::tempdir().unwrap();
    let (files, image, digest) = build(dir.path());
    let bound = 1 << 20; // the image is about 7 MiB
    let cache = DiskCache::open(dir.path().join("cache"), bound).unwrap();
    let mut opts = options(&cache, digest);
    // No background fetching, so that nothing is still being added when the bound is checked.
    opts.readahead_blocks = (0, 0);
    let remote = Remote::new(image.clone());
    for _ in 0..2 {
        assert_eq!(read_all(&remote, &opts, &files), Vec::<String>::new());
    }
    cache.settle();
    let (images, total) = cache.usage().unwrap();
    println!(
        "after two passes over a {} byte image: {total} bytes cached ({images:?})",
        image.len()
    );
    assert!(total <= bound, "{total} bytes cached, bound {bound}");
    assert!(total > 0, "nothing cached");
    cache_holds_only_image_bytes(cache.dir(), &image, tree_offset(&image));
    // Pruning to zero empties it; reads still work.
    let pruned = cache.prune(0).unwrap();
    assert_eq!(pruned.left, 0);
    assert_eq!(read_all(&remote, &opts, &files), Vec::<String>::new());
}

/// Round trips (batches) and ranges a cold pass makes: `stat` of 2,000 small files, then a 4 MiB
/// file read in 128 KiB pieces (as a FUSE mount reads), with the given readahead.
fn cold_requests(readahead: (u64, u64)) -> [(u64, u64); 2] {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("many")).unwrap();
    let mut rng = Rng::new(3);
    for i in 0..2000 {
        std::fs::write(src.join(format!("many/file{i:04}")), rng.bytes(20)).unwrap();
    }
    let big = rng.bytes(4 << 20);
    std::fs::write(src.join("big"), &big).unwrap();
    let img = dir.path().join("image");
    let summary = sealfs_builder::build(
        &src,
        &img,
        &sealfs_builder::BuildOptions::default(),
        &sealfs_builder::NoProgress,
    )
    .unwrap();
    let remote = Remote::new(std::fs::read(&img).unwrap());
    let cache = DiskCache::open(dir.path().join("cache"), 1 << 30).unwrap();
    let mut opts = options(&cache, summary.seal.unwrap().digest);
    opts.readahead_blocks = readahead;
    let opened = open(Source::reader(remote.clone(), "remote"), &opts).unwrap();
    let image = &opened.image;
    let take = || {
        (
            remote.batches.swap(0, Relaxed),
            remote.requests.swap(0, Relaxed),
        )
    };
    take();
    for i in 0..2000 {
        let ino = image
            .resolve(format!("/many/file{i:04}"), Follow::All)
            .unwrap();
        assert_eq!(ino.size(), 20);
    }
    let stat = take();
    let ino = image.resolve("/big", Follow::All).unwrap();
    let mut buf = vec![0u8; 128 << 10];
    for k in 0..32u64 {
        let n = image.read(&ino, k * (128 << 10), &mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            &big[(k as usize) << 17..((k as usize + 1) << 17)]
        );
    }
    [stat, take()]
}

#[test]
fn misses_fetch_neighbours_and_sequential_reads_are_fetched_ahead() {
    let off = cold_requests((0, 0));
    let on = cold_requests((16, 512));
    println!(
        "(round trips, ranges) for stat of 2000 files, then 4 MiB sequential: readahead off {off:?}, on {on:?}"
    );
    assert!(
        on[0].0 * 3 <= off[0].0,
        "stat: {on:?} with readahead, {off:?} without"
    );
    assert!(
        on[1].0 * 3 <= off[1].0,
        "sequential: {on:?} with readahead, {off:?} without"
    );
}

/// Waits until the background fetchers of `opened` have been idle for a while.
fn quiesce(opened: &sealfs_reader::OpenedImage) {
    let vb = opened.verified.as_ref().unwrap();
    let mut last = u64::MAX;
    loop {
        std::thread::sleep(std::time::Duration::from_millis(300));
        let now = vb.stats().readahead_blocks.load(Relaxed);
        if now == last {
            return;
        }
        last = now;
    }
}

#[test]
fn prefetched_files_and_a_replayed_profile_read_offline() {
    let dir = tempfile::tempdir().unwrap();
    let (files, image, digest) = build(dir.path());
    let remote = Remote::new(image.clone());

    // Every file hinted: fetched ahead, verified, stored; then readable with the network gone.
    let cache = DiskCache::open(dir.path().join("cache"), 1 << 30).unwrap();
    let opts = options(&cache, digest);
    let opened = open(Source::reader(remote.clone(), "remote"), &opts).unwrap();
    let inodes: Vec<_> = files
        .iter()
        .map(|(n, _)| opened.image.resolve(format!("/{n}"), Follow::All).unwrap())
        .collect();
    opened.image.prefetch_files(&inodes);
    quiesce(&opened);
    drop(opened);
    remote.offline.store(true, Relaxed);
    assert_eq!(read_all(&remote, &opts, &files), Vec::<String>::new());
    cache_holds_only_image_bytes(cache.dir(), &image, tree_offset(&image));
    remote.offline.store(false, Relaxed);

    // A profile recorded while reading ten files, replayed into a fresh cache: those ten read
    // offline, the big file (not in the profile) does not.
    let cache_a = DiskCache::open(dir.path().join("a"), 1 << 30).unwrap();
    let opened = open(
        Source::reader(remote.clone(), "remote"),
        &options(&cache_a, digest),
    )
    .unwrap();
    opened.verified.as_ref().unwrap().record_profile();
    for (name, want) in &files[..10] {
        let ino = opened
            .image
            .resolve(format!("/{name}"), Follow::All)
            .unwrap();
        assert_eq!(&opened.image.read_vec(&ino, 0, want.len()).unwrap(), want);
    }
    let profile = opened.verified.as_ref().unwrap().profile();
    assert!(!profile.is_empty());
    drop(opened);
    let cache_b = DiskCache::open(dir.path().join("b"), 1 << 30).unwrap();
    let opts_b = options(&cache_b, digest);
    let opened = open(Source::reader(remote.clone(), "remote"), &opts_b).unwrap();
    opened.image.prefetch(&profile);
    quiesce(&opened);
    drop(opened);
    remote.offline.store(true, Relaxed);
    let bad = read_all(&remote, &opts_b, &files);
    println!(
        "offline after replaying a {}-range profile: {bad:?}",
        profile.len()
    );
    assert!(bad.iter().all(|b| !b.contains("WRONG")), "{bad:?}");
    for (name, _) in &files[..10] {
        assert!(
            !bad.iter().any(|b| b.starts_with(&format!("{name}:"))),
            "{name} was in the profile but does not read offline: {bad:?}"
        );
    }
    assert!(bad.iter().any(|b| b.starts_with("big:")), "{bad:?}");
}

/// Waits (up to a minute) until the fill of `opened` is no longer running; returns its state.
fn fill_settled(opened: &sealfs_reader::OpenedImage) -> FillState {
    let vb = opened.verified.as_ref().unwrap();
    for _ in 0..600 {
        if vb.fill_state() != FillState::Running {
            quiesce(opened);
            return vb.fill_state();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the fill still runs after a minute");
}

/// Reads the files at `order` (indexes into `files`) whole through `opened`, checking their bytes.
fn read_files(opened: &sealfs_reader::OpenedImage, files: &Files, order: &[usize]) {
    for &i in order {
        let (name, want) = &files[i];
        let ino = opened
            .image
            .resolve(format!("/{name}"), Follow::All)
            .unwrap();
        assert!(
            &opened.image.read_vec(&ino, 0, want.len() + 1).unwrap() == want,
            "{name}"
        );
    }
}

/// [`FillMode::Auto`] (the default): reads that scatter (each fetching data and continuing no
/// stream: every third small file, from the last) start the fill after 16 of them, and it brings
/// the whole image, which then reads with the network gone; one sequential stream over the
/// largest file never starts it, nor do the scattered reads when the image takes more than three
/// quarters of the cache's bound, nor with [`FillMode::Off`]. Bytes fetched are counted at the
/// source.
#[test]
fn the_image_is_filled_once_reads_scatter_over_it_and_only_then() {
    let dir = tempfile::tempdir().unwrap();
    let (files, image, digest) = build(dir.path());
    let remote = Remote::new(image.clone());
    let scattered: Vec<usize> = (0..48).rev().step_by(3).collect();
    assert_eq!(scattered.len(), 16);
    let open_with = |name: &str, bound: u64, fill: FillMode| {
        let cache = DiskCache::open(dir.path().join(name), bound).unwrap();
        let mut opts = options(&cache, digest);
        opts.fill = fill;
        // Streams fetch at most 1 MiB ahead (not 64 MiB: past this small image's end).
        opts.readahead_blocks = (16, 256);
        let opened = open(Source::reader(remote.clone(), "remote"), &opts).unwrap();
        remote.bytes_read.store(0, Relaxed);
        (opened, opts)
    };
    let big = files.len() - 1;
    assert_eq!(files[big].0, "big");

    // One stream over the 3 MiB file, read 128 KiB at a time: no fill.
    let (opened, _) = open_with("stream", 1 << 30, FillMode::Auto);
    let vb = opened.verified.clone().unwrap();
    assert_eq!(vb.fill_state(), FillState::Armed);
    let ino = opened.image.resolve("/big", Follow::All).unwrap();
    let mut buf = vec![0u8; 128 << 10];
    let mut at = 0;
    while at < files[big].1.len() {
        let n = opened.image.read(&ino, at as u64, &mut buf).unwrap();
        assert!(buf[..n] == files[big].1[at..at + n]);
        at += n;
    }
    quiesce(&opened);
    let fetched = remote.bytes_read.load(Relaxed);
    println!(
        "one stream over 3 MiB: {fetched} bytes fetched of a {}-byte image",
        image.len()
    );
    assert_eq!(vb.fill_state(), FillState::Armed);
    assert!(fetched < (3 << 20) + (1 << 20), "{fetched}");
    drop(opened);

    // Scattered reads: 15 leave the fill armed, the 16th starts it; the rest of the image comes.
    let (opened, opts) = open_with("scattered", 1 << 30, FillMode::Auto);
    let vb = opened.verified.clone().unwrap();
    read_files(&opened, &files, &scattered[..15]);
    assert_eq!(vb.fill_state(), FillState::Armed);
    read_files(&opened, &files, &scattered[15..]);
    assert_eq!(fill_settled(&opened), FillState::Done);
    let fetched = remote.bytes_read.load(Relaxed);
    println!("16 scattered reads: {fetched} bytes fetched");
    assert!(fetched >= image.len() as u64 * 9 / 10, "{fetched}");
    drop(opened);
    remote.offline.store(true, Relaxed);
    assert_eq!(read_all(&remote, &opts, &files), Vec::<String>::new());
    remote.offline.store(false, Relaxed);

    // An image over three quarters of the bound, or the fill off: the same reads fetch only what
    // they read.
    for (name, bound, fill, state) in [
        (
            "bound",
            image.len() as u64 * 4 / 3 - 4096,
            FillMode::Auto,
            FillState::TooLarge,
        ),
        ("off", 1 << 30, FillMode::Off, FillState::Off),
    ] {
        let (opened, _) = open_with(name, bound, fill);
        read_files(&opened, &files, &scattered);
        quiesce(&opened);
        let fetched = remote.bytes_read.load(Relaxed);
        let read: usize = scattered.iter().map(|&i| files[i].1.len()).sum();
        println!("{name}: {fetched} bytes fetched for {read} read");
        assert_eq!(
            opened.verified.as_ref().unwrap().fill_state(),
            state,
            "{name}"
        );
        assert!(fetched < read as u64 * 3, "{name}: {fetched}");
    }
}

/// Reads every file through a fresh open; returns the files that failed or differ, and the open's
/// (leaf_hits, leaf_discards).
fn read_all_counting(
    remote: &Arc<Remote>,
    opts: &OpenOptions,
    files: &[(String, Vec<u8>)],
) -> (Vec<String>, u64, u64) {
    let opened = match open(Source::reader(remote.clone(), "remote"), opts) {
        Ok(o) => o,
        Err(e) => return (vec![format!("open: {e}")], 0, 0),
    };
    let mut bad = Vec::new();
    for (name, want) in files {
        let got = opened
            .image
            .resolve(format!("/{name}"), Follow::All)
            .and_then(|ino| opened.image.read_vec(&ino, 0, want.len() + 1));
        match got {
            Ok(got) if &got == want => {}
            Ok(_) => bad.push(format!("{name}: WRONG BYTES")),
            Err(e) => bad.push(format!("{name}: {e}")),
        }
    }
    let v = opened.verified.as_ref().unwrap().stats();
    (
        bad,
        v.leaf_hits.load(Relaxed),
        v.leaf_discards.load(Relaxed),
    )
}

/// Two versions of a tree whose images differ only in one block of `big` (edited in place, its
/// modification time kept) and the digest table's block holding its digest: with v1 read into the
/// cache, v2 reads offline from v1's entries but for big (which fails, none returns wrong bytes),
/// and online fetches those blocks and no other data; a shared entry of v1 damaged on disk is never used (offline, the file that needs it
/// fails; online, it reads, the block fetched instead, counted as a leaf discard). An image of
/// the same tree with another salt shares nothing (every file's bytes fetched).
#[test]
fn a_damaged_shared_entry_is_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("src");
    let mut files = make_tree(&src);
    let build_to = |name: &str, salt: Option<&str>| -> (Vec<u8>, sealfs_verity::Digest) {
        let img = d.join(name);
        let mut o = sealfs_builder::BuildOptions::default();
        if let (Some(s), Some(seal)) = (salt, o.seal.as_mut()) {
            seal.params =
                sealfs_verity::Params::new(sealfs_verity::HashAlg::Sha256, 4096, s.as_bytes())
                    .unwrap();
        }
        let summary = sealfs_builder::build(&src, &img, &o, &sealfs_builder::NoProgress).unwrap();
        (std::fs::read(&img).unwrap(), summary.seal.unwrap().digest)
    };
    let (image1, digest1) = build_to("v1", None);
    let v1_files = files.clone();
    // v2: 100 bytes of big changed in place, its modification time kept.
    let big = src.join("big");
    let mtime = std::fs::metadata(&big).unwrap().modified().unwrap();
    let last = files.len() - 1;
    files[last].1[2_000_000..2_000_100].fill(0x5a);
    std::fs::write(&big, &files[last].1).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&big)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let (image2, digest2) = build_to("v2", None);
    let differing: Vec<usize> = image1
        .chunks(4096)
        .zip(image2.chunks(4096))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(k, _)| k)
        .collect();
    let tree2 = tree_offset(&image2) as usize;
    let changed: Vec<usize> = differing
        .iter()
        .copied()
        .filter(|&k| k * 4096 < tree2)
        .collect();
    // The block of big, and the one of the per-file digest table holding big's digest.
    assert_eq!(changed.len(), 2, "EROFS blocks that differ: {changed:?}");

    let cache = DiskCache::open(d.join("cache"), 1 << 30).unwrap();
    let remote1 = Remote::new(image1.clone());
    let (bad, _, _) = read_all_counting(&remote1, &options(&cache, digest1), &v1_files);
    assert_eq!(bad, Vec::<String>::new());
    let tampered = d.join("cache-tampered");
    assert!(std::process::Command::new("cp")
        .arg("-a")
        .arg(d.join("cache"))
        .arg(&tampered)
        .status()
        .unwrap()
        .success());

    // Offline: everything but big from v1's entries.
    let remote2 = Remote::new(image2.clone());
    let opts2 = options(&cache, digest2);
    remote2.offline.store(true, Relaxed);
    let (bad, hits, discards) = read_all_counting(&remote2, &opts2, &files);
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert!(
        bad[0].starts_with("big: ") && !bad[0].contains("WRONG"),
        "{bad:?}"
    );
    assert!(hits > 0 && discards == 0, "{hits} {discards}");
    // Online: the changed block, its hash blocks and nothing else of the data.
    remote2.offline.store(false, Relaxed);
    remote2.bytes_read.store(0, Relaxed);
    let (bad, _, _) = read_all_counting(&remote2, &opts2, &files);
    assert_eq!(bad, Vec::<String>::new());
    let seal = (image2.len() - tree2) as u64;
    let fetched = remote2.bytes_read.load(Relaxed);
    println!(
        "v2 through v1's entries: {hits} blocks shared, {fetched} bytes fetched (seal {seal})"
    );
    assert!(
        fetched <= 2 * 4096 + seal + 65536,
        "{fetched} bytes fetched"
    );

    // A shared entry of v1 damaged on disk: the file f05's first block.
    let f05 = &files[5].1;
    let at = image1
        .chunks(4096)
        .position(|b| b == &f05[..4096])
        .expect("f05's first block in v1") as u64;
    let chunk = tampered
        .join(format!("{}-{}", digest1.alg(), digest1.to_hex()))
        .join(format!("d{:012x}", at / 64));
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[4096 + (at % 64) as usize * 4096 + 9] ^= 0x04;
    std::fs::write(&chunk, &bytes).unwrap();
    let cache_t = DiskCache::open(&tampered, 1 << 30).unwrap();
    let remote2 = Remote::new(image2.clone());
    remote2.offline.store(true, Relaxed);
    let (bad, _, discards) = read_all_counting(&remote2, &options(&cache_t, digest2), &files);
    assert!(
        bad.iter().any(|b| b.starts_with("f05: ")) && bad.iter().all(|b| !b.contains("WRONG")),
        "{bad:?}"
    );
    assert!(discards >= 1);
    remote2.offline.store(false, Relaxed);
    let (bad, _, _) = read_all_counting(&remote2, &options(&cache_t, digest2), &files);
    assert_eq!(bad, Vec::<String>::new());

    // Another salt: nothing shared (every data block fetched).
    let (image3, digest3) = build_to("v3", Some("another salt"));
    let remote3 = Remote::new(image3);
    let (bad, hits, _) = read_all_counting(&remote3, &options(&cache, digest3), &files);
    assert_eq!(bad, Vec::<String>::new());
    assert_eq!(hits, 0);
    let sizes: usize = files.iter().map(|f| f.1.len()).sum();
    assert!(remote3.bytes_read.load(Relaxed) as usize >= sizes);
}
