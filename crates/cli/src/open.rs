//! The options every reading command shares (`--digest`, `--sidecar`, `--verify`, cache sizes, the
//! persistent cache of remote images),
//! translated into [`sealfs_reader::OpenOptions`]; opening itself is [`sealfs_remote::open()`] (a
//! path, or an `http://`, `https://` or `s3://` URL, with the remote trust rule) or
//! [`sealfs_registry::open()`] (an image reference, `oci://HOST/REPO:TAG`).

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use sealfs_reader::{OpenError, OpenOptions, OpenedImage, Source, VerifyMode};
use sealfs_remote::{RemoteObject, RemoteTrust};
use sealfs_verity::Digest;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Options every reading command takes.
#[derive(Args, Clone, Debug)]
pub struct ImageArgs {
    /// The image (sealed or plain EROFS): a path, an `http://`, `https://` or `s3://` URL, or an
    /// image in a registry, `oci://HOST[:PORT]/REPO[:TAG][@sha256:...]` (`oci+http://` for plain
    /// HTTP); remote images are read lazily with range requests and need --digest, --key, a
    /// reference pinned by digest, or --self-consistent.
    pub image: PathBuf,
    /// The digest the image must have (`sha256:<hex>`); a different image is an error. Without it the
    /// image is only checked against its own seal (self-consistent, not authenticated).
    #[arg(long, value_name = "DIGEST", global = true)]
    pub digest: Option<String>,
    /// Read the seal from this sidecar file (a path or a URL).
    #[arg(long, value_name = "PATH", global = true)]
    pub sidecar: Option<PathBuf>,
    #[command(flatten)]
    pub keys: KeyArgs,
    /// Read a remote image (a URL) without --digest or --key: every block is still checked, but only
    /// against the image's own seal, which whoever can change the object can change too.
    #[arg(long, global = true)]
    pub self_consistent: bool,
    /// `none` trusts the image: no block is checked against the seal. `double` (`mount` only) also
    /// checks each regular file whole against its own recorded digest before its first read.
    #[arg(long, value_name = "MODE", default_value = "default", value_parser = ["default", "none", "double"], global = true)]
    pub verify: String,
    /// Bytes of decompressed clusters, and (on a mount) of verified blocks of small (at most 16 KiB)
    /// O_DIRECT reads of uncompressed data, kept in memory (0 turns the cache off) [default: 67108864;
    /// for `mount`, a sixteenth of the machine's memory, from 64 MiB to 1 GiB]
    #[arg(long, value_name = "BYTES", global = true)]
    pub cluster_cache: Option<usize>,
    /// Where a remote image's verified blocks are kept across commands and mounts, and how much.
    #[command(flatten)]
    pub cache: crate::cache::CacheArgs,
    /// Read a remote image without the persistent cache (every block fetched when needed).
    #[arg(long, global = true)]
    pub no_cache: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Start no readahead fetchers at open (`mount` starts them in its daemon, after the fork: a
    /// thread of the parent could hold a lock the child would then wait for forever).
    #[arg(skip)]
    pub defer_readahead: bool,
    /// Drop a file's decoded extent from the cluster cache once a read has taken it to its end
    /// (`mount`: the kernel's page cache keeps what was read).
    #[arg(skip)]
    pub drop_passed_extents: bool,
    /// Verified Merkle hash blocks kept in memory (each 4 KiB covers 512 KiB of data).
    #[arg(long, value_name = "BLOCKS", default_value_t = sealfs_reader::verified::DEFAULT_HASH_CACHE_BLOCKS, global = true)]
    pub hash_cache_blocks: usize,
    /// Verified image blocks (metadata and small reads) kept in memory [default: 256, 1 MiB; for
    /// `mount`, a long-lived daemon, 4096: 16 MiB].
    #[arg(long, value_name = "BLOCKS", global = true)]
    pub block_cache: Option<usize>,
}

/// Keys that may vouch for an image (every reading command and `verify` take them).
#[derive(Args, Clone, Debug, Default)]
pub struct KeyArgs {
    /// A public key (PEM, as `openssl pkey -pubout` writes it) whose signature authenticates the
    /// image; repeatable. The image must carry a signature by one of the keys given.
    #[arg(long = "key", value_name = "PUB", global = true)]
    pub key: Vec<PathBuf>,
    /// A directory of public keys: every `*.pub` file in it counts as a `--key`.
    #[arg(long, value_name = "DIR", global = true)]
    pub keyring: Option<PathBuf>,
    /// Read detached signatures from this file or URL [default: IMAGE.sig beside a local image, when
    /// it exists].
    #[arg(long, value_name = "PATH", global = true)]
    pub signatures: Option<PathBuf>,
    /// Refuse the image unless a signature by a given key carries a version at or above this one
    /// (`sealfs sign --version`; versions compare as dot-separated numbers, 1.10 after 1.9, at
    /// most 16 numbers of at most 19 digits): rollback protection against older, validly signed
    /// images. Needs --key or --keyring.
    #[arg(long, value_name = "VERSION", global = true)]
    pub min_version: Option<String>,
}

impl KeyArgs {
    /// The version floor given (`--min-version`), checked for form; it needs keys.
    pub fn min_version(&self) -> Result<Option<sealfs_trust::Version>> {
        let Some(text) = &self.min_version else {
            return Ok(None);
        };
        if self.key.is_empty() && self.keyring.is_none() {
            bail!(
                "--min-version needs --key or --keyring: only a signed statement carries a version"
            );
        }
        Ok(Some(
            text.parse().map_err(|e| anyhow!("--min-version: {e}"))?,
        ))
    }

