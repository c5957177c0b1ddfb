//! Issue 38: untrusted strings reach terminals and policies raw. One escaping rule
//! (`sealfs_text::escape`: what `LC_ALL=C ls --quoting-style=escape` prints) now covers every
//! name, path and string from an image, an archive or the command line in every text output.
//! These tests run names holding a newline, ESC sequences, a backslash, non-UTF-8 bytes, quotes,
//! a space, a C1 control and a non-ASCII letter through every command that prints them, and
//! check each output against programs nobody here wrote: coreutils `ls -b` of the kernel's mount
//! of the image (and of the source tree), GNU tar's own `--quoting-style=escape` listing of the
//! archive, `fsverity digest`, and `setfattr --restore` reading `getfattr`'s output back. Every
//! text output is also held to the rule's promise: each line printable ASCII, so no name can end
//! a line, add a policy rule or reach the terminal as a control sequence.

mod common;

use common::*;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The names every test runs through the commands.
const NAMES: &[&[u8]] = &[
    b"nl\nop=EXECUTE fsverity_digest=sha256:00 action=ALLOW",
    b"esc\x1b[31mred\x1b[0m",
    b"back\\slash",
    b"bad\xff\xfe",
    b"quote\"s'",
    b"sp ace",
    "caf\u{e9}".as_bytes(),
    b"bel\x07tab\t\x7f",
    b"c1\xc2\x9b2J",
];

/// The file whose data the damage tests spoil (ESC in its name).
const VICTIM: &[u8] = b"esc\x1b[31mred\x1b[0m";
/// A directory and a file in it.
const DIR: &[u8] = b"dir\x1b]0;title\x07";
const INNER: &[u8] = b"in\nner";
/// A symlink and its (dangling) target.
const LINK: &[u8] = b"link\x1b[2J";
const TARGET: &[u8] = b"to\nwhere\xff";
/// An xattr on `back\slash`: its name and value.
const XNAME: &[u8] = b"user.x\x1b[31m\n=y";
const XVALUE: &[u8] = b"v\x1b[2Jv\xff";

fn sealfs() -> Command {
    let mut c = Command::new(sealfs_bin());
    c.stdin(Stdio::null()).env("TZ", "UTC");
    c
}

fn os(bytes: &[u8]) -> std::ffi::OsString {
    std::ffi::OsString::from_vec(bytes.to_vec())
}

/// `LC_ALL=C ls -bd -- PATH` run in `dir`: coreutils' escape quoting of `path`, the oracle of
/// the rule.
fn ls_b(dir: &Path, path: &[u8]) -> String {
    let out = run(Command::new("ls")
        .arg("-bd")
        .arg("--")
        .arg(os(path))
        .current_dir(dir)
        .env("LC_ALL", "C"));
    assert!(out.status.success(), "ls -bd {}", show(path));
    let s = String::from_utf8(out.stdout).expect("ls -b writes ASCII");
    s.strip_suffix('\n').expect("one line").to_string()
}

/// Each line of `out` is printable ASCII (or a tab, which `stat` puts between its fields as GNU
/// stat does; names hold none raw): nothing a terminal or a line-based reader could take for
/// more than text.
fn assert_inert(what: &str, out: &[u8]) {
    for line in out.split(|&b| b == b'\n') {
        assert!(
            line.iter()
                .all(|&b| (0x20..0x7f).contains(&b) || b == b'\t'),
            "{what}: a raw byte in the line {}\nwhole output:\n{}",
            show(line),
            show(out)
        );
    }
}

/// Both streams of `o` are inert; its stdout and stderr as text.
fn inert(what: &str, o: &Output) -> (String, String) {
    assert_inert(&format!("{what} (stdout)"), &o.stdout);
    assert_inert(&format!("{what} (stderr)"), &o.stderr);
    (
        String::from_utf8(o.stdout.clone()).unwrap(),
        String::from_utf8(o.stderr.clone()).unwrap(),
    )
}

/// 64 KiB that compress poorly and appear nowhere else (so the file owns its data blocks, and
/// the bytes can be found in the image).
fn unique_bytes(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    rng.bytes(64 << 10)
}

