//! `sealfs snapshotter` under containerd 2.x and under containerd's CRI plugin (what Kubernetes
//! drives): the containerd 2.x that `scripts/build-oracles.sh` builds from its Go module (config
//! `version = 3`, its own `ctr` and runc shim), and `crictl` (cri-tools, built the same way) as
//! the client of the CRI.
//!
//! - containerd 2.x and its `ctr`: the three-layer umoci image of `common/containerd.rs` imported
//!   and run with `--snapshotter sealfs`; its view of every file equals the same run under 2.x's
//!   own `overlayfs` snapshotter.
//! - The CRI path, on Debian's containerd 1.6 and on 2.x: the CRI plugin's snapshotter set to
//!   `sealfs`, its sandbox (pause) image a busybox `sleep` pushed to a local docker-registry;
//!   `crictl pull`, `runp` (a pod on the host's network: no CNI), `create`, `start` and `logs` of
//!   a container printing every file's mode, owner, size and hash; that output equals the same
//!   image's under `ctr run` on containerd's `overlayfs`, and the pod's and the container's root
//!   filesystems are overlayfs mounts over the snapshotter's sealed layer mounts.
//!
//! Needs what `containerd_snapshotter.rs` needs, and docker-registry, skopeo, and the Go-built
//! containerd 2.x and crictl in `target/oracles/`: prints `SKIP:` otherwise (a failure under
//! CI=true).

mod common;

use common::containerd::*;
use common::cri::*;
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[test]
fn containerd2_runs_an_image_under_sealfs_as_under_overlayfs() {
    if !containerd_guard() || !oracle_guard(containerd2_bin_dir().map(|_| ())) {
        return;
    }
    let c = Containerd::start_with(Setup {
        bin_dir: Some(containerd2_bin_dir().unwrap()),
        version: 3,
        differ: true,
        ..Setup::default()
    });
    let version = c.ok(&["version"]);
    assert!(
        version.contains(&format!("Version:  v{CONTAINERD2_VERSION}")),
        "{version}"
    );
    let image = make_image(c.dir.path());
    for snapshotter in ["sealfs", "overlayfs"] {
        c.ok(&[
            "image",
            "import",
            "--base-name",
            "sealfs.test/img",
            "--snapshotter",
            snapshotter,
            image.to_str().unwrap(),
        ]);
    }
    let ls = c.snap(&["ls"]);
    assert_eq!(
        ls.lines().filter(|l| l.contains("Committed")).count(),
        3,
        "one sealed layer per image layer: {ls}"
    );
    // Each built by the differ from its tar stream (containerd asked it first), none from a
    // directory of files.
    let log = c.log();
    assert_eq!(
        log.matches(" as a sealed layer: ").count(),
        3,
        "the differ applied every layer: {log}"
    );
    let survey = |snapshotter: &str| {
        c.run_script(
            snapshotter,
            "sealfs.test/img:t",
            &format!("survey-{snapshotter}"),
            SURVEY,
        )
    };
    let ours = survey("sealfs");
    assert_eq!(
        ours,
        survey("overlayfs"),
        "sealfs and containerd 2's overlayfs snapshotter differ"
    );
    assert!(ours.contains("\no2\ntwo\no2\n"), "{ours}");
    assert!(ours.contains("/a/a2 81a0 1234 5678 5\n"), "{ours}");
    println!(
        "containerd {CONTAINERD2_VERSION}: {} lines of survey, the same under both",
        ours.lines().count()
    );
}

