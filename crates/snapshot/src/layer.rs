//! Committed layers mounted read-only and verified against the digest the store recorded at
//! commit (never one derived from the image, and the image never hashed whole to mount it), in
//! one of two ways ([`Policy`] picks; [`Mode`] says which one a mount uses):
//!
//! - by the kernel ([`sealfs_kernel::mount`], the code `sealfs mount --kernel` uses): EROFS on a
//!   dm-verity device of the image, whose root hash is the seal's Merkle root that the recorded
//!   digest authenticates ([`Mode::KernelDmVerity`]); or EROFS over an image file with fs-verity
//!   on, the kernel's measured digest checked against the recorded one ([`Mode::KernelFsVerity`],
//!   detached images only: the snapshotter's layers carry their seal inside, so they take
//!   dm-verity). Every block the kernel reads is checked by the kernel; a damaged one fails that
//!   read with EIO. The mount's source is the device-mapper device, named after the mount point
//!   ([`sealfs_kernel::dm_name`]), so a restart finds and removes what a crash left ([`detach`]).
//! - by the verified FUSE filesystem in this process ([`sealfs_fuse::mount`],
//!   [`Mode::FuseVerified`]), with `allow_other` so that containers' processes read through the
//!   overlayfs mounts stacked on it; its source in `/proc/mounts` is `sealfs:DIGEST:MODE`.
//!
//! This is the one place a layer is mounted.

use crate::error::{Error, Result};
use sealfs_fuse::mount::{Access, LogTo, MountHandle, MountImage, MountOptions};
use sealfs_fuse::XattrMode;
use sealfs_reader::{Digest, OpenOptions, OpenedImage};
use std::path::{Path, PathBuf};

/// Which way committed layers are mounted (`sealfs snapshotter --layer-mount`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// By the kernel where the machine allows it (device-mapper with dm-verity, EROFS, loop
    /// devices); a layer whose kernel mount fails is mounted with FUSE instead, and the log
    /// says why.
    #[default]
    Auto,
    /// By the kernel only: a layer the kernel cannot mount is an error.
    Kernel,
    /// With the verified FUSE mount only.
    Fuse,
}

impl Policy {
    /// The policy's name: `auto`, `kernel`, `fuse`.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Auto => "auto",
            Policy::Kernel => "kernel",
            Policy::Fuse => "fuse",
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(Policy::Auto),
            "kernel" => Ok(Policy::Kernel),
            "fuse" => Ok(Policy::Fuse),
            _ => Err(format!(
                "{}: expected auto, kernel or fuse",
                sealfs_text::Escaped(s.as_bytes())
            )),
        }
    }
}

/// How a committed layer is mounted and who verifies its blocks: what `sealfs snapshotter
/// status` reports, the mount's source in `/proc/mounts` ends with and the log line of each
/// mount says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// The verified FUSE mount in the snapshotter's process: every block read is checked
    /// against the digest recorded at commit, in userspace.
    FuseVerified,
    /// The kernel's EROFS over a dm-verity device of the image, the seal's tree checked by the
    /// kernel against the root the recorded digest authenticates.
    KernelDmVerity,
    /// The kernel's EROFS over the image file with fs-verity enabled on it, the kernel's digest
    /// of the file checked against the recorded one (detached images).
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

/// A layer mounted and served. Dropping it takes the mount down at once: a FUSE mount with
/// [`MountHandle::detach`] (unmounted, or lazily detached while processes still hold files of
/// it, its threads then ending in the background once the last of them is closed); a kernel
/// mount with [`sealfs_kernel::unmount`] (unmounted with its device-mapper device and loop
/// devices, or, while files are open, detached with the device removed when they are closed).
/// Nothing unmounts the mount point again later, so the layer may be mounted there again at once.
pub struct LayerMount {
    handle: Option<MountHandle>,
    /// A kernel mount's mount point.
    kernel: Option<PathBuf>,
    mode: Mode,
    source: String,
}

impl LayerMount {
    /// A mount `handle` serves, in `mode`, its source `source` (a lazy layer's,
    /// [`crate::lazy::mount`]).
    pub(crate) fn served(handle: MountHandle, mode: Mode, source: String) -> LayerMount {
        LayerMount {
            handle: Some(handle),
            kernel: None,
            mode,
            source,
        }
    }

    /// How it is mounted.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// What the mount's source names: `sealfs:DIGEST:fuse-verified` ([`source_name`]) for a
    /// FUSE mount, the device-mapper device's name (`dmsetup ls`) for a dm-verity one, the
    /// image's loop device for an fs-verity one.
    pub fn source(&self) -> &str {
        &self.source
    }
}

