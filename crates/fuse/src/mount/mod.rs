//! Mounting an image over FUSE: one API for `sealfs mount`, the containerd snapshotter and the
//! bindings.
//!
//! An image is opened and verified first ([`sealfs_reader::open()`]; [`MOUNT_BLOCK_CACHE`] and
//! [`mount_cluster_cache`] are the cache sizes a mount wants), then wrapped in a [`MountImage`]
//! (what its mount does besides answering requests) and mounted read-only with
//! [`MountOptions`] (access, flags, threads, readahead), in one of three ways:
//!
//! - [`mount`]: **in-process**. The session is served by background threads owned by the
//!   returned [`MountHandle`]; [`MountHandle::unmount`], or dropping it, unmounts and joins them.
//!   The process's signals are left alone. This is what a long-running service (the snapshotter)
//!   uses.
//! - [`serve`]: in this thread, until the file system is unmounted (`sealfs umount`, `umount`,
//!   `fusermount3 -u`) or the process gets `SIGINT`, `SIGTERM` or `SIGHUP`, which unmount it
//!   lazily, as libfuse does (processes still holding files keep them). `sealfs mount
//!   --foreground`.
//! - [`daemonize`]: forks a daemon that does what [`serve`] does with its stdio detached; the
//!   caller returns once the mount is up, or with the daemon's reason it is not. `sealfs mount`.
//!
//! Around them: [`unmount`] (of any sealfs FUSE mount, stale ones too), [`query_stats`] (a
//! mount's counters through [`crate::STATS_IOCTL`], what `sealfs stats` prints),
//! [`check_mountpoint`] (which refuses a stale mount point, saying how to clear it) and
//! [`absolute_mountpoint`].
//!
//! ```no_run
//! use sealfs_fuse::mount::{self, Access, LogTo, MountImage, MountOptions};
//! use sealfs_reader::{open, OpenOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let options = OpenOptions {
//!     digest: Some("sha256:3f1c...".parse()?),
//!     cache_blocks: mount::MOUNT_BLOCK_CACHE,
//!     cluster_cache_bytes: mount::mount_cluster_cache(),
//!     keep_passed_extents: false,
//!     ..OpenOptions::default()
//! };
//! let image = MountImage::new(open("layer.img", &options)?);
//! // An overlayfs lower directory that containers' users read: allow_other.
//! let mount_options = MountOptions { access: Access::All, ..MountOptions::default() };
//! let handle = mount::mount(image, "/run/layers/1".as_ref(), &mount_options, LogTo::Syslog)?;
//! println!("{}", handle.stats()?["trust"]);
//! handle.unmount()?; // or drop it
//! # Ok(())
//! # }
//! ```
//!
//! Every read through any of these is verified as the image was opened to verify; a block that
//! fails its check fails (`EIO`) the read of that file only, and is logged once ([`LogTo`]).

mod daemon;
mod image;
mod options;
mod sys;

pub use daemon::{daemonize, serve};
pub use image::{trust_description, MountImage, PrefetchOrder, MOUNT_BLOCK_CACHE};
pub use options::{
    source_name, uring_available, Access, MountFlag, MountOptions, Transport, DEFAULT_READ_AHEAD,
};
pub use sys::{
    absolute_mountpoint, check_mountpoint, mount_cluster_cache, query_stats, unmount, LogTo,
};

use std::path::{Path, PathBuf};

