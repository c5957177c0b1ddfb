//! Checking a whole image (what `sealfs verify` and `sealfs digest` report): every byte is hashed
//! once, the stored Merkle tree is checked top-down against the root, every data block against its
//! authentic level-0 hash, every per-file digest against the file's content (from the same level-0
//! hashes: file data is not hashed twice), and damage is pinned on the file that owns it.
//!
//! Block indices in [`Problem`]s are in Merkle (verity) blocks of the seal's block size, which need
//! not be the EROFS block size: [`Problem::byte_range`] gives the bytes.

use crate::error::{Error, ErrorChain};
use crate::files::DigestOrigin;
use crate::image::{Image, Options};
use crate::open::{OpenedImage, Source};
use crate::seal::{find_seal, Found, OpenError, Seal};
use crate::source::{ReadAt, SubRange};
use rayon::prelude::*;
use sealfs_verity::{BlockHasher, Digest, HashAlg, Params, Tree, TreeProblem};
use std::collections::{BTreeSet, HashMap};
use std::ops::Range;
use std::sync::Arc;

/// The read side's progress hook for long steps (hashing an image, extracting it); `advance` may be
/// called from worker threads.
pub trait Progress: Sync {
    /// A step starts; `total` is its size in bytes when known.
    fn begin(&self, step: &'static str, total: Option<u64>);
    /// `n` more bytes of the current step are done.
    fn advance(&self, n: u64);
    /// The current step is done.
    fn end(&self);
}

/// A [`Progress`] that shows nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _: &'static str, _: Option<u64>) {}
    fn advance(&self, _: u64) {}
    fn end(&self) {}
}

/// One thing a check found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// A block of the EROFS bytes does not match its hash; `owner` says what it holds, when known.
    DataBlock {
        /// Index of the block, in Merkle blocks of `block_size` bytes.
        index: u64,
        /// The Merkle block size.
        block_size: u64,
        /// What the block holds ("data of /path", or metadata).
        owner: Option<String>,
    },
    /// A file's recorded fs-verity digest disagrees with its content (or a file has none).
    FileDigest {
        /// The file (its first path, from the root, as raw bytes; text output escapes it with
        /// [`sealfs_text::escape`]).
        path: Vec<u8>,
        /// What is wrong.
        what: String,
    },
    /// The image's per-file digest table is malformed, or lists what is no regular file.
    FileTable(String),
    /// A block of the stored Merkle tree does not match its parent (or the root).
    TreeBlock {
        /// Tree level (0 hashes data blocks).
        level: usize,
        /// Block index within the level.
        index: u64,
    },
    /// The trailer is damaged or inconsistent.
    Trailer(String),
    /// Keys were given and the signatures do not authenticate the image with any of them.
    Signature(sealfs_trust::Refusal),
    /// The image is not the one the expected digest names.
    Digest {
        /// The digest given.
        expected: Digest,
        /// The image's digest.
        actual: Digest,
    },
}

impl Problem {
    /// The bytes of the image a damaged data block covers.
    pub fn byte_range(&self) -> Option<Range<u64>> {
        match self {
            Problem::DataBlock {
                index, block_size, ..
            } => Some(index * block_size..(index + 1) * block_size),
            _ => None,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::DataBlock { index, owner, .. } => {
                let r = self.byte_range().expect("a data block");
                write!(
                    f,
                    "image block {index} (bytes {}..{}) does not match its hash",
                    r.start, r.end
                )?;
                match owner {
                    Some(o) => write!(f, ": {o}"),
                    None => Ok(()),
                }
            }
            Problem::FileDigest { path, what } => {
                write!(f, "{}: {what}", sealfs_text::Escaped(path))
            }
            Problem::TreeBlock { level, index } => {
                write!(f, "Merkle tree level {level} block {index} is damaged")
            }
            Problem::Trailer(what) | Problem::FileTable(what) => write!(f, "{what}"),
            Problem::Signature(refusal) => write!(f, "{refusal}"),
            Problem::Digest { expected, actual } => {
                write!(f, "digest mismatch: expected {expected}, image is {actual}")
            }
        }
    }
}