impl Drop for LayerMount {
    fn drop(&mut self) {
        if let Some(mp) = self.kernel.take() {
            kernel_unmount(&mp);
        }
        if let Some(mut handle) = self.handle.take() {
            if handle.detach().is_err() {
                // As before `detach` could: lazily, the handle dropped in the background.
                let _ = sealfs_fuse::mount::unmount(handle.mountpoint(), true);
                std::thread::spawn(move || drop(handle));
            }
        }
    }
}

/// Takes down the kernel mount at `mountpoint` and its devices: at once when nothing holds it,
/// else lazily. A failure is logged: what is left is found again by [`detach`] at the next start.
fn kernel_unmount(mountpoint: &Path) {
    let down = sealfs_kernel::unmount(mountpoint, false).or_else(|e| match &e {
        sealfs_kernel::Error::Sys { source, .. } if source.raw_os_error() == Some(libc::EBUSY) => {
            sealfs_kernel::unmount(mountpoint, true)
        }
        _ => Err(e),
    });
    if let Err(e) = down {
        eprintln!(
            "sealfs snapshotter: taking down the kernel mount on {}: {e}",
            sealfs_text::escape_path(mountpoint)
        );
    }
}

/// Takes down whatever layer mount is on `mountpoint`, and the devices a kernel mount made for
/// it (a stale mount of a previous run too, or devices a crash left set up without a mount);
/// lazily where files are still open. Nothing mounted there is not an error.
pub fn detach(mountpoint: &Path) {
    match sealfs_kernel::sysfs::mount_at(mountpoint) {
        Ok(Some(m)) if m.fstype == "erofs" => {
            let _ = sealfs_kernel::unmount(mountpoint, true);
        }
        _ => {
            let _ = sealfs_fuse::mount::unmount(mountpoint, true);
            // A device-mapper device named for this mount point, left without a mount.
            let _ = sealfs_kernel::unmount(mountpoint, true);
        }
    }
}

/// Mounts the sealed layer `image` on `mountpoint`, every read verified against `digest`, the
/// way `policy` asks ([`Policy`]). A read that fails (a damaged block, a file whose digest does
/// not match) fails with EIO; on a FUSE mount it is also logged to stderr once, naming the layer
/// by `label`, its image and digest, and the file (the kernel logs its own). In
/// [`Policy::Auto`], a kernel mount that fails is logged with its reason and the layer mounted
/// with FUSE.
pub fn mount(
    image: &Path,
    digest: &str,
    mountpoint: &Path,
    label: &str,
    policy: Policy,
) -> Result<LayerMount> {
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
    std::fs::create_dir_all(mountpoint).map_err(Error::io(mountpoint))?;
    detach(mountpoint);
    if policy != Policy::Fuse {
        match mount_kernel(image, &opened, mountpoint) {
            Ok(m) => return Ok(m),
            Err(e) if policy == Policy::Kernel || e.is_image_fault() => {
                return Err(fail(format!("kernel mount: {e}")))
            }
            Err(e) => eprintln!(
                "sealfs snapshotter: layer {label}: the kernel cannot mount it, mounting it with \
                 FUSE instead: {e}"
            ),
        }
    }
    mount_fuse(image, opened, &digest, mountpoint, label)
}

/// The kernel's EROFS mount of the authenticated layer (dm-verity for an image with its seal
/// inside, fs-verity for a detached one where the file system has it).
fn mount_kernel(
    image: &Path,
    opened: &OpenedImage,
    mountpoint: &Path,
) -> std::result::Result<LayerMount, sealfs_kernel::Error> {
    let chain = sealfs_kernel::mount(&sealfs_kernel::MountRequest {
        image,
        sidecar: None,
        opened,
        mountpoint,
        method: sealfs_kernel::Method::Auto,
        on_corruption: sealfs_kernel::OnCorruption::Eio,
    })?;
    let (mode, source) = match &chain.verity {
        Some(v) => (Mode::KernelDmVerity, v.name.clone()),
        None => (
            Mode::KernelFsVerity,
            chain.source.to_string_lossy().into_owned(),
        ),
    };
    Ok(LayerMount {
        handle: None,
        kernel: Some(chain.mountpoint),
        mode,
        source,
    })
}

