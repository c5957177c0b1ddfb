//! Verified reads: every block checked against the seal's Merkle tree before use, hash blocks fetched
//! in the same batch as the data they check, and a damaged block failing only the reads that touch it.
//! Images come from the sealfs builder (run as a program; the reader does not depend on it).

use sealfs_format::{SealFooter, SealHeader};
use sealfs_reader::{
    DataLayout, Error, ExtentKind, Follow, Image, Options, ReadAt, SealInfo, VerifiedBlocks,
};
use sealfs_testsupport::build::{build_image, BuildOptions};
use sealfs_verity::{Digest, HashAlg, Params};
use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// A byte source that records every batch it is asked for.
struct Counting {
    bytes: Vec<u8>,
    batches: Mutex<Vec<Vec<(u64, usize)>>>,
    single_reads: AtomicU64,
}

impl ReadAt for Counting {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.single_reads.fetch_add(1, Relaxed);
        self.bytes.as_slice().read_at(buf, offset)
    }
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<()> {
        self.batches
            .lock()
            .unwrap()
            .push(reqs.iter().map(|(o, b)| (*o, b.len())).collect());
        for (o, b) in reqs.iter_mut() {
            self.bytes.as_slice().read_exact_at(b, *o)?;
        }
        Ok(())
    }
}

struct Sealed {
    info: SealInfo,
    erofs_len: u64,
    tree_len: u64,
}

fn parse_seal(bytes: &[u8]) -> Sealed {
    let n = bytes.len() as u64;
    let footer = SealFooter::parse(bytes[bytes.len() - 64..].try_into().unwrap(), n).unwrap();
    let ho = footer.header_offset.get() as usize;
    let header = SealHeader::parse(bytes[ho..ho + 512].try_into().unwrap(), &footer).unwrap();
    let params = Params::from_log_block_size(
        HashAlg::from_id(header.hash_algorithm).unwrap(),
        header.log_blocksize,
        header.salt(),
    )
    .unwrap();
    let root = Digest::new(params.alg(), &header.root_hash[..params.digest_size()]).unwrap();
    Sealed {
        info: SealInfo {
            params,
            data_length: header.erofs_length.get(),
            tree_offset: header.tree_offset.get(),
            root,
        },
        erofs_len: header.erofs_length.get(),
        tree_len: header.tree_length.get(),
    }
}

fn open_verified(s: &Sealed, bytes: Vec<u8>) -> (Image, Arc<Counting>, Arc<VerifiedBlocks>) {
    open_verified_with(s, bytes, &Options::default())
}

/// [`open_verified`] with `options`.
fn open_verified_with(
    s: &Sealed,
    bytes: Vec<u8>,
    options: &Options,
) -> (Image, Arc<Counting>, Arc<VerifiedBlocks>) {
    let src = Arc::new(Counting {
        bytes,
        batches: Mutex::new(Vec::new()),
        single_reads: AtomicU64::new(0),
    });
    let dynsrc: Arc<dyn ReadAt> = src.clone();
    let vb = Arc::new(VerifiedBlocks::new(dynsrc.clone(), dynsrc, s.info.clone(), 64).unwrap());
    let img = Image::open_blocks(vb.clone(), options).unwrap();
    (img, src, vb)
}

/// `sealfs build SRC OUT` through the builder library; the image bytes.
fn build(src: &Path, out: &Path) -> Vec<u8> {
    build_image(src, out, &BuildOptions::default()).unwrap();
    fs::read(out).unwrap()
}

fn fixture(dir: &Path) {
    fs::create_dir_all(dir.join("a/b")).unwrap();
    let big: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(dir.join("big"), &big).unwrap();
    for i in 0..300 {
        fs::write(dir.join(format!("a/f{i:03}")), vec![i as u8; i * 53 + 1]).unwrap();
    }
    fs::write(dir.join("a/b/other"), b"another file").unwrap();
    fs::write(dir.join("victim"), vec![7u8; 100_000]).unwrap();
}