    /// The keys given (`--key` and `--keyring`); an unreadable key is an error (exit 2).
    pub fn load(&self) -> Result<Vec<sealfs_trust::PublicKey>> {
        let mut keys = self
            .key
            .iter()
            .map(|p| sealfs_trust::PublicKey::read(p).map_err(|e| anyhow!("--key: {e}")))
            .collect::<Result<Vec<_>>>()?;
        if let Some(dir) = &self.keyring {
            keys.extend(
                sealfs_trust::PublicKey::read_keyring(dir).map_err(|e| anyhow!("--keyring {e}"))?,
            );
        }
        Ok(keys)
    }
}

/// An image opened for reading (see [`sealfs_reader::open()`]).
pub type OpenImage = OpenedImage;

/// The CLI's form of an open error: the image's faults exit 1 (as [`crate::read::ImageFault`]), the
/// rest 2; a reader error stays in the chain (exit 1).
pub fn open_error(e: OpenError) -> anyhow::Error {
    // A registry that served a manifest or blob other than the one that names it: the image's
    // source is at fault.
    if let OpenError::Io { source, .. } = &e {
        let content = sealfs_registry::registry_error(source).is_some_and(|r| r.is_content_fault());
        if content {
            return crate::read::fault(format!("{e}: {source}"));
        }
    }
    match e {
        OpenError::Seal(_) | OpenError::DigestMismatch { .. } | OpenError::Signature { .. } => {
            crate::read::fault(e.to_string())
        }
        e => anyhow::Error::new(e),
    }
}

impl ImageArgs {
    /// Adds to `bases` the blocks the persistent cache holds (unless `--no-cache`) for images made
    /// with `params`, by leaf ([`sealfs_delta::Bases::add_cached`]). A cache directory that does not
    /// exist is not created. Returns the blocks added.
    pub fn add_cached_leaves(
        &self,
        bases: &mut sealfs_delta::Bases,
        params: &sealfs_verity::Params,
    ) -> Result<u64> {
        let dir = self.cache.dir();
        if self.no_cache || !dir.is_dir() {
            return Ok(0);
        }
        let cache = self.cache.open()?;
        let entries = cache
            .leaf_entries(params, None)
            .with_context(|| format!("cache directory {}", sealfs_text::escape_path(&dir)))?;
        let before = bases.cached_blocks();
        bases.add_cached(entries.into_iter().map(|e| (e.leaf, e.path, e.offset)));
        Ok(bases.cached_blocks() - before)
    }
    /// Opens the image as the options say (`--verify=double` is refused: it is `mount`'s).
    pub fn open(&self) -> Result<OpenImage> {
        self.refuse_double()?;
        self.open_any()
    }

