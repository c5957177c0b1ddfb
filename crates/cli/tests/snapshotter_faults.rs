//! `sealfs snapshotter` under bad input and faults, against the live processes (Debian's
//! containerd 1.6, runc, `ctr`), each test with its own containerd (see `common::containerd`):
//!
//! - hostile layer tars (`..`, absolute names, a write through a symlink to `/etc`, a hard
//!   link to `/etc/shadow`, device nodes and a FIFO) imported with `ctr image import`: what
//!   containerd's tar applier does with each itself (it resolves every name inside the
//!   snapshot), what reaches the snapshotter, and that nothing outside is created or changed;
//! - a disk that fills during a commit (the snapshotter's `--root` on a small tmpfs): the
//!   snapshot stays active, no partial image is left, the space is freed, and a commit after
//!   space is freed goes through;
//! - `SIGKILL` of the snapshotter, and of containerd, in the middle of a commit of a large
//!   layer: no half layer is ever recorded or mounted, what the kill left (temporary image
//!   files, dead FUSE mounts) is gone after the next start, and committing again works;
//! - a committed layer image damaged on disk: the failed read is reported in the
//!   snapshotter's log, naming the layer, and counted by the layer's mount.
//!
//! Needs root, containerd, runc, umoci, busybox-static, /dev/fuse, overlayfs and python3 (it
//! writes the hostile tars): prints `SKIP:` otherwise (a failure under CI=true).

mod common;

use common::containerd::*;
use common::*;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What would show a host file read, replaced, written or linked: its bytes, inode, link count,
/// mode and times.
fn fingerprint(path: &str) -> (Vec<u8>, u64, u64, u32, i64, i64) {
    let md = fs::symlink_metadata(path).unwrap();
    (
        fs::read(path).unwrap(),
        md.ino(),
        md.nlink(),
        md.mode(),
        md.mtime(),
        md.ctime(),
    )
}

/// `df -B1 --output=used PATH`: bytes used on the file system holding `path`.
fn df_used(path: &Path) -> u64 {
    let out = sh(&format!(
        "df -B1 --output=used '{}' | tail -n 1",
        path.display()
    ));
    out.trim().parse().unwrap()
}

/// `df -B1 --output=avail PATH`: bytes free on the file system holding `path`.
fn df_avail(path: &Path) -> u64 {
    let out = sh(&format!(
        "df -B1 --output=avail '{}' | tail -n 1",
        path.display()
    ));
    out.trim().parse().unwrap()
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| show(e.unwrap().file_name().as_encoded_bytes()))
        .collect();
    v.sort();
    v
}

