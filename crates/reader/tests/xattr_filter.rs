//! The xattr name bloom filter fast path (`COMPAT_XATTR_FILTER`).
//!
//! A set bit in an inode's `h_name_filter` means "no xattr of this inode hashes here": `get_xattr` of
//! such a name must answer "absent" without reading any xattr entry, inline or shared. A present
//! name's bit is always clear, so it must never be skipped. The kernel does the same, so these are
//! the rules a sealfs image relies on.

use sealfs_format::{
    xattr_filter_bit, xattr_name_filter, xattr_prefix, DataLayout,
    EROFS_FEATURE_COMPAT_XATTR_FILTER, EROFS_FT_DIR, EROFS_FT_REG_FILE, S_IFDIR, S_IFREG,
};
use sealfs_reader::{BlockSource, Image, Options, PlainBlocks};
use sealfs_testsupport::craft::{compact, dir_block, xattr_body, xattr_entry, Craft, BS, ROOT_NID};
use sealfs_testsupport::Rng;
use std::sync::{Arc, Mutex};

const FILE: u64 = 40;
const XATTR_BLK: u32 = 3;

/// A block source that records which blocks were read.
struct Tracking {
    inner: PlainBlocks<Vec<u8>>,
    reads: Mutex<Vec<u64>>,
}

