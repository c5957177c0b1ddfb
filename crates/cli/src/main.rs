//! The `sealfs` command: parse the command line, turn it into validated options, run.

mod build;
mod files;
mod open;
mod progress;
mod seal;
mod verify;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Sealed filesystem images: read-only trees the Linux kernel mounts as EROFS.
#[derive(Parser)]
#[command(name = "sealfs", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build an image from a directory (sealed unless --no-seal); prints its digest.
    Build(build::BuildArgs),
    /// Seal an existing plain EROFS image, in place or into a sidecar; prints its digest.
    Seal(seal::SealCmd),
    /// Print the image digest (fs-verity digest of the EROFS bytes), computed from the bytes.
    Digest(verify::DigestArgs),
    /// Re-hash every block and check the Merkle tree, the trailer and optionally the digest.
    /// Exit 0 verified, 1 mismatch, 2 could not run.
    Verify(verify::VerifyArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(args) => build::run(args),
        Command::Seal(args) => seal::run(args),
        Command::Digest(args) => verify::run_digest(args),
        Command::Verify(args) => verify::run_verify(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sealfs: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
