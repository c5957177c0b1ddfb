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

/// A layer mounted and served. Dropping it detaches the mount at once (lazily: processes that
/// still hold files of it keep them) and lets its threads end, in the background, once the last
/// of them is closed; it never waits.
pub struct LayerMount {
    handle: Option<MountHandle>,
}

impl Drop for LayerMount {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            detach(handle.mountpoint());
            std::thread::spawn(move || drop(handle));
        }
    }
}

/// Lazily unmounts whatever FUSE mount is on `mountpoint` (a stale one of a previous run too);
/// nothing mounted there is not an error.
pub fn detach(mountpoint: &Path) {
    let _ = sealfs_fuse::mount::unmount(mountpoint, true);
}

/// Mounts the sealed layer `image` on `mountpoint`, every read verified against `digest`. The
/// mount's source in `/proc/mounts` is `sealfs:DIGEST`. A read that fails (a damaged block, a
/// file whose digest does not match) is logged to stderr once, naming the layer by `label`,
/// its image and digest, and the file.
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
        fsname: Some(format!("sealfs:{digest}")),
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
    })
}
