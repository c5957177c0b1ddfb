//! `sealfs.build`, `sealfs.digest` and `sealfs.verify`: the builder, the image digest and the
//! whole-image check, as `sealfs build`, `sealfs digest` and `sealfs verify --json` run them.

use crate::errors::{bad_argument, key_error, open_error, BuildError, SignatureError};
use crate::open::{load_keys, parse_digest, parse_min_version, source};
use pyo3::exceptions::{PyOSError, PyUserWarning};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sealfs_builder::{Algorithm, BuildOptions, CompressOptions, Preset};
use sealfs_reader::check::{CheckOptions, NoProgress};
use sealfs_remote::RemoteOptions;
use std::path::PathBuf;

/// Runs `f` on a thread pool made for the call: the libraries' parallel work (hashing, checks)
/// runs on the current rayon pool, and rayon's global pool is unusable in a forked child (its
/// threads stayed in the parent).
fn on_own_pool<T: Send>(f: impl FnOnce() -> T + Send) -> PyResult<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| PyOSError::new_err((libc::EAGAIN, format!("starting threads: {e}"))))?;
    Ok(pool.install(f))
}

/// `sealfs.build(...)`'s native half: builds `src` into `out`, signs it with `key` when given.
#[pyfunction]
#[pyo3(signature = (
    src, out, *, compression=None, preset=None, pcluster_bytes=None, timestamp=None,
    source_date_epoch=None, all_root=false, label=None, xattrs=true, threads=0, seal=true,
    key=None, name=None, version=None
))]
#[allow(
    clippy::too_many_arguments,
    reason = "the keyword arguments of sealfs.build"
)]
pub fn build<'py>(
    py: Python<'py>,
    src: PathBuf,
    out: PathBuf,
    compression: Option<&str>,
    preset: Option<&str>,
    pcluster_bytes: Option<u32>,
    timestamp: Option<i64>,
    source_date_epoch: Option<i64>,
    all_root: bool,
    label: Option<&str>,
    xattrs: bool,
    threads: usize,
    seal: bool,
    key: Option<PathBuf>,
    name: Option<String>,
    version: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    // The preset's settings, changed by the algorithm and cluster size given (as -z and -C do).
    let algorithm = compression
        .map(Algorithm::parse)
        .transpose()
        .map_err(|e| bad_argument(format!("compression={compression:?}: {e}")))?;
    let mut compress = match (preset, algorithm) {
        (Some(p), _) => Some(
            Preset::parse(p)
                .map_err(|e| bad_argument(format!("preset: {e}")))?
                .options(),
        ),
        (None, Some(a)) => Some(CompressOptions::new(a)),
        (None, None) if pcluster_bytes.is_some() => {
            return Err(bad_argument(
                "pcluster_bytes needs compression (or a preset)",
            ))
        }
        (None, None) => None,
    };
    if let Some(c) = compress.as_mut() {
        if let Some(a) = algorithm {
            c.algorithm = a;
        }
        if let Some(p) = pcluster_bytes {
            c.pcluster_bytes = p;
        }
        c.validate().map_err(bad_argument)?;
    }
    let label = label.unwrap_or_default().as_bytes().to_vec();
    let signing_key = key
        .as_deref()
        .map(sealfs_trust::SigningKey::read)
        .transpose()
        .map_err(|e| key_error("key", e))?;
    if signing_key.is_some() && !seal {
        return Err(bad_argument(
            "key: an image built with seal=False cannot be signed",
        ));
    }
    let opts = BuildOptions {
        timestamp,
        clamp_mtime: source_date_epoch,
        force_uid: all_root.then_some(0),
        force_gid: all_root.then_some(0),
        label,
        xattrs,
        threads,
        seal: seal.then(Default::default),
        compress,
        ..BuildOptions::default()
    };
    let (summary, signed) = py.detach(|| -> PyResult<_> {
        let summary = sealfs_builder::build(&src, &out, &opts, &sealfs_builder::NoProgress)
            .map_err(build_error)?;
        let signed = match &signing_key {
            Some(k) => {
                let mut statement = sealfs_trust::seal_statement(&out, None)
                    .map_err(|e| SignatureError::new_err(e.to_string()))?;
                statement.name = name;
                statement.version = version;
                statement
                    .validate()
                    .map_err(|e| bad_argument(format!("name/version: {e}")))?;
                let target = sealfs_trust::SignTarget {
                    image: out.clone(),
                    sidecar: None,
                    detached: false,
                };
                Some(
                    sealfs_trust::sign_image(&target, k, &statement)
                        .map_err(|e| SignatureError::new_err(e.to_string()))?,
                )
            }
            None => None,
        };
        Ok((summary, signed))
    })?;
    let d = PyDict::new(py);
    d.set_item(
        "digest",
        summary.seal.as_ref().map(|s| s.digest.to_string()),
    )?;
    d.set_item("signed_by", signed.map(|s| s.fingerprint.to_string()))?;
    d.set_item("inodes", summary.inodes)?;
    d.set_item("files", summary.files)?;
    d.set_item("dirs", summary.dirs)?;
    d.set_item("data_bytes", summary.data_bytes)?;
    d.set_item("image_bytes", summary.image_bytes)?;
    d.set_item("warnings", summary.warnings)?;
    Ok(d)
}

