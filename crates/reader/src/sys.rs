//! The one system call the reader makes that no safe binding covers: asking the kernel for a file's
//! fs-verity digest (`FS_IOC_MEASURE_VERITY`), for checksum offload.

#![allow(
    unsafe_code,
    reason = "FS_IOC_MEASURE_VERITY is an ioctl with a caller-sized struct that rustix does not wrap"
)]

use sealfs_verity::Digest;

/// The digest the kernel's fs-verity enforces on `file` (`FS_IOC_MEASURE_VERITY`), or `None` when the
/// file has no fs-verity (or the filesystem does not support it). When it equals the image digest,
/// every byte the kernel returns from the file is already verified and a reader can skip its own hashing.
pub fn kernel_verity_digest(file: &std::fs::File) -> Option<Digest> {
    use std::os::unix::io::AsRawFd;
    #[repr(C)]
    struct FsverityDigest {
        digest_algorithm: u16,
        digest_size: u16,
        digest: [u8; 64],
    }
    const FS_IOC_MEASURE_VERITY: libc::c_ulong = 0xC004_6686;
    let mut d = FsverityDigest {
        digest_algorithm: 0,
        digest_size: 64,
        digest: [0; 64],
    };
    // SAFETY: the ioctl writes at most `digest_size` bytes after the 4-byte header of `d`, which is
    // a live, properly sized #[repr(C)] value.
    let r = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            FS_IOC_MEASURE_VERITY,
            &mut d as *mut FsverityDigest,
        )
    };
    if r != 0 {
        return None;
    }
    let alg = sealfs_verity::HashAlg::from_id(d.digest_algorithm as u8).ok()?;
    Digest::new(alg, d.digest.get(..d.digest_size as usize)?).ok()
}
