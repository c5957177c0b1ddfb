//! The reading commands on images made by erofs-utils 1.9's `mkfs.erofs` with what 1.5 cannot
//! write (MicroLZMA, DEFLATE, fragments in the packed inode, dedupe, the 48-bit layout, compressed
//! directories, metadata compression) agree with the kernel's mount of the same image:
//! `sealfs ls -lAiR` line for line with coreutils `ls -lAiR` of the mount (inode numbers
//! included), `sealfs cat` of every regular file byte for byte, and `sealfs extract` equal to the
//! mount (contents, modes, owners, times, xattrs, links).
//!
//! Needs root, the kernel's erofs and `mkfs.erofs` 1.9 (`scripts/build-oracles.sh` or
//! `$MKFS_EROFS`); prints `SKIP` without them (fails under CI).

mod common;

use common::compare::{compare_trees, Expect};
use common::*;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const CASES: &[(&str, &[&str])] = &[
    ("lzma-fragments-dedupe", &["-zlzma", "-Efragments,dedupe"]),
    (
        "deflate-64k-48bit-ztail",
        &["-zdeflate", "-C65536", "-E48bit,ztailpacking"],
    ),
    (
        "zstd-all-fragments-dirs",
        &["-zzstd", "-C131072", "-Eall-fragments", "--zD"],
    ),
    (
        "lz4hc-16k-48bit-fragments",
        &["-zlz4hc", "-C16384", "-E48bit,fragments"],
    ),
    // Metadata compression: every inode in the metabox, which the reader decodes like a file.
    (
        "zstd-metabox-dirs-fragments",
        &["-zzstd", "-C65536", "-m4096", "--zD", "-Efragments"],
    ),
];

fn sealfs() -> Command {
    let mut c = Command::new(sealfs_bin());
    c.env("TZ", "UTC").env("LC_ALL", "C").stdin(Stdio::null());
    c
}

fn ok(cmd: &mut Command) -> Output {
    let o = run(cmd);
    assert!(
        o.status.success(),
        "{cmd:?} failed ({:?})\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// `ls -lR` lines with directory headers reduced to image paths (`prefix`, the mount point, taken
/// off; our "/" root is "").
fn ls_lines(out: &[u8], prefix: Option<&[u8]>) -> Vec<Vec<u8>> {
    let lines: Vec<&[u8]> = out.split(|&b| b == b'\n').collect();
    let mut v = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let header = (i == 0 || lines[i - 1].is_empty()) && line.ends_with(b":");
        if !header {
            v.push(line.to_vec());
            continue;
        }
        let p = &line[..line.len() - 1];
        let p: &[u8] = match prefix {
            Some(m) => p.strip_prefix(m).expect("header under the mount point"),
            None if p == b"/" => b"",
            None => p,
        };
        v.push([b"HEADER ".as_slice(), p].concat());
    }
    v
}

/// Regular files under `root` (relative paths), in walk order.
fn regular_files(root: &Path, rel: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in fs::read_dir(root.join(rel)).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        let r = rel.join(e.file_name());
        if t.is_dir() {
            regular_files(root, &r, out);
        } else if t.is_file() {
            out.push(r);
        }
    }
}

fn check(mkfs: &Path, tmp: &Tmpfs, src: &Path, name: &str, args: &[&str]) {
    let image = tmp.join(format!("{name}.erofs"));
    mkfs_with(mkfs, src, &image, args).unwrap();
    let mnt = mount_erofs(&image).expect("mount");
    let m = mnt.path();
    let mut problems = Vec::new();

    let theirs = ok(Command::new("ls")
        .args(["-lAiR", "-b", "-n", "--time-style=long-iso"])
        .arg(m)
        .env("LC_ALL", "C")
        .env("TZ", "UTC"))
    .stdout;
    let ours = ok(sealfs().args(["ls", "-lAiR", "-b"]).arg(&image).arg("/")).stdout;
    let (a, b) = (
        ls_lines(&theirs, Some(m.as_os_str().as_bytes())),
        ls_lines(&ours, None),
    );
    for i in 0..a.len().max(b.len()) {
        if a.get(i) != b.get(i) && problems.len() < 20 {
            problems.push(format!(
                "ls line {i}: kernel {:?}, sealfs {:?}",
                a.get(i).map(|l| show(l)),
                b.get(i).map(|l| show(l))
            ));
        }
    }

    let mut files = Vec::new();
    regular_files(m, Path::new(""), &mut files);
    for f in &files {
        let want = fs::read(m.join(f)).unwrap();
        let got = ok(sealfs().arg("cat").arg(&image).arg(Path::new("/").join(f))).stdout;
        if got != want {
            problems.push(format!("cat /{}: differs", f.display()));
        }
    }

    let out = tmp.join(format!("{name}.out"));
    ok(sealfs().args(["extract", "-q"]).arg(&image).arg(&out));
    problems.extend(
        compare_trees(m, &out, &Expect::default())
            .into_iter()
            // An extracted root's ".." is its real parent, a mount root's is itself.
            .filter(|d| !d.starts_with("/: readdir entry .. has d_ino ")),
    );
    println!(
        "{name}: {} ls lines, {} files, {} bytes",
        a.len(),
        files.len(),
        fs::metadata(&image).unwrap().len()
    );
    assert!(
        problems.is_empty(),
        "{name}: sealfs differs from the kernel:\n{}",
        problems.join("\n")
    );
    drop(mnt);
    fs::remove_dir_all(&out).unwrap();
    fs::remove_file(&image).unwrap();
}

#[test]
fn read_commands_agree_with_the_kernel_on_mkfs_1_9_images() {
    let mkfs = mkfs_erofs_1_9();
    if !oracle_guard(mount_env().and(mkfs.as_ref().map(drop).map_err(Clone::clone))) {
        return;
    }
    let mkfs = mkfs.unwrap();
    let tmp = Tmpfs::new("mkfs19").expect("tmpfs");
    let src = tmp.join("src");
    fs::create_dir(&src).unwrap();
    small_fixture::build(&src, 7, false);
    for (name, args) in CASES {
        check(&mkfs, &tmp, &src, name, args);
    }
}
