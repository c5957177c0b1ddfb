//! [`Registry`]: one repository of one registry, spoken to over the OCI distribution API.
//!
//! A session's first request goes out without credentials: an open registry answers it (and the
//! session costs no round trip more than that request), one that wants credentials answers 401
//! with a `WWW-Authenticate` challenge ([`Challenge`]: the token flow or basic), which is then
//! met and the request sent again. A registry that wants credentials nobody gave, or answers 401
//! without naming a token endpoint, is an error naming it. Later requests this crate sends itself
//! (manifests, uploads) carry what the challenge asks for: basic credentials, or a bearer token
//! from `oci-client`'s token flow (refreshed once when the registry answers 401, as an expired
//! token gets; a new challenge, as a push after anonymous reads meets, is met once); requests
//! `oci-client` sends (blob reads, mounts, referrers) authorize themselves from its token cache.

use crate::auth::{credentials_for, parse_challenge, Challenge, Credentials, CREDENTIAL_SOURCES};
use crate::manifest::{self, Parsed, ACCEPTED, MAX_MANIFEST_BYTES};
use crate::reference::{ImageRef, Transport};
use crate::RegistryError;
use bytes::Bytes;
use oci_client::RegistryOperation;
use sealfs_remote::RemoteOptions;
use sha2::Digest as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How a [`Registry`] is reached.
#[derive(Clone, Debug, Default)]
pub struct RegistryOptions {
    /// Credentials to use; `None` finds them as [`crate::auth`] says (environment, auth files).
    pub credentials: Option<Credentials>,
    /// PEM files of certificate authorities to trust besides the system's (`--ca-cert`).
    pub ca_certificates: Vec<PathBuf>,
    /// Timeouts, retries and the rest of blob reads (the same options as an HTTP image's).
    pub remote: RemoteOptions,
    /// Blobs up to this size are uploaded in one request; larger ones in chunks of this size,
    /// each resumable after a dropped connection (0: [`DEFAULT_CHUNK_SIZE`]).
    pub chunk_size: u64,
}

/// The upload chunk size when none is set: 16 MiB.
pub const DEFAULT_CHUNK_SIZE: u64 = 16 << 20;

/// One repository of a registry, connected.
#[derive(Clone)]
pub struct Registry {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// The repository (its tag and digest are not used).
    pub(crate) repo: ImageRef,
    pub(crate) options: RegistryOptions,
    pub(crate) credentials: Credentials,
    /// What the registry asked for, once a request has been answered (`None` before).
    challenge: Mutex<Option<Challenge>>,
    /// Left alone by a forked child (its threads live in this process only).
    pub(crate) runtime: sealfs_remote::ProcessRuntime,
    pub(crate) oci: oci_client::Client,
    pub(crate) http: reqwest::Client,
    /// Bearer tokens for this crate's own requests: pull, push.
    tokens: Mutex<[Option<String>; 2]>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("repository", &self.inner.repo.to_string())
            .field("challenge", &self.challenge())
            .finish_non_exhaustive()
    }
}

/// A manifest or index as fetched: its bytes, their digest (checked) and what they parse to.
#[derive(Clone, Debug)]
pub struct FetchedManifest {
    /// The reference it was fetched by, pinned to its digest.
    pub reference: ImageRef,
    /// `sha256:<hex>` of its bytes.
    pub digest: String,
    /// The `Content-Type` the registry sent.
    pub content_type: Option<String>,
    /// Its bytes, as served.
    pub bytes: Bytes,
    /// What they parse to.
    pub parsed: Parsed,
}

impl FetchedManifest {
    /// Its descriptor (media type from the body, else the `Content-Type`).
    pub fn descriptor(&self) -> manifest::Descriptor {
        let media_type = match &self.parsed {
            Parsed::Manifest(m) => m.media_type.clone(),
            Parsed::Index(i) => i.media_type.clone(),
        }
        .or_else(|| self.content_type.clone())
        .unwrap_or_else(|| manifest::OCI_MANIFEST.into());
        manifest::Descriptor {
            media_type,
            digest: self.digest.clone(),
            size: self.bytes.len() as u64,
            annotations: Default::default(),
        }
    }
}

