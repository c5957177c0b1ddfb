//! [`open`]: the one entry point that opens an image the way a program should, verified.
//!
//! It finds the seal (at the end of the image, or in a sidecar: [`crate::seal`]), checks it, compares
//! its digest with the one the caller expects, detects whether the kernel already verifies the image
//! file (fs-verity with the same digest: checksum offload, nothing is hashed again here), and returns
//! the [`Image`] whose every block read is checked against the seal, together with the [`Trust`] it
//! established. Reading a sealed image without verification must be asked for by name
//! ([`VerifyMode::None`], or [`Image::open_unverified`] on the bytes).
//!
//! ```no_run
//! use sealfs_reader::{open, Follow, OpenOptions};
//! let digest = "sha256:3f1c4e0b9a7d5c2e8f6a1b3d5c7e9f0a2b4c6d8e0f1a3b5c7d9e1f2a4b6c8d0e2f".parse()?;
//! let opened = open("image.sealfs", &OpenOptions::new().digest(digest))?;
//! println!("{}", opened.trust); // "authenticated (digest given): sha256:3f1c..."
//! let image = &opened.image;
//! let inode = image.resolve("/etc/hostname", Follow::All)?;
//! let data = image.read_vec(&inode, 0, 1 << 20)?; // every block checked against the digest
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::files::FileDigests;
use crate::image::{Image, Options};
use crate::seal::{find_seal, Found, OpenError, Seal};
use crate::source::{ReadAt, SplitFile};
use crate::verified::{kernel_verity_digest, FillMode, VerifiedBlocks, DEFAULT_HASH_CACHE_BLOCKS};
use sealfs_verity::Digest;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where an image (or a sidecar) is read from.
#[derive(Clone)]
#[non_exhaustive]
pub enum Source {
    /// A file, read with positional reads (a second descriptor reads the hash blocks of an attached
    /// seal, and kernel fs-verity on the file is detected).
    Path(PathBuf),
    /// Any byte source, with the name messages use for it.
    Reader {
        /// The bytes.
        reader: Arc<dyn ReadAt>,
        /// Its name in messages.
        name: String,
    },
}

impl Source {
    /// A byte source named `name` in messages.
    pub fn reader(reader: Arc<dyn ReadAt>, name: impl Into<String>) -> Source {
        Source::Reader {
            reader,
            name: name.into(),
        }
    }

    /// The name messages use.
    pub fn name(&self) -> String {
        match self {
            Source::Path(p) => sealfs_text::escape_path(p),
            Source::Reader { name, .. } => name.clone(),
        }
    }
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Path(p) => f.debug_tuple("Path").field(p).finish(),
            Source::Reader { name, .. } => f.debug_struct("Reader").field("name", name).finish(),
        }
    }
}

impl From<&Path> for Source {
    fn from(p: &Path) -> Source {
        Source::Path(p.to_path_buf())
    }
}

impl From<PathBuf> for Source {
    fn from(p: PathBuf) -> Source {
        Source::Path(p)
    }
}

impl From<&PathBuf> for Source {
    fn from(p: &PathBuf) -> Source {
        Source::Path(p.clone())
    }
}

impl From<&str> for Source {
    fn from(p: &str) -> Source {
        Source::Path(p.into())
    }
}

/// How reads are checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VerifyMode {
    /// Every block read is checked against the seal's Merkle tree (or by the kernel, when it enforces
    /// fs-verity on the image file with the same digest).
    #[default]
    Full,
    /// As [`VerifyMode::Full`], and the seal's per-file digests are loaded so that each regular file
    /// can also be checked whole against its own recorded fs-verity digest
    /// ([`OpenedImage::file_digests`]; the FUSE layer does this before a file's first read).
    Double,
    /// Nothing is checked: the image is trusted as it is. The only way to read a damaged image.
    None,
}

/// What vouches for the digest reads are checked against.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Authority {
    /// The caller gave the expected digest ([`OpenOptions::digest`]), and the seal names it.
    Digest,
    /// A signature by one of the caller's keys ([`OpenOptions::keys`]) verifies over a statement
    /// that binds this seal (if a digest was given too, it also matched).
    Key {
        /// The signer's fingerprint.
        fingerprint: sealfs_trust::Fingerprint,
    },
}

