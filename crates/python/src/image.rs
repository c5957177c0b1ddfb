//! `sealfs.Image`'s native half: path lookups, listings, attributes, xattrs, the tree walk,
//! extraction, trust and counters, each one reader call with the GIL released; and [`Core`], the
//! opened image as every process that uses it sees it (opened again in a forked child).

use crate::errors::{errno_error, open_error, read_error};
use crate::file::File;
use crate::open::{Opened, Spec};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use sealfs_reader::{Authority, Checker, Follow, Inode, Trust, Visit, WalkEvent};
use std::sync::{Arc, Mutex};

/// An opened image, shared by an `Image` and the files opened from it, usable in any process.
///
/// The process that opened it reads through `opened`. A process forked from it (or from one of its
/// children) opens the image again on first use, with the same [`Spec`], and requires the digest
/// the first open established: it never uses, locks or drops the reader of another process (a
/// thread of the parent may have held one of its locks when it forked; the remote source's runtime
/// threads, the readahead fetchers and the cache's pruner did not come along). What belongs to
/// another process is forgotten, not dropped: dropping would wait for threads that do not exist
/// here.
pub struct Core {
    spec: Spec,
    /// The process that opened `opened`.
    pid: u32,
    /// Always `Some` but while dropped.
    opened: Option<Arc<Opened>>,
    /// The image opened again by a forked child: the child's pid and its reader.
    child: Mutex<Option<(u32, Arc<Opened>)>>,
}

impl Drop for Core {
    fn drop(&mut self) {
        let pid = std::process::id();
        if self.pid != pid {
            std::mem::forget(self.opened.take());
        }
        let child = self.child.get_mut().unwrap_or_else(|e| e.into_inner());
        if child.as_ref().is_some_and(|(p, _)| *p != pid) {
            std::mem::forget(child.take());
        }
    }
}

impl Core {
    /// The image `spec` opened, in this process.
    pub fn new(spec: Spec, opened: Opened) -> Core {
        Core {
            spec,
            pid: std::process::id(),
            opened: Some(Arc::new(opened)),
            child: Mutex::new(None),
        }
    }

    /// The opened image for this process; call without the GIL (a forked child opens it again,
    /// which reads, perhaps over the network).
    pub fn get(&self) -> PyResult<Arc<Opened>> {
        let pid = std::process::id();
        let opened = self.opened.as_ref().expect("present until dropped");
        if pid == self.pid {
            return Ok(Arc::clone(opened));
        }
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((p, o)) = child.as_ref() {
            if *p == pid {
                return Ok(Arc::clone(o));
            }
        }
        let fresh = self.spec.open().map_err(open_error)?;
        let (was, now) = (opened.image.trust.digest(), fresh.image.trust.digest());
        if was != now {
            return Err(crate::errors::OpenRefusedError::new_err(format!(
                "{}: opened again in process {pid} (forked from {}), the image is {}, not the {} it was",
                self.spec.location.display(),
                self.pid,
                now.map_or("unverified".into(), |d| d.to_string()),
                was.map_or("unverified image".into(), |d| d.to_string()),
            )));
        }
        let fresh = Arc::new(fresh);
        // The slot may hold what a process between this one and the opener opened: forgotten.
        std::mem::forget(child.replace((pid, Arc::clone(&fresh))));
        Ok(fresh)
    }

    /// How it was opened.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The path or URL the image was opened from.
    pub fn location(&self) -> String {
        self.spec.location.display().to_string()
    }
}

/// The `DT_*` value of a file type (`readdir(3)`'s, which `os.scandir` entries know; 0 for
/// unknown).
fn dtype(ft: Option<sealfs_reader::FileType>) -> u8 {
    use sealfs_reader::FileType::*;
    match ft {
        Some(Fifo) => libc::DT_FIFO,
        Some(CharDevice) => libc::DT_CHR,
        Some(Directory) => libc::DT_DIR,
        Some(BlockDevice) => libc::DT_BLK,
        Some(Regular) => libc::DT_REG,
        Some(Symlink) => libc::DT_LNK,
        Some(Socket) => libc::DT_SOCK,
        None => libc::DT_UNKNOWN,
    }
}

/// An image opened by `sealfs.open` (the native half of `sealfs.Image`; paths are bytes here).
#[pyclass(frozen, module = "sealfs._native")]
pub struct Image {
    core: Arc<Core>,
}

impl Image {
    /// The `Image` of an opened core.
    pub fn new(core: Core) -> Image {
        Image {
            core: Arc::new(core),
        }
    }
}

