//! OCI images as build input: an image in an OCI image layout (or, through the same [`Blobs`]
//! trait, a registry), its platform chosen from an index, its layers applied in order into one
//! flattened tree ([`OciImage::flattened`]) or kept one image per layer with their whiteouts as
//! the kernel's overlayfs reads them ([`OciImage::layer`]).
//!
//! - [`spec`]: indexes, manifests and configs parsed strictly; digests; platforms;
//! - [`layout`]: an OCI image layout on disk (`oci-layout`, `index.json`, `blobs/ALG/HEX`), an
//!   image in it chosen by `:REF` (the `org.opencontainers.image.ref.name` annotation) and
//!   platform;
//! - `verify`: every blob read with its size and digest checked as it is read; a layer that
//!   does not match its manifest fails the build, named by its digest, even when the tar
//!   reader had found nothing wrong with its bytes (or something else: the digest is the
//!   cause named);
//! - [`whiteout`]: `.wh.NAME` and `.wh..wh..opq`, applied (flattened) or kept (per layer);
//! - `registry` (with the `registry` feature): an image in an OCI registry, through
//!   `sealfs-registry`'s client, its layers streamed into the build without being stored;
//! - `convert` (with the `registry` feature): every layer of an image (every platform's) built
//!   into its own sealed image, signed, pushed and attached to the image's manifest as a
//!   referrer (`sealfs convert`).
//!
//! Layers are tar streams read by [`TarSource`] ([`TarSource::lazy_layers`]): each opened only
//! when its turn comes, read once, its compression (gzip, zstd or none) the one its media type
//! states, its file data kept in the build's temporary file. The image of a flattened OCI image
//! is, byte for byte, the image of the tree `umoci unpack` leaves (see
//! `crates/cli/tests/oci_import.rs`).

#[cfg(feature = "registry")]
pub mod convert;
pub mod layout;
#[cfg(feature = "registry")]
pub mod registry;
pub mod spec;
mod verify;
pub mod whiteout;

use crate::error::OciError;
use crate::tar::{Layer, TarSource};
use spec::{Config, Descriptor, Parsed, Platform};
use std::io::{self, Read};
use std::sync::{Arc, Mutex};
pub use verify::{Shared as SharedVerified, Verified};

/// Where an image's blobs come from: a layout's `blobs/` directory, a registry. The importer
/// checks every blob's size and digest as it reads it; a store need not.
pub trait Blobs: Send + Sync {
    /// Opens the blob `d` describes, from its start.
    fn open(&self, d: &Descriptor) -> io::Result<Box<dyn Read + Send>>;
}

/// Nested indexes followed at most (an index of indexes of manifests is two).
const MAX_DEPTH: usize = 4;

/// An image resolved to one manifest: its config and layers.
#[derive(Clone, Debug)]
pub struct OciImage {
    /// Names the image in messages (the layout's path and ref, the reference).
    pub name: String,
    /// The manifest's descriptor.
    pub manifest: Descriptor,
    /// What its config says.
    pub config: Config,
    /// Its layers, the lowest first, each a media type this importer reads.
    pub layers: Vec<Descriptor>,
}

/// Reads a manifest, index or config blob whole, checked.
pub(crate) fn fetch(blobs: &dyn Blobs, d: &Descriptor, name: &str) -> Result<Vec<u8>, OciError> {
    let at = |what: String| {
        OciError::new(
            format!(
                "{name}: {} {}",
                sealfs_text::escape(d.media_type.as_bytes()),
                d.digest
            ),
            what,
        )
    };
    let r = blobs.open(d).map_err(|e| at(e.to_string()))?;
    verify::read_small(r, d, spec::MAX_JSON_BYTES).map_err(|e| at(e.to_string()))
}

impl OciImage {
    /// The image `d` (a manifest or an index) names, an index resolved for `platform`.
    pub fn resolve(
        blobs: &dyn Blobs,
        name: &str,
        d: &Descriptor,
        platform: &Platform,
    ) -> Result<OciImage, OciError> {
        Self::resolve_at(blobs, name, d, platform, 0)
    }

