//! The public entry point, used exactly as the crate docs show: `sealfs_reader::open` with
//! `OpenOptions`. A damaged block is a verification error for the reads that touch it, a wrong digest
//! refuses the open, and only an unverified open (asked for by name) reads a damaged image.
//!
//! Images come from the builder library (a dev-dependency; the reader itself never depends on it).

use sealfs_reader::{open, Checker, Error, Follow, OpenError, OpenOptions, Trust, VerifyMode};
use sealfs_verity::Digest;
use std::path::Path;

/// Builds a sealed image of a small tree (a 256 KiB file `big`, a small `etc/hostname`) at `out`;
/// returns its digest (what `fsverity digest` of the EROFS bytes is: proved in the CLI's seal tests).
fn build(dir: &Path, out: &Path, sidecar: Option<&Path>) -> Digest {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("etc")).unwrap();
    std::fs::write(src.join("etc/hostname"), b"sealed\n").unwrap();
    let big: Vec<u8> = (0..256 * 1024u32)
        .map(|i| (i * 7 + i / 4096) as u8)
        .collect();
    std::fs::write(src.join("big"), &big).unwrap();
    let mut opts = sealfs_builder::BuildOptions::default();
    if let Some(s) = sidecar {
        opts.seal.as_mut().unwrap().sidecar = Some(s.to_path_buf());
    }
    let summary =
        sealfs_builder::build(&src, out, &opts, &sealfs_builder::NoProgress).expect("build");
    summary.seal.expect("sealed").digest
}

/// Offset of `big`'s first data byte (a block-aligned, uncompressed file), from the unverified map.
fn big_offset(image: &sealfs_reader::Image) -> u64 {
    let inode = image.resolve("/big", Follow::All).unwrap();
    match image.map(&inode, 0).unwrap().kind {
        sealfs_reader::ExtentKind::Mapped { physical } => physical,
        other => panic!("big is not mapped plainly: {other:?}"),
    }
}

#[test]
fn documented_open_verifies_and_only_unverified_reads_damage() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("image.sealfs");
    let digest = build(dir.path(), &img, None);

    // As the docs show: authenticated by the digest, every read checked here.
    let opened = open(&img, &OpenOptions::new().digest(digest)).unwrap();
    assert_eq!(
        opened.trust,
        Trust::Authenticated {
            digest,
            authority: sealfs_reader::Authority::Digest,
            checker: Checker::Reader
        }
    );
    assert!(
        opened.verified.is_some(),
        "reads go through the verifying source"
    );
    let image = &opened.image;
    let hostname = image.resolve("/etc/hostname", Follow::All).unwrap();
    assert_eq!(image.read_vec(&hostname, 0, 1 << 20).unwrap(), b"sealed\n");
    let offset = big_offset(image);
    drop(opened);

    // Without a digest: self-consistent only.
    let opened = open(&img, &OpenOptions::new()).unwrap();
    assert!(
        matches!(opened.trust, Trust::SelfConsistent { digest: d, checker: Checker::Reader } if d == digest)
    );

    // A wrong digest refuses the open.
    let wrong: Digest = format!("sha256:{}", "ab".repeat(32)).parse().unwrap();
    match open(&img, &OpenOptions::new().digest(wrong)) {
        Err(e @ OpenError::DigestMismatch { .. }) => {
            assert!(e.is_image_fault());
            assert!(e.to_string().contains("not the expected"), "{e}");
        }
        other => panic!("a wrong digest opened: {other:?}"),
    }

    // Damage one byte of big's third block.
    let mut bytes = std::fs::read(&img).unwrap();
    let pos = offset as usize + 2 * 4096 + 100;
    bytes[pos] ^= 0x55;
    std::fs::write(&img, &bytes).unwrap();

    let opened = open(&img, &OpenOptions::new().digest(digest)).unwrap();
    let image = &opened.image;
    let big = image.resolve("/big", Follow::All).unwrap();
    // The damaged block fails its reads...
    let mut buf = vec![0u8; 4096];
    match image.read(&big, 2 * 4096, &mut buf) {
        Err(Error::Verification { .. }) => {}
        other => panic!("a damaged block was read: {other:?}"),
    }
    // ... and only those: the rest of the file and the other file still read.
    assert_eq!(image.read(&big, 0, &mut buf).unwrap(), 4096);
    assert_eq!(image.read(&big, 3 * 4096, &mut buf).unwrap(), 4096);
    let hostname = image.resolve("/etc/hostname", Follow::All).unwrap();
    assert_eq!(image.read_vec(&hostname, 0, 64).unwrap(), b"sealed\n");
    assert_eq!(
        opened
            .verified
            .as_ref()
            .unwrap()
            .stats()
            .failures
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    drop(opened);

    // Asked for by name, an unverified open reads the damaged bytes as they are.
    let opened = open(&img, &OpenOptions::new().verify(VerifyMode::None)).unwrap();
    assert_eq!(opened.trust, Trust::Unverified);
    let big = opened.image.resolve("/big", Follow::All).unwrap();
    let got = opened.image.read_vec(&big, 2 * 4096, 4096).unwrap();
    assert_eq!(got[100], bytes[pos]);
}

