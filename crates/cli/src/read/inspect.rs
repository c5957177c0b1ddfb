//! `sealfs inspect`: what an image is: superblock, contents, seal, and what the open established
//! about it (authenticated, self-consistent or unverified), stated plainly.
//!
//! The counts come from a walk of the whole tree through the reader (so with a seal, every metadata
//! block is read through the checks of the open); a walk that fails still prints the rest.

use super::{fault, hex, show, Status};
use crate::open::{ImageArgs, OpenImage};
use anyhow::{Context, Result};
use clap::Args;
use sealfs_format::{self as fmt};
use sealfs_reader::{Authority, Checker, Trust, Visit, WalkEvent};
use sealfs_reader::{FileType, Image};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

/// Arguments of `sealfs inspect`.
#[derive(Args)]
pub struct InspectArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// Print a JSON object.
    #[arg(long)]
    json: bool,
}

const COMPAT: &[(u32, &str)] = &[
    (fmt::EROFS_FEATURE_COMPAT_SB_CHKSUM, "sb_csum"),
    (fmt::EROFS_FEATURE_COMPAT_MTIME, "mtime"),
    (fmt::EROFS_FEATURE_COMPAT_XATTR_FILTER, "xattr_filter"),
    (
        sealfs_reader::superblock::EROFS_FEATURE_COMPAT_SHARED_EA_IN_METABOX,
        "shared_ea_in_metabox",
    ),
    (
        sealfs_reader::superblock::EROFS_FEATURE_COMPAT_PLAIN_XATTR_PFX,
        "plain_xattr_pfx",
    ),
];

const INCOMPAT: &[(u32, &str)] = &[
    (fmt::EROFS_FEATURE_INCOMPAT_ZERO_PADDING, "0padding"),
    (fmt::EROFS_FEATURE_INCOMPAT_COMPR_CFGS, "compr_cfgs"),
    (fmt::EROFS_FEATURE_INCOMPAT_CHUNKED_FILE, "chunked_file"),
    (fmt::EROFS_FEATURE_INCOMPAT_DEVICE_TABLE, "device_table"),
    (fmt::EROFS_FEATURE_INCOMPAT_ZTAILPACKING, "ztailpacking"),
    (fmt::EROFS_FEATURE_INCOMPAT_FRAGMENTS, "fragments"),
    (fmt::EROFS_FEATURE_INCOMPAT_XATTR_PREFIXES, "xattr_prefixes"),
    (fmt::EROFS_FEATURE_INCOMPAT_48BIT, "48bit"),
    (fmt::EROFS_FEATURE_INCOMPAT_METABOX, "metabox"),
];

/// Names of the bits set in `bits` (unknown ones in hex).
fn feature_names(bits: u32, table: &[(u32, &str)]) -> Vec<String> {
    let mut names = Vec::new();
    let mut known = 0;
    for &(bit, name) in table {
        known |= bit;
        if bits & bit != 0 {
            names.push(name.to_string());
        }
    }
    for i in 0..32 {
        let bit = 1u32 << i;
        if bits & bit != 0 && known & bit == 0 {
            names.push(format!("{bit:#x}"));
        }
    }
    names
}

/// What a walk of the tree counted.
#[derive(Default)]
struct Counts {
    inodes: u64,
    dirs: u64,
    files: u64,
    symlinks: u64,
    devices: u64,
    fifos: u64,
    sockets: u64,
    hard_linked: u64,
    file_bytes: u64,
    entries: u64,
    /// Per storage kind ("stored", "lz4", "zstd", ...): (files, decoded bytes, stored bytes).
    storage: std::collections::BTreeMap<&'static str, (u64, u64, u64)>,
}

