//! `sealfs build`: arguments, their validation into [`BuildOptions`], and the run.

use crate::progress::TermProgress;
use crate::seal::SealArgs;
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use regex::bytes::Regex;
use sealfs_builder::{
    Algorithm, BuildOptions, CompressOptions, CompressRule, Fragments, Preset, UuidChoice,
};
use sealfs_text::escape as show;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `sealfs build`.
#[derive(Args)]
pub struct BuildArgs {
    /// The directory to pack, then the image to write (replaced atomically; nothing is left
    /// there on error). With --tar, --oci or --squashfs, only the image.
    #[arg(value_name = "SRC OUT", num_args = 1..=2, required = true)]
    paths: Vec<PathBuf>,
    /// Build from a tar archive (ustar, GNU or PAX; plain, gzip, zstd, xz, bzip2 or lz4,
    /// recognised by its first bytes) instead of a directory, in one pass; `-` reads stdin. The
    /// image is the one `tar -x` of the archive (as root, owners by number, xattrs and ACLs
    /// kept) followed by a build of that directory gives, directory times as docs/usage.md's
    /// time rule says. A leading '/' of member names is removed, '..' refused; input that is no
    /// tar archive, or empty, is refused.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["oci", "squashfs"])]
    tar: Option<PathBuf>,
    /// Build from an OCI image instead of a directory: LAYOUT[:REF], an OCI image layout (as
    /// umoci and `skopeo copy ... oci:LAYOUT:REF` write it), the image whose
    /// org.opencontainers.image.ref.name is REF (or its only one); or an image in a registry,
    /// oci://HOST[:PORT]/REPO[:TAG][@DIGEST] (docker:// is the same; oci+http:// for plain
    /// HTTP), credentials as `sealfs pull` finds them, --ca-cert trusted. Its layers are
    /// applied in order (whiteouts and opaque directories too) into the tree `umoci unpack`
    /// would leave, each read once (streamed, never stored) with its digest checked against
    /// the manifest.
    #[arg(long, value_name = "IMAGE", conflicts_with = "squashfs")]
    oci: Option<String>,
    /// With --oci: the platform to take from an index, OS/ARCH[/VARIANT].
    #[arg(
        long,
        value_name = "PLATFORM",
        default_value = "linux/amd64",
        requires = "oci"
    )]
    platform: String,
    /// With --oci: build one layer alone (N from 1, the lowest, or its digest), its whiteouts
    /// kept as the kernel's overlayfs reads them (a character device 0:0 for a deleted path,
    /// trusted.overlay.opaque=y on an opaque directory), so that overlayfs stacks the layers'
    /// images (lowerdir=TOP:...:BOTTOM) into the image's tree.
    #[arg(long, value_name = "N|DIGEST", requires = "oci")]
    oci_layer: Option<String>,
    /// Build from a SquashFS image (version 4.0, any compressor squashfs-tools writes) instead
    /// of a directory, read in place. The image is the one `unsquashfs -d DIR` of it (as root:
    /// owners, permissions, times and xattrs kept) followed by a build of DIR gives.
    #[arg(long, value_name = "IMAGE")]
    squashfs: Option<PathBuf>,
    /// Give every inode this modification time (seconds since the epoch).
    #[arg(short = 'T', long, value_name = "SECS", allow_hyphen_values = true)]
    timestamp: Option<i64>,
    /// Make every file owned by root (uid 0, gid 0).
    #[arg(long)]
    all_root: bool,
    /// Make every file owned by this uid.
    #[arg(long, value_name = "UID")]
    force_uid: Option<u32>,
    /// Make every file owned by this gid.
    #[arg(long, value_name = "GID")]
    force_gid: Option<u32>,
    /// Add this to every uid.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    uid_offset: i64,
    /// Add this to every gid.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        allow_hyphen_values = true
    )]
    gid_offset: i64,
    /// Filesystem UUID: a UUID, "clear" (all zeros) or "random". Default: derived from the image
    /// metadata, so the same tree gives the same image.
    #[arg(short = 'U', long, value_name = "UUID")]
    uuid: Option<String>,
    /// Volume label (at most 15 bytes).
    #[arg(short = 'L', long, value_name = "LABEL")]
    label: Option<String>,
    /// Leave out this path (relative to SRC, or absolute under it) and everything below it. Repeatable.
    #[arg(long, value_name = "PATH")]
    exclude_path: Vec<PathBuf>,
    /// Leave out paths (relative to SRC, no leading '/') matching this regular expression. Repeatable.
    #[arg(long, value_name = "REGEX")]
    exclude_regex: Vec<String>,
    /// Do not write the per-inode xattr name bloom filter.
    #[arg(long)]
    no_xattr_filter: bool,
    /// Do not copy extended attributes.
    #[arg(long)]
    no_xattrs: bool,
    /// Worker threads (default: one per CPU). The image does not depend on it.
    #[arg(short = 'j', long, value_name = "N", default_value_t = 0)]
    threads: usize,
    /// Compress file data: lz4, lz4hc[,LEVEL] (1-12, default 9), zstd[,LEVEL] (1-22, default 3),
    /// lzma[,LEVEL] (MicroLZMA, 0-9 or 100-109 for the extreme presets, default 6) or
    /// deflate[,LEVEL] (1-12, default 6).
    #[arg(short = 'z', long = "compress", value_name = "ALG")]
    compress: Option<String>,
    /// Largest physical cluster in bytes with -z (4096 to 1048576, a multiple of 4096; default
    /// 4096).
    #[arg(short = 'C', long = "pcluster-bytes", value_name = "BYTES")]
    pcluster_bytes: Option<u32>,
    /// Compression settings by name; -z, -C, -E, -m and --zD change what they name. `small`:
    /// zstd level 12, 1 MiB clusters, fragments, metadata and directories compressed (-m 65536
    /// --zD) (a small image, quick to build; `--preset small -z lzma` is smaller still and slower;
    /// Linux 6.17 or later mounts it); `fast`: lz4, 64 KiB clusters, fragments (quick to build
    /// and to read). Identical files are stored once in every build.
    #[arg(long, value_name = "NAME")]
    preset: Option<String>,
    /// Placement for smaller updates (issue 41; docs/usage.md, "Layouts for updates"): `dense`
    /// (the default), `stable` (all of these), or a comma-separated list of: `data-first`
    /// (uncompressed builds: file data from block 1, the metadata after it, so that metadata
    /// growing does not move every file's blocks), `packed-pieces` (with compressed directories,
    /// as --preset small: the packed inode, which holds the small files, compressed in pieces its
    /// files' content decides, so that one changed file does not shift every pcluster after it).
    #[arg(long, value_name = "LAYOUT")]
    layout: Option<String>,
    /// Build like this earlier image (an earlier version of the tree; docs/usage.md, "Layouts
    /// for updates"): every path it holds keeps its inode's place (nid) when it still fits there,
    /// and in an uncompressed image its data blocks too; what is new or grew goes into the room
    /// left or after. An update from OLD (`sealfs pull --base OLD`) then fetches little more than
    /// what changed. The same tree and OLD give the same image.
    #[arg(long, value_name = "OLD")]
    like: Option<PathBuf>,
    /// Extended options with -z, comma-separated, as mkfs.erofs names them: `fragments` (files
    /// smaller than one pcluster, and the last extent of larger ones, are packed together into the
    /// packed inode and compressed there, in path order), `all-fragments` (every file is packed),
    /// `dedupe` (identical clusters of input, in any files, stored once; with 48bit), `48bit` (each
    /// cluster of input compressed in one call, its bytes packed without block padding, in 48-bit
    /// encoded extents: faster builds and smaller images; Linux 6.15 or later mounts them).
    #[arg(
        short = 'E',
        long = "extended",
        value_name = "OPTS",
        value_delimiter = ','
    )]
    extended: Vec<String>,
    /// Compress the metadata too, as `mkfs.erofs -m` does (the metabox; Linux 6.17 or later
    /// mounts it): every inode, with its xattrs, indexes and inline data, and the shared xattrs go
    /// into one inode compressed like file data, in pclusters of at most BYTES (a multiple of 4096,
    /// at most -C). Needs -z.
    #[arg(short = 'm', long = "metabox", value_name = "BYTES")]
    metabox: Option<u32>,
    /// Compress directories too, as `mkfs.erofs --zD` does: each directory's entries go whole into
    /// the packed inode and are compressed there, with the fragments if any (`--zD=0`: not, as
    /// with --preset small otherwise). Needs -z.
    #[arg(
        long = "zD",
        value_name = "0|1",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "1",
        value_parser = ["0", "1"]
    )]
    compress_dirs: Option<String>,
    /// A per-file exception with -z: REGEX=ALG compresses regular files whose path (relative to
    /// SRC, no leading '/') matches REGEX with ALG (as -z names it), REGEX=none stores them
    /// uncompressed without trying (for example '\.(jpe?g|png|mp4|gz|xz|zst)$=none'). Repeatable;
    /// the first that matches applies. Such files are never packed into fragments.
    #[arg(long, value_name = "REGEX=ALG")]
    compress_rule: Vec<String>,
    /// Write a plain EROFS image, without the Merkle tree and seal trailer.
    #[arg(long, conflicts_with_all = ["sidecar", "hash_alg", "salt", "verity_block_size"])]
    no_seal: bool,
    #[command(flatten)]
    seal: SealArgs,
    #[command(flatten)]
    tls: crate::open::TlsArgs,
    /// Print nothing but errors (the digest still goes to stdout).
    #[arg(short, long)]
    quiet: bool,
}

