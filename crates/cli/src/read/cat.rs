//! `sealfs cat`: write files of the image to stdout, streaming in bounded memory.
//!
//! Symlinks are followed (inside the image). Like `cat`, an error with one path is reported and the
//! next path is still written; the exit code is the worst seen.

use super::{fault, resolve, show, Status};
use crate::open::ImageArgs;
use anyhow::{Context, Result};
use clap::Args;
use sealfs_reader::{FileType, Follow, Image};
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

/// Bytes read from the image per step.
const CHUNK: usize = 1 << 20;

/// Arguments of `sealfs cat`.
#[derive(Args)]
pub struct CatArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Paths in the image, written one after the other.
    #[arg(required = true)]
    paths: Vec<OsString>,
    /// After writing, print the reader's statistics to stderr (block and cluster caches, bytes read,
    /// decompressed and verified, absent-xattr lookups answered by the bloom filter).
    #[arg(long)]
    stats: bool,
}

/// Writes regular file `path` of `img` to `out`, `CHUNK` bytes at a time.
fn cat_one(img: &Image, path: &[u8], buf: &mut [u8], out: &mut impl Write) -> Result<()> {
    let inode = resolve(img, path, Follow::All)?;
    match inode.file_type() {
        FileType::Regular => {}
        FileType::Directory => return Err(fault(format!("{}: Is a directory", show(path)))),
        ft => {
            return Err(fault(format!(
                "{}: not a regular file ({}): it has no data in the image",
                show(path),
                ft.name()
            )))
        }
    }
    let mut off = 0u64;
    while off < inode.size() {
        let n = img
            .read(&inode, off, buf)
            .with_context(|| format!("{}: read at byte {off}", show(path)))?;
        if n == 0 {
            return Err(fault(format!(
                "{}: data ends at byte {off} of {}",
                show(path),
                inode.size()
            )));
        }
        out.write_all(&buf[..n])?;
        off += n as u64;
    }
    Ok(())
}

/// Runs `sealfs cat`.
pub fn run(args: CatArgs) -> Result<ExitCode> {
    args.image.refuse_double()?;
    let (opened, remote) = args.image.open_counted()?;
    let mut out = std::io::stdout().lock();
    let mut buf = vec![0u8; CHUNK];
    let mut status = Status::default();
    // Several files of a remote image: their data is fetched ahead, in the order asked for (a path
    // that does not resolve is left to its own read to report).
    if args.paths.len() > 1 && opened.image.prefetches() {
        let inodes: Vec<_> = args
            .paths
            .iter()
            .filter_map(|p| {
                opened
                    .image
                    .resolve(super::arg_bytes(p), sealfs_reader::Follow::All)
                    .ok()
            })
            .collect();
        opened.image.prefetch_files(&inodes);
    }
    for p in &args.paths {
        let path = super::arg_bytes(p);
        if let Err(e) = cat_one(&opened.image, path, &mut buf, &mut out) {
            if super::exit_code(&e).is_none() {
                return Err(e);
            }
            out.flush()?;
            status.error(&e);
        }
    }
    out.flush()?;
    if args.stats {
        // Readahead still in flight ends first, so that the counters are whole.
        if let Some(v) = &opened.verified {
            v.settle_readahead();
        }
        print_stats(&opened);
        if let Some(r) = remote {
            print_remote_stats(&r);
        }
    }
    Ok(status.code())
}

/// A remote image's counters, one `name value` per line.
fn print_remote_stats(remote: &sealfs_remote::RemoteObject) {
    for (k, v) in remote.stats().counters() {
        eprintln!("{k} {v}");
    }
}

/// The reader's (and, when reads are verified, the verifier's) statistics, one `name value` per line.
pub fn print_stats(opened: &crate::open::OpenImage) {
    for (k, v) in opened.counters() {
        eprintln!("{k} {v}");
    }
}
