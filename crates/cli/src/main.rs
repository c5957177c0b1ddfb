//! The `sealfs` command: parse the command line, turn it into validated options, run.

mod build;
mod cache;
mod convert;
mod diff;
mod kernel;
mod mount;
mod open;
mod progress;
mod read;
mod registry;
mod seal;
mod sign;
mod signals;
mod snapshotter;
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
    /// Make an Ed25519 key pair: OUT (private, PEM PKCS#8, mode 0600) and OUT.pub; prints its
    /// fingerprint.
    Keygen(sign::KeygenArgs),
    /// Sign a sealed image's statement (digest and seal parameters) with a key, into its seal or
    /// IMAGE.sig; the image digest does not change.
    #[command(disable_version_flag = true)]
    Sign(sign::SignArgs),
    /// Print the statement `sign` signs for an image (to sign it with another tool).
    #[command(disable_version_flag = true)]
    Statement(sign::StatementCmd),
    /// Print the image digest (fs-verity digest of the EROFS bytes), computed from the bytes; with
    /// --digest, --key or --min-version, only for an image they vouch for (exit 1 otherwise).
    Digest(verify::DigestArgs),
    /// Re-hash every block and check the Merkle tree, the trailer and optionally the digest.
    /// Exit 0 verified, 1 mismatch, 2 could not run.
    Verify(verify::VerifyArgs),
    /// List a directory of the image, like `ls -n` (-l long, -R recursive, -a all).
    Ls(read::ls::LsArgs),
    /// Write files of the image to stdout.
    Cat(read::cat::CatArgs),
    /// Show what stat(2) shows for a path in the image, and how its inode is stored.
    Stat(read::stat::StatArgs),
    /// Show extended attributes of paths in the image, as `getfattr -d -m -` does.
    Getfattr(read::getfattr::GetfattrArgs),
    /// Extract the tree (or a subtree) into a directory, never writing outside it.
    Extract(read::extract::ExtractArgs),
    /// Describe an image: superblock, contents, seal, signatures, and what was established about
    /// it; given the mount point of a --kernel mount, the devices under it.
    Inspect(read::inspect::InspectArgs),
    /// Serve the image read-only over FUSE, every block verified (a daemon unless --foreground); or
    /// with --kernel, mount it with the kernel's EROFS on dm-verity or fs-verity.
    Mount(mount::MountArgs),
    /// Unmount a sealfs mount: FUSE (also a stale one whose daemon died) or --kernel (with its
    /// dm-verity mapping and loop devices, also when a crash left them behind unmounted).
    Umount(mount::UmountArgs),
    /// Show the counters of a running mount: cache hits, bytes read and verified, failures.
    Stats(mount::StatsArgs),
    /// The persistent cache of verified blocks remote images are read through: stats, prune,
    /// verify.
    Cache(cache::CacheCmd),
    /// Push a sealed image to an OCI registry as an artifact, its signatures attached as a
    /// referrer; prints the reference pinned to the manifest's digest, and the image digest.
    Push(registry::PushArgs),
    /// Build every layer of a container image (a registry's or an OCI layout's; every platform
    /// of an index) into a sealed image, as `build --oci-layer` does; keep them (--out) and/or
    /// push them, listed in one referrer of each image manifest (--push); the image itself is
    /// not touched. Prints `LAYER-DIGEST SEALED-DIGEST [WHERE]` per layer.
    Convert(convert::ConvertArgs),
    /// Fetch an image from an OCI registry whole; it appears at OUT only once every block is
    /// verified (blocks already in the persistent cache are not fetched again).
    Pull(registry::PullArgs),
    /// What an update of NEW from images already here (OLD) would fetch: NEW's blocks found in
    /// OLD by their Merkle leaf hashes, the others, and the requests; only NEW's tree is fetched.
    Diff(diff::DiffArgs),
    /// Serve containerd's snapshots API on a unix socket (a proxy plugin): layers are committed
    /// as sealed EROFS images and mounted verified.
    Snapshotter(snapshotter::SnapshotterArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Build(_) | Command::Seal(_) | Command::Convert(_)
    ) {
        // Before any thread starts: they inherit the blocked signals.
        signals::remove_outputs_on_termination();
    }
    let result = match cli.command {
        Command::Build(args) => build::run(args),
        Command::Seal(args) => seal::run(args),
        Command::Keygen(args) => sign::run_keygen(args),
        Command::Sign(args) => sign::run_sign(args),
        Command::Statement(args) => sign::run_statement(args),
        Command::Digest(args) => read::finish(verify::run_digest(args)),
        Command::Verify(args) => verify::run_verify(args),
        Command::Ls(args) => read::finish(read::ls::run(args)),
        Command::Cat(args) => read::finish(read::cat::run(args)),
        Command::Stat(args) => read::finish(read::stat::run(args)),
        Command::Getfattr(args) => read::finish(read::getfattr::run(args)),
        Command::Extract(args) => read::finish(read::extract::run(args)),
        Command::Inspect(args) => read::finish(read::inspect::run(args)),
        Command::Mount(args) => read::finish(mount::run_mount(args)),
        Command::Umount(args) => mount::run_umount(args),
        Command::Stats(args) => mount::run_stats(args),
        Command::Cache(args) => cache::run(args),
        Command::Push(args) => registry::run_push(args),
        Command::Convert(args) => convert::run(args),
        Command::Pull(args) => read::finish(registry::run_pull(args)),
        Command::Diff(args) => read::finish(diff::run(args)),
        Command::Snapshotter(args) => snapshotter::run(args),
    };
    // One exit-code convention for every command (docs/usage.md, "Exit codes"): 1 when the
    // image is at fault, 2 when the command could not run.
    match result {
        Ok(code) => code,
        Err(e) => ExitCode::from(read::report(&e)),
    }
}
