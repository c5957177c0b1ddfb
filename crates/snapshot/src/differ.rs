//! containerd's diff service (`Apply`) for the snapshotter's own active snapshots: a layer's
//! blob, read from containerd's content store, becomes the snapshot's sealed layer image in one
//! streaming pass ([`Snapshotter::apply`]), which its commit then takes as it is. No directory of
//! files is written, read back and deleted, as when containerd's applier extracts the tar into
//! the snapshot and the commit seals that directory; containerd 2's EROFS differ works the same
//! way (`mkfs.erofs --tar`).
//!
//! Registered in containerd as a proxy plugin of type `diff` on the snapshotter's socket, listed
//! before `walking` in the diff service's defaults (and as the differ of the snapshotter in the
//! transfer service's `unpack_config`). containerd asks its differs in turn until one does not
//! answer "not implemented": this one answers so for mounts that are not an empty active
//! snapshot of this snapshotter, for layers it cannot read (an encrypted media type) and for
//! stream processors' payloads, and `walking` takes those; it never computes diffs (`Diff`).
//!
//! What containerd checks of the answer is checked here too: the blob's size and digest as it is
//! read (the layer is refused, and no image is left, when they differ), and the answer's digest
//! is the SHA-256 of the whole uncompressed tar stream, the diff ID the image's config lists.
//! A hostile tar is refused by the builder with the entry it names (a `..` component, a path
//! through a non-directory); nothing is ever written but the one image file, so nothing can
//! land outside the root.

use crate::error::Error;
use crate::service::Snapshotter;
use containerd_client::services::v1::content_client::ContentClient;
use containerd_client::services::v1::ReadContentRequest;
use containerd_client::types::{Descriptor, Mount};
use sealfs_builder::{Entry, EntryKind, Sink};
use sealfs_import::oci::spec;
use sealfs_import::oci::{SharedVerified, Verified};
use sealfs_import::{Compression, EntryHook, Layer, TarSource};
use sha2::Digest as _;
use std::collections::HashSet;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The generated server of `containerd.services.diff.v1.Diff`.
pub mod api {
    #![allow(missing_docs, clippy::all, clippy::pedantic)]
    tonic::include_proto!("containerd.services.diff.v1");
}

use api::diff_server::{Diff, DiffServer};
use api::{ApplyRequest, ApplyResponse, DiffRequest, DiffResponse};

/// The media type of the uncompressed layer an `Apply` answers with, as containerd's own
/// differs answer.
const APPLIED_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

/// How long connecting to containerd's socket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a blob being read from containerd's content store may stall.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The differ: the snapshotter it builds layers for, and containerd's socket (its content
/// store).
pub struct Differ {
    snapshotter: Arc<Snapshotter>,
    containerd: PathBuf,
}

/// The gRPC service of `differ`, to serve beside the snapshots service.
pub fn server(snapshotter: Arc<Snapshotter>, containerd: &Path) -> DiffServer<Differ> {
    DiffServer::new(Differ {
        snapshotter,
        containerd: containerd.to_path_buf(),
    })
}

/// The upper directory of `mounts` when they are one writable mount of a directory: a bind
/// mount (a snapshot without parents) or overlayfs's `upperdir`.
fn upper_dir(mounts: &[Mount]) -> Option<PathBuf> {
    let [m] = mounts else { return None };
    match m.r#type.as_str() {
        "bind" | "rbind" if m.options.iter().any(|o| o == "rw") => Some(PathBuf::from(&m.source)),
        "overlay" => m
            .options
            .iter()
            .find_map(|o| o.strip_prefix("upperdir="))
            .map(PathBuf::from),
        _ => None,
    }
}

/// A blocking reader of chunks that another task or thread sends: the blob from containerd's
/// content store, the decompressed layer.
struct Chunks {
    next: Box<dyn FnMut() -> Option<io::Result<Vec<u8>>> + Send>,
    chunk: Vec<u8>,
    at: usize,
}

