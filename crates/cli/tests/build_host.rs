//! `sealfs build` against the host it runs on: builds interrupted by real signals leave nothing
//! beside the output, and directory trees with paths longer than `PATH_MAX` build and read back
//! through the kernel equal to the source (issue 38, items 15 and 16).

mod common;

use common::*;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A source tree whose `-T 1 -z lzma,9` build takes many seconds: 24 files of 2 MiB of
/// compressible but not trivial text.
fn slow_tree(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let mut rng = Rng::new(38);
    let words: Vec<String> = (0..4096)
        .map(|i| format!("w{}{} ", i, rng.next_u64() % 1000))
        .collect();
    for f in 0..24 {
        let mut text = String::with_capacity(2 << 20);
        while text.len() < 2 << 20 {
            text.push_str(&words[(rng.next_u64() % words.len() as u64) as usize]);
        }
        fs::write(dir.join(format!("f{f:02}.txt")), text).unwrap();
    }
}

/// The names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The descriptors of process `pid` open on unnamed (`O_TMPFILE`) files in `dir`: the kernel
/// shows them as `DIR/#INODE (deleted)`.
fn unnamed_files_of(pid: u32, dir: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}/#", dir.display());
    let Ok(rd) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    rd.filter_map(|e| {
        let p = e.ok()?.path();
        let target = fs::read_link(&p).ok()?;
        let t = target.to_string_lossy();
        (t.starts_with(&prefix) && t.ends_with(" (deleted)")).then_some(p)
    })
    .collect()
}

/// Starts a slow build of `source` (the arguments naming it: a directory, or `--tar FILE`) into
/// `out_dir/out.img`, waits until its output file holds data (named or not, as `named` says),
/// sends `signal` with kill(1) while the build still runs, and returns once it has ended.
fn interrupt_build(source: &[&OsStr], out_dir: &Path, signal: &str, named: bool) {
    let out = out_dir.join("out.img");
    // Through env(1) with the three signals at their default action: a signal ignored when the
    // build starts stays ignored (as the build promises), and a test run under nohup or from a
    // background job inherits SIGHUP or SIGINT ignored.
    let mut cmd = Command::new("env");
    cmd.arg("--default-signal=HUP,INT,TERM")
        .arg(sealfs_bin())
        .args(["build", "-q", "-T", "1", "-z", "lzma,9"])
        .args(source)
        .arg(&out)
        .env_remove("SOURCE_DATE_EPOCH")
        .stdin(Stdio::null());
    if named {
        cmd.env("SEALFS_NO_O_TMPFILE", "1");
    }
    let mut child: Child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "SIG{signal}: the build ended before it was interrupted; make the tree larger"
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "SIG{signal}: no output file with data appeared in 120 s"
        );
        let visible: Vec<String> = names(out_dir);
        let with_data = if named {
            visible.iter().any(|n| {
                n.starts_with(".sealfs-")
                    && n.ends_with(".tmp")
                    && fs::metadata(out_dir.join(n)).is_ok_and(|m| m.len() > 0)
            })
        } else {
            assert!(
                visible.is_empty(),
                "SIG{signal}: the unfinished output has a name: {visible:?}"
            );
            unnamed_files_of(pid, out_dir)
                .iter()
                .any(|fd| fs::metadata(fd).is_ok_and(|m| m.len() > 0))
        };
        if with_data {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let kill = run(Command::new("kill")
        .args(["-s", signal])
        .arg(pid.to_string()));
    assert!(kill.status.success(), "kill -s {signal} {pid}");
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let signo = match signal {
        "INT" => 2,
        "HUP" => 1,
        "KILL" => 9,
        "TERM" => 15,
        _ => unreachable!(),
    };
    assert_eq!(
        status.signal(),
        Some(signo),
        "SIG{signal} mid-build: the build must end by the signal ({status:?}); stderr: {stderr}"
    );
}

/// Regression (issue 38, item 15): an interrupted build (SIGINT, SIGTERM, SIGHUP, SIGKILL) left
/// its full-size `.sealfs-XXXXXX.tmp` beside the output (1.3 GB for linux.tar). The output is
/// now an unnamed O_TMPFILE file until it is complete, so not even SIGKILL leaves anything; each
/// signal is sent to a real build (of a directory, and of a tar archive) that has written data,
/// and the directory must be empty after.
#[test]
fn interrupted_build_leaves_no_temporary_file() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    slow_tree(&src);
    let tar = work.path().join("src.tar");
    let made = run(Command::new("tar")
        .arg("-C")
        .arg(&src)
        .arg("-cf")
        .arg(&tar)
        .arg("."));
    assert!(made.status.success(), "tar -c: {made:?}");
    let sources: [(&str, Vec<&OsStr>); 2] = [
        ("dir", vec![src.as_os_str()]),
        ("tar", vec![OsStr::new("--tar"), tar.as_os_str()]),
    ];
    for (kind, source) in &sources {
        for signal in ["INT", "TERM", "HUP", "KILL"] {
            let out_dir = work.path().join(format!("out-{kind}-{signal}"));
            fs::create_dir(&out_dir).unwrap();
            interrupt_build(source, &out_dir, signal, false);
            assert_eq!(
                names(&out_dir),
                Vec::<String>::new(),
                "SIG{signal} mid-build ({kind} source) left files beside the output"
            );
        }
    }
}

