//! `sealfs mount` against the kernel: the FUSE mount of an image must show what a kernel EROFS mount
//! of the same image shows (every stat field, inode numbers included, directory entries in order with
//! d_ino and d_type, symlink targets, xattr lists and values, content, statfs), and what the source
//! holds (the comparison of the first issue), for plain, sealed and compressed images of the full
//! fixture and a random tree. Also: tampering (EIO for the damaged file only, logged once with path
//! and block), concurrent readers, statistics, and the lifecycle (umount, signals, a stale mount
//! point, a missing image, a wrong digest).
//!
//! Needs root, loop devices, FUSE and erofs-utils: prints `SKIP:` otherwise (a failure under CI=true).

#![allow(
    unsafe_code,
    reason = "statfs of the mount and signals to the daemon, which std does not offer"
)]

mod common;

use common::compare::{check_xattr_filter, compare_trees, Expect};
use common::fixture::make_full_fixture;
use common::randtree::{materialize, tree_strategy};
use common::sys::{lgetxattr, llistxattr, raw_readdir};
use common::*;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Files larger than this are compared between the two mounts by metadata and sampled ranges.
const FULL_CONTENT_LIMIT: u64 = 64 << 20;

fn fuse_env() -> Result<(), String> {
    mount_env()?;
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse missing (no FUSE)".into());
    }
    Ok(())
}

/// The `fuse` module's switch for FUSE over io_uring (off by default).
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// The mount argument that serves a mount over io_uring.
const URING: &str = "--transport=uring";

fn uring_env() -> Result<(), String> {
    fuse_env()?;
    if !Path::new(ENABLE_URING).exists() {
        return Err(format!(
            "{ENABLE_URING} missing (FUSE over io_uring needs Linux 6.14+ with CONFIG_FUSE_IO_URING)"
        ));
    }
    Ok(())
}

/// `enable_uring` on for as long as a mount over io_uring lives (the kernel refuses its rings'
/// commands once it is off), one such mount at a time in this process, and set back to what it
/// was afterwards.
struct UringOn {
    before: String,
    _one: std::sync::MutexGuard<'static, ()>,
}

impl UringOn {
    fn new() -> UringOn {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let before = fs::read_to_string(ENABLE_URING).unwrap();
        fs::write(ENABLE_URING, "Y").unwrap();
        UringOn {
            before: before.trim().to_string(),
            _one: one,
        }
    }
}

impl Drop for UringOn {
    fn drop(&mut self) {
        let _ = fs::write(ENABLE_URING, &self.before);
    }
}

/// Asserts that the requests of a mount over io_uring came through the rings: the daemon counts
/// them (`ring_requests`), and at least every read and directory listing must be among them.
fn assert_served_by_rings(mp: &Path) {
    let s = stats(mp);
    let f = &s["fuse"];
    assert_eq!(f["transport"], "io_uring", "{s}");
    let ring = f["ring_requests"].as_u64().unwrap();
    let reads = f["reads"].as_u64().unwrap() + f["readdirs"].as_u64().unwrap();
    println!("io_uring: {ring} requests through the rings, {reads} reads and listings");
    assert!(
        ring > 0 && ring >= reads,
        "requests went around the rings: {s}"
    );
}

/// A FUSE mount made with `sealfs mount`; unmounted with `sealfs umount` on drop (and then, for a
/// mount over io_uring, `enable_uring` set back).
struct FuseMount {
    path: PathBuf,
    _dir: tempfile::TempDir,
    _uring: Option<UringOn>,
}

impl FuseMount {
    fn new(image: &Path, args: &[&str]) -> FuseMount {
        let dir = tempfile::Builder::new()
            .prefix("sealfs-fuse-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("mnt");
        fs::create_dir(&path).unwrap();
        let uring = args.contains(&URING).then(UringOn::new);
        let out = run(Command::new(sealfs_bin())
            .arg("mount")
            .args(args)
            .arg(image)
            .arg(&path)
            .stdin(Stdio::null()));
        assert!(
            out.status.success(),
            "sealfs mount {args:?} {} failed: {}",
            image.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        FuseMount {
            path,
            _dir: dir,
            _uring: uring,
        }
    }
}

/// The mount's log once it has at least `lines` lines (failures are named and written by a thread
/// of the daemon, after the failed request is answered), or after 10 s; a moment later, so that a
/// line too many would be seen too.
fn logged(log: &Path, lines: usize) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline
        && fs::read_to_string(log).unwrap_or_default().lines().count() < lines
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    fs::read_to_string(log).unwrap_or_default()
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        let ok = Command::new(sealfs_bin())
            .arg("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

fn is_mounted(path: &Path) -> bool {
    let canon = fs::canonicalize(path.parent().unwrap())
        .unwrap()
        .join(path.file_name().unwrap());
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|mp| Path::new(mp) == canon))
}

fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Pids of `sealfs mount` daemons serving `mp` (found by their command line).
fn daemon_pids(mp: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        if args.len() > 1
            && args.iter().any(|a| *a == b"mount")
            && args
                .iter()
                .any(|a| Path::new(std::str::from_utf8(a).unwrap_or("")) == mp)
            && args[0].ends_with(b"sealfs")
        {
            pids.push(pid);
        }
    }
    pids
}

// ---------------------------------------------------------------------------------------------
// Kernel mount vs FUSE mount
// ---------------------------------------------------------------------------------------------

fn statfs(path: &Path) -> libc::statfs {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: zeroed statfs is valid plain data; c is NUL-terminated.
    unsafe {
        let mut s: libc::statfs = std::mem::zeroed();
        assert_eq!(
            libc::statfs(c.as_ptr(), &mut s),
            0,
            "statfs {}",
            path.display()
        );
        s
    }
}

fn read_range(path: &Path, offset: u64, len: usize) -> Result<Vec<u8>, String> {
    let mut f = fs::File::open(path).map_err(|e| format!("open: {e}"))?;
    f.seek(SeekFrom::Start(offset)).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    f.take(len as u64)
        .read_to_end(&mut buf)
        .map_err(|e| format!("read at {offset}: {e}"))?;
    Ok(buf)
}

