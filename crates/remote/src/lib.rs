//! Remote sealfs images: a [`ReadAt`] over one object at an `http://`, `https://` or `s3://` URL,
//! read lazily with range requests (through the `object_store` crate), and the entry point that
//! opens an image at a path or a URL ([`open`]).
//!
//! # Design
//!
//! - **Pinned at open.** [`RemoteObject::open`] makes one request: a suffix range of the last
//!   [`RemoteOptions::tail_bytes`] bytes. Its answer gives the object's length and its ETag (and
//!   version, where the store has them), and the bytes themselves are kept: the seal's footer and
//!   header lie at the end of the image, so finding the seal costs that one request. Every later
//!   range request is conditional on the pinned ETag (`If-Match`), and the size and ETag of each
//!   answer are compared too (for a store that gives no ETag, size and modification time); a
//!   changed object is [`RemoteError::Changed`], never bytes of two objects mixed.
//! - **One batch, one round trip.** [`ReadAt::read_batch`] (which the verifying layer calls with a
//!   read's data blocks *and* every missing Merkle hash block at once) sorts the ranges, coalesces
//!   those less than [`RemoteOptions::coalesce_gap`] apart into one request, splits a longer span
//!   into parts of [`RemoteOptions::max_request_bytes`], and issues the requests concurrently, at
//!   most [`RemoteOptions::max_in_flight`] at a time (parallel range requests fill a link with a
//!   long round trip, where one request at a time waits a round trip per part). Hash blocks
//!   therefore travel with the data, never as a dependent request after it.
//! - **Retries.** `object_store` retries timeouts, connection errors and 5xx answers with
//!   exponential backoff ([`RemoteOptions::retries`]); a body shorter than asked for, or broken off,
//!   is retried here the same way. After the retries the batch fails with an [`io::Error`] that
//!   names the URL and range; other reads go on. A server certificate that TLS refuses (an
//!   untrusted issuer, say) fails at once, neither retried nor followed by other requests: no
//!   retry can change it (the client is `object_store`'s own, wrapped in `tls.rs`). The request
//!   at open (the tail) is retried as every later one is.
//! - **Slow servers.** A body that brings fewer than [`RemoteOptions::speed_limit`] bytes a second
//!   over [`RemoteOptions::speed_time`] is given up on ([`RemoteError::TooSlow`], not retried: a
//!   server trickling a byte every few seconds is never silent long enough for the stall timeout,
//!   and `object_store` would resume its body without end), and a request that has not finished,
//!   retries included, after [`RemoteOptions::max_time`] is too ([`RemoteError::Deadline`]); both
//!   name the server. The rate is counted here, over the body as `object_store` hands it on, so
//!   it holds for every store (HTTP, S3, a registry's blobs) and across its resumptions.
//! - **A private runtime.** The [`ReadAt`] API is synchronous and is called from many threads (FUSE
//!   workers among them); each call blocks on a small tokio runtime owned by the object.
//! - **Trust.** Bytes from a server are only as good as the digest they are checked against:
//!   [`open`] refuses a remote image unless a digest or a key is given, or the caller accepts
//!   self-consistent reading by name ([`RemoteTrust::AllowSelfConsistent`]).
//!
//! S3 settings come from the usual environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL` or
//! `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`); a custom endpoint is addressed path-style, and plain HTTP is
//! allowed for a loopback endpoint. Without an access key, requests are sent unsigned (no instance
//! metadata service is asked).

use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, Certificate, ClientOptions, GetOptions, GetRange, ObjectMeta, ObjectStore,
    ObjectStoreExt, RetryConfig,
};
use sealfs_reader::ReadAt;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod open;
mod tls;

/// The `object_store` this crate reads through, for a [`StoreFactory`] of another crate.
pub use object_store;
pub use open::{
    check, detached_signatures, open, open_cached, open_counted, open_counted_with, source,
    source_with, CacheSettings, CheckSources, RemoteTrust,
};

/// Why a remote object could not be opened or read. Every message names the URL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The location is not a URL this crate reads, or is malformed.
    #[error("{url}: {reason}")]
    BadUrl {
        /// The location given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The store could not be set up (bad settings in the environment, for example).
    #[error("{url}: setting up the client")]
    Setup {
        /// The URL.
        url: String,
        /// What `object_store` said.
        #[source]
        source: object_store::Error,
    },
    /// A certificate authority file (`ca_certificates`) could not be used.
    #[error("{}: certificate authority: {reason}", sealfs_reader::show_path(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str())))]
    Certificate {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// There is no object at the URL.
    #[error("{url}: no such object")]
    NotFound {
        /// The URL.
        url: String,
    },
    /// A request failed (after its retries).
    #[error("{url}: {what}")]
    Request {
        /// The URL.
        url: String,
        /// What was asked for (the range).
        what: String,
        /// What `object_store` said.
        #[source]
        source: object_store::Error,
    },
    /// The object is not the one that was opened: its ETag (or, for a store without ETags, its
    /// size or modification time) changed, or it is gone.
    #[error("{url}: the object changed since it was opened: {was}, now {now}")]
    Changed {
        /// The URL.
        url: String,
        /// What identified the object at open (`ETag "..." (N bytes)`).
        was: String,
        /// What the store says now, in the same form (or `deleted`).
        now: String,
    },
    /// The server sent an answer's body slower than [`RemoteOptions::speed_limit`] bytes a second,
    /// averaged over [`RemoteOptions::speed_time`] (a server that trickles bytes is never silent
    /// long enough for [`RemoteOptions::stall_timeout`]). Not retried: a server that slow is
    /// given up on.
    #[error(
        "{url}: {what}: the server at {server} sent {got} bytes in {}s, slower than the minimum of \
         {limit} bytes/s (--speed-limit, over --speed-time): given up",
        window.as_secs_f64()
    )]
    TooSlow {
        /// The URL.
        url: String,
        /// What was asked for (the range).
        what: String,
        /// The server (`HOST[:PORT]`).
        server: String,
        /// Bytes received over the window.
        got: u64,
        /// The minimum, in bytes a second.
        limit: u64,
        /// The window.
        window: Duration,
    },
    /// A request, its retries included, did not finish within [`RemoteOptions::max_time`].
    #[error(
        "{url}: {what}: the server at {server} did not answer in full within {}s (--max-time): \
         given up",
        after.as_secs_f64()
    )]
    Deadline {
        /// The URL.
        url: String,
        /// What was asked for (the range).
        what: String,
        /// The server (`HOST[:PORT]`).
        server: String,
        /// The deadline.
        after: Duration,
    },
    /// The store answered with fewer (or other) bytes than asked for, after the retries.
    #[error("{url}: bytes {}..{}: the answer held {got} bytes", range.start, range.end)]
    Short {
        /// The URL.
        url: String,
        /// The range asked for.
        range: Range<u64>,
        /// Bytes received.
        got: u64,
    },
}

impl RemoteError {
    /// As an [`io::Error`] (of kind `NotFound`, `UnexpectedEof`, `InvalidInput` or `Other`), for
    /// the [`ReadAt`] interface.
    pub fn into_io(self) -> io::Error {
        let kind = match &self {
            RemoteError::NotFound { .. } => io::ErrorKind::NotFound,
            RemoteError::Short { .. } => io::ErrorKind::UnexpectedEof,
            RemoteError::BadUrl { .. } => io::ErrorKind::InvalidInput,
            RemoteError::TooSlow { .. } | RemoteError::Deadline { .. } => io::ErrorKind::TimedOut,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, self)
    }
}