impl Chunks {
    fn new(next: impl FnMut() -> Option<io::Result<Vec<u8>>> + Send + 'static) -> Chunks {
        Chunks {
            next: Box::new(next),
            chunk: Vec::new(),
            at: 0,
        }
    }
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.chunk.len() {
            match (self.next)() {
                None => return Ok(0),
                Some(Err(e)) => return Err(e),
                Some(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// [`Chunks`], shared between the tar reader and the layer's finish.
#[derive(Clone)]
struct SharedChunks(Arc<Mutex<Chunks>>);

impl Read for SharedChunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).read(buf)
    }
}

/// Bytes a decompressed chunk holds.
const CHUNK: usize = 1 << 20;

/// The uncompressed stream of `blob` (compressed as `compression` says), decompressed and
/// hashed on a thread of its own, so that decompressing overlaps parsing the tar and spilling
/// its files: it ends once the blob was read to its end and its digest checked, the
/// uncompressed stream's SHA-256 and length (the layer's diff ID and size) then in `done`.
fn decompressing(
    blob: SharedVerified,
    compression: Compression,
    done: Arc<Mutex<Option<(String, u64)>>>,
) -> Chunks {
    let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<Vec<u8>>>(8);
    let blob_check = blob.clone();
    std::thread::spawn(move || {
        let run = || -> io::Result<()> {
            let mut r = decompressed(Box::new(blob.clone()), compression)?;
            let mut hasher = sha2::Sha256::new();
            let mut len = 0u64;
            loop {
                let mut buf = vec![0u8; CHUNK];
                let mut n = 0;
                while n < CHUNK {
                    match r.read(&mut buf[n..]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                if n == 0 {
                    break;
                }
                buf.truncate(n);
                hasher.update(&buf);
                len += n as u64;
                if tx.send(Ok(buf)).is_err() {
                    // The build stopped reading: it failed already.
                    return Ok(());
                }
            }
            blob.finish()?;
            let hex: String = hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            *done.lock().unwrap_or_else(|e| e.into_inner()) = Some((format!("sha256:{hex}"), len));
            Ok(())
        };
        if let Err(e) = run() {
            // A blob whose digest is wrong is named for that, not for what its bad bytes did
            // to the decompressor.
            let e = blob_check.finish().err().unwrap_or(e);
            let _ = tx.send(Err(e));
        }
    });
    Chunks::new(move || rx.recv().ok())
}

/// The decompressed stream of `blob`, compressed as `compression` says.
fn decompressed(
    blob: Box<dyn Read + Send>,
    compression: Compression,
) -> io::Result<Box<dyn Read + Send>> {
    let buffered = io::BufReader::with_capacity(1 << 20, blob);
    Ok(match compression {
        Compression::None => Box::new(buffered),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(buffered)?),
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} layers are not OCI layers", other.name()),
            ))
        }
    })
}

/// Wraps `inner` (the hook that keeps whiteouts) so that a directory the layer's tar does not
/// give but which holds its entries is made as containerd's applier makes it in an overlayfs
/// upper directory: with the mode, owner, times and xattrs (but `trusted.*`) of the directory
/// at that path in the nearest of `lowers` (nearest first) that has the path, if that is a
/// directory; otherwise as the builder makes one (0755, root, time 0). So a layer sealed here
/// shows, stacked, what the same layer applied by containerd as files shows.
fn parents_from_lowers(lowers: Vec<sealfs_reader::Image>, mut inner: EntryHook) -> EntryHook {
    let mut present: HashSet<Vec<u8>> = HashSet::new();
    Box::new(move |sink: &mut Sink, entry: Entry| {
        let mut end = 0;
        while let Some(slash) = entry.path[end..].iter().position(|&b| b == b'/') {
            end += slash;
            let dir = &entry.path[..end];
            end += 1;
            if present.contains(dir) {
                continue;
            }
            present.insert(dir.to_vec());
            if let Some(made) = lower_dir(&lowers, dir)? {
                sink.add(made)?;
            }
        }
        if entry.kind == EntryKind::Dir {
            present.insert(entry.path.clone());
        }
        inner(sink, entry)
    })
}

