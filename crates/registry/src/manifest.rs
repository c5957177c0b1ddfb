//! Manifests and indexes: parsing what a registry serves (strictly, without panicking: this is a
//! fuzzed parser), the sealfs artifact's layout, and choosing a platform from an index.
//!
//! # The sealfs artifact
//!
//! An OCI 1.1 image manifest (`application/vnd.oci.image.manifest.v1+json`) with
//! `artifactType` [`ARTIFACT_TYPE`], the empty config (`application/vnd.oci.empty.v1+json`,
//! `{}`), and either one layer, the sealed image ([`LAYER_SEALED`]), or two, a plain EROFS image
//! ([`LAYER_EROFS`]) and its seal sidecar ([`LAYER_SEAL`]). Its annotations
//! ([`ANNOTATION_DIGEST`] and the others) say the image digest, hash algorithm, Merkle block size
//! and EROFS length, for people and tools that look; a reader takes them as an expected digest
//! only when the manifest itself was named by digest (then they are as fixed as the digest that
//! names them), never from a manifest found through a tag.
//!
//! Signatures travel as a second artifact, [`SIGNATURES_TYPE`], whose `subject` is the image's
//! manifest: one layer holding signature entries in the format of `IMAGE.sig`
//! (`sealfs_trust::encode_section`).

use crate::reference::is_digest;
use oci_client::manifest::{ImageIndexEntry, OciDescriptor, OciImageIndex, OciImageManifest};
use std::collections::BTreeMap;

/// The `artifactType` of a sealfs image manifest.
pub const ARTIFACT_TYPE: &str = "application/vnd.sealfs.image.v1";
/// The layer of an attached image: EROFS bytes, Merkle tree and seal trailer in one blob.
pub const LAYER_SEALED: &str = "application/vnd.sealfs.image.v1.sealed";
/// The first layer of a detached image: the plain EROFS bytes.
pub const LAYER_EROFS: &str = "application/vnd.sealfs.image.v1.erofs";
/// The second layer of a detached image: the seal sidecar.
pub const LAYER_SEAL: &str = "application/vnd.sealfs.image.v1.seal";
/// The `artifactType` (and layer media type) of a signatures artifact.
pub const SIGNATURES_TYPE: &str = "application/vnd.sealfs.signatures.v1";
/// Annotation: the image digest (`sha256:<hex>`, the fs-verity digest of the EROFS bytes).
pub const ANNOTATION_DIGEST: &str = "org.sealfs.image.digest";
/// Annotation: the hash algorithm (`sha256`, `sha512`).
pub const ANNOTATION_HASH: &str = "org.sealfs.image.hash-algorithm";
/// Annotation: the Merkle block size in bytes.
pub const ANNOTATION_BLOCK_SIZE: &str = "org.sealfs.image.block-size";
/// Annotation: the EROFS length in bytes.
pub const ANNOTATION_EROFS_LENGTH: &str = "org.sealfs.image.erofs-length";
/// The OCI annotation for a layer's file name.
pub const ANNOTATION_TITLE: &str = "org.opencontainers.image.title";

/// The OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image index media type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker's image manifest (schema 2) media type.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker's manifest list media type.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The empty descriptor's media type (OCI 1.1).
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The digest of `{}`, the empty descriptor's content.
pub const EMPTY_DIGEST: &str =
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
/// Every manifest media type this crate reads (the `Accept` of a manifest request).
pub const ACCEPTED: [&str; 4] = [OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST];
/// The largest manifest read (the distribution registry refuses larger ones too).
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;

/// Why a manifest or index was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ManifestError(pub String);

fn bad(s: impl Into<String>) -> ManifestError {
    ManifestError(s.into())
}

/// A content descriptor, checked: a digest this crate can verify and a size that is not negative.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// `sha256:<hex>` (or `sha512:`).
    pub digest: String,
    /// Bytes.
    pub size: u64,
    /// Its annotations.
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    pub(crate) fn from_oci(d: &OciDescriptor, what: &str) -> Result<Descriptor, ManifestError> {
        check_descriptor(&d.digest, d.size, what)?;
        Ok(Descriptor {
            media_type: d.media_type.clone(),
            digest: d.digest.clone(),
            size: d.size as u64,
            annotations: d.annotations.clone().unwrap_or_default(),
        })
    }

    /// The `oci-client` form.
    pub fn to_oci(&self) -> OciDescriptor {
        OciDescriptor {
            media_type: self.media_type.clone(),
            digest: self.digest.clone(),
            size: self.size as i64,
            urls: None,
            annotations: (!self.annotations.is_empty()).then(|| self.annotations.clone()),
            artifact_type: None,
        }
    }
}