/// Why a mount, unmount or statistics query failed. Paths are shown escaped
/// ([`sealfs_text::escape_path`]); a system error is the `source`, not in the message: print one
/// with [`sealfs_reader::ErrorChain`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// `-o rw`.
    #[error("-o rw: sealfs images are read-only")]
    ReadWrite,
    /// An option [`MountOptions::add_options`] does not know.
    #[error("-o {0}: unknown mount option")]
    UnknownOption(String),
    /// The mount point is not a directory.
    #[error("{}: not a directory", sealfs_text::escape_path(.0))]
    NotADirectory(PathBuf),
    /// The mount point is a FUSE mount whose daemon is gone.
    #[error(
        "{}: a FUSE mount whose daemon is gone (stale); run `sealfs umount {}` first",
        sealfs_text::escape_path(.0),
        sealfs_text::escape_path(.0)
    )]
    Stale(PathBuf),
    /// The path cannot be a mount point (it has no name).
    #[error("{}: not a mount point", sealfs_text::escape_path(.0))]
    NotAMountPoint(PathBuf),
    /// The mount point (or a path given for statistics) cannot be read.
    #[error("{}", sealfs_text::escape_path(path))]
    Mountpoint {
        /// The path.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The kernel (or `fusermount3`) refused the mount.
    #[error("mounting on {}", sealfs_text::escape_path(path))]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Serving the mount failed (reading requests from the kernel).
    #[error("serving {}", sealfs_text::escape_path(path))]
    Serve {
        /// The mount point.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Unmounting failed (`EBUSY`: files are open on it; `EINVAL`: not a mount point).
    #[error("unmounting {}", sealfs_text::escape_path(path))]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Unmounting as a user other than root needs `fusermount3`, which could not be run.
    #[error("running fusermount3 (unmounting as a non-root user needs it): {0}")]
    NoFusermount(std::io::Error),
    /// `fusermount3 -u` failed.
    #[error("fusermount3 -u {}: {message}", sealfs_text::escape_path(path))]
    Fusermount {
        /// The mount point.
        path: PathBuf,
        /// What it printed (escaped).
        message: String,
    },
    /// The path is not on a sealfs mount (the statistics ioctl failed).
    #[error(
        "{}: not on a sealfs mount (statistics ioctl)",
        sealfs_text::escape_path(path)
    )]
    NotSealfs {
        /// The path.
        path: PathBuf,
        /// What the ioctl returned.
        source: std::io::Error,
    },
    /// The daemon's statistics are not JSON.
    #[error("decoding the daemon's statistics: {0}")]
    Stats(serde_json::Error),
    /// A profile can only be recorded from a sealed image read with verification.
    #[error("needs a sealed image read with verification")]
    Unrecordable,
    /// The access profile could not be written (or its path made absolute).
    #[error("writing the profile {}", sealfs_text::escape_path(path))]
    Profile {
        /// Where it was to go.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Starting the daemon failed (`pipe`, `fork`, a thread).
    #[error("{what}")]
    Daemon {
        /// What was being done.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
    /// The daemon reported that mounting failed (its message).
    #[error("{0}")]
    DaemonFailed(String),
    /// The daemon exited without reporting.
    #[error("the mount daemon exited before mounting")]
    DaemonGone,
}

impl MountError {
    /// The `errno` that tells a C or Python caller what failed: the system's when there is one
    /// (`EPERM`, `EBUSY`, `ENODEV`, ...), `EINVAL` for a refused option or a path that cannot be a
    /// mount point, `ENOTDIR`, `ENOTCONN` for a stale mount, `EIO` otherwise.
    pub fn errno(&self) -> i32 {
        match self {
            MountError::ReadWrite
            | MountError::UnknownOption(_)
            | MountError::NotAMountPoint(_) => libc::EINVAL,
            MountError::NotADirectory(_) => libc::ENOTDIR,
            MountError::Stale(_) => libc::ENOTCONN,
            MountError::Mountpoint { source, .. }
            | MountError::Mount { source, .. }
            | MountError::Serve { source, .. }
            | MountError::Unmount { source, .. }
            | MountError::NotSealfs { source, .. }
            | MountError::Profile { source, .. }
            | MountError::Daemon { source, .. }
            | MountError::NoFusermount(source) => source.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EIO,
        }
    }
}

/// `options` (how an image was opened to be read) as a mount opens it: caches sized as `sealfs
/// mount` sizes them ([`MOUNT_BLOCK_CACHE`], [`mount_cluster_cache`]; never smaller than
/// `options` asked), no cluster cache for streaming reads (the kernel's page cache keeps them),
/// the default readahead. What the bindings open an image again with to mount it.
pub fn mount_open_options(options: &sealfs_reader::OpenOptions) -> sealfs_reader::OpenOptions {
    sealfs_reader::OpenOptions {
        cache_blocks: options.cache_blocks.max(MOUNT_BLOCK_CACHE),
        cluster_cache_bytes: options.cluster_cache_bytes.max(mount_cluster_cache()),
        keep_passed_extents: false,
        readahead_blocks: sealfs_reader::OpenOptions::default().readahead_blocks,
        ..options.clone()
    }
}

/// An image mounted in this process by [`mount`]: its FUSE session is served by background
/// threads it owns. [`MountHandle::unmount`] or dropping it unmounts the file system and joins
/// them; while files are open on the mount, that waits until the last is closed (the mount is
/// detached at once, so nothing new reaches it). A service that must not wait unmounts lazily
/// itself first ([`unmount`] with `lazy`) and keeps the handle until [`MountHandle::has_ended`].
pub struct MountHandle {
    mountpoint: PathBuf,
    session: Option<fuser::BackgroundSession>,
    profile: Option<image::ProfileWriter>,
}

/// Mounts `image` read-only on `mountpoint` (which [`check_mountpoint`] checks) and serves it from
/// background threads of this process until the returned handle is unmounted or dropped. The
/// image's own background threads (an xattr check, a remote image's metadata and fill) start
/// now. The kernel's readahead is set as [`MountOptions::read_ahead`] says; signals are left
/// alone. Failed reads are logged to `log`.
pub fn mount(
    image: MountImage,
    mountpoint: &Path,
    options: &MountOptions,
    log: LogTo,
) -> Result<MountHandle, MountError> {
    let mountpoint = check_mountpoint(mountpoint)?;
    let config = options.fuse_config();
    let (mut fs, profile) = image.into_fs(log.into_logger(), false);
    fs.set_ring_counter(config.uring.as_ref().map(|u| u.requests.clone()));
    let session =
        fuser::Session::new(fs, &mountpoint, &config).map_err(|source| MountError::Mount {
            path: mountpoint.clone(),
            source,
        })?;
    if options.read_ahead > 0 {
        // Best effort: only root may write it, and the mount works without.
        let _ = sys::set_read_ahead(&mountpoint, options.read_ahead);
    }
    let session = session.spawn().map_err(|source| MountError::Daemon {
        what: "starting the session thread",
        source,
    })?;
    Ok(MountHandle {
        mountpoint,
        session: Some(session),
        profile: Some(profile),
    })
}

impl MountHandle {
    /// Where the image is mounted (canonical).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the serving threads have ended: the mount was taken down (from outside, or
    /// detached lazily and its last file closed), so [`MountHandle::unmount`] returns at once.
    pub fn has_ended(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// The mount's counters, as `sealfs stats --json` prints them ([`query_stats`]).
    pub fn stats(&self) -> Result<serde_json::Value, MountError> {
        query_stats(&self.mountpoint)
    }

    /// Unmounts the file system and joins the threads that served it, then writes the recorded
    /// profile, if any. When files are still open on the mount (`EBUSY`), it is detached lazily
    /// instead (new lookups no longer reach it) and this waits until the last of them is closed.
    pub fn unmount(mut self) -> Result<(), MountError> {
        self.finish()
    }

    /// Takes the mount down without waiting, for a caller that lets go of it while a thread of
    /// its own process may still hold files on it (the bindings' `unmount` and garbage
    /// collection): unmounts it, or when files are open on it (`EBUSY`) detaches it lazily
    /// (`umount -l`: it leaves the namespace now, the files open keep working). Unmounted with
    /// nothing open, the threads that served it have ended, and the profile is written, when this
    /// returns; detached, they are joined (and the profile written) by a thread of their own when
    /// the last of those files is closed. Nothing unmounts anything again later, so the mount
    /// point can be reused at once. On success the handle is empty
    /// ([`MountHandle::has_ended`], and [`MountHandle::unmount`] returns `Ok` at once); on
    /// failure it is unchanged.
    pub fn detach(&mut self) -> Result<(), MountError> {
        let Some(session) = self.session.as_ref() else {
            return Ok(());
        };
        // Whether the session ends now: unmounted with nothing open, or already over.
        let ends_now = match unmount(&self.mountpoint, false) {
            Ok(()) => true,
            Err(MountError::Unmount { source, .. })
                if source.raw_os_error() == Some(libc::EBUSY) =>
            {
                unmount(&self.mountpoint, true)?;
                false
            }
            // Not a mount point any more: taken down from outside (perhaps lazily, files open).
            Err(MountError::Unmount { source, .. })
                if source.raw_os_error() == Some(libc::EINVAL) =>
            {
                session.guard.is_finished()
            }
            Err(_) if session.guard.is_finished() => true,
            Err(e) => return Err(e),
        };
        let session = self.session.take().expect("checked above");
        let profile = self.profile.take();
        let end = move || {
            let joined = session.join().map_err(|source| MountError::Serve {
                path: PathBuf::new(),
                source,
            });
            let written = profile.map_or(Ok(()), |p| p.write());
            joined.and(written)
        };
        if ends_now {
            // Nothing was open: the serving threads end at once; every one has ended on return.
            return end().map_err(|e| match e {
                MountError::Serve { source, .. } => MountError::Serve {
                    path: self.mountpoint.clone(),
                    source,
                },
                e => e,
            });
        }
        std::thread::spawn(move || {
            let _ = end();
        });
        Ok(())
    }

    fn finish(&mut self) -> Result<(), MountError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let unmounted = match unmount(&self.mountpoint, false) {
            Err(MountError::Unmount { source, .. })
                if source.raw_os_error() == Some(libc::EBUSY) =>
            {
                unmount(&self.mountpoint, true)
            }
            other => other,
        };
        // A mount already gone (unmounted from outside: `EINVAL`, not a mount point any more; the
        // session ends, or has ended) is not an error.
        let gone = session.guard.is_finished()
            || matches!(&unmounted, Err(MountError::Unmount { source, .. })
                if source.raw_os_error() == Some(libc::EINVAL));
        if let Err(e) = unmounted {
            if !gone {
                // Still mounted and serving: joining would wait forever.
                self.session = Some(session);
                return Err(e);
            }
        }
        // The join fails when the serving loop did, or panicked.
        let joined = session.join().map_err(|source| MountError::Serve {
            path: self.mountpoint.clone(),
            source,
        });
        let written = self.profile.take().map_or(Ok(()), |p| p.write());
        joined.and(written)
    }
}

impl Drop for MountHandle {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
