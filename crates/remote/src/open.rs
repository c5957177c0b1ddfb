//! Opening an image at a path or a URL: the [`Source`] for a location, the remote trust rule
//! ([`RemoteTrust`]), detached signatures beside a remote image, and the persistent cache of
//! verified blocks that remote images are read through ([`open_cached`]).

use crate::{is_remote, RemoteError, RemoteObject, RemoteOptions};
use sealfs_reader::{OpenError, OpenOptions, OpenedImage, Source};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The [`Source`] for a location: a URL opens a [`RemoteObject`] (one request), anything else is a
/// path.
pub fn source(location: impl AsRef<Path>) -> Result<Source, RemoteError> {
    source_with(location, &RemoteOptions::default())
}

/// [`source`], with these options for a URL (its certificate authorities, for example).
pub fn source_with(
    location: impl AsRef<Path>,
    options: &RemoteOptions,
) -> Result<Source, RemoteError> {
    let location = location.as_ref();
    match location.to_str() {
        Some(url) if is_remote(url) => {
            let object = RemoteObject::open_with(url, options.clone())?;
            Ok(Source::reader(Arc::new(object), url))
        }
        _ => Ok(Source::Path(location.to_path_buf())),
    }
}

/// The detached signatures of the image at `url`: `URL.sig` if the server has it (`None` for
/// "no such object"), as `IMAGE.sig` beside a local image is read when it exists.
pub fn detached_signatures(
    url: &str,
    options: &RemoteOptions,
) -> Result<Option<Source>, RemoteError> {
    let sig_url = format!("{url}.sig");
    match RemoteObject::open_with(&sig_url, options.clone()) {
        Ok(o) => Ok(Some(Source::reader(Arc::new(o), &sig_url))),
        Err(RemoteError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether a remote image may be read without an expected digest or key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RemoteTrust {
    /// A remote image must be opened with [`OpenOptions::digest`] or [`OpenOptions::keys`].
    #[default]
    RequireAuthority,
    /// The caller accepts a remote image checked only against its own seal
    /// ([`sealfs_reader::Trust::SelfConsistent`]).
    AllowSelfConsistent,
}

/// Opens an image at a path or a URL, as [`sealfs_reader::open()`] does. A URL without a digest or
/// key in `options` is refused ([`OpenError::Refused`]) unless `trust` allows self-consistent
/// reading: whoever controls the server controls the seal. The sidecar and the detached signatures
/// of `options` may be URLs too (see [`source`]).
pub fn open(
    location: impl AsRef<Path>,
    options: &OpenOptions,
    trust: RemoteTrust,
) -> Result<OpenedImage, OpenError> {
    open_counted(location, options, trust).map(|(opened, _)| opened)
}

/// [`open`], also returning the [`RemoteObject`] read when `location` is a URL (its counters:
/// requests, round trips, bytes fetched).
pub fn open_counted(
    location: impl AsRef<Path>,
    options: &OpenOptions,
    trust: RemoteTrust,
) -> Result<(OpenedImage, Option<Arc<RemoteObject>>), OpenError> {
    open_counted_with(location, options, trust, &RemoteOptions::default())
}

/// [`open_counted`], with the remote object read as `remote` says (its tail kept for offline
/// opens, say).
pub fn open_counted_with(
    location: impl AsRef<Path>,
    options: &OpenOptions,
    trust: RemoteTrust,
    remote_options: &RemoteOptions,
) -> Result<(OpenedImage, Option<Arc<RemoteObject>>), OpenError> {
    let location = location.as_ref();
    let remote = location.to_str().is_some_and(is_remote);
    if remote
        && options.digest.is_none()
        && options.keys.is_empty()
        && trust == RemoteTrust::RequireAuthority
    {
        return Err(OpenError::Refused(format!(
            "{}: a remote image is read only against an expected digest or key: give --digest (the \
             digest published with the image) or --key, or pass --self-consistent to read it checked \
             only against its own seal (anyone who can change the object can change the seal)",
            sealfs_reader::show_path(std::os::unix::ffi::OsStrExt::as_bytes(location.as_os_str()))
        )));
    }
    // A remote error names its URL and what was asked for: said once, not again by a wrapper.
    let to_open = |e: RemoteError| OpenError::Source(e.into_io());
    // Keys and no detached signatures named: `URL.sig` is read when the server has it (as
    // `IMAGE.sig` beside a local image is), fetched while the image's tail is.
    let sig_of = match location.to_str() {
        Some(url) if remote && !options.keys.is_empty() && options.signatures.is_none() => {
            Some(url.to_string())
        }
        _ => None,
    };
    let sig = sig_of.map(|url| {
        let remote_options = remote_options.clone();
        std::thread::spawn(move || (detached_signatures(&url, &remote_options), url))
    });
    let opened = match location.to_str() {
        Some(url) if remote => RemoteObject::open_with(url, remote_options.clone())
            .map(|object| {
                let object = Arc::new(object);
                (Source::reader(object.clone(), url), Some(object))
            })
            .map_err(to_open),
        _ => Ok((Source::Path(location.to_path_buf()), None)),
    };
    // The signatures' fetch is waited for even when the image's failed: no request is left
    // running behind the caller's back.
    let sig = sig.map(|sig| sig.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
    let (source, object) = opened?;
    let mut with_sig = None;
    let mut sig_failed = None;
    if let Some(sig) = sig {
        match sig {
            (Ok(Some(signatures)), _) => {
                let mut o = options.clone();
                o.signatures = Some(signatures);
                with_sig = Some(o);
            }
            (Ok(None), _) => {}
            // Not fatal by itself (offline, a fully cached image signed in its seal needs no
            // `.sig`), but the likely cause if no signature by the keys is then found.
            (Err(e), _) => sig_failed = Some(e),
        }
    }
    match sealfs_reader::open(source, with_sig.as_ref().unwrap_or(options)) {
        Ok(opened) => Ok((opened, object)),
        Err(OpenError::Signature { .. }) if sig_failed.is_some() => {
            let e = sig_failed.expect("checked above");
            Err(OpenError::Io {
                name: sealfs_reader::show_path(std::os::unix::ffi::OsStrExt::as_bytes(location.as_os_str())).to_string(),
                what: "the seal has no signature by the keys given, and its detached signatures could not be read",
                source: e.into_io(),
            })
        }
        Err(e) => Err(e),
    }
}

/// The persistent cache of verified blocks that remote images are read through (a
/// [`sealfs_cache::DiskCache`], shared by every process and command that reads the same image).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// The directory.
    pub dir: PathBuf,
    /// The most it may take on disk, in bytes.
    pub max_bytes: u64,
}

impl Default for CacheSettings {
    /// [`sealfs_cache::default_dir`] (`$SEALFS_CACHE_DIR`, `$XDG_CACHE_HOME/sealfs` or
    /// `~/.cache/sealfs`), bounded by [`sealfs_cache::DEFAULT_MAX_BYTES`].
    fn default() -> CacheSettings {
        CacheSettings {
            dir: sealfs_cache::default_dir(),
            max_bytes: sealfs_cache::DEFAULT_MAX_BYTES,
        }
    }
}

/// [`open_counted_with`], a URL read through the persistent cache `cache` when one is given: its
/// verified blocks are looked for there before they are fetched and kept there after their check
/// ([`OpenOptions::store`]), and the tail fetched at open is kept beside them
/// ([`RemoteOptions::tail_cache`]), so that an image whose blocks are all cached opens and reads
/// with the network gone. A path is read without the cache (its blocks are local already).
pub fn open_cached(
    location: impl AsRef<Path>,
    options: &OpenOptions,
    trust: RemoteTrust,
    remote_options: &RemoteOptions,
    cache: Option<&CacheSettings>,
) -> Result<(OpenedImage, Option<Arc<RemoteObject>>), OpenError> {
    let location = location.as_ref();
    let cache = cache.filter(|_| location.to_str().is_some_and(is_remote));
    let Some(cache) = cache else {
        return open_counted_with(location, options, trust, remote_options);
    };
    let store = sealfs_cache::DiskCache::open(&cache.dir, cache.max_bytes).map_err(|source| {
        OpenError::Io {
            name: sealfs_reader::show_path(std::os::unix::ffi::OsStrExt::as_bytes(
                cache.dir.as_os_str(),
            )),
            what: "open the cache directory",
            source,
        }
    })?;
    let options = OpenOptions {
        store: Some(Arc::new(store)),
        ..options.clone()
    };
    let remote_options = RemoteOptions {
        tail_cache: Some(cache.dir.clone()),
        ..remote_options.clone()
    };
    open_counted_with(location, &options, trust, &remote_options)
}

/// Where [`check`] reads the seal and the detached signatures from: paths or URLs.
#[derive(Clone, Copy, Debug, Default)]
pub struct CheckSources<'a> {
    /// The seal is in this sidecar.
    pub sidecar: Option<&'a Path>,
    /// The detached signatures [default: `IMAGE.sig` beside a local image when it exists,
    /// `URL.sig` when the server has it and keys are given].
    pub signatures: Option<&'a Path>,
}

/// [`sealfs_reader::check::check`] (what `sealfs verify` reports) of the image at a path or a URL:
/// every byte hashed and checked against the seal, the expected digest and the keys of `options`
/// (whose `sidecar` and `signatures` are replaced by `sources`, opened as [`source_with`] does).
/// With keys and a URL and no signatures named, `URL.sig` is read when the server has it, as
/// `IMAGE.sig` beside a local image is.
pub fn check(
    location: impl AsRef<Path>,
    sources: CheckSources<'_>,
    options: &sealfs_reader::check::CheckOptions,
    remote_options: &RemoteOptions,
    progress: &dyn sealfs_reader::check::Progress,
) -> Result<sealfs_reader::check::Report, OpenError> {
    let location = location.as_ref();
    // A remote error names its URL and what was asked for: said once, not again by a wrapper.
    let opening =
        |p: &Path| source_with(p, remote_options).map_err(|e| OpenError::Source(e.into_io()));
    let image = opening(location)?;
    let sidecar = sources.sidecar.map(opening).transpose()?;
    let signatures = match (sources.signatures, location.to_str()) {
        (Some(p), _) => Some(opening(p)?),
        (None, Some(url)) if is_remote(url) && !options.keys.is_empty() => {
            detached_signatures(url, remote_options).map_err(|e| OpenError::Source(e.into_io()))?
        }
        (None, _) => None,
    };
    let options = sealfs_reader::check::CheckOptions {
        sidecar,
        signatures,
        ..options.clone()
    };
    sealfs_reader::check::check(image, &options, progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_image_without_digest_or_key_is_refused_before_any_request() {
        // Port 9 (discard) on loopback: nothing is asked of it, the refusal comes first.
        let err = open(
            "http://127.0.0.1:9/img",
            &OpenOptions::new(),
            RemoteTrust::RequireAuthority,
        )
        .unwrap_err();
        assert!(matches!(err, OpenError::Refused(_)), "{err}");
        assert!(err.to_string().contains("--self-consistent"), "{err}");
        assert!(!err.is_image_fault());
    }
}