/// The digest of `bytes` with the algorithm of `like` (`sha256:` unless it says `sha512:`).
pub(crate) fn digest_like(bytes: &[u8], like: Option<&str>) -> String {
    if like.is_some_and(|d| d.starts_with("sha512:")) {
        format!("sha512:{}", hex(&sha2::Sha512::digest(bytes)))
    } else {
        format!("sha256:{}", hex(&sha2::Sha256::digest(bytes)))
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The certificates of `paths`, each file checked to hold at least one.
fn certificates(paths: &[PathBuf]) -> Result<Vec<(PathBuf, Vec<u8>)>, RegistryError> {
    paths
        .iter()
        .map(|p| {
            let bad = |reason: String| RegistryError::Setup {
                what: format!("--ca-cert {}", sealfs_text::escape_path(p)),
                reason,
            };
            let pem = std::fs::read(p).map_err(|e| bad(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("no certificate in it".into()));
            }
            Ok((p.clone(), pem))
        })
        .collect()
}

/// The rustls crypto provider reqwest is built without (the workspace's `ring`), installed once.
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err: another part of the process installed one first; that one serves.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// An `oci-client` and a plain HTTP client for `repo`, with `options`' authorities and the
/// timeouts of `remote`.
pub(crate) fn clients(
    repo: &ImageRef,
    options: &RegistryOptions,
    remote: &RemoteOptions,
) -> Result<(oci_client::Client, reqwest::Client), RegistryError> {
    let certs = certificates(&options.ca_certificates)?;
    let oci = oci_client(repo, &certs, remote)?;
    let setup = |reason: String| RegistryError::Setup {
        what: format!("{}: the HTTP client", repo.registry),
        reason,
    };
    let mut http = reqwest::Client::builder()
        .user_agent(concat!("sealfs/", env!("CARGO_PKG_VERSION")))
        .read_timeout(remote.stall_timeout)
        .connect_timeout(remote.connect_timeout.min(remote.timeout));
    for (_, pem) in &certs {
        let parsed =
            reqwest::Certificate::from_pem_bundle(pem).map_err(|e| setup(e.to_string()))?;
        http = http.tls_certs_merge(parsed);
    }
    Ok((oci, http.build().map_err(|e| setup(e.to_string()))?))
}

/// The `oci-client` alone (what blob reads use: a forked child makes only this one, since
/// each client loads the system's certificate authorities, which costs more than a round trip
/// on a LAN).
pub(crate) fn blob_client(
    repo: &ImageRef,
    options: &RegistryOptions,
    remote: &RemoteOptions,
) -> Result<oci_client::Client, RegistryError> {
    oci_client(repo, &certificates(&options.ca_certificates)?, remote)
}

fn oci_client(
    repo: &ImageRef,
    certs: &[(PathBuf, Vec<u8>)],
    remote: &RemoteOptions,
) -> Result<oci_client::Client, RegistryError> {
    install_crypto_provider();
    let setup = |reason: String| RegistryError::Setup {
        what: format!("{}: the HTTP client", repo.registry),
        reason,
    };
    let config = oci_client::client::ClientConfig {
        protocol: match repo.transport {
            Transport::Https => oci_client::client::ClientProtocol::Https,
            Transport::Http => oci_client::client::ClientProtocol::Http,
        },
        extra_root_certificates: certs
            .iter()
            .map(|(_, pem)| oci_client::client::Certificate {
                encoding: oci_client::client::CertificateEncoding::Pem,
                data: pem.clone(),
            })
            .collect(),
        platform_resolver: None,
        read_timeout: Some(remote.stall_timeout),
        connect_timeout: Some(remote.connect_timeout.min(remote.timeout)),
        user_agent: concat!("sealfs/", env!("CARGO_PKG_VERSION")),
        ..Default::default()
    };
    oci_client::Client::try_from(config).map_err(|e| setup(e.to_string()))
}

/// Whether a reqwest failure is worth another try (the connection, a timeout, a body broken off).
pub(crate) fn transient(e: &reqwest::Error) -> bool {
    e.is_connect() || e.is_timeout() || e.is_request() || e.is_body()
}

/// Whether `e`, or an error under it, is rustls finding that the server's first answer is no TLS
/// record (`InvalidContentType`): a plain-HTTP server asked for HTTPS.
pub(crate) fn speaks_plain_http(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return matches!(
                tls,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            );
        }
        // An `io::Error`'s `source()` skips the error it wraps (tokio-rustls wraps rustls's so).
        next = match e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => e.source(),
        };
    }
    false
}

