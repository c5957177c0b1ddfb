//! The one system call here that no maintained binding covers: turning fs-verity on for a file
//! (`FS_IOC_ENABLE_VERITY`). Loop and device-mapper setup go through `loopdev-3` and
//! `devicemapper`; measuring a file's fs-verity digest is the reader's
//! ([`sealfs_reader::kernel_verity_digest`]).

#![allow(
    unsafe_code,
    reason = "FS_IOC_ENABLE_VERITY takes a pointer to a struct with pointers in it, which rustix does not wrap"
)]

use sealfs_verity::Params;
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

/// Turns fs-verity on for `file` (opened read-only, with no writer anywhere) with the seal's
/// parameters; the kernel reads the whole file to build its tree. Fails with `EOPNOTSUPP` or
/// `ENOTTY` where the file system has no fs-verity, `EEXIST` when the file already has it.
pub fn enable_verity(file: &File, params: &Params) -> io::Result<()> {
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