/// Everything `lstat`, `readdir`, `readlink`, `listxattr`/`getxattr` and `read` show, compared
/// between the kernel mount `k` and the FUSE mount `f`. Returns the differences and the number of
/// paths compared.
fn compare_mounts(k: &Path, f: &Path) -> (Vec<String>, usize) {
    let mut diffs = Vec::new();
    let (sk, sf) = (statfs(k), statfs(f));
    for (what, a, b) in [
        ("f_blocks", sk.f_blocks, sf.f_blocks),
        ("f_bfree", sk.f_bfree, sf.f_bfree),
        ("f_bavail", sk.f_bavail, sf.f_bavail),
        ("f_files", sk.f_files, sf.f_files),
        ("f_ffree", sk.f_ffree, sf.f_ffree),
        ("f_bsize", sk.f_bsize as u64, sf.f_bsize as u64),
        ("f_namelen", sk.f_namelen as u64, sf.f_namelen as u64),
    ] {
        if a != b {
            diffs.push(format!("statfs {what}: kernel {a}, fuse {b}"));
        }
    }
    let mut stack = vec![PathBuf::new()];
    let mut count = 0;
    while let Some(rel) = stack.pop() {
        count += 1;
        let (kp, fp) = (k.join(&rel), f.join(&rel));
        let at = format!("/{}", rel.display());
        let (km, fm) = match (fs::symlink_metadata(&kp), fs::symlink_metadata(&fp)) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                diffs.push(format!(
                    "{at}: lstat kernel {:?}, fuse {:?}",
                    a.err(),
                    b.err()
                ));
                continue;
            }
        };
        let fields = |m: &fs::Metadata| {
            [
                ("ino", m.ino() as i64),
                ("mode", m.mode() as i64),
                ("nlink", m.nlink() as i64),
                ("uid", m.uid() as i64),
                ("gid", m.gid() as i64),
                ("size", m.size() as i64),
                ("blocks", m.blocks() as i64),
                ("blksize", m.blksize() as i64),
                ("rdev", m.rdev() as i64),
                ("mtime", m.mtime()),
                ("mtime_nsec", m.mtime_nsec()),
                ("atime", m.atime()),
                ("atime_nsec", m.atime_nsec()),
                ("ctime", m.ctime()),
                ("ctime_nsec", m.ctime_nsec()),
            ]
        };
        for ((name, a), (_, b)) in fields(&km).into_iter().zip(fields(&fm)) {
            if a != b {
                diffs.push(format!("{at}: {name} kernel {a}, fuse {b}"));
            }
        }
        match (llistxattr(&kp), llistxattr(&fp)) {
            (Ok(a), Ok(b)) => {
                if a != b {
                    diffs.push(format!("{at}: xattr names kernel {a:?}, fuse {b:?}"));
                }
                for n in &a {
                    let (va, vb) = (lgetxattr(&kp, n).ok(), lgetxattr(&fp, n).ok());
                    if va != vb {
                        diffs.push(format!("{at}: xattr {} differs", show(n)));
                    }
                }
            }
            (a, b) => diffs.push(format!(
                "{at}: listxattr kernel {:?}, fuse {:?}",
                a.err(),
                b.err()
            )),
        }
        let ft = km.file_type();
        if ft.is_symlink() {
            let (a, b) = (fs::read_link(&kp).ok(), fs::read_link(&fp).ok());
            if a != b {
                diffs.push(format!("{at}: link target kernel {a:?}, fuse {b:?}"));
            }
        } else if ft.is_file() {
            let size = km.size();
            let ranges: Vec<(u64, usize)> = if size <= FULL_CONTENT_LIMIT {
                vec![(0, size as usize + 1)]
            } else {
                vec![
                    (0, 1 << 20),
                    (size / 2 - (1 << 19), 1 << 20),
                    (size - (1 << 20), 2 << 20),
                ]
            };
            for (off, len) in ranges {
                match (read_range(&kp, off, len), read_range(&fp, off, len)) {
                    (Ok(a), Ok(b)) if a == b => {}
                    (Ok(_), Ok(_)) => diffs.push(format!("{at}: content differs at {off}+{len}")),
                    (a, b) => diffs.push(format!(
                        "{at}: read kernel {:?}, fuse {:?}",
                        a.err(),
                        b.err()
                    )),
                }
            }
        } else if ft.is_dir() {
            match (raw_readdir(&kp), raw_readdir(&fp)) {
                (Ok(a), Ok(b)) => {
                    let show_ents = |v: &[common::sys::RawDirent]| {
                        v.iter()
                            .map(|e| (e.name.clone(), e.ino, e.d_type))
                            .collect::<Vec<_>>()
                    };
                    let (ea, eb) = (show_ents(&a), show_ents(&b));
                    if ea != eb {
                        let first = ea
                            .iter()
                            .zip(&eb)
                            .position(|(x, y)| x != y)
                            .unwrap_or(ea.len().min(eb.len()));
                        diffs.push(format!(
                            "{at}: readdir differs ({} vs {} entries), first at {first}: kernel {:?}, fuse {:?}",
                            ea.len(),
                            eb.len(),
                            ea.get(first).map(|e| (show(&e.0), e.1, e.2)),
                            eb.get(first).map(|e| (show(&e.0), e.1, e.2)),
                        ));
                    }
                    for e in a.iter().rev() {
                        if e.name != b"." && e.name != b".." {
                            let name = std::ffi::OsStr::from_bytes(&e.name);
                            stack.push(rel.join(name));
                        }
                    }
                }
                (a, b) => diffs.push(format!(
                    "{at}: readdir kernel {:?}, fuse {:?}",
                    a.err(),
                    b.err()
                )),
            }
        }
    }
    (diffs, count)
}

/// Builds `src` with `build_args`, mounts it with the kernel and with `sealfs mount`, and runs every
/// comparison: kernel vs FUSE, source vs FUSE, the xattr filter through FUSE.
fn check_image(src: &Path, image_dir: &Path, build_args: &[&str], mount_args: &[&str], tag: &str) {
    let image = image_dir.join(format!("{tag}.erofs"));
    build_ok(src, &image, build_args);
    let filtered = !build_args.contains(&"--no-xattr-filter");
    check_mounts(Some(src), &image, mount_args, tag, filtered);
}

/// Mounts `image` (of `src`, if given) with the kernel and with `sealfs mount`, and runs every
/// comparison: kernel vs FUSE, source vs FUSE, the xattr filter through FUSE (which must answer some
/// absent-name lookup when the image has `filtered` name filters).
fn check_mounts(src: Option<&Path>, image: &Path, mount_args: &[&str], tag: &str, filtered: bool) {
    let image = image.to_path_buf();
    let kernel = mount_erofs(&image).unwrap();
    let fuse = FuseMount::new(&image, mount_args);
    let t = Instant::now();
    let (mut problems, paths) = compare_mounts(kernel.path(), &fuse.path);
    println!(
        "{tag}: kernel vs FUSE: {paths} paths, {} differences, {:.2?}",
        problems.len(),
        t.elapsed()
    );
    if let Some(src) = src {
        let diffs = compare_trees(src, &fuse.path, &Expect::default());
        println!("{tag}: source vs FUSE: {} differences", diffs.len());
        problems.extend(diffs);
    }
    let before = stats(&fuse.path);
    let (filter_problems, lookups) = check_xattr_filter(&fuse.path);
    problems.extend(filter_problems);
    let after = stats(&fuse.path);
    let skips = after["reader"]["xattr_filter_skips"].as_u64().unwrap()
        - before["reader"]["xattr_filter_skips"].as_u64().unwrap();
    println!("{tag}: {lookups} xattr lookups through FUSE, {skips} answered by the filter");
    if filtered && skips == 0 {
        problems.push("no absent-xattr lookup was answered by the bloom filter".into());
    }
    if problems.len() > 40 {
        problems.truncate(40);
    }
    assert!(problems.is_empty(), "{tag}:\n{}", problems.join("\n"));
    if mount_args.contains(&URING) {
        assert_served_by_rings(&fuse.path);
    }
}

fn stats(mp: &Path) -> serde_json::Value {
    let out = run(Command::new(sealfs_bin()).args(["stats", "--json"]).arg(mp));
    assert!(
        out.status.success(),
        "sealfs stats: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stats JSON")
}

#[test]
fn full_fixture_plain_sealed_and_compressed() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let tmp = Tmpfs::new("fuse-fixture").expect("tmpfs");
    let src = tmp.join("src");
    make_full_fixture(&src);
    let images = tempfile::Builder::new()
        .prefix("sealfs-fuse-img-")
        .tempdir_in("/var/tmp")
        .unwrap();
    check_image(&src, images.path(), &["--no-seal"], &[], "plain");
    check_image(&src, images.path(), &[], &[], "sealed");
    check_image(
        &src,
        images.path(),
        &[],
        &["--verify=none"],
        "sealed-noverify",
    );
    check_image(
        &src,
        images.path(),
        &["-z", "lz4hc", "-C", "65536"],
        // Each file also checked whole against its recorded digest: every file of the fixture
        // (empty, sparse, hard-linked, compressed) has one, and it matches.
        &["--verify=double"],
        "lz4hc-64k-double",
    );
    check_image(
        &src,
        images.path(),
        &["-z", "zstd", "-C", "4096", "--no-xattr-filter"],
        &[],
        "zstd-4k",
    );
}