#[test]
fn verified_reads_equal_source_and_batch_hashes_with_data() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fixture(&src);
    let bytes = build(&src, &tmp.path().join("img"));
    let s = parse_seal(&bytes);
    let (img, counting, vb) = open_verified(&s, bytes.clone());
    let opened_batches = counting.batches.lock().unwrap().len();

    // Cold sequential read of an 8 MiB file.
    let big = img.resolve("/big", Follow::Never).unwrap();
    let before = counting.batches.lock().unwrap().len();
    let data = img.read_vec(&big, 0, 8 << 20).unwrap();
    assert_eq!(
        data,
        fs::read(src.join("big")).unwrap(),
        "verified read equals the source"
    );
    let batches = counting.batches.lock().unwrap()[before..].to_vec();
    let (erofs, tree_end) = (s.erofs_len, s.erofs_len + s.tree_len);
    let is_hash = |o: u64| o >= erofs && o < tree_end;
    let mut hash_ranges = 0;
    for b in &batches {
        let hashes = b.iter().filter(|(o, _)| is_hash(*o)).count();
        let datas = b.len() - hashes;
        hash_ranges += hashes;
        assert!(datas >= 1, "a batch of hash blocks without data: {b:?}");
        assert_eq!(datas, 1, "one data range per batch: {b:?}");
    }
    // 8 MiB at 4 KiB is 2048 data blocks: 16 level-0 hash blocks (128 hashes each) and the levels above.
    let g = vb.geometry();
    println!(
        "cold 8 MiB read: {} batches, {} hash ranges in them, {} single reads; tree has {} levels",
        batches.len(),
        hash_ranges,
        counting.single_reads.load(Relaxed),
        g.num_levels()
    );
    assert!(
        batches.len() <= 8 + 2,
        "the reader should read 1 MiB per batch, got {}",
        batches.len()
    );
    assert!(
        (16..=16 + 2 * g.num_levels()).contains(&hash_ranges),
        "hash blocks fetched: {hash_ranges}"
    );
    assert_eq!(
        counting.single_reads.load(Relaxed),
        0,
        "every read goes through a batch"
    );
    let st = vb.stats();
    assert!(st.blocks_verified.load(Relaxed) as usize * 4096 >= 8 << 20);
    assert!(
        st.hash_bytes.load(Relaxed) * 100 <= st.data_bytes.load(Relaxed) * 2,
        "integrity reads above 2% of data"
    );

    // Warm: reading it again needs no hash block it verified before (they are cached).
    let hashes_before = st.hash_blocks_read.load(Relaxed);
    img.read_vec(&big, 0, 8 << 20).unwrap();
    assert_eq!(
        st.hash_blocks_read.load(Relaxed),
        hashes_before,
        "verified hash blocks are re-fetched"
    );

    // Everything else reads back equal too.
    for i in [0usize, 1, 150, 299] {
        let f = img.resolve(format!("/a/f{i:03}"), Follow::Never).unwrap();
        assert_eq!(
            img.read_vec(&f, 0, 1 << 20).unwrap(),
            vec![i as u8; i * 53 + 1]
        );
    }
    println!("opening took {opened_batches} batches; stats: {st:?}");
}

/// Offset in the image of the first mapped block of `path`'s data.
fn data_offset(bytes: &[u8], erofs_len: u64, path: &str) -> u64 {
    let img = Image::open_unverified(bytes[..erofs_len as usize].to_vec()).unwrap();
    let inode = img.resolve(path, Follow::Never).unwrap();
    img.map_range(&inode, 0, inode.size())
        .unwrap()
        .into_iter()
        .find_map(|e| match e.kind {
            ExtentKind::Mapped { physical } | ExtentKind::Inline { physical } => Some(physical),
            ExtentKind::Hole | ExtentKind::Compressed { .. } | ExtentKind::Fragment { .. } => None,
        })
        .unwrap()
}

fn is_verification(e: &Error) -> bool {
    matches!(e, Error::Verification { .. })
}

