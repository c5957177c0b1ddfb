//! A real containerd with `sealfs snapshotter` as its proxy plugin, for the tests that drive
//! it with `ctr` (and `crictl`): each [`Containerd`] has its own root, state, socket and config
//! under a temporary directory, and is stopped (its mounts undone) on drop. Debian's containerd
//! 1.6 by default ([`Containerd::start`]); [`Setup`] chooses another build (the containerd 2.x
//! that `scripts/build-oracles.sh` builds, [`containerd2_bin_dir`]) and the CRI plugin.

use super::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn containerd_guard() -> bool {
    oracle_guard(
        root_env()
            .and(need_tool("containerd"))
            .and(need_tool("ctr"))
            .and(need_tool("runc"))
            .and(need_tool("umoci"))
            .and(if Path::new("/dev/fuse").exists() {
                Ok(())
            } else {
                Err("no /dev/fuse".into())
            })
            .and(if Path::new("/bin/busybox").is_file() {
                Ok(())
            } else {
                Err("no /bin/busybox (Debian package busybox-static)".into())
            }),
    )
}

/// The version of containerd that `scripts/build-oracles.sh` builds from its Go module.
pub const CONTAINERD2_VERSION: &str = "2.4.2";

/// Where containerd 2.x's `containerd`, `ctr` and `containerd-shim-runc-v2` are:
/// `$SEALFS_CONTAINERD2` or `target/oracles/containerd-2.4.2/bin` of this workspace (where
/// `scripts/build-oracles.sh` builds them).
pub fn containerd2_bin_dir() -> Result<PathBuf, String> {
    let dir = match std::env::var_os("SEALFS_CONTAINERD2") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/oracles")
            .join(format!("containerd-{CONTAINERD2_VERSION}/bin")),
    };
    if ["containerd", "ctr", "containerd-shim-runc-v2"]
        .iter()
        .all(|b| dir.join(b).is_file())
    {
        Ok(dir)
    } else {
        Err(format!(
            "containerd {CONTAINERD2_VERSION} not built in {} (scripts/build-oracles.sh builds it \
             with `go install github.com/containerd/containerd/v2/cmd/...@v{CONTAINERD2_VERSION}`)",
            dir.display()
        ))
    }
}

/// Which containerd [`Containerd::start_with`] runs, and how it is configured.
pub struct Setup {
    /// The directory of `containerd`, `ctr` and `containerd-shim-runc-v2` (put first in
    /// containerd's `PATH`, where it finds its shim); `None`: those in `PATH` (Debian's 1.6).
    pub bin_dir: Option<PathBuf>,
    /// The config file's `version`: 2 for containerd 1.6/1.7, 3 for 2.x.
    pub version: u32,
    /// Whether the CRI plugin runs (otherwise it is disabled, as the `ctr` tests need nothing
    /// of it).
    pub cri: bool,
    /// TOML appended to the config, each `{dir}` replaced by the containerd's directory.
    pub extra: String,
    /// Whether the snapshotter's differ is wired in (containerd 1.7+; 1.6 has no diff proxy
    /// plugins): a proxy plugin `sealfs-diff` of type `diff` on the snapshotter's socket, first
    /// in the diff service's defaults and the differ of `sealfs` in the transfer service's
    /// `unpack_config`.
    pub differ: bool,
    /// Arguments added to `sealfs snapshotter`'s (its lazy layers' keys, say).
    pub snapshotter_args: Vec<String>,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            bin_dir: None,
            version: 2,
            cri: false,
            extra: String::new(),
            differ: false,
            snapshotter_args: Vec::new(),
        }
    }
}

/// A containerd and a `sealfs snapshotter` wired to it (its layers FUSE-mounted:
/// `--layer-mount fuse`), each stopped on drop.
pub struct Containerd {
    pub dir: tempfile::TempDir,
    pub containerd: Child,
    pub snapshotter: Option<Child>,
    /// [`Setup::bin_dir`].
    pub bin_dir: Option<PathBuf>,
    /// [`Setup::snapshotter_args`].
    pub snapshotter_args: Vec<String>,
}