#[test]
fn sidecar_double_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("image.erofs");
    let side = dir.path().join("image.seal");
    let digest = build(dir.path(), &img, Some(&side));

    // Without the sidecar the image is plain: unverified, and a digest cannot be checked while reading.
    let plain = open(&img, &OpenOptions::new()).unwrap();
    assert_eq!(plain.trust, Trust::Unverified);
    assert!(plain.seal.is_none());
    match open(&img, &OpenOptions::new().digest(digest)) {
        Err(e @ OpenError::Refused(_)) => assert!(!e.is_image_fault()),
        other => panic!("a digest was accepted for an unsealed image: {other:?}"),
    }

    // With it: authenticated; double loads the per-file digests (one per regular file).
    let opts = OpenOptions::new()
        .digest(digest)
        .sidecar(&side)
        .verify(VerifyMode::Double);
    let opened = open(&img, &opts).unwrap();
    assert!(opened.trust.is_authenticated());
    let files = opened.file_digests.as_ref().expect("double loads them");
    assert_eq!(files.len(), 2);
    let hostname = opened.image.resolve("/etc/hostname", Follow::All).unwrap();
    let recorded = files.get(hostname.nid()).expect("hostname has a digest");
    assert_eq!(
        &opened
            .image
            .file_digest_by_reading(&hostname, recorded.alg())
            .unwrap(),
        recorded
    );

    // A sidecar that is not a seal, and a missing file.
    std::fs::write(&side, b"not a seal").unwrap();
    match open(&img, &OpenOptions::new().sidecar(&side)) {
        Err(e @ OpenError::Seal(_)) => assert!(e.to_string().contains("no seal footer"), "{e}"),
        other => panic!("a bad sidecar opened: {other:?}"),
    }
    match open(dir.path().join("missing"), &OpenOptions::new()) {
        Err(e @ OpenError::Io { .. }) => assert!(!e.is_image_fault()),
        other => panic!("a missing file opened: {other:?}"),
    }
}

#[test]
fn any_byte_source_opens_verified() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("image.sealfs");
    let digest = build(dir.path(), &img, None);
    let bytes = std::fs::read(&img).unwrap();
    let source = sealfs_reader::Source::reader(std::sync::Arc::new(bytes), "in memory");
    let opened = open(source, &OpenOptions::new().digest(digest)).unwrap();
    assert!(opened.trust.is_authenticated());
    let hostname = opened.image.resolve("/etc/hostname", Follow::All).unwrap();
    assert_eq!(
        opened.image.read_vec(&hostname, 0, 64).unwrap(),
        b"sealed\n"
    );
}

/// Writes a new trailer after `erofs` (the EROFS bytes), sealing its first `covered` bytes with the
/// format crate's encoders, and lets `forge` change the header before its CRCs are computed.
fn reseal(
    erofs: &[u8],
    covered: usize,
    forge: impl FnOnce(&mut sealfs_format::SealHeader),
) -> Vec<u8> {
    let params = sealfs_verity::Params::default();
    let tree = sealfs_verity::build_tree(&params, &erofs[..covered]).unwrap();
    let digest = tree.digest();
    let layout = sealfs_format::SealLayout {
        descriptor: tree.descriptor_bytes(),
        digest: digest.as_bytes(),
        detached: false,
        tree_offset: erofs.len() as u64,
        tree_length: tree.bytes.len() as u64,
        files_section: &[],
    };
    let mut header = sealfs_format::SealHeader::new(&layout);
    forge(&mut header);
    let mut out = erofs.to_vec();
    out.extend_from_slice(&tree.bytes);
    out.extend_from_slice(&header.with_footer(layout.header_offset()));
    out
}

/// A forger who recomputes the CRCs can still not make the header say something its descriptor does
/// not, nor seal fewer bytes than the file system uses.
#[test]
fn forged_trailers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("image.sealfs");
    build(dir.path(), &img, None);
    let erofs_len = open(&img, &OpenOptions::new()).unwrap().erofs_length as usize;
    let erofs = std::fs::read(&img).unwrap()[..erofs_len].to_vec();
    let forged = dir.path().join("forged");

    // The trailer written again with the same encoders opens: the forging below is what fails.
    std::fs::write(&forged, reseal(&erofs, erofs_len, |_| {})).unwrap();
    open(&forged, &OpenOptions::new()).expect("an honest reseal opens");

    type Forge = fn(&mut sealfs_format::SealHeader);
    let cases: [(&str, Forge); 2] = [
        ("digest field", |h| h.digest[0] ^= 1),
        ("sig_size", |h| h.descriptor[4] = 1),
    ];
    for (what, forge) in cases {
        std::fs::write(&forged, reseal(&erofs, erofs_len, forge)).unwrap();
        match open(&forged, &OpenOptions::new()) {
            Err(e @ OpenError::Seal(_)) => println!("{what}: {e}"),
            other => panic!("forged {what} opened: {other:?}"),
        }
    }

    // A seal over all but the last block (the file ends there): the verified superblock claims more.
    let short = reseal(&erofs[..erofs_len - 4096], erofs_len - 4096, |_| {});
    std::fs::write(&forged, &short).unwrap();
    match open(&forged, &OpenOptions::new()) {
        Err(e @ OpenError::Seal(_)) => {
            assert!(e.to_string().contains("the superblock claims"), "{e}")
        }
        other => panic!("a seal over fewer bytes than the file system opened: {other:?}"),
    }
}
