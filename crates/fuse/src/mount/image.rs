//! What is mounted: an opened image with what its mount does besides answering requests
//! (verification described, files checked whole, metadata fetched ahead, a profile replayed or
//! recorded), turned into the [`SealFs`] that serves it in the process that serves.

use super::MountError;
use crate::{FileCheck, Logger, SealFs, XattrMode};
use sealfs_reader::{
    Authority, Checker, Digest, DigestOrigin, FileDigests, FillMode, Image, OpenedImage, Trust,
    VerifiedBlocks,
};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Blocks a mount's block cache should keep (16 MiB with 4 KiB blocks): a mount serves many
/// lookups over time, so the metadata of a large tree stays verified in memory. Set it as
/// [`sealfs_reader::OpenOptions::cache_blocks`] before opening an image to mount, with
/// [`super::mount_cluster_cache`] as its `cluster_cache_bytes` and `keep_passed_extents` off (the
/// kernel's page cache keeps what streaming reads read).
pub const MOUNT_BLOCK_CACHE: usize = 4096;

/// An opened image to mount, and what its mount does besides answering requests. Built from an
/// [`OpenedImage`] by [`MountImage::new`]; the fields then say the rest.
pub struct MountImage {
    /// The reader.
    pub image: Arc<Image>,
    /// Its verifying block source, when reads are verified in this process (its counters; a
    /// remote image's readahead and fill).
    pub verified: Option<Arc<VerifiedBlocks>>,
    /// What reads are checked against, in words (the `trust` of the statistics):
    /// [`trust_description`] of the opened image.
    pub trust: String,
    /// With `--verify=double`: each file read is also checked whole against the digest the image
    /// records for it, once, before any of its bytes are returned.
    pub file_digests: Option<Arc<FileDigests>>,
    /// How extended attribute requests are answered.
    pub xattrs: XattrMode,
    /// A remote image read through the persistent cache: its metadata is fetched ahead in
    /// batches, in the background, and its reads start the verifier's readahead.
    pub warm: bool,
    /// With `warm`: whether the rest of the image is fetched into the cache in the background.
    pub fill: FillMode,
    /// Ranges of the image fetched ahead, in order, as soon as it is mounted (a replayed access
    /// profile: [`sealfs_reader::profile::parse_profile`]).
    pub replay: Vec<Range<u64>>,
    /// With `warm`: paths read soon (a prefetch list, [`sealfs_reader::prefetch`]), fetched
    /// ahead first of all, in a few batches ([`Image::prefetch_paths`]).
    pub prefetch: Vec<String>,
    /// With a prefetch list: what the metadata warm-up does after it.
    pub prefetch_order: PrefetchOrder,
    /// Where the access profile is written when the mount ends ([`MountImage::record_profile`]).
    record: Option<(PathBuf, Arc<VerifiedBlocks>, Digest)>,
    /// The image's digest, if sealed.
    digest: Option<Digest>,
}

/// What a mount with a prefetch list does after fetching it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PrefetchOrder {
    /// The list, then the metadata warm-up at once, as without a list (its span fetched whole,
    /// then the walk).
    First,
    /// The list; then, when the list found anything and the fill is on, the metadata warm-up
    /// waits with the fill until reads are quiet: the list stands for what the program starting
    /// on the mount reads.
    #[default]
    Only,
}

/// What reads of `opened` are checked against, in words: the digest and how it was established,
/// the kernel's fs-verity when it checks, double verification. The words `sealfs stats` shows as
/// `trust`.
pub fn trust_description(opened: &OpenedImage) -> String {
    let trust = match &opened.trust {
        Trust::Authenticated {
            digest,
            authority: Authority::Key { fingerprint },
            ..
        } => format!("{digest} (authenticated: signed by {fingerprint})"),
        Trust::Authenticated { digest, .. } => format!("{digest} (authenticated)"),
        Trust::SelfConsistent { digest, .. } => format!("{digest} (self-consistent)"),
        Trust::Unverified => "none".to_string(),
    };
    let trust = if opened.trust.checker() == Some(Checker::Kernel) {
        format!("{trust}, verified by kernel fs-verity")
    } else {
        trust
    };
    match &opened.file_digests {
        Some(d) if d.origin() == DigestOrigin::Trailer => format!(
            "{trust}, and each file against its recorded digest (double; UNAUTHENTICATED digests)"
        ),
        Some(_) => format!("{trust}, and each file against its recorded digest (double)"),
        None => trust,
    }
}

impl MountImage {
    /// `opened`, mounted as `sealfs mount` mounts a local image: described by
    /// [`trust_description`], checked whole per file if opened with double verification,
    /// [`XattrMode::Auto`], nothing fetched ahead, no profile.
    pub fn new(opened: OpenedImage) -> MountImage {
        let trust = trust_description(&opened);
        MountImage {
            image: Arc::new(opened.image),
            verified: opened.verified,
            trust,
            file_digests: opened.file_digests,
            xattrs: XattrMode::Auto,
            warm: false,
            fill: FillMode::Off,
            replay: Vec::new(),
            prefetch: Vec::new(),
            prefetch_order: PrefetchOrder::default(),
            record: None,
            digest: opened.trust.digest().copied(),
        }
    }

    /// The image's digest, if it is sealed (what a profile to replay must name).
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// Records which parts of the image are read while mounted (in the order first read), and
    /// writes them as an access profile to `path` when the mount ends (whole or not at all).
    /// Needs a sealed image read with verification in this process
    /// ([`MountError::Unrecordable`] otherwise).
    pub fn record_profile(&mut self, path: &Path) -> Result<(), MountError> {
        let path = std::path::absolute(path).map_err(|source| MountError::Profile {
            path: path.to_path_buf(),
            source,
        })?;
        match (&self.verified, &self.digest) {
            (Some(v), Some(d)) => {
                v.record_profile();
                self.record = Some((path, v.clone(), *d));
                Ok(())
            }
            _ => Err(MountError::Unrecordable),
        }
    }