/// How a [`RemoteObject`] reads.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Bytes fetched from the end of the object at open and kept (the seal's footer and header, and
    /// whatever else of the tail fits).
    pub tail_bytes: u64,
    /// Ranges of one batch less than this many bytes apart are fetched as one request (the bytes in
    /// between are fetched and dropped).
    pub coalesce_gap: u64,
    /// No request asks for more than this: a coalesced span stops growing here, and a longer range
    /// is fetched in parts of this size, concurrently.
    pub max_request_bytes: u64,
    /// Requests in flight at once, per batch.
    pub max_in_flight: usize,
    /// Retries of a failed request (timeouts, connection errors, 5xx, short bodies).
    pub retries: usize,
    /// The first backoff; each next one doubles, up to a second.
    pub initial_backoff: Duration,
    /// Time allowed for one request, connection included.
    pub timeout: Duration,
    /// Time allowed to establish a connection: at most this, and at most
    /// [`UNREACHABLE_CONNECT_TIMEOUT`] while the server is found unreachable (a host that drops
    /// packets rather than refusing them costs that much per read then, not this).
    pub connect_timeout: Duration,
    /// The longest a request may go without its answer, or its body without a byte, before it is
    /// given up on as timed out (and retried over a new connection): a connection kept from an
    /// earlier request to a host that has since gone silent would otherwise hold a read for all of
    /// [`Self::timeout`].
    pub stall_timeout: Duration,
    /// The least an answer's body must bring, in bytes a second averaged over
    /// [`Self::speed_time`], before it is given up on ([`RemoteError::TooSlow`]; curl's
    /// `--speed-limit`). 0: no minimum.
    pub speed_limit: u64,
    /// The window [`Self::speed_limit`] is averaged over (curl's `--speed-time`).
    pub speed_time: Duration,
    /// The longest one request may take, from its first attempt to its last byte, retries and
    /// backoff included ([`RemoteError::Deadline`]; curl's `--max-time`, per request).
    pub max_time: Duration,
    /// A directory where the tail fetched at open is kept (with the object's size and ETag), so
    /// that an image whose blocks are all in the persistent cache opens with the network gone: the
    /// kept tail stands in for the request. The seal in it is checked against the expected digest
    /// as always, and the first read that does need the network finds out whether the object
    /// changed (its ETag).
    pub tail_cache: Option<std::path::PathBuf>,
    /// PEM files of certificate authorities to trust for `https://`, besides the system's (for a
    /// server whose certificate a private CA signed). Read once, when an object is opened.
    pub ca_certificates: Vec<std::path::PathBuf>,
}

impl Default for RemoteOptions {
    fn default() -> RemoteOptions {
        RemoteOptions {
            tail_bytes: 64 << 10,
            coalesce_gap: 64 << 10,
            max_request_bytes: 2 << 20,
            max_in_flight: 16,
            retries: 5,
            initial_backoff: Duration::from_millis(50),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(10),
            speed_limit: DEFAULT_SPEED_LIMIT,
            speed_time: DEFAULT_SPEED_TIME,
            max_time: DEFAULT_MAX_TIME,
            tail_cache: None,
            ca_certificates: Vec::new(),
        }
    }
}

/// The default [`RemoteOptions::speed_limit`]: 1 KiB a second (a server that trickles a byte
/// every few seconds is given up on after [`DEFAULT_SPEED_TIME`], where its silences alone never
/// reach [`RemoteOptions::stall_timeout`]).
pub const DEFAULT_SPEED_LIMIT: u64 = 1024;

/// The default [`RemoteOptions::speed_time`]: 20 seconds.
pub const DEFAULT_SPEED_TIME: Duration = Duration::from_secs(20);

/// The default [`RemoteOptions::max_time`]: 10 minutes per request (a 2 MiB part at a sixteenth
/// of a 1 Mbit/s link takes about 4).
pub const DEFAULT_MAX_TIME: Duration = Duration::from_secs(600);

/// Why a body could not be read whole.
enum BodyError {
    /// The store's error (after its own resumptions).
    Store(object_store::Error),
    /// It came slower than the minimum: `got` bytes over the window.
    TooSlow { got: u64 },
}

/// The body of `answer`, whole, given up on when fewer than `options.speed_limit` bytes a second
/// arrive over a window of `options.speed_time` (counted across `object_store`'s own resumptions
/// of a body broken off, so a trickle cannot go on through them).
async fn read_body(
    answer: object_store::GetResult,
    options: &RemoteOptions,
) -> Result<Bytes, BodyError> {
    let window = options.speed_time;
    let limited = options.speed_limit != 0 && !window.is_zero();
    let want = (answer.range.end - answer.range.start) as usize;
    let mut out = BodyBuf::new(want);
    let mut body = answer.into_stream();
    let least = (options.speed_limit as f64 * window.as_secs_f64()) as u64;
    let mut window_end = tokio::time::Instant::now() + window;
    let mut got = 0u64;
    loop {
        let next = if limited {
            tokio::time::timeout_at(window_end, body.next()).await
        } else {
            Ok(body.next().await)
        };
        match next {
            Ok(Some(Ok(chunk))) => {
                got += chunk.len() as u64;
                out.push(&chunk);
            }
            Ok(Some(Err(e))) => return Err(BodyError::Store(e)),
            Ok(None) => return Ok(out.freeze()),
            Err(_) => {}
        }
        let now = tokio::time::Instant::now();
        if limited && now >= window_end {
            if got < least {
                return Err(BodyError::TooSlow { got });
            }
            window_end = now + window;
            got = 0;
        }
    }
}

/// Bodies at least this long are received into pages mapped for them alone.
const MAPPED_BODY: usize = 128 << 10;

/// Where a body is received. A large one (a 2 MiB part) gets pages of its own, unmapped when the
/// last [`Bytes`] of it is dropped: from the heap, the I/O threads' glibc arenas kept what they
/// freed (glibc's mmap threshold rises to the largest block freed), and a cold 200 MB read through
/// the cache peaked at 139 MiB RSS with this, against 93 MiB uncached (docs/benchmarks.md,
/// "Remote reads from the bindings").
enum BodyBuf {
    Mapped { map: memmap2::MmapMut, len: usize },
    Heap(bytes::BytesMut),
}

impl BodyBuf {
    fn new(want: usize) -> BodyBuf {
        match want {
            0..MAPPED_BODY => BodyBuf::Heap(bytes::BytesMut::with_capacity(want)),
            _ => match memmap2::MmapMut::map_anon(want) {
                Ok(map) => BodyBuf::Mapped { map, len: 0 },
                Err(_) => BodyBuf::Heap(bytes::BytesMut::with_capacity(want.min(64 << 20))),
            },
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if let BodyBuf::Mapped { map, len } = self {
            if let Some(room) = map.get_mut(*len..*len + chunk.len()) {
                room.copy_from_slice(chunk);
                *len += chunk.len();
                return;
            }
            // More than was asked for (the caller reports the length): kept on the heap.
            *self = BodyBuf::Heap(bytes::BytesMut::from(&map[..*len]));
        }
        if let BodyBuf::Heap(b) = self {
            b.extend_from_slice(chunk);
        }
    }

    fn freeze(self) -> Bytes {
        match self {
            BodyBuf::Mapped { map, len } => Bytes::from_owner(map).slice(..len),
            BodyBuf::Heap(b) => b.freeze(),
        }
    }
}

/// The server of a URL, as messages name it: `HOST[:PORT]` (the whole URL if it has none).
fn server_of(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            _ => url.to_string(),
        },
        Err(_) => url.to_string(),
    }
}