fn check_descriptor(digest: &str, size: i64, what: &str) -> Result<(), ManifestError> {
    if !is_digest(digest) {
        return Err(bad(format!(
            "{what}: digest {digest:?} is not sha256:<64 hex> or sha512:<128 hex>"
        )));
    }
    if size < 0 {
        return Err(bad(format!("{what}: negative size {size}")));
    }
    Ok(())
}

/// A parsed manifest or index.
#[derive(Clone, Debug)]
pub enum Parsed {
    /// An image manifest (OCI or Docker schema 2).
    Manifest(Box<OciImageManifest>),
    /// An index (OCI) or manifest list (Docker).
    Index(OciImageIndex),
}

/// Parses a manifest or index. The kind is told by the `mediaType` in the body when there is one
/// (it must then be one of [`ACCEPTED`] and agree with `content_type`, when the server sent one of
/// those), else by its shape; the schema version must be 2 and every descriptor checked.
pub fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Parsed, ManifestError> {
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(bad(format!(
            "{} bytes: larger than the {MAX_MANIFEST_BYTES} a manifest may have",
            bytes.len()
        )));
    }
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let obj = value.as_object().ok_or_else(|| bad("not a JSON object"))?;
    if obj.get("schemaVersion").and_then(|v| v.as_u64()) != Some(2) {
        return Err(bad("schemaVersion is not 2"));
    }
    let body_type = match obj.get("mediaType") {
        None => None,
        Some(serde_json::Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(bad("mediaType is not a string")),
    };
    let header = content_type
        .map(|c| c.split(';').next().unwrap_or("").trim())
        .filter(|c| ACCEPTED.contains(c));
    if let (Some(b), Some(h)) = (body_type, header) {
        if b != h {
            return Err(bad(format!(
                "the body says mediaType {b} but the server sent Content-Type {h}"
            )));
        }
    }
    let kind = body_type.or(header);
    let is_index = match kind {
        Some(OCI_INDEX | DOCKER_LIST) => true,
        Some(OCI_MANIFEST | DOCKER_MANIFEST) => false,
        Some(other) => return Err(bad(format!("unsupported mediaType {other}"))),
        None => match (obj.contains_key("manifests"), obj.contains_key("layers")) {
            (true, false) => true,
            (false, true) => false,
            _ => return Err(bad("neither a manifest (layers) nor an index (manifests)")),
        },
    };
    if is_index {
        let index: OciImageIndex =
            serde_json::from_value(value).map_err(|e| bad(format!("index: {e}")))?;
        for (i, m) in index.manifests.iter().enumerate() {
            check_descriptor(&m.digest, m.size, &format!("manifests[{i}]"))?;
        }
        Ok(Parsed::Index(index))
    } else {
        let manifest: OciImageManifest =
            serde_json::from_value(value).map_err(|e| bad(format!("manifest: {e}")))?;
        check_descriptor(&manifest.config.digest, manifest.config.size, "config")?;
        for (i, l) in manifest.layers.iter().enumerate() {
            check_descriptor(&l.digest, l.size, &format!("layers[{i}]"))?;
        }
        if let Some(s) = &manifest.subject {
            check_descriptor(&s.digest, s.size, "subject")?;
        }
        Ok(Parsed::Manifest(Box::new(manifest)))
    }
}

/// The facts a sealfs artifact's annotations state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageFacts {
    /// The image digest (`sha256:<hex>`).
    pub digest: sealfs_verity::Digest,
    /// The Merkle block size.
    pub block_size: u64,
    /// The EROFS length.
    pub erofs_length: u64,
}