/// An OCI image archive (as `ctr image import` takes it) in `dir/NAME.tar`, its layers gzip
/// tars written by Python's `tarfile`: each layer a list of entries, each `{"name", "kind"}`
/// (`file`, `dir`, or `link` to `target`) with optional `mode`, `uid`, `gid`, `mtime` and
/// `xattrs` (PAX `SCHILY.xattr.*` records).
fn oci_archive(dir: &Path, name: &str, layers: &serde_json::Value) -> PathBuf {
    let out = dir.join(name);
    let script = r#"
import gzip, hashlib, io, json, os, sys, tarfile
layers, out = json.loads(sys.argv[1]), sys.argv[2]
os.makedirs(out + "/blobs/sha256", exist_ok=True)
def blob(b):
    d = hashlib.sha256(b).hexdigest()
    open(out + "/blobs/sha256/" + d, "wb").write(b)
    return {"digest": "sha256:" + d, "size": len(b)}
descs, diff_ids = [], []
for entries in layers:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for e in entries:
            info = tarfile.TarInfo(e["name"])
            info.mode = e.get("mode", 0o644 if e["kind"] == "file" else 0o755)
            info.uid, info.gid, info.mtime = e.get("uid", 0), e.get("gid", 0), e.get("mtime", 0)
            info.pax_headers = {"SCHILY.xattr." + k: v for k, v in e.get("xattrs", {}).items()}
            if e["kind"] == "dir":
                info.type = tarfile.DIRTYPE
                t.addfile(info)
            elif e["kind"] == "link":
                info.type = tarfile.LNKTYPE
                info.linkname = e["target"]
                t.addfile(info)
            else:
                data = e.get("data", "data\n").encode()
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    diff_ids.append("sha256:" + hashlib.sha256(raw.getvalue()).hexdigest())
    descs.append(dict(blob(gzip.compress(raw.getvalue(), mtime=0)),
                      mediaType="application/vnd.oci.image.layer.v1.tar+gzip"))
config = json.dumps({"architecture": "amd64", "os": "linux", "config": {},
    "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": dict(blob(config), mediaType="application/vnd.oci.image.config.v1+json"),
    "layers": descs}).encode()
index = {"schemaVersion": 2, "manifests": [dict(blob(manifest),
    mediaType="application/vnd.oci.image.manifest.v1+json",
    annotations={"org.opencontainers.image.ref.name": "t"})]}
json.dump(index, open(out + "/index.json", "w"))
json.dump({"imageLayoutVersion": "1.0.0"}, open(out + "/oci-layout", "w"))
"#;
    let made = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(layers.to_string())
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    sh(&format!("tar -C '{0}' -cf '{0}.tar' .", out.display()));
    out.with_extension("tar")
}

#[test]
fn containerd2_differ_refuses_a_layer_that_leaves_its_tree() {
    if !containerd_guard() || !oracle_guard(containerd2_bin_dir().map(|_| ())) {
        return;
    }
    let c = Containerd::start_with(Setup {
        bin_dir: Some(containerd2_bin_dir().unwrap()),
        version: 3,
        differ: true,
        ..Setup::default()
    });
    let escape = format!("sealfs-escape-{}", std::process::id());
    let outside = std::env::temp_dir().join(&escape);
    let up = format!("../../../../../../../..{}", outside.display());
    let cases = [
        serde_json::json!({"name": up, "kind": "file"}),
        serde_json::json!({"name": "ok", "kind": "link", "target": up}),
    ];
    for (i, entry) in cases.iter().enumerate() {
        let archive = oci_archive(
            c.dir.path(),
            &format!("hostile{i}"),
            &serde_json::json!([[{"name": "a", "kind": "file"}, entry]]),
        );
        let out = run(c.ctr().args([
            "image",
            "import",
            "--base-name",
            &format!("sealfs.test/hostile{i}"),
            "--snapshotter",
            "sealfs",
            archive.to_str().unwrap(),
        ]));
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "imported: {said}");
        // The reason, naming the entry, in ctr's error and the snapshotter's log (containerd's
        // log has it too, as the differ's answer).
        assert!(
            said.contains("'..' component") && said.contains(&escape),
            "ctr says why: {said}"
        );
        let log = c.log();
        assert!(
            log.contains("'..' component") && log.contains(&escape),
            "{log}"
        );
        assert!(!outside.exists(), "{} was written", outside.display());
    }
    // No layer was committed, and nothing of the refused layers is left.
    assert!(!c.snap(&["ls"]).contains("Committed"));
    assert!(
        fs::read_dir(c.root().join("layers"))
            .unwrap()
            .next()
            .is_none(),
        "a layer image was left"
    );
}

