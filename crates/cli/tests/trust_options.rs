//! Trust options and exit codes, across every command (issue 38, items 1, 5 and 9).
//!
//! `sealfs digest` printed the image's digest with exit 0 whatever `--digest`, `--key` and
//! `--min-version` said, and `digest --files` exited 2 ("could not run") where the image was at
//! fault. The rule is one for every command, so the tests run it across every command that takes
//! trust options (`digest`, also `--files`, `--format=ipe` and `--json`, `verify`, `ls`, `cat`,
//! `stat`, `getfattr`, `extract`, `inspect`, FUSE `mount`, `pull`), from a local file, over HTTP
//! (nginx) and from a registry (Debian's docker-registry):
//!
//! - every command × {right digest, wrong digest, right key, wrong key, unsigned, below the
//!   version floor, at the floor} gives the exit code docs/usage.md states (0 or 1), and `digest`
//!   prints the digest `fsverity digest` (the oracle) gives for the EROFS bytes only when it exits
//!   0;
//! - the exit-code convention: 1 whenever the image is at fault (also a damaged seal, a damaged
//!   metadata block, a damaged per-file digest table), 2 whenever the command could not run (a
//!   missing image or key file, a malformed digest or version, a floor without a key).
//!
//! The keys are openssl's; the digests `fsverity digest`'s of the EROFS bytes (fsverity-utils).

mod common;

use common::servers::{docker_registry, nginx, RegistrySetup, Server};
use common::*;
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `sealfs ARGS` with its own persistent cache and no registry credentials from the user's files.
fn sealfs_in(cache: &Path, args: &[String]) -> Output {
    run(Command::new(sealfs_bin())
        .env("SEALFS_CACHE_DIR", cache)
        .env("DOCKER_CONFIG", "/nonexistent")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("SEALFS_REGISTRY_USERNAME")
        .env_remove("SEALFS_REGISTRY_PASSWORD")
        .stdin(Stdio::null())
        .args(args))
}

