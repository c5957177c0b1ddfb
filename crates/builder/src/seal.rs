//! Sealing: the fs-verity Merkle tree over the EROFS bytes, and the trailer that names it.
//!
//! The tree covers exactly the EROFS bytes `[0, erofs_length)`, so the image digest is what
//! `fsverity digest` prints for those bytes alone. It is written right after them (attached form: the
//! kernel still mounts the file, it ignores what follows the EROFS blocks) or into a sidecar file
//! (detached form: the EROFS file stays byte-identical to what another tool made).

use crate::emit::FileDigests;
use crate::error::{BuildError, Result};
use crate::layout::Plan;
use crate::output::TempOutput;
use rayon::prelude::*;
use sealfs_format::{self as fmt, IntoBytes, SealHeader};
use sealfs_verity::{build_tree_from_file, BlockHasher, Digest, Params, Tree};
use std::fs::{self, File};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

pub use sealfs_verity::{HashAlg, Params as VerityParams};

/// How to seal.
#[derive(Clone, Debug)]
pub struct SealOptions {
    /// Hash algorithm, Merkle block size and salt.
    pub params: Params,
    /// Write the seal to this sidecar file instead of appending it to the image.
    pub sidecar: Option<PathBuf>,
}

impl Default for SealOptions {
    fn default() -> Self {
        Self {
            params: Params::new(HashAlg::Sha256, 4096, b"")
                .expect("default fs-verity parameters are valid"),
            sidecar: None,
        }
    }
}

/// What a seal names.
#[derive(Clone, Debug)]
pub struct SealInfo {
    /// The image digest (fs-verity digest of the EROFS bytes).
    pub digest: Digest,
    /// The Merkle root.
    pub root: Digest,
    /// Bytes the tree covers.
    pub erofs_length: u64,
    /// Bytes of the tree.
    pub tree_length: u64,
    /// Where the seal went, if not appended to the image.
    pub sidecar: Option<PathBuf>,
}

/// An open file and its path (for error messages).
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    pub file: &'a File,
    pub path: &'a Path,
}

impl<'a> Target<'a> {
    pub fn of(tmp: &'a TempOutput) -> Self {
        Self {
            file: tmp.as_file(),
            path: tmp.path(),
        }
    }
}

/// Hashes `image[0..erofs_length)` by reading it back.
pub(crate) fn tree_from_image(
    image: Target<'_>,
    erofs_length: u64,
    params: &Params,
) -> Result<Tree> {
    build_tree_from_file(params, image.file, 0, erofs_length)
        .map_err(|e| BuildError::io(image.path, "hash image", std::io::Error::other(e)))
}

/// Level-0 Merkle hashes of the image's file-data blocks, made while the data is copied (from
/// several threads), kept in an unnamed temporary file beside the output at `block × digest size`,
/// not in memory (80 MB for a 10 GB image), with a bit per image block saying which are there.
#[derive(Debug)]
pub(crate) struct DataLeaves {
    file: File,
    dir: std::path::PathBuf,
    digest_size: usize,
    /// Bit `b % 64` of word `b / 64`: block `b`'s hash is in `file`.
    covered: Mutex<Vec<u64>>,
}

impl DataLeaves {
    /// An empty store beside `out`, for hashes of `params`.
    pub fn beside(out: &Path, params: &Params) -> Result<Self> {
        let (file, dir) =
            crate::spill::temp_beside(out, "create a temporary file for Merkle hashes")?;
        Ok(DataLeaves {
            file,
            dir,
            digest_size: params.digest_size(),
            covered: Mutex::new(Vec::new()),
        })
    }

    /// Stores the hashes of the image blocks from `first` on (`hashes` holds whole digests).
    pub fn put(&self, first: u64, hashes: &[u8]) -> Result<()> {
        let d = self.digest_size;
        self.file
            .write_all_at(hashes, first * d as u64)
            .map_err(|e| BuildError::io(&self.dir, "write Merkle hashes to a temporary file", e))?;
        let mut covered = self.covered.lock().unwrap_or_else(|e| e.into_inner());
        let end = first + (hashes.len() / d) as u64;
        if covered.len() < end.div_ceil(64) as usize {
            covered.resize(end.div_ceil(64) as usize, 0);
        }
        for b in first..end {
            covered[(b / 64) as usize] |= 1 << (b % 64);
        }
        Ok(())
    }

    /// Forgets the hashes of `blocks` (written again since, in part): they are read back and
    /// hashed when sealing, as blocks never stored are.
    pub fn forget(&self, blocks: std::ops::Range<u64>) {
        let mut covered = self.covered.lock().unwrap_or_else(|e| e.into_inner());
        for b in blocks {
            if let Some(w) = covered.get_mut((b / 64) as usize) {
                *w &= !(1 << (b % 64));
            }
        }
    }

