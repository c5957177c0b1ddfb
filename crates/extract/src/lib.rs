//! Extraction: write a sealfs image's tree (or a subtree) into a directory of the host, everything
//! the kernel shows of it: data with holes kept, directories, symlinks, hard links, devices, FIFOs
//! and sockets, modes (setuid, setgid, sticky), owners, mtimes with nanoseconds and xattrs (POSIX
//! ACLs included).
//!
//! This is its own crate because it writes to the host file system: the reader
//! ([`sealfs_reader`]) only reads, and can be audited without any of this. The entry point is
//! [`extract`]; it reports through typed values and prints nothing: an [`ExtractError`] when it
//! could not start, otherwise a [`Summary`] with what was made, what was not restored
//! ([`Warning`]s) and what failed ([`ExtractError`]s), and progress through the caller's
//! [`ExtractProgress`].
//!
//! # Never outside DEST
//!
//! The image is untrusted input. Every file is created with a `*at()` call relative to a directory
//! descriptor this crate opened itself, `O_DIRECTORY | O_NOFOLLOW`, one component at a time from
//! DEST; nothing is ever opened by a path string under DEST, and no symlink is followed (files are
//! opened `O_NOFOLLOW`, xattrs of symlinks and special files are set through `/proc/self/fd/N/name`
//! with `lsetxattr`, the mode of special files through the `/proc/self/fd/N` link of an
//! `O_PATH | O_NOFOLLOW` descriptor). Dirents named "." and ".." are skipped; other names that are
//! empty, "." or "..", or contain '/' or NUL are refused, as are directories reached twice
//! (cycles). So a name or a symlink in the image, or a symlink already in DEST (with
//! [`ExtractOptions::overwrite`] it is replaced, not followed), cannot make a write land outside
//! DEST. The system calls go through `rustix`; this crate has no `unsafe` code.
//!
//! # Phases
//!
//! 0. Plan: walk the image (nothing is written yet), check every name, find hard links.
//! 1. Tree (serial, depth first with a stack of open directories): directories (mode 0700 for now),
//!    symlinks and special files, with their metadata. Directory descriptors stay open for the
//!    later phases, as many as the descriptor limit allows (the rest are reopened from DEST).
//! 2. Data (parallel, rayon): each regular file is created (`O_EXCL`, with its permission bits),
//!    its mapped extents are read and written at their offsets, holes are skipped (the file is sized
//!    afterwards, so they stay holes; in a file the image stores with holes, whole zero blocks stay
//!    holes too); then owner, mode, xattrs (after chown, which clears file capabilities) and times.
//!    The chown is left out when the new file already has the owner the image wants (created by
//!    this process in a directory of its group), the chmod when it has the mode (no setuid, setgid
//!    or sticky bit, nothing taken by the umask, no default ACL on DEST, no `overwrite`).
//!    Hard links follow, in order, once their first names exist.
//! 3. Directories, bottom-up: owner, mode, xattrs (a default ACL set last cannot leak into children)
//!    and times, after their contents.
//!
//! The result does not depend on the thread count. A file whose data cannot be read (corruption,
//! verification failure: an error for which [`ExtractError::is_image_fault`] holds) is removed, and
//! its other names are not made; both are reported: no wrong bytes are left.
//!
//! # Outcomes
//!
//! [`Summary::outcome`] sums a run up as an [`Outcome`]; the `sealfs extract` command turns it into
//! its exit code: 0 [`Outcome::Complete`], 1 [`Outcome::ImageFault`], 2 [`Outcome::LocalError`],
//! and 3 [`Outcome::NotRestored`]: everything was extracted, but the destination refused something
//! the image carries (an xattr: a 60 KB value on ext4 without `ea_inode`; fs-verity on a file
//! system without it, [`ExtractOptions::fsverity`]), the way `rsync` exits 23 for a partial
//! transfer. What an unprivileged process may not do at all (owners, devices,
//! `trusted.*`/`security.*` xattrs) is counted and warned about, but leaves the run complete, as
//! `tar` and `rsync` treat it.

#![forbid(unsafe_code)]

mod error;
mod phases;
mod plan;
mod sys;

pub use error::{ExtractError, Warning};

