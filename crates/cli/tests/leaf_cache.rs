//! The persistent cache shared across images by leaf hash (issue 41, item 2): v1 of a generated
//! tree mounted lazily over HTTP (a real nginx on loopback) and read whole fills a cache
//! directory; v2 mounted lazily with the same directory and read whole (GNU `diff -r` against
//! v2's source) takes the blocks it shares with v1 from v1's entries: the bytes nginx sent for it
//! (its access log) are at most what `sealfs diff v1 v2` predicts an update fetches, and no
//! request covers a block v2 shares with v1 (found by the images' bytes, without sealfs's code).
//! A shared block of v1 damaged in the cache directory is fetched instead (a request covers it),
//! counted as a leaf discard, and the tree still reads equal. Uncompressed and lz4hc layouts.

mod common;

use common::mount::{processes_naming, UnmountOnDrop};
use common::servers::{nginx, Server};
use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn tree(dir: &Path, version: u32) {
    let mut rng = Rng::new(23);
    let mut bytes = |n: usize| rng.bytes(n);
    fs::create_dir_all(dir.join("a/b")).unwrap();
    for i in 0..60 {
        fs::write(dir.join(format!("a/f{i:03}")), bytes(300 + i * 733)).unwrap();
    }
    // Large enough that the seal (tree and trailer) is more than the 64 KiB a remote open
    // reads from the end to find it.
    let mut big = bytes(7 << 20);
    let mut edit = bytes(500_000);
    let moved = bytes(150_000);
    if version == 2 {
        big.splice(3_500_000..3_500_000, *b"inserted bytes");
        edit[250_000..250_080].fill(9);
        fs::write(dir.join("a/added"), bytes(20_000)).unwrap();
        fs::remove_file(dir.join("a/f020")).unwrap();
        fs::write(dir.join("moved"), moved).unwrap();
    } else {
        fs::write(dir.join("a/b/moved"), moved).unwrap();
    }
    fs::write(dir.join("big"), big).unwrap();
    fs::write(dir.join("a/b/edit"), edit).unwrap();
}

/// v1 and v2 of the tree in a temporary directory (`v1/`, `v2/`), and nginx serving its `www/`;
/// `None` (the test skipped) without nginx.
fn fixture() -> Option<(tempfile::TempDir, Server)> {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    tree(&d.join("v1"), 1);
    tree(&d.join("v2"), 2);
    fs::create_dir_all(d.join("www")).unwrap();
    match nginx(&d.join("www"), &d.join("nginx")) {
        Ok(http) => Some((tmp, http)),
        Err(e) => {
            oracle_guard(Err(e));
            None
        }
    }
}

fn sealfs(args: &[&str]) -> Output {
    run(Command::new(sealfs_bin())
        .args(args)
        .env("TZ", "UTC")
        .stdin(Stdio::null()))
}

fn sealfs_ok(args: &[&str]) -> Output {
    let o = sealfs(args);
    assert!(
        o.status.success(),
        "sealfs {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn digest(image: &Path) -> String {
    String::from_utf8(sealfs_ok(&["digest", image.to_str().unwrap()]).stdout)
        .unwrap()
        .trim()
        .to_string()
}

/// nginx's access log lines once none has been added for half a second (nginx writes a
/// request's line when it finalizes it, which may be just after the client has its last byte).
fn settled_requests(http: &Server) -> Vec<String> {
    let mut lines = http.requests();
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = http.requests();
        if now.len() == lines.len() {
            return lines;
        }
        lines = now;
    }
}

