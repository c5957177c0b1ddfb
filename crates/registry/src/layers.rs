//! The converted-layers referrer: what `sealfs convert` attaches to a container image's
//! manifest, and what a consumer (the snapshotter preparing a layer) reads back to find, for a
//! layer digest, the sealed image built from that layer and its digest.
//!
//! An OCI 1.1 image manifest, `artifactType` [`LAYERS_TYPE`], the empty config, `subject` the
//! container image's manifest (one platform's, never the index), and one layer per layer of
//! that image in the same order (the lowest first): the sealed image's blob
//! ([`LAYER_SEALED`](crate::manifest::LAYER_SEALED)), annotated with
//!
//! - [`ANNOTATION_LAYER_DIGEST`]: the original layer's digest (its compressed blob, what the
//!   image manifest lists and containerd names a layer by);
//! - [`ANNOTATION_LAYER_DIFF_ID`]: its uncompressed digest (the config's `rootfs.diff_ids`);
//! - [`ANNOTATION_LAYER_MANIFEST`]: the digest of the sealed image's own sealfs artifact
//!   manifest in the same repository (`oci://HOST/REPO@DIGEST` opens it as any pushed image;
//!   its signatures are attached to it);
//! - the image facts of a sealfs artifact ([`ImageFacts::annotations`]): the sealed image's
//!   digest (`sealfs digest`), hash algorithm, Merkle block size and EROFS length.
//!
//! The manifest itself may carry [`ANNOTATION_PREFETCH`]: a prefetch list
//! ([`sealfs_reader::prefetch`]), the paths in the container's root that its start reads, one a
//! line. One list for the image, not one per layer: its paths are the container's, and each
//! layer's mount resolves those it holds. It is a hint, unsigned like the rest of the referrer:
//! a list that does not parse, or past its bounds, is ignored with the reason
//! ([`ConvertedLayer::prefetch_ignored`]), never a failed pull; what a list can make a mount
//! fetch is bounded by [`sealfs_reader::prefetch::PREFETCH_MAX_SHARE`] of the layer (or
//! [`sealfs_reader::prefetch::PREFETCH_FLOOR`]), every block
//! verified.
//!
//! The referrer is a pointer, not a proof: a consumer trusts a sealed layer through its
//! signatures (statements naming the layer digest) or a digest it has from elsewhere.

use crate::manifest::{
    empty_descriptor, Descriptor, ImageFacts, ManifestError, Parsed, LAYER_SEALED, OCI_MANIFEST,
};
use crate::{Registry, RegistryError};
use oci_client::manifest::OciImageManifest;
pub use sealfs_reader::prefetch::{encode_prefetch_list, parse_prefetch_list};
use std::collections::BTreeMap;

/// The `artifactType` of a converted-layers referrer.
pub const LAYERS_TYPE: &str = "application/vnd.sealfs.layers.v1+json";
/// Annotation of a referrer layer: the original layer's (compressed) digest.
pub const ANNOTATION_LAYER_DIGEST: &str = "org.sealfs.layer.digest";
/// Annotation of a referrer layer: the original layer's uncompressed digest (its diffID).
pub const ANNOTATION_LAYER_DIFF_ID: &str = "org.sealfs.layer.diff-id";
/// Annotation of a referrer layer: the digest of the sealed image's own artifact manifest.
pub const ANNOTATION_LAYER_MANIFEST: &str = "org.sealfs.layer.manifest";
/// Annotation of the referrer manifest: the prefetch list (paths one a line).
pub const ANNOTATION_PREFETCH: &str = "org.sealfs.prefetch";

/// One layer of a container image and the sealed image built from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvertedLayer {
    /// The original layer's digest (`sha256:<hex>` of its compressed blob).
    pub layer_digest: String,
    /// The original layer's uncompressed digest.
    pub diff_id: String,
    /// The sealed image's blob (its annotations are the fields here: none kept).
    pub blob: Descriptor,
    /// The sealed image's artifact manifest (its digest), where its signatures hang.
    pub manifest: String,
    /// The sealed image's digest and seal facts.
    pub facts: ImageFacts,
    /// The referrer's prefetch list ([`ANNOTATION_PREFETCH`]), the same for every layer;
    /// empty when it has none or it was ignored.
    pub prefetch: Vec<String>,
    /// Why the referrer's prefetch list was ignored, if it was.
    pub prefetch_ignored: Option<String>,
}

