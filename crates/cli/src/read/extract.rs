//! `sealfs extract`: the front end of [`sealfs_extract`], which does the work (and whose
//! documentation says how it never writes outside DEST). This module parses the arguments, opens
//! the image, and prints what the library reports: warnings (at most [`MAX_WARNINGS`], the rest
//! counted), errors, and a one-line summary; then exits with the code the outcome calls for.

use super::{arg_bytes, EXIT_CANNOT_RUN, EXIT_IMAGE};
use crate::open::ImageArgs;
use crate::progress::TermProgress;
use anyhow::Result;
use clap::Args;
use sealfs_extract::{ExtractError, ExtractOptions, Fsverity, Outcome, Summary};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Warnings printed before the rest are only counted.
const MAX_WARNINGS: usize = 20;

/// Exit code 3: everything was extracted, but the destination refused something the image carries
/// (an xattr), so it was not restored; like `rsync`'s 23 (partial transfer).
pub const EXIT_NOT_RESTORED: u8 = 3;

/// Arguments of `sealfs extract`.
#[derive(Args)]
#[command(
    after_help = "Exit status: 0 extracted; 1 the image is at fault (corruption, verification \
                  failure, unsafe content: what it touches is not extracted, no file with wrong \
                  data is left); 2 could not run, or a local error (permissions, space); 3 \
                  everything extracted, but the destination refused something (an xattr, such as \
                  a large value on ext4 without ea_inode; fs-verity with --fsverity, or a digest \
                  other than the image vouches for): not restored, counted in the summary. \
                  What only root may restore (owners, devices, trusted.*/security.* xattrs) is a \
                  warning when not root, exit 0."
)]
pub struct ExtractArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Directory to extract into: created if missing, must be empty unless --overwrite. When a
    /// directory is extracted, DEST itself takes its mode, owner, times and xattrs.
    dest: PathBuf,
    /// Path in the image to extract (default: the whole tree). A directory's contents go into DEST;
    /// anything else becomes DEST/NAME.
    path: Option<OsString>,
    /// Extract into a non-empty DEST: existing entries are replaced (symlinks in DEST are removed,
    /// never followed), existing directories are merged.
    #[arg(long, visible_alias = "force")]
    overwrite: bool,
    /// Do not extract extended attributes.
    #[arg(long)]
    no_xattrs: bool,
    /// Worker threads writing file data (default: one per CPU). The result does not depend on it.
    #[arg(short = 'j', long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Turn the kernel's fs-verity on for every regular file extracted (the destination must
    /// support it: ext4 with `-O verity`, f2fs, btrfs) and check that the digest the kernel
    /// measures is the one the image vouches for (its per-file digest table; computed from the
    /// verified content for an image without one). The extracted tree then stays kernel-verified.
    /// A file the destination cannot protect, or whose digest differs, is counted: exit 3.
    #[arg(long)]
    fsverity: bool,
    /// Print nothing but errors (no progress bar, warnings or summary).
    #[arg(short, long)]
    quiet: bool,
}

/// Prints an extraction error as the other commands print theirs (its causes joined by ": ") and
/// returns its exit code.
fn report(e: ExtractError) -> u8 {
    let code = if e.is_image_fault() {
        EXIT_IMAGE
    } else {
        EXIT_CANNOT_RUN
    };
    let not_empty = matches!(e, ExtractError::DestNotEmpty(_));
    let e = sealfs_reader::ErrorChain(&e);
    if not_empty {
        eprintln!("sealfs: error: {e} (give --overwrite to extract into it anyway)");
    } else {
        eprintln!("sealfs: error: {e}");
    }
    code
}

/// Runs `sealfs extract`.
pub fn run(args: ExtractArgs) -> Result<ExitCode> {
    let start = Instant::now();
    let opened = args.image.open()?;
    let path = args.path.as_deref().map(arg_bytes);
    let fsverity = if args.fsverity {
        // Only digests the image digest covers: the image's own table, else the content.
        Some(match opened.image.file_table() {
            Ok(Some(table)) => Fsverity::Recorded(std::sync::Arc::new(table)),
            Ok(None) => Fsverity::FromContent(
                opened
                    .seal
                    .as_ref()
                    .map_or(sealfs_reader::HashAlg::Sha256, |s| s.params.alg()),
            ),
            Err(e) => {
                let e = sealfs_reader::ErrorChain(&e);
                return Err(crate::read::fault(format!(
                    "{}: {e}",
                    sealfs_text::escape_path(&args.image.image)
                )));
            }
        })
    } else {
        None
    };
    let opts = ExtractOptions {
        overwrite: args.overwrite,
        xattrs: !args.no_xattrs,
        threads: args.threads,
        fsverity,
    };
    let progress = TermProgress::new(args.quiet);
    let summary = match sealfs_extract::extract(&opened.image, path, &args.dest, &opts, &progress) {
        Ok(s) => s,
        Err(e) => return Ok(ExitCode::from(report(e))),
    };
    let outcome = summary.outcome();
    let not_restored = summary.not_restored();
    let verity = (
        summary.verity_enabled,
        summary.verity_refused,
        summary.verity_mismatch,
    );
    let Summary {
        files,
        dirs,
        symlinks,
        special,
        hard_links,
        bytes,
        warnings,
        errors,
        ..
    } = summary;
    if !args.quiet {
        for w in warnings.iter().take(MAX_WARNINGS) {
            eprintln!("sealfs: warning: {w}");
        }
        if warnings.len() > MAX_WARNINGS {
            eprintln!(
                "sealfs: warning: ... and {} more warnings",
                warnings.len() - MAX_WARNINGS
            );
        }
    }
    let error_count = errors.len();
    for e in errors {
        report(e);
    }
    if !args.quiet {
        eprintln!(
            "{}: extracted {files} files, {dirs} directories, {symlinks} symlinks, {special} special files, {hard_links} extra hard links; {bytes} bytes of data in {:.3} s{}{}{}",
            sealfs_text::escape_path(&args.dest),
            // Seconds: `Duration`'s own format writes "µs", not ASCII.
            start.elapsed().as_secs_f64(),
            match (args.fsverity, verity) {
                (false, _) => String::new(),
                (true, (on, 0, 0)) => format!("; fs-verity on {on} files, every digest as the image vouches"),
                (true, (on, refused, differ)) => format!(
                    "; fs-verity on {on} files, NOT on {refused} (refused), {differ} with another digest than the image vouches for"
                ),
            },
            if not_restored == verity.1 + verity.2 {
                String::new()
            } else {
                format!("; {} xattrs not restored", not_restored - verity.1 - verity.2)
            },
            if error_count == 0 {
                String::new()
            } else {
                format!("; {error_count} errors")
            }
        );
    }
    Ok(ExitCode::from(match outcome {
        Outcome::Complete => 0,
        Outcome::NotRestored => EXIT_NOT_RESTORED,
        Outcome::ImageFault => EXIT_IMAGE,
        Outcome::LocalError => EXIT_CANNOT_RUN,
    }))
}
