//! Files of an image: the walk that names them, and their fs-verity digests (4 KiB blocks, no salt,
//! what `fsverity digest` prints for the file), computed either from the image's level-0 hashes (no
//! re-hashing of data the seal already hashed) or by reading the file.

use anyhow::{Context, Result};
use rayon::prelude::*;
use sealfs_format::{self as fmt, FromBytes};
use sealfs_reader::{ExtentKind, Image, Inode};
use sealfs_verity::{BlockHasher, Digest, HashAlg, Params, Tree, TreeBuilder};
use std::collections::{BTreeMap, HashSet};

/// Block size of per-file digests.
pub const FILE_BLOCK: u64 = 4096;

/// Parameters of per-file digests for `alg`.
pub fn file_params(alg: HashAlg) -> Params {
    Params::new(alg, FILE_BLOCK as usize, b"").expect("4 KiB unsalted parameters are valid")
}

/// Every regular file's paths (relative to the root, raw bytes) by nid; hard links give several paths.
pub fn regular_files(img: &Image) -> Result<BTreeMap<u64, Vec<Vec<u8>>>> {
    let mut files: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
    let mut seen = HashSet::new();
    let mut stack: Vec<(Inode, Vec<u8>)> = vec![(img.root()?, Vec::new())];
    seen.insert(img.root_nid());
    while let Some((dir, prefix)) = stack.pop() {
        for entry in img.read_dir(&dir)? {
            let entry = entry?;
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let mut path = prefix.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&entry.name);
            let inode = img.inode(entry.nid)?;
            if inode.is_dir() {
                if seen.insert(entry.nid) {
                    stack.push((inode, path));
                }
            } else if inode.is_file() {
                files.entry(entry.nid).or_default().push(path);
            }
        }
    }
    for paths in files.values_mut() {
        paths.sort();
    }
    Ok(files)
}

/// The fs-verity digest of a file, read through the reader.
pub fn digest_by_reading(img: &Image, inode: &Inode, alg: HashAlg) -> Result<Digest> {
    let mut builder = TreeBuilder::new(&file_params(alg));
    let mut buf = vec![0u8; (1 << 20).min(inode.size() as usize).max(1)];
    let mut off = 0;
    while off < inode.size() {
        let n = img
            .read(inode, off, &mut buf)
            .with_context(|| format!("read nid {}", inode.nid()))?;
        if n == 0 {
            anyhow::bail!(
                "nid {}: read ended at {off} of {}",
                inode.nid(),
                inode.size()
            );
        }
        builder.update(&buf[..n]);
        off += n as u64;
    }
    Ok(builder.finish()?.digest())
}

/// The image blocks holding a file's whole blocks, with their place in the file: `(file block, image block)`.
/// Partial blocks and inline tails are not listed (they are hashed from the file's own bytes).
pub fn file_blocks(img: &Image, inode: &Inode) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::new();
    for e in img.map_range(inode, 0, inode.size())? {
        if let ExtentKind::Mapped { physical } = e.kind {
            if e.logical % FILE_BLOCK != 0 || physical % FILE_BLOCK != 0 {
                continue;
            }
            let end = (e.logical + e.length).min(inode.size());
            for k in 0..(end - e.logical) / FILE_BLOCK {
                out.push((e.logical / FILE_BLOCK + k, physical / FILE_BLOCK + k));
            }
        }
    }
    Ok(out)
}

/// The fs-verity digest of a file from the image's level-0 hashes `leaves` (which must use 4 KiB
/// unsalted blocks of the same algorithm): only partial blocks and inline tails are read and hashed.
pub fn digest_from_leaves(
    img: &Image,
    inode: &Inode,
    hasher: &BlockHasher,
    leaves: &[u8],
) -> Result<Digest> {
    let d = hasher.params().digest_size();
    let nblocks = inode.size().div_ceil(FILE_BLOCK) as usize;
    let mut file_leaves = vec![0u8; nblocks * d];
    let mut have = vec![false; nblocks];
    for (fb, ib) in file_blocks(img, inode)? {
        let src = leaves
            .get(ib as usize * d..(ib as usize + 1) * d)
            .context("file block outside the image")?;
        file_leaves[fb as usize * d..][..d].copy_from_slice(src);
        have[fb as usize] = true;
    }
    let mut buf = vec![0u8; FILE_BLOCK as usize];
    for (b, _) in have.iter().enumerate().filter(|(_, h)| !**h) {
        let off = b as u64 * FILE_BLOCK;
        let n = (inode.size() - off).min(FILE_BLOCK) as usize;
        let got = img.read(inode, off, &mut buf[..n])?;
        anyhow::ensure!(got == n, "nid {}: short read at {off}", inode.nid());
        hasher.hash_block_into(&buf[..n], &mut file_leaves[b * d..][..d]);
    }
    Ok(Tree::from_leaf_hashes(hasher.params(), inode.size(), &file_leaves)?.digest())
}

/// Digests of every regular file, computed by reading (for sealing an image another tool made).
pub fn compute_all(img: &Image, alg: HashAlg) -> Result<Vec<(u64, Digest)>> {
    let nids: Vec<u64> = regular_files(img)?.into_keys().collect();
    nids.par_iter()
        .map(|&nid| {
            let inode = img.inode(nid)?;
            Ok((nid, digest_by_reading(img, &inode, alg)?))
        })
        .collect()
}

/// Parses a per-file digest section: entries sorted by nid, each digest of the declared algorithm.
pub fn parse_section(bytes: &[u8]) -> std::result::Result<Vec<(u64, Digest)>, String> {
    let header = bytes
        .get(..16)
        .ok_or("per-file digest section shorter than its header")?;
    let h = fmt::FileDigestsHeader::read_from_bytes(header).map_err(|_| "header")?;
    if h.magic != fmt::FILE_DIGESTS_MAGIC {
        return Err("per-file digest section has a bad magic".into());
    }
    let alg =
        HashAlg::from_id(h.hash_algorithm).map_err(|e| format!("per-file digest section: {e}"))?;
    let d = alg.digest_size();
    if h.digest_size as usize != d || h.log_blocksize != 12 {
        return Err("per-file digest section parameters".into());
    }
    let count = h.count.get() as usize;
    if bytes.len() != 16 + count * (8 + d) {
        return Err(format!(
            "per-file digest section holds {} bytes for {count} entries",
            bytes.len()
        ));
    }
    let mut out = Vec::with_capacity(count);
    for e in bytes[16..].chunks_exact(8 + d) {
        let nid = u64::from_le_bytes(e[..8].try_into().unwrap());
        if out.last().is_some_and(|(prev, _)| *prev >= nid) {
            return Err("per-file digest section is not sorted by nid".into());
        }
        out.push((nid, Digest::new(alg, &e[8..]).map_err(|e| e.to_string())?));
    }
    Ok(out)
}
