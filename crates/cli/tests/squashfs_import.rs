//! `sealfs build --squashfs` against squashfs-tools: the full fixture packed by `mksquashfs`
//! with every compressor, by Debian's squashfs-tools 4.5.1 and by 4.7 (the newest release, built
//! by `scripts/build-oracles.sh` into `target/oracles/`); `sealfs build --squashfs` of each image
//! must equal, byte for byte, `unsquashfs -d DIR` of it (as root: owners, permissions, times and
//! xattrs restored) followed by `sealfs build DIR`, for plain and compressed builds and other
//! build options; and the kernel's EROFS mount of the image must equal the kernel's SquashFS
//! mount of the same SquashFS image. Bad images fail naming what and where, and leave nothing.
//!
//! Needs root (owners, devices, mounts), squashfs-tools and squashfs-tools 4.7: prints `SKIP:`
//! otherwise (a failure under CI=true).

mod common;

use common::compare::{compare_trees, Expect};
use common::fixture::{make_full_fixture, EXCLUDE_ARGS};
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One build of squashfs-tools: its version and programs.
struct SquashfsTools {
    version: &'static str,
    mksquashfs: PathBuf,
    unsquashfs: PathBuf,
}

/// squashfs-tools 4.7: `$SQUASHFS_TOOLS_4_7/{mksquashfs,unsquashfs}` when set, else
/// `target/oracles/squashfs-tools-4.7/bin` (scripts/build-oracles.sh); `Err` when it does not
/// run or is not 4.7.
fn tools_4_7() -> Result<SquashfsTools, String> {
    let dir = match std::env::var_os("SQUASHFS_TOOLS_4_7") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/oracles/squashfs-tools-4.7/bin"),
    };
    let mk = dir.join("mksquashfs");
    let out = Command::new(&mk).arg("-version").output().map_err(|e| {
        format!(
            "squashfs-tools 4.7 not found at {} ({e}): run scripts/build-oracles.sh",
            mk.display()
        )
    })?;
    let v = String::from_utf8_lossy(&out.stdout);
    if !v.contains("version 4.7") {
        return Err(format!("{} is not 4.7: {}", mk.display(), v.trim()));
    }
    Ok(SquashfsTools {
        version: "4.7",
        mksquashfs: mk,
        unsquashfs: dir.join("unsquashfs"),
    })
}

/// Debian's squashfs-tools (4.5.1 on bookworm), from `PATH`.
fn tools_debian() -> SquashfsTools {
    SquashfsTools {
        version: "Debian",
        mksquashfs: "mksquashfs".into(),
        unsquashfs: "unsquashfs".into(),
    }
}

/// Both builds, or the reason they cannot run.
fn guard() -> Option<Vec<SquashfsTools>> {
    let new = tools_4_7();
    let check = mount_env()
        .and(need_tool("mksquashfs"))
        .and(need_tool("unsquashfs"))
        .and(new.as_ref().map(drop).map_err(Clone::clone));
    oracle_guard(check).then(|| vec![tools_debian(), new.expect("checked")])
}

/// `sealfs build ARGS --squashfs IMAGE OUT`.
fn sq_build_cmd(image: &Path, out: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(sealfs_bin());
    cmd.arg("build")
        .args(args)
        .arg("--squashfs")
        .arg(image)
        .arg(out);
    cmd.env_remove("SOURCE_DATE_EPOCH");
    cmd.stdin(Stdio::null());
    cmd
}

/// Runs a program that must succeed; its stdout and stderr.
fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed: {text}");
    text
}

/// `mksquashfs SRC IMAGE ARGS` (nothing appended, no progress bar).
fn mksquashfs(t: &SquashfsTools, src: &Path, image: &Path, args: &[&str]) {
    let _ = fs::remove_file(image);
    ok(Command::new(&t.mksquashfs)
        .arg(src)
        .arg(image)
        .args(["-noappend", "-no-progress", "-quiet"])
        .args(args));
}

