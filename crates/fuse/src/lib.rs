//! A read-only FUSE filesystem over the sealfs reader ([`sealfs_reader::Image`]).
//!
//! # What a process sees
//!
//! The same as on a kernel EROFS mount of the image: inode numbers are nids (hard links share one),
//! `st_blocks`, `st_blksize`, nanosecond times (atime = ctime = mtime), device numbers, directory
//! entries in on-disk order with their types and `d_ino`, symlink targets, xattrs (`trusted.*` listed
//! only to root, as the kernel lists it only to `CAP_SYS_ADMIN`), POSIX ACLs enforced by the kernel
//! (`FUSE_POSIX_ACL` with `default_permissions`), and `statfs` figures as `erofs_statfs` gives them.
//! FUSE reserves node id 1 for the root; see [`NodeMap`] for how nids map to node ids.
//!
//! # Speed
//!
//! An image never changes while mounted, so everything the kernel may cache it keeps for a long
//! time: entries (negative ones too), attributes, symlink targets (`FUSE_CACHE_SYMLINKS`), page
//! cache across opens and directory contents (`open`/`opendir` answered `ENOSYS`, which the kernel
//! takes as "no handles needed, keep the cache": no round trips per open at all). Reads are
//! as large as the kernel allows; `readdirplus` answers `ls -l` without a lookup per entry. The
//! reader below verifies every block against the seal (hash blocks fetched in the same batch as the
//! data, verified ones cached), so no byte reaches a process unverified.
//!
//! # Failures
//!
//! A reader error becomes the errno the kernel would return ([`sealfs_reader::Error::errno`]): EIO
//! for a block that fails verification, EUCLEAN for corrupted metadata. Each distinct failure is
//! logged once, with a path of the inode (found by walking the tree when the failure is logged; nothing
//! is kept per inode) and the block; other files keep working.
//!
//! # Statistics
//!
//! [`STATS_IOCTL`] on any directory or file of the mount returns the counters as JSON (`sealfs
//! stats MOUNTPOINT`), among them where `read` requests' time goes (`data_path`: requests,
//! bytes, seconds in the reader, of which fetching, hashing and decoding, and in replies).
//!
//! # Mounting
//!
//! [`mount`] mounts an opened image with [`SealFs`] and owns the mount's lifecycle: in-process
//! ([`mount::mount`], a handle that unmounts and joins when dropped, for a service such as the
//! containerd snapshotter), served in the calling thread until unmounted or signalled
//! ([`mount::serve`]) or by a daemon ([`mount::daemonize`]), as `sealfs mount` does; unmounting,
//! stale mount points and the statistics query beside them.

mod attr;
mod failures;
mod inodes;
pub mod mount;
mod nodes;
mod ops;
mod stats;
mod xattrs;

pub use attr::new_encode_dev;
use attr::{fuse_type, system_time};
use failures::FailureLog;
use inodes::InodeCache;
pub use inodes::INODE_CACHE_ENTRIES;
pub use nodes::NodeMap;
use stats::Counters;
pub use xattrs::XattrMode;
use xattrs::XattrState;

use fuser::{Errno, FileAttr, INodeNo};
use sealfs_reader::{DirEntry, Image, Inode, VerifiedBlocks};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Entries whose inodes one `readdirplus` reads ahead (from its offset): what a large reply holds
/// (a `fuse_direntplus` takes 152 bytes before the name), so that each reply's prefetch stays bounded
/// however large the directory.
pub(crate) const READDIRPLUS_PREFETCH: usize = 1024;

/// How long the kernel may keep entries and attributes: the image is immutable.
pub const TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// `_IOR('S', 1, char[16383])`: the ioctl that returns the mount's statistics as JSON (NUL-padded).
pub const STATS_IOCTL: u32 = (2 << 30) | ((STATS_IOCTL_SIZE as u32) << 16) | (b'S' as u32) << 8 | 1;
/// Bytes the statistics ioctl copies out (the largest size an ioctl number can encode).
pub const STATS_IOCTL_SIZE: usize = (1 << 14) - 1;

