//! Builds sealfs images: a directory tree in, a kernel-mountable EROFS image out.
//!
//! The build runs in three steps, each a module:
//!
//! 1. [`source`] and [`sink`]: a [`Source`] (the directory scan [`DirSource`], or an importer of
//!    tar, OCI or SquashFS input) hands its entries to the [`Sink`], which assembles the in-memory
//!    model of the tree ([`tree`]; metadata only, never file data), numbered in a fixed
//!    breadth-first, name-sorted order whatever order the entries came in;
//! 2. [`layout`]: plan every byte position (inodes, inline tails, shared xattrs, data blocks) before
//!    anything is written (optionally keeping an earlier image's places: [`Like`], module `like`);
//! 3. [`emit`]: stream the metadata in offset order, copy file data (read back through the source)
//!    in parallel straight to its planned position, write the superblock and its checksum last.
//!
//! Because positions are fixed by the plan, the image does not depend on the thread count, and memory
//! grows with the number of files, never with their sizes. The image is written to a temporary file
//! beside the output and renamed into place only when complete (module `output`: unnamed, with
//! `O_TMPFILE`, where the file system allows, so that not even `SIGKILL` leaves it behind).

mod compress;
mod dedupe;
mod dirscan;
mod emit;
mod error;
mod keep;
mod layout;
mod like;
mod options;
mod output;
mod seal;
mod sink;
pub mod source;
mod spill;
mod tree;
mod xattrs;
mod zdata;

pub use compress::{Algorithm, CompressOptions, Fragments};
pub use dirscan::DirSource;
pub use error::{BuildError, Result};
pub use like::{EarlierBytes, Like, LikeItem, PackedExtent, PackedRun};
pub use options::{BuildOptions, CompressRule, Placement, Preset, UuidChoice};
pub use output::remove_unfinished_outputs;
pub use seal::{seal_image, HashAlg, SealInfo, SealOptions, VerityParams};
pub use source::{
    DataId, Entry, EntryError, EntryKind, FileRef, ScanContext, Sink, Source, SourceFile,
};

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// Receives progress of long build steps. Implementations must be cheap: `advance` is called from
/// worker threads for every file.
pub trait Progress: Sync {
    /// A step starts; `total` is its size in its own unit when known.
    fn begin(&self, step: &'static str, total: Option<u64>);
    /// A step counted in bytes starts (reading an archive), `total` bytes when known.
    fn begin_bytes(&self, step: &'static str, total: Option<u64>) {
        self.begin(step, total)
    }
    /// `n` more units of the current step are done.
    fn advance(&self, n: u64);
    /// The current step is done.
    fn end(&self);
}

/// A [`Progress`] that shows nothing.
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _: &'static str, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
    fn end(&self) {}
}

/// The warning of a build `--like` an earlier image whose inode places it could not keep.
const META_PLACES_DROPPED: &str = "--like: the inodes could not keep the earlier image's places (the root would not fit a 16-bit nid after them, or they would leave more than 2% of the metadata area unused): they were placed anew";

/// What a build produced.
#[derive(Debug, Clone)]
pub struct BuildSummary {
    /// Inodes in the image.
    pub inodes: u64,
    /// Regular files, directories, symlinks, and other inodes.
    pub files: u64,
    /// Directories.
    pub dirs: u64,
    /// Total image size in bytes.
    pub image_bytes: u64,
    /// Bytes of regular file data.
    pub data_bytes: u64,
    /// The filesystem UUID.
    pub uuid: [u8; 16],
    /// Things left out, one line each (e.g. xattrs EROFS cannot name).
    pub warnings: Vec<String>,
    /// The seal, unless the image was built plain.
    pub seal: Option<SealInfo>,
}

/// Builds an EROFS image of the directory `src` at `out`. On error nothing is left at `out` (an
/// existing file there is untouched) and the error names the path that caused it.
pub fn build(
    src: &Path,
    out: &Path,
    opts: &BuildOptions,
    progress: &dyn Progress,
) -> Result<BuildSummary> {
    build_from(&mut DirSource::new(src), out, opts, progress)
}