/// The same comparisons with the mount served over FUSE over io_uring (`--transport=uring`), and
/// its requests checked to have come through the rings.
#[test]
fn full_fixture_over_io_uring() {
    if !oracle_guard(uring_env()) {
        return;
    }
    let tmp = Tmpfs::new("fuse-uring").expect("tmpfs");
    let src = tmp.join("src");
    make_full_fixture(&src);
    let images = tempfile::Builder::new()
        .prefix("sealfs-fuse-img-")
        .tempdir_in("/var/tmp")
        .unwrap();
    check_image(&src, images.path(), &[], &[URING], "sealed-uring");
    check_image(
        &src,
        images.path(),
        &["-z", "lz4hc", "-C", "65536"],
        &[URING, "--verify=double"],
        "lz4hc-64k-double-uring",
    );
}

#[test]
fn random_tree_plain_and_compressed() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let tmp = Tmpfs::new("fuse-random").expect("tmpfs");
    let mkfs_1_9 = mkfs_erofs_1_9();
    let mkfs_1_9 =
        oracle_guard(mkfs_1_9.as_ref().map(drop).map_err(Clone::clone)).then(|| mkfs_1_9.unwrap());
    let mut runner = TestRunner::deterministic();
    for n in 0..3 {
        let desc = tree_strategy().new_tree(&mut runner).unwrap().current();
        let src = tmp.join(format!("src{n}"));
        fs::create_dir(&src).unwrap();
        materialize(&desc, &src).unwrap();
        check_image(&src, tmp.path(), &[], &[], &format!("random{n}"));
        check_image(
            &src,
            tmp.path(),
            &["-z", "lz4", "-C", "4096"],
            &[],
            &format!("random{n}-lz4"),
        );
        // Metadata compression: every inode (with its xattrs, indexes and inline data) in the
        // metabox, directories compressed, small files in the packed inode, as erofs-utils 1.9
        // writes them (inode numbers then follow the kernel's metabox rule). Compared with the
        // kernel only: mkfs.erofs keeps whole seconds. No shared xattrs (`-x`): Linux 6.18 and
        // erofs-utils 1.9.4 lose a shared xattr of an inode in the metabox that also has inline
        // ones (their block buffer, filled from the metabox for the inline entries, is reused for
        // the shared area's block of the same number); sealfs lists it, as the source has it.
        if let Some(mkfs) = mkfs_1_9.as_ref() {
            let tag = format!("random{n}-mkfs-metabox");
            let image = tmp.join(format!("{tag}.erofs"));
            let args = ["-zlz4hc", "-m4096", "--zD", "-Efragments", "-x1000"];
            mkfs_with(mkfs, &src, &image, &args).unwrap();
            check_mounts(None, &image, &[], &tag, true);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tampering, concurrency, statistics
// ---------------------------------------------------------------------------------------------

/// A tree of a few files with distinct content, and the image of it.
fn small_tree(dir: &Path) -> (PathBuf, PathBuf) {
    let src = dir.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..8u32 {
        let data = common::fixture::Rng::new(100 + i as u64).bytes(300_000 + i as usize * 7777);
        fs::write(src.join(format!("f{i}")), &data).unwrap();
    }
    fs::write(src.join("sub/small"), b"small file\n").unwrap();
    let image = dir.join("img.erofs");
    build_ok(&src, &image, &[]);
    (src, image)
}

/// Files `f0`..`f7` of `small_tree` for which `which` holds read through `mnt` as in `src`.
fn assert_files_read(mnt: &Path, src: &Path, which: impl Fn(u32) -> bool) {
    for i in (0..8).filter(|&i| which(i)) {
        let name = format!("f{i}");
        assert_eq!(
            fs::read(mnt.join(&name)).unwrap(),
            fs::read(src.join(&name)).unwrap(),
            "{name}"
        );
    }
}

/// Offset in the image of the first occurrence of `needle`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("file data not found in the image")
}

#[test]
fn tampered_block_gives_eio_only_for_its_file() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    tampered_block_case(&[]);
}

#[test]
fn tampered_block_gives_eio_only_for_its_file_over_io_uring() {
    if !oracle_guard(uring_env()) {
        return;
    }
    tampered_block_case(&[URING]);
}

/// A byte of one file's second block damaged: with `args`, that file fails with EIO there (and
/// reads before it), every other file reads correctly, the failure is logged once.
fn tampered_block_case(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let (src, image) = small_tree(dir.path());
    let victim = fs::read(src.join("f3")).unwrap();
    let mut bytes = fs::read(&image).unwrap();
    // A byte in the second block of f3's data.
    let off = find(&bytes, &victim[4096..4096 + 64]) + 100;
    bytes[off] ^= 0x40;
    fs::write(&image, &bytes).unwrap();
    let log = dir.path().join("mount.log");
    let mut mount_args = vec!["--log", log.to_str().unwrap()];
    mount_args.extend(args);
    let fuse = FuseMount::new(&image, &mount_args);
    // The damaged file fails with EIO where the damage is, twice (logged once); its other blocks
    // and every other file read correctly.
    for _ in 0..2 {
        let e = fs::read(fuse.path.join("f3"))
            .map(|v| v.len())
            .expect_err("damaged file read without error");
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    }
    assert_eq!(
        read_range(&fuse.path.join("f3"), 0, 4096).unwrap(),
        victim[..4096]
    );
    assert_files_read(&fuse.path, &src, |i| i != 3);
    assert_eq!(
        fs::read(fuse.path.join("sub/small")).unwrap(),
        b"small file\n"
    );
    let s = stats(&fuse.path);
    assert!(
        s["fuse"]["verification_errors"].as_u64().unwrap() >= 1,
        "{s}"
    );
    assert!(s["verify"]["failures"].as_u64().unwrap() >= 1, "{s}");
    let text = logged(&log, 1);
    let lines: Vec<&str> = text.lines().collect();
    println!("log: {lines:?}");
    let block = off / 4096;
    assert_eq!(lines.len(), 1, "one failure, logged once: {lines:?}");
    assert!(
        lines[0].contains("/f3") && lines[0].contains(&format!("block {block}")),
        "the log line names the path and block {block}: {}",
        lines[0]
    );
    if args.contains(&URING) {
        assert_served_by_rings(&fuse.path);
    }
}

#[test]
fn tampered_directory_fails_only_its_lookups() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, _) = small_tree(dir.path());
    // A directory of its own block(s), away from the superblock and root.
    fs::create_dir(src.join("big")).unwrap();
    for k in 0..300 {
        fs::write(src.join(format!("big/entry{k:03}")), format!("{k}\n")).unwrap();
    }
    let image = dir.path().join("img2.erofs");
    build_ok(&src, &image, &[]);
    let mut bytes = fs::read(&image).unwrap();
    // The names of directory `big`: ".", ".." and "entry000", stored back to back in its first block.
    let off = find(&bytes, b"...entry000") + 4;
    assert!(off >= 4096, "the directory block is block 0");
    bytes[off] ^= 0x01;
    fs::write(&image, &bytes).unwrap();
    let fuse = FuseMount::new(&image, &[]);
    let e = fs::read_dir(fuse.path.join("big"))
        .and_then(|d| d.collect::<Result<Vec<_>, _>>())
        .map(|v| v.len())
        .expect_err("listing the damaged directory succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let e =
        fs::metadata(fuse.path.join("big/entry000")).expect_err("lookup in the damaged directory");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert_eq!(
        fs::read(fuse.path.join("sub/small")).unwrap(),
        b"small file\n"
    );
    assert_files_read(&fuse.path, &src, |_| true);
}