impl ImageFacts {
    /// The facts `annotations` state ([`ANNOTATION_DIGEST`] and the others), checked: a digest
    /// this crate reads, its algorithm the one [`ANNOTATION_HASH`] names, numbers that are
    /// numbers, a block size that is a power of two.
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Result<ImageFacts, ManifestError> {
        let get = |k: &str| {
            annotations
                .get(k)
                .map(String::as_str)
                .ok_or_else(|| bad(format!("no annotation {k}")))
        };
        let digest: sealfs_verity::Digest = get(ANNOTATION_DIGEST)?
            .parse()
            .map_err(|e| bad(format!("annotation {ANNOTATION_DIGEST}: {e}")))?;
        let alg = get(ANNOTATION_HASH)?;
        if alg != digest.alg().to_string() {
            return Err(bad(format!(
                "annotation {ANNOTATION_HASH} {alg} does not match the digest's algorithm"
            )));
        }
        let num = |k: &str| -> Result<u64, ManifestError> {
            let v = get(k)?;
            v.parse::<u64>()
                .map_err(|_| bad(format!("annotation {k} {v:?} is not a number")))
        };
        let facts = ImageFacts {
            digest,
            block_size: num(ANNOTATION_BLOCK_SIZE)?,
            erofs_length: num(ANNOTATION_EROFS_LENGTH)?,
        };
        if !facts.block_size.is_power_of_two() {
            return Err(bad(format!(
                "annotation {ANNOTATION_BLOCK_SIZE} {} is not a power of two",
                facts.block_size
            )));
        }
        Ok(facts)
    }

    /// The annotations that state these facts.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (ANNOTATION_DIGEST.to_string(), self.digest.to_string()),
            (ANNOTATION_HASH.to_string(), self.digest.alg().to_string()),
            (
                ANNOTATION_BLOCK_SIZE.to_string(),
                self.block_size.to_string(),
            ),
            (
                ANNOTATION_EROFS_LENGTH.to_string(),
                self.erofs_length.to_string(),
            ),
        ])
    }
}

/// A sealfs image as its manifest describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// The blob read as the image (the sealed image, or the plain EROFS of a detached one).
    pub image: Descriptor,
    /// The seal sidecar of a detached image.
    pub sidecar: Option<Descriptor>,
    /// What the annotations state.
    pub facts: ImageFacts,
}

impl Artifact {
    /// The sealfs image a manifest describes; anything else (another artifact type, an image of
    /// another layout, missing or malformed annotations) is refused, naming what is wrong.
    pub fn from_manifest(m: &OciImageManifest) -> Result<Artifact, ManifestError> {
        match m.artifact_type.as_deref() {
            Some(ARTIFACT_TYPE) => {}
            Some(other) => {
                return Err(bad(format!(
                    "artifactType {other}: not a sealfs image ({ARTIFACT_TYPE})"
                )))
            }
            None => {
                return Err(bad(format!(
                    "no artifactType: not a sealfs image ({ARTIFACT_TYPE}); a container image \
                     is read by `sealfs build --oci`, not here"
                )))
            }
        }
        let layers: Vec<Descriptor> = m
            .layers
            .iter()
            .enumerate()
            .map(|(i, l)| Descriptor::from_oci(l, &format!("layers[{i}]")))
            .collect::<Result<_, _>>()?;
        let types: Vec<&str> = layers.iter().map(|l| l.media_type.as_str()).collect();
        let (image, sidecar) = match types.as_slice() {
            [LAYER_SEALED] => (layers[0].clone(), None),
            [LAYER_EROFS, LAYER_SEAL] => (layers[0].clone(), Some(layers[1].clone())),
            _ => {
                return Err(bad(format!(
                    "layers {types:?}: a sealfs image has [{LAYER_SEALED}] or [{LAYER_EROFS}, \
                     {LAYER_SEAL}]"
                )))
            }
        };
        let empty = BTreeMap::new();
        let facts = ImageFacts::from_annotations(m.annotations.as_ref().unwrap_or(&empty))?;
        if facts.erofs_length > image.size {
            return Err(bad(format!(
                "annotation {ANNOTATION_EROFS_LENGTH} {} is past the image's {} bytes",
                facts.erofs_length, image.size
            )));
        }
        Ok(Artifact {
            image,
            sidecar,
            facts,
        })
    }

    /// The manifest for this artifact: the empty config, the layers, the annotations, and a
    /// `subject` when given. Serialized as `serde_json` writes it (the bytes pushed are the bytes
    /// hashed; nothing reserializes them).
    pub fn to_manifest(&self) -> OciImageManifest {
        let mut layers = vec![self.image.to_oci()];
        if let Some(s) = &self.sidecar {
            layers.push(s.to_oci());
        }
        let annotations = self.facts.annotations();
        OciImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST.into()),
            config: empty_descriptor(),
            layers,
            subject: None,
            artifact_type: Some(ARTIFACT_TYPE.into()),
            annotations: Some(annotations),
        }
    }
}

