//! The full fixture: one source tree holding every case the builder must get right.
//!
//! Needs root (devices, owners, trusted.* xattrs) and a filesystem that holds 64 KiB xattr values
//! (tmpfs). Everything is deterministic: two calls produce trees with equal content, names,
//! attributes and times (only inode numbers differ).

use crate::sys::{self, lchown, lsetxattr, makedev, mkfifo, mknod, set_mtime};
/// The PRNG of the fixtures (also reachable as `fixture::Rng`, where the CLI tests look for it).
pub use crate::Rng;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// POSIX ACL tags (`include/uapi/linux/posix_acl.h`).
pub const ACL_USER_OBJ: u16 = 0x01;
pub const ACL_USER: u16 = 0x02;
pub const ACL_GROUP_OBJ: u16 = 0x04;
pub const ACL_GROUP: u16 = 0x08;
pub const ACL_MASK: u16 = 0x10;
pub const ACL_OTHER: u16 = 0x20;
/// Id stored for entries without one.
pub const ACL_UNDEFINED_ID: u32 = u32::MAX;

/// The `system.posix_acl_*` xattr value for `entries` (tag, perm, id), which must already be in
/// the kernel's order (by tag, then id).
pub fn posix_acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut v = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

/// A valid `security.capability` value, `vfs_cap_data` revision 2 with the effective flag:
/// cap_net_bind_service permitted.
pub fn file_capability_v2() -> Vec<u8> {
    let mut v = 0x0200_0001u32.to_le_bytes().to_vec(); // VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
    v.extend_from_slice(&(1u32 << 10).to_le_bytes()); // permitted (low 32)
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable (low 32)
    v.extend_from_slice(&0u32.to_le_bytes()); // permitted (high 32)
    v.extend_from_slice(&0u32.to_le_bytes()); // inheritable (high 32)
    v
}

/// Size of the sparse file `files/sparse5g`.
pub const SPARSE_SIZE: u64 = 5 << 30;
/// A `SOURCE_DATE_EPOCH` that lies between the fixture's mtimes (no mtime has exactly this second).
pub const FIXTURE_SDE: i64 = 1_700_000_000;
/// Number of entries in `bigdir`.
pub const BIGDIR_ENTRIES: usize = 10_240;

/// Paths of the fixture worth naming in tests (relative to its root).
pub struct Fixture {
    /// The source root.
    pub root: PathBuf,
}

/// Relative paths that the exclusion test excludes, and the options that exclude them.
pub const EXCLUDE_ARGS: &[&str] = &[
    "--exclude-path",
    "excl/path_excluded_dir",
    "--exclude-path",
    "excl/path_excluded_file",
    "--exclude-path",
    "excl/deep/nested_excluded",
    "--exclude-regex",
    r"\.tmp$",
    "--exclude-regex",
    "^excl/rx_",
];

/// What [`EXCLUDE_ARGS`] exclude, written out by hand (not with a regex engine): exact paths, paths
/// ending in ".tmp", and paths starting with "excl/rx_". Subtrees of excluded directories go too
/// (the caller prunes).
pub fn exclude_args_predicate(rel: &[u8]) -> bool {
    rel == b"excl/path_excluded_dir"
        || rel == b"excl/path_excluded_file"
        || rel == b"excl/deep/nested_excluded"
        || rel.ends_with(b".tmp")
        || rel.starts_with(b"excl/rx_")
}

struct Fx {
    root: PathBuf,
    k: i64,
    dirs: Vec<(PathBuf, (i64, i64))>,
    rng: Rng,
}

