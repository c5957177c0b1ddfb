//! Finding and checking the seal of an image: the trailer at the end of the image, or a sidecar file
//! (`docs/format.md` describes both byte by byte).
//!
//! [`find_seal`] reads the footer from the last bytes of the seal's file, the header it points at, and
//! checks everything that can be checked without hashing: CRCs, magic, version, that the descriptor
//! agrees with the header, that every section lies inside the file, that the seal is where its flags
//! say (attached or sidecar), that the EROFS bytes it covers are all there, and that the tree has the
//! size the parameters give. What it returns is still only *self-consistent*: authenticity comes from
//! a digest (or key) given from outside, which [`crate::open()`] compares with [`Seal::digest`].

use crate::files::{DigestOrigin, FileDigests};
use crate::source::ReadAt;
use sealfs_format::{self as fmt, FromBytes, SealError, SealFooter, SealHeader};
use sealfs_verity::{Digest, HashAlg, Params, TreeGeometry};
use std::io;
use std::sync::Arc;

/// Why an image could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The image or sidecar could not be read (the local system's fault, not the image's).
    #[error("{name}: {what}")]
    Io {
        /// The file (path or source name).
        name: String,
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The image's source could not be opened, and its error names it and says why (a remote
    /// object: the URL, what was asked for, and the answer or its absence). Not the image's fault.
    #[error(transparent)]
    Source(io::Error),
    /// The file is not an EROFS image at all.
    #[error("{name}: not an EROFS image ({what})")]
    NotErofs {
        /// The file.
        name: String,
        /// What is missing.
        what: &'static str,
    },
    /// The seal is damaged, truncated, extended or inconsistent: the image is at fault. The text
    /// names the file and what is wrong.
    #[error("{0}")]
    Seal(String),
    /// The image is not the one the expected digest names.
    #[error("{name}: the image is {actual}, not the expected {expected}")]
    DigestMismatch {
        /// The image.
        name: String,
        /// The digest given.
        expected: Box<Digest>,
        /// The digest the image's seal names.
        actual: Box<Digest>,
    },
    /// The options ask for something this image cannot give (a digest check of an unsealed image,
    /// per-file checks of an image without per-file digests). The text says what.
    #[error("{0}")]
    Refused(String),
    /// Keys were given, and the image's signatures do not authenticate it with any of them: not
    /// signed, signed only by other keys, a statement for another image, or a damaged signature.
    #[error("{name}: {refusal}")]
    Signature {
        /// The image.
        name: String,
        /// Which of those.
        refusal: Box<sealfs_trust::Refusal>,
    },
    /// The EROFS bytes could not be opened (superblock or root inode damaged, or a block failed
    /// verification).
    #[error("{name}: open")]
    Image {
        /// The image.
        name: String,
        /// What the reader found.
        #[source]
        source: crate::Error,
    },
}

impl OpenError {
    /// Whether the image (or its seal) is at fault, as opposed to the local system or the request:
    /// a damaged or truncated seal, a digest mismatch, unreadable EROFS metadata.
    pub fn is_image_fault(&self) -> bool {
        match self {
            OpenError::Seal(_) | OpenError::DigestMismatch { .. } | OpenError::Signature { .. } => {
                true
            }
            OpenError::Image { source, .. } => !matches!(source, crate::Error::Io { .. }),
            OpenError::Io { .. }
            | OpenError::Source(_)
            | OpenError::NotErofs { .. }
            | OpenError::Refused(_) => false,
        }
    }
}

/// A seal, found and checked (not yet against a digest).
pub struct Seal {
    /// The header, as checked by [`SealHeader::parse`].
    pub header: SealHeader,
    /// Hash algorithm, Merkle block size and salt.
    pub params: Params,
    /// Where the tree and the sections are read from (the image itself, or the sidecar).
    source: Arc<dyn ReadAt>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Seal")
            .field("params", &self.params)
            .field("erofs_length", &self.erofs_length())
            .field("detached", &self.is_detached())
            .finish_non_exhaustive()
    }
}

impl Seal {
    /// The image digest the seal names: the fs-verity digest of the EROFS bytes, `H(descriptor)`.
    pub fn digest(&self) -> Digest {
        sealfs_verity::file_digest(&self.params, &self.header.descriptor)
    }