#[test]
fn a_damaged_block_fails_only_the_reads_that_touch_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fixture(&src);
    let bytes = build(&src, &tmp.path().join("img"));
    let s = parse_seal(&bytes);
    let check_others = |img: &Image| {
        let other = img.resolve("/a/b/other", Follow::Never).unwrap();
        assert_eq!(img.read_vec(&other, 0, 100).unwrap(), b"another file");
        let f = img.resolve("/a/f007", Follow::Never).unwrap();
        assert_eq!(img.read_vec(&f, 0, 1 << 20).unwrap(), vec![7u8; 7 * 53 + 1]);
    };

    // File data.
    let mut bad = bytes.clone();
    let off = data_offset(&bytes, s.erofs_len, "/victim") + 5000;
    bad[off as usize] ^= 0x40;
    let (img, _, vb) = open_verified(&s, bad);
    let victim = img.resolve("/victim", Follow::Never).unwrap();
    let err = img.read_vec(&victim, 0, 200_000).unwrap_err();
    assert!(is_verification(&err), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("data block {}", off / 4096)),
        "error names the block: {err}"
    );
    assert_eq!(
        img.read_vec(&victim, 0, 4096).unwrap(),
        vec![7u8; 4096],
        "the undamaged first block still reads"
    );
    check_others(&img);
    assert_eq!(vb.stats().failures.load(Relaxed), 1);

    // A directory block: listing it fails, other directories and files work.
    let mut bad = bytes.clone();
    let dir_off = {
        let img = Image::open_unverified(bytes[..s.erofs_len as usize].to_vec()).unwrap();
        let a = img.resolve("/a", Follow::Never).unwrap();
        match img.map_range(&a, 0, 1).unwrap()[0].kind {
            ExtentKind::Mapped { physical } | ExtentKind::Inline { physical } => physical,
            ExtentKind::Hole | ExtentKind::Compressed { .. } | ExtentKind::Fragment { .. } => {
                unreachable!()
            }
        }
    };
    bad[dir_off as usize + 20] ^= 1;
    let (img, _, _) = open_verified(&s, bad);
    let a = img.resolve("/a", Follow::Never);
    let listed = a.and_then(|a| img.read_dir_all(&a));
    assert!(
        listed.as_ref().is_err_and(is_verification),
        "listing a damaged directory: {listed:?}"
    );
    let b = img.resolve("/victim", Follow::Never).unwrap();
    assert_eq!(img.read_vec(&b, 0, 100_000).unwrap(), vec![7u8; 100_000]);

    // A level-0 tree block: the data it covers fails, data covered by other tree blocks reads.
    let mut bad = bytes.clone();
    let g = sealfs_verity::TreeGeometry::new(&s.info.params, s.erofs_len);
    let big_off = data_offset(&bytes, s.erofs_len, "/big");
    let loc = g.hash_location(0, big_off / 4096 + 1024).unwrap();
    let pos = s.info.tree_offset + loc.block * 4096 + loc.offset as u64;
    bad[pos as usize] ^= 0x80;
    let (img, _, _) = open_verified(&s, bad);
    let big = img.resolve("/big", Follow::Never).unwrap();
    let err = img.read_vec(&big, 4 << 20, 4096).unwrap_err();
    assert!(
        is_verification(&err) && err.to_string().contains("level 0"),
        "{err}"
    );
    let mut head = vec![0u8; 4096];
    assert_eq!(
        img.read(&big, 0, &mut head).unwrap(),
        4096,
        "a block under an intact tree block still reads"
    );
    check_others(&img);
    println!("damaged data, directory and tree blocks each failed only their own reads");
}