/// How [`check`] checks.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// The digest the image must have.
    pub digest: Option<Digest>,
    /// Read the seal from this sidecar.
    pub sidecar: Option<Source>,
    /// Keys that may vouch for the image (see [`crate::OpenOptions::keys`]): when given, a signature
    /// by one of them must bind the seal, else [`Problem::Signature`].
    pub keys: Vec<sealfs_trust::PublicKey>,
    /// Detached signatures (see [`crate::OpenOptions::signatures`]).
    pub signatures: Option<Source>,
    /// Rollback protection (see [`crate::OpenOptions::min_version`]; needs keys).
    pub min_version: Option<sealfs_trust::Version>,
    /// Stop listing Merkle problems after this many.
    pub max_problems: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            digest: None,
            sidecar: None,
            keys: Vec::new(),
            signatures: None,
            min_version: None,
            max_problems: 100,
        }
    }
}

/// What [`check`] found.
#[derive(Debug)]
pub struct Report {
    /// Everything wrong; empty when the image verified.
    pub problems: Vec<Problem>,
    /// The image's digest, computed from its bytes (for a sealed image, what its seal names), when
    /// the check got that far.
    pub digest: Option<Digest>,
    /// An expected digest or keys were given (the image is authenticated when there are no problems).
    pub authenticated: bool,
    /// The key whose signature authenticated the image, when keys were given and one did.
    pub signed_by: Option<sealfs_trust::Fingerprint>,
    /// The image has a seal (or was meant to have one: a damaged seal counts).
    pub sealed: bool,
    /// Things the check could not do, which are not problems of the image's content (for example
    /// naming the owner of a damaged block when the metadata is damaged too).
    pub notes: Vec<String>,
    /// Where the per-file digests checked came from (the image's own table, or an older seal's
    /// trailer, which nothing covers); `None` when the image records none.
    pub file_digests: Option<DigestOrigin>,
}

impl Report {
    /// No problem found.
    pub fn is_verified(&self) -> bool {
        self.problems.is_empty()
    }

    /// The report as the JSON object `sealfs verify --json` prints (and the bindings return):
    /// `image` (as given, its exact bytes by [`sealfs_text::json_bytes`]), `verified`, `sealed`, `authenticated` (verified and vouched for),
    /// `signed_by`, `digest`, `file_digests` (where the per-file digests came from:
    /// [`DigestOrigin::name`]), `file_digests_authenticated` (verified, vouched for, and covered by
    /// the image digest) and `problems` (each [`Problem::to_json`]).
    pub fn to_json(&self, image: &[u8]) -> serde_json::Value {
        let ok = self.is_verified();
        let mut v = serde_json::json!({
            "verified": ok,
            "sealed": self.sealed,
            "authenticated": ok && self.authenticated,
            "signed_by": self.signed_by.map(|f| f.to_string()),
            "digest": self.digest.map(|d| d.to_string()),
            "file_digests": self.file_digests.map(|f| f.name()),
            "file_digests_authenticated": ok
                && self.authenticated
                && self.file_digests.is_some_and(|f| f.is_covered()),
            "problems": self.problems.iter().map(Problem::to_json).collect::<Vec<_>>(),
        });
        sealfs_text::json_insert(&mut v, "image", image);
        v
    }
}

impl Problem {
    /// The problem as a JSON object: its `kind` (`data_block`, `file_digest`, `tree_block`,
    /// `trailer`, `file_table`, `signature`, `digest`), its coordinates (a `path` exact by
    /// [`sealfs_text::json_bytes`]) and the `message` it prints.
    pub fn to_json(&self) -> serde_json::Value {
        let message = self.to_string();
        match self {
            Problem::DataBlock {
                index,
                block_size,
                owner,
            } => serde_json::json!({
                "kind": "data_block", "block": index, "block_size": block_size,
                "offset": index * block_size, "owner": owner, "message": message,
            }),
            Problem::FileDigest { path, .. } => {
                let mut v = serde_json::json!({"kind": "file_digest", "message": message});
                sealfs_text::json_insert(&mut v, "path", path);
                v
            }
            Problem::TreeBlock { level, index } => serde_json::json!({
                "kind": "tree_block", "level": level, "index": index, "message": message,
            }),
            Problem::Trailer(_) => serde_json::json!({"kind": "trailer", "message": message}),
            Problem::FileTable(_) => {
                serde_json::json!({"kind": "file_table", "message": message})
            }
            Problem::Signature(_) => serde_json::json!({"kind": "signature", "message": message}),
            Problem::Digest { expected, actual } => serde_json::json!({
                "kind": "digest", "expected": expected.to_string(),
                "actual": actual.to_string(), "message": message,
            }),
        }
    }
}

