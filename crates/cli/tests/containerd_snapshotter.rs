//! `sealfs snapshotter` against the real containerd (Debian's 1.6) and runc: each test starts
//! its own containerd (root, state, socket and config under a temporary directory) with the
//! snapshotter as a proxy plugin, and drives it with containerd's own client, `ctr`, the oracle
//! of the protocol: the snapshot lifecycle (`ctr snapshots prepare/mounts/commit/view/ls/info/
//! label/usage/rm`, the mounts done by the kernel's overlayfs), state that survives a SIGKILL of
//! the snapshotter and of containerd; and a three-layer OCI image made by umoci from busybox-static (a deleted
//! file, an opaque directory) imported and run with `ctr run --snapshotter sealfs`, whose view
//! of every file equals the same run under containerd's own `overlayfs` snapshotter; the same
//! image pushed by skopeo to Debian's docker-registry and pulled with `ctr image pull
//! --plain-http`; and a byte flipped in a committed layer image failing the container's read of
//! that file with EIO.
//!
//! Needs root, containerd, runc, umoci, busybox-static, /dev/fuse and overlayfs (and for the
//! pull, docker-registry and skopeo): prints `SKIP:` otherwise (a failure under CI=true).

mod common;

use common::containerd::*;
use common::*;
use std::fs;

#[test]
fn ctr_snapshots_lifecycle_through_containerd() {
    if !containerd_guard() {
        return;
    }
    let mut c = Containerd::start();
    let m = c.dir.path().join("m");

    // A first layer: a bind mount of an empty directory, written through it.
    c.snap(&["prepare", "a1"]);
    c.mount("a1", &m);
    sh(&format!(
        "cd '{0}' && echo hello > f1 && echo gone > del && mkdir -p d && echo old > d/old && cd / && umount '{0}'",
        m.display()
    ));
    c.snap(&["commit", "l1", "a1"]);

    // A second one over it: a deletion and an opaque directory, made by the kernel's overlayfs.
    c.snap(&["prepare", "a2", "l1"]);
    c.mount("a2", &m);
    assert_eq!(fs::read_to_string(m.join("d/old")).unwrap(), "old\n");
    sh(&format!(
        "cd '{0}' && rm del && rm -r d && mkdir d && echo new > d/new && echo two > f2 && cd / && umount '{0}'",
        m.display()
    ));
    c.snap(&["commit", "l2", "a2"]);

    // Labels are kept (Update).
    c.snap(&["label", "l2", "sealfs.test/colour=blue"]);
    let info = c.snap(&["info", "l2"]);
    assert!(info.contains("\"Kind\": \"Committed\""), "{info}");
    assert!(info.contains("\"Parent\": \"l1\""), "{info}");
    assert!(info.contains("\"sealfs.test/colour\": \"blue\""), "{info}");

    // Both layers are verified FUSE mounts readable by anyone (allow_other), each opened with
    // the digest recorded at commit.
    let mounts = layer_mounts(&c.root());
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    // Kept from containerd's garbage collection (after its restart below too).
    c.view_kept("v", "l2");
    let mounts = layer_mounts(&c.root());
    assert_eq!(mounts.len(), 2, "{mounts:?}");
    let log = fs::read_to_string(c.dir.path().join("snapshotter.log")).unwrap();
    assert_eq!(
        log.matches(": FUSE, every block verified against sha256:")
            .count(),
        2,
        "each layer's mode is logged: {log}"
    );
    for line in &mounts {
        assert!(line.starts_with("sealfs:sha256:"), "{line}");
        assert!(
            line.contains(" ro,") && line.contains("allow_other"),
            "{line}"
        );
    }

    let check_view = |c: &Containerd| {
        c.mount("v", &m);
        let listing = sh(&format!("cd '{}' && find . | sort", m.display()));
        assert_eq!(listing, ".\n./d\n./d/new\n./f1\n./f2\n");
        assert_eq!(fs::read_to_string(m.join("f1")).unwrap(), "hello\n");
        assert_eq!(fs::read_to_string(m.join("d/new")).unwrap(), "new\n");
        sh(&format!("umount '{}'", m.display()));
    };
    check_view(&c);

    let ls = c.snap(&["ls"]);
    let rows: Vec<Vec<&str>> = ls
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert!(rows.contains(&vec!["l1", "Committed"]), "{ls}");
    assert!(rows.contains(&vec!["l2", "l1", "Committed"]), "{ls}");
    assert!(rows.contains(&vec!["v", "l2", "View"]), "{ls}");
    let usage = c.snap(&["usage"]);
    for key in ["l1", "l2", "v"] {
        assert!(
            usage
                .lines()
                .any(|l| l.split_whitespace().next() == Some(key)),
            "{usage}"
        );
    }

    // A layer with children stays.
    let out = run(c
        .ctr()
        .args(["snapshots", "--snapshotter", "sealfs", "rm", "l1"]));
    assert!(!out.status.success());

    // The state survives a SIGKILL of the snapshotter: its dead layer mounts are replaced.
    let mut killed = c.snapshotter.take().unwrap();
    killed.kill().unwrap();
    killed.wait().unwrap();
    c.start_snapshotter();
    // containerd redials the proxy plugin after its gRPC backoff (a second or more).
    c.wait_for_snapshotter();
    let ls_after = c.snap(&["ls"]);
    assert_eq!(ls_after, ls);
    check_view(&c);
    // And a SIGKILL of containerd.
    c.restart_containerd();
    assert_eq!(c.snap(&["ls"]), ls);
    check_view(&c);
    assert!(c
        .snap(&["info", "l2"])
        .contains("\"sealfs.test/colour\": \"blue\""));

    // Removing frees everything (containerd removes in its garbage collection).
    for key in ["v", "l2", "l1"] {
        c.snap(&["rm", key]);
    }
    let root = c.root();
    let left = || {
        ["snapshots", "layers", "mnt"]
            .iter()
            .flat_map(|d| fs::read_dir(root.join(d)).unwrap())
            .map(|e| e.unwrap().path().display().to_string())
            .collect::<Vec<_>>()
    };
    let t = std::time::Instant::now();
    while !left().is_empty() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "layers and directories not freed: {:?}\nsnapshots: {}\ncontainerd log (end):\n{}\nsnapshotter log (end):\n{}",
            left(),
            c.snap(&["ls"]),
            log_tail(&c.dir.path().join("containerd.log")),
            log_tail(&c.dir.path().join("snapshotter.log")),
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(layer_mounts(&root).is_empty());
}

