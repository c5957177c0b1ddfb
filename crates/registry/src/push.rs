//! Pushing: blobs (HEAD first, then a cross-repository mount when asked, then an upload: one
//! request for a blob up to the chunk size, else chunks that resume after a dropped connection),
//! manifests, and referrers (the referrers API where the registry has it, else the
//! `sha256-<digest>` tag of the OCI distribution specification's fallback).
//!
//! The uploads are this crate's own code: `oci-client` uploads a blob from memory or from a stream
//! it cannot rewind, so a dropped connection means starting over, and it does not say whether the
//! registry took a manifest's `subject` (the `OCI-Subject` header). A resumed upload asks the
//! registry how much it has (`GET` on the upload's location: `Range: 0-N`) and goes on from
//! there; an upload the registry has forgotten (its state refused) starts again from the first
//! byte, each at most [`RemoteOptions::retries`](sealfs_remote::RemoteOptions::retries) times.

use crate::client::{chain, digest_like, envelope, hex, Registry, DEFAULT_CHUNK_SIZE};
use crate::manifest::{
    self, Artifact, Descriptor, ImageFacts, Parsed, ANNOTATION_TITLE, LAYER_EROFS, LAYER_SEAL,
    LAYER_SEALED, OCI_INDEX, OCI_MANIFEST, SIGNATURES_TYPE,
};
use crate::reference::ImageRef;
use crate::{RegistryError, RegistryOptions};
use bytes::Bytes;
use oci_client::RegistryOperation::Push;
use sha2::Digest as _;
use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

/// What happened to one blob.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlobOutcome {
    /// The registry had it (`HEAD`): nothing sent.
    Present,
    /// Mounted from another repository of the registry: nothing sent.
    Mounted {
        /// The repository it came from.
        from: String,
    },
    /// Uploaded.
    Uploaded {
        /// Requests that carried bytes (one, or one per chunk, retries included).
        requests: u64,
        /// Times the upload was resumed after a failed request.
        resumed: u64,
        /// Times it started over from the first byte.
        restarted: u64,
    },
}

/// One blob of a push.
#[derive(Clone, Debug)]
pub struct PushedBlob {
    /// Its descriptor.
    pub descriptor: Descriptor,
    /// What was done.
    pub outcome: BlobOutcome,
}

/// How the signatures found their way to the image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReferrersVia {
    /// The registry took the `subject` (it answered `OCI-Subject`): its referrers API lists them.
    Api,
    /// The registry has no referrers API: the index at this tag (`sha256-<hex>`) lists them.
    Tag(String),
}

/// The signatures artifact of a push.
#[derive(Clone, Debug)]
pub struct PushedSignatures {
    /// Its manifest's digest.
    pub manifest_digest: String,
    /// Signature entries in it.
    pub count: usize,
    /// Where it is listed.
    pub via: ReferrersVia,
}

/// What a push did.
#[derive(Clone, Debug)]
pub struct PushReport {
    /// The reference pushed to, pinned to the manifest's digest.
    pub reference: ImageRef,
    /// The image manifest's digest.
    pub manifest_digest: String,
    /// What its annotations state.
    pub facts: ImageFacts,
    /// The blobs: config, image, sidecar, signatures.
    pub blobs: Vec<PushedBlob>,
    /// The signatures artifact, when the image has signatures.
    pub signatures: Option<PushedSignatures>,
}

/// How to push.
#[derive(Clone, Debug, Default)]
pub struct PushOptions {
    /// The seal sidecar of a detached image (pushed as the artifact's second layer).
    pub sidecar: Option<std::path::PathBuf>,
    /// Repositories of the same registry to mount a missing blob from before uploading it.
    pub mount_from: Vec<String>,
    /// Leave the signatures out (the image's seal keeps its own).
    pub no_signatures: bool,
    /// Put the manifest under its digest only, no tag (the target's tag, if any, is not
    /// touched): for an artifact something else points to, as a converted layer's is.
    pub untagged: bool,
}