/// An opened source and the seal found for it.
struct Checked {
    image: Arc<dyn ReadAt>,
    name: String,
    found: Found,
}

fn open_for_check(source: Source, sidecar: Option<&Source>) -> Result<Checked, OpenError> {
    let name = source.name();
    let image = reader_of(&source)?;
    let side = sidecar
        .map(|s| Ok::<_, OpenError>((reader_of(s)?, s.name())))
        .transpose()?;
    let found = find_seal(&image, &name, side.as_ref().map(|(r, n)| (r, n.as_str())))?;
    Ok(Checked { image, name, found })
}

fn reader_of(source: &Source) -> Result<Arc<dyn ReadAt>, OpenError> {
    Ok(match source {
        Source::Path(p) => Arc::new(std::fs::File::open(p).map_err(|e| OpenError::Io {
            name: sealfs_text::escape_path(p),
            what: "open",
            source: e,
        })?),
        Source::Reader { reader, .. } => reader.clone(),
    })
}

/// Hashes every block of `image[0..len)`: the level-0 hashes, concatenated.
fn leaf_hashes(
    params: &Params,
    image: &Arc<dyn ReadAt>,
    name: &str,
    len: u64,
    progress: &dyn Progress,
) -> Result<Vec<u8>, OpenError> {
    progress.begin("hashing", Some(len));
    let leaves = sealfs_verity::leaf_hashes_from_reader(
        params,
        &|buf, at| image.read_exact_at(buf, at),
        len,
        &|n| progress.advance(n),
    )
    .map_err(|e| OpenError::Io {
        name: name.to_string(),
        what: "hash",
        source: std::io::Error::other(e),
    })?;
    progress.end();
    Ok(leaves)
}

/// The reader over the EROFS bytes of an image, without verification (the check hashes them itself).
fn unverified(image: &Arc<dyn ReadAt>, len: u64) -> crate::Result<Image> {
    Image::open_unverified_with(SubRange::new(image.clone(), 0, len), &Options::default())
}

