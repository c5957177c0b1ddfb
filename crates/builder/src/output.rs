//! The temporary file an output is written to before it is renamed into place.
//!
//! A build (and a seal) writes its output into a file beside it and renames that file over the
//! output only when it is complete, so the output path never holds a partial image. Where the
//! file system allows it (ext4, xfs, btrfs, tmpfs, ...), that file is made with `O_TMPFILE`: it has
//! no name until the build is done, when `linkat` gives it one beside the output (a random
//! `.sealfs-XXXXXX.tmp`, renamed over the output at once). An interrupted build, even by
//! `SIGKILL` or a power cut, then leaves nothing behind: the kernel frees an unnamed file when its
//! last descriptor closes.
//!
//! Elsewhere (a file system without `O_TMPFILE`, or no `/proc` to link the file by), the file is
//! made with a name, `.sealfs-XXXXXX.tmp`, removed when the build fails or is dropped. A process
//! that catches `SIGINT`, `SIGTERM` or `SIGHUP` removes those still on disk by calling
//! [`remove_unfinished_outputs`] before it exits (the `sealfs` command does); only `SIGKILL` can
//! then leave one. Setting the environment variable `SEALFS_NO_O_TMPFILE` (to anything but
//! empty or `0`) forces that fallback, for tests and for file systems that accept `O_TMPFILE` but
//! misbehave with it.