/// Waits up to `secs` for `cond`.
fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(secs), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The committed snapshot no other snapshot has as parent (an image's top layer).
fn top_layer(c: &Containerd) -> String {
    let rows = c.snapshot_rows();
    let tops: Vec<&String> = rows
        .iter()
        .filter(|(k, _, kind)| kind == "Committed" && !rows.iter().any(|(_, p, _)| p == k))
        .map(|(k, _, _)| k)
        .collect();
    assert_eq!(tops.len(), 1, "{rows:?}");
    tops[0].clone()
}

/// An OCI image in `dir` as a tar for `ctr image import`: a first layer made by umoci (an
/// `etc/` of the image's own), then `hostile` (a tar written by python3's `tarfile` from the
/// entries it is given, each `(name, type, arg)`) added verbatim by `umoci raw add-layer`.
fn hostile_image(dir: &Path, entries: &str) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let script = dir.join("hostile.py");
    fs::write(
        &script,
        format!(
            "import io, sys, tarfile\n\
             t = tarfile.open(sys.argv[1], 'w', format=tarfile.PAX_FORMAT)\n\
             for name, kind, arg in [{entries}]:\n\
             \x20   i = tarfile.TarInfo(name)\n\
             \x20   i.mtime = 1700000000\n\
             \x20   i.mode = 0o644\n\
             \x20   if kind == 'file':\n\
             \x20       i.size = len(arg); t.addfile(i, io.BytesIO(arg)); continue\n\
             \x20   if kind == 'symlink': i.type = tarfile.SYMTYPE; i.linkname = arg\n\
             \x20   if kind == 'hardlink': i.type = tarfile.LNKTYPE; i.linkname = arg\n\
             \x20   if kind == 'chr': i.type = tarfile.CHRTYPE; i.devmajor, i.devminor = arg\n\
             \x20   if kind == 'blk': i.type = tarfile.BLKTYPE; i.devmajor, i.devminor = arg\n\
             \x20   if kind == 'fifo': i.type = tarfile.FIFOTYPE\n\
             \x20   if kind == 'dir': i.type = tarfile.DIRTYPE; i.mode = 0o755\n\
             \x20   t.addfile(i)\n\
             t.close()\n"
        ),
    )
    .unwrap();
    let (l, b) = (dir.join("layout"), dir.join("bundle"));
    let (l, b) = (l.display(), b.display());
    sh(&format!(
        "set -e; umoci init --layout '{l}'; umoci new --image '{l}:t'; umoci unpack --image '{l}:t' '{b}' >/dev/null
         r='{b}/rootfs'; mkdir -p $r/etc; echo image-passwd > $r/etc/passwd; echo image-shadow > $r/etc/shadow
         umoci repack --image '{l}:t' '{b}'
         python3 '{s}' '{d}/hostile.tar'; tar -tvf '{d}/hostile.tar'
         umoci raw add-layer --image '{l}:t' '{d}/hostile.tar'
         tar -C '{l}' -cf '{d}/image.tar' .",
        s = script.display(),
        d = dir.display()
    ));
    dir.join("image.tar")
}