/// `unsquashfs -d DIR IMAGE` as root: owners, permissions, times and xattrs restored.
fn unsquashfs(t: &SquashfsTools, image: &Path, dir: &Path) {
    let _ = Command::new("rm").arg("-rf").arg(dir).status();
    ok(Command::new(&t.unsquashfs)
        .args(["-no-progress", "-quiet", "-d"])
        .arg(dir)
        .arg(image));
}

struct Work {
    _tmp: Tmpfs,
    src: PathBuf,
    dir: PathBuf,
    _img: tempfile::TempDir,
    img: PathBuf,
}

fn setup(tag: &str) -> Work {
    let tmp = Tmpfs::new(tag).expect("tmpfs");
    let src = tmp.join("src");
    make_full_fixture(&src);
    let dir = tmp.join("work");
    fs::create_dir(&dir).unwrap();
    let img = tempfile::Builder::new()
        .prefix("sealfs-sqfs-")
        .tempdir_in("/var/tmp")
        .unwrap();
    Work {
        _tmp: tmp,
        src,
        dir,
        img: img.path().to_path_buf(),
        _img: img,
    }
}

/// `--squashfs IMAGE` equals `unsquashfs -d DIR IMAGE` + `sealfs build DIR`, byte for byte,
/// for each option set; `what` names the case. The extraction is left at `x`.
fn check_equal(w: &Work, t: &SquashfsTools, image: &Path, what: &str, option_sets: &[&[&str]]) {
    let start = std::time::Instant::now();
    let x = w.dir.join("x");
    unsquashfs(t, image, &x);
    let (dir_img, sq_img) = (w.img.join("dir.img"), w.img.join("sq.img"));
    for args in option_sets {
        build_ok(&x, &dir_img, args);
        build_ok_cmd(&mut sq_build_cmd(image, &sq_img, args));
        if fs::read(&dir_img).unwrap() != fs::read(&sq_img).unwrap() {
            // Say how, through the kernel's view of both.
            let (a, b) = (
                mount_erofs(&dir_img).unwrap(),
                mount_erofs(&sq_img).unwrap(),
            );
            let diffs = compare_trees(a.path(), b.path(), &Expect::default());
            panic!(
                "{what} {args:?}: --squashfs differs from unsquashfs + build; mounted, the \
                 second differs from the first by:\n{}",
                diffs.join("\n")
            );
        }
        println!(
            "{what} {args:?}: --squashfs equals unsquashfs -d + build, byte for byte ({:.1?})",
            start.elapsed()
        );
    }
}

/// The kernel's EROFS mount of `--squashfs IMAGE` (default options: times and owners kept)
/// equals the kernel's SquashFS mount of IMAGE: every path, type, mode, owner, time, size,
/// content, link, device and xattr.
fn check_kernel(w: &Work, image: &Path, what: &str) {
    let start = std::time::Instant::now();
    let sq_img = w.img.join("sq.img");
    build_ok_cmd(&mut sq_build_cmd(image, &sq_img, &[]));
    let theirs = mount_squashfs(image).expect("mount the SquashFS image");
    let ours = mount_erofs(&sq_img).expect("mount the EROFS image");
    let diffs = compare_trees(theirs.path(), ours.path(), &Expect::default());
    assert_no_diffs(
        &format!(
            "{what}: kernel EROFS mount of --squashfs vs kernel SquashFS mount ({:.1?})",
            start.elapsed()
        ),
        &diffs,
    );
}