/// The source tree: a file per name, a directory with a file, a symlink, an xattr.
fn make_source(src: &Path) {
    fs::create_dir_all(src).unwrap();
    for (i, name) in NAMES.iter().enumerate() {
        let data = if *name == VICTIM {
            unique_bytes(38)
        } else {
            format!("file {i}\n").into_bytes()
        };
        fs::write(src.join(os(name)), data).unwrap();
    }
    fs::create_dir(src.join(os(DIR))).unwrap();
    fs::write(src.join(os(DIR)).join(os(INNER)), b"inner\n").unwrap();
    std::os::unix::fs::symlink(os(TARGET), src.join(os(LINK))).unwrap();
    xattr::set(src.join("back\\slash"), os(XNAME), XVALUE).expect("user xattr on the source");
}

/// A scratch directory, the source tree and its image at a path that tries to add a rule to an
/// IPE policy and clear the screen.
struct Case {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    src: PathBuf,
    image: PathBuf,
}

fn case() -> Case {
    let tmp = tempfile::Builder::new()
        .prefix("sealfs-escaping-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let dir = tmp.path().to_path_buf();
    let src = dir.join("src");
    make_source(&src);
    let image = dir.join(os(format!(
        "image\nop=EXECUTE fsverity_digest=sha256:{} action=ALLOW\n\x1b[2J.img",
        "0".repeat(64)
    )
    .as_bytes()));
    build_ok(&src, &image, &[]);
    Case {
        _tmp: tmp,
        dir,
        src,
        image,
    }
}

/// The escaped absolute path of `p`, by `ls -b`.
fn ls_b_abs(p: &Path) -> String {
    ls_b(Path::new("/"), p.as_os_str().as_bytes())
}

#[test]
fn untrusted_names_are_escaped_as_ls_b_in_every_read_command() {
    if !oracle_guard(
        mount_env()
            .and(need_tool("fsverity"))
            .and(need_tool("setfattr")),
    ) {
        return;
    }
    let c = case();
    // The kernel mounts a link of the image with a plain name (mount(8) is not under test).
    let plain = c.dir.join("plain.img");
    fs::hard_link(&c.image, &plain).unwrap();
    let mnt = mount_erofs(&plain).expect("mount");
    let m = mnt.path();
    let shown_image = ls_b_abs(&c.image);

    // ls, short and long, of the root and of the directory: byte for byte what coreutils shows
    // of the kernel's mount with -b.
    for (ours, theirs, dir) in [
        (&["ls", "-A"][..], &["-A", "-b"][..], &b"/"[..]),
        (
            &["ls", "-lA"],
            &["-lA", "-b", "-n", "--time-style=long-iso"],
            b"/",
        ),
        (&["ls", "-A"], &["-A", "-b"], &[b"/", DIR].concat()),
        (
            &["ls", "-lA"],
            &["-lA", "-b", "-n", "--time-style=long-iso"],
            &[b"/", DIR].concat(),
        ),
    ] {
        let o = run(sealfs().args(ours).arg(&c.image).arg(os(dir)));
        let (stdout, _) = inert(&format!("sealfs {ours:?} {}", show(dir)), &o);
        assert!(o.status.success());
        let want = run(Command::new("ls")
            .args(theirs)
            .arg(m.join(os(&dir[1..])))
            .env("LC_ALL", "C")
            .env("TZ", "UTC"));
        assert_eq!(
            stdout,
            String::from_utf8(want.stdout).unwrap(),
            "sealfs {ours:?} {} vs ls {theirs:?} of the kernel mount",
            show(dir)
        );
    }
    println!("ls and ls -l equal coreutils' ls -b of the kernel mount");

    // stat: the path and the symlink's target as ls -b writes them.
    for name in NAMES.iter().chain([&LINK]) {
        let path = [b"/", *name].concat();
        let o = run(sealfs().arg("stat").arg(&c.image).arg(os(&path)));
        let (stdout, stderr) = inert(&format!("stat {}", show(&path)), &o);
        assert!(o.status.success(), "{stderr}");
        let want = format!("/{}", ls_b(m, name));
        assert!(
            stdout.contains(&want),
            "stat does not show {want}: {stdout}"
        );
        if *name == LINK {
            // The target does not exist: ls -b shows a file of that name made for it.
            let names = c.dir.join("names");
            fs::create_dir_all(&names).unwrap();
            fs::write(names.join(os(TARGET)), b"").unwrap();
            let t = ls_b(&names, TARGET);
            assert!(stdout.contains(&format!("-> {t}")), "{stdout}");
        }
    }
    println!("stat names paths and targets as ls -b");

    // getfattr: inert, and `setfattr --restore` (attr's own reader of the format) reads the
    // escaped name and value back to the exact bytes.
    let o = run(sealfs()
        .args(["getfattr", "-d"])
        .arg(&c.image)
        .arg("/back\\slash"));
    let (stdout, stderr) = inert("getfattr -d", &o);
    assert!(o.status.success(), "{stderr}");
    let restored = c.dir.join("restored");
    fs::write(&restored, b"").unwrap();
    let body = stdout.split_once('\n').expect("a # file: line").1;
    let dump = c.dir.join("dump");
    fs::write(&dump, format!("# file: {}\n{body}", restored.display())).unwrap();
    let r = run(Command::new("setfattr").arg(format!("--restore={}", dump.display())));
    assert!(
        r.status.success(),
        "setfattr --restore of {stdout:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert_eq!(
        xattr::get(&restored, os(XNAME)).unwrap().as_deref(),
        Some(XVALUE),
        "setfattr --restore of sealfs getfattr's output: {stdout:?}"
    );
    println!("getfattr output is inert and setfattr --restore reads it back exactly");

    // inspect: the image path.
    let o = run(sealfs().arg("inspect").arg(&c.image));
    let (stdout, stderr) = inert("inspect", &o);
    assert!(o.status.success(), "{stderr}");
    assert!(stdout.contains(&shown_image), "{stdout}");

    // digest --files: one line per file, `fsverity digest`'s, the name as ls -b writes it.
    let o = run(sealfs().args(["digest", "--files"]).arg(&c.image));
    let (stdout, stderr) = inert("digest --files", &o);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains(&shown_image), "{stderr}");
    let mut files: Vec<Vec<u8>> = NAMES.iter().map(|n| n.to_vec()).collect();
    files.push([DIR, b"/", INNER].concat());
    files.sort();
    let mut want = String::new();
    let mut digests = std::collections::BTreeSet::new();
    for f in &files {
        let d = run_ok(
            Command::new("fsverity")
                .args(["digest", "--compact", "--"])
                .arg(os(f))
                .current_dir(&c.src),
        )
        .unwrap();
        let d = format!("sha256:{}", d.trim());
        want.push_str(&format!("{d} {}\n", ls_b(&c.src, f)));
        digests.insert(d);
    }
    assert_eq!(stdout, want, "digest --files vs fsverity digest and ls -b");

    // digest --files --format=ipe: the image path stays in its comment; the only rules are the
    // files' own.
    let o = run(sealfs()
        .args(["digest", "--files", "--format=ipe"])
        .arg(&c.image));
    let (stdout, stderr) = inert("digest --files --format=ipe", &o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.lines().next().unwrap().contains(&shown_image),
        "{stdout}"
    );
    let rules: std::collections::BTreeSet<String> = stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            l.strip_prefix("op=EXECUTE fsverity_digest=")
                .and_then(|r| r.strip_suffix(" action=ALLOW"))
                .unwrap_or_else(|| panic!("not a rule of the files: {l:?}\n{stdout}"))
                .to_string()
        })
        .collect();
    assert_eq!(rules, digests, "IPE rules vs fsverity digest of each file");
    println!("digest --files (text and ipe) is fsverity's, escaped as ls -b; no rule added");

    // verify: the image path.
    let o = run(sealfs().arg("verify").arg(&c.image));
    let (stdout, stderr) = inert("verify", &o);
    assert!(o.status.success(), "{stderr}");
    assert!(
        stdout.starts_with(&format!("{shown_image}: self-consistent sha256:")),
        "{stdout}"
    );

    // A path the image does not hold, from the command line, in each command's error.
    let missing: &[u8] = b"/no\x1b[2Jsuch\nfile";
    let shown_missing = "/no\\033[2Jsuch\\nfile".to_string();
    for cmd in [
        &["ls"][..],
        &["ls", "-l"],
        &["stat"],
        &["cat"],
        &["getfattr", "-d"],
    ] {
        let o = run(sealfs().args(cmd).arg(&c.image).arg(os(missing)));
        let (_, stderr) = inert(&format!("{cmd:?} of a missing path"), &o);
        assert_eq!(o.status.code(), Some(1), "{cmd:?}: {stderr}");
        assert!(stderr.contains(&shown_missing), "{cmd:?}: {stderr}");
    }
    println!("errors name command-line paths escaped");
}

