//! Lazy layers: containerd's remote-snapshotter protocol, as stargz-, nydus- and
//! soci-snapshotter speak it, over the sealed layers `sealfs convert --push` attaches to an
//! image.
//!
//! When containerd unpacks an image it prepares one snapshot per layer, with the label
//! [`LABEL_TARGET`] naming the committed snapshot it wants (the layer's chain ID) and, on the
//! CRI path with `disable_snapshot_annotations = false`, the `containerd.io/snapshot/cri.*`
//! labels naming the image, its manifest and the layer ([`Wanted`]). For such a layer
//! [`find`] looks, through the referrers of the image's manifest, for the sealed image
//! `convert` built from it ([`sealfs_registry::layers`]) and decides whether it may be used:
//!
//! - **Trust.** The referrer is only a pointer: anyone who may push to the repository may attach
//!   one. With keys configured ([`LazyConfig::keys`]), the sealed image is used only if a
//!   statement in its seal is signed by one of them, binds the seal (digest, parameters) and
//!   names the original layer's digest (what `convert --key` signs), and, with
//!   [`LazyConfig::min_version`], names a version at or above it. Without keys nothing is used
//!   lazily unless [`LazyConfig::unsigned`] is set; then the digest the referrer states is
//!   used, which proves only that the bytes are the ones the referrer names.
//! - **Then** the snapshotter records the target as a committed snapshot whose layer is read
//!   from the registry ([`crate::store::Store::create_lazy`]) and answers `AlreadyExists`, so
//!   containerd never fetches the layer's tar; otherwise (no referrer, no signature, a network
//!   error) it logs why and the layer takes the tar path.
//! - **Mounts** ([`mount`]): the sealed image opened from the registry pinned by its artifact
//!   manifest's digest, every block checked against the digest recorded in the store, read
//!   through the persistent cache under the snapshotter's root (`ROOT/cache`), its metadata
//!   fetched ahead and the rest filled into the cache in the background ([`LazyConfig::fill`],
//!   on by default), so that the layer stops depending on the network. A restart mounts it again
//!   from the store's record.
//!
//! Credentials are what `sealfs push` reads (`$REGISTRY_AUTH_FILE`, docker's `config.json` and
//! its credential helpers, [`sealfs_registry::auth`]). CRI pull secrets are not seen: the CRI
//! hands them to containerd's resolver, never to a snapshotter (stargz-snapshotter gets them by
//! proxying the CRI image service, which this does not do).