/// The directory entry `dir` takes from the nearest lower layer that has the path, if there it
/// is a directory.
fn lower_dir(
    lowers: &[sealfs_reader::Image],
    dir: &[u8],
) -> Result<Option<Entry>, sealfs_builder::EntryError> {
    let failed = |e: sealfs_reader::Error| sealfs_builder::EntryError {
        path: dir.to_vec(),
        what: format!("reading it in a lower layer: {e}"),
    };
    for image in lowers {
        let inode = match image.lookup_path(dir) {
            Ok(inode) => inode,
            Err(sealfs_reader::Error::NotFound(_))
            | Err(sealfs_reader::Error::NotADirectory(_)) => continue,
            Err(e) => return Err(failed(e)),
        };
        if !inode.is_dir() {
            return Ok(None);
        }
        let (mtime, mtime_nsec) = inode.mtime();
        let xattrs = image
            .xattrs(&inode)
            .map_err(failed)?
            .into_iter()
            .filter(|(name, _)| !name.starts_with(b"trusted."))
            .collect();
        return Ok(Some(Entry {
            path: dir.to_vec(),
            kind: EntryKind::Dir,
            mode: u32::from(inode.mode()) & 0o7777,
            uid: inode.uid(),
            gid: inode.gid(),
            mtime,
            mtime_nsec,
            xattrs,
        }));
    }
    Ok(None)
}

fn unimplemented(why: impl std::fmt::Display) -> tonic::Status {
    tonic::Status::unimplemented(format!("sealfs differ: {why}"))
}

impl Differ {
    /// Starts reading `digest` from containerd's content store in `namespace`; the chunks come
    /// through the returned reader.
    async fn read_blob(&self, namespace: &str, digest: &str) -> Result<Chunks, tonic::Status> {
        let socket = self.containerd.clone();
        let channel = tokio::time::timeout(CONNECT_TIMEOUT, containerd_client::connect(&socket))
            .await
            .map_err(|_| {
                tonic::Status::unavailable(format!(
                    "connecting to containerd at {}: no answer in {} s",
                    sealfs_text::escape_path(&socket),
                    CONNECT_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| {
                tonic::Status::unavailable(format!(
                    "connecting to containerd at {}: {e}",
                    sealfs_text::escape_path(&socket)
                ))
            })?;
        let mut request = tonic::Request::new(ReadContentRequest {
            digest: digest.to_string(),
            offset: 0,
            size: 0,
        });
        let ns = namespace.parse().map_err(|_| {
            tonic::Status::invalid_argument(format!(
                "namespace {} is not a header value",
                sealfs_text::Escaped(namespace.as_bytes())
            ))
        })?;
        request.metadata_mut().insert("containerd-namespace", ns);
        let mut client = ContentClient::new(channel);
        let mut stream = tokio::time::timeout(STALL_TIMEOUT, client.read(request))
            .await
            .map_err(|_| {
                tonic::Status::deadline_exceeded(format!(
                    "reading {} from containerd's content store: no answer in {} s",
                    sealfs_text::Escaped(digest.as_bytes()),
                    STALL_TIMEOUT.as_secs()
                ))
            })?
            .map_err(|e| {
                tonic::Status::new(
                    e.code(),
                    format!(
                        "reading {} from containerd's content store: {}",
                        sealfs_text::Escaped(digest.as_bytes()),
                        e.message()
                    ),
                )
            })?
            .into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let digest = digest.to_string();
        tokio::spawn(async move {
            loop {
                let next = match tokio::time::timeout(STALL_TIMEOUT, stream.message()).await {
                    Ok(Ok(Some(m))) => Ok(m.data),
                    Ok(Ok(None)) => break,
                    Ok(Err(e)) => Err(io::Error::other(format!(
                        "reading {} from containerd's content store: {}",
                        sealfs_text::Escaped(digest.as_bytes()),
                        e.message()
                    ))),
                    Err(_) => Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "reading {} from containerd's content store: nothing came for {} s",
                            sealfs_text::Escaped(digest.as_bytes()),
                            STALL_TIMEOUT.as_secs()
                        ),
                    )),
                };
                let failed = next.is_err();
                if tx.send(next).await.is_err() || failed {
                    break;
                }
            }
        });
        let mut rx = rx;
        Ok(Chunks::new(move || rx.blocking_recv()))
    }
}