/// Body bytes sent (`$body_bytes_sent`, the last field of a line).
fn bytes_sent(lines: &[String]) -> u64 {
    lines
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Whether a request of `lines` for `name` (an object of `size` bytes) asked for a byte of
/// `[at, at + len)`.
fn requested(lines: &[String], name: &str, size: u64, at: u64, len: u64) -> bool {
    let mine: Vec<String> = lines
        .iter()
        .filter(|l| l.split(' ').nth(1) == Some(&*format!("/{name}")))
        .cloned()
        .collect();
    ranges(&mine, size)
        .iter()
        .any(|&(a, b)| a < at + len && b > at)
}

/// The byte ranges `[a, b)` of the requests of `lines` for an object of `len` bytes (`bytes=a-b`,
/// `bytes=-n`; a request without a range: all of it).
fn ranges(lines: &[String], len: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for l in lines {
        let f: Vec<&str> = l.split(' ').collect();
        let Some(spec) = f.get(2).and_then(|r| r.strip_prefix("bytes=")) else {
            out.push((0, len));
            continue;
        };
        for r in spec.split(',') {
            let (a, b) = r.split_once('-').unwrap();
            out.push(match (a.parse::<u64>(), b.parse::<u64>()) {
                (Ok(a), Ok(b)) => (a, (b + 1).min(len)),
                (Ok(a), Err(_)) => (a, len),
                (Err(_), Ok(n)) => (len.saturating_sub(n), len),
                _ => (0, len),
            });
        }
    }
    out
}

/// Bytes of the object the requests of `lines` asked for (each counted once), and bytes they asked
/// for more than once.
fn distinct_and_repeated(lines: &[String], len: u64) -> (u64, u64) {
    let mut r = ranges(lines, len);
    let total: u64 = r.iter().map(|(a, b)| b - a).sum();
    r.sort();
    let mut distinct = 0;
    let mut end = 0;
    for (a, b) in r {
        let a = a.max(end);
        if b > a {
            distinct += b - a;
            end = b;
        }
    }
    (distinct, total - distinct)
}

/// Mounts `url` lazily at `mnt` through the cache `cache`, reads every file (GNU `diff -r`
/// against `src`, which must say nothing), and returns the mount's `sealfs stats --json` taken
/// just before it is unmounted; waits until the mount daemon has exited.
fn mount_and_read(url: &str, dg: &str, cache: &Path, mnt: &Path, src: &Path) -> Value {
    fs::create_dir_all(mnt).unwrap();
    let _guard = UnmountOnDrop(mnt.to_path_buf());
    sealfs_ok(&[
        "mount",
        "--digest",
        dg,
        "--cache-dir",
        cache.to_str().unwrap(),
        url,
        mnt.to_str().unwrap(),
    ]);
    let daemons = processes_naming(mnt);
    let diff = run(Command::new("timeout")
        .args(["120", "diff", "-r", "--no-dereference"])
        .arg(src)
        .arg(mnt));
    let stats: Value =
        serde_json::from_slice(&sealfs_ok(&["stats", "--json", mnt.to_str().unwrap()]).stdout)
            .unwrap();
    sealfs_ok(&["umount", mnt.to_str().unwrap()]);
    let t = Instant::now();
    while daemons
        .iter()
        .any(|p| Path::new(&format!("/proc/{p}")).exists())
        && t.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        diff.status.success(),
        "diff -r {} {}: {}{}",
        src.display(),
        mnt.display(),
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr)
    );
    stats
}

/// The EROFS blocks of `img` (its first `erofs_length` bytes) by their bytes: block → index of
/// its first appearance, and how many times each appears.
fn blocks_of(img: &[u8], erofs_length: usize) -> HashMap<&[u8], (usize, usize)> {
    let mut m: HashMap<&[u8], (usize, usize)> = HashMap::new();
    for (k, b) in img[..erofs_length].chunks_exact(4096).enumerate() {
        m.entry(b).or_insert((k, 0)).1 += 1;
    }
    m
}

fn erofs_length(image: &Path) -> usize {
    let v: Value =
        serde_json::from_slice(&sealfs_ok(&["inspect", "--json", image.to_str().unwrap()]).stdout)
            .unwrap();
    v["erofs_length"]
        .as_u64()
        .or_else(|| v["seal"]["erofs_length"].as_u64())
        .unwrap_or_else(|| panic!("no erofs_length in {v}")) as usize
}

