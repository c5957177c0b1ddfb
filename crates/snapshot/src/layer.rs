//! Committed layers mounted read-only and verified: the sealed image opened with the digest the
//! store recorded at commit (never one derived from the image), served by the verified FUSE
//! filesystem ([`sealfs_fuse::SealFs`]) in this process, with `allow_other` so that containers'
//! processes read through the overlayfs mounts stacked on it.
//!
//! This is the one place a layer is mounted: when the mount lifecycle moves into a library (issue
//! 39, item 5), or layers are mounted by the kernel (dm-verity, fs-verity), only this changes.

#![allow(
    unsafe_code,
    reason = "umount2(MNT_DETACH) of a stale mount has no safe binding in the crates used"
)]

use crate::error::{Error, Result};
use sealfs_fuse::{SealFs, XattrMode};
use sealfs_reader::{Digest, OpenOptions};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// A layer mounted and served; dropping it unmounts (lazily, as processes may still hold files).
pub struct LayerMount {
    session: Option<fuser::BackgroundSession>,
    mountpoint: std::path::PathBuf,
}

impl Drop for LayerMount {
    fn drop(&mut self) {
        detach(&self.mountpoint);
        // With the mount gone the session's loop ends; joining waits for its thread.
        if let Some(s) = self.session.take() {
            let _ = s.join();
        }
    }
}

/// Lazily unmounts whatever is mounted on `mountpoint` (a stale mount of a previous run too);
/// nothing mounted there is not an error.
pub fn detach(mountpoint: &Path) {
    let Ok(c) = CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: c is a NUL-terminated path that lives across the call.
    unsafe {
        libc::umount2(c.as_ptr(), libc::MNT_DETACH);
    }
}

/// Mounts the sealed layer `image` on `mountpoint`, every read verified against `digest`.
pub fn mount(image: &Path, digest: &str, mountpoint: &Path) -> Result<LayerMount> {
    let fail = |reason: String| Error::Mount {
        image: image.to_path_buf(),
        reason,
    };
    let digest: Digest = digest
        .parse()
        .map_err(|e| fail(format!("recorded digest {digest:?}: {e}")))?;
    let opened = sealfs_reader::open(image.to_path_buf(), &OpenOptions::new().digest(digest))
        .map_err(|e| fail(e.to_string()))?;
    let log_name = sealfs_text::escape_path(&image);
    let log: sealfs_fuse::Logger =
        Box::new(move |line: &str| eprintln!("sealfs: {log_name}: {line}"));
    let fs = SealFs::new(
        Arc::new(opened.image),
        opened.verified,
        opened.trust.to_string(),
        log,
    )
    .with_xattrs(XattrMode::On);
    use fuser::MountOption as M;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        M::RO,
        M::DefaultPermissions,
        M::CUSTOM("subtype=sealfs".into()),
        M::FSName(format!("sealfs:{digest}")),
    ];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(2);
    config.clone_fd = true;
    std::fs::create_dir_all(mountpoint).map_err(Error::io(mountpoint))?;
    detach(mountpoint);
    let session = fuser::Session::new(fs, mountpoint, &config)
        .and_then(|s| s.spawn())
        .map_err(|e| fail(format!("on {}: {e}", sealfs_text::escape_path(&mountpoint))))?;
    Ok(LayerMount {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
    })
}
