//! `sealfs digest` and `sealfs verify`: re-hash the EROFS bytes and check them against the seal.

use crate::files;
use crate::progress::TermProgress;
use anyhow::{anyhow, Context, Result};
use clap::Args;
use rayon::prelude::*;
use sealfs_builder::Progress;
use sealfs_format::{self as fmt, FromBytes, SealError, SealFooter, SealHeader};
use sealfs_verity::{BlockHasher, Digest, HashAlg, Params, TreeGeometry};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A seal as found at the end of an image or in a sidecar.
pub struct Seal {
    pub header: SealHeader,
    pub params: Params,
    /// Where the tree and sections are read from.
    pub file: File,
}

/// What opening an image found.
pub enum Opened {
    /// A sealed image (or image + sidecar).
    Sealed(Box<Seal>),
    /// A plain EROFS image of this many bytes.
    Plain(u64),
}

/// Why an image could not be checked: `Mismatch` problems exit 1, `CannotRun` exit 2.
pub enum OpenError {
    Mismatch(String),
    CannotRun(anyhow::Error),
}

fn read_array<const N: usize>(file: &File, offset: u64) -> std::io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

/// Length of the EROFS bytes according to the superblock, or `None` if there is no EROFS superblock.
fn erofs_length(image: &File) -> Option<u64> {
    let sb = read_array::<128>(image, fmt::EROFS_SUPER_OFFSET).ok()?;
    let sb = fmt::SuperBlock::read_from_bytes(&sb).ok()?;
    (sb.magic.get() == fmt::EROFS_SUPER_MAGIC_V1 && (9..=16).contains(&sb.blkszbits))
        .then(|| (sb.blocks.get() as u64) << sb.blkszbits)
}

/// Opens `image` and finds its seal (at its end, or in `sidecar`).
pub fn open(
    image_path: &Path,
    sidecar: Option<&Path>,
) -> std::result::Result<(File, Opened), OpenError> {
    let cannot = |e: anyhow::Error| OpenError::CannotRun(e);
    let image = File::open(image_path)
        .with_context(|| format!("{}: open", image_path.display()))
        .map_err(cannot)?;
    let image_len = image.metadata().map_err(|e| cannot(e.into()))?.len();
    let (seal_file, seal_path) = match sidecar {
        Some(p) => (
            File::open(p)
                .with_context(|| format!("{}: open", p.display()))
                .map_err(cannot)?,
            p,
        ),
        None => (image.try_clone().map_err(|e| cannot(e.into()))?, image_path),
    };
    let seal_len = seal_file.metadata().map_err(|e| cannot(e.into()))?.len();
    let footer = if seal_len >= fmt::SEAL_FOOTER_SIZE {
        let bytes = read_array::<64>(&seal_file, seal_len - fmt::SEAL_FOOTER_SIZE)
            .map_err(|e| cannot(e.into()))?;
        SealFooter::parse(&bytes, seal_len)
    } else {
        Err(SealError::NoFooter)
    };
    let where_ = seal_path.display();
    let footer = match footer {
        Ok(f) => f,
        Err(SealError::NoFooter) => {
            if sidecar.is_some() {
                return Err(OpenError::Mismatch(format!(
                    "{where_}: no seal footer: not a seal file, or truncated or extended"
                )));
            }
            return match erofs_length(&image) {
                None => Err(cannot(anyhow!("{where_}: not an EROFS image (no superblock magic at byte 1024)"))),
                Some(len) if len == image_len => Ok((image, Opened::Plain(len))),
                Some(len) if len < image_len => Err(OpenError::Mismatch(format!(
                    "{where_}: {} bytes follow the EROFS blocks but end in no seal footer: the seal is truncated, extended or damaged",
                    image_len - len
                ))),
                Some(len) => Err(OpenError::Mismatch(format!("{where_}: truncated: the superblock claims {len} bytes, the file has {image_len}"))),
            };
        }
        Err(e) => return Err(OpenError::Mismatch(format!("{where_}: {e}"))),
    };
    let hbytes =
        read_array::<512>(&seal_file, footer.header_offset.get()).map_err(|e| cannot(e.into()))?;
    let header = SealHeader::parse(&hbytes, &footer)
        .map_err(|e| OpenError::Mismatch(format!("{where_}: {e}")))?;
    let detached = header.flags & fmt::SEAL_FLAG_DETACHED != 0;
    if detached != sidecar.is_some() {
        return Err(OpenError::Mismatch(format!(
            "{where_}: the seal says it is {}, but it was found {}",
            if detached { "a sidecar" } else { "attached" },
            if sidecar.is_some() {
                "in a sidecar"
            } else {
                "attached"
            }
        )));
    }
    let erofs_len = header.erofs_length.get();
    if erofs_len > image_len {
        return Err(OpenError::Mismatch(format!(
            "{}: truncated: the seal covers {erofs_len} bytes, the file has {image_len}",
            image_path.display()
        )));
    }
    if detached && erofs_len != image_len {
        return Err(OpenError::Mismatch(format!(
            "{}: {} bytes follow the {erofs_len} bytes the sidecar seal covers",
            image_path.display(),
            image_len - erofs_len
        )));
    }
    let alg = HashAlg::from_id(header.hash_algorithm)
        .map_err(|e| OpenError::Mismatch(format!("{where_}: {e}")))?;
    let params = Params::from_log_block_size(alg, header.log_blocksize, header.salt())
        .map_err(|e| OpenError::Mismatch(format!("{where_}: seal parameters: {e}")))?;
    let geometry = TreeGeometry::new(&params, erofs_len);
    if geometry.tree_size() != header.tree_length.get() {
        return Err(OpenError::Mismatch(format!(
            "{where_}: the tree should take {} bytes for {erofs_len} bytes of image; the seal says {}",
            geometry.tree_size(),
            header.tree_length.get()
        )));
    }
    Ok((
        image,
        Opened::Sealed(Box::new(Seal {
            header,
            params,
            file: seal_file,
        })),
    ))
}