fn parse_uuid(s: &str) -> Result<UuidChoice> {
    Ok(match s {
        "random" => UuidChoice::Random,
        "clear" => UuidChoice::Fixed([0; 16]),
        _ => {
            let hex: String = s.chars().filter(|c| *c != '-').collect();
            if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                bail!(
                    "--uuid {}: expected a UUID like 01234567-89ab-cdef-0123-456789abcdef, \"clear\" or \"random\"",
                    show(s.as_bytes())
                );
            }
            let mut u = [0u8; 16];
            for (i, b) in u.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)?;
            }
            UuidChoice::Fixed(u)
        }
    })
}

impl BuildArgs {
    /// The compression settings: the preset's, changed by -z, -C and -E.
    fn compress_options(&self) -> Result<Option<CompressOptions>> {
        let preset = self
            .preset
            .as_deref()
            .map(Preset::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--preset: {e}"))?;
        let mut c = match (preset, &self.compress) {
            (None, None) => {
                if !self.extended.is_empty()
                    || self.pcluster_bytes.is_some()
                    || self.metabox.is_some()
                    || self.compress_dirs.is_some()
                {
                    bail!("-C, -E, -m and --zD need -z (or --preset)");
                }
                return Ok(None);
            }
            (Some(p), _) => p.options(),
            // -z sets the algorithm below.
            (None, Some(_)) => CompressOptions::new(Algorithm::Lz4),
        };
        if let Some(z) = &self.compress {
            c.algorithm =
                Algorithm::parse(z).map_err(|e| anyhow::anyhow!("--compress {z}: {e}"))?;
        }
        if let Some(p) = self.pcluster_bytes {
            c.pcluster_bytes = p;
        }
        if !self.extended.is_empty() {
            (c.fragments, c.extents_48bit, c.dedupe) = self.extended()?;
        }
        if self.metabox.is_some() {
            c.metabox = self.metabox;
        }
        if let Some(d) = &self.compress_dirs {
            c.compress_dirs = d == "1";
        }
        c.validate()
            .map_err(|e| anyhow::anyhow!("-C {}: {e}", c.pcluster_bytes))?;
        Ok(Some(c))
    }

    /// The fragments choice, 48-bit extents and dedupe from `-E`.
    fn extended(&self) -> Result<(Fragments, bool, bool)> {
        let mut fragments = Fragments::Off;
        let mut extents_48bit = false;
        let mut dedupe = false;
        for opt in &self.extended {
            match opt.as_str() {
                "fragments" if fragments == Fragments::Off => fragments = Fragments::Small,
                "fragments" => {}
                "all-fragments" => fragments = Fragments::All,
                "48bit" => extents_48bit = true,
                "dedupe" => dedupe = true,
                _ => bail!(
                    "-E {opt}: unknown extended option (fragments, all-fragments, 48bit, dedupe)"
                ),
            }
        }
        Ok((fragments, extents_48bit, dedupe))
    }

    fn options(&self) -> Result<BuildOptions> {
        let clamp_mtime = match std::env::var("SOURCE_DATE_EPOCH") {
            Ok(v) if !v.is_empty() => Some(v.trim().parse().with_context(|| {
                format!("SOURCE_DATE_EPOCH={} is not a number", show(v.as_bytes()))
            })?),
            _ => None,
        };
        let src = match (&self.tar, &self.oci, &self.squashfs) {
            // Absolute names in an archive lose their leading '/'; an image's paths are
            // relative to its root.
            (None, None, None) => {
                std::path::absolute(&self.paths[0]).unwrap_or_else(|_| self.paths[0].clone())
            }
            _ => PathBuf::from("/"),
        };
        let exclude_paths = self
            .exclude_path
            .iter()
            .map(|p| {
                let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
                match abs.strip_prefix(&src) {
                    Ok(rel) if p.is_absolute() => rel.to_path_buf(),
                    _ => p.strip_prefix("./").unwrap_or(p).to_path_buf(),
                }
            })
            .collect();
        let exclude_regexes = self
            .exclude_regex
            .iter()
            .map(|r| {
                Regex::new(r).with_context(|| format!("--exclude-regex {}", show(r.as_bytes())))
            })
            .collect::<Result<_>>()?;
        let label = self.label.clone().unwrap_or_default().into_bytes();
        if label.len() > 15 {
            bail!("--label is {} bytes; at most 15 fit", label.len());
        }
        Ok(BuildOptions {
            timestamp: self.timestamp,
            clamp_mtime,
            force_uid: if self.all_root {
                Some(0)
            } else {
                self.force_uid
            },
            force_gid: if self.all_root {
                Some(0)
            } else {
                self.force_gid
            },
            uid_offset: self.uid_offset,
            gid_offset: self.gid_offset,
            uuid: self
                .uuid
                .as_deref()
                .map(parse_uuid)
                .transpose()?
                .unwrap_or_default(),
            label,
            exclude_paths,
            exclude_regexes,
            xattr_filter: !self.no_xattr_filter,
            xattrs: !self.no_xattrs,
            threads: self.threads,
            seal: if self.no_seal {
                None
            } else {
                Some(self.seal.options()?)
            },
            compress: self.compress_options()?,
            compress_rules: self.compress_rules()?,
            like: match &self.like {
                Some(old) => {
                    let opened =
                        sealfs_reader::open(old.clone(), &sealfs_reader::OpenOptions::new())
                            .map_err(crate::open::open_error)?;
                    let like = sealfs_delta::like_image(std::sync::Arc::new(opened))
                        .map_err(|e| anyhow!("--like {}: {e}", sealfs_text::escape_path(old)))?;
                    Some(std::sync::Arc::new(like))
                }
                None => None,
            },
            placement: match &self.layout {
                Some(l) => {
                    sealfs_builder::Placement::parse(l).map_err(|e| anyhow!("--layout: {e}"))?
                }
                None => sealfs_builder::Placement::default(),
            },
        })
    }

    /// The `--compress-rule`s, checked against the build's compression settings.
    fn compress_rules(&self) -> Result<Vec<CompressRule>> {
        let Some(c) = self.compress_options()? else {
            if !self.compress_rule.is_empty() {
                bail!("--compress-rule needs -z (or --preset)");
            }
            return Ok(Vec::new());
        };
        self.compress_rule
            .iter()
            .map(|rule| {
                let what = || format!("--compress-rule {}", show(rule.as_bytes()));
                let (pattern, alg) = rule
                    .rsplit_once('=')
                    .with_context(|| format!("{}: expected REGEX=ALG", what()))?;
                let algorithm = match alg {
                    "none" => None,
                    _ => {
                        let a = Algorithm::parse(alg)
                            .map_err(|e| anyhow::anyhow!("{}: {e}", what()))?;
                        CompressOptions { algorithm: a, ..c }
                            .validate()
                            .map_err(|e| anyhow::anyhow!("{}: {e}", what()))?;
                        Some(a)
                    }
                };
                let pattern = Regex::new(pattern).with_context(what)?;
                Ok(CompressRule { pattern, algorithm })
            })
            .collect()
    }
}

/// The source `--oci IMAGE` names (a layout, or a registry reference): the flattened image,
/// or with `--oci-layer` one layer.
fn oci_source(
    image: &str,
    platform: &str,
    layer: Option<&str>,
    tls: &crate::open::TlsArgs,
) -> Result<sealfs_import::TarSource> {
    use sealfs_import::oci::{layout, registry, spec::Platform};
    use std::sync::Arc;
    let platform: Platform = platform
        .parse()
        .map_err(|e| anyhow::anyhow!("--platform: {e}"))?;
    let (image, blobs): (_, Arc<dyn sealfs_import::Blobs>) = if sealfs_registry::is_image_ref(image)
    {
        let (image, blobs) = registry::open(image, &platform, &tls.registry_options())?;
        (image, Arc::new(blobs))
    } else {
        let (dir, reference) = layout::split_arg(image);
        let layout = sealfs_import::OciLayout::open(&dir)?;
        (
            layout.image(reference.as_deref(), &platform)?,
            Arc::new(layout),
        )
    };
    Ok(match layer {
        None => image.flattened(blobs),
        Some(which) => {
            let i = image.find_layer(which)?;
            image.layer(blobs, i)
        }
    })
}

/// Runs `sealfs build`.
pub fn run(args: BuildArgs) -> Result<ExitCode> {
    let opts = args.options()?;
    let progress = TermProgress::new(args.quiet);
    let imported = args.tar.is_some() || args.oci.is_some() || args.squashfs.is_some();
    let (src, out) = match (imported, args.paths.as_slice()) {
        (false, [src, out]) => (Some(src), out),
        (true, [out]) => (None, out),
        (false, _) => {
            bail!("expected SRC and OUT (or --tar FILE, --oci IMAGE or --squashfs IMAGE, and OUT)")
        }
        (true, _) => bail!("with --tar, --oci or --squashfs, give only OUT"),
    };
    if args.oci_layer.is_some() && args.no_xattrs {
        bail!("--oci-layer keeps opaque directories as xattrs: it cannot go with --no-xattrs");
    }
    let summary = match (src, &args.tar, &args.oci, &args.squashfs) {
        (Some(src), _, _, _) => sealfs_builder::build(Path::new(src), out, &opts, &progress)?,
        (None, Some(tar), _, _) => {
            let mut source = sealfs_import::TarSource::open(tar)?;
            sealfs_builder::build_from(&mut source, out, &opts, &progress)?
        }
        (None, None, Some(image), _) => {
            let mut source =
                oci_source(image, &args.platform, args.oci_layer.as_deref(), &args.tls)?;
            sealfs_builder::build_from(&mut source, out, &opts, &progress)?
        }
        (None, None, None, Some(image)) => {
            let mut source = sealfs_import::SquashfsSource::open(image)?;
            sealfs_builder::build_from(&mut source, out, &opts, &progress)?
        }
        (None, None, None, None) => unreachable!("matched above"),
    };
    if let Some(seal) = &summary.seal {
        println!("{}", seal.digest);
    }
    if !args.quiet {
        for w in &summary.warnings {
            eprintln!("sealfs: warning: {w}");
        }
        eprintln!(
            "{}: {} inodes ({} directories), {} bytes of file data, image {} bytes",
            sealfs_text::escape_path(out),
            summary.inodes,
            summary.dirs,
            summary.data_bytes,
            summary.image_bytes
        );
    }
    Ok(ExitCode::SUCCESS)
}
