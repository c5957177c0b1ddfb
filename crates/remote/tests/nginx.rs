//! A remote image served by a real nginx on loopback, read through `sealfs_remote::RemoteObject`:
//! what opening and a cold read of a large file cost in requests (counted in nginx's access log and
//! in the object's counters), and a read after the object was replaced by another image fails with
//! the ETag error instead of returning its bytes.

use sealfs_reader::{open, Follow, OpenOptions, Source};
use sealfs_remote::{open_cached, CacheSettings, RemoteObject, RemoteOptions, RemoteTrust};
use sealfs_testsupport::build::{build_image, BuildOptions};
use sealfs_testsupport::servers::{nginx, Server};
use sealfs_testsupport::{oracle_guard, pseudo_random};
use std::fs;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

const BIG: usize = 8 << 20;

/// A tree with an 8 MiB file of random bytes and two small ones, built into `out`.
fn image(dir: &Path, out: &Path, seed: u64) {
    let src = dir.join(format!("src{seed}"));
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("big"), pseudo_random(BIG, seed)).unwrap();
    fs::write(src.join("d/small"), format!("small {seed}\n")).unwrap();
    // Images of different seeds differ in size, so nginx gives them different ETags.
    fs::write(src.join("pad"), vec![b'p'; seed as usize * 10000]).unwrap();
    build_image(&src, out, &BuildOptions::default()).unwrap();
}

fn digest(path: &Path) -> sealfs_verity::Digest {
    open(path, &OpenOptions::new())
        .unwrap()
        .trust
        .digest()
        .copied()
        .unwrap()
}

/// Starts nginx over `dir/www`, with one image `img` in it; `None` (after SKIP) without nginx.
fn serve(dir: &Path) -> Option<Server> {
    let www = dir.join("www");
    fs::create_dir_all(&www).unwrap();
    image(dir, &www.join("img"), 1);
    match nginx(&www, &dir.join("nginx")) {
        Ok(s) => Some(s),
        Err(e) => {
            oracle_guard(Err(e));
            None
        }
    }
}

/// Requests of the access log after the first `skip`, as (first byte, last byte) of their range.
fn ranges(server: &Server, skip: usize) -> Vec<(u64, u64)> {
    server
        .requests()
        .iter()
        .skip(skip)
        .map(|line| {
            // METHOD URI RANGE STATUS BYTES, RANGE as bytes=A-B.
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f[0], "GET", "{line}");
            assert_eq!(f[3], "206", "{line}");
            let (a, b) = f[2]
                .strip_prefix("bytes=")
                .and_then(|r| r.split_once('-'))
                .unwrap_or_else(|| panic!("a bounded range: {line}"));
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

#[test]
fn opening_takes_two_round_trips_and_hash_blocks_travel_with_the_data() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(server) = serve(tmp.path()) else {
        return;
    };
    let local = tmp.path().join("www/img");
    let expected = digest(&local);
    let remote = Arc::new(RemoteObject::open(&server.url("img")).unwrap());
    let source = Source::reader(remote.clone(), server.url("img"));
    let opened = open(source, &OpenOptions::new().digest(expected)).unwrap();
    assert!(opened.trust.is_authenticated());
    let stats = remote.stats();
    let open_requests = stats.requests.load(Relaxed);
    let open_round_trips = stats.round_trips.load(Relaxed);
    let log = server.requests_at_least(open_requests as usize);
    println!("open: {open_requests} requests in {open_round_trips} round trips: {log:?}");
    assert!(
        log[0].contains("bytes=-65536"),
        "the seal from a suffix range: {log:?}"
    );
    assert!(open_round_trips <= 2, "open takes at most two round trips");
    assert_eq!(log.len() as u64, open_requests);

    // A cold read of the 8 MiB file, 1 MiB at a time (as `sealfs cat` reads).
    let erofs_length = opened.erofs_length;
    let image = &opened.image;
    let verified = opened.verified.as_ref().unwrap().stats();
    let (batches0, vbatches0) = (
        stats.round_trips.load(Relaxed),
        verified.batches.load(Relaxed),
    );
    let inode = image.resolve("/big", Follow::All).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = image.read(&inode, got.len() as u64, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got == pseudo_random(BIG, 1), "the file's bytes");
    server.requests_at_least(stats.requests.load(Relaxed) as usize);
    let requests = ranges(&server, log.len());
    let data = requests.iter().filter(|r| r.0 < erofs_length).count();
    let tree = requests.len() - data;
    let batches = stats.round_trips.load(Relaxed) - batches0;
    let verified_batches = verified.batches.load(Relaxed) - vbatches0;
    println!(
        "cold read of 8 MiB: {} requests ({data} for data, {tree} for hash blocks only) in {batches} batches; \
         {} hash blocks fetched, {} bytes fetched in all",
        requests.len(),
        verified.hash_blocks_read.load(Relaxed),
        stats.bytes_fetched.load(Relaxed)
    );
    // Every batch is a verified read of data: hash blocks are never fetched by a batch of their
    // own (after the data), only beside the data of the read that needs them.
    assert_eq!(
        batches, verified_batches,
        "every remote batch is a verified read"
    );
    assert_eq!(data as u64, batches, "one data request per batch");
    assert!(
        tree as u64 <= batches,
        "at most one hash request beside each data request"
    );
    assert!(verified.hash_blocks_read.load(Relaxed) > 0);
}

#[test]
fn a_replaced_object_fails_with_the_etag_error_and_never_mixes_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(server) = serve(tmp.path()) else {
        return;
    };
    let www = tmp.path().join("www");
    let expected = digest(&www.join("img"));
    let remote = Arc::new(RemoteObject::open(&server.url("img")).unwrap());
    let etag = remote.etag().expect("nginx gives an ETag").to_string();
    let opened = open(
        Source::reader(remote.clone(), server.url("img")),
        &OpenOptions::new().digest(expected),
    )
    .unwrap();
    let img = &opened.image;
    let small = img.resolve("/d/small", Follow::All).unwrap();
    assert_eq!(img.read_vec(&small, 0, 100).unwrap(), b"small 1\n");

    // Another image (another size, so another ETag) takes its place.
    image(tmp.path(), &tmp.path().join("other"), 2);
    fs::rename(tmp.path().join("other"), www.join("img")).unwrap();
    let big = img.resolve("/big", Follow::All).unwrap();
    let err = sealfs_reader::ErrorChain(&img.read_vec(&big, 0, 1 << 20).unwrap_err()).to_string();
    println!("{err}");
    assert!(
        err.contains(&format!(
            "{}: the object changed since it was opened: ETag {etag} (",
            server.url("img")
        )),
        "{err}"
    );
    // Straight from the object too: no byte of the new object is returned.
    let mut buf = vec![0u8; 4096];
    let err = sealfs_reader::ReadAt::read_exact_at(&*remote, &mut buf, 0).unwrap_err();
    assert!(
        err.to_string().contains("changed since it was opened"),
        "{err}"
    );
    assert!(buf.iter().all(|&b| b == 0), "nothing copied");
}

