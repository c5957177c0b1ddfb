//! Import errors: what is wrong, in which archive, at which byte of its (decompressed) stream,
//! and in which entry when one is being read.

use std::io;

/// Why an archive could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{archive}: {}: {what}", match entry {
    Some(e) => format!("entry {e} (header at byte {offset})"),
    None => format!("byte {offset}"),
})]
pub struct TarError {
    /// The archive's path (`-` for stdin).
    pub archive: String,
    /// Offset in the tar stream (after decompression) of the header of the entry, or of the
    /// bytes that are wrong.
    pub offset: u64,
    /// The entry's name as archived, when one was being read.
    pub entry: Option<String>,
    /// What is wrong.
    pub what: String,
    /// The I/O error behind it, if any (its text is already in `what`).
    pub io: Option<io::Error>,
}

impl TarError {
    pub(crate) fn new(
        archive: &str,
        offset: u64,
        entry: Option<&[u8]>,
        what: String,
        io: Option<io::Error>,
    ) -> Self {
        TarError {
            archive: archive.to_string(),
            offset,
            entry: entry.map(|e| String::from_utf8_lossy(e).into_owned()),
            what,
            io,
        }
    }

    pub(crate) fn io(archive: &str, offset: u64, op: &str, e: io::Error) -> Self {
        TarError::new(archive, offset, None, format!("{op}: {e}"), Some(e))
    }
}

/// Why an OCI image (or one of its layers, as a whole) could not be read: names the image
/// (the layout's path or the reference) or the layer (its digest) and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{image}: {what}")]
pub struct OciError {
    /// The image, or the layer, as messages name it.
    pub image: String,
    /// What is wrong.
    pub what: String,
}

impl OciError {
    pub(crate) fn new(image: impl Into<String>, what: impl Into<String>) -> Self {
        OciError {
            image: image.into(),
            what: what.into(),
        }
    }
}
