//! `sealfs mount`, `sealfs umount` and `sealfs stats`: serve an image over FUSE
//! ([`sealfs_fuse::SealFs`]), take it down, and read its counters while it runs.
//!
//! `mount` opens and checks the image first (a wrong `--digest`, a damaged seal or a missing file
//! fail here, before anything is mounted), then mounts; by default it then detaches: the parent
//! waits until the mount is up (or has failed, printing why) and exits, the daemon serves until the
//! file system is unmounted or it gets SIGINT, SIGTERM or SIGHUP, which unmount it (lazily, as
//! libfuse does: processes still holding files keep them).

#![allow(
    unsafe_code,
    reason = "daemonizing (fork, sigwait, syslog) and the statistics ioctl have no safe binding"
)]

use crate::open::ImageArgs;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use sealfs_fuse::{FileCheck, Logger, SealFs, XattrMode, STATS_IOCTL, STATS_IOCTL_SIZE};
use sealfs_reader::{Authority, Checker, FileDigests, Trust};
use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Blocks the block cache of a mount keeps by default (16 MiB with 4 KiB blocks).
const MOUNT_BLOCK_CACHE: usize = 4096;

/// The decompressed clusters a mount keeps by default: a sixteenth of the machine's memory, from
/// 64 MiB to 1 GiB. Random reads of small files packed into large clusters decompress a whole
/// cluster for each file whose cluster the cache no longer holds: 2,000 random files of `linux`
/// built with `--preset small` (1 MiB clusters of fragments) took 14.6 s with 64 MiB, 5.9 s with
/// 512 MiB and 3.0 s with 1 GiB (the kernel's mount: 2.6 s, its page cache keeping what it
/// decompressed). Streaming reads take no room ([`crate::open::ImageArgs::drop_passed_extents`]).
fn mount_cluster_cache() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let total = usize::try_from(pages).unwrap_or(0) * usize::try_from(page).unwrap_or(0);
    (total / 16).clamp(sealfs_reader::DEFAULT_CLUSTER_CACHE_BYTES, 1 << 30)
}

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
    /// A remote image read through the persistent cache: whether the rest of it is fetched into
    /// the cache in the background, in order, behind every read and its readahead (so that every
    /// file soon reads without a round trip, and then offline). `auto`: once reads scatter (16
    /// reads within 10 s that each had to fetch data and continued no sequential stream), if the
    /// image takes at most three quarters of the cache's bound (--cache-size); `on` (`--fill`
    /// alone): once its metadata is fetched; `off`: never, each block is fetched when first read.
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

/// The FUSE options a mount passes, from `-o` and the fixed ones.
fn fuse_config(args: &MountArgs, fsname: String) -> Result<fuser::Config> {
    use fuser::MountOption as M;
    let mut config = fuser::Config::default();
    let mut fsname = Some(fsname);
    let mut options = vec![
        M::RO,
        M::DefaultPermissions,
        M::CUSTOM("subtype=sealfs".into()),
    ];
    for opt in args.options.iter().flat_map(|o| o.split(',')) {
        match opt {
            "" | "ro" | "default_permissions" => {}
            "allow_other" => config.acl = fuser::SessionACL::All,
            "allow_root" => config.acl = fuser::SessionACL::RootAndOwner,
            "nodev" => options.push(M::NoDev),
            "dev" => options.push(M::Dev),
            "nosuid" => options.push(M::NoSuid),
            "suid" => options.push(M::Suid),
            "noexec" => options.push(M::NoExec),
            "exec" => options.push(M::Exec),
            "noatime" => options.push(M::NoAtime),
            "atime" => options.push(M::Atime),
            "rw" => bail!("-o rw: sealfs images are read-only"),
            o if o.starts_with("fsname=") => fsname = Some(o["fsname=".len()..].to_string()),
            o => bail!("-o {o}: unknown mount option"),
        }
    }
    options.extend(fsname.map(M::FSName));
    config.mount_options = options;
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = args.threads.unwrap_or(cpus.max(2));
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    config.n_threads = Some(threads);
    config.clone_fd = true;
    Ok(config)
}

