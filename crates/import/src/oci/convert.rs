//! `sealfs convert`: every layer of a container image built into its own sealed image, as
//! [`OciImage::layer`] reads it (its whiteouts kept as overlayfs reads them) and with the
//! options the snapshotter commits a pulled layer with ([`BuildOptions::sealed_layer`]), so
//! that a converted layer mounted lazily and the same layer pulled and committed are built
//! alike; optionally signed, and pushed beside the image as a referrer of its manifest.
//!
//! - **Streaming.** Each layer is read once from its store (a layout's blob, or a registry's
//!   stream) into the build, as `sealfs build --oci --oci-layer` reads it: nothing of the layer
//!   is stored whole, only its file data spills into the build's temporary file; its size and
//!   digest are checked as it is read ([`super::Verified`]), and a layer that does not match
//!   fails the conversion naming the layer's digest.
//! - **All first, then the registry.** Every layer of every image is built (and signed) before
//!   anything is pushed: a bad layer leaves the registry as it was, no referrer attached.
//! - **Push** ([`sealfs_registry::push_image`], untagged): each sealed image as a sealfs
//!   artifact of its own, put by its manifest digest, its signatures attached to it; then per
//!   image manifest (each platform's, never the index) one referrer
//!   ([`sealfs_registry::layers`]) listing, per layer, the layer's digest and diffID, the
//!   sealed image's digest, its blob and its artifact manifest, attached with
//!   [`sealfs_registry::Registry::attach`] (the referrers API, or the `sha256-<hex>` tag). The
//!   original manifest, index and signatures are not touched.
//! - **Signing** (`key`): each sealed image's statement (its digest and seal parameters, named
//!   by the original layer's digest) is signed into its seal, as `sealfs sign` does; a push
//!   carries it as any signed image's.

use super::layout::{self, OciLayout};
use super::registry as oci_registry;
use super::spec::{Digest, Platform};
use super::{Blobs, OciImage};
use crate::error::OciError;
use sealfs_builder::BuildOptions;
use sealfs_registry::layers::ConvertedLayer;
use sealfs_registry::manifest::{self, ImageFacts};
use sealfs_registry::push::{PushProgress, PushReport, ReferrersVia};
use sealfs_registry::{ImageRef, PushOptions, Registry, RegistryError, RegistryOptions};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How to convert.
#[derive(Default)]
pub struct ConvertOptions {
    /// Only the image for this platform (of an index); `None`: every platform's.
    pub platform: Option<Platform>,
    /// How to reach the registry (credentials, CAs, retries, upload chunks).
    pub registry: RegistryOptions,
    /// Where the sealed images are written and kept (`sha256-<hex of the layer digest>.sealfs`);
    /// `None`: a temporary directory, removed at the end (only with a push).
    pub out_dir: Option<PathBuf>,
    /// Push to this repository (its tag, if any, is not touched); `None`: no push.
    pub push: Option<ImageRef>,
    /// Sign each sealed image's statement with this key.
    pub key: Option<sealfs_trust::SigningKey>,
    /// The version each signed statement carries (what a `--min-version` floor compares);
    /// `None`: none.
    pub version: Option<String>,
    /// Build threads (0: one per CPU).
    pub threads: usize,
    /// A prefetch list (paths in the container's root its start reads, as
    /// `sealfs_reader::prefetch::parse_prefetch_list` reads them), put in the referrer
    /// ([`sealfs_registry::layers::ANNOTATION_PREFETCH`]); empty: none.
    pub prefetch: Vec<String>,
}

