//! The `sealfs` command: parse the command line, turn it into validated options, run.

mod build;
mod progress;

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
    /// Build an image from a directory.
    Build(build::BuildArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(args) => build::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sealfs: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