/// Distinct failures logged before the rest are only counted.
const MAX_LOGGED: usize = 1000;

/// Where log lines go (stderr in the foreground, syslog for a daemon).
pub type Logger = Box<dyn Fn(&str) + Send + Sync>;

/// A second check of a whole regular file ("double" verification): `Ok` if the file's content, read
/// through the image, has the digest recorded for it; `Err` says what differs.
pub type FileCheck = Box<dyn Fn(&Image, &Inode) -> Result<(), String> + Send + Sync>;

/// The outcome of a file's [`FileCheck`], computed once by the first read that needs it (concurrent
/// readers wait for it).
type CheckOnce = Arc<std::sync::OnceLock<Result<(), Errno>>>;

/// The mounted image.
pub struct SealFs {
    image: Arc<Image>,
    verified: Option<Arc<VerifiedBlocks>>,
    nodes: NodeMap,
    /// How reads are checked, for the statistics ("sha256:… (self-consistent)", "none", …).
    trust: String,
    /// The directories listed most recently, decoded: the kernel asks for a large directory in
    /// several `readdir` requests, and keeps what it got (`FOPEN_CACHE_DIR`), so a few suffice.
    listings: Mutex<VecDeque<(u64, Arc<Vec<DirEntry>>)>>,
    /// Decoded inodes (an inode's metadata block may hold many inline tails, so the block cache
    /// alone does not keep a large tree's inodes).
    inodes: InodeCache,
    logged: Mutex<HashSet<String>>,
    failures: FailureLog,
    /// Double verification: each regular file is checked whole by this before its first read.
    file_check: Option<FileCheck>,
    /// The outcome of that check per nid (at most one entry per regular file of the image).
    checked: Mutex<HashMap<u64, CheckOnce>>,
    counters: Counters,
    started: std::time::Instant,
    /// How extended attribute requests are answered now (an [`XattrState`] as a `u8`).
    xattrs: Arc<AtomicU8>,
    /// Why the check for extended attributes could not read the image whole, if it could not.
    xattrs_unread: Arc<Mutex<Option<String>>>,
    /// Requests answered through FUSE over io_uring, when the mount asked for it (counted by the
    /// session's ring threads).
    ring_requests: Option<Arc<std::sync::atomic::AtomicU64>>,
}

/// Decoded directories kept for `readdir` requests that continue a listing.
const LISTINGS: usize = 16;