#[test]
fn a_lazy_mount_of_v2_takes_what_v1_left_in_the_cache() {
    let fuse = root_env().and_then(|()| {
        Path::new("/dev/fuse")
            .exists()
            .then_some(())
            .ok_or_else(|| "/dev/fuse missing (no FUSE)".to_string())
    });
    if !oracle_guard(fuse) {
        return;
    }
    let Some((tmp, http)) = fixture() else { return };
    let d = tmp.path();
    let www = d.join("www");
    for (label, args) in [("default", &[][..]), ("lz4hc", &["-z", "lz4hc"][..])] {
        let (n1, n2) = (format!("{label}-1.img"), format!("{label}-2.img"));
        let (img1, img2) = (www.join(&n1), www.join(&n2));
        build_ok(&d.join("v1"), &img1, args);
        build_ok(&d.join("v2"), &img2, args);
        let (dg1, dg2) = (digest(&img1), digest(&img2));
        let (url1, url2) = (http.url(&n1), http.url(&n2));
        let cache = d.join(format!("{label}-cache"));
        let mnt = d.join(format!("{label}-mnt"));

        // v1, read whole: its blocks and tree in the cache.
        mount_and_read(&url1, &dg1, &cache, &mnt, &d.join("v1"));
        let tampered_cache = d.join(format!("{label}-cache-tampered"));
        assert!(run(Command::new("cp")
            .arg("-a")
            .arg(&cache)
            .arg(&tampered_cache))
        .status
        .success());

        // What an update from v1 fetches, by sealfs diff of the local files.
        let diff: Value = serde_json::from_slice(
            &sealfs_ok(&[
                "diff",
                "--json",
                "--no-cache",
                img1.to_str().unwrap(),
                img2.to_str().unwrap(),
            ])
            .stdout,
        )
        .unwrap();
        // The open reads the image's last 64 KiB to find its seal, which the prediction does
        // not count: where the seal is smaller, that read holds data blocks too; and the tree
        // block in which it starts is fetched whole again (the tail serves only whole ranges).
        let len = fs::metadata(&img2).unwrap().len();
        let tail_over_data = (64u64 << 10).saturating_sub(diff["seal_bytes"].as_u64().unwrap());
        let straddled = (4096 - (len - (64 << 10)) % 4096) % 4096;
        let predicted = diff["fetch_bytes"].as_u64().unwrap() + tail_over_data + straddled;

        // v2 through the same cache.
        http.clear_requests();
        let stats = mount_and_read(&url2, &dg2, &cache, &mnt, &d.join("v2"));
        let lines = settled_requests(&http);
        let sent = bytes_sent(&lines);
        let leaf_hits = stats["verify"]["leaf_hits"].as_u64().unwrap();
        assert_eq!(stats["verify"]["leaf_discards"], 0, "{label}: {stats}");
        assert!(leaf_hits > 0, "{label}: {stats}");
        // Distinct bytes: a read whose blocks are split by a few a concurrent read has just
        // stored is fetched as one request (the remote client joins requests across small gaps,
        // as the prediction does), so some blocks may be sent twice.
        let (distinct, twice) = distinct_and_repeated(&lines, len);
        assert!(
            distinct <= predicted && twice <= 128 << 10,
            "{label}: nginx sent {sent} bytes ({distinct} distinct, {twice} again) for v2 \
             through v1's cache; diff predicted {predicted}\n{}\n{diff}",
            lines.join("\n")
        );
        assert!(
            lines
                .iter()
                .all(|l| l.split(' ').nth(1) == Some(&*format!("/{n2}"))),
            "{label}: nothing of v1 fetched: {lines:?}"
        );
        // The blocks v2 shares with v1 (same bytes, each found once in both) were not requested.
        let (b1, b2) = (fs::read(&img1).unwrap(), fs::read(&img2).unwrap());
        let (e1, e2) = (erofs_length(&img1), erofs_length(&img2));
        let (in1, in2) = (blocks_of(&b1, e1), blocks_of(&b2, e2));
        let shared: Vec<(usize, usize)> = in2
            .iter()
            .filter(|(_, &(_, n))| n == 1)
            .filter_map(|(b, &(k2, _))| {
                in1.get(b)
                    .filter(|&&(_, n)| n == 1)
                    .map(|&(k1, _)| (k1, k2))
            })
            .collect();
        assert!(
            shared.len() > 100,
            "{label}: {} shared blocks",
            shared.len()
        );
        for &(_, k2) in &shared {
            assert!(
                !requested(&lines, &n2, len, k2 as u64 * 4096, 4096),
                "{label}: block {k2} of v2, shared with v1, was fetched"
            );
        }
        let size = len;
        println!(
            "{label}: v2 ({size} bytes, {} blocks shared with v1) through v1's cache: nginx sent \
             {sent} bytes ({distinct} distinct) in {} requests, diff predicted {predicted}; \
             {leaf_hits} blocks from v1's entries",
            shared.len(),
            lines.len()
        );

        // A shared block of v1 damaged in the cache directory: fetched instead, counted.
        let (k1, k2) = shared
            .iter()
            .copied()
            .filter(|&(k1, _)| k1 > 16)
            .min()
            .expect("a shared block");
        let hex = dg1.strip_prefix("sha256:").unwrap();
        let chunk = tampered_cache
            .join(format!("sha256-{hex}"))
            .join(format!("d{:012x}", k1 / 64));
        let mut bytes = fs::read(&chunk).unwrap_or_else(|e| panic!("{}: {e}", chunk.display()));
        let at = 4096 + (k1 % 64) * 4096 + 123;
        assert_eq!(
            &bytes[at - 123..at - 123 + 4096],
            &b1[k1 * 4096..(k1 + 1) * 4096]
        );
        bytes[at] ^= 0x10;
        fs::write(&chunk, bytes).unwrap();
        http.clear_requests();
        let stats = mount_and_read(&url2, &dg2, &tampered_cache, &mnt, &d.join("v2"));
        let lines = settled_requests(&http);
        assert!(
            stats["verify"]["leaf_discards"].as_u64().unwrap() >= 1,
            "{label}: {stats}"
        );
        assert!(
            requested(&lines, &n2, len, k2 as u64 * 4096, 4096),
            "{label}: block {k2} of v2 (block {k1} of v1, damaged in the cache) was not fetched"
        );
        let (distinct, twice) = distinct_and_repeated(&lines, len);
        assert!(
            distinct <= predicted + 4096 && twice <= 128 << 10,
            "{label}: {distinct} distinct bytes ({twice} again) sent with one damaged entry, \
             {predicted} predicted\n{}",
            lines.join("\n")
        );

        // Without v1 in the cache, the same reads fetch (about) the whole image.
        http.clear_requests();
        let fresh = d.join(format!("{label}-cache-fresh"));
        mount_and_read(&url2, &dg2, &fresh, &mnt, &d.join("v2"));
        let alone = bytes_sent(&settled_requests(&http));
        assert!(
            alone >= e2 as u64 && sent * 2 < alone,
            "{label}: {alone} bytes sent for v2 alone, {sent} through v1's cache"
        );
        println!("{label}: v2 alone: nginx sent {alone} bytes");
    }
}