/// Progress of a push (the read side's hook): a `hash` step per file, an `upload` step per blob
/// sent, in bytes.
pub use sealfs_reader::check::Progress as PushProgress;

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io {
        path: sealfs_text::escape_path(path),
        source,
    }
}

/// What a streaming pass over a file also checks of the image it belongs to: the level-0 hashes
/// of the EROFS bytes it holds, and the stored Merkle tree it holds (an image with its seal holds
/// both; a detached image holds the data and its sidecar the tree).
#[derive(Default)]
struct Scan {
    /// Hash the file's first `erofs_length` bytes into level-0 hashes with these parameters.
    data: Option<(sealfs_verity::Params, u64)>,
    /// Keep these bytes of the file: the stored tree.
    tree: Option<std::ops::Range<u64>>,
}

/// What a [`Scan`] kept.
#[derive(Default)]
struct Scanned {
    leaves: Vec<u8>,
    tree: Vec<u8>,
}

/// The sha256 descriptor of the file at `path`, read once; the same pass does `scan`.
fn describe(
    path: &Path,
    media_type: &str,
    scan: &Scan,
    progress: &dyn PushProgress,
) -> Result<(Descriptor, Scanned), RegistryError> {
    let f = std::fs::File::open(path).map_err(io_err(path))?;
    let total = f.metadata().map_err(io_err(path))?.len();
    let mut h = sha2::Sha256::new();
    // 1 MiB: a multiple of every Merkle block size, so each piece starts on a block.
    const PIECE: u64 = 1 << 20;
    let mut buf = vec![0u8; PIECE as usize];
    let mut scanned = Scanned::default();
    let hasher = scan.data.as_ref().map(|(params, len)| {
        let blocks = sealfs_verity::TreeGeometry::new(params, *len).data_blocks();
        scanned.leaves = vec![0u8; (blocks as usize).saturating_mul(params.digest_size())];
        (
            sealfs_verity::BlockHasher::new(params),
            params.block_size() as u64,
            params.digest_size() as u64,
            *len,
        )
    });
    if let Some(t) = &scan.tree {
        // The seal's tree lies in the file (the open checked the seal against the file's length;
        // a file that shrank since is an error here, not an allocation of what it claims).
        if t.end > total {
            return Err(RegistryError::Image {
                path: path.display().to_string(),
                reason: format!(
                    "the Merkle tree (bytes {}..{}) lies past the end of the file ({total} bytes)",
                    t.start, t.end
                ),
            });
        }
        scanned.tree = vec![0u8; (t.end - t.start) as usize];
    }
    let mut at = 0u64;
    progress.begin("hash", Some(total));
    while at < total {
        let n = PIECE.min(total - at);
        let piece = &mut buf[..n as usize];
        f.read_exact_at(piece, at).map_err(io_err(path))?;
        h.update(&*piece);
        if let Some((hasher, bs, d, len)) = &hasher {
            let end = (at + n).min(*len);
            if at < end {
                let (first, last) = (at / bs, end.div_ceil(*bs));
                hasher.par_hash_blocks_into(
                    &piece[..(end - at) as usize],
                    &mut scanned.leaves[(first * d) as usize..(last * d) as usize],
                );
            }
        }
        if let Some(t) = &scan.tree {
            let (a, b) = (at.max(t.start), (at + n).min(t.end));
            if a < b {
                scanned.tree[(a - t.start) as usize..(b - t.start) as usize]
                    .copy_from_slice(&piece[(a - at) as usize..(b - at) as usize]);
            }
        }
        at += n;
        progress.advance(n);
    }
    progress.end();
    let mut annotations = BTreeMap::new();
    if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
        annotations.insert(ANNOTATION_TITLE.to_string(), name.to_string());
    }
    let desc = Descriptor {
        media_type: media_type.into(),
        digest: format!("sha256:{}", hex(&h.finalize())),
        size: total,
        annotations,
    };
    Ok((desc, scanned))
}