#[test]
fn concurrent_readers_get_correct_data() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, image) = small_tree(dir.path());
    for args in [&[][..], &["--threads", "4"][..]] {
        let fuse = FuseMount::new(&image, args);
        // 4 processes per file on the same 8 files at once (cat through the page cache), plus
        // threads reading at random offsets.
        let mut children = Vec::new();
        for round in 0..4 {
            for i in 0..8 {
                let p = fuse.path.join(format!("f{}", (i + round) % 8));
                children.push((
                    p.clone(),
                    Command::new("sha256sum")
                        .arg(&p)
                        .stdout(Stdio::piped())
                        .spawn()
                        .unwrap(),
                ));
            }
        }
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (src, mnt) = (src.clone(), fuse.path.clone());
                std::thread::spawn(move || {
                    let mut rng = common::fixture::Rng::new(t);
                    for _ in 0..200 {
                        let name = format!("f{}", rng.below(8));
                        let want = fs::read(src.join(&name)).unwrap();
                        let off = rng.below(want.len() as u64);
                        let len = 1 + rng.below(200_000) as usize;
                        let got = read_range(&mnt.join(&name), off, len).unwrap();
                        let end = (off as usize + len).min(want.len());
                        assert_eq!(got, want[off as usize..end], "{name} at {off}+{len}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("reader thread");
        }
        for (p, child) in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            let name = p.file_name().unwrap();
            let want = run(Command::new("sha256sum").arg(src.join(name)));
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).split(' ').next(),
                String::from_utf8_lossy(&want.stdout).split(' ').next(),
                "{}",
                p.display()
            );
        }
    }
}

/// Text of `len` bytes made of words from a small vocabulary: compressible (lz4hc makes many
/// extents of it), and any 64 bytes of it are found once.
fn wordy_text(seed: u64, len: usize) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "verity", "sealed", "block", "merkle", "erofs", "cluster", "reply", "kernel", "page",
        "digest", "tamper", "read", "fuse", "image", "hash", "extent",
    ];
    let mut rng = common::fixture::Rng::new(seed);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(WORDS[rng.below(16) as usize].as_bytes());
        out.push(if rng.below(9) == 0 { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

/// Many readers at once of images with damaged blocks, uncompressed and lz4hc (64 KiB clusters:
/// extents a request takes whole are decoded straight into the reply's buffer), served by the
/// default and by 4 threads: O_DIRECT `pread`s at random offsets on threads of this process (each
/// a request of its own, so damaged blocks are asked for again and again, by several requests at
/// once; a third of them small, whose blocks the uncompressed image's mount keeps) while `cat`s read whole files through the page cache. No read ever returns a byte that
/// differs from the source: neither a damaged block's bytes nor bytes decoded from a damaged
/// pcluster. On the uncompressed image a read returns no byte of a damaged block (it fails with
/// EIO, or stops before it), and one touching no damaged block returns all it asked for.
#[test]
fn concurrent_readers_of_a_tampered_image_never_get_a_damaged_byte() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    let files: Vec<Vec<u8>> = (0..6u64)
        .map(|i| wordy_text(500 + i, 1_200_000 + i as usize * 33_333))
        .collect();
    for (i, data) in files.iter().enumerate() {
        fs::write(src.join(format!("t{i}")), data).unwrap();
    }
    let compressed: &[&str] = &["-z", "lz4hc", "-C", "65536"];
    for (kind, build_args) in [("uncompressed", &[][..]), ("lz4hc", compressed)] {
        let image = dir.path().join(format!("{kind}.img"));
        build_ok(&src, &image, build_args);
        let mut bytes = fs::read(&image).unwrap();
        // Files t1, t3 and t5 damaged in three places each: one byte of the image's block that
        // holds their bytes at a quarter, a half and four fifths of the file (uncompressed: that
        // file block; lz4hc: a literal found near there, in the pcluster of some extent, whose
        // file this does not know: only the uncompressed image's damaged blocks are listed).
        let mut damaged: Vec<(usize, u64)> = Vec::new();
        for i in [1usize, 3, 5] {
            let data = &files[i];
            for off in [data.len() / 4, data.len() / 2, data.len() * 4 / 5] {
                if kind == "uncompressed" {
                    let at = find(&bytes, &data[off..off + 64]);
                    bytes[at + 5] ^= 0x20;
                    damaged.push((i, (off as u64 + 5) / 4096));
                    continue;
                }
                let mut off = off;
                let at = loop {
                    let needle = &data[off..off + 12];
                    if let Some(p) = bytes.windows(12).position(|w| w == needle) {
                        break p;
                    }
                    off += 997;
                };
                bytes[at + 5] ^= 0x20;
            }
        }
        fs::write(&image, &bytes).unwrap();
        let uring = oracle_guard(uring_env());
        for mount_args in [&[][..], &["--threads", "4"][..], &[URING][..]] {
            if mount_args.contains(&URING) && !uring {
                continue;
            }
            let fuse = FuseMount::new(&image, mount_args);
            let what = format!("{kind} image, mount {mount_args:?}");
            let cats: Vec<_> = (0..12)
                .map(|k| {
                    let i = k % files.len();
                    let child = Command::new("cat")
                        .arg(fuse.path.join(format!("t{i}")))
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap();
                    (i, child)
                })
                .collect();
            let failures = std::thread::scope(|scope| {
                let threads: Vec<_> = (0..8u64)
                    .map(|t| {
                        let (mnt, files, damaged, what) = (&fuse.path, &files, &damaged, &what);
                        scope.spawn(move || {
                            let mut rng = common::fixture::Rng::new(t + 77);
                            let mut failed = 0;
                            for _ in 0..150 {
                                let i = rng.below(files.len() as u64) as usize;
                                let want = &files[i];
                                // Reads of up to 256 KiB, or (a third of them) up to 16 KiB,
                                // which keep the blocks they read in the cluster cache on an
                                // uncompressed image; at block starts half of the time.
                                let mut off = rng.below(want.len() as u64);
                                if rng.below(2) == 0 {
                                    off &= !4095;
                                }
                                let most = if rng.below(3) == 0 {
                                    16 << 10
                                } else {
                                    256 << 10
                                };
                                let len = 1 + rng.below(most) as usize;
                                let f = fs::OpenOptions::new()
                                    .read(true)
                                    .custom_flags(libc::O_DIRECT)
                                    .open(mnt.join(format!("t{i}")))
                                    .unwrap();
                                let mut buf = vec![0u8; len];
                                let end = (off as usize + len).min(want.len());
                                let first_bad = damaged
                                    .iter()
                                    .filter(|&&(f, b)| {
                                        f == i && b * 4096 < end as u64 && (b + 1) * 4096 > off
                                    })
                                    .map(|&(_, b)| (b * 4096).max(off))
                                    .min();
                                match f.read_at(&mut buf, off) {
                                    Ok(n) => {
                                        assert_eq!(
                                            buf[..n],
                                            want[off as usize..off as usize + n],
                                            "{what}: t{i} at {off}+{len}: bytes that differ \
                                             from the source"
                                        );
                                        if kind == "uncompressed" {
                                            match first_bad {
                                                Some(b) => assert!(
                                                    off + n as u64 <= b,
                                                    "{what}: t{i} at {off}+{len}: {n} bytes \
                                                     returned, past damaged byte {b}"
                                                ),
                                                None => assert_eq!(
                                                    off as usize + n,
                                                    end,
                                                    "{what}: t{i} at {off}+{len}: short read"
                                                ),
                                            }
                                        }
                                    }
                                    Err(e) => {
                                        assert_eq!(
                                            e.raw_os_error(),
                                            Some(libc::EIO),
                                            "{what}: t{i} at {off}+{len}: {e}"
                                        );
                                        if kind == "uncompressed" {
                                            assert!(
                                                first_bad.is_some(),
                                                "{what}: t{i} at {off}+{len}: EIO, but no \
                                                 damaged block in the range"
                                            );
                                        }
                                        failed += 1;
                                    }
                                }
                            }
                            failed
                        })
                    })
                    .collect();
                threads
                    .into_iter()
                    .map(|t| t.join().expect("reader thread"))
                    .sum::<u64>()
            });
            for (i, child) in cats {
                let out = child.wait_with_output().unwrap();
                let want = &files[i];
                assert!(
                    want.starts_with(&out.stdout),
                    "{what}: cat t{i}: {} bytes, not a prefix of the source",
                    out.stdout.len()
                );
                if out.status.success() {
                    assert_eq!(out.stdout.len(), want.len(), "{what}: cat t{i}");
                }
                if kind == "uncompressed" {
                    assert_eq!(
                        out.status.success(),
                        !damaged.iter().any(|&(f, _)| f == i),
                        "{what}: cat t{i} ({} of {} bytes)",
                        out.stdout.len(),
                        want.len()
                    );
                }
            }
            assert!(failures > 0, "{what}: no read met a damaged block");
            let s = stats(&fuse.path);
            assert!(
                s["verify"]["failures"].as_u64().unwrap() >= 1,
                "{what}: {s}"
            );
            if kind == "uncompressed" {
                // The small O_DIRECT reads kept the blocks they read, and read some of them again.
                assert!(
                    s["reader"]["cluster_cache_hits"].as_u64().unwrap() > 0,
                    "{what}: {s}"
                );
            }
            println!(
                "{what}: {failures} of 1200 reads failed; {}",
                s["data_path"]
            );
            if mount_args.contains(&URING) {
                assert_served_by_rings(&fuse.path);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lifecycle
// ---------------------------------------------------------------------------------------------

#[test]
fn lifecycle_umount_signals_stale_and_errors() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, image) = small_tree(dir.path());
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).unwrap();
    let mount = |extra: &[&str]| {
        run(Command::new(sealfs_bin())
            .arg("mount")
            .args(extra)
            .arg(&image)
            .arg(&mp)
            .stdin(Stdio::null()))
    };
    let umount = || run(Command::new(sealfs_bin()).arg("umount").arg(&mp));

    // Unmount while idle: the daemon exits.
    assert!(mount(&[]).status.success());
    assert!(is_mounted(&mp));
    let pids = daemon_pids(&mp);
    assert_eq!(pids.len(), 1, "one daemon: {pids:?}");
    assert_eq!(
        fs::read(mp.join("f1")).unwrap(),
        fs::read(src.join("f1")).unwrap()
    );
    let out = umount();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mp));
    wait_until(
        "the daemon exits after umount",
        Duration::from_secs(10),
        || daemon_pids(&mp).is_empty(),
    );
    // umount of something that is not a sealfs mount is refused.
    let out = umount();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not mounted"));

    // SIGTERM and SIGINT unmount and end the daemon.
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        assert!(mount(&[]).status.success());
        let pid = daemon_pids(&mp)[0];
        // SAFETY: sending a signal to a process this test started.
        unsafe { libc::kill(pid, sig) };
        wait_until("the signal unmounts", Duration::from_secs(10), || {
            !is_mounted(&mp)
        });
        wait_until("the daemon exits", Duration::from_secs(10), || {
            daemon_pids(&mp).is_empty()
        });
    }

    // Foreground: stays attached; SIGINT (Ctrl-C) unmounts and it returns 0.
    let mut child = Command::new(sealfs_bin())
        .args(["mount", "--foreground"])
        .arg(&image)
        .arg(&mp)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(
        "the foreground mount is up",
        Duration::from_secs(10),
        || is_mounted(&mp),
    );
    assert_eq!(fs::read(mp.join("sub/small")).unwrap(), b"small file\n");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert!(status.success(), "foreground mount exited with {status}");
    assert!(!is_mounted(&mp));

    // A stale mount point (daemon killed): reads fail with ENOTCONN, a new mount is refused with a
    // message saying what to do, `sealfs umount` clears it, and mounting works again.
    assert!(mount(&[]).status.success());
    let pid = daemon_pids(&mp)[0];
    // SAFETY: killing the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    wait_until("the daemon is gone", Duration::from_secs(10), || {
        daemon_pids(&mp).is_empty()
    });
    let e = fs::metadata(&mp).expect_err("stale mount point");
    // ENOTCONN, or ECONNABORTED while the kernel is still tearing the connection down.
    assert!(
        matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)),
        "{e}"
    );
    let out = mount(&[]);
    assert!(!out.status.success());
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("stale") && msg.contains("sealfs umount"),
        "{msg}"
    );
    let out = umount();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!is_mounted(&mp));
    assert!(mount(&[]).status.success());
    assert!(umount().status.success());
    wait_until("the daemon exits", Duration::from_secs(10), || {
        daemon_pids(&mp).is_empty()
    });

    // A missing image, a file as mount point, a wrong digest: refused, nothing mounted.
    let out = run(Command::new(sealfs_bin())
        .arg("mount")
        .arg(dir.path().join("nope.erofs"))
        .arg(&mp));
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.erofs"));
    let out = run(Command::new(sealfs_bin())
        .arg("mount")
        .arg(&image)
        .arg(src.join("f1")));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));
    let wrong = format!("sha256:{}", "ab".repeat(32));
    let out = mount(&["--digest", &wrong]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("not the expected"));
    assert!(!is_mounted(&mp));
    let out = mount(&["-o", "bogus"]);
    assert!(!out.status.success());
    assert!(!is_mounted(&mp));

    // The right digest mounts and says so in the statistics.
    let digest =
        String::from_utf8(run(Command::new(sealfs_bin()).arg("digest").arg(&image)).stdout)
            .unwrap()
            .trim()
            .to_string();
    assert!(mount(&["--digest", &digest]).status.success());
    let s = stats(&mp);
    assert_eq!(s["trust"], format!("{digest} (authenticated)"));
    assert!(umount().status.success());
}

