//! Pulling an image whole: every block read through the verifying reader (so blocks already in the
//! persistent cache are not fetched again), the rest of the blob (Merkle tree, trailer) copied,
//! the file's bytes compared with the blob's digest, and the whole file checked as `sealfs verify`
//! checks it, all in a temporary file beside the output that is renamed only when every check
//! passed: a failed pull leaves nothing at the output.

use crate::client::hex;
use crate::open::Opened;
use crate::RegistryError;
use sealfs_reader::check::{self, CheckOptions, Progress};
use sealfs_reader::{OpenedImage, ReadAt, Source};
use sha2::Digest as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Bytes read through the reader per request (each a batch of range requests).
const PIECE: u64 = 8 << 20;

/// What a pull wrote.
#[derive(Debug)]
pub struct PullReport {
    /// The image file.
    pub out: PathBuf,
    /// The sidecar, for a detached image.
    pub sidecar: Option<PathBuf>,
    /// Bytes written (image and sidecar).
    pub bytes: u64,
    /// The check of the file written (no problems, or the pull fails).
    pub check: check::Report,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io {
        path: sealfs_text::escape_path(path),
        source,
    }
}

/// A temporary file beside `out`.
fn temp_beside(out: &Path) -> Result<tempfile::NamedTempFile, RegistryError> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".sealfs-pull-")
        .tempfile_in(dir)
        .map_err(io_err(out))
}

/// Pulls the image `opened` (opened with [`crate::open`], `found` its registry side) to `out`, its
/// sidecar (a detached image) to `sidecar_out`. `check` carries what the file must verify against
/// (the digest, keys and signatures the open used); the image's own sidecar and the problem limit
/// are set here.
pub fn pull(
    opened: &OpenedImage,
    found: &Opened,
    out: &Path,
    sidecar_out: Option<&Path>,
    check: CheckOptions,
    progress: &dyn Progress,
) -> Result<PullReport, RegistryError> {
    let artifact = &found.found.artifact;
    let name = found.found.reference().to_string();
    let content = |reason: String| RegistryError::BlobContent {
        what: name.clone(),
        reason,
    };
    if !opened.trust.is_authenticated()
        && !matches!(opened.trust, sealfs_reader::Trust::SelfConsistent { .. })
    {
        return Err(content(format!("{}: not verified as read", opened.trust)));
    }
    let sidecar_out = match (&artifact.sidecar, sidecar_out) {
        (Some(_), Some(p)) => Some(p),
        (Some(_), None) => {
            return Err(RegistryError::Image {
                path: sealfs_text::escape_path(out),
                reason: "the image is detached (a plain EROFS image and its seal): name a file \
                         for its seal too (--sidecar-out)"
                    .into(),
            })
        }
        (None, Some(p)) => {
            return Err(RegistryError::Image {
                path: sealfs_text::escape_path(p),
                reason: "the image carries its seal: there is no sidecar to write".into(),
            })
        }
        (None, None) => None,
    };
    let size = artifact.image.size;
    let erofs = opened.erofs_length.min(size);
    let mut tmp = temp_beside(out)?;
    let tmp_path = tmp.path().to_path_buf();
    // The EROFS bytes, every block verified on the way (and taken from the persistent cache
    // where it has them).
    progress.begin("pull", Some(size));
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; PIECE as usize];
    let mut at = 0u64;
    while at < erofs {
        let n = PIECE.min(erofs - at) as usize;
        opened
            .image
            .read_raw(at, &mut buf[..n])
            .map_err(|e| content(format!("bytes {at}..{}: {e}", at + n as u64)))?;
        hasher.update(&buf[..n]);
        tmp.write_all(&buf[..n]).map_err(io_err(&tmp_path))?;
        progress.advance(n as u64);
        at += n as u64;
    }
    // The rest (the Merkle tree and the trailer): copied, checked below.
    while at < size {
        let n = PIECE.min(size - at) as usize;
        found
            .object
            .read_exact_at(&mut buf[..n], at)
            .map_err(|e| RegistryError::Request {
                what: format!("{name}: bytes {at}..{}", at + n as u64),
                reason: e.to_string(),
            })?;
        hasher.update(&buf[..n]);
        tmp.write_all(&buf[..n]).map_err(io_err(&tmp_path))?;
        progress.advance(n as u64);
        at += n as u64;
    }
    progress.end();
    let actual = format!("sha256:{}", hex(&hasher.finalize()));
    if artifact.image.digest.starts_with("sha256:") && actual != artifact.image.digest {
        return Err(content(format!(
            "the image blob's bytes hash to {actual}, not {}",
            artifact.image.digest
        )));
    }
    tmp.as_file().sync_all().map_err(io_err(&tmp_path))?;
    let mut written = size;
    // A detached image's seal: streamed whole, its digest checked.
    let sidecar_tmp = match (&artifact.sidecar, sidecar_out) {
        (Some(desc), Some(path)) => {
            let mut t = temp_beside(path)?;
            let mut reader = found.found.registry.blob_reader(desc)?;
            let mut b = vec![0u8; 1 << 20];
            loop {
                let n = reader
                    .read(&mut b)
                    .map_err(|e| content(format!("sidecar: {e}")))?;
                if n == 0 {
                    break;
                }
                t.write_all(&b[..n]).map_err(io_err(path))?;
            }
            t.as_file().sync_all().map_err(io_err(path))?;
            written += desc.size;
            Some((t, path))
        }
        _ => None,
    };
    // The whole file, checked as `sealfs verify` checks it.
    let options = CheckOptions {
        sidecar: sidecar_tmp
            .as_ref()
            .map(|(t, _)| Source::Path(t.path().to_path_buf())),
        max_problems: 20,
        ..check
    };
    let report = check::check(Source::Path(tmp_path.clone()), &options, progress)
        .map_err(|e| content(format!("the pulled file does not open: {e}")))?;
    if !report.problems.is_empty() {
        let list: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
        return Err(content(format!(
            "the pulled file does not verify: {}",
            list.join("; ")
        )));
    }
    tmp.persist(out).map_err(|e| io_err(out)(e.error))?;
    let sidecar = match sidecar_tmp {
        Some((t, path)) => {
            t.persist(path).map_err(|e| io_err(path)(e.error))?;
            Some(path.to_path_buf())
        }
        None => None,
    };
    Ok(PullReport {
        out: out.to_path_buf(),
        sidecar,
        bytes: written,
        check: report,
    })
}
