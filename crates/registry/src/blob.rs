//! Blobs: read lazily by range ([`Registry::blob_object`], the same [`RemoteObject`] an HTTP image
//! is read through), streamed whole with their digest checked ([`Registry::blob_reader`]), and
//! asked after ([`Registry::blob_exists`]).
//!
//! A blob is named by its digest, so it cannot change under a reader: a registry whose tag moves
//! to another image still serves the pinned blob (or says it is gone), and what it serves is
//! checked: by the image's Merkle tree for ranges, by the digest for whole streams. Range requests
//! go through `oci-client` (its token cache authorizes them); a redirect to storage (a presigned
//! S3 URL) is followed by its HTTP client, without the registry's credentials (reqwest drops
//! `Authorization` on a redirect to another host). A registry that answers a range request with
//! the whole blob does not serve ranges: that is an error naming it, never a silent download of
//! the whole image.

use crate::client::{blob_client, chain, transient, Registry};
use crate::manifest::Descriptor;
use crate::reference::ImageRef;
use crate::RegistryError;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use oci_client::client::BlobResponse;
use sealfs_remote::object_store::{
    self, path::Path as ObjectPath, GetOptions, GetRange, GetResult, GetResultPayload, ListResult,
    MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions, PutOptions, PutPayload,
    PutResult,
};
use sealfs_remote::{RemoteObject, RemoteOptions, StoreFactory};
use sha2::Digest as _;
use std::io::Read;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

/// Makes a [`BlobStore`] for each [`RemoteObject`] store (fresh clients: a forked child must not
/// share its parent's connections).
struct BlobStores {
    registry: Registry,
    desc: Descriptor,
}

impl StoreFactory for BlobStores {
    fn make(
        &self,
        options: &RemoteOptions,
    ) -> Result<Arc<dyn ObjectStore>, sealfs_remote::RemoteError> {
        let inner = &self.registry.inner;
        let mine = &inner.options.remote;
        // The registry's own client when it fits (same process, same timeouts): making one loads
        // the system's certificate authorities, which costs more than a round trip on a LAN.
        // Otherwise one of its own, made at its first request (the store for an unreachable
        // server may never send one).
        let shared = (inner.runtime.is_own()
            && options.connect_timeout == mine.connect_timeout
            && options.stall_timeout == mine.stall_timeout
            && options.timeout == mine.timeout)
            .then(|| inner.oci.clone());
        let oci = std::sync::OnceLock::new();
        if let Some(c) = shared {
            let _ = oci.set(c);
        }
        Ok(Arc::new(BlobStore {
            oci,
            registry: self.registry.clone(),
            options: options.clone(),
            reference: inner.repo.to_oci(),
            auth: self
                .registry
                .challenge()
                .is_some_and(|c| c != crate::auth::Challenge::None)
                .then(|| inner.credentials.to_oci()),
            desc: self.desc.to_oci(),
            size: self.desc.size,
            name: blob_name(&inner.repo, &self.desc.digest),
            retries: options.retries,
            initial_backoff: options.initial_backoff,
            timeout: options.timeout,
        }))
    }
}

/// How a blob is named in messages: `oci://HOST/REPO@sha256:...`.
pub(crate) fn blob_name(repo: &ImageRef, digest: &str) -> String {
    format!("{}@{digest}", repo.sibling(None, None))
}

/// One blob as an [`ObjectStore`] of one object (whatever its path): ranges are `GET
/// /v2/REPO/blobs/DIGEST` with `Range`, through `oci-client`. Its ETag is the digest.
struct BlobStore {
    /// Its client: the registry's, or its own made at the first request ([`BlobStore::oci`]).
    oci: std::sync::OnceLock<oci_client::Client>,
    registry: Registry,
    options: RemoteOptions,
    reference: oci_client::Reference,
    /// Stored in the client before each request when the registry wants credentials or tokens.
    auth: Option<oci_client::secrets::RegistryAuth>,
    desc: oci_client::manifest::OciDescriptor,
    size: u64,
    name: String,
    retries: usize,
    initial_backoff: Duration,
    timeout: Duration,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name)
    }
}

/// A message as an error `object_store` can carry.
fn boxed(s: String) -> Box<dyn std::error::Error + Send + Sync> {
    s.into()
}