/// Builds an EROFS image of the tree `source` gives at `out`. On error nothing is left at `out`
/// (an existing file there is untouched). The same tree gives the same image whatever source
/// gave it.
pub fn build_from(
    source: &mut dyn Source,
    out: &Path,
    opts: &BuildOptions,
    progress: &dyn Progress,
) -> Result<BuildSummary> {
    if opts.label.len() > 15 {
        return Err(BuildError::InvalidOption(format!(
            "label is {} bytes; at most 15 fit",
            opts.label.len()
        )));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| {
            BuildError::InvalidOption(format!("cannot start {} threads: {e}", opts.threads))
        })?;
    pool.install(|| build_in_pool(source, out, opts, progress))
}

/// Each inode's codec where a rule chooses one (the first rule whose pattern matches a regular
/// file's path relative to the source's base); empty without rules.
fn codecs_by_rule(
    tree: &tree::Tree,
    copts: &CompressOptions,
    rules: &[CompressRule],
) -> Vec<zdata::Codec> {
    if rules.is_empty() {
        return Vec::new();
    }
    tree.inodes
        .iter()
        .map(|inode| {
            let tree::Kind::File(_) = inode.kind else {
                return Some(*copts);
            };
            let rel = tree.rel_path(inode);
            match rules.iter().find(|r| r.pattern.is_match(&rel)) {
                Some(r) => r.algorithm.map(|algorithm| CompressOptions {
                    algorithm,
                    ..*copts
                }),
                None => Some(*copts),
            }
        })
        .collect()
}

