//! FUSE over io_uring (Linux 6.14+; sealfs addition, see SEALFS.md).
//!
//! After the INIT reply has granted `FUSE_OVER_IO_URING`, the daemon registers, for every
//! possible CPU (queue id = CPU), `depth` ring entries with `IORING_OP_URING_CMD` SQEs
//! (`FUSE_IO_URING_CMD_REGISTER`) on a ring of 128-byte SQEs. Each entry is a pair of buffers:
//! a `struct fuse_uring_req_header` (the in/out header, the op's fixed argument, the entry's
//! commit id and payload size) and a payload buffer of the kernel's `max_payload_sz`. Once every
//! queue has an entry the kernel sends requests through the rings instead of `/dev/fuse`
//! (forgets and interrupts still come through `/dev/fuse`). A completion is a request; the reply
//! is written into the same entry and handed back with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`,
//! which also makes the entry available for the next request.
//!
//! Each queue is served by one thread pinned to its CPU. Requests are rebuilt into the
//! contiguous bytes the `/dev/fuse` parser expects (header, the op's fixed argument, payload)
//! and dispatched through the same code as the `/dev/fuse` loop. A reply sent from another
//! thread than the queue's is queued and the queue's thread woken through an eventfd that the
//! ring polls.

use std::fmt;
use std::fs::File;
use std::io;
use std::io::IoSlice;
use std::mem::size_of;
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::sync::mpsc::SyncSender;
use std::sync::mpsc::TrySendError;
use std::thread::ThreadId;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::error;
use log::warn;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::channel::Channel;
use crate::ll::fuse_abi as abi;
use crate::ll::fuse_abi::fuse_opcode as op;
use crate::reply::ReplySender;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// `struct fuse_uring_req_header`: in_out[128], op_in[128], `fuse_uring_ent_in_out` (32 bytes).
const HDR_IN_OUT: usize = 0;
const HDR_OP_IN: usize = 128;
const HDR_ENT_IN_OUT: usize = 256;
const HDR_SIZE: usize = 256 + 32;
/// The user data of the eventfd poll (entries use their index).
const EVENTFD_TAG: u64 = u64::MAX;

/// How a session uses FUSE over io_uring ([`crate::Config::uring`]).
#[derive(Debug, Clone, Default)]
pub struct UringConfig {
    /// Fail the mount when the kernel does not offer it (`false`: fall back to `/dev/fuse`).
    pub required: bool,
    /// Ring entries per queue (0: 8).
    pub queue_depth: usize,
    /// Requests answered through the rings (read by the file system for its statistics).
    pub requests: Arc<AtomicU64>,
}

impl PartialEq for UringConfig {
    fn eq(&self, other: &Self) -> bool {
        self.required == other.required
            && self.queue_depth == other.queue_depth
            && Arc::ptr_eq(&self.requests, &other.requests)
    }
}

impl Eq for UringConfig {}

