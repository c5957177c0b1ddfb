//! The CRI path (what Kubernetes drives) for the tests that run pods with `crictl` on a
//! [`Containerd`] with its CRI plugin: the plugin's configuration, `crictl` on its socket, a pod
//! removed on drop, and what the runtimes add to a container's root filesystem.

use super::containerd::*;
use super::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The containerd a CRI test runs.
#[derive(Clone, Copy, Debug)]
pub enum Flavor {
    /// Debian's containerd 1.6: config version 2, the CRI plugin `io.containerd.grpc.v1.cri`.
    Debian16,
    /// The Go-built 2.x: config version 3, the CRI plugins `io.containerd.cri.v1.*`.
    Containerd2,
}

/// Where crictl is: `$SEALFS_CRICTL`, `target/oracles/crictl` of this workspace (where
/// `scripts/build-oracles.sh` builds it), or `crictl` in `PATH`.
pub fn crictl_bin() -> Result<PathBuf, String> {
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
pub fn cri_config(flavor: Flavor, pause: &str) -> String {
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
pub struct Crictl {
    pub bin: PathBuf,
    pub config: PathBuf,
}

impl Crictl {
    pub fn new(c: &Containerd) -> Crictl {
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

    /// [`Crictl::new`], once the CRI answers (its plugin starts after containerd's own socket),
    /// with the registry `host` reached over plain HTTP (`hosts.toml` in the directory
    /// [`cri_config`] names) and the (empty) CNI directories made.
    pub fn ready(c: &Containerd, host: &str) -> Crictl {
        let d = c.dir.path();
        let certs = d.join("certs.d").join(host);
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
        let crictl = Crictl::new(c);
        let t = Instant::now();
        while !run(&mut crictl.cmd(&["version"])).status.success() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the CRI plugin does not answer: {}",
                log_tail(&d.join("containerd.log"))
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        crictl
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("--config").arg(&self.config).args(args);
        cmd
    }

    /// `crictl ARGS` that must succeed; its stdout, trimmed.
    pub fn ok(&self, c: &Containerd, args: &[&str]) -> String {
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
pub struct Pod<'a> {
    pub crictl: &'a Crictl,
    pub id: String,
}

impl Drop for Pod<'_> {
    fn drop(&mut self) {
        let _ = self.crictl.cmd(&["stopp", &self.id]).output();
        let _ = self.crictl.cmd(&["rmp", "--force", &self.id]).output();
    }
}

/// A busybox image whose command sleeps for a day, as the CRI plugin's sandbox (pause) image,
/// tagged `pause` in the umoci layout `dir/layout` (which [`make_image`] made).
pub fn make_pause_image(dir: &Path) {
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
pub const CRI_FILES: &[&str] = &["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"];

/// What `ctr run`'s default spec mounts (a tmpfs) and the CRI's does not: runc makes the
/// directory in the root filesystem.
pub const CTR_MOUNTS: &[&str] = &["/run"];

/// `survey` without its lines about `paths` (a `stat` line starts with the path, a `sha256sum`
/// line ends with it); panics unless each was there.
pub fn without(survey: &str, paths: &[&str]) -> String {
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
pub fn overlay_lowerdirs(target: &Path) -> Vec<String> {
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
pub fn wait_for_state(crictl: &Crictl, c: &Containerd, id: &str, state: &str) {
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

/// A pod (on the host's network) whose one container, of `image`, runs [`SURVEY`] and then
/// sleeps (so that its root filesystem stays mounted while the test looks at it): the pod, the
/// container's ID and what the survey printed (`crictl logs`).
pub fn survey_pod<'a>(
    c: &Containerd,
    crictl: &'a Crictl,
    image: &str,
) -> (Pod<'a>, String, String) {
    run_pod(c, crictl, image, SURVEY)
}

/// [`survey_pod`] with another shell script.
pub fn run_pod<'a>(
    c: &Containerd,
    crictl: &'a Crictl,
    image: &str,
    script: &str,
) -> (Pod<'a>, String, String) {
    let d = c.dir.path();
    for sub in ["pod-logs", "out/cri"] {
        fs::create_dir_all(d.join(sub)).unwrap();
    }
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
    // The script, a marker, then a sleep.
    let script = format!("( {script}\n) 2>&1; echo survey-done; sleep 3600");
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
        id: crictl.ok(c, &["runp", pod_json.to_str().unwrap()]),
        crictl,
    };
    let cid = crictl.ok(
        c,
        &[
            "create",
            &pod.id,
            container_json.to_str().unwrap(),
            pod_json.to_str().unwrap(),
        ],
    );
    crictl.ok(c, &["start", &cid]);
    wait_for_state(crictl, c, &cid, "CONTAINER_RUNNING");
    let t = Instant::now();
    let logs = loop {
        let logs = crictl.ok(c, &["logs", &cid]);
        if logs.ends_with("survey-done") {
            break logs;
        }
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "the survey did not finish: {logs}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = format!("{}\n", logs.strip_suffix("survey-done").unwrap().trim_end());
    (pod, cid, out)
}
