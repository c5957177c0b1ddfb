//! The kernel's fs-verity on a file, through the two ioctls no safe binding covers: asking for a
//! file's digest (`FS_IOC_MEASURE_VERITY`: checksum offload, and checking what the kernel enforces)
//! and turning fs-verity on (`FS_IOC_ENABLE_VERITY`: kernel-verified mounts of detached images,
//! and `sealfs extract --fsverity`). Written once, here, for every crate that needs them.

#![allow(
    unsafe_code,
    reason = "the fs-verity ioctls take caller-sized structs (with pointers in them) that rustix does not wrap"
)]

use sealfs_verity::{Digest, Params};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// `struct fsverity_enable_arg` of `<linux/fsverity.h>` (128 bytes).
#[repr(C)]
struct EnableArg {
    version: u32,
    hash_algorithm: u32,
    block_size: u32,
    salt_size: u32,
    salt_ptr: u64,
    sig_size: u32,
    reserved1: u32,
    sig_ptr: u64,
    reserved2: [u64; 11],
}

/// `_IOW('f', 133, struct fsverity_enable_arg)`.
const FS_IOC_ENABLE_VERITY: libc::c_ulong = 0x4080_6685;

/// Turns fs-verity on for `file` (opened read-only, with no writer anywhere) with these parameters;
/// the kernel reads the whole file to build its tree. Fails with `EOPNOTSUPP` or `ENOTTY` where the
/// file system has no fs-verity, `EEXIST` when the file already has it.
pub fn enable_kernel_verity(file: &File, params: &Params) -> io::Result<()> {
    const _: () = assert!(std::mem::size_of::<EnableArg>() == 128);
    let salt = params.salt();
    let arg = EnableArg {
        version: 1,
        hash_algorithm: u32::from(params.alg().id()),
        block_size: params.block_size() as u32,
        salt_size: salt.len() as u32,
        salt_ptr: if salt.is_empty() {
            0
        } else {
            salt.as_ptr() as u64
        },
        sig_size: 0,
        reserved1: 0,
        sig_ptr: 0,
        reserved2: [0; 11],
    };
    // SAFETY: `arg` is a live #[repr(C)] value of the size the ioctl number encodes; the kernel
    // only reads it and the `salt_size` bytes at `salt_ptr`, which `salt` keeps alive.
    let r = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            FS_IOC_ENABLE_VERITY,
            &arg as *const EnableArg,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The digest the kernel's fs-verity enforces on `file` (`FS_IOC_MEASURE_VERITY`), or `None` when the
/// file has no fs-verity (or the filesystem does not support it). When it equals the image digest,
/// every byte the kernel returns from the file is already verified and a reader can skip its own hashing.
pub fn kernel_verity_digest(file: &File) -> Option<Digest> {
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