use phases::Ctx;
use sealfs_reader::{FileType, Follow, Image};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Bytes read from the image and written per step.
const CHUNK: usize = 1 << 20;
/// Inodes whose metadata blocks are read together (see [`Image::prefetch_inodes`]).
const INODE_BATCH: usize = 32;
/// Deepest directory nesting extracted (each level holds a descriptor while its subtree is created).
const MAX_DEPTH: u32 = 1024;

/// How to extract.
#[derive(Clone, Debug)]
pub struct ExtractOptions {
    /// Extract into a non-empty destination: existing entries are replaced (symlinks are removed,
    /// never followed), existing directories are merged.
    pub overwrite: bool,
    /// Extract extended attributes.
    pub xattrs: bool,
    /// Worker threads writing file data; 0 runs on the current rayon pool. The result does not
    /// depend on it.
    pub threads: usize,
    /// Turn the kernel's fs-verity on for every regular file written, and check that the digest
    /// the kernel then measures is the one the image vouches for ([`Fsverity`]): the extracted
    /// tree stays verified by the kernel after extraction, as composefs's object store is. A file
    /// the destination cannot protect (no fs-verity there) or whose measured digest differs is
    /// counted ([`Summary::verity_refused`], [`Summary::verity_mismatch`]) and warned about: not
    /// restored ([`Outcome::NotRestored`]).
    pub fsverity: Option<Fsverity>,
}

impl Default for ExtractOptions {
    /// No overwrite, xattrs extracted, the current rayon pool, no fs-verity.
    fn default() -> Self {
        ExtractOptions {
            overwrite: false,
            xattrs: true,
            threads: 0,
            fsverity: None,
        }
    }
}

/// What the fs-verity digest of each extracted file must be ([`ExtractOptions::fsverity`]). Only
/// digests the image digest covers may be given: a digest taken from an older seal's trailer
/// vouches for nothing.
#[derive(Clone, Debug)]
pub enum Fsverity {
    /// The image's own per-file digest table ([`sealfs_reader::DigestOrigin::Image`], by nid).
    Recorded(std::sync::Arc<sealfs_reader::FileDigests>),
    /// Computed from each file's verified content as it is extracted, with this algorithm (images
    /// that record no table of their own: each file is read from the image a second time).
    FromContent(sealfs_reader::HashAlg),
}

/// A progress hook that shows nothing.
pub use sealfs_reader::check::NoProgress;
/// Progress of an extraction: one step (`"extracting"`, the file data) whose total is the bytes of
/// the regular files to write; `advance` is called from worker threads. The reader's read-side
/// progress hook, shared with whole-image checking.
pub use sealfs_reader::check::Progress as ExtractProgress;

/// What an extraction did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct Summary {
    /// Regular files created (first names).
    pub files: u64,
    /// Directories created or merged into (DEST itself not counted).
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Devices, FIFOs and sockets created.
    pub special: u64,
    /// Further names of inodes created (hard links).
    pub hard_links: u64,
    /// Bytes of file data written.
    pub bytes: u64,
    /// Regular files removed again because their data could not be read from the image.
    pub removed: u64,
    /// Xattrs the destination refused: not restored ([`Outcome::NotRestored`]).
    pub xattrs_refused: u64,
    /// `trusted.*`/`security.*` xattrs not set because this process is not root.
    pub xattrs_need_root: u64,
    /// Regular files with the kernel's fs-verity turned on and their measured digest checked
    /// ([`ExtractOptions::fsverity`]).
    pub verity_enabled: u64,
    /// Regular files fs-verity could not be turned on for (the destination file system has none,
    /// or refused): not restored.
    pub verity_refused: u64,
    /// Regular files whose digest, as the kernel measured it, differs from the one the image
    /// vouches for: not restored.
    pub verity_mismatch: u64,
    /// Devices not created because this process is not root.
    pub devices_need_root: u64,
    /// What was not extracted as the image has it, in no fixed order except that
    /// [`Warning::XattrsNeedRoot`] comes last.
    pub warnings: Vec<Warning>,
    /// What failed; extraction went on after each.
    pub errors: Vec<ExtractError>,
}