/// Whether the running kernel offers FUSE over io_uring to new mounts (the `fuse` module's
/// `enable_uring` parameter is on).
pub fn kernel_offers_uring() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .is_ok_and(|s| s.trim() == "Y")
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`, e.g. `0-1` or `0,2-5`): the
/// kernel has one queue per possible CPU and uses the ring only when each has entries.
fn possible_cpus() -> io::Result<usize> {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut max = 0usize;
    for part in s.trim().split(',') {
        let last = part.rsplit('-').next().unwrap_or(part);
        let n: usize = last
            .parse()
            .map_err(|_| io::Error::other(format!("cannot parse possible CPUs {s:?}")))?;
        max = max.max(n + 1);
    }
    Ok(max)
}

/// The size of the fixed argument the kernel puts into `op_in` for an opcode (its first
/// argument; 0 for ops whose arguments are all names or data, which come in the payload). It
/// must be what the `/dev/fuse` parser fetches before the payload's part.
fn op_in_len(opcode: u32) -> usize {
    let Ok(opcode) = op::try_from(opcode) else {
        return 0;
    };
    match opcode {
        op::FUSE_FORGET => size_of::<abi::fuse_forget_in>(),
        op::FUSE_GETATTR => size_of::<abi::fuse_getattr_in>(),
        op::FUSE_SETATTR => size_of::<abi::fuse_setattr_in>(),
        op::FUSE_MKNOD => size_of::<abi::fuse_mknod_in>(),
        op::FUSE_MKDIR => size_of::<abi::fuse_mkdir_in>(),
        op::FUSE_RENAME => size_of::<abi::fuse_rename_in>(),
        op::FUSE_RENAME2 => size_of::<abi::fuse_rename2_in>(),
        op::FUSE_LINK => size_of::<abi::fuse_link_in>(),
        op::FUSE_OPEN | op::FUSE_OPENDIR => size_of::<abi::fuse_open_in>(),
        op::FUSE_CREATE => size_of::<abi::fuse_create_in>(),
        op::FUSE_READ | op::FUSE_READDIR | op::FUSE_READDIRPLUS => {
            size_of::<abi::fuse_read_in>()
        }
        op::FUSE_WRITE => size_of::<abi::fuse_write_in>(),
        op::FUSE_RELEASE | op::FUSE_RELEASEDIR => size_of::<abi::fuse_release_in>(),
        op::FUSE_FSYNC | op::FUSE_FSYNCDIR => size_of::<abi::fuse_fsync_in>(),
        op::FUSE_SETXATTR => size_of::<abi::fuse_setxattr_in>(),
        op::FUSE_GETXATTR | op::FUSE_LISTXATTR => size_of::<abi::fuse_getxattr_in>(),
        op::FUSE_FLUSH => size_of::<abi::fuse_flush_in>(),
        op::FUSE_GETLK | op::FUSE_SETLK | op::FUSE_SETLKW => size_of::<abi::fuse_lk_in>(),
        op::FUSE_ACCESS => size_of::<abi::fuse_access_in>(),
        op::FUSE_INTERRUPT => size_of::<abi::fuse_interrupt_in>(),
        op::FUSE_BMAP => size_of::<abi::fuse_bmap_in>(),
        op::FUSE_IOCTL => size_of::<abi::fuse_ioctl_in>(),
        op::FUSE_POLL => size_of::<abi::fuse_poll_in>(),
        op::FUSE_BATCH_FORGET => size_of::<abi::fuse_batch_forget_in>(),
        op::FUSE_FALLOCATE => size_of::<abi::fuse_fallocate_in>(),
        op::FUSE_LSEEK => size_of::<abi::fuse_lseek_in>(),
        op::FUSE_COPY_FILE_RANGE => size_of::<abi::fuse_copy_file_range_in>(),
        _ => 0,
    }
}

/// Anonymous, page-aligned memory, populated as it is touched.
struct PageBuf {
    ptr: *mut u8,
    len: usize,
}

impl PageBuf {
    fn new(len: usize) -> io::Result<PageBuf> {
        // SAFETY: an anonymous private mapping; checked for failure below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(PageBuf {
            ptr: ptr.cast(),
            len,
        })
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One ring entry's buffers. They are written by the kernel while the entry is registered and
/// waiting, and by the daemon only between a request's completion and its commit (by the one
/// reply of that request), so no two parties touch them at once.
struct Entry {
    idx: usize,
    header: PageBuf,
    payload: PageBuf,
    iov: Box<[libc::iovec; 2]>,
    queue: Arc<QueueShared>,
}

// SAFETY: see `Entry`: access is handed over, never shared.
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

impl Entry {
    fn header(&self) -> &[u8] {
        // SAFETY: HDR_SIZE bytes mapped; see `Entry` for exclusivity.
        unsafe { std::slice::from_raw_parts(self.header.ptr, HDR_SIZE) }
    }
}

/// What a queue's thread shares with replies sent from elsewhere.
struct QueueShared {
    /// Entries whose reply is written and awaits its commit.
    done: Mutex<Vec<usize>>,
    eventfd: File,
    thread: Mutex<Option<ThreadId>>,
}

/// The reply channel of a request that came through a ring.
#[derive(Clone)]
pub(crate) struct UringReply {
    entry: Arc<Entry>,
}

impl fmt::Debug for UringReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UringReply({})", self.entry.idx)
    }
}

impl UringReply {
    /// Writes the reply (a `fuse_out_header` and its payload) into the entry and queues its
    /// commit.
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let e = &self.entry;
        let total: usize = data.iter().map(|s| s.len()).sum();
        let hlen = size_of::<abi::fuse_out_header>();
        if total < hlen {
            return Err(io::Error::other("reply shorter than its header"));
        }
        if total - hlen > e.payload.len {
            // Cannot happen for replies within the negotiated sizes; answer EIO rather than
            // truncate.
            error!("reply of {} bytes exceeds the ring's payload buffer", total);
            let mut h = [0u8; 16];
            h[..data[0].len().min(16)].copy_from_slice(&data[0][..data[0].len().min(16)]);
            h[0..4].copy_from_slice(&(hlen as u32).to_ne_bytes());
            h[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            return self.commit(&[IoSlice::new(&h)], hlen);
        }
        self.commit(data, total)
    }

    /// The entry's payload buffer, for a reply of up to `len` bytes written in place.
    pub(crate) fn payload(&mut self, len: usize) -> Option<&mut [u8]> {
        let e = &self.entry;
        if len > e.payload.len {
            return None;
        }
        // SAFETY: the entry is this request's alone until its reply is committed, and the slice
        // borrows the reply's sender mutably, so it ends before the reply is sent.
        Some(unsafe { std::slice::from_raw_parts_mut(e.payload.ptr, len) })
    }

    /// Sends a reply whose `n` bytes of data are already in the payload buffer.
    pub(crate) fn send_payload(&self, unique: u64, n: usize) -> io::Result<()> {
        let hlen = size_of::<abi::fuse_out_header>();
        let n = n.min(self.entry.payload.len);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((hlen + n) as u32).to_ne_bytes());
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        // SAFETY: the header's first 16 bytes; the entry is this reply's alone.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), self.entry.header.ptr.add(HDR_IN_OUT), 16);
        }
        self.finish(n as u32)
    }

    fn commit(&self, data: &[IoSlice<'_>], total: usize) -> io::Result<()> {
        let e = &self.entry;
        let hlen = size_of::<abi::fuse_out_header>();
        let mut pos = 0usize;
        for s in data {
            let mut s: &[u8] = s;
            while !s.is_empty() {
                // SAFETY: bounds checked against the header's 16 bytes and the payload's length;
                // the entry is this reply's alone until committed.
                unsafe {
                    if pos < hlen {
                        let n = (hlen - pos).min(s.len());
                        std::ptr::copy_nonoverlapping(
                            s.as_ptr(),
                            e.header.ptr.add(HDR_IN_OUT + pos),
                            n,
                        );
                        pos += n;
                        s = &s[n..];
                    } else {
                        let n = s.len();
                        std::ptr::copy_nonoverlapping(s.as_ptr(), e.payload.ptr.add(pos - hlen), n);
                        pos += n;
                        s = &[];
                    }
                }
            }
        }
        self.finish((total - hlen) as u32)
    }

    /// Records the reply's payload size and queues the entry's commit.
    fn finish(&self, payload_sz: u32) -> io::Result<()> {
        let e = &self.entry;
        // SAFETY: ent_in_out.payload_sz at offset 16 of fuse_uring_ent_in_out.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload_sz.to_ne_bytes().as_ptr(),
                e.header.ptr.add(HDR_ENT_IN_OUT + 16),
                4,
            );
        }
        e.queue.done.lock().push(e.idx);
        if *e.queue.thread.lock() != Some(std::thread::current().id()) {
            // Wake the queue's thread: it commits from its own ring.
            (&e.queue.eventfd)
                .write_all_u64()
                .map_err(|err| io::Error::other(format!("eventfd: {err}")))?;
        }
        Ok(())
    }
}

trait EventFdWrite {
    fn write_all_u64(self) -> io::Result<()>;
}

impl EventFdWrite for &File {
    fn write_all_u64(self) -> io::Result<()> {
        use std::io::Write;
        let mut f = self;
        f.write_all(&1u64.to_ne_bytes())
    }
}

/// One queue: its ring and entries, set up and registered, not yet served.
pub(crate) struct Queue {
    qid: usize,
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    entries: Vec<Arc<Entry>>,
    shared: Arc<QueueShared>,
    dev_fd: i32,
    /// Keeps the `/dev/fuse` fd the SQEs name open.
    _ch: Channel,
    /// Requests completed while the queue was being registered.
    pending: Vec<(u64, i32)>,
}

impl fmt::Debug for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Queue({}, {} entries)", self.qid, self.entries.len())
    }
}

// SAFETY: the ring and the entries move to the queue's thread as a whole.
unsafe impl Send for Queue {}

fn cmd_req(qid: usize, commit_id: u64) -> [u8; 80] {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    cmd[16..18].copy_from_slice(&(qid as u16).to_ne_bytes());
    cmd
}

/// An SQE with its `len` field (offset 24 of `struct io_uring_sqe`) set: `UringCmd80` has no
/// setter for it, and the registration needs the iovec count there.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    const _: () = assert!(size_of::<squeue::Entry128>() == 128);
    // SAFETY: Entry128 is `repr(C)`: a 64-byte `io_uring_sqe` and 64 more bytes.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute(raw) }
}

fn eventfd() -> io::Result<File> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd we own.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

impl Queue {
    fn new(qid: usize, depth: usize, payload_sz: usize, ch: &Channel) -> io::Result<Queue> {
        let dev_fd = ch.as_fd().as_raw_fd();
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_cqsize(((depth + 1) * 2) as u32)
            .build((depth + 1) as u32)?;
        let shared = Arc::new(QueueShared {
            done: Mutex::new(Vec::with_capacity(depth)),
            eventfd: eventfd()?,
            thread: Mutex::new(None),
        });
        let mut entries = Vec::with_capacity(depth);
        for idx in 0..depth {
            let header = PageBuf::new(4096)?;
            let payload = PageBuf::new(payload_sz)?;
            let iov = Box::new([
                libc::iovec {
                    iov_base: header.ptr.cast(),
                    iov_len: HDR_SIZE,
                },
                libc::iovec {
                    iov_base: payload.ptr.cast(),
                    iov_len: payload_sz,
                },
            ]);
            entries.push(Arc::new(Entry {
                idx,
                header,
                payload,
                iov,
                queue: shared.clone(),
            }));
        }
        Ok(Queue {
            qid,
            ring,
            entries,
            shared,
            dev_fd,
            _ch: ch.clone(),
            pending: Vec::new(),
        })
    }

    fn push(&mut self, sqe: squeue::Entry128) -> io::Result<()> {
        // SAFETY: every buffer an SQE points at (the entries' iovecs and buffers) lives as long
        // as the queue, which outlives the ring.
        unsafe { self.ring.submission().push(&sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))
    }

    fn register(&mut self, idx: usize) -> io::Result<()> {
        let iov = self.entries[idx].iov.as_ptr() as u64;
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev_fd), CMD_REGISTER)
            .cmd(cmd_req(self.qid, 0))
            .addr(Some(iov))
            .build()
            .user_data(idx as u64);
        self.push(with_len(sqe, 2))
    }

    fn commit(&mut self, idx: usize) -> io::Result<()> {
        let commit_id = u64::from_ne_bytes(
            self.entries[idx].header()[HDR_ENT_IN_OUT + 8..HDR_ENT_IN_OUT + 16]
                .try_into()
                .unwrap(),
        );
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev_fd), CMD_COMMIT_AND_FETCH)
            .cmd(cmd_req(self.qid, commit_id))
            .build()
            .user_data(idx as u64);
        self.push(sqe)
    }

    fn poll_eventfd(&mut self) -> io::Result<()> {
        let sqe: squeue::Entry128 = opcode::PollAdd::new(
            types::Fd(self.shared.eventfd.as_raw_fd()),
            libc::POLLIN as u32,
        )
        .build()
        .user_data(EVENTFD_TAG)
        .into();
        self.push(sqe)
    }

    /// Submits the registrations; fails if the kernel refuses one at once.
    fn start(&mut self) -> io::Result<()> {
        for idx in 0..self.entries.len() {
            self.register(idx)?;
        }
        self.poll_eventfd()?;
        self.ring.submit()?;
        let done: Vec<(u64, i32)> = self
            .ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (tag, res) in done {
            if res < 0 {
                return Err(io::Error::from_raw_os_error(-res));
            }
            // A request already (the last queue's registration made the ring ready).
            self.pending.push((tag, res));
        }
        Ok(())
    }

    /// Serves the queue until the connection ends.
    pub(crate) fn serve<FS: Filesystem>(
        mut self,
        se: SessionEventLoop<FS>,
        requests: Arc<AtomicU64>,
    ) -> io::Result<()> {
        *self.shared.thread.lock() = Some(std::thread::current().id());
        pin_to_cpu(self.qid);
        // Large reads go to helper threads, so that the readahead requests in flight are served
        // at once and this thread stays free to commit their replies as they come.
        let (helper_tx, helper_rx) =
            std::sync::mpsc::sync_channel::<(Vec<u64>, usize, Arc<Entry>)>(self.entries.len());
        let helper_rx = Arc::new(Mutex::new(helper_rx));
        let mut helpers = Vec::new();
        for h in 0..HELPERS {
            let helper_se = SessionEventLoop {
                thread_name: format!("{}-helper{h}", se.thread_name),
                ch: se.ch.clone(),
                filesystem: se.filesystem.clone(),
                allowed: se.allowed,
                session_owner: se.session_owner,
            };
            let rx = helper_rx.clone();
            helpers.push(
                std::thread::Builder::new()
                    .name(format!("fuser-uring-{}h{h}", self.qid))
                    .spawn(move || {
                        loop {
                            let job = rx.lock().recv();
                            let Ok((mut buf, len, entry)) = job else {
                                return;
                            };
                            if let Err(e) = dispatch(&helper_se, &bytes_of(&mut buf)[..len], entry)
                            {
                                error!("FUSE io_uring helper: {e}");
                            }
                        }
                    })?,
            );
        }
        let res = self.serve_loop(&se, &requests, helper_tx);
        // The helper ends with the channel (its last reply, if any, is sent by then), and holds
        // the file system, which the session destroys once every thread has ended.
        for helper in helpers {
            let _ = helper.join();
        }
        res
    }

    fn serve_loop<FS: Filesystem>(
        &mut self,
        se: &SessionEventLoop<FS>,
        requests: &AtomicU64,
        helper_tx: SyncSender<(Vec<u64>, usize, Arc<Entry>)>,
    ) -> io::Result<()> {
        // The contiguous request for the parser: 8-byte aligned as `fuse_in_header` needs.
        let max = size_of::<abi::fuse_in_header>() + 128 + self.entries[0].payload.len;
        let mut buf: Vec<u64> = vec![0; max.div_ceil(8)];
        let mut cqes: Vec<(u64, i32)> = std::mem::take(&mut self.pending);
        let mut first = true;
        loop {
            if !first {
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(e),
                }
                cqes.clear();
            }
            first = false;
            cqes.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data(), c.result())),
            );
            for &(tag, res) in &cqes {
                if tag == EVENTFD_TAG {
                    let mut v = [0u8; 8];
                    let _ = std::io::Read::read(&mut &self.shared.eventfd, &mut v);
                    self.poll_eventfd()?;
                    continue;
                }
                let idx = tag as usize;
                if res < 0 {
                    match -res {
                        libc::EINTR | libc::EAGAIN => {
                            warn!("io_uring entry {idx}: {res}, registering again");
                            self.register(idx)?;
                            continue;
                        }
                        // The connection ended (unmounted or aborted).
                        libc::ENOTCONN | libc::ENODEV | libc::ECANCELED => return Ok(()),
                        e => {
                            return Err(io::Error::other(format!(
                                "FUSE io_uring queue {}: {}",
                                self.qid,
                                io::Error::from_raw_os_error(e)
                            )));
                        }
                    }
                }
                requests.fetch_add(1, Ordering::Relaxed);
                let entry = self.entries[idx].clone();
                let len = rebuild(&entry, bytes_of(&mut buf));
                if is_large_read(&bytes_of(&mut buf)[..len]) {
                    let job = (buf[..len.div_ceil(8)].to_vec(), len, entry);
                    match helper_tx.try_send(job) {
                        Ok(()) => {}
                        // Cannot be full (as many slots as entries); served here if it were.
                        Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                            dispatch(se, &bytes_of(&mut buf)[..job.1], job.2)?;
                        }
                    }
                    continue;
                }
                dispatch(&se, &bytes_of(&mut buf)[..len], entry)?;
            }
            let done: Vec<usize> = std::mem::take(&mut *self.shared.done.lock());
            for idx in done {
                self.commit(idx)?;
            }
        }
    }
}

/// Parses and dispatches a rebuilt request whose reply goes to `entry`.
fn dispatch<FS: Filesystem>(
    se: &SessionEventLoop<FS>,
    data: &[u8],
    entry: Arc<Entry>,
) -> io::Result<()> {
    let sender = ReplySender::Uring(UringReply {
        entry: entry.clone(),
    });
    match RequestWithSender::new(sender, data) {
        Some(req) => req.dispatch(se),
        None => {
            // Unparsable: answer EIO so that the entry comes back.
            let unique = &entry.header()[HDR_IN_OUT + 8..HDR_IN_OUT + 16];
            let mut h = [0u8; 16];
            h[0..4].copy_from_slice(&16u32.to_ne_bytes());
            h[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            h[8..16].copy_from_slice(unique);
            UringReply { entry }.send(&[IoSlice::new(&h)])?;
        }
    }
    Ok(())
}

/// Helper threads per queue serving large reads.
const HELPERS: usize = 2;

/// A `read` of more than 64 KiB (readahead): served by a helper thread.
fn is_large_read(req: &[u8]) -> bool {
    let h = size_of::<abi::fuse_in_header>();
    req.len() >= h + 20
        && u32::from_ne_bytes(req[4..8].try_into().unwrap()) == op::FUSE_READ as u32
        && u32::from_ne_bytes(req[h + 16..h + 20].try_into().unwrap()) > 64 << 10
}

fn bytes_of(buf: &mut [u64]) -> &mut [u8] {
    // SAFETY: u64s viewed as bytes.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast(), buf.len() * 8) }
}

/// Rebuilds a ring request as `/dev/fuse` would have delivered it; returns its length.
fn rebuild(entry: &Entry, out: &mut [u8]) -> usize {
    let h = entry.header();
    let hlen = size_of::<abi::fuse_in_header>();
    let opcode = u32::from_ne_bytes(h[HDR_IN_OUT + 4..HDR_IN_OUT + 8].try_into().unwrap());
    let payload_sz = u32::from_ne_bytes(
        h[HDR_ENT_IN_OUT + 16..HDR_ENT_IN_OUT + 20]
            .try_into()
            .unwrap(),
    ) as usize;
    let payload_sz = payload_sz.min(entry.payload.len);
    let oplen = op_in_len(opcode);
    let total = hlen + oplen + payload_sz;
    out[..hlen].copy_from_slice(&h[HDR_IN_OUT..HDR_IN_OUT + hlen]);
    out[..4].copy_from_slice(&(total as u32).to_ne_bytes());
    out[hlen..hlen + oplen].copy_from_slice(&h[HDR_OP_IN..HDR_OP_IN + oplen]);
    // SAFETY: payload_sz bytes of the payload buffer, written by the kernel for this request.
    let payload = unsafe { std::slice::from_raw_parts(entry.payload.ptr, payload_sz) };
    out[hlen + oplen..total].copy_from_slice(payload);
    total
}

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t and the libc macros on it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            warn!(
                "cannot pin FUSE io_uring queue {cpu}: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// Sets up and registers one queue per possible CPU on the session's `/dev/fuse` fd. Called
/// after the INIT reply that granted `FUSE_OVER_IO_URING`.
pub(crate) fn start_queues(
    ch: &Channel,
    depth: usize,
    payload_sz: usize,
) -> io::Result<Vec<Queue>> {
    let n = possible_cpus()?;
    let mut queues = Vec::with_capacity(n);
    for qid in 0..n {
        let mut q = Queue::new(qid, depth.max(1), payload_sz, ch)?;
        q.start().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("registering FUSE io_uring queue {qid} of {n}: {e}"),
            )
        })?;
        queues.push(q);
    }
    Ok(queues)
}