impl BlockSource for Tracking {
    fn block_bits(&self) -> u8 {
        self.inner.block_bits()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn read_blocks(&self, first: u64, buf: &mut [u8]) -> sealfs_reader::Result<()> {
        let n = buf.len() as u64 >> self.block_bits();
        self.reads.lock().unwrap().extend(first..first + n);
        self.inner.read_blocks(first, buf)
    }
}

/// (short index, suffix, value)
type Attr = (u8, Vec<u8>, Vec<u8>);

fn random_attrs(rng: &mut Rng, n: usize) -> Vec<Attr> {
    let mut attrs: Vec<Attr> = Vec::new();
    while attrs.len() < n {
        let index = [1u8, 4, 6, 2, 3][rng.below(5) as usize];
        let suffix = if index == 2 || index == 3 {
            Vec::new()
        } else {
            let len = 1 + rng.below(20) as usize;
            (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
        };
        if attrs.iter().any(|(i, s, _)| *i == index && *s == suffix) {
            continue;
        }
        let vlen = rng.below(40) as usize;
        let value = rng.bytes(vlen);
        attrs.push((index, suffix, value));
    }
    attrs
}

fn full_name(index: u8, suffix: &[u8]) -> Vec<u8> {
    [xattr_prefix(index).unwrap(), suffix].concat()
}

/// A root directory holding file `f` whose xattrs are `inline` (after the inode) and `shared` (in
/// block 3), with the correct filter. `corrupt` makes the first inline entry claim more bytes than
/// the body has, so any scan of the entries fails.
fn image(
    inline: &[Attr],
    shared: &[Attr],
    filter_on: bool,
    reserved: u8,
    corrupt: bool,
) -> Vec<u8> {
    let mut c = Craft::new(4);
    let (block, used) = dir_block(&[
        (b".", ROOT_NID, EROFS_FT_DIR),
        (b"..", ROOT_NID, EROFS_FT_DIR),
        (b"f", FILE, EROFS_FT_REG_FILE),
    ]);
    c.put(2 * BS, &block);
    c.compact(
        ROOT_NID,
        &compact(S_IFDIR | 0o755, DataLayout::FlatPlain, used as u32, 2, 2),
        &[],
    );
    let mut area = Vec::new();
    let mut ids = Vec::new();
    for (i, s, v) in shared {
        ids.push((area.len() / 4) as u32);
        area.extend_from_slice(&xattr_entry(*i, s, v));
    }
    c.put(XATTR_BLK as usize * BS, &area);
    c.sb.xattr_blkaddr.set(XATTR_BLK);
    let entries: Vec<Vec<u8>> = inline
        .iter()
        .map(|(i, s, v)| xattr_entry(*i, s, v))
        .collect();
    let filter = xattr_name_filter(
        inline
            .iter()
            .chain(shared)
            .map(|(i, s, _)| (*i, s.as_slice())),
    );
    let (mut body, icount) = xattr_body(filter, &ids, &entries);
    if corrupt {
        let first = 12 + 4 * ids.len();
        body[first] = 255;
        body[first + 2..first + 4].copy_from_slice(&u16::MAX.to_le_bytes());
    }
    let mut f = compact(S_IFREG | 0o644, DataLayout::FlatPlain, 0, u32::MAX, 1);
    f.i_xattr_icount.set(icount);
    c.compact(FILE, &f, &body);
    if filter_on {
        c.sb.feature_compat
            .set(c.sb.feature_compat.get() | EROFS_FEATURE_COMPAT_XATTR_FILTER);
    }
    c.sb.xattr_filter_reserved = reserved;
    c.finish()
}

fn open_tracked(bytes: Vec<u8>) -> (Image, Arc<Tracking>) {
    let t = Arc::new(Tracking {
        inner: PlainBlocks::new(bytes),
        reads: Mutex::new(Vec::new()),
    });
    let img = Image::open_blocks(
        t.clone(),
        &Options {
            cache_blocks: 0,
            ..Options::default()
        },
    )
    .unwrap();
    (img, t)
}

#[test]
fn present_names_are_never_skipped() {
    let mut rng = Rng::scrambled(11);
    for round in 0..100 {
        let n = 1 + rng.below(16) as usize;
        let attrs = random_attrs(&mut rng, n);
        let split = rng.below(n as u64 + 1) as usize;
        let (inline, shared) = attrs.split_at(split);
        let img = Image::open_unverified(image(inline, shared, true, 0, false)).unwrap();
        let f = img.lookup_path("/f").unwrap();
        for (i, s, v) in &attrs {
            let name = full_name(*i, s);
            assert_eq!(
                img.get_xattr(&f, &name).unwrap().as_ref(),
                Some(v),
                "round {round}: {}",
                String::from_utf8_lossy(&name)
            );
        }
        let listed = img.list_xattrs(&f).unwrap();
        let want: Vec<Vec<u8>> = attrs.iter().map(|(i, s, _)| full_name(*i, s)).collect();
        assert_eq!(listed, want, "round {round}");
        assert_eq!(img.stats().filter_skips, 0, "round {round}");
    }
}

#[test]
fn absent_names_skip_the_xattr_area() {
    let mut rng = Rng::scrambled(12);
    let attrs = random_attrs(&mut rng, 6);
    let (inline, shared) = attrs.split_at(3);
    let (img, tracking) = open_tracked(image(inline, shared, true, 0, true));
    let f = img.lookup_path("/f").unwrap();
    let filter = img.xattr_body(&f).unwrap().unwrap().name_filter;
    tracking.reads.lock().unwrap().clear();

    let (mut skipped, mut scanned) = (0, 0);
    for k in 0..2000 {
        let index = [1u8, 4, 6][k % 3];
        let suffix = format!("absent.{k}.{}", rng.below(1000));
        let name = full_name(index, suffix.as_bytes());
        let before = img.stats();
        let r = img.get_xattr(&f, &name);
        let after = img.stats().since(&before);
        assert_eq!(after.xattr_lookups, 1);
        if filter & (1 << xattr_filter_bit(index, suffix.as_bytes())) != 0 {
            // Answered from the filter: the corrupted entries were never parsed.
            assert_eq!(r.unwrap(), None, "{suffix}");
            assert_eq!(after.filter_skips, 1);
            skipped += 1;
        } else {
            // The bit is clear (a collision with a present name): the entries were scanned.
            let e = r.unwrap_err();
            assert!(e.is_corrupted() && e.to_string().contains("nid 40"), "{e}");
            assert_eq!(after.filter_skips, 0);
            scanned += 1;
        }
    }
    assert!(
        skipped > 1000 && scanned > 0,
        "{skipped} skipped, {scanned} scanned"
    );
    // The shared area was never read: only the inode's own block was.
    let reads = tracking.reads.lock().unwrap();
    assert!(!reads.contains(&(XATTR_BLK as u64)), "{reads:?}");
    assert!(reads.iter().all(|&b| b == 0));
}

#[test]
fn the_filter_is_ignored_when_the_superblock_does_not_enable_it() {
    let mut rng = Rng::scrambled(13);
    let attrs = random_attrs(&mut rng, 4);
    for (filter_on, reserved) in [(false, 0), (true, 1)] {
        let img = Image::open_unverified(image(&attrs, &[], filter_on, reserved, true)).unwrap();
        assert!(!img.superblock().xattr_filter_enabled());
        let f = img.lookup_path("/f").unwrap();
        for k in 0..200 {
            let name = format!("user.absent{k}");
            assert!(img.get_xattr(&f, name.as_bytes()).is_err(), "{name}");
        }
        assert_eq!(img.stats().filter_skips, 0);
    }
}

#[test]
fn a_zero_filter_skips_nothing() {
    // An inode whose filter is 0 (all bits "maybe present") is always scanned.
    let mut rng = Rng::scrambled(14);
    let attrs = random_attrs(&mut rng, 3);
    let mut bytes = image(&attrs, &[], true, 0, false);
    let pos = FILE as usize * 32 + 32;
    bytes[pos..pos + 4].fill(0);
    // The filter lives in block 0, which the checksum covers: recompute it.
    let sum = sealfs_format::superblock_checksum(&bytes[1024..4096]);
    bytes[1028..1032].copy_from_slice(&sum.to_le_bytes());
    let img = Image::open_unverified(bytes).unwrap();
    let f = img.lookup_path("/f").unwrap();
    for k in 0..100 {
        assert_eq!(
            img.get_xattr(&f, format!("user.q{k}").as_bytes()).unwrap(),
            None
        );
    }
    assert_eq!(img.stats().filter_skips, 0);
    assert_eq!(img.stats().xattr_lookups, 100);
}