/// The name a mount shows as its source in /proc/mounts: the image path, unless it has characters
/// the mount option string cannot carry.
fn source_name(image: &Path) -> String {
    let full = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
    match full.to_str() {
        Some(s) if !s.contains([',', ' ', '\t', '\n', '\\']) => s.to_string(),
        _ => "sealfs".to_string(),
    }
}

/// Refuses mount points that are missing, not directories, or a dead FUSE mount.
fn check_mountpoint(mp: &Path) -> Result<()> {
    match std::fs::metadata(mp) {
        Ok(md) if md.is_dir() => Ok(()),
        Ok(_) => bail!("{}: not a directory", sealfs_text::escape_path(mp)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => bail!(
            "{}: a FUSE mount whose daemon is gone (stale); run `sealfs umount {}` first",
            sealfs_text::escape_path(mp),
            sealfs_text::escape_path(mp)
        ),
        Err(e) => Err(anyhow!("{}: {e}", sealfs_text::escape_path(mp))),
    }
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

/// Where log lines go: the `--log` file, else stderr in the foreground, else syslog.
fn logger(log_file: Option<std::fs::File>, foreground: bool) -> sealfs_fuse::Logger {
    if let Some(file) = log_file {
        let file = std::sync::Mutex::new(file);
        return Box::new(move |line: &str| {
            let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
            let _ = writeln!(f, "sealfs: {line}");
        });
    }
    if foreground {
        return Box::new(|line: &str| eprintln!("sealfs: {line}"));
    }
    // SAFETY: the identifier is a static C string, as openlog requires (it keeps the pointer).
    unsafe { libc::openlog(c"sealfs".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
    Box::new(|line: &str| {
        if let Ok(msg) = CString::new(line.replace('\0', "?")) {
            // SAFETY: a constant "%s" format with one NUL-terminated string argument.
            unsafe { libc::syslog(libc::LOG_ERR, c"%s".as_ptr(), msg.as_ptr()) };
        }
    })
}

/// Blocks the termination signals in this thread (and the threads it starts later), so that only
/// the signal thread receives them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Unmounts `mp`: directly as root, through `fusermount3` otherwise. `lazy` detaches at once.
fn unmount(mp: &Path, lazy: bool) -> Result<()> {
    let c = CString::new(mp.as_os_str().as_bytes())?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        bail!("unmounting {}: {err}", sealfs_text::escape_path(mp));
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg(mp)
        .output()
        .context("running fusermount3 (unmounting as a non-root user needs it)")?;
    if !out.status.success() {
        bail!(
            "fusermount3 -u {}: {}",
            sealfs_text::escape_path(mp),
            sealfs_text::escape_prose(out.stderr.trim_ascii())
        );
    }
    Ok(())
}

/// Double verification: a file's content, read through the (verifying) reader, must have the
/// fs-verity digest the seal records for it.
fn file_check(digests: Arc<FileDigests>) -> FileCheck {
    Box::new(move |image, inode| {
        let want = digests
            .get(inode.nid())
            .ok_or("the seal records no digest for this file (double verification)")?;
        let got = image
            .file_digest_by_reading(inode, want.alg())
            .map_err(|e| {
                let e = sealfs_reader::ErrorChain(&e);
                format!("reading it whole to check its digest: {e}")
            })?;
        if &got == want {
            Ok(())
        } else {
            Err(format!(
                "its content has digest {got}, the seal records {want} (double verification)"
            ))
        }
    })
}

/// Runs `sealfs mount`.
pub fn run_mount(mut args: MountArgs) -> Result<ExitCode> {
    if let Some(how) = &args.kernel {
        if args.foreground
            || !args.options.is_empty()
            || args.threads.is_some()
            || args.log.is_some()
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
    let record_profile = args
        .record_profile
        .as_deref()
        .map(|p| {
            std::path::absolute(p)
                .with_context(|| format!("--record-profile {}", sealfs_text::escape_path(p)))
        })
        .transpose()?;
    // A daemon serves many lookups over time: keep the metadata of a large tree verified in memory.
    args.image.block_cache.get_or_insert(MOUNT_BLOCK_CACHE);
    // Decoded clusters: room for what random reads come back to, and none taken by streaming
    // reads (the kernel's page cache keeps what they read).
    args.image
        .cluster_cache
        .get_or_insert_with(mount_cluster_cache);
    args.image.drop_passed_extents = true;
    // Background threads start in the daemon, after the fork (see below).
    args.image.defer_readahead = true;
    let opened = args.image.open_any()?;
    check_mountpoint(&args.mountpoint)?;
    let mountpoint = std::fs::canonicalize(&args.mountpoint)
        .with_context(|| sealfs_text::escape_path(&args.mountpoint))?;
    let config = fuse_config(&args, source_name(&args.image.image))?;
    let trust = match &opened.trust {
        Trust::Authenticated {
            digest,
            authority: Authority::Key { fingerprint },
            ..
        } => format!("{digest} (authenticated: signed by {fingerprint})"),
        Trust::Authenticated { digest, .. } => format!("{digest} (authenticated)"),
        Trust::SelfConsistent { digest, .. } => format!("{digest} (self-consistent)"),
        Trust::Unverified => "none".to_string(),
    };
    let trust = if opened.trust.checker() == Some(Checker::Kernel) {
        format!("{trust}, verified by kernel fs-verity")
    } else {
        trust
    };
    let trust = match &opened.file_digests {
        Some(d) if d.origin() == sealfs_reader::DigestOrigin::Trailer => {
            eprintln!(
                "sealfs: warning: {}: the per-file digests --verify=double checks files against come from the seal's trailer, which no digest or signature covers (a seal written before they moved into the image): a forged one can make a file fail, not return other bytes",
                sealfs_text::escape_path(&args.image.image)
            );
            format!("{trust}, and each file against its recorded digest (double; UNAUTHENTICATED digests)")
        }
        Some(_) => format!("{trust}, and each file against its recorded digest (double)"),
        None => trust,
    };
    let digest = opened.trust.digest().copied();
    let replay = match (&args.profile, &digest) {
        (None, _) => None,
        (Some(p), Some(d)) => {
            let text = std::fs::read_to_string(p).with_context(|| sealfs_text::escape_path(p))?;
            let ranges = sealfs_reader::profile::parse_profile(&text, d)
                .map_err(|e| anyhow!("--profile {}: {e}", sealfs_text::escape_path(p)))?;
            Some(ranges)
        }
        (Some(_), None) => bail!("--profile: the image is not sealed (nothing to warm)"),
    };
    let recorder = match (record_profile, &opened.verified, &digest) {
        (None, ..) => None,
        (Some(path), Some(v), Some(d)) => {
            v.record_profile();
            Some((path, v.clone(), *d))
        }
        (Some(_), ..) => bail!("--record-profile needs a sealed image read with verification"),
    };
    // Writes the profile when the mount has ended.
    let write_profile = move || {
        if let Some((path, v, d)) = &recorder {
            // Written whole or not at all: whoever waits for the file never sees half of it.
            let text = sealfs_reader::profile::encode_profile(d, &v.profile());
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
            let written = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))
                .and_then(|mut f| f.write_all(text.as_bytes()).map(|()| f))
                .and_then(|f| f.persist(path).map_err(|e| e.error));
            if let Err(e) = written {
                eprintln!(
                    "sealfs: writing the profile {}: {e}",
                    sealfs_text::escape_path(path)
                );
            }
        }
    };
    let image = Arc::new(opened.image);
    let verified = opened.verified;
    let file_digests = opened.file_digests;
    // A remote image's metadata is fetched in batches in the background (into the persistent
    // cache), so that a cold `ls -lR` or `find` does not wait a round trip per directory.
    let warm = args.image.is_remote() && !args.image.no_cache;
    let fill: sealfs_reader::FillMode = args.fill.parse().map_err(|e| anyhow!("--fill: {e}"))?;
    if fill == sealfs_reader::FillMode::On && !warm {
        bail!("--fill: only a remote image read through the cache is filled (not with --no-cache)");
    }
    let readahead = verified.clone().filter(|_| warm);
    let xattrs = match args.xattrs.as_str() {
        "on" => XattrMode::On,
        "off" => XattrMode::Off,
        // Not where reading every inode costs requests of its own (a remote image without the
        // cache; with it, the check follows the metadata fetched ahead), or would go into a
        // recorded profile.
        _ if (args.image.is_remote() && args.image.no_cache) || args.record_profile.is_some() => {
            XattrMode::On
        }
        _ => XattrMode::Auto,
    };
    let make_fs = move |log: Logger| {
        // Threads are started here, in the process that serves (the daemon forks after opening,
        // and a thread of the parent could hold a lock the child would wait for forever). They
        // start with the termination signals blocked, as `serve` blocks them for its own: a
        // signal delivered to one of them (the xattr check, the metadata warm-up) would end the
        // daemon without unmounting, where the signal thread unmounts.
        block_signals();
        if let Some(v) = &readahead {
            // `on` waits for the metadata (below); `auto` is armed now.
            v.set_fill(match fill {
                sealfs_reader::FillMode::On => sealfs_reader::FillMode::Off,
                other => other,
            });
            let (min, max) = sealfs_reader::OpenOptions::default().readahead_blocks;
            v.start_readahead(min, max);
        }
        // The metadata fetched ahead; its walk answers (`--xattrs=auto`) the check for xattrs.
        let warm_first = {
            let image = image.clone();
            let fill = readahead
                .clone()
                .filter(|_| fill == sealfs_reader::FillMode::On);
            move || {
                if !warm {
                    return None;
                }
                let any_xattrs = image.warm_metadata(16);
                if let Some(v) = fill {
                    v.set_fill(sealfs_reader::FillMode::On);
                }
                any_xattrs
            }
        };
        if let Some(ranges) = &replay {
            image.prefetch(ranges);
        }
        let fs = if xattrs == XattrMode::Auto {
            SealFs::new(image, verified, trust, log).with_xattrs_after(xattrs, warm_first)
        } else {
            if warm {
                std::thread::spawn(warm_first);
            }
            SealFs::new(image, verified, trust, log).with_xattrs(xattrs)
        };
        match file_digests {
            Some(digests) => fs.with_file_check(file_check(digests)),
            None => fs,
        }
    };

    if args.foreground {
        let fs = make_fs(logger(log_file, true));
        let served = serve(fs, &mountpoint, &config, args.read_ahead, None);
        write_profile();
        return served;
    }

    // Background: the child mounts and reports through a pipe; the parent exits when it knows.
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors we own.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the process is single-threaded here (nothing has started a thread yet), so the child
    // may go on running Rust code.
    match unsafe { libc::fork() } {
        -1 => bail!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            drop(rd);
            // SAFETY: plain syscalls in the new child.
            unsafe {
                libc::setsid();
            }
            let _ = std::env::set_current_dir("/");
            let fs = make_fs(logger(log_file, false));
            let served = serve(fs, &mountpoint, &config, args.read_ahead, Some(wr));
            write_profile();
            match served {
                Ok(_) => std::process::exit(0),
                Err(_) => std::process::exit(2),
            }
        }
        _child => {
            drop(wr);
            let mut msg = Vec::new();
            let mut file = std::fs::File::from(rd);
            let _ = file.read_to_end(&mut msg);
            match msg.split_first() {
                Some((b'0', _)) => Ok(ExitCode::SUCCESS),
                Some((_, text)) => bail!("{}", String::from_utf8_lossy(text)),
                None => bail!("the mount daemon exited before mounting"),
            }
        }
    }
}

/// Sets the kernel's readahead for the file system mounted on `mountpoint` to `bytes` (rounded
/// to KiB). The device is found in `/proc/self/mountinfo`, not by `stat` (which would send a
/// request to this daemon before it serves).
fn set_read_ahead(mountpoint: &Path, bytes: u64) -> std::io::Result<()> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let want = mountpoint.as_os_str().as_encoded_bytes();
    // The last mount on the path is the one on top: ours.
    let dev = info
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let point = unescape_mountinfo(f.get(4)?);
            (point == want).then(|| f.get(2).map(|d| d.to_string()))?
        })
        .next_back()
        .ok_or_else(|| std::io::Error::other("the mount is not in /proc/self/mountinfo"))?;
    std::fs::write(
        format!("/sys/class/bdi/{dev}/read_ahead_kb"),
        format!("{}\n", bytes.div_ceil(1024)),
    )
}

