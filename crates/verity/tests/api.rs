//! API behaviour: parameter validation, digests, geometry, the layout every
//! hash is found at, thread-count independence and error paths.

use std::fs::File;
use std::io::Write;

use sealfs_testsupport::pseudo_random;
use sealfs_verity::{
    build_tree, build_tree_from_file, descriptor, BlockHasher, Descriptor, Digest, Error, HashAlg,
    Params, Tree, TreeBuilder, TreeGeometry, DESCRIPTOR_SIZE,
};

#[test]
fn send_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<BlockHasher>();
    assert_send_sync::<Tree>();
    assert_send_sync::<TreeBuilder>();
    assert_send_sync::<Params>();
    assert_send_sync::<Error>();
}

#[test]
fn hash_alg() {
    for (s, alg) in [
        ("sha256", HashAlg::Sha256),
        ("SHA256", HashAlg::Sha256),
        ("1", HashAlg::Sha256),
        ("sha512", HashAlg::Sha512),
        ("2", HashAlg::Sha512),
    ] {
        assert_eq!(s.parse::<HashAlg>().unwrap(), alg);
    }
    for bad in ["", "sha1", "md5", "3", "sha-256"] {
        assert!(matches!(
            bad.parse::<HashAlg>(),
            Err(Error::UnknownHashAlg(_))
        ));
    }
    assert_eq!(HashAlg::Sha256.id(), 1);
    assert_eq!(HashAlg::Sha512.id(), 2);
    assert_eq!(HashAlg::Sha256.digest_size(), 32);
    assert_eq!(HashAlg::Sha512.digest_size(), 64);
    assert_eq!(HashAlg::Sha512.to_string(), "sha512");
    for id in [0, 3, 255] {
        assert!(matches!(
            HashAlg::from_id(id),
            Err(Error::UnknownHashAlgId(_))
        ));
    }
    for alg in HashAlg::ALL {
        assert_eq!(HashAlg::from_id(alg.id()).unwrap(), alg);
        assert_eq!(alg.name().parse::<HashAlg>().unwrap(), alg);
    }
}

#[test]
fn params_validation() {
    for alg in HashAlg::ALL {
        for bs in [1024, 2048, 4096, 8192, 16384, 32768, 65536] {
            let p = Params::new(alg, bs, &[]).unwrap();
            assert_eq!(p.block_size(), bs);
            assert_eq!(p.hashes_per_block(), bs / alg.digest_size());
        }
        for bs in [0, 1, 64, 128, 512, 1000, 4095, 4097, 131072, usize::MAX] {
            assert!(
                matches!(
                    Params::new(alg, bs, &[]),
                    Err(Error::InvalidBlockSize { .. })
                ),
                "{bs}"
            );
        }
        for log in [0u8, 9, 17, 63, 64, 200, 255] {
            assert!(Params::from_log_block_size(alg, log, &[]).is_err(), "{log}");
        }
        assert_eq!(
            Params::from_log_block_size(alg, 12, &[]).unwrap(),
            Params::new(alg, 4096, &[]).unwrap()
        );
    }
    assert!(Params::new(HashAlg::Sha256, 4096, &[7; 32]).is_ok());
    assert!(matches!(
        Params::new(HashAlg::Sha256, 4096, &[7; 33]),
        Err(Error::SaltTooLong(33))
    ));
    let p = Params::new(HashAlg::Sha512, 1024, &[1, 2, 3]).unwrap();
    assert_eq!(p.salt(), &[1, 2, 3]);
    assert_eq!(p.alg(), HashAlg::Sha512);
    assert_eq!(p.log_block_size(), 10);
    let d = Params::default();
    assert_eq!(
        (d.alg(), d.block_size(), d.salt()),
        (HashAlg::Sha256, 4096, &[][..])
    );
}

#[test]
fn digest_strings() {
    let hex64 = "0123456789abcdef".repeat(4);
    let s = format!("sha256:{hex64}");
    let d: Digest = s.parse().unwrap();
    assert_eq!(d.alg(), HashAlg::Sha256);
    assert_eq!(d.to_string(), s);
    assert_eq!(d.as_bytes()[..2], [0x01, 0x23]);
    assert_eq!(
        format!("sha256:{}", hex64.to_uppercase())
            .parse::<Digest>()
            .unwrap(),
        d
    );
    let s512 = format!("sha512:{}", "f".repeat(128));
    assert_eq!(s512.parse::<Digest>().unwrap().to_string(), s512);
    for bad in [
        String::new(),
        hex64.clone(),
        "sha256:".into(),
        format!("sha256:{}", &hex64[1..]),
        format!("sha256:{hex64}0"),
        format!("sha256:{}", "g".repeat(64)),
        format!("sha512:{hex64}"),
        format!("sha1:{}", "0".repeat(40)),
        format!("sha256: {}", &hex64[1..]),
        format!("sha256:{}é", &hex64[2..]),
    ] {
        assert!(
            matches!(bad.parse::<Digest>(), Err(Error::DigestSyntax(_))),
            "{bad:?}"
        );
    }
    assert!(matches!(
        Digest::new(HashAlg::Sha512, &[0; 32]),
        Err(Error::DigestLength { .. })
    ));
    let f = d.to_formatted_digest();
    assert_eq!(&f[..12], b"FSVerity\x01\x00\x20\x00");
    assert_eq!(&f[12..], d.as_bytes());
}