/// Checks every byte of an image against its seal (or, for a plain image, against the expected
/// digest, which is then required): the stored tree, every data block, the per-file digests and the
/// digest. A damaged seal is a [`Problem::Trailer`]; `Err` means the check could not run.
pub fn check(
    source: impl Into<Source>,
    options: &CheckOptions,
    progress: &dyn Progress,
) -> Result<Report, OpenError> {
    let source = source.into();
    if options.min_version.is_some() && options.keys.is_empty() {
        return Err(OpenError::Refused(format!(
            "{}: a minimum version needs a key: only a signed statement carries a version",
            source.name()
        )));
    }
    let c = match open_for_check(source.clone(), options.sidecar.as_ref()) {
        Err(OpenError::Seal(what)) => {
            return Ok(Report {
                problems: vec![Problem::Trailer(what)],
                digest: None,
                authenticated: false,
                signed_by: None,
                sealed: true,
                notes: Vec::new(),
                file_digests: None,
            })
        }
        Err(e) => return Err(e),
        Ok(c) => c,
    };
    match &c.found {
        Found::Plain(len) => {
            if !options.keys.is_empty() {
                return Err(OpenError::Refused(format!(
                    "{}: not sealed, so it carries no signature to check against the keys",
                    c.name
                )));
            }
            let Some(expected) = &options.digest else {
                return Err(OpenError::Refused(format!(
                    "{}: not sealed; give --digest to check it against a known digest",
                    c.name
                )));
            };
            let params = Params::new(expected.alg(), 4096, b"").expect("valid parameters");
            let leaves = leaf_hashes(&params, &c.image, &c.name, *len, progress)?;
            let actual = tree_digest(&params, *len, &leaves, &c.name)?;
            let mut problems = Vec::new();
            if &actual != expected {
                problems.push(Problem::Digest {
                    expected: *expected,
                    actual,
                });
            }
            Ok(Report {
                problems,
                digest: Some(actual),
                authenticated: true,
                signed_by: None,
                sealed: false,
                notes: Vec::new(),
                file_digests: None,
            })
        }
        Found::Sealed(seal) => {
            let len = seal.erofs_length();
            let tree = seal.read_tree().map_err(|e| OpenError::Io {
                name: c.name.clone(),
                what: "read Merkle tree",
                source: e,
            })?;
            let leaves = leaf_hashes(&seal.params, &c.image, &c.name, len, progress)?;
            let bs = seal.params.block_size() as u64;
            let d = seal.params.digest_size();
            let mut problems: Vec<Problem> = sealfs_verity::check_tree(
                &seal.params,
                len,
                &seal.header.root_hash[..d],
                &tree,
                &leaves,
                options.max_problems,
            )
            .into_iter()
            .map(|p| match p {
                TreeProblem::DataBlock { index } => Problem::DataBlock {
                    index,
                    block_size: bs,
                    owner: None,
                },
                TreeProblem::TreeBlock { level, index } => Problem::TreeBlock { level, index },
            })
            .collect();
            let mut notes = Vec::new();
            let file_digests = check_files(&c.image, seal, &leaves, &mut problems, &mut notes);
            let actual = seal.digest();
            if let Some(expected) = &options.digest {
                if &actual != expected {
                    problems.push(Problem::Digest {
                        expected: *expected,
                        actual,
                    });
                }
            }
            let mut signed_by = None;
            if !options.keys.is_empty() {
                let checked =
                    crate::open::gather_signatures(seal, &source, options.signatures.as_ref())
                        .and_then(|all| {
                            sealfs_trust::authenticate(
                                &all,
                                &options.keys,
                                &seal.params,
                                &actual,
                                seal.erofs_length(),
                                options.min_version.as_ref(),
                            )
                        });
                match checked {
                    Ok((fingerprint, _)) => signed_by = Some(fingerprint),
                    Err(refusal) => problems.push(Problem::Signature(refusal)),
                }
            }
            Ok(Report {
                problems,
                digest: Some(actual),
                authenticated: options.digest.is_some() || !options.keys.is_empty(),
                signed_by,
                sealed: true,
                notes,
                file_digests,
            })
        }
    }
}

fn tree_digest(params: &Params, len: u64, leaves: &[u8], name: &str) -> Result<Digest, OpenError> {
    Ok(Tree::from_leaf_hashes(params, len, leaves)
        .map_err(|e| OpenError::Io {
            name: name.to_string(),
            what: "hash",
            source: std::io::Error::other(e),
        })?
        .digest())
}

/// A path relative to the root, as text output shows it: `/` and the path, escaped.
fn path_text(p: &[u8]) -> String {
    let mut rooted = b"/".to_vec();
    rooted.extend_from_slice(p);
    sealfs_text::escape(&rooted)
}

/// The rooted raw path of a file, as [`Problem::FileDigest`] holds it.
fn rooted(p: &[u8]) -> Vec<u8> {
    let mut rooted = b"/".to_vec();
    rooted.extend_from_slice(p);
    rooted
}

/// The bytes of the image's per-file digest table and of its locator, when the (unverified)
/// locator names one.
fn table_ranges(img: &Image) -> Vec<Range<u64>> {
    use sealfs_format::{FILE_TABLE_LOCATOR_OFFSET, FILE_TABLE_LOCATOR_SIZE};
    let locator =
        FILE_TABLE_LOCATOR_OFFSET..FILE_TABLE_LOCATOR_OFFSET + FILE_TABLE_LOCATOR_SIZE as u64;
    match img.file_table_locator() {
        Ok(Some(l)) => {
            let at = l.table_offset.get();
            vec![locator, at..at.saturating_add(l.table_length.get())]
        }
        _ => vec![locator],
    }
}