impl BlobStore {
    /// The client, made now if it is not there yet.
    fn oci(&self) -> object_store::Result<&oci_client::Client> {
        if let Some(c) = self.oci.get() {
            return Ok(c);
        }
        let inner = &self.registry.inner;
        let made = blob_client(&inner.repo, &inner.options, &self.options).map_err(|e| {
            object_store::Error::Generic {
                store: "registry",
                source: boxed(e.to_string()),
            }
        })?;
        Ok(self.oci.get_or_init(|| made))
    }

    fn meta(&self, location: &ObjectPath) -> ObjectMeta {
        ObjectMeta {
            location: location.clone(),
            last_modified: chrono::DateTime::UNIX_EPOCH,
            size: self.size,
            e_tag: Some(self.desc.digest.clone()),
            version: None,
        }
    }

    /// An `oci-client` failure as `object_store` says it, and whether to try again.
    fn classify(&self, e: oci_client::errors::OciDistributionError) -> (object_store::Error, bool) {
        use oci_client::errors::{OciDistributionError as E, OciErrorCode};
        let path = self.name.clone();
        match e {
            E::ServerError { code: 404, .. } => (
                object_store::Error::NotFound {
                    path,
                    source: boxed("404".into()),
                },
                false,
            ),
            E::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|x| {
                    matches!(
                        x.code,
                        OciErrorCode::BlobUnknown | OciErrorCode::NameUnknown
                    )
                }) =>
            {
                (
                    object_store::Error::NotFound {
                        path,
                        source: boxed(format!("{envelope}")),
                    },
                    false,
                )
            }
            E::UnauthorizedError { .. } | E::AuthenticationFailure(_) => (
                object_store::Error::Unauthenticated {
                    path,
                    source: boxed(e.to_string()),
                },
                false,
            ),
            E::ServerError { code, .. } if code >= 500 => (
                object_store::Error::Generic {
                    store: "registry",
                    source: boxed(e.to_string()),
                },
                true,
            ),
            E::RequestError(r) => {
                let again = transient(&r);
                (
                    object_store::Error::Generic {
                        store: "registry",
                        source: boxed(chain(&r)),
                    },
                    again,
                )
            }
            e => (
                object_store::Error::Generic {
                    store: "registry",
                    source: boxed(e.to_string()),
                },
                false,
            ),
        }
    }

    /// One attempt at `range`.
    async fn get_once(
        &self,
        range: Range<u64>,
    ) -> Result<GetResultPayload, (object_store::Error, bool)> {
        let oci = self.oci().map_err(|e| (e, false))?;
        if let Some(auth) = &self.auth {
            oci.store_auth_if_needed(self.reference.resolve_registry(), auth)
                .await;
        }
        let answer = tokio::time::timeout(
            self.timeout,
            oci.pull_blob_stream_partial(
                &self.reference,
                &self.desc,
                range.start,
                Some(range.end - range.start),
            ),
        )
        .await
        .map_err(|_| {
            (
                object_store::Error::Generic {
                    store: "registry",
                    source: boxed(format!("no answer within {:?}", self.timeout)),
                },
                true,
            )
        })?
        .map_err(|e| self.classify(e))?;
        let stream = match answer {
            BlobResponse::Partial(s) => s,
            // The whole blob was asked for, and came whole (its digest checked by the stream).
            BlobResponse::Full(s) if range.start == 0 && range.end == self.size => s,
            BlobResponse::Full(_) => {
                return Err((
                    object_store::Error::NotSupported {
                        source: boxed(format!(
                            "the registry answered a range request (bytes {}..{}) with the whole \
                             blob (200, not 206): it does not serve ranges, which lazy reads \
                             need (`sealfs pull` reads the whole image)",
                            range.start, range.end
                        )),
                    },
                    false,
                ))
            }
        };
        if stream
            .content_length
            .is_some_and(|n| n != range.end - range.start)
        {
            return Err((
                object_store::Error::Generic {
                    store: "registry",
                    source: boxed(format!(
                        "asked for {} bytes, the answer says {:?}",
                        range.end - range.start,
                        stream.content_length
                    )),
                },
                true,
            ));
        }
        let body: BoxStream<'static, object_store::Result<Bytes>> = stream
            .stream
            .map_err(|e| object_store::Error::Generic {
                store: "registry",
                source: Box::new(e),
            })
            .boxed();
        Ok(GetResultPayload::Stream(body))
    }
}

#[async_trait::async_trait]
impl ObjectStore for BlobStore {
    async fn put_opts(
        &self,
        _: &ObjectPath,
        _: PutPayload,
        _: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(self.not_here("put_opts"))
    }

