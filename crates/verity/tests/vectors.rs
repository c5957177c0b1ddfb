//! Known-answer tests: every vector of shared/reference/verity.md §1.7
//! (produced there with fsverity-utils 1.5 and an independent Python
//! implementation).

use sealfs_verity::{build_tree, Digest, HashAlg, Params};

fn check(params: &Params, data: &[u8], digest: &str, root: Option<&str>) {
    let tree = build_tree(params, data).unwrap();
    let want: Digest = format!("{}:{digest}", params.alg()).parse().unwrap();
    assert_eq!(tree.digest(), want, "file digest of {} bytes", data.len());
    if let Some(root) = root {
        assert_eq!(tree.root.to_hex(), root, "root of {} bytes", data.len());
    }
    // At most one block: no tree.
    assert!(tree.bytes.is_empty());
}

fn seq4096() -> Vec<u8> {
    (0..4096).map(|i| i as u8).collect()
}

#[test]
fn empty() {
    check(
        &Params::default(),
        b"",
        "3d248ca542a24fc62d1c43b916eae5016878e2533c88238480b26128a1f1af95",
        Some(&"0".repeat(64)),
    );
}

#[test]
fn one_byte() {
    check(
        &Params::default(),
        b"a",
        "bce75948b9e7510293f8f2720412af9697c1479281323f3f220623fb8e94b557",
        Some("344bcc8eac81250e918967cb0ba2d1cd1ea9d548141cf318f2025c2ba93b6ed2"),
    );
}

#[test]
fn one_full_block_root_is_plain_sha256() {
    let data = seq4096();
    check(
        &Params::default(),
        &data,
        "15a0095100272ab90a2209e97f8a2c54dff6f84d2b29524f95d92fe23b6ef25b",
        Some("c8f5d0341d54d951a71b136e6e2afcb14d11ed8489a7ae126a8fee0df6ecf193"),
    );
    assert_eq!(
        HashAlg::Sha256.hash(&data).to_hex(),
        "c8f5d0341d54d951a71b136e6e2afcb14d11ed8489a7ae126a8fee0df6ecf193"
    );
}

#[test]
fn two_blocks() {
    let mut data = seq4096();
    data.push(b'x');
    let tree = build_tree(&Params::default(), &data).unwrap();
    assert_eq!(
        tree.digest().to_hex(),
        "25e41484abe7572d7ed5e2b9d8118bc94e170dc0b61c7e5f853f4c362f0a9e1a"
    );
    assert_eq!(
        tree.root.to_hex(),
        "d010b32ac9a3d742eb867751230c17ee8a724f7edf2442216ac90b6552b8061a"
    );
    assert_eq!(tree.bytes.len(), 4096);
}

#[test]
fn salted_32_bytes() {
    let salt: Vec<u8> = (0..32u8).map(|i| (i % 16) * 0x11).collect();
    assert_eq!(salt[..4], [0x00, 0x11, 0x22, 0x33]);
    check(
        &Params::new(HashAlg::Sha256, 4096, &salt).unwrap(),
        b"a",
        "93c387fb9d706c88033df5605574b190cdfbe6df26dc44e0db76184c6bc5b965",
        Some("12d306d9174473bc8953ac581c019479028249cf57f08da135e23f4928311669"),
    );
}

#[test]
fn sha512_1k_salted() {
    check(
        &Params::new(HashAlg::Sha512, 1024, &[0xab, 0xcd]).unwrap(),
        b"a",
        "1cf1662ee19e5c8b40eb02306977d64d236f21d4c6531226b78f1a66aeafb8fec1d8d175e1760dabbc0fa91f59871d01a5e51ceefc9b15575bd497901664a6c8",
        None,
    );
}
