// Used by the reading commands (ls, cat, stat, getfattr, extract, inspect), which land next.
#![allow(dead_code)]
//! Opening an image for the reading commands: the shared `--digest`/`--sidecar`/`--verify` options, the
//! seal, and the reader over the EROFS bytes.

use crate::verify::{self, OpenError, Opened};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use sealfs_reader::{
    kernel_verity_digest, Image, Options, ReadAt, SealInfo, SplitFile, VerifiedBlocks,
};
use sealfs_verity::Digest;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Options every reading command takes.
#[derive(Args, Clone, Debug)]
pub struct ImageArgs {
    /// The image (sealed or plain EROFS).
    pub image: PathBuf,
    /// The digest the image must have (`sha256:<hex>`); a different image is an error. Without it the
    /// image is only checked against its own seal (self-consistent, not authenticated).
    #[arg(long, value_name = "DIGEST", global = true)]
    pub digest: Option<String>,
    /// Read the seal from this sidecar file.
    #[arg(long, value_name = "PATH", global = true)]
    pub sidecar: Option<PathBuf>,
    /// `none` trusts the image: no block is checked against the seal. `double` (`mount` only) also
    /// checks each regular file whole against its own recorded digest before its first read.
    #[arg(long, value_name = "MODE", default_value = "default", value_parser = ["default", "none", "double"], global = true)]
    pub verify: String,
    /// Bytes of decompressed clusters kept in memory (0 turns the cache off).
    #[arg(long, value_name = "BYTES", default_value_t = sealfs_reader::DEFAULT_CLUSTER_CACHE_BYTES, global = true)]
    pub cache_size: usize,
    /// Verified Merkle hash blocks kept in memory (each 4 KiB covers 512 KiB of data).
    #[arg(long, value_name = "BLOCKS", default_value_t = sealfs_reader::verified::DEFAULT_HASH_CACHE_BLOCKS, global = true)]
    pub hash_cache_blocks: usize,
    /// Verified image blocks (metadata and small reads) kept in memory [default: 256, 1 MiB; for
    /// `mount`, a long-lived daemon, 4096: 16 MiB].
    #[arg(long, value_name = "BLOCKS", global = true)]
    pub block_cache: Option<usize>,
}

/// What was established about an opened image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Every block read is checked against a seal whose digest equals `--digest`.
    Authenticated(Digest),
    /// Every block read is checked against the image's own seal; nobody vouched for the seal.
    SelfConsistent(Digest),
    /// Nothing is checked (plain image, or `--verify=none`).
    Unverified,
}

/// An image opened for reading.
pub struct OpenImage {
    /// The reader.
    pub image: Image,
    /// What reads are checked against.
    pub trust: Trust,
    /// The seal, if the image has one.
    pub seal: Option<Box<verify::Seal>>,
    /// Bytes of EROFS data.
    pub erofs_length: u64,
    /// The verifying block source, when reads are verified here (its statistics).
    pub verified: Option<Arc<VerifiedBlocks>>,
    /// Reads are verified by the kernel's fs-verity on the image file (same digest), not here.
    pub offloaded: bool,
    /// With `--verify=double`: the per-file digests recorded in the seal, by nid.
    pub file_digests: Option<Arc<HashMap<u64, Digest>>>,
}

impl ImageArgs {
    /// Opens the image as the options say (`--verify=double` is refused: it is `mount`'s).
    pub fn open(&self) -> Result<OpenImage> {
        if self.verify == "double" {
            bail!("--verify=double (each file also checked against its own recorded digest) is offered by `sealfs mount` only");
        }
        self.open_any()
    }

