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
    /// The entry's name as archived, when one was being read, escaped for messages
    /// ([`sealfs_text::escape`]).
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
            entry: entry.map(sealfs_text::escape),
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

/// Where in a SquashFS image something is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// A byte offset in the image file.
    Byte(u64),
    /// A byte in the decompressed contents of the metadata block whose header is at `block`
    /// (an image byte offset).
    Meta {
        /// Image byte offset of the metadata block's header.
        block: u64,
        /// Offset in the block's decompressed bytes.
        offset: u32,
    },
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Byte(b) => write!(f, "at byte {b}"),
            At::Meta { block, offset } => {
                write!(f, "in the metadata block at byte {block}, offset {offset}")
            }
        }
    }
}

/// Why a SquashFS image could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{image}: {}{what}{}", match entry {
    Some(e) => format!("{e}: "),
    None => String::new(),
}, match at {
    Some(a) => format!(" ({a})"),
    None => String::new(),
})]
pub struct SquashfsError {
    /// The image's path.
    pub image: String,
    /// The entry being read (its path in the image, `/` for the root), when one was.
    pub entry: Option<String>,
    /// What is wrong.
    pub what: String,
    /// Where in the image.
    pub at: Option<At>,
    /// The I/O error behind it, if any (its text is already in `what`).
    pub io: Option<io::Error>,
}
