//! Attributes as the kernel shows them: times, file types, device numbers, empty attributes.

use fuser::{Errno, FileAttr, FileType as FuseType, INodeNo, ReplyXattr};
use sealfs_reader::{DirEntry, FileType};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Attributes of nothing: for negative entries and entries without attributes (node id 0).
pub(crate) fn bare_attr(ino: u64, kind: FuseType) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

/// The kernel's `new_encode_dev`, the form FUSE carries device numbers in (the format's rule).
pub use sealfs_format::new_encode_dev;

pub(crate) fn system_time(sec: i64, nsec: u32) -> SystemTime {
    let nsec = nsec.min(999_999_999);
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec)
    } else {
        // sec + nsec/1e9 with sec negative: go back |sec| seconds, then forward nsec.
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec as u64)
    }
}

pub(crate) fn fuse_type(t: FileType) -> FuseType {
    match t {
        FileType::Regular => FuseType::RegularFile,
        FileType::Directory => FuseType::Directory,
        FileType::Symlink => FuseType::Symlink,
        FileType::CharDevice => FuseType::CharDevice,
        FileType::BlockDevice => FuseType::BlockDevice,
        FileType::Fifo => FuseType::NamedPipe,
        FileType::Socket => FuseType::Socket,
    }
}

/// The type a directory entry says, falling back to what the inode would say for unknown values
/// (the kernel passes `DT_UNKNOWN`; FUSE has no such type, so regular file).
pub(crate) fn dirent_type(e: &DirEntry) -> FuseType {
    e.file_type()
        .map(fuse_type)
        .unwrap_or(FuseType::RegularFile)
}

/// Replies to an xattr request as the kernel does: the size for a size-0 probe, ERANGE when the
/// caller's buffer is too small.
pub(crate) fn reply_xattr(reply: ReplyXattr, size: u32, data: &[u8]) {
    if size == 0 {
        reply.size(data.len() as u32);
    } else if data.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // ----- time conversion -----------------------------------------------------------------------

    /// `t` as the kernel's `timespec` (what `stat` shows): seconds rounded down, nanoseconds in
    /// `0..1e9` (so -0.5 s is `(-1, 500_000_000)`). The same rule fuser applies when it sends the
    /// attributes.
    fn timespec(t: SystemTime) -> (i64, u32) {
        let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i128, d.subsec_nanos()),
            Err(e) => {
                let d = e.duration();
                if d.subsec_nanos() == 0 {
                    (-(d.as_secs() as i128), 0)
                } else {
                    (-(d.as_secs() as i128) - 1, 1_000_000_000 - d.subsec_nanos())
                }
            }
        };
        (i64::try_from(sec).expect("seconds fit a timespec"), nsec)
    }

    #[test]
    fn system_time_at_and_after_the_epoch() {
        assert_eq!(system_time(0, 0), UNIX_EPOCH);
        assert_eq!(system_time(0, 1), UNIX_EPOCH + Duration::from_nanos(1));
        // The crafted images' epoch plus fixed_nsec 123.
        assert_eq!(
            system_time(1_700_000_000, 123),
            UNIX_EPOCH + Duration::new(1_700_000_000, 123)
        );
        // Past 2^32 seconds (year 2106), where 32-bit compact times end.
        assert_eq!(
            system_time(4_294_967_296, 999_999_999),
            UNIX_EPOCH + Duration::new(4_294_967_296, 999_999_999)
        );
        assert_eq!(
            timespec(system_time(4_294_967_296, 999_999_999)),
            (4_294_967_296, 999_999_999)
        );
    }

    /// EROFS stores a time before 1970 as negative seconds plus nanoseconds *forward* from them, like
    /// a kernel timespec: (-1, 500 000 000) is half a second before the epoch, not 1.5 s.
    #[test]
    fn system_time_before_the_epoch() {
        let before = |t: SystemTime| UNIX_EPOCH.duration_since(t).unwrap();
        assert_eq!(before(system_time(-1, 0)), Duration::new(1, 0));
        assert_eq!(
            before(system_time(-1, 500_000_000)),
            Duration::new(0, 500_000_000)
        );
        assert_eq!(before(system_time(-1, 1)), Duration::new(0, 999_999_999));
        // The layouts image's extended inode: -12345 s + 999 999 999 ns = 12 344.000 000 001 s
        // before the epoch.
        assert_eq!(
            before(system_time(-12_345, 999_999_999)),
            Duration::new(12_344, 1)
        );
        // 1901-12-13, where signed 32-bit seconds end.
        assert_eq!(
            before(system_time(-2_147_483_648, 0)),
            Duration::new(2_147_483_648, 0)
        );
        // stat shows the on-disk pair again.
        for (sec, nsec) in [
            (-1, 0),
            (-1, 1),
            (-1, 500_000_000),
            (-12_345, 999_999_999),
            (-8_589_934_592, 7),
        ] {
            assert_eq!(timespec(system_time(sec, nsec)), (sec, nsec));
        }
    }

    /// Nanoseconds of 10^9 or more are not a time (the builder never writes them): they are clamped
    /// to 999 999 999 and never carried into the seconds, so a file's second stays what the
    /// image says, before and after the epoch.
    ///
    /// The kernel does otherwise: it passes the on-disk pair through unnormalized. Measured on
    /// 6.18 with a patched extended inode of (-12346 s, 1 500 000 000 ns): `st_mtime` -12346,
    /// `st_mtime_nsec` 1 500 000 000, so `st_mtime_ns` reads -12 344.5 s. FUSE cannot carry such a
    /// pair (fuser takes a `SystemTime`), so on such an image the FUSE mount and the kernel mount
    /// differ in the nanoseconds; this test pins the FUSE rule.
    #[test]
    fn system_time_clamps_invalid_nanoseconds() {
        for nsec in [1_000_000_000, 1_500_000_000, u32::MAX] {
            assert_eq!(timespec(system_time(5, nsec)), (5, 999_999_999), "{nsec}");
            assert_eq!(timespec(system_time(0, nsec)), (0, 999_999_999), "{nsec}");
            assert_eq!(timespec(system_time(-5, nsec)), (-5, 999_999_999), "{nsec}");
        }
    }

    /// The extremes of a 64-bit extended-inode time convert without overflow (a crafted image must
    /// not make the daemon panic).
    #[test]
    fn system_time_extremes() {
        assert_eq!(
            timespec(system_time(i64::MAX, 999_999_999)),
            (i64::MAX, 999_999_999)
        );
        assert_eq!(timespec(system_time(i64::MIN, 0)), (i64::MIN, 0));
        assert_eq!(timespec(system_time(i64::MIN, 1)), (i64::MIN, 1));
    }

    // ----- device numbers ------------------------------------------------------------------------

    /// `new_encode_dev`: minor bits 0-7, major bits 8-19, minor bits 8-19 at 20-31.
    #[test]
    fn device_numbers_use_the_kernels_new_encoding() {
        assert_eq!(new_encode_dev(1, 3), 0x0103);
        assert_eq!(new_encode_dev(8, 1), 0x0801);
        // 259:0x12345: 0x45 | 259 << 8 | 0x123 << 20.
        assert_eq!(new_encode_dev(259, 0x12345), 0x1231_0345);
        assert_eq!(new_encode_dev(4095, 0xf_ffff), 0xffff_ffff);
    }
}
