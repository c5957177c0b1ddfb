//! Differential tests against `fsverity digest` (fsverity-utils, Debian
//! package `fsverity`): printed digest, `--out-merkle-tree` and
//! `--out-descriptor` must equal ours byte for byte, for every builder
//! (in memory, positional file reads, streaming, from leaf hashes).
//!
//! Without `fsverity` installed the tests print `SKIP: fsverity not
//! installed` and pass, except with `CI=true`, where they fail.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::process::Command;

use sealfs_testsupport::{
    assert_same_bytes, hex, need_program, oracle_guard, pseudo_random, run_ok,
};
use sealfs_verity::{
    build_tree, build_tree_from_file, file_digest, leaf_hashes_from_file, write_tree_from_leaves,
    BlockHasher, Descriptor, Digest, HashAlg, Params, RootHasher, Tree, TreeBuilder,
};

const SIZES: &[usize] = &[
    0,
    1,
    4095,
    4096,
    4097,
    128 * 4096,
    128 * 4096 + 1,
    1 << 20,
    600 * 4096 + 123,
];
const BLOCK_SIZES: &[usize] = &[1024, 4096, 65536];

fn have_fsverity() -> bool {
    oracle_guard(need_program("fsverity", "--version", "fsverity"))
}

fn salts() -> Vec<Vec<u8>> {
    vec![
        Vec::new(),
        vec![0xa7],
        (0..32u8).map(|i| i.wrapping_mul(37) ^ 0x5c).collect(),
    ]
}

/// What `fsverity digest` reports for `file`.
struct Oracle {
    printed: String,
    tree: Vec<u8>,
    descriptor: Vec<u8>,
}

fn fsverity_digest(dir: &Path, file: &Path, params: &Params) -> Oracle {
    let tree_out = dir.join("tree.out");
    let desc_out = dir.join("desc.out");
    let mut cmd = Command::new("fsverity");
    cmd.arg("digest")
        .arg(file)
        .arg(format!("--hash-alg={}", params.alg()))
        .arg(format!("--block-size={}", params.block_size()))
        .arg(format!("--out-merkle-tree={}", tree_out.display()))
        .arg(format!("--out-descriptor={}", desc_out.display()));
    if !params.salt().is_empty() {
        cmd.arg(format!("--salt={}", hex(params.salt())));
    }
    let stdout = run_ok(&mut cmd).unwrap_or_else(|e| panic!("{e}"));
    // "sha256:<hex> FILE"
    let printed = stdout
        .split_whitespace()
        .next()
        .expect("fsverity printed a digest")
        .to_owned();
    Oracle {
        printed,
        tree: fs::read(&tree_out).expect("merkle tree output"),
        descriptor: fs::read(&desc_out).expect("descriptor output"),
    }
}

fn assert_matches(ours: &Tree, oracle: &Oracle, what: &str) {
    assert_eq!(ours.digest().to_string(), oracle.printed, "{what}: digest");
    assert_same_bytes(&ours.bytes, &oracle.tree, &format!("{what}: tree"));
    assert_same_bytes(
        &ours.descriptor_bytes(),
        &oracle.descriptor,
        &format!("{what}: descriptor"),
    );
}