use crate::error::{Error, Result};
use crate::layer::{self, LayerMount, Mode};
use sealfs_fuse::mount::{Access, LogTo, MountImage, MountOptions, PrefetchOrder};
use sealfs_fuse::XattrMode;
use sealfs_reader::{Digest, FillMode, OpenOptions, OpenedImage};
use sealfs_registry::layers::ConvertedLayer;
use sealfs_registry::{ImageRef, Registry, RegistryOptions, Transport};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The committed snapshot containerd wants a prepared one to become (the layer's chain ID).
pub const LABEL_TARGET: &str = "containerd.io/snapshot.ref";
/// The image being pulled (CRI: `HOST/REPO:TAG`, as normalized by containerd).
pub const LABEL_IMAGE_REF: &str = "containerd.io/snapshot/cri.image-ref";
/// The digest of the image manifest (one platform's) the layer belongs to.
pub const LABEL_MANIFEST_DIGEST: &str = "containerd.io/snapshot/cri.manifest-digest";
/// The layer's digest (its compressed blob's).
pub const LABEL_LAYER_DIGEST: &str = "containerd.io/snapshot/cri.layer-digest";
/// Set on a snapshot committed lazily, as stargz-snapshotter sets it on its remote snapshots.
pub const LABEL_REMOTE: &str = "containerd.io/snapshot/remote";

/// What a lazy layer must prove, and how lazy layers are read.
#[derive(Clone, Debug)]
pub struct LazyConfig {
    /// A sealed layer is used lazily only if a statement signed by one of these keys binds it
    /// and names its original layer.
    pub keys: Vec<sealfs_trust::PublicKey>,
    /// With keys: the signed statement must name a version at or above this one.
    pub min_version: Option<sealfs_trust::Version>,
    /// Without keys: use the digest the referrer states (proves nothing about who made it).
    pub unsigned: bool,
    /// Registries (`HOST[:PORT]`) reached over plain HTTP; the others over HTTPS.
    pub plain_http: Vec<String>,
    /// Whether a lazy layer is filled into the cache in the background.
    pub fill: FillMode,
    /// The most the persistent cache (`ROOT/cache`) may take, in bytes.
    pub cache_max_bytes: u64,
    /// Certificate authorities to trust for HTTPS registries besides the system's.
    pub ca_certificates: Vec<PathBuf>,
    /// The referrer's prefetch list, replayed at mount (and what the metadata warm-up does
    /// after it); `None`: ignored.
    pub prefetch: Option<PrefetchOrder>,
}

impl Default for LazyConfig {
    /// Nothing used lazily (no keys, not unsigned); fill on; the cache bounded by
    /// [`sealfs_cache::DEFAULT_MAX_BYTES`].
    fn default() -> LazyConfig {
        LazyConfig {
            keys: Vec::new(),
            min_version: None,
            unsigned: false,
            plain_http: Vec::new(),
            fill: FillMode::On,
            cache_max_bytes: sealfs_cache::DEFAULT_MAX_BYTES,
            ca_certificates: Vec::new(),
            prefetch: Some(PrefetchOrder::default()),
        }
    }
}

impl LazyConfig {
    /// Whether any layer may be used lazily: keys are configured, or unsigned referrers allowed.
    pub fn enabled(&self) -> bool {
        !self.keys.is_empty() || self.unsigned
    }

    fn registry_options(&self, cache_dir: &Path) -> RegistryOptions {
        let mut options = RegistryOptions {
            ca_certificates: self.ca_certificates.clone(),
            ..RegistryOptions::default()
        };
        // The tail of each sealed image (its seal) kept beside its blocks.
        options.remote.tail_cache = Some(cache_dir.to_path_buf());
        options
    }

    fn cache(&self, cache_dir: &Path) -> Result<Arc<sealfs_cache::DiskCache>> {
        sealfs_cache::DiskCache::open(cache_dir, self.cache_max_bytes)
            .map(Arc::new)
            .map_err(Error::io(cache_dir))
    }
}

/// Where a lazily committed layer is read from: kept in its record ([`crate::store::Record`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remote {
    /// The sealed image's artifact, pinned by its manifest digest
    /// (`oci[+http]://HOST/REPO@sha256:...`).
    pub reference: String,
    /// The original layer's digest.
    pub layer_digest: String,
    /// The image it was found for.
    pub image: String,
    /// What vouched for the digest: `key FINGERPRINT`, or `unsigned referrer`.
    pub authority: String,
    /// The sealed image's blob in the artifact's repository (`None` in records made before it
    /// was kept): a mount opens it directly, with no manifest request, so that a layer whose
    /// blocks are all cached mounts with the registry unreachable.
    #[serde(default)]
    pub blob: Option<Blob>,
    /// The referrer's prefetch list (paths in the container's root), replayed when the layer
    /// is mounted: each layer fetches those it holds. Empty in records made before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefetch: Vec<String>,
}

/// A blob of a repository, as a descriptor names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blob {
    /// Its media type.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Bytes.
    pub size: u64,
}

/// A layer containerd prepares that may have a sealed counterpart: the labels of
/// containerd's remote-snapshotter protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The committed snapshot to make ([`LABEL_TARGET`]).
    pub target: String,
    /// The image ([`LABEL_IMAGE_REF`]).
    pub image: String,
    /// Its manifest's digest ([`LABEL_MANIFEST_DIGEST`]).
    pub manifest: String,
    /// The layer's digest ([`LABEL_LAYER_DIGEST`]).
    pub layer: String,
}

