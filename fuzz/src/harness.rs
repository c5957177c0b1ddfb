//! The fuzz harness of the image reader: how an input becomes an opened image, and the walk that
//! then calls every reader entry point on everything reachable.
//!
//! ONE SOURCE FOR TWO USERS: this file is the library of the cargo-fuzz targets (`fuzz/src/lib.rs`)
//! and is also compiled into the stable test `crates/reader/tests/fuzz_corpus.rs` with
//! `#[path = "../../../fuzz/src/harness.rs"]`, so the fuzzers and the normal test suite cannot
//! drift apart. It must therefore build on stable Rust and use nothing but `std`, `sealfs_reader`,
//! `sealfs_format`, `sealfs_verity` and `sealfs_trust` (all dependencies of the reader crate).
//!
//! Every operation's result is ignored: errors are fine, a panic (or a hang, or an allocation the
//! image size does not justify) is a bug. The walk's own work is bounded (entries, inodes, bytes
//! of file data), so a slow or huge result can only come from the reader.

// The test uses only part of it.
#![allow(dead_code)]
// `..Options::default()` although every field is set today: fields added later keep their defaults.
#![allow(clippy::needless_update)]

use sealfs_format::{
    encode_file_digests, encode_file_table, seal_crc, superblock_checksum, superblock_checksum_len,
    FileDigestSection, FileTable, FileTableLocator, FromBytes, IntoBytes, SealFooter, SealHeader,
    SealLayout, EROFS_FEATURE_COMPAT_SB_CHKSUM, FILE_TABLE_INLINE_OFFSET, FILE_TABLE_LOCATOR_SIZE,
    SEAL_FOOTER_MAGIC,
};
use sealfs_reader::check::{self, CheckOptions, NoProgress};
use sealfs_reader::{
    find_seal, open, BlockSource, Follow, Found, Image, Inode, OpenError, OpenOptions, Options,
    PlainBlocks, ReadAt, SealInfo, Source, Trust, VerifiedBlocks, VerifyMode,
};
use sealfs_verity::{build_tree, Digest, HashAlg, Params};
use std::collections::HashSet;
use std::sync::Arc;

/// Directory entries the walk looks at, over all directories.
pub const MAX_ENTRIES: usize = 10_000;
/// Inodes the walk visits (each one once: a set of visited nids breaks cycles).
pub const MAX_INODES: usize = 2_000;
/// Bytes of file data the walk reads, over all files.
pub const MAX_DATA_BYTES: u64 = 4 << 20;
/// Bytes of one read.
const MAX_READ: usize = 1 << 20;

/// xattr names no image is expected to have (exercise the miss paths and the bloom filter).
const ABSENT_XATTRS: &[&[u8]] = &[
    b"user.nope",
    b"security.capability",
    b"trusted.x",
    b"system.posix_acl_access",
    b"",
    b"user.",
    b"unknownprefix.a",
];

// ----- open_walk -----------------------------------------------------------------------------

/// The `open_walk` target: `data` is an image. It is opened as it is and, when its superblock
/// checksum is enabled but wrong, once more with the checksum fixed, so that mutations behind the
/// checksummed region reach the parsers instead of stopping at the checksum.
pub fn open_walk(data: &[u8]) {
    open_and_walk(data.to_vec());
    if let Some(fixed) = with_fixed_checksum(data) {
        open_and_walk(fixed);
    }
}

/// Opens `bytes` as an unverified image and walks it. The source block size and the cache sizes
/// depend on the length (so truncations and insertions also vary them): 4 KiB blocks with the
/// default caches; 512-byte blocks without any cache; 4 KiB blocks with a 3-block cache and an
/// 8 KiB cluster cache, 1 KiB blocks with a 5-block one and a 64 KiB cluster cache (both evict
/// all the time).
pub fn open_and_walk(bytes: Vec<u8>) {
    let (bits, cache_blocks, cluster_cache_bytes) = match bytes.len() % 4 {
        0 => (
            12,
            sealfs_reader::DEFAULT_CACHE_BLOCKS,
            sealfs_reader::DEFAULT_CLUSTER_CACHE_BYTES,
        ),
        1 => (9, 0, 0),
        2 => (12, 3, 8 << 10),
        _ => (10, 5, 64 << 10),
    };
    let source: Arc<dyn BlockSource> = Arc::new(PlainBlocks::with_block_bits(bytes, bits));
    let options = Options {
        cache_blocks,
        cluster_cache_bytes,
        ..Options::default()
    };
    if let Ok(img) = Image::open_blocks(source, &options) {
        walk(&img);
    }
}