/// What a [`RemoteObject`] has done.
#[derive(Debug, Default)]
pub struct RemoteStats {
    /// Range requests sent (the one at open included; retries included).
    pub requests: AtomicU64,
    /// Bytes received in answers.
    pub bytes_fetched: AtomicU64,
    /// Requests retried here (short or broken bodies); `object_store`'s own retries are not seen.
    pub retries: AtomicU64,
    /// Round trips: the request at open, and each read batch ([`ReadAt::read_batch`] or a single
    /// read) that sent requests (concurrently; batches served from the tail send none).
    pub round_trips: AtomicU64,
    /// Ranges served from the tail fetched at open, without a request.
    pub tail_hits: AtomicU64,
}

impl RemoteStats {
    /// The counters by name (`remote_requests`, `remote_round_trips`, `remote_bytes_fetched`,
    /// `remote_retries`, `remote_tail_hits`).
    pub fn counters(&self) -> [(&'static str, u64); 5] {
        [
            ("remote_requests", self.requests.load(Relaxed)),
            ("remote_round_trips", self.round_trips.load(Relaxed)),
            ("remote_bytes_fetched", self.bytes_fetched.load(Relaxed)),
            ("remote_retries", self.retries.load(Relaxed)),
            ("remote_tail_hits", self.tail_hits.load(Relaxed)),
        ]
    }
}

/// Whether `location` is a URL this crate reads (`http://`, `https://`, `s3://`) rather than a path.
pub fn is_remote(location: &str) -> bool {
    // Compared as bytes: a scheme's length may fall inside a character of a path.
    ["http://", "https://", "s3://"].iter().any(|s| {
        location.len() > s.len()
            && location.as_bytes()[..s.len()].eq_ignore_ascii_case(s.as_bytes())
    })
}

/// One object at a URL, pinned to the ETag it had when opened, read with range requests.
pub struct RemoteObject {
    url: String,
    /// Where its stores come from (rebuilt in a forked child).
    stores: Stores,
    /// The client and its runtime, for this process (rebuilt in a forked child).
    io: Mutex<Arc<Io>>,
    path: ObjectPath,
    len: u64,
    etag: Option<String>,
    version: Option<String>,
    /// What identified the object at open: ETag, version, size and modification time.
    pinned: ObjectMeta,
    /// The last bytes of the object, fetched at open.
    tail: Bytes,
    options: RemoteOptions,
    stats: RemoteStats,
    /// The server could not be reached: the last request failed after all its retries (or the
    /// open found it unreachable and used a kept tail). Until a request succeeds again, each is
    /// tried once, so that a read of what the cache lacks fails at once rather than after a cycle
    /// of retries and backoff (a cold `ls -lR` of a mount with the network gone would wait that
    /// long for every entry).
    unreachable: AtomicBool,
}

/// The most a connection may take to establish while the server is found unreachable: long
/// enough for a round trip across the world and one lost SYN (retransmitted after a second), short
/// enough that reads of what the cache lacks fail quickly while a host drops every packet. (The
/// time allowed for the request itself is not shortened: a slow link that has come back must
/// still carry a whole range.)
pub const UNREACHABLE_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A tokio runtime that a forked child leaves alone: the runtime's threads live only in the
/// process that made it, so shutting it down in a child (dropping a copy of the parent's client:
/// a mount daemon whose reads all came from the cache, and never needed the network) would wait
/// for them forever. In the process that made it, dropping it shuts it down as usual.
pub struct ProcessRuntime {
    pid: u32,
    /// Always `Some` but in the drop.
    runtime: Option<tokio::runtime::Runtime>,
}

impl ProcessRuntime {
    /// A multi-threaded runtime of `threads` workers named `name`, with I/O and timers.
    pub fn new(threads: usize, name: &str) -> std::io::Result<ProcessRuntime> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()?;
        Ok(ProcessRuntime {
            pid: std::process::id(),
            runtime: Some(runtime),
        })
    }

    /// Whether this is the process that made it (a forked child is not).
    pub fn is_own(&self) -> bool {
        self.pid == std::process::id()
    }
}

impl std::ops::Deref for ProcessRuntime {
    type Target = tokio::runtime::Runtime;
    fn deref(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("taken only when dropped")
    }
}

impl Drop for ProcessRuntime {
    fn drop(&mut self) {
        if !self.is_own() {
            std::mem::forget(self.runtime.take());
        }
    }
}

/// A store client and the runtime its requests run on, in the process that made them.
struct Io {
    store: Arc<dyn ObjectStore>,
    /// The same store without retries, for requests while the link is down
    /// ([`RemoteObject::unreachable`]).
    store_once: Arc<dyn ObjectStore>,
    runtime: ProcessRuntime,
}

impl Io {
    fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }
}

impl Io {
    fn new(url: &str, options: &RemoteOptions, stores: &Stores) -> Result<Io, RemoteError> {
        let store = stores.make(url, options)?;
        let once = RemoteOptions {
            retries: 0,
            connect_timeout: options.connect_timeout.min(UNREACHABLE_CONNECT_TIMEOUT),
            ..options.clone()
        };
        let store_once = stores.make(url, &once)?;
        let runtime = ProcessRuntime::new(2, "sealfs-remote").map_err(|e| RemoteError::BadUrl {
            url: url.to_string(),
            reason: format!("cannot start the I/O runtime: {e}"),
        })?;
        Ok(Io {
            store,
            store_once,
            runtime,
        })
    }
}

/// Makes the [`ObjectStore`] a [`RemoteObject`] reads through, for the options given: once at open,
/// again with no retries and a short connect timeout for requests while the server is unreachable,
/// and again in a forked child (which must not share its parent's connections). Another crate puts
/// its own store behind the same batched, pinned, retried reads with
/// [`RemoteObject::open_store`] (the registry's blobs do).
pub trait StoreFactory: Send + Sync {
    /// A store for `options` (`options.retries` and `options.connect_timeout` as given).
    fn make(&self, options: &RemoteOptions) -> Result<Arc<dyn ObjectStore>, RemoteError>;
}

/// Where a [`RemoteObject`]'s stores come from: its URL (`store_for`, trusting the certificate
/// authorities of [`RemoteOptions::ca_certificates`], read once at open: a forked child builds its
/// client from these, never from the files, as a mount daemon has changed its working directory by
/// then and relative paths would name other files), or a factory.
#[derive(Clone)]
enum Stores {
    Url(Arc<Vec<Certificate>>),
    Factory(Arc<dyn StoreFactory>),
}

impl Stores {
    fn make(
        &self,
        url: &str,
        options: &RemoteOptions,
    ) -> Result<Arc<dyn ObjectStore>, RemoteError> {
        match self {
            Stores::Url(certificates) => {
                store_for(url, options, certificates).map(|(store, _)| store)
            }
            Stores::Factory(f) => f.make(options),
        }
    }
}

impl std::fmt::Debug for RemoteObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteObject")
            .field("url", &self.url)
            .field("len", &self.len)
            .field("etag", &self.etag)
            .finish_non_exhaustive()
    }
}

/// The certificates of every PEM file of [`RemoteOptions::ca_certificates`].
fn load_certificates(options: &RemoteOptions) -> Result<Vec<Certificate>, RemoteError> {
    let mut all = Vec::new();
    for path in &options.ca_certificates {
        let cert_err = |reason: String| RemoteError::Certificate {
            path: path.clone(),
            reason,
        };
        let pem = std::fs::read(path).map_err(|e| cert_err(e.to_string()))?;
        let certs = Certificate::from_pem_bundle(&pem).map_err(|e| cert_err(e.to_string()))?;
        if certs.is_empty() {
            return Err(cert_err("no certificate in it".into()));
        }
        all.extend(certs);
    }
    Ok(all)
}