/// Checks the stored tree and every data block hashed while the files were read for their
/// descriptors against the seal, as `sealfs verify` does: the blobs those descriptors name are
/// exactly the bytes checked (the registry refuses an upload whose bytes hash otherwise, so a file
/// changed after this pass cannot be committed either).
fn check_scanned(
    image: &Path,
    seal: &sealfs_reader::Seal,
    leaves: &[u8],
    tree: &[u8],
) -> Result<(), RegistryError> {
    use sealfs_reader::check::Problem;
    let d = seal.params.digest_size();
    let problems: Vec<String> = sealfs_verity::check_tree(
        &seal.params,
        seal.erofs_length(),
        &seal.header.root_hash[..d],
        tree,
        leaves,
        MAX_PROBLEMS + 1,
    )
    .into_iter()
    .map(|p| match p {
        sealfs_verity::TreeProblem::DataBlock { index } => Problem::DataBlock {
            index,
            block_size: seal.params.block_size() as u64,
            owner: None,
        },
        sealfs_verity::TreeProblem::TreeBlock { level, index } => {
            Problem::TreeBlock { level, index }
        }
    })
    .map(|p| p.to_string())
    .collect();
    if problems.is_empty() {
        return Ok(());
    }
    Err(RegistryError::Damaged {
        path: image.display().to_string(),
        problems,
    })
}

/// Damaged blocks listed in a refused push's message (one more means "and more").
const MAX_PROBLEMS: usize = 10;

/// What to upload: a file, or bytes.
enum Body<'a> {
    File(&'a Path, &'a std::fs::File),
    Bytes(Bytes),
}

impl Body<'_> {
    fn read(&self, offset: u64, len: u64) -> Result<Bytes, RegistryError> {
        match self {
            Body::Bytes(b) => Ok(b.slice(offset as usize..(offset + len) as usize)),
            Body::File(path, f) => {
                let mut buf = vec![0u8; len as usize];
                f.read_exact_at(&mut buf, offset).map_err(io_err(path))?;
                Ok(buf.into())
            }
        }
    }
}