/// Adds a regular file's extents to the per-algorithm totals: decoded bytes and the bytes the image
/// spends on them (whole pclusters; inline tails count their own size).
fn account_storage(img: &Image, inode: &sealfs_reader::Inode, c: &mut Counts) -> Result<()> {
    use sealfs_reader::ExtentKind;
    let mut seen = HashSet::new();
    let mut kinds = HashSet::new();
    for e in img.map_range(inode, 0, inode.size())? {
        let (kind, stored) = match e.kind {
            ExtentKind::Compressed {
                physical,
                plen,
                algorithm,
                ..
            } => {
                // An extent may come back in pieces; count its pcluster once.
                (
                    algorithm.name(),
                    if seen.insert(physical) { plen } else { 0 },
                )
            }
            ExtentKind::Mapped { .. } | ExtentKind::Inline { .. } => ("stored", e.length),
            ExtentKind::Hole => ("hole", 0),
            // Stored in the packed inode, counted there.
            ExtentKind::Fragment { .. } => ("fragment", 0),
        };
        let t = c.storage.entry(kind).or_default();
        if kinds.insert(kind) {
            t.0 += 1;
        }
        t.1 += e.length;
        t.2 += stored;
    }
    Ok(())
}

/// Walks the tree from the root: every inode counted once, directories entered once.
fn count(img: &Image) -> Result<Counts> {
    let mut c = Counts::default();
    let root = img.root()?;
    let mut names: HashMap<u64, u32> = HashMap::new();
    c.inodes = 1;
    c.dirs = 1;
    img.walk(&root, b"/", &mut |event| -> Result<Visit> {
        let e = match event {
            WalkEvent::Dir { .. } => return Ok(Visit::Continue),
            WalkEvent::Error { path, error, .. } => {
                return Err(anyhow::Error::new(error).context(show(path)))
            }
            WalkEvent::Entry(e) => e,
        };
        c.entries += 1;
        let inode = e.inode;
        if inode.is_dir() {
            if e.revisited {
                return Err(fault(format!(
                    "{}: directory nid {} reached twice: the image has a directory cycle",
                    show(e.path),
                    e.entry.nid
                )));
            }
            c.inodes += 1;
            c.dirs += 1;
            return Ok(Visit::Continue);
        }
        let n = names.entry(e.entry.nid).or_default();
        *n += 1;
        if *n == 2 {
            c.hard_linked += 1;
        }
        if *n > 1 {
            return Ok(Visit::Continue);
        }
        c.inodes += 1;
        match inode.file_type() {
            FileType::Regular => {
                c.files += 1;
                c.file_bytes += inode.size();
                account_storage(img, inode, &mut c).with_context(|| show(e.path))?;
            }
            FileType::Symlink => c.symlinks += 1,
            FileType::CharDevice | FileType::BlockDevice => c.devices += 1,
            FileType::Fifo => c.fifos += 1,
            FileType::Socket => c.sockets += 1,
            FileType::Directory => unreachable!("handled above"),
        }
        Ok(Visit::Continue)
    })?;
    Ok(c)
}

/// The trust level, in one sentence. `pinned`: the manifest digest of a registry reference named
/// by digest, when that (not `--digest`) is what vouched for the image digest.
fn trust_text(trust: &Trust, pinned: Option<&str>) -> (&'static str, String) {
    match trust {
        Trust::Authenticated {
            digest: d,
            authority: Authority::Key { fingerprint },
            ..
        } => (
            "authenticated",
            format!("authenticated: signed by {fingerprint}, whose statement names {d}, and every block read is checked against it"),
        ),
        Trust::Authenticated { digest: d, .. } => (
            "authenticated",
            match pinned {
                Some(manifest) => format!("authenticated: the seal's digest equals {d}, the image digest stated by the manifest the reference names by digest ({manifest}), and every block read is checked against it"),
                None => format!("authenticated: the seal's digest equals --digest {d}, and every block read is checked against it"),
            },
        ),
        Trust::SelfConsistent { digest: d, .. } => (
            "self-consistent",
            format!("self-consistent only: every block read is checked against the image's own seal ({d}), but nobody vouched for that seal; give --digest to authenticate"),
        ),
        Trust::Unverified => (
            "unverified",
            "unverified: no block is checked (plain image, or --verify=none); the contents are taken on trust".to_string(),
        ),
    }
}

