//! `sealfs snapshotter`: serve containerd's snapshots API ([`sealfs_snapshot::serve`]);
//! `sealfs snapshotter status`: what it holds ([`sealfs_snapshot::status`]).

use anyhow::Result;
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `sealfs snapshotter`.
#[derive(Args)]
#[command(
    after_help = "Wire it into containerd (1.6, 1.7, 2.x) as a proxy plugin in its config.toml, \
then restart containerd:

  [proxy_plugins.sealfs]
    type = \"snapshot\"
    address = \"/run/sealfs/snapshotter.sock\"

containerd 2.x (config version = 3) unpacks through its transfer service only for the snapshotters \
listed there, so list it beside overlayfs:

  [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
    platform = \"linux/amd64\"
    snapshotter = \"sealfs\"
  [[plugins.'io.containerd.transfer.v1.local'.unpack_config]]
    platform = \"linux/amd64\"
    snapshotter = \"overlayfs\"

containerd 1.7 and 2.x also take the differ served on the same socket, which seals each layer \
straight from its blob in containerd's content store (--containerd-address) rather than from a \
directory containerd extracted it into:

  [proxy_plugins.sealfs-diff]
    type = \"diff\"
    address = \"/run/sealfs/snapshotter.sock\"
  [plugins.'io.containerd.service.v1.diff-service']
    default = [\"sealfs-diff\", \"walking\"]

and `differ = \"sealfs-diff\"` in sealfs's unpack_config entry.

Use it with `ctr image pull --snapshotter sealfs ...`, `ctr run --snapshotter sealfs ...`; for \
Kubernetes, set snapshotter = \"sealfs\" in the CRI plugin's section: \
[plugins.\"io.containerd.grpc.v1.cri\".containerd] (1.6, 1.7) or \
[plugins.'io.containerd.cri.v1.images'] (2.x). docs/usage.md says more.
Runs as root (it mounts overlayfs, EROFS on dm-verity, FUSE); SIGINT or SIGTERM stop it, unmounting \
its layers and removing their device-mapper devices."
)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SnapshotterArgs {
    #[command(subcommand)]
    command: Option<SnapshotterCommand>,
    /// Directory of the snapshotter's state: the metadata store, active snapshots' directories,
    /// the sealed layer images and their mount points.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/lib/sealfs/snapshotter"
    )]
    root: PathBuf,
    /// The unix socket containerd connects to (replaced if it exists).
    #[arg(
        long,
        value_name = "SOCKET",
        default_value = "/run/sealfs/snapshotter.sock"
    )]
    address: PathBuf,
    /// containerd's socket: the differ served on --address reads layer blobs from its content
    /// store.
    #[arg(
        long,
        value_name = "SOCKET",
        default_value = "/run/containerd/containerd.sock"
    )]
    containerd_address: PathBuf,
    /// How committed layers are mounted: `kernel`, by the kernel's EROFS on a dm-verity device of
    /// the layer image (root hash from the digest recorded at commit; needs device-mapper with
    /// dm-verity, EROFS and loop devices), a layer it cannot mount being an error; `fuse`, by the
    /// verified FUSE mount in this process; `auto`, the kernel where it can, else FUSE (the log
    /// says why). `sealfs snapshotter status` shows each layer's mode.
    #[arg(
        long,
        value_name = "MODE",
        default_value = "auto",
        value_parser = ["auto", "kernel", "fuse"]
    )]
    layer_mount: String,
}

/// What `sealfs snapshotter` does besides serving.
#[derive(Subcommand)]
enum SnapshotterCommand {
    /// Show what the snapshotter holds: every snapshot (key, kind, parent, labels) and for each
    /// committed layer its image, size on disk, the digest recorded at commit, how it is mounted
    /// now (fuse-verified, kernel-dm-verity, kernel-fs-verity) and whether it was found damaged.
    /// Asked of the running snapshotter (its socket ROOT/status.sock), or read from its store
    /// when none runs. Exit status 1 when a layer is damaged.
    Status(StatusArgs),
}

/// Arguments of `sealfs snapshotter status`.
#[derive(Args)]
struct StatusArgs {
    /// The snapshotter's state directory (its --root).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/lib/sealfs/snapshotter"
    )]
    root: PathBuf,
    /// Print JSON (names, labels and paths exact; a path that is not UTF-8 also as `KEY_hex`).
    #[arg(long)]
    json: bool,
}

/// Runs `sealfs snapshotter`.
pub fn run(args: SnapshotterArgs) -> Result<ExitCode> {
    if let Some(SnapshotterCommand::Status(s)) = args.command {
        return run_status(s);
    }
    let layer_mount: sealfs_snapshot::layer::Policy = args
        .layer_mount
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--layer-mount {e}"))?;
    sealfs_snapshot::serve(
        &args.root,
        &args.address,
        &args.containerd_address,
        layer_mount,
    )?;
    Ok(ExitCode::SUCCESS)
}

fn run_status(args: StatusArgs) -> Result<ExitCode> {
    let status = sealfs_snapshot::status::query(&args.root)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&status)?)?;
    } else {
        sealfs_snapshot::status::write_text(&mut out, &status)?;
    }
    let damaged = status
        .snapshots
        .iter()
        .any(|s| s.layer.as_ref().is_some_and(|l| l.damaged));
    Ok(if damaged || !status.problems.is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