/// The store and the object's path in it, for a URL, trusting `certificates` besides the
/// system's certificate authorities.
fn store_for(
    url: &str,
    options: &RemoteOptions,
    certificates: &[Certificate],
) -> Result<(Arc<dyn ObjectStore>, ObjectPath), RemoteError> {
    let bad = |reason: String| RemoteError::BadUrl {
        url: url.to_string(),
        reason,
    };
    let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: options.initial_backoff,
            max_backoff: Duration::from_secs(1),
            base: 2.0,
        },
        max_retries: options.retries,
        retry_timeout: options.timeout * 2,
    };
    let mut client = ClientOptions::new()
        .with_timeout(options.timeout)
        .with_connect_timeout(options.connect_timeout.min(options.timeout));
    for c in certificates {
        client = client.with_root_certificate(c.clone());
    }
    let setup = |source| RemoteError::Setup {
        url: url.to_string(),
        source,
    };
    let path = ObjectPath::from_url_path(parsed.path().trim_start_matches('/'))
        .map_err(|e| bad(e.to_string()))?;
    if path.as_ref().is_empty() {
        return Err(bad("no object named".into()));
    }
    match parsed.scheme() {
        "http" | "https" => {
            let host = parsed
                .host_str()
                .ok_or_else(|| bad("no host".to_string()))?;
            let base = match parsed.port() {
                Some(p) => format!("{}://{host}:{p}", parsed.scheme()),
                None => format!("{}://{host}", parsed.scheme()),
            };
            let store = object_store::http::HttpBuilder::new()
                .with_url(base)
                .with_retry(retry)
                .with_client_options(client.with_allow_http(true))
                .with_http_connector(tls::Connector {
                    stall: options.stall_timeout,
                })
                .build()
                .map_err(setup)?;
            Ok((Arc::new(store), path))
        }
        "s3" => {
            let bucket = parsed
                .host_str()
                .ok_or_else(|| bad("no bucket".to_string()))?;
            let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
            let endpoint = env("AWS_ENDPOINT_URL").or_else(|| env("AWS_ENDPOINT"));
            let loopback = endpoint.as_deref().is_some_and(|e| {
                url::Url::parse(e).is_ok_and(|u| {
                    u.scheme() == "http"
                        && match u.host() {
                            Some(url::Host::Ipv4(a)) => a.is_loopback(),
                            Some(url::Host::Ipv6(a)) => a.is_loopback(),
                            Some(url::Host::Domain(d)) => d == "localhost",
                            None => false,
                        }
                })
            });
            let mut builder = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry)
                .with_client_options(client)
                .with_http_connector(tls::Connector {
                    stall: options.stall_timeout,
                });
            if let Some(e) = &endpoint {
                builder = builder
                    .with_endpoint(e)
                    .with_virtual_hosted_style_request(false);
            }
            if loopback {
                builder = builder.with_allow_http(true);
            }
            if env("AWS_ACCESS_KEY_ID").is_none() {
                builder = builder.with_skip_signature(true);
            }
            Ok((Arc::new(builder.build().map_err(setup)?), path))
        }
        other => Err(bad(format!(
            "`{other}://` is not read here (http, https and s3 are)"
        ))),
    }
}

/// The requests of one batch, as spans of the object to fetch: sorted by offset, a range less than
/// `gap` bytes after the span before joins it unless the span would grow past `max` bytes. Each
/// span lists the requests (by their index in `wanted`'s first field) it serves.
fn coalesce(
    mut wanted: Vec<(usize, Range<u64>)>,
    gap: u64,
    max: u64,
) -> Vec<(Range<u64>, Vec<usize>)> {
    wanted.sort_by_key(|(_, r)| r.start);
    let mut spans: Vec<(Range<u64>, Vec<usize>)> = Vec::new();
    for (i, range) in wanted {
        match spans.last_mut() {
            Some((span, members))
                if range.start <= span.end.saturating_add(gap)
                    && range.end.max(span.end) - span.start <= max =>
            {
                span.end = span.end.max(range.end);
                members.push(i);
            }
            _ => spans.push((range, vec![i])),
        }
    }
    spans
}

/// The requests for `spans`: each span in parts of at most `part` bytes, with its index.
fn split(spans: &[(Range<u64>, Vec<usize>)], part: u64) -> Vec<(usize, Range<u64>)> {
    let part = part.max(1);
    let mut out = Vec::new();
    for (k, (span, _)) in spans.iter().enumerate() {
        let mut a = span.start;
        while a < span.end {
            let b = span.end.min(a.saturating_add(part));
            out.push((k, a..b));
            a = b;
        }
    }
    out
}

/// What identifies an object's version, as messages show it.
fn identity(m: &ObjectMeta) -> String {
    match &m.e_tag {
        Some(etag) => format!("ETag {etag} ({} bytes)", m.size),
        None => format!("{} bytes modified {} (no ETag)", m.size, m.last_modified),
    }
}

/// A request's range (`a..b`), as messages show it.
fn show(range: &Range<u64>) -> String {
    format!("bytes {}..{}", range.start, range.end)
}

impl RemoteObject {
    /// Opens the object at `url` with default options.
    pub fn open(url: &str) -> Result<RemoteObject, RemoteError> {
        RemoteObject::open_with(url, RemoteOptions::default())
    }

    /// Opens the object at `url`: one suffix-range request gives its length, its ETag (pinned from
    /// now on) and its last [`RemoteOptions::tail_bytes`] bytes.
    pub fn open_with(url: &str, options: RemoteOptions) -> Result<RemoteObject, RemoteError> {
        let certificates = load_certificates(&options)?;
        // The URL is checked (and its path found) before the object's stores are made.
        let (_, path) = store_for(url, &options, &certificates)?;
        RemoteObject::open_stores(url, path, Stores::Url(Arc::new(certificates)), options)
    }

    /// Opens the object at `path` of the stores `factory` makes, as [`RemoteObject::open_with`]
    /// opens a URL; `name` stands for it in messages and keys the kept tail
    /// ([`RemoteOptions::tail_cache`]).
    pub fn open_store(
        name: &str,
        path: ObjectPath,
        factory: Arc<dyn StoreFactory>,
        options: RemoteOptions,
    ) -> Result<RemoteObject, RemoteError> {
        RemoteObject::open_stores(name, path, Stores::Factory(factory), options)
    }