/// A mountinfo field with its octal escapes (`\040` for a space) decoded.
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Writes a failure for the waiting parent ("1" + message).
fn report_to_parent(wr: &OwnedFd, msg: &str) {
    let mut f = std::fs::File::from(wr.try_clone().expect("dup of the status pipe"));
    let _ = f.write_all(format!("1{msg}").as_bytes());
}

/// Mounts and serves until unmounted. With `status` (daemon mode), reports the mount's success or
/// failure through it and then detaches stdio.
fn serve(
    fs: SealFs,
    mountpoint: &Path,
    config: &fuser::Config,
    read_ahead: u64,
    status: Option<OwnedFd>,
) -> Result<ExitCode> {
    let sigset = block_signals();
    let session = match fuser::Session::new(fs, mountpoint, config) {
        Ok(s) => s,
        Err(e) => {
            let msg = format!("mounting on {}: {e}", sealfs_text::escape_path(mountpoint));
            if let Some(wr) = &status {
                report_to_parent(wr, &msg);
            }
            bail!(msg);
        }
    };
    if read_ahead > 0 {
        // Best effort: only root may write it, and the mount works without.
        let _ = set_read_ahead(mountpoint, read_ahead);
    }
    if let Some(wr) = status {
        let mut f = std::fs::File::from(wr);
        let _ = f.write_all(b"0");
        drop(f);
        detach_stdio();
    }
    let mp = mountpoint.to_path_buf();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: sigset was filled by block_signals; sig is a valid out pointer.
            if unsafe { libc::sigwait(&sigset, &mut sig) } == 0 {
                // The loops end when the kernel drops the connection.
                let _ = unmount(&mp, true);
            }
        })
        .context("starting the signal thread")?;
    session
        .run()
        .with_context(|| format!("serving {}", sealfs_text::escape_path(mountpoint)))?;
    Ok(ExitCode::SUCCESS)
}