/// Checks every builder of ours on `data` against `fsverity digest`.
fn check(dir: &Path, data: &[u8], params: &Params, all_builders: bool) {
    let what = format!("{} bytes, {params:?}", data.len());
    let path = dir.join("data");
    fs::write(&path, data).unwrap();
    let oracle = fsverity_digest(dir, &path, params);

    let tree = build_tree(params, data).unwrap();
    assert_matches(&tree, &oracle, &format!("build_tree, {what}"));
    assert_eq!(tree.geometry.tree_size(), oracle.tree.len() as u64);

    // The descriptor parses back to the same contents, and its hash is the digest.
    let desc = Descriptor::from_bytes(&oracle.descriptor).unwrap();
    assert_eq!(desc, tree.descriptor(), "{what}: parsed descriptor");
    let desc_bytes: [u8; 256] = oracle.descriptor.as_slice().try_into().unwrap();
    assert_eq!(
        file_digest(params, &desc_bytes),
        oracle.printed.parse::<Digest>().unwrap(),
        "{what}: file_digest"
    );

    // Positional reads: for the big cases straight from the data file, for
    // the others from the middle of a larger file.
    if !all_builders {
        let f = File::open(&path).unwrap();
        let from_file = build_tree_from_file(params, &f, 0, data.len() as u64).unwrap();
        assert_matches(
            &from_file,
            &oracle,
            &format!("build_tree_from_file, {what}"),
        );
        let leaves = leaf_hashes_from_file(params, &f, 0, data.len() as u64, &|_| {}).unwrap();
        check_written(params, data.len() as u64, &leaves, &oracle, &what);
        return;
    }
    let prefix = 4099;
    let mut f = File::create(dir.join("embedded")).unwrap();
    f.write_all(&vec![0xee; prefix]).unwrap();
    f.write_all(data).unwrap();
    f.write_all(&[0xdd; 77]).unwrap();
    drop(f);
    let f = File::open(dir.join("embedded")).unwrap();
    let from_file = build_tree_from_file(params, &f, prefix as u64, data.len() as u64).unwrap();
    assert_matches(
        &from_file,
        &oracle,
        &format!("build_tree_from_file, {what}"),
    );
    let seen = std::sync::atomic::AtomicU64::new(0);
    let leaves = leaf_hashes_from_file(params, &f, prefix as u64, data.len() as u64, &|n| {
        seen.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(seen.into_inner(), data.len() as u64, "{what}: progress");
    let from_file_leaves = Tree::from_leaf_hashes(params, data.len() as u64, &leaves).unwrap();
    assert_matches(
        &from_file_leaves,
        &oracle,
        &format!("leaf_hashes_from_file, {what}"),
    );

    // Streaming, in pieces of awkward sizes.
    let mut b = TreeBuilder::new(params);
    let mut rest = data;
    for piece in [1usize, 1000, 5000, 3 << 20, 4 << 20].iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let n = (*piece).min(rest.len());
        b.update(&rest[..n]);
        rest = &rest[n..];
    }
    assert_matches(
        &b.finish().unwrap(),
        &oracle,
        &format!("TreeBuilder, {what}"),
    );

    // The root and digest alone, streamed the same way, zero runs as such.
    let mut r = RootHasher::new(params);
    let mut rest = data;
    for piece in [1usize, 1000, 5000, 3 << 20, 4 << 20].iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let n = (*piece).min(rest.len());
        let zeros = rest[..n].iter().take_while(|&&b| b == 0).count();
        r.update_zeros(zeros as u64);
        r.update(&rest[zeros..n]);
        rest = &rest[n..];
    }
    assert_eq!(r.finish().to_string(), oracle.printed, "RootHasher, {what}");

    // From leaf hashes computed one block at a time.
    let hasher = BlockHasher::new(params);
    let mut leaves = Vec::new();
    for block in data.chunks(params.block_size()) {
        leaves.extend_from_slice(hasher.hash_block(block).as_bytes());
    }
    let from_leaves = Tree::from_leaf_hashes(params, data.len() as u64, &leaves).unwrap();
    assert_matches(&from_leaves, &oracle, &format!("from_leaf_hashes, {what}"));
    let serial = Tree::from_leaf_hashes_serial(params, data.len() as u64, &leaves).unwrap();
    assert_matches(
        &serial,
        &oracle,
        &format!("from_leaf_hashes_serial, {what}"),
    );
    check_written(params, data.len() as u64, &leaves, &oracle, &what);
}

