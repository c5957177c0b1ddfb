//! `sealfs mount`, `sealfs umount` and `sealfs stats`: translations of the mount API of
//! [`sealfs_fuse::mount`] (serve an image over FUSE, take it down, read its counters while it
//! runs), and of [`crate::kernel`] for `--kernel` mounts.
//!
//! `mount` opens and checks the image first (a wrong `--digest`, a damaged seal or a missing file
//! fail here, before anything is mounted), then mounts; by default it then detaches: the parent
//! waits until the mount is up (or has failed, printing why) and exits, the daemon serves until the
//! file system is unmounted or it gets SIGINT, SIGTERM or SIGHUP, which unmount it (lazily, as
//! libfuse does: processes still holding files keep them).

use crate::open::ImageArgs;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use sealfs_fuse::mount::{self as fmount, LogTo, MountError, MountImage, MountOptions};
use sealfs_fuse::XattrMode;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `sealfs mount`.
#[derive(Args)]
pub struct MountArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Directory to mount the image on.
    mountpoint: PathBuf,
    /// Stay attached to the terminal (log to stderr) instead of running as a daemon.
    #[arg(short, long)]
    foreground: bool,
    /// Mount options, comma-separated: allow_other, allow_root, nodev, nosuid, noexec, dev, suid,
    /// exec, noatime, atime, ro (always), default_permissions (always), fsname=NAME.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
    /// Threads serving requests (default: one per CPU, at least 2).
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Append log lines (failed reads, once each) to this file instead of syslog or stderr.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Let the kernel mount the image (EROFS) and check every block itself, instead of serving it
    /// over FUSE: `dm-verity` (a read-only loop device of the image under a dm-verity mapping whose
    /// tree is the seal's), `fs-verity` (a detached image: fs-verity is turned on for the file with
    /// the seal's parameters and the kernel's digest must be the authenticated one), or `auto`
    /// (fs-verity where a detached image's file system has it, dm-verity otherwise). Needs root
    /// and --digest or --key; `sealfs umount` takes down the mount and its devices.
    #[arg(long, value_name = "HOW", num_args = 0..=1, default_missing_value = "auto", require_equals = true)]
    kernel: Option<String>,
    /// Record which parts of the image are read while mounted (in the order first read) into this
    /// file when the mount ends: an access profile to replay with --profile (kept outside the
    /// image, whose digest it never changes).
    #[arg(long, value_name = "FILE")]
    record_profile: Option<PathBuf>,
    /// Replay an access profile recorded from this image: its ranges are fetched ahead, in order,
    /// into the persistent cache of a remote image as soon as it is mounted.
    #[arg(long, value_name = "FILE")]
    profile: Option<PathBuf>,
    /// A remote image read through the persistent cache: fetch ahead, as soon as it is mounted,
    /// what reading these paths needs (FILE: absolute paths from the image's root, one a line,
    /// `#` comments; `-` for stdin; at most 64 KiB and 4096 paths): their directories and
    /// inodes level by level across all paths, then the files' data, in a few concurrent
    /// batches, at most a quarter of the image (or 8 MiB). Paths the image lacks are skipped; symlinks are
    /// followed within the image.
    #[arg(long, value_name = "FILE")]
    prefetch: Option<PathBuf>,
    /// A remote image read through the persistent cache: whether the rest of it is fetched into
    /// the cache in the background, in order, behind every read and its readahead (so that every
    /// file soon reads without a round trip, and then offline). `auto`: once reads scatter (16
    /// reads within 10 s that each had to fetch data and continued no sequential stream), if the
    /// image takes at most three quarters of the cache's bound (--cache-size); `on` (`--fill`
    /// alone): once its metadata is fetched and reads leave the link free (2 s after the last
    /// read that fetched, or 10 s after the metadata when none did); `off`: never, each block is
    /// fetched when first read.
    #[arg(long, value_name = "WHEN", default_value = "auto", num_args = 0..=1, default_missing_value = "on", require_equals = true, value_parser = ["auto", "on", "off"])]
    fill: String,
    /// With --kernel: what dm-verity does when a block fails its check: `eio` (the read fails),
    /// `panic` or `restart` the machine.
    #[arg(long, value_name = "ACTION", requires = "kernel", value_parser = ["eio", "panic", "restart"])]
    on_corruption: Option<String>,
    /// Extended attributes: `on` answers every request from the image; `off` shows none (the
    /// kernel is told once and then answers every request itself, "Operation not supported",
    /// without a round trip: `ls -l` asks two per file); `auto` turns them off once a read of
    /// every inode in the background finds the image has none (a local image, or a remote one
    /// read through the cache once its metadata is fetched ahead; not while recording a
    /// profile; `on` otherwise).
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "on", "off"])]
    xattrs: String,
    /// The kernel's readahead for the mount (its `/sys/class/bdi/…/read_ahead_kb`; K, M
    /// suffixes): a sequential read is sent to the daemon in requests of up to 1 MiB instead of
    /// the 128 KiB every FUSE mount starts with (`cat` of a 1.36 GB file: 1.18 s instead of 1.55).
    /// Setting it needs root; other users' mounts keep the kernel's. `0`: leave it as it is.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = crate::cache::parse_size)]
    read_ahead: u64,
    /// How requests travel between the kernel and the daemon: `dev` (reading and writing
    /// /dev/fuse), `uring` (FUSE over io_uring, Linux 6.14+ with the fuse module's `enable_uring`
    /// parameter on: /sys/module/fuse/parameters/enable_uring; an error where it is off), `auto`
    /// (io_uring where the kernel offers it, /dev/fuse otherwise).
    #[arg(long, value_name = "HOW", default_value = "dev", value_parser = ["auto", "uring", "dev"])]
    transport: String,
}