/// Points stdin, stdout and stderr at /dev/null (a daemon has no terminal).
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// The mount point, absolute, even when it is a dead FUSE mount (which cannot be canonicalized).
fn absolute_mountpoint(mp: &Path) -> Result<PathBuf> {
    if let Ok(p) = std::fs::canonicalize(mp) {
        return Ok(p);
    }
    let name = mp
        .file_name()
        .ok_or_else(|| anyhow!("{}: not a mount point", sealfs_text::escape_path(mp)))?;
    let parent = match mp.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok(std::fs::canonicalize(parent)
        .with_context(|| sealfs_text::escape_path(mp))?
        .join(name))
}

/// Runs `sealfs umount`.
pub fn run_umount(args: UmountArgs) -> Result<ExitCode> {
    let mp = absolute_mountpoint(&args.mountpoint)?;
    let mounted = sealfs_kernel::sysfs::mount_at(&mp).context("reading /proc/self/mountinfo")?;
    match mounted.map(|m| m.fstype) {
        Some(t) if t == "fuse.sealfs" => {
            unmount(&mp, args.lazy)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(t) if t.starts_with("fuse") => {
            bail!("{}: a {t} mount, not sealfs", sealfs_text::escape_path(&mp))
        }
        // A kernel mount, or what one left behind.
        _ => crate::kernel::umount(&mp, args.lazy),
    }
}

/// Asks the daemon serving `path` for its statistics.
pub fn query_stats(path: &Path) -> Result<serde_json::Value> {
    let file = std::fs::File::open(path).with_context(|| sealfs_text::escape_path(path))?;
    let mut buf = vec![0u8; STATS_IOCTL_SIZE];
    // SAFETY: the buffer holds the STATS_IOCTL_SIZE bytes the ioctl number encodes.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), STATS_IOCTL as _, buf.as_mut_ptr()) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        bail!(
            "{}: not on a sealfs mount (statistics ioctl: {e})",
            sealfs_text::escape_path(path)
        );
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    serde_json::from_slice(&buf[..len]).context("decoding the daemon's statistics")
}

/// Runs `sealfs stats`.
pub fn run_stats(args: StatsArgs) -> Result<ExitCode> {
    let v = query_stats(&args.path)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn os_str_names_pass_through() {
        let p = Path::new(OsStr::from_bytes(b"/tmp/\xff"));
        assert_eq!(source_name(p), "sealfs");
    }
}