/// Gives the memory freed so far back to the system, between the steps of a build that each
/// hold something for every inode (the sink's nodes and maps, then the tree, the plan and what
/// planning needed). glibc keeps freed memory in the holes it leaves among what is still in
/// use, and the next step's large vectors do not fit those holes, so without this the peak adds
/// up the steps' leftovers: measured with `bench/tar-10g.sh`'s stream of 2 copies of `linux`
/// (157k entries), peak RSS 80 MiB without, 69 with (see docs/benchmarks.md, issue 30).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(
        unsafe_code,
        reason = "glibc's malloc_trim, which no safe binding offers"
    )]
    // SAFETY: malloc_trim takes no pointer and only hands free pages back to the system; glibc
    // allows it from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn build_in_pool(
    source: &mut dyn Source,
    out: &Path,
    opts: &BuildOptions,
    progress: &dyn Progress,
) -> Result<BuildSummary> {
    let tmp = seal::temp_beside(out)?;
    let tmp_md = tmp
        .as_file()
        .metadata()
        .map_err(|e| BuildError::io(tmp.path(), "stat", e))?;
    let mut out_ids = vec![(tmp_md.dev(), tmp_md.ino())];
    if let Ok(md) = fs::metadata(out) {
        out_ids.push((md.dev(), md.ino()));
    }

    let mut sink = Sink::new(source.base(), opts);
    let cx = ScanContext {
        out,
        out_ids,
        opts,
        progress,
    };
    source.scan(&mut sink, &cx)?;
    let mut tree = sink.finish(opts)?;
    tree.like_epoch = opts.like.as_deref().and_then(Like::epoch);
    release_freed_memory();
    let source: &dyn Source = source;
    let shared = xattrs::SharedXattrs::plan(&tree);
    // With the seal's blocks equal to the image's, file data is hashed while it is copied, and so are
    // the per-file digests (sharing those hashes when their parameters are the seal's).
    let image_hasher = opts
        .seal
        .as_ref()
        .filter(|s| s.params.block_size() as u64 == sealfs_format::BLKSZ)
        .map(|s| sealfs_verity::BlockHasher::new(&s.params));
    let file_hasher = opts.seal.as_ref().map(|s| {
        let p = VerityParams::new(s.params.alg(), sealfs_format::BLKSZ as usize, b"")
            .expect("4 KiB blocks are valid");
        sealfs_verity::BlockHasher::new(&p)
    });
    // Their hashes wait for the seal in a temporary file, not in memory.
    let data_leaves = image_hasher
        .as_ref()
        .map(|h| seal::DataLeaves::beside(out, h.params()))
        .transpose()?;
    let hashers = emit::Hashers {
        image: image_hasher.as_ref(),
        leaves: data_leaves.as_ref(),
        file: file_hasher.as_ref(),
    };
    let (mut plan, meta_hash, file_digests) = match &opts.compress {
        None => {
            // Identical files are stored once: the files that share their size with another are
            // named by their content first (by their per-file digests, when the build makes them).
            let own_hasher = file_hasher.is_none().then(dedupe::key_hasher);
            let key_hasher = file_hasher
                .as_ref()
                .or(own_hasher.as_ref())
                .expect("one of the two hashers is there");
            // (Files kept sparse never share blocks: they are not read for it, so a file of a
            // petabyte of holes costs nothing here.)
            let candidates: Vec<usize> = (0..tree.inodes.len())
                .filter(|&id| match &tree.inodes[id].kind {
                    tree::Kind::File(f) => {
                        f.size >= sealfs_format::BLKSZ
                            && f.data_ranges
                                .as_ref()
                                .is_none_or(|r| layout::plan_chunks(f.size, r).is_none())
                    }
                    _ => false,
                })
                .collect();
            progress.begin("finding identical files", None);
            let alike = dedupe::same_size_digests(source, &tree, &candidates, key_hasher)?;
            progress.end();
            let plan = layout::plan(
                &tree,
                &shared,
                None,
                false,
                alike,
                opts.placement,
                opts.like.as_deref(),
            )?;
            if plan.meta_places_dropped {
                tree.warnings.push(META_PLACES_DROPPED.into());
            }
            release_freed_memory();
            let image_bytes = plan.total_blocks * sealfs_format::BLKSZ;
            tmp.as_file()
                .set_len(image_bytes)
                .map_err(|e| BuildError::io(tmp.path(), "size output", e))?;
            let (meta_hash, digests) = emit::write_image(
                seal::Target::of(&tmp),
                source,
                &tree,
                &plan,
                &shared,
                opts,
                hashers,
                progress,
            )?;
            (plan, meta_hash, digests)
        }
        Some(c) => {
            c.validate().map_err(BuildError::InvalidOption)?;
            // Data first (sizes are known only once it is compressed), then the metadata after it.
            let codecs = codecs_by_rule(&tree, c, &opts.compress_rules);
            let write_data = |like_places| {
                zdata::write_data(
                    seal::Target::of(&tmp),
                    source,
                    &tree,
                    &shared,
                    c,
                    &codecs,
                    hashers,
                    progress,
                    opts.placement.packed_pieces,
                    opts.like.as_deref(),
                    like_places,
                )
            };
            let mut data = write_data(true)?;
            let mut like_warning = None;
            let data_bytes = (data.pre.data_end - 1) * sealfs_format::BLKSZ;
            if data.unused * like::LIKE_MAX_UNUSED.1 > data_bytes * like::LIKE_MAX_UNUSED.0 {
                // Keeping old places left more room unused than that: the data goes one file
                // after another instead (the inodes still keep their places, and the packed
                // inode its files' old order).
                like_warning = Some(format!(
                    "--like: keeping the earlier image's data places would leave {} of {} bytes of data unused; the data was placed in order",
                    data.unused, data_bytes
                ));
                drop(data);
                tmp.as_file()
                    .set_len(0)
                    .map_err(|e| BuildError::io(tmp.path(), "truncate output", e))?;
                if let Some(leaves) = &data_leaves {
                    leaves.clear();
                }
                data = write_data(false)?;
            }
            tree.warnings.extend(like_warning);
            // The packed inode (fragments) is an inode of the image no directory names.
            tree.inodes.extend(data.packed);
            let mut plan = layout::plan(
                &tree,
                &shared,
                Some(data.pre),
                c.metabox.is_some(),
                Default::default(),
                opts.placement,
                opts.like.as_deref(),
            )?;
            if plan.meta_places_dropped {
                tree.warnings.push(META_PLACES_DROPPED.into());
            }
            if let Some(packed) = data.deferred {
                // Compressed directories: with every nid known, the directories go into the
                // packed inode, which is compressed after the metadata area.
                emit::write_dir_fragments(&packed.file, &tree, &plan)?;
                let (z, next_blk) = zdata::write_packed(
                    seal::Target::of(&tmp),
                    &packed,
                    c,
                    plan.total_blocks,
                    progress,
                )?;
                let id = plan
                    .packed
                    .expect("compressed directories make a packed inode");
                plan.inodes[id].map = layout::DataMap::Extents(Box::new(z));
                plan.total_blocks = next_blk;
            }
            let mut metabox_hash = 0;
            if c.metabox.is_some() {
                // The metabox: its data (the inodes and shared xattrs) is encoded and compressed
                // after the directory blocks; then the metabox inode and the packed inode are placed
                // in the metadata area after it.
                let (bytes, blocks_hash) =
                    emit::metabox_data(tmp.as_file(), tmp.path(), &tree, &plan, &shared, opts)?;
                metabox_hash = blocks_hash ^ xxhash_rust::xxh3::xxh3_128(&bytes);
                let epoch = (plan.epoch, plan.fixed_nsec);
                let (inode, z, next_blk) = zdata::write_metabox(
                    seal::Target::of(&tmp),
                    bytes,
                    c,
                    epoch,
                    plan.total_blocks,
                )?;
                tree.inodes.push(inode);
                let id = tree.inodes.len() - 1;
                plan.total_blocks = next_blk;
                let (p, item_len) =
                    layout::metabox_inode_plan(&tree, &tree.inodes[id], z, &shared, epoch)?;
                plan.inodes.push(p);
                plan.item_lens.push(item_len);
                layout::place_outside_metabox(&mut plan, id)?;
            }
            tmp.as_file()
                .set_len(plan.total_blocks * sealfs_format::BLKSZ)
                .map_err(|e| BuildError::io(tmp.path(), "size output", e))?;
            let meta_hash =
                emit::write_metadata(tmp.as_file(), tmp.path(), &tree, &plan, &shared, opts)?
                    ^ metabox_hash;
            (plan, meta_hash, data.digests)
        }
    };
    // What each step holds for every inode goes as soon as the step is done (the tree and the
    // plan before the seal): a build of many files is bound by these.
    drop(std::mem::take(&mut plan.alike));
    // A sealed image carries its per-file digests in its own bytes, after everything else, where
    // the image digest covers them (docs/format.md §8); the superblock, written last, counts them.
    plan.total_blocks = seal::write_file_table(seal::Target::of(&tmp), &plan, &file_digests)?;
    drop(file_digests);
    let image_bytes = plan.total_blocks * sealfs_format::BLKSZ;
    tmp.as_file()
        .set_len(image_bytes)
        .map_err(|e| BuildError::io(tmp.path(), "size output", e))?;
    let uuid = emit::finish(seal::Target::of(&tmp), &tree, &plan, opts, meta_hash)?;
    drop(plan);
    let dirs = tree.inodes.iter().filter(|i| i.is_dir()).count() as u64;
    let data_bytes = tree
        .inodes
        .iter()
        .map(|i| {
            if let tree::Kind::File(f) = &i.kind {
                f.size
            } else {
                0
            }
        })
        .sum();
    let (inodes, warnings) = (tree.inodes.len() as u64, std::mem::take(&mut tree.warnings));
    drop(tree);

    let mut sidecar_tmp = None;
    let seal = match &opts.seal {
        None => {
            drop(data_leaves);
            None
        }
        Some(s) => {
            progress.begin("sealing", None);
            let image = seal::Target::of(&tmp);
            // The tree goes after the EROFS bytes, or at the start of a sidecar.
            let st = s.sidecar.as_deref().map(seal::temp_beside).transpose()?;
            let (dest, dest_offset) = match &st {
                Some(st) => (seal::Target::of(st), 0),
                None => (image, image_bytes),
            };
            let tree = match data_leaves {
                Some(leaves) => seal::write_tree_from_data_leaves(
                    image,
                    image_bytes,
                    &s.params,
                    leaves,
                    dest,
                    dest_offset,
                )?,
                None => seal::tree_from_image(image, image_bytes, &s.params)?,
            };
            let mut info = seal::write_seal(tree, image_bytes, dest, dest_offset, st.is_some())?;
            if let (Some(st), Some(path)) = (st, &s.sidecar) {
                info.sidecar = Some(path.clone());
                sidecar_tmp = Some((st, path));
            }
            progress.end();
            Some(info)
        }
    };

    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o644))
        .map_err(|e| BuildError::io(tmp.path(), "chmod", e))?;
    seal::persist(tmp, out)?;
    if let Some((st, path)) = sidecar_tmp {
        st.as_file()
            .set_permissions(fs::Permissions::from_mode(0o644))
            .map_err(|e| BuildError::io(st.path(), "chmod", e))?;
        seal::persist(st, path)?;
    }

    Ok(BuildSummary {
        inodes,
        files: inodes - dirs,
        dirs,
        image_bytes,
        data_bytes,
        uuid,
        warnings,
        seal,
    })
}