#[test]
fn hostile_layer_tars_write_nothing_outside_the_snapshot() {
    if !containerd_guard() || !oracle_guard(need_tool("python3")) {
        return;
    }
    let c = Containerd::start();
    let d = c.dir.path();
    // Names nothing else on this machine has, looked for everywhere afterwards.
    let tag = format!("sealfs-hostile-{}", std::process::id());
    let host = ["/etc/passwd", "/etc/shadow"].map(|p| (p, fingerprint(p)));
    // A block device node of the disk holding / (reading it would read the whole disk).
    let root_dev = fs::metadata("/").unwrap().dev();
    let (major, minor) = (libc::major(root_dev), libc::minor(root_dev));
    let image = hostile_image(
        &d.join("a"),
        &format!(
            "('../{tag}-dotdot', 'file', b'dotdot\\n'),
             ('../../../../../../../../../../{tag}-deep', 'file', b'deep\\n'),
             ('/{tag}-abs', 'file', b'abs\\n'),
             ('l', 'symlink', '/etc'),
             ('l/passwd', 'file', b'written through l\\n'),
             ('up', 'symlink', '../../../../../../../../..'),
             ('up/{tag}-via-up', 'file', b'via up\\n'),
             ('hl-up', 'hardlink', '../../../../../../etc/passwd'),
             ('dev-null', 'chr', (1, 3)),
             ('disk', 'blk', ({major}, {minor})),
             ('fifo', 'fifo', None),"
        ),
    );
    let t = Instant::now();
    let import = |c: &Containerd, image: &Path, name: &str| {
        run(c.ctr().args([
            "image",
            "import",
            "--base-name",
            name,
            "--snapshotter",
            "sealfs",
            image.to_str().unwrap(),
        ]))
    };
    let out = import(&c, &image, "sealfs.test/hostile");
    assert!(
        out.status.success(),
        "containerd applies this layer (each name resolved inside the snapshot): {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        c.log()
    );
    // The FIFO was never opened, the disk never read: the commit took no time to speak of.
    println!("imported in {:.2?}", t.elapsed());

    // What reached the snapshotter and its sealed layer: every name inside the snapshot.
    // The layers are mounted for an active snapshot over the image (ctr makes it a root of
    // containerd's garbage collection, which a view is not); the hostile one read where the
    // snapshotter mounts it.
    let top = top_layer(&c);
    c.snap(&["prepare", "p", &top]);
    let m = fs::read_dir(c.root().join("mnt"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join(format!("{tag}-abs")).exists())
        .expect("the hostile layer is mounted");
    let read = |p: &str| fs::read_to_string(m.join(p)).unwrap_or_else(|e| format!("<{e}>"));
    assert_eq!(read(&format!("{tag}-dotdot")), "dotdot\n");
    assert_eq!(read(&format!("{tag}-deep")), "deep\n");
    assert_eq!(read(&format!("{tag}-abs")), "abs\n");
    assert_eq!(read(&format!("{tag}-via-up")), "via up\n");
    // The symlinks are kept as they are; the write through `l` went to the image's own /etc.
    assert_eq!(
        fs::read_link(m.join("l")).unwrap(),
        Path::new("/etc"),
        "l is a symlink"
    );
    assert_eq!(
        fs::read_link(m.join("up")).unwrap(),
        Path::new("../../../../../../../../..")
    );
    assert_eq!(read("etc/passwd"), "written through l\n");
    // The hard link is to the layer's own file.
    assert_eq!(read("hl-up"), "written through l\n");
    let (hl, passwd) = (
        fs::metadata(m.join("hl-up")).unwrap(),
        fs::metadata(m.join("etc/passwd")).unwrap(),
    );
    assert_eq!(
        (hl.ino(), hl.nlink()),
        (passwd.ino(), 2),
        "one inode, two names"
    );
    // The layer holds what its tar wrote, nothing of the layer below (etc/shadow).
    assert!(!m.join("etc/shadow").exists());
    // Device nodes (containerd runs as root: it makes them) are kept as nodes.
    let dev = fs::symlink_metadata(m.join("dev-null")).unwrap();
    assert!(dev.file_type().is_char_device());
    assert_eq!(dev.rdev(), libc::makedev(1, 3));
    let disk = fs::symlink_metadata(m.join("disk")).unwrap();
    assert!(disk.file_type().is_block_device());
    assert_eq!(disk.rdev(), root_dev);
    assert!(fs::symlink_metadata(m.join("fifo"))
        .unwrap()
        .file_type()
        .is_fifo());
    // The layer images are small: no device was read into one.
    for e in fs::read_dir(c.root().join("layers")).unwrap() {
        let len = e.unwrap().metadata().unwrap().len();
        assert!(len < 1 << 20, "a layer image of {len} bytes");
    }

    // A hard link to /etc/shadow: containerd resolves its target inside the directory it
    // applies the layer to (the active snapshot's upper directory, which holds no etc/shadow:
    // the file is the layer below's) and refuses the layer itself, the error in ctr's output;
    // the snapshot it was applied to is never committed.
    let refused = hostile_image(&d.join("b"), "('hl-shadow', 'hardlink', '/etc/shadow'),");
    let before = c.snapshot_rows();
    let out = import(&c, &refused, "sealfs.test/refused");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("ctr image import of a hard link to /etc/shadow: {stderr}");
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("failed to extract layer")
            && stderr.contains("/etc/shadow")
            && stderr.contains("/hl-shadow: no such file or directory"),
        "{stderr}"
    );
    // The unpacking client's log line (ctr's own here: containerd 1.6 applies a layer for the
    // client that unpacks, as its CRI plugin does inside containerd, whose log has it then).
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("apply failure") && l.contains("/hl-shadow: no such file")),
        "{stderr}"
    );
    // Refused before commit: of this image only its first layer is committed (no new
    // committed snapshot has a parent).
    let rows = c.snapshot_rows();
    let new: Vec<_> = rows
        .iter()
        .filter(|r| r.2 == "Committed" && !before.contains(r))
        .collect();
    assert!(new.iter().all(|r| r.1.is_empty()), "{rows:?}");

    // Nothing outside: the host's files unchanged, no file of the tars anywhere but in the
    // snapshotter's layer images (looked for on every file system but the root's mounts).
    for (p, before) in &host {
        assert_eq!(&fingerprint(p), before, "{p} changed");
    }
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    let mut found = String::new();
    for line in mounts.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (at, fstype) = (f[1], f[2]);
        if !["ext4", "xfs", "btrfs", "tmpfs", "overlay", "ext2", "ext3"].contains(&fstype)
            || at.starts_with(&*d.to_string_lossy())
            || ["/proc", "/sys", "/dev/"].iter().any(|p| at.starts_with(p))
        {
            continue;
        }
        // The snapshotter's root excepted: its layer images hold them (and an active
        // snapshot containerd gave up on may still wait for its garbage collection).
        found += &sh(&format!(
            "find '{at}' -xdev -path '{}' -prune -o -name '*{tag}*' -print 2>/dev/null; true",
            c.root().display()
        ));
    }
    assert_eq!(
        found, "",
        "files of the hostile layers outside the snapshots"
    );
    // No commit failed in the snapshotter: what it was handed, it sealed.
    assert!(
        !c.log().contains("sealfs snapshotter: commit "),
        "{}",
        c.log()
    );
}