#[test]
fn short_block_is_zero_padded() {
    for params in [
        Params::default(),
        Params::new(HashAlg::Sha512, 65536, b"salt").unwrap(),
    ] {
        let h = BlockHasher::new(&params);
        let mut full = vec![0u8; params.block_size()];
        full[0] = b'a';
        assert_eq!(h.hash_block(b"a"), h.hash_block(&full));
        assert_eq!(
            h.hash_block(b""),
            h.hash_block(&vec![0; params.block_size()])
        );
    }
}

#[test]
fn salt_is_padded_and_prepended() {
    let params = Params::new(HashAlg::Sha256, 1024, &[9, 8, 7]).unwrap();
    let block = pseudo_random(1024, 5);
    let mut msg = vec![0u8; 64];
    msg[..3].copy_from_slice(&[9, 8, 7]);
    msg.extend_from_slice(&block);
    assert_eq!(
        BlockHasher::new(&params).hash_block(&block),
        HashAlg::Sha256.hash(&msg)
    );
    // No salt: no prefix at all.
    assert_eq!(
        BlockHasher::new(&Params::default()).hash_block(&[1; 4096]),
        HashAlg::Sha256.hash(&[1; 4096])
    );
}

#[test]
fn geometry_by_hand() {
    let p = Params::default(); // 4096 / 32 = 128 hashes per block
    let g = |size| TreeGeometry::new(&p, size);

    for size in [0, 1, 4096] {
        let g = g(size);
        assert_eq!((g.num_levels(), g.tree_size()), (0, 0), "{size}");
        assert_eq!(g.hash_location(0, 0), None);
    }
    assert_eq!(g(0).data_blocks(), 0);
    assert_eq!(g(1).data_blocks(), 1);

    let g2 = g(4097);
    assert_eq!(
        (g2.data_blocks(), g2.num_levels(), g2.tree_blocks()),
        (2, 1, 1)
    );

    let g128 = g(128 * 4096);
    assert_eq!((g128.num_levels(), g128.tree_size()), (1, 4096));

    // 129 blocks: level 0 has 2 blocks, level 1 has 1; stored [L1, L0a, L0b].
    let g = g(128 * 4096 + 1);
    assert_eq!(g.num_levels(), 2);
    assert_eq!((g.level_blocks(0), g.level_blocks(1)), (2, 1));
    assert_eq!((g.level_start(1), g.level_start(0)), (0, 1));
    assert_eq!(g.level_items(0), 129);
    assert_eq!(g.level_items(1), 2);
    assert_eq!(g.level_items(2), 1);
    assert_eq!(g.tree_size(), 3 * 4096);
    use sealfs_verity::HashLocation as L;
    assert_eq!(
        g.hash_location(0, 0),
        Some(L {
            block: 1,
            offset: 0
        })
    );
    assert_eq!(
        g.hash_location(0, 127),
        Some(L {
            block: 1,
            offset: 127 * 32
        })
    );
    assert_eq!(
        g.hash_location(0, 128),
        Some(L {
            block: 2,
            offset: 0
        })
    );
    assert_eq!(g.hash_location(0, 129), None);
    assert_eq!(
        g.hash_location(1, 1),
        Some(L {
            block: 0,
            offset: 32
        })
    );
    assert_eq!(g.hash_location(1, 2), None);
    assert_eq!(g.hash_location(2, 0), None);
    assert_eq!(g.hash_offset(0, 128), Some(2 * 4096));
    assert_eq!(g.hash_blocks_for(0, 0..1), 1..2);
    assert_eq!(g.hash_blocks_for(0, 100..129), 1..3);
    assert_eq!(g.hash_blocks_for(0, 128..1000), 2..3);
    assert_eq!(g.hash_blocks_for(1, 0..129), 0..1);
    assert_eq!(g.hash_blocks_for(0, 5..5), 0..0);
    assert_eq!(g.hash_blocks_for(2, 0..1), 0..0);
    assert_eq!(g.hash_blocks_for(0, 200..300), 0..0);

    // Huge sizes do not overflow.
    for alg in HashAlg::ALL {
        for bs in [1024, 65536] {
            let g = TreeGeometry::new(&Params::new(alg, bs, &[]).unwrap(), u64::MAX);
            assert!(g.tree_size() < u64::MAX / 8);
            assert!(g.num_levels() <= 64);
            let last = g.data_blocks() - 1;
            assert!(g.hash_location(0, last).is_some());
            assert!(!g.hash_blocks_for(0, 0..u64::MAX).is_empty());
        }
    }
}

