//! Every error a user can meet says each fact once (issue 29: a damaged root block printed
//! "verification failed: data block 2735 does not match its hash (...)" twice, its cause's text
//! being both in the error's message and its source). This walks the error paths of the command
//! line in one place: damaged blocks (metadata, data, compressed data), bad seals, truncated and
//! foreign files, wrong and malformed digests, missing files, bad and unknown keys, refused
//! builds and extractions, an unreachable server, a missing object and a server gone mid-read.
//! Each must fail, name what the test expects, and say no clause twice
//! ([`common::repeated_clauses`]; `common::run` applies the same check to every `sealfs` any
//! test runs).

mod common;

use common::servers::{free_port, nginx};
use common::*;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};

/// The case's `sealfs ARGS` fails with `code`, its stderr names every one of `names`, and says
/// each fact once.
fn fails(dir: &Path, args: &[&str], code: i32, names: &[&str]) {
    let out = Command::new(sealfs_bin())
        .args(args)
        .current_dir(dir)
        .env("SEALFS_CACHE_DIR", dir.join("cache"))
        .stdin(Stdio::null())
        .output()
        .expect("run sealfs");
    let err = String::from_utf8_lossy(&out.stderr);
    println!("sealfs {}: {}", args.join(" "), err.trim());
    assert_eq!(out.status.code(), Some(code), "sealfs {args:?}: {err}");
    for n in names {
        assert!(
            err.contains(n),
            "sealfs {args:?}: does not name {n:?}: {err}"
        );
    }
    assert_each_fact_once(&format!("sealfs {args:?}"), &out.stderr);
}

/// A copy of `from` at `to` with the 4 bytes at `at` inverted.
fn damaged_copy(from: &Path, to: &Path, at: u64) {
    fs::copy(from, to).unwrap();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(to)
        .unwrap();
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&b.map(|x| !x), at).unwrap();
}

/// `n` bytes of text that compresses (words drawn from a small vocabulary).
fn text(n: usize) -> Vec<u8> {
    let mut rng = Rng::new(29);
    let words: Vec<Vec<u8>> = (0..300)
        .map(|_| {
            (0..2 + rng.below(7))
                .map(|_| b'a' + rng.below(10) as u8)
                .collect()
        })
        .collect();
    let mut out = Vec::with_capacity(n + 16);
    while out.len() < n {
        out.extend_from_slice(&words[rng.below(300) as usize]);
        out.push(b' ');
    }
    out.truncate(n);
    out
}

/// Where `needle` first occurs in the file at `path`.
fn offset_of(path: &Path, needle: &[u8]) -> u64 {
    let hay = fs::read(path).unwrap();
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("the bytes are in the image") as u64
}