    /// `--verify=double` is `mount`'s alone.
    pub fn refuse_double(&self) -> Result<()> {
        if self.verify == "double" {
            bail!("--verify=double (each file also checked against its own recorded digest) is offered by `sealfs mount` only");
        }
        Ok(())
    }

    /// The library's options for these arguments.
    pub fn options(&self) -> Result<OpenOptions> {
        let digest: Option<Digest> = self
            .digest
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| anyhow!("--digest: {e}"))?;
        Ok(OpenOptions {
            digest,
            sidecar: self
                .sidecar
                .as_deref()
                .map(|p| location(p, &self.tls))
                .transpose()?,
            keys: self.keys.load()?,
            min_version: self.keys.min_version()?,
            signatures: self
                .keys
                .signatures
                .as_deref()
                .map(|p| location(p, &self.tls))
                .transpose()?,
            verify: match self.verify.as_str() {
                "none" => VerifyMode::None,
                "double" => VerifyMode::Double,
                _ => VerifyMode::Full,
            },
            cache_blocks: self
                .block_cache
                .unwrap_or(sealfs_reader::DEFAULT_CACHE_BLOCKS),
            cluster_cache_bytes: self
                .cluster_cache
                .unwrap_or(sealfs_reader::DEFAULT_CLUSTER_CACHE_BYTES),
            keep_passed_extents: !self.drop_passed_extents,
            hash_cache_blocks: self.hash_cache_blocks,
            readahead_blocks: if self.defer_readahead {
                (0, 0)
            } else {
                OpenOptions::default().readahead_blocks
            },
            // Only for measuring what fetching hash blocks with the data saves (bench/remote.py).
            dependent_hash_fetch: std::env::var_os("SEALFS_DEPENDENT_HASH_FETCH").is_some(),
            ..OpenOptions::default()
        })
    }

    /// Opens the image as the options say, `--verify=double` included (its per-file digests are
    /// loaded; checking files with them is the caller's part).
    pub fn open_any(&self) -> Result<OpenImage> {
        self.open_counted().map(|(opened, _)| opened)
    }

    /// [`ImageArgs::open_any`], with the remote object read when the image is a URL or in a
    /// registry (its request counters).
    pub fn open_counted(&self) -> Result<(OpenImage, Option<Arc<RemoteObject>>)> {
        self.open_located()
            .map(|(opened, remote, _)| (opened, remote))
    }

    /// [`ImageArgs::open_counted`], with what the registry said when the image is in one (its
    /// manifest, pinned).
    pub fn open_located(
        &self,
    ) -> Result<(
        OpenImage,
        Option<Arc<RemoteObject>>,
        Option<sealfs_registry::Opened>,
    )> {
        let trust = if self.self_consistent {
            RemoteTrust::AllowSelfConsistent
        } else {
            RemoteTrust::RequireAuthority
        };
        // Remote images read through the persistent cache of verified blocks (which the readahead
        // fills, and beside which the tail is kept, so a fully cached image opens offline too).
        let cache = (!self.no_cache).then(|| self.cache.settings());
        let (opened, remote, located) = match self.registry_ref() {
            Some(reference) => {
                let mut options = self.options()?;
                let mut remote_options = self.tls.remote_options();
                if let Some(c) = &cache {
                    let store =
                        sealfs_cache::DiskCache::open(&c.dir, c.max_bytes).map_err(|e| {
                            anyhow!(
                                "{}: open the cache directory: {e}",
                                sealfs_text::escape_path(&c.dir)
                            )
                        })?;
                    options.store = Some(Arc::new(store));
                    remote_options.tail_cache = Some(c.dir.clone());
                }
                let registry_options = sealfs_registry::RegistryOptions {
                    ca_certificates: self.tls.ca_cert.clone(),
                    remote: remote_options,
                    ..Default::default()
                };
                let (opened, found) =
                    sealfs_registry::open(reference, &options, trust, &registry_options)
                        .map_err(open_error)?;
                (opened, Some(found.object.clone()), Some(found))
            }
            None => {
                let (opened, remote) = sealfs_remote::open_cached(
                    &self.image,
                    &self.options()?,
                    trust,
                    &self.tls.remote_options(),
                    cache.as_ref(),
                )
                .map_err(open_error)?;
                (opened, remote, None)
            }
        };
        if self.is_remote() && !opened.trust.is_authenticated() {
            eprintln!(
                "sealfs: note: {}: {} (no --digest or --key)",
                sealfs_text::escape_path(&self.image),
                opened.trust
            );
        }
        Ok((opened, remote, located))
    }

