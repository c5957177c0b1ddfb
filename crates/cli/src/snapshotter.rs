//! `sealfs snapshotter`: serve containerd's snapshots API ([`sealfs_snapshot::serve`]).

use anyhow::Result;
use clap::Args;
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

Use it with `ctr image pull --snapshotter sealfs ...`, `ctr run --snapshotter sealfs ...`; for \
Kubernetes, set snapshotter = \"sealfs\" in the CRI plugin's section: \
[plugins.\"io.containerd.grpc.v1.cri\".containerd] (1.6, 1.7) or \
[plugins.'io.containerd.cri.v1.images'] (2.x). docs/usage.md says more.
Runs as root (it mounts overlayfs and FUSE); SIGINT or SIGTERM stop it, unmounting its layers."
)]
pub struct SnapshotterArgs {
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
}

/// Runs `sealfs snapshotter`.
pub fn run(args: SnapshotterArgs) -> Result<ExitCode> {
    sealfs_snapshot::serve(&args.root, &args.address)?;
    Ok(ExitCode::SUCCESS)
}