/// The layer `labels` ask for, if they carry every label of the protocol.
pub fn wanted(labels: &HashMap<String, String>) -> Option<Wanted> {
    let get = |k: &str| labels.get(k).filter(|v| !v.is_empty()).cloned();
    Some(Wanted {
        target: get(LABEL_TARGET)?,
        image: get(LABEL_IMAGE_REF)?,
        manifest: get(LABEL_MANIFEST_DIGEST)?,
        layer: get(LABEL_LAYER_DIGEST)?,
    })
}

/// How long the converted layers of an image manifest are kept once read: containerd prepares
/// the layers of one image one after the other, and each would otherwise read the same
/// referrer again (a referrers query, the tag index and the referrer's manifest).
const REFERRERS_KEPT: Duration = Duration::from_secs(60);

/// The converted layers of image manifests read lately ([`REFERRERS_KEPT`]), by repository and
/// manifest digest. Only pointers are kept: each layer is still checked as [`find`] says.
#[derive(Default)]
pub struct Referrers(Mutex<HashMap<String, Read>>);

/// The converted layers of one image manifest, and when they were read.
type Read = (Instant, Arc<Vec<ConvertedLayer>>);

impl Referrers {
    /// The converted layers attached to `manifest` in `registry`'s repository, read again only
    /// when not read within [`REFERRERS_KEPT`].
    fn get(
        &self,
        registry: &Registry,
        manifest: &str,
    ) -> std::result::Result<Arc<Vec<ConvertedLayer>>, sealfs_registry::RegistryError> {
        let key = format!("{}@{manifest}", registry.repository());
        let now = Instant::now();
        {
            let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
            kept.retain(|_, (at, _)| now.duration_since(*at) < REFERRERS_KEPT);
            if let Some((_, layers)) = kept.get(&key) {
                return Ok(layers.clone());
            }
        }
        let layers = Arc::new(registry.converted_layers(manifest)?);
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (now, layers.clone()));
        Ok(layers)
    }
}

/// A sealed layer found and trusted for a [`Wanted`] layer.
#[derive(Clone, Debug)]
pub struct Found {
    /// The sealed image's digest, as the signed statement (or the referrer) names it.
    pub digest: String,
    /// Where it is read from.
    pub remote: Remote,
}

/// The repository of `image` (a containerd image reference, `HOST/REPO[:TAG][@DIGEST]`), over
/// plain HTTP when its host is listed in `plain_http`.
fn repository(image: &str, plain_http: &[String]) -> std::result::Result<ImageRef, String> {
    let host = image.split('/').next().unwrap_or_default();
    let scheme = if plain_http.iter().any(|h| h == host) {
        "oci+http://"
    } else {
        "oci://"
    };
    let parsed: ImageRef = format!("{scheme}{image}")
        .parse()
        .map_err(|e: sealfs_registry::RegistryError| e.to_string())?;
    let mut repo = parsed.sibling(None, None);
    // containerd names Docker Hub `docker.io`; its registry answers at this host.
    if repo.registry == "docker.io" && repo.transport == Transport::Https {
        repo.registry = "registry-1.docker.io".into();
    }
    Ok(repo)
}

/// Options to open a sealed layer from a registry: through the cache, nothing started ahead
/// (a mount starts its own readahead).
fn open_options(cache: Arc<sealfs_cache::DiskCache>) -> OpenOptions {
    OpenOptions {
        store: Some(cache),
        cache_blocks: sealfs_fuse::mount::MOUNT_BLOCK_CACHE,
        cluster_cache_bytes: sealfs_fuse::mount::mount_cluster_cache(),
        keep_passed_extents: false,
        readahead_blocks: (0, 0),
        ..OpenOptions::default()
    }
}