/// Who checks each block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checker {
    /// This process, against the seal's Merkle tree.
    Reader,
    /// The kernel's fs-verity on the image file, whose digest is the image digest (checksum offload).
    Kernel,
}

/// What opening an image established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Every block read is checked against a seal whose digest the caller vouched for.
    Authenticated {
        /// The image digest.
        digest: Digest,
        /// What vouched for it.
        authority: Authority,
        /// Who checks the blocks.
        checker: Checker,
    },
    /// Every block read is checked against the image's own seal, which nobody vouched for: the image
    /// is intact as sealed, but anyone could have sealed it.
    SelfConsistent {
        /// The image digest its seal names.
        digest: Digest,
        /// Who checks the blocks.
        checker: Checker,
    },
    /// Nothing is checked: a plain image, or [`VerifyMode::None`].
    Unverified,
}

impl Trust {
    /// The digest reads are checked against, if any.
    pub fn digest(&self) -> Option<&Digest> {
        match self {
            Trust::Authenticated { digest, .. } | Trust::SelfConsistent { digest, .. } => {
                Some(digest)
            }
            Trust::Unverified => None,
        }
    }

    /// Who checks each block, if anyone.
    pub fn checker(&self) -> Option<Checker> {
        match self {
            Trust::Authenticated { checker, .. } | Trust::SelfConsistent { checker, .. } => {
                Some(*checker)
            }
            Trust::Unverified => None,
        }
    }

    /// Whether the digest was vouched for from outside.
    pub fn is_authenticated(&self) -> bool {
        matches!(self, Trust::Authenticated { .. })
    }
}

impl std::fmt::Display for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let by = |c: &Checker| match c {
            Checker::Reader => "",
            Checker::Kernel => ", verified by kernel fs-verity",
        };
        match self {
            Trust::Authenticated {
                digest,
                authority: Authority::Digest,
                checker,
            } => write!(f, "authenticated (digest given{}): {digest}", by(checker)),
            Trust::Authenticated {
                digest,
                authority: Authority::Key { fingerprint },
                checker,
            } => write!(
                f,
                "authenticated (signed by {fingerprint}{}): {digest}",
                by(checker)
            ),
            Trust::SelfConsistent { digest, checker } => {
                write!(f, "self-consistent only{}: {digest}", by(checker))
            }
            Trust::Unverified => f.write_str("unverified"),
        }
    }
}

/// How [`open`] opens an image. `OpenOptions::new()` verifies every block against the image's own
/// seal; give [`OpenOptions::digest`] to authenticate it.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// The digest the image must have; a different image is an error. Without it the image is only
    /// checked against its own seal ([`Trust::SelfConsistent`]).
    pub digest: Option<Digest>,
    /// Read the seal from this sidecar instead of the end of the image.
    pub sidecar: Option<Source>,
    /// Keys that may vouch for the image: when any is given, some signature by one of them must
    /// verify over a statement that binds this seal ([`Authority::Key`]), else opening fails with
    /// [`OpenError::Signature`]. Checked once, at open.
    pub keys: Vec<sealfs_trust::PublicKey>,
    /// Detached signatures (a signature section, as `sealfs sign --detached` writes them). Without
    /// it, `IMAGE.sig` beside a [`Source::Path`] image is read when it exists. They are considered
    /// together with the seal's own signatures.
    pub signatures: Option<Source>,
    /// Rollback protection: the signature that authenticates the image (so [`OpenOptions::keys`]
    /// must be given) must carry a version at or above this one; an older image, however validly
    /// signed, is refused ([`sealfs_trust::Refusal::Rollback`]).
    pub min_version: Option<sealfs_trust::Version>,
    /// How reads are checked.
    pub verify: VerifyMode,
    /// Verified image blocks kept in memory (metadata and small reads).
    pub cache_blocks: usize,
    /// Bytes of decompressed clusters, and of verified blocks of small uncompressed reads by
    /// [`Image::read_direct`], kept in memory (0 turns the cache off).
    pub cluster_cache_bytes: usize,
    /// Whether a file's decoded extent stays cached once a read has taken it to its end
    /// ([`Options::keep_passed_extents`]; false for a FUSE mount).
    pub keep_passed_extents: bool,
    /// Verified Merkle hash blocks kept in memory.
    pub hash_cache_blocks: usize,
    /// Ask the kernel whether it enforces fs-verity on the image file with the image digest, and if so
    /// hash nothing here (on by default; only [`Source::Path`] images can be asked).
    pub kernel_offload: bool,
    /// Where verified blocks are kept across processes (a cache directory for remote images); it is
    /// consulted before fetching and given every block fetched and verified. Nothing unverified is
    /// ever stored, and what it returns is verified again.
    pub store: Option<Arc<dyn crate::store::StoreProvider>>,
    /// With a store: the fewest blocks a read that misses fetches (the next ones the store lacks
    /// come along; 0 turns this off) and the most a sequential reader has fetched ahead
    /// ([`VerifiedBlocks::start_readahead`]).
    pub readahead_blocks: (u64, u64),
    /// Fetch each read's hash blocks in a second request after its data instead of in the same
    /// batch: only for measuring what batching saves (off by default).
    pub dependent_hash_fetch: bool,
    /// With a store and readahead: whether the rest of the image is fetched into the store in the
    /// background ([`FillMode::Auto`] by default: once reads scatter over an image that fits the
    /// store; see [`VerifiedBlocks::set_fill`]).
    pub fill: FillMode,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        let reader = Options::default();
        OpenOptions {
            digest: None,
            sidecar: None,
            keys: Vec::new(),
            signatures: None,
            min_version: None,
            verify: VerifyMode::Full,
            cache_blocks: reader.cache_blocks,
            cluster_cache_bytes: reader.cluster_cache_bytes,
            keep_passed_extents: reader.keep_passed_extents,
            hash_cache_blocks: DEFAULT_HASH_CACHE_BLOCKS,
            kernel_offload: true,
            store: None,
            readahead_blocks: (16, 16384),
            dependent_hash_fetch: false,
            fill: FillMode::Auto,
        }
    }
}