/// A build that failed: an `OSError` for a path it could not read or write, else `BuildError`.
fn build_error(e: sealfs_builder::BuildError) -> PyErr {
    match e {
        sealfs_builder::BuildError::Io {
            ref path, ref err, ..
        } => {
            let errno = err.raw_os_error().unwrap_or(libc::EIO);
            PyOSError::new_err((errno, e.to_string(), path.display().to_string()))
        }
        e => BuildError::new_err(e.to_string()),
    }
}

/// The options of a location given to `digest` and `verify`.
fn remote_options(ca_certs: Vec<PathBuf>) -> RemoteOptions {
    RemoteOptions {
        ca_certificates: ca_certs,
        ..RemoteOptions::default()
    }
}

/// `sealfs.digest(...)`'s native half: the image digest computed from the bytes.
#[pyfunction]
#[pyo3(signature = (location, *, sidecar=None, hash_alg="sha256", ca_certs=Vec::new()))]
pub fn digest(
    py: Python<'_>,
    location: PathBuf,
    sidecar: Option<PathBuf>,
    hash_alg: &str,
    ca_certs: Vec<PathBuf>,
) -> PyResult<String> {
    let alg: sealfs_verity::HashAlg = hash_alg.parse().map_err(bad_argument)?;
    let remote = remote_options(ca_certs);
    py.detach(|| {
        let open = |p: &PathBuf| source(p, &remote).map_err(open_error);
        let image = open(&location)?;
        let sidecar = sidecar.as_ref().map(open).transpose()?;
        let report = on_own_pool(|| {
            sealfs_reader::check::image_digest(image, sidecar.as_ref(), alg, &NoProgress)
        })?
        .map_err(open_error)?;
        match report.sealed {
            Some(claimed) if claimed != report.digest => {
                Err(crate::errors::CorruptedImageError::new_err((
                    libc::EUCLEAN,
                    format!(
                        "the seal names {claimed}, but the bytes hash to {}",
                        report.digest
                    ),
                    location.display().to_string(),
                )))
            }
            _ => Ok(report.digest.to_string()),
        }
    })
}

/// `sealfs.verify(...)`'s native half: the report `sealfs verify --json` prints, as JSON text;
/// the check's notes become warnings.
#[pyfunction]
#[pyo3(signature = (
    location, *, digest=None, keys=Vec::new(), keyring=None, sidecar=None, signatures=None,
    max_problems=100, ca_certs=Vec::new(), min_version=None
))]
#[allow(
    clippy::too_many_arguments,
    reason = "the keyword arguments of sealfs.verify"
)]
pub fn verify(
    py: Python<'_>,
    location: PathBuf,
    digest: Option<String>,
    keys: Vec<PathBuf>,
    keyring: Option<PathBuf>,
    sidecar: Option<PathBuf>,
    signatures: Option<PathBuf>,
    max_problems: usize,
    ca_certs: Vec<PathBuf>,
    min_version: Option<&str>,
) -> PyResult<String> {
    let digest = parse_digest(digest.as_deref())?;
    let min_version = parse_min_version(min_version)?;
    let public_keys = load_keys(&keys, keyring.as_deref())?;
    let options = CheckOptions {
        digest,
        keys: public_keys,
        min_version,
        max_problems,
        ..CheckOptions::default()
    };
    let remote = remote_options(ca_certs);
    let report = py
        .detach(|| {
            let sources = sealfs_remote::CheckSources {
                sidecar: sidecar.as_deref(),
                signatures: signatures.as_deref(),
            };
            on_own_pool(|| sealfs_remote::check(&location, sources, &options, &remote, &NoProgress))
        })?
        .map_err(open_error)?;
    for note in &report.notes {
        PyErr::warn(
            py,
            &py.get_type::<PyUserWarning>(),
            &std::ffi::CString::new(note.as_str()).unwrap_or_default(),
            1,
        )?;
    }
    use std::os::unix::ffi::OsStrExt;
    Ok(report.to_json(location.as_os_str().as_bytes()).to_string())
}