impl Containerd {
    /// Debian's containerd (1.6), CRI disabled.
    pub fn start() -> Containerd {
        Self::start_with(Setup::default())
    }

    pub fn start_with(setup: Setup) -> Containerd {
        let dir = tempfile::Builder::new()
            .prefix("sealfs-ctd-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        let disabled = if setup.cri {
            ""
        } else {
            "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
        };
        // 2.x serves NRI on one socket per machine (/var/run/nri/nri.sock), which the
        // containerds of tests running at once would fight over; no test uses it. And its
        // transfer service (what 2.x's `ctr image pull/import` and the CRI pull through)
        // unpacks only for the snapshotters its `unpack_config` lists, overlayfs alone by
        // default; a list replaces that default ("ctr: unable to initialize unpacker: no unpack
        // platforms defined" otherwise).
        let v3 = if setup.version >= 3 {
            let platform = format!(
                "linux/{}",
                match std::env::consts::ARCH {
                    "x86_64" => "amd64",
                    "aarch64" => "arm64",
                    other => other,
                }
            );
            let mut v3 = "[plugins.\"io.containerd.nri.v1.nri\"]\n  disable = true\n".to_string();
            for snapshotter in ["overlayfs", "sealfs"] {
                v3 += &format!(
                    "[[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\n  \
                     platform = \"{platform}\"\n  snapshotter = \"{snapshotter}\"\n"
                );
                if snapshotter == "sealfs" && setup.differ {
                    v3 += "  differ = \"sealfs-diff\"\n";
                }
            }
            v3
        } else {
            String::new()
        };
        let differ = if setup.differ {
            format!(
                "[proxy_plugins.sealfs-diff]\n  type = \"diff\"\n  address = \"{}/sealfs.sock\"\n\
                 [plugins.\"io.containerd.service.v1.diff-service\"]\n  \
                 default = [\"sealfs-diff\", \"walking\"]\n",
                d.display()
            )
        } else {
            String::new()
        };
        fs::write(
            d.join("config.toml"),
            format!(
                "version = {1}\nroot = \"{0}/root\"\nstate = \"{0}/state\"\n{disabled}\
                 [grpc]\n  address = \"{0}/containerd.sock\"\n\
                 [proxy_plugins.sealfs]\n  type = \"snapshot\"\n  address = \"{0}/sealfs.sock\"\n{differ}{v3}{2}",
                d.display(),
                setup.version,
                setup.extra.replace("{dir}", &d.display().to_string()),
            ),
        )
        .unwrap();
        let mut c = Containerd {
            containerd: Self::spawn_containerd(d, setup.bin_dir.as_deref()),
            snapshotter: None,
            bin_dir: setup.bin_dir,
            snapshotter_args: setup.snapshotter_args,
            dir,
        };
        c.start_snapshotter();
        c.wait_for_containerd();
        c
    }