fn sealfs_json(args: &[&str]) -> Value {
    serde_json::from_slice(&sealfs_ok(args).stdout).unwrap()
}

/// `sealfs pull URL OUT --base OLD` takes the blocks the persistent cache holds for other images
/// too: v1 read through a cache directory (`sealfs extract` over HTTP), v2 pulled with an
/// unrelated base and that cache: OUT is byte-identical to v2 (`cmp`), blocks come from the cache
/// (`cache_reused_blocks`), the bytes fetched are what `sealfs diff` with the same cache predicted
/// and nginx's access log agrees (at least the data blocks planned, at most the prediction and the
/// diff's own bytes less the tree); a v1 entry damaged in the cache is fetched instead, and said.
#[test]
fn pull_takes_blocks_from_the_persistent_cache() {
    let Some((tmp, http)) = fixture() else { return };
    let d = tmp.path();
    fs::create_dir_all(d.join("other")).unwrap();
    fs::write(d.join("other/x"), b"unrelated\n").unwrap();
    let www = d.join("www");
    let (img1, img2, base) = (www.join("1.img"), www.join("2.img"), d.join("other.img"));
    build_ok(&d.join("v1"), &img1, &["-z", "lz4hc"]);
    build_ok(&d.join("v2"), &img2, &["-z", "lz4hc"]);
    build_ok(&d.join("other"), &base, &["-z", "lz4hc"]);
    let (dg1, dg2) = (digest(&img1), digest(&img2));
    let (url1, url2) = (http.url("1.img"), http.url("2.img"));
    let cache = d.join("cache");
    let c = cache.to_str().unwrap();
    sealfs_ok(&[
        "extract",
        "-q",
        "--digest",
        &dg1,
        "--cache-dir",
        c,
        &url1,
        d.join("x1").to_str().unwrap(),
    ]);
    let tampered = d.join("cache-tampered");
    assert!(run(Command::new("cp").arg("-a").arg(&cache).arg(&tampered))
        .status
        .success());
    let tree_size = sealfs_json(&["inspect", "--json", img2.to_str().unwrap()])["seal"]
        ["tree_size"]
        .as_u64()
        .unwrap();
    let b = base.to_str().unwrap();

    http.clear_requests();
    let diff = sealfs_json(&[
        "diff",
        "--json",
        b,
        &url2,
        "--digest",
        &dg2,
        "--cache-dir",
        c,
    ]);
    let diff_sent = bytes_sent(&settled_requests(&http));
    let without = sealfs_json(&["diff", "--json", b, &url2, "--digest", &dg2, "--no-cache"]);
    assert!(diff["cache_blocks"].as_u64().unwrap() > 0, "{diff}");
    assert!(
        diff["reused_blocks"].as_u64().unwrap() > without["reused_blocks"].as_u64().unwrap() + 100,
        "{diff}\n{without}"
    );
    let out = d.join("out.img");
    http.clear_requests();
    let pulled = sealfs_json(&[
        "pull",
        &url2,
        out.to_str().unwrap(),
        "--base",
        b,
        "--digest",
        &dg2,
        "--cache-dir",
        c,
        "--json",
    ]);
    let pull_sent = bytes_sent(&settled_requests(&http));
    assert!(
        run(Command::new("cmp").arg(&out).arg(&img2))
            .status
            .success(),
        "the pulled image is v2"
    );
    let predicted = diff["fetch_bytes"].as_u64().unwrap();
    assert_eq!(pulled["fetched_bytes"], predicted, "{pulled}");
    assert_eq!(pulled["reused_blocks"], diff["reused_blocks"], "{pulled}");
    assert_eq!(pulled["base_mismatches"], 0, "{pulled}");
    assert!(
        pulled["cache_reused_blocks"].as_u64().unwrap() > 100,
        "{pulled}"
    );
    // At most the prediction less the tree the diff read too (the pull's open finds in the cache
    // what the diff's open kept there); at least the data blocks planned to be fetched.
    let most = diff_sent + predicted - tree_size;
    let least = predicted - diff["seal_bytes"].as_u64().unwrap();
    assert!(
        pull_sent <= most && pull_sent >= least,
        "nginx sent {pull_sent} for the pull, {diff_sent} for the diff, {predicted} predicted"
    );
    println!(
        "pull from the cache: {} of {} blocks reused ({} from the cache), {pull_sent} bytes sent \
         for a {}-byte image",
        pulled["reused_blocks"],
        pulled["data_blocks"],
        pulled["cache_reused_blocks"],
        fs::metadata(&img2).unwrap().len()
    );

    // A v1 entry that v2 shares, damaged in the cache: fetched instead, and said.
    let (b1, b2) = (fs::read(&img1).unwrap(), fs::read(&img2).unwrap());
    let (in1, in2) = (
        blocks_of(&b1, erofs_length(&img1)),
        blocks_of(&b2, erofs_length(&img2)),
    );
    let k1 = in1
        .iter()
        .filter(|(blk, &(_, n))| n == 1 && in2.get(*blk).is_some_and(|&(_, m)| m == 1))
        .map(|(_, &(k, _))| k)
        .filter(|&k| k > 16)
        .min()
        .expect("a shared block");
    let hex = dg1.strip_prefix("sha256:").unwrap();
    let chunk = tampered
        .join(format!("sha256-{hex}"))
        .join(format!("d{:012x}", k1 / 64));
    let mut bytes = fs::read(&chunk).unwrap();
    bytes[4096 + (k1 % 64) * 4096 + 7] ^= 0x01;
    fs::write(&chunk, bytes).unwrap();
    let out2 = d.join("out2.img");
    let o = sealfs(&[
        "pull",
        &url2,
        out2.to_str().unwrap(),
        "--base",
        b,
        "--digest",
        &dg2,
        "--cache-dir",
        tampered.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("did not match the image's tree"), "{err}");
    assert!(run(Command::new("cmp").arg(&out2).arg(&img2))
        .status
        .success());
}