/// The empty descriptor (`{}`), the config of an artifact without one.
pub fn empty_descriptor() -> OciDescriptor {
    OciDescriptor {
        media_type: EMPTY_MEDIA_TYPE.into(),
        digest: EMPTY_DIGEST.into(),
        size: 2,
        urls: None,
        annotations: None,
        artifact_type: None,
    }
}

/// The signatures artifact for the manifest `subject`: one layer `blob` (signature entries).
pub fn signatures_manifest(subject: &Descriptor, blob: &Descriptor) -> OciImageManifest {
    OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_MANIFEST.into()),
        config: empty_descriptor(),
        layers: vec![blob.to_oci()],
        subject: Some(subject.to_oci()),
        artifact_type: Some(SIGNATURES_TYPE.into()),
        annotations: None,
    }
}

/// The signature blobs of a signatures artifact (each a layer of [`SIGNATURES_TYPE`]).
pub fn signature_layers(m: &OciImageManifest) -> Result<Vec<Descriptor>, ManifestError> {
    if m.artifact_type.as_deref() != Some(SIGNATURES_TYPE) {
        return Err(bad(format!(
            "artifactType {:?}: not sealfs signatures ({SIGNATURES_TYPE})",
            m.artifact_type
        )));
    }
    m.layers
        .iter()
        .enumerate()
        .filter(|(_, l)| l.media_type == SIGNATURES_TYPE)
        .map(|(i, l)| Descriptor::from_oci(l, &format!("layers[{i}]")))
        .collect()
}

/// A platform, `OS/ARCH[/VARIANT]` (`linux/amd64`, `linux/arm64/v8`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformSpec {
    /// The operating system (`linux`).
    pub os: String,
    /// The architecture (`amd64`).
    pub architecture: String,
    /// The variant (`v8`), if one is asked for.
    pub variant: Option<String>,
}

impl std::str::FromStr for PlatformSpec {
    type Err = ManifestError;

    fn from_str(s: &str) -> Result<PlatformSpec, ManifestError> {
        let parts: Vec<&str> = s.split('/').collect();
        let ok =
            |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Ok(PlatformSpec {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: None,
            }),
            [os, arch, v] if ok(os) && ok(arch) && ok(v) => Ok(PlatformSpec {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: Some(v.to_string()),
            }),
            _ => Err(bad(format!("platform {s:?} is not OS/ARCH[/VARIANT]"))),
        }
    }
}

impl std::fmt::Display for PlatformSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