/// Same tree, same image whatever its form: `--squashfs IMAGE` equals `--tar` of GNU tar's
/// archive of `unsquashfs -d` of it (POSIX format, xattrs, sparse files), byte for byte, with
/// what tar cannot carry left out of both (sockets; hard links of FIFOs and devices, which it
/// archives as separate entries). Uses the extraction `check_equal` left at `x`.
fn check_tar(w: &Work, image: &Path, what: &str) {
    let x = w.dir.join("x");
    let archive = w.img.join("x.tar");
    ok(Command::new("tar")
        .args([
            "--format=posix",
            "--xattrs",
            "--xattrs-include=*",
            "--sparse",
        ])
        .args(["--numeric-owner", "-C"])
        .arg(&x)
        .arg("-cf")
        .arg(&archive)
        .arg("."));
    let tar_loses = [
        "--exclude-regex",
        "(^|/)sock$|^hard/(fifo_a|dev_a|d1/fifo_b|d2/dev_b)$",
    ];
    let (tar_img, sq_img) = (w.img.join("tar.img"), w.img.join("sq.img"));
    let no_more: &[&str] = &[];
    for extra in [no_more, &["-z", "lz4hc", "-E", "fragments"]] {
        let args: Vec<&str> = [&tar_loses[..], extra].concat();
        build_ok_cmd(&mut sq_build_cmd(image, &sq_img, &args));
        build_ok_cmd(
            Command::new(sealfs_bin())
                .arg("build")
                .args(&args)
                .arg("--tar")
                .arg(&archive)
                .arg(&tar_img)
                .env_remove("SOURCE_DATE_EPOCH"),
        );
        assert!(
            fs::read(&tar_img).unwrap() == fs::read(&sq_img).unwrap(),
            "{what} {args:?}: --squashfs differs from --tar of its unsquashfs -d"
        );
        println!("{what} {args:?}: --squashfs equals --tar of its unsquashfs -d, byte for byte");
    }
    fs::remove_file(&archive).unwrap();
}

/// Every compressor of both squashfs-tools builds on the full fixture: `--squashfs` equals
/// unsquashfs + build for plain and compressed builds and the options that change entries; the
/// kernel agrees (except for lzma, which it cannot read); for zstd, `--tar` of the extraction gives
/// the same image too.
#[test]
fn every_compressor_equals_unsquashfs_then_build() {
    let Some(all) = guard() else { return };
    let w = setup("sqfs-comp");
    let image = w.img.join("f.sqfs");
    let sets: [(&str, &[&[&str]]); 6] = [
        (
            "gzip",
            &[&[], &["-z", "lz4hc", "-E", "fragments", "-C", "65536"]],
        ),
        ("lzo", &[&["-T", "1000", "--all-root"]]),
        ("lz4", &[&["--no-xattrs", "-z", "lz4"]]),
        ("xz", &[&["-T", "5", "-z", "zstd"]]),
        ("zstd", &[&["--preset", "small"]]),
        ("lzma", &[EXCLUDE_ARGS]),
    ];
    for t in &all {
        for (comp, option_sets) in sets {
            let what = format!("mksquashfs {} -comp {comp}", t.version);
            mksquashfs(t, &w.src, &image, &["-comp", comp]);
            check_equal(&w, t, &image, &what, option_sets);
            if comp == "zstd" {
                check_tar(&w, &image, &what);
            }
            if comp != "lzma" {
                check_kernel(&w, &image, &what);
            }
        }
    }
}