    /// Opens the image as the options say, `--verify=double` included (its per-file digests are
    /// loaded; checking files with them is the caller's part).
    pub fn open_any(&self) -> Result<OpenImage> {
        let expected: Option<Digest> = self
            .digest
            .as_deref()
            .map(str::parse)
            .transpose()
            .map_err(|e| anyhow!("--digest: {e}"))?;
        let (file, opened) = match verify::open(&self.image, self.sidecar.as_deref()) {
            Ok(x) => x,
            Err(OpenError::CannotRun(e)) => return Err(e),
            // A damaged or truncated seal is the image's fault (exit 1), as for any other damage.
            Err(OpenError::Mismatch(what)) => return Err(crate::read::fault(what)),
        };
        let (len, seal) = match opened {
            Opened::Plain(len) => (len, None),
            Opened::Sealed(seal) => (seal.header.erofs_length.get(), Some(seal)),
        };
        let trust = match (&seal, &expected) {
            (Some(seal), _) if self.verify != "none" => {
                let digest = sealfs_verity::file_digest(&seal.params, &seal.header.descriptor);
                match expected {
                    Some(e) if e != digest => {
                        return Err(crate::read::fault(format!(
                            "{}: the image is {digest}, not the expected {e}",
                            self.image.display()
                        )))
                    }
                    Some(_) => Trust::Authenticated(digest),
                    None => Trust::SelfConsistent(digest),
                }
            }
            (None, Some(_)) if self.verify != "none" => {
                bail!("{}: not sealed, so --digest cannot be checked while reading; seal it or use `sealfs verify --digest`", self.image.display())
            }
            _ => Trust::Unverified,
        };
        let file_digests = if self.verify == "double" {
            let name = self.image.display();
            let seal = seal
                .as_ref()
                .ok_or_else(|| anyhow!("{name}: --verify=double needs a sealed image"))?;
            let recorded = verify::read_file_digests(seal)
                .map_err(|e| crate::read::fault(format!("{name}: {e}")))?
                .ok_or_else(|| {
                    anyhow!("{name}: the seal records no per-file digests, so --verify=double has nothing to check files against")
                })?;
            Some(Arc::new(recorded.into_iter().collect::<HashMap<_, _>>()))
        } else {
            None
        };
        let options = Options {
            cluster_cache_bytes: self.cache_size,
            cache_blocks: self
                .block_cache
                .unwrap_or(sealfs_reader::DEFAULT_CACHE_BLOCKS),
        };
        // Checksum offload: an image file whose kernel fs-verity digest is the image digest (the detached
        // form on ext4/f2fs/btrfs with fs-verity enabled) is verified by the kernel on every read.
        let offloaded = match &trust {
            Trust::Authenticated(d) | Trust::SelfConsistent(d) => {
                kernel_verity_digest(&file).as_ref() == Some(d)
            }
            Trust::Unverified => false,
        };
        let (image, verified) = match (&seal, &trust) {
            (Some(seal), Trust::Authenticated(_) | Trust::SelfConsistent(_)) if !offloaded => {
                // Hash blocks are read through a second descriptor (see SplitFile), in the same
                // batch as the data; if the path cannot be opened again, one descriptor serves both.
                let data: Arc<dyn ReadAt> = match std::fs::File::open(&self.image) {
                    Ok(side) if self.sidecar.is_none() => Arc::new(SplitFile::new(file, side)),
                    _ => Arc::new(file),
                };
                let tree: Arc<dyn ReadAt> = if self.sidecar.is_some() {
                    Arc::new(seal.file.try_clone()?)
                } else {
                    data.clone()
                };
                let h = &seal.header;
                let info = SealInfo {
                    params: seal.params,
                    data_length: len,
                    tree_offset: h.tree_offset.get(),
                    root: Digest::new(
                        seal.params.alg(),
                        &h.root_hash[..seal.params.digest_size()],
                    )?,
                };
                let blocks = Arc::new(VerifiedBlocks::new(
                    data,
                    tree,
                    info,
                    self.hash_cache_blocks,
                )?);
                let image = Image::open_blocks(blocks.clone(), &options)
                    .with_context(|| format!("{}: open", self.image.display()))?;
                (image, Some(blocks))
            }
            _ => (verify::reader_with(&file, len, &options)?, None),
        };
        Ok(OpenImage {
            image,
            trust,
            seal,
            erofs_length: len,
            verified,
            offloaded,
            file_digests,
        })
    }
}