/// One thing `verify` found wrong.
#[derive(Debug)]
pub enum Problem {
    /// A block of the EROFS bytes does not match its hash; `owner` says what it holds, when known.
    DataBlock { index: u64, owner: Option<String> },
    /// A file's recorded fs-verity digest disagrees with its content (or a file has none).
    FileDigest { path: String, what: String },
    /// A block of the stored Merkle tree does not match its parent (or the root).
    TreeBlock { level: usize, index: u64 },
    /// The trailer is damaged or inconsistent.
    Trailer(String),
    /// The image is not the one `--digest` names.
    Digest { expected: String, actual: String },
}

impl Problem {
    /// The problem as a JSON object with a `kind` and its coordinates.
    fn to_json(&self) -> serde_json::Value {
        let message = self.to_string();
        match self {
            Problem::DataBlock { index, owner } => {
                serde_json::json!({"kind": "data_block", "block": index, "offset": index * 4096, "owner": owner, "message": message})
            }
            Problem::FileDigest { path, .. } => {
                serde_json::json!({"kind": "file_digest", "path": path, "message": message})
            }
            Problem::TreeBlock { level, index } => {
                serde_json::json!({"kind": "tree_block", "level": level, "index": index, "message": message})
            }
            Problem::Trailer(_) => serde_json::json!({"kind": "trailer", "message": message}),
            Problem::Digest { expected, actual } => {
                serde_json::json!({"kind": "digest", "expected": expected, "actual": actual, "message": message})
            }
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::DataBlock { index, owner } => {
                write!(
                    f,
                    "image block {index} (bytes {}..{}) does not match its hash",
                    index * 4096,
                    (index + 1) * 4096
                )?;
                match owner {
                    Some(o) => write!(f, ": {o}"),
                    None => Ok(()),
                }
            }
            Problem::FileDigest { path, what } => write!(f, "{path}: {what}"),
            Problem::TreeBlock { level, index } => {
                write!(f, "Merkle tree level {level} block {index} is damaged")
            }
            Problem::Trailer(what) => write!(f, "{what}"),
            Problem::Digest { expected, actual } => {
                write!(f, "digest mismatch: expected {expected}, image is {actual}")
            }
        }
    }
}