/// A reqwest failure, its causes included (reqwest's own message names only the URL).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// The registry's error envelope (`{"errors":[{"code":..,"message":..}]}`) as one line, or the
/// body's first 200 characters.
pub(crate) fn envelope(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct E {
        code: Option<String>,
        message: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Env {
        errors: Vec<E>,
    }
    match serde_json::from_slice::<Env>(body) {
        Ok(env) if !env.errors.is_empty() => env
            .errors
            .iter()
            .map(|e| {
                sealfs_text::escape_prose(
                    format!(
                        "{} {}",
                        e.code.as_deref().unwrap_or("?"),
                        e.message.as_deref().unwrap_or("")
                    )
                    .trim()
                    .as_bytes(),
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        _ => sealfs_text::escape_prose(body[..body.len().min(200)].trim_ascii()),
    }
}

impl Registry {
    /// Sets up a session with the repository of `reference` (its tag or digest are not used
    /// here): finds credentials (unless given) and makes the clients. Nothing is sent yet.
    pub fn connect(
        reference: &ImageRef,
        options: &RegistryOptions,
    ) -> Result<Registry, RegistryError> {
        let repo = reference.sibling(None, None);
        let credentials = match &options.credentials {
            Some(c) => c.clone(),
            None => credentials_for(&repo.registry)?,
        };
        let (oci, http) = clients(&repo, options, &options.remote)?;
        let runtime = sealfs_remote::ProcessRuntime::new(2, "sealfs-registry").map_err(|e| {
            RegistryError::Setup {
                what: "the I/O runtime".into(),
                reason: e.to_string(),
            }
        })?;
        Ok(Registry {
            inner: Arc::new(Inner {
                repo,
                options: options.clone(),
                credentials,
                challenge: Mutex::new(None),
                runtime,
                oci,
                http,
                tokens: Mutex::new([None, None]),
            }),
        })
    }

    /// The repository (`oci://HOST/REPO`).
    pub fn repository(&self) -> &ImageRef {
        &self.inner.repo
    }

    /// What the registry asked for, once a request has been answered.
    pub fn challenge(&self) -> Option<Challenge> {
        self.inner
            .challenge
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes the challenge of a 401's `WWW-Authenticate` header: an error if it cannot be met.
    async fn meet(&self, header: Option<&str>) -> Result<Challenge, RegistryError> {
        let inner = &self.inner;
        let challenge = match (parse_challenge(header), &inner.credentials) {
            (Some(Challenge::Basic), Credentials::Anonymous) => {
                return Err(RegistryError::Unauthorized {
                    what: inner.repo.registry.clone(),
                    reason: format!(
                        "the registry asks for credentials (WWW-Authenticate: {}) and none were \
                         found in {CREDENTIAL_SOURCES}",
                        header.unwrap_or_default()
                    ),
                })
            }
            (Some(c), _) => c,
            (None, _) => {
                return Err(RegistryError::Unauthorized {
                    what: inner.repo.registry.clone(),
                    reason: format!(
                        "401 without a token endpoint or basic realm to authenticate with \
                         (WWW-Authenticate: {})",
                        header.unwrap_or("none")
                    ),
                })
            }
        };
        let r = inner.repo.to_oci();
        inner
            .oci
            .store_auth_if_needed(r.resolve_registry(), &inner.credentials.to_oci())
            .await;
        *inner.challenge.lock().unwrap_or_else(|e| e.into_inner()) = Some(challenge.clone());
        Ok(challenge)
    }

    /// `BASE/v2/REPO/SUFFIX`.
    pub(crate) fn url(&self, suffix: &str) -> String {
        format!(
            "{}/v2/{}/{suffix}",
            self.inner.repo.base_url(),
            self.inner.repo.repository
        )
    }

    /// Runs `f` on the registry's runtime (the synchronous API's one entry into async code).
    pub(crate) fn block_on<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.inner.runtime.block_on(f)
    }

    /// Adds what the challenge asks for to `rb`; `refresh` fetches a new token.
    async fn authorize(
        &self,
        rb: reqwest::RequestBuilder,
        op: RegistryOperation,
        refresh: bool,
    ) -> Result<reqwest::RequestBuilder, RegistryError> {
        let inner = &self.inner;
        match (
            &self.challenge().unwrap_or(Challenge::None),
            &inner.credentials,
        ) {
            (Challenge::None, _) => Ok(rb),
            (Challenge::Basic, Credentials::Basic { username, password }) => {
                Ok(rb.basic_auth(username, Some(password)))
            }
            (Challenge::Basic, Credentials::Anonymous) => Ok(rb),
            (Challenge::Bearer, _) => {
                let slot = matches!(op, RegistryOperation::Push) as usize;
                let cached = inner.tokens.lock().unwrap_or_else(|e| e.into_inner())[slot].clone();
                let token = match cached {
                    Some(t) if !refresh => t,
                    _ => {
                        let got = inner
                            .oci
                            .auth(&inner.repo.to_oci(), &inner.credentials.to_oci(), op)
                            .await
                            .map_err(|e| RegistryError::Unauthorized {
                                what: format!("{} (token endpoint)", inner.repo),
                                reason: e.to_string(),
                            })?
                            .ok_or_else(|| RegistryError::Unauthorized {
                                what: format!("{} (token endpoint)", inner.repo),
                                reason: "no token was given".into(),
                            })?;
                        inner.tokens.lock().unwrap_or_else(|e| e.into_inner())[slot] =
                            Some(got.clone());
                        got
                    }
                };
                Ok(rb.bearer_auth(token))
            }
        }
    }

    /// Sends the request `make` builds, authorized; a 401 to a bearer token is retried once with a
    /// new token (it may have expired), then is [`RegistryError::Unauthorized`]. Connection
    /// failures and 5xx answers are retried `retries` times with backoff (for requests that may
    /// be repeated).
    pub(crate) async fn send(
        &self,
        op: RegistryOperation,
        what: &str,
        retries: usize,
        make: &(dyn Fn(&reqwest::Client) -> reqwest::RequestBuilder + Sync),
    ) -> Result<reqwest::Response, RegistryError> {
        let mut refreshed = false;
        let mut met = false;
        let mut attempt = 0;
        let mut backoff = self.inner.options.remote.initial_backoff;
        loop {
            let rb = self
                .authorize(make(&self.inner.http), op, refreshed)
                .await?;
            let outcome = rb.send().await;
            let retry_reason = match outcome {
                Ok(resp) if resp.status() == reqwest::StatusCode::UNAUTHORIZED => {
                    let challenge = resp
                        .headers()
                        .get(reqwest::header::WWW_AUTHENTICATE)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    // A challenge not met yet (the session's first, or a push's after reads):
                    // met, and the request sent again.
                    let asked = parse_challenge(challenge.as_deref());
                    if !met && (asked.is_none() || asked != self.challenge()) {
                        met = true;
                        self.meet(challenge.as_deref()).await?;
                        continue;
                    }
                    if self.challenge() == Some(Challenge::Bearer) && !refreshed {
                        refreshed = true;
                        continue;
                    }
                    let body = resp.bytes().await.unwrap_or_default();
                    return Err(RegistryError::Unauthorized {
                        what: what.to_string(),
                        reason: format!(
                            "401 {}{}",
                            envelope(&body),
                            challenge
                                .map(|c| format!(" (WWW-Authenticate: {c})"))
                                .unwrap_or_default()
                        ),
                    });
                }
                Ok(resp) if resp.status() == reqwest::StatusCode::FORBIDDEN => {
                    let body = resp.bytes().await.unwrap_or_default();
                    return Err(RegistryError::Unauthorized {
                        what: what.to_string(),
                        reason: format!("403 {}", envelope(&body)),
                    });
                }
                Ok(resp) if resp.status().is_server_error() => {
                    format!("{}", resp.status())
                }
                Ok(resp) => {
                    // Answered without credentials: an open registry (for this much).
                    let mut c = self
                        .inner
                        .challenge
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    c.get_or_insert(Challenge::None);
                    return Ok(resp);
                }
                // TLS spoken to a server that answers in plain HTTP: no retry can help.
                Err(e) if speaks_plain_http(&e) => {
                    return Err(RegistryError::Request {
                        what: what.to_string(),
                        reason: format!(
                            "{}: the registry speaks plain HTTP, not HTTPS: use {}",
                            chain(&e),
                            ImageRef {
                                transport: Transport::Http,
                                ..self.inner.repo.clone()
                            }
                        ),
                    })
                }
                Err(e) if transient(&e) => chain(&e),
                Err(e) => {
                    return Err(RegistryError::Request {
                        what: what.to_string(),
                        reason: chain(&e),
                    })
                }
            };
            if attempt >= retries {
                return Err(RegistryError::Request {
                    what: what.to_string(),
                    reason: if retries > 0 {
                        format!("{retry_reason} (after {retries} retries)")
                    } else {
                        retry_reason
                    },
                });
            }
            attempt += 1;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// Fetches the manifest or index `reference` names (by its digest when it has one, else its
    /// tag): its bytes must hash to the digest the reference pins, and to the one the registry
    /// states (`Docker-Content-Digest`), and parse.
    pub fn manifest(&self, reference: &ImageRef) -> Result<FetchedManifest, RegistryError> {
        self.block_on(self.manifest_async(reference))
    }

    pub(crate) async fn manifest_async(
        &self,
        reference: &ImageRef,
    ) -> Result<FetchedManifest, RegistryError> {
        let key = reference.manifest_key().to_string();
        let url = self.url(&format!("manifests/{key}"));
        let what = format!("manifest {reference}");
        let accept = ACCEPTED.join(", ");
        let retries = self.inner.options.remote.retries;
        let resp = self
            .send(RegistryOperation::Pull, &what, retries, &|c| {
                c.get(&url).header(reqwest::header::ACCEPT, &accept)
            })
            .await?;
        let status = resp.status();
        let header = |h: &str| {
            resp.headers()
                .get(h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let content_type = header("content-type");
        let claimed = header("docker-content-digest");
        if status == reqwest::StatusCode::NOT_FOUND {
            let body = resp.bytes().await.unwrap_or_default();
            return Err(RegistryError::NotFound {
                what,
                reason: format!(
                    "{}; {}",
                    if reference.digest.is_some() {
                        "no manifest with this digest"
                    } else {
                        "no such tag or repository"
                    },
                    envelope(&body)
                ),
            });
        }
        if !status.is_success() {
            let body = resp.bytes().await.unwrap_or_default();
            return Err(RegistryError::Request {
                what,
                reason: format!("{status} {}", envelope(&body)),
            });
        }
        if resp
            .content_length()
            .is_some_and(|n| n > MAX_MANIFEST_BYTES as u64)
        {
            return Err(RegistryError::Request {
                what,
                reason: format!("a manifest larger than {MAX_MANIFEST_BYTES} bytes"),
            });
        }
        let bytes = read_limited(resp, MAX_MANIFEST_BYTES)
            .await
            .map_err(|reason| RegistryError::Request {
                what: what.clone(),
                reason,
            })?;
        let digest = digest_like(&bytes, reference.digest.as_deref());
        if let Some(pinned) = &reference.digest {
            if *pinned != digest {
                return Err(RegistryError::ManifestDigest {
                    reference: reference.to_string(),
                    expected: pinned.clone(),
                    actual: digest,
                });
            }
        }
        if let Some(claimed) = claimed.filter(|c| c.split(':').next() == digest.split(':').next()) {
            if claimed != digest {
                return Err(RegistryError::ManifestDigest {
                    reference: format!("{reference} (Docker-Content-Digest)"),
                    expected: claimed,
                    actual: digest,
                });
            }
        }
        let parsed = manifest::parse(&bytes, content_type.as_deref()).map_err(|source| {
            RegistryError::Manifest {
                reference: reference.to_string(),
                digest: digest.clone(),
                source,
            }
        })?;
        Ok(FetchedManifest {
            reference: reference.pinned(&digest),
            digest,
            content_type,
            bytes,
            parsed,
        })
    }

    /// The image manifest for `platform`: `reference`'s manifest if it is one, else the entry of
    /// its index for `platform`, fetched by digest. Returns the image manifest and the index it
    /// was chosen from. (For building from container images.)
    pub fn image_manifest(
        &self,
        reference: &ImageRef,
        platform: &manifest::PlatformSpec,
    ) -> Result<(FetchedManifest, Option<FetchedManifest>), RegistryError> {
        let first = self.manifest(reference)?;
        let entry = match &first.parsed {
            Parsed::Manifest(_) => return Ok((first, None)),
            Parsed::Index(index) => manifest::select_platform(index, platform)
                .map_err(|source| RegistryError::Manifest {
                    reference: reference.to_string(),
                    digest: first.digest.clone(),
                    source,
                })?
                .digest
                .clone(),
        };
        let chosen = self.manifest(&reference.pinned(&entry))?;
        match chosen.parsed {
            Parsed::Manifest(_) => Ok((chosen, Some(first))),
            Parsed::Index(_) => Err(RegistryError::Manifest {
                reference: chosen.reference.to_string(),
                digest: chosen.digest.clone(),
                source: manifest::ManifestError(format!(
                    "the index's entry for {platform} is another index"
                )),
            }),
        }
    }

    /// Fetches a small blob whole (a signatures layer), checked against its descriptor.
    pub fn small_blob(
        &self,
        desc: &manifest::Descriptor,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let what = crate::blob::blob_name(&self.inner.repo, &desc.digest);
        if desc.size > limit {
            return Err(RegistryError::BlobContent {
                what,
                reason: format!("{} bytes, more than the {limit} expected", desc.size),
            });
        }
        let mut out = Vec::with_capacity(desc.size as usize);
        // The reader's errors name the blob already: passed on as they are, not named again.
        std::io::Read::read_to_end(&mut self.blob_reader(desc)?, &mut out).map_err(|e| {
            let text = e.to_string();
            match e
                .into_inner()
                .map(|inner| inner.downcast::<RegistryError>())
            {
                Some(Ok(registry)) => *registry,
                _ if text.contains(&desc.digest) => RegistryError::Request {
                    what: format!("GET {what}"),
                    reason: text
                        .split_once(&format!("{}: ", desc.digest))
                        .map_or(text.clone(), |(_, rest)| rest.to_string()),
                },
                _ => RegistryError::BlobContent { what, reason: text },
            }
        })?;
        Ok(out)
    }
}

/// The body of `resp`, at most `limit` bytes.
pub(crate) async fn read_limited(
    mut resp: reqwest::Response,
    limit: usize,
) -> Result<Bytes, String> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| chain(&e))? {
        if out.len() + chunk.len() > limit {
            return Err(format!("more than {limit} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out.into())
}
