//! Relative paths given to `sealfs mount` name files relative to the caller's working directory,
//! also in the daemon, which changes to `/` after the fork (issue 29: `--cache-dir cache` filled
//! `/cache`). Each mount runs from a temporary working directory with every path relative: the
//! image, `--sidecar`, `--signatures`, `--key`, `--keyring`, `--log` and `--record-profile` of a
//! local image; `--ca-cert`, `--cache-dir`, `--record-profile` and `--profile` of an image served
//! over HTTPS by nginx with a private CA. The files must land in the working directory, and
//! nothing of that name may appear under `/`.
//!
//! Needs root and /dev/fuse (and nginx and openssl for the remote case): prints `SKIP:` otherwise
//! (a failure under CI=true).

mod common;

use common::servers::{nginx_with, tls_certificates};
use common::*;
use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn fuse_env() -> Result<(), String> {
    root_env()?;
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse missing (no FUSE)".into());
    }
    Ok(())
}

/// `sealfs ARGS` run in `cwd`.
fn sealfs_in(cwd: &Path, args: &[&str]) -> Output {
    run(Command::new(sealfs_bin())
        .args(args)
        .current_dir(cwd)
        .env_remove("SEALFS_CACHE_DIR")
        .stdin(Stdio::null()))
}

fn sealfs_ok_in(cwd: &Path, args: &[&str]) -> Output {
    let o = sealfs_in(cwd, args);
    assert!(
        o.status.success(),
        "sealfs {args:?} in {}: {}",
        cwd.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A name no other test or process uses, so that its absence under `/` means something.
fn unique(what: &str) -> String {
    format!("sealfs-mount-paths-{what}-{}", std::process::id())
}

/// Panics if any of `names` exists under `/` (where a daemon that changed to `/` would put a
/// relative path).
fn assert_none_under_root(names: &[&str]) {
    let found: Vec<&&str> = names
        .iter()
        .filter(|n| Path::new("/").join(n).symlink_metadata().is_ok())
        .collect();
    assert!(
        found.is_empty(),
        "written under / instead of the working directory: {found:?}"
    );
}

/// Removes what a failing run left under `/` by these (unique) names, when dropped.
struct CleanRoot(Vec<String>);

impl Drop for CleanRoot {
    fn drop(&mut self) {
        for n in &self.0 {
            let p = Path::new("/").join(n);
            let _ = fs::remove_dir_all(&p).or_else(|_| fs::remove_file(&p));
        }
    }
}

/// Unmounts lazily whatever is still mounted at the path when dropped.
use common::mount::UnmountOnDrop as Unmount;

/// `sealfs umount mnt` in `cwd`, then waits (up to 10 s) for the daemon's last act: writing
/// `profile` when given.
fn umount(cwd: &Path, profile: Option<&Path>) {
    sealfs_ok_in(cwd, &["umount", "mnt"]);
    if let Some(p) = profile {
        let t = Instant::now();
        while !p.exists() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `cat` of a file through the mount, with a time limit (a daemon that cannot read hangs or fails).
fn cat(path: &Path) -> Output {
    run(Command::new("timeout").args(["60", "cat"]).arg(path))
}

/// Byte ranges of a profile file (its lines after the two header lines).
fn profile_ranges(text: &str) -> usize {
    text.lines()
        .skip(2)
        .filter(|l| !l.trim().is_empty())
        .count()
}

/// A local image with a detached seal, detached signatures under another name and keys in a
/// directory, all named relative to the working directory; the daemon logs to a relative file and
/// records a profile to one. The files read through the mount equal the source; the log and the
/// profile are in the working directory.
#[test]
fn a_detached_mount_of_a_local_image_keeps_relative_paths_relative_to_the_caller() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let src = w.join("src");
    fs::create_dir(&src).unwrap();
    small_fixture::build(&src, 29, false);
    fs::write(src.join("big"), pseudo_random(3 << 20, 29)).unwrap();
    fs::create_dir(w.join("mnt")).unwrap();
    fs::create_dir(w.join("keys")).unwrap();
    let (log, profile) = (unique("log"), unique("profile"));
    let _clean = CleanRoot(vec![log.clone(), profile.clone()]);
    let _unmount = Unmount(w.join("mnt"));

    build_ok(
        &src,
        &w.join("img"),
        &["--sidecar", w.join("img.seal").to_str().unwrap()],
    );
    sealfs_ok_in(w, &["keygen", "keys/k"]);
    sealfs_ok_in(
        w,
        &[
            "sign",
            "img",
            "--sidecar",
            "img.seal",
            "--key",
            "keys/k",
            "--detached",
        ],
    );
    fs::rename(w.join("img.sig"), w.join("sigs")).unwrap();

    for (keys, record) in [
        (["--key", "keys/k.pub"], true),
        (["--keyring", "keys"], false),
    ] {
        let mut args = vec![
            "mount",
            "img",
            "mnt",
            "--sidecar",
            "img.seal",
            "--signatures",
            "sigs",
        ];
        args.extend(keys);
        args.extend(["--log", &log]);
        if record {
            args.extend(["--record-profile", &profile]);
        }
        let o = sealfs_ok_in(w, &args);
        let said = String::from_utf8_lossy(&o.stderr);
        let read = cat(&w.join("mnt/big"));
        let listed = run(Command::new("ls").arg("-lR").current_dir(w.join("mnt")));
        umount(w, record.then(|| w.join(&profile)).as_deref());
        assert!(
            read.status.success(),
            "{keys:?}: cat big through the mount: {read:?} ({said})"
        );
        assert!(
            read.stdout == fs::read(src.join("big")).unwrap(),
            "{keys:?}: big's bytes"
        );
        assert!(listed.status.success(), "{keys:?}: ls -lR: {listed:?}");
    }
    assert_none_under_root(&[&log, &profile]);
    assert!(
        w.join(&log).is_file(),
        "--log {log}: not in the working directory"
    );
    let text = fs::read_to_string(w.join(&profile))
        .expect("--record-profile: not in the working directory");
    assert!(
        profile_ranges(&text) > 0,
        "the profile records the reads: {text}"
    );
}

/// The cache a detached mount of a URL fills (`--cache-dir`, `--fill`), the certificate authority
/// its daemon trusts for every request after the fork (`--ca-cert`), the profile it records and
/// the profile another mount replays, all relative: the cache in the working directory holds the
/// whole image, reads over HTTPS succeed in the daemon, and the replayed profile makes the files
/// it names readable from a fresh cache with the server gone.
#[test]
fn a_detached_mount_of_a_url_keeps_relative_paths_relative_to_the_caller() {
    if !oracle_guard(fuse_env()) || !oracle_guard(need_tool("openssl")) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (src, www) = (w.join("src"), w.join("www"));
    fs::create_dir(&src).unwrap();
    fs::create_dir(&www).unwrap();
    fs::create_dir(w.join("mnt")).unwrap();
    small_fixture::build(&src, 29, false);
    let big = pseudo_random(4 << 20, 29);
    fs::write(src.join("big"), &big).unwrap();
    build_ok(&src, &www.join("img"), &[]);
    sealfs_ok_in(w, &["keygen", "k"]);
    sealfs_ok_in(w, &["sign", "www/img", "--key", "k"]);
    let size = fs::metadata(www.join("img")).unwrap().len();
    let (_, cert, key) = tls_certificates(&w.join("tls")).unwrap();
    let https = match nginx_with(&www, &w.join("nginx"), Some((&cert, &key))) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let url = https.url("img");
    let (cache, cache2, profile) = (unique("cache"), unique("cache2"), unique("profile"));
    let _clean = CleanRoot(vec![cache.clone(), cache2.clone(), profile.clone()]);
    let _unmount = Unmount(w.join("mnt"));
    let cached = |dir: &str| -> u64 {
        let o = sealfs_ok_in(w, &["cache", "stats", "--json", "--cache-dir", dir]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["bytes"].as_u64().unwrap()
    };
    let mount = |extra: &[&str]| {
        let mut args = vec![
            "mount",
            &url,
            "mnt",
            "--key",
            "k.pub",
            "--ca-cert",
            "tls/ca.pem",
        ];
        args.extend_from_slice(extra);
        sealfs_ok_in(w, &args);
    };

    // Record while filling: a read over HTTPS in the daemon, the whole image into ./cache.
    mount(&[
        "--cache-dir",
        &cache,
        "--fill",
        "--record-profile",
        &profile,
    ]);
    let read = cat(&w.join("mnt/big"));
    let (mut last, t) = (0, Instant::now());
    while t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
        let now = cached(&cache);
        if now == last && now >= size * 9 / 10 {
            break;
        }
        last = now;
    }
    umount(w, Some(&w.join(&profile)));
    assert!(
        read.status.success(),
        "cat big through the mount (HTTPS after the fork): {read:?}"
    );
    assert!(read.stdout == big, "big's bytes");
    assert_none_under_root(&[&cache, &profile]);
    println!("--fill: {last} bytes in ./{cache} for a {size}-byte image");
    assert!(
        last >= size * 9 / 10,
        "./{cache} holds {last} bytes of {size}"
    );
    let text = fs::read_to_string(w.join(&profile))
        .expect("--record-profile: not in the working directory");
    assert!(
        profile_ranges(&text) > 0,
        "the profile records the reads: {text}"
    );

    // Replay into a fresh ./cache2, then read with the server gone: what the profile named is there.
    mount(&["--cache-dir", &cache2, "--profile", &profile]);
    let t = Instant::now();
    let mut last = 0;
    while t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
        let now = cached(&cache2);
        if now == last && now as usize >= big.len() {
            break;
        }
        last = now;
    }
    umount(w, None);
    drop(https);
    assert_none_under_root(&[&cache2]);
    let offline = sealfs_in(
        w,
        &[
            "cat",
            "--key",
            "k.pub",
            "--cache-dir",
            &cache2,
            &url,
            "/big",
        ],
    );
    assert!(
        offline.status.success() && offline.stdout == big,
        "big, read by the recorded mount, from ./{cache2} offline: {}",
        String::from_utf8_lossy(&offline.stderr)
    );
}