fn bad(s: impl Into<String>) -> ManifestError {
    ManifestError(s.into())
}

/// The referrer listing `layers` for the image manifest `subject`, with the prefetch list
/// `prefetch` if it names any path (as [`sealfs_reader::prefetch::parse_prefetch_list`] checked
/// it).
pub fn layers_manifest(
    subject: &Descriptor,
    layers: &[ConvertedLayer],
    prefetch: &[String],
) -> OciImageManifest {
    let layers = layers
        .iter()
        .map(|l| {
            let mut blob = l.blob.clone();
            blob.media_type = LAYER_SEALED.into();
            blob.annotations = l.facts.annotations();
            blob.annotations.extend([
                (ANNOTATION_LAYER_DIGEST.to_string(), l.layer_digest.clone()),
                (ANNOTATION_LAYER_DIFF_ID.to_string(), l.diff_id.clone()),
                (ANNOTATION_LAYER_MANIFEST.to_string(), l.manifest.clone()),
            ]);
            blob.to_oci()
        })
        .collect();
    OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST.into()),
        config: empty_descriptor(),
        layers,
        subject: Some(subject.to_oci()),
        artifact_type: Some(LAYERS_TYPE.into()),
        annotations: (!prefetch.is_empty()).then(|| {
            BTreeMap::from([(
                ANNOTATION_PREFETCH.to_string(),
                sealfs_reader::prefetch::encode_prefetch_list(prefetch),
            )])
        }),
    }
}

/// The prefetch list of a referrer manifest: empty when it has none; `Err` says why one is
/// ignored.
pub fn prefetch_list(m: &OciImageManifest) -> Result<Vec<String>, String> {
    match m
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PREFETCH))
    {
        None => Ok(Vec::new()),
        Some(text) => sealfs_reader::prefetch::parse_prefetch_list(text)
            .map_err(|e| format!("annotation {ANNOTATION_PREFETCH}: {e}")),
    }
}

/// The converted layers a referrer lists, in order; anything else (another artifact type, a
/// layer of another media type, a missing or malformed annotation) is refused, naming what is
/// wrong.
pub fn converted_layers(m: &OciImageManifest) -> Result<Vec<ConvertedLayer>, ManifestError> {
    if m.artifact_type.as_deref() != Some(LAYERS_TYPE) {
        return Err(bad(format!(
            "artifactType {:?}: not sealfs converted layers ({LAYERS_TYPE})",
            m.artifact_type
        )));
    }
    let empty = BTreeMap::new();
    let (prefetch, prefetch_ignored) = match prefetch_list(m) {
        Ok(p) => (p, None),
        Err(why) => (Vec::new(), Some(why)),
    };
    m.layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let at = format!("layers[{i}]");
            let mut blob = Descriptor::from_oci(l, &at)?;
            if blob.media_type != LAYER_SEALED {
                return Err(bad(format!(
                    "{at}: media type {:?}, not {LAYER_SEALED}",
                    blob.media_type
                )));
            }
            let ann = l.annotations.as_ref().unwrap_or(&empty);
            let digest = |k: &str| {
                ann.get(k)
                    .filter(|v| crate::reference::is_digest(v))
                    .cloned()
                    .ok_or_else(|| bad(format!("{at}: no digest in annotation {k}")))
            };
            let facts = ImageFacts::from_annotations(ann).map_err(|e| bad(format!("{at}: {e}")))?;
            if facts.erofs_length > blob.size {
                return Err(bad(format!(
                    "{at}: the EROFS length {} is past the blob's {} bytes",
                    facts.erofs_length, blob.size
                )));
            }
            // What the annotations say is in the fields.
            blob.annotations.clear();
            Ok(ConvertedLayer {
                layer_digest: digest(ANNOTATION_LAYER_DIGEST)?,
                diff_id: digest(ANNOTATION_LAYER_DIFF_ID)?,
                manifest: digest(ANNOTATION_LAYER_MANIFEST)?,
                blob,
                facts,
                prefetch: prefetch.clone(),
                prefetch_ignored: prefetch_ignored.clone(),
            })
        })
        .collect()
}