    fn open_stores(
        url: &str,
        path: ObjectPath,
        stores: Stores,
        options: RemoteOptions,
    ) -> Result<RemoteObject, RemoteError> {
        let io = Io::new(url, &options, &stores)?;
        let (store, runtime) = (&io.store, io.runtime());
        let stats = RemoteStats::default();
        let request_err = |what: &str, source: object_store::Error| match source {
            object_store::Error::NotFound { .. } => RemoteError::NotFound {
                url: url.to_string(),
            },
            source => RemoteError::Request {
                url: url.to_string(),
                what: what.to_string(),
                source,
            },
        };
        let fetched = runtime.block_on(async {
            let deadline = options.max_time;
            let within = tokio::time::timeout(deadline, async {
                stats.round_trips.fetch_add(1, Relaxed);
                // A body shorter than its answer promised, or broken off, is asked for again with
                // backoff, as every later request is (`fetch_retried`): the first request is no
                // exception.
                let mut backoff = options.initial_backoff;
                let mut attempt = 0;
                let answer = loop {
                    stats.requests.fetch_add(1, Relaxed);
                    let suffix = GetOptions {
                        range: Some(GetRange::Suffix(options.tail_bytes.max(1))),
                        ..GetOptions::default()
                    };
                    let r = match store.get_opts(&path, suffix).await {
                        Ok(r) => r,
                        Err(e) => break Err(e),
                    };
                    let (meta, range) = (r.meta.clone(), r.range.clone());
                    let err = match read_body(r, &options).await {
                        Ok(bytes)
                            if bytes.len() as u64 == range.end - range.start
                                && range.end == meta.size =>
                        {
                            stats.bytes_fetched.fetch_add(bytes.len() as u64, Relaxed);
                            break Ok((meta, bytes));
                        }
                        Ok(bytes) => {
                            stats.bytes_fetched.fetch_add(bytes.len() as u64, Relaxed);
                            RemoteError::Short {
                                url: url.to_string(),
                                range,
                                got: bytes.len() as u64,
                            }
                        }
                        Err(BodyError::TooSlow { got }) => {
                            return Err(RemoteError::TooSlow {
                                url: url.to_string(),
                                what: "the tail of the object".into(),
                                server: server_of(url),
                                got,
                                limit: options.speed_limit,
                                window: options.speed_time,
                            });
                        }
                        Err(BodyError::Store(e)) if tls::is_certificate_error(&e) => {
                            return Err(request_err("the tail of the object", e));
                        }
                        Err(BodyError::Store(e)) => request_err("the tail of the object", e),
                    };
                    if attempt >= options.retries {
                        return Err(err);
                    }
                    attempt += 1;
                    stats.retries.fetch_add(1, Relaxed);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                };
                match answer {
                    Ok(fetched) => Ok(fetched),
                    Err(object_store::Error::NotFound { .. }) => Err(RemoteError::NotFound {
                        url: url.to_string(),
                    }),
                    // The server's certificate is refused: asking again cannot help.
                    Err(e) if tls::is_certificate_error(&e) => {
                        Err(request_err("the tail of the object", e))
                    }
                    // An empty object has no range to give (416); ask for its metadata instead.
                    Err(e) => {
                        stats.requests.fetch_add(1, Relaxed);
                        match store.head(&path).await {
                            Ok(meta) if meta.size == 0 => Ok((meta, Bytes::new())),
                            _ => Err(request_err("the tail of the object", e)),
                        }
                    }
                }
            });
            within.await.unwrap_or_else(|_| {
                Err(RemoteError::Deadline {
                    url: url.to_string(),
                    what: "the tail of the object".into(),
                    server: server_of(url),
                    after: deadline,
                })
            })
        });
        let mut unreachable = false;
        let (meta, tail) = match (fetched, options.tail_cache.as_deref()) {
            (Ok((meta, tail)), Some(dir)) => {
                let _ = save_tail(dir, url, &meta, &tail);
                (meta, tail)
            }
            (Ok(fetched), None) => fetched,
            (Err(e @ RemoteError::NotFound { .. }), _) => return Err(e),
            // Unreachable: the kept tail, if there is one, stands in.
            (Err(e), Some(dir)) => match load_tail(dir, url, &path) {
                Some(kept) => {
                    unreachable = true;
                    kept
                }
                None => return Err(e),
            },
            (Err(e), None) => return Err(e),
        };
        Ok(RemoteObject {
            url: url.to_string(),
            stores,
            io: Mutex::new(Arc::new(io)),
            path,
            len: meta.size,
            etag: meta.e_tag.clone(),
            version: meta.version.clone(),
            pinned: meta,
            tail,
            options,
            stats,
            unreachable: AtomicBool::new(unreachable),
        })
    }

