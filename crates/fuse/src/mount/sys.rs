//! The system calls around a mount: unmounting, the kernel's readahead through sysfs, the
//! statistics ioctl, mount points (stale ones too), signals and a daemon's stdio and syslog.

#![allow(
    unsafe_code,
    reason = "umount2, sigwait, syslog, dup2 and the statistics ioctl have no safe binding"
)]

use super::MountError;
use crate::{Logger, STATS_IOCTL, STATS_IOCTL_SIZE};
use std::ffi::CString;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Checks that `mountpoint` is a directory one can mount on and returns it canonical. A dead FUSE
/// mount (its daemon gone: stale) is refused with [`MountError::Stale`], which says to unmount
/// it first.
pub fn check_mountpoint(mountpoint: &Path) -> Result<PathBuf, MountError> {
    let path = mountpoint.to_path_buf();
    match std::fs::metadata(mountpoint) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => return Err(MountError::NotADirectory(path)),
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => {
            return Err(MountError::Stale(path))
        }
        Err(source) => return Err(MountError::Mountpoint { path, source }),
    }
    std::fs::canonicalize(mountpoint).map_err(|source| MountError::Mountpoint { path, source })
}

/// The mount point, absolute, even when it is a dead FUSE mount (which cannot be canonicalized):
/// its parent canonical, joined with its name.
pub fn absolute_mountpoint(mountpoint: &Path) -> Result<PathBuf, MountError> {
    if let Ok(p) = std::fs::canonicalize(mountpoint) {
        return Ok(p);
    }
    let name = mountpoint
        .file_name()
        .ok_or_else(|| MountError::NotAMountPoint(mountpoint.to_path_buf()))?;
    let parent = match mountpoint.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok(std::fs::canonicalize(parent)
        .map_err(|source| MountError::Mountpoint {
            path: mountpoint.to_path_buf(),
            source,
        })?
        .join(name))
}

/// Unmounts the FUSE mount on `mountpoint`: directly as root, through `fusermount3` otherwise.
/// `lazy` detaches it at once and lets it end when the last file is closed (`umount -l`); without
/// it, a mount with files open fails (`EBUSY`). A stale mount (its daemon gone) unmounts too.
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<(), MountError> {
    let path = mountpoint.to_path_buf();
    let c = CString::new(mountpoint.as_os_str().as_bytes()).map_err(|_| MountError::Unmount {
        path: path.clone(),
        source: std::io::Error::from_raw_os_error(libc::EINVAL),
    })?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(MountError::Unmount { path, source: err });
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd
        .arg(mountpoint)
        .output()
        .map_err(MountError::NoFusermount)?;
    if !out.status.success() {
        return Err(MountError::Fusermount {
            path,
            message: sealfs_text::escape_prose(out.stderr.trim_ascii()),
        });
    }
    Ok(())
}

/// Asks the daemon serving `path` (a mount point or any path inside a mount) for its statistics
/// ([`STATS_IOCTL`]): the JSON object `sealfs stats` prints.
pub fn query_stats(path: &Path) -> Result<serde_json::Value, MountError> {
    let file = std::fs::File::open(path).map_err(|source| MountError::Mountpoint {
        path: path.to_path_buf(),
        source,
    })?;
    let mut buf = vec![0u8; STATS_IOCTL_SIZE];
    // SAFETY: the buffer holds the STATS_IOCTL_SIZE bytes the ioctl number encodes.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), STATS_IOCTL as _, buf.as_mut_ptr()) };
    if r < 0 {
        return Err(MountError::NotSealfs {
            path: path.to_path_buf(),
            source: std::io::Error::last_os_error(),
        });
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    serde_json::from_slice(&buf[..len]).map_err(MountError::Stats)
}

/// Sets the kernel's readahead for the file system mounted on `mountpoint` to `bytes` (rounded
/// to KiB). The device is found in `/proc/self/mountinfo`, not by `stat` (which would send a
/// request to this daemon before it serves).
pub(crate) fn set_read_ahead(mountpoint: &Path, bytes: u64) -> std::io::Result<()> {
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

/// Blocks the termination signals in this thread (and the threads it starts later), so that only
/// the signal thread receives them.
pub(crate) fn block_signals() -> libc::sigset_t {
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

/// Starts the thread that unmounts `mountpoint` lazily on each of the signals of `set` (blocked
/// by [`block_signals`]); the serving loops end when the kernel drops the connection.
pub(crate) fn unmount_on_signals(set: libc::sigset_t, mountpoint: &Path) -> Result<(), MountError> {
    let mp = mountpoint.to_path_buf();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            let mut sig = 0;
            // SAFETY: set was filled by block_signals; sig is a valid out pointer.
            if unsafe { libc::sigwait(&set, &mut sig) } == 0 {
                let _ = unmount(&mp, true);
            }
        })
        .map(drop)
        .map_err(|source| MountError::Daemon {
            what: "starting the signal thread",
            source,
        })
}

/// Points stdin, stdout and stderr at /dev/null (a daemon has no terminal).
pub(crate) fn detach_stdio() {
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

/// Where the log lines of a mount go (failed reads, once each).
pub enum LogTo {
    /// Appended to this file, each line prefixed `sealfs: `.
    File(std::fs::File),
    /// Standard error, each line prefixed `sealfs: `.
    Stderr,
    /// The system log (`LOG_DAEMON`, identifier `sealfs`, level `LOG_ERR`).
    Syslog,
    /// To this function.
    Custom(Logger),
}

impl LogTo {
    /// Log lines appended to the file at `path` (created if missing), as `sealfs mount --log`
    /// writes them.
    pub fn append(path: &Path) -> std::io::Result<LogTo> {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(LogTo::File)
    }

    /// The logger itself (for syslog: opened now, in the process that serves).
    pub(crate) fn into_logger(self) -> Logger {
        match self {
            LogTo::File(file) => {
                let file = std::sync::Mutex::new(file);
                Box::new(move |line: &str| {
                    let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
                    let _ = writeln!(f, "sealfs: {line}");
                })
            }
            LogTo::Stderr => Box::new(|line: &str| eprintln!("sealfs: {line}")),
            LogTo::Syslog => {
                // SAFETY: the identifier is a static C string, as openlog requires (it keeps the
                // pointer).
                unsafe { libc::openlog(c"sealfs".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
                Box::new(|line: &str| {
                    if let Ok(msg) = CString::new(line.replace('\0', "?")) {
                        // SAFETY: a constant "%s" format with one NUL-terminated string argument.
                        unsafe { libc::syslog(libc::LOG_ERR, c"%s".as_ptr(), msg.as_ptr()) };
                    }
                })
            }
            LogTo::Custom(log) => log,
        }
    }
}

/// The memory-dependent default of a mount's cache of decompressed clusters: a sixteenth of the
/// machine's memory, from 64 MiB to 1 GiB. Random reads of small files packed into large
/// clusters decompress a whole cluster for each file whose cluster the cache no longer holds:
/// 2,000 random files of `linux` built with `--preset small` (1 MiB clusters of fragments) took
/// 14.6 s with 64 MiB, 5.9 s with 512 MiB and 3.0 s with 1 GiB (the kernel's mount: 2.6 s, its
/// page cache keeping what it decompressed).
pub fn mount_cluster_cache() -> usize {
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
