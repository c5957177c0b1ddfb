//! `sealfs snapshotter`: serve containerd's snapshots API ([`sealfs_snapshot::serve`]).

use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `sealfs snapshotter`.
#[derive(Args)]
#[command(
    after_help = "Wire it into containerd (1.6, 1.7 and 2.x alike) as a proxy plugin in its \
config.toml, then restart containerd:

  [proxy_plugins.sealfs]
    type = \"snapshot\"
    address = \"/run/sealfs/snapshotter.sock\"

and use it with `ctr image pull --snapshotter sealfs ...`, `ctr run --snapshotter sealfs ...`.
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