/// Whether the union of `ranges` covers all of `r`.
fn covers(ranges: &mut [Range<u64>], r: &Range<u64>) -> bool {
    ranges.sort_by_key(|x| x.start);
    let mut at = r.start;
    for x in ranges.iter() {
        if x.start > at {
            break;
        }
        at = at.max(x.end);
    }
    at >= r.end
}

/// Whether `r` overlaps any of `damaged`.
fn overlaps(damaged: &[Range<u64>], r: &Range<u64>) -> bool {
    damaged.iter().any(|d| d.start < r.end && r.start < d.end)
}

/// Names the owners of damaged blocks and checks the per-file digests against the image content
/// (from the level-0 hashes already computed when they use the same parameters). The walk reads the
/// image through the reader; where damaged metadata stops it, blocks stay unnamed (with a note).
///
/// The digests checked are the image's own table (its bytes were just checked as data blocks), or,
/// for a seal of an earlier release, the trailer's section, which a note calls unauthenticated.
/// Returns where the digests checked came from.
fn check_files(
    image: &Arc<dyn ReadAt>,
    seal: &Seal,
    leaves: &[u8],
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
) -> Option<DigestOrigin> {
    let walk = unverified(image, seal.erofs_length()).and_then(|img| {
        let files = img.regular_files()?;
        Ok((img, files))
    });
    let (img, files) = match walk {
        Ok(x) => x,
        Err(e) => {
            notes.push(format!(
                "cannot walk the image to name files: {}",
                ErrorChain(&e)
            ));
            return None;
        }
    };
    name_owners(&img, &files, problems);
    let recorded = match img.file_table() {
        Ok(Some(table)) => {
            if seal.header.files_length.get() != 0 {
                problems.push(Problem::Trailer(
                    crate::files::TRAILER_SECTION_WITH_TABLE.into(),
                ));
            }
            table
        }
        Ok(None) => match seal.file_digests() {
            Ok(Some(trailer)) => {
                notes.push(
                    "the per-file digests are in the seal's trailer, where no digest or signature covers them (a seal written before they moved into the image); `sealfs digest --files` flags them unauthenticated"
                        .into(),
                );
                trailer
            }
            Ok(None) => return None,
            Err(what) => {
                problems.push(Problem::Trailer(what));
                return None;
            }
        },
        Err(e) => {
            problems.push(Problem::FileTable(ErrorChain(&e).to_string()));
            return None;
        }
    };
    let origin = recorded.origin();
    let alg = recorded.alg();
    // The damaged data blocks: what was read from them is no fact.
    let damaged: Vec<Range<u64>> = problems.iter().filter_map(Problem::byte_range).collect();
    let table_damaged =
        origin == DigestOrigin::Image && table_ranges(&img).iter().any(|t| overlaps(&damaged, t));
    let fparams = crate::files::file_params(alg);
    let share = seal.params == fparams;
    let hasher = BlockHasher::new(&fparams);
    let recorded_nids: BTreeSet<u64> = recorded.entries().iter().map(|(n, _)| *n).collect();
    for nid in files.keys().filter(|n| !recorded_nids.contains(n)) {
        problems.push(Problem::FileDigest {
            path: rooted(&files[nid][0]),
            what: if table_damaged {
                "no entry in the per-file digest table, whose bytes failed their hash check".into()
            } else {
                "no recorded fs-verity digest".into()
            },
        });
    }
    let results: Vec<Option<Problem>> = recorded
        .entries()
        .par_iter()
        .map(|(nid, want)| {
            let Some(paths) = files.get(nid) else {
                return Some(Problem::FileTable(format!(
                    "per-file digest for nid {nid}, which is no regular file of the image{}",
                    if table_damaged {
                        " (the table's bytes failed their hash check)"
                    } else {
                        ""
                    }
                )));
            };
            let path = rooted(&paths[0]);
            let inode = img.inode(*nid);
            let content_damaged = inode
                .as_ref()
                .ok()
                .and_then(|i| img.file_storage(i).ok())
                .is_some_and(|s| s.iter().any(|r| overlaps(&damaged, r)));
            let got = inode.and_then(|inode| {
                if share {
                    img.file_digest_from_leaves(&inode, &hasher, leaves)
                } else {
                    img.file_digest_by_reading(&inode, alg)
                }
            });
            match got {
                Ok(got) if &got == want => None,
                // Say only what the checked bytes establish: a value read from damaged bytes is
                // not shown as if it were recorded.
                Ok(got) => Some(Problem::FileDigest {
                    path,
                    what: match (origin, table_damaged, content_damaged) {
                        (DigestOrigin::Trailer, _, false) => format!(
                            "the seal's trailer (which no digest covers) records {want}, but the content hashes to {got}"
                        ),
                        (DigestOrigin::Trailer, _, true) => format!(
                            "the seal's trailer (which no digest covers) records {want}; the content is in damaged image blocks (they hash to {got})"
                        ),
                        (_, true, false) => format!(
                            "expected {got} (the digest of its content, whose blocks verified), but its entry in the per-file digest table differs and the table's bytes failed their hash check (what they hold is not shown)"
                        ),
                        (_, true, true) => "its content and its entry in the per-file digest table are both in damaged image blocks: neither can be checked".to_string(),
                        (_, false, true) => format!(
                            "expected {want} (the per-file digest table, whose bytes verified), but the content is in damaged image blocks (they hash to {got})"
                        ),
                        (_, false, false) => format!(
                            "expected {want} (the per-file digest table, whose bytes verified), but the content hashes to {got}"
                        ),
                    },
                }),
                Err(e) => Some(Problem::FileDigest {
                    path,
                    what: format!("cannot check its digest: {}", ErrorChain(&e)),
                }),
            }
        })
        .collect();
    problems.extend(results.into_iter().flatten());
    Some(origin)
}