/// Finds the sealed counterpart of the layer `wanted` names and checks it as `config` says;
/// `Err` says why the layer must take the tar path instead.
pub fn find(
    config: &LazyConfig,
    cache_dir: &Path,
    referrers: &Referrers,
    wanted: &Wanted,
) -> std::result::Result<Found, String> {
    if !config.enabled() {
        return Err(
            "no key is configured for lazy layers (--lazy-key), nor --lazy-unsigned".into(),
        );
    }
    let repo = repository(&wanted.image, &config.plain_http)?;
    let registry_options = config.registry_options(cache_dir);
    let registry = Registry::connect(&repo, &registry_options).map_err(|e| e.to_string())?;
    let converted = referrers
        .get(&registry, &wanted.manifest)
        .map_err(|e| format!("reading the referrers of {}: {e}", wanted.manifest))?
        .iter()
        .find(|l| l.layer_digest == wanted.layer)
        .cloned()
        .ok_or_else(|| {
            format!(
                "no sealed layer for it among the referrers of {}",
                wanted.manifest
            )
        })?;
    let reference = repo.sibling(None, Some(&converted.manifest)).to_string();
    if let Some(why) = &converted.prefetch_ignored {
        // Only a hint: the layer is used lazily without it.
        eprintln!(
            "sealfs snapshotter: layer {}: prefetch list of the referrer ignored: {why}",
            wanted.layer
        );
    }
    let mut options = open_options(config.cache(cache_dir).map_err(|e| e.to_string())?);
    // Opened against the digest the referrer states: the seal must be the one it names.
    // That proves nothing yet; with keys, the seal's own signed statements must vouch for it
    // ([`layer_signer`], below; signatures attached as referrers are not looked for, which
    // saves two requests per layer: `convert --key` signs in the seal).
    options.digest = Some(converted.facts.digest);
    let (opened, _) = sealfs_registry::open(
        &reference,
        &options,
        sealfs_remote::RemoteTrust::RequireAuthority,
        &registry_options,
    )
    .map_err(|e| format!("{reference}: {}", sealfs_reader::ErrorChain(&e)))?;
    let digest = *opened
        .trust
        .digest()
        .ok_or_else(|| format!("{reference}: not a sealed image"))?;
    if digest != converted.facts.digest {
        return Err(format!(
            "{reference}: the referrer states digest {}, the image's seal is {digest}",
            converted.facts.digest
        ));
    }
    let authority = if config.keys.is_empty() {
        "unsigned referrer".to_string()
    } else {
        format!(
            "key {}",
            layer_signer(config, &opened, &digest, &wanted.layer)?
        )
    };
    Ok(Found {
        digest: digest.to_string(),
        remote: Remote {
            reference,
            layer_digest: wanted.layer.clone(),
            image: wanted.image.clone(),
            authority,
            blob: Some(Blob {
                media_type: converted.blob.media_type.clone(),
                digest: converted.blob.digest.clone(),
                size: converted.blob.size,
            }),
            prefetch: converted.prefetch.clone(),
        },
    })
}

/// The signer of a statement in `opened`'s seal by one of the configured keys that binds the
/// seal and names the original layer `layer` (a signed sealed image of another layer, pointed
/// to by a referrer, is refused), at or above the minimum version if one is configured.
fn layer_signer(
    config: &LazyConfig,
    opened: &OpenedImage,
    digest: &Digest,
    layer: &str,
) -> std::result::Result<sealfs_trust::Fingerprint, String> {
    let seal = opened.seal.as_ref().ok_or("not sealed")?;
    let about_layer: Vec<sealfs_trust::Signature> = seal
        .signatures()
        .map_err(|e| format!("its signatures: {e}"))?
        .into_iter()
        .filter(|s| {
            sealfs_trust::Statement::parse(&s.statement)
                .is_ok_and(|st| st.name.as_deref() == Some(layer))
        })
        .collect();
    sealfs_trust::authenticate(
        &about_layer,
        &config.keys,
        &seal.params,
        digest,
        seal.erofs_length(),
        config.min_version.as_ref(),
    )
    .map(|(fingerprint, _)| fingerprint)
    .map_err(|refusal| {
        format!(
            "no statement naming layer {layer} signed by a configured key binds its seal: {refusal}"
        )
    })
}