/// Resolves `path` in `opened` as `os` would: "" is `FileNotFoundError`, a path ending in `/`,
/// `/.` or `/..` must be a directory (`NotADirectoryError`), a NUL byte is a `ValueError`.
fn resolve(opened: &Opened, path: &[u8], follow: bool) -> PyResult<Inode> {
    if path.contains(&0) {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "embedded null byte",
        ));
    }
    let follow = if follow { Follow::All } else { Follow::Parents };
    opened
        .image
        .image
        .resolve_posix(path, follow)
        .map_err(|e| read_error(e, path))
}

/// `(mode, ino, nlink, uid, gid, size, mtime, mtime_nsec, blocks, blksize, rdev)`.
pub type StatTuple = (u32, u64, u32, u32, u32, u64, i64, u32, u64, u32, u64);

/// The stat fields of an inode, as a kernel mount shows them.
pub fn stat_tuple(inode: &Inode) -> StatTuple {
    let s = inode.stat();
    (
        s.mode,
        s.ino,
        s.nlink,
        s.uid,
        s.gid,
        s.size,
        s.mtime,
        s.mtime_nsec,
        s.blocks,
        s.blksize,
        s.rdev,
    )
}

#[pymethods]
impl Image {
    /// The path or URL the image was opened from.
    #[getter]
    fn location(&self) -> String {
        self.core.location()
    }

