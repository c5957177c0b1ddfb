//! A sealfs image in a registry, found ([`locate`]) and opened ([`open`]) as an HTTP image is:
//! its manifest resolved once (a tag becomes the digest it names, and every later request is for
//! that manifest's blobs, so a tag moved meanwhile changes nothing for this session), its blob read
//! lazily through [`sealfs_remote::RemoteObject`], every block checked against the seal.

use crate::client::{FetchedManifest, Registry};
use crate::manifest::{signature_layers, Artifact, Parsed, SIGNATURES_TYPE};
use crate::reference::ImageRef;
use crate::{RegistryError, RegistryOptions};
use sealfs_reader::{OpenError, OpenOptions, OpenedImage, Source};
use sealfs_remote::{RemoteObject, RemoteTrust};
use std::sync::Arc;

/// The most bytes of signatures read from one referrer (a signature entry is about a hundred).
pub const MAX_SIGNATURE_BYTES: u64 = 1 << 20;

/// A sealfs image found in a registry: its manifest (pinned) and what it says.
#[derive(Clone, Debug)]
pub struct RegistryImage {
    /// The repository, connected.
    pub registry: Registry,
    /// The image manifest (its reference pinned to its digest).
    pub manifest: FetchedManifest,
    /// The image it describes.
    pub artifact: Artifact,
    /// Whether the reference given named the manifest by digest: then the manifest, and the image
    /// digest its annotations state, are as fixed as that digest.
    pub pinned: bool,
}

/// Finds the sealfs image `reference` names: connects, fetches the manifest (checked against
/// the reference's digest when it has one) and reads the artifact's layout from it.
pub fn locate(
    reference: &ImageRef,
    options: &RegistryOptions,
) -> Result<RegistryImage, RegistryError> {
    let registry = Registry::connect(reference, options)?;
    let manifest = registry.manifest(reference)?;
    let artifact = match &manifest.parsed {
        Parsed::Manifest(m) => Artifact::from_manifest(m),
        Parsed::Index(_) => Err(crate::manifest::ManifestError(
            "an index, not a sealfs image's manifest".into(),
        )),
    }
    .map_err(|source| RegistryError::Manifest {
        reference: reference.to_string(),
        digest: manifest.digest.clone(),
        source,
    })?;
    Ok(RegistryImage {
        registry,
        manifest,
        artifact,
        pinned: reference.digest.is_some(),
    })
}

impl RegistryImage {
    /// The reference, pinned to the manifest's digest (`oci://HOST/REPO:TAG@sha256:...`).
    pub fn reference(&self) -> &ImageRef {
        &self.manifest.reference
    }

    /// The image digest the manifest states, when the manifest was named by digest (see
    /// [`RegistryImage::pinned`]); `None` otherwise: a tag's manifest is the registry's word.
    pub fn pinned_digest(&self) -> Option<sealfs_verity::Digest> {
        self.pinned.then_some(self.artifact.facts.digest)
    }

    /// The image blob, read lazily.
    pub fn image(&self) -> Result<Arc<RemoteObject>, RegistryError> {
        self.registry
            .blob_object(&self.artifact.image)
            .map(Arc::new)
    }

    /// The seal sidecar blob of a detached image, read lazily.
    pub fn sidecar(&self) -> Result<Option<Arc<RemoteObject>>, RegistryError> {
        self.artifact
            .sidecar
            .as_ref()
            .map(|d| self.registry.blob_object(d).map(Arc::new))
            .transpose()
    }

    /// Every signature entry attached to the image as a referrer, as one section in `IMAGE.sig`'s
    /// format (`None` when there are none). A referrer whose blob is not a signature section is
    /// skipped: anyone who may push to the repository may attach referrers, and only a signature
    /// by a given key counts anyway.
    pub fn signatures(&self) -> Result<Option<Vec<u8>>, RegistryError> {
        let mut all = Vec::new();
        for entry in self
            .registry
            .referrers(&self.manifest.digest, SIGNATURES_TYPE)?
        {
            let fetched = self.registry.manifest(
                &self
                    .registry
                    .repository()
                    .sibling(None, Some(&entry.digest)),
            )?;
            let Parsed::Manifest(m) = &fetched.parsed else {
                continue;
            };
            let Ok(layers) = signature_layers(m) else {
                continue;
            };
            for layer in layers {
                let bytes = self.registry.small_blob(&layer, MAX_SIGNATURE_BYTES)?;
                if let Ok(sigs) = sealfs_trust::parse_section(&bytes) {
                    all.extend(sigs);
                }
            }
        }
        Ok((!all.is_empty()).then(|| sealfs_trust::encode_section(&all)))
    }
}