#[test]
fn statistics_add_up() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, image) = small_tree(dir.path());
    // Extended attributes answered, and no background read of the image to count.
    let fuse = FuseMount::new(&image, &["--xattrs=on"]);
    let s0 = stats(&fuse.path);
    let mut total = 0;
    for i in 0..8 {
        total += fs::read(fuse.path.join(format!("f{i}"))).unwrap().len() as u64;
    }
    let s1 = stats(&fuse.path);
    let d = |a: &serde_json::Value, b: &serde_json::Value, k1: &str, k2: &str| {
        b[k1][k2].as_u64().unwrap() - a[k1][k2].as_u64().unwrap()
    };
    println!("before: {s0}\nafter: {s1}");
    assert_eq!(d(&s0, &s1, "fuse", "bytes_served"), total);
    // Every byte served was read and verified: at least the data's whole blocks (each file's tail
    // sits inline in its inode's metadata block, which may have been verified already).
    let whole_blocks = total / 4096 - 8;
    assert!(d(&s0, &s1, "verify", "blocks_verified") >= whole_blocks);
    assert!(d(&s0, &s1, "verify", "data_bytes_read") >= whole_blocks * 4096);
    // The page cache keeps it: reading again costs the daemon nothing.
    for i in 0..8 {
        assert_eq!(
            fs::read(fuse.path.join(format!("f{i}"))).unwrap(),
            fs::read(src.join(format!("f{i}"))).unwrap()
        );
    }
    let s2 = stats(&fuse.path);
    assert_eq!(
        d(&s1, &s2, "fuse", "bytes_served"),
        0,
        "page cache kept across opens"
    );
    // Walking a tree the kernel has seen costs the daemon nothing: entries, attributes and listings
    // are cached, and no open/opendir is sent after the first of each (ENOSYS = "not needed").
    fn walk(dir: &Path) -> usize {
        let mut n = 0;
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let meta = fs::symlink_metadata(e.path()).unwrap();
            n += 1;
            if meta.is_dir() {
                n += walk(&e.path());
            } else if meta.is_file() {
                fs::File::open(e.path()).unwrap();
            }
        }
        n
    }
    let walked = walk(&fuse.path);
    let s_walk1 = stats(&fuse.path);
    assert_eq!(walk(&fuse.path), walked);
    let s_walk2 = stats(&fuse.path);
    for k in ["lookups", "getattrs", "readdirs", "opens", "reads"] {
        assert_eq!(d(&s_walk1, &s_walk2, "fuse", k), 0, "second walk sent {k}");
    }
    assert!(
        s_walk2["fuse"]["opens"].as_u64().unwrap() <= 2,
        "open and opendir are each sent once at most: {s_walk2}"
    );
    let s2 = s_walk2;
    // Absent xattrs answered by the filter are counted.
    let f = fuse.path.join("f0");
    for n in 0..50 {
        let _ = lgetxattr(&f, format!("user.absent{n}").as_bytes());
    }
    let s3 = stats(&fuse.path);
    println!("{}", serde_json::to_string_pretty(&s3).unwrap());
    assert!(d(&s2, &s3, "fuse", "getxattrs") >= 50);
    // The human form lists the same counters.
    let out = run(Command::new(sealfs_bin()).arg("stats").arg(&fuse.path));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fuse.bytes_served: ") && text.contains("verify.blocks_verified: "));
}