/// Fills in the owner of every damaged data block: the file whose stored data (blocks, inline tail
/// or compressed pcluster) overlaps the block's bytes, else metadata.
fn name_owners(
    img: &Image,
    files: &std::collections::BTreeMap<u64, Vec<Vec<u8>>>,
    problems: &mut [Problem],
) {
    let bad: Vec<(usize, Range<u64>)> = problems
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.byte_range().map(|r| (i, r)))
        .collect();
    if bad.is_empty() {
        return;
    }
    // Damaged block -> the files whose data it holds (several when Merkle blocks are larger than
    // EROFS blocks).
    let mut owners: HashMap<usize, Vec<&[u8]>> = HashMap::new();
    // Damaged block -> the bytes of it that are named (file data, superblock, table).
    let mut named: HashMap<usize, Vec<Range<u64>>> = HashMap::new();
    for (nid, paths) in files {
        let Ok(storage) = img.inode(*nid).and_then(|i| img.file_storage(&i)) else {
            continue;
        };
        for (i, r) in &bad {
            let inside: Vec<Range<u64>> = storage
                .iter()
                .filter(|s| s.start < r.end && r.start < s.end)
                .cloned()
                .collect();
            if !inside.is_empty() {
                owners.entry(*i).or_default().push(&paths[0]);
                named.entry(*i).or_default().extend(inside);
            }
        }
    }
    let table = table_ranges(img);
    // The EROFS superblock: 128 bytes at byte 1024.
    let superblock = 1024..1024 + 128;
    for (i, r) in bad {
        if let Problem::DataBlock { owner: o, .. } = &mut problems[i] {
            let mut held = Vec::new();
            let named = named.entry(i).or_default();
            if overlaps(std::slice::from_ref(&superblock), &r) {
                held.push("the superblock".to_string());
                named.push(superblock.clone());
            }
            if overlaps(&table, &r) {
                held.push("the per-file digest table".to_string());
                named.extend(table.iter().cloned());
            }
            // A block with the superblock or the table says when it holds more than it names.
            let special = !held.is_empty();
            match owners.remove(&i).as_deref() {
                None | Some([]) => {}
                Some([one]) => held.push(format!("data of {}", path_text(one))),
                Some([first, rest @ ..]) => held.push(format!(
                    "data of {} and of {} other file(s)",
                    path_text(first),
                    rest.len()
                )),
            }
            *o = Some(if held.is_empty() {
                "metadata (inodes, directories, xattrs) or tails".into()
            } else if !special || covers(named, &r) {
                held.join(", ")
            } else {
                format!(
                    "{}, and other bytes (metadata: inodes, directories, xattrs; tails; padding)",
                    held.join(", ")
                )
            });
        }
    }
}