/// Hashes every block of `image[0..len)`: the level-0 hashes, concatenated.
fn leaf_hashes(
    params: &Params,
    image: &File,
    len: u64,
    progress: &dyn Progress,
) -> Result<Vec<u8>> {
    progress.begin("hashing", Some(len));
    let leaves =
        sealfs_verity::leaf_hashes_from_file(params, image, 0, len, &|n| progress.advance(n))?;
    progress.end();
    Ok(leaves)
}

/// Checks the stored tree top-down against the root, then every data block against the level-0 hashes
/// of the authentic tree blocks. Returns the problems found.
fn check_tree(
    params: &Params,
    len: u64,
    root: &[u8],
    tree: &[u8],
    leaves: &[u8],
    max_report: usize,
) -> Vec<Problem> {
    let g = TreeGeometry::new(params, len);
    let (bs, d) = (params.block_size(), params.digest_size());
    let hasher = sealfs_verity::BlockHasher::new(params);
    let mut problems = Vec::new();
    if len == 0 {
        return problems;
    }
    if g.num_levels() == 0 {
        if &leaves[..d] != root {
            problems.push(Problem::DataBlock {
                index: 0,
                owner: None,
            });
        }
        return problems;
    }
    let mut authentic = vec![false; g.tree_blocks() as usize];
    for level in (0..g.num_levels()).rev() {
        for i in 0..g.level_blocks(level) {
            let b = (g.level_start(level) + i) as usize;
            let digest = hasher.hash_block(&tree[b * bs..(b + 1) * bs]);
            let ok = if level + 1 == g.num_levels() {
                digest.as_bytes() == root
            } else {
                let loc = g
                    .hash_location(level + 1, i)
                    .expect("index inside the level");
                authentic[loc.block as usize]
                    && &tree[loc.block as usize * bs + loc.offset..][..d] == digest.as_bytes()
            };
            authentic[b] = ok;
            let parent_ok = level + 1 == g.num_levels() || {
                let loc = g
                    .hash_location(level + 1, i)
                    .expect("index inside the level");
                authentic[loc.block as usize]
            };
            if !ok && parent_ok && problems.len() < max_report {
                problems.push(Problem::TreeBlock { level, index: i });
            }
        }
    }
    for j in 0..g.data_blocks() {
        let loc = g.hash_location(0, j).expect("data block inside the image");
        if authentic[loc.block as usize]
            && tree[loc.block as usize * bs + loc.offset..][..d] != leaves[j as usize * d..][..d]
            && problems.len() < max_report
        {
            problems.push(Problem::DataBlock {
                index: j,
                owner: None,
            });
        }
    }
    problems
}

/// Reads the per-file digest section of a seal (checked against the header's CRC), if there is one.
pub fn read_file_digests(seal: &Seal) -> std::result::Result<Option<Vec<(u64, Digest)>>, String> {
    let h = &seal.header;
    if h.files_length.get() == 0 {
        return Ok(None);
    }
    let mut bytes = vec![0u8; h.files_length.get() as usize];
    seal.file
        .read_exact_at(&mut bytes, h.files_offset.get())
        .map_err(|e| format!("cannot read the per-file digest section: {e}"))?;
    if fmt::seal_crc(&bytes) != h.files_crc.get() {
        return Err("the per-file digest section is damaged (checksum mismatch)".into());
    }
    files::parse_section(&bytes).map(Some)
}

/// Opens the EROFS part of an image with the reader.
pub fn reader_for(image: &File, len: u64) -> Result<sealfs_reader::Image> {
    reader_with(image, len, &sealfs_reader::Options::default())
}

/// Opens the EROFS part of an image with the reader and the given options, without verification.
pub fn reader_with(
    image: &File,
    len: u64,
    options: &sealfs_reader::Options,
) -> Result<sealfs_reader::Image> {
    let source = sealfs_reader::SubRange::new(image.try_clone()?, 0, len);
    Ok(sealfs_reader::Image::open_unverified_with(source, options)?)
}

fn path_text(p: &[u8]) -> String {
    String::from_utf8_lossy(p).into_owned()
}