/// An image without extended attributes: once the mount has read every inode and found none
/// (`--xattrs=auto`), the first `getxattr` is answered ENOSYS and the kernel answers every later
/// one itself ("Operation not supported"), so `ls -l` costs no xattr round trip; an image with a
/// single xattr, on its last inode, keeps them answered as the kernel's EROFS answers them;
/// `--xattrs=off` hides them, `--xattrs=on` answers "No data" as the kernel does.
#[test]
fn xattr_requests_stop_when_the_image_has_none() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("d/e")).unwrap();
    for i in 0..200 {
        fs::write(src.join(format!("d/f{i:03}")), format!("{i}")).unwrap();
    }
    fs::write(src.join("d/e/last"), b"last").unwrap();
    let plain = dir.path().join("plain.img");
    build_ok(&src, &plain, &[]);
    let errno = |r: std::io::Result<Vec<u8>>| r.err().and_then(|e| e.raw_os_error());
    let wait_state = |mp: &Path, want: &str| {
        wait_until(&format!("xattrs: {want}"), Duration::from_secs(20), || {
            stats(mp)["fuse"]["xattrs"] == want
        })
    };

    // No xattr anywhere: the kernel stops asking.
    let fuse = FuseMount::new(&plain, &[]);
    wait_state(
        &fuse.path,
        "none in the image: the kernel answers without asking",
    );
    let f = fuse.path.join("d/f000");
    assert_eq!(errno(lgetxattr(&f, b"user.x")), Some(libc::EOPNOTSUPP));
    let s0 = stats(&fuse.path);
    let ls = Command::new("ls")
        .arg("-lR")
        .arg(&fuse.path)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(ls.success());
    for n in 0..20 {
        assert_eq!(
            errno(lgetxattr(&f, format!("security.n{n}").as_bytes())),
            Some(libc::EOPNOTSUPP)
        );
    }
    let s1 = stats(&fuse.path);
    assert_eq!(
        s1["fuse"]["getxattrs"], s0["fuse"]["getxattrs"],
        "no getxattr reached the daemon after the first: {s1}"
    );
    assert!(s1["fuse"]["getattrs"].as_u64().unwrap() + s1["fuse"]["lookups"].as_u64().unwrap() > 0);
    // Everything else reads as the kernel shows it.
    let kernel = mount_erofs(&plain).unwrap();
    let (diffs, _) = compare_mounts(kernel.path(), &fuse.path);
    let diffs: Vec<_> = diffs.iter().filter(|d| !d.contains("listxattr")).collect();
    assert!(diffs.is_empty(), "{diffs:?}");
    drop(fuse);

    // `--xattrs=on`: absent names are "No data", as on the kernel mount.
    let fuse = FuseMount::new(&plain, &["--xattrs=on"]);
    let kf = kernel.path().join("d/f000");
    assert_eq!(errno(lgetxattr(&kf, b"user.x")), Some(libc::ENODATA));
    assert_eq!(
        errno(lgetxattr(&fuse.path.join("d/f000"), b"user.x")),
        Some(libc::ENODATA)
    );
    assert_eq!(
        stats(&fuse.path)["fuse"]["xattrs"],
        "answered from the image"
    );
    drop(fuse);
    drop(kernel);

    // One xattr, on the last inode a breadth-first walk meets: answered, equal to the kernel's.
    common::sys::lsetxattr(&src.join("d/e/last"), b"user.k", b"v").unwrap();
    let with = dir.path().join("with.img");
    build_ok(&src, &with, &[]);
    let kernel = mount_erofs(&with).unwrap();
    let fuse = FuseMount::new(&with, &[]);
    // The check ends with the xattr found ("…while checking…" before).
    wait_state(&fuse.path, "answered from the image");
    let last = |base: &Path| lgetxattr(&base.join("d/e/last"), b"user.k").unwrap();
    assert_eq!(last(&fuse.path), last(kernel.path()));
    assert_eq!(
        errno(lgetxattr(&fuse.path.join("d/f000"), b"user.x")),
        Some(libc::ENODATA)
    );
    let (diffs, _) = compare_mounts(kernel.path(), &fuse.path);
    assert!(diffs.is_empty(), "{diffs:?}");
    drop(fuse);

    // `--xattrs=off` hides even that one.
    let fuse = FuseMount::new(&with, &["--xattrs=off"]);
    assert_eq!(
        errno(lgetxattr(&fuse.path.join("d/e/last"), b"user.k")),
        Some(libc::EOPNOTSUPP)
    );
    assert!(stats(&fuse.path)["fuse"]["xattrs"]
        .as_str()
        .unwrap()
        .starts_with("hidden"));
}