/// The entry of `index` for `platform`: the first whose os and architecture match (and variant,
/// when one is asked for); entries without a platform (attestations, signatures) never match.
/// `None` lists what the index offers in the error.
pub fn select_platform<'a>(
    index: &'a OciImageIndex,
    platform: &PlatformSpec,
) -> Result<&'a ImageIndexEntry, ManifestError> {
    let offered: Vec<String> = index
        .manifests
        .iter()
        .filter_map(|m| m.platform.as_ref())
        .map(|p| match &p.variant {
            Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
            None => format!("{}/{}", p.os, p.architecture),
        })
        .collect();
    index
        .manifests
        .iter()
        .find(|m| {
            m.platform.as_ref().is_some_and(|p| {
                p.os.to_string() == platform.os
                    && p.architecture.to_string() == platform.architecture
                    && platform
                        .variant
                        .as_ref()
                        .is_none_or(|v| p.variant.as_deref() == Some(v.as_str()))
            })
        })
        .ok_or_else(|| {
            bad(format!(
                "no manifest for {platform} in the index (it has {})",
                if offered.is_empty() {
                    "no platforms".to_string()
                } else {
                    offered.join(", ")
                }
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact() -> Artifact {
        let d = |t: &str, c: char| Descriptor {
            media_type: t.into(),
            digest: format!("sha256:{}", c.to_string().repeat(64)),
            size: 8192,
            annotations: BTreeMap::new(),
        };
        Artifact {
            image: d(LAYER_EROFS, 'a'),
            sidecar: Some(d(LAYER_SEAL, 'b')),
            facts: ImageFacts {
                digest: format!("sha256:{}", "c".repeat(64)).parse().unwrap(),
                block_size: 4096,
                erofs_length: 8192,
            },
        }
    }

    #[test]
    fn an_artifact_round_trips_through_its_manifest() {
        let a = artifact();
        let bytes = serde_json::to_vec(&a.to_manifest()).unwrap();
        let Parsed::Manifest(m) = parse(&bytes, Some(OCI_MANIFEST)).unwrap() else {
            panic!("an index")
        };
        assert_eq!(Artifact::from_manifest(&m).unwrap(), a);
    }

    #[test]
    fn bad_manifests_are_refused_with_what_is_wrong() {
        let good = serde_json::to_value(artifact().to_manifest()).unwrap();
        let with = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good.clone();
            f(&mut v);
            serde_json::to_vec(&v).unwrap()
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"[]".to_vec(), "not a JSON object"),
            (b"{".to_vec(), "not JSON"),
            (with(&|v| v["schemaVersion"] = 1.into()), "schemaVersion"),
            (
                with(&|v| v["mediaType"] = "text/plain".into()),
                "unsupported mediaType",
            ),
            (
                with(&|v| v["layers"][0]["digest"] = "sha256:zz".into()),
                "layers[0]: digest",
            ),
            (
                with(&|v| v["layers"][1]["size"] = (-1).into()),
                "negative size",
            ),
            (
                with(&|v| v["config"]["digest"] = "md5:00".into()),
                "config: digest",
            ),
        ];
        for (bytes, why) in cases {
            let err = parse(&bytes, None).unwrap_err().to_string();
            assert!(err.contains(why), "{why}: {err}");
        }
        let err = parse(&serde_json::to_vec(&good).unwrap(), Some(OCI_INDEX)).unwrap_err();
        assert!(err.0.contains("Content-Type"), "{err}");
        for (f, why) in [
            (
                &(|v: &mut serde_json::Value| v["artifactType"] = "x/y".into())
                    as &dyn Fn(&mut serde_json::Value),
                "not a sealfs image",
            ),
            (
                &|v| v["annotations"]["org.sealfs.image.digest"] = "sha256:1".into(),
                "annotation org.sealfs.image.digest",
            ),
            (
                &|v| v["annotations"]["org.sealfs.image.block-size"] = "4095".into(),
                "power of two",
            ),
            (
                &|v| v["annotations"]["org.sealfs.image.erofs-length"] = "x".into(),
                "not a number",
            ),
            (
                &|v| v["annotations"]["org.sealfs.image.erofs-length"] = "9000".into(),
                "past the image",
            ),
            (
                &|v| v["annotations"]["org.sealfs.image.hash-algorithm"] = "sha512".into(),
                "does not match",
            ),
            (
                &|v| {
                    v["layers"].as_array_mut().unwrap().pop();
                },
                "a sealfs image has",
            ),
        ] {
            let Parsed::Manifest(m) = parse(&with(f), None).unwrap() else {
                panic!()
            };
            let err = Artifact::from_manifest(&m).unwrap_err().to_string();
            assert!(err.contains(why), "{why}: {err}");
        }
    }

    #[test]
    fn a_platform_is_chosen_from_an_index() {
        let entry = |p: Option<(&str, &str, Option<&str>)>, c: char| {
            serde_json::json!({
                "mediaType": OCI_MANIFEST,
                "digest": format!("sha256:{}", c.to_string().repeat(64)),
                "size": 10,
                "platform": p.map(|(os, arch, v)| serde_json::json!({"os": os, "architecture": arch, "variant": v})),
            })
        };
        let index = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                entry(None, '0'),
                entry(Some(("linux", "arm64", Some("v8"))), '1'),
                entry(Some(("linux", "amd64", None)), '2'),
            ],
        });
        let Parsed::Index(index) = parse(&serde_json::to_vec(&index).unwrap(), None).unwrap()
        else {
            panic!("a manifest")
        };
        let pick = |s: &str| select_platform(&index, &s.parse().unwrap()).map(|e| e.digest.clone());
        assert!(pick("linux/amd64").unwrap().ends_with(&"2".repeat(64)));
        assert!(pick("linux/arm64").unwrap().ends_with(&"1".repeat(64)));
        assert!(pick("linux/arm64/v8").unwrap().ends_with(&"1".repeat(64)));
        let err = pick("linux/arm64/v7").unwrap_err().to_string();
        assert!(err.contains("linux/arm64/v8, linux/amd64"), "{err}");
        assert!("linux".parse::<PlatformSpec>().is_err());
    }
}