    async fn put_multipart_opts(
        &self,
        _: &ObjectPath,
        _: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(self.not_here("put_multipart_opts"))
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let meta = self.meta(location);
        if options.head {
            let oci = self.oci()?;
            if let Some(auth) = &self.auth {
                oci.store_auth_if_needed(self.reference.resolve_registry(), auth)
                    .await;
            }
            return match oci.blob_exists(&self.reference, &self.desc.digest).await {
                Ok(true) => Ok(GetResult {
                    payload: GetResultPayload::Stream(futures::stream::empty().boxed()),
                    meta,
                    range: 0..0,
                    attributes: Default::default(),
                }),
                Ok(false) => Err(object_store::Error::NotFound {
                    path: self.name.clone(),
                    source: boxed("HEAD: 404".into()),
                }),
                Err(e) => Err(self.classify(e).0),
            };
        }
        let size = self.size;
        let range = match options.range {
            None => 0..size,
            Some(GetRange::Bounded(r)) => r,
            Some(GetRange::Offset(o)) => o..size,
            Some(GetRange::Suffix(n)) => size.saturating_sub(n)..size,
        };
        if range.start > range.end || range.end > size {
            return Err(object_store::Error::Generic {
                store: "registry",
                source: boxed(format!(
                    "bytes {}..{} are outside the blob's {size}",
                    range.start, range.end
                )),
            });
        }
        if range.is_empty() {
            return Ok(GetResult {
                payload: GetResultPayload::Stream(futures::stream::empty().boxed()),
                meta,
                range,
                attributes: Default::default(),
            });
        }
        let mut backoff = self.initial_backoff;
        let mut attempt = 0;
        loop {
            match self.get_once(range.clone()).await {
                Ok(payload) => {
                    return Ok(GetResult {
                        payload,
                        meta,
                        range,
                        attributes: Default::default(),
                    })
                }
                Err((e, again)) if !again || attempt >= self.retries => return Err(e),
                Err(_) => {}
            }
            attempt += 1;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    fn delete_stream(
        &self,
        _: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        futures::stream::once(futures::future::ready(Err(self.not_here("delete_stream")))).boxed()
    }

    fn list(&self, _: Option<&ObjectPath>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        futures::stream::once(futures::future::ready(Err(self.not_here("list")))).boxed()
    }

    async fn list_with_delimiter(
        &self,
        _: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        Err(self.not_here("list_with_delimiter"))
    }

    async fn copy_opts(
        &self,
        _: &ObjectPath,
        _: &ObjectPath,
        _: object_store::CopyOptions,
    ) -> object_store::Result<()> {
        Err(self.not_here("copy_opts"))
    }
}

impl BlobStore {
    fn not_here(&self, operation: &str) -> object_store::Error {
        object_store::Error::NotImplemented {
            operation: operation.into(),
            implementer: "sealfs-registry blob reads".into(),
        }
    }
}

/// A blob streamed whole, its size and digest checked as it is read: the bytes past the size the
/// descriptor states are an error at once, and the end of the stream is an error unless the
/// bytes hash to the descriptor's digest (`InvalidData`, naming both). A connection broken off
/// is resumed from where it stopped with a range request (if the registry serves ranges), up to
/// the retries of [`RemoteOptions`]. The bytes returned before the end are not yet checked: a
/// consumer keeps nothing it made from them unless the read reaches the end without an error.
///
/// A blob of [`PUMP_MIN_BYTES`] or more is received (and hashed) by a thread of its own, up to
/// [`PUMP_BYTES`] ahead of the reader, so that the download goes on while the consumer
/// decompresses what came before (a layer streamed into a build).
pub struct BlobReader {
    registry: Registry,
    desc: Descriptor,
    /// The stream, until it is handed to the thread (or for a small blob, throughout).
    fetch: Option<Fetch>,
    /// What the thread receives: a chunk, the end (digest checked), or the error it met.
    pump: Option<std::sync::mpsc::Receiver<std::io::Result<Option<Bytes>>>>,
    /// The bytes in the channel (see [`Budget`]).
    budget: Budget,
    pending: Bytes,
    /// Bytes given to the consumer.
    given: u64,
    /// The end was reached, its digest checked; or the error every later read returns.
    end: Option<Result<(), (std::io::ErrorKind, String)>>,
    /// An error the thread sent while a read was already returning bytes: the next read
    /// returns it as it came (later ones, [`BlobReader::end`]'s copy).
    failure: Option<std::io::Error>,
}

/// Blobs at least this large are received by a thread ahead of the reader: 4 MiB.
pub const PUMP_MIN_BYTES: u64 = 4 << 20;

/// How many bytes the receiving thread keeps ready before it waits for the reader: 8 MiB.
pub const PUMP_BYTES: u64 = 8 << 20;

/// The bytes the receiving thread has sent and the reader not yet taken, and whether the reader
/// is gone; the thread waits on the condition while the bytes reach [`PUMP_BYTES`].
type Budget = Arc<(std::sync::Mutex<(u64, bool)>, std::sync::Condvar)>;

/// The stream of one blob, its digest computed as it comes, resumed by range after a break.
struct Fetch {
    registry: Registry,
    desc: Descriptor,
    stream: Option<BoxStream<'static, std::io::Result<Bytes>>>,
    read: u64,
    hasher: Hasher,
    done: bool,
    resumes: usize,
}

enum Hasher {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Hasher {
    fn update(&mut self, b: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(b),
            Hasher::Sha512(h) => h.update(b),
        }
    }

    fn finish(&self) -> String {
        match self {
            Hasher::Sha256(h) => format!("sha256:{}", crate::client::hex(&h.clone().finalize())),
            Hasher::Sha512(h) => format!("sha512:{}", crate::client::hex(&h.clone().finalize())),
        }
    }
}

impl std::fmt::Debug for BlobReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobReader")
            .field("digest", &self.desc.digest)
            .field("read", &self.given)
            .finish_non_exhaustive()
    }
}