use crate::error::{BuildError, Result};
use rustix::fs::{AtFlags, Mode, OFlags, CWD};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The named temporary outputs on disk now, removed by [`remove_unfinished_outputs`].
static UNFINISHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes the named temporary files of the outputs being written now (builds and seals in
/// progress in this process, where `O_TMPFILE` could not be used, or in the instant between
/// naming a finished output and renaming it into place); returns how many were removed.
///
/// For a process about to exit on a signal: call it from a thread that waits for the signal
/// (`sigwait`), not from a signal handler (it takes a lock and allocates). Builds still running
/// fail afterwards, their files gone.
pub fn remove_unfinished_outputs() -> usize {
    let paths = std::mem::take(&mut *UNFINISHED.lock().unwrap_or_else(|e| e.into_inner()));
    paths
        .iter()
        .filter(|p| std::fs::remove_file(p).is_ok())
        .count()
}

/// Adds `path` to the unfinished outputs.
fn register(path: &Path) {
    UNFINISHED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(path.to_path_buf());
}

/// Takes `path` off the unfinished outputs.
fn unregister(path: &Path) {
    let mut list = UNFINISHED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = list.iter().position(|p| p == path) {
        list.swap_remove(i);
    }
}

/// Whether the fallback to a named file is forced (`SEALFS_NO_O_TMPFILE`).
fn o_tmpfile_disabled() -> bool {
    std::env::var_os("SEALFS_NO_O_TMPFILE").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The file an output is written to, beside it, until [`TempOutput::persist`] renames it into
/// place; dropped unpersisted, it leaves nothing behind.
pub(crate) struct TempOutput {
    kind: Kind,
    /// The directory the output goes to.
    dir: PathBuf,
    /// What error messages name: the temporary file's path, or the output's while it has none.
    label: PathBuf,
}

enum Kind {
    /// Made with `O_TMPFILE`: no name yet.
    Unnamed(File),
    /// Made with a name, registered in [`UNFINISHED`].
    Named(tempfile::NamedTempFile),
    /// Moved out by [`TempOutput::persist`].
    Persisted,
}

impl TempOutput {
    /// A new, empty temporary file beside `out`.
    pub fn beside(out: &Path) -> Result<Self> {
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        if !o_tmpfile_disabled() {
            if let Some(file) = unnamed_in(dir) {
                return Ok(TempOutput {
                    kind: Kind::Unnamed(file),
                    dir: dir.to_path_buf(),
                    label: out.to_path_buf(),
                });
            }
        }
        let named = tempfile::Builder::new()
            .prefix(".sealfs-")
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| BuildError::io(dir, "create output", e))?;
        register(named.path());
        Ok(TempOutput {
            label: named.path().to_path_buf(),
            kind: Kind::Named(named),
            dir: dir.to_path_buf(),
        })
    }

    /// The open file.
    pub fn as_file(&self) -> &File {
        match &self.kind {
            Kind::Unnamed(f) => f,
            Kind::Named(n) => n.as_file(),
            Kind::Persisted => unreachable!("no use after persist"),
        }
    }

    /// The path error messages name: the temporary file's, or the output's while the file has no
    /// name.
    pub fn path(&self) -> &Path {
        &self.label
    }

    /// Whether the file was made without a name (`O_TMPFILE`).
    #[cfg(test)]
    pub fn is_unnamed(&self) -> bool {
        matches!(self.kind, Kind::Unnamed(_))
    }

    /// Renames the finished file to `to` (replacing what is there, atomically).
    pub fn persist(mut self, to: &Path) -> Result<()> {
        let kind = std::mem::replace(&mut self.kind, Kind::Persisted);
        match kind {
            Kind::Persisted => unreachable!("persisted once, by value"),
            Kind::Named(n) => rename_into_place(n, to),
            Kind::Unnamed(file) => {
                // A name beside the output first (linkat cannot replace a file), then the same
                // rename as a named file's.
                let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
                let named = tempfile::Builder::new()
                    .prefix(".sealfs-")
                    .suffix(".tmp")
                    .make_in(&self.dir, |name| {
                        register(name);
                        rustix::fs::linkat(CWD, &proc_path, CWD, name, AtFlags::SYMLINK_FOLLOW)
                            .map_err(|e| {
                                unregister(name);
                                std::io::Error::from(e)
                            })?;
                        Ok(())
                    })
                    .map_err(|e| {
                        BuildError::io(&self.dir, "name the finished output (linkat)", e)
                    })?;
                drop(file);
                rename_into_place(named, to)
            }
        }
    }
}

/// Renames a named temporary file (registered in [`UNFINISHED`]) to `to`.
fn rename_into_place<F>(named: tempfile::NamedTempFile<F>, to: &Path) -> Result<()> {
    let path = named.path().to_path_buf();
    let result = named.persist(to);
    unregister(&path);
    result.map_err(|e| BuildError::io(to, "rename into place", e.error))?;
    Ok(())
}

impl Drop for TempOutput {
    fn drop(&mut self) {
        // A persisted file was moved out of `self`; a named one dropped here is removed by
        // tempfile's own drop.
        if let Kind::Named(n) = &self.kind {
            unregister(n.path());
        }
    }
}

/// An unnamed file in `dir` (`O_TMPFILE`) that can be linked by its `/proc/self/fd` path at the
/// end, or `None` where either is not possible.
fn unnamed_in(dir: &Path) -> Option<File> {
    let fd = rustix::fs::open(
        dir,
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
    .ok()?;
    // Without /proc the file could only be linked with CAP_DAC_READ_SEARCH (AT_EMPTY_PATH):
    // better a named file now than a finished build that cannot be named.
    let proc_path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::statat(CWD, proc_path.as_str(), AtFlags::empty()).ok()?;
    Some(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn names_in(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Regression (issue 38, item 15): an interrupted build left its full-size
    /// `.sealfs-XXXXXX.tmp` beside the output. Made with O_TMPFILE, the unfinished file has no
    /// name at all; persisted, it is the output and nothing else.
    #[test]
    fn interrupted_build_leaves_no_temporary_file_unnamed() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out.img");
        let t = TempOutput::beside(&out).unwrap();
        if !t.is_unnamed() {
            println!("SKIP: the temporary directory's file system refuses O_TMPFILE");
            return;
        }
        t.as_file().write_all(b"image").unwrap();
        assert_eq!(
            names_in(dir.path()),
            Vec::<String>::new(),
            "no name while written"
        );
        t.persist(&out).unwrap();
        assert_eq!(names_in(dir.path()), vec!["out.img"]);
        assert_eq!(std::fs::read(&out).unwrap(), b"image");
    }
}