/// The mount's kernel readahead (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`) is what `--read-ahead`
/// says, 1 MiB by default; `0` leaves the kernel's own, which a peer FUSE mount has too.
#[test]
fn the_mounts_readahead_is_set_as_asked() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    if !common::is_root() {
        println!("SKIP: setting a mount's readahead needs root");
        assert!(std::env::var("CI").is_err(), "CI runs as root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, image) = small_tree(dir.path());
    let ra = |mp: &Path| -> u64 {
        let dev = fs::metadata(mp).unwrap().dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        fs::read_to_string(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let fuse = FuseMount::new(&image, &[]);
    assert_eq!(ra(&fuse.path), 1024, "the default");
    drop(fuse);
    let fuse = FuseMount::new(&image, &["--read-ahead", "256K"]);
    assert_eq!(ra(&fuse.path), 256);
    drop(fuse);
    // The kernel's own, as a FUSE mount that sets nothing has it (fusermount3 with a dummy
    // daemon is not needed: `--read-ahead 0` is that mount).
    let fuse = FuseMount::new(&image, &["--read-ahead", "0"]);
    let kernel_default = ra(&fuse.path);
    drop(fuse);
    assert_ne!(
        kernel_default, 1024,
        "the kernel's default differs from ours here"
    );
    assert!(kernel_default > 0);
}

/// Listing a directory on a fresh mount reads its entries' inodes (with their inline tails) in a
/// few verified requests, not one request per metadata block.
#[test]
fn listing_reads_the_entries_inodes_together() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("many")).unwrap();
    // 400 files of 1,000 bytes: each inode holds its data inline, about 4 inodes per block.
    for i in 0..400u32 {
        let data = common::fixture::Rng::new(7000 + i as u64).bytes(1000);
        fs::write(src.join(format!("many/f{i:03}")), &data).unwrap();
    }
    let image = dir.path().join("img.erofs");
    build_ok(&src, &image, &[]);
    // No background read of every inode (--xattrs=auto) to fill the caches first.
    let fuse = FuseMount::new(&image, &["--xattrs=on"]);
    let s0 = stats(&fuse.path);
    let mut listed = 0;
    for e in fs::read_dir(fuse.path.join("many")).unwrap() {
        let e = e.unwrap();
        assert_eq!(fs::symlink_metadata(e.path()).unwrap().len(), 1000);
        listed += 1;
    }
    assert_eq!(listed, 400);
    let s1 = stats(&fuse.path);
    let d = |k1: &str, k2: &str| s1[k1][k2].as_u64().unwrap() - s0[k1][k2].as_u64().unwrap();
    println!(
        "blocks read {}, verified in {} batches",
        d("reader", "blocks_read"),
        d("verify", "batches")
    );
    assert!(d("fuse", "readdirs") >= 1, "listed through the daemon");
    assert!(
        d("reader", "blocks_read") >= 90,
        "the 400 inodes span about 100 blocks: {s1}"
    );
    assert!(
        d("verify", "batches") * 8 <= d("reader", "blocks_read"),
        "inode blocks read together: {} batches for {} blocks",
        d("verify", "batches"),
        d("reader", "blocks_read")
    );
    // And what was read is right: every file's content through the mount.
    for i in (0..400u32).step_by(37) {
        let name = format!("many/f{i:03}");
        assert_eq!(
            fs::read(fuse.path.join(&name)).unwrap(),
            fs::read(src.join(&name)).unwrap()
        );
    }
}

/// `args` as a command run as nobody (uid/gid 65534, no groups).
fn nobody_cmd(args: &[&str]) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args);
    cmd
}

/// Runs `cmd` as nobody (uid/gid 65534, no groups); true if it succeeded.
fn as_nobody(args: &[&str]) -> bool {
    as_nobody_said(args).0
}

/// As [`as_nobody`], with what the command printed on stderr (to say why a check failed).
fn as_nobody_said(args: &[&str]) -> (bool, String) {
    let o = nobody_cmd(args)
        .stdout(Stdio::null())
        .output()
        .expect("setpriv");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).trim().to_string(),
    )
}

#[test]
fn permissions_like_the_kernel_and_allow_other() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    // Everything here must be reachable by nobody: a 0755 directory.
    let dir = tempfile::Builder::new()
        .prefix("sealfs-perm-")
        .tempdir()
        .unwrap();
    fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("private")).unwrap();
    fs::write(src.join("public"), b"public\n").unwrap();
    fs::write(src.join("secret"), b"secret\n").unwrap();
    fs::write(src.join("private/inside"), b"inside\n").unwrap();
    let mode = |p: &str, m: u32| {
        fs::set_permissions(src.join(p), std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };
    mode("public", 0o644);
    mode("secret", 0o600);
    mode("private", 0o700);
    mode(".", 0o755);
    let image = dir.path().join("img.erofs");
    build_ok(&src, &image, &[]);
    let kernel = mount_erofs(&image).unwrap();
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).unwrap();
    fs::set_permissions(&mp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = |base: &Path, rel: &str| base.join(rel).to_str().unwrap().to_string();
    // Whether each access succeeded; a message naming what each printed when they differ from
    // `want` (a failure seen once: `stat public` refused just after `cat public` worked).
    let checks_said = |base: &Path| {
        [
            as_nobody_said(&["cat", &path(base, "public")]),
            as_nobody_said(&["cat", &path(base, "secret")]),
            as_nobody_said(&["ls", &path(base, "private")]),
            as_nobody_said(&["cat", &path(base, "private/inside")]),
            as_nobody_said(&["stat", &path(base, "public")]),
        ]
    };
    let checks = |base: &Path| checks_said(base).map(|(ok, _)| ok);
    let want = checks(kernel.path());
    assert_eq!(
        want,
        [true, false, false, false, true],
        "kernel mount as nobody"
    );

    // Without allow_other, FUSE keeps other users out entirely.
    let out = run(Command::new(sealfs_bin()).arg("mount").arg(&image).arg(&mp));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        checks(&mp),
        [false; 5],
        "FUSE mount without allow_other, as nobody"
    );
    assert!(run(Command::new(sealfs_bin()).arg("umount").arg(&mp))
        .status
        .success());

    // With allow_other, the kernel checks modes as on the kernel mount (default_permissions).
    let out = run(Command::new(sealfs_bin())
        .args(["mount", "-o", "allow_other"])
        .arg(&image)
        .arg(&mp));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = checks_said(&mp);
    assert_eq!(
        got.clone().map(|(ok, _)| ok),
        want,
        "FUSE mount with allow_other, as nobody: {got:?}"
    );
    // Writes are refused as on a read-only kernel mount.
    let e = fs::OpenOptions::new()
        .write(true)
        .open(mp.join("public"))
        .expect_err("opened for writing");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let e = fs::write(mp.join("new"), b"x").expect_err("created a file");
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    assert!(run(Command::new(sealfs_bin()).arg("umount").arg(&mp))
        .status
        .success());
}

