//! Adding a signature to a sealed image: in its seal (attached or sidecar), or in a detached
//! `IMAGE.sig`. Only the trailer is rewritten (a new signature section, header and footer, into a
//! temporary file renamed over the old one): the EROFS bytes, the tree and the per-file section
//! stay as they are, so the image digest does not change.

use crate::{encode_section, parse_section, Fingerprint, Signature, SigningKey, Statement};
use sealfs_format::{self as fmt, FromBytes, SealError, SealFooter, SealHeader};
use sealfs_verity::{Digest, Params};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Why an image could not be signed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// A file could not be read or written.
    #[error("{}: {what}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The image has no seal, or its seal is damaged: there is no digest to sign.
    #[error("{0}")]
    Seal(String),
    /// The signature given does not fit (does not verify, or its statement does not bind the seal).
    #[error("{0}")]
    Signature(String),
}

/// Which image to sign, and where the signature goes.
#[derive(Clone, Debug)]
pub struct SignTarget {
    /// The image.
    pub image: PathBuf,
    /// Its sidecar seal, if the seal is detached.
    pub sidecar: Option<PathBuf>,
    /// Write the signature into `IMAGE.sig` ([`detached_path`]) instead of the seal.
    pub detached: bool,
}

/// What signing did.
#[derive(Clone, Debug)]
pub struct Signed {
    /// The file written (the image, the sidecar, or `IMAGE.sig`).
    pub written: PathBuf,
    /// The signer.
    pub fingerprint: Fingerprint,
    /// The image digest signed.
    pub digest: Digest,
    /// The signature stored.
    pub signature: Signature,
    /// How many signatures the file now holds.
    pub count: usize,
}

/// Where the detached signatures of `image` are: `IMAGE.sig` beside it.
pub fn detached_path(image: &Path) -> PathBuf {
    let mut s = image.as_os_str().to_owned();
    s.push(".sig");
    PathBuf::from(s)
}

