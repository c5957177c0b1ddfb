//! The daemon form of a mount: served in this thread until unmounted or signalled ([`serve`]),
//! optionally in a forked daemon that reports to its parent whether the mount is up
//! ([`daemonize`]).

#![allow(
    unsafe_code,
    reason = "pipe2, fork and setsid have no safe binding in std"
)]

use super::image::MountImage;
use super::sys::{block_signals, detach_stdio, set_read_ahead, unmount_on_signals, LogTo};
use super::{check_mountpoint, MountError, MountOptions};
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

/// Mounts `image` read-only on `mountpoint` and serves it in this thread until the file system is
/// unmounted, or the process gets `SIGINT`, `SIGTERM` or `SIGHUP`, which unmount it lazily
/// (processes still holding files keep them; serving ends when the last is closed). The
/// termination signals are blocked in this thread and the ones it starts, and taken by a thread
/// of their own. Then writes the recorded profile, if any ([`MountError::Profile`] when that
/// alone fails). Failed reads are logged to `log`.
pub fn serve(
    image: MountImage,
    mountpoint: &Path,
    options: &MountOptions,
    log: LogTo,
) -> Result<(), MountError> {
    let mountpoint = check_mountpoint(mountpoint)?;
    serve_checked(image, &mountpoint, options, log, None)
}

/// [`serve`] on a checked, canonical mount point; with `status` (a daemon), reports to the parent
/// through it whether the mount is up and then detaches stdio.
fn serve_checked(
    image: MountImage,
    mountpoint: &Path,
    options: &MountOptions,
    log: LogTo,
    status: Option<OwnedFd>,
) -> Result<(), MountError> {
    let config = options.fuse_config();
    let (mut fs, profile) = image.into_fs(log.into_logger(), true);
    fs.set_ring_counter(config.uring.as_ref().map(|u| u.requests.clone()));
    let sigset = block_signals();
    let session = match fuser::Session::new(fs, mountpoint, &config) {
        Ok(s) => s,
        Err(source) => {
            let e = MountError::Mount {
                path: mountpoint.to_path_buf(),
                source,
            };
            if let Some(wr) = status {
                let mut f = std::fs::File::from(wr);
                let _ = f.write_all(format!("1{}", sealfs_reader::ErrorChain(&e)).as_bytes());
            }
            return Err(e);
        }
    };
    if options.read_ahead > 0 {
        // Best effort: only root may write it, and the mount works without.
        let _ = set_read_ahead(mountpoint, options.read_ahead);
    }
    if let Some(wr) = status {
        let mut f = std::fs::File::from(wr);
        let _ = f.write_all(b"0");
        drop(f);
        detach_stdio();
    }
    unmount_on_signals(sigset, mountpoint)?;
    let served = session.run().map_err(|source| MountError::Serve {
        path: mountpoint.to_path_buf(),
        source,
    });
    let written = profile.write();
    served.and(written)
}

/// Starts a daemon that mounts `image` on `mountpoint` and serves it as [`serve`] does, and
/// returns once the mount is up (`Ok`), or with the reason it is not
/// ([`MountError::DaemonFailed`] carries the daemon's message). In the daemon (a child of this
/// process, in a session of its own, its working directory `/`, stdio on `/dev/null` once
/// mounted) this never returns: it exits 0 when the mount has ended, 2 if serving failed.
/// `log`: failed reads go there, else to syslog.
///
/// Call it while the process has one thread (the child of a `fork` has only the calling thread,
/// and a lock another held would never be released): open the image with its readahead
/// deferred; the image's background threads start in the daemon. Every path the daemon uses
/// later must be absolute (a relative one would name something under `/`).
pub fn daemonize(
    image: MountImage,
    mountpoint: &Path,
    options: &MountOptions,
    log: Option<std::fs::File>,
) -> Result<(), MountError> {
    let mountpoint = check_mountpoint(mountpoint)?;
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(MountError::Daemon {
            what: "pipe",
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: pipe2 returned two new descriptors we own.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the caller promises the process is single-threaded here, so the child may go on
    // running Rust code.
    match unsafe { libc::fork() } {
        -1 => Err(MountError::Daemon {
            what: "fork",
            source: std::io::Error::last_os_error(),
        }),
        0 => {
            drop(rd);
            // SAFETY: a plain syscall in the new child.
            unsafe {
                libc::setsid();
            }
            let _ = std::env::set_current_dir("/");
            let log = log.map_or(LogTo::Syslog, LogTo::File);
            match serve_checked(image, &mountpoint, options, log, Some(wr)) {
                Ok(()) => std::process::exit(0),
                Err(MountError::Profile { .. }) => std::process::exit(0),
                Err(_) => std::process::exit(2),
            }
        }
        _child => {
            drop(wr);
            let mut msg = Vec::new();
            let mut file = std::fs::File::from(rd);
            let _ = file.read_to_end(&mut msg);
            match msg.split_first() {
                Some((b'0', _)) => Ok(()),
                Some((_, text)) => Err(MountError::DaemonFailed(
                    String::from_utf8_lossy(text).into_owned(),
                )),
                None => Err(MountError::DaemonGone),
            }
        }
    }
}