    /// Forgets every hash stored (the data is written again from the start).
    pub fn clear(&self) {
        self.covered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// Seals a freshly written image whose file-data blocks were hashed while copying (`data`, in
/// image blocks, which must be the Merkle tree's blocks): only the other blocks (metadata,
/// directories) are read back and hashed, into `data`'s file; then the tree is written to `out`
/// at `out_offset` with level 0 passed from that file through a bounded buffer
/// ([`sealfs_verity::write_tree_from_leaves`]). Returns the tree (its `bytes` empty).
pub(crate) fn write_tree_from_data_leaves(
    image: Target<'_>,
    erofs_length: u64,
    params: &Params,
    data: DataLeaves,
    out: Target<'_>,
    out_offset: u64,
) -> Result<Tree> {
    let (bs, d) = (params.block_size() as u64, params.digest_size());
    let blocks = erofs_length.div_ceil(bs);
    let covered = data.covered.into_inner().unwrap_or_else(|e| e.into_inner());
    let is_covered = |b: u64| {
        covered
            .get((b / 64) as usize)
            .is_some_and(|w| w & (1 << (b % 64)) != 0)
    };
    // The uncovered blocks, in pieces of at most 1 MiB, hashed in parallel.
    const PIECE: u64 = 256;
    let mut pieces = Vec::new();
    let mut b = 0;
    while b < blocks {
        if is_covered(b) {
            b += 1;
            continue;
        }
        let start = b;
        while b < blocks && !is_covered(b) && b - start < PIECE {
            b += 1;
        }
        pieces.push((start, b));
    }
    let hasher = BlockHasher::new(params);
    let (leaves, dir) = (&data.file, data.dir.as_path());
    pieces.into_par_iter().try_for_each(|(start, end)| {
        let mut buf = vec![0u8; ((end - start) * bs) as usize];
        image
            .file
            .read_exact_at(&mut buf, start * bs)
            .map_err(|e| BuildError::io(image.path, "read back", e))?;
        let mut out = vec![0u8; (end - start) as usize * d];
        hasher.hash_blocks_into(&buf, &mut out);
        leaves
            .write_all_at(&out, start * d as u64)
            .map_err(|e| BuildError::io(dir, "write Merkle hashes to a temporary file", e))
    })?;
    sealfs_verity::write_tree_from_leaves(
        params,
        erofs_length,
        &mut |buf, at| leaves.read_exact_at(buf, at),
        &mut |bytes, at| out.file.write_all_at(bytes, out_offset + at),
    )
    .map_err(|e| BuildError::io(out.path, "write seal", std::io::Error::other(e)))
}

/// Writes the per-file digest table of a sealed build and its locator at byte 0 (docs/format.md
/// §8): the table right after the locator when it fits in the boot area, else at block
/// `plan.total_blocks` (after every block the file system uses); returns the image's new block count.
/// Writes nothing when there are no digests (no regular file, or an unsealed build).
pub(crate) fn write_file_table(out: Target<'_>, plan: &Plan, digests: &FileDigests) -> Result<u64> {
    let total_blocks = plan.total_blocks;
    let Some((alg, ids)) = digests.ids() else {
        return Ok(total_blocks);
    };
    // Their inodes by nid (4 bytes each), the order of the table.
    let mut by_nid: Vec<u32> = ids
        .map(|id| u32::try_from(id).expect("inode ids fit in 32 bits"))
        .collect();
    by_nid.sort_unstable_by_key(|&id| plan.inodes[id as usize].nid());
    let blocks_offset = total_blocks * fmt::BLKSZ;
    let Some((locator, table)) = fmt::encode_file_table(
        alg.id(),
        blocks_offset,
        (by_nid.iter()).map(|&id| (plan.inodes[id as usize].nid(), digests.get(id as usize))),
    ) else {
        return Ok(total_blocks);
    };
    let offset = locator.table_offset.get();
    let blocks = if offset == fmt::FILE_TABLE_INLINE_OFFSET {
        total_blocks
    } else {
        total_blocks + (table.len() as u64).div_ceil(fmt::BLKSZ)
    };
    if blocks > u32::MAX as u64 {
        return Err(BuildError::TooLarge(format!(
            "{blocks} blocks with the per-file digest table; EROFS addresses at most 2^32"
        )));
    }
    out.file
        .write_all_at(&table, offset)
        .and_then(|_| {
            out.file
                .write_all_at(locator.as_bytes(), fmt::FILE_TABLE_LOCATOR_OFFSET)
        })
        .map_err(|e| BuildError::io(out.path, "write per-file digest table", e))?;
    Ok(blocks)
}

/// Writes `tree`, the header and the footer to `out` at `out_offset` (`out` is the image itself for an
/// attached seal, or a sidecar starting at 0); a tree whose `bytes` are empty is already there
/// ([`write_tree_from_data_leaves`]). The trailer carries no per-file digests: they are in
/// the EROFS bytes ([`write_file_table`]), or, for images other tools made, not recorded.
pub(crate) fn write_seal(
    tree: Tree,
    erofs_length: u64,
    out: Target<'_>,
    out_offset: u64,
    detached: bool,
) -> Result<SealInfo> {
    let (out, out_path) = (out.file, out.path);
    let digest = tree.digest();
    let layout = fmt::SealLayout {
        descriptor: tree.descriptor_bytes(),
        digest: digest.as_bytes(),
        detached,
        tree_offset: out_offset,
        tree_length: tree.geometry.tree_size(),
        files_section: &[],
    };
    let tail = SealHeader::new(&layout).with_footer(layout.header_offset());
    let tree_length = tree.geometry.tree_size();
    // The tree's blocks, or nothing when they are there already.
    let mut trailer = tree.bytes;
    let at = out_offset + tree_length - trailer.len() as u64;
    trailer.extend_from_slice(&tail);
    out.set_len(at + trailer.len() as u64)
        .and_then(|_| out.write_all_at(&trailer, at))
        .map_err(|e| BuildError::io(out_path, "write seal", e))?;
    Ok(SealInfo {
        digest,
        root: tree.root,
        erofs_length,
        tree_length,
        sidecar: None,
    })
}

/// Length of the EROFS bytes of a plain image: the superblock's block count times its block size, which
/// must not exceed the file.
fn erofs_length_of(image: &File, path: &Path) -> Result<u64> {
    let not_image = |what: String| BuildError::NotAnImage {
        path: path.into(),
        what,
    };
    let mut sb = [0u8; 128];
    image
        .read_exact_at(&mut sb, fmt::EROFS_SUPER_OFFSET)
        .map_err(|_| not_image("too short for an EROFS superblock".into()))?;
    let sb = <fmt::SuperBlock as fmt::FromBytes>::read_from_bytes(&sb).expect("128 bytes");
    let len = sb.image_length().map_err(|what| not_image(what.into()))?;
    let file_len = image
        .metadata()
        .map_err(|e| BuildError::io(path, "stat", e))?
        .len();
    if len == 0 || len > file_len {
        return Err(not_image(format!(
            "superblock claims {len} bytes but the file has {file_len}"
        )));
    }
    Ok(len)
}

/// Seals an existing plain EROFS image (made by any tool): appended to it atomically (a sealed copy
/// replaces it by rename), or into `opts.sidecar`. An image that already carries a seal is refused.
///
/// The EROFS bytes are never changed, so the image digest is what `fsverity digest` prints for the
/// image as it was. So no per-file digest table is added (it would have to be inside those bytes to
/// be covered by the digest, docs/format.md §8): readers compute per-file digests of such an image
/// from its verified content when asked.
pub fn seal_image(image_path: &Path, opts: &SealOptions) -> Result<SealInfo> {
    let image = File::open(image_path).map_err(|e| BuildError::io(image_path, "open", e))?;
    let file_len = image
        .metadata()
        .map_err(|e| BuildError::io(image_path, "stat", e))?
        .len();
    if file_len >= fmt::SEAL_FOOTER_SIZE {
        let mut tail = [0u8; 64];
        image
            .read_exact_at(&mut tail, file_len - fmt::SEAL_FOOTER_SIZE)
            .map_err(|e| BuildError::io(image_path, "read", e))?;
        if tail[..8] == fmt::SEAL_FOOTER_MAGIC || tail[56..] == fmt::SEAL_FOOTER_MAGIC {
            return Err(BuildError::AlreadySealed {
                path: image_path.into(),
            });
        }
    }
    let erofs_length = erofs_length_of(&image, image_path)?;
    if let Some(sidecar) = &opts.sidecar {
        let tmp = temp_beside(sidecar)?;
        let tree = tree_from_image(
            Target {
                file: &image,
                path: image_path,
            },
            erofs_length,
            &opts.params,
        )?;
        let mut info = write_seal(tree, erofs_length, Target::of(&tmp), 0, true)?;
        persist(tmp, sidecar)?;
        info.sidecar = Some(sidecar.clone());
        return Ok(info);
    }
    if erofs_length != file_len {
        return Err(BuildError::NotAnImage {
            path: image_path.into(),
            what: format!(
                "{} bytes follow the EROFS blocks; refusing to seal over them",
                file_len - erofs_length
            ),
        });
    }
    let tmp = temp_beside(image_path)?;
    {
        let mut src = &image;
        let mut dst = tmp.as_file();
        // std's copy uses copy_file_range (and reflinks where the filesystem can).
        std::io::copy(&mut src, &mut dst).map_err(|e| BuildError::io(image_path, "copy", e))?;
    }
    let mode = image
        .metadata()
        .map_err(|e| BuildError::io(image_path, "stat", e))?
        .permissions()
        .mode();
    let tree = tree_from_image(Target::of(&tmp), erofs_length, &opts.params)?;
    let info = write_seal(tree, erofs_length, Target::of(&tmp), erofs_length, false)?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| BuildError::io(tmp.path(), "chmod", e))?;
    persist(tmp, image_path)?;
    Ok(info)
}

/// A temporary file beside `path`, leaving nothing behind unless persisted.
pub(crate) fn temp_beside(path: &Path) -> Result<TempOutput> {
    TempOutput::beside(path)
}

/// Renames a finished temporary file into place.
pub(crate) fn persist(tmp: TempOutput, to: &Path) -> Result<()> {
    tmp.persist(to)
}