    fn resolve_at(
        blobs: &dyn Blobs,
        name: &str,
        d: &Descriptor,
        platform: &Platform,
        depth: usize,
    ) -> Result<OciImage, OciError> {
        let bytes = fetch(blobs, d, name)?;
        let parsed = spec::parse(&bytes, Some(&d.media_type)).map_err(|e| {
            OciError::new(
                format!(
                    "{name}: {} {}",
                    sealfs_text::escape(d.media_type.as_bytes()),
                    d.digest
                ),
                e,
            )
        })?;
        match parsed {
            Parsed::Index(index) => {
                if depth >= MAX_DEPTH {
                    return Err(OciError::new(
                        name,
                        format!("indexes nested more than {MAX_DEPTH} deep"),
                    ));
                }
                let entry = choose(&index.manifests, platform)
                    .map_err(|e| OciError::new(format!("{name}: index {}", d.digest), e))?;
                Self::resolve_at(blobs, name, entry, platform, depth + 1)
            }
            Parsed::Manifest(m) => Self::from_manifest(blobs, name, d, m, platform),
        }
    }

    /// The image of manifest `m` (described by `d`): its config read and checked against the
    /// layers and `platform`, every layer's media type one this importer reads.
    pub fn from_manifest(
        blobs: &dyn Blobs,
        name: &str,
        d: &Descriptor,
        m: spec::Manifest,
        platform: &Platform,
    ) -> Result<OciImage, OciError> {
        Self::from_manifest_for(blobs, name, d, m, Some(platform))
    }

    /// The image of manifest `m` whatever platform its config names.
    pub fn from_manifest_any(
        blobs: &dyn Blobs,
        name: &str,
        d: &Descriptor,
        m: spec::Manifest,
    ) -> Result<OciImage, OciError> {
        Self::from_manifest_for(blobs, name, d, m, None)
    }

    /// [`OciImage::from_manifest`], the config's platform checked only when one is wanted.
    fn from_manifest_for(
        blobs: &dyn Blobs,
        name: &str,
        d: &Descriptor,
        m: spec::Manifest,
        platform: Option<&Platform>,
    ) -> Result<OciImage, OciError> {
        let config_at = format!("{name}: config {}", m.config.digest);
        if ![spec::OCI_CONFIG, spec::DOCKER_CONFIG].contains(&m.config.media_type.as_str()) {
            return Err(OciError::new(
                config_at,
                format!(
                    "unknown config media type {} (an image's config is {} or {})",
                    m.config.media_type,
                    spec::OCI_CONFIG,
                    spec::DOCKER_CONFIG
                ),
            ));
        }
        let config = spec::parse_config(&fetch(blobs, &m.config, name)?)
            .map_err(|e| OciError::new(&config_at, e))?;
        if let (Some(p), Some(platform)) = (&config.platform, platform) {
            if !p.serves(platform) {
                return Err(OciError::new(
                    name,
                    format!("the image is for {p} (its config says), not {platform}; choose it with --platform {p}"),
                ));
            }
        }
        for (i, l) in m.layers.iter().enumerate() {
            if spec::layer_compression(&l.media_type).is_none() {
                return Err(OciError::new(
                    format!("{name}: layer {}/{} {}", i + 1, m.layers.len(), l.digest),
                    format!(
                        "unknown layer media type {} (layers are tar, tar+gzip or tar+zstd)",
                        l.media_type
                    ),
                ));
            }
        }
        if config.diff_ids.len() != m.layers.len() {
            return Err(OciError::new(
                config_at,
                format!(
                    "{} rootfs.diff_ids for the manifest's {} layers",
                    config.diff_ids.len(),
                    m.layers.len()
                ),
            ));
        }
        Ok(OciImage {
            name: name.to_string(),
            manifest: d.clone(),
            config,
            layers: m.layers,
        })
    }

    /// Every image `d` (a manifest or an index) names: a manifest's image whatever its platform,
    /// an index's images for each platform it lists (entries without one, or `unknown/unknown`
    /// as attestations are, left out), nested indexes followed.
    pub fn resolve_all(
        blobs: &dyn Blobs,
        name: &str,
        d: &Descriptor,
    ) -> Result<Vec<OciImage>, OciError> {
        let mut out = Vec::new();
        Self::resolve_all_at(blobs, name, d, None, 0, &mut out)?;
        Ok(out)
    }