    /// `containerd --config d/config.toml`, its stderr appended to `d/containerd.log`; the one
    /// in `bin_dir` (first in its `PATH`) when given.
    pub fn spawn_containerd(d: &Path, bin_dir: Option<&Path>) -> Child {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("containerd.log"))
            .unwrap();
        let mut cmd = match bin_dir {
            Some(b) => {
                let mut cmd = Command::new(b.join("containerd"));
                let mut path = vec![b.to_path_buf()];
                path.extend(std::env::split_paths(
                    &std::env::var_os("PATH").unwrap_or_default(),
                ));
                cmd.env("PATH", std::env::join_paths(path).unwrap());
                cmd
            }
            None => Command::new("containerd"),
        };
        cmd.arg("--config")
            .arg(d.join("config.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    pub fn wait_for_containerd(&self) {
        let t = Instant::now();
        while !run(self.ctr().arg("version")).status.success() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "containerd did not start: {}",
                fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILLs containerd and starts it again on the same state.
    pub fn restart_containerd(&mut self) {
        self.containerd.kill().unwrap();
        self.containerd.wait().unwrap();
        self.containerd = Self::spawn_containerd(self.dir.path(), self.bin_dir.as_deref());
        self.wait_for_containerd();
    }

    pub fn start_snapshotter(&mut self) {
        let d = self.dir.path();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("snapshotter.log"))
            .unwrap();
        self.snapshotter = Some(
            Command::new(sealfs_bin())
                .arg("snapshotter")
                .arg("--root")
                .arg(d.join("sealfs"))
                .arg("--address")
                .arg(d.join("sealfs.sock"))
                .arg("--containerd-address")
                .arg(d.join("containerd.sock"))
                // These tests check the FUSE layers (their mounts, counters and logs) whatever
                // the machine has; the kernel's are snapshotter_kernel.rs's.
                .args(["--layer-mount", "fuse"])
                .args(&self.snapshotter_args)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        let t = Instant::now();
        // Connecting, not the file's existence: a SIGKILLed run leaves its socket file behind.
        while std::os::unix::net::UnixStream::connect(d.join("sealfs.sock")).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "no snapshotter socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The containerd's `ctr` (from [`Setup::bin_dir`], or `PATH`) on its socket.
    pub fn ctr(&self) -> Command {
        let mut cmd = match &self.bin_dir {
            Some(b) => Command::new(b.join("ctr")),
            None => Command::new("ctr"),
        };
        cmd.arg("--address")
            .arg(self.dir.path().join("containerd.sock"));
        cmd.stdin(Stdio::null());
        cmd
    }

    /// `ctr ARGS` that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = run(self.ctr().args(args));
        assert!(
            out.status.success(),
            "ctr {args:?}: {}\ncontainerd log (end):\n{}\nsnapshotter log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            log_tail(&self.dir.path().join("containerd.log")),
            fs::read_to_string(self.dir.path().join("snapshotter.log")).unwrap_or_default()
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// `ctr snapshots --snapshotter sealfs ARGS` that must succeed.
    pub fn snap(&self, args: &[&str]) -> String {
        let mut all = vec!["snapshots", "--snapshotter", "sealfs"];
        all.extend_from_slice(args);
        self.ok(&all)
    }

    /// `ctr snapshots view KEY PARENT`, then labelled a root of containerd's garbage collection
    /// (ctr 1.6 labels what it prepares and commits so, not views, and offers no label at
    /// creation): a collection that runs in between (after a commit's removal of the active
    /// snapshot, or at start) takes the view, which is then made again.
    pub fn view_kept(&self, key: &str, parent: &str) {
        for _ in 0..5 {
            self.snap(&["view", key, parent]);
            let out = run(self.ctr().args([
                "snapshots",
                "--snapshotter",
                "sealfs",
                "label",
                key,
                "containerd.io/gc.root=test",
            ]));
            if out.status.success() {
                return;
            }
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("not found"),
                "ctr snapshots label {key}: {err}"
            );
        }
        panic!("the view {key} was collected five times over");
    }

    /// Mounts snapshot `key` on `target` as `ctr snapshots mounts` says (the kernel does it).
    pub fn mount(&self, key: &str, target: &Path) {
        fs::create_dir_all(target).unwrap();
        let line = self.snap(&["mounts", target.to_str().unwrap(), key]);
        assert!(line.starts_with("mount "), "ctr snapshots mounts: {line}");
        sh(&line);
    }

    /// `ctr run --rm` of `script` in `image` on `snapshotter`; what it wrote to stdout and
    /// stderr. Written to a file of a bind-mounted directory, not read from ctr's stdout: ctr
    /// 1.6 sometimes loses the last output of a process that exits at once.
    ///
    /// The container's ID is `name` and this containerd's directory name: runc keeps its
    /// containers' state in one directory per namespace for the whole machine
    /// (/run/containerd/runc/default), so two containerds (two test programs at once) running
    /// containers of one ID collide ("runc create failed: container with given ID already
    /// exists").
    pub fn run_script(&self, snapshotter: &str, image: &str, name: &str, script: &str) -> String {
        let out = self.dir.path().join("out").join(name);
        fs::create_dir_all(&out).unwrap();
        let id = format!(
            "{name}-{}",
            self.dir.path().file_name().unwrap().to_string_lossy()
        );
        self.ok(&[
            "run",
            "--rm",
            "--snapshotter",
            snapshotter,
            "--mount",
            &format!("type=bind,src={},dst=/out,options=rbind:rw", out.display()),
            image,
            &id,
            "/bin/sh",
            "-c",
            &format!("( {script}\n) > /out/output 2>&1"),
        ]);
        fs::read_to_string(out.join("output")).unwrap()
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("sealfs")
    }

    /// Starts the snapshotter with its state under `root` (not [`Containerd::root`]) and `env`
    /// added to its environment, on the socket containerd dials; waits until containerd
    /// answers through it (it redials a proxy plugin after a backoff).
    pub fn start_snapshotter_at(&mut self, root: &Path, env: &[(&str, &str)]) {
        let d = self.dir.path();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(d.join("snapshotter.log"))
            .unwrap();
        self.snapshotter = Some(
            Command::new(sealfs_bin())
                .arg("snapshotter")
                .arg("--root")
                .arg(root)
                .arg("--address")
                .arg(d.join("sealfs.sock"))
                .arg("--containerd-address")
                .arg(d.join("containerd.sock"))
                // These tests check the FUSE layers (their mounts, counters and logs) whatever
                // the machine has; the kernel's are snapshotter_kernel.rs's.
                .args(["--layer-mount", "fuse"])
                .args(&self.snapshotter_args)
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        self.wait_for_snapshotter();
    }

    /// Waits until the snapshotter listens on its socket and containerd reaches it (after a
    /// restart of either, containerd redials a proxy plugin after a backoff): `ctr snapshots
    /// usage` of a snapshot, which asks the snapshotter (`ls` and `info` answer from
    /// containerd's own database), or, with none, a snapshot prepared and removed.
    pub fn wait_for_snapshotter(&self) {
        let t = Instant::now();
        let sock = self.dir.path().join("sealfs.sock");
        let probe = || {
            let ls = run(self
                .ctr()
                .args(["snapshots", "--snapshotter", "sealfs", "ls"]));
            if !ls.status.success() {
                return false;
            }
            let out = match self.snapshot_rows().first() {
                Some((key, _, _)) => {
                    run(self
                        .ctr()
                        .args(["snapshots", "--snapshotter", "sealfs", "usage", key]))
                }
                None => {
                    let args = ["snapshots", "--snapshotter", "sealfs"];
                    let out = run(self.ctr().args(args).args(["prepare", "sealfs-probe"]));
                    let _ = run(self.ctr().args(args).args(["rm", "sealfs-probe"]));
                    out
                }
            };
            out.status.success()
        };
        while std::os::unix::net::UnixStream::connect(&sock).is_err() || !probe() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "containerd does not reach the snapshotter: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs the snapshotter; its pid.
    pub fn kill_snapshotter(&mut self) -> u32 {
        let mut s = self.snapshotter.take().expect("a snapshotter runs");
        let pid = s.id();
        s.kill().unwrap();
        s.wait().unwrap();
        pid
    }

    /// The snapshotter's pid.
    pub fn snapshotter_pid(&self) -> u32 {
        self.snapshotter.as_ref().expect("a snapshotter runs").id()
    }

    /// The snapshotter's log (its stderr, every run).
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("snapshotter.log")).unwrap_or_default()
    }

    /// The rows of `ctr snapshots --snapshotter sealfs ls`: key, parent ("" for none), kind.
    pub fn snapshot_rows(&self) -> Vec<(String, String, String)> {
        self.snap(&["ls"])
            .lines()
            .skip(1)
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                match w.as_slice() {
                    [k, kind] => (k.to_string(), String::new(), kind.to_string()),
                    [k, p, kind] => (k.to_string(), p.to_string(), kind.to_string()),
                    _ => panic!("ctr snapshots ls row: {l}"),
                }
            })
            .collect()
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let Some(s) = &mut self.snapshotter {
            // SIGTERM: it unmounts its layers.
            let _ = Command::new("kill").arg(s.id().to_string()).status();
            let _ = s.wait();
        }
        let _ = self.containerd.kill();
        let _ = self.containerd.wait();
        // What a failed test left mounted below the directory, innermost first.
        let dir = self.dir.path().to_str().unwrap().to_string();
        let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
        let left: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(1))
            .filter(|p| p.starts_with(&dir))
            .collect();
        for p in left.iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(p).status();
        }
    }
}