impl OpenOptions {
    /// Default options: every block verified against the image's own seal.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// The image must have this digest.
    pub fn digest(mut self, digest: Digest) -> OpenOptions {
        self.digest = Some(digest);
        self
    }

    /// Accept the image when one of these keys signed it.
    pub fn keys(mut self, keys: impl IntoIterator<Item = sealfs_trust::PublicKey>) -> OpenOptions {
        self.keys.extend(keys);
        self
    }

    /// Refuse images signed with a version below `minimum` (see [`OpenOptions::min_version`]).
    pub fn min_version(mut self, minimum: sealfs_trust::Version) -> OpenOptions {
        self.min_version = Some(minimum);
        self
    }

    /// Detached signatures are read from this source.
    pub fn signatures(mut self, signatures: impl Into<Source>) -> OpenOptions {
        self.signatures = Some(signatures.into());
        self
    }

    /// The seal is in this sidecar.
    pub fn sidecar(mut self, sidecar: impl Into<Source>) -> OpenOptions {
        self.sidecar = Some(sidecar.into());
        self
    }

    /// How reads are checked.
    pub fn verify(mut self, mode: VerifyMode) -> OpenOptions {
        self.verify = mode;
        self
    }
}

/// An image opened by [`open`].
pub struct OpenedImage {
    /// The reader; every block it reads is checked as [`OpenedImage::trust`] says.
    pub image: Image,
    /// What was established.
    pub trust: Trust,
    /// The seal, if the image has one.
    pub seal: Option<Box<Seal>>,
    /// Bytes of EROFS data.
    pub erofs_length: u64,
    /// Bytes of the image file or object (EROFS data, and the seal when it is attached).
    pub image_length: u64,
    /// The verifying block source, when reads are verified here (its statistics).
    pub verified: Option<Arc<VerifiedBlocks>>,
    /// With [`VerifyMode::Double`]: the per-file digests the image records
    /// ([`OpenedImage::recorded_file_digests`]).
    pub file_digests: Option<Arc<FileDigests>>,
    /// The image's name in messages (its path or URL).
    pub name: String,
}