impl BlobReader {
    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.given
    }

    /// The descriptor checked against.
    pub fn descriptor(&self) -> &Descriptor {
        &self.desc
    }

    /// The next chunk: from the thread, else from the stream directly (a small blob), starting
    /// the thread first for a large one. `None`: the end, the digest checked.
    fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        if self.pump.is_none() && self.desc.size >= PUMP_MIN_BYTES {
            if let Some(mut fetch) = self.fetch.take() {
                let (tx, rx) = std::sync::mpsc::channel();
                let budget = self.budget.clone();
                let started = std::thread::Builder::new()
                    .name("sealfs-blob".into())
                    .spawn(move || loop {
                        let next = fetch.next_chunk();
                        let last = !matches!(next, Ok(Some(_)));
                        if let Ok(Some(chunk)) = &next {
                            let (lock, cv) = &*budget;
                            let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
                            while state.0 >= PUMP_BYTES && !state.1 {
                                state = cv.wait(state).unwrap_or_else(|e| e.into_inner());
                            }
                            state.0 += chunk.len() as u64;
                        }
                        // The reader gone (dropped early): nothing more to fetch for.
                        if tx.send(next).is_err() || last {
                            return;
                        }
                    });
                match started {
                    Ok(_) => self.pump = Some(rx),
                    Err(e) => {
                        return Err(std::io::Error::new(
                            e.kind(),
                            format!("{}: starting its reader thread: {e}", self.name()),
                        ))
                    }
                }
            }
        }
        match (&self.pump, &mut self.fetch) {
            (Some(rx), _) => {
                let next = rx.recv().unwrap_or_else(|_| {
                    Err(std::io::Error::other(format!(
                        "{}: its reader thread stopped",
                        self.name()
                    )))
                });
                if let Ok(Some(chunk)) = &next {
                    self.taken(chunk.len());
                }
                next
            }
            (None, Some(fetch)) => fetch.next_chunk(),
            (None, None) => Ok(None),
        }
    }

    fn name(&self) -> String {
        blob_name(&self.registry.inner.repo, &self.desc.digest)
    }

    /// A chunk of `n` bytes taken from the channel: the thread may receive more.
    fn taken(&self, n: usize) {
        let (lock, cv) = &*self.budget;
        let mut state = lock.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = state.0.saturating_sub(n as u64);
        cv.notify_one();
    }
}

impl Drop for BlobReader {
    /// Lets a thread waiting for room go (and end: its next send fails).
    fn drop(&mut self) {
        let (lock, cv) = &*self.budget;
        lock.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        cv.notify_one();
    }
}