/// A block taken from the persistent cache by leaf hash (another image's entry) is not fetched
/// too: v2's file holds a block the same as v1's, read before through the same cache directory,
/// between two blocks of its own; the reads of v2 (its metadata's, whose 16-block window takes
/// the file in, and the file's) ask nginx for the blocks around it, never for it. (They are 4 KiB
/// apart, less than the client's coalescing gap, which joined them into one request that sent the
/// shared block again: `leaf_cache::a_lazy_mount_of_v2_takes_what_v1_left_in_the_cache` met it
/// with a lazy mount's metadata span.)
#[test]
fn a_block_found_by_leaf_is_not_fetched_between_two_that_are() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let www = d.join("www");
    fs::create_dir_all(&www).unwrap();
    let shared = pseudo_random(4096, 40);
    for v in [1u64, 2] {
        let src = d.join(format!("v{v}"));
        fs::create_dir_all(&src).unwrap();
        // The file: a block of its own, the shared block, a block of its own.
        let mut f = pseudo_random(4096, 40 + v * 10);
        f.extend_from_slice(&shared);
        f.extend_from_slice(&pseudo_random(4096, 41 + v * 10));
        fs::write(src.join("f"), f).unwrap();
        // Large enough that the file is not in the tail the open reads (its last 64 KiB).
        fs::write(src.join("pad"), pseudo_random(1 << 20, 60 + v)).unwrap();
        build_image(&src, &www.join(format!("v{v}")), &BuildOptions::default()).unwrap();
    }
    let server = match nginx(&www, &d.join("nginx")) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let cache = CacheSettings {
        dir: d.join("cache"),
        max_bytes: 1 << 30,
    };
    let read_f = |v: u64| {
        let name = format!("v{v}");
        let options = OpenOptions::new().digest(digest(&www.join(&name)));
        let (opened, remote) = open_cached(
            server.url(&name),
            &options,
            RemoteTrust::RequireAuthority,
            &RemoteOptions::default(),
            Some(&cache),
        )
        .unwrap();
        let f = opened.image.resolve("/f", Follow::All).unwrap();
        let got = opened.image.read_vec(&f, 0, 3 * 4096).unwrap();
        assert_eq!(&got[4096..8192], &shared[..], "v{v}'s file");
        let hits = opened
            .verified
            .as_ref()
            .unwrap()
            .stats()
            .leaf_hits
            .load(Relaxed);
        let requests = remote.unwrap().stats().requests.load(Relaxed);
        (opened.image_length, hits, requests)
    };
    // v1 read through the cache: its blocks and tree blocks kept there.
    read_f(1);

    server.clear_requests();
    let (len, hits, requests) = read_f(2);
    assert!(hits >= 1, "the shared block taken from v1's entry");
    let v2 = fs::read(www.join("v2")).unwrap();
    let at: Vec<u64> = v2
        .chunks_exact(4096)
        .enumerate()
        .filter(|(_, b)| *b == &shared[..])
        .map(|(k, _)| k as u64 * 4096)
        .collect();
    assert_eq!(at.len(), 1, "the shared block once in v2");
    let at = at[0];
    assert!(at + 4096 <= len - (64 << 10), "not in the open's tail");
    // Each request's range (`bytes=A-B`, or `bytes=-N` for the open's tail): none has the block.
    let log = server.requests_at_least(requests as usize);
    let covering: Vec<&String> = log
        .iter()
        .filter(|line| {
            let range = line
                .split(' ')
                .nth(2)
                .and_then(|r| r.strip_prefix("bytes="));
            let (a, b) = match range.and_then(|r| r.split_once('-')) {
                Some(("", n)) => (len - n.parse::<u64>().unwrap(), len - 1),
                Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                None => (0, len - 1),
            };
            a < at + 4096 && b >= at
        })
        .collect();
    assert!(
        covering.is_empty(),
        "the block at {at} (v2), found by leaf, was fetched: {covering:?} of {log:?}"
    );
}