/// How an extraction ended, worst first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Errors, at least one of them local (the destination's).
    LocalError,
    /// Errors, all of them the image's fault ([`ExtractError::is_image_fault`]).
    ImageFault,
    /// No error, but the destination refused something the image carries
    /// ([`Summary::not_restored`]).
    NotRestored,
    /// Everything extracted, except what only root may restore when not root (warned about).
    Complete,
}

impl Summary {
    /// How many things the destination refused to take (the count behind
    /// [`Outcome::NotRestored`]).
    pub fn not_restored(&self) -> u64 {
        self.xattrs_refused + self.verity_refused + self.verity_mismatch
    }

    /// How the extraction ended.
    pub fn outcome(&self) -> Outcome {
        if self.errors.iter().any(|e| !e.is_image_fault()) {
            Outcome::LocalError
        } else if !self.errors.is_empty() {
            Outcome::ImageFault
        } else if self.not_restored() > 0 {
            Outcome::NotRestored
        } else {
            Outcome::Complete
        }
    }
}

/// Extracts `path` of `image` (default: the root; resolved as the kernel does, symlinks followed in
/// its parents only) into the directory `dest`, which is created if missing and must be empty
/// unless [`ExtractOptions::overwrite`]. A directory's contents go into `dest`, which takes the
/// directory's mode, owner, times and xattrs; anything else becomes `dest/NAME`.
///
/// Returns `Err` if extraction could not start (the path cannot be resolved, its directory not read,
/// `dest` not opened or not empty, the worker threads not started); nothing was written then.
/// Otherwise the [`Summary`] holds what was made and every error and warning met on the way.
pub fn extract(
    image: &Image,
    path: Option<&[u8]>,
    dest: &Path,
    opts: &ExtractOptions,
    progress: &dyn ExtractProgress,
) -> Result<Summary, ExtractError> {
    if opts.threads > 0 {
        rayon::ThreadPoolBuilder::new()
            .num_threads(opts.threads)
            .build()
            .map_err(ExtractError::Threads)?
            .install(|| run(image, path, dest, opts, progress))
    } else {
        run(image, path, dest, opts, progress)
    }
}

/// [`extract`], on the thread pool it chose.
fn run(
    img: &Image,
    path: Option<&[u8]>,
    dest: &Path,
    opts: &ExtractOptions,
    progress: &dyn ExtractProgress,
) -> Result<Summary, ExtractError> {
    let path = path.unwrap_or(b"/");
    let top = img
        .resolve(path, Follow::Parents)
        .map_err(|e| ExtractError::image(show(path), e))?;

    let nofile = sys::raise_nofile();
    let max_depth = MAX_DEPTH.min(nofile.saturating_sub(256).max(16) as u32);
    let mut errors = Vec::new();
    let nodes = plan::plan(img, top, path, max_depth, &mut errors)?;

    let dest_fd = open_dest(dest, opts.overwrite)?;
    // A default ACL on DEST would give what is created below it other permission bits than asked.
    let dest_acl = sys::has_xattr(dest_fd.as_fd(), c"system.posix_acl_default");
    let owner = sys::effective_owner();
    let ctx = Ctx {
        img,
        nodes,
        dest: dest_fd,
        dest_path: dest.to_path_buf(),
        overwrite: opts.overwrite,
        xattrs: opts.xattrs,
        root: owner.0 == 0,
        owner,
        umask: sys::umask(),
        chmod_always: opts.overwrite || dest_acl,
        errors: Mutex::new(errors),
        warnings: Mutex::new(Vec::new()),
        skipped_xattrs: AtomicU64::new(0),
        refused_xattrs: AtomicU64::new(0),
        skipped_devices: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        fsverity: opts.fsverity.clone(),
        verity: Default::default(),
    };

    let threads = rayon::current_num_threads();
    // Directory descriptors kept open from phase 1 on: what the limit leaves after the deepest
    // stack of open directories and a few descriptors per worker.
    let keep = nofile.saturating_sub(512 + max_depth as u64 + 4 * threads as u64) as usize;
    let mut tree = phases::make_tree(&ctx, keep);
    let total: u64 = ctx
        .nodes
        .iter()
        .filter(|n| n.link_of.is_none() && n.inode.is_file())
        .filter(|n| n.parent.is_none_or(|p| tree.created[p]))
        .map(|n| n.inode.size())
        .sum();
    progress.begin("extracting", Some(total));
    let removed = phases::write_data(&ctx, &mut tree, progress);
    progress.end();
    phases::make_links(&ctx, &mut tree, &removed);
    phases::finish_dirs(&ctx, &tree);

    let mut s = Summary {
        removed: removed.len() as u64,
        ..Summary::default()
    };
    for (i, n) in ctx.nodes.iter().enumerate() {
        if !tree.created[i] || n.is_dest() {
            continue;
        }
        let count = if n.link_of.is_some() {
            &mut s.hard_links
        } else {
            match n.inode.file_type() {
                FileType::Directory => &mut s.dirs,
                FileType::Regular => &mut s.files,
                FileType::Symlink => &mut s.symlinks,
                _ => &mut s.special,
            }
        };
        *count += 1;
    }
    s.bytes = ctx.bytes.load(Ordering::Relaxed);
    s.xattrs_refused = ctx.refused_xattrs.load(Ordering::Relaxed);
    s.xattrs_need_root = ctx.skipped_xattrs.load(Ordering::Relaxed);
    s.devices_need_root = ctx.skipped_devices.load(Ordering::Relaxed);
    let [enabled, refused, mismatch] = &ctx.verity;
    s.verity_enabled = enabled.load(Ordering::Relaxed);
    s.verity_refused = refused.load(Ordering::Relaxed);
    s.verity_mismatch = mismatch.load(Ordering::Relaxed);
    s.warnings = ctx.warnings.into_inner().unwrap();
    if s.xattrs_need_root > 0 {
        s.warnings.push(Warning::XattrsNeedRoot {
            count: s.xattrs_need_root,
        });
    }
    s.errors = ctx.errors.into_inner().unwrap();
    Ok(s)
}