/// A seal as the signer sees it.
struct SealFile {
    path: PathBuf,
    header: SealHeader,
    params: Params,
    digest: Digest,
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> SignError + 'a {
    move |source| SignError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

fn read_at(file: &mut std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    file.seek(SeekFrom::Start(at))?;
    file.read_exact(buf)
}

fn read_seal(image: &Path, sidecar: Option<&Path>) -> Result<SealFile, SignError> {
    let path = sidecar.unwrap_or(image);
    let name = path.display();
    let mut file = std::fs::File::open(path).map_err(io(path, "open"))?;
    let len = file.metadata().map_err(io(path, "stat"))?.len();
    let damaged = |e: SealError| match e {
        SealError::NoFooter => SignError::Seal(format!(
            "{name}: not sealed (no seal footer): seal it first (`sealfs seal`)"
        )),
        e => SignError::Seal(format!("{name}: {e}")),
    };
    if len < fmt::SEAL_FOOTER_SIZE {
        return Err(damaged(SealError::NoFooter));
    }
    let mut fb = [0u8; 64];
    read_at(&mut file, &mut fb, len - fmt::SEAL_FOOTER_SIZE).map_err(io(path, "read footer"))?;
    let footer = SealFooter::parse(&fb, len).map_err(damaged)?;
    let mut hb = [0u8; 512];
    read_at(&mut file, &mut hb, footer.header_offset.get()).map_err(io(path, "read header"))?;
    let header = SealHeader::parse(&hb, &footer).map_err(damaged)?;
    let detached = header.flags & fmt::SEAL_FLAG_DETACHED != 0;
    if detached != sidecar.is_some() {
        return Err(SignError::Seal(format!(
            "{name}: the seal is {}, but was given {}",
            if detached { "a sidecar" } else { "attached" },
            if sidecar.is_some() {
                "as a sidecar"
            } else {
                "attached"
            }
        )));
    }
    let (params, digest) =
        sealfs_verity::seal_params(&header).map_err(|e| SignError::Seal(format!("{name}: {e}")))?;
    Ok(SealFile {
        path: path.to_path_buf(),
        header,
        params,
        digest,
    })
}

/// The statement for the seal of `image` (or of its `sidecar`), without the optional fields.
pub fn seal_statement(image: &Path, sidecar: Option<&Path>) -> Result<Statement, SignError> {
    let seal = read_seal(image, sidecar)?;
    Ok(Statement::for_seal(
        &seal.params,
        seal.digest,
        seal.header.erofs_length.get(),
    ))
}

/// Signs `statement` (which must be the image's: see [`seal_statement`]) with `key` and adds the
/// signature as [`add_signature`] does.
pub fn sign_image(
    target: &SignTarget,
    key: &SigningKey,
    statement: &Statement,
) -> Result<Signed, SignError> {
    statement
        .validate()
        .map_err(|e| SignError::Signature(e.to_string()))?;
    let bytes = statement.encode();
    let signature = Signature {
        public_key: key.public().to_bytes(),
        signature: key.sign(&bytes),
        statement: bytes,
    };
    add_signature(target, signature)
}

/// Adds a signature to the image's seal (or to `IMAGE.sig` when `target.detached`): it must verify
/// with the key it names, and its statement must bind the seal. A signature by the same key
/// replaces that key's earlier one; others are kept (several keys may sign, for rotation).
pub fn add_signature(target: &SignTarget, signature: Signature) -> Result<Signed, SignError> {
    let seal = read_seal(&target.image, target.sidecar.as_deref())?;
    if !signature.verifies() {
        return Err(SignError::Signature(format!(
            "the signature by {} does not verify over the statement",
            signature.fingerprint()
        )));
    }
    let statement =
        Statement::parse(&signature.statement).map_err(|e| SignError::Signature(e.to_string()))?;
    let erofs_length = seal.header.erofs_length.get();
    if let Err(field) = statement.binds(&seal.params, &seal.digest, erofs_length) {
        return Err(SignError::Signature(format!(
            "the statement is not this image's: its {field} differs (this image is {})",
            seal.digest
        )));
    }
    let written = if target.detached {
        detached_path(&target.image)
    } else {
        seal.path.clone()
    };
    let mut all = if target.detached {
        match std::fs::read(&written) {
            Ok(bytes) => parse_section(&bytes)
                .map_err(|e| SignError::Seal(format!("{}: {e}", written.display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io(&written, "read")(e)),
        }
    } else {
        existing_section(&seal)?
    };
    let fingerprint = signature.fingerprint();
    match all
        .iter_mut()
        .find(|s| s.public_key == signature.public_key)
    {
        Some(old) => *old = signature.clone(),
        None => all.push(signature.clone()),
    }
    let section = encode_section(&all);
    if target.detached {
        write_atomically(&written, None, |f| f.write_all(&section))?;
    } else {
        rewrite_trailer(&seal, &section)?;
    }
    Ok(Signed {
        written,
        fingerprint,
        digest: seal.digest,
        signature,
        count: all.len(),
    })
}

fn existing_section(seal: &SealFile) -> Result<Vec<Signature>, SignError> {
    let h = &seal.header;
    if h.sig_length.get() == 0 {
        return Ok(Vec::new());
    }
    let len = usize::try_from(h.sig_length.get()).map_err(|_| {
        SignError::Seal(format!(
            "{}: signature section too large",
            seal.path.display()
        ))
    })?;
    let mut bytes = vec![0u8; len];
    let mut file = std::fs::File::open(&seal.path).map_err(io(&seal.path, "open"))?;
    read_at(&mut file, &mut bytes, h.sig_offset.get())
        .map_err(io(&seal.path, "read signature section"))?;
    parse_section(&bytes).map_err(|e| SignError::Seal(format!("{}: {e}", seal.path.display())))
}

/// Writes a new trailer: the bytes up to the end of the EROFS data, the tree and the per-file
/// section are kept, then the signature section, the header pointing at it and the footer.
fn rewrite_trailer(seal: &SealFile, section: &[u8]) -> Result<(), SignError> {
    let h = &seal.header;
    let start = if h.flags & fmt::SEAL_FLAG_DETACHED != 0 {
        0
    } else {
        h.erofs_length.get()
    };
    let end_of = |off: u64, len: u64| if len == 0 { 0 } else { off + len };
    let keep = start
        .max(end_of(h.tree_offset.get(), h.tree_length.get()))
        .max(end_of(h.files_offset.get(), h.files_length.get()));
    let mut header = SealHeader::read_from_bytes(fmt::IntoBytes::as_bytes(h)).expect("512 bytes");
    header.sig_offset = keep.into();
    header.sig_length = (section.len() as u64).into();
    let trailer = header.with_footer(keep + section.len() as u64);
    write_atomically(&seal.path, Some((&seal.path, keep)), |f| {
        f.write_all(section)?;
        f.write_all(&trailer)
    })
}

/// Writes `path` through a temporary file in the same directory, renamed over it at the end:
/// first the first `keep` bytes of `copy_from` (if given), then what `write` writes.
fn write_atomically(
    path: &Path,
    copy_from: Option<(&Path, u64)>,
    write: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), SignError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.sealfs-sign-{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = match copy_from {
            Some((src, keep)) => {
                std::fs::copy(src, &tmp)?;
                let mut f = std::fs::OpenOptions::new().write(true).open(&tmp)?;
                f.set_len(keep)?;
                f.seek(SeekFrom::End(0))?;
                f
            }
            None => std::fs::File::create(&tmp)?,
        };
        write(&mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io(path, "write"))
}