    /// The Merkle root.
    pub fn root(&self) -> Digest {
        Digest::new(
            self.params.alg(),
            &self.header.root_hash[..self.params.digest_size()],
        )
        .expect("the digest size of the seal's own algorithm")
    }

    /// Bytes of EROFS data the seal covers, from offset 0 of the image.
    pub fn erofs_length(&self) -> u64 {
        self.header.erofs_length.get()
    }

    /// Whether the seal is a sidecar.
    pub fn is_detached(&self) -> bool {
        self.header.flags & fmt::SEAL_FLAG_DETACHED != 0
    }

    /// Where the tree and sections are read from.
    pub fn source(&self) -> &Arc<dyn ReadAt> {
        &self.source
    }

    /// Where the tree is and what it must hash to, for a [`crate::VerifiedBlocks`].
    pub fn info(&self) -> crate::SealInfo {
        crate::SealInfo {
            params: self.params,
            data_length: self.erofs_length(),
            tree_offset: self.header.tree_offset.get(),
            root: self.root(),
        }
    }

    /// The stored Merkle tree (root level first), as stored: not checked here.
    pub fn read_tree(&self) -> io::Result<Vec<u8>> {
        let mut tree = vec![0u8; self.header.tree_length.get() as usize];
        self.source
            .read_exact_at(&mut tree, self.header.tree_offset.get())?;
        Ok(tree)
    }

    /// The signatures the seal carries (its signature section; empty when it has none), as stored:
    /// nothing is verified here (see [`sealfs_trust::authenticate`]).
    pub fn signatures(&self) -> Result<Vec<sealfs_trust::Signature>, sealfs_trust::Refusal> {
        let h = &self.header;
        if h.sig_length.get() == 0 {
            return Ok(Vec::new());
        }
        let len = usize::try_from(h.sig_length.get())
            .map_err(|_| sealfs_trust::Refusal::Section("too large".into()))?;
        let mut bytes = vec![0u8; len];
        self.source
            .read_exact_at(&mut bytes, h.sig_offset.get())
            .map_err(|e| {
                let e = crate::ErrorChain(&e);
                sealfs_trust::Refusal::Section(format!("cannot read it: {e}"))
            })?;
        sealfs_trust::parse_section(&bytes).map_err(sealfs_trust::Refusal::Section)
    }

    /// The per-file digest section of the trailer, checked against the header's CRC and parsed;
    /// `None` when the seal has none. The error text says what is wrong.
    ///
    /// Only seals written before per-file digests moved into the EROFS bytes carry this section: the
    /// image digest does not cover it, so what it says is [`DigestOrigin::Trailer`], unauthenticated
    /// (a reader prefers the image's own table, [`crate::Image::file_table`], and says so).
    pub fn file_digests(&self) -> Result<Option<FileDigests>, String> {
        let h = &self.header;
        if h.files_length.get() == 0 {
            return Ok(None);
        }
        let mut bytes = vec![0u8; h.files_length.get() as usize];
        self.source
            .read_exact_at(&mut bytes, h.files_offset.get())
            .map_err(|e| {
                let e = crate::ErrorChain(&e);
                format!("cannot read the per-file digest section: {e}")
            })?;
        if fmt::seal_crc(&bytes) != h.files_crc.get() {
            return Err("the per-file digest section is damaged (checksum mismatch)".into());
        }
        let section = fmt::FileDigestSection::parse(&bytes).map_err(|e| match e {
            SealError::Damaged(what) => what,
            other => other.to_string(),
        })?;
        let alg = HashAlg::from_id(section.hash_algorithm)
            .map_err(|e| format!("per-file digest section: {e}"))?;
        let entries = section
            .iter()
            .map(|(nid, d)| Ok((nid, Digest::new(alg, d).map_err(|e| e.to_string())?)))
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Some(FileDigests::new(alg, entries, DigestOrigin::Trailer)))
    }
}

/// What [`find_seal`] found.
#[derive(Debug)]
pub enum Found {
    /// A sealed image (or an image and its sidecar).
    Sealed(Box<Seal>),
    /// A plain EROFS image of this many bytes, no seal.
    Plain(u64),
}

impl Found {
    /// Bytes of EROFS data.
    pub fn erofs_length(&self) -> u64 {
        match self {
            Found::Sealed(seal) => seal.erofs_length(),
            Found::Plain(len) => *len,
        }
    }
}

fn read_array<const N: usize>(src: &dyn ReadAt, offset: u64) -> io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    src.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

