//! What `sealfs snapshotter` holds, against real programs: `sealfs snapshotter status` while
//! the snapshotter runs under a real containerd (snapshots made by `ctr`, the layer's mode and
//! digest as `/proc/mounts` shows them, a damaged layer found by the container's read), and
//! read from the store when none runs.
//!
//! Needs root, containerd, runc, umoci, busybox-static, /dev/fuse and overlayfs: prints `SKIP:`
//! otherwise (a failure under CI=true).

mod common;

use common::containerd::*;
use common::*;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `sealfs snapshotter status --root ROOT [--json]`: its exit code and stdout.
fn status(root: &Path, json: bool) -> (i32, String) {
    let mut cmd = Command::new(sealfs_bin());
    cmd.args(["snapshotter", "status", "--root"]).arg(root);
    if json {
        cmd.arg("--json");
    }
    let out = run(&mut cmd);
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "status: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

fn status_json(root: &Path) -> (i32, Value) {
    let (code, out) = status(root, true);
    (code, serde_json::from_str(&out).unwrap())
}

/// The snapshot containerd's clients call `name`, in a status.
fn snapshot<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no snapshot {name} in {status:#}"))
}

/// `du -s --block-size=1 PATH`: bytes of allocated blocks (GNU coreutils, the oracle).
fn du_blocks(path: &Path) -> u64 {
    let out = sh(&format!("du -s --block-size=1 '{}'", path.display()));
    out.split_whitespace().next().unwrap().parse().unwrap()
}

#[test]
fn status_reports_each_layer_its_mode_digest_and_damage() {
    if !containerd_guard() {
        return;
    }
    let mut c = Containerd::start();
    let m = c.dir.path().join("m");
    let root = c.root();

    // A layer with a file of random bytes (lz4 keeps them as they are: found by its bytes).
    c.snap(&["prepare", "a1"]);
    c.mount("a1", &m);
    sh(&format!(
        "cd '{0}' && echo hello > f1 && head -c 65536 /dev/urandom > big && cd / && umount '{0}'",
        m.display()
    ));
    let big = {
        let (_, s) = status_json(&root);
        let dir = PathBuf::from(snapshot(&s, "a1")["dir"].as_str().unwrap());
        fs::read(dir.join("big")).unwrap()
    };
    c.snap(&["commit", "l1", "a1"]);
    // A label with a newline and an escape sequence: text output escapes it, JSON keeps it.
    // (containerd hands its snapshotter only the labels under containerd.io/snapshot/.)
    c.snap(&["label", "l1", "containerd.io/snapshot/evil=a\nb\x1b[31m"]);
    c.snap(&["view", "v", "l1"]);
    c.snap(&["label", "v", "containerd.io/gc.root=test"]);

    // While the snapshotter runs, its store is locked (redb takes an exclusive flock and has no
    // read-only open): the status comes over its status socket.
    let locked = sealfs_snapshot::store::Store::open_existing(&root.join("metadata.redb"))
        .err()
        .map(|e| e.to_string());
    assert!(
        locked
            .as_deref()
            .is_some_and(|e| e.contains("already open")),
        "{locked:?}"
    );
    let (code, s) = status_json(&root);
    assert_eq!(code, 0, "{s:#}");
    assert_eq!(s["source"], "snapshotter");
    assert_eq!(s["snapshots"].as_array().unwrap().len(), 2, "{s:#}");
    let l1 = snapshot(&s, "l1");
    assert_eq!(l1["kind"], "committed");
    assert_eq!(l1["namespace"], "default");
    assert_eq!(l1["parent"], "");
    assert_eq!(l1["labels"]["containerd.io/snapshot/evil"], "a\nb\x1b[31m");
    let key = l1["key"].as_str().unwrap();
    assert!(key.starts_with("default/") && key.ends_with("/l1"), "{key}");
    let v = snapshot(&s, "v");
    assert_eq!(
        (v["kind"].as_str(), v["parent"].as_str()),
        (Some("view"), Some(key))
    );
    let layer = &l1["layer"];
    let image = PathBuf::from(layer["image"].as_str().unwrap());
    assert_eq!(layer["size_on_disk"].as_u64(), Some(du_blocks(&image)));
    assert_eq!(layer["size_at_commit"], layer["size_on_disk"]);
    assert_eq!(layer["damaged"], false);
    let digest = layer["digest"].as_str().unwrap();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    assert_eq!(layer["mount"]["mode"], "fuse-verified");
    // The mode and digest are what /proc/mounts and the log say.
    let mounts = layer_mounts(&root);
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    let fields: Vec<&str> = mounts[0].split(' ').collect();
    assert_eq!(fields[0], format!("sealfs:{digest}:fuse-verified"));
    assert_eq!(fields[1], layer["mount"]["mountpoint"].as_str().unwrap());
    let log = fs::read_to_string(c.dir.path().join("snapshotter.log")).unwrap();
    assert!(
        log.contains(&format!(
            "(mode fuse-verified): FUSE, every block verified against {digest}"
        )),
        "{log}"
    );
    let (_, text) = status(&root, false);
    assert!(
        text.contains("label containerd.io/snapshot/evil=a\\nb\\033[31m\n"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "{text}");
    assert!(text.contains("root ") && text.contains("(answered by the running snapshotter)"));
    assert!(text.contains(&format!("  digest {digest}\n")), "{text}");
    assert!(text.contains("  mounted fuse-verified on "), "{text}");
    println!("{text}");

    // A byte flipped in the layer image: the read through the view fails, the status says so.
    let window = &big[8192..12288];
    let mut bytes = fs::read(&image).unwrap();
    let at = bytes
        .windows(window.len())
        .position(|w| w == window)
        .expect("the random block is in the image as it is");
    bytes[at + 100] ^= 0x20;
    fs::write(&image, &bytes).unwrap();
    c.mount("v", &m);
    assert_eq!(fs::read_to_string(m.join("f1")).unwrap(), "hello\n");
    let err = fs::read(m.join("big")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    sh(&format!("umount '{}'", m.display()));
    let (code, s) = status_json(&root);
    let layer = &snapshot(&s, "l1")["layer"];
    assert_eq!(code, 1, "a damaged layer fails the status: {s:#}");
    assert_eq!(layer["damaged"], true, "{s:#}");
    assert!(
        layer["mount"]["verification_failures"].as_u64() >= Some(1),
        "{s:#}"
    );
    assert!(
        layer["mount"]["failed_requests"].as_u64() >= Some(1),
        "{s:#}"
    );
    let (_, text) = status(&root, false);
    assert!(text.contains("  DAMAGED: "), "{text}");
    println!("{text}");

    // With no snapshotter running, the status is read from the store; nothing is mounted.
    let mut stopped = c.snapshotter.take().unwrap();
    sh(&format!("kill {}", stopped.id()));
    stopped.wait().unwrap();
    let (code, s) = status_json(&root);
    assert_eq!((code, s["source"].as_str()), (0, Some("store")), "{s:#}");
    assert!(snapshot(&s, "l1")["layer"]["mount"].is_null(), "{s:#}");
    assert_eq!(snapshot(&s, "l1")["layer"]["digest"], digest);
    let (_, text) = status(&root, false);
    assert!(
        text.contains("no snapshotter runs") && text.contains("  not mounted\n"),
        "{text}"
    );
}