#[test]
fn image_runs_under_sealfs_as_under_overlayfs() {
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
    // One committed layer per image layer, each a sealed image.
    let ls = c.snap(&["ls"]);
    assert_eq!(
        ls.lines().filter(|l| l.contains("Committed")).count(),
        3,
        "{ls}"
    );
    // Unpacked again for containerd's own overlayfs snapshotter.
    c.ok(&[
        "image",
        "import",
        "--base-name",
        "sealfs.test/img",
        "--snapshotter",
        "overlayfs",
        image.to_str().unwrap(),
    ]);
    let survey = |snapshotter: &str| {
        c.run_script(
            snapshotter,
            "sealfs.test/img:t",
            &format!("survey-{snapshotter}"),
            SURVEY,
        )
    };
    let ours = survey("sealfs");
    let theirs = survey("overlayfs");
    assert_eq!(ours, theirs, "sealfs and overlayfs snapshotters differ");
    // The layers' changes are there: the deletion, the change, the opaque directory, owners.
    assert!(ours.contains("\no2\ntwo\no2\n"), "{ours}");
    assert!(ours.contains("can't open '/del': No such file"), "{ours}");
    assert!(ours.contains("/a/a2 81a0 1234 5678 5\n"), "{ours}");
    assert!(ours.contains("/b/big 81a4 0 0 300000\n"), "{ours}");
    assert!(!ours.contains("/o/o1"), "{ours}");
    println!(
        "{} lines of survey, the same under both",
        ours.lines().count()
    );

    // Removing the image frees its layers: containerd's garbage collection removes them (run
    // before `rm` returns, with --sync).
    c.ok(&["image", "rm", "--sync", "sealfs.test/img:t"]);
    let root = c.root();
    eventually("the image's layers freed", || {
        ["snapshots", "layers", "mnt"]
            .iter()
            .all(|d| fs::read_dir(root.join(d)).unwrap().next().is_none())
    });
    assert!(layer_mounts(&root).is_empty());
    assert_eq!(
        c.snap(&["ls"]).lines().count(),
        1,
        "only the header is left"
    );
}

#[test]
fn damaged_layer_image_fails_reads_with_eio() {
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
    // One byte of /b/big's third block flipped in the committed layer image that holds it
    // (found by its bytes: random, so lz4 stores them as they are), before anything read it.
    let big = fs::read(c.dir.path().join("bundle/rootfs/b/big")).unwrap();
    let window = &big[8192..12288];
    let mut flipped = 0;
    for entry in fs::read_dir(c.root().join("layers")).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(window.len()).position(|w| w == window) {
            bytes[at + 100] ^= 0x20;
            fs::write(&path, &bytes).unwrap();
            flipped += 1;
        }
    }
    assert_eq!(flipped, 1, "the block of /b/big is in one layer image");
    let out = c.run_script(
        "sealfs",
        "sealfs.test/img:t",
        "damaged",
        "cat /b/big > /dev/null; echo big=$?; cat /a/a2 /o/o2",
    );
    assert!(out.contains("big=1\nkeep\no2\n"), "{out}");
    assert!(out.contains("Input/output error"), "{out}");
    let log = fs::read_to_string(c.dir.path().join("snapshotter.log")).unwrap();
    assert!(log.contains("/b/big"), "the failed read is logged: {log}");
}

#[test]
fn image_pulled_from_a_registry_runs_under_sealfs_as_under_overlayfs() {
    if !containerd_guard()
        || !oracle_guard(
            servers::docker_registry_bin()
                .map(|_| ())
                .and(need_tool("skopeo")),
        )
    {
        return;
    }
    let c = Containerd::start();
    make_image(c.dir.path());
    let registry =
        servers::docker_registry(&c.dir.path().join("registry"), &Default::default()).unwrap();
    let reference = format!("127.0.0.1:{}/sealfs-test/img:t", registry.port);
    sh(&format!(
        "skopeo copy --quiet --dest-tls-verify=false 'oci:{}:t' 'docker://{reference}'",
        c.dir.path().join("layout").display()
    ));
    let survey = |snapshotter: &str| {
        c.ok(&[
            "image",
            "pull",
            "--plain-http",
            "--snapshotter",
            snapshotter,
            &reference,
        ]);
        c.run_script(
            snapshotter,
            &reference,
            &format!("pulled-{snapshotter}"),
            SURVEY,
        )
    };
    let ours = survey("sealfs");
    assert_eq!(
        ours,
        survey("overlayfs"),
        "sealfs and overlayfs snapshotters differ"
    );
    assert!(ours.contains("\no2\ntwo\no2\n"), "{ours}");
    let ls = c.snap(&["ls"]);
    assert_eq!(
        ls.lines().filter(|l| l.contains("Committed")).count(),
        3,
        "{ls}"
    );
}