/// Image layouts squashfs-tools can make (block sizes, fragments or not, tail ends, uncompressed
/// tables, no padding, NFS export table or not, compressor options, hard
/// links stored as copies): `--squashfs` equals unsquashfs + build, and the kernel agrees
/// (where it can mount the image).
#[test]
fn layouts_equal_unsquashfs_then_build() {
    let Some(all) = guard() else { return };
    let w = setup("sqfs-layout");
    let image = w.img.join("l.sqfs");
    let variants: [(usize, &[&str]); 8] = [
        (0, &["-no-fragments", "-b", "4K"]),
        (0, &["-noI", "-noD", "-noF", "-noX"]),
        (1, &["-no-fragments", "-b", "4K", "-nopad"]),
        (
            1,
            &["-tailends", "-b", "1M", "-comp", "zstd", "-no-exports"],
        ),
        (1, &["-noI", "-noD", "-noF", "-noX", "-noId"]),
        (1, &["-comp", "lz4", "-Xhc", "-no-xattrs"]),
        (
            1,
            &[
                "-comp",
                "xz",
                "-Xbcj",
                "x86",
                "-Xdict-size",
                "50%",
                "-no-hardlinks",
            ],
        ),
        (1, &["-comp", "lzo", "-Xalgorithm", "lzo1x_1", "-b", "64K"]),
    ];
    for (tools, args) in variants {
        let t = &all[tools];
        let what = format!("mksquashfs {} {}", t.version, args.join(" "));
        let start = std::time::Instant::now();
        mksquashfs(t, &w.src, &image, args);
        println!("{what}: made in {:.1?}", start.elapsed());
        check_equal(&w, t, &image, &what, &[&[]]);
        // A loop device ends at the image's last whole sector: the kernel cannot read an image
        // not padded (-nopad) through one; and its SquashFS driver refuses to list the xattrs of
        // an image that has none (EOPNOTSUPP).
        if !args.contains(&"-nopad") && !args.contains(&"-no-xattrs") {
            check_kernel(&w, &image, &what);
        }
    }
}

/// A superblock field (little-endian) of `img`.
fn sb_u64(img: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(img[at..at + 8].try_into().unwrap())
}

/// The position of `needle` in `hay[from..to]` (which must hold it once).
fn find_in(hay: &[u8], from: usize, to: usize, needle: &[u8]) -> usize {
    let hits: Vec<usize> = hay[from..to]
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| from + i)
        .collect();
    assert_eq!(hits.len(), 1, "{needle:?} found {} times", hits.len());
    hits[0]
}

/// The start of the basic regular-file inode of size `size` in an image with uncompressed
/// tables (`-noI`): its `file_size` field is at +28.
fn reg_inode(img: &[u8], size: u32) -> usize {
    let (itab, dtab) = (sb_u64(img, 64) as usize, sb_u64(img, 72) as usize);
    let at = find_in(img, itab, dtab, &size.to_le_bytes()) - 28;
    assert_eq!(
        img[at..at + 2],
        2u16.to_le_bytes(),
        "a regular file's inode"
    );
    at
}