thread_local! {
    pub(crate) static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl SealFs {
    /// A filesystem serving `image`. `verified` is the verifying block source under it, if reads are
    /// verified here (for its statistics); `trust` says what reads are checked against.
    pub fn new(
        image: Arc<Image>,
        verified: Option<Arc<VerifiedBlocks>>,
        trust: String,
        log: Logger,
    ) -> SealFs {
        let nodes = NodeMap::new(image.root_nid(), image.superblock().metabox_nid.is_some());
        SealFs {
            image,
            verified,
            nodes,
            trust,
            listings: Mutex::new(VecDeque::new()),
            inodes: InodeCache::new(INODE_CACHE_ENTRIES),
            logged: Mutex::new(HashSet::new()),
            failures: FailureLog::new(log),
            file_check: None,
            checked: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            started: std::time::Instant::now(),
            xattrs: Arc::new(AtomicU8::new(XattrState::Answered as u8)),
            xattrs_unread: Arc::new(Mutex::new(None)),
            ring_requests: None,
        }
    }

    /// The counter of requests answered through io_uring rings (see
    /// [`mount::Transport`]), for the statistics.
    pub(crate) fn set_ring_counter(&mut self, counter: Option<Arc<std::sync::atomic::AtomicU64>>) {
        self.ring_requests = counter;
    }

    /// Checks every regular file whole with `check` before the first read of it is answered
    /// ("double" verification: the image tree verifies each block, and the file's own digest is
    /// checked too). A file that fails gives EIO to every read.
    pub fn with_file_check(mut self, check: FileCheck) -> SealFs {
        self.file_check = Some(check);
        self
    }

    /// Runs the file check of `inode` once (see [`SealFs::with_file_check`]).
    fn check_file(&self, inode: &Inode) -> Result<(), Errno> {
        let Some(check) = &self.file_check else {
            return Ok(());
        };
        let nid = inode.nid();
        let once = self
            .checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(nid)
            .or_default()
            .clone();
        *once.get_or_init(|| {
            self.counters.files_checked.fetch_add(1, Ordering::Relaxed);
            check(&self.image, inode).map_err(|why| {
                self.counters
                    .file_check_failures
                    .fetch_add(1, Ordering::Relaxed);
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
                self.failures
                    .push(&self.image, self.nodes.root_nid, nid, why);
                Errno::EIO
            })
        })
    }

    /// Turns a reader error about `nid` into an errno, logging it once.
    fn fail(&self, nid: u64, e: sealfs_reader::Error) -> Errno {
        let code = e.errno();
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        if matches!(e, sealfs_reader::Error::Verification { .. }) {
            self.counters
                .verification_errors
                .fetch_add(1, Ordering::Relaxed);
        }
        // Absent names and the like are answers, not failures worth a log line.
        if !matches!(
            e,
            sealfs_reader::Error::NotFound(_)
                | sealfs_reader::Error::NotADirectory(_)
                | sealfs_reader::Error::NameTooLong(_)
        ) {
            let text = sealfs_reader::ErrorChain(&e).to_string();
            let key = format!("nid {nid}: {text}");
            let new = {
                let mut logged = self.logged.lock().unwrap_or_else(|e| e.into_inner());
                logged.len() < MAX_LOGGED && logged.insert(key)
            };
            if new {
                self.failures
                    .push(&self.image, self.nodes.root_nid, nid, text);
            }
        }
        Errno::from_i32(code)
    }

    fn inode(&self, nid: u64) -> Result<Arc<Inode>, Errno> {
        if let Some(i) = self.inodes.get(nid) {
            return Ok(i);
        }
        let inode = Arc::new(self.image.inode(nid).map_err(|e| self.fail(nid, e))?);
        self.inodes.insert(nid, inode.clone());
        Ok(inode)
    }

    /// What `stat` shows for `inode`, under node id `node`.
    fn attr(&self, inode: &Inode, ino: u64) -> FileAttr {
        let st = inode.stat();
        let time = system_time(st.mtime, st.mtime_nsec);
        FileAttr {
            ino: INodeNo(ino),
            size: st.size,
            blocks: st.blocks,
            atime: time,
            mtime: time,
            ctime: time,
            crtime: time,
            kind: fuse_type(inode.file_type()),
            perm: (st.mode & 0o7777) as u16,
            nlink: st.nlink,
            uid: st.uid,
            gid: st.gid,
            rdev: new_encode_dev(st.rdev_major, st.rdev_minor),
            blksize: st.blksize,
            flags: 0,
        }
    }
}

impl SealFs {
    /// The entries of open directory `fh`, read on first use.
    /// The entries of directory `nid`, decoded once for the requests of one listing.
    fn listing(&self, nid: u64) -> Result<Arc<Vec<DirEntry>>, Errno> {
        let recent = |l: &VecDeque<(u64, Arc<Vec<DirEntry>>)>| {
            l.iter().find(|(n, _)| *n == nid).map(|(_, e)| e.clone())
        };
        if let Some(entries) = recent(&self.listings.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(entries);
        }
        let entries = self
            .inode(nid)
            .and_then(|dir| self.image.read_dir_all(&dir).map_err(|e| self.fail(nid, e)))
            .map(Arc::new)?;
        let mut listings = self.listings.lock().unwrap_or_else(|e| e.into_inner());
        if recent(&listings).is_none() {
            if listings.len() >= LISTINGS {
                listings.pop_front();
            }
            listings.push_back((nid, entries.clone()));
        }
        Ok(entries)
    }
}