    /// Whether a profile is being recorded.
    pub fn records_profile(&self) -> bool {
        self.record.is_some()
    }

    /// Splits off what writes the profile when the mount has ended, and builds the file system.
    /// Starts the image's background threads: call it in the process that serves. With
    /// `block_signals`, they (and this thread) have the termination signals blocked, for a daemon
    /// whose signal thread takes them.
    pub(crate) fn into_fs(self, log: Logger, block_signals: bool) -> (SealFs, ProfileWriter) {
        let MountImage {
            image,
            verified,
            trust,
            file_digests,
            xattrs,
            warm,
            fill,
            replay,
            prefetch,
            prefetch_order,
            record,
            digest: _,
        } = self;
        if block_signals {
            // A signal delivered to a background thread (the xattr check, the metadata warm-up)
            // would end the daemon without unmounting, where the signal thread unmounts.
            super::sys::block_signals();
        }
        let readahead = verified.clone().filter(|_| warm);
        if let Some(v) = &readahead {
            // `on` waits for the metadata (below); `auto` is armed now.
            v.set_fill(match fill {
                FillMode::On => FillMode::Off,
                other => other,
            });
            let (min, max) = sealfs_reader::OpenOptions::default().readahead_blocks;
            v.start_readahead(min, max);
        }
        // The metadata fetched ahead; its walk answers (`XattrMode::Auto`) the check for xattrs.
        let warm_first = {
            let image = image.clone();
            let verified = readahead.clone();
            let fill = readahead.clone().filter(|_| fill == FillMode::On);
            move || {
                if !warm {
                    return None;
                }
                // The prefetch list first: what a program starting on the mount reads.
                let listed = !prefetch.is_empty() && {
                    // The program reads the listed files from the store: no stream of theirs
                    // fetches past a file's end.
                    if let Some(v) = &verified {
                        v.set_stored_reads_stream(false);
                    }
                    let t = std::time::Instant::now();
                    let r = image.prefetch_paths(&prefetch);
                    eprintln!(
                        "sealfs: prefetch list: {} paths, {} found, {} missing, {} failed; {} \
                         files fetched, {} left out (budget), {} bytes in {} batches, {:.0?}",
                        r.paths,
                        r.found,
                        r.missing,
                        r.failed,
                        r.files,
                        r.over_budget,
                        r.bytes,
                        r.batches,
                        t.elapsed()
                    );
                    r.found > 0
                };
                if let (Some(v), false) = (&verified, listed) {
                    v.set_stored_reads_stream(true);
                }
                let hold = image.metadata_span().is_none()
                    || (listed && prefetch_order == PrefetchOrder::Only);
                if let (Some(v), true) = (&fill, hold) {
                    // No span to fetch in a few requests (its inline tails make it large: the
                    // linux tree's is 155 MB): the walk would fetch most of it, level by level,
                    // while a program starts on the mount; or the list has fetched what the
                    // program reads. It waits with the fill instead.
                    v.fill_when_quiet();
                    v.wait_while_fill_held();
                }
                let any_xattrs = image.warm_metadata(16);
                if let Some(v) = fill {
                    // Once reads leave the link free: a program starting on the mount goes first.
                    v.fill_when_quiet();
                }
                any_xattrs
            }
        };
        if !replay.is_empty() {
            image.prefetch(&replay);
        }
        let fs = if xattrs == XattrMode::Auto {
            SealFs::new(image, verified, trust, log).with_xattrs_after(xattrs, warm_first)
        } else {
            if warm {
                std::thread::spawn(warm_first);
            }
            SealFs::new(image, verified, trust, log).with_xattrs(xattrs)
        };
        let fs = match file_digests {
            Some(digests) => fs.with_file_check(file_check(digests)),
            None => fs,
        };
        (fs, ProfileWriter(record))
    }
}

/// Writes the recorded profile, if any, when the mount has ended.
pub(crate) struct ProfileWriter(Option<(PathBuf, Arc<VerifiedBlocks>, Digest)>);

impl ProfileWriter {
    /// Writes it (whole or not at all: whoever waits for the file never sees half of it).
    pub(crate) fn write(self) -> Result<(), MountError> {
        let Some((path, v, d)) = self.0 else {
            return Ok(());
        };
        let text = sealfs_reader::profile::encode_profile(&d, &v.profile());
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))
            .and_then(|mut f| f.write_all(text.as_bytes()).map(|()| f))
            .and_then(|f| f.persist(&path).map_err(|e| e.error))
            .map(drop)
            .map_err(|source| MountError::Profile { path, source })
    }
}

/// Double verification: a file's content, read through the (verifying) reader, must have the
/// fs-verity digest the seal records for it.
fn file_check(digests: Arc<FileDigests>) -> FileCheck {
    Box::new(move |image, inode| {
        let want = digests
            .get(inode.nid())
            .ok_or("the seal records no digest for this file (double verification)")?;
        let got = image
            .file_digest_by_reading(inode, want.alg())
            .map_err(|e| {
                let e = sealfs_reader::ErrorChain(&e);
                format!("reading it whole to check its digest: {e}")
            })?;
        if &got == want {
            Ok(())
        } else {
            Err(format!(
                "its content has digest {got}, the seal records {want} (double verification)"
            ))
        }
    })
}