impl OpenedImage {
    /// The reader's counters and, when reads are verified here, the verifier's, by name (what
    /// `sealfs cat --stats` prints and the bindings' `stats` return): block and cluster caches,
    /// bytes read, decompressed and verified, absent-xattr lookups the bloom filter answered.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        use std::sync::atomic::Ordering::Relaxed;
        let s = self.image.stats();
        let mut all = vec![
            ("blocks_read", s.blocks_read),
            ("block_cache_hits", s.cache_hits),
            ("block_cache_misses", s.cache_misses),
            ("cluster_cache_hits", s.cluster_hits),
            ("cluster_cache_misses", s.cluster_misses),
            ("cluster_cache_evictions", s.cluster_evictions),
            ("cluster_cache_bytes", s.cluster_cache_bytes),
            ("cluster_cache_peak_bytes", s.cluster_cache_peak_bytes),
            ("compressed_bytes_read", s.compressed_bytes_read),
            ("decompressed_bytes", s.decompressed_bytes),
            ("xattr_lookups", s.xattr_lookups),
            ("xattr_filter_skips", s.filter_skips),
        ];
        if let Some(v) = &self.verified {
            let v = v.stats();
            all.extend([
                ("verified_blocks", v.blocks_verified.load(Relaxed)),
                ("hash_blocks_read", v.hash_blocks_read.load(Relaxed)),
                ("hash_cache_hits", v.hash_cache_hits.load(Relaxed)),
                ("hash_blocks_shared", v.hash_blocks_shared.load(Relaxed)),
                ("data_bytes_read", v.data_bytes.load(Relaxed)),
                ("hash_bytes_read", v.hash_bytes.load(Relaxed)),
                ("verification_failures", v.failures.load(Relaxed)),
                ("store_hits", v.store_hits.load(Relaxed)),
                ("store_discards", v.store_discards.load(Relaxed)),
                ("leaf_hits", v.leaf_hits.load(Relaxed)),
                ("leaf_discards", v.leaf_discards.load(Relaxed)),
                ("readahead_blocks", v.readahead_blocks.load(Relaxed)),
            ]);
        }
        all
    }
}

impl std::fmt::Debug for OpenedImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenedImage")
            .field("trust", &self.trust)
            .field("seal", &self.seal)
            .field("erofs_length", &self.erofs_length)
            .finish_non_exhaustive()
    }
}

/// An opened source: its bytes, and the file behind them when there is one.
struct Opened {
    reader: Arc<dyn ReadAt>,
    file: Option<std::fs::File>,
    name: String,
}

fn open_source(source: &Source) -> Result<Opened, OpenError> {
    match source {
        Source::Path(p) => {
            let file = std::fs::File::open(p).map_err(|e| OpenError::Io {
                name: sealfs_text::escape_path(p),
                what: "open",
                source: e,
            })?;
            Ok(Opened {
                reader: Arc::new(file.try_clone().map_err(|e| OpenError::Io {
                    name: sealfs_text::escape_path(p),
                    what: "open",
                    source: e,
                })?),
                file: Some(file),
                name: sealfs_text::escape_path(p),
            })
        }
        Source::Reader { reader, name } => Ok(Opened {
            reader: reader.clone(),
            file: None,
            name: name.clone(),
        }),
    }
}

/// Every signature for `seal`: its own section, and the detached ones (`options.signatures`, else
/// `IMAGE.sig` beside a path image when it exists).
pub fn gather_signatures(
    seal: &Seal,
    source: &Source,
    detached: Option<&Source>,
) -> Result<Vec<sealfs_trust::Signature>, sealfs_trust::Refusal> {
    use sealfs_trust::Refusal;
    let mut all = seal.signatures()?;
    let detached_bytes = match (detached, source) {
        (Some(Source::Path(p)), _) => Some(
            std::fs::read(p)
                .map_err(|e| Refusal::Section(format!("{}: {e}", sealfs_text::escape_path(p))))?,
        ),
        (Some(Source::Reader { reader, name }), _) => {
            let mut b = vec![0u8; reader.len() as usize];
            reader
                .read_exact_at(&mut b, 0)
                .map_err(|e| Refusal::Section(format!("{name}: {}", crate::ErrorChain(&e))))?;
            Some(b)
        }
        (None, Source::Path(p)) => {
            let sig = sealfs_trust::detached_path(p);
            match std::fs::read(&sig) {
                Ok(b) => Some(b),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    return Err(Refusal::Section(format!(
                        "{}: {e}",
                        sealfs_text::escape_path(&sig)
                    )))
                }
            }
        }
        (None, Source::Reader { .. }) => None,
    };
    if let Some(bytes) = detached_bytes {
        all.extend(sealfs_trust::parse_section(&bytes).map_err(Refusal::Section)?);
    }
    Ok(all)
}

