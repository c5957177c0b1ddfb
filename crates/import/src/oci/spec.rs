//! What an OCI image says about itself: indexes, manifests and configs (OCI image spec 1.1, and
//! Docker's schema 2 forms, which registries and `skopeo` still write), parsed strictly and
//! without panicking (this is a fuzzed parser: `fuzz/fuzz_targets/oci_spec.rs`); digests; layer
//! media types; platforms and how one is chosen.
//!
//! Unknown fields are ignored, as the spec asks; a missing required field, a digest that is not
//! `sha256:<64 hex>` or `sha512:<128 hex>` (lower case), a schema version other than 2 or a
//! media type this importer does not know is an error naming the field.

use crate::tar::Compression;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// The OCI image index media type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// The OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// Docker's manifest list (schema 2).
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// Docker's image manifest (schema 2).
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// The OCI image config media type.
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Docker's image config media type.
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
/// The annotation naming an image in a layout's `index.json` (the `REF` of `LAYOUT:REF`).
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// The largest manifest, index or config read (the distribution registry's limit for
/// manifests; configs are far smaller in practice).
pub const MAX_JSON_BYTES: u64 = 4 << 20;

/// The layer media types read, and the compression each states.
const LAYER_TYPES: [(&str, Compression); 10] = [
    ("application/vnd.oci.image.layer.v1.tar", Compression::None),
    (
        "application/vnd.oci.image.layer.v1.tar+gzip",
        Compression::Gzip,
    ),
    (
        "application/vnd.oci.image.layer.v1.tar+zstd",
        Compression::Zstd,
    ),
    (
        "application/vnd.oci.image.layer.nondistributable.v1.tar",
        Compression::None,
    ),
    (
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
        Compression::Gzip,
    ),
    (
        "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
        Compression::Zstd,
    ),
    (
        "application/vnd.docker.image.rootfs.diff.tar",
        Compression::None,
    ),
    (
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        Compression::Gzip,
    ),
    (
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
        Compression::Gzip,
    ),
    (
        "application/vnd.docker.image.rootfs.diff.tar.zstd",
        Compression::Zstd,
    ),
];

/// The compression a layer media type states; `None` for a type that is not a layer this
/// importer reads.
pub fn layer_compression(media_type: &str) -> Option<Compression> {
    LAYER_TYPES
        .iter()
        .find(|(t, _)| *t == media_type)
        .map(|(_, c)| *c)
}

/// A digest's algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// SHA-256 (64 hex digits).
    Sha256,
    /// SHA-512 (128 hex digits).
    Sha512,
}

impl Algorithm {
    /// Its name in a digest (`sha256`).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }
}

/// A content digest, `ALG:HEX`, checked: a known algorithm and lower-case hex of its length
/// (so that it is safe as a file name in a layout's `blobs/ALG/HEX`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Digest {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// The hash, lower-case hex.
    pub hex: String,
}

impl std::str::FromStr for Digest {
    type Err = String;

    fn from_str(s: &str) -> Result<Digest, String> {
        let bad = || {
            format!(
                "digest {} is not sha256:<64 hex> or sha512:<128 hex>",
                sealfs_text::escape(s.as_bytes())
            )
        };
        let (alg, hex) = s.split_once(':').ok_or_else(bad)?;
        let (algorithm, len) = match alg {
            "sha256" => (Algorithm::Sha256, 64),
            "sha512" => (Algorithm::Sha512, 128),
            _ => return Err(bad()),
        };
        if hex.len() != len
            || !hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(bad());
        }
        Ok(Digest {
            algorithm,
            hex: hex.to_string(),
        })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.name(), self.hex)
    }
}

/// A platform, `OS/ARCH[/VARIANT]` (`linux/amd64`, `linux/arm64/v8`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// The operating system (`linux`).
    pub os: String,
    /// The architecture, as Go names it (`amd64`, `arm64`).
    pub architecture: String,
    /// The variant (`v8`), if any.
    pub variant: Option<String>,
}

impl Default for Platform {
    /// `linux/amd64`, what `mkfs.erofs --oci` takes when none is given.
    fn default() -> Self {
        Platform {
            os: "linux".into(),
            architecture: "amd64".into(),
            variant: None,
        }
    }
}