/// `sealfs umount M` then at once `sealfs mount IMG M`: the old daemon, ending after the new mount
/// is up, must not take the new mount down (fuser 0.18 unmounted its mount point again by path on
/// teardown, whatever was mounted there by then: vendor/fuser/SEALFS.md). Repeated, since the
/// race is lost only some of the time; each round waits for the old daemon to exit before
/// looking.
#[test]
fn unmount_then_mount_again_at_once_keeps_the_new_mount() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("file"), b"content\n").unwrap();
    let image = dir.path().join("img.erofs");
    build_ok(&src, &image, &[]);
    let mp = dir.path().join("mnt");
    fs::create_dir(&mp).unwrap();
    let mount = || {
        let out = run(Command::new(sealfs_bin()).arg("mount").arg(&image).arg(&mp));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let umount = || {
        let out = run(Command::new(sealfs_bin()).arg("umount").arg(&mp));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    mount();
    for round in 0..40 {
        let old = processes_naming(&mp);
        assert_eq!(
            old.len(),
            1,
            "round {round}: one daemon serves the mount: {old:?}"
        );
        umount();
        mount();
        let left = still_running_after(&old, Duration::from_secs(20));
        assert!(
            left.is_empty(),
            "round {round}: the old daemon {left:?} runs on"
        );
        let content = fs::read(mp.join("file"));
        assert!(
            matches!(&content, Ok(c) if c == b"content\n"),
            "round {round}: the new mount is gone once the old daemon ended: {content:?}"
        );
    }
    umount();
}

/// Changes the digest `image`'s per-file digest table records for `nid`, then seals the changed
/// EROFS bytes again (`sealfs seal`): a self-consistent image whose blocks all match its tree, so
/// only a per-file check can notice.
fn corrupt_recorded_digest(image: &Path, nid: u64) {
    let bytes = fs::read(image).unwrap();
    let blocks = u32::from_le_bytes(bytes[1024 + 36..1024 + 40].try_into().unwrap()) as usize;
    let mut erofs = bytes[..blocks * 4096].to_vec();
    assert_eq!(
        &erofs[..8],
        b"\x89SEALFT\n",
        "the image has a per-file digest table"
    );
    let le = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let (table, len) = (le(&erofs, 24) as usize, le(&erofs, 32) as usize);
    let digest_size = erofs[18] as usize;
    // Entries: a LEB128 nid difference, then the digest.
    let (mut at, mut prev) = (table, 0u64);
    let entry = loop {
        assert!(at < table + len, "no entry for nid {nid}");
        let (mut delta, mut shift) = (0u64, 0);
        loop {
            let b = erofs[at];
            at += 1;
            delta |= ((b & 0x7f) as u64) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        prev += delta;
        if prev == nid {
            break at;
        }
        at += digest_size;
    };
    erofs[entry] ^= 1;
    fs::write(image, &erofs).unwrap();
    let out = run(Command::new(sealfs_bin()).arg("seal").arg(image));
    assert!(out.status.success(), "seal: {out:?}");
}

#[test]
fn double_verification_checks_each_file_against_its_digest() {
    if !oracle_guard(fuse_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (src, image) = small_tree(dir.path());
    // An intact image: everything reads as the source, each file checked once however often read.
    {
        let fuse = FuseMount::new(&image, &["--verify=double"]);
        assert_files_read(&fuse.path, &src, |_| true);
        assert_files_read(&fuse.path, &src, |i| i < 2);
        assert_eq!(
            fs::read(fuse.path.join("sub/small")).unwrap(),
            b"small file\n"
        );
        let s = stats(&fuse.path);
        assert_eq!(s["fuse"]["files_checked"], 9, "{s}");
        assert_eq!(s["fuse"]["file_check_failures"], 0, "{s}");
        assert!(s["trust"].as_str().unwrap().contains("(double)"), "{s}");
    }
    // The image records another digest for f3, sealed again (its blocks match the new tree, so
    // the tree alone accepts them): under double verification f3 gives EIO, logged once; the rest
    // reads.
    let nid = {
        let fuse = FuseMount::new(&image, &[]);
        fs::symlink_metadata(fuse.path.join("f3")).unwrap().ino()
    };
    corrupt_recorded_digest(&image, nid);
    let log = dir.path().join("double.log");
    {
        let fuse = FuseMount::new(&image, &["--verify=double", "--log", log.to_str().unwrap()]);
        for _ in 0..2 {
            let e = fs::read(fuse.path.join("f3")).expect_err("f3 read despite its digest");
            assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
        }
        assert_files_read(&fuse.path, &src, |i| i != 3);
        let s = stats(&fuse.path);
        assert_eq!(s["fuse"]["file_check_failures"], 1, "{s}");
        let text = logged(&log, 1);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "logged once: {lines:?}");
        assert!(
            lines[0].contains("/f3") && lines[0].contains("double"),
            "{lines:?}"
        );
    }
    // Default verification checks blocks against the image tree only: f3 reads.
    {
        let fuse = FuseMount::new(&image, &[]);
        assert_files_read(&fuse.path, &src, |_| true);
    }
    // A seal of an earlier release, with the per-file digests in its trailer: double verification
    // still checks against them, and says they are unauthenticated; a forged entry (its CRCs
    // refixed) fails that file only.
    let old = dir.path().join("old.img");
    let mut bytes =
        fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/seal-v1/attached.img"))
            .unwrap();
    let le64 = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    let footer = bytes.len() - 64;
    let header = le64(&bytes, footer + 16);
    let (files, files_len) = (le64(&bytes, header + 48), le64(&bytes, header + 56));
    let hello = {
        fs::write(&old, &bytes).unwrap();
        let fuse = FuseMount::new(&old, &[]);
        fs::symlink_metadata(fuse.path.join("hello.txt"))
            .unwrap()
            .ino() as usize
    };
    // Entries of 8 + 32 bytes after the 16-byte header: the nid, then the digest.
    let entry = (0..(files_len - 16) / 40)
        .map(|i| files + 16 + i * 40)
        .find(|&at| le64(&bytes, at) == hello)
        .expect("hello.txt's entry");
    bytes[entry + 8] ^= 1;
    let crc = crc32c::crc32c(&bytes[files..files + files_len]);
    bytes[header + 20..header + 24].copy_from_slice(&crc.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[header..header + 512]);
    bytes[footer + 32..footer + 36].copy_from_slice(&crc.to_le_bytes());
    bytes[footer + 48..footer + 52].fill(0);
    let crc = crc32c::crc32c(&bytes[footer..]);
    bytes[footer + 48..footer + 52].copy_from_slice(&crc.to_le_bytes());
    fs::write(&old, &bytes).unwrap();
    {
        let fuse = FuseMount::new(&old, &["--verify=double"]);
        let e = fs::read(fuse.path.join("hello.txt")).expect_err("hello.txt read");
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
        assert_eq!(fs::read(fuse.path.join("a.bin")).unwrap(), vec![b'a'; 8192]);
        let s = stats(&fuse.path);
        assert!(
            s["trust"].as_str().unwrap().contains("UNAUTHENTICATED"),
            "{s}"
        );
    }

    // Other commands refuse the mode rather than ignore it.
    let out = run(Command::new(sealfs_bin())
        .args(["cat", "--verify=double"])
        .arg(&image)
        .arg("f0"));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("sealfs mount"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Restores the mode of `/dev/fuse` when dropped (also when the test panics).
struct DevFuseMode(u32);

impl Drop for DevFuseMode {
    fn drop(&mut self) {
        let _ = fs::set_permissions(
            "/dev/fuse",
            std::os::unix::fs::PermissionsExt::from_mode(self.0),
        );
    }
}

/// No root needed: where `/dev/fuse` is open to every user (mode 0666, what distributions ship; this
/// test sets it for its duration and restores it), an unprivileged user mounts an image (the mount
/// itself done by the setuid `fusermount3`), reads it verified, and unmounts it with `sealfs umount`.
#[test]
fn unprivileged_user_mounts_reads_and_unmounts() {
    if !oracle_guard(fuse_env().and_then(|()| {
        if have_tool("fusermount3") {
            Ok(())
        } else {
            Err("fusermount3 not found (fuse3)".into())
        }
    })) {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("sealfs-user-")
        .tempdir()
        .unwrap();
    let (src, image) = small_tree(dir.path());
    let mnt = dir.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    // nobody owns the mount point and reaches the image.
    for p in [dir.path(), &mnt, &image] {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    let mode = fs::metadata("/dev/fuse").unwrap().mode() & 0o7777;
    let _restore = DevFuseMode(mode);
    fs::set_permissions(
        "/dev/fuse",
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    let (image_s, mnt_s) = (image.to_str().unwrap(), mnt.to_str().unwrap());
    assert!(
        as_nobody(&[sealfs_bin(), "mount", image_s, mnt_s]),
        "sealfs mount as nobody failed"
    );
    let mounted = is_mounted(&mnt);
    let read = (0..8).all(|i| {
        let name = format!("f{i}");
        let file = mnt.join(&name);
        let out = nobody_cmd(&["cat", file.to_str().unwrap()])
            .output()
            .expect("setpriv");
        out.status.success() && out.stdout == fs::read(src.join(&name)).unwrap()
    });
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let owner_ok = info
        .lines()
        .any(|l| l.contains(mnt_s) && l.contains("fuse.sealfs") && l.contains("user_id=65534"));
    let unmounted = as_nobody(&[sealfs_bin(), "umount", mnt_s]);
    if is_mounted(&mnt) {
        let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    }
    assert!(mounted, "not mounted after sealfs mount as nobody");
    assert!(read, "files read through the unprivileged mount differ");
    assert!(owner_ok, "the mount is not nobody's:\n{info}");
    assert!(unmounted, "sealfs umount as nobody failed");
    assert!(!is_mounted(&mnt), "still mounted after sealfs umount");
}