/// The tree [`write_tree_from_leaves`] writes (level 0 passed through, the leaves read in odd
/// pieces as a file gives them) is `fsverity digest`'s, byte for byte.
fn check_written(params: &Params, size: u64, leaves: &[u8], oracle: &Oracle, what: &str) {
    let mut out = vec![0xa5u8; oracle.tree.len()];
    let mut tree = write_tree_from_leaves(
        params,
        size,
        &mut |buf, at| {
            buf.copy_from_slice(&leaves[at as usize..][..buf.len()]);
            Ok(())
        },
        &mut |bytes, at| {
            out[at as usize..][..bytes.len()].copy_from_slice(bytes);
            Ok(())
        },
    )
    .unwrap();
    assert!(
        tree.bytes.is_empty(),
        "{what}: the blocks went to the writer"
    );
    tree.bytes = out;
    assert_matches(&tree, oracle, &format!("write_tree_from_leaves, {what}"));
}

fn matrix(alg: HashAlg) {
    if !have_fsverity() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = pseudo_random(*SIZES.iter().max().unwrap(), 1);
    for &bs in BLOCK_SIZES {
        for salt in salts() {
            let params = Params::new(alg, bs, &salt).unwrap();
            for &size in SIZES {
                check(dir.path(), &data[..size], &params, true);
            }
        }
    }
}

#[test]
fn sha256_all_sizes_block_sizes_salts() {
    matrix(HashAlg::Sha256);
}

#[test]
fn sha512_all_sizes_block_sizes_salts() {
    matrix(HashAlg::Sha512);
}

/// 300 MiB: three levels with SHA-256 and 4 KiB blocks.
#[test]
fn big_sha256_4k_no_salt() {
    if !have_fsverity() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = pseudo_random(300 << 20, 2);
    let params = Params::default();
    check(dir.path(), &data, &params, false);
    assert_eq!(build_tree(&params, &data).unwrap().geometry.num_levels(), 3);
}

/// 100 MiB + 5 bytes: five levels with SHA-512, 1 KiB blocks and a salt.
#[test]
fn big_sha512_1k_salted() {
    if !have_fsverity() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = pseudo_random((100 << 20) + 5, 3);
    let params = Params::new(HashAlg::Sha512, 1024, b"\x01\x02\x03 sealfs salt").unwrap();
    check(dir.path(), &data, &params, false);
    assert_eq!(build_tree(&params, &data).unwrap().geometry.num_levels(), 5);
}

/// A sparse file of 1.5 GiB (zero subtrees of every height but the top's) and a few data runs, against `fsverity digest` reading it whole: the
/// root hasher takes the holes as zero runs (subtrees of zeros hashed once per height), so its
/// way to the same digest shares nothing with a block-by-block tree but the hash.
#[test]
fn sparse_file_zero_runs() {
    if !have_fsverity() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse");
    let size: u64 = (3 << 29) + 4097;
    let runs: [(u64, Vec<u8>); 4] = [
        (0, pseudo_random(5000, 4)),
        ((1 << 28) + 123, pseudo_random(70_000, 5)),
        (5 << 28, pseudo_random(4096, 6)),
        (size - 3, vec![1, 2, 3]),
    ];
    let f = File::create(&path).unwrap();
    f.set_len(size).unwrap();
    for (at, bytes) in &runs {
        std::os::unix::fs::FileExt::write_all_at(&f, bytes, *at).unwrap();
    }
    drop(f);
    for params in [
        Params::default(),
        Params::new(HashAlg::Sha512, 1024, b"s").unwrap(),
    ] {
        let oracle = fsverity_digest(dir.path(), &path, &params);
        let mut r = RootHasher::new(&params);
        let mut at = 0;
        for (start, bytes) in &runs {
            r.update_zeros(start - at);
            r.update(bytes);
            at = start + bytes.len() as u64;
        }
        assert_eq!(r.data_size(), size);
        assert_eq!(r.finish().to_string(), oracle.printed, "{params:?}");
    }
}