impl Fx {
    fn p(&self, rel: &[u8]) -> PathBuf {
        if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(OsStr::from_bytes(rel))
        }
    }

    /// The next default mtime: a third of them above [`FIXTURE_SDE`], all with odd nanoseconds.
    fn tick(&mut self) -> (i64, i64) {
        self.k += 1;
        let k = self.k;
        let sec = if k % 3 == 0 {
            1_800_000_000 + k
        } else {
            1_500_000_000 + k
        };
        (sec, (k * 7_654_321) % 1_000_000_000)
    }

    fn dir(&mut self, rel: &[u8]) -> PathBuf {
        let t = self.tick();
        self.dir_t(rel, t)
    }

    /// Directory whose mtime is set at the very end (adding entries changes it).
    fn dir_t(&mut self, rel: &[u8], t: (i64, i64)) -> PathBuf {
        let p = self.p(rel);
        fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        sys::chmod(&p, 0o755).unwrap();
        self.dirs.push((p.clone(), t));
        p
    }

    fn file(&mut self, rel: &[u8], data: &[u8]) -> PathBuf {
        let t = self.tick();
        self.file_t(rel, data, t)
    }

    fn file_t(&mut self, rel: &[u8], data: &[u8], t: (i64, i64)) -> PathBuf {
        let p = self.p(rel);
        let mut f = File::create(&p).unwrap_or_else(|e| panic!("create {}: {e}", p.display()));
        f.write_all(data).unwrap();
        drop(f);
        sys::chmod(&p, 0o644).unwrap();
        set_mtime(&p, t.0, t.1).unwrap();
        p
    }

    fn rand_file(&mut self, rel: &[u8], size: usize) -> PathBuf {
        let data = self.rng.bytes(size);
        self.file(rel, &data)
    }

    fn symlink(&mut self, rel: &[u8], target: &[u8]) -> PathBuf {
        let p = self.p(rel);
        std::os::unix::fs::symlink(OsStr::from_bytes(target), &p)
            .unwrap_or_else(|e| panic!("symlink {}: {e}", p.display()));
        let t = self.tick();
        set_mtime(&p, t.0, t.1).unwrap();
        p
    }

    fn node(&mut self, rel: &[u8], mode: u32, dev: u64) -> PathBuf {
        let p = self.p(rel);
        mknod(&p, mode, dev).unwrap_or_else(|e| panic!("mknod {}: {e}", p.display()));
        sys::chmod(&p, mode & 0o7777).unwrap();
        let t = self.tick();
        set_mtime(&p, t.0, t.1).unwrap();
        p
    }

    fn link(&mut self, existing: &[u8], new: &[u8]) {
        let (a, b) = (self.p(existing), self.p(new));
        fs::hard_link(&a, &b)
            .unwrap_or_else(|e| panic!("link {} {}: {e}", a.display(), b.display()));
    }

    fn xattr(&mut self, rel: &[u8], name: &[u8], value: &[u8]) {
        let p = self.p(rel);
        lsetxattr(&p, name, value).unwrap_or_else(|e| {
            panic!(
                "setxattr {} {} ({} bytes): {e}",
                p.display(),
                crate::show(name),
                value.len()
            )
        });
    }

    fn own(&mut self, rel: &[u8], uid: u32, gid: u32) {
        let p = self.p(rel);
        lchown(&p, uid, gid).unwrap_or_else(|e| panic!("lchown {}: {e}", p.display()));
    }

    fn chmod(&mut self, rel: &[u8], mode: u32) {
        sys::chmod(&self.p(rel), mode).unwrap();
    }

    fn set_time(&mut self, rel: &[u8], sec: i64, nsec: i64) {
        set_mtime(&self.p(rel), sec, nsec).unwrap();
    }

    fn finish(self) {
        for (p, (s, ns)) in self.dirs.iter().rev() {
            set_mtime(p, *s, *ns).unwrap_or_else(|e| panic!("utimensat {}: {e}", p.display()));
        }
    }
}