/// Pushes the sealed image at `image` to `target` (a tag; `latest` if none; with
/// [`PushOptions::untagged`] its repository only, the manifest put by digest): its blobs, its
/// manifest, and its signatures (the seal's and `IMAGE.sig`'s) as a referrer. The image is opened
/// first, as any reader opens it: a plain (unsealed) image or a broken seal is refused before
/// anything is sent.
pub fn push_image(
    image: &Path,
    target: &ImageRef,
    options: &RegistryOptions,
    push: &PushOptions,
    progress: &dyn PushProgress,
) -> Result<PushReport, RegistryError> {
    let image_err = |reason: String| RegistryError::Image {
        path: sealfs_text::escape_path(image),
        reason,
    };
    if target.tag.is_none() && target.digest.is_some() && !push.untagged {
        return Err(RegistryError::BadReference {
            reference: target.to_string(),
            reason: "a push names a tag, not a digest (the digest is what the push makes)".into(),
        });
    }
    let source = sealfs_reader::Source::Path(image.to_path_buf());
    let open_options = sealfs_reader::OpenOptions {
        sidecar: push.sidecar.clone().map(sealfs_reader::Source::Path),
        ..Default::default()
    };
    // The open's error names the image itself (and says what is wrong with it).
    let opened = sealfs_reader::open(source.clone(), &open_options).map_err(RegistryError::Open)?;
    let seal = opened.seal.as_ref().ok_or_else(|| {
        image_err(
            "not sealed: `sealfs seal` it first (a registry copy is read only against its seal)"
                .into(),
        )
    })?;
    let facts = ImageFacts {
        digest: seal.digest(),
        block_size: seal.params.block_size() as u64,
        erofs_length: seal.erofs_length(),
    };
    let signatures = if push.no_signatures {
        Vec::new()
    } else {
        sealfs_reader::open::gather_signatures(seal, &source, None)
            .map_err(|e| image_err(format!("signatures: {e}")))?
    };

    // Every block is checked in the pass that hashes the files for their descriptors, before
    // anything is sent: a damaged image is refused with nothing uploaded and no manifest
    // committed.
    let tree_at = seal.header.tree_offset.get();
    let tree_range = tree_at..tree_at.saturating_add(seal.header.tree_length.get());
    let image_scan = Scan {
        data: Some((seal.params, seal.erofs_length())),
        tree: (!seal.is_detached()).then(|| tree_range.clone()),
    };
    let (image_desc, mut scanned) = describe(
        image,
        if push.sidecar.is_some() {
            LAYER_EROFS
        } else {
            LAYER_SEALED
        },
        &image_scan,
        progress,
    )?;
    let mut descs = vec![image_desc];
    if let Some(s) = &push.sidecar {
        let sidecar_scan = Scan {
            data: None,
            tree: seal.is_detached().then(|| tree_range.clone()),
        };
        let (desc, side) = describe(s, LAYER_SEAL, &sidecar_scan, progress)?;
        if seal.is_detached() {
            scanned.tree = side.tree;
        }
        descs.push(desc);
    }
    check_scanned(image, seal, &scanned.leaves, &scanned.tree)?;
    drop(scanned);
    drop(opened);
    let artifact = Artifact {
        image: descs[0].clone(),
        sidecar: descs.get(1).cloned(),
        facts: facts.clone(),
    };
    let registry = Registry::connect(target, options)?;
    let mut blobs = Vec::new();
    let empty = Descriptor {
        media_type: manifest::EMPTY_MEDIA_TYPE.into(),
        digest: manifest::EMPTY_DIGEST.into(),
        size: 2,
        annotations: BTreeMap::new(),
    };
    blobs.push(PushedBlob {
        outcome: registry.push_bytes(&empty, Bytes::from_static(b"{}"), &push.mount_from)?,
        descriptor: empty,
    });
    let paths: Vec<&Path> = std::iter::once(image)
        .chain(push.sidecar.as_deref())
        .collect();
    for (desc, path) in descs.iter().zip(paths) {
        blobs.push(PushedBlob {
            outcome: registry.push_file(path, desc, &push.mount_from, progress)?,
            descriptor: desc.clone(),
        });
    }
    let manifest_bytes =
        serde_json::to_vec(&artifact.to_manifest()).map_err(|e| image_err(e.to_string()))?;
    let key = if push.untagged {
        digest_like(&manifest_bytes, None)
    } else {
        target.tag_or_latest().unwrap_or("latest").to_string()
    };
    let pushed = registry.put_manifest(&key, OCI_MANIFEST, manifest_bytes.clone().into())?;
    let subject = Descriptor {
        media_type: OCI_MANIFEST.into(),
        digest: pushed.digest.clone(),
        size: manifest_bytes.len() as u64,
        annotations: BTreeMap::new(),
    };
    let signatures = if signatures.is_empty() {
        None
    } else {
        let bytes = Bytes::from(sealfs_trust::encode_section(&signatures));
        let desc = Descriptor {
            media_type: SIGNATURES_TYPE.into(),
            digest: digest_like(&bytes, None),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        };
        blobs.push(PushedBlob {
            outcome: registry.push_bytes(&desc, bytes, &push.mount_from)?,
            descriptor: desc.clone(),
        });
        let (manifest_digest, via) =
            registry.attach(&subject, &manifest::signatures_manifest(&subject, &desc))?;
        Some(PushedSignatures {
            manifest_digest,
            count: signatures.len(),
            via,
        })
    };
    Ok(PushReport {
        reference: target.pinned(&pushed.digest),
        manifest_digest: pushed.digest,
        facts,
        blobs,
        signatures,
    })
}

