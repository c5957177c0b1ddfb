//! `sealfs.open`: the arguments of an open, translated into the library's options once, and kept
//! ([`Spec`]) so that a forked child can open the same image again ([`crate::image::Core`]).

use crate::errors::{bad_argument, key_error, open_error};
use crate::image::{Core, Image};
use pyo3::prelude::*;
use sealfs_reader::{FillMode, OpenError, OpenOptions, OpenedImage, VerifyMode};
use sealfs_remote::{CacheSettings, RemoteObject, RemoteOptions, RemoteTrust};
use std::path::PathBuf;
use std::sync::Arc;

/// How an image is opened: the library's options, made from `sealfs.open`'s arguments.
pub struct Spec {
    /// The path or URL, as given.
    pub location: PathBuf,
    options: OpenOptions,
    trust: RemoteTrust,
    remote: RemoteOptions,
    cache: Option<CacheSettings>,
}

/// An opened image and, for a URL, the object it reads (its request counters).
pub struct Opened {
    /// What [`sealfs_remote::open_cached`] returned.
    pub image: OpenedImage,
    /// The remote object, for a URL.
    pub remote: Option<Arc<RemoteObject>>,
}

/// The most blocks a sequential read has fetched ahead of it (8 MiB; `sealfs mount`'s is
/// 64 MiB): what readahead holds in memory (the pieces in flight and those landed for the reader)
/// stays within a few times this.
pub const BINDINGS_READAHEAD_BLOCKS: u64 = 2048;

/// A `fill=` argument: `"off"`, `"auto"` or `"on"`.
pub fn parse_fill(fill: &str) -> PyResult<FillMode> {
    fill.parse()
        .map_err(|e| bad_argument(format!("fill={fill:?}: {e}")))
}

impl Spec {
    /// Opens the image (without the GIL: it reads, perhaps over the network).
    pub fn open(&self) -> Result<Opened, OpenError> {
        self.open_with(&self.options)
    }

    /// Opens the image again to mount it: the same options with a mount's caches and readahead
    /// ([`sealfs_fuse::mount::mount_open_options`]).
    pub fn open_to_mount(&self) -> Result<Opened, OpenError> {
        self.open_with(&sealfs_fuse::mount::mount_open_options(&self.options))
    }

    /// Whether a URL is read through the persistent cache.
    pub fn caches(&self) -> bool {
        self.cache.is_some()
    }

    /// The `fill=` it was opened with.
    pub fn fill(&self) -> FillMode {
        self.options.fill
    }

    fn open_with(&self, options: &OpenOptions) -> Result<Opened, OpenError> {
        sealfs_remote::open_cached(
            &self.location,
            options,
            self.trust,
            &self.remote,
            self.cache.as_ref(),
        )
        .map(|(image, remote)| Opened { image, remote })
    }
}

/// A digest argument (`sha256:<hex>`).
pub fn parse_digest(digest: Option<&str>) -> PyResult<Option<sealfs_verity::Digest>> {
    digest
        .map(str::parse)
        .transpose()
        .map_err(|e| bad_argument(format!("digest: {e}")))
}

/// A `min_version=` argument: images signed with a lower version are refused.
pub fn parse_min_version(v: Option<&str>) -> PyResult<Option<sealfs_trust::Version>> {
    v.map(str::parse)
        .transpose()
        .map_err(|e| bad_argument(format!("min_version: {e}")))
}

/// The public keys of `key=` (PEM files) and `keyring=` (a directory of `*.pub` files).
pub fn load_keys(
    keys: &[PathBuf],
    keyring: Option<&std::path::Path>,
) -> PyResult<Vec<sealfs_trust::PublicKey>> {
    let mut all = keys
        .iter()
        .map(|p| sealfs_trust::PublicKey::read(p).map_err(|e| key_error("key", e)))
        .collect::<PyResult<Vec<_>>>()?;
    if let Some(dir) = keyring {
        all.extend(
            sealfs_trust::PublicKey::read_keyring(dir).map_err(|e| key_error("keyring", e))?,
        );
    }
    Ok(all)
}

