//! An OCI image layout on disk: `oci-layout` (`{"imageLayoutVersion": "1.0.0"}`), `index.json`
//! (an index naming the images, each by the `org.opencontainers.image.ref.name` annotation)
//! and `blobs/ALG/HEX`, as `umoci`, `skopeo copy ... oci:DIR:REF` and `buildah push oci:`
//! write it.
//!
//! `LAYOUT:REF` names the image whose ref is `REF`; a bare `LAYOUT` the only image in it, or,
//! where `index.json` names several with platforms, the one for the platform asked for.

use super::spec::{self, Descriptor, Platform};
use super::{Blobs, OciImage};
use crate::error::OciError;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// An OCI image layout.
#[derive(Clone, Debug)]
pub struct OciLayout {
    dir: PathBuf,
}

/// Splits `LAYOUT[:REF]`: the whole of `arg` when it is a directory, else what is before its
/// last `:` (when that is a directory) and the ref after it.
pub fn split_arg(arg: &str) -> (PathBuf, Option<String>) {
    if Path::new(arg).is_dir() {
        return (PathBuf::from(arg), None);
    }
    match arg.rsplit_once(':') {
        Some((dir, r)) if !dir.is_empty() && !r.is_empty() && !r.contains('/') => {
            (PathBuf::from(dir), Some(r.to_string()))
        }
        _ => (PathBuf::from(arg), None),
    }
}

impl OciLayout {
    /// The layout in `dir`: its `oci-layout` file must say version 1.x.
    pub fn open(dir: &Path) -> Result<OciLayout, OciError> {
        let name = sealfs_text::escape_path(dir);
        let marker = dir.join("oci-layout");
        let bytes = std::fs::read(&marker).map_err(|e| {
            OciError::new(
                &name,
                format!("not an OCI image layout: oci-layout: {}", os_text(&e)),
            )
        })?;
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Marker {
            image_layout_version: String,
        }
        let m: Marker = serde_json::from_slice(&bytes)
            .map_err(|e| OciError::new(&name, format!("oci-layout: {e}")))?;
        if !m.image_layout_version.starts_with("1.") {
            return Err(OciError::new(
                &name,
                format!(
                    "oci-layout: imageLayoutVersion {} (this reads 1.x)",
                    m.image_layout_version
                ),
            ));
        }
        Ok(OciLayout {
            dir: dir.to_path_buf(),
        })
    }

    /// Where the blob named `digest` is.
    pub fn blob_path(&self, digest: &spec::Digest) -> PathBuf {
        self.dir
            .join("blobs")
            .join(digest.algorithm.name())
            .join(&digest.hex)
    }

    /// The entries of `index.json` that `reference` names (all without one), at least one: the
    /// layout's name for messages, `index.json`'s, the entries, and the refs it has.
    fn named(&self, reference: Option<&str>) -> Result<Named, OciError> {
        let layout = sealfs_text::escape_path(&self.dir);
        let name = match reference {
            Some(r) => format!("{layout}:{r}"),
            None => layout.clone(),
        };
        let index_at = format!("{layout}: index.json");
        let mut bytes = Vec::new();
        File::open(self.dir.join("index.json"))
            .and_then(|f| f.take(spec::MAX_JSON_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| OciError::new(&index_at, os_text(&e)))?;
        let index = match spec::parse(&bytes, Some(spec::OCI_INDEX)) {
            Ok(spec::Parsed::Index(i)) => i,
            Ok(spec::Parsed::Manifest(_)) => unreachable!("parsed as an index"),
            Err(e) => return Err(OciError::new(&index_at, e)),
        };
        let ref_of = |d: &Descriptor| d.annotations.get(spec::REF_NAME).cloned();
        let refs: Vec<String> = index.manifests.iter().filter_map(ref_of).collect();
        let candidates: Vec<Descriptor> = match reference {
            Some(r) => index
                .manifests
                .iter()
                .filter(|d| ref_of(d).as_deref() == Some(r))
                .cloned()
                .collect(),
            None => index.manifests.clone(),
        };
        let list = if refs.is_empty() {
            "none".to_string()
        } else {
            refs.iter()
                .map(|r| sealfs_text::escape(r.as_bytes()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if candidates.is_empty() {
            return Err(OciError::new(
                &name,
                match reference {
                    Some(r) => {
                        format!(
                            "no image named {} in the layout (its refs: {list})",
                            sealfs_text::escape(r.as_bytes()),
                        )
                    }
                    None => "the layout's index.json names no image".to_string(),
                },
            ));
        }
        Ok(Named {
            name,
            index_at,
            candidates,
            list,
        })
    }

    /// The image `reference` names (or the only one), an index resolved for `platform`.
    pub fn image(
        &self,
        reference: Option<&str>,
        platform: &Platform,
    ) -> Result<OciImage, OciError> {
        let Named {
            name,
            index_at,
            candidates,
            list,
        } = self.named(reference)?;
        let chosen = match candidates.as_slice() {
            [one] => one.clone(),
            several if several.iter().any(|d| d.platform.is_some()) => {
                super::choose(several, platform)
                    .map_err(|e| OciError::new(&index_at, e))?
                    .clone()
            }
            several => {
                return Err(OciError::new(
                    &name,
                    format!(
                        "{} images in the layout; name one as LAYOUT:REF (its refs: {})",
                        several.len(),
                        list
                    ),
                ))
            }
        };
        OciImage::resolve(self, &name, &chosen, platform)
    }

    /// Every image `reference` names (or all of the layout's): each platform of an index (see
    /// [`OciImage::resolve_all`]). Several images without a platform must be told apart by
    /// `:REF`, as for [`OciLayout::image`].
    pub fn images(&self, reference: Option<&str>) -> Result<Vec<OciImage>, OciError> {
        let Named {
            name,
            candidates,
            list,
            ..
        } = self.named(reference)?;
        if candidates.len() > 1 && candidates.iter().all(|d| d.platform.is_none()) {
            return Err(OciError::new(
                &name,
                format!(
                    "{} images in the layout; name one as LAYOUT:REF (its refs: {list})",
                    candidates.len()
                ),
            ));
        }
        let mut out = Vec::new();
        for d in &candidates {
            if candidates.len() > 1 && d.platform.as_ref().is_none_or(|p| p.is_unknown()) {
                continue;
            }
            out.extend(OciImage::resolve_all(self, &name, d)?);
        }
        Ok(out)
    }
}

/// What [`OciLayout::named`] found.
struct Named {
    name: String,
    index_at: String,
    candidates: Vec<Descriptor>,
    list: String,
}

impl Blobs for OciLayout {
    fn open(&self, d: &Descriptor) -> io::Result<Box<dyn Read + Send>> {
        let path = self.blob_path(&d.digest);
        match File::open(&path) {
            Ok(f) => Ok(Box::new(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(io::Error::new(
                e.kind(),
                format!(
                    "the blob is missing from the layout (no blobs/{}/{})",
                    d.digest.algorithm.name(),
                    d.digest.hex
                ),
            )),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("{}: {}", sealfs_text::escape_path(&path), os_text(&e)),
            )),
        }
    }
}

/// An OS error's text without its code.
fn os_text(e: &io::Error) -> String {
    let t = e.to_string();
    match t.split_once(" (os error") {
        Some((head, _)) => head.to_string(),
        None => t,
    }
}
