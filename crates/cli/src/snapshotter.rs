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
Lazy layers: for an image converted with `sealfs convert --push --key KEY`, pulled on the CRI \
path with disable_snapshot_annotations = false (in [plugins.'io.containerd.cri.v1.images'] of 2.x, \
[plugins.\"io.containerd.grpc.v1.cri\".containerd] of 1.6/1.7), each layer whose sealed counterpart \
is signed by a --lazy-key is not downloaded: it is mounted from the registry, every block verified, \
read through ROOT/cache and filled into it in the background. Others are pulled as usual.
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
    /// A public key (PEM, as `sealfs keygen` writes it) whose signature makes a sealed layer
    /// found through an image's referrers usable lazily: its statement must bind the sealed
    /// image and name the original layer's digest (`sealfs convert --key` signs so). Repeatable.
    /// Without any, no layer is used lazily (unless --lazy-unsigned).
    #[arg(long, value_name = "PEM")]
    lazy_key: Vec<PathBuf>,
    /// With --lazy-key: the signed statement must also name a version at or above this one.
    #[arg(long, value_name = "VERSION", requires = "lazy_key")]
    lazy_min_version: Option<String>,
    /// Without --lazy-key: use sealed layers lazily against the digest their referrer states. That
    /// proves only that the blocks read are the ones the referrer names, not who made them:
    /// anyone who can push to the repository can attach a referrer.
    #[arg(long, conflicts_with = "lazy_key")]
    lazy_unsigned: bool,
    /// Whether a lazy layer is fetched whole into the cache in the background (`on`: once its
    /// metadata is and its reads leave the link free: 2 s after the last read that fetched, or
    /// 10 s after the metadata when none did; `auto`: once reads scatter; `off`: each block when
    /// first read).
    #[arg(long, value_name = "WHEN", default_value = "on", value_parser = ["auto", "on", "off"])]
    lazy_fill: String,
    /// A lazy layer's prefetch list (the paths its image's referrer names, `sealfs convert
    /// --prefetch`): `only` (fetched first at mount, in a few batches; then, the fill being on,
    /// the metadata warm-up waits with the fill until reads are quiet), `first` (fetched first,
    /// then the metadata warm-up at once, as without a list), `off` (ignored).
    #[arg(long, value_name = "WHEN", default_value = "only", value_parser = ["only", "first", "off"])]
    lazy_prefetch: String,
    /// The most the cache of lazy layers' verified blocks (ROOT/cache) may take (K, M, G suffixes).
    #[arg(long, value_name = "SIZE", default_value = "2G", value_parser = crate::cache::parse_size)]
    cache_size: u64,
    /// A registry (`HOST[:PORT]`, as in image names) reached over plain HTTP rather than HTTPS,
    /// for lazy layers. Repeatable.
    #[arg(long, value_name = "HOST")]
    plain_http: Vec<String>,
    /// A certificate authority (PEM) to trust for HTTPS registries besides the system's.
    /// Repeatable.
    #[arg(long, value_name = "PEM")]
    ca_cert: Vec<PathBuf>,
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
    let lazy = lazy_config(&args)?;
    let layer_mount: sealfs_snapshot::layer::Policy = args
        .layer_mount
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--layer-mount {e}"))?;
    sealfs_snapshot::serve(
        &args.root,
        &args.address,
        &args.containerd_address,
        layer_mount,
        lazy,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The lazy layers' configuration the flags give.
fn lazy_config(args: &SnapshotterArgs) -> Result<sealfs_snapshot::lazy::LazyConfig> {
    let keys = args
        .lazy_key
        .iter()
        .map(|p| {
            sealfs_trust::PublicKey::read(p)
                .map_err(|e| anyhow::anyhow!("--lazy-key {}: {e}", sealfs_text::escape_path(p)))
        })
        .collect::<Result<Vec<_>>>()?;
    let min_version = args
        .lazy_min_version
        .as_deref()
        .map(|v| {
            v.parse::<sealfs_trust::Version>()
                .map_err(|e| anyhow::anyhow!("--lazy-min-version: {e}"))
        })
        .transpose()?;
    Ok(sealfs_snapshot::lazy::LazyConfig {
        keys,
        min_version,
        unsigned: args.lazy_unsigned,
        plain_http: args.plain_http.clone(),
        fill: args
            .lazy_fill
            .parse()
            .map_err(|e| anyhow::anyhow!("--lazy-fill: {e}"))?,
        cache_max_bytes: args.cache_size,
        ca_certificates: args.ca_cert.clone(),
        prefetch: match args.lazy_prefetch.as_str() {
            "first" => Some(sealfs_fuse::mount::PrefetchOrder::First),
            "off" => None,
            _ => Some(sealfs_fuse::mount::PrefetchOrder::Only),
        },
    })
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
