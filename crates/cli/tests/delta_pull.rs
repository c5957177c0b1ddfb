//! `sealfs pull URL OUT --base OLD` (issue 41): v2 of a generated tree served by nginx on
//! loopback, v1 here. For uncompressed, lz4hc and `--preset small` builds: OUT is byte-identical
//! to v2 (`cmp`), and the bytes nginx sent for the pull are what `sealfs diff` predicted (nginx's
//! access log: the pull's bytes less the diff's own, which opened the image and read its tree as
//! the pull does, equal the diff's `fetch_bytes` less the tree). A damaged block of the base is
//! never used: it is fetched instead and the run says so. A pull killed mid-transfer (a slow
//! link: the project's fault proxy) leaves its partial file, and the next pull to OUT takes its
//! verified blocks and fetches only the rest. The same prediction holds from an S3 server
//! (versitygw, behind an nginx that logs what it passes on: versitygw's own access log records 0
//! bytes for ranged reads) and a registry (Debian's docker-registry, its log).

mod common;

use common::compare::{compare_trees, Expect};
use common::mount::mount_erofs;
use common::servers::{docker_registry, nginx, nginx_proxy, versitygw, FaultProxy};
use common::*;
use serde_json::Value;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn tree(dir: &Path, version: u32) {
    let mut seed = 11u64;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 33) as u8
            })
            .collect()
    };
    fs::create_dir_all(dir.join("a")).unwrap();
    for i in 0..80 {
        fs::write(dir.join(format!("a/f{i:03}")), bytes(200 + i * 611)).unwrap();
    }
    let mut big = bytes(4 << 20);
    let mut edit = bytes(400_000);
    if version == 2 {
        big.splice(2_000_000..2_000_000, *b"inserted");
        edit[100_000..100_050].fill(7);
        fs::write(dir.join("a/added"), bytes(30_000)).unwrap();
        fs::remove_file(dir.join("a/f010")).unwrap();
    }
    fs::write(dir.join("big"), big).unwrap();
    fs::write(dir.join("edit"), edit).unwrap();
}

fn sealfs_json(args: &[&str]) -> Value {
    sealfs_json_env(args, &[])
}

fn sealfs_json_env(args: &[&str], env: &[(&str, String)]) -> Value {
    let out = run(Command::new(sealfs_bin())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v))));
    assert!(
        out.status.success(),
        "sealfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `sealfs pull URL OUT --base BASE --digest DG --no-cache --json` (with `env`), its JSON.
fn pull_json(url: &str, out: &Path, base: &str, dg: &str, env: &[(&str, String)]) -> Value {
    sealfs_json_env(
        &[
            "pull",
            url,
            out.to_str().unwrap(),
            "--base",
            base,
            "--digest",
            dg,
            "--no-cache",
            "--json",
        ],
        env,
    )
}

/// Body bytes nginx sent since its log was last cleared, once no request has been added to the
/// log for half a second (nginx writes a request's line when it finalizes it, which may be just
/// after the client has its last byte).
fn sent(http: &common::servers::Server) -> u64 {
    let mut lines = http.requests_at_least(1);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = http.requests();
        if now.len() == lines.len() {
            break;
        }
        lines = now;
    }
    lines
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

struct Fixture {
    _tmp: tempfile::TempDir,
    dir: std::path::PathBuf,
    http: common::servers::Server,
}

fn fixture() -> Option<Fixture> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    tree(&dir.join("v1"), 1);
    tree(&dir.join("v2"), 2);
    fs::create_dir_all(dir.join("www")).unwrap();
    match nginx(&dir.join("www"), &dir.join("nginx")) {
        Ok(http) => Some(Fixture {
            _tmp: tmp,
            dir,
            http,
        }),
        Err(e) => {
            oracle_guard(Err(e));
            None
        }
    }
}