/// The offset in `image` of the first 4 KiB of `data` (stored uncompressed).
fn find(image: &[u8], data: &[u8]) -> usize {
    image
        .windows(4096)
        .position(|w| w == &data[..4096])
        .expect("the file's data in the image")
}

#[test]
fn damaged_files_are_named_escaped_by_verify_cat_and_extract() {
    if !oracle_guard(need_tool("ls")) {
        return;
    }
    let c = case();
    let bytes = fs::read(&c.image).unwrap();
    let at = find(&bytes, &unique_bytes(38)) + 100;
    let bad = c.dir.join(os(b"bad\x1b[31m\n.img"));
    fs::copy(&c.image, &bad).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&bad).unwrap();
    f.write_all_at(&[!bytes[at]], at as u64).unwrap();
    let victim = format!("/{}", ls_b(&c.src, VICTIM));
    let shown_bad = ls_b_abs(&bad);

    let o = run(sealfs().arg("verify").arg(&bad));
    let (stdout, stderr) = inert("verify of a damaged image", &o);
    assert_eq!(o.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains(&format!("data of {victim}")), "{stderr}");
    assert!(
        stdout.starts_with(&format!("{shown_bad}: FAILED")),
        "{stdout}"
    );

    let o = run(sealfs()
        .arg("cat")
        .arg(&bad)
        .arg(os(&[b"/", VICTIM].concat())));
    let (_, stderr) = inert("cat of a damaged file", &o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&victim), "{stderr}");

    let dest = c.dir.join("out");
    let o = run(sealfs().arg("extract").arg(&bad).arg(&dest));
    let (_, stderr) = inert("extract of a damaged image", &o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&victim), "{stderr}");
    // Into a destination that is not empty: its path from the command line, escaped.
    let full = c.dir.join(os(b"full\x1b[31m\n"));
    fs::create_dir(&full).unwrap();
    fs::write(full.join("x"), b"x").unwrap();
    let o = run(sealfs().arg("extract").arg(&c.image).arg(&full));
    let (_, stderr) = inert("extract into a full directory", &o);
    assert_ne!(o.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&ls_b_abs(&full)), "{stderr}");
    println!("verify, cat and extract name the damaged file and paths escaped");
}