/// Every hash in a built tree is where the geometry says, for every level.
#[test]
fn geometry_matches_built_tree() {
    // SHA-256 with 1 KiB blocks: 32 hashes per block. 1029 blocks give
    // levels of 33, 2 and 1 blocks.
    for params in [
        Params::new(HashAlg::Sha256, 1024, b"s").unwrap(),
        Params::new(HashAlg::Sha512, 1024, &[]).unwrap(),
    ] {
        let bs = params.block_size();
        let data = pseudo_random(1029 * bs - 100, 7);
        let tree = build_tree(&params, &data).unwrap();
        let g = &tree.geometry;
        let h = BlockHasher::new(&params);
        let d = params.digest_size();
        let tree_block = |i: u64| &tree.bytes[i as usize * bs..(i as usize + 1) * bs];
        assert_eq!(tree.bytes.len() as u64, g.tree_size());
        for level in 0..g.num_levels() {
            for j in 0..g.level_items(level) {
                let item = if level == 0 {
                    let s = j as usize * bs;
                    &data[s..(s + bs).min(data.len())]
                } else {
                    tree_block(g.level_start(level - 1) + j)
                };
                let off = g.hash_offset(level, j).unwrap() as usize;
                assert_eq!(&tree.bytes[off..off + d], h.hash_block(item).as_bytes());
            }
            // Slack after the last hash of a level is zero.
            let end = g.hash_offset(level, g.level_items(level) - 1).unwrap() as usize + d;
            let level_end = ((g.level_start(level) + g.level_blocks(level)) as usize) * bs;
            assert!(tree.bytes[end..level_end].iter().all(|&b| b == 0));
        }
        let top = g.num_levels() - 1;
        assert_eq!(g.level_blocks(top), 1);
        assert_eq!(g.level_start(top), 0);
        assert_eq!(h.hash_block(tree_block(0)), tree.root);
    }
}

#[test]
fn independent_of_thread_count() {
    // 1 KiB blocks, 32 hashes per block: levels of 768, 24 and 1 blocks,
    // so an upper level is hashed in parallel too.
    let params = Params::new(HashAlg::Sha256, 1024, b"threads").unwrap();
    let data = pseudo_random((24 << 20) - 3, 9);
    let build = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| build_tree(&params, &data).unwrap())
    };
    let one = build(1);
    let four = build(4);
    assert_eq!(one.root, four.root);
    assert!(one.bytes == four.bytes);
    assert_eq!(one.geometry.num_levels(), 3);

    // The streaming builder in small pieces agrees too.
    let mut b = TreeBuilder::new(&params);
    for piece in data.chunks(65_537) {
        b.update(piece);
    }
    assert_eq!(b.data_size(), data.len() as u64);
    let streamed = b.finish().unwrap();
    assert_eq!(streamed.root, one.root);
    assert!(streamed.bytes == one.bytes);
}

#[test]
fn one_block_and_empty() {
    let params = Params::new(HashAlg::Sha512, 2048, b"x").unwrap();
    let empty = build_tree(&params, b"").unwrap();
    assert_eq!(empty.root, Digest::zero(HashAlg::Sha512));
    assert!(empty.bytes.is_empty());
    let one = build_tree(&params, &[3; 2048]).unwrap();
    assert!(one.bytes.is_empty());
    assert_eq!(one.root, BlockHasher::new(&params).hash_block(&[3; 2048]));
    assert_eq!(
        Tree::from_leaf_hashes(&params, 2048, one.root.as_bytes())
            .unwrap()
            .root,
        one.root
    );
    assert_eq!(
        Tree::from_leaf_hashes(&params, 0, &[]).unwrap().root,
        empty.root
    );
    let f = tempfile::tempfile().unwrap();
    assert_eq!(
        build_tree_from_file(&params, &f, 0, 0).unwrap().root,
        empty.root
    );
}