fn ok(o: Output, what: &str) -> Output {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

fn openssl_ok(args: &[&str]) {
    let o = run(Command::new("openssl").args(args));
    assert!(o.status.success(), "openssl {args:?}: {}", text(&o.stderr));
}

/// `fsverity digest` (fsverity-utils) of the EROFS bytes of a sealed image (the superblock's block
/// count times its block size: the bytes before the Merkle tree).
fn oracle_digest(image: &Path, scratch: &Path) -> String {
    let bytes = fs::read(image).unwrap();
    let blocks = u32::from_le_bytes(bytes[1024 + 36..1024 + 40].try_into().unwrap()) as usize;
    let len = blocks << bytes[1024 + 12];
    let cut = scratch.join("erofs-bytes");
    fs::write(&cut, &bytes[..len]).unwrap();
    let o = run(Command::new("fsverity").arg("digest").arg(&cut));
    assert!(o.status.success(), "fsverity digest: {}", text(&o.stderr));
    text(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The oracles every test here needs, or a skip.
fn need() -> bool {
    oracle_guard(need_tool("openssl").and_then(|()| need_tool("fsverity")))
}

/// Where FUSE mounts work (root, /dev/fuse), else why not.
fn fuse_env() -> Result<(), String> {
    mount_env()?;
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse missing (no FUSE)".into());
    }
    Ok(())
}

/// Images and keys: `a.img` signed by key 1 as version 2, `b.img` (other content) signed by key
/// 1 as version 2, `u.img` sealed but unsigned; key 2 signed nothing.
struct World {
    dir: tempfile::TempDir,
    k1: PathBuf,
    k2: PathBuf,
    a_digest: String,
    b_digest: String,
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut keys = Vec::new();
        for name in ["k1", "k2"] {
            let (key, public) = (d.join(name), d.join(format!("{name}.pub")));
            openssl_ok(&["genpkey", "-algorithm", "ed25519", "-out", s(&key)]);
            openssl_ok(&["pkey", "-in", s(&key), "-pubout", "-out", s(&public)]);
            keys.push((key, public));
        }
        for (name, content) in [("a", "alpha\n"), ("b", "beta\n"), ("u", "unsigned\n")] {
            let src = d.join(format!("src-{name}"));
            fs::create_dir_all(src.join("etc")).unwrap();
            fs::write(src.join("etc/hostname"), content).unwrap();
            fs::write(src.join("big"), pseudo_random(300_000, name.len() as u64)).unwrap();
            build_ok(&src, &d.join(format!("{name}.img")), &["-q"]);
        }
        let cache = d.join("cache");
        for name in ["a", "b"] {
            let img = d.join(format!("{name}.img"));
            let args = ["sign", "--key", s(&keys[0].0), "--version", "2", s(&img)];
            ok(
                sealfs_in(&cache, &args.map(String::from)),
                "sign with key 1",
            );
        }
        let a_digest = oracle_digest(&d.join("a.img"), d);
        let b_digest = oracle_digest(&d.join("b.img"), d);
        assert_ne!(a_digest, b_digest);
        World {
            k1: keys[0].1.clone(),
            k2: keys[1].1.clone(),
            dir,
            a_digest,
            b_digest,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The trust cases: (name, image, options, exit code docs/usage.md states).
    fn cases(&self) -> Vec<(&'static str, &'static str, Vec<String>, i32)> {
        let k1 = s(&self.k1).to_string();
        let k2 = s(&self.k2).to_string();
        let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        vec![
            ("right digest", "a", v(&["--digest", &self.a_digest]), 0),
            ("wrong digest", "a", v(&["--digest", &self.b_digest]), 1),
            ("right key", "a", v(&["--key", &k1]), 0),
            ("wrong key", "a", v(&["--key", &k2]), 1),
            ("unsigned", "u", v(&["--key", &k1]), 1),
            (
                "below floor",
                "a",
                v(&["--key", &k1, "--min-version", "3"]),
                1,
            ),
            ("at floor", "a", v(&["--key", &k1, "--min-version", "2"]), 0),
        ]
    }
}

/// The commands that take trust options: their arguments for an image (`IMAGE` is replaced by
/// its location, `OUT` by a fresh path, `MNT` by a fresh directory).
fn commands(with_mount: bool, with_pull: bool) -> Vec<(&'static str, Vec<&'static str>)> {
    let mut c = vec![
        ("digest", vec!["digest", "IMAGE"]),
        ("digest --files", vec!["digest", "--files", "IMAGE"]),
        (
            "digest --files --format=ipe",
            vec!["digest", "--files", "--format=ipe", "IMAGE"],
        ),
        (
            "digest --files --json",
            vec!["digest", "--files", "--json", "IMAGE"],
        ),
        ("verify", vec!["verify", "IMAGE"]),
        ("ls", vec!["ls", "-lR", "IMAGE", "/"]),
        ("cat", vec!["cat", "IMAGE", "/etc/hostname"]),
        ("stat", vec!["stat", "IMAGE", "/etc/hostname"]),
        ("getfattr", vec!["getfattr", "-R", "IMAGE", "/"]),
        ("extract", vec!["extract", "IMAGE", "OUT"]),
        ("inspect", vec!["inspect", "IMAGE"]),
        // An update from no base: the image's tree is read and checked whole.
        ("diff", vec!["diff", "/dev/null", "IMAGE"]),
    ];
    if with_mount {
        c.push(("mount", vec!["mount", "IMAGE", "MNT"]));
    }
    if with_pull {
        c.push(("pull", vec!["pull", "IMAGE", "OUT"]));
    }
    c
}

/// What a command run gave: its exit code, stdout, stderr, and what it made of the image's
/// `/etc/hostname` (`cat`'s output, the file `extract` wrote, the file read through the mount),
/// or, for `pull`, the file it wrote.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    made: Option<Vec<u8>>,
}

/// Runs `command` on `image` with `options`. A mount that succeeded is read and unmounted again
/// (and must be, by `sealfs umount`); a refused `pull` must leave nothing at OUT.
fn run_command(
    scratch: &Path,
    cache: &Path,
    command: &[&str],
    image: &str,
    options: &[String],
) -> Ran {
    let work = tempfile::tempdir_in(scratch).unwrap();
    let out = work.path().join("out");
    let mnt = work.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let mut args: Vec<String> = command
        .iter()
        .map(|a| match *a {
            "IMAGE" => image.to_string(),
            "OUT" => s(&out).to_string(),
            "MNT" => s(&mnt).to_string(),
            a => a.to_string(),
        })
        .collect();
    // Options after the subcommand's name, as a user writes them.
    args.splice(1..1, options.iter().cloned());
    if command[0] == "mount" {
        // Its remote images read through the test's cache, as the other commands do.
        args.splice(1..1, ["--cache-dir".to_string(), s(cache).to_string()]);
    }
    let o = sealfs_in(cache, &args);
    let code = o.status.code();
    let made = match command[0] {
        "cat" => Some(o.stdout.clone()),
        "extract" => fs::read(out.join("etc/hostname")).ok(),
        "mount" => fs::read(mnt.join("etc/hostname")).ok(),
        "pull" => fs::read(&out).ok(),
        _ => None,
    };
    if command[0] == "mount" && code == Some(0) {
        let u = sealfs_in(cache, &["umount".to_string(), s(&mnt).to_string()]);
        assert!(u.status.success(), "umount: {}", text(&u.stderr));
    }
    if code != Some(0) && command[0] == "pull" {
        assert!(!out.exists(), "a refused pull left {}", out.display());
    }
    Ran {
        code,
        stdout: text(&o.stdout),
        stderr: text(&o.stderr),
        made,
    }
}

/// Runs every command × every trust case on the images `locate` names; returns the mismatches,
/// one line each.
fn matrix(
    w: &World,
    source: &str,
    locate: &dyn Fn(&str) -> String,
    with_pull: bool,
) -> Vec<String> {
    let scratch = w.path(&format!("runs-{source}"));
    fs::create_dir_all(&scratch).unwrap();
    let cache = w.path(&format!("cache-{source}"));
    let with_mount = fuse_env().is_ok();
    if !with_mount {
        println!("SKIP (mount only): {}", fuse_env().unwrap_err());
    }
    let a_image = fs::read(w.path("a.img")).unwrap();
    let mut wrong = Vec::new();
    for (name, command) in commands(with_mount, with_pull) {
        for (case, image, options, want) in w.cases() {
            let Ran {
                code,
                stdout,
                stderr,
                made,
            } = run_command(&scratch, &cache, &command, &locate(image), &options);
            println!("{source}: {name} [{case}] -> {code:?}: {}", stderr.trim());
            if code != Some(want) {
                wrong.push(format!(
                    "{source}: {name} [{case}]: exit {code:?}, want {want}: {}",
                    stderr.trim()
                ));
            }
            // What it read when it vouched for the image is the image's: the source file, or
            // (pull) the image pushed.
            let expect: &[u8] = if name == "pull" { &a_image } else { b"alpha\n" };
            if want == 0 && made.as_ref().is_some_and(|m| m != expect) {
                wrong.push(format!("{source}: {name} [{case}]: read other bytes"));
            }
            if want == 0 && made.is_none() && matches!(name, "cat" | "extract" | "mount" | "pull") {
                wrong.push(format!("{source}: {name} [{case}]: read nothing"));
            }
            // `digest` prints the oracle's digest exactly when it vouches for the image.
            if name == "digest" {
                let printed = stdout.trim();
                let expect = if want == 0 { w.a_digest.as_str() } else { "" };
                if printed != expect {
                    wrong.push(format!(
                        "{source}: digest [{case}]: printed {printed:?}, want {expect:?}"
                    ));
                }
            }
        }
    }
    wrong
}

fn assert_none(wrong: &[String]) {
    assert!(
        wrong.is_empty(),
        "{} case(s) wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Issue 38 item 1: `sealfs digest other.img --digest <a's digest>` printed other's digest with
/// exit 0 (also for an unsigned image, another key, a version below the floor). Every command
/// that takes trust options enforces them, on a local file.
#[test]
fn digest_ignored_trust_options_every_command_enforces_them() {
    if !need() {
        return;
    }
    let w = World::new();
    let wrong = matrix(
        &w,
        "local",
        &|name| s(&w.path(&format!("{name}.img"))).to_string(),
        false,
    );
    assert_none(&wrong);
}

/// Item 1 over HTTP: the images served by nginx (range requests), read lazily by every command.
#[test]
fn digest_ignored_trust_options_every_command_enforces_them_over_http() {
    if !need() || !oracle_guard(need_tool("nginx")) {
        return;
    }
    let w = World::new();
    let work = w.path("nginx");
    fs::create_dir_all(&work).unwrap();
    let server = nginx(w.dir.path(), &work).expect("nginx starts");
    let wrong = matrix(
        &w,
        "http",
        &|name| server.url(&format!("{name}.img")),
        false,
    );
    assert_none(&wrong);
}

/// A registry started for a test, the three images pushed by tag.
fn registry_with_images(w: &World) -> (Server, String) {
    let work = w.path("registry");
    fs::create_dir_all(&work).unwrap();
    let server = docker_registry(&work, &RegistrySetup::default()).expect("docker-registry starts");
    let base = format!("oci+http://127.0.0.1:{}/trust", server.port);
    let cache = w.path("cache-push");
    for name in ["a", "b", "u"] {
        let img = w.path(&format!("{name}.img"));
        let args = ["push".to_string(), s(&img).into(), format!("{base}:{name}")];
        ok(sealfs_in(&cache, &args), "push");
    }
    (server, base)
}

/// Item 1 from a registry: the images pushed to docker-registry by tag (so the tag vouches for
/// nothing), read by every command and pulled.
#[test]
fn digest_ignored_trust_options_every_command_enforces_them_from_a_registry() {
    if !need() || !oracle_guard(common::servers::docker_registry_bin().map(|_| ())) {
        return;
    }
    let w = World::new();
    let (_server, base) = registry_with_images(&w);
    let wrong = matrix(&w, "registry", &|name| format!("{base}:{name}"), true);
    assert_none(&wrong);
}

/// A copy of `from` at `to` with the byte at `at` inverted (`at` counted from the end when
/// negative).
fn damaged_copy(from: &Path, to: &Path, at: i64) {
    fs::copy(from, to).unwrap();
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(to)
        .unwrap();
    let at = if at < 0 {
        (f.metadata().unwrap().len() as i64 + at) as u64
    } else {
        at as u64
    };
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[!b[0]], at).unwrap();
}

/// Issue 38 item 5: `digest --files` exited 2 ("could not run") when the image was at fault
/// (wrong digest, damaged table block, wrong key, rollback, damaged seal), where the reading
/// commands exit 1. The convention of docs/usage.md, per command: 1 for every fault of the image
/// (these, the trust cases of the matrix, and a damaged metadata block), 2 when the command
/// could not run (no such image, no such key file, a malformed `--digest` or `--min-version`, a
/// floor without a key).
#[test]
fn digest_files_exited_2_when_the_image_was_at_fault() {
    if !need() {
        return;
    }
    let w = World::new();
    let a = w.path("a.img");
    // The seal's footer (the file's last byte), block 0 (superblock: every command reads it),
    // and the per-file digest table (in the EROFS bytes; only what reads it fails).
    let bad_seal = w.path("bad-seal.img");
    damaged_copy(&a, &bad_seal, -1);
    let bad_meta = w.path("bad-meta.img");
    damaged_copy(&a, &bad_meta, 1100);
    // A small table sits in block 0 with the superblock; 200 files' table has blocks of its own.
    let src = w.path("src-many");
    fs::create_dir_all(src.join("etc")).unwrap();
    fs::write(src.join("etc/hostname"), "many\n").unwrap();
    for i in 0..200 {
        fs::write(src.join(format!("f{i:03}")), format!("file {i}\n")).unwrap();
    }
    let many = w.path("many.img");
    build_ok(&src, &many, &["-q"]);
    let many_digest = oracle_digest(&many, w.dir.path());
    let table =
        filetable::table_offset(&fs::read(&many).unwrap()).expect("a per-file digest table");
    assert!(table >= 4096, "the table starts in block 0 ({table})");
    let bad_table = w.path("bad-table.img");
    damaged_copy(&many, &bad_table, table as i64 + 100);
    let k1 = s(&w.k1).to_string();
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // (case, image, options, which commands it concerns, exit code).
    let reads_table = |c: &str| c.starts_with("digest") || c == "verify" || c == "inspect";
    let every = |_: &str| true;
    let skips_table = |c: &str| !reads_table(c);
    type Concerns<'a> = dyn Fn(&str) -> bool + 'a;
    let cases: Vec<(&str, PathBuf, Vec<String>, &Concerns, i32)> = vec![
        ("damaged seal", bad_seal.clone(), v(&[]), &every, 1),
        (
            "damaged seal, --key",
            bad_seal,
            v(&["--key", &k1]),
            &every,
            1,
        ),
        ("damaged superblock block", bad_meta, v(&[]), &every, 1),
        (
            "damaged table block",
            bad_table.clone(),
            v(&[]),
            &reads_table,
            1,
        ),
        (
            "damaged table block, --digest",
            bad_table.clone(),
            v(&["--digest", &many_digest]),
            &reads_table,
            1,
        ),
        // The damage is local: what does not read the table reads the image.
        (
            "damaged table block, not read",
            bad_table,
            v(&["--digest", &many_digest]),
            &skips_table,
            0,
        ),
        (
            "no such image",
            w.path("nonexistent.img"),
            v(&[]),
            &every,
            2,
        ),
        (
            "no such key file",
            a.clone(),
            v(&["--key", s(&w.path("nonexistent.pub"))]),
            &every,
            2,
        ),
        (
            "malformed --digest",
            a.clone(),
            v(&["--digest", "sha256:00"]),
            &every,
            2,
        ),
        (
            "malformed --min-version",
            a.clone(),
            v(&["--key", &k1, "--min-version", "v2"]),
            &every,
            2,
        ),
        (
            "--min-version without a key",
            a.clone(),
            v(&["--min-version", "2"]),
            &every,
            2,
        ),
    ];
    let scratch = w.path("runs-codes");
    fs::create_dir_all(&scratch).unwrap();
    let cache = w.path("cache-codes");
    let mut wrong = Vec::new();
    for (name, command) in commands(fuse_env().is_ok(), false) {
        for (case, image, options, concerns, want) in &cases {
            if !concerns(name) {
                continue;
            }
            let Ran { code, stderr, .. } =
                run_command(&scratch, &cache, &command, s(image), options);
            println!("{name} [{case}] -> {code:?}: {}", stderr.trim());
            if code != Some(*want) {
                wrong.push(format!(
                    "{name} [{case}]: exit {code:?}, want {want}: {}",
                    stderr.trim()
                ));
            }
        }
    }
    assert_none(&wrong);
}

/// Issue 38 item 9: a statement whose version is text that is not a version ("2-beta") was
/// reported "as version 2-beta, below the minimum version 1", and a `--min-version` of more than
/// 19 digits was only "not a version". Every command that takes a floor says which (exit 1 for
/// the image's version, 2 for the option's).
#[test]
fn non_numeric_version_was_reported_below_the_minimum() {
    if !need() {
        return;
    }
    let w = World::new();
    let cache = w.path("cache-versions");
    let texty = w.path("texty.img");
    fs::copy(w.path("u.img"), &texty).unwrap();
    let k1_private = w.path("k1");
    let args = [
        "sign",
        "--key",
        s(&k1_private),
        "--version",
        "2-beta",
        s(&texty),
    ];
    ok(sealfs_in(&cache, &args.map(String::from)), "sign 2-beta");
    let k1 = s(&w.k1).to_string();
    let scratch = w.path("runs-versions");
    fs::create_dir_all(&scratch).unwrap();
    let mut wrong = Vec::new();
    for (name, command) in commands(false, false) {
        let floor = [
            "--key".to_string(),
            k1.clone(),
            "--min-version".into(),
            "1".into(),
        ];
        let Ran {
            code, stderr: err, ..
        } = run_command(&scratch, &cache, &command, s(&texty), &floor);
        println!("{name} [2-beta, floor 1] -> {code:?}: {}", err.trim());
        if code != Some(1)
            || err.contains("below the minimum version")
            || !err.contains("\"2-beta\" is not a version")
        {
            wrong.push(format!("{name} [2-beta]: exit {code:?}: {}", err.trim()));
        }
        let floor = [
            "--key".to_string(),
            k1.clone(),
            "--min-version".into(),
            "10000000000000000000".into(),
        ];
        let Ran {
            code, stderr: err, ..
        } = run_command(&scratch, &cache, &command, s(&w.path("a.img")), &floor);
        println!("{name} [floor of 20 digits] -> {code:?}: {}", err.trim());
        if code != Some(2) || !err.contains("more than 19 digits") {
            wrong.push(format!("{name} [20 digits]: exit {code:?}: {}", err.trim()));
        }
    }
    assert_none(&wrong);
}

/// Issue 38 item 9: `inspect` of a reference pinned by digest said "the seal's digest equals
/// --digest" when no --digest was given (and `verify` "matches --digest"): what vouched for the
/// image is the manifest the reference names by digest. Also: pulling a detached image without
/// `--sidecar-out` suggested `--sidecar`, an option `pull` does not have.
#[test]
fn inspect_of_a_pinned_reference_said_equals_digest() {
    if !need() || !oracle_guard(common::servers::docker_registry_bin().map(|_| ())) {
        return;
    }
    let w = World::new();
    let (_server, base) = registry_with_images(&w);
    let cache = w.path("cache-pinned");
    let args = [
        "push".to_string(),
        s(&w.path("a.img")).into(),
        format!("{base}:pinned"),
    ];
    let o = ok(sealfs_in(&cache, &args), "push");
    let pinned = text(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let manifest = pinned.rsplit_once('@').unwrap().1.to_string();
    let o = ok(
        sealfs_in(&cache, &["inspect".into(), "--json".into(), pinned.clone()]),
        "inspect",
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let said = v["trust_text"].as_str().unwrap().to_string();
    assert_eq!(v["trust"], "authenticated");
    assert!(
        !said.contains("--digest") && said.contains(&manifest) && said.contains(&w.a_digest),
        "inspect of {pinned}: {said}"
    );
    // With --digest given too, it is what the text names.
    let o = ok(
        sealfs_in(
            &cache,
            &[
                "inspect".into(),
                "--json".into(),
                "--digest".into(),
                w.a_digest.clone(),
                pinned.clone(),
            ],
        ),
        "inspect --digest",
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["trust_text"].as_str().unwrap().contains("--digest"));
    // `digest` of the pinned reference checks the image against the digest its manifest states.
    let o = ok(
        sealfs_in(&cache, &["digest".into(), pinned.clone()]),
        "digest",
    );
    assert_eq!(text(&o.stdout).trim(), w.a_digest);
    let o = ok(
        sealfs_in(&cache, &["verify".into(), pinned.clone()]),
        "verify",
    );
    let said = text(&o.stdout);
    assert!(
        said.contains("authenticated") && !said.contains("--digest"),
        "verify of {pinned}: {said}"
    );

    // A detached image (plain EROFS bytes and a seal sidecar) pulled without --sidecar-out.
    let plain = w.path("detached.img");
    let seal = w.path("detached.seal");
    build_ok(&w.path("src-a"), &plain, &["-q", "--no-seal"]);
    let args = [
        "seal".to_string(),
        s(&plain).into(),
        "--sidecar".into(),
        s(&seal).into(),
    ];
    ok(sealfs_in(&cache, &args), "seal --sidecar");
    let reference = format!("{base}:detached");
    let args = [
        "push".to_string(),
        s(&plain).into(),
        reference.clone(),
        "--sidecar".into(),
        s(&seal).into(),
    ];
    ok(sealfs_in(&cache, &args), "push --sidecar");
    let out = w.path("pulled.img");
    let o = sealfs_in(
        &cache,
        &[
            "pull".into(),
            "--self-consistent".into(),
            reference,
            s(&out).into(),
        ],
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--sidecar-out") && !out.exists(), "{err}");
}

/// Item 5 for the commands that read an image but take no trust options (`seal`, `sign`,
/// `statement`, `push`): the same convention, 1 when the image is at fault (`seal` of a file
/// that is not EROFS exited 2), 2 when the command could not run.
#[test]
fn seal_of_a_file_that_is_not_erofs_exited_2() {
    if !need() {
        return;
    }
    let w = World::new();
    let cache = w.path("cache-others");
    let bad_seal = w.path("bad-seal.img");
    damaged_copy(&w.path("a.img"), &bad_seal, -1);
    // Not EROFS: 64 KiB of random bytes (`dump.erofs`, the oracle, refuses it too).
    let junk = w.path("junk.img");
    fs::write(&junk, pseudo_random(65536, 38)).unwrap();
    if have_tool("dump.erofs") {
        let o = run(Command::new("dump.erofs").arg(&junk));
        assert!(!o.status.success(), "dump.erofs reads the junk");
    }
    let missing = w.path("nonexistent.img");
    let key = s(&w.path("k1")).to_string();
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let cases: Vec<(Vec<String>, i32)> = vec![
        (v(&["seal", s(&junk)]), 1),
        (
            v(&["seal", s(&junk), "--sidecar", s(&w.path("junk.seal"))]),
            1,
        ),
        (v(&["seal", s(&missing)]), 2),
        (v(&["sign", "--key", &key, s(&bad_seal)]), 1),
        (v(&["sign", "--key", &key, s(&missing)]), 2),
        (
            v(&[
                "sign",
                "--key",
                s(&w.path("nonexistent.pem")),
                s(&w.path("u.img")),
            ]),
            2,
        ),
        (v(&["statement", s(&bad_seal)]), 1),
        (v(&["statement", s(&missing)]), 2),
        // (`push` of a missing or damaged image is item 2 of the issue: it names the file twice.)
        (
            v(&["push", s(&w.path("a.img")), "oci+http://bad reference"]),
            2,
        ),
    ];
    let mut wrong = Vec::new();
    for (args, want) in cases {
        let o = sealfs_in(&cache, &args);
        let err = text(&o.stderr);
        println!("{args:?} -> {:?}: {}", o.status.code(), err.trim());
        if o.status.code() != Some(want) {
            wrong.push(format!(
                "{args:?}: exit {:?}, want {want}: {}",
                o.status.code(),
                err.trim()
            ));
        }
    }
    assert_none(&wrong);
}