/// Opens the lazily committed layer `remote` from its registry, every block checked against
/// `digest` (recorded when it was found), through the cache in `cache_dir`.
pub fn open(
    config: &LazyConfig,
    cache_dir: &Path,
    remote: &Remote,
    digest: &str,
) -> Result<OpenedImage> {
    let fail = |reason: String| Error::Mount {
        image: PathBuf::from(&remote.reference),
        reason,
    };
    let digest: Digest = digest.parse().map_err(|e| {
        fail(format!(
            "recorded digest {}: {e}",
            sealfs_text::Escaped(digest.as_bytes())
        ))
    })?;
    let mut options = open_options(config.cache(cache_dir)?);
    options.digest = Some(digest);
    if let Some(blob) = &remote.blob {
        // The blob itself: its seal's tail, kept in the cache, stands in for the registry
        // when it is unreachable.
        let reference: ImageRef = remote
            .reference
            .parse()
            .map_err(|e: sealfs_registry::RegistryError| fail(e.to_string()))?;
        let registry = Registry::connect(&reference, &config.registry_options(cache_dir))
            .map_err(|e| fail(e.to_string()))?;
        let object = registry
            .blob_object(&sealfs_registry::manifest::Descriptor {
                media_type: blob.media_type.clone(),
                digest: blob.digest.clone(),
                size: blob.size,
                annotations: Default::default(),
            })
            .map_err(|e| fail(e.to_string()))?;
        let source = sealfs_reader::Source::reader(Arc::new(object), remote.reference.clone());
        return sealfs_reader::open(source, &options)
            .map_err(|e| fail(sealfs_reader::ErrorChain(&e).to_string()));
    }
    sealfs_registry::open(
        &remote.reference,
        &options,
        sealfs_remote::RemoteTrust::RequireAuthority,
        &config.registry_options(cache_dir),
    )
    .map(|(opened, _)| opened)
    .map_err(|e| fail(sealfs_reader::ErrorChain(&e).to_string()))
}