#[test]
fn containerd2_differ_refuses_a_blob_changed_in_the_content_store() {
    if !containerd_guard() || !oracle_guard(containerd2_bin_dir().map(|_| ())) {
        return;
    }
    let c = Containerd::start_with(Setup {
        bin_dir: Some(containerd2_bin_dir().unwrap()),
        version: 3,
        differ: true,
        ..Setup::default()
    });
    let image = make_image(c.dir.path());
    let import = |snapshotter: &str| {
        run(c.ctr().args([
            "image",
            "import",
            "--base-name",
            "sealfs.test/img",
            "--snapshotter",
            snapshotter,
            image.to_str().unwrap(),
        ]))
    };
    assert!(import("overlayfs").status.success());
    // One byte of the largest layer blob flipped where containerd keeps it; importing again
    // finds the blob present (by its digest) and unpacks what is there.
    let blobs = c
        .dir
        .path()
        .join("root/io.containerd.content.v1.content/blobs/sha256");
    let largest = fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = fs::read(&largest).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    fs::write(&largest, &bytes).unwrap();
    let out = import("sealfs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "imported: {said}");
    let digest = largest.file_name().unwrap().to_string_lossy().into_owned();
    let log = c.log();
    assert!(
        log.contains("not to the digest its descriptor gives") && log.contains(&digest),
        "the snapshotter names the blob and why: {log}"
    );
    assert!(
        said.contains("not to the digest its descriptor gives"),
        "ctr says why: {said}"
    );
    // Nothing built from it is left waiting for a commit.
    let left = sh(&format!(
        "find '{}' -name layer.sealfs",
        c.root().join("snapshots").display()
    ));
    assert_eq!(left, "", "an applied image of the changed blob was left");
    // No layer was built from the changed blob: the layers committed are those below it.
    let applied = log.matches(" as a sealed layer: ").count();
    let committed = c
        .snap(&["ls"])
        .lines()
        .filter(|l| l.contains("Committed"))
        .count();
    assert_eq!(applied, committed, "{log}");
    assert!(committed < 3, "{log}");
}

/// The top committed snapshot of `snapshotter` (the one no other has as parent), viewed as `key`
/// (labelled a garbage-collection root, made again if a collection took it first) and mounted
/// on `target` as `ctr snapshots mounts` says.
fn mount_top(c: &Containerd, snapshotter: &str, key: &str, target: &Path) {
    let ls = c.ok(&["snapshots", "--snapshotter", snapshotter, "ls"]);
    let rows: Vec<Vec<&str>> = ls
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let top = rows
        .iter()
        .filter(|r| r.last() == Some(&"Committed"))
        .map(|r| r[0])
        .find(|k| !rows.iter().any(|r| r.len() == 3 && r[1] == *k))
        .unwrap_or_else(|| panic!("no top snapshot: {ls}"));
    let label = "containerd.io/gc.root=test";
    let kept = (0..5).any(|_| {
        c.ok(&["snapshots", "--snapshotter", snapshotter, "view", key, top]);
        run(c.ctr().args([
            "snapshots",
            "--snapshotter",
            snapshotter,
            "label",
            key,
            label,
        ]))
        .status
        .success()
    });
    assert!(kept, "the view {key} was collected five times over");
    fs::create_dir_all(target).unwrap();
    let line = c.ok(&[
        "snapshots",
        "--snapshotter",
        snapshotter,
        "mounts",
        target.to_str().unwrap(),
        key,
    ]);
    sh(&line);
}

#[test]
fn containerd2_differ_makes_missing_parents_as_containerds_applier() {
    if !containerd_guard() || !oracle_guard(containerd2_bin_dir().map(|_| ())) {
        return;
    }
    let c = Containerd::start_with(Setup {
        bin_dir: Some(containerd2_bin_dir().unwrap()),
        version: 3,
        differ: true,
        ..Setup::default()
    });
    // The second layer adds files under d/ (and d/sub/) without entries for those directories,
    // and under e/, which no layer gives.
    let archive = oci_archive(
        c.dir.path(),
        "parents",
        &serde_json::json!([
            [
                {"name": "d", "kind": "dir", "mode": 0o750, "uid": 1234, "gid": 5678,
                 "mtime": 1000000000, "xattrs": {"user.colour": "blue"}},
                {"name": "d/sub", "kind": "dir", "mode": 0o1777, "mtime": 1100000000},
                {"name": "d/one", "kind": "file"},
            ],
            [
                {"name": "d/two", "kind": "file"},
                {"name": "d/sub/three", "kind": "file"},
                {"name": "e/f", "kind": "file"},
            ]
        ]),
    );
    let mut seen = Vec::new();
    for snapshotter in ["sealfs", "overlayfs"] {
        c.ok(&[
            "image",
            "import",
            "--base-name",
            "sealfs.test/parents",
            "--snapshotter",
            snapshotter,
            archive.to_str().unwrap(),
        ]);
        let m = c.dir.path().join(format!("m-{snapshotter}"));
        mount_top(&c, snapshotter, &format!("v-{snapshotter}"), &m);
        seen.push(sh(&format!(
            "cd '{}' && stat -c '%n %f %u %g' d d/sub d/one d/two d/sub/three e e/f && \
             getfattr --absolute-names -d -m user. d d/sub e && stat -c '%n %Y' d d/sub e",
            m.display()
        )));
        sh(&format!("umount '{}'", m.display()));
    }
    assert!(
        c.log().matches(" as a sealed layer: ").count() == 2,
        "{}",
        c.log()
    );
    // The same modes, owners and xattrs. The times differ: containerd's applier copies the
    // lower directory's, then extracting into it sets the time of extraction; the differ keeps
    // the lower one's (an image does not depend on when it was made).
    let (ours, theirs) = (
        seen[0].rsplit_once("# file").unwrap(),
        seen[1].rsplit_once("# file").unwrap(),
    );
    assert_eq!(ours.0, theirs.0, "sealfs and overlayfs differ");
    let times = |s: &str| {
        s.lines()
            .rev()
            .take(3)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        times(&seen[0]),
        ["e 0", "d/sub 1100000000", "d 1000000000"],
        "{}",
        seen[0]
    );
    assert_eq!(
        seen[0].lines().filter(|l| l.starts_with("user.")).count(),
        seen[1].lines().filter(|l| l.starts_with("user.")).count()
    );
    // d and d/sub as the first layer made them (the second layer's copies shadow them).
    assert!(seen[0].contains("d 41e8 1234 5678\n"), "{}", seen[0]);
    assert!(seen[0].contains("d/sub 43ff 0 0\n"), "{}", seen[0]);
    assert!(seen[0].contains("user.colour=\"blue\""), "{}", seen[0]);
    println!("{}", seen[0]);
}

#[test]
fn cri_pod_on_containerd_1_6_runs_under_sealfs_as_ctr_under_overlayfs() {
    cri_pod_survey(Flavor::Debian16);
}

#[test]
fn cri_pod_on_containerd_2_runs_under_sealfs_as_ctr_under_overlayfs() {
    cri_pod_survey(Flavor::Containerd2);
}

fn cri_pod_survey(flavor: Flavor) {
    let containerd2 = match flavor {
        Flavor::Debian16 => Ok(None),
        Flavor::Containerd2 => containerd2_bin_dir().map(Some),
    };
    if !containerd_guard()
        || !oracle_guard(
            servers::docker_registry_bin()
                .map(|_| ())
                .and(need_tool("skopeo"))
                .and(crictl_bin().map(|_| ()))
                .and(containerd2.as_ref().map(|_| ()).map_err(Clone::clone)),
        )
    {
        return;
    }
    // The images, in a registry started before containerd (its address is in the config).
    let work = tempfile::Builder::new()
        .prefix("sealfs-cri-")
        .tempdir()
        .unwrap();
    make_image(work.path());
    make_pause_image(work.path());
    let registry =
        servers::docker_registry(&work.path().join("registry"), &Default::default()).unwrap();
    let host = format!("127.0.0.1:{}", registry.port);
    let (image, pause) = (
        format!("{host}/sealfs-test/img:t"),
        format!("{host}/sealfs-test/pause:1"),
    );
    for (tag, reference) in [("t", &image), ("pause", &pause)] {
        sh(&format!(
            "skopeo copy --quiet --dest-tls-verify=false 'oci:{}:{tag}' 'docker://{reference}'",
            work.path().join("layout").display()
        ));
    }

    let c = Containerd::start_with(Setup {
        bin_dir: containerd2.unwrap(),
        version: match flavor {
            Flavor::Debian16 => 2,
            Flavor::Containerd2 => 3,
        },
        cri: true,
        extra: cri_config(flavor, &pause),
        // containerd 1.6 has no diff proxy plugins: its layers are committed from directories.
        differ: matches!(flavor, Flavor::Containerd2),
        ..Setup::default()
    });
    let d = c.dir.path();
    let crictl = Crictl::ready(&c, &host);
    println!("{}", crictl.ok(&c, &["version"]));

    crictl.ok(&c, &["pull", &image]);
    if matches!(flavor, Flavor::Containerd2) {
        let log = c.log();
        assert!(
            log.contains(" as a sealed layer: "),
            "the CRI pull's layers went through the differ: {log}"
        );
    }
    let (pod, cid, cri) = survey_pod(&c, &crictl, &image);

    // The pod's and the container's root filesystems: overlayfs over the sealed layers' FUSE
    // mounts (the pause image's one layer, the image's three).
    let layers = layer_mounts(&c.root());
    assert_eq!(layers.len(), 4, "{layers:?}");
    let task_dir = d.join("state/io.containerd.runtime.v2.task/k8s.io");
    let mnt = c.root().join("mnt");
    for (id, n) in [(&pod.id, 1), (&cid, 3)] {
        let lower = overlay_lowerdirs(&task_dir.join(id).join("rootfs"));
        assert_eq!(lower.len(), n, "{lower:?}");
        for dir in &lower {
            assert!(
                Path::new(dir).starts_with(&mnt) && layers.iter().any(|l| l.contains(dir.as_str())),
                "{id}'s lower directory {dir} is a sealfs layer mount: {layers:?}"
            );
        }
    }
    let k8s = c.ok(&[
        "--namespace",
        "k8s.io",
        "snapshots",
        "--snapshotter",
        "sealfs",
        "ls",
    ]);
    assert_eq!(
        k8s.lines().filter(|l| l.contains("Committed")).count(),
        4,
        "{k8s}"
    );
    assert_eq!(
        k8s.lines().filter(|l| l.contains("Active")).count(),
        2,
        "{k8s}"
    );

    // The same image under `ctr run` on containerd's own overlayfs snapshotter.
    c.ok(&[
        "image",
        "pull",
        "--plain-http",
        "--snapshotter",
        "overlayfs",
        &image,
    ]);
    let theirs = c.run_script("overlayfs", &image, "survey-overlayfs", SURVEY);
    // What the runtimes add differs (the CRI's bind-mounted files, ctr's /run); the image's
    // files are the same.
    assert_eq!(
        without(&cri, CRI_FILES),
        without(&theirs, CTR_MOUNTS),
        "the CRI pod on sealfs and ctr on overlayfs differ"
    );
    assert!(cri.contains("\no2\ntwo\no2\n"), "{cri}");
    assert!(cri.contains("/a/a2 81a0 1234 5678 5\n"), "{cri}");
    println!(
        "{flavor:?}: {} lines of survey from crictl logs, the same as ctr run on overlayfs",
        theirs.lines().count()
    );

    crictl.ok(&c, &["stop", "--timeout", "1", &cid]);
    crictl.ok(&c, &["rm", &cid]);
    drop(pod);
}