/// The last 4000 bytes of a log file (containerd's logs are long), or what reading it said.
pub fn log_tail(path: &Path) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(4000)..]).into_owned()
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

/// Runs a shell command line that must succeed; its stdout.
pub fn sh(line: &str) -> String {
    let out = run(Command::new("sh").arg("-c").arg(line));
    assert!(
        out.status.success(),
        "{line}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The sealfs FUSE mounts under `root`, as /proc/mounts lists them.
pub fn layer_mounts(root: &Path) -> Vec<String> {
    fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .filter(|l| l.contains(root.to_str().unwrap()) && l.contains("fuse.sealfs"))
        .map(str::to_string)
        .collect()
}

/// Waits until `cond` holds (containerd removes snapshots in its garbage collection, after
/// `ctr snapshots rm` returned).
pub fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A three-layer OCI image made by umoci in `dir`, as a tar `ctr image import` takes: busybox
/// and files; then a file deleted, one changed, one added; then a directory made opaque.
pub fn make_image(dir: &Path) -> PathBuf {
    let (l, b) = (dir.join("layout"), dir.join("bundle"));
    let (l, b) = (l.display(), b.display());
    sh(&format!(
        "set -e; umoci init --layout '{l}'; umoci new --image '{l}:t'; umoci unpack --image '{l}:t' '{b}' >/dev/null
         r='{b}/rootfs'; mkdir -p $r/bin $r/a $r/o $r/etc; cp /bin/busybox $r/bin/
         for t in sh cat sha256sum find stat sort ls xargs readlink; do ln -s busybox $r/bin/$t; done
         echo one > $r/a/a1; echo keep > $r/a/a2; echo o1 > $r/o/o1; echo gone > $r/del
         chown 1234:5678 $r/a/a2; chmod 0640 $r/a/a2
         umoci repack --image '{l}:t' '{b}'; rm -rf '{b}'; umoci unpack --image '{l}:t' '{b}' >/dev/null
         rm $r/del; echo two > $r/a/a1; mkdir $r/b; head -c 300000 /dev/urandom > $r/b/big
         umoci repack --image '{l}:t' '{b}'
         mkdir -p '{dir}/o'; echo o2 > '{dir}/o/o2'; umoci insert --image '{l}:t' --opaque '{dir}/o' /o
         umoci config --image '{l}:t' --config.cmd /bin/sh
         tar -C '{l}' -cf '{dir}/image.tar' .",
        dir = dir.display()
    ));
    dir.join("image.tar")
}

/// What the container prints: every path's mode and owner (and size, but for directories, whose
/// size is the file system's own), symlink targets, every file's SHA-256, then a few contents.
pub const SURVEY: &str = "cd / && find / -xdev | sort | while read f; do
  if [ -d \"$f\" ]; then stat -c '%n %f %u %g' \"$f\"; else stat -c '%n %f %u %g %s' \"$f\"; fi
done
find / -xdev -type l | sort | while read f; do echo \"$f -> $(readlink $f)\"; done
find / -xdev -type f | sort | xargs sha256sum
ls /o; cat /a/a1 /o/o2; cat /del 2>&1; true";
