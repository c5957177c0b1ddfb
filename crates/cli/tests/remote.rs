//! Remote images: every reading command on `http://` (a real nginx on loopback) and `s3://` (a real
//! S3 server, versitygw, over a directory) equals the same command on the local file, for a plain
//! and a compressed image, authenticated by `--digest` and by `--key`; a URL without either is
//! refused (exit 2) unless `--self-consistent` is given, which then says what was established; and
//! a cold `cat` of a large file fetches hash blocks only beside its data (counted in nginx's log).

mod common;

use common::mount::processes_naming;
use common::servers::{nginx, nginx_with, tls_certificates, versitygw, FaultProxy, Server};
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const BIG: usize = 8 << 20;

fn sealfs() -> Command {
    let mut c = Command::new(sealfs_bin());
    c.env("TZ", "UTC").env("LC_ALL", "C").stdin(Stdio::null());
    // The persistent cache of remote images: this test process's own, not the user's.
    c.env("SEALFS_CACHE_DIR", cache_dir());
    c
}

/// A cache directory for this test process, removed at its end by nobody: under the temp dir.
fn cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("sealfs-test-cache-{}", std::process::id()))
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `sealfs ARGS` with `env`; prints the command.
fn sealfs_run(args: &[&str], env: &[(&'static str, String)]) -> Output {
    let mut c = sealfs();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run(&mut c)
}

/// The image digest `sealfs digest` prints for a local image.
fn digest_of(image: &Path) -> String {
    let o = sealfs_ok(&["digest", s(image)]);
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

fn sealfs_ok(args: &[&str]) -> Output {
    let o = sealfs_run(args, &[]);
    assert!(
        o.status.success(),
        "sealfs {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// The images and what authenticates them.
struct Images {
    dir: tempfile::TempDir,
    /// Regular files of the tree (paths in the image).
    files: Vec<String>,
    /// Paths to `stat`: the root, directories, a few files and links.
    paths: Vec<String>,
    public_key: PathBuf,
}

impl Images {
    fn local(&self, name: &str) -> PathBuf {
        self.dir.path().join("www").join(name)
    }
}

/// The small fixture tree plus an 8 MiB random file, built plain and compressed (lz4), both signed
/// with an openssl-made Ed25519 key; the images in `www/`, a copy for S3 in `s3/bucket/`.
fn images() -> Images {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("src");
    fs::create_dir_all(&src).unwrap();
    small_fixture::build(&src, 7, false);
    fs::write(src.join("big"), pseudo_random(BIG, 7)).unwrap();
    let www = d.join("www");
    let bucket = d.join("s3/bucket");
    fs::create_dir_all(&www).unwrap();
    fs::create_dir_all(&bucket).unwrap();
    let key = d.join("key.pem");
    let public_key = d.join("key.pub");
    for args in [
        &["genpkey", "-algorithm", "ed25519", "-out", s(&key)][..],
        &["pkey", "-in", s(&key), "-pubout", "-out", s(&public_key)][..],
    ] {
        let o = run(Command::new("openssl").args(args));
        assert!(o.status.success(), "openssl {args:?}");
    }
    for (name, args) in [
        ("plain", &[][..]),
        ("z", &["-z", "lz4", "-C", "65536"][..]),
        // Inodes in a metabox (fetched as pclusters of the metabox inode), small files packed.
        (
            "zm",
            &["-z", "lz4", "-C", "65536", "-E", "fragments", "-m", "4096"][..],
        ),
    ] {
        let img = www.join(name);
        build_ok(&src, &img, args);
        sealfs_ok(&["sign", s(&img), "--key", s(&key)]);
        fs::copy(&img, bucket.join(name)).unwrap();
    }
    let mut files = Vec::new();
    let mut paths = vec!["/".to_string()];
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let rel = format!("/{}", e.path().strip_prefix(&src).unwrap().display());
            let t = e.file_type().unwrap();
            if t.is_dir() {
                paths.push(rel.clone());
                stack.push(e.path());
            } else if t.is_file() && rel.is_ascii() {
                files.push(rel.clone());
            }
            if paths.len() < 12 && !t.is_dir() && rel.is_ascii() {
                paths.push(rel);
            }
        }
    }
    Images {
        dir,
        files,
        paths,
        public_key,
    }
}

/// Starts nginx over `www` and, when it can be had, versitygw over `s3`; `None` (after SKIP)
/// without nginx.
fn servers(images: &Images) -> Option<(Server, Option<Server>)> {
    if !oracle_guard(need_tool("openssl")) {
        return None;
    }
    let d = images.dir.path();
    let http = match nginx(&d.join("www"), &d.join("nginx")) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return None;
        }
    };
    let s3 = match versitygw(&d.join("s3"), d) {
        Ok(s) => Some(s),
        Err(e) => {
            oracle_guard(Err(e));
            None
        }
    };
    Some((http, s3))
}

/// What a command showed, with the image's name replaced by IMAGE.
fn shown(o: &Output, image: &str) -> (Option<i32>, String, String) {
    let clean = |b: &[u8]| String::from_utf8_lossy(b).replace(image, "IMAGE");
    (o.status.code(), clean(&o.stdout), clean(&o.stderr))
}

/// `sealfs CMD [auth] IMAGE ARGS` on the local image and on the URL: the same exit code, output
/// and messages (the image's name aside). Returns the local output.
fn same(
    cmd: &str,
    local: &Path,
    url: &str,
    auth: &[String],
    args: &[&str],
    env: &[(&'static str, String)],
) -> Output {
    fn with<'a>(
        cmd: &'a str,
        auth: &'a [String],
        image: &'a str,
        args: &[&'a str],
    ) -> Vec<&'a str> {
        let mut a: Vec<&str> = vec![cmd];
        a.extend(auth.iter().map(String::as_str));
        a.push(image);
        a.extend(args);
        a
    }
    let ours = sealfs_run(&with(cmd, auth, s(local), args), &[]);
    let theirs = sealfs_run(&with(cmd, auth, url, args), env);
    assert!(
        shown(&ours, s(local)) == shown(&theirs, url),
        "sealfs {cmd} {args:?}: {url} differs from the local file\nlocal: {:?}\nremote: {:?}",
        shown(&ours, s(local)),
        shown(&theirs, url)
    );
    ours
}

/// Two extracted trees hold the same bytes: every regular file's content and every link's target
/// (types, modes, owners and times are compared by the caller's `ls -lAR` listing).
fn assert_same_trees(a: &Path, b: &Path) {
    for e in fs::read_dir(a).unwrap() {
        let e = e.unwrap();
        let (x, y) = (e.path(), b.join(e.file_name()));
        let t = e.file_type().unwrap();
        if t.is_dir() {
            assert_same_trees(&x, &y);
        } else if t.is_symlink() {
            assert_eq!(
                fs::read_link(&x).unwrap(),
                fs::read_link(&y).unwrap(),
                "{x:?}"
            );
        } else if t.is_file() {
            assert!(
                fs::read(&x).unwrap() == fs::read(&y).unwrap(),
                "{x:?} differs"
            );
        }
    }
}

/// Every reading command on `url` against the local image.
fn every_command_equal(images: &Images, name: &str, url: &str, env: &[(&'static str, String)]) {
    let local = images.local(name);
    let digest = digest_of(&local);
    let digest = digest.trim().to_string();
    let auths = [
        vec!["--digest".to_string(), digest.clone()],
        vec!["--key".to_string(), s(&images.public_key).to_string()],
    ];
    for auth in &auths {
        println!("{url} ({name}) with {auth:?}");
        let o = same("ls", &local, url, auth, &["-lAR", "/"], env);
        assert!(o.status.success() && o.stdout.len() > 1000);
        let files: Vec<&str> = images.files.iter().map(String::as_str).collect();
        let o = same("cat", &local, url, auth, &files, env);
        assert!(o.status.success() && o.stdout.len() > BIG);
        for path in &images.paths {
            let o = same("stat", &local, url, auth, &[path], env);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let o = same("getfattr", &local, url, auth, &["-R", "-h", "/"], env);
        assert!(o.status.success());
        let o = same("inspect", &local, url, auth, &[], env);
        let trust = String::from_utf8_lossy(&o.stdout)
            .lines()
            .find(|l| l.contains("authenticated"))
            .map(str::to_string);
        assert!(trust.is_some(), "inspect shows the trust line");
        let verify = same("verify", &local, url, auth, &[], env);
        assert_eq!(verify.status.code(), Some(0));
        // Extract both, and compare the trees byte for byte (content, modes, times, links).
        let out = images.dir.path().join("out");
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(&out).unwrap();
        let (a, b) = (out.join("local"), out.join("remote"));
        let mut args: Vec<&str> = vec!["extract"];
        args.extend(auth.iter().map(String::as_str));
        let ours = sealfs_run(&[&args[..], &[s(&local), s(&a)]].concat(), &[]);
        let theirs = sealfs_run(&[&args[..], &[url, s(&b)]].concat(), env);
        assert_eq!(ours.status.code(), Some(0));
        assert_eq!(theirs.status.code(), Some(0), "{theirs:?}");
        // The host's directory sizes depend on the order of creation: left out.
        let listing = |dir: &Path| -> Vec<String> {
            let out = run(Command::new("ls")
                .args(["-lAR", "--time-style=+%s.%N"])
                .current_dir(dir))
            .stdout;
            String::from_utf8_lossy(&out)
                .lines()
                .filter(|l| !l.starts_with("total "))
                .map(|l| {
                    let mut f: Vec<&str> = l.split_whitespace().collect();
                    if l.starts_with('d') && f.len() > 4 {
                        f[4] = "-";
                    }
                    f.join(" ")
                })
                .collect()
        };
        let (la, lb) = (listing(&a), listing(&b));
        let differ: Vec<_> = la.iter().zip(&lb).filter(|(x, y)| x != y).collect();
        assert!(la == lb, "extracted listings differ: {differ:?}");
        assert_same_trees(&a, &b);
    }
    let o = same("digest", &local, url, &[], &[], env);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), digest);
}

#[test]
fn every_reading_command_over_http_and_s3_equals_the_local_file() {
    let images = images();
    let Some((http, s3)) = servers(&images) else {
        return;
    };
    for name in ["plain", "z", "zm"] {
        every_command_equal(&images, name, &http.url(name), &[]);
        if let Some(s3) = &s3 {
            every_command_equal(&images, name, &format!("s3://bucket/{name}"), &s3.s3_env());
        }
    }
}

#[test]
fn a_url_without_digest_or_key_is_refused_unless_self_consistent_is_asked_for() {
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let url = http.url("plain");
    let o = sealfs_run(&["ls", &url, "/"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("a remote image is read only against an expected digest or key")
            && err.contains("--self-consistent"),
        "{err}"
    );
    assert!(http.requests().is_empty(), "refused before any request");
    let o = sealfs_run(&["ls", "--self-consistent", &url, "/"], &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("{url}: self-consistent only")),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("big"));
}

/// HTTPS from nginx whose certificate an `openssl`-made private CA signed: refused (a
/// certificate error, exit 2) until `--ca-cert` names that CA, then every byte equals the local
/// image's; a wrong digest is still refused over TLS.
#[test]
fn https_with_a_private_ca_is_read_with_ca_cert() {
    let images = images();
    if !oracle_guard(need_tool("openssl")) {
        return;
    }
    let d = images.dir.path();
    let (ca, cert, key) = tls_certificates(&d.join("tls")).unwrap();
    let https = match nginx_with(&d.join("www"), &d.join("nginx-tls"), Some((&cert, &key))) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let url = https.url("z");
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let local = images.local("z");
    let digest = digest_of(&local);
    let no_cache = ["--no-cache"];
    let cat = |extra: &[&str]| {
        let mut args = vec!["cat", "--digest", digest.trim()];
        args.extend_from_slice(&no_cache);
        args.extend_from_slice(extra);
        args.extend([url.as_str(), "/big"]);
        sealfs_run(&args, &[])
    };
    // The system's roots do not include the private CA: the image cannot be reached (exit 2).
    let o = cat(&[]);
    let err = String::from_utf8_lossy(&o.stderr).to_lowercase();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("certificate"),
        "the error names the certificate: {err}"
    );
    assert!(o.stdout.is_empty());
    // With the CA: the same bytes as the local image gives.
    let ca_arg = ca.to_str().unwrap();
    let o = cat(&["--ca-cert", ca_arg]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stdout == pseudo_random(BIG, 7),
        "the file's bytes over HTTPS"
    );
    let local_ls = sealfs_run(&["ls", "-lR", s(&local), "/"], &[]);
    let remote_ls = sealfs_run(
        &[
            "ls",
            "-lR",
            "--no-cache",
            "--ca-cert",
            ca_arg,
            "--digest",
            digest.trim(),
            &url,
            "/",
        ],
        &[],
    );
    assert!(remote_ls.status.success());
    assert_eq!(remote_ls.stdout, local_ls.stdout);
    assert!(
        https.requests().iter().any(|l| l.contains(" 206 ")),
        "range requests reached nginx over TLS: {:?}",
        https.requests()
    );
    // Trust is still the digest's: a wrong one is refused.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let o = sealfs_run(
        &[
            "ls",
            "--no-cache",
            "--ca-cert",
            ca_arg,
            "--digest",
            &wrong,
            &url,
            "/",
        ],
        &[],
    );
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A mount's daemon builds its own client after the fork, with the CA too.
    if fuse_env().is_ok() {
        let mnt = d.join("mnt-tls");
        fs::create_dir(&mnt).unwrap();
        let _unmount = Unmount(&mnt);
        let _unmount = Unmount(&mnt);
        let o = sealfs_run(
            &[
                "mount",
                "--ca-cert",
                ca_arg,
                "--digest",
                digest.trim(),
                &url,
                s(&mnt),
            ],
            &[],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let read = run(Command::new("timeout")
            .args(["60", "cat"])
            .arg(mnt.join("big")));
        let umount = sealfs_run(&["umount", s(&mnt)], &[]);
        assert!(
            read.stdout == pseudo_random(BIG, 7),
            "the file's bytes through the mount"
        );
        assert!(umount.status.success());
    } else {
        oracle_guard(fuse_env());
    }
    // A file that is not a certificate is named.
    let o = sealfs_run(
        &[
            "ls",
            "--no-cache",
            "--ca-cert",
            s(&local),
            "--digest",
            digest.trim(),
            &url,
            "/",
        ],
        &[],
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("certificate authority"), "{err}");
}

/// A server certificate the client does not trust fails the open at its first TLS handshake:
/// nginx sees one handshake broken off per object the open asks for (the image; with `--key` also
/// `URL.sig`, fetched beside it), where object_store retried each 5 times and the open then asked
/// again for the object's metadata, 5 times more (12 handshakes, 0.7 s). The refusal still names
/// the certificate, exit 2, nothing on stdout. (A refused connection is still retried: the remote
/// crate's `a_refused_connection_is_retried_until_the_server_listens`.)
#[test]
fn an_untrusted_certificate_fails_at_the_first_handshake_without_retries() {
    if !oracle_guard(need_tool("openssl")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, cert, key) = tls_certificates(&d.join("tls")).unwrap();
    fs::create_dir(d.join("www")).unwrap();
    let https = match nginx_with(&d.join("www"), &d.join("nginx"), Some((&cert, &key))) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let signing_key = d.join("key.pem");
    let public_key = d.join("key.pub");
    for args in [
        &["genpkey", "-algorithm", "ed25519", "-out", s(&signing_key)][..],
        &[
            "pkey",
            "-in",
            s(&signing_key),
            "-pubout",
            "-out",
            s(&public_key),
        ][..],
    ] {
        assert!(run(Command::new("openssl").args(args)).status.success());
    }
    // The handshake fails before any byte of the image is asked for: no image is needed.
    let url = https.url("x.sealfs");
    let digest = format!("sha256:{}", "0".repeat(64));
    // Handshakes nginx saw broken off with an alert, once there are at least `n` (nginx logs one
    // when it reads the alert, which may be just after the client exits) or after 5 s.
    let broken_off = |n: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let seen = https
                .errors()
                .iter()
                .filter(|l| l.contains("SSL_do_handshake() failed"))
                .count();
            if seen >= n || std::time::Instant::now() >= deadline {
                // Late ones (a retry) would have been logged by now too.
                std::thread::sleep(std::time::Duration::from_millis(100));
                return https
                    .errors()
                    .iter()
                    .filter(|l| l.contains("SSL_do_handshake() failed"))
                    .count();
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    for (options, objects) in [
        (&["--digest", digest.as_str(), "--no-cache"][..], 1),
        // With the persistent cache, which has no kept tail of the image to stand in.
        (&["--digest", digest.as_str()][..], 1),
        (&["--key", s(&public_key), "--no-cache"][..], 2),
    ] {
        let before = broken_off(0);
        let mut args = vec!["ls"];
        args.extend_from_slice(options);
        args.extend([url.as_str(), "/"]);
        let start = std::time::Instant::now();
        let o = sealfs_run(&args, &[]);
        let took = start.elapsed();
        let err = String::from_utf8_lossy(&o.stderr).to_lowercase();
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("invalid peer certificate: unknownissuer"),
            "the refusal names the certificate: {err}"
        );
        assert!(o.stdout.is_empty());
        let handshakes = broken_off(before + objects) - before;
        assert_eq!(
            handshakes, objects,
            "{options:?}: one handshake per object, none retried (failed in {took:?}): {err}"
        );
        assert!(
            https.errors().iter().any(|l| l.contains("alert number 48")),
            "the client refused the certificate (unknown CA): {:?}",
            https.errors()
        );
    }
    assert!(https.requests().is_empty(), "no request got through");
}

/// An image signed only detached (`sealfs sign --detached` writes `IMAGE.sig`) and served with
/// its `.sig` beside it: `--key` finds `URL.sig` as it finds `IMAGE.sig` beside a local file, for
/// reading commands, `inspect` and `verify`; without the `.sig` on the server the image is
/// refused as unsigned, like the local file without its `.sig`.
#[test]
fn detached_signatures_are_fetched_from_beside_the_url() {
    let images = images();
    let Some((http, s3)) = servers(&images) else {
        return;
    };
    let d = images.dir.path();
    let src = d.join("src");
    let img = d.join("www/detached");
    build_ok(&src, &img, &[]);
    sealfs_ok(&[
        "sign",
        s(&img),
        "--key",
        s(&d.join("key.pem")),
        "--detached",
    ]);
    let sig = d.join("www/detached.sig");
    assert!(sig.is_file(), "sign --detached wrote IMAGE.sig");
    let key = s(&images.public_key);
    let url = http.url("detached");
    let mut urls = vec![url.clone()];
    if s3.is_some() {
        fs::copy(&img, d.join("s3/bucket/detached")).unwrap();
        fs::copy(&sig, d.join("s3/bucket/detached.sig")).unwrap();
        urls.push("s3://bucket/detached".to_string());
    }
    let env: Vec<(&str, String)> = s3.as_ref().map(|s| s.s3_env()).unwrap_or_default();
    let local = sealfs_run(&["ls", "-l", "--key", key, s(&img), "/"], &[]);
    assert!(
        local.status.success(),
        "{}",
        String::from_utf8_lossy(&local.stderr)
    );
    for u in &urls {
        let o = sealfs_run(&["ls", "-l", "--no-cache", "--key", key, u, "/"], &env);
        assert!(
            o.status.success(),
            "{u}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(o.stdout, local.stdout, "{u}");
        let o = sealfs_run(&["verify", "--key", key, u], &env);
        assert!(
            o.status.success(),
            "verify {u}: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        let o = sealfs_run(&["inspect", "--no-cache", "--key", key, u], &env);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && out.contains("signed by"),
            "inspect {u}: {out}"
        );
    }
    assert!(
        http.requests()
            .iter()
            .any(|l| l.starts_with("GET /detached.sig ")),
        "{:?}",
        http.requests()
    );
    // Without the .sig beside it, the image is unsigned: refused, as the local file would be.
    fs::remove_file(&sig).unwrap();
    let _ = fs::remove_file(d.join("s3/bucket/detached.sig"));
    let local = sealfs_run(&["ls", "--key", key, s(&img), "/"], &[]);
    assert_eq!(local.status.code(), Some(1));
    for u in &urls {
        let o = sealfs_run(&["ls", "--no-cache", "--key", key, u, "/"], &env);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{u}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&o.stderr).replace(u.as_str(), "IMAGE"),
            String::from_utf8_lossy(&local.stderr).replace(s(&img), "IMAGE"),
            "the same refusal"
        );
    }
}

#[test]
fn a_cold_cat_over_http_fetches_hash_blocks_only_beside_its_data() {
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let local = images.local("plain");
    let digest = digest_of(&local);
    let url = http.url("plain");
    let erofs_length = sealfs_reader::open(&local, &sealfs_reader::OpenOptions::new())
        .unwrap()
        .erofs_length;
    // A cold `cat --stats` (an empty cache); its counters, and nginx's log of its requests.
    let cold_cat = |env: &[(&'static str, String)]| {
        let cold = tempfile::tempdir().unwrap();
        let before = http.requests().len();
        let o = sealfs_run(
            &[
                "cat",
                "--stats",
                "--cache-dir",
                s(cold.path()),
                "--digest",
                digest.trim(),
                &url,
                "/big",
            ],
            env,
        );
        assert!(o.status.success());
        assert!(o.stdout == pseudo_random(BIG, 7), "the file's bytes");
        let stats = String::from_utf8_lossy(&o.stderr).into_owned();
        let counter = |name: &str| -> usize {
            stats
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} in {stats}"))
        };
        // `cat --stats` lets readahead in flight end before it counts; nginx logs a request just
        // after its last byte is sent, which can be a moment after `cat` has it.
        let requests = counter("remote_requests ");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while http.requests().len() < before + requests && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let log = http.requests()[before..].to_vec();
        assert_eq!(requests, log.len(), "{stats}");
        (counter("remote_round_trips "), log)
    };

    let (round_trips, log) = cold_cat(&[]);
    let mut data = 0;
    let mut hashes = 0;
    for line in &log {
        let f: Vec<&str> = line.split(' ').collect();
        assert!(f[0] == "GET" && f[3] == "206", "{line}");
        let range = f[2].strip_prefix("bytes=").unwrap();
        match range.split_once('-').unwrap() {
            ("", _) => {} // the suffix range at open
            (a, _) if a.parse::<u64>().unwrap() < erofs_length => data += 1,
            _ => hashes += 1,
        }
    }
    println!(
        "cold cat of 8 MiB: {} requests: 1 at open (suffix range), {data} for data (superblock, \
         inodes, file; a long range in parts), {hashes} for hash blocks only, each in the batch of \
         a data request; {round_trips} round trips: {log:?}",
        log.len()
    );
    assert!(log[0].contains("bytes=-65536"), "{log:?}");
    // Hash requests add no round trip: after the one at open, every round trip carries data.
    assert!(
        round_trips <= 1 + data,
        "{round_trips} round trips, {data} data requests"
    );
    assert!(hashes <= data, "hash requests only beside data requests");
    assert!(data >= BIG / (2 << 20), "the file's data");
    // Fetched after the data instead, the same hash blocks cost round trips of their own.
    let (dependent, _) = cold_cat(&[("SEALFS_DEPENDENT_HASH_FETCH", "1".to_string())]);
    println!("with hash blocks fetched after the data: {dependent} round trips");
    assert!(dependent > round_trips, "{dependent} against {round_trips}");
}

/// A detached seal (the Merkle tree in its own object) is read from its URL (`--sidecar URL`):
/// listings, file bytes and `verify` equal those of the local image with its local sidecar, and
/// nginx served both objects by range. (That a read fetches its data and its hash blocks at once,
/// one from each object, is checked in the reader: `a_detached_remote_seal_fetches_data_and_
/// hashes_at_once`.)
#[test]
fn a_detached_seal_is_read_from_its_sidecar_url() {
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let d = images.dir.path();
    let (img, seal) = (
        d.join("www/detached-seal"),
        d.join("www/detached-seal.seal"),
    );
    let built = sealfs_ok(&[
        "build",
        "-q",
        "--sidecar",
        s(&seal),
        s(&d.join("src")),
        s(&img),
    ]);
    let digest = String::from_utf8_lossy(&built.stdout).trim().to_string();
    let (url, seal_url) = (http.url("detached-seal"), http.url("detached-seal.seal"));
    let files: Vec<&str> = images.files.iter().map(String::as_str).collect();
    let before = http.requests().len();
    for (cmd, args) in [
        ("ls", vec!["-lAR", "/"]),
        ("cat", files.clone()),
        ("verify", vec![]),
    ] {
        let run_on = |image: &str, sidecar: &str| {
            let mut a = vec![cmd, "--digest", &digest, "--sidecar", sidecar, image];
            if cmd != "verify" {
                a.insert(1, "--no-cache"); // cold: every block over the link
            }
            a.extend(&args);
            sealfs_run(&a, &[])
        };
        let ours = run_on(s(&img), s(&seal));
        let theirs = run_on(&url, &seal_url);
        assert_eq!(ours.status.code(), Some(0), "{cmd}: {ours:?}");
        assert_eq!(theirs.status.code(), Some(0), "{cmd} over http: {theirs:?}");
        if cmd != "verify" {
            assert!(ours.stdout == theirs.stdout, "{cmd}: the output differs");
        }
        if cmd == "cat" {
            assert!(ours.stdout.len() > BIG);
        }
    }
    let log = http.requests()[before..].to_vec();
    let served = |path: &str| {
        log.iter()
            .filter(|l| l.split(' ').nth(1) == Some(path) && l.split(' ').nth(3) == Some("206"))
            .count()
    };
    println!("{} requests: {log:?}", log.len());
    assert!(served("/detached-seal") > 0, "{log:?}");
    assert!(served("/detached-seal.seal") > 0, "{log:?}");
}

/// `sealfs mount URL` forks its daemon after opening the image: the daemon must build its own
/// client (the parent's runtime threads and connections do not exist in it; reads used to hang).
#[test]
fn a_daemon_mount_of_a_url_reads_after_the_fork() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let local = images.local("z");
    let digest = digest_of(&local);
    let mnt = images.dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    let url = http.url("z");
    let o = sealfs_run(&["mount", "--digest", digest.trim(), &url, s(&mnt)], &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Read in a child with a time limit, so that a hang fails the test instead of stalling it.
    let read = run(Command::new("timeout")
        .args(["60", "cat"])
        .arg(mnt.join("big")));
    let listed = run(Command::new("timeout").args(["60", "ls"]).arg(&mnt));
    // `--xattrs=auto` checks the image for xattrs once its metadata is in the cache: the check
    // ends (the fixture has xattrs, so they stay answered).
    let xattrs = || {
        let o = sealfs_run(&["stats", "--json", s(&mnt)], &[]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v["fuse"]["xattrs"].as_str().unwrap_or_default().to_string()
    };
    let t = std::time::Instant::now();
    while xattrs().contains("while checking") && t.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let state = xattrs();
    let umount = sealfs_run(&["umount", s(&mnt)], &[]);
    assert_eq!(
        state, "answered from the image",
        "the check of a remote image ended"
    );
    assert!(read.status.success(), "cat through the mount: {read:?}");
    assert!(read.stdout == pseudo_random(BIG, 7), "the file's bytes");
    assert!(String::from_utf8_lossy(&listed.stdout).contains("big"));
    assert!(umount.status.success(), "{umount:?}");
    // Readahead from several FUSE threads, and the metadata fetched ahead, fetch a block once:
    // the whole run costs little more than the object (it was over three times before readahead
    // jobs claimed their blocks).
    let fetched: u64 = http
        .requests()
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    let size = fs::metadata(&local).unwrap().len();
    println!("mount, cat and ls of a {size}-byte image: {fetched} bytes fetched");
    assert!(
        fetched * 4 <= size * 5,
        "{fetched} bytes fetched for {size}"
    );
}

#[test]
fn a_mount_daemon_that_read_only_from_the_cache_exits_when_unmounted() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let local = images.local("z");
    let digest = digest_of(&local);
    let cache = images.dir.path().join("cache");
    let url = http.url("z");
    let cache_s = s(&cache).to_string();
    // The cache is filled first, so the daemon (forked after its parent opened the image) never
    // needs the network: it ends with its parent's client, whose threads it does not have.
    let filled = sealfs_run(
        &[
            "cat",
            "--cache-dir",
            &cache_s,
            "--digest",
            digest.trim(),
            &url,
            "/big",
        ],
        &[],
    );
    assert!(
        filled.status.success(),
        "{}",
        String::from_utf8_lossy(&filled.stderr)
    );
    let mnt = images.dir.path().join("mnt-cached");
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    let o = sealfs_run(
        &[
            "mount",
            "--cache-dir",
            &cache_s,
            "--fill=off",
            "--digest",
            digest.trim(),
            &url,
            s(&mnt),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let daemons = processes_naming(&mnt);
    assert_eq!(daemons.len(), 1, "one mount daemon: {daemons:?}");
    http.clear_requests();
    let read = run(Command::new("timeout")
        .args(["60", "cat"])
        .arg(mnt.join("big")));
    assert!(read.stdout == pseudo_random(BIG, 7), "the file's bytes");
    let umount = sealfs_run(&["umount", s(&mnt)], &[]);
    assert!(umount.status.success(), "{umount:?}");
    let left = still_running_after(&daemons, std::time::Duration::from_secs(20));
    assert!(
        left.is_empty(),
        "the mount daemon {left:?} still runs 20 s after its unmount"
    );
}

/// Root and /dev/fuse, for the tests that mount.
fn fuse_env() -> Result<(), String> {
    root_env().and_then(|()| {
        Path::new("/dev/fuse")
            .exists()
            .then_some(())
            .ok_or_else(|| "/dev/fuse missing (no FUSE)".to_string())
    })
}

/// Two extracted trees hold the same regular files (by `sha256sum`), links (by target) and
/// other entries (by type), as GNU findutils and coreutils see them.
fn same_tree(a: &Path, b: &Path) {
    let describe = |dir: &Path| {
        let o = run(Command::new("sh")
            .arg("-c")
            .arg(
                "find . -type f -print0 | sort -z | xargs -0 -r sha256sum; \
                 find . ! -type f -printf '%y %p %l\\n' | sort",
            )
            .current_dir(dir));
        assert!(o.status.success());
        o.stdout
    };
    let (da, db) = (describe(a), describe(b));
    assert!(!da.is_empty());
    assert!(
        da == db,
        "trees differ:\n{}\n---\n{}",
        String::from_utf8_lossy(&da),
        String::from_utf8_lossy(&db)
    );
}

/// `sealfs cache stats --json` of `dir`: (digest, blocks) per image, and the total bytes.
fn cache_stats(dir: &Path) -> (Vec<(String, u64)>, u64) {
    let o = sealfs_ok(&["cache", "stats", "--json", "--cache-dir", s(dir)]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let images = v["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["digest"].as_str().unwrap().to_string(),
                i["blocks"].as_u64().unwrap(),
            )
        })
        .collect();
    (images, v["bytes"].as_u64().unwrap())
}

/// The persistent cache through the command line: a remote image read once reads again with the
/// server gone (extract and ls equal the local file's); `sealfs cache verify` finds a damaged
/// block and deletes it, after which the read that needs it fails (the server being gone) instead
/// of returning it; a process killed while filling the cache leaves only blocks that verify; prune
/// empties it.
#[test]
fn the_cache_serves_a_remote_image_offline_and_never_a_damaged_block() {
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let local = images.local("plain");
    let digest = digest_of(&local);
    let digest = digest.trim();
    let url = http.url("plain");
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let c = s(&cache);
    let listing = |image: &str| {
        let o = sealfs_run(
            &[
                "ls",
                "-lR",
                "--cache-dir",
                c,
                "--digest",
                digest,
                image,
                "/",
            ],
            &[],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let want_listing = listing(s(&local));
    let extract = |image: &str, to: &Path| {
        let o = sealfs_run(
            &[
                "extract",
                "-q",
                "--cache-dir",
                c,
                "--digest",
                digest,
                image,
                s(to),
            ],
            &[],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let want = work.path().join("want");
    extract(s(&local), &want);

    // Online: extract fills the cache.
    let first = work.path().join("first");
    extract(&url, &first);
    same_tree(&want, &first);
    let (cached, bytes) = cache_stats(&cache);
    println!("after one extract: {cached:?}, {bytes} bytes");
    assert_eq!(cached.len(), 1);
    assert_eq!(cached[0].0, digest);
    assert!(cached[0].1 as usize * 4096 >= BIG, "{cached:?}");
    let o = sealfs_run(&["cache", "verify", "--cache-dir", c], &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    // Offline: the server is gone; the same commands read from the cache alone.
    drop(http);
    let offline = work.path().join("offline");
    extract(&url, &offline);
    same_tree(&want, &offline);
    assert!(listing(&url) == want_listing, "offline listing differs");
    // With a key instead of the digest: `URL.sig` cannot be asked for, and the seal's own
    // signature (the image is signed in its seal) authenticates it.
    let o = sealfs_run(
        &[
            "ls",
            "-lR",
            "--cache-dir",
            c,
            "--key",
            s(&images.public_key),
            &url,
            "/",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        o.stdout == want_listing,
        "offline listing with --key differs"
    );

    // A cached block damaged on disk: verify finds and deletes it (exit 1); with the server gone
    // the read that needs it fails, and no damaged byte comes out.
    let image = fs::read(&local).unwrap();
    let big = pseudo_random(BIG, 7);
    let at = image
        .windows(64)
        .position(|w| w == &big[BIG / 2..BIG / 2 + 64])
        .unwrap();
    let block = (at / 4096) as u64;
    let chunk = cache
        .join(digest.replace(':', "-"))
        .join(format!("d{:012x}", block / 64));
    let mut bytes = fs::read(&chunk).unwrap();
    bytes[4096 + (block % 64) as usize * 4096 + at % 4096] ^= 0x10;
    fs::write(&chunk, &bytes).unwrap();
    let o = sealfs_run(&["cache", "verify", "--cache-dir", c], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(text.contains("1 damaged"), "{text}");
    let o = sealfs_run(
        &["cat", "--cache-dir", c, "--digest", digest, &url, "/big"],
        &[],
    );
    assert!(
        !o.status.success(),
        "read a deleted block with the server gone"
    );
    assert!(
        o.stdout.len() <= BIG / 2 && o.stdout[..] == big[..o.stdout.len()],
        "wrong bytes before the failure"
    );

    // A process killed mid-fill: what it claimed verifies.
    let images2 = self::images();
    let Some((http2, _)) = servers(&images2) else {
        return;
    };
    let url2 = http2.url("plain");
    let digest2 = digest_of(&images2.local("plain"));
    let cache2 = work.path().join("cache2");
    for delay_ms in [20, 60, 150] {
        let mut child = sealfs()
            .args([
                "cat",
                "--cache-dir",
                s(&cache2),
                "--digest",
                digest2.trim(),
                &url2,
                "/big",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
    }
    let o = sealfs_run(&["cache", "verify", "--cache-dir", s(&cache2)], &[]);
    println!(
        "after three SIGKILLs mid-fill: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = sealfs_run(
        &[
            "cat",
            "--cache-dir",
            s(&cache2),
            "--digest",
            digest2.trim(),
            &url2,
            "/big",
        ],
        &[],
    );
    assert!(o.status.success() && o.stdout == pseudo_random(BIG, 7));

    // Prune to nothing.
    sealfs_ok(&["cache", "prune", "--to", "0", "--cache-dir", c]);
    assert_eq!(cache_stats(&cache).1, 0);
}

/// Regular files under `dir` (relative paths, sorted), as `find -type f` lists them.
fn regular_files(dir: &Path) -> Vec<String> {
    let o = run(Command::new("find")
        .args([".", "-type", "f", "-size", "+0"])
        .current_dir(dir));
    let mut v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.contains('\u{fffd}'))
        .map(|l| l.trim_start_matches("./").to_string())
        .collect();
    v.sort();
    v
}

/// Unmounts what is left mounted at the path when dropped (a failed assertion), so that a test's
/// directory is removed without walking through the mount, and no daemon outlives the test.
struct Unmount<'a>(&'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        let mounted = fs::read_to_string("/proc/self/mounts").is_ok_and(|m| {
            m.lines()
                .any(|l| l.split(' ').nth(1) == Some(&*self.0.to_string_lossy()))
        });
        if mounted {
            let _ = Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
}

/// Faults on the way (503s, dropped connections, truncated bodies, latency): the reads are retried
/// and return the right bytes. One flipped byte in an answer, through a mount: the reads that need
/// it fail with EIO, the other files read, nothing of it is cached, and once the link is healthy
/// the same file reads. The object replaced by another image under the mount: reads of what was
/// not read yet fail, never returning the new object's bytes.
#[test]
fn faults_are_retried_or_fail_only_the_reads_they_touch() {
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let proxy = match FaultProxy::start(&http, work.path()) {
        Ok(p) => p,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let digest = digest_of(&images.local("plain"));
    let digest = digest.trim().to_string();
    let url = proxy.url("plain");
    let big = pseudo_random(BIG, 7);
    let cat = |file: &str| sealfs_run(&["cat", "--no-cache", "--digest", &digest, &url, file], &[]);

    for faults in [
        r#"{"fail": 2, "status": 503, "only_ranges": true}"#,
        r#"{"fail": 1, "status": 500, "only_ranges": true}"#,
        r#"{"drop": 2, "only_ranges": true}"#,
        r#"{"truncate": 2, "only_ranges": true}"#,
        r#"{"latency_ms": 30}"#,
    ] {
        proxy.set(faults);
        let o = cat("/big");
        let left = proxy.left();
        println!("{faults}: exit {:?}, left {left}", o.status.code());
        assert!(
            o.status.success() && o.stdout == big,
            "{faults}: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            proxy.log()
        );
        for kind in ["fail", "drop", "truncate"] {
            assert_eq!(
                left.get(kind).and_then(|v| v.as_u64()).unwrap_or(0),
                0,
                "{faults}: {kind} not used"
            );
        }
    }

    // The rest needs a FUSE mount.
    if !oracle_guard(fuse_env()) {
        return;
    }
    let mnt = work.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    let cache = work.path().join("cache");
    proxy.set("{}");
    let o = sealfs_run(
        &[
            "mount",
            "--digest",
            &digest,
            "--cache-dir",
            s(&cache),
            &url,
            s(&mnt),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |name: &str| {
        run(Command::new("timeout")
            .args(["60", "cat"])
            .arg(mnt.join(name)))
    };
    // Every answer with a byte flipped (nothing of big read or cached yet): the reads fail with
    // EIO, and no wrong byte comes out.
    proxy.set(r#"{"flip": 100000, "only_ranges": true}"#);
    let bad = read("big");
    assert!(
        !bad.status.success(),
        "flipped answers were read without error"
    );
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("Input/output error"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(
        bad.stdout.len() < BIG && bad.stdout[..] == big[..bad.stdout.len()],
        "wrong bytes"
    );
    // The link healthy again: the other files and big itself read right.
    proxy.set("{}");
    let local_dir = work.path().join("local");
    sealfs_ok(&[
        "extract",
        "-q",
        "--digest",
        &digest,
        s(&images.local("plain")),
        s(&local_dir),
    ]);
    let files = regular_files(&local_dir);
    assert!(files.len() > 6, "{files:?}");
    for name in files.iter().filter(|f| *f != "big").take(5) {
        let want = fs::read(local_dir.join(name)).unwrap();
        let got = read(name);
        assert!(
            got.status.success() && got.stdout == want,
            "{name} through the mount: {:?} {}",
            got.status,
            String::from_utf8_lossy(&got.stderr)
        );
    }
    let again = read("big");
    assert!(
        again.status.success() && again.stdout == big,
        "big after the fault"
    );
    // Nothing unverified was cached.
    let o = sealfs_run(&["cache", "verify", "--cache-dir", s(&cache)], &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    let umount = sealfs_run(&["umount", s(&mnt)], &[]);
    assert!(umount.status.success());

    // The object replaced by another image under a mount (without the persistent cache, so that
    // what was not read yet must come from the server): reading it fails, it never returns the
    // new object's bytes.
    let o = sealfs_run(
        &["mount", "--no-cache", "--digest", &digest, &url, s(&mnt)],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let first = read(&files[0]);
    assert!(first.status.success());
    let unread = files
        .iter()
        .skip(1)
        .filter(|f| *f != "big")
        .max_by_key(|f| fs::metadata(local_dir.join(f)).unwrap().len())
        .unwrap()
        .clone();
    let served = images.local("plain");
    let replacement = images.dir.path().join("replacement");
    fs::copy(images.local("z"), &replacement).unwrap();
    fs::rename(&replacement, &served).unwrap();
    let after = read(&unread);
    let umount = sealfs_run(&["umount", s(&mnt)], &[]);
    assert!(umount.status.success());
    {
        assert!(
            !after.status.success(),
            "{unread} read after the object changed: {} bytes",
            after.stdout.len()
        );
        let want = fs::read(local_dir.join(&unread)).unwrap();
        assert!(after.stdout.len() < want.len() && after.stdout[..] == want[..after.stdout.len()]);
        println!(
            "after the object was replaced: exit {:?}, {}",
            after.status.code(),
            String::from_utf8_lossy(&after.stderr).trim()
        );
    }
}

/// An access profile recorded by a mount (`--record-profile`) and replayed by another
/// (`--profile`, a fresh cache): the files the first mount read then read with the server gone,
/// one it did not read does not. A profile of another image is refused.
#[test]
fn a_recorded_profile_warms_a_fresh_cache() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let digest = digest_of(&images.local("plain"));
    let digest = digest.trim().to_string();
    let url = http.url("plain");
    let work = tempfile::tempdir().unwrap();
    let mnt = work.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    let local_dir = work.path().join("local");
    sealfs_ok(&[
        "extract",
        "-q",
        "--digest",
        &digest,
        s(&images.local("plain")),
        s(&local_dir),
    ]);
    let files: Vec<String> = regular_files(&local_dir)
        .into_iter()
        .filter(|f| f != "big")
        .collect();
    // Three files read; `big` (8 MiB of file data, nothing of it in the metadata) not.
    let (read, unread) = (&files[..3], &"big".to_string());
    let profile = work.path().join("profile");
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    let mount = |extra: &[&str], cache: &Path| {
        let mut args = vec!["mount", "--digest", &digest, "--cache-dir", s(cache)];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&url, s(&mnt)]);
        let o = sealfs_run(&args, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let umount = || {
        let o = sealfs_run(&["umount", s(&mnt)], &[]);
        assert!(o.status.success());
        // The daemon writes the profile as it ends.
        for _ in 0..200 {
            if profile.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let cat = |name: &str| {
        run(Command::new("timeout")
            .args(["60", "cat"])
            .arg(mnt.join(name)))
    };

    // Record: read three files.
    mount(&["--record-profile", s(&profile)], &a);
    for f in read {
        assert!(cat(f).status.success());
    }
    umount();
    let text = fs::read_to_string(&profile).expect("the profile was written");
    assert!(
        text.starts_with(&format!("sealfs-profile 1\ndigest {digest}\n")),
        "{text}"
    );
    println!(
        "profile of three files: {} ranges",
        text.lines().count() - 2
    );

    // Replay into a fresh cache; wait until the fetching settles.
    mount(&["--profile", s(&profile)], &b);
    let mut last = 0;
    for _ in 0..100 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = cache_stats(&b).1;
        if now == last && now > 0 {
            break;
        }
        last = now;
    }
    umount();

    // The server gone: the profiled files read from the cache, the unread one does not.
    drop(http);
    mount(&[], &b);
    for f in read {
        let got = cat(f);
        assert!(
            got.status.success() && got.stdout == fs::read(local_dir.join(f)).unwrap(),
            "{f} was in the profile but does not read offline"
        );
    }
    let missing = cat(unread);
    // The whole tree read with the server gone ends by itself, the unread files failing: each
    // read the cache cannot serve is tried once, not retried with backoff (and its failure is
    // named in the log without holding up the reply). About a second here; 60 s when every
    // failure was retried.
    let whole = run(Command::new("timeout")
        .args(["30", "tar", "-cf", "-", "."])
        .current_dir(&mnt));
    umount();
    assert_eq!(
        whole.status.code(),
        Some(2),
        "tar of the tree with the server gone: {}",
        String::from_utf8_lossy(&whole.stderr)
    );
    assert!(
        !missing.status.success(),
        "{unread} was not in the profile yet read offline"
    );

    // Another image's profile is refused.
    let other = work.path().join("other");
    fs::write(
        &other,
        text.replace(&digest, &format!("sha256:{}", "ab".repeat(32))),
    )
    .unwrap();
    let o = sealfs_run(
        &[
            "mount",
            "--digest",
            &digest,
            "--cache-dir",
            s(&b),
            "--profile",
            s(&other),
            &url,
            s(&mnt),
        ],
        &[],
    );
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("line 2"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `sealfs mount --fill`: the rest of a remote image is fetched into the cache in the background
/// after its metadata, with nothing read through the mount; the server gone, a new mount from
/// that cache then reads every file, equal to the local image's (GNU find and sha256sum).
/// Refused where nothing would be filled (`--no-cache`).
#[test]
fn a_filled_mount_reads_every_file_offline() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let local = images.local("plain");
    let digest = digest_of(&local);
    let digest = digest.trim().to_string();
    let url = http.url("plain");
    let work = tempfile::tempdir().unwrap();
    let (mnt, cache, local_dir) = (
        work.path().join("mnt"),
        work.path().join("cache"),
        work.path().join("local"),
    );
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    sealfs_ok(&[
        "extract",
        "-q",
        "--digest",
        &digest,
        s(&local),
        s(&local_dir),
    ]);
    let mount = |extra: &[&str]| {
        let mut args = vec!["mount", "--digest", &digest, "--cache-dir", s(&cache)];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&url, s(&mnt)]);
        sealfs_run(&args, &[])
    };
    let refused = mount(&["--fill", "--no-cache"]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--fill"));

    let o = mount(&["--fill"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Wait until the fill is done (with no reader, it starts 10 s after the metadata).
    for _ in 0..300 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        if fill_state(&mnt) == "done" {
            break;
        }
    }
    let last = cache_stats(&cache).1;
    assert!(sealfs_run(&["umount", s(&mnt)], &[]).status.success());
    let size = fs::metadata(&local).unwrap().len();
    println!("cache after --fill: {last} bytes for a {size}-byte image");
    assert!(last >= size * 9 / 10, "{last} bytes cached of {size}");

    drop(http);
    let o = mount(&[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let copied = work.path().join("copied");
    let cp = run(Command::new("timeout")
        .args(["60", "cp", "-a"])
        .arg(&mnt)
        .arg(&copied));
    assert!(sealfs_run(&["umount", s(&mnt)], &[]).status.success());
    assert!(cp.status.success(), "offline copy: {cp:?}");
    same_tree(&local_dir, &copied);
}

/// The kept tail of a remote image (`tails/` in the cache directory: the object's size and ETag, and
/// its last bytes, seal included), forged as someone who can write the cache directory would,
/// CRCs refixed: offline, a changed reserved field changes nothing, a changed root hash or size is
/// refused; the reads never return other bytes (format.md §11.2).
#[test]
fn a_forged_kept_tail_is_refused_or_changes_nothing() {
    let images = images();
    let Some((http, _)) = servers(&images) else {
        return;
    };
    let local = images.local("plain");
    let digest = digest_of(&local);
    let digest = digest.trim();
    let url = http.url("plain");
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let c = s(&cache);
    let listing = |image: &str| {
        sealfs_run(
            &[
                "ls",
                "-lR",
                "--cache-dir",
                c,
                "--digest",
                digest,
                image,
                "/",
            ],
            &[],
        )
    };
    let online = listing(&url);
    assert!(online.status.success(), "{online:?}");
    drop(http);
    let offline = listing(&url);
    assert!(offline.status.success(), "offline: {offline:?}");
    assert_eq!(offline.stdout, online.stdout);

    let tails: Vec<PathBuf> = fs::read_dir(cache.join("tails"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(tails.len(), 1, "{tails:?}");
    let kept = fs::read(&tails[0]).unwrap();
    let split = kept.windows(2).position(|w| w == b"\n\n").unwrap() + 2;
    let head = String::from_utf8(kept[..split].to_vec()).unwrap();
    let size: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("size "))
        .unwrap()
        .parse()
        .unwrap();
    // The seal at the end of the kept bytes: its offsets count from the object's start.
    let base = size - (kept.len() - split);
    let at = |abs: usize| split + abs - base;
    let forge = |f: &dyn Fn(&mut Vec<u8>, usize)| {
        let mut t = kept.clone();
        let footer = t.len() - 64;
        let h = at(u64::from_le_bytes(t[footer + 16..footer + 24].try_into().unwrap()) as usize);
        f(&mut t, h);
        let hcrc = crc32c::crc32c(&t[h..h + 512]);
        t[footer + 32..footer + 36].copy_from_slice(&hcrc.to_le_bytes());
        t[footer + 48..footer + 52].fill(0);
        let fcrc = crc32c::crc32c(&t[footer..]);
        t[footer + 48..footer + 52].copy_from_slice(&fcrc.to_le_bytes());
        fs::write(&tails[0], &t).unwrap();
        listing(&url)
    };
    let o = forge(&|t, h| t[h + 470] = 0x5a);
    assert!(o.status.success(), "reserved bytes: {o:?}");
    assert_eq!(
        o.stdout, online.stdout,
        "a forged reserved field changed the listing"
    );
    let o = forge(&|t, h| {
        t[h + 80] ^= 1;
        t[h + 144 + 16] ^= 1;
    });
    assert_ne!(
        o.status.code(),
        Some(0),
        "a forged root was accepted: {o:?}"
    );
    assert!(o.stdout.is_empty() || o.stdout == online.stdout);
    // A size that puts the seal elsewhere.
    let mut t = kept.clone();
    let text = head.replace(
        &format!("size {size}\n"),
        &format!("size {}\n", size + 4096),
    );
    t.splice(..split, text.into_bytes());
    fs::write(&tails[0], &t).unwrap();
    let o = listing(&url);
    assert_ne!(
        o.status.code(),
        Some(0),
        "a forged size was accepted: {o:?}"
    );
}

/// The bytes nginx sent (`$body_bytes_sent`, the last field of each line of its access log).
fn bytes_sent(http: &Server) -> u64 {
    http.requests()
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The fill's state a mount reports (`sealfs stats --json`: `verify.fill`).
fn fill_state(mnt: &Path) -> String {
    let o = sealfs_run(&["stats", "--json", s(mnt)], &[]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    v["verify"]["fill"].as_str().unwrap_or_default().to_string()
}

/// Reads each of `files` under `mnt` with `cat` (one process each, with a time limit), in order;
/// returns how long each took.
fn cat_each(mnt: &Path, files: &[String]) -> Vec<std::time::Duration> {
    files
        .iter()
        .map(|f| {
            let t = std::time::Instant::now();
            let o = run(Command::new("timeout")
                .args(["60", "cat"])
                .arg(mnt.join(f))
                .stdout(Stdio::null()));
            assert!(o.status.success(), "cat {f}: {o:?}");
            t.elapsed()
        })
        .collect()
}

/// `--fill=auto` (the default), seen from nginx's access log behind the fault proxy (10 ms before
/// each answer): one `cat` of a 16 MiB file (one sequential stream) leaves the fill armed and
/// fetches little more than the file; 16 `cat`s of small files here and there start it (the bytes
/// sent go past what was read), and it stops when the mount is unmounted (no request after);
/// over an image larger than three quarters of `--cache-size`, or with `--fill=off`, the same
/// reads fetch only about what they read. With the fill running (`--fill=on`, once its first piece
/// has come: with no reader it waits 10 s first; answers sharing one
/// link of 4 MB/s, nginx answering pieces of the fill meanwhile), each foreground read takes at
/// most one request's time (the largest request nginx answered meanwhile, over the link's rate,
/// and the latency) more than the median of the same reads without it (`--fill=off`).
#[test]
fn the_fill_starts_once_reads_scatter_and_holds_no_read_back() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (src, www) = (w.join("src"), w.join("www"));
    fs::create_dir_all(src.join("z")).unwrap();
    fs::create_dir_all(&www).unwrap();
    let small: Vec<String> = (0..48).map(|k| format!("f{k:02}")).collect();
    for (k, f) in small.iter().enumerate() {
        fs::write(src.join(f), pseudo_random(96 << 10, k as u64 + 100)).unwrap();
    }
    fs::write(src.join("z/big"), pseudo_random(16 << 20, 99)).unwrap();
    // Laid out after the big file: the fill, in order from the image's start, reaches them last.
    let timed: Vec<String> = (0..6).map(|k| format!("z/g{k}")).collect();
    for (k, f) in timed.iter().enumerate() {
        fs::write(src.join(f), pseudo_random(96 << 10, k as u64 + 200)).unwrap();
    }
    let image = www.join("img");
    let digest = String::from_utf8(sealfs_ok(&["build", "-q", s(&src), s(&image)]).stdout)
        .unwrap()
        .trim()
        .to_string();
    let size = fs::metadata(&image).unwrap().len();
    let http = match nginx(&www, &w.join("nginx")) {
        Ok(h) => h,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let proxy = match FaultProxy::start(&http, w) {
        Ok(p) => p,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    proxy.set(r#"{"latency_ms": 10}"#);
    let url = proxy.url("img");
    let mnt = w.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    // A fresh cache each time; the log emptied once the mount's metadata has come.
    let mut caches = 0;
    let mut mount = |extra: &[&str]| {
        caches += 1;
        let cache = w.join(format!("cache{caches}"));
        let mut args = vec!["mount", "--digest", &digest, "--cache-dir", s(&cache)];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[&url, s(&mnt)]);
        let o = sealfs_run(&args, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::thread::sleep(std::time::Duration::from_millis(300));
        http.clear_requests();
    };
    let umount = || assert!(sealfs_run(&["umount", s(&mnt)], &[]).status.success());
    // Every third small file from the last: no two in one request, no stream.
    let scattered: Vec<String> = small.iter().rev().step_by(3).cloned().collect();
    assert_eq!(scattered.len(), 16);
    let read = 16 * (96 << 10);

    // One sequential stream.
    mount(&[]);
    cat_each(&mnt, &["z/big".to_string()]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let (state, sent) = (fill_state(&mnt), bytes_sent(&http));
    umount();
    println!("one stream over 16 MiB: fill {state}, {sent} bytes sent of a {size}-byte image");
    assert_eq!(state, "armed");
    assert!(sent < (16 << 20) + (3 << 20), "{sent}");

    // Scattered reads start the fill; unmounting stops it.
    proxy.set(r#"{"latency_ms": 10, "rate_mb": 8}"#);
    mount(&[]);
    cat_each(&mnt, &scattered);
    let t = std::time::Instant::now();
    while bytes_sent(&http) < 3 * read && t.elapsed().as_secs() < 10 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (state, sent) = (fill_state(&mnt), bytes_sent(&http));
    umount();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after = http.requests().len();
    std::thread::sleep(std::time::Duration::from_secs(1));
    let (later, stopped_at) = (http.requests().len(), bytes_sent(&http));
    println!(
        "16 scattered reads: fill {state}, {sent} bytes sent; unmounted at {stopped_at} of \
         {size}; {after} then {later} requests"
    );
    assert_eq!(state, "running");
    assert!(sent >= 3 * read, "{sent}");
    assert_eq!(after, later, "requests after the unmount");
    assert!(stopped_at < size * 3 / 4, "{stopped_at}");

    // Too large for the cache's bound, or off: only what is read.
    proxy.set(r#"{"latency_ms": 10}"#);
    let bound = (size * 4 / 3 - 4096).to_string();
    for (extra, want) in [
        (&["--cache-size", &bound][..], "too large for the cache"),
        (&["--fill=off"][..], "off"),
    ] {
        mount(extra);
        cat_each(&mnt, &scattered);
        std::thread::sleep(std::time::Duration::from_millis(500));
        let (state, sent) = (fill_state(&mnt), bytes_sent(&http));
        umount();
        println!("{extra:?}: fill {state}, {sent} bytes sent for {read} read");
        assert_eq!(state, want, "{extra:?}");
        assert!(sent < 2 * read, "{extra:?}: {sent}");
    }

    // Foreground reads with the fill running and without it, over a link of 4 MB/s (the fill
    // takes 5 s), of the files at the end of the image: the fill, in order from its start, has
    // not brought them, so each read's request crosses the link beside the fill's.
    proxy.set(r#"{"latency_ms": 10, "rate_mb": 4}"#);
    let mut times = Vec::new();
    for mode in ["--fill=off", "--fill=on"] {
        mount(&[mode]);
        if mode == "--fill=on" {
            // With no read, the fill waits 10 s after the mount's metadata: until its first piece.
            let t = std::time::Instant::now();
            while t.elapsed().as_secs() < 30
                && !http.requests().iter().any(|l| {
                    l.rsplit(' ')
                        .next()
                        .and_then(|n| n.parse::<u64>().ok())
                        .is_some_and(|n| n >= 1 << 20)
                })
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let took = cat_each(&mnt, &timed);
        let state = fill_state(&mnt);
        // The link as the mount estimated it, which sets the fill's pieces in flight.
        let o = sealfs_run(&["stats", "--json", s(&mnt)], &[]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        let link = format!(
            "round trip {} ms, rate {} B/s",
            v["verify"]["link_round_trip_ms"], v["verify"]["link_rate_bytes_per_s"]
        );
        let log = http.requests();
        umount();
        let sizes: Vec<u64> = log
            .iter()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .collect();
        let largest = sizes.iter().copied().max().unwrap_or(0);
        let pieces = sizes.iter().filter(|&&n| n >= 1 << 20).count();
        println!(
            "{mode}: reads took {took:?}; fill {state}; {} requests, {pieces} of 1 MiB or more, \
             the largest {largest} bytes; {link}",
            log.len()
        );
        times.push((took, state, largest, pieces, link));
    }
    let (off, on) = (&times[0], &times[1]);
    assert_eq!(off.3, 0, "no request of 1 MiB without the fill");
    assert_eq!(on.1, "running", "the fill ran through the timed reads");
    assert!(
        on.3 >= 2,
        "the fill's requests during the timed reads: {}",
        on.3
    );
    let mut base = off.0.clone();
    base.sort();
    let base = base[base.len() / 2];
    // One request's time: the largest request's bytes over the link, and the latency.
    let one = std::time::Duration::from_secs_f64(on.2 as f64 / 4e6 + 0.010);
    for (f, t) in timed.iter().zip(&on.0) {
        assert!(
            *t <= base + one + std::time::Duration::from_millis(150),
            "{f}: {t:?} with the fill, {base:?} without, one request {one:?}; {}",
            on.4
        );
    }
    // While reads fetch, and for a moment after each, the fill starts no piece: the first read
    // may find one on the link, the reads right after it find none. (Before, each of the first
    // three waited for a piece: 541, 553 and 595 ms against 43, 43 and 79 ms.)
    let slow =
        on.0.iter()
            .filter(|&&t| t > base + std::time::Duration::from_millis(150))
            .count();
    assert!(
        slow <= 2,
        "{slow} of {} reads waited for a fill piece: {:?}; {}",
        on.0.len(),
        on.0,
        on.4
    );
}

/// Regression test for issue 40 (a lazy layer's start waited a round trip per directory level):
/// a mount of a remote image (compressed, as `sealfs convert` builds layers: the metadata after
/// the data) fetches its metadata (the span the builder keeps it in: inodes, inline tails,
/// directories; 3.7 MB here) in a few large requests, counted in nginx's access log behind the
/// fault proxy (10 ms before each answer), not a round of requests per level of a tree 40
/// directories deep; then GNU `find -ls` over the whole tree (every lookup, `stat` and listing)
/// fetches nothing more. Without the span's fill, the warm-up's walk made 48.
#[test]
fn a_mount_fetches_its_metadata_in_a_few_requests_before_any_read() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (src, www) = (w.join("src"), w.join("www"));
    let mut dir = src.clone();
    for level in 0..40 {
        dir = dir.join(format!("d{level:02}"));
        fs::create_dir_all(&dir).unwrap();
        for k in 0..30 {
            // Incompressible tails of 3000 bytes, inline in the metadata area.
            let seed = 1000 + level * 100 + k;
            fs::write(dir.join(format!("f{k:02}")), pseudo_random(3000, seed)).unwrap();
        }
        // A file with data blocks of its own, which the metadata fetch leaves alone (the span
        // is fetched only when it is at most a quarter of the image).
        fs::write(dir.join("data"), pseudo_random(512 << 10, level)).unwrap();
    }
    fs::create_dir_all(&www).unwrap();
    let image = www.join("img");
    let digest =
        String::from_utf8(sealfs_ok(&["build", "-q", "-z", "lz4", s(&src), s(&image)]).stdout)
            .unwrap()
            .trim()
            .to_string();
    let http = match nginx(&www, &w.join("nginx")) {
        Ok(h) => h,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let proxy = match FaultProxy::start(&http, w) {
        Ok(p) => p,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    proxy.set(r#"{"latency_ms": 10}"#);
    let mnt = w.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    let cache = w.join("cache");
    let o = sealfs_run(
        &[
            "mount",
            "--digest",
            &digest,
            "--cache-dir",
            s(&cache),
            "--fill=off",
            &proxy.url("img"),
            s(&mnt),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The warm-up has ended when the log stops growing.
    let mut seen = 0;
    let mut still = 0;
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let n = http.requests().len();
        still = if n == seen { still + 1 } else { 0 };
        seen = n;
        if still == 20 {
            break;
        }
    }
    let warm = http.requests();
    let find = run(Command::new("timeout")
        .args(["60", "find"])
        .arg(&mnt)
        .arg("-ls")
        .stdout(Stdio::null()));
    let after = http.requests();
    assert!(sealfs_run(&["umount", s(&mnt)], &[]).status.success());
    assert!(find.status.success(), "{find:?}");
    println!(
        "mount and warm-up: {} requests ({} bytes); find -ls then: {} more",
        warm.len(),
        warm.iter()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>(),
        after.len() - warm.len()
    );
    // Opening (the seal's tail and signature probes, the superblock) and the span with its hash
    // blocks: far fewer than the 40 levels.
    assert!(warm.len() <= 16, "{warm:#?}");
    assert_eq!(after.len(), warm.len(), "find -ls fetched: {after:#?}");
}

/// Regression test for issue 40 (a container's first reads on a lazy layer queued behind the
/// fill's pieces): with `--fill=on`, the fill waits until reads have come and then fetched
/// nothing for 2 s.
/// Seen from nginx's access log behind the fault proxy (10 ms, 8 MB/s): while `cat`s of small
/// files here and there come every 100 ms for 2 s, no request of 1 MiB or more (a fill piece)
/// is answered; once they stop, the fill's pieces come, and the fill ends with the whole image
/// fetched.
#[test]
fn a_fill_waits_for_reads_to_be_quiet() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (src, www) = (w.join("src"), w.join("www"));
    fs::create_dir_all(src.join("z")).unwrap();
    fs::create_dir_all(&www).unwrap();
    let small: Vec<String> = (0..40).map(|k| format!("f{k:02}")).collect();
    for (k, f) in small.iter().enumerate() {
        fs::write(src.join(f), pseudo_random(96 << 10, k as u64 + 300)).unwrap();
    }
    fs::write(src.join("z/big"), pseudo_random(12 << 20, 301)).unwrap();
    let image = www.join("img");
    let digest = String::from_utf8(sealfs_ok(&["build", "-q", s(&src), s(&image)]).stdout)
        .unwrap()
        .trim()
        .to_string();
    let size = fs::metadata(&image).unwrap().len();
    let http = match nginx(&www, &w.join("nginx")) {
        Ok(h) => h,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let proxy = match FaultProxy::start(&http, w) {
        Ok(p) => p,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    proxy.set(r#"{"latency_ms": 10, "rate_mb": 8}"#);
    let mnt = w.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    let cache = w.join("cache");
    let o = sealfs_run(
        &[
            "mount",
            "--digest",
            &digest,
            "--cache-dir",
            s(&cache),
            "--fill=on",
            &proxy.url("img"),
            s(&mnt),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pieces = |log: &[String]| {
        log.iter()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .filter(|&n| n >= 1 << 20)
            .count()
    };
    // Every other small file, one every 100 ms: 20 reads over 2 s.
    let t = std::time::Instant::now();
    for f in small.iter().step_by(2) {
        cat_each(&mnt, std::slice::from_ref(f));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let during = http.requests();
    let reading = t.elapsed();
    // Quiet now: the fill starts 2 s after the last read's fetch.
    let t = std::time::Instant::now();
    while fill_state(&mnt) != "done" && t.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let state = fill_state(&mnt);
    // (nginx logs a request once its answer is sent: the last pieces' lines may come a moment
    // after the fill has them.)
    let sent_of = |log: &[String]| -> u64 {
        log.iter()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let t = std::time::Instant::now();
    let mut after = http.requests();
    while sent_of(&after) < size * 9 / 10 && t.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        after = http.requests();
    }
    assert!(sealfs_run(&["umount", s(&mnt)], &[]).status.success());
    let sent = sent_of(&after);
    println!(
        "reads over {reading:?}: {} requests, {} of 1 MiB or more; then fill {state}: {} \
         requests, {} pieces, {sent} bytes of a {size}-byte image",
        during.len(),
        pieces(&during),
        after.len(),
        pieces(&after)
    );
    assert_eq!(
        pieces(&during),
        0,
        "fill pieces while reads came: {during:#?}"
    );
    assert_eq!(state, "done");
    assert!(pieces(&after) >= 4, "{after:#?}");
    assert!(sent >= size * 9 / 10, "{sent} of {size}");
}

/// Waits until nginx's access log has not grown for a second (the mount's warm-up is over);
/// returns its lines.
fn quiet_log(http: &Server) -> Vec<String> {
    let (mut seen, mut still) = (usize::MAX, 0);
    for _ in 0..400 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let n = http.requests().len();
        still = if n == seen { still + 1 } else { 0 };
        seen = n;
        if still == 20 {
            break;
        }
    }
    http.requests()
}

/// Issue 40 (a lazy container's start read its files one miss at a time): `sealfs mount
/// --prefetch LIST` of a remote image (lz4, data first, as `convert` builds layers) behind the
/// fault proxy (10 ms before each answer) fetches, before any read, what reading the listed
/// files needs: then `cat` of each makes no request (nginx's access log). The listed files lie
/// in six directories, one inside the other, and through a symlinked directory; unlisted files
/// lie between them; `cat` of a listed file of 4 MiB fetches nothing past its end (its stream
/// follows no read served from the store). A list naming only paths the image lacks fetches
/// what a mount without a list fetches; a list naming a file larger than a quarter of the image leaves it out (the
/// bound), fetching the others.
#[test]
fn a_prefetch_list_is_fetched_at_mount_and_its_files_then_read_without_a_request() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let (src, www) = (w.join("src"), w.join("www"));
    let mut dir = src.clone();
    let mut listed = Vec::new();
    let mut rel = String::new();
    for level in 0..6u64 {
        rel = format!("{rel}d{level}/");
        dir = dir.join(format!("d{level}"));
        fs::create_dir_all(&dir).unwrap();
        for k in 0..8u64 {
            // Listed files of 96 KiB between unlisted ones of 256 KiB.
            fs::write(
                dir.join(format!("a{k}")),
                pseudo_random(96 << 10, 100 * level + k),
            )
            .unwrap();
            fs::write(
                dir.join(format!("b{k}")),
                pseudo_random(256 << 10, 1000 + 100 * level + k),
            )
            .unwrap();
            if k % 2 == 0 {
                listed.push(format!("{rel}a{k}"));
            }
        }
    }
    // A listed file of 4 MiB, read sequentially, and an unlisted one after it in the image:
    // reading the first from the store fetches nothing ahead of it.
    fs::write(src.join("d0/c0"), pseudo_random(4 << 20, 11)).unwrap();
    fs::write(src.join("d0/c1"), pseudo_random(4 << 20, 12)).unwrap();
    listed.push("d0/c0".into());
    // A directory reached through a symlink, as /lib is /usr/lib in Debian.
    std::os::unix::fs::symlink("d0/d1", src.join("link")).unwrap();
    listed.push("link/a1".into());
    // More than a quarter of the image: left out.
    fs::write(src.join("huge"), pseudo_random(40 << 20, 7)).unwrap();
    fs::create_dir_all(&www).unwrap();
    let image = www.join("img");
    let digest =
        String::from_utf8(sealfs_ok(&["build", "-q", "-z", "lz4", s(&src), s(&image)]).stdout)
            .unwrap()
            .trim()
            .to_string();
    let size = fs::metadata(&image).unwrap().len();
    let http = match nginx(&www, &w.join("nginx")) {
        Ok(h) => h,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let proxy = match FaultProxy::start(&http, w) {
        Ok(p) => p,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    proxy.set(r#"{"latency_ms": 10}"#);
    let mnt = w.join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _unmount = Unmount(&mnt);
    let list_of = |name: &str, paths: &[String]| {
        let p = w.join(name);
        let text: String = paths.iter().map(|f| format!("/{f}\n")).collect();
        fs::write(&p, format!("# {name}\n{text}")).unwrap();
        p
    };
    let listed_files = list_of("listed", &listed);
    let missing = list_of(
        "missing",
        &["nope/a0".into(), "none".into(), "x/y/z".into()],
    );
    let mut with_huge = vec!["huge".to_string()];
    with_huge.extend(listed.iter().cloned());
    let with_huge = list_of("with-huge", &with_huge);
    // Each mount with a cache of its own, the log emptied: its warm-up's requests and bytes,
    // then those of `cat` of the listed files.
    let mount = |n: usize, list: Option<&Path>| {
        let cache = w.join(format!("cache{n}"));
        let start = http.requests().len();
        let mut args = vec![
            "mount",
            "--digest",
            &digest,
            "--cache-dir",
            s(&cache),
            "--fill=off",
        ];
        if let Some(l) = list {
            args.extend(["--prefetch", s(l)]);
        }
        let url = proxy.url("img");
        args.extend([url.as_str(), s(&mnt)]);
        let o = sealfs_run(&args, &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let warm = quiet_log(&http).split_off(start);
        let warm_bytes: u64 = warm
            .iter()
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        cat_each(&mnt, &listed);
        let after = http.requests().len() - start - warm.len();
        assert!(sealfs_run(&["umount", s(&mnt)], &[]).status.success());
        // What the cats' readahead had in flight is logged before the next mount starts.
        quiet_log(&http);
        println!(
            "{list:?}: the mount and its warm-up: {} requests, {warm_bytes} bytes; the cats: \
             {after} requests",
            warm.len()
        );
        (warm.len(), warm_bytes, after)
    };
    let none = mount(0, None);
    let with_list = mount(1, Some(&listed_files));
    let with_missing = mount(2, Some(&missing));
    let huge = mount(3, Some(&with_huge));
    let listed_bytes = (listed.len() as u64 - 1) * (96 << 10) + (4 << 20);
    assert!(none.2 > 0, "without a list, the cats fetch: {none:?}");
    assert_eq!(with_list.2, 0, "with the list, the cats fetch nothing");
    assert!(
        with_list.1 >= none.1 + listed_bytes,
        "the listed files came with the mount: {with_list:?} against {none:?}"
    );
    // Few requests, in few batches: one request per listed file (each between unlisted ones),
    // and at most two batches per level (the directories' blocks, the inodes'), not a request
    // per path component of each path.
    assert!(
        with_list.0 <= none.0 + listed.len() + 2 * 7,
        "{with_list:?} against {none:?}"
    );
    assert_eq!(
        (with_missing.0, with_missing.1),
        (none.0, none.1),
        "a list of missing paths changes nothing"
    );
    assert_eq!(
        huge.2, 0,
        "with the huge file listed, the others still fetched"
    );
    assert!(
        huge.1 < with_list.1 + size / 8,
        "the huge file was left out: {huge:?}, image {size} bytes"
    );
}