/// A manifest the registry took.
#[derive(Clone, Debug)]
pub struct PushedManifest {
    /// Its digest.
    pub digest: String,
    /// The `OCI-Subject` the registry answered (it took the manifest's subject).
    pub subject: Option<String>,
}

impl Registry {
    fn chunk_size(&self) -> u64 {
        match self.inner.options.chunk_size {
            0 => DEFAULT_CHUNK_SIZE,
            n => n,
        }
    }

    /// Pushes the file at `path`, whose descriptor is `desc`, unless the registry has it or can
    /// mount it from one of `mount_from`.
    pub fn push_file(
        &self,
        path: &Path,
        desc: &Descriptor,
        mount_from: &[String],
        progress: &dyn PushProgress,
    ) -> Result<BlobOutcome, RegistryError> {
        let f = std::fs::File::open(path).map_err(io_err(path))?;
        let len = f.metadata().map_err(io_err(path))?.len();
        if len != desc.size {
            return Err(RegistryError::Image {
                path: sealfs_text::escape_path(path),
                reason: format!(
                    "changed while being pushed ({} bytes, was {})",
                    len, desc.size
                ),
            });
        }
        self.block_on(self.push_blob(&Body::File(path, &f), desc, mount_from, progress))
    }

    /// Pushes `bytes` (whose descriptor is `desc`), as [`Registry::push_file`].
    pub fn push_bytes(
        &self,
        desc: &Descriptor,
        bytes: Bytes,
        mount_from: &[String],
    ) -> Result<BlobOutcome, RegistryError> {
        self.block_on(self.push_blob(
            &Body::Bytes(bytes),
            desc,
            mount_from,
            &sealfs_reader::check::NoProgress,
        ))
    }

    async fn push_blob(
        &self,
        body: &Body<'_>,
        desc: &Descriptor,
        mount_from: &[String],
        progress: &dyn PushProgress,
    ) -> Result<BlobOutcome, RegistryError> {
        if self.blob_exists_as(&desc.digest, Push).await? {
            return Ok(BlobOutcome::Present);
        }
        let mut location = None;
        for from in mount_from {
            match self.mount(&desc.digest, from).await? {
                Mount::Mounted => return Ok(BlobOutcome::Mounted { from: from.clone() }),
                Mount::Upload(l) => location = Some(l),
            }
        }
        progress.begin("upload", Some(desc.size));
        let outcome = self.upload(body, desc, location, progress).await;
        progress.end();
        outcome
    }

