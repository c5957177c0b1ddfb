//! `sealfs snapshotter` under bad input and faults, against the live processes (Debian's
//! containerd 1.6, runc, `ctr`), each test with its own containerd (see `common::containerd`):
//!
//! - `SIGKILL` of the snapshotter, and of containerd, in the middle of a commit of a large
//!   layer: no half layer is ever recorded or mounted, what the kill left (temporary image
//!   files, dead FUSE mounts) is gone after the next start, and committing again works.
//!
//! Needs root, containerd, runc, umoci, busybox-static, /dev/fuse and overlayfs: prints `SKIP:`
//! otherwise (a failure under CI=true).

mod common;

use common::containerd::*;
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

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
    c.containerd = Containerd::spawn_containerd(c.dir.path());
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
