//! A regular file of an image, read at offsets (`sealfs.SealedFile`'s native half: the position,
//! buffering and the `io` protocol are Python's).

use crate::errors::{read_error, CorruptedImageError};
use crate::image::{stat_tuple, Core, StatTuple};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sealfs_reader::{show_path, Inode};
use std::sync::Arc;

/// A regular file of an image: its inode, and the image (opened again in a forked child).
#[pyclass(frozen, module = "sealfs._native")]
pub struct File {
    core: Arc<Core>,
    inode: Inode,
    path: Vec<u8>,
}

impl File {
    /// Regular file `inode`, at `path`, of the image `core`.
    pub fn new(core: Arc<Core>, inode: Inode, path: Vec<u8>) -> File {
        File { core, inode, path }
    }

    /// Reads exactly `buf.len()` bytes at `offset` (the caller keeps within the file), without the
    /// GIL.
    fn fill(&self, buf: &mut [u8], offset: u64) -> PyResult<()> {
        let o = self.core.get()?;
        let got = o
            .image
            .image
            .read(&self.inode, offset, buf)
            .map_err(|e| read_error(e, &self.path))?;
        if got < buf.len() {
            return Err(CorruptedImageError::new_err((
                libc::EUCLEAN,
                format!(
                    "the data ends at byte {} of {}",
                    offset + got as u64,
                    self.inode.size()
                ),
                show_path(&self.path),
            )));
        }
        Ok(())
    }

    /// The bytes a read of up to `n` bytes (all with `None`) at `offset` gets.
    fn span(&self, n: Option<u64>, offset: u64) -> usize {
        let left = self.inode.size().saturating_sub(offset);
        n.map_or(left, |n| n.min(left)) as usize
    }

    /// The whole file, as new bytes.
    pub fn read_all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.pread(py, None, 0)
    }
}

#[pymethods]
impl File {
    /// Its size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.inode.size()
    }

    /// Its path in the image, as opened.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.path)
    }

    /// Its stat fields.
    fn stat(&self) -> StatTuple {
        stat_tuple(&self.inode)
    }

    /// Up to `n` bytes (to the end with `None`) at `offset`, as new bytes: read straight into
    /// them, without the GIL; fewer only at the end of the file.
    #[pyo3(signature = (n, offset))]
    fn pread<'py>(
        &self,
        py: Python<'py>,
        n: Option<u64>,
        offset: u64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let len = self.span(n, offset);
        let mut failed = None;
        let bytes = PyBytes::new_with(py, len, |buf| {
            failed = py.detach(|| self.fill(buf, offset)).err();
            Ok(())
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(bytes),
        }
    }

    /// Reads up to `n` bytes at `offset` into the `n` writable bytes at address `address`, without
    /// the GIL; returns how many (fewer only at the end of the file). For `SealedFile.readinto`,
    /// which holds an export of the caller's buffer (through `ctypes`) for the whole call, so the
    /// buffer can be neither freed nor resized meanwhile.
    fn readinto_address(
        &self,
        py: Python<'_>,
        address: usize,
        n: usize,
        offset: u64,
    ) -> PyResult<usize> {
        let len = self.span(Some(n as u64), offset);
        if len == 0 {
            return Ok(0);
        }
        // Carried across the GIL release as a number: the caller vouches for the memory.
        py.detach(|| {
            #[allow(
                unsafe_code,
                reason = "readinto without a copy on CPython 3.9 and 3.10, whose limited API has \
                          no buffer protocol: the buffer comes by address"
            )]
            // SAFETY: `SealedFile.readinto` passes the address of a writable, C-contiguous buffer
            // of at least `n` bytes (`len <= n`) that it keeps exported (ctypes `from_buffer`)
            // until this call returns; nothing else reads or writes it meanwhile.
            let buf = unsafe { std::slice::from_raw_parts_mut(address as *mut u8, len) };
            self.fill(buf, offset)
        })?;
        Ok(len)
    }
}