/// `read_direct`'s small reads of uncompressed data (at most 16 KiB: random reads that bypass the
/// page cache on a mount) keep the verified blocks they read in the cluster cache: reading them
/// again neither reads nor checks anything. A damaged block is never kept: every read of it fails,
/// and reads around it return the source's bytes. Longer reads (streaming) keep nothing, nor do
/// `read`'s reads (the page cache keeps them on a mount), nor any with the cluster cache off.
#[test]
fn small_direct_uncompressed_reads_keep_verified_blocks_and_never_a_damaged_one() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fixture(&src);
    let bytes = build(&src, &tmp.path().join("img"));
    let s = parse_seal(&bytes);
    let mut bad = bytes.clone();
    let victim_at = data_offset(&bytes, s.erofs_len, "/victim");
    assert_eq!(victim_at % 4096, 0, "the victim's data starts a block");
    bad[(victim_at + 5000) as usize] ^= 0x40;
    let big: Vec<u8> = fs::read(src.join("big")).unwrap();
    let read_direct = |img: &Image, inode: &sealfs_reader::Inode, off: u64, len: usize| {
        let mut v = vec![0u8; len];
        img.read_direct(inode, off, &mut v).map(|n| {
            v.truncate(n);
            v
        })
    };

    let (img, src_reads, vb) = open_verified(&s, bad.clone());
    let victim = img.resolve("/victim", Follow::Never).unwrap();
    let big_inode = img.resolve("/big", Follow::Never).unwrap();
    let verified = || vb.stats().blocks_verified.load(Relaxed);
    let source_reads =
        || src_reads.batches.lock().unwrap().len() as u64 + src_reads.single_reads.load(Relaxed);
    // Blocks 0 and 2 of the victim, a read across blocks 2 and 3, and 4 KiB of big at an odd offset.
    let reads: [(&sealfs_reader::Inode, u64, usize); 4] = [
        (&victim, 0, 4096),
        (&victim, 8192, 4096),
        (&victim, 10_000, 5000),
        (&big_inode, 3 << 20 | 777, 4096),
    ];
    let want = |inode: &sealfs_reader::Inode, off: u64, len: usize| -> Vec<u8> {
        if inode.nid() == victim.nid() {
            vec![7u8; len]
        } else {
            big[off as usize..off as usize + len].to_vec()
        }
    };
    for (inode, off, len) in reads {
        assert_eq!(
            read_direct(&img, inode, off, len).unwrap(),
            want(inode, off, len)
        );
    }
    let (before, verified_before, reads_before) = (img.stats(), verified(), source_reads());
    for (inode, off, len) in reads {
        assert_eq!(
            read_direct(&img, inode, off, len).unwrap(),
            want(inode, off, len)
        );
    }
    let again = img.stats().since(&before);
    assert_eq!(
        (
            again.cluster_misses,
            again.blocks_read,
            verified(),
            source_reads()
        ),
        (0, 0, verified_before, reads_before),
        "small reads again: served from the cluster cache, nothing read or checked ({again:?})"
    );
    assert_eq!(
        again.cluster_hits, 6,
        "blocks 0, 2, 3 of victim, two of big, and block 2 again"
    );

    // The damaged block (the victim's block 1) fails every small read of it, and is never kept.
    for _ in 0..3 {
        let err = read_direct(&img, &victim, 4096, 4096).unwrap_err();
        assert!(is_verification(&err), "{err}");
        let err = read_direct(&img, &victim, 4000, 200).unwrap_err();
        assert!(is_verification(&err), "{err}");
    }
    assert_eq!(
        vb.stats().failures.load(Relaxed),
        6,
        "every read of it checked it again"
    );
    assert_eq!(
        read_direct(&img, &victim, 0, 4096).unwrap(),
        vec![7u8; 4096]
    );

    // A streaming read (1 MiB) keeps nothing: its blocks are read again the next time.
    let before = img.stats();
    assert_eq!(
        read_direct(&img, &big_inode, 1 << 20, 1 << 20).unwrap(),
        big[1 << 20..2 << 20]
    );
    assert_eq!(
        read_direct(&img, &big_inode, 1 << 20, 1 << 20).unwrap(),
        big[1 << 20..2 << 20]
    );
    let streamed = img.stats().since(&before);
    assert_eq!(
        (streamed.blocks_read, streamed.cluster_hits),
        (512, 0),
        "{streamed:?}"
    );

    // With the cluster cache off, small reads are read and checked every time.
    let off = Options {
        cluster_cache_bytes: 0,
        ..Options::default()
    };
    let (img, _, vb) = open_verified_with(&s, bad, &off);
    let victim = img.resolve("/victim", Follow::Never).unwrap();
    let before = vb.stats().blocks_verified.load(Relaxed);
    for _ in 0..3 {
        assert_eq!(
            read_direct(&img, &victim, 8192, 4096).unwrap(),
            vec![7u8; 4096]
        );
    }
    assert_eq!(vb.stats().blocks_verified.load(Relaxed) - before, 3);
    assert_eq!(img.stats().cluster_hits, 0);
}