#[tonic::async_trait]
impl Diff for Differ {
    async fn apply(
        &self,
        request: tonic::Request<ApplyRequest>,
    ) -> Result<tonic::Response<ApplyResponse>, tonic::Status> {
        let namespace = request
            .metadata()
            .get("containerd-namespace")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("default")
            .to_string();
        let req = request.into_inner();
        let Some(desc) = req.diff else {
            return Err(tonic::Status::invalid_argument("Apply without a diff"));
        };
        if !req.payloads.is_empty() {
            return Err(unimplemented("stream processors' payloads"));
        }
        let Some(compression) = spec::layer_compression(&desc.media_type) else {
            return Err(unimplemented(format!(
                "media type {}",
                sealfs_text::Escaped(desc.media_type.as_bytes())
            )));
        };
        let Some(upper) = upper_dir(&req.mounts) else {
            return Err(unimplemented("mounts that are not one of its snapshots"));
        };
        let snapshotter = self.snapshotter.clone();
        let key = {
            let upper = upper.clone();
            let snapshotter = snapshotter.clone();
            tokio::task::spawn_blocking(move || snapshotter.active_with_upper(&upper))
                .await
                .map_err(|e| tonic::Status::internal(e.to_string()))??
        };
        let Some(key) = key else {
            return Err(unimplemented("mounts that are not one of its snapshots"));
        };
        let described = spec::Descriptor {
            media_type: desc.media_type.clone(),
            digest: desc.digest.parse().map_err(|e| {
                tonic::Status::invalid_argument(format!(
                    "digest {}: {e}",
                    sealfs_text::Escaped(desc.digest.as_bytes())
                ))
            })?,
            size: u64::try_from(desc.size).map_err(|_| {
                tonic::Status::invalid_argument(format!("size {} of the diff", desc.size))
            })?,
            platform: None,
            annotations: Default::default(),
        };
        let chunks = self.read_blob(&namespace, &desc.digest).await?;
        let blob = SharedVerified(Arc::new(Mutex::new(Verified::new(
            Box::new(chunks),
            &described,
        ))));
        let diff_id: Arc<Mutex<Option<(String, u64)>>> = Arc::default();
        let tar: Arc<Mutex<Option<SharedChunks>>> = Arc::default();
        let layer = Layer {
            name: desc.digest.clone(),
            size: Some(described.size),
            compression: Some(Compression::None),
            open: {
                let (diff_id, tar) = (diff_id.clone(), tar.clone());
                Box::new(move || {
                    let stream = SharedChunks(Arc::new(Mutex::new(decompressing(
                        blob,
                        compression,
                        diff_id,
                    ))));
                    *tar.lock().unwrap_or_else(|e| e.into_inner()) = Some(stream.clone());
                    Ok(Box::new(stream) as Box<dyn Read + Send>)
                })
            },
            finish: Box::new(move || {
                // Read to the end, as containerd's applier reads past the tar's end blocks:
                // the diff ID is the digest of the whole stream, and the blob's digest is
                // checked at its end.
                if let Some(mut stream) = tar.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    io::copy(&mut stream, &mut io::sink())?;
                }
                Ok(())
            }),
        };
        let applied = tokio::task::spawn_blocking(move || {
            let lowers = match snapshotter.lower_images(&key) {
                Ok(lowers) => lowers,
                Err(e) => return Err(e),
            };
            let mut source = TarSource::lazy_layers(vec![layer])
                .with_hook(parents_from_lowers(
                    lowers,
                    sealfs_import::oci::whiteout::overlay(),
                ))
                .with_acl_xattrs();
            let ask = || {
                diff_id
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .ok_or_else(|| {
                        Error::FailedPrecondition(
                            "the layer's tar stream was not read whole".into(),
                        )
                    })
            };
            let mut size = 0;
            let applied = snapshotter.apply(&key, &mut source, &mut || {
                let (digest, len) = ask()?;
                size = len;
                Ok(digest)
            });
            if let Err(e) = &applied {
                eprintln!(
                    "sealfs snapshotter: apply {} to {}: {e}",
                    sealfs_text::Escaped(described.digest.to_string().as_bytes()),
                    sealfs_text::Escaped(key.as_bytes())
                );
            }
            applied.map(|a| (a, size))
        })
        .await
        .map_err(|e| tonic::Status::internal(e.to_string()))?;
        let (applied, size) = applied?;
        Ok(tonic::Response::new(ApplyResponse {
            applied: Some(Descriptor {
                media_type: APPLIED_MEDIA_TYPE.into(),
                digest: applied.diff_id,
                size: size as i64,
                annotations: Default::default(),
            }),
        }))
    }

    async fn diff(
        &self,
        _request: tonic::Request<DiffRequest>,
    ) -> Result<tonic::Response<DiffResponse>, tonic::Status> {
        Err(unimplemented("computing diffs (walking does)"))
    }
}