#[test]
fn errors_not_panics() {
    let params = Params::default();
    // Wrong number of leaf hashes.
    for (size, len) in [(0u64, 32usize), (1, 0), (1, 31), (4097, 32), (4097, 96)] {
        assert!(matches!(
            Tree::from_leaf_hashes(&params, size, &vec![0; len]),
            Err(Error::LeafHashesLength { .. })
        ));
    }
    // Root of the wrong algorithm.
    assert!(matches!(
        descriptor(&params, 1, &Digest::zero(HashAlg::Sha512)),
        Err(Error::AlgMismatch { .. })
    ));
    // File shorter than requested; offset overflow.
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(&[1; 10_000]).unwrap();
    assert!(matches!(
        build_tree_from_file(&params, &f, 5000, 5001),
        Err(Error::Read { .. })
    ));
    assert!(matches!(
        build_tree_from_file(&params, &f, u64::MAX, 2),
        Err(Error::Read { .. })
    ));
    let big_short = build_tree_from_file(&params, &f, 0, 100 << 20);
    match big_short {
        Err(Error::Read { offset, source }) => {
            assert_eq!(offset, 0);
            assert_eq!(source.kind(), std::io::ErrorKind::UnexpectedEof);
        }
        other => panic!("{other:?}"),
    }
    let f = File::open("/dev/null").unwrap();
    assert!(build_tree_from_file(&params, &f, 0, 1).is_err());
}

#[test]
fn descriptor_roundtrip_and_rejects() {
    let params = Params::new(HashAlg::Sha512, 8192, &[0xaa; 5]).unwrap();
    let tree = build_tree(&params, &pseudo_random(100_000, 4)).unwrap();
    let bytes = tree.descriptor_bytes();
    assert_eq!(bytes.len(), DESCRIPTOR_SIZE);
    assert_eq!(&bytes[..4], &[1, 2, 13, 5]);
    assert_eq!(&bytes[4..8], &[0; 4]);
    assert_eq!(
        u64::from_le_bytes(bytes[8..16].try_into().unwrap()),
        100_000
    );
    assert_eq!(&bytes[16..80], tree.root.as_bytes());
    assert_eq!(&bytes[80..85], &[0xaa; 5]);
    assert!(bytes[85..].iter().all(|&b| b == 0));
    let parsed = Descriptor::from_bytes(&bytes).unwrap();
    assert_eq!(parsed, tree.descriptor());
    assert_eq!(parsed.digest(), tree.digest());
    assert_eq!(descriptor(&params, 100_000, &tree.root).unwrap(), bytes);

    // sig_size is ignored.
    let mut b = bytes;
    b[4] = 0x80;
    assert_eq!(Descriptor::from_bytes(&b).unwrap(), parsed);

    let sha256 = build_tree(&Params::default(), b"abc")
        .unwrap()
        .descriptor_bytes();
    let mutations: &[(&[u8; 256], usize, u8)] = &[
        (&bytes, 0, 2),   // version
        (&bytes, 0, 0),   // version
        (&bytes, 1, 3),   // algorithm
        (&bytes, 1, 0),   // algorithm
        (&bytes, 2, 9),   // log_blocksize too small
        (&bytes, 2, 17),  // too large
        (&bytes, 2, 255), // absurd
        (&bytes, 3, 33),  // salt size
        (&bytes, 3, 200), // salt size
        (&bytes, 90, 1),  // after the salt
        (&bytes, 112, 1), // reserved
        (&bytes, 255, 1), // reserved
        (&sha256, 48, 1), // after a 32-byte root
    ];
    for &(base, off, val) in mutations {
        let mut b = *base;
        b[off] = val;
        assert!(Descriptor::from_bytes(&b).is_err(), "byte {off} = {val}");
    }
    for len in [0, 255, 257] {
        assert!(Descriptor::from_bytes(&vec![0; len]).is_err());
    }
}

/// The multi-block paths (2-way interleaved SHA-NI for SHA-256 where the
/// CPU has it) agree with hashing one block at a time through `sha2`, for
/// every block size, with and without salt, with odd block counts and a
/// short last block.
#[test]
fn multi_block_paths_match_single_block() {
    let data = pseudo_random(9 * 65536 + 77, 12);
    for alg in HashAlg::ALL {
        for bs in [1024, 2048, 4096, 16384, 65536] {
            for salt in [&b""[..], b"x", &[0xff; 32]] {
                let params = Params::new(alg, bs, salt).unwrap();
                let h = BlockHasher::new(&params);
                for len in [
                    0,
                    1,
                    bs - 1,
                    bs,
                    bs + 1,
                    2 * bs,
                    3 * bs,
                    7 * bs + 5,
                    data.len(),
                ] {
                    let data = &data[..len.min(data.len())];
                    let mut want = Vec::new();
                    for block in data.chunks(bs) {
                        want.extend_from_slice(h.hash_block(block).as_bytes());
                    }
                    let mut got = vec![0u8; want.len()];
                    h.hash_blocks_into(data, &mut got);
                    assert!(got == want, "{params:?}, {len} bytes");
                    got.fill(0);
                    h.par_hash_blocks_into(data, &mut got);
                    assert!(got == want, "par, {params:?}, {len} bytes");
                }
            }
        }
    }
}