fn digest(image: &Path) -> String {
    String::from_utf8(run(Command::new(sealfs_bin()).arg("digest").arg(image)).stdout)
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn pull_from_a_base_fetches_what_diff_predicted_and_writes_v2_exactly() {
    let Some(f) = fixture() else { return };
    let d = &f.dir;
    for (label, args) in [
        ("default", &[][..]),
        ("lz4hc", &["-z", "lz4hc"][..]),
        ("small", &["--preset", "small"][..]),
    ] {
        let old = d.join(format!("{label}-1.img"));
        let new = d.join("www").join(format!("{label}-2.img"));
        build_ok(&d.join("v1"), &old, args);
        build_ok(&d.join("v2"), &new, args);
        let (dg, url) = (digest(&new), f.http.url(&format!("{label}-2.img")));
        let tree_size = sealfs_json(&["inspect", "--json", new.to_str().unwrap()])["seal"]
            ["tree_size"]
            .as_u64()
            .unwrap();
        let old_s = old.to_str().unwrap();
        f.http.clear_requests();
        let diff = sealfs_json(&["diff", "--json", old_s, &url, "--digest", &dg, "--no-cache"]);
        let diff_sent = sent(&f.http);
        f.http.clear_requests();
        let out = d.join(format!("{label}-out.img"));
        let pulled = pull_json(&url, &out, old_s, &dg, &[]);
        let pull_sent = sent(&f.http);
        assert_eq!(fs::read(&out).unwrap(), fs::read(&new).unwrap(), "{label}");
        let predicted = diff["fetch_bytes"].as_u64().unwrap();
        assert_eq!(pulled["fetched_bytes"], predicted, "{label}: {pulled}");
        assert_eq!(pulled["reused_blocks"], diff["reused_blocks"], "{label}");
        assert_eq!(pulled["base_mismatches"], 0, "{label}");
        // The prediction counts the seal's bytes whole; the open already holds the image's last
        // 64 KiB (its tail, read to find the seal), which the pull does not fetch again.
        let most = diff_sent + predicted - tree_size;
        assert!(
            pull_sent <= most && pull_sent + (64 << 10) >= most,
            "{label}: nginx sent {pull_sent} for the pull, {diff_sent} for the diff, {predicted} predicted"
        );
        println!("{label}: {} bytes fewer than predicted", most - pull_sent);
        assert!(!d.join(format!(".{label}-out.img.sealfs-part")).exists());
        println!(
            "{label}: {} of {} bytes fetched, {} blocks reused",
            pull_sent,
            fs::metadata(&new).unwrap().len(),
            pulled["reused_blocks"]
        );
    }
}

/// Body bytes the nginx in front of the S3 server sent so far.
fn front_sent(front: &common::servers::Server) -> u64 {
    std::thread::sleep(Duration::from_millis(500));
    front
        .requests()
        .iter()
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// `diff` then `pull --base` from `url`, the bytes the server sent for each counted by `sent`
/// (running totals); checks OUT is `new` and the pull's bytes are what the diff predicted.
fn pull_checked(
    label: &str,
    old: &Path,
    new: &Path,
    url: &str,
    env: &[(&str, String)],
    sent: &dyn Fn() -> u64,
) {
    let dg = digest(new);
    let tree_size = sealfs_json(&["inspect", "--json", new.to_str().unwrap()])["seal"]["tree_size"]
        .as_u64()
        .unwrap();
    let old_s = old.to_str().unwrap();
    let start = sent();
    let diff = sealfs_json_env(
        &["diff", "--json", old_s, url, "--digest", &dg, "--no-cache"],
        env,
    );
    let after_diff = sent();
    let out = new.with_extension("out");
    let pulled = pull_json(url, &out, old_s, &dg, env);
    let (diff_sent, pull_sent) = (after_diff - start, sent() - after_diff);
    assert_eq!(fs::read(&out).unwrap(), fs::read(new).unwrap(), "{label}");
    let predicted = diff["fetch_bytes"].as_u64().unwrap();
    assert_eq!(pulled["fetched_bytes"], predicted, "{label}: {pulled}");
    // As from nginx (above): the open's tail is not fetched again.
    let most = diff_sent + predicted - tree_size;
    assert!(
        pull_sent <= most && pull_sent + (64 << 10) >= most,
        "{label}: the server sent {pull_sent} for the pull, {diff_sent} for the diff, \
         {predicted} predicted"
    );
    println!(
        "{label}: the server sent {pull_sent} bytes for the pull of {} ({} predicted, less the tree)",
        fs::metadata(new).unwrap().len(),
        predicted - tree_size
    );
}

#[test]
fn pull_from_s3_and_from_a_registry_fetches_what_diff_predicted() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    tree(&d.join("v1"), 1);
    tree(&d.join("v2"), 2);
    let s3_root = d.join("s3");
    fs::create_dir_all(s3_root.join("bucket")).unwrap();
    fs::create_dir_all(d.join("s3-work")).unwrap();
    fs::create_dir_all(d.join("s3-front")).unwrap();
    let s3 = match versitygw(&s3_root, &d.join("s3-work")) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let front = match nginx_proxy(s3.port, &d.join("s3-front")) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let s3_env: Vec<(&str, String)> = s3
        .s3_env()
        .into_iter()
        .map(|(k, v)| match k {
            "AWS_ENDPOINT_URL" => (k, format!("http://127.0.0.1:{}", front.port)),
            _ => (k, v),
        })
        .collect();
    let registry = match docker_registry(&d.join("registry"), &Default::default()) {
        Ok(r) => r,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    for (label, args) in [("default", &[][..]), ("small", &["--preset", "small"][..])] {
        let old = d.join(format!("{label}-1.img"));
        let new = d.join(format!("{label}-2.img"));
        build_ok(&d.join("v1"), &old, args);
        build_ok(&d.join("v2"), &new, args);
        // S3: the object in versitygw's bucket directory.
        fs::copy(&new, s3_root.join("bucket").join(format!("{label}-2.img"))).unwrap();
        pull_checked(
            &format!("{label} from S3"),
            &old,
            &new,
            &format!("s3://bucket/{label}-2.img"),
            &s3_env,
            &|| front_sent(&front),
        );
        // A registry: pushed by sealfs, pulled by reference.
        let reference = format!("oci+http://127.0.0.1:{}/delta/{label}:v2", registry.port);
        let pushed =
            run(Command::new(sealfs_bin()).args(["push", new.to_str().unwrap(), &reference]));
        assert!(
            pushed.status.success(),
            "{}",
            String::from_utf8_lossy(&pushed.stderr)
        );
        pull_checked(
            &format!("{label} from a registry"),
            &old,
            &new,
            &reference,
            &[],
            &|| {
                std::thread::sleep(Duration::from_millis(500));
                registry.registry_blob_bytes()
            },
        );
    }
}

#[test]
fn a_damaged_base_block_is_fetched_instead() {
    let Some(f) = fixture() else { return };
    let d = &f.dir;
    let (old, new) = (d.join("1.img"), d.join("www/2.img"));
    build_ok(&d.join("v1"), &old, &["-z", "lz4hc"]);
    build_ok(&d.join("v2"), &new, &["-z", "lz4hc"]);
    let dg = digest(&new);
    // A block v2 shares with v1 at the same offset, found nowhere else in v1.
    let (a, b) = (fs::read(&old).unwrap(), fs::read(&new).unwrap());
    let block = |img: &[u8], k: usize| img[k * 4096..(k + 1) * 4096].to_vec();
    let shared = (1..a.len().min(b.len()) / 4096)
        .find(|&k| {
            block(&a, k) == block(&b, k)
                && a.chunks_exact(4096).filter(|c| *c == block(&a, k)).count() == 1
        })
        .expect("a shared block");
    let mut damaged = a.clone();
    damaged[shared * 4096 + 100] ^= 0x40;
    fs::write(&old, &damaged).unwrap();
    let out = d.join("out.img");
    let o = run(Command::new(sealfs_bin()).args([
        "pull",
        &f.http.url("2.img"),
        out.to_str().unwrap(),
        "--base",
        old.to_str().unwrap(),
        "--digest",
        &dg,
        "--no-cache",
    ]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("did not match the image's tree"), "{err}");
    assert_eq!(fs::read(&out).unwrap(), b);
}

#[test]
fn a_killed_pull_goes_on_from_where_it_stopped() {
    let Some(f) = fixture() else { return };
    let d = &f.dir;
    let (old, new) = (d.join("1.img"), d.join("www/2.img"));
    build_ok(&d.join("v1"), &old, &["-z", "lz4hc"]);
    build_ok(&d.join("v2"), &new, &["-z", "lz4hc"]);
    let dg = digest(&new);
    let proxy = match FaultProxy::start(&f.http, d) {
        Ok(p) => p,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let url = proxy.url("2.img");
    let old_s = old.to_str().unwrap();
    let planned = sealfs_json(&["diff", "--json", old_s, &url, "--digest", &dg, "--no-cache"]);
    let out = d.join("out.img");
    let part = d.join(".out.img.sealfs-part");
    // A link of 0.5 MB/s: the small requests land within a second, the 2 MiB one takes four.
    proxy.set(r#"{"rate_mb": 0.5}"#);
    let mut child = Command::new(sealfs_bin())
        .args(["pull", &url, out.to_str().unwrap(), "--base", old_s])
        .args(["--digest", &dg, "--no-cache"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the pull ended within {:?}: the link is not slow enough",
        t.elapsed()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.exists());
    assert!(part.exists(), "no partial file kept");
    proxy.set("{}");
    let resumed = pull_json(&url, &out, old_s, &dg, &[]);
    assert_eq!(fs::read(&out).unwrap(), fs::read(&new).unwrap());
    assert!(!part.exists());
    // The blocks the killed run wrote were taken from its partial file.
    let (before, after) = (
        planned["reused_blocks"].as_u64().unwrap(),
        resumed["reused_blocks"].as_u64().unwrap(),
    );
    assert!(
        after > before,
        "{after} blocks reused, {before} from the base alone"
    );
    assert!(
        resumed["fetched_bytes"].as_u64().unwrap() < planned["fetch_bytes"].as_u64().unwrap(),
        "{resumed}"
    );
}

/// A loop device over a file, detached on drop.
struct LoopDevice(String);

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn pull_into_a_block_device_writes_the_image_in_place() {
    if !oracle_guard(mount_env()) {
        return;
    }
    let Some(f) = fixture() else { return };
    let d = &f.dir;
    let (old, new) = (d.join("1.img"), d.join("www/2.img"));
    build_ok(&d.join("v1"), &old, &["-z", "lz4hc"]);
    build_ok(&d.join("v2"), &new, &["-z", "lz4hc"]);
    let dg = digest(&new);
    // The B slot: a device larger than either image, holding v1 (the version it had).
    let slot = d.join("slot");
    let mut bytes = fs::read(&old).unwrap();
    bytes.resize(12 << 20, 0);
    fs::write(&slot, &bytes).unwrap();
    let out = run(Command::new("losetup").args(["-f", "--show"]).arg(&slot));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = LoopDevice(String::from_utf8(out.stdout).unwrap().trim().to_string());
    let pulled = sealfs_json(&[
        "pull",
        &f.http.url("2.img"),
        &dev.0,
        "--digest",
        &dg,
        "--no-cache",
        "--json",
    ]);
    // The blocks v1 shares with v2 came from the device itself.
    assert!(pulled["reused_blocks"].as_u64().unwrap() > 0, "{pulled}");
    let want = fs::read(&new).unwrap();
    let mut got = vec![0u8; want.len()];
    std::os::unix::fs::FileExt::read_exact_at(&fs::File::open(&dev.0).unwrap(), &mut got, 0)
        .unwrap();
    assert!(got == want, "the device's first bytes are not v2's image");
    // The kernel mounts the slot and sees v2's tree.
    let mnt = mount_erofs(Path::new(&dev.0)).unwrap();
    let diffs = compare_trees(&d.join("v2"), mnt.path(), &Expect::default());
    assert!(diffs.is_empty(), "{diffs:?}");
}
