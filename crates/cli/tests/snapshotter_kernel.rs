//! `sealfs snapshotter` with its committed layers mounted by the kernel: EROFS on dm-verity, under
//! containerd and runc, in a virtual machine.
//!
//! The host these tests run on may have no device-mapper (no `/dev/mapper/control` in a
//! container), so `scripts/vm-verity.sh` boots the Debian cloud kernel under QEMU (dm-verity,
//! EROFS, overlayfs as modules) with Debian's `containerd`, `ctr`, `containerd-shim-runc-v2` and
//! `runc` copied in from the host. One boot does every check, each judged by programs nobody here
//! wrote (the kernel's dm-verity and EROFS, `dmsetup`, containerd's own `overlayfs` snapshotter):
//!
//! - the multi-layer busybox image (whiteouts, an opaque directory) made on the host with umoci,
//!   imported with `ctr image import --snapshotter sealfs` (no network), runs under `ctr run`, and
//!   what it prints of every file (modes, owners, sizes, SHA-256) equals the run of the same
//!   image under containerd's `overlayfs` snapshotter;
//! - every layer is mounted `kernel-dm-verity` (`sealfs snapshotter status --json`), on a
//!   device-mapper device whose table is a `verity` target (`dmsetup table`), EROFS on `/dev/dm-N`
//!   in `/proc/mounts`, with `--layer-mount auto`: the default takes the kernel where it can;
//! - a byte flipped in a committed layer image on disk (under the snapshotter's root): the
//!   container's read of that file fails with EIO (the kernel's dm-verity, not sealfs, refuses
//!   it), other files of every layer read the same bytes as before, dm-verity's status turns `C`
//!   and the snapshotter's status calls the layer damaged;
//! - a SIGKILLed snapshotter leaves its dm devices and mounts; its next start removes them, and
//!   mounts the layers again for the next container;
//! - removing the image frees the layers' devices, and SIGTERM takes down the devices of the
//!   layers it mounted: no dm device, no loop device but the guest's own, no EROFS mount left.
//!
//! Needs root, qemu-system-x86_64, the tools of `scripts/vm-verity.sh`, containerd, ctr,
//! containerd-shim-runc-v2, runc, umoci and busybox-static. KVM is not used: the Debian kernel
//! stops with "emulation failure" under nested KVM on these machines, and the software-emulated
//! guest runs the whole script in well under a minute.

mod common;

use common::containerd::{make_image, SURVEY};
use common::*;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/vm-verity.sh")
}

/// Host programs copied into the guest for containerd and runc.
const GUEST_BINS: &str = "containerd ctr containerd-shim-runc-v2 runc";

fn vm_env() -> Result<(), String> {
    root_env()?;
    for tool in [
        "qemu-system-x86_64",
        "mkfs.ext4",
        "fsverity",
        "dmsetup",
        "losetup",
        "objcopy",
        "apt-get",
        "dpkg-deb",
        "umoci",
    ]
    .into_iter()
    .chain(GUEST_BINS.split(' '))
    {
        if !have_tool(tool) {
            return Err(format!("{tool} not found (scripts/test.sh installs it)"));
        }
    }
    if !Path::new("/bin/busybox").is_file() {
        return Err("/bin/busybox not found (apt-get install busybox-static)".into());
    }
    Ok(())
}

/// After the flip: the damaged file's read, then files of every layer.
const AFTER_FLIP: &str = "cat /b/big > /dev/null; echo \"big-rc $?\"
sha256sum /bin/busybox /a/a1 /a/a2 /o/o2";