impl std::str::FromStr for Platform {
    type Err = String;

    fn from_str(s: &str) -> Result<Platform, String> {
        let ok = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        };
        let parts: Vec<&str> = s.split('/').collect();
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: None,
            }),
            [os, arch, v] if ok(os) && ok(arch) && ok(v) => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: Some(v.to_string()),
            }),
            _ => Err(format!(
                "platform {} is not OS/ARCH[/VARIANT]",
                sealfs_text::escape(s.as_bytes())
            )),
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

impl Platform {
    /// Architecture and variant as containerd normalizes them: `x86_64` is `amd64`, `aarch64`
    /// `arm64`, an `arm64` without a variant is `v8`, an `arm` without one `v7`, variants
    /// written without their `v` get it.
    fn normalized(&self) -> (String, String, Option<String>) {
        let os = self.os.to_ascii_lowercase();
        let mut variant = self.variant.clone().map(|v| match v.parse::<u32>() {
            Ok(_) => format!("v{v}"),
            Err(_) => v,
        });
        let arch = match self.architecture.as_str() {
            "x86_64" | "x86-64" => "amd64".to_string(),
            "aarch64" => "arm64".to_string(),
            "i386" => "386".to_string(),
            "armhf" => {
                variant.get_or_insert_with(|| "v7".into());
                "arm".to_string()
            }
            "armel" => {
                variant.get_or_insert_with(|| "v6".into());
                "arm".to_string()
            }
            a => a.to_string(),
        };
        let variant = match (arch.as_str(), variant) {
            ("arm64", None) => Some("v8".to_string()),
            ("arm", None) => Some("v7".to_string()),
            ("amd64", Some(v)) if v == "v1" => None,
            (_, v) => v,
        };
        (os, arch, variant)
    }

    /// Whether this is `unknown/unknown`, the platform of what an index lists beside images
    /// (buildx's attestation manifests).
    pub fn is_unknown(&self) -> bool {
        self.os == "unknown" && self.architecture == "unknown"
    }

    /// Whether an image for `self` (an index entry's platform, or an image config's) is one
    /// for `wanted`: same OS and architecture, and the variant asked for if one is (an
    /// architecture's default variant is the same as none).
    pub fn serves(&self, wanted: &Platform) -> bool {
        let (os, arch, variant) = self.normalized();
        let (wos, warch, wvariant) = wanted.normalized();
        os == wos && arch == warch && (wanted.variant.is_none() || variant == wvariant)
    }
}

/// A content descriptor: what a blob is, its digest and size, and what an index says of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// For an index entry, the platform of the image it names.
    pub platform: Option<Platform>,
    /// Its annotations (a layout's `index.json` names images with [`REF_NAME`]).
    pub annotations: BTreeMap<String, String>,
}

/// An image index (or Docker manifest list): the images it names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    /// Its entries, in order.
    pub manifests: Vec<Descriptor>,
}

/// An image manifest: its config and its layers, bottom first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The image config.
    pub config: Descriptor,
    /// The layers, the lowest first.
    pub layers: Vec<Descriptor>,
}

/// A manifest or an index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// An index or manifest list.
    Index(Index),
    /// An image manifest.
    Manifest(Manifest),
}

