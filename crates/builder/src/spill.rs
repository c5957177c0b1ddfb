//! Bytes a compressed build's data phase makes for the metadata (the inline tails of files), kept
//! until the metadata is written in an unnamed temporary file beside the output, not in memory.
//!
//! The metadata of a compressed image is planned only once every file is compressed, so its inline
//! tails wait for the whole data phase; on `linux` they are about 110 MB, most of the build's peak
//! memory when held in memory.

use crate::error::{BuildError, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Where [`Spill::put`] stored some bytes; the default is empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Spilled {
    at: u64,
    len: u32,
}

impl Spilled {
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An append-only store of byte strings, buffered in memory up to [`Spill::BUF`] bytes.
#[derive(Debug)]
pub(crate) struct Spill {
    file: File,
    dir: PathBuf,
    /// Bytes not yet written, from `written` on.
    buf: Vec<u8>,
    written: u64,
}

/// An unnamed temporary file (gone when closed, whatever happens) in the directory of `out`;
/// returns it and that directory. `op` names it in an error ("create a temporary file for ...").
pub(crate) fn temp_beside(out: &Path, op: &'static str) -> Result<(File, PathBuf)> {
    let dir = out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let file = tempfile::tempfile_in(dir).map_err(|e| BuildError::io(dir, op, e))?;
    Ok((file, dir.to_path_buf()))
}

impl Spill {
    const BUF: usize = 1 << 20;

    /// A store in an unnamed temporary file in the directory of `out`.
    pub fn beside(out: &Path) -> Result<Spill> {
        let (file, dir) = temp_beside(out, "create a temporary file for inline data")?;
        Ok(Spill {
            file,
            dir,
            buf: Vec::new(),
            written: 0,
        })
    }

    /// Stores `bytes` (at most 4 GiB), whole in the buffer or whole in the file.
    pub fn put(&mut self, bytes: &[u8]) -> Result<Spilled> {
        if bytes.is_empty() {
            return Ok(Spilled::default());
        }
        if self.buf.len() + bytes.len() > Self::BUF {
            self.flush()?;
        }
        let at = self.written + self.buf.len() as u64;
        self.buf.extend_from_slice(bytes);
        let len = u32::try_from(bytes.len()).expect("inline data is below 4 GiB");
        Ok(Spilled { at, len })
    }

    fn flush(&mut self) -> Result<()> {
        self.file
            .write_all_at(&self.buf, self.written)
            .map_err(|e| self.err("write the temporary file of inline data", e))?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// The bytes stored at `s`.
    pub fn read(&self, s: Spilled) -> Result<Vec<u8>> {
        let mut out = vec![0u8; s.len as usize];
        if s.at >= self.written {
            let from = (s.at - self.written) as usize;
            out.copy_from_slice(&self.buf[from..from + s.len as usize]);
        } else {
            self.file
                .read_exact_at(&mut out, s.at)
                .map_err(|e| self.err("read the temporary file of inline data", e))?;
        }
        Ok(out)
    }

    fn err(&self, op: &'static str, e: std::io::Error) -> BuildError {
        BuildError::io(&self.dir, op, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_bytes_read_back_from_the_buffer_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::beside(&dir.path().join("out.img")).unwrap();
        let mut put = Vec::new();
        // Enough to flush the buffer several times; lengths up to a block.
        for i in 0..3000u32 {
            let bytes: Vec<u8> = (0..(i * 37) % 4097).map(|j| (i + j) as u8).collect();
            put.push((s.put(&bytes).unwrap(), bytes));
        }
        assert!(s.written > 0 && !s.buf.is_empty());
        for (at, bytes) in &put {
            assert_eq!(at.len(), bytes.len() as u64);
            assert_eq!(&s.read(*at).unwrap(), bytes);
        }
        assert!(Spilled::default().is_empty());
        assert!(s.read(Spilled::default()).unwrap().is_empty());
    }
}