/// `prefetch_inodes` reads the metadata blocks of many inodes in few batches (runs of nearby
/// blocks, each verified together); the inodes and inline tails then read without another batch.
/// A damaged block inside a prefetched run fails only the inodes in that block: the run is dropped
/// and the others read their blocks on their own.
#[test]
fn prefetched_inodes_read_in_few_batches_and_a_damaged_block_fails_only_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fixture(&src);
    let bytes = build(&src, &tmp.path().join("img"));
    let s = parse_seal(&bytes);
    let plain = Image::open_unverified(bytes[..s.erofs_len as usize].to_vec()).unwrap();
    let a = plain.resolve("/a", Follow::Never).unwrap();
    let entries: Vec<_> = plain
        .read_dir_all(&a)
        .unwrap()
        .into_iter()
        .filter(|e| e.name.starts_with(b"f"))
        .collect();
    let nids: Vec<u64> = entries.iter().map(|e| e.nid).collect();
    let first32 = &nids[..32];
    let blocks: std::collections::BTreeSet<u64> = first32
        .iter()
        .map(|&nid| plain.inode(nid).unwrap().iloc() / 4096)
        .collect();

    // A prefetch reads at most a quarter of the block cache (so that it does not push out what the
    // cache holds): with the default 256 blocks, 64. Where the files' mtimes make the inodes
    // extended, these 32 inodes spread over up to 92 blocks (seen twice in full runs: blocks 8 to
    // 99, the prefetch stopped at block 92 and the last two inodes took a batch each), so the
    // cache here holds 1024.
    let options = Options {
        cache_blocks: 1024,
        ..Options::default()
    };
    let (img, counting, _) = open_verified_with(&s, bytes.clone(), &options);
    let a = img.resolve("/a", Follow::Never).unwrap();
    img.read_dir_all(&a).unwrap();
    let before = counting.batches.lock().unwrap().len();
    img.prefetch_inodes(first32);
    let prefetch_batches = counting.batches.lock().unwrap().len() - before;
    // The blocks are not contiguous (the builder places inodes by size, and whether an inode is
    // compact or extended depends on the files' mtimes), so how many runs they form varies from
    // build to build; nearby ones must still share requests.
    assert!(
        prefetch_batches < blocks.len(),
        "{prefetch_batches} batches for {} blocks",
        blocks.len()
    );
    for (e, nid) in entries.iter().zip(first32) {
        let inode = img.inode(*nid).unwrap();
        let i: usize = std::str::from_utf8(&e.name[1..]).unwrap().parse().unwrap();
        assert_eq!(
            img.read_vec(&inode, 0, 1 << 20).unwrap(),
            vec![i as u8; i * 53 + 1]
        );
    }
    let after = counting.batches.lock().unwrap().len() - before - prefetch_batches;
    // Each data block outside the inodes' own blocks may need a batch of its own: the full blocks
    // of a file over 4 KiB, and the tail of a file whose tail did not fit inline after its inode
    // (which files those are depends on where the inodes fell, so it is read off the image).
    let data_blocks: u64 = first32
        .iter()
        .map(|&nid| {
            let inode = plain.inode(nid).unwrap();
            match inode.layout() {
                DataLayout::FlatInline => inode.size() / 4096,
                _ => inode.nblocks(),
            }
        })
        .sum();
    // (The message says which blocks the reads after the prefetch fetched, and where the inodes
    // are.)
    let all = counting.batches.lock().unwrap();
    let prefetched = &all[before..before + prefetch_batches];
    let later = &all[before + prefetch_batches..];
    let places: Vec<(u64, u64, u64)> = first32
        .iter()
        .map(|&nid| {
            let inode = plain.inode(nid).unwrap();
            (inode.iloc(), inode.inode_isize(), inode.size())
        })
        .collect();
    assert!(
        after as u64 <= data_blocks,
        "{after} batches after the prefetch for {data_blocks} data blocks: the inodes' blocks were \
         not kept; prefetched {prefetched:?}, then {later:?}; inode blocks {blocks:?}; \
         (iloc, inode bytes, size) {places:?}"
    );
    drop(all);

    // Damage the middle block of the run: only the inodes in it fail.
    let mid = *blocks.iter().nth(blocks.len() / 2).unwrap();
    let mut bad = bytes.clone();
    bad[(mid * 4096 + 4095) as usize] ^= 0x20;
    let (img, _, vb) = open_verified_with(&s, bad, &options);
    let a = img.resolve("/a", Follow::Never).unwrap();
    img.read_dir_all(&a).unwrap();
    img.prefetch_inodes(first32);
    let mut failed = 0;
    for &nid in first32 {
        let in_mid = plain.inode(nid).unwrap().iloc() / 4096 == mid;
        match img.inode(nid) {
            Ok(_) => assert!(!in_mid, "nid {nid} in the damaged block {mid} read"),
            Err(e) => {
                assert!(in_mid && is_verification(&e), "nid {nid}: {e}");
                assert!(e.to_string().contains(&format!("data block {mid} ")), "{e}");
                failed += 1;
            }
        }
    }
    assert!(failed > 0);
    assert!(vb.stats().failures.load(Relaxed) >= 1);
}
