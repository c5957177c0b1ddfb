//! Shared code of the fuzz targets. The harness lives in `harness.rs`, which the stable test
//! `crates/reader/tests/fuzz_corpus.rs` also compiles (with `#[path]`), so the fuzzers and the
//! test run the very same walk.
//!
//! This crate also installs the targets' global allocator: the system allocator, except that a
//! single allocation larger than [`MAX_ALLOC`] aborts the process, which libFuzzer reports as a
//! crash and saves the input. Without AddressSanitizer (`-s none`), libFuzzer's `-malloc_limit_mb`
//! does nothing, and a huge zeroed allocation that is never touched does not show in the RSS, so
//! this is what catches a runaway allocation sized by an image field there.

pub mod harness;
pub mod manifest_harness;
pub mod oci_harness;
pub mod squashfs_harness;
pub mod tar_harness;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;

/// Largest single allocation allowed while fuzzing. Inputs are at most 256 KiB and the reader's
/// own bounds are below this (1 MiB pclusters, 12 MiB decoded extents, 1 MiB walk reads), so
/// anything larger can only be sized by an unchecked image field.
pub const MAX_ALLOC: usize = 32 << 20;

struct Limited;

#[cold]
fn too_big(size: usize) -> ! {
    // No allocation here: format the size into a stack buffer.
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = size;
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(b"\n==sealfs-fuzz== allocation of ");
    let _ = err.write_all(&digits[i..]);
    let _ = err.write_all(b" bytes exceeds MAX_ALLOC: a runaway allocation driven by the input\n");
    std::process::abort();
}

// SAFETY: every call is forwarded unchanged to the system allocator (after the size check).
unsafe impl GlobalAlloc for Limited {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOC {
            too_big(layout.size());
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOC {
            too_big(layout.size());
        }
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOC {
            too_big(new_size);
        }
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Limited = Limited;
