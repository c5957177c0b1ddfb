//! Differential tests against `veritysetup format --no-superblock`
//! (cryptsetup, Debian package `cryptsetup-bin`).
//!
//! dm-verity v1 hashes `H(salt ‖ block)` with the salt unpadded, so its tree
//! equals fs-verity's when the dm salt is the fs-verity salt zero-padded to
//! the hash's compression block size (or both are empty), data and hash
//! blocks have one size and the data is a whole number of blocks
//! (shared/reference/verity.md §3.4). Then the printed "Root hash" is our
//! Merkle root and the hash file is our tree, byte for byte.
//!
//! Without `veritysetup` the tests print `SKIP: cryptsetup-bin not
//! installed` and pass, except with `CI=true`, where they fail.

use std::fs;
use std::path::Path;
use std::process::Command;

use sealfs_testsupport::{
    assert_same_bytes, hex, need_program, oracle_guard, pseudo_random, run_ok,
};
use sealfs_verity::{build_tree, HashAlg, Params};

fn have_veritysetup() -> bool {
    oracle_guard(need_program("veritysetup", "--version", "cryptsetup-bin"))
}

/// Runs veritysetup on `data`; returns (root hash hex, hash file contents).
fn veritysetup(dir: &Path, data: &[u8], params: &Params) -> (String, Vec<u8>) {
    let data_path = dir.join("data");
    let hash_path = dir.join("hash");
    fs::write(&data_path, data).unwrap();
    let _ = fs::remove_file(&hash_path);
    // dm-verity prepends the salt as given: the salt `sealfs mount --kernel` hands it is padded
    // the way fs-verity pads it.
    let salt = if params.salt().is_empty() {
        "-".to_owned()
    } else {
        hex(&params.dm_verity_salt())
    };
    let bs = params.block_size();
    let stdout = run_ok(
        Command::new("veritysetup")
            .arg("format")
            .arg("--no-superblock")
            .arg(format!("--salt={salt}"))
            .arg(format!("--hash={}", params.alg()))
            .arg(format!("--data-block-size={bs}"))
            .arg(format!("--hash-block-size={bs}"))
            .arg(&data_path)
            .arg(&hash_path),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let root = stdout
        .lines()
        .find_map(|l| l.strip_prefix("Root hash:"))
        .expect("veritysetup printed a root hash")
        .trim()
        .to_owned();
    (root, fs::read(&hash_path).unwrap())
}

fn check(dir: &Path, data: &[u8], params: &Params) {
    assert_eq!(data.len() % params.block_size(), 0, "whole blocks only");
    let (root, hash_file) = veritysetup(dir, data, params);
    let tree = build_tree(params, data).unwrap();
    let what = format!("{} bytes, {params:?}", data.len());
    assert_eq!(tree.root.to_hex(), root, "{what}: root hash");
    assert_same_bytes(&tree.bytes, &hash_file, &format!("{what}: hash area"));
}

/// The reference configuration: SHA-256, 4 KiB blocks, no salt.
#[test]
fn sha256_4k_unsalted() {
    if !have_veritysetup() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let params = Params::default();
    // 128·128 + 1 blocks (64 MiB + 4 KiB) gives three levels.
    let data = pseudo_random((128 * 128 + 1) * 4096, 10);
    for blocks in [1, 2, 127, 128, 129, 256, 600, 128 * 128 + 1] {
        check(dir.path(), &data[..blocks * 4096], &params);
    }
}

/// Other algorithms, block sizes and (padded) salts.
#[test]
fn other_parameters() {
    if !have_veritysetup() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = pseudo_random(4 << 20, 11);
    let salt32: Vec<u8> = (1..=32).collect();
    let cases = [
        (HashAlg::Sha512, 4096, &[][..]),
        (HashAlg::Sha256, 1024, &salt32[..]),
        (HashAlg::Sha512, 1024, &[0x5a][..]),
        (HashAlg::Sha256, 65536, &[][..]),
    ];
    for (alg, bs, salt) in cases {
        let params = Params::new(alg, bs, salt).unwrap();
        for blocks in [1, 2, 65, 4 << 10] {
            let len = (blocks * bs).min(data.len());
            check(dir.path(), &data[..len], &params);
        }
    }
}