/// The verified FUSE mount of the layer, served by this process.
fn mount_fuse(
    image: &Path,
    opened: OpenedImage,
    digest: &Digest,
    mountpoint: &Path,
    label: &str,
) -> Result<LayerMount> {
    let mut served = MountImage::new(opened);
    // overlayfs reads `trusted.overlay.opaque` on every directory of a lower layer.
    served.xattrs = XattrMode::On;
    let source = source_name(&digest.to_string(), Mode::FuseVerified);
    let options = MountOptions {
        access: Access::All,
        fsname: Some(source.clone()),
        threads: Some(2),
        ..MountOptions::default()
    };
    let log_name = format!("layer {label} {} {digest}", sealfs_text::escape_path(image));
    let log = LogTo::Custom(Box::new(move |line: &str| {
        eprintln!("sealfs snapshotter: {log_name}: read failed: {line}")
    }));
    let handle =
        sealfs_fuse::mount::mount(served, mountpoint, &options, log).map_err(|e| Error::Mount {
            image: image.to_path_buf(),
            reason: e.to_string(),
        })?;
    Ok(LayerMount {
        handle: Some(handle),
        kernel: None,
        mode: Mode::FuseVerified,
        source,
    })
}

/// What the kernel says of the kernel mount on `mountpoint`: its device-mapper device's name and
/// whether dm-verity has seen a block fail its check; `None` when it is no kernel mount.
pub fn kernel_state(mountpoint: &Path) -> Option<(Option<String>, bool)> {
    let chain = sealfs_kernel::chain(mountpoint).ok()??;
    let name = chain.verity.as_ref().map(|v| v.name.clone());
    let corrupted = chain.verity.as_ref().is_some_and(|v| v.corrupted());
    Some((name, corrupted))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sealed layer image of one file, as a commit builds it; its digest.
    fn layer(dir: &Path) -> (PathBuf, String) {
        let src = dir.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("f"), b"layer bytes\n").unwrap();
        let image = dir.join("1.sealfs");
        let summary = sealfs_builder::build(
            &src,
            &image,
            &crate::service::layer_build_options(),
            &sealfs_builder::NoProgress,
        )
        .unwrap();
        (image, summary.seal.unwrap().digest.to_string())
    }

    /// `kernel` mounts by the kernel or fails saying why; `auto` then takes the kernel where
    /// `kernel` could, else FUSE; `fuse` always FUSE. Each reads the layer's file, and leaves
    /// nothing mounted when dropped. (On a machine without device-mapper, as this one may be,
    /// the kernel ways are proved in a guest: crates/cli/tests/snapshotter_kernel.rs.)
    #[test]
    fn each_policy_mounts_the_way_it_says() {
        let fuse = if Path::new("/dev/fuse").exists() {
            Ok(())
        } else {
            Err("no /dev/fuse".to_string())
        };
        if !sealfs_testsupport::oracle_guard(sealfs_testsupport::root_env().and(fuse)) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let dir_path = std::fs::canonicalize(dir.path()).unwrap();
        let (image, digest) = layer(&dir_path);
        let mp = dir_path.join("mnt");
        let kernel = match mount(&image, &digest, &mp, "t", Policy::Kernel) {
            Ok(m) => {
                assert_eq!(m.mode(), Mode::KernelDmVerity);
                assert!(m.source().starts_with(sealfs_kernel::NAME_PREFIX));
                assert_eq!(std::fs::read(mp.join("f")).unwrap(), b"layer bytes\n");
                true
            }
            Err(e) => {
                let e = e.to_string();
                assert!(e.contains("kernel mount: "), "{e}");
                println!("no kernel mount here: {e}");
                false
            }
        };
        assert!(sealfs_kernel::sysfs::mount_at(&mp).unwrap().is_none());
        for (policy, want) in [
            (
                Policy::Auto,
                if kernel {
                    Mode::KernelDmVerity
                } else {
                    Mode::FuseVerified
                },
            ),
            (Policy::Fuse, Mode::FuseVerified),
        ] {
            let m = mount(&image, &digest, &mp, "t", policy).unwrap();
            assert_eq!(m.mode(), want, "{policy}");
            if want == Mode::FuseVerified {
                assert_eq!(m.source(), source_name(&digest, Mode::FuseVerified));
            }
            assert_eq!(std::fs::read(mp.join("f")).unwrap(), b"layer bytes\n");
            drop(m);
            assert!(
                sealfs_kernel::sysfs::mount_at(&mp).unwrap().is_none(),
                "{policy}: still mounted"
            );
        }
        // A digest that is not the image's is refused by every policy.
        let wrong = format!("sha256:{}", "0".repeat(64));
        for policy in [Policy::Auto, Policy::Kernel, Policy::Fuse] {
            assert!(mount(&image, &wrong, &mp, "t", policy).is_err(), "{policy}");
        }
    }

    #[test]
    fn policies_parse_by_name() {
        for p in [Policy::Auto, Policy::Kernel, Policy::Fuse] {
            assert_eq!(p.as_str().parse::<Policy>(), Ok(p));
        }
        assert!("dm".parse::<Policy>().is_err());
    }
}
