//! Committed layers mounted read-only and verified: the sealed image opened with the digest the
//! store recorded at commit (never one derived from the image), served by the verified FUSE
//! filesystem in this process ([`sealfs_fuse::mount`]), with `allow_other` so that containers'
//! processes read through the overlayfs mounts stacked on it.
//!
//! This is the one place a layer is mounted: when layers are mounted by the kernel (dm-verity,
//! fs-verity; issue 39, item 3), only this changes.

use crate::error::{Error, Result};
use sealfs_fuse::mount::{Access, LogTo, MountHandle, MountImage, MountOptions};
use sealfs_fuse::XattrMode;
use sealfs_reader::{Digest, OpenOptions};
use std::path::Path;

/// How a committed layer is mounted and who verifies its blocks: what `sealfs snapshotter
/// status` reports, the mount's source in `/proc/mounts` ends with and the log line of each
/// mount says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The verified FUSE mount in the snapshotter's process: every block read is checked
    /// against the digest recorded at commit, in userspace.
    FuseVerified,
    /// The kernel's EROFS over a dm-verity device of the image (not done yet: the snapshotter
    /// mounts every layer [`Mode::FuseVerified`]).
    KernelDmVerity,
    /// The kernel's EROFS over the image file with fs-verity enabled on it (not done yet).
    KernelFsVerity,
    /// The verified FUSE mount of a layer read lazily from a registry ([`crate::lazy`]), through
    /// the persistent cache: every block checked against the digest recorded when it was found.
    LazyFuseVerified,
}

impl Mode {
    /// The mode's name: `fuse-verified`, `kernel-dm-verity`, `kernel-fs-verity`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::FuseVerified => "fuse-verified",
            Mode::KernelDmVerity => "kernel-dm-verity",
            Mode::KernelFsVerity => "kernel-fs-verity",
            Mode::LazyFuseVerified => "lazy-fuse-verified",
        }
    }

    /// What the mode means, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            Mode::FuseVerified => "FUSE, every block verified against",
            Mode::KernelDmVerity => "kernel EROFS on dm-verity, every block verified against",
            Mode::KernelFsVerity => "kernel EROFS, fs-verity verifies every block against",
            Mode::LazyFuseVerified => {
                "FUSE, read lazily from the registry, every block verified against"
            }
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The source a layer mount shows in `/proc/mounts`: `sealfs:DIGEST:MODE`.
pub fn source_name(digest: &str, mode: Mode) -> String {
    format!("sealfs:{digest}:{mode}")
}

/// A layer mounted and served. Dropping it takes the mount down at once
/// ([`MountHandle::detach`]: unmounted, or lazily detached while processes still hold files of
/// it, its threads then ending in the background once the last of them is closed); nothing
/// unmounts the mount point again later, so the layer may be mounted there again at once.
pub struct LayerMount {
    handle: Option<MountHandle>,
    mode: Mode,
}

impl LayerMount {
    /// A mount `handle` serves, in `mode` (a lazy layer's, [`crate::lazy::mount`]).
    pub(crate) fn served(handle: MountHandle, mode: Mode) -> LayerMount {
        LayerMount {
            handle: Some(handle),
            mode,
        }
    }

    /// How it is mounted.
    pub fn mode(&self) -> Mode {
        self.mode
    }
}

impl Drop for LayerMount {
    fn drop(&mut self) {
        if let Some(mut handle) = self.handle.take() {
            if handle.detach().is_err() {
                // As before `detach` could: lazily, the handle dropped in the background.
                detach(handle.mountpoint());
                std::thread::spawn(move || drop(handle));
            }
        }
    }
}

/// Lazily unmounts whatever FUSE mount is on `mountpoint` (a stale one of a previous run too);
/// nothing mounted there is not an error.
pub fn detach(mountpoint: &Path) {
    let _ = sealfs_fuse::mount::unmount(mountpoint, true);
}

/// Mounts the sealed layer `image` on `mountpoint`, every read verified against `digest`. The
/// mount's source in `/proc/mounts` is `sealfs:DIGEST:fuse-verified` ([`source_name`]). A read
/// that fails (a damaged block, a file whose digest does not match) is logged to stderr once,
/// naming the layer by `label`, its image and digest, and the file.
pub fn mount(image: &Path, digest: &str, mountpoint: &Path, label: &str) -> Result<LayerMount> {
    let fail = |reason: String| Error::Mount {
        image: image.to_path_buf(),
        reason,
    };
    let digest: Digest = digest.parse().map_err(|e| {
        fail(format!(
            "recorded digest {}: {e}",
            sealfs_text::Escaped(digest.as_bytes())
        ))
    })?;
    let opened = sealfs_reader::open(image.to_path_buf(), &OpenOptions::new().digest(digest))
        .map_err(|e| fail(e.to_string()))?;
    let mut served = MountImage::new(opened);
    // overlayfs reads `trusted.overlay.opaque` on every directory of a lower layer.
    served.xattrs = XattrMode::On;
    let options = MountOptions {
        access: Access::All,
        fsname: Some(source_name(&digest.to_string(), Mode::FuseVerified)),
        threads: Some(2),
        ..MountOptions::default()
    };
    std::fs::create_dir_all(mountpoint).map_err(Error::io(mountpoint))?;
    detach(mountpoint);
    let log_name = format!("layer {label} {} {digest}", sealfs_text::escape_path(image));
    let log = LogTo::Custom(Box::new(move |line: &str| {
        eprintln!("sealfs snapshotter: {log_name}: read failed: {line}")
    }));
    let handle = sealfs_fuse::mount::mount(served, mountpoint, &options, log)
        .map_err(|e| fail(e.to_string()))?;
    Ok(LayerMount {
        handle: Some(handle),
        mode: Mode::FuseVerified,
    })
}