impl Registry {
    /// The converted layers attached to the image manifest `subject` (its digest) in this
    /// repository: every referrer of type [`LAYERS_TYPE`] (the referrers API, or the
    /// `sha256-<hex>` tag), fetched by digest and read, in the order listed. A referrer whose
    /// `subject` is another manifest is refused.
    pub fn converted_layers(&self, subject: &str) -> Result<Vec<ConvertedLayer>, RegistryError> {
        let mut out = Vec::new();
        for entry in self.referrers(subject, LAYERS_TYPE)? {
            let reference = self.repository().sibling(None, Some(&entry.digest));
            let fetched = self.manifest(&reference)?;
            let refused = |why: String| RegistryError::Manifest {
                reference: reference.to_string(),
                digest: fetched.digest.clone(),
                source: ManifestError(why),
            };
            let m = match &fetched.parsed {
                Parsed::Manifest(m) => m,
                Parsed::Index(_) => {
                    return Err(refused("an index, not a referrer manifest".into()))
                }
            };
            let about = m.subject.as_ref().map(|s| s.digest.as_str());
            if about != Some(subject) {
                return Err(refused(format!(
                    "listed as a referrer of {subject} but its subject is {about:?}"
                )));
            }
            out.extend(converted_layers(m).map_err(|e| refused(e.0))?);
        }
        Ok(out)
    }

    /// The converted layer of the image manifest `subject` whose original layer is
    /// `layer_digest` (see [`Registry::converted_layers`]), if one is attached.
    pub fn converted_layer(
        &self,
        subject: &str,
        layer_digest: &str,
    ) -> Result<Option<ConvertedLayer>, RegistryError> {
        Ok(self
            .converted_layers(subject)?
            .into_iter()
            .find(|l| l.layer_digest == layer_digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(hex: char, media_type: &str, size: u64) -> Descriptor {
        Descriptor {
            media_type: media_type.into(),
            digest: format!("sha256:{}", hex.to_string().repeat(64)),
            size,
            annotations: BTreeMap::new(),
        }
    }

    #[test]
    fn a_referrer_reads_back_as_written_and_refuses_what_is_not_one() {
        let layer = ConvertedLayer {
            layer_digest: d('a', "", 0).digest,
            diff_id: d('b', "", 0).digest,
            blob: d('c', LAYER_SEALED, 8192),
            manifest: d('e', "", 0).digest,
            facts: ImageFacts {
                digest: format!("sha256:{}", "f".repeat(64)).parse().unwrap(),
                block_size: 4096,
                erofs_length: 4096,
            },
            prefetch: vec!["/usr/bin/python3".into(), "/etc/ld.so.cache".into()],
            prefetch_ignored: None,
        };
        let subject = d('1', OCI_MANIFEST, 500);
        let m = layers_manifest(&subject, &[layer.clone(), layer.clone()], &layer.prefetch);
        // Through JSON, as a registry serves it.
        let bytes = serde_json::to_vec(&m).unwrap();
        let back = match crate::manifest::parse(&bytes, None).unwrap() {
            crate::manifest::Parsed::Manifest(m) => m,
            _ => panic!("an index"),
        };
        assert_eq!(back.subject.as_ref().unwrap().digest, subject.digest);
        assert_eq!(
            converted_layers(&back).unwrap(),
            vec![layer.clone(), layer.clone()]
        );
        // A list that does not parse is ignored, the layers kept.
        let mut bad_list = (*back).clone();
        bad_list
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANNOTATION_PREFETCH.into(), "relative/path\n".into());
        let read = converted_layers(&bad_list).unwrap();
        assert!(read[0].prefetch.is_empty());
        assert!(
            read[0]
                .prefetch_ignored
                .as_deref()
                .unwrap()
                .contains("line 1"),
            "{read:?}"
        );
        let mut other = back.clone();
        other.artifact_type = Some("application/x".into());
        assert!(converted_layers(&other).is_err());
        let mut missing = (*back).clone();
        missing.layers[1]
            .annotations
            .as_mut()
            .unwrap()
            .remove(ANNOTATION_LAYER_DIGEST);
        let e = converted_layers(&missing).unwrap_err().to_string();
        assert!(
            e.contains("layers[1]") && e.contains(ANNOTATION_LAYER_DIGEST),
            "{e}"
        );
        let mut long = (*back).clone();
        long.layers[0].size = 10;
        let e = converted_layers(&long).unwrap_err().to_string();
        assert!(e.contains("past the blob"), "{e}");
    }
}