/// What [`image_digest`] computed.
#[derive(Debug)]
pub struct DigestReport {
    /// The fs-verity digest of the EROFS bytes, computed from them.
    pub digest: Digest,
    /// What the seal names, for a sealed image (an image whose bytes hash to something else is
    /// damaged).
    pub sealed: Option<Digest>,
}

/// Computes the image digest from the bytes (the seal's parameters; for a plain image, `plain_alg`
/// with 4 KiB blocks and no salt), and what the seal names.
pub fn image_digest(
    source: impl Into<Source>,
    sidecar: Option<&Source>,
    plain_alg: HashAlg,
    progress: &dyn Progress,
) -> Result<DigestReport, OpenError> {
    let c = open_for_check(source.into(), sidecar)?;
    let (params, len, sealed) = match &c.found {
        Found::Plain(len) => (
            Params::new(plain_alg, 4096, b"").expect("valid parameters"),
            *len,
            None,
        ),
        Found::Sealed(seal) => (seal.params, seal.erofs_length(), Some(seal.digest())),
    };
    let leaves = leaf_hashes(&params, &c.image, &c.name, len, progress)?;
    Ok(DigestReport {
        digest: tree_digest(&params, len, &leaves, &c.name)?,
        sealed,
    })
}

/// Every regular file's digest with its paths, for an image opened with [`crate::open()`] (so every
/// byte read, the image's own table included, is verified as `opened.trust` says): the digests the
/// image records ([`OpenedImage::recorded_file_digests`]: its own table, or an older seal's trailer,
/// which the result flags), or, when it records none or `from_content` asks, computed from its
/// content as read (the seal's algorithm; for a plain image, `plain_alg`). Sorted by path.
pub fn file_digests(
    opened: &OpenedImage,
    plain_alg: HashAlg,
    from_content: bool,
) -> Result<FileDigestList, OpenError> {
    let image_err = |source: Error| OpenError::Image {
        name: opened.name.clone(),
        source,
    };
    let recorded = if from_content {
        None
    } else {
        opened.recorded_file_digests()?
    };
    let img = &opened.image;
    let (digests, origin): (HashMap<u64, Digest>, DigestOrigin) = match recorded {
        Some(d) => (d.entries().iter().copied().collect(), d.origin()),
        None => {
            let alg = opened.seal.as_ref().map_or(plain_alg, |s| s.params.alg());
            let computed = img.compute_file_digests(alg).map_err(image_err)?;
            (computed.into_iter().collect(), DigestOrigin::Computed)
        }
    };
    let mut lines = Vec::new();
    for (nid, paths) in img.regular_files().map_err(image_err)? {
        let d = digests.get(&nid).ok_or_else(|| {
            OpenError::Seal(format!(
                "{}: no recorded digest for nid {nid} ({})",
                opened.name,
                path_text(&paths[0])
            ))
        })?;
        lines.extend(paths.into_iter().map(|p| (p, *d)));
    }
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(FileDigestList {
        lines,
        origin,
        trust: opened.trust.clone(),
    })
}

/// What [`file_digests`] found.
#[derive(Debug)]
pub struct FileDigestList {
    /// `(path relative to the root, digest)`, sorted by path; a hard-linked file once per path.
    pub lines: Vec<(Vec<u8>, Digest)>,
    /// Where the digests came from: the image's own table or its content (as trustworthy as the
    /// image: see `trust`), or an older seal's trailer, which nothing covers.
    pub origin: DigestOrigin,
    /// What opening the image established.
    pub trust: crate::Trust,
}

impl FileDigestList {
    /// Whether what vouches for the image (a digest or key given, see `trust`) also vouches for
    /// these digests: they are covered by the image digest and the image was authenticated.
    pub fn is_authenticated(&self) -> bool {
        self.origin.is_covered() && self.trust.is_authenticated()
    }
}