/// Creates the full fixture in `dir` (created if missing, must be empty). See the module doc.
///
/// Contents: regular files of sizes around block boundaries, random data, a 4000-byte tail, zero
/// blocks, a 5 GiB sparse file with data at start/middle/end, a smaller multi-hole file; a
/// directory of 10 240 entries with names of varied lengths; names of every length 1..=255; names
/// sorting before "." and between "." and ".."; non-UTF-8 names and a newline in a name; symlinks
/// of 1, 100, 3000 and 4095 bytes, dangling and non-UTF-8 targets; char/block devices (incl.
/// 259:0x12345 and 4095:0xfffff), FIFO, socket; hard links across directories, in one directory,
/// of a symlink, a FIFO, a device and an empty file; setuid/setgid/sticky/0000/07777 modes; 16- and
/// 32-bit owners; mtimes with nanoseconds, negative, at 2^31 and above 2^32; xattrs of every
/// namespace (user, trusted, security.capability, security.selinux, POSIX ACLs) with values of 0
/// to 65535 bytes, a 255-byte name, 100 on one inode, shared by many inodes, on symlinks,
/// directories and the root; an exclusion playground `excl/`.
pub fn make_full_fixture(dir: &Path) -> Fixture {
    fs::create_dir_all(dir).unwrap();
    let mut fx = Fx {
        root: dir.to_path_buf(),
        k: 0,
        dirs: Vec::new(),
        rng: Rng::new(0xF1_C5),
    };
    fx.dirs
        .push((dir.to_path_buf(), (1_600_000_000, 123_456_789)));
    sys::chmod(dir, 0o755).unwrap();
    fx.own(b"", 7, 8);
    fx.xattr(b"", b"user.root", b"root xattr value");
    fx.xattr(b"", b"trusted.root_t", b"t");

    // ---- regular files -----------------------------------------------------------------
    fx.dir(b"files");
    fx.file(b"files/empty", b"");
    fx.file(b"files/one", b"x");
    for size in [4095usize, 4096, 4097, 8191, 8192, 8193, 12288] {
        fx.rand_file(format!("files/b{size}").as_bytes(), size);
    }
    fx.rand_file(b"files/rand100k", 100 * 1024);
    fx.rand_file(b"files/tail4000", 8192 + 4000);
    fx.rand_file(b"files/tail4000_only", 4000);
    fx.rand_file(b"files/b1m1", (1 << 20) + 1);
    fx.file(b"files/zeros4096", &[0u8; 4096]);
    fx.file(b"files/zeros10000", &[0u8; 10000]);
    let mut half = vec![0u8; 3 * 4096];
    half[4096..8192].copy_from_slice(&fx.rng.bytes(4096));
    fx.file(b"files/zero_data_zero", &half);
    // Small file with a large xattr: inode + xattrs + tail cannot share one block.
    fx.rand_file(b"files/xattr_pushes_tail", 2000);
    fx.xattr(b"files/xattr_pushes_tail", b"user.pad", &vec![b'p'; 3000]);
    fx.rand_file(b"files/tail_near_block_end", 3900);
    fx.xattr(b"files/tail_near_block_end", b"user.small", &[7u8; 90]);
    {
        // 5 GiB sparse: a few bytes at the start, in the middle and at the end.
        let p = fx.p(b"files/sparse5g");
        let f = File::create(&p).unwrap();
        f.set_len(SPARSE_SIZE).unwrap();
        f.write_all_at(b"START", 0).unwrap();
        f.write_all_at(b"MIDDLE", SPARSE_SIZE / 2 + 12345).unwrap();
        f.write_all_at(b"END!", SPARSE_SIZE - 4).unwrap();
        drop(f);
        let t = fx.tick();
        set_mtime(&p, t.0, t.1).unwrap();
    }
    {
        // 3 MiB with several holes, data not block aligned.
        let p = fx.p(b"files/holes3m");
        let f = File::create(&p).unwrap();
        f.set_len(3 << 20).unwrap();
        f.write_all_at(&fx.rng.bytes(4096), 0).unwrap();
        f.write_all_at(&fx.rng.bytes(100), (1 << 20) + 5).unwrap();
        f.write_all_at(&fx.rng.bytes(70000), (2 << 20) - 30000)
            .unwrap();
        f.write_all_at(b"z", (3 << 20) - 1).unwrap();
        drop(f);
        let t = fx.tick();
        set_mtime(&p, t.0, t.1).unwrap();
    }

    // Tails of many sizes (inline placement near block ends), some with xattrs in front.
    fx.dir(b"files/tails");
    for k in [0usize, 1] {
        for t in [
            1usize, 31, 32, 33, 100, 1000, 2047, 2048, 3000, 3500, 3968, 3999, 4000, 4031, 4032,
            4033, 4064, 4095,
        ] {
            let rel = format!("files/tails/s{k}_{t}");
            fx.rand_file(rel.as_bytes(), 4096 * k + t);
            if t % 2 == 1 {
                let x = fx.rng.bytes(t / 8);
                fx.xattr(rel.as_bytes(), b"user.tailpad", &x);
            }
        }
    }

    // Directories whose entries fill their blocks exactly, or leave one byte (with "." and
    // "..": 12 bytes of dirent per entry plus the name).
    for (dir, last) in [(&b"fullblock"[..], 232usize), (b"fullblock_minus1", 231)] {
        let mut rel = b"files/".to_vec();
        rel.extend_from_slice(dir);
        fx.dir(&rel);
        for i in 0..16usize {
            let len = if i == 15 { last } else { 243 };
            let name: Vec<u8> = (0..len)
                .map(|j| if j == 0 { b'a' + i as u8 } else { b'f' })
                .collect();
            fx.file(&[rel.as_slice(), b"/", &name].concat(), b"");
        }
    }
    fx.dir(b"files/fullblock2");
    for i in 0..32usize {
        // Two blocks: 16 entries each when "." and ".." sort first (names start with 'a'..).
        let len = if i == 31 { 244 } else { 243 };
        let name: Vec<u8> = (0..len)
            .map(|j| {
                if j == 0 {
                    b'a' + (i / 16) as u8
                } else if j == 1 {
                    b'a' + (i % 16) as u8
                } else {
                    b'g'
                }
            })
            .collect();
        fx.file(&[b"files/fullblock2/".as_slice(), &name].concat(), b"");
    }

    // ---- names of every length -----------------------------------------------------------
    fx.dir(b"names");
    const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    for len in 1..=255usize {
        let name: Vec<u8> = (0..len)
            .map(|i| ALNUM[(i * 7 + len) % ALNUM.len()])
            .collect();
        let rel = [b"names/".as_slice(), &name].concat();
        match len % 50 {
            0 => {
                fx.dir(&rel);
            }
            7 => {
                fx.symlink(&rel, format!("target{len}").as_bytes());
            }
            _ => {
                fx.file(&rel, len.to_string().as_bytes());
            }
        }
    }

    // ---- names that sort oddly -------------------------------------------------------------
    fx.dir(b"sorting");
    let odd: &[&[u8]] = &[
        b"-dash",
        b"#hash",
        b"!bang",
        b" space",
        b"\x01ctrl",
        b"\x7fdel",
        b".-",
        b".!",
        b"...",
        b".hidden",
        b".a",
        b"~tilde",
        b"Zed",
        b"a",
        b"A",
        b"a.b",
        b"a-b",
        b"a/b_not",
        b"\xff\xfe",
        b"\xff",
        b"caf\xc3\xa9",
        b"\xc3",
        b"\xe2\x82",
        b"\xf0\x9f\x98\x80",
        b"\x80\x80",
    ];
    for name in odd {
        let name: Vec<u8> = name
            .iter()
            .map(|&b| if b == b'/' { b'_' } else { b })
            .collect();
        let rel = [b"sorting/".as_slice(), &name].concat();
        fx.file(&rel, &name);
    }
    fx.dir(b"sorting/-subdir");
    fx.dir(b"sorting/\xfe\xfd");
    fx.file(b"sorting/\xfe\xfd/inside", b"inside non-UTF-8 dir");

    fx.dir(b"weird");
    for name in [
        &b"new\nline"[..],
        b"tab\there",
        b"back\\slash",
        b"quote\"s",
        b"*?[",
        b"a\xffb",
        b"\n",
    ] {
        let rel = [b"weird/".as_slice(), name].concat();
        fx.file(&rel, name);
    }

    // ---- a directory spanning many blocks -------------------------------------------------
    fx.dir(b"bigdir");
    for i in 0..BIGDIR_ENTRIES {
        let mut name = format!("e{i}").into_bytes();
        name.extend(std::iter::repeat_n(b'x', (i * 37) % 120));
        let rel = [b"bigdir/".as_slice(), &name].concat();
        if i % 1000 == 999 {
            fx.dir(&rel);
        } else if i % 997 == 5 {
            fx.symlink(&rel, b"../files/one");
        } else if i % 1500 == 3 {
            fx.file(&rel, b"hello");
        } else {
            fx.file(&rel, b"");
        }
    }

    // ---- symlinks ------------------------------------------------------------------------
    fx.dir(b"links");
    fx.symlink(b"links/short", b"target");
    fx.symlink(b"links/one", b"x");
    let t100: Vec<u8> = (0..100).map(|i| ALNUM[i % ALNUM.len()]).collect();
    fx.symlink(b"links/len100", &t100);
    let t3000: Vec<u8> = (0..3000)
        .map(|i| if i % 10 == 9 { b'/' } else { ALNUM[i % 62] })
        .collect();
    fx.symlink(b"links/len3000", &t3000);
    let mut t4095 = b"d/".repeat(2047);
    t4095.push(b'z');
    assert_eq!(t4095.len(), 4095);
    fx.symlink(b"links/len4095", &t4095);
    fx.symlink(b"links/nonutf8", b"\xff\xfe/target");
    fx.symlink(b"links/dangling", b"does/not/exist");
    fx.symlink(b"links/absolute", b"/etc/passwd");
    fx.symlink(b"links/dotdot", b"../files/one");
    fx.symlink(b"links/with_xattr", b"x");
    fx.xattr(b"links/with_xattr", b"trusted.sym", b"symlink xattr");
    fx.xattr(b"links/with_xattr", b"security.sym", b"sec");
    // A long target behind a large xattr: inode, xattrs and target cannot share one block.
    fx.symlink(b"links/len3000_big_xattr", &t3000);
    fx.xattr(b"links/len3000_big_xattr", b"trusted.big", &[b'q'; 2000]);
    fx.symlink(b"links/len4095_xattr", &t4095);
    fx.xattr(b"links/len4095_xattr", b"trusted.small", b"s");
    fx.symlink(b"links/owned", b"owned");
    fx.own(b"links/owned", 100_000, 4_000_000_000);
    fx.set_time(b"links/owned", -1000, 123_456_789);

    // ---- special files -------------------------------------------------------------------
    fx.dir(b"special");
    fx.node(b"special/null", libc::S_IFCHR | 0o666, makedev(1, 3));
    fx.node(b"special/whiteout", libc::S_IFCHR, makedev(0, 0));
    fx.node(b"special/sda1", libc::S_IFBLK | 0o660, makedev(8, 1));
    fx.node(
        b"special/nvme",
        libc::S_IFBLK | 0o600,
        makedev(259, 0x12345),
    );
    fx.node(
        b"special/maxdev",
        libc::S_IFCHR | 0o640,
        makedev(0xfff, 0xfffff),
    );
    fx.node(b"special/minor256", libc::S_IFCHR | 0o640, makedev(4, 256));
    {
        let p = fx.p(b"special/fifo");
        mkfifo(&p, 0o640).unwrap();
        sys::chmod(&p, 0o640).unwrap();
        let t = fx.tick();
        set_mtime(&p, t.0, t.1).unwrap();
    }
    {
        let p = fx.p(b"special/sock");
        drop(std::os::unix::net::UnixListener::bind(&p).expect("bind unix socket"));
        sys::chmod(&p, 0o755).unwrap();
        let t = fx.tick();
        set_mtime(&p, t.0, t.1).unwrap();
    }
    fx.own(b"special/sda1", 0, 6);
    fx.own(b"special/fifo", 1234, 5678);
    fx.xattr(b"special/fifo", b"trusted.fifo", b"fifo xattr");

    // ---- hard links ----------------------------------------------------------------------
    fx.dir(b"hard");
    fx.dir(b"hard/d1");
    fx.dir(b"hard/d2");
    fx.rand_file(b"hard/three", 5000);
    fx.xattr(b"hard/three", b"user.linked", b"one inode, three names");
    fx.link(b"hard/three", b"hard/d1/three_b");
    fx.link(b"hard/three", b"hard/d2/three_c");
    fx.file(b"hard/pair_a", b"pair");
    fx.link(b"hard/pair_a", b"hard/pair_b");
    fx.file(b"hard/empty_a", b"");
    fx.link(b"hard/empty_a", b"hard/empty_b");
    fx.symlink(b"hard/sym_a", b"symlink with two names");
    fx.link(b"hard/sym_a", b"hard/sym_b");
    {
        let p = fx.p(b"hard/fifo_a");
        mkfifo(&p, 0o600).unwrap();
        let t = fx.tick();
        set_mtime(&p, t.0, t.1).unwrap();
    }
    fx.link(b"hard/fifo_a", b"hard/d1/fifo_b");
    fx.node(b"hard/dev_a", libc::S_IFCHR | 0o600, makedev(10, 200));
    fx.link(b"hard/dev_a", b"hard/d2/dev_b");

    // ---- modes ---------------------------------------------------------------------------
    fx.dir(b"modes");
    for (name, mode) in [
        ("suid", 0o4755),
        ("sgid", 0o2755),
        ("suid_sgid", 0o6755),
        ("all", 0o7777),
        ("zero", 0o0000),
        ("sticky_file", 0o1644),
        ("plain", 0o0644),
        ("odd", 0o0517),
    ] {
        let rel = format!("modes/{name}");
        fx.file(rel.as_bytes(), name.as_bytes());
        fx.chmod(rel.as_bytes(), mode);
    }
    for (name, mode) in [
        ("sticky_dir", 0o1777),
        ("sgid_dir", 0o2775),
        ("zero_dir", 0o0000),
        ("private", 0o0700),
    ] {
        let rel = format!("modes/{name}");
        fx.dir(rel.as_bytes());
        fx.file(format!("{rel}/inside").as_bytes(), b"inside");
        fx.chmod(rel.as_bytes(), mode);
    }

    // ---- owners --------------------------------------------------------------------------
    fx.dir(b"owners");
    for (name, uid, gid) in [
        ("small", 1, 2),
        ("big", 100_000, 4_000_000_000),
        ("max", 4_294_967_294, 4_294_967_294),
        ("u65535", 65535, 65535),
        ("u65536", 65536, 65536),
        ("mixed", 0, 100_000),
    ] {
        let rel = format!("owners/{name}");
        fx.file(rel.as_bytes(), name.as_bytes());
        fx.own(rel.as_bytes(), uid, gid);
    }
    fx.dir(b"owners/bigdir_owner");
    fx.own(b"owners/bigdir_owner", 3_000_000_000, 65537);
    fx.file(b"owners/suid_owned", b"suid owned by 1000");
    fx.own(b"owners/suid_owned", 1000, 1000);
    fx.chmod(b"owners/suid_owned", 0o4711);

    // ---- times ---------------------------------------------------------------------------
    fx.dir(b"times");
    for (name, sec, nsec) in [
        ("negative", -1000i64, 123_456_789i64),
        ("minus_one", -1, 999_999_999),
        ("epoch", 0, 0),
        ("one_ns", 0, 1),
        ("y2038", 2_147_483_647, 999_999_999),
        ("y2038_plus", 2_147_483_648, 1),
        ("above_u32", 5_000_000_000, 500),
        ("far_future", 1 << 36, 42),
        ("same_a", 1_650_000_000, 0),
        ("same_b", 1_650_000_000, 0),
        ("same_c", 1_650_000_000, 0),
        ("same_d", 1_650_000_000, 0),
        ("same_ns_a", 1_650_000_000, 5),
        ("same_ns_b", 1_650_000_000, 5),
        ("sde_minus_one", FIXTURE_SDE - 1, 999_999_999),
        ("sde_plus_one", FIXTURE_SDE + 1, 0),
    ] {
        fx.file_t(
            format!("times/{name}").as_bytes(),
            name.as_bytes(),
            (sec, nsec),
        );
    }
    fx.dir_t(b"times/old_dir", (-86400 * 365, 7));

    // ---- xattrs --------------------------------------------------------------------------
    fx.dir(b"xattrs");
    fx.file(b"xattrs/sizes", b"various value sizes");
    fx.xattr(b"xattrs/sizes", b"user.empty", b"");
    fx.xattr(b"xattrs/sizes", b"user.one", b"1");
    fx.xattr(b"xattrs/sizes", b"user.three", b"abc");
    fx.xattr(b"xattrs/sizes", b"user.four", b"abcd");
    fx.xattr(b"xattrs/sizes", b"user.hundred", &[b'h'; 100]);
    fx.xattr(
        b"xattrs/sizes",
        b"user.binary",
        b"\0\x01\x02\xff\0nul inside\0",
    );
    let v4000 = fx.rng.bytes(4000);
    fx.xattr(b"xattrs/sizes", b"user.fourk", &v4000);
    let big = fx.rng.bytes(65535);
    fx.file(b"xattrs/big_user", b"65535-byte user xattr");
    fx.xattr(b"xattrs/big_user", b"user.big", &big);
    fx.file(b"xattrs/big_trusted", b"65535-byte trusted xattr");
    fx.xattr(b"xattrs/big_trusted", b"trusted.big", &big[..65535]);
    fx.file(b"xattrs/two_big", b"two 30000-byte xattrs");
    fx.xattr(b"xattrs/two_big", b"user.a", &big[..30000]);
    fx.xattr(b"xattrs/two_big", b"user.b", &big[30000..60000]);
    fx.dir(b"xattrs/dir_big_xattr");
    fx.file(b"xattrs/dir_big_xattr/child", b"child");
    fx.xattr(b"xattrs/dir_big_xattr", b"user.dirbig", &big[..40000]);
    let long_name = [b"user.".as_slice(), &[b'n'; 250]].concat();
    assert_eq!(long_name.len(), 255);
    fx.file(b"xattrs/long_name", b"255-byte xattr name");
    fx.xattr(b"xattrs/long_name", &long_name, b"long");
    let long_trusted = [b"trusted.".as_slice(), &[b't'; 247]].concat();
    fx.xattr(b"xattrs/long_name", &long_trusted, b"");
    fx.file(b"xattrs/many", b"100 xattrs");
    for i in 0..100 {
        fx.xattr(
            b"xattrs/many",
            format!("user.attr{i:03}").as_bytes(),
            format!("value {i}").as_bytes(),
        );
    }
    fx.file(b"xattrs/caps", b"\x7fELF pretend");
    fx.chmod(b"xattrs/caps", 0o755);
    fx.xattr(
        b"xattrs/caps",
        b"security.capability",
        &file_capability_v2(),
    );
    fx.file(b"xattrs/selinux", b"labelled");
    fx.xattr(
        b"xattrs/selinux",
        b"security.selinux",
        b"system_u:object_r:bin_t:s0\0",
    );
    fx.file(b"xattrs/known_names", b"names with known filter bits");
    for (name, value) in [
        (&b"security.ima"[..], &b"\x03\x02ima"[..]),
        (b"security.apparmor", b"unconfined"),
        (b"user.overlay.opaque", b"y"),
        (b"trusted.overlay.opaque", b"y"),
        (b"trusted.overlay.metacopy", b""),
        (b"user.mime_type", b"text/plain"),
        (b"trusted.overlay.nlink", b"U+2"),
    ] {
        fx.xattr(b"xattrs/known_names", name, value);
    }
    fx.file(b"xattrs/mixed", b"all namespaces");
    fx.xattr(b"xattrs/mixed", b"user.u", b"user");
    fx.xattr(b"xattrs/mixed", b"trusted.t", b"trusted");
    fx.xattr(b"xattrs/mixed", b"security.s", b"security");
    let acl_file = posix_acl(&[
        (ACL_USER_OBJ, 6, ACL_UNDEFINED_ID),
        (ACL_USER, 4, 1000),
        (ACL_USER, 6, 100_000),
        (ACL_GROUP_OBJ, 4, ACL_UNDEFINED_ID),
        (ACL_GROUP, 5, 2000),
        (ACL_MASK, 6, ACL_UNDEFINED_ID),
        (ACL_OTHER, 4, ACL_UNDEFINED_ID),
    ]);
    fx.file(b"xattrs/acl_file", b"acl");
    fx.xattr(b"xattrs/acl_file", b"system.posix_acl_access", &acl_file);
    fx.dir(b"xattrs/acl_dir");
    fx.file(
        b"xattrs/acl_dir/before_acl",
        b"created before the default ACL",
    );
    let acl_dir = posix_acl(&[
        (ACL_USER_OBJ, 7, ACL_UNDEFINED_ID),
        (ACL_USER, 7, 1001),
        (ACL_GROUP_OBJ, 5, ACL_UNDEFINED_ID),
        (ACL_MASK, 7, ACL_UNDEFINED_ID),
        (ACL_OTHER, 5, ACL_UNDEFINED_ID),
    ]);
    fx.xattr(b"xattrs/acl_dir", b"system.posix_acl_access", &acl_dir);
    fx.xattr(b"xattrs/acl_dir", b"system.posix_acl_default", &acl_dir);
    fx.dir(b"xattrs/default_acl_only");
    fx.xattr(
        b"xattrs/default_acl_only",
        b"system.posix_acl_default",
        &acl_dir,
    );
    // Shared xattrs: the same name and value on many inodes, plus one unique each.
    fx.dir(b"xattrs/shared");
    for i in 0..20 {
        let rel = format!("xattrs/shared/f{i:02}");
        fx.file(rel.as_bytes(), b"shared");
        fx.xattr(
            rel.as_bytes(),
            b"user.shared",
            b"the same value on twenty inodes",
        );
        fx.xattr(rel.as_bytes(), b"trusted.common", b"c");
        if i % 2 == 0 {
            fx.xattr(
                rel.as_bytes(),
                b"security.selinux",
                b"system_u:object_r:etc_t:s0\0",
            );
        }
        fx.xattr(
            rel.as_bytes(),
            b"user.unique",
            format!("unique {i}").as_bytes(),
        );
    }
    for i in 0..3 {
        let rel = format!("xattrs/shared/d{i}");
        fx.dir(rel.as_bytes());
        fx.xattr(
            rel.as_bytes(),
            b"user.shared",
            b"the same value on twenty inodes",
        );
        fx.xattr(
            rel.as_bytes(),
            b"security.selinux",
            b"system_u:object_r:etc_t:s0\0",
        );
    }
    fx.dir(b"xattrs/dir_xattr");
    fx.xattr(b"xattrs/dir_xattr", b"user.dirattr", b"on a directory");
    fx.xattr(b"xattrs/dir_xattr", b"trusted.dirattr", b"");

    // ---- exclusion playground --------------------------------------------------------------
    fx.dir(b"excl");
    fx.file(b"excl/keep.txt", b"kept");
    fx.file(b"excl/drop.tmp", b"dropped by regex");
    fx.file(b"excl/tmp_not_suffix", b"kept: .tmp is not a suffix here");
    fx.dir(b"excl/dir.tmp");
    fx.file(b"excl/dir.tmp/inner.txt", b"dropped with its directory");
    fx.dir(b"excl/path_excluded_dir");
    fx.dir(b"excl/path_excluded_dir/sub");
    fx.file(b"excl/path_excluded_dir/sub/file", b"dropped");
    fx.file(b"excl/path_excluded_file", b"dropped by path");
    fx.file(b"excl/path_excluded_file_not", b"kept: longer name");
    fx.dir(b"excl/deep");
    fx.dir(b"excl/deep/nested_excluded");
    fx.file(b"excl/deep/kept", b"kept");
    fx.file(b"excl/deep/also.tmp", b"dropped");
    fx.file(b"excl/rx_file", b"dropped by ^excl/rx_");
    fx.dir(b"excl/rx_dir");
    fx.file(b"excl/rx_dir/x", b"dropped");
    fx.file(b"excl/not_rx_", b"kept");
    fx.file(b"excl/hl_a", b"linked to an excluded name");
    fx.link(b"excl/hl_a", b"excl/hl_b.tmp");

    // ---- depth and emptiness ---------------------------------------------------------------
    let mut rel = b"deep".to_vec();
    fx.dir(&rel);
    for i in 0..40 {
        rel.extend_from_slice(format!("/level{i}").as_bytes());
        fx.dir(&rel);
    }
    rel.extend_from_slice(b"/bottom");
    fx.file(&rel, b"bottom");
    fx.dir(b"empty_dir");

    fx.finish();
    Fixture {
        root: dir.to_path_buf(),
    }
}