/// Bad images fail naming what is wrong and where (the entry, the byte or metadata block),
/// exit non-zero and leave nothing at OUT.
#[test]
fn bad_images_fail_naming_what_and_where_and_leave_nothing() {
    let Some(all) = guard() else { return };
    let t = &all[0];
    let w = setup("sqfs-bad");
    let tree = w.dir.join("t");
    fs::create_dir_all(tree.join("a/loop")).unwrap();
    fs::write(tree.join("a/f"), "f".repeat(1234)).unwrap();
    let text: String = (0..30000).map(|i| format!("line {i}\n")).collect();
    fs::write(tree.join("big"), &text.as_bytes()[..300_000]).unwrap();
    std::os::unix::fs::symlink("a/f", tree.join("link")).unwrap();
    let (plain, gz) = (w.img.join("u.sqfs"), w.img.join("g.sqfs"));
    // Fixed times make the images the same every run, so each flipped byte below always
    // damages the same bits (a flip inside a deflate stream can leave its output unchanged).
    let fixed = [
        "-all-time",
        "0",
        "-mkfs-time",
        "0",
        "-no-xattrs",
        "-all-root",
    ];
    let raw = [&["-noI", "-noD", "-noF", "-noX"][..], &fixed].concat();
    mksquashfs(t, &tree, &plain, &raw);
    mksquashfs(t, &tree, &gz, &fixed);
    let (plain, gz) = (fs::read(&plain).unwrap(), fs::read(&gz).unwrap());
    // The images are sound to begin with.
    for (name, bytes) in [("u", &plain), ("g", &gz)] {
        let i = w.img.join(format!("{name}-ok.sqfs"));
        fs::write(&i, bytes).unwrap();
        build_ok_cmd(&mut sq_build_cmd(&i, &w.img.join("ok.img"), &[]));
    }
    let out = w.img.join("bad.img");
    let attempt = |bytes: &[u8], expect: &[&str]| {
        let i = w.img.join("bad.sqfs");
        fs::write(&i, bytes).unwrap();
        let o = run(&mut sq_build_cmd(&i, &out, &[]));
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert!(!o.status.success(), "accepted: {expect:?}");
        for e in expect {
            assert!(err.contains(e), "{e:?} not in: {err}");
        }
        assert!(!out.exists(), "an image was left behind");
        let left = temp_leftovers(&w.img);
        assert!(left.is_empty(), "{left:?}");
        println!("refused as expected: {}", err.trim());
    };
    let patched = |base: &[u8], at: usize, bytes: &[u8]| {
        let mut b = base.to_vec();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        b
    };

    // Truncated images.
    attempt(&gz[..50], &["truncated", "50 bytes"]);
    let used = sb_u64(&gz, 40);
    attempt(
        &gz[..gz.len() / 2],
        &["truncated", &format!("says the image is {used} bytes")],
    );
    // Bad superblocks.
    attempt(&patched(&gz, 0, b"hsqt"), &["not a SquashFS image"]);
    attempt(
        &patched(&gz, 22, &[16, 0]),
        &["block_log 16", "block size 131072"],
    );
    attempt(&patched(&gz, 20, &[9, 0]), &["unknown compressor id 9"]);
    attempt(&patched(&gz, 28, &[3, 0]), &["version 3.0"]);
    // A corrupt compressed data block: big's first block starts right after the superblock.
    let mut bad = gz.clone();
    bad[96 + 200] ^= 0x55;
    attempt(&bad, &["/big", "data block 0", "gzip", "at byte 96"]);
    // A corrupt compressed metadata block (the inode table).
    let itab = sb_u64(&gz, 64);
    let mut bad = gz.clone();
    bad[itab as usize + 20] ^= 0x55;
    attempt(&bad, &["inode table", "gzip", &format!("at byte {itab}")]);

    // In the image with uncompressed tables: a directory made to contain the root (a cycle).
    let (dtab, root) = (sb_u64(&plain, 72) as usize, sb_u64(&plain, 32));
    let loop_name = find_in(&plain, dtab, plain.len(), b"loop");
    let root_off = (root & 0xffff) as u16;
    attempt(
        &patched(&plain, loop_name - 8, &root_off.to_le_bytes()),
        &["/a/loop", "a second time", "cycle"],
    );
    // A name with '/'.
    attempt(
        &patched(&plain, loop_name, b"../x"),
        &["/a", "invalid name", "../x", "directory listing"],
    );
    // References out of range: a fragment, an owner, the data blocks, an inode.
    let f = reg_inode(&plain, 1234);
    attempt(
        &patched(&plain, f + 20, &1000u32.to_le_bytes()),
        &["/a/f", "fragment table entry 1000 does not exist"],
    );
    attempt(
        &patched(&plain, f + 4, &77u16.to_le_bytes()),
        &["/a/f", "uid/gid index 77"],
    );
    let big = reg_inode(&plain, 300_000);
    let near_end = (sb_u64(&plain, 40) - 10) as u32;
    attempt(
        &patched(&plain, big + 16, &near_end.to_le_bytes()),
        &["/big", "run past the end of the image"],
    );
    let itab = sb_u64(&plain, 64) as usize;
    let root_inode = itab + 2 + root_off as usize;
    let listing = u16::from_le_bytes(plain[root_inode + 26..root_inode + 28].try_into().unwrap());
    let header = dtab + 2 + listing as usize;
    attempt(
        &patched(&plain, header + 4, &0x00ff_ffffu32.to_le_bytes()),
        &["inode reference", "outside the inode table"],
    );
}