    /// Mounts the image on `mountpoint` over FUSE, served by threads of this process
    /// ([`crate::mount`]); `options` is a `-o` list.
    #[pyo3(signature = (
        mountpoint, *, options="", threads=None, read_ahead=sealfs_fuse::mount::DEFAULT_READ_AHEAD,
        xattrs="auto", fsname=None, log=None
    ))]
    #[allow(
        clippy::too_many_arguments,
        reason = "the keyword arguments of Image.mount"
    )]
    fn mount(
        &self,
        py: Python<'_>,
        mountpoint: std::path::PathBuf,
        options: &str,
        threads: Option<usize>,
        read_ahead: u64,
        xattrs: &str,
        fsname: Option<String>,
        log: Option<std::path::PathBuf>,
    ) -> PyResult<crate::mount::Mount> {
        crate::mount::mount(
            py, &self.core, mountpoint, options, threads, read_ahead, xattrs, fsname, log,
        )
    }

    /// The stat fields of `path` (symlinks followed when `follow`).
    #[pyo3(signature = (path, follow=true))]
    fn stat(&self, py: Python<'_>, path: &[u8], follow: bool) -> PyResult<StatTuple> {
        py.detach(|| {
            let o = self.core.get()?;
            resolve(&o, path, follow).map(|i| stat_tuple(&i))
        })
    }

    /// The entries of directory `path` ("." and ".." left out), in on-disk order:
    /// `(name, inode number, DT_* type)`.
    fn listdir<'py>(
        &self,
        py: Python<'py>,
        path: &[u8],
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, u64, u8)>> {
        let entries = py.detach(|| {
            let o = self.core.get()?;
            let img = &o.image.image;
            let dir = resolve(&o, path, true)?;
            if !dir.is_dir() {
                return Err(errno_error(libc::ENOTDIR, path));
            }
            let all = img.read_dir_all(&dir).map_err(|e| read_error(e, path))?;
            Ok(all
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b"..")
                .map(|e| {
                    let ino = img.ino_of(e.nid);
                    let t = dtype(e.file_type());
                    (e.name, ino, t)
                })
                .collect::<Vec<_>>())
        })?;
        Ok(entries
            .into_iter()
            .map(|(name, ino, t)| (PyBytes::new(py, &name), ino, t))
            .collect())
    }

    /// The target of symlink `path`.
    fn readlink<'py>(&self, py: Python<'py>, path: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let target = py.detach(|| {
            let o = self.core.get()?;
            let inode = resolve(&o, path, false)?;
            if !inode.is_symlink() {
                return Err(errno_error(libc::EINVAL, path));
            }
            o.image
                .image
                .readlink(&inode)
                .map_err(|e| read_error(e, path))
        })?;
        Ok(PyBytes::new(py, &target))
    }

    /// The value of xattr `name` of `path` (`ENODATA` when it has none).
    #[pyo3(signature = (path, name, follow=true))]
    fn getxattr<'py>(
        &self,
        py: Python<'py>,
        path: &[u8],
        name: &[u8],
        follow: bool,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let value = py.detach(|| {
            let o = self.core.get()?;
            let inode = resolve(&o, path, follow)?;
            o.image
                .image
                .get_xattr(&inode, name)
                .map_err(|e| read_error(e, path))?
                .ok_or_else(|| errno_error(libc::ENODATA, path))
        })?;
        Ok(PyBytes::new(py, &value))
    }

    /// The names of the xattrs of `path`.
    #[pyo3(signature = (path, follow=true))]
    fn listxattr<'py>(
        &self,
        py: Python<'py>,
        path: &[u8],
        follow: bool,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let names = py.detach(|| {
            let o = self.core.get()?;
            let inode = resolve(&o, path, follow)?;
            o.image
                .image
                .list_xattrs(&inode)
                .map_err(|e| read_error(e, path))
        })?;
        Ok(names.iter().map(|n| PyBytes::new(py, n)).collect())
    }

    /// Regular file `path` (symlinks followed), opened for reading.
    fn open_file(&self, py: Python<'_>, path: &[u8]) -> PyResult<File> {
        let inode = py.detach(|| {
            let o = self.core.get()?;
            let inode = resolve(&o, path, true)?;
            match inode.file_type() {
                sealfs_reader::FileType::Regular => Ok(inode),
                sealfs_reader::FileType::Directory => Err(errno_error(libc::EISDIR, path)),
                // No data in the image: what reading a device or FIFO of a read-only mount would
                // need cannot be given.
                _ => Err(errno_error(libc::ENXIO, path)),
            }
        })?;
        Ok(File::new(self.core.clone(), inode, path.to_vec()))
    }

    /// The whole content of regular file `path` (symlinks followed).
    fn read_bytes<'py>(&self, py: Python<'py>, path: &[u8]) -> PyResult<Bound<'py, PyBytes>> {
        let file = self.open_file(py, path)?;
        file.read_all(py)
    }

    /// The tree below directory `path`, walked once by the reader (`Image::walk`: depth first, in
    /// directory order, each directory entered once, symlinks not followed): a list of
    /// `(directory path, [(name, DT_* type), ...])` in the order entered, and the errors met,
    /// `(path, errno, message)` (the walk goes on after each).
    #[allow(clippy::type_complexity, reason = "plain Python tuples")]
    fn walk<'py>(
        &self,
        py: Python<'py>,
        path: &[u8],
    ) -> PyResult<(
        Vec<(Bound<'py, PyBytes>, Vec<(Bound<'py, PyBytes>, u8)>)>,
        Vec<(Bound<'py, PyBytes>, i32, String)>,
    )> {
        type Dirs = Vec<(Vec<u8>, Vec<(Vec<u8>, u8)>)>;
        let (dirs, errors) = py.detach(|| -> PyResult<(Dirs, Vec<(Vec<u8>, i32, String)>)> {
            let o = self.core.get()?;
            let img = &o.image.image;
            let top = resolve(&o, path, true)?;
            if !top.is_dir() {
                return Err(errno_error(libc::ENOTDIR, path));
            }
            let mut dirs: Dirs = Vec::new();
            let mut errors = Vec::new();
            img.walk(&top, path, &mut |event| -> Result<Visit, ()> {
                match event {
                    WalkEvent::Dir { path, entries, .. } => dirs.push((
                        path.to_vec(),
                        entries
                            .iter()
                            .filter(|e| e.name != b"." && e.name != b"..")
                            .map(|e| (e.name.clone(), dtype(e.file_type())))
                            .collect(),
                    )),
                    WalkEvent::Error { path, error, .. } => {
                        errors.push((path.to_vec(), error.errno(), error.to_string()))
                    }
                    WalkEvent::Entry(_) => {}
                }
                Ok(Visit::Continue)
            })
            .expect("the visitor never stops the walk");
            Ok((dirs, errors))
        })?;
        let dirs = dirs
            .into_iter()
            .map(|(p, entries)| {
                let entries = entries
                    .into_iter()
                    .map(|(n, t)| (PyBytes::new(py, &n), t))
                    .collect();
                (PyBytes::new(py, &p), entries)
            })
            .collect();
        let errors = errors
            .into_iter()
            .map(|(p, errno, m)| (PyBytes::new(py, &p), errno, m))
            .collect();
        Ok((dirs, errors))
    }

    /// Extracts the tree below `path` into directory `dest` (`sealfs_extract::extract`); returns
    /// what was made and what failed.
    #[pyo3(signature = (dest, path, overwrite=false, xattrs=true, threads=0))]
    fn extract<'py>(
        &self,
        py: Python<'py>,
        dest: std::path::PathBuf,
        path: &[u8],
        overwrite: bool,
        xattrs: bool,
        threads: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let summary = py.detach(|| {
            let o = self.core.get()?;
            // A pool of its own, never rayon's global one (a forked child has none of its threads).
            let threads = match threads {
                0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                n => n,
            };
            let opts = sealfs_extract::ExtractOptions {
                overwrite,
                xattrs,
                threads,
                ..Default::default()
            };
            sealfs_extract::extract(
                &o.image.image,
                Some(path),
                &dest,
                &opts,
                &sealfs_extract::NoProgress,
            )
            .map_err(|e| extract_error(e, path))
        })?;
        let d = PyDict::new(py);
        d.set_item("outcome", outcome_name(summary.outcome()))?;
        d.set_item("files", summary.files)?;
        d.set_item("dirs", summary.dirs)?;
        d.set_item("symlinks", summary.symlinks)?;
        d.set_item("special", summary.special)?;
        d.set_item("hard_links", summary.hard_links)?;
        d.set_item("bytes", summary.bytes)?;
        d.set_item("removed", summary.removed)?;
        d.set_item("not_restored", summary.not_restored())?;
        d.set_item(
            "warnings",
            summary
                .warnings
                .iter()
                .map(|w| w.to_string())
                .collect::<Vec<_>>(),
        )?;
        d.set_item(
            "errors",
            summary
                .errors
                .iter()
                .map(extract_error_text)
                .collect::<Vec<_>>(),
        )?;
        Ok(d)
    }

    /// What the open established: `(state, digest, authority, key fingerprint, checker, text)`.
    #[allow(clippy::type_complexity, reason = "plain Python tuples")]
    #[getter]
    fn trust(
        &self,
        py: Python<'_>,
    ) -> PyResult<(
        &'static str,
        Option<String>,
        Option<&'static str>,
        Option<String>,
        Option<&'static str>,
        String,
    )> {
        let o = py.detach(|| self.core.get())?;
        let t = &o.image.trust;
        let checker = t.checker().map(|c| match c {
            Checker::Reader => "reader",
            Checker::Kernel => "kernel",
        });
        let digest = t.digest().map(|d| d.to_string());
        Ok(match t {
            Trust::Authenticated { authority, .. } => {
                let (by, key) = match authority {
                    Authority::Digest => ("digest", None),
                    Authority::Key { fingerprint } => ("key", Some(fingerprint.to_string())),
                    _ => ("other", None),
                };
                (
                    "authenticated",
                    digest,
                    Some(by),
                    key,
                    checker,
                    t.to_string(),
                )
            }
            Trust::SelfConsistent { .. } => (
                "self-consistent",
                digest,
                None,
                None,
                checker,
                t.to_string(),
            ),
            Trust::Unverified => ("unverified", None, None, None, None, t.to_string()),
        })
    }

    /// The reader's counters by name (and the remote object's, for a URL).
    fn counters(&self, py: Python<'_>) -> PyResult<Vec<(&'static str, u64)>> {
        py.detach(|| {
            let o = self.core.get()?;
            let mut all = o.image.counters();
            if let Some(r) = &o.remote {
                all.extend(r.stats().counters());
            }
            Ok(all)
        })
    }
}