impl Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        if self.pending.is_empty() {
            if let Some(end) = &self.end {
                return match end {
                    Ok(()) => Ok(0),
                    Err((kind, text)) => Err(std::io::Error::new(*kind, text.clone())),
                };
            }
            match self.next_chunk() {
                Ok(Some(chunk)) => self.pending = chunk,
                Ok(None) => {
                    self.end = Some(Ok(()));
                    return Ok(0);
                }
                Err(e) => {
                    self.end = Some(Err((e.kind(), e.to_string())));
                    return Err(e);
                }
            }
        }
        // What is there, without waiting for more: the chunk at hand, then those the thread
        // has ready.
        let mut n = 0;
        loop {
            let k = self.pending.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&self.pending[..k]);
            self.pending = self.pending.slice(k..);
            n += k;
            if n == buf.len() {
                break;
            }
            match self.pump.as_ref().map(|rx| rx.try_recv()) {
                Some(Ok(Ok(Some(chunk)))) => {
                    self.taken(chunk.len());
                    self.pending = chunk;
                }
                // The end or an error: said at the next read.
                Some(Ok(Ok(None))) => {
                    self.end = Some(Ok(()));
                    break;
                }
                Some(Ok(Err(e))) => {
                    self.end = Some(Err((e.kind(), e.to_string())));
                    self.failure = Some(e);
                    break;
                }
                _ => break,
            }
        }
        self.given += n as u64;
        Ok(n)
    }
}

impl Fetch {
    fn name(&self) -> String {
        blob_name(&self.registry.inner.repo, &self.desc.digest)
    }

    fn content_err(&self, reason: String) -> std::io::Error {
        RegistryError::BlobContent {
            what: self.name(),
            reason,
        }
        .into_io()
    }

    /// Opens (or, after a break, resumes) the stream at `self.read`. From the first byte, the
    /// request is this crate's own (on the connection the manifest came by; `oci-client`'s
    /// whole-blob stream would hash every byte a second time); a resumption is `oci-client`'s
    /// range request.
    fn start(&mut self) -> std::io::Result<()> {
        let registry = self.registry.clone();
        let inner = &registry.inner;
        let offset = self.read;
        let name = self.name();
        if offset == 0 {
            let url = registry.url(&format!("blobs/{}", self.desc.digest));
            let what = format!("GET {name}");
            let stream = registry.block_on(async {
                let resp = registry
                    .send(
                        oci_client::RegistryOperation::Pull,
                        &what,
                        inner.options.remote.retries,
                        &|c| c.get(&url),
                    )
                    .await?;
                let status = resp.status();
                if status.is_success() {
                    return Ok(resp
                        .bytes_stream()
                        .map_err(|e| std::io::Error::other(chain(&e)))
                        .boxed());
                }
                let body = resp.bytes().await.unwrap_or_default();
                let reason = format!("{status} {}", crate::client::envelope(&body));
                Err(if status == reqwest::StatusCode::NOT_FOUND {
                    RegistryError::NotFound {
                        what: name.clone(),
                        reason,
                    }
                } else {
                    RegistryError::Request {
                        what: what.clone(),
                        reason,
                    }
                })
            });
            self.stream = Some(stream.map_err(RegistryError::into_io)?);
            return Ok(());
        }
        let reference = inner.repo.to_oci();
        let desc = self.desc.to_oci();
        let answer = registry.block_on(async {
            if registry
                .challenge()
                .is_some_and(|c| c != crate::auth::Challenge::None)
            {
                inner
                    .oci
                    .store_auth_if_needed(reference.resolve_registry(), &inner.credentials.to_oci())
                    .await;
            }
            match inner
                .oci
                .pull_blob_stream_partial(&reference, &desc, offset, None)
                .await?
            {
                BlobResponse::Partial(s) => Ok(s),
                BlobResponse::Full(_) => Err(oci_client::errors::OciDistributionError::GenericError(Some(
                    "the connection broke off and the registry does not serve ranges to resume from".into(),
                ))),
            }
        });
        let stream = answer.map_err(|e| {
            let not_found = matches!(&e, oci_client::errors::OciDistributionError::ServerError { code: 404, .. })
                || matches!(&e, oci_client::errors::OciDistributionError::RegistryError { envelope, .. }
                    if envelope.errors.iter().any(|x| matches!(x.code, oci_client::errors::OciErrorCode::BlobUnknown)));
            let err = if not_found {
                RegistryError::NotFound {
                    what: name.clone(),
                    reason: e.to_string(),
                }
            } else {
                RegistryError::Request {
                    what: format!("GET {name} from byte {offset}"),
                    reason: e.to_string(),
                }
            };
            err.into_io()
        })?;
        self.stream = Some(stream.stream.boxed());
        Ok(())
    }