/// `data` with its superblock checksum recomputed, if the image enables the checksum, the region
/// it covers is present and the stored checksum differs; otherwise `None`.
pub fn with_fixed_checksum(data: &[u8]) -> Option<Vec<u8>> {
    let compat = u32::from_le_bytes(data.get(1032..1036)?.try_into().ok()?);
    let bits = *data.get(1036)?;
    if compat & EROFS_FEATURE_COMPAT_SB_CHKSUM == 0 || !(9..=12).contains(&bits) {
        return None;
    }
    let region = data.get(1024..1024 + superblock_checksum_len(bits))?;
    let sum = superblock_checksum(region).to_le_bytes();
    if data[1028..1032] == sum {
        return None;
    }
    let mut fixed = data.to_vec();
    fixed[1028..1032].copy_from_slice(&sum);
    Some(fixed)
}

// ----- verified_open_walk ----------------------------------------------------------------------

/// log2 of the verity block size, by the 3-bit index in the parameter byte.
const LOG_BLOCK_SIZES: [u8; 8] = [12, 10, 11, 12, 13, 16, 14, 15];
/// Reader cache sizes (source blocks), by a 2-bit index in the mode byte.
const CACHE_BLOCKS: [usize; 4] = [4, 0, 1, 256];
/// Verified hash block cache sizes (raised to the tree height by the reader), by a 2-bit index.
const HASH_CACHE_BLOCKS: [usize; 4] = [0, 2, 1024, 1];
/// Decoded cluster cache sizes (bytes), by a 2-bit index.
const CLUSTER_CACHE_BYTES: [usize; 4] = [
    sealfs_reader::DEFAULT_CLUSTER_CACHE_BYTES,
    0,
    8 << 10,
    64 << 10,
];