/// The name of an extraction's outcome.
fn outcome_name(o: sealfs_extract::Outcome) -> &'static str {
    match o {
        sealfs_extract::Outcome::Complete => "complete",
        sealfs_extract::Outcome::NotRestored => "not-restored",
        sealfs_extract::Outcome::ImageFault => "image-fault",
        sealfs_extract::Outcome::LocalError => "local-error",
    }
}

/// An extraction error with its causes, each once.
fn extract_error_text(e: &sealfs_extract::ExtractError) -> String {
    sealfs_reader::ErrorChain(e).to_string()
}

/// An extraction that could not start.
fn extract_error(e: sealfs_extract::ExtractError, path: &[u8]) -> PyErr {
    match e {
        sealfs_extract::ExtractError::Image { source, .. } => read_error(source, path),
        sealfs_extract::ExtractError::Local { ref source, .. } => {
            let errno = source.raw_os_error().unwrap_or(libc::EIO);
            pyo3::exceptions::PyOSError::new_err((errno, extract_error_text(&e)))
        }
        sealfs_extract::ExtractError::DestNotEmpty(ref dest) => {
            pyo3::exceptions::PyOSError::new_err((
                libc::ENOTEMPTY,
                format!(
                    "{}: not empty (pass overwrite=True to extract into it anyway)",
                    dest.display()
                ),
            ))
        }
        e => pyo3::exceptions::PyOSError::new_err((libc::EINVAL, extract_error_text(&e))),
    }
}
