//! Images in an OCI registry (`oci://HOST/REPO:TAG`, `docker://...`, `oci+http://...`; see
//! `sealfs_registry::reference`) as build input, through the registry crate's client: its
//! references, credentials (bearer tokens, basic auth from the environment or docker's
//! `config.json`), `--ca-cert`, its manifest fetch pinned to a digest, its platform choice from
//! an index ([`sealfs_registry::Registry::image_manifest`]) and its blob streams, which check
//! size and digest and resume a dropped connection by range
//! ([`sealfs_registry::BlobReader`]). Nothing of a layer is stored: each is streamed into the
//! build when its turn comes, as a layout's blob is read.
//!
//! The manifest the registry crate fetched and checked is read again by [`spec::parse`] (the
//! same bytes), so that an image from a registry and one from a layout go through the same
//! checks of configs and layer media types ([`OciImage::from_manifest`]).

use super::spec::{self, Descriptor, Platform};
use super::{Blobs, OciImage};
use crate::error::OciError;
use sealfs_registry::{manifest, ImageRef, Registry, RegistryOptions};
use std::io::{self, Read};

/// A registry's repository as a store of blobs.
pub struct RegistryBlobs {
    registry: Registry,
}

fn to_registry(d: &Descriptor) -> manifest::Descriptor {
    manifest::Descriptor {
        media_type: d.media_type.clone(),
        digest: d.digest.to_string(),
        size: d.size,
        annotations: d.annotations.clone(),
    }
}

impl Blobs for RegistryBlobs {
    fn open(&self, d: &Descriptor) -> io::Result<Box<dyn Read + Send>> {
        let reader = self
            .registry
            .blob_reader(&to_registry(d))
            .map_err(io::Error::other)?;
        Ok(Box::new(reader))
    }
}

/// Why an image in a registry could not be opened: the registry's own error (which names the
/// reference or the registry), or what is wrong with the image it served.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The registry could not be reached, refused, or served something its client refused.
    #[error(transparent)]
    Registry(#[from] sealfs_registry::RegistryError),
    /// The image is not one this importer builds (its config, its layers' media types).
    #[error(transparent)]
    Image(#[from] OciError),
}

/// The descriptor of a manifest the registry crate fetched, in this importer's terms.
fn descriptor_of(
    fetched: &sealfs_registry::FetchedManifest,
    at: &dyn Fn(String) -> OciError,
) -> Result<Descriptor, OciError> {
    let d = fetched.descriptor();
    Ok(Descriptor {
        media_type: d.media_type.clone(),
        digest: d.digest.parse().map_err(at)?,
        size: d.size,
        platform: None,
        annotations: d.annotations,
    })
}

/// The image manifest `fetched` holds, parsed by this importer.
fn manifest_of(
    fetched: &sealfs_registry::FetchedManifest,
    desc: &Descriptor,
) -> Result<spec::Manifest, OciError> {
    let name = fetched.reference.to_string();
    match spec::parse(&fetched.bytes, Some(&desc.media_type)) {
        Ok(spec::Parsed::Manifest(m)) => Ok(m),
        Ok(spec::Parsed::Index(_)) => {
            Err(OciError::new(&name, "an index where a manifest was chosen"))
        }
        Err(e) => Err(OciError::new(&name, e)),
    }
}

/// Connects to the registry `reference` names and resolves it for every platform it has (see
/// [`OciImage::resolve_all`]; an index of indexes is refused), or for `platform` only: the
/// images and the store their blobs are read from.
pub fn open_all(
    reference: &str,
    platform: Option<&Platform>,
    options: &RegistryOptions,
) -> Result<(Vec<OciImage>, RegistryBlobs), OpenError> {
    if let Some(p) = platform {
        let (image, blobs) = open(reference, p, options)?;
        return Ok((vec![image], blobs));
    }
    let at = |e: String| OciError::new(reference, e);
    let r: ImageRef = reference.parse().map_err(|e| at(format!("{e}")))?;
    let registry = Registry::connect(&r, options)?;
    let first = registry.manifest(&r)?;
    let desc = descriptor_of(&first, &at)?;
    let blobs = RegistryBlobs { registry };
    let name = first.reference.to_string();
    let index = match spec::parse(&first.bytes, Some(&desc.media_type)) {
        Ok(spec::Parsed::Manifest(m)) => {
            let image = OciImage::from_manifest_any(&blobs, &name, &desc, m)?;
            return Ok((vec![image], blobs));
        }
        Ok(spec::Parsed::Index(index)) => index,
        Err(e) => return Err(OciError::new(&name, e).into()),
    };
    let mut images = Vec::new();
    for entry in &index.manifests {
        let Some(p) = entry.platform.as_ref().filter(|p| !p.is_unknown()) else {
            continue;
        };
        let fetched = blobs
            .registry
            .manifest(&r.pinned(&entry.digest.to_string()))?;
        let d = descriptor_of(&fetched, &at)?;
        let m = manifest_of(&fetched, &d)?;
        let image = OciImage::from_manifest(&blobs, &fetched.reference.to_string(), &d, m, p)?;
        images.push(image);
    }
    if images.is_empty() {
        return Err(OciError::new(&name, "the index lists no platform's image").into());
    }
    Ok((images, blobs))
}

/// Connects to the registry `reference` names and resolves it for `platform`: the image and
/// the store its blobs are read from.
pub fn open(
    reference: &str,
    platform: &Platform,
    options: &RegistryOptions,
) -> Result<(OciImage, RegistryBlobs), OpenError> {
    let at = |e: String| OciError::new(reference, e);
    let r: ImageRef = reference.parse().map_err(|e| at(format!("{e}")))?;
    let registry = Registry::connect(&r, options)?;
    let wanted: manifest::PlatformSpec = platform
        .to_string()
        .parse()
        .map_err(|e: manifest::ManifestError| at(e.to_string()))?;
    let (fetched, _index) = registry.image_manifest(&r, &wanted)?;
    let desc = descriptor_of(&fetched, &at)?;
    let name = fetched.reference.to_string();
    let m = manifest_of(&fetched, &desc)?;
    let blobs = RegistryBlobs { registry };
    let image = OciImage::from_manifest(&blobs, &name, &desc, m, platform)?;
    Ok((image, blobs))
}