/// An entry for [`python_tar`]: name, kind (`hard`, `dir`, else a file), link target.
type TarEntry<'a> = (&'a [u8], &'a str, &'a [u8]);

/// A tar archive written by Python's `tarfile` with a regular file and the entries `entries`:
/// archives GNU tar would refuse to write.
fn python_tar(out: &Path, entries: &[TarEntry]) {
    let mut script = String::from(
        "import sys, tarfile, io\n\
         t = tarfile.open(sys.argv[1], 'w', format=tarfile.GNU_FORMAT, encoding='utf-8', errors='surrogateescape')\n\
         i = tarfile.TarInfo('ok'); i.size = 3; t.addfile(i, io.BytesIO(b'ok\\n'))\n",
    );
    for (name, kind, target) in entries {
        let lit = |b: &[u8]| format!("bytes({:?}).decode('utf-8', 'surrogateescape')", b.to_vec());
        script.push_str(&format!(
            "i = tarfile.TarInfo({}); i.type = {}; i.linkname = {}; t.addfile(i)\n",
            lit(name),
            match *kind {
                "hard" => "tarfile.LNKTYPE",
                "dir" => "tarfile.DIRTYPE",
                _ => "tarfile.REGTYPE",
            },
            lit(target)
        ));
    }
    script.push_str("t.close()\n");
    let o = run(Command::new("python3").arg("-c").arg(&script).arg(out));
    assert!(
        o.status.success(),
        "python3 tarfile: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// GNU tar's own listing of `archive` with `--quoting-style=escape` (the rule, but for spaces,
/// which the names here do not hold).
fn tar_listing(archive: &Path) -> String {
    run_ok(
        Command::new("tar")
            .args(["--quoting-style=escape", "-tvf"])
            .arg(archive)
            .env("LC_ALL", "C"),
    )
    .unwrap()
}

/// A one-layer OCI layout (uncompressed layer `layer`) at `dir`, its image named `t`.
fn oci_layout(dir: &Path, layer: &[u8]) {
    use sha2::Digest as _;
    let blob = |bytes: &[u8]| -> (String, usize) {
        let hex = hex(&sha2::Sha256::digest(bytes));
        fs::write(dir.join("blobs/sha256").join(&hex), bytes).unwrap();
        (format!("sha256:{hex}"), bytes.len())
    };
    fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
    let (ld, ls) = blob(layer);
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [ld]},
    });
    let (cd, cs) = blob(&serde_json::to_vec(&config).unwrap());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": ls}],
    });
    let (md, ms) = blob(&serde_json::to_vec(&manifest).unwrap());
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms,
            "annotations": {"org.opencontainers.image.ref.name": "t"},
        }],
    });
    fs::write(dir.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
}