#[test]
fn every_error_says_each_fact_once() {
    let work = tempfile::tempdir().unwrap();
    let d = work.path();
    let src = d.join("src");
    fs::create_dir(&src).unwrap();
    small_fixture::build(&src, 29, false);
    let big = pseudo_random(1 << 20, 29);
    fs::write(src.join("big"), &big).unwrap();
    build_ok(&src, &d.join("img"), &[]);
    // One compressible file: its compressed data starts in block 1.
    let zsrc = d.join("zsrc");
    fs::create_dir(&zsrc).unwrap();
    fs::write(zsrc.join("text"), text(1 << 20)).unwrap();
    build_ok(&zsrc, &d.join("z.img"), &["-z", "lz4", "-C", "65536"]);
    for args in [
        &["keygen", "k"][..],
        &["keygen", "other"],
        &["sign", "img", "--key", "k"],
    ] {
        let o = run(Command::new(sealfs_bin()).args(args).current_dir(d));
        assert!(o.status.success(), "sealfs {args:?}: {o:?}");
    }
    let len = fs::metadata(d.join("img")).unwrap().len();

    // Damage: the block of the root inode (the superblock's block, past the superblock), a data
    // block of /big, compressed data of /text, the seal's footer.
    damaged_copy(&d.join("img"), &d.join("root.img"), 2048);
    let at = offset_of(&d.join("img"), &big[4096..4160]);
    damaged_copy(&d.join("img"), &d.join("data.img"), at);
    damaged_copy(&d.join("z.img"), &d.join("zdata.img"), 3 * 4096 + 100);
    damaged_copy(&d.join("img"), &d.join("seal.img"), len - 4);
    fs::write(
        d.join("half.img"),
        &fs::read(d.join("img")).unwrap()[..len as usize / 2],
    )
    .unwrap();
    fs::write(d.join("junk.img"), pseudo_random(64 << 10, 1)).unwrap();
    fs::write(d.join("junk.pub"), "not a key\n").unwrap();
    fs::create_dir(d.join("nokeys")).unwrap();
    fs::create_dir(d.join("full")).unwrap();
    fs::write(d.join("full/x"), b"x").unwrap();
    let wrong = format!("sha256:{}", "ab".repeat(32));

    for args in [
        &["ls", "root.img"][..],
        &["stat", "root.img", "/"],
        &["inspect", "root.img"],
    ] {
        fails(d, args, 1, &["root.img", "verification failed"]);
    }
    fails(
        d,
        &["mount", "root.img", "full"],
        1,
        &["verification failed"],
    );
    fails(
        d,
        &["cat", "data.img", "/big"],
        1,
        &["/big", "verification failed"],
    );
    fails(
        d,
        &["extract", "data.img", "out"],
        1,
        &["big", "verification failed"],
    );
    fails(d, &["verify", "data.img"], 1, &["/big"]);
    fails(
        d,
        &["cat", "zdata.img", "/text"],
        1,
        &["verification failed"],
    );
    fails(
        d,
        &["cat", "--verify=none", "zdata.img", "/text"],
        1,
        &["LZ4"],
    );
    fails(d, &["ls", "seal.img"], 1, &["seal.img"]);
    fails(d, &["verify", "seal.img"], 1, &["seal.img"]);
    fails(d, &["ls", "half.img"], 1, &["half.img"]);
    fails(d, &["ls", "junk.img"], 2, &["junk.img"]);
    fails(d, &["ls", "img", "--digest", &wrong], 1, &[&wrong]);
    fails(d, &["ls", "img", "--digest", "sha256:00"], 2, &["--digest"]);
    fails(
        d,
        &["ls", "missing.img"],
        2,
        &["missing.img", "No such file"],
    );
    fails(
        d,
        &["ls", "img", "--sidecar", "missing.seal"],
        2,
        &["missing.seal"],
    );
    fails(
        d,
        &["ls", "img", "--key", "missing.pub"],
        2,
        &["missing.pub"],
    );
    fails(d, &["ls", "img", "--key", "junk.pub"], 2, &["junk.pub"]);
    fails(d, &["ls", "img", "--keyring", "nokeys"], 2, &["nokeys"]);
    fails(
        d,
        &["ls", "img", "--key", "other.pub"],
        1,
        &["unknown keys"],
    );
    fails(
        d,
        &["ls", "img", "--key", "k.pub", "--signatures", "missing.sig"],
        1,
        &["missing.sig"],
    );
    fails(d, &["sign", "img", "--key", "missing"], 2, &["missing"]);
    fails(d, &["seal", "img"], 2, &["already sealed"]);
    fails(d, &["extract", "img", "full"], 2, &["full", "not empty"]);
    fails(d, &["build", "missing-src", "new.img"], 2, &["missing-src"]);
    fails(
        d,
        &["build", "src", "no/such/dir/new.img"],
        2,
        &["no/such/dir"],
    );
    fails(
        d,
        &["mount", "img", "no-such-mountpoint"],
        2,
        &["no-such-mountpoint"],
    );

    // Remote: a port nobody listens on; the CA file missing.
    let nobody = format!("http://127.0.0.1:{}/img", free_port());
    fails(
        d,
        &["ls", "--self-consistent", "--no-cache", &nobody],
        2,
        &[&nobody, "refused"],
    );
    let tls = nobody.replace("http:", "https:");
    fails(
        d,
        &["ls", "--self-consistent", "--ca-cert", "missing.pem", &tls],
        2,
        &["missing.pem"],
    );
    // A real server: a missing object; then the server gone after the metadata is cached, so that
    // a read fails through the reader's I/O error, the remote error and the HTTP client's chain.
    let www = d.join("www");
    fs::create_dir(&www).unwrap();
    fs::copy(d.join("img"), www.join("img")).unwrap();
    let server = match nginx(&www, &d.join("nginx")) {
        Ok(s) => s,
        Err(e) => {
            oracle_guard(Err(e));
            return;
        }
    };
    let (url, gone) = (server.url("img"), server.url("gone"));
    fails(
        d,
        &["ls", "--self-consistent", &gone],
        2,
        &[&gone, "no such object"],
    );
    let o = run(Command::new(sealfs_bin())
        .args(["ls", "-R", "--key", "k.pub", &url])
        .current_dir(d)
        .env("SEALFS_CACHE_DIR", d.join("cache")));
    assert!(o.status.success(), "{o:?}");
    drop(server);
    fails(
        d,
        &["cat", "--key", "k.pub", &url, "/big"],
        1,
        &["I/O error", &url],
    );
}
