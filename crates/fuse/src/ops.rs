//! The FUSE requests: each a short translation into reader calls ([`fuser::Filesystem`]).

use crate::attr::{bare_attr, dirent_type, reply_xattr};
use crate::{SealFs, READDIRPLUS_PREFETCH, READ_BUF, STATS_IOCTL, STATS_IOCTL_SIZE, TTL};
use fuser::{
    Errno, FileHandle, FileType as FuseType, Filesystem, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Filesystem for SealFs {
    fn destroy(&mut self) {
        self.failures.drain();
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_POSIX_ACL
            | InitFlags::FUSE_ASYNC_READ
            | InitFlags::FUSE_MAX_PAGES;
        let offered = config.capabilities();
        let _ = config.add_capabilities(wanted & offered);
        // As much readahead as the kernel offers; reads then come in large requests.
        let _ = config
            .set_max_readahead(u32::MAX)
            .or_else(|max| config.set_max_readahead(max));
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.counters.lookups.fetch_add(1, Ordering::Relaxed);
        let pnid = self.nodes.nid(parent.0);
        let result = (|| {
            let dir = self.inode(pnid)?;
            let entry = self
                .image
                .lookup(&dir, name.as_bytes())
                .map_err(|e| self.fail(pnid, e))?;
            let Some(entry) = entry else { return Ok(None) };
            let inode = self.inode(entry.nid)?;
            Ok(Some(inode))
        })();
        match result {
            Ok(Some(inode)) => {
                let attr = self.attr(&inode, self.nodes.node(inode.nid()));
                reply.entry(&TTL, &attr, Generation(0));
            }
            Ok(None) => {
                // A negative entry (node id 0) the kernel caches as long as any other.
                self.counters
                    .negative_lookups
                    .fetch_add(1, Ordering::Relaxed);
                reply.entry(&TTL, &bare_attr(0, FuseType::RegularFile), Generation(0));
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.counters.getattrs.fetch_add(1, Ordering::Relaxed);
        let nid = self.nodes.nid(ino.0);
        match self.inode(nid) {
            // The root's attributes carry its nid (its node id is 1): that is its st_ino.
            Ok(inode) => {
                let shown = if ino.0 == 1 {
                    self.nodes.ino(nid)
                } else {
                    ino.0
                };
                reply.attr(&TTL, &self.attr(&inode, shown));
            }
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let nid = self.nodes.nid(ino.0);
        match self
            .inode(nid)
            .and_then(|i| self.image.readlink(&i).map_err(|e| self.fail(nid, e)))
        {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    /// Neither files nor directories need a handle: `ENOSYS` tells the kernel not to send `open`,
    /// `opendir` and their `release`s at all (`no_open`, `no_opendir`), and to keep the page cache and
    /// cache directory contents as if `FOPEN_KEEP_CACHE` and `FOPEN_CACHE_DIR` had been answered. This
    /// saves two round trips per open file or directory (`find` over a cached tree then never reaches
    /// the daemon). Access checks stay in the kernel (`default_permissions`).
    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.counters.opens.fetch_add(1, Ordering::Relaxed);
        reply.error(Errno::ENOSYS);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.counters.reads.fetch_add(1, Ordering::Relaxed);
        // A file opened with O_DIRECT: nothing in the kernel keeps what it reads.
        let direct = flags.0 & libc::O_DIRECT != 0;
        let nid = self.nodes.nid(ino.0);
        let inode = match self.inode(nid).and_then(|i| self.check_file(&i).map(|_| i)) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        let len = inode.size().saturating_sub(offset).min(size as u64) as usize;
        let mut reply = reply;
        if let Some(buf) = reply.buffer(len) {
            // Over io_uring the reader fills the ring entry's payload buffer itself, which the
            // kernel copies from: no copy of ours in between.
            match self.read_timed(&inode, offset, buf, direct) {
                Ok((n, t)) => {
                    reply.data_in_place(n);
                    self.count_reply(t);
                }
                Err(e) => reply.error(self.fail(nid, e)),
            }
            return;
        }
        READ_BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            if buf.len() < len {
                buf.resize(len, 0);
            }
            // The reader fills the reply's own buffer: uncompressed blocks are read into it and
            // hashed there, extents taken whole are decoded into it; it is sent from there.
            match self.read_timed(&inode, offset, &mut buf[..len], direct) {
                Ok((n, t)) => {
                    reply.data(&buf[..n]);
                    self.count_reply(t);
                }
                Err(e) => reply.error(self.fail(nid, e)),
            }
        });
    }

    /// See [`SealFs::open`].
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.counters.opens.fetch_add(1, Ordering::Relaxed);
        reply.error(Errno::ENOSYS);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.counters.readdirs.fetch_add(1, Ordering::Relaxed);
        let entries = match self.listing(self.nodes.nid(ino.0)) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            // d_ino is the inode number, as on a kernel mount.
            if reply.add(
                INodeNo(self.nodes.ino(e.nid)),
                i as u64 + 1,
                dirent_type(e),
                OsStr::from_bytes(&e.name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.counters.readdirs.fetch_add(1, Ordering::Relaxed);
        let entries = match self.listing(self.nodes.nid(ino.0)) {
            Ok(e) => e,
            Err(e) => return reply.error(e),
        };
        // The entries' inodes are usually neighbours in the image: read their blocks in a few
        // requests (verified together) rather than one by one as the loop reaches them. Only as many
        // entries as one reply can hold, so that a huge directory listed in many replies is not
        // scanned from each reply's offset to its end.
        let uncached: Vec<u64> = entries
            .iter()
            .skip(offset as usize)
            .take(READDIRPLUS_PREFETCH)
            .filter(|e| self.inodes.get(e.nid).is_none())
            .map(|e| e.nid)
            .collect();
        self.image.prefetch_inodes(&uncached);
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            let name = OsStr::from_bytes(&e.name);
            let dots = e.name == b"." || e.name == b"..";
            let inode = match self.inode(e.nid) {
                Ok(i) => i,
                // The entry is still listed (as `ls` lists names it cannot stat); the kernel asks
                // for it again with a lookup, which gets the error.
                Err(_) => {
                    let attr = bare_attr(0, dirent_type(e));
                    if reply.add(
                        INodeNo(0),
                        i as u64 + 1,
                        name,
                        &Duration::ZERO,
                        &attr,
                        Generation(0),
                    ) {
                        break;
                    }
                    continue;
                }
            };
            // "." and ".." are not linked by the kernel: their number is only d_ino.
            let node = if dots {
                self.nodes.ino(e.nid)
            } else {
                self.nodes.node(e.nid)
            };
            let attr = self.attr(&inode, node);
            if reply.add(
                INodeNo(node),
                i as u64 + 1,
                name,
                &TTL,
                &attr,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // erofs_statfs: no free blocks, ULLONG_MAX files of which all but the image's are "free".
        let sb = self.image.superblock();
        let bsize = self.image.block_size() as u32;
        reply.statfs(
            sb.blocks,
            0,
            0,
            u64::MAX,
            u64::MAX - sb.inos,
            bsize,
            255,
            bsize,
        );
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.counters.getxattrs.fetch_add(1, Ordering::Relaxed);
        if self.xattr_state().refused() {
            return reply.error(Errno::ENOSYS);
        }
        let nid = self.nodes.nid(ino.0);
        let name = name.as_bytes();
        if name.starts_with(b"trusted.") && req.uid() != 0 {
            return reply.error(Errno::ENODATA);
        }
        let value = self.inode(nid).and_then(|i| {
            self.image
                .get_xattr(&i, name)
                .map_err(|e| self.fail(nid, e))
        });
        match value {
            Ok(Some(v)) => reply_xattr(reply, size, &v),
            Ok(None) => reply.error(Errno::ENODATA),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if self.xattr_state().refused() {
            return reply.error(Errno::ENOSYS);
        }
        let nid = self.nodes.nid(ino.0);
        let names = self
            .inode(nid)
            .and_then(|i| self.image.list_xattrs(&i).map_err(|e| self.fail(nid, e)));
        match names {
            Ok(names) => {
                let mut out = Vec::new();
                for n in names {
                    // The kernel lists trusted.* only to CAP_SYS_ADMIN.
                    if n.starts_with(b"trusted.") && req.uid() != 0 {
                        continue;
                    }
                    out.extend_from_slice(&n);
                    out.push(0);
                }
                reply_xattr(reply, size, &out);
            }
            Err(e) => reply.error(e),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        if cmd != STATS_IOCTL {
            return reply.error(Errno::ENOTTY);
        }
        let mut json = self.stats_json().to_string().into_bytes();
        json.truncate((out_size as usize).min(STATS_IOCTL_SIZE));
        reply.ioctl(0, &json);
    }
}

impl SealFs {
    /// A read's bytes into `buf`, its time counted (`read_ns`) and, when it succeeds, its bytes
    /// (`bytes_served`): the bytes read, and when the read began and how long it took, for
    /// [`SealFs::count_reply`]. `direct`: the file was opened with O_DIRECT
    /// ([`sealfs_reader::Image::read_direct`]).
    fn read_timed(
        &self,
        inode: &sealfs_reader::Inode,
        offset: u64,
        buf: &mut [u8],
        direct: bool,
    ) -> sealfs_reader::Result<(usize, ReadTime)> {
        let started = std::time::Instant::now();
        let result = if direct {
            self.image.read_direct(inode, offset, buf)
        } else {
            self.image.read(inode, offset, buf)
        };
        let read = started.elapsed();
        let c = &self.counters;
        c.read_ns
            .fetch_add(read.as_nanos() as u64, Ordering::Relaxed);
        let n = result?;
        c.bytes_served.fetch_add(n as u64, Ordering::Relaxed);
        Ok((n, ReadTime { started, read }))
    }

    /// A read's reply was sent: its time beyond the read (`reply_ns`).
    fn count_reply(&self, t: ReadTime) {
        self.counters.reply_ns.fetch_add(
            (t.started.elapsed() - t.read).as_nanos() as u64,
            Ordering::Relaxed,
        );
    }
}

/// When a read began and how long the reader took.
struct ReadTime {
    started: std::time::Instant,
    read: std::time::Duration,
}