/// Issue 38, item 15, the fallback where O_TMPFILE cannot be used (forced by the documented
/// internal switch `SEALFS_NO_O_TMPFILE=1`): the output is a named `.sealfs-XXXXXX.tmp` while
/// it is written (seen here before each signal), and SIGINT, SIGTERM and SIGHUP remove it before
/// the process ends by the signal.
#[test]
fn interrupted_build_leaves_no_temporary_file_without_o_tmpfile() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    slow_tree(&src);
    for signal in ["INT", "TERM", "HUP"] {
        let out_dir = work.path().join(format!("out-{signal}"));
        fs::create_dir(&out_dir).unwrap();
        interrupt_build(&[src.as_os_str()], &out_dir, signal, true);
        assert_eq!(
            names(&out_dir),
            Vec::<String>::new(),
            "SIG{signal} mid-build (named fallback) left files beside the output"
        );
    }
}

/// The O_TMPFILE output and the named fallback give the same bytes, and either replaces an
/// existing output whole (the rename at the end), leaving nothing else in the directory;
/// `sealfs seal` (which writes its sealed copy the same way) too.
#[test]
fn o_tmpfile_and_named_outputs_are_identical() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("a"), b"hello\n").unwrap();
    fs::write(src.join("b"), vec![7u8; 100_000]).unwrap();
    let out_dir = work.path().join("out");
    fs::create_dir(&out_dir).unwrap();
    let (unnamed, named) = (out_dir.join("unnamed.img"), out_dir.join("named.img"));
    fs::write(&named, b"an older output, replaced whole").unwrap();
    build_ok(&src, &unnamed, &["-q", "-z", "zstd"]);
    build_ok_cmd(build_cmd(&src, &named, &["-q", "-z", "zstd"]).env("SEALFS_NO_O_TMPFILE", "1"));
    assert_same_bytes(
        &fs::read(&unnamed).unwrap(),
        &fs::read(&named).unwrap(),
        "O_TMPFILE output vs named fallback",
    );
    assert_eq!(names(&out_dir), vec!["named.img", "unnamed.img"]);
    for (i, fallback) in ["0", "1"].iter().enumerate() {
        let plain = out_dir.join(format!("plain{i}.img"));
        build_ok(&src, &plain, &["-q", "--no-seal"]);
        let seal = run(Command::new(sealfs_bin())
            .args(["seal"])
            .arg(&plain)
            .env("SEALFS_NO_O_TMPFILE", fallback));
        assert!(
            seal.status.success(),
            "seal (SEALFS_NO_O_TMPFILE={fallback}): {}",
            String::from_utf8_lossy(&seal.stderr)
        );
    }
    assert_same_bytes(
        &fs::read(out_dir.join("plain0.img")).unwrap(),
        &fs::read(out_dir.join("plain1.img")).unwrap(),
        "sealed in place with O_TMPFILE vs named fallback",
    );
    assert_eq!(
        names(&out_dir),
        vec!["named.img", "plain0.img", "plain1.img", "unnamed.img"]
    );
}

/// `tar --sort=name` of a tree (GNU tar walks with descriptor-relative calls, so it reads paths
/// of any length): every name, type, mode, owner, mtime, size, link target, device number and
/// byte, in one stream to compare.
fn gnu_tar_of(dir: &Path) -> Vec<u8> {
    let out = run(Command::new("tar")
        .args(["--sort=name", "--format=gnu", "--numeric-owner", "-C"])
        .arg(dir)
        .args(["-cf", "-", "."]));
    assert!(
        out.status.success(),
        "tar -c {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Regression (issue 38, item 16): the directory builder stat'ed and opened entries by their
/// whole path, so a tree with paths longer than PATH_MAX (which `--tar`, `--squashfs` and
/// mksquashfs take) failed with "stat: File name too long". It now walks with descriptor-relative
/// calls: a tree 20 directories of 250-byte names deep (paths over 5000 bytes), holding a file,
/// a sparse file, a symlink, a FIFO, a device, a hard link pair and an xattr at the bottom, must
/// build, and the kernel's mount of the image must equal the source as GNU tar reads both.
#[test]
fn dir_source_with_paths_longer_than_path_max() {
    let needs = root_env()
        .and_then(|_| need_tool("tar"))
        .and_then(|_| need_tool("setfattr"))
        .and_then(|_| need_tool("getfattr"));
    if !oracle_guard(needs) {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    // Made with relative `cd`s: no call here is given the whole path either.
    let script = r#"
        set -e
        cd "$1"
        name=$(printf 'd%.0s' $(seq 250))
        for i in $(seq -w 1 20); do mkdir "$i$name"; cd "$i$name"; done
        printf 'deep\n' > file
        truncate -s 1M sparse && printf 'x' | dd of=sparse bs=1 seek=700000 conv=notrunc 2>/dev/null
        ln -s ../../target link
        mkfifo fifo
        mknod dev c 1 7
        ln file hardlink
        setfattr -n user.deep -v value file
        touch -d @1700000000 file
    "#;
    let made = run(Command::new("bash").args(["-c", script, "mk"]).arg(&src));
    assert!(
        made.status.success(),
        "making the deep tree: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let image = work.path().join("deep.img");
    build_ok(&src, &image, &["-q"]);
    let mnt = mount_erofs(&image).expect("mount");
    let (theirs, ours) = (gnu_tar_of(&src), gnu_tar_of(mnt.path()));
    assert!(
        theirs.len() > 20 * 512,
        "the source's tar holds the deep tree"
    );
    assert!(
        theirs == ours,
        "the kernel's view of the image differs from the source (tar streams of {} and {} bytes)",
        theirs.len(),
        ours.len()
    );
    // The xattr at the bottom, through the kernel (getfattr from inside the deepest directory).
    let got = run(Command::new("bash")
        .args([
            "-c",
            r#"cd "$1" && for i in $(seq 20); do cd ./*/; done && getfattr --only-values -n user.deep file"#,
            "get",
        ])
        .arg(mnt.path()));
    assert_eq!(
        String::from_utf8_lossy(&got.stdout),
        "value",
        "user.deep through the kernel: {}",
        String::from_utf8_lossy(&got.stderr)
    );
}