#[test]
fn disk_full_during_commit_leaves_the_snapshot_active_and_the_space_free() {
    if !containerd_guard() {
        return;
    }
    let mut c = Containerd::start();
    let d = c.dir.path().to_path_buf();
    // The snapshotter's root on a tmpfs of 192 MiB.
    let small = d.join("small");
    fs::create_dir_all(&small).unwrap();
    sh(&format!(
        "mount -t tmpfs -o size=192m sealfs-small '{}'",
        small.display()
    ));
    c.kill_snapshotter();
    let root = small.join("root");
    c.start_snapshotter_at(&root, &[]);

    // 64 MiB of random bytes in an active snapshot: lz4 keeps them as they are, so the sealed
    // image needs 64 MiB and its Merkle tree.
    c.snap(&["prepare", "a1"]);
    let m = d.join("m");
    c.mount("a1", &m);
    sh(&format!(
        "head -c 64M /dev/urandom > '{0}/big' && sha256sum < '{0}/big' > '{1}/big.sum' && umount '{0}'",
        m.display(),
        d.display()
    ));
    // All but 32 MiB taken by a file outside the snapshotter's root.
    let filler = small.join("filler");
    let free = df_avail(&small);
    sh(&format!(
        "head -c {} /dev/zero > '{}'",
        free - (32 << 20),
        filler.display()
    ));
    let used = df_used(&small);
    let out = run(c
        .ctr()
        .args(["snapshots", "--snapshotter", "sealfs", "commit", "l1", "a1"]));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("ctr snapshots commit on a full disk: {stderr}");
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("No space left on device") && stderr.contains("sealing snapshot"),
        "the error names ENOSPC and the layer: {stderr}"
    );
    assert!(
        c.log().contains("No space left on device"),
        "the snapshotter logs it: {}",
        c.log()
    );
    // Still active, nothing committed; no partial image; the space the image took is free.
    let rows = c.snapshot_rows();
    assert_eq!(
        rows,
        vec![("a1".into(), String::new(), "Active".into())],
        "{rows:?}"
    );
    assert_eq!(names(&root.join("layers")), Vec::<String>::new());
    let used_after = df_used(&small);
    println!("tmpfs used: {used} bytes before the commit, {used_after} after it failed");
    assert_eq!(used_after, used, "the failed commit's space is freed");

    // Space freed: the commit containerd is asked for again goes through, whole.
    fs::remove_file(&filler).unwrap();
    c.snap(&["commit", "l1", "a1"]);
    let rows = c.snapshot_rows();
    assert_eq!(
        rows,
        vec![("l1".into(), String::new(), "Committed".into())],
        "{rows:?}"
    );
    c.snap(&["prepare", "p", "l1"]);
    c.mount("p", &m);
    assert_eq!(
        sh(&format!("sha256sum < '{}/big'", m.display())),
        fs::read_to_string(d.join("big.sum")).unwrap()
    );
    sh(&format!("umount '{}'", m.display()));
}