/// The guest script: containerd and the snapshotter started, then each check a section
/// (`BEGIN name` ... `END name`, `RC name status`).
fn guest_script() -> String {
    let mut s = String::from(
        r#"step() { name=$1; shift; echo "BEGIN $name"; ( eval "$*" ) 2>&1; r=$?; echo "END $name"; echo "RC $name $r"; }
C="ctr --address /run/containerd/containerd.sock"
R=/mnt/sroot
mkdir -p /run/ctd /run/out
cat > /run/ctd/config.toml <<EOF
version = 2
root = "/run/ctd/root"
state = "/run/ctd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "/run/containerd/containerd.sock"
[proxy_plugins.sealfs]
  type = "snapshot"
  address = "/run/sealfs.sock"
EOF
start_snap() {
  rm -f /run/sealfs.sock
  sealfs snapshotter --root $R --address /run/sealfs.sock --containerd-address /run/containerd/containerd.sock --layer-mount auto 2>>/run/snap.log &
  echo $! > /run/snap.pid
  i=0; while [ ! -S /run/sealfs.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
}
# ctr run --rm of a script, its output through a bind-mounted file; retried while containerd
# redials a restarted snapshotter.
run() {
  sn=$1; id=$2; shift 2; mkdir -p /run/out/$id; n=0
  until $C run --rm --no-pivot --snapshotter $sn --mount type=bind,src=/run/out/$id,dst=/out,options=rbind:rw sealfs.test/img:t $id /bin/sh -c "( $* ) > /out/output 2>&1"; do
    n=$((n+1)); [ $n -ge 20 ] && return 1; sleep 1
  done
  cat /run/out/$id/output
}
# Waits up to 20 s for `dmsetup ls` to list no device.
no_dm() { i=0; while ! dmsetup ls | grep -q 'No devices found' && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; dmsetup ls; }
start_snap
containerd --config /run/ctd/config.toml 2>/run/ctd.log &
i=0; while ! $C version >/dev/null 2>&1 && [ $i -lt 300 ]; do sleep 0.2; i=$((i+1)); done
"#,
    );
    let step = |name: &str, cmd: &str| format!("step {name} '{}'\n", cmd.replace('\'', r"'\''"));
    s += &step(
        "import",
        "$C image import --base-name sealfs.test/img --snapshotter sealfs /mnt/image.tar && \
         $C image import --base-name sealfs.test/img --snapshotter overlayfs /mnt/image.tar",
    );
    s += &format!("cat > /run/survey.sh <<'EOF'\n{SURVEY}\nEOF\n");
    s += &format!("cat > /run/after-flip.sh <<'EOF'\n{AFTER_FLIP}\nEOF\n");
    s += "cp /run/survey.sh /run/after-flip.sh /run/out/\n";
    s += &step("survey-sealfs", "run sealfs s1 \"$(cat /run/survey.sh)\"");
    s += &step(
        "survey-overlayfs",
        "run overlayfs o1 \"$(cat /run/survey.sh)\"",
    );
    s += &step("status", "sealfs snapshotter status --root $R --json");
    s += &step("dm-table", "dmsetup table");
    s += &step("erofs-mounts", "grep \" $R/mnt/\" /proc/mounts");
    // The layer holding /b/big (300000 random bytes: stored as they are, from start_block on).
    s += &step(
        "flip",
        "for l in $R/layers/*.sealfs; do
           if sealfs stat --json $l /b/big >/run/st 2>/dev/null; then img=$l; cp /run/st /run/stat; fi
         done
         blk=$(sed -n 's/.*\"start_block\":\\([0-9]*\\).*/\\1/p' /run/stat)
         off=$((blk * 4096 + 40960 + 5))
         old=$(dd if=$img bs=1 skip=$off count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
         printf \"\\\\$(printf %o $(( old ^ 1 )))\" | dd of=$img bs=1 seek=$off conv=notrunc 2>/dev/null
         new=$(dd if=$img bs=1 skip=$off count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
         echo \"flipped $img at $off (start block $blk of /b/big, + 40965): $old -> $new\"
         sync; echo 3 > /proc/sys/vm/drop_caches",
    );
    s += &step("after-flip", "run sealfs f1 \"$(cat /run/after-flip.sh)\"");
    s += &step("dm-status-flip", "dmsetup status");
    s += &step("status-flip", "sealfs snapshotter status --root $R --json");
    s += &step(
        "kernel-log",
        "dmesg | grep -i \"verity\" | grep -i corrupt | tail -n 3",
    );
    // SIGKILL: the devices and mounts stay; the next start removes them.
    s += &step(
        "kill",
        "kill -9 $(cat /run/snap.pid); sleep 1; dmsetup ls; grep -c \" $R/mnt/\" /proc/mounts",
    );
    s += &step(
        "restart",
        "start_snap; dmsetup ls; grep -c \" $R/mnt/\" /proc/mounts; true",
    );
    s += &step(
        "after-restart",
        "run sealfs r1 \"$(cat /run/after-flip.sh)\"",
    );
    s += &step(
        "status-restart",
        "sealfs snapshotter status --root $R --json",
    );
    // Removing the image removes the layers (containerd's garbage collection) and their devices.
    s += &step(
        "image-rm",
        "$C image rm --sync sealfs.test/img:t && no_dm && ls $R/layers $R/mnt",
    );
    // Imported again (fresh layers), run, then SIGTERM: it takes its layers' devices down.
    s += &step(
        "reimport",
        "$C image import --base-name sealfs.test/img --snapshotter sealfs /mnt/image.tar \
         && run sealfs t1 \"sha256sum /b/big /a/a1\" && dmsetup ls | grep -c sealfs-",
    );
    s += &step(
        "sigterm",
        "p=$(cat /run/snap.pid); kill $p; i=0
         while [ -d /proc/$p ] && ! grep -q \"^State:.*Z\" /proc/$p/status && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
         dmsetup ls; losetup -a; grep -c \" $R/mnt/\" /proc/mounts; true",
    );
    s += &step("snapshotter-log", "cat /run/snap.log");
    s += &step(
        "containerd-log",
        "grep -v level=info /run/ctd.log | tail -n 20",
    );
    s
}

/// Section `name`, after checking its step exited 0; the snapshotter's log is shown when not.
fn ok<'a>(out: &'a str, name: &str) -> &'a str {
    let text = section(out, name);
    let prefix = format!("RC {name} ");
    let rc: i32 = out
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no exit status of {name} in the guest output:\n{out}"));
    assert_eq!(
        rc,
        0,
        "guest step {name} exited {rc}:\n{text}\n--- snapshotter log:\n{}\n--- containerd log:\n{}",
        section(out, "snapshotter-log"),
        section(out, "containerd-log")
    );
    text
}

/// The committed layers' `(image, mode, source)` of a `sealfs snapshotter status --json`.
fn layer_modes(json: &str) -> Vec<(String, String, String)> {
    let v: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("status --json: {e}:\n{json}"));
    v["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "committed")
        .map(|s| {
            let l = &s["layer"];
            (
                l["image"].as_str().unwrap_or("").to_string(),
                l["mount"]["mode"]
                    .as_str()
                    .unwrap_or("unmounted")
                    .to_string(),
                l["mount"]["source"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// Lines `<sha256>  <path>` into path -> sum.
fn hashes(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (sum, path) = l.split_once("  ")?;
            (sum.len() == 64).then(|| (path.to_string(), sum.to_string()))
        })
        .collect()
}

#[test]
fn kernel_verified_layers_in_a_guest() {
    if !oracle_guard(vm_env()) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let staging = dir.path().join("staging");
    fs::create_dir_all(&staging).unwrap();
    let image = make_image(dir.path());
    fs::rename(&image, staging.join("image.tar")).unwrap();
    fs::write(staging.join("guest.sh"), guest_script()).unwrap();
    let t = std::time::Instant::now();
    let out = run(Command::new("timeout")
        .arg("900")
        .arg(script())
        .arg(&staging)
        .env("SEALFS", sealfs_bin())
        .env("VM_MEM", "2048")
        .env("VM_EXTRA_BINS", GUEST_BINS));
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(
        out.status.success() && text.contains("GUEST-EXIT"),
        "the virtual machine did not run to its end ({:?}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    println!("guest ran in {:.1?}", t.elapsed());

    // The same container under both snapshotters.
    ok(&text, "import");
    let ours = ok(&text, "survey-sealfs");
    let theirs = ok(&text, "survey-overlayfs");
    assert_eq!(ours, theirs, "sealfs (kernel layers) and overlayfs differ");
    assert!(ours.contains("\no2\ntwo\no2\n"), "{ours}");
    assert!(ours.contains("can't open '/del': No such file"), "{ours}");
    assert!(ours.contains("/a/a2 81a0 1234 5678 5\n"), "{ours}");
    assert!(ours.contains("/b/big 81a4 0 0 300000\n"), "{ours}");
    assert!(!ours.contains("/o/o1"), "{ours}");
    let before = hashes(ours);
    assert!(before.contains_key("/b/big") && before.contains_key("/bin/busybox"));

    // Every layer by the kernel, on dm-verity, as auto chose.
    let modes = layer_modes(ok(&text, "status"));
    assert_eq!(modes.len(), 3, "{modes:?}");
    let table = ok(&text, "dm-table");
    for (image, mode, source) in &modes {
        assert_eq!(mode, "kernel-dm-verity", "{image}: {modes:?}");
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("{source}: ")))
            .unwrap_or_else(|| panic!("{image}: no dm device {source}:\n{table}"));
        assert!(line.contains(" verity 1 "), "{line}");
    }
    let mounts = ok(&text, "erofs-mounts");
    assert_eq!(
        mounts
            .lines()
            .filter(|l| l.starts_with("/dev/dm-") && l.contains(" erofs ro"))
            .count(),
        3,
        "{mounts}"
    );
    assert!(
        section(&text, "snapshotter-log").contains("(mode kernel-dm-verity): kernel EROFS on dm-verity, every block verified against sha256:"),
        "{}",
        section(&text, "snapshotter-log")
    );

    // A byte flipped on disk: that file's read fails with EIO, the rest reads as before.
    let flip = ok(&text, "flip");
    println!("{}", flip.trim());
    assert!(
        flip.contains("flipped /mnt/sroot/layers/") && !flip.contains("(start block  of"),
        "{flip}"
    );
    let after = ok(&text, "after-flip");
    assert!(
        after.contains("Input/output error") || after.contains("I/O error"),
        "{after}"
    );
    assert!(after.contains("big-rc 1\n"), "{after}");
    let after_hashes = hashes(after);
    for path in ["/bin/busybox", "/a/a1", "/a/a2", "/o/o2"] {
        assert_eq!(
            after_hashes.get(path),
            before.get(path),
            "{path} after the flip:\n{after}"
        );
    }
    let dm_status = ok(&text, "dm-status-flip");
    assert_eq!(
        dm_status
            .lines()
            .filter(|l| l.contains(" verity ") && l.trim_end().ends_with(" C"))
            .count(),
        1,
        "one device saw corruption:\n{dm_status}"
    );
    let status = section(&text, "status-flip");
    assert!(
        status.contains("dm-verity has seen a block fail its check"),
        "{status}"
    );
    println!("kernel: {}", section(&text, "kernel-log").trim());

    // SIGKILL leaves the devices; the next start removes them; layers mounted anew after.
    let killed = ok(&text, "kill");
    assert_eq!(killed.matches("sealfs-").count(), 3, "{killed}");
    let restarted = ok(&text, "restart");
    assert!(restarted.contains("No devices found"), "{restarted}");
    assert!(restarted.trim_end().ends_with('0'), "{restarted}");
    let again = ok(&text, "after-restart");
    assert!(again.contains("big-rc 1\n"), "{again}");
    assert_eq!(
        hashes(again).get("/bin/busybox"),
        before.get("/bin/busybox")
    );
    // Damaged still (exit status 1): the new mapping saw the flipped block too.
    let status = section(&text, "status-restart");
    assert!(
        status.contains("dm-verity has seen a block fail its check"),
        "{status}"
    );
    for (image, mode, _) in layer_modes(status) {
        assert_eq!(mode, "kernel-dm-verity", "{image} after the restart");
    }

    // Removal and shutdown take the devices down.
    let removed = ok(&text, "image-rm");
    assert!(removed.contains("No devices found"), "{removed}");
    let reimported = ok(&text, "reimport");
    assert_eq!(
        hashes(reimported).get("/b/big").map(|_| ()),
        Some(()),
        "{reimported}"
    );
    let down = ok(&text, "sigterm");
    assert!(down.contains("No devices found"), "{down}");
    assert!(
        !down
            .lines()
            .any(|l| l.starts_with("/dev/loop") && !l.contains("fs.ext4")),
        "loop devices left: {down}"
    );
    assert!(down.trim_end().ends_with('0'), "EROFS mounts left: {down}");
}