/// What [`open`] read: the image found, the object its bytes come from (its counters), and the
/// options it was opened with (the expected digest a pinned reference brought, the signatures
/// found through the referrers, the sidecar blob).
pub struct Opened {
    /// The image as the registry describes it.
    pub found: RegistryImage,
    /// The image blob.
    pub object: Arc<RemoteObject>,
    /// The options the image was opened with.
    pub options: OpenOptions,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("found", &self.found)
            .field("object", &self.object)
            .finish_non_exhaustive()
    }
}

fn io<'a>(reference: &'a str, what: &'static str) -> impl Fn(RegistryError) -> OpenError + 'a {
    // The error goes under an `OpenError` that names the reference already: it is shown without
    // it. A content fault (a manifest or blob that is not what names it) stays findable under the
    // `io::Error` ([`registry_error`]), for a caller that tells it apart.
    move |e| {
        let kind = e.kind();
        OpenError::Io {
            name: reference.to_string(),
            what,
            source: std::io::Error::new(
                kind,
                Named {
                    reference: reference.to_string(),
                    error: e,
                },
            ),
        }
    }
}

/// A [`RegistryError`] shown under something that names `reference` already: its text without a
/// leading `reference: `.
#[derive(Debug)]
struct Named {
    reference: String,
    error: RegistryError,
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = self.error.to_string();
        let prefix = format!("{}: ", self.reference);
        f.write_str(text.strip_prefix(&prefix).unwrap_or(&text))
    }
}

impl std::error::Error for Named {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

/// The [`RegistryError`] under an `io::Error` this crate made (an [`OpenError::Io`]'s source, or
/// [`RegistryError::into_io`]'s), if there is one.
pub fn registry_error(e: &std::io::Error) -> Option<&RegistryError> {
    let inner = e.get_ref()?;
    inner
        .downcast_ref::<Named>()
        .map(|n| &n.error)
        .or_else(|| inner.downcast_ref::<RegistryError>())
}

/// Opens the sealfs image `reference` names, as [`sealfs_remote::open`] opens a URL: a tag's image
/// needs a digest or key in `options` unless `trust` allows self-consistent reading; a reference
/// pinned by digest brings its own expected image digest (the manifest's annotation, fixed by the
/// digest given). With keys and no detached signatures named, the signatures attached to the
/// image as referrers are read.
pub fn open(
    reference: &str,
    options: &OpenOptions,
    trust: RemoteTrust,
    registry_options: &RegistryOptions,
) -> Result<(OpenedImage, Opened), OpenError> {
    let parsed: ImageRef = reference.parse().map_err(io(reference, "parse"))?;
    if parsed.digest.is_none()
        && options.digest.is_none()
        && options.keys.is_empty()
        && trust == RemoteTrust::RequireAuthority
    {
        return Err(OpenError::Refused(format!(
            "{reference}: an image in a registry is read only against an expected digest or key: \
             name it by manifest digest (REF@sha256:...), give --digest (the image digest) or \
             --key, or pass --self-consistent to read it checked only against its own seal (anyone \
             who can push to the repository can change the seal)"
        )));
    }
    let found = locate(&parsed, registry_options).map_err(io(reference, "resolve"))?;
    let mut options = options.clone();
    if options.digest.is_none() && options.keys.is_empty() {
        options.digest = found.pinned_digest();
    }
    if !options.keys.is_empty() && options.signatures.is_none() {
        if let Some(bytes) = found
            .signatures()
            .map_err(io(reference, "read the signatures"))?
        {
            options.signatures = Some(Source::reader(
                Arc::new(bytes),
                format!("{} (signature referrers)", found.reference()),
            ));
        }
    }
    let object = found.image().map_err(io(reference, "open"))?;
    if let Some(sidecar) = found.sidecar().map_err(io(reference, "open the sidecar"))? {
        let name = sidecar.url().to_string();
        options.sidecar = Some(Source::reader(sidecar, name));
    }
    let name = format!("{}", found.reference());
    let opened = sealfs_reader::open(Source::reader(object.clone(), name), &options)?;
    Ok((
        opened,
        Opened {
            found,
            object,
            options,
        },
    ))
}