/// Where the layer image being written now is: a `.sealfs-*.tmp` in `layers/`, or, made with
/// `O_TMPFILE`, the unnamed file the snapshotter `pid` has open there (`/proc/PID/fd`); found
/// once it holds at least `min` bytes.
fn image_being_written(root: &Path, pid: u32, min: u64) -> Option<PathBuf> {
    let layers = root.join("layers");
    let mut candidates: Vec<PathBuf> = fs::read_dir(&layers)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| show(p.file_name().unwrap().as_encoded_bytes()).starts_with(".sealfs-"))
        .collect();
    if let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) {
        for fd in fds.filter_map(|e| e.ok()) {
            if let Ok(target) = fs::read_link(fd.path()) {
                if target.starts_with(&layers)
                    && show(target.as_os_str().as_encoded_bytes()).ends_with(" (deleted)")
                {
                    candidates.push(fd.path());
                }
            }
        }
    }
    candidates
        .into_iter()
        .find(|p| fs::metadata(p).is_ok_and(|md| md.len() >= min))
}

/// The start of each kill test: a committed layer `l0` with an active snapshot `p0` on it (its
/// layer mounted by the snapshotter), and an active snapshot `a1` holding 320 MiB of random
/// bytes, whose commit takes seconds; the SHA-256 of that file.
fn large_commit_setup(c: &Containerd) -> String {
    let d = c.dir.path();
    let m = d.join("m");
    c.snap(&["prepare", "b"]);
    c.mount("b", &m);
    sh(&format!("echo base > '{0}/f' && umount '{0}'", m.display()));
    c.snap(&["commit", "l0", "b"]);
    // An active snapshot over it (not a view: ctr 1.6 makes no view a root of containerd's
    // garbage collection), which has the layer mounted.
    c.snap(&["prepare", "p0", "l0"]);
    assert_eq!(layer_mounts(&c.root()).len(), 1);
    c.snap(&["prepare", "a1"]);
    c.mount("a1", &m);
    sh(&format!(
        "head -c 320M /dev/urandom > '{0}/big' && sha256sum < '{0}/big' && umount '{0}'",
        m.display()
    ))
}

/// After a kill: `a1` is still active and `l1` absent; committing it again works, both layers
/// read back, and `layers/` holds their two images and nothing else.
fn commit_again_and_check(c: &Containerd, sum: &str) {
    let d = c.dir.path();
    let m = d.join("m");
    let rows = c.snapshot_rows();
    assert!(
        rows.contains(&("a1".into(), String::new(), "Active".into())),
        "{rows:?}"
    );
    assert!(!rows.iter().any(|(k, _, _)| k == "l1"), "{rows:?}");
    let t = Instant::now();
    c.snap(&["commit", "l1", "a1"]);
    println!("committed again in {:.2?}", t.elapsed());
    c.snap(&["prepare", "p1", "l1"]);
    c.mount("p1", &m);
    assert_eq!(sh(&format!("sha256sum < '{}/big'", m.display())), sum);
    sh(&format!("umount '{}'", m.display()));
    c.mount("p0", &m);
    assert_eq!(fs::read_to_string(m.join("f")).unwrap(), "base\n");
    sh(&format!("umount '{}'", m.display()));
    // Exactly the two layers' images, nothing else.
    let layers = names(&c.root().join("layers"));
    assert_eq!(layers.len(), 2, "{layers:?}");
    assert!(layers
        .iter()
        .all(|n| n.ends_with(".sealfs") && !n.starts_with('.')));
}