/// Arguments of `sealfs umount`.
#[derive(Args)]
pub struct UmountArgs {
    /// Where a sealfs image is mounted (or was: what a --kernel mount left behind is removed).
    mountpoint: PathBuf,
    /// Detach now, finish when the last file is closed (`umount -l`).
    #[arg(short = 'l', long)]
    lazy: bool,
}

/// Arguments of `sealfs stats`.
#[derive(Args)]
pub struct StatsArgs {
    /// Where a sealfs image is mounted (any path inside it works too).
    path: PathBuf,
    /// Print the JSON object as the daemon returns it.
    #[arg(long)]
    json: bool,
}

/// A prefetch list from a file (`-`: stdin), as [`sealfs_reader::prefetch::parse_prefetch_list`]
/// reads it.
pub fn read_prefetch_list(path: &Path) -> Result<Vec<String>> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(
            std::io::stdin().take(1 + sealfs_reader::prefetch::MAX_LIST_BYTES as u64),
        )
        .context("reading stdin")?
    } else {
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| {
                f.take(1 + sealfs_reader::prefetch::MAX_LIST_BYTES as u64)
                    .read_to_string(&mut text)
            })
            .with_context(|| sealfs_text::escape_path(path))?;
        text
    };
    sealfs_reader::prefetch::parse_prefetch_list(&text)
        .map_err(|e| anyhow!("{}: {e}", sealfs_text::escape_path(path)))
}

/// The `--log` file, opened for appending (before the daemon forks and leaves the working
/// directory a relative path names it in).
fn open_log(path: &Path) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("--log {}", sealfs_text::escape_path(path)))
}

/// The mount options of `-o`, `--threads`, `--read-ahead`, the source named after the image.
fn mount_options(args: &MountArgs) -> Result<MountOptions> {
    let mut options = MountOptions {
        fsname: Some(fmount::source_name(&args.image.image)),
        threads: args.threads,
        read_ahead: args.read_ahead,
        transport: args
            .transport
            .parse()
            .map_err(|e: String| anyhow!("--transport: {e}"))?,
        ..MountOptions::default()
    };
    if options.transport == fmount::Transport::Uring && !fmount::uring_available() {
        bail!(
            "--transport=uring: the kernel does not offer FUSE over io_uring (it needs Linux 6.14+ \
             and /sys/module/fuse/parameters/enable_uring set to Y)"
        );
    }
    for list in &args.options {
        options.add_options(list)?;
    }
    if args.threads == Some(0) {
        bail!("--threads must be at least 1");
    }
    Ok(options)
}