fn uuid_text(u: &[u8; 16]) -> String {
    let h = hex(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Runs `sealfs inspect`.
pub fn run(args: InspectArgs) -> Result<ExitCode> {
    if !args.image.is_remote() && args.image.image.is_dir() {
        return crate::kernel::inspect(&args.image.image, args.json);
    }
    args.image.refuse_double()?;
    let (opened, _, located): (OpenImage, _, _) = args.image.open_located()?;
    let img = &opened.image;
    let sb = img.superblock();
    let file_size = opened.image_length;
    let mut status = Status::default();
    let counts = match count(img) {
        Ok(c) => Some(c),
        Err(e) => {
            status.error(&e.context("walking the tree"));
            None
        }
    };
    // A reference named by digest vouches for the image digest its manifest states, unless
    // --digest was given too.
    let pinned = located
        .as_ref()
        .filter(|l| l.found.pinned && args.image.digest.is_none())
        .map(|l| l.found.manifest.digest.as_str());
    let (trust_key, mut trust_line) = trust_text(&opened.trust, pinned);
    let offloaded = opened.trust.checker() == Some(Checker::Kernel);
    let verified_by = match (&opened.trust, offloaded) {
        (Trust::Unverified, _) => "none",
        (_, true) => {
            "kernel fs-verity (offloaded: the image file's kernel digest is the image digest)"
        }
        (_, false) => "sealfs (userspace, every block against the Merkle tree)",
    };
    if offloaded {
        trust_line.push_str("; verification is offloaded to the kernel's fs-verity");
    }

    let seal = opened.seal.as_ref().map(|s| {
        let h = &s.header;
        let digest = sealfs_verity::file_digest(&s.params, &h.descriptor);
        let files = opened
            .recorded_file_digests()
            .map_err(|e| sealfs_reader::ErrorChain(&e).to_string());
        let d = s.params.digest_size();
        (s, digest, files, hex(&h.root_hash[..d]))
    });
    if let Some((_, _, Err(e), _)) = &seal {
        status.error(&fault(e.clone()));
    }

    let signatures = match &opened.seal {
        Some(s) => signature_list(s, &args.image, located.as_ref()),
        None => Ok(Vec::new()),
    };
    if let Err(e) = &signatures {
        status.error(&fault(format!(
            "{}: {e}",
            sealfs_text::escape_path(&args.image.image)
        )));
    }
    let signatures = signatures.unwrap_or_default();

    let mut out = std::io::stdout().lock();
    if args.json {
        let counts_json = counts.as_ref().map(|c| {
            json!({
                "inodes": c.inodes,
                "entries": c.entries,
                "dirs": c.dirs,
                "files": c.files,
                "symlinks": c.symlinks,
                "devices": c.devices,
                "fifos": c.fifos,
                "sockets": c.sockets,
                "hard_linked_inodes": c.hard_linked,
                "file_bytes": c.file_bytes,
                "storage": c.storage.iter().map(|(k, (files, decoded, stored))| (k.to_string(), json!({
                    "files": files,
                    "bytes": decoded,
                    "stored_bytes": stored,
                    "ratio": if *stored > 0 { *decoded as f64 / *stored as f64 } else { 0.0 },
                }))).collect::<serde_json::Map<_, _>>(),
            })
        });
        let seal_json = seal.as_ref().map(|(s, digest, files, root)| {
            let h = &s.header;
            json!({
                "hash_alg": s.params.alg().name(),
                "merkle_block_size": s.params.block_size(),
                "salt": hex(s.params.salt()),
                "erofs_length": h.erofs_length.get(),
                "tree_offset": h.tree_offset.get(),
                "tree_size": h.tree_length.get(),
                "file_digests": files.as_ref().ok().map(|f| f.as_ref().map_or(0, |f| f.len())),
                "file_digests_in": files.as_ref().ok().and_then(|f| f.as_ref().map(|f| f.origin().name())),
                "detached": h.flags & fmt::SEAL_FLAG_DETACHED != 0,
                "signatures_size": h.sig_length.get(),
                "root_hash": root,
                "digest": digest.to_string(),
            })
        });
        let mut v = json!({
            "image_size": file_size,
            "erofs_length": opened.erofs_length,
            "trust": trust_key,
            "trust_text": trust_line,
            "verified_by": verified_by,
            "digest": seal.as_ref().map(|(_, d, _, _)| d.to_string()),
            "superblock": {
                "uuid": uuid_text(&sb.uuid),
                "block_size": sb.block_size(),
                "blocks": sb.blocks,
                "inodes": sb.inos,
                "root_nid": sb.root_nid,
                "meta_blkaddr": sb.meta_blkaddr,
                "xattr_blkaddr": sb.xattr_blkaddr,
                "epoch": sb.epoch,
                "fixed_nsec": sb.fixed_nsec,
                "build_time": sb.build_time_abs(),
                "checksum": format!("{:#010x}", sb.checksum),
                "feature_compat": sb.feature_compat,
                "feature_incompat": sb.feature_incompat,
                "features_compat": feature_names(sb.feature_compat, COMPAT),
                "features_incompat": feature_names(sb.feature_incompat, INCOMPAT),
                "xattr_filter": sb.xattr_filter_enabled(),
                "xattr_prefixes": sb.xattr_prefix_count,
            },
            "counts": counts_json,
            "seal": seal_json,
            "signatures": signatures.iter().map(SigInfo::json).collect::<Vec<_>>(),
            "registry": located.as_ref().map(|l| json!({
                "reference": l.found.reference().to_string(),
                "manifest_digest": l.found.manifest.digest,
                "pinned": l.found.pinned,
                "blob_digest": l.found.artifact.image.digest,
                "blob_size": l.found.artifact.image.size,
                "sidecar_digest": l.found.artifact.sidecar.as_ref().map(|d| d.digest.clone()),
            })),
        });
        sealfs_text::json_insert(&mut v, "image", args.image.image.as_os_str().as_bytes());
        sealfs_text::json_insert(&mut v["superblock"], "label", sb.label());
        writeln!(out, "{v}")?;
        out.flush()?;
        return Ok(status.code());
    }

    let mut t = String::new();
    let mut line = |k: &str, v: String| t.push_str(&format!("  {k:<22} {v}\n"));
    let image = sealfs_text::escape_path(&args.image.image);
    line("image", format!("{image} ({file_size} bytes)"));
    if let Some(l) = &located {
        line("registry", l.found.reference().to_string());
        line(
            "manifest",
            format!(
                "{} ({}, resolved once: every read is of its blobs)",
                l.found.manifest.digest,
                if l.found.pinned {
                    "named by digest"
                } else {
                    "found by tag"
                }
            ),
        );
        line(
            "blob",
            format!(
                "{} ({} bytes)",
                l.found.artifact.image.digest, l.found.artifact.image.size
            ),
        );
    }
    line("trust", trust_line.clone());
    line("verified by", verified_by.to_string());
    if let Some((_, digest, _, _)) = &seal {
        line("digest", digest.to_string());
    }
    line("uuid", uuid_text(&sb.uuid));
    line(
        "label",
        if sb.label().is_empty() {
            "(none)".into()
        } else {
            show(sb.label())
        },
    );
    line("block size", sb.block_size().to_string());
    line(
        "blocks",
        format!("{} (EROFS length {} bytes)", sb.blocks, opened.erofs_length),
    );
    line("inodes (superblock)", sb.inos.to_string());
    line("root nid", sb.root_nid.to_string());
    line(
        "epoch",
        format!(
            "{} (+{} ns), built at {}",
            sb.epoch,
            sb.fixed_nsec,
            super::format_time(sb.build_time_abs(), 0, super::TimeStyle::Full)
        ),
    );
    line(
        "features (compat)",
        feature_names(sb.feature_compat, COMPAT).join(" "),
    );
    line(
        "features (incompat)",
        match feature_names(sb.feature_incompat, INCOMPAT) {
            v if v.is_empty() => "none".into(),
            v => v.join(" "),
        },
    );
    match &counts {
        Some(c) => {
            line(
                "inodes",
                format!(
                    "{} ({} directories, {} regular files, {} symlinks, {} devices, {} fifos, {} sockets)",
                    c.inodes, c.dirs, c.files, c.symlinks, c.devices, c.fifos, c.sockets
                ),
            );
            line("directory entries", c.entries.to_string());
            line("hard-linked inodes", c.hard_linked.to_string());
            line("file bytes", c.file_bytes.to_string());
            for (k, (files, decoded, stored)) in &c.storage {
                let ratio = if *stored > 0 {
                    format!(", ratio {:.2}", *decoded as f64 / *stored as f64)
                } else {
                    String::new()
                };
                line(
                    &format!("data: {k}"),
                    format!("{files} files, {decoded} bytes in {stored} bytes{ratio}"),
                );
            }
            let (decoded, stored) = c
                .storage
                .values()
                .fold((0, 0), |a, v| (a.0 + v.1, a.1 + v.2));
            if stored > 0 {
                line(
                    "data: total",
                    format!(
                        "{decoded} bytes in {stored} bytes, ratio {:.2}",
                        decoded as f64 / stored as f64
                    ),
                );
            }
        }
        None => line("inodes", "unknown: the walk of the tree failed".into()),
    }
    match &seal {
        None => line("seal", "none (plain EROFS image)".into()),
        Some((s, _, files, root)) => {
            let h = &s.header;
            line(
                "seal",
                if h.flags & fmt::SEAL_FLAG_DETACHED != 0 {
                    "detached (sidecar)".into()
                } else {
                    "attached (after the EROFS blocks)".into()
                },
            );
            line("hash algorithm", s.params.alg().name().into());
            line("Merkle block size", s.params.block_size().to_string());
            line(
                "salt",
                if s.params.salt().is_empty() {
                    "none".into()
                } else {
                    hex(s.params.salt())
                },
            );
            line("sealed length", h.erofs_length.get().to_string());
            line(
                "Merkle tree",
                format!(
                    "{} bytes at byte {}",
                    h.tree_length.get(),
                    h.tree_offset.get()
                ),
            );
            line("root hash", root.clone());
            line(
                "per-file digests",
                match files {
                    Ok(Some(f)) if f.origin() == sealfs_reader::DigestOrigin::Trailer => format!(
                        "{}, in the seal's trailer: UNAUTHENTICATED (no digest or signature covers them; a seal written before they moved into the image)",
                        f.len()
                    ),
                    Ok(Some(f)) => format!("{}, in the image (covered by the image digest)", f.len()),
                    Ok(None) => "none recorded (computed from the content when asked)".into(),
                    Err(e) => format!("unreadable: {e}"),
                },
            );
            line(
                "signatures",
                if signatures.is_empty() {
                    "none".into()
                } else {
                    signatures.len().to_string()
                },
            );
            for sig in &signatures {
                line("  signed by", sig.text());
            }
        }
    }
    out.write_all(t.as_bytes())?;
    out.flush()?;
    Ok(status.code())
}

/// One signature, as `inspect` shows it.
struct SigInfo {
    fingerprint: sealfs_trust::Fingerprint,
    /// Where it was found.
    location: &'static str,
    /// It verifies with the key it names.
    valid: bool,
    /// One of the keys given.
    trusted: bool,
    statement: Result<sealfs_trust::Statement, String>,
    /// The statement binds this seal.
    binds: bool,
}

impl SigInfo {
    fn text(&self) -> String {
        let mut t = format!(
            "{} ({}, {}{})",
            self.fingerprint,
            self.location,
            if self.valid { "valid" } else { "DAMAGED" },
            if self.trusted {
                ", key given"
            } else {
                ", key not given: vouches for nothing"
            }
        );
        match &self.statement {
            Ok(s) => {
                t.push_str(&format!(": {}", s.digest));
                if !self.binds {
                    t.push_str(" (ANOTHER IMAGE)");
                }
                for (k, v) in [("name", &s.name), ("version", &s.version)] {
                    if let Some(v) = v {
                        t.push_str(&format!(", {k} {}", show(v.as_bytes())));
                    }
                }
                if let Some(c) = s.created {
                    t.push_str(&format!(", created {c}"));
                }
            }
            Err(e) => t.push_str(&format!(": {e}")),
        }
        t
    }

    fn json(&self) -> serde_json::Value {
        let statement = self.statement.as_ref().ok().map(|s| {
            json!({
                "digest": s.digest.to_string(),
                "hash_algorithm": s.digest.alg().name(),
                "block_size": s.block_size,
                "salt": hex(&s.salt),
                "erofs_length": s.erofs_length,
                "name": s.name,
                "version": s.version,
                "created": s.created,
            })
        });
        json!({
            "fingerprint": self.fingerprint.to_string(),
            "location": self.location,
            "valid": self.valid,
            "key_given": self.trusted,
            "binds_this_image": self.binds,
            "statement": statement,
            "statement_error": self.statement.as_ref().err(),
        })
    }
}

/// The signatures of the seal and the detached ones, each checked with the key it names (whether
/// that key is trusted is what `--key` decides).
fn signature_list(
    seal: &sealfs_reader::Seal,
    args: &ImageArgs,
    located: Option<&sealfs_registry::Opened>,
) -> Result<Vec<SigInfo>> {
    let keys = args.keys.load()?;
    let own = seal.signatures().map_err(|e| anyhow::anyhow!("{e}"))?;
    // `IMAGE.sig` beside a local image is looked for by `gather_signatures`; `URL.sig` here.
    let source = if args.is_remote() {
        let name = sealfs_text::escape_path(&args.image);
        sealfs_reader::Source::reader(std::sync::Arc::new(Vec::new()), name)
    } else {
        sealfs_reader::Source::Path(args.image.clone())
    };
    let detached = match (args.keys.signatures.as_deref(), args.image.to_str()) {
        (Some(p), _) => Some(crate::open::location(p, &args.tls)?),
        // In a registry: the signatures attached to the image as referrers.
        (None, _) if located.is_some() => {
            let found = &located.expect("checked").found;
            found.signatures()?.map(|b| {
                sealfs_reader::Source::reader(
                    std::sync::Arc::new(b),
                    format!("{} (referrers)", found.reference()),
                )
            })
        }
        (None, Some(url)) if args.is_remote() => {
            sealfs_remote::detached_signatures(url, &args.tls.remote_options())?
        }
        (None, _) => None,
    };
    let all = sealfs_reader::open::gather_signatures(seal, &source, detached.as_ref())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let digest = seal.digest();
    Ok(all
        .into_iter()
        .enumerate()
        .map(|(i, sig)| {
            let statement =
                sealfs_trust::Statement::parse(&sig.statement).map_err(|e| e.to_string());
            let binds = statement
                .as_ref()
                .is_ok_and(|s| s.binds(&seal.params, &digest, seal.erofs_length()).is_ok());
            SigInfo {
                fingerprint: sig.fingerprint(),
                location: if i < own.len() {
                    "in the seal"
                } else {
                    "detached"
                },
                valid: sig.verifies(),
                trusted: keys.iter().any(|k| k.to_bytes() == sig.public_key),
                statement,
                binds,
            }
        })
        .collect())
}
