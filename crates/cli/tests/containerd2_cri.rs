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
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn containerd2_runs_an_image_under_sealfs_as_under_overlayfs() {
    if !containerd_guard() || !oracle_guard(containerd2_bin_dir().map(|_| ())) {
        return;
    }
    let c = Containerd::start_with(Setup {
        bin_dir: Some(containerd2_bin_dir().unwrap()),
        version: 3,
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

#[test]
fn cri_pod_on_containerd_1_6_runs_under_sealfs_as_ctr_under_overlayfs() {
    cri_pod_survey(Flavor::Debian16);
}

#[test]
fn cri_pod_on_containerd_2_runs_under_sealfs_as_ctr_under_overlayfs() {
    cri_pod_survey(Flavor::Containerd2);
}

/// The containerd a CRI test runs.
#[derive(Clone, Copy, Debug)]
enum Flavor {
    /// Debian's containerd 1.6: config version 2, the CRI plugin `io.containerd.grpc.v1.cri`.
    Debian16,
    /// The Go-built 2.x: config version 3, the CRI plugins `io.containerd.cri.v1.*`.
    Containerd2,
}

/// Where crictl is: `$SEALFS_CRICTL`, `target/oracles/crictl` of this workspace (where
/// `scripts/build-oracles.sh` builds it), or `crictl` in `PATH`.
fn crictl_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("SEALFS_CRICTL") {
        return Ok(p.into());
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/oracles/crictl");
    if built.is_file() {
        return Ok(built);
    }
    if have_tool("crictl") {
        return Ok("crictl".into());
    }
    Err(
        "crictl not built (scripts/build-oracles.sh builds it into target/oracles/ with \
         `go install sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0`)"
            .into(),
    )
}

/// The CRI plugin's configuration: snapshotter `sealfs`, sandbox image `pause`, registries in
/// `{dir}/certs.d` (hosts.toml), CNI directories that hold nothing (pods use the host's network).
/// `restrict_oom_score_adj`: the CRI asks runc for an OOM score of -998 for the sandbox, which
/// a machine that does not let root lower its own score refuses ("nsexec: failed to update
/// /proc/self/oom_score_adj: Permission denied", as here); restricted, no score goes below
/// containerd's own.
fn cri_config(flavor: Flavor, pause: &str) -> String {
    match flavor {
        Flavor::Debian16 => format!(
            "[plugins.\"io.containerd.grpc.v1.cri\"]\n\
             \x20 sandbox_image = \"{pause}\"\n\
             \x20 restrict_oom_score_adj = true\n\
             [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n\
             \x20 snapshotter = \"sealfs\"\n\
             [plugins.\"io.containerd.grpc.v1.cri\".cni]\n\
             \x20 bin_dir = \"{{dir}}/cni/bin\"\n\
             \x20 conf_dir = \"{{dir}}/cni/conf\"\n\
             [plugins.\"io.containerd.grpc.v1.cri\".registry]\n\
             \x20 config_path = \"{{dir}}/certs.d\"\n"
        ),
        Flavor::Containerd2 => format!(
            "[plugins.'io.containerd.cri.v1.images']\n\
             \x20 snapshotter = \"sealfs\"\n\
             [plugins.'io.containerd.cri.v1.images'.pinned_images]\n\
             \x20 sandbox = \"{pause}\"\n\
             [plugins.'io.containerd.cri.v1.images'.registry]\n\
             \x20 config_path = \"{{dir}}/certs.d\"\n\
             [plugins.'io.containerd.cri.v1.runtime']\n\
             \x20 restrict_oom_score_adj = true\n\
             [plugins.'io.containerd.cri.v1.runtime'.cni]\n\
             \x20 bin_dirs = [\"{{dir}}/cni/bin\"]\n\
             \x20 conf_dir = \"{{dir}}/cni/conf\"\n"
        ),
    }
}

/// `crictl` on a containerd's socket, through a config file in its directory.
struct Crictl {
    bin: PathBuf,
    config: PathBuf,
}

impl Crictl {
    fn new(c: &Containerd) -> Crictl {
        let d = c.dir.path();
        let config = d.join("crictl.yaml");
        let sock = d.join("containerd.sock");
        fs::write(
            &config,
            format!(
                "runtime-endpoint: unix://{0}\nimage-endpoint: unix://{0}\ntimeout: 60\n",
                sock.display()
            ),
        )
        .unwrap();
        Crictl {
            bin: crictl_bin().unwrap(),
            config,
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--config").arg(&self.config).args(args);
        cmd
    }

    /// `crictl ARGS` that must succeed; its stdout, trimmed.
    fn ok(&self, c: &Containerd, args: &[&str]) -> String {
        let out = run(&mut self.cmd(args));
        assert!(
            out.status.success(),
            "crictl {args:?}: {}{}\ncontainerd log (end):\n{}\nsnapshotter log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            log_tail(&c.dir.path().join("containerd.log")),
            fs::read_to_string(c.dir.path().join("snapshotter.log")).unwrap_or_default()
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}

/// A pod sandbox, stopped and removed on drop (before its containerd, declared earlier, stops).
struct Pod<'a> {
    crictl: &'a Crictl,
    id: String,
}

impl Drop for Pod<'_> {
    fn drop(&mut self) {
        let _ = self.crictl.cmd(&["stopp", &self.id]).output();
        let _ = self.crictl.cmd(&["rmp", "--force", &self.id]).output();
    }
}

/// A busybox image whose command sleeps for a day, as the CRI plugin's sandbox (pause) image,
/// tagged `pause` in the umoci layout `dir/layout` (which [`make_image`] made).
fn make_pause_image(dir: &Path) {
    let l = dir.join("layout");
    let b = dir.join("pause-bundle");
    let (l, b) = (l.display(), b.display());
    sh(&format!(
        "set -e; umoci new --image '{l}:pause'; umoci unpack --image '{l}:pause' '{b}' >/dev/null
         mkdir -p '{b}/rootfs/bin'; cp /bin/busybox '{b}/rootfs/bin/'; ln -s busybox '{b}/rootfs/bin/sleep'
         umoci repack --image '{l}:pause' '{b}'; rm -rf '{b}'
         umoci config --image '{l}:pause' --config.entrypoint /bin/sleep --config.cmd 86400"
    ));
}

/// Paths the CRI plugin bind-mounts into every container (and runc creates in its root
/// filesystem for that): they are not the image's.
const CRI_FILES: &[&str] = &["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];

/// What `ctr run`'s default spec mounts (a tmpfs) and the CRI's does not: runc makes the
/// directory in the root filesystem.
const CTR_MOUNTS: &[&str] = &["/run"];

/// `survey` without its lines about `paths` (a `stat` line starts with the path, a `sha256sum`
/// line ends with it); panics unless each was there.
fn without(survey: &str, paths: &[&str]) -> String {
    for f in paths {
        assert!(
            survey.lines().any(|l| l.starts_with(&format!("{f} "))),
            "{f} is in the survey: {survey}"
        );
    }
    survey
        .lines()
        .filter(|l| {
            !paths
                .iter()
                .any(|f| l.starts_with(&format!("{f} ")) || l.ends_with(&format!("  {f}")))
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The overlayfs mount on `target` in /proc/mounts: its lower directories.
fn overlay_lowerdirs(target: &Path) -> Vec<String> {
    let mounts = fs::read_to_string("/proc/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.len() > 3 && f[1] == target.to_str().unwrap() && f[2] == "overlay"
        })
        .unwrap_or_else(|| panic!("no overlay mount on {}: {mounts}", target.display()));
    let options = line.split(' ').nth(3).unwrap();
    options
        .split(',')
        .find_map(|o| o.strip_prefix("lowerdir="))
        .unwrap_or_else(|| panic!("no lowerdir in {line}"))
        .split(':')
        .map(str::to_string)
        .collect()
}

/// Waits until `crictl inspect` says container `id` is in `state`.
fn wait_for_state(crictl: &Crictl, c: &Containerd, id: &str, state: &str) {
    let t = Instant::now();
    loop {
        let s = crictl.ok(
            c,
            &[
                "inspect",
                "--output",
                "go-template",
                "--template",
                "{{.status.state}}",
                id,
            ],
        );
        if s == state {
            return;
        }
        assert!(
            s != "CONTAINER_EXITED",
            "container {id} exited: {}",
            crictl.ok(c, &["logs", id])
        );
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "container {id} is {s}, not {state}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
    });
    let d = c.dir.path();
    let certs = d.join("certs.d").join(&host);
    fs::create_dir_all(&certs).unwrap();
    fs::write(
        certs.join("hosts.toml"),
        format!(
            "server = \"http://{host}\"\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        ),
    )
    .unwrap();
    for sub in ["cni/bin", "cni/conf", "pod-logs", "out/cri"] {
        fs::create_dir_all(d.join(sub)).unwrap();
    }
    let crictl = Crictl::new(&c);
    // The CRI answers once its plugin has started (after containerd's own socket).
    let t = Instant::now();
    while !run(&mut crictl.cmd(&["version"])).status.success() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the CRI plugin does not answer: {}",
            log_tail(&d.join("containerd.log"))
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("{}", crictl.ok(&c, &["version"]));

    crictl.ok(&c, &["pull", &image]);
    // On the host's network, so in its UTS namespace too: no `hostname` (runc refuses to set
    // one without a private UTS namespace).
    let pod_json = d.join("pod.json");
    fs::write(
        &pod_json,
        format!(
            r#"{{"metadata": {{"name": "sealfs-pod", "namespace": "default", "uid": "sealfs-pod-uid", "attempt": 0}},
  "log_directory": "{}",
  "linux": {{"security_context": {{"namespace_options": {{"network": 2}}}}}}}}"#,
            d.join("pod-logs").display()
        ),
    )
    .unwrap();
    // The script: the survey, a marker, then a sleep so that its root filesystem stays mounted
    // while the test looks at it.
    let script = format!("( {SURVEY}\n) 2>&1; echo survey-done; sleep 3600");
    let container_json = d.join("container.json");
    fs::write(
        &container_json,
        serde_json::json!({
            "metadata": {"name": "survey"},
            "image": {"image": image},
            "command": ["/bin/sh", "-c", script],
            "log_path": "survey.log",
            "mounts": [{"container_path": "/out", "host_path": d.join("out/cri")}],
            "linux": {},
        })
        .to_string(),
    )
    .unwrap();
    let pod = Pod {
        id: crictl.ok(&c, &["runp", pod_json.to_str().unwrap()]),
        crictl: &crictl,
    };
    let cid = crictl.ok(
        &c,
        &[
            "create",
            &pod.id,
            container_json.to_str().unwrap(),
            pod_json.to_str().unwrap(),
        ],
    );
    crictl.ok(&c, &["start", &cid]);
    wait_for_state(&crictl, &c, &cid, "CONTAINER_RUNNING");
    let t = Instant::now();
    let logs = loop {
        let logs = crictl.ok(&c, &["logs", &cid]);
        if logs.ends_with("survey-done") {
            break logs;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the survey did not finish: {logs}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let cri = format!("{}\n", logs.strip_suffix("survey-done").unwrap().trim_end());

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