/// Runs `sealfs mount`.
pub fn run_mount(mut args: MountArgs) -> Result<ExitCode> {
    if let Some(how) = &args.kernel {
        if args.foreground
            || !args.options.is_empty()
            || args.threads.is_some()
            || args.log.is_some()
            || args.transport != "dev"
        {
            bail!("--foreground, -o, --threads and --log are for FUSE mounts, not --kernel");
        }
        let on_corruption = match &args.on_corruption {
            Some(s) => s
                .parse()
                .map_err(|e: String| anyhow!("--on-corruption: {e}"))?,
            None => Default::default(),
        };
        return crate::kernel::mount(&args.image, &args.mountpoint, how, on_corruption);
    }
    // The daemon changes to `/` after the fork: every path it uses later is opened or made
    // absolute here, once (the library's own, the cache directory and the certificate
    // authorities of a remote image, are resolved by the types that keep them).
    let log_file = args.log.as_deref().map(open_log).transpose()?;
    args.image
        .block_cache
        .get_or_insert(fmount::MOUNT_BLOCK_CACHE);
    args.image
        .cluster_cache
        .get_or_insert_with(fmount::mount_cluster_cache);
    // Streaming reads take no room in the cluster cache (the kernel's page cache keeps them).
    args.image.drop_passed_extents = true;
    // Background threads start in the daemon, after the fork.
    args.image.defer_readahead = true;
    let opened = args.image.open_any()?;
    fmount::check_mountpoint(&args.mountpoint)?;
    let options = mount_options(&args)?;
    if matches!(&opened.file_digests, Some(d) if d.origin() == sealfs_reader::DigestOrigin::Trailer)
    {
        eprintln!(
            "sealfs: warning: {}: the per-file digests --verify=double checks files against come from the seal's trailer, which no digest or signature covers (a seal written before they moved into the image): a forged one can make a file fail, not return other bytes",
            sealfs_text::escape_path(&args.image.image)
        );
    }
    let mut image = MountImage::new(opened);
    if let Some(p) = &args.profile {
        let Some(d) = image.digest() else {
            bail!("--profile: the image is not sealed (nothing to warm)");
        };
        let text = std::fs::read_to_string(p).with_context(|| sealfs_text::escape_path(p))?;
        image.replay = sealfs_reader::profile::parse_profile(&text, d)
            .map_err(|e| anyhow!("--profile {}: {e}", sealfs_text::escape_path(p)))?;
    }
    if let Some(p) = &args.prefetch {
        image.prefetch = read_prefetch_list(p).context("--prefetch")?;
    }
    if let Some(p) = &args.record_profile {
        image.record_profile(p).map_err(|e| match e {
            MountError::Unrecordable => anyhow!("--record-profile {e}"),
            e => anyhow::Error::new(e).context("--record-profile"),
        })?;
    }
    // A remote image's metadata is fetched in batches in the background (into the persistent
    // cache), so that a cold `ls -lR` or `find` does not wait a round trip per directory.
    image.warm = args.image.is_remote() && !args.image.no_cache;
    image.fill = args.fill.parse().map_err(|e| anyhow!("--fill: {e}"))?;
    if image.fill == sealfs_reader::FillMode::On && !image.warm {
        bail!("--fill: only a remote image read through the cache is filled (not with --no-cache)");
    }
    if args.prefetch.is_some() && !image.warm {
        bail!("--prefetch: only a remote image read through the cache fetches ahead (not with --no-cache)");
    }
    image.xattrs = match args.xattrs.as_str() {
        "on" => XattrMode::On,
        "off" => XattrMode::Off,
        // Not where reading every inode costs requests of its own (a remote image without the
        // cache; with it, the check follows the metadata fetched ahead), or would go into a
        // recorded profile.
        _ if (args.image.is_remote() && args.image.no_cache) || image.records_profile() => {
            XattrMode::On
        }
        _ => XattrMode::Auto,
    };

    if args.foreground {
        let log = log_file.map_or(LogTo::Stderr, LogTo::File);
        return match fmount::serve(image, &args.mountpoint, &options, log) {
            Ok(()) => Ok(ExitCode::SUCCESS),
            // The mount served; only its profile is missing.
            Err(e @ MountError::Profile { .. }) => {
                eprintln!("sealfs: {}", sealfs_reader::ErrorChain(&e));
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => Err(e.into()),
        };
    }
    fmount::daemonize(image, &args.mountpoint, &options, log_file)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `sealfs umount`.
pub fn run_umount(args: UmountArgs) -> Result<ExitCode> {
    let mp = fmount::absolute_mountpoint(&args.mountpoint)?;
    let mounted = sealfs_kernel::sysfs::mount_at(&mp).context("reading /proc/self/mountinfo")?;
    match mounted.map(|m| m.fstype) {
        Some(t) if t == "fuse.sealfs" => {
            fmount::unmount(&mp, args.lazy)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(t) if t.starts_with("fuse") => {
            bail!("{}: a {t} mount, not sealfs", sealfs_text::escape_path(&mp))
        }
        // A kernel mount, or what one left behind.
        _ => crate::kernel::umount(&mp, args.lazy),
    }
}

/// Runs `sealfs stats`.
pub fn run_stats(args: StatsArgs) -> Result<ExitCode> {
    let v = fmount::query_stats(&args.path)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_flat(&mut out, "", &v)?;
    Ok(ExitCode::SUCCESS)
}

fn print_flat(out: &mut dyn Write, prefix: &str, v: &serde_json::Value) -> std::io::Result<()> {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                print_flat(out, &key, v)?;
            }
            Ok(())
        }
        serde_json::Value::String(s) => writeln!(out, "{prefix}: {s}"),
        other => writeln!(out, "{prefix}: {other}"),
    }
}
