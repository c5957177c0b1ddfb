//! `Image.mount`: an image mounted over FUSE in this process ([`sealfs_fuse::mount::mount`]),
//! served by background threads of the calling process, and its `Mount` handle (counters,
//! unmount). Translation only: the options are `sealfs mount`'s, parsed by the library.

use crate::errors::{bad_argument, open_error};
use crate::image::Core;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use sealfs_fuse::mount::{
    self as fmount, LogTo, MountError, MountHandle, MountImage, MountOptions,
};
use sealfs_fuse::XattrMode;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A mount error as an `OSError` with the library's errno (a refused option, `-o rw`, is a
/// `ValueError`); the message is the library's chain of causes.
pub fn mount_error(e: MountError) -> PyErr {
    let text = sealfs_reader::ErrorChain(&e).to_string();
    match e {
        MountError::ReadWrite | MountError::UnknownOption(_) => bad_argument(text),
        e => PyOSError::new_err((e.errno(), text)),
    }
}

/// The options of a mount: `options` is a comma-separated `-o` list.
fn mount_options(
    options: &str,
    threads: Option<usize>,
    read_ahead: u64,
    fsname: Option<String>,
    location: &Path,
) -> PyResult<MountOptions> {
    if threads == Some(0) {
        return Err(bad_argument("threads must be at least 1"));
    }
    let mut o = MountOptions {
        fsname: Some(fmount::source_name(location)),
        threads,
        read_ahead,
        ..MountOptions::default()
    };
    o.add_options(options).map_err(mount_error)?;
    if fsname.is_some() {
        o.fsname = fsname;
    }
    Ok(o)
}

/// Mounts the image of `core` on `mountpoint`: it is opened again as it was (the same options,
/// with a mount's caches, [`fmount::MOUNT_BLOCK_CACHE`] and [`fmount::mount_cluster_cache`]), and
/// must have the digest its first open established.
#[allow(
    clippy::too_many_arguments,
    reason = "the keyword arguments of Image.mount"
)]
pub fn mount(
    py: Python<'_>,
    core: &Core,
    mountpoint: PathBuf,
    options: &str,
    threads: Option<usize>,
    read_ahead: u64,
    xattrs: &str,
    fsname: Option<String>,
    log: Option<PathBuf>,
) -> PyResult<Mount> {
    let spec = core.spec();
    let options = mount_options(options, threads, read_ahead, fsname, &spec.location)?;
    let xattrs = match xattrs {
        "auto" => XattrMode::Auto,
        "on" => XattrMode::On,
        "off" => XattrMode::Off,
        other => {
            return Err(bad_argument(format!(
                "xattrs={other:?}: expected \"auto\", \"on\" or \"off\""
            )))
        }
    };
    let log = match log {
        Some(p) => LogTo::append(&p).map_err(|e| {
            PyOSError::new_err((
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("log: {e}"),
                p.display().to_string(),
            ))
        })?,
        None => LogTo::Stderr,
    };
    let handle = py.detach(|| -> PyResult<MountHandle> {
        let was = core.get()?.image.trust.digest().copied();
        let opened = spec.open_to_mount().map_err(open_error)?;
        let now = opened.image.trust.digest().copied();
        if was != now {
            return Err(crate::errors::OpenRefusedError::new_err(format!(
                "{}: opened again to mount, the image is {}, not the {} it was",
                spec.location.display(),
                now.map_or("unverified".into(), |d| d.to_string()),
                was.map_or("unverified image".into(), |d| d.to_string()),
            )));
        }
        // A remote image read through the cache: its metadata fetched ahead, as `sealfs mount`.
        let warm = opened.remote.is_some() && spec.caches();
        let mut image = MountImage::new(opened.image);
        image.warm = warm;
        image.fill = spec.fill();
        image.xattrs = match xattrs {
            XattrMode::Auto if opened.remote.is_some() && !warm => XattrMode::On,
            x => x,
        };
        fmount::mount(image, &mountpoint, &options, log).map_err(mount_error)
    })?;
    Ok(Mount {
        mountpoint: handle.mountpoint().to_path_buf(),
        handle: Mutex::new(Some(handle)),
        pid: std::process::id(),
    })
}

/// An image mounted by `Image.mount`, served by threads of this process until unmounted or
/// collected.
#[pyclass(frozen, module = "sealfs._native")]
pub struct Mount {
    mountpoint: PathBuf,
    /// `None` once unmounted.
    handle: Mutex<Option<MountHandle>>,
    /// The process serving it: a forked child leaves it alone.
    pid: u32,
}

impl Mount {
    fn handle(&self) -> std::sync::MutexGuard<'_, Option<MountHandle>> {
        self.handle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Mount {
    /// Collected while mounted: detached as `unmount` does; in a forked child, left alone (its
    /// threads are the parent's).
    fn drop(&mut self) {
        let slot = self.handle.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(mut handle) = slot.take() {
            if self.pid == std::process::id() && handle.detach().is_ok() {
                return;
            }
            // Still mounted (or another process's): dropping would wait for it.
            std::mem::forget(handle);
        }
    }
}

#[pymethods]
impl Mount {
    /// Where the image is mounted (canonical).
    #[getter]
    fn mountpoint(&self) -> std::ffi::OsString {
        self.mountpoint.clone().into_os_string()
    }

    /// Whether it is still mounted by this object (not unmounted, not taken down from outside).
    #[getter]
    fn mounted(&self) -> bool {
        self.handle().as_ref().is_some_and(|h| !h.has_ended())
    }

    /// The mount's counters, the JSON object `sealfs stats --json` prints (as text).
    fn stats(&self, py: Python<'_>) -> PyResult<String> {
        let mp = self.mountpoint.clone();
        let v = py
            .detach(|| fmount::query_stats(&mp))
            .map_err(mount_error)?;
        Ok(v.to_string())
    }

    /// Unmounts it, or detaches it lazily when files are open on it; never waits for them.
    fn unmount(&self, py: Python<'_>) -> PyResult<()> {
        if self.pid != std::process::id() {
            return Err(PyOSError::new_err((
                libc::EPERM,
                format!(
                    "{}: mounted by process {}, not this one (a forked child)",
                    self.mountpoint.display(),
                    self.pid
                ),
            )));
        }
        py.detach(|| {
            let mut slot = self.handle();
            match slot.as_mut() {
                Some(h) => {
                    h.detach()?;
                    *slot = None;
                    Ok(())
                }
                None => Ok(()),
            }
        })
        .map_err(mount_error)
    }
}