/// What this importer takes from an image config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The platform the image is for, when the config says (`os` and `architecture`).
    pub platform: Option<Platform>,
    /// The digests of the uncompressed layers (`rootfs.diff_ids`), bottom first.
    pub diff_ids: Vec<Digest>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDescriptor {
    media_type: Option<String>,
    digest: String,
    size: u64,
    platform: Option<RawPlatform>,
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct RawPlatform {
    os: String,
    architecture: String,
    variant: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawTop {
    schema_version: Option<u64>,
    media_type: Option<String>,
    manifests: Option<Vec<RawDescriptor>>,
    config: Option<RawDescriptor>,
    layers: Option<Vec<RawDescriptor>>,
}

#[derive(Deserialize)]
struct RawConfig {
    os: Option<String>,
    architecture: Option<String>,
    variant: Option<String>,
    rootfs: RawRootfs,
}

#[derive(Deserialize)]
struct RawRootfs {
    #[serde(rename = "type")]
    kind: String,
    diff_ids: Vec<String>,
}

fn descriptor(d: RawDescriptor, what: &str) -> Result<Descriptor, String> {
    let media_type = d
        .media_type
        .ok_or_else(|| format!("{what}: no mediaType"))?;
    let digest = d.digest.parse().map_err(|e| format!("{what}: {e}"))?;
    Ok(Descriptor {
        media_type,
        digest,
        size: d.size,
        platform: d.platform.map(|p| Platform {
            os: p.os,
            architecture: p.architecture,
            variant: p.variant.filter(|v| !v.is_empty()),
        }),
        annotations: d.annotations.unwrap_or_default(),
    })
}

/// Parses an index or a manifest. `said` is the media type it was described with (by the
/// descriptor that named it; `None` for a layout's `index.json`): the body's own `mediaType`,
/// when there is one, must agree; the kind is told by the media type, or by the shape when
/// neither says.
pub fn parse(bytes: &[u8], said: Option<&str>) -> Result<Parsed, String> {
    if bytes.len() as u64 > MAX_JSON_BYTES {
        return Err(format!(
            "{} bytes: more than the {MAX_JSON_BYTES} a manifest may have",
            bytes.len()
        ));
    }
    let top: RawTop =
        serde_json::from_slice(bytes).map_err(|e| format!("not an OCI manifest or index: {e}"))?;
    if top.schema_version != Some(2) {
        return Err(format!(
            "schemaVersion is {}, not 2",
            top.schema_version
                .map_or("missing".to_string(), |v| v.to_string())
        ));
    }
    if let (Some(body), Some(said)) = (&top.media_type, said) {
        if body != said {
            return Err(format!(
                "its mediaType is {body}, but it was described as {said}"
            ));
        }
    }
    let index = match top.media_type.as_deref().or(said) {
        Some(OCI_INDEX | DOCKER_LIST) => true,
        Some(OCI_MANIFEST | DOCKER_MANIFEST) => false,
        Some(other) => {
            return Err(format!(
                "unknown media type {other} (not a manifest or an index)"
            ))
        }
        None => match (&top.manifests, &top.layers) {
            (Some(_), None) => true,
            (None, Some(_)) => false,
            _ => return Err("neither a manifest (layers) nor an index (manifests)".into()),
        },
    };
    if index {
        let manifests = top
            .manifests
            .ok_or("an index without manifests")?
            .into_iter()
            .enumerate()
            .map(|(i, d)| descriptor(d, &format!("manifests[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(Parsed::Index(Index { manifests }))
    } else {
        let config = descriptor(top.config.ok_or("a manifest without config")?, "config")?;
        let layers = top
            .layers
            .ok_or("a manifest without layers")?
            .into_iter()
            .enumerate()
            .map(|(i, d)| descriptor(d, &format!("layers[{i}]")))
            .collect::<Result<_, _>>()?;
        Ok(Parsed::Manifest(Manifest { config, layers }))
    }
}

/// Parses an image config.
pub fn parse_config(bytes: &[u8]) -> Result<Config, String> {
    if bytes.len() as u64 > MAX_JSON_BYTES {
        return Err(format!(
            "{} bytes: more than the {MAX_JSON_BYTES} a config may have",
            bytes.len()
        ));
    }
    let c: RawConfig =
        serde_json::from_slice(bytes).map_err(|e| format!("not an OCI image config: {e}"))?;
    if c.rootfs.kind != "layers" {
        return Err(format!(
            "rootfs.type is {}, not \"layers\"",
            sealfs_text::escape(c.rootfs.kind.as_bytes())
        ));
    }
    let diff_ids = c
        .rootfs
        .diff_ids
        .iter()
        .enumerate()
        .map(|(i, d)| d.parse().map_err(|e| format!("rootfs.diff_ids[{i}]: {e}")))
        .collect::<Result<_, String>>()?;
    let platform = match (c.os, c.architecture) {
        (Some(os), Some(architecture)) if !os.is_empty() && !architecture.is_empty() => {
            Some(Platform {
                os,
                architecture,
                variant: c.variant.filter(|v| !v.is_empty()),
            })
        }
        _ => None,
    };
    Ok(Config { platform, diff_ids })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    #[test]
    fn digests_are_checked() {
        assert!(hex('a').parse::<Digest>().is_ok());
        for bad in [
            "sha256:".to_string(),
            format!("sha256:{}", "A".repeat(64)),
            format!("sha256:{}", "a".repeat(63)),
            format!("md5:{}", "a".repeat(32)),
            format!("sha256:../{}", "a".repeat(61)),
            "a".repeat(64),
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
    }

    #[test]
    fn platforms_match_as_containerd_normalizes_them() {
        let p = |s: &str| s.parse::<Platform>().unwrap();
        assert!(p("linux/x86_64").serves(&p("linux/amd64")));
        assert!(p("linux/arm64/v8").serves(&p("linux/arm64")));
        assert!(p("linux/arm64").serves(&p("linux/arm64/v8")));
        assert!(p("linux/aarch64").serves(&p("linux/arm64/v8")));
        assert!(!p("linux/arm/v6").serves(&p("linux/arm/v7")));
        assert!(p("linux/arm/v6").serves(&p("linux/arm")));
        assert!(!p("linux/arm64").serves(&p("linux/amd64")));
        assert!(!p("windows/amd64").serves(&p("linux/amd64")));
        assert!("linux".parse::<Platform>().is_err());
        assert!("linux/amd64/v2/x".parse::<Platform>().is_err());
    }

    #[test]
    fn manifests_and_indexes_are_told_apart_and_checked() {
        let manifest = format!(
            r#"{{"schemaVersion":2,"config":{{"mediaType":"{OCI_CONFIG}","digest":"{}","size":2}},
               "layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{}","size":3}}]}}"#,
            hex('1'),
            hex('2')
        );
        let Parsed::Manifest(m) = parse(manifest.as_bytes(), Some(OCI_MANIFEST)).unwrap() else {
            panic!("an index")
        };
        assert_eq!(m.layers[0].size, 3);
        let err = parse(manifest.as_bytes(), Some(OCI_INDEX)).unwrap_err();
        assert!(err.contains("neither") || err.contains("without"), "{err}");
        let index = format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_INDEX}","manifests":[{{"mediaType":"{OCI_MANIFEST}","digest":"{}","size":9,"platform":{{"os":"linux","architecture":"arm64","variant":"v8"}}}}]}}"#,
            hex('3')
        );
        let Parsed::Index(i) = parse(index.as_bytes(), None).unwrap() else {
            panic!("a manifest")
        };
        assert_eq!(
            i.manifests[0].platform.as_ref().unwrap().to_string(),
            "linux/arm64/v8"
        );
        let err = parse(index.as_bytes(), Some(OCI_MANIFEST)).unwrap_err();
        assert!(err.contains("described as"), "{err}");
        for (bad, why) in [
            ("{}", "schemaVersion"),
            ("[]", "not an OCI"),
            (
                r#"{"schemaVersion":2,"mediaType":"text/plain"}"#,
                "unknown media type text/plain",
            ),
            (r#"{"schemaVersion":1,"layers":[]}"#, "schemaVersion is 1"),
            (
                r#"{"schemaVersion":2,"manifests":[{"mediaType":"x","digest":"sha256:1","size":1}]}"#,
                "manifests[0]: digest",
            ),
            (
                r#"{"schemaVersion":2,"manifests":[{"mediaType":"x","digest":"sha256:1","size":-1}]}"#,
                "not an OCI",
            ),
        ] {
            let err = parse(bad.as_bytes(), None).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn configs_give_platform_and_diff_ids() {
        let c = parse_config(
            format!(r#"{{"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["{}"]}}}}"#, hex('4')).as_bytes(),
        )
        .unwrap();
        assert_eq!(c.platform.unwrap().to_string(), "linux/amd64");
        assert_eq!(c.diff_ids.len(), 1);
        assert!(parse_config(br#"{"rootfs":{"type":"x","diff_ids":[]}}"#).is_err());
        assert!(parse_config(br#"{"os":"linux"}"#).is_err());
    }
}