    /// The client for this process. A forked child (a mount daemon forks after opening) has none
    /// of its parent's runtime threads, and must not share its connections: it builds its own.
    fn io(&self) -> Result<Arc<Io>, RemoteError> {
        let mut current = self.io.lock().unwrap_or_else(|e| e.into_inner());
        if !current.runtime.is_own() {
            let fresh = Io::new(&self.url, &self.options, &self.stores)?;
            // The parent's client is left, not dropped: its runtime's threads live in the parent
            // only, and this process holds a copy of that runtime's state as it was at the fork,
            // locks held then included. Dropping the client closes its idle connections, which
            // wakes their tasks on that runtime, which takes its scheduler's lock: a mount
            // daemon's fetcher waited for it forever (a lock one of the parent's runtime threads
            // held at the fork), its reads with it.
            std::mem::forget(std::mem::replace(&mut *current, Arc::new(fresh)));
        }
        Ok(current.clone())
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The ETag pinned at open, if the store gave one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// The counters.
    pub fn stats(&self) -> &RemoteStats {
        &self.stats
    }

    /// Where the tail fetched at open starts.
    fn tail_start(&self) -> u64 {
        self.len - self.tail.len() as u64
    }

    /// The bytes of `range` if the tail fetched at open holds them all.
    fn in_tail(&self, range: &Range<u64>) -> Option<&[u8]> {
        let start = self.tail_start();
        (range.start >= start && range.end <= self.len)
            .then(|| &self.tail[(range.start - start) as usize..(range.end - start) as usize])
    }

    /// Fetches one range, retrying short or broken bodies; a failure is checked against the
    /// object's current ETag, so that a changed object is reported as such. While the server is
    /// unreachable ([`Self::unreachable`]) it is asked once, without retries or that check.
    async fn fetch(&self, io: &Io, range: Range<u64>) -> Result<Bytes, RemoteError> {
        let once = self.unreachable.load(Relaxed);
        let deadline = self.options.max_time;
        let what = show(&range);
        let result = tokio::time::timeout(deadline, self.fetch_retried(io, range, once))
            .await
            .unwrap_or_else(|_| {
                Err(RemoteError::Deadline {
                    url: self.url.clone(),
                    what,
                    server: server_of(&self.url),
                    after: deadline,
                })
            });
        match &result {
            Ok(_) => self.unreachable.store(false, Relaxed),
            // What object_store gives up on after its retries (connections, timeouts, 5xx); not
            // an answer that says something (a refused condition, a missing object).
            Err(RemoteError::Request {
                source: source @ object_store::Error::Generic { .. },
                ..
            }) if !tls::is_certificate_error(source) => self.unreachable.store(true, Relaxed),
            Err(RemoteError::Short { .. }) => self.unreachable.store(true, Relaxed),
            Err(_) => {}
        }
        result
    }

    async fn fetch_retried(
        &self,
        io: &Io,
        range: Range<u64>,
        once: bool,
    ) -> Result<Bytes, RemoteError> {
        let store: &dyn ObjectStore = if once { &*io.store_once } else { &*io.store };
        let retries = if once { 0 } else { self.options.retries };
        let mut backoff = self.options.initial_backoff;
        let mut attempt = 0;
        loop {
            self.stats.requests.fetch_add(1, Relaxed);
            let get = GetOptions {
                range: Some(GetRange::Bounded(range.clone())),
                if_match: self.etag.clone(),
                version: self.version.clone(),
                ..GetOptions::default()
            };
            let outcome: Result<std::convert::Infallible, RemoteError> =
                match store.get_opts(&self.path, get).await {
                    Ok(r) => {
                        if !self.same_object(&r.meta) {
                            return Err(self.changed(&r.meta));
                        }
                        let got = r.range.clone();
                        match read_body(r, &self.options).await {
                            Ok(b) => {
                                self.stats.bytes_fetched.fetch_add(b.len() as u64, Relaxed);
                                if got == range && b.len() as u64 == range.end - range.start {
                                    return Ok(b);
                                }
                                Err(RemoteError::Short {
                                    url: self.url.clone(),
                                    range: range.clone(),
                                    got: b.len() as u64,
                                })
                            }
                            // A server that slow is not asked again.
                            Err(BodyError::TooSlow { got }) => {
                                return Err(RemoteError::TooSlow {
                                    url: self.url.clone(),
                                    what: show(&range),
                                    server: server_of(&self.url),
                                    got,
                                    limit: self.options.speed_limit,
                                    window: self.options.speed_time,
                                });
                            }
                            // object_store asks again for a body broken off, over a new
                            // connection: its handshake may be refused too.
                            Err(BodyError::Store(e)) if tls::is_certificate_error(&e) => {
                                return Err(self.request_error(&range, e));
                            }
                            Err(BodyError::Store(e)) => Err(self.request_error(&range, e)),
                        }
                    }
                    // The server's certificate is refused: neither a retry nor a request to see
                    // whether the object changed can get past it.
                    Err(e) if tls::is_certificate_error(&e) => {
                        return Err(self.request_error(&range, e));
                    }
                    Err(e) => {
                        // Conditions that cannot succeed on a retry; object_store has already retried
                        // the transient ones (timeouts, connections, 5xx).
                        let answered = !matches!(e, object_store::Error::Generic { .. });
                        let err = self.request_error(&range, e);
                        if once && !answered {
                            return Err(err);
                        }
                        // (A server that did not answer the retried GET is asked once.)
                        let head: &dyn ObjectStore = if answered { store } else { &*io.store_once };
                        return Err(self.check_changed(head, err).await);
                    }
                };
            let err: RemoteError = match outcome {
                Ok(never) => match never {},
                Err(e) => e,
            };
            if attempt >= retries {
                if once {
                    return Err(err);
                }
                return Err(self.check_changed(store, err).await);
            }
            attempt += 1;
            self.stats.retries.fetch_add(1, Relaxed);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    fn request_error(&self, range: &Range<u64>, source: object_store::Error) -> RemoteError {
        match source {
            object_store::Error::NotFound { .. } => RemoteError::NotFound {
                url: self.url.clone(),
            },
            source => RemoteError::Request {
                url: self.url.clone(),
                what: show(range),
                source,
            },
        }
    }

    /// Whether `meta` (of an answer) describes the object opened: the same size, and the same ETag
    /// (when the store gives ETags) or else the same modification time (`If-Unmodified-Since` is
    /// not sent: servers compare it with sub-second times and refuse the unchanged object).
    fn same_object(&self, meta: &ObjectMeta) -> bool {
        meta.size == self.pinned.size
            && match (&self.pinned.e_tag, &meta.e_tag) {
                (Some(was), Some(now)) => was == now,
                (Some(_), None) => true, // an answer without the header, under If-Match
                (None, _) => meta.last_modified == self.pinned.last_modified,
            }
    }

    fn changed(&self, now: &ObjectMeta) -> RemoteError {
        RemoteError::Changed {
            url: self.url.clone(),
            was: identity(&self.pinned),
            now: identity(now),
        }
    }

    /// `err`, or [`RemoteError::Changed`] when the object is no longer the one opened (or is gone).
    async fn check_changed(&self, store: &dyn ObjectStore, err: RemoteError) -> RemoteError {
        self.stats.requests.fetch_add(1, Relaxed);
        match store.head(&self.path).await {
            Ok(meta) if !self.same_object(&meta) => self.changed(&meta),
            Err(object_store::Error::NotFound { .. }) => RemoteError::Changed {
                url: self.url.clone(),
                was: identity(&self.pinned),
                now: "deleted".into(),
            },
            _ => err,
        }
    }

    /// Fetches the given ranges (sorted, coalesced, concurrently) and copies them into `reqs`.
    fn read_ranges(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<(), RemoteError> {
        self.read_ranges_within(reqs, self.options.coalesce_gap)
    }

    /// [`Self::read_ranges`], ranges less than `gap` bytes apart joined into one request.
    fn read_ranges_within(
        &self,
        reqs: &mut [(u64, &mut [u8])],
        gap: u64,
    ) -> Result<(), RemoteError> {
        // Requests the tail cannot serve, by offset.
        let mut order: Vec<usize> = Vec::new();
        for (i, (offset, buf)) in reqs.iter_mut().enumerate() {
            let range = *offset..*offset + buf.len() as u64;
            if range.end > self.len {
                return Err(RemoteError::Short {
                    url: self.url.clone(),
                    range,
                    got: self.len.saturating_sub(*offset),
                });
            }
            if buf.is_empty() {
                continue;
            }
            match self.in_tail(&range) {
                Some(bytes) => {
                    buf.copy_from_slice(bytes);
                    self.stats.tail_hits.fetch_add(1, Relaxed);
                }
                None => order.push(i),
            }
        }
        let wanted: Vec<(usize, Range<u64>)> = order
            .into_iter()
            .map(|i| (i, reqs[i].0..reqs[i].0 + reqs[i].1.len() as u64))
            .collect();
        let spans = coalesce(wanted, gap, self.options.max_request_bytes);
        if spans.is_empty() {
            return Ok(());
        }
        self.stats.round_trips.fetch_add(1, Relaxed);
        let parts = split(&spans, self.options.max_request_bytes);
        let io = self.io()?;
        let io = &*io;
        let fetched: Vec<(usize, Range<u64>, Bytes)> = io.runtime().block_on(
            stream::iter(parts)
                .map(|(k, r)| async move { self.fetch(io, r.clone()).await.map(|b| (k, r, b)) })
                .buffer_unordered(self.options.max_in_flight.max(1))
                .try_collect(),
        )?;
        for (k, part, bytes) in fetched {
            for &i in &spans[k].1 {
                let (offset, buf) = &mut reqs[i];
                let want = *offset..*offset + buf.len() as u64;
                let (a, b) = (want.start.max(part.start), want.end.min(part.end));
                if a < b {
                    buf[(a - want.start) as usize..(b - want.start) as usize].copy_from_slice(
                        &bytes[(a - part.start) as usize..(b - part.start) as usize],
                    );
                }
            }
        }
        Ok(())
    }
}

impl ReadAt for RemoteObject {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let n = (self.len.saturating_sub(offset)).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        self.read_ranges(&mut [(offset, &mut buf[..n])])
            .map_err(RemoteError::into_io)?;
        Ok(n)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        self.read_ranges(reqs).map_err(RemoteError::into_io)
    }

    /// Adjacent ranges are still one request; ranges apart are never joined across the gap.
    fn read_batch_apart(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        self.read_ranges_within(reqs, 0)
            .map_err(RemoteError::into_io)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_ranges(&mut [(offset, buf)])
            .map_err(RemoteError::into_io)
    }

    fn is_remote(&self) -> bool {
        true
    }
}

/// Where the tail of `url` is kept in `dir`.
fn tail_file(dir: &Path, url: &str) -> std::path::PathBuf {
    use sha2::Digest as _;
    let h = sha2::Sha256::digest(url.as_bytes());
    let name: String = h[..16].iter().map(|b| format!("{b:02x}")).collect();
    dir.join("tails").join(name)
}

/// Keeps the tail and what identifies the object (size, ETag, version, modification time), written
/// whole or not at all.
fn save_tail(dir: &Path, url: &str, meta: &ObjectMeta, tail: &[u8]) -> io::Result<()> {
    let path = tail_file(dir, url);
    std::fs::create_dir_all(path.parent().expect("tails/ in the cache directory"))?;
    let mut text = format!(
        "sealfs-tail 1\nurl {url}\nsize {}\netag {}\nversion {}\nmodified {}\n\n",
        meta.size,
        meta.e_tag.as_deref().unwrap_or("-"),
        meta.version.as_deref().unwrap_or("-"),
        meta.last_modified.timestamp_nanos_opt().unwrap_or(0),
    )
    .into_bytes();
    text.extend_from_slice(tail);
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

/// The kept tail of `url`, if one is kept and reads back whole.
fn load_tail(dir: &Path, url: &str, path: &ObjectPath) -> Option<(ObjectMeta, Bytes)> {
    let bytes = std::fs::read(tail_file(dir, url)).ok()?;
    let split = bytes.windows(2).position(|w| w == b"\n\n")?;
    let head = std::str::from_utf8(&bytes[..split]).ok()?;
    let tail = Bytes::copy_from_slice(&bytes[split + 2..]);
    let field = |key: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
    };
    if head.lines().next() != Some("sealfs-tail 1") || field("url") != Some(url) {
        return None;
    }
    let size: u64 = field("size")?.parse().ok()?;
    if tail.len() as u64 > size {
        return None;
    }
    let opt = |v: &str| (v != "-").then(|| v.to_string());
    let nanos: i64 = field("modified")?.parse().ok()?;
    Some((
        ObjectMeta {
            location: path.clone(),
            last_modified: chrono::DateTime::from_timestamp_nanos(nanos),
            size,
            e_tag: opt(field("etag")?),
            version: opt(field("version")?),
        },
        tail,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU8;

    /// Data and the hash blocks beside it become one request when close; far ones stay apart (but
    /// are fetched concurrently); overlapping and unsorted requests are served; spans stop at `max`.
    #[test]
    fn close_ranges_are_coalesced_and_far_ones_kept_apart() {
        let k = 1 << 10;
        let spans = coalesce(
            vec![
                (0, 1000 * k..1004 * k), // a hash block near the end
                (1, 0..256 * k),         // data
                (2, 260 * k..264 * k),   // 4 KiB after the data
                (3, 100 * k..104 * k),   // inside the data
                (4, 1070 * k..1074 * k), // 66 KiB after the hash block: apart
            ],
            64 * k,
            8 << 20,
        );
        assert_eq!(
            spans,
            vec![
                (0..264 * k, vec![1, 3, 2]),
                (1000 * k..1004 * k, vec![0]),
                (1070 * k..1074 * k, vec![4]),
            ]
        );
        let spans = coalesce(vec![(0, 0..6 * k), (1, 6 * k..12 * k)], 64 * k, 8 * k);
        assert_eq!(spans.len(), 2, "a span grows no larger than max");
        assert!(coalesce(Vec::new(), 64 * k, 8 * k).is_empty());
    }

    /// A long span is fetched in parts no larger than the limit, covering it exactly.
    #[test]
    fn long_spans_are_split_into_parts() {
        let spans = vec![(0..10, vec![0]), (20..21, vec![1, 2]), (30..34, vec![3])];
        assert_eq!(
            split(&spans, 4),
            vec![(0, 0..4), (0, 4..8), (0, 8..10), (1, 20..21), (2, 30..34)]
        );
    }

    #[test]
    fn urls_and_paths_are_told_apart() {
        for url in ["http://h/x", "HTTPS://h/x", "s3://b/k"] {
            assert!(is_remote(url), "{url}");
        }
        for path in [
            "image.sealfs",
            "/srv/http:/x",
            "http:/x",
            "s3://",
            "file:///x",
            // A scheme's length inside a character (a panic once).
            "abcdef\u{20ac}x",
            "s3:/\u{e9}\u{e9}",
        ] {
            assert!(!is_remote(path), "{path}");
        }
    }

    #[test]
    fn unknown_schemes_and_missing_objects_are_named() {
        let err = store_for("ftp://h/x", &RemoteOptions::default(), &[]).unwrap_err();
        assert!(err.to_string().contains("ftp://h/x"), "{err}");
        let err = store_for("http://h/", &RemoteOptions::default(), &[]).unwrap_err();
        assert!(err.to_string().contains("no object named"), "{err}");
    }

    /// A refused connection is still retried, with backoff (only a refused certificate is not):
    /// a server that starts listening while the open is retrying gets its request.
    #[test]
    fn a_refused_connection_is_retried_until_the_server_listens() {
        use std::io::{Read, Write};
        use std::net::TcpListener;
        use std::time::Instant;
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        // Nothing listens on the port for 150 ms; the open's attempts are at least 100 ms apart
        // (5 retries: 500 ms at least). Then one request is answered 404.
        let server = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
            listener.set_nonblocking(true).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut conn = loop {
                match listener.accept() {
                    Ok((conn, _)) => break conn,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(5))
                    }
                    Err(e) => return Err(e),
                }
            };
            conn.set_nonblocking(false)?;
            let mut request = Vec::new();
            let mut buf = [0; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf)? {
                    0 => break,
                    n => request.extend_from_slice(&buf[..n]),
                }
            }
            conn.write_all(
                b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )?;
            Ok(request)
        });
        let options = RemoteOptions {
            retries: 5,
            initial_backoff: Duration::from_millis(100),
            ..RemoteOptions::default()
        };
        let start = Instant::now();
        let err =
            RemoteObject::open_with(&format!("http://127.0.0.1:{port}/img"), options).unwrap_err();
        let took = start.elapsed();
        let request = server
            .join()
            .unwrap()
            .expect("the open's request reached the server");
        assert!(matches!(err, RemoteError::NotFound { .. }), "{err}");
        assert!(request.starts_with(b"GET /img "), "{request:?}");
        assert!(took >= Duration::from_millis(150), "{took:?}");
    }