#[test]
fn sigkill_of_the_snapshotter_mid_commit_leaves_no_half_layer() {
    if !containerd_guard() {
        return;
    }
    let mut c = Containerd::start();
    let sum = large_commit_setup(&c);
    let root = c.root();
    let base = names(&root.join("layers"));
    let pid = c.snapshotter_pid();
    let commit = c
        .ctr()
        .args(["snapshots", "--snapshotter", "sealfs", "commit", "l1", "a1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut partial = None;
    wait_for("the layer's temporary image appears", 120, || {
        partial = image_being_written(&root, pid, 16 << 20);
        partial.is_some()
    });
    let partial = partial.unwrap();
    let size = fs::metadata(&partial).unwrap().len();
    c.kill_snapshotter();
    let out = commit.wait_with_output().unwrap();
    println!(
        "SIGKILL with {size} bytes of {} written; ctr: {}",
        partial.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "the commit did not finish");
    // What the kill left: a dead FUSE mount (and, made with a name, the temporary image).
    assert_eq!(
        layer_mounts(&root).len(),
        1,
        "the dead layer mount is still listed"
    );
    let leftovers = names(&root.join("layers"));
    println!("left in layers/: {leftovers:?}");

    c.start_snapshotter_at(&root, &[]);
    // Cleaned at start: no temporary image, no image of a1, no stale mount.
    assert_eq!(names(&root.join("layers")), base);
    assert_eq!(layer_mounts(&root), Vec::<String>::new());
    commit_again_and_check(&c, &sum);
}

#[test]
fn sigkill_of_the_snapshotter_mid_commit_leaves_no_named_temporary_image() {
    if !containerd_guard() {
        return;
    }
    // The builder's fallback where O_TMPFILE is not possible: a named `.sealfs-*.tmp`.
    let mut c = Containerd::start();
    c.kill_snapshotter();
    let root = c.root();
    c.start_snapshotter_at(&root, &[("SEALFS_NO_O_TMPFILE", "1")]);
    let sum = large_commit_setup(&c);
    let base = names(&root.join("layers"));
    let pid = c.snapshotter_pid();
    let mut commit = c
        .ctr()
        .args(["snapshots", "--snapshotter", "sealfs", "commit", "l1", "a1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut partial = None;
    wait_for("the layer's temporary image appears", 120, || {
        partial = image_being_written(&root, pid, 16 << 20);
        partial.is_some()
    });
    let partial = partial.unwrap();
    assert!(
        show(partial.file_name().unwrap().as_encoded_bytes()).starts_with(".sealfs-"),
        "{}",
        partial.display()
    );
    c.kill_snapshotter();
    assert!(!commit.wait().unwrap().success());
    assert!(partial.exists(), "SIGKILL leaves the named temporary image");
    c.start_snapshotter_at(&root, &[("SEALFS_NO_O_TMPFILE", "1")]);
    assert!(!partial.exists(), "removed at start");
    assert_eq!(names(&root.join("layers")), base);
    assert_eq!(layer_mounts(&root), Vec::<String>::new());
    commit_again_and_check(&c, &sum);
}

#[test]
fn sigkill_of_containerd_mid_commit_records_no_layer_containerd_does_not_know() {
    if !containerd_guard() {
        return;
    }
    let mut c = Containerd::start();
    let sum = large_commit_setup(&c);
    let root = c.root();
    let base = names(&root.join("layers"));
    let pid = c.snapshotter_pid();
    let mut commit = c
        .ctr()
        .args(["snapshots", "--snapshotter", "sealfs", "commit", "l1", "a1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the layer's temporary image appears", 120, || {
        image_being_written(&root, pid, 16 << 20).is_some()
    });
    c.containerd.kill().unwrap();
    c.containerd.wait().unwrap();
    assert!(!commit.wait().unwrap().success());
    // The snapshotter finishes building, then sees its caller gone.
    let recorded = |l: &str| l.contains("committed ") && l.contains("/a1 as ");
    wait_for("the snapshotter ends the commit", 120, || {
        let log = c.log();
        log.contains("abandoned") || log.lines().any(recorded)
    });
    c.containerd = Containerd::spawn_containerd(c.dir.path(), c.bin_dir.as_deref());
    c.wait_for_containerd();
    c.wait_for_snapshotter();
    // containerd and the snapshotter agree: a1 is active in both (`info` asks the snapshotter
    // too), and no layer containerd does not know of was recorded.
    let info = run(c
        .ctr()
        .args(["snapshots", "--snapshotter", "sealfs", "info", "a1"]));
    let info =
        String::from_utf8_lossy(&info.stdout).into_owned() + &String::from_utf8_lossy(&info.stderr);
    assert!(info.contains("\"Kind\": \"Active\""), "{info}");
    let log = c.log();
    assert!(!log.lines().any(recorded), "{log}");
    assert!(
        log.contains("commit: commit of snapshot default/") && log.contains("/a1 abandoned"),
        "{log}"
    );
    assert_eq!(names(&root.join("layers")), base);
    commit_again_and_check(&c, &sum);
}

#[test]
fn a_damaged_layer_is_reported_naming_the_layer() {
    if !containerd_guard() {
        return;
    }
    let c = Containerd::start();
    let image = make_image(c.dir.path());
    c.ok(&[
        "image",
        "import",
        "--base-name",
        "sealfs.test/img",
        "--snapshotter",
        "sealfs",
        image.to_str().unwrap(),
    ]);
    // One byte of /b/big's third block flipped in the layer image holding it.
    let big = fs::read(c.dir.path().join("bundle/rootfs/b/big")).unwrap();
    let window = &big[8192..12288];
    let mut damaged = Vec::new();
    for entry in fs::read_dir(c.root().join("layers")).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(window.len()).position(|w| w == window) {
            bytes[at + 100] ^= 0x20;
            fs::write(&path, &bytes).unwrap();
            damaged.push(path);
        }
    }
    assert_eq!(damaged.len(), 1);
    let id = show(damaged[0].file_stem().unwrap().as_encoded_bytes());
    let out = c.run_script(
        "sealfs",
        "sealfs.test/img:t",
        "damaged",
        "cat /b/big > /dev/null; echo big=$?; cat /a/a2",
    );
    assert!(out.contains("big=1\nkeep\n"), "{out}");
    // The log line names the layer: its id, its snapshot (containerd's name for it ends with
    // the chain ID `ctr snapshots ls` shows), its image and digest, and the file.
    let log = c.log();
    let line = log
        .lines()
        .find(|l| l.contains("read failed") && l.contains("/b/big"))
        .unwrap_or_else(|| panic!("no report of the failed read: {log}"));
    println!("{line}");
    assert!(
        line.starts_with(&format!("sealfs snapshotter: layer {id} (")),
        "{line}"
    );
    assert!(line.contains(&*damaged[0].to_string_lossy()), "{line}");
    assert!(line.contains(" sha256:"), "{line}");
    let rows = c.snapshot_rows();
    assert!(
        rows.iter()
            .any(|(k, _, kind)| kind == "Committed" && line.contains(&format!("/{k}) "))),
        "{line}\n{rows:?}"
    );
    // And counted by the layer's mount (`sealfs stats`).
    let mp = c.root().join("mnt").join(&id);
    let stats = run(Command::new(sealfs_bin())
        .args(["stats", "--json"])
        .arg(&mp));
    let stats = String::from_utf8_lossy(&stats.stdout);
    let json: serde_json::Value = serde_json::from_str(&stats).unwrap();
    println!("stats of layer {id}: {json}");
    assert!(
        json.pointer("/fuse/verification_errors")
            .and_then(|v| v.as_u64())
            .is_some_and(|n| n >= 1),
        "{stats}"
    );
}