/// Mounts the lazily committed layer `remote` on `mountpoint` ([`open`]), its metadata fetched
/// ahead and the rest filled into the cache as `config.fill` says. The mount's source in
/// `/proc/mounts` is `sealfs:DIGEST:lazy-fuse-verified`. A read that fails (a block the
/// registry no longer serves, or serves other bytes of) is logged once, naming the layer.
pub fn mount(
    config: &LazyConfig,
    cache_dir: &Path,
    remote: &Remote,
    digest: &str,
    mountpoint: &Path,
    label: &str,
) -> Result<LayerMount> {
    let opened = open(config, cache_dir, remote, digest)?;
    let mut served = MountImage::new(opened);
    // overlayfs reads `trusted.overlay.opaque` on every directory of a lower layer.
    served.xattrs = XattrMode::On;
    served.warm = true;
    served.fill = config.fill;
    if let Some(order) = config.prefetch {
        served.prefetch = remote.prefetch.clone();
        served.prefetch_order = order;
    }
    let source = layer::source_name(digest, Mode::LazyFuseVerified);
    let options = MountOptions {
        access: Access::All,
        fsname: Some(source.clone()),
        // Reads wait on the network: more of them at once than a local layer's.
        threads: Some(4),
        ..MountOptions::default()
    };
    std::fs::create_dir_all(mountpoint).map_err(Error::io(mountpoint))?;
    layer::detach(mountpoint);
    let log_name = format!(
        "layer {label} {} {digest}",
        sealfs_text::Escaped(remote.reference.as_bytes())
    );
    let log = LogTo::Custom(Box::new(move |line: &str| {
        eprintln!("sealfs snapshotter: {log_name}: read failed: {line}")
    }));
    let handle =
        sealfs_fuse::mount::mount(served, mountpoint, &options, log).map_err(|e| Error::Mount {
            image: PathBuf::from(&remote.reference),
            reason: e.to_string(),
        })?;
    Ok(LayerMount::served(handle, Mode::LazyFuseVerified, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_labels_name_the_layer_and_all_are_needed() {
        let mut labels: HashMap<String, String> = [
            (LABEL_TARGET, "sha256:c"),
            (LABEL_IMAGE_REF, "127.0.0.1:5000/a/b:t"),
            (LABEL_MANIFEST_DIGEST, "sha256:m"),
            (LABEL_LAYER_DIGEST, "sha256:l"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let w = wanted(&labels).unwrap();
        assert_eq!(
            (w.target.as_str(), w.layer.as_str()),
            ("sha256:c", "sha256:l")
        );
        labels.remove(LABEL_MANIFEST_DIGEST);
        assert_eq!(wanted(&labels), None);
    }

    /// A sealed layer image of one file, signed by `key` with a statement naming `layer` (and
    /// `version`), as `sealfs convert --key` signs; opened against its digest.
    fn signed_layer(
        dir: &Path,
        key: &sealfs_trust::SigningKey,
        layer: &str,
        version: Option<&str>,
    ) -> (OpenedImage, Digest) {
        let tree = dir.join("tree");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("f"), b"layer file\n").unwrap();
        let image = dir.join("layer.sealfs");
        let summary = sealfs_builder::build(
            &tree,
            &image,
            &crate::service::layer_build_options(),
            &sealfs_builder::NoProgress,
        )
        .unwrap();
        let digest = summary.seal.unwrap().digest;
        let mut statement = sealfs_trust::seal_statement(&image, None).unwrap();
        statement.name = Some(layer.to_string());
        statement.version = version.map(str::to_string);
        let target = sealfs_trust::SignTarget {
            image: image.clone(),
            sidecar: None,
            detached: false,
        };
        sealfs_trust::sign_image(&target, key, &statement).unwrap();
        let opened = sealfs_reader::open(image, &OpenOptions::new().digest(digest)).unwrap();
        (opened, digest)
    }

    #[test]
    fn a_sealed_layer_counts_only_if_signed_by_a_key_as_the_layer_asked_for() {
        let dir = tempfile::tempdir().unwrap();
        let (key, other) = (
            sealfs_trust::SigningKey::generate(),
            sealfs_trust::SigningKey::generate(),
        );
        let layer = format!("sha256:{}", "a".repeat(64));
        let (opened, digest) = signed_layer(dir.path(), &key, &layer, Some("2"));
        let config = |keys: Vec<sealfs_trust::PublicKey>, min: Option<&str>| LazyConfig {
            keys,
            min_version: min.map(|v| v.parse().unwrap()),
            ..LazyConfig::default()
        };
        let signer = layer_signer(&config(vec![key.public()], None), &opened, &digest, &layer);
        assert_eq!(signer.unwrap(), key.public().fingerprint());
        // Signed by the key, but as another layer's conversion: a referrer pointing a layer at
        // it is not believed.
        let another = format!("sha256:{}", "b".repeat(64));
        let e = layer_signer(
            &config(vec![key.public()], None),
            &opened,
            &digest,
            &another,
        )
        .unwrap_err();
        assert!(e.contains(&another) && e.contains("not signed"), "{e}");
        // Another key's signature.
        let e = layer_signer(
            &config(vec![other.public()], None),
            &opened,
            &digest,
            &layer,
        )
        .unwrap_err();
        assert!(e.contains("unknown keys"), "{e}");
        // A version floor: at or below the signed version passes, above it is a rollback.
        assert!(layer_signer(
            &config(vec![key.public()], Some("2")),
            &opened,
            &digest,
            &layer
        )
        .is_ok());
        let e = layer_signer(
            &config(vec![key.public()], Some("3")),
            &opened,
            &digest,
            &layer,
        )
        .unwrap_err();
        assert!(e.contains("rollback"), "{e}");
    }

    #[test]
    fn plain_http_only_for_the_hosts_named() {
        let plain = vec!["127.0.0.1:5000".to_string()];
        let r = repository("127.0.0.1:5000/a/b:t", &plain).unwrap();
        assert_eq!(r.to_string(), "oci+http://127.0.0.1:5000/a/b");
        let r = repository(
            &format!("127.0.0.1:5001/a/b@sha256:{}", "0".repeat(64)),
            &plain,
        )
        .unwrap();
        assert_eq!(r.transport, Transport::Https);
        let r = repository("docker.io/library/busybox:latest", &plain).unwrap();
        assert_eq!(r.to_string(), "oci://registry-1.docker.io/library/busybox");
    }
}