fn authenticate_seal(
    seal: &Seal,
    digest: &Digest,
    source: &Source,
    options: &OpenOptions,
) -> Result<sealfs_trust::Fingerprint, sealfs_trust::Refusal> {
    let all = gather_signatures(seal, source, options.signatures.as_ref())?;
    sealfs_trust::authenticate(
        &all,
        &options.keys,
        &seal.params,
        digest,
        seal.erofs_length(),
        options.min_version.as_ref(),
    )
    .map(|(fingerprint, _)| fingerprint)
}

/// Opens an image: finds and checks its seal, compares the digest, and returns the image whose every
/// block read is verified, with the [`Trust`] established. A plain (unsealed) image opens
/// [`Trust::Unverified`], unless a digest is expected, which is then refused: reads could not be
/// checked against it.
pub fn open(source: impl Into<Source>, options: &OpenOptions) -> Result<OpenedImage, OpenError> {
    let source = source.into();
    if options.min_version.is_some() && options.keys.is_empty() {
        return Err(OpenError::Refused(format!(
            "{}: a minimum version needs a key: only a signed statement carries a version",
            source.name()
        )));
    }
    let data = open_source(&source)?;
    let sidecar = options.sidecar.as_ref().map(open_source).transpose()?;
    let name = data.name.clone();
    let image_length = data.reader.len();
    let found = find_seal(
        &data.reader,
        &name,
        sidecar.as_ref().map(|s| (&s.reader, s.name.as_str())),
    )?;
    let erofs_length = found.erofs_length();
    let seal = match found {
        Found::Sealed(seal) => Some(seal),
        Found::Plain(_) => None,
    };
    let verify = options.verify != VerifyMode::None;
    let sealed_digest = match (&seal, &options.digest) {
        (Some(seal), expected) if verify => {
            let digest = seal.digest();
            match expected {
                Some(e) if *e != digest => {
                    return Err(OpenError::DigestMismatch {
                        name,
                        expected: Box::new(*e),
                        actual: Box::new(digest),
                    })
                }
                _ => Some(digest),
            }
        }
        (None, Some(_)) if verify => {
            return Err(OpenError::Refused(format!(
                "{name}: not sealed, so --digest cannot be checked while reading; seal it or use `sealfs verify --digest`"
            )))
        }
        (None, None) if verify && !options.keys.is_empty() => {
            return Err(OpenError::Refused(format!(
                "{name}: not sealed, so a signature cannot be checked while reading; seal and sign it"
            )))
        }
        _ => None,
    };
    // Keys: one check at open, none per read.
    let signer = match (&seal, &sealed_digest) {
        (Some(seal), Some(digest)) if !options.keys.is_empty() => Some(
            authenticate_seal(seal, digest, &source, options).map_err(|refusal| {
                OpenError::Signature {
                    name: name.clone(),
                    refusal: Box::new(refusal),
                }
            })?,
        ),
        _ => None,
    };
    if options.verify == VerifyMode::Double && seal.is_none() {
        return Err(OpenError::Refused(format!(
            "{name}: --verify=double needs a sealed image"
        )));
    }
    let reader_options = Options {
        cluster_cache_bytes: options.cluster_cache_bytes,
        cache_blocks: options.cache_blocks,
        keep_passed_extents: options.keep_passed_extents,
    };
    // Checksum offload: an image file whose kernel fs-verity digest is the image digest (the detached
    // form on ext4/f2fs/btrfs with fs-verity enabled) is verified by the kernel on every read.
    let offloaded = match (&sealed_digest, &data.file) {
        (Some(d), Some(file)) if options.kernel_offload => {
            kernel_verity_digest(file).as_ref() == Some(d)
        }
        _ => false,
    };
    let checker = if offloaded {
        Checker::Kernel
    } else {
        Checker::Reader
    };
    let trust = match sealed_digest {
        Some(digest) if signer.is_some() => Trust::Authenticated {
            digest,
            authority: Authority::Key {
                fingerprint: signer.expect("checked"),
            },
            checker,
        },
        Some(digest) if options.digest.is_some() => Trust::Authenticated {
            digest,
            authority: Authority::Digest,
            checker,
        },
        Some(digest) => Trust::SelfConsistent { digest, checker },
        None => Trust::Unverified,
    };
    let open_err = |source| OpenError::Image {
        name: name.clone(),
        source,
    };
    let (image, verified) = match (&seal, &trust) {
        (Some(seal), Trust::Authenticated { .. } | Trust::SelfConsistent { .. }) if !offloaded => {
            // Hash blocks are read through a second descriptor (see SplitFile), in the same batch as
            // the data; if the path cannot be opened again, one descriptor serves both.
            let reader: Arc<dyn ReadAt> = match (&source, data.file, &sidecar) {
                (Source::Path(p), Some(file), None) => match std::fs::File::open(p) {
                    Ok(side) => Arc::new(SplitFile::new(file, side)),
                    Err(_) => data.reader,
                },
                _ => data.reader,
            };
            let tree = if sidecar.is_some() {
                seal.source().clone()
            } else {
                reader.clone()
            };
            let mut blocks =
                VerifiedBlocks::new(reader, tree, seal.info(), options.hash_cache_blocks)
                    .map_err(open_err)?;
            blocks = blocks.with_dependent_hash_fetch(options.dependent_hash_fetch);
            if let Some(store) = options
                .store
                .as_ref()
                .and_then(|p| p.store_for(&seal.digest(), &seal.info()))
            {
                blocks = blocks.with_store(store);
            }
            let blocks = Arc::new(blocks);
            blocks.set_fill(options.fill);
            if options.readahead_blocks.0 > 0 {
                let (min, max) = options.readahead_blocks;
                blocks.start_readahead(min, max);
            }
            let image = Image::open_blocks(blocks.clone(), &reader_options).map_err(open_err)?;
            // The superblock, now verified, must claim the bytes the seal covers: a seal over fewer
            // blocks than the file system uses would leave the rest unchecked by a kernel mount.
            let sb = image.superblock();
            let claimed = sb.blocks << sb.blkszbits;
            if claimed != erofs_length {
                return Err(OpenError::Seal(format!(
                    "{name}: the seal covers {erofs_length} bytes, the superblock claims {claimed}"
                )));
            }
            // An image with its own per-file digest table never has a per-file section in its
            // trailer: one there was put by someone else (docs/format.md §8.5).
            if seal.header.files_length.get() != 0
                && image.file_table_locator().map_err(open_err)?.is_some()
            {
                return Err(OpenError::Seal(format!(
                    "{name}: {}",
                    crate::files::TRAILER_SECTION_WITH_TABLE
                )));
            }
            (image, Some(blocks))
        }
        _ => {
            let bytes = crate::source::SubRange::new(data.reader, 0, erofs_length);
            let image = Image::open_unverified_with(bytes, &reader_options).map_err(open_err)?;
            (image, None)
        }
    };
    let mut opened = OpenedImage {
        image,
        trust,
        seal,
        erofs_length,
        image_length,
        verified,
        file_digests: None,
        name: name.clone(),
    };
    if options.verify == VerifyMode::Double {
        let recorded = opened.recorded_file_digests()?.ok_or_else(|| {
            OpenError::Refused(format!(
                "{name}: the image records no per-file digests, so --verify=double has nothing to check files against"
            ))
        })?;
        opened.file_digests = Some(Arc::new(recorded));
    }
    Ok(opened)
}

impl OpenedImage {
    /// The per-file digests the image records: its own table (inside the EROFS bytes, read and
    /// verified as any block: [`crate::DigestOrigin::Image`]), or, for a seal written before the
    /// table moved there, the trailer's section ([`crate::DigestOrigin::Trailer`]: no digest
    /// covers it, and the result says so). `None` when neither exists (an image another tool made
    /// and `sealfs seal` sealed: compute them from the content,
    /// [`Image::compute_file_digests`]). When the image has a table, a trailer section is ignored.
    pub fn recorded_file_digests(&self) -> Result<Option<FileDigests>, OpenError> {
        let name = || self.name.clone();
        if let Some(table) = self.image.file_table().map_err(|source| OpenError::Image {
            name: name(),
            source,
        })? {
            return Ok(Some(table));
        }
        match &self.seal {
            Some(seal) => seal
                .file_digests()
                .map_err(|e| OpenError::Seal(format!("{}: {e}", name()))),
            None => Ok(None),
        }
    }
}
