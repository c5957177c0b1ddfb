//! `sealfs._native`: the Python bindings' native module (pyo3, one abi3 wheel for CPython 3.9 and
//! later). The package `sealfs` (`python/sealfs`) wraps it in the idioms of Python: file objects,
//! `os.stat_result`, `os.walk`, `os.scandir` entries, an fsspec file system.
//!
//! # Design
//!
//! - **Translation only.** Every call is one library call the CLI makes too: opening is
//!   [`sealfs_remote::open_cached`] (a path or an `http://`, `https://`, `s3://` URL, a digest or
//!   keys, the persistent cache), reads are [`sealfs_reader::Image`]'s, the tree walk is
//!   [`sealfs_reader::Image::walk`], extraction [`sealfs_extract::extract`], builds
//!   [`sealfs_builder::build`], checks [`sealfs_remote::check`] (whose report is the JSON
//!   `sealfs verify --json` prints), mounts [`sealfs_fuse::mount::mount`] (in this process, as
//!   `sealfs mount` options say). Nothing is implemented here but argument and error translation.
//! - **The GIL is released** around every call into the libraries (reads, walks, listings, opens,
//!   builds, checks, extraction), so threads read in parallel.
//! - **Safe to share, usable after `fork`** ([`image::Core`]): an `Image` is `Sync` (the reader is);
//!   a process forked from the one that opened it (a `multiprocessing` or PyTorch `DataLoader`
//!   worker) opens the image again on first use, with the options it was opened with and checked
//!   to have the same digest, and never touches the parent's reader: a lock another thread of the
//!   parent held at the fork, or the remote source's runtime threads, do not exist in the child.
//!   Work that runs on threads of its own (checks, extraction) gets a thread pool made for the call,
//!   never rayon's global pool, which a forked child inherits without its threads.
//! - **Errors** ([`errors`]): a failed check of a block is `sealfs.VerificationError` (an `OSError`
//!   with `errno.EIO`, naming the block and the file); the other reader errors are `OSError`s with
//!   the errno the kernel gives (`FileNotFoundError`, `NotADirectoryError`, ...); a refused open
//!   (wrong digest, no signature by the keys given, a URL without either) is
//!   `sealfs.OpenRefusedError`.

mod errors;
mod file;
mod image;
mod mount;
mod open;
mod tools;

use pyo3::prelude::*;

/// The native half of the `sealfs` package; use `sealfs` itself.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<image::Image>()?;
    m.add_class::<file::File>()?;
    m.add_class::<mount::Mount>()?;
    m.add_function(wrap_pyfunction!(open::open, m)?)?;
    m.add_function(wrap_pyfunction!(tools::build, m)?)?;
    m.add_function(wrap_pyfunction!(tools::digest, m)?)?;
    m.add_function(wrap_pyfunction!(tools::verify, m)?)?;
    Ok(())
}