/// The `verified_open_walk` target. Input layout:
///
/// ```text
/// byte 0  mode:   bit 0 raw (1) or honest (0); bit 1 sidecar tree (1) or attached (0);
///                 bits 2-3 reader cache size; bits 4-5 hash cache size; bits 6-7 cluster cache
///                 size (tables above)
/// byte 1  params: bit 0 SHA-512 (1) or SHA-256 (0); bits 1-3 verity block size (LOG_BLOCK_SIZES)
/// byte 2  salt length (mod 33; the salt bytes are a fixed pattern)
/// byte 3  honest: bits 0-2 number of corruptions; bit 3 open without the digest (self-consistent);
///         bit 4 with a per-file digest section, opened with `VerifyMode::Double`; raw: unused
/// honest: corruptions (u32 LE position, u8 xor mask) each, then the image.
///         The image is sealed as `sealfs build` seals (tree, per-file section, header and footer
///         from the format crate's encoders): the trailer after the image (attached, tree
///         block-aligned, as a sealed image) or in a sidecar; then each corruption xors one byte of
///         image+padding+tree (position mod its length): those blocks must fail verification
///         cleanly while everything else stays readable. It is opened with `sealfs_reader::open`.
/// raw:    u32 LE data_length (high bit set: the data source's length), u32 LE tree_offset,
///         u32 LE split, the root (digest size bytes), then the body: attached, both sources are the
///         body; sidecar, the data is body[..split % (len + 1)] and the tree the rest.
/// ```
pub fn verified_open_walk(data: &[u8]) {
    let Some((&[mode, pbyte, salt_len, count], rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let alg = if pbyte & 1 == 0 {
        HashAlg::Sha256
    } else {
        HashAlg::Sha512
    };
    let log = LOG_BLOCK_SIZES[((pbyte >> 1) & 7) as usize];
    let salt: Vec<u8> = (0..salt_len as usize % 33)
        .map(|i| (i * 7 + 1) as u8)
        .collect();
    let Ok(params) = Params::from_log_block_size(alg, log, &salt) else {
        return;
    };
    let sidecar = mode & 2 != 0;
    let options = Options {
        cache_blocks: CACHE_BLOCKS[((mode >> 2) & 3) as usize],
        cluster_cache_bytes: CLUSTER_CACHE_BYTES[((mode >> 6) & 3) as usize],
        ..Options::default()
    };
    let hash_cache = HASH_CACHE_BLOCKS[((mode >> 4) & 3) as usize];

    if mode & 1 == 0 {
        honest_sealed_open(&params, sidecar, count, rest, &options, hash_cache);
        return;
    }
    // Raw: `VerifiedBlocks` over a seal taken from the input as it is. This is deliberately not
    // `sealfs_reader::open`, whose `find_seal` refuses nearly all of these seals before they reach
    // `VerifiedBlocks::new`: it fuzzes that constructor's own checks (a tree outside its source, a
    // length past the data, mismatched algorithms) and failures at the top of the tree.
    let d = params.digest_size();
    if rest.len() < 12 + d {
        return;
    }
    let word = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().unwrap());
    let (len_field, tree_offset, split) = (word(0), word(4) as u64, word(8) as usize);
    let Ok(root) = Digest::new(alg, &rest[12..12 + d]) else {
        return;
    };
    let body = &rest[12 + d..];
    let (data_src, tree_src): (Arc<dyn ReadAt>, Arc<dyn ReadAt>) = if sidecar {
        let (a, b) = body.split_at(split % (body.len() + 1));
        (Arc::new(a.to_vec()), Arc::new(b.to_vec()))
    } else {
        let all: Arc<dyn ReadAt> = Arc::new(body.to_vec());
        (all.clone(), all)
    };
    let data_length = if len_field & 0x8000_0000 != 0 {
        data_src.len()
    } else {
        len_field as u64
    };
    let seal = SealInfo {
        params,
        data_length,
        tree_offset,
        root,
    };
    let Ok(vb) = VerifiedBlocks::new(data_src, tree_src, seal, hash_cache) else {
        return;
    };
    let vb = Arc::new(vb);
    if let Ok(img) = Image::open_blocks(vb.clone(), &options) {
        walk(&img);
    }
    // The counters stay consistent whatever happened.
    let _ = vb.stats();
    let _ = vb.geometry().num_levels();
}

/// Nids the honest mode's per-file digest section names (digests are not checked by an open, only
/// parsed: any values do).
const FAKE_FILE_NIDS: [u64; 4] = [1, 36, 37, 1 << 20];

/// The honest mode of [`verified_open_walk`]: seals `image` as `sealfs build` does (Merkle tree,
/// per-file digest section when `count & 16`, header and footer from the format crate's encoders),
/// attached or into a sidecar, damages image and tree as the corruptions say, and opens it with
/// [`sealfs_reader::open`] (with the image digest, or without one when `count & 8`; with
/// [`VerifyMode::Double`] when there is a per-file section).
fn honest_sealed_open(
    params: &Params,
    sidecar: bool,
    count: u8,
    rest: &[u8],
    options: &Options,
    hash_cache_blocks: usize,
) {
    let n = (count % 8) as usize * 5;
    let (corruptions, image) = rest.split_at(n.min(rest.len()));
    let Ok(tree) = build_tree(params, image) else {
        return;
    };
    let digest = tree.digest();
    let alg = params.alg();
    let fake: Vec<(u64, Digest)> = FAKE_FILE_NIDS
        .iter()
        .map(|&nid| (nid, alg.hash(&nid.to_le_bytes())))
        .collect();
    let files = if count & 16 != 0 {
        encode_file_digests(alg.id(), fake.iter().map(|(n, d)| (*n, d.as_bytes())))
    } else {
        Vec::new()
    };
    let bs = params.block_size();
    let tree_len = tree.bytes.len();
    // The sealed file (attached: image, padding, tree, files, trailer) or the image and the sidecar
    // (tree, files, trailer); `damageable` bytes of each may be corrupted (image, padding, tree).
    let (mut file, mut side, damageable) = if sidecar {
        let layout = SealLayout {
            descriptor: tree.descriptor_bytes(),
            digest: digest.as_bytes(),
            detached: true,
            tree_offset: 0,
            tree_length: tree_len as u64,
            files_section: &files,
        };
        let mut side = tree.bytes;
        side.extend_from_slice(&files);
        side.extend_from_slice(&SealHeader::new(&layout).with_footer(layout.header_offset()));
        (image.to_vec(), side, (image.len(), tree_len))
    } else {
        let mut all = image.to_vec();
        all.resize(image.len().next_multiple_of(bs), 0);
        let layout = SealLayout {
            descriptor: tree.descriptor_bytes(),
            digest: digest.as_bytes(),
            detached: false,
            tree_offset: all.len() as u64,
            tree_length: tree_len as u64,
            files_section: &files,
        };
        all.extend_from_slice(&tree.bytes);
        let damageable = all.len();
        all.extend_from_slice(&files);
        all.extend_from_slice(&SealHeader::new(&layout).with_footer(layout.header_offset()));
        (all, Vec::new(), (damageable, 0))
    };
    for c in corruptions.chunks_exact(5) {
        let total = damageable.0 + damageable.1;
        if total == 0 {
            break;
        }
        let pos = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as usize % total;
        if pos < damageable.0 {
            file[pos] ^= c[4];
        } else {
            side[pos - damageable.0] ^= c[4];
        }
    }
    let open_options = OpenOptions {
        digest: (count & 8 == 0).then_some(digest),
        sidecar: sidecar.then(|| Source::reader(Arc::new(side), "fuzz sidecar")),
        verify: if files.is_empty() {
            VerifyMode::Full
        } else {
            VerifyMode::Double
        },
        cache_blocks: options.cache_blocks,
        cluster_cache_bytes: options.cluster_cache_bytes,
        hash_cache_blocks,
        kernel_offload: false,
        ..OpenOptions::default()
    };
    let Ok(opened) = open(Source::reader(Arc::new(file), "fuzz image"), &open_options) else {
        return;
    };
    // An honest seal opens verified, against the digest it was built with.
    assert_eq!(opened.trust.digest(), Some(&digest), "{}", opened.trust);
    assert_eq!(opened.trust.is_authenticated(), count & 8 == 0);
    if let Some(fd) = &opened.file_digests {
        assert_eq!(fd.entries(), &fake[..]);
    }
    walk(&opened.image);
    if let Some(vb) = &opened.verified {
        // The counters stay consistent whatever happened.
        let _ = vb.stats();
        let _ = vb.geometry().num_levels();
    }
}

// ----- seal_trailer --------------------------------------------------------------------------

/// The `seal_trailer` target: the input is a sealed file (image and trailer), or an image followed
/// by its sidecar. Its last 64 bytes are parsed as a footer ([`SealFooter::parse`]), the header the
/// footer points at as a header ([`SealHeader::parse`]; a header that parses must re-encode to the
/// same bytes with [`SealHeader::with_footer`], and that trailer must parse back), and
/// [`find_seal`] runs over the input as an image, and over its first part as the image with the
/// rest as the sidecar (split where the superblock says the EROFS bytes end, else in the middle).
/// All of it once more with the trailer's checksums recomputed ([`with_fixed_trailer`]), so that
/// mutated fields reach the checks behind the CRCs.
pub fn seal_trailer(data: &[u8]) {
    trailer_parse(data);
    find_seal_variants(data);
    if let Some(fixed) = with_fixed_trailer(data) {
        trailer_parse(&fixed);
        find_seal_variants(&fixed);
    }
}

/// Parses the footer at the end of `file` and the header it points at.
fn trailer_parse(file: &[u8]) {
    let len = file.len() as u64;
    let Some(fbytes) = file.last_chunk::<64>() else {
        return;
    };
    let footer = match SealFooter::parse(fbytes, len) {
        Ok(f) => f,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    // SealFooter::parse checked header_offset + trailer_len == len, trailer_len >= 576.
    let ho = footer.header_offset.get();
    let hrange = ho as usize..ho as usize + 512;
    let hbytes: &[u8; 512] = file[hrange].try_into().unwrap();
    let header = match SealHeader::parse(hbytes, &footer) {
        Ok(h) => h,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = header.salt();
    // The parsed header, encoded again, is the same bytes, and its trailer parses back.
    let tail = header.with_footer(ho);
    assert_eq!(
        &tail[..512],
        &hbytes[..],
        "a parsed seal header re-encodes differently"
    );
    let footer2 = SealFooter::parse(tail[512..].try_into().unwrap(), ho + tail.len() as u64)
        .expect("the footer with_footer writes parses");
    SealHeader::parse(tail[..512].try_into().unwrap(), &footer2)
        .expect("a parsed header parses again under the footer with_footer writes");
}

/// [`find_seal`] over `file` as a sealed image, then split in an image and a sidecar.
fn find_seal_variants(file: &[u8]) {
    let whole: Arc<dyn ReadAt> = Arc::new(file.to_vec());
    exercise_found(find_seal(&whole, "fuzz image", None), file.len() as u64);
    let k = sidecar_split(file).unwrap_or(file.len() / 2);
    let image: Arc<dyn ReadAt> = Arc::new(file[..k].to_vec());
    let side: Arc<dyn ReadAt> = Arc::new(file[k..].to_vec());
    exercise_found(
        find_seal(&image, "fuzz image", Some((&side, "fuzz sidecar"))),
        k as u64,
    );
}

/// Calls everything a found seal offers (all bounded by the file: `find_seal` checked that every
/// section lies inside it).
fn exercise_found(found: Result<Found, OpenError>, image_len: u64) {
    match found {
        Ok(Found::Sealed(seal)) => {
            let _ = format!("{seal:?}");
            let _ = (seal.digest(), seal.root(), seal.info(), seal.is_detached());
            assert!(seal.erofs_length() <= image_len);
            let _ = seal.read_tree();
            if let Ok(Some(fd)) = seal.file_digests() {
                let _ = (fd.alg(), fd.len(), fd.is_empty());
                for (nid, d) in fd.entries().iter().take(100) {
                    assert_eq!(fd.get(*nid), Some(d));
                }
            }
        }
        Ok(Found::Plain(len)) => assert_eq!(len, image_len, "a plain image is its EROFS bytes"),
        Err(e) => {
            let _ = (e.to_string(), e.is_image_fault());
        }
    }
}

/// Where the EROFS bytes of `file` end according to its superblock, when that is inside the file:
/// the image of an image-and-sidecar input.
pub fn sidecar_split(file: &[u8]) -> Option<usize> {
    // (erofs_length reads the superblock only.)
    let k = sealfs_reader::seal::erofs_length(&file[..file.len().min(4096)].to_vec()).ok()?;
    (k > 0 && k < file.len() as u64).then_some(k as usize)
}

/// `file` with its trailer's checksums recomputed, when its last 64 bytes have a footer magic:
/// the per-file digest section's CRC in the header (when the section lies in the file), the
/// header's CRC in the footer (when the header lies before the footer), and the footer's own CRC.
/// `None` when there is no footer or nothing changes.
pub fn with_fixed_trailer(file: &[u8]) -> Option<Vec<u8>> {
    let len = file.len();
    let fstart = len.checked_sub(64)?;
    let mut footer = SealFooter::read_from_bytes(&file[fstart..]).ok()?;
    if footer.magic != SEAL_FOOTER_MAGIC && footer.magic2 != SEAL_FOOTER_MAGIC {
        return None;
    }
    let mut out = file.to_vec();
    let ho = usize::try_from(footer.header_offset.get()).ok()?;
    if ho.checked_add(512).is_some_and(|end| end <= fstart) {
        let mut header = SealHeader::read_from_bytes(&out[ho..ho + 512]).ok()?;
        let (fo, fl) = (header.files_offset.get(), header.files_length.get());
        if fl > 0 && fo.checked_add(fl).is_some_and(|end| end <= len as u64) {
            header.files_crc = seal_crc(&out[fo as usize..(fo + fl) as usize]).into();
        }
        out[ho..ho + 512].copy_from_slice(header.as_bytes());
        footer.header_crc = seal_crc(&out[ho..ho + 512]).into();
    }
    footer.footer_crc = 0.into();
    footer.footer_crc = seal_crc(footer.as_bytes()).into();
    out[fstart..].copy_from_slice(footer.as_bytes());
    (out != file).then_some(out)
}

// ----- file_digests --------------------------------------------------------------------------

/// The `file_digests` target: the input is a per-file digest section. If
/// [`FileDigestSection::parse`] accepts it, [`encode_file_digests`] of its entries must give back
/// the very same bytes (a mismatch is a bug: the parser accepts something the writer never writes,
/// or the two disagree on the layout).
pub fn file_digests(data: &[u8]) {
    let section = match FileDigestSection::parse(data) {
        Ok(s) => s,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let _ = (section.len(), section.is_empty());
    let mut prev = None;
    for (nid, digest) in section.iter() {
        assert_eq!(digest.len(), section.digest_size);
        assert!(prev.is_none_or(|p| p < nid), "entries not sorted by nid");
        prev = Some(nid);
    }
    let encoded = encode_file_digests(section.hash_algorithm, section.iter());
    assert!(
        encoded == data,
        "per-file digest section does not round-trip: {} bytes parsed, {} encoded",
        data.len(),
        encoded.len()
    );
}

// ----- file_table ----------------------------------------------------------------------------

/// The `file_table` target: `data` is a per-file digest table's locator (64 bytes, as at byte 0 of
/// an image) followed by the table's bytes. Whatever [`FileTableLocator::parse`] and
/// [`FileTable::parse`] accept must re-encode, through [`encode_file_table`], to the very same
/// locator and bytes (the parser accepts only what the writer writes).
pub fn file_table(data: &[u8]) {
    let Some((head, rest)) = data.split_at_checked(FILE_TABLE_LOCATOR_SIZE) else {
        let _ = FileTableLocator::parse(data, u64::MAX).map_err(|e| e.to_string());
        return;
    };
    // Any place in a large image: the offsets are checked against it, the bytes come from `rest`.
    let locator = match FileTableLocator::parse(head, 1 << 62) {
        Ok(Some(l)) => l,
        Ok(None) => return,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let len = (locator.table_length.get() as usize).min(rest.len());
    let table = match FileTable::parse(&locator, &rest[..len]) {
        Ok(t) => t,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let entries: Vec<(u64, &[u8])> = table.iter().collect();
    assert_eq!(entries.len(), table.len());
    // The writer is given the first free block; it puts a table that fits inline after the
    // locator instead.
    let blocks_offset = if locator.table_offset.get() == FILE_TABLE_INLINE_OFFSET {
        4096
    } else {
        locator.table_offset.get()
    };
    let (again, bytes) =
        encode_file_table(locator.hash_algorithm, blocks_offset, entries.into_iter())
            .expect("a parsed table has entries");
    assert!(
        again == locator && bytes == rest[..len],
        "per-file digest table does not round-trip"
    );
}

// ----- signatures ----------------------------------------------------------------------------

/// The `signatures` target: the input is a signature section (the seal's, or a detached
/// `IMAGE.sig`). If [`sealfs_trust::parse_section`] accepts it, [`sealfs_trust::encode_section`] of
/// its entries must give back the very same bytes; every statement that parses must re-encode to
/// its bytes; and the check at open ([`sealfs_trust::authenticate`]), with the entries' own keys
/// and the first statement's parameters, must not panic.
pub fn signatures(data: &[u8]) {
    let sigs = match sealfs_trust::parse_section(data) {
        Ok(s) => s,
        Err(e) => {
            let _ = e.len();
            return;
        }
    };
    assert!(
        sealfs_trust::encode_section(&sigs) == data,
        "signature section does not round-trip"
    );
    let mut keys = Vec::new();
    let mut bound = None;
    for sig in &sigs {
        let _ = (sig.fingerprint().to_string(), sig.verifies());
        if let Ok(k) = sealfs_trust::PublicKey::from_bytes(&sig.public_key) {
            keys.push(k);
        }
        match sealfs_trust::Statement::parse(&sig.statement) {
            Ok(st) => {
                assert!(
                    st.encode() == sig.statement,
                    "statement does not round-trip"
                );
                if bound.is_none() {
                    bound = Params::new(st.digest.alg(), st.block_size as usize, &st.salt)
                        .ok()
                        .map(|p| (p, st.digest, st.erofs_length));
                }
            }
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
    let (params, digest, len) = bound.unwrap_or((
        Params::default(),
        Digest::new(HashAlg::Sha256, &[0; 32]).expect("32 bytes"),
        0,
    ));
    for keys in [&keys[..], &[]] {
        if let Err(r) = sealfs_trust::authenticate(&sigs, keys, &params, &digest, len, None) {
            let _ = r.to_string();
        }
    }
}

// ----- sealed_open ---------------------------------------------------------------------------

/// Options of the sealed opens: small caches (they evict), no kernel offload (a byte source has
/// no file to ask).
fn sealed_options(
    digest: Option<Digest>,
    sidecar: Option<&Arc<dyn ReadAt>>,
    verify: VerifyMode,
) -> OpenOptions {
    OpenOptions {
        digest,
        sidecar: sidecar.map(|s| Source::reader(s.clone(), "fuzz sidecar")),
        verify,
        cache_blocks: 4,
        cluster_cache_bytes: 64 << 10,
        hash_cache_blocks: 2,
        kernel_offload: false,
        ..OpenOptions::default()
    }
}

/// The `sealed_open` target: the input is a whole sealed file (or an image followed by its
/// sidecar). It is opened with [`sealfs_reader::open`] as it is ([`sealed_open_layout`]), then as an
/// image plus sidecar split where the superblock says the EROFS bytes end; each opened image is
/// walked. With its trailer's checksums recomputed ([`with_fixed_trailer`]), it is opened once more
/// (no digest) and walked.
pub fn sealed_open(data: &[u8]) {
    let whole: Arc<dyn ReadAt> = Arc::new(data.to_vec());
    sealed_open_layout(&whole, None);
    let split = sidecar_split(data);
    if let Some(k) = split {
        let image: Arc<dyn ReadAt> = Arc::new(data[..k].to_vec());
        let side: Arc<dyn ReadAt> = Arc::new(data[k..].to_vec());
        sealed_open_layout(&image, Some(&side));
    }
    if let Some(fixed) = with_fixed_trailer(data) {
        let fixed: Arc<dyn ReadAt> = Arc::new(fixed);
        let options = sealed_options(None, None, VerifyMode::Full);
        if let Ok(opened) = open(Source::reader(fixed, "fuzz image"), &options) {
            walk(&opened.image);
        }
    }
    if let Some(k) = split {
        if let Some(fixed) = with_fixed_trailer(&data[k..]) {
            let image: Arc<dyn ReadAt> = Arc::new(data[..k].to_vec());
            let side: Arc<dyn ReadAt> = Arc::new(fixed);
            let options = sealed_options(None, Some(&side), VerifyMode::Full);
            if let Ok(opened) = open(Source::reader(image, "fuzz image"), &options) {
                walk(&opened.image);
            }
        }
    }
}

/// Opens `image` (with `sidecar`, if any) every way: without a digest, with the digest its seal
/// names (from [`find_seal`]; must open authenticated if it opens), with a wrong digest (must never
/// open), with [`VerifyMode::Double`] and [`VerifyMode::None`], walking each opened image; then
/// [`check::check`]s it (with the sealed digest, or a wrong one for a plain image, so that it is
/// hashed) with a small `max_problems`.
pub fn sealed_open_layout(image: &Arc<dyn ReadAt>, sidecar: Option<&Arc<dyn ReadAt>>) {
    let src = || Source::reader(image.clone(), "fuzz image");
    let found = find_seal(image, "fuzz image", sidecar.map(|s| (s, "fuzz sidecar")));
    let sealed = match &found {
        Ok(Found::Sealed(seal)) => Some(seal.digest()),
        _ => None,
    };
    drop(found);

    if let Ok(opened) = open(src(), &sealed_options(None, sidecar, VerifyMode::Full)) {
        assert!(!opened.trust.is_authenticated(), "{}", opened.trust);
        assert_eq!(opened.trust.digest(), sealed.as_ref());
        walk(&opened.image);
        // What `build --like` reads of an earlier image (its packed inode's runs among it).
        let _ = sealfs_delta::like_image(Arc::new(opened));
    }
    if let Some(digest) = sealed {
        if let Ok(opened) = open(
            src(),
            &sealed_options(Some(digest), sidecar, VerifyMode::Full),
        ) {
            assert!(opened.trust.is_authenticated(), "{}", opened.trust);
            assert_eq!(opened.trust.digest(), Some(&digest));
            walk(&opened.image);
        }
    }
    // A wrong digest: the sealed one with a bit flipped, or any for an image without a seal.
    let wrong = match sealed {
        Some(d) => {
            let mut bytes = d.as_bytes().to_vec();
            bytes[0] ^= 1;
            Digest::new(d.alg(), &bytes).unwrap()
        }
        None => Digest::zero(HashAlg::Sha256),
    };
    if let Ok(opened) = open(
        src(),
        &sealed_options(Some(wrong), sidecar, VerifyMode::Full),
    ) {
        panic!(
            "opened with a digest the image does not have: {}",
            opened.trust
        );
    }
    if let Ok(opened) = open(src(), &sealed_options(None, sidecar, VerifyMode::Double)) {
        assert!(opened.file_digests.is_some());
        if let Some(fd) = &opened.file_digests {
            for (nid, _) in fd.entries().iter().take(100) {
                let _ = fd.get(*nid);
            }
        }
        walk(&opened.image);
    }
    if let Ok(opened) = open(src(), &sealed_options(None, sidecar, VerifyMode::None)) {
        assert_eq!(opened.trust, Trust::Unverified);
        walk(&opened.image);
    }
    let options = CheckOptions {
        digest: Some(sealed.unwrap_or(wrong)),
        sidecar: sidecar.map(|s| Source::reader(s.clone(), "fuzz sidecar")),
        max_problems: 4,
        ..CheckOptions::default()
    };
    if let Ok(report) = check::check(src(), &options, &NoProgress) {
        let _ = report.is_verified();
        for p in &report.problems {
            let _ = (p.to_string(), p.byte_range());
        }
    }
}

// ----- the walk ----------------------------------------------------------------------------------

/// Walks everything reachable from the root of `img`, calling every reader entry point, within
/// fixed budgets ([`MAX_ENTRIES`], [`MAX_INODES`], [`MAX_DATA_BYTES`]). Ignores all errors.
pub fn walk(img: &Image) {
    let mut w = Walk {
        img,
        entries_left: MAX_ENTRIES,
        inodes_left: MAX_INODES,
        bytes_left: MAX_DATA_BYTES,
        seen: HashSet::new(),
    };
    w.image_wide();
    let root_nid = img.root_nid();
    let mut todo = vec![(root_nid, b"/".to_vec())];
    while let Some((nid, path)) = todo.pop() {
        if w.inodes_left == 0 {
            break;
        }
        if !w.seen.insert(nid) {
            continue;
        }
        w.inodes_left -= 1;
        let Ok(inode) = img.inode(nid) else { continue };
        w.inode(&inode, &path);
        if inode.is_dir() {
            w.dir(&inode, &path, &mut todo);
        }
    }
}

struct Walk<'a> {
    img: &'a Image,
    entries_left: usize,
    inodes_left: usize,
    bytes_left: u64,
    seen: HashSet<u64>,
}

impl Walk<'_> {
    /// Image-wide calls: superblock fields, raw reads at the edges, odd nids, root paths.
    fn image_wide(&mut self) {
        let img = self.img;
        let sb = img.superblock();
        let _ = (
            sb.block_size(),
            sb.label(),
            sb.build_time_abs(),
            sb.sb_size(),
        );
        let _ = sb.xattr_filter_enabled();
        let _ = (img.block_size(), img.len(), img.is_empty(), img.stats());
        let _ = img.long_prefixes();
        if let Ok(Some(table)) = img.file_table() {
            let _ = (table.len(), table.get(img.root_nid()), table.origin());
        }
        let len = img.len();
        let mut buf = [0u8; 64];
        for off in [
            0,
            len.saturating_sub(64),
            len.saturating_sub(1),
            len,
            u64::MAX - 1,
        ] {
            let _ = img.read_raw(off, &mut buf);
        }
        let root = img.root_nid();
        for nid in [
            0,
            1,
            root.wrapping_add(1),
            root.wrapping_sub(1),
            u64::MAX,
            1 << 40,
        ] {
            if let Ok(inode) = img.inode(nid) {
                let _ = inode.stat();
            }
        }
        for path in [
            &b"/"[..],
            b"",
            b".",
            b"..",
            b"/..",
            b"//",
            b"/nonexistent",
            b"/./../.",
        ] {
            self.resolve(path);
        }
    }

    fn resolve(&self, path: &[u8]) {
        let img = self.img;
        let _ = img.resolve(path, Follow::All);
        let _ = img.resolve(path, Follow::Parents);
        let _ = img.resolve(path, Follow::Never);
        let _ = img.lookup_path(path);
    }

    /// Everything about one inode but its directory entries.
    fn inode(&mut self, inode: &Inode, path: &[u8]) {
        let img = self.img;
        let _ = (
            inode.nid(),
            inode.iloc(),
            inode.is_extended(),
            inode.inode_isize(),
        );
        let _ = (
            inode.format(),
            inode.layout(),
            inode.mode(),
            inode.file_type(),
        );
        let _ = (inode.is_dir(), inode.is_symlink(), inode.is_file());
        let _ = (
            inode.uid(),
            inode.gid(),
            inode.nlink(),
            inode.size(),
            inode.mtime(),
        );
        let _ = (
            inode.ino32(),
            inode.xattr_icount(),
            inode.xattr_isize(),
            inode.rdev(),
        );
        let _ = (inode.startblk(), inode.chunkbits(), inode.chunkformat());
        let _ = (inode.data_offset(), inode.nblocks(), inode.stat());

        // Extended attributes: the list, each listed one, some absent ones, all at once.
        let _ = img.xattr_body(inode);
        if let Ok(names) = img.list_xattrs(inode) {
            for name in names.iter().take(100) {
                let _ = img.get_xattr(inode, name);
                // A name that shares a prefix with a real one.
                let mut other = name.clone();
                other.push(b'~');
                let _ = img.get_xattr(inode, &other);
            }
        }
        for name in ABSENT_XATTRS {
            let _ = img.get_xattr(inode, name);
        }
        let _ = img.get_xattr(inode, &[b'u'; 300]);
        let _ = img.xattrs(inode);

        // Symlinks (and the error for others).
        let _ = img.readlink(inode);

        // Data: mappings, then reads within the byte budget.
        let size = inode.size();
        for off in [0, size / 2, size.saturating_sub(1), size, u64::MAX] {
            let _ = img.map(inode, off);
        }
        let _ = img.map_range(inode, 0, 1 << 20);
        let _ = img.map_range(inode, size.saturating_sub(1 << 20), 1 << 20);
        let _ = img.map_range(inode, u64::MAX - 10, 100);
        self.read(inode, 0, MAX_READ);
        self.read(inode, size.saturating_sub(5000), 10_000);
        self.read(inode, (size / 2) | 1, 4097);
        let mut small = [0u8; 16];
        let _ = img.read(inode, u64::MAX - 3, &mut small);
        let _ = img.read(inode, size, &mut small);
        let _ = img.read(inode, 0, &mut []);
        // Direct reads (a mount's O_DIRECT ones), whose small uncompressed blocks go through the
        // cluster cache that the reads above may have filled with extents under the same keys.
        let mut direct = [0u8; 5000];
        for (off, len) in [
            (0, 4096),
            ((size / 3) | 1, 5000),
            (size.saturating_sub(100), 200),
        ] {
            let _ = img.read_direct(inode, off, &mut direct[..len]);
        }
        let _ = img.read_direct(inode, u64::MAX - 3, &mut small);

        // The path to it (lstat-like); every way of following for symlinks; through directories.
        if path != b"/" {
            let _ = img.resolve(path, Follow::Parents);
            if inode.is_symlink() {
                self.resolve(path);
            }
            if inode.is_dir() {
                let mut p = path.to_vec();
                p.extend_from_slice(b"/..");
                let _ = img.resolve(&p, Follow::All);
                p.truncate(path.len());
                p.extend_from_slice(b"/x");
                let _ = img.resolve(&p, Follow::All);
            }
        }
    }

    /// A bounded `read_vec`: at most `max` bytes, and nothing once the data budget is spent. The
    /// budget is charged what the read can return (the file's bytes from `offset`), not `max`, so
    /// small files never exhaust it.
    fn read(&mut self, inode: &Inode, offset: u64, max: usize) {
        let want = inode.size().saturating_sub(offset).min(max as u64);
        let n = want.min(self.bytes_left);
        if n == 0 && want > 0 {
            return;
        }
        self.bytes_left -= n;
        if let Ok(v) = self.img.read_vec(inode, offset, n as usize) {
            assert!(v.len() as u64 <= n, "read_vec returned more than asked");
        }
    }

    /// The entries of a directory: iteration (bounded), lookups of each name and of near misses;
    /// children are queued for the walk.
    fn dir(&mut self, dir: &Inode, path: &[u8], todo: &mut Vec<(u64, Vec<u8>)>) {
        let img = self.img;
        // The reader bounds a directory's entries by the image size, so collecting them all is fine.
        let _ = img.read_dir_all(dir);
        if let Ok(rd) = img.read_dir(dir) {
            for (index, entry) in rd.enumerate() {
                if self.entries_left == 0 {
                    break;
                }
                self.entries_left -= 1;
                let Ok(e) = entry else { break };
                let _ = e.file_type();
                let _ = img.lookup(dir, &e.name);
                // Near misses, for some entries (lookups dominate the walk's time).
                if index < 16 || index % 16 == 0 {
                    let mut other = e.name.clone();
                    other.push(b'x');
                    let _ = img.lookup(dir, &other);
                    if let Some((_, shorter)) = e.name.split_last() {
                        let _ = img.lookup(dir, shorter);
                    }
                }
                if e.name != b"." && e.name != b".." && !self.seen.contains(&e.nid) {
                    let mut child = path.to_vec();
                    if child.len() > 1 {
                        child.push(b'/');
                    }
                    child.extend_from_slice(&e.name);
                    todo.push((e.nid, child));
                }
            }
        }
        for name in [
            &b""[..],
            b".",
            b"..",
            b"zzzz",
            b"\0",
            b"\xff\xff",
            &[b'n'; 300],
        ] {
            let _ = img.lookup(dir, name);
        }
    }
}