/// A location given with an option (a sidecar, detached signatures): a path or a URL.
pub fn source(
    p: &std::path::Path,
    remote: &RemoteOptions,
) -> Result<sealfs_reader::Source, OpenError> {
    sealfs_remote::source_with(p, remote).map_err(|e| {
        let kind = match e {
            sealfs_remote::RemoteError::NotFound { .. } => std::io::ErrorKind::NotFound,
            _ => std::io::ErrorKind::Other,
        };
        OpenError::Io {
            name: p.display().to_string(),
            what: "open",
            source: std::io::Error::new(kind, e),
        }
    })
}

/// `sealfs.open(...)`'s native half (the Python wrapper documents the arguments).
#[pyfunction]
#[pyo3(signature = (
    location, *, digest=None, keys=Vec::new(), keyring=None, sidecar=None, signatures=None,
    verify="full", self_consistent=false, cache=true, cache_dir=None, cache_size=None,
    ca_certs=Vec::new(), cluster_cache=None, block_cache=None, min_version=None, fill="off"
))]
#[allow(
    clippy::too_many_arguments,
    reason = "the keyword arguments of sealfs.open"
)]
pub fn open(
    py: Python<'_>,
    location: PathBuf,
    digest: Option<String>,
    keys: Vec<PathBuf>,
    keyring: Option<PathBuf>,
    sidecar: Option<PathBuf>,
    signatures: Option<PathBuf>,
    verify: &str,
    self_consistent: bool,
    cache: bool,
    cache_dir: Option<PathBuf>,
    cache_size: Option<u64>,
    ca_certs: Vec<PathBuf>,
    cluster_cache: Option<usize>,
    block_cache: Option<usize>,
    min_version: Option<&str>,
    fill: &str,
) -> PyResult<Image> {
    let fill = parse_fill(fill)?;
    let min_version = parse_min_version(min_version)?;
    let digest = parse_digest(digest.as_deref())?;
    let public_keys = load_keys(&keys, keyring.as_deref())?;
    let verify = match verify {
        "full" => VerifyMode::Full,
        "none" => VerifyMode::None,
        other => {
            return Err(bad_argument(format!(
                "verify={other:?}: expected \"full\" (every block checked) or \"none\""
            )))
        }
    };
    let remote = RemoteOptions {
        ca_certificates: ca_certs,
        ..RemoteOptions::default()
    };
    let defaults = OpenOptions::default();
    let spec = py.detach(|| -> Result<Spec, OpenError> {
        let source = |p: &PathBuf| source(p, &remote);
        Ok(Spec {
            options: OpenOptions {
                digest,
                sidecar: sidecar.as_ref().map(source).transpose()?,
                keys: public_keys,
                signatures: signatures.as_ref().map(source).transpose()?,
                verify,
                cache_blocks: block_cache.unwrap_or(defaults.cache_blocks),
                cluster_cache_bytes: cluster_cache.unwrap_or(defaults.cluster_cache_bytes),
                readahead_blocks: (defaults.readahead_blocks.0, BINDINGS_READAHEAD_BLOCKS),
                min_version,
                fill,
                ..defaults
            },
            trust: if self_consistent {
                RemoteTrust::AllowSelfConsistent
            } else {
                RemoteTrust::RequireAuthority
            },
            cache: cache.then(|| {
                let d = CacheSettings::default();
                CacheSettings {
                    dir: cache_dir.unwrap_or(d.dir),
                    max_bytes: cache_size.unwrap_or(d.max_bytes),
                }
            }),
            remote,
            location,
        })
    });
    let spec = spec.map_err(open_error)?;
    let opened = py.detach(|| spec.open()).map_err(open_error)?;
    Ok(Image::new(Core::new(spec, opened)))
}