    /// An HTTP server on loopback for `data` (ETag `"v1"`), one request per connection, that can
    /// be switched to closing every connection unanswered (a server gone): counts connections.
    struct FlakyServer {
        port: u16,
        down: Arc<AtomicBool>,
        /// Stops accepting at the next connection (see [`FlakyServer::stall`]).
        stalled: Arc<AtomicBool>,
        /// How requests are answered: [`Answer`] as a number.
        answer: Arc<AtomicU8>,
        connections: Arc<AtomicU64>,
    }

    /// How a [`FlakyServer`] answers a request it has read.
    #[derive(Clone, Copy)]
    #[repr(u8)]
    enum Answer {
        /// At once, whole.
        Whole,
        /// Never: the connection is kept open, silent.
        Silent,
        /// The header and half the body, then silence on an open connection.
        HalfThenSilent,
        /// The body in eight parts, 300 ms apart.
        Dribbled,
    }

    impl FlakyServer {
        fn start(data: Vec<u8>) -> FlakyServer {
            use std::io::{Read, Write};
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let down = Arc::new(AtomicBool::new(false));
            let connections = Arc::new(AtomicU64::new(0));
            let stalled = Arc::new(AtomicBool::new(false));
            let answer = Arc::new(AtomicU8::new(Answer::Whole as u8));
            let (d, c, s, how) = (
                down.clone(),
                connections.clone(),
                stalled.clone(),
                answer.clone(),
            );
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    c.fetch_add(1, Relaxed);
                    while s.load(Relaxed) {
                        std::thread::park(); // never accepts again; the listener stays open
                    }
                    if d.load(Relaxed) {
                        continue; // dropped: closed without an answer
                    }
                    let mut request = Vec::new();
                    let mut buf = [0; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
                    let len = data.len();
                    let (a, b) = match text.lines().find_map(|l| l.strip_prefix("range: bytes=")) {
                        Some(r) => {
                            let (x, y) = r.trim().split_once('-').unwrap();
                            match (x.parse::<usize>(), y.parse::<usize>()) {
                                (Ok(x), Ok(y)) => (x, (y + 1).min(len)),
                                (Err(_), Ok(n)) => (len - n.min(len), len),
                                (Ok(x), Err(_)) => (x, len),
                                _ => (0, len),
                            }
                        }
                        None => (0, len),
                    };
                    let head = format!(
                        "HTTP/1.1 206 Partial Content\r\ncontent-length: {}\r\n\
                         content-range: bytes {a}-{}/{len}\r\netag: \"v1\"\r\n\
                         last-modified: Thu, 26 Nov 2026 10:00:00 GMT\r\nconnection: close\r\n\r\n",
                        b - a,
                        b - 1
                    );
                    let body: &[u8] = if text.starts_with("head ") {
                        &[]
                    } else {
                        &data[a..b]
                    };
                    let how = how.load(Relaxed);
                    if how == Answer::Silent as u8 {
                        held.push(conn);
                        continue;
                    }
                    let _ = conn.write_all(head.as_bytes());
                    if how == Answer::HalfThenSilent as u8 {
                        let _ = conn.write_all(&body[..body.len() / 2]);
                        held.push(conn);
                    } else if how == Answer::Dribbled as u8 {
                        for part in body.chunks(body.len().div_ceil(8).max(1)) {
                            std::thread::sleep(Duration::from_millis(300));
                            let _ = conn.write_all(part);
                        }
                    } else {
                        let _ = conn.write_all(body);
                    }
                }
            });
            FlakyServer {
                port,
                down,
                stalled,
                answer,
                connections,
            }
        }

        /// Makes the host drop every connection attempt, as one gone from the network does: the
        /// server stops accepting, and its accept queue is filled (with the connections returned,
        /// to hold), after which the kernel drops each SYN unanswered.
        ///
        /// The queue is full when a connection attempt times out and a second, given longer,
        /// does too: on a loaded machine one attempt can time out with room left (its thread not
        /// run within the 300 ms), and a queue with room would let the test's read connect and
        /// then wait out the stall timeout instead of the connect timeout.
        fn stall(&self) -> Vec<std::net::TcpStream> {
            self.stalled.store(true, Relaxed);
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
            let connect =
                |ms| std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(ms));
            let mut held = Vec::new();
            for _ in 0..4096 {
                match connect(300).or_else(|_| connect(1500)) {
                    Ok(c) => held.push(c),
                    Err(_) => return held,
                }
            }
            panic!("the listener's queue never filled");
        }

        /// Connections accepted while `f` ran.
        fn count<T>(&self, f: impl FnOnce() -> T) -> (T, u64) {
            let before = self.connections.load(Relaxed);
            let out = f();
            // The last dropped connection is counted when accepted, before the client sees it
            // closed: nothing is left to count once `f` has returned.
            (out, self.connections.load(Relaxed) - before)
        }
    }

    /// A [`FlakyServer`] of 256 KiB of data, and the object opened on it with `retries`.
    fn open_flaky(retries: usize) -> (FlakyServer, RemoteObject, Vec<u8>) {
        open_flaky_with(RemoteOptions {
            retries,
            ..RemoteOptions::default()
        })
    }

    /// [`open_flaky`] with `options` (a short backoff and tail set here).
    fn open_flaky_with(options: RemoteOptions) -> (FlakyServer, RemoteObject, Vec<u8>) {
        let data: Vec<u8> = (0..256 * 1024u32).map(|i| (i * 7 % 251) as u8).collect();
        let server = FlakyServer::start(data.clone());
        let options = RemoteOptions {
            initial_backoff: Duration::from_millis(10),
            tail_bytes: 4096,
            ..options
        };
        let url = format!("http://127.0.0.1:{}/img", server.port);
        let object = RemoteObject::open_with(&url, options).unwrap();
        (server, object, data)
    }

    /// A server gone: the first read that cannot reach it fails after its retries (and one request
    /// to see whether the object changed); the next ones are tried once. Once a request gets
    /// through, failures are retried in full again.
    #[test]
    fn reads_while_the_server_is_unreachable_are_tried_once() {
        let (server, object, data) = open_flaky(2);
        let mut buf = vec![0u8; 4096];
        object.read_exact_at(&mut buf, 8192).unwrap();
        assert_eq!(buf, data[8192..12288]);

        server.down.store(true, Relaxed);
        let full = (2 + 1) + 1; // the GET with 2 retries, then the HEAD once
        let (r, n) = server.count(|| object.read_exact_at(&mut buf, 16384));
        assert!(r.is_err());
        assert_eq!(n, full, "the first failure is retried");
        for _ in 0..3 {
            let (r, n) = server.count(|| object.read_exact_at(&mut buf, 32768));
            assert!(r.is_err());
            assert_eq!(n, 1, "later failures are tried once");
        }

        server.down.store(false, Relaxed);
        let (r, n) = server.count(|| object.read_exact_at(&mut buf, 65536));
        r.unwrap();
        assert_eq!((buf.as_slice(), n), (&data[65536..69632], 1));

        server.down.store(true, Relaxed);
        let (r, n) = server.count(|| object.read_exact_at(&mut buf, 16384));
        assert!(r.is_err());
        assert_eq!(
            n, full,
            "reachable again: a failure is retried in full again"
        );
    }

    /// A host that drops packets rather than refusing connections: once the server is found
    /// unreachable, a read fails after [`UNREACHABLE_CONNECT_TIMEOUT`], not the usual connect
    /// timeout (10 s).
    #[test]
    fn reads_while_the_host_drops_packets_fail_after_the_short_connect_timeout() {
        let (server, object, _) = open_flaky(1);
        let mut buf = vec![0u8; 4096];
        object.read_exact_at(&mut buf, 8192).unwrap();
        server.down.store(true, Relaxed);
        assert!(object.read_exact_at(&mut buf, 16384).is_err());

        let _held = server.stall();
        let start = std::time::Instant::now();
        let r = object.read_exact_at(&mut buf, 32768);
        let took = start.elapsed();
        assert!(r.is_err());
        assert!(
            took >= UNREACHABLE_CONNECT_TIMEOUT.mul_f32(0.9) && took < Duration::from_secs(6),
            "a read with every SYN dropped took {took:?}"
        );
    }

    /// A server that goes silent with the connection open (as a host gone from the network looks
    /// to a connection made before): a read waits [`RemoteOptions::stall_timeout`] per request,
    /// not the request's whole timeout (30 s), whether the answer or the rest of a body never
    /// comes; a body that keeps coming, however slowly, is read to its end.
    #[test]
    fn a_silent_server_fails_reads_after_the_stall_timeout_and_a_slow_one_does_not() {
        let stall = Duration::from_secs(1);
        let (server, object, data) = open_flaky_with(RemoteOptions {
            retries: 1,
            stall_timeout: stall,
            ..RemoteOptions::default()
        });
        let mut buf = vec![0u8; 4096];
        for (how, at) in [(Answer::Silent, 16384), (Answer::HalfThenSilent, 32768)] {
            server.answer.store(how as u8, Relaxed);
            let start = std::time::Instant::now();
            let r = object.read_exact_at(&mut buf, at);
            let took = start.elapsed();
            assert!(r.is_err(), "a read from a silent server returned data");
            // Two GETs and the HEAD asking whether the object changed, a stall each: under a
            // second of backoff besides (with the whole request's timeout it was 60 s).
            assert!(
                took >= stall && took < Duration::from_secs(8),
                "a read from a silent server took {took:?}"
            );
        }
        server.answer.store(Answer::Dribbled as u8, Relaxed);
        let start = std::time::Instant::now();
        object.read_exact_at(&mut buf, 65536).unwrap();
        assert_eq!(buf, data[65536..69632]);
        assert!(
            start.elapsed() > stall,
            "the body took longer than the stall timeout, in parts"
        );
    }
}