    /// Resolves a `Location` header against the registry.
    fn location(&self, what: &str, resp: &reqwest::Response) -> Result<url::Url, RegistryError> {
        let loc = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| RegistryError::Request {
                what: what.to_string(),
                reason: format!("{} without a Location header", resp.status()),
            })?;
        url::Url::parse(&self.inner.repo.base_url())
            .and_then(|b| b.join(loc))
            .map_err(|e| RegistryError::Request {
                what: what.to_string(),
                reason: format!("Location {loc:?}: {e}"),
            })
    }

    async fn mount(&self, digest: &str, from: &str) -> Result<Mount, RegistryError> {
        let url = self.url("blobs/uploads/");
        let what = format!("POST {url} (mount {digest} from {from})");
        let resp = self
            .send(Push, &what, self.inner.options.remote.retries, &|c| {
                c.post(&url)
                    .query(&[("mount", digest), ("from", from)])
                    .header(reqwest::header::CONTENT_LENGTH, 0)
            })
            .await?;
        match resp.status().as_u16() {
            201 => Ok(Mount::Mounted),
            202 => Ok(Mount::Upload(self.location(&what, &resp)?)),
            s => {
                let body = resp.bytes().await.unwrap_or_default();
                Err(RegistryError::Request {
                    what,
                    reason: format!("{s} {}", envelope(&body)),
                })
            }
        }
    }

    async fn begin_upload(&self) -> Result<url::Url, RegistryError> {
        let url = self.url("blobs/uploads/");
        let what = format!("POST {url}");
        let resp = self
            .send(Push, &what, self.inner.options.remote.retries, &|c| {
                c.post(&url).header(reqwest::header::CONTENT_LENGTH, 0)
            })
            .await?;
        if resp.status().as_u16() != 202 {
            let status = resp.status();
            let body = resp.bytes().await.unwrap_or_default();
            return Err(RegistryError::Request {
                what,
                reason: format!("{status} {}", envelope(&body)),
            });
        }
        self.location(&what, &resp)
    }

    /// How much of the upload at `location` the registry has: its new location and the offset to
    /// go on from. `Err` when the registry no longer knows the upload.
    async fn upload_status(&self, location: &url::Url) -> Result<(url::Url, u64), RegistryError> {
        let what = format!("GET {location} (upload status)");
        let resp = self
            .send(Push, &what, self.inner.options.remote.retries, &|c| {
                c.get(location.clone())
            })
            .await?;
        if resp.status().as_u16() != 204 {
            let status = resp.status();
            let body = resp.bytes().await.unwrap_or_default();
            return Err(RegistryError::Request {
                what,
                reason: format!("{status} {}", envelope(&body)),
            });
        }
        let next = self
            .location(&what, &resp)
            .unwrap_or_else(|_| location.clone());
        Ok((next, range_end(&resp).unwrap_or(0)))
    }

    /// Uploads `body` as `desc`: in one request up to the chunk size, else in chunks, resuming.
    async fn upload(
        &self,
        body: &Body<'_>,
        desc: &Descriptor,
        mut start: Option<url::Url>,
        progress: &dyn PushProgress,
    ) -> Result<BlobOutcome, RegistryError> {
        let retries = self.inner.options.remote.retries as u64;
        let chunk = self.chunk_size();
        let size = desc.size;
        let (mut requests, mut resumed, mut restarted) = (0u64, 0u64, 0u64);
        let mut backoff = self.inner.options.remote.initial_backoff;
        'upload: loop {
            let mut location = match start.take() {
                Some(l) => l,
                None => self.begin_upload().await?,
            };
            let mut offset = 0u64;
            // Chunks, unless the whole blob fits in one: then the closing PUT carries it.
            while size > chunk && offset < size {
                let n = chunk.min(size - offset);
                let bytes = body.read(offset, n)?;
                requests += 1;
                let what = format!("PATCH {location} (bytes {offset}..{})", offset + n);
                let range = format!("{offset}-{}", offset + n - 1);
                let sent = self
                    .send(Push, &what, 0, &|c| {
                        c.patch(location.clone())
                            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                            .header(reqwest::header::CONTENT_RANGE, &range)
                            .header(reqwest::header::CONTENT_LENGTH, n)
                            .body(bytes.clone())
                    })
                    .await;
                let failure = match sent {
                    Ok(resp) if resp.status().as_u16() == 202 => {
                        location = self.location(&what, &resp)?;
                        let next = range_end(&resp)
                            .filter(|&e| e > offset)
                            .unwrap_or(offset + n);
                        progress.advance(next - offset);
                        offset = next;
                        continue;
                    }
                    Ok(resp) => {
                        let status = resp.status();
                        let body = resp.bytes().await.unwrap_or_default();
                        format!("{status} {}", envelope(&body))
                    }
                    Err(e) => e.to_string(),
                };
                if resumed >= retries {
                    return Err(RegistryError::Request {
                        what,
                        reason: format!("{failure} (after {resumed} resumptions)"),
                    });
                }
                resumed += 1;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                match self.upload_status(&location).await {
                    Ok((l, o)) => {
                        location = l;
                        offset = o;
                    }
                    Err(_) if restarted < retries => {
                        restarted += 1;
                        continue 'upload;
                    }
                    Err(e) => return Err(e),
                }
            }
            // The closing PUT: the digest, and the bytes when they were not sent in chunks.
            let whole = if size > chunk {
                None
            } else {
                Some(body.read(0, size)?)
            };
            let mut put = location.clone();
            put.query_pairs_mut().append_pair("digest", &desc.digest);
            requests += u64::from(whole.is_some());
            let what = format!("PUT {put}");
            let sent = self
                .send(Push, &what, 0, &|c| {
                    let rb = c
                        .put(put.clone())
                        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream");
                    match &whole {
                        Some(b) => rb
                            .header(reqwest::header::CONTENT_LENGTH, b.len())
                            .body(b.clone()),
                        None => rb.header(reqwest::header::CONTENT_LENGTH, 0),
                    }
                })
                .await;
            let failure = match sent {
                Ok(resp) if resp.status().as_u16() == 201 => {
                    if whole.is_some() {
                        progress.advance(size);
                    }
                    return Ok(BlobOutcome::Uploaded {
                        requests,
                        resumed,
                        restarted,
                    });
                }
                Ok(resp) if resp.status().as_u16() == 400 => {
                    let body = resp.bytes().await.unwrap_or_default();
                    let text = envelope(&body);
                    if text.contains("DIGEST_INVALID") || text.contains("SIZE_INVALID") {
                        return Err(RegistryError::BlobContent {
                            what,
                            reason: format!("the registry refused the bytes sent: {text}"),
                        });
                    }
                    format!("400 {text}")
                }
                Ok(resp) => {
                    let status = resp.status();
                    let body = resp.bytes().await.unwrap_or_default();
                    format!("{status} {}", envelope(&body))
                }
                Err(e) => e.to_string(),
            };
            // The PUT may have been taken with its answer lost.
            if self
                .blob_exists_as(&desc.digest, Push)
                .await
                .unwrap_or(false)
            {
                return Ok(BlobOutcome::Uploaded {
                    requests,
                    resumed,
                    restarted,
                });
            }
            if restarted >= retries {
                return Err(RegistryError::Request {
                    what,
                    reason: format!("{failure} (after {restarted} fresh starts)"),
                });
            }
            restarted += 1;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Puts a manifest (or index) under `key` (a tag or its digest); the registry's
    /// `Docker-Content-Digest`, when it sends one, must be the bytes' digest.
    pub fn put_manifest(
        &self,
        key: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<PushedManifest, RegistryError> {
        self.block_on(self.put_manifest_async(key, media_type, bytes))
    }

    async fn put_manifest_async(
        &self,
        key: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<PushedManifest, RegistryError> {
        let url = self.url(&format!("manifests/{key}"));
        let what = format!("PUT {url}");
        let digest = digest_like(&bytes, None);
        let resp = self
            .send(Push, &what, self.inner.options.remote.retries, &|c| {
                c.put(&url)
                    .header(reqwest::header::CONTENT_TYPE, media_type)
                    .body(bytes.clone())
            })
            .await?;
        let status = resp.status();
        let header = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let (claimed, subject) = (header("docker-content-digest"), header("oci-subject"));
        if status.as_u16() != 201 {
            let body = resp.bytes().await.unwrap_or_default();
            return Err(RegistryError::Request {
                what,
                reason: format!("{status} {}", envelope(&body)),
            });
        }
        if let Some(c) = claimed.filter(|c| c.starts_with("sha256:")) {
            if c != digest {
                return Err(RegistryError::ManifestDigest {
                    reference: format!("{} (as pushed)", self.inner.repo.sibling(Some(key), None)),
                    expected: digest,
                    actual: c,
                });
            }
        }
        Ok(PushedManifest { digest, subject })
    }

    /// Pushes `referrer` (a manifest whose `subject` is `subject`) by its digest, and makes it
    /// findable: through the referrers API if the registry took the subject, else by adding it to
    /// the index at the tag `sha256-<hex of the subject>` (made if missing). Returns its digest.
    pub fn attach(
        &self,
        subject: &Descriptor,
        referrer: &oci_client::manifest::OciImageManifest,
    ) -> Result<(String, ReferrersVia), RegistryError> {
        let bytes: Bytes = serde_json::to_vec(referrer)
            .map_err(|e| RegistryError::Request {
                what: "the referrer manifest".into(),
                reason: e.to_string(),
            })?
            .into();
        let digest = digest_like(&bytes, None);
        let pushed = self.put_manifest(&digest, OCI_MANIFEST, bytes.clone())?;
        if pushed.subject.is_some() {
            return Ok((digest, ReferrersVia::Api));
        }
        let tag = subject.digest.replacen(':', "-", 1);
        let entry = oci_client::manifest::ImageIndexEntry {
            media_type: OCI_MANIFEST.into(),
            digest: digest.clone(),
            size: bytes.len() as i64,
            platform: None,
            annotations: referrer.annotations.clone(),
            artifact_type: referrer.artifact_type.clone(),
        };
        let mut index = match self.manifest(&self.inner.repo.sibling(Some(&tag), None)) {
            Ok(m) => match m.parsed {
                Parsed::Index(i) => i,
                Parsed::Manifest(_) => {
                    return Err(RegistryError::Manifest {
                        reference: self.inner.repo.sibling(Some(&tag), None).to_string(),
                        digest: m.digest,
                        source: manifest::ManifestError(
                            "the referrers tag holds a manifest, not an index".into(),
                        ),
                    })
                }
            },
            Err(RegistryError::NotFound { .. }) => oci_client::manifest::OciImageIndex {
                schema_version: 2,
                media_type: Some(OCI_INDEX.into()),
                manifests: Vec::new(),
                artifact_type: None,
                annotations: None,
            },
            Err(e) => return Err(e),
        };
        if !index.manifests.iter().any(|m| m.digest == digest) {
            index.manifests.push(entry);
        }
        let index_bytes = serde_json::to_vec(&index).map_err(|e| RegistryError::Request {
            what: "the referrers index".into(),
            reason: e.to_string(),
        })?;
        self.put_manifest(&tag, OCI_INDEX, index_bytes.into())?;
        Ok((digest, ReferrersVia::Tag(tag)))
    }

    /// The referrers of the manifest `subject` (a digest) of type `artifact_type`: the referrers
    /// API's list, or where the registry has none (404), the index at the `sha256-<hex>` tag
    /// (`oci-client`'s `pull_referrers` does both), filtered here by type in either case.
    pub fn referrers(
        &self,
        subject: &str,
        artifact_type: &str,
    ) -> Result<Vec<oci_client::manifest::ImageIndexEntry>, RegistryError> {
        let reference = self.inner.repo.sibling(None, Some(subject));
        let index = self
            .block_on(
                self.inner
                    .oci
                    .pull_referrers(&reference.to_oci(), Some(artifact_type)),
            )
            .map_err(|e| RegistryError::Request {
                what: format!("the referrers of {reference}"),
                reason: chain(&e),
            })?;
        Ok(index
            .manifests
            .into_iter()
            .filter(|m| m.artifact_type.as_deref() == Some(artifact_type))
            .collect())
    }
}

/// What a mount request did.
enum Mount {
    Mounted,
    Upload(url::Url),
}

/// The offset after the last byte the `Range: 0-N` header of an upload answer says the registry
/// has (`0-0` is read as nothing: uploads here move in whole chunks, never one byte).
fn range_end(resp: &reqwest::Response) -> Option<u64> {
    let r = resp.headers().get(reqwest::header::RANGE)?.to_str().ok()?;
    let (a, b) = r.trim().trim_start_matches("bytes=").split_once('-')?;
    let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
    (a == 0).then_some(if b == 0 { 0 } else { b + 1 })
}