    /// The next chunk of the blob, counted and hashed; `None` at the end, once the digest
    /// matches.
    fn next_chunk(&mut self) -> std::io::Result<Option<Bytes>> {
        loop {
            if self.done {
                return Ok(None);
            }
            if self.stream.is_none() {
                self.start()?;
            }
            let registry = self.registry.clone();
            let next = match self.stream.as_mut() {
                Some(s) => registry.block_on(s.next()),
                None => None,
            };
            match next {
                Some(Ok(chunk)) if chunk.is_empty() => {}
                Some(Ok(chunk)) => {
                    if self.read + chunk.len() as u64 > self.desc.size {
                        return Err(self.content_err(format!(
                            "more than the {} bytes its descriptor states",
                            self.desc.size
                        )));
                    }
                    self.hasher.update(&chunk);
                    self.read += chunk.len() as u64;
                    return Ok(Some(chunk));
                }
                Some(Err(e)) => {
                    self.stream = None;
                    if self.read == self.desc.size {
                        return self.finish();
                    }
                    if self.resumes >= self.registry.inner.options.remote.retries {
                        return Err(std::io::Error::new(
                            e.kind(),
                            format!("{}: at byte {}: {e}", self.name(), self.read),
                        ));
                    }
                    self.resumes += 1;
                }
                None if self.read < self.desc.size => {
                    self.stream = None;
                    if self.resumes >= self.registry.inner.options.remote.retries {
                        return Err(self.content_err(format!(
                            "the stream ended at byte {} of {}",
                            self.read, self.desc.size
                        )));
                    }
                    self.resumes += 1;
                }
                None => return self.finish(),
            }
        }
    }

    /// The end: the digest compared; `None` when it matches.
    fn finish(&mut self) -> std::io::Result<Option<Bytes>> {
        let actual = self.hasher.finish();
        if actual != self.desc.digest {
            return Err(self.content_err(format!(
                "its bytes hash to {actual}, not the digest that names it"
            )));
        }
        self.done = true;
        self.stream = None;
        Ok(None)
    }
}

impl Registry {
    /// The blob `desc` names as a [`RemoteObject`]: a [`sealfs_reader::ReadAt`] read lazily with
    /// range requests, batched and retried as an HTTP image is (see `sealfs-remote`), with the
    /// options of [`crate::RegistryOptions::remote`]. The open fetches the blob's last
    /// [`RemoteOptions::tail_bytes`] (where a seal lies).
    pub fn blob_object(&self, desc: &Descriptor) -> Result<RemoteObject, RegistryError> {
        let name = blob_name(&self.inner.repo, &desc.digest);
        let factory = Arc::new(BlobStores {
            registry: self.clone(),
            desc: desc.clone(),
        });
        Ok(RemoteObject::open_store(
            &name,
            ObjectPath::from("blob"),
            factory,
            self.inner.options.remote.clone(),
        )?)
    }

    /// The blob `desc` names, streamed whole with its size and digest checked ([`BlobReader`]).
    /// Nothing is requested until the first read.
    pub fn blob_reader(&self, desc: &Descriptor) -> Result<BlobReader, RegistryError> {
        let hasher = if desc.digest.starts_with("sha512:") {
            Hasher::Sha512(sha2::Sha512::new())
        } else {
            Hasher::Sha256(sha2::Sha256::new())
        };
        Ok(BlobReader {
            registry: self.clone(),
            desc: desc.clone(),
            fetch: Some(Fetch {
                registry: self.clone(),
                desc: desc.clone(),
                stream: None,
                read: 0,
                hasher,
                done: false,
                resumes: 0,
            }),
            pump: None,
            budget: Arc::default(),
            pending: Bytes::new(),
            given: 0,
            end: None,
            failure: None,
        })
    }

    /// Whether the registry has the blob `digest` in this repository (`HEAD`).
    pub fn blob_exists(&self, digest: &str) -> Result<bool, RegistryError> {
        self.block_on(self.blob_exists_as(digest, oci_client::RegistryOperation::Pull))
    }

    /// [`Registry::blob_exists`], authorized for `op` (a push asks with its push token).
    pub(crate) async fn blob_exists_as(
        &self,
        digest: &str,
        op: oci_client::RegistryOperation,
    ) -> Result<bool, RegistryError> {
        let url = self.url(&format!("blobs/{digest}"));
        let what = format!("HEAD {url}");
        let resp = self
            .send(op, &what, self.inner.options.remote.retries, &|c| {
                c.head(&url)
            })
            .await?;
        match resp.status().as_u16() {
            200..=299 => Ok(true),
            404 => Ok(false),
            s => Err(RegistryError::Request {
                what,
                reason: format!("{s}"),
            }),
        }
    }
}