/// Why a conversion failed: what, and where.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// The options do not make a conversion.
    #[error("{0}")]
    Usage(String),
    /// The image could not be opened or read (its manifests, its config).
    #[error(transparent)]
    Image(#[from] OciError),
    /// The registry could not be reached, refused, or served something its client refused.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// A layer's sealed image could not be built (its bytes do not match its digest, its tar is
    /// damaged, the disk is full); the build's error names the layer (the tar stream's name is
    /// the layer's) or the output path.
    #[error("{source}")]
    Build {
        /// The layer (`IMAGE: layer N/M DIGEST`).
        layer: String,
        /// Why.
        source: sealfs_builder::BuildError,
    },
    /// A sealed image could not be signed.
    #[error("{layer}: signing {}: {source}", sealfs_text::escape_path(path))]
    Sign {
        /// The layer.
        layer: String,
        /// The sealed image.
        path: PathBuf,
        /// Why.
        source: sealfs_trust::SignError,
    },
    /// A file or directory of the output.
    #[error("{path}: {source}")]
    Io {
        /// The path, escaped.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

impl ConvertError {
    /// Whether the input is at fault (a layer that does not match its digest, a registry that
    /// served other bytes than named), rather than the network, the disk or the options.
    pub fn is_content_fault(&self) -> bool {
        match self {
            ConvertError::Image(_) => true,
            ConvertError::Registry(e) => e.is_content_fault(),
            ConvertError::Build { source, .. } => {
                !matches!(source, sealfs_builder::BuildError::Io { .. })
            }
            _ => false,
        }
    }
}

/// The push of one sealed image.
#[derive(Clone, Debug)]
pub struct PushedLayer {
    /// The sealed image's artifact manifest (pinned reference and digest).
    pub reference: ImageRef,
    /// Its manifest's digest.
    pub manifest_digest: String,
    /// The sealed image's blob.
    pub blob: manifest::Descriptor,
    /// What the push did, blob by blob.
    pub report: PushReport,
}

/// One layer converted.
#[derive(Clone, Debug)]
pub struct LayerReport {
    /// The original layer's descriptor (its compressed digest).
    pub layer: super::spec::Descriptor,
    /// Its uncompressed digest (the config's `rootfs.diff_ids` entry).
    pub diff_id: Digest,
    /// The sealed image's digest and seal facts.
    pub facts: ImageFacts,
    /// The sealed image's bytes.
    pub bytes: u64,
    /// Where it is, when kept (`out_dir`).
    pub path: Option<PathBuf>,
    /// Whether its statement was signed.
    pub signed: bool,
    /// Its push.
    pub pushed: Option<PushedLayer>,
}

/// The referrer attached to one image manifest.
#[derive(Clone, Debug)]
pub struct Attached {
    /// The referrer manifest's digest.
    pub digest: String,
    /// Where it is listed.
    pub via: ReferrersVia,
}

/// One image (one platform's manifest) converted.
#[derive(Clone, Debug)]
pub struct ImageReport {
    /// The image, as messages name it.
    pub name: String,
    /// The platform its config names.
    pub platform: Option<Platform>,
    /// Its manifest.
    pub manifest: super::spec::Descriptor,
    /// Its layers, the lowest first.
    pub layers: Vec<LayerReport>,
    /// The referrer attached to its manifest (with a push).
    pub referrer: Option<Attached>,
}

/// What a conversion did.
#[derive(Clone, Debug)]
pub struct ConvertReport {
    /// Every image converted.
    pub images: Vec<ImageReport>,
}

/// The file a layer's sealed image is written to in the output directory.
pub fn layer_file_name(layer: &Digest) -> String {
    format!("{}-{}.sealfs", layer.algorithm.name(), layer.hex)
}

/// Opens the image(s) `source` names: a registry reference (see
/// [`sealfs_registry::is_image_ref`]) or `LAYOUT[:REF]`.
pub fn open_images(
    source: &str,
    platform: Option<&Platform>,
    options: &RegistryOptions,
) -> Result<(Vec<OciImage>, Arc<dyn Blobs>), ConvertError> {
    if sealfs_registry::is_image_ref(source) {
        let (images, blobs) =
            oci_registry::open_all(source, platform, options).map_err(|e| match e {
                oci_registry::OpenError::Registry(e) => ConvertError::Registry(e),
                oci_registry::OpenError::Image(e) => ConvertError::Image(e),
            })?;
        return Ok((images, Arc::new(blobs)));
    }
    let (dir, reference) = layout::split_arg(source);
    let layout = OciLayout::open(&dir)?;
    let images = match platform {
        Some(p) => vec![layout.image(reference.as_deref(), p)?],
        None => layout.images(reference.as_deref())?,
    };
    Ok((images, Arc::new(layout)))
}

/// A layer built: where, and what its seal says.
struct Built {
    path: PathBuf,
    facts: ImageFacts,
    bytes: u64,
    signed: bool,
    pushed: Option<PushedLayer>,
}

/// Converts the image(s) `source` names (see [`open_images`]): each layer built into a sealed
/// image (once per layer digest), signed with `options.key`, kept in `options.out_dir`, and
/// with `options.push` pushed with one referrer per image manifest. `build_progress` follows
/// the builds, `push_progress` the uploads.
pub fn convert(
    source: &str,
    options: &ConvertOptions,
    build_progress: &dyn sealfs_builder::Progress,
    push_progress: &dyn PushProgress,
) -> Result<ConvertReport, ConvertError> {
    // The repository: its tag, if any, is neither moved nor named in what is pushed.
    let target = options.push.as_ref().map(|t| t.sibling(None, None));
    if target.is_none() && options.out_dir.is_none() {
        return Err(ConvertError::Usage(
            "nothing to do: name an output directory or a repository to push to".into(),
        ));
    }
    let (images, blobs) = open_images(source, options.platform.as_ref(), &options.registry)?;
    let temp;
    let dir: &Path = match &options.out_dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| ConvertError::Io {
                path: sealfs_text::escape_path(d),
                source: e,
            })?;
            d
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("sealfs-convert-")
                .tempdir()
                .map_err(|e| ConvertError::Io {
                    path: sealfs_text::escape_path(&std::env::temp_dir()),
                    source: e,
                })?;
            temp.path()
        }
    };
    let build_options = BuildOptions {
        threads: options.threads,
        ..BuildOptions::sealed_layer()
    };

    // Every layer built (and signed) before anything is pushed.
    let mut built: HashMap<String, Built> = HashMap::new();
    for image in &images {
        for (i, layer) in image.layers.iter().enumerate() {
            let key = layer.digest.to_string();
            if built.contains_key(&key) {
                continue;
            }
            let name = image.layer_name(i);
            let path = dir.join(layer_file_name(&layer.digest));
            let mut tar = image.layer(blobs.clone(), i);
            let summary =
                sealfs_builder::build_from(&mut tar, &path, &build_options, build_progress)
                    .map_err(|source| ConvertError::Build {
                        layer: name.clone(),
                        source,
                    })?;
            let seal = summary
                .seal
                .ok_or_else(|| ConvertError::Usage(format!("{name}: the build made no seal")))?;
            let signed = match &options.key {
                Some(k) => {
                    sign(&path, &layer.digest, options.version.as_deref(), k).map_err(
                        |source| ConvertError::Sign {
                            layer: name.clone(),
                            path: path.clone(),
                            source,
                        },
                    )?;
                    true
                }
                None => false,
            };
            let bytes = std::fs::metadata(&path)
                .map_err(|e| ConvertError::Io {
                    path: sealfs_text::escape_path(&path),
                    source: e,
                })?
                .len();
            built.insert(
                key,
                Built {
                    path,
                    facts: ImageFacts {
                        digest: seal.digest,
                        block_size: build_options
                            .seal
                            .as_ref()
                            .map_or(4096, |s| s.params.block_size() as u64),
                        erofs_length: seal.erofs_length,
                    },
                    bytes,
                    signed,
                    pushed: None,
                },
            );
        }
    }

    let mut reports = Vec::new();
    let registry = match &target {
        Some(t) => Some(Registry::connect(t, &options.registry)?),
        None => None,
    };
    for image in &images {
        let mut layers = Vec::new();
        for (i, layer) in image.layers.iter().enumerate() {
            let b = built.get_mut(&layer.digest.to_string()).ok_or_else(|| {
                ConvertError::Usage(format!("{}: not built", image.layer_name(i)))
            })?;
            if let (Some(t), None) = (&target, &b.pushed) {
                let push = PushOptions {
                    untagged: true,
                    ..PushOptions::default()
                };
                let report = sealfs_registry::push_image(
                    &b.path,
                    t,
                    &options.registry,
                    &push,
                    push_progress,
                )?;
                let blob = report
                    .blobs
                    .iter()
                    .find(|p| p.descriptor.media_type == manifest::LAYER_SEALED)
                    .map(|p| p.descriptor.clone())
                    .ok_or_else(|| {
                        ConvertError::Usage(format!(
                            "{}: the push has no image blob",
                            image.layer_name(i)
                        ))
                    })?;
                b.pushed = Some(PushedLayer {
                    reference: report.reference.clone(),
                    manifest_digest: report.manifest_digest.clone(),
                    blob,
                    report,
                });
            }
            layers.push(LayerReport {
                layer: layer.clone(),
                diff_id: image.config.diff_ids[i].clone(),
                facts: b.facts.clone(),
                bytes: b.bytes,
                path: options.out_dir.as_ref().map(|_| b.path.clone()),
                signed: b.signed,
                pushed: b.pushed.clone(),
            });
        }
        let referrer = match &registry {
            Some(r) => Some(attach(r, image, &layers, &options.prefetch)?),
            None => None,
        };
        reports.push(ImageReport {
            name: image.name.clone(),
            platform: image.config.platform.clone(),
            manifest: image.manifest.clone(),
            layers,
            referrer,
        });
    }
    Ok(ConvertReport { images: reports })
}

