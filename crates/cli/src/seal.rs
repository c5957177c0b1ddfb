//! Seal parameters on the command line, and `sealfs seal`.

use anyhow::{bail, Context, Result};
use clap::Args;
use sealfs_builder::{HashAlg, SealOptions, VerityParams};
use std::path::PathBuf;
use std::process::ExitCode;

/// How to seal: shared by `build` and `seal`.
#[derive(Args, Clone, Debug)]
pub struct SealArgs {
    /// Write the seal to this sidecar file and leave the EROFS image plain (detached form).
    #[arg(long, value_name = "PATH")]
    pub sidecar: Option<PathBuf>,
    /// Merkle tree hash algorithm.
    #[arg(long, value_name = "ALG", value_parser = ["sha256", "sha512"])]
    pub hash_alg: Option<String>,
    /// Merkle tree block size in bytes (1024..65536; 4096 lets the kernel's fs-verity take over).
    #[arg(long, value_name = "BYTES")]
    pub verity_block_size: Option<usize>,
    /// Salt for the Merkle tree, in hex (at most 32 bytes).
    #[arg(long, value_name = "HEX")]
    pub salt: Option<String>,
}

/// Decodes a hex string.
pub fn parse_hex(s: &str) -> Result<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.chars().all(|c| c.is_ascii_hexdigit()) {
        bail!(
            "{} is not an even-length hex string",
            sealfs_text::escape(s.as_bytes())
        );
    }
    (0..s.len())
        .step_by(2)
        .map(|i| Ok(u8::from_str_radix(&s[i..i + 2], 16)?))
        .collect()
}

impl SealArgs {
    /// The validated seal options.
    pub fn options(&self) -> Result<SealOptions> {
        let alg: HashAlg = match self.hash_alg.as_deref() {
            None => HashAlg::Sha256,
            Some(a) => a.parse().with_context(|| format!("--hash-alg {a}"))?,
        };
        let salt = self
            .salt
            .as_deref()
            .map(parse_hex)
            .transpose()
            .context("--salt")?
            .unwrap_or_default();
        let params = VerityParams::new(alg, self.verity_block_size.unwrap_or(4096), &salt)
            .context("seal parameters")?;
        Ok(SealOptions {
            params,
            sidecar: self.sidecar.clone(),
        })
    }
}

/// Arguments of `sealfs seal`.
#[derive(Args)]
pub struct SealCmd {
    /// A plain EROFS image (from sealfs --no-seal, mkfs.erofs, ...).
    image: PathBuf,
    #[command(flatten)]
    seal: SealArgs,
}

/// Runs `sealfs seal`: prints the image digest.
pub fn run(args: SealCmd) -> Result<ExitCode> {
    let opts = args.seal.options()?;
    // The image must be one the reader can open. Its EROFS bytes are kept as they are, so no
    // per-file digest table is added (docs/format.md §8): readers compute those digests from the
    // verified content.
    let file = std::fs::File::open(&args.image)
        .with_context(|| format!("{}: open", sealfs_text::escape_path(&args.image)))?;
    if let Err(e) = sealfs_reader::Image::open_unverified(file) {
        return Err(anyhow::Error::new(e).context(format!(
            "{}: not a readable EROFS image",
            sealfs_text::escape_path(&args.image)
        )));
    }
    let info = sealfs_builder::seal_image(&args.image, &opts)?;
    println!("{}", info.digest);
    match &info.sidecar {
        Some(s) => eprintln!(
            "{}: sealed into {} (root {})",
            sealfs_text::escape_path(&args.image),
            sealfs_text::escape_path(s),
            info.root
        ),
        None => eprintln!(
            "{}: sealed (root {}, tree {} bytes)",
            sealfs_text::escape_path(&args.image),
            info.root,
            info.tree_length
        ),
    }
    Ok(ExitCode::SUCCESS)
}