/// Names the owners of damaged blocks and checks the per-file digests against the image content (from
/// the level-0 hashes already computed: file data is not hashed again). The walk reads the image
/// through the reader; where damaged metadata stops it, blocks stay unnamed.
fn check_files(image: &File, seal: &Seal, leaves: &[u8], problems: &mut Vec<Problem>) {
    let len = seal.header.erofs_length.get();
    let recorded = read_file_digests(seal);
    if let Err(what) = &recorded {
        problems.push(Problem::Trailer(what.clone()));
    }
    let walk = reader_for(image, len).and_then(|img| {
        let files = files::regular_files(&img)?;
        Ok((img, files))
    });
    let (img, files) = match walk {
        Ok(x) => x,
        Err(e) => {
            eprintln!("sealfs: note: cannot walk the image to name files: {e:#}");
            return;
        }
    };
    // Owners of damaged blocks.
    let bad: std::collections::HashSet<u64> = problems
        .iter()
        .filter_map(|p| match p {
            Problem::DataBlock { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    if !bad.is_empty() {
        let mut owner = std::collections::HashMap::new();
        for (nid, paths) in &files {
            if let Ok(blocks) = img
                .inode(*nid)
                .map_err(anyhow::Error::from)
                .and_then(|i| files::file_blocks(&img, &i))
            {
                for (_, ib) in blocks {
                    if bad.contains(&ib) {
                        owner.insert(ib, format!("data of /{}", path_text(&paths[0])));
                    }
                }
            }
        }
        for p in problems.iter_mut() {
            if let Problem::DataBlock { index, owner: o } = p {
                *o =
                    Some(owner.remove(index).unwrap_or_else(|| {
                        "metadata (inodes, directories, xattrs) or tails".into()
                    }));
            }
        }
    }
    let Ok(Some(recorded)) = recorded else { return };
    let alg = match recorded.first() {
        Some((_, d)) => d.alg(),
        None => seal.params.alg(),
    };
    let fparams = files::file_params(alg);
    let share = seal.params == fparams;
    let hasher = BlockHasher::new(&fparams);
    let recorded_nids: std::collections::BTreeSet<u64> = recorded.iter().map(|(n, _)| *n).collect();
    for nid in files.keys().filter(|n| !recorded_nids.contains(n)) {
        problems.push(Problem::FileDigest {
            path: format!("/{}", path_text(&files[nid][0])),
            what: "no recorded fs-verity digest".into(),
        });
    }
    let results: Vec<Option<Problem>> = recorded
        .par_iter()
        .map(|(nid, want)| {
            let Some(paths) = files.get(nid) else {
                return Some(Problem::Trailer(format!(
                    "per-file digest for nid {nid}, which is no regular file of the image"
                )));
            };
            let path = format!("/{}", path_text(&paths[0]));
            let got = img
                .inode(*nid)
                .map_err(anyhow::Error::from)
                .and_then(|inode| {
                    if share {
                        files::digest_from_leaves(&img, &inode, &hasher, leaves)
                    } else {
                        files::digest_by_reading(&img, &inode, alg)
                    }
                });
            match got {
                Ok(got) if &got == want => None,
                Ok(got) => Some(Problem::FileDigest {
                    path,
                    what: format!("recorded digest {want}, content hashes to {got}"),
                }),
                Err(e) => Some(Problem::FileDigest {
                    path,
                    what: format!("cannot check its digest: {e:#}"),
                }),
            }
        })
        .collect();
    problems.extend(results.into_iter().flatten());
}

/// `sealfs digest --files`: recorded digests (sealed images) or digests computed by reading (plain ones).
fn print_file_digests(args: &DigestArgs, image: &File, opened: &Opened) -> Result<ExitCode> {
    use std::io::Write;
    let (len, recorded) = match opened {
        Opened::Plain(len) => (*len, None),
        Opened::Sealed(seal) => (
            seal.header.erofs_length.get(),
            read_file_digests(seal).map_err(|e| anyhow!("{}: {e}", args.image.display()))?,
        ),
    };
    let img = reader_for(image, len)?;
    let digests = match recorded {
        Some(d) => d,
        None => {
            let alg: HashAlg = args.hash_alg.as_deref().unwrap_or("sha256").parse()?;
            eprintln!(
                "sealfs: note: {}: no recorded per-file digests; hashing every file",
                args.image.display()
            );
            files::compute_all(&img, alg)?
        }
    };
    let digests: std::collections::HashMap<u64, Digest> = digests.into_iter().collect();
    let mut lines: Vec<(Vec<u8>, &Digest)> = Vec::new();
    for (nid, paths) in files::regular_files(&img)? {
        let d = digests.get(&nid).ok_or_else(|| {
            anyhow!(
                "{}: no recorded digest for nid {nid} (/{})",
                args.image.display(),
                path_text(&paths[0])
            )
        })?;
        lines.extend(paths.into_iter().map(|p| (p, d)));
    }
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (path, d) in lines {
        write!(out, "{d} ")?;
        out.write_all(&path)?;
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `sealfs verify`.
#[derive(Args)]
pub struct VerifyArgs {
    /// The image.
    image: PathBuf,
    /// The digest the image must have (`sha256:<hex>`): without it, verify shows only that the image
    /// agrees with its own seal.
    #[arg(long, value_name = "DIGEST")]
    digest: Option<String>,
    /// Read the seal from this sidecar file.
    #[arg(long, value_name = "PATH")]
    sidecar: Option<PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Stop listing problems after this many.
    #[arg(long, default_value_t = 100)]
    max_problems: usize,
}

struct Outcome {
    problems: Vec<Problem>,
    digest: Option<String>,
    authenticated: bool,
    sealed: bool,
}

/// Runs `sealfs verify`: exit 0 verified, 1 mismatch, 2 could not run.
pub fn run_verify(args: VerifyArgs) -> Result<ExitCode> {
    let progress = TermProgress::new(args.json);
    let expected: Option<Digest> =
        match args.digest.as_deref().map(str::parse::<Digest>).transpose() {
            Ok(d) => d,
            Err(e) => {
                eprintln!("sealfs: error: --digest: {e}");
                return Ok(ExitCode::from(2));
            }
        };
    let outcome = match open(&args.image, args.sidecar.as_deref()) {
        Err(OpenError::CannotRun(e)) => {
            eprintln!("sealfs: error: {e:#}");
            return Ok(ExitCode::from(2));
        }
        Err(OpenError::Mismatch(what)) => Outcome {
            problems: vec![Problem::Trailer(what)],
            digest: None,
            authenticated: false,
            sealed: true,
        },
        Ok((image, Opened::Plain(len))) => {
            let Some(expected) = &expected else {
                eprintln!("sealfs: error: {}: not sealed; give --digest to check it against a known digest", args.image.display());
                return Ok(ExitCode::from(2));
            };
            let params = Params::new(expected.alg(), 4096, b"")?;
            let leaves = leaf_hashes(&params, &image, len, &progress)?;
            let tree = sealfs_verity::Tree::from_leaf_hashes(&params, len, &leaves)?;
            let actual = tree.digest();
            let mut problems = Vec::new();
            if &actual != expected {
                problems.push(Problem::Digest {
                    expected: expected.to_string(),
                    actual: actual.to_string(),
                });
            }
            Outcome {
                problems,
                digest: Some(actual.to_string()),
                authenticated: true,
                sealed: false,
            }
        }
        Ok((image, Opened::Sealed(seal))) => {
            let h = &seal.header;
            let len = h.erofs_length.get();
            let d = seal.params.digest_size();
            let mut tree = vec![0u8; h.tree_length.get() as usize];
            seal.file
                .read_exact_at(&mut tree, h.tree_offset.get())
                .with_context(|| format!("{}: read Merkle tree", args.image.display()))?;
            let leaves = leaf_hashes(&seal.params, &image, len, &progress)?;
            let mut problems = check_tree(
                &seal.params,
                len,
                &h.root_hash[..d],
                &tree,
                &leaves,
                args.max_problems,
            );
            check_files(&image, &seal, &leaves, &mut problems);
            let actual = sealfs_verity::file_digest(&seal.params, &h.descriptor);
            if let Some(expected) = &expected {
                if &actual != expected {
                    problems.push(Problem::Digest {
                        expected: expected.to_string(),
                        actual: actual.to_string(),
                    });
                }
            }
            Outcome {
                problems,
                digest: Some(actual.to_string()),
                authenticated: expected.is_some(),
                sealed: true,
            }
        }
    };
    report(&args, &outcome);
    Ok(if outcome.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn report(args: &VerifyArgs, o: &Outcome) {
    let ok = o.problems.is_empty();
    if args.json {
        let v = serde_json::json!({
            "image": args.image.display().to_string(),
            "verified": ok,
            "sealed": o.sealed,
            "authenticated": ok && o.authenticated,
            "digest": o.digest,
            "problems": o.problems.iter().map(Problem::to_json).collect::<Vec<_>>(),
        });
        println!("{v}");
        return;
    }
    for p in &o.problems {
        match p {
            Problem::Trailer(what) => eprintln!("{what}"),
            _ => eprintln!("{}: {p}", args.image.display()),
        }
    }
    let digest = o.digest.as_deref().unwrap_or("-");
    match (ok, o.authenticated) {
        (true, true) => println!("{}: verified {digest}: authenticated (matches --digest)", args.image.display()),
        (true, false) => println!(
            "{}: self-consistent {digest}: every block matches the seal, but the seal is not authenticated (give --digest)",
            args.image.display()
        ),
        (false, _) => println!("{}: FAILED: {} problem(s)", args.image.display(), o.problems.len()),
    }
}

/// Arguments of `sealfs digest`.
#[derive(Args)]
pub struct DigestArgs {
    /// The image (sealed or plain).
    image: PathBuf,
    /// Read the seal from this sidecar file.
    #[arg(long, value_name = "PATH")]
    sidecar: Option<PathBuf>,
    /// Hash algorithm for a plain image (a sealed one uses its seal's).
    #[arg(long, value_name = "ALG", value_parser = ["sha256", "sha512"])]
    hash_alg: Option<String>,
    /// Print the fs-verity digest of every regular file instead, one `DIGEST PATH` line per path
    /// (as `fsverity digest` prints them), from the digests recorded in the seal. Compare with
    /// `cd TREE && find . -type f -printf '%P\0' | sort -z | xargs -0 fsverity digest`.
    #[arg(long)]
    files: bool,
}

/// Runs `sealfs digest`: computes the fs-verity digest of the EROFS bytes (what `fsverity digest` prints
/// for them) from the bytes themselves; for a sealed image, a digest different from the seal's is an error.
pub fn run_digest(args: DigestArgs) -> Result<ExitCode> {
    let progress = TermProgress::new(false);
    let (image, opened) = match open(&args.image, args.sidecar.as_deref()) {
        Ok(x) => x,
        Err(OpenError::CannotRun(e)) => return Err(e),
        Err(OpenError::Mismatch(what)) => {
            eprintln!("sealfs: error: {what}");
            return Ok(ExitCode::from(1));
        }
    };
    if args.files {
        return print_file_digests(&args, &image, &opened);
    }
    let (params, len, sealed) = match &opened {
        Opened::Plain(len) => {
            let alg: HashAlg = args.hash_alg.as_deref().unwrap_or("sha256").parse()?;
            (Params::new(alg, 4096, b"")?, *len, None)
        }
        Opened::Sealed(seal) => (seal.params, seal.header.erofs_length.get(), Some(seal)),
    };
    let leaves = leaf_hashes(&params, &image, len, &progress)?;
    let tree = sealfs_verity::Tree::from_leaf_hashes(&params, len, &leaves)?;
    let digest = tree.digest();
    println!("{digest}");
    if let Some(seal) = sealed {
        let claimed = sealfs_verity::file_digest(&seal.params, &seal.header.descriptor);
        if claimed != digest {
            eprintln!(
                "sealfs: error: {}: the seal names {claimed}, but the bytes hash to {digest}",
                args.image.display()
            );
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