/// Signs the sealed image at `path` (built from the layer `layer`) into its seal, its statement
/// carrying `version` if any.
fn sign(
    path: &Path,
    layer: &Digest,
    version: Option<&str>,
    key: &sealfs_trust::SigningKey,
) -> Result<(), sealfs_trust::SignError> {
    let mut statement = sealfs_trust::seal_statement(path, None)?;
    statement.name = Some(layer.to_string());
    statement.version = version.map(str::to_string);
    statement
        .validate()
        .map_err(|e| sealfs_trust::SignError::Signature(e.to_string()))?;
    let target = sealfs_trust::SignTarget {
        image: path.to_path_buf(),
        sidecar: None,
        detached: false,
    };
    sealfs_trust::sign_image(&target, key, &statement).map(drop)
}

/// Attaches the referrer listing `layers` (all pushed) to `image`'s manifest.
fn attach(
    registry: &Registry,
    image: &OciImage,
    layers: &[LayerReport],
    prefetch: &[String],
) -> Result<Attached, ConvertError> {
    let subject = manifest::Descriptor {
        media_type: image.manifest.media_type.clone(),
        digest: image.manifest.digest.to_string(),
        size: image.manifest.size,
        annotations: BTreeMap::new(),
    };
    let converted = layers
        .iter()
        .map(|l| {
            let pushed = l.pushed.as_ref().ok_or_else(|| {
                ConvertError::Usage(format!(
                    "{}: layer {} not pushed",
                    image.name, l.layer.digest
                ))
            })?;
            Ok(ConvertedLayer {
                layer_digest: l.layer.digest.to_string(),
                diff_id: l.diff_id.to_string(),
                blob: pushed.blob.clone(),
                manifest: pushed.manifest_digest.clone(),
                facts: l.facts.clone(),
                prefetch: Vec::new(),
                prefetch_ignored: None,
            })
        })
        .collect::<Result<Vec<_>, ConvertError>>()?;
    let referrer = sealfs_registry::layers::layers_manifest(&subject, &converted, prefetch);
    let (digest, via) = registry.attach(&subject, &referrer)?;
    Ok(Attached { digest, via })
}