#[test]
fn import_errors_name_entries_as_tar_quotes_them() {
    if !oracle_guard(
        need_tool("tar")
            .and(need_tool("python3"))
            .and(need_tool("mksquashfs")),
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // A hard link to a file the archive does not hold; a name that climbs out of the tree.
    let cases: [(&str, TarEntry); 2] = [
        (
            "hard",
            (b"hl\x1b[31m\nx", "hard", b"missing\x1b]0;t\x07\xff"),
        ),
        ("dotdot", (b"up\x1b[2J/../../\nx", "file", b"")),
    ];
    for (what, entry) in cases {
        let archive = d.join(format!("{what}.tar"));
        python_tar(&archive, &[entry]);
        let listing = tar_listing(&archive);
        assert_inert("tar -tv --quoting-style=escape", listing.as_bytes());
        // The entry's line: its name (and target) as tar quotes them.
        let line = listing.lines().last().unwrap();
        let name = line.split(' ').nth(5).unwrap().to_string();
        let target = line.rsplit_once(" link to ").map(|(_, t)| t.to_string());
        let out = d.join("out.img");
        let o = run(sealfs().arg("build").arg("--tar").arg(&archive).arg(&out));
        let (_, stderr) = inert(&format!("build --tar ({what})"), &o);
        assert_ne!(o.status.code(), Some(0), "{what}: {stderr}");
        // tar lists the name without its leading "./" or "/"; sealfs names it from the root
        // or as archived: the escaped name appears either way.
        let bare = name.trim_start_matches("./");
        assert!(stderr.contains(bare), "{what}: {bare} not in {stderr}");
        if let Some(t) = target {
            assert!(stderr.contains(&t), "{what}: {t} not in {stderr}");
        }

        // The same archive as the layer of an OCI image.
        let layout = d.join(format!("oci-{what}"));
        oci_layout(&layout, &fs::read(&archive).unwrap());
        let o = run(sealfs()
            .arg("build")
            .arg("--oci")
            .arg(format!("{}:t", layout.display()))
            .arg(&out));
        let (_, stderr) = inert(&format!("build --oci ({what})"), &o);
        assert_ne!(o.status.code(), Some(0), "{what}: {stderr}");
        assert!(stderr.contains(bare), "oci {what}: {bare} not in {stderr}");
    }

    // SquashFS: a file whose compressed data is damaged, named as ls -b names it.
    let src = d.join("sqsrc");
    fs::create_dir(&src).unwrap();
    let name: &[u8] = b"sq\x1b[31m\nfile\xff";
    fs::write(src.join(os(name)), b"squash ".repeat(20000)).unwrap();
    let sq = d.join(os(b"image\x1b[2J.sqfs"));
    let o = run(Command::new("mksquashfs").arg(&src).arg(&sq).args([
        "-comp",
        "gzip",
        "-noappend",
        "-no-fragments",
        "-quiet",
    ]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The data blocks follow the 96-byte superblock.
    let f = fs::OpenOptions::new().write(true).open(&sq).unwrap();
    f.write_all_at(&[0xff; 16], 96).unwrap();
    let o = run(sealfs()
        .arg("build")
        .arg("--squashfs")
        .arg(&sq)
        .arg(d.join("sq.img")));
    let (_, stderr) = inert("build --squashfs (damaged data)", &o);
    assert_ne!(o.status.code(), Some(0), "{stderr}");
    let want = ls_b(&src, name);
    assert!(stderr.contains(&want), "{want} not in {stderr}");
    assert!(stderr.contains(&ls_b_abs(&sq)), "{stderr}");
    println!("tar, OCI and SquashFS import errors name entries as tar and ls quote them");
}