/// Opens (creating it if missing) the destination directory; it must be empty unless `overwrite`.
fn open_dest(dest: &Path, overwrite: bool) -> Result<OwnedFd, ExtractError> {
    let at = |what: &'static str| {
        let d = show(std::os::unix::ffi::OsStrExt::as_bytes(dest.as_os_str()));
        move |e| ExtractError::local(format!("{d}{what}"), e)
    };
    match std::fs::symlink_metadata(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dest).map_err(at(": create"))?
        }
        Err(e) => return Err(at("")(e)),
        Ok(_) => {}
    }
    if std::os::unix::ffi::OsStrExt::as_bytes(dest.as_os_str()).contains(&0) {
        return Err(ExtractError::Invalid(format!(
            "{}: NUL in the path",
            show(std::os::unix::ffi::OsStrExt::as_bytes(dest.as_os_str()))
        )));
    }
    let fd = sys::open_dir_path(dest).map_err(at(": open as a directory"))?;
    if !overwrite {
        let mut entries = std::fs::read_dir(dest).map_err(at(": read"))?;
        if entries.next().is_some() {
            return Err(ExtractError::DestNotEmpty(dest.to_path_buf()));
        }
    }
    Ok(fd)
}

pub(crate) use sealfs_reader::show_path as show;

/// `path` joined with `name` (no doubled '/').
pub(crate) fn join(path: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = path.to_vec();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;
    use std::io;

    fn image_error() -> ExtractError {
        ExtractError::image(
            "/big: read at byte 0",
            sealfs_reader::Error::NotFound("/big".into()),
        )
    }

    fn local_error() -> ExtractError {
        ExtractError::local("out/big: write", io::Error::from_raw_os_error(28))
    }

    /// The full message of an error as the CLI prints it: its context, then its causes.
    fn chain(e: &ExtractError) -> String {
        let mut s = e.to_string();
        let mut cause = e.source();
        while let Some(c) = cause {
            s.push_str(": ");
            s.push_str(&c.to_string());
            cause = c.source();
        }
        s
    }

    #[test]
    fn unsafe_names_are_refused() {
        for name in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b", b"../x"] {
            assert!(plan::unsafe_name(name).is_some(), "{:?}", show(name));
        }
        for name in [
            &b"a"[..],
            b"...",
            b".a",
            b"..a",
            b"a b",
            b"\xff",
            &[b'n'; 255],
        ] {
            assert!(plan::unsafe_name(name).is_none(), "{:?}", show(name));
        }
    }

    #[test]
    fn which_errors_are_the_images_fault() {
        assert!(image_error().is_image_fault());
        assert!(ExtractError::Refused("x: a name containing '/'".into()).is_image_fault());
        assert!(!local_error().is_image_fault());
        assert!(!ExtractError::DestNotEmpty("out".into()).is_image_fault());
        assert!(!ExtractError::Invalid("x".into()).is_image_fault());
    }

    #[test]
    fn errors_name_where_and_keep_their_cause() {
        assert_eq!(
            chain(&image_error()),
            "/big: read at byte 0: not found: /big"
        );
        assert_eq!(
            chain(&local_error()),
            format!("out/big: write: {}", io::Error::from_raw_os_error(28))
        );
        assert_eq!(
            chain(&ExtractError::DestNotEmpty("some/dir".into())),
            "some/dir: not empty"
        );
    }

    #[test]
    fn outcomes_rank_local_errors_then_image_faults_then_refusals() {
        let mut s = Summary::default();
        assert_eq!(s.outcome(), Outcome::Complete);
        // What only root may do is no refusal.
        s.xattrs_need_root = 3;
        s.devices_need_root = 1;
        assert_eq!(s.outcome(), Outcome::Complete);
        s.xattrs_refused = 1;
        assert_eq!(s.not_restored(), 1);
        assert_eq!(s.outcome(), Outcome::NotRestored);
        s.errors.push(image_error());
        assert_eq!(s.outcome(), Outcome::ImageFault);
        s.errors.push(local_error());
        assert_eq!(s.outcome(), Outcome::LocalError);
        s.errors.remove(0);
        assert_eq!(s.outcome(), Outcome::LocalError);
    }

    #[test]
    fn warnings_read_as_before() {
        let w = Warning::XattrNotSet {
            path: "out/f".into(),
            name: b"user.big".to_vec(),
            error: io::Error::from_raw_os_error(28),
        };
        assert_eq!(
            w.to_string(),
            format!(
                "out/f: xattr user.big not set: {}",
                io::Error::from_raw_os_error(28)
            )
        );
        let w = Warning::DeviceNeedsRoot {
            path: "out/null".into(),
            file_type: FileType::CharDevice,
            major: 1,
            minor: 3,
        };
        assert_eq!(
            w.to_string(),
            "out/null: character special file 1:3 not created: only root can make devices"
        );
        assert_eq!(
            Warning::Removed {
                path: "out/b".into()
            }
            .to_string(),
            "out/b: removed: its data could not be read from the image"
        );
        assert_eq!(
            Warning::NotLinked {
                path: "out/l".into(),
                first: "out/f".into()
            }
            .to_string(),
            "out/l: not linked: its first name out/f was not created"
        );
        assert_eq!(
            Warning::XattrsNeedRoot { count: 2 }.to_string(),
            "2 trusted.*/security.* xattrs not set: only root may set them"
        );
    }

    #[test]
    fn the_destination_is_created_and_must_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("a/b");
        open_dest(&dest, false).expect("a missing destination is created");
        assert!(dest.is_dir());
        std::fs::write(dest.join("x"), b"x").unwrap();
        match open_dest(&dest, false) {
            Err(ExtractError::DestNotEmpty(p)) => assert_eq!(p, dest),
            other => panic!("{other:?}"),
        }
        open_dest(&dest, true).expect("overwrite takes a non-empty destination");
        match open_dest(&dest.join("x"), true) {
            Err(e @ ExtractError::Local { .. }) => {
                assert!(e.to_string().ends_with("x: open as a directory"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn names_join_without_doubled_slashes() {
        assert_eq!(join(b"/", b"a"), b"/a");
        assert_eq!(join(b"/a", b"b"), b"/a/b");
        assert_eq!(join(b"/a/", b"b"), b"/a/b");
        assert_eq!(show(b"a\xffb\n"), "a\\377b\\n");
    }
}