    fn resolve_all_at(
        blobs: &dyn Blobs,
        name: &str,
        d: &Descriptor,
        platform: Option<&Platform>,
        depth: usize,
        out: &mut Vec<OciImage>,
    ) -> Result<(), OciError> {
        let at = || {
            format!(
                "{name}: {} {}",
                sealfs_text::escape(d.media_type.as_bytes()),
                d.digest
            )
        };
        let bytes = fetch(blobs, d, name)?;
        match spec::parse(&bytes, Some(&d.media_type)).map_err(|e| OciError::new(at(), e))? {
            Parsed::Index(index) => {
                if depth >= MAX_DEPTH {
                    return Err(OciError::new(
                        name,
                        format!("indexes nested more than {MAX_DEPTH} deep"),
                    ));
                }
                for entry in &index.manifests {
                    let Some(p) = entry.platform.as_ref().filter(|p| !p.is_unknown()) else {
                        continue;
                    };
                    Self::resolve_all_at(blobs, name, entry, Some(p), depth + 1, out)?;
                }
                if out.is_empty() {
                    return Err(OciError::new(at(), "the index lists no platform's image"));
                }
                Ok(())
            }
            Parsed::Manifest(m) => {
                out.push(Self::from_manifest_for(blobs, name, d, m, platform)?);
                Ok(())
            }
        }
    }

    /// How messages name layer `i` (from 0): `IMAGE: layer N/M DIGEST`.
    pub fn layer_name(&self, i: usize) -> String {
        format!(
            "{}: layer {}/{} {}",
            self.name,
            i + 1,
            self.layers.len(),
            self.layers[i].digest
        )
    }

    /// The layer `i` (from 0) as a lazily opened tar stream, checked against its descriptor.
    fn tar_layer(&self, blobs: &Arc<dyn Blobs>, i: usize) -> Layer {
        let d = self.layers[i].clone();
        let slot: Arc<Mutex<Option<verify::Shared>>> = Arc::default();
        let (open_slot, open_blobs) = (slot.clone(), blobs.clone());
        Layer {
            name: self.layer_name(i),
            size: Some(d.size),
            compression: spec::layer_compression(&d.media_type),
            open: Box::new(move || {
                let shared = verify::Shared(Arc::new(Mutex::new(Verified::new(
                    open_blobs.open(&d)?,
                    &d,
                ))));
                *open_slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(shared.clone());
                Ok(Box::new(shared) as Box<dyn Read + Send>)
            }),
            finish: Box::new(
                move || match slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    Some(shared) => shared.finish(),
                    None => Ok(()),
                },
            ),
        }
    }

    /// The flattened tree: every layer applied in order, whiteouts applied.
    pub fn flattened(&self, blobs: Arc<dyn Blobs>) -> TarSource {
        let layers = (0..self.layers.len())
            .map(|i| self.tar_layer(&blobs, i))
            .collect();
        TarSource::lazy_layers(layers)
            .with_hook(whiteout::flatten())
            .with_acl_xattrs()
    }

    /// Layer `i` (from 0, the lowest) alone, its whiteouts kept as overlayfs reads them.
    pub fn layer(&self, blobs: Arc<dyn Blobs>, i: usize) -> TarSource {
        TarSource::lazy_layers(vec![self.tar_layer(&blobs, i)])
            .with_hook(whiteout::overlay())
            .with_acl_xattrs()
    }

    /// The index (from 0) of the layer `which` names: its number from 1 (the lowest) or its
    /// digest.
    pub fn find_layer(&self, which: &str) -> Result<usize, OciError> {
        let n = self.layers.len();
        if let Ok(k) = which.parse::<usize>() {
            if (1..=n).contains(&k) {
                return Ok(k - 1);
            }
            return Err(OciError::new(
                &self.name,
                format!("no layer {k}: the image has {n} (numbered from 1, the lowest)"),
            ));
        }
        self.layers
            .iter()
            .position(|l| l.digest.to_string() == which)
            .ok_or_else(|| OciError::new(&self.name, format!("no layer {which}")))
    }
}

/// The entry of an index for `platform`: the first whose platform serves it (entries without
/// one, such as attestations, never do).
pub fn choose<'a>(
    entries: &'a [Descriptor],
    platform: &Platform,
) -> Result<&'a Descriptor, String> {
    entries
        .iter()
        .find(|e| e.platform.as_ref().is_some_and(|p| p.serves(platform)))
        .ok_or_else(|| {
            let offered: Vec<String> = entries
                .iter()
                .filter_map(|e| e.platform.as_ref().map(|p| p.to_string()))
                .collect();
            format!(
                "no image for {platform} (it has {}); choose one with --platform",
                if offered.is_empty() {
                    "no platforms".to_string()
                } else {
                    offered.join(", ")
                }
            )
        })
}