/// Length of the EROFS bytes according to the superblock of `image` (checking magic and block size).
pub fn erofs_length(image: &dyn ReadAt) -> Result<u64, &'static str> {
    let sb = read_array::<128>(image, fmt::EROFS_SUPER_OFFSET)
        .map_err(|_| "no superblock magic at byte 1024")?;
    let sb = fmt::SuperBlock::read_from_bytes(&sb).expect("128 bytes");
    sb.image_length()
}

/// Finds and checks the seal of `image` (named `image_name` in messages): at its end, or in
/// `sidecar` when one is given. A file without a seal footer is a plain image when its EROFS length
/// is its whole length; anything else after the EROFS bytes is a damaged seal.
pub fn find_seal(
    image: &Arc<dyn ReadAt>,
    image_name: &str,
    sidecar: Option<(&Arc<dyn ReadAt>, &str)>,
) -> Result<Found, OpenError> {
    let io_err = |name: &str, what, source| OpenError::Io {
        name: name.to_string(),
        what,
        source,
    };
    let image_len = image.len();
    let (seal_src, where_) = match sidecar {
        Some((s, name)) => (s, name),
        None => (image, image_name),
    };
    let seal_len = seal_src.len();
    let footer = if seal_len >= fmt::SEAL_FOOTER_SIZE {
        let bytes = read_array::<64>(&**seal_src, seal_len - fmt::SEAL_FOOTER_SIZE)
            .map_err(|e| io_err(where_, "read seal footer", e))?;
        SealFooter::parse(&bytes, seal_len)
    } else {
        Err(SealError::NoFooter)
    };
    let damaged = |what: String| Err(OpenError::Seal(what));
    let footer = match footer {
        Ok(f) => f,
        Err(SealError::NoFooter) => {
            if sidecar.is_some() {
                return damaged(format!(
                    "{where_}: no seal footer: not a seal file, or truncated or extended"
                ));
            }
            return match erofs_length(&**image) {
                Err(what) => Err(OpenError::NotErofs {
                    name: where_.to_string(),
                    what,
                }),
                Ok(len) if len == image_len => Ok(Found::Plain(len)),
                Ok(len) if len < image_len => damaged(format!(
                    "{where_}: {} bytes follow the EROFS blocks but end in no seal footer: the seal is truncated, extended or damaged",
                    image_len - len
                )),
                Ok(len) => damaged(format!(
                    "{where_}: truncated: the superblock claims {len} bytes, the file has {image_len}"
                )),
            };
        }
        Err(e) => return damaged(format!("{where_}: {e}")),
    };
    let hbytes = read_array::<512>(&**seal_src, footer.header_offset.get())
        .map_err(|e| io_err(where_, "read seal header", e))?;
    let header = match SealHeader::parse(&hbytes, &footer) {
        Ok(h) => h,
        Err(e) => return damaged(format!("{where_}: {e}")),
    };
    let detached = header.flags & fmt::SEAL_FLAG_DETACHED != 0;
    if detached != sidecar.is_some() {
        return damaged(format!(
            "{where_}: the seal says it is {}, but it was found {}",
            if detached { "a sidecar" } else { "attached" },
            if sidecar.is_some() {
                "in a sidecar"
            } else {
                "attached"
            }
        ));
    }
    let erofs_len = header.erofs_length.get();
    if erofs_len > image_len {
        return damaged(format!(
            "{image_name}: truncated: the seal covers {erofs_len} bytes, the file has {image_len}"
        ));
    }
    if detached && erofs_len != image_len {
        return damaged(format!(
            "{image_name}: {} bytes follow the {erofs_len} bytes the sidecar seal covers",
            image_len - erofs_len
        ));
    }
    let params = match sealfs_verity::seal_params(&header) {
        Ok((params, _)) => params,
        Err(e) => return damaged(format!("{where_}: {e}")),
    };
    let geometry = TreeGeometry::new(&params, erofs_len);
    if geometry.tree_size() != header.tree_length.get() {
        return damaged(format!(
            "{where_}: the tree should take {} bytes for {erofs_len} bytes of image; the seal says {}",
            geometry.tree_size(),
            header.tree_length.get()
        ));
    }
    Ok(Found::Sealed(Box::new(Seal {
        header,
        params,
        source: seal_src.clone(),
    })))
}