    /// Whether the image is a URL or in a registry.
    pub fn is_remote(&self) -> bool {
        self.image.to_str().is_some_and(sealfs_remote::is_remote) || self.registry_ref().is_some()
    }

    /// The image reference, when the image is in a registry.
    pub fn registry_ref(&self) -> Option<&str> {
        self.image
            .to_str()
            .filter(|s| sealfs_registry::is_image_ref(s))
    }
}

/// The source for a path or URL given with an option (`--sidecar`, `--signatures`, `verify`'s image).
pub fn location(p: &Path, tls: &TlsArgs) -> Result<Source> {
    sealfs_remote::source_with(p, &tls.remote_options()).map_err(anyhow::Error::new)
}

/// The image blob (and the sidecar blob of a detached image) of an image reference, resolved once,
/// with what the registry said (`verify`, `digest`); `None` for anything else.
pub fn registry_sources(
    image: &Path,
    tls: &TlsArgs,
) -> Result<Option<(Source, Option<Source>, sealfs_registry::RegistryImage)>> {
    let Some(reference) = image.to_str().filter(|s| sealfs_registry::is_image_ref(s)) else {
        return Ok(None);
    };
    let parsed: sealfs_registry::ImageRef = reference.parse()?;
    let found = sealfs_registry::locate(&parsed, &tls.registry_options())?;
    let name = found.reference().to_string();
    let blob = Source::reader(found.image()?, name);
    let sidecar = found.sidecar()?.map(|s| {
        let n = s.url().to_string();
        Source::reader(s, n)
    });
    Ok(Some((blob, sidecar, found)))
}

/// How servers are reached: the certificate authorities `https://` trusts, and when a slow server
/// is given up on.
#[derive(Args, Clone, Debug, Default)]
pub struct TlsArgs {
    /// A certificate authority (PEM) to trust for `https://` besides the system's, for a server
    /// whose certificate a private CA signed; repeatable.
    #[arg(long, value_name = "PEM", global = true)]
    pub ca_cert: Vec<PathBuf>,
    /// Give up on a server that sends an answer slower than this many bytes a second, averaged
    /// over --speed-time (as curl's --speed-limit); 0: no minimum [default: 1024].
    #[arg(long, value_name = "BYTES", global = true)]
    pub speed_limit: Option<u64>,
    /// The seconds --speed-limit is averaged over [default: 20].
    #[arg(long, value_name = "SECONDS", global = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub speed_time: Option<u64>,
    /// The most seconds one request to a server may take, its retries included (as curl's
    /// --max-time) [default: 600].
    #[arg(long, value_name = "SECONDS", global = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_time: Option<u64>,
}

impl TlsArgs {
    /// Registry options with these certificate authorities.
    pub fn registry_options(&self) -> sealfs_registry::RegistryOptions {
        sealfs_registry::RegistryOptions {
            ca_certificates: self.ca_cert.clone(),
            remote: self.remote_options(),
            ..Default::default()
        }
    }

    /// Remote options with these certificate authorities.
    pub fn remote_options(&self) -> sealfs_remote::RemoteOptions {
        let d = sealfs_remote::RemoteOptions::default();
        sealfs_remote::RemoteOptions {
            ca_certificates: self.ca_cert.clone(),
            speed_limit: self.speed_limit.unwrap_or(d.speed_limit),
            speed_time: self
                .speed_time
                .map_or(d.speed_time, std::time::Duration::from_secs),
            max_time: self
                .max_time
                .map_or(d.max_time, std::time::Duration::from_secs),
            ..d
        }
    }
}
